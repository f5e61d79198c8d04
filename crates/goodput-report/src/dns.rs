//! `goodput dns`'s console summary: every query with its answer, then
//! the run's figures, dig's words where dig has them.

use goodput_core::dns::DnsDetail;
use goodput_core::result::TestResult;

/// The end-of-run summary of a dns run.
pub(crate) fn summary(result: &TestResult, d: &DnsDetail) -> String {
    let mut t = format!(
        "--- {} {} from {} over {}{} ---\n",
        d.name,
        d.record,
        d.server,
        d.transport.name(),
        if d.system_resolver {
            " (system resolver)"
        } else {
            ""
        }
    );
    for q in &d.query_log {
        let how = match (q.time_us, &q.error) {
            (Some(us), _) => {
                let mut s = format!(
                    "{} in {:.3} ms over {}",
                    q.rcode.as_deref().unwrap_or("?"),
                    us / 1e3,
                    q.transport.name()
                );
                if let Some(c) = q.connect_us {
                    s.push_str(&format!(" (+{:.3} ms to connect)", c / 1e3));
                }
                s
            }
            (None, Some(e)) => e.clone(),
            (None, None) => "no reply".into(),
        };
        let tries = match q.attempts {
            0 | 1 => String::new(),
            n => format!(", {n} tries"),
        };
        let matched = match q.matched {
            Some(true) => ", as expected",
            Some(false) => ", NOT as expected",
            None => "",
        };
        t.push_str(&format!("query {}: {how}{tries}{matched}", q.seq));
        if q.time_us.is_some() {
            match q.answers.as_slice() {
                [] => t.push_str(", no records"),
                a => t.push_str(&format!(
                    ", {} record{}: {}",
                    q.answer_count,
                    if q.answer_count == 1 { "" } else { "s" },
                    a.join(", ")
                )),
            }
        }
        t.push('\n');
    }
    t.push_str(&format!(
        "{} quer{}, {} answered, {} lost ({:.1}%), {} retries, time {:.3} s\n",
        d.queries,
        if d.queries == 1 { "y" } else { "ies" },
        d.answered,
        d.lost,
        d.loss_percent().unwrap_or(0.0),
        d.retries,
        result.summary.duration_s
    ));
    if let Some(r) = &d.resolution {
        t.push_str(&format!(
            "resolution min/p50/p95/max = {:.3}/{:.3}/{:.3}/{:.3} ms\n",
            r.min_us / 1e3,
            r.p50_us / 1e3,
            r.p95_us / 1e3,
            r.max_us / 1e3
        ));
    }
    if !d.rcodes.is_empty() {
        let codes: Vec<String> = d.rcodes.iter().map(|(k, v)| format!("{k} {v}")).collect();
        t.push_str(&format!("rcodes: {}\n", codes.join(", ")));
    }
    if let Some(e) = &d.expected {
        t.push_str(&format!(
            "expected {e}: {} of {} answers did not hold it\n",
            d.mismatched, d.answered
        ));
    }
    if d.malformed + d.unsolicited + d.truncated + d.oversized > 0 {
        t.push_str(&format!(
            "ignored: {} malformed, {} unsolicited, {} oversized; {} truncated (asked again over TCP)\n",
            d.malformed, d.unsolicited, d.oversized, d.truncated
        ));
    }
    t
}
