//! `goodput udp`: a media-like UDP stream.

use super::views::Views;
use super::{check_socket_room, exit_status, loopback, resolve, usage, watch_signals, Embedded, Stop};
use crate::flags::{UdpArgs, VerifyArg};
use anyhow::anyhow;
use goodput_core::media::limits::MediaLimits;
use goodput_core::media::MediaPlan;
use goodput_core::units::format_bits_per_second;
use goodput_engine::media::{bind_media, run_media, MediaServerSpec, MediaSpec};
use goodput_engine::CancellationToken;
use std::net::SocketAddr;
use std::time::Duration;

pub(crate) async fn udp(args: UdpArgs) -> Result<u8, Stop> {
    let length = args.length.0;
    if length.subsec_nanos() != 0 || length.is_zero() || length.as_secs() > u64::from(u32::MAX) {
        return Err(usage("--length must be a whole number of seconds, at least 1s"));
    }
    if args.status_interval.0 < Duration::from_millis(10) {
        return Err(usage("--status-interval must be at least 10ms"));
    }
    if args.time_limit.is_some_and(|t| t.0.is_zero()) {
        return Err(usage("--time-limit must be above zero"));
    }
    if args.buffer_depth.0 > Duration::from_secs(3600) {
        return Err(usage("--buffer-depth must be at most 1h"));
    }
    let plan = MediaPlan::new(
        args.bitrate.0,
        args.frame_rate,
        length.as_secs() as u32,
        args.datagram_size,
    )
    .map_err(|e| usage(format!("--bitrate/--frame-rate/--length/--datagram-size: {e}")))?;
    // The receiver's ring (this client's for a download, the server's
    // for an upload) holds at most this many frames ahead of play-out.
    let buffered = (args.buffer_depth.0.as_millis() as u64).saturating_mul(u64::from(args.frame_rate)) / 1000;
    let most = goodput_core::media::receiver::MAX_BUFFERED_FRAMES;
    if buffered > u64::from(most) {
        return Err(usage(format!(
            "--buffer-depth × --frame-rate is {buffered} frames, more than a receiver buffers ({most})"
        )));
    }
    check_socket_room("--connections", u64::from(args.connections))?;
    let cancel = CancellationToken::new();
    watch_signals(cancel.clone());
    let mut server = Embedded::new(&cancel);
    let targets = match &args.host {
        None => {
            let ip = loopback(args.ipv6);
            // The embedded server takes what this client asks: the
            // client's own flags are checked below.
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
        Some(h) => resolve(h, args.port, args.ipv4, args.ipv6).await?,
    };
    let mut views = Views::open(
        &args.views,
        (args.iterations > 0).then(|| args.iterations.saturating_mul(u64::from(args.connections))),
    )?;
    views.quiet_if_stdout(args.jitter_file.as_deref());
    let jitter = match &args.jitter_file {
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
                if args.host.is_none() {
                    " (embedded goodput server)"
                } else {
                    ""
                }
            ),
        ),
        (
            "Direction".into(),
            if args.upload {
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
                args.buffer_depth.0.as_millis()
            ),
        ),
        (
            "Streams".into(),
            format!(
                "{} at once, {}",
                args.connections,
                if args.iterations == 0 {
                    "repeated until --time-limit or Ctrl-C".to_string()
                } else {
                    format!(
                        "{} in turn each ({} in all)",
                        args.iterations,
                        args.iterations * u64::from(args.connections)
                    )
                }
            ),
        ),
        (
            "Verification".into(),
            match args.verify {
                VerifyArg::Data => "every payload against the pattern".into(),
                VerifyArg::Connection => "counts only".into(),
            },
        ),
        ("Total per stream".into(), format!("{} bytes", plan.total_bytes)),
    ];
    views.console.banner("goodput udp", &banner);
    let spec = MediaSpec {
        targets,
        bind: args.bind.clone(),
        plan,
        buffer_depth: args.buffer_depth.0,
        connections: args.connections,
        iterations: args.iterations,
        upload: args.upload,
        verify_data: args.verify == VerifyArg::Data,
        dscp: args.dscp,
        status_interval: args.status_interval.0,
        time_limit: args.time_limit.map(|d| d.0),
        max_records: args.views.max_records,
        datagram_sink: sink,
    };
    let result = run_media(spec, &mut views, cancel.clone()).await;
    server.stop().await;
    let result = result.map_err(|e| Stop::Fatal(e.into()))?;
    views.finish(&result, args.views.json.as_deref())?;
    if let (Some(f), Some(p)) = (jitter, &args.jitter_file) {
        let done = f
            .lock()
            .map_err(|_| anyhow!("the jitter file's writer failed"))?
            .finish();
        done.map_err(|e| Stop::Fatal(anyhow!("cannot write {}: {e}", p.display())))?;
    }
    Ok(exit_status(&result, result.summary.failures() > 0))
}
