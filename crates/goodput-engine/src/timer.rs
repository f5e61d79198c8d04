//! A sleep precise to microseconds for frame clocks. tokio's timer wheel
//! ticks in milliseconds and rounds every deadline up to its next tick, so
//! a frame due at 33.3 ms leaves at 34 ms or later: on average about a
//! millisecond late, which is exactly what a media test measures. A
//! `timerfd` armed for the deadline wakes the task through the reactor
//! within tens of microseconds instead, without a thread of its own.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::Instant;

use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

/// Most timerfds alive at once in the process. Each costs a descriptor,
/// and a peer chooses how many media streams run, so past this the frame
/// clocks fall back to tokio's sleep rather than take the descriptors
/// every other service needs.
const MAX_TIMERS: usize = 1024;

static LIVE: AtomicUsize = AtomicUsize::new(0);

/// One timer; a task that sleeps on a frame clock keeps one for its life.
pub(crate) struct PreciseTimer {
    /// `None` where no timerfd could be made or the budget is spent:
    /// tokio's sleep then.
    fd: Option<AsyncFd<OwnedFd>>,
}

impl Drop for PreciseTimer {
    fn drop(&mut self) {
        if self.fd.is_some() {
            LIVE.fetch_sub(1, Relaxed);
        }
    }
}

impl PreciseTimer {
    /// A timer on `CLOCK_MONOTONIC`, the clock `Instant` reads on Linux.
    /// Needs a tokio runtime with I/O enabled.
    pub(crate) fn new() -> Self {
        if LIVE.fetch_add(1, Relaxed) >= MAX_TIMERS {
            LIVE.fetch_sub(1, Relaxed);
            return Self { fd: None };
        }
        let timer = Self::make();
        if timer.fd.is_none() {
            LIVE.fetch_sub(1, Relaxed);
        }
        timer
    }

    fn make() -> Self {
        // SAFETY: creates a descriptor; no pointers are passed.
        let raw =
            unsafe { libc::timerfd_create(libc::CLOCK_MONOTONIC, libc::TFD_NONBLOCK | libc::TFD_CLOEXEC) };
        let fd = (raw >= 0)
            // SAFETY: `raw` is a descriptor just made and owned by nothing else.
            .then(|| unsafe { OwnedFd::from_raw_fd(raw) })
            // SAFETY: an OwnedFd stays open and is the same descriptor for
            // as long as the AsyncFd that owns it.
            .and_then(|fd| unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }.ok());
        Self { fd }
    }

    /// Returns at `due` (at once if it has passed).
    pub(crate) async fn sleep_until(&self, due: Instant) {
        let Some(left) = due
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
        else {
            return;
        };
        let Some(fd) = &self.fd else {
            tokio::time::sleep_until(due.into()).await;
            return;
        };
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: left.as_secs() as libc::time_t,
                tv_nsec: left.subsec_nanos() as libc::c_long,
            },
        };
        // SAFETY: `spec` is a valid itimerspec that outlives the call; the
        // old value is not asked for.
        let armed = unsafe { libc::timerfd_settime(fd.as_raw_fd(), 0, &spec, std::ptr::null_mut()) };
        if armed != 0 {
            tokio::time::sleep_until(due.into()).await;
            return;
        }
        loop {
            let Ok(mut ready) = fd.readable().await else {
                tokio::time::sleep_until(due.into()).await;
                return;
            };
            let mut expirations = 0u64;
            // SAFETY: reads 8 bytes into a u64 this function owns.
            let n = unsafe {
                libc::read(
                    fd.as_raw_fd(),
                    (&mut expirations as *mut u64).cast(),
                    std::mem::size_of::<u64>(),
                )
            };
            if n == 8 {
                return;
            }
            if io::Error::last_os_error().kind() == io::ErrorKind::WouldBlock {
                ready.clear_ready();
            } else {
                tokio::time::sleep_until(due.into()).await;
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(flavor = "current_thread")]
    async fn wakes_within_a_fraction_of_a_millisecond() {
        let t = PreciseTimer::new();
        assert!(t.fd.is_some(), "timerfd is available on Linux");
        let mut late = Vec::new();
        for k in 1..=20u64 {
            let due = Instant::now() + Duration::from_micros(k * 137);
            t.sleep_until(due).await;
            let now = Instant::now();
            assert!(now >= due, "woke early");
            late.push(now.duration_since(due));
        }
        late.sort();
        // The median: one unlucky wake-up on a busy machine may be late.
        // tokio's sleep, rounding up to its millisecond tick, is about
        // 500 us late at the median here.
        assert!(late[10] < Duration::from_micros(250), "{late:?}");
        // A deadline already passed returns at once.
        t.sleep_until(Instant::now() - Duration::from_millis(1)).await;
    }
}
