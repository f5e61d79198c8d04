//! `goodput stamp`: its flags become a `StampSpec`; a STAMP sender.

use super::run::{run_spec, Extras};
use super::views::Views;
use super::{
    check_socket_room, exit_status, flag_error, loopback, print_spec, resolve, watch_signals, Embedded, Stop,
    EXIT_OK,
};
use crate::flags::{StampArgs, ViewArgs};
use anyhow::anyhow;
use goodput_core::spec::{Family, StampSpec, TestSpec};
use goodput_engine::stamp::{bind_reflector, ReflectorSpec, StampSenderSpec};
use goodput_engine::{CancellationToken, EngineError, Observer};
use std::io;
use std::net::SocketAddr;
use std::time::Duration;

/// A reflector that cannot bind: say how to get past a privileged port.
pub(crate) fn stamp_bind_error(e: EngineError, port: u16) -> Stop {
    if let EngineError::Listen { source, .. } = &e {
        if source.kind() == io::ErrorKind::PermissionDenied && port < 1024 {
            return Stop::Fatal(anyhow!(
                "{e}: {source}; port {port} needs root or CAP_NET_BIND_SERVICE (or use --stamp-port 8620)"
            ));
        }
    }
    Stop::Fatal(e.into())
}

pub(crate) async fn stamp(args: StampArgs) -> Result<u8, Stop> {
    let spec = StampSpec {
        host: args.host.clone(),
        port: args.port,
        interval: args.rate.is_none().then_some(args.interval),
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
    };
    spec.validate().map_err(|e| flag_error(&e))?;
    if args.print_spec {
        print_spec(&TestSpec::Stamp(spec))?;
        return Ok(EXIT_OK);
    }
    let extras = Extras {
        packet_file: args.packet_file.as_deref(),
        ..Extras::default()
    };
    run_spec(TestSpec::Stamp(spec), &args.views, &extras).await
}

/// Runs a validated STAMP spec: `goodput stamp`'s path and `goodput run`'s.
pub(crate) async fn run_stamp(
    spec: StampSpec,
    out: &ViewArgs,
    packet_file: Option<&std::path::Path>,
) -> Result<u8, Stop> {
    let document = TestSpec::Stamp(spec.clone());
    let interval = spec.packet_interval();
    let count = spec.packet_count();
    let (v4, v6) = (spec.family == Family::Ipv4, spec.family == Family::Ipv6);
    let mut notices = Vec::new();
    check_socket_room("--sessions", u64::from(spec.sessions))?;
    let cancel = CancellationToken::new();
    watch_signals(cancel.clone());
    let mut server = Embedded::new(&cancel);
    let target = match &spec.host {
        None => {
            let ip = loopback(v6);
            let r = bind_reflector(ReflectorSpec {
                listen: vec![SocketAddr::new(ip, 0)],
                stateful: spec.stateful,
                allow: Vec::new(),
                per_source_rate: 0,
                session_timeout: Duration::from_secs(300),
                pad_short: false,
            })
            .map_err(|e| Stop::Fatal(e.into()))?;
            let addr = r.local_addrs()[0];
            server.start(|c| async move {
                r.run(c).await;
            });
            addr
        }
        Some(h) => resolve(h, spec.port, v4, v6).await?[0],
    };
    if interval < Duration::from_millis(1) && spec.sessions > 1 {
        notices.push(format!(
            "{} sessions at {:.0} packets/s each: the machine may not keep up; watch the loss figures",
            spec.sessions,
            1.0 / interval.as_secs_f64()
        ));
    }
    let mut views = Views::open(out, None)?;
    if let Some(p) = packet_file {
        let f = goodput_report::PacketFile::create(p).map_err(|e| Stop::Fatal(anyhow!(e)))?;
        views.files.push(Box::new(f));
    }
    views.quiet_if_stdout(packet_file);
    let ends = match (count, &spec.duration) {
        (Some(c), Some(d)) => format!("after {c} packets per session or {} s", d.0.as_secs_f64()),
        (Some(c), None) => format!("after {c} packets per session"),
        (None, Some(d)) => format!("after {} s", d.0.as_secs_f64()),
        (None, None) => unreachable!("a count is chosen when neither is given"),
    };
    let banner = vec![
        (
            "Reflector".to_owned(),
            format!(
                "{target}{}",
                if spec.host.is_none() {
                    format!(
                        " (embedded goodput reflector, {})",
                        if spec.stateful { "stateful" } else { "stateless" }
                    )
                } else {
                    String::new()
                }
            ),
        ),
        (
            "Sessions".into(),
            format!(
                "{}{}",
                spec.sessions,
                spec.ssid.map_or(String::new(), |s| format!(", SSID {s} upwards"))
            ),
        ),
        (
            "Packets".into(),
            format!(
                "{} B every {:.3} ms ({:.1} packets/s per session), DSCP {}, TTL 255",
                spec.size,
                interval.as_secs_f64() * 1e3,
                1.0 / interval.as_secs_f64(),
                spec.dscp
            ),
        ),
        ("Ends".into(), ends),
        (
            "Loss timeout".into(),
            format!("{} ms", spec.timeout.0.as_millis()),
        ),
    ];
    views.console.banner("goodput stamp", &banner);
    for n in &notices {
        views.on_notice(n);
    }
    let spec = StampSenderSpec {
        target,
        bind: spec.bind,
        sessions: spec.sessions,
        interval,
        count,
        duration: spec.duration.map(|d| d.0),
        packet_bytes: spec.size,
        dscp: spec.dscp,
        ssid: spec.ssid,
        timeout: spec.timeout.0,
        status_interval: spec.status_interval.0,
        max_records: out.max_records,
    };
    let result = goodput_engine::stamp::run_sender(spec, &mut views, cancel.clone()).await;
    server.stop().await;
    let mut result = result.map_err(|e| Stop::Fatal(e.into()))?;
    result.spec = Some(document);
    views.finish(&result, out.json.as_deref())?;
    Ok(exit_status(&result, result.summary.failures() > 0))
}
