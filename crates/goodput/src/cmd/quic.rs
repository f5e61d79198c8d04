//! `goodput quic`: its flags become a `QuicSpec`; the QUIC perf client.

use super::run::{run_spec, Extras};
use super::views::Views;
use super::{
    exit_status, flag_error, loopback, print_spec, resolve, usage, watch_signals, Embedded, Stop, EXIT_OK,
};
use crate::flags::{QuicArgs, ViewArgs};
use anyhow::anyhow;
use goodput_core::spec::{Family, QuicSpec, SpecError, TestSpec};
use goodput_core::units::SizeOrTime;
use goodput_engine::quic::{bind_quic, QuicMode, QuicServerSpec};
use goodput_engine::tls::Trust;
use goodput_engine::{CancellationToken, Observer};
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::time::Duration;

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
        ca: args.ca.clone(),
        insecure: args.insecure,
        sni: args.sni.clone(),
        family: Family::of(args.ipv4, args.ipv6),
        status_interval: args.status_interval,
    };
    spec.validate().map_err(|e| quic_flag_error(&e))?;
    if args.print_spec {
        print_spec(&TestSpec::Quic(spec))?;
        return Ok(EXIT_OK);
    }
    let extras = Extras {
        perf_log: args.perf_log.as_deref(),
        ..Extras::default()
    };
    run_spec(TestSpec::Quic(spec), &args.views, &extras).await
}

/// Runs a validated QUIC spec: `goodput quic`'s path and `goodput run`'s.
/// The performance log is an output, not part of the test.
pub(crate) async fn run_quic(spec: QuicSpec, out: &ViewArgs, perf_log: Option<&Path>) -> Result<u8, Stop> {
    let document = TestSpec::Quic(spec.clone());
    let (v4, v6) = (spec.family == Family::Ipv4, spec.family == Family::Ipv6);
    let scenario_text = spec.scenario_text();
    let scenario = spec.parsed_scenario().map_err(|e| quic_flag_error(&e))?;
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
        return Err(Stop::Fatal(anyhow!("the spec names nothing to run")));
    };
    let cancel = CancellationToken::new();
    watch_signals(cancel.clone());
    let mut server = Embedded::new(&cancel);
    let (target, trust, name) = match &spec.host {
        None => {
            let ip = loopback(v6);
            let b = bind_quic(QuicServerSpec {
                listen: vec![SocketAddr::new(ip, 0)],
                cert_key: None,
                max_connections: 100_000,
                max_per_client: 100_000,
                max_streams: 10_000,
                max_response: u64::MAX - 1,
                // Our own client on loopback: no round trip to validate it.
                retry: false,
                max_handshakes: 100_000,
                handshake_timeout: Duration::from_secs(10),
            })
            .map_err(|e| Stop::Fatal(e.into()))?;
            let addr = b.local_addrs()[0];
            server.start(|c| async move {
                b.run(c).await;
            });
            // Our own server's freshly generated certificate.
            (addr, Trust::Anything, "localhost".to_string())
        }
        Some(h) => {
            let addr = resolve(h, spec.port, v4, v6).await?[0];
            let trust = match (&spec.ca, spec.insecure) {
                (Some(p), _) => Trust::CaFile(p.clone()),
                (None, true) => Trust::Anything,
                (None, false) => Trust::System,
            };
            let bare = h.trim_start_matches('[').trim_end_matches(']');
            let name = spec.sni.clone().unwrap_or_else(|| {
                if bare.parse::<IpAddr>().is_ok() {
                    "localhost".into()
                } else {
                    bare.to_string()
                }
            });
            (addr, trust, name)
        }
    };
    // The log is appended to at the end; find out now that it cannot be.
    if let Some(p) = perf_log {
        goodput_report::open_output(p, true).map_err(|e| Stop::Fatal(anyhow!(e)))?;
    }
    let mut views = Views::open(out, None)?;
    views.quiet_if_stdout(perf_log);
    let what = match &mode {
        QuicMode::Scenario(s) => format!("scenario {s}"),
        QuicMode::UploadFor(d) => format!("upload for {:.3} s", d.as_secs_f64()),
        QuicMode::DownloadFor(d) => format!("download for {:.3} s (unlimited request, then STOP_SENDING)", d.as_secs_f64()),
        QuicMode::Requests { streams, request, response } => format!(
            "{} for {:.3} s: {streams} request(s) outstanding per connection, {request} B up (plus the 8-byte header), {response} B down",
            if spec.latency { "latency" } else { "requests per second" },
            spec.duration.0.as_secs_f64()
        ),
        QuicMode::Handshakes => format!("handshakes for {:.3} s", spec.duration.0.as_secs_f64()),
    };
    let banner = vec![
        (
            "Server".to_owned(),
            format!(
                "{target} (TLS name {name}{}){}",
                match &trust {
                    Trust::Anything => ", any certificate accepted",
                    Trust::CaFile(_) => ", checked against --ca",
                    Trust::System => ", checked against the system's roots",
                },
                if spec.host.is_none() {
                    ", embedded goodput server"
                } else {
                    ""
                }
            ),
        ),
        ("Runs".into(), what),
        ("Connections".into(), spec.connections.to_string()),
    ];
    views.console.banner("goodput quic", &banner);
    for n in &notices {
        views.on_notice(n);
    }
    let engine = goodput_engine::quic::QuicSpec {
        target,
        server_name: name,
        trust,
        mode,
        connections: spec.connections,
        duration: spec.duration.0,
        uni: spec.uni,
        scenario_text,
        status_interval: spec.status_interval.0,
        max_records: out.max_records,
    };
    let result = goodput_engine::quic::run_quic(engine, &mut views, cancel.clone()).await;
    server.stop().await;
    let mut result = result.map_err(|e| Stop::Fatal(e.into()))?;
    result.spec = Some(document);
    if let Some(p) = perf_log {
        goodput_report::append_perf_log(p, &result)
            .map_err(|e| Stop::Fatal(anyhow!("cannot write {}: {e}", p.display())))?;
    }
    views.finish(&result, out.json.as_deref())?;
    let failed = result.quic.as_ref().is_some_and(|q| q.failed_streams > 0) || result.summary.failures() > 0;
    Ok(exit_status(&result, failed))
}
