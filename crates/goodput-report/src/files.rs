use std::io::{self, Write};
use std::path::Path;

use goodput_core::result::{ConnectionRecord, Interval, Outcome, TestResult};
use serde_json::json;

use crate::format::{connection_line, csv_cell, error_text, status_header, status_legend, status_line};
use crate::sink::{open_output, Output};
use crate::View;

fn is_csv(path: &Path) -> bool {
    path.extension().is_some_and(|e| e.eq_ignore_ascii_case("csv"))
}

fn create(path: &Path) -> io::Result<Output> {
    open_output(path, false)
}

/// `--status-file`: one row per interval, CSV for `.csv` names, otherwise the
/// console's aligned text with its legend.
pub struct StatusFile {
    out: Output,
    csv: bool,
    /// The header waits for the first interval: a STAMP run has other columns.
    header: bool,
}

impl StatusFile {
    /// Creates (truncates) the file; the header is written with the first
    /// interval.
    pub fn create(path: &Path) -> io::Result<Self> {
        let csv = is_csv(path);
        let out = create(path)?;
        Ok(Self {
            out,
            csv,
            header: false,
        })
    }
}

const STATUS_CSV_COLUMNS: &str = "TimeSlice,SendBps,RecvBps,In-Flight,Completed,NetError,DataError";

impl View for StatusFile {
    fn interval(&mut self, iv: &Interval) -> io::Result<()> {
        if !self.header {
            self.header = true;
            let (legend, header, extra) = if iv.media.is_some() {
                (
                    crate::media::media_legend(),
                    crate::media::media_header(),
                    crate::media::MEDIA_CSV_COLUMNS,
                )
            } else if iv.stamp.is_some() {
                (
                    crate::stamp::stamp_legend(),
                    crate::stamp::stamp_header(),
                    crate::stamp::STAMP_CSV_COLUMNS,
                )
            } else if iv.echo.is_some() {
                (
                    crate::echo::echo_legend(),
                    crate::echo::echo_header(),
                    crate::echo::ECHO_CSV_COLUMNS,
                )
            } else {
                (status_legend(), status_header(), "")
            };
            if self.csv && extra.is_empty() {
                writeln!(self.out, "{STATUS_CSV_COLUMNS}")?;
            } else if self.csv {
                writeln!(self.out, "{STATUS_CSV_COLUMNS},{extra}")?;
            } else {
                writeln!(self.out, "{legend}{header}")?;
            }
        }
        if self.csv {
            write!(
                self.out,
                "{:.3},{},{},{},{},{},{}",
                iv.time_slice_s,
                iv.send_bytes_per_second,
                iv.recv_bytes_per_second,
                iv.in_flight,
                iv.completed,
                iv.network_errors,
                iv.data_errors
            )?;
            match (&iv.stamp, &iv.echo) {
                _ if iv.media.is_some() => {
                    let m = iv.media.as_ref().expect("checked");
                    writeln!(self.out, ",{}", crate::media::media_csv(m))?
                }
                (Some(st), _) => writeln!(self.out, ",{}", crate::stamp::stamp_csv(st))?,
                (None, Some(e)) => writeln!(self.out, ",{}", crate::echo::echo_csv(e))?,
                (None, None) => writeln!(self.out)?,
            }
        } else {
            match (&iv.stamp, &iv.echo) {
                _ if iv.media.is_some() => {
                    let m = iv.media.as_ref().expect("checked");
                    writeln!(self.out, "{}", crate::media::media_line(iv, m))?
                }
                (Some(st), _) => writeln!(self.out, "{}", crate::stamp::stamp_line(iv, st))?,
                (None, Some(e)) => writeln!(self.out, "{}", crate::echo::echo_line(iv, e))?,
                (None, None) => writeln!(self.out, "{}", status_line(iv))?,
            }
        }
        // Each line reaches the disk as it happens, so a killed run keeps it.
        self.out.flush()
    }
    fn finish(&mut self, _: &TestResult) -> io::Result<()> {
        self.out.flush()
    }
}

/// `--connection-file`: one record per connection.
pub struct ConnectionFile {
    out: Output,
    csv: bool,
    /// The CSV header waits for the first record: media streams have
    /// ctsTraffic's UDP columns.
    header: bool,
}

/// The connection CSV header: ctsTraffic's ten columns, then goodput's.
pub const CONNECTION_CSV_HEADER: &str = "TimeSlice,LocalAddress,RemoteAddress,SendBytes,SendBps,RecvBytes,RecvBps,TimeMs,Result,ConnectionId,\
Index,Pattern,TransferBytes,BufferBytes,RateLimitBps,Shutdown,PeerSendBytes,PeerRecvBytes,PeerResult,ErrorDetail,\
RttUs,RttVarUs,MinRttUs,CwndSegments,MssBytes,RetransSegments,BytesRetransmitted,DeliveryRateBps,PacingRateBps";

impl ConnectionFile {
    /// Creates (truncates) the file; a CSV header is written with the
    /// first record (or at the end, when there was none).
    pub fn create(path: &Path) -> io::Result<Self> {
        let csv = is_csv(path);
        let mut out = create(path)?;
        out.flush()?;
        Ok(Self {
            out,
            csv,
            header: false,
        })
    }

    fn header(&mut self, media: bool) -> io::Result<()> {
        if self.csv && !self.header {
            self.header = true;
            let h = if media {
                crate::media::MEDIA_CONNECTION_CSV_HEADER
            } else {
                CONNECTION_CSV_HEADER
            };
            writeln!(self.out, "{h}")?;
        }
        Ok(())
    }
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map(|v| v.to_string()).unwrap_or_default()
}

impl View for ConnectionFile {
    fn connection(&mut self, r: &ConnectionRecord) -> io::Result<()> {
        let media = r.media.is_some();
        if !self.csv {
            writeln!(self.out, "{}", connection_line(r))?;
            return self.out.flush();
        }
        self.header(media)?;
        let detail = match &r.outcome {
            Outcome::NetworkError { message, .. } | Outcome::ProtocolError { message, .. } => message.clone(),
            Outcome::Aborted { reason } => reason.clone(),
            Outcome::Succeeded => String::new(),
        };
        if media {
            let cells = crate::media::media_connection_cells(r, r.media.as_ref(), detail);
            let line: Vec<String> = cells.iter().map(|c| csv_cell(c)).collect();
            writeln!(self.out, "{}", line.join(","))?;
            return self.out.flush();
        }
        let ti = r.tcp_info;
        let cells = [
            format!("{:.3}", r.time_slice_s),
            r.local_address.clone(),
            r.remote_address.clone(),
            r.sent_bytes.to_string(),
            format!("{:.0}", r.send_bytes_per_second()),
            r.received_bytes.to_string(),
            format!("{:.0}", r.recv_bytes_per_second()),
            format!("{:.3}", r.elapsed_ns as f64 / 1e6),
            r.outcome.label(),
            r.connection_id.clone(),
            r.index.to_string(),
            opt(r.pattern.map(|p| p.name())),
            r.transfer_bytes.to_string(),
            r.buffer_bytes.to_string(),
            r.rate_limit_bytes_per_second.to_string(),
            opt(r.shutdown.map(|s| format!("{s:?}").to_lowercase())),
            opt(r.peer.as_ref().map(|p| p.sent_bytes)),
            opt(r.peer.as_ref().map(|p| p.received_bytes)),
            opt(r.peer.as_ref().map(|p| p.outcome.label())),
            detail,
            opt(ti.map(|t| t.rtt_us)),
            opt(ti.map(|t| t.rttvar_us)),
            opt(ti.and_then(|t| t.min_rtt_us)),
            opt(ti.map(|t| t.snd_cwnd_segments)),
            opt(ti.map(|t| t.snd_mss_bytes)),
            opt(ti.map(|t| t.total_retrans_segments)),
            opt(ti.and_then(|t| t.bytes_retrans)),
            opt(ti.and_then(|t| t.delivery_rate_bytes_per_second)),
            opt(ti.and_then(|t| t.pacing_rate_bytes_per_second)),
        ];
        let line: Vec<String> = cells.iter().map(|c| csv_cell(c)).collect();
        writeln!(self.out, "{}", line.join(","))?;
        self.out.flush()
    }
    fn finish(&mut self, result: &TestResult) -> io::Result<()> {
        self.header(result.media().is_some())?;
        self.out.flush()
    }
}

/// `--error-file`: one text line per failed connection.
pub struct ErrorFile {
    out: Output,
}

impl ErrorFile {
    /// Creates (truncates) the file. A `.csv` name is refused: the error log
    /// is text, as in ctsTraffic.
    pub fn create(path: &Path) -> io::Result<Self> {
        if is_csv(path) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{}: the error log is text; use another extension", path.display()),
            ));
        }
        Ok(Self { out: create(path)? })
    }
}

impl View for ErrorFile {
    fn connection(&mut self, r: &ConnectionRecord) -> io::Result<()> {
        if let Some(line) = error_text(r) {
            writeln!(self.out, "{line}")?;
            self.out.flush()?;
        }
        Ok(())
    }
    fn notice(&mut self, text: &str) -> io::Result<()> {
        writeln!(self.out, "{text}")
    }
    fn finish(&mut self, _: &TestResult) -> io::Result<()> {
        self.out.flush()
    }
}

/// `--json-stream`: JSON lines of intervals and connections as they happen,
/// then the summary.
pub struct JsonStream {
    out: Output,
}

impl JsonStream {
    /// Streams to `path`, or to standard output for `-`.
    pub fn create(path: &Path) -> io::Result<Self> {
        Ok(Self { out: create(path)? })
    }

    fn line(&mut self, v: serde_json::Value) -> io::Result<()> {
        serde_json::to_writer(&mut self.out, &v).map_err(io::Error::other)?;
        self.out.write_all(b"\n")?;
        self.out.flush()
    }
}

impl View for JsonStream {
    fn interval(&mut self, iv: &Interval) -> io::Result<()> {
        self.line(json!({"event": "interval", "interval": iv}))
    }
    fn connection(&mut self, r: &ConnectionRecord) -> io::Result<()> {
        self.line(json!({"event": "connection", "connection": r}))
    }
    fn hop(&mut self, hop: &goodput_core::path::TraceHop) -> io::Result<()> {
        self.line(json!({"event": "hop", "hop": hop}))
    }
    fn ping_reply(&mut self, r: &goodput_core::path::PingReply) -> io::Result<()> {
        self.line(json!({"event": "ping", "reply": r}))
    }
    fn finish(&mut self, result: &TestResult) -> io::Result<()> {
        let mut end = json!({
            "event": "end",
            "schema_version": result.schema_version,
            "end": result.end,
            "summary": result.summary,
            "stamp": result.stamp().map(|d| &d.total),
            "media": result.media().map(|d| &d.total),
        });
        // The latency kinds' totals, only for their runs (the keys other
        // kinds' end events have are unchanged).
        if let Some(o) = result.owamp() {
            end["owamp"] = json!({"to": o.to, "from": o.from});
        }
        if let Some(t) = result.twamp() {
            end["twamp"] = json!(t.stats);
        }
        self.line(end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use goodput_core::result::{Detail, TestKind};

    fn stamp_fixture() -> TestResult {
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../goodput-archive/tests/fixtures/stamp.json"
        ))
        .unwrap();
        serde_json::from_str(&text).unwrap()
    }

    fn end_event(r: &TestResult) -> serde_json::Value {
        let path = std::env::temp_dir().join(format!(
            "goodput-report-end-{}-{:?}.jsonl",
            std::process::id(),
            r.kind
        ));
        let mut s = JsonStream::create(&path).unwrap();
        s.finish(r).unwrap();
        drop(s);
        let text = std::fs::read_to_string(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        serde_json::from_str(text.lines().last().unwrap()).unwrap()
    }

    #[test]
    fn the_stream_ends_with_the_latency_kinds_totals_and_only_theirs() {
        let stamp = stamp_fixture();
        let total = stamp.stamp().unwrap().total.clone();
        let end = end_event(&stamp);
        assert!(end.get("twamp").is_none() && end.get("owamp").is_none(), "{end}");
        let mut twamp = stamp.clone();
        twamp.kind = TestKind::TwampClient;
        twamp.detail = Detail::Twamp(Box::new(goodput_core::result::TwampDetail {
            mode: "open".into(),
            padding: 27,
            packet_bytes: 41,
            interval_ns: 100_000_000,
            dscp: 0,
            timeout_ms: 2000,
            local_clock: goodput_core::result::ClockState {
                synchronized: false,
                error_us: None,
            },
            sid: "7f000001e95f3a1c0000000000000002".into(),
            stats: total.clone(),
            processing: None,
        }));
        let end = end_event(&twamp);
        assert_eq!(end["twamp"]["sent"], total.sent);
        assert_eq!(end["twamp"]["rtt"]["median_us"], total.rtt.unwrap().median_us);
        assert!(end["stamp"].is_null() && end.get("owamp").is_none(), "{end}");
    }
}
