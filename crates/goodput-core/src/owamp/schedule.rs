//! An OWAMP session's send schedule (RFC 4656 §3.5): packet `i` is due
//! at the start time plus the first `i + 1` gaps, the slots taken in turn.
//! A fixed slot's gap is its value; an exponential slot's is its mean
//! times a unit exponential deviate drawn as RFC 4656 §8 and owamp draw
//! it: 32-bit uniform fractions from AES-128 in counter mode keyed with
//! the SID (a counter from zero, each encrypted block giving four
//! fractions), turned into deviates by Knuth's algorithm S, all in 32.32
//! fixed point. Sender and receiver of a session so agree on every
//! packet's time, and a receiver knows when a packet is late.

use aes::cipher::{BlockEncrypt, KeyInit};
use aes::Aes128;

use super::control::{Slot, SlotKind};

/// A session's gaps, in order.
pub struct Schedule {
    slots: Vec<Slot>,
    next: usize,
    aes: Aes128,
    counter: [u8; 16],
    out: [u8; 16],
    q: [u64; 12],
}

/// (ln 2)^1/1! + ... + (ln 2)^k/k!, as 32-bit binary fractions rounded to
/// nearest, for k = 1..=11 (index 0 unused); the last ones saturate just
/// below one.
fn knuth_q() -> [u64; 12] {
    let ln2 = std::f64::consts::LN_2;
    let mut q = [0u64; 12];
    let (mut term, mut sum) = (1.0f64, 0.0f64);
    for (k, slot) in q.iter_mut().enumerate().skip(1) {
        term *= ln2 / k as f64;
        sum += term;
        *slot = ((sum * 4_294_967_296.0).round() as u64).min(0xFFFF_FFFF);
    }
    q
}

/// 32.32 × 32.32, truncated to 32.32 (owamp's multiplication).
fn mul(a: u64, b: u64) -> u64 {
    ((u128::from(a) * u128::from(b)) >> 32) as u64
}

impl Schedule {
    /// The schedule of session `sid` with `slots` (at least one).
    pub fn new(sid: &[u8; 16], slots: &[Slot]) -> Self {
        Self {
            slots: slots.to_vec(),
            next: 0,
            aes: Aes128::new(sid.into()),
            counter: [0; 16],
            out: [0; 16],
            q: knuth_q(),
        }
    }

    /// The next 32-bit uniform fraction (in the low half).
    fn uniform(&mut self) -> u64 {
        let quarter = usize::from(self.counter[15] & 3);
        if quarter == 0 {
            let mut b = self.counter;
            self.aes.encrypt_block((&mut b).into());
            self.out = b;
        }
        for byte in self.counter.iter_mut().rev() {
            *byte = byte.wrapping_add(1);
            if *byte != 0 {
                break;
            }
        }
        let w = &self.out[4 * quarter..4 * quarter + 4];
        u64::from(u32::from_be_bytes([w[0], w[1], w[2], w[3]]))
    }

    /// A unit exponential deviate, 32.32 (Knuth's algorithm S).
    fn exponential(&mut self) -> u64 {
        let ln2 = self.q[1];
        let mut u = self.uniform();
        let mut j = 0u64;
        // Count and drop the leading one bits, then the zero after them.
        while u & 0x8000_0000 != 0 && j < 32 {
            u <<= 1;
            j += 1;
        }
        u = (u << 1) & 0xFFFF_FFFF;
        if u < ln2 {
            return j * ln2 + u;
        }
        let k = (2..self.q.len()).find(|&k| u < self.q[k]).unwrap_or(self.q.len());
        let mut v = self.uniform();
        for _ in 2..=k {
            v = v.min(self.uniform());
        }
        mul((j << 32) + v, ln2)
    }

    /// The next gap, 32.32 seconds.
    pub fn next_gap(&mut self) -> u64 {
        let Some(&slot) = self.slots.get(self.next % self.slots.len().max(1)) else {
            return 0;
        };
        self.next += 1;
        match slot.kind {
            SlotKind::Fixed => slot.gap,
            SlotKind::Exponential => mul(self.exponential(), slot.gap),
        }
    }
}

impl Iterator for Schedule {
    /// The next gap in nanoseconds.
    type Item = u64;

    fn next(&mut self) -> Option<u64> {
        let g = self.next_gap();
        Some(((u128::from(g) * 1_000_000_000) >> 32) as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn knuths_constants_approach_one_from_ln2() {
        let q = knuth_q();
        assert_eq!(q[1], 0xB172_17F8, "ln 2 in 32 bits");
        assert!(q.windows(2).skip(1).all(|w| w[0] < w[1] || w[1] == 0xFFFF_FFFF));
        assert_eq!(q[11], 0xFFFF_FFFF);
    }

    #[test]
    fn fixed_slots_come_back_as_given_in_turn() {
        let a = Slot::from_ns(SlotKind::Fixed, 1_000_000);
        let b = Slot::from_ns(SlotKind::Fixed, 3_000_000);
        let mut s = Schedule::new(&[0; 16], &[a, b]);
        let g: Vec<u64> = (0..4).map(|_| s.next_gap()).collect();
        assert_eq!(g, vec![a.gap, b.gap, a.gap, b.gap]);
    }

    #[test]
    fn exponential_gaps_are_the_sids_and_average_their_mean() {
        let mean = Slot::from_ns(SlotKind::Exponential, 100_000_000);
        let mut one = Schedule::new(&[7; 16], &[mean]);
        let mut again = Schedule::new(&[7; 16], &[mean]);
        let mut other = Schedule::new(&[8; 16], &[mean]);
        let a: Vec<u64> = (&mut one).take(20_000).collect();
        let b: Vec<u64> = (&mut again).take(20_000).collect();
        let c: Vec<u64> = (&mut other).take(20).collect();
        assert_eq!(a, b, "one SID, one schedule");
        assert_ne!(a[..20], c[..], "another SID, another schedule");
        let avg = a.iter().sum::<u64>() as f64 / a.len() as f64;
        assert!((avg - 1e8).abs() < 3e6, "mean gap {avg} ns");
    }

    #[test]
    fn owampds_exponential_sends_fall_on_this_schedule() {
        // owping's "from" session in the open-mode transcript: owampd sent
        // ten packets on an exponential schedule of mean 0.1 s; each left
        // within a millisecond after the time this schedule gives it (a
        // different generator would be off by tens of milliseconds).
        let sid = [
            0x7f, 0, 0, 1, 0xee, 0xb4, 0x8d, 0xff, 0xc1, 0x87, 0x1e, 0x6c, 0x47, 0xde, 0xf2, 0x53,
        ];
        let slot = Slot {
            kind: SlotKind::Exponential,
            gap: 0x1999_9999,
        };
        let mut s = Schedule::new(&sid, &[slot]);
        let mut due: u64 = 0xeeb4_8e00_b615_a8de;
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/data/perfsonar/a_owping_open.a_from.owstats-R.out"
        );
        let text = std::fs::read_to_string(path).unwrap();
        let mut n = 0;
        for line in text
            .lines()
            .filter(|l| l.starts_with(|c: char| c.is_ascii_digit()))
        {
            let sent: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
            due += s.next_gap();
            let late_us = ((i128::from(sent) - i128::from(due)) * 1_000_000) >> 32;
            assert!(
                (0..1000).contains(&late_us),
                "packet {n}: {late_us} us after its time"
            );
            n += 1;
        }
        assert_eq!(n, 10);
    }
}
