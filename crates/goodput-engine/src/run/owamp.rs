//! An `owamp` spec's run: owping's test, a session each way (or one) with
//! the server, the server's log fetched, and owping's figures of each.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use goodput_core::owamp::control::{Slot, SlotKind};
use goodput_core::owamp::pfs;
use goodput_core::owamp::stats::OneWayFigures;
use goodput_core::owamp::Mode;
use goodput_core::result::{
    ClockState, ConnectionRecord, Detail, EndReason, HopRange, OneWayDirection, OneWayStats, OneWaySummary,
    OwampDetail, Percentiles, SummaryBuilder, TcpSettings, TestKind, TestResult, WireProtocol,
    SCHEMA_VERSION,
};
use goodput_core::spec::owamp::SecurityMode;
use goodput_core::spec::{Family, OwampDirection, OwampSpec};
use goodput_core::stamp::{unix_ns_from_ntp, ErrorEstimate};
use tokio_util::sync::CancellationToken;

use super::{error_chain, resolve, Failure};
use crate::owamp::client::{
    run_owamp, ClientError, ControlTarget, EngineEndpoints, OneWayOutcome, OwampOutcome, OwampRequest,
};
use crate::owamp::conn::ServerPolicy;
use crate::owamp::server::{bind_control_server, ControlServerSpec, SessionLimits};
use crate::Observer;

/// The longest wait for a control message the server owes.
const CONTROL_TIMEOUT: Duration = Duration::from_secs(30);

/// goodput's own OWAMP or TWAMP server on loopback, for a spec that
/// names no host: it offers the spec's mode, with the spec's key.
pub(super) struct Embedded {
    cancel: CancellationToken,
    task: tokio::task::JoinHandle<goodput_core::result::OwampServerCounters>,
}

impl Embedded {
    /// Stops it and waits for its sessions to end.
    pub(super) async fn stop(self) {
        self.cancel.cancel();
        let _ = self.task.await;
    }
}

/// Where the client connects, with its key, and the embedded server when
/// the spec names no host.
#[allow(clippy::too_many_arguments)]
pub(super) async fn target_or_embedded(
    twoway: bool,
    host: &Option<String>,
    port: u16,
    family: Family,
    bind: Option<IpAddr>,
    mode: SecurityMode,
    key_identity: &Option<String>,
    passphrase_file: &Option<PathBuf>,
) -> Result<(ControlTarget, Option<Embedded>), Failure> {
    if let Some(host) = host {
        let (v4, v6) = families(family);
        let server = resolve(host, port, v4, v6).await?[0];
        return Ok((
            control_target(server, bind, mode, key_identity, passphrase_file)?,
            None,
        ));
    }
    let ip: IpAddr = if family == Family::Ipv6 {
        std::net::Ipv6Addr::LOCALHOST.into()
    } else {
        std::net::Ipv4Addr::LOCALHOST.into()
    };
    let mut target = control_target(SocketAddr::new(ip, 0), bind, mode, key_identity, passphrase_file)?;
    let spec = ControlServerSpec {
        twoway,
        listen: vec![SocketAddr::new(ip, 0)],
        policy: ServerPolicy {
            modes: Mode::Open.bit()
                | target
                    .key
                    .as_ref()
                    .map_or(0, |_| Mode::Authenticated.bit() | Mode::Encrypted.bit()),
            keys: target.key.iter().cloned().collect(),
            count: 2048,
        },
        allow: Vec::new(),
        test_ports: None,
        limits: SessionLimits::default(),
    };
    let bound = bind_control_server(spec).map_err(|e| Failure::setup(format!("the embedded server: {e}")))?;
    target.server = *bound
        .local_addrs()
        .first()
        .ok_or_else(|| Failure::setup("the embedded server has no address"))?;
    let cancel = CancellationToken::new();
    let task = tokio::spawn(bound.run(cancel.clone()));
    Ok((target, Some(Embedded { cancel, task })))
}

/// (IPv4 only, IPv6 only).
pub(super) fn families(f: Family) -> (bool, bool) {
    (f == Family::Ipv4, f == Family::Ipv6)
}

/// The protocol's mode for the spec's.
pub(super) fn mode_of(m: SecurityMode) -> Mode {
    match m {
        SecurityMode::Open => Mode::Open,
        SecurityMode::Authenticated => Mode::Authenticated,
        SecurityMode::Encrypted => Mode::Encrypted,
    }
}

/// Where to connect and with what key: the key identity's passphrase
/// read from the pfs file.
pub(super) fn control_target(
    server: SocketAddr,
    bind: Option<IpAddr>,
    mode: SecurityMode,
    key_identity: &Option<String>,
    passphrase_file: &Option<PathBuf>,
) -> Result<ControlTarget, Failure> {
    let key = match (key_identity, passphrase_file) {
        (Some(id), Some(path)) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| Failure::setup(format!("`passphrase_file` {}: {e}", path.display())))?;
            let keys = pfs::parse(&text)
                .map_err(|e| Failure::setup(format!("`passphrase_file` {}: {e}", path.display())))?;
            let k = pfs::find(&keys, id).ok_or_else(|| {
                Failure::setup(format!(
                    "`passphrase_file` {} has no key for `key_identity` {id:?}",
                    path.display()
                ))
            })?;
            Some(k.clone())
        }
        _ => None,
    };
    Ok(ControlTarget {
        server,
        bind,
        mode: mode_of(mode),
        key,
        io_timeout: CONTROL_TIMEOUT,
    })
}

/// Our clock as a result states it.
pub(super) fn clock_state(e: ErrorEstimate) -> ClockState {
    ClockState {
        synchronized: e.synchronized,
        error_us: e.error_ns().filter(|_| e.synchronized).map(|ns| ns / 1e3),
    }
}

/// Octets as lower-case hex.
pub(super) fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// One direction over a run: its figures (a stream's sessions merged),
/// the session it names (a stream's first) and a stream's summaries.
struct Way {
    figures: OneWayFigures,
    sid: [u8; 16],
    sender: SocketAddr,
    receiver: SocketAddr,
    near_ns: i64,
    intervals: Vec<OneWaySummary>,
}

impl Way {
    fn of(o: &OneWayOutcome) -> Self {
        Way {
            figures: OneWayFigures::from_records(&o.records, o.end.next_seq, &o.end.skips),
            sid: o.plan.sid,
            sender: o.plan.sender,
            receiver: o.plan.receiver,
            near_ns: o.plan.start_unix_ns,
            intervals: Vec::new(),
        }
    }
}

fn us(ns: i64) -> f64 {
    ns as f64 / 1e3
}

fn delay_of(f: &OneWayFigures) -> Option<OneWayStats> {
    (!f.delay.is_empty()).then(|| OneWayStats {
        count: f.delay.len(),
        min_us: us(f.delay.min()),
        median_us: us(f.delay.quantile(0.5)),
        max_us: us(f.delay.max()),
        jitter_us: us(f.jitter_ns().unwrap_or(0)),
        synchronized: f.synchronized,
        error_bound_us: f.max_error_ns.map(|e| e / 1e3),
        ipdv: f.ipdv.ipdv_stats(),
    })
}

/// A stream's summary of one session (powstream's .sum).
fn summary_of(f: &OneWayFigures, near: i64) -> OneWaySummary {
    OneWaySummary {
        start_ns: f.first_send.map_or(near, |t| unix_ns_from_ntp(t, near)),
        end_ns: f.last_send.map_or(near, |t| unix_ns_from_ntp(t, near)),
        sent: f.sent,
        unsent: f.unsent,
        received: f.received,
        lost: f.lost,
        duplicates: f.duplicates,
        reordered: f.reordered,
        delay: delay_of(f),
        hops: f.hops().map(|(min, max)| HopRange { min, max }),
        histogram_ns: f.delay.encode_positive(),
        histogram_negative_ns: f.delay.encode_negative(),
    }
}

/// One direction's figures for the result document.
fn direction(w: Way) -> OneWayDirection {
    let f = &w.figures;
    let near = w.near_ns;
    let percentiles = (!f.delay.is_empty()).then(|| Percentiles {
        count: f.delay.len(),
        min_us: us(f.delay.min()),
        p50_us: us(f.delay.quantile(0.5)),
        p90_us: us(f.delay.quantile(0.9)),
        p99_us: us(f.delay.quantile(0.99)),
        p999_us: us(f.delay.quantile(0.999)),
        max_us: us(f.delay.max()),
    });
    OneWayDirection {
        sid: hex(&w.sid),
        sender: w.sender.to_string(),
        receiver: w.receiver.to_string(),
        sent: f.sent,
        unsent: f.unsent,
        received: f.received,
        lost: f.lost,
        duplicates: f.duplicates,
        reordered: f.reordered,
        reordered_percent: f.n_reordering_percent().first().copied().unwrap_or(0.0),
        n_reordering_percent: f.n_reordering_percent(),
        delay: delay_of(f),
        percentiles,
        hops: f.hops().map(|(min, max)| HopRange { min, max }),
        histogram_ns: f.delay.encode_positive(),
        histogram_negative_ns: f.delay.encode_negative(),
        first_ns: f.first_send.map(|t| unix_ns_from_ntp(t, near)),
        last_ns: f.last_send.map(|t| unix_ns_from_ntp(t, near)),
        intervals: w.intervals,
    }
}

/// A stream's summary as one status line.
fn summary_line(n: usize, what: &str, s: &OneWaySummary) -> String {
    let delay = s.delay.map_or_else(
        || "no delay".to_owned(),
        |d| {
            format!(
                "delay min/median/max {:.3}/{:.3}/{:.3} ms{}",
                d.min_us / 1e3,
                d.median_us / 1e3,
                d.max_us / 1e3,
                if d.synchronized { "" } else { " (unsync)" }
            )
        },
    );
    format!(
        "summary {n} {what}: {} sent, {} lost, {} duplicates, {} reordered, {delay}",
        s.sent, s.lost, s.duplicates, s.reordered
    )
}

/// The schedule's slot for the spec: its interval, fixed or the mean of
/// exponential gaps.
pub(super) fn slot_of(spec: &OwampSpec) -> Slot {
    let kind = if spec.poisson {
        SlotKind::Exponential
    } else {
        SlotKind::Fixed
    };
    Slot::from_ns(kind, spec.interval.0.as_nanos() as u64)
}

/// What a run has gathered: each direction, and the sessions so far.
struct Stream {
    ways: [Option<Way>; 2],
    sessions: usize,
    warned: bool,
    continuous: bool,
    max_records: usize,
    /// The last session's mode and clock.
    last: Option<(Mode, ErrorEstimate)>,
}

impl Stream {
    /// Adds a session's outcome: to each direction's totals, and for a
    /// stream as a summary (printed, and kept while there is room).
    fn absorb(&mut self, out: OwampOutcome, observer: &mut dyn Observer) {
        if !out.clock.synchronized && !self.warned {
            self.warned = true;
            observer.on_notice(
                "this host's clock is not synchronised (ntp_adjtime): its one-way delays are marked unsync",
            );
        }
        self.sessions += 1;
        self.last = Some((out.mode, out.clock));
        // A stream's session cut short is left out once others have
        // counted: its loss would only be the cut.
        if self.continuous && out.interrupted && self.ways.iter().any(Option::is_some) {
            return;
        }
        for (i, o) in [&out.to, &out.from].into_iter().enumerate() {
            let Some(o) = o else { continue };
            let mut w = Way::of(o);
            if self.continuous {
                let s = summary_of(&w.figures, w.near_ns);
                observer.on_one_way_summary(i == 0, &s);
                observer.on_notice(&summary_line(
                    self.sessions,
                    if i == 0 { "to" } else { "from" },
                    &s,
                ));
                w.intervals.push(s);
            }
            match &mut self.ways[i] {
                Some(total) => {
                    total.figures.merge(&w.figures);
                    if total.intervals.len() < self.max_records.max(1) {
                        total.intervals.append(&mut w.intervals);
                    }
                }
                none => *none = Some(w),
            }
        }
    }
}

/// How long before its Start Time a stream's next session is set up (its
/// control connection, the greeting and the requests).
const STREAM_SETUP_LEAD: Duration = Duration::from_secs(2);

/// Most sessions of a stream in flight at once (one sending, the one
/// before it finishing its timeout and fetch, and room for slow ones).
const STREAM_IN_FLIGHT: usize = 4;

/// A stream's Start Times: the first a little ahead, each next one where
/// the previous one's schedule ends, so that the
/// sessions follow each other without a gap (powstream overlaps its
/// sessions the same way). A Poisson schedule ends where its draws say;
/// the next session starts at the expected end.
async fn run_stream(
    target: &ControlTarget,
    req: &OwampRequest,
    spec: &OwampSpec,
    stream: &mut Stream,
    observer: &mut dyn Observer,
    cancel: &CancellationToken,
) -> Result<(), Failure> {
    let period_ns = i64::from(req.count).saturating_mul(spec.interval.0.as_nanos() as i64);
    let mut start = crate::datagram::now_unix_ns() + STREAM_SETUP_LEAD.as_nanos() as i64;
    // With a duration, no session is started whose schedule would end
    // past it; those under way finish (their timeout and fetch), so the
    // stream ends whole rather than cut (and that is no interruption).
    let until = spec
        .duration
        .map(|d| start.saturating_add(d.0.as_nanos().min(i64::MAX as u128) as i64));
    let mut running: std::collections::VecDeque<tokio::task::JoinHandle<Result<OwampOutcome, ClientError>>> =
        std::collections::VecDeque::new();
    let mut launching = true;
    loop {
        if launching && until.is_some_and(|u| start.saturating_add(period_ns) > u) {
            launching = false;
        }
        if launching && running.len() < STREAM_IN_FLIGHT && !cancel.is_cancelled() {
            let (t, mut r, c) = (target.clone(), req.clone(), cancel.clone());
            r.start_unix_ns = Some(start);
            running.push_back(tokio::spawn(async move {
                run_owamp(&t, &r, &EngineEndpoints, c).await
            }));
            // Packet i is due at Start Time plus i + 1 gaps: the next
            // session's first comes one interval after this one's last.
            start = start.saturating_add(period_ns);
        }
        if running.is_empty() {
            return Ok(());
        }
        let launch_in = (start - STREAM_SETUP_LEAD.as_nanos() as i64 - crate::datagram::now_unix_ns()).max(0);
        let next_due = tokio::time::sleep(Duration::from_nanos(launch_in as u64));
        let front = running.front_mut().expect("a session runs");
        tokio::select! {
            _ = next_due, if launching && !cancel.is_cancelled() => {}
            _ = cancel.cancelled(), if launching => launching = false,
            done = front => {
                running.pop_front();
                match done {
                    Ok(Ok(out)) => stream.absorb(out, observer),
                    // No session has ended well yet: the stream cannot
                    // start (a refusal, a wrong key); say why and stop.
                    Ok(Err(e)) if stream.last.is_none() => {
                        cancel_rest(&mut running);
                        return Err(Failure::test(error_chain(&e)));
                    }
                    // Later, one failed session is a gap in the stream.
                    Ok(Err(e)) => observer.on_notice(&format!("a session failed: {}", error_chain(&e))),
                    Err(e) => observer.on_notice(&format!("a session's task ended: {e}")),
                }
            }
        }
    }
}

fn cancel_rest(
    running: &mut std::collections::VecDeque<tokio::task::JoinHandle<Result<OwampOutcome, ClientError>>>,
) {
    for h in running.drain(..) {
        h.abort();
    }
}

/// Runs a validated OWAMP spec.
pub(super) async fn run(
    spec: &OwampSpec,
    observer: &mut dyn Observer,
    cancel: CancellationToken,
    max_records: usize,
) -> Result<TestResult, Failure> {
    let (target, embedded) = target_or_embedded(
        false,
        &spec.host,
        spec.port,
        spec.family,
        spec.bind,
        spec.mode,
        &spec.key_identity,
        &spec.passphrase_file,
    )
    .await?;
    let result = run_with(spec, observer, cancel, max_records, target).await;
    if let Some(e) = embedded {
        e.stop().await;
    }
    result
}

async fn run_with(
    spec: &OwampSpec,
    observer: &mut dyn Observer,
    cancel: CancellationToken,
    max_records: usize,
    target: ControlTarget,
) -> Result<TestResult, Failure> {
    let server = target.server;
    // A stream's sessions are its summaries, one after the other.
    let per_session = if spec.continuous {
        spec.summary_every
    } else {
        spec.count
    };
    let count = u32::try_from(per_session).map_err(|_| Failure::setup("`count` must be below 2^32"))?;
    let req = OwampRequest {
        count,
        slots: vec![slot_of(spec)],
        padding: spec.padding,
        dscp: spec.dscp,
        timeout: spec.timeout.0,
        test_ports: spec.test_ports,
        to: spec.direction.sends(),
        from: spec.direction.receives(),
        start_unix_ns: None,
    };
    let ways = match spec.direction {
        OwampDirection::Both => "to and from the server",
        OwampDirection::To => "to the server",
        OwampDirection::From => "from the server",
    };
    let banner = vec![
        (
            "Server".to_owned(),
            format!("{server} (OWAMP-Control, {} mode)", spec.mode.name()),
        ),
        (
            "Packets".into(),
            format!(
                "{}{count} of {} B {ways}, {} {:.3} ms, DSCP {}, TTL 255",
                if spec.continuous {
                    "until stopped, sessions and summaries of "
                } else {
                    ""
                },
                spec.packet_bytes(),
                if spec.poisson { "Poisson, mean" } else { "every" },
                spec.interval.0.as_secs_f64() * 1e3,
                spec.dscp
            ),
        ),
        (
            "Loss timeout".into(),
            format!("{} ms", spec.timeout.0.as_millis()),
        ),
    ];
    observer.on_start("goodput owamp", &banner);
    let started_unix_ms = (crate::datagram::now_unix_ns() / 1_000_000) as u64;
    let t0 = std::time::Instant::now();
    let mut stream = Stream {
        ways: [None, None],
        sessions: 0,
        warned: false,
        continuous: spec.continuous,
        max_records,
        last: None,
    };
    if spec.continuous {
        run_stream(&target, &req, spec, &mut stream, observer, &cancel).await?;
    } else {
        let out = run_owamp(&target, &req, &EngineEndpoints, cancel.clone())
            .await
            .map_err(|e| Failure::test(error_chain(&e)))?;
        stream.absorb(out, observer);
    }
    let Some((mode, clock)) = stream.last else {
        return Err(Failure::test(
            "the stream was stopped before its first session ended",
        ));
    };
    let interrupted = cancel.is_cancelled();
    let ways = stream.ways;
    let [to, from] = ways;
    let (to, from) = (to.map(direction), from.map(direction));
    let elapsed_ns = t0.elapsed().as_nanos() as u64;
    let bytes = u64::from(spec.packet_bytes());
    let mut summary = SummaryBuilder::default();
    let mut connections = Vec::new();
    for (i, way) in [&to, &from].into_iter().enumerate() {
        let Some(d) = way else { continue };
        let sending = i == 0;
        let outcome = if d.sent > 0 && d.received == 0 {
            goodput_core::result::Outcome::NetworkError {
                during: "receive".into(),
                errno: None,
                name: "NoPackets".into(),
                message: format!("none of {} packets arrived", d.sent),
            }
        } else {
            goodput_core::result::Outcome::Succeeded
        };
        let record = ConnectionRecord {
            index: i as u64,
            connection_id: d.sid.clone(),
            local_address: if sending { &d.sender } else { &d.receiver }.clone(),
            remote_address: if sending { &d.receiver } else { &d.sender }.clone(),
            start_s: 0.0,
            time_slice_s: elapsed_ns as f64 / 1e9,
            elapsed_ns,
            pattern: None,
            transfer_bytes: d.sent * bytes,
            buffer_bytes: bytes,
            rate_limit_bytes_per_second: (bytes as f64 / spec.interval.0.as_secs_f64()) as u64,
            sent_bytes: if sending { d.sent * bytes } else { 0 },
            received_bytes: if sending { 0 } else { d.received * bytes },
            outcome,
            peer: None,
            shutdown: None,
            quic: None,
            tcp_info: None,
            media: None,
            timed: None,
        };
        summary.add(&record);
        connections.push(record);
    }
    Ok(TestResult {
        assertions: Vec::new(),
        spec: None,
        error: None,
        schema_version: SCHEMA_VERSION,
        tool: crate::tool_info(),
        kind: TestKind::OwampClient,
        started_unix_ms,
        settings: TcpSettings {
            connections: Some(connections.len() as u64),
            ..TcpSettings::bare(
                WireProtocol::Owamp,
                vec![server.to_string()],
                spec.status_interval.0.as_millis() as u64,
            )
        },
        intervals: Vec::new(),
        intervals_omitted: 0,
        connections,
        summary: summary.finish(elapsed_ns),
        connections_omitted: 0,
        end: if interrupted {
            EndReason::Interrupted
        } else {
            EndReason::Completed
        },
        detail: Detail::Owamp(Box::new(OwampDetail {
            mode: mode.name().to_owned(),
            padding: spec.padding,
            packet_bytes: spec.packet_bytes(),
            interval_ns: spec.interval.0.as_nanos() as u64,
            poisson: spec.poisson,
            dscp: spec.dscp,
            timeout_ms: spec.timeout.0.as_millis() as u64,
            local_clock: clock_state(clock),
            to,
            from,
        })),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::owamp::client::{SenderEnd, SessionPlan};
    use goodput_core::owamp::control::DataRecord;
    use goodput_core::stamp::ntp_from_unix_ns;

    const T0: i64 = 1_800_000_000_000_000_000;

    /// A session from the server: `lost` of its 10 packets never came.
    fn session(k: i64, lost: &[u32], interrupted: bool) -> OwampOutcome {
        let start = T0 + k * 1_000_000_000;
        let records = (0..10u32)
            .map(|seq| {
                let sent = start + i64::from(seq + 1) * 100_000_000;
                DataRecord {
                    seq,
                    send_err: 1,
                    recv_err: 1,
                    send_time: ntp_from_unix_ns(sent),
                    recv_time: if lost.contains(&seq) {
                        0
                    } else {
                        ntp_from_unix_ns(sent + 250_000)
                    },
                    ttl: 254,
                }
            })
            .collect();
        let at = |p: u16| SocketAddr::from(([127, 0, 0, 1], p));
        OwampOutcome {
            mode: Mode::Open,
            clock: ErrorEstimate::from_u16(1),
            to: None,
            from: Some(OneWayOutcome {
                plan: SessionPlan {
                    sid: [k as u8; 16],
                    sender: at(8760),
                    receiver: at(9000),
                    start_time: ntp_from_unix_ns(start),
                    start_unix_ns: start,
                    keys: None,
                },
                records,
                end: SenderEnd {
                    next_seq: 10,
                    skips: Vec::new(),
                },
            }),
            interrupted,
        }
    }

    #[test]
    fn a_stream_sums_its_sessions_and_leaves_out_a_cut_one() {
        let mut s = Stream {
            ways: [None, None],
            sessions: 0,
            warned: false,
            continuous: true,
            max_records: 100,
            last: None,
        };
        let mut o = crate::observer::NullObserver;
        s.absorb(session(0, &[3], false), &mut o);
        s.absorb(session(1, &[], false), &mut o);
        // Stopped half-way: everything after the cut reads as lost.
        s.absorb(session(2, &[5, 6, 7, 8, 9], true), &mut o);
        assert!(s.warned, "an unsynchronised clock is said once");
        assert!(s.ways[0].is_none());
        let d = direction(s.ways[1].take().unwrap());
        assert_eq!((d.sent, d.received, d.lost), (20, 19, 1));
        assert_eq!(d.intervals.len(), 2);
        assert_eq!(
            (d.intervals[0].lost, d.intervals[1].lost, d.intervals[1].sent),
            (1, 0, 10)
        );
        assert_eq!(d.intervals[1].start_ns, T0 + 1_100_000_000);
        assert_eq!(d.first_ns, Some(T0 + 100_000_000));
        assert_eq!(d.last_ns, Some(T0 + 2_000_000_000));
        let delay = d.delay.unwrap();
        assert!(!delay.synchronized);
        assert_eq!((delay.min_us, delay.max_us), (250.0, 250.0));
        assert_eq!(d.hops, Some(HopRange { min: 1, max: 1 }));
        assert_eq!(d.sid, "00".repeat(16));
    }

    #[test]
    fn a_one_off_test_keeps_a_cut_session() {
        let mut s = Stream {
            ways: [None, None],
            sessions: 0,
            warned: false,
            continuous: false,
            max_records: 100,
            last: None,
        };
        s.absorb(session(0, &[8, 9], true), &mut crate::observer::NullObserver);
        let d = direction(s.ways[1].take().unwrap());
        assert_eq!((d.sent, d.lost), (10, 2));
        assert!(d.intervals.is_empty());
    }
}
