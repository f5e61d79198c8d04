//! The agent's log: one line per event on standard error, with the time,
//! and never a secret.

use crate::{clock, secrets};

/// A database URL without its password, for a log line.
pub(crate) fn redact(url: &str) -> String {
    secrets::redact_url(url)
}

/// A line for the agent's log (standard error, one line per event, with
/// the time).
pub(crate) fn log(line: &str) {
    let now = clock::now_ms();
    // Whatever a line quotes (an error with a URL in it), no secret is
    // written.
    eprintln!(
        "{} goodput agent: {}",
        goodput_core::time::ms_rfc3339(now),
        secrets::redact_text(line)
    );
}

/// A warning for the agent's log: something the operator should mend
/// (the line says `warning:` after the time, for a grep or a journal
/// filter).
pub(crate) fn warn(line: &str) {
    log(&format!("warning: {line}"));
}
