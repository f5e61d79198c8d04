//! A `tcp` spec's run: the embedded loopback server when the spec names no
//! host, the client, and its settings banner.

use std::net::SocketAddr;
use std::time::Duration;

use goodput_core::plan::TcpPattern;
use goodput_core::result::TestResult;
use goodput_core::session::VerifyMode;
use goodput_core::spec::tcp::MAX_BUFFER;
use goodput_core::spec::{Family, TcpSpec};
use goodput_core::units::{format_size, ByteRate};
use tokio_util::sync::CancellationToken;

use super::{capped_connections, error_chain, loopback, resolve, socket_options, Embedded, Failure};
use crate::tcp::{bind_server, run_client, CtsServerPlan, ServerLimits, TcpClientSpec, TcpServerSpec};
use crate::{NullObserver, Observer};

/// Connections the run keeps open at once: the spec's, capped by the
/// open-file limit (each needs a descriptor, two with the embedded
/// server), and the notice that says so.
pub fn concurrent_connections(spec: &TcpSpec) -> (u64, Option<String>) {
    capped_connections(spec.connections, if spec.hosts.is_empty() { 2 } else { 1 })
}

/// Runs a validated TCP spec.
pub(super) async fn run(
    spec: &TcpSpec,
    observer: &mut dyn Observer,
    cancel: CancellationToken,
    max_records: usize,
) -> Result<TestResult, Failure> {
    let socket = socket_options(&spec.socket);
    let embedded = spec.hosts.is_empty();
    let (v4, v6) = (spec.family == Family::Ipv4, spec.family == Family::Ipv6);
    let (connections, notice) = concurrent_connections(spec);

    let mut server = Embedded::new(&cancel);
    let targets = if embedded {
        let server_spec = TcpServerSpec {
            wire: spec.wire,
            cts: Some(CtsServerPlan {
                pattern: spec.pattern,
                verify: spec.verify,
                transfer: spec.transfer.hi.0,
                push_bytes: spec.push_bytes.0,
                pull_bytes: spec.pull_bytes.0,
                buffer: spec.buffer.hi.0,
            }),
            listen: vec![SocketAddr::new(loopback(v6), 0)],
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
        let bound = bind_server(server_spec).map_err(|e| Failure::setup(error_chain(&e)))?;
        let addrs = bound.local_addrs();
        server.start(|c| async move {
            let _ = bound.run(&mut NullObserver, c).await;
        });
        addrs
    } else {
        let mut all = Vec::new();
        for h in &spec.hosts {
            for a in resolve(h, spec.port, v4, v6).await? {
                if !all.contains(&a) {
                    all.push(a);
                }
            }
        }
        all
    };

    crate::socket::preflight_tcp(&targets, &spec.bind, &socket).map_err(|e| Failure::setup(e.to_string()))?;
    let first_target = targets.first().copied();
    let client = TcpClientSpec {
        wire: spec.wire,
        targets,
        binds: spec.bind.clone(),
        local_port: spec.local_port,
        pattern: spec.pattern,
        verify: spec.verify,
        transfer: spec.transfer,
        duration: spec.duration.map(|d| d.0),
        omit: spec.omit.map_or(Duration::ZERO, |d| d.0),
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
        max_records,
    };
    observer.on_start(
        "goodput tcp: configured settings",
        &client_banner(&client, embedded),
    );
    if let Some(n) = &notice {
        observer.on_notice(n);
    }
    let result = run_client(client, observer, cancel.clone()).await;
    server.stop().await;
    let result = result.map_err(|e| Failure::setup(error_chain(&e)))?;
    match first_target {
        Some(target) if !embedded && nothing_listened(&result) => Err(Failure::setup(nothing_listens(
            "TCP",
            target,
            "`goodput server` there (or `goodput server --tcp`)",
        ))),
        _ => Ok(result),
    }
}

/// The words for a port where nothing listens, shared by every kind that
/// finds one: `nothing listens on TCP 192.0.2.7:4444: start `goodput
/// server` there (or …)`. `start` names what to run at the far end.
pub(crate) fn nothing_listens(protocol: &str, target: SocketAddr, start: &str) -> String {
    format!("nothing listens on {protocol} {target}: start {start}")
}

/// Whether every connection of a run was refused at connect, none moving
/// a byte: the run never started, for want of a server.
fn nothing_listened(result: &TestResult) -> bool {
    use goodput_core::result::Outcome;
    let s = &result.summary;
    s.successful == 0
        && s.data_errors == 0
        && s.network_errors > 0
        && s.sent_bytes == 0
        && s.received_bytes == 0
        && !result.connections.is_empty()
        && result.connections.iter().all(|c| {
            matches!(&c.outcome, Outcome::NetworkError { during, name, .. }
                if name == "ECONNREFUSED" && during == "connect")
        })
}

fn client_banner(spec: &TcpClientSpec, embedded: bool) -> Vec<(String, String)> {
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
        match spec.duration {
            Some(d) => (
                "Duration per connection".into(),
                format!(
                    "{:.3} s{}, then each sender closes its direction; good-put at the receivers",
                    d.as_secs_f64(),
                    if spec.omit.is_zero() {
                        String::new()
                    } else {
                        format!(" ({:.3} s warm-up left out)", spec.omit.as_secs_f64())
                    }
                ),
            ),
            None => (
                "Transfer per connection".into(),
                range_text(spec.transfer.lo.0, spec.transfer.hi.0),
            ),
        },
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

fn range_text(lo: u64, hi: u64) -> String {
    if lo == hi {
        let size = format_size(lo);
        // "1048576 B (1 MiB)"; a size that is not whole units already ends
        // with its exact count ("976.56 KiB (1000000 B)").
        if lo < 1024 || size.ends_with(" B)") {
            size
        } else {
            format!("{lo} B ({size})")
        }
    } else {
        format!("{lo}..{hi} B, picked per connection")
    }
}
