//! The data phase as one hand-written future: both directions of a
//! connection's pattern bytes, pacing, verification and the idle activity
//! count, polled directly against the socket's readiness.
//!
//! Why not two `async fn`s joined: each would hold tokio's readiness-future
//! waiter and timer entry for the connection's whole life (336 bytes each),
//! and a data phase lasts as long as the connection. Here the waker lives in
//! the socket's registration (`poll_read_ready` / `poll_write_ready`), the
//! pacing timer is allocated only for paced connections, and the state is a
//! handful of integers and references.

use std::cell::RefCell;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use goodput_core::pattern::{Pattern, PatternVerifier};
use goodput_core::plan::Direction;
use tokio::io::ReadBuf;

use super::link::{Failure, Link, Pacer};
use crate::lowat::LowWater;

thread_local! {
    // Receive scratch space owned by the worker thread, not the connection:
    // a connection waiting for data holds no buffer at all. Reads fill it and
    // are verified synchronously, inside one poll.
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// I/O calls one poll may make before yielding to other tasks.
const CALLS_PER_POLL: u32 = 32;

/// How a transfer ended.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Ended {
    /// Every byte in both directions moved.
    Complete,
    /// The peer sent something after its data while this end was still
    /// sending (only with [`Transfer::watch_trailer`]): its verdict.
    PeerSpoke,
}

/// Moves `send_len` pattern bytes out and `recv_len` in, at once.
pub(crate) struct Transfer<'l, 'a> {
    pub(crate) link: &'l Link<'a>,
    pub(crate) pattern: &'l Pattern,
    pub(crate) buffer: usize,
    pub(crate) sent: &'l mut u64,
    pub(crate) send_end: u64,
    pub(crate) received: &'l mut u64,
    pub(crate) recv_end: u64,
    pub(crate) recv_direction: Direction,
    pub(crate) verifier: Option<&'l mut PatternVerifier>,
    pub(crate) pacer: &'l mut Pacer,
    /// Once all expected bytes are in, stop sending as soon as the peer
    /// sends anything more (its completion record, ahead of time).
    pub(crate) watch_trailer: bool,
    /// The receive low-water mark (off for flows the peer paces).
    pub(crate) low_water: LowWater,
}

enum Step {
    Moved,
    Blocked,
    Done,
}

impl Transfer<'_, '_> {
    fn recv_once(&mut self, cx: &mut Context<'_>) -> Result<Step, Failure> {
        let left = self.recv_end - *self.received;
        if left == 0 {
            return Ok(Step::Done);
        }
        let want = left.min(self.buffer as u64) as usize;
        let stream = self.link.stream;
        let pattern = self.pattern;
        let verifier = self.verifier.as_deref_mut();
        let got = SCRATCH.with(|cell| {
            let mut scratch = cell.borrow_mut();
            if scratch.len() < want {
                scratch.resize(want, 0);
            }
            match stream.try_read(&mut scratch[..want]) {
                Ok(n) => Ok(Some((
                    n,
                    verifier
                        .map(|v| v.check(pattern, &scratch[..n]))
                        .unwrap_or(Ok(())),
                ))),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
                Err(err) => Err(Failure::Net { during: "recv", err }),
            }
        })?;
        match got {
            Some((0, _)) => Err(Failure::Eof { during: "recv" }),
            Some((n, checked)) => {
                // The chunk was delivered, bad byte or not: count it first.
                *self.received += n as u64;
                self.link.counters.add_received(n);
                self.link.moved();
                self.low_water
                    .after_read(n, self.link.clock.now_ns(), self.recv_end - *self.received);
                checked.map_err(|mismatch| Failure::Mismatch {
                    direction: self.recv_direction,
                    mismatch,
                })?;
                Ok(Step::Moved)
            }
            None => match stream.poll_read_ready(cx) {
                Poll::Ready(Ok(())) => Ok(Step::Moved),
                Poll::Ready(Err(err)) => Err(Failure::Net { during: "recv", err }),
                Poll::Pending => Ok(Step::Blocked),
            },
        }
    }

    fn send_once(&mut self, cx: &mut Context<'_>) -> Result<Step, Failure> {
        let left = self.send_end - *self.sent;
        if left == 0 {
            return Ok(Step::Done);
        }
        if self.pacer.poll_ready(cx, self.link).is_pending() {
            return Ok(Step::Blocked);
        }
        let want = left.min(self.pacer.max_send(self.buffer) as u64) as usize;
        let chunk = self.pattern.slice(*self.sent, want);
        match self.link.stream.try_write(chunk) {
            Ok(n) => {
                *self.sent += n as u64;
                self.link.counters.add_sent(n);
                self.link.moved();
                self.pacer.after_send(n, &self.link.clock);
                Ok(Step::Moved)
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => match self.link.stream.poll_write_ready(cx) {
                Poll::Ready(Ok(())) => Ok(Step::Moved),
                Poll::Ready(Err(err)) => Err(Failure::Net { during: "send", err }),
                Poll::Pending => Ok(Step::Blocked),
            },
            Err(err) => Err(Failure::Net { during: "send", err }),
        }
    }

    /// With all expected bytes in: has the peer sent anything more?
    fn peer_spoke(&mut self, cx: &mut Context<'_>) -> Result<bool, Failure> {
        let mut one = [0u8; 1];
        let mut buf = ReadBuf::new(&mut one);
        match self.link.stream.poll_peek(cx, &mut buf) {
            Poll::Ready(Ok(_)) => Ok(true),
            Poll::Ready(Err(err)) => Err(Failure::Net { during: "recv", err }),
            Poll::Pending => Ok(false),
        }
    }
}

impl Future for Transfer<'_, '_> {
    type Output = Result<Ended, Failure>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let me = self.get_mut();
        let mut calls = 0u32;
        loop {
            let recv = me.recv_once(cx);
            let recv = match recv {
                Ok(s) => s,
                Err(f) => return Poll::Ready(Err(f)),
            };
            if matches!(recv, Step::Done) && me.watch_trailer && *me.sent < me.send_end {
                match me.peer_spoke(cx) {
                    Ok(true) => return Poll::Ready(Ok(Ended::PeerSpoke)),
                    Ok(false) => {}
                    Err(f) => return Poll::Ready(Err(f)),
                }
            }
            let send = match me.send_once(cx) {
                Ok(s) => s,
                Err(f) => return Poll::Ready(Err(f)),
            };
            match (recv, send) {
                (Step::Done, Step::Done) => return Poll::Ready(Ok(Ended::Complete)),
                (Step::Moved, _) | (_, Step::Moved) => {}
                _ => return Poll::Pending,
            }
            calls += 1;
            if calls >= CALLS_PER_POLL {
                // Let the runtime's other tasks run; come straight back.
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
        }
    }
}
