//! `goodput tcp`: its flags become a `TcpSpec`, which runs against a server
//! or an embedded one.

use super::run::{engine_run, print_or_run, Extras};
use super::views::Views;
use super::{exit_status, flag_error, Stop};
use crate::flags::{TcpArgs, ViewArgs};
use goodput_core::spec::{TcpSpec, TestSpec};
use goodput_engine::run::concurrent_connections;
use goodput_engine::run::RunContext;

pub(crate) async fn tcp(args: TcpArgs) -> Result<u8, Stop> {
    let spec = args.spec();
    spec.validate().map_err(|e| flag_error(&e))?;
    print_or_run(
        TestSpec::Tcp(spec),
        args.print_spec,
        &args.output.views,
        &Extras::default(),
    )
    .await
}

/// Runs a validated TCP spec with the views `out` asks for: the one path
/// of `goodput tcp` and of a tcp test in `goodput run`. The run itself is
/// the engine's (`goodput_engine::run::run`).
pub(crate) async fn run_tcp(spec: TcpSpec, out: &ViewArgs) -> Result<u8, Stop> {
    let (connections, _) = concurrent_connections(&spec);
    let finite = (spec.iterations > 0).then(|| spec.iterations.saturating_mul(connections));
    let mut views = Views::open(out, finite)?;
    let document = TestSpec::Tcp(spec);
    let result = engine_run(
        &document,
        RunContext::with_records(out.max_records),
        &mut views,
        out,
    )
    .await?;
    views.finish(&result, out.json.as_deref())?;
    Ok(exit_status(&result, result.summary.failures() > 0))
}
