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

/// Reflects until `cancel` or until the sender has been silent for the
/// session's idle time.
pub(crate) async fn reflect(mut s: ReflectorSession, cancel: CancellationToken) -> ReflectorTally {
    let mut tally = ReflectorTally::default();
    // One octet more than the largest packet taken, so a longer one shows.
    let mut buf = vec![0u8; MAX_TEST_PACKET + 1];
    let mut out = vec![0u8; MAX_TEST_PACKET + 1];
    let fd = s.socket.as_raw_fd();
    let rate = s.max_bits_per_second as f64;
    let mut tokens = rate;
    let mut filled = Instant::now();
    let mut last_heard = Instant::now();
    let mut seq: u32 = 0;
    let mut error = msg::clock_error().to_u16();
    let mut error_at = Instant::now();
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
            let got = s
                .socket
                .try_io(Interest::READABLE, || match msg::recv_one(fd, &mut buf) {
                    Ok(Some(m)) => Ok(m),
                    Ok(None) => Err(std::io::ErrorKind::WouldBlock.into()),
                    Err(e) => Err(e),
                });
            let meta = match got {
                Ok(m) => m,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                // An ICMP error queued by an earlier send, say: go on.
                Err(_) => break,
            };
            let src = SocketAddr::new(crate::socket::unmapped_ip(meta.src.ip()), meta.src.port());
            let from_sender =
                src.ip() == s.sender.ip() && (s.sender.port() == 0 || s.sender.port() == src.port());
            if !from_sender || meta.truncated || meta.len > MAX_TEST_PACKET {
                tally.ignored += 1;
                continue;
            }
            let n = meta.len;
            let Some(f) = packet::read_sender(s.mode, s.keys.as_ref(), &mut buf[..n]) else {
                tally.ignored += 1;
                continue;
            };
            last_heard = Instant::now();
            if s.sender.port() == 0 {
                s.sender.set_port(src.port());
            }
            let len = packet::reflected_len(s.mode, n);
            if rate > 0.0 {
                let now = Instant::now();
                tokens = (tokens + now.duration_since(filled).as_secs_f64() * rate).min(rate);
                filled = now;
                let bits = (len as f64 + 28.0) * 8.0;
                if tokens < bits {
                    tally.ignored += 1;
                    continue;
                }
                tokens -= bits;
            }
            let t2 = ntp_from_unix_ns(meta.t_ns.unwrap_or_else(msg::now_unix_ns));
            let h = packet::reflector_header(s.mode);
            // The sender's padding past our header keeps its place, so the
            // answer ends where the request did.
            if n > h {
                out[h..n].copy_from_slice(&buf[h..n]);
            }
            if error_at.elapsed() > Duration::from_secs(1) {
                error = msg::clock_error().to_u16();
                error_at = Instant::now();
            }
            let fields = ReflectorFields {
                seq,
                timestamp: ntp_from_unix_ns(msg::now_unix_ns()),
                error,
                receive_timestamp: t2,
                sender_seq: f.seq,
                sender_timestamp: f.timestamp,
                sender_error: f.error,
                sender_ttl: meta.ttl.unwrap_or(0),
            };
            if !packet::write_reflector(s.mode, s.keys.as_ref(), &fields, &mut out[..len]) {
                tally.ignored += 1;
                continue;
            }
            match s.socket.try_send_to(&out[..len], src) {
                Ok(_) => {
                    tally.reflected += 1;
                    seq = seq.wrapping_add(1);
                }
                Err(_) => tally.ignored += 1,
            }
        }
    }
    tally
}
