//! `goodput quic`: its flags become a `QuicSpec`; the QUIC perf client.

use super::run::{engine_run, Extras};
use super::views::Views;
use super::{exit_status, flag_error, from_flags, usage, Stop};
use crate::flags::{QuicArgs, ViewArgs};
use anyhow::anyhow;
use goodput_core::spec::{Family, QuicSpec, SpecError};
use goodput_core::units::SizeOrTime;
use goodput_engine::run::RunContext;
use std::path::Path;

/// A `--upload` or `--download` value, its error naming the flag.
fn size_or_time(flag: &str, v: Option<&String>) -> Result<Option<SizeOrTime>, Stop> {
    v.map(|v| v.parse().map_err(|e| usage(format!("{flag} {e}"))))
        .transpose()
}

/// A spec error in the flags' words. The scenario may be given without a
/// flag (after HOST and PORT), so its errors name it as `scenario`.
fn quic_flag_error(e: &SpecError) -> Stop {
    if e.field == "scenario" || e.field == "quic.scenario" {
        return usage(format!("scenario {}", e.message));
    }
    flag_error(e)
}

pub(crate) async fn quic(args: QuicArgs) -> Result<u8, Stop> {
    let spec = QuicSpec {
        assert: args.assert.clone(),
        host: args.host.clone(),
        port: args.port,
        scenario: args.scenario.clone().or_else(|| args.scenario_flag.clone()),
        upload: size_or_time("--upload", args.upload.as_ref())?,
        download: size_or_time("--download", args.download.as_ref())?,
        rps: args.rps,
        latency: args.latency,
        handshakes: args.handshakes,
        streams: args.streams,
        request: args.request,
        response: args.response,
        duration: args.duration,
        connections: args.connections,
        uni: args.uni,
        max_mtu: args.max_mtu,
        ca: args.ca.clone(),
        insecure: args.insecure,
        sni: args.sni.clone(),
        family: Family::of(args.ipv4, args.ipv6),
        status_interval: args.status_interval,
    };
    let extras = Extras {
        perf_log: args.perf_log.as_deref(),
        ..Extras::default()
    };
    from_flags(spec, quic_flag_error, args.print_spec, &args.views, &extras).await
}

/// Runs a validated QUIC spec: `goodput quic`'s path and `goodput run`'s.
/// The performance log is an output, not part of the test.
pub(crate) async fn run_quic(spec: QuicSpec, out: &ViewArgs, perf_log: Option<&Path>) -> Result<u8, Stop> {
    spec.parsed_scenario().map_err(|e| quic_flag_error(&e))?;
    // The log is appended to at the end; find out now that it cannot be.
    if let Some(p) = perf_log {
        goodput_report::open_output(p, true).map_err(|e| Stop::Output(anyhow!(e)))?;
    }
    let mut views = Views::open(out, None)?;
    views.quiet_if_stdout(perf_log);
    let result = engine_run(
        &spec.into(),
        RunContext::with_records(out.max_records),
        &mut views,
        out,
    )
    .await?;
    if let Some(p) = perf_log {
        goodput_report::append_perf_log(p, &result)
            .map_err(|e| Stop::Output(anyhow!("cannot write {}: {e}", p.display())))?;
    }
    views.finish(&result, out.json.as_deref())?;
    let failed = result.quic().is_some_and(|q| q.failed_streams > 0) || result.summary.failures() > 0;
    Ok(exit_status(&result, failed))
}
