//! owping's figures from an OWAMP session's receive log: the data records
//! a receiver keeps (ours, or owampd's through Fetch-Session) in arrival
//! order, with lost packets at a zero receive time.
//!
//! What is counted, as owping counts it:
//!
//! - `sent`: the packets the sender says it sent (Stop-Sessions' or
//!   Fetch-Ack's Next-Seqno, minus the packets of its skip ranges, which
//!   count apart as `unsent`); records of sequence numbers at or beyond
//!   Next-Seqno or inside a skip range are left out;
//! - `received`: sequence numbers with at least one record that has a
//!   receive time; `lost`: the others that were sent (whether or not the
//!   log holds a lost record for them); `duplicates`: records beyond the
//!   first of one number;
//! - n-reordering (RFC 4737 §5, owping's "n-reordering"): an arrival is
//!   n-reordered when its number is below each of the n arrivals before
//!   it; duplicates count as arrivals, as in owping; the percentages are
//!   of all arrivals;
//! - delay = receive time − send time, on two clocks: exact only when both
//!   say they are synchronised (S bit); the error bound is the largest sum
//!   of the two estimates; hops = 255 − the TTL received.
//!
//! Where owping reads its median and jitter (P95 − P50) from buckets of
//! 0.1 ms, these come from an HdrHistogram to 0.1% and min/max are exact.
//! Memory is proportional to the records given, never to a number a peer
//! sent.

use super::control::{DataRecord, SkipRange};
use crate::stamp::stats::{SignedHistogram, MAX_N_REORDERING};
use crate::stamp::ErrorEstimate;

/// A session's one-way figures.
#[derive(Debug, Clone)]
pub struct OneWayFigures {
    /// Packets sent (Next-Seqno minus the skipped ones).
    pub sent: u64,
    /// Packets the sender skipped (its skip ranges, below Next-Seqno).
    pub unsent: u64,
    /// Distinct sequence numbers received.
    pub received: u64,
    /// Sent and never received.
    pub lost: u64,
    /// Copies beyond the first.
    pub duplicates: u64,
    /// Arrivals (first copies and duplicates), the base of the
    /// reordering percentages.
    pub arrivals: u64,
    /// RFC 4737 reordered arrivals (1-reordered).
    pub reordered: u64,
    /// `n_reordered[n-1]`: arrivals that are n-reordered.
    pub n_reordered: [u64; MAX_N_REORDERING],
    /// One-way delay of first copies, nanoseconds (signed: two clocks).
    pub delay: SignedHistogram,
    /// IPDV of consecutive sequence numbers both received, nanoseconds.
    pub ipdv: SignedHistogram,
    /// Every timestamp (send and receive) had its S bit set.
    pub synchronized: bool,
    /// Largest send + receive error bound of a record, nanoseconds.
    pub max_error_ns: Option<f64>,
    /// TTLs received: smallest, largest and how many distinct values.
    pub ttl: Option<(u8, u8, u16)>,
    /// Send time (NTP) of the first and last packet sent.
    pub first_send: Option<u64>,
    /// See `first_send`.
    pub last_send: Option<u64>,
    /// Records left out: beyond Next-Seqno, beyond the packets asked for,
    /// or a lost record for a number also received.
    pub ignored: u64,
}

/// A 32.32 time difference `b − a` in nanoseconds, rounded to nearest.
pub fn ntp_diff_ns(a: u64, b: u64) -> i64 {
    let d = i128::from(b) - i128::from(a);
    ((d * 1_000_000_000 + (1 << 31)) >> 32) as i64
}

/// Merges skip ranges below `next_seq` into sorted, disjoint, inclusive
/// ranges.
fn merged_skips(skips: &[SkipRange], next_seq: u32) -> Vec<(u32, u32)> {
    let mut r: Vec<(u32, u32)> = skips
        .iter()
        .filter(|s| s.first <= s.last && s.first < next_seq)
        .map(|s| (s.first, s.last.min(next_seq - 1)))
        .collect();
    r.sort_unstable();
    let mut out: Vec<(u32, u32)> = Vec::with_capacity(r.len());
    for (a, b) in r {
        match out.last_mut() {
            Some(last) if a <= last.1.saturating_add(1) => last.1 = last.1.max(b),
            _ => out.push((a, b)),
        }
    }
    out
}

fn skipped(ranges: &[(u32, u32)], seq: u32) -> bool {
    let i = ranges.partition_point(|&(_, last)| last < seq);
    ranges.get(i).is_some_and(|&(first, _)| first <= seq)
}

impl OneWayFigures {
    /// The figures of a session from its records in arrival order.
    /// `next_seq` is the sender's Next-Seqno (the packets it went
    /// through), `skips` its skip ranges.
    pub fn from_records(records: &[DataRecord], next_seq: u32, skips: &[SkipRange]) -> Self {
        let ranges = merged_skips(skips, next_seq);
        let unsent: u64 = ranges.iter().map(|&(a, b)| u64::from(b - a) + 1).sum();
        let sent = u64::from(next_seq) - unsent;
        let mut f = OneWayFigures {
            sent,
            unsent,
            received: 0,
            lost: 0,
            duplicates: 0,
            arrivals: 0,
            reordered: 0,
            n_reordered: [0; MAX_N_REORDERING],
            delay: SignedHistogram::default(),
            ipdv: SignedHistogram::default(),
            synchronized: true,
            max_error_ns: None,
            ttl: None,
            first_send: None,
            last_send: None,
            ignored: 0,
        };
        let mut ttls = [false; 256];
        // The first copy of each number: (seq, delay), sorted later.
        let mut firsts: Vec<(u32, usize, i64)> = Vec::new();
        let mut recent: std::collections::VecDeque<u32> = std::collections::VecDeque::new();
        let mut first_seq = u32::MAX;
        let mut last_seq = 0u32;
        for (i, r) in records.iter().enumerate() {
            if r.seq >= next_seq || skipped(&ranges, r.seq) {
                f.ignored += 1;
                continue;
            }
            let (se, re) = (
                ErrorEstimate::from_u16(r.send_err),
                ErrorEstimate::from_u16(r.recv_err),
            );
            if r.seq <= first_seq {
                first_seq = r.seq;
                f.first_send = Some(r.send_time);
            }
            if r.seq >= last_seq {
                last_seq = r.seq;
                f.last_send = Some(r.send_time);
            }
            if r.is_lost() {
                f.synchronized &= re.synchronized;
                continue;
            }
            f.synchronized &= se.synchronized && re.synchronized;
            if let (Some(a), Some(b)) = (se.error_ns(), re.error_ns()) {
                f.max_error_ns = Some(f.max_error_ns.map_or(a + b, |m: f64| m.max(a + b)));
            }
            f.arrivals += 1;
            let n = recent.iter().rev().take_while(|&&prev| r.seq < prev).count();
            for c in &mut f.n_reordered[..n] {
                *c += 1;
            }
            if recent.len() == MAX_N_REORDERING {
                recent.pop_front();
            }
            recent.push_back(r.seq);
            ttls[usize::from(r.ttl)] = true;
            firsts.push((r.seq, i, ntp_diff_ns(r.send_time, r.recv_time)));
        }
        f.reordered = f.n_reordered[0];
        // Stable by arrival within one number: the first copy leads.
        firsts.sort_unstable_by_key(|&(seq, i, _)| (seq, i));
        let mut prev: Option<(u32, i64)> = None;
        for &(seq, _, d) in &firsts {
            match prev {
                Some((p, _)) if p == seq => {
                    f.duplicates += 1;
                    continue;
                }
                Some((p, pd)) if p.wrapping_add(1) == seq => f.ipdv.record(d - pd),
                _ => {}
            }
            f.received += 1;
            f.delay.record(d);
            prev = Some((seq, d));
        }
        f.lost = f.sent.saturating_sub(f.received);
        let mut vals = ttls.iter().enumerate().filter(|(_, &s)| s).map(|(t, _)| t as u8);
        if let Some(lo) = vals.next() {
            let (hi, n) = vals.fold((lo, 1u16), |(_, n), t| (t, n + 1));
            f.ttl = Some((lo, hi, n));
        }
        f
    }

    /// Adds another session's figures (a continuous stream's total):
    /// counts add, distributions merge, the TTL range widens (its count
    /// of distinct values becomes a lower bound), first and last span
    /// both.
    pub fn merge(&mut self, o: &OneWayFigures) {
        self.sent += o.sent;
        self.unsent += o.unsent;
        self.received += o.received;
        self.lost += o.lost;
        self.duplicates += o.duplicates;
        self.arrivals += o.arrivals;
        self.reordered += o.reordered;
        for (a, b) in self.n_reordered.iter_mut().zip(o.n_reordered) {
            *a += b;
        }
        self.delay.merge(&o.delay);
        self.ipdv.merge(&o.ipdv);
        self.synchronized &= o.synchronized;
        self.max_error_ns = match (self.max_error_ns, o.max_error_ns) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        self.ttl = match (self.ttl, o.ttl) {
            (Some((a, b, n)), Some((c, d, m))) => {
                let (lo, hi) = (a.min(c), b.max(d));
                Some((lo, hi, n.max(m).max(u16::from(lo != hi) + 1)))
            }
            (a, b) => a.or(b),
        };
        self.first_send = match (self.first_send, o.first_send) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.last_send = match (self.last_send, o.last_send) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        self.ignored += o.ignored;
    }

    /// Lost, percent of sent.
    pub fn loss_percent(&self) -> f64 {
        if self.sent == 0 {
            0.0
        } else {
            self.lost as f64 * 100.0 / self.sent as f64
        }
    }

    /// n-reordering percentages for n = 1, 2, … while any (empty: no
    /// reordering), of all arrivals.
    pub fn n_reordering_percent(&self) -> Vec<f64> {
        self.n_reordered
            .iter()
            .take_while(|&&c| c > 0)
            .map(|&c| c as f64 * 100.0 / self.arrivals.max(1) as f64)
            .collect()
    }

    /// Hops as (fewest, most): 255 − the largest and smallest TTL.
    pub fn hops(&self) -> Option<(u8, u8)> {
        self.ttl.map(|(lo, hi, _)| (255 - hi, 255 - lo))
    }

    /// owping's jitter: P95 − P50 of the delays, nanoseconds.
    pub fn jitter_ns(&self) -> Option<i64> {
        (!self.delay.is_empty()).then(|| self.delay.quantile(0.95) - self.delay.quantile(0.5))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: u64 = 0xeeb4_8e00_0000_0000;
    /// 1 ms in 32.32.
    const MS: u64 = 4_294_967;

    fn rec(seq: u32, delay_ms: u64, ttl: u8) -> DataRecord {
        let send = T0 + u64::from(seq) * 100 * MS;
        DataRecord {
            seq,
            send_err: 0x0001,
            recv_err: 0x0001,
            send_time: send,
            recv_time: send + delay_ms * MS,
            ttl,
        }
    }

    fn lost(seq: u32) -> DataRecord {
        DataRecord {
            recv_time: 0,
            ..rec(seq, 0, 255)
        }
    }

    /// owstats -R of the "to" session of the recorded owping run
    /// a_owping_open (seq, send time, receive time; every error estimate
    /// 0x0001, every TTL 255); owping reported min 4.29153e-05 s, max
    /// 8.7738e-05 s, median bucket 0.1 ms, 0 lost, 0 duplicates, no
    /// reordering.
    const RECORDED: [(u64, u64); 10] = [
        (17200529010567404045, 17200529010567756233),
        (17200529010594127332, 17200529010594312016),
        (17200529012168250026, 17200529012168585033),
        (17200529012238584410, 17200529012238833518),
        (17200529012790689571, 17200529012791015989),
        (17200529013129901793, 17200529013130211031),
        (17200529013612265275, 17200529013612595988),
        (17200529014565357173, 17200529014565735130),
        (17200529014746566138, 17200529014746944095),
        (17200529014929566105, 17200529014929918292),
    ];

    #[test]
    fn a_recorded_owping_session_gives_owpings_figures() {
        let records: Vec<DataRecord> = RECORDED
            .iter()
            .enumerate()
            .map(|(i, &(s, r))| DataRecord {
                seq: i as u32,
                send_err: 1,
                recv_err: 1,
                send_time: s,
                recv_time: r,
                ttl: 255,
            })
            .collect();
        let f = OneWayFigures::from_records(&records, 10, &[]);
        assert_eq!((f.sent, f.received, f.lost, f.duplicates), (10, 10, 0, 0));
        // Exact: the timestamps are whole microseconds (gettimeofday).
        // owping subtracts the two as doubles, which near 2^32 s keep
        // about 0.5 µs, and printed 4.29153e-05 and 8.7738e-05 seconds.
        assert_eq!(f.delay.min(), 43_000);
        assert_eq!(f.delay.max(), 88_000);
        assert!((f.delay.min() - 42_915).abs() < 500 && (f.delay.max() - 87_738).abs() < 500);
        // owping's median is the 0.1 ms bucket: (0, 100 µs].
        let median = f.delay.quantile(0.5);
        assert!(median > 0 && median <= 100_000, "{median}");
        assert!(f.n_reordering_percent().is_empty());
        assert!(!f.synchronized);
        assert_eq!(f.hops(), Some((0, 0)));
        assert_eq!(f.ttl, Some((255, 255, 1)));
        assert_eq!(f.first_send, Some(RECORDED[0].0));
        assert_eq!(f.last_send, Some(RECORDED[9].0));
        // Two error estimates of 2^-32 s.
        assert!((f.max_error_ns.unwrap() - 2.0 * 0.232_830_643_7).abs() < 1e-6);
    }

    #[test]
    fn loss_duplicates_skips_and_reordering_are_exact() {
        let mut records = Vec::new();
        for seq in 0..100u32 {
            if seq % 10 == 3 {
                records.push(lost(seq));
                continue;
            }
            records.push(rec(seq, 5, 250));
        }
        // A duplicate of 20 arriving late, and 50/51 swapped.
        records.insert(25, rec(20, 7, 250));
        let i50 = records.iter().position(|r| r.seq == 50).unwrap();
        records.swap(i50, i50 + 1);
        // The sender skipped 95..=99 and stopped at 100; the receiver's
        // lost records for them are left out; 96..=99 were never logged.
        records.retain(|r| r.seq < 96);
        let end = records.len() - 1;
        records[end] = lost(95);
        let f = OneWayFigures::from_records(&records, 100, &[SkipRange { first: 95, last: 99 }]);
        assert_eq!(f.unsent, 5);
        assert_eq!(f.sent, 95);
        // 3, 13, …, 93: 10 lost records, none of them skipped.
        assert_eq!(f.lost, 10);
        assert_eq!(f.received, 85);
        assert_eq!(f.duplicates, 1);
        // 50 arrives after 51, and the duplicate 20 after 21..=24.
        assert_eq!(f.reordered, 2);
        assert_eq!(f.n_reordered[1..4], [1, 1, 0]);
        assert_eq!(f.arrivals, 86);
        assert_eq!(f.n_reordering_percent().len(), 3);
        assert!((f.n_reordering_percent()[0] - 200.0 / 86.0).abs() < 1e-9);
        assert_eq!(f.delay.min(), 5_000_000);
        assert_eq!(f.hops(), Some((5, 5)));
        assert!((f.loss_percent() - 1000.0 / 95.0).abs() < 1e-9);
    }

    #[test]
    fn records_beyond_next_seq_and_missing_lost_records_are_handled() {
        // The receiver never logged 4, and logged 7 and 8 (past Next-Seqno
        // 6, which it cannot have been sent).
        let records = vec![
            rec(0, 1, 255),
            rec(1, 1, 255),
            rec(2, 1, 255),
            rec(3, 1, 254),
            rec(5, 2, 255),
            rec(7, 1, 255),
            lost(8),
        ];
        let f = OneWayFigures::from_records(&records, 6, &[]);
        assert_eq!((f.sent, f.received, f.lost, f.ignored), (6, 5, 1, 2));
        assert_eq!(f.ttl, Some((254, 255, 2)));
        assert_eq!(f.hops(), Some((0, 1)));
        // IPDV over 0-1, 1-2, 2-3 (4 is missing, so not 3-5).
        assert_eq!(f.ipdv.len(), 3);
        assert_eq!(f.last_send, Some(rec(5, 0, 0).send_time));
        assert!(OneWayFigures::from_records(&[], 0, &[]).delay.is_empty());
    }

    #[test]
    fn sessions_merge_into_a_streams_total() {
        let a = OneWayFigures::from_records(&[rec(0, 5, 255), lost(1), rec(2, 9, 250)], 3, &[]);
        let b = OneWayFigures::from_records(&[rec(1, 1, 255), rec(0, 7, 255), rec(1, 1, 255)], 2, &[]);
        let mut t = a.clone();
        t.merge(&b);
        assert_eq!((t.sent, t.received, t.lost, t.duplicates), (5, 4, 1, 1));
        assert_eq!(t.reordered, 1);
        assert_eq!(t.delay.len(), 4);
        assert_eq!((t.delay.min(), t.delay.max()), (1_000_000, 8_999_999));
        assert_eq!(t.ttl, Some((250, 255, 2)));
        assert_eq!(t.first_send, Some(rec(0, 0, 0).send_time));
        assert_eq!(t.last_send, Some(rec(2, 0, 0).send_time));
    }

    #[test]
    fn negative_delays_of_unsynchronised_clocks_are_kept() {
        let mut r = rec(0, 0, 255);
        r.recv_time = r.send_time - 3 * MS;
        let f = OneWayFigures::from_records(&[r], 1, &[]);
        assert_eq!(f.delay.min(), -3_000_000);
        assert_eq!(ntp_diff_ns(10 * MS, 0), -9_999_999);
    }
}
