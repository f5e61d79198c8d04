//! The follower's side of booking: a peer books a run this agent is the
//! other end of (`POST /api/v1/reservations`). A mesh run's spec and class
//! are this agent's own, from its configuration, never the caller's; the
//! slot must fit this agent's calendar, windows and quotas, and the run
//! is stored before the executor may see it.

use std::net::IpAddr;

use goodput_archive::RunState;
use goodput_core::schedule::RunClass;
use goodput_core::spec::TestSpec;
use goodput_core::time::ms_rfc3339;

use crate::clock;
use crate::limits::Bucket;
use crate::state::booking::{base_of, Booked, BookedBy, Wanted};
use crate::state::config::Loaded;
use crate::state::peer::Reservation;
use crate::state::Shared;

/// Why a peer's booking is refused.
#[derive(Debug)]
pub(crate) enum Refused {
    /// The reservation itself is wrong.
    Bad(String),
    /// Not this agent's to book: no such task here, or over a limit.
    Forbidden(String),
    /// Booked here already for another slot, or the slot is taken.
    Conflict(String),
    /// The archive did not take the record.
    Unstored(String),
}

/// A booking made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Held {
    /// Booked now.
    New,
    /// Booked already, for the same slot.
    Again,
}

/// A reservation read against this agent: which end this host is, and
/// the other end's name.
pub(crate) struct Asked<'a> {
    pub(crate) r: &'a Reservation,
    /// This host runs it (it is the source).
    pub(crate) runs_here: bool,
    /// The other end, which must be the caller.
    pub(crate) other: String,
    /// A run asked of its source through the API, not a mesh run.
    pub(crate) on_demand: bool,
}

/// Which end of `r` this host is; a run neither end of which is this
/// host, or with only one end, is not booked here.
pub(crate) fn asked<'a>(loaded: &Loaded, r: &'a Reservation) -> Result<Asked<'a>, Refused> {
    let here = |n: &str| loaded.mine.iter().any(|m| m == n);
    let runs_here = here(&r.source);
    if !runs_here && !r.dest.as_deref().is_some_and(here) {
        return Err(Refused::Bad(format!(
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
    let other =
        other.ok_or_else(|| Refused::Bad("a single-ended run is not booked with another agent".into()))?;
    Ok(Asked {
        r,
        runs_here,
        other,
        on_demand: r.id.starts_with("on-demand/"),
    })
}

/// A mesh run's spec and class: those of the configured pair the
/// reservation names, its id one of that task's runs, and its slot where
/// the task's schedule puts it.
pub(crate) fn configured(loaded: &Loaded, r: &Reservation) -> Result<(TestSpec, RunClass), Refused> {
    let t = loaded
        .pairs
        .iter()
        .find(|t| t.task == r.task && t.source == r.source && t.dest == r.dest)
        .ok_or_else(|| {
            Refused::Forbidden(format!(
                "no task {} from {} to {} in this agent's configuration",
                r.task,
                r.source,
                r.dest.as_deref().unwrap_or("-")
            ))
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
        .ok_or_else(|| Refused::Bad(format!("run id {} is not one of task {}'s runs", r.id, t.task)))?;
    // Its slot lies in its run's window: spread and slip after its
    // base time, its booked length.
    let latest = base
        .saturating_add(t.repeat.slip.saturating_mul(2))
        .saturating_add(60_000);
    if r.start_ms < base.saturating_sub(60_000)
        || r.start_ms > latest
        || r.end_ms != r.start_ms.saturating_add(t.expected_ms())
    {
        return Err(Refused::Bad(format!(
            "run {}'s slot is not where its schedule puts it",
            r.id
        )));
    }
    Ok((t.spec.clone(), t.class))
}

/// Books the run `a` names for the peer at `from`, running `spec` as
/// `class`: the slot must be sensible, the peer within `max_held`, its
/// windows and quotas, and the slot free; the run is stored (scheduled)
/// before the executor is woken.
pub(crate) async fn hold(
    s: &Shared,
    loaded: &Loaded,
    a: &Asked<'_>,
    (spec, class): (TestSpec, RunClass),
    from: IpAddr,
) -> Result<Held, Refused> {
    let r = a.r;
    let now = clock::now_ms();
    if r.end_ms <= r.start_ms || r.start_ms > now.saturating_add(7 * 86_400_000) || r.end_ms < now {
        return Err(Refused::Bad(
            "the slot must end after it starts, not be over, and start within 7 days".into(),
        ));
    }
    let run = Wanted {
        id: r.id.clone(),
        task: r.task.clone(),
        source: r.source.clone(),
        dest: r.dest.clone(),
        spec,
        class,
        scheduled_ms: r.scheduled_ms,
        runs_here: a.runs_here,
        peer: loaded.peer(&a.other),
    };
    let b = Booked::new(run, r.start_ms, r.end_ms, BookedBy::Peer(from));
    {
        let mut inner = s.lock();
        if let Some(old) = inner.book.booked.get(&b.number) {
            if old.start_ms == b.start_ms && old.end_ms == b.end_ms {
                return Ok(Held::Again);
            }
            return Err(Refused::Conflict(format!(
                "run {} is booked here already, for another slot",
                r.id
            )));
        }
        let ours = BookedBy::ThisAgent.to_string();
        let held = inner.book.booked.values().filter(|b| b.booked_by != ours).count();
        if held >= s.options.limits.max_held {
            inner.counters.refused += 1;
            return Err(Refused::Forbidden(format!(
                "limit max_held: this agent holds {held} runs booked by others"
            )));
        }
        let limits = s.options.limits.clone();
        let who = from.to_canonical();
        // A peer's on-demand runs (its clients') are charged apart from
        // its mesh runs, which this agent's configuration bounds: a
        // client never uses up the quota the peer's schedule needs.
        let bucket = if a.on_demand {
            Bucket::OnDemand
        } else {
            Bucket::Mesh
        };
        if let Err(e) = limits
            .check_window(who, r.start_ms, r.end_ms, class)
            .and_then(|()| {
                inner
                    .quotas
                    .take(&limits, (who, bucket), now, class, r.end_ms - r.start_ms)
            })
        {
            inner.counters.refused += 1;
            return Err(Refused::Forbidden(e));
        }
        if let Err(x) = inner.book.calendar.book(b.booking()) {
            let id = inner.run_name(x.run);
            return Err(Refused::Conflict(format!(
                "busy with run {id} until {}",
                ms_rfc3339(x.end)
            )));
        }
        inner.book.booked.insert(b.number, b.clone());
        inner.counters.booked_by_peers += 1;
    }
    if let Err(why) = s.store_now(&[b.record(RunState::Scheduled, None)]).await {
        s.unbook(&b.id);
        return Err(Refused::Unstored(why));
    }
    s.wake.notify_one();
    Ok(Held::New)
}
