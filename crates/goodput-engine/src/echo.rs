//! The echo load test (EchoServerTest's options): connections started all at
//! once, in batches or one at a time; paced messages per connection, open
//! or closed loop; every echoed byte checked; connections held open until
//! all are done, or until Enter / a set time. Works against any server that
//! echoes bytes (RFC 862).

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::pin;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Duration;

use goodput_core::echo::EchoTracker;
use goodput_core::pattern::Pattern;
use goodput_core::result::{
    ConnectionRecord, Detail, EchoDetail, EchoInterval, EndReason, Interval, Outcome, Percentiles,
    ProtocolErrorKind, SummaryBuilder, TcpSettings, TestKind, TestResult, WireProtocol, SCHEMA_VERSION,
};
use goodput_core::stamp::stats::encode_histogram;
use hdrhistogram::Histogram;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpSocket;
use tokio::sync::{mpsc, watch};
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

use crate::{EngineError, Observer};

/// When connections close after their messages.
#[derive(Debug, Clone)]
pub enum Hold {
    /// Each closes when its own messages are done.
    No,
    /// All stay open until every connection is done (`--hold`).
    UntilAllDone,
    /// Then also until the caller releases them (`--pause`: the command
    /// line releases them when Enter is pressed). The engine never reads
    /// standard input itself.
    UntilReleased(Release),
    /// Then also for this long (`--hold-for`, or `--pause` when standard
    /// input is not a terminal).
    For(Duration),
}

/// How the caller releases connections held with [`Hold::UntilReleased`].
#[derive(Debug, Clone)]
pub struct Release {
    /// Notified once to release them.
    pub notify: std::sync::Arc<tokio::sync::Notify>,
    /// What releases them, for the banner and the notice (`Enter is
    /// pressed`).
    pub how: String,
}

/// An echo load test.
#[derive(Debug, Clone)]
pub struct EchoSpec {
    /// The echo server.
    pub target: SocketAddr,
    /// Connections to create.
    pub connections: u64,
    /// Start connections in groups of this many (`None` = all at once).
    pub batch_size: Option<u64>,
    /// Pause between groups.
    pub batch_delay: Duration,
    /// Messages per connection (0 = connect only).
    pub messages: u64,
    /// Bytes per message.
    pub message_size: usize,
    /// Time between messages.
    pub message_interval: Duration,
    /// Closed loop: the next message's timer starts when the echo is back.
    pub send_after_recv: bool,
    /// Connect one at a time (each waits for the previous to be established).
    pub sync_connect: bool,
    /// When to close.
    pub hold: Hold,
    /// Longest connect.
    pub connect_timeout: Duration,
    /// Longest wait for an echo to progress.
    pub reply_timeout: Duration,
    /// Status interval.
    pub status_interval: Duration,
    /// Most connection records and intervals kept in the document.
    pub max_records: usize,
    /// TLS: the client configuration and the name sent as SNI and checked
    /// against the certificate.
    pub tls: Option<(Arc<rustls::ClientConfig>, rustls::pki_types::ServerName<'static>)>,
    /// Create every socket before the clock starts.
    pub preallocate: bool,
}

/// A connected stream, plain or TLS.
enum Conn {
    Plain(tokio::net::TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<tokio::net::TcpStream>>),
}

impl Conn {
    fn local_addr(&self) -> String {
        let s = match self {
            Conn::Plain(s) => s,
            Conn::Tls(t) => t.get_ref().0,
        };
        s.local_addr().map(|a| a.to_string()).unwrap_or_default()
    }
}

/// What the connections tell the run's loop. Messages are not events: an
/// event per message sent and per echo woke the loop's task twice per round
/// trip, often on the other worker thread (a futex call per round trip);
/// they are counted in [`Tallies`] instead.
enum Event {
    Established(u64),
    /// Messages done (or failed); the connection may still be held open.
    Finished,
    Closed(Box<ConnectionRecord>, Counts),
    Batch(u64, u64),
}

#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    sent: u64,
    echoed: u64,
    mismatched: u64,
    short: u64,
    missing: u64,
    extra: u64,
    fail: Option<FailKind>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FailKind {
    Refused,
    Reset,
    TimedOut,
    Other,
}

fn kind_of(e: &io::Error) -> FailKind {
    match e.raw_os_error() {
        Some(libc::ECONNREFUSED) => FailKind::Refused,
        Some(libc::ECONNRESET) | Some(libc::EPIPE) => FailKind::Reset,
        Some(libc::ETIMEDOUT) => FailKind::TimedOut,
        _ if e.kind() == io::ErrorKind::TimedOut => FailKind::TimedOut,
        _ => FailKind::Other,
    }
}

/// One status interval's messages, bytes and round trips.
struct Window {
    sent: u64,
    echoed: u64,
    bad: u64,
    sent_bytes: u64,
    recv_bytes: u64,
    rtt: Histogram<u64>,
}

/// Connection counts at the end of an interval.
#[derive(Clone, Copy)]
struct Tally {
    open: u64,
    established: u64,
    succeeded: u64,
    failed: u64,
}

impl Window {
    fn new() -> Self {
        Self {
            sent: 0,
            echoed: 0,
            bad: 0,
            sent_bytes: 0,
            recv_bytes: 0,
            rtt: histogram(),
        }
    }

    /// The interval ending now, `dt` long; starts the next one.
    fn take(&mut self, since_start: Duration, dt: Duration, c: Tally) -> Interval {
        let dt = dt.as_secs_f64().max(1e-9);
        let iv = Interval {
            time_slice_s: since_start.as_secs_f64(),
            send_bytes_per_second: (self.sent_bytes as f64 / dt) as u64,
            recv_bytes_per_second: (self.recv_bytes as f64 / dt) as u64,
            in_flight: c.open,
            completed: c.succeeded,
            network_errors: c.failed,
            data_errors: 0,
            stamp: None,
            echo: Some(EchoInterval {
                established: c.established,
                failed: c.failed,
                sent: self.sent,
                echoed: self.echoed,
                mismatched: self.bad,
                round_trip: Percentiles::from_histogram(&self.rtt),
            }),
            media: None,
        };
        self.rtt.reset();
        (self.sent, self.echoed, self.bad, self.sent_bytes, self.recv_bytes) = (0, 0, 0, 0, 0);
        iv
    }
}

/// Messages and round trips so far, which the connections record as they
/// go under one lock (held for a few counter updates; uncontended with one
/// connection) and the run's loop takes at each status interval.
struct Tallies {
    /// The current status interval's.
    window: Window,
    /// The whole run's round trips.
    rtt: Histogram<u64>,
}

impl Tallies {
    fn sent(&mut self, size: u64) {
        self.window.sent += 1;
        self.window.sent_bytes += size;
    }

    fn echoed(&mut self, size: u64, rtt_ns: u64, ok: bool) {
        self.window.echoed += 1;
        self.window.recv_bytes += size;
        if !ok {
            self.window.bad += 1;
        }
        let _ = self.rtt.record(rtt_ns.max(1));
        let _ = self.window.rtt.record(rtt_ns.max(1));
    }
}

/// The tallies, even when a connection's task panicked holding them.
fn tallies(t: &Mutex<Tallies>) -> std::sync::MutexGuard<'_, Tallies> {
    t.lock().unwrap_or_else(|p| p.into_inner())
}

fn histogram() -> Histogram<u64> {
    Histogram::new(3).expect("3 significant digits is valid")
}

/// Runs the test and returns the result document.
pub async fn run_echo(
    spec: EchoSpec,
    observer: &mut dyn Observer,
    cancel: CancellationToken,
) -> Result<TestResult, EngineError> {
    if spec.connections == 0 || spec.message_size == 0 || spec.batch_size == Some(0) {
        return Err(EngineError::Config(
            "connections, message size and batch size must be above zero".into(),
        ));
    }
    let started_unix_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    // Messages are slices of one pattern built here, before the clock.
    let pattern = Arc::new(Pattern::new(spec.message_size));
    let mut sockets: Vec<TcpSocket> = Vec::new();
    if spec.preallocate {
        for i in 0..spec.connections {
            let s = if spec.target.is_ipv4() {
                TcpSocket::new_v4()
            } else {
                TcpSocket::new_v6()
            }
            .map_err(|e| {
                EngineError::Config(format!(
                    "`preallocate`: socket {} of {}: {e}",
                    i + 1,
                    spec.connections
                ))
            })?;
            sockets.push(s);
        }
    }
    let start = Instant::now();
    let spec = Arc::new(spec);
    let (tx, mut rx) = mpsc::channel::<(u64, Event)>(65_536);
    let (release_tx, release_rx) = watch::channel(false);
    let stop = cancel.child_token();
    let live = Arc::new(Mutex::new(Tallies {
        window: Window::new(),
        rtt: histogram(),
    }));

    // The spawner: all at once, in batches, or one at a time.
    {
        let (spec, tx, stop, pattern, live) = (
            spec.clone(),
            tx.clone(),
            stop.clone(),
            pattern.clone(),
            live.clone(),
        );
        tokio::spawn(async move {
            let mut sockets = sockets.into_iter();
            for i in 0..spec.connections {
                if stop.is_cancelled() {
                    break;
                }
                let (established_tx, established_rx) = tokio::sync::oneshot::channel();
                let c = connection(
                    i,
                    start,
                    spec.clone(),
                    pattern.clone(),
                    tx.clone(),
                    live.clone(),
                    release_rx.clone(),
                    stop.clone(),
                    established_tx,
                    sockets.next(),
                );
                tokio::spawn(c);
                if spec.sync_connect {
                    let _ = established_rx.await;
                }
                if let Some(b) = spec.batch_size {
                    if (i + 1) % b == 0 && i + 1 < spec.connections {
                        let _ = tx.send((i, Event::Batch((i + 1) / b, i + 1))).await;
                        tokio::select! {
                            _ = stop.cancelled() => break,
                            _ = tokio::time::sleep(spec.batch_delay) => {}
                        }
                    }
                }
            }
        });
    }
    drop(tx);

    let mut connect_h = histogram();
    let (mut established, mut failed, mut finished, mut closed) = (0u64, 0u64, 0u64, 0u64);
    let mut closed_established = 0u64;
    let mut totals = Counts::default();
    let mut kinds = [0u64; 4];
    let mut records = Vec::new();
    let mut omitted = 0u64;
    let mut summary = SummaryBuilder::default();
    let mut intervals = Vec::new();
    let mut intervals_omitted = 0u64;
    let mut ticker = tokio::time::interval_at(start + spec.status_interval, spec.status_interval);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut last_tick = start;
    let mut released = matches!(spec.hold, Hold::No);
    let mut release_timer: Option<Instant> = None;
    let mut enter: Option<tokio::task::JoinHandle<()>> = None;
    let mut interrupted = false;
    let size = spec.message_size as u64;
    loop {
        if !released && finished == spec.connections {
            match &spec.hold {
                Hold::No | Hold::UntilAllDone => {
                    released = true;
                    let _ = release_tx.send(true);
                }
                Hold::For(d) => {
                    if release_timer.is_none() {
                        observer.on_notice(&format!(
                            "all {} connections done; holding them open for {} ms",
                            spec.connections,
                            d.as_millis()
                        ));
                        release_timer = Some(Instant::now() + *d);
                    }
                }
                Hold::UntilReleased(r) => {
                    if enter.is_none() {
                        observer.on_notice(&format!(
                            "all {} connections done and held open until {}",
                            spec.connections, r.how
                        ));
                        let notify = r.notify.clone();
                        enter = Some(tokio::spawn(async move { notify.notified().await }));
                    }
                }
            }
        }
        tokio::select! {
            ev = rx.recv() => {
                let Some((_, ev)) = ev else { break };
                match ev {
                    Event::Established(ns) => {
                        established += 1;
                        let _ = connect_h.record(ns.max(1));
                    }
                    Event::Finished => finished += 1,
                    Event::Batch(n, started) => observer.on_notice(&format!(
                        "batch {n}: {started} connections started, {established} established, {failed} failed so far"
                    )),
                    Event::Closed(r, c) => {
                        closed += 1;
                        if !r.local_address.is_empty() {
                            closed_established += 1;
                        }
                        if let Some(k) = c.fail {
                            failed += 1;
                            kinds[k as usize] += 1;
                        }
                        totals.sent += c.sent;
                        totals.echoed += c.echoed;
                        totals.mismatched += c.mismatched;
                        totals.short += c.short;
                        totals.missing += c.missing;
                        totals.extra += c.extra;
                        observer.on_connection(&r);
                        summary.add(&r);
                        if records.len() < spec.max_records {
                            records.push(*r);
                        } else {
                            omitted += 1;
                        }
                    }
                }
            }
            _ = ticker.tick() => {
                let now = Instant::now();
                let counts = Tally {
                    open: established.saturating_sub(closed_established),
                    established,
                    succeeded: closed - failed,
                    failed,
                };
                let iv = tallies(&live).window.take(now - start, now - last_tick, counts);
                last_tick = now;
                observer.on_interval(&iv);
                if intervals.len() < spec.max_records {
                    intervals.push(iv);
                } else {
                    intervals_omitted += 1;
                }
            }
            _ = async { tokio::time::sleep_until(release_timer.unwrap_or(start)).await }, if !released && release_timer.is_some() => {
                released = true;
                let _ = release_tx.send(true);
            }
            _ = async { if let Some(h) = enter.as_mut() { let _ = h.await; } }, if !released && enter.is_some() => {
                released = true;
                let _ = release_tx.send(true);
            }
            _ = cancel.cancelled(), if !interrupted => {
                interrupted = true;
                released = true;
                let _ = release_tx.send(true);
            }
        }
    }
    interrupted |= cancel.is_cancelled();
    let elapsed = start.elapsed();
    let counts = Tally {
        open: 0,
        established,
        succeeded: closed - failed,
        failed,
    };
    // Every connection has closed (the channel ended), so every message
    // is in the tallies.
    let mut done = tallies(&live);
    let last = done.window.take(elapsed, Instant::now() - last_tick, counts);
    let rtt_h = std::mem::replace(&mut done.rtt, histogram());
    drop(done);
    observer.on_interval(&last);
    intervals.push(last);
    let detail = EchoDetail {
        connections: spec.connections,
        established,
        refused: kinds[FailKind::Refused as usize],
        reset: kinds[FailKind::Reset as usize],
        timed_out: kinds[FailKind::TimedOut as usize],
        other_failures: kinds[FailKind::Other as usize],
        connect_time: Percentiles::from_histogram(&connect_h),
        messages_per_connection: spec.messages,
        message_bytes: size,
        message_interval_us: spec.message_interval.as_micros() as u64,
        send_after_recv: spec.send_after_recv,
        sent: totals.sent,
        echoed: totals.echoed,
        mismatched: totals.mismatched,
        short: totals.short,
        missing: totals.missing,
        extra_bytes: totals.extra,
        round_trip: Percentiles::from_histogram(&rtt_h),
        round_trip_histogram: (!rtt_h.is_empty()).then(|| encode_histogram(&rtt_h)),
        connect_histogram: (!connect_h.is_empty()).then(|| encode_histogram(&connect_h)),
    };
    Ok(TestResult {
        spec: None,
        error: None,
        schema_version: SCHEMA_VERSION,
        tool: crate::tool_info(),
        kind: TestKind::EchoClient,
        started_unix_ms,
        settings: TcpSettings {
            connections: Some(spec.connections),
            iterations: Some(1),
            ..TcpSettings::bare(
                WireProtocol::Raw,
                vec![spec.target.to_string()],
                spec.status_interval.as_millis() as u64,
            )
        },
        intervals,
        intervals_omitted,
        connections: records,
        summary: summary.finish(elapsed.as_nanos() as u64),
        connections_omitted: omitted,
        end: if interrupted {
            EndReason::Interrupted
        } else {
            EndReason::Completed
        },
        assertions: Vec::new(),
        detail: Detail::Echo(Box::new(detail)),
    })
}

#[allow(clippy::too_many_arguments)]
async fn connection(
    index: u64,
    run_start: Instant,
    spec: Arc<EchoSpec>,
    pattern: Arc<Pattern>,
    tx: mpsc::Sender<(u64, Event)>,
    live: Arc<Mutex<Tallies>>,
    mut release: watch::Receiver<bool>,
    stop: CancellationToken,
    established: tokio::sync::oneshot::Sender<()>,
    socket: Option<TcpSocket>,
) {
    let t0 = Instant::now();
    let mut record = ConnectionRecord {
        index,
        connection_id: String::new(),
        local_address: String::new(),
        remote_address: spec.target.to_string(),
        start_s: 0.0,
        time_slice_s: 0.0,
        elapsed_ns: 0,
        pattern: None,
        transfer_bytes: spec.messages * spec.message_size as u64,
        buffer_bytes: spec.message_size as u64,
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
    };
    let mut counts = Counts::default();
    let connect = async {
        let s = match socket {
            Some(s) => s,
            None if spec.target.is_ipv4() => TcpSocket::new_v4()?,
            None => TcpSocket::new_v6()?,
        };
        s.set_nodelay(true)?;
        let tcp = s.connect(spec.target).await?;
        match &spec.tls {
            None => Ok(Conn::Plain(tcp)),
            Some((cfg, name)) => tokio_rustls::TlsConnector::from(cfg.clone())
                .connect(name.clone(), tcp)
                .await
                .map(|t| Conn::Tls(Box::new(t))),
        }
    };
    let stream = tokio::select! {
        _ = stop.cancelled() => Err(io::Error::new(io::ErrorKind::Interrupted, "stopped")),
        r = tokio::time::timeout(spec.connect_timeout, connect) => {
            r.unwrap_or_else(|_| Err(io::Error::new(io::ErrorKind::TimedOut, "connect timed out")))
        }
    };
    let _ = established.send(());
    let stream = match stream {
        Ok(s) => s,
        Err(e) => {
            counts.fail = Some(kind_of(&e));
            record.outcome = if stop.is_cancelled() {
                Outcome::Aborted {
                    reason: "stopped before connecting".into(),
                }
            } else {
                crate::socket::network_outcome("connect", &e)
            };
            if stop.is_cancelled() {
                counts.fail = None;
            }
            record.start_s = t0.duration_since(run_start).as_secs_f64();
            record.time_slice_s = run_start.elapsed().as_secs_f64();
            let _ = tx.send((index, Event::Finished)).await;
            let _ = tx.send((index, Event::Closed(Box::new(record), counts))).await;
            return;
        }
    };
    let _ = tx
        .send((index, Event::Established(t0.elapsed().as_nanos() as u64)))
        .await;
    record.local_address = stream.local_addr();
    let (io_result, t, started) = match stream {
        Conn::Plain(s) if on_own_thread(&spec) => {
            back_to_back(s, index, &spec, &pattern, &tx, &live, &mut release, &stop).await
        }
        Conn::Plain(s) => {
            let (rd, wr) = s.into_split();
            exchange(rd, wr, index, &spec, &pattern, &tx, &live, &mut release, &stop).await
        }
        Conn::Tls(s) => {
            let (rd, wr) = tokio::io::split(*s);
            exchange(rd, wr, index, &spec, &pattern, &tx, &live, &mut release, &stop).await
        }
    };
    let (short, missing) = t.unfinished();
    counts.sent = t.sent();
    counts.echoed = t.echoed;
    counts.mismatched = t.mismatched;
    counts.extra = t.extra_bytes;
    counts.short = short;
    counts.missing = missing;
    record.sent_bytes = t.sent() * spec.message_size as u64;
    record.received_bytes = t.received_bytes();
    record.start_s = t0.duration_since(run_start).as_secs_f64();
    record.time_slice_s = run_start.elapsed().as_secs_f64();
    record.elapsed_ns = started.elapsed().as_nanos() as u64;
    record.outcome = match io_result {
        Err((_, e)) if e.kind() == io::ErrorKind::Interrupted => Outcome::Aborted {
            reason: "the run was stopped".into(),
        },
        Err((during, e)) => {
            counts.fail = Some(kind_of(&e));
            crate::socket::network_outcome(during, &e)
        }
        Ok(()) if t.mismatched > 0 => Outcome::ProtocolError {
            kind: ProtocolErrorKind::DataMismatch,
            direction: None,
            offset: None,
            expected: None,
            actual: None,
            message: format!(
                "{} of {} echoed messages differed from what was sent",
                t.mismatched, t.echoed
            ),
        },
        Ok(()) if t.extra_bytes > 0 => Outcome::ProtocolError {
            kind: ProtocolErrorKind::TooMuchData,
            direction: None,
            offset: None,
            expected: None,
            actual: None,
            message: format!("{} bytes came back that were never sent", t.extra_bytes),
        },
        Ok(()) => Outcome::Succeeded,
    };
    let _ = tx.send((index, Event::Closed(Box::new(record), counts))).await;
}

/// Whether the connection's messages run on a thread of their own with
/// blocking calls: one plain TCP connection, closed loop, back to back
/// (the latency test). There a round trip is a send and a blocking
/// receive, as in sockperf's client: the thread sleeps in `recv` and the
/// echo wakes it straight into its data. On the runtime it was a send, an
/// `epoll_wait` and a receive, and the wake went through the worker's
/// poll of the I/O driver first. A thread per connection would not scale,
/// hence one connection only.
fn on_own_thread(spec: &EchoSpec) -> bool {
    spec.connections == 1
        && spec.tls.is_none()
        && spec.send_after_recv
        && spec.message_interval.is_zero()
        && spec.messages > 0
}

/// [`exchange`] for [`on_own_thread`]: the messages on a thread of their
/// own with blocking calls, then the hold and the close back on the
/// runtime. Stopping the run shuts the socket down, which wakes the
/// thread's receive at once.
#[allow(clippy::too_many_arguments)]
async fn back_to_back(
    s: tokio::net::TcpStream,
    index: u64,
    spec: &Arc<EchoSpec>,
    pattern: &Arc<Pattern>,
    tx: &mpsc::Sender<(u64, Event)>,
    live: &Arc<Mutex<Tallies>>,
    release: &mut watch::Receiver<bool>,
    stop: &CancellationToken,
) -> (Result<(), (&'static str, io::Error)>, EchoTracker, Instant) {
    let started = Instant::now();
    let base = index.wrapping_mul(7919) % goodput_core::pattern::UNIT_LEN as u64;
    let tracker = EchoTracker::new(spec.message_size, base);
    let blocking = s.into_std().and_then(|s| {
        s.set_nonblocking(false)?;
        // A zero timeout would mean none at all to the kernel.
        let timeout = Some(spec.reply_timeout.max(Duration::from_millis(1)));
        s.set_read_timeout(timeout)?;
        s.set_write_timeout(timeout)?;
        let waker = s.try_clone()?;
        Ok((s, waker))
    });
    let (s, waker) = match blocking {
        Ok(b) => b,
        Err(e) => return (Err(("run", e)), tracker, started),
    };
    let (done_tx, mut done_rx) = tokio::sync::oneshot::channel();
    let (spec_t, pattern_t, live_t) = (spec.clone(), pattern.clone(), live.clone());
    let t0 = started.into_std();
    let thread = std::thread::Builder::new()
        .name("goodput-echo".into())
        .spawn(move || {
            let (mut s, mut tracker) = (s, tracker);
            let r = closed_loop_blocking(&mut s, &spec_t, &pattern_t, &live_t, &mut tracker, t0);
            let _ = done_tx.send((r, tracker, s));
        });
    if let Err(e) = thread {
        let tracker = EchoTracker::new(spec.message_size, base);
        return (Err(("run", e)), tracker, started);
    }
    let done = tokio::select! {
        r = &mut done_rx => r,
        _ = stop.cancelled() => {
            let _ = waker.shutdown(std::net::Shutdown::Both);
            done_rx.await
        }
    };
    drop(waker);
    let Ok((mut io_result, tracker, s)) = done else {
        // The thread panicked; its socket is closed with it.
        let e = io::Error::other("the connection's thread ended abnormally");
        return (
            Err(("run", e)),
            EchoTracker::new(spec.message_size, base),
            started,
        );
    };
    if stop.is_cancelled() && io_result.is_err() {
        io_result = Err(("run", io::Error::new(io::ErrorKind::Interrupted, "stopped")));
    }
    let _ = tx.send((index, Event::Finished)).await;
    let s = s
        .set_nonblocking(true)
        .and_then(|()| tokio::net::TcpStream::from_std(s));
    if let Ok(mut s) = s {
        if io_result.is_ok() && !matches!(spec.hold, Hold::No) {
            while !*release.borrow() {
                tokio::select! {
                    _ = stop.cancelled() => break,
                    r = release.changed() => if r.is_err() { break },
                }
            }
        }
        let _ = s.shutdown().await;
    }
    (io_result, tracker, started)
}

/// The closed loop of [`back_to_back`] on its blocking socket: send a
/// message, receive until its echo is whole, again. The socket's timeouts
/// are the reply timeout.
fn closed_loop_blocking(
    s: &mut std::net::TcpStream,
    spec: &EchoSpec,
    pattern: &Pattern,
    live: &Mutex<Tallies>,
    tracker: &mut EchoTracker,
    started: std::time::Instant,
) -> Result<(), (&'static str, io::Error)> {
    use std::io::{Read, Write};
    let size = spec.message_size;
    let mut buf = vec![0u8; size.clamp(512, 16 * 1024)];
    let mut completed: Vec<(u64, bool)> = Vec::new();
    let timed_out = |e: io::Error, what: &str| {
        if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) {
            io::Error::new(
                io::ErrorKind::TimedOut,
                format!("{what} within the reply timeout"),
            )
        } else {
            e
        }
    };
    for _ in 0..spec.messages {
        let msg = tracker.next_message(pattern);
        tracker.sent_one(started.elapsed().as_nanos() as u64);
        s.write_all(msg)
            .map_err(|e| ("send", timed_out(e, "the server took no bytes")))?;
        tallies(live).sent(size as u64);
        while tracker.outstanding() > 0 {
            let n = match s.read(&mut buf) {
                Ok(0) => {
                    let e = io::Error::new(io::ErrorKind::UnexpectedEof, "the server closed the connection");
                    return Err(("recv", e));
                }
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(("recv", timed_out(e, "no echo"))),
            };
            let now = started.elapsed().as_nanos() as u64;
            completed.clear();
            tracker.received_chunk(pattern, &buf[..n], now, |rtt, ok| completed.push((rtt, ok)));
            if !completed.is_empty() {
                let mut live = tallies(live);
                for &(rtt, ok) in &completed {
                    live.echoed(size as u64, rtt, ok);
                }
            }
        }
    }
    Ok(())
}

/// The messages of one connection over any byte stream (plain TCP halves,
/// or a TLS stream split in two), then the hold, then the close.
#[allow(clippy::too_many_arguments)]
async fn exchange<R, W>(
    mut rd: R,
    mut wr: W,
    index: u64,
    spec: &EchoSpec,
    pattern: &Pattern,
    tx: &mpsc::Sender<(u64, Event)>,
    live: &Mutex<Tallies>,
    release: &mut watch::Receiver<bool>,
    stop: &CancellationToken,
) -> (Result<(), (&'static str, io::Error)>, EchoTracker, Instant)
where
    R: tokio::io::AsyncRead + Unpin,
    W: tokio::io::AsyncWrite + Unpin,
{
    let started = Instant::now();
    // Different connections send different stretches of the pattern.
    let base = index.wrapping_mul(7919) % goodput_core::pattern::UNIT_LEN as u64;
    let tracker = Mutex::new(EchoTracker::new(spec.message_size, base));
    // Since when the oldest unanswered message has waited for the server:
    // the last read, or the send that found nothing outstanding. The reply
    // timeout runs from here (one timer per connection, not one per read).
    // Nanoseconds after `started`.
    let progress = AtomicU64::new(0);
    let size = spec.message_size;
    let io_result = {
        let outstanding = || tracker.lock().map_or(0, |t| t.outstanding());
        let waited_since = || started + Duration::from_nanos(progress.load(Relaxed));
        let writer = async {
            let mut next = Instant::now();
            for _ in 0..spec.messages {
                if spec.send_after_recv {
                    // The timer for this message starts when the last echo is
                    // back. Only the reader brings `outstanding` to zero, and it
                    // is polled just before this on every wake of the task (see
                    // `both` below), so this needs no waker of its own.
                    std::future::poll_fn(|_| {
                        if outstanding() == 0 {
                            Poll::Ready(())
                        } else {
                            Poll::Pending
                        }
                    })
                    .await;
                    // tokio rounds a timer up to its next millisecond tick, so
                    // even a zero sleep would wait up to 1 ms: skip it.
                    if !spec.message_interval.is_zero() {
                        tokio::time::sleep(spec.message_interval).await;
                    }
                    next = Instant::now();
                }
                // Open loop: the clock starts at the scheduled time when the
                // writer is behind it (held up by an earlier write the server
                // did not take), so a slow server cannot hide its delay; when
                // on time, at the timer's wake-up, so the timer's own
                // millisecond granularity is not charged to the server.
                let begin = if spec.send_after_recv || Instant::now() >= next {
                    next
                } else {
                    tokio::time::sleep_until(next).await;
                    Instant::now()
                };
                // A slice of the shared pattern: nothing is allocated per message.
                let msg: &[u8] = tracker.lock().map(|t| t.next_message(pattern)).unwrap_or(&[]);
                let scheduled = begin.duration_since(started).as_nanos() as u64;
                // Counted as sent (and its clock started) before the write, so
                // an echo that comes back fast is never ahead of its message.
                let was_idle = tracker.lock().is_ok_and(|mut t| {
                    let idle = t.outstanding() == 0;
                    t.sent_one(scheduled);
                    idle
                });
                if was_idle {
                    progress.store(scheduled, Relaxed);
                }
                wr.write_all(msg).await.map_err(|e| ("send", e))?;
                tallies(live).sent(size as u64);
                next += spec.message_interval;
            }
            Ok::<(), (&'static str, io::Error)>(())
        };
        let reader = async {
            let mut buf = vec![0u8; size.clamp(512, 16 * 1024)];
            // Messages a read completed, reused from read to read.
            let mut completed: Vec<(u64, bool)> = Vec::new();
            loop {
                let done = tracker.lock().map_or(true, |t| t.echoed >= spec.messages);
                if done {
                    return Ok(());
                }
                let n = rd.read(&mut buf).await.map_err(|e| ("recv", e))?;
                if n == 0 {
                    return Err((
                        "recv",
                        io::Error::new(io::ErrorKind::UnexpectedEof, "the server closed the connection"),
                    ));
                }
                let now = started.elapsed().as_nanos() as u64;
                progress.store(now, Relaxed);
                completed.clear();
                if let Ok(mut t) = tracker.lock() {
                    t.received_chunk(pattern, &buf[..n], now, |rtt, ok| completed.push((rtt, ok)));
                }
                if !completed.is_empty() {
                    let mut live = tallies(live);
                    for &(rtt, ok) in &completed {
                        live.echoed(size as u64, rtt, ok);
                    }
                }
            }
        };
        // Fails when a message has waited a reply timeout with no byte back.
        let watchdog = async {
            loop {
                tokio::time::sleep_until(waited_since() + spec.reply_timeout).await;
                let now = Instant::now();
                if waited_since() + spec.reply_timeout > now {
                    continue;
                }
                if outstanding() > 0 {
                    return Err((
                        "recv",
                        io::Error::new(io::ErrorKind::TimedOut, "no echo within the reply timeout"),
                    ));
                }
                // Nothing outstanding: nothing to time until the next send.
                progress.store(now.duration_since(started).as_nanos() as u64, Relaxed);
            }
        };
        // The reader, then the writer, then the reply timer, in that order on
        // every wake of this one task. A waker from the reader to the writer
        // (a `Notify` when an echo is back) woke the task from inside its own
        // poll, which tokio reschedules as a yield and answers by waking the
        // other worker thread: a futex call per round trip, which perf
        // showed as nearly all of the client's futex calls.
        let (mut writer, mut reader, mut watchdog) = (pin!(writer), pin!(reader), pin!(watchdog));
        let (mut wrote, mut read) = (false, false);
        let both = std::future::poll_fn(|cx| {
            if !read {
                match reader.as_mut().poll(cx) {
                    Poll::Ready(Ok(())) => read = true,
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                    Poll::Pending => {}
                }
            }
            if !wrote {
                match writer.as_mut().poll(cx) {
                    Poll::Ready(Ok(())) => wrote = true,
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                    Poll::Pending => {}
                }
            }
            if read && wrote {
                return Poll::Ready(Ok(()));
            }
            match watchdog.as_mut().poll(cx) {
                Poll::Ready(r) => Poll::Ready(r),
                Poll::Pending => Poll::Pending,
            }
        });
        tokio::select! {
            _ = stop.cancelled() => Err(("run", io::Error::new(io::ErrorKind::Interrupted, "stopped"))),
            r = both => r,
        }
    };
    let _ = tx.send((index, Event::Finished)).await;
    // Held open until released (or stopped).
    if io_result.is_ok() && !matches!(spec.hold, Hold::No) {
        while !*release.borrow() {
            tokio::select! {
                _ = stop.cancelled() => break,
                r = release.changed() => if r.is_err() { break },
            }
        }
    }
    drop(rd);
    let _ = wr.shutdown().await;
    let t = tracker.into_inner().unwrap_or_else(|p| p.into_inner());
    (io_result, t, started)
}
