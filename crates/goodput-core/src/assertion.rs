//! Pass/fail assertions over a result's figures: `goodput >= 900Mbit`,
//! `loss < 0.1%`, `rtt.p99 < 5ms`, `errors == 0`.
//!
//! The grammar, one comparison per assertion:
//!
//! ```text
//! assertion = figure op value
//! figure    = a name from the kind's list (see [`figures`])
//! op        = "<" | "<=" | ">" | ">=" | "==" | "!="
//! value     = number unit      (the unit the figure's quantity takes:
//!                               a rate 900Mbit, 1.5Gbit/s, 100MB/s;
//!                               a share 0.1%; a time 5ms, 250us, 2s;
//!                               bytes 1GiB, 10MB; a count takes none)
//! ```
//!
//! Spaces around the operator are optional. A figure that names no figure
//! of the test's kind, or a value without the unit its figure needs, is an
//! error before the test starts.

use serde::{Deserialize, Serialize};

use crate::result::{Percentiles, TestResult};
use crate::spec::SpecError;
use crate::units::{format_bits_per_second, format_size, ByteRate, ByteSize};

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
    fn name(self) -> &'static str {
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

/// A comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
    /// `==`
    Eq,
    /// `!=`
    Ne,
}

impl Op {
    fn holds(self, a: f64, b: f64) -> bool {
        match self {
            Op::Lt => a < b,
            Op::Le => a <= b,
            Op::Gt => a > b,
            Op::Ge => a >= b,
            Op::Eq => a == b,
            Op::Ne => a != b,
        }
    }
}

/// One assertion as written, split into its parts (the value not yet read:
/// its unit depends on the figure).
#[derive(Debug, Clone, PartialEq)]
pub struct Assertion {
    /// The text as written.
    pub text: String,
    /// The figure's name.
    pub figure: String,
    /// The comparison.
    pub op: Op,
    /// The value as written, with its unit.
    pub value: String,
}

impl std::str::FromStr for Assertion {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let t = text.trim();
        let at = t
            .find(['<', '>', '=', '!'])
            .ok_or_else(|| format!("'{t}' has no comparison (one of < <= > >= == !=)"))?;
        let (figure, rest) = t.split_at(at);
        let (op, value) = [
            ("<=", Op::Le),
            (">=", Op::Ge),
            ("==", Op::Eq),
            ("!=", Op::Ne),
            ("<", Op::Lt),
            (">", Op::Gt),
        ]
        .iter()
        .find_map(|(s, op)| rest.strip_prefix(s).map(|v| (*op, v.trim())))
        .ok_or_else(|| format!("'{t}': unknown comparison (one of < <= > >= == !=)"))?;
        let figure = figure.trim();
        if figure.is_empty()
            || !figure
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '_')
        {
            return Err(format!("'{t}': the figure's name is missing or malformed"));
        }
        if value.is_empty() {
            return Err(format!("'{t}': the value is missing"));
        }
        Ok(Self {
            text: t.to_owned(),
            figure: figure.to_owned(),
            op,
            value: value.to_owned(),
        })
    }
}

impl std::fmt::Display for Assertion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

impl Serialize for Assertion {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

impl<'de> Deserialize<'de> for Assertion {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl schemars::JsonSchema for Assertion {
    fn schema_name() -> String {
        "Assertion".into()
    }
    fn json_schema(_: &mut schemars::gen::SchemaGenerator) -> schemars::schema::Schema {
        schemars::schema::SchemaObject {
            instance_type: Some(schemars::schema::InstanceType::String.into()),
            metadata: Some(Box::new(schemars::schema::Metadata {
                description: Some(
                    "a figure, a comparison and a value with its unit, such as \"goodput >= 900Mbit\", \
                     \"loss < 0.1%\", \"rtt.p99 < 5ms\" or \"errors == 0\""
                        .into(),
                ),
                ..Default::default()
            })),
            ..Default::default()
        }
        .into()
    }
}

/// How one assertion came out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct AssertionOutcome {
    /// The assertion as written.
    pub expression: String,
    /// The figure's value in this result, in its base unit (bits/s,
    /// percent, seconds, bytes, or a count); absent when the run did not
    /// measure it (the assertion then fails).
    pub measured: Option<f64>,
    /// The same, in words with its unit.
    pub measured_text: String,
    /// Whether it held.
    pub passed: bool,
}

/// A figure one kind reports.
pub struct Figure {
    /// Its name in assertions.
    pub name: &'static str,
    /// What it measures.
    pub quantity: Quantity,
    /// What it is, for `--help` and the README.
    pub about: &'static str,
    read: fn(&TestResult) -> Option<f64>,
}

const fn fig(
    name: &'static str,
    quantity: Quantity,
    about: &'static str,
    read: fn(&TestResult) -> Option<f64>,
) -> Figure {
    Figure {
        name,
        quantity,
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
        "connections (sessions, streams) that failed",
        |r| Some(r.summary.failures() as f64),
    ),
    fig(
        "successful",
        Quantity::Count,
        "connections (sessions, streams) that succeeded",
        |r| Some(r.summary.successful as f64),
    ),
    fig("aborted", Quantity::Count, "connections aborted by a stop", |r| {
        Some(r.summary.aborted as f64)
    }),
];

const TCP: [Figure; 6] = [
    fig(
        "goodput",
        Quantity::Rate,
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
    fig("sent", Quantity::Bytes, "pattern bytes sent", |r| {
        Some(r.summary.sent_bytes as f64)
    }),
    fig("received", Quantity::Bytes, "pattern bytes received", |r| {
        Some(r.summary.received_bytes as f64)
    }),
    fig(
        "fairness",
        Quantity::Count,
        "Jain's fairness index of the connections' good-put (1 = equal)",
        |r| r.summary.fairness,
    ),
];

const UDP: [Figure; 6] = [
    fig(
        "goodput",
        Quantity::Rate,
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
        "datagrams lost, percent of those sent",
        |r| r.media().map(|m| m.total.loss_percent),
    ),
    fig("jitter", Quantity::Time, "RFC 3550 interarrival jitter", |r| {
        r.media().map(|m| us(m.total.jitter_us))
    }),
    fig("frames_dropped", Quantity::Count, "frames played short", |r| {
        r.media().map(|m| m.total.frames_dropped as f64)
    }),
    fig(
        "late",
        Quantity::Count,
        "datagrams that came after their frame was played",
        |r| r.media().map(|m| m.total.late as f64),
    ),
    fig(
        "reordered",
        Quantity::Count,
        "RFC 4737 reordered datagrams",
        |r| r.media().map(|m| m.total.reordered as f64),
    ),
];

const STAMP: [Figure; 8] = [
    fig(
        "loss",
        Quantity::Share,
        "packets with no reply, percent of those sent",
        |r| {
            let t = &r.stamp()?.total;
            (t.sent > 0).then(|| t.lost as f64 * 100.0 / t.sent as f64)
        },
    ),
    fig("rtt.min", Quantity::Time, "smallest round-trip delay", |r| {
        r.stamp()?.total.rtt.as_ref().map(|d| us(d.min_us))
    }),
    fig("rtt.median", Quantity::Time, "median round-trip delay", |r| {
        r.stamp()?.total.rtt.as_ref().map(|d| us(d.median_us))
    }),
    fig("rtt.mean", Quantity::Time, "mean round-trip delay", |r| {
        r.stamp()?.total.rtt.as_ref().map(|d| us(d.mean_us))
    }),
    fig(
        "rtt.p90",
        Quantity::Time,
        "90th percentile round-trip delay",
        |r| r.stamp()?.total.rtt.as_ref().map(|d| us(d.p90_us)),
    ),
    fig(
        "rtt.p99",
        Quantity::Time,
        "99th percentile round-trip delay",
        |r| r.stamp()?.total.rtt.as_ref().map(|d| us(d.p99_us)),
    ),
    fig("rtt.max", Quantity::Time, "largest round-trip delay", |r| {
        r.stamp()?.total.rtt.as_ref().map(|d| us(d.max_us))
    }),
    fig("duplicates", Quantity::Count, "replies beyond the first", |r| {
        r.stamp().map(|s| s.total.duplicates as f64)
    }),
];

const ECHO: [Figure; 8] = [
    fig(
        "rtt.min",
        Quantity::Time,
        "smallest round trip of a message",
        |r| pct(&r.echo()?.round_trip, |p| p.min_us),
    ),
    fig("rtt.p50", Quantity::Time, "median round trip", |r| {
        pct(&r.echo()?.round_trip, |p| p.p50_us)
    }),
    fig("rtt.p90", Quantity::Time, "90th percentile round trip", |r| {
        pct(&r.echo()?.round_trip, |p| p.p90_us)
    }),
    fig("rtt.p99", Quantity::Time, "99th percentile round trip", |r| {
        pct(&r.echo()?.round_trip, |p| p.p99_us)
    }),
    fig("rtt.max", Quantity::Time, "largest round trip", |r| {
        pct(&r.echo()?.round_trip, |p| p.max_us)
    }),
    fig(
        "connect.p99",
        Quantity::Time,
        "99th percentile connect time",
        |r| pct(&r.echo()?.connect_time, |p| p.p99_us),
    ),
    fig(
        "mismatched",
        Quantity::Count,
        "echoes that differed from what was sent",
        |r| r.echo().map(|e| e.mismatched as f64),
    ),
    fig(
        "missing",
        Quantity::Count,
        "messages whose echo never came",
        |r| r.echo().map(|e| e.missing as f64),
    ),
];

const QUIC: [Figure; 5] = [
    fig(
        "goodput",
        Quantity::Rate,
        "upload and download bits per second",
        |r| {
            let q = r.quic()?;
            (q.duration_s > 0.0).then(|| (q.upload_bytes + q.download_bytes) as f64 * 8.0 / q.duration_s)
        },
    ),
    fig(
        "rps",
        Quantity::Count,
        "requests (transactions) per second",
        |r| {
            let q = r.quic()?;
            Some(q.requests.as_ref().map_or(q.tps, |x| x.per_second))
        },
    ),
    fig(
        "latency.p50",
        Quantity::Time,
        "median request latency (--rps)",
        |r| pct(&r.quic()?.requests.as_ref()?.latency, |p| p.p50_us),
    ),
    fig(
        "latency.p99",
        Quantity::Time,
        "99th percentile request latency (--rps)",
        |r| pct(&r.quic()?.requests.as_ref()?.latency, |p| p.p99_us),
    ),
    fig("failed_streams", Quantity::Count, "streams that failed", |r| {
        r.quic().map(|q| q.failed_streams as f64)
    }),
];

const IPERF3: [Figure; 4] = [
    fig(
        "goodput",
        Quantity::Rate,
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
        "TCP retransmits of this end's sending streams",
        |r| {
            let d = r.iperf3()?;
            Some(d.streams.iter().filter_map(|s| s.retransmits).sum::<u64>() as f64)
        },
    ),
    fig("loss", Quantity::Share, "UDP datagrams lost, percent", |r| {
        let d = r.iperf3()?;
        let (lost, total) = d
            .streams
            .iter()
            .filter_map(|s| s.udp.as_ref())
            .fold((0u64, 0u64), |(l, t), u| (l + u.lost, t + u.packets));
        (total > 0).then(|| lost as f64 * 100.0 / total as f64)
    }),
    fig("jitter", Quantity::Time, "UDP jitter, mean over streams", |r| {
        let d = r.iperf3()?;
        let j: Vec<f64> = d
            .streams
            .iter()
            .filter_map(|s| s.udp.as_ref())
            .map(|u| u.jitter_ms)
            .collect();
        (!j.is_empty()).then(|| j.iter().sum::<f64>() / j.len() as f64 / 1e3)
    }),
];

const TTCP: [Figure; 2] = [
    fig(
        "goodput",
        Quantity::Rate,
        "bits moved per second (ttcp's real time)",
        |r| {
            let t = r.ttcp()?;
            (t.real_s > 0.0).then(|| t.bytes as f64 * 8.0 / t.real_s)
        },
    ),
    fig("bytes", Quantity::Bytes, "payload bytes moved", |r| {
        r.ttcp().map(|t| t.bytes as f64)
    }),
];

const TRACE: [Figure; 3] = [
    fig(
        "reached",
        Quantity::Count,
        "1 when the destination answered, else 0",
        |r| r.trace().map(|t| f64::from(u8::from(t.reached))),
    ),
    fig(
        "hops",
        Quantity::Count,
        "hops to the destination (when reached)",
        |r| r.trace()?.hop_count.map(f64::from),
    ),
    fig("pmtu", Quantity::Bytes, "path MTU found (with --pmtu)", |r| {
        r.trace()?.pmtu.map(f64::from)
    }),
];

const PING: [Figure; 6] = [
    fig("loss", Quantity::Share, "requests with no reply, percent", |r| {
        r.ping().map(|p| p.loss_percent)
    }),
    fig("rtt.min", Quantity::Time, "smallest round trip", |r| {
        r.ping()?.rtt.map(|x| us(x.min_us))
    }),
    fig("rtt.avg", Quantity::Time, "mean round trip", |r| {
        r.ping()?.rtt.map(|x| us(x.avg_us))
    }),
    fig("rtt.max", Quantity::Time, "largest round trip", |r| {
        r.ping()?.rtt.map(|x| us(x.max_us))
    }),
    fig("rtt.p50", Quantity::Time, "median round trip", |r| {
        pct(&r.ping()?.percentiles, |p| p.p50_us)
    }),
    fig("rtt.p99", Quantity::Time, "99th percentile round trip", |r| {
        pct(&r.ping()?.percentiles, |p| p.p99_us)
    }),
];

/// The figures a kind's assertions may name: its own, then the common
/// counts.
pub fn figures(kind: &str) -> Vec<&'static Figure> {
    let own: &'static [Figure] = match kind {
        "tcp" => &TCP,
        "udp" => &UDP,
        "stamp" => &STAMP,
        "echo" => &ECHO,
        "quic" => &QUIC,
        "iperf3" => &IPERF3,
        "ttcp" => &TTCP,
        "trace" => &TRACE,
        "ping" => &PING,
        _ => &[],
    };
    own.iter().chain(COMMON.iter()).collect()
}

/// Reads a value as written for `quantity`, in the quantity's base unit;
/// the unit is required (none for a count).
pub(crate) fn value_of(text: &str, quantity: Quantity) -> Result<f64, String> {
    let number_end = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-' || c == '+' || c == 'e'))
        .unwrap_or(text.len());
    let (number, unit) = (text[..number_end].trim(), text[number_end..].trim());
    let need = || format!("'{text}' needs {}", quantity.name());
    match quantity {
        Quantity::Count => match unit.is_empty() {
            true => number.parse::<f64>().map_err(|_| need()),
            false => Err(need()),
        },
        Quantity::Share => match unit {
            "%" => number.parse::<f64>().map_err(|_| need()),
            _ => Err(need()),
        },
        Quantity::Time => {
            let scale = match unit {
                "ns" => 1e-9,
                "us" | "µs" => 1e-6,
                "ms" => 1e-3,
                "s" => 1.0,
                _ => return Err(need()),
            };
            number.parse::<f64>().map(|n| n * scale).map_err(|_| need())
        }
        Quantity::Rate => {
            if unit.is_empty() {
                return Err(need());
            }
            let unit = unit.strip_suffix("/s").map_or(unit.to_owned(), |u| {
                // "Mbit/s" reads as "Mbit"; "MB/s" as "MB/s".
                if u.ends_with("bit") {
                    u.to_owned()
                } else {
                    format!("{u}/s")
                }
            });
            format!("{number}{unit}")
                .parse::<ByteRate>()
                .map(|r| r.0 as f64 * 8.0)
                .map_err(|_| need())
        }
        Quantity::Bytes => {
            if unit.is_empty() {
                return Err(need());
            }
            format!("{number}{unit}")
                .parse::<ByteSize>()
                .map(|b| b.0 as f64)
                .map_err(|_| need())
        }
    }
}

/// Checks assertions against a kind's figures and units before a test
/// starts (field `assert`).
pub fn check(kind: &str, assertions: &[Assertion]) -> Result<(), SpecError> {
    for a in assertions {
        figure_of(kind, a)?;
    }
    Ok(())
}

fn figure_of(kind: &str, a: &Assertion) -> Result<(&'static Figure, f64), SpecError> {
    let all = figures(kind);
    let Some(f) = all.iter().find(|f| f.name == a.figure) else {
        let names: Vec<&str> = all.iter().map(|f| f.name).collect();
        return Err(SpecError::new(
            "assert",
            format!(
                "'{a}': unknown figure '{}'; the {kind} kind's figures are {}",
                a.figure,
                names.join(", ")
            ),
        ));
    };
    let v = value_of(&a.value, f.quantity).map_err(|e| SpecError::new("assert", format!("'{a}': {e}")))?;
    Ok((f, v))
}

/// Evaluates checked assertions against a result of `kind`.
pub fn evaluate(kind: &str, assertions: &[Assertion], result: &TestResult) -> Vec<AssertionOutcome> {
    assertions
        .iter()
        .map(|a| match figure_of(kind, a) {
            Ok((f, want)) => {
                let measured = (f.read)(result);
                AssertionOutcome {
                    expression: a.text.clone(),
                    measured,
                    measured_text: measured.map_or_else(|| "not measured".into(), |v| f.quantity.show(v)),
                    passed: measured.is_some_and(|v| a.op.holds(v, want)),
                }
            }
            Err(e) => AssertionOutcome {
                expression: a.text.clone(),
                measured: None,
                measured_text: e.message,
                passed: false,
            },
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(t: &str) -> Assertion {
        t.parse().unwrap()
    }

    #[test]
    fn the_grammar_reads_each_comparison_with_or_without_spaces() {
        for (text, figure, op, value) in [
            ("goodput >= 900Mbit", "goodput", Op::Ge, "900Mbit"),
            ("loss<0.1%", "loss", Op::Lt, "0.1%"),
            ("rtt.p99 <= 5ms", "rtt.p99", Op::Le, "5ms"),
            ("errors == 0", "errors", Op::Eq, "0"),
            ("aborted != 0", "aborted", Op::Ne, "0"),
            ("sent > 1GiB", "sent", Op::Gt, "1GiB"),
        ] {
            let x = a(text);
            assert_eq!((x.figure.as_str(), x.op, x.value.as_str()), (figure, op, value));
        }
        for bad in [
            "goodput",
            "goodput >= ",
            ">= 5",
            "good put >= 5Mbit",
            "loss => 1%",
        ] {
            assert!(bad.parse::<Assertion>().is_err(), "{bad}");
        }
    }

    #[test]
    fn values_need_their_figures_unit() {
        assert_eq!(value_of("900Mbit", Quantity::Rate), Ok(900e6));
        assert_eq!(value_of("1.5Gbit/s", Quantity::Rate), Ok(1.5e9));
        assert_eq!(value_of("100MB/s", Quantity::Rate), Ok(800e6));
        assert_eq!(value_of("0.1%", Quantity::Share), Ok(0.1));
        assert_eq!(value_of("250us", Quantity::Time), Ok(250e-6));
        assert_eq!(value_of("5ms", Quantity::Time), Ok(5e-3));
        assert_eq!(value_of("1GiB", Quantity::Bytes), Ok(1073741824.0));
        assert_eq!(value_of("3", Quantity::Count), Ok(3.0));
        for (v, q) in [
            ("900", Quantity::Rate),
            ("0.1", Quantity::Share),
            ("5", Quantity::Time),
            ("5 parsecs", Quantity::Time),
            ("3%", Quantity::Count),
        ] {
            assert!(value_of(v, q).unwrap_err().contains("needs"), "{v}");
        }
    }

    #[test]
    fn an_unknown_figure_lists_the_kinds_figures() {
        let e = check("tcp", &[a("gooput >= 1Gbit")]).unwrap_err();
        assert_eq!(e.field, "assert");
        assert!(e.message.contains("unknown figure 'gooput'"), "{}", e.message);
        assert!(e.message.contains("goodput, goodput.up"), "{}", e.message);
        let e = check("stamp", &[a("rtt.p99 < 5")]).unwrap_err();
        assert!(e.message.contains("needs a time"), "{}", e.message);
        assert!(check("tcp", &[a("loss < 1%")]).is_err(), "tcp has no loss");
        for kind in ["tcp", "udp", "stamp", "echo", "quic", "iperf3", "ttcp"] {
            assert!(check(kind, &[a("errors == 0")]).is_ok());
        }
    }
}
