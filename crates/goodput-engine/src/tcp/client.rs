//! The TCP client: schedules connections (concurrency, iterations, connect
//! throttle), runs each one, and records both ends' views.

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use goodput_core::cts;
use goodput_core::pattern::Pattern;
use goodput_core::plan::TcpPattern;
use goodput_core::result::{
    ConnectionRecord, Outcome, PeerView, ProtocolErrorKind, ReceiverGoodput, Span, TcpSettings, TestKind,
    TestResult, TimedFigures,
};
use goodput_core::session::{Completion, Hello, Message, Verdict, VerifyMode};
use goodput_core::spec::TcpWire;
use goodput_core::units::ValueRange;
use rand::Rng;
use socket2::SockRef;
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::{mpsc, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::link::{Failure, Link, Pacer};
use super::transfer::Timed;
use super::{
    drive, outcome_of_failure, outcome_of_verdict, protocol_error, unix_ms_now, DataPhase, Ended, Event,
    Part, PhaseEnd, Progress, RunControl, Shared, ShutdownMode, TcpClientSpec,
};
use crate::counters::RunClock;
use crate::socket::{bind_client, set_rude_close, tcp_info, tcp_socket};
use crate::{EngineError, Observer};

struct ClientCtx {
    spec: TcpClientSpec,
    run: Arc<Shared>,
    throttle: Semaphore,
    /// One permit per concurrent connection.
    slots: Semaphore,
    tx: mpsc::UnboundedSender<Event>,
    report_established: bool,
}

/// What the server sent after the data.
enum Trailer {
    Completion(Completion),
    Done,
}

fn span<T: Copy + Into<u64>>(r: ValueRange<T>) -> Span {
    Span {
        lo: r.lo.into(),
        hi: r.hi.into(),
    }
}

/// The settings section of a client's result document.
pub(crate) fn client_settings(spec: &TcpClientSpec) -> TcpSettings {
    TcpSettings {
        wire: spec.wire.into(),
        pattern: Some(spec.pattern),
        verify: Some(spec.verify),
        transfer_bytes: Some(span(spec.transfer)),
        buffer_bytes: Some(span(spec.buffer)),
        push_bytes: Some(spec.push_bytes),
        pull_bytes: Some(spec.pull_bytes),
        connections: Some(spec.connections),
        iterations: Some(spec.iterations),
        rate_limit_bytes_per_second: spec.rate_limit.map(span),
        rate_period_ms: Some(spec.rate_period.as_millis() as u64),
        shutdown: Some(spec.shutdown),
        addresses: spec.targets.iter().map(|a| a.to_string()).collect(),
        status_interval_ms: spec.status_interval.as_millis() as u64,
        time_limit_ms: spec.time_limit.map(|d| d.as_millis() as u64),
    }
}

/// Runs a TCP client test to the end (all iterations, the time limit, or
/// `cancel`), reporting to `observer` as it goes.
pub async fn run_client(
    spec: TcpClientSpec,
    observer: &mut dyn Observer,
    cancel: CancellationToken,
) -> Result<TestResult, EngineError> {
    if spec.targets.is_empty() {
        return Err(EngineError::Config("no target address".into()));
    }
    if !spec.binds.is_empty() {
        let usable = spec
            .targets
            .iter()
            .any(|t| spec.binds.iter().any(|b| b.is_ipv4() == t.is_ipv4()));
        if !usable {
            return Err(EngineError::Config(
                "no `bind` address has the same address family as any target".into(),
            ));
        }
    }
    if spec.connections == 0 {
        return Err(EngineError::Config("`connections` must be at least 1".into()));
    }
    let clock = RunClock::start();
    let started_unix_ms = unix_ms_now();
    let (tx, rx) = mpsc::unbounded_channel();
    let throttle = if spec.throttle == 0 {
        Semaphore::MAX_PERMITS
    } else {
        spec.throttle.min(Semaphore::MAX_PERMITS as u64) as usize
    };
    let slots = spec.connections.min(Semaphore::MAX_PERMITS as u64) as usize;
    let ctx = Arc::new(ClientCtx {
        run: Arc::new(Shared::new(
            cancel.clone(),
            clock,
            spec.idle_timeout,
            Pattern::new(spec.buffer.hi.0.min(64 << 20) as usize),
        )),
        spec,
        throttle: Semaphore::new(throttle),
        slots: Semaphore::new(slots),
        tx,
        report_established: observer.wants_established(),
    });
    let total = match ctx.spec.iterations {
        0 => u64::MAX,
        n => n.saturating_mul(ctx.spec.connections),
    };
    let tracker = TaskTracker::new();
    let schedule = {
        let ctx = ctx.clone();
        let tracker = tracker.clone();
        async move {
            for index in 0..total {
                let permit = tokio::select! {
                    biased;
                    _ = ctx.run.cancel.cancelled() => break,
                    p = ctx.slots.acquire() => p.expect("semaphore never closed"),
                };
                if ctx.run.cancel.is_cancelled() {
                    break;
                }
                // The task gives its slot back itself: a permit held in it
                // would cost every connection 16 bytes.
                permit.forget();
                tracker.spawn(connection(ctx.clone(), index));
            }
            tracker.close();
            tracker.wait().await;
        }
    };
    let spec = &ctx.spec;
    let control = RunControl {
        status_interval: spec.status_interval,
        time_limit: spec.time_limit,
        exit_after: None,
        max_records: spec.max_records,
    };
    let driven = drive(rx, &ctx.run, clock, observer, control, schedule).await;
    Ok(driven.into_result(TestKind::TcpClient, started_unix_ms, client_settings(spec)))
}

async fn connect(ctx: &ClientCtx, index: u64, target: SocketAddr) -> Result<TcpStream, Failure> {
    let spec = &ctx.spec;
    let net = |during: &'static str| move |err| Failure::Net { during, err };
    let sock = tcp_socket(&target).map_err(net("socket"))?;
    spec.socket
        .apply(&SockRef::from(&sock), &target)
        .map_err(net("setsockopt"))?;
    let family: Vec<IpAddr> = spec
        .binds
        .iter()
        .copied()
        .filter(|b| b.is_ipv4() == target.is_ipv4())
        .collect();
    let ip = if family.is_empty() {
        if target.is_ipv4() {
            IpAddr::V4(Ipv4Addr::UNSPECIFIED)
        } else {
            IpAddr::V6(Ipv6Addr::UNSPECIFIED)
        }
    } else {
        family[(index % family.len() as u64) as usize]
    };
    let port = if spec.local_port.is_ephemeral() {
        0
    } else {
        spec.local_port.nth(index)
    };
    bind_client(&sock, ip, port).map_err(net("bind"))?;
    let sock = TcpSocket::from_std_stream(std::net::TcpStream::from(sock));
    let _permit = ctx.throttle.acquire().await.expect("semaphore never closed");
    tokio::select! {
        biased;
        _ = ctx.run.cancel.cancelled() => Err(Failure::Cancelled),
        r = tokio::time::timeout(spec.idle_timeout, sock.connect(target)) => match r {
            Err(_) => Err(Failure::Net {
                during: "connect",
                err: std::io::Error::from_raw_os_error(libc::ETIMEDOUT),
            }),
            Ok(r) => r.map_err(net("connect")),
        },
    }
}

/// What one connection picked from the ranges it was given.
#[derive(Debug, Clone, Copy)]
struct Terms {
    transfer: u64,
    rate: u64,
    buffer: u32,
    rude: bool,
}

impl Terms {
    fn pick(spec: &TcpClientSpec) -> Self {
        let mut rng = rand::thread_rng();
        let rate = spec.rate_limit.map(|r| r.pick(rng.gen()).0).unwrap_or(0);
        let rude = match spec.shutdown {
            ShutdownMode::Graceful => false,
            ShutdownMode::Rude => true,
            ShutdownMode::Random => rng.gen(),
        };
        Self {
            transfer: spec.transfer.pick(rng.gen()).0,
            // The hello carries the buffer in 32 bits.
            buffer: spec.buffer.pick(rng.gen()).0.min(u64::from(u32::MAX)) as u32,
            rate,
            rude,
        }
    }

    fn hello(&self, spec: &TcpClientSpec) -> Hello {
        let ms = |d: Duration| u32::try_from(d.as_millis()).unwrap_or(u32::MAX);
        Hello {
            pattern: spec.pattern,
            verify: spec.verify,
            transfer: if spec.duration.is_some() { 0 } else { self.transfer },
            push_segment: spec.push_bytes,
            pull_segment: spec.pull_bytes,
            server_buffer: self.buffer,
            server_send_buffer: spec.socket.send_buffer.unwrap_or(0),
            server_recv_buffer: spec.socket.recv_buffer.unwrap_or(0),
            server_rate: self.rate,
            rate_period_ms: spec.rate_period.as_millis() as u32,
            burst_count: spec.burst.map(|b| b.0).unwrap_or(0),
            burst_delay_ms: spec.burst.map(|b| b.1.as_millis() as u32).unwrap_or(0),
            duration_ms: spec.duration.map_or(0, |d| ms(d).max(1)),
            omit_ms: spec.duration.map_or(0, |_| ms(spec.omit)),
        }
    }

    /// Pattern bytes the client sends and receives.
    fn planned(&self, spec: &TcpClientSpec) -> (u64, u64) {
        let plan = self.hello(spec).plan();
        (plan.client_to_server, plan.server_to_client)
    }

    /// The client's part in the data phase, starting at `now_ns`.
    fn part(&self, spec: &TcpClientSpec, now_ns: u64) -> Part {
        Part {
            plan: self.hello(spec).plan(),
            is_client: true,
            buffer: self.buffer as usize,
            verify: spec.verify == VerifyMode::Data,
            pacer: Pacer::new(self.rate, spec.rate_period, spec.burst),
            // A timed test's trailer comes after the server's FIN.
            watch_trailer: spec.wire == TcpWire::Goodput && spec.duration.is_none(),
            deadline_ns: None,
            timed: spec
                .duration
                .map(|d| Box::new(Timed::new(now_ns, d, spec.omit, true))),
        }
    }
}

fn target(spec: &TcpClientSpec, index: u64) -> SocketAddr {
    spec.targets[(index % spec.targets.len() as u64) as usize]
}

/// A connection's record, assembled at its end: holding it through the
/// connection would keep its 400-odd bytes in every idle connection's task.
fn record(
    ctx: &ClientCtx,
    index: u64,
    start_s: f64,
    terms: &Terms,
    local: Option<SocketAddr>,
    heard: Heard,
    outcome: Outcome,
) -> ConnectionRecord {
    ConnectionRecord {
        index,
        connection_id: heard.connection_id.into_string(),
        local_address: local.map(|a| a.to_string()).unwrap_or_default(),
        remote_address: target(&ctx.spec, index).to_string(),
        start_s,
        time_slice_s: ctx.run.clock.now_s(),
        elapsed_ns: 0,
        pattern: Some(ctx.spec.pattern),
        transfer_bytes: terms.transfer,
        buffer_bytes: u64::from(terms.buffer),
        rate_limit_bytes_per_second: terms.rate,
        sent_bytes: 0,
        received_bytes: 0,
        outcome,
        peer: heard.peer.map(|p| *p),
        shutdown: None,
        quic: None,
        tcp_info: None,
        media: None,
        timed: None,
    }
}

/// One connection's task. An `async move` block rather than an `async fn`:
/// an `async fn` stores its arguments twice, and this future's size is what
/// every established connection costs. Only the data phase is inline; the
/// connect, negotiation and finish are boxed, as they are brief, and no large
/// value is named across the data phase.
// Deliberately not an `async fn` (see above).
#[allow(clippy::manual_async_fn)]
fn connection(ctx: Arc<ClientCtx>, index: u64) -> impl Future<Output = ()> + Send {
    async move {
        let spec = &ctx.spec;
        let terms = Terms::pick(spec);
        let start_s = ctx.run.clock.now_s();
        // No match arm below awaits: a matched value is kept through its arms.
        let stream = match Box::pin(connect(&ctx, index, target(spec, index))).await {
            Ok(stream) => stream,
            Err(f) => {
                let outcome = outcome_of_failure(&f, "client");
                let record = record(&ctx, index, start_s, &terms, None, Heard::default(), outcome);
                return ended(&ctx, record);
            }
        };
        if ctx.report_established {
            let _ = ctx.tx.send(Event::Established {
                index,
                local: stream.local_addr().map(|a| a.to_string()).unwrap_or_default(),
                remote: target(spec, index).to_string(),
            });
        }
        // Left in `finish`, which every path from here reaches.
        ctx.run.counters.enter_in_flight();
        let link = Link::new(&stream, &ctx.run);
        let t0 = ctx.run.clock.now_ns();
        let mut id = ConnId::None;
        let early = Box::pin(negotiation(&link, terms.hello(spec), spec.wire, &mut id)).await;
        let (end, progress) = if let Some(e) = early {
            (SessionEnd::Early(*e), Progress::default())
        } else {
            let part = terms.part(spec, ctx.run.clock.now_ns());
            let PhaseEnd {
                result,
                progress,
                timed,
                ..
            } = DataPhase::new(&link, part).await;
            match timed {
                Some(t) => (SessionEnd::Timed(result, t), progress),
                None => (SessionEnd::Data(result), progress),
            }
        };
        let session = Session {
            ctx: &ctx,
            index,
            start_s,
            terms,
            t0,
        };
        let record = Box::pin(finish(session, &stream, &link, id, end, progress)).await;
        drop(stream);
        ended(&ctx, record);
    }
}

/// Hands a connection's record to the run loop and frees its slot.
fn ended(ctx: &ClientCtx, record: ConnectionRecord) {
    let _ = ctx.tx.send(Event::Record(Box::new(record)));
    ctx.slots.add_permits(1);
}

/// How a session ended before the connection's close.
enum SessionEnd {
    /// In negotiation: a rejection's outcome, or a failure.
    Early(Result<Outcome, Failure>),
    /// In the data phase; the server's trailer comes next.
    Data(Result<Ended, Failure>),
    /// A timed data phase, which read the server's trailer with its data.
    Timed(Result<Ended, Failure>, Box<Timed>),
}

/// What the finish needs to know about the connection.
struct Session<'c> {
    ctx: &'c ClientCtx,
    index: u64,
    start_s: f64,
    terms: Terms,
    t0: u64,
}

/// Sends the hello and reads the answer (or reads the cts id), under the
/// guard. `None`: go on to the data phase.
async fn negotiation(
    link: &Link<'_>,
    hello: Hello,
    wire: TcpWire,
    id: &mut ConnId,
) -> Option<Box<Result<Outcome, Failure>>> {
    match link.guard(negotiate(link, hello, wire, id)).await {
        Ok(None) => None,
        Ok(Some(rejected)) => Some(Box::new(Ok(rejected))),
        Err(f) => Some(Box::new(Err(f))),
    }
}

/// After the data phase: the server's trailer, this end's outcome, the
/// close, and the connection's record.
async fn finish(
    session: Session<'_>,
    stream: &TcpStream,
    link: &Link<'_>,
    id: ConnId,
    end: SessionEnd,
    progress: Progress,
) -> ConnectionRecord {
    let Session {
        ctx,
        index,
        start_s,
        terms,
        t0,
    } = session;
    let spec = &ctx.spec;
    // Read here rather than kept from the connect: 32 bytes less in every
    // connection's task (the kernel keeps the address after a reset too).
    let local = stream.local_addr().ok();
    let mut heard = Heard {
        connection_id: id,
        peer: None,
    };
    let mut figures = None;
    let mut progress = progress;
    let timed = matches!(end, SessionEnd::Timed(..));
    let result = match end {
        SessionEnd::Early(r) => r,
        SessionEnd::Timed(moved, t) => {
            let judged = judge_timed(moved, progress, &t, spec.pattern, &mut heard);
            progress.received = t.data_received(progress.received);
            judged.map(|(outcome, f)| {
                figures = Some(f);
                outcome
            })
        }
        SessionEnd::Data(moved) => {
            let planned = terms.planned(spec);
            let all_received = progress.received == planned.1;
            trailer_after(link, spec.wire, moved, all_received)
                .await
                .map(|t| judge(t, progress, planned, &mut heard))
        }
    };
    let elapsed_ns = ctx.run.clock.now_ns() - t0;
    ctx.run.counters.leave_in_flight();
    let tcp = tcp_info(stream).ok();
    let mut outcome = match result {
        Ok(outcome) => outcome,
        Err(f) => outcome_of_failure(&f, "client"),
    };
    let mut shutdown = if terms.rude {
        ShutdownMode::Rude
    } else {
        ShutdownMode::Graceful
    };
    if outcome.is_success() && timed {
        // Both sides are closed already: the client's FIN ended its data,
        // the server's its trailer.
        if terms.rude {
            let _ = set_rude_close(stream);
        }
    } else if outcome.is_success() {
        if terms.rude {
            let _ = set_rude_close(stream);
        } else if let Err(f) = link.guard(close_gracefully(link)).await {
            outcome = match f {
                Failure::TooMuch => outcome_of_verdict(&Verdict::TooMuchData, "client"),
                f => outcome_of_failure(&f, "client"),
            };
            let _ = set_rude_close(stream);
        }
    } else {
        // Any connection that failed is reset, so the peer learns at once.
        shutdown = ShutdownMode::Rude;
        let _ = set_rude_close(stream);
    }
    let mut record = record(ctx, index, start_s, &terms, local, heard, outcome);
    record.shutdown = Some(shutdown);
    record.elapsed_ns = elapsed_ns;
    record.sent_bytes = progress.sent;
    record.received_bytes = progress.received;
    record.tcp_info = tcp;
    record.timed = figures;
    record
}

/// This end's outcome of a timed connection, from its data phase and the
/// server's Timed Completion (the last bytes of the server's direction),
/// and both directions' good-put as their receivers measured it.
fn judge_timed(
    moved: Result<Ended, Failure>,
    progress: Progress,
    timed: &Timed,
    pattern: TcpPattern,
    heard: &mut Heard,
) -> Result<(Outcome, TimedFigures), Failure> {
    moved?;
    let Some(trailer) = timed.trailer() else {
        return Err(Failure::BadMessage(format!(
            "the server's direction ended after {} bytes without its completion record",
            progress.received
        )));
    };
    let c = match Message::decode(trailer)? {
        Some((Message::Completion(c @ Completion { timed: Some(_), .. }), _)) => c,
        Some((other, _)) => {
            return Err(Failure::BadMessage(format!(
                "expected a Timed Completion, got {}",
                other.name()
            )))
        }
        None => return Err(Failure::BadMessage("truncated completion record".into())),
    };
    let warm_up = c.timed.unwrap_or_default();
    let data = timed.data_received(progress.received);
    let server_outcome = outcome_of_verdict(&c.verdict, "server");
    heard.peer = Some(Box::new(PeerView {
        sent_bytes: c.sent,
        received_bytes: c.received,
        elapsed_ns: c.elapsed_ns,
        outcome: server_outcome.clone(),
    }));
    let up = matches!(pattern, TcpPattern::Push | TcpPattern::Duplex);
    let down = matches!(pattern, TcpPattern::Pull | TcpPattern::Duplex);
    let own_warm_up = timed.warm_up(progress.received);
    let figures = TimedFigures {
        data_start_s: timed.start_ns as f64 / 1e9,
        up: up.then(|| ReceiverGoodput::new(c.received, c.elapsed_ns, warm_up.bytes, warm_up.at_ns)),
        down: down.then(|| {
            ReceiverGoodput::new(
                data,
                timed
                    .receive_end_ns(progress.received)
                    .saturating_sub(timed.start_ns),
                own_warm_up.bytes,
                own_warm_up.at_ns,
            )
        }),
    };
    let outcome = if c.verdict != Verdict::Success {
        server_outcome
    } else if c.received != progress.sent || c.sent != data {
        protocol_error(
            ProtocolErrorKind::NotAllData,
            format!(
                "the ends disagree: client sent {} and received {} bytes, server received {} and sent {}",
                progress.sent, data, c.received, c.sent
            ),
        )
    } else {
        Outcome::Succeeded
    };
    Ok((outcome, figures))
}

/// What the client learns from the server besides data: the shared id and,
/// from the completion record, the server's own counts and verdict.
#[derive(Default)]
struct Heard {
    connection_id: ConnId,
    peer: Option<Box<PeerView>>,
}

/// The connection id the server gave: kept as a UUID's 16 bytes when it is
/// one (always on the goodput wire, usually on the cts wire), so a
/// connection holds no string for it until its record is written.
#[derive(Default)]
enum ConnId {
    #[default]
    None,
    Uuid(uuid::Uuid),
    Text(Box<str>),
}

impl ConnId {
    fn from_text(text: String) -> Self {
        match uuid::Uuid::try_parse(&text) {
            Ok(u) if u.hyphenated().to_string() == text => ConnId::Uuid(u),
            _ => ConnId::Text(text.into_boxed_str()),
        }
    }

    fn into_string(self) -> String {
        match self {
            ConnId::None => String::new(),
            ConnId::Uuid(u) => u.hyphenated().to_string(),
            ConnId::Text(t) => t.into(),
        }
    }
}

/// shutdown(SHUT_WR), then wait for the server's FIN.
async fn close_gracefully(link: &Link<'_>) -> Result<(), Failure> {
    SockRef::from(link.stream)
        .shutdown(std::net::Shutdown::Write)
        .map_err(|err| Failure::Net {
            during: "shutdown",
            err,
        })?;
    link.await_peer_close(false).await
}

/// This end's outcome from the server's trailer: it folds in the server's
/// verdict and a comparison of both ends' byte counts.
fn judge(trailer: Trailer, progress: Progress, planned: (u64, u64), heard: &mut Heard) -> Outcome {
    let (planned_sent, planned_received) = planned;
    let complete = progress.sent == planned_sent && progress.received == planned_received;
    let outcome = match trailer {
        Trailer::Done => {
            if complete {
                Outcome::Succeeded
            } else {
                outcome_of_verdict(&Verdict::NotAllData, "client")
            }
        }
        Trailer::Completion(c) => {
            let server_outcome = outcome_of_verdict(&c.verdict, "server");
            heard.peer = Some(Box::new(PeerView {
                sent_bytes: c.sent,
                received_bytes: c.received,
                elapsed_ns: c.elapsed_ns,
                outcome: server_outcome.clone(),
            }));
            if c.verdict != Verdict::Success {
                server_outcome
            } else if !complete || c.received != progress.sent || c.sent != progress.received {
                protocol_error(
                    ProtocolErrorKind::NotAllData,
                    format!(
                        "the ends disagree: client sent {} and received {} bytes, server received {} and sent {} (planned {} and {})",
                        progress.sent,
                        progress.received,
                        c.received,
                        c.sent,
                        planned_sent,
                        planned_received
                    ),
                )
            } else {
                Outcome::Succeeded
            }
        }
    };
    outcome
}

/// Sends the hello and reads the answer (goodput wire), or reads the
/// connection id (cts wire). `Some` is the outcome of a rejection.
async fn negotiate(
    link: &Link<'_>,
    hello: Hello,
    wire: TcpWire,
    connection_id: &mut ConnId,
) -> Result<Option<Outcome>, Failure> {
    match wire {
        TcpWire::Goodput => {
            link.write_message(&Message::Hello(hello), "hello").await?;
            match link.read_message("hello reply").await? {
                Message::Accept { connection_id: id } => {
                    *connection_id = ConnId::Uuid(uuid::Uuid::from_bytes(id));
                    Ok(None)
                }
                Message::Reject { code, reason } => Ok(Some(Outcome::rejected(code, &reason))),
                other => Err(Failure::BadMessage(format!(
                    "expected Accept or Reject, got {}",
                    other.name()
                ))),
            }
        }
        TcpWire::Cts => {
            let mut id = [0u8; cts::CONNECTION_ID_LEN];
            link.read_exact(&mut id, "connection id").await?;
            *connection_id = ConnId::from_text(cts::decode_connection_id(&id));
            Ok(None)
        }
    }
}

/// Reads the server's trailer after the data phase ended with `moved`. A
/// data phase that failed on the network after every expected byte came in
/// may still have the server's reason waiting, sent just before its reset.
async fn trailer_after(
    link: &Link<'_>,
    wire: TcpWire,
    moved: Result<Ended, Failure>,
    all_received: bool,
) -> Result<Trailer, Failure> {
    match moved {
        Ok(_) => link.guard(read_trailer(link, wire)).await,
        Err(f @ Failure::Net { .. }) if all_received => {
            match tokio::time::timeout(Duration::from_millis(200), read_trailer(link, wire)).await {
                Ok(Ok(t @ Trailer::Completion(_))) => Ok(t),
                _ => Err(f),
            }
        }
        Err(f) => Err(f),
    }
}

async fn read_trailer(link: &Link<'_>, wire: TcpWire) -> Result<Trailer, Failure> {
    match wire {
        TcpWire::Goodput => match link.read_message("completion").await? {
            Message::Completion(c) => Ok(Trailer::Completion(c)),
            other => Err(Failure::BadMessage(format!(
                "expected Completion, got {}",
                other.name()
            ))),
        },
        TcpWire::Cts => {
            let mut done = [0u8; 4];
            link.read_exact(&mut done, "DONE").await?;
            if &done == cts::DONE {
                Ok(Trailer::Done)
            } else {
                Err(Failure::Eof { during: "DONE" })
            }
        }
    }
}

#[cfg(test)]
mod tests {
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
}
