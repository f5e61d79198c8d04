//! What a requester (a peer agent, or a client asking for a run) may ask
//! of this agent. Every refusal names the limit that refused it.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::time::Duration;

use goodput_core::schedule::RunClass;
use goodput_core::spec::TestSpec;
use goodput_core::stamp::Cidr;

/// The agent's limits.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Addresses that may book runs or ask for them (empty: any address
    /// that has the token).
    pub allow: Vec<Cidr>,
    /// Most runs booked by others that this agent holds at once.
    pub max_held: usize,
    /// Most runs under way on this host at once, background streams
    /// aside.
    pub max_running: usize,
    /// Most background runs (STAMP and OWAMP streams, a few small packets
    /// a second each) under way on this host at once: a mesh's hosts each
    /// keep one to every other, so they have slots of their own.
    pub max_background: usize,
    /// Most runs one requester may book in an hour.
    pub runs_per_hour: u32,
    /// Most seconds of exclusive time one requester may book in a day.
    pub exclusive_s_per_day: u64,
    /// Longest run accepted.
    pub max_duration: Duration,
    /// Largest request body, bytes.
    pub max_body: usize,
    /// Most API requests handled at once (the rest are turned away).
    pub max_requests: usize,
    /// Times of day when requesters from some addresses may book
    /// exclusive runs.
    pub windows: Vec<Window>,
    /// The highest rate an on-demand run of a kind may ask for, bits/s
    /// (a kind not listed: any).
    pub max_bitrate: Vec<(goodput_core::kind::Kind, u64)>,
    /// Most records one requester may write a minute: results handed
    /// over (`PUT /api/v1/runs/…`), pScheduler results, registrations.
    pub writes_per_minute: u32,
    /// Most forwarded runs one requester may send a fleet archive a
    /// minute.
    pub ingest_per_minute: u32,
}

/// Exclusive runs booked from `from` must lie within `[start, end)` of a
/// UTC day (an end before the start spans midnight).
#[derive(Debug, Clone, PartialEq)]
pub struct Window {
    /// The requesters it applies to.
    pub from: Cidr,
    /// Its start, minutes after midnight UTC.
    pub start_min: u32,
    /// Its end, minutes after midnight UTC.
    pub end_min: u32,
}

impl std::str::FromStr for Window {
    type Err = String;
    /// `CIDR=HH:MM-HH:MM`.
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("'{s}': expected CIDR=HH:MM-HH:MM (UTC), e.g. 10.0.0.0/8=00:00-06:00");
        let (cidr, times) = s.split_once('=').ok_or_else(bad)?;
        let (a, b) = times.split_once('-').ok_or_else(bad)?;
        let minutes = |t: &str| -> Result<u32, String> {
            let (h, m) = t.trim().split_once(':').ok_or_else(bad)?;
            let (h, m): (u32, u32) = (h.parse().map_err(|_| bad())?, m.parse().map_err(|_| bad())?);
            if h > 24 || m > 59 || (h == 24 && m > 0) {
                return Err(bad());
            }
            Ok(h * 60 + m)
        };
        let w = Window {
            from: cidr.trim().parse()?,
            start_min: minutes(a)?,
            end_min: minutes(b)?,
        };
        if w.start_min == w.end_min {
            return Err(format!("'{s}': the window is empty"));
        }
        Ok(w)
    }
}

impl Window {
    /// Whether `[start, end)` (ms since the Unix epoch) lies inside one of
    /// the window's daily spans.
    fn holds(&self, start: u64, end: u64) -> bool {
        const DAY: u64 = 86_400_000;
        let (s, e) = (
            u64::from(self.start_min) * 60_000,
            u64::from(self.end_min) * 60_000,
        );
        // The span that contains `start`, today's or yesterday's.
        let day = start / DAY * DAY;
        let at = |d: u64, t: u64| d.saturating_add(t);
        let spans = if s < e {
            vec![(at(day, s), at(day, e))]
        } else {
            vec![
                (at(day.saturating_sub(DAY), s), at(day, e)),
                (at(day, s), at(day.saturating_add(DAY), e)),
            ]
        };
        spans.iter().any(|&(a, b)| a <= start && end <= b)
    }
}

fn hhmm(min: u32) -> String {
    format!("{:02}:{:02}", min / 60, min % 60)
}

impl Limits {
    /// An on-demand run faster than its kind's `max_bitrate` is refused,
    /// naming the limit; one with no rate of its own counts as unlimited.
    pub(crate) fn check_bitrate(&self, spec: &TestSpec) -> Result<(), String> {
        let kind = spec.kind();
        let Some((_, max)) = self.max_bitrate.iter().find(|(k, _)| *k == kind) else {
            return Ok(());
        };
        let rate = |b: u64| goodput_core::units::format_bits_per_second(b as f64 / 8.0);
        match spec.bitrate() {
            Some(b) if b <= *max => Ok(()),
            Some(b) => Err(format!(
                "limit max_bitrate: a {kind} run of {} is over the {} this agent allows for {kind}",
                rate(b),
                rate(*max)
            )),
            None => Err(format!(
                "limit max_bitrate: a {kind} run here must ask for a rate of at most {}",
                rate(*max)
            )),
        }
    }

    /// An exclusive run for `who` in `[start, end)` outside its window is
    /// refused, naming the window.
    pub(crate) fn check_window(
        &self,
        who: IpAddr,
        start: u64,
        end: u64,
        class: RunClass,
    ) -> Result<(), String> {
        if class != RunClass::Exclusive {
            return Ok(());
        }
        let mine: Vec<&Window> = self.windows.iter().filter(|w| w.from.contains(who)).collect();
        if mine.is_empty() || mine.iter().any(|w| w.holds(start, end)) {
            return Ok(());
        }
        let spans: Vec<String> = mine
            .iter()
            .map(|w| format!("{}–{}", hhmm(w.start_min), hhmm(w.end_min)))
            .collect();
        Err(format!(
            "limit window: exclusive runs from {who} only {} UTC; this one is {}–{}",
            spans.join(", "),
            goodput_core::time::ms_rfc3339(start),
            goodput_core::time::ms_rfc3339(end)
        ))
    }
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            allow: Vec::new(),
            max_held: 1000,
            max_running: 32,
            // A stream to and from every other host of a 500-host mesh,
            // with room for a second mesh beside it.
            max_background: 1024,
            runs_per_hour: 720,
            exclusive_s_per_day: 6 * 3600,
            max_duration: Duration::from_secs(3600),
            max_body: 4 << 20,
            max_requests: 64,
            windows: Vec::new(),
            max_bitrate: Vec::new(),
            // A peer hands over one record per run it shares with this
            // host: 600 a minute is a run a second to each of ten
            // destinations, far beyond a mesh's schedule, and a forger's
            // flood (1,500 a second) is cut to 10 a second.
            writes_per_minute: 600,
            // A forwarder catching up after an outage sends batches of
            // 500: 60,000 a minute clears a day's backlog of a busy agent
            // (144,000 per-minute rows) in under three minutes.
            ingest_per_minute: 60_000,
        }
    }
}

/// Which of a requester's quotas a booking is charged to. A peer's mesh
/// runs (checked against this agent's own configuration: their task,
/// pair and time) and the on-demand runs it books for its clients are
/// counted apart, so a client who uses up the on-demand runs a peer may
/// book here never stops that peer's scheduled runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Bucket {
    /// Runs of the mesh's configured tasks.
    Mesh,
    /// Runs asked for through the API (`on-demand/…`).
    OnDemand,
}

/// What each requester has booked lately.
#[derive(Debug, Default)]
pub(crate) struct Quotas {
    /// Per requester and bucket: each booking's time and exclusive
    /// milliseconds.
    seen: HashMap<(IpAddr, Bucket), VecDeque<(u64, u64)>>,
}

/// Most requesters tracked; beyond it the quiet ones are forgotten first.
const MAX_REQUESTERS: usize = 10_000;
const DAY: u64 = 86_400_000;

impl Quotas {
    /// Books one run of `class` lasting `ms` for `who` at `now`, or names
    /// the limit it would pass.
    pub(crate) fn take(
        &mut self,
        limits: &Limits,
        (who, bucket): (IpAddr, Bucket),
        now: u64,
        class: RunClass,
        ms: u64,
    ) -> Result<(), String> {
        if Duration::from_millis(ms) > limits.max_duration {
            return Err(format!(
                "limit max_duration: a run of {} s is longer than the {} s this agent accepts",
                ms / 1000,
                limits.max_duration.as_secs()
            ));
        }
        if self.seen.len() >= MAX_REQUESTERS && !self.seen.contains_key(&(who, bucket)) {
            self.seen
                .retain(|_, v| v.back().is_some_and(|(t, _)| now.saturating_sub(*t) < DAY));
        }
        let what = match bucket {
            Bucket::Mesh => "",
            Bucket::OnDemand => "on-demand ",
        };
        let v = self.seen.entry((who, bucket)).or_default();
        while v.front().is_some_and(|(t, _)| now.saturating_sub(*t) >= DAY) {
            v.pop_front();
        }
        let last_hour = v
            .iter()
            .filter(|(t, _)| now.saturating_sub(*t) < 3_600_000)
            .count();
        if last_hour >= limits.runs_per_hour as usize {
            return Err(format!(
                "limit runs_per_hour: {who} booked {last_hour} {what}runs in the last hour, {} allowed",
                limits.runs_per_hour
            ));
        }
        let exclusive = if class == RunClass::Exclusive { ms } else { 0 };
        let used: u64 = v.iter().map(|(_, e)| e).sum();
        if used.saturating_add(exclusive) > limits.exclusive_s_per_day.saturating_mul(1000) {
            return Err(format!(
                "limit exclusive_s_per_day: {who} booked {} s of exclusive {what}time in the last day, {} s allowed",
                used / 1000,
                limits.exclusive_s_per_day
            ));
        }
        v.push_back((now, exclusive));
        Ok(())
    }
}

/// What a write is, for its quota.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Write {
    /// A run's record handed over by its other end (`PUT /api/v1/runs`).
    Result,
    /// A perfSONAR pScheduler result (`/api/v1/archive/pscheduler`).
    PScheduler,
    /// A fleet registration (`PUT /api/v1/fleet/agents/…`).
    Registration,
    /// Runs forwarded to a fleet archive (`POST /api/v1/archive/runs`),
    /// counted one by one.
    Ingest,
}

/// A requester's allowance of one kind of write: a token bucket that
/// holds a minute's worth and fills again at that rate.
#[derive(Debug, Clone, Copy)]
struct Allowance {
    tokens: f64,
    at_ms: u64,
}

/// Each requester's write quotas (O(1) memory per requester and kind).
#[derive(Debug, Default)]
pub(crate) struct Writes {
    seen: HashMap<(IpAddr, Write), Allowance>,
}

impl Writes {
    /// Takes `n` writes of `kind` for `who` at `now`, or names the limit
    /// that refuses them (none is taken then).
    pub(crate) fn take(
        &mut self,
        limits: &Limits,
        who: IpAddr,
        kind: Write,
        n: u64,
        now: u64,
    ) -> Result<(), String> {
        let (per_minute, name) = match kind {
            Write::Ingest => (limits.ingest_per_minute, "ingest_per_minute"),
            _ => (limits.writes_per_minute, "writes_per_minute"),
        };
        let full = f64::from(per_minute);
        let fill = |a: &Allowance| {
            let ms = now.saturating_sub(a.at_ms) as f64;
            (a.tokens + ms * full / 60_000.0).min(full)
        };
        if self.seen.len() >= MAX_REQUESTERS && !self.seen.contains_key(&(who, kind)) {
            // Requesters whose allowance is whole again are forgotten.
            self.seen.retain(|_, a| fill(a) < full);
            if self.seen.len() >= MAX_REQUESTERS {
                return Err(format!(
                    "limit {name}: {MAX_REQUESTERS} requesters are writing at once; try again in a minute"
                ));
            }
        }
        let a = self.seen.entry((who, kind)).or_insert(Allowance {
            tokens: full,
            at_ms: now,
        });
        let have = fill(a);
        a.tokens = have;
        a.at_ms = now.max(a.at_ms);
        if (n as f64) > have {
            let what = match kind {
                Write::Ingest => "forwarded runs",
                Write::Result => "results",
                Write::PScheduler => "pScheduler results",
                Write::Registration => "registrations",
            };
            return Err(format!(
                "limit {name}: {who} is over its {per_minute} {what} a minute (this request has {n}, {} left now)",
                have.floor()
            ));
        }
        a.tokens = have - n as f64;
        Ok(())
    }
}

/// What the API's connections may take.
#[derive(Debug, Clone)]
pub struct ConnLimits {
    /// Most connections open at once (also held below half the process's
    /// descriptor limit, so runs keep theirs).
    pub max_connections: usize,
    /// Most connections one source address may hold at once.
    pub per_address: usize,
    /// Most requests of one source address handled at once.
    pub requests_per_address: usize,
    /// Longest wait for a request's headers, the first and each next one
    /// on a kept-alive connection (so also the longest idle time).
    pub header_timeout: Duration,
    /// Longest wait for a request body before the time its size earns at
    /// `body_min_rate`.
    pub body_timeout: Duration,
    /// Slowest body accepted, bytes/s (a body of N bytes has
    /// `body_timeout + N / body_min_rate` to arrive).
    pub body_min_rate: u64,
    /// Longest a write of an answer may make no progress.
    pub write_stall: Duration,
}

impl Default for ConnLimits {
    fn default() -> Self {
        Self {
            max_connections: 1024,
            per_address: 32,
            requests_per_address: 8,
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(10),
            body_min_rate: 64 * 1024,
            write_stall: Duration::from_secs(30),
        }
    }
}

impl ConnLimits {
    /// The connection cap in force: the configured one, but at most half
    /// the descriptors this process may open (runs and the archive need the
    /// rest).
    pub(crate) fn effective_max(&self) -> usize {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes into the struct it is given.
        let nofile = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 {
            usize::try_from(lim.rlim_cur).unwrap_or(usize::MAX)
        } else {
            1024
        };
        self.max_connections.min(nofile / 2).max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_admit_exclusive_runs_only_inside_them() {
        let night: Window = "10.0.0.0/8=22:00-06:00".parse().unwrap();
        let day: Window = "192.0.2.0/24=09:00-17:30".parse().unwrap();
        let limits = Limits {
            windows: vec![night, day],
            ..Limits::default()
        };
        let at = |h: u64, m: u64| 20_000 * 86_400_000 + (h * 60 + m) * 60_000;
        let lab: IpAddr = "10.1.2.3".parse().unwrap();
        let office: IpAddr = "192.0.2.9".parse().unwrap();
        let other: IpAddr = "198.51.100.1".parse().unwrap();
        let x = RunClass::Exclusive;
        // Across midnight, both sides of it.
        assert!(limits.check_window(lab, at(23, 0), at(23, 1), x).is_ok());
        assert!(limits.check_window(lab, at(1, 0), at(1, 1), x).is_ok());
        assert!(limits.check_window(lab, at(23, 59), at(24, 1), x).is_ok());
        let e = limits.check_window(lab, at(5, 59), at(6, 1), x).unwrap_err();
        assert!(
            e.starts_with("limit window: exclusive runs from 10.1.2.3 only 22:00–06:00 UTC"),
            "{e}"
        );
        assert!(limits.check_window(lab, at(12, 0), at(12, 1), x).is_err());
        // Background and normal runs are not held to it.
        assert!(limits
            .check_window(lab, at(12, 0), at(12, 1), RunClass::Background)
            .is_ok());
        assert!(limits.check_window(office, at(9, 0), at(17, 30), x).is_ok());
        assert!(limits.check_window(office, at(17, 29), at(17, 31), x).is_err());
        // Addresses no window names are not limited.
        assert!(limits.check_window(other, at(12, 0), at(12, 1), x).is_ok());
        for bad in [
            "10.0.0.0/8",
            "10.0.0.0/8=25:00-01:00",
            "10.0.0.0/8=01:00-01:00",
            "x=01:00-02:00",
        ] {
            assert!(bad.parse::<Window>().is_err(), "{bad}");
        }
    }

    #[test]
    fn on_demand_rates_are_held_to_their_kinds_limit() {
        use goodput_core::kind::Kind;
        let limits = Limits {
            max_bitrate: vec![(Kind::Udp, 100_000_000), (Kind::Tcp, 50_000_000)],
            ..Limits::default()
        };
        let spec = |v: serde_json::Value| goodput_core::spec::read_one(v).unwrap();
        let udp = |rate: &str| spec(serde_json::json!({"kind": "udp", "host": "192.0.2.1", "bitrate": rate}));
        assert!(limits.check_bitrate(&udp("100Mbit")).is_ok());
        let e = limits.check_bitrate(&udp("200Mbit")).unwrap_err();
        assert!(e.starts_with("limit max_bitrate: a udp run of 200"), "{e}");
        // TCP with no rate of its own is unlimited: refused where limited.
        let tcp = spec(serde_json::json!({"kind": "tcp", "hosts": ["192.0.2.1"]}));
        let e = limits.check_bitrate(&tcp).unwrap_err();
        assert!(e.contains("must ask for a rate of at most 50"), "{e}");
        // Kinds not listed are not limited.
        let stamp = spec(serde_json::json!({"kind": "stamp", "host": "192.0.2.1"}));
        assert!(limits.check_bitrate(&stamp).is_ok());
    }

    #[test]
    fn each_quota_refuses_with_its_name() {
        let limits = Limits {
            runs_per_hour: 3,
            exclusive_s_per_day: 25,
            max_duration: Duration::from_secs(60),
            ..Limits::default()
        };
        let who: IpAddr = "10.0.0.9".parse().unwrap();
        let who = (who, Bucket::Mesh);
        let mut q = Quotas::default();
        let e = q.take(&limits, who, 0, RunClass::Normal, 61_000).unwrap_err();
        assert!(e.starts_with("limit max_duration"), "{e}");
        for i in 0..3 {
            q.take(&limits, who, i, RunClass::Normal, 1000).unwrap();
        }
        let e = q.take(&limits, who, 10, RunClass::Normal, 1000).unwrap_err();
        assert!(e.starts_with("limit runs_per_hour"), "{e}");
        // An hour later the hour's count is clear, the day's time is not.
        let hour = 3_600_000;
        q.take(&limits, who, hour, RunClass::Exclusive, 20_000).unwrap();
        let e = q
            .take(&limits, who, hour + 1, RunClass::Exclusive, 10_000)
            .unwrap_err();
        assert!(e.starts_with("limit exclusive_s_per_day"), "{e}");
        // Another requester has its own.
        q.take(
            &limits,
            ("10.0.0.8".parse().unwrap(), Bucket::Mesh),
            hour,
            RunClass::Exclusive,
            20_000,
        )
        .unwrap();
        // And its on-demand runs have their own: using them up leaves
        // its mesh runs bookable, and the other way round.
        let od = (who.0, Bucket::OnDemand);
        for i in 0..3 {
            q.take(&limits, od, hour + 10 + i, RunClass::Normal, 1000)
                .unwrap();
        }
        let e = q
            .take(&limits, od, hour + 20, RunClass::Normal, 1000)
            .unwrap_err();
        assert!(
            e.starts_with("limit runs_per_hour: 10.0.0.9 booked 3 on-demand runs in the last hour"),
            "{e}"
        );
        q.take(&limits, who, hour + 21, RunClass::Normal, 1000).unwrap();
        // A day on, all is clear.
        q.take(&limits, who, hour + DAY, RunClass::Exclusive, 20_000)
            .unwrap();
    }

    #[test]
    fn writes_are_held_to_a_minute_s_allowance() {
        let limits = Limits {
            writes_per_minute: 60,
            ingest_per_minute: 1000,
            ..Limits::default()
        };
        let who: IpAddr = "10.0.0.9".parse().unwrap();
        let mut w = Writes::default();
        // A minute's worth at once, then nothing.
        for i in 0..60 {
            w.take(&limits, who, Write::Result, 1, 1000 + i).unwrap();
        }
        let e = w.take(&limits, who, Write::Result, 1, 1100).unwrap_err();
        assert!(
            e.starts_with("limit writes_per_minute: 10.0.0.9 is over its 60 results a minute"),
            "{e}"
        );
        // One a second comes back.
        w.take(&limits, who, Write::Result, 1, 2100).unwrap();
        assert!(w.take(&limits, who, Write::Result, 1, 2200).is_err());
        // Other kinds and other requesters have their own.
        w.take(&limits, who, Write::Registration, 1, 2200).unwrap();
        w.take(&limits, "10.0.0.8".parse().unwrap(), Write::Result, 60, 2200)
            .unwrap();
        // A batch is taken whole or not at all.
        w.take(&limits, who, Write::Ingest, 600, 0).unwrap();
        let e = w.take(&limits, who, Write::Ingest, 500, 0).unwrap_err();
        assert!(e.starts_with("limit ingest_per_minute"), "{e}");
        w.take(&limits, who, Write::Ingest, 400, 0).unwrap();
    }
}
