//! Batched UDP shared by STAMP and the media stream: `recvmmsg` with kernel
//! receive timestamps, the received TTL / hop limit, the destination address
//! (`IP_PKTINFO` / `IPV6_RECVPKTINFO`) and the UDP GRO segment size;
//! `sendmmsg` that sends each reply from the address its request arrived on;
//! UDP GSO sends of many equal datagrams in one call.

use std::io;
use std::mem::{size_of, zeroed};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::RawFd;

use goodput_core::stamp::MAX_PACKET_LEN;
use socket2::Socket;
use tokio_util::sync::CancellationToken;

/// A service that runs one blocking thread per bound UDP socket (the STAMP
/// reflector, the media service); each thread ends with its counters.
pub(crate) struct SocketThreads<C> {
    threads: Vec<tokio::sync::oneshot::Receiver<C>>,
}

impl<C: Send + 'static> SocketThreads<C> {
    /// Starts `serve(socket, spec, cancel)` on a thread named `name` per socket.
    pub(crate) fn spawn<S: Send + Sync + 'static>(
        name: &str,
        sockets: Vec<Socket>,
        spec: S,
        cancel: &CancellationToken,
        serve: fn(Socket, &S, &CancellationToken) -> C,
    ) -> Self {
        let spec = std::sync::Arc::new(spec);
        let mut threads = Vec::new();
        for s in sockets {
            let (spec, c) = (spec.clone(), cancel.clone());
            let (tx, rx) = tokio::sync::oneshot::channel();
            let spawned = std::thread::Builder::new().name(name.into()).spawn(move || {
                let _ = tx.send(serve(s, &spec, &c));
            });
            if spawned.is_ok() {
                threads.push(rx);
            }
        }
        Self { threads }
    }

    /// Waits for the threads to stop (after the cancel) and adds up their
    /// counters with `add`.
    pub(crate) async fn wait(self, add: impl Fn(&mut C, &C)) -> C
    where
        C: Default,
    {
        let mut total = C::default();
        for rx in self.threads {
            if let Ok(c) = rx.await {
                add(&mut total, &c);
            }
        }
        total
    }
}

/// The addresses `sockets` are bound to (port 0 resolved).
pub(crate) fn bound_addrs(sockets: &[Socket]) -> Vec<SocketAddr> {
    sockets
        .iter()
        .filter_map(|s| s.local_addr().ok().and_then(|a| a.as_socket()))
        .collect()
}

/// Control-message space per datagram (timestamp, TTL, pktinfo with room).
const CTRL_LEN: usize = 256;

pub(crate) fn setsockopt_int(fd: RawFd, level: i32, name: i32, v: i32) -> io::Result<()> {
    // SAFETY: passes a pointer to a live i32 and its exact size.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&v as *const i32).cast(),
            size_of::<i32>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Asks the kernel for receive timestamps, the TTL / hop limit and, when
/// `pktinfo`, the destination address of every datagram.
pub(crate) fn enable_ancillary(fd: RawFd, v6: bool, pktinfo: bool) -> io::Result<()> {
    setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1)?;
    if v6 {
        setsockopt_int(fd, libc::IPPROTO_IPV6, libc::IPV6_RECVHOPLIMIT, 1)?;
        if pktinfo {
            setsockopt_int(fd, libc::IPPROTO_IPV6, libc::IPV6_RECVPKTINFO, 1)?;
        }
    } else {
        setsockopt_int(fd, libc::IPPROTO_IP, libc::IP_RECVTTL, 1)?;
        if pktinfo {
            setsockopt_int(fd, libc::IPPROTO_IP, libc::IP_PKTINFO, 1)?;
        }
    }
    Ok(())
}

/// Asks the kernel to deliver coalesced runs of datagrams (UDP GRO), each
/// buffer reporting its segment size; false when the kernel cannot.
pub(crate) fn enable_gro(fd: RawFd) -> bool {
    setsockopt_int(fd, libc::SOL_UDP, libc::UDP_GRO, 1).is_ok()
}

/// Receives datagrams only: timestamps, no TTL or pktinfo.
pub(crate) fn enable_timestamps(fd: RawFd) -> io::Result<()> {
    setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1)
}

/// Sets a socket buffer to `bytes`, past `rmem_max`/`wmem_max` when the
/// process may (`SO_RCVBUFFORCE`/`SO_SNDBUFFORCE`), else as far as allowed.
pub(crate) fn set_buffer(fd: RawFd, recv: bool, bytes: usize) {
    let v = i32::try_from(bytes).unwrap_or(i32::MAX);
    let (force, plain) = if recv {
        (libc::SO_RCVBUFFORCE, libc::SO_RCVBUF)
    } else {
        (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF)
    };
    if setsockopt_int(fd, libc::SOL_SOCKET, force, v).is_err() {
        let _ = setsockopt_int(fd, libc::SOL_SOCKET, plain, v);
    }
}

/// Sets the TTL / hop limit of outgoing unicast packets.
pub(crate) fn set_ttl(fd: RawFd, v6: bool, ttl: u8) -> io::Result<()> {
    if v6 {
        setsockopt_int(fd, libc::IPPROTO_IPV6, libc::IPV6_UNICAST_HOPS, i32::from(ttl))
    } else {
        setsockopt_int(fd, libc::IPPROTO_IP, libc::IP_TTL, i32::from(ttl))
    }
}

/// What the kernel told us about one received datagram.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RecvMeta {
    /// Bytes received (the datagram may have been longer: see `truncated`).
    pub(crate) len: usize,
    /// The datagram did not fit the buffer.
    pub(crate) truncated: bool,
    /// Source address.
    pub(crate) src: SocketAddr,
    /// Kernel receive time, Unix nanoseconds.
    pub(crate) t_ns: Option<i64>,
    /// TTL / hop limit.
    pub(crate) ttl: Option<u8>,
    /// Local address the datagram was sent to, and the interface.
    pub(crate) dst: Option<(IpAddr, u32)>,
    /// With UDP GRO: the buffer holds several datagrams of this size (the
    /// last may be shorter).
    pub(crate) segment: Option<u16>,
}

fn sockaddr_to_std(ss: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match i32::from(ss.ss_family) {
        libc::AF_INET => {
            // SAFETY: the family says this storage holds a sockaddr_in.
            let a: &libc::sockaddr_in = unsafe { &*(ss as *const libc::sockaddr_storage).cast() };
            Some(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr)),
                u16::from_be(a.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says this storage holds a sockaddr_in6.
            let a: &libc::sockaddr_in6 = unsafe { &*(ss as *const libc::sockaddr_storage).cast() };
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(a.sin6_addr.s6_addr),
                u16::from_be(a.sin6_port),
                a.sin6_flowinfo,
                a.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

fn std_to_sockaddr(a: SocketAddr, ss: &mut libc::sockaddr_storage) -> libc::socklen_t {
    // SAFETY: sockaddr_storage is large and aligned enough for either form;
    // the writes below stay within the chosen struct.
    unsafe {
        match a {
            SocketAddr::V4(v4) => {
                let s: &mut libc::sockaddr_in = &mut *(ss as *mut libc::sockaddr_storage).cast();
                *s = zeroed();
                s.sin_family = libc::AF_INET as libc::sa_family_t;
                s.sin_port = v4.port().to_be();
                s.sin_addr.s_addr = u32::from(*v4.ip()).to_be();
                size_of::<libc::sockaddr_in>() as libc::socklen_t
            }
            SocketAddr::V6(v6) => {
                let s: &mut libc::sockaddr_in6 = &mut *(ss as *mut libc::sockaddr_storage).cast();
                *s = zeroed();
                s.sin6_family = libc::AF_INET6 as libc::sa_family_t;
                s.sin6_port = v6.port().to_be();
                s.sin6_addr.s6_addr = v6.ip().octets();
                s.sin6_flowinfo = v6.flowinfo();
                s.sin6_scope_id = v6.scope_id();
                size_of::<libc::sockaddr_in6>() as libc::socklen_t
            }
        }
    }
}

/// Receive time, TTL, destination and GRO segment size of one datagram.
type Ancillary = (Option<i64>, Option<u8>, Option<(IpAddr, u32)>, Option<u16>);

/// Reads the control messages of one received datagram.
///
/// # Safety
/// `hdr` must describe a control buffer the kernel has just filled.
unsafe fn parse_cmsgs(hdr: &libc::msghdr) -> Ancillary {
    let (mut t, mut ttl, mut dst, mut seg) = (None, None, None, None);
    let mut c = libc::CMSG_FIRSTHDR(hdr);
    while !c.is_null() {
        let h = &*c;
        let data = libc::CMSG_DATA(c);
        match (h.cmsg_level, h.cmsg_type) {
            (libc::SOL_SOCKET, libc::SCM_TIMESTAMPNS) => {
                let ts: libc::timespec = std::ptr::read_unaligned(data.cast());
                t = Some(ts.tv_sec * 1_000_000_000 + ts.tv_nsec);
            }
            (libc::IPPROTO_IP, libc::IP_TTL) | (libc::IPPROTO_IPV6, libc::IPV6_HOPLIMIT) => {
                let v: i32 = std::ptr::read_unaligned(data.cast());
                ttl = u8::try_from(v).ok();
            }
            (libc::IPPROTO_IP, libc::IP_PKTINFO) => {
                let p: libc::in_pktinfo = std::ptr::read_unaligned(data.cast());
                dst = Some((
                    IpAddr::V4(Ipv4Addr::from(u32::from_be(p.ipi_addr.s_addr))),
                    p.ipi_ifindex as u32,
                ));
            }
            (libc::IPPROTO_IPV6, libc::IPV6_PKTINFO) => {
                let p: libc::in6_pktinfo = std::ptr::read_unaligned(data.cast());
                dst = Some((IpAddr::V6(Ipv6Addr::from(p.ipi6_addr.s6_addr)), p.ipi6_ifindex));
            }
            (libc::SOL_UDP, libc::UDP_GRO) => {
                let v: i32 = std::ptr::read_unaligned(data.cast());
                seg = u16::try_from(v).ok().filter(|&s| s > 0);
            }
            _ => {}
        }
        c = libc::CMSG_NXTHDR(hdr, c);
    }
    (t, ttl, dst, seg)
}

/// Buffers for receiving up to `n` datagrams in one `recvmmsg`.
pub(crate) struct RecvBatch {
    bufs: Vec<u8>,
    addrs: Vec<libc::sockaddr_storage>,
    ctrl: Vec<[u64; CTRL_LEN / 8]>,
    iov: Vec<libc::iovec>,
    hdrs: Vec<libc::mmsghdr>,
    meta: Vec<RecvMeta>,
    buf_len: usize,
}

// SAFETY: the raw pointers inside are rebuilt before every call and only
// point into the batch's own vectors.
unsafe impl Send for RecvBatch {}

impl RecvBatch {
    /// Room for `n` datagrams of up to `buf_len` bytes.
    pub(crate) fn new(n: usize, buf_len: usize) -> Self {
        Self {
            bufs: vec![0; n * buf_len],
            // SAFETY: all-zero is a valid sockaddr_storage / iovec / mmsghdr.
            addrs: vec![unsafe { zeroed() }; n],
            ctrl: vec![[0; CTRL_LEN / 8]; n],
            iov: vec![unsafe { zeroed() }; n],
            hdrs: vec![unsafe { zeroed() }; n],
            meta: Vec::with_capacity(n),
            buf_len,
        }
    }

    /// Receives what is queued (up to the batch size) without blocking;
    /// returns how many datagrams arrived (0 when none was waiting).
    pub(crate) fn recv(&mut self, fd: RawFd) -> io::Result<usize> {
        let n = self.hdrs.len();
        for i in 0..n {
            self.iov[i] = libc::iovec {
                iov_base: self.bufs[i * self.buf_len..].as_mut_ptr().cast(),
                iov_len: self.buf_len,
            };
            let h = &mut self.hdrs[i].msg_hdr;
            h.msg_name = (&mut self.addrs[i] as *mut libc::sockaddr_storage).cast();
            h.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            h.msg_iov = &mut self.iov[i];
            h.msg_iovlen = 1;
            h.msg_control = self.ctrl[i].as_mut_ptr().cast();
            h.msg_controllen = CTRL_LEN;
            h.msg_flags = 0;
            self.hdrs[i].msg_len = 0;
        }
        // SAFETY: every header points at buffers owned by `self` that live
        // for the call, with their true lengths.
        let got = unsafe {
            libc::recvmmsg(
                fd,
                self.hdrs.as_mut_ptr(),
                n as u32,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if got < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(0),
                _ => Err(e),
            };
        }
        self.meta.clear();
        for i in 0..got as usize {
            let h = &self.hdrs[i];
            // SAFETY: the kernel filled this header's control buffer.
            let (t_ns, ttl, dst, segment) = unsafe { parse_cmsgs(&h.msg_hdr) };
            let src = sockaddr_to_std(&self.addrs[i]).unwrap_or(SocketAddr::from(([0, 0, 0, 0], 0)));
            self.meta.push(RecvMeta {
                len: h.msg_len as usize,
                truncated: h.msg_hdr.msg_flags & libc::MSG_TRUNC != 0,
                src,
                t_ns,
                ttl,
                dst,
                segment,
            });
        }
        Ok(got as usize)
    }

    /// The `i`th datagram of the last receive and what came with it.
    pub(crate) fn get(&self, i: usize) -> (&[u8], RecvMeta) {
        let m = self.meta[i];
        let start = i * self.buf_len;
        (&self.bufs[start..start + m.len.min(self.buf_len)], m)
    }
}

/// Replies collected for one `sendmmsg`.
pub(crate) struct SendBatch {
    bufs: Vec<u8>,
    lens: Vec<usize>,
    addrs: Vec<libc::sockaddr_storage>,
    addr_lens: Vec<libc::socklen_t>,
    ctrl: Vec<[u64; CTRL_LEN / 8]>,
    ctrl_lens: Vec<usize>,
    iov: Vec<libc::iovec>,
    hdrs: Vec<libc::mmsghdr>,
    count: usize,
    /// Room per packet, bytes.
    stride: usize,
}

// SAFETY: as for RecvBatch.
unsafe impl Send for SendBatch {}

impl SendBatch {
    /// Room for `n` packets of up to [`MAX_PACKET_LEN`] bytes.
    pub(crate) fn new(n: usize) -> Self {
        Self::with_packet_len(n, MAX_PACKET_LEN)
    }

    /// Room for `n` packets of up to `len` bytes (a sender that knows its
    /// packets' size keeps only that much resident).
    pub(crate) fn with_packet_len(n: usize, len: usize) -> Self {
        Self {
            bufs: vec![0; n * len],
            lens: vec![0; n],
            // SAFETY: all-zero is valid for these C structs.
            addrs: vec![unsafe { zeroed() }; n],
            addr_lens: vec![0; n],
            ctrl: vec![[0; CTRL_LEN / 8]; n],
            ctrl_lens: vec![0; n],
            iov: vec![unsafe { zeroed() }; n],
            hdrs: vec![unsafe { zeroed() }; n],
            count: 0,
            stride: len,
        }
    }

    /// Packets queued.
    pub(crate) fn len(&self) -> usize {
        self.count
    }

    /// Whether the batch is full.
    pub(crate) fn is_full(&self) -> bool {
        self.count == self.lens.len()
    }

    /// The buffer for the next packet; call [`SendBatch::push`] to keep it.
    pub(crate) fn next_buf(&mut self) -> &mut [u8] {
        let i = self.count;
        &mut self.bufs[i * self.stride..(i + 1) * self.stride]
    }

    /// Queues the packet written into [`SendBatch::next_buf`]: `len` bytes to
    /// `to`, leaving from local address `from` (with its interface) when given.
    pub(crate) fn push(&mut self, len: usize, to: SocketAddr, from: Option<(IpAddr, u32)>) {
        let i = self.count;
        self.lens[i] = len;
        self.addr_lens[i] = std_to_sockaddr(to, &mut self.addrs[i]);
        self.ctrl_lens[i] = match from {
            None => 0,
            Some((ip, ifindex)) => write_pktinfo(&mut self.ctrl[i], ip, ifindex),
        };
        self.count += 1;
    }

    /// Sends every queued packet; returns how many the kernel refused.
    /// T3 is written into each (at `ts_at`) by `stamp` just before the call.
    pub(crate) fn flush(&mut self, fd: RawFd, stamp: impl Fn(&mut [u8])) -> usize {
        self.flush_each(fd, |_, p| stamp(p), |_, _| {})
    }

    /// Sends every queued packet, `stamp(i, packet)` writing each one's
    /// timestamp just before the call; `refused(i, error)` is told of each
    /// packet the kernel refused (it never left). Returns how many it
    /// refused.
    pub(crate) fn flush_each(
        &mut self,
        fd: RawFd,
        mut stamp: impl FnMut(usize, &mut [u8]),
        mut refused: impl FnMut(usize, io::Error),
    ) -> usize {
        let stride = self.stride;
        let mut failed = 0;
        let mut start = 0;
        for i in 0..self.count {
            let len = self.lens[i];
            stamp(i, &mut self.bufs[i * stride..i * stride + len]);
        }
        while start < self.count {
            let n = self.count - start;
            for i in start..self.count {
                self.iov[i] = libc::iovec {
                    iov_base: self.bufs[i * stride..].as_mut_ptr().cast(),
                    iov_len: self.lens[i],
                };
                let h = &mut self.hdrs[i].msg_hdr;
                h.msg_name = (&mut self.addrs[i] as *mut libc::sockaddr_storage).cast();
                h.msg_namelen = self.addr_lens[i];
                h.msg_iov = &mut self.iov[i];
                h.msg_iovlen = 1;
                if self.ctrl_lens[i] > 0 {
                    h.msg_control = self.ctrl[i].as_mut_ptr().cast();
                    h.msg_controllen = self.ctrl_lens[i];
                } else {
                    h.msg_control = std::ptr::null_mut();
                    h.msg_controllen = 0;
                }
                h.msg_flags = 0;
            }
            // SAFETY: the headers point at buffers owned by `self`.
            let sent = unsafe { libc::sendmmsg(fd, self.hdrs[start..].as_mut_ptr(), n as u32, 0) };
            if sent <= 0 {
                // The first packet was refused: count it and go on with the rest.
                let e = if sent < 0 {
                    io::Error::last_os_error()
                } else {
                    io::ErrorKind::WriteZero.into()
                };
                refused(start, e);
                failed += 1;
                start += 1;
            } else {
                start += sent as usize;
            }
        }
        self.count = 0;
        failed
    }
}

/// Writes an IP_PKTINFO / IPV6_PKTINFO control message choosing the source
/// address; returns the control length.
fn write_pktinfo(ctrl: &mut [u64; CTRL_LEN / 8], ip: IpAddr, ifindex: u32) -> usize {
    // SAFETY: builds one control message inside the aligned buffer with the
    // CMSG macros, which respect its length.
    unsafe {
        let mut hdr: libc::msghdr = zeroed();
        hdr.msg_control = ctrl.as_mut_ptr().cast();
        let (level, ty, data_len) = match ip {
            IpAddr::V4(_) => (libc::IPPROTO_IP, libc::IP_PKTINFO, size_of::<libc::in_pktinfo>()),
            IpAddr::V6(_) => (
                libc::IPPROTO_IPV6,
                libc::IPV6_PKTINFO,
                size_of::<libc::in6_pktinfo>(),
            ),
        };
        let space = libc::CMSG_SPACE(data_len as u32) as usize;
        hdr.msg_controllen = space;
        let c = libc::CMSG_FIRSTHDR(&hdr);
        (*c).cmsg_level = level;
        (*c).cmsg_type = ty;
        (*c).cmsg_len = libc::CMSG_LEN(data_len as u32) as usize;
        let data = libc::CMSG_DATA(c);
        match ip {
            IpAddr::V4(v4) => {
                let mut p: libc::in_pktinfo = zeroed();
                // The source address to use; the interface is left to routing.
                p.ipi_spec_dst.s_addr = u32::from(v4).to_be();
                std::ptr::write_unaligned(data.cast(), p);
            }
            IpAddr::V6(v6) => {
                let mut p: libc::in6_pktinfo = zeroed();
                p.ipi6_addr.s6_addr = v6.octets();
                // Link-local sources need their interface.
                p.ipi6_ifindex = if v6.segments()[0] & 0xffc0 == 0xfe80 {
                    ifindex
                } else {
                    0
                };
                std::ptr::write_unaligned(data.cast(), p);
            }
        }
        space
    }
}

/// Receives one datagram on a (connected) socket without blocking, with
/// its kernel timestamp and TTL. `Ok(None)` when nothing is waiting.
pub(crate) fn recv_one(fd: RawFd, buf: &mut [u8]) -> io::Result<Option<RecvMeta>> {
    let mut batch_ctrl = [0u64; CTRL_LEN / 8];
    // SAFETY: zeroed C structs, then pointed at live local buffers.
    unsafe {
        let mut ss: libc::sockaddr_storage = zeroed();
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        let mut h: libc::msghdr = zeroed();
        h.msg_name = (&mut ss as *mut libc::sockaddr_storage).cast();
        h.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        h.msg_iov = &mut iov;
        h.msg_iovlen = 1;
        h.msg_control = batch_ctrl.as_mut_ptr().cast();
        h.msg_controllen = CTRL_LEN;
        let n = libc::recvmsg(fd, &mut h, libc::MSG_DONTWAIT);
        if n < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock => Ok(None),
                _ => Err(e),
            };
        }
        let (t_ns, ttl, dst, segment) = parse_cmsgs(&h);
        Ok(Some(RecvMeta {
            len: n as usize,
            truncated: h.msg_flags & libc::MSG_TRUNC != 0,
            src: sockaddr_to_std(&ss).unwrap_or(SocketAddr::from(([0, 0, 0, 0], 0))),
            t_ns,
            ttl,
            dst,
            segment,
        }))
    }
}

/// What became of a batch of datagrams: how many the kernel took, how
/// many it refused, and the first refusal.
#[derive(Debug, Default)]
pub(crate) struct Batch {
    /// Datagrams the kernel took.
    pub(crate) taken: usize,
    /// Datagrams refused (never sent).
    pub(crate) refused: usize,
    /// Why, for the first refused one.
    pub(crate) error: Option<io::Error>,
}

impl Batch {
    fn all_refused(count: usize, e: io::Error) -> Self {
        Batch {
            taken: 0,
            refused: count,
            error: Some(e),
        }
    }
}

/// Sends `count` datagrams with `send_from(i)`, which sends datagrams `i..`
/// in one call and returns how many the kernel took (`sendmmsg` stops at
/// the first refused one). A refused datagram is skipped and the rest are
/// still sent, so a firewall rule that drops one datagram costs that one:
/// `taken + refused == count`, exactly. A full send buffer (`EAGAIN`)
/// refuses the rest of the batch. At most `count` calls.
fn send_batch(count: usize, mut send_from: impl FnMut(usize) -> io::Result<usize>) -> Batch {
    let mut b = Batch::default();
    while b.taken + b.refused < count {
        let at = b.taken + b.refused;
        match send_from(at) {
            Ok(0) => {
                b.refused = count - b.taken;
                b.error.get_or_insert_with(|| io::ErrorKind::WriteZero.into());
            }
            Ok(n) => b.taken += n.min(count - at),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                b.refused = count - b.taken;
                b.error.get_or_insert(e);
            }
            Err(e) => {
                b.refused += 1;
                b.error.get_or_insert(e);
            }
        }
    }
    b
}

/// Sends `buf` as datagrams of `segment` bytes each (the last may be
/// shorter) to `to` (or the connected peer when `None`), from local address
/// `from` when given (`IP_PKTINFO`/`IPV6_PKTINFO`): one `sendmsg`
/// with UDP GSO when `gso`, else `sendmmsg` of them all (see
/// [`send_batch`]: one refused datagram costs only itself). Returns the
/// datagrams the kernel took and those it refused. A GSO send the device
/// refuses (`EIO`, `EINVAL`) is reported as `Unsupported` so the caller can
/// stop using it; any other refusal of a GSO send refuses all its
/// datagrams.
pub(crate) fn send_segments(
    fd: RawFd,
    to: Option<SocketAddr>,
    from: Option<(IpAddr, u32)>,
    buf: &[u8],
    segment: usize,
    gso: bool,
) -> io::Result<Batch> {
    if buf.is_empty() {
        return Ok(Batch::default());
    }
    let count = buf.len().div_ceil(segment);
    let mut ctrl = [0u64; CTRL_LEN / 8];
    let info_len = from.map_or(0, |(ip, ifindex)| write_pktinfo(&mut ctrl, ip, ifindex));
    // SAFETY: zeroed C structs pointed at live local buffers for the call.
    unsafe {
        let mut ss: libc::sockaddr_storage = zeroed();
        let name_len = to.map_or(0, |a| std_to_sockaddr(a, &mut ss));
        let name: *mut libc::c_void = if to.is_some() {
            (&mut ss as *mut libc::sockaddr_storage).cast()
        } else {
            std::ptr::null_mut()
        };
        if gso && count > 1 {
            let mut iov = libc::iovec {
                iov_base: buf.as_ptr() as *mut libc::c_void,
                iov_len: buf.len(),
            };
            let mut h: libc::msghdr = zeroed();
            h.msg_name = name;
            h.msg_namelen = name_len;
            h.msg_iov = &mut iov;
            h.msg_iovlen = 1;
            h.msg_control = ctrl.as_mut_ptr().cast();
            let space = libc::CMSG_SPACE(size_of::<u16>() as u32) as usize;
            // The segment size goes after the pktinfo message, if any.
            h.msg_controllen = info_len + space;
            // `info_len` is a CMSG_SPACE, so the second header is aligned.
            let c: *mut libc::cmsghdr = ctrl.as_mut_ptr().cast::<u8>().add(info_len).cast();
            (*c).cmsg_level = libc::SOL_UDP;
            (*c).cmsg_type = libc::UDP_SEGMENT;
            (*c).cmsg_len = libc::CMSG_LEN(size_of::<u16>() as u32) as usize;
            std::ptr::write_unaligned(libc::CMSG_DATA(c).cast(), segment as u16);
            let n = libc::sendmsg(fd, &h, 0);
            if n < 0 {
                let e = io::Error::last_os_error();
                return match e.raw_os_error() {
                    Some(libc::EIO) | Some(libc::EINVAL) | Some(libc::EOPNOTSUPP) => {
                        Err(io::Error::new(io::ErrorKind::Unsupported, e))
                    }
                    _ => Ok(Batch::all_refused(count, e)),
                };
            }
            return Ok(Batch {
                taken: count,
                ..Batch::default()
            });
        }
        let mut iovs: Vec<libc::iovec> = buf
            .chunks(segment)
            .map(|c| libc::iovec {
                iov_base: c.as_ptr() as *mut libc::c_void,
                iov_len: c.len(),
            })
            .collect();
        let mut hdrs: Vec<libc::mmsghdr> = (0..count).map(|_| zeroed()).collect();
        for (h, iov) in hdrs.iter_mut().zip(iovs.iter_mut()) {
            h.msg_hdr.msg_name = name;
            h.msg_hdr.msg_namelen = name_len;
            h.msg_hdr.msg_iov = iov;
            h.msg_hdr.msg_iovlen = 1;
            if info_len > 0 {
                h.msg_hdr.msg_control = ctrl.as_mut_ptr().cast();
                h.msg_hdr.msg_controllen = info_len;
            }
        }
        Ok(send_batch(count, |at| {
            let n = libc::sendmmsg(fd, hdrs[at..].as_mut_ptr(), (count - at) as u32, 0);
            if n < 0 {
                Err(io::Error::last_os_error())
            } else {
                Ok(n as usize)
            }
        }))
    }
}

/// The reason a send failed, as a send-failure list keeps it: the
/// symbolic errno and what it usually means for a test packet.
pub(crate) fn send_failure_reason(e: &io::Error) -> (String, String) {
    let Some(errno) = e.raw_os_error() else {
        return (format!("{:?}", e.kind()), e.to_string());
    };
    let meaning = match errno {
        libc::EPERM | libc::EACCES => "operation not permitted, e.g. a firewall drops them on the way out",
        libc::ENOBUFS => "no buffer space: the interface's queue was full",
        libc::EAGAIN => "the socket's send buffer stayed full",
        libc::ECONNREFUSED => "refused: an ICMP port unreachable came back for an earlier packet",
        libc::ENETUNREACH | libc::EHOSTUNREACH => "no route to the peer",
        libc::ENETDOWN => "the network is down",
        libc::EMSGSIZE => "larger than the path's MTU",
        _ => "",
    };
    let words = if meaning.is_empty() {
        // The system's words without its "(os error N)" tail.
        let text = e.to_string();
        text.split(" (os error").next().unwrap_or("").to_lowercase()
    } else {
        meaning.to_owned()
    };
    (crate::socket::errno_name(errno), words)
}

/// The reason kept for packets whose send time passed before the sender
/// could send them (it fell behind by more than an interval).
pub(crate) const LATE_REASON: (&str, &str) = (
    "late",
    "their time passed before the sender could send them (it fell behind)",
);

/// The realtime clock, Unix nanoseconds.
pub(crate) fn now_unix_ns() -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

/// The kernel clock's error estimate (`ntp_adjtime` read-only): its
/// estimated error and whether it is synchronised. A clock the kernel
/// cannot describe counts as unsynchronised with a 1 s error.
pub(crate) fn clock_error() -> goodput_core::stamp::ErrorEstimate {
    // SAFETY: modes 0 only reads; the struct is plain data.
    let (state, tx) = unsafe {
        let mut tx: libc::timex = zeroed();
        let state = libc::ntp_adjtime(&mut tx);
        (state, tx)
    };
    if state < 0 {
        return goodput_core::stamp::ErrorEstimate::from_clock(1_000_000, false);
    }
    let synced = state != libc::TIME_ERROR && tx.status & libc::STA_UNSYNC == 0;
    goodput_core::stamp::ErrorEstimate::from_clock(tx.esterror.max(0) as u64, synced)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A kernel that refuses the datagrams in `refuse` (as `sendmmsg`
    /// does: it takes those before the first refused one, and fails on
    /// that one when it comes first).
    fn kernel(refuse: &[usize], errno: i32) -> impl FnMut(usize) -> io::Result<usize> + '_ {
        move |at| {
            let next = refuse.iter().copied().filter(|&r| r >= at).min();
            match next {
                Some(r) if r == at => Err(io::Error::from_raw_os_error(errno)),
                Some(r) => Ok(r - at),
                None => Ok(usize::MAX),
            }
        }
    }

    #[test]
    fn a_refused_datagram_mid_batch_costs_only_itself() {
        let b = send_batch(10, kernel(&[3, 4, 9], libc::EPERM));
        assert_eq!((b.taken, b.refused), (7, 3));
        assert_eq!(b.error.unwrap().raw_os_error(), Some(libc::EPERM));
        let b = send_batch(5, kernel(&[0, 1, 2, 3, 4], libc::ENOBUFS));
        assert_eq!((b.taken, b.refused), (0, 5));
        let b = send_batch(4, kernel(&[], libc::EPERM));
        assert_eq!((b.taken, b.refused), (4, 0));
        assert!(b.error.is_none());
    }

    #[test]
    fn a_full_send_buffer_refuses_the_rest_of_the_batch() {
        let b = send_batch(8, kernel(&[2], libc::EAGAIN));
        assert_eq!((b.taken, b.refused), (2, 6));
    }

    #[test]
    fn send_failure_reasons_name_the_errno() {
        let (r, m) = send_failure_reason(&io::Error::from_raw_os_error(libc::EPERM));
        assert_eq!(r, "EPERM");
        assert!(m.contains("firewall"), "{m}");
        let (r, m) = send_failure_reason(&io::Error::from_raw_os_error(libc::ENOSPC));
        assert_eq!(r, "E28");
        assert_eq!(m, "no space left on device");
    }
}
