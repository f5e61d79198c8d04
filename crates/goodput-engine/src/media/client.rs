//! `goodput udp`: the client side of media streams. One thread runs every
//! stream of the run, one connected socket each: the request / challenge /
//! accept handshake, then either receiving and playing out (the default)
//! or sending (`--upload`), reports every 250 ms, and a status interval
//! that goes to the observer through a channel.

use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use goodput_core::media::receiver::{FrameFate, MediaCounts};
use goodput_core::media::stats::MediaTotals;
use goodput_core::media::wire::{Message, Report, Request, COOKIE_LEN, DATA_HEADER_LEN};
use goodput_core::media::MediaPlan;
use goodput_core::result::{
    ConnectionRecord, Detail, EndReason, Interval, MediaDatagram, MediaDetail, MediaInterval, MediaStats,
    Outcome, ProtocolErrorKind, Summary, SummaryBuilder, TcpSettings, TestKind, TestResult, WireProtocol,
    SCHEMA_VERSION,
};
use socket2::{Domain, Protocol, Socket, Type};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::server::poll_until;
use super::{datagrams, send_message, Incoming, Outgoing};
use crate::datagram::{self, RecvBatch};
use crate::socket::addr_text;
use crate::{EngineError, Observer};

/// How long a request waits for an answer before it is sent again.
const RETRY: Duration = Duration::from_millis(500);
/// How long a stream waits for the server to accept it.
const HANDSHAKE: Duration = Duration::from_secs(5);
/// Datagrams per `recvmmsg`.
const BATCH: usize = 16;

/// A datagram record consumer (the jitter file).
pub type DatagramSink = Box<dyn FnMut(&MediaDatagram) + Send>;

/// How to run media streams.
pub struct MediaSpec {
    /// Server addresses, used round robin.
    pub targets: Vec<SocketAddr>,
    /// Local addresses to send from, round robin (empty: any).
    pub bind: Vec<IpAddr>,
    /// The stream's shape.
    pub plan: MediaPlan,
    /// Play-out delay after a stream opens.
    pub buffer_depth: Duration,
    /// Streams at once.
    pub connections: u32,
    /// Streams each connection slot runs in turn (0: until the time limit
    /// or a cancel).
    pub iterations: u64,
    /// The client sends and the server plays out.
    pub upload: bool,
    /// Check every payload against the pattern.
    pub verify_data: bool,
    /// DSCP (0..=63).
    pub dscp: u8,
    /// Status interval.
    pub status_interval: Duration,
    /// Stop after this long.
    pub time_limit: Option<Duration>,
    /// Most intervals and streams kept in the result document.
    pub max_records: usize,
    /// Receives a record of every data datagram received (the jitter file).
    pub datagram_sink: Option<DatagramSink>,
}

enum Event {
    Interval(Box<Interval>),
    Record(Box<ConnectionRecord>),
    Done(Box<Finish>),
}

struct Finish {
    total: MediaStats,
    histograms: goodput_core::result::MediaHistograms,
    streams: u64,
    failed: u64,
    end: EndReason,
    elapsed: Duration,
}

/// Runs the streams to the end (iterations, time limit or `cancel`) and
/// returns the result document.
pub async fn run_media(
    mut spec: MediaSpec,
    observer: &mut dyn Observer,
    cancel: CancellationToken,
) -> Result<TestResult, EngineError> {
    if spec.targets.is_empty() || spec.connections == 0 || spec.status_interval.is_zero() {
        return Err(EngineError::Config(
            "a media run needs a target, at least one connection and a status interval".into(),
        ));
    }
    let started_unix_ms = (datagram::now_unix_ns() / 1_000_000) as u64;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let stop = Arc::new(AtomicBool::new(false));
    let sink = spec.datagram_sink.take();
    let core = Core {
        targets: spec.targets.clone(),
        bind: spec.bind.clone(),
        plan: spec.plan,
        buffer_depth: spec.buffer_depth,
        connections: spec.connections,
        iterations: spec.iterations,
        upload: spec.upload,
        verify_data: spec.verify_data,
        dscp: spec.dscp,
        status_interval: spec.status_interval,
        time_limit: spec.time_limit,
    };
    let stop2 = stop.clone();
    std::thread::Builder::new()
        .name("media-client".into())
        .spawn(move || drive(core, sink, tx, stop2))
        .map_err(|e| EngineError::Config(format!("cannot start the media thread: {e}")))?;
    let mut intervals = Vec::new();
    let mut intervals_omitted = 0;
    let mut connections = Vec::new();
    let mut connections_omitted = 0;
    let mut summary = SummaryBuilder::default();
    let mut finish = None;
    let mut cancelled = false;
    loop {
        tokio::select! {
            ev = rx.recv() => match ev {
                Some(Event::Interval(iv)) => {
                    observer.on_interval(&iv);
                    if intervals.len() < spec.max_records {
                        intervals.push(*iv);
                    } else {
                        intervals_omitted += 1;
                    }
                }
                Some(Event::Record(r)) => {
                    observer.on_connection(&r);
                    summary.add(&r);
                    if connections.len() < spec.max_records {
                        connections.push(*r);
                    } else {
                        connections_omitted += 1;
                    }
                }
                Some(Event::Done(f)) => finish = Some(f),
                None => break,
            },
            _ = cancel.cancelled(), if !cancelled => {
                cancelled = true;
                stop.store(true, Ordering::Relaxed);
            }
        }
    }
    let f = finish.ok_or_else(|| EngineError::Config("the media thread stopped without a result".into()))?;
    let summary: Summary = summary.finish(f.elapsed.as_nanos() as u64);
    let plan = spec.plan;
    Ok(TestResult {
        spec: None,
        error: None,
        schema_version: SCHEMA_VERSION,
        tool: crate::tool_info(),
        kind: TestKind::MediaClient,
        started_unix_ms,
        settings: TcpSettings {
            connections: Some(u64::from(spec.connections)),
            iterations: Some(spec.iterations),
            time_limit_ms: spec.time_limit.map(|d| d.as_millis() as u64),
            ..TcpSettings::bare(
                WireProtocol::Media,
                spec.targets.iter().map(|a| a.to_string()).collect(),
                spec.status_interval.as_millis() as u64,
            )
        },
        intervals,
        intervals_omitted,
        connections,
        summary,
        connections_omitted,
        end: f.end,
        assertions: Vec::new(),
        detail: Detail::Media(Box::new(MediaDetail {
            upload: spec.upload,
            verify_data: spec.verify_data,
            bits_per_second: plan.bits_per_second,
            effective_bits_per_second: plan.effective_bits_per_second(),
            frame_rate: plan.frame_rate,
            length_s: plan.length_s,
            frames: plan.frames,
            frame_bytes: plan.frame_bytes,
            datagram_bytes: plan.datagram_bytes,
            datagrams_per_frame: plan.shape().count(),
            buffer_depth_ms: spec.buffer_depth.as_millis() as u64,
            streams: f.streams,
            streams_failed: f.failed,
            total: f.total,
            histograms: f.histograms,
        })),
    })
}

struct Core {
    targets: Vec<SocketAddr>,
    bind: Vec<IpAddr>,
    plan: MediaPlan,
    buffer_depth: Duration,
    connections: u32,
    iterations: u64,
    upload: bool,
    verify_data: bool,
    dscp: u8,
    status_interval: Duration,
    time_limit: Option<Duration>,
}

enum Phase {
    Handshake,
    Recv(Box<Incoming>),
    Send(Box<Outgoing>),
}

struct Active {
    index: u64,
    sock: Socket,
    local: String,
    remote: SocketAddr,
    opened: Instant,
    phase: Phase,
    nonce: u64,
    cookie: [u8; COOKIE_LEN],
    next_try: Instant,
    stream: u32,
    outcome: Option<Outcome>,
    done: bool,
    /// Counts already put into a status interval.
    seen: MediaCounts,
    seen_lost: u64,
}

impl Active {
    fn fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }

    fn request(&self, c: &Core) -> Message {
        Message::Request(Request {
            nonce: self.nonce,
            bits_per_second: c.plan.bits_per_second,
            frame_rate: c.plan.frame_rate,
            length_s: c.plan.length_s,
            datagram_bytes: c.plan.datagram_bytes,
            upload: c.upload,
            verify_data: c.verify_data,
            buffer_ms: c.buffer_depth.as_millis().min(u128::from(u32::MAX)) as u32,
            cookie: self.cookie,
        })
    }

    fn fail(&mut self, o: Outcome) {
        if self.outcome.is_none() {
            self.outcome = Some(o);
        }
        self.done = true;
    }

    /// The receiver's counts so far (ours, or the server's last report)
    /// and its lost count.
    fn counts(&self) -> (MediaCounts, u64) {
        match &self.phase {
            Phase::Handshake => (MediaCounts::default(), 0),
            Phase::Recv(i) => {
                let lost = i.rx.report(0, i.end_sent, false).lost;
                (i.rx.counts, lost)
            }
            Phase::Send(o) => o
                .report
                .map_or((MediaCounts::default(), 0), |r| (counts_of(&r), r.lost)),
        }
    }
}

fn counts_of(r: &Report) -> MediaCounts {
    MediaCounts {
        received: r.received,
        duplicates: r.duplicates,
        reordered: r.reordered,
        extent_sum: 0,
        extent_max: 0,
        late: r.late,
        errors: r.errors,
        corrupt: r.corrupt,
        completed: u64::from(r.completed),
        dropped: u64::from(r.dropped),
        repeated: u64::from(r.repeated),
    }
}

fn protocol(kind: ProtocolErrorKind, message: String) -> Outcome {
    Outcome::ProtocolError {
        kind,
        direction: None,
        offset: None,
        expected: None,
        actual: None,
        message,
    }
}

fn network(during: &str, name: &str, message: String) -> Outcome {
    Outcome::NetworkError {
        during: during.into(),
        errno: None,
        name: name.into(),
        message,
    }
}

/// Counters of one status interval.
#[derive(Default)]
struct Window {
    sent_bytes: u64,
    recv_bytes: u64,
    counts: MediaCounts,
    lost: u64,
}

struct Driver {
    c: Core,
    sink: Option<DatagramSink>,
    tx: mpsc::UnboundedSender<Event>,
    start: Instant,
    started: u64,
    succeeded: u64,
    net_errors: u64,
    data_errors: u64,
    window: Window,
    totals: MediaTotals,
}

fn open_socket(c: &Core, index: u64) -> std::io::Result<(Socket, SocketAddr)> {
    let target = c.targets[(index % c.targets.len() as u64) as usize];
    let s = Socket::new(Domain::for_address(target), Type::DGRAM, Some(Protocol::UDP))?;
    let candidates: Vec<IpAddr> = c
        .bind
        .iter()
        .copied()
        .filter(|ip| ip.is_ipv4() == target.is_ipv4())
        .collect();
    if !candidates.is_empty() {
        let ip = candidates[(index % candidates.len() as u64) as usize];
        s.bind(&SocketAddr::new(ip, 0).into())?;
    }
    if c.dscp > 0 {
        let tos = u32::from(c.dscp) << 2;
        if target.is_ipv6() {
            s.set_tclass_v6(tos)?;
        } else {
            s.set_tos(tos)?;
        }
    }
    s.connect(&target.into())?;
    let fd = s.as_raw_fd();
    datagram::enable_timestamps(fd)?;
    datagram::enable_gro(fd);
    // A quarter second of the stream, at least 4 MiB: a frame's burst fits.
    let rate = (c.plan.bits_per_second / 8) as usize;
    let want = (rate / 4).clamp(4 << 20, 64 << 20);
    datagram::set_buffer(fd, !c.upload, want);
    if c.upload {
        datagram::set_buffer(fd, false, want.min(16 << 20));
    }
    Ok((s, target))
}

fn drive(c: Core, sink: Option<DatagramSink>, tx: mpsc::UnboundedSender<Event>, stop: Arc<AtomicBool>) {
    let start = Instant::now();
    let mut d = Driver {
        c,
        sink,
        tx,
        start,
        started: 0,
        succeeded: 0,
        net_errors: 0,
        data_errors: 0,
        window: Window::default(),
        totals: MediaTotals::default(),
    };
    let total = if d.c.iterations == 0 {
        u64::MAX
    } else {
        d.c.iterations.saturating_mul(u64::from(d.c.connections))
    };
    let deadline = d.c.time_limit.map(|t| start + t);
    let mut active: Vec<Active> = Vec::new();
    let mut batch = RecvBatch::new(BATCH, 65_536);
    let mut next_status = start + d.c.status_interval;
    let mut last_status = start;
    let mut end = EndReason::Completed;
    loop {
        let now = Instant::now();
        let interrupted = stop.load(Ordering::Relaxed);
        let timed_out = deadline.is_some_and(|t| now >= t);
        if interrupted || timed_out {
            end = if interrupted {
                EndReason::Interrupted
            } else {
                EndReason::TimeLimit
            };
            let reason = if interrupted { "interrupted" } else { "time limit" };
            for mut a in active.drain(..) {
                a.fail(Outcome::Aborted {
                    reason: reason.into(),
                });
                d.finish(a, now);
            }
            break;
        }
        while active.len() < d.c.connections as usize && d.started < total {
            let index = d.started;
            d.started += 1;
            match open_socket(&d.c, index) {
                Ok((sock, remote)) => {
                    let local = sock
                        .local_addr()
                        .ok()
                        .and_then(|a| a.as_socket())
                        .map_or_else(String::new, addr_text);
                    active.push(Active {
                        index,
                        sock,
                        local,
                        remote,
                        opened: now,
                        phase: Phase::Handshake,
                        nonce: rand::random(),
                        cookie: [0; COOKIE_LEN],
                        next_try: now,
                        stream: 0,
                        outcome: None,
                        done: false,
                        seen: MediaCounts::default(),
                        seen_lost: 0,
                    });
                }
                Err(e) => {
                    let target = d.c.targets[(index % d.c.targets.len() as u64) as usize];
                    let record = d.record_failed_open(index, target, &e, now);
                    let _ = d.tx.send(Event::Record(Box::new(record)));
                }
            }
        }
        if active.is_empty() {
            break;
        }
        for a in active.iter_mut() {
            d.receive(a, &mut batch, now);
        }
        let mut wake = now + Duration::from_millis(100);
        for a in active.iter_mut() {
            d.tick(a, now, &mut wake);
        }
        let mut i = 0;
        while i < active.len() {
            if active[i].done {
                let a = active.swap_remove(i);
                d.finish(a, now);
            } else {
                i += 1;
            }
        }
        if now >= next_status {
            d.status(&mut active, now, now - last_status);
            last_status = now;
            next_status += d.c.status_interval;
            if next_status <= now {
                next_status = now + d.c.status_interval;
            }
        }
        wake = wake.min(next_status);
        if let Some(t) = deadline {
            wake = wake.min(t);
        }
        if active.iter().all(|a| !a.done) && !active.is_empty() {
            let fds: Vec<RawFd> = active.iter().map(Active::fd).collect();
            poll_until(&fds, wake);
        }
    }
    let now = Instant::now();
    d.status(&mut active, now, now - last_status);
    let failed = d.net_errors + d.data_errors;
    let f = Finish {
        total: d.totals.stats(),
        histograms: d.totals.histograms(),
        streams: d.started,
        failed,
        end,
        elapsed: now - start,
    };
    let _ = d.tx.send(Event::Done(Box::new(f)));
}

impl Driver {
    fn receive(&mut self, a: &mut Active, batch: &mut RecvBatch, now: Instant) {
        loop {
            let n = match batch.recv(a.fd()) {
                Ok(n) => n,
                Err(e) => {
                    // ECONNREFUSED: nothing listens at the server's port.
                    if matches!(a.phase, Phase::Handshake) || a.counts().0.received == 0 {
                        a.fail(crate::socket::network_outcome("recv", &e));
                    }
                    return;
                }
            };
            for i in 0..n {
                let (buf, meta) = batch.get(i);
                let t_ns = meta.t_ns.unwrap_or_else(datagram::now_unix_ns);
                for dg in datagrams(buf, meta.segment) {
                    self.datagram(a, dg, t_ns, now);
                }
            }
            if n < BATCH {
                return;
            }
        }
    }

    fn datagram(&mut self, a: &mut Active, d: &[u8], t_ns: i64, now: Instant) {
        let Ok(m) = Message::decode(d) else {
            return;
        };
        match (&mut a.phase, m) {
            (Phase::Handshake, Message::Challenge { nonce, cookie }) if nonce == a.nonce => {
                a.cookie = cookie;
                a.next_try = now;
            }
            (Phase::Handshake, Message::Accept { nonce, stream }) if nonce == a.nonce => {
                a.stream = stream;
                a.phase = if self.c.upload {
                    Phase::Send(Box::new(Outgoing::new(self.c.plan, stream, now, None)))
                } else {
                    Phase::Recv(Box::new(Incoming::new(
                        self.c.plan,
                        stream,
                        now,
                        self.c.buffer_depth,
                        self.c.verify_data,
                    )))
                };
            }
            (Phase::Handshake, Message::Reject { nonce, reason }) if nonce == a.nonce => {
                a.fail(protocol(
                    ProtocolErrorKind::Rejected,
                    format!("the server refused the stream: {reason}"),
                ));
            }
            (Phase::Recv(i), Message::Data(h)) if h.stream == a.stream => {
                self.window.recv_bytes += d.len() as u64;
                if d.len() > DATA_HEADER_LEN {
                    i.data(&h, d, t_ns, self.sink.as_mut());
                }
            }
            (
                Phase::Recv(i),
                Message::End {
                    stream,
                    sent,
                    send_errors,
                },
            ) if stream == a.stream => {
                i.end_sent = Some(sent);
                i.end_send_errors = Some(send_errors);
            }
            (Phase::Send(o), Message::Report(r)) if r.stream == a.stream => o.heard(r, now),
            _ => {}
        }
    }

    fn tick(&mut self, a: &mut Active, now: Instant, wake: &mut Instant) {
        if a.done {
            return;
        }
        let fd = a.fd();
        match &mut a.phase {
            Phase::Handshake => {
                if now.duration_since(a.opened) >= HANDSHAKE {
                    a.fail(network(
                        "request",
                        "NoAnswer",
                        format!(
                            "no answer from {} within {} s (is a goodput server running there?)",
                            a.remote,
                            HANDSHAKE.as_secs()
                        ),
                    ));
                    return;
                }
                if now >= a.next_try {
                    let m = a.request(&self.c);
                    if let Err(e) = send_message(fd, None, None, &m) {
                        a.fail(crate::socket::network_outcome("send", &e));
                        return;
                    }
                    a.next_try = now + RETRY;
                }
                *wake = (*wake).min(a.next_try);
            }
            Phase::Recv(i) => {
                for f in i.play(now) {
                    match f.fate {
                        FrameFate::Completed => self.window.counts.completed += 1,
                        FrameFate::Dropped => self.window.counts.dropped += 1,
                        FrameFate::Repeated => self.window.counts.repeated += 1,
                    }
                }
                if i.starved(now) {
                    // ctsTraffic: nothing at all by play-out time fails the
                    // stream, every frame dropped.
                    let frames = self.c.plan.frames;
                    self.window.counts.dropped += i.rx.play_until(frames + 1).len() as u64;
                    a.fail(protocol(
                        ProtocolErrorKind::NotAllData,
                        format!(
                            "no data arrived within the buffer depth ({} ms)",
                            self.c.buffer_depth.as_millis()
                        ),
                    ));
                    return;
                }
                while let Some(r) = i.report_due(now) {
                    let _ = send_message(fd, None, None, &Message::Report(r));
                    if !r.last {
                        break;
                    }
                }
                if i.finished() {
                    a.done = true;
                } else {
                    *wake = (*wake).min(i.next_wake());
                }
            }
            Phase::Send(o) => {
                self.window.sent_bytes += o.pump(fd, None, now);
                let last = o.report.is_some_and(|r| r.last);
                if o.finished_sending() && last {
                    a.done = true;
                } else if o.silent(now) {
                    if o.finished_sending() {
                        a.done = true;
                    } else {
                        a.fail(network(
                            "report",
                            "NoReports",
                            format!(
                                "the server sent no report for {} s; stream stopped",
                                super::SILENCE.as_secs()
                            ),
                        ));
                    }
                } else if let Some(w) = o.next_wake() {
                    *wake = (*wake).min(w);
                }
            }
        }
    }

    /// Folds an ended stream into the totals and reports it.
    fn finish(&mut self, mut a: Active, now: Instant) {
        // The rest of its counts belong to the current interval.
        let (counts, lost) = a.counts();
        self.add_window(&mut a, counts, lost);
        let (stats, sent_bytes, recv_bytes) = match &a.phase {
            Phase::Handshake => (Some(MediaStats::default()), 0, 0),
            Phase::Recv(i) => {
                let mut one = MediaTotals::default();
                one.add_receiver(&i.rx, i.end_sent, i.end_send_errors, i.recv_bytes);
                self.totals
                    .add_receiver(&i.rx, i.end_sent, i.end_send_errors, i.recv_bytes);
                (Some(one.stats()), 0, i.recv_bytes)
            }
            Phase::Send(o) => {
                let mut one = MediaTotals::default();
                one.add_sender(o.sent, o.send_errors, &o.failures, o.report.as_ref());
                self.totals
                    .add_sender(o.sent, o.send_errors, &o.failures, o.report.as_ref());
                (Some(one.stats()), o.sent_bytes, 0)
            }
        };
        let outcome = match a.outcome.take() {
            Some(o) => o,
            None => match (&a.phase, &stats) {
                (_, Some(s)) if s.corrupt > 0 => protocol(
                    ProtocolErrorKind::DataMismatch,
                    format!("{} datagrams' payloads did not match the pattern", s.corrupt),
                ),
                (Phase::Send(o), _) if o.sent == 0 => match &o.first_error {
                    Some(e) => crate::socket::network_outcome("send", e),
                    None => network("send", "NothingSent", "no datagram was sent".into()),
                },
                // The server sends its end-of-stream message three times
                // after its last frame; none of them arriving means it
                // stopped (or the path died) before the end, and the frames
                // it never sent were counted dropped.
                (Phase::Recv(i), Some(s)) if i.end_sent.is_none() => network(
                    "receive",
                    "NoEnd",
                    format!(
                        "the server's end-of-stream message never came: it stopped or the path failed \
                         mid-stream ({} of {} frames completed, {} dropped)",
                        s.frames_completed, self.c.plan.frames, s.frames_dropped
                    ),
                ),
                _ => Outcome::Succeeded,
            },
        };
        match &outcome {
            Outcome::Succeeded => self.succeeded += 1,
            Outcome::NetworkError { .. } | Outcome::Aborted { .. } => self.net_errors += 1,
            Outcome::ProtocolError { .. } => self.data_errors += 1,
        }
        let record = ConnectionRecord {
            index: a.index,
            connection_id: if a.stream == 0 {
                String::new()
            } else {
                format!("{:08x}", a.stream)
            },
            local_address: a.local.clone(),
            remote_address: addr_text(a.remote),
            start_s: a.opened.duration_since(self.start).as_secs_f64(),
            time_slice_s: now.duration_since(self.start).as_secs_f64(),
            elapsed_ns: now.duration_since(a.opened).as_nanos() as u64,
            pattern: None,
            transfer_bytes: self.c.plan.total_bytes,
            buffer_bytes: u64::from(self.c.plan.datagram_bytes),
            rate_limit_bytes_per_second: self.c.plan.bits_per_second / 8,
            sent_bytes,
            received_bytes: recv_bytes,
            outcome,
            peer: None,
            shutdown: None,
            quic: None,
            tcp_info: None,
            media: stats,
            timed: None,
        };
        let _ = self.tx.send(Event::Record(Box::new(record)));
    }

    fn record_failed_open(
        &mut self,
        index: u64,
        target: SocketAddr,
        e: &std::io::Error,
        now: Instant,
    ) -> ConnectionRecord {
        self.net_errors += 1;
        ConnectionRecord {
            index,
            connection_id: String::new(),
            local_address: String::new(),
            remote_address: addr_text(target),
            start_s: now.duration_since(self.start).as_secs_f64(),
            time_slice_s: now.duration_since(self.start).as_secs_f64(),
            elapsed_ns: 0,
            pattern: None,
            transfer_bytes: self.c.plan.total_bytes,
            buffer_bytes: u64::from(self.c.plan.datagram_bytes),
            rate_limit_bytes_per_second: self.c.plan.bits_per_second / 8,
            sent_bytes: 0,
            received_bytes: 0,
            outcome: crate::socket::network_outcome("socket", e),
            peer: None,
            shutdown: None,
            quic: None,
            tcp_info: None,
            media: Some(MediaStats::default()),
            timed: None,
        }
    }

    fn add_window(&mut self, a: &mut Active, counts: MediaCounts, lost: u64) {
        let w = &mut self.window.counts;
        let s = &a.seen;
        w.received += counts.received.saturating_sub(s.received);
        w.duplicates += counts.duplicates.saturating_sub(s.duplicates);
        w.late += counts.late.saturating_sub(s.late);
        w.errors += counts.errors.saturating_sub(s.errors);
        w.corrupt += counts.corrupt.saturating_sub(s.corrupt);
        if matches!(a.phase, Phase::Send(_)) {
            // Frames played at the far end, from its reports.
            w.completed += counts.completed.saturating_sub(s.completed);
            w.dropped += counts.dropped.saturating_sub(s.dropped);
            w.repeated += counts.repeated.saturating_sub(s.repeated);
        }
        self.window.lost += lost.saturating_sub(a.seen_lost);
        a.seen = counts;
        a.seen_lost = a.seen_lost.max(lost);
    }

    fn status(&mut self, active: &mut [Active], now: Instant, dt: Duration) {
        let mut jitter_ns = 0.0;
        let mut streams = 0u64;
        for a in active.iter_mut() {
            let (c, l) = a.counts();
            self.add_window(a, c, l);
            match &a.phase {
                Phase::Recv(i) => {
                    streams += 1;
                    jitter_ns += i.rx.jitter_ns();
                }
                Phase::Send(o) => {
                    streams += 1;
                    jitter_ns += o.report.map_or(0.0, |r| r.jitter_ns as f64);
                }
                Phase::Handshake => {}
            }
        }
        let w = std::mem::take(&mut self.window);
        let secs = dt.as_secs_f64().max(1e-9);
        let bytes = if self.c.upload { w.sent_bytes } else { w.recv_bytes };
        let iv = Interval {
            time_slice_s: now.duration_since(self.start).as_secs_f64(),
            send_bytes_per_second: (w.sent_bytes as f64 / secs) as u64,
            recv_bytes_per_second: (w.recv_bytes as f64 / secs) as u64,
            in_flight: streams,
            completed: self.succeeded,
            network_errors: self.net_errors,
            data_errors: self.data_errors,
            stamp: None,
            echo: None,
            media: Some(MediaInterval {
                bits_per_second: (bytes as f64 * 8.0 / secs) as u64,
                streams,
                completed: w.counts.completed,
                dropped: w.counts.dropped,
                repeated: w.counts.repeated,
                errors: w.counts.errors + w.counts.corrupt,
                received: w.counts.received,
                lost: w.lost,
                jitter_us: if streams == 0 {
                    0.0
                } else {
                    jitter_ns / streams as f64 / 1e3
                },
            }),
        };
        let _ = self.tx.send(Event::Interval(Box::new(iv)));
    }
}
