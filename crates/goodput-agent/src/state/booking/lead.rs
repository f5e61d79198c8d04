//! The runs this agent leads: when one is due, it is placed on this
//! host's calendar and the other agent's (the first common free slot
//! within the slip), booked on both, and handed to the executor — or
//! stored as a non-start with the reason.

use std::sync::Arc;
use std::time::Duration;

use goodput_archive::RunState;
use goodput_core::schedule::{place, Booking, Calendar, NonStart, RunClass};
use goodput_core::spec::TestSpec;
use goodput_core::time::ms_rfc3339;

use crate::clock;
use crate::log::log;
use crate::state::booking::pscheduler;
use crate::state::booking::{missed_run, Booked, BookedBy, Wanted};
use crate::state::config::{Peer, PsHost};
use crate::state::peer::{self, Refusal, Reservation, SlotView};
use crate::state::{pair_key, run_number, Shared};

/// How far ahead of a run's time it is booked: the peer must hold it
/// before it starts.
const LOOKAHEAD: u64 = 1_500;
/// The least notice a slot is booked with.
const MIN_NOTICE: u64 = 300;
/// Attempts when a peer's calendar changes between reading and booking.
const ATTEMPTS: usize = 3;

/// One run to place.
#[derive(Debug, Clone)]
pub(crate) struct Planning {
    pub(crate) id: String,
    pub(crate) task: String,
    pub(crate) source: String,
    pub(crate) dest: Option<String>,
    pub(crate) spec: TestSpec,
    pub(crate) class: RunClass,
    /// When it is due (ms).
    pub(crate) at: u64,
    /// How late it may start after `at` (ms).
    pub(crate) slip: u64,
    /// How long it holds the calendars (ms).
    pub(crate) duration: u64,
    pub(crate) peer: Option<Peer>,
    pub(crate) runs_here: bool,
    /// The other end is a perfSONAR host: the run is booked with its
    /// pScheduler.
    pub(crate) pscheduler: Option<PsHost>,
}

impl Planning {
    /// The run to book, before it has a slot.
    pub(crate) fn wanted(&self) -> Wanted {
        Wanted {
            id: self.id.clone(),
            task: self.task.clone(),
            source: self.source.clone(),
            dest: self.dest.clone(),
            spec: self.spec.clone(),
            class: self.class,
            scheduled_ms: self.at,
            runs_here: self.runs_here,
            peer: self.peer.clone(),
        }
    }
}

/// What became of a placing.
#[derive(Debug, Clone)]
pub(crate) enum Placed {
    /// Booked for `[start, end)`.
    Booked { start: u64, end: u64 },
    /// Not started, and why.
    NonStart(String),
    /// The archive has the run already (booked before a restart, or run).
    Known,
}

/// Runs placed at once (each may wait on a slow peer).
const MAX_PLANNING: usize = 64;

/// Every quarter second: the led runs coming due are placed, each in
/// its own task so that a slow or silent peer holds up only its own runs.
///
/// It also watches the wall clock against the monotonic one: when the
/// wall clock is stepped (forward or back), every pair is planned again
/// from the new time, as after a restart (see [`replan`]).
pub(crate) async fn planner(shared: Arc<Shared>) {
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut placing = tokio::task::JoinSet::new();
    let mut watch = clock::StepWatch::new();
    // Wall-clock spans a step back brings round again: `[from, until)`.
    let mut replays: Vec<(u64, u64)> = Vec::new();
    loop {
        tokio::select! {
            _ = shared.cancel.cancelled() => break,
            _ = tick.tick() => {}
            Some(_) = placing.join_next(), if !placing.is_empty() => continue,
        }
        let (step, now) = watch.check();
        if let Some(step) = step {
            replan(&shared, step, now).await;
            if step < 0 {
                // The runs due from now until the clock is back where it
                // was have ids already used (a run id ends with its base
                // time): those that ended get a replay id.
                replays.push((
                    now.saturating_sub(REPLAY_MARGIN),
                    now.saturating_add(step.unsigned_abs())
                        .saturating_add(REPLAY_MARGIN),
                ));
            }
        }
        replays.retain(|(_, until)| *until > now);
        if replays.len() > MAX_REPLAYS {
            replays.drain(..replays.len() - MAX_REPLAYS);
        }
        if placing.len() >= MAX_PLANNING {
            continue;
        }
        for mut p in due(&shared, now) {
            let shared = shared.clone();
            let replayed = replays
                .iter()
                .any(|(from, until)| (*from..*until).contains(&p.at));
            placing.spawn(async move {
                if replayed {
                    p.id = replay_id(&shared, &p.id).await;
                }
                plan(&shared, p).await;
            });
        }
    }
    while placing.join_next().await.is_some() {}
}

/// How far around a step back's span runs count as replayed (ms): a
/// run's time may be spread and slipped after its base time.
const REPLAY_MARGIN: u64 = 60_000;
/// Step-back spans remembered at once.
const MAX_REPLAYS: usize = 16;
/// Times one base time may come round again (then the run is skipped).
const MAX_REPLAY_IDS: u32 = 16;

/// The id a run due again after a step back of the wall clock is stored
/// under: its own while the archive has no ended run by it, else the
/// first free of `ID~2`, `ID~3`, … (the second, third time its base time
/// came round). A run booked with another agent under a replay id is
/// refused there (its id is not one of its task's runs), and recorded as
/// a non-start with that reason.
async fn replay_id(shared: &Shared, id: &str) -> String {
    let ended = |r: Option<goodput_archive::Run>| r.is_some_and(|r| r.state.has_ended());
    if !ended(shared.archive.get(id).await.ok().flatten()) {
        return id.to_owned();
    }
    for k in 2..=MAX_REPLAY_IDS {
        let again = format!("{id}~{k}");
        match shared.archive.get(&again).await {
            Ok(None) => return again,
            Ok(Some(_)) => continue,
            Err(_) => break,
        }
    }
    id.to_owned()
}

/// The led runs not yet planned whose time a step forward passed over,
/// as `missed` records (at most [`MAX_MISSED_PER_PAIR`] a pair and
/// [`MAX_MISSED`] in all), and whether there were more.
fn passed_over(shared: &Shared, now: u64, why: &str) -> (Vec<goodput_archive::Run>, bool) {
    let inner = shared.lock();
    let mut out = Vec::new();
    for led in &inner.loaded.led {
        let t = &led.task;
        let key = pair_key(&t.task, &t.source, t.dest.as_deref());
        let Some(&first) = inner.book.next.get(&key) else {
            continue;
        };
        let mut n = first;
        for _ in 0..MAX_MISSED_PER_PAIR {
            let Some((at, _)) = t.repeat.run(t.seed, n) else {
                break;
            };
            if at >= now {
                break;
            }
            if out.len() >= MAX_MISSED {
                return (out, true);
            }
            out.push(missed_run(led, t.run_id(n), at, why));
            n = t.repeat.next(n);
        }
    }
    (out, false)
}

/// Most runs per pair a step forward records as missed (as at a restart).
const MAX_MISSED_PER_PAIR: usize = 10_000;
/// Most runs a step forward records as missed in all (each record holds
/// its spec: a long step over a large mesh must not take the memory).
const MAX_MISSED: usize = 20_000;

/// The wall clock was stepped by `step` ms (negative: back); `now` is the
/// wall clock after it. Every led pair is planned again from `now`, as
/// after a restart: after a step forward, the runs it passed over are
/// recorded as `missed` (never run in a burst), and runs booked here whose
/// slot it passed are `missed` too; after a step back, the runs due from
/// the new time on are planned (not an hour later). Said in the log and
/// counted in health.
pub(crate) async fn replan(shared: &Shared, step: i64, now: u64) {
    clock::note_step(step, now);
    let mut missed = Vec::new();
    let mut unrecorded = false;
    if step > 0 {
        let why = format!(
            "the wall clock stepped forward {} s past its time",
            (step.unsigned_abs() + 500) / 1000
        );
        let (passed_over, more) = passed_over(shared, now, &why);
        unrecorded = more;
        // Those the archive has (a record from before the step) stay.
        let ids: Vec<String> = passed_over.iter().map(|r| r.id.clone()).collect();
        let known = shared.archive.existing(&ids).await.unwrap_or_default();
        missed.extend(passed_over.into_iter().filter(|r| !known.contains(&r.id)));
        // Booked here, not started, and its slot already over: missed
        // rather than started late and cut at once.
        let mut inner = shared.lock();
        let passed: Vec<u64> = inner
            .book
            .booked
            .values()
            .filter(|b| b.runs_here && !b.started && b.end_ms <= now)
            .map(|b| b.number)
            .collect();
        for number in passed {
            if let Some(b) = inner.book.booked.remove(&number) {
                inner.book.calendar.release(number);
                let mut r = b.record(RunState::Missed, Some(why.clone()));
                r.start_ms = None;
                r.end_ms = None;
                missed.push(r);
            }
        }
    }
    // Every pair's next run is found again from the new time.
    shared.lock().book.next.clear();
    if !missed.is_empty() {
        shared.store(&missed).await;
    }
    let direction = if step < 0 { "back" } else { "forward" };
    let also = match (missed.len(), unrecorded) {
        (0, false) => String::new(),
        (n, false) => format!(" ({n} runs it passed recorded as missed)"),
        (n, true) => format!(
            " ({n} runs it passed recorded as missed; the rest are not recorded, limit {MAX_MISSED} a step)"
        ),
    };
    log(&format!(
        "the wall clock stepped {direction} {} s; schedule re-planned{also}",
        (step.unsigned_abs() + 500) / 1000
    ));
}

/// The led runs due before `now + LOOKAHEAD` that are not booked yet, in
/// time order; each pair's counter moves past them.
fn due(shared: &Shared, now: u64) -> Vec<Planning> {
    let mut inner = shared.lock();
    let loaded = inner.loaded.clone();
    let mut out = Vec::new();
    for led in &loaded.led {
        let t = &led.task;
        let key = pair_key(&t.task, &t.source, t.dest.as_deref());
        let mut n = *inner.book.next.entry(key.clone()).or_insert_with(|| {
            // The first run whose (spread) time is still to come: runs
            // spread up to the slip after their base time.
            let mut n = t.repeat.first_at_or_after(now.saturating_sub(t.repeat.slip));
            for _ in 0..10_000 {
                match t.repeat.run(t.seed, n) {
                    Some((at, _)) if at < now => n = t.repeat.next(n),
                    _ => break,
                }
            }
            n
        });
        // A run with a pScheduler host is booked further ahead: its
        // booking takes several calls.
        let ahead = if led.pscheduler.is_some() {
            pscheduler::LOOKAHEAD
        } else {
            LOOKAHEAD
        };
        // Never more than a few at once for one pair (a repeat shorter
        // than a tick, or a clock step).
        for _ in 0..16 {
            let Some((at, slip)) = t.repeat.run(t.seed, n) else {
                break;
            };
            if at > now + ahead {
                break;
            }
            let id = t.run_id(n);
            n = t.repeat.next(n);
            let number = run_number(&id);
            if inner.book.booked.contains_key(&number) || inner.book.tentative.contains_key(&number) {
                continue;
            }
            out.push(Planning {
                id,
                task: t.task.clone(),
                source: t.source.clone(),
                dest: t.dest.clone(),
                spec: t.spec.clone(),
                class: t.class,
                at,
                slip,
                duration: t.expected_ms(),
                peer: led.peer.clone(),
                runs_here: led.runs_here,
                pscheduler: led.pscheduler.clone(),
            });
        }
        inner.book.next.insert(key, n);
    }
    out.sort_by_key(|p| p.at);
    out
}

/// The calendar of the peer's bookings, and their ids by number.
fn peer_calendar(slots: &[SlotView]) -> (Calendar, Vec<(u64, String)>) {
    let mut c = Calendar::new();
    let mut names = Vec::new();
    for s in slots {
        let _ = c.book(Booking {
            run: s.number,
            start: s.start_ms,
            end: s.end_ms,
            class: s.class,
        });
        names.push((s.number, s.id.clone()));
    }
    (c, names)
}

/// A non-start's reason in words, with run ids and times.
fn reason(ns: &NonStart, shared: &Shared, peer: Option<&Peer>, peer_names: &[(u64, String)]) -> String {
    let peer_name = peer.map_or("the peer", |p| p.name.as_str());
    match ns {
        NonStart::Busy { run, until } => {
            let id = shared.lock().run_name(*run);
            format!("this host busy with run {id} until {}", ms_rfc3339(*until))
        }
        NonStart::PeerBusy { run, until } => {
            let id = peer_names
                .iter()
                .find(|(n, _)| n == run)
                .map_or_else(|| format!("#{run:016x}"), |(_, id)| id.clone());
            format!("peer {peer_name} busy with run {id} until {}", ms_rfc3339(*until))
        }
        NonStart::PeerUnreachable { error } => format!("peer {peer_name} unreachable: {error}"),
        NonStart::PeerRefused { limit } => format!("peer {peer_name} refused: {limit}"),
        NonStart::NoCommonSlot => format!("no free slot common to this host and {peer_name} within the slip"),
    }
}

/// Places one run, books it on both ends and stores it (scheduled, or a
/// non-start with its reason); only then can the executor see it.
pub(crate) async fn plan(shared: &Shared, p: Planning) -> Placed {
    match shared.archive.get(&p.id).await {
        Ok(Some(_)) => return Placed::Known,
        Ok(None) => {}
        Err(e) => log(&format!("run {}: the archive could not be read: {e}", p.id)),
    }
    let (placed, booked) = match &p.pscheduler {
        Some(host) => pscheduler::place_run(shared, &p, host).await,
        None => (place_run(shared, &p).await, None),
    };
    let mut b = booked.unwrap_or_else(|| Booked::new(p.wanted(), 0, 0, BookedBy::ThisAgent));
    match &placed {
        Placed::Booked { start, end } => {
            b.start_ms = *start;
            b.end_ms = *end;
            shared.store(&[b.record(RunState::Scheduled, None)]).await;
            {
                let mut inner = shared.lock();
                inner.book.tentative.remove(&b.number);
                inner.book.booked.insert(b.number, b);
            }
            shared.wake.notify_one();
        }
        Placed::NonStart(why) => {
            shared.lock().counters.non_starts += 1;
            log(&format!("run {} did not start: {why}", p.id));
            let mut r = b.record(RunState::NonStart, Some(why.clone()));
            r.start_ms = None;
            r.end_ms = None;
            shared.store(std::slice::from_ref(&r)).await;
            // The peer keeps the run's fate too (and lets go of a booking
            // it may hold for it).
            if let Some(peer) = &p.peer {
                let _ = peer::deliver(shared, peer, &r).await;
            }
        }
        Placed::Known => {}
    }
    placed
}

async fn place_run(shared: &Shared, p: &Planning) -> Placed {
    let mut last_busy = String::new();
    for _ in 0..ATTEMPTS {
        let now = clock::now_ms();
        let earliest = p.at.max(now + MIN_NOTICE);
        let Some(slip) = p.at.saturating_add(p.slip).checked_sub(earliest) else {
            return Placed::NonStart(format!(
                "its time ({}) and slip passed before it could be booked",
                ms_rfc3339(p.at)
            ));
        };
        let to = earliest.saturating_add(slip).saturating_add(p.duration);
        // The peer's calendar (background runs need no room there).
        let negotiate = p.peer.as_ref().filter(|_| p.class != RunClass::Background);
        let (theirs, names) = match negotiate {
            None => (None, Vec::new()),
            Some(peer) => match peer::calendar(shared, peer, earliest, to).await {
                Ok(slots) => {
                    let (c, n) = peer_calendar(&slots);
                    (Some(c), n)
                }
                Err(e) => {
                    let ns = NonStart::PeerUnreachable { error: e };
                    return Placed::NonStart(reason(&ns, shared, p.peer.as_ref(), &[]));
                }
            },
        };
        // Book here first, so nothing booked meanwhile takes the slot.
        let booked = {
            let mut inner = shared.lock();
            match place(
                &inner.book.calendar,
                theirs.as_ref(),
                earliest,
                slip,
                p.duration,
                p.class,
            ) {
                Ok(start) => {
                    let b = Booked::new(
                        p.wanted(),
                        start,
                        start.saturating_add(p.duration),
                        BookedBy::ThisAgent,
                    );
                    // On the calendar only: the executor sees it once the
                    // peer has agreed and it is stored.
                    match inner.book.calendar.book(b.booking()) {
                        Ok(()) => {
                            inner.book.tentative.insert(b.number, b.id.clone());
                            inner.counters.booked += 1;
                            Ok(b)
                        }
                        Err(x) => Err(NonStart::Busy {
                            run: x.run,
                            until: x.end,
                        }),
                    }
                }
                Err(ns) => Err(ns),
            }
        };
        let b = match booked {
            Ok(b) => b,
            Err(ns) => return Placed::NonStart(reason(&ns, shared, p.peer.as_ref(), &names)),
        };
        let Some(peer) = &p.peer else {
            return Placed::Booked {
                start: b.start_ms,
                end: b.end_ms,
            };
        };
        let r = Reservation {
            id: b.id.clone(),
            task: b.task.clone(),
            source: b.source.clone(),
            dest: b.dest.clone(),
            spec: serde_json::to_value(&b.spec).unwrap_or_default(),
            class: b.class,
            scheduled_ms: b.scheduled_ms,
            start_ms: b.start_ms,
            end_ms: b.end_ms,
        };
        let refusal = match peer::reserve(shared, peer, &r).await {
            Ok(()) => {
                return Placed::Booked {
                    start: b.start_ms,
                    end: b.end_ms,
                }
            }
            Err(e) => e,
        };
        {
            let mut inner = shared.lock();
            inner.book.calendar.release(b.number);
            inner.book.tentative.remove(&b.number);
        }
        match refusal {
            Refusal::Busy(why) => {
                last_busy = why;
                continue;
            }
            Refusal::Refused(limit) => {
                let ns = NonStart::PeerRefused { limit };
                return Placed::NonStart(reason(&ns, shared, p.peer.as_ref(), &[]));
            }
            Refusal::Unreachable(error) => {
                let ns = NonStart::PeerUnreachable { error };
                return Placed::NonStart(reason(&ns, shared, p.peer.as_ref(), &[]));
            }
        }
    }
    Placed::NonStart(format!(
        "peer {} busy: its calendar changed while booking, {ATTEMPTS} times (last: {last_busy})",
        p.peer.as_ref().map_or("the peer", |x| x.name.as_str())
    ))
}
