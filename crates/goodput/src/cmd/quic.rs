//! `goodput quic`: the QUIC perf client.

use super::views::Views;
use super::{exit_status, loopback, resolve, size_or_time, usage, watch_signals, Embedded, SizeOrTime, Stop};
use crate::flags::QuicArgs;
use anyhow::anyhow;
use goodput_engine::{CancellationToken, Observer};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

pub(crate) async fn quic(args: QuicArgs) -> Result<u8, Stop> {
    use goodput_core::quic::scenario::Scenario;
    use goodput_engine::quic::{bind_quic, run_quic, QuicMode, QuicServerSpec, QuicSpec};
    use goodput_engine::tls::Trust;
    if args.status_interval.0 < Duration::from_millis(10) {
        return Err(usage("--status-interval must be at least 10ms"));
    }
    if args.duration.0.is_zero() {
        return Err(usage("--duration must be above zero"));
    }
    let scenario_of =
        |text: &str| Scenario::parse(text).map_err(|e| usage(format!("scenario '{text}': {e}")));
    let given = args.scenario.clone().or_else(|| args.scenario_flag.clone());
    let mut scenario_text = given.clone();
    let mut notices = Vec::new();
    let mode = if args.handshakes {
        QuicMode::Handshakes
    } else if args.rps || args.latency {
        QuicMode::Requests {
            streams: if args.latency { 1 } else { args.streams },
            request: args.request.0,
            response: args.response.0,
        }
    } else if let Some(u) = &args.upload {
        match size_or_time("--upload", u)? {
            SizeOrTime::Size(n) => {
                let text = format!("*1:{}:0;", n.saturating_add(8));
                scenario_text = Some(text.clone());
                QuicMode::Scenario(scenario_of(&text)?)
            }
            SizeOrTime::Time(d) => QuicMode::UploadFor(d),
        }
    } else if let Some(dl) = &args.download {
        match size_or_time("--download", dl)? {
            SizeOrTime::Size(n) => {
                let text = format!("*1:8:{n};");
                scenario_text = Some(text.clone());
                QuicMode::Scenario(scenario_of(&text)?)
            }
            SizeOrTime::Time(d) => QuicMode::DownloadFor(d),
        }
    } else {
        let text = given.clone().unwrap_or_else(|| "*1:8:100000000;".into());
        let s = scenario_of(&text)?;
        if s.legacy {
            notices.push(format!(
                "'{text}' is picoquic's legacy scenario form (current picoquic rejects it); running it as '{s}'"
            ));
        }
        scenario_text = Some(text);
        QuicMode::Scenario(s)
    };
    if let QuicMode::Scenario(s) = &mode {
        if args.uni
            && s.descs
                .iter()
                .any(|d| !matches!(d.body, goodput_core::quic::scenario::Body::Batch { .. }))
        {
            return Err(usage(
                "--uni applies to batch requests; media descriptions always use bidirectional streams",
            ));
        }
    }
    let cancel = CancellationToken::new();
    watch_signals(cancel.clone());
    let mut server = Embedded::new(&cancel);
    let (target, trust, name) = match &args.host {
        None => {
            let ip = loopback(args.ipv6);
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
            let addr = resolve(h, args.port, args.ipv4, args.ipv6).await?[0];
            let trust = match (&args.ca, args.insecure) {
                (Some(p), _) => Trust::CaFile(p.clone()),
                (None, true) => Trust::Anything,
                (None, false) => Trust::System,
            };
            let bare = h.trim_start_matches('[').trim_end_matches(']');
            let name = args.sni.clone().unwrap_or_else(|| {
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
    if let Some(p) = &args.perf_log {
        goodput_report::open_output(p, true).map_err(|e| Stop::Fatal(anyhow!(e)))?;
    }
    let mut views = Views::open(&args.views, None)?;
    views.quiet_if_stdout(args.perf_log.as_deref());
    let what = match &mode {
        QuicMode::Scenario(s) => format!("scenario {s}"),
        QuicMode::UploadFor(d) => format!("upload for {:.3} s", d.as_secs_f64()),
        QuicMode::DownloadFor(d) => format!("download for {:.3} s (unlimited request, then STOP_SENDING)", d.as_secs_f64()),
        QuicMode::Requests { streams, request, response } => format!(
            "{} for {:.3} s: {streams} request(s) outstanding per connection, {request} B up (plus the 8-byte header), {response} B down",
            if args.latency { "latency" } else { "requests per second" },
            args.duration.0.as_secs_f64()
        ),
        QuicMode::Handshakes => format!("handshakes for {:.3} s", args.duration.0.as_secs_f64()),
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
                if args.host.is_none() {
                    ", embedded goodput server"
                } else {
                    ""
                }
            ),
        ),
        ("Runs".into(), what),
        ("Connections".into(), args.connections.to_string()),
    ];
    views.console.banner("goodput quic", &banner);
    for n in &notices {
        views.on_notice(n);
    }
    let spec = QuicSpec {
        target,
        server_name: name,
        trust,
        mode,
        connections: args.connections,
        duration: args.duration.0,
        uni: args.uni,
        scenario_text,
        status_interval: args.status_interval.0,
        max_records: args.views.max_records,
    };
    let result = run_quic(spec, &mut views, cancel.clone()).await;
    server.stop().await;
    let result = result.map_err(|e| Stop::Fatal(e.into()))?;
    if let Some(p) = &args.perf_log {
        goodput_report::append_perf_log(p, &result)
            .map_err(|e| Stop::Fatal(anyhow!("cannot write {}: {e}", p.display())))?;
    }
    views.finish(&result, args.views.json.as_deref())?;
    let failed = result.quic.as_ref().is_some_and(|q| q.failed_streams > 0) || result.summary.failures() > 0;
    Ok(exit_status(&result, failed))
}
