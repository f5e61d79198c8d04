//! An OWAMP session's send schedule (RFC 4656 §3.5 and its appendix): the
//! sender sends packet `i` at Start Time plus the sum of the first `i + 1`
//! gaps, and the receiver computes the same times to know when a packet
//! is late enough to be lost. Both ends must therefore draw exactly the
//! same gaps, so the exponential ones come from the RFC's deterministic
//! generator and never from a floating-point logarithm:
//!
//! - the uniform stream is AES-128 in counter mode keyed by the session's
//!   SID: block `c` (a 128-bit big-endian counter from 0) encrypted gives
//!   four 32-bit big-endian binary fractions, used in order;
//! - an exponential deviate of mean 1 comes from those fractions by
//!   Knuth's algorithm 3.4.1 S (shift off the leading one bits, accept at
//!   once below ln 2, else take the least of k more fractions), all in
//!   32.32 fixed point with the RFC's table of Q[k];
//! - a slot's gap is that deviate times the slot's mean (exponential), or
//!   the slot's value itself (fixed). Slots are used in turn, cyclically,
//!   and a fixed slot draws nothing from the stream.
//!
//! Everything here is in 32.32 fixed-point seconds, the wire's form, so
//! the sums are exact; the `_ns` forms convert at the end.

use aes::cipher::{BlockEncrypt, KeyInit};
use aes::Aes128;

use super::control::{Slot, SlotKind};

/// RFC 4656's Q[1..=11], Q[k] = Σ_{i=1..k} (ln 2)^i / i!, as 32-bit binary
/// fractions (rounded); index 0 is unused.
const Q: [u64; 12] = [
    0,
    0xB172_17F8,
    0xEEF1_93F7,
    0xFD27_1862,
    0xFF9D_6DD0,
    0xFFF4_CFD0,
    0xFFFE_E819,
    0xFFFF_E7FF,
    0xFFFF_FE2B,
    0xFFFF_FFE0,
    0xFFFF_FFFE,
    0xFFFF_FFFF,
];

/// ln 2 as a 32-bit binary fraction.
const LN2: u64 = Q[1];

/// 32.32 multiplication, keeping the low 64 bits of the 32.32 product as
/// the RFC's reference arithmetic does.
fn mul(x: u64, y: u64) -> u64 {
    ((u128::from(x) * u128::from(y)) >> 32) as u64
}

/// The RFC's stream of exponential deviates of mean 1, seeded by a SID.
#[derive(Clone)]
pub struct ExpStream {
    aes: Aes128,
    counter: u128,
    out: [u8; 16],
}

impl std::fmt::Debug for ExpStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExpStream")
            .field("counter", &self.counter)
            .finish()
    }
}

impl ExpStream {
    /// A stream keyed by `seed` (OWAMP: the session's SID).
    pub fn new(seed: &[u8; 16]) -> Self {
        Self {
            aes: Aes128::new(seed.into()),
            counter: 0,
            out: [0; 16],
        }
    }

    /// The next uniform 32-bit binary fraction (the low half of a 32.32
    /// number).
    pub fn uniform(&mut self) -> u64 {
        let quarter = (self.counter & 3) as usize;
        if quarter == 0 {
            let mut block = self.counter.to_be_bytes().into();
            self.aes.encrypt_block(&mut block);
            self.out.copy_from_slice(&block);
        }
        self.counter = self.counter.wrapping_add(1);
        let b = &self.out[4 * quarter..4 * quarter + 4];
        u64::from(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// The next exponential deviate of mean 1, in 32.32 fixed point.
    pub fn next_exp(&mut self) -> u64 {
        // S1: count and shift off the leading one bits and the zero after
        // them (an all-ones fraction stops at 32, as the reference does).
        let mut u = self.uniform();
        let mut j = 0u64;
        while u & 0x8000_0000 != 0 && j < 32 {
            u <<= 1;
            j += 1;
        }
        u = (u << 1) & 0xFFFF_FFFF;
        let jj = j << 32;
        // S2: immediate acceptance.
        if u < LN2 {
            return mul(jj, LN2) + u;
        }
        // S3: the least k ≥ 2 with U < Q[k] (11 at most), then the
        // minimum of k fresh fractions.
        let k = (2..Q.len()).find(|&k| u < Q[k]).unwrap_or(Q.len() - 1);
        let mut v = self.uniform();
        for _ in 1..k {
            v = v.min(self.uniform());
        }
        // S4.
        mul(jj + v, LN2)
    }
}

/// Why slots cannot make a schedule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    /// No slot at all.
    #[error("a schedule needs at least one slot")]
    Empty,
}

/// A session's send schedule: gaps and cumulative offsets from Start
/// Time, packet by packet, as both OWAMP ends compute them.
#[derive(Debug, Clone)]
pub struct Schedule {
    slots: Vec<Slot>,
    exp: ExpStream,
    next: u64,
    offset: u64,
    /// The last offset the iterator gave, nanoseconds.
    iter_ns: u64,
}

impl Schedule {
    /// The schedule of the session `sid` with these slots (used in turn).
    pub fn new(sid: &[u8; 16], slots: &[Slot]) -> Result<Self, ScheduleError> {
        if slots.is_empty() {
            return Err(ScheduleError::Empty);
        }
        Ok(Self {
            slots: slots.to_vec(),
            exp: ExpStream::new(sid),
            next: 0,
            offset: 0,
            iter_ns: 0,
        })
    }

    /// The sequence number the next gap belongs to.
    pub fn next_seq(&self) -> u64 {
        self.next
    }

    /// The next packet's gap after the previous one (the first packet's:
    /// after Start Time), 32.32 seconds.
    pub fn next_gap(&mut self) -> u64 {
        let slot = self.slots[(self.next % self.slots.len() as u64) as usize];
        self.next += 1;
        let gap = match slot.kind {
            SlotKind::Exponential => mul(self.exp.next_exp(), slot.gap),
            SlotKind::Fixed => slot.gap,
        };
        self.offset = self.offset.wrapping_add(gap);
        gap
    }

    /// [`Schedule::next_gap`] in nanoseconds (rounded down).
    pub fn next_gap_ns(&mut self) -> u64 {
        to_ns(self.next_gap())
    }

    /// The next packet's send time after Start Time, 32.32 seconds: the
    /// sum of its gap and every earlier one.
    pub fn next_offset(&mut self) -> u64 {
        self.next_gap();
        self.offset
    }

    /// [`Schedule::next_offset`] in nanoseconds (rounded down).
    pub fn next_offset_ns(&mut self) -> u64 {
        to_ns(self.next_offset())
    }

    /// Packet `seq`'s offset from Start Time in nanoseconds, computed
    /// afresh from the start (cost grows with `seq`; senders and
    /// receivers walk the schedule with [`Schedule::next_offset`]).
    pub fn offset_ns(sid: &[u8; 16], slots: &[Slot], seq: u32) -> Result<u64, ScheduleError> {
        let mut s = Self::new(sid, slots)?;
        let mut off = 0;
        for _ in 0..=seq {
            off = s.next_offset();
        }
        Ok(to_ns(off))
    }
}

/// The gaps in nanoseconds, forever: each the difference of two exact
/// offsets, so rounding never accumulates over a long session.
impl Iterator for Schedule {
    type Item = u64;

    fn next(&mut self) -> Option<u64> {
        let at = self.next_offset_ns();
        let gap = at.saturating_sub(self.iter_ns);
        self.iter_ns = at;
        Some(gap)
    }
}

fn to_ns(v: u64) -> u64 {
    ((u128::from(v) * 1_000_000_000) >> 32) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex16(s: &str) -> [u8; 16] {
        let mut b = [0u8; 16];
        for (i, o) in b.iter_mut().enumerate() {
            *o = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap();
        }
        b
    }

    /// The reference vectors owamp ships (test/owtvec.c, also RFC 4656
    /// Appendix B): for each seed, the 32.32 sum of the first million
    /// deviates of mean 1.
    #[test]
    fn exponential_deviates_match_owamps_test_vectors() {
        let vectors = [
            ("2872979303ab47eeac028dab3829dab2", 0x000f_4479_bd31_7381u64),
            ("0102030405060708090a0b0c0d0e0f00", 0x000f_4336_8646_6a62),
            ("deadbeefdeadbeefdeadbeefdeadbeef", 0x000f_416c_8884_d2d3),
            ("feed0feed1feed2feed3feed4feed5ab", 0x000f_3f0b_4b41_6ec8),
        ];
        for (seed, want) in vectors {
            let mut e = ExpStream::new(&hex16(seed));
            let sum = (0..1_000_000).fold(0u64, |s, _| s.wrapping_add(e.next_exp()));
            assert_eq!(sum, want, "seed {seed}: sum {sum:#018x}, owamp's {want:#018x}");
        }
    }

    #[test]
    fn fixed_slots_draw_nothing_and_cycle() {
        let slots = [
            Slot::from_ns(SlotKind::Fixed, 100_000_000),
            Slot::from_ns(SlotKind::Fixed, 50_000_000),
        ];
        let mut s = Schedule::new(&[0; 16], &slots).unwrap();
        let gaps: Vec<u64> = (0..4).map(|_| s.next_gap()).collect();
        assert_eq!(gaps, vec![slots[0].gap, slots[1].gap, slots[0].gap, slots[1].gap]);
        assert_eq!(s.offset, 2 * slots[0].gap + 2 * slots[1].gap);
        assert!(Schedule::new(&[0; 16], &[]).is_err());
    }

    /// owping -i 0.1 (one exponential slot of mean 0.1 s) to owampd at
    /// 127.0.0.1, SID 7f000001eeb48dffc144bb1add54c12a, Start Time
    /// eeb48e00b615a8de (recorded session a_owping_open): the sender
    /// stamped each packet at most a few hundred microseconds after the
    /// schedule's time, never before it.
    #[test]
    fn poisson_offsets_match_a_recorded_owping_session() {
        let sid = hex16("7f000001eeb48dffc144bb1add54c12a");
        let start: u64 = 0xeeb4_8e00_b615_a8de;
        // Send timestamps of packets 0..=9 from owstats -R of that session.
        let sent: [u64; 10] = [
            17200529010567404045,
            17200529010594127332,
            17200529012168250026,
            17200529012238584410,
            17200529012790689571,
            17200529013129901793,
            17200529013612265275,
            17200529014565357173,
            17200529014746566138,
            17200529014929566105,
        ];
        let slot = Slot {
            kind: SlotKind::Exponential,
            gap: 0x1999_9999,
        };
        let mut s = Schedule::new(&sid, &[slot]).unwrap();
        for (seq, &t) in sent.iter().enumerate() {
            let due = start + s.next_offset();
            let late_ns = t.checked_sub(due).map(to_ns);
            assert!(
                late_ns.is_some_and(|l| l < 2_000_000),
                "packet {seq}: sent at {t:#x}, due {due:#x}"
            );
        }
        assert_eq!(
            Schedule::offset_ns(&sid, &[slot], 9).unwrap(),
            to_ns({
                let mut s = Schedule::new(&sid, &[slot]).unwrap();
                (0..10).map(|_| s.next_offset()).last().unwrap()
            })
        );
    }
}
