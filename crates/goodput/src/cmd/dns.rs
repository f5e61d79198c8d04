//! `goodput dns`: flags to a spec, and its run.

use super::run::Extras;
use super::views::Views;
use super::{flag_error, from_flags, run_and_report, Stop};
use crate::flags::{DnsArgs, DnsTransportArg, ViewArgs};
use goodput_core::assertion::Assertion;
use goodput_core::dns::DnsTransport;
use goodput_core::spec::{DnsSpec, Family, TestSpec};
use goodput_engine::run::RunContext;

pub(crate) async fn dns(args: DnsArgs) -> Result<u8, Stop> {
    let mut assert = args.assert;
    // An expectation is a check: an answer that does not meet it fails
    // the run as an assertion does, unless the flags already say how many
    // may not.
    let expects = !args.expect.is_empty() || args.expect_pattern.is_some();
    if expects && !assert.iter().any(|a| a.figure == "mismatched") {
        assert.push(
            "mismatched == 0"
                .parse::<Assertion>()
                .map_err(|e| Stop::Fatal(anyhow::anyhow!("{e}")))?,
        );
    }
    let spec = DnsSpec {
        name: args.name,
        record: args.record,
        server: args.server,
        transport: match args.transport {
            DnsTransportArg::Udp => DnsTransport::Udp,
            DnsTransportArg::Tcp => DnsTransport::Tcp,
            DnsTransportArg::Tls => DnsTransport::Tls,
        },
        tls_name: args.tls_name,
        ca: args.ca,
        expect: args.expect,
        expect_pattern: args.expect_pattern,
        recursion: !args.no_recursion,
        count: args.count,
        interval: args.interval,
        timeout: args.timeout,
        retries: args.retries,
        family: Family::of(args.ipv4, args.ipv6),
        assert,
    };
    from_flags(spec, flag_error, args.print_spec, &args.views, &Extras::default()).await
}

/// Runs a validated dns spec: the command's path and `goodput run`'s. A
/// query with no reply after its retries fails the run (exit 1); an
/// answer that is not as expected is an assertion's business (exit 4).
pub(crate) async fn run_dns(spec: TestSpec, out: &ViewArgs) -> Result<u8, Stop> {
    run_and_report(
        spec,
        RunContext::with_records(out.max_records),
        Views::open(out, None)?,
        out,
        |r| r.dns().is_some_and(|d| d.lost > 0),
    )
    .await
}
