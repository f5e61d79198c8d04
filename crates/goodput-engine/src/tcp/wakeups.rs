//! The wake-ups of a run's data phases, kept by the run rather than by each
//! connection: the run's stop, and one timer per phase.
//!
//! Why: a data phase lasts as long as its connection, so its state is what
//! every established connection costs, and tokio's cancellation waiter (72
//! bytes) and `Sleep` (112 bytes) were most of it. Here a phase holds a slot
//! number: the slot keeps its task's waker and its next due time; one task
//! per run, beside the run loop, keeps the one `Sleep`, set for the earliest
//! due time, wakes the phases whose time has come, and wakes every phase
//! when the run stops. A
//! woken phase reads the clock and the stop flag itself, so a spurious
//! wake-up is harmless.

use std::collections::BTreeSet;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::task::{Context, Poll, Waker};

use tokio::time::{Instant, Sleep};

use crate::counters::RunClock;

/// A due time meaning "none".
pub(crate) const NEVER: u64 = u64::MAX;

/// The wake-ups of a run's data phases; see the module's documentation.
#[derive(Default)]
pub(crate) struct Wakeups {
    /// Set before the phases are woken for the stop: a phase that checks it
    /// after leaving its waker cannot miss the stop.
    stopped: AtomicBool,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    slots: Vec<Slot>,
    free: Vec<u32>,
    /// (due time, slot) of every slot with a due time.
    due: BTreeSet<(u64, u32)>,
    /// The run's [`Timer`]: its waker, and the time it is set for.
    timer: Option<Waker>,
    timer_at_ns: u64,
}

struct Slot {
    waker: Option<Waker>,
    due_ns: u64,
}

impl Inner {
    fn clear_due(&mut self, slot: u32) {
        let s = &mut self.slots[slot as usize];
        if s.due_ns != NEVER {
            self.due.remove(&(s.due_ns, slot));
            s.due_ns = NEVER;
        }
    }
}

impl Wakeups {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().expect("lock never poisoned")
    }

    /// Keeps `waker` until [`Wakeups::remove`]; returns its slot.
    pub(crate) fn insert(&self, waker: &Waker) -> u32 {
        let mut g = self.lock();
        let slot = Slot {
            waker: Some(waker.clone()),
            due_ns: NEVER,
        };
        match g.free.pop() {
            Some(i) => {
                g.slots[i as usize] = slot;
                i
            }
            None => {
                g.slots.push(slot);
                (g.slots.len() - 1) as u32
            }
        }
    }

    /// Replaces the waker in `slot` (the phase is polled by another task).
    pub(crate) fn replace(&self, slot: u32, waker: &Waker) {
        self.lock().slots[slot as usize].waker = Some(waker.clone());
    }

    /// Frees `slot` and its due time.
    pub(crate) fn remove(&self, slot: u32) {
        let mut g = self.lock();
        g.clear_due(slot);
        g.slots[slot as usize].waker = None;
        g.free.push(slot);
    }

    /// Wakes `slot`'s task at `due_ns` on the run clock (in place of any
    /// earlier request; [`NEVER`]: not at all).
    pub(crate) fn wake_at(&self, slot: u32, due_ns: u64) {
        let timer = {
            let mut g = self.lock();
            g.clear_due(slot);
            if due_ns == NEVER {
                return;
            }
            g.slots[slot as usize].due_ns = due_ns;
            g.due.insert((due_ns, slot));
            // The run's timer is set for later: it must look again.
            if due_ns < g.timer_at_ns {
                g.timer_at_ns = due_ns;
                g.timer.take()
            } else {
                None
            }
        };
        if let Some(w) = timer {
            w.wake();
        }
    }

    /// Whether the run has stopped (a cheaper check than the token's).
    pub(crate) fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::Acquire)
    }

    /// Marks the run stopped and wakes every phase (the slots stay theirs
    /// until they remove them).
    pub(crate) fn stop(&self) {
        self.stopped.store(true, Ordering::Release);
        let woken: Vec<Waker> = self.lock().slots.iter().filter_map(|s| s.waker.clone()).collect();
        woken.into_iter().for_each(Waker::wake);
    }

    /// Wakes the phases due by `now_ns` (each due time fires once); leaves
    /// `timer` to be woken for an earlier time than the next one, which it
    /// returns.
    fn fire(&self, now_ns: u64, timer: &Waker) -> u64 {
        let mut woken = Vec::new();
        let next = {
            let mut g = self.lock();
            while let Some(&(due, slot)) = g.due.first() {
                if due > now_ns {
                    break;
                }
                g.due.pop_first();
                let s = &mut g.slots[slot as usize];
                s.due_ns = NEVER;
                woken.extend(s.waker.clone());
            }
            let next = g.due.first().map_or(NEVER, |&(due, _)| due);
            g.timer_at_ns = next;
            if !g.timer.as_ref().is_some_and(|w| w.will_wake(timer)) {
                g.timer = Some(timer.clone());
            }
            next
        };
        woken.into_iter().for_each(Waker::wake);
        next
    }
}

pin_project_lite::pin_project! {
    /// The run's side: sleeps until the earliest due time and wakes
    /// the phases due. Never completes.
    pub(crate) struct Timer<'a> {
        wakeups: &'a Wakeups,
        clock: RunClock,
        #[pin]
        sleep: Sleep,
    }
}

impl<'a> Timer<'a> {
    pub(crate) fn new(wakeups: &'a Wakeups, clock: RunClock) -> Self {
        Self {
            wakeups,
            clock,
            sleep: tokio::time::sleep_until(Instant::from_std(clock.instant_at(NEVER))),
        }
    }
}

impl Future for Timer<'_> {
    type Output = Infallible;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Infallible> {
        let mut me = self.project();
        loop {
            let next = me.wakeups.fire(me.clock.now_ns(), cx.waker());
            if next == NEVER {
                return Poll::Pending;
            }
            let at = Instant::from_std(me.clock.instant_at(next));
            if me.sleep.deadline() != at {
                me.sleep.as_mut().reset(at);
            }
            if me.sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::task::{Wake, Waker};

    use super::{Wakeups, NEVER};

    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn waker() -> (Arc<Count>, Waker) {
        let c = Arc::new(Count(AtomicUsize::new(0)));
        (c.clone(), Waker::from(c))
    }

    fn n(c: &Count) -> usize {
        c.0.load(Ordering::SeqCst)
    }

    #[test]
    fn stop_wakes_each_phase_with_a_slot() {
        let w = Wakeups::default();
        let (a, wa) = waker();
        let (b, wb) = waker();
        let (c, wc) = waker();
        let sa = w.insert(&wa);
        let sb = w.insert(&wb);
        w.remove(sa);
        // The freed slot is reused.
        let sc = w.insert(&wc);
        assert_eq!(sc, sa);
        // A phase polled by another task leaves the new waker.
        let (b2, wb2) = waker();
        w.replace(sb, &wb2);
        assert!(!w.is_stopped());
        w.stop();
        assert!(w.is_stopped());
        assert_eq!([&a, &b, &b2, &c].map(|x| n(x)), [0, 0, 1, 1]);
    }

    #[test]
    fn due_times_fire_once_in_order_and_a_new_earliest_wakes_the_timer() {
        let w = Wakeups::default();
        let (timer, wt) = waker();
        let (a, wa) = waker();
        let (b, wb) = waker();
        let sa = w.insert(&wa);
        let sb = w.insert(&wb);
        assert_eq!(w.fire(0, &wt), NEVER);
        // The timer sleeps for ever; a due time wakes it to look again.
        w.wake_at(sa, 100);
        assert_eq!(n(&timer), 1);
        w.wake_at(sb, 50);
        // Already woken and not yet polled: no second wake-up.
        assert_eq!(n(&timer), 1);
        assert_eq!(w.fire(10, &wt), 50);
        // Later than the timer's time: no wake-up.
        w.wake_at(sb, 60);
        assert_eq!(n(&timer), 1);
        assert_eq!(w.fire(60, &wt), 100);
        assert_eq!((n(&a), n(&b)), (0, 1));
        // Fired once: the slot has no due time left.
        assert_eq!(w.fire(70, &wt), 100);
        assert_eq!(n(&b), 1);
        // A new request replaces the old; a removed slot's time is gone.
        w.wake_at(sa, 200);
        assert_eq!(w.fire(150, &wt), 200);
        assert_eq!(n(&a), 0);
        w.wake_at(sb, 180);
        w.remove(sb);
        w.wake_at(sa, NEVER);
        assert_eq!(w.fire(1000, &wt), NEVER);
        assert_eq!((n(&a), n(&b)), (0, 1));
    }
}
