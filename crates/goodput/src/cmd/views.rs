//! The views a test writes to: console, status, connection and error files,
//! the JSON stream, and the final JSON document.

use super::{usage, Stop};
use crate::flags::ViewArgs;
use anyhow::{anyhow, Context};
use goodput_core::result::{ConnectionRecord, Interval, StampPacket, TestResult};
use goodput_engine::Observer;
use goodput_report::{ConnectionFile, ConsoleView, ErrorFile, JsonStream, StatusFile, Verbosity, View};
use std::io;

/// Fans the engine's events out to every view the user asked for. The first
/// write error is kept and reported at the end; the run is not disturbed.
pub(crate) struct Views {
    pub(crate) console: ConsoleView,
    pub(crate) files: Vec<Box<dyn View + Send>>,
    pub(crate) error: Option<io::Error>,
    /// The console's count of connections to expect, for `quiet`.
    pub(crate) finite: Option<u64>,
}

impl Views {
    pub(crate) fn open(out: &ViewArgs, finite: Option<u64>) -> Result<Self, Stop> {
        let mut files: Vec<Box<dyn View + Send>> = Vec::new();
        let open_err = |e: io::Error| Stop::Output(anyhow!(e));
        // The result document is written at the end; find out now, not
        // after a long run, that it cannot be.
        if let Some(p) = out.json.as_deref().filter(|p| !goodput_report::is_stdout(p)) {
            std::fs::File::create(p)
                .map_err(|e| Stop::Output(anyhow!("cannot write {}: {e}", p.display())))?;
        }
        if let Some(p) = &out.status_file {
            files.push(Box::new(StatusFile::create(p).map_err(open_err)?));
        }
        if let Some(p) = &out.connection_file {
            files.push(Box::new(ConnectionFile::create(p).map_err(open_err)?));
        }
        if let Some(p) = &out.error_file {
            let f = ErrorFile::create(p).map_err(|e| {
                if e.kind() == io::ErrorKind::InvalidInput {
                    usage(format!("--error-file {e}"))
                } else {
                    open_err(e)
                }
            })?;
            files.push(Box::new(f));
        }
        if let Some(p) = &out.json_stream {
            files.push(Box::new(JsonStream::create(p).map_err(open_err)?));
        }
        // An output on standard output (`-`) replaces the console text there.
        let outputs = [
            &out.json,
            &out.json_stream,
            &out.status_file,
            &out.connection_file,
            &out.error_file,
        ];
        let verbosity = if outputs
            .iter()
            .any(|p| p.as_deref().is_some_and(goodput_report::is_stdout))
        {
            0
        } else {
            out.verbosity
        };
        Ok(Self {
            console: ConsoleView::new(Verbosity(verbosity), finite),
            files,
            error: None,
            finite,
        })
    }

    /// Silences the console when a command's own output flag takes standard
    /// output (`-`).
    pub(crate) fn quiet_if_stdout(&mut self, path: Option<&std::path::Path>) {
        if path.is_some_and(goodput_report::is_stdout) {
            self.console = ConsoleView::new(Verbosity(0), self.finite);
        }
    }

    /// Calls `f` on every view, keeping the first write error.
    pub(crate) fn each(&mut self, mut f: impl FnMut(&mut dyn View) -> io::Result<()>) {
        let mut first = f(&mut self.console).err();
        for v in &mut self.files {
            let r = f(v.as_mut());
            first = first.or(r.err());
        }
        if let Some(e) = first {
            self.error.get_or_insert(e);
        }
    }

    pub(crate) fn finish(&mut self, result: &TestResult, json: Option<&std::path::Path>) -> Result<(), Stop> {
        self.each(|v| v.finish(result));
        if let Some(p) = json {
            RESULT_WRITTEN.store(true, std::sync::atomic::Ordering::Relaxed);
            goodput_report::write_result_json(p, result)
                .with_context(|| format!("cannot write {}", p.display()))
                .map_err(Stop::Output)?;
        }
        match self.error.take() {
            Some(e) => Err(Stop::Output(anyhow!(e).context("writing an output file failed"))),
            None => Ok(()),
        }
    }
}

/// Whether the running test's result document went to `--json` (a test
/// that fails after that keeps its document; one that fails before gets a
/// `failed` one).
pub(crate) static RESULT_WRITTEN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

impl Observer for Views {
    fn on_interval(&mut self, iv: &Interval) {
        self.each(|v| v.interval(iv));
    }
    fn on_connection(&mut self, r: &ConnectionRecord) {
        self.each(|v| v.connection(r));
    }
    fn on_established(&mut self, index: u64, local: &str, remote: &str, t: f64) {
        self.each(|v| v.established(index, local, remote, t));
    }
    fn on_start(&mut self, title: &str, settings: &[(String, String)]) {
        let settings: Vec<(String, String)> = settings
            .iter()
            .map(|(label, value)| (label.clone(), super::in_flags(value)))
            .collect();
        self.console.banner(title, &settings);
    }
    fn on_notice(&mut self, text: &str) {
        let text = super::in_flags(text);
        self.each(|v| v.notice(&text));
    }
    fn wants_established(&self) -> bool {
        self.console.wants_established() || self.files.iter().any(|v| v.wants_established())
    }
    fn on_hop(&mut self, hop: &goodput_core::path::TraceHop) {
        self.each(|v| v.hop(hop));
    }
    fn on_ping(&mut self, r: &goodput_core::path::PingReply) {
        self.each(|v| v.ping_reply(r));
    }
    fn on_packet(&mut self, p: &StampPacket) {
        self.each(|v| if v.wants_packets() { v.packet(p) } else { Ok(()) });
    }
    fn wants_packets(&self) -> bool {
        self.files.iter().any(|v| v.wants_packets())
    }
}
