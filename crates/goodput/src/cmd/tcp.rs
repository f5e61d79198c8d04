//! `goodput tcp`: its flags become a `TcpSpec`, which runs against a server
//! or an embedded one.

use super::run::{run_spec, Extras};
use super::views::Views;
use super::{
    flag_error, loopback, print_spec, range_text, resolve, socket_options_of, socket_room, watch_signals,
    Embedded, Stop, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK,
};
use crate::flags::{ShutdownArg, TcpArgs, ViewArgs};
use anyhow::anyhow;
use goodput_core::plan::TcpPattern;
use goodput_core::result::EndReason;
use goodput_core::session::VerifyMode;
use goodput_core::spec::{Family, TcpSpec, TcpWire, TestSpec};
use goodput_core::units::ByteRate;
use goodput_engine::tcp::{
    bind_server, run_client, CtsServerPlan, ServerLimits, ShutdownMode, TcpClientSpec, TcpServerSpec,
    WireProtocol,
};
use goodput_engine::{CancellationToken, NullObserver, Observer};
use std::net::SocketAddr;
use std::time::Duration;

/// Largest I/O size goodput accepts (the shared pattern buffer is sized to it).
pub(crate) const MAX_BUFFER: u64 = 64 << 20;

pub(crate) async fn tcp(args: TcpArgs) -> Result<u8, Stop> {
    let spec = tcp_spec(&args);
    spec.validate().map_err(|e| flag_error(&e))?;
    if args.print_spec {
        print_spec(&TestSpec::Tcp(spec))?;
        return Ok(EXIT_OK);
    }
    run_spec(TestSpec::Tcp(spec), &args.output.views, &Extras::default()).await
}

/// Runs a validated TCP spec with the views `out` asks for: the one path
/// of `goodput tcp` and of a tcp test in `goodput run`.
pub(crate) async fn run_tcp(spec: TcpSpec, out: &ViewArgs) -> Result<u8, Stop> {
    let document = TestSpec::Tcp(spec.clone());
    let socket = socket_options_of(&spec.socket);
    let cancel = CancellationToken::new();
    watch_signals(cancel.clone());

    let hosts = spec.hosts.clone();
    let embedded = hosts.is_empty();
    let (v4, v6) = (spec.family == Family::Ipv4, spec.family == Family::Ipv6);
    let mut notices = Vec::new();

    // Every connection needs a descriptor here, two with the embedded server.
    let mut connections = spec.connections;
    let per_conn = if embedded { 2 } else { 1 };
    if let Some((room, limit)) = socket_room(per_conn) {
        if connections > room {
            notices.push(format!(
                "--connections {connections} capped to {room}: the open-file limit (RLIMIT_NOFILE) is {limit}"
            ));
            connections = room.max(1);
        }
    }

    let mut server = Embedded::new(&cancel);
    let targets = if embedded {
        let ip = loopback(v6);
        let server_spec = TcpServerSpec {
            wire: tcp_wire(spec.wire),
            cts: Some(CtsServerPlan {
                pattern: spec.pattern,
                verify: spec.verify,
                transfer: spec.transfer.hi.0,
                push_bytes: spec.push_bytes.0,
                pull_bytes: spec.pull_bytes.0,
                buffer: spec.buffer.hi.0,
            }),
            listen: vec![SocketAddr::new(ip, 0)],
            listen_defaulted: false,
            reuse_port: false,
            socket: socket.clone(),
            limits: ServerLimits {
                max_transfer: u64::MAX,
                max_buffer: MAX_BUFFER,
                max_duration: Duration::from_secs(u64::MAX / 4),
                // The embedded server's one client is this process.
                max_connections: u64::MAX,
                max_per_client: u64::MAX,
                max_pending: u64::MAX,
                max_pending_per_client: u64::MAX,
                ..ServerLimits::default()
            },
            exit_after: None,
            idle_timeout: spec.idle_timeout.0,
            status_interval: Duration::from_secs(3600),
            time_limit: None,
            max_records: 0,
        };
        let bound = bind_server(server_spec).map_err(|e| Stop::Fatal(e.into()))?;
        let addrs = bound.local_addrs();
        server.start(|c| async move {
            let _ = bound.run(&mut NullObserver, c).await;
        });
        addrs
    } else {
        let mut all = Vec::new();
        for h in &hosts {
            for a in resolve(h, spec.port, v4, v6).await? {
                if !all.contains(&a) {
                    all.push(a);
                }
            }
        }
        all
    };

    goodput_engine::socket::preflight_tcp(&targets, &spec.bind, &socket)
        .map_err(|e| Stop::Fatal(anyhow!("{e}")))?;
    let spec = TcpClientSpec {
        wire: tcp_wire(spec.wire),
        targets,
        binds: spec.bind.clone(),
        local_port: spec.local_port,
        pattern: spec.pattern,
        verify: spec.verify,
        transfer: spec.transfer,
        buffer: spec.buffer,
        push_bytes: spec.push_bytes.0,
        pull_bytes: spec.pull_bytes.0,
        rate_limit: spec.rate_limit,
        rate_period: spec.rate_period.0,
        burst: spec.burst_count.zip(spec.burst_delay.map(|d| d.0)),
        connections,
        iterations: spec.iterations,
        throttle: spec.throttle,
        shutdown: spec.shutdown,
        socket,
        idle_timeout: spec.idle_timeout.0,
        status_interval: spec.status_interval.0,
        time_limit: spec.time_limit.map(|d| d.0),
        max_records: out.max_records,
    };
    let finite = (spec.iterations > 0).then(|| spec.iterations.saturating_mul(spec.connections));
    let mut views = Views::open(out, finite)?;
    views.console.banner(
        "goodput tcp: configured settings",
        &client_banner(&spec, embedded),
    );
    for n in &notices {
        views.on_notice(n);
    }
    let result = run_client(spec, &mut views, cancel.clone()).await;
    server.stop().await;
    let mut result = result.map_err(|e| Stop::Fatal(e.into()))?;
    result.spec = Some(document);
    views.finish(&result, out.json.as_deref())?;
    Ok(if result.summary.failures() > 0 {
        EXIT_FAILED
    } else if result.end == EndReason::Interrupted {
        EXIT_INTERRUPTED
    } else {
        EXIT_OK
    })
}

/// The spec `goodput tcp`'s flags describe.
pub(crate) fn tcp_spec(args: &TcpArgs) -> TcpSpec {
    let mut hosts: Vec<String> = args.host.iter().cloned().collect();
    hosts.extend(args.target.iter().cloned());
    TcpSpec {
        hosts,
        port: args.port,
        family: Family::of(args.ipv4, args.ipv6),
        bind: args.bind.clone(),
        local_port: args.local_port,
        wire: args.wire.spec(),
        pattern: args.data.pattern.spec(),
        transfer: args.data.transfer,
        buffer: args.data.buffer,
        push_bytes: args.data.push_bytes,
        pull_bytes: args.data.pull_bytes,
        verify: args.data.verify.spec(),
        rate_limit: args.rate_limit,
        rate_period: args.rate_period,
        burst_count: args.burst_count,
        burst_delay: args.burst_delay,
        connections: args.connections,
        iterations: args.iterations,
        throttle: args.throttle,
        shutdown: match args.shutdown {
            ShutdownArg::Graceful => ShutdownMode::Graceful,
            ShutdownArg::Rude => ShutdownMode::Rude,
            ShutdownArg::Random => ShutdownMode::Random,
        },
        socket: args.socket.spec(),
        time_limit: args.output.time_limit,
        status_interval: args.output.status_interval,
        idle_timeout: args.output.idle_timeout,
    }
}

pub(crate) fn tcp_wire(w: TcpWire) -> WireProtocol {
    match w {
        TcpWire::Goodput => WireProtocol::Goodput,
        TcpWire::Cts => WireProtocol::Cts,
    }
}

pub(crate) fn client_banner(spec: &TcpClientSpec, embedded: bool) -> Vec<(String, String)> {
    let mut v = vec![
        (
            "Protocol".to_owned(),
            format!("TCP, {:?} wire", spec.wire).to_lowercase(),
        ),
        ("Pattern".into(), spec.pattern.name().into()),
    ];
    if spec.pattern == TcpPattern::PushPull {
        v.push((
            "Segments".into(),
            format!("push {} B, pull {} B", spec.push_bytes, spec.pull_bytes),
        ));
    }
    v.extend([
        (
            "Verification".into(),
            match spec.verify {
                VerifyMode::Data => "connections and data",
                VerifyMode::Connection => "connections",
            }
            .into(),
        ),
        (
            "Transfer per connection".into(),
            range_text(spec.transfer.lo.0, spec.transfer.hi.0),
        ),
        (
            "Buffer per send/recv".into(),
            range_text(spec.buffer.lo.0, spec.buffer.hi.0),
        ),
        (
            "Rate limit per connection".into(),
            match spec.rate_limit {
                None => "unlimited".into(),
                Some(r) if r.is_single() => {
                    format!("{} per {} ms", ByteRate(r.lo.0), spec.rate_period.as_millis())
                }
                Some(r) => format!(
                    "{}..{} B/s per {} ms",
                    r.lo.0,
                    r.hi.0,
                    spec.rate_period.as_millis()
                ),
            },
        ),
        ("Concurrent connections".into(), spec.connections.to_string()),
        (
            "Total connections".into(),
            if spec.iterations == 0 {
                "until stopped (iterations 0)".into()
            } else {
                format!(
                    "{} ({} × {} connections)",
                    spec.iterations * spec.connections,
                    spec.iterations,
                    spec.connections
                )
            },
        ),
        ("Connect throttle".into(), spec.throttle.to_string()),
        ("Shutdown".into(), format!("{:?}", spec.shutdown).to_lowercase()),
        (
            "Targets".into(),
            spec.targets
                .iter()
                .map(|a| a.to_string())
                .collect::<Vec<_>>()
                .join(", ")
                + if embedded {
                    " (embedded loopback server)"
                } else {
                    ""
                },
        ),
    ]);
    if !spec.binds.is_empty() {
        v.push((
            "Bind".into(),
            spec.binds
                .iter()
                .map(|a| a.to_string())
                .collect::<Vec<_>>()
                .join(", "),
        ));
    }
    v.push((
        "Status interval".into(),
        format!("{} ms", spec.status_interval.as_millis()),
    ));
    if let Some(t) = spec.time_limit {
        v.push(("Time limit".into(), format!("{} ms", t.as_millis())));
    }
    v
}
