//! A `udp` spec's run: the embedded media server when the spec names no
//! host, the media streams, and their settings banner.

use std::net::SocketAddr;

use goodput_core::media::limits::MediaLimits;
use goodput_core::result::TestResult;
use goodput_core::session::VerifyMode;
use goodput_core::spec::{Family, UdpSpec};
use goodput_core::units::format_bits_per_second;
use tokio_util::sync::CancellationToken;

use super::{error_chain, loopback, resolve, Embedded, Failure};
use crate::media::{bind_media, run_media, DatagramSink, MediaServerSpec, MediaSpec};
use crate::Observer;

/// Runs a validated UDP media spec; `sink` gets every received datagram
/// (the command line's jitter file).
pub(super) async fn run(
    spec: &UdpSpec,
    sink: Option<DatagramSink>,
    observer: &mut dyn Observer,
    cancel: CancellationToken,
    max_records: usize,
) -> Result<TestResult, Failure> {
    let plan = spec
        .plan()
        .map_err(|e| Failure::setup(format!("the stream cannot be planned: {e}")))?;
    let (v4, v6) = (spec.family == Family::Ipv4, spec.family == Family::Ipv6);
    let mut server = Embedded::new(&cancel);
    let targets = match &spec.host {
        None => {
            // The embedded server takes what this client asks: the
            // client's own spec was checked.
            let b = bind_media(MediaServerSpec {
                listen: vec![SocketAddr::new(loopback(v6), 0)],
                max_streams: 100_000,
                limits: MediaLimits {
                    max_bits_per_second: u64::MAX,
                    max_length_s: u32::MAX,
                    max_frame_rate: u32::MAX,
                    max_buffer_ms: u32::MAX,
                },
                max_memory: u64::MAX,
                // The embedded server has one client: this process.
                max_per_client: usize::MAX,
                max_client_memory: u64::MAX,
            })
            .map_err(|e| Failure::setup(error_chain(&e)))?;
            let addr = b.local_addrs()[0];
            server.start(|c| async move {
                b.run(c).await;
            });
            vec![addr]
        }
        Some(h) => resolve(h, spec.port, v4, v6).await?,
    };
    let dpf = plan.datagram_sizes().len();
    let servers = targets
        .iter()
        .map(|a| a.to_string())
        .collect::<Vec<_>>()
        .join(", ");
    let embedded = if spec.host.is_none() {
        " (embedded goodput server)"
    } else {
        ""
    };
    let banner = vec![
        ("Server".to_owned(), format!("{servers}{embedded}")),
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
                    "repeated until `time_limit` or Ctrl-C".to_string()
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
    observer.on_start("goodput udp", &banner);
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
        max_records,
        datagram_sink: sink,
    };
    let result = run_media(media, observer, cancel.clone()).await;
    server.stop().await;
    result.map_err(|e| Failure::setup(error_chain(&e)))
}
