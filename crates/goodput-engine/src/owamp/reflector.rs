//! The TWAMP Session-Reflector of one accepted session (twampd's part): a
//! UDP socket of its own that answers only the session's sender, with its
//! own sequence numbers, T2 from the kernel's receive timestamp and T3
//! taken just before the send.

use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use goodput_core::owamp::crypto::TestKeys;
use goodput_core::owamp::packet::{self, ReflectorFields};
use goodput_core::owamp::Mode;
use goodput_core::stamp::ntp_from_unix_ns;
use tokio::io::Interest;
use tokio::net::UdpSocket;
use tokio_util::sync::CancellationToken;

use super::endpoint::MAX_TEST_PACKET;
use crate::datagram as msg;

/// One accepted TWAMP session as its reflector needs it.
pub(crate) struct ReflectorSession {
    /// The socket the session's Accept-Session named (a test socket:
    /// TTL 255, the session's DSCP, kernel timestamps and TTLs).
    pub socket: UdpSocket,
    /// The mode of the control connection.
    pub mode: Mode,
    /// The session's test keys (authenticated and encrypted modes).
    pub keys: Option<TestKeys>,
    /// The only source answered; port 0 until the first valid packet
    /// names it (a sender behind NAT announces none).
    pub sender: SocketAddr,
    /// Bits per second answered at most (0: no limit), with a burst of
    /// one second's worth.
    pub max_bits_per_second: u64,
    /// The session ends after this long without a packet from its sender.
    pub idle: Duration,
}

/// What a reflector did.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ReflectorTally {
    /// Replies sent.
    pub reflected: u64,
    /// Datagrams not answered.
    pub ignored: u64,
}

/// Drops, unanswered, what waited in the session's socket before
/// Start-Sessions; returns how many datagrams. Called before the Start-Ack
/// goes out, so nothing the sender sends after it is taken for early.
pub(crate) fn drain(s: &ReflectorSession) -> u64 {
    let mut buf = [0u8; 64];
    let mut n = 0;
    // Bounded: the socket's receive buffer holds only so much, but a
    // sender flooding it must not keep the control task here.
    while n < 100_000 {
        match msg::recv_one(s.socket.as_raw_fd(), &mut buf) {
            Ok(Some(_)) => n += 1,
            _ => break,
        }
    }
    n
}

/// Datagrams taken per `recvmmsg`, and replies sent at most in one send.
const BATCH: usize = 32;

/// The most octets one UDP GSO send carries (the IP payload limit, less
/// the UDP header, with room to spare).
const GSO_MAX_BYTES: usize = 65_000;

/// Replies waiting for one send: of one length, to one destination, laid
/// end to end so that one UDP GSO send carries them all (the kernel cuts
/// them into datagrams), or one `sendmmsg` where GSO is refused.
struct Pending {
    buf: Vec<u8>,
    /// Each reply's length.
    seg: usize,
    count: usize,
    to: SocketAddr,
    /// Cleared for good the first time the kernel refuses a GSO send.
    gso: bool,
    /// Where T3 is written in each reply just before the send.
    t3_at: Option<usize>,
    /// Set once the socket is connected to `to`: the kernel then keeps
    /// the route, and sends name no address.
    connected: bool,
}

impl Pending {
    fn new(mode: Mode) -> Self {
        Self {
            buf: vec![0; BATCH * (MAX_TEST_PACKET + 1)],
            seg: 0,
            count: 0,
            to: SocketAddr::from(([0, 0, 0, 0], 0)),
            gso: true,
            t3_at: packet::reflector_timestamp_at(mode),
            connected: false,
        }
    }

    /// Whether a reply of `len` octets to `to` can join the waiting ones.
    fn fits(&self, len: usize, to: SocketAddr) -> bool {
        self.count == 0
            || (self.seg == len
                && self.to == to
                && self.count < BATCH
                && (self.count + 1) * len <= GSO_MAX_BYTES)
    }

    /// The buffer for the next reply of `len` octets to `to`; call
    /// [`Pending::push`] to keep it. Only after [`Pending::fits`].
    fn next(&mut self, len: usize, to: SocketAddr) -> &mut [u8] {
        self.seg = len;
        self.to = to;
        &mut self.buf[self.count * len..(self.count + 1) * len]
    }

    fn push(&mut self) {
        self.count += 1;
    }

    /// Writes T3 into every waiting reply and sends them; adds what went
    /// and what the kernel refused to `tally`.
    fn flush(&mut self, fd: std::os::fd::RawFd, tally: &mut ReflectorTally) {
        if self.count == 0 {
            return;
        }
        let (seg, count) = (self.seg, self.count);
        self.count = 0;
        let bytes = &mut self.buf[..seg * count];
        if let Some(at) = self.t3_at {
            let t3 = ntp_from_unix_ns(msg::now_unix_ns()).to_be_bytes();
            for reply in bytes.chunks_exact_mut(seg) {
                reply[at..at + 8].copy_from_slice(&t3);
            }
        }
        let to = (!self.connected).then_some(self.to);
        let mut sent = msg::send_segments(fd, to, None, bytes, seg, self.gso);
        if self.gso && matches!(&sent, Err(e) if e.kind() == std::io::ErrorKind::Unsupported) {
            self.gso = false;
            sent = msg::send_segments(fd, to, None, bytes, seg, false);
        }
        let sent = sent.map_or(0, |b| b.taken.min(count)) as u64;
        tally.reflected += sent;
        tally.ignored += count as u64 - sent;
    }
}

/// Reflects until `cancel` or until the sender has been silent for the
/// session's idle time. Datagrams come in by `recvmmsg`; the replies to a
/// batch leave together (one UDP GSO send when they are alike, as they
/// are when the sender keeps one padding), T3 written into each just
/// before the send.
pub(crate) async fn reflect(mut s: ReflectorSession, cancel: CancellationToken) -> ReflectorTally {
    let mut tally = ReflectorTally::default();
    let mut rx = msg::RecvBatch::new(BATCH, MAX_TEST_PACKET + 1);
    let mut tx = Pending::new(s.mode);
    let mut buf = vec![0u8; MAX_TEST_PACKET + 1];
    let fd = s.socket.as_raw_fd();
    let rate = s.max_bits_per_second as f64;
    let mut tokens = rate;
    let mut filled = Instant::now();
    let mut last_heard = Instant::now();
    let mut seq: u32 = 0;
    let mut error = msg::clock_error().to_u16();
    let mut error_at = Instant::now();
    let t3_later = tx.t3_at.is_some();
    loop {
        let idle_left = s.idle.saturating_sub(last_heard.elapsed());
        if idle_left.is_zero() {
            break;
        }
        tokio::select! {
            _ = cancel.cancelled() => break,
            _ = tokio::time::sleep(idle_left) => continue,
            r = s.socket.readable() => if r.is_err() { break },
        }
        loop {
            // Through try_io, so that "nothing waiting" clears readiness.
            let got = s.socket.try_io(Interest::READABLE, || match rx.recv(fd) {
                Ok(0) => Err(std::io::ErrorKind::WouldBlock.into()),
                other => other,
            });
            let n = match got {
                Ok(n) => n,
                // Nothing waiting, or an ICMP error queued by an earlier
                // send: back to waiting.
                Err(_) => break,
            };
            // One clock reading per batch for the idle timer and the
            // token bucket; T2 is the kernel's, T3 written at the send.
            let batch_at = Instant::now();
            if error_at.elapsed() > Duration::from_secs(1) {
                error = msg::clock_error().to_u16();
                error_at = batch_at;
            }
            for i in 0..n {
                let (req, meta) = rx.get(i);
                let src = SocketAddr::new(crate::socket::unmapped_ip(meta.src.ip()), meta.src.port());
                let from_sender =
                    src.ip() == s.sender.ip() && (s.sender.port() == 0 || s.sender.port() == src.port());
                if !from_sender || meta.truncated || meta.len > MAX_TEST_PACKET {
                    tally.ignored += 1;
                    continue;
                }
                let len_in = meta.len;
                buf[..len_in].copy_from_slice(req);
                let Some(f) = packet::read_sender(s.mode, s.keys.as_ref(), &mut buf[..len_in]) else {
                    tally.ignored += 1;
                    continue;
                };
                last_heard = batch_at;
                if s.sender.port() == 0 {
                    s.sender.set_port(src.port());
                }
                if !tx.connected {
                    // From here on only the sender's datagrams reach the
                    // socket, and replies take the route the kernel keeps.
                    tx.flush(fd, &mut tally);
                    tx.connected = socket2::SockRef::from(&s.socket)
                        .connect(&meta.src.into())
                        .is_ok();
                }
                let len = packet::reflected_len(s.mode, len_in);
                if rate > 0.0 {
                    tokens =
                        (tokens + batch_at.saturating_duration_since(filled).as_secs_f64() * rate).min(rate);
                    filled = filled.max(batch_at);
                    let bits = (len as f64 + 28.0) * 8.0;
                    if tokens < bits {
                        tally.ignored += 1;
                        continue;
                    }
                    tokens -= bits;
                }
                let t2 = ntp_from_unix_ns(meta.t_ns.unwrap_or_else(msg::now_unix_ns));
                if !tx.fits(len, src) {
                    tx.flush(fd, &mut tally);
                }
                let h = packet::reflector_header(s.mode);
                let out = tx.next(len, src);
                // The sender's padding past our header keeps its place, so
                // the answer ends where the request did.
                if len_in > h {
                    out[h..len_in].copy_from_slice(&buf[h..len_in]);
                }
                let fields = ReflectorFields {
                    seq,
                    // Written at the send where it is in the clear.
                    timestamp: if t3_later {
                        0
                    } else {
                        ntp_from_unix_ns(msg::now_unix_ns())
                    },
                    error,
                    receive_timestamp: t2,
                    sender_seq: f.seq,
                    sender_timestamp: f.timestamp,
                    sender_error: f.error,
                    sender_ttl: meta.ttl.unwrap_or(0),
                };
                if !packet::write_reflector(s.mode, s.keys.as_ref(), &fields, out) {
                    tally.ignored += 1;
                    continue;
                }
                tx.push();
                seq = seq.wrapping_add(1);
            }
            tx.flush(fd, &mut tally);
            if n < BATCH {
                break;
            }
        }
    }
    tally
}
