//! `trace` and `ping` specs' runs: resolve, banner, probe, and the result.

use std::time::Instant;

use goodput_core::path::{path_checksum, PingDetail, PingMethod, ProbeMethod, RttSummary, TraceDetail};
use goodput_core::result::{Detail, EndReason, Percentiles, TestResult};
use goodput_core::spec::{Family, PingSpec, TestSpec, TraceSpec};
use tokio_util::sync::CancellationToken;

use super::{empty, resolve, Failure};
use crate::path::ping::{ping as run_ping, PingPlan};
use crate::path::trace::{header_bytes, trace as run_trace, TracePlan};
use crate::Observer;

/// The address of `host`, of the family asked for.
async fn address(host: &str, family: Family) -> Result<std::net::IpAddr, Failure> {
    let (v4, v6) = (family == Family::Ipv4, family == Family::Ipv6);
    Ok(resolve(host, 0, v4, v6).await?[0].ip())
}

/// Runs a validated trace spec.
pub(super) async fn trace(
    document: &TestSpec,
    spec: &TraceSpec,
    observer: &mut dyn Observer,
    cancel: CancellationToken,
) -> Result<TestResult, Failure> {
    let dest = address(&spec.host, spec.family).await?;
    let v6 = dest.is_ipv6();
    let size = spec
        .size
        .unwrap_or(match (spec.pmtu, v6) {
            (true, _) => 65_535,
            (false, false) => 60,
            (false, true) => 80,
        })
        .max(header_bytes(v6));
    let plan = TracePlan {
        dest,
        bind: spec.bind,
        method: spec.method,
        port: spec.dest_port().unwrap_or(0),
        first: spec.first_hop,
        max: spec.max_hops,
        probes: spec.probes,
        wait: spec.wait.0,
        in_flight: spec.in_flight,
        size,
        pmtu: spec.pmtu,
        names: spec.names,
        wait_here: spec.wait_here,
        wait_near: spec.wait_near,
    };
    let probes = match spec.method {
        ProbeMethod::Udp => format!("UDP to ports {}+", plan.port),
        ProbeMethod::Tcp => format!("TCP SYN to port {}", plan.port),
        ProbeMethod::Icmp => "ICMP echo".to_owned(),
    };
    let size_text = match (spec.method, spec.pmtu, spec.size) {
        (ProbeMethod::Tcp, ..) => "SYN-sized packets".to_owned(),
        (_, true, None) => "packets of the interface's MTU down, DF set".to_owned(),
        (_, true, Some(s)) => format!("{s}-byte packets down, DF set"),
        (_, false, _) => format!("{size}-byte packets"),
    };
    observer.on_start(
        "goodput trace",
        &[
            ("Destination".to_owned(), format!("{} ({dest})", spec.host)),
            (
                "Probes".into(),
                format!(
                    "{probes}, {} per hop, {size_text}, hops {}-{}, up to {} in flight",
                    spec.probes,
                    spec.first_hop,
                    spec.max_hops,
                    spec.in_flight
                ),
            ),
            (
                "Wait".into(),
                format!(
                    "{} ms at most; {}× an answer's RTT from the same hop, {}× from a later hop (at least 10 ms)",
                    spec.wait.0.as_millis(),
                    spec.wait_here,
                    spec.wait_near
                ),
            ),
        ],
    );
    let started_unix_ms = crate::tcp::unix_ms_now();
    let t0 = Instant::now();
    let out = run_trace(plan, observer, &cancel).await.map_err(Failure::setup)?;
    let hop_count = out.hops.iter().find(|h| h.reached()).map(|h| h.hop);
    let back_hops = out.hops.iter().find(|h| h.reached()).and_then(|h| h.back_hops);
    let mut result = empty(document, started_unix_ms, t0.elapsed().as_nanos() as u64);
    result.settings.addresses = vec![dest.to_string()];
    if out.interrupted {
        result.end = EndReason::Interrupted;
    }
    result.detail = Detail::Trace(Box::new(TraceDetail {
        target: spec.host.clone(),
        address: dest.to_string(),
        method: spec.method,
        port: spec.dest_port(),
        first_hop: spec.first_hop,
        max_hops: spec.max_hops,
        probes_per_hop: spec.probes,
        wait_ms: spec.wait.0.as_millis() as u64,
        packet_bytes: out.local_mtu.map_or(size, |m| m.min(size)),
        pmtu_discovery: spec.pmtu,
        reached: hop_count.is_some(),
        hop_count,
        back_hops,
        local_mtu: out.local_mtu,
        pmtu: spec.pmtu.then_some(out.size),
        black_hole: out.black_hole,
        path_checksum: path_checksum(&out.hops),
        hops: out.hops,
    }));
    Ok(result)
}

/// Runs a validated ping spec.
pub(super) async fn ping(
    document: &TestSpec,
    spec: &PingSpec,
    observer: &mut dyn Observer,
    cancel: CancellationToken,
    max_records: usize,
) -> Result<TestResult, Failure> {
    let dest = address(&spec.host, spec.family).await?;
    let plan = PingPlan {
        dest,
        bind: spec.bind,
        method: spec.method,
        port: spec.port,
        count: spec.count,
        interval: spec.interval.0,
        timeout: spec.timeout.0,
        payload: spec.size,
    };
    let how = match spec.method {
        PingMethod::Auto => format!(
            "ICMP echo with {} data bytes where allowed, else TCP connect to port {}",
            spec.size, spec.port
        ),
        PingMethod::Icmp => format!("ICMP echo with {} data bytes", spec.size),
        PingMethod::Tcp => format!("TCP connect to port {} (SYN to SYN-ACK or reset)", spec.port),
    };
    observer.on_start(
        "goodput ping",
        &[
            ("Destination".to_owned(), format!("{} ({dest})", spec.host)),
            ("Requests".into(), how),
            (
                "Pace".into(),
                format!(
                    "{} requests, one every {} ms, each waits {} ms",
                    spec.count,
                    spec.interval.0.as_millis(),
                    spec.timeout.0.as_millis()
                ),
            ),
        ],
    );
    let started_unix_ms = crate::tcp::unix_ms_now();
    let t0 = Instant::now();
    let out = run_ping(plan, observer, &cancel).await.map_err(Failure::setup)?;
    // A TCP reset says the host is up and the port closed: no answer from
    // the service a TCP ping measures. It is counted apart (as an error,
    // so lost), and its time stays on its own line only.
    let rtts: Vec<f64> = out
        .replies
        .iter()
        .filter(|r| !r.refused)
        .filter_map(|r| r.rtt_us)
        .collect();
    let mut h = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3)
        .map_err(|e| Failure::setup(format!("histogram: {e}")))?;
    for r in &rtts {
        h.saturating_record((r * 1e3).max(1.0) as u64);
    }
    let sent = out.replies.len() as u64;
    let received = rtts.len() as u64;
    let errors = out
        .replies
        .iter()
        .filter(|r| r.error.is_some() || r.refused)
        .count() as u64;
    let mut result = empty(document, started_unix_ms, t0.elapsed().as_nanos() as u64);
    result.settings.addresses = vec![dest.to_string()];
    if out.interrupted {
        result.end = EndReason::Interrupted;
    }
    let mut replies = out.replies;
    if max_records > 0 {
        replies.truncate(max_records);
    }
    result.detail = Detail::Ping(Box::new(PingDetail {
        target: spec.host.clone(),
        address: dest.to_string(),
        method: out.method,
        fallback: out.fallback,
        port: (out.method == PingMethod::Tcp).then_some(spec.port),
        payload_bytes: (out.method == PingMethod::Icmp).then_some(spec.size),
        interval_ms: spec.interval.0.as_millis() as u64,
        timeout_ms: spec.timeout.0.as_millis() as u64,
        sent,
        received,
        lost: sent - received,
        loss_percent: if sent > 0 {
            (sent - received) as f64 * 100.0 / sent as f64
        } else {
            0.0
        },
        duplicates: out.duplicates,
        errors,
        rtt: RttSummary::of(&rtts),
        percentiles: Percentiles::from_histogram(&h),
        replies,
    }));
    Ok(result)
}
