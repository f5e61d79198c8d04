//! The agent's own state as JSON: health, the configuration in force and
//! its tasks.

use std::sync::Arc;

use axum::extract::State;
use axum::{Extension, Json};
use goodput_core::schedule::RunClass;
use goodput_core::time::ms_rfc3339;
use serde::Serialize;

use crate::clock;
use crate::http::listen::Gate;
use crate::state::Counters;

use super::{internal, Ctx, Failure};

/// The agent's state at a glance.
#[derive(Serialize, schemars::JsonSchema)]
pub(crate) struct Health {
    version: String,
    uptime_s: u64,
    now: String,
    identity: Vec<String>,
    clock: crate::clock::ClockState,
    /// The wall clock's steps (forward or back) seen since start; after
    /// each the schedule was planned again.
    clock_steps: crate::clock::Steps,
    archive_bytes: u64,
    archive_runs: u64,
    /// Runs booked and not ended.
    booked: usize,
    /// Runs under way on this host, background streams aside.
    running: usize,
    /// Background streams (STAMP, OWAMP) under way on this host.
    running_background: usize,
    /// Runs others booked here and not ended.
    held_for_peers: usize,
    config_source: String,
    config_loaded: String,
    config_error: Option<String>,
    beacon_error: Option<String>,
    counters: Counters,
    /// `agent`, or `archive` (a fleet's).
    role: crate::state::options::Role,
    /// The archive's engine: `sqlite` or `postgres`.
    archive_engine: String,
    /// Each archive this agent forwards to: its queue (length and the
    /// oldest's age) and delivery counters.
    forwarding: Vec<crate::state::forward::ForwardStatus>,
    /// The API's connections: open, the cap, and what was refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    connections: Option<crate::http::listen::ConnCounters>,
    /// The archive's disk is full: writes are refused (503) until there
    /// is room again, which the agent finds by itself.
    archive_disk_full: bool,
    /// While the archive's writes fail: since when, and the database's
    /// error.
    archive_write_error: Option<String>,
    /// This agent's own runs held in memory until the archive takes them.
    archive_held_runs: usize,
    /// Held runs given up for room since start.
    archive_runs_given_up: u64,
}

pub(crate) async fn health(
    State(s): State<Ctx>,
    Extension(gate): Extension<Arc<Gate>>,
) -> Result<Json<Health>, Failure> {
    let mut h = health_view(&s).await?;
    h.connections = Some(gate.counters());
    Ok(Json(h))
}

/// The agent's health (the API's and the host page's).
pub(crate) async fn health_view(s: &Ctx) -> Result<Health, Failure> {
    let archive_bytes = s.archive.size_bytes().await.map_err(internal)?;
    let archive_runs = s.archive.count().await.map_err(internal)?;
    let forwarding = shown(s.forwarding().await);
    let (archive_disk_full, archive_write_error, archive_held_runs, archive_runs_given_up) =
        s.archive_writes();
    let archive_write_error = archive_write_error.as_deref().map(crate::secrets::redact_text);
    let inner = s.lock();
    let now = clock::now_ms();
    Ok(Health {
        archive_disk_full,
        archive_write_error,
        archive_held_runs,
        archive_runs_given_up,
        role: s.options.role,
        archive_engine: s.archive.engine().into(),
        forwarding,
        connections: None,
        version: env!("CARGO_PKG_VERSION").into(),
        uptime_s: now.saturating_sub(s.started_ms) / 1000,
        now: ms_rfc3339(now),
        identity: inner.loaded.mine.clone(),
        clock: crate::clock::state(),
        clock_steps: crate::clock::steps(),
        archive_bytes,
        archive_runs,
        booked: inner.book.booked.len(),
        running: inner.running,
        running_background: inner.running_background,
        held_for_peers: inner.book.booked.values().filter(|b| !b.runs_here).count(),
        config_source: crate::secrets::redact_url(&s.options.config.to_string()),
        config_loaded: ms_rfc3339(inner.loaded.loaded_ms),
        config_error: inner
            .config_error
            .as_ref()
            .map(|(t, e)| format!("{}: {}", ms_rfc3339(*t), crate::secrets::redact_text(e))),
        beacon_error: inner.beacon_error.clone(),
        counters: inner.counters,
    })
}

/// Forwarding targets as shown: URLs and errors without their secrets.
pub(crate) fn shown(
    mut f: Vec<crate::state::forward::ForwardStatus>,
) -> Vec<crate::state::forward::ForwardStatus> {
    for t in &mut f {
        t.url = crate::secrets::redact_url(&t.url);
        t.last_error = t.last_error.as_deref().map(crate::secrets::redact_text);
    }
    f
}

/// `GET /api/v1/config`: the configuration in force, with every secret in
/// it hidden (anyone may read this).
pub(crate) async fn config(State(s): State<Ctx>) -> Json<serde_json::Value> {
    let inner = s.lock();
    let mut view = serde_json::json!({
        "source": s.options.config.to_string(),
        "loaded": ms_rfc3339(inner.loaded.loaded_ms),
        "error": inner.config_error.as_ref().map(|(t, e)| serde_json::json!({"at": ms_rfc3339(*t), "message": e})),
        "identity": inner.loaded.mine,
        "looked_for": inner.loaded.identities,
        "config": inner.loaded.config,
    });
    crate::secrets::redact_json(&mut view);
    Json(view)
}

/// A task pair this agent leads.
#[derive(Serialize, schemars::JsonSchema)]
pub(crate) struct TaskView {
    task: String,
    source: String,
    dest: Option<String>,
    kind: String,
    class: RunClass,
    /// The other agent, when one books with this one.
    peer: Option<String>,
    runs_here: bool,
    every_ms: u64,
    slip_ms: u64,
    /// The next run's time (ms), if any is left.
    next_ms: Option<u64>,
}

pub(crate) async fn tasks(State(s): State<Ctx>) -> Json<Vec<TaskView>> {
    let inner = s.lock();
    let now = clock::now_ms();
    Json(
        inner
            .loaded
            .led
            .iter()
            .map(|l| {
                let t = &l.task;
                let n = t.repeat.first_at_or_after(now);
                TaskView {
                    task: t.task.clone(),
                    source: t.source.clone(),
                    dest: t.dest.clone(),
                    kind: t.spec.kind().into(),
                    class: t.class,
                    peer: l.peer.as_ref().map(|p| p.name.clone()),
                    runs_here: l.runs_here,
                    every_ms: t.repeat.every,
                    slip_ms: t.repeat.slip,
                    next_ms: t.repeat.run(t.seed, n).map(|(at, _)| at),
                }
            })
            .collect(),
    )
}
