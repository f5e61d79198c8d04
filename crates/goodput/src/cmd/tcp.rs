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
    let mut views = Views::open(out, finite)?;
    views.console.peer_hint("is `goodput server` running there?");
    match (spec.duration, finite) {
        // Each pass of a timed test takes its duration.
        (Some(d), Some(_)) => views
            .console
            .progress_seconds(d.0.as_secs_f64() * spec.iterations as f64),
        (None, Some(n)) if spec.transfer.is_single() => {
            views.console.progress_bytes(spec.transfer.hi.0.saturating_mul(n))
        }
        _ => {}
    }
    run_and_report(
        spec.into(),
        RunContext::with_records(out.max_records),
        views,
        out,
        |r| r.summary.failures() > 0,
    )
    .await
}
