//! `goodput server`: every service a peer tests against.

use super::iperf3::{Iperf3Served, Iperf3ServerView};
use super::run::{engine_run, Extras};
use super::views::Views;
use super::{flag_error, from_flags, Stop, EXIT_FAILED, EXIT_OK};
use crate::flags::{ServerArgs, ViewArgs};
use goodput_core::spec::ServerSpec;
use goodput_engine::run::RunContext;

pub(crate) async fn server(args: ServerArgs) -> Result<u8, Stop> {
    args.quic_port().map_err(super::usage)?;
    from_flags(
        args.spec(),
        flag_error,
        args.print_spec,
        &args.output.views,
        &Extras::default(),
    )
    .await
}

/// Serves a validated server spec until its time limit, exit count or a
/// signal: `goodput server`'s path and `goodput run`'s. A signal is the
/// server's normal end, so it exits 0 unless a connection failed.
pub(crate) async fn run_server(spec: ServerSpec, out: &ViewArgs) -> Result<u8, Stop> {
    let mut views = Views::open(out, spec.exit_after)?;
    let served = std::sync::Arc::new(std::sync::Mutex::new(Iperf3Served::default()));
    let context = RunContext {
        max_records: out.max_records,
        iperf3_observer: Some(Box::new(Iperf3ServerView {
            verbosity: out.verbosity,
            served: served.clone(),
        })),
        ..RunContext::default()
    };
    let result = engine_run(&spec.into(), context, &mut views, out).await?;
    if out.verbosity > 0 {
        for line in goodput_report::server_service_lines(&result) {
            goodput_report::console_line(&line);
        }
        // The iperf3 service's tests are not goodput connections: their
        // bytes get a line of their own, not the zeros of the summary.
        let served = served.lock().map(|s| *s).unwrap_or_default();
        if served.tests > 0 {
            goodput_report::console_line(&format!(
                "iperf3 service: {} test{}; received {}, sent {}",
                served.tests,
                if served.tests == 1 { "" } else { "s" },
                size_text(served.received_bytes),
                size_text(served.sent_bytes)
            ));
        }
    }
    views.finish(&result, out.json.as_deref())?;
    Ok(if result.summary.failures() > 0 {
        EXIT_FAILED
    } else {
        EXIT_OK
    })
}

/// A size in units without the exact count (`23.88 MiB`).
fn size_text(n: u64) -> String {
    let s = goodput_core::units::format_size(n);
    s.split(" (").next().unwrap_or(&s).to_owned()
}
