//! One connection's control I/O (session messages, ids, markers, waiting for
//! the peer's close), the guard that runs each phase under cancellation and
//! the idle watchdog, and send pacing. The data itself moves in
//! `transfer.rs`. Shared by client and server and by both wire protocols.

use std::future::Future;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use goodput_core::pattern::Mismatch;
use goodput_core::plan::Direction;
use goodput_core::rate::{BurstPacer, RateLimiter, Release};
use goodput_core::session::{Message, WireError, HEADER_LEN, MAX_BODY};
use tokio::io::Interest;
use tokio::net::TcpStream;

use super::Shared;
use crate::counters::RunClock;

/// Why a connection's I/O stopped early.
#[derive(Debug)]
pub(crate) enum Failure {
    /// A socket call failed.
    Net { during: &'static str, err: io::Error },
    /// The peer closed while bytes were still expected.
    Eof { during: &'static str },
    /// A received byte differed from the pattern.
    Mismatch {
        direction: Direction,
        mismatch: Mismatch,
    },
    /// The peer sent bytes after the agreed end.
    TooMuch,
    /// Nothing moved for the idle timeout.
    Idle,
    /// The run is stopping.
    Cancelled,
    /// A session message that does not decode.
    Wire(WireError),
    /// A well-formed session message that is not the one expected.
    BadMessage(String),
}

impl From<WireError> for Failure {
    fn from(e: WireError) -> Self {
        Failure::Wire(e)
    }
}

/// A connected stream with the run's shared state.
pub(crate) struct Link<'a> {
    pub(crate) stream: &'a TcpStream,
    pub(crate) run: &'a Shared,
    /// Bumped on every I/O that moved bytes; the idle watchdog watches it.
    pub(crate) activity: AtomicU64,
}

impl<'a> Link<'a> {
    pub(crate) fn new(stream: &'a TcpStream, run: &'a Shared) -> Self {
        Self {
            stream,
            run,
            activity: AtomicU64::new(0),
        }
    }

    /// Runs one phase of the connection under the run's cancellation and the
    /// idle timeout. One watchdog per phase rather than a timer per wait keeps
    /// the I/O path free of timer and wake-up bookkeeping; the price is that an
    /// idle connection is noticed after between one and two idle timeouts.
    pub(crate) fn guard<T, F>(&self, phase: F) -> Guarded<'_, 'a, F>
    where
        F: Future<Output = Result<T, Failure>>,
    {
        Guarded {
            phase,
            cancelled: self.run.cancel.cancelled(),
            watchdog: tokio::time::sleep(self.run.idle),
            link: self,
            seen: self.activity.load(Relaxed),
        }
    }

    pub(crate) fn moved(&self) {
        self.activity.fetch_add(1, Relaxed);
    }

    /// The idle watchdog's check, when its timer fires: [`Failure::Idle`]
    /// if nothing moved since the last check (`seen`), which it updates.
    pub(crate) fn check_idle(&self, seen: &mut u64) -> Result<(), Failure> {
        let now = self.activity.load(Relaxed);
        if now == *seen {
            return Err(Failure::Idle);
        }
        *seen = now;
        Ok(())
    }

    async fn ready(&self, interest: Interest, during: &'static str) -> Result<(), Failure> {
        match self.stream.ready(interest).await {
            Ok(_) => Ok(()),
            Err(err) => Err(Failure::Net { during, err }),
        }
    }

    /// Reads exactly `buf.len()` bytes (session messages, ids, markers).
    pub(crate) async fn read_exact(&self, buf: &mut [u8], during: &'static str) -> Result<(), Failure> {
        let mut filled = 0;
        while filled < buf.len() {
            match self.stream.try_read(&mut buf[filled..]) {
                Ok(0) => return Err(Failure::Eof { during }),
                Ok(n) => {
                    filled += n;
                    self.run.counters.add_received(n);
                    self.moved();
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.ready(Interest::READABLE, during).await?
                }
                Err(err) => return Err(Failure::Net { during, err }),
            }
        }
        Ok(())
    }

    /// Writes all of `bytes`.
    pub(crate) async fn write_all(&self, bytes: &[u8], during: &'static str) -> Result<(), Failure> {
        let mut done = 0;
        while done < bytes.len() {
            match self.stream.try_write(&bytes[done..]) {
                Ok(n) => {
                    done += n;
                    self.run.counters.add_sent(n);
                    self.moved();
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.ready(Interest::WRITABLE, during).await?
                }
                Err(err) => return Err(Failure::Net { during, err }),
            }
        }
        Ok(())
    }

    /// Reads one session message, never more bytes than it holds. The body
    /// is read into a short-lived heap buffer: a buffer on the stack would be
    /// reserved in every connection's future for its whole life.
    pub(crate) async fn read_message(&self, during: &'static str) -> Result<Message, Failure> {
        let mut header = [0u8; HEADER_LEN];
        self.read_exact(&mut header, during).await?;
        if let Some((m, _)) = Message::decode(&header)? {
            return Ok(m);
        }
        // decode() has checked the declared length against the kind and MAX_BODY.
        let len = usize::from(u16::from_be_bytes([header[6], header[7]]));
        debug_assert!(len <= MAX_BODY);
        let mut frame = vec![0u8; HEADER_LEN + len];
        frame[..HEADER_LEN].copy_from_slice(&header);
        self.read_exact(&mut frame[HEADER_LEN..], during).await?;
        match Message::decode(&frame)? {
            Some((m, _)) => Ok(m),
            None => Err(Failure::BadMessage("truncated session message".into())),
        }
    }

    /// Sends one session message.
    pub(crate) async fn write_message(&self, m: &Message, during: &'static str) -> Result<(), Failure> {
        let mut out = Vec::with_capacity(64);
        m.encode(&mut out);
        self.write_all(&out, during).await
    }

    /// Sends FIN after everything queued, then reads and discards until the
    /// peer closes or resets. Used after a failure verdict has been sent: an
    /// immediate reset would discard the queued verdict along with any data
    /// the kernel has not yet transmitted.
    pub(crate) async fn flush_and_drain(&self) {
        let _ = socket2::SockRef::from(self.stream).shutdown(std::net::Shutdown::Write);
        let mut discard = [0u8; 512];
        loop {
            match self.stream.try_read(&mut discard) {
                Ok(0) => return,
                Ok(_) => self.moved(),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if self.ready(Interest::READABLE, "drain").await.is_err() {
                        return;
                    }
                }
                Err(_) => return,
            }
        }
    }

    /// Waits for the peer to close its side: Ok on FIN (or, when
    /// `reset_is_close`, on RST); [`Failure::TooMuch`] if data arrives instead.
    pub(crate) async fn await_peer_close(&self, reset_is_close: bool) -> Result<(), Failure> {
        let mut b = [0u8; 64];
        loop {
            match self.stream.try_read(&mut b) {
                Ok(0) => return Ok(()),
                Ok(_) => return Err(Failure::TooMuch),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.ready(Interest::READABLE, "wait for close").await?
                }
                Err(e) if reset_is_close && e.kind() == io::ErrorKind::ConnectionReset => return Ok(()),
                Err(err) => {
                    return Err(Failure::Net {
                        during: "wait for close",
                        err,
                    })
                }
            }
        }
    }
}

pin_project_lite::pin_project! {
    /// A connection phase under cancellation and the idle watchdog. A struct
    /// rather than an `async fn`, so the phase's future is stored once: a
    /// future moved into an `async fn` argument is laid out twice, and this
    /// one lives as long as the connection.
    pub(crate) struct Guarded<'l, 'a, F> {
        #[pin]
        phase: F,
        #[pin]
        cancelled: tokio_util::sync::WaitForCancellationFuture<'a>,
        #[pin]
        watchdog: tokio::time::Sleep,
        link: &'l Link<'a>,
        seen: u64,
    }
}

impl<T, F: Future<Output = Result<T, Failure>>> Future for Guarded<'_, '_, F> {
    type Output = Result<T, Failure>;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        use std::task::Poll;
        let mut me = self.project();
        if me.cancelled.poll(cx).is_ready() {
            return Poll::Ready(Err(Failure::Cancelled));
        }
        if let Poll::Ready(r) = me.phase.poll(cx) {
            return Poll::Ready(r);
        }
        while me.watchdog.as_mut().poll(cx).is_ready() {
            if let Err(f) = me.link.check_idle(me.seen) {
                return Poll::Ready(Err(f));
            }
            let next = tokio::time::Instant::now() + me.link.run.idle;
            me.watchdog.as_mut().reset(next);
        }
        Poll::Pending
    }
}

/// Send pacing for one connection: a rate limit, bursts, or neither. It
/// only says when the next send may go; the data phase owns the timer.
#[derive(Debug, Default)]
pub(crate) struct Pacer {
    limiter: Option<RateLimiter>,
    burst: Option<BurstPacer>,
    /// The end of a pause between bursts (0: none).
    hold_until_ns: u64,
}

impl Pacer {
    pub(crate) fn new(rate: u64, period: Duration, burst: Option<(u32, Duration)>) -> Self {
        Self {
            limiter: if rate > 0 {
                RateLimiter::new(rate, period.as_nanos() as u64)
            } else {
                None
            },
            burst: burst.map(|(n, d)| BurstPacer::new(n, d.as_nanos() as u64)),
            hold_until_ns: 0,
        }
    }

    /// Whether sends are paced (a rate limit or bursts). The peer paces its
    /// sends alike: both ends take the pacing from the hello.
    pub(crate) fn is_paced(&self) -> bool {
        self.limiter.is_some() || self.burst.is_some()
    }

    /// `None` when the next send may go at `now_ns`; otherwise the time it
    /// may (nanoseconds on the run clock).
    pub(crate) fn due(&mut self, now_ns: u64) -> Option<u64> {
        if self.hold_until_ns > now_ns {
            return Some(self.hold_until_ns);
        }
        self.hold_until_ns = 0;
        match self.limiter.as_mut().map(|l| l.poll(now_ns)) {
            Some(Release::At(t)) => Some(t),
            _ => None,
        }
    }

    /// The largest send the pacer allows: one quantum's budget when rate
    /// limited, so that pacing is as smooth as the quantum and not as coarse
    /// as `--buffer` (ctsTraffic never splits a send, which with large
    /// buffers releases a whole transfer at once).
    pub(crate) fn max_send(&self, buffer: usize) -> usize {
        match &self.limiter {
            Some(l) => buffer.min(l.budget().try_into().unwrap_or(usize::MAX)),
            None => buffer,
        }
    }

    pub(crate) fn after_send(&mut self, n: usize, clock: &RunClock) {
        if let Some(l) = &mut self.limiter {
            l.sent(n as u64);
        }
        if let Some(b) = &mut self.burst {
            if let Some(d) = b.after_send() {
                self.hold_until_ns = clock.now_ns() + d;
            }
        }
    }
}
