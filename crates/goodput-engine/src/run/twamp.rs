//! A `twamp` spec's run: twping's test, one TWAMP session to the server,
//! and its settings banner.

use goodput_core::result::{
    ConnectionRecord, DelayStats, Detail, EndReason, Outcome, SummaryBuilder, TcpSettings, TestKind,
    TestResult, TwampDetail, WireProtocol, SCHEMA_VERSION,
};
use goodput_core::spec::TwampSpec;
use goodput_core::stamp::stats::SignedHistogram;
use tokio_util::sync::CancellationToken;

use super::owamp::{clock_state, hex, target_or_embedded};
use super::{error_chain, Failure};
use crate::owamp::client::{run_twamp, ControlTarget, TwampRequest};
use crate::Observer;

/// Runs a validated TWAMP spec.
pub(super) async fn run(
    spec: &TwampSpec,
    observer: &mut dyn Observer,
    cancel: CancellationToken,
    _max_records: usize,
) -> Result<TestResult, Failure> {
    let (target, embedded) = target_or_embedded(
        true,
        &spec.host,
        spec.port,
        spec.family,
        spec.bind,
        spec.mode,
        &spec.key_identity,
        &spec.passphrase_file,
    )
    .await?;
    let result = run_with(spec, observer, cancel, target).await;
    if let Some(e) = embedded {
        e.stop().await;
    }
    result
}

async fn run_with(
    spec: &TwampSpec,
    observer: &mut dyn Observer,
    cancel: CancellationToken,
    target: ControlTarget,
) -> Result<TestResult, Failure> {
    let server = target.server;
    let count = u32::try_from(spec.count).map_err(|_| Failure::setup("`count` must be below 2^32"))?;
    let req = TwampRequest {
        count,
        interval: spec.interval.0,
        padding: spec.padding_bytes(),
        dscp: spec.dscp,
        timeout: spec.timeout.0,
        test_ports: spec.test_ports,
    };
    let banner = vec![
        (
            "Server".to_owned(),
            format!("{server} (TWAMP-Control, {} mode)", spec.mode.name()),
        ),
        (
            "Packets".into(),
            format!(
                "{count} of {} B every {:.3} ms, DSCP {}, TTL 255",
                spec.packet_bytes(),
                spec.interval.0.as_secs_f64() * 1e3,
                spec.dscp
            ),
        ),
        (
            "Loss timeout".into(),
            format!("{} ms", spec.timeout.0.as_millis()),
        ),
    ];
    observer.on_start("goodput twamp", &banner);
    let started_unix_ms = (crate::datagram::now_unix_ns() / 1_000_000) as u64;
    let t0 = std::time::Instant::now();
    let out = run_twamp(&target, &req, cancel.clone())
        .await
        .map_err(|e| Failure::test(error_chain(&e)))?;
    if !out.clock.synchronized {
        observer.on_notice(
            "this host's clock is not synchronised (ntp_adjtime): one-way delays are marked unsync; \
             the round trip is exact",
        );
    }
    let stats = out.tally.stats();
    let elapsed_ns = t0.elapsed().as_nanos() as u64;
    let bytes = u64::from(spec.packet_bytes());
    let outcome = if stats.sent > 0 && stats.received == 0 {
        Outcome::NetworkError {
            during: "reply".into(),
            errno: None,
            name: "NoReply".into(),
            message: format!("none of {} packets was reflected", stats.sent),
        }
    } else {
        Outcome::Succeeded
    };
    let record = ConnectionRecord {
        index: 0,
        connection_id: hex(&out.sid),
        local_address: out.sender.to_string(),
        remote_address: out.reflector.to_string(),
        start_s: 0.0,
        time_slice_s: elapsed_ns as f64 / 1e9,
        elapsed_ns,
        pattern: None,
        transfer_bytes: stats.sent * bytes,
        buffer_bytes: bytes,
        rate_limit_bytes_per_second: (bytes as f64 / spec.interval.0.as_secs_f64()) as u64,
        sent_bytes: stats.sent * bytes,
        received_bytes: stats.received * bytes,
        outcome,
        peer: None,
        shutdown: None,
        quic: None,
        tcp_info: None,
        media: None,
        timed: None,
    };
    let mut summary = SummaryBuilder::default();
    summary.add(&record);
    Ok(TestResult {
        assertions: Vec::new(),
        spec: None,
        error: None,
        schema_version: SCHEMA_VERSION,
        tool: crate::tool_info(),
        kind: TestKind::TwampClient,
        started_unix_ms,
        settings: TcpSettings {
            connections: Some(1),
            ..TcpSettings::bare(
                WireProtocol::Twamp,
                vec![server.to_string()],
                spec.status_interval.0.as_millis() as u64,
            )
        },
        intervals: Vec::new(),
        intervals_omitted: 0,
        connections: vec![record],
        summary: summary.finish(elapsed_ns),
        connections_omitted: 0,
        end: if out.interrupted {
            EndReason::Interrupted
        } else {
            EndReason::Completed
        },
        detail: Detail::Twamp(Box::new(TwampDetail {
            mode: out.mode.name().to_owned(),
            padding: req.padding,
            packet_bytes: spec.packet_bytes(),
            interval_ns: spec.interval.0.as_nanos() as u64,
            dscp: spec.dscp,
            timeout_ms: spec.timeout.0.as_millis() as u64,
            local_clock: clock_state(out.clock),
            sid: hex(&out.sid),
            stats,
            processing: delay_stats(&out.processing),
        })),
    })
}

/// A distribution of non-negative delays (nanoseconds) in microseconds.
pub(super) fn delay_stats(h: &SignedHistogram) -> Option<DelayStats> {
    let us = |ns: i64| ns as f64 / 1e3;
    (!h.is_empty()).then(|| DelayStats {
        count: h.len(),
        min_us: us(h.min()),
        median_us: us(h.quantile(0.5)),
        p90_us: us(h.quantile(0.9)),
        p99_us: us(h.quantile(0.99)),
        max_us: us(h.max()),
        mean_us: h.mean() / 1e3,
    })
}
