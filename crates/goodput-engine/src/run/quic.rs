//! A `quic` spec's run: the embedded QUIC perf server when the spec names
//! no host, the client, and its settings banner.

use std::net::SocketAddr;
use std::time::Duration;

use goodput_core::result::TestResult;
use goodput_core::spec::{Family, QuicSpec};
use goodput_core::units::SizeOrTime;
use tokio_util::sync::CancellationToken;

use super::{error_chain, loopback, resolve, Embedded, Failure};
use crate::quic::{bind_quic, run_quic, QuicMode, QuicServerSpec};
use crate::tls::{name_for, Trust};
use crate::Observer;

/// Runs a validated QUIC perf spec.
pub(super) async fn run(
    spec: &QuicSpec,
    observer: &mut dyn Observer,
    cancel: CancellationToken,
    max_records: usize,
) -> Result<TestResult, Failure> {
    let (v4, v6) = (spec.family == Family::Ipv4, spec.family == Family::Ipv6);
    let scenario_text = spec.scenario_text();
    let scenario = spec
        .parsed_scenario()
        .map_err(|e| Failure::setup(e.to_string()))?;
    let mut notices = Vec::new();
    let mode = if spec.handshakes {
        QuicMode::Handshakes
    } else if spec.rps || spec.latency {
        QuicMode::Requests {
            streams: if spec.latency { 1 } else { spec.streams },
            request: spec.request.0,
            response: spec.response.0,
        }
    } else if let Some(SizeOrTime::Time(d)) = spec.upload {
        QuicMode::UploadFor(d.0)
    } else if let Some(SizeOrTime::Time(d)) = spec.download {
        QuicMode::DownloadFor(d.0)
    } else if let Some(s) = scenario {
        if s.legacy {
            notices.push(format!(
                "'{}' is picoquic's legacy scenario form (current picoquic rejects it); running it as '{s}'",
                scenario_text.as_deref().unwrap_or_default()
            ));
        }
        QuicMode::Scenario(s)
    } else {
        return Err(Failure::setup("the spec names nothing to run"));
    };
    let mut server = Embedded::new(&cancel);
    let (target, trust, name) = match &spec.host {
        None => {
            let b = bind_quic(QuicServerSpec {
                listen: vec![SocketAddr::new(loopback(v6), 0)],
                cert_key: None,
                max_connections: 100_000,
                max_per_client: 100_000,
                max_streams: 10_000,
                max_response: u64::MAX - 1,
                // Our own client on loopback: no round trip to validate it.
                retry: false,
                max_handshakes: 100_000,
                handshake_timeout: Duration::from_secs(10),
                max_mtu: spec.max_mtu,
            })
            .map_err(|e| Failure::setup(error_chain(&e)))?;
            let addr = b.local_addrs()[0];
            server.start(|c| async move {
                b.run(c, None).await;
            });
            // Our own server's freshly generated certificate.
            (addr, Trust::Anything, "localhost".to_string())
        }
        Some(h) => {
            let addr = resolve(h, spec.port, v4, v6).await?[0];
            let (host, _) = super::split_target(h, spec.port)?;
            (
                addr,
                Trust::of(spec.ca.as_deref(), spec.insecure),
                name_for(&host, spec.sni.as_deref()),
            )
        }
    };
    let what = match &mode {
        QuicMode::Scenario(s) => format!("scenario {s}"),
        QuicMode::UploadFor(d) => format!("upload for {:.3} s", d.as_secs_f64()),
        QuicMode::DownloadFor(d) => format!(
            "download for {:.3} s (unlimited request, then STOP_SENDING)",
            d.as_secs_f64()
        ),
        QuicMode::Requests {
            streams,
            request,
            response,
        } => format!(
            "{} for {:.3} s: {streams} request(s) outstanding per connection, {request} B up (plus the 8-byte header), {response} B down",
            if spec.latency { "latency" } else { "requests per second" },
            spec.duration.0.as_secs_f64()
        ),
        QuicMode::Handshakes => format!("handshakes for {:.3} s", spec.duration.0.as_secs_f64()),
    };
    let checked = match &trust {
        Trust::Anything => ", any certificate accepted",
        Trust::CaFile(_) => ", checked against `ca`",
        Trust::System => ", checked against the system's roots",
        Trust::Pinned(_) => ", checked against a pinned fingerprint",
    };
    let embedded = if spec.host.is_none() {
        ", embedded goodput server"
    } else {
        ""
    };
    let banner = vec![
        (
            "Server".to_owned(),
            format!("{target} (TLS name {name}{checked}){embedded}"),
        ),
        ("Runs".into(), what),
        ("Connections".into(), spec.connections.to_string()),
        ("Packets".into(), crate::quic::packet_sizes(spec.max_mtu)),
    ];
    observer.on_start(goodput_core::quic::CLIENT_TITLE, &banner);
    for n in &notices {
        observer.on_notice(n);
    }
    let engine = crate::quic::QuicSpec {
        target,
        server_name: name,
        trust,
        mode,
        connections: spec.connections,
        duration: spec.duration.0,
        uni: spec.uni,
        scenario_text,
        status_interval: spec.status_interval.0,
        max_records,
        max_mtu: spec.max_mtu,
    };
    let result = run_quic(engine, observer, cancel.clone()).await;
    server.stop().await;
    result.map_err(|e| Failure::setup(error_chain(&e)))
}
