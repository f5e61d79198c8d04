//! OWAMP and TWAMP views: summaries in owping's and twping's shape (so a
//! perfSONAR user reads them at a glance), each followed by goodput's own
//! exact figures (percentiles from an HdrHistogram where owping has 0.1 ms
//! buckets).

use goodput_core::result::{DelayStats, HopRange, OneWayDirection, OneWayStats, OwampDetail, TwampDetail};
use goodput_core::time::ms_rfc3339;

/// A number as C's `%.3g` writes it (owping's figures): three significant
/// digits, no trailing zeros, exponent form below 1e-4 and from 1e3.
pub fn g3(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return if v.is_nan() { "nan".into() } else { format!("{v}") };
    }
    let sci = format!("{v:.2e}");
    let (mant, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let trim = |s: String| {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_owned()
        } else {
            s
        }
    };
    if !(-4..3).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{}e{sign}{:02}", trim(mant.to_owned()), exp.abs())
    } else {
        let decimals = (2 - exp).max(0) as usize;
        trim(format!("{v:.decimals$}"))
    }
}

fn ms(us: f64) -> String {
    g3(us / 1e3)
}

fn time_of(ns: Option<i64>) -> String {
    ns.map_or_else(|| "-".into(), |t| ms_rfc3339((t / 1_000_000).max(0) as u64))
}

fn delay_line(what: &str, d: &OneWayStats) -> String {
    let err = if d.synchronized {
        d.error_bound_us
            .map_or_else(|| "(err unknown)".into(), |e| format!("(err={} ms)", ms(e)))
    } else {
        "(unsync)".into()
    };
    format!(
        "{what} min/median/max = {}/{}/{} ms, {err}\n",
        ms(d.min_us),
        ms(d.median_us),
        ms(d.max_us)
    )
}

fn hops_line(what: &str, h: Option<HopRange>) -> String {
    match h {
        None => format!("{what}TTL not reported\n"),
        Some(h) if h.min == h.max => format!("{what}hops = {} (consistently)\n", h.min),
        Some(h) => format!(
            "{what}hops takes several values; min hops = {}, max hops = {}\n",
            h.min, h.max
        ),
    }
}

fn percent(n: u64, of: u64) -> f64 {
    if of == 0 {
        0.0
    } else {
        n as f64 * 100.0 / of as f64
    }
}

/// One OWAMP session in owping's shape, then goodput's exact figures.
pub fn one_way_text(d: &OneWayDirection) -> String {
    let mut t = format!(
        "\n--- goodput owamp statistics from [{}] to [{}] ---\nSID:\t{}\nfirst:\t{}\nlast:\t{}\n",
        d.sender,
        d.receiver,
        d.sid,
        time_of(d.first_ns),
        time_of(d.last_ns)
    );
    t.push_str(&format!(
        "{} sent, {} lost ({:.3}%), {} duplicates\n",
        d.sent,
        d.lost,
        percent(d.lost, d.sent),
        d.duplicates
    ));
    match &d.delay {
        Some(s) => {
            t.push_str(&delay_line("one-way delay", s));
            t.push_str(&format!("one-way jitter = {} ms (P95-P50)\n", ms(s.jitter_us)));
        }
        None => t.push_str("one-way delay min/median/max = nan/nan/nan ms\n"),
    }
    t.push_str(&hops_line("", d.hops));
    if d.n_reordering_percent.is_empty() {
        t.push_str("no reordering\n");
    } else {
        for (i, p) in d.n_reordering_percent.iter().enumerate() {
            t.push_str(&format!("{}-reordering = {p:.6}%\n", i + 1));
        }
        t.push_str(&format!("no {}-reordering\n", d.n_reordering_percent.len() + 1));
    }
    // goodput's own: exact where owping rounds to its buckets.
    if d.unsent > 0 {
        t.push_str(&format!(
            "{} scheduled but not sent (this host refused to send them, or they were more than the loss timeout late)\n",
            d.unsent
        ));
    }
    if let Some(p) = &d.percentiles {
        t.push_str(&format!(
            "exact one-way delay (HdrHistogram, 0.1%): p50 {} / p90 {} / p99 {} / p99.9 {} ms, min {} / max {} ms\n",
            ms(p.p50_us),
            ms(p.p90_us),
            ms(p.p99_us),
            ms(p.p999_us),
            ms(p.min_us),
            ms(p.max_us)
        ));
    }
    if let Some(i) = d.delay.as_ref().and_then(|s| s.ipdv.as_ref()) {
        t.push_str(&format!(
            "IPDV (consecutive packets): min {} / median {} / max {} ms, |p99| {} ms\n",
            ms(i.min_us),
            ms(i.median_us),
            ms(i.max_us),
            ms(i.p99_abs_us)
        ));
    }
    t
}

/// `goodput owamp`'s summary: each direction as owping prints it.
pub fn owamp_summary(d: &OwampDetail) -> String {
    let mut t = format!(
        "  Mode : {}   Packets : {} B   Clock : {}\n",
        d.mode,
        d.packet_bytes,
        if d.local_clock.synchronized {
            "synchronised"
        } else {
            "not synchronised (unsync)"
        }
    );
    for way in [&d.to, &d.from].into_iter().flatten() {
        t.push_str(&one_way_text(way));
    }
    t
}

fn twamp_delay(what: &str, d: &DelayStats, err: &str) -> String {
    format!(
        "{what} min/median/max = {}/{}/{} ms, {err}\n",
        ms(d.min_us),
        ms(d.median_us),
        ms(d.max_us)
    )
}

/// `goodput twamp`'s summary in twping's shape, then the exact figures.
pub fn twamp_summary(d: &TwampDetail, sender: &str, reflector: &str) -> String {
    let s = &d.stats;
    let mut t = format!(
        "  Mode : {}   Packets : {} B   Clock : {}\n\n--- goodput twamp statistics from [{sender}] to [{reflector}] ---\nSID:\t{}\n",
        d.mode,
        d.packet_bytes,
        if d.local_clock.synchronized {
            "synchronised"
        } else {
            "not synchronised (unsync)"
        },
        d.sid
    );
    let lost_ways = match (s.lost_forward, s.lost_backward) {
        (Some(f), Some(b)) => format!(" ({f} on the way there, {b} on the way back)"),
        _ => String::new(),
    };
    if s.not_sent > 0 {
        // Refused sends are planned and lost, and said apart.
        t.push_str(&format!(
            "{} planned, {} sent, {} could not be sent ({}), {} lost ({:.3}%: {} not sent, {} in the network){lost_ways}, {} duplicates\n",
            s.planned(),
            s.sent,
            s.not_sent,
            goodput_core::result::SendFailure::describe(&s.send_failures),
            s.missing(),
            s.loss_percent().unwrap_or(0.0),
            s.not_sent,
            s.lost,
            s.duplicates
        ));
    } else {
        t.push_str(&format!(
            "{} sent, {} lost ({:.3}%){lost_ways}, {} duplicates\n",
            s.sent,
            s.lost,
            percent(s.lost, s.sent),
            s.duplicates
        ));
    }
    if let Some(r) = &s.rtt {
        // The round trip takes differences on each clock alone, so it is
        // exact whatever the clocks' offset; its bound is the estimates'
        // sum, shown only when both clocks claim synchronisation.
        let e = s
            .forward
            .as_ref()
            .filter(|f| f.synchronized)
            .and_then(|f| f.error_bound_us)
            .map_or_else(
                || "(clocks unsync: offset cancels)".into(),
                |e| format!("(err={} ms)", ms(e)),
            );
        t.push_str(&twamp_delay("round-trip time", r, &e));
    }
    if let Some(f) = &s.forward {
        t.push_str(&delay_line("send time", f));
    }
    if let Some(b) = &s.backward {
        t.push_str(&delay_line("reflect time", b));
    }
    if let Some(p) = &d.processing {
        t.push_str(&format!(
            "reflector processing time min/max = {}/{} ms\n",
            ms(p.min_us),
            ms(p.max_us)
        ));
    }
    let rtt_hist = s
        .histograms
        .rtt_ns
        .as_deref()
        .and_then(goodput_core::stamp::stats::decode_histogram);
    if let Some(h) = rtt_hist.filter(|h| !h.is_empty()) {
        let j = h.value_at_quantile(0.95).saturating_sub(h.value_at_quantile(0.5));
        t.push_str(&format!("two-way jitter = {} ms (P95-P50)\n", ms(j as f64 / 1e3)));
    }
    if let Some(f) = &s.forward {
        t.push_str(&format!("send jitter = {} ms (P95-P50)\n", ms(f.jitter_us)));
    }
    if let Some(b) = &s.backward {
        t.push_str(&format!("reflect jitter = {} ms (P95-P50)\n", ms(b.jitter_us)));
    }
    t.push_str(&hops_line("send ", s.hops_forward));
    t.push_str(&hops_line("reflect ", s.hops_backward));
    if let Some(r) = &s.rtt {
        t.push_str(&format!(
            "exact round trip (HdrHistogram, 0.1%): p50 {} / p90 {} / p99 {} ms, mean {} ms\n",
            ms(r.median_us),
            ms(r.p90_us),
            ms(r.p99_us),
            ms(r.mean_us)
        ));
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_print_as_owpings_percent_3g() {
        assert_eq!(g3(0.0429153), "0.0429");
        assert_eq!(g3(0.1), "0.1");
        assert_eq!(g3(0.087738), "0.0877");
        assert_eq!(g3(2.55), "2.55");
        assert_eq!(g3(9.31e-7), "9.31e-07");
        assert_eq!(g3(4.66e-7), "4.66e-07");
        assert_eq!(g3(0.00525), "0.00525");
        assert_eq!(g3(1234.0), "1.23e+03");
        assert_eq!(g3(999.6), "1e+03");
        assert_eq!(g3(0.0), "0");
        assert_eq!(g3(-0.5), "-0.5");
        assert_eq!(g3(12.0), "12");
    }
}
