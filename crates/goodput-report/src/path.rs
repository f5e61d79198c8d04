//! `goodput trace` and `goodput ping` on the console, in the layouts of
//! traceroute (one line per hop), tracepath (its `Resume:` line) and ping.

use goodput_core::path::{PingDetail, PingMethod, PingReply, ProbeAnswer, TraceDetail, TraceHop};
use goodput_core::result::TestResult;

fn ms(us: f64) -> String {
    format!("{:.3} ms", us / 1e3)
}

/// An address as shown: its reverse name and the address, when looked up.
fn shown(hop: &TraceHop, addr: &str) -> String {
    let i = hop.addresses.iter().position(|a| a == addr);
    match i.and_then(|i| hop.names.get(i)).cloned().flatten() {
        Some(name) => format!("{name} ({addr})"),
        None => addr.to_owned(),
    }
}

/// One hop in traceroute's layout: the TTL, then each probe's time (or
/// `*`), the answering address written before its first probe and again
/// where it changes; then tracepath's notes: the path MTU told at this
/// hop, `asymm N`, `reached`.
pub fn hop_line(hop: &TraceHop) -> String {
    let mut line = format!("{:>2} ", hop.hop);
    let mut last: Option<&str> = None;
    for p in &hop.probes {
        match (&p.from, p.rtt_us) {
            (Some(from), Some(rtt)) if p.answer != ProbeAnswer::NoReply => {
                if last != Some(from.as_str()) {
                    line.push_str(&format!(" {}", shown(hop, from)));
                    last = Some(from.as_str());
                }
                line.push_str(&format!("  {}", ms(rtt)));
                if let Some(c) = p.code.as_ref().filter(|_| p.answer == ProbeAnswer::Unreachable) {
                    line.push_str(&format!(" {c}"));
                }
            }
            _ => line.push_str(" *"),
        }
    }
    if let Some(m) = &hop.mtu {
        line.push_str(&format!(
            "  pmtu {} (told by {} to a {}-byte probe)",
            m.mtu, m.reported_by, m.from_bytes
        ));
    }
    if let Some(a) = hop.asymmetry() {
        line.push_str(&format!("  asymm {a}"));
    }
    if hop.reached() {
        line.push_str("  reached");
    }
    line
}

/// The trace's summary: tracepath's `Resume:` line, a black hole if one
/// was found, and the path's checksum.
pub(crate) fn trace_summary(result: &TestResult, d: &TraceDetail) -> String {
    let mut t = String::new();
    if let Some(m) = d.local_mtu {
        t.push_str(&format!("  Local interface MTU : {m} bytes\n"));
    }
    if let Some(b) = &d.black_hole {
        t.push_str(&format!(
            "  Black hole : from hop {} probes of {} bytes got neither an answer nor an ICMP; {}{} bytes pass{}\n",
            b.hop,
            b.lost_bytes,
            if b.exact { "" } else { "at least " },
            b.passed_bytes,
            if b.exact { "" } else { " (the search stopped early: the hop's answers ran out)" }
        ));
    }
    // After a search that stopped early the size is a floor.
    let floor = if d.black_hole.as_ref().is_some_and(|b| !b.exact) {
        ">="
    } else {
        ""
    };
    let pmtu = d.pmtu.map_or(String::new(), |p| format!("pmtu {floor}{p} "));
    match (d.hop_count, d.back_hops) {
        (Some(h), Some(b)) => t.push_str(&format!("     Resume: {pmtu}hops {h} back {b}\n")),
        (Some(h), None) => t.push_str(&format!("     Resume: {pmtu}hops {h}\n")),
        (None, _) => t.push_str(&format!(
            "     Not reached after {} hops{}\n",
            d.hops.last().map_or(0, |h| h.hop),
            d.pmtu.map_or(String::new(), |p| format!(": pmtu {p}"))
        )),
    }
    let answering = d.hops.iter().filter(|h| !h.silent()).count();
    t.push_str(&format!(
        "  Path checksum : {} ({} hops, {} answering; {:.3} s)\n",
        d.path_checksum,
        d.hops.len(),
        answering,
        result.summary.duration_s
    ));
    t
}

/// One request's fate in ping's layout (an ICMP reply has its size; a TCP
/// connect has none).
pub fn ping_line(r: &PingReply) -> String {
    let tcp = r.bytes.is_none();
    match (r.rtt_us, &r.error) {
        (Some(rtt), _) if tcp => format!(
            "seq={} {} time={}",
            r.seq,
            if r.refused {
                "reset: port closed, no answer from a service"
            } else {
                "connected"
            },
            ms(rtt)
        ),
        (Some(rtt), _) => format!(
            "{} bytes: icmp_seq={}{} time={}",
            r.bytes.unwrap_or(0),
            r.seq,
            r.ttl.map_or(String::new(), |t| format!(" ttl={t}")),
            ms(rtt)
        ),
        (None, Some(e)) => format!("seq={} {e}", r.seq),
        (None, None) => format!("seq={} no reply", r.seq),
    }
}

/// ping's closing lines, and the percentiles.
pub(crate) fn ping_summary(result: &TestResult, d: &PingDetail) -> String {
    let mut t = format!(
        "--- {} ping statistics ({}) ---\n",
        d.target,
        match d.method {
            PingMethod::Tcp => format!("TCP connect to port {}", d.port.unwrap_or(0)),
            _ => "ICMP echo".to_owned(),
        }
    );
    // A reset is the host saying the port is closed: not an answer from
    // the service, so it is named apart (and counted lost).
    let resets = d.replies.iter().filter(|r| r.refused).count();
    let answered = match d.method {
        PingMethod::Tcp => format!("{} connected", d.received),
        _ => format!("{} answered", d.received),
    };
    let reset_text = match resets {
        0 => String::new(),
        1 => ", 1 reset (port closed)".to_owned(),
        n => format!(", {n} reset (port closed)"),
    };
    t.push_str(&format!(
        "{} requests, {answered}{reset_text}, {:.1}% loss, {} errors, {} duplicates, time {:.3} s\n",
        d.sent, d.loss_percent, d.errors, d.duplicates, result.summary.duration_s
    ));
    if let Some(r) = &d.rtt {
        t.push_str(&format!(
            "rtt min/avg/max/mdev = {:.3}/{:.3}/{:.3}/{:.3} ms\n",
            r.min_us / 1e3,
            r.avg_us / 1e3,
            r.max_us / 1e3,
            r.mdev_us / 1e3
        ));
    }
    if let Some(p) = &d.percentiles {
        t.push_str(&format!(
            "rtt p50/p90/p99 = {:.3}/{:.3}/{:.3} ms\n",
            p.p50_us / 1e3,
            p.p90_us / 1e3,
            p.p99_us / 1e3
        ));
    }
    t
}
