//! The one catalogue of figures. Each figure is declared here once: its
//! name, what it measures (which fixes its unit), which way is better, the
//! bounds a stored value must keep, and how it is read. Everything that
//! names a figure reads it from here:
//!
//! - [`SERIES`], the figures a run is indexed by: the archive's columns
//!   and their bounds, the series of `/api/v1/series`, `goodput check`'s
//!   metrics, the alert families' figures and the agent's `/metrics`;
//! - [`assertion_figures`], the figures each kind's `--assert` (and a
//!   spec's `assert`) may name, with how each is read from a result, and
//!   [`assert_help`], the `--assert` help made from them.

use crate::kind::Kind;
use crate::result::{Percentiles, TestResult};
use crate::units::{format_bits_per_second, format_size};

/// What a figure measures, which fixes the unit its value is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Quantity {
    /// Bits per second (written as a rate: `900Mbit`, `100MB/s`).
    Rate,
    /// Percent (written with `%`).
    Share,
    /// Seconds (written with `ns`, `us`, `ms`, `s`).
    Time,
    /// Bytes (written with a size unit: `1GiB`).
    Bytes,
    /// A plain number.
    Count,
}

impl Quantity {
    /// How a value of it is written, for messages.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Quantity::Rate => "a rate such as 900Mbit or 100MB/s",
            Quantity::Share => "a percentage such as 0.1%",
            Quantity::Time => "a time such as 5ms or 250us",
            Quantity::Bytes => "a size such as 1GiB",
            Quantity::Count => "a plain number",
        }
    }

    /// A measured value in this quantity's words.
    pub fn show(self, v: f64) -> String {
        match self {
            Quantity::Rate => format_bits_per_second(v / 8.0),
            Quantity::Share => format!("{v:.4}%"),
            Quantity::Time => match v {
                v if v < 1e-3 => format!("{:.1} µs", v * 1e6),
                v if v < 1.0 => format!("{:.3} ms", v * 1e3),
                v => format!("{v:.3} s"),
            },
            Quantity::Bytes => format_size(v as u64),
            Quantity::Count => match v.fract() == 0.0 && v.abs() < 1e15 {
                true => format!("{v:.0}"),
                false => format!("{v:.4}"),
            },
        }
    }
}

/// Which way a figure is better.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Better {
    /// More is better (good-put).
    Higher,
    /// Less is better (loss, delay, errors).
    Lower,
    /// Neither (a hop count, a path MTU).
    Neither,
}

/// How the agent exports a series figure on `/metrics` (OpenMetrics).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Exported {
    /// The metric family's name.
    pub name: &'static str,
    /// Its OpenMetrics unit (empty: none).
    pub unit: &'static str,
    /// Its help text.
    pub help: &'static str,
    /// Archive units per exported unit: the exported value is the
    /// archive's divided by it (100 turns percent into a ratio, 1e6
    /// microseconds into seconds).
    pub per: f64,
}

/// A figure a run is indexed by.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Series {
    /// Its name in the API (`/api/v1/series?metric=`), `goodput check`
    /// and alerts.
    pub name: &'static str,
    /// The archive's column (and the field of its figures).
    pub column: &'static str,
    /// What it is.
    pub about: &'static str,
    /// What it measures.
    pub quantity: Quantity,
    /// The unit the archive keeps it in.
    pub unit: &'static str,
    /// Which way is better.
    pub better: Better,
    /// The largest value that makes physical sense.
    pub max: f64,
    /// The same, in words.
    pub max_text: &'static str,
    /// The smallest (0 but for one-way delay, which synchronised clocks
    /// within their error may still make a little negative).
    pub min: f64,
    /// The same, in words.
    pub min_text: &'static str,
    /// Whether the archive serves it as a series.
    pub served: bool,
    /// Whether `goodput check` takes it, and the kind of test whose runs
    /// carry it when the command names none.
    pub check_kind: Option<Kind>,
    /// How `/metrics` exports the latest value, when it does.
    pub exported: Option<Exported>,
}

/// The fastest rate a figure may say, bits/s (10 Tbit/s).
pub const MAX_BPS: f64 = 1e13;
/// The longest delay or jitter a figure may say, µs (an hour).
pub const MAX_DELAY_US: f64 = 3.6e9;
/// The largest count a figure may say (2^53: exact in a double).
pub const MAX_COUNT: f64 = 9_007_199_254_740_992.0;

const fn rate(name: &'static str, column: &'static str, about: &'static str) -> Series {
    Series {
        name,
        column,
        about,
        quantity: Quantity::Rate,
        unit: "bit/s",
        better: Better::Higher,
        max: MAX_BPS,
        max_text: "10 Tbit/s",
        min: 0.0,
        min_text: "0",
        served: true,
        check_kind: Some(Kind::Tcp),
        exported: None,
    }
}

const fn share(name: &'static str, column: &'static str, about: &'static str) -> Series {
    Series {
        name,
        column,
        about,
        quantity: Quantity::Share,
        unit: "%",
        better: Better::Lower,
        max: 100.0,
        max_text: "100 %",
        min: 0.0,
        min_text: "0",
        served: true,
        check_kind: Some(Kind::Stamp),
        exported: None,
    }
}

const fn time(name: &'static str, column: &'static str, about: &'static str) -> Series {
    Series {
        name,
        column,
        about,
        quantity: Quantity::Time,
        unit: "µs",
        better: Better::Lower,
        max: MAX_DELAY_US,
        max_text: "an hour",
        min: 0.0,
        min_text: "0",
        served: true,
        check_kind: Some(Kind::Stamp),
        exported: None,
    }
}

const fn count(name: &'static str, column: &'static str, about: &'static str) -> Series {
    Series {
        name,
        column,
        about,
        quantity: Quantity::Count,
        unit: "",
        better: Better::Lower,
        max: MAX_COUNT,
        max_text: "2^53",
        min: 0.0,
        min_text: "0",
        served: true,
        check_kind: None,
        exported: None,
    }
}

const fn exported(name: &'static str, unit: &'static str, help: &'static str, per: f64) -> Option<Exported> {
    Some(Exported {
        name,
        unit,
        help,
        per,
    })
}

/// Good-put client → server.
pub const THROUGHPUT_UP: Series = Series {
    exported: exported(
        "goodput_throughput_up_bits_per_second",
        "bits_per_second",
        "Latest good-put client to server.",
        1.0,
    ),
    ..rate(
        "throughput_up",
        "throughput_up_bps",
        "good-put client to server (a timed TCP test: at the receiver)",
    )
};
/// Good-put server → client.
pub const THROUGHPUT_DOWN: Series = Series {
    exported: exported(
        "goodput_throughput_down_bits_per_second",
        "bits_per_second",
        "Latest good-put server to client.",
        1.0,
    ),
    ..rate(
        "throughput_down",
        "throughput_down_bps",
        "good-put server to client",
    )
};
/// Loss, either way.
pub const LOSS: Series = Series {
    exported: exported("goodput_loss_ratio", "ratio", "Latest loss.", 100.0),
    ..share("loss", "loss_pct", "packets or datagrams lost")
};
/// Loss source → destination.
pub const LOSS_FORWARD: Series = share(
    "loss_forward",
    "loss_forward_pct",
    "lost on the way source to destination",
);
/// Loss destination → source.
pub const LOSS_BACKWARD: Series = share(
    "loss_backward",
    "loss_backward_pct",
    "lost on the way destination to source",
);
/// Duplicates.
pub const DUPLICATES: Series = Series {
    served: false,
    ..count("duplicates", "duplicates", "packets or datagrams that came twice")
};
/// Reordered packets or datagrams.
pub const REORDERED: Series = Series {
    served: false,
    ..count("reordered", "reordered", "packets or datagrams reordered")
};
/// Smallest delay.
pub const DELAY_MIN: Series = Series {
    check_kind: None,
    ..time("delay_min", "delay_min_us", "smallest delay")
};
/// Median delay.
pub const DELAY_MEDIAN: Series = Series {
    exported: exported(
        "goodput_delay_median_seconds",
        "seconds",
        "Latest median delay.",
        1e6,
    ),
    ..time("delay_median", "delay_median_us", "median delay")
};
/// 95th percentile delay.
pub const DELAY_P95: Series = Series {
    exported: exported(
        "goodput_delay_p95_seconds",
        "seconds",
        "Latest 95th percentile delay.",
        1e6,
    ),
    ..time("delay_p95", "delay_p95_us", "95th percentile delay")
};
/// Largest delay.
pub const DELAY_MAX: Series = Series {
    check_kind: None,
    ..time("delay_max", "delay_max_us", "largest delay")
};
/// Jitter.
pub const JITTER: Series = Series {
    exported: exported("goodput_jitter_seconds", "seconds", "Latest jitter.", 1e6),
    ..time("jitter", "jitter_us", "jitter")
};
/// Median one-way delay source → destination, from synchronised clocks
/// only: a run whose clocks were not synchronised has no value here (its
/// document keeps the relative figures, marked).
pub const OWD_FORWARD_MEDIAN: Series = Series {
    check_kind: Some(Kind::Owamp),
    exported: exported(
        "goodput_owd_forward_median_seconds",
        "seconds",
        "Latest median one-way delay source to destination (synchronised clocks only).",
        1e6,
    ),
    min: -MAX_DELAY_US,
    min_text: "minus an hour",
    ..time(
        "owd_forward_median",
        "owd_forward_median_us",
        "median one-way delay source to destination (synchronised clocks only)",
    )
};
/// Median one-way delay destination → source, as the forward one.
pub const OWD_BACKWARD_MEDIAN: Series = Series {
    check_kind: Some(Kind::Owamp),
    exported: exported(
        "goodput_owd_backward_median_seconds",
        "seconds",
        "Latest median one-way delay destination to source (synchronised clocks only).",
        1e6,
    ),
    min: -MAX_DELAY_US,
    min_text: "minus an hour",
    ..time(
        "owd_backward_median",
        "owd_backward_median_us",
        "median one-way delay destination to source (synchronised clocks only)",
    )
};
/// TCP retransmits.
pub const RETRANSMITS: Series = Series {
    exported: exported("goodput_retransmits", "", "Latest retransmits.", 1.0),
    ..count("retransmits", "retransmits", "TCP retransmits (iperf3 tests)")
};
/// Failed connections, sessions or streams.
pub const ERRORS: Series = Series {
    check_kind: Some(Kind::Tcp),
    exported: exported("goodput_errors", "", "Latest failed connections.", 1.0),
    ..count("errors", "errors", "failed connections, sessions or streams")
};
/// Hops to the destination.
pub const HOPS: Series = Series {
    better: Better::Neither,
    max: 255.0,
    max_text: "255",
    check_kind: Some(Kind::Trace),
    exported: exported(
        "goodput_hops",
        "",
        "Latest hop count to the destination (traces).",
        1.0,
    ),
    ..count("hops", "hops", "hops to the destination (traces that reached it)")
};

/// The median time of an HTTP request, redirects included (http runs).
pub const HTTP_TOTAL: Series = Series {
    check_kind: Some(Kind::Http),
    exported: exported(
        "goodput_http_total_seconds",
        "seconds",
        "Latest median time of an HTTP request, redirects included.",
        1e6,
    ),
    ..time(
        "http_total",
        "http_total_us",
        "median time of an HTTP request, redirects included",
    )
};
/// Days until the first certificate of a server's chain expires (http
/// over TLS, tls); negative once it has.
pub const CERT_DAYS_LEFT: Series = Series {
    better: Better::Higher,
    max: 36_500.0,
    max_text: "100 years",
    min: -36_500.0,
    min_text: "minus 100 years",
    check_kind: Some(Kind::Tls),
    exported: exported(
        "goodput_cert_days_left",
        "",
        "Latest days until the first certificate of the chain expires.",
        1.0,
    ),
    ..count(
        "cert_days_left",
        "cert_days_left",
        "days until the first certificate of the chain expires (http, tls)",
    )
};

/// Every figure a run is indexed by, in the order a stored run's figures
/// are checked (the path's checksum, a text, is not a figure here).
pub const SERIES: [Series; 19] = [
    THROUGHPUT_UP,
    THROUGHPUT_DOWN,
    LOSS,
    LOSS_FORWARD,
    LOSS_BACKWARD,
    DUPLICATES,
    REORDERED,
    DELAY_MIN,
    DELAY_MEDIAN,
    DELAY_P95,
    DELAY_MAX,
    JITTER,
    RETRANSMITS,
    ERRORS,
    HOPS,
    OWD_FORWARD_MEDIAN,
    OWD_BACKWARD_MEDIAN,
    HTTP_TOTAL,
    CERT_DAYS_LEFT,
];

/// The series figure of an API name.
pub fn series(name: &str) -> Option<&'static Series> {
    SERIES.iter().find(|s| s.name == name)
}

/// The names and archive units of the figures the archive serves as
/// series (`/api/v1/series?metric=`), in [`SERIES`]'s order.
pub fn served_series() -> impl Iterator<Item = (&'static str, &'static str)> {
    SERIES.iter().filter(|s| s.served).map(|s| (s.name, s.unit))
}

/// A figure one kind's assertions may name.
pub struct Figure {
    /// Its name in assertions.
    pub name: &'static str,
    /// What it measures.
    pub quantity: Quantity,
    /// Which way is better.
    pub better: Better,
    /// What it is, for `--help` and the option reference.
    pub about: &'static str,
    read: fn(&TestResult) -> Option<f64>,
}

impl Figure {
    /// Its value in a result, in its quantity's base unit (bits/s,
    /// percent, seconds, bytes, or a count); `None` where the run did not
    /// measure it.
    pub fn read(&self, r: &TestResult) -> Option<f64> {
        (self.read)(r)
    }
}

const fn fig(
    name: &'static str,
    quantity: Quantity,
    better: Better,
    about: &'static str,
    read: fn(&TestResult) -> Option<f64>,
) -> Figure {
    Figure {
        name,
        quantity,
        better,
        about,
        read,
    }
}

fn us(v: f64) -> f64 {
    v / 1e6
}

fn pct(p: &Option<Percentiles>, f: fn(&Percentiles) -> f64) -> Option<f64> {
    p.as_ref().filter(|p| p.count > 0).map(|p| us(f(p)))
}

const COMMON: [Figure; 3] = [
    fig(
        "errors",
        Quantity::Count,
        Better::Lower,
        "connections (sessions, streams) that failed",
        |r| Some(r.summary.failures() as f64),
    ),
    fig(
        "successful",
        Quantity::Count,
        Better::Higher,
        "connections (sessions, streams) that succeeded",
        |r| Some(r.summary.successful as f64),
    ),
    fig(
        "aborted",
        Quantity::Count,
        Better::Lower,
        "connections aborted by a stop",
        |r| Some(r.summary.aborted as f64),
    ),
];

/// The tcp kind's own assertion figures.
pub const TCP: [Figure; 6] = [
    fig(
        "goodput",
        Quantity::Rate,
        Better::Higher,
        "both directions' good-put (timed: at the receivers, after the warm-up)",
        |r| {
            let s = &r.summary;
            Some(
                8.0 * match &s.timed {
                    Some(t) => {
                        t.up.map_or(0.0, |d| d.bytes_per_second) + t.down.map_or(0.0, |d| d.bytes_per_second)
                    }
                    None => s.send_bytes_per_second + s.recv_bytes_per_second,
                },
            )
        },
    ),
    fig(
        "goodput.up",
        Quantity::Rate,
        Better::Higher,
        "client-to-server good-put (timed: at the server)",
        |r| {
            let s = &r.summary;
            Some(
                8.0 * match &s.timed {
                    Some(t) => t.up.map_or(0.0, |d| d.bytes_per_second),
                    None => s.send_bytes_per_second,
                },
            )
        },
    ),
    fig(
        "goodput.down",
        Quantity::Rate,
        Better::Higher,
        "server-to-client good-put (timed: at the client)",
        |r| {
            let s = &r.summary;
            Some(
                8.0 * match &s.timed {
                    Some(t) => t.down.map_or(0.0, |d| d.bytes_per_second),
                    None => s.recv_bytes_per_second,
                },
            )
        },
    ),
    fig(
        "sent",
        Quantity::Bytes,
        Better::Higher,
        "pattern bytes sent",
        |r| Some(r.summary.sent_bytes as f64),
    ),
    fig(
        "received",
        Quantity::Bytes,
        Better::Higher,
        "pattern bytes received",
        |r| Some(r.summary.received_bytes as f64),
    ),
    fig(
        "fairness",
        Quantity::Count,
        Better::Higher,
        "Jain's fairness index of the connections' good-put (1 = equal)",
        |r| r.summary.fairness,
    ),
];

/// The udp kind's own assertion figures.
pub const UDP: [Figure; 7] = [
    fig(
        "goodput",
        Quantity::Rate,
        Better::Higher,
        "bits received per second of the run",
        |r| {
            let m = r.media()?;
            let bytes = m.total.received_bytes?;
            (r.summary.duration_s > 0.0).then(|| bytes as f64 * 8.0 / r.summary.duration_s)
        },
    ),
    fig(
        "loss",
        Quantity::Share,
        Better::Lower,
        "datagrams lost or not sent at all, percent of those planned",
        |r| r.media().map(|m| m.total.loss_percent),
    ),
    fig(
        "not_sent",
        Quantity::Count,
        Better::Lower,
        "datagrams planned that could not be sent (e.g. a firewall refused them)",
        |r| r.media()?.total.send_errors.map(|n| n as f64),
    ),
    fig(
        "jitter",
        Quantity::Time,
        Better::Lower,
        "RFC 3550 interarrival jitter",
        |r| r.media().map(|m| us(m.total.jitter_us)),
    ),
    fig(
        "frames_dropped",
        Quantity::Count,
        Better::Lower,
        "frames played short",
        |r| r.media().map(|m| m.total.frames_dropped as f64),
    ),
    fig(
        "late",
        Quantity::Count,
        Better::Lower,
        "datagrams that came after their frame was played",
        |r| r.media().map(|m| m.total.late as f64),
    ),
    fig(
        "reordered",
        Quantity::Count,
        Better::Lower,
        "RFC 4737 reordered datagrams",
        |r| r.media().map(|m| m.total.reordered as f64),
    ),
];

/// The stamp kind's own assertion figures.
pub const STAMP: [Figure; 9] = [
    fig(
        "loss",
        Quantity::Share,
        Better::Lower,
        "packets with no reply or not sent at all, percent of those planned",
        |r| r.stamp()?.total.loss_percent(),
    ),
    fig(
        "not_sent",
        Quantity::Count,
        Better::Lower,
        "packets planned that could not be sent (e.g. a firewall refused them)",
        |r| r.stamp().map(|s| s.total.not_sent as f64),
    ),
    fig(
        "rtt.min",
        Quantity::Time,
        Better::Lower,
        "smallest round-trip delay",
        |r| r.stamp()?.total.rtt.as_ref().map(|d| us(d.min_us)),
    ),
    fig(
        "rtt.median",
        Quantity::Time,
        Better::Lower,
        "median round-trip delay",
        |r| r.stamp()?.total.rtt.as_ref().map(|d| us(d.median_us)),
    ),
    fig(
        "rtt.mean",
        Quantity::Time,
        Better::Lower,
        "mean round-trip delay",
        |r| r.stamp()?.total.rtt.as_ref().map(|d| us(d.mean_us)),
    ),
    fig(
        "rtt.p90",
        Quantity::Time,
        Better::Lower,
        "90th percentile round-trip delay",
        |r| r.stamp()?.total.rtt.as_ref().map(|d| us(d.p90_us)),
    ),
    fig(
        "rtt.p99",
        Quantity::Time,
        Better::Lower,
        "99th percentile round-trip delay",
        |r| r.stamp()?.total.rtt.as_ref().map(|d| us(d.p99_us)),
    ),
    fig(
        "rtt.max",
        Quantity::Time,
        Better::Lower,
        "largest round-trip delay",
        |r| r.stamp()?.total.rtt.as_ref().map(|d| us(d.max_us)),
    ),
    fig(
        "duplicates",
        Quantity::Count,
        Better::Lower,
        "replies beyond the first",
        |r| r.stamp().map(|s| s.total.duplicates as f64),
    ),
];

fn owamp_way(
    r: &TestResult,
    way: fn(&crate::result::OwampDetail) -> Option<&crate::result::OneWayDirection>,
) -> Option<&crate::result::OneWayDirection> {
    way(r.owamp()?)
}

fn owamp_loss(d: &crate::result::OneWayDirection) -> Option<f64> {
    (d.sent > 0).then(|| d.lost as f64 * 100.0 / d.sent as f64)
}

/// The owamp kind's own assertion figures.
pub const OWAMP: [Figure; 11] = [
    fig(
        "loss",
        Quantity::Share,
        Better::Lower,
        "packets lost, percent of those sent, both directions together",
        |r| {
            let o = r.owamp()?;
            let (lost, sent) = [o.to.as_ref(), o.from.as_ref()]
                .into_iter()
                .flatten()
                .fold((0u64, 0u64), |(l, s), d| (l + d.lost, s + d.sent));
            (sent > 0).then(|| lost as f64 * 100.0 / sent as f64)
        },
    ),
    fig(
        "loss.to",
        Quantity::Share,
        Better::Lower,
        "packets lost on the way to the server, percent",
        |r| owamp_loss(owamp_way(r, |o| o.to.as_ref())?),
    ),
    fig(
        "loss.from",
        Quantity::Share,
        Better::Lower,
        "packets lost on the way from the server, percent",
        |r| owamp_loss(owamp_way(r, |o| o.from.as_ref())?),
    ),
    fig(
        "delay.to.min",
        Quantity::Time,
        Better::Lower,
        "smallest one-way delay to the server (exact only with synchronised clocks)",
        |r| owamp_way(r, |o| o.to.as_ref())?.delay.map(|d| us(d.min_us)),
    ),
    fig(
        "delay.to.median",
        Quantity::Time,
        Better::Lower,
        "median one-way delay to the server",
        |r| owamp_way(r, |o| o.to.as_ref())?.delay.map(|d| us(d.median_us)),
    ),
    fig(
        "delay.from.min",
        Quantity::Time,
        Better::Lower,
        "smallest one-way delay from the server",
        |r| owamp_way(r, |o| o.from.as_ref())?.delay.map(|d| us(d.min_us)),
    ),
    fig(
        "delay.from.median",
        Quantity::Time,
        Better::Lower,
        "median one-way delay from the server",
        |r| owamp_way(r, |o| o.from.as_ref())?.delay.map(|d| us(d.median_us)),
    ),
    fig(
        "jitter.to",
        Quantity::Time,
        Better::Lower,
        "owping's jitter to the server (95th percentile minus median delay)",
        |r| owamp_way(r, |o| o.to.as_ref())?.delay.map(|d| us(d.jitter_us)),
    ),
    fig(
        "jitter.from",
        Quantity::Time,
        Better::Lower,
        "owping's jitter from the server",
        |r| owamp_way(r, |o| o.from.as_ref())?.delay.map(|d| us(d.jitter_us)),
    ),
    fig(
        "duplicates",
        Quantity::Count,
        Better::Lower,
        "copies beyond the first, both directions",
        |r| {
            let o = r.owamp()?;
            Some(
                [o.to.as_ref(), o.from.as_ref()]
                    .into_iter()
                    .flatten()
                    .map(|d| d.duplicates)
                    .sum::<u64>() as f64,
            )
        },
    ),
    fig(
        "reordered",
        Quantity::Count,
        Better::Lower,
        "RFC 4737 reordered packets, both directions",
        |r| {
            let o = r.owamp()?;
            Some(
                [o.to.as_ref(), o.from.as_ref()]
                    .into_iter()
                    .flatten()
                    .map(|d| d.reordered)
                    .sum::<u64>() as f64,
            )
        },
    ),
];

/// The twamp kind's own assertion figures.
pub const TWAMP: [Figure; 9] = [
    fig(
        "loss",
        Quantity::Share,
        Better::Lower,
        "packets with no reflection or not sent at all, percent of those planned",
        |r| r.twamp()?.stats.loss_percent(),
    ),
    fig(
        "not_sent",
        Quantity::Count,
        Better::Lower,
        "packets planned that could not be sent (e.g. a firewall refused them)",
        |r| r.twamp().map(|s| s.stats.not_sent as f64),
    ),
    fig(
        "rtt.min",
        Quantity::Time,
        Better::Lower,
        "smallest round-trip delay (the reflector's time taken out)",
        |r| r.twamp()?.stats.rtt.as_ref().map(|d| us(d.min_us)),
    ),
    fig(
        "rtt.median",
        Quantity::Time,
        Better::Lower,
        "median round-trip delay",
        |r| r.twamp()?.stats.rtt.as_ref().map(|d| us(d.median_us)),
    ),
    fig(
        "rtt.p90",
        Quantity::Time,
        Better::Lower,
        "90th percentile round-trip delay",
        |r| r.twamp()?.stats.rtt.as_ref().map(|d| us(d.p90_us)),
    ),
    fig(
        "rtt.p99",
        Quantity::Time,
        Better::Lower,
        "99th percentile round-trip delay",
        |r| r.twamp()?.stats.rtt.as_ref().map(|d| us(d.p99_us)),
    ),
    fig(
        "rtt.max",
        Quantity::Time,
        Better::Lower,
        "largest round-trip delay",
        |r| r.twamp()?.stats.rtt.as_ref().map(|d| us(d.max_us)),
    ),
    fig(
        "processing.max",
        Quantity::Time,
        Better::Lower,
        "longest time the reflector held a packet",
        |r| r.twamp()?.processing.as_ref().map(|d| us(d.max_us)),
    ),
    fig(
        "duplicates",
        Quantity::Count,
        Better::Lower,
        "reflections beyond the first",
        |r| r.twamp().map(|t| t.stats.duplicates as f64),
    ),
];

/// The echo kind's own assertion figures.
pub const ECHO: [Figure; 8] = [
    fig(
        "rtt.min",
        Quantity::Time,
        Better::Lower,
        "smallest round trip of a message",
        |r| pct(&r.echo()?.round_trip, |p| p.min_us),
    ),
    fig(
        "rtt.p50",
        Quantity::Time,
        Better::Lower,
        "median round trip",
        |r| pct(&r.echo()?.round_trip, |p| p.p50_us),
    ),
    fig(
        "rtt.p90",
        Quantity::Time,
        Better::Lower,
        "90th percentile round trip",
        |r| pct(&r.echo()?.round_trip, |p| p.p90_us),
    ),
    fig(
        "rtt.p99",
        Quantity::Time,
        Better::Lower,
        "99th percentile round trip",
        |r| pct(&r.echo()?.round_trip, |p| p.p99_us),
    ),
    fig(
        "rtt.max",
        Quantity::Time,
        Better::Lower,
        "largest round trip",
        |r| pct(&r.echo()?.round_trip, |p| p.max_us),
    ),
    fig(
        "connect.p99",
        Quantity::Time,
        Better::Lower,
        "99th percentile connect time",
        |r| pct(&r.echo()?.connect_time, |p| p.p99_us),
    ),
    fig(
        "mismatched",
        Quantity::Count,
        Better::Lower,
        "echoes that differed from what was sent",
        |r| r.echo().map(|e| e.mismatched as f64),
    ),
    fig(
        "missing",
        Quantity::Count,
        Better::Lower,
        "messages whose echo never came",
        |r| r.echo().map(|e| e.missing as f64),
    ),
];

/// The quic kind's own assertion figures.
pub const QUIC: [Figure; 5] = [
    fig(
        "goodput",
        Quantity::Rate,
        Better::Higher,
        "upload and download bits per second",
        |r| {
            let q = r.quic()?;
            (q.duration_s > 0.0).then(|| (q.upload_bytes + q.download_bytes) as f64 * 8.0 / q.duration_s)
        },
    ),
    fig(
        "rps",
        Quantity::Count,
        Better::Higher,
        "requests (transactions) per second",
        |r| {
            let q = r.quic()?;
            Some(q.requests.as_ref().map_or(q.tps, |x| x.per_second))
        },
    ),
    fig(
        "latency.p50",
        Quantity::Time,
        Better::Lower,
        "median request latency (--rps)",
        |r| pct(&r.quic()?.requests.as_ref()?.latency, |p| p.p50_us),
    ),
    fig(
        "latency.p99",
        Quantity::Time,
        Better::Lower,
        "99th percentile request latency (--rps)",
        |r| pct(&r.quic()?.requests.as_ref()?.latency, |p| p.p99_us),
    ),
    fig(
        "failed_streams",
        Quantity::Count,
        Better::Lower,
        "streams that failed",
        |r| r.quic().map(|q| q.failed_streams as f64),
    ),
];

/// The iperf3 kind's own assertion figures.
pub const IPERF3: [Figure; 4] = [
    fig(
        "goodput",
        Quantity::Rate,
        Better::Higher,
        "bits received per second, summed over streams",
        |r| {
            let d = r.iperf3()?;
            let rate = |s: &crate::result::Iperf3StreamRecord| match s.seconds > 0.0 {
                true => s.bytes as f64 * 8.0 / s.seconds,
                false => 0.0,
            };
            // What arrived: this end's receiving streams, and the peer's
            // figures for the streams this end sent.
            Some(
                d.streams
                    .iter()
                    .map(|s| match (s.sender, &s.peer) {
                        (false, _) => rate(s),
                        (true, Some(p)) if p.seconds > 0.0 => p.bytes as f64 * 8.0 / p.seconds,
                        (true, _) => 0.0,
                    })
                    .sum(),
            )
        },
    ),
    fig(
        "retransmits",
        Quantity::Count,
        Better::Lower,
        "TCP retransmits of this end's sending streams",
        |r| {
            let d = r.iperf3()?;
            Some(d.streams.iter().filter_map(|s| s.retransmits).sum::<u64>() as f64)
        },
    ),
    fig(
        "loss",
        Quantity::Share,
        Better::Lower,
        "UDP datagrams lost, percent",
        |r| {
            let d = r.iperf3()?;
            let (lost, total) = d
                .streams
                .iter()
                .filter_map(|s| s.udp.as_ref())
                .fold((0u64, 0u64), |(l, t), u| (l + u.lost, t + u.packets));
            (total > 0).then(|| lost as f64 * 100.0 / total as f64)
        },
    ),
    fig(
        "jitter",
        Quantity::Time,
        Better::Lower,
        "UDP jitter, mean over streams",
        |r| {
            let d = r.iperf3()?;
            let j: Vec<f64> = d
                .streams
                .iter()
                .filter_map(|s| s.udp.as_ref())
                .map(|u| u.jitter_ms)
                .collect();
            (!j.is_empty()).then(|| j.iter().sum::<f64>() / j.len() as f64 / 1e3)
        },
    ),
];

/// The ttcp kind's own assertion figures.
pub const TTCP: [Figure; 2] = [
    fig(
        "goodput",
        Quantity::Rate,
        Better::Higher,
        "bits moved per second (ttcp's real time)",
        |r| {
            let t = r.ttcp()?;
            (t.real_s > 0.0).then(|| t.bytes as f64 * 8.0 / t.real_s)
        },
    ),
    fig(
        "bytes",
        Quantity::Bytes,
        Better::Higher,
        "payload bytes moved",
        |r| r.ttcp().map(|t| t.bytes as f64),
    ),
];

/// The trace kind's own assertion figures.
pub const TRACE: [Figure; 3] = [
    fig(
        "reached",
        Quantity::Count,
        Better::Higher,
        "1 when the destination answered, else 0",
        |r| r.trace().map(|t| f64::from(u8::from(t.reached))),
    ),
    fig(
        "hops",
        Quantity::Count,
        Better::Neither,
        "hops to the destination (when reached)",
        |r| r.trace()?.hop_count.map(f64::from),
    ),
    fig(
        "pmtu",
        Quantity::Bytes,
        Better::Neither,
        "path MTU found (with --pmtu)",
        |r| r.trace()?.pmtu.map(f64::from),
    ),
];

/// The ping kind's own assertion figures.
pub const PING: [Figure; 6] = [
    fig(
        "loss",
        Quantity::Share,
        Better::Lower,
        "requests with no reply, percent",
        |r| r.ping().map(|p| p.loss_percent),
    ),
    fig(
        "rtt.min",
        Quantity::Time,
        Better::Lower,
        "smallest round trip",
        |r| r.ping()?.rtt.map(|x| us(x.min_us)),
    ),
    fig("rtt.avg", Quantity::Time, Better::Lower, "mean round trip", |r| {
        r.ping()?.rtt.map(|x| us(x.avg_us))
    }),
    fig(
        "rtt.max",
        Quantity::Time,
        Better::Lower,
        "largest round trip",
        |r| r.ping()?.rtt.map(|x| us(x.max_us)),
    ),
    fig(
        "rtt.p50",
        Quantity::Time,
        Better::Lower,
        "median round trip",
        |r| pct(&r.ping()?.percentiles, |p| p.p50_us),
    ),
    fig(
        "rtt.p99",
        Quantity::Time,
        Better::Lower,
        "99th percentile round trip",
        |r| pct(&r.ping()?.percentiles, |p| p.p99_us),
    ),
];

fn dns_time(r: &TestResult, f: fn(&crate::dns::DnsTimes) -> f64) -> Option<f64> {
    r.dns()?.resolution.as_ref().map(|t| us(f(t)))
}

/// The dns kind's own assertion figures.
pub const DNS: [Figure; 10] = [
    fig(
        "loss",
        Quantity::Share,
        Better::Lower,
        "queries with no reply after every try, percent",
        |r| r.dns()?.loss_percent(),
    ),
    fig(
        "resolution.min",
        Quantity::Time,
        Better::Lower,
        "fastest query to its reply",
        |r| dns_time(r, |t| t.min_us),
    ),
    fig(
        "resolution.p50",
        Quantity::Time,
        Better::Lower,
        "median query to its reply",
        |r| dns_time(r, |t| t.p50_us),
    ),
    fig(
        "resolution.p95",
        Quantity::Time,
        Better::Lower,
        "95th percentile query to its reply",
        |r| dns_time(r, |t| t.p95_us),
    ),
    fig(
        "resolution.max",
        Quantity::Time,
        Better::Lower,
        "slowest query to its reply",
        |r| dns_time(r, |t| t.max_us),
    ),
    fig(
        "answers",
        Quantity::Count,
        Better::Neither,
        "records of the asked type in the last answer",
        |r| r.dns()?.answer_count.map(f64::from),
    ),
    fig(
        "rcode",
        Quantity::Count,
        Better::Neither,
        "the last reply's response code (0 NOERROR, 2 SERVFAIL, 3 NXDOMAIN, 5 REFUSED)",
        |r| r.dns()?.rcode_value.map(f64::from),
    ),
    fig(
        "mismatched",
        Quantity::Count,
        Better::Lower,
        "answered queries whose answer did not meet --expect or --expect-pattern",
        |r| r.dns().map(|d| d.mismatched as f64),
    ),
    fig(
        "lost",
        Quantity::Count,
        Better::Lower,
        "queries with no reply after every try",
        |r| r.dns().map(|d| d.lost as f64),
    ),
    fig(
        "retries",
        Quantity::Count,
        Better::Lower,
        "tries past each query's first",
        |r| r.dns().map(|d| d.retries as f64),
    ),
];
/// The ndt7 kind's own assertion figures.
pub const NDT7: [Figure; 7] = [
    fig(
        "download_rate",
        Quantity::Rate,
        Better::Higher,
        "the download subtest's rate, bits/s",
        |r| Some(r.ndt7()?.download.as_ref()?.rate_bps),
    ),
    fig(
        "upload_rate",
        Quantity::Rate,
        Better::Higher,
        "the upload subtest's rate, bits/s",
        |r| Some(r.ndt7()?.upload.as_ref()?.rate_bps),
    ),
    fig(
        "download_retransmission",
        Quantity::Share,
        Better::Lower,
        "bytes the server retransmitted in the download over bytes it sent (its TCP_INFO)",
        |r| r.ndt7()?.download.as_ref()?.retransmission_pct,
    ),
    fig(
        "upload_retransmission",
        Quantity::Share,
        Better::Lower,
        "bytes the client retransmitted in the upload over bytes it sent (its TCP_INFO)",
        |r| r.ndt7()?.upload.as_ref()?.retransmission_pct,
    ),
    fig(
        "min_rtt",
        Quantity::Time,
        Better::Lower,
        "the smallest round trip a sender's TCP saw, either subtest",
        |r| {
            let d = r.ndt7()?;
            [d.download.as_ref(), d.upload.as_ref()]
                .into_iter()
                .flatten()
                .filter_map(|s| s.min_rtt_ms)
                .min_by(f64::total_cmp)
                .map(|ms| ms / 1e3)
        },
    ),
    fig(
        "download_bytes",
        Quantity::Bytes,
        Better::Higher,
        "payload bytes the download moved",
        |r| Some(r.ndt7()?.download.as_ref()?.bytes as f64),
    ),
    fig(
        "upload_bytes",
        Quantity::Bytes,
        Better::Higher,
        "payload bytes the upload moved",
        |r| Some(r.ndt7()?.upload.as_ref()?.bytes as f64),
    ),
];
/// The http kind's own assertion figures: times are medians over the
/// requests that completed (each request's sum over its redirects), the
/// rest the last request's.
pub const HTTP: [Figure; 12] = [
    fig("dns", Quantity::Time, Better::Lower, "name resolution", |r| {
        r.http()?.median_ms(|h| h.dns_ms).map(|v| v / 1e3)
    }),
    fig("connect", Quantity::Time, Better::Lower, "TCP connect", |r| {
        r.http()?.median_ms(|h| h.connect_ms).map(|v| v / 1e3)
    }),
    fig("tls", Quantity::Time, Better::Lower, "TLS handshake", |r| {
        r.http()?.median_ms(|h| h.tls_ms).map(|v| v / 1e3)
    }),
    fig(
        "first_byte",
        Quantity::Time,
        Better::Lower,
        "request sent to the response's head",
        |r| r.http()?.median_ms(|h| h.first_byte_ms).map(|v| v / 1e3),
    ),
    fig(
        "transfer",
        Quantity::Time,
        Better::Lower,
        "the response's head to the body's end",
        |r| r.http()?.median_ms(|h| h.transfer_ms).map(|v| v / 1e3),
    ),
    fig(
        "total",
        Quantity::Time,
        Better::Lower,
        "the whole request, redirects included",
        |r| r.http()?.median_total_ms().map(|v| v / 1e3),
    ),
    fig(
        "body_bytes",
        Quantity::Bytes,
        Better::Neither,
        "body bytes read of the last response",
        |r| r.http()?.last_hop().map(|h| h.body_bytes as f64),
    ),
    fig(
        "status",
        Quantity::Count,
        Better::Neither,
        "the last response's status code",
        |r| r.http()?.last_hop()?.status.map(f64::from),
    ),
    fig(
        "matched",
        Quantity::Count,
        Better::Higher,
        "1 when every request's final response passed the status and body checks, else 0",
        |r| {
            let h = r.http()?;
            Some(f64::from(u8::from(
                h.matched == h.exchanges.len() as u64 && h.matched > 0,
            )))
        },
    ),
    fig(
        "redirects",
        Quantity::Count,
        Better::Neither,
        "redirects the last request followed",
        |r| r.http()?.exchanges.last().map(|e| e.redirects() as f64),
    ),
    fig(
        "cert_days_left",
        Quantity::Count,
        Better::Higher,
        "days until the first certificate of the chain expires (https)",
        |r| r.http()?.tls().map(|t| t.chain_days_left),
    ),
    fig(
        "chain_valid",
        Quantity::Count,
        Better::Higher,
        "1 when the certificate chain verified, else 0 (https)",
        |r| r.http()?.tls().map(|t| f64::from(u8::from(t.chain_valid))),
    ),
];

/// The tls kind's own assertion figures.
pub const TLS: [Figure; 4] = [
    fig(
        "handshake",
        Quantity::Time,
        Better::Lower,
        "the TLS handshake",
        |r| r.tls()?.handshake_ms.map(|v| v / 1e3),
    ),
    fig(
        "cert_days_left",
        Quantity::Count,
        Better::Higher,
        "days until the first certificate of the chain expires",
        |r| r.tls()?.facts.as_ref().map(|t| t.chain_days_left),
    ),
    fig(
        "chain_valid",
        Quantity::Count,
        Better::Higher,
        "1 when the certificate chain verified, else 0",
        |r| {
            r.tls()?
                .facts
                .as_ref()
                .map(|t| f64::from(u8::from(t.chain_valid)))
        },
    ),
    fig(
        "protocol",
        Quantity::Count,
        Better::Higher,
        "the TLS version agreed, as 1.2 or 1.3",
        |r| {
            r.tls()?.facts.as_ref().and_then(|t| match t.protocol.as_str() {
                "TLSv1.3" => Some(1.3),
                "TLSv1.2" => Some(1.2),
                _ => None,
            })
        },
    ),
];

/// The figures a kind's assertions may name: its own, then the common
/// counts (each kind's `KindSpec::figures` says which are its own).
pub fn assertion_figures(kind: Kind) -> Vec<&'static Figure> {
    kind.figures()
}

/// A kind's own figures followed by the counts every kind has.
pub fn with_common(own: &'static [Figure]) -> Vec<&'static Figure> {
    own.iter().chain(COMMON.iter()).collect()
}

/// The help of `--assert` for a kind: the grammar, and the kind's figures
/// in runs of one quantity, each run followed by its quantity (no full
/// stop at the end, as clap gives a doc comment).
pub fn assert_help(kind: Kind) -> String {
    fn runs(figures: &[&Figure]) -> String {
        let mut out: Vec<String> = Vec::new();
        let mut i = 0;
        while i < figures.len() {
            let q = figures[i].quantity;
            let n = figures[i..].iter().take_while(|f| f.quantity == q).count();
            let names: Vec<&str> = figures[i..i + n].iter().map(|f| f.name).collect();
            let (one, many) = match q {
                Quantity::Rate => ("rate", "rates"),
                Quantity::Share => ("%", "%"),
                Quantity::Time => ("time", "times"),
                Quantity::Bytes => ("size", "sizes"),
                Quantity::Count => ("count", "counts"),
            };
            let label = if n == 1 { one } else { many };
            out.push(format!("{} ({label})", names.join(", ")));
            i += n;
        }
        out.join(", ")
    }
    let all = assertion_figures(kind);
    let common = COMMON.len();
    let (own, shared) = all.split_at(all.len() - common);
    // An example of each quantity the kind's own figures take, then a count.
    let mut examples: Vec<String> = Vec::new();
    for q in [Quantity::Rate, Quantity::Share, Quantity::Time, Quantity::Bytes] {
        if let Some(f) = own.iter().find(|f| f.quantity == q) {
            let value = match q {
                Quantity::Rate => ">= 900Mbit",
                Quantity::Share => "< 0.1%",
                Quantity::Time => "< 5ms",
                Quantity::Bytes => ">= 1500B",
                Quantity::Count => "== 0",
            };
            examples.push(format!("'{} {value}'", f.name));
        }
    }
    examples.push("'errors == 0'".into());
    format!(
        "A pass/fail check on the result (repeatable): FIGURE OP VALUE, the value with its figure's \
         unit, e.g. {}. Any that fails makes the exit status 4. Figures: {}; and {}",
        examples.join(", "),
        runs(own),
        runs(shared)
    )
}
