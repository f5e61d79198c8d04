//! A `stamp` spec's run: the embedded reflector when the spec names no
//! host, the Session-Sender, and its settings banner.

use std::net::SocketAddr;
use std::time::Duration;

use goodput_core::result::TestResult;
use goodput_core::spec::{Family, StampSpec};
use tokio_util::sync::CancellationToken;

use super::{error_chain, loopback, resolve, Embedded, Failure};
use crate::stamp::{bind_reflector, run_sender, ReflectorSpec, StampSenderSpec};
use crate::Observer;

/// Runs a validated STAMP spec; `reflector_stateful`: the caller knows
/// the remote reflector numbers its replies itself (the embedded one does
/// when the spec asks it to).
pub(super) async fn run(
    spec: &StampSpec,
    reflector_stateful: bool,
    observer: &mut dyn Observer,
    cancel: CancellationToken,
    max_records: usize,
) -> Result<TestResult, Failure> {
    let interval = spec.packet_interval();
    let count = spec.packet_count();
    let (v4, v6) = (spec.family == Family::Ipv4, spec.family == Family::Ipv6);
    let mut server = Embedded::new(&cancel);
    let target = match &spec.host {
        None => {
            let r = bind_reflector(ReflectorSpec {
                listen: vec![SocketAddr::new(loopback(v6), 0)],
                stateful: spec.stateful,
                allow: Vec::new(),
                per_source_rate: 0,
                session_timeout: Duration::from_secs(300),
                pad_short: false,
            })
            .map_err(|e| Failure::setup(error_chain(&e)))?;
            let addr = r.local_addrs()[0];
            server.start(|c| async move {
                r.run(c).await;
            });
            addr
        }
        Some(h) => resolve(h, spec.port, v4, v6).await?[0],
    };
    let ends = match (count, &spec.duration) {
        (Some(c), Some(d)) => format!("after {c} packets per session or {} s", d.0.as_secs_f64()),
        (Some(c), None) => format!("after {c} packets per session"),
        (None, Some(d)) => format!("after {} s", d.0.as_secs_f64()),
        (None, None) => "when stopped".to_owned(),
    };
    let embedded = match spec.host {
        None => format!(
            " (embedded goodput reflector, {})",
            if spec.stateful { "stateful" } else { "stateless" }
        ),
        Some(_) => String::new(),
    };
    let banner = vec![
        ("Reflector".to_owned(), format!("{target}{embedded}")),
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
    observer.on_start("goodput stamp", &banner);
    if interval < Duration::from_millis(1) && spec.sessions > 1 {
        observer.on_notice(&format!(
            "{} sessions at {:.0} packets/s each: the machine may not keep up; watch the loss figures",
            spec.sessions,
            1.0 / interval.as_secs_f64()
        ));
    }
    let stateful = if spec.host.is_none() {
        spec.stateful
    } else {
        reflector_stateful
    };
    let sender = StampSenderSpec::for_spec(spec, target, max_records, stateful);
    let result = run_sender(sender, observer, cancel.clone()).await;
    server.stop().await;
    result.map_err(|e| Failure::setup(error_chain(&e)))
}
