//! What every command shares: exit statuses, the runtime, signals, the
//! embedded loopback server, name resolution and the spec helpers.

pub(crate) mod agent;
pub(crate) mod check;
pub(crate) mod dns;
pub(crate) mod echo;
pub(crate) mod http;
pub(crate) mod iperf3;
pub(crate) mod ndt7;
pub(crate) mod owamp;
pub(crate) mod path;
pub(crate) mod quic;
pub(crate) mod report;
pub(crate) mod run;
pub(crate) mod server;
pub(crate) mod stamp;
pub(crate) mod tcp;
pub(crate) mod ttcp;
pub(crate) mod udp;
pub(crate) mod views;

use crate::flags::ViewArgs;
use anyhow::{anyhow, Context};
use goodput_core::kind::KindSpec;
use goodput_core::result::{EndReason, TestResult};
use goodput_core::spec::{SpecError, TestSpec};
use goodput_engine::run::RunContext;
use goodput_engine::CancellationToken;

pub(crate) use goodput_engine::run::socket_room;

/// A host and port from `HOST[:PORT]` or `[v6]:PORT`; a bad port is a usage
/// error.
pub(crate) fn split_target(t: &str, default_port: u16) -> Result<(String, u16), Stop> {
    goodput_engine::run::split_target(t, default_port).map_err(usage)
}

/// Exit status: every connection succeeded.
pub(crate) const EXIT_OK: u8 = 0;

/// Exit status: at least one connection failed (network or data error).
pub(crate) const EXIT_FAILED: u8 = 1;

/// Exit status: invalid flags or values (clap uses it too).
pub(crate) const EXIT_USAGE: u8 = 2;

/// Exit status: the run could not start or could not write its outputs.
pub(crate) const EXIT_FATAL: u8 = 3;

/// Exit status: interrupted by SIGINT/SIGTERM (after the summary and files).
pub(crate) const EXIT_INTERRUPTED: u8 = 130;

/// Exit status: the run ended without failures, but an `--assert` did not
/// hold.
pub(crate) const EXIT_ASSERTION: u8 = 4;

/// Why the program stops early.
pub(crate) enum Stop {
    /// Bad flags or values (exit 2).
    Usage(String),
    /// The run could not start or failed outside any connection (exit 3);
    /// its `--json` gets a result ended `failed`.
    Fatal(anyhow::Error),
    /// One of the command's own output files cannot be opened or written
    /// (exit 3); no result document is written for it.
    Output(anyhow::Error),
    /// The run ended and was reported already: exit with this status.
    Exit(u8),
}

impl From<anyhow::Error> for Stop {
    fn from(e: anyhow::Error) -> Self {
        Stop::Fatal(e)
    }
}

pub(crate) fn usage(msg: impl Into<String>) -> Stop {
    Stop::Usage(msg.into())
}

/// A client's exit status: failed (even if interrupted too), interrupted,
/// an assertion that did not hold, or fine.
pub(crate) fn exit_status(result: &TestResult, failed: bool) -> u8 {
    match exit_code(result.end == EndReason::Interrupted, failed) {
        EXIT_OK if result.assertions.iter().any(|a| !a.passed) => EXIT_ASSERTION,
        code => code,
    }
}

/// A failure wins over an interruption: the exit status 130
/// (docs/guide/outputs.md) means "stopped, nothing failed".
pub(crate) fn exit_code(interrupted: bool, failed: bool) -> u8 {
    match (interrupted, failed) {
        (_, true) => EXIT_FAILED,
        (true, false) => EXIT_INTERRUPTED,
        (false, false) => EXIT_OK,
    }
}

pub(crate) fn runtime() -> Result<tokio::runtime::Runtime, Stop> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
        .map_err(Stop::Fatal)
}

/// Runs a command's future as a task on the runtime's workers rather than on
/// the main thread: the run loop then wakes (on every record, every freed
/// connection slot) as a task on a busy worker, not by a futex call that
/// unparks the main thread.
pub(crate) fn on_worker<F>(rt: &tokio::runtime::Runtime, fut: F) -> Result<u8, Stop>
where
    F: std::future::Future<Output = Result<u8, Stop>> + Send + 'static,
{
    rt.block_on(rt.spawn(fut))
        .unwrap_or_else(|e| Err(Stop::Fatal(anyhow::anyhow!("the run stopped abnormally: {e}"))))
}

/// Cancels `cancel` on the first SIGINT or SIGTERM; a second one exits at once.
pub(crate) fn watch_signals(cancel: CancellationToken) {
    tokio::spawn(async move {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(s) => s,
            Err(_) => return,
        };
        for round in 0..2 {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            if round == 0 {
                cancel.cancel();
            } else {
                eprintln!("goodput: second signal, exiting without waiting");
                std::process::exit(i32::from(EXIT_INTERRUPTED));
            }
        }
    });
}

/// Fails a run whose `flag` asks for more sockets than the open-file
/// limit allows.
pub(crate) fn check_socket_room(flag: &str, wanted: u64) -> Result<(), Stop> {
    match socket_room(1) {
        Some((room, limit)) if wanted > room => Err(usage(format!(
            "{flag} {wanted} needs a socket each; the open-file limit (RLIMIT_NOFILE) is {limit}"
        ))),
        _ => Ok(()),
    }
}

/// A spec's error in the flags' words: `tcp.connections` is
/// `--connections`, `socket.dscp` is `--dscp`, and a field a message names
/// (`` `rate_period` ``) is its flag too. An error of several fields
/// (`bitrate/frame_rate`) names their flags, then a colon.
pub(crate) fn flag_error(e: &SpecError) -> Stop {
    flag_error_as(e, long_flag)
}

/// A field's long flag: `socket.send_buffer` is `--send-buffer`.
pub(crate) fn long_flag(field: &str) -> String {
    format!(
        "--{}",
        field.rsplit('.').next().unwrap_or(field).replace('_', "-")
    )
}

/// A spec's error in the flags' words, each field named by `flag`.
pub(crate) fn flag_error_as(e: &SpecError, flag: impl Fn(&str) -> String) -> Stop {
    let field = e.field.split_once('.').map_or(e.field.as_str(), |(_, f)| f);
    let message = named_by(&e.message, &flag);
    // The host is a positional argument: its errors need no flag.
    if field.is_empty() || field == "host" || field == "hosts" {
        return usage(message);
    }
    if field.contains('/') {
        let flags: Vec<String> = field.split('/').map(flag).collect();
        return usage(format!("{}: {message}", flags.join("/")));
    }
    usage(format!("{} {message}", flag(field)))
}

/// A message from the engine in the flags' words: each spec field it
/// names in backquotes (`` `time_limit` ``) becomes its flag (`--time-limit`).
pub(crate) fn in_flags(message: &str) -> String {
    named_by(message, long_flag)
}

fn named_by(message: &str, flag: impl Fn(&str) -> String) -> String {
    let mut message = message.to_owned();
    let mut from = 0;
    while let Some(i) = message[from..].find('`').map(|i| i + from) {
        let Some(j) = message[i + 1..].find('`') else {
            break;
        };
        let field = &message[i + 1..i + 1 + j];
        // A command to run (`goodput server --tcp`) is not a field.
        if field.contains(' ') {
            from = i + 2 + j;
            continue;
        }
        let name = flag(field);
        message.replace_range(i..i + 2 + j, &name);
        from = i + name.len();
    }
    message
}

/// A command's path from its flags: the spec they describe is validated
/// (its errors in the flags' words, by `words`), then printed as a document
/// (`--print-spec`) or run as `goodput run` runs it.
pub(crate) async fn from_flags<S: KindSpec>(
    spec: S,
    words: impl Fn(&SpecError) -> Stop,
    print: bool,
    views: &ViewArgs,
    extras: &run::Extras<'_>,
) -> Result<u8, Stop> {
    spec.validate().map_err(|e| words(&e))?;
    run::print_or_run(spec.into(), print, views, extras).await
}

/// The common end of a kind's run: the engine runs the document into the
/// views, the views finish (summary, files, `--json`), and the exit status
/// tells whether `failed` holds of the result.
pub(crate) async fn run_and_report(
    document: TestSpec,
    context: RunContext,
    mut views: views::Views,
    out: &ViewArgs,
    failed: impl FnOnce(&TestResult) -> bool,
) -> Result<u8, Stop> {
    let result = run::engine_run(&document, context, &mut views, out).await?;
    views.finish(&result, out.json.as_deref())?;
    Ok(exit_status(&result, failed(&result)))
}

/// Prints a spec as the JSON document `goodput run` reads.
pub(crate) fn print_spec(spec: &TestSpec) -> Result<(), Stop> {
    let text = serde_json::to_string_pretty(spec).map_err(|e| Stop::Fatal(anyhow!(e)))?;
    goodput_report::console_line(&text);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_wins_over_an_interruption() {
        assert_eq!(exit_code(true, true), 1);
        assert_eq!(exit_code(true, false), 130);
        assert_eq!(exit_code(false, true), 1);
        assert_eq!(exit_code(false, false), 0);
    }

    #[test]
    fn engine_messages_name_flags() {
        assert_eq!(
            in_flags("`connections` 9 capped; use `ca` FILE or `socket.send_buffer`"),
            "--connections 9 capped; use --ca FILE or --send-buffer"
        );
        assert_eq!(in_flags("an odd ` quote"), "an odd ` quote");
        assert_eq!(in_flags("no names"), "no names");
        assert_eq!(
            in_flags("start `goodput server --tcp` there, with `port`"),
            "start `goodput server --tcp` there, with --port"
        );
    }
}
