//! Echo load-test views: status lines and the summary.

use crate::format::ms_or;
use goodput_core::result::{EchoDetail, EchoInterval, Interval, Percentiles, TestResult};
use goodput_core::units::format_bits_per_second;

/// The legend printed before the echo status header.
pub fn echo_legend() -> &'static str {
    "Legend:\n\
     * TimeSlice - seconds since the run started, at the end of the interval\n\
     * Open - connections open now; Estab / Failed - connections established / failed so far\n\
     * Sent / Echoed / Mismatch - messages sent, fully echoed, and echoed with a wrong byte, in the interval\n\
     * RTT - round trips of the interval's echoes (from the scheduled send time in open loop), milliseconds\n"
}

/// The echo status header.
pub fn echo_header() -> String {
    format!(
        "{:>10}{:>8}{:>9}{:>8}{:>9}{:>9}{:>9}{:>10}{:>10}{:>10}",
        "TimeSlice", "Open", "Estab", "Failed", "Sent", "Echoed", "Mismatch", "RTTp50", "RTTp99", "RTTmax"
    )
}

/// One echo status line.
pub fn echo_line(iv: &Interval, e: &EchoInterval) -> String {
    let r = e.round_trip;
    format!(
        "{:>10.3}{:>8}{:>9}{:>8}{:>9}{:>9}{:>9}{:>10}{:>10}{:>10}",
        iv.time_slice_s,
        iv.in_flight,
        e.established,
        e.failed,
        e.sent,
        e.echoed,
        e.mismatched,
        ms_or(r.map(|r| r.p50_us), "-"),
        ms_or(r.map(|r| r.p99_us), "-"),
        ms_or(r.map(|r| r.max_us), "-"),
    )
}

/// CSV columns the status file adds for echo runs.
pub(crate) const ECHO_CSV_COLUMNS: &str = "Estab,Failed,Sent,Echoed,Mismatch,RTTp50_ms,RTTp99_ms,RTTmax_ms";

/// The echo CSV cells of one interval.
pub(crate) fn echo_csv(e: &EchoInterval) -> String {
    let r = e.round_trip;
    format!(
        "{},{},{},{},{},{},{},{}",
        e.established,
        e.failed,
        e.sent,
        e.echoed,
        e.mismatched,
        ms_or(r.map(|r| r.p50_us), ""),
        ms_or(r.map(|r| r.p99_us), ""),
        ms_or(r.map(|r| r.max_us), ""),
    )
}

fn percentiles(p: &Percentiles) -> String {
    format!(
        "min {:.3} / p50 {:.3} / p90 {:.3} / p99 {:.3} / p99.9 {:.3} / max {:.3} ms (n={})",
        p.min_us / 1e3,
        p.p50_us / 1e3,
        p.p90_us / 1e3,
        p.p99_us / 1e3,
        p.p999_us / 1e3,
        p.max_us / 1e3,
        p.count
    )
}

/// The end-of-run echo summary.
pub(crate) fn summary(r: &TestResult, d: &EchoDetail) -> String {
    let s = &r.summary;
    let mut t = format!(
        "\n--- Echo load test: {} connections to {} ---\n",
        d.connections,
        r.settings.addresses.join(", ")
    );
    t.push_str(&format!(
        "  connections : {} established, {} failed ({} refused, {} reset, {} timed out, {} other)\n",
        d.established,
        d.refused + d.reset + d.timed_out + d.other_failures,
        d.refused,
        d.reset,
        d.timed_out,
        d.other_failures
    ));
    if let Some(c) = &d.connect_time {
        t.push_str(&format!("  connect time : {}\n", percentiles(c)));
    }
    if d.messages_per_connection > 0 {
        t.push_str(&format!(
            "  messages : {} sent, {} echoed, {} mismatched, {} short, {} missing ({} B each, {})\n",
            d.sent,
            d.echoed,
            d.mismatched,
            d.short,
            d.missing,
            d.message_bytes,
            if d.send_after_recv {
                "closed loop"
            } else {
                "open loop"
            }
        ));
        if d.extra_bytes > 0 {
            t.push_str(&format!(
                "  {} bytes came back that were never sent\n",
                d.extra_bytes
            ));
        }
        if let Some(p) = &d.round_trip {
            t.push_str(&format!("  round trip : {}\n", percentiles(p)));
        }
    }
    t.push_str(&format!(
        "  bytes : sent {} B ({}), echoed {} B ({})   elapsed {:.3} s\n",
        s.sent_bytes,
        format_bits_per_second(s.send_bytes_per_second),
        s.received_bytes,
        format_bits_per_second(s.recv_bytes_per_second),
        s.duration_s
    ));
    t
}
