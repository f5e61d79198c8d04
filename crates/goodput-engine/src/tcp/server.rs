//! The TCP server: serves every client and pattern at once, within limits,
//! and never closes a successful connection first.

use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use goodput_core::cts;
use goodput_core::pattern::Pattern;
use goodput_core::plan::TcpPattern;
use goodput_core::result::{ConnectionRecord, Outcome, TcpSettings, TestKind, TestResult, WireProtocol};
use goodput_core::session::{Completion, Hello, Message, RejectCode, Verdict, VerifyMode, WireError};
use socket2::SockRef;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::link::{Failure, Link, Pacer};
use super::{
    drive, outcome_of_failure, outcome_of_verdict, unix_ms_now, verdict_of, DataPhase, Event, Part, PhaseEnd,
    Progress, RunControl, ServerLimits, Shared, TcpServerSpec,
};
use crate::counters::RunClock;
use crate::socket::{set_rude_close, tcp_info};
use crate::{EngineError, Observer};

/// A server whose listeners are bound (so the ports are known) but which is
/// not yet serving.
pub struct BoundServer {
    spec: TcpServerSpec,
    listeners: Vec<TcpListener>,
    notices: Vec<String>,
}

/// Binds every listen address of `spec`. Must be called inside a tokio
/// runtime.
pub fn bind_server(spec: TcpServerSpec) -> Result<BoundServer, EngineError> {
    if matches!(
        spec.wire,
        WireProtocol::Iperf3
            | WireProtocol::Stamp
            | WireProtocol::Raw
            | WireProtocol::Media
            | WireProtocol::Quic
    ) {
        return Err(EngineError::Config(format!(
            "the {:?} wire is not a TCP test protocol",
            spec.wire
        )));
    }
    let mut listeners = Vec::new();
    let mut notices = Vec::new();
    for &addr in &spec.listen {
        match crate::socket::tcp_listener(addr, spec.reuse_port, true, 4096).and_then(TcpListener::from_std) {
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
    run: Arc<Shared>,
    tx: mpsc::UnboundedSender<Event>,
    active: AtomicU64,
    per_client: Mutex<HashMap<IpAddr, u64>>,
    next_index: AtomicU64,
}

impl ServerCtx {
    /// Takes a place in the server's concurrency limits for a connection
    /// from `ip`, if one is free; true if it got one. The place is given
    /// back with [`ServerCtx::release`] (calls, not a guard holding the
    /// address: that would be 32 more bytes in every connection's task).
    fn try_admit(&self, ip: IpAddr) -> bool {
        let limits = &self.spec.limits;
        let mut map = self.per_client.lock().expect("lock never poisoned");
        let mine = map.entry(ip).or_insert(0);
        let admitted = *mine < limits.max_per_client && self.active.load(Relaxed) < limits.max_connections;
        if admitted {
            *mine += 1;
            self.active.fetch_add(1, Relaxed);
        } else if *mine == 0 {
            map.remove(&ip);
        }
        admitted
    }

    /// Gives back the place [`ServerCtx::try_admit`] took.
    fn release(&self, ip: IpAddr) {
        self.active.fetch_sub(1, Relaxed);
        let mut map = self.per_client.lock().expect("lock never poisoned");
        if let Some(n) = map.get_mut(&ip) {
            *n -= 1;
            if *n == 0 {
                map.remove(&ip);
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
            run: Arc::new(Shared::new(
                cancel.clone(),
                clock,
                self.spec.idle_timeout,
                Pattern::new(self.spec.limits.max_buffer.min(4 << 20) as usize),
            )),
            spec: self.spec,
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
                        _ = ctx.run.cancel.cancelled() => break,
                        r = listener.accept() => r,
                    };
                    match accepted {
                        Ok((stream, peer)) => {
                            conns.spawn(connection(ctx.clone(), stream, peer));
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
        let control = RunControl {
            status_interval: spec.status_interval,
            time_limit: spec.time_limit,
            exit_after: spec.exit_after,
            max_records: spec.max_records,
        };
        let driven = drive(rx, &ctx.run, clock, observer, control, done).await;
        let settings = TcpSettings {
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
        };
        Ok(driven.into_result(TestKind::TcpServer, started_unix_ms, settings))
    }
}

fn reject_code(e: &WireError) -> RejectCode {
    match e {
        WireError::UnsupportedVersion(_) => RejectCode::UnsupportedVersion,
        _ => RejectCode::Malformed,
    }
}

/// What the accept phase decided.
enum Admitted {
    /// Serve this plan.
    Serve(Hello),
    /// The connection ended in the accept phase with this outcome.
    Ended(Outcome),
}

/// What the client asked for, as the server's record shows it.
#[derive(Debug, Clone, Copy)]
struct Asked {
    pattern: TcpPattern,
    transfer: u64,
    buffer: u32,
    rate: u64,
}

/// One connection's task, in three phases. Only the data phase is long,
/// so only its state is kept inline; the accept and finish phases are
/// boxed, and the record is assembled at the end from a few small fields.
/// An `async move` block rather than an `async fn`, which would store its
/// arguments twice: this future's size is what every connection costs.
// Deliberately not an `async fn` (see above).
#[allow(clippy::manual_async_fn)]
fn connection(ctx: Arc<ServerCtx>, stream: TcpStream, peer: SocketAddr) -> impl Future<Output = ()> + Send {
    async move {
        let index = ctx.next_index.fetch_add(1, Relaxed);
        let start_s = ctx.run.clock.now_s();
        let uuid = uuid::Builder::from_random_bytes(rand::random()).into_uuid();
        let link = Link::new(&stream, &ctx.run);
        let admitted = ctx.try_admit(peer.ip());
        // No match arm awaits (a matched value is kept through its arms),
        // and the hello is not kept past this match. From here every path
        // ends at a `release` of an admitted connection's place.
        let (asked, part) = match Box::pin(accept_phase(&ctx, &link, admitted, &uuid, peer)).await {
            Admitted::Serve(hello) => (
                Asked {
                    pattern: hello.pattern,
                    transfer: hello.transfer,
                    buffer: hello.server_buffer,
                    rate: hello.server_rate,
                },
                server_part(&ctx, &hello),
            ),
            Admitted::Ended(outcome) => {
                let _ = set_rude_close(&stream);
                let mut r = record(&ctx, index, start_s, &uuid, &stream, peer, None);
                r.outcome = outcome;
                if admitted {
                    ctx.release(peer.ip());
                }
                let _ = ctx.tx.send(Event::Record(Box::new(r)));
                return;
            }
        };
        ctx.run.counters.enter_in_flight();
        let t0 = ctx.run.clock.now_ns();
        let PhaseEnd {
            result,
            progress,
            sent_all,
        } = DataPhase::new(&link, part).await;
        let elapsed_ns = ctx.run.clock.now_ns() - t0;
        ctx.run.counters.leave_in_flight();
        let outcome = Box::pin(finish_phase(
            &ctx,
            &link,
            result.map(|_| ()),
            progress,
            elapsed_ns,
            sent_all,
        ))
        .await;
        let tcp = tcp_info(&stream).ok();
        if !outcome.is_success() {
            let _ = set_rude_close(&stream);
        }
        let mut record = record(&ctx, index, start_s, &uuid, &stream, peer, Some(&asked));
        record.outcome = outcome;
        record.elapsed_ns = elapsed_ns;
        record.sent_bytes = progress.sent;
        record.received_bytes = progress.received;
        record.tcp_info = tcp;
        ctx.release(peer.ip());
        let _ = ctx.tx.send(Event::Record(Box::new(record)));
    }
}

/// The server's part in a connection's data phase, from the client's hello.
fn server_part(ctx: &ServerCtx, hello: &Hello) -> Part {
    let burst = (hello.burst_count > 0).then(|| {
        (
            hello.burst_count,
            Duration::from_millis(hello.burst_delay_ms.into()),
        )
    });
    Part {
        plan: hello.plan(),
        is_client: false,
        buffer: hello.server_buffer as usize,
        verify: hello.verify == VerifyMode::Data,
        pacer: Pacer::new(
            hello.server_rate,
            Duration::from_millis(hello.rate_period_ms.max(1).into()),
            burst,
        ),
        // The server never watches for a trailer: the transfer only completes.
        watch_trailer: false,
        deadline_ns: Some(
            ctx.run
                .clock
                .now_ns()
                .saturating_add(ctx.spec.limits.max_duration.as_nanos() as u64),
        ),
    }
}

fn record(
    ctx: &ServerCtx,
    index: u64,
    start_s: f64,
    uuid: &uuid::Uuid,
    stream: &TcpStream,
    peer: SocketAddr,
    asked: Option<&Asked>,
) -> ConnectionRecord {
    ConnectionRecord {
        index,
        connection_id: uuid.hyphenated().to_string(),
        local_address: stream.local_addr().map(|a| a.to_string()).unwrap_or_default(),
        remote_address: peer.to_string(),
        start_s,
        time_slice_s: ctx.run.clock.now_s(),
        elapsed_ns: 0,
        pattern: asked.map(|a| a.pattern),
        transfer_bytes: asked.map(|a| a.transfer).unwrap_or(0),
        buffer_bytes: asked.map(|a| u64::from(a.buffer)).unwrap_or(0),
        rate_limit_bytes_per_second: asked.map(|a| a.rate).unwrap_or(0),
        sent_bytes: 0,
        received_bytes: 0,
        outcome: Outcome::Succeeded,
        peer: None,
        shutdown: None,
        quic: None,
        tcp_info: None,
        media: None,
    }
}

/// Learns (goodput wire) or assumes (cts wire) what the connection does,
/// checks it against the limits, and greets the client.
async fn accept_phase(
    ctx: &ServerCtx,
    link: &Link<'_>,
    admitted: bool,
    uuid: &uuid::Uuid,
    peer: SocketAddr,
) -> Admitted {
    let spec = &ctx.spec;
    let over_limit = || format!("over the server's connection limits for {}", peer.ip());
    let hello = match spec.wire {
        WireProtocol::Goodput => {
            let hello = match link.guard(link.read_message("hello")).await {
                Ok(Message::Hello(h)) => Ok(h),
                Ok(other) => Err((RejectCode::Malformed, format!("expected Hello, got {other:?}"))),
                Err(Failure::Wire(e)) => Err((reject_code(&e), e.to_string())),
                Err(f) => return Admitted::Ended(outcome_of_failure(&f, "server")),
            };
            let hello = hello.and_then(|h| {
                spec.limits.check(&h).map_err(|r| (RejectCode::OverLimit, r))?;
                if !admitted {
                    return Err((RejectCode::TooManyConnections, over_limit()));
                }
                Ok(h)
            });
            match hello {
                Ok(h) => h,
                Err((code, reason)) => {
                    let reject = Message::Reject {
                        code,
                        reason: reason.clone(),
                    };
                    let _ = link.guard(link.write_message(&reject, "reject")).await;
                    // The client closes after reading the reason; wait for it briefly.
                    let _ =
                        tokio::time::timeout(Duration::from_secs(2), link.guard(link.await_peer_close(true)))
                            .await;
                    return Admitted::Ended(Outcome::rejected(code, &reason));
                }
            }
        }
        WireProtocol::Cts
        | WireProtocol::Iperf3
        | WireProtocol::Stamp
        | WireProtocol::Raw
        | WireProtocol::Media
        | WireProtocol::Quic => {
            if !admitted {
                // ctsTraffic has no way to say why: reset the connection.
                return Admitted::Ended(Outcome::rejected(RejectCode::TooManyConnections, &over_limit()));
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
    let s = SockRef::from(link.stream);
    if hello.server_send_buffer > 0 {
        let _ = s.set_send_buffer_size(hello.server_send_buffer as usize);
    }
    if hello.server_recv_buffer > 0 {
        let _ = s.set_recv_buffer_size(hello.server_recv_buffer as usize);
    }
    if let Err(err) = spec.socket.apply(&s, &peer) {
        return Admitted::Ended(outcome_of_failure(
            &Failure::Net {
                during: "setsockopt",
                err,
            },
            "server",
        ));
    }
    let greeting = async {
        match spec.wire {
            WireProtocol::Goodput => {
                let accept = Message::Accept {
                    connection_id: *uuid.as_bytes(),
                };
                link.write_message(&accept, "accept").await
            }
            WireProtocol::Cts
            | WireProtocol::Iperf3
            | WireProtocol::Stamp
            | WireProtocol::Raw
            | WireProtocol::Media
            | WireProtocol::Quic => {
                let text = uuid.hyphenated().to_string();
                let id = cts::encode_connection_id(&text).expect("uuid text is 36 bytes");
                link.write_all(&id, "connection id").await
            }
        }
    };
    match link.guard(greeting).await {
        Ok(()) => Admitted::Serve(hello),
        Err(f) => Admitted::Ended(outcome_of_failure(&f, "server")),
    }
}

/// Sends the completion record (or `DONE`), then waits for the client to
/// close first; returns the server's outcome for the connection.
async fn finish_phase(
    ctx: &ServerCtx,
    link: &Link<'_>,
    result: Result<(), Failure>,
    progress: Progress,
    elapsed_ns: u64,
    client_expects_trailer: bool,
) -> Outcome {
    let spec = &ctx.spec;
    let verdict = match &result {
        Ok(()) => Verdict::Success,
        Err(f) => verdict_of(f),
    };
    // The client reads the completion where it expects the end of the
    // server's data. A server that fails before sending all of it must not
    // send one (the client would read it as pattern bytes): it resets, and
    // its own record carries the reason.
    let trailer = match spec.wire {
        WireProtocol::Goodput if result.is_err() && !client_expects_trailer => Ok(()),
        WireProtocol::Goodput => {
            let c = Completion {
                sent: progress.sent,
                received: progress.received,
                elapsed_ns,
                verdict,
            };
            link.guard(link.write_message(&Message::Completion(c), "completion"))
                .await
        }
        WireProtocol::Cts if result.is_ok() => link.guard(link.write_all(cts::DONE, "DONE")).await,
        WireProtocol::Cts
        | WireProtocol::Iperf3
        | WireProtocol::Stamp
        | WireProtocol::Raw
        | WireProtocol::Media
        | WireProtocol::Quic => Ok(()),
    };
    match (result, trailer) {
        (Err(f), Ok(())) if spec.wire == WireProtocol::Goodput && client_expects_trailer => {
            // The client is reading towards our verdict: let it arrive
            // (an immediate reset would discard it with any unsent data).
            let drain = link.guard(async {
                link.flush_and_drain().await;
                Ok(())
            });
            let _ = tokio::time::timeout(spec.idle_timeout, drain).await;
            outcome_of_failure(&f, "server")
        }
        (Err(f), _) | (Ok(()), Err(f)) => outcome_of_failure(&f, "server"),
        // The client closes first (FIN or RST); only then does the server.
        (Ok(()), Ok(())) => match link.guard(link.await_peer_close(true)).await {
            Ok(()) => Outcome::Succeeded,
            Err(Failure::TooMuch) => outcome_of_verdict(&Verdict::TooMuchData, "server"),
            Err(f) => outcome_of_failure(&f, "server"),
        },
    }
}

#[cfg(test)]
mod tests {
    /// The size of what `f` returns, without calling it.
    fn returned_size<A, B, C, R>(_: fn(A, B, C) -> R) -> usize {
        std::mem::size_of::<R>()
    }

    /// tokio stores a task in a cell of its future plus 112 bytes, rounded
    /// up to 128: a connection's future over 400 bytes costs every
    /// established connection 128 bytes more (docs/benchmarks.md, Memory).
    #[test]
    fn connection_task_fits_a_512_byte_task_cell() {
        let n = returned_size(super::connection);
        assert!(n <= 400, "the connection future is {n} bytes, over 400");
    }
}
