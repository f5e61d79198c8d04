use goodput_core::result::{ConnectionRecord, Interval, Outcome};
use goodput_core::units::format_bits_per_second;

/// The legend printed before the status header.
pub fn status_legend() -> &'static str {
    "Legend:\n\
     * TimeSlice - seconds since the run started, at the end of the interval\n\
     * SendBps / RecvBps - bytes per second sent / received within the interval (all bytes on every socket)\n\
     * In-Flight - connections doing pattern I/O at the end of the interval\n\
     * Completed / NetError / DataError - connections so far that succeeded / failed on a socket error / failed on a protocol or data error\n\
     * Send / Recv - the same rates in bits per second\n"
}

/// The legend for QUIC perf runs, whose columns count streams (requests).
pub(crate) fn quic_status_legend() -> &'static str {
    "Legend:\n\
     * TimeSlice - seconds since the run started, at the end of the interval\n\
     * SendBps / RecvBps - stream bytes per second sent / received within the interval\n\
     * In-Flight - requests (streams) under way at the end of the interval\n\
     * Completed / NetError / DataError - requests (streams) so far that completed / (always 0: a lost connection fails its streams) / failed\n\
     * Send / Recv - the same rates in bits per second\n"
}

/// The status header, ctsTraffic's columns (each ending where ctsTraffic's
/// does) followed by the rates in bits per second.
pub fn status_header() -> String {
    format!(
        "{:>10}{:>13}{:>13}{:>11}{:>11}{:>10}{:>11}{:>15}{:>15}",
        "TimeSlice", "SendBps", "RecvBps", "In-Flight", "Completed", "NetError", "DataError", "Send", "Recv"
    )
}

/// One status line under [`status_header`].
pub fn status_line(iv: &Interval) -> String {
    format!(
        "{:>10.3}{:>13}{:>13}{:>11}{:>11}{:>10}{:>11}{:>15}{:>15}",
        iv.time_slice_s,
        iv.send_bytes_per_second,
        iv.recv_bytes_per_second,
        iv.in_flight,
        iv.completed,
        iv.network_errors,
        iv.data_errors,
        format_bits_per_second(iv.send_bytes_per_second as f64),
        format_bits_per_second(iv.recv_bytes_per_second as f64),
    )
}

/// ctsTraffic's text line for a finished connection (its UDP form for a
/// media stream).
pub fn connection_line(r: &ConnectionRecord) -> String {
    if let Some(m) = &r.media {
        return crate::media::media_connection_line(r, m);
    }
    let head = format!(
        "[{:.3}] {} connection {} [{} - {}] [{}]",
        r.time_slice_s,
        if r.quic.is_some() { "QUIC" } else { "TCP" },
        match r.outcome {
            Outcome::Succeeded => "succeeded :".to_owned(),
            Outcome::Aborted { .. } => "aborted :".to_owned(),
            _ => format!("failed with {} :", r.outcome.label()),
        },
        r.local_address,
        r.remote_address,
        r.connection_id
    );
    format!(
        "{head}: SendBytes[{}] SendBps[{:.0}] RecvBytes[{}] RecvBps[{:.0}] Time[{:.3} ms]",
        r.sent_bytes,
        r.send_bytes_per_second(),
        r.received_bytes,
        r.recv_bytes_per_second(),
        r.elapsed_ns as f64 / 1e6
    )
}

/// The error text of a failed connection, or `None` when it did not fail.
pub(crate) fn error_text(r: &ConnectionRecord) -> Option<String> {
    let detail = match &r.outcome {
        Outcome::Succeeded | Outcome::Aborted { .. } => return None,
        Outcome::NetworkError {
            during,
            name,
            message,
            ..
        } => format!("{name} during {during}: {message}"),
        Outcome::ProtocolError { kind, message, .. } => format!("{}: {message}", kind.cts_name()),
    };
    Some(format!(
        "[{:.3}] connection {} [{} - {}]{}: {detail}",
        r.time_slice_s,
        r.index,
        if r.local_address.is_empty() {
            "unbound"
        } else {
            &r.local_address
        },
        r.remote_address,
        if r.connection_id.is_empty() {
            String::new()
        } else {
            format!(" [{}]", r.connection_id)
        },
    ))
}

/// Microseconds as milliseconds with 3 decimals, or `missing` when absent
/// (`-` in aligned text, empty in CSV).
pub(crate) fn ms_or(us: Option<f64>, missing: &str) -> String {
    us.map_or(missing.to_owned(), |v| format!("{:.3}", v / 1e3))
}

/// A CSV cell: quoted when it holds a comma, quote or newline.
pub(crate) fn csv_cell(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_columns_end_where_ctstraffic_does() {
        let h = status_header();
        for (name, end) in [
            ("TimeSlice", 10),
            ("SendBps", 23),
            ("RecvBps", 36),
            ("In-Flight", 47),
            ("Completed", 58),
            ("NetError", 68),
            ("DataError", 79),
        ] {
            let at = h.find(name).unwrap() + name.len();
            assert_eq!(at, end, "{name}");
        }
        let line = status_line(&Interval {
            time_slice_s: 5.0,
            send_bytes_per_second: 1_250_000_000,
            recv_bytes_per_second: 12,
            in_flight: 8,
            completed: 3,
            network_errors: 0,
            data_errors: 1,
            stamp: None,
            echo: None,
            media: None,
        });
        assert!(line.contains("10.00 Gbit/s"), "{line}");
        assert_eq!(&line[..10], "     5.000");
        assert_eq!(&line[68..79], "          1");
    }

    #[test]
    fn csv_cells_quote_commas() {
        assert_eq!(csv_cell("a,b"), "\"a,b\"");
        assert_eq!(csv_cell("plain"), "plain");
        assert_eq!(csv_cell("x\"y,"), "\"x\"\"y,\"");
    }
}
