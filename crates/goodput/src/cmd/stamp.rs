//! `goodput stamp`: its flags become a `StampSpec`; a STAMP sender.

use super::run::Extras;
use super::views::Views;
use super::{check_socket_room, flag_error, from_flags, run_and_report, Stop};
use crate::flags::{StampArgs, ViewArgs};
use anyhow::anyhow;
use goodput_core::spec::{Family, StampSpec};
use goodput_engine::run::RunContext;

pub(crate) async fn stamp(args: StampArgs) -> Result<u8, Stop> {
    let spec = StampSpec {
        assert: args.assert.clone(),
        host: args.host.clone(),
        port: args.port,
        // The default interval is the spec's default too: left out, so
        // the flags' spec reads as a document that does not give it.
        interval: (args.rate.is_none() && args.interval != StampSpec::DEFAULT_INTERVAL)
            .then_some(args.interval),
        rate: args.rate,
        count: args.count,
        duration: args.duration,
        size: args.size,
        dscp: args.dscp,
        ssid: args.ssid,
        timeout: args.timeout,
        sessions: args.sessions,
        bind: args.bind,
        family: Family::of(args.ipv4, args.ipv6),
        stateful: args.stateful,
        status_interval: args.status_interval,
        // A mesh's stream (an agent's); the command's runs end on their own.
        continuous: false,
    };
    let extras = Extras {
        packet_file: args.packet_file.as_deref(),
        ..Extras::default()
    };
    from_flags(spec, flag_error, args.print_spec, &args.views, &extras).await
}

/// Runs a validated STAMP spec: `goodput stamp`'s path and `goodput run`'s.
/// The run itself is the engine's (`goodput_engine::run::run`).
pub(crate) async fn run_stamp(
    spec: StampSpec,
    out: &ViewArgs,
    packet_file: Option<&std::path::Path>,
) -> Result<u8, Stop> {
    check_socket_room("--sessions", u64::from(spec.sessions))?;
    let mut views = Views::open(out, None)?;
    if let Some(p) = packet_file {
        let f = goodput_report::PacketFile::create(p).map_err(|e| Stop::Output(anyhow!(e)))?;
        views.files.push(Box::new(f));
    }
    views.quiet_if_stdout(packet_file);
    run_and_report(
        spec.into(),
        RunContext::with_records(out.max_records),
        views,
        out,
        |r| r.summary.failures() > 0,
    )
    .await
}
