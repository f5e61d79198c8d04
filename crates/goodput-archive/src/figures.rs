//! The figures each run is indexed by, read from its result document, and
//! the key that groups the runs of one measurement.

use goodput_core::catalogue::{self, Series};
use goodput_core::result::{
    Detail, MediaDetail, OneWayStats, OneWaySummary, OwampDetail, StampDetail, StampStats, TestResult,
};
use goodput_core::spec::TestSpec;
use serde::{Deserialize, Serialize};

/// A run's figures in the archive's columns; absent where the kind does
/// not measure it.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Figures {
    /// Good-put client → server, bits/s (a timed TCP test: at the receiver).
    pub throughput_up_bps: Option<f64>,
    /// Good-put server → client, bits/s.
    pub throughput_down_bps: Option<f64>,
    /// Packets or datagrams lost, percent.
    pub loss_pct: Option<f64>,
    /// Lost on the way source → destination, percent of those sent: a UDP
    /// upload's loss; STAMP's forward loss when the reflector numbers its
    /// replies. A round-trip loss that cannot be split (ping, STAMP
    /// against a stateless reflector) counts here too, as the direction of
    /// the host that measured it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss_forward_pct: Option<f64>,
    /// Lost on the way destination → source, percent of those that set
    /// out: a UDP download's loss; STAMP's lost replies, of the requests
    /// the reflector got.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss_backward_pct: Option<f64>,
    /// Duplicates.
    pub duplicates: Option<f64>,
    /// Reordered packets or datagrams.
    pub reordered: Option<f64>,
    /// Smallest round-trip delay, µs (STAMP, TWAMP: (T4 − T1) − (T3 − T2);
    /// echo: a message's round trip). One-way delay is never here.
    pub delay_min_us: Option<f64>,
    /// Median delay, µs.
    pub delay_median_us: Option<f64>,
    /// 95th percentile delay, µs.
    pub delay_p95_us: Option<f64>,
    /// Largest delay, µs.
    pub delay_max_us: Option<f64>,
    /// Jitter, µs: RFC 3550 interarrival jitter for UDP streams; for STAMP
    /// and TWAMP the 95th percentile less the median of the round trip
    /// (owping's); for OWAMP owping's own, of the one-way delay, the
    /// worse direction's (a spread, valid without synchronised clocks);
    /// for ping its mdev.
    pub jitter_us: Option<f64>,
    /// TCP retransmits (iperf3 tests).
    pub retransmits: Option<f64>,
    /// Failed connections, sessions or streams.
    pub errors: Option<f64>,
    /// Hops to the destination (traces that reached it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hops: Option<f64>,
    /// The path's checksum (traces; `goodput_core::path::path_checksum`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_checksum: Option<String>,
    /// Median one-way delay source → destination, µs (OWAMP's `to`,
    /// TWAMP's and STAMP's forward), from synchronised clocks only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owd_forward_median_us: Option<f64>,
    /// Median one-way delay destination → source, µs, likewise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owd_backward_median_us: Option<f64>,
    /// Whether the run's one-way delays are exact, every direction it
    /// measured: from clocks that were synchronised, each median clear of
    /// the clocks' error (`one_way_is_exact`). False: a direction that
    /// is not has no median here; its relative figures stay, marked, in
    /// the result document. None: no one-way delay.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owd_synchronized: Option<bool>,
    /// The clocks' error bound of the run's one-way delays, µs: the
    /// larger direction's (OWAMP's and STAMP's error estimates, pScheduler's
    /// `max-clock-error`); none where no one-way delay was measured or its
    /// error was not said (runs stored before it was kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owd_clock_error_us: Option<f64>,
    /// The median time of an HTTP request, µs (http runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_total_us: Option<f64>,
    /// Days until the first certificate of the server's chain expires
    /// (http over TLS, tls; negative once it has).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_days_left: Option<f64>,
}

pub(crate) use goodput_core::catalogue::MAX_DELAY_US;

impl Figures {
    /// The figures in the catalogue's order ([`catalogue::SERIES`]): the
    /// one place the catalogue's columns meet this struct's fields.
    pub fn values(&self) -> [Option<f64>; catalogue::SERIES.len()] {
        [
            self.throughput_up_bps,
            self.throughput_down_bps,
            self.loss_pct,
            self.loss_forward_pct,
            self.loss_backward_pct,
            self.duplicates,
            self.reordered,
            self.delay_min_us,
            self.delay_median_us,
            self.delay_p95_us,
            self.delay_max_us,
            self.jitter_us,
            self.retransmits,
            self.errors,
            self.hops,
            self.owd_forward_median_us,
            self.owd_backward_median_us,
            self.http_total_us,
            self.cert_days_left,
        ]
    }

    /// Figures from their values in the catalogue's order (as
    /// [`Figures::values`] gives them), the path's checksum and whether
    /// the one-way delays were synchronised.
    pub fn with_values(
        v: [Option<f64>; catalogue::SERIES.len()],
        path_checksum: Option<String>,
        owd_synchronized: Option<bool>,
    ) -> Self {
        let [throughput_up_bps, throughput_down_bps, loss_pct, loss_forward_pct, loss_backward_pct, duplicates, reordered, delay_min_us, delay_median_us, delay_p95_us, delay_max_us, jitter_us, retransmits, errors, hops, owd_forward_median_us, owd_backward_median_us, http_total_us, cert_days_left] =
            v;
        Figures {
            throughput_up_bps,
            throughput_down_bps,
            loss_pct,
            loss_forward_pct,
            loss_backward_pct,
            duplicates,
            reordered,
            delay_min_us,
            delay_median_us,
            delay_p95_us,
            delay_max_us,
            jitter_us,
            retransmits,
            errors,
            hops,
            path_checksum,
            owd_forward_median_us,
            owd_backward_median_us,
            owd_synchronized,
            owd_clock_error_us: None,
            http_total_us,
            cert_days_left,
        }
    }

    /// The same figures with the one-way delays' clock error.
    pub fn with_clock_error(self, owd_clock_error_us: Option<f64>) -> Self {
        Figures {
            owd_clock_error_us,
            ..self
        }
    }

    /// The value of a series figure of the catalogue.
    pub fn value(&self, figure: &Series) -> Option<f64> {
        let i = catalogue::SERIES.iter().position(|s| s.column == figure.column)?;
        self.values()[i]
    }

    /// The first figure outside physical sense, named with its value and
    /// its range: every figure must be finite and within the bounds the
    /// catalogue gives it (rates 0 to 10 Tbit/s, loss 0–100 %, delays and
    /// jitter 0 to an hour, one-way delay ± an hour, counts 0 to 2^53,
    /// hops 0–255). Figures from
    /// the network are checked with this before they are stored.
    pub fn out_of_range(&self) -> Option<String> {
        let checks = catalogue::SERIES
            .iter()
            .zip(self.values())
            .map(|(s, v)| (s.column, v, s.min, s.min_text, s.max, s.max_text));
        for (name, v, min, min_text, max, max_text) in checks {
            if let Some(v) = v {
                if !v.is_finite() || !(min..=max).contains(&v) {
                    // Huge values in short (1e308, not 309 digits).
                    let shown = if v.is_finite() && v.abs() >= 1e15 {
                        format!("{v:e}")
                    } else {
                        format!("{v}")
                    };
                    return Some(format!(
                        "figure {name} is {shown}, outside {min_text} to {max_text}"
                    ));
                }
            }
        }
        if let Some(e) = self.owd_clock_error_us {
            if !e.is_finite() || !(0.0..=MAX_DELAY_US).contains(&e) {
                return Some(format!("figure owd_clock_error_us is {e}, outside 0 to an hour"));
            }
        }
        match &self.path_checksum {
            Some(c) if c.len() > 128 => {
                Some(format!("figure path_checksum is {} bytes, at most 128", c.len()))
            }
            _ => None,
        }
    }
}

/// The figures of a result.
pub fn figures_of(r: &TestResult) -> Figures {
    let s = &r.summary;
    let mut f = Figures {
        errors: Some(s.failures() as f64),
        ..Figures::default()
    };
    if let Some(t) = &s.timed {
        f.throughput_up_bps = t.up.map(|d| d.bytes_per_second * 8.0);
        f.throughput_down_bps = t.down.map(|d| d.bytes_per_second * 8.0);
    } else if this_ends_rates(&r.detail) {
        // A byte-planned TCP test, ttcp, iperf3: this end's rates.
        f.throughput_up_bps = (s.sent_bytes > 0).then_some(s.send_bytes_per_second * 8.0);
        f.throughput_down_bps = (s.received_bytes > 0).then_some(s.recv_bytes_per_second * 8.0);
    }
    match &r.detail {
        Detail::None | Detail::Server(_) | Detail::Ttcp(_) => {}
        Detail::Iperf3(d) => {
            f.retransmits = Some(d.streams.iter().filter_map(|x| x.retransmits).sum::<u64>() as f64);
        }
        Detail::Media(m) => media(&mut f, m, s.duration_s),
        Detail::Stamp(st) => stamp(&mut f, st),
        Detail::Echo(e) => {
            if let Some(p) = e.round_trip.as_ref().filter(|p| p.count > 0) {
                f.delay_min_us = Some(p.min_us);
                f.delay_median_us = Some(p.p50_us);
                f.delay_max_us = Some(p.max_us);
            }
        }
        Detail::Trace(t) => {
            f.hops = t.hop_count.map(f64::from);
            f.path_checksum = Some(t.path_checksum.clone());
        }
        Detail::Ping(p) => {
            f.loss_pct = Some(p.loss_percent);
            f.loss_forward_pct = f.loss_pct;
            f.duplicates = Some(p.duplicates as f64);
            if let Some(rtt) = &p.rtt {
                f.delay_min_us = Some(rtt.min_us);
                f.delay_max_us = Some(rtt.max_us);
                f.jitter_us = Some(rtt.mdev_us);
            }
            f.delay_median_us = p.percentiles.map(|q| q.p50_us);
        }
        Detail::Owamp(o) => owamp(&mut f, o),
        Detail::Twamp(t) => {
            stamp_stats(&mut f, &t.stats);
        }
        Detail::Dns(d) => dns(&mut f, d),
        Detail::Ndt7(d) => {
            f.throughput_down_bps = d.download.map(|s| s.rate_bps);
            f.throughput_up_bps = d.upload.map(|s| s.rate_bps);
            f.delay_min_us = [d.download, d.upload]
                .into_iter()
                .flatten()
                .filter_map(|s| s.min_rtt_ms)
                .min_by(f64::total_cmp)
                .map(|ms| ms * 1e3);
            let segments: Vec<u64> = [d.download, d.upload]
                .into_iter()
                .flatten()
                .filter_map(|s| s.retransmitted_segments)
                .collect();
            f.retransmits = (!segments.is_empty()).then(|| segments.iter().sum::<u64>() as f64);
        }
        Detail::Http(h) => {
            f.http_total_us = h.median_total_ms().map(|m| m * 1e3);
            f.cert_days_left = h.tls().map(|t| t.chain_days_left);
        }
        Detail::Tls(t) => {
            f.cert_days_left = t.facts.as_ref().map(|x| x.chain_days_left);
        }
        Detail::Quic(q) => {
            if q.duration_s > 0.0 {
                f.throughput_up_bps =
                    (q.upload_bytes > 0).then(|| q.upload_bytes as f64 * 8.0 / q.duration_s);
                f.throughput_down_bps =
                    (q.download_bytes > 0).then(|| q.download_bytes as f64 * 8.0 / q.duration_s);
            }
        }
    }
    f
}

/// Whether a run without timed rates reports this end's byte rates as its
/// throughput: those whose detail has no rates of its own.
fn this_ends_rates(d: &Detail) -> bool {
    match d {
        Detail::None | Detail::Server(_) | Detail::Iperf3(_) | Detail::Ttcp(_) => true,
        Detail::Trace(_) | Detail::Ping(_) => true,
        Detail::Media(_) | Detail::Stamp(_) | Detail::Echo(_) | Detail::Quic(_) => false,
        Detail::Owamp(_) | Detail::Twamp(_) => false,
        Detail::Http(_) | Detail::Tls(_) => false,
        Detail::Ndt7(_) => false,
        Detail::Dns(_) => false,
    }
}

/// A dns run: its queries lost, and its resolution times as the round
/// trip's delay (a query and its reply are one round trip, as an echo
/// message's are); its errors (the summary's failures) are the queries
/// lost and the answers not as expected.
fn dns(f: &mut Figures, d: &goodput_core::dns::DnsDetail) {
    f.loss_pct = d.loss_percent();
    f.loss_forward_pct = f.loss_pct;
    if let Some(t) = &d.resolution {
        f.delay_min_us = Some(t.min_us);
        f.delay_median_us = Some(t.p50_us);
        f.delay_p95_us = Some(t.p95_us);
        f.delay_max_us = Some(t.max_us);
    }
}

fn media(f: &mut Figures, m: &MediaDetail, duration_s: f64) {
    let t = &m.total;
    if duration_s > 0.0 {
        let bps = t.received_bytes.map(|b| b as f64 * 8.0 / duration_s);
        if m.upload {
            f.throughput_up_bps = bps;
        } else {
            f.throughput_down_bps = bps;
        }
    }
    f.loss_pct = Some(t.loss_percent);
    if m.upload {
        f.loss_forward_pct = f.loss_pct;
    } else {
        f.loss_backward_pct = f.loss_pct;
    }
    f.duplicates = Some(t.duplicates as f64);
    f.reordered = Some(t.reordered as f64);
    f.jitter_us = Some(t.jitter_us);
}

fn stamp(f: &mut Figures, st: &StampDetail) {
    stamp_stats(f, &st.total);
}

/// STAMP's and TWAMP's figures: loss (split by direction when the
/// reflector numbers its replies), the round trip, and the one-way
/// medians when both clocks were synchronised.
fn stamp_stats(f: &mut Figures, t: &StampStats) {
    // Of the packets planned: one that could not be sent is a
    // measurement lost, and it was lost on the way out.
    f.loss_pct = t.loss_percent();
    match (t.lost_forward, t.lost_backward) {
        (Some(fwd), Some(back)) if t.sent > 0 => {
            // Over the packets the split covers: those lost in a way
            // that has no direction are left out of both.
            let unknown = t.lost.saturating_sub(fwd.saturating_add(back));
            let covered = t.planned().saturating_sub(unknown);
            let fwd = fwd.saturating_add(t.not_sent);
            f.loss_forward_pct = (covered > 0).then(|| fwd as f64 * 100.0 / covered as f64);
            let reached = covered.saturating_sub(fwd);
            f.loss_backward_pct = (reached > 0).then(|| back as f64 * 100.0 / reached as f64);
        }
        _ => f.loss_forward_pct = f.loss_pct,
    }
    f.duplicates = Some(t.duplicates as f64);
    f.reordered = Some(t.reordered as f64);
    if let Some(d) = &t.rtt {
        f.delay_min_us = Some(d.min_us);
        f.delay_median_us = Some(d.median_us);
        f.delay_max_us = Some(d.max_us);
        let p95 = t
            .histograms
            .rtt_ns
            .as_deref()
            .and_then(goodput_core::stamp::stats::decode_histogram)
            .filter(|h| !h.is_empty())
            .map(|h| h.value_at_quantile(0.95) as f64 / 1000.0);
        f.delay_p95_us = p95;
        f.jitter_us = p95.map(|p| (p - d.median_us).max(0.0));
    }
    one_way(f, t.forward.as_ref(), t.backward.as_ref());
}

/// Whether a one-way median is a delay one may judge: its clocks were
/// synchronised, and it stands clear of their error. A median no larger
/// than the clocks' error bound (a negative one above all) says how far
/// apart the clocks were, not how long the path took: −13 ms with a 27 ms
/// error is no delay, and comparing it with a baseline of the same
/// offset would be comparing clocks.
pub fn one_way_is_exact(synchronized: bool, median_us: f64, error_us: Option<f64>) -> bool {
    synchronized
        && median_us.is_finite()
        && median_us >= 0.0
        && error_us.is_none_or(|e| !e.is_finite() || median_us > e)
}

/// The one-way medians, each way, and whether they are exact: a
/// direction whose clocks were not synchronised for every sample, or
/// whose median is within its clocks' error ([`one_way_is_exact`]), keeps
/// its median out of the series (it is relative, not a delay), and marks
/// the run unsynchronised. The larger error bound is kept either way.
fn one_way(f: &mut Figures, forward: Option<&OneWayStats>, backward: Option<&OneWayStats>) {
    let measured: Vec<&OneWayStats> = [forward, backward]
        .into_iter()
        .flatten()
        .filter(|d| d.count > 0)
        .collect();
    if measured.is_empty() {
        return;
    }
    let exact = |d: &&OneWayStats| one_way_is_exact(d.synchronized, d.median_us, d.error_bound_us);
    f.owd_synchronized = Some(measured.iter().all(exact));
    f.owd_clock_error_us = measured
        .iter()
        .filter_map(|d| d.error_bound_us)
        .filter(|e| e.is_finite() && (0.0..=MAX_DELAY_US).contains(e))
        .reduce(f64::max);
    let median = |d: Option<&OneWayStats>| d.filter(|d| d.count > 0).filter(exact).map(|d| d.median_us);
    f.owd_forward_median_us = median(forward);
    f.owd_backward_median_us = median(backward);
}

/// OWAMP's figures: `to` is the forward direction (this host, the
/// source, sends to the destination), `from` the backward one.
fn owamp(f: &mut Figures, o: &OwampDetail) {
    let ways = [o.to.as_ref(), o.from.as_ref()];
    let (lost, sent) = ways.iter().flatten().fold((0u64, 0u64), |(l, s), d| {
        (l.saturating_add(d.lost), s.saturating_add(d.sent))
    });
    f.loss_pct = (sent > 0).then(|| lost.min(sent) as f64 * 100.0 / sent as f64);
    let loss = |d: Option<&goodput_core::result::OneWayDirection>| {
        d.filter(|d| d.sent > 0)
            .map(|d| d.lost.min(d.sent) as f64 * 100.0 / d.sent as f64)
    };
    f.loss_forward_pct = loss(o.to.as_ref());
    f.loss_backward_pct = loss(o.from.as_ref());
    f.duplicates = Some(ways.iter().flatten().map(|d| d.duplicates).sum::<u64>() as f64);
    f.reordered = Some(ways.iter().flatten().map(|d| d.reordered).sum::<u64>() as f64);
    // owping's jitter (95th percentile less the median) is a spread, valid
    // whether or not the clocks agree: the worse direction's.
    f.jitter_us = ways
        .iter()
        .flatten()
        .filter_map(|d| d.delay.as_ref())
        .filter(|d| d.count > 0 && d.jitter_us.is_finite())
        .map(|d| d.jitter_us.max(0.0))
        .reduce(f64::max);
    one_way(
        f,
        o.to.as_ref().and_then(|d| d.delay.as_ref()),
        o.from.as_ref().and_then(|d| d.delay.as_ref()),
    );
}

/// The figures of one summary of a continuous OWAMP stream (powstream's
/// summary), stored as a row of its own: its loss, duplicates,
/// reordering, jitter and, from synchronised clocks only, its median
/// one-way delay, in the direction's columns (`forward`: the stream goes
/// source → destination, OWAMP's `to`).
pub fn one_way_summary_figures(s: &OneWaySummary, forward: bool) -> Figures {
    let loss = (s.sent > 0).then(|| s.lost.min(s.sent) as f64 * 100.0 / s.sent as f64);
    let mut f = Figures {
        loss_pct: loss,
        duplicates: Some(s.duplicates as f64),
        reordered: Some(s.reordered as f64),
        jitter_us: s
            .delay
            .as_ref()
            .filter(|d| d.count > 0 && d.jitter_us.is_finite())
            .map(|d| d.jitter_us.max(0.0)),
        ..Figures::default()
    };
    if forward {
        f.loss_forward_pct = loss;
        one_way(&mut f, s.delay.as_ref(), None);
    } else {
        f.loss_backward_pct = loss;
        one_way(&mut f, None, s.delay.as_ref());
    }
    f
}

/// The key that groups the runs of one measurement over time: a hash of
/// the spec (as a document), the end that ran it and the pair.
pub fn measurement_key(spec: &TestSpec, source: &str, dest: Option<&str>) -> String {
    let text = serde_json::to_string(spec).unwrap_or_default();
    // Each part ends in a NUL, so ("ab", "c") and ("a", "bc") differ.
    let bytes: Vec<u8> = [text.as_str(), source, dest.unwrap_or("")]
        .iter()
        .flat_map(|p| p.bytes().chain(std::iter::once(0)))
        .collect();
    let h = goodput_core::hash::fnv1a(&bytes);
    format!("{h:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_figure_sits_in_the_catalogues_column() {
        // Give every figure a value of its own, then find each value under
        // its catalogue column in the serialised figures.
        let mut v = serde_json::to_value(Figures::default()).unwrap();
        for (i, s) in catalogue::SERIES.iter().enumerate() {
            v[s.column] = serde_json::json!(i as f64 + 1.0);
        }
        let f: Figures = serde_json::from_value(v).unwrap();
        let want: Vec<Option<f64>> = (0..catalogue::SERIES.len())
            .map(|i| Some(i as f64 + 1.0))
            .collect();
        assert_eq!(f.values().to_vec(), want);
        for (i, s) in catalogue::SERIES.iter().enumerate() {
            assert_eq!(f.value(s), Some(i as f64 + 1.0), "{}", s.name);
        }
    }

    fn way(median_us: f64, synchronized: bool, error_bound_us: Option<f64>) -> OneWayStats {
        OneWayStats {
            count: 100,
            min_us: median_us - 10.0,
            median_us,
            max_us: median_us + 10.0,
            jitter_us: 5.0,
            synchronized,
            error_bound_us,
            ipdv: None,
        }
    }

    #[test]
    fn a_median_within_its_clock_error_is_no_delay_and_the_error_is_kept() {
        // Synchronised, 2 ms clear of a 60 µs error: exact, both ways.
        let mut f = Figures::default();
        one_way(
            &mut f,
            Some(&way(2_000.0, true, Some(60.0))),
            Some(&way(2_500.0, true, None)),
        );
        assert_eq!(
            (
                f.owd_forward_median_us,
                f.owd_backward_median_us,
                f.owd_synchronized
            ),
            (Some(2_000.0), Some(2_500.0), Some(true))
        );
        assert_eq!(f.owd_clock_error_us, Some(60.0));
        // Flagged synchronised, but −13.16 ms against a 27 ms error, and
        // 20 µs against 1 ms: the clocks' offset, not delays.
        let mut f = Figures::default();
        one_way(
            &mut f,
            Some(&way(-13_160.0, true, Some(27_000.0))),
            Some(&way(20.0, true, Some(1_000.0))),
        );
        assert_eq!(
            (
                f.owd_forward_median_us,
                f.owd_backward_median_us,
                f.owd_synchronized
            ),
            (None, None, Some(false))
        );
        assert_eq!(f.owd_clock_error_us, Some(27_000.0));
        // One exact way beside one that is not: only the exact one.
        let mut f = Figures::default();
        one_way(
            &mut f,
            Some(&way(5_000.0, true, Some(100.0))),
            Some(&way(5_000.0, false, Some(100.0))),
        );
        assert_eq!(
            (
                f.owd_forward_median_us,
                f.owd_backward_median_us,
                f.owd_synchronized
            ),
            (Some(5_000.0), None, Some(false))
        );
    }

    #[test]
    fn figures_outside_physical_sense_are_named() {
        let ok = Figures {
            throughput_up_bps: Some(9.4e9),
            loss_pct: Some(100.0),
            delay_median_us: Some(0.0),
            hops: Some(12.0),
            ..Figures::default()
        };
        assert_eq!(ok.out_of_range(), None);
        let cases: [(Figures, &str); 6] = [
            (
                Figures {
                    throughput_up_bps: Some(1e308),
                    ..Figures::default()
                },
                "figure throughput_up_bps is 1e308, outside 0 to 10 Tbit/s",
            ),
            (
                Figures {
                    loss_pct: Some(-1.0),
                    ..Figures::default()
                },
                "figure loss_pct is -1, outside 0 to 100 %",
            ),
            (
                Figures {
                    loss_forward_pct: Some(100.5),
                    ..Figures::default()
                },
                "figure loss_forward_pct is 100.5, outside 0 to 100 %",
            ),
            (
                Figures {
                    delay_max_us: Some(f64::NAN),
                    ..Figures::default()
                },
                "figure delay_max_us is NaN, outside 0 to an hour",
            ),
            (
                Figures {
                    jitter_us: Some(-1e308),
                    ..Figures::default()
                },
                "figure jitter_us is -1e308, outside 0 to an hour",
            ),
            (
                Figures {
                    errors: Some(f64::INFINITY),
                    ..Figures::default()
                },
                "figure errors is inf, outside 0 to 2^53",
            ),
        ];
        for (f, want) in cases {
            assert_eq!(f.out_of_range().as_deref(), Some(want));
        }
    }
}
