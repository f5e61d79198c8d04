//! The STAMP session hub: an agent's background streams, every one of
//! them, on a few shared sockets. One unconnected UDP socket per address
//! family, local address and DSCP, and one task per socket that
//!
//! - sends every session's due packets from one timer (a heap of next
//!   send times; the packets due within the same millisecond leave in one
//!   `sendmmsg`, each stamped with its T1 just before the call),
//! - reads the replies with `recvmmsg` when it wakes to send and on each
//!   loss tick, never on their arrival: a reply's T4 is the kernel's
//!   receive timestamp, so reading it later changes no figure, and the
//!   task wakes once per send batch instead of once per reply (the
//!   socket is not in the runtime's reactor at all). Each reply goes to
//!   its session by (reflector address, SSID): sessions to one reflector
//!   from the one socket get distinct SSIDs,
//! - counts the packets lost once their timeout has passed, and
//! - hands each run its packets' fates about once a second and, at its
//!   end, its sessions' tallies.
//!
//! A session is its summary tally and the [`Tracker`]'s window of
//! packets within two timeouts, never its packet history. The tally has
//! 2-digit delay histograms, or none when the run's observer keeps the
//! delays itself ([`Observer::keeps_delays`]: the agent's per-minute
//! summaries), so a stream's whole-run delays are not kept twice. The socket's task runs only this module's and the core's
//! code: a run's observer runs in the run's own task, so a panic there
//! ends that run alone (its updates' receiver goes, and the hub drops its
//! sessions). The one-shot sender ([`super::run_sender`]) keeps its own
//! socket per session.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use goodput_core::result::{FailureStage, StampPacket, StampPacketStatus, TestResult};
use goodput_core::spec::{Family, StampSpec, TestSpec};
use goodput_core::stamp::stats::{Tally, Tracker};
use goodput_core::stamp::{ntp_from_unix_ns, ErrorEstimate, ReflectorPacket, SenderPacket, SEND_TTL};
use socket2::{Domain, Protocol, Socket, Type};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::sender::{
    blank_packet, interval_of, outcome_of, packet_of, stamp_result, RunEnd, SessionEnd, StampSenderSpec,
};
use crate::datagram::{self as msg, RecvBatch, SendBatch};
use crate::{EngineError, Observer};

/// Datagrams per `sendmmsg` / `recvmmsg`.
const BATCH: usize = 64;
/// Bytes read of each reply: a reply's fields are in its first 44; a
/// longer one (padding) is truncated, not lost.
const RECV_LEN: usize = 512;
/// Packets due within this of the first one leave with it.
const SLACK: Duration = Duration::from_millis(1);
/// How often losses are looked for.
const TICK: Duration = Duration::from_millis(250);
/// A run gets its packets' fates every this many ticks (a second).
const HAND_OVER_TICKS: u32 = 4;

/// What the hub has seen, for the agent's status and the tests.
#[derive(Debug, Default)]
pub struct HubCounters {
    /// Sessions registered now.
    pub sessions: AtomicU64,
    /// Sockets open.
    pub sockets: AtomicU64,
    /// Replies from an address, or with an SSID, that no session has:
    /// dropped.
    pub unknown: AtomicU64,
    /// Datagrams too short to be a reply: dropped.
    pub malformed: AtomicU64,
}

/// The socket a session's packets leave from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct SocketKey {
    v6: bool,
    bind: Option<IpAddr>,
    dscp: u8,
}

struct Worker {
    commands: mpsc::UnboundedSender<Command>,
    local: SocketAddr,
}

/// The agent's one hub: create it once and share it; it opens its
/// sockets when the first stream needs them.
#[derive(Default)]
pub struct StampHub {
    workers: Mutex<HashMap<SocketKey, Worker>>,
    next_id: AtomicU64,
    counters: Arc<HubCounters>,
}

enum Command {
    Add(Box<Registration>),
    /// Stop the session now (its run was cancelled): what is still in
    /// flight is abandoned.
    Stop(u64),
}

/// A session as its run asks for it.
struct Registration {
    id: u64,
    index: usize,
    target: SocketAddr,
    /// The SSID asked for; none: the hub picks a free one.
    ssid: Option<u16>,
    interval: Duration,
    first: Instant,
    end_at: Option<Instant>,
    count: Option<u64>,
    packet_bytes: usize,
    timeout: Duration,
    stateful: bool,
    wants_packets: bool,
    /// The run's observer keeps the delays (per minute): the session's
    /// tally counts, with no delay histograms.
    counts_only: bool,
    run_start: Instant,
    out: mpsc::UnboundedSender<Update>,
    registered: oneshot::Sender<Result<u16, String>>,
}

/// What a run hears from the hub.
enum Update {
    /// Its packets' fates, in the order they were known.
    Packets(Vec<StampPacket>),
    /// One of its sessions ended: its tally (closed) and how it ended.
    Done(Box<(Tally, SessionEnd)>),
}

struct Session {
    key: (SocketAddr, u16),
    index: usize,
    tracker: Tracker,
    tally: Tally,
    fates: Vec<StampPacket>,
    wants_packets: bool,
    out: mpsc::UnboundedSender<Update>,
    interval: Duration,
    timeout: Duration,
    next: Instant,
    end_at: Option<Instant>,
    count: Option<u64>,
    /// Send slots used (sent or refused).
    planned: u64,
    packet_bytes: usize,
    sending: bool,
    drain_until: Option<Instant>,
    in_batch: bool,
    send_errors: u64,
    first_error: Option<io::Error>,
    run_start: Instant,
    started: Instant,
}

impl Session {
    fn stop_sending(&mut self, now: Instant) {
        if self.sending {
            self.sending = false;
            self.drain_until = Some(now + self.timeout);
        }
    }

    fn fate(&mut self, p: StampPacket) {
        if self.wants_packets {
            self.fates.push(p);
        }
    }
}

/// The sessions of one socket and the demultiplexing of their replies;
/// no I/O (the socket's task does that), so it is tested on its own.
struct Table {
    sessions: HashMap<u64, Session>,
    by_key: BTreeMap<(SocketAddr, u16), u64>,
    next_ssid: u16,
    local: String,
    counters: Arc<HubCounters>,
}

impl Table {
    fn new(local: SocketAddr, counters: Arc<HubCounters>) -> Self {
        Self {
            sessions: HashMap::new(),
            by_key: BTreeMap::new(),
            next_ssid: 1,
            local: local.to_string(),
            counters,
        }
    }

    /// Takes a session in, with its SSID: the one asked for, or the next
    /// free one to its reflector (a new run's sessions get new SSIDs, so
    /// a stateful reflector counts them afresh).
    fn add(&mut self, r: &Registration, now: Instant) -> Result<u16, String> {
        let ssid = match r.ssid {
            Some(s) if self.by_key.contains_key(&(r.target, s)) => {
                return Err(format!(
                    "SSID {s} to {} is taken by another stream of this host",
                    r.target
                ))
            }
            Some(s) => s,
            None => {
                let mut s = self.next_ssid.max(1);
                let mut tries = 0u32;
                while self.by_key.contains_key(&(r.target, s)) {
                    tries += 1;
                    if tries >= 65_535 {
                        return Err(format!("every SSID to {} is taken", r.target));
                    }
                    s = s.checked_add(1).unwrap_or(1);
                }
                self.next_ssid = s.checked_add(1).unwrap_or(1);
                s
            }
        };
        let mut tracker = Tracker::new(r.timeout.as_nanos().min(i64::MAX as u128 / 4) as i64, ssid);
        if r.stateful {
            tracker = tracker.with_stateful_reflector();
        }
        self.by_key.insert((r.target, ssid), r.id);
        self.sessions.insert(
            r.id,
            Session {
                key: (r.target, ssid),
                index: r.index,
                tracker,
                tally: if r.counts_only {
                    Tally::counts_only()
                } else {
                    Tally::per_session()
                },
                fates: Vec::new(),
                wants_packets: r.wants_packets,
                out: r.out.clone(),
                interval: r.interval,
                timeout: r.timeout,
                next: r.first,
                end_at: r.end_at,
                count: r.count,
                planned: 0,
                packet_bytes: r.packet_bytes,
                sending: true,
                drain_until: None,
                in_batch: false,
                send_errors: 0,
                first_error: None,
                run_start: r.run_start,
                started: now,
            },
        );
        self.counters.sessions.fetch_add(1, Ordering::Relaxed);
        Ok(ssid)
    }

    /// Hands a reply from `src` to its session; `None` when it has none
    /// (counted and dropped).
    fn reply(
        &mut self,
        src: SocketAddr,
        data: &[u8],
        t4: i64,
        ttl: Option<u8>,
        our_error: ErrorEstimate,
    ) -> Option<u64> {
        let Some(r) = ReflectorPacket::read(data) else {
            self.counters.malformed.fetch_add(1, Ordering::Relaxed);
            return None;
        };
        let id = if r.ssid != 0 {
            self.by_key.get(&(src, r.ssid)).copied()
        } else {
            // A reflector that does not return SSIDs: the session to that
            // address whose packet (sequence and T1) this answers.
            self.by_key
                .range((src, 1)..=(src, u16::MAX))
                .map(|(_, &id)| id)
                .find(|id| self.sessions.get(id).is_some_and(|s| s.tracker.answers(&r)))
        };
        let Some(id) = id else {
            self.counters.unknown.fetch_add(1, Ordering::Relaxed);
            return None;
        };
        let s = self.sessions.get_mut(&id)?;
        let v = s.tracker.reply(&r, t4, ttl, our_error);
        s.tally.verdict(&v, s.key.1, r.ssid);
        if let Some(p) = packet_of(s.index, &v) {
            s.fate(p);
        }
        Some(id)
    }

    /// Counts the packets whose timeout has passed as lost, and ends the
    /// sessions that have stopped sending and have nothing left in flight
    /// (or waited out their timeout).
    fn expire(&mut self, now: Instant, now_ns: i64) {
        let mut ended = Vec::new();
        for (&id, s) in self.sessions.iter_mut() {
            if s.sending && s.end_at.is_some_and(|e| now >= e) {
                s.stop_sending(now);
            }
            for (seq, t1) in s.tracker.expire(now_ns) {
                s.tally.lost(1);
                s.fate(blank_packet(s.index, seq, StampPacketStatus::Lost, t1));
            }
            if !s.sending && (s.tracker.pending() == 0 || s.drain_until.is_some_and(|d| now >= d)) {
                ended.push(id);
            }
        }
        for id in ended {
            self.finish(id, false, now);
        }
    }

    /// Ends a session: what is in flight is lost (its run ended) or
    /// abandoned (its run was stopped); its fates and tally go to its run.
    fn finish(&mut self, id: u64, abandon: bool, now: Instant) {
        let Some(mut s) = self.sessions.remove(&id) else {
            return;
        };
        self.by_key.remove(&s.key);
        self.counters.sessions.fetch_sub(1, Ordering::Relaxed);
        let abandoned = if abandon {
            s.tracker.abandon() as u64
        } else {
            for (seq, t1) in s.tracker.expire_all() {
                s.tally.lost(1);
                s.fate(blank_packet(s.index, seq, StampPacketStatus::Lost, t1));
            }
            0
        };
        s.tally.sent -= abandoned.min(s.tally.sent);
        s.tally.finish_session(s.tracker.split());
        if !s.fates.is_empty() {
            let _ = s.out.send(Update::Packets(std::mem::take(&mut s.fates)));
        }
        let since = |t: Instant| t.saturating_duration_since(s.run_start).as_nanos() as u64;
        let end = SessionEnd {
            index: s.index,
            local: self.local.clone(),
            split: s.tracker.split(),
            abandoned,
            send_errors: s.send_errors,
            first_error: s.first_error.take(),
            started_ns: since(s.started),
            ended_ns: since(now),
        };
        let _ = s.out.send(Update::Done(Box::new((s.tally, end))));
    }

    /// Hands every run its sessions' fates so far; forgets the sessions
    /// whose run is gone (it stopped abnormally).
    fn hand_over(&mut self) {
        let mut gone = Vec::new();
        for (&id, s) in self.sessions.iter_mut() {
            if s.out.is_closed() {
                gone.push(id);
            } else if !s.fates.is_empty() {
                let _ = s.out.send(Update::Packets(std::mem::take(&mut s.fates)));
            }
        }
        for id in gone {
            if let Some(s) = self.sessions.remove(&id) {
                self.by_key.remove(&s.key);
                self.counters.sessions.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }

    /// After a send: the packet left at `t1` (`Ok`) or was refused; the
    /// session's next send time. Returns it, unless the session stopped.
    fn sent(&mut self, id: u64, t1: i64, outcome: Result<(), io::Error>, now: Instant) -> Option<Instant> {
        let s = self.sessions.get_mut(&id)?;
        s.in_batch = false;
        s.planned += 1;
        match outcome {
            Ok(()) => {
                s.tracker.sent(t1);
                s.tally.sent += 1;
            }
            Err(e) => {
                // Refused by the kernel: the packet never left. It keeps
                // its place in the count and is a measurement lost.
                s.send_errors += 1;
                let (reason, message) = msg::send_failure_reason(&e);
                s.tally.not_sent(1, &reason, &message);
                let seq = s.tracker.next_seq();
                s.fate(blank_packet(s.index, seq, StampPacketStatus::NotSent, t1));
                s.first_error.get_or_insert(e);
            }
        }
        s.next += s.interval;
        // Fell behind by more than an interval: skip, never burst. A
        // counted run sends its count later instead (as the one-shot
        // sender); a timed one loses the slots it skipped before its end.
        if s.next + s.interval < now {
            let behind =
                ((now - s.next).as_nanos() / s.interval.as_nanos().max(1)).min(u128::from(u32::MAX)) as u64;
            let from = s.next;
            s.next += s.interval * behind as u32;
            let before_end = s.end_at.map_or(behind, |e| {
                let left = e.saturating_duration_since(from);
                left.as_nanos().div_ceil(s.interval.as_nanos().max(1)) as u64
            });
            let k = if s.count.is_some() {
                0
            } else {
                behind.min(before_end)
            };
            if k > 0 {
                s.planned += k;
                let (reason, message) = msg::LATE_REASON;
                s.tally.not_sent(k, reason, message);
                let seq = s.tracker.next_seq();
                let at = msg::now_unix_ns();
                for _ in 0..k.min(1_000_000) {
                    s.fate(blank_packet(s.index, seq, StampPacketStatus::NotSent, at));
                }
            }
        }
        if s.end_at.is_some_and(|e| s.next >= e) || s.count.is_some_and(|c| s.planned >= c) {
            s.stop_sending(now);
            return None;
        }
        Some(s.next)
    }
}

impl StampHub {
    /// A hub with no socket yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// What the hub has seen so far.
    pub fn counters(&self) -> &HubCounters {
        &self.counters
    }

    /// The socket task for `key`, started (with its socket) when there is
    /// none or the last one stopped.
    fn worker(&self, key: SocketKey) -> Result<(mpsc::UnboundedSender<Command>, SocketAddr), EngineError> {
        let mut workers = self.workers.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(w) = workers.get(&key) {
            if !w.commands.is_closed() {
                return Ok((w.commands.clone(), w.local));
            }
            workers.remove(&key);
            self.counters.sockets.fetch_sub(1, Ordering::Relaxed);
        }
        let sock = open_socket(key).map_err(|e| {
            EngineError::Config(format!(
                "cannot open the STAMP streams' {} socket{}: {e}",
                if key.v6 { "IPv6" } else { "IPv4" },
                key.bind.map_or(String::new(), |b| format!(" on {b}"))
            ))
        })?;
        let local = sock
            .local_addr()
            .ok()
            .and_then(|a| a.as_socket())
            .ok_or_else(|| EngineError::Config("STAMP streams' socket has no address".into()))?;
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(serve(sock, local, rx, self.counters.clone()));
        self.counters.sockets.fetch_add(1, Ordering::Relaxed);
        workers.insert(
            key,
            Worker {
                commands: tx.clone(),
                local,
            },
        );
        Ok((tx, local))
    }

    /// Runs a STAMP spec's sessions on the hub (the spec names its
    /// reflector); the result is the sender's, with the spec and its
    /// assertions, or a failed one.
    pub async fn run_spec(
        &self,
        spec: &StampSpec,
        reflector_stateful: bool,
        observer: &mut dyn Observer,
        cancel: CancellationToken,
        max_records: usize,
    ) -> TestResult {
        let whole = TestSpec::Stamp(spec.clone());
        let target = match &spec.host {
            None => Err("a stream on the hub needs a reflector (host)".to_owned()),
            Some(h) => crate::run::resolve(
                h,
                spec.port,
                spec.family == Family::Ipv4,
                spec.family == Family::Ipv6,
            )
            .await
            .map(|a| a[0]),
        };
        let target = match target {
            Ok(t) => t,
            Err(e) => return crate::run::failed(&whole, FailureStage::Setup, e),
        };
        let sender = StampSenderSpec::for_spec(spec, target, max_records, reflector_stateful);
        let mut result = match self.run_sender(sender, observer, cancel).await {
            Ok(r) => r,
            Err(e) => return crate::run::failed(&whole, FailureStage::Setup, crate::run::error_chain(&e)),
        };
        result.assertions = goodput_core::assertion::evaluate(whole.kind(), whole.assertions(), &result);
        result.spec = Some(whole);
        result
    }

    /// Runs a sender's sessions on the hub until their end (count,
    /// duration or `cancel`) and returns the result document: its
    /// sessions' records and one status interval over the whole run (a
    /// stream's figures over time are its observer's).
    pub async fn run_sender(
        &self,
        spec: StampSenderSpec,
        observer: &mut dyn Observer,
        cancel: CancellationToken,
    ) -> Result<TestResult, EngineError> {
        if !(goodput_core::stamp::BASE_LEN..=goodput_core::stamp::MAX_PACKET_LEN).contains(&spec.packet_bytes)
        {
            return Err(EngineError::Config(format!(
                "the packet size must be {}..={} bytes",
                goodput_core::stamp::BASE_LEN,
                goodput_core::stamp::MAX_PACKET_LEN
            )));
        }
        if spec.sessions == 0 || spec.interval.is_zero() || spec.timeout.is_zero() {
            return Err(EngineError::Config(
                "sessions, interval and timeout must be above zero".into(),
            ));
        }
        let started_unix_ms = (msg::now_unix_ns() / 1_000_000) as u64;
        let start = Instant::now();
        let key = SocketKey {
            v6: spec.target.is_ipv6(),
            bind: spec.bind,
            dscp: spec.dscp.min(63),
        };
        let n = spec.sessions as usize;
        let (tx, mut rx) = mpsc::unbounded_channel();
        let mut registered = Deregister {
            commands: None,
            ids: Vec::with_capacity(n),
        };
        let mut ssids = vec![0u16; n];
        for (i, ssid) in ssids.iter_mut().enumerate() {
            let id = self.next_id.fetch_add(1, Ordering::Relaxed);
            let mut answer = None;
            // A socket task that stopped (it should not) is replaced once.
            for _ in 0..2 {
                let (commands, _) = self.worker(key)?;
                let (done_tx, done_rx) = oneshot::channel();
                let reg = Registration {
                    id,
                    index: i,
                    target: spec.target,
                    ssid: spec.ssid.map(|_| spec.session_ssid(i as u32)),
                    interval: spec.interval,
                    // Spread the sessions' first packets over one interval.
                    first: start + spec.interval.mul_f64(i as f64 / n as f64),
                    end_at: spec.duration.map(|d| start + d),
                    count: spec.count,
                    packet_bytes: spec.packet_bytes,
                    timeout: spec.timeout,
                    stateful: spec.reflector_stateful,
                    wants_packets: observer.wants_packets(),
                    counts_only: observer.wants_packets() && observer.keeps_delays(),
                    run_start: start,
                    out: tx.clone(),
                    registered: done_tx,
                };
                if commands.send(Command::Add(Box::new(reg))).is_err() {
                    continue;
                }
                registered.commands = Some(commands);
                answer = done_rx.await.ok();
                if answer.is_some() {
                    break;
                }
            }
            match answer {
                Some(Ok(s)) => {
                    *ssid = s;
                    registered.ids.push(id);
                }
                Some(Err(why)) => return Err(EngineError::Config(why)),
                None => return Err(EngineError::Config("the STAMP hub's socket task stopped".into())),
            }
        }
        drop(tx);
        let mut parts: Vec<(Tally, Option<SessionEnd>, u16)> =
            ssids.iter().map(|&s| (Tally::per_session(), None, s)).collect();
        let mut interrupted = false;
        let mut done = 0;
        let mut failed = 0u64;
        while done < n {
            tokio::select! {
                u = rx.recv() => match u {
                    Some(Update::Packets(ps)) => {
                        for p in &ps {
                            observer.on_packet(p);
                        }
                    }
                    Some(Update::Done(d)) => {
                        let (tally, end) = *d;
                        if !outcome_of(&tally, &end).is_success() {
                            failed += 1;
                        }
                        if let Some(part) = parts.get_mut(end.index) {
                            part.0 = tally;
                            part.1 = Some(end);
                        }
                        done += 1;
                    }
                    None => break,
                },
                _ = cancel.cancelled(), if !interrupted => {
                    interrupted = true;
                    registered.stop();
                }
            }
        }
        registered.ids.clear();
        if done < n {
            return Err(EngineError::Config(format!(
                "the STAMP hub's socket task stopped with {} of {n} sessions under way",
                n - done
            )));
        }
        interrupted |= cancel.is_cancelled();
        let elapsed = start.elapsed();
        let mut total = Tally::per_session();
        for (t, _, _) in &parts {
            total.merge(t);
        }
        let bytes = spec.packet_bytes as u64;
        let only = interval_of(&total, elapsed, elapsed, 0, done as u64, failed, bytes);
        observer.on_interval(&only);
        let run = RunEnd {
            started_unix_ms,
            elapsed,
            interrupted,
            intervals: vec![only],
            intervals_omitted: 0,
        };
        Ok(stamp_result(&spec, observer, parts, total, run))
    }
}

/// Stops a run's sessions that are still registered when it ends early
/// (cancelled, or its future dropped).
struct Deregister {
    commands: Option<mpsc::UnboundedSender<Command>>,
    ids: Vec<u64>,
}

impl Deregister {
    fn stop(&self) {
        if let Some(c) = &self.commands {
            for &id in &self.ids {
                let _ = c.send(Command::Stop(id));
            }
        }
    }
}

impl Drop for Deregister {
    fn drop(&mut self) {
        self.stop();
    }
}

fn open_socket(key: SocketKey) -> io::Result<Socket> {
    let local: SocketAddr = match (key.bind, key.v6) {
        (Some(ip), _) => SocketAddr::new(ip, 0),
        (None, true) => SocketAddr::from(([0u16; 8], 0)),
        (None, false) => SocketAddr::from(([0u8; 4], 0)),
    };
    let s = Socket::new(Domain::for_address(local), Type::DGRAM, Some(Protocol::UDP))?;
    if key.v6 {
        s.set_only_v6(true)?;
    }
    s.bind(&local.into())?;
    let fd = s.as_raw_fd();
    msg::set_ttl(fd, key.v6, SEND_TTL)?;
    msg::enable_ancillary(fd, key.v6, false)?;
    // Hundreds of sessions' replies may arrive between two reads.
    msg::set_buffer(fd, true, 4 << 20);
    if key.dscp > 0 {
        let tos = u32::from(key.dscp) << 2;
        if key.v6 {
            s.set_tclass_v6(tos)?;
        } else {
            s.set_tos(tos)?;
        }
    }
    s.set_nonblocking(true)?;
    Ok(s)
}

/// One socket's task: its sessions' sends, replies and losses, until the
/// hub is dropped.
async fn serve(
    sock: Socket,
    local: SocketAddr,
    mut commands: mpsc::UnboundedReceiver<Command>,
    counters: Arc<HubCounters>,
) {
    let fd = sock.as_raw_fd();
    let mut table = Table::new(local, counters.clone());
    let mut due: BinaryHeap<Reverse<(Instant, u64)>> = BinaryHeap::new();
    let mut rx = RecvBatch::new(BATCH, RECV_LEN);
    let mut stride = goodput_core::stamp::BASE_LEN;
    let mut tx = SendBatch::with_packet_len(BATCH, stride);
    let mut picked: Vec<(u64, u32, u16)> = Vec::with_capacity(BATCH);
    let mut error = msg::clock_error();
    let mut ticks = 0u32;
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let far = || Instant::now() + Duration::from_secs(3600);
    let sleep = tokio::time::sleep_until(far());
    tokio::pin!(sleep);
    let mut armed: Option<Instant> = None;
    loop {
        let next = due.peek().map(|Reverse((at, _))| *at);
        if next != armed {
            sleep.as_mut().reset(next.unwrap_or_else(far));
            armed = next;
        }
        tokio::select! {
            cmd = commands.recv() => match cmd {
                None => break,
                Some(Command::Add(r)) => {
                    let answer = table.add(&r, Instant::now());
                    if answer.is_ok() {
                        due.push(Reverse((r.first, r.id)));
                        if r.packet_bytes > stride {
                            stride = r.packet_bytes;
                            tx = SendBatch::with_packet_len(BATCH, stride);
                        }
                    }
                    if r.registered.send(answer).is_err() {
                        // Its run is gone already.
                        table.finish(r.id, true, Instant::now());
                    }
                }
                Some(Command::Stop(id)) => table.finish(id, true, Instant::now()),
            },
            _ = &mut sleep, if armed.is_some() => {
                armed = None;
                read_replies(fd, &mut table, &mut rx, error);
                send_due(fd, &mut table, &mut due, &mut tx, &mut picked, error);
            }
            _ = tick.tick() => {
                // Replies first: none that came is counted lost.
                read_replies(fd, &mut table, &mut rx, error);
                let now = Instant::now();
                table.expire(now, msg::now_unix_ns());
                ticks += 1;
                if ticks.is_multiple_of(HAND_OVER_TICKS) {
                    table.hand_over();
                    error = msg::clock_error();
                }
            }
        }
    }
    // The hub is gone: every session ends as its run's would when stopped.
    let ids: Vec<u64> = table.sessions.keys().copied().collect();
    for id in ids {
        table.finish(id, true, Instant::now());
    }
    counters.sockets.fetch_sub(1, Ordering::Relaxed);
}

/// Reads every reply waiting on the socket, a batch at a time, and hands
/// each to its session with its kernel receive time.
fn read_replies(fd: std::os::fd::RawFd, table: &mut Table, rx: &mut RecvBatch, error: ErrorEstimate) {
    loop {
        let k = match rx.recv(fd) {
            Ok(k) => k,
            // Nothing more (would block), or an error the next read sees
            // again: the loss tick comes back to it.
            Err(_) => return,
        };
        for i in 0..k {
            let (data, meta) = rx.get(i);
            let t4 = meta.t_ns.unwrap_or_else(msg::now_unix_ns);
            table.reply(meta.src, data, t4, meta.ttl, error);
        }
        if k < BATCH {
            return;
        }
    }
}

/// Sends the packets due now (and within [`SLACK`]), a batch at a time,
/// one packet per session per batch.
fn send_due(
    fd: std::os::fd::RawFd,
    table: &mut Table,
    due: &mut BinaryHeap<Reverse<(Instant, u64)>>,
    tx: &mut SendBatch,
    picked: &mut Vec<(u64, u32, u16)>,
    error: ErrorEstimate,
) {
    loop {
        let now = Instant::now();
        picked.clear();
        while let Some(&Reverse((at, id))) = due.peek() {
            if at > now + SLACK || tx.is_full() {
                break;
            }
            let Some(s) = table.sessions.get_mut(&id) else {
                due.pop();
                continue;
            };
            if s.next != at || !s.sending {
                due.pop();
                continue;
            }
            if s.in_batch {
                break;
            }
            due.pop();
            if s.end_at.is_some_and(|e| now >= e) || s.count.is_some_and(|c| s.planned >= c) {
                s.stop_sending(now);
                continue;
            }
            let len = s.packet_bytes;
            tx.next_buf()[..len].fill(0);
            tx.push(len, s.key.0, None);
            s.in_batch = true;
            picked.push((id, s.tracker.next_seq(), s.key.1));
        }
        if picked.is_empty() {
            return;
        }
        let mut t1s = [0i64; BATCH];
        let mut refused: Vec<(usize, io::Error)> = Vec::new();
        tx.flush_each(
            fd,
            |i, p| {
                let t1 = msg::now_unix_ns();
                t1s[i] = t1;
                let (_, seq, ssid) = picked[i];
                SenderPacket {
                    seq,
                    timestamp: ntp_from_unix_ns(t1),
                    error,
                    ssid,
                }
                .write(p);
            },
            |i, e| refused.push((i, e)),
        );
        let after = Instant::now();
        for (i, &(id, _, _)) in picked.iter().enumerate() {
            let outcome = match refused.iter().position(|(j, _)| *j == i) {
                Some(k) => Err(refused.swap_remove(k).1),
                None => Ok(()),
            };
            if let Some(next) = table.sent(id, t1s[i], outcome, after) {
                due.push(Reverse((next, id)));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counters() -> Arc<HubCounters> {
        Arc::new(HubCounters::default())
    }

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    /// Registers a session to `target` on `t`; returns its id, SSID and
    /// the run's end of its updates.
    fn add(
        t: &mut Table,
        id: u64,
        target: SocketAddr,
        ssid: Option<u16>,
    ) -> (u16, mpsc::UnboundedReceiver<Update>) {
        add_with(t, id, target, ssid, false)
    }

    /// As [`add`], for a run whose observer keeps the delays itself
    /// (`counts_only`) or not.
    fn add_with(
        t: &mut Table,
        id: u64,
        target: SocketAddr,
        ssid: Option<u16>,
        counts_only: bool,
    ) -> (u16, mpsc::UnboundedReceiver<Update>) {
        let (out, rx) = mpsc::unbounded_channel();
        let (done, _) = oneshot::channel();
        let now = Instant::now();
        let r = Registration {
            id,
            index: 0,
            target,
            ssid,
            interval: Duration::from_millis(100),
            first: now,
            end_at: None,
            count: None,
            packet_bytes: 44,
            timeout: Duration::from_secs(2),
            stateful: false,
            wants_packets: true,
            counts_only,
            run_start: now,
            out,
            registered: done,
        };
        (t.add(&r, now).unwrap(), rx)
    }

    /// A stateless reflector's reply to packet `seq` of SSID `ssid` sent at `t1`.
    fn reply(seq: u32, t1: i64, ssid: u16) -> Vec<u8> {
        let mut b = vec![0u8; 44];
        ReflectorPacket {
            seq,
            timestamp: ntp_from_unix_ns(t1 + 1_000),
            error: ErrorEstimate::from_clock(1000, false),
            receive_timestamp: ntp_from_unix_ns(t1 + 500),
            sender_seq: seq,
            sender_timestamp: ntp_from_unix_ns(t1),
            sender_error: ErrorEstimate::from_clock(1000, false),
            sender_ttl: 255,
            ssid,
        }
        .write(&mut b);
        b
    }

    fn err() -> ErrorEstimate {
        ErrorEstimate::from_clock(1000, false)
    }

    const T0: i64 = 1_800_000_000_000_000_000;

    #[test]
    fn sessions_to_one_reflector_get_distinct_ssids_and_their_own_replies() {
        let mut t = Table::new(addr("0.0.0.0:5000"), counters());
        let r = addr("127.0.1.1:862");
        let (a, _ra) = add(&mut t, 1, r, None);
        let (b, _rb) = add(&mut t, 2, r, None);
        assert_ne!(a, b);
        // An SSID asked for that another session to that reflector has.
        let (out, _) = mpsc::unbounded_channel();
        let (done, _) = oneshot::channel();
        let now = Instant::now();
        let taken = Registration {
            id: 3,
            index: 0,
            target: r,
            ssid: Some(a),
            interval: Duration::from_millis(100),
            first: now,
            end_at: None,
            count: None,
            packet_bytes: 44,
            timeout: Duration::from_secs(2),
            stateful: false,
            wants_packets: false,
            counts_only: false,
            run_start: now,
            out,
            registered: done,
        };
        let e = t.add(&taken, now).unwrap_err();
        assert!(e.contains(&format!("SSID {a} to 127.0.1.1:862 is taken")), "{e}");
        // Each session sent its packet 0; each reply goes to its own.
        for id in [1, 2] {
            let next = t.sent(id, T0 + id as i64, Ok(()), now);
            assert_eq!(next, Some(t.sessions[&id].next));
            assert!(next.unwrap() > now, "the next packet is an interval on");
        }
        assert_eq!(
            t.reply(r, &reply(0, T0 + 2, b), T0 + 10_000, Some(64), err()),
            Some(2)
        );
        assert_eq!(
            t.reply(r, &reply(0, T0 + 1, a), T0 + 10_000, Some(64), err()),
            Some(1)
        );
        assert_eq!(
            (t.sessions[&1].tally.received, t.sessions[&2].tally.received),
            (1, 1)
        );
        // A reflector that returns no SSID: matched by sequence and T1.
        t.sent(1, T0 + 100, Ok(()), now);
        assert_eq!(
            t.reply(r, &reply(1, T0 + 100, 0), T0 + 20_000, None, err()),
            Some(1)
        );
        assert_eq!(t.sessions[&1].tally.received, 2);
        assert_eq!(t.counters.unknown.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn replies_from_unknown_addresses_or_ssids_are_dropped_and_counted() {
        let c = counters();
        let mut t = Table::new(addr("0.0.0.0:5000"), c.clone());
        let r = addr("127.0.1.1:862");
        let (ssid, _rx) = add(&mut t, 1, r, None);
        let now = Instant::now();
        t.sent(1, T0, Ok(()), now);
        // Another address (port), another SSID, and no SSID from an address with no session.
        assert_eq!(
            t.reply(addr("127.0.1.2:862"), &reply(0, T0, ssid), T0 + 9, None, err()),
            None
        );
        assert_eq!(
            t.reply(addr("127.0.1.1:863"), &reply(0, T0, ssid), T0 + 9, None, err()),
            None
        );
        assert_eq!(
            t.reply(r, &reply(0, T0, ssid.wrapping_add(1)), T0 + 9, None, err()),
            None
        );
        assert_eq!(
            t.reply(addr("127.0.1.9:862"), &reply(0, T0, 0), T0 + 9, None, err()),
            None
        );
        assert_eq!(c.unknown.load(Ordering::Relaxed), 4);
        // Too short to be a reply.
        assert_eq!(t.reply(r, &[0u8; 10], T0 + 9, None, err()), None);
        assert_eq!(c.malformed.load(Ordering::Relaxed), 1);
        let s = &t.sessions[&1];
        assert_eq!((s.tally.received, s.tracker.pending()), (0, 1));
    }

    #[test]
    fn a_sequence_outside_the_window_is_unmatched_and_a_duplicate_counts_once() {
        let mut t = Table::new(addr("0.0.0.0:5000"), counters());
        let r = addr("127.0.1.1:862");
        let (ssid, _rx) = add(&mut t, 1, r, None);
        let now = Instant::now();
        for k in 0..3 {
            t.sent(1, T0 + k * 100_000_000, Ok(()), now);
        }
        // Sequence numbers never sent (ahead, and wrapped far behind).
        assert_eq!(t.reply(r, &reply(3, T0, ssid), T0 + 1, None, err()), Some(1));
        assert_eq!(
            t.reply(r, &reply(u32::MAX, T0, ssid), T0 + 1, None, err()),
            Some(1)
        );
        // Packet 1 answered twice: received once, one duplicate.
        let p1 = reply(1, T0 + 100_000_000, ssid);
        t.reply(r, &p1, T0 + 100_010_000, None, err());
        t.reply(r, &p1, T0 + 100_020_000, None, err());
        let s = &t.sessions[&1];
        assert_eq!(
            (s.tally.received, s.tally.duplicates, s.tally.unmatched),
            (1, 1, 2)
        );
        assert_eq!(s.tracker.pending(), 2);
    }

    /// A session whose run keeps its delays per minute counts exactly as
    /// any other, and keeps no delay distribution of its own.
    #[test]
    fn a_session_of_a_summarised_run_counts_exactly_and_keeps_no_delays() {
        let mut t = Table::new(addr("0.0.0.0:5000"), counters());
        let r = addr("127.0.1.1:862");
        let (a, _ra) = add(&mut t, 1, r, None);
        let (b, _rb) = add_with(&mut t, 2, r, None, true);
        let now = Instant::now();
        for k in 0..3 {
            t.sent(1, T0 + k * 100_000_000, Ok(()), now);
            t.sent(2, T0 + k * 100_000_000, Ok(()), now);
        }
        for (ssid, id) in [(a, 1), (b, 2)] {
            for k in 0..2u32 {
                let t1 = T0 + i64::from(k) * 100_000_000;
                assert_eq!(
                    t.reply(r, &reply(k, t1, ssid), t1 + 40_000, None, err()),
                    Some(id)
                );
            }
        }
        t.expire(now, T0 + 2_300_000_000);
        let (full, counted) = (&t.sessions[&1].tally, &t.sessions[&2].tally);
        for s in [full, counted] {
            assert_eq!((s.sent, s.received, s.lost), (3, 2, 1));
        }
        assert_eq!(full.rtt_stats().map(|d| d.count), Some(2));
        assert!(counted.rtt_stats().is_none());
        assert!(counted.stats().histograms.rtt_ns.is_none());
    }

    #[test]
    fn losses_expire_after_the_timeout_and_the_end_hands_over_every_fate() {
        let mut t = Table::new(addr("0.0.0.0:5000"), counters());
        let r = addr("127.0.1.1:862");
        let (ssid, mut rx) = add(&mut t, 1, r, None);
        let now = Instant::now();
        for k in 0..4 {
            t.sent(1, T0 + k * 100_000_000, Ok(()), now);
        }
        // Packet 3 refused by the kernel: not sent, with its reason.
        t.sent(
            1,
            T0 + 400_000_000,
            Err(io::Error::from_raw_os_error(libc::EPERM)),
            now,
        );
        t.reply(
            r,
            &reply(1, T0 + 100_000_000, ssid),
            T0 + 100_050_000,
            None,
            err(),
        );
        // 2 s after packet 0 (the timeout): only it is lost.
        t.expire(now, T0 + 2_000_000_000);
        assert_eq!(t.sessions[&1].tally.lost, 1);
        // Its run stopped sending; a timeout later the session ends, and
        // the two still in flight (their own timeouts not yet seen) are
        // lost too.
        t.sessions.get_mut(&1).unwrap().stop_sending(now);
        t.expire(now + Duration::from_secs(3), T0 + 2_150_000_000);
        assert!(!t.sessions.contains_key(&1), "the session ended");
        assert!(t.by_key.is_empty());
        let mut fates = Vec::new();
        let mut done = None;
        while let Ok(u) = rx.try_recv() {
            match u {
                Update::Packets(p) => fates.extend(p),
                Update::Done(d) => done = Some(d),
            }
        }
        let (tally, end) = *done.expect("a Done update");
        assert_eq!(
            (tally.sent, tally.received, tally.lost, tally.not_sent),
            (4, 1, 3, 1)
        );
        assert_eq!(end.abandoned, 0);
        assert_eq!(end.send_errors, 1);
        let count = |st: StampPacketStatus| fates.iter().filter(|p| p.status == st).count();
        assert_eq!(
            (
                count(StampPacketStatus::Received),
                count(StampPacketStatus::Lost),
                count(StampPacketStatus::NotSent)
            ),
            (1, 3, 1)
        );
        // A reply after the end has no session.
        assert_eq!(
            t.reply(r, &reply(2, T0 + 200_000_000, ssid), T0 + 1, None, err()),
            None
        );
    }

    #[test]
    fn a_late_stream_skips_its_slots_as_not_sent_and_a_counted_run_sends_later() {
        let mut t = Table::new(addr("0.0.0.0:5000"), counters());
        let r = addr("127.0.1.1:862");
        add(&mut t, 1, r, None);
        add(&mut t, 2, r, None);
        t.sessions.get_mut(&2).unwrap().count = Some(20);
        let first = t.sessions[&1].next;
        // 550 ms late at 100 ms: the slots at 100..=400 ms are skipped,
        // the one at 500 ms (less than an interval behind) is sent next.
        let late = first + Duration::from_millis(550);
        let next = t.sent(1, T0, Ok(()), late).unwrap();
        assert_eq!(next, first + Duration::from_millis(500));
        let s = &t.sessions[&1];
        assert_eq!((s.tally.sent, s.tally.not_sent, s.planned), (1, 4, 5));
        assert_eq!(s.tally.send_failures[0].reason, "late");
        t.sent(2, T0, Ok(()), late);
        let s = &t.sessions[&2];
        assert_eq!((s.tally.sent, s.tally.not_sent, s.planned), (1, 0, 1));
    }

    #[test]
    fn a_stopped_session_abandons_what_is_in_flight() {
        let mut t = Table::new(addr("0.0.0.0:5000"), counters());
        let r = addr("127.0.1.1:862");
        let (_, mut rx) = add(&mut t, 1, r, None);
        let now = Instant::now();
        t.sent(1, T0, Ok(()), now);
        t.sent(1, T0 + 1, Ok(()), now);
        t.finish(1, true, now);
        let mut done = None;
        while let Ok(u) = rx.try_recv() {
            if let Update::Done(d) = u {
                done = Some(d);
            }
        }
        let (tally, end) = *done.unwrap();
        assert_eq!((tally.sent, tally.lost, end.abandoned), (0, 0, 2));
        assert_eq!(t.counters.sessions.load(Ordering::Relaxed), 0);
    }
}
