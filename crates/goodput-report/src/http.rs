//! The console summaries of `goodput http` and `goodput tls`.

use goodput_core::http::{HttpDetail, HttpHop, TlsDetail, TlsFacts};
use goodput_core::result::TestResult;

fn opt_ms(v: Option<f64>) -> String {
    v.map_or("-".to_owned(), |v| format!("{v:.3}"))
}

fn hop_line(h: &HttpHop) -> String {
    let mut t = format!(
        "  {} {} → {}  dns {} connect {} tls {} first byte {} transfer {} ms, {} body bytes{}\n",
        h.version.as_deref().unwrap_or("-"),
        h.url,
        h.status.map_or("no response".to_owned(), |s| s.to_string()),
        opt_ms(h.dns_ms),
        opt_ms(h.connect_ms),
        opt_ms(h.tls_ms),
        opt_ms(h.first_byte_ms),
        opt_ms(h.transfer_ms),
        h.body_bytes,
        if h.cut { " (cut at `max_body`)" } else { "" }
    );
    if let Some(e) = &h.error {
        t.push_str(&format!("    error: {e}\n"));
    }
    t
}

/// TLS facts, a few lines.
pub(crate) fn facts_lines(f: &TlsFacts) -> String {
    let mut t = format!(
        "  TLS   : {} {}{}\n",
        f.protocol,
        f.cipher,
        f.alpn
            .as_deref()
            .map(|a| format!(", ALPN {a}"))
            .unwrap_or_default()
    );
    t.push_str(&format!(
        "  Chain : {} ({} certificates){}\n",
        if f.chain_valid { "valid" } else { "NOT valid" },
        f.chain_length,
        f.verify_error
            .as_deref()
            .map(|e| format!(": {e}"))
            .unwrap_or_default()
    ));
    t.push_str(&format!("  Leaf  : subject {}; issuer {}\n", f.subject, f.issuer));
    if !f.names.is_empty() {
        t.push_str(&format!("  Names : {}\n", f.names.join(", ")));
    }
    t.push_str(&format!(
        "  Expiry: the leaf in {:.1} days, the first of the chain in {:.1} days\n",
        f.days_left, f.chain_days_left
    ));
    t
}

/// `goodput http`'s summary: each request's hops, its verdict, and the
/// medians.
pub(crate) fn http_summary(result: &TestResult, d: &HttpDetail) -> String {
    let mut t = format!("--- {} ---\n", d.url);
    let many = d.exchanges.len() > 1;
    for (i, ex) in d.exchanges.iter().enumerate() {
        if many {
            t.push_str(&format!("request {}: {:.3} ms\n", i + 1, ex.total_ms));
        }
        for h in &ex.hops {
            t.push_str(&hop_line(h));
        }
        if let Some(m) = &ex.mismatch {
            t.push_str(&format!("  check failed: {m}\n"));
        }
    }
    if let Some(f) = d.tls() {
        t.push_str(&facts_lines(f));
    }
    t.push_str(&format!(
        "{} requests, {} completed, {} passed their checks, time {:.3} s\n",
        result.summary.successful + result.summary.network_errors,
        d.completed,
        d.matched,
        result.summary.duration_s
    ));
    if let Some(total) = d.median_total_ms() {
        t.push_str(&format!(
            "median ms: dns {} connect {} tls {} first byte {} transfer {} total {:.3}\n",
            opt_ms(d.median_ms(|h| h.dns_ms)),
            opt_ms(d.median_ms(|h| h.connect_ms)),
            opt_ms(d.median_ms(|h| h.tls_ms)),
            opt_ms(d.median_ms(|h| h.first_byte_ms)),
            opt_ms(d.median_ms(|h| h.transfer_ms)),
            total
        ));
    }
    t
}

/// `goodput tls`'s summary.
pub(crate) fn tls_summary(d: &TlsDetail) -> String {
    let mut t = format!(
        "--- {} ({}, name {}) ---\n  dns {} connect {} handshake {} ms\n",
        d.target,
        d.address.as_deref().unwrap_or("-"),
        d.server_name,
        opt_ms(d.dns_ms),
        opt_ms(d.connect_ms),
        opt_ms(d.handshake_ms)
    );
    if let Some(f) = &d.facts {
        t.push_str(&facts_lines(f));
    }
    if let Some(e) = &d.error {
        t.push_str(&format!("  error: {e}\n"));
    }
    t
}
