//! The http and tls kinds' runs: single-ended, against any web or TLS
//! server (no goodput peer).

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use goodput_core::http::{BodyChecks, HttpDetail, StatusRange, TlsDetail};
use goodput_core::result::{Detail, EndReason};
use goodput_core::spec::http::{resolve_pair, split_url};
use goodput_core::spec::{HttpSpec, TestSpec, TlsSpec};
use tokio_util::sync::CancellationToken;

use super::{empty, Failure};
use crate::http::{exchange, handshake, resolve, Plan};
use crate::Observer;

/// The most exchanges kept in a result when the caller sets no record
/// cap (every one is still counted).
const MAX_KEPT: usize = 10_000;

fn plan_of(spec: &HttpSpec) -> Result<Plan, Failure> {
    let url = split_url(&spec.url).map_err(Failure::setup)?;
    let roots = if url.tls || spec.follow > 0 {
        match handshake::roots(spec.ca.as_deref()) {
            Ok(r) => Some(Arc::new(r)),
            Err(e) if url.tls => return Err(Failure::setup(e)),
            // A clear URL may still be sent to https by a redirect; it
            // fails then, with the reason.
            Err(_) => None,
        }
    } else {
        None
    };
    let headers = spec
        .header
        .iter()
        .filter_map(|h| h.split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect();
    Ok(Plan {
        method: spec.method,
        data: spec.data.clone().map(Bytes::from),
        headers,
        version: spec.version,
        status: StatusRange::parse(&spec.expect_status).map_err(Failure::setup)?,
        checks: BodyChecks {
            substring: spec.expect_body.clone(),
            regex: spec
                .expect_body_regex
                .as_deref()
                .map(goodput_core::http::compile_regex)
                .transpose()
                .map_err(Failure::setup)?,
            json: spec.expect_json.clone(),
        },
        follow: spec.follow,
        max_body: spec.max_body.0,
        timeout: spec.timeout.0,
        roots,
        insecure: spec.insecure,
        resolve: spec
            .resolve
            .as_deref()
            .map(resolve_pair)
            .transpose()
            .map_err(Failure::setup)?,
        family: spec.family,
    })
}

/// Runs a validated http spec.
pub(super) async fn http(
    document: &TestSpec,
    spec: &HttpSpec,
    observer: &mut dyn Observer,
    cancel: CancellationToken,
    max_records: usize,
) -> Result<super::TestResult, Failure> {
    let plan = plan_of(spec)?;
    observer.on_start(
        "goodput http",
        &[
            ("URL".to_owned(), format!("{} {}", spec.method.as_str(), spec.url)),
            (
                "Checks".into(),
                format!(
                    "status {}, redirects followed up to {}, body read up to {} bytes, each request within {} ms",
                    spec.expect_status,
                    spec.follow,
                    spec.max_body.0,
                    spec.timeout.0.as_millis()
                ),
            ),
        ],
    );
    let started_unix_ms = crate::tcp::unix_ms_now();
    let t0 = Instant::now();
    let keep = if max_records > 0 { max_records } else { MAX_KEPT };
    let mut detail = HttpDetail {
        url: spec.url.clone(),
        ..HttpDetail::default()
    };
    let (mut ok, mut failed) = (0u64, 0u64);
    let mut interrupted = false;
    for i in 0..spec.count {
        if i > 0 {
            let next = t0
                + spec
                    .interval
                    .0
                    .saturating_mul(u32::try_from(i).unwrap_or(u32::MAX));
            tokio::select! {
                _ = cancel.cancelled() => { interrupted = true; break; }
                _ = tokio::time::sleep_until(next.into()) => {}
            }
        }
        let ex = tokio::select! {
            _ = cancel.cancelled() => { interrupted = true; break; }
            ex = exchange(&plan, &spec.url) => ex,
        };
        if ex.failed {
            failed += 1;
            if let Some(e) = ex.last().and_then(|h| h.error.as_deref()) {
                observer.on_notice(&format!("request {}: {e}", i + 1));
            }
        } else {
            ok += 1;
            detail.completed += 1;
        }
        if ex.matched {
            detail.matched += 1;
        }
        if detail.exchanges.len() < keep {
            detail.exchanges.push(ex);
        }
    }
    let mut result = empty(document, started_unix_ms, t0.elapsed().as_nanos() as u64);
    result.settings.addresses = detail
        .last_hop()
        .and_then(|h| h.address.clone())
        .into_iter()
        .collect();
    result.summary.successful = ok;
    result.summary.network_errors = failed;
    result.summary.received_bytes = detail
        .exchanges
        .iter()
        .flat_map(|e| &e.hops)
        .map(|h| h.body_bytes)
        .sum();
    if interrupted {
        result.end = EndReason::Interrupted;
    }
    result.detail = Detail::Http(Box::new(detail));
    Ok(result)
}

/// Runs a validated tls spec.
pub(super) async fn tls(
    document: &TestSpec,
    spec: &TlsSpec,
    observer: &mut dyn Observer,
    cancel: CancellationToken,
) -> Result<super::TestResult, Failure> {
    let (host, port) = goodput_core::spec::split_target(&spec.host, 443).map_err(Failure::setup)?;
    let roots = Arc::new(handshake::roots(spec.ca.as_deref()).map_err(Failure::setup)?);
    let server_name = crate::tls::name_for(&host, spec.sni.as_deref());
    observer.on_start(
        "goodput tls",
        &[
            ("Server".to_owned(), format!("{host} port {port}")),
            ("Name".into(), format!("{server_name} (sent as SNI and checked)")),
        ],
    );
    let started_unix_ms = crate::tcp::unix_ms_now();
    let t0 = Instant::now();
    let mut d = TlsDetail {
        target: spec.host.clone(),
        server_name: server_name.clone(),
        ..TlsDetail::default()
    };
    let work = async {
        let (addr, dns_ms) = resolve(&host, port, spec.family, None).await?;
        d.dns_ms = dns_ms;
        d.address = Some(addr.to_string());
        let t = Instant::now();
        let tcp = tokio::net::TcpStream::connect(addr)
            .await
            .map_err(|e| format!("TCP connect to {addr}: {e}"))?;
        d.connect_ms = Some(t.elapsed().as_secs_f64() * 1e3);
        let t = Instant::now();
        let (_stream, facts) = handshake::handshake(
            handshake::Handshake {
                roots,
                server_name: &server_name,
                alpn: spec.alpn.iter().map(|a| a.as_bytes().to_vec()).collect(),
            },
            tcp,
        )
        .await?;
        d.handshake_ms = Some(t.elapsed().as_secs_f64() * 1e3);
        d.facts = Some(facts);
        Ok::<(), String>(())
    };
    let limit: Duration = spec.timeout.0;
    let mut interrupted = false;
    let outcome = tokio::select! {
        _ = cancel.cancelled() => { interrupted = true; Ok(()) }
        r = tokio::time::timeout(limit, work) => match r {
            Ok(r) => r,
            Err(_) => Err(format!("timed out after {} ms (`timeout`)", limit.as_millis())),
        },
    };
    let mut result = empty(document, started_unix_ms, t0.elapsed().as_nanos() as u64);
    result.settings.addresses = d.address.clone().into_iter().collect();
    match outcome {
        Err(e) => {
            observer.on_notice(&e);
            d.error = Some(e);
            result.summary.network_errors = 1;
        }
        Ok(()) if interrupted => result.end = EndReason::Interrupted,
        Ok(()) => {
            let bad = d
                .facts
                .as_ref()
                .filter(|f| !f.chain_valid && !spec.insecure)
                .map(|f| f.verify_error.clone().unwrap_or_default());
            match bad {
                Some(why) => {
                    d.error = Some(format!("certificate verification failed: {why}"));
                    result.summary.network_errors = 1;
                }
                None => result.summary.successful = 1,
            }
        }
    }
    result.detail = Detail::Tls(Box::new(d));
    Ok(result)
}
