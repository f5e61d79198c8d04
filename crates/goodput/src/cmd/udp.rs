//! `goodput udp`: its flags become a `UdpSpec`; a media-like UDP stream.

use super::run::{engine_run, Extras};
use super::views::Views;
use super::{check_socket_room, exit_status, flag_error, from_flags, Stop};
use crate::flags::{UdpArgs, ViewArgs};
use anyhow::anyhow;
use goodput_core::spec::{Family, UdpSpec};
use goodput_engine::run::RunContext;
use std::path::Path;

pub(crate) async fn udp(args: UdpArgs) -> Result<u8, Stop> {
    let spec = UdpSpec {
        assert: args.assert.clone(),
        host: args.host.clone(),
        port: args.port,
        bitrate: args.bitrate,
        frame_rate: args.frame_rate,
        length: args.length,
        buffer_depth: args.buffer_depth,
        datagram_size: args.datagram_size,
        connections: args.connections,
        iterations: args.iterations,
        upload: args.upload,
        verify: args.verify.spec(),
        dscp: args.dscp,
        bind: args.bind.clone(),
        family: Family::of(args.ipv4, args.ipv6),
        time_limit: args.time_limit,
        status_interval: args.status_interval,
    };
    let extras = Extras {
        jitter_file: args.jitter_file.as_deref(),
        ..Extras::default()
    };
    from_flags(spec, flag_error, args.print_spec, &args.views, &extras).await
}

/// Runs a validated UDP spec: `goodput udp`'s path and `goodput run`'s.
/// The jitter file is an output, not part of the test.
pub(crate) async fn run_udp(spec: UdpSpec, out: &ViewArgs, jitter_file: Option<&Path>) -> Result<u8, Stop> {
    check_socket_room("--connections", u64::from(spec.connections))?;
    let mut views = Views::open(
        out,
        (spec.iterations > 0).then(|| spec.iterations.saturating_mul(u64::from(spec.connections))),
    )?;
    views.quiet_if_stdout(jitter_file);
    let jitter = match jitter_file {
        Some(p) => Some(std::sync::Arc::new(std::sync::Mutex::new(
            goodput_report::JitterFile::create(p).map_err(|e| Stop::Output(anyhow!(e)))?,
        ))),
        None => None,
    };
    let sink: Option<goodput_engine::media::DatagramSink> = jitter.clone().map(|f| {
        Box::new(move |d: &goodput_core::result::MediaDatagram| {
            if let Ok(mut f) = f.lock() {
                f.record(d);
            }
        }) as goodput_engine::media::DatagramSink
    });
    let context = RunContext {
        max_records: out.max_records,
        datagram_sink: sink,
        ..RunContext::default()
    };
    let result = engine_run(&spec.into(), context, &mut views, out).await?;
    views.finish(&result, out.json.as_deref())?;
    if let (Some(f), Some(p)) = (jitter, jitter_file) {
        let done = f
            .lock()
            .map_err(|_| anyhow!("the jitter file's writer failed"))?
            .finish();
        done.map_err(|e| Stop::Output(anyhow!("cannot write {}: {e}", p.display())))?;
    }
    Ok(exit_status(&result, result.summary.failures() > 0))
}
