//! UDP media-stream views: ctsTraffic's UDP status columns with goodput's
//! loss and jitter after them, the connection records, the summary and the
//! per-datagram jitter file.

use std::io::{self, Write};
use std::path::Path;

use goodput_core::result::{
    ConnectionRecord, DelayStats, IpdvStats, MediaDatagram, MediaDetail, MediaInterval, MediaStats, Outcome,
    TestResult,
};
use goodput_core::units::format_bits_per_second;

/// The legend printed before the media status header.
pub fn media_legend() -> &'static str {
    "Legend:\n\
     * TimeSlice - seconds since the run started, at the end of the interval\n\
     * Bits/Sec - bits received per second in the interval (sent, when uploading), headers included\n\
     * Streams - streams open now\n\
     * Completed / Dropped / Repeated - frames played in the interval: whole, short, with a datagram twice\n\
     * Errors - datagrams out of the stream or its window, or with a payload that failed the pattern\n\
     * Lost - datagrams found missing in the interval; Jitter - RFC 3550 interarrival jitter, milliseconds\n"
}

/// The media status header (ctsTraffic's UDP columns, then goodput's).
pub fn media_header() -> String {
    format!(
        "{:>10}{:>15}{:>11}{:>12}{:>10}{:>11}{:>10}{:>9}{:>11}",
        "TimeSlice", "Bits/Sec", "Streams", "Completed", "Dropped", "Repeated", "Errors", "Lost", "Jitter_ms"
    )
}

/// One media status line.
pub fn media_line(iv: &goodput_core::result::Interval, m: &MediaInterval) -> String {
    format!(
        "{:>10.3}{:>15}{:>11}{:>12}{:>10}{:>11}{:>10}{:>9}{:>11.3}",
        iv.time_slice_s,
        m.bits_per_second,
        m.streams,
        m.completed,
        m.dropped,
        m.repeated,
        m.errors,
        m.lost,
        m.jitter_us / 1e3
    )
}

/// CSV columns the status file adds for media runs.
pub(crate) const MEDIA_CSV_COLUMNS: &str =
    "Bits/Sec,Streams,Completed,Dropped,Repeated,Errors,Received,Lost,Jitter_ms";

/// The media CSV cells of one interval.
pub(crate) fn media_csv(m: &MediaInterval) -> String {
    format!(
        "{},{},{},{},{},{},{},{},{:.3}",
        m.bits_per_second,
        m.streams,
        m.completed,
        m.dropped,
        m.repeated,
        m.errors,
        m.received,
        m.lost,
        m.jitter_us / 1e3
    )
}

/// The connection CSV header of media runs: ctsTraffic's UDP columns, then
/// goodput's.
pub const MEDIA_CONNECTION_CSV_HEADER: &str =
    "TimeSlice,LocalAddress,RemoteAddress,Bits/Sec,Completed,Dropped,Repeated,Errors,Result,ConnectionId,\
Index,TimeMs,SentDatagrams,ReceivedDatagrams,LostDatagrams,Loss_percent,Duplicates,Reordered,Late,Corrupt,\
Jitter_us,IpdvP99Abs_us,DelayVariationP99_us,ErrorDetail";

/// Bits per second of a stream: what it received, or sent when uploading.
fn stream_bits_per_second(r: &ConnectionRecord) -> f64 {
    let bytes = r.received_bytes.max(r.sent_bytes);
    if r.elapsed_ns == 0 {
        0.0
    } else {
        bytes as f64 * 8e9 / r.elapsed_ns as f64
    }
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map(|v| v.to_string()).unwrap_or_default()
}

/// The CSV cells of one stream.
pub(crate) fn media_connection_cells(
    r: &ConnectionRecord,
    m: Option<&MediaStats>,
    detail: String,
) -> Vec<String> {
    let d = MediaStats::default();
    let s = m.unwrap_or(&d);
    vec![
        format!("{:.3}", r.time_slice_s),
        r.local_address.clone(),
        r.remote_address.clone(),
        format!("{:.0}", stream_bits_per_second(r)),
        s.frames_completed.to_string(),
        s.frames_dropped.to_string(),
        s.frames_repeated.to_string(),
        (s.errors + s.corrupt).to_string(),
        r.outcome.label(),
        r.connection_id.clone(),
        r.index.to_string(),
        format!("{:.3}", r.elapsed_ns as f64 / 1e6),
        opt(s.sent),
        s.received.to_string(),
        s.lost.to_string(),
        format!("{:.3}", s.loss_percent),
        s.duplicates.to_string(),
        s.reordered.to_string(),
        s.late.to_string(),
        s.corrupt.to_string(),
        format!("{:.1}", s.jitter_us),
        opt(s.ipdv.map(|i| format!("{:.1}", i.p99_abs_us))),
        opt(s.delay_variation.map(|d| format!("{:.1}", d.p99_us))),
        detail,
    ]
}

/// The text line of one ended stream.
pub(crate) fn media_connection_line(r: &ConnectionRecord, s: &MediaStats) -> String {
    format!(
        "[{:.3}] UDP stream {} [{} - {}] [{}]: Bits/Sec[{:.0}] Completed[{}] Dropped[{}] Repeated[{}] Errors[{}] \
         Lost[{} of {}] Jitter[{:.3} ms] Time[{:.3} ms]",
        r.time_slice_s,
        match r.outcome {
            Outcome::Succeeded => "succeeded :".to_owned(),
            Outcome::Aborted { .. } => "aborted :".to_owned(),
            _ => format!("failed with {} :", r.outcome.label()),
        },
        r.local_address,
        r.remote_address,
        r.connection_id,
        stream_bits_per_second(r),
        s.frames_completed,
        s.frames_dropped,
        s.frames_repeated,
        s.errors + s.corrupt,
        s.lost,
        s.sent.map_or_else(|| "?".to_string(), |n| n.to_string()),
        s.jitter_us / 1e3,
        r.elapsed_ns as f64 / 1e6
    )
}

/// A share in percent with its sign and three decimals, as every other
/// percentage on the console.
fn share(n: u64, of: u64) -> String {
    if of == 0 {
        "0.000%".into()
    } else {
        format!("{:.3}%", n as f64 * 100.0 / of as f64)
    }
}

fn ipdv_text(i: &IpdvStats) -> String {
    format!(
        "min {:.3} / median {:.3} / max {:.3} ms, 99% within ±{:.3} ms (n={})",
        i.min_us / 1e3,
        i.median_us / 1e3,
        i.max_us / 1e3,
        i.p99_abs_us / 1e3,
        i.count
    )
}

fn pdv_text(d: &DelayStats) -> String {
    format!(
        "median {:.3} / p90 {:.3} / p99 {:.3} / max {:.3} ms above the fastest datagram (n={})",
        d.median_us / 1e3,
        d.p90_us / 1e3,
        d.p99_us / 1e3,
        d.max_us / 1e3,
        d.count
    )
}

/// The end-of-run media summary.
pub(crate) fn summary(r: &TestResult, d: &MediaDetail) -> String {
    let s = &r.summary;
    let t = &d.total;
    let mut o = String::new();
    o.push_str("  Historic Connection Statistics (all connections over the complete lifetime)\n");
    o.push_str(&format!(
        "  SuccessfulConnections [{}]   NetworkErrors [{}]   ProtocolErrors [{}]   Aborted [{}]\n",
        s.successful, s.network_errors, s.data_errors, s.aborted
    ));
    o.push_str(&format!(
        "\n--- UDP media: {} stream(s) {} {}, {} at {} fps for {} s ---\n",
        d.streams,
        if d.upload { "to" } else { "from" },
        r.settings.addresses.join(", "),
        format_bits_per_second(d.bits_per_second as f64 / 8.0),
        d.frame_rate,
        d.length_s
    ));
    o.push_str(&format!(
        "  Plan: {} frames of {} B ({} datagrams of at most {} B), {} ms play-out buffer, payloads {}\n",
        d.frames,
        d.frame_bytes,
        d.datagrams_per_frame,
        d.datagram_bytes,
        d.buffer_depth_ms,
        if d.verify_data { "verified" } else { "not verified" }
    ));
    if let Some(b) = t.received_bytes {
        o.push_str(&format!("  Total Bytes Recv : {b}\n"));
    }
    let frames = t.frames_completed + t.frames_dropped + t.frames_repeated;
    let errors = t.errors + t.corrupt;
    let all = frames + errors;
    o.push_str(&format!(
        "  Total Successful Frames : {} ({}) / Total Dropped Frames : {} ({})\n",
        t.frames_completed,
        share(t.frames_completed, all),
        t.frames_dropped,
        share(t.frames_dropped, all)
    ));
    o.push_str(&format!(
        "  Total Duplicate Frames : {} ({}) / Total Error Frames : {} ({})   (shares of all four)\n",
        t.frames_repeated,
        share(t.frames_repeated, all),
        errors,
        share(errors, all)
    ));
    // Datagrams that could not be sent are planned and lost: the line
    // says so before the loss that counts them.
    let refused = t.send_errors.filter(|_| t.sent.is_some()).unwrap_or(0);
    let not_sent = if refused > 0 {
        let why = if t.send_failures.is_empty() {
            String::new()
        } else {
            format!(
                " ({})",
                goodput_core::result::SendFailure::describe(&t.send_failures)
            )
        };
        format!(
            "{} planned, {} sent, {refused} could not be sent{why}, ",
            t.sent.unwrap_or(0).saturating_add(refused),
            t.sent.unwrap_or(0)
        )
    } else {
        format!(
            "{} sent, ",
            t.sent.map_or_else(|| "?".to_string(), |n| n.to_string())
        )
    };
    o.push_str(&format!(
        "  Datagrams: {not_sent}{} received, {} lost ({:.3}%{}), {} duplicated, {} reordered ({:.3}%{}), {} late, {} corrupt, {} errors{}\n",
        t.received,
        t.lost.saturating_add(refused),
        t.loss_percent,
        if refused > 0 {
            format!(": {refused} not sent, {} in the network", t.lost)
        } else {
            String::new()
        },
        t.duplicates,
        t.reordered,
        t.reordered_percent,
        match (t.reorder_extent_mean, t.reorder_extent_max) {
            (Some(m), Some(x)) if t.reordered > 0 => format!(", extent mean {m:.1} max {x}"),
            _ => String::new(),
        },
        t.late,
        t.corrupt,
        t.errors,
        match t.send_errors {
            Some(e) if refused == 0 => format!(", {e} send errors"),
            _ => String::new(),
        },
    ));
    o.push_str(&format!("  Jitter (RFC 3550): {:.3} ms\n", t.jitter_us / 1e3));
    if let Some(i) = &t.ipdv {
        o.push_str(&format!("  IPDV (RFC 3393): {}\n", ipdv_text(i)));
    }
    if let Some(p) = &t.delay_variation {
        o.push_str(&format!("  Delay variation (RFC 5481): {}\n", pdv_text(p)));
    }
    if d.upload {
        o.push_str("  (frame, loss and jitter figures are the server's, from its last report)\n");
    }
    o.push_str(&format!("  Total Time : {:.0} ms.\n", s.duration_s * 1e3));
    o
}

/// `--jitter-file`: one CSV row per received datagram.
pub struct JitterFile {
    out: crate::sink::Output,
    /// The first write error, kept for `finish`.
    error: Option<io::Error>,
}

/// The jitter file's header.
pub const JITTER_CSV_HEADER: &str =
    "Stream,Sequence,Frame,SendTime_ns,RecvTime_unix_ns,RelativeInFlight_us,Ipdv_us,Arrival";

impl JitterFile {
    /// Creates (truncates) the file and writes its header.
    pub fn create(path: &Path) -> io::Result<Self> {
        let mut out = crate::sink::open_output(path, false)?;
        writeln!(out, "{JITTER_CSV_HEADER}")?;
        Ok(Self { out, error: None })
    }

    /// Writes one datagram's row; the first error is kept for `finish`
    /// (the sink that calls this cannot stop the stream).
    pub fn record(&mut self, d: &MediaDatagram) {
        if self.error.is_none() {
            if let Err(e) = self.write(d) {
                self.error = Some(e);
            }
        }
    }

    /// Flushes; the first error of any write, if one failed.
    pub fn finish(&mut self) -> io::Result<()> {
        match self.error.take() {
            Some(e) => Err(e),
            None => self.out.flush(),
        }
    }

    /// Writes one datagram's row.
    pub fn write(&mut self, d: &MediaDatagram) -> io::Result<()> {
        writeln!(
            self.out,
            "{:08x},{},{},{},{},{:.3},{},{}",
            d.stream,
            d.seq,
            d.frame,
            d.sent_ns,
            d.recv_unix_ns,
            d.relative_delay_ns as f64 / 1e3,
            d.ipdv_ns
                .map_or(String::new(), |v| format!("{:.3}", v as f64 / 1e3)),
            d.arrival
        )
    }
}

impl Drop for JitterFile {
    fn drop(&mut self) {
        let _ = self.out.flush();
    }
}
