use std::io::{self, IsTerminal, Write};

use goodput_core::result::{ConnectionRecord, Detail, EndReason, Interval, TestResult};
use goodput_core::units::{format_bits_per_second, format_size};
use indicatif::{ProgressBar, ProgressStyle};

use crate::format::{
    connection_line, error_text, quic_status_legend, status_header, status_legend, status_line,
};
use crate::View;

/// Writes a line to standard output. The console is best-effort: a closed
/// pipe (`goodput … | head`) must neither panic nor stop the run, whose
/// files and exit status do not depend on it.
pub fn console_line(text: &str) {
    let mut out = io::stdout().lock();
    let _ = writeln!(out, "{text}").and_then(|()| out.flush());
}

/// Console verbosity, ctsTraffic's levels: 0 prints nothing at all; 1 status
/// lines; 2 status and errors (the default); 3 connection lines only; 4
/// errors and connection lines; 5 everything. Levels 1-5 also print the
/// settings banner and the summary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verbosity(pub u8);

impl Verbosity {
    fn banner(self) -> bool {
        self.0 >= 1
    }
    fn status(self) -> bool {
        matches!(self.0, 1 | 2 | 5)
    }
    fn errors(self) -> bool {
        matches!(self.0, 2 | 4 | 5)
    }
    fn connections(self) -> bool {
        self.0 >= 3
    }
}

/// The console: banner, status lines (header repeated every 40 lines),
/// connection and error lines, a progress bar on a terminal for finite runs,
/// and the summary.
pub struct ConsoleView {
    verbosity: Verbosity,
    lines: u64,
    bar: Option<ProgressBar>,
    /// The run counts streams, not connections (the QUIC perf client).
    streams: bool,
    /// Failed connections not yet printed, collapsed by what failed.
    errors: ErrorTally,
    /// What to run at the far end, named when a connection is refused.
    peer_hint: Option<String>,
    /// What the status line counts down to.
    progress: Progress,
    /// Bytes moved so far, summed over the intervals (for `progress`).
    moved: f64,
    /// The end of the last interval, seconds since the start.
    last_slice: f64,
    /// Connections completed and failed as of the last interval.
    last_counts: (u64, u64, u64),
}

/// What a run's status line counts towards.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Progress {
    /// Nothing known ahead (a run until stopped, a server).
    None,
    /// A sized run: this many bytes in all, both directions together.
    Bytes(u64),
    /// A timed run: it ends this many seconds after it started.
    Seconds(f64),
}

/// The most different failures kept apart; beyond it each is printed as it
/// comes, so a peer's variety of errors cannot grow the tally.
const MAX_ERROR_KINDS: usize = 64;

/// Failed connections collapsed by what failed and where: the first of a
/// kind, and a count of the rest, printed at the next status line or at
/// the end, so 1,000 refused connects are one line and not 1,000.
#[derive(Debug, Default)]
pub(crate) struct ErrorTally {
    /// One entry per kind of failure, in the order first seen.
    pending: Vec<(FailureKey, Repeats)>,
}

/// What failed, and at which peer.
type FailureKey = (String, String);

/// How many failed so, the time of the last, and the first one's line.
type Repeats = (u64, f64, String);

impl ErrorTally {
    /// Counts a failure; `Some(line)` when it cannot be kept (too many
    /// kinds) and must be printed now.
    pub(crate) fn add(&mut self, r: &ConnectionRecord) -> Option<String> {
        let line = error_text(r)?;
        let key = (failure_of(r), r.remote_address.clone());
        if let Some((_, (n, t, _))) = self.pending.iter_mut().find(|(k, _)| *k == key) {
            *n += 1;
            *t = r.time_slice_s;
            return None;
        }
        if self.pending.len() >= MAX_ERROR_KINDS {
            return Some(line);
        }
        self.pending.push((key, (1, r.time_slice_s, line)));
        None
    }

    /// The lines for the failures counted since the last call: a single
    /// failure as its own line, repeats as one line with their count.
    pub(crate) fn drain(&mut self, hint: Option<&str>) -> Vec<String> {
        self.pending
            .drain(..)
            .map(|((what, peer), (n, t, line))| {
                if n == 1 {
                    return line;
                }
                let advice = match hint {
                    Some(h) if what.starts_with("ECONNREFUSED") => format!(": {h}"),
                    _ => String::new(),
                };
                format!("[{t:.3}] {what} × {n} ({peer}){advice}")
            })
            .collect()
    }
}

/// What failed, without which connection or when: `ECONNREFUSED during
/// connect: Connection refused`.
fn failure_of(r: &ConnectionRecord) -> String {
    use goodput_core::result::Outcome;
    match &r.outcome {
        Outcome::NetworkError {
            during,
            name,
            message,
            ..
        } => {
            // The OS's "(os error 111)" repeats the name.
            let message = message.split(" (os error").next().unwrap_or(message);
            format!("{name} during {during}: {message}")
        }
        Outcome::ProtocolError { kind, message, .. } => format!("{}: {message}", kind.cts_name()),
        _ => r.outcome.label().to_owned(),
    }
}

impl ConsoleView {
    /// A console view; `finite_connections` enables the progress bar (only
    /// when standard error is a terminal).
    pub fn new(verbosity: Verbosity, finite_connections: Option<u64>) -> Self {
        let bar = finite_connections
            .filter(|_| verbosity.0 > 0 && io::stderr().is_terminal())
            .map(|n| {
                let b = ProgressBar::new(n);
                b.set_style(
                    ProgressStyle::with_template("{bar:40} {pos}/{len} connections  {elapsed} {msg}")
                        .expect("valid template"),
                );
                // Redrawn 4 times a second, not only at each status line.
                b.enable_steady_tick(std::time::Duration::from_millis(250));
                b
            });
        Self {
            verbosity,
            lines: 0,
            bar,
            streams: false,
            errors: ErrorTally::default(),
            peer_hint: None,
            progress: Progress::None,
            moved: 0.0,
            last_slice: 0.0,
            last_counts: (0, 0, 0),
        }
    }

    /// What must run at the far end, as a question (``is `goodput server
    /// --echo` running there?``): the line of refused connections ends
    /// with it.
    pub fn peer_hint(&mut self, hint: &str) {
        self.peer_hint = Some(hint.to_owned());
    }

    /// A sized run: the status line shows the bytes done of `total` (both
    /// directions together).
    pub fn progress_bytes(&mut self, total: u64) {
        self.progress = Progress::Bytes(total);
    }

    /// A timed run that ends `seconds` after its start: the status line
    /// shows the time left.
    pub fn progress_seconds(&mut self, seconds: f64) {
        self.progress = Progress::Seconds(seconds);
    }

    /// Prints the failures counted since the last status line.
    fn flush_errors(&mut self) {
        for line in self.errors.drain(self.peer_hint.as_deref()) {
            self.say(&line);
        }
    }

    /// The status line's progress column: `1.50 GiB of 8 GiB` or `7 s left`.
    fn progress_text(&self) -> Option<String> {
        match self.progress {
            Progress::None => None,
            Progress::Bytes(total) => Some(format!(
                "{} of {}",
                plain_size(self.moved.min(total as f64) as u64),
                plain_size(total)
            )),
            Progress::Seconds(end) => Some(format!("{:.0} s left", (end - self.last_slice).max(0.0).ceil())),
        }
    }

    fn say(&self, text: &str) {
        match &self.bar {
            Some(b) => b.suspend(|| console_line(text)),
            None => console_line(text),
        }
    }

    /// Prints the settings banner (key, value pairs).
    pub fn banner(&mut self, title: &str, settings: &[(String, String)]) {
        self.streams = title == goodput_core::quic::CLIENT_TITLE;
        if !self.verbosity.banner() {
            return;
        }
        let mut s = format!("{title}\n");
        let w = settings.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
        for (k, v) in settings {
            s.push_str(&format!("  {k:<w$}  {v}\n"));
        }
        self.say(s.trim_end());
    }
}

/// The progress bar's rates: both directions, whichever way the data goes.
fn bar_message(iv: &Interval) -> String {
    format!(
        "send {}  recv {}",
        format_bits_per_second(iv.send_bytes_per_second as f64),
        format_bits_per_second(iv.recv_bytes_per_second as f64)
    )
}

impl View for ConsoleView {
    fn interval(&mut self, iv: &Interval) -> io::Result<()> {
        let seconds = (iv.time_slice_s - self.last_slice).max(0.0);
        self.moved += (iv.send_bytes_per_second as f64 + iv.recv_bytes_per_second as f64) * seconds;
        self.last_slice = iv.time_slice_s;
        if self.verbosity.errors() {
            self.flush_errors();
        }
        if let Some(b) = &self.bar {
            b.set_position(iv.completed + iv.network_errors + iv.data_errors);
            b.set_message(bar_message(iv));
        }
        if !self.verbosity.status() {
            return Ok(());
        }
        // An idle interval (an idle server, between a client's passes)
        // says nothing the last line did not: no line of zeros.
        let counts = (iv.completed, iv.network_errors, iv.data_errors);
        let idle = iv.stamp.is_none()
            && iv.echo.is_none()
            && iv.media.is_none()
            && iv.send_bytes_per_second == 0
            && iv.recv_bytes_per_second == 0
            && iv.in_flight == 0
            && counts == self.last_counts;
        self.last_counts = counts;
        if idle {
            return Ok(());
        }
        let (legend, header, line) = match (&iv.stamp, &iv.echo) {
            _ if iv.media.is_some() => {
                let m = iv.media.as_ref().expect("checked");
                (
                    crate::media::media_legend(),
                    crate::media::media_header(),
                    crate::media::media_line(iv, m),
                )
            }
            (Some(s), _) => (
                crate::stamp::stamp_legend(),
                crate::stamp::stamp_header(),
                crate::stamp::stamp_line(iv, s),
            ),
            (None, Some(e)) => (
                crate::echo::echo_legend(),
                crate::echo::echo_header(),
                crate::echo::echo_line(iv, e),
            ),
            (None, None) if self.streams => (quic_status_legend(), status_header(), status_line(iv)),
            (None, None) => (status_legend(), status_header(), status_line(iv)),
        };
        // The whole legend only when everything is asked for (-v 5): on
        // every run it is noise. Otherwise one line says where it is.
        if self.lines == 0 {
            if self.verbosity.0 == 5 {
                self.say(legend.trim_end());
            } else {
                self.say("Legend: -v 5 explains the columns");
            }
        }
        let progress = self
            .progress_text()
            .filter(|_| iv.stamp.is_none() && iv.echo.is_none() && iv.media.is_none());
        if self.lines.is_multiple_of(40) {
            match &progress {
                Some(_) => self.say(&format!("{header}  Progress")),
                None => self.say(&header),
            }
        }
        self.lines += 1;
        match progress {
            Some(p) => self.say(&format!("{line}  {p}")),
            None => self.say(&line),
        }
        Ok(())
    }

    fn connection(&mut self, r: &ConnectionRecord) -> io::Result<()> {
        if let Some(b) = &self.bar {
            b.inc(1);
        }
        if self.verbosity.connections() {
            self.say(&connection_line(r));
        } else if self.verbosity.errors() {
            if let Some(e) = self.errors.add(r) {
                self.say(&e);
            }
        }
        Ok(())
    }

    fn wants_established(&self) -> bool {
        self.verbosity.connections()
    }

    fn established(&mut self, _index: u64, local: &str, remote: &str, t: f64) -> io::Result<()> {
        if self.verbosity.connections() {
            self.say(&format!(
                "[{t:.3}] TCP connection established [{local} - {remote}]"
            ));
        }
        Ok(())
    }

    fn hop(&mut self, hop: &goodput_core::path::TraceHop) -> io::Result<()> {
        if self.verbosity.banner() {
            self.say(&crate::path::hop_line(hop));
        }
        Ok(())
    }

    fn ping_reply(&mut self, r: &goodput_core::path::PingReply) -> io::Result<()> {
        if self.verbosity.banner() {
            self.say(&crate::path::ping_line(r));
        }
        Ok(())
    }

    fn notice(&mut self, text: &str) -> io::Result<()> {
        if self.verbosity.0 > 0 {
            match &self.bar {
                Some(b) => b.suspend(|| {
                    let _ = writeln!(io::stderr().lock(), "goodput: {text}");
                }),
                None => {
                    let _ = writeln!(io::stderr().lock(), "goodput: {text}");
                }
            }
        }
        Ok(())
    }

    fn finish(&mut self, result: &TestResult) -> io::Result<()> {
        if let Some(b) = self.bar.take() {
            b.finish_and_clear();
        }
        if self.verbosity.errors() {
            self.flush_errors();
        }
        if self.verbosity.0 > 0 {
            console_line(&summary_text(result));
            if let Some(text) = assertions_text(result) {
                console_line(&text);
            }
        }
        // A failed assertion is why the exit status is 4: one line each on
        // standard error at every verbosity, so a CI log that keeps only
        // standard error (or runs -v 0) says which one.
        let mut err = io::stderr().lock();
        for a in result.assertions.iter().filter(|a| !a.passed) {
            let _ = writeln!(
                err,
                "goodput: assertion failed: {} (measured {})",
                a.expression, a.measured_text
            );
        }
        Ok(())
    }
}

/// The assertions' outcomes, one line each, when the spec had any.
pub fn assertions_text(result: &TestResult) -> Option<String> {
    if result.assertions.is_empty() {
        return None;
    }
    let failed = result.assertions.iter().filter(|a| !a.passed).count();
    let mut t = format!(
        "  Assertions : {} of {} held{}\n",
        result.assertions.len() - failed,
        result.assertions.len(),
        if failed > 0 { " (exit status 4)" } else { "" }
    );
    for a in &result.assertions {
        t.push_str(&format!(
            "    {} {} : measured {}\n",
            if a.passed { "pass" } else { "FAIL" },
            a.expression,
            a.measured_text
        ));
    }
    Some(t.trim_end().to_owned())
}

/// A rate in bits per second, the unit links are sold in, with bytes per
/// second after it: `9.41 Gbit/s, 1176 MB/s`.
fn rate(bytes_per_second: f64) -> String {
    format!(
        "{}, {:.0} MB/s",
        format_bits_per_second(bytes_per_second),
        bytes_per_second / 1e6
    )
}

/// A size in the largest binary unit it reaches, to two decimals, without
/// the exact count `format_size` adds (`13.87 GiB`, `64 KiB`, `512 B`).
pub(crate) fn plain_size(n: u64) -> String {
    let s = format_size(n);
    match s.split_once(" (") {
        Some((short, _)) => short.to_owned(),
        None => s,
    }
}

/// The end-of-run summary as text.
pub(crate) fn summary_text(result: &TestResult) -> String {
    let s = &result.summary;
    let mut t = String::new();
    match result.end {
        EndReason::Interrupted => {
            t.push_str("\nInterrupted: stopped starting connections; in-flight ones recorded as aborted.\n")
        }
        EndReason::TimeLimit => t.push_str(&format!(
            "\nTime limit of {:.3} s reached; in-flight connections recorded as aborted.\n",
            result.settings.time_limit_ms.unwrap_or(0) as f64 / 1000.0
        )),
        EndReason::ExitLimit => t.push_str("\nExit count reached.\n"),
        EndReason::Failed => t.push_str(&format!(
            "\nThe run failed: {}\n",
            result
                .error
                .as_ref()
                .map_or("no reason given", |e| e.message.as_str())
        )),
        EndReason::Completed => t.push('\n'),
    }
    // A kind with a summary of its own says it all; the rest (TCP, iperf3,
    // servers, runs that failed before their detail) share the one below.
    let own = match &result.detail {
        Detail::Trace(d) => Some(crate::path::trace_summary(result, d)),
        Detail::Ping(d) => Some(crate::path::ping_summary(result, d)),
        Detail::Echo(d) => Some(crate::echo::summary(result, d)),
        Detail::Media(d) => Some(crate::media::summary(result, d)),
        Detail::Quic(d) => Some(crate::quic::quic_summary(result, d)),
        Detail::Ttcp(d) => Some(crate::ttcp::ttcp_report(result, d)),
        Detail::Stamp(d) => Some(format!(
            "  Sessions : {} succeeded, {} failed, {} aborted   Total Time : {:.3} s\n{}",
            s.successful,
            s.failures(),
            s.aborted,
            s.duration_s,
            crate::stamp::summary(result, d)
        )),
        Detail::Owamp(d) => Some(crate::owamp::owamp_summary(d)),
        Detail::Twamp(d) => Some(crate::owamp::twamp_summary(
            d,
            result
                .connections
                .first()
                .map_or("-", |c| c.local_address.as_str()),
            result
                .connections
                .first()
                .map_or("-", |c| c.remote_address.as_str()),
        )),
        Detail::Dns(d) => Some(crate::dns::summary(result, d)),
        Detail::Ndt7(d) => Some(crate::ndt7::ndt7_summary(result, d)),
        Detail::None | Detail::Server(_) | Detail::Iperf3(_) => None,
        Detail::Http(d) => Some(crate::http::http_summary(result, d)),
        Detail::Tls(d) => Some(crate::http::tls_summary(d)),
    };
    if let Some(own) = own {
        t.push_str(&own);
        return t;
    }
    t.push_str("  Historic Connection Statistics (all connections over the complete lifetime)\n");
    t.push_str(&format!(
        "  SuccessfulConnections [{}]   NetworkErrors [{}]   ProtocolErrors [{}]   Aborted [{}]\n",
        s.successful, s.network_errors, s.data_errors, s.aborted
    ));
    // One form per figure: a size in units here, the exact count in the
    // JSON document (and the connection lines, -v 3).
    t.push_str(&format!(
        "  Total Bytes Sent : {}   Total Bytes Recv : {}\n",
        plain_size(s.sent_bytes),
        plain_size(s.received_bytes)
    ));
    t.push_str(&format!("  Total Time : {:.3} s\n", s.duration_s));
    // A timed test's headline is its receivers' (below); this end's
    // bytes over the whole run are only context there. A direction that
    // moved nothing (the other way of a push test) is left out.
    let mut rates = Vec::new();
    if s.sent_bytes > 0 || s.received_bytes == 0 {
        rates.push(format!("sent {}", rate(s.send_bytes_per_second)));
    }
    if s.received_bytes > 0 {
        rates.push(format!("received {}", rate(s.recv_bytes_per_second)));
    }
    t.push_str(&format!(
        "  {} : {}\n",
        if s.timed.is_some() {
            "This end over the whole run"
        } else {
            "Good-put"
        },
        rates.join("   ")
    ));
    if let Some(timed) = &s.timed {
        // The headline of a timed test: what the receivers got over their
        // own data-phase time, after the warm-up.
        let line = |name: &str, d: &goodput_core::result::DirectionTotals| {
            format!(
                "  Good-put {name} (receiver side) : {} over {:.3} s   {} connections, {} received, {} of it in the warm-up and left out of the rate\n",
                rate(d.bytes_per_second),
                d.window_end_s - d.window_start_s,
                d.connections,
                plain_size(d.bytes),
                plain_size(d.warm_up_bytes)
            )
        };
        if let Some(d) = &timed.up {
            t.push_str(&line("client -> server", d));
        }
        if let Some(d) = &timed.down {
            t.push_str(&line("server -> client", d));
        }
    }
    if let Some(c) = s.connection_bytes_per_second {
        t.push_str(&format!(
            "  Per-connection good-put (both directions) : min {}   median {}   max {}\n",
            format_bits_per_second(c.min),
            format_bits_per_second(c.median),
            format_bits_per_second(c.max)
        ));
    }
    if let Some(f) = s.fairness {
        t.push_str(&format!(
            "  Jain's fairness index : {f:.4} (1 = every connection got the same)\n"
        ));
    }
    // Summed over every connection as it ended, not over the records kept.
    if let Some(p) = &s.peer {
        t.push_str(&format!(
            "  Server's view ({} connections) : sent {} B   received {} B\n",
            p.connections, p.sent_bytes, p.received_bytes
        ));
    }
    if result.connections_omitted > 0 {
        t.push_str(&format!(
            "  ({} connection records beyond the cap are counted above but not kept in the JSON document)\n",
            result.connections_omitted
        ));
    }
    if let Some(d) = result.iperf3() {
        t.push_str(&crate::iperf3::summary(result, d));
    }
    t
}
