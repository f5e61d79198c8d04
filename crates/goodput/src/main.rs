//! The `goodput` command line: flags → specs, views, signals, exit codes.

mod cmd;
mod flags;
mod reference;

use crate::flags::{Cli, Command};
use anyhow::anyhow;
use clap::{Arg, ArgAction, CommandFactory, FromArgMatches};
use cmd::{
    agent, check, dns, echo, http, iperf3, ndt7, owamp, path, quic, report, run, server, stamp, tcp, ttcp,
    udp,
};
use cmd::{on_worker, runtime, usage, Stop, EXIT_FATAL, EXIT_OK, EXIT_USAGE};
use std::io;
use std::process::ExitCode;

/// jemalloc rather than glibc's malloc, for the memory each connection
/// costs: tokio aligns every task and every socket registration to 128
/// bytes, and glibc pays for each such allocation with a fragment it seldom
/// reuses (docs/benchmarks.md, "Memory": 1.25 against 0.81 KiB per
/// established connection on the client, same build).
#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options (its `malloc_conf`): one background thread gives
/// pages freed for a second back to the system, so the memory a burst of
/// connection setup used does not stay resident (by default jemalloc waits
/// ten seconds, and only purges while allocating).
#[cfg(feature = "jemalloc")]
#[export_name = "_rjem_malloc_conf"]
pub static MALLOC_CONF: &[u8; 85] =
    b"background_thread:true,max_background_threads:1,dirty_decay_ms:1000,muzzy_decay_ms:0\0";

/// The command line's definitions: the flags' own, and `man --markdown`.
fn definitions() -> clap::Command {
    // `--markdown` is added here rather than in `flags/` so the option
    // reference's generator stays beside the renderer it drives.
    Cli::command().mut_subcommand("man", |man| {
        man.arg(
            Arg::new("markdown")
                .long("markdown")
                .action(ArgAction::SetTrue)
                .help(
                    "Print the option reference of every command (or of COMMAND and \
                     the commands under it) as markdown instead: docs/reference/options.md",
                ),
        )
    })
}

fn main() -> ExitCode {
    // goodput prints its own lines and installs no logger. Without a
    // tracing dispatcher set, every span the libraries open (quinn opens
    // one per QUIC packet) is also formatted for the log crate, which
    // goes nowhere: about 3% of a QUIC server's instructions. A no-op
    // dispatcher ends that.
    let _ = tracing::subscriber::set_global_default(tracing::subscriber::NoSubscriber::default());
    let parsed = definitions()
        .try_get_matches()
        .and_then(|m| Ok((Cli::from_arg_matches(&m)?, m)));
    let (cli, matches) = match parsed {
        Ok(parsed) => parsed,
        // A plugin's bad flag is UNKNOWN (3), not CRITICAL (2), to Nagios.
        Err(e) if e.use_stderr() && std::env::args().nth(1).as_deref() == Some("check") => {
            let _ = e.print();
            return ExitCode::from(3);
        }
        Err(e) => e.exit(),
    };
    let outcome = match cli.command {
        Command::Schema { spec, mesh, openapi } => {
            let schema = match (spec, mesh, openapi) {
                (true, ..) => goodput_report::spec_schema(),
                (_, true, _) => goodput_report::mesh_schema(),
                (.., true) => {
                    serde_json::to_string_pretty(&goodput_agent::openapi_document()).unwrap_or_default()
                        + "\n"
                }
                _ => goodput_report::result_schema(),
            };
            goodput_report::console_line(schema.trim_end());
            Ok(EXIT_OK)
        }
        Command::Completions { shell } => {
            // Rendered whole first: clap_complete panics on a failed write,
            // and a reader that stops early (`| head`) is no failure.
            let mut cmd = definitions();
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut cmd, "goodput", &mut script);
            write_stdout(&script)
        }
        Command::Man { command } => {
            let markdown = matches
                .subcommand_matches("man")
                .is_some_and(|m| m.get_flag("markdown"));
            man_page(command.as_deref(), markdown)
        }
        Command::Agent(args) => agent::agent(&args),
        Command::Check(args) => check::check(&args),
        Command::Report(args) => report::report(&args),
        Command::Tcp(args) => runtime().and_then(|rt| on_worker(&rt, tcp::tcp(*args))),
        Command::Run(args) => runtime().and_then(|rt| on_worker(&rt, run::run_document(*args))),
        Command::Server(args) => runtime().and_then(|rt| on_worker(&rt, server::server(*args))),
        Command::Iperf3(args) => runtime().and_then(|rt| on_worker(&rt, iperf3::iperf3(*args))),
        Command::Stamp(args) => runtime().and_then(|rt| on_worker(&rt, stamp::stamp(*args))),
        Command::Owamp(args) => runtime().and_then(|rt| on_worker(&rt, owamp::owamp(*args))),
        Command::Twamp(args) => runtime().and_then(|rt| on_worker(&rt, owamp::twamp(*args))),
        Command::Ndt7(args) => runtime().and_then(|rt| on_worker(&rt, ndt7::ndt7(*args))),
        Command::Ttcp(args) => runtime().and_then(|rt| on_worker(&rt, ttcp::ttcp(*args))),
        Command::Echo(args) => runtime().and_then(|rt| on_worker(&rt, echo::echo(*args))),
        Command::Udp(args) => runtime().and_then(|rt| on_worker(&rt, udp::udp(*args))),
        Command::Quic(args) => runtime().and_then(|rt| on_worker(&rt, quic::quic(*args))),
        Command::Trace(args) => runtime().and_then(|rt| on_worker(&rt, path::trace(*args))),
        Command::Ping(args) => runtime().and_then(|rt| on_worker(&rt, path::ping(*args))),
        Command::Dns(args) => runtime().and_then(|rt| on_worker(&rt, dns::dns(*args))),
        Command::Http(args) => runtime().and_then(|rt| on_worker(&rt, http::http(*args))),
        Command::Tls(args) => runtime().and_then(|rt| on_worker(&rt, http::tls(*args))),
    };
    match outcome {
        Ok(code) => ExitCode::from(code),
        Err(Stop::Usage(m)) => {
            eprintln!("goodput: error: {m}");
            ExitCode::from(EXIT_USAGE)
        }
        Err(Stop::Exit(code)) => ExitCode::from(code),
        Err(Stop::Fatal(e) | Stop::Output(e)) => {
            eprintln!("goodput: error: {e:#}");
            ExitCode::from(EXIT_FATAL)
        }
    }
}

/// Prints goodput's man page, or one command's (`goodput-tcp(1)`); with
/// `markdown`, the option reference instead.
fn man_page(command: Option<&str>, markdown: bool) -> Result<u8, Stop> {
    let top = definitions();
    let page = match command {
        None => top,
        Some(name) => {
            let sub = top.find_subcommand(name).cloned().ok_or_else(|| {
                let names: Vec<&str> = top.get_subcommands().map(|c| c.get_name()).collect();
                usage(format!(
                    "no command '{name}'; the commands are {}",
                    names.join(", ")
                ))
            })?;
            if markdown {
                return write_stdout(reference::markdown(&sub, "goodput").as_bytes());
            }
            sub.display_name(format!("goodput-{name}"))
                .bin_name(format!("goodput {name}"))
                .version(env!("CARGO_PKG_VERSION"))
        }
    };
    if markdown {
        return write_stdout(reference::markdown(&page, "").as_bytes());
    }
    let mut out = Vec::new();
    clap_mangen::Man::new(page)
        .render(&mut out)
        .map_err(|e| Stop::Fatal(anyhow!("cannot render the man page: {e}")))?;
    write_stdout(&out)
}

fn write_stdout(bytes: &[u8]) -> Result<u8, Stop> {
    let mut out = io::stdout().lock();
    match io::Write::write_all(&mut out, bytes).and_then(|()| io::Write::flush(&mut out)) {
        // The reader took what it wanted and closed the pipe (`| head`).
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(EXIT_OK),
        Err(e) => Err(Stop::Fatal(anyhow!("cannot write the page: {e}"))),
        Ok(()) => Ok(EXIT_OK),
    }
}
