//! The TCP server: serves every client and pattern at once, within limits,
//! and never closes a successful connection first.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use goodput_core::cts;
use goodput_core::pattern::{Pattern, PatternVerifier};
use goodput_core::result::{ConnectionRecord, Outcome, TcpSettings, TestKind, TestResult, WireProtocol};
use goodput_core::session::{Completion, Hello, Message, RejectCode, Verdict, VerifyMode, WireError};
use socket2::{Domain, SockRef, Socket, Type};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::link::{Failure, Link, Pacer};
use super::{
    drive, exchange, outcome_of_failure, outcome_of_verdict, tool_info, unix_ms_now, verdict_of, Event, Part,
    Progress, ServerLimits, TcpServerSpec,
};
use crate::counters::{Counters, RunClock};
use crate::socket::{set_rude_close, tcp_info};
use crate::{EngineError, Observer};

/// A server whose listeners are bound (so the ports are known) but which is
/// not yet serving.
pub struct BoundServer {
    spec: TcpServerSpec,
    listeners: Vec<TcpListener>,
    notices: Vec<String>,
}

fn listen_socket(addr: SocketAddr, reuse_port: bool) -> std::io::Result<std::net::TcpListener> {
    let s = Socket::new(Domain::for_address(addr), Type::STREAM.cloexec(), None)?;
    s.set_reuse_address(true)?;
    if reuse_port {
        s.set_reuse_port(true)?;
    }
    if addr.is_ipv6() {
        s.set_only_v6(true)?;
    }
    s.bind(&addr.into())?;
    s.listen(4096)?;
    s.set_nonblocking(true)?;
    Ok(s.into())
}

/// Binds every listen address of `spec`. Must be called inside a tokio
/// runtime.
pub fn bind_server(spec: TcpServerSpec) -> Result<BoundServer, EngineError> {
    let mut listeners = Vec::new();
    let mut notices = Vec::new();
    for &addr in &spec.listen {
        match listen_socket(addr, spec.reuse_port).and_then(TcpListener::from_std) {
            Ok(l) => listeners.push(l),
            Err(e) if spec.listen_defaulted && addr.is_ipv6() => {
                notices.push(format!("not listening on {addr}: {e} (IPv6 unavailable?)"));
            }
            Err(source) => return Err(EngineError::Listen { addr, source }),
        }
    }
    if listeners.is_empty() {
        return Err(EngineError::Config("no listen address could be bound".into()));
    }
    if spec.wire == WireProtocol::Cts && spec.cts.is_none() {
        return Err(EngineError::Config(
            "--wire cts needs the pattern and transfer on the server".into(),
        ));
    }
    Ok(BoundServer {
        spec,
        listeners,
        notices,
    })
}

struct ServerCtx {
    spec: TcpServerSpec,
    pattern: Pattern,
    counters: Counters,
    cancel: CancellationToken,
    clock: RunClock,
    tx: mpsc::UnboundedSender<Event>,
    active: AtomicU64,
    per_client: Mutex<HashMap<IpAddr, u64>>,
    next_index: AtomicU64,
}

/// Holds a connection's place in the server's concurrency limits.
struct Admission<'a> {
    ctx: &'a ServerCtx,
    ip: IpAddr,
}

impl<'a> Admission<'a> {
    fn try_admit(ctx: &'a ServerCtx, ip: IpAddr) -> Result<Self, String> {
        let limits = &ctx.spec.limits;
        let mut map = ctx.per_client.lock().expect("lock never poisoned");
        let mine = map.entry(ip).or_insert(0);
        if *mine >= limits.max_per_client {
            return Err(format!(
                "{ip} already has {} connections, the server's limit per client",
                limits.max_per_client
            ));
        }
        if ctx.active.load(Relaxed) >= limits.max_connections {
            return Err(format!(
                "the server is at its limit of {} concurrent connections",
                limits.max_connections
            ));
        }
        *mine += 1;
        ctx.active.fetch_add(1, Relaxed);
        Ok(Self { ctx, ip })
    }
}

impl Drop for Admission<'_> {
    fn drop(&mut self) {
        self.ctx.active.fetch_sub(1, Relaxed);
        let mut map = self.ctx.per_client.lock().expect("lock never poisoned");
        if let Some(n) = map.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                map.remove(&self.ip);
            }
        }
    }
}

impl ServerLimits {
    /// Checks a hello against the limits; the error is the reason sent back.
    fn check(&self, h: &Hello) -> Result<(), String> {
        if h.transfer > self.max_transfer {
            return Err(format!(
                "transfer of {} bytes is above the server's limit of {} bytes",
                h.transfer, self.max_transfer
            ));
        }
        if u64::from(h.server_buffer) > self.max_buffer {
            return Err(format!(
                "buffer of {} bytes is above the server's limit of {} bytes",
                h.server_buffer, self.max_buffer
            ));
        }
        Ok(())
    }
}

impl BoundServer {
    /// The addresses the server listens on (with the real ports).
    pub fn local_addrs(&self) -> Vec<SocketAddr> {
        self.listeners
            .iter()
            .filter_map(|l| l.local_addr().ok())
            .collect()
    }

    /// Serves until `cancel`, the time limit or the exit count.
    pub async fn run(
        self,
        observer: &mut dyn Observer,
        cancel: CancellationToken,
    ) -> Result<TestResult, EngineError> {
        for n in &self.notices {
            observer.on_notice(n);
        }
        let clock = RunClock::start();
        let started_unix_ms = unix_ms_now();
        let (tx, rx) = mpsc::unbounded_channel();
        let addrs = self.local_addrs();
        let ctx = Arc::new(ServerCtx {
            pattern: Pattern::new(self.spec.limits.max_buffer.min(4 << 20) as usize),
            spec: self.spec,
            counters: Counters::default(),
            cancel: cancel.clone(),
            clock,
            tx,
            active: AtomicU64::new(0),
            per_client: Mutex::new(HashMap::new()),
            next_index: AtomicU64::new(0),
        });
        let tracker = TaskTracker::new();
        for listener in self.listeners {
            let ctx = ctx.clone();
            let conns = tracker.clone();
            tracker.spawn(async move {
                loop {
                    let accepted = tokio::select! {
                        biased;
                        _ = ctx.cancel.cancelled() => break,
                        r = listener.accept() => r,
                    };
                    match accepted {
                        Ok((stream, peer)) => {
                            let ctx = ctx.clone();
                            conns.spawn(async move {
                                let record = serve(&ctx, stream, peer).await;
                                let _ = ctx.tx.send(Event::Record(Box::new(record)));
                            });
                        }
                        // Out of file descriptors or a connection that died in
                        // the backlog: keep serving everyone else.
                        Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
                    }
                }
            });
        }
        let done = {
            let tracker = tracker.clone();
            let cancel = cancel.clone();
            async move {
                cancel.cancelled().await;
                tracker.close();
                tracker.wait().await;
            }
        };
        let spec = &ctx.spec;
        let driven = drive(
            rx,
            &ctx.counters,
            clock,
            observer,
            spec.status_interval,
            spec.time_limit,
            spec.exit_after,
            spec.max_records,
            &cancel,
            done,
        )
        .await;
        Ok(TestResult {
            schema_version: goodput_core::result::SCHEMA_VERSION,
            tool: tool_info(),
            kind: TestKind::TcpServer,
            started_unix_ms,
            settings: TcpSettings {
                wire: spec.wire,
                pattern: spec.cts.map(|c| c.pattern),
                verify: spec.cts.map(|c| c.verify),
                transfer_bytes: None,
                buffer_bytes: None,
                push_bytes: None,
                pull_bytes: None,
                connections: None,
                iterations: None,
                rate_limit_bytes_per_second: None,
                rate_period_ms: None,
                shutdown: None,
                addresses: addrs.iter().map(|a| a.to_string()).collect(),
                status_interval_ms: spec.status_interval.as_millis() as u64,
                time_limit_ms: spec.time_limit.map(|d| d.as_millis() as u64),
            },
            intervals: driven.intervals,
            connections: driven.records.kept,
            connections_omitted: driven.records.omitted,
            summary: driven.summary,
            end: driven.end,
        })
    }
}

fn reject_code(e: &WireError) -> RejectCode {
    match e {
        WireError::UnsupportedVersion(_) => RejectCode::UnsupportedVersion,
        _ => RejectCode::Malformed,
    }
}

async fn serve(ctx: &ServerCtx, stream: TcpStream, peer: SocketAddr) -> ConnectionRecord {
    let spec = &ctx.spec;
    let index = ctx.next_index.fetch_add(1, Relaxed);
    let mut record = ConnectionRecord {
        index,
        connection_id: String::new(),
        local_address: stream.local_addr().map(|a| a.to_string()).unwrap_or_default(),
        remote_address: peer.to_string(),
        start_s: ctx.clock.now_s(),
        time_slice_s: 0.0,
        elapsed_ns: 0,
        pattern: None,
        transfer_bytes: 0,
        buffer_bytes: 0,
        rate_limit_bytes_per_second: 0,
        sent_bytes: 0,
        received_bytes: 0,
        outcome: Outcome::Succeeded,
        peer: None,
        shutdown: None,
        tcp_info: None,
    };
    let link = Link::new(&stream, &ctx.counters, &ctx.cancel, spec.idle_timeout, ctx.clock);
    let admission = Admission::try_admit(ctx, peer.ip());
    let uuid = uuid::Uuid::new_v4();
    record.connection_id = uuid.hyphenated().to_string();

    // Learn (goodput wire) or assume (cts wire) what this connection does.
    let hello = match spec.wire {
        WireProtocol::Goodput => {
            let hello = match link.guard(link.read_message("hello")).await {
                Ok(Message::Hello(h)) => Ok(h),
                Ok(other) => Err((RejectCode::Malformed, format!("expected Hello, got {other:?}"))),
                Err(Failure::Wire(e)) => Err((reject_code(&e), e.to_string())),
                Err(f) => return finish_failed(ctx, &link, record, f).await,
            };
            let hello = hello.and_then(|h| {
                spec.limits.check(&h).map_err(|r| (RejectCode::OverLimit, r))?;
                if let Err(r) = &admission {
                    return Err((RejectCode::TooManyConnections, r.clone()));
                }
                Ok(h)
            });
            match hello {
                Ok(h) => h,
                Err((code, reason)) => {
                    let _ = link
                        .write_message(
                            &Message::Reject {
                                code,
                                reason: reason.clone(),
                            },
                            "reject",
                        )
                        .await;
                    record.outcome = Outcome::rejected(code, &reason);
                    // The client closes after reading the reason; wait for it briefly.
                    let _ =
                        tokio::time::timeout(Duration::from_secs(2), link.guard(link.await_peer_close(true)))
                            .await;
                    let _ = set_rude_close(&stream);
                    record.time_slice_s = ctx.clock.now_s();
                    return record;
                }
            }
        }
        WireProtocol::Cts => {
            if admission.is_err() {
                // ctsTraffic has no way to say why: reset the connection.
                let _ = set_rude_close(&stream);
                record.outcome =
                    Outcome::rejected(RejectCode::TooManyConnections, "over the server's limits");
                record.time_slice_s = ctx.clock.now_s();
                return record;
            }
            let p = spec.cts.expect("checked at bind");
            Hello {
                pattern: p.pattern,
                verify: p.verify,
                transfer: p.transfer,
                push_segment: p.push_bytes,
                pull_segment: p.pull_bytes,
                server_buffer: p.buffer.min(u64::from(u32::MAX)) as u32,
                server_send_buffer: 0,
                server_recv_buffer: 0,
                server_rate: 0,
                rate_period_ms: 100,
                burst_count: 0,
                burst_delay_ms: 0,
            }
        }
    };
    record.pattern = Some(hello.pattern);
    record.transfer_bytes = hello.transfer;
    record.buffer_bytes = u64::from(hello.server_buffer);
    record.rate_limit_bytes_per_second = hello.server_rate;
    {
        let s = SockRef::from(&stream);
        if hello.server_send_buffer > 0 {
            let _ = s.set_send_buffer_size(hello.server_send_buffer as usize);
        }
        if hello.server_recv_buffer > 0 {
            let _ = s.set_recv_buffer_size(hello.server_recv_buffer as usize);
        }
        if let Err(e) = spec.socket.apply(&s, &peer) {
            return finish_failed(
                ctx,
                &link,
                record,
                Failure::Net {
                    during: "setsockopt",
                    err: e,
                },
            )
            .await;
        }
    }
    let greeting = async {
        match spec.wire {
            WireProtocol::Goodput => {
                let accept = Message::Accept {
                    connection_id: *uuid.as_bytes(),
                };
                link.write_message(&accept, "accept").await
            }
            WireProtocol::Cts => {
                let id = cts::encode_connection_id(&record.connection_id).expect("uuid text is 36 bytes");
                link.write_all(&id, "connection id").await
            }
        }
    };
    if let Err(f) = link.guard(greeting).await {
        return finish_failed(ctx, &link, record, f).await;
    }

    let part = Part {
        plan: hello.plan(),
        is_client: false,
        buffer: hello.server_buffer as usize,
        verify: hello.verify == VerifyMode::Data,
        pattern: &ctx.pattern,
    };
    let burst = (hello.burst_count > 0).then(|| {
        (
            hello.burst_count,
            Duration::from_millis(hello.burst_delay_ms.into()),
        )
    });
    let mut pacer = Pacer::new(
        hello.server_rate,
        Duration::from_millis(hello.rate_period_ms.max(1).into()),
        burst,
    );
    let mut verifier = PatternVerifier::new();
    let mut progress = Progress::default();
    let t0 = ctx.clock.now_ns();
    let result = match tokio::time::timeout(
        spec.limits.max_duration,
        link.guard(exchange(&link, &part, &mut pacer, &mut verifier, &mut progress)),
    )
    .await
    {
        Ok(r) => r,
        Err(_) => Err(Failure::Cancelled),
    };
    record.elapsed_ns = ctx.clock.now_ns() - t0;
    record.sent_bytes = progress.sent;
    record.received_bytes = progress.received;
    let verdict = match &result {
        Ok(()) => Verdict::Success,
        Err(f) => verdict_of(f),
    };
    // The client reads the completion where it expects the end of the
    // server's data. A server that fails before sending all of it must not
    // send one (the client would read it as pattern bytes): it resets, and
    // its own record carries the reason.
    let client_expects_trailer = progress.sent == part.plan.server_to_client;
    let trailer = match spec.wire {
        WireProtocol::Goodput if result.is_err() && !client_expects_trailer => Ok(()),
        WireProtocol::Goodput => {
            let c = Completion {
                sent: progress.sent,
                received: progress.received,
                elapsed_ns: record.elapsed_ns,
                verdict,
            };
            link.guard(link.write_message(&Message::Completion(c), "completion"))
                .await
        }
        WireProtocol::Cts if result.is_ok() => link.guard(link.write_all(cts::DONE, "DONE")).await,
        WireProtocol::Cts => Ok(()),
    };
    match (result, trailer) {
        (Err(f), Ok(())) if spec.wire == WireProtocol::Goodput && client_expects_trailer => {
            // The client is reading towards our verdict: let it arrive.
            let _ = tokio::time::timeout(
                spec.idle_timeout,
                link.guard(async {
                    link.flush_and_drain().await;
                    Ok(())
                }),
            )
            .await;
            finish_failed(ctx, &link, record, f).await
        }
        (Err(f), _) => finish_failed(ctx, &link, record, f).await,
        (Ok(()), Err(f)) => finish_failed(ctx, &link, record, f).await,
        (Ok(()), Ok(())) => {
            // The client closes first (FIN or RST); only then does the server.
            match link.guard(link.await_peer_close(true)).await {
                Ok(()) => record.outcome = Outcome::Succeeded,
                Err(Failure::TooMuch) => record.outcome = outcome_of_verdict(&Verdict::TooMuchData, "server"),
                Err(f) => record.outcome = outcome_of_failure(&f, "server"),
            }
            record.tcp_info = tcp_info(&stream).ok();
            if !record.outcome.is_success() {
                let _ = set_rude_close(&stream);
            }
            drop(admission);
            record.time_slice_s = ctx.clock.now_s();
            record
        }
    }
}

/// Records a failure and resets the connection (ctsTraffic closes every
/// failed connection with an RST).
async fn finish_failed(
    ctx: &ServerCtx,
    link: &Link<'_>,
    mut record: ConnectionRecord,
    f: Failure,
) -> ConnectionRecord {
    record.outcome = outcome_of_failure(&f, "server");
    record.tcp_info = tcp_info(link.stream).ok();
    let _ = set_rude_close(link.stream);
    record.time_slice_s = ctx.clock.now_s();
    record
}
