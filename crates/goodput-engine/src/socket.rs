//! Socket setup shared by every test kind: options, binding, `TCP_INFO`,
//! errno names and the open-file limit.

use std::io;
use std::mem::{offset_of, size_of};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;
use std::time::Duration;

use goodput_core::result::TcpInfoSnapshot;
use socket2::{Domain, Protocol, SockRef, Socket, TcpKeepalive, Type};

/// Socket options a user can set on every data socket.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SocketOptions {
    /// SO_SNDBUF, bytes.
    pub send_buffer: Option<u32>,
    /// SO_RCVBUF, bytes.
    pub recv_buffer: Option<u32>,
    /// TCP_NODELAY.
    pub no_delay: bool,
    /// TCP_CONGESTION algorithm name.
    pub congestion: Option<String>,
    /// DSCP code point (0-63), written into IP_TOS / IPV6_TCLASS.
    pub dscp: Option<u8>,
    /// SO_KEEPALIVE with this idle time.
    pub keepalive: Option<Duration>,
    /// SO_BINDTODEVICE interface name.
    pub interface: Option<String>,
}

/// An OS error with what goodput was doing when it happened. Kept as the
/// source so the errno survives (see [`errno_of`]).
#[derive(Debug)]
struct Contexted {
    what: String,
    source: io::Error,
}

impl std::fmt::Display for Contexted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.what, self.source)
    }
}

impl std::error::Error for Contexted {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

fn ctx(what: &str, e: io::Error) -> io::Error {
    io::Error::new(
        e.kind(),
        Contexted {
            what: what.to_owned(),
            source: e,
        },
    )
}

/// The errno of an error from this module or from the OS directly.
pub fn errno_of(e: &io::Error) -> Option<i32> {
    e.raw_os_error().or_else(|| {
        e.get_ref()
            .and_then(|inner| inner.downcast_ref::<Contexted>())
            .and_then(|c| c.source.raw_os_error())
    })
}

impl SocketOptions {
    /// Applies the options to `sock`, whose address family is that of `addr`.
    pub fn apply(&self, sock: &SockRef<'_>, addr: &SocketAddr) -> io::Result<()> {
        if let Some(n) = self.send_buffer {
            sock.set_send_buffer_size(n as usize)
                .map_err(|e| ctx("SO_SNDBUF", e))?;
        }
        if let Some(n) = self.recv_buffer {
            sock.set_recv_buffer_size(n as usize)
                .map_err(|e| ctx("SO_RCVBUF", e))?;
        }
        if self.no_delay {
            sock.set_nodelay(true).map_err(|e| ctx("TCP_NODELAY", e))?;
        }
        if let Some(cc) = &self.congestion {
            sock.set_tcp_congestion(cc.as_bytes()).map_err(|e| {
                ctx(
                    &format!(
                        "TCP_CONGESTION '{cc}' (see /proc/sys/net/ipv4/tcp_available_congestion_control)"
                    ),
                    e,
                )
            })?;
        }
        if let Some(d) = self.dscp {
            let tos = u32::from(d) << 2;
            match addr {
                SocketAddr::V4(_) => sock.set_tos(tos).map_err(|e| ctx("IP_TOS", e))?,
                SocketAddr::V6(_) => sock.set_tclass_v6(tos).map_err(|e| ctx("IPV6_TCLASS", e))?,
            }
        }
        if let Some(idle) = self.keepalive {
            let ka = TcpKeepalive::new()
                .with_time(idle)
                .with_interval(idle.max(Duration::from_secs(1)));
            sock.set_tcp_keepalive(&ka).map_err(|e| ctx("SO_KEEPALIVE", e))?;
        }
        if let Some(ifname) = &self.interface {
            sock.bind_device(Some(ifname.as_bytes()))
                .map_err(|e| ctx(&format!("SO_BINDTODEVICE '{ifname}'"), e))?;
        }
        Ok(())
    }
}

/// Tries `opts` and each local address in `binds` on a throwaway TCP socket
/// of every address family among `targets`, so that a bad congestion
/// control, interface or local address stops a run before it starts
/// instead of failing each connection.
pub fn preflight_tcp(targets: &[SocketAddr], binds: &[IpAddr], opts: &SocketOptions) -> io::Result<()> {
    let mut families: Vec<SocketAddr> = Vec::new();
    for t in targets {
        if !families.iter().any(|f| f.is_ipv4() == t.is_ipv4()) {
            families.push(*t);
        }
    }
    for t in &families {
        let s = Socket::new(Domain::for_address(*t), Type::STREAM.cloexec(), None)?;
        opts.apply(&SockRef::from(&s), t)?;
        for b in binds.iter().filter(|b| b.is_ipv4() == t.is_ipv4()) {
            let s = Socket::new(Domain::for_address(*t), Type::STREAM.cloexec(), None)?;
            s.bind(&SocketAddr::new(*b, 0).into())
                .map_err(|e| ctx(&format!("`bind` {b}"), e))?;
        }
    }
    if !binds.is_empty() {
        if let Some(t) = targets
            .iter()
            .find(|t| !binds.iter().any(|b| b.is_ipv4() == t.is_ipv4()))
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "`bind` has no {} address to reach {t} from",
                    if t.is_ipv4() { "IPv4" } else { "IPv6" }
                ),
            ));
        }
    }
    Ok(())
}

/// A non-blocking listening TCP socket with SO_REUSEADDR (and SO_REUSEPORT
/// when asked). For an IPv6 address `only_v6` says whether IPv4 clients are
/// kept out (IPV6_V6ONLY).
pub fn tcp_listener(
    addr: SocketAddr,
    reuse_port: bool,
    only_v6: bool,
    backlog: i32,
) -> io::Result<std::net::TcpListener> {
    let s = Socket::new(Domain::for_address(addr), Type::STREAM.cloexec(), None)?;
    s.set_reuse_address(true)?;
    if reuse_port {
        s.set_reuse_port(true)?;
    }
    if addr.is_ipv6() {
        s.set_only_v6(only_v6)?;
    }
    s.bind(&addr.into())?;
    s.listen(backlog)?;
    s.set_nonblocking(true)?;
    Ok(s.into())
}

/// A new non-blocking TCP socket for `addr`'s family.
pub fn tcp_socket(addr: &SocketAddr) -> io::Result<Socket> {
    let s = Socket::new(
        Domain::for_address(*addr),
        Type::STREAM.nonblocking().cloexec(),
        Some(Protocol::TCP),
    )?;
    Ok(s)
}

/// Binds a client socket. A specific address with port 0 sets
/// `IP_BIND_ADDRESS_NO_PORT`, so the kernel picks the port at connect time
/// from the full 4-tuple space instead of reserving one per address.
pub fn bind_client(sock: &Socket, ip: IpAddr, port: u16) -> io::Result<()> {
    if port == 0 {
        if ip.is_unspecified() {
            return Ok(());
        }
        let one: libc::c_int = 1;
        // SAFETY: plain setsockopt on an owned fd with a c_int value.
        let rc = unsafe {
            libc::setsockopt(
                sock.as_raw_fd(),
                libc::IPPROTO_IP,
                libc::IP_BIND_ADDRESS_NO_PORT,
                (&one as *const libc::c_int).cast(),
                size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(ctx("IP_BIND_ADDRESS_NO_PORT", io::Error::last_os_error()));
        }
    } else {
        sock.set_reuse_address(true)?;
    }
    sock.bind(&SocketAddr::new(ip, port).into())
        .map_err(|e| ctx(&format!("bind to {}", SocketAddr::new(ip, port)), e))
}

/// Linux `struct tcp_info` up to the fields goodput reads (uapi layout; the
/// kernel copies as much as both sides know, and returns the length).
#[repr(C)]
#[derive(Default)]
struct RawTcpInfo {
    state: u8,
    ca_state: u8,
    retransmits: u8,
    probes: u8,
    backoff: u8,
    options: u8,
    wscale: u8,
    flags: u8,
    rto: u32,
    ato: u32,
    snd_mss: u32,
    rcv_mss: u32,
    unacked: u32,
    sacked: u32,
    lost: u32,
    retrans: u32,
    fackets: u32,
    last_data_sent: u32,
    last_ack_sent: u32,
    last_data_recv: u32,
    last_ack_recv: u32,
    pmtu: u32,
    rcv_ssthresh: u32,
    rtt: u32,
    rttvar: u32,
    snd_ssthresh: u32,
    snd_cwnd: u32,
    advmss: u32,
    reordering: u32,
    rcv_rtt: u32,
    rcv_space: u32,
    total_retrans: u32,
    pacing_rate: u64,
    max_pacing_rate: u64,
    bytes_acked: u64,
    bytes_received: u64,
    segs_out: u32,
    segs_in: u32,
    notsent_bytes: u32,
    min_rtt: u32,
    data_segs_in: u32,
    data_segs_out: u32,
    delivery_rate: u64,
    busy_time: u64,
    rwnd_limited: u64,
    sndbuf_limited: u64,
    delivered: u32,
    delivered_ce: u32,
    bytes_sent: u64,
    bytes_retrans: u64,
}

/// Reads `TCP_INFO` from a connected socket.
pub fn tcp_info(fd: &impl AsRawFd) -> io::Result<TcpInfoSnapshot> {
    let mut raw = RawTcpInfo::default();
    let mut len = size_of::<RawTcpInfo>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `raw`, a repr(C)
    // struct of plain integers for which any bit pattern is valid.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut raw as *mut RawTcpInfo).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    let len = len as usize;
    let has = |end: usize| len >= end;
    Ok(TcpInfoSnapshot {
        rtt_us: raw.rtt,
        rttvar_us: raw.rttvar,
        min_rtt_us: has(offset_of!(RawTcpInfo, min_rtt) + 4).then_some(raw.min_rtt),
        snd_cwnd_segments: raw.snd_cwnd,
        snd_mss_bytes: raw.snd_mss,
        total_retrans_segments: raw.total_retrans,
        bytes_retrans: has(offset_of!(RawTcpInfo, bytes_retrans) + 8).then_some(raw.bytes_retrans),
        delivery_rate_bytes_per_second: has(offset_of!(RawTcpInfo, delivery_rate) + 8)
            .then_some(raw.delivery_rate),
        pacing_rate_bytes_per_second: has(offset_of!(RawTcpInfo, pacing_rate) + 8).then_some(raw.pacing_rate),
        pmtu_bytes: Some(raw.pmtu),
    })
}

/// Sets SO_LINGER {on, 0} so that closing sends an RST and leaves no
/// TIME_WAIT behind.
pub fn set_rude_close(fd: &impl std::os::fd::AsFd) -> io::Result<()> {
    SockRef::from(fd).set_linger(Some(Duration::ZERO))
}

/// An IPv4-mapped IPv6 address (as a dual-stack socket reports an IPv4
/// peer) as the IPv4 address it is, so both views compare equal and one
/// ACL entry covers both forms.
pub(crate) fn unmapped_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// Address text as goodput prints it everywhere (`ip:port`, IPv6 in
/// brackets, IPv4-mapped IPv6 shown as IPv4, as iperf3 does).
pub(crate) fn addr_text(a: SocketAddr) -> String {
    match a {
        SocketAddr::V6(v6) => match v6.ip().to_ipv4_mapped() {
            Some(v4) => format!("{v4}:{}", v6.port()),
            None => a.to_string(),
        },
        _ => a.to_string(),
    }
}

/// The outcome recorded for a socket call that failed `during` a phase.
pub(crate) fn network_outcome(during: &str, err: &io::Error) -> goodput_core::result::Outcome {
    let errno = errno_of(err);
    goodput_core::result::Outcome::NetworkError {
        during: during.to_owned(),
        errno,
        name: errno
            .map(errno_name)
            .unwrap_or_else(|| format!("{:?}", err.kind())),
        message: err.to_string(),
    }
}

/// The symbolic name of an errno value (`ECONNRESET`), or `E<n>`.
pub fn errno_name(errno: i32) -> String {
    let name = match errno {
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::EINTR => "EINTR",
        libc::EBADF => "EBADF",
        libc::EAGAIN => "EAGAIN",
        libc::ENOMEM => "ENOMEM",
        libc::EACCES => "EACCES",
        libc::EINVAL => "EINVAL",
        libc::ENFILE => "ENFILE",
        libc::EMFILE => "EMFILE",
        libc::EPIPE => "EPIPE",
        libc::ENODEV => "ENODEV",
        libc::ENOPROTOOPT => "ENOPROTOOPT",
        libc::EADDRINUSE => "EADDRINUSE",
        libc::EADDRNOTAVAIL => "EADDRNOTAVAIL",
        libc::ENETDOWN => "ENETDOWN",
        libc::ENETUNREACH => "ENETUNREACH",
        libc::ENETRESET => "ENETRESET",
        libc::ECONNABORTED => "ECONNABORTED",
        libc::ECONNRESET => "ECONNRESET",
        libc::ENOBUFS => "ENOBUFS",
        libc::EISCONN => "EISCONN",
        libc::ENOTCONN => "ENOTCONN",
        libc::ETIMEDOUT => "ETIMEDOUT",
        libc::ECONNREFUSED => "ECONNREFUSED",
        libc::EHOSTDOWN => "EHOSTDOWN",
        libc::EHOSTUNREACH => "EHOSTUNREACH",
        libc::EINPROGRESS => "EINPROGRESS",
        _ => return format!("E{errno}"),
    };
    name.to_owned()
}

/// Raises the soft RLIMIT_NOFILE to the hard limit; returns the new soft limit.
pub fn raise_open_file_limit() -> io::Result<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid, owned struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return Err(io::Error::last_os_error());
        }
        if lim.rlim_cur < lim.rlim_max {
            let want = libc::rlimit {
                rlim_cur: lim.rlim_max,
                rlim_max: lim.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &want) == 0 {
                lim.rlim_cur = lim.rlim_max;
            }
        }
    }
    Ok(lim.rlim_cur)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn context_keeps_the_errno() {
        let e = ctx(
            "bind to 10.1.2.3:0",
            io::Error::from_raw_os_error(libc::EADDRNOTAVAIL),
        );
        assert_eq!(errno_of(&e), Some(libc::EADDRNOTAVAIL));
        assert!(e.to_string().starts_with("bind to 10.1.2.3:0: "), "{e}");
        assert_eq!(errno_of(&io::Error::other("no errno")), None);
    }

    #[test]
    fn errno_names_are_symbolic() {
        assert_eq!(errno_name(libc::ECONNRESET), "ECONNRESET");
        assert_eq!(errno_name(99999), "E99999");
    }

    #[test]
    fn tcp_info_reads_a_loopback_connection() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let _s = l.accept().unwrap();
        let info = tcp_info(&c).unwrap();
        assert!(info.snd_mss_bytes > 0);
        assert!(info.snd_cwnd_segments > 0);
        assert!(info.min_rtt_us.is_some());
    }
}
