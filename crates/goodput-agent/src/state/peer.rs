//! Calls to another agent's API: its calendar, booking a run there, and
//! handing it a run's result.

use goodput_archive::Run;
use goodput_core::schedule::RunClass;
use serde::{Deserialize, Serialize};

use crate::answer::body_capped;
use crate::state::config::Peer;
use crate::state::Shared;

/// A booking as the API shows it.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub(crate) struct SlotView {
    /// The run's id.
    pub(crate) id: String,
    /// Its number on the calendars.
    pub(crate) number: u64,
    /// Start (ms since the Unix epoch).
    pub(crate) start_ms: u64,
    /// End (ms).
    pub(crate) end_ms: u64,
    /// Its class.
    pub(crate) class: RunClass,
}

/// A run one agent asks another to hold on its calendar.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Reservation {
    /// The run's id.
    pub(crate) id: String,
    /// Its task.
    pub(crate) task: String,
    /// The end that runs the test.
    pub(crate) source: String,
    /// The other end.
    pub(crate) dest: Option<String>,
    /// The spec.
    pub(crate) spec: serde_json::Value,
    /// Its class.
    pub(crate) class: RunClass,
    /// When it was due (ms).
    pub(crate) scheduled_ms: u64,
    /// The slot's start (ms).
    pub(crate) start_ms: u64,
    /// The slot's end (ms).
    pub(crate) end_ms: u64,
}

/// Why a booking at a peer did not take.
#[derive(Debug)]
pub(crate) enum Refusal {
    /// Its calendar had the time taken meanwhile.
    Busy(String),
    /// A limit refused it (the peer's words).
    Refused(String),
    /// No answer.
    Unreachable(String),
}

/// The body of an error answer.
#[derive(Debug, Deserialize)]
struct ErrorBody {
    error: String,
}

/// The reason in a refusal's body (`{"error": …}`, at most 64 KiB read),
/// or the status.
async fn refusal_text(r: reqwest::Response) -> String {
    let status = r.status();
    body_capped(r, 64 << 10)
        .await
        .ok()
        .and_then(|b| serde_json::from_slice::<ErrorBody>(&b).ok())
        .map_or_else(|| format!("HTTP {status}"), |b| b.error)
}

/// A failed call in a few words: the innermost cause ("Connection
/// refused"), or that no answer came in time.
pub(crate) fn unreachable(e: reqwest::Error) -> String {
    let mut s: &dyn std::error::Error = &e;
    while let Some(inner) = s.source() {
        s = inner;
    }
    if e.is_timeout() {
        "no answer in time".into()
    } else {
        s.to_string()
    }
}

fn with_token(req: reqwest::RequestBuilder, shared: &Shared) -> reqwest::RequestBuilder {
    match &shared.options.token {
        Some(t) => req.bearer_auth(t),
        None => req,
    }
}

/// The largest calendar read from a peer.
const MAX_ANSWER: u64 = 8 << 20;

/// The peer's bookings in `[from, to)`.
pub(crate) async fn calendar(
    shared: &Shared,
    peer: &Peer,
    from: u64,
    to: u64,
) -> Result<Vec<SlotView>, String> {
    #[derive(Deserialize)]
    struct View {
        bookings: Vec<SlotView>,
    }
    let url = format!("{}/api/v1/schedule?from_ms={from}&to_ms={to}", peer.url);
    let r = shared.client(peer).get(&url).send().await.map_err(unreachable)?;
    if !r.status().is_success() {
        return Err(format!("its calendar: HTTP {}", r.status()));
    }
    // A calendar is small; a larger answer is refused, not read.
    let bytes = body_capped(r, MAX_ANSWER).await.map_err(|e| match e {
        Some(e) => unreachable(e),
        None => format!("its calendar is larger than {MAX_ANSWER} bytes"),
    })?;
    let view: View =
        serde_json::from_slice(&bytes).map_err(|e| format!("its calendar does not read: {e}"))?;
    Ok(view.bookings)
}

/// Books the run on the peer's calendar.
pub(crate) async fn reserve(shared: &Shared, peer: &Peer, r: &Reservation) -> Result<(), Refusal> {
    let url = format!("{}/api/v1/reservations", peer.url);
    let answer = with_token(shared.client(peer).post(&url).json(r), shared)
        .send()
        .await
        .map_err(|e| Refusal::Unreachable(unreachable(e)))?;
    let status = answer.status();
    if status.is_success() {
        return Ok(());
    }
    let text = refusal_text(answer).await;
    Err(match status.as_u16() {
        409 => Refusal::Busy(text),
        _ => Refusal::Refused(text),
    })
}

/// Hands the peer a run's record (its result, or why it did not run).
pub(crate) async fn deliver(shared: &Shared, peer: &Peer, run: &Run) -> Result<(), String> {
    let mut url = reqwest::Url::parse(&format!("{}/api/v1/runs", peer.url)).map_err(|e| e.to_string())?;
    url.path_segments_mut()
        .map_err(|_| "bad peer URL".to_string())?
        .extend(run.id.split('/'));
    let answer = with_token(shared.client(peer).put(url).json(run), shared)
        .timeout(std::time::Duration::from_secs(20))
        .send()
        .await
        .map_err(unreachable)?;
    if answer.status().is_success() {
        Ok(())
    } else {
        Err(refusal_text(answer).await)
    }
}
