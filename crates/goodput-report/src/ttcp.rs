//! TTCP's classic report, built from the result model.

use goodput_core::result::{TestResult, TtcpDetail};
use goodput_core::ttcp::{calls_per_second, kib_per_second, msec_per_call};
use goodput_core::units::format_bits_per_second;

/// `ttcp-t` or `ttcp-r`.
pub fn ttcp_prefix(d: &TtcpDetail) -> &'static str {
    if d.transmit {
        "ttcp-t"
    } else {
        "ttcp-r"
    }
}

/// The report ttcp prints at the end (its settings line comes first, at
/// the start of the run): bytes in real milliseconds and
/// seconds with KB/sec and `+++`, I/O calls, CPU and sleeps), then the same
/// figures in bits per second.
pub fn ttcp_report(_r: &TestResult, d: &TtcpDetail) -> String {
    let p = ttcp_prefix(d);
    let mut t = String::new();
    let kbs = kib_per_second(d.bytes, d.real_s);
    t.push_str(&format!(
        "{p}: {} bytes in {:.3} real milliseconds = {kbs:.2} KB/sec +++\n",
        d.bytes,
        d.real_s * 1e3
    ));
    t.push_str(&format!(
        "{p}: {} bytes in {:.6} real seconds = {kbs:.2} KB/sec +++\n",
        d.bytes, d.real_s
    ));
    t.push_str(&format!(
        "{p}: {} I/O calls, msec/call = {:.3}, calls/sec = {:.3}\n",
        d.calls,
        msec_per_call(d.real_s, d.calls),
        calls_per_second(d.real_s, d.calls)
    ));
    let cpu = d.user_s + d.system_s;
    t.push_str(&format!(
        "{p}: {:.3}user {:.3}sys {:.3}real {:.0}% cpu, {} sleeps{}\n",
        d.user_s,
        d.system_s,
        d.real_s,
        if d.real_s > 0.0 {
            cpu * 100.0 / d.real_s
        } else {
            0.0
        },
        d.sleeps,
        if d.udp {
            format!(", {} datagrams", d.datagrams)
        } else {
            String::new()
        }
    ));
    let bps = if d.real_s > 0.0 {
        d.bytes as f64 / d.real_s
    } else {
        0.0
    };
    t.push_str(&format!(
        "{p}: {} bytes in {:.6} s = {:.3} Mbit/s ({})",
        d.bytes,
        d.real_s,
        bps * 8.0 / 1e6,
        format_bits_per_second(bps)
    ));
    if let Some(e) = &d.error {
        t.push_str(&format!("\n{p}: ended early: {e}"));
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_lines_carry_the_classic_fields() {
        let d = TtcpDetail {
            transmit: true,
            udp: false,
            buflen: 8192,
            nbuf: 2048,
            bytes: 16_777_216,
            calls: 2048,
            sleeps: 0,
            datagrams: 0,
            real_s: 2.0,
            user_s: 0.5,
            system_s: 1.0,
            sinkmode: true,
            peer: "127.0.0.1:5001".into(),
            error: None,
        };
        let r: TestResult = serde_json::from_value(serde_json::json!({
            "schema_version": 1,
            "tool": {"name": "goodput", "version": "0"},
            "kind": "ttcp_transmit",
            "started_unix_ms": 0,
            "settings": {"wire": "raw", "addresses": ["127.0.0.1:5001"], "status_interval_ms": 0},
            "intervals": [], "intervals_omitted": 0, "connections": [], "connections_omitted": 0,
            "summary": {"successful": 1, "network_errors": 0, "data_errors": 0, "aborted": 0,
                "sent_bytes": 0, "received_bytes": 0, "duration_s": 2.0,
                "send_bytes_per_second": 0.0, "recv_bytes_per_second": 0.0},
            "end": "completed"
        }))
        .unwrap();
        let text = ttcp_report(&r, &d);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "ttcp-t: 16777216 bytes in 2000.000 real milliseconds = 8192.00 KB/sec +++"
        );
        assert_eq!(
            lines[1],
            "ttcp-t: 16777216 bytes in 2.000000 real seconds = 8192.00 KB/sec +++"
        );
        assert_eq!(
            lines[2],
            "ttcp-t: 2048 I/O calls, msec/call = 1.000, calls/sec = 1024.000"
        );
        assert_eq!(lines[3], "ttcp-t: 0.500user 1.000sys 2.000real 75% cpu, 0 sleeps");
        assert!(lines[4].contains("= 67.109 Mbit/s"), "{}", lines[4]);
    }
}
