//! `goodput udp`: its flags become a `UdpSpec`; a media-like UDP stream.

use super::run::{run_spec, Extras};
use super::views::Views;
use super::{
    check_socket_room, exit_status, flag_error, loopback, print_spec, resolve, watch_signals, Embedded, Stop,
    EXIT_OK,
};
use crate::flags::{UdpArgs, ViewArgs};
use anyhow::anyhow;
use goodput_core::media::limits::MediaLimits;
use goodput_core::session::VerifyMode;
use goodput_core::spec::{Family, TestSpec, UdpSpec};
use goodput_core::units::format_bits_per_second;
use goodput_engine::media::{bind_media, run_media, MediaServerSpec, MediaSpec};
use goodput_engine::CancellationToken;
use std::net::SocketAddr;
use std::path::Path;

pub(crate) async fn udp(args: UdpArgs) -> Result<u8, Stop> {
    let spec = UdpSpec {
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
    spec.validate().map_err(|e| flag_error(&e))?;
    if args.print_spec {
        print_spec(&TestSpec::Udp(spec))?;
        return Ok(EXIT_OK);
    }
    let extras = Extras {
        jitter_file: args.jitter_file.as_deref(),
        ..Extras::default()
    };
    run_spec(TestSpec::Udp(spec), &args.views, &extras).await
}

/// Runs a validated UDP spec: `goodput udp`'s path and `goodput run`'s.
/// The jitter file is an output, not part of the test.
pub(crate) async fn run_udp(spec: UdpSpec, out: &ViewArgs, jitter_file: Option<&Path>) -> Result<u8, Stop> {
    let document = TestSpec::Udp(spec.clone());
    let plan = spec
        .plan()
        .map_err(|e| Stop::Fatal(anyhow!("the stream cannot be planned: {e}")))?;
    let (v4, v6) = (spec.family == Family::Ipv4, spec.family == Family::Ipv6);
    check_socket_room("--connections", u64::from(spec.connections))?;
    let cancel = CancellationToken::new();
    watch_signals(cancel.clone());
    let mut server = Embedded::new(&cancel);
    let targets = match &spec.host {
        None => {
            let ip = loopback(v6);
            // The embedded server takes what this client asks: the
            // client's own spec was checked.
            let b = bind_media(MediaServerSpec {
                listen: vec![SocketAddr::new(ip, 0)],
                max_streams: 100_000,
                limits: MediaLimits {
                    max_bits_per_second: u64::MAX,
                    max_length_s: u32::MAX,
                    max_frame_rate: u32::MAX,
                    max_buffer_ms: u32::MAX,
                },
                max_memory: u64::MAX,
            })
            .map_err(|e| Stop::Fatal(e.into()))?;
            let addr = b.local_addrs()[0];
            server.start(|c| async move {
                b.run(c).await;
            });
            vec![addr]
        }
        Some(h) => resolve(h, spec.port, v4, v6).await?,
    };
    let mut views = Views::open(
        out,
        (spec.iterations > 0).then(|| spec.iterations.saturating_mul(u64::from(spec.connections))),
    )?;
    views.quiet_if_stdout(jitter_file);
    let jitter = match jitter_file {
        Some(p) => Some(std::sync::Arc::new(std::sync::Mutex::new(
            goodput_report::JitterFile::create(p).map_err(|e| Stop::Fatal(anyhow!(e)))?,
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
    let dpf = plan.datagram_sizes().len();
    let banner = vec![
        (
            "Server".to_owned(),
            format!(
                "{}{}",
                targets
                    .iter()
                    .map(|a| a.to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
                if spec.host.is_none() {
                    " (embedded goodput server)"
                } else {
                    ""
                }
            ),
        ),
        (
            "Direction".into(),
            if spec.upload {
                "upload: this client streams, the server plays out".into()
            } else {
                "download: the server streams, this client plays out".into()
            },
        ),
        (
            "Stream".into(),
            format!(
                "{} b/s ({}; {} b/s delivered after rounding), {} fps, {} s = {} frames",
                plan.bits_per_second,
                format_bits_per_second(plan.bits_per_second as f64 / 8.0),
                plan.effective_bits_per_second(),
                plan.frame_rate,
                plan.length_s,
                plan.frames
            ),
        ),
        (
            "Frames".into(),
            format!(
                "{} B each, {} datagram(s) of at most {} B (34-byte header included), {} ms play-out buffer",
                plan.frame_bytes,
                dpf,
                plan.datagram_bytes,
                spec.buffer_depth.0.as_millis()
            ),
        ),
        (
            "Streams".into(),
            format!(
                "{} at once, {}",
                spec.connections,
                if spec.iterations == 0 {
                    "repeated until --time-limit or Ctrl-C".to_string()
                } else {
                    format!(
                        "{} in turn each ({} in all)",
                        spec.iterations,
                        spec.iterations.saturating_mul(u64::from(spec.connections))
                    )
                }
            ),
        ),
        (
            "Verification".into(),
            match spec.verify {
                VerifyMode::Data => "every payload against the pattern".into(),
                VerifyMode::Connection => "counts only".into(),
            },
        ),
        ("Total per stream".into(), format!("{} bytes", plan.total_bytes)),
    ];
    views.console.banner("goodput udp", &banner);
    let media = MediaSpec {
        targets,
        bind: spec.bind.clone(),
        plan,
        buffer_depth: spec.buffer_depth.0,
        connections: spec.connections,
        iterations: spec.iterations,
        upload: spec.upload,
        verify_data: spec.verify == VerifyMode::Data,
        dscp: spec.dscp,
        status_interval: spec.status_interval.0,
        time_limit: spec.time_limit.map(|d| d.0),
        max_records: out.max_records,
        datagram_sink: sink,
    };
    let result = run_media(media, &mut views, cancel.clone()).await;
    server.stop().await;
    let mut result = result.map_err(|e| Stop::Fatal(e.into()))?;
    result.spec = Some(document);
    views.finish(&result, out.json.as_deref())?;
    if let (Some(f), Some(p)) = (jitter, jitter_file) {
        let done = f
            .lock()
            .map_err(|_| anyhow!("the jitter file's writer failed"))?
            .finish();
        done.map_err(|e| Stop::Fatal(anyhow!("cannot write {}: {e}", p.display())))?;
    }
    Ok(exit_status(&result, result.summary.failures() > 0))
}
