//! `goodput ttcp`: raw data to or from a TTCP peer.

use super::views::Views;
use super::{exit_status, resolve, usage, watch_signals, Stop};
use crate::flags::TtcpArgs;
use anyhow::anyhow;
use goodput_engine::{CancellationToken, Observer};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

pub(crate) async fn ttcp(args: TtcpArgs) -> Result<u8, Stop> {
    use goodput_engine::ttcp::{run_ttcp, TtcpRole, TtcpSpec};
    let min = if args.udp {
        goodput_core::ttcp::MIN_UDP_BUFLEN
    } else {
        1
    };
    if args.buflen < min || args.buflen > (64 << 20) {
        return Err(usage(format!("-l must be between {min} and {} bytes", 64 << 20)));
    }
    if args.udp && args.buflen > 65_507 {
        return Err(usage("-l with -u must be at most 65507 bytes (one UDP datagram)"));
    }
    if args.transmit && args.nbuf == 0 {
        return Err(usage("-n must be at least 1"));
    }
    let sockbuf = args
        .sockbuf
        .map(|b| u32::try_from(b.0).map_err(|_| usage("-b must be below 4 GiB")))
        .transpose()?;
    let role = match &args.host {
        Some(h) => TtcpRole::Transmit(resolve(h, args.port, args.ipv4, args.ipv6).await?[0]),
        None => {
            let ip = args.bind.unwrap_or(if args.ipv4 {
                Ipv4Addr::UNSPECIFIED.into()
            } else {
                Ipv6Addr::UNSPECIFIED.into()
            });
            TtcpRole::Receive(SocketAddr::new(ip, args.port))
        }
    };
    let spec = TtcpSpec {
        role,
        udp: args.udp,
        buflen: args.buflen,
        nbuf: args.nbuf,
        nodelay: args.nodelay,
        sockbuf,
        sinkmode: args.sinkmode,
        udp_idle: args.udp_idle.0,
        connect_timeout: Duration::from_secs(10),
    };
    // The report goes to standard output, unless standard output carries
    // the received data (--sinkmode=false -r): then it goes to stderr.
    let data_on_stdout = !args.sinkmode && !args.transmit;
    let verbosity = args.views.verbosity;
    let mut view_args = args.views;
    if data_on_stdout {
        view_args.verbosity = 0;
    }
    let mut views = Views::open(&view_args, None)?;
    let cancel = CancellationToken::new();
    watch_signals(cancel.clone());
    let prefix = if args.transmit { "ttcp-t" } else { "ttcp-r" };
    if verbosity > 0 {
        eprintln!(
            "{prefix}: buflen={}, nbuf={}, port={}{}  {}{}",
            spec.buflen,
            spec.nbuf,
            args.port,
            sockbuf.map_or(String::new(), |b| format!(", sockbufsize={b}")),
            if args.udp { "udp" } else { "tcp" },
            args.host.as_ref().map_or(String::new(), |h| format!("  -> {h}"))
        );
    }
    let c = cancel.clone();
    let result = tokio::task::spawn_blocking(move || {
        let mut lines = |l: String| {
            if verbosity > 0 {
                eprintln!("{prefix}: {l}");
            }
        };
        run_ttcp(&spec, &mut lines, &c)
    })
    .await
    .map_err(|e| Stop::Fatal(anyhow!("the transfer thread failed: {e}")))?
    .map_err(|e| Stop::Fatal(e.into()))?;
    if data_on_stdout && verbosity > 0 {
        if let Some(d) = &result.ttcp {
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
