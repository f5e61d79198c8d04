//! An `echo` spec's run: the target resolved, TLS set up, the load test,
//! and its settings banner.

use goodput_core::result::TestResult;
use goodput_core::spec::{EchoSpec, Family};
use tokio_util::sync::CancellationToken;

use super::{capped_connections, error_chain, resolve, split_target, Failure};
use crate::echo::{run_echo, EchoSpec as EngineSpec, Hold, Release};
use crate::tls::{client_config, name_for, server_name, Trust};
use crate::Observer;

/// Connections the run keeps open at once: the spec's, capped by the
/// open-file limit, and the notice that says so.
pub fn echo_connections(spec: &EchoSpec) -> (u64, Option<String>) {
    capped_connections(spec.connections, 1)
}

/// Runs a validated echo spec. `release` ends a `pause` hold (the command
/// line's is Enter on a terminal); without one, `pause` holds for
/// `hold_for`.
pub(super) async fn run(
    spec: &EchoSpec,
    release: Option<Release>,
    observer: &mut dyn Observer,
    cancel: CancellationToken,
    max_records: usize,
) -> Result<TestResult, Failure> {
    let size = spec.message_bytes();
    let hold = match (spec.pause, release, spec.hold_for) {
        (true, Some(r), _) => Hold::UntilReleased(r),
        (true, None, None) => {
            return Err(Failure::setup(
                "pause waits for a release this run has none of (no terminal): give hold_for",
            ))
        }
        (_, _, Some(d)) => Hold::For(d.0),
        (false, _, None) if spec.hold => Hold::UntilAllDone,
        (false, _, None) => Hold::No,
    };
    let (host, port) = split_target(&spec.target, spec.port)?;
    let target = resolve(
        &host,
        port,
        spec.family == Family::Ipv4,
        spec.family == Family::Ipv6,
    )
    .await?[0];
    let tls = if spec.tls {
        // validate() saw to it that one of the two is given.
        let trust = Trust::of(spec.ca.as_deref(), spec.insecure);
        let cfg = client_config(&trust).map_err(|e| Failure::setup(error_chain(&e)))?;
        let name = name_for(&host, spec.sni.as_deref());
        Some((
            cfg,
            server_name(&name).map_err(|e| Failure::setup(error_chain(&e)))?,
        ))
    } else {
        None
    };
    let (connections, notice) = echo_connections(spec);
    let mut banner = vec![
        (
            "Echo server".to_owned(),
            format!(
                "{target}{}",
                match (spec.tls, &spec.ca) {
                    (false, _) => String::new(),
                    (true, Some(ca)) => format!(" over TLS (trusting {})", ca.display()),
                    (true, None) => " over TLS (any certificate accepted: `insecure`)".into(),
                }
            ),
        ),
        (
            "Connections".into(),
            format!(
                "{connections}, {}{}",
                if spec.sync_connect {
                    "one at a time"
                } else {
                    "all at once"
                },
                spec.batch_size.map_or(String::new(), |b| format!(
                    ", in batches of {b} every {} ms",
                    spec.batch_delay.0.as_millis()
                ))
            ),
        ),
        (
            "Messages".into(),
            if spec.messages == 0 {
                "none (connect only)".into()
            } else {
                format!(
                    "{} per connection, {} B each, every {} ms, {}",
                    spec.messages,
                    size,
                    spec.message_rate.0.as_millis(),
                    if spec.send_after_recv {
                        "closed loop (timer starts when the echo is back)"
                    } else {
                        "open loop (round trips from the scheduled send time)"
                    }
                )
            },
        ),
    ];
    banner.push((
        "Close".into(),
        match &hold {
            Hold::No => "each connection when its messages are done".into(),
            Hold::UntilAllDone => "all together when every connection is done".into(),
            Hold::UntilReleased(r) => format!("all together when {}", r.how),
            Hold::For(d) => format!("all together {} ms after every connection is done", d.as_millis()),
        },
    ));
    observer.on_start("goodput echo", &banner);
    if let Some(n) = &notice {
        observer.on_notice(n);
    }
    let engine = EngineSpec {
        target,
        connections,
        batch_size: spec.batch_size,
        batch_delay: spec.batch_delay.0,
        messages: spec.messages,
        message_size: size,
        message_interval: spec.message_rate.0,
        send_after_recv: spec.send_after_recv,
        sync_connect: spec.sync_connect,
        hold,
        connect_timeout: spec.connect_timeout.0,
        reply_timeout: spec.reply_timeout.0,
        status_interval: spec.status_interval.0,
        max_records,
        tls,
        preallocate: spec.preallocate,
    };
    run_echo(engine, observer, cancel)
        .await
        .map_err(|e| Failure::setup(error_chain(&e)))
}
