//! Feeds arbitrary bytes to the session decoder as a server does, and runs
//! everything the server computes from a hello it accepts: the limit check
//! (under the default limits and under limits taken from the input), the
//! byte plan, the push-pull segments, and the pacer's arithmetic. None of
//! it may panic (overflow checks are on in fuzz builds), and an accepted
//! plan must move exactly what the hello asked.
#![no_main]

use goodput_core::plan::TcpPattern;
use goodput_core::rate::{BurstPacer, RateLimiter, Release};
use goodput_core::session::{HelloLimits, Message};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(Some((Message::Hello(h), _))) = Message::decode(data) else {
        return;
    };
    let tail = &data[data.len().min(72)..];
    let word = |i: usize| {
        let mut b = [0u8; 8];
        for (k, x) in tail.iter().skip(i * 8).take(8).enumerate() {
            b[k] = *x;
        }
        u64::from_be_bytes(b)
    };
    let limits = [
        HelloLimits {
            max_transfer: 1 << 40,
            max_buffer: 16 << 20,
            max_duration_ms: 3_600_000,
        },
        HelloLimits {
            max_transfer: word(0),
            max_buffer: word(1),
            max_duration_ms: word(3),
        },
    ];
    for l in limits {
        let Ok(plan) = h.check(&l) else { continue };
        assert!(h.transfer <= l.max_transfer);
        if h.is_timed() {
            // Timed: no byte plan, unbounded in the directions that send.
            assert!(u64::from(h.duration_ms) <= l.max_duration_ms);
            assert!(h.omit_ms < h.duration_ms);
            assert_ne!(h.pattern, TcpPattern::PushPull);
            continue;
        }
        match h.pattern {
            TcpPattern::Push | TcpPattern::Pull | TcpPattern::PushPull => {
                assert_eq!(plan.total(), h.transfer)
            }
            TcpPattern::Duplex => assert!(plan.total() >= h.transfer),
        }
        let mut seen = 0u64;
        for (_, n) in plan.segments().take(64) {
            assert!(n > 0);
            seen = seen.checked_add(n).expect("segments sum within the total");
        }
        assert!(seen <= plan.total());
        if h.server_rate > 0 {
            let period_ns = u64::from(h.rate_period_ms) * 1_000_000;
            let mut limiter = RateLimiter::new(h.server_rate, period_ns).expect("check kept a byte per quantum");
            let mut now = word(2) >> 8;
            for _ in 0..8 {
                match limiter.poll(now) {
                    Release::Now => limiter.sent(u64::from(h.server_buffer).min(limiter.budget())),
                    Release::At(t) => now = t,
                }
            }
        }
        if h.burst_count > 0 {
            let mut b = BurstPacer::new(h.burst_count, u64::from(h.burst_delay_ms) * 1_000_000);
            for _ in 0..8 {
                let _ = b.after_send();
            }
        }
    }
});
