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
        if let Some(b) = &self.bar {
            b.set_position(iv.completed + iv.network_errors + iv.data_errors);
            b.set_message(bar_message(iv));
        }
        if !self.verbosity.status() {
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
        if self.lines == 0 {
            self.say(legend.trim_end());
        }
        if self.lines.is_multiple_of(40) {
            self.say(&header);
        }
        self.lines += 1;
        self.say(&line);
        Ok(())
    }

    fn connection(&mut self, r: &ConnectionRecord) -> io::Result<()> {
        if let Some(b) = &self.bar {
            b.inc(1);
        }
        if self.verbosity.connections() {
            self.say(&connection_line(r));
        } else if self.verbosity.errors() {
            if let Some(e) = error_text(r) {
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
        if self.verbosity.0 == 0 {
            // Silent, but a failed assertion is why the exit status is 4:
            // name it, so a CI log says which one.
            let mut err = io::stderr().lock();
            for a in result.assertions.iter().filter(|a| !a.passed) {
                let _ = writeln!(
                    err,
                    "goodput: assertion failed: {} (measured {})",
                    a.expression, a.measured_text
                );
            }
            return Ok(());
        }
        console_line(&summary_text(result));
        if let Some(text) = assertions_text(result) {
            console_line(&text);
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

fn rate(bytes_per_second: f64) -> String {
    format!(
        "{bytes_per_second:.0} B/s ({})",
        format_bits_per_second(bytes_per_second)
    )
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
        Detail::None | Detail::Server(_) | Detail::Iperf3(_) => None,
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
    t.push_str(&format!(
        "  Total Bytes Sent : {} ({})   Total Bytes Recv : {} ({})\n",
        s.sent_bytes,
        format_size(s.sent_bytes),
        s.received_bytes,
        format_size(s.received_bytes)
    ));
    t.push_str(&format!("  Total Time : {:.3} s\n", s.duration_s));
    // A timed test's headline is its receivers' (below); this end's
    // bytes over the whole run are only context there.
    t.push_str(&format!(
        "  {} : sent {}   received {}\n",
        if s.timed.is_some() {
            "This end over the whole run"
        } else {
            "Good-put"
        },
        rate(s.send_bytes_per_second),
        rate(s.recv_bytes_per_second)
    ));
    if let Some(timed) = &s.timed {
        // The headline of a timed test: what the receivers got over their
        // own data-phase time, after the warm-up.
        let line = |name: &str, d: &goodput_core::result::DirectionTotals| {
            format!(
                "  Good-put {name} (receiver side) : {} over {:.3} s   {} connections, {} received ({} in the warm-up, left out of the rate)\n",
                rate(d.bytes_per_second),
                d.window_end_s - d.window_start_s,
                d.connections,
                format_size(d.bytes),
                format_size(d.warm_up_bytes)
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
