//! `goodput echo`: its flags become an `EchoSpec`; load on an echo server.

use super::run::Extras;
use super::views::Views;
use super::{flag_error, from_flags, run_and_report, split_target, usage, Stop};
use crate::flags::{EchoArgs, ViewArgs};
use goodput_core::spec::{EchoSpec, Family};
use goodput_engine::run::{echo_connections, RunContext};

pub(crate) async fn echo(args: EchoArgs) -> Result<u8, Stop> {
    from_flags(
        spec_of(&args),
        flag_error,
        args.print_spec,
        &args.views,
        &Extras::default(),
    )
    .await
}

/// The test `goodput echo`'s flags describe.
fn spec_of(args: &EchoArgs) -> EchoSpec {
    EchoSpec {
        assert: args.assert.clone(),
        target: args.target.clone(),
        port: args.port,
        family: Family::of(args.ipv4, args.ipv6),
        connections: args.connections,
        batch_size: args.batch_size,
        batch_delay: args.batch_delay,
        messages: args.messages,
        message_size: args.message_size,
        message_rate: args.message_rate,
        send_after_recv: args.send_after_recv,
        sync_connect: args.sync_connect,
        hold: args.hold,
        pause: args.pause,
        hold_for: args.hold_for,
        preallocate: args.preallocate,
        tls: args.tls,
        insecure: args.insecure,
        ca: args.ca.clone(),
        sni: args.sni.clone(),
        connect_timeout: args.connect_timeout,
        reply_timeout: args.reply_timeout,
        status_interval: args.status_interval,
    }
}

/// Runs a validated echo spec: `goodput echo`'s path and `goodput run`'s.
/// With `pause`, Enter is read from standard input when it is a terminal.
/// The run itself is the engine's (`goodput_engine::run::run`).
pub(crate) async fn run_echo(spec: EchoSpec, out: &ViewArgs) -> Result<u8, Stop> {
    let release = if spec.pause {
        if std::io::IsTerminal::is_terminal(&std::io::stdin()) {
            Some(enter_releases())
        } else if spec.hold_for.is_none() {
            return Err(usage(
                "--pause waits for Enter, but standard input is not a terminal: give --hold-for DURATION",
            ));
        } else {
            None
        }
    } else {
        None
    };
    split_target(&spec.target, spec.port)?;
    let (connections, _) = echo_connections(&spec);
    let mut views = Views::open(out, Some(connections))?;
    views
        .console
        .peer_hint("is `goodput server --echo` running there?");
    let context = RunContext {
        max_records: out.max_records,
        release,
        ..RunContext::default()
    };
    run_and_report(spec.into(), context, views, out, |r| r.summary.failures() > 0).await
}

/// A release by Enter on standard input: the command line reads the
/// terminal (on a thread of its own, which the process's exit ends), the
/// engine only waits for the release.
fn enter_releases() -> goodput_engine::echo::Release {
    let notify = std::sync::Arc::new(tokio::sync::Notify::new());
    let n = notify.clone();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = std::io::stdin().read_line(&mut line);
        n.notify_one();
    });
    goodput_engine::echo::Release {
        notify,
        how: "Enter is pressed".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flags::{Cli, Command};
    use clap::Parser;
    use goodput_core::kind::KindSpec;
    use goodput_core::spec::TestSpec;

    fn spec(flags: &[&str]) -> EchoSpec {
        let cli = Cli::try_parse_from([&["goodput", "echo"], flags].concat()).unwrap();
        let Command::Echo(args) = cli.command else {
            panic!("not echo")
        };
        spec_of(&args)
    }

    #[test]
    fn flags_round_trip_through_a_document() {
        for flags in [
            &["h"][..],
            &[
                "[::1]:7007",
                "--connections",
                "12",
                "--batch-size",
                "4",
                "--batch-delay",
                "250",
                "--messages",
                "9",
                "--message-size",
                "1000",
                "--message-rate",
                "0",
                "--send-after-recv",
                "--sync-connect",
                "--hold",
                "--pause",
                "--hold-for",
                "2s",
                "--preallocate",
                "--tls",
                "--ca",
                "/etc/ca.pem",
                "--sni",
                "echo.example",
                "--connect-timeout",
                "3s",
                "--reply-timeout",
                "1500ms",
                "-6",
                "--status-interval",
                "200ms",
            ][..],
        ] {
            let s = spec(flags);
            s.validate().unwrap();
            let json = serde_json::to_string(&TestSpec::Echo(s.clone())).unwrap();
            let back = goodput_core::spec::read_document(&json, false).unwrap();
            assert_eq!(back, vec![TestSpec::Echo(s)], "{json}");
        }
        assert_eq!(
            spec(&["h"]),
            EchoSpec {
                target: "h".into(),
                ..EchoSpec::default()
            }
        );
    }
}
