//! The Session-Sender's accounting. A [`Tracker`] per session matches
//! replies to the packets sent and decides, packet by packet, what happened
//! (first reply, duplicate, late, lost, reordered, IPDV against its
//! neighbour); a [`Tally`] counts those facts and can be merged, so one
//! tally per session, one per status interval and one for the run all come
//! from the same events.
//!
//! # Loss by direction
//!
//! A stateful reflector (RFC 8762 §4.3) numbers the requests of a session
//! that reach it, 0, 1, 2, …, in its replies. Between two answered packets
//! (by the sender's sequence) every packet was lost, and the reflector's
//! numbers tell how many of them reached it: the second's number minus
//! the first's, minus one. Those were lost on the way back, the others on
//! the way there. The tracker settles this gap by gap as packets leave its
//! window, in sequence order, so memory stays bounded and the reflector's
//! count need not start at 0 (the first gap assumes it does, and is left
//! unknown when the numbers say otherwise). A duplicated request takes two
//! numbers, both seen as replies to one packet; the gap after it starts at
//! the higher. What the numbers cannot tell stays unknown, never guessed:
//!
//! - the packets after the session's last answered one (they may have
//!   reached the reflector or not; nothing answered came after them),
//! - a gap whose numbers run backwards or count more arrivals than
//!   packets (reordering on the way there, or a reflector that restarted
//!   its count),
//! - a gap with a packet abandoned when the run was stopped.
//!
//! The split needs to know that the reflector is stateful: a reply whose
//! number differs from the sender's shows it, but a session that lost only
//! replies shows nothing (every number equals the sender's, as from a
//! stateless reflector). A sender that knows its reflector is stateful (a
//! goodput agent's beacon) says so with [`Tracker::with_stateful_reflector`].

use std::collections::VecDeque;

use hdrhistogram::serialization::{Serializer, V2DeflateSerializer};
use hdrhistogram::{Counter, Histogram};

use super::{decode_timestamp, ReflectorPacket, SEND_TTL};
use crate::result::{
    DelayStats, HopRange, IpdvStats, OneWayStats, SendFailure, StampHistograms, StampReflectorMode,
    StampStats,
};

/// How many preceding arrivals n-reordering looks back over.
pub const MAX_N_REORDERING: usize = 16;

/// One reply's measurements (a packet's first reply).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// Sender sequence number.
    pub seq: u32,
    /// The reflector's sequence number.
    pub reflector_seq: u32,
    /// T1, T2, T3, T4 in Unix nanoseconds (T2 and T3 on the reflector's clock).
    pub t: [i64; 4],
    /// Round-trip delay, nanoseconds.
    pub rtt_ns: i64,
    /// Forward one-way delay, nanoseconds (includes any clock offset).
    pub forward_ns: i64,
    /// Backward one-way delay, nanoseconds.
    pub backward_ns: i64,
    /// Whether both clocks claimed synchronisation.
    pub synchronized: bool,
    /// Sum of both error estimates, nanoseconds (`None` if either was invalid).
    pub error_ns: Option<f64>,
    /// TTL the reflector saw (0 = not reported).
    pub forward_ttl: u8,
    /// TTL the reply arrived with (`None` when the kernel gave none).
    pub backward_ttl: Option<u8>,
    /// Reordered by RFC 4737 (sequence below the next expected).
    pub reordered: bool,
    /// Largest n for which the packet is n-reordered (0 = none).
    pub n_reordered: usize,
    /// IPDV against the neighbouring packet, as (rtt, forward, backward)
    /// nanoseconds, for each pair this reply completed (at most two).
    pub ipdv: [Option<[i64; 3]>; 2],
}

/// What a reply turned out to be.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Verdict {
    /// The first reply to a packet, in time.
    First(Sample),
    /// Another reply to a packet already answered; `forward` when the
    /// reflector answered twice (its sequence differs), so the request was
    /// duplicated on the way in.
    Duplicate {
        /// Sender sequence.
        seq: u32,
        /// When the packet was sent (Unix ns).
        t1: i64,
        /// Duplicated before the reflector.
        forward: bool,
    },
    /// A reply to a packet already counted lost.
    Late {
        /// Sender sequence.
        seq: u32,
        /// When the packet was sent (Unix ns).
        t1: i64,
    },
    /// No packet sent matches (unknown sequence, wrong T1, or too old).
    Unmatched,
    /// The reply carries a different non-zero SSID.
    SsidMismatch,
}

#[derive(Debug, Clone, Copy)]
enum Slot {
    Pending {
        t1: i64,
    },
    Answered {
        t1: i64,
        /// The lowest and highest reflector sequence among its replies
        /// (they differ when the request was duplicated on the way there).
        reflector_seq: (u32, u32),
        d: [i64; 3],
    },
    Lost {
        t1: i64,
    },
}

impl Slot {
    fn t1(&self) -> i64 {
        match *self {
            Slot::Pending { t1 } | Slot::Answered { t1, .. } | Slot::Lost { t1 } => t1,
        }
    }
}

/// One session's matching state. Memory is bounded by the packets sent
/// within two timeouts.
#[derive(Debug)]
pub struct Tracker {
    timeout_ns: i64,
    ssid: u16,
    /// Sequence number of `slots[0]`.
    base: u32,
    slots: VecDeque<Slot>,
    next_seq: u32,
    /// RFC 4737 NextExp.
    next_exp: Option<u32>,
    /// The last sender sequences received, newest last.
    recent: VecDeque<u32>,
    /// The loss split of the packets settled so far.
    split: SplitFacts,
    /// The highest reflector sequence among the answered packets settled
    /// so far (`None`: none yet).
    anchor: Option<u32>,
    /// Lost packets settled since the last answered one.
    gap_lost: u64,
    /// The current gap holds a packet whose fate was abandoned.
    gap_uncertain: bool,
    pending: usize,
}

impl Tracker {
    /// A tracker for a session sending SSID `ssid` (0 = none) whose packets
    /// count as lost after `timeout_ns`.
    pub fn new(timeout_ns: i64, ssid: u16) -> Self {
        Self {
            timeout_ns,
            ssid,
            base: 0,
            slots: VecDeque::new(),
            next_seq: 0,
            next_exp: None,
            recent: VecDeque::with_capacity(MAX_N_REORDERING),
            split: SplitFacts::default(),
            anchor: None,
            gap_lost: 0,
            gap_uncertain: false,
            pending: 0,
        }
    }

    /// The reflector is known to number each session's replies itself
    /// (RFC 8762's stateful mode, as a goodput agent's beacon does): the
    /// session's loss splits by direction even when no reply shows it
    /// (a session that lost only replies). Declare only a reflector known
    /// to be stateful: from a stateless one every loss would read as lost
    /// on the way back.
    pub fn with_stateful_reflector(mut self) -> Self {
        self.split.stateful_known = true;
        self
    }

    /// Packets sent and neither answered nor counted lost yet.
    pub fn pending(&self) -> usize {
        self.pending
    }

    /// Forgets the packets still waiting (a run stopped by the user): they
    /// count neither as received nor as lost. Returns how many there were.
    pub fn abandon(&mut self) -> usize {
        let n = self.pending;
        while let Some(s) = self.slots.pop_front() {
            self.settle(s);
        }
        self.base = self.next_seq;
        self.pending = 0;
        n
    }

    /// Takes a packet leaving the window (in sequence order, its fate
    /// final) into the loss split; see the module's documentation.
    fn settle(&mut self, s: Slot) {
        match s {
            Slot::Lost { .. } => self.gap_lost += 1,
            Slot::Pending { .. } => self.gap_uncertain = true,
            Slot::Answered {
                reflector_seq: (lo, hi),
                ..
            } => {
                // Requests of the gap that the reflector numbered: with no
                // answered packet before, a count that started at 0 numbered
                // `lo` of them; else the numbers between the last anchor and
                // this one (distances as signed 32-bit, across a wrap).
                let arrived = match self.anchor {
                    None => i64::from(lo),
                    Some(a) => i64::from(lo.wrapping_sub(a) as i32) - 1,
                };
                let back = hi.wrapping_sub(self.anchor.unwrap_or(hi)) as i32;
                if self.gap_lost > 0 {
                    if !self.gap_uncertain && (0..=self.gap_lost as i64).contains(&arrived) {
                        let arrived = arrived as u64;
                        self.split.backward += arrived;
                        self.split.forward += self.gap_lost - arrived;
                    } else {
                        self.split.unknown += self.gap_lost;
                    }
                }
                // The anchor is the highest number seen: a request that
                // overtook others was numbered lower, and does not move it
                // back. Unless the numbers went back to a count that could
                // have started within the gap's lost packets: a reflector
                // that restarted its count (it forgot an idle session, or
                // restarted), whose new numbers are followed from here.
                let restarted = back < 0 && u64::from(lo) <= self.gap_lost;
                if back > 0 || self.anchor.is_none() || restarted {
                    self.anchor = Some(hi);
                }
                self.gap_lost = 0;
                self.gap_uncertain = false;
            }
        }
    }

    /// The sequence number of the next packet.
    pub fn next_seq(&self) -> u32 {
        self.next_seq
    }

    /// Records that packet `next_seq()` left at `t1` (Unix ns) and returns
    /// its sequence number.
    pub fn sent(&mut self, t1: i64) -> u32 {
        let seq = self.next_seq;
        self.slots.push_back(Slot::Pending { t1 });
        self.pending += 1;
        self.next_seq = self.next_seq.wrapping_add(1);
        seq
    }

    fn index(&self, seq: u32) -> Option<usize> {
        let i = seq.wrapping_sub(self.base) as usize;
        (i < self.slots.len()).then_some(i)
    }

    /// Packets whose timeout has passed by `now` without a reply: marks them
    /// lost and returns their (sequence, T1). Forgets packets older than two
    /// timeouts.
    pub fn expire(&mut self, now: i64) -> Vec<(u32, i64)> {
        let mut lost = Vec::new();
        for (i, s) in self.slots.iter_mut().enumerate() {
            if s.t1() + self.timeout_ns > now {
                break;
            }
            if let Slot::Pending { t1 } = *s {
                *s = Slot::Lost { t1 };
                self.pending -= 1;
                lost.push((self.base.wrapping_add(i as u32), t1));
            }
        }
        while let Some(&s) = self.slots.front() {
            if s.t1() + 2 * self.timeout_ns > now || matches!(s, Slot::Pending { .. }) {
                break;
            }
            self.slots.pop_front();
            self.base = self.base.wrapping_add(1);
            self.settle(s);
        }
        lost
    }

    /// Every packet still waiting, marked lost (the end of a run).
    pub fn expire_all(&mut self) -> Vec<(u32, i64)> {
        self.expire(i64::MAX - self.timeout_ns.saturating_mul(2))
    }

    /// Whether `r` answers a packet of this session still in its window
    /// (its sequence number, and the T1 it copied back).
    pub fn answers(&self, r: &ReflectorPacket) -> bool {
        self.index(r.sender_seq)
            .is_some_and(|i| r.sender_timestamp == super::ntp_from_unix_ns(self.slots[i].t1()))
    }

    /// Matches a reply that arrived at `t4` (Unix ns, our clock) with TTL
    /// `ttl`; `our_error` is the error estimate of our clock.
    pub fn reply(
        &mut self,
        r: &ReflectorPacket,
        t4: i64,
        ttl: Option<u8>,
        our_error: super::ErrorEstimate,
    ) -> Verdict {
        if self.ssid != 0 && r.ssid != 0 && r.ssid != self.ssid {
            return Verdict::SsidMismatch;
        }
        let seq = r.sender_seq;
        let Some(i) = self.index(seq) else {
            return Verdict::Unmatched;
        };
        let slot = self.slots[i];
        // The copied T1 must be the one we sent (to the nanosecond's NTP form).
        let t1 = slot.t1();
        if r.sender_timestamp != super::ntp_from_unix_ns(t1) {
            return Verdict::Unmatched;
        }
        match slot {
            Slot::Lost { .. } => return Verdict::Late { seq, t1 },
            Slot::Answered {
                reflector_seq: (lo, hi),
                d,
                ..
            } => {
                // Another number than its replies had: the request reached
                // the reflector twice.
                let forward = r.seq != lo && r.seq != hi;
                if forward {
                    self.slots[i] = Slot::Answered {
                        t1,
                        reflector_seq: (lo.min(r.seq), hi.max(r.seq)),
                        d,
                    };
                }
                return Verdict::Duplicate { seq, t1, forward };
            }
            Slot::Pending { .. } => {}
        }
        let t2 = decode_timestamp(r.receive_timestamp, r.error, t1);
        let t3 = decode_timestamp(r.timestamp, r.error, t1);
        let rtt = (t4 - t1) - (t3 - t2);
        let d = [rtt, t2 - t1, t4 - t3];
        self.pending -= 1;
        self.slots[i] = Slot::Answered {
            t1,
            reflector_seq: (r.seq, r.seq),
            d,
        };
        if r.seq != seq {
            self.split.stateful_seen = true;
        }
        let mut ipdv = [None, None];
        if i > 0 {
            if let Slot::Answered { d: prev, .. } = self.slots[i - 1] {
                ipdv[0] = Some([d[0] - prev[0], d[1] - prev[1], d[2] - prev[2]]);
            }
        }
        if let Some(Slot::Answered { d: next, .. }) = self.slots.get(i + 1) {
            ipdv[1] = Some([next[0] - d[0], next[1] - d[1], next[2] - d[2]]);
        }
        // RFC 4737 §4.1.1 reordering and §5 n-reordering, by arrival.
        let reordered = match self.next_exp {
            Some(n) if seq < n => true,
            _ => {
                self.next_exp = Some(seq.wrapping_add(1));
                false
            }
        };
        let n_reordered = self.recent.iter().rev().take_while(|&&prev| seq < prev).count();
        if self.recent.len() == MAX_N_REORDERING {
            self.recent.pop_front();
        }
        self.recent.push_back(seq);
        let error_ns = match (our_error.error_ns(), r.error.error_ns()) {
            (Some(a), Some(b)) => Some(a + b),
            _ => None,
        };
        Verdict::First(Sample {
            seq,
            reflector_seq: r.seq,
            t: [t1, t2, t3, t4],
            rtt_ns: rtt,
            forward_ns: d[1],
            backward_ns: d[2],
            synchronized: our_error.synchronized && r.error.synchronized,
            error_ns,
            forward_ttl: r.sender_ttl,
            backward_ttl: ttl,
            reordered,
            n_reordered,
            ipdv,
        })
    }

    /// The loss split of the packets settled so far, for
    /// [`Tally::finish_session`] once every packet is (after
    /// [`Tracker::expire_all`] or [`Tracker::abandon`]): the lost packets
    /// after the last answered one count as of unknown direction.
    pub fn split(&self) -> SplitFacts {
        SplitFacts {
            unknown: self.split.unknown + self.gap_lost,
            ..self.split
        }
    }
}

/// What a session's reflector numbers tell about where its packets were
/// lost. `forward + backward + unknown` is the session's loss; the counts
/// mean something only when the reflector is stateful (`stateful_known`
/// or `stateful_seen`): from a stateless one every gap reads as replies
/// lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SplitFacts {
    /// Lost on the way to the reflector.
    pub forward: u64,
    /// Reached the reflector, but no reply came back in time.
    pub backward: u64,
    /// Lost either way: after the session's last answered packet, or in a
    /// gap whose numbers do not add up (see the module's documentation).
    pub unknown: u64,
    /// The sender was told the reflector is stateful.
    pub stateful_known: bool,
    /// A reply's reflector sequence differed from the sender's.
    pub stateful_seen: bool,
}

/// A signed distribution: non-negative values and the magnitudes of
/// negative ones in two HdrHistograms, with exact count, minimum, maximum
/// and sum. The histograms are allocated on first use, so an unused side
/// (most delays are never negative) costs nothing.
#[derive(Debug, Clone)]
pub struct SignedHistogram {
    sigfig: u8,
    pos: Option<Histogram<u64>>,
    neg: Option<Histogram<u64>>,
    min: i64,
    max: i64,
    sum: i128,
}

impl Default for SignedHistogram {
    fn default() -> Self {
        Self::with_precision(3)
    }
}

fn count(h: &Option<Histogram<u64>>) -> u64 {
    h.as_ref().map_or(0, |h| h.len())
}

fn add_to(into: &mut Option<Histogram<u64>>, sigfig: u8, from: &Option<Histogram<u64>>) {
    if let Some(f) = from {
        let h = into.get_or_insert_with(|| new_histogram(sigfig));
        // Auto-resizing: adding cannot fail.
        let _ = h.add(f);
    }
}

fn new_histogram(sigfig: u8) -> Histogram<u64> {
    Histogram::new(sigfig.clamp(1, 5)).expect("1 to 5 significant digits is valid")
}

impl SignedHistogram {
    /// An empty distribution whose quantiles keep `sigfig` significant
    /// digits (3: within 0.1%, 2: within 1%).
    pub fn with_precision(sigfig: u8) -> Self {
        Self {
            sigfig,
            pos: None,
            neg: None,
            min: i64::MAX,
            max: i64::MIN,
            sum: 0,
        }
    }

    /// Adds one value.
    pub fn record(&mut self, v: i64) {
        let side = if v >= 0 { &mut self.pos } else { &mut self.neg };
        let h = side.get_or_insert_with(|| new_histogram(self.sigfig));
        // Auto-resizing histograms: recording a u64 cannot fail.
        let _ = h.record(v.unsigned_abs());
        self.min = self.min.min(v);
        self.max = self.max.max(v);
        self.sum += i128::from(v);
    }

    /// Adds every value of `other`.
    pub fn merge(&mut self, other: &SignedHistogram) {
        add_to(&mut self.pos, self.sigfig, &other.pos);
        add_to(&mut self.neg, self.sigfig, &other.neg);
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
        self.sum += other.sum;
    }

    /// Values recorded.
    pub fn len(&self) -> u64 {
        count(&self.pos) + count(&self.neg)
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The value at quantile `q` (0..=1), within the precision, clamped to
    /// the exact range.
    pub fn quantile(&self, q: f64) -> i64 {
        let n = self.len();
        if n == 0 {
            return 0;
        }
        let rank = ((q * n as f64).ceil() as u64).clamp(1, n);
        let k = count(&self.neg);
        let v = match (&self.neg, &self.pos) {
            // The rank-th smallest signed value is the (k − rank + 1)-th
            // smallest magnitude among the negatives.
            (Some(neg), _) if rank <= k => -(neg.value_at_quantile((k - rank + 1) as f64 / k as f64) as i64),
            (_, Some(pos)) => pos.value_at_quantile((rank - k) as f64 / pos.len() as f64) as i64,
            _ => 0,
        };
        v.clamp(self.min, self.max)
    }

    /// The value at quantile `q` of the absolute values.
    pub fn abs_quantile(&self, q: f64) -> u64 {
        let mut all = None;
        add_to(&mut all, self.sigfig, &self.pos);
        add_to(&mut all, self.sigfig, &self.neg);
        let hi = self.min.unsigned_abs().max(self.max.unsigned_abs());
        all.map_or(0, |h| h.value_at_quantile(q).min(hi))
    }

    /// Smallest value (exact).
    pub fn min(&self) -> i64 {
        self.min
    }

    /// Largest value (exact).
    pub fn max(&self) -> i64 {
        self.max
    }

    /// Mean (exact up to f64).
    pub fn mean(&self) -> f64 {
        self.sum as f64 / self.len().max(1) as f64
    }

    /// As IPDV figures (RFC 3393), when anything was recorded.
    pub fn ipdv_stats(&self) -> Option<IpdvStats> {
        ipdv_stats(self)
    }

    /// As delay variation (RFC 5481 PDV): every value minus the smallest.
    pub fn variation_stats(&self) -> Option<DelayStats> {
        let m = self.min();
        (!self.is_empty()).then(|| DelayStats {
            count: self.len(),
            min_us: 0.0,
            median_us: us(self.quantile(0.5) - m),
            p90_us: us(self.quantile(0.9) - m),
            p99_us: us(self.quantile(0.99) - m),
            max_us: us(self.max() - m),
            mean_us: (self.mean() - m as f64) / 1e3,
        })
    }

    /// The non-negative part, serialised.
    pub fn encode_positive(&self) -> Option<String> {
        self.pos.as_ref().map(encode_histogram)
    }

    /// The negative part (magnitudes), serialised.
    pub fn encode_negative(&self) -> Option<String> {
        self.neg.as_ref().map(encode_histogram)
    }
}

/// An HdrHistogram in the standard V2 compressed form, base64-encoded (the
/// form HdrHistogram's log tools and libraries in other languages read).
/// The form does not depend on the counters' width: a `Histogram<u32>`
/// and a `Histogram<u64>` of the same values encode alike.
pub fn encode_histogram<C: Counter>(h: &Histogram<C>) -> String {
    use base64::Engine as _;
    let mut bytes = Vec::new();
    // Serialising into a Vec cannot fail for a valid histogram.
    let _ = V2DeflateSerializer::new().serialize(h, &mut bytes);
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Reads a histogram written by [`encode_histogram`].
pub fn decode_histogram(text: &str) -> Option<Histogram<u64>> {
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::STANDARD.decode(text).ok()?;
    hdrhistogram::serialization::Deserializer::new()
        .deserialize(&mut bytes.as_slice())
        .ok()
}

#[derive(Debug, Clone, Copy)]
struct TtlRange {
    min: u8,
    max: u8,
}

impl TtlRange {
    fn add(r: &mut Option<TtlRange>, hops: u8) {
        *r = Some(match *r {
            None => TtlRange { min: hops, max: hops },
            Some(t) => TtlRange {
                min: t.min.min(hops),
                max: t.max.max(hops),
            },
        });
    }
    fn merge(a: &mut Option<TtlRange>, b: Option<TtlRange>) {
        if let Some(b) = b {
            TtlRange::add(a, b.min);
            TtlRange::add(a, b.max);
        }
    }
}

/// Counts and distributions over any set of sessions and any stretch of
/// time; [`Tally::merge`] adds two.
#[derive(Debug, Clone, Default)]
pub struct Tally {
    /// Packets sent.
    pub sent: u64,
    /// First replies.
    pub received: u64,
    /// Packets counted lost.
    pub lost: u64,
    /// Packets planned that could not be sent.
    pub not_sent: u64,
    /// `not_sent` by reason.
    pub send_failures: Vec<SendFailure>,
    /// Duplicate replies.
    pub duplicates: u64,
    /// Late replies.
    pub late: u64,
    /// Unmatched replies.
    pub unmatched: u64,
    /// Replies with another SSID.
    pub ssid_mismatch: u64,
    /// Replies with SSID 0 though we sent one.
    pub ssid_zero: u64,
    /// RFC 4737 reordered.
    pub reordered: u64,
    /// `n_reordered[n-1]` = packets n-reordered.
    pub n_reordered: [u64; MAX_N_REORDERING],
    rtt: SignedHistogram,
    forward: SignedHistogram,
    backward: SignedHistogram,
    rtt_ipdv: SignedHistogram,
    forward_ipdv: SignedHistogram,
    backward_ipdv: SignedHistogram,
    /// Every sample claimed synchronised clocks.
    unsynchronized: bool,
    max_error_ns: Option<f64>,
    error_unknown: bool,
    hops_forward: Option<TtlRange>,
    hops_backward: Option<TtlRange>,
    /// Sessions finished, and the loss split they allow.
    split_sessions: u64,
    split_known: u64,
    lost_forward: u64,
    lost_backward: u64,
    stateful: bool,
    /// Per-session form: 2-digit quantiles, no IPDV (memory per session
    /// stays in the kilobytes when thousands run).
    light: bool,
    /// Counts only, no distributions at all (a status window of a stream
    /// kept as summaries elsewhere).
    counts_only: bool,
}

impl Tally {
    /// A tally for one session of many: delay quantiles within 1% instead
    /// of 0.1%, and no IPDV distributions.
    pub fn per_session() -> Self {
        Self {
            rtt: SignedHistogram::with_precision(2),
            forward: SignedHistogram::with_precision(2),
            backward: SignedHistogram::with_precision(2),
            light: true,
            ..Self::default()
        }
    }

    /// A tally of counts with no delay distributions: its quantiles and
    /// delay figures are unknown. For a status window of one of hundreds
    /// of streams, whose delays are kept elsewhere.
    pub fn counts_only() -> Self {
        Self {
            light: true,
            counts_only: true,
            ..Self::default()
        }
    }

    /// Takes the loss split of a finished session tally (for a run total
    /// that counted the same events itself).
    pub fn merge_split(&mut self, o: &Tally) {
        self.split_sessions += o.split_sessions;
        self.split_known += o.split_known;
        self.lost_forward += o.lost_forward;
        self.lost_backward += o.lost_backward;
        self.stateful |= o.stateful;
    }

    /// Counts a verdict.
    pub fn verdict(&mut self, v: &Verdict, ssid_sent: u16, reply_ssid: u16) {
        if ssid_sent != 0 && reply_ssid == 0 && !matches!(v, Verdict::SsidMismatch) {
            self.ssid_zero += 1;
        }
        match v {
            Verdict::First(s) => self.sample(s),
            Verdict::Duplicate { .. } => self.duplicates += 1,
            Verdict::Late { .. } => self.late += 1,
            Verdict::Unmatched => self.unmatched += 1,
            Verdict::SsidMismatch => self.ssid_mismatch += 1,
        }
    }

    fn sample(&mut self, s: &Sample) {
        self.received += 1;
        if s.reordered {
            self.reordered += 1;
        }
        for n in 0..s.n_reordered.min(MAX_N_REORDERING) {
            self.n_reordered[n] += 1;
        }
        if !self.counts_only {
            self.rtt.record(s.rtt_ns);
            self.forward.record(s.forward_ns);
            self.backward.record(s.backward_ns);
        }
        for d in s.ipdv.iter().flatten().filter(|_| !self.light) {
            self.rtt_ipdv.record(d[0]);
            self.forward_ipdv.record(d[1]);
            self.backward_ipdv.record(d[2]);
        }
        if !s.synchronized {
            self.unsynchronized = true;
        }
        match s.error_ns {
            Some(e) => self.max_error_ns = Some(self.max_error_ns.map_or(e, |m| m.max(e))),
            None => self.error_unknown = true,
        }
        if s.forward_ttl != 0 {
            TtlRange::add(&mut self.hops_forward, SEND_TTL - s.forward_ttl);
        }
        if let Some(t) = s.backward_ttl {
            TtlRange::add(&mut self.hops_backward, SEND_TTL.saturating_sub(t));
        }
    }

    /// Counts `n` packets counted lost.
    pub fn lost(&mut self, n: u64) {
        self.lost += n;
    }

    /// Counts `n` planned packets that could not be sent, and why.
    pub fn not_sent(&mut self, n: u64, reason: &str, message: &str) {
        self.not_sent = self.not_sent.saturating_add(n);
        SendFailure::add(&mut self.send_failures, reason, message, n);
    }

    /// Closes one session's tally (after every packet is answered or lost).
    /// Its loss splits into forward and backward when nothing was lost, or
    /// when the reflector is stateful (known or seen) and answered at least
    /// once. The split then covers the packets up to the last answered one:
    /// `lost_forward + lost_backward` may fall short of `lost` by the
    /// packets of unknown direction ([`SplitFacts::unknown`]), which are
    /// counted in neither. A session with no reply has no split.
    pub fn finish_session(&mut self, f: SplitFacts) {
        self.split_sessions += 1;
        let stateful = f.stateful_known || f.stateful_seen;
        if stateful {
            self.stateful = true;
        }
        if self.lost == 0 {
            self.split_known += 1;
        } else if stateful && self.received > 0 {
            // Settled packets only; the tally's own loss count is the truth.
            let forward = f.forward.min(self.lost);
            let backward = f.backward.min(self.lost - forward);
            self.lost_forward += forward;
            self.lost_backward += backward;
            self.split_known += 1;
        }
    }

    /// Adds `other` into this tally.
    pub fn merge(&mut self, o: &Tally) {
        self.sent += o.sent;
        self.received += o.received;
        self.lost += o.lost;
        self.not_sent += o.not_sent;
        SendFailure::merge(&mut self.send_failures, &o.send_failures);
        self.duplicates += o.duplicates;
        self.late += o.late;
        self.unmatched += o.unmatched;
        self.ssid_mismatch += o.ssid_mismatch;
        self.ssid_zero += o.ssid_zero;
        self.reordered += o.reordered;
        for (a, b) in self.n_reordered.iter_mut().zip(o.n_reordered) {
            *a += b;
        }
        self.rtt.merge(&o.rtt);
        self.forward.merge(&o.forward);
        self.backward.merge(&o.backward);
        self.rtt_ipdv.merge(&o.rtt_ipdv);
        self.forward_ipdv.merge(&o.forward_ipdv);
        self.backward_ipdv.merge(&o.backward_ipdv);
        self.unsynchronized |= o.unsynchronized;
        self.error_unknown |= o.error_unknown;
        if let Some(e) = o.max_error_ns {
            self.max_error_ns = Some(self.max_error_ns.map_or(e, |m| m.max(e)));
        }
        TtlRange::merge(&mut self.hops_forward, o.hops_forward);
        TtlRange::merge(&mut self.hops_backward, o.hops_backward);
        self.merge_split(o);
    }

    /// The round-trip delay distribution, when there were replies.
    pub fn rtt_stats(&self) -> Option<DelayStats> {
        let h = &self.rtt;
        (!h.is_empty()).then(|| DelayStats {
            count: h.len(),
            min_us: us(h.min()),
            median_us: us(h.quantile(0.5)),
            p90_us: us(h.quantile(0.9)),
            p99_us: us(h.quantile(0.99)),
            max_us: us(h.max()),
            mean_us: h.mean() / 1e3,
        })
    }

    /// Median one-way delays (forward, backward), microseconds.
    pub fn one_way_medians(&self) -> (Option<f64>, Option<f64>) {
        let m = |h: &SignedHistogram| (!h.is_empty()).then(|| us(h.quantile(0.5)));
        (m(&self.forward), m(&self.backward))
    }

    fn one_way(&self, h: &SignedHistogram, ipdv: &SignedHistogram) -> Option<OneWayStats> {
        (!h.is_empty()).then(|| OneWayStats {
            count: h.len(),
            min_us: us(h.min()),
            median_us: us(h.quantile(0.5)),
            max_us: us(h.max()),
            jitter_us: us(h.quantile(0.95) - h.quantile(0.5)),
            synchronized: !self.unsynchronized,
            error_bound_us: if self.error_unknown {
                None
            } else {
                self.max_error_ns.map(|e| e / 1e3)
            },
            ipdv: ipdv_stats(ipdv),
        })
    }

    /// The figures for the result document.
    pub fn stats(&self) -> StampStats {
        let split = self.split_sessions > 0 && self.split_known == self.split_sessions;
        let hops = |r: Option<TtlRange>| {
            r.map(|t| HopRange {
                min: t.min,
                max: t.max,
            })
        };
        let n_reordering = self
            .n_reordered
            .iter()
            .take_while(|&&c| c > 0)
            .map(|&c| percent(c, self.received))
            .collect();
        StampStats {
            sent: self.sent,
            received: self.received,
            lost: self.lost,
            not_sent: self.not_sent,
            send_failures: self.send_failures.clone(),
            lost_forward: split.then_some(self.lost_forward),
            lost_backward: split.then_some(self.lost_backward),
            reflector_mode: if self.stateful {
                StampReflectorMode::Stateful
            } else {
                StampReflectorMode::Unknown
            },
            duplicates: self.duplicates,
            late: self.late,
            unmatched: self.unmatched,
            ssid_mismatch: self.ssid_mismatch,
            ssid_zero: self.ssid_zero,
            reordered: self.reordered,
            reordered_percent: percent(self.reordered, self.received),
            n_reordering_percent: n_reordering,
            rtt: self.rtt_stats(),
            forward: self.one_way(&self.forward, &self.forward_ipdv),
            backward: self.one_way(&self.backward, &self.backward_ipdv),
            rtt_ipdv: ipdv_stats(&self.rtt_ipdv),
            hops_forward: hops(self.hops_forward),
            hops_backward: hops(self.hops_backward),
            histograms: StampHistograms {
                rtt_ns: self.rtt.encode_positive(),
                forward_ns: self.forward.encode_positive(),
                forward_negative_ns: self.forward.encode_negative(),
                backward_ns: self.backward.encode_positive(),
                backward_negative_ns: self.backward.encode_negative(),
            },
        }
    }
}

fn ipdv_stats(h: &SignedHistogram) -> Option<IpdvStats> {
    (!h.is_empty()).then(|| IpdvStats {
        count: h.len(),
        min_us: us(h.min()),
        median_us: us(h.quantile(0.5)),
        max_us: us(h.max()),
        p99_abs_us: h.abs_quantile(0.99) as f64 / 1e3,
    })
}

fn us(ns: i64) -> f64 {
    ns as f64 / 1e3
}

fn percent(n: u64, of: u64) -> f64 {
    if of == 0 {
        0.0
    } else {
        n as f64 * 100.0 / of as f64
    }
}

#[cfg(test)]
mod tests {
    use super::super::{ntp_from_unix_ns, ErrorEstimate};
    use super::*;

    const MS: i64 = 1_000_000;
    const T0: i64 = 1_700_000_000_000_000_000;

    /// A reply to packet `seq` sent at `t1`: the reflector got it `fwd` ns
    /// later, held it 10 µs, numbered it `rseq`.
    fn reply(seq: u32, rseq: u32, t1: i64, fwd: i64) -> ReflectorPacket {
        ReflectorPacket {
            seq: rseq,
            timestamp: ntp_from_unix_ns(t1 + fwd + 10_000),
            error: ErrorEstimate::from_clock(5, true),
            ssid: 0,
            receive_timestamp: ntp_from_unix_ns(t1 + fwd),
            sender_seq: seq,
            sender_timestamp: ntp_from_unix_ns(t1),
            sender_error: ErrorEstimate::default(),
            sender_ttl: 253,
        }
    }

    fn err() -> ErrorEstimate {
        ErrorEstimate::from_clock(5, true)
    }

    #[test]
    fn rtt_subtracts_the_reflector_residence_time() {
        let mut t = Tracker::new(2000 * MS, 0);
        let t1 = T0;
        t.sent(t1);
        let v = t.reply(&reply(0, 0, t1, 3 * MS), t1 + 8 * MS + 10_000, Some(250), err());
        let Verdict::First(s) = v else { panic!("{v:?}") };
        assert_eq!(s.rtt_ns, 8 * MS);
        assert_eq!(s.forward_ns, 3 * MS);
        assert_eq!(s.backward_ns, 5 * MS);
        assert!(s.synchronized);
        let mut tally = Tally {
            sent: 1,
            ..Tally::default()
        };
        tally.verdict(&v, 0, 0);
        let st = tally.stats();
        assert_eq!(st.hops_forward, Some(HopRange { min: 2, max: 2 }));
        assert_eq!(st.hops_backward, Some(HopRange { min: 5, max: 5 }));
        assert_eq!(st.rtt.unwrap().min_us, 8000.0);
    }

    #[test]
    fn counts_only_tally_counts_replies_and_keeps_no_delays() {
        let mut t = Tracker::new(2000 * MS, 0);
        t.sent(T0);
        let v = t.reply(&reply(0, 0, T0, 3 * MS), T0 + 8 * MS + 10_000, Some(250), err());
        let mut window = Tally::counts_only();
        window.sent += 1;
        window.verdict(&v, 0, 0);
        assert_eq!((window.sent, window.received), (1, 1));
        assert!(window.rtt_stats().is_none());
        let mut session = Tally::per_session();
        session.verdict(&v, 0, 0);
        assert_eq!(session.rtt_stats().unwrap().min_us, 8000.0);
    }

    /// Refused sends, in two tallies merged: their own figure, and lost.
    #[test]
    fn packets_not_sent_count_as_loss_of_those_planned() {
        let mut a = Tally {
            sent: 91,
            received: 90,
            ..Tally::default()
        };
        a.lost(1);
        a.not_sent(7, "EPERM", "operation not permitted");
        let mut b = Tally {
            sent: 9,
            received: 9,
            ..Tally::default()
        };
        b.not_sent(2, "ENOBUFS", "no buffer space");
        b.not_sent(1, "EPERM", "operation not permitted");
        a.merge(&b);
        let st = a.stats();
        assert_eq!((st.sent, st.not_sent, st.received, st.lost), (100, 10, 99, 1));
        assert_eq!((st.planned(), st.missing()), (110, 11));
        assert_eq!(st.loss_percent(), Some(10.0));
        let reasons: Vec<_> = st
            .send_failures
            .iter()
            .map(|f| (f.reason.as_str(), f.packets))
            .collect();
        assert_eq!(reasons, [("EPERM", 8), ("ENOBUFS", 2)]);
        // An old document, without the new fields, still loads: nothing
        // was refused.
        let mut v = serde_json::to_value(&st).unwrap();
        let o = v.as_object_mut().unwrap();
        o.remove("not_sent");
        o.remove("send_failures");
        let old: StampStats = serde_json::from_value(v).unwrap();
        assert_eq!((old.not_sent, old.loss_percent()), (0, Some(1.0)));
    }

    #[test]
    fn send_failure_reasons_stay_bounded() {
        let mut list = Vec::new();
        for i in 0..100 {
            SendFailure::add(&mut list, &format!("E{i}"), "x", 1);
        }
        assert_eq!(list.len(), crate::result::MAX_SEND_FAILURE_REASONS);
        assert_eq!(list.iter().map(|f| f.packets).sum::<u64>(), 100);
        assert_eq!(list.last().unwrap().reason, "other");
    }

    /// Drops, duplicates and a swapped pair, counted exactly.
    #[test]
    fn loss_duplicates_and_reordering_are_exact() {
        let mut t = Tracker::new(1000 * MS, 0);
        let mut tally = Tally::default();
        let mut rseq = 0;
        let mut arrivals = Vec::new();
        for seq in 0..100u32 {
            t.sent(T0 + i64::from(seq) * 10 * MS);
            tally.sent += 1;
            if seq % 10 == 3 {
                continue; // dropped on the way in: the stateful reflector never numbers it
            }
            arrivals.push((seq, rseq));
            rseq += 1;
        }
        // Swap arrivals 50 and 51, duplicate 20 on the way back.
        arrivals.swap(50, 51);
        let dup = arrivals[20];
        arrivals.insert(21, dup);
        for (seq, r) in arrivals {
            let t1 = T0 + i64::from(seq) * 10 * MS;
            let v = t.reply(&reply(seq, r, t1, MS), t1 + 2 * MS, Some(255), err());
            tally.verdict(&v, 0, 0);
        }
        tally.lost(t.expire_all().len() as u64);
        tally.finish_session(t.split());
        let st = tally.stats();
        assert_eq!((st.sent, st.received, st.lost), (100, 90, 10));
        assert_eq!(st.duplicates, 1);
        assert_eq!(st.reordered, 1);
        assert_eq!(st.n_reordering_percent, vec![100.0 / 90.0]);
        assert_eq!(st.reflector_mode, StampReflectorMode::Stateful);
        assert_eq!((st.lost_forward, st.lost_backward), (Some(10), Some(0)));
    }

    #[test]
    fn backward_loss_is_split_from_forward_loss() {
        let mut t = Tracker::new(1000 * MS, 0);
        let mut tally = Tally::default();
        let mut rseq = 0;
        for seq in 0..50u32 {
            let t1 = T0 + i64::from(seq) * MS;
            t.sent(t1);
            tally.sent += 1;
            if seq == 5 || seq == 6 {
                continue; // forward loss
            }
            let r = rseq;
            rseq += 1;
            if seq == 30 || seq == 40 || seq == 41 {
                continue; // backward loss: numbered but never back
            }
            let v = t.reply(&reply(seq, r, t1, MS), t1 + 2 * MS, None, err());
            tally.verdict(&v, 0, 0);
        }
        tally.lost(t.expire_all().len() as u64);
        tally.finish_session(t.split());
        let st = tally.stats();
        assert_eq!(st.lost, 5);
        assert_eq!((st.lost_forward, st.lost_backward), (Some(2), Some(3)));
    }

    /// A session of `n` packets 1 ms apart through a path that drops the
    /// requests in `fwd` and the replies in `back`, against a stateful
    /// reflector whose count starts at `start`; `known`: the sender was
    /// told it is stateful. Replies come back in the order `order` makes of
    /// the arrivals (by default as sent).
    fn session(
        n: u32,
        fwd: &[u32],
        back: &[u32],
        start: u32,
        known: bool,
        order: impl FnOnce(&mut Vec<(u32, u32)>),
    ) -> (StampStats, SplitFacts) {
        let mut t = Tracker::new(1000 * MS, 0);
        if known {
            t = t.with_stateful_reflector();
        }
        let mut tally = Tally::default();
        let mut rseq = start;
        let mut arrivals = Vec::new();
        for seq in 0..n {
            t.sent(T0 + i64::from(seq) * MS);
            tally.sent += 1;
            if fwd.contains(&seq) {
                continue;
            }
            arrivals.push((seq, rseq));
            rseq = rseq.wrapping_add(1);
        }
        order(&mut arrivals);
        for (seq, r) in arrivals {
            if back.contains(&seq) {
                continue;
            }
            let t1 = T0 + i64::from(seq) * MS;
            let v = t.reply(&reply(seq, r, t1, MS), t1 + 2 * MS, None, err());
            tally.verdict(&v, 0, 0);
        }
        tally.lost(t.expire_all().len() as u64);
        let f = t.split();
        tally.finish_session(f);
        (tally.stats(), f)
    }

    fn as_sent(_: &mut Vec<(u32, u32)>) {}

    /// The case the agents' mesh needs: only replies lost. Every reply
    /// carries the sender's own number, as a stateless reflector's would;
    /// told that the reflector is stateful, the sender splits it exactly.
    #[test]
    fn backward_only_loss_splits_when_the_reflector_is_known_stateful() {
        let back = [3, 40, 41, 77];
        let (st, f) = session(100, &[], &back, 0, true, as_sent);
        assert_eq!(st.lost, 4);
        assert_eq!((st.lost_forward, st.lost_backward), (Some(0), Some(4)));
        assert_eq!(st.reflector_mode, StampReflectorMode::Stateful);
        assert_eq!((f.forward, f.backward, f.unknown), (0, 4, 0));
        // Not told: indistinguishable from a stateless reflector, no split.
        let (st, _) = session(100, &[], &back, 0, false, as_sent);
        assert_eq!((st.lost_forward, st.lost_backward), (None, None));
        assert_eq!(st.reflector_mode, StampReflectorMode::Unknown);
    }

    #[test]
    fn forward_only_and_mixed_loss_split_exactly() {
        for known in [true, false] {
            let (st, _) = session(100, &[0, 1, 50, 98], &[], 0, known, as_sent);
            assert_eq!((st.lost_forward, st.lost_backward), (Some(4), Some(0)), "{known}");
            // Both ways in one gap (60 forward, 61 backward), at the start
            // and next to each other.
            let (st, f) = session(100, &[0, 60, 90], &[1, 2, 61, 89], 0, known, as_sent);
            assert_eq!(st.lost, 7);
            assert_eq!((st.lost_forward, st.lost_backward), (Some(3), Some(4)), "{known}");
            assert_eq!(f.unknown, 0);
        }
    }

    /// Packets after the last answered one may have been lost either way:
    /// they count in neither direction (`lost` keeps them).
    #[test]
    fn loss_after_the_last_reply_has_no_direction() {
        // 97 lost on the way back, 98 on the way there, 99 back: after 96,
        // nothing answered, so all three are unknown; 10 is forward.
        let (st, f) = session(100, &[10, 98], &[97, 99], 0, true, as_sent);
        assert_eq!(st.lost, 4);
        assert_eq!((st.lost_forward, st.lost_backward), (Some(1), Some(0)));
        assert_eq!((f.forward, f.backward, f.unknown), (1, 0, 3));
        // Only the last reply lost: nothing known lost either way.
        let (st, _) = session(100, &[], &[99], 0, true, as_sent);
        assert_eq!(
            (st.lost, st.lost_forward, st.lost_backward),
            (1, Some(0), Some(0))
        );
        // No reply at all: no split.
        let all: Vec<u32> = (0..20).collect();
        let (st, f) = session(20, &[], &all, 0, true, as_sent);
        assert_eq!((st.lost, st.lost_forward, st.lost_backward), (20, None, None));
        assert_eq!(f.unknown, 20);
    }

    /// A reflector that had this session's address before (a source port
    /// used again within its idle timeout) counts on from there: the gaps
    /// after the first reply are still exact, the packets before it are
    /// unknown; a reflector that restarts its count (after forgetting an
    /// idle session) is followed after the gap where it did.
    #[test]
    fn a_reflector_count_not_from_zero_or_restarted() {
        let (st, f) = session(100, &[0, 30], &[1, 31, 60], 5000, true, as_sent);
        assert_eq!((f.forward, f.backward, f.unknown), (1, 2, 2));
        assert_eq!((st.lost_forward, st.lost_backward), (Some(1), Some(2)));
        // Across the wrap of the reflector's count.
        let (_, f) = session(100, &[30], &[31, 60], u32::MAX - 40, true, as_sent);
        assert_eq!((f.forward, f.backward, f.unknown), (1, 2, 0));
        // Packets 40..=59 unanswered, and the reflector's count restarted
        // among them (packet 60 is its number 5): that gap is unknown.
        let fwd: Vec<u32> = (40..60).chain([70]).collect();
        let (_, f) = session(100, &fwd, &[80], 0, true, |a| {
            for (seq, r) in a.iter_mut() {
                if *seq >= 60 {
                    *r -= 40 - 5;
                }
            }
        });
        assert_eq!((f.forward, f.backward, f.unknown), (1, 1, 20));
    }

    /// Reordering and duplication on the way there.
    #[test]
    fn forward_reordering_and_duplicates_stay_exact_or_unknown() {
        // Request 20 overtakes 19 (numbered 19 and 20); 41 is duplicated
        // (numbered 40 and 41) just before 42, lost on the way there like
        // 22; 45's reply lost.
        let (_, f) = session(100, &[22, 42], &[45], 0, true, |a| {
            a.swap(19, 20);
            for (seq, r) in a.iter_mut() {
                if (19..=20).contains(seq) {
                    *r = 39 - *r;
                }
            }
            let i = a.iter().position(|x| x.0 == 43).unwrap();
            a.insert(i, (41, 41));
            for (_, r) in a.iter_mut().skip(i + 1) {
                *r += 1;
            }
        });
        assert_eq!((f.forward, f.backward, f.unknown), (2, 1, 0));
        // A request that overtook a lost neighbour's gap: the numbers run
        // backwards across the loss, which stays unknown.
        let (_, f) = session(100, &[51], &[], 0, true, |a| {
            // 50 reached the reflector after 52.
            let i = a.iter().position(|x| x.0 == 50).unwrap();
            a[i].1 = 51;
            a[i + 1].1 = 50;
        });
        assert_eq!((f.forward, f.backward, f.unknown), (0, 0, 1));
    }

    /// A stopped run: packets still waiting are abandoned, and a gap with
    /// one of them cannot be told.
    #[test]
    fn abandoned_packets_make_their_gap_unknown() {
        let mut t = Tracker::new(1000 * MS, 0).with_stateful_reflector();
        for seq in 0..6u32 {
            t.sent(T0 + i64::from(seq) * MS);
        }
        // 1 lost back, 2 and 3 never answered (3 still waiting), 4 answered.
        for (seq, r) in [(0, 0), (4, 4)] {
            let t1 = T0 + i64::from(seq) * MS;
            t.reply(&reply(seq, r, t1, MS), t1 + 2 * MS, None, err());
        }
        assert_eq!(t.expire(T0 + 1002 * MS).len(), 2);
        assert_eq!(t.abandon(), 2);
        let f = t.split();
        assert_eq!((f.forward, f.backward, f.unknown), (0, 0, 2));
    }

    #[test]
    fn stateless_loss_has_no_split_and_late_replies_are_lost() {
        let mut t = Tracker::new(100 * MS, 7);
        let mut tally = Tally::default();
        for seq in 0..3u32 {
            t.sent(T0 + i64::from(seq) * MS);
            tally.sent += 1;
        }
        let mut r = reply(0, 0, T0, MS);
        r.ssid = 7;
        tally.verdict(&t.reply(&r, T0 + 2 * MS, None, err()), 7, 7);
        // Packet 1's reply never comes; packet 2's comes after the timeout.
        let lost = t.expire(T0 + 150 * MS);
        assert_eq!(lost.iter().map(|l| l.0).collect::<Vec<_>>(), vec![1, 2]);
        tally.lost(lost.len() as u64);
        let mut late = reply(2, 2, T0 + 2 * MS, MS);
        late.ssid = 7;
        let v = t.reply(&late, T0 + 151 * MS, None, err());
        assert_eq!(
            v,
            Verdict::Late {
                seq: 2,
                t1: T0 + 2 * MS
            }
        );
        tally.verdict(&v, 7, 7);
        // Another session's SSID, and a reflector that zeroes it.
        let mut other = reply(0, 0, T0, MS);
        other.ssid = 8;
        assert_eq!(t.reply(&other, T0, None, err()), Verdict::SsidMismatch);
        tally.verdict(&Verdict::SsidMismatch, 7, 8);
        let zero = reply(0, 0, T0, MS);
        let v = t.reply(&zero, T0 + 3 * MS, None, err());
        assert!(matches!(v, Verdict::Duplicate { forward: false, .. }));
        tally.verdict(&v, 7, 0);
        tally.finish_session(t.split());
        let st = tally.stats();
        assert_eq!((st.received, st.lost, st.late, st.duplicates), (1, 2, 1, 1));
        assert_eq!((st.ssid_mismatch, st.ssid_zero), (1, 1));
        assert_eq!(st.lost_forward, None);
        assert_eq!(st.reflector_mode, StampReflectorMode::Unknown);
    }

    #[test]
    fn replies_with_a_foreign_t1_or_sequence_are_unmatched() {
        let mut t = Tracker::new(100 * MS, 0);
        t.sent(T0);
        assert_eq!(
            t.reply(&reply(0, 0, T0 + 1, MS), T0, None, err()),
            Verdict::Unmatched
        );
        assert_eq!(t.reply(&reply(9, 9, T0, MS), T0, None, err()), Verdict::Unmatched);
        // Forgotten after two timeouts.
        t.reply(&reply(0, 0, T0, MS), T0 + 2 * MS, None, err());
        t.expire(T0 + 300 * MS);
        assert_eq!(t.reply(&reply(0, 0, T0, MS), T0, None, err()), Verdict::Unmatched);
    }

    #[test]
    fn ipdv_pairs_consecutive_packets_once_in_any_arrival_order() {
        let mut t = Tracker::new(1000 * MS, 0);
        let mut tally = Tally::default();
        let fwd = [MS, 3 * MS, 2 * MS];
        for (seq, _) in fwd.iter().enumerate() {
            t.sent(T0 + seq as i64 * 10 * MS);
        }
        for seq in [0usize, 2, 1] {
            let t1 = T0 + seq as i64 * 10 * MS;
            let v = t.reply(
                &reply(seq as u32, seq as u32, t1, fwd[seq]),
                t1 + fwd[seq] + MS + 10_000,
                None,
                err(),
            );
            tally.verdict(&v, 0, 0);
        }
        let st = tally.stats();
        let ipdv = st.forward.unwrap().ipdv.unwrap();
        // D1−D0 = +2 ms, D2−D1 = −1 ms; the backward delay is constant.
        assert_eq!(ipdv.count, 2);
        assert_eq!((ipdv.min_us, ipdv.max_us), (-1000.0, 2000.0));
        assert_eq!(st.backward.unwrap().ipdv.unwrap().max_us, 0.0);
        assert_eq!(st.reordered, 1);
    }

    #[test]
    fn signed_histogram_quantiles_and_merge() {
        let mut h = SignedHistogram::default();
        for v in -50..=49i64 {
            h.record(v * 1000);
        }
        assert_eq!(h.len(), 100);
        assert_eq!((h.min(), h.max()), (-50_000, 49_000));
        let med = h.quantile(0.5);
        assert!((-1100..=100).contains(&med), "{med}");
        assert!(h.quantile(0.01) <= -49_000);
        assert_eq!(h.quantile(1.0), 49_000);
        let mut g = SignedHistogram::default();
        g.record(-1_000_000);
        h.merge(&g);
        assert_eq!((h.len(), h.min()), (101, -1_000_000));
        assert!(h.abs_quantile(1.0) >= 999_000);
        // The serialised form reads back with the same counts.
        let back = decode_histogram(&h.encode_negative().unwrap()).unwrap();
        assert_eq!(back.len(), 51);
    }

    /// A histogram with 32-bit counters (a stream's open minute) is
    /// stored in the very form a 64-bit one is.
    #[test]
    fn counter_width_does_not_change_the_encoded_form() {
        let mut a = Histogram::<u32>::new(2).unwrap();
        let mut b = Histogram::<u64>::new(2).unwrap();
        for v in [1u64, 37, 250, 255, 256, 1_000, 9_999, 123_456, 3_600_000_000] {
            for _ in 0..(v % 7 + 1) {
                a.record(v).unwrap();
                b.record(v).unwrap();
            }
        }
        assert_eq!(encode_histogram(&a), encode_histogram(&b));
        let back = decode_histogram(&encode_histogram(&a)).unwrap();
        assert_eq!((back.len(), back.max()), (b.len(), b.max()));
    }
}
