//! `/api/v1/schedule` and `/api/v1/reservations`: the calendar as peers
//! read it, and a peer's booking (the follower's side of
//! [`crate::state::booking`]).

use axum::extract::{ConnectInfo, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use goodput_archive::RunState;
use goodput_core::mesh::ms_rfc3339;
use goodput_core::schedule::RunClass;
use serde::{Deserialize, Serialize};

use crate::clock;
use crate::http::accept::Caller;
use crate::limits::Bucket;
use crate::state::peer::{Reservation, SlotView};
use crate::state::{run_number, Booked};

use super::auth::{authorise, from_the_other_end};
use super::runs::{base_of, read_spec, services_only, targets};
use super::{archive_has_room, bad, count_refusal, not_an_archive, unreadable, unstored, Ctx, Failure};

#[derive(Deserialize)]
pub(crate) struct Range {
    from_ms: Option<u64>,
    to_ms: Option<u64>,
}

/// The calendar over a time range: the bookings and the free slots where
/// an exclusive run would fit.
#[derive(Serialize, schemars::JsonSchema)]
pub(crate) struct ScheduleView {
    pub(crate) from_ms: u64,
    pub(crate) to_ms: u64,
    pub(crate) bookings: Vec<SlotView>,
    /// Free for an exclusive run: `[start, end)` pairs (ms).
    pub(crate) free: Vec<(u64, u64)>,
    /// The runs booked here, in full.
    pub(crate) runs: Vec<Booked>,
}

pub(crate) async fn schedule(
    State(s): State<Ctx>,
    Query(q): Query<Range>,
) -> Result<Json<ScheduleView>, Failure> {
    let now = clock::now_ms();
    let from = q.from_ms.unwrap_or(now);
    let to = q.to_ms.unwrap_or(from.saturating_add(3_600_000));
    if to < from || to - from > 31 * 86_400_000 {
        return Err(bad("to_ms must be after from_ms, at most 31 days on"));
    }
    Ok(Json(schedule_view(&s, from, to)))
}

/// The calendar over `[from, to)`.
pub(crate) fn schedule_view(s: &Ctx, from: u64, to: u64) -> ScheduleView {
    let inner = s.lock();
    let slot = |b: &Booked| SlotView {
        id: b.id.clone(),
        number: b.number,
        start_ms: b.start_ms,
        end_ms: b.end_ms,
        class: b.class,
    };
    let within: Vec<&Booked> = inner
        .booked
        .values()
        .filter(|b| b.start_ms < to && from < b.end_ms)
        .collect();
    ScheduleView {
        from_ms: from,
        to_ms: to,
        bookings: within.iter().map(|b| slot(b)).collect(),
        free: inner.calendar.free(from, to, RunClass::Exclusive),
        runs: within.into_iter().cloned().collect(),
    }
}

/// A peer books a run on this agent's calendar. A mesh run's spec and
/// class are this agent's own (from its configuration), never the
/// caller's; an on-demand run may only be booked here as its destination.
pub(crate) async fn reserve(
    State(s): State<Ctx>,
    ConnectInfo(Caller(from)): ConnectInfo<Caller>,
    headers: HeaderMap,
    body: Result<Json<Reservation>, axum::extract::rejection::JsonRejection>,
) -> Result<(StatusCode, Json<serde_json::Value>), Failure> {
    authorise(&s, from.ip(), &headers)?;
    not_an_archive(&s)?;
    archive_has_room(&s)?;
    let Json(r) = body.map_err(|e| unreadable(&e))?;
    let loaded = s.loaded();
    let here = |n: &str| loaded.mine.iter().any(|m| m == n);
    let runs_here = here(&r.source);
    if !runs_here && !r.dest.as_deref().is_some_and(here) {
        return Err(bad(format!(
            "neither end of run {} ({} → {}) is this agent",
            r.id,
            r.source,
            r.dest.as_deref().unwrap_or("-")
        )));
    }
    let other = if runs_here {
        r.dest.clone()
    } else {
        Some(r.source.clone())
    };
    let other = other.ok_or_else(|| bad("a single-ended run is not booked with another agent"))?;
    from_the_other_end(&s, &loaded, &other, from.ip()).await?;
    let on_demand = r.id.starts_with("on-demand/");
    let (spec, class) = if on_demand {
        // Asked of the source by a client: this agent only holds the time.
        if runs_here {
            return Err(bad(
                "an on-demand run is run by the agent it was asked of, not booked with it",
            ));
        }
        let spec = read_spec(r.spec.clone())?;
        // It tests to this host's test services, as the agent it was
        // asked of checked.
        let here_name = r.dest.clone().unwrap_or_default();
        if let Some(h) = targets(&spec)
            .iter()
            .find(|h| loaded.name_of_host(h).as_deref() != Some(here_name.as_str()))
        {
            count_refusal(&s, |c| c.refused_spec += 1);
            return Err(Failure(
                StatusCode::FORBIDDEN,
                format!("spec: {h} is not {here_name}, the run's destination"),
            ));
        }
        services_only(&s, &loaded, &here_name, &spec)?;
        let class = RunClass::of_kind(spec.kind());
        (spec, class)
    } else {
        let t = loaded
            .pairs
            .iter()
            .find(|t| t.task == r.task && t.source == r.source && t.dest == r.dest)
            .ok_or_else(|| {
                Failure(
                    StatusCode::FORBIDDEN,
                    format!(
                        "no task {} from {} to {} in this agent's configuration",
                        r.task,
                        r.source,
                        r.dest.as_deref().unwrap_or("-")
                    ),
                )
            })?;
        let base =
            r.id.strip_prefix(&format!(
                "{}/{}/{}/",
                t.task,
                t.source,
                t.dest.as_deref().unwrap_or("-")
            ))
            .and_then(base_of)
            .filter(|b| t.repeat.is_base(*b))
            .ok_or_else(|| bad(format!("run id {} is not one of task {}'s runs", r.id, t.task)))?;
        // Its slot lies in its run's window: spread and slip after its
        // base time, its booked length.
        let latest = base
            .saturating_add(t.repeat.slip.saturating_mul(2))
            .saturating_add(60_000);
        if r.start_ms < base.saturating_sub(60_000)
            || r.start_ms > latest
            || r.end_ms != r.start_ms.saturating_add(t.expected_ms())
        {
            return Err(bad(format!(
                "run {}'s slot is not where its schedule puts it",
                r.id
            )));
        }
        (t.spec.clone(), t.class)
    };
    let now = clock::now_ms();
    if r.end_ms <= r.start_ms || r.start_ms > now.saturating_add(7 * 86_400_000) || r.end_ms < now {
        return Err(bad(
            "the slot must end after it starts, not be over, and start within 7 days",
        ));
    }
    let b = Booked {
        number: run_number(&r.id),
        id: r.id.clone(),
        task: r.task.clone(),
        source: r.source.clone(),
        dest: r.dest.clone(),
        spec,
        class,
        scheduled_ms: r.scheduled_ms,
        start_ms: r.start_ms,
        end_ms: r.end_ms,
        runs_here,
        started: false,
        booked_by: from.ip().to_canonical().to_string(),
        peer: loaded.peer(&other),
    };
    {
        let mut inner = s.lock();
        if let Some(old) = inner.booked.get(&b.number) {
            if old.start_ms == b.start_ms && old.end_ms == b.end_ms {
                return Ok((
                    StatusCode::OK,
                    Json(serde_json::json!({"id": r.id, "state": "scheduled"})),
                ));
            }
            return Err(Failure(
                StatusCode::CONFLICT,
                format!("run {} is booked here already, for another slot", r.id),
            ));
        }
        let held = inner
            .booked
            .values()
            .filter(|b| b.booked_by != "this agent")
            .count();
        if held >= s.options.limits.max_held {
            inner.counters.refused += 1;
            return Err(Failure(
                StatusCode::FORBIDDEN,
                format!("limit max_held: this agent holds {held} runs booked by others"),
            ));
        }
        let limits = s.options.limits.clone();
        let who = from.ip().to_canonical();
        // A peer's on-demand runs (its clients') are charged apart from
        // its mesh runs, which this agent's configuration bounds: a
        // client never uses up the quota the peer's schedule needs.
        let bucket = if on_demand { Bucket::OnDemand } else { Bucket::Mesh };
        if let Err(e) = limits
            .check_window(who, r.start_ms, r.end_ms, class)
            .and_then(|()| {
                inner
                    .quotas
                    .take(&limits, (who, bucket), now, class, r.end_ms - r.start_ms)
            })
        {
            inner.counters.refused += 1;
            return Err(Failure(StatusCode::FORBIDDEN, e));
        }
        if let Err(x) = inner.calendar.book(b.booking()) {
            let id = inner.run_name(x.run);
            return Err(Failure(
                StatusCode::CONFLICT,
                format!("busy with run {id} until {}", ms_rfc3339(x.end)),
            ));
        }
        inner.booked.insert(b.number, b.clone());
        inner.counters.booked_by_peers += 1;
    }
    if let Err(why) = s.store_now(&[b.record(RunState::Scheduled, None)]).await {
        s.unbook(&b.id);
        return Err(unstored(why));
    }
    s.wake.notify_one();
    Ok((
        StatusCode::CREATED,
        Json(serde_json::json!({"id": r.id, "state": "scheduled"})),
    ))
}
