//! Background streams kept as summaries. STAMP's per minute: while a
//! background STAMP run goes on, each minute's packets (by their send
//! time) are counted and their round-trip delays kept in an HdrHistogram;
//! when a minute is complete it is stored as one row (kind `stamp_minute`,
//! id `RUN/minute/START_MS`) with its figures and its histogram (V2,
//! deflated, base64: mergeable into hours or days without the packets).
//! Nothing is stored per packet. The run's own record (kept when it
//! ends) takes its round trip from the same minutes: the STAMP hub keeps
//! counts only for a run whose delays are kept here
//! ([`Observer::keeps_delays`]), so a stream's delays are held once, in
//! the open minute, not also in a whole-run tally per session.
//! A continuous OWAMP stream's summaries
//! (one per session of `summary_every` packets, as powstream's) are
//! stored as they come, each direction on its own ([`Summaries`]).

use std::collections::BTreeMap;

use goodput_archive::{Figures, Run, RunState};
use goodput_core::result::{
    ConnectionRecord, DelayStats, Detail, Interval, OneWaySummary, StampPacket, StampPacketStatus, TestResult,
};
use goodput_core::spec::TestSpec;
use goodput_core::stamp::stats::encode_histogram;
use goodput_engine::Observer;
use hdrhistogram::Histogram;
use tokio::sync::mpsc;

use crate::state::booking::Booked;

const MINUTE_MS: u64 = 60_000;

/// Round trips a minute keeps as they are, at most: 4 KB of samples,
/// about what a 2-digit histogram with 32-bit counters takes once a
/// 25 ms delay is seen (5.6 KB at 100 ms, 6.6 KB at 400 ms). A stream
/// of 10 packets a second has 600 a minute; a faster one changes to a
/// histogram when it gets there.
const SAMPLES_MAX: usize = 1024;

/// A minute's round trips, microseconds.
enum Rtts {
    /// The samples themselves, its histogram made when the minute closes.
    Samples(Vec<u32>),
    /// 2 significant digits (quantiles within 1%), grown to the largest
    /// delay seen: 256 counters up to 255 µs, 128 more for each doubling
    /// past it. 32-bit counters: a minute has far fewer packets.
    Histogram(Histogram<u32>),
}

fn rtt_histogram() -> Histogram<u32> {
    Histogram::new(2).expect("2 significant digits is valid")
}

impl Rtts {
    /// Room for `expected` samples (and a few more: a minute's packets
    /// are counted by their send time, which jitters), or a histogram
    /// when that many would take more.
    fn new(expected: usize) -> Self {
        let room = expected + expected / 16 + 4;
        if room <= SAMPLES_MAX {
            Rtts::Samples(Vec::with_capacity(room))
        } else {
            Rtts::Histogram(rtt_histogram())
        }
    }

    /// Adds one round trip, microseconds (1 µs to an hour).
    fn record(&mut self, us: u32) {
        match self {
            Rtts::Samples(v) if v.len() < SAMPLES_MAX => v.push(us),
            Rtts::Samples(v) => {
                let mut h = rtt_histogram();
                for &x in v.iter().chain(std::iter::once(&us)) {
                    let _ = h.record(u64::from(x));
                }
                *self = Rtts::Histogram(h);
            }
            Rtts::Histogram(h) => {
                let _ = h.record(u64::from(us));
            }
        }
    }

    /// The minute's histogram (made now from its samples).
    fn histogram(&self) -> std::borrow::Cow<'_, Histogram<u32>> {
        match self {
            Rtts::Samples(v) => {
                let mut h = rtt_histogram();
                for &x in v {
                    let _ = h.record(u64::from(x));
                }
                std::borrow::Cow::Owned(h)
            }
            Rtts::Histogram(h) => std::borrow::Cow::Borrowed(h),
        }
    }
}

/// One minute's packets.
struct Minute {
    sent: u64,
    received: u64,
    reordered: u64,
    lost: u64,
    /// Planned but never sent (a refused send): lost measurements.
    not_sent: u64,
    duplicates: u64,
    late: u64,
    /// Round-trip delays. Sized for an hour up front at 3 digits a
    /// histogram took 188 KB, and every stream keeps one or two minutes
    /// open; 600 samples take 2.4 KB.
    rtt_us: Rtts,
}

impl Minute {
    /// A minute expecting about `expected` round trips.
    fn new(expected: usize) -> Self {
        Self {
            sent: 0,
            received: 0,
            reordered: 0,
            lost: 0,
            not_sent: 0,
            duplicates: 0,
            late: 0,
            rtt_us: Rtts::new(expected),
        }
    }
}

/// The round trips of a whole run, for its own record: each minute's
/// histogram added in as the minute closes, and the exact extremes and
/// sum of the same packets.
struct Whole {
    /// Saturating 32-bit counters: 4 billion packets in one bucket is
    /// more than 13 years of a stream at 10 a second.
    rtt_us: Histogram<u32>,
    count: u64,
    min_us: f64,
    max_us: f64,
    sum_us: f64,
}

impl Whole {
    fn new() -> Self {
        Self {
            rtt_us: rtt_histogram(),
            count: 0,
            min_us: f64::INFINITY,
            max_us: f64::NEG_INFINITY,
            sum_us: 0.0,
        }
    }

    fn sample(&mut self, us: f64) {
        self.count += 1;
        self.min_us = self.min_us.min(us);
        self.max_us = self.max_us.max(us);
        self.sum_us += us;
    }

    /// Adds a closed minute's histogram (same precision: every count
    /// lands in the same bucket).
    fn add(&mut self, m: &Histogram<u32>) {
        for v in m.iter_recorded() {
            // Grows the histogram to the value; a full counter saturates.
            // (`saturating_record_n` would clamp the value instead.)
            let _ = self.rtt_us.record_n(v.value_iterated_to(), v.count_at_value());
        }
    }

    /// The round trip's figures, and its histogram in nanoseconds (the
    /// result document's unit), when any packet came back.
    fn stats(&self) -> Option<(DelayStats, String)> {
        if self.count == 0 || self.rtt_us.is_empty() {
            return None;
        }
        let q = |p: f64| (self.rtt_us.value_at_quantile(p) as f64).clamp(self.min_us, self.max_us);
        let stats = DelayStats {
            count: self.count,
            min_us: self.min_us,
            median_us: q(0.5),
            p90_us: q(0.9),
            p99_us: q(0.99),
            max_us: self.max_us,
            mean_us: self.sum_us / self.count as f64,
        };
        let mut ns = Histogram::<u64>::new(2).expect("2 significant digits is valid");
        for v in self.rtt_us.iter_recorded() {
            let _ = ns.record_n(
                v.value_iterated_to().saturating_mul(1000),
                u64::from(v.count_at_value()),
            );
        }
        Some((stats, encode_histogram(&ns)))
    }
}

/// The observer a background STAMP run reports its packets to.
pub(crate) struct Minutes {
    run: Booked,
    open: BTreeMap<u64, Minute>,
    /// The run's round trips, minute by minute.
    whole: Whole,
    /// Round trips a minute is expected to have (all sessions at their
    /// rate).
    per_minute: usize,
    out: mpsc::Sender<Box<Run>>,
    /// Minutes before this are stored and closed.
    closed_before: u64,
    /// Summaries the store could not take in time (counted, never silent).
    pub(crate) dropped: u64,
    /// Packet fates that came after their minute was stored (a timeout
    /// longer than a minute); counted, not added to a stored minute.
    pub(crate) after_close: u64,
}

/// Summaries queued for the archive at most.
pub(crate) const QUEUE: usize = 64;

impl Minutes {
    pub(crate) fn new(run: Booked, out: mpsc::Sender<Box<Run>>) -> Self {
        let per_minute = if let TestSpec::Stamp(s) = &run.spec {
            let every = s.packet_interval().as_secs_f64();
            let n = f64::from(s.sessions) * 60.0 / every.max(1e-6);
            n.min(1e9) as usize
        } else {
            0
        };
        Self {
            run,
            open: BTreeMap::new(),
            whole: Whole::new(),
            per_minute,
            out,
            closed_before: 0,
            dropped: 0,
            after_close: 0,
        }
    }

    /// Stores every minute that started before `before` (ms).
    fn flush_before(&mut self, before: u64) {
        self.closed_before = self.closed_before.max(before);
        let later = self.open.split_off(&before);
        let done = std::mem::replace(&mut self.open, later);
        for (start, m) in done {
            let rtt = m.rtt_us.histogram();
            self.whole.add(&rtt);
            let row = summary(&self.run, start, &m, &rtt);
            if self.out.try_send(Box::new(row)).is_err() {
                self.dropped += 1;
            }
        }
    }

    /// Stores what is left (the run ended).
    pub(crate) fn finish(&mut self) {
        self.flush_before(u64::MAX);
    }

    /// Gives the run's result the round trip its engine did not keep
    /// (the hub keeps counts only when the delays are kept here): its
    /// total's figures and histogram, those of its one session, and its
    /// one status interval's. A result that has them is left alone.
    /// Call after [`Minutes::finish`].
    pub(crate) fn fill_round_trip(&self, result: &mut TestResult) {
        let Detail::Stamp(d) = &mut result.detail else {
            return;
        };
        if d.total.rtt.is_some() {
            return;
        }
        let Some((stats, histogram)) = self.whole.stats() else {
            return;
        };
        d.total.rtt = Some(stats);
        d.total.histograms.rtt_ns = Some(histogram.clone());
        if let [one] = &mut d.per_session[..] {
            if one.stats.rtt.is_none() {
                one.stats.rtt = Some(stats);
                one.stats.histograms.rtt_ns = Some(histogram);
            }
        }
        if let [only] = &mut result.intervals[..] {
            if let Some(st) = only.stamp.as_mut().filter(|st| st.rtt.is_none()) {
                st.rtt = Some(stats);
            }
        }
    }
}

/// The archive row of one minute.
/// The kind of a per-minute summary row.
pub(crate) const KIND: &str = "stamp_minute";

fn summary(run: &Booked, start: u64, m: &Minute, rtt: &Histogram<u32>) -> Run {
    let mut r = run.record(RunState::Finished, None);
    r.id = format!("{}/minute/{start}", run.id);
    r.kind = KIND.into();
    r.scheduled_ms = start;
    r.start_ms = Some(start);
    r.end_ms = Some(start + MINUTE_MS);
    r.measurement_key = format!("{}/minute", r.measurement_key);
    let q = |p: f64| (!rtt.is_empty()).then(|| rtt.value_at_quantile(p) as f64);
    // Of the packets planned: one that could not be sent is lost too.
    let planned = m.sent + m.not_sent;
    let loss = (planned > 0).then(|| (m.lost + m.not_sent) as f64 * 100.0 / planned as f64);
    r.figures = Figures {
        loss_pct: loss,
        // A minute's loss is not split by direction: the round trip's
        // counts as the measuring host's direction.
        loss_forward_pct: loss,
        duplicates: Some(m.duplicates as f64),
        reordered: Some(m.reordered as f64),
        delay_min_us: (!rtt.is_empty()).then(|| rtt.min() as f64),
        delay_median_us: q(0.5),
        delay_p95_us: q(0.95),
        delay_max_us: (!rtt.is_empty()).then(|| rtt.max() as f64),
        ..Figures::default()
    };
    r.result = Some(serde_json::json!({
        "minute_start_ms": start,
        "sent": m.sent,
        "received": m.received + m.reordered,
        "reordered": m.reordered,
        "lost": m.lost,
        "not_sent": m.not_sent,
        "duplicates": m.duplicates,
        "late": m.late,
        "rtt_us_histogram": encode_histogram(rtt),
    }));
    r
}

impl Observer for Minutes {
    fn on_interval(&mut self, _interval: &Interval) {}
    fn on_connection(&mut self, _record: &ConnectionRecord) {}

    fn wants_packets(&self) -> bool {
        true
    }

    fn keeps_delays(&self) -> bool {
        true
    }

    fn on_packet(&mut self, p: &StampPacket) {
        let t1_ms = (p.t1_ns.max(0) / 1_000_000) as u64;
        let start = t1_ms / MINUTE_MS * MINUTE_MS;
        if start < self.closed_before {
            self.after_close += 1;
            return;
        }
        let per_minute = self.per_minute;
        let m = self.open.entry(start).or_insert_with(|| Minute::new(per_minute));
        match p.status {
            StampPacketStatus::Received | StampPacketStatus::Reordered | StampPacketStatus::Lost => {
                m.sent += 1
            }
            _ => {}
        }
        match p.status {
            StampPacketStatus::Received => m.received += 1,
            StampPacketStatus::Reordered => m.reordered += 1,
            StampPacketStatus::Lost => m.lost += 1,
            StampPacketStatus::Duplicate => m.duplicates += 1,
            StampPacketStatus::Late => m.late += 1,
            StampPacketStatus::NotSent => m.not_sent += 1,
        }
        if matches!(
            p.status,
            StampPacketStatus::Received | StampPacketStatus::Reordered
        ) {
            if let Some(rtt) = p.rtt_us {
                // At most an hour (a reply is matched within its timeout).
                m.rtt_us.record(rtt.clamp(1.0, 3.6e9) as u32);
                self.whole.sample(rtt);
            }
        }
        // A packet's fate is known within its timeout, far less than a
        // minute: the minute before the last one seen is complete.
        self.flush_before(start.saturating_sub(MINUTE_MS));
    }
}

/// The kind of a continuous OWAMP stream's summary row.
pub(crate) const SUMMARY_KIND: &str = "owamp_summary";

/// The observer a continuous OWAMP stream (powstream's) reports its
/// summaries to: each becomes one row (kind `owamp_summary`, id
/// `RUN/summary/to|from/START_MS`) with its figures in the direction's
/// columns and its histogram, as each minute of a STAMP stream is.
pub(crate) struct Summaries {
    run: Booked,
    out: mpsc::Sender<Box<Run>>,
    /// Summaries the store could not take in time (counted, never silent).
    pub(crate) dropped: u64,
}

impl Summaries {
    pub(crate) fn new(run: Booked, out: mpsc::Sender<Box<Run>>) -> Self {
        Self { run, out, dropped: 0 }
    }
}

fn one_way_row(run: &Booked, to_server: bool, s: &OneWaySummary) -> Run {
    let way = if to_server { "to" } else { "from" };
    let start = (s.start_ns.max(0) / 1_000_000) as u64;
    let end = (s.end_ns.max(0) / 1_000_000) as u64;
    let mut r = run.record(RunState::Finished, None);
    r.id = format!("{}/summary/{way}/{start}", run.id);
    r.kind = SUMMARY_KIND.into();
    r.scheduled_ms = start;
    r.start_ms = Some(start);
    r.end_ms = Some(end.max(start));
    r.measurement_key = format!("{}/summary/{way}", r.measurement_key);
    r.figures = goodput_archive::one_way_summary_figures(s, to_server);
    r.result = serde_json::to_value(s).ok();
    r
}

impl Observer for Summaries {
    fn on_interval(&mut self, _interval: &Interval) {}
    fn on_connection(&mut self, _record: &ConnectionRecord) {}

    fn on_one_way_summary(&mut self, to_server: bool, s: &OneWaySummary) {
        if self
            .out
            .try_send(Box::new(one_way_row(&self.run, to_server, s)))
            .is_err()
        {
            self.dropped += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run's round trip from its closed minutes: the counts and extremes
    /// exact, the quantiles those of every packet's histogram, and the
    /// nanosecond histogram of the result document with every packet.
    #[test]
    fn the_whole_run_round_trip_is_its_minutes_added() {
        let mut whole = Whole::new();
        let mut every = Histogram::<u64>::new(2).unwrap();
        // 600 a minute as samples, then 1,500 (past SAMPLES_MAX: a
        // histogram), then a minute expecting 600 that gets 1,500.
        let (mut sum, mut lo, mut hi) = (0.0, f64::MAX, 0.0f64);
        for (minute, expected, n) in [(0u32, 600, 600u32), (1, 1500, 1500), (2, 600, 1500)] {
            let mut m = Minute::new(expected);
            assert_eq!(
                matches!(m.rtt_us, Rtts::Samples(_)),
                expected <= 600,
                "minute {minute}"
            );
            for k in 0..n {
                let us = 40.25 + f64::from((k * 7 + minute * 13) % 9_000);
                m.rtt_us.record(us as u32);
                let _ = every.record(us as u64);
                whole.sample(us);
                sum += us;
                lo = lo.min(us);
                hi = hi.max(us);
            }
            assert!(matches!(m.rtt_us, Rtts::Histogram(_)) || n as usize <= SAMPLES_MAX);
            assert_eq!(m.rtt_us.histogram().len(), u64::from(n));
            whole.add(&m.rtt_us.histogram());
        }
        let (st, encoded) = whole.stats().unwrap();
        assert_eq!(st.count, 3600);
        assert_eq!((st.min_us, st.max_us), (lo, hi));
        assert!((st.mean_us - sum / 3600.0).abs() < 1e-9);
        for (q, got) in [(0.5, st.median_us), (0.9, st.p90_us), (0.99, st.p99_us)] {
            assert_eq!(got, every.value_at_quantile(q) as f64, "q {q}");
        }
        let ns = goodput_core::stamp::stats::decode_histogram(&encoded).unwrap();
        assert_eq!(ns.len(), 3600);
        let p95 = ns.value_at_quantile(0.95) as f64 / 1000.0;
        let want = every.value_at_quantile(0.95) as f64;
        assert!((p95 - want).abs() <= want * 0.01, "{p95} against {want}");
        // No reply: no round trip.
        assert!(Whole::new().stats().is_none());
    }

    /// A minute's samples make the histogram recording them one by one
    /// would, so the stored row is what it was.
    #[test]
    fn a_minute_of_samples_stores_the_histogram_of_its_packets() {
        let mut m = Minute::new(600);
        let mut direct = Histogram::<u64>::new(2).unwrap();
        for k in 0..600u64 {
            let us = 1 + k * k * 37 % 400_000;
            m.rtt_us.record(us as u32);
            direct.record(us).unwrap();
        }
        let Rtts::Samples(v) = &m.rtt_us else {
            panic!("600 round trips are kept as samples")
        };
        assert!(v.capacity() < 700, "{}", v.capacity());
        assert_eq!(
            encode_histogram(&*m.rtt_us.histogram()),
            encode_histogram(&direct)
        );
    }
}
