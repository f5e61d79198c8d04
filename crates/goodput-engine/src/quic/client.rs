//! `goodput quic`: the QUIC perf client. Runs a picoquic scenario (or one of
//! the secnetperf-style shortcuts) on each connection, checks the byte
//! count of every response, and reports picoquic's statistics with quinn's
//! connection figures.

use std::collections::HashMap;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use goodput_core::quic::scenario::{Body, MediaDesc, Response, Scenario};
use goodput_core::quic::{error_code, MediaRequest, Request, HEADER_LEN, MEDIA_HEADER_LEN, UNLIMITED};
use goodput_core::result::{
    ConnectionRecord, Detail, EndReason, Interval, Outcome, Percentiles, QuicDetail, QuicHandshakeStats,
    QuicMediaStats, QuicRequestStats, SummaryBuilder, TcpSettings, TestKind, TestResult, WireProtocol,
    SCHEMA_VERSION,
};
use hdrhistogram::Histogram;
use quinn::{Connection, Endpoint, RecvStream, SendStream, VarInt};
use tokio_util::sync::CancellationToken;

use super::{conn_error, filler, frame_due, get_varint, path_stats, read_batch, record};
use crate::own_runtime::OwnRuntime;
use crate::timer::PreciseTimer;
use crate::tls::Trust;
use crate::{EngineError, Observer};

/// What each connection does.
#[derive(Debug, Clone)]
pub enum QuicMode {
    /// A picoquic scenario.
    Scenario(Scenario),
    /// Upload for a time: a request for 0 bytes, then data until the time
    /// is up, then FIN.
    UploadFor(Duration),
    /// Download for a time: an unlimited request, STOP_SENDING when the
    /// time is up.
    DownloadFor(Duration),
    /// Keep `streams` requests outstanding per connection for the duration.
    Requests {
        /// Requests outstanding per connection.
        streams: u32,
        /// Request payload bytes (after the header).
        request: u64,
        /// Response bytes.
        response: u64,
    },
    /// Open and close connections as fast as possible for the duration.
    Handshakes,
}

/// How to run the client.
#[derive(Debug, Clone)]
pub struct QuicSpec {
    /// The server.
    pub target: SocketAddr,
    /// SNI and the name the certificate must carry.
    pub server_name: String,
    /// How the certificate is checked.
    pub trust: Trust,
    /// What each connection does.
    pub mode: QuicMode,
    /// Connections at once.
    pub connections: u32,
    /// Length of timed modes (requests, handshakes).
    pub duration: Duration,
    /// Ask for responses on unidirectional streams.
    pub uni: bool,
    /// The scenario as the user wrote it (for the report).
    pub scenario_text: Option<String>,
    /// Status interval.
    pub status_interval: Duration,
    /// Most records kept in the result document.
    pub max_records: usize,
    /// The largest UDP payload, both ways (default: path MTU discovery up
    /// to 6,500 bytes).
    pub max_mtu: Option<u16>,
}

/// Counters shared by every stream of the run.
#[derive(Default)]
struct Tally {
    up: AtomicU64,
    down: AtomicU64,
    ok: AtomicU64,
    failed: AtomicU64,
    open: AtomicU64,
    errors: Mutex<Vec<String>>,
    latency: Mutex<Option<Histogram<u64>>>,
    media: Mutex<HashMap<usize, MediaTally>>,
}

#[derive(Default, Clone, Copy)]
struct MediaTally {
    received: u64,
    expected: u64,
    min_us: f64,
    max_us: f64,
    sum_us: f64,
}

/// A stream in progress, counted in the status lines' In-Flight while it
/// lives.
struct InFlight<'a>(&'a AtomicU64);

impl<'a> InFlight<'a> {
    fn new(t: &'a Tally) -> Self {
        t.open.fetch_add(1, Relaxed);
        Self(&t.open)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Relaxed);
    }
}

impl Tally {
    /// The sum of several connections' tallies.
    fn merge(all: &[Arc<Tally>]) -> Tally {
        let t = Tally::default();
        for x in all {
            for (to, from) in [
                (&t.up, &x.up),
                (&t.down, &x.down),
                (&t.ok, &x.ok),
                (&t.failed, &x.failed),
            ] {
                to.fetch_add(from.load(Relaxed), Relaxed);
            }
            let mut errors = t.errors.lock().expect("not poisoned");
            for e in x.errors.lock().expect("not poisoned").iter() {
                if errors.len() < 20 {
                    errors.push(e.clone());
                }
            }
            if let Some(h) = x.latency.lock().expect("not poisoned").as_ref() {
                let mut l = t.latency.lock().expect("not poisoned");
                let l = l.get_or_insert_with(|| Histogram::new(3).expect("3 digits"));
                let _ = l.add(h);
            }
            let mut media = t.media.lock().expect("not poisoned");
            for (k, v) in x.media.lock().expect("not poisoned").iter() {
                let m = media.entry(*k).or_default();
                if v.received > 0 {
                    if m.received == 0 {
                        m.min_us = v.min_us;
                        m.max_us = v.max_us;
                    }
                    m.min_us = m.min_us.min(v.min_us);
                    m.max_us = m.max_us.max(v.max_us);
                }
                m.received += v.received;
                m.expected += v.expected;
                m.sum_us += v.sum_us;
            }
        }
        t
    }

    fn error(&self, e: String) {
        self.failed.fetch_add(1, Relaxed);
        let mut v = self.errors.lock().expect("not poisoned");
        if v.len() < 20 {
            v.push(e);
        }
    }
    fn latency(&self, d: Duration) {
        let mut h = self.latency.lock().expect("not poisoned");
        let h = h.get_or_insert_with(|| Histogram::new(3).expect("3 digits"));
        let _ = h.record(d.as_nanos() as u64);
    }
    fn frame(&self, desc: usize, delay_us: f64) {
        let mut m = self.media.lock().expect("not poisoned");
        let t = m.entry(desc).or_default();
        if t.received == 0 {
            t.min_us = delay_us;
            t.max_us = delay_us;
        }
        t.received += 1;
        t.min_us = t.min_us.min(delay_us);
        t.max_us = t.max_us.max(delay_us);
        t.sum_us += delay_us;
    }
    fn expect_frames(&self, desc: usize, n: u64) {
        self.media
            .lock()
            .expect("not poisoned")
            .entry(desc)
            .or_default()
            .expected += n;
    }
}

/// Runs the client and returns the result document.
pub async fn run_quic(
    spec: QuicSpec,
    observer: &mut dyn Observer,
    cancel: CancellationToken,
) -> Result<TestResult, EngineError> {
    if spec.connections == 0 {
        return Err(EngineError::Config("at least one connection is needed".into()));
    }
    let started_unix_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let max_streams = match &spec.mode {
        QuicMode::Requests { streams, .. } => (*streams).max(100),
        QuicMode::Scenario(s) => s.descs.iter().map(|d| d.repeat).sum::<u32>().max(100),
        _ => 100,
    };
    let cfg = super::client_config(&spec.trust, max_streams, spec.max_mtu)?;
    // The endpoint and the connections on a runtime of their own, a thread
    // per connection up to the cores (see `own_runtime`).
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let own = OwnRuntime::new("goodput-quic", (spec.connections as usize).min(cores))?;
    let bind: SocketAddr = if spec.target.is_ipv4() {
        (Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let sock = super::udp_socket(bind).map_err(|source| EngineError::Listen { addr: bind, source })?;
    // Made inside the own runtime, so its socket and driver live there.
    let mut endpoint = {
        let _inside = own.handle().enter();
        Endpoint::new(
            super::endpoint_config(spec.max_mtu),
            None,
            sock,
            Arc::new(quinn::TokioRuntime),
        )
    }
    .map_err(|source| EngineError::Listen { addr: bind, source })?;
    endpoint.set_default_client_config(cfg);
    let spec = Arc::new(spec);
    // One tally per connection, so each connection's record has only its
    // own streams; the run's figures are their sum.
    let tallies: Vec<Arc<Tally>> = (0..spec.connections)
        .map(|_| Arc::new(Tally::default()))
        .collect();
    let start = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    // One probe for the whole run, beside the handshakes.
    let (found, closed) = tokio::sync::watch::channel(None);
    let probe = {
        let target = spec.target;
        own.handle().spawn(async move {
            let reason = refused(target).await;
            let _ = found.send(Some(reason));
        })
    };
    let mut tasks = Vec::new();
    for index in 0..spec.connections {
        let tally = tallies[index as usize].clone();
        let (spec, endpoint, stop, closed) = (spec.clone(), endpoint.clone(), stop.clone(), closed.clone());
        tasks.push(own.handle().spawn(async move {
            one_connection(index as u64, &spec, &endpoint, &tally, &stop, start, &closed).await
        }));
    }
    // Status lines while the connections run.
    let mut ticker = tokio::time::interval_at(
        tokio::time::Instant::now() + spec.status_interval,
        spec.status_interval,
    );
    let mut intervals = Vec::new();
    let mut intervals_omitted = 0u64;
    let mut last = (0u64, 0u64, start);
    let mut interrupted = false;
    let all = futures_join(tasks);
    tokio::pin!(all);
    // The interval from the last one to `now`; `last` moves to `now`.
    let interval_to = |now: Instant, last: &mut (u64, u64, Instant)| {
        let sum = |f: fn(&Tally) -> &AtomicU64| tallies.iter().map(|t| f(t).load(Relaxed)).sum::<u64>();
        let (up, down) = (sum(|t| &t.up), sum(|t| &t.down));
        let dt = now.duration_since(last.2).as_secs_f64().max(1e-9);
        let iv = Interval {
            time_slice_s: now.duration_since(start).as_secs_f64(),
            send_bytes_per_second: (up.saturating_sub(last.0) as f64 / dt) as u64,
            recv_bytes_per_second: (down.saturating_sub(last.1) as f64 / dt) as u64,
            in_flight: sum(|t| &t.open),
            completed: sum(|t| &t.ok),
            network_errors: 0,
            data_errors: sum(|t| &t.failed),
            stamp: None,
            echo: None,
            media: None,
        };
        *last = (up, down, now);
        iv
    };
    let results = loop {
        tokio::select! {
            r = &mut all => {
                // The last, partial interval: its bytes belong to the run
                // (at loopback rates a millisecond holds megabytes), and it
                // carries the final counts.
                let iv = interval_to(Instant::now(), &mut last);
                observer.on_interval(&iv);
                if intervals.len() < spec.max_records {
                    intervals.push(iv);
                } else {
                    intervals_omitted += 1;
                }
                break r;
            }
            _ = ticker.tick() => {
                let iv = interval_to(Instant::now(), &mut last);
                observer.on_interval(&iv);
                if intervals.len() < spec.max_records {
                    intervals.push(iv);
                } else {
                    intervals_omitted += 1;
                }
            }
            _ = cancel.cancelled(), if !interrupted => {
                interrupted = true;
                stop.store(true, Relaxed);
                // Streams waiting on the network end with their connection.
                endpoint.close(VarInt::from_u32(error_code::NONE), b"interrupted");
            }
        }
    };
    probe.abort();
    let elapsed = start.elapsed();
    endpoint.close(VarInt::from_u32(error_code::NONE), b"done");
    let _ = tokio::time::timeout(Duration::from_secs(1), endpoint.wait_idle()).await;
    let mut connections_omitted = 0u64;
    let mut connections = Vec::new();
    let mut summary = SummaryBuilder::default();
    let mut handshakes = (0u64, 0u64);
    for r in results.into_iter().flatten() {
        observer.on_connection(&r.record);
        summary.add(&r.record);
        handshakes.0 += r.handshakes.0;
        handshakes.1 += r.handshakes.1;
        if connections.len() < spec.max_records {
            connections.push(r.record);
        } else {
            connections_omitted += 1;
        }
    }
    let tally = Tally::merge(&tallies);
    let secs = elapsed.as_secs_f64().max(1e-9);
    let (up, down, ok) = (
        tally.up.load(Relaxed),
        tally.down.load(Relaxed),
        tally.ok.load(Relaxed),
    );
    let latency = tally.latency.lock().expect("not poisoned").take();
    let percentiles = latency.as_ref().and_then(Percentiles::from_histogram);
    let media = match &spec.mode {
        QuicMode::Scenario(s) => {
            let m = tally.media.lock().expect("not poisoned");
            s.descs
                .iter()
                .enumerate()
                .filter(|(_, d)| matches!(d.body, Body::Media(_)))
                .map(|(i, d)| {
                    let t = m.get(&i).copied().unwrap_or_default();
                    QuicMediaStats {
                        id: d.id.clone().unwrap_or_else(|| format!("#{i}")),
                        received_frames: t.received,
                        expected_frames: t.expected,
                        delay_min_us: t.min_us,
                        delay_avg_us: if t.received == 0 {
                            0.0
                        } else {
                            t.sum_us / t.received as f64
                        },
                        delay_max_us: t.max_us,
                    }
                })
                .collect()
        }
        _ => Vec::new(),
    };
    let (mode, scenario) = match &spec.mode {
        QuicMode::Scenario(s) => ("scenario", Some(s.to_string())),
        QuicMode::UploadFor(_) => ("upload", None),
        QuicMode::DownloadFor(_) => ("download", None),
        QuicMode::Requests { streams: 1, .. } => ("latency", None),
        QuicMode::Requests { .. } => ("rps", None),
        QuicMode::Handshakes => ("handshakes", None),
    };
    let detail = QuicDetail {
        mode: mode.into(),
        scenario,
        legacy_scenario: match &spec.mode {
            QuicMode::Scenario(s) if s.legacy => spec.scenario_text.clone(),
            _ => None,
        },
        unidirectional: spec.uni,
        connections: u64::from(spec.connections),
        transactions: ok,
        failed_streams: tally.failed.load(Relaxed),
        upload_bytes: up,
        download_bytes: down,
        duration_s: secs,
        tps: ok as f64 / secs,
        upload_mbps: up as f64 * 8.0 / secs / 1e6,
        download_mbps: down as f64 * 8.0 / secs / 1e6,
        media,
        requests: match spec.mode {
            QuicMode::Requests {
                streams,
                request,
                response,
            } => Some(QuicRequestStats {
                streams,
                request_bytes: request,
                response_bytes: response,
                completed: ok,
                per_second: ok as f64 / spec.duration.as_secs_f64().max(1e-9),
                latency: percentiles,
            }),
            _ => None,
        },
        handshakes: matches!(spec.mode, QuicMode::Handshakes).then(|| QuicHandshakeStats {
            completed: handshakes.0,
            failed: handshakes.1,
            per_second: handshakes.0 as f64 / spec.duration.as_secs_f64().max(1e-9),
            time: percentiles,
        }),
        errors: tally.errors.lock().expect("not poisoned").clone(),
    };
    Ok(TestResult {
        spec: None,
        error: None,
        schema_version: SCHEMA_VERSION,
        tool: crate::tool_info(),
        kind: TestKind::QuicClient,
        started_unix_ms,
        settings: TcpSettings {
            connections: Some(u64::from(spec.connections)),
            ..TcpSettings::bare(
                WireProtocol::Quic,
                vec![spec.target.to_string()],
                spec.status_interval.as_millis() as u64,
            )
        },
        intervals,
        intervals_omitted,
        connections,
        summary: summary.finish(elapsed.as_nanos() as u64),
        connections_omitted,
        end: if interrupted {
            EndReason::Interrupted
        } else {
            EndReason::Completed
        },
        assertions: Vec::new(),
        detail: Detail::Quic(Box::new(detail)),
    })
}

async fn futures_join<T>(tasks: Vec<tokio::task::JoinHandle<T>>) -> Vec<Option<T>> {
    let mut out = Vec::with_capacity(tasks.len());
    for t in tasks {
        out.push(t.await.ok());
    }
    out
}

struct ConnEnd {
    record: ConnectionRecord,
    handshakes: (u64, u64),
}

/// A handshake within 10 s, or at once when the run's probe found the
/// port closed (as `udp` and `stamp` report one) rather than after the 10 s.
async fn connect(spec: &QuicSpec, endpoint: &Endpoint, closed: &Closed) -> Result<Connection, String> {
    let connecting = endpoint
        .connect(spec.target, &spec.server_name)
        .map_err(|e| format!("cannot start a connection to {}: {e}", spec.target))?;
    let handshake = async {
        match tokio::time::timeout(Duration::from_secs(10), connecting).await {
            Ok(Ok(c)) => Ok(c),
            Ok(Err(e)) => Err(format!("handshake with {} failed: {e}", spec.target)),
            Err(_) => Err(format!("no handshake with {} within 10 s", spec.target)),
        }
    };
    let mut closed = closed.clone();
    tokio::select! {
        r = handshake => r,
        Ok(e) = closed.wait_for(Option::is_some) => Err(e.clone().unwrap_or_default()),
    }
}

/// What the run's probe found: `Some(reason)` once the port is known closed.
type Closed = tokio::sync::watch::Receiver<Option<String>>;

/// Resolves only when nothing listens on `target`'s UDP port: a connected
/// socket sends a 1-byte datagram (too short to be a QUIC packet, so a
/// server drops it) up to three times, and the kernel reports the ICMP
/// port-unreachable that comes back as ECONNREFUSED.
async fn refused(target: SocketAddr) -> String {
    let said = || format!("nothing listens on UDP {target} (the port is unreachable)");
    let any: SocketAddr = if target.is_ipv4() {
        (Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (Ipv6Addr::UNSPECIFIED, 0).into()
    };
    if let Ok(s) = tokio::net::UdpSocket::bind(any).await {
        if s.connect(target).await.is_ok() {
            let mut buf = [0u8; 64];
            for _ in 0..3 {
                if let Err(e) = s.send(&[0]).await {
                    if e.kind() == std::io::ErrorKind::ConnectionRefused {
                        return said();
                    }
                }
                if let Ok(Err(e)) = tokio::time::timeout(Duration::from_millis(300), s.recv(&mut buf)).await {
                    if e.kind() == std::io::ErrorKind::ConnectionRefused {
                        return said();
                    }
                }
            }
        }
    }
    std::future::pending().await
}

async fn one_connection(
    index: u64,
    spec: &QuicSpec,
    endpoint: &Endpoint,
    tally: &Arc<Tally>,
    stop: &Arc<AtomicBool>,
    start: Instant,
    closed: &Closed,
) -> ConnEnd {
    let opened = Instant::now();
    let local = endpoint
        .local_addr()
        .map_or_else(|_| String::new(), |a| a.to_string());
    if let QuicMode::Handshakes = spec.mode {
        let (mut ok, mut failed) = (0, 0);
        let mut last_err = None;
        while opened.elapsed() < spec.duration && !stop.load(Relaxed) {
            let t0 = Instant::now();
            match connect(spec, endpoint, closed).await {
                Ok(c) => {
                    tally.latency(t0.elapsed());
                    c.close(VarInt::from_u32(error_code::NONE), b"");
                    ok += 1;
                }
                Err(e) => {
                    failed += 1;
                    last_err = Some(e);
                    if closed.borrow().is_some() {
                        // Nothing listens: more tries would only spin.
                        break;
                    }
                }
            }
        }
        let outcome = match (ok, last_err) {
            (0, Some(e)) => conn_error("handshake", e),
            _ => Outcome::Succeeded,
        };
        return ConnEnd {
            record: record(
                index,
                local,
                spec.target,
                (start, opened, Instant::now()),
                0,
                0,
                outcome,
            ),
            handshakes: (ok, failed),
        };
    }
    let conn = match connect(spec, endpoint, closed).await {
        Ok(c) => c,
        Err(e) => {
            tally.error(e.clone());
            return ConnEnd {
                record: record(
                    index,
                    local,
                    spec.target,
                    (start, opened, Instant::now()),
                    0,
                    0,
                    conn_error("handshake", e),
                ),
                handshakes: (0, 1),
            };
        }
    };
    let (up0, down0) = (tally.up.load(Relaxed), tally.down.load(Relaxed));
    let failed0 = tally.failed.load(Relaxed);
    let uni = spec.uni.then(|| UniReplies::start(&conn, tally));
    let datagrams = Arc::new(Datagrams::default());
    let dg_task = {
        let (conn, d) = (conn.clone(), datagrams.clone());
        tokio::spawn(async move { d.read_all(&conn).await })
    };
    match &spec.mode {
        QuicMode::Scenario(s) => run_scenario(&conn, s, &uni, tally, &datagrams).await,
        QuicMode::UploadFor(d) => {
            let r = timed_upload(&conn, *d, tally, stop).await;
            finish_stream(tally, r, None);
        }
        QuicMode::DownloadFor(d) => {
            let r = timed_download(&conn, *d, tally, stop).await;
            finish_stream(tally, r, None);
        }
        QuicMode::Requests {
            streams,
            request,
            response,
        } => {
            let mut workers = Vec::new();
            for _ in 0..*streams {
                let (conn, tally, stop) = (conn.clone(), tally.clone(), stop.clone());
                let (req, resp, dur, uni) = (*request, *response, spec.duration, uni.clone());
                workers.push(tokio::spawn(async move {
                    let t0 = Instant::now();
                    while t0.elapsed() < dur && !stop.load(Relaxed) {
                        let s = Instant::now();
                        let r = batch(
                            &conn,
                            req + HEADER_LEN as u64,
                            Response::Bytes(resp),
                            uni.as_deref(),
                            &tally,
                        )
                        .await;
                        let failed = r.is_err();
                        finish_stream(&tally, r, Some(s.elapsed()));
                        if failed && conn.close_reason().is_some() {
                            break;
                        }
                    }
                }));
            }
            for w in workers {
                let _ = w.await;
            }
        }
        QuicMode::Handshakes => unreachable!("handled above"),
    }
    let path = path_stats(&conn);
    let lost = conn.close_reason();
    conn.close(VarInt::from_u32(error_code::NONE), b"done");
    dg_task.abort();
    let failed = tally.failed.load(Relaxed) - failed0;
    let outcome = match lost {
        Some(e) if !matches!(e, quinn::ConnectionError::LocallyClosed) && !stop.load(Relaxed) => {
            conn_error("data", e)
        }
        _ if stop.load(Relaxed) => Outcome::Aborted {
            reason: "interrupted".into(),
        },
        _ if failed > 0 => Outcome::ProtocolError {
            kind: goodput_core::result::ProtocolErrorKind::NotAllData,
            direction: None,
            offset: None,
            expected: None,
            actual: None,
            message: format!("{failed} stream(s) failed; see the errors"),
        },
        _ => Outcome::Succeeded,
    };
    let (up, down) = (tally.up.load(Relaxed) - up0, tally.down.load(Relaxed) - down0);
    let mut record = record(
        index,
        local,
        spec.target,
        (start, opened, Instant::now()),
        up,
        down,
        outcome,
    );
    record.quic = Some(path);
    ConnEnd {
        record,
        handshakes: (1, 0),
    }
}

fn finish_stream(tally: &Tally, r: Result<(), String>, latency: Option<Duration>) {
    match r {
        Ok(()) => {
            tally.ok.fetch_add(1, Relaxed);
            if let Some(l) = latency {
                tally.latency(l);
            }
        }
        Err(e) => tally.error(e),
    }
}

/// Runs every description, each when its dependency has ended, its repeats
/// in parallel.
async fn run_scenario(
    conn: &Connection,
    s: &Scenario,
    uni: &Option<Arc<UniReplies>>,
    tally: &Arc<Tally>,
    datagrams: &Arc<Datagrams>,
) {
    let mut done: HashMap<String, tokio::sync::watch::Receiver<bool>> = HashMap::new();
    let mut tasks = Vec::new();
    for (i, d) in s.descs.iter().enumerate() {
        let (tx, rx) = tokio::sync::watch::channel(false);
        if let Some(id) = &d.id {
            done.insert(id.clone(), rx);
        }
        let wait = d.after.as_ref().and_then(|a| done.get(a).cloned());
        let (conn, tally, d, uni, datagrams) = (
            conn.clone(),
            tally.clone(),
            d.clone(),
            uni.clone(),
            datagrams.clone(),
        );
        tasks.push(tokio::spawn(async move {
            if let Some(mut w) = wait {
                let _ = w.wait_for(|v| *v).await;
            }
            let mut copies = Vec::new();
            for _ in 0..d.repeat {
                let (conn, tally, uni, datagrams) =
                    (conn.clone(), tally.clone(), uni.clone(), datagrams.clone());
                let body = d.body;
                copies.push(tokio::spawn(async move {
                    match body {
                        Body::Batch { post, response } => {
                            let r = batch(&conn, post, response, uni.as_deref(), &tally).await;
                            finish_stream(&tally, r, None);
                        }
                        Body::Media(m) => media(&conn, i, m, &tally, &datagrams).await,
                    }
                }));
            }
            for c in copies {
                let _ = c.await;
            }
            let _ = tx.send(true);
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
}

/// Writes `n` filler bytes.
async fn write_filler(send: &mut SendStream, mut n: u64, tally: &Tally) -> Result<(), String> {
    let fill = filler();
    while n > 0 {
        let k = n.min(fill.len() as u64) as usize;
        send.write_chunk(fill.slice(..k))
            .await
            .map_err(|e| format!("upload: {e}"))?;
        tally.up.fetch_add(k as u64, Relaxed);
        n -= k as u64;
    }
    Ok(())
}

/// Reads a response to its FIN (or, for `StopAfter`, until enough bytes)
/// and checks its length.
async fn read_response(recv: &mut RecvStream, response: Response, tally: &Tally) -> Result<(), String> {
    let mut got = 0u64;
    loop {
        match read_batch(recv).await {
            Ok(Some(k)) => {
                got += k;
                tally.down.fetch_add(k, Relaxed);
                if let Response::StopAfter(n) = response {
                    if got >= n {
                        let _ = recv.stop(VarInt::from_u32(error_code::NONE));
                        return Ok(());
                    }
                }
            }
            Ok(None) => break,
            Err(e) => return Err(format!("response after {got} bytes: {e}")),
        }
    }
    match response {
        Response::Bytes(n) if got == n => Ok(()),
        Response::Bytes(n) if got < n => Err(format!("response ended after {got} of {n} bytes (too few)")),
        Response::Bytes(n) => Err(format!("response of {got} bytes, {n} asked (too many)")),
        Response::StopAfter(n) => Err(format!("unlimited response ended after {got} bytes, before {n}")),
    }
}

/// One batch request: header + post − header bytes, FIN, then the response.
async fn batch(
    conn: &Connection,
    post: u64,
    response: Response,
    uni: Option<&UniReplies>,
    tally: &Tally,
) -> Result<(), String> {
    let _open = InFlight::new(tally);
    async {
        let size = match response {
            Response::Bytes(n) => n,
            Response::StopAfter(_) => UNLIMITED,
        };
        let mut header = Vec::with_capacity(HEADER_LEN);
        Request::Bytes(size).encode(&mut header);
        if let Some(replies) = uni {
            // Waiting before the request leaves, so its reply cannot come
            // back before anyone expects it.
            let reply = replies.expect(response);
            let mut send = conn.open_uni().await.map_err(|e| format!("open: {e}"))?;
            send.write_chunk(header.into())
                .await
                .map_err(|e| format!("request: {e}"))?;
            tally.up.fetch_add(HEADER_LEN as u64, Relaxed);
            write_filler(&mut send, post.saturating_sub(HEADER_LEN as u64), tally).await?;
            send.finish().map_err(|e| format!("finish: {e}"))?;
            let Some(reply) = reply else {
                // A size of 0: some servers answer with an empty stream,
                // others with none; the replies' reader takes either.
                return Ok(());
            };
            return tokio::select! {
                biased;
                r = reply => r.unwrap_or_else(|_| Err("the reply reader ended".into())),
                e = conn.closed() => Err(format!("response: {e}")),
            };
        }
        let (mut send, mut recv) = conn.open_bi().await.map_err(|e| format!("open: {e}"))?;
        send.write_chunk(header.into())
            .await
            .map_err(|e| format!("request: {e}"))?;
        tally.up.fetch_add(HEADER_LEN as u64, Relaxed);
        let up = async {
            write_filler(&mut send, post.saturating_sub(HEADER_LEN as u64), tally).await?;
            send.finish().map_err(|e| format!("finish: {e}"))
        };
        let (u, d) = tokio::join!(up, read_response(&mut recv, response, tally));
        u.and(d)
    }
    .await
}

/// Replies to unidirectional requests. Each comes on a stream the server
/// opens, and nothing on the wire ties it to its request; servers open
/// them in the order requests end, which is not the order a client sees
/// them begin. So a reply is matched by what it is: its length at its FIN
/// is that of the earliest outstanding request of that size; one that
/// outgrows every finite size asked is the earliest unlimited request's.
/// Empty streams answer size-0 requests, which some servers (quinn's)
/// answer that way, and others (as the draft reads) not at all.
struct UniReplies {
    waiting: Mutex<UniWaiting>,
    tally: Arc<Tally>,
}

type ReplyTx = tokio::sync::oneshot::Sender<Result<(), String>>;
type Reply = tokio::sync::oneshot::Receiver<Result<(), String>>;

/// Outstanding unidirectional requests by the size they asked for, each
/// size's oldest first. A request that gave up (its stream failed, or the
/// run ended) has dropped its receiver and is skipped wherever met.
#[derive(Default)]
struct UniWaiting {
    sized: std::collections::BTreeMap<u64, std::collections::VecDeque<ReplyTx>>,
    /// Unlimited requests, oldest first, with the bytes each stops after.
    unlimited: std::collections::VecDeque<(u64, ReplyTx)>,
    /// Size-0 requests sent, and empty reply streams seen.
    empty_asked: u64,
    empty_seen: u64,
}

impl UniWaiting {
    /// The oldest live request waiting for exactly `n` bytes.
    fn take_sized(&mut self, n: u64) -> Option<ReplyTx> {
        let q = self.sized.get_mut(&n)?;
        let found = std::iter::from_fn(|| q.pop_front()).find(|tx| !tx.is_closed());
        if q.is_empty() {
            self.sized.remove(&n);
        }
        found
    }

    /// The oldest live unlimited request, with the bytes it stops after.
    fn take_unlimited(&mut self) -> Option<(u64, ReplyTx)> {
        std::iter::from_fn(|| self.unlimited.pop_front()).find(|(_, tx)| !tx.is_closed())
    }

    /// The largest finite size a live request still waits for.
    fn largest(&mut self) -> Option<u64> {
        loop {
            let mut last = self.sized.last_entry()?;
            last.get_mut().retain(|tx| !tx.is_closed());
            if !last.get().is_empty() {
                return Some(*last.key());
            }
            last.remove();
        }
    }

    /// A reply of `got` bytes that fits no request: the request of the
    /// nearest size fails with it (the likeliest to be the one it
    /// answered, wrongly), so nothing waits for ever and the run reports
    /// the mismatch.
    fn unmatched(&mut self, got: u64, what: String) {
        let mut asked: Vec<String> = self
            .sized
            .iter()
            .filter(|(_, q)| !q.is_empty())
            .take(8)
            .map(|(n, q)| match q.len() {
                1 => format!("{n} B"),
                k => format!("{n} B ×{k}"),
            })
            .collect();
        if self.sized.len() > 8 {
            asked.push("…".into());
        }
        if !self.unlimited.is_empty() {
            asked.push(format!("unlimited ×{}", self.unlimited.len()));
        }
        let message = format!(
            "{what} matches no outstanding request (asked: {})",
            asked.join(", ")
        );
        let above = self.sized.range(got..).next().map(|(n, _)| *n);
        let below = self.sized.range(..got).next_back().map(|(n, _)| *n);
        let nearest = match (below, above) {
            (Some(b), Some(a)) if got - b <= a - got => Some(b),
            (_, Some(a)) => Some(a),
            (b, None) => b,
        };
        let tx = nearest
            .and_then(|n| self.take_sized(n))
            .or_else(|| self.take_unlimited().map(|(_, tx)| tx));
        if let Some(tx) = tx {
            let _ = tx.send(Err(message));
        }
    }
}

impl UniReplies {
    /// Starts reading every reply stream `conn`'s server opens.
    fn start(conn: &Connection, tally: &Arc<Tally>) -> Arc<Self> {
        let me = Arc::new(Self {
            waiting: Mutex::new(UniWaiting::default()),
            tally: tally.clone(),
        });
        let (conn, r) = (conn.clone(), me.clone());
        tokio::spawn(async move {
            while let Ok(recv) = conn.accept_uni().await {
                let r = r.clone();
                tokio::spawn(async move { r.read(recv).await });
            }
        });
        me
    }

    /// Registers a request for `response`; `None` for a size-0 request,
    /// which no reply has to end.
    fn expect(&self, response: Response) -> Option<Reply> {
        let mut w = self.waiting.lock().expect("not poisoned");
        if response == Response::Bytes(0) {
            w.empty_asked += 1;
            return None;
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        match response {
            Response::Bytes(n) => w.sized.entry(n).or_default().push_back(tx),
            Response::StopAfter(n) => w.unlimited.push_back((n, tx)),
        }
        Some(rx)
    }

    async fn read(&self, mut recv: RecvStream) {
        let mut got = 0u64;
        // Once the stream outgrows every finite size: the unlimited
        // request it answers, and the bytes that request stops after.
        let mut unlimited = None;
        let end = loop {
            match read_batch(&mut recv).await {
                Ok(Some(k)) => {
                    got += k;
                    self.tally.down.fetch_add(k, Relaxed);
                    if unlimited.is_none() {
                        let mut w = self.waiting.lock().expect("not poisoned");
                        if w.largest().is_none_or(|n| got > n) {
                            match w.take_unlimited() {
                                Some(u) => unlimited = Some(u),
                                None => {
                                    w.unmatched(got, format!("a reply stream of more than {got} bytes"));
                                    break None;
                                }
                            }
                        }
                    }
                    if let Some((n, _)) = &unlimited {
                        if got >= *n {
                            break Some(Ok(()));
                        }
                    }
                }
                Ok(None) => break Some(Err(None)),
                Err(e) => break Some(Err(Some(e))),
            }
        };
        if let Some((n, tx)) = unlimited {
            let r = match end {
                Some(Ok(())) => Ok(()),
                Some(Err(Some(e))) => Err(format!("response after {got} bytes: {e}")),
                _ => Err(format!("unlimited response ended after {got} bytes, before {n}")),
            };
            let _ = recv.stop(VarInt::from_u32(error_code::NONE));
            let _ = tx.send(r);
            return;
        }
        let mut w = self.waiting.lock().expect("not poisoned");
        match end {
            None => {
                let _ = recv.stop(VarInt::from_u32(error_code::NONE));
            }
            Some(Err(None)) if got == 0 && w.empty_seen < w.empty_asked => w.empty_seen += 1,
            Some(Err(None)) => match w.take_sized(got) {
                Some(tx) => {
                    let _ = tx.send(Ok(()));
                }
                None => w.unmatched(got, format!("a reply stream of {got} bytes")),
            },
            Some(Err(Some(e))) => {
                w.unmatched(got, format!("a reply stream that failed after {got} bytes ({e})"))
            }
            Some(Ok(())) => {}
        }
    }
}

async fn timed_upload(
    conn: &Connection,
    d: Duration,
    tally: &Tally,
    stop: &AtomicBool,
) -> Result<(), String> {
    let _open = InFlight::new(tally);
    let (mut send, mut recv) = conn.open_bi().await.map_err(|e| format!("open: {e}"))?;
    let mut header = Vec::new();
    Request::Bytes(0).encode(&mut header);
    send.write_chunk(header.into())
        .await
        .map_err(|e| format!("request: {e}"))?;
    tally.up.fetch_add(HEADER_LEN as u64, Relaxed);
    let fill = filler();
    let t0 = Instant::now();
    while t0.elapsed() < d && !stop.load(Relaxed) {
        send.write_chunk(fill.clone())
            .await
            .map_err(|e| format!("upload: {e}"))?;
        tally.up.fetch_add(fill.len() as u64, Relaxed);
    }
    send.finish().map_err(|e| format!("finish: {e}"))?;
    read_response(&mut recv, Response::Bytes(0), tally).await
}

async fn timed_download(
    conn: &Connection,
    d: Duration,
    tally: &Tally,
    stop: &AtomicBool,
) -> Result<(), String> {
    let _open = InFlight::new(tally);
    let (mut send, mut recv) = conn.open_bi().await.map_err(|e| format!("open: {e}"))?;
    let mut header = Vec::new();
    Request::Bytes(UNLIMITED).encode(&mut header);
    send.write_chunk(header.into())
        .await
        .map_err(|e| format!("request: {e}"))?;
    tally.up.fetch_add(HEADER_LEN as u64, Relaxed);
    send.finish().map_err(|e| format!("finish: {e}"))?;
    // One timer for the whole download, not one per read.
    let end = tokio::time::sleep(d);
    tokio::pin!(end);
    while !stop.load(Relaxed) {
        tokio::select! {
            r = read_batch(&mut recv) => match r {
                Ok(Some(k)) => {
                    tally.down.fetch_add(k, Relaxed);
                }
                Ok(None) => return Err("the server ended an unlimited response".into()),
                Err(e) => return Err(format!("download: {e}")),
            },
            _ = &mut end => break,
        }
    }
    let _ = recv.stop(VarInt::from_u32(error_code::NONE));
    Ok(())
}

/// DATAGRAM frames by the request stream they answer: frame numbers and
/// arrival times, kept only for the requests this client made and up to
/// the frames each asked for (the stream ids come from the server).
#[derive(Default)]
struct Datagrams {
    by_stream: Mutex<HashMap<u64, Expected>>,
}

/// One request's datagrams: the most it asked for, and the frame numbers
/// and arrival times of those that came.
type Expected = (usize, Vec<(u64, Instant)>);

impl Datagrams {
    async fn read_all(&self, conn: &Connection) {
        while let Ok(d) = conn.read_datagram().await {
            let now = Instant::now();
            let Some((stream, a)) = get_varint(&d) else {
                continue;
            };
            let Some((frame, _)) = get_varint(&d[a..]) else {
                continue;
            };
            if let Some((most, got)) = self.by_stream.lock().expect("not poisoned").get_mut(&stream) {
                if got.len() < *most {
                    got.push((frame, now));
                }
            }
        }
    }
    /// Datagrams for request `stream`, up to `frames` of them, are kept.
    fn expect(&self, stream: u64, frames: u32) {
        self.by_stream
            .lock()
            .expect("not poisoned")
            .insert(stream, (frames as usize, Vec::new()));
    }
    fn take(&self, stream: u64) -> Vec<(u64, Instant)> {
        self.by_stream
            .lock()
            .expect("not poisoned")
            .remove(&stream)
            .map(|(_, got)| got)
            .unwrap_or_default()
    }
}

/// A media description: one request per group, groups spaced by their
/// length; frames counted with their delay against the frame clock.
async fn media(conn: &Connection, desc: usize, m: MediaDesc, tally: &Tally, datagrams: &Datagrams) {
    let group = m.group.unwrap_or(m.frames).clamp(1, m.frames.max(1));
    let groups = m.frames.max(1).div_ceil(group);
    tally.expect_frames(desc, u64::from(m.frames.max(1)));
    let t0 = Instant::now();
    let timer = PreciseTimer::new();
    for g in 0..groups {
        timer.sleep_until(frame_due(t0, g * group, m.frequency)).await;
        let frames = group.min(m.frames.max(1) - g * group);
        let r = media_group(conn, desc, &m, frames, tally, datagrams).await;
        finish_stream(tally, r, None);
    }
}

async fn media_group(
    conn: &Connection,
    desc: usize,
    m: &MediaDesc,
    frames: u32,
    tally: &Tally,
    datagrams: &Datagrams,
) -> Result<(), String> {
    let _open = InFlight::new(tally);
    let (mut send, mut recv) = conn.open_bi().await.map_err(|e| format!("open: {e}"))?;
    let req = MediaRequest {
        datagram: m.datagram,
        frame_size: m.frame_size,
        priority: m.priority.unwrap_or(0),
        frequency: m.frequency,
        frames,
        first_frame_size: m.first_frame.unwrap_or(m.frame_size),
    };
    let mut header = Vec::with_capacity(MEDIA_HEADER_LEN);
    Request::Media(req).encode(&mut header);
    if m.datagram {
        datagrams.expect(u64::from(send.id()), frames);
    }
    let start = Instant::now();
    send.write_chunk(header.into())
        .await
        .map_err(|e| format!("request: {e}"))?;
    tally.up.fetch_add(MEDIA_HEADER_LEN as u64, Relaxed);
    send.finish().map_err(|e| format!("finish: {e}"))?;
    let expected = |k: u64| frame_due(start, u32::try_from(k).unwrap_or(u32::MAX), m.frequency);
    let delay_us = |k: u64, at: Instant| {
        let e = expected(k);
        if at >= e {
            at.duration_since(e).as_secs_f64() * 1e6
        } else {
            -(e.duration_since(at).as_secs_f64() * 1e6)
        }
    };
    if m.datagram {
        // The server ends the request stream after its last datagram.
        let mut rest = 0u64;
        while let Some(c) = recv
            .read_chunk(usize::MAX, true)
            .await
            .map_err(|e| format!("media: {e}"))?
        {
            rest += c.bytes.len() as u64;
        }
        // Datagrams may still be in the reader's hands for a moment.
        tokio::time::sleep(Duration::from_millis(20)).await;
        for (k, at) in datagrams.take(u64::from(send.id())) {
            tally.frame(desc, delay_us(k, at));
        }
        tally.down.fetch_add(rest, Relaxed);
        return Ok(());
    }
    // Stream frames: the first is first_frame_size bytes, the rest frame_size.
    let sizes = |k: u64| {
        u64::from(if k == 0 {
            req.first_frame_size.max(8)
        } else {
            req.frame_size.max(8)
        })
    };
    let (mut k, mut in_frame) = (0u64, 0u64);
    loop {
        let c = match recv.read_chunk(usize::MAX, true).await {
            Ok(Some(c)) => c,
            Ok(None) => break,
            Err(e) => return Err(format!("media frame {k}: {e}")),
        };
        let now = Instant::now();
        tally.down.fetch_add(c.bytes.len() as u64, Relaxed);
        let mut left = c.bytes.len() as u64;
        while left > 0 {
            let need = sizes(k) - in_frame;
            let take = need.min(left);
            in_frame += take;
            left -= take;
            if in_frame == sizes(k) {
                let d = delay_us(k, now);
                tally.frame(desc, d);
                if let Some(limit) = m.reset_delay_us {
                    if d > limit as f64 {
                        let _ = recv.stop(VarInt::from_u32(error_code::DELAY_TOO_HIGH));
                        return Err(format!(
                            "frame {k} was {d:.0} us late, over the {limit} us reset delay"
                        ));
                    }
                }
                k += 1;
                in_frame = 0;
            }
        }
    }
    if k == u64::from(frames) && in_frame == 0 {
        Ok(())
    } else {
        Err(format!("media stream ended after {k} of {frames} frames"))
    }
}
