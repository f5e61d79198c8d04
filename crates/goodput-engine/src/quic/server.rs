//! The QUIC perf server: for each client stream, read the request header,
//! drain the client's data to its FIN, then send exactly the requested
//! bytes and FIN — on the same stream for a bidirectional request, on a
//! new server stream for a unidirectional one (an empty one for size 0);
//! an unlimited request until the client's STOP_SENDING; picoquic media
//! requests as frames on the frame clock (stream or DATAGRAM frames), each
//! starting with the server's timestamp.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use goodput_core::quic::{error_code, MediaRequest, Request, HEADER_LEN, MEDIA_HEADER_LEN, UNLIMITED};
use goodput_core::result::{Outcome, QuicServerCounters};
use quinn::{Connection, RecvStream, SendStream, VarInt};
use tokio_util::sync::CancellationToken;

use super::{conn_error, filler, frame_due, path_stats, put_varint, read_batch, record};
use crate::tcp::RecordSink;
use crate::timer::PreciseTimer;
use crate::EngineError;

/// How to run the QUIC perf service.
#[derive(Debug, Clone)]
pub struct QuicServerSpec {
    /// Addresses to listen on (UDP; IPv6 sockets are v6-only).
    pub listen: Vec<SocketAddr>,
    /// PEM certificate chain and key (default: a generated ECDSA P-256
    /// self-signed certificate).
    pub cert_key: Option<(PathBuf, PathBuf)>,
    /// Most connections at once.
    pub max_connections: usize,
    /// Most connections at once from one client address.
    pub max_per_client: usize,
    /// Most concurrent streams per connection (each direction).
    pub max_streams: u32,
    /// Largest finite response one stream may ask for, bytes.
    pub max_response: u64,
    /// Answer every Initial from an address not yet validated with a Retry
    /// (RFC 9000 §8.1.2): a forged source gets one packet smaller than its
    /// own and the server keeps no state for it.
    pub retry: bool,
    /// Most connections in their handshake at once; further Initials are
    /// dropped unanswered until one finishes.
    pub max_handshakes: usize,
    /// The whole handshake must finish within this.
    pub handshake_timeout: Duration,
    /// The largest UDP payload, both ways (default: path MTU discovery up
    /// to 6,500 bytes).
    pub max_mtu: Option<u16>,
}

/// Streams a connection may open while in its handshake; raised to
/// `max_streams` once it is established. quinn keeps an entry for every
/// stream a peer may open (about 60 B per stream and direction), so a
/// handshake that never finishes costs kilobytes, not the megabyte a
/// 10,000-stream allowance costs.
const HANDSHAKE_STREAMS: u32 = 100;

#[derive(Default)]
struct Counters {
    connections: AtomicU64,
    refused_connections: AtomicU64,
    handshake_failures: AtomicU64,
    retries_sent: AtomicU64,
    dropped_initials: AtomicU64,
    handshake_timeouts: AtomicU64,
    internal_errors: AtomicU64,
    handshaking: AtomicUsize,
    streams: AtomicU64,
    short_requests: AtomicU64,
    refused_streams: AtomicU64,
    stopped: AtomicU64,
    media_streams: AtomicU64,
    datagrams_sent: AtomicU64,
    bytes_received: AtomicU64,
    bytes_sent: AtomicU64,
    open: AtomicUsize,
    per_client: std::sync::Mutex<std::collections::HashMap<std::net::IpAddr, usize>>,
}

impl Counters {
    /// Takes a connection slot for `ip`, if the limits allow.
    fn admit(&self, ip: std::net::IpAddr, spec: &QuicServerSpec) -> bool {
        let mut m = self.per_client.lock().expect("not poisoned");
        let n = m.entry(ip).or_insert(0);
        if *n >= spec.max_per_client || self.open.load(Relaxed) >= spec.max_connections {
            return false;
        }
        *n += 1;
        self.open.fetch_add(1, Relaxed);
        true
    }

    fn release(&self, ip: std::net::IpAddr) {
        let mut m = self.per_client.lock().expect("not poisoned");
        if let Some(n) = m.get_mut(&ip) {
            *n -= 1;
            if *n == 0 {
                m.remove(&ip);
            }
        }
        self.open.fetch_sub(1, Relaxed);
    }
}

/// A connection's place, given back however its task ends (a panic too).
struct Place {
    c: Arc<Counters>,
    ip: std::net::IpAddr,
    handshaking: bool,
    done: bool,
}

impl Place {
    /// The task ended without a panic: give the place back.
    fn finished(mut self) {
        self.done = true;
    }

    fn established(&mut self) {
        if std::mem::take(&mut self.handshaking) {
            self.c.handshaking.fetch_sub(1, Relaxed);
        }
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        self.established();
        if !self.done {
            self.c.internal_errors.fetch_add(1, Relaxed);
        }
        self.c.release(self.ip);
    }
}

/// The QUIC service with its endpoints bound.
pub struct BoundQuic {
    spec: QuicServerSpec,
    endpoints: Vec<quinn::Endpoint>,
    /// The configuration for an address not yet validated.
    unvalidated: Arc<quinn::ServerConfig>,
}

/// Binds the service's endpoints (a port in use is reported at start).
/// Needs a tokio runtime.
pub fn bind_quic(spec: QuicServerSpec) -> Result<BoundQuic, EngineError> {
    let streams = spec.max_streams.min(HANDSHAKE_STREAMS);
    let mut cfg = super::server_config(spec.cert_key.clone(), streams, super::IDLE_TIMEOUT, spec.max_mtu)?;
    // Initials waiting for the accept loop (which decides on each at once),
    // and the bytes they may buffer: quinn's defaults allow 65,536 and
    // 100 MiB; past the count quinn refuses them itself.
    cfg.max_incoming(spec.max_handshakes.clamp(4096, 1 << 16))
        .incoming_buffer_size(64 << 10)
        .incoming_buffer_size_total(16 << 20);
    // A connection from an address not yet validated (only without Retry)
    // may not outlive its handshake deadline by going silent: quinn ends it
    // quietly at the idle timeout, where closing it ourselves would send a
    // CONNECTION_CLOSE past the 3x anti-amplification budget, which quinn
    // does not count close packets against.
    let idle = spec
        .handshake_timeout
        .clamp(Duration::from_millis(100), super::IDLE_TIMEOUT);
    let unvalidated = Arc::new(super::server_config(
        spec.cert_key.clone(),
        streams,
        idle,
        spec.max_mtu,
    )?);
    let mut endpoints = Vec::new();
    for &addr in &spec.listen {
        let err = |source| EngineError::Listen { addr, source };
        let sock = super::udp_socket(addr).map_err(err)?;
        let ep = quinn::Endpoint::new(
            super::endpoint_config(spec.max_mtu),
            Some(cfg.clone()),
            sock,
            Arc::new(quinn::TokioRuntime),
        )
        .map_err(err)?;
        endpoints.push(ep);
    }
    Ok(BoundQuic {
        spec,
        endpoints,
        unvalidated,
    })
}

impl BoundQuic {
    /// The addresses actually bound.
    pub fn local_addrs(&self) -> Vec<SocketAddr> {
        self.endpoints
            .iter()
            .filter_map(|e| e.local_addr().ok())
            .collect()
    }

    /// Serves until `cancel`; returns what it did. Each connection is
    /// reported to `records` (the TCP server's run loop) where one is given.
    pub async fn run(self, cancel: CancellationToken, records: Option<RecordSink>) -> QuicServerCounters {
        // The TCP run loop reads records until this service has ended.
        let _held = records.as_ref().map(RecordSink::hold);
        let c = Arc::new(Counters::default());
        let spec = Arc::new(self.spec);
        let started = Instant::now();
        let conns = tokio_util::task::TaskTracker::new();
        let mut loops = Vec::new();
        for ep in &self.endpoints {
            let (ep, c, spec, cancel) = (ep.clone(), c.clone(), spec.clone(), cancel.clone());
            let unvalidated = self.unvalidated.clone();
            let (records, conns) = (records.clone(), conns.clone());
            let local = ep.local_addr().map_or_else(|_| String::new(), |a| a.to_string());
            loops.push(tokio::spawn(async move {
                loop {
                    let incoming = tokio::select! {
                        i = ep.accept() => match i { Some(i) => i, None => break },
                        _ = cancel.cancelled() => break,
                    };
                    if spec.retry && !incoming.remote_address_validated() {
                        if incoming.may_retry() {
                            match incoming.retry() {
                                Ok(()) => c.retries_sent.fetch_add(1, Relaxed),
                                Err(e) => {
                                    e.into_incoming().ignore();
                                    c.dropped_initials.fetch_add(1, Relaxed)
                                }
                            };
                        } else {
                            incoming.ignore();
                            c.dropped_initials.fetch_add(1, Relaxed);
                        }
                        continue;
                    }
                    if c.handshaking.load(Relaxed) >= spec.max_handshakes {
                        // No place even to refuse: say nothing.
                        incoming.ignore();
                        c.dropped_initials.fetch_add(1, Relaxed);
                        continue;
                    }
                    let ip = crate::socket::unmapped_ip(incoming.remote_address().ip());
                    if !c.admit(ip, &spec) {
                        c.refused_connections.fetch_add(1, Relaxed);
                        incoming.refuse();
                        continue;
                    }
                    c.handshaking.fetch_add(1, Relaxed);
                    let mut place = Place {
                        c: c.clone(),
                        ip,
                        handshaking: true,
                        done: false,
                    };
                    let (c, spec, cancel) = (c.clone(), spec.clone(), cancel.clone());
                    let (records, local, opened) = (records.clone(), local.clone(), Instant::now());
                    let (connecting, deadline) = if incoming.remote_address_validated() {
                        (incoming.accept(), spec.handshake_timeout)
                    } else {
                        // quinn's idle timeout ends it first, silently.
                        let late = spec.handshake_timeout + Duration::from_secs(1);
                        (incoming.accept_with(unvalidated.clone()), late)
                    };
                    conns.spawn(async move {
                        let conn = match connecting {
                            Ok(connecting) => tokio::time::timeout(deadline, connecting).await,
                            Err(e) => Ok(Err(e)),
                        };
                        place.established();
                        match conn {
                            Ok(Ok(conn)) => {
                                c.connections.fetch_add(1, Relaxed);
                                let streams = VarInt::from_u32(spec.max_streams);
                                conn.set_max_concurrent_bi_streams(streams);
                                conn.set_max_concurrent_uni_streams(streams);
                                let remote = conn.remote_address();
                                let index = records.as_ref().map(RecordSink::index);
                                let bytes = Arc::new(ConnBytes::default());
                                let ended = serve_connection(conn.clone(), &spec, &c, &bytes, &cancel).await;
                                if let (Some(r), Some(index)) = (&records, index) {
                                    let outcome = ending(conn.close_reason(), cancel.is_cancelled());
                                    let (sent, received) =
                                        (bytes.sent.load(Relaxed), bytes.received.load(Relaxed));
                                    let zero = r.zero().unwrap_or(started);
                                    let mut rec = record(
                                        index,
                                        local,
                                        remote,
                                        (zero, opened, ended),
                                        sent,
                                        received,
                                        outcome,
                                    );
                                    rec.quic = Some(path_stats(&conn));
                                    r.ended(rec);
                                }
                            }
                            Ok(Err(quinn::ConnectionError::TimedOut)) | Err(_) => {
                                c.handshake_timeouts.fetch_add(1, Relaxed);
                            }
                            Ok(Err(_)) => {
                                c.handshake_failures.fetch_add(1, Relaxed);
                            }
                        }
                        place.finished();
                    });
                }
            }));
        }
        for l in loops {
            let _ = l.await;
        }
        for ep in &self.endpoints {
            ep.close(VarInt::from_u32(error_code::NONE), b"server stopping");
        }
        // Each connection's task ends with its connection (and its record
        // is sent) once the close has gone out.
        conns.close();
        let _ = tokio::time::timeout(Duration::from_secs(2), conns.wait()).await;
        for ep in &self.endpoints {
            let _ = tokio::time::timeout(Duration::from_secs(1), ep.wait_idle()).await;
        }
        QuicServerCounters {
            connections: c.connections.load(Relaxed),
            refused_connections: c.refused_connections.load(Relaxed),
            handshake_failures: c.handshake_failures.load(Relaxed),
            retries_sent: c.retries_sent.load(Relaxed),
            dropped_initials: c.dropped_initials.load(Relaxed),
            handshake_timeouts: c.handshake_timeouts.load(Relaxed),
            internal_errors: c.internal_errors.load(Relaxed),
            streams: c.streams.load(Relaxed),
            short_requests: c.short_requests.load(Relaxed),
            refused_streams: c.refused_streams.load(Relaxed),
            stopped: c.stopped.load(Relaxed),
            media_streams: c.media_streams.load(Relaxed),
            datagrams_sent: c.datagrams_sent.load(Relaxed),
            bytes_received: c.bytes_received.load(Relaxed),
            bytes_sent: c.bytes_sent.load(Relaxed),
        }
    }
}

/// Bytes one connection moved, for its record.
#[derive(Default)]
struct ConnBytes {
    sent: AtomicU64,
    received: AtomicU64,
}

/// How a connection ended, as its record says: a close without an error
/// is a success; one the server's stop made, an abort; anything else (an
/// idle timeout: the client vanished) a network error.
fn ending(reason: Option<quinn::ConnectionError>, stopping: bool) -> Outcome {
    use quinn::ConnectionError as E;
    match reason {
        Some(E::ApplicationClosed(a)) if a.error_code == VarInt::from_u32(error_code::NONE) => {
            Outcome::Succeeded
        }
        Some(E::ConnectionClosed(c)) if c.error_code == quinn::TransportErrorCode::NO_ERROR => {
            Outcome::Succeeded
        }
        Some(E::LocallyClosed) | None if stopping => Outcome::Aborted {
            reason: "server stopping".into(),
        },
        Some(e) => conn_error("data", e),
        None => Outcome::Succeeded,
    }
}

async fn serve_connection(
    conn: Connection,
    spec: &Arc<QuicServerSpec>,
    c: &Arc<Counters>,
    bytes: &Arc<ConnBytes>,
    cancel: &CancellationToken,
) -> Instant {
    // The connection's streams run in tasks of their own and add to its
    // bytes; they end with it, and are waited for before its record.
    let tracker = tokio_util::task::TaskTracker::new();
    loop {
        tokio::select! {
            s = conn.accept_bi() => match s {
                Ok((send, recv)) => {
                    let (conn, spec, c, b) = (conn.clone(), spec.clone(), c.clone(), bytes.clone());
                    tracker.spawn(async move { serve_stream(&conn, Some(send), recv, &spec, &c, &b).await });
                }
                Err(_) => break,
            },
            s = conn.accept_uni() => match s {
                Ok(recv) => {
                    let (conn, spec, c, b) = (conn.clone(), spec.clone(), c.clone(), bytes.clone());
                    tracker.spawn(async move { serve_stream(&conn, None, recv, &spec, &c, &b).await });
                }
                Err(_) => break,
            },
            _ = cancel.cancelled() => {
                conn.close(VarInt::from_u32(error_code::NONE), b"server stopping");
                break;
            }
        }
    }
    let ended = Instant::now();
    tracker.close();
    let _ = tokio::time::timeout(Duration::from_secs(1), tracker.wait()).await;
    ended
}

/// Reads the header; `None` when the stream ended inside it.
async fn read_request(recv: &mut RecvStream) -> Option<Request> {
    let mut h = [0u8; MEDIA_HEADER_LEN];
    recv.read_exact(&mut h[..HEADER_LEN]).await.ok()?;
    let first: [u8; HEADER_LEN] = h[..HEADER_LEN].try_into().ok()?;
    if Request::header_len(&first) == MEDIA_HEADER_LEN {
        recv.read_exact(&mut h[HEADER_LEN..]).await.ok()?;
    }
    Request::decode(&h).ok()
}

async fn serve_stream(
    conn: &Connection,
    send: Option<SendStream>,
    mut recv: RecvStream,
    spec: &QuicServerSpec,
    c: &Counters,
    b: &ConnBytes,
) {
    c.streams.fetch_add(1, Relaxed);
    let Some(req) = read_request(&mut recv).await else {
        // Ended before the header was complete: close our side cleanly.
        c.short_requests.fetch_add(1, Relaxed);
        if let Some(mut s) = send {
            let _ = s.finish();
        }
        return;
    };
    // Drain the upload up to the FIN (the header counts, as picoquic counts).
    let mut drained = match req {
        Request::Bytes(_) => HEADER_LEN as u64,
        Request::Media(_) => MEDIA_HEADER_LEN as u64,
    };
    loop {
        match read_batch(&mut recv).await {
            Ok(Some(k)) => drained += k,
            Ok(None) => break,
            Err(_) => {
                c.bytes_received.fetch_add(drained, Relaxed);
                b.received.fetch_add(drained, Relaxed);
                return;
            }
        }
    }
    c.bytes_received.fetch_add(drained, Relaxed);
    b.received.fetch_add(drained, Relaxed);
    let send = match send {
        Some(s) => s,
        None => {
            // A unidirectional request, answered on a new stream; a size
            // of 0 too, with an empty one, as quinn's server does and its
            // client waits for (a client of ours takes either).
            match conn.open_uni().await {
                Ok(s) => s,
                Err(_) => return,
            }
        }
    };
    match req {
        Request::Bytes(n) => respond(send, n, spec, c, b).await,
        Request::Media(m) => {
            c.media_streams.fetch_add(1, Relaxed);
            media(conn, send, m, c, b).await
        }
    }
}

async fn respond(mut send: SendStream, n: u64, spec: &QuicServerSpec, c: &Counters, b: &ConnBytes) {
    if n != UNLIMITED && n > spec.max_response {
        c.refused_streams.fetch_add(1, Relaxed);
        let _ = send.reset(VarInt::from_u32(error_code::INTERNAL));
        return;
    }
    let fill = filler();
    let mut left = n;
    while left > 0 {
        let k = left.min(fill.len() as u64) as usize;
        match send.write_chunk(fill.slice(..k)).await {
            Ok(()) => {
                c.bytes_sent.fetch_add(k as u64, Relaxed);
                b.sent.fetch_add(k as u64, Relaxed);
                if n != UNLIMITED {
                    left -= k as u64;
                }
            }
            Err(quinn::WriteError::Stopped(_)) => return stopped(send, c),
            // An unlimited response ends only when the client says so: a
            // client that closes its connection right after its
            // STOP_SENDING (before the frame has left) stopped it too.
            Err(quinn::WriteError::ConnectionLost(quinn::ConnectionError::ApplicationClosed(a)))
                if n == UNLIMITED && a.error_code == VarInt::from_u32(error_code::NONE) =>
            {
                c.stopped.fetch_add(1, Relaxed);
                return;
            }
            Err(_) => return,
        }
    }
    finish(send, c).await;
}

/// Ends a response and waits for the client to take it all. A client may
/// stop a stream after its last byte was written (an unlimited response
/// it has seen enough of, a reply it no longer wants): that is counted as
/// stopped too, not only a write the stop refused.
async fn finish(mut send: SendStream, c: &Counters) {
    let _ = send.finish();
    if let Ok(Some(_)) = send.stopped().await {
        c.stopped.fetch_add(1, Relaxed);
    }
}

fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// picoquic media: frame k at start + k/frequency, each starting with the
/// server's time in microseconds.
async fn media(conn: &Connection, mut send: SendStream, m: MediaRequest, c: &Counters, b: &ConnBytes) {
    let start = Instant::now();
    let frames = m.frames.max(1);
    // The request's stream ID as on the wire (picoquic matches datagrams
    // by it), not quinn's per-kind index: they agree only for stream 0.
    let stream_id = u64::from(send.id());
    let timer = PreciseTimer::new();
    for k in 0..frames {
        // A connection that ends ends its media too (datagrams would
        // otherwise go on failing to the last frame).
        tokio::select! {
            biased;
            _ = conn.closed() => return,
            () = timer.sleep_until(frame_due(start, k, m.frequency)) => {}
        }
        let size = if k == 0 {
            m.first_frame_size.max(8)
        } else {
            m.frame_size.max(8)
        } as usize;
        if m.datagram {
            let max = conn.max_datagram_size().unwrap_or(0).min(1024);
            let mut d = Vec::with_capacity(size.min(max));
            put_varint(&mut d, stream_id);
            put_varint(&mut d, u64::from(k));
            d.extend_from_slice(&now_us().to_be_bytes());
            let target = size.min(max).max(d.len());
            d.resize(target, 0xAA);
            let len = d.len() as u64;
            match conn.send_datagram(d.into()) {
                Ok(()) => {
                    c.datagrams_sent.fetch_add(1, Relaxed);
                    c.bytes_sent.fetch_add(len, Relaxed);
                    b.sent.fetch_add(len, Relaxed);
                }
                Err(quinn::SendDatagramError::ConnectionLost(_)) => return,
                Err(_) => {}
            }
            continue;
        }
        let mut frame = Vec::with_capacity(size);
        frame.extend_from_slice(&now_us().to_be_bytes());
        frame.resize(size, b'0');
        match send.write_chunk(frame.into()).await {
            Ok(()) => {
                c.bytes_sent.fetch_add(size as u64, Relaxed);
                b.sent.fetch_add(size as u64, Relaxed);
            }
            Err(quinn::WriteError::Stopped(_)) => return stopped(send, c),
            Err(_) => return,
        }
    }
    finish(send, c).await;
}

/// The client stopped the stream: count it and reset with picoquic's code.
fn stopped(mut send: SendStream, c: &Counters) {
    c.stopped.fetch_add(1, Relaxed);
    let _ = send.reset(VarInt::from_u32(error_code::STOPPED));
}
