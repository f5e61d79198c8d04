//! `goodput ttcp`: its flags become a `TtcpSpec`; raw data to or from a
//! TTCP peer.

use super::run::{engine_run, numbered_views, Extras};
use super::views::Views;
use super::{exit_status, flag_error_as, from_flags, long_flag, Stop};
use crate::flags::{TtcpArgs, ViewArgs};
use goodput_core::spec::{Family, TtcpRole, TtcpSpec};
use goodput_engine::run::RunContext;
use goodput_engine::Observer;

pub(crate) async fn ttcp(args: TtcpArgs) -> Result<u8, Stop> {
    from_flags(
        spec_of(&args),
        |e| flag_error_as(e, ttcp_flag),
        args.print_spec,
        &args.views,
        &Extras::default(),
    )
    .await
}

/// The test `goodput ttcp`'s flags describe.
fn spec_of(args: &TtcpArgs) -> TtcpSpec {
    TtcpSpec {
        assert: args.assert.clone(),
        role: Some(if args.transmit {
            TtcpRole::Transmit
        } else {
            TtcpRole::Receive
        }),
        host: args.host.clone(),
        buflen: args.buflen,
        nbuf: args.nbuf,
        port: args.port,
        udp: args.udp,
        nodelay: args.nodelay,
        sockbuf: args.sockbuf,
        sinkmode: args.sinkmode,
        bind: args.bind,
        family: if args.ipv4 {
            Family::Ipv4
        } else if args.ipv6 {
            Family::Ipv6
        } else {
            Family::Any
        },
        udp_idle: args.udp_idle,
    }
}

/// A ttcp field's flag: ttcp's own letters where it has them.
fn ttcp_flag(field: &str) -> String {
    match field {
        "buflen" => "-l".into(),
        "nbuf" => "-n".into(),
        "port" => "-p".into(),
        "udp" => "-u".into(),
        "nodelay" => "-D".into(),
        "sockbuf" => "-b".into(),
        "host" => "HOST".into(),
        "role" => "-t/-r".into(),
        f => long_flag(f),
    }
}

/// Runs a validated ttcp spec: `goodput ttcp`'s path and `goodput run`'s.
/// With `sinkmode` false the data is standard input (transmitting) or
/// standard output (receiving), as with the flags.
pub(crate) async fn run_ttcp(spec: TtcpSpec, out: &ViewArgs) -> Result<u8, Stop> {
    use goodput_engine::ttcp::DataStreams;
    let transmit = spec.transmits();
    // The report goes to standard output, unless standard output carries
    // the received data (sinkmode false, receiving): then it goes to stderr.
    let data_on_stdout = !spec.sinkmode && !transmit;
    let verbosity = out.verbosity;
    let mut view_args = numbered_views(out, None);
    if data_on_stdout {
        view_args.verbosity = 0;
    }
    let mut views = Views::open(&view_args, None)?;
    views
        .console
        .peer_hint("is a discard service (`goodput server --discard-port PORT`) running there?");
    let prefix = if transmit { "ttcp-t" } else { "ttcp-r" };
    // ttcp's progress lines go to standard error, as classic ttcp's do.
    let lines: goodput_engine::run::TtcpLines = Box::new(move |l: String| {
        if verbosity > 0 {
            eprintln!("{prefix}: {l}");
        }
    });
    // Without sinkmode the data is this process's standard input (sending)
    // or standard output (receiving); the engine only sees the streams.
    let data = (!spec.sinkmode).then(|| DataStreams {
        input: Box::new(std::io::stdin()),
        output: Box::new(std::io::stdout()),
    });
    let context = RunContext {
        max_records: out.max_records,
        ttcp_data: data,
        ttcp_lines: Some(lines),
        ..RunContext::default()
    };
    let result = engine_run(&spec.into(), context, &mut views, &view_args).await?;
    if data_on_stdout && verbosity > 0 {
        if let Some(d) = result.ttcp() {
            eprintln!("{}", goodput_report::ttcp_report(&result, d));
        }
    }
    for r in &result.connections {
        if !r.outcome.is_success() {
            views.on_connection(r);
        }
    }
    views.finish(&result, view_args.json.as_deref())?;
    Ok(exit_status(&result, result.summary.failures() > 0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flags::{Cli, Command};
    use clap::Parser;
    use goodput_core::kind::KindSpec;
    use goodput_core::spec::TestSpec;

    fn spec(flags: &[&str]) -> TtcpSpec {
        let cli = Cli::try_parse_from([&["goodput", "ttcp"], flags].concat()).unwrap();
        let Command::Ttcp(args) = cli.command else {
            panic!("not ttcp")
        };
        spec_of(&args)
    }

    #[test]
    fn flags_round_trip_through_a_document() {
        for flags in [
            &["-r"][..],
            &["-t", "h"][..],
            &[
                "-t",
                "[::1]:5009",
                "-u",
                "-l",
                "1400",
                "-n",
                "77",
                "-p",
                "5009",
                "-D",
                "-b",
                "1MiB",
                "--sinkmode=false",
                "-6",
                "--udp-idle",
                "750ms",
            ][..],
            &[
                "-r",
                "-B",
                "127.0.0.1",
                "-4",
                "-b",
                "256KiB",
                "--sinkmode",
                "false",
            ][..],
        ] {
            let s = spec(flags);
            s.validate().unwrap();
            let json = serde_json::to_string(&TestSpec::Ttcp(s.clone())).unwrap();
            let back = goodput_core::spec::read_document(&json, false).unwrap();
            assert_eq!(back, vec![TestSpec::Ttcp(s)], "{json}");
        }
        assert_eq!(
            spec(&["-r"]),
            TtcpSpec {
                role: Some(TtcpRole::Receive),
                ..TtcpSpec::default()
            }
        );
    }

    #[test]
    fn errors_name_ttcp_letters() {
        let e = TtcpSpec {
            role: Some(TtcpRole::Transmit),
            host: Some("h".into()),
            udp: true,
            buflen: 70_000,
            ..TtcpSpec::default()
        }
        .validate()
        .unwrap_err();
        let Stop::Usage(m) = flag_error_as(&e, ttcp_flag) else {
            panic!("not a usage error")
        };
        assert_eq!(m, "-l with -u must be at most 65507 bytes (one UDP datagram)");
    }
}
