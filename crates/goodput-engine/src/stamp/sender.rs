//! The STAMP Session-Sender: one task and one connected UDP socket per
//! session, packets on a fixed timeline, replies read with their kernel
//! timestamps and TTL; one collector task tallies every session, every
//! status interval and the run.

use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::Duration;

use goodput_core::result::{
    ConnectionRecord, Detail, EndReason, Interval, Outcome, StampDetail, StampInterval, StampPacket,
    StampPacketStatus, StampSessionRecord, Summary, TcpSettings, TestKind, TestResult, WireProtocol,
    SCHEMA_VERSION,
};
use goodput_core::stamp::stats::{Sample, SplitFacts, Tally, Tracker, Verdict};
use goodput_core::stamp::{ntp_from_unix_ns, ReflectorPacket, SenderPacket, MAX_PACKET_LEN, SEND_TTL};
use socket2::{Domain, Protocol, Socket, Type};
use tokio::io::Interest;
use tokio::net::UdpSocket;
use tokio::sync::mpsc;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

use crate::datagram as msg;
use crate::{EngineError, Observer};

/// How to run a sender.
#[derive(Debug, Clone)]
pub struct StampSenderSpec {
    /// The reflector.
    pub target: SocketAddr,
    /// Local address to send from (default: the unspecified address).
    pub bind: Option<IpAddr>,
    /// Concurrent sessions, each with its own socket and source port.
    pub sessions: u32,
    /// Time between packets of one session.
    pub interval: Duration,
    /// Packets per session (`None` = until `duration` or cancelled).
    pub count: Option<u64>,
    /// How long to send (`None` = until `count`).
    pub duration: Option<Duration>,
    /// UDP payload per packet, bytes (44..=9000).
    pub packet_bytes: usize,
    /// DSCP (0..=63).
    pub dscp: u8,
    /// RFC 8972 SSID of session 0 (`ssid + i` for session `i`, skipping 0).
    pub ssid: Option<u16>,
    /// How long a packet may take before it counts as lost.
    pub timeout: Duration,
    /// Status interval.
    pub status_interval: Duration,
    /// Most intervals and sessions kept in the result document.
    pub max_records: usize,
    /// The reflector is known to number its replies itself (RFC 8762
    /// §4.3, stateful): each session's loss is split by direction even
    /// when no reply showed that numbering (a session that lost only
    /// replies). Say so only when it is known: against a stateless
    /// reflector every loss would read as replies lost on the way back.
    pub reflector_stateful: bool,
}

impl StampSenderSpec {
    /// The sender for a STAMP spec's sessions to `target` (its resolved
    /// reflector).
    pub fn for_spec(
        spec: &goodput_core::spec::StampSpec,
        target: SocketAddr,
        max_records: usize,
        reflector_stateful: bool,
    ) -> Self {
        Self {
            target,
            bind: spec.bind,
            sessions: spec.sessions,
            interval: spec.packet_interval(),
            count: spec.packet_count(),
            duration: spec.duration.map(|d| d.0),
            packet_bytes: spec.size,
            dscp: spec.dscp,
            ssid: spec.ssid,
            timeout: spec.timeout.0,
            status_interval: spec.status_interval.0,
            max_records,
            reflector_stateful,
        }
    }

    pub(super) fn session_ssid(&self, i: u32) -> u16 {
        match self.ssid {
            None => 0,
            // Walk the 65,535 non-zero ids.
            Some(s) => ((u32::from(s) - 1 + i) % 65_535 + 1) as u16,
        }
    }
}

enum Event {
    Sent(usize),
    Reply(usize, Verdict, u16),
    Lost(usize, u32, i64),
    /// Packets planned that did not leave, and why.
    NotSent(usize, u32, i64, u64, String, String),
    Done(Box<SessionEnd>),
}

/// How a session ended, beside its tally.
pub(super) struct SessionEnd {
    pub(super) index: usize,
    pub(super) local: String,
    pub(super) split: SplitFacts,
    pub(super) abandoned: u64,
    pub(super) send_errors: u64,
    pub(super) first_error: Option<std::io::Error>,
    pub(super) started_ns: u64,
    pub(super) ended_ns: u64,
}

/// Runs the sessions to the end (count, duration or `cancel`) and returns
/// the result document. With `reflector_stateful`, each session's loss
/// is split by direction even when no reply showed the reflector's own
/// numbering.
pub async fn run_sender(
    spec: StampSenderSpec,
    observer: &mut dyn Observer,
    cancel: CancellationToken,
) -> Result<TestResult, EngineError> {
    if !(goodput_core::stamp::BASE_LEN..=MAX_PACKET_LEN).contains(&spec.packet_bytes) {
        return Err(EngineError::Config(format!(
            "the packet size must be {}..={MAX_PACKET_LEN} bytes",
            goodput_core::stamp::BASE_LEN
        )));
    }
    if spec.sessions == 0 || spec.interval.is_zero() || spec.timeout.is_zero() {
        return Err(EngineError::Config(
            "sessions, interval and timeout must be above zero".into(),
        ));
    }
    let started_unix_ms = (msg::now_unix_ns() / 1_000_000) as u64;
    let start = Instant::now();
    let spec = Arc::new(spec);
    let stateful = spec.reflector_stateful;
    let (tx, mut rx) = mpsc::channel::<Event>(8192);
    let stop_sending = cancel.child_token();
    for i in 0..spec.sessions as usize {
        let (spec, tx, cancel) = (spec.clone(), tx.clone(), stop_sending.clone());
        tokio::spawn(async move { session(i, spec, stateful, tx, cancel, start).await });
    }
    drop(tx);
    let n = spec.sessions as usize;
    let mut tallies = vec![Tally::per_session(); n];
    // The run's total counts every event itself, at full precision.
    let mut total = Tally::default();
    let mut ends: Vec<Option<SessionEnd>> = (0..n).map(|_| None).collect();
    let mut window = Tally::default();
    let mut intervals = Vec::new();
    let mut intervals_omitted = 0u64;
    let mut ticker = tokio::time::interval_at(start + spec.status_interval, spec.status_interval);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut last_tick = start;
    let mut done = 0usize;
    let mut failed = 0u64;
    let wants_packets = observer.wants_packets();
    let mut interrupted = false;
    let bytes = spec.packet_bytes as u64;
    loop {
        tokio::select! {
            ev = rx.recv() => {
                let Some(ev) = ev else { break };
                match ev {
                    Event::Sent(s) => {
                        tallies[s].sent += 1;
                        total.sent += 1;
                        window.sent += 1;
                    }
                    Event::Reply(s, v, reply_ssid) => {
                        let ssid = spec.session_ssid(s as u32);
                        tallies[s].verdict(&v, ssid, reply_ssid);
                        total.verdict(&v, ssid, reply_ssid);
                        window.verdict(&v, ssid, reply_ssid);
                        if wants_packets {
                            if let Some(p) = packet_of(s, &v) {
                                observer.on_packet(&p);
                            }
                        }
                    }
                    Event::Lost(s, seq, t1) => {
                        tallies[s].lost(1);
                        total.lost(1);
                        window.lost(1);
                        if wants_packets {
                            observer.on_packet(&blank_packet(s, seq, StampPacketStatus::Lost, t1));
                        }
                    }
                    Event::NotSent(s, seq, t1, k, reason, message) => {
                        tallies[s].not_sent(k, &reason, &message);
                        total.not_sent(k, &reason, &message);
                        window.not_sent(k, &reason, &message);
                        if wants_packets {
                            // k is at most the slots of the run's schedule.
                            for _ in 0..k {
                                observer.on_packet(&blank_packet(s, seq, StampPacketStatus::NotSent, t1));
                            }
                        }
                    }
                    Event::Done(end) => {
                        let t = &mut tallies[end.index];
                        t.sent -= end.abandoned;
                        t.finish_session(end.split);
                        total.sent -= end.abandoned;
                        total.merge_split(t);
                        if outcome_of(t, &end).is_success() {
                        } else {
                            failed += 1;
                        }
                        done += 1;
                        let i = end.index;
                        ends[i] = Some(*end);
                    }
                }
            }
            _ = ticker.tick() => {
                let now = Instant::now();
                let iv = interval_of(&window, now - start, now - last_tick, (n - done) as u64, done as u64, failed, bytes);
                last_tick = now;
                window = Tally::default();
                observer.on_interval(&iv);
                if intervals.len() < spec.max_records {
                    intervals.push(iv);
                } else {
                    intervals_omitted += 1;
                }
            }
            _ = cancel.cancelled(), if !interrupted => {
                interrupted = true;
            }
        }
    }
    // The sessions may all have stopped before the select saw the cancel.
    interrupted |= cancel.is_cancelled();
    let now = Instant::now();
    let elapsed = now - start;
    let last = interval_of(&window, elapsed, now - last_tick, 0, done as u64, failed, bytes);
    observer.on_interval(&last);
    intervals.push(last);

    let parts = tallies
        .into_iter()
        .zip(ends)
        .enumerate()
        .map(|(i, (t, end))| (t, end, spec.session_ssid(i as u32)))
        .collect();
    let run = RunEnd {
        started_unix_ms,
        elapsed,
        interrupted,
        intervals,
        intervals_omitted,
    };
    Ok(stamp_result(&spec, observer, parts, total, run))
}

/// How a sender's run went as a whole, for [`stamp_result`].
pub(super) struct RunEnd {
    pub(super) started_unix_ms: u64,
    pub(super) elapsed: Duration,
    pub(super) interrupted: bool,
    pub(super) intervals: Vec<Interval>,
    pub(super) intervals_omitted: u64,
}

/// The result document of a sender's run from its sessions' tallies,
/// ends and SSIDs (a session with no end never started) and the run's
/// total; each session's connection record goes to the observer too.
pub(super) fn stamp_result(
    spec: &StampSenderSpec,
    observer: &mut dyn Observer,
    parts: Vec<(Tally, Option<SessionEnd>, u16)>,
    total: Tally,
    run: RunEnd,
) -> TestResult {
    let bytes = spec.packet_bytes as u64;
    let mut connections = Vec::new();
    let mut per_session = Vec::new();
    let mut connections_omitted = 0;
    let mut summary = goodput_core::result::SummaryBuilder::default();
    for (i, (t, end, ssid)) in parts.into_iter().enumerate() {
        let Some(end) = end else { continue };
        let record = ConnectionRecord {
            index: i as u64,
            connection_id: String::new(),
            local_address: end.local.clone(),
            remote_address: spec.target.to_string(),
            start_s: end.started_ns as f64 / 1e9,
            time_slice_s: end.ended_ns as f64 / 1e9,
            elapsed_ns: end.ended_ns.saturating_sub(end.started_ns),
            pattern: None,
            transfer_bytes: t.sent * bytes,
            buffer_bytes: bytes,
            rate_limit_bytes_per_second: (bytes as f64 / spec.interval.as_secs_f64()) as u64,
            sent_bytes: t.sent * bytes,
            received_bytes: t.received * bytes,
            outcome: outcome_of(&t, &end),
            peer: None,
            shutdown: None,
            quic: None,
            tcp_info: None,
            media: None,
            timed: None,
        };
        observer.on_connection(&record);
        summary.add(&record);
        if connections.len() < spec.max_records {
            connections.push(record);
            per_session.push(StampSessionRecord {
                index: i as u64,
                local_address: end.local,
                remote_address: spec.target.to_string(),
                ssid,
                stats: t.stats(),
            });
        } else {
            connections_omitted += 1;
        }
    }
    let summary: Summary = summary.finish(run.elapsed.as_nanos() as u64);
    let end = if run.interrupted {
        EndReason::Interrupted
    } else if spec.duration.is_some() && spec.count.is_none() {
        EndReason::TimeLimit
    } else {
        EndReason::Completed
    };
    TestResult {
        assertions: Vec::new(),
        spec: None,
        error: None,
        schema_version: SCHEMA_VERSION,
        tool: crate::tool_info(),
        kind: TestKind::StampSender,
        started_unix_ms: run.started_unix_ms,
        settings: TcpSettings {
            connections: Some(u64::from(spec.sessions)),
            time_limit_ms: spec.duration.map(|d| d.as_millis() as u64),
            ..TcpSettings::bare(
                WireProtocol::Stamp,
                vec![spec.target.to_string()],
                spec.status_interval.as_millis() as u64,
            )
        },
        intervals: run.intervals,
        intervals_omitted: run.intervals_omitted,
        connections,
        summary,
        connections_omitted,
        end,
        detail: Detail::Stamp(Box::new(StampDetail {
            packet_bytes: spec.packet_bytes as u32,
            interval_ns: spec.interval.as_nanos() as u64,
            sessions: spec.sessions,
            ssid: spec.ssid,
            dscp: spec.dscp,
            timeout_ms: spec.timeout.as_millis() as u64,
            total: total.stats(),
            per_session,
        })),
    }
}

pub(super) fn outcome_of(t: &Tally, end: &SessionEnd) -> Outcome {
    if let Some(e) = &end.first_error {
        if t.received == 0 {
            return crate::socket::network_outcome(if end.send_errors > 0 { "send" } else { "recv" }, e);
        }
    }
    if t.sent > 0 && t.received == 0 && t.late == 0 {
        return Outcome::NetworkError {
            during: "reply".into(),
            errno: None,
            name: "NoReply".into(),
            message: format!("none of {} packets was answered", t.sent),
        };
    }
    if end.abandoned > 0 && t.sent == 0 {
        return Outcome::Aborted {
            reason: "stopped before any packet was resolved".into(),
        };
    }
    Outcome::Succeeded
}

#[allow(clippy::too_many_arguments)]
pub(super) fn interval_of(
    w: &Tally,
    since_start: Duration,
    dt: Duration,
    running: u64,
    done: u64,
    failed: u64,
    bytes: u64,
) -> Interval {
    let rate = |n: u64| {
        let s = dt.as_secs_f64();
        if s > 0.0 {
            (n as f64 * bytes as f64 / s) as u64
        } else {
            0
        }
    };
    let (fwd, bwd) = w.one_way_medians();
    Interval {
        time_slice_s: since_start.as_secs_f64(),
        send_bytes_per_second: rate(w.sent),
        recv_bytes_per_second: rate(w.received + w.duplicates),
        in_flight: running,
        completed: done - failed,
        network_errors: failed,
        data_errors: 0,
        stamp: Some(StampInterval {
            time_slice_s: since_start.as_secs_f64(),
            sent: w.sent,
            received: w.received,
            lost: w.lost,
            not_sent: w.not_sent,
            duplicates: w.duplicates,
            reordered: w.reordered,
            rtt: w.rtt_stats(),
            forward_median_us: fwd,
            backward_median_us: bwd,
        }),
        echo: None,
        media: None,
    }
}

/// A packet record with no reply fields.
pub(super) fn blank_packet(session: usize, seq: u32, status: StampPacketStatus, t1_ns: i64) -> StampPacket {
    StampPacket {
        session: session as u64,
        seq,
        status,
        t1_ns,
        t2_ns: None,
        t3_ns: None,
        t4_ns: None,
        rtt_us: None,
        forward_us: None,
        backward_us: None,
        reflector_seq: None,
        forward_ttl: None,
        reply_ttl: None,
    }
}

pub(super) fn packet_of(session: usize, v: &Verdict) -> Option<StampPacket> {
    match *v {
        Verdict::First(Sample {
            seq,
            reflector_seq,
            t,
            rtt_ns,
            forward_ns,
            backward_ns,
            forward_ttl,
            backward_ttl,
            reordered,
            ..
        }) => Some(StampPacket {
            t2_ns: Some(t[1]),
            t3_ns: Some(t[2]),
            t4_ns: Some(t[3]),
            rtt_us: Some(rtt_ns as f64 / 1e3),
            forward_us: Some(forward_ns as f64 / 1e3),
            backward_us: Some(backward_ns as f64 / 1e3),
            reflector_seq: Some(reflector_seq),
            forward_ttl: Some(forward_ttl),
            reply_ttl: backward_ttl,
            ..blank_packet(
                session,
                seq,
                if reordered {
                    StampPacketStatus::Reordered
                } else {
                    StampPacketStatus::Received
                },
                t[0],
            )
        }),
        Verdict::Duplicate { seq, t1, .. } => {
            Some(blank_packet(session, seq, StampPacketStatus::Duplicate, t1))
        }
        Verdict::Late { seq, t1 } => Some(blank_packet(session, seq, StampPacketStatus::Late, t1)),
        Verdict::Unmatched | Verdict::SsidMismatch => None,
    }
}

fn open_socket(spec: &StampSenderSpec) -> std::io::Result<UdpSocket> {
    let v6 = spec.target.is_ipv6();
    let s = Socket::new(Domain::for_address(spec.target), Type::DGRAM, Some(Protocol::UDP))?;
    let local: SocketAddr = match spec.bind {
        Some(ip) => SocketAddr::new(ip, 0),
        None if v6 => SocketAddr::from(([0u16; 8], 0)),
        None => SocketAddr::from(([0u8; 4], 0)),
    };
    s.bind(&local.into())?;
    msg::set_ttl(s.as_raw_fd(), v6, SEND_TTL)?;
    msg::enable_ancillary(s.as_raw_fd(), v6, false)?;
    if spec.dscp > 0 {
        let tos = u32::from(spec.dscp) << 2;
        if v6 {
            s.set_tclass_v6(tos)?;
        } else {
            s.set_tos(tos)?;
        }
    }
    s.connect(&spec.target.into())?;
    s.set_nonblocking(true)?;
    UdpSocket::from_std(s.into())
}

async fn session(
    index: usize,
    spec: Arc<StampSenderSpec>,
    stateful: bool,
    tx: mpsc::Sender<Event>,
    stop: CancellationToken,
    start: Instant,
) {
    let since = |t: Instant| t.duration_since(start).as_nanos() as u64;
    let sock = match open_socket(&spec) {
        Ok(s) => s,
        Err(e) => {
            let end = SessionEnd {
                index,
                local: String::new(),
                split: SplitFacts {
                    stateful_known: stateful,
                    ..SplitFacts::default()
                },
                abandoned: 0,
                send_errors: 0,
                first_error: Some(e),
                started_ns: since(Instant::now()),
                ended_ns: since(Instant::now()),
            };
            let _ = tx.send(Event::Done(Box::new(end))).await;
            return;
        }
    };
    let local = sock.local_addr().map(|a| a.to_string()).unwrap_or_default();
    let ssid = spec.session_ssid(index as u32);
    let timeout_ns = spec.timeout.as_nanos() as i64;
    let mut tracker = Tracker::new(timeout_ns, ssid);
    if stateful {
        tracker = tracker.with_stateful_reflector();
    }
    // Spread the sessions' first packets over one interval.
    let offset = spec.interval.mul_f64(index as f64 / f64::from(spec.sessions));
    let mut next = start + offset;
    let end_at = spec.duration.map(|d| start + d);
    let mut out = vec![0u8; spec.packet_bytes];
    // Replies are as long as requests; room beyond that only for a peer
    // that answers longer (its extra bytes are not read).
    let mut inb = vec![0u8; (spec.packet_bytes + 1024).min(MAX_PACKET_LEN)];
    let mut sent = 0u64;
    let mut sending = true;
    let mut drain_until = None;
    let mut send_errors = 0u64;
    let mut first_error = None;
    let mut abandoned = 0u64;
    let mut error = msg::clock_error();
    let mut error_at = Instant::now();
    // Losses are found within a quarter of the timeout, and every 50 ms
    // at most so that the status lines place them closely.
    let every = (spec.timeout / 4).min(Duration::from_millis(50));
    let mut expiry = tokio::time::interval(every.max(Duration::from_millis(1)));
    expiry.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let started = Instant::now();
    loop {
        let now = Instant::now();
        if sending && (spec.count.is_some_and(|c| sent >= c) || end_at.is_some_and(|e| now >= e)) {
            sending = false;
            drain_until = Some(now + spec.timeout);
        }
        if !sending && (tracker.pending() == 0 || drain_until.is_some_and(|d| now >= d)) {
            break;
        }
        tokio::select! {
            _ = stop.cancelled(), if sending || drain_until.is_some() => {
                abandoned = tracker.abandon() as u64;
                break;
            }
            _ = tokio::time::sleep_until(next), if sending => {
                if now.duration_since(error_at) > Duration::from_secs(1) {
                    error = msg::clock_error();
                    error_at = now;
                }
                let t1 = msg::now_unix_ns();
                SenderPacket {
                    seq: tracker.next_seq(),
                    timestamp: ntp_from_unix_ns(t1),
                    error,
                    ssid,
                }
                .write(&mut out);
                match sock.send(&out).await {
                    Ok(_) => {
                        tracker.sent(t1);
                        sent += 1;
                        if tx.send(Event::Sent(index)).await.is_err() {
                            return;
                        }
                    }
                    Err(e) => {
                        // Refused by the kernel (a firewall's drop on the
                        // way out, a full queue, an ICMP error from an
                        // earlier packet): the packet never left. It keeps
                        // its place in the count and is a measurement lost.
                        send_errors += 1;
                        sent += 1;
                        let (reason, message) = msg::send_failure_reason(&e);
                        first_error.get_or_insert(e);
                        let ev = Event::NotSent(index, tracker.next_seq(), t1, 1, reason, message);
                        if tx.send(ev).await.is_err() {
                            return;
                        }
                    }
                }
                next += spec.interval;
                // Fell behind by more than an interval: skip, never burst.
                let late = Instant::now();
                if next + spec.interval < late {
                    let behind = ((late - next).as_nanos() / spec.interval.as_nanos().max(1))
                        .min(u128::from(u32::MAX)) as u32;
                    let skipped_from = next;
                    next += spec.interval * behind;
                    // A counted run sends its count later instead; a timed
                    // one loses the slots it skipped before its end.
                    if spec.count.is_none() {
                        let before_end = end_at.map_or(u64::from(behind), |e| {
                            let left = e.saturating_duration_since(skipped_from);
                            left.as_nanos().div_ceil(spec.interval.as_nanos().max(1)) as u64
                        });
                        let k = u64::from(behind).min(before_end);
                        if k > 0 {
                            let (reason, message) = msg::LATE_REASON;
                            let at = msg::now_unix_ns();
                            let ev = Event::NotSent(index, tracker.next_seq(), at, k, reason.into(), message.into());
                            if tx.send(ev).await.is_err() {
                                return;
                            }
                        }
                    }
                }
            }
            r = sock.readable() => {
                if r.is_err() {
                    continue;
                }
                loop {
                    let got = sock.try_io(Interest::READABLE, || {
                        msg::recv_one(sock.as_raw_fd(), &mut inb)
                            .and_then(|m| m.ok_or_else(|| std::io::ErrorKind::WouldBlock.into()))
                    });
                    let meta = match got {
                        Ok(m) => m,
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                        Err(e) => {
                            // ECONNREFUSED from an ICMP error: the reflector is not there.
                            first_error.get_or_insert(e);
                            break;
                        }
                    };
                    let Some(r) = ReflectorPacket::read(&inb[..meta.len.min(inb.len())]) else {
                        continue;
                    };
                    let t4 = meta.t_ns.unwrap_or_else(msg::now_unix_ns);
                    let v = tracker.reply(&r, t4, meta.ttl, error);
                    if tx.send(Event::Reply(index, v, r.ssid)).await.is_err() {
                        return;
                    }
                }
            }
            _ = expiry.tick() => {
                for (seq, t1) in tracker.expire(msg::now_unix_ns()) {
                    if tx.send(Event::Lost(index, seq, t1)).await.is_err() {
                        return;
                    }
                }
            }
        }
    }
    if abandoned == 0 {
        for (seq, t1) in tracker.expire_all() {
            let _ = tx.send(Event::Lost(index, seq, t1)).await;
        }
    }
    let end = SessionEnd {
        index,
        local,
        split: tracker.split(),
        abandoned,
        send_errors,
        first_error,
        started_ns: since(started),
        ended_ns: since(Instant::now()),
    };
    let _ = tx.send(Event::Done(Box::new(end))).await;
}
