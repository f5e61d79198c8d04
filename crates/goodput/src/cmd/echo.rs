//! `goodput echo`: its flags become an `EchoSpec`; load on an echo server.

use super::views::Views;
use super::{
    exit_status, flag_error, print_spec, resolve, socket_room, split_target, usage, watch_signals, Stop,
    EXIT_OK,
};
use crate::flags::{EchoArgs, ViewArgs};
use goodput_core::spec::{EchoSpec, Family, TestSpec};
use goodput_engine::{CancellationToken, Observer};

pub(crate) async fn echo(args: EchoArgs) -> Result<u8, Stop> {
    let spec = spec_of(&args);
    spec.validate().map_err(|e| flag_error(&e))?;
    if args.print_spec {
        print_spec(&TestSpec::Echo(spec))?;
        return Ok(EXIT_OK);
    }
    run_echo(spec, &args.views).await
}

/// The test `goodput echo`'s flags describe.
fn spec_of(args: &EchoArgs) -> EchoSpec {
    EchoSpec {
        target: args.target.clone(),
        port: args.port,
        family: if args.ipv4 {
            Family::Ipv4
        } else if args.ipv6 {
            Family::Ipv6
        } else {
            Family::Any
        },
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
pub(crate) async fn run_echo(spec: EchoSpec, out: &ViewArgs) -> Result<u8, Stop> {
    use goodput_engine::echo::{EchoSpec as EngineSpec, Hold};
    let document = TestSpec::Echo(spec.clone());
    let size = spec.message_bytes();
    let hold = if spec.pause {
        if std::io::IsTerminal::is_terminal(&std::io::stdin()) {
            enter_releases()
        } else {
            match spec.hold_for {
                Some(d) => Hold::For(d.0),
                None => return Err(usage(
                    "--pause waits for Enter, but standard input is not a terminal: give --hold-for DURATION",
                )),
            }
        }
    } else if let Some(d) = spec.hold_for {
        Hold::For(d.0)
    } else if spec.hold {
        Hold::UntilAllDone
    } else {
        Hold::No
    };
    let (host, port) = split_target(&spec.target, spec.port)?;
    let target = resolve(
        &host,
        port,
        spec.family == Family::Ipv4,
        spec.family == Family::Ipv6,
    )
    .await?[0];
    let tls = if spec.tls {
        use goodput_engine::tls::{client_config, server_name, Trust};
        // validate() saw to it that one of the two is given.
        let trust = match &spec.ca {
            Some(p) => Trust::CaFile(p.clone()),
            None => Trust::Anything,
        };
        let cfg = client_config(&trust).map_err(|e| usage(e.to_string()))?;
        let name = spec
            .sni
            .clone()
            .unwrap_or_else(|| host.trim_start_matches('[').trim_end_matches(']').to_owned());
        Some((cfg, server_name(&name).map_err(|e| usage(e.to_string()))?))
    } else {
        None
    };
    let mut connections = spec.connections;
    let mut notices = Vec::new();
    if let Some((room, limit)) = socket_room(1) {
        if connections > room {
            notices.push(format!(
                "--connections {connections} capped to {room}: the open-file limit (RLIMIT_NOFILE) is {limit}"
            ));
            connections = room.max(1);
        }
    }
    let cancel = CancellationToken::new();
    watch_signals(cancel.clone());
    let mut views = Views::open(out, Some(connections))?;
    let mut banner = vec![
        (
            "Echo server".to_owned(),
            format!(
                "{target}{}",
                match (spec.tls, &spec.ca) {
                    (false, _) => String::new(),
                    (true, Some(ca)) => format!(" over TLS (trusting {})", ca.display()),
                    (true, None) => " over TLS (any certificate accepted: --insecure)".into(),
                }
            ),
        ),
        (
            "Connections".into(),
            format!(
                "{connections}, {}{}",
                if spec.sync_connect {
                    "one at a time"
                } else {
                    "all at once"
                },
                spec.batch_size.map_or(String::new(), |b| format!(
                    ", in batches of {b} every {} ms",
                    spec.batch_delay.0.as_millis()
                ))
            ),
        ),
        (
            "Messages".into(),
            if spec.messages == 0 {
                "none (connect only)".into()
            } else {
                format!(
                    "{} per connection, {} B each, every {} ms, {}",
                    spec.messages,
                    size,
                    spec.message_rate.0.as_millis(),
                    if spec.send_after_recv {
                        "closed loop (timer starts when the echo is back)"
                    } else {
                        "open loop (round trips from the scheduled send time)"
                    }
                )
            },
        ),
    ];
    banner.push((
        "Close".into(),
        match hold {
            Hold::No => "each connection when its messages are done".into(),
            Hold::UntilAllDone => "all together when every connection is done".into(),
            Hold::UntilReleased(_) => "all together when Enter is pressed".into(),
            Hold::For(d) => format!("all together {} ms after every connection is done", d.as_millis()),
        },
    ));
    views.console.banner("goodput echo", &banner);
    for n in &notices {
        views.on_notice(n);
    }
    let engine = EngineSpec {
        target,
        connections,
        batch_size: spec.batch_size,
        batch_delay: spec.batch_delay.0,
        messages: spec.messages,
        message_size: size,
        message_interval: spec.message_rate.0,
        send_after_recv: spec.send_after_recv,
        sync_connect: spec.sync_connect,
        hold,
        connect_timeout: spec.connect_timeout.0,
        reply_timeout: spec.reply_timeout.0,
        status_interval: spec.status_interval.0,
        max_records: out.max_records,
        tls,
        preallocate: spec.preallocate,
    };
    let mut result = goodput_engine::echo::run_echo(engine, &mut views, cancel.clone())
        .await
        .map_err(|e| Stop::Fatal(e.into()))?;
    result.spec = Some(document);
    views.finish(&result, out.json.as_deref())?;
    Ok(exit_status(&result, result.summary.failures() > 0))
}

/// A hold released by Enter on standard input: the command line reads the
/// terminal (on a thread of its own, which the process's exit ends), the
/// engine only waits for the release.
fn enter_releases() -> goodput_engine::echo::Hold {
    let notify = std::sync::Arc::new(tokio::sync::Notify::new());
    let n = notify.clone();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = std::io::stdin().read_line(&mut line);
        n.notify_one();
    });
    goodput_engine::echo::Hold::UntilReleased(goodput_engine::echo::Release {
        notify,
        how: "press Enter to close them".into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flags::{Cli, Command};
    use clap::Parser;

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
