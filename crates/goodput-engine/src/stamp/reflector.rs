//! The STAMP Session-Reflector: one blocking thread per listening socket,
//! `recvmmsg` in, `sendmmsg` out, T2 from the kernel's receive timestamp and
//! T3 stamped just before the send call.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use goodput_core::result::StampReflectorCounters;
use goodput_core::stamp::{self, Cidr, ReflectInput, ReflectorPacket, MAX_PACKET_LEN, MIN_REQUEST_LEN};
use socket2::{Domain, Protocol, Socket, Type};
use tokio_util::sync::CancellationToken;

use crate::datagram::{self as msg, RecvBatch, SendBatch, SocketThreads};
use crate::EngineError;

/// Datagrams per `recvmmsg` / `sendmmsg`.
const BATCH: usize = 32;
/// Most per-source entries (rate limiter, stateful sessions) kept at once.
const MAX_TRACKED: usize = 65_536;

/// How to run a reflector.
#[derive(Debug, Clone)]
pub struct ReflectorSpec {
    /// Addresses to listen on (IPv6 sockets are v6-only).
    pub listen: Vec<SocketAddr>,
    /// Keep a sequence counter per session (RFC 8762 stateful mode).
    pub stateful: bool,
    /// Sources allowed (empty = any).
    pub allow: Vec<Cidr>,
    /// Requests per second accepted from one source address (0 = no limit;
    /// a source may burst one second's worth).
    pub per_source_rate: u32,
    /// Answer 14..43-octet TWAMP-Light requests with the full 44-octet base
    /// packet (RFC 8762 §4.6) instead of a reply of their own length. Off
    /// by default, so no source gets more bytes than it sent.
    pub pad_short: bool,
    /// A stateful session idle this long is forgotten.
    pub session_timeout: Duration,
}

/// A reflector with its sockets bound.
pub struct BoundReflector {
    spec: ReflectorSpec,
    sockets: Vec<Socket>,
}

/// Binds the reflector's sockets (so a port in use is reported at start).
pub fn bind_reflector(spec: ReflectorSpec) -> Result<BoundReflector, EngineError> {
    let mut sockets = Vec::new();
    for &addr in &spec.listen {
        let listen_err = |source| EngineError::Listen { addr, source };
        let s =
            Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP)).map_err(listen_err)?;
        if addr.is_ipv6() {
            s.set_only_v6(true).map_err(listen_err)?;
        }
        s.bind(&addr.into()).map_err(listen_err)?;
        msg::enable_ancillary(s.as_raw_fd(), addr.is_ipv6(), true).map_err(listen_err)?;
        msg::set_ttl(s.as_raw_fd(), addr.is_ipv6(), stamp::SEND_TTL).map_err(listen_err)?;
        // A deep receive queue rides out bursts while a batch is answered.
        let _ = s.set_recv_buffer_size(4 << 20);
        // Wake every 100 ms to see whether the run was cancelled.
        s.set_read_timeout(Some(Duration::from_millis(100)))
            .map_err(listen_err)?;
        sockets.push(s);
    }
    Ok(BoundReflector { spec, sockets })
}

impl BoundReflector {
    /// The addresses actually bound (port 0 resolved).
    pub fn local_addrs(&self) -> Vec<SocketAddr> {
        crate::datagram::bound_addrs(&self.sockets)
    }

    /// Starts one thread per socket, reflecting until `cancel`.
    pub fn start(self, cancel: CancellationToken) -> RunningReflector {
        RunningReflector(SocketThreads::spawn(
            "stamp-reflector",
            self.sockets,
            self.spec,
            &cancel,
            serve,
        ))
    }

    /// Reflects until `cancel`; returns the counters of all sockets.
    pub async fn run(self, cancel: CancellationToken) -> StampReflectorCounters {
        self.start(cancel).wait().await
    }
}

/// A reflector whose threads are running.
pub struct RunningReflector(SocketThreads<StampReflectorCounters>);

impl RunningReflector {
    /// Waits for the threads to stop (after the cancel) and adds up their counters.
    pub async fn wait(self) -> StampReflectorCounters {
        self.0.wait(add).await
    }
}

fn add(t: &mut StampReflectorCounters, c: &StampReflectorCounters) {
    t.received += c.received;
    t.internal_errors += c.internal_errors;
    t.reflected += c.reflected;
    t.short_answered += c.short_answered;
    t.too_short += c.too_short;
    t.oversized += c.oversized;
    t.denied += c.denied;
    t.rate_limited += c.rate_limited;
    t.malformed_tlvs += c.malformed_tlvs;
    t.send_errors += c.send_errors;
    t.sessions += c.sessions;
}

/// A token bucket per source address.
struct RateLimiter {
    rate: f64,
    buckets: HashMap<IpAddr, (f64, Instant)>,
}

impl RateLimiter {
    fn allow(&mut self, ip: IpAddr, now: Instant) -> bool {
        if self.rate <= 0.0 {
            return true;
        }
        if self.buckets.len() >= MAX_TRACKED && !self.buckets.contains_key(&ip) {
            // Forget sources idle for a second (their buckets are full anyway).
            self.buckets
                .retain(|_, (_, t)| now.duration_since(*t) < Duration::from_secs(1));
            if self.buckets.len() >= MAX_TRACKED {
                return false;
            }
        }
        let rate = self.rate;
        let (tokens, last) = self.buckets.entry(ip).or_insert((rate, now));
        *tokens = (*tokens + now.duration_since(*last).as_secs_f64() * rate).min(rate);
        *last = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// Stateful mode: a counter per (source, local address, SSID).
type SessionKey = (SocketAddr, Option<IpAddr>, u16);

fn serve(sock: Socket, spec: &ReflectorSpec, cancel: &CancellationToken) -> StampReflectorCounters {
    let fd = sock.as_raw_fd();
    let mut c = StampReflectorCounters::default();
    let mut rx = RecvBatch::new(BATCH, MAX_PACKET_LEN);
    let mut tx = SendBatch::new(BATCH);
    let mut limiter = RateLimiter {
        rate: f64::from(spec.per_source_rate),
        buckets: HashMap::new(),
    };
    let mut sessions: HashMap<SessionKey, (u32, Instant)> = HashMap::new();
    let mut error = msg::clock_error();
    let mut error_at = Instant::now();
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    while !cancel.is_cancelled() {
        // SAFETY: one pollfd for a socket we own.
        let ready = unsafe { libc::poll(&mut pfd, 1, 100) };
        if ready <= 0 {
            continue;
        }
        let n = match rx.recv(fd) {
            Ok(n) => n,
            Err(_) => {
                std::thread::sleep(Duration::from_millis(1));
                continue;
            }
        };
        let now = Instant::now();
        if now.duration_since(error_at) > Duration::from_secs(1) {
            error = msg::clock_error();
            error_at = now;
        }
        for i in 0..n {
            let (req, meta) = rx.get(i);
            c.received += 1;
            if meta.truncated {
                // Longer than any reply we may send: no symmetric answer.
                c.oversized += 1;
                continue;
            }
            if req.len() < MIN_REQUEST_LEN {
                c.too_short += 1;
                continue;
            }
            let src_ip = crate::socket::unmapped_ip(meta.src.ip());
            if !spec.allow.is_empty() && !spec.allow.iter().any(|a| a.contains(src_ip)) {
                c.denied += 1;
                continue;
            }
            if !limiter.allow(src_ip, now) {
                c.rate_limited += 1;
                continue;
            }
            if req.len() < stamp::BASE_LEN {
                c.short_answered += 1;
            }
            let seq = if spec.stateful {
                let ssid = if req.len() >= 16 {
                    u16::from_be_bytes([req[14], req[15]])
                } else {
                    0
                };
                Some(next_session_seq(
                    &mut sessions,
                    (meta.src, meta.dst.map(|d| d.0), ssid),
                    now,
                    spec,
                    &mut c,
                ))
            } else {
                None
            };
            let input = ReflectInput {
                t2_unix_ns: meta.t_ns.unwrap_or_else(msg::now_unix_ns),
                ttl: meta.ttl.unwrap_or(0),
                seq,
                error,
                pad_short: spec.pad_short,
            };
            // A bug in reflecting one packet must not end the reflector.
            let buf = tx.next_buf();
            let reflected =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| stamp::reflect(req, &input, buf)));
            let Ok(reflected) = reflected else {
                c.internal_errors += 1;
                continue;
            };
            let Some((len, tlv)) = reflected else {
                c.too_short += 1;
                continue;
            };
            if tlv.malformed {
                c.malformed_tlvs += 1;
            }
            tx.push(len, meta.src, meta.dst);
            if tx.is_full() {
                flush(&mut tx, fd, &mut c);
            }
        }
        if tx.len() > 0 {
            flush(&mut tx, fd, &mut c);
        }
    }
    c
}

fn flush(tx: &mut SendBatch, fd: i32, c: &mut StampReflectorCounters) {
    let queued = tx.len() as u64;
    let t3 = stamp::ntp_from_unix_ns(msg::now_unix_ns());
    let failed = tx.flush(fd, |p| ReflectorPacket::set_timestamp(p, t3)) as u64;
    c.reflected += queued - failed;
    c.send_errors += failed;
}

fn next_session_seq(
    sessions: &mut HashMap<SessionKey, (u32, Instant)>,
    key: SessionKey,
    now: Instant,
    spec: &ReflectorSpec,
    c: &mut StampReflectorCounters,
) -> u32 {
    if sessions.len() >= MAX_TRACKED && !sessions.contains_key(&key) {
        sessions.retain(|_, (_, t)| now.duration_since(*t) < spec.session_timeout);
        if sessions.len() >= MAX_TRACKED {
            // Still full of live sessions: drop the oldest half's state.
            let mut ages: Vec<Instant> = sessions.values().map(|v| v.1).collect();
            ages.sort_unstable();
            let cut = ages[ages.len() / 2];
            sessions.retain(|_, (_, t)| *t > cut);
        }
    }
    let e = sessions.entry(key).or_insert_with(|| {
        c.sessions += 1;
        (0, now)
    });
    if now.duration_since(e.1) > spec.session_timeout {
        *e = (0, now);
        c.sessions += 1;
    }
    let seq = e.0;
    e.0 = e.0.wrapping_add(1);
    e.1 = now;
    seq
}
