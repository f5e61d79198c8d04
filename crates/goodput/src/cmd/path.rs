//! `goodput trace` and `goodput ping`: flags to specs, and their runs.

use super::run::Extras;
use super::views::Views;
use super::{flag_error, from_flags, run_and_report, Stop};
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
    from_flags(spec, flag_error, args.print_spec, &args.views, &Extras::default()).await
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
    from_flags(spec, flag_error, args.print_spec, &args.views, &Extras::default()).await
}

/// Runs a validated trace or ping spec: the commands' path and `goodput
/// run`'s. A trace that does not reach its destination is not a failure
/// (traceroute's exit status is 0 then too); a ping with no reply at all
/// is (ping's is 1).
pub(crate) async fn run_path(spec: TestSpec, out: &ViewArgs) -> Result<u8, Stop> {
    run_and_report(
        spec,
        RunContext::with_records(out.max_records),
        Views::open(out, None)?,
        out,
        |r| r.ping().is_some_and(|p| p.received == 0),
    )
    .await
}
