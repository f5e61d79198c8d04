//! `goodput trace` and `goodput ping`: flags to specs, and their runs.

use super::run::{engine_run, print_or_run, Extras};
use super::views::Views;
use super::{exit_status, flag_error, Stop};
use crate::flags::{PingArg, PingArgs, ProbeArg, TraceArgs, ViewArgs};
use goodput_core::path::{PingMethod, ProbeMethod};
use goodput_core::spec::{Family, PingSpec, TestSpec, TraceSpec};
use goodput_engine::run::RunContext;

pub(crate) async fn trace(args: TraceArgs) -> Result<u8, Stop> {
    let spec = TraceSpec {
        host: args.host,
        method: match args.method {
            ProbeArg::Udp => ProbeMethod::Udp,
            ProbeArg::Tcp => ProbeMethod::Tcp,
            ProbeArg::Icmp => ProbeMethod::Icmp,
        },
        port: args.port,
        first_hop: args.first_hop,
        max_hops: args.max_hops,
        probes: args.probes,
        wait: args.wait,
        wait_here: args.wait_here,
        wait_near: args.wait_near,
        in_flight: args.in_flight,
        size: args.size,
        pmtu: args.pmtu,
        names: args.names,
        bind: args.bind,
        family: Family::of(args.ipv4, args.ipv6),
        assert: args.assert,
    };
    spec.validate().map_err(|e| flag_error(&e))?;
    print_or_run(
        TestSpec::Trace(spec),
        args.print_spec,
        &args.views,
        &Extras::default(),
    )
    .await
}

pub(crate) async fn ping(args: PingArgs) -> Result<u8, Stop> {
    let spec = PingSpec {
        host: args.host,
        method: match args.method {
            PingArg::Auto => PingMethod::Auto,
            PingArg::Icmp => PingMethod::Icmp,
            PingArg::Tcp => PingMethod::Tcp,
        },
        port: args.port,
        count: args.count,
        interval: args.interval,
        timeout: args.timeout,
        size: args.size,
        bind: args.bind,
        family: Family::of(args.ipv4, args.ipv6),
        assert: args.assert,
    };
    spec.validate().map_err(|e| flag_error(&e))?;
    print_or_run(
        TestSpec::Ping(spec),
        args.print_spec,
        &args.views,
        &Extras::default(),
    )
    .await
}

/// Runs a validated trace or ping spec: the commands' path and `goodput
/// run`'s. A trace that does not reach its destination is not a failure
/// (traceroute's exit status is 0 then too); a ping with no reply at all
/// is (ping's is 1).
pub(crate) async fn run_path(spec: TestSpec, out: &ViewArgs) -> Result<u8, Stop> {
    let mut views = Views::open(out, None)?;
    let result = engine_run(&spec, RunContext::with_records(out.max_records), &mut views, out).await?;
    views.finish(&result, out.json.as_deref())?;
    let failed = result.ping().is_some_and(|p| p.received == 0);
    Ok(exit_status(&result, failed))
}
