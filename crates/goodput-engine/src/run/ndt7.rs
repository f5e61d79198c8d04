//! An `ndt7` spec's run: the server's URL resolved, the download and then
//! the upload subtest, each announced and shown as it goes, and one
//! result with both subtests' figures.

use std::time::{Duration, Instant};

use goodput_core::ndt7::{Ndt7Detail, Subtest};
use goodput_core::result::{Detail, TestResult};
use goodput_core::spec::{Ndt7Spec, TestSpec};
use tokio_util::sync::CancellationToken;

use super::{empty, resolve, Failure};
use crate::ndt7::client::{run_subtest, Ndt7ClientSpec};
use crate::tls::Trust;
use crate::Observer;

/// Runs a validated ndt7 spec. A subtest the server refuses or that
/// breaks off fails the run, with what the other one measured kept.
pub(super) async fn run(
    spec: &Ndt7Spec,
    observer: &mut dyn Observer,
    cancel: CancellationToken,
) -> Result<TestResult, Failure> {
    let url = spec.parsed_url().map_err(|e| Failure::setup(e.to_string()))?;
    let addrs = resolve(&url.host, url.port, false, false).await?;
    let started_unix_ms = crate::tcp::unix_ms_now();
    let began = Instant::now();
    let subtests: Vec<Subtest> = [(spec.download, Subtest::Download), (spec.upload, Subtest::Upload)]
        .into_iter()
        .filter_map(|(on, s)| on.then_some(s))
        .collect();
    let base = url.subtest(Subtest::Download);
    let base = base.trim_end_matches(Subtest::Download.path()).to_owned();
    observer.on_start(
        "goodput ndt7",
        &[
            ("Server".to_owned(), format!("{base} ({})", addrs[0])),
            (
                "Subtests".into(),
                subtests.iter().map(|s| s.name()).collect::<Vec<_>>().join(", ") + ", about 10 s each",
            ),
        ],
    );
    let client = Ndt7ClientSpec {
        url,
        addrs,
        trust: Trust::of(spec.ca.as_deref(), spec.insecure),
        connect_timeout: Duration::from_secs(10),
    };
    let mut detail = Ndt7Detail {
        server: base,
        ..Ndt7Detail::default()
    };
    let mut failure = None;
    for which in subtests {
        let outcome = {
            // Progress lines go to the observer between the subtest's
            // awaits; the closure only collects them.
            let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
            let mut progress = move |line: String| {
                let _ = tx.send(line);
            };
            let run = run_subtest(&client, which, &mut progress, &cancel);
            tokio::pin!(run);
            loop {
                tokio::select! {
                    r = &mut run => break r,
                    Some(line) = rx.recv() => observer.on_notice(&line),
                }
            }
        };
        match outcome {
            Ok(o) => {
                let f = o.figures;
                observer.on_notice(&format!(
                    "{} {}: {} in {:.2} s{}{}",
                    which.name(),
                    goodput_core::units::format_bits_per_second(f.rate_bps / 8.0),
                    goodput_core::units::format_size(f.bytes),
                    f.seconds,
                    f.min_rtt_ms
                        .map_or(String::new(), |m| format!(", min round trip {m:.3} ms")),
                    f.retransmission_pct
                        .map_or(String::new(), |r| format!(", {r:.2} % retransmitted")),
                ));
                if detail.client_address.is_none() {
                    detail.client_address = o.client_address;
                }
                match which {
                    Subtest::Download => detail.download = Some(f),
                    Subtest::Upload => detail.upload = Some(f),
                }
            }
            Err(e) => {
                failure = Some(format!("{} subtest: {e}", which.name()));
                break;
            }
        }
    }
    let whole = TestSpec::Ndt7(spec.clone());
    let nothing = detail.download.is_none() && detail.upload.is_none();
    let mut result = empty(&whole, started_unix_ms, began.elapsed().as_nanos() as u64);
    // The common totals: a subtest is one connection, the upload's bytes
    // are sent and the download's received, each at its own subtest's
    // rate (the two never run at once).
    let s = &mut result.summary;
    for (f, up) in [(&detail.download, false), (&detail.upload, true)] {
        let Some(f) = f else { continue };
        s.successful += 1;
        let per_second = if f.seconds > 0.0 {
            f.bytes as f64 / f.seconds
        } else {
            0.0
        };
        if up {
            s.sent_bytes = f.bytes;
            s.send_bytes_per_second = per_second;
        } else {
            s.received_bytes = f.bytes;
            s.recv_bytes_per_second = per_second;
        }
    }
    if failure.is_some() {
        s.network_errors = 1;
    }
    result.detail = Detail::Ndt7(Box::new(detail));
    match failure {
        Some(f) if nothing => Err(Failure::test(f)),
        Some(f) => {
            result.end = goodput_core::result::EndReason::Failed;
            result.error = Some(goodput_core::result::RunFailure {
                stage: goodput_core::result::FailureStage::Test,
                message: f,
            });
            Ok(result)
        }
        None => Ok(result),
    }
}
