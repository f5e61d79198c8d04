//! A receive low-water mark (`SO_RCVLOWAT`) that follows a TCP flow's own
//! rate, so a fast receiver is woken once per large chunk instead of once
//! per few segments.
//!
//! Why: on a fast path the receiver drains the socket, sleeps in epoll, and
//! the sender's CPU pays for waking it every few dozen microseconds (on
//! loopback the sender's kernel also does the receive processing while the
//! receiver is not inside `recvmsg`). With the mark at about a millisecond
//! of data, Linux wakes the reader only when that much is queued, or when
//! the receive buffer or window runs short, so no flow can stall on it.
//!
//! The mark is never above the bytes still expected (the kernel would not
//! wake the reader for a tail below it), is off (1) for flows slower than
//! [`MIN_MARK`] per millisecond, and is put back to 1 when the owner is
//! dropped, so the control messages read afterwards are not held back.

use std::os::fd::RawFd;

/// Flows that move less than this per millisecond keep the default mark.
const MIN_MARK: u64 = 64 * 1024;
/// The highest mark used.
const MAX_MARK: u64 = 2 * 1024 * 1024;
/// How long the rate is measured before the mark is changed.
const WINDOW_NS: u64 = 10_000_000;
/// The mark is about this much time's worth of the flow.
const MARK_NS: u64 = 1_000_000;

/// One socket's low-water mark and the rate measurement behind it: 16
/// bytes, as it lives in every TCP connection's data phase.
#[derive(Debug)]
pub(crate) struct LowWater {
    /// -1: this flow does not use a mark.
    fd: RawFd,
    /// The mark in the kernel now; 1 is the kernel's default.
    set: u32,
    /// Microseconds, wrapping: only differences are used.
    window_start_us: u32,
    window_bytes: u32,
}

impl LowWater {
    pub(crate) fn new(fd: RawFd) -> Self {
        Self {
            fd,
            set: 1,
            window_start_us: 0,
            window_bytes: 0,
        }
    }

    /// A flow that keeps the kernel's default mark.
    pub(crate) fn off() -> Self {
        Self::new(-1)
    }

    /// After a read of `n` bytes at `now_ns`, with `remaining` bytes still
    /// expected (`u64::MAX` when the flow ends with the peer's FIN).
    pub(crate) fn after_read(&mut self, n: usize, now_ns: u64, remaining: u64) {
        if self.fd < 0 {
            return;
        }
        let now_us = (now_ns / 1000) as u32;
        if self.window_bytes == 0 {
            self.window_start_us = now_us;
        }
        self.window_bytes = self.window_bytes.saturating_add(n.try_into().unwrap_or(u32::MAX));
        let set = u64::from(self.set);
        let mut want = set;
        let elapsed_ns = u64::from(now_us.wrapping_sub(self.window_start_us)) * 1000;
        if elapsed_ns >= WINDOW_NS {
            let mark = u64::from(self.window_bytes) * MARK_NS / elapsed_ns;
            let mark = if mark < MIN_MARK { 1 } else { mark.min(MAX_MARK) };
            // Only a change by half or double is worth a system call.
            if mark > set * 2 || mark < set / 2 || (mark == 1 && set > 1) {
                want = mark;
            }
            self.window_bytes = 0;
        }
        if want > remaining {
            want = remaining.max(1);
        }
        if want != set {
            self.apply(want);
        }
    }

    fn apply(&mut self, mark: u64) {
        if set_mark(self.fd, mark) {
            self.set = mark as u32;
        }
    }
}

fn set_mark(fd: RawFd, mark: u64) -> bool {
    let v = mark.min(i32::MAX as u64) as libc::c_int;
    // SAFETY: passes a pointer to a live c_int and its exact size.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVLOWAT,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    r == 0
}

/// Puts `fd`'s mark back to 1 from outside its reader (which Linux then
/// wakes if bytes are queued). The reader must stop raising it.
pub(crate) fn reset(fd: RawFd) {
    set_mark(fd, 1);
}

impl Drop for LowWater {
    fn drop(&mut self) {
        if self.fd >= 0 && self.set > 1 {
            self.apply(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::fd::AsRawFd;

    fn rcvlowat(fd: RawFd) -> i32 {
        let mut v: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: a live c_int and its size.
        let r = unsafe {
            libc::getsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_RCVLOWAT,
                (&mut v as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        assert_eq!(r, 0);
        v
    }

    /// The highest mark Linux accepts on a socket with an unlocked buffer:
    /// half of `tcp_rmem`'s maximum.
    fn top() -> i32 {
        let rmem = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_rmem").unwrap();
        let max: u64 = rmem.split_whitespace().nth(2).unwrap().parse().unwrap();
        MAX_MARK.min(max / 2) as i32
    }

    fn pair() -> (std::net::TcpStream, std::net::TcpStream) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let a = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        (a, b)
    }

    #[test]
    fn follows_the_rate_and_never_exceeds_what_is_left() {
        let (_a, b) = pair();
        let fd = b.as_raw_fd();
        let mut lw = LowWater::new(fd);
        // 1 MiB in 10 ms = about 100 KiB per millisecond.
        lw.after_read(1 << 20, 1, u64::MAX);
        lw.after_read(0, 1 + WINDOW_NS, u64::MAX);
        assert_eq!(rcvlowat(fd), (1 << 20) / 10);
        // Within half and double of that: no change.
        lw.after_read(1_500_000, 2 + WINDOW_NS, u64::MAX);
        lw.after_read(0, 2 + 2 * WINDOW_NS, u64::MAX);
        assert_eq!(rcvlowat(fd), (1 << 20) / 10);
    }

    #[test]
    fn slow_flows_keep_the_default_and_drop_resets() {
        let (mut a, mut b) = pair();
        let fd = b.as_raw_fd();
        {
            let mut lw = LowWater::new(fd);
            // 100 MB in 10 ms: capped at MAX_MARK.
            lw.after_read(100_000_000, 1, u64::MAX);
            lw.after_read(0, 1 + WINDOW_NS, u64::MAX);
            assert_eq!(rcvlowat(fd), top());
            // Only 1000 bytes left: the mark comes down to them at once.
            lw.after_read(10, 2 + WINDOW_NS, 1000);
            assert_eq!(rcvlowat(fd), 1000);
            // 10 kB in the next 10 ms: too slow, back to the default.
            lw.after_read(10_000, 1 + 2 * WINDOW_NS, u64::MAX);
            assert_eq!(rcvlowat(fd), 1);
            lw.after_read(100_000_000, 1 + 3 * WINDOW_NS, u64::MAX);
            lw.after_read(0, 1 + 4 * WINDOW_NS, u64::MAX);
            assert_eq!(rcvlowat(fd), top());
        }
        assert_eq!(rcvlowat(fd), 1, "dropping the owner puts the mark back");
        // And a short message is readable again at once.
        a.write_all(b"hi").unwrap();
        let mut got = [0u8; 2];
        b.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"hi");
    }
}
