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
