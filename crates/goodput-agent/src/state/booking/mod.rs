//! Booking: how a run gets its slot on this agent's calendar, from each
//! of the three sides that book one, with the `Booked` record made in one
//! place ([`Booked::new`]).
//!
//! - `lead`: the runs this agent leads, placed on both ends' calendars
//!   (the pure scheduling core is `goodput_core::schedule`);
//! - `follow`: a peer's reservation of a run this agent is the other end
//!   of (what `POST /api/v1/reservations` books);
//! - `restart`: after a start, the runs missed while the agent was down,
//!   and those booked for later booked again.

pub(crate) mod follow;
pub(crate) mod lead;
pub(crate) mod pscheduler;
pub(crate) mod restart;

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;

use goodput_archive::{measurement_key, Figures, Run, RunState};
use goodput_core::schedule::{Booking, Calendar, RunClass};
use goodput_core::spec::TestSpec;
use serde::Serialize;

use crate::state::config::{Led, Peer};
use crate::state::run_number;

pub(crate) use lead::{plan, planner, Placed, Planning};

/// A run on this agent's calendar that has not ended.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub(crate) struct Booked {
    /// The run's id (the same on both ends).
    pub(crate) id: String,
    /// Its number on the calendars (a hash of the id).
    pub(crate) number: u64,
    /// Its task (`on-demand` for a run asked through the API).
    pub(crate) task: String,
    /// The end that runs the test.
    pub(crate) source: String,
    /// The other end.
    pub(crate) dest: Option<String>,
    /// What it runs.
    #[schemars(with = "serde_json::Value")]
    pub(crate) spec: TestSpec,
    /// How it shares the host.
    pub(crate) class: RunClass,
    /// When it was due (ms since the Unix epoch).
    pub(crate) scheduled_ms: u64,
    /// Its booked slot's start (ms).
    pub(crate) start_ms: u64,
    /// Its booked slot's end (ms).
    pub(crate) end_ms: u64,
    /// This host runs it (it is the source).
    pub(crate) runs_here: bool,
    /// Under way.
    pub(crate) started: bool,
    /// Who booked it: `this agent`, or the address of the peer that did.
    pub(crate) booked_by: String,
    /// The agent at the other end, which gets the result.
    #[serde(skip)]
    pub(crate) peer: Option<Peer>,
    /// Booked with a perfSONAR host's pScheduler: its task there.
    #[serde(skip)]
    pub(crate) pscheduler: Option<pscheduler::PsBooking>,
}

impl Booked {
    /// The one place a booking is made: `run` in the slot
    /// `[start_ms, end_ms)`, booked by `by`, not yet started.
    pub(crate) fn new(run: Wanted, start_ms: u64, end_ms: u64, by: BookedBy) -> Self {
        Self {
            number: run_number(&run.id),
            id: run.id,
            task: run.task,
            source: run.source,
            dest: run.dest,
            spec: run.spec,
            class: run.class,
            scheduled_ms: run.scheduled_ms,
            start_ms,
            end_ms,
            runs_here: run.runs_here,
            started: false,
            booked_by: by.to_string(),
            peer: run.peer,
            pscheduler: None,
        }
    }

    /// The archive's record of it.
    pub(crate) fn record(&self, state: RunState, reason: Option<String>) -> Run {
        Run {
            id: self.id.clone(),
            task: self.task.clone(),
            source: self.source.clone(),
            dest: self.dest.clone(),
            kind: self.spec.kind().into(),
            class: self.class,
            state,
            reason,
            scheduled_ms: self.scheduled_ms,
            start_ms: Some(self.start_ms),
            end_ms: Some(self.end_ms),
            measurement_key: measurement_key(&self.spec, &self.source, self.dest.as_deref()),
            spec: serde_json::to_value(&self.spec).unwrap_or_default(),
            result: None,
            figures: Figures::default(),
        }
    }

    /// The booking on the calendar.
    pub(crate) fn booking(&self) -> Booking {
        Booking {
            run: self.number,
            start: self.start_ms,
            end: self.end_ms,
            class: self.class,
        }
    }
}

/// Booking's state, under the hub's one lock: the calendar, the runs on
/// it, and where each led pair's planning stands.
#[derive(Debug, Default)]
pub(crate) struct Book {
    pub(crate) calendar: Calendar,
    /// Runs booked and not ended, by number.
    pub(crate) booked: BTreeMap<u64, Booked>,
    /// Runs on the calendar while their peer is asked (not yet runnable).
    pub(crate) tentative: HashMap<u64, String>,
    /// Per led pair (`task/source/dest`): the next run number to plan.
    pub(crate) next: HashMap<String, u64>,
}

impl Book {
    /// A booked or tentative run's id, by its number.
    pub(crate) fn run_name(&self, number: u64) -> String {
        self.booked
            .get(&number)
            .map(|b| b.id.clone())
            .or_else(|| self.tentative.get(&number).cloned())
            .unwrap_or_else(|| format!("#{number:016x}"))
    }
}

/// A run to be booked, as the side booking it knows it (from its led
/// pair, a peer's reservation, or the archive's record after a restart).
#[derive(Debug, Clone)]
pub(crate) struct Wanted {
    pub(crate) id: String,
    pub(crate) task: String,
    pub(crate) source: String,
    pub(crate) dest: Option<String>,
    pub(crate) spec: TestSpec,
    pub(crate) class: RunClass,
    /// When it was due (ms since the Unix epoch).
    pub(crate) scheduled_ms: u64,
    /// This host runs it (it is the source).
    pub(crate) runs_here: bool,
    /// The agent at the other end.
    pub(crate) peer: Option<Peer>,
}

/// Who booked a run here (what a booking's `booked_by` says).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BookedBy {
    /// This agent leads the run.
    ThisAgent,
    /// The peer at this address booked it.
    Peer(IpAddr),
    /// Booked again from the archive after a restart.
    Restart,
}

impl std::fmt::Display for BookedBy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::ThisAgent => f.write_str("this agent"),
            Self::Peer(ip) => write!(f, "{}", ip.to_canonical()),
            Self::Restart => f.write_str("before a restart"),
        }
    }
}

/// The record of a led run that never started: due at `at` while the
/// agent was down, or passed over by a step of the wall clock.
pub(crate) fn missed_run(led: &Led, id: String, at: u64, why: &str) -> Run {
    let t = &led.task;
    let run = Wanted {
        id,
        task: t.task.clone(),
        source: t.source.clone(),
        dest: t.dest.clone(),
        spec: t.spec.clone(),
        class: t.class,
        scheduled_ms: at,
        runs_here: led.runs_here,
        peer: led.peer.clone(),
    };
    let b = Booked::new(run, at, at.saturating_add(t.expected_ms()), BookedBy::ThisAgent);
    let mut r = b.record(RunState::Missed, Some(why.to_owned()));
    r.start_ms = None;
    r.end_ms = None;
    r
}

/// A run id's base time: `BASE_MS`, or `BASE_MS~K` for the K-th run of
/// that base time (the wall clock stepped back and it came round again,
/// see `lead`).
pub(crate) fn base_of(tail: &str) -> Option<u64> {
    let (base, again) = match tail.split_once('~') {
        Some((b, k)) => (b, Some(k)),
        None => (tail, None),
    };
    if let Some(k) = again {
        k.parse::<u32>().ok().filter(|k| *k >= 2)?;
    }
    base.parse().ok()
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_replayed_run_id_has_its_base_time() {
        assert_eq!(super::base_of("1795800240000"), Some(1_795_800_240_000));
        assert_eq!(super::base_of("1795800240000~2"), Some(1_795_800_240_000));
        assert_eq!(super::base_of("1795800240000~17"), Some(1_795_800_240_000));
        for bad in [
            "1795800240000~1",
            "1795800240000~",
            "1795800240000~x",
            "~2",
            "12a",
        ] {
            assert_eq!(super::base_of(bad), None, "{bad}");
        }
    }
}
