//! `goodput echo`: load on an echo server.

use super::views::Views;
use super::{exit_status, resolve, socket_room, split_target, usage, watch_signals, Stop};
use crate::flags::EchoArgs;
use goodput_engine::{CancellationToken, Observer};
use std::time::Duration;

pub(crate) async fn echo(args: EchoArgs) -> Result<u8, Stop> {
    use goodput_engine::echo::{run_echo, EchoSpec, Hold};
    let size = usize::try_from(args.message_size.0)
        .ok()
        .filter(|&n| (1..=(16 << 20)).contains(&n))
        .ok_or_else(|| usage("--message-size must be between 1 byte and 16 MiB"))?;
    if args.messages > 0 && args.message_rate.0.is_zero() && !args.send_after_recv {
        return Err(usage(
            "--message-rate 0 with an open-loop schedule would send every message at once; give a rate or --send-after-recv",
        ));
    }
    if args.status_interval.0 < Duration::from_millis(10) {
        return Err(usage("--status-interval must be at least 10ms"));
    }
    let hold = if args.pause {
        if std::io::IsTerminal::is_terminal(&std::io::stdin()) {
            Hold::Enter
        } else {
            match args.hold_for {
                Some(d) => Hold::For(d.0),
                None => return Err(usage(
                    "--pause waits for Enter, but standard input is not a terminal: give --hold-for DURATION",
                )),
            }
        }
    } else if let Some(d) = args.hold_for {
        Hold::For(d.0)
    } else if args.hold {
        Hold::UntilAllDone
    } else {
        Hold::No
    };
    let (host, port) = split_target(&args.target, args.port)?;
    let target = resolve(&host, port, args.ipv4, args.ipv6).await?[0];
    let tls = if args.tls {
        use goodput_engine::tls::{client_config, server_name, Trust};
        let trust = match (&args.ca, args.insecure) {
            (Some(p), _) => Trust::CaFile(p.clone()),
            (None, true) => Trust::Anything,
            (None, false) => {
                return Err(usage(
                    "--tls needs --ca FILE (the CA that signed the server's certificate) or --insecure",
                ))
            }
        };
        let cfg = client_config(&trust).map_err(|e| usage(e.to_string()))?;
        let name = args
            .sni
            .clone()
            .unwrap_or_else(|| host.trim_start_matches('[').trim_end_matches(']').to_owned());
        Some((cfg, server_name(&name).map_err(|e| usage(e.to_string()))?))
    } else {
        None
    };
    let mut connections = args.connections;
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
    let mut views = Views::open(&args.views, Some(connections))?;
    let mut banner = vec![
        (
            "Echo server".to_owned(),
            format!(
                "{target}{}",
                match (&args.tls, &args.ca) {
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
                if args.sync_connect {
                    "one at a time"
                } else {
                    "all at once"
                },
                args.batch_size.map_or(String::new(), |b| format!(
                    ", in batches of {b} every {} ms",
                    args.batch_delay.0.as_millis()
                ))
            ),
        ),
        (
            "Messages".into(),
            if args.messages == 0 {
                "none (connect only)".into()
            } else {
                format!(
                    "{} per connection, {} B each, every {} ms, {}",
                    args.messages,
                    size,
                    args.message_rate.0.as_millis(),
                    if args.send_after_recv {
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
            Hold::Enter => "all together when Enter is pressed".into(),
            Hold::For(d) => format!("all together {} ms after every connection is done", d.as_millis()),
        },
    ));
    views.console.banner("goodput echo", &banner);
    for n in &notices {
        views.on_notice(n);
    }
    let spec = EchoSpec {
        target,
        connections,
        batch_size: args.batch_size,
        batch_delay: args.batch_delay.0,
        messages: args.messages,
        message_size: size,
        message_interval: args.message_rate.0,
        send_after_recv: args.send_after_recv,
        sync_connect: args.sync_connect,
        hold,
        connect_timeout: args.connect_timeout.0,
        reply_timeout: args.reply_timeout.0,
        status_interval: args.status_interval.0,
        max_records: args.views.max_records,
        tls,
        preallocate: args.preallocate,
    };
    let result = run_echo(spec, &mut views, cancel.clone())
        .await
        .map_err(|e| Stop::Fatal(e.into()))?;
    views.finish(&result, args.views.json.as_deref())?;
    Ok(exit_status(&result, result.summary.failures() > 0))
}
