//! QUIC perf views: picoquic's client statistics lines, goodput's summary
//! with units, and picoquic's performance-log CSV (`Log_v` 2).

use std::io::{self, Write};
use std::path::Path;

use goodput_core::result::{QuicDetail, QuicPathStats, TestResult};

/// picoquic's statistics lines (printed for upload-only runs too), then
/// goodput's summary.
pub fn quic_summary(r: &TestResult, d: &QuicDetail) -> String {
    let mut o = String::new();
    o.push_str(&format!("Connection_duration_sec: {:.6}\n", d.duration_s));
    o.push_str(&format!("Nb_transactions: {}\n", d.transactions));
    o.push_str(&format!("Upload_bytes: {}\n", d.upload_bytes));
    o.push_str(&format!("Download_bytes: {}\n", d.download_bytes));
    o.push_str(&format!("TPS: {:.6}\n", d.tps));
    o.push_str(&format!("Upload_Mbps: {:.6}\n", d.upload_mbps));
    o.push_str(&format!("Download_Mbps: {:.6}\n", d.download_mbps));
    for m in &d.media {
        o.push_str(&format!(
            "Quicperf scenario {}: received {}/ {} frames, delay min/average/max = {:.0}/ {:.0}/ {:.0}.\n",
            m.id, m.received_frames, m.expected_frames, m.delay_min_us, m.delay_avg_us, m.delay_max_us
        ));
    }
    o.push_str(&format!(
        "\n--- QUIC perf ({}) against {}: {} connection(s) ---\n",
        d.mode,
        r.settings.addresses.join(", "),
        d.connections
    ));
    if let Some(s) = &d.scenario {
        o.push_str(&format!("  Scenario: {s}"));
        if let Some(l) = &d.legacy_scenario {
            o.push_str(&format!(" (translated from the legacy form {l})"));
        }
        o.push('\n');
    }
    o.push_str(&format!(
        "  Streams: {} completed, {} failed{}\n",
        d.transactions,
        d.failed_streams,
        if d.unidirectional {
            " (responses on unidirectional streams)"
        } else {
            ""
        }
    ));
    o.push_str(&format!(
        "  Upload {} B in {:.3} s = {:.3} Mbit/s; download {} B = {:.3} Mbit/s (request headers counted in the upload)\n",
        d.upload_bytes, d.duration_s, d.upload_mbps, d.download_bytes, d.download_mbps
    ));
    if let Some(q) = &d.requests {
        o.push_str(&format!(
            "  Requests: {} streams outstanding per connection, {} B up / {} B down each: {} completed, {:.0} requests/s\n",
            q.streams, q.request_bytes, q.response_bytes, q.completed, q.per_second
        ));
        if let Some(p) = &q.latency {
            o.push_str(&format!(
                "  Latency: min {:.1} / p50 {:.1} / p90 {:.1} / p99 {:.1} / p99.9 {:.1} / max {:.1} µs\n",
                p.min_us, p.p50_us, p.p90_us, p.p99_us, p.p999_us, p.max_us
            ));
        }
    }
    if let Some(h) = &d.handshakes {
        o.push_str(&format!(
            "  Handshakes: {} completed, {} failed, {:.0} handshakes/s\n",
            h.completed, h.failed, h.per_second
        ));
        if let Some(p) = &h.time {
            o.push_str(&format!(
                "  Handshake time: p50 {:.1} / p99 {:.1} / max {:.1} µs\n",
                p.p50_us, p.p99_us, p.max_us
            ));
        }
    }
    let connected = r.connections.iter().filter_map(|c| c.quic.map(|p| (c, p)));
    for (c, p) in connected.filter(|(_, p)| p.sent_packets > 0) {
        o.push_str(&format!(
            "  Connection {}: RTT {} µs (min {} µs), cwnd {} B, {} packets sent, {} lost ({} B), {} congestion events, MTU {} B\n",
            c.index,
            p.rtt_us,
            p.min_rtt_us.map_or("-".into(), |us| us.to_string()),
            p.cwnd_bytes,
            p.sent_packets,
            p.lost_packets,
            p.lost_bytes,
            p.congestion_events,
            p.mtu_bytes
        ));
    }
    for e in &d.errors {
        o.push_str(&format!("  error: {e}\n"));
    }
    o
}

/// picoquic's performance-log header (its `Mpbs_S` typo kept).
pub const PERF_LOG_HEADER: &str = "Log_v, PQ_v, Duration, Sent, Received, Mpbs_S, Mbps_R, QUIC_v, ALPN, CNX_ID, T64, \
is_client, pkt_recv, trains_s, t_short, tb_cwin, tb_pacing, tb_others, pkt_sent, retrans., spurious, \
delayed_ack_option, min_ack_delay_remote, max_ack_delay_remote, max_ack_gap_remote, min_ack_delay_local, \
max_ack_delay_local, max_ack_gap_local, max_mtu_sent, max_mtu_received, zero_rtt, srtt, minrtt, cwin, ccalgo, \
bwe_max, p_quantum, p_rate, cc_state, cc_param";

/// Appends one row per connection to a picoquic performance log, writing
/// the header first when the file is new or empty. Columns quinn cannot
/// provide are left empty (docs/guide/quic.md lists them).
pub fn append_perf_log(path: &Path, r: &TestResult) -> io::Result<()> {
    if r.quic().is_none() {
        return Ok(());
    }
    let empty = crate::sink::is_stdout(path) || std::fs::metadata(path).map_or(true, |m| m.len() == 0);
    let mut f = crate::sink::open_output(path, true)?;
    if empty {
        writeln!(f, "{PERF_LOG_HEADER}")?;
    }
    for c in &r.connections {
        let p: Option<&QuicPathStats> = c.quic.as_ref();
        let us = (c.elapsed_ns as f64 / 1e3).max(1.0);
        let o = |v: Option<u64>| v.map_or(String::new(), |v| v.to_string());
        let cells = [
            "2".to_string(),
            format!("goodput-{}", r.tool.version),
            format!("{:.6}", c.elapsed_ns as f64 / 1e9),
            c.sent_bytes.to_string(),
            c.received_bytes.to_string(),
            format!("{:.6}", c.sent_bytes as f64 * 8.0 / us),
            format!("{:.6}", c.received_bytes as f64 * 8.0 / us),
            "0x1".into(),
            "perf".into(),
            c.connection_id.clone(),
            format!("{}", r.started_unix_ms * 1000 + (c.start_s * 1e6) as u64),
            "1".into(),
            o(p.map(|p| p.received_datagrams)),
            String::new(),
            String::new(),
            String::new(),
            String::new(),
            String::new(),
            o(p.map(|p| p.sent_packets)),
            String::new(),
            String::new(),
            String::new(),
            String::new(),
            String::new(),
            String::new(),
            String::new(),
            String::new(),
            String::new(),
            o(p.map(|p| u64::from(p.mtu_bytes))),
            String::new(),
            "0".into(),
            o(p.map(|p| p.rtt_us)),
            o(p.and_then(|p| p.min_rtt_us)),
            o(p.map(|p| p.cwnd_bytes)),
            // quinn's default congestion controller is Cubic (picoquic's 2).
            "2".into(),
            String::new(),
            String::new(),
            String::new(),
            String::new(),
            String::new(),
        ];
        writeln!(f, "{}", cells.join(", "))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_has_picoquics_forty_columns() {
        assert_eq!(PERF_LOG_HEADER.split(", ").count(), 40);
        assert!(PERF_LOG_HEADER.starts_with("Log_v, PQ_v, Duration, Sent, Received, Mpbs_S, Mbps_R"));
        assert!(PERF_LOG_HEADER.ends_with("cc_state, cc_param"));
    }
}
