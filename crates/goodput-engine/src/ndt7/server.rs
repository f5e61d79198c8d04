//! The ndt7 server: WebSocket upgrades at `/ndt/v7/download` and
//! `/ndt/v7/upload`, ten seconds of random binary messages to the client
//! or from it, and a measurement (the server's `TCP_INFO`) every quarter
//! second.
//!
//! Open to any browser, so held on every side: subtests at once in total
//! and per client address (the engine's [`Admission`]), new subtests per
//! address per minute (a token bucket), an upgrade deadline, a message
//! size cap, and a hard end to every subtest five seconds past its length
//! whatever the client does (one that never reads, one that never
//! closes). A subtest's memory is its WebSocket's buffers, each bounded
//! by the message cap.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use goodput_core::ndt7::{
    next_message_size, AppInfo, ConnectionInfo, Measurement, Ndt7ServerCounters, Ndt7ServerTest, Origin,
    Subtest, SubtestFigures, FIRST_MESSAGE, MAX_KEPT_TESTS, MAX_MESSAGE, MEASUREMENT_EVERY_US, SUBPROTOCOL,
};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::tungstenite::error::ProtocolError;
use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tokio_tungstenite::tungstenite::http::{HeaderValue, StatusCode};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::admission::{Admission, AdmissionLimits, Admits, Slot};
use crate::EngineError;

/// What holds the ndt7 service.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ndt7Limits {
    /// Subtests at once.
    pub max_tests: u64,
    /// Subtests at once from one client address.
    pub max_per_client: u64,
    /// New subtests one client address may start in a minute.
    pub per_minute: u32,
    /// How long a subtest sends; it is ended at this plus five seconds.
    pub length: Duration,
    /// Largest WebSocket message taken (and sent), bytes.
    pub max_message: usize,
    /// Deadline of the WebSocket upgrade.
    pub handshake_timeout: Duration,
}

impl Default for Ndt7Limits {
    fn default() -> Self {
        Self {
            max_tests: 16,
            max_per_client: 2,
            per_minute: 12,
            length: Duration::from_secs(10),
            max_message: MAX_MESSAGE,
            handshake_timeout: Duration::from_secs(5),
        }
    }
}

impl Ndt7Limits {
    /// The time past `length` after which a subtest is ended anyway.
    pub const GRACE: Duration = Duration::from_secs(5);

    /// The most memory the running subtests' WebSocket buffers may hold:
    /// per subtest, a message being read and one being written.
    pub fn memory_bound(&self) -> u64 {
        self.max_tests
            .saturating_mul(2 * self.max_message as u64 + (512 << 10))
    }
}

/// Who gets each finished subtest (the agent keeps it as a run).
pub type TestSink = Arc<dyn Fn(Ndt7ServerTest) + Send + Sync>;

/// The most client addresses the per-minute rate remembers; past it, an
/// address not yet known is refused until some bucket is full again.
const MAX_TRACKED: usize = 65_536;

/// New subtests per client address per minute, as token buckets.
struct RateGate {
    per_minute: f64,
    buckets: Mutex<HashMap<IpAddr, (f64, Instant)>>,
}

impl RateGate {
    fn new(per_minute: u32) -> Self {
        Self {
            per_minute: f64::from(per_minute.max(1)),
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Takes a token of `ip`'s bucket; false when it has none.
    fn allow(&self, ip: IpAddr, now: Instant) -> bool {
        let full = self.per_minute;
        let refill = |(tokens, at): (f64, Instant)| -> f64 {
            (tokens + now.saturating_duration_since(at).as_secs_f64() * full / 60.0).min(full)
        };
        let mut b = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        if b.len() >= MAX_TRACKED && !b.contains_key(&ip) {
            // A full bucket says nothing a new one would not: forget those.
            b.retain(|_, v| refill(*v) < full);
            if b.len() >= MAX_TRACKED {
                return false;
            }
        }
        let e = b.entry(ip).or_insert((full, now));
        let tokens = refill(*e);
        if tokens >= 1.0 {
            *e = (tokens - 1.0, now);
            true
        } else {
            *e = (tokens, now);
            false
        }
    }
}

#[derive(Default)]
struct Counts {
    downloads: AtomicU64,
    uploads: AtomicU64,
    broken: AtomicU64,
    refused_busy: AtomicU64,
    refused_per_client: AtomicU64,
    refused_rate: AtomicU64,
    bad_requests: AtomicU64,
    handshake_timeouts: AtomicU64,
    hard_capped: AtomicU64,
    oversized_messages: AtomicU64,
    bytes_sent: AtomicU64,
    bytes_received: AtomicU64,
}

/// The service's shared state: its admission, rate, counters and the
/// random payload every download sends slices of.
struct Ctx {
    admission: Arc<Admission>,
    limits: Ndt7Limits,
    rate: RateGate,
    counts: Counts,
    kept: Mutex<(Vec<Ndt7ServerTest>, u64)>,
    payload: Bytes,
    sink: Option<TestSink>,
    cancel: CancellationToken,
}

impl Admits for Ctx {
    fn admission(&self) -> &Admission {
        &self.admission
    }

    /// Subtests still running at shutdown are dropped unfinished; only one
    /// dropped before that is a panic.
    fn on_abandoned(&self, _peer: SocketAddr) {
        if !self.cancel.is_cancelled() {
            self.admission.count_internal_error();
        }
    }
}

impl Ctx {
    fn counters(&self) -> Ndt7ServerCounters {
        let c = &self.counts;
        let (tests, omitted) = {
            let k = self.kept.lock().unwrap_or_else(|e| e.into_inner());
            (k.0.clone(), k.1)
        };
        Ndt7ServerCounters {
            downloads: c.downloads.load(Relaxed),
            uploads: c.uploads.load(Relaxed),
            broken: c.broken.load(Relaxed),
            refused_busy: c.refused_busy.load(Relaxed),
            refused_per_client: c.refused_per_client.load(Relaxed),
            refused_rate: c.refused_rate.load(Relaxed),
            bad_requests: c.bad_requests.load(Relaxed),
            handshake_timeouts: c.handshake_timeouts.load(Relaxed),
            hard_capped: c.hard_capped.load(Relaxed),
            oversized_messages: c.oversized_messages.load(Relaxed),
            bytes_sent: c.bytes_sent.load(Relaxed),
            bytes_received: c.bytes_received.load(Relaxed),
            tests,
            tests_omitted: omitted,
        }
    }

    fn keep(&self, t: Ndt7ServerTest) {
        if let Some(sink) = &self.sink {
            sink(t.clone());
        }
        let mut k = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        if k.0.len() < MAX_KEPT_TESTS {
            k.0.push(t);
        } else {
            k.1 += 1;
        }
    }
}

/// The ndt7 service's bound listeners.
pub struct BoundNdt7 {
    listeners: Vec<TcpListener>,
    limits: Ndt7Limits,
}

/// Binds the ndt7 service on `listen` (TCP).
pub fn bind_ndt7(listen: &[SocketAddr], limits: Ndt7Limits) -> Result<BoundNdt7, EngineError> {
    let mut listeners = Vec::with_capacity(listen.len());
    for &addr in listen {
        let l = crate::socket::tcp_listener(addr, false, addr.is_ipv6(), 1024)
            .map_err(|source| EngineError::Listen { addr, source })?;
        listeners.push(TcpListener::from_std(l).map_err(|source| EngineError::Listen { addr, source })?);
    }
    Ok(BoundNdt7 { listeners, limits })
}

impl BoundNdt7 {
    /// The addresses listened on (with the ports the kernel chose).
    pub fn local_addrs(&self) -> Vec<SocketAddr> {
        self.listeners
            .iter()
            .filter_map(|l| l.local_addr().ok())
            .collect()
    }

    /// Serves until `cancel`; each finished subtest goes to `sink`.
    pub async fn run(self, cancel: CancellationToken, sink: Option<TestSink>) -> Ndt7ServerCounters {
        let l = self.limits;
        let admission = Admission::new(AdmissionLimits {
            max_connections: l.max_tests,
            max_per_client: l.max_per_client,
            // Upgrades under way, and refusals being told: a few per place.
            max_pending: l.max_tests.saturating_mul(4).max(64),
            max_pending_per_client: l.max_per_client.saturating_mul(4).max(8),
        });
        let mut payload = vec![0u8; l.max_message.min(MAX_MESSAGE)];
        rand::RngCore::fill_bytes(&mut rand::thread_rng(), &mut payload);
        let ctx = Arc::new(Ctx {
            admission,
            limits: l,
            rate: RateGate::new(l.per_minute),
            counts: Counts::default(),
            kept: Mutex::new((Vec::new(), 0)),
            payload: Bytes::from(payload),
            sink,
            cancel: cancel.clone(),
        });
        let tracker = TaskTracker::new();
        for listener in self.listeners {
            let (ctx, cancel, tasks) = (ctx.clone(), cancel.clone(), tracker.clone());
            tracker.spawn(async move {
                loop {
                    let (stream, peer) = tokio::select! {
                        _ = cancel.cancelled() => break,
                        r = listener.accept() => match r {
                            Ok(a) => a,
                            // Out of descriptors or memory for a moment:
                            // wait rather than spin.
                            Err(_) => {
                                tokio::time::sleep(Duration::from_millis(50)).await;
                                continue;
                            }
                        },
                    };
                    let peer = SocketAddr::new(crate::socket::unmapped_ip(peer.ip()), peer.port());
                    match Slot::admit(&ctx, peer) {
                        Some(slot) => {
                            tasks.spawn(serve(slot, stream, cancel.clone()));
                        }
                        None => {
                            ctx.counts.refused_busy.fetch_add(1, Relaxed);
                            let _ = crate::socket::set_rude_close(&stream);
                        }
                    }
                }
            });
        }
        tracker.close();
        tracker.wait().await;
        ctx.counters()
    }
}

/// Tells a refused client why, within a second, and closes.
async fn refuse(mut stream: TcpStream, status: &str, why: &str) {
    let text = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{why}",
        why.len()
    );
    let _ = tokio::time::timeout(Duration::from_secs(1), stream.write_all(text.as_bytes())).await;
}

async fn serve(slot: Slot<Ctx>, stream: TcpStream, cancel: CancellationToken) {
    let ctx = slot.ctx();
    let peer = slot.peer();
    if let Some(r) = slot.refusal() {
        let counter = match r {
            crate::admission::Refusal::Total => &ctx.counts.refused_busy,
            crate::admission::Refusal::PerClient => &ctx.counts.refused_per_client,
        };
        counter.fetch_add(1, Relaxed);
        refuse(
            stream,
            "503 Service Unavailable",
            &r.reason(ctx.admission.limits(), peer.ip()),
        )
        .await;
        slot.finish();
        return;
    }
    if !ctx.rate.allow(peer.ip(), Instant::now()) {
        ctx.counts.refused_rate.fetch_add(1, Relaxed);
        let why = format!(
            "{} started more than {} ndt7 subtests in a minute",
            peer.ip(),
            ctx.limits.per_minute
        );
        refuse(stream, "429 Too Many Requests", &why).await;
        slot.finish();
        return;
    }
    let fd = stream.as_raw_fd();
    let local = stream.local_addr().ok().map(crate::socket::addr_text);
    let mut asked: Option<Subtest> = None;
    // The callback's shape is tungstenite's: its error is an HTTP answer.
    #[allow(clippy::result_large_err)]
    let check = |req: &Request, mut resp: Response| -> Result<Response, ErrorResponse> {
        let bad = |why: &str| {
            let mut r = ErrorResponse::new(Some(why.to_owned()));
            *r.status_mut() = StatusCode::BAD_REQUEST;
            r
        };
        let Some(which) = Subtest::of_path(req.uri().path()) else {
            return Err(bad("ndt7 answers only /ndt/v7/download and /ndt/v7/upload"));
        };
        let offered = req
            .headers()
            .get_all("sec-websocket-protocol")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|p| p.trim() == SUBPROTOCOL);
        if !offered {
            return Err(bad(
                "the WebSocket subprotocol net.measurementlab.ndt.v7 is required",
            ));
        }
        resp.headers_mut()
            .insert("sec-websocket-protocol", HeaderValue::from_static(SUBPROTOCOL));
        asked = Some(which);
        Ok(resp)
    };
    let config = super::ws_config(ctx.limits.max_message);
    let upgraded = tokio::time::timeout(
        ctx.limits.handshake_timeout,
        tokio_tungstenite::accept_hdr_async_with_config(stream, check, Some(config)),
    )
    .await;
    let ws = match upgraded {
        Err(_) => {
            ctx.counts.handshake_timeouts.fetch_add(1, Relaxed);
            slot.finish();
            return;
        }
        Ok(Err(_)) => {
            ctx.counts.bad_requests.fetch_add(1, Relaxed);
            slot.finish();
            return;
        }
        Ok(Ok(ws)) => ws,
    };
    slot.hello_done();
    let Some(which) = asked else {
        ctx.counts.bad_requests.fetch_add(1, Relaxed);
        slot.finish();
        return;
    };
    let info = ConnectionInfo {
        client: crate::socket::addr_text(peer),
        server: local.unwrap_or_default(),
        uuid: uuid::Uuid::new_v4().to_string(),
    };
    let test = subtest(ctx, ws, which, fd, info, &cancel).await;
    ctx.keep(test);
    slot.finish();
}

/// How a subtest's reading side ended.
enum ReadEnd {
    /// The client closed, or the connection ended.
    Closed,
    /// A message past the cap, or a binary message during a download.
    Violation,
    /// The connection ended without a closing handshake (a client that
    /// dropped it once done, or one that went away).
    Gone,
    /// A protocol error of the connection.
    Broken,
}

async fn subtest(
    ctx: &Ctx,
    ws: tokio_tungstenite::WebSocketStream<TcpStream>,
    which: Subtest,
    fd: std::os::fd::RawFd,
    info: ConnectionInfo,
    cancel: &CancellationToken,
) -> Ndt7ServerTest {
    let l = ctx.limits;
    let client = info.client.clone();
    let start = Instant::now();
    let micros = move || start.elapsed().as_micros().min(i64::MAX as u128) as i64;
    let moved = AtomicU64::new(0);
    let last_byte_us = AtomicU64::new(0);
    let (mut tx, mut rx) = ws.split();
    let measurement = |first: bool| {
        let n = moved.load(Relaxed);
        Measurement {
            app_info: Some(AppInfo {
                elapsed_us: micros(),
                num_bytes: n.min(i64::MAX as u64) as i64,
            }),
            connection_info: first.then(|| info.clone()),
            origin: Some(Origin::Server),
            test: Some(which),
            tcp_info: super::read_tcp_info(fd, micros()),
        }
        .to_text()
    };
    let every = Duration::from_micros(MEASUREMENT_EVERY_US);
    let writer = async {
        let mut next = start;
        let mut first = true;
        let mut size = FIRST_MESSAGE.min(ctx.payload.len());
        while start.elapsed() < l.length {
            if Instant::now() >= next {
                tx.send(Message::text(measurement(first))).await?;
                first = false;
                next += every;
            }
            match which {
                Subtest::Download => {
                    tx.send(Message::Binary(ctx.payload.slice(..size))).await?;
                    let total = moved.fetch_add(size as u64, Relaxed) + size as u64;
                    last_byte_us.store(micros() as u64, Relaxed);
                    size = next_message_size(size, total, ctx.payload.len());
                }
                Subtest::Upload => {
                    let until = next.min(start + l.length);
                    tokio::time::sleep_until(until.into()).await;
                }
            }
        }
        tx.send(Message::text(measurement(first))).await?;
        // The client may answer the Close before its flush returns; the
        // subtest is done either way.
        let _ = tx
            .send(Message::Close(Some(CloseFrame {
                code: CloseCode::Normal,
                reason: "".into(),
            })))
            .await;
        Ok::<(), WsError>(())
    };
    let reader = async {
        while let Some(m) = rx.next().await {
            match m {
                Ok(Message::Binary(b)) => match which {
                    // What arrives past the length is not counted: the
                    // last measurement told the client the final count.
                    Subtest::Upload if start.elapsed() < l.length => {
                        moved.fetch_add(b.len() as u64, Relaxed);
                        last_byte_us.store(micros() as u64, Relaxed);
                    }
                    Subtest::Upload => {}
                    // ndt7 is half duplex: a binary message against the
                    // flow ends the subtest.
                    Subtest::Download => return ReadEnd::Violation,
                },
                // A client's own measurements: read and let go.
                Ok(Message::Text(_) | Message::Ping(_) | Message::Pong(_) | Message::Frame(_)) => {}
                Ok(Message::Close(_)) => return ReadEnd::Closed,
                Err(WsError::Capacity(_)) => return ReadEnd::Violation,
                Err(WsError::ConnectionClosed | WsError::AlreadyClosed) => return ReadEnd::Closed,
                Err(WsError::Io(_) | WsError::Protocol(ProtocolError::ResetWithoutClosingHandshake)) => {
                    return ReadEnd::Gone
                }
                Err(_) => return ReadEnd::Broken,
            }
        }
        ReadEnd::Closed
    };
    tokio::pin!(writer, reader);
    let hard = tokio::time::sleep(l.length + Ndt7Limits::GRACE);
    tokio::pin!(hard);
    // After the server's Close, a second for the client's.
    let closing = tokio::time::sleep(Duration::from_secs(3600));
    tokio::pin!(closing);
    let (mut written, mut read, mut capped) = (None, None, false);
    loop {
        tokio::select! {
            w = &mut writer, if written.is_none() => {
                written = Some(w.is_ok());
                closing.as_mut().reset((Instant::now() + Duration::from_secs(1)).into());
                if read.is_some() {
                    break;
                }
            }
            r = &mut reader, if read.is_none() => {
                let end = matches!(r, ReadEnd::Closed | ReadEnd::Gone);
                if matches!(r, ReadEnd::Violation) {
                    ctx.counts.oversized_messages.fetch_add(1, Relaxed);
                }
                read = Some(r);
                // A client that closed early, or broke the rules, is done.
                if written.is_some() || !end || start.elapsed() < l.length {
                    break;
                }
            }
            _ = &mut closing, if written.is_some() => break,
            _ = &mut hard => {
                ctx.counts.hard_capped.fetch_add(1, Relaxed);
                capped = true;
                break;
            }
            _ = cancel.cancelled() => break,
        }
    }
    // Run to its length: the server's side finished, or the client closed
    // once its own ten seconds were (nearly) up, as ndt7's clients do
    // at the end of an upload.
    let ran = written == Some(true) || (which == Subtest::Upload && start.elapsed() >= l.length.mul_f64(0.9));
    let completed = ran && !capped && !matches!(read, Some(ReadEnd::Violation | ReadEnd::Broken));
    let bytes = moved.load(Relaxed);
    let seconds = last_byte_us.load(Relaxed) as f64 / 1e6;
    let tcp = super::read_tcp_info(fd, micros());
    let mut figures = SubtestFigures::new(bytes, seconds, tcp.as_ref());
    figures.from_server = true;
    match which {
        Subtest::Download => {
            ctx.counts.bytes_sent.fetch_add(bytes, Relaxed);
        }
        Subtest::Upload => {
            ctx.counts.bytes_received.fetch_add(bytes, Relaxed);
            // The server only acknowledged: the client's TCP retransmitted.
            figures.retransmission_pct = None;
            figures.retransmitted_segments = None;
        }
    }
    let counter = match (completed, which) {
        (false, _) => &ctx.counts.broken,
        (true, Subtest::Download) => &ctx.counts.downloads,
        (true, Subtest::Upload) => &ctx.counts.uploads,
    };
    counter.fetch_add(1, Relaxed);
    Ndt7ServerTest {
        client,
        subtest: which,
        figures,
        completed,
    }
}

/// A subtest the server ran as the result of an ndt7 run (a browser's
/// test the agent keeps): its spec names `server` (the service's base
/// URL) and the one subtest, its detail holds the server's figures, and
/// the client's address.
pub fn test_result(
    t: &Ndt7ServerTest,
    server: &str,
    started_unix_ms: u64,
) -> goodput_core::result::TestResult {
    use goodput_core::result::{Detail, EndReason, FailureStage, RunFailure};
    let spec = goodput_core::spec::Ndt7Spec {
        url: Some(server.to_owned()),
        download: t.subtest == Subtest::Download,
        upload: t.subtest == Subtest::Upload,
        ..goodput_core::spec::Ndt7Spec::default()
    };
    let whole = goodput_core::spec::TestSpec::Ndt7(spec);
    let ns = (t.figures.seconds.max(0.0) * 1e9) as u64;
    let mut r = crate::run::empty(&whole, started_unix_ms, ns);
    let mut detail = goodput_core::ndt7::Ndt7Detail {
        server: server.to_owned(),
        client_address: Some(t.client.clone()),
        ..Default::default()
    };
    match t.subtest {
        Subtest::Download => detail.download = Some(t.figures),
        Subtest::Upload => detail.upload = Some(t.figures),
    }
    r.detail = Detail::Ndt7(Box::new(detail));
    if !t.completed {
        r.end = EndReason::Failed;
        r.error = Some(RunFailure {
            stage: FailureStage::Test,
            message: format!("the {} subtest broke off", t.subtest.name()),
        });
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_gate_allows_a_burst_then_refills_by_the_minute() {
        let g = RateGate::new(3);
        let ip: IpAddr = [10, 0, 0, 1].into();
        let t0 = Instant::now();
        assert!((0..3).all(|_| g.allow(ip, t0)));
        assert!(!g.allow(ip, t0), "the fourth in the same instant");
        assert!(g.allow([10, 0, 0, 2].into(), t0), "another address has its own");
        assert!(
            g.allow(ip, t0 + Duration::from_secs(20)),
            "a token back after 20 s"
        );
        assert!(!g.allow(ip, t0 + Duration::from_secs(21)));
    }

    #[test]
    fn the_memory_bound_counts_two_messages_a_subtest() {
        let l = Ndt7Limits {
            max_tests: 4,
            max_message: 1 << 20,
            ..Ndt7Limits::default()
        };
        assert_eq!(l.memory_bound(), 4 * ((2 << 20) + (512 << 10)));
    }
}
