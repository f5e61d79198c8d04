//! The TCP client: schedules connections (concurrency, iterations, connect
//! throttle), runs each one, and records both ends' views.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use goodput_core::cts;
use goodput_core::pattern::{Pattern, PatternVerifier};
use goodput_core::result::{
    ConnectionRecord, Outcome, PeerView, ProtocolErrorKind, Span, TcpSettings, TestKind, TestResult,
    WireProtocol,
};
use goodput_core::session::{Completion, Hello, Message, Verdict, VerifyMode};
use goodput_core::units::ValueRange;
use rand::Rng;
use socket2::SockRef;
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::{mpsc, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::link::{Failure, Link, Pacer};
use super::{
    drive, exchange, outcome_of_failure, outcome_of_verdict, unix_ms_now, Event, Part, Progress, RunControl,
    ShutdownMode, TcpClientSpec,
};
use crate::counters::{Counters, RunClock};
use crate::socket::{bind_client, set_rude_close, tcp_info, tcp_socket};
use crate::{EngineError, Observer};

struct ClientCtx {
    spec: TcpClientSpec,
    pattern: Pattern,
    counters: Counters,
    cancel: CancellationToken,
    clock: RunClock,
    throttle: Semaphore,
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
        wire: spec.wire,
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
    if !spec.binds.is_empty() {
        let usable = spec
            .targets
            .iter()
            .any(|t| spec.binds.iter().any(|b| b.is_ipv4() == t.is_ipv4()));
        if !usable {
            return Err(EngineError::Config(
                "no --bind address has the same address family as any target".into(),
            ));
        }
    }
    if spec.connections == 0 {
        return Err(EngineError::Config("--connections must be at least 1".into()));
    }
    let clock = RunClock::start();
    let started_unix_ms = unix_ms_now();
    let (tx, rx) = mpsc::unbounded_channel();
    let throttle = if spec.throttle == 0 {
        Semaphore::MAX_PERMITS
    } else {
        spec.throttle.min(Semaphore::MAX_PERMITS as u64) as usize
    };
    let ctx = Arc::new(ClientCtx {
        pattern: Pattern::new(spec.buffer.hi.0.min(64 << 20) as usize),
        spec,
        counters: Counters::default(),
        cancel: cancel.clone(),
        clock,
        throttle: Semaphore::new(throttle),
        tx,
        report_established: observer.wants_established(),
    });
    let total = match ctx.spec.iterations {
        0 => u64::MAX,
        n => n.saturating_mul(ctx.spec.connections),
    };
    let slots = Arc::new(Semaphore::new(
        ctx.spec.connections.min(Semaphore::MAX_PERMITS as u64) as usize,
    ));
    let tracker = TaskTracker::new();
    let schedule = {
        let ctx = ctx.clone();
        let tracker = tracker.clone();
        async move {
            for index in 0..total {
                let permit = tokio::select! {
                    biased;
                    _ = ctx.cancel.cancelled() => break,
                    p = slots.clone().acquire_owned() => p.expect("semaphore never closed"),
                };
                if ctx.cancel.is_cancelled() {
                    break;
                }
                let ctx = ctx.clone();
                tracker.spawn(async move {
                    let record = connection(&ctx, index).await;
                    let _ = ctx.tx.send(Event::Record(Box::new(record)));
                    drop(permit);
                });
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
    let driven = drive(rx, &ctx.counters, clock, observer, control, &cancel, schedule).await;
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
        _ = ctx.cancel.cancelled() => Err(Failure::Cancelled),
        r = tokio::time::timeout(spec.idle_timeout, sock.connect(target)) => match r {
            Err(_) => Err(Failure::Net {
                during: "connect",
                err: std::io::Error::from_raw_os_error(libc::ETIMEDOUT),
            }),
            Ok(r) => r.map_err(net("connect")),
        },
    }
}

async fn connection(ctx: &ClientCtx, index: u64) -> ConnectionRecord {
    let spec = &ctx.spec;
    let (transfer, buffer, rate, rude) = {
        let mut rng = rand::thread_rng();
        let rate = spec.rate_limit.map(|r| r.pick(rng.gen()).0).unwrap_or(0);
        let rude = match spec.shutdown {
            ShutdownMode::Graceful => false,
            ShutdownMode::Rude => true,
            ShutdownMode::Random => rng.gen(),
        };
        (
            spec.transfer.pick(rng.gen()).0,
            spec.buffer.pick(rng.gen()).0,
            rate,
            rude,
        )
    };
    let target = spec.targets[(index % spec.targets.len() as u64) as usize];
    let hello = Hello {
        pattern: spec.pattern,
        verify: spec.verify,
        transfer,
        push_segment: spec.push_bytes,
        pull_segment: spec.pull_bytes,
        server_buffer: buffer.min(u64::from(u32::MAX)) as u32,
        server_send_buffer: spec.socket.send_buffer.unwrap_or(0),
        server_recv_buffer: spec.socket.recv_buffer.unwrap_or(0),
        server_rate: rate,
        rate_period_ms: spec.rate_period.as_millis() as u32,
        burst_count: spec.burst.map(|b| b.0).unwrap_or(0),
        burst_delay_ms: spec.burst.map(|b| b.1.as_millis() as u32).unwrap_or(0),
    };
    let start_s = ctx.clock.now_s();
    // The record is assembled at the end: holding it through the connection
    // would keep its 400-odd bytes in every idle connection's task.
    let finish =
        |local: String, heard: Heard, outcome: Outcome, shutdown: Option<ShutdownMode>| ConnectionRecord {
            index,
            connection_id: heard.connection_id,
            local_address: local,
            remote_address: target.to_string(),
            start_s,
            time_slice_s: ctx.clock.now_s(),
            elapsed_ns: 0,
            pattern: Some(spec.pattern),
            transfer_bytes: transfer,
            buffer_bytes: buffer,
            rate_limit_bytes_per_second: rate,
            sent_bytes: 0,
            received_bytes: 0,
            outcome,
            peer: heard.peer.map(|p| *p),
            shutdown,
            quic: None,
            tcp_info: None,
            media: None,
        };
    // Boxed: the connect phase is brief and its state large.
    let stream = match Box::pin(connect(ctx, index, target)).await {
        Ok(s) => s,
        Err(f) => {
            return finish(
                String::new(),
                Heard::default(),
                outcome_of_failure(&f, "client"),
                None,
            )
        }
    };
    let local = stream.local_addr().map(|a| a.to_string()).unwrap_or_default();
    if ctx.report_established {
        let _ = ctx.tx.send(Event::Established {
            index,
            local: local.clone(),
            remote: target.to_string(),
        });
    }
    let in_flight = ctx.counters.enter_in_flight();
    let link = Link::new(&stream, &ctx.counters, &ctx.cancel, spec.idle_timeout, ctx.clock);
    let t0 = ctx.clock.now_ns();
    let mut progress = Progress::default();
    let mut heard = Heard::default();
    let result = link
        .guard(session(
            ctx,
            &link,
            &hello,
            buffer as usize,
            &mut progress,
            &mut heard,
        ))
        .await;
    let elapsed_ns = ctx.clock.now_ns() - t0;
    drop(in_flight);
    let tcp = tcp_info(&stream).ok();
    let mut outcome = match result {
        Ok(outcome) => outcome,
        Err(f) => outcome_of_failure(&f, "client"),
    };
    let mut shutdown = if rude {
        ShutdownMode::Rude
    } else {
        ShutdownMode::Graceful
    };
    if outcome.is_success() {
        if rude {
            let _ = set_rude_close(&stream);
        } else if let Err(f) = link.guard(Box::pin(close_gracefully(&link))).await {
            outcome = match f {
                Failure::TooMuch => outcome_of_verdict(&Verdict::TooMuchData, "client"),
                f => outcome_of_failure(&f, "client"),
            };
            let _ = set_rude_close(&stream);
        }
    } else {
        // Any connection that failed is reset, so the peer learns at once.
        shutdown = ShutdownMode::Rude;
        let _ = set_rude_close(&stream);
    }
    drop(stream);
    let mut record = finish(local, heard, outcome, Some(shutdown));
    record.elapsed_ns = elapsed_ns;
    record.sent_bytes = progress.sent;
    record.received_bytes = progress.received;
    record.tcp_info = tcp;
    record
}

/// What the client learns from the server besides data: the shared id and,
/// from the completion record, the server's own counts and verdict.
#[derive(Default)]
struct Heard {
    connection_id: String,
    peer: Option<Box<PeerView>>,
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

/// Negotiation, data and trailer. Returns this end's outcome, which folds in
/// the server's verdict and a comparison of both ends' byte counts.
async fn session(
    ctx: &ClientCtx,
    link: &Link<'_>,
    hello: &Hello,
    buffer: usize,
    progress: &mut Progress,
    heard: &mut Heard,
) -> Result<Outcome, Failure> {
    let spec = &ctx.spec;
    // Negotiation is boxed: it runs once, briefly, and its futures would
    // otherwise be reserved for the connection's whole life.
    if let Some(rejected) = Box::pin(negotiate(link, hello, spec.wire, &mut heard.connection_id)).await? {
        return Ok(rejected);
    }
    let part = Part {
        plan: hello.plan(),
        is_client: true,
        buffer,
        verify: spec.verify == VerifyMode::Data,
        pattern: &ctx.pattern,
    };
    let mut pacer = Pacer::new(hello.server_rate, spec.rate_period, spec.burst);
    let mut verifier = PatternVerifier::new();
    let trailer = data_and_trailer(link, &part, &mut pacer, &mut verifier, progress, spec.wire).await?;
    let complete =
        progress.sent == part.plan.client_to_server && progress.received == part.plan.server_to_client;
    match trailer {
        Trailer::Done => Ok(if complete {
            Outcome::Succeeded
        } else {
            outcome_of_verdict(&Verdict::NotAllData, "client")
        }),
        Trailer::Completion(c) => {
            let server_outcome = outcome_of_verdict(&c.verdict, "server");
            heard.peer = Some(Box::new(PeerView {
                sent_bytes: c.sent,
                received_bytes: c.received,
                elapsed_ns: c.elapsed_ns,
                outcome: server_outcome.clone(),
            }));
            if c.verdict != Verdict::Success {
                return Ok(server_outcome);
            }
            if !complete || c.received != progress.sent || c.sent != progress.received {
                return Ok(Outcome::ProtocolError {
                    kind: ProtocolErrorKind::NotAllData,
                    direction: None,
                    offset: None,
                    expected: None,
                    actual: None,
                    message: format!(
                        "the ends disagree: client sent {} and received {} bytes, server received {} and sent {} (planned {} and {})",
                        progress.sent,
                        progress.received,
                        c.received,
                        c.sent,
                        part.plan.client_to_server,
                        part.plan.server_to_client
                    ),
                });
            }
            Ok(Outcome::Succeeded)
        }
    }
}

/// Sends the hello and reads the answer (goodput wire), or reads the
/// connection id (cts wire). `Some` is the outcome of a rejection.
async fn negotiate(
    link: &Link<'_>,
    hello: &Hello,
    wire: WireProtocol,
    connection_id: &mut String,
) -> Result<Option<Outcome>, Failure> {
    match wire {
        WireProtocol::Goodput => {
            link.write_message(&Message::Hello(*hello), "hello").await?;
            match link.read_message("hello reply").await? {
                Message::Accept { connection_id: id } => {
                    *connection_id = uuid::Uuid::from_bytes(id).hyphenated().to_string();
                    Ok(None)
                }
                Message::Reject { code, reason } => Ok(Some(Outcome::rejected(code, &reason))),
                other => Err(Failure::BadMessage(format!(
                    "expected Accept or Reject, got {other:?}"
                ))),
            }
        }
        WireProtocol::Cts
        | WireProtocol::Iperf3
        | WireProtocol::Stamp
        | WireProtocol::Raw
        | WireProtocol::Media
        | WireProtocol::Quic => {
            let mut id = [0u8; cts::CONNECTION_ID_LEN];
            link.read_exact(&mut id, "connection id").await?;
            *connection_id = cts::decode_connection_id(&id);
            Ok(None)
        }
    }
}

async fn read_trailer(link: &Link<'_>, wire: WireProtocol) -> Result<Trailer, Failure> {
    match wire {
        WireProtocol::Goodput => match link.read_message("completion").await? {
            Message::Completion(c) => Ok(Trailer::Completion(c)),
            other => Err(Failure::BadMessage(format!("expected Completion, got {other:?}"))),
        },
        WireProtocol::Cts
        | WireProtocol::Iperf3
        | WireProtocol::Stamp
        | WireProtocol::Raw
        | WireProtocol::Media
        | WireProtocol::Quic => {
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

/// The data phase and the server's trailer. The trailer is watched for while
/// sending is still under way, so a server that stops early (a data
/// mismatch it found, a limit) explains itself and the client stops sending
/// instead of pushing the rest of a long transfer into a drain.
async fn data_and_trailer(
    link: &Link<'_>,
    part: &Part<'_>,
    pacer: &mut Pacer,
    verifier: &mut PatternVerifier,
    progress: &mut Progress,
    wire: WireProtocol,
) -> Result<Trailer, Failure> {
    let watch = wire == WireProtocol::Goodput;
    match exchange(link, part, pacer, verifier, progress, watch).await {
        Ok(_) => {}
        Err(f @ Failure::Net { .. }) if progress.received == part.plan.server_to_client => {
            // The server may have sent its reason just before the reset.
            let read = tokio::time::timeout(Duration::from_millis(200), Box::pin(read_trailer(link, wire)));
            return match read.await {
                Ok(Ok(t @ Trailer::Completion(_))) => Ok(t),
                _ => Err(f),
            };
        }
        Err(f) => return Err(f),
    }
    // Boxed: it runs once, briefly, after the long data phase.
    Box::pin(read_trailer(link, wire)).await
}
