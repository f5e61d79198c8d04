//! An `iperf3` spec's run: the embedded goodput iperf3 server when the spec
//! names no host, the iperf3 client, and its settings banner.

use std::net::SocketAddr;
use std::time::Duration;

use goodput_core::result::TestResult;
use goodput_core::spec::{Family, Iperf3Spec};
use goodput_core::units::{format_bits_per_second, format_size};
use tokio_util::sync::CancellationToken;

use super::{error_chain, loopback, resolve, Embedded, Failure};
use crate::iperf3::{bind_server, run_client, Iperf3ClientSpec, Iperf3ServerSpec};
use crate::{NullObserver, Observer};

/// Runs a validated iperf3 spec. A server that refuses the test, or a test
/// that breaks off, is a failure of the test (not of its setup).
pub(super) async fn run(
    spec: &Iperf3Spec,
    observer: &mut dyn Observer,
    cancel: CancellationToken,
    max_records: usize,
) -> Result<TestResult, Failure> {
    let p = spec.params().map_err(|e| Failure::setup(e.to_string()))?;
    let (v4, v6) = (spec.family == Family::Ipv4, spec.family == Family::Ipv6);
    let mut server = Embedded::new(&cancel);
    let target = match &spec.host {
        None => {
            let srv = bind_server(Iperf3ServerSpec {
                listen: SocketAddr::new(loopback(v6), 0),
                max_duration: Duration::from_secs(86_400 + 600),
                timeout: Duration::from_secs(10),
                status_interval: spec.interval.0,
                max_records: 0,
                exit_after: Some(1),
                allow: Vec::new(),
            })
            .map_err(|e| Failure::setup(error_chain(&e)))?;
            let addr = srv.local_addr();
            server.start(|c| async move {
                let _ = srv.run(&mut NullObserver, c).await;
            });
            addr
        }
        Some(h) => resolve(h, spec.port, v4, v6).await?[0],
    };
    let mode = if p.bidirectional {
        "bidirectional"
    } else if p.reverse {
        "reverse (server sends)"
    } else {
        "forward (client sends)"
    };
    let end = if p.num > 0 {
        format!("after {}", format_size(p.num))
    } else if p.blockcount > 0 {
        format!("after {} blocks", p.blockcount)
    } else {
        format!("after {} s (+{} s omitted)", p.time, p.omit)
    };
    let embedded = if spec.host.is_none() {
        " (embedded goodput iperf3 server)"
    } else {
        ""
    };
    let mut banner = vec![
        ("Server".to_owned(), format!("{target}{embedded}")),
        (
            "Protocol".into(),
            format!("iperf3 {}, {mode}", if spec.udp { "UDP" } else { "TCP" }),
        ),
        ("Streams".into(), format!("{} per direction", p.parallel)),
        ("Block size".into(), format!("{} B", p.len)),
        ("Ends".into(), end),
    ];
    if p.bandwidth > 0 {
        banner.push((
            "Rate per stream".into(),
            format!(
                "{} bit/s ({})",
                p.bandwidth,
                format_bits_per_second(p.bandwidth as f64 / 8.0)
            ),
        ));
    }
    observer.on_start("goodput iperf3", &banner);
    let client = Iperf3ClientSpec {
        target,
        bind: spec.bind,
        cport: spec.cport,
        params: p,
        status_interval: spec.interval.0,
        timeout: spec.timeout.0,
        max_records,
    };
    let result = run_client(client, observer, cancel.clone()).await;
    server.stop().await;
    let result = result.map_err(|e| Failure::test(e.to_string()))?;
    // The streams' records go to the observer with the result (the client
    // keeps them until the test's end).
    for r in &result.connections {
        observer.on_connection(r);
    }
    Ok(result)
}
