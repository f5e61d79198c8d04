//! The wall clock the agent schedules by, and what the kernel says of its
//! synchronisation.

use serde::Serialize;

/// Milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The kernel's view of the clock (adjtimex): whether an NTP daemon keeps
/// it synchronised, and its estimated error.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub(crate) struct ClockState {
    /// The kernel's clock is marked synchronised.
    pub(crate) synchronised: bool,
    /// Its estimated error, microseconds (as the NTP daemon set it).
    pub(crate) estimated_error_us: i64,
    /// Its maximum error, microseconds.
    pub(crate) maximum_error_us: i64,
}

pub(crate) fn state() -> ClockState {
    // SAFETY: adjtimex with modes 0 only reads; the struct is zeroed.
    let mut tx: libc::timex = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::adjtimex(&mut tx) };
    ClockState {
        synchronised: rc >= 0 && rc != libc::TIME_ERROR && tx.status & libc::STA_UNSYNC == 0,
        estimated_error_us: tx.esterror,
        maximum_error_us: tx.maxerror,
    }
}

/// A change of the wall clock larger than this, against the monotonic
/// clock over the same time, is a step (an NTP daemon slews smaller
/// offsets, and a late tick moves both clocks alike).
pub(crate) const STEP_MS: i64 = 1_000;

/// Watches the wall clock against the monotonic one: each `check` says
/// by how much the wall clock moved more (forward, > 0) or less (back,
/// < 0) than the time that really passed since the last one.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StepWatch {
    wall_ms: u64,
    mono: std::time::Instant,
}

impl StepWatch {
    pub(crate) fn new() -> Self {
        Self {
            wall_ms: now_ms(),
            mono: std::time::Instant::now(),
        }
    }

    /// The step since the last check, if there was one larger than
    /// [`STEP_MS`], and the wall clock now.
    pub(crate) fn check(&mut self) -> (Option<i64>, u64) {
        let mono = std::time::Instant::now();
        let wall = now_ms();
        let passed = mono.duration_since(self.mono).as_millis().min(i64::MAX as u128) as i64;
        let moved = wall as i64 - self.wall_ms as i64;
        self.mono = mono;
        self.wall_ms = wall;
        let step = moved.saturating_sub(passed);
        (step.abs().gt(&STEP_MS).then_some(step), wall)
    }
}

/// The wall clock's steps the agent saw since it started (health shows
/// them). The wall clock is the process's, so this record is too.
#[derive(Debug, Clone, Default, Serialize, schemars::JsonSchema)]
pub(crate) struct Steps {
    /// Steps seen (either way).
    pub(crate) count: u64,
    /// The last: when it was seen (RFC 3339, on the clock after the
    /// step) and by how much the clock moved, ms (negative: back).
    pub(crate) last_at: Option<String>,
    pub(crate) last_ms: Option<i64>,
}

fn steps_cell() -> &'static std::sync::Mutex<Steps> {
    static STEPS: std::sync::OnceLock<std::sync::Mutex<Steps>> = std::sync::OnceLock::new();
    STEPS.get_or_init(Default::default)
}

/// Records a step seen at `at_ms` (the wall clock after it).
pub(crate) fn note_step(step_ms: i64, at_ms: u64) {
    let mut s = steps_cell().lock().unwrap_or_else(|p| p.into_inner());
    s.count += 1;
    s.last_at = Some(goodput_core::time::ms_rfc3339(at_ms));
    s.last_ms = Some(step_ms);
}

/// The steps seen so far.
pub(crate) fn steps() -> Steps {
    steps_cell().lock().unwrap_or_else(|p| p.into_inner()).clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_watch_sees_no_step_when_both_clocks_move_alike() {
        let mut w = StepWatch::new();
        std::thread::sleep(std::time::Duration::from_millis(30));
        assert_eq!(w.check().0, None);
        // A wall clock read an hour ago (as after a step forward).
        w.wall_ms -= 3_600_000;
        let step = w.check().0.expect("a step");
        assert!((3_599_000..=3_600_100).contains(&step), "{step}");
        // And an hour ahead (a step back).
        w.wall_ms += 3_600_000;
        let step = w.check().0.expect("a step");
        assert!((-3_600_100..=-3_599_000).contains(&step), "{step}");
        assert_eq!(w.check().0, None);
    }
}
