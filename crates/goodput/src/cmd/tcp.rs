//! `goodput tcp`: its flags become a `TcpSpec`, which runs against a server
//! or an embedded one.

use super::run::{failed_run, run_spec, Extras};
use super::views::Views;
use super::{flag_error, print_spec, watch_signals, Stop, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK};
use crate::flags::{TcpArgs, ViewArgs};
use goodput_core::result::EndReason;
use goodput_core::spec::{TcpSpec, TestSpec};
use goodput_engine::run::concurrent_connections;
use goodput_engine::run::RunContext;
use goodput_engine::CancellationToken;

pub(crate) async fn tcp(args: TcpArgs) -> Result<u8, Stop> {
    let spec = args.spec();
    spec.validate().map_err(|e| flag_error(&e))?;
    if args.print_spec {
        print_spec(&TestSpec::Tcp(spec))?;
        return Ok(EXIT_OK);
    }
    run_spec(TestSpec::Tcp(spec), &args.output.views, &Extras::default()).await
}

/// Runs a validated TCP spec with the views `out` asks for: the one path
/// of `goodput tcp` and of a tcp test in `goodput run`. The run itself is
/// the engine's (`goodput_engine::run::run`).
pub(crate) async fn run_tcp(spec: TcpSpec, out: &ViewArgs) -> Result<u8, Stop> {
    let cancel = CancellationToken::new();
    watch_signals(cancel.clone());
    let (connections, _) = concurrent_connections(&spec);
    let finite = (spec.iterations > 0).then(|| spec.iterations.saturating_mul(connections));
    let mut views = Views::open(out, finite)?;
    let document = TestSpec::Tcp(spec);
    let result = goodput_engine::run::run(
        &document,
        RunContext::with_records(out.max_records),
        &mut views,
        cancel.clone(),
    )
    .await;
    if result.end == EndReason::Failed {
        return failed_run(&result, out, cancel.is_cancelled());
    }
    views.finish(&result, out.json.as_deref())?;
    Ok(if result.summary.failures() > 0 {
        EXIT_FAILED
    } else if result.end == EndReason::Interrupted {
        EXIT_INTERRUPTED
    } else {
        EXIT_OK
    })
}
