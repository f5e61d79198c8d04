use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use goodput_core::result::{Interval, Outcome};

/// The run's monotonic clock: every time in a result is measured from its
/// start (CLOCK_MONOTONIC through [`Instant`]).
#[derive(Debug, Clone, Copy)]
pub struct RunClock {
    start: Instant,
}

impl RunClock {
    /// A clock starting now.
    pub fn start() -> Self {
        Self {
            start: Instant::now(),
        }
    }
    /// Nanoseconds since the start.
    pub fn now_ns(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }
    /// Seconds since the start.
    pub fn now_s(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }
    /// The instant `ns` nanoseconds after the start.
    pub fn instant_at(&self, ns: u64) -> Instant {
        self.start + Duration::from_nanos(ns)
    }
}

/// Counters shared by every connection task of a run. Byte counters move on
/// every I/O (relaxed atomics, no locks); outcome counters move when the run
/// loop receives a record, so they always agree with the records.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) sent: AtomicU64,
    pub(crate) received: AtomicU64,
    pub(crate) in_flight: AtomicU64,
    completed: AtomicU64,
    network_errors: AtomicU64,
    data_errors: AtomicU64,
}

impl Counters {
    pub(crate) fn add_sent(&self, n: usize) {
        self.sent.fetch_add(n as u64, Relaxed);
    }
    pub(crate) fn add_received(&self, n: usize) {
        self.received.fetch_add(n as u64, Relaxed);
    }
    /// Counts a connection as in flight until [`Counters::leave_in_flight`].
    /// Calls, not a guard: a guard would be 8 more bytes in every
    /// connection's task.
    pub(crate) fn enter_in_flight(&self) {
        self.in_flight.fetch_add(1, Relaxed);
    }
    pub(crate) fn leave_in_flight(&self) {
        self.in_flight.fetch_sub(1, Relaxed);
    }
    pub(crate) fn count_outcome(&self, o: &Outcome) {
        match o {
            Outcome::Succeeded => &self.completed,
            Outcome::NetworkError { .. } => &self.network_errors,
            Outcome::ProtocolError { .. } => &self.data_errors,
            Outcome::Aborted { .. } => return,
        }
        .fetch_add(1, Relaxed);
    }
}

/// Turns cumulative byte counters into per-interval rates.
#[derive(Debug, Default)]
pub(crate) struct IntervalSampler {
    last_ns: u64,
    last_sent: u64,
    last_received: u64,
}

impl IntervalSampler {
    pub(crate) fn sample(&mut self, c: &Counters, now_ns: u64) -> Interval {
        let sent = c.sent.load(Relaxed);
        let received = c.received.load(Relaxed);
        let dt = now_ns.saturating_sub(self.last_ns);
        let rate = |bytes: u64| {
            if dt == 0 {
                0
            } else {
                (u128::from(bytes) * 1_000_000_000 / u128::from(dt)) as u64
            }
        };
        let iv = Interval {
            time_slice_s: now_ns as f64 / 1e9,
            send_bytes_per_second: rate(sent - self.last_sent),
            recv_bytes_per_second: rate(received - self.last_received),
            in_flight: c.in_flight.load(Relaxed),
            completed: c.completed.load(Relaxed),
            network_errors: c.network_errors.load(Relaxed),
            data_errors: c.data_errors.load(Relaxed),
            stamp: None,
            echo: None,
            media: None,
        };
        self.last_ns = now_ns;
        self.last_sent = sent;
        self.last_received = received;
        iv
    }
}
