//! The ndt7 kind's console summary, and the server's ndt7 lines.

use goodput_core::ndt7::{Ndt7Detail, Ndt7ServerCounters, Ndt7ServerTest, SubtestFigures};
use goodput_core::result::TestResult;
use goodput_core::units::{format_bits_per_second, format_size};

fn subtest_line(name: &str, f: &SubtestFigures) -> String {
    let mut line = format!(
        "  {name:<9}: {:>14}   {} in {:.2} s",
        format_bits_per_second(f.rate_bps / 8.0),
        format_size(f.bytes),
        f.seconds
    );
    if let Some(m) = f.min_rtt_ms {
        line.push_str(&format!("   min round trip {m:.3} ms"));
    }
    if let Some(r) = f.rtt_ms {
        line.push_str(&format!(" (smoothed {r:.3} ms)"));
    }
    if let Some(p) = f.retransmission_pct {
        line.push_str(&format!(
            "   retransmitted {p:.3} %{}",
            f.retransmitted_segments
                .map_or(String::new(), |s| format!(" ({s} segments)"))
        ));
    }
    line.push('\n');
    line
}

/// The summary of an ndt7 client's run.
pub fn ndt7_summary(_result: &TestResult, d: &Ndt7Detail) -> String {
    let mut t = format!("  Server    : {}\n", d.server);
    if let Some(c) = &d.client_address {
        t.push_str(&format!("  Client    : {c} (as the server saw it)\n"));
    }
    if let Some(f) = &d.download {
        t.push_str(&subtest_line("Download", f));
    }
    if let Some(f) = &d.upload {
        t.push_str(&subtest_line("Upload", f));
    }
    t.push_str(
        "  (download: the server's TCP_INFO as it sent; upload: this host's own TCP_INFO as it sent)\n",
    );
    t
}

/// One line for a subtest a server ran.
pub fn ndt7_server_test_line(t: &Ndt7ServerTest) -> String {
    let f = &t.figures;
    format!(
        "ndt7 {} from {}: {} ({} in {:.2} s){}{}{}",
        t.subtest.name(),
        t.client,
        format_bits_per_second(f.rate_bps / 8.0),
        format_size(f.bytes),
        f.seconds,
        f.min_rtt_ms
            .map_or(String::new(), |m| format!(", min round trip {m:.3} ms")),
        f.retransmission_pct
            .map_or(String::new(), |p| format!(", retransmitted {p:.3} %")),
        if t.completed { "" } else { ", broken off" }
    )
}

/// The ndt7 service's line in a server's summary.
pub fn ndt7_server_line(c: &Ndt7ServerCounters) -> String {
    format!(
        "ndt7 service: {} downloads, {} uploads, {} broken off, {} ended at the hard cap; refused: {} \
         busy, {} over the per-address limit, {} over the per-minute rate, {} bad upgrades, {} \
         upgrades too slow; {} messages over the size limit; {} sent, {} received",
        c.downloads,
        c.uploads,
        c.broken,
        c.hard_capped,
        c.refused_busy,
        c.refused_per_client,
        c.refused_rate,
        c.bad_requests,
        c.handshake_timeouts,
        c.oversized_messages,
        format_size(c.bytes_sent),
        format_size(c.bytes_received)
    )
}
