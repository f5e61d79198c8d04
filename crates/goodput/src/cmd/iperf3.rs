//! `goodput iperf3`: an iperf3 client (and the server's iperf3 view).

use super::views::Views;
use super::{
    exit_status, loopback, resolve, usage, watch_signals, Embedded, Stop, EXIT_FAILED, EXIT_INTERRUPTED,
};
use crate::flags::Iperf3Args;
use anyhow::{anyhow, Context};
use goodput_core::result::{ConnectionRecord, Interval, TestResult};
use goodput_core::units::{format_bits_per_second, format_size};
use goodput_engine::{CancellationToken, NullObserver, Observer};
use std::net::SocketAddr;
use std::time::Duration;

/// Console lines for the tests an iperf3 service ran.
pub(crate) struct Iperf3ServerView {
    pub(crate) verbosity: u8,
}

impl Observer for Iperf3ServerView {
    fn on_interval(&mut self, _: &Interval) {}
    fn on_connection(&mut self, _: &ConnectionRecord) {}
    fn on_notice(&mut self, text: &str) {
        if self.verbosity >= 2 {
            goodput_report::console_line(text);
        }
    }
    fn on_result(&mut self, r: &TestResult) {
        if self.verbosity >= 1 {
            goodput_report::console_line(&goodput_report::iperf3_summary(r));
        }
    }
}

pub(crate) async fn iperf3(args: Iperf3Args) -> Result<u8, Stop> {
    use goodput_core::iperf3::params::{Params, Protocol};
    if args.interval.0 < Duration::from_millis(10) {
        return Err(usage("--interval must be at least 10ms"));
    }
    let protocol = if args.udp { Protocol::Udp } else { Protocol::Tcp };
    let mut p = Params::new(protocol);
    p.time = args.time;
    p.num = args.bytes.map_or(0, |b| b.0);
    p.blockcount = args.blockcount.unwrap_or(0);
    if p.num > 0 || p.blockcount > 0 {
        p.time = 0;
    } else if p.time == 0 {
        return Err(usage("-t must be at least 1 second (or give -n or -k)"));
    }
    p.omit = args.omit;
    p.parallel = args.parallel;
    // -l 0 means the default length, as stock iperf3 takes it.
    if let Some(l) = args.length.filter(|l| l.0 > 0) {
        p.len = u32::try_from(l.0).map_err(|_| usage("-l is too large"))?;
    }
    if let Some(b) = args.bitrate {
        p.bandwidth = b.0;
    }
    p.reverse = args.reverse;
    p.bidirectional = args.bidir;
    if let Some(w) = args.window {
        p.window = u32::try_from(w.0).map_err(|_| usage("-w is too large"))?;
    }
    p.mss = args.mss.unwrap_or(0);
    p.nodelay = args.no_delay;
    p.tos = args.tos;
    p.congestion = args.congestion.clone();
    p.get_server_output = args.get_server_output;
    p.udp_counters_64bit = args.udp_counters_64bit;
    p.repeating_payload = args.repeating_payload;
    p.title = args.title.clone();
    p.extra_data = args.extra_data.clone();
    p.client_version = Some(format!("goodput-{}", env!("CARGO_PKG_VERSION")));
    // The same checks a server makes, before anything is sent.
    Params::from_json(&p.to_json()).map_err(|e| usage(format!("invalid iperf3 parameters: {e}")))?;

    let cancel = CancellationToken::new();
    watch_signals(cancel.clone());
    let mut server = Embedded::new(&cancel);
    let target = match &args.host {
        None => {
            let ip = loopback(args.ipv6);
            let srv = goodput_engine::iperf3::bind_server(goodput_engine::iperf3::Iperf3ServerSpec {
                listen: SocketAddr::new(ip, 0),
                max_duration: Duration::from_secs(86_400 + 600),
                timeout: Duration::from_secs(10),
                status_interval: args.interval.0,
                max_records: 0,
                exit_after: Some(1),
            })
            .map_err(|e| Stop::Fatal(e.into()))?;
            let addr = srv.local_addr();
            server.start(|c| async move {
                let _ = srv.run(&mut NullObserver, c).await;
            });
            addr
        }
        Some(h) => resolve(h, args.port, args.ipv4, args.ipv6).await?[0],
    };
    let out = &args.views;
    let mut views = Views::open(out, None)?;
    views.quiet_if_stdout(args.iperf3_json.as_deref());
    if let Some(path) = args.iperf3_json.as_ref().filter(|p| p.as_os_str() != "-") {
        std::fs::File::create(path)
            .map_err(|e| Stop::Fatal(anyhow!("cannot write {}: {e}", path.display())))?;
    }
    let mode = if p.bidirectional {
        "bidirectional"
    } else if p.reverse {
        "reverse (server sends)"
    } else {
        "forward (client sends)"
    };
    let end = if p.num > 0 {
        format!("after {}", format_size(p.num))
    } else if p.blockcount > 0 {
        format!("after {} blocks", p.blockcount)
    } else {
        format!("after {} s (+{} s omitted)", p.time, p.omit)
    };
    let mut banner = vec![
        (
            "Server".to_owned(),
            format!(
                "{target}{}",
                if args.host.is_none() {
                    " (embedded goodput iperf3 server)"
                } else {
                    ""
                }
            ),
        ),
        (
            "Protocol".into(),
            format!("iperf3 {}, {mode}", if args.udp { "UDP" } else { "TCP" }),
        ),
        ("Streams".into(), format!("{} per direction", p.parallel)),
        ("Block size".into(), format!("{} B", p.len)),
        ("Ends".into(), end),
    ];
    if p.bandwidth > 0 {
        banner.push((
            "Rate per stream".into(),
            format!(
                "{} bit/s ({})",
                p.bandwidth,
                format_bits_per_second(p.bandwidth as f64 / 8.0)
            ),
        ));
    }
    views.console.banner("goodput iperf3", &banner);
    let spec = goodput_engine::iperf3::Iperf3ClientSpec {
        target,
        bind: args.bind,
        cport: args.cport,
        params: p,
        status_interval: args.interval.0,
        timeout: args.timeout.0,
        max_records: args.views.max_records,
    };
    let result = goodput_engine::iperf3::run_client(spec, &mut views, cancel.clone()).await;
    server.stop().await;
    let result = match result {
        Ok(r) => r,
        Err(e) => {
            eprintln!("goodput: iperf3 test failed: {e}");
            return Ok(if cancel.is_cancelled() {
                EXIT_INTERRUPTED
            } else {
                EXIT_FAILED
            });
        }
    };
    for r in &result.connections {
        views.on_connection(r);
    }
    views.finish(&result, out.json.as_deref())?;
    if let Some(path) = &args.iperf3_json {
        let text = serde_json::to_string_pretty(&goodput_report::iperf3_json(&result))
            .map_err(|e| Stop::Fatal(anyhow!(e)))?
            + "\n";
        if path.as_os_str() == "-" {
            goodput_report::console_line(text.trim_end());
        } else {
            std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))?;
        }
    }
    let failed = result.summary.failures() > 0 || result.iperf3.as_ref().is_some_and(|d| d.error.is_some());
    Ok(exit_status(&result, failed))
}
