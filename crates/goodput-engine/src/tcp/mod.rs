//! The TCP good-put and reliability test (ctsTraffic's TCP behaviour):
//! client, server and the pieces they share.

mod client;
mod link;
mod server;
mod transfer;
mod wakeups;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use goodput_core::plan::TcpPattern;
use goodput_core::result::{
    ConnectionRecord, Detail, EndReason, Interval, Outcome, ProtocolErrorKind, Summary, SummaryBuilder,
    TcpSettings, TestKind, TestResult,
};
use goodput_core::session::{HelloLimits, Verdict, VerifyMode};
use goodput_core::units::{ByteRate, ByteSize, PortRange, ValueRange};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::admission::AdmissionLimits;
use crate::counters::{Counters, IntervalSampler, RunClock};
use crate::socket::SocketOptions;
use crate::Observer;
use link::Failure;
use transfer::{DataPhase, Ended, Part, PhaseEnd};
use wakeups::{Timer, Wakeups};

pub use client::run_client;
pub use goodput_core::result::{ShutdownMode, WireProtocol};
pub use goodput_core::spec::TcpWire;
pub use server::{bind_server, BoundServer};

/// Everything a TCP client run needs.
#[derive(Debug, Clone)]
pub struct TcpClientSpec {
    /// Wire protocol.
    pub wire: TcpWire,
    /// Server addresses, used round robin.
    pub targets: Vec<std::net::SocketAddr>,
    /// Local addresses to bind, round robin per family (empty = any).
    pub binds: Vec<std::net::IpAddr>,
    /// Local port or port range (0 = ephemeral).
    pub local_port: PortRange,
    /// Data-flow pattern.
    pub pattern: TcpPattern,
    /// Verification.
    pub verify: VerifyMode,
    /// Pattern bytes per connection (one value picked per connection);
    /// not used by a timed test.
    pub transfer: ValueRange<ByteSize>,
    /// A timed test: each connection's senders send for this long, and
    /// each direction ends with its sender's FIN.
    pub duration: Option<Duration>,
    /// A timed test's warm-up, which the receivers report apart.
    pub omit: Duration,
    /// Bytes per send/recv call (one value picked per connection).
    pub buffer: ValueRange<ByteSize>,
    /// Push-pull client→server segment.
    pub push_bytes: u64,
    /// Push-pull server→client segment.
    pub pull_bytes: u64,
    /// Per-connection send rate limit (one value picked per connection).
    pub rate_limit: Option<ValueRange<ByteRate>>,
    /// Rate-limit quantum.
    pub rate_period: Duration,
    /// Bursts: sends per burst and the pause between bursts.
    pub burst: Option<(u32, Duration)>,
    /// Concurrent connections.
    pub connections: u64,
    /// Passes over the connections (0 = until stopped).
    pub iterations: u64,
    /// Most connect attempts pending at once (0 = unlimited).
    pub throttle: u64,
    /// How successful connections are closed.
    pub shutdown: ShutdownMode,
    /// Socket options (the buffers are also asked of the server).
    pub socket: SocketOptions,
    /// Longest wait for any one I/O or connect.
    pub idle_timeout: Duration,
    /// Status interval.
    pub status_interval: Duration,
    /// Stop after this long.
    pub time_limit: Option<Duration>,
    /// Most connection records kept in the result document.
    pub max_records: usize,
}

/// Limits a server enforces per connection and per client address.
#[derive(Debug, Clone)]
pub struct ServerLimits {
    /// Concurrent connections in total.
    pub max_connections: u64,
    /// Concurrent connections from one client address.
    pub max_per_client: u64,
    /// Largest transfer one connection may ask for, bytes.
    pub max_transfer: u64,
    /// Largest I/O size one connection may ask for, bytes.
    pub max_buffer: u64,
    /// Longest one connection may run.
    pub max_duration: Duration,
    /// Connections in their hello (or being told why they were refused), in
    /// total; past it new connections are reset at once.
    pub max_pending: u64,
    /// The same from one client address.
    pub max_pending_per_client: u64,
    /// Time for the whole hello to arrive, from the accept.
    pub hello_timeout: Duration,
}

impl Default for ServerLimits {
    fn default() -> Self {
        let a = AdmissionLimits::for_open_files(20_000);
        Self {
            max_connections: a.max_connections,
            max_per_client: a.max_per_client,
            max_transfer: 1 << 40,
            max_buffer: 16 << 20,
            max_duration: Duration::from_secs(3600),
            max_pending: a.max_pending,
            max_pending_per_client: a.max_pending_per_client,
            hello_timeout: Duration::from_secs(10),
        }
    }
}

impl ServerLimits {
    /// The admission part of the limits.
    pub fn admission(&self) -> AdmissionLimits {
        AdmissionLimits {
            max_connections: self.max_connections,
            max_per_client: self.max_per_client,
            max_pending: self.max_pending,
            max_pending_per_client: self.max_pending_per_client,
        }
    }

    /// The hello part of the limits.
    pub fn hello(&self) -> HelloLimits {
        HelloLimits {
            max_transfer: self.max_transfer,
            max_buffer: self.max_buffer,
            max_duration_ms: self.max_duration.as_millis().try_into().unwrap_or(u64::MAX),
        }
    }
}

/// What a `--wire cts` server does on every connection (ctsTraffic needs
/// both ends started with the same flags).
#[derive(Debug, Clone, Copy)]
pub struct CtsServerPlan {
    /// Pattern.
    pub pattern: TcpPattern,
    /// Verification.
    pub verify: VerifyMode,
    /// Transfer per connection.
    pub transfer: u64,
    /// Push-pull client→server segment.
    pub push_bytes: u64,
    /// Push-pull server→client segment.
    pub pull_bytes: u64,
    /// I/O size.
    pub buffer: u64,
}

/// Everything a TCP server run needs.
#[derive(Debug, Clone)]
pub struct TcpServerSpec {
    /// Wire protocol.
    pub wire: TcpWire,
    /// The plan for `--wire cts` (ignored for the goodput wire).
    pub cts: Option<CtsServerPlan>,
    /// Listen addresses.
    pub listen: Vec<std::net::SocketAddr>,
    /// Whether the listen addresses are the defaults (a missing IPv6 stack is
    /// then skipped instead of failing).
    pub listen_defaulted: bool,
    /// SO_REUSEPORT on the listeners.
    pub reuse_port: bool,
    /// Socket options for accepted connections.
    pub socket: SocketOptions,
    /// Limits.
    pub limits: ServerLimits,
    /// Exit after this many connections ended.
    pub exit_after: Option<u64>,
    /// Longest wait for any one I/O.
    pub idle_timeout: Duration,
    /// Status interval.
    pub status_interval: Duration,
    /// Stop after this long.
    pub time_limit: Option<Duration>,
    /// Most connection records kept in the result document.
    pub max_records: usize,
}

/// Where a service beside the TCP server reports its connections: as
/// the TCP server's own tasks do, into its run loop, so `-v 4` lines, the
/// connection file and the historic statistics count them too.
/// (Its records only: the run loop's "established" lines name TCP.)
#[derive(Clone)]
pub struct RecordSink {
    pub(crate) tx: mpsc::UnboundedSender<Event>,
    pub(crate) next_index: Arc<std::sync::atomic::AtomicU64>,
    /// The run's start, once its loop runs: the records' time base.
    pub(crate) zero: Arc<std::sync::OnceLock<std::time::Instant>>,
    /// The run loop ends only when every holder of a token from here has
    /// let go, so the last records of a service that stops with the
    /// server are not lost.
    pub(crate) others: tokio_util::task::TaskTracker,
}

impl RecordSink {
    /// A connection is established: its index, from the server's one count.
    pub(crate) fn index(&self) -> u64 {
        self.next_index.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }

    /// The instant the run's times count from, if its loop has started.
    pub(crate) fn zero(&self) -> Option<std::time::Instant> {
        self.zero.get().copied()
    }

    /// Keeps the run loop reading records until the token is dropped.
    pub(crate) fn hold(&self) -> tokio_util::task::task_tracker::TaskTrackerToken {
        self.others.token()
    }

    /// A connection ended.
    pub(crate) fn ended(&self, record: ConnectionRecord) {
        let _ = self.tx.send(Event::Record(Box::new(record)));
    }
}

/// What a connection task tells the run loop.
pub(crate) enum Event {
    Established {
        index: u64,
        local: String,
        remote: String,
    },
    Record(Box<ConnectionRecord>),
}

/// What every connection of a run shares: the counters, the clock, the
/// cancellation, the idle timeout and the pattern. A connection holds one
/// reference to it rather than one to each.
pub(crate) struct Shared {
    pub(crate) counters: Counters,
    pub(crate) cancel: CancellationToken,
    /// The data phases' wake-ups: the run's stop and their timers.
    pub(crate) wakeups: Wakeups,
    pub(crate) clock: RunClock,
    pub(crate) idle: Duration,
    pub(crate) pattern: goodput_core::pattern::Pattern,
}

impl Shared {
    pub(crate) fn new(
        cancel: CancellationToken,
        clock: RunClock,
        idle: Duration,
        pattern: goodput_core::pattern::Pattern,
    ) -> Self {
        Self {
            counters: Counters::default(),
            cancel,
            wakeups: Wakeups::default(),
            clock,
            idle,
            pattern,
        }
    }
}

/// Pattern bytes moved so far by one end.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Progress {
    pub(crate) sent: u64,
    pub(crate) received: u64,
}

/// The verdict one end sends or records for a failure.
pub(crate) fn verdict_of(f: &Failure) -> Verdict {
    match f {
        Failure::Mismatch { direction, mismatch } => Verdict::DataMismatch {
            direction: *direction,
            offset: mismatch.offset,
            expected: mismatch.expected,
            actual: mismatch.actual,
        },
        Failure::Eof { .. } => Verdict::NotAllData,
        Failure::TooMuch => Verdict::TooMuchData,
        _ => Verdict::Aborted,
    }
}

fn protocol_error(kind: ProtocolErrorKind, message: String) -> Outcome {
    Outcome::ProtocolError {
        kind,
        direction: None,
        offset: None,
        expected: None,
        actual: None,
        message,
    }
}

/// The outcome a verdict stands for; `by` says whose verdict it is.
pub(crate) fn outcome_of_verdict(v: &Verdict, by: &str) -> Outcome {
    match *v {
        Verdict::Success => Outcome::Succeeded,
        Verdict::DataMismatch {
            direction,
            offset,
            expected,
            actual,
        } => Outcome::ProtocolError {
            kind: ProtocolErrorKind::DataMismatch,
            direction: Some(direction),
            offset: Some(offset),
            expected: Some(expected),
            actual: Some(actual),
            message: format!(
                "{by} found a data mismatch at byte {offset} of the {direction} stream: expected 0x{expected:02x}, got 0x{actual:02x}"
            ),
        },
        Verdict::NotAllData => protocol_error(
            ProtocolErrorKind::NotAllData,
            format!("{by}: the peer closed before all data was transferred"),
        ),
        Verdict::TooMuchData => protocol_error(
            ProtocolErrorKind::TooMuchData,
            format!("{by}: the peer sent more data than agreed"),
        ),
        Verdict::Aborted => Outcome::Aborted {
            reason: format!("{by} aborted the connection"),
        },
    }
}

/// The outcome this end records for a failure.
pub(crate) fn outcome_of_failure(f: &Failure, by: &str) -> Outcome {
    match f {
        Failure::Net { during, err } => crate::socket::network_outcome(during, err),
        Failure::Idle => protocol_error(
            ProtocolErrorKind::IdleTimeout,
            format!("{by}: nothing moved for longer than the idle timeout"),
        ),
        Failure::Cancelled => Outcome::Aborted {
            reason: "the run was stopped".into(),
        },
        Failure::BadMessage(m) => protocol_error(ProtocolErrorKind::BadMessage, format!("{by}: {m}")),
        Failure::Wire(e) => protocol_error(ProtocolErrorKind::BadMessage, format!("{by}: {e}")),
        Failure::Eof { during } => protocol_error(
            ProtocolErrorKind::NotAllData,
            format!("{by}: the peer closed before all data was transferred (during {during})"),
        ),
        other => outcome_of_verdict(&verdict_of(other), by),
    }
}

/// The records a run keeps (up to a cap) and the summary over all of them.
#[derive(Debug, Default)]
pub(crate) struct RunRecords {
    pub(crate) kept: Vec<ConnectionRecord>,
    pub(crate) omitted: u64,
    max: usize,
    summary: SummaryBuilder,
}

impl RunRecords {
    fn push(&mut self, r: ConnectionRecord) {
        self.summary.add(&r);
        if self.kept.len() < self.max {
            self.kept.push(r);
        } else {
            self.omitted += 1;
        }
    }
}

/// What the run loop returns.
pub(crate) struct Driven {
    records: RunRecords,
    intervals: Vec<Interval>,
    intervals_omitted: u64,
    end: EndReason,
    summary: Summary,
}

impl Driven {
    /// The result document of the run.
    pub(crate) fn into_result(
        self,
        kind: TestKind,
        started_unix_ms: u64,
        settings: TcpSettings,
    ) -> TestResult {
        TestResult {
            assertions: Vec::new(),
            spec: None,
            error: None,
            schema_version: goodput_core::result::SCHEMA_VERSION,
            tool: crate::tool_info(),
            kind,
            started_unix_ms,
            settings,
            intervals: self.intervals,
            intervals_omitted: self.intervals_omitted,
            connections: self.records.kept,
            connections_omitted: self.records.omitted,
            summary: self.summary,
            end: self.end,
            detail: Detail::None,
        }
    }
}

/// How a run is paced and when it stops, besides cancellation.
pub(crate) struct RunControl {
    pub(crate) status_interval: Duration,
    pub(crate) time_limit: Option<Duration>,
    pub(crate) exit_after: Option<u64>,
    pub(crate) max_records: usize,
}

/// The run loop shared by client and server: status intervals, records as
/// they arrive, the time limit and the exit count, until `done` completes.
pub(crate) async fn drive(
    mut rx: mpsc::UnboundedReceiver<Event>,
    run: &Arc<Shared>,
    clock: RunClock,
    observer: &mut dyn Observer,
    control: RunControl,
    done: impl Future<Output = ()>,
) -> Driven {
    let counters = &run.counters;
    let cancel = &run.cancel;
    let RunControl {
        status_interval,
        time_limit,
        exit_after,
        max_records,
    } = control;
    let mut records = RunRecords {
        max: max_records,
        ..Default::default()
    };
    let mut intervals = Vec::new();
    let mut intervals_omitted = 0u64;
    let mut sampler = IntervalSampler::default();
    let start = tokio::time::Instant::from_std(clock.instant_at(0));
    let mut ticker = tokio::time::interval_at(start + status_interval, status_interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let deadline =
        tokio::time::sleep_until(start + time_limit.unwrap_or(Duration::from_secs(86400 * 365 * 100)));
    // The data phases' timer and their wake-up on a stop run beside this
    // loop, so that the observer's output never delays them.
    let wakeups = tokio_util::task::AbortOnDropHandle::new(tokio::spawn(keep_wakeups(run.clone())));
    tokio::pin!(deadline, done);
    let mut own_reason = None;
    let mut ended = 0u64;
    let mut handle = |ev: Event, observer: &mut dyn Observer, records: &mut RunRecords| -> bool {
        match ev {
            Event::Established { index, local, remote } => {
                observer.on_established(index, &local, &remote, clock.now_s())
            }
            Event::Record(r) => {
                counters.count_outcome(&r.outcome);
                observer.on_connection(&r);
                records.push(*r);
                ended += 1;
                if exit_after.is_some_and(|n| ended >= n) {
                    return true;
                }
            }
        }
        false
    };
    loop {
        tokio::select! {
            biased;
            Some(ev) = rx.recv() => {
                if handle(ev, observer, &mut records) && own_reason.is_none() {
                    own_reason = Some(EndReason::ExitLimit);
                    cancel.cancel();
                }
            }
            _ = ticker.tick() => {
                let iv = sampler.sample(counters, clock.now_ns());
                observer.on_interval(&iv);
                // Bounded like the records: a server may run for months.
                if intervals.len() < max_records {
                    intervals.push(iv);
                } else {
                    intervals_omitted += 1;
                }
            }
            _ = &mut deadline, if time_limit.is_some() && own_reason.is_none() && !cancel.is_cancelled() => {
                own_reason = Some(EndReason::TimeLimit);
                cancel.cancel();
            }
            _ = &mut done => break,
        }
    }
    drop(wakeups);
    while let Ok(ev) = rx.try_recv() {
        handle(ev, observer, &mut records);
    }
    let now = clock.now_ns();
    let iv = sampler.sample(counters, now);
    intervals.push(iv);
    observer.on_interval(&iv);
    let end = own_reason.unwrap_or(if cancel.is_cancelled() {
        EndReason::Interrupted
    } else {
        EndReason::Completed
    });
    let summary = records.summary.finish(now);
    Driven {
        records,
        intervals,
        intervals_omitted,
        end,
        summary,
    }
}

/// Runs the data phases' timer, and wakes every phase once the run is
/// cancelled; until aborted.
async fn keep_wakeups(run: Arc<Shared>) {
    let timer = Timer::new(&run.wakeups, run.clock);
    tokio::pin!(timer);
    let never = tokio::select! {
        _ = run.cancel.cancelled() => {
            // The data phases wait on their sockets and this timer only.
            run.wakeups.stop();
            timer.await
        }
        never = &mut timer => never,
    };
    match never {}
}

pub(crate) fn unix_ms_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
