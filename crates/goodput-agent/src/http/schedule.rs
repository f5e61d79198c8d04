//! `/api/v1/schedule` and `/api/v1/reservations`: the calendar as peers
//! read it, and a peer's booking (the follower's side of
//! [`crate::state::booking`]).

use axum::extract::{ConnectInfo, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use goodput_core::schedule::RunClass;
use serde::{Deserialize, Serialize};

use crate::clock;
use crate::http::accept::Caller;
use crate::state::booking::follow::{self, Held, Refused};
use crate::state::booking::Booked;
use crate::state::peer::{Reservation, SlotView};

use super::auth::{authorise, from_the_other_end};
use super::runs::{read_spec, services_only, targets};
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
        .book
        .booked
        .values()
        .filter(|b| b.start_ms < to && from < b.end_ms)
        .collect();
    ScheduleView {
        from_ms: from,
        to_ms: to,
        bookings: within.iter().map(|b| slot(b)).collect(),
        free: inner.book.calendar.free(from, to, RunClass::Exclusive),
        runs: within.into_iter().cloned().collect(),
    }
}

/// A peer books a run on this agent's calendar (the follower's side of
/// booking, [`crate::state::booking::follow`]). A mesh run's spec and
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
    let a = follow::asked(&loaded, &r).map_err(refused)?;
    from_the_other_end(&s, &loaded, &a.other, from.ip()).await?;
    let (spec, class) = if a.on_demand {
        // Asked of the source by a client: this agent only holds the time.
        if a.runs_here {
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
        follow::configured(&loaded, &r).map_err(refused)?
    };
    let status = match follow::hold(&s, &loaded, &a, (spec, class), from.ip())
        .await
        .map_err(refused)?
    {
        Held::Again => StatusCode::OK,
        Held::New => StatusCode::CREATED,
    };
    Ok((
        status,
        Json(serde_json::json!({"id": r.id, "state": "scheduled"})),
    ))
}

/// A refused booking's answer.
fn refused(why: Refused) -> Failure {
    match why {
        Refused::Bad(why) => bad(why),
        Refused::Forbidden(why) => Failure(StatusCode::FORBIDDEN, why),
        Refused::Conflict(why) => Failure(StatusCode::CONFLICT, why),
        Refused::Unstored(why) => unstored(why),
    }
}
