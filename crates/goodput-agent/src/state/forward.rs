//! Store-and-forward: every run that ends here is queued, in the same
//! transaction that stores it, for each archive the agent forwards to
//! (`Archive::put_queued`), and one task per archive sends the queue,
//! oldest first, in batches (`POST /api/v1/archive/runs` with the agent's
//! token). Delivery is at least once; the archive stores by run id, so a
//! batch sent twice is stored once.
//!
//! A run leaves the queue only when the archive said it stored it. A
//! failure waits 1 s, doubling to at most a minute, with ±25% jitter so
//! that a fleet does not come back all at once. The queue's length is
//! bounded (`forward_backlog`): past it the oldest background runs
//! (per-minute summaries) are dropped first, then the oldest of any kind,
//! and each drop is logged and counted. A run the archive refuses as
//! malformed (400, or 413 alone in its batch: a batch refused as a whole
//! is sent again as halves) is dropped the same way,
//! since sending it again cannot succeed; a refused token (401, 403)
//! keeps the queue and says why on the host page, in `/api/v1/health` and
//! in `/metrics`.
//!
//! A `pscheduler` archive (perfSONAR's) is sent one document a request,
//! as pScheduler's `http` archiver sends them
//! (`goodput_archive::pscheduler_out`), with the measuring host's address
//! in the `x-ps-observer` header perfSONAR's pipeline reads. Only the
//! run's source sends it (its other end holds the same run); a run of a
//! kind that perfSONAR has no test type for is taken off the queue
//! unsent, counted (`not_sent`) and said once in the log. The queue's
//! rules are the same: a run leaves it when every one of its documents
//! was answered 2xx, and a failure keeps it, with the same backoff.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use goodput_archive::pscheduler_out::{to_pscheduler, Ends, NotSent};
use goodput_archive::Run;
use goodput_core::mesh::{ArchiveKind, Transform};
use serde::Serialize;

use crate::clock;
use crate::log::log;
use crate::state::Shared;

/// An archive the agent forwards its runs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForwardTarget {
    /// Its API's base URL (`https://archive.example:8780`).
    pub url: String,
    /// Its certificate's SHA-256 fingerprint, for an https:// archive
    /// with a self-signed certificate (none: the system's roots).
    pub pin: Option<[u8; 32]>,
    /// A goodput fleet archive, or any HTTP receiver.
    pub kind: ArchiveKind,
    /// Fields kept and renamed before a run is sent (an HTTP receiver's).
    pub transform: Option<Transform>,
}

impl ForwardTarget {
    /// An archive named in the mesh document (checked when it was read).
    pub(crate) fn from_mesh(a: &goodput_core::mesh::ArchiveTarget) -> Result<Self, String> {
        Ok(Self {
            // A goodput archive's base URL loses a trailing '/'; an HTTP
            // receiver's URL is used as given.
            url: match a.kind {
                ArchiveKind::Goodput => a.url.trim_end_matches('/').to_string(),
                ArchiveKind::Http | ArchiveKind::Pscheduler => a.url.clone(),
            },
            pin: a.tls_sha256.as_deref().map(crate::tls::read_pin).transpose()?,
            kind: a.kind,
            transform: a.transform.clone(),
        })
    }
}

impl std::str::FromStr for ForwardTarget {
    type Err = String;

    /// `URL` or `URL#SHA256` (the certificate's fingerprint, 64 hex
    /// digits, colons allowed).
    fn from_str(s: &str) -> Result<Self, String> {
        let (url, pin) = match s.split_once('#') {
            Some((u, p)) => (u, Some(crate::tls::read_pin(p)?)),
            None => (s, None),
        };
        let url = url.trim_end_matches('/');
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(format!("'{s}': an archive is an http:// or https:// URL"));
        }
        if pin.is_some() && !url.starts_with("https://") {
            return Err(format!("'{s}': a certificate fingerprint is for an https:// URL"));
        }
        Ok(Self {
            url: url.to_string(),
            pin,
            kind: ArchiveKind::Goodput,
            transform: None,
        })
    }
}

/// One target's delivery counters (since the agent started).
#[derive(Debug, Clone, Default, Serialize, schemars::JsonSchema)]
pub(crate) struct ForwardStatus {
    /// The archive's URL.
    pub(crate) url: String,
    /// Runs queued for it now.
    pub(crate) backlog: u64,
    /// Seconds the oldest queued run has waited.
    pub(crate) backlog_age_s: f64,
    /// Runs it said it stored.
    pub(crate) delivered: u64,
    /// Batches that failed (each retried).
    pub(crate) failures: u64,
    /// Runs dropped from the queue: past its limit, or refused as
    /// malformed.
    pub(crate) dropped: u64,
    /// Runs taken off the queue unsent because the archive has no
    /// place for them (a `pscheduler` archive: kinds with no pScheduler
    /// test type, runs with no result).
    #[serde(default)]
    pub(crate) not_sent: u64,
    /// The last failure, as the archive or the network said it.
    pub(crate) last_error: Option<String>,
    /// When a batch was last delivered (RFC 3339).
    pub(crate) last_delivered: Option<String>,
}

/// Most runs in one batch.
const BATCH_RUNS: u32 = 500;
/// A batch's JSON stops growing past this (a run alone may be larger).
const BATCH_BYTES: usize = 2 << 20;
/// How long a batch may take, sent and answered.
const SEND_WITHIN: Duration = Duration::from_secs(60);
/// The longest wait between failed attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// Most runs sent to a `pscheduler` archive in one pass (a request per
/// document), so that a pass ends and the queue's limit is kept.
const PSCHEDULER_RUNS: usize = 50;

/// The client for an HTTP receiver (a goodput archive's is the agent's
/// own, from its mesh address: [`Shared::client_to`]).
fn client(target: &ForwardTarget) -> reqwest::Client {
    let mut b = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(5))
        .timeout(SEND_WITHIN);
    if let Some(pin) = target.pin {
        b = b.use_preconfigured_tls(crate::tls::pinned_client_config(pin));
    }
    b.build().unwrap_or_default()
}

/// What one attempt came to.
enum Sent {
    /// Answered: the ids taken off the queue, those of them the archive
    /// refused as malformed, each with its reason (sending them again
    /// cannot help), and how many of them were not for it (not sent, and
    /// counted where they were decided).
    Stored(Vec<String>, Vec<(String, String)>, u64),
    /// The archive refused the batch of these runs as a whole (too large;
    /// an HTTP receiver's 400 or 422 for several): send fewer, and drop a
    /// run too large alone.
    Refused(String, Vec<String>),
    /// Try again later.
    Failed(String),
}

/// The archive's answer to a batch.
#[derive(serde::Deserialize)]
struct Answer {
    #[serde(default)]
    refused: Vec<Refusal>,
}

#[derive(serde::Deserialize)]
struct Refusal {
    id: String,
    reason: String,
}

/// Keeps one forwarder per target (`--forward-to`'s and the mesh
/// document's `archives`, which may change at each reload), restarting
/// one whose target changed. The queue of a target no longer named is
/// dropped, and that is logged: nothing would ever send it.
pub(crate) async fn supervisor(shared: Arc<Shared>) {
    let mut installed = shared.installed.subscribe();
    let mut running: BTreeMap<String, (ForwardTarget, tokio::task::AbortHandle)> = BTreeMap::new();
    let mut tasks = tokio::task::JoinSet::new();
    loop {
        let want = shared.targets();
        // A forwarder that ended (it returns only when the agent stops;
        // a panic ends it too) is started again below.
        running.retain(|_, (_, task)| !task.is_finished());
        running.retain(|url, (t, task)| {
            let same = want.iter().any(|w| w == t);
            if !same {
                task.abort();
                if !want.iter().any(|w| w.url == *url) {
                    log(&format!("no longer forwarding to {url}"));
                }
            }
            same
        });
        let named: Vec<String> = want.iter().map(|t| t.url.clone()).collect();
        shared.forget_forwarding(&named);
        for (url, n, _) in shared.archive.backlog_sizes().await.unwrap_or_default() {
            // Named again now (a reload meanwhile): kept.
            if n > 0 && !shared.forward_urls().contains(&url) {
                match shared.archive.trim_backlog(&url, 0).await {
                    Ok(n) => log(&format!(
                        "dropped the {n} runs queued for {url}: it is no longer named by --forward-to \
                         or the mesh's archives"
                    )),
                    Err(e) => log(&format!("cannot drop the queue for {url}: {e}")),
                }
            }
        }
        for t in want {
            if !running.contains_key(&t.url) {
                let task = tasks.spawn(forwarder(shared.clone(), t.clone()));
                running.insert(t.url.clone(), (t, task));
            }
        }
        while tasks.try_join_next().is_some() {}
        tokio::select! {
            _ = shared.cancel.cancelled() => break,
            _ = installed.changed() => {}
            _ = tokio::time::sleep(Duration::from_secs(30)) => {}
        }
    }
    // The forwarders watch the same cancellation.
    while tasks.join_next().await.is_some() {}
}

/// Sends `target`'s queue until the agent stops.
pub(crate) async fn forwarder(shared: Arc<Shared>, target: ForwardTarget) {
    let http = client(&target);
    let url = match target.kind {
        ArchiveKind::Goodput => format!("{}/api/v1/archive/runs", target.url),
        ArchiveKind::Http | ArchiveKind::Pscheduler => target.url.clone(),
    };
    let mut backoff = Duration::from_secs(1);
    let mut last_logged: Option<String> = None;
    // Runs a batch may hold: halved when a batch is refused as a whole,
    // doubled back after 16 batches delivered in a row.
    let mut batch = BATCH_RUNS as usize;
    let mut delivered_in_a_row = 0u32;
    // The kinds a `pscheduler` archive was not sent, said once each.
    let mut said: BTreeSet<String> = BTreeSet::new();
    loop {
        // The limit first: what is dropped is said.
        match shared
            .archive
            .trim_backlog(&target.url, shared.options.forward_backlog)
            .await
        {
            Ok(0) => {}
            Ok(n) => {
                shared.forward_status(&target.url, |s| s.dropped += n);
                log(&format!(
                    "forwarding to {}: the queue passed its limit of {} runs; dropped the {n} oldest \
                     (background runs first)",
                    target.url, shared.options.forward_backlog
                ));
            }
            Err(e) => log(&format!("forwarding to {}: {e}", target.url)),
        }
        let sent = match shared.archive.backlog(&target.url, BATCH_RUNS).await {
            Ok((runs, gone)) => {
                if !gone.is_empty() {
                    // Pruned from this archive before they could be sent.
                    let _ = shared.archive.dequeue(&target.url, &gone).await;
                    shared.forward_status(&target.url, |s| s.dropped += gone.len() as u64);
                    log(&format!(
                        "forwarding to {}: {} queued runs left the archive (retention) before they were sent",
                        target.url,
                        gone.len()
                    ));
                }
                if runs.is_empty() {
                    // Nothing to send: wait for a run, or look again soon.
                    tokio::select! {
                        _ = shared.cancel.cancelled() => return,
                        _ = shared.wake_forward.notified() => {}
                        _ = tokio::time::sleep(Duration::from_secs(5)) => {}
                    }
                    continue;
                }
                // A goodput archive stores a run only from the address
                // of one of its ends: the batch leaves from this host's
                // mesh address, as calls to peers do.
                match target.kind {
                    ArchiveKind::Goodput => {
                        let http = shared.client_to(&target.url, target.pin).await;
                        send(&shared, &target, &http, &url, &runs[..runs.len().min(batch)]).await
                    }
                    ArchiveKind::Http => {
                        send(&shared, &target, &http, &url, &runs[..runs.len().min(batch)]).await
                    }
                    ArchiveKind::Pscheduler => {
                        let n = runs.len().min(batch).min(PSCHEDULER_RUNS);
                        send_pscheduler(&shared, &target, &http, &runs[..n], &mut said).await
                    }
                }
            }
            Err(e) => Sent::Failed(format!("cannot read the queue: {e}")),
        };
        match sent {
            Sent::Stored(ids, refused, not_for_it) => {
                backoff = Duration::from_secs(1);
                delivered_in_a_row += 1;
                if batch < BATCH_RUNS as usize && delivered_in_a_row >= 16 {
                    batch = (batch * 2).min(BATCH_RUNS as usize);
                    delivered_in_a_row = 0;
                }
                if let Err(e) = shared.archive.dequeue(&target.url, &ids).await {
                    log(&format!("forwarding to {}: {e}", target.url));
                }
                let now = goodput_core::time::ms_rfc3339(clock::now_ms());
                let stored = (ids.len() as u64)
                    .saturating_sub(refused.len() as u64)
                    .saturating_sub(not_for_it);
                shared.forward_status(&target.url, |s| {
                    s.delivered += stored;
                    s.dropped += refused.len() as u64;
                    s.last_delivered = Some(now);
                    s.last_error = refused
                        .first()
                        .map(|(id, why)| format!("run {id} refused: {why}"));
                });
                for (id, why) in refused.iter().take(10) {
                    log(&format!(
                        "forwarding to {}: run {id} refused for good (dropped from the queue): {why}",
                        target.url
                    ));
                }
                if last_logged.take().is_some() {
                    log(&format!("forwarding to {}: delivering again", target.url));
                }
            }
            Sent::Refused(why, ids) => {
                // The archive's body limit is smaller than a batch, or one
                // of its runs does not suit it: half as many, down to one
                // at a time; a single run too large is dropped for good.
                delivered_in_a_row = 0;
                let sent = ids.len();
                if sent <= 1 {
                    let _ = shared.archive.dequeue(&target.url, &ids).await;
                    shared.forward_status(&target.url, |s| {
                        s.dropped += ids.len() as u64;
                        s.last_error = Some(why.clone());
                    });
                    log(&format!(
                        "forwarding to {}: dropped run {} (the archive refuses it alone): {why}",
                        target.url,
                        ids.join(", ")
                    ));
                } else {
                    log(&format!(
                        "forwarding to {}: a batch of {sent} runs was refused as a whole ({why}); \
                         sending {} a batch",
                        target.url,
                        (sent / 2).max(1)
                    ));
                }
                batch = (sent / 2).max(1);
            }
            Sent::Failed(why) => {
                shared.forward_status(&target.url, |s| {
                    s.failures += 1;
                    s.last_error = Some(why.clone());
                });
                if last_logged.as_deref() != Some(why.as_str()) {
                    log(&format!(
                        "forwarding to {} failed (the runs stay queued; retrying): {why}",
                        target.url
                    ));
                    last_logged = Some(why);
                }
                let wait = jitter(backoff);
                backoff = (backoff * 2).min(MAX_BACKOFF);
                tokio::select! {
                    _ = shared.cancel.cancelled() => return,
                    _ = tokio::time::sleep(wait) => {}
                }
            }
        }
    }
}

/// `d` ± 25%.
fn jitter(d: Duration) -> Duration {
    let r = (clock::now_ms() ^ (u64::from(std::process::id()) << 20)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let f = 0.75 + (r >> 11) as f64 / (1u64 << 53) as f64 * 0.5;
    d.mul_f64(f)
}

/// One batch: as many of `runs` as fit in [`BATCH_BYTES`] (at least
/// one). A goodput archive gets `{"runs": [...]}` with the mesh's token;
/// an HTTP receiver a JSON array of the runs, transformed, and no token
/// (the token is the mesh's secret).
async fn send(
    shared: &Shared,
    target: &ForwardTarget,
    http: &reqwest::Client,
    url: &str,
    runs: &[Run],
) -> Sent {
    let goodput = target.kind == ArchiveKind::Goodput;
    if goodput && shared.options.token.is_none() {
        return Sent::Failed(
            "this agent has no --token-file, and a goodput archive takes runs only with the mesh's token"
                .into(),
        );
    }
    let mut body = Vec::with_capacity(BATCH_BYTES.min(1 << 20));
    body.extend_from_slice(if goodput { b"{\"runs\":[" } else { b"[" });
    let mut ids = Vec::new();
    for r in runs {
        let one = match &target.transform {
            Some(t) => serde_json::to_value(r).and_then(|v| serde_json::to_vec(&t.apply(v))),
            None => serde_json::to_vec(r),
        };
        let Ok(one) = one else {
            continue;
        };
        if !ids.is_empty() && body.len() + one.len() > BATCH_BYTES {
            break;
        }
        if !ids.is_empty() {
            body.push(b',');
        }
        body.extend_from_slice(&one);
        ids.push(r.id.clone());
    }
    body.extend_from_slice(if goodput { b"]}" } else { b"]" });
    let mut req = http
        .post(url)
        .timeout(SEND_WITHIN)
        .header("content-type", "application/json")
        .body(body);
    if let (true, Some(t)) = (goodput, &shared.options.token) {
        req = req.bearer_auth(t);
    }
    let resp = match req.send().await {
        Ok(r) => r,
        Err(e) => {
            return Sent::Failed(if e.is_timeout() {
                "no answer in time".into()
            } else if e.is_connect() {
                format!("cannot connect: {e}")
            } else {
                e.to_string()
            })
        }
    };
    let status = resp.status();
    let text = crate::answer::body_capped(resp, 64 << 10)
        .await
        .ok()
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default();
    let reason = serde_json::from_str::<serde_json::Value>(&text)
        .ok()
        .and_then(|v| v["error"].as_str().map(str::to_owned))
        .unwrap_or_else(|| text.chars().take(200).collect());
    if status.is_success() {
        if !goodput {
            return Sent::Stored(ids, Vec::new(), 0);
        }
        let refused = serde_json::from_str::<Answer>(&text)
            .map(|a| a.refused.into_iter().map(|r| (r.id, r.reason)).collect())
            .unwrap_or_default();
        return Sent::Stored(ids, refused, 0);
    }
    let why = format!("HTTP {}: {reason}", status.as_u16());
    match status.as_u16() {
        413 => Sent::Refused(why, ids),
        // A receiver's refusal of one run is not proof that the run is
        // bad (a wrong path or format refuses them all): it stays queued
        // and is retried, like any failure.
        400 | 422 if !goodput && ids.len() > 1 => Sent::Refused(why, ids),
        _ => Sent::Failed(why),
    }
}

/// Sends `runs` to a `pscheduler` archive, in order, each as its
/// documents (one request each, with the measuring host's address in
/// `x-ps-observer`), until one fails. The runs taken off the queue are
/// those sent whole, those whose other end sends them, and those the
/// archive has no place for (counted in `not_sent`; each kind said once
/// in `said`).
async fn send_pscheduler(
    shared: &Shared,
    target: &ForwardTarget,
    http: &reqwest::Client,
    runs: &[Run],
    said: &mut BTreeSet<String>,
) -> Sent {
    let loaded = shared.loaded();
    let address = |name: &str| {
        loaded
            .config
            .addresses
            .get(name)
            .map_or_else(|| name.to_owned(), |a| a.address.clone())
    };
    let mut done: Vec<String> = Vec::new();
    let mut not_for_it = 0u64;
    let mut unsent = 0u64;
    let mut failure: Option<Sent> = None;
    'runs: for r in runs {
        if !loaded.mine.contains(&r.source) {
            // Measured by the other end, whose agent sends it.
            done.push(r.id.clone());
            not_for_it += 1;
            continue;
        }
        let ends = Ends {
            source: address(&r.source),
            dest: r.dest.as_deref().map(address),
            observer: address(&r.source),
        };
        let docs = match to_pscheduler(r, &ends) {
            Ok(d) => d,
            Err(why) => {
                let key = match &why {
                    NotSent::NoTestType(k) | NotSent::Part(k) => format!("kind {k}"),
                    NotSent::NoResult(state) => format!("state {state}"),
                    NotSent::Unreadable(_) => "unreadable".to_owned(),
                };
                if said.insert(key) {
                    log(&format!(
                        "forwarding to {}: run {} and any like it are not sent ({why}); they are \
                         counted as not_sent in /api/v1/health",
                        target.url, r.id
                    ));
                }
                done.push(r.id.clone());
                not_for_it += 1;
                unsent += 1;
                continue;
            }
        };
        for doc in docs {
            let body = match serde_json::to_vec(&doc) {
                Ok(b) => b,
                Err(e) => {
                    failure = Some(Sent::Failed(format!("run {}: {e}", r.id)));
                    break 'runs;
                }
            };
            let req = http
                .post(&target.url)
                .timeout(SEND_WITHIN)
                .header("content-type", "application/json")
                .header("x-ps-observer", ends.observer.as_str())
                .body(body);
            let resp = match req.send().await {
                Ok(resp) => resp,
                Err(e) => {
                    failure = Some(Sent::Failed(if e.is_timeout() {
                        "no answer in time".into()
                    } else if e.is_connect() {
                        format!("cannot connect: {e}")
                    } else {
                        e.to_string()
                    }));
                    break 'runs;
                }
            };
            let status = resp.status();
            if status.is_success() {
                continue;
            }
            let text = crate::answer::body_capped(resp, 64 << 10)
                .await
                .ok()
                .map(|b| String::from_utf8_lossy(&b).chars().take(200).collect::<String>())
                .unwrap_or_default();
            let why = format!("HTTP {}: {text}", status.as_u16());
            failure = Some(if status.as_u16() == 413 {
                // Too large alone: sending it again cannot help.
                Sent::Refused(why, vec![r.id.clone()])
            } else {
                // As for any HTTP receiver: a refusal of one document is
                // no proof that the run is bad; it stays queued.
                Sent::Failed(why)
            });
            break 'runs;
        }
        done.push(r.id.clone());
    }
    if unsent > 0 {
        shared.forward_status(&target.url, |s| s.not_sent += unsent);
    }
    match failure {
        // What went first is taken now; the failure comes again next.
        Some(_) if !done.is_empty() => Sent::Stored(done, Vec::new(), not_for_it),
        Some(f) => f,
        None => Sent::Stored(done, Vec::new(), not_for_it),
    }
}
