//! Probe sockets without privilege: an ordinary UDP or TCP socket, or an
//! unprivileged ICMP echo socket, with `IP_RECVERR` / `IPV6_RECVERR` so the
//! ICMP errors that probes provoke are queued on the socket, and read back
//! with `recvmsg(MSG_ERRQUEUE)` as tracepath does. Nothing here needs root
//! or a capability.

use std::io;
use std::mem::{size_of, MaybeUninit};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::AsRawFd;

use socket2::{Domain, Protocol, Socket, Type};

/// What a socket's error queue or a reply said about one probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Heard {
    /// The original destination (error queue) or the sender (a reply).
    pub peer: Option<SocketAddr>,
    /// The first bytes of the data: the probe's own payload or header as
    /// quoted back (error queue), or the reply.
    pub head: [u8; 8],
    /// How many of `head` are real.
    pub head_len: usize,
    /// Bytes received in all.
    pub len: usize,
    /// From the error queue: the extended error.
    pub error: Option<ExtError>,
    /// TTL (hop limit) the packet arrived with.
    pub ttl: Option<u8>,
    /// When the kernel received it (`SO_TIMESTAMPNS`, Unix ns).
    pub stamp_ns: Option<i64>,
}

/// Now, Unix ns: the clock of the kernel's receive timestamps.
pub(crate) fn wall_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

/// A round trip from a send (`sent`, `sent_ns`) to an answer read at `at`
/// with the kernel's receive stamp: from the stamp when it is sane (the
/// reading was not held up by the scheduler), else from the monotonic
/// clock (a wall clock stepped meanwhile).
pub(crate) fn rtt(
    sent: tokio::time::Instant,
    sent_ns: i64,
    at: tokio::time::Instant,
    stamp_ns: Option<i64>,
) -> std::time::Duration {
    let read = at.saturating_duration_since(sent);
    match stamp_ns.map(|s| s - sent_ns) {
        Some(d) if d >= 0 && (d as u128) <= read.as_nanos() => std::time::Duration::from_nanos(d as u64),
        _ => read,
    }
}

/// `struct sock_extended_err` and its offender.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ExtError {
    pub errno: i32,
    pub origin: u8,
    pub icmp_type: u8,
    pub icmp_code: u8,
    pub info: u32,
    /// Who sent the ICMP error (none for a local error).
    pub offender: Option<IpAddr>,
}

/// `SO_EE_ORIGIN_LOCAL`: the kernel itself (a send too big for the
/// interface, `info` its MTU).
pub(crate) const ORIGIN_LOCAL: u8 = libc::SO_EE_ORIGIN_LOCAL;
/// `SO_EE_ORIGIN_ICMP`.
pub(crate) const ORIGIN_ICMP: u8 = libc::SO_EE_ORIGIN_ICMP;
/// `SO_EE_ORIGIN_ICMP6`.
pub(crate) const ORIGIN_ICMP6: u8 = libc::SO_EE_ORIGIN_ICMP6;

fn set_int(s: &Socket, level: libc::c_int, name: libc::c_int, value: libc::c_int) -> io::Result<()> {
    crate::datagram::setsockopt_int(s.as_raw_fd(), level, name, value)
}

/// A probe socket of `ty` for `dest`'s family, non-blocking, bound to
/// `bind` (or any address), with its errors queued and arrival TTLs told.
pub(crate) fn probe_socket(
    dest: IpAddr,
    bind: Option<IpAddr>,
    ty: Type,
    proto: Protocol,
) -> io::Result<Socket> {
    let v6 = dest.is_ipv6();
    let s = Socket::new(if v6 { Domain::IPV6 } else { Domain::IPV4 }, ty, Some(proto))?;
    s.set_nonblocking(true)?;
    if let Some(b) = bind {
        s.bind(&SocketAddr::new(b, 0).into())?;
    }
    match v6 {
        true => set_int(&s, libc::SOL_IPV6, libc::IPV6_RECVERR, 1)?,
        false => set_int(&s, libc::SOL_IP, libc::IP_RECVERR, 1)?,
    }
    // Arrival TTLs and the kernel's receive timestamps, on errors too.
    crate::datagram::enable_ancillary(s.as_raw_fd(), v6, false)?;
    Ok(s)
}

/// Sets the TTL (hop limit) of what `s` sends next.
pub(crate) fn set_ttl(s: &Socket, v6: bool, ttl: u8) -> io::Result<()> {
    match v6 {
        true => set_int(s, libc::SOL_IPV6, libc::IPV6_UNICAST_HOPS, ttl.into()),
        false => set_int(s, libc::SOL_IP, libc::IP_TTL, ttl.into()),
    }
}

/// With `probe`, packets leave with DF set and the kernel's cached path
/// MTU ignored (`IP_PMTUDISC_PROBE`), so each run finds the drop afresh and
/// a size over the interface's MTU fails at once; without, never DF.
pub(crate) fn set_pmtu_probe(s: &Socket, v6: bool, probe: bool) -> io::Result<()> {
    match (v6, probe) {
        (true, true) => set_int(
            s,
            libc::SOL_IPV6,
            libc::IPV6_MTU_DISCOVER,
            libc::IPV6_PMTUDISC_PROBE,
        ),
        (true, false) => set_int(
            s,
            libc::SOL_IPV6,
            libc::IPV6_MTU_DISCOVER,
            libc::IPV6_PMTUDISC_DONT,
        ),
        (false, true) => set_int(s, libc::SOL_IP, libc::IP_MTU_DISCOVER, libc::IP_PMTUDISC_PROBE),
        (false, false) => set_int(s, libc::SOL_IP, libc::IP_MTU_DISCOVER, libc::IP_PMTUDISC_DONT),
    }
}

/// Reads an address the kernel wrote at `p`, of at most `len` bytes.
///
/// # Safety
/// `p` must be valid for reads of `len` bytes.
unsafe fn read_addr(p: *const u8, len: usize) -> Option<SocketAddr> {
    if len < size_of::<libc::sa_family_t>() {
        return None;
    }
    let family = std::ptr::read_unaligned(p.cast::<libc::sa_family_t>());
    match libc::c_int::from(family) {
        libc::AF_INET if len >= size_of::<libc::sockaddr_in>() => {
            let a = std::ptr::read_unaligned(p.cast::<libc::sockaddr_in>());
            let ip = Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr));
            Some(SocketAddrV4::new(ip, u16::from_be(a.sin_port)).into())
        }
        libc::AF_INET6 if len >= size_of::<libc::sockaddr_in6>() => {
            let a = std::ptr::read_unaligned(p.cast::<libc::sockaddr_in6>());
            let ip = Ipv6Addr::from(a.sin6_addr.s6_addr);
            Some(SocketAddrV6::new(ip, u16::from_be(a.sin6_port), a.sin6_flowinfo, a.sin6_scope_id).into())
        }
        _ => None,
    }
}

/// One message from `s`: its error queue (`errqueue`) or its ordinary
/// receive queue; `None` when that queue is empty.
pub(crate) fn receive(s: &Socket, errqueue: bool) -> io::Result<Option<Heard>> {
    receive_from(s, errqueue, false)
}

/// The length of the IPv4 header `data` starts with, when it starts with
/// one that fits in it (a raw IPv4 socket's datagrams do; an ICMP message
/// never starts with 0x4_, no ICMP type being 64 to 79 in use).
fn ipv4_header_len(data: &[u8]) -> Option<usize> {
    let first = *data.first()?;
    let len = usize::from(first & 0x0f) * 4;
    (first >> 4 == 4 && len >= 20 && data.len() >= len).then_some(len)
}

/// As [`receive`]; with `raw_v4` (a raw IPv4 socket), the IP header the
/// kernel hands over is skipped, so `head` and `len` are the ICMP
/// message's as on an ICMP datagram socket.
fn receive_from(s: &Socket, errqueue: bool, raw_v4: bool) -> io::Result<Option<Heard>> {
    let mut name = MaybeUninit::<libc::sockaddr_storage>::zeroed();
    // Whole datagrams: an ICMP socket reports only what it copied.
    let mut buf = vec![0u8; 65_536];
    // u64s, so the control buffer is aligned for cmsghdr.
    let mut control = [0u64; 64];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: an all-zero msghdr is valid; every pointer set below points
    // at a live buffer of the length given with it.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_name = name.as_mut_ptr().cast();
    msg.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = size_of::<[u64; 64]>();
    let flags = libc::MSG_DONTWAIT | if errqueue { libc::MSG_ERRQUEUE } else { 0 };
    // SAFETY: msg describes the buffers above, all alive for the call.
    let n = unsafe { libc::recvmsg(s.as_raw_fd(), &mut msg, flags) };
    if n < 0 {
        let e = io::Error::last_os_error();
        return match e.kind() {
            io::ErrorKind::WouldBlock => Ok(None),
            _ => Err(e),
        };
    }
    let mut len = n as usize;
    let skip = if raw_v4 {
        ipv4_header_len(&buf[..len.min(buf.len())]).unwrap_or(0)
    } else {
        0
    };
    len -= skip;
    let mut head = [0u8; 8];
    let head_len = len.min(8);
    head[..head_len].copy_from_slice(&buf[skip..skip + head_len]);
    // SAFETY: the kernel wrote msg_namelen bytes of address.
    let peer = unsafe {
        read_addr(
            name.as_ptr().cast(),
            (msg.msg_namelen as usize).min(size_of::<libc::sockaddr_storage>()),
        )
    };
    let mut heard = Heard {
        peer,
        head,
        head_len,
        len,
        error: None,
        ttl: None,
        stamp_ns: None,
    };
    // SAFETY: the CMSG_* walk stays within msg_controllen, which the
    // kernel set to what it wrote; each read checks the message's length.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            let (level, ty) = ((*c).cmsg_level, (*c).cmsg_type);
            let data = libc::CMSG_DATA(c);
            let data_len = ((*c).cmsg_len as usize).saturating_sub(libc::CMSG_LEN(0) as usize);
            let is_err = (level == libc::SOL_IP && ty == libc::IP_RECVERR)
                || (level == libc::SOL_IPV6 && ty == libc::IPV6_RECVERR);
            let is_ttl = (level == libc::SOL_IP && ty == libc::IP_TTL)
                || (level == libc::SOL_IPV6 && ty == libc::IPV6_HOPLIMIT);
            if is_err && data_len >= size_of::<libc::sock_extended_err>() {
                let ee = std::ptr::read_unaligned(data.cast::<libc::sock_extended_err>());
                let rest = data_len - size_of::<libc::sock_extended_err>();
                let offender =
                    read_addr(data.add(size_of::<libc::sock_extended_err>()), rest).map(|a| a.ip());
                heard.error = Some(ExtError {
                    errno: ee.ee_errno as i32,
                    origin: ee.ee_origin,
                    icmp_type: ee.ee_type,
                    icmp_code: ee.ee_code,
                    info: ee.ee_info,
                    offender,
                });
            } else if level == libc::SOL_SOCKET
                && ty == libc::SCM_TIMESTAMPNS
                && data_len >= size_of::<libc::timespec>()
            {
                let ts = std::ptr::read_unaligned(data.cast::<libc::timespec>());
                heard.stamp_ns = ts
                    .tv_sec
                    .checked_mul(1_000_000_000)
                    .and_then(|s| s.checked_add(ts.tv_nsec));
            } else if is_ttl && data_len >= size_of::<libc::c_int>() {
                let t = std::ptr::read_unaligned(data.cast::<libc::c_int>());
                heard.ttl = u8::try_from(t).ok();
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    Ok(Some(heard))
}

/// The next message of either queue of `s`, the error queue first (an
/// error's `Heard` has `error`); `None` when both are empty.
///
/// With `IP_RECVERR` each queued ICMP error also sets the socket's pending
/// error, which reading the error queue clears; one that arrives between
/// the two reads makes the ordinary read fail with it (`EHOSTUNREACH`,
/// `ECONNREFUSED`, …). That failure only says "look at the error queue":
/// it is not the socket failing.
pub(crate) fn receive_any(s: &Socket) -> io::Result<Option<Heard>> {
    receive_any_from(s, false)
}

/// As [`receive_any`], from a raw ICMP socket (`raw_v4`: an IPv4 one,
/// whose datagrams start with the IP header).
pub(crate) fn receive_any_from(s: &Socket, raw_v4: bool) -> io::Result<Option<Heard>> {
    for _ in 0..64 {
        if let Some(h) = receive_from(s, true, raw_v4)? {
            return Ok(Some(h));
        }
        match receive_from(s, false, raw_v4) {
            Ok(h) => return Ok(h),
            Err(e) if is_pending_icmp(&e) => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(None)
}

/// The errors an ICMP error leaves pending on a socket.
fn is_pending_icmp(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(
            libc::EHOSTUNREACH
                | libc::ENETUNREACH
                | libc::ECONNREFUSED
                | libc::EMSGSIZE
                | libc::EPROTO
                | libc::EHOSTDOWN
                | libc::ENONET
                | libc::EACCES
                | libc::EPERM
                | libc::ENOPROTOOPT
        )
    )
}

/// What became of a non-blocking connect (a TCP probe, a TCP ping).
pub(crate) enum ConnectFate {
    /// A SYN-ACK: connected. The socket is closed with a reset (no FIN,
    /// no TIME_WAIT).
    Connected,
    /// A reset: the port is closed, but the host answered.
    Refused,
    /// An ICMP error about the SYN, from the error queue (`error` is set).
    Icmp(Heard),
    /// Any other failure.
    Failed(io::Error),
    /// Nothing within the wait.
    Silent,
}

/// Waits up to `wait` for the fate of `s`'s connect (already started),
/// and when it was known.
pub(crate) async fn connect_fate(
    s: Socket,
    wait: std::time::Duration,
) -> (ConnectFate, tokio::time::Instant) {
    use tokio::io::Interest;
    let fd = match register(s, Interest::WRITABLE | Interest::ERROR) {
        Ok(fd) => fd,
        Err(e) => return (ConnectFate::Failed(e), tokio::time::Instant::now()),
    };
    let fate = async {
        loop {
            let mut g = match fd.ready(Interest::WRITABLE | Interest::ERROR).await {
                Ok(g) => g,
                Err(e) => return (ConnectFate::Failed(e), tokio::time::Instant::now()),
            };
            let at = tokio::time::Instant::now();
            if let Ok(Some(h)) = receive(fd.get_ref(), true) {
                if h.error.is_some() {
                    return (ConnectFate::Icmp(h), at);
                }
            }
            match fd.get_ref().take_error() {
                Ok(Some(e)) if e.raw_os_error() == Some(libc::ECONNREFUSED) => {
                    return (ConnectFate::Refused, at)
                }
                Ok(Some(e)) | Err(e) => return (ConnectFate::Failed(e), at),
                Ok(None) if g.ready().is_writable() => {
                    let _ = fd.get_ref().set_linger(Some(std::time::Duration::ZERO));
                    return (ConnectFate::Connected, at);
                }
                Ok(None) => g.clear_ready(),
            }
        }
    };
    tokio::time::timeout(wait, fate)
        .await
        .unwrap_or_else(|_| (ConnectFate::Silent, tokio::time::Instant::now()))
}

/// Whether this process may open an unprivileged ICMP echo socket, and if
/// not, why (the sysctl that decides it).
pub(crate) fn icmp_socket(dest: IpAddr, bind: Option<IpAddr>) -> Result<Socket, String> {
    let proto = if dest.is_ipv6() {
        Protocol::ICMPV6
    } else {
        Protocol::ICMPV4
    };
    probe_socket(dest, bind, Type::DGRAM, proto).map_err(|e| {
        if matches!(e.raw_os_error(), Some(libc::EACCES) | Some(libc::EPERM)) {
            let range = std::fs::read_to_string("/proc/sys/net/ipv4/ping_group_range")
                .map(|r| r.split_whitespace().collect::<Vec<_>>().join(" "))
                .unwrap_or_else(|_| "unreadable".into());
            // SAFETY: getgid only reads the process's credentials.
            let gid = unsafe { libc::getgid() };
            format!(
                "ICMP echo sockets are not open to this user: group {gid} is outside net.ipv4.ping_group_range ({range}); \
                 an administrator can widen it with sysctl -w net.ipv4.ping_group_range='0 2147483647'"
            )
        } else {
            format!("cannot open an ICMP echo socket: {e}")
        }
    })
}

/// A raw ICMP socket for echo requests: what root (CAP_NET_RAW) may open
/// where unprivileged ICMP sockets are not allowed.
pub(crate) fn raw_icmp_socket(dest: IpAddr, bind: Option<IpAddr>) -> io::Result<Socket> {
    let proto = if dest.is_ipv6() {
        Protocol::ICMPV6
    } else {
        Protocol::ICMPV4
    };
    probe_socket(dest, bind, Type::RAW, proto)
}

/// Makes `packet` (from [`echo_request`]) ready for a raw socket: the
/// identifier set, and for IPv4 the checksum (the kernel sums ICMPv6).
pub(crate) fn raw_echo_request(packet: &mut [u8], v6: bool, id: u16) {
    if packet.len() < 8 {
        return;
    }
    packet[4..6].copy_from_slice(&id.to_be_bytes());
    packet[2..4].copy_from_slice(&[0, 0]);
    if !v6 {
        let sum = internet_checksum(packet);
        packet[2..4].copy_from_slice(&sum.to_be_bytes());
    }
}

/// RFC 1071's checksum: the ones' complement of the ones' complement sum
/// of the 16-bit words.
fn internet_checksum(data: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    for pair in data.chunks(2) {
        let word = u16::from_be_bytes([pair[0], pair.get(1).copied().unwrap_or(0)]);
        sum += u32::from(word);
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// The identifier of an ICMP echo message (request quoted back or reply).
pub(crate) fn echo_id(h: &Heard) -> Option<u16> {
    (h.head_len >= 8).then(|| u16::from_be_bytes([h.head[4], h.head[5]]))
}

/// An ICMP echo request: type, code 0, checksum 0 (the kernel fills it and
/// the identifier in on an ICMP socket), the sequence, then `payload`
/// bytes of pattern.
pub(crate) fn echo_request(v6: bool, seq: u16, payload: usize) -> Vec<u8> {
    let mut p = vec![0u8; 8 + payload];
    p[0] = if v6 { 128 } else { 8 };
    p[6..8].copy_from_slice(&seq.to_be_bytes());
    for (i, b) in p[8..].iter_mut().enumerate() {
        *b = (i % 251) as u8;
    }
    p
}

/// The sequence of an ICMP echo message (request quoted back or reply).
pub(crate) fn echo_seq(h: &Heard) -> Option<u16> {
    (h.head_len >= 8).then(|| u16::from_be_bytes([h.head[6], h.head[7]]))
}

/// Whether `h` is an echo reply (not a request we sent, quoted back).
pub(crate) fn is_echo_reply(h: &Heard, v6: bool) -> bool {
    h.head_len >= 8 && h.head[0] == if v6 { 129 } else { 0 }
}

/// `s` registered with the reactor for `interest`.
pub(crate) fn register(
    s: Socket,
    interest: tokio::io::Interest,
) -> io::Result<tokio::io::unix::AsyncFd<Socket>> {
    // SAFETY: the Socket owns its descriptor and keeps it open, the same
    // descriptor, for as long as the AsyncFd that owns the Socket.
    unsafe { tokio::io::unix::AsyncFd::register_with_interest(s, interest) }.map_err(io::Error::from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tokio::time::Instant;

    #[test]
    fn raw_echo_requests_carry_a_valid_checksum() {
        // RFC 1071's example words sum to 0xddf2; the checksum is its
        // complement.
        assert_eq!(
            internet_checksum(&[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7]),
            !0xddf2
        );
        let mut p = echo_request(false, 7, 5);
        raw_echo_request(&mut p, false, 0x1234);
        assert_eq!(&p[4..8], &[0x12, 0x34, 0, 7]);
        // A packet with its checksum in place sums to zero.
        assert_eq!(internet_checksum(&p), 0);
        assert_eq!(
            ipv4_header_len(&[0x45, 0, 0, 28, 0, 0, 0, 0, 64, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]),
            Some(20)
        );
        assert_eq!(ipv4_header_len(&[0x00, 0, 0, 0, 0, 7, 0, 1]), None);
        assert_eq!(ipv4_header_len(&[0x46, 0, 0]), None);
    }

    #[test]
    fn a_round_trip_takes_the_kernel_stamp_when_it_fits() {
        let sent = Instant::now();
        let at = sent + Duration::from_micros(500);
        let sent_ns = 1_000_000_000;
        // Arrived 120 µs after the send, read 500 µs after it.
        assert_eq!(
            rtt(sent, sent_ns, at, Some(sent_ns + 120_000)),
            Duration::from_micros(120)
        );
        // No stamp, one before the send, or one after the read: the reading.
        assert_eq!(rtt(sent, sent_ns, at, None), Duration::from_micros(500));
        assert_eq!(
            rtt(sent, sent_ns, at, Some(sent_ns - 1)),
            Duration::from_micros(500)
        );
        assert_eq!(
            rtt(sent, sent_ns, at, Some(sent_ns + 600_000)),
            Duration::from_micros(500)
        );
    }

    #[test]
    fn echo_requests_carry_their_sequence() {
        let p = echo_request(false, 0x1234, 56);
        assert_eq!((p.len(), p[0], p[6], p[7]), (64, 8, 0x12, 0x34));
        assert_eq!(echo_request(true, 1, 0)[0], 128);
    }
}
