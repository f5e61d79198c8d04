//! The OWAMP test data path both ends use: a test socket, the sender that
//! puts a session's packets on its schedule, and the receiver that keeps a
//! record of every packet that came (as owampd's receive log and owping's
//! local one do).
//!
//! A sender that cannot send a packet — the kernel refused it, or the
//! schedule fell more than the loss timeout behind — records it in a skip
//! range, as owamp does, so the receiver's loss and the sender's failures
//! stay apart and nothing is counted as sent that was not.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;
use std::time::Duration;

use goodput_core::owamp::control::{DataRecord, SkipRange};
use goodput_core::owamp::crypto::TestKeys;
use goodput_core::owamp::packet::{self, SenderFields};
use goodput_core::owamp::{Mode, SEND_TTL};
use goodput_core::stamp::{ntp_from_unix_ns, unix_ns_from_ntp, ErrorEstimate};
use socket2::{Domain, Protocol, Socket, Type};
use tokio::io::Interest;
use tokio::net::UdpSocket;
use tokio_util::sync::CancellationToken;

use crate::datagram as dg;
use crate::socket::unmapped_ip;

/// owping's and owampd's test port range.
pub const OWAMP_TEST_PORTS: (u16, u16) = (8760, 9960);
/// twampd's test port range.
pub const TWAMP_TEST_PORTS: (u16, u16) = (18760, 19960);
/// The largest test packet handled (a jumbo frame's UDP payload).
pub const MAX_TEST_PACKET: usize = 9000;

/// A UDP socket for a test session: TTL 255, the DSCP asked for, kernel
/// receive timestamps and the TTL of what arrives.
pub struct TestSocket {
    /// The socket.
    pub sock: UdpSocket,
    /// Where it is bound.
    pub local: SocketAddr,
}

/// Opens a test socket on `local`, on a port of `ports` (inclusive; the
/// first free one from a random start) or any port when `None`.
pub fn test_socket(local: IpAddr, ports: Option<(u16, u16)>, dscp: u8) -> io::Result<TestSocket> {
    let v6 = local.is_ipv6();
    let sock = Socket::new(
        if v6 { Domain::IPV6 } else { Domain::IPV4 },
        Type::DGRAM,
        Some(Protocol::UDP),
    )?;
    let fd = sock.as_raw_fd();
    dg::set_ttl(fd, v6, SEND_TTL)?;
    let tos = u32::from(dscp & 0x3F) << 2;
    if tos != 0 {
        if v6 {
            sock.set_tclass_v6(tos)?;
        } else {
            sock.set_tos(tos)?;
        }
    }
    dg::enable_ancillary(fd, v6, false)?;
    sock.set_nonblocking(true)?;
    match ports {
        None => sock.bind(&SocketAddr::new(local, 0).into())?,
        Some((lo, hi)) => {
            if lo == 0 || hi < lo {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "an empty test port range",
                ));
            }
            let span = u32::from(hi - lo) + 1;
            let first = rand::random::<u32>() % span;
            let mut bound = Err(io::Error::new(io::ErrorKind::AddrInUse, "no free test port"));
            for i in 0..span {
                let port = lo + ((first + i) % span) as u16;
                match sock.bind(&SocketAddr::new(local, port).into()) {
                    Ok(()) => {
                        bound = Ok(());
                        break;
                    }
                    Err(e) if e.kind() == io::ErrorKind::AddrInUse => continue,
                    Err(e) => return Err(e),
                }
            }
            bound.map_err(|_| {
                io::Error::new(
                    io::ErrorKind::AddrInUse,
                    format!("every UDP port of the test range {lo}-{hi} is in use"),
                )
            })?;
        }
    }
    let local = sock
        .local_addr()?
        .as_socket()
        .ok_or_else(|| io::Error::other("a test socket without an address"))?;
    let sock = UdpSocket::from_std(sock.into())?;
    Ok(TestSocket { sock, local })
}

/// The gaps between a session's packets, nanoseconds: packet `i` is due at
/// the start time plus the first `i + 1` gaps (owamp's schedule).
pub type Gaps = Box<dyn Iterator<Item = u64> + Send>;

/// The same gap forever (a one-slot fixed schedule).
pub fn fixed_gaps(gap_ns: u64) -> Gaps {
    Box::new(std::iter::repeat(gap_ns))
}

/// What a sender is to send.
pub struct SendPlan {
    /// Where to.
    pub peer: SocketAddr,
    /// Security mode of the packets.
    pub mode: Mode,
    /// The session's keys (authenticated modes).
    pub keys: Option<TestKeys>,
    /// Padding after the header, octets.
    pub padding: usize,
    /// Packets in the session.
    pub packets: u32,
    /// The schedule.
    pub gaps: Gaps,
    /// The session's start time, Unix nanoseconds.
    pub start_ns: i64,
    /// A packet more than this late is skipped, not sent.
    pub timeout_ns: i64,
}

/// What a sender did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SendOutcome {
    /// The sequence number it would have sent next: every packet below it
    /// was scheduled, sent or skipped.
    pub next_seq: u32,
    /// Packets scheduled and not sent (too late, or refused by the
    /// kernel), merged into ranges.
    pub skips: Vec<SkipRange>,
    /// Packets the kernel took.
    pub sent: u64,
    /// Of the skipped, those the kernel refused (the last error's text).
    pub send_errors: u64,
    /// The last send error, in words.
    pub last_error: Option<String>,
    /// Send time of packet 0 and of the last packet sent (NTP format).
    pub first_last: Option<(u64, u64)>,
}

fn add_skip(skips: &mut Vec<SkipRange>, seq: u32) {
    if let Some(last) = skips.last_mut() {
        if last.last.checked_add(1) == Some(seq) {
            last.last = seq;
            return;
        }
    }
    skips.push(SkipRange {
        first: seq,
        last: seq,
    });
}

/// The kernel clock's error estimate, read at most once a second.
struct ClockCache {
    at_ns: i64,
    est: ErrorEstimate,
}

impl ClockCache {
    fn new() -> Self {
        Self {
            at_ns: i64::MIN,
            est: dg::clock_error(),
        }
    }

    fn get(&mut self, now_ns: i64) -> u16 {
        if now_ns.saturating_sub(self.at_ns) > 1_000_000_000 {
            self.est = dg::clock_error();
            self.at_ns = now_ns;
        }
        self.est.to_u16()
    }
}

async fn sleep_until_unix(t_ns: i64) {
    let now = dg::now_unix_ns();
    if t_ns > now {
        tokio::time::sleep(Duration::from_nanos((t_ns - now) as u64)).await;
    }
}

/// Sends a session's packets on its schedule until they are all sent or
/// `cancel` fires (then `next_seq` says how far it got).
pub async fn send_session(sock: &UdpSocket, mut plan: SendPlan, cancel: &CancellationToken) -> SendOutcome {
    let mut out = SendOutcome::default();
    let len = packet::sender_header(plan.mode) + plan.padding.min(MAX_TEST_PACKET);
    let mut buf = vec![0u8; len.min(MAX_TEST_PACKET)];
    let mut clock = ClockCache::new();
    let mut due = plan.start_ns;
    for seq in 0..plan.packets {
        let gap = plan.gaps.next().unwrap_or(0);
        due = due.saturating_add(i64::try_from(gap).unwrap_or(i64::MAX));
        tokio::select! {
            () = cancel.cancelled() => return out,
            () = sleep_until_unix(due) => {}
        }
        out.next_seq = seq + 1;
        let now = dg::now_unix_ns();
        if now > due.saturating_add(plan.timeout_ns) {
            add_skip(&mut out.skips, seq);
            continue;
        }
        let ts = ntp_from_unix_ns(now);
        let f = SenderFields {
            seq,
            timestamp: ts,
            error: clock.get(now),
        };
        // Padding: owamp fills it with random octets; so do we, so that
        // compression on the path cannot flatter the figures.
        rand::RngCore::fill_bytes(
            &mut rand::thread_rng(),
            &mut buf[packet::sender_header(plan.mode)..],
        );
        packet::write_sender(plan.mode, plan.keys.as_ref(), &f, &mut buf);
        match sock.try_send_to(&buf, plan.peer) {
            Ok(_) => {
                out.sent += 1;
                out.first_last = Some((out.first_last.map_or(ts, |(f, _)| f), ts));
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                // A full send buffer: wait for room once, within the
                // timeout, then count it as not sent.
                let left = due.saturating_add(plan.timeout_ns) - dg::now_unix_ns();
                let sent = if left > 0 {
                    match tokio::time::timeout(
                        Duration::from_nanos(left as u64),
                        sock.send_to(&buf, plan.peer),
                    )
                    .await
                    {
                        Ok(Ok(_)) => true,
                        Ok(Err(e)) => {
                            out.last_error = Some(e.to_string());
                            false
                        }
                        Err(_) => false,
                    }
                } else {
                    false
                };
                if sent {
                    out.sent += 1;
                    out.first_last = Some((out.first_last.map_or(ts, |(f, _)| f), ts));
                } else {
                    out.send_errors += 1;
                    add_skip(&mut out.skips, seq);
                }
            }
            Err(e) => {
                out.send_errors += 1;
                out.last_error = Some(e.to_string());
                add_skip(&mut out.skips, seq);
            }
        }
    }
    out
}

/// What a receiver expects.
pub struct RecvPlan {
    /// The sender: its address, and its port when known (0: any port).
    pub peer: SocketAddr,
    /// Security mode of the packets.
    pub mode: Mode,
    /// The session's keys (authenticated modes).
    pub keys: Option<TestKeys>,
    /// Padding after the header, octets (a packet must be exactly as long).
    pub padding: usize,
    /// Packets in the session: a sequence number at or past it is refused.
    pub packets: u32,
    /// The most records kept (arrivals, duplicates included).
    pub max_records: usize,
}

/// What a receiver got.
#[derive(Debug, Clone, Default)]
pub struct Received {
    /// One record per packet that came, in arrival order, duplicates
    /// included; [`fill_lost`] adds the packets that never came.
    pub records: Vec<DataRecord>,
    /// Datagrams refused: from another source, the wrong length, a
    /// sequence number outside the session, or a failed HMAC.
    pub refused: u64,
    /// Valid packets not recorded because `max_records` was reached.
    pub over_budget: u64,
}

/// Receives a session's packets until `stop` fires.
pub async fn receive_session(sock: &UdpSocket, plan: &RecvPlan, stop: &CancellationToken) -> Received {
    let mut out = Received::default();
    let want_len = packet::sender_header(plan.mode) + plan.padding;
    let mut buf = vec![0u8; MAX_TEST_PACKET + 1];
    let mut clock = ClockCache::new();
    let fd = sock.as_raw_fd();
    loop {
        tokio::select! {
            () = stop.cancelled() => break,
            r = sock.readable() => {
                if r.is_err() {
                    break;
                }
            }
        }
        loop {
            // Through try_io, so that "nothing waiting" clears the
            // socket's readiness and the task sleeps until more comes.
            let got = sock.try_io(Interest::READABLE, || match dg::recv_one(fd, &mut buf) {
                Ok(Some(m)) => Ok(m),
                Ok(None) => Err(io::ErrorKind::WouldBlock.into()),
                Err(e) => Err(e),
            });
            let Ok(meta) = got else {
                break;
            };
            let now = dg::now_unix_ns();
            let from_peer = unmapped_ip(meta.src.ip()) == unmapped_ip(plan.peer.ip())
                && (plan.peer.port() == 0 || meta.src.port() == plan.peer.port());
            if !from_peer || meta.truncated || meta.len != want_len {
                out.refused += 1;
                continue;
            }
            let Some(f) = packet::read_sender(plan.mode, plan.keys.as_ref(), &mut buf[..meta.len]) else {
                out.refused += 1;
                continue;
            };
            if f.seq >= plan.packets {
                out.refused += 1;
                continue;
            }
            if out.records.len() >= plan.max_records {
                out.over_budget += 1;
                continue;
            }
            let t = meta.t_ns.unwrap_or(now);
            out.records.push(DataRecord {
                seq: f.seq,
                send_err: f.error,
                recv_err: clock.get(t),
                send_time: f.timestamp,
                recv_time: ntp_from_unix_ns(t),
                ttl: meta.ttl.unwrap_or(255),
            });
        }
    }
    out
}

/// Adds a lost record (receive time zero) for every sequence number below
/// `next_seq` that never came, and drops records at or past it, as owampd
/// trims its log to the sender's Stop-Sessions. `send_time` gives a lost
/// packet's scheduled send time (NTP format).
pub fn fill_lost(records: &mut Vec<DataRecord>, next_seq: u32, send_time: impl Fn(u32) -> u64) {
    records.retain(|r| r.seq < next_seq);
    let mut seen = vec![false; next_seq as usize];
    for r in records.iter() {
        seen[r.seq as usize] = true;
    }
    for (seq, s) in seen.iter().enumerate() {
        if !s {
            let seq = seq as u32;
            records.push(DataRecord {
                seq,
                send_err: 0,
                recv_err: 0,
                send_time: send_time(seq),
                recv_time: 0,
                ttl: 255,
            });
        }
    }
}

/// The scheduled send times (NTP format) of a fixed-gap session, for
/// [`fill_lost`].
pub fn fixed_send_time(start_ns: i64, gap_ns: u64) -> impl Fn(u32) -> u64 {
    move |seq| ntp_from_unix_ns(start_ns.saturating_add((u64::from(seq) + 1).saturating_mul(gap_ns) as i64))
}

/// A record's one-way delay, nanoseconds (`None` when lost).
pub fn delay_ns(r: &DataRecord, near_unix_ns: i64) -> Option<i64> {
    (!r.is_lost())
        .then(|| unix_ns_from_ntp(r.recv_time, near_unix_ns) - unix_ns_from_ntp(r.send_time, near_unix_ns))
}

#[cfg(test)]
mod tests {
    use super::*;
    use goodput_core::owamp::crypto::SessionKeys;

    fn loopback() -> IpAddr {
        "127.0.0.1".parse().unwrap()
    }

    #[tokio::test]
    async fn packets_arrive_as_records_in_every_mode_and_strangers_are_refused() {
        for mode in Mode::ALL {
            let rx = test_socket(loopback(), None, 0).unwrap();
            let tx = test_socket(loopback(), None, 0).unwrap();
            let stranger = test_socket(loopback(), None, 0).unwrap();
            let keys = TestKeys::derive(
                &SessionKeys {
                    aes: [1; 16],
                    hmac: [2; 32],
                },
                &[3; 16],
            );
            let stop = CancellationToken::new();
            let plan = RecvPlan {
                peer: tx.local,
                mode,
                keys: Some(keys.clone()),
                padding: 20,
                packets: 10,
                max_records: 1000,
            };
            let rx_addr = rx.local;
            let stop2 = stop.clone();
            let recv = tokio::spawn(async move { receive_session(&rx.sock, &plan, &stop2).await });
            let start = dg::now_unix_ns() + 10_000_000;
            stranger.sock.send_to(&[0u8; 34], rx_addr).await.unwrap();
            let s = send_session(
                &tx.sock,
                SendPlan {
                    peer: rx_addr,
                    mode,
                    keys: Some(keys),
                    padding: 20,
                    packets: 10,
                    gaps: fixed_gaps(2_000_000),
                    start_ns: start,
                    timeout_ns: 1_000_000_000,
                },
                &CancellationToken::new(),
            )
            .await;
            tokio::time::sleep(Duration::from_millis(50)).await;
            stop.cancel();
            let mut r = recv.await.unwrap();
            assert_eq!((s.next_seq, s.sent, s.skips.len()), (10, 10, 0), "{mode:?}");
            assert_eq!(r.records.len(), 10, "{mode:?}");
            assert_eq!(r.refused, 1, "the stranger's datagram, {mode:?}");
            assert!(r.records.iter().all(|x| x.ttl == 255));
            let near = dg::now_unix_ns();
            for x in &r.records {
                let d = delay_ns(x, near).unwrap();
                assert!((0..1_000_000_000).contains(&d), "{d} ns");
            }
            fill_lost(&mut r.records, 12, fixed_send_time(start, 2_000_000));
            assert_eq!(r.records.iter().filter(|x| x.is_lost()).count(), 2);
        }
    }

    #[tokio::test]
    async fn a_send_the_kernel_refuses_is_a_skip_not_a_packet() {
        let tx = test_socket(loopback(), None, 0).unwrap();
        // Port 0 is not a destination the kernel sends to.
        let s = send_session(
            &tx.sock,
            SendPlan {
                peer: "127.0.0.1:0".parse().unwrap(),
                mode: Mode::Open,
                keys: None,
                padding: 0,
                packets: 3,
                gaps: fixed_gaps(1_000_000),
                start_ns: dg::now_unix_ns(),
                timeout_ns: 1_000_000_000,
            },
            &CancellationToken::new(),
        )
        .await;
        assert_eq!(s.sent, 0);
        assert_eq!(s.send_errors, 3);
        assert_eq!(s.skips, vec![SkipRange { first: 0, last: 2 }]);
        assert_eq!(s.next_seq, 3);
    }

    #[tokio::test]
    async fn a_schedule_far_behind_skips_instead_of_sending_late() {
        let tx = test_socket(loopback(), None, 0).unwrap();
        let rx = test_socket(loopback(), None, 0).unwrap();
        let s = send_session(
            &tx.sock,
            SendPlan {
                peer: rx.local,
                mode: Mode::Open,
                keys: None,
                padding: 0,
                packets: 5,
                gaps: fixed_gaps(1_000),
                start_ns: dg::now_unix_ns() - 10_000_000_000,
                timeout_ns: 1_000_000_000,
            },
            &CancellationToken::new(),
        )
        .await;
        assert_eq!(s.sent, 0);
        assert_eq!(s.skips, vec![SkipRange { first: 0, last: 4 }]);
    }

    #[test]
    fn test_ports_come_from_the_range() {
        let s = futures_lite_block(|| test_socket(loopback(), Some((41000, 41009)), 0)).unwrap();
        assert!((41000..=41009).contains(&s.local.port()));
    }

    fn futures_lite_block<T>(f: impl FnOnce() -> T) -> T {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let _g = rt.enter();
        f()
    }
}
