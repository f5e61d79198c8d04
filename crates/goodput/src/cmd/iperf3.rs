//! `goodput iperf3`: an iperf3 client (and the server's iperf3 view).

use super::run::{engine_run, Extras};
use super::views::Views;
use super::{exit_status, flag_error, from_flags, Stop};
use crate::flags::{Iperf3Args, ViewArgs};
use anyhow::{anyhow, Context};
use goodput_core::result::{ConnectionRecord, Interval, TestResult};
use goodput_core::spec::{Family, Iperf3Spec};
use goodput_core::units::HumanDuration;
use goodput_engine::run::RunContext;
use goodput_engine::Observer;
use std::path::Path;
use std::time::Duration;

/// Console lines for the tests an iperf3 service ran.
pub(crate) struct Iperf3ServerView {
    pub(crate) verbosity: u8,
    /// What the iperf3 tests served so far moved, for the server's summary.
    pub(crate) served: std::sync::Arc<std::sync::Mutex<Iperf3Served>>,
}

/// The iperf3 tests a server served: how many, and the bytes it received
/// and sent in them.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Iperf3Served {
    pub(crate) tests: u64,
    pub(crate) received_bytes: u64,
    pub(crate) sent_bytes: u64,
}

impl Observer for Iperf3ServerView {
    fn on_interval(&mut self, _: &Interval) {}
    fn on_connection(&mut self, _: &ConnectionRecord) {}
    fn on_notice(&mut self, text: &str) {
        if self.verbosity >= 2 {
            goodput_report::console_line(text);
        }
    }
    fn on_result(&mut self, r: &TestResult) {
        if let Ok(mut s) = self.served.lock() {
            s.tests += 1;
            s.received_bytes = s.received_bytes.saturating_add(r.summary.received_bytes);
            s.sent_bytes = s.sent_bytes.saturating_add(r.summary.sent_bytes);
        }
        if self.verbosity >= 1 {
            goodput_report::console_line(&goodput_report::iperf3_summary(r));
        }
    }
}

pub(crate) async fn iperf3(args: Iperf3Args) -> Result<u8, Stop> {
    let spec = Iperf3Spec {
        assert: args.assert.clone(),
        host: args.host.clone(),
        port: args.port,
        time: HumanDuration(Duration::from_secs(u64::from(args.time))),
        bytes: args.bytes,
        blockcount: args.blockcount,
        parallel: args.parallel,
        reverse: args.reverse,
        bidir: args.bidir,
        udp: args.udp,
        bitrate: args.bitrate,
        length: args.length,
        window: args.window,
        congestion: args.congestion.clone(),
        mss: args.mss,
        no_delay: args.no_delay,
        omit: HumanDuration(Duration::from_secs(u64::from(args.omit))),
        tos: args.tos,
        cport: args.cport,
        bind: args.bind,
        family: Family::of(args.ipv4, args.ipv6),
        get_server_output: args.get_server_output,
        udp_counters_64bit: args.udp_counters_64bit,
        repeating_payload: args.repeating_payload,
        title: args.title.clone(),
        extra_data: args.extra_data.clone(),
        interval: args.interval,
        timeout: args.timeout,
    };
    let extras = Extras {
        iperf3_json: args.iperf3_json.as_deref(),
        ..Extras::default()
    };
    from_flags(spec, flag_error, args.print_spec, &args.views, &extras).await
}

/// Runs a validated iperf3 spec: `goodput iperf3`'s path and `goodput
/// run`'s. `iperf3_json` also writes the result in iperf3's own -J shape.
/// The run itself is the engine's (`goodput_engine::run::run`).
pub(crate) async fn run_iperf3(
    spec: Iperf3Spec,
    out: &ViewArgs,
    iperf3_json: Option<&Path>,
) -> Result<u8, Stop> {
    let mut views = Views::open(out, None)?;
    views.quiet_if_stdout(iperf3_json);
    views
        .console
        .peer_hint("is `iperf3 -s` (or `goodput server --iperf3`) running there?");
    if let Some(path) = iperf3_json.filter(|p| p.as_os_str() != "-") {
        std::fs::File::create(path)
            .map_err(|e| Stop::Output(anyhow!("cannot write {}: {e}", path.display())))?;
    }
    let result = engine_run(
        &spec.into(),
        RunContext::with_records(out.max_records),
        &mut views,
        out,
    )
    .await?;
    views.finish(&result, out.json.as_deref())?;
    if let Some(path) = iperf3_json {
        let text = serde_json::to_string_pretty(&goodput_report::iperf3_json(&result))
            .map_err(|e| Stop::Fatal(anyhow!(e)))?
            + "\n";
        if path.as_os_str() == "-" {
            goodput_report::console_line(text.trim_end());
        } else {
            std::fs::write(path, text)
                .with_context(|| format!("cannot write {}", path.display()))
                .map_err(Stop::Output)?;
        }
    }
    let failed = result.summary.failures() > 0 || result.iperf3().is_some_and(|d| d.error.is_some());
    Ok(exit_status(&result, failed))
}
