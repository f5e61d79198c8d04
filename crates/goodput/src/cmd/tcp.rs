//! `goodput tcp`: its flags become a `TcpSpec`, which runs against a server
//! or an embedded one.

use super::run::Extras;
use super::views::Views;
use super::{flag_error, from_flags, run_and_report, Stop};
use crate::flags::{TcpArgs, ViewArgs};
use goodput_core::spec::TcpSpec;
use goodput_engine::run::concurrent_connections;
use goodput_engine::run::RunContext;

pub(crate) async fn tcp(args: TcpArgs) -> Result<u8, Stop> {
    from_flags(
        args.spec(),
        flag_error,
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
    run_and_report(
        spec.into(),
        RunContext::with_records(out.max_records),
        Views::open(out, finite)?,
        out,
        |r| r.summary.failures() > 0,
    )
    .await
}
