//! What a requester (a peer agent, or a client asking for a run) may ask
//! of this agent. Every refusal names the limit that refused it.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::time::Duration;

use goodput_core::schedule::RunClass;
use goodput_core::stamp::Cidr;

/// The agent's limits.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Addresses that may book runs or ask for them (empty: any address
    /// that has the token).
    pub allow: Vec<Cidr>,
    /// Most runs booked by others that this agent holds at once.
    pub max_held: usize,
    /// Most runs under way on this host at once.
    pub max_running: usize,
    /// Most runs one requester may book in an hour.
    pub runs_per_hour: u32,
    /// Most seconds of exclusive time one requester may book in a day.
    pub exclusive_s_per_day: u64,
    /// Longest run accepted.
    pub max_duration: Duration,
    /// Largest request body, bytes.
    pub max_body: usize,
    /// Most API requests handled at once (the rest wait).
    pub max_requests: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            allow: Vec::new(),
            max_held: 1000,
            max_running: 32,
            runs_per_hour: 720,
            exclusive_s_per_day: 6 * 3600,
            max_duration: Duration::from_secs(3600),
            max_body: 1 << 20,
            max_requests: 64,
        }
    }
}

/// What each requester has booked lately.
#[derive(Debug, Default)]
pub(crate) struct Quotas {
    /// Per requester: each booking's time and exclusive milliseconds.
    seen: HashMap<IpAddr, VecDeque<(u64, u64)>>,
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
        who: IpAddr,
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
        if self.seen.len() >= MAX_REQUESTERS && !self.seen.contains_key(&who) {
            self.seen
                .retain(|_, v| v.back().is_some_and(|(t, _)| now.saturating_sub(*t) < DAY));
        }
        let v = self.seen.entry(who).or_default();
        while v.front().is_some_and(|(t, _)| now.saturating_sub(*t) >= DAY) {
            v.pop_front();
        }
        let last_hour = v
            .iter()
            .filter(|(t, _)| now.saturating_sub(*t) < 3_600_000)
            .count();
        if last_hour >= limits.runs_per_hour as usize {
            return Err(format!(
                "limit runs_per_hour: {who} booked {last_hour} runs in the last hour, {} allowed",
                limits.runs_per_hour
            ));
        }
        let exclusive = if class == RunClass::Exclusive { ms } else { 0 };
        let used: u64 = v.iter().map(|(_, e)| e).sum();
        if used.saturating_add(exclusive) > limits.exclusive_s_per_day.saturating_mul(1000) {
            return Err(format!(
                "limit exclusive_s_per_day: {who} booked {} s of exclusive time in the last day, {} s allowed",
                used / 1000,
                limits.exclusive_s_per_day
            ));
        }
        v.push_back((now, exclusive));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_quota_refuses_with_its_name() {
        let limits = Limits {
            runs_per_hour: 3,
            exclusive_s_per_day: 25,
            max_duration: Duration::from_secs(60),
            ..Limits::default()
        };
        let who: IpAddr = "10.0.0.9".parse().unwrap();
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
            "10.0.0.8".parse().unwrap(),
            hour,
            RunClass::Exclusive,
            20_000,
        )
        .unwrap();
        // A day on, all is clear.
        q.take(&limits, who, hour + DAY, RunClass::Exclusive, 20_000)
            .unwrap();
    }
}
