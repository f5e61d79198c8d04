//! Send pacing: the per-connection rate limit and bursts, as pure arithmetic
//! over nanosecond timestamps supplied by the caller.

use std::num::{NonZeroU32, NonZeroU64};

/// What the sender should do with its next send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// Send now.
    Now,
    /// Wait until this time (nanoseconds on the caller's clock), then send.
    At(u64),
}

/// Rate limit by quanta, as ctsTraffic does it: each quantum of `period_ns`
/// may release `rate × period` bytes. A send is never split: one that
/// overdraws the budget is released and the overdraft is paid back by the
/// following quanta staying silent. Budget left unused in a quantum is not
/// banked, so an idle sender cannot burst later.
#[derive(Debug, Clone)]
pub struct RateLimiter {
    budget: u64,
    // Never zero; the niche makes `Option<RateLimiter>` no larger than the
    // limiter, which every paced connection holds.
    period_ns: NonZeroU64,
    quantum: u64,
    used: u64,
}

impl RateLimiter {
    /// A limiter for `bytes_per_second` in quanta of `period_ns`. Returns
    /// `None` when the budget per quantum would be below one byte.
    pub fn new(bytes_per_second: u64, period_ns: u64) -> Option<Self> {
        // Saturating, not truncating: a rate from a peer's hello times a long
        // quantum can exceed u64, and a wrapped budget could even be zero.
        let budget = u64::try_from(u128::from(bytes_per_second) * u128::from(period_ns) / 1_000_000_000)
            .unwrap_or(u64::MAX);
        let period_ns = NonZeroU64::new(period_ns)?;
        if budget == 0 {
            return None;
        }
        Some(Self {
            budget,
            period_ns,
            quantum: 0,
            used: 0,
        })
    }

    /// Bytes released per quantum.
    pub fn budget(&self) -> u64 {
        self.budget
    }

    /// Asks to send at time `now_ns`. When the answer is [`Release::At`], call
    /// again at (or after) that time.
    pub fn poll(&mut self, now_ns: u64) -> Release {
        let period_ns = self.period_ns.get();
        let current = now_ns / period_ns;
        if current > self.quantum {
            let elapsed = current - self.quantum;
            // Each elapsed quantum pays off one budget of overdraft; the
            // subtraction saturates at zero, which is what stops idle quanta
            // from being banked.
            self.used = self.used.saturating_sub(self.budget.saturating_mul(elapsed));
            self.quantum = current;
        }
        if self.used < self.budget {
            Release::Now
        } else {
            let wait_quanta = self.used / self.budget;
            Release::At(self.quantum.saturating_add(wait_quanta).saturating_mul(period_ns))
        }
    }

    /// Records that `bytes` were sent in the current quantum.
    pub fn sent(&mut self, bytes: u64) {
        self.used = self.used.saturating_add(bytes);
    }
}

/// Bursts: every `count`-th send is held back by `delay_ns`.
#[derive(Debug, Clone)]
pub struct BurstPacer {
    // Never zero (the niche keeps `Option<BurstPacer>` at 16 bytes).
    count: NonZeroU32,
    delay_ns: u64,
    left: u32,
}

impl BurstPacer {
    /// Pacer for bursts of `count` sends separated by `delay_ns`.
    pub fn new(count: u32, delay_ns: u64) -> Self {
        let count = NonZeroU32::new(count).unwrap_or(NonZeroU32::MIN);
        Self {
            count,
            delay_ns,
            left: count.get(),
        }
    }

    /// Called after each send; returns the pause to take before the next one.
    pub fn after_send(&mut self) -> Option<u64> {
        self.left -= 1;
        if self.left == 0 {
            self.left = self.count.get();
            Some(self.delay_ns)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_budget_past_u64_saturates_instead_of_wrapping() {
        // Found by the hello_plan fuzz target: 4.3e18 B/s over 25.6 s.
        let l = RateLimiter::new(4_323_455_642_275_676_160, 25_600_000_000).unwrap();
        assert_eq!(l.budget(), u64::MAX);
    }

    const MS: u64 = 1_000_000;

    #[test]
    fn budget_is_rate_times_period() {
        let r = RateLimiter::new(1000, 50 * MS).unwrap();
        assert_eq!(r.budget(), 50);
        assert!(RateLimiter::new(1, 100 * MS).is_none());
    }

    #[test]
    fn sends_within_budget_release_immediately() {
        let mut r = RateLimiter::new(10_000, 100 * MS).unwrap(); // 1000 B per quantum
        assert_eq!(r.poll(0), Release::Now);
        r.sent(400);
        assert_eq!(r.poll(MS), Release::Now);
        r.sent(400);
        assert_eq!(r.poll(2 * MS), Release::Now);
        r.sent(400); // overdraws: 1200 of 1000
        assert_eq!(r.poll(3 * MS), Release::At(100 * MS));
        // the next quantum pays 1000 of the overdraft; 200 still count against it
        assert_eq!(r.poll(100 * MS), Release::Now);
    }

    #[test]
    fn large_send_silences_following_quanta() {
        let mut r = RateLimiter::new(10_000, 100 * MS).unwrap();
        assert_eq!(r.poll(0), Release::Now);
        r.sent(3500);
        assert_eq!(r.poll(10 * MS), Release::At(300 * MS));
        assert_eq!(r.poll(300 * MS), Release::Now);
    }

    #[test]
    fn idle_budget_is_not_banked() {
        let mut r = RateLimiter::new(10_000, 100 * MS).unwrap();
        // Idle for 10 quanta, then try to send 3 quanta worth at once.
        assert_eq!(r.poll(1000 * MS), Release::Now);
        r.sent(1000);
        assert_eq!(r.poll(1001 * MS), Release::At(1100 * MS));
    }

    #[test]
    fn average_rate_holds_over_time() {
        // Simulate a sender with 700-byte sends against 10 kB/s for 10 s.
        let mut r = RateLimiter::new(10_000, 100 * MS).unwrap();
        let mut now = 0u64;
        let mut sent = 0u64;
        while now < 10_000 * MS {
            match r.poll(now) {
                Release::Now => {
                    r.sent(700);
                    sent += 700;
                }
                Release::At(t) => now = t,
            }
        }
        // 10 s at 10 kB/s = 100 kB, within one send of the target.
        assert!((99_300..=101_400).contains(&sent), "{sent}");
    }

    #[test]
    fn burst_pacer_pauses_every_nth_send() {
        let mut b = BurstPacer::new(3, 5 * MS);
        let pauses: Vec<_> = (0..7).map(|_| b.after_send()).collect();
        assert_eq!(
            pauses,
            vec![None, None, Some(5 * MS), None, None, Some(5 * MS), None]
        );
    }
}
