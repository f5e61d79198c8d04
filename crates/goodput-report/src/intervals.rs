//! A run's intervals as the report draws them: every figure a chart shows
//! per interval, gathered into at most [`MAX_INTERVAL_BUCKETS`] buckets of
//! consecutive intervals, each with its minimum, maximum, sum and count, so
//! a peak is never lost however many intervals there were. Intervals are
//! added one at a time, so a document's million intervals can be read as a
//! stream and never held ([`read_documents`]).

use goodput_core::result::{Interval, TestResult};
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

/// Most buckets a run's intervals are drawn in: up to this many intervals
/// are drawn one by one; past it, buckets of 2, 4, 8 … consecutive
/// intervals (between half this many and this many buckets).
pub const MAX_INTERVAL_BUCKETS: usize = 1000;

/// One figure drawn per interval, in its chart's unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Measure {
    /// Mbit/s sent, all connections.
    Send,
    /// Mbit/s received, all connections.
    Recv,
    /// STAMP packets sent in the interval.
    StampSent,
    /// STAMP packets lost.
    StampLost,
    /// STAMP duplicates.
    StampDuplicates,
    /// STAMP reordered packets.
    StampReordered,
    /// Round trip, ms.
    RttMin,
    RttMedian,
    RttP99,
    RttMax,
    /// Media bitrate, Mbit/s.
    MediaRate,
    /// Media jitter, ms.
    MediaJitter,
    /// Media datagrams lost.
    MediaLost,
    /// Echo messages sent (marks that the run has echo intervals).
    EchoSent,
    /// Echo round trip, ms.
    EchoP50,
    EchoP99,
    EchoMax,
}

const MEASURES: usize = Measure::EchoMax as usize + 1;

/// Minimum, maximum, sum and count of one figure over a bucket.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Agg {
    pub(crate) n: u64,
    pub(crate) min: f64,
    pub(crate) max: f64,
    pub(crate) sum: f64,
}

impl Agg {
    const EMPTY: Agg = Agg {
        n: 0,
        min: f64::INFINITY,
        max: f64::NEG_INFINITY,
        sum: 0.0,
    };

    fn add(&mut self, v: f64) {
        if !v.is_finite() {
            return;
        }
        self.n += 1;
        self.min = self.min.min(v);
        self.max = self.max.max(v);
        self.sum += v;
    }

    fn merge(&mut self, o: &Agg) {
        self.n += o.n;
        self.min = self.min.min(o.min);
        self.max = self.max.max(o.max);
        self.sum += o.sum;
    }

    /// The mean (the value itself for one interval).
    pub(crate) fn mean(&self) -> f64 {
        if self.n == 1 {
            self.sum
        } else {
            self.sum / self.n.max(1) as f64
        }
    }
}

/// A run's intervals, bucketed for drawing.
#[derive(Debug, Clone, PartialEq)]
pub struct IntervalDigest {
    read: u64,
    per_bucket: u64,
    /// Each bucket's latest interval end, seconds since the run started.
    ends_s: Vec<f64>,
    /// Intervals in each bucket.
    counts: Vec<u64>,
    /// Per measure, one aggregate per bucket (none until a first value).
    measures: [Option<Vec<Agg>>; MEASURES],
}

impl Default for IntervalDigest {
    fn default() -> Self {
        Self {
            read: 0,
            per_bucket: 1,
            ends_s: Vec::new(),
            counts: Vec::new(),
            measures: Default::default(),
        }
    }
}

const MBIT: f64 = 8.0 / 1e6;

impl IntervalDigest {
    /// The digest of `intervals`.
    pub fn of(intervals: &[Interval]) -> Self {
        let mut d = Self::default();
        intervals.iter().for_each(|i| d.push(i));
        d
    }

    /// Adds the next interval.
    pub fn push(&mut self, iv: &Interval) {
        if self.counts.last().is_none_or(|&n| n >= self.per_bucket) {
            if self.counts.len() >= MAX_INTERVAL_BUCKETS {
                self.halve();
            }
            self.ends_s.push(f64::NEG_INFINITY);
            self.counts.push(0);
            for m in self.measures.iter_mut().flatten() {
                m.push(Agg::EMPTY);
            }
        }
        let b = self.counts.len() - 1;
        self.counts[b] += 1;
        if iv.time_slice_s.is_finite() {
            self.ends_s[b] = self.ends_s[b].max(iv.time_slice_s);
        }
        self.read += 1;
        let buckets = self.counts.len();
        let measures = &mut self.measures;
        let mut add = |m: Measure, v: f64| {
            measures[m as usize]
                .get_or_insert_with(|| vec![Agg::EMPTY; buckets])
                .last_mut()
                .expect("one aggregate per bucket")
                .add(v);
        };
        add(Measure::Send, iv.send_bytes_per_second as f64 * MBIT);
        add(Measure::Recv, iv.recv_bytes_per_second as f64 * MBIT);
        if let Some(s) = &iv.stamp {
            add(Measure::StampSent, s.sent as f64);
            add(Measure::StampLost, s.lost as f64);
            add(Measure::StampDuplicates, s.duplicates as f64);
            add(Measure::StampReordered, s.reordered as f64);
            if let Some(d) = &s.rtt {
                add(Measure::RttMin, d.min_us / 1e3);
                add(Measure::RttMedian, d.median_us / 1e3);
                add(Measure::RttP99, d.p99_us / 1e3);
                add(Measure::RttMax, d.max_us / 1e3);
            }
        }
        if let Some(m) = &iv.media {
            add(Measure::MediaRate, m.bits_per_second as f64 / 1e6);
            add(Measure::MediaJitter, m.jitter_us / 1e3);
            add(Measure::MediaLost, m.lost as f64);
        }
        if let Some(e) = &iv.echo {
            add(Measure::EchoSent, e.sent as f64);
            if let Some(p) = &e.round_trip {
                add(Measure::EchoP50, p.p50_us / 1e3);
                add(Measure::EchoP99, p.p99_us / 1e3);
                add(Measure::EchoMax, p.max_us / 1e3);
            }
        }
    }

    /// Merges each two neighbouring buckets into one.
    fn halve(&mut self) {
        fn pairs<T: Copy>(v: &mut Vec<T>, merge: impl Fn(&mut T, &T)) {
            let n = v.len().div_ceil(2);
            for i in 0..n {
                let mut a = v[2 * i];
                if let Some(b) = v.get(2 * i + 1) {
                    merge(&mut a, b);
                }
                v[i] = a;
            }
            v.truncate(n);
        }
        pairs(&mut self.ends_s, |a, b| *a = a.max(*b));
        pairs(&mut self.counts, |a, b| *a += b);
        for m in self.measures.iter_mut().flatten() {
            pairs(m, Agg::merge);
        }
        self.per_bucket = self.per_bucket.saturating_mul(2);
    }

    /// Intervals read.
    pub fn read(&self) -> u64 {
        self.read
    }

    /// Buckets drawn.
    pub fn buckets(&self) -> usize {
        self.counts.len()
    }

    /// Most intervals in one bucket (1: every interval is drawn).
    pub fn per_bucket(&self) -> u64 {
        self.per_bucket
    }

    /// Whether buckets hold more than one interval.
    pub fn downsampled(&self) -> bool {
        self.per_bucket > 1
    }

    /// The last interval's end, seconds since the run started.
    pub(crate) fn last_s(&self) -> Option<f64> {
        self.ends_s.last().copied().filter(|t| t.is_finite())
    }

    /// The buckets where `m` has a value: (end in seconds, intervals in
    /// the bucket, the aggregate).
    pub(crate) fn points(&self, m: Measure) -> Vec<(f64, u64, Agg)> {
        let Some(aggs) = &self.measures[m as usize] else {
            return Vec::new();
        };
        aggs.iter()
            .zip(&self.ends_s)
            .zip(&self.counts)
            .filter(|((a, _), _)| a.n > 0)
            .map(|((a, t), n)| (t.max(0.0), *n, *a))
            .collect()
    }

    /// Whether `m` had a value in some interval.
    pub(crate) fn any(&self, m: Measure) -> bool {
        self.measures[m as usize]
            .as_ref()
            .is_some_and(|v| v.iter().any(|a| a.n > 0))
    }

    /// The largest value of `m` (negative infinity when none).
    pub(crate) fn max(&self, m: Measure) -> f64 {
        self.measures[m as usize].as_ref().map_or(f64::NEG_INFINITY, |v| {
            v.iter().map(|a| a.max).fold(f64::NEG_INFINITY, f64::max)
        })
    }
}

/// Most documents one input may hold.
pub const MAX_DOCUMENTS: usize = 1000;

/// Reads every result document in `input` (one, several one after another,
/// or arrays of them), each with its intervals digested as they are read:
/// the documents come back with no intervals of their own, so a million
/// intervals cost the reader a few hundred kilobytes, not their size.
/// More than [`MAX_DOCUMENTS`] are refused.
pub fn read_documents(
    input: impl std::io::Read,
) -> Result<Vec<(TestResult, IntervalDigest)>, serde_json::Error> {
    let mut out = Vec::new();
    for docs in serde_json::Deserializer::from_reader(input).into_iter::<Documents>() {
        out.extend(docs?.0);
        if out.len() > MAX_DOCUMENTS {
            return Err(de::Error::custom(format_args!(
                "more than {MAX_DOCUMENTS} documents"
            )));
        }
    }
    Ok(out)
}

/// One top-level JSON value: a document or an array of them.
struct Documents(Vec<(TestResult, IntervalDigest)>);

impl<'de> serde::Deserialize<'de> for Documents {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(DocumentsVisitor)
    }
}

struct DocumentsVisitor;

impl<'de> Visitor<'de> for DocumentsVisitor {
    type Value = Documents;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a goodput result document or an array of them")
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Documents, A::Error> {
        Ok(Documents(vec![DocumentVisitor.visit_map(map)?]))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Documents, A::Error> {
        let mut v = Vec::new();
        while let Some(doc) = seq.next_element_seed(DocumentSeed)? {
            v.push(doc);
            if v.len() > MAX_DOCUMENTS {
                return Err(de::Error::custom(format_args!(
                    "more than {MAX_DOCUMENTS} documents"
                )));
            }
        }
        Ok(Documents(v))
    }
}

struct DocumentSeed;

impl<'de> DeserializeSeed<'de> for DocumentSeed {
    type Value = (TestResult, IntervalDigest);

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(DocumentVisitor)
    }
}

/// One document: its intervals into a digest as they come, every other
/// field kept as JSON and read into the result at the end.
struct DocumentVisitor;

impl<'de> Visitor<'de> for DocumentVisitor {
    type Value = (TestResult, IntervalDigest);

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a goodput result document")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut rest = serde_json::Map::new();
        let mut digest = IntervalDigest::default();
        while let Some(key) = map.next_key::<String>()? {
            if rest.contains_key(&key) {
                return Err(de::Error::custom(format_args!("duplicate field `{key}`")));
            }
            let value = if key == "intervals" {
                map.next_value_seed(IntervalsSeed(&mut digest))?;
                serde_json::Value::Array(Vec::new())
            } else {
                map.next_value()?
            };
            rest.insert(key, value);
        }
        let result: TestResult =
            serde_json::from_value(serde_json::Value::Object(rest)).map_err(de::Error::custom)?;
        Ok((result, digest))
    }
}

struct IntervalsSeed<'a>(&'a mut IntervalDigest);

impl<'de> DeserializeSeed<'de> for IntervalsSeed<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for IntervalsSeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an array of intervals")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(iv) = seq.next_element::<Interval>()? {
            self.0.push(&iv);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn interval(t: f64, send: u64) -> Interval {
        Interval {
            time_slice_s: t,
            send_bytes_per_second: send,
            recv_bytes_per_second: 0,
            in_flight: 1,
            completed: 0,
            network_errors: 0,
            data_errors: 0,
            stamp: None,
            echo: None,
            media: None,
        }
    }

    #[test]
    fn a_few_intervals_are_drawn_one_by_one() {
        let d = IntervalDigest::of(&[interval(1.0, 125_000), interval(2.0, 250_000)]);
        assert!(!d.downsampled());
        let p = d.points(Measure::Send);
        assert_eq!(p.len(), 2);
        assert_eq!((p[0].0, p[0].2.mean()), (1.0, 1.0));
        assert_eq!((p[1].0, p[1].2.mean()), (2.0, 2.0));
        assert!(!d.any(Measure::StampSent));
    }

    #[test]
    fn many_intervals_keep_their_peak_count_and_mean() {
        let n = 100_003u64;
        let mut d = IntervalDigest::default();
        for i in 0..n {
            let rate = if i == 77_777 { 125_000_000 } else { 125_000 };
            d.push(&interval((i + 1) as f64, rate));
        }
        assert_eq!(d.read(), n);
        assert!(d.downsampled());
        assert!((MAX_INTERVAL_BUCKETS / 2..=MAX_INTERVAL_BUCKETS).contains(&d.buckets()));
        assert_eq!(d.per_bucket(), 128);
        let p = d.points(Measure::Send);
        assert_eq!(p.iter().map(|x| x.1).sum::<u64>(), n);
        assert_eq!(p.iter().map(|x| x.2.n).sum::<u64>(), n);
        assert_eq!(d.max(Measure::Send), 1000.0);
        let peak = p.iter().find(|x| x.2.max == 1000.0).unwrap();
        // The peak's bucket: the 128 intervals from 77,696 to 77,823.
        assert_eq!((peak.0, peak.1), (77_824.0, 128));
        assert_eq!(peak.2.min, 1.0);
        assert!((peak.2.mean() - (127.0 + 1000.0) / 128.0).abs() < 1e-9);
        assert_eq!(d.last_s(), Some(n as f64));
    }
}
