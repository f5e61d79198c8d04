//! The server's end-of-run lines: what each service besides the TCP test
//! port did, read from the result's counters.

use goodput_core::result::TestResult;

/// One line per service that has something to say: admission when it
/// refused anything or caught a panic, and the counters of the simple
/// services, the STAMP reflector, the media service (once it saw traffic)
/// and the QUIC perf service.
pub fn server_service_lines(result: &TestResult) -> Vec<String> {
    let mut lines = Vec::new();
    if let Some(a) = result.admission() {
        let refused = a.refused_total + a.refused_per_client + a.reset_pending + a.hello_timeouts;
        if refused > 0 || a.internal_errors > 0 {
            lines.push(format!(
                "Admission (TCP services): {} connections admitted; refused: {} over the total limit, \
                 {} over the per-client limit, {} reset with too many in their hello, {} hellos or TLS \
                 handshakes too slow; {} internal errors",
                a.admitted,
                a.refused_total,
                a.refused_per_client,
                a.reset_pending,
                a.hello_timeouts,
                a.internal_errors
            ));
        }
    }
    if let Some(c) = result.services() {
        lines.push(format!(
            "Simple services: discard {} connections, {} datagrams, {} B; echo {} connections, {} B; \
             {} failed TLS handshakes",
            c.discard_connections,
            c.discard_datagrams,
            c.discard_bytes,
            c.echo_connections,
            c.echo_bytes,
            c.tls_handshake_failures
        ));
    }
    if let Some(c) = result.stamp_reflector() {
        lines.push(format!(
            "STAMP reflector: {} received, {} reflected ({} short requests answered), \
             dropped: {} under 14 B, {} over 9000 B, {} by the ACL, {} by the rate limit; \
             {} with malformed TLVs, {} send errors, {} stateful sessions, {} internal errors",
            c.received,
            c.reflected,
            c.short_answered,
            c.too_short,
            c.oversized,
            c.denied,
            c.rate_limited,
            c.malformed_tlvs,
            c.send_errors,
            c.sessions,
            c.internal_errors
        ));
    }
    if let Some(c) = result.media_server() {
        if c.accepted > 0 || c.challenged > 0 || c.unsolicited > 0 {
            lines.push(format!(
                "UDP media service: {} streams accepted ({} completed, {} stopped when their reports \
                 stopped), {} refused ({} over a request limit, {} for the memory budget, {} for their \
                 address's share), {} challenges sent; {} data datagrams sent ({} send errors), \
                 {} received; {} unsolicited or malformed datagrams dropped; {} internal errors",
                c.accepted,
                c.completed,
                c.abandoned,
                c.rejected,
                c.rejected_limits,
                c.rejected_memory,
                c.rejected_per_client,
                c.challenged,
                c.sent,
                c.send_errors,
                c.received,
                c.unsolicited,
                c.internal_errors
            ));
        }
    }
    if let Some(c) = result.ndt7_server() {
        lines.push(crate::ndt7::ndt7_server_line(c));
    }
    if let Some(c) = result.quic_server() {
        lines.push(format!(
            "QUIC perf service: {} connections ({} refused, {} failed handshakes, {} handshakes \
             timed out, {} internal errors; {} Retry packets sent, {} Initials dropped), {} streams \
             ({} media, {} ended inside their header, {} refused, {} stopped by the client); \
             {} B received, {} B sent, {} datagrams",
            c.connections,
            c.refused_connections,
            c.handshake_failures,
            c.handshake_timeouts,
            c.internal_errors,
            c.retries_sent,
            c.dropped_initials,
            c.streams,
            c.media_streams,
            c.short_requests,
            c.refused_streams,
            c.stopped,
            c.bytes_received,
            c.bytes_sent,
            c.datagrams_sent
        ));
    }
    lines
}
