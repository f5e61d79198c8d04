//! `goodput report`: one self-contained HTML file from result documents
//! (their headline figures, charts of each run's own clock, histograms
//! and percentile tables), and a comparison of each run with a baseline.
//! The charts are the dashboard's ([`crate::chart`]), inline SVG, so the
//! file needs no script, no font and no network; each chart is also
//! returned on its own for a caller that writes image files.

use crate::chart::{self, escape, palette, Band, Chart, Point, Series, Style};
use crate::intervals::{IntervalDigest, Measure};
use goodput_core::result::{
    DelayStats, EndReason, IpdvStats, OneWayStats, OwampDetail, Percentiles, StampStats, TestKind, TestResult,
};
use goodput_core::stamp::stats::decode_histogram;
use std::fmt::Write as _;

/// One result document and the name it is shown under (its file's name).
#[derive(Debug, Clone)]
pub struct ReportInput {
    /// Shown as the run's title.
    pub label: String,
    /// The document (its intervals are drawn from `intervals`).
    pub result: TestResult,
    /// The document's intervals, bucketed for the charts.
    pub intervals: IntervalDigest,
}

impl ReportInput {
    /// A document to report, its intervals moved into the digest.
    pub fn new(label: String, mut result: TestResult) -> Self {
        let intervals = IntervalDigest::of(&std::mem::take(&mut result.intervals));
        Self {
            label,
            result,
            intervals,
        }
    }
}

/// A chart of the report, for writing on its own.
#[derive(Debug, Clone)]
pub struct ReportChart {
    /// A file-name stem: the run's number and what is drawn (`1-rates`).
    pub name: String,
    /// The chart as an `<svg>` element.
    pub svg: String,
}

/// The report: the HTML page and its charts.
#[derive(Debug, Clone)]
pub struct Report {
    /// A whole HTML document.
    pub html: String,
    /// Every chart in the page, in order.
    pub charts: Vec<ReportChart>,
}

/// Which way a figure is better, for a comparison: the catalogue's.
pub use goodput_core::catalogue::Better;

/// A headline figure of a run.
#[derive(Debug, Clone, PartialEq)]
pub struct Figure {
    /// What it is.
    pub name: &'static str,
    /// Its value, in `unit`.
    pub value: f64,
    /// Its unit ("" for a count).
    pub unit: &'static str,
    /// Which way is better.
    pub better: Better,
}

fn fig(name: &'static str, value: f64, unit: &'static str, better: Better) -> Figure {
    Figure {
        name,
        value,
        unit,
        better,
    }
}

const MBIT: f64 = 8.0 / 1e6;

/// The headline figures of a result: those its console summary leads
/// with, in the units shown there (Mbit/s, %, ms, counts).
pub fn headline_figures(r: &TestResult) -> Vec<Figure> {
    use Better::{Higher, Lower, Neither};
    let mut v = Vec::new();
    let s = &r.summary;
    match r.kind {
        TestKind::TcpClient
        | TestKind::TcpServer
        | TestKind::Iperf3Client
        | TestKind::Iperf3Server
        | TestKind::TtcpTransmit
        | TestKind::TtcpReceive
        | TestKind::QuicClient => {
            v.push(fig("Send rate", s.send_bytes_per_second * MBIT, "Mbit/s", Higher));
            v.push(fig(
                "Receive rate",
                s.recv_bytes_per_second * MBIT,
                "Mbit/s",
                Higher,
            ));
            v.push(fig("Bytes sent", s.sent_bytes as f64, "B", Neither));
            v.push(fig("Bytes received", s.received_bytes as f64, "B", Neither));
            v.push(fig("Duration", s.duration_s, "s", Neither));
            if r.kind != TestKind::QuicClient {
                v.push(fig("Connections succeeded", s.successful as f64, "", Higher));
                v.push(fig("Network errors", s.network_errors as f64, "", Lower));
                v.push(fig("Data errors", s.data_errors as f64, "", Lower));
            }
            if let Some(f) = s.fairness {
                v.push(fig("Fairness (Jain)", f, "", Higher));
            }
            let retrans: u64 = r
                .connections
                .iter()
                .filter_map(|c| c.tcp_info.as_ref())
                .map(|t| u64::from(t.total_retrans_segments))
                .sum();
            if r.connections.iter().any(|c| c.tcp_info.is_some()) {
                v.push(fig("Retransmitted segments", retrans as f64, "", Lower));
            }
            if let Some(q) = r.quic() {
                v.push(fig("Requests per second", q.tps, "/s", Higher));
                v.push(fig("Failed streams", q.failed_streams as f64, "", Lower));
                if let Some(p) = q.requests.as_ref().and_then(|q| q.latency.as_ref()) {
                    percentile_figures(&mut v, "Request latency", p);
                }
                if let Some(p) = q.handshakes.as_ref().and_then(|h| h.time.as_ref()) {
                    v.push(fig("Handshake time median", p.p50_us / 1e3, "ms", Lower));
                }
            }
        }
        TestKind::StampSender => {
            if let Some(st) = r.stamp() {
                stamp_figures(&mut v, &st.total);
            }
        }
        TestKind::OwampClient => {
            if let Some(o) = r.owamp() {
                owamp_figures(&mut v, o);
            }
        }
        TestKind::DnsClient => {
            if let Some(d) = r.dns() {
                dns_figures(&mut v, d);
            }
        }
        TestKind::TwampClient => {
            if let Some(t) = r.twamp() {
                stamp_figures(&mut v, &t.stats);
                if let Some(p) = &t.processing {
                    v.push(fig("Reflector time max", p.max_us / 1e3, "ms", Lower));
                }
            }
        }
        TestKind::MediaClient => {
            if let Some(m) = r.media() {
                let t = &m.total;
                v.push(fig(
                    "Effective bitrate",
                    m.effective_bits_per_second / 1e6,
                    "Mbit/s",
                    Higher,
                ));
                v.push(fig("Datagrams received", t.received as f64, "", Neither));
                v.push(fig("Lost", t.loss_percent, "%", Lower));
                v.push(fig("Reordered", t.reordered_percent, "%", Lower));
                v.push(fig("Duplicates", t.duplicates as f64, "", Lower));
                v.push(fig("Jitter", t.jitter_us / 1e3, "ms", Lower));
                v.push(fig("Frames completed", t.frames_completed as f64, "", Higher));
                v.push(fig("Frames dropped", t.frames_dropped as f64, "", Lower));
                v.push(fig("Frames repeated", t.frames_repeated as f64, "", Lower));
                v.push(fig("Corrupt", t.corrupt as f64, "", Lower));
            }
        }
        TestKind::EchoClient => {
            if let Some(e) = r.echo() {
                v.push(fig("Connections established", e.established as f64, "", Higher));
                v.push(fig("Connections refused", e.refused as f64, "", Lower));
                v.push(fig("Connections reset", e.reset as f64, "", Lower));
                v.push(fig("Messages echoed", e.echoed as f64, "", Higher));
                v.push(fig("Mismatched", e.mismatched as f64, "", Lower));
                v.push(fig("Missing", e.missing as f64, "", Lower));
                if let Some(p) = &e.round_trip {
                    percentile_figures(&mut v, "Round trip", p);
                }
                if let Some(p) = &e.connect_time {
                    v.push(fig("Connect time median", p.p50_us / 1e3, "ms", Lower));
                }
            }
        }
        TestKind::Ndt7Client => {
            if let Some(d) = r.ndt7() {
                for (name, f) in [("Download", &d.download), ("Upload", &d.upload)] {
                    let Some(f) = f else { continue };
                    let (rate, rtt, retrans) = match name {
                        "Download" => (
                            "Download rate",
                            "Download min round trip",
                            "Download retransmitted",
                        ),
                        _ => ("Upload rate", "Upload min round trip", "Upload retransmitted"),
                    };
                    v.push(fig(rate, f.rate_bps / 1e6, "Mbit/s", Higher));
                    if let Some(m) = f.min_rtt_ms {
                        v.push(fig(rtt, m, "ms", Lower));
                    }
                    if let Some(p) = f.retransmission_pct {
                        v.push(fig(retrans, p, "%", Lower));
                    }
                }
            }
        }
        TestKind::Trace => {
            if let Some(t) = r.trace() {
                if let Some(h) = t.hop_count {
                    v.push(fig("Hops", f64::from(h), "", Neither));
                }
                if let Some(b) = t.back_hops {
                    v.push(fig("Hops back", f64::from(b), "", Neither));
                }
                if let Some(p) = t.pmtu {
                    v.push(fig("Path MTU", f64::from(p), "B", Higher));
                }
                v.push(fig("Reached", if t.reached { 1.0 } else { 0.0 }, "", Higher));
            }
        }
        TestKind::Ping => {
            if let Some(p) = r.ping() {
                v.push(fig("Sent", p.sent as f64, "", Neither));
                v.push(fig("Lost", p.loss_percent, "%", Lower));
                if let Some(t) = &p.rtt {
                    v.push(fig("RTT min", t.min_us / 1e3, "ms", Lower));
                    v.push(fig("RTT avg", t.avg_us / 1e3, "ms", Lower));
                    v.push(fig("RTT max", t.max_us / 1e3, "ms", Lower));
                }
                if let Some(q) = &p.percentiles {
                    v.push(fig("RTT p99", q.p99_us / 1e3, "ms", Lower));
                }
            }
        }
        TestKind::HttpClient => {
            if let Some(h) = r.http() {
                for (name, m) in [
                    ("DNS", h.median_ms(|x| x.dns_ms)),
                    ("Connect", h.median_ms(|x| x.connect_ms)),
                    ("TLS", h.median_ms(|x| x.tls_ms)),
                    ("First byte", h.median_ms(|x| x.first_byte_ms)),
                    ("Transfer", h.median_ms(|x| x.transfer_ms)),
                    ("Total", h.median_total_ms()),
                ] {
                    if let Some(m) = m {
                        v.push(fig(name, m, "ms", Lower));
                    }
                }
                if let Some(s) = h.last_hop().and_then(|x| x.status) {
                    v.push(fig("Status", f64::from(s), "", Neither));
                }
                v.push(fig("Matched", h.matched as f64, "", Higher));
                if let Some(t) = h.tls() {
                    v.push(fig("Certificate days left", t.chain_days_left, "", Higher));
                }
            }
        }
        TestKind::TlsClient => {
            if let Some(t) = r.tls() {
                if let Some(m) = t.handshake_ms {
                    v.push(fig("Handshake", m, "ms", Lower));
                }
                if let Some(f) = &t.facts {
                    v.push(fig("Certificate days left", f.chain_days_left, "", Higher));
                    v.push(fig(
                        "Chain valid",
                        if f.chain_valid { 1.0 } else { 0.0 },
                        "",
                        Higher,
                    ));
                }
            }
        }
    }
    v
}

fn percentile_figures(v: &mut Vec<Figure>, what: &'static str, p: &Percentiles) {
    let names: [(&'static str, f64); 4] = match what {
        "Request latency" => [
            ("Request latency p50", p.p50_us),
            ("Request latency p90", p.p90_us),
            ("Request latency p99", p.p99_us),
            ("Request latency max", p.max_us),
        ],
        _ => [
            ("Round trip p50", p.p50_us),
            ("Round trip p90", p.p90_us),
            ("Round trip p99", p.p99_us),
            ("Round trip max", p.max_us),
        ],
    };
    for (n, us) in names {
        v.push(fig(n, us / 1e3, "ms", Better::Lower));
    }
}

/// The names of one OWAMP direction's headline figures: they are
/// `&'static` so that runs compare by name.
struct OneWayNames {
    sent: &'static str,
    lost: &'static str,
    duplicates: &'static str,
    reordered: &'static str,
    /// Min, median, max: synchronised clocks, then unsynchronised.
    delay: [[&'static str; 3]; 2],
    jitter: &'static str,
    hops: &'static str,
}

const TO_SERVER: OneWayNames = OneWayNames {
    sent: "To server: packets sent",
    lost: "To server: lost",
    duplicates: "To server: duplicates",
    reordered: "To server: reordered",
    delay: [
        [
            "To server: delay min",
            "To server: delay median",
            "To server: delay max",
        ],
        [
            "To server: delay min (unsync)",
            "To server: delay median (unsync)",
            "To server: delay max (unsync)",
        ],
    ],
    jitter: "To server: jitter",
    hops: "To server: hops",
};

const FROM_SERVER: OneWayNames = OneWayNames {
    sent: "From server: packets sent",
    lost: "From server: lost",
    duplicates: "From server: duplicates",
    reordered: "From server: reordered",
    delay: [
        [
            "From server: delay min",
            "From server: delay median",
            "From server: delay max",
        ],
        [
            "From server: delay min (unsync)",
            "From server: delay median (unsync)",
            "From server: delay max (unsync)",
        ],
    ],
    jitter: "From server: jitter",
    hops: "From server: hops",
};

fn owamp_figures(v: &mut Vec<Figure>, o: &OwampDetail) {
    use Better::{Lower, Neither};
    for (n, d) in [(&TO_SERVER, &o.to), (&FROM_SERVER, &o.from)] {
        let Some(d) = d else { continue };
        let pct = |x: u64| match d.sent {
            0 => 0.0,
            sent => x as f64 * 100.0 / sent as f64,
        };
        v.push(fig(n.sent, d.sent as f64, "", Neither));
        v.push(fig(n.lost, pct(d.lost), "%", Lower));
        v.push(fig(n.duplicates, d.duplicates as f64, "", Lower));
        v.push(fig(n.reordered, d.reordered_percent, "%", Lower));
        if let Some(w) = &d.delay {
            // Unsynchronised clocks make one-way delay a relative figure:
            // its name says so, so it is never compared with an exact one.
            let [min, median, max] = n.delay[usize::from(!w.synchronized)];
            v.push(fig(min, w.min_us / 1e3, "ms", Lower));
            v.push(fig(median, w.median_us / 1e3, "ms", Lower));
            v.push(fig(max, w.max_us / 1e3, "ms", Lower));
            v.push(fig(n.jitter, w.jitter_us / 1e3, "ms", Lower));
        }
        if let Some(h) = &d.hops {
            v.push(fig(n.hops, f64::from(h.max), "", Neither));
        }
    }
}

fn dns_figures(v: &mut Vec<Figure>, d: &goodput_core::dns::DnsDetail) {
    use Better::{Higher, Lower, Neither};
    if let Some(t) = &d.resolution {
        v.push(fig("Resolution min", t.min_us / 1e3, "ms", Lower));
        v.push(fig("Resolution median", t.p50_us / 1e3, "ms", Lower));
        v.push(fig("Resolution p95", t.p95_us / 1e3, "ms", Lower));
        v.push(fig("Resolution max", t.max_us / 1e3, "ms", Lower));
    }
    v.push(fig("Queries answered", d.answered as f64, "", Higher));
    v.push(fig("Queries lost", d.lost as f64, "", Lower));
    v.push(fig("Retries", d.retries as f64, "", Lower));
    if let Some(n) = d.answer_count {
        v.push(fig("Answer records", f64::from(n), "", Neither));
    }
    if let Some(c) = d.rcode_value {
        v.push(fig("Response code", f64::from(c), "", Neither));
    }
    if d.expected.is_some() {
        v.push(fig("Answers not as expected", d.mismatched as f64, "", Lower));
    }
    v.push(fig("Malformed replies", d.malformed as f64, "", Lower));
}

fn stamp_figures(v: &mut Vec<Figure>, t: &StampStats) {
    use Better::{Lower, Neither};
    let pct = |n: u64| {
        if t.sent == 0 {
            0.0
        } else {
            n as f64 * 100.0 / t.sent as f64
        }
    };
    v.push(fig("Packets sent", t.sent as f64, "", Neither));
    v.push(fig("Lost", pct(t.lost), "%", Lower));
    if let Some(f) = t.lost_forward {
        v.push(fig("Lost forward", pct(f), "%", Lower));
    }
    if let Some(b) = t.lost_backward {
        v.push(fig("Lost backward", pct(b), "%", Lower));
    }
    v.push(fig("Duplicates", t.duplicates as f64, "", Lower));
    v.push(fig("Reordered", t.reordered_percent, "%", Lower));
    if let Some(d) = &t.rtt {
        v.push(fig("RTT min", d.min_us / 1e3, "ms", Lower));
        v.push(fig("RTT median", d.median_us / 1e3, "ms", Lower));
        v.push(fig("RTT p99", d.p99_us / 1e3, "ms", Lower));
        v.push(fig("RTT max", d.max_us / 1e3, "ms", Lower));
    }
    if let Some(f) = &t.forward {
        v.push(fig("Forward delay median", f.median_us / 1e3, "ms", Lower));
        v.push(fig("Forward jitter", f.jitter_us / 1e3, "ms", Lower));
    }
    if let Some(b) = &t.backward {
        v.push(fig("Backward delay median", b.median_us / 1e3, "ms", Lower));
        v.push(fig("Backward jitter", b.jitter_us / 1e3, "ms", Lower));
    }
}

/// A figure's value as text in its unit.
fn show(value: f64, unit: &str) -> String {
    let v = if unit.is_empty() || unit == "B" {
        if value.fract() == 0.0 && value.abs() < 1e15 {
            format!("{}", value as i64)
        } else {
            format!("{value:.3}")
        }
    } else if value.abs() >= 100.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.3}")
    };
    if unit.is_empty() {
        v
    } else {
        format!("{v} {unit}")
    }
}

/// The difference of a figure from its baseline: the signed change in its
/// unit, the change in percent of the baseline (none from a zero), and
/// whether it is better, worse or the same.
pub fn difference(base: &Figure, run: &Figure) -> (f64, Option<f64>, &'static str) {
    let d = run.value - base.value;
    let pct = (base.value != 0.0).then(|| d / base.value.abs() * 100.0);
    let verdict = if d == 0.0 {
        "same"
    } else {
        match (base.better, d > 0.0) {
            (Better::Neither, _) => "changed",
            (Better::Higher, true) | (Better::Lower, false) => "better",
            _ => "worse",
        }
    };
    (d, pct, verdict)
}

const CSS: &str = "
body{font-family:sans-serif;margin:0;color:#222;background:#fafafa}
header{background:#1f3b57;color:#fff;padding:8px 16px}
main{padding:12px 16px}
h2{border-bottom:1px solid #ccc;padding-bottom:4px}
table{border-collapse:collapse;background:#fff;margin:6px 0}
td,th{padding:3px 8px;font-size:13px;border:1px solid #ddd;text-align:left}
td.num{text-align:right;font-variant-numeric:tabular-nums}
.better{color:#006c4f}
.worse{color:#a33;font-weight:bold}
.charts svg{background:#fff;border:1px solid #ddd;margin:6px 0;display:block}
.note{color:#555;font-size:13px}
.warn{color:#a33}
";

/// Builds the report of `runs`, each compared with `baseline` when given.
pub fn html_report(runs: &[ReportInput], baseline: Option<&ReportInput>) -> Report {
    let mut charts = Vec::new();
    let mut body = String::new();
    let mut toc = String::new();
    if let Some(b) = baseline {
        let _ = write!(
            body,
            "<section id=\"comparison\"><h2>Compared with the baseline</h2><p class=\"note\">Baseline: <strong>{}</strong> ({}, {}). \
             A difference is the run's figure minus the baseline's; the change is that difference in percent of the baseline.</p>",
            escape(&b.label),
            kind_name(b.result.kind),
            started(&b.result)
        );
        let base_figures = headline_figures(&b.result);
        for (i, r) in runs.iter().enumerate() {
            body += &comparison_table(i + 1, r, &b.result, &base_figures);
        }
        body += "</section>";
        toc += "<li><a href=\"#comparison\">Compared with the baseline</a></li>";
    }
    let all: Vec<(String, &ReportInput)> = baseline
        .map(|b| ("baseline".to_owned(), b))
        .into_iter()
        .chain(runs.iter().enumerate().map(|(i, r)| ((i + 1).to_string(), r)))
        .collect();
    for (id, r) in &all {
        let _ = write!(
            toc,
            "<li><a href=\"#run-{id}\">{}</a> ({})</li>",
            escape(&r.label),
            kind_name(r.result.kind)
        );
        body += &run_section(id, r, &mut charts);
    }
    let title = match (baseline, runs) {
        (Some(b), [r]) => format!("{} compared with {}", r.label, b.label),
        (_, [r]) => r.label.clone(),
        _ => format!("{} runs", all.len()),
    };
    let html = format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{} · goodput report</title><style>{CSS}</style></head><body><header><strong>goodput report</strong> · {}</header>\
         <main><nav><ul>{toc}</ul></nav>{body}<p class=\"note\">Made by goodput {} from result documents; every figure is the document's own.</p></main></body></html>\n",
        escape(&title),
        escape(&title),
        env!("CARGO_PKG_VERSION"),
    );
    Report { html, charts }
}

fn kind_name(k: TestKind) -> &'static str {
    match k {
        TestKind::TcpClient => "TCP client",
        TestKind::TcpServer => "TCP server",
        TestKind::Iperf3Client => "iperf3 client",
        TestKind::Iperf3Server => "iperf3 server",
        TestKind::StampSender => "STAMP sender",
        TestKind::TtcpTransmit => "TTCP transmitter",
        TestKind::TtcpReceive => "TTCP receiver",
        TestKind::EchoClient => "echo load test",
        TestKind::MediaClient => "UDP media stream",
        TestKind::QuicClient => "QUIC perf client",
        TestKind::Trace => "trace",
        TestKind::Ping => "ping",
        TestKind::OwampClient => "OWAMP client",
        TestKind::TwampClient => "TWAMP client",
        TestKind::DnsClient => "DNS queries",
        TestKind::Ndt7Client => "ndt7 client",
        TestKind::HttpClient => "HTTP client",
        TestKind::TlsClient => "TLS handshake",
    }
}

fn started(r: &TestResult) -> String {
    goodput_core::time::ms_rfc3339(r.started_unix_ms)
}

fn comparison_table(n: usize, run: &ReportInput, base: &TestResult, base_figures: &[Figure]) -> String {
    let mut s = format!("<h3>Run {n}: {} against the baseline</h3>", escape(&run.label));
    if run.result.kind != base.kind {
        let _ = write!(
            s,
            "<p class=\"warn\">This run is a {} and the baseline a {}: only the figures they share are compared.</p>",
            kind_name(run.result.kind),
            kind_name(base.kind)
        );
    }
    s += "<table class=\"compare\"><tr><th>Figure</th><th>Baseline</th><th>This run</th><th>Difference</th><th>Change</th></tr>";
    let figures = headline_figures(&run.result);
    for b in base_figures {
        let Some(f) = figures.iter().find(|f| f.name == b.name && f.unit == b.unit) else {
            continue;
        };
        let (d, pct, verdict) = difference(b, f);
        let sign = if d > 0.0 { "+" } else { "" };
        let _ = write!(
            s,
            "<tr class=\"{verdict}\" data-figure=\"{}\"><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{sign}{}</td><td class=\"num\">{}</td></tr>",
            escape(b.name),
            escape(b.name),
            show(b.value, b.unit),
            show(f.value, f.unit),
            show(d, b.unit),
            change_text(pct, verdict),
        );
    }
    s += "</table>";
    s
}

/// The change column: the change in percent (or "from 0") and the
/// verdict, or "same".
fn change_text(pct: Option<f64>, verdict: &str) -> String {
    if verdict == "same" {
        return "same".into();
    }
    let pct = pct.map_or("from 0".to_owned(), |p| {
        format!("{}{p:.1} %", if p > 0.0 { "+" } else { "" })
    });
    format!("{pct} ({verdict})")
}

fn run_section(id: &str, input: &ReportInput, charts: &mut Vec<ReportChart>) -> String {
    let r = &input.result;
    let mut s = format!(
        "<section id=\"run-{id}\"><h2>{}</h2><p>{} by {} {}, started {}, ended: {}.</p>",
        escape(&input.label),
        kind_name(r.kind),
        escape(&r.tool.name),
        escape(&r.tool.version),
        started(r),
        end_name(r.end)
    );
    if let Some(e) = &r.error {
        let _ = write!(s, "<p class=\"warn\">Failed: {}</p>", escape(&e.message));
    }
    s += "<table class=\"figures\"><tr><th>Figure</th><th>Value</th></tr>";
    for f in headline_figures(r) {
        let _ = write!(
            s,
            "<tr><td>{}</td><td class=\"num\">{}</td></tr>",
            escape(f.name),
            show(f.value, f.unit)
        );
    }
    s += "</table>";
    let d = &input.intervals;
    if d.downsampled() {
        let _ = write!(
            s,
            "<p class=\"note downsampled\">Downsampled: the document's {} intervals are drawn as {} buckets of \
             up to {} consecutive intervals each (at most {} buckets); each bucket's line is its mean and \
             its shaded band spans its minimum to its maximum, so no peak is lost.</p>",
            d.read(),
            d.buckets(),
            d.per_bucket(),
            crate::intervals::MAX_INTERVAL_BUCKETS
        );
    }
    let mut add = |name: &str, svg: String, s: &mut String| {
        s.push_str(&svg);
        charts.push(ReportChart {
            name: format!("{id}-{name}"),
            svg,
        });
    };
    s += "<div class=\"charts\">";
    for (name, svg) in run_charts(r, d) {
        add(&name, svg, &mut s);
    }
    s += "</div>";
    s += &run_tables(r);
    s += "</section>";
    s
}

fn end_name(e: EndReason) -> &'static str {
    match e {
        EndReason::Completed => "completed",
        EndReason::TimeLimit => "time limit",
        EndReason::Interrupted => "interrupted",
        EndReason::ExitLimit => "exit count reached",
        EndReason::Failed => "failed",
    }
}

/// Most connections drawn one by one; past this only the total is drawn.
const MAX_CONNECTION_LINES: usize = 64;

fn run_chart(r: &TestResult, d: &IntervalDigest, title: &str, unit: &str) -> Chart {
    let span_ms = (r.summary.duration_s.max(0.0) * 1e3) as u64;
    let last = d.last_s().map_or(0, |t| (t.max(0.0) * 1e3) as u64);
    let mut c = Chart::new(
        title,
        unit,
        r.started_unix_ms,
        r.started_unix_ms.saturating_add(span_ms.max(last).max(1)),
    );
    c.elapsed = true;
    c
}

fn at(r: &TestResult, seconds: f64) -> u64 {
    r.started_unix_ms.saturating_add((seconds.max(0.0) * 1e3) as u64)
}

fn series(name: &str, color: &'static str, style: Style, points: Vec<Point>) -> Series {
    Series {
        name: name.into(),
        color,
        style,
        points,
    }
}

/// A figure per interval as a series of the chart: its points one by
/// one, or when the intervals were bucketed, each bucket's mean as the
/// line and its minimum to maximum as a band under it.
fn add_measure(
    c: &mut Chart,
    r: &TestResult,
    d: &IntervalDigest,
    m: Measure,
    name: &str,
    color: &'static str,
    style: Style,
) {
    let pts = d.points(m);
    if !d.downsampled() {
        let points = pts
            .iter()
            .map(|(t, _, a)| Point::new(at(r, *t), a.mean()))
            .collect();
        c.series.push(series(name, color, style, points));
        return;
    }
    c.bands.push(Band {
        name: "min to max".to_owned(),
        color,
        points: pts.iter().map(|(t, _, a)| (at(r, *t), a.min, a.max)).collect(),
    });
    let unit = c.unit.clone();
    let points = pts
        .iter()
        .map(|(t, n, a)| Point {
            title: Some(format!(
                "{name}: mean {:.3} {unit} (min {:.3}, max {:.3}) over {n} intervals to {t:.3} s",
                a.mean(),
                a.min,
                a.max
            )),
            ..Point::new(at(r, *t), a.mean())
        })
        .collect();
    c.series
        .push(series(&format!("{name} (mean)"), color, Style::Line, points));
}

/// The charts of one run: (name, SVG).
fn run_charts(r: &TestResult, d: &IntervalDigest) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let has_bytes = d.max(Measure::Send) > 0.0 || d.max(Measure::Recv) > 0.0;
    if has_bytes && r.media().is_none() {
        let mut c = run_chart(r, d, "Rate over time", "Mbit/s");
        if d.max(Measure::Send) > 0.0 {
            add_measure(
                &mut c,
                r,
                d,
                Measure::Send,
                "sent, all connections",
                palette::BLUE,
                Style::LineDots,
            );
        }
        if d.max(Measure::Recv) > 0.0 {
            add_measure(
                &mut c,
                r,
                d,
                Measure::Recv,
                "received, all connections",
                palette::ORANGE,
                Style::LineDots,
            );
        }
        out.push(("rates".to_owned(), chart::svg(&c)));
    }
    // Each connection's rate over its life, as a segment from its start to
    // its end at its mean rate.
    let conns: Vec<_> = r
        .connections
        .iter()
        .filter(|c| c.elapsed_ns > 0 && c.sent_bytes.saturating_add(c.received_bytes) > 0)
        .collect();
    if conns.len() > 1 || (conns.len() == 1 && !has_bytes) {
        let mut c = run_chart(
            r,
            d,
            &format!(
                "Rate per connection (mean over each connection's life){}",
                if conns.len() > MAX_CONNECTION_LINES {
                    format!(", first {MAX_CONNECTION_LINES} of {}", conns.len())
                } else {
                    String::new()
                }
            ),
            "Mbit/s",
        );
        for (k, cr) in conns.iter().take(MAX_CONNECTION_LINES).enumerate() {
            let secs = cr.elapsed_ns as f64 / 1e9;
            let rate = cr.sent_bytes.saturating_add(cr.received_bytes) as f64 * MBIT / secs;
            let title = format!(
                "connection {} ({} → {}): {rate:.2} Mbit/s over {secs:.3} s",
                cr.index, cr.local_address, cr.remote_address
            );
            let pts = vec![
                Point {
                    title: Some(title.clone()),
                    ..Point::new(at(r, cr.start_s), rate)
                },
                Point {
                    title: Some(title),
                    ..Point::new(at(r, cr.start_s + secs), rate)
                },
            ];
            c.series.push(series(
                &format!("connection {}", cr.index),
                palette::SERIES[k % palette::SERIES.len()],
                Style::LineDots,
                pts,
            ));
        }
        out.push(("connections".to_owned(), chart::svg(&c)));
    }
    if d.any(Measure::StampSent) {
        let mut c = run_chart(r, d, "Round trip per interval", "ms");
        add_measure(&mut c, r, d, Measure::RttMin, "min", palette::GREEN, Style::Line);
        add_measure(
            &mut c,
            r,
            d,
            Measure::RttMedian,
            "median",
            palette::BLUE,
            Style::LineDots,
        );
        add_measure(&mut c, r, d, Measure::RttP99, "p99", palette::ORANGE, Style::Line);
        add_measure(
            &mut c,
            r,
            d,
            Measure::RttMax,
            "max",
            palette::VERMILLION,
            Style::Line,
        );
        let sent = d.points(Measure::StampSent);
        for ((t, n, lost), (_, _, sent)) in d.points(Measure::StampLost).iter().zip(&sent) {
            if lost.sum > 0.0 {
                c.marks.push(chart::Mark {
                    at_ms: at(r, *t),
                    color: palette::VERMILLION,
                    title: if *n == 1 {
                        format!("{} lost of {} sent in the interval", lost.sum, sent.sum)
                    } else {
                        format!(
                            "{} lost of {} sent in the {n} intervals to {t:.3} s",
                            lost.sum, sent.sum
                        )
                    },
                });
            }
        }
        out.push(("rtt".to_owned(), chart::svg(&c)));
        out.push(loss_chart(
            r,
            d,
            Measure::StampLost,
            Some((Measure::StampDuplicates, Measure::StampReordered)),
        ));
    }
    if d.any(Measure::MediaRate) {
        let mut c = run_chart(r, d, "Media bitrate per interval", "Mbit/s");
        add_measure(
            &mut c,
            r,
            d,
            Measure::MediaRate,
            "received",
            palette::BLUE,
            Style::LineDots,
        );
        out.push(("media-rate".to_owned(), chart::svg(&c)));
        let mut j = run_chart(r, d, "Jitter per interval", "ms");
        add_measure(
            &mut j,
            r,
            d,
            Measure::MediaJitter,
            "jitter (RFC 3550)",
            palette::PURPLE,
            Style::LineDots,
        );
        out.push(("jitter".to_owned(), chart::svg(&j)));
        out.push(loss_chart(r, d, Measure::MediaLost, None));
    }
    if d.any(Measure::EchoSent) {
        let mut c = run_chart(r, d, "Echo round trip per interval", "ms");
        add_measure(
            &mut c,
            r,
            d,
            Measure::EchoP50,
            "p50",
            palette::BLUE,
            Style::LineDots,
        );
        add_measure(
            &mut c,
            r,
            d,
            Measure::EchoP99,
            "p99",
            palette::ORANGE,
            Style::Line,
        );
        add_measure(
            &mut c,
            r,
            d,
            Measure::EchoMax,
            "max",
            palette::VERMILLION,
            Style::Line,
        );
        out.push(("echo-rtt".to_owned(), chart::svg(&c)));
    }
    out.extend(owamp_summary_charts(r));
    // Distributions: (file name, title, encoded histogram, colour).
    let stamp_h = r
        .stamp()
        .map(|st| &st.total.histograms)
        .or(r.twamp().map(|t| &t.stats.histograms));
    let owamp_to = r.owamp().and_then(|o| o.to.as_ref());
    let owamp_from = r.owamp().and_then(|o| o.from.as_ref());
    let histograms = [
        (
            "rtt-histogram",
            "Round-trip delay distribution",
            stamp_h.and_then(|h| h.rtt_ns.as_deref()),
            palette::BLUE,
        ),
        (
            "forward-histogram",
            "Forward delay distribution",
            stamp_h.and_then(|h| h.forward_ns.as_deref()),
            palette::GREEN,
        ),
        (
            "backward-histogram",
            "Backward delay distribution",
            stamp_h.and_then(|h| h.backward_ns.as_deref()),
            palette::ORANGE,
        ),
        (
            "to-histogram",
            "One-way delay distribution, to the server (values ≥ 0)",
            owamp_to.and_then(|d| d.histogram_ns.as_deref()),
            palette::GREEN,
        ),
        (
            "from-histogram",
            "One-way delay distribution, from the server (values ≥ 0)",
            owamp_from.and_then(|d| d.histogram_ns.as_deref()),
            palette::ORANGE,
        ),
        (
            "echo-histogram",
            "Echo round-trip distribution",
            r.echo().and_then(|e| e.round_trip_histogram.as_deref()),
            palette::BLUE,
        ),
        (
            "connect-histogram",
            "Connect time distribution",
            r.echo().and_then(|e| e.connect_histogram.as_deref()),
            palette::GREEN,
        ),
        (
            "delay-histogram",
            "Relative delay distribution (RFC 3550 transit, from the first datagram's)",
            r.media()
                .as_ref()
                .and_then(|m| m.histograms.relative_delay_ns.as_deref()),
            palette::PURPLE,
        ),
    ];
    for (name, title, encoded, color) in histograms {
        if let Some(svg) = histogram_chart(title, encoded, color) {
            out.push((name.to_owned(), svg));
        }
    }
    if let Some(q) = r.quic() {
        if let Some(p) = q.requests.as_ref().and_then(|q| q.latency.as_ref()) {
            out.push((
                "request-latency".to_owned(),
                percentile_bars("QUIC request latency", p),
            ));
        }
        if !q.media.is_empty() {
            let bars: Vec<(String, f64)> = q
                .media
                .iter()
                .map(|m| (m.id.clone(), m.delay_avg_us / 1e3))
                .collect();
            out.push((
                "media-delay".to_owned(),
                chart::bars(
                    "QUIC media: mean frame delay per stream",
                    "ms",
                    &bars,
                    palette::PURPLE,
                    900,
                    260,
                ),
            ));
        }
    }
    if let Some(t) = r.trace() {
        let bars: Vec<(String, f64)> = t
            .hops
            .iter()
            .map(|h| {
                let rtts: Vec<f64> = h.probes.iter().filter_map(|p| p.rtt_us).collect();
                let med = median(rtts).map_or(0.0, |v| v / 1e3);
                (format!("{}", h.hop), med)
            })
            .collect();
        out.push((
            "hops".to_owned(),
            chart::bars(
                "Median round trip per hop (0: no reply)",
                "ms",
                &bars,
                palette::BLUE,
                900,
                260,
            ),
        ));
    }
    if let Some(p) = r.ping() {
        let step = p.interval_ms.max(1);
        let mut c = Chart::new(
            "Round trip per request",
            "ms",
            r.started_unix_ms,
            r.started_unix_ms
                .saturating_add(step.saturating_mul(p.sent.max(1))),
        );
        c.elapsed = true;
        c.series.push(series(
            "round trip",
            palette::BLUE,
            Style::LineDots,
            p.replies
                .iter()
                .filter_map(|x| {
                    x.rtt_us.map(|v| {
                        Point::new(
                            r.started_unix_ms.saturating_add(x.seq.saturating_mul(step)),
                            v / 1e3,
                        )
                    })
                })
                .collect(),
        ));
        for x in p.replies.iter().filter(|x| x.rtt_us.is_none()) {
            c.marks.push(chart::Mark {
                at_ms: r.started_unix_ms.saturating_add(x.seq.saturating_mul(step)),
                color: palette::VERMILLION,
                title: format!(
                    "request {} {}",
                    x.seq,
                    x.error.as_deref().unwrap_or("got no reply")
                ),
            });
        }
        out.push(("ping".to_owned(), chart::svg(&c)));
    }
    out
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// Losses, duplicates and reordered packets per interval, on the run's
/// clock (duplicates and reordering only when there were any).
fn loss_chart(
    r: &TestResult,
    d: &IntervalDigest,
    lost: Measure,
    more: Option<(Measure, Measure)>,
) -> (String, String) {
    let mut c = run_chart(r, d, "Lost, duplicated and reordered per interval", "packets");
    add_measure(&mut c, r, d, lost, "lost", palette::VERMILLION, Style::LineDots);
    if let Some((dups, reord)) = more {
        if d.max(dups) > 0.0 {
            add_measure(&mut c, r, d, dups, "duplicates", palette::PURPLE, Style::LineDots);
        }
        if d.max(reord) > 0.0 {
            add_measure(&mut c, r, d, reord, "reordered", palette::SKY, Style::LineDots);
        }
    }
    ("loss".to_owned(), chart::svg(&c))
}

fn percentile_bars(title: &str, p: &Percentiles) -> String {
    let bars = vec![
        ("min".to_owned(), p.min_us / 1e3),
        ("p50".to_owned(), p.p50_us / 1e3),
        ("p90".to_owned(), p.p90_us / 1e3),
        ("p99".to_owned(), p.p99_us / 1e3),
        ("p99.9".to_owned(), p.p999_us / 1e3),
        ("max".to_owned(), p.max_us / 1e3),
    ];
    chart::bars(title, "ms", &bars, palette::BLUE, 900, 260)
}

/// Buckets drawn in a histogram.
const BUCKETS: u64 = 40;

/// A histogram (HdrHistogram of nanoseconds, as the result stores it) as
/// bars of equal width from its minimum to its 99.9th percentile; what
/// lies above is one last bar.
fn histogram_chart(title: &str, encoded: Option<&str>, color: &str) -> Option<String> {
    let h = decode_histogram(encoded?)?;
    if h.is_empty() {
        return None;
    }
    let lo = h.min();
    let hi = h.value_at_quantile(0.999).max(lo.saturating_add(1));
    let width = (hi - lo).div_ceil(BUCKETS).max(1);
    let mut bars = Vec::new();
    let mut counted = 0;
    let mut a = lo;
    while a <= hi {
        let b = a.saturating_add(width - 1);
        let n = h.count_between(a, b);
        counted += n;
        bars.push((format!("{:.3}", a as f64 / 1e6), n as f64));
        a = match b.checked_add(1) {
            Some(x) => x,
            None => break,
        };
    }
    let rest = h.len().saturating_sub(counted);
    if rest > 0 {
        bars.push((format!("> {:.3}", a as f64 / 1e6), rest as f64));
    }
    Some(chart::bars(
        &format!(
            "{title} ({} samples; bars from each bucket's lower edge, ms)",
            h.len()
        ),
        "samples",
        &bars,
        color,
        900,
        260,
    ))
}

fn run_tables(r: &TestResult) -> String {
    let mut s = String::new();
    let stamp_stats = r.stamp().map(|st| &st.total).or(r.twamp().map(|t| &t.stats));
    if let Some(t) = stamp_stats {
        s += "<h3>Delay percentiles</h3><table class=\"percentiles\"><tr><th></th><th>count</th><th>min</th><th>median</th><th>p90</th><th>p99</th><th>max</th></tr>";
        if let Some(d) = &t.rtt {
            s += &delay_row("round trip", d);
        }
        for (name, w) in [("forward", &t.forward), ("backward", &t.backward)] {
            if let Some(o) = w {
                s += &one_way_row(name, o, None);
            }
        }
        if let Some(d) = r.twamp().and_then(|t| t.processing.as_ref()) {
            s += &delay_row("reflector's time (T3 − T2)", d);
        }
        s += "</table>";
        if let Some(ipdv) = &t.rtt_ipdv {
            s += &ipdv_table("Round-trip delay variation (IPDV)", ipdv);
        }
    }
    if let Some(o) = r.owamp() {
        s += &owamp_tables(o);
    }
    let pct_tables: Vec<(&str, &Percentiles)> = [
        ("Echo round trip", r.echo().and_then(|e| e.round_trip.as_ref())),
        (
            "Echo connect time",
            r.echo().and_then(|e| e.connect_time.as_ref()),
        ),
        (
            "QUIC request latency",
            r.quic()
                .as_ref()
                .and_then(|q| q.requests.as_ref())
                .and_then(|q| q.latency.as_ref()),
        ),
        (
            "QUIC handshake time",
            r.quic()
                .as_ref()
                .and_then(|q| q.handshakes.as_ref())
                .and_then(|h| h.time.as_ref()),
        ),
        ("Ping round trip", r.ping().and_then(|p| p.percentiles.as_ref())),
    ]
    .into_iter()
    .filter_map(|(n, p)| p.map(|p| (n, p)))
    .collect();
    if !pct_tables.is_empty() {
        s += "<h3>Percentiles</h3><table class=\"percentiles\"><tr><th></th><th>count</th><th>min</th><th>p50</th><th>p90</th><th>p99</th><th>p99.9</th><th>max</th></tr>";
        for (n, p) in pct_tables {
            let _ = write!(
                s,
                "<tr><td>{n}</td><td class=\"num\">{}</td>{}</tr>",
                p.count,
                [p.min_us, p.p50_us, p.p90_us, p.p99_us, p.p999_us, p.max_us]
                    .iter()
                    .map(|v| format!("<td class=\"num\">{}</td>", ms(*v)))
                    .collect::<String>()
            );
        }
        s += "</table>";
    }
    if let Some(q) = r.quic() {
        if !q.media.is_empty() {
            s += "<h3>QUIC media streams</h3><table><tr><th>stream</th><th>frames received</th><th>expected</th><th>delay min</th><th>mean</th><th>max</th></tr>";
            for m in &q.media {
                let _ = write!(
                    s,
                    "<tr><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
                    escape(&m.id),
                    m.received_frames,
                    m.expected_frames,
                    ms(m.delay_min_us),
                    ms(m.delay_avg_us),
                    ms(m.delay_max_us)
                );
            }
            s += "</table>";
        }
    }
    if let Some(t) = r.trace() {
        let _ = write!(
            s,
            "<h3>Hops to {} ({})</h3><table class=\"hops\"><tr><th>hop</th><th>address</th><th>name</th><th>round trips</th><th>notes</th></tr>",
            escape(&t.target),
            escape(&t.address)
        );
        for h in &t.hops {
            let rtts = h
                .probes
                .iter()
                .map(|p| p.rtt_us.map_or("*".to_owned(), ms))
                .collect::<Vec<_>>()
                .join(", ");
            let mut notes = Vec::new();
            if h.silent() {
                notes.push("no reply".to_owned());
            }
            if let Some(a) = h.asymmetry() {
                notes.push(format!("asymm {a}"));
            }
            if let Some(m) = &h.mtu {
                notes.push(format!("pmtu {}", m.mtu));
            }
            let _ = write!(
                s,
                "<tr><td class=\"num\">{}</td><td>{}</td><td>{}</td><td>{rtts}</td><td>{}</td></tr>",
                h.hop,
                escape(&h.addresses.join(" ")),
                escape(&h.names.iter().flatten().cloned().collect::<Vec<_>>().join(" ")),
                escape(&notes.join("; "))
            );
        }
        let _ = write!(
            s,
            "</table><p>{}; path checksum <code>{}</code>.</p>",
            if t.reached { "Reached" } else { "Not reached" },
            escape(&t.path_checksum)
        );
    }
    s
}

fn ms(us: f64) -> String {
    format!("{:.3} ms", us / 1e3)
}

fn delay_row(name: &str, d: &DelayStats) -> String {
    format!(
        "<tr><td>{name}</td><td class=\"num\">{}</td>{}</tr>",
        d.count,
        [d.min_us, d.median_us, d.p90_us, d.p99_us, d.max_us]
            .iter()
            .map(|v| format!("<td class=\"num\">{}</td>", ms(*v)))
            .collect::<String>()
    )
}

/// A one-way delay's row: p90 and p99 when its histogram gave them.
fn one_way_row(name: &str, o: &OneWayStats, p: Option<&Percentiles>) -> String {
    let cell = |v: Option<f64>| {
        v.map_or("<td></td>".to_owned(), |v| {
            format!("<td class=\"num\">{}</td>", ms(v))
        })
    };
    format!(
        "<tr><td>{name}{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>{}{}<td class=\"num\">{}</td></tr>",
        if o.synchronized { "" } else { " (clocks not synchronized)" },
        o.count,
        ms(o.min_us),
        ms(o.median_us),
        cell(p.map(|p| p.p90_us)),
        cell(p.map(|p| p.p99_us)),
        ms(o.max_us)
    )
}

/// Each direction of an OWAMP run, as owping reports it, and a
/// continuous stream's summaries.
fn owamp_tables(o: &OwampDetail) -> String {
    let ways = [("to the server", &o.to), ("from the server", &o.from)];
    let mut s = format!(
        "<h3>OWAMP sessions</h3><p>{} mode, {} bytes per packet, {} every {} ms{}, DSCP {}; a packet is lost after {} ms. \
         This host's clock: {}.</p>",
        escape(&o.mode),
        o.packet_bytes,
        if o.poisson { "on average one" } else { "one" },
        o.interval_ns as f64 / 1e6,
        if o.poisson { " (Poisson)" } else { "" },
        o.dscp,
        o.timeout_ms,
        match (o.local_clock.synchronized, o.local_clock.error_us) {
            (true, Some(e)) => format!("synchronized, error {}", ms(e)),
            (true, None) => "synchronized".to_owned(),
            (false, _) => "not synchronized: one-way delays are relative".to_owned(),
        }
    );
    s += "<table><tr><th></th><th>SID</th><th>sent</th><th>lost</th><th>duplicates</th><th>reordered</th><th>hops</th></tr>";
    for (name, d) in ways {
        let Some(d) = d else { continue };
        let _ = write!(
            s,
            "<tr><td>{name}</td><td><code>{}</code></td><td class=\"num\">{}</td><td class=\"num\">{} ({:.3}%)</td><td class=\"num\">{}</td><td class=\"num\">{} ({:.3}%)</td><td class=\"num\">{}</td></tr>",
            escape(&d.sid),
            d.sent,
            d.lost,
            if d.sent == 0 { 0.0 } else { d.lost as f64 * 100.0 / d.sent as f64 },
            d.duplicates,
            d.reordered,
            d.reordered_percent,
            d.hops.map_or("".to_owned(), |h| if h.min == h.max { h.min.to_string() } else { format!("{}–{}", h.min, h.max) })
        );
    }
    s += "</table>";
    s += "<h3>One-way delay percentiles</h3><table class=\"percentiles\"><tr><th></th><th>count</th><th>min</th><th>median</th><th>p90</th><th>p99</th><th>max</th></tr>";
    for (name, d) in ways {
        if let Some((w, d)) = d.as_ref().and_then(|d| d.delay.as_ref().map(|w| (w, d))) {
            s += &one_way_row(name, w, d.percentiles.as_ref());
        }
    }
    s += "</table>";
    for (name, d) in ways {
        let Some(d) = d.as_ref().filter(|d| !d.intervals.is_empty()) else {
            continue;
        };
        // The newest summaries, at most a page of them.
        const SHOWN: usize = 200;
        let skip = d.intervals.len().saturating_sub(SHOWN);
        let _ = write!(
            s,
            "<h3>Summaries {name}{}</h3><table><tr><th>start</th><th>sent</th><th>lost</th><th>duplicates</th><th>reordered</th><th>median delay</th></tr>",
            if skip > 0 { format!(" (the last {SHOWN} of {})", d.intervals.len()) } else { String::new() }
        );
        for i in &d.intervals[skip..] {
            let _ = write!(
                s,
                "<tr><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
                goodput_core::time::ms_rfc3339((i.start_ns.max(0) / 1_000_000) as u64),
                i.sent,
                i.lost,
                i.duplicates,
                i.reordered,
                i.delay.as_ref().map_or("".to_owned(), |w| {
                    format!("{}{}", ms(w.median_us), if w.synchronized { "" } else { " (unsync)" })
                })
            );
        }
        s += "</table>";
    }
    s
}

/// A continuous OWAMP stream's summaries over time: each direction's
/// median one-way delay, and its losses as marks.
fn owamp_summary_charts(r: &TestResult) -> Vec<(String, String)> {
    let Some(o) = r.owamp() else {
        return Vec::new();
    };
    let ways = [
        ("to the server", &o.to, palette::GREEN),
        ("from the server", &o.from, palette::ORANGE),
    ];
    let at = |ns: i64| (ns.max(0) / 1_000_000) as u64;
    let spans: Vec<(u64, u64)> = ways
        .iter()
        .filter_map(|(_, d, _)| d.as_ref())
        .flat_map(|d| d.intervals.iter().map(|i| (at(i.start_ns), at(i.end_ns))))
        .collect();
    let (Some(from), Some(to)) = (spans.iter().map(|x| x.0).min(), spans.iter().map(|x| x.1).max()) else {
        return Vec::new();
    };
    let synced = ways
        .iter()
        .filter_map(|(_, d, _)| d.as_ref())
        .flat_map(|d| &d.intervals)
        .filter_map(|i| i.delay.as_ref())
        .all(|w| w.synchronized);
    let mut c = Chart::new(
        if synced {
            "One-way delay per summary (median)"
        } else {
            "One-way delay per summary (median; clocks not synchronized: relative)"
        },
        "ms",
        from,
        to.max(from.saturating_add(1)),
    );
    for (name, d, color) in ways {
        let Some(d) = d else { continue };
        c.series.push(series(
            name,
            color,
            Style::LineDots,
            d.intervals
                .iter()
                .filter_map(|i| {
                    i.delay
                        .as_ref()
                        .map(|w| Point::new(at(i.start_ns), w.median_us / 1e3))
                })
                .collect(),
        ));
        for i in d.intervals.iter().filter(|i| i.lost > 0) {
            c.marks.push(chart::Mark {
                at_ms: at(i.start_ns),
                color: palette::VERMILLION,
                title: format!("{name}: {} lost of {} sent in the summary", i.lost, i.sent),
            });
        }
    }
    vec![("owamp-summaries".to_owned(), chart::svg(&c))]
}

fn ipdv_table(title: &str, i: &IpdvStats) -> String {
    format!(
        "<h3>{title}</h3><table><tr><th>count</th><th>min</th><th>median</th><th>max</th><th>p99 of |IPDV|</th></tr><tr><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr></table>",
        i.count,
        ms(i.min_us),
        ms(i.median_us),
        ms(i.max_us),
        ms(i.p99_abs_us)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn differences_know_which_way_is_better() {
        let base = fig("Send rate", 100.0, "Mbit/s", Better::Higher);
        let run = fig("Send rate", 90.0, "Mbit/s", Better::Higher);
        let (d, pct, v) = difference(&base, &run);
        assert_eq!(d, -10.0);
        assert_eq!(pct, Some(-10.0));
        assert_eq!(v, "worse");
        let base = fig("Lost", 0.0, "%", Better::Lower);
        let run = fig("Lost", 1.0, "%", Better::Lower);
        assert_eq!(difference(&base, &run), (1.0, None, "worse"));
        assert_eq!(difference(&run, &base), (-1.0, Some(-100.0), "better"));
        assert_eq!(difference(&run, &run).2, "same");
    }

    #[test]
    fn shown_values_carry_units() {
        assert_eq!(show(941.234, "Mbit/s"), "941.2 Mbit/s");
        assert_eq!(show(0.25, "%"), "0.250 %");
        assert_eq!(show(12.0, ""), "12");
    }

    /// A real STAMP result document (the archive's fixture).
    fn stamp_fixture() -> TestResult {
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../goodput-archive/tests/fixtures/stamp.json"
        ))
        .unwrap();
        serde_json::from_str(&text).unwrap()
    }

    /// A result of `kind` with `detail`, on a real document's common
    /// record.
    fn with_detail(kind: TestKind, detail: goodput_core::result::Detail) -> TestResult {
        let mut r = stamp_fixture();
        r.kind = kind;
        r.detail = detail;
        r
    }

    fn way(median_us: f64, synchronized: bool, summaries: usize) -> goodput_core::result::OneWayDirection {
        use goodput_core::result::{OneWayDirection, OneWaySummary};
        let delay = OneWayStats {
            count: 99,
            min_us: median_us - 100.0,
            median_us,
            max_us: median_us + 900.0,
            jitter_us: 70.0,
            synchronized,
            error_bound_us: None,
            ipdv: None,
        };
        // A real histogram of delays (the fixture's round trips).
        let doc = with_detail(TestKind::StampSender, stamp_fixture().detail);
        let encoded = doc.stamp().unwrap().total.histograms.rtt_ns.clone().unwrap();
        let h = decode_histogram(&encoded).unwrap();
        OneWayDirection {
            sid: "7f000001e95f3a1c0000000000000001".into(),
            sender: "127.0.0.1:8760".into(),
            receiver: "127.0.0.1:8761".into(),
            sent: 100,
            unsent: 0,
            received: 99,
            lost: 1,
            duplicates: 0,
            reordered: 0,
            reordered_percent: 0.0,
            n_reordering_percent: Vec::new(),
            delay: Some(delay),
            percentiles: Percentiles::from_histogram(&h),
            hops: Some(goodput_core::result::HopRange { min: 3, max: 3 }),
            histogram_ns: Some(encoded),
            histogram_negative_ns: None,
            first_ns: Some(1_700_000_000_000_000_000),
            last_ns: Some(1_700_000_009_900_000_000),
            intervals: (0..summaries as i64)
                .map(|i| OneWaySummary {
                    start_ns: 1_700_000_000_000_000_000 + i * 60_000_000_000,
                    end_ns: 1_700_000_000_000_000_000 + (i + 1) * 60_000_000_000 - 100_000_000,
                    sent: 600,
                    unsent: 0,
                    received: 600 - i as u64,
                    lost: i as u64,
                    duplicates: 0,
                    reordered: 0,
                    delay: Some(delay),
                    hops: None,
                    histogram_ns: None,
                    histogram_negative_ns: None,
                })
                .collect(),
        }
    }

    fn owamp(
        to: Option<goodput_core::result::OneWayDirection>,
        from: Option<goodput_core::result::OneWayDirection>,
    ) -> TestResult {
        with_detail(
            TestKind::OwampClient,
            goodput_core::result::Detail::Owamp(Box::new(OwampDetail {
                mode: "open".into(),
                padding: 0,
                packet_bytes: 14,
                interval_ns: 100_000_000,
                poisson: false,
                dscp: 0,
                timeout_ms: 2000,
                local_clock: goodput_core::result::ClockState {
                    synchronized: true,
                    error_us: Some(12.0),
                },
                to,
                from,
            })),
        )
    }

    #[test]
    fn an_owamp_run_shows_each_direction_and_marks_unsynchronised_delay() {
        let r = owamp(Some(way(4_500.0, true, 0)), Some(way(-2_000.0, false, 0)));
        let names: Vec<(&str, f64)> = headline_figures(&r).iter().map(|f| (f.name, f.value)).collect();
        assert!(names.contains(&("To server: delay median", 4.5)), "{names:?}");
        assert!(names.contains(&("To server: lost", 1.0)), "{names:?}");
        assert!(names.contains(&("To server: hops", 3.0)), "{names:?}");
        // The way back's clocks were not synchronised: never a plain delay.
        assert!(
            names.contains(&("From server: delay median (unsync)", -2.0)),
            "{names:?}"
        );
        assert!(
            !names.iter().any(|(n, _)| *n == "From server: delay median"),
            "{names:?}"
        );
        let report = html_report(&[ReportInput::new("owping".into(), r)], None);
        let html = &report.html;
        assert!(html.contains("OWAMP client"), "the kind is named");
        assert!(html.contains("<code>7f000001e95f3a1c0000000000000001</code>"));
        assert!(html.contains("from the server (clocks not synchronized)"));
        let charts: Vec<&str> = report.charts.iter().map(|c| c.name.as_str()).collect();
        assert!(charts.contains(&"1-to-histogram"), "{charts:?}");
        assert!(charts.contains(&"1-from-histogram"), "{charts:?}");
        assert!(
            !charts.iter().any(|c| c.ends_with("owamp-summaries")),
            "{charts:?}"
        );
    }

    #[test]
    fn a_continuous_owamp_stream_charts_and_lists_its_summaries() {
        let r = owamp(Some(way(4_500.0, true, 3)), None);
        let report = html_report(&[ReportInput::new("powstream".into(), r)], None);
        let charts: Vec<&str> = report.charts.iter().map(|c| c.name.as_str()).collect();
        assert!(charts.contains(&"1-owamp-summaries"), "{charts:?}");
        assert!(
            report.html.contains("Summaries to the server"),
            "summaries listed"
        );
        // Two of the three summaries lost packets: a mark each.
        let svg = &report
            .charts
            .iter()
            .find(|c| c.name == "1-owamp-summaries")
            .unwrap()
            .svg;
        assert_eq!(svg.matches("lost of 600 sent in the summary").count(), 2, "{svg}");
    }

    #[test]
    fn a_twamp_run_shows_the_round_trip_and_the_reflectors_time() {
        let stats = stamp_fixture().stamp().unwrap().total.clone();
        let processing = DelayStats {
            count: 50,
            min_us: 3.0,
            median_us: 5.0,
            p90_us: 8.0,
            p99_us: 9.0,
            max_us: 11.0,
            mean_us: 5.5,
        };
        let r = with_detail(
            TestKind::TwampClient,
            goodput_core::result::Detail::Twamp(Box::new(goodput_core::result::TwampDetail {
                mode: "open".into(),
                padding: 27,
                packet_bytes: 41,
                interval_ns: 100_000_000,
                dscp: 0,
                timeout_ms: 2000,
                local_clock: goodput_core::result::ClockState {
                    synchronized: false,
                    error_us: None,
                },
                sid: "7f000001e95f3a1c0000000000000002".into(),
                stats: stats.clone(),
                processing: Some(processing),
            })),
        );
        let names: Vec<(&str, f64)> = headline_figures(&r).iter().map(|f| (f.name, f.value)).collect();
        let rtt = stats.rtt.unwrap();
        assert!(names.contains(&("RTT median", rtt.median_us / 1e3)), "{names:?}");
        assert!(names.contains(&("Reflector time max", 0.011)), "{names:?}");
        let report = html_report(&[ReportInput::new("twping".into(), r)], None);
        assert!(report.html.contains("TWAMP client"));
        assert!(report.html.contains("reflector&#39;s time") || report.html.contains("reflector's time"));
        let charts: Vec<&str> = report.charts.iter().map(|c| c.name.as_str()).collect();
        assert!(charts.contains(&"1-rtt-histogram"), "{charts:?}");
    }
}
