//! The agent's scheduling core: which runs may overlap on a host, where a
//! run fits on its participants' calendars, when a repeating task's runs
//! are due, and why a run did not start. Pure: times are milliseconds on
//! a clock the caller owns (the agent's wall clock, or a simulation's
//! virtual time), and nothing here sleeps, reads a clock or opens a socket.
//!
//! Classes follow pScheduler's: an **exclusive** run (throughput) overlaps
//! no other non-background run on any participant; **normal** runs may
//! overlap each other but never an exclusive one; **background** runs
//! (continuous STAMP streams) may always run.

use serde::{Deserialize, Serialize};

/// Milliseconds on the caller's clock.
pub type Ms = u64;

/// How a run shares its hosts with other runs.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum RunClass {
    /// Alone on every participant, but for background runs (throughput).
    Exclusive,
    /// Beside other normal and background runs, never beside an exclusive one.
    Normal,
    /// Always allowed (continuous latency and loss streams).
    Background,
}

impl RunClass {
    /// Whether runs of these classes may share a host at the same time.
    pub fn may_overlap(self, other: RunClass) -> bool {
        use RunClass::*;
        matches!(
            (self, other),
            (Background, _) | (_, Background) | (Normal, Normal)
        )
    }

    /// The class a test kind has unless a task says otherwise (the kind
    /// states it: [`crate::kind::KindSpec::CLASS`]).
    pub fn of_kind(kind: crate::kind::Kind) -> Self {
        kind.class()
    }
}

/// A run committed on a host's calendar: `[start, end)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Booking {
    /// The run's id.
    pub run: u64,
    /// First millisecond.
    pub start: Ms,
    /// First millisecond after it.
    pub end: Ms,
    /// Its class.
    pub class: RunClass,
}

impl Booking {
    fn overlaps(&self, start: Ms, end: Ms) -> bool {
        self.start < end && start < self.end
    }
}

/// One host's commitments, in start order.
#[derive(Debug, Clone, Default)]
pub struct Calendar {
    /// Exclusive and normal runs, in start order.
    bookings: Vec<Booking>,
    /// Background runs: they block nothing, so no search looks at them.
    background: Vec<Booking>,
    /// The longest booking ever held: how far back a search must look.
    longest: Ms,
}

impl Calendar {
    /// An empty calendar.
    pub fn new() -> Self {
        Self::default()
    }

    /// The exclusive and normal bookings, in start order.
    pub fn bookings(&self) -> &[Booking] {
        &self.bookings
    }

    /// The background bookings.
    pub fn background(&self) -> &[Booking] {
        &self.background
    }

    /// The first booking that keeps a run of `class` out of `[start, end)`.
    pub fn blocker(&self, start: Ms, end: Ms, class: RunClass) -> Option<&Booking> {
        // Bookings that start before `end`, back to the longest one's reach.
        let hi = self.bookings.partition_point(|b| b.start < end);
        let lo = self.bookings[..hi].partition_point(|b| b.start.saturating_add(self.longest) <= start);
        self.bookings[lo..hi]
            .iter()
            .filter(|b| b.overlaps(start, end) && !class.may_overlap(b.class))
            .min_by_key(|b| b.start)
    }

    /// Commits a run; refused (with the booking in the way) if it does not
    /// fit.
    pub fn book(&mut self, b: Booking) -> Result<(), Booking> {
        if b.end <= b.start {
            return Err(b);
        }
        if b.class == RunClass::Background {
            self.background.push(b);
            return Ok(());
        }
        if let Some(x) = self.blocker(b.start, b.end, b.class) {
            return Err(*x);
        }
        let at = self.bookings.partition_point(|x| x.start <= b.start);
        self.bookings.insert(at, b);
        self.longest = self.longest.max(b.end - b.start);
        Ok(())
    }

    /// Takes a run off the calendar (cancelled or ended early).
    pub fn release(&mut self, run: u64) -> Option<Booking> {
        if let Some(i) = self.background.iter().position(|b| b.run == run) {
            return Some(self.background.remove(i));
        }
        let i = self.bookings.iter().position(|b| b.run == run)?;
        Some(self.bookings.remove(i))
    }

    /// Forgets bookings that ended before `t`.
    pub fn prune_before(&mut self, t: Ms) {
        self.bookings.retain(|b| b.end >= t);
        self.background.retain(|b| b.end >= t);
    }

    /// The free ranges in `[from, to)` where a run of `class` could be:
    /// what one agent tells another that asks for its time.
    pub fn free(&self, from: Ms, to: Ms, class: RunClass) -> Vec<(Ms, Ms)> {
        let mut free = Vec::new();
        let mut t = from;
        let hi = self.bookings.partition_point(|b| b.start < to);
        let lo = self.bookings[..hi].partition_point(|b| b.start.saturating_add(self.longest) <= from);
        let mut busy: Vec<(Ms, Ms)> = self.bookings[lo..hi]
            .iter()
            .filter(|b| b.overlaps(from, to) && !class.may_overlap(b.class))
            .map(|b| (b.start, b.end))
            .collect();
        busy.sort_unstable();
        for (s, e) in busy {
            if s > t {
                free.push((t, s.min(to)));
            }
            t = t.max(e);
            if t >= to {
                break;
            }
        }
        if t < to {
            free.push((t, to));
        }
        free
    }
}

/// The ranges free in both lists (each sorted and disjoint).
pub fn intersect(a: &[(Ms, Ms)], b: &[(Ms, Ms)]) -> Vec<(Ms, Ms)> {
    let (mut i, mut j, mut out) = (0, 0, Vec::new());
    while i < a.len() && j < b.len() {
        let (s, e) = (a[i].0.max(b[j].0), a[i].1.min(b[j].1));
        if s < e {
            out.push((s, e));
        }
        if a[i].1 < b[j].1 {
            i += 1;
        } else {
            j += 1;
        }
    }
    out
}

/// The earliest start in `[earliest, earliest + slip]` at which `duration`
/// fits in one of the free ranges.
pub fn first_fit(free: &[(Ms, Ms)], earliest: Ms, slip: Ms, duration: Ms) -> Option<Ms> {
    let latest = earliest.saturating_add(slip);
    free.iter()
        .map(|&(s, e)| (s.max(earliest), e))
        .find(|&(s, e)| s <= latest && e.saturating_sub(s) >= duration)
        .map(|(s, _)| s)
}

/// Why a run did not start.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum NonStart {
    /// This host had no room in the window: the run in the way, and when it ends.
    Busy {
        /// The run that held the time.
        run: u64,
        /// When it ends.
        until: Ms,
    },
    /// The other participant had no room in the window.
    PeerBusy {
        /// The peer's run in the way.
        run: u64,
        /// When it ends.
        until: Ms,
    },
    /// The other participant did not answer.
    PeerUnreachable {
        /// What failed.
        error: String,
    },
    /// The other participant refused, naming the limit.
    PeerRefused {
        /// Its reason.
        limit: String,
    },
    /// Both had room, but never at the same time within the slip.
    NoCommonSlot,
}

impl std::fmt::Display for NonStart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NonStart::Busy { run, until } => write!(f, "this host is busy with run {run} until {until} ms"),
            NonStart::PeerBusy { run, until } => write!(f, "peer busy with run {run} until {until} ms"),
            NonStart::PeerUnreachable { error } => write!(f, "peer unreachable: {error}"),
            NonStart::PeerRefused { limit } => write!(f, "peer refused: {limit}"),
            NonStart::NoCommonSlot => f.write_str("no common free slot within the slip"),
        }
    }
}

/// Places a run on this host's calendar and a peer's: the first common
/// slot in `[earliest, earliest + slip]`, or why there is none.
pub fn place(
    mine: &Calendar,
    peer: Option<&Calendar>,
    earliest: Ms,
    slip: Ms,
    duration: Ms,
    class: RunClass,
) -> Result<Ms, NonStart> {
    let to = earliest.saturating_add(slip).saturating_add(duration);
    let free = mine.free(earliest, to, class);
    let Some(_) = first_fit(&free, earliest, slip, duration) else {
        let b = mine.blocker(earliest, earliest + duration, class).copied();
        return Err(b.map_or(NonStart::NoCommonSlot, |b| NonStart::Busy {
            run: b.run,
            until: b.end,
        }));
    };
    let Some(peer) = peer else {
        return first_fit(&free, earliest, slip, duration).ok_or(NonStart::NoCommonSlot);
    };
    let theirs = peer.free(earliest, to, class);
    if first_fit(&theirs, earliest, slip, duration).is_none() {
        let b = peer.blocker(earliest, earliest + duration, class).copied();
        return Err(b.map_or(NonStart::NoCommonSlot, |b| NonStart::PeerBusy {
            run: b.run,
            until: b.end,
        }));
    }
    first_fit(&intersect(&free, &theirs), earliest, slip, duration).ok_or(NonStart::NoCommonSlot)
}

/// When a repeating task's runs are due.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repeat {
    /// The first run's time.
    pub start: Ms,
    /// Between runs.
    pub every: Ms,
    /// No run after this time.
    pub until: Option<Ms>,
    /// No more runs than this.
    pub max_runs: Option<u64>,
    /// How late a run may start after its time.
    pub slip: Ms,
    /// Pick each run's time at random within its slip (the same for a
    /// task and a run number on every agent: a hash, not a generator).
    pub sliprand: bool,
    /// A cron schedule instead of `every` (then `n` is a matching
    /// minute since the epoch, and `every` and `max_runs` are unused).
    pub cron: Option<crate::cron::Cron>,
}

impl Repeat {
    /// A schedule of a run every `every` ms from `start`.
    pub fn every(start: Ms, every: Ms) -> Self {
        Self {
            start,
            every,
            until: None,
            max_runs: None,
            slip: 0,
            sliprand: false,
            cron: None,
        }
    }

    /// Run `n`'s base time (before any spread).
    pub fn base(&self, n: u64) -> Option<Ms> {
        match &self.cron {
            Some(_) => n.checked_mul(60_000),
            None => self.start.checked_add(self.every.checked_mul(n)?),
        }
    }

    /// Whether `t` is one of its runs' base times.
    pub fn is_base(&self, t: Ms) -> bool {
        match &self.cron {
            Some(c) => t.is_multiple_of(60_000) && t >= self.start && c.matches(t / 60_000),
            None => t >= self.start && (t - self.start).is_multiple_of(self.every.max(1)),
        }
    }

    /// The number of the run after run `n`.
    pub fn next(&self, n: u64) -> u64 {
        match &self.cron {
            Some(c) => n
                .checked_add(1)
                .and_then(|m| c.next_at_or_after(m))
                .unwrap_or(u64::MAX),
            None => n.saturating_add(1),
        }
    }

    /// Run `n` (0-based) of the task with this seed: its earliest start and
    /// the slip left after it; `None` past `until` or `max_runs`.
    pub fn run(&self, seed: u64, n: u64) -> Option<(Ms, Ms)> {
        if self.cron.is_none() && self.max_runs.is_some_and(|m| n >= m) {
            return None;
        }
        let at = self.base(n)?;
        if self.until.is_some_and(|u| at > u) {
            return None;
        }
        if !self.sliprand || self.slip == 0 {
            return Some((at, self.slip));
        }
        let offset = mix(seed ^ n.wrapping_mul(0x9e37_79b9_7f4a_7c15)) % self.slip.saturating_add(1);
        Some((at.checked_add(offset)?, self.slip - offset))
    }

    /// The runs whose earliest start fell in `[from, to)`, at most `max`
    /// of them (the first): when an agent comes back after being down,
    /// those it has no record of are the runs it missed.
    pub fn due_between(&self, seed: u64, from: Ms, to: Ms, max: usize) -> Vec<(u64, Ms)> {
        let mut out = Vec::new();
        if self.every == 0 && self.cron.is_none() {
            // Every run at the same time: only the first is one.
            return match self.run(seed, 0) {
                Some((at, _)) if (from..to).contains(&at) => vec![(0, at)],
                _ => out,
            };
        }
        // A run's time may be spread up to its slip after its base time.
        let mut n = self.first_at_or_after(from.saturating_sub(self.slip));
        while let Some((at, _)) = self.run(seed, n) {
            if at >= to || out.len() >= max {
                break;
            }
            if at >= from {
                out.push((n, at));
            }
            n = self.next(n);
        }
        out
    }

    /// The number of the first run whose time is at or after `t`.
    pub fn first_at_or_after(&self, t: Ms) -> u64 {
        if let Some(c) = &self.cron {
            let from = t.max(self.start).div_ceil(60_000);
            return c.next_at_or_after(from).unwrap_or(u64::MAX);
        }
        match (t.saturating_sub(self.start), self.every) {
            (_, 0) => 0,
            (d, e) => d.div_ceil(e),
        }
    }
}

/// A 64-bit mixer (splitmix64's finaliser): stable across hosts and builds.
pub fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// What a simulated mesh did.
#[derive(Debug, Clone, PartialEq)]
pub struct SimReport {
    /// Hosts.
    pub hosts: usize,
    /// Exclusive runs due.
    pub runs: u64,
    /// Of those, runs that found no slot.
    pub non_starts: u64,
    /// Exclusive time booked over host time, 0–1.
    pub occupancy: f64,
    /// Jain's index of the exclusive time each host got (1 = equal).
    pub fairness: f64,
    /// Background runs placed (always allowed).
    pub background_runs: u64,
    /// Calendar look-ups made, per host per simulated day.
    pub lookups_per_host_day: f64,
}

/// Simulates a full mesh of `hosts`: every ordered pair runs an exclusive
/// test of `duration` every `every`, led by its source, placed in the first
/// common slot within `slip` (start times spread by `sliprand`), plus one
/// background stream per pair that never ends; for `days` of virtual time.
pub fn simulate_mesh(hosts: usize, every: Ms, duration: Ms, slip: Ms, days: u64) -> SimReport {
    let horizon = days * 86_400_000;
    let mut calendars = vec![Calendar::new(); hosts];
    // Background streams: booked once, they never block anything.
    let mut run_id = 0u64;
    let mut background_runs = 0;
    for a in 0..hosts {
        for b in (0..hosts).filter(|&b| b != a) {
            run_id += 1;
            let stream = Booking {
                run: run_id,
                start: 0,
                end: horizon,
                class: RunClass::Background,
            };
            calendars[a].book(stream).expect("background always fits");
            calendars[b].book(stream).expect("background always fits");
            background_runs += 1;
        }
    }
    // Every run due in the horizon, in order of its time.
    let repeat = Repeat {
        start: 0,
        every,
        until: Some(horizon.saturating_sub(duration)),
        max_runs: None,
        slip,
        sliprand: true,
        cron: None,
    };
    let mut due: Vec<(Ms, Ms, usize, usize)> = Vec::new();
    for a in 0..hosts {
        for b in (0..hosts).filter(|&b| b != a) {
            let seed = mix(((a as u64) << 32) | b as u64);
            let mut n = 0;
            while let Some((at, left)) = repeat.run(seed, n) {
                due.push((at, left, a, b));
                n += 1;
            }
        }
    }
    due.sort_unstable();
    let (mut runs, mut non_starts, mut lookups) = (0u64, 0u64, 0u64);
    let mut booked = vec![0u64; hosts];
    let mut pruned_at = 0;
    for (at, left, a, b) in due {
        runs += 1;
        if at > pruned_at + 3_600_000 {
            // Only the future matters: keep the calendars short.
            for c in &mut calendars {
                c.prune_before(at.saturating_sub(duration));
            }
            pruned_at = at;
        }
        lookups += 2;
        match place(
            &calendars[a],
            Some(&calendars[b]),
            at,
            left,
            duration,
            RunClass::Exclusive,
        ) {
            Ok(start) => {
                run_id += 1;
                let run = Booking {
                    run: run_id,
                    start,
                    end: start + duration,
                    class: RunClass::Exclusive,
                };
                calendars[a].book(run).expect("placed in a free slot");
                calendars[b].book(run).expect("placed in a free slot");
                booked[a] += duration;
                booked[b] += duration;
            }
            Err(_) => non_starts += 1,
        }
    }
    let total: f64 = booked.iter().map(|&x| x as f64).sum();
    let squares: f64 = booked.iter().map(|&x| (x as f64).powi(2)).sum();
    SimReport {
        hosts,
        runs,
        non_starts,
        occupancy: total / (hosts as f64 * horizon as f64),
        fairness: if squares > 0.0 {
            total * total / (hosts as f64 * squares)
        } else {
            1.0
        },
        background_runs,
        lookups_per_host_day: lookups as f64 / hosts as f64 / days as f64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use RunClass::*;

    fn b(run: u64, start: Ms, end: Ms, class: RunClass) -> Booking {
        Booking {
            run,
            start,
            end,
            class,
        }
    }

    #[test]
    fn classes_overlap_as_pscheduler_has_it() {
        assert!(!Exclusive.may_overlap(Exclusive));
        assert!(!Exclusive.may_overlap(Normal));
        assert!(Exclusive.may_overlap(Background));
        assert!(Normal.may_overlap(Normal));
        assert!(Background.may_overlap(Exclusive));
        use crate::kind::Kind;
        assert_eq!(RunClass::of_kind(Kind::Tcp), Exclusive);
        assert_eq!(RunClass::of_kind(Kind::Stamp), Background);
        assert_eq!(RunClass::of_kind(Kind::Echo), Normal);
    }

    #[test]
    fn a_calendar_refuses_what_overlaps_and_frees_the_rest() {
        let mut c = Calendar::new();
        c.book(b(1, 100, 200, Exclusive)).unwrap();
        c.book(b(2, 0, 1000, Background)).unwrap();
        c.book(b(3, 300, 400, Normal)).unwrap();
        c.book(b(4, 350, 450, Normal)).unwrap();
        assert_eq!(c.book(b(5, 150, 250, Exclusive)).unwrap_err().run, 1);
        assert_eq!(c.book(b(6, 199, 301, Normal)).unwrap_err().run, 1);
        assert_eq!(c.book(b(7, 420, 500, Exclusive)).unwrap_err().run, 4);
        // Touching ends do not overlap.
        c.book(b(8, 200, 300, Exclusive)).unwrap();
        assert_eq!(c.free(0, 1000, Exclusive), vec![(0, 100), (450, 1000)]);
        assert_eq!(c.free(0, 1000, Normal), vec![(0, 100), (300, 1000)]);
        assert_eq!(c.free(0, 1000, Background), vec![(0, 1000)]);
        assert_eq!(c.release(8).map(|x| x.run), Some(8));
        assert_eq!(
            c.free(0, 1000, Exclusive),
            vec![(0, 100), (200, 300), (450, 1000)]
        );
    }

    #[test]
    fn a_long_booking_still_blocks_a_search_that_starts_inside_it() {
        let mut c = Calendar::new();
        c.book(b(1, 0, 10_000, Exclusive)).unwrap();
        c.book(b(2, 10_000, 10_010, Exclusive)).unwrap();
        assert_eq!(c.blocker(5_000, 5_010, Exclusive).map(|x| x.run), Some(1));
    }

    #[test]
    fn placing_finds_the_first_common_slot_or_names_who_is_busy() {
        let mut a = Calendar::new();
        let mut p = Calendar::new();
        a.book(b(1, 0, 100, Exclusive)).unwrap();
        p.book(b(2, 100, 250, Exclusive)).unwrap();
        // a is free from 100, the peer from 250.
        assert_eq!(place(&a, Some(&p), 0, 1000, 50, Exclusive), Ok(250));
        // A short slip: the peer's run is in the way, and says until when.
        assert_eq!(
            place(&a, Some(&p), 100, 50, 100, Exclusive),
            Err(NonStart::PeerBusy { run: 2, until: 250 })
        );
        assert_eq!(
            place(&a, Some(&p), 0, 10, 50, Exclusive),
            Err(NonStart::Busy { run: 1, until: 100 })
        );
        // Each has room, never at once.
        let mut x = Calendar::new();
        let mut y = Calendar::new();
        x.book(b(3, 0, 50, Exclusive)).unwrap();
        x.book(b(4, 100, 150, Exclusive)).unwrap();
        y.book(b(5, 50, 100, Exclusive)).unwrap();
        y.book(b(6, 150, 200, Exclusive)).unwrap();
        assert_eq!(place(&x, Some(&y), 0, 200, 50, Exclusive), Ok(200));
        assert_eq!(
            place(&x, Some(&y), 0, 100, 50, Exclusive),
            Err(NonStart::NoCommonSlot)
        );
        // Background always goes.
        assert_eq!(place(&x, Some(&y), 0, 0, 500, Background), Ok(0));
    }

    #[test]
    fn repeats_keep_their_limits_and_spread_the_same_way_everywhere() {
        let r = Repeat {
            start: 1000,
            every: 100,
            until: Some(1350),
            max_runs: None,
            slip: 40,
            sliprand: false,
            cron: None,
        };
        let times: Vec<_> = (0..10).map_while(|n| r.run(7, n)).collect();
        assert_eq!(times, vec![(1000, 40), (1100, 40), (1200, 40), (1300, 40)]);
        let capped = Repeat {
            max_runs: Some(2),
            ..r
        };
        assert_eq!((0..10).map_while(|n| capped.run(7, n)).count(), 2);
        let spread = Repeat { sliprand: true, ..r };
        for n in 0..4 {
            let (at, left) = spread.run(7, n).unwrap();
            let base = 1000 + 100 * n;
            assert!(at >= base && at <= base + 40 && at + left == base + 40);
            assert_eq!(spread.run(7, n), Some((at, left)), "the same on every agent");
        }
        assert_eq!(r.first_at_or_after(1000), 0);
        assert_eq!(r.first_at_or_after(1001), 1);
        assert_eq!(r.first_at_or_after(0), 0);
    }

    #[test]
    fn the_runs_missed_while_down_are_the_ones_due_then() {
        let r = Repeat {
            start: 0,
            every: 1000,
            until: None,
            max_runs: None,
            slip: 0,
            sliprand: false,
            cron: None,
        };
        assert_eq!(
            r.due_between(1, 2500, 5000, usize::MAX),
            vec![(3, 3000), (4, 4000)]
        );
        assert!(r.due_between(1, 5000, 5000, usize::MAX).is_empty());
        // A long absence: only the first `max` are listed.
        assert_eq!(
            r.due_between(1, 0, u64::MAX, 3),
            vec![(0, 0), (1, 1000), (2, 2000)]
        );
        // Spread runs are missed by their spread times, on every agent alike.
        let spread = Repeat {
            slip: 900,
            sliprand: true,
            cron: None,
            ..r
        };
        let missed = spread.due_between(42, 2000, 6000, usize::MAX);
        for (n, at) in &missed {
            assert!((2000..6000).contains(at));
            assert_eq!(spread.run(42, *n).map(|x| x.0), Some(*at));
        }
        let all: Vec<u64> = (0..10).filter_map(|n| spread.run(42, n)).map(|x| x.0).collect();
        let expect: Vec<u64> = all.into_iter().filter(|t| (2000..6000).contains(t)).collect();
        assert_eq!(missed.iter().map(|x| x.1).collect::<Vec<_>>(), expect);
    }

    #[test]
    fn a_cron_schedule_numbers_its_runs_by_their_minutes() {
        let minute = 60_000;
        let r = Repeat {
            cron: Some("*/10 * * * *".parse().unwrap()),
            ..Repeat::every(0, 0)
        };
        // From 00:03 the next runs are at 00:10 and 00:20.
        let n = r.first_at_or_after(3 * minute);
        assert_eq!(r.run(1, n), Some((10 * minute, 0)));
        let n2 = r.next(n);
        assert_eq!(r.base(n2), Some(20 * minute));
        assert!(r.is_base(20 * minute) && !r.is_base(25 * minute) && !r.is_base(20 * minute + 1));
        let due = r.due_between(1, 0, 60 * minute, usize::MAX);
        assert_eq!(
            due.iter().map(|d| d.1).collect::<Vec<_>>(),
            (0..6).map(|i| i * 10 * minute).collect::<Vec<_>>()
        );
        // `start` and `until` bound it as they bound a repeat.
        let bounded = Repeat {
            start: 15 * minute,
            until: Some(40 * minute),
            ..r
        };
        let due = bounded.due_between(1, 0, 60 * minute, usize::MAX);
        assert_eq!(
            due.iter().map(|d| d.1).collect::<Vec<_>>(),
            vec![20 * minute, 30 * minute, 40 * minute]
        );
    }

    #[test]
    fn a_simulated_mesh_never_overlaps_exclusive_runs() {
        // 12 hosts, every ordered pair every 30 min for 20 s, slipping up
        // to the next run, one day: each host is in 22 runs of 20 s per
        // 30 min, 24% busy. (Every `book` refuses an overlap: the
        // simulation would panic on one.)
        let r = simulate_mesh(12, 1_800_000, 20_000, 1_780_000, 1);
        assert_eq!(r.runs, 12 * 11 * 48);
        assert_eq!(r.background_runs, 12 * 11);
        assert!(r.non_starts * 100 <= r.runs, "{r:?}");
        let placed = (r.runs - r.non_starts) as f64;
        let expect = placed * 2.0 * 20.0 / (12.0 * 86_400.0);
        assert!((r.occupancy - expect).abs() < 1e-9, "{r:?}");
        assert!(r.fairness > 0.99, "{r:?}");
    }
}
