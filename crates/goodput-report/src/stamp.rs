//! STAMP views: status lines, the owping-style summary and the per-packet
//! file.

use std::io::{self, Write};
use std::path::Path;

use crate::format::ms_or;
use goodput_core::result::{
    DelayStats, HopRange, Interval, OneWayStats, StampDetail, StampInterval, StampPacket, StampStats,
    TestResult,
};

use crate::View;

/// The legend printed before the STAMP status header.
pub fn stamp_legend() -> &'static str {
    "Legend:\n\
     * TimeSlice - seconds since the run started, at the end of the interval\n\
     * Sessions - sessions still running\n\
     * Sent / Recv / Lost - packets sent, first replies received, packets whose timeout passed in the interval\n\
     * Dup / Reord - duplicate and reordered (RFC 4737) replies\n\
     * RTT - round-trip delay (T4-T1)-(T3-T2) of the interval's replies, milliseconds\n\
     * FwdMed / BwdMed - median one-way delay each way, milliseconds (absolute only with synchronised clocks)\n"
}

/// The STAMP status header.
pub fn stamp_header() -> String {
    format!(
        "{:>10}{:>9}{:>9}{:>9}{:>7}{:>6}{:>7}{:>11}{:>11}{:>11}{:>11}{:>11}{:>11}",
        "TimeSlice",
        "Sessions",
        "Sent",
        "Recv",
        "Lost",
        "Dup",
        "Reord",
        "RTTmin",
        "RTTmed",
        "RTTp99",
        "RTTmax",
        "FwdMed",
        "BwdMed"
    )
}

/// One STAMP status line under [`stamp_header`].
pub fn stamp_line(iv: &Interval, s: &StampInterval) -> String {
    let r = s.rtt;
    format!(
        "{:>10.3}{:>9}{:>9}{:>9}{:>7}{:>6}{:>7}{:>11}{:>11}{:>11}{:>11}{:>11}{:>11}",
        iv.time_slice_s,
        iv.in_flight,
        s.sent,
        s.received,
        s.lost,
        s.duplicates,
        s.reordered,
        ms_or(r.map(|r| r.min_us), "-"),
        ms_or(r.map(|r| r.median_us), "-"),
        ms_or(r.map(|r| r.p99_us), "-"),
        ms_or(r.map(|r| r.max_us), "-"),
        ms_or(s.forward_median_us, "-"),
        ms_or(s.backward_median_us, "-"),
    )
}

/// CSV columns added to the status file for STAMP runs.
pub(crate) const STAMP_CSV_COLUMNS: &str =
    "Sent,Recv,Lost,Dup,Reord,RTTmin_ms,RTTmed_ms,RTTp99_ms,RTTmax_ms,FwdMed_ms,BwdMed_ms";

/// The STAMP CSV cells of one interval.
pub(crate) fn stamp_csv(s: &StampInterval) -> String {
    let r = s.rtt;
    format!(
        "{},{},{},{},{},{},{},{},{},{},{}",
        s.sent,
        s.received,
        s.lost,
        s.duplicates,
        s.reordered,
        ms_or(r.map(|r| r.min_us), ""),
        ms_or(r.map(|r| r.median_us), ""),
        ms_or(r.map(|r| r.p99_us), ""),
        ms_or(r.map(|r| r.max_us), ""),
        ms_or(s.forward_median_us, ""),
        ms_or(s.backward_median_us, ""),
    )
}

fn delay_line(d: &DelayStats) -> String {
    format!(
        "min {:.3} / median {:.3} / p90 {:.3} / p99 {:.3} / max {:.3} ms (mean {:.3} ms, n={})",
        d.min_us / 1e3,
        d.median_us / 1e3,
        d.p90_us / 1e3,
        d.p99_us / 1e3,
        d.max_us / 1e3,
        d.mean_us / 1e3,
        d.count
    )
}

fn one_way_line(name: &str, o: &OneWayStats) -> String {
    let clock = if o.synchronized {
        match o.error_bound_us {
            Some(e) => format!("err ±{:.3} ms", e / 1e3),
            None => "err unknown".into(),
        }
    } else {
        "unsync: clocks not synchronised, offset included".into()
    };
    let mut t = format!(
        "  {name} one-way delay : min {:.3} / median {:.3} / max {:.3} ms ({clock})\n",
        o.min_us / 1e3,
        o.median_us / 1e3,
        o.max_us / 1e3
    );
    t.push_str(&format!(
        "  {name} jitter (P95-P50) : {:.3} ms",
        o.jitter_us / 1e3
    ));
    if let Some(i) = o.ipdv {
        t.push_str(&format!(
            "   IPDV min {:.3} / median {:.3} / max {:.3} ms, |IPDV| p99 {:.3} ms",
            i.min_us / 1e3,
            i.median_us / 1e3,
            i.max_us / 1e3,
            i.p99_abs_us / 1e3
        ));
    }
    t.push('\n');
    t
}

fn hops_text(h: Option<HopRange>) -> String {
    match h {
        None => "unknown".into(),
        Some(h) if h.min == h.max => format!("{} (consistently)", h.min),
        Some(h) => format!("{}..{} (varies)", h.min, h.max),
    }
}

fn pct(n: u64, of: u64) -> String {
    if of == 0 {
        "0%".into()
    } else {
        format!("{:.3}%", n as f64 * 100.0 / of as f64)
    }
}

/// The owping-style block for a set of STAMP figures.
pub fn stamp_stats_text(s: &StampStats) -> String {
    let mut t = String::new();
    if s.not_sent > 0 {
        // Packets that never left are a measurement lost: the loss is of
        // the packets planned, and the line says how many were not sent.
        t.push_str(&format!(
            "  {} planned, {} sent, {} could not be sent ({}), {} received, {} lost ({}: {} not sent, {} in the network), {} duplicates, {} late\n",
            s.planned(),
            s.sent,
            s.not_sent,
            goodput_core::result::SendFailure::describe(&s.send_failures),
            s.received,
            s.missing(),
            pct(s.missing(), s.planned()),
            s.not_sent,
            s.lost,
            s.duplicates,
            s.late
        ));
    } else {
        t.push_str(&format!(
            "  {} sent, {} received, {} lost ({}), {} duplicates, {} late\n",
            s.sent,
            s.received,
            s.lost,
            pct(s.lost, s.sent),
            s.duplicates,
            s.late
        ));
    }
    let unsent_note = if s.not_sent > 0 {
        format!(" (the {} not sent are in neither)", s.not_sent)
    } else {
        String::new()
    };
    match (s.lost_forward, s.lost_backward) {
        (Some(f), Some(b)) => {
            let unknown = s.lost.saturating_sub(f.saturating_add(b));
            let covered = s.sent.saturating_sub(unknown);
            t.push_str(&format!(
                "  loss by direction : {f} forward ({}), {b} backward ({}){}{unsent_note}\n",
                pct(f, covered),
                pct(b, covered.saturating_sub(f)),
                if unknown > 0 {
                    format!(", {unknown} of unknown direction")
                } else {
                    String::new()
                }
            ))
        }
        _ if s.received == 0 => t.push_str("  loss by direction : unknown (no reply came back)\n"),
        _ => t.push_str(
            "  loss by direction : unknown (the reflector did not show per-session sequence numbers; run it stateful)\n",
        ),
    }
    if let Some(r) = &s.rtt {
        t.push_str(&format!("  round-trip delay : {}\n", delay_line(r)));
    }
    if let Some(i) = s.rtt_ipdv {
        t.push_str(&format!(
            "  round-trip IPDV : min {:.3} / median {:.3} / max {:.3} ms, |IPDV| p99 {:.3} ms\n",
            i.min_us / 1e3,
            i.median_us / 1e3,
            i.max_us / 1e3,
            i.p99_abs_us / 1e3
        ));
    }
    if let Some(o) = &s.forward {
        t.push_str(&one_way_line("forward", o));
    }
    if let Some(o) = &s.backward {
        t.push_str(&one_way_line("backward", o));
    }
    t.push_str(&format!(
        "  hops : forward {}, backward {}\n",
        hops_text(s.hops_forward),
        hops_text(s.hops_backward)
    ));
    if s.reordered == 0 {
        t.push_str("  no reordering\n");
    } else {
        t.push_str(&format!(
            "  reordered (RFC 4737) : {} ({:.3}%)",
            s.reordered, s.reordered_percent
        ));
        for (i, p) in s.n_reordering_percent.iter().enumerate() {
            t.push_str(&format!("   {}-reordering = {p:.3}%", i + 1));
        }
        t.push('\n');
    }
    if s.unmatched + s.ssid_mismatch > 0 {
        t.push_str(&format!(
            "  ignored replies : {} unmatched, {} with another SSID\n",
            s.unmatched, s.ssid_mismatch
        ));
    }
    if s.ssid_zero > 0 {
        t.push_str(&format!(
            "  {} replies carried SSID 0: the reflector does not support RFC 8972 session ids\n",
            s.ssid_zero
        ));
    }
    t
}

/// The end-of-run STAMP section of the console summary.
pub(crate) fn summary(result: &TestResult, d: &StampDetail) -> String {
    let mut t = format!(
        "\n--- STAMP statistics: {} session(s) to {}, {} B packets every {:.3} ms, timeout {} ms ---\n",
        d.sessions,
        result.settings.addresses.join(", "),
        d.packet_bytes,
        d.interval_ns as f64 / 1e6,
        d.timeout_ms
    );
    t.push_str(&stamp_stats_text(&d.total));
    t
}

/// `--packet-file`: every packet's fate, CSV for `.csv` names, otherwise
/// aligned text.
pub struct PacketFile {
    out: crate::sink::Output,
    csv: bool,
}

/// The packet file's CSV header (units in the names).
pub const PACKET_CSV_HEADER: &str = "session,seq,status,t1_unix_ns,t2_unix_ns,t3_unix_ns,t4_unix_ns,rtt_us,forward_us,backward_us,reflector_seq,forward_ttl,reply_ttl";

impl PacketFile {
    /// Creates (truncates) the file and writes its header.
    pub fn create(path: &Path) -> io::Result<Self> {
        let csv = path.extension().is_some_and(|e| e.eq_ignore_ascii_case("csv"));
        let mut out = crate::sink::open_output(path, false)?;
        if csv {
            writeln!(out, "{PACKET_CSV_HEADER}")?;
        } else {
            writeln!(
                out,
                "{:>7} {:>10} {:>9} {:>20} {:>12} {:>12} {:>12}",
                "session", "seq", "status", "t1_unix_ns", "rtt_us", "forward_us", "backward_us"
            )?;
        }
        Ok(Self { out, csv })
    }
}

impl View for PacketFile {
    fn wants_packets(&self) -> bool {
        true
    }
    fn packet(&mut self, p: &StampPacket) -> io::Result<()> {
        let o = |v: Option<i64>| v.map_or(String::new(), |v| v.to_string());
        let f = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v:.3}"));
        let u = |v: Option<u32>| v.map_or(String::new(), |v| v.to_string());
        let b = |v: Option<u8>| v.map_or(String::new(), |v| v.to_string());
        let status = serde_json::to_value(p.status)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        if self.csv {
            writeln!(
                self.out,
                "{},{},{status},{},{},{},{},{},{},{},{},{},{}",
                p.session,
                p.seq,
                p.t1_ns,
                o(p.t2_ns),
                o(p.t3_ns),
                o(p.t4_ns),
                f(p.rtt_us),
                f(p.forward_us),
                f(p.backward_us),
                u(p.reflector_seq),
                b(p.forward_ttl),
                b(p.reply_ttl)
            )
        } else {
            let d = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.3}"));
            writeln!(
                self.out,
                "{:>7} {:>10} {:>9} {:>20} {:>12} {:>12} {:>12}",
                p.session,
                p.seq,
                status,
                p.t1_ns,
                d(p.rtt_us),
                d(p.forward_us),
                d(p.backward_us)
            )
        }
    }
    fn finish(&mut self, _: &TestResult) -> io::Result<()> {
        self.out.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_line_has_a_cell_per_column_and_units_in_ms() {
        let s = StampInterval {
            time_slice_s: 1.0,
            sent: 10,
            received: 9,
            lost: 1,
            not_sent: 0,
            duplicates: 0,
            reordered: 2,
            rtt: Some(DelayStats {
                count: 9,
                min_us: 20.0,
                median_us: 31.5,
                p90_us: 40.0,
                p99_us: 50.0,
                max_us: 1500.0,
                mean_us: 35.0,
            }),
            forward_median_us: None,
            backward_median_us: Some(12.0),
        };
        let iv = Interval {
            time_slice_s: 1.0,
            send_bytes_per_second: 440,
            recv_bytes_per_second: 396,
            in_flight: 1,
            completed: 0,
            network_errors: 0,
            data_errors: 0,
            stamp: Some(s),
            echo: None,
            media: None,
        };
        let line = stamp_line(&iv, &s);
        let cells: Vec<&str> = line.split_whitespace().collect();
        let head = stamp_header();
        assert_eq!(cells.len(), head.split_whitespace().count());
        assert_eq!(cells[7], "0.020");
        assert_eq!(cells[10], "1.500");
        assert_eq!(cells[11], "-");
        assert_eq!(
            stamp_csv(&s).split(',').count(),
            STAMP_CSV_COLUMNS.split(',').count()
        );
    }

    #[test]
    fn packets_not_sent_are_planned_and_lost_on_the_console() {
        let mut s = goodput_core::stamp::stats::Tally::default().stats();
        s.sent = 95;
        s.received = 95;
        s.not_sent = 5;
        goodput_core::result::SendFailure::add(&mut s.send_failures, "EPERM", "operation not permitted", 5);
        let text = stamp_stats_text(&s);
        assert!(
            text.starts_with(
                "  100 planned, 95 sent, 5 could not be sent (EPERM × 5: operation not permitted), \
                 95 received, 5 lost (5.000%: 5 not sent, 0 in the network), 0 duplicates, 0 late\n"
            ),
            "{text}"
        );
        s.not_sent = 0;
        s.send_failures.clear();
        let text = stamp_stats_text(&s);
        assert!(
            text.starts_with("  95 sent, 95 received, 0 lost (0.000%), 0 duplicates, 0 late\n"),
            "{text}"
        );
    }
}
