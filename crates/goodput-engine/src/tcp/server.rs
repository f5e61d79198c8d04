//! The TCP server: serves every client and pattern at once, within limits,
//! and never closes a successful connection first.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use goodput_core::cts;
use goodput_core::pattern::Pattern;
use goodput_core::plan::TcpPattern;
use goodput_core::result::{
    ConnectionRecord, Outcome, ProtocolErrorKind, ReceiverGoodput, TcpSettings, TestKind, TestResult,
    TimedFigures,
};
use goodput_core::session::{Completion, Hello, Message, RejectCode, Verdict, VerifyMode, WireError};
use goodput_core::spec::TcpWire;
use socket2::SockRef;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::link::{Failure, Link, Pacer};
use super::transfer::Timed;
use super::{
    drive, outcome_of_failure, outcome_of_verdict, unix_ms_now, verdict_of, DataPhase, Event, Part, PhaseEnd,
    Progress, RunControl, Shared, TcpServerSpec,
};
use crate::admission::{Admission, Admits, Refusal, Slot};
use crate::counters::RunClock;
use crate::socket::{set_rude_close, tcp_info};
use crate::{EngineError, Observer};

/// A server whose listeners are bound (so the ports are known) but which is
/// not yet serving.
pub struct BoundServer {
    spec: TcpServerSpec,
    listeners: Vec<TcpListener>,
    notices: Vec<String>,
    admission: Arc<Admission>,
    /// The run loop's events: the connection tasks', and those of other
    /// services that report their connections here (QUIC's).
    events: (mpsc::UnboundedSender<Event>, mpsc::UnboundedReceiver<Event>),
    next_index: Arc<AtomicU64>,
    zero: Arc<std::sync::OnceLock<std::time::Instant>>,
    /// Services reporting through `records()` (see `RecordSink::hold`).
    others: TaskTracker,
}

/// Binds every listen address of `spec`. Must be called inside a tokio
/// runtime.
pub fn bind_server(spec: TcpServerSpec) -> Result<BoundServer, EngineError> {
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
    if spec.wire == TcpWire::Cts && spec.cts.is_none() {
        return Err(EngineError::Config(
            "`wire` cts needs the pattern and transfer on the server".into(),
        ));
    }
    Ok(BoundServer {
        admission: Admission::new(spec.limits.admission()),
        spec,
        listeners,
        notices,
        events: mpsc::unbounded_channel(),
        next_index: Arc::new(AtomicU64::new(0)),
        zero: Arc::default(),
        others: TaskTracker::new(),
    })
}

struct ServerCtx {
    spec: TcpServerSpec,
    run: Arc<Shared>,
    tx: mpsc::UnboundedSender<Event>,
    admission: Arc<Admission>,
    next_index: Arc<AtomicU64>,
}

impl Admits for ServerCtx {
    fn admission(&self) -> &Admission {
        &self.admission
    }

    /// A connection task that ended without finishing panicked (the
    /// server waits for every task, so none is cancelled): its places are
    /// back, and a record says so.
    fn on_abandoned(&self, peer: SocketAddr) {
        self.admission.count_internal_error();
        let mut r = blank_record(self.next_index.fetch_add(1, Relaxed), peer);
        r.time_slice_s = self.run.clock.now_s();
        r.outcome = Outcome::ProtocolError {
            kind: ProtocolErrorKind::Internal,
            direction: None,
            offset: None,
            expected: None,
            actual: None,
            message: "the server's task for this connection panicked (a bug; its places were given back)"
                .into(),
        };
        let _ = self.tx.send(Event::Record(Box::new(r)));
    }
}

impl BoundServer {
    /// The places of the server's TCP services: share them with the
    /// discard and echo services so one client's cap covers them all.
    pub fn admission(&self) -> Arc<Admission> {
        self.admission.clone()
    }

    /// Where another service of the server reports its connections, so
    /// they are numbered, shown, kept and counted with the TCP ones.
    pub fn records(&self) -> super::RecordSink {
        super::RecordSink {
            tx: self.events.0.clone(),
            next_index: self.next_index.clone(),
            zero: self.zero.clone(),
            others: self.others.clone(),
        }
    }

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
        let _ = self.zero.set(clock.instant_at(0));
        let started_unix_ms = unix_ms_now();
        let addrs = self.local_addrs();
        let (tx, rx) = self.events;
        let ctx = Arc::new(ServerCtx {
            run: Arc::new(Shared::new(
                cancel.clone(),
                clock,
                self.spec.idle_timeout,
                Pattern::new(self.spec.limits.max_buffer.min(4 << 20) as usize),
            )),
            spec: self.spec,
            tx,
            admission: self.admission,
            next_index: self.next_index,
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
                        Ok((stream, peer)) => match Slot::admit(&ctx, peer) {
                            Some(slot) => {
                                conns.spawn(connection(slot, stream));
                            }
                            // Too many in their hello to even say why: reset.
                            None => {
                                let _ = set_rude_close(&stream);
                            }
                        },
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
            let others = self.others.clone();
            async move {
                cancel.cancelled().await;
                tracker.close();
                tracker.wait().await;
                others.close();
                others.wait().await;
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
        let admission = ctx.admission.counters();
        let settings = TcpSettings {
            wire: spec.wire.into(),
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
        let mut result = driven.into_result(TestKind::TcpServer, started_unix_ms, settings);
        result.detail.server_mut().admission = Some(admission);
        Ok(result)
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
fn connection(slot: Slot<ServerCtx>, stream: TcpStream) -> impl Future<Output = ()> + Send {
    async move {
        let index = slot.ctx().next_index.fetch_add(1, Relaxed);
        let start_s = slot.ctx().run.clock.now_s();
        let uuid = uuid::Builder::from_random_bytes(rand::random()).into_uuid();
        let link = Link::new(&stream, &slot.ctx().run);
        // No match arm awaits (a matched value is kept through its arms),
        // and the hello is not kept past this match. The slot gives the
        // connection's places back when it drops, on every path.
        let refusal = slot.refusal();
        let (asked, part) = match Box::pin(accept_phase(slot.ctx(), &link, refusal, &uuid, slot.peer())).await
        {
            Admitted::Serve(hello) => (
                Asked {
                    pattern: hello.pattern,
                    transfer: hello.transfer,
                    buffer: hello.server_buffer,
                    rate: hello.server_rate,
                },
                server_part(slot.ctx(), &hello),
            ),
            Admitted::Ended(outcome) => {
                let _ = set_rude_close(&stream);
                let mut r = record(slot.ctx(), index, start_s, &uuid, &stream, slot.peer(), None);
                r.outcome = outcome;
                slot.finish();
                let _ = slot.ctx().tx.send(Event::Record(Box::new(r)));
                return;
            }
        };
        slot.hello_done();
        let ctx = slot.ctx();
        ctx.run.counters.enter_in_flight();
        let t0 = ctx.run.clock.now_ns();
        let PhaseEnd {
            result,
            progress,
            sent_all,
            timed,
        } = DataPhase::new(&link, part).await;
        let ctx = slot.ctx();
        let elapsed_ns = ctx.run.clock.now_ns() - t0;
        ctx.run.counters.leave_in_flight();
        let end = PhaseOutcome {
            result: result.map(|_| ()),
            pattern: asked.pattern,
            progress,
            elapsed_ns,
            sent_all,
            timed,
        };
        let (outcome, figures) = Box::pin(finish(ctx, &link, end)).await;
        let tcp = tcp_info(&stream).ok();
        if !outcome.is_success() {
            let _ = set_rude_close(&stream);
        }
        let mut record = record(
            slot.ctx(),
            index,
            start_s,
            &uuid,
            &stream,
            slot.peer(),
            Some(&asked),
        );
        record.outcome = outcome;
        record.elapsed_ns = elapsed_ns;
        record.sent_bytes = progress.sent;
        record.received_bytes = progress.received;
        record.tcp_info = tcp;
        record.timed = figures;
        slot.finish();
        let _ = slot.ctx().tx.send(Event::Record(Box::new(record)));
    }
}

/// The server's part in a connection's data phase, from the client's hello.
fn server_part(ctx: &ServerCtx, hello: &Hello) -> Part {
    // Unit tests force a panic here, where a bug in the data plan would.
    #[cfg(test)]
    if hello.transfer == tests::FORCED_PANIC_TRANSFER {
        panic!("forced panic in a connection task (test)");
    }
    let burst = (hello.burst_count > 0).then(|| {
        (
            hello.burst_count,
            Duration::from_millis(hello.burst_delay_ms.into()),
        )
    });
    let now = ctx.run.clock.now_ns();
    let max_duration = ctx.spec.limits.max_duration;
    let timed = hello.is_timed().then(|| {
        let duration = Duration::from_millis(hello.duration_ms.into());
        let omit = Duration::from_millis(hello.omit_ms.into());
        (Box::new(Timed::new(now, duration, omit, false)), duration)
    });
    // A timed connection may outlast its duration by the client's drain;
    // the hello's duration is at most the longest connection allowed.
    let deadline = match &timed {
        Some((_, duration)) => max_duration.max(*duration + ctx.spec.idle_timeout),
        None => max_duration,
    };
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
        deadline_ns: Some(now.saturating_add(deadline.as_nanos() as u64)),
        timed: timed.map(|(t, _)| t),
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
    let mut r = blank_record(index, peer);
    r.connection_id = uuid.hyphenated().to_string();
    r.local_address = stream.local_addr().map(|a| a.to_string()).unwrap_or_default();
    r.start_s = start_s;
    r.time_slice_s = ctx.run.clock.now_s();
    r.pattern = asked.map(|a| a.pattern);
    r.transfer_bytes = asked.map(|a| a.transfer).unwrap_or(0);
    r.buffer_bytes = asked.map(|a| u64::from(a.buffer)).unwrap_or(0);
    r.rate_limit_bytes_per_second = asked.map(|a| a.rate).unwrap_or(0);
    r
}

fn blank_record(index: u64, peer: SocketAddr) -> ConnectionRecord {
    ConnectionRecord {
        index,
        connection_id: String::new(),
        local_address: String::new(),
        remote_address: peer.to_string(),
        start_s: 0.0,
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
        quic: None,
        tcp_info: None,
        media: None,
        timed: None,
    }
}

/// Learns (goodput wire) or assumes (cts wire) what the connection does,
/// checks it against the limits, and greets the client.
async fn accept_phase(
    ctx: &ServerCtx,
    link: &Link<'_>,
    refusal: Option<Refusal>,
    uuid: &uuid::Uuid,
    peer: SocketAddr,
) -> Admitted {
    let spec = &ctx.spec;
    let over_limit = |r: Refusal| r.reason(ctx.admission.limits(), peer.ip());
    let hello = match spec.wire {
        TcpWire::Goodput => {
            // A refused client is told at once, without waiting for its
            // hello: it holds only a pending place while it is told.
            let hello = match refusal {
                Some(r) => Err((RejectCode::TooManyConnections, over_limit(r))),
                None => match read_hello(ctx, link).await {
                    Ok(checked) => checked,
                    Err(ended) => return Admitted::Ended(ended),
                },
            };
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
        TcpWire::Cts => {
            if let Some(r) = refusal {
                // ctsTraffic has no way to say why: reset the connection.
                return Admitted::Ended(Outcome::rejected(RejectCode::TooManyConnections, &over_limit(r)));
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
                duration_ms: 0,
                omit_ms: 0,
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
            TcpWire::Goodput => {
                let accept = Message::Accept {
                    connection_id: *uuid.as_bytes(),
                };
                link.write_message(&accept, "accept").await
            }
            TcpWire::Cts => {
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

/// Reads the hello within the server's deadline for it (the whole hello,
/// not each byte: a client that trickles it is cut off) and checks it
/// against the limits. `Ok(Err(..))`: refuse with this code and reason;
/// `Err`: the connection ended.
async fn read_hello(
    ctx: &ServerCtx,
    link: &Link<'_>,
) -> Result<Result<Hello, (RejectCode, String)>, Outcome> {
    let limits = &ctx.spec.limits;
    let read = tokio::time::timeout(limits.hello_timeout, link.guard(link.read_message("hello")));
    Ok(match read.await {
        Err(_) => {
            ctx.admission.count_hello_timeout();
            Err((
                RejectCode::HelloTimeout,
                format!(
                    "the hello did not arrive whole within {} ms",
                    limits.hello_timeout.as_millis()
                ),
            ))
        }
        Ok(Ok(Message::Hello(h))) => match h.check(&limits.hello()) {
            Ok(_) => Ok(h),
            Err(refusal) => Err((RejectCode::OverLimit, refusal.to_string())),
        },
        Ok(Ok(other)) => Err((
            RejectCode::Malformed,
            format!("expected Hello, got {}", other.name()),
        )),
        Ok(Err(Failure::Wire(e))) => Err((reject_code(&e), e.to_string())),
        Ok(Err(f)) => return Err(outcome_of_failure(&f, "server")),
    })
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
    let verdict = result.as_ref().err().map_or(Verdict::Success, verdict_of);
    // The client reads the completion where it expects the end of the
    // server's data. A server that fails before sending all of it must not
    // send one (the client would read it as pattern bytes): it resets, and
    // its own record carries the reason.
    let trailer = match spec.wire {
        TcpWire::Goodput if result.is_err() && !client_expects_trailer => Ok(()),
        TcpWire::Goodput => {
            let c = Completion {
                sent: progress.sent,
                received: progress.received,
                elapsed_ns,
                verdict,
                timed: None,
            };
            link.guard(link.write_message(&Message::Completion(c), "completion"))
                .await
        }
        TcpWire::Cts if result.is_ok() => link.guard(link.write_all(cts::DONE, "DONE")).await,
        TcpWire::Cts => Ok(()),
    };
    match (result, trailer) {
        (Err(f), Ok(())) if spec.wire == TcpWire::Goodput && client_expects_trailer => {
            // The client is reading towards our verdict: let it arrive
            // (an immediate reset would discard it with any unsent data).
            drain(link, spec.idle_timeout).await;
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

/// Sends FIN after what is queued and reads until the client closes (for
/// at most `limit`), so that a verdict just sent is not lost to a reset.
async fn drain(link: &Link<'_>, limit: Duration) {
    let drained = link.guard(async {
        link.flush_and_drain().await;
        Ok(())
    });
    let _ = tokio::time::timeout(limit, drained).await;
}

/// How a connection's data phase ended, for its finish.
struct PhaseOutcome {
    result: Result<(), Failure>,
    pattern: TcpPattern,
    progress: Progress,
    elapsed_ns: u64,
    sent_all: bool,
    timed: Option<Box<Timed>>,
}

/// The finish of a byte-planned or a timed connection (one boxed future
/// for both, so the connection's own future stays small).
async fn finish(ctx: &ServerCtx, link: &Link<'_>, end: PhaseOutcome) -> (Outcome, Option<TimedFigures>) {
    match end.timed {
        Some(t) => finish_timed(ctx, link, end.result, end.pattern, end.progress, &t).await,
        None => (
            finish_phase(ctx, link, end.result, end.progress, end.elapsed_ns, end.sent_all).await,
            None,
        ),
    }
}

/// The end of a timed connection: the server has read the client's
/// direction to its FIN and sent for the duration. It sends its Timed
/// Completion as the last bytes of its direction, then its FIN; the client
/// closed its side first. Returns the server's outcome and what it measured
/// of the client's direction.
async fn finish_timed(
    ctx: &ServerCtx,
    link: &Link<'_>,
    result: Result<(), Failure>,
    pattern: TcpPattern,
    progress: Progress,
    timed: &Timed,
) -> (Outcome, Option<TimedFigures>) {
    let receives = matches!(pattern, TcpPattern::Push | TcpPattern::Duplex);
    let result = match result {
        // A client in pull sends nothing before its FIN.
        Ok(()) if !receives && progress.received > 0 => Err(Failure::TooMuch),
        r => r,
    };
    let verdict = result.as_ref().err().map_or(Verdict::Success, verdict_of);
    // A receiving server's time ends with the client's last data byte; a
    // server that only sent reports its whole data phase.
    let receive_ns = match receives {
        true => timed.receive_end_ns(progress.received),
        false => ctx.run.clock.now_ns(),
    }
    .saturating_sub(timed.start_ns);
    let warm_up = timed.warm_up(progress.received);
    let completion = Completion {
        sent: progress.sent,
        received: progress.received,
        elapsed_ns: receive_ns,
        verdict,
        timed: Some(warm_up),
    };
    let figures = receives.then(|| TimedFigures {
        data_start_s: timed.start_ns as f64 / 1e9,
        up: Some(ReceiverGoodput::new(
            progress.received,
            receive_ns,
            warm_up.bytes,
            warm_up.at_ns,
        )),
        down: None,
    });
    // Whatever ended the phase, the client reads towards this trailer,
    // unless the connection itself is gone.
    if matches!(
        result,
        Err(Failure::Net { .. } | Failure::Idle | Failure::Cancelled)
    ) {
        return (outcome_of_failure(&result.unwrap_err(), "server"), figures);
    }
    let sent = link
        .guard(link.write_message(&Message::Completion(completion), "completion"))
        .await;
    drain(link, ctx.spec.idle_timeout).await;
    let outcome = match (result, sent) {
        (Err(f), _) | (Ok(()), Err(f)) => outcome_of_failure(&f, "server"),
        (Ok(()), Ok(())) => Outcome::Succeeded,
    };
    (outcome, figures)
}

#[cfg(test)]
pub(super) mod tests {
    use std::io::{Read, Write};
    use std::net::Ipv4Addr;
    use std::time::Instant;

    use goodput_core::session::{Hello, Message, RejectCode, VerifyMode};

    use super::*;
    use crate::socket::SocketOptions;
    use crate::tcp::ServerLimits;
    use crate::NullObserver;

    /// A hello asking for this transfer makes the server's connection task
    /// panic (test builds only).
    pub(crate) const FORCED_PANIC_TRANSFER: u64 = 0x0bad_c0de;

    /// The size of what `f` returns, without calling it.
    fn returned_size<A, B, R>(_: fn(A, B) -> R) -> usize {
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

    fn hello(transfer: u64) -> Hello {
        Hello {
            pattern: TcpPattern::Push,
            verify: VerifyMode::Data,
            transfer,
            push_segment: 0,
            pull_segment: 0,
            server_buffer: 65536,
            server_send_buffer: 0,
            server_recv_buffer: 0,
            server_rate: 0,
            rate_period_ms: 100,
            burst_count: 0,
            burst_delay_ms: 0,
            duration_ms: 0,
            omit_ms: 0,
        }
    }

    /// A server on 127.0.0.1 with `limits`, its address, and the handle of
    /// its run.
    async fn serve(
        limits: ServerLimits,
    ) -> (SocketAddr, CancellationToken, tokio::task::JoinHandle<TestResult>) {
        let spec = TcpServerSpec {
            wire: TcpWire::Goodput,
            cts: None,
            listen: vec![SocketAddr::new(Ipv4Addr::LOCALHOST.into(), 0)],
            listen_defaulted: false,
            reuse_port: false,
            socket: SocketOptions::default(),
            limits,
            exit_after: None,
            idle_timeout: Duration::from_secs(10),
            status_interval: Duration::from_secs(3600),
            time_limit: Some(Duration::from_secs(30)),
            max_records: 1000,
        };
        let bound = bind_server(spec).unwrap();
        let addr = bound.local_addrs()[0];
        let cancel = CancellationToken::new();
        let c = cancel.clone();
        let run = tokio::spawn(async move { bound.run(&mut NullObserver, c).await.unwrap() });
        (addr, cancel, run)
    }

    /// Sends `frame` (then `rest` after `pause`) on a fresh connection and
    /// returns the first session message the server answers with, if any.
    fn exchange(addr: SocketAddr, frame: &[u8], pause: Duration, rest: &[u8]) -> Option<Message> {
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(frame).unwrap();
        if !rest.is_empty() {
            std::thread::sleep(pause);
            let _ = s.write_all(rest);
        }
        let mut buf = Vec::new();
        let mut chunk = [0u8; 1024];
        loop {
            if let Ok(Some((m, _))) = Message::decode(&buf) {
                return Some(m);
            }
            match s.read(&mut chunk) {
                Ok(0) | Err(_) => return None,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
    }

    fn encoded(m: &Message) -> Vec<u8> {
        let mut out = Vec::new();
        m.encode(&mut out);
        out
    }

    /// A connection task that panics gives its place back (the only place
    /// its address may hold) and is counted as an internal error.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_panicking_connection_task_releases_its_place_and_is_counted() {
        let (addr, cancel, run) = serve(ServerLimits {
            max_per_client: 1,
            ..ServerLimits::default()
        })
        .await;
        let answers = tokio::task::spawn_blocking(move || {
            let doomed = encoded(&Message::Hello(hello(FORCED_PANIC_TRANSFER)));
            let first = exchange(addr, &doomed, Duration::ZERO, &[]);
            // The same address again, three times: each must get a place
            // once the previous connection's task has ended (a leaked place
            // would refuse them all).
            let normal = encoded(&Message::Hello(hello(0)));
            let later: Vec<_> = (0..3)
                .map(|_| {
                    let mut a = None;
                    for _ in 0..40 {
                        a = exchange(addr, &normal, Duration::ZERO, &[]);
                        if matches!(a, Some(Message::Accept { .. })) {
                            break;
                        }
                        std::thread::sleep(Duration::from_millis(50));
                    }
                    a
                })
                .collect();
            (first, later)
        })
        .await
        .unwrap();
        // The hello was accepted; the task panicked when it planned the data.
        assert!(
            matches!(answers.0, Some(Message::Accept { .. })),
            "{:?}",
            answers.0
        );
        for a in &answers.1 {
            assert!(matches!(a, Some(Message::Accept { .. })), "{a:?}");
        }
        cancel.cancel();
        let r = run.await.unwrap();
        let adm = r.admission().unwrap();
        assert_eq!(adm.internal_errors, 1);
        assert_eq!((adm.open_now, adm.pending_now), (0, 0));
        let internal = r
            .connections
            .iter()
            .filter(|c| {
                matches!(
                    &c.outcome,
                    Outcome::ProtocolError {
                        kind: ProtocolErrorKind::Internal,
                        ..
                    }
                )
            })
            .count();
        assert_eq!(internal, 1, "{:#?}", r.connections);
    }

    /// A hello trickled slower than the hello deadline is cut off with a
    /// reason, however steadily its bytes arrive.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_trickled_hello_is_cut_off_at_the_hello_deadline() {
        let (addr, cancel, run) = serve(ServerLimits {
            hello_timeout: Duration::from_millis(300),
            ..ServerLimits::default()
        })
        .await;
        let (answer, took) = tokio::task::spawn_blocking(move || {
            let frame = encoded(&Message::Hello(hello(0)));
            let t = Instant::now();
            let a = exchange(addr, &frame[..10], Duration::from_millis(900), &frame[10..]);
            (a, t.elapsed())
        })
        .await
        .unwrap();
        match answer {
            Some(Message::Reject { code, reason }) => {
                assert_eq!(code, RejectCode::HelloTimeout);
                assert!(reason.contains("within 300 ms"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
        assert!(took < Duration::from_secs(3), "{took:?}");
        cancel.cancel();
        let r = run.await.unwrap();
        assert_eq!(r.admission().unwrap().hello_timeouts, 1);
    }

    /// The hello that divided by zero (push + pull past u64::MAX) is
    /// served, and a rate below one byte per quantum is refused with a
    /// reason; the server stays up.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn crafted_hellos_get_a_plan_or_a_reason_never_a_panic() {
        let (addr, cancel, run) = serve(ServerLimits::default()).await;
        let answers = tokio::task::spawn_blocking(move || {
            let mut overflow = hello(1000);
            overflow.pattern = TcpPattern::PushPull;
            overflow.push_segment = 1 << 63;
            overflow.pull_segment = 1 << 63;
            let mut slow = hello(1000);
            slow.server_rate = 1;
            slow.rate_period_ms = 1;
            [overflow, slow].map(|h| exchange(addr, &encoded(&Message::Hello(h)), Duration::ZERO, &[]))
        })
        .await
        .unwrap();
        assert!(
            matches!(answers[0], Some(Message::Accept { .. })),
            "{:?}",
            answers[0]
        );
        match &answers[1] {
            Some(Message::Reject { code, reason }) => {
                assert_eq!(*code, RejectCode::OverLimit);
                assert!(reason.contains("below one byte per 1 ms period"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
        cancel.cancel();
        let r = run.await.unwrap();
        assert_eq!(r.admission().unwrap().internal_errors, 0);
    }
}
