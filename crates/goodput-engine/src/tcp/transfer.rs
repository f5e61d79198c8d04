//! The data phase as one hand-written future: both directions of a
//! connection's pattern bytes (push-pull segments in turn), pacing,
//! verification, the idle watchdog, the run's cancellation and an optional
//! deadline, polled directly against the socket's readiness.
//!
//! Why one future: this phase lasts as long as the connection, so its state
//! is what every idle connection costs. Nested `async fn`s would each keep
//! their arguments and tokio's readiness waiters, and a timer each for
//! pacing, the watchdog and the deadline (112 bytes apiece). Here the
//! waker lives in the socket's registration (`poll_read_ready` /
//! `poll_write_ready`), the run's stop and one due time for every wake-up
//! the phase needs go through a slot in the run's [`Wakeups`] (no timer or
//! waiter of its own), and the rest is a handful of integers and
//! references.
//!
//! [`Wakeups`]: super::Wakeups

use std::cell::RefCell;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::Ordering::Relaxed;
use std::task::{Context, Poll};

use goodput_core::pattern::{Mismatch, PatternVerifier};
use goodput_core::plan::{Direction, PushPullSegments, TcpPattern, TransferPlan};
use goodput_core::session::{WarmUp, TIMED_COMPLETION_FRAME};
use tokio::io::ReadBuf;

use super::link::{Failure, Link, Pacer};
use super::wakeups::NEVER;
use super::Progress;
use crate::lowat::LowWater;

thread_local! {
    // Receive scratch space owned by the worker thread, not the connection:
    // a connection waiting for data holds no buffer at all. Reads fill it and
    // are verified synchronously, inside one poll.
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// I/O calls one poll may make before yielding to other tasks.
const CALLS_PER_POLL: u32 = 32;

/// `Flow::stop_slot` before the first poll.
const NO_SLOT: u32 = u32::MAX;

/// `Flow::pace_due_ns` when the pacer holds nothing back.
const NOT_PACED: u64 = NEVER;

/// How a data phase ended.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Ended {
    /// Every byte in both directions moved.
    Complete,
    /// The peer sent something after its data while this end was still
    /// sending (only when watching for the trailer): its verdict.
    PeerSpoke,
}

/// How the data phase ended, and what it moved.
pub(crate) struct PhaseEnd {
    pub(crate) result: Result<Ended, Failure>,
    pub(crate) progress: Progress,
    /// Every byte this end was to send has gone (the peer then reads on
    /// towards this end's trailer).
    pub(crate) sent_all: bool,
    /// A timed test's figures (boxed: most connections are not timed).
    pub(crate) timed: Option<Box<Timed>>,
}

/// A timed data phase: when sending stops, what the receiving side saw,
/// and (on the client) the last bytes of the server's direction, which
/// are its trailer once its FIN arrives.
#[derive(Debug)]
pub(crate) struct Timed {
    /// When sending stops (run clock, ns).
    stop_send_ns: u64,
    /// When the warm-up ends (run clock, ns).
    warm_up_end_ns: u64,
    /// When the data phase started (run clock, ns).
    pub(crate) start_ns: u64,
    /// What had been received at the first read past the warm-up.
    warm_up: Option<WarmUp>,
    /// Bytes at the end of what arrives that are the peer's trailer, not
    /// data: [`TIMED_COMPLETION_FRAME`] on the client, none on the server.
    holdback: usize,
    /// The last `holdback` bytes received, oldest first (`tail_len` valid).
    tail: [u8; TIMED_COMPLETION_FRAME],
    tail_len: usize,
    /// The first byte that differed from the pattern, while it may still
    /// turn out to be the trailer's.
    mismatch: Option<Mismatch>,
    /// The last reads: where each ended in the stream, and when.
    reads: [(u64, u64); 4],
    reads_next: usize,
    /// When the FIN arrived (0: not yet).
    eof_ns: u64,
    /// The client shuts its sending side when its sending is done.
    fin_when_sent: bool,
    fin_sent: bool,
}

impl Timed {
    /// A timed phase starting now that sends for `duration` and sets
    /// `warm_up` apart. `client`: the client's part.
    pub(crate) fn new(
        now_ns: u64,
        duration: std::time::Duration,
        warm_up: std::time::Duration,
        client: bool,
    ) -> Self {
        let warm_up_end_ns = now_ns.saturating_add(warm_up.as_nanos() as u64);
        Self {
            stop_send_ns: now_ns.saturating_add(duration.as_nanos() as u64),
            warm_up_end_ns,
            start_ns: now_ns,
            warm_up: warm_up.is_zero().then_some(WarmUp { bytes: 0, at_ns: 0 }),
            holdback: if client { TIMED_COMPLETION_FRAME } else { 0 },
            tail: [0; TIMED_COMPLETION_FRAME],
            tail_len: 0,
            mismatch: None,
            reads: [(0, now_ns); 4],
            reads_next: 0,
            eof_ns: 0,
            fin_when_sent: client,
            fin_sent: false,
        }
    }

    /// Data bytes received (the trailer left out), from all bytes received.
    pub(crate) fn data_received(&self, received: u64) -> u64 {
        received.saturating_sub(self.holdback as u64)
    }

    /// The peer's trailer (client): the last bytes of its direction, once
    /// they have all arrived.
    pub(crate) fn trailer(&self) -> Option<&[u8]> {
        (self.holdback > 0 && self.tail_len == self.holdback && self.eof_ns > 0).then_some(&self.tail[..])
    }

    /// The receiving side's time: from the start of the data phase to the
    /// read that brought the last data byte (run clock, ns).
    pub(crate) fn receive_end_ns(&self, received: u64) -> u64 {
        let data = self.data_received(received);
        // The latest read that still carried data: the one whose start lay
        // before the end of the data. The oldest kept read's start is not
        // known: it counts as data (when the trailer came in more reads
        // than are kept, its time is the best known).
        let mut best = self.start_ns;
        let mut prev_end = None;
        for i in 0..self.reads.len() {
            let (end, at) = self.reads[(self.reads_next + i) % self.reads.len()];
            let start = prev_end.unwrap_or(0);
            if end > start && start < data {
                best = best.max(at);
            }
            prev_end = Some(end);
        }
        best
    }

    /// What was received inside the warm-up (bytes, and when it ended,
    /// ns into the data phase), the trailer left out.
    pub(crate) fn warm_up(&self, received: u64) -> WarmUp {
        let data = self.data_received(received);
        match self.warm_up {
            Some(w) => WarmUp {
                bytes: w.bytes.min(data),
                at_ns: w.at_ns,
            },
            // The data ended inside the warm-up: nothing after it.
            None => WarmUp {
                bytes: data,
                at_ns: self.receive_end_ns(received).saturating_sub(self.start_ns),
            },
        }
    }

    /// A byte that differed from the pattern and that is data, not trailer.
    pub(crate) fn data_mismatch(&self, received: u64) -> Option<Mismatch> {
        self.mismatch.filter(|m| m.offset < self.data_received(received))
    }

    /// Keeps the last bytes of a read and notes when it ended.
    fn after_read(&mut self, bytes: &[u8], total: u64, now_ns: u64) {
        let keep = self.holdback;
        if keep > 0 {
            let n = bytes.len();
            if n >= keep {
                self.tail[..keep].copy_from_slice(&bytes[n - keep..]);
                self.tail_len = keep;
            } else {
                let kept = self.tail_len.min(keep - n);
                self.tail.copy_within(self.tail_len - kept..self.tail_len, 0);
                self.tail[kept..kept + n].copy_from_slice(bytes);
                self.tail_len = kept + n;
            }
        }
        self.reads[self.reads_next] = (total, now_ns);
        self.reads_next = (self.reads_next + 1) % self.reads.len();
        if self.warm_up.is_none() && now_ns >= self.warm_up_end_ns {
            self.warm_up = Some(WarmUp {
                bytes: total,
                at_ns: now_ns - self.start_ns,
            });
        }
    }
}

/// What one end does in a connection's data phase.
pub(crate) struct Part {
    pub(crate) plan: TransferPlan,
    pub(crate) is_client: bool,
    pub(crate) buffer: usize,
    pub(crate) verify: bool,
    pub(crate) pacer: Pacer,
    /// Once all expected bytes are in, stop sending as soon as the peer
    /// sends anything more (its completion record, ahead of time).
    pub(crate) watch_trailer: bool,
    /// The phase fails with [`Failure::Cancelled`] at this time on the run
    /// clock (the server's longest connection), if any.
    pub(crate) deadline_ns: Option<u64>,
    /// A timed test: send until its time, receive until the peer's FIN.
    pub(crate) timed: Option<Box<Timed>>,
}

/// Moves the pattern bytes of a [`Part`] in both directions until both
/// are complete, under the run's cancellation, the idle watchdog and the
/// deadline. Yields the outcome and the bytes moved.
pub(crate) struct DataPhase<'l, 'a> {
    flow: Flow<'l, 'a>,
    // The watchdog: the next check, and the activity count at the last.
    idle_check_ns: u64,
    seen: u64,
    deadline_ns: u64,
    /// The due time last left with the run's wake-ups ([`NEVER`]: none).
    due_ns: u64,
}

/// The transfer itself.
struct Flow<'l, 'a> {
    link: &'l Link<'a>,
    progress: Progress,
    // Where the current segment ends in each direction.
    send_end: u64,
    recv_end: u64,
    // Push-pull's segments after the current one (none for other patterns).
    segments: PushPullSegments,
    pacer: Pacer,
    low_water: LowWater,
    /// Set by a poll in which the pacer held the next send until this time
    /// ([`NOT_PACED`]: it did not).
    pace_due_ns: u64,
    /// The waker this phase left with the run's [`super::Wakeups`]: its
    /// slot, and its data pointer (to notice a poll by another task).
    waker_id: usize,
    slot: u32,
    buffer: u32,
    is_client: bool,
    verify: bool,
    watch_trailer: bool,
    timed: Option<Box<Timed>>,
}

enum Step {
    Moved,
    Blocked,
    Done,
}

impl<'l, 'a> DataPhase<'l, 'a> {
    pub(crate) fn new(link: &'l Link<'a>, part: Part) -> Self {
        let plan = part.plan;
        let (send_total, recv_total) = if part.is_client {
            (plan.client_to_server, plan.server_to_client)
        } else {
            (plan.server_to_client, plan.client_to_server)
        };
        let low_water = if recv_total > 0 && !part.pacer.is_paced() {
            LowWater::new(std::os::fd::AsRawFd::as_raw_fd(link.stream))
        } else {
            LowWater::off()
        };
        // A timed phase reads until the peer's FIN in any pattern (the
        // client's trailer comes that way, and the server confirms that a
        // client in pull sends nothing).
        let recv_total = if part.timed.is_some() {
            u64::MAX
        } else {
            recv_total
        };
        let (send_end, recv_end, segments) = if plan.pattern == TcpPattern::PushPull {
            (0, 0, plan.segments())
        } else {
            // An empty iterator: a plan of another pattern has no segments.
            (send_total, recv_total, plan.segments())
        };
        let idle_check_ns = link
            .run
            .clock
            .now_ns()
            .saturating_add(link.run.idle.as_nanos() as u64);
        Self {
            flow: Flow {
                link,
                progress: Progress::default(),
                send_end,
                recv_end,
                segments,
                pacer: part.pacer,
                low_water,
                pace_due_ns: NOT_PACED,
                waker_id: 0,
                slot: NO_SLOT,
                buffer: part.buffer.min(u32::MAX as usize) as u32,
                is_client: part.is_client,
                verify: part.verify,
                watch_trailer: part.watch_trailer,
                timed: part.timed,
            },
            idle_check_ns,
            seen: link.activity.load(Relaxed),
            deadline_ns: part.deadline_ns.unwrap_or(NEVER),
            due_ns: NEVER,
        }
    }
}

impl Drop for Flow<'_, '_> {
    fn drop(&mut self) {
        if self.slot != NO_SLOT {
            self.link.run.wakeups.remove(self.slot);
        }
    }
}

impl Flow<'_, '_> {
    /// Leaves this task's waker with the run (once, or again if the phase
    /// is polled by another task), for the run's stop and the due times.
    fn leave_waker(&mut self, cx: &Context<'_>) {
        let waker = cx.waker();
        let id = waker.data() as usize;
        if self.slot == NO_SLOT {
            self.slot = self.link.run.wakeups.insert(waker);
            self.waker_id = id;
        } else if id != self.waker_id {
            self.link.run.wakeups.replace(self.slot, waker);
            self.waker_id = id;
        }
    }

    /// Whether every byte this end is to send has gone.
    fn sent_all(&self) -> bool {
        self.progress.sent == self.send_end && self.segments.clone().all(|(dir, _)| !self.sends(dir))
    }

    fn sends(&self, dir: Direction) -> bool {
        (dir == Direction::ClientToServer) == self.is_client
    }

    fn end(&mut self, mut result: Result<Ended, Failure>) -> Poll<PhaseEnd> {
        // A socket that fails once the run is stopping most likely failed
        // because of the stop (a peer in the same run, stopped a moment
        // earlier, reset it): the connection is one the stop aborted. The
        // token is checked because the stop's wake-up may not have come yet.
        if matches!(result, Err(Failure::Net { .. } | Failure::Eof { .. }))
            && self.link.run.cancel.is_cancelled()
        {
            result = Err(Failure::Cancelled);
        }
        Poll::Ready(PhaseEnd {
            result,
            progress: self.progress,
            sent_all: self.sent_all(),
            timed: self.timed.take(),
        })
    }

    /// A timed sender's stop time while it still sends ([`NEVER`]: none).
    fn stop_due_ns(&self) -> u64 {
        match &self.timed {
            Some(t) if self.send_end == u64::MAX => t.stop_send_ns,
            _ => NEVER,
        }
    }

    fn recv_direction(&self) -> Direction {
        if self.is_client {
            Direction::ServerToClient
        } else {
            Direction::ClientToServer
        }
    }

    fn recv_once(&mut self, cx: &mut Context<'_>) -> Result<Step, Failure> {
        let left = self.recv_end - self.progress.received;
        if left == 0 {
            return Ok(Step::Done);
        }
        let want = left.min(u64::from(self.buffer)) as usize;
        let stream = self.link.stream;
        let pattern = &self.link.run.pattern;
        // The verifier's place in the stream is the count of bytes received.
        // A timed client holds back a mismatch once one is seen: it may be
        // in the server's trailer.
        let verify = self.verify && self.timed.as_ref().is_none_or(|t| t.mismatch.is_none());
        let verifier = verify.then(|| PatternVerifier::at(self.progress.received));
        let timed = self.timed.as_deref_mut();
        let total = self.progress.received;
        let got = SCRATCH.with(|cell| {
            let mut scratch = cell.borrow_mut();
            if scratch.len() < want {
                scratch.resize(want, 0);
            }
            match stream.try_read(&mut scratch[..want]) {
                Ok(n) => {
                    if let (Some(t), true) = (timed, n > 0) {
                        t.after_read(&scratch[..n], total + n as u64, self.link.run.clock.now_ns());
                    }
                    Ok(Some((
                        n,
                        verifier
                            .map(|mut v| v.check(pattern, &scratch[..n]))
                            .unwrap_or(Ok(())),
                    )))
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
                Err(err) => Err(Failure::Net { during: "recv", err }),
            }
        })?;
        match got {
            Some((0, _)) if self.timed.is_some() => {
                // The peer's FIN ends a timed direction.
                if let Some(t) = &mut self.timed {
                    t.eof_ns = self.link.run.clock.now_ns();
                }
                self.recv_end = self.progress.received;
                Ok(Step::Done)
            }
            Some((0, _)) => Err(Failure::Eof { during: "recv" }),
            Some((n, checked)) => {
                // The chunk was delivered, bad byte or not: count it first.
                self.progress.received += n as u64;
                self.link.run.counters.add_received(n);
                self.link.moved();
                self.low_water.after_read(
                    n,
                    self.link.run.clock.now_ns(),
                    self.recv_end - self.progress.received,
                );
                let checked = match (&mut self.timed, checked) {
                    (Some(t), Err(m)) if t.holdback > 0 => {
                        t.mismatch = Some(m);
                        Ok(())
                    }
                    (_, c) => c,
                };
                checked.map_err(|mismatch| Failure::Mismatch {
                    direction: self.recv_direction(),
                    mismatch,
                })?;
                // A held mismatch that more bytes have since followed is data.
                if let Some(mismatch) = self
                    .timed
                    .as_ref()
                    .and_then(|t| t.data_mismatch(self.progress.received))
                {
                    return Err(Failure::Mismatch {
                        direction: self.recv_direction(),
                        mismatch,
                    });
                }
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
        if let Some(t) = &mut self.timed {
            if self.send_end == u64::MAX && self.link.run.clock.now_ns() >= t.stop_send_ns {
                self.send_end = self.progress.sent;
            }
            if self.send_end == self.progress.sent && t.fin_when_sent && !t.fin_sent {
                // The client's FIN ends its direction of a timed test.
                t.fin_sent = true;
                socket2::SockRef::from(self.link.stream)
                    .shutdown(std::net::Shutdown::Write)
                    .map_err(|err| Failure::Net {
                        during: "shutdown",
                        err,
                    })?;
            }
        }
        let left = self.send_end - self.progress.sent;
        if left == 0 {
            return Ok(Step::Done);
        }
        if let Some(due) = self.pacer.due(self.link.run.clock.now_ns()) {
            self.pace_due_ns = due;
            return Ok(Step::Blocked);
        }
        let want = left.min(self.pacer.max_send(self.buffer as usize) as u64) as usize;
        let chunk = self.link.run.pattern.slice(self.progress.sent, want);
        match self.link.stream.try_write(chunk) {
            Ok(n) => {
                self.progress.sent += n as u64;
                self.link.run.counters.add_sent(n);
                self.link.moved();
                self.pacer.after_send(n, &self.link.run.clock);
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

    /// Starts the next push-pull segment; false when there is none.
    fn next_segment(&mut self) -> bool {
        let Some((dir, len)) = self.segments.next() else {
            return false;
        };
        if self.sends(dir) {
            self.send_end += len;
        } else {
            self.recv_end += len;
        }
        true
    }

    /// Moves bytes until both directions are done or blocked.
    fn poll_move(&mut self, cx: &mut Context<'_>) -> Poll<Result<Ended, Failure>> {
        let mut calls = 0u32;
        loop {
            let recv = self.recv_once(cx)?;
            if matches!(recv, Step::Done)
                && self.watch_trailer
                && self.progress.sent < self.send_end
                && self.peer_spoke(cx)?
            {
                return Poll::Ready(Ok(Ended::PeerSpoke));
            }
            let send = self.send_once(cx)?;
            match (recv, send) {
                (Step::Done, Step::Done) => {
                    if !self.next_segment() {
                        return Poll::Ready(Ok(Ended::Complete));
                    }
                }
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

impl Future for DataPhase<'_, '_> {
    type Output = PhaseEnd;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let me = self.get_mut();
        let link = me.flow.link;
        me.flow.leave_waker(cx);
        if link.run.wakeups.is_stopped() {
            return me.flow.end(Err(Failure::Cancelled));
        }
        loop {
            me.flow.pace_due_ns = NOT_PACED;
            if let Poll::Ready(r) = me.flow.poll_move(cx) {
                return me.flow.end(r);
            }
            let pace_due_ns = me.flow.pace_due_ns;
            // One due time for every wake-up: the watchdog, the deadline, pacing.
            let wake_ns = me
                .idle_check_ns
                .min(me.deadline_ns)
                .min(pace_due_ns)
                .min(me.flow.stop_due_ns());
            let now = link.run.clock.now_ns();
            if now < wake_ns {
                if wake_ns != me.due_ns {
                    link.run.wakeups.wake_at(me.flow.slot, wake_ns);
                    me.due_ns = wake_ns;
                }
                return Poll::Pending;
            }
            if now >= me.deadline_ns {
                return me.flow.end(Err(Failure::Cancelled));
            }
            if now >= me.idle_check_ns {
                if let Err(f) = link.check_idle(&mut me.seen) {
                    return me.flow.end(Err(f));
                }
                me.idle_check_ns = now.saturating_add(link.run.idle.as_nanos() as u64);
            }
            if pace_due_ns != NOT_PACED && now >= pace_due_ns {
                // A paced sender that waited is not idle.
                link.moved();
            }
        }
    }
}
