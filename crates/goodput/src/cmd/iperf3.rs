//! `goodput iperf3`: an iperf3 client (and the server's iperf3 view).

use super::run::{run_spec, write_failed, Extras};
use super::views::Views;
use super::{
    exit_status, flag_error, loopback, print_spec, resolve, watch_signals, Embedded, Stop, EXIT_FAILED,
    EXIT_INTERRUPTED, EXIT_OK,
};
use crate::flags::{Iperf3Args, ViewArgs};
use anyhow::{anyhow, Context};
use goodput_core::result::{ConnectionRecord, Interval, TestResult};
use goodput_core::spec::{Family, Iperf3Spec, TestSpec};
use goodput_core::units::HumanDuration;
use goodput_core::units::{format_bits_per_second, format_size};
use goodput_engine::{CancellationToken, NullObserver, Observer};
use std::net::SocketAddr;
use std::path::Path;
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
    let spec = Iperf3Spec {
        host: args.host.clone(),
        port: args.port,
        time: HumanDuration(Duration::from_secs(u64::from(args.time))),
        bytes: args.bytes,
        blockcount: args.blockcount,
        parallel: args.parallel,
        reverse: args.reverse,
        bidir: args.bidir,
        udp: args.udp,
        bitrate: args.bitrate,
        length: args.length,
        window: args.window,
        congestion: args.congestion.clone(),
        mss: args.mss,
        no_delay: args.no_delay,
        omit: HumanDuration(Duration::from_secs(u64::from(args.omit))),
        tos: args.tos,
        cport: args.cport,
        bind: args.bind,
        family: Family::of(args.ipv4, args.ipv6),
        get_server_output: args.get_server_output,
        udp_counters_64bit: args.udp_counters_64bit,
        repeating_payload: args.repeating_payload,
        title: args.title.clone(),
        extra_data: args.extra_data.clone(),
        interval: args.interval,
        timeout: args.timeout,
    };
    spec.validate().map_err(|e| flag_error(&e))?;
    if args.print_spec {
        print_spec(&TestSpec::Iperf3(spec))?;
        return Ok(EXIT_OK);
    }
    let extras = Extras {
        iperf3_json: args.iperf3_json.as_deref(),
        ..Extras::default()
    };
    run_spec(TestSpec::Iperf3(spec), &args.views, &extras).await
}

/// Runs a validated iperf3 spec: `goodput iperf3`'s path and `goodput
/// run`'s. `iperf3_json` also writes the result in iperf3's own -J shape.
pub(crate) async fn run_iperf3(
    spec: Iperf3Spec,
    out: &ViewArgs,
    iperf3_json: Option<&Path>,
) -> Result<u8, Stop> {
    let document = TestSpec::Iperf3(spec.clone());
    let p = spec.params().map_err(|e| flag_error(&e))?;
    let (v4, v6) = (spec.family == Family::Ipv4, spec.family == Family::Ipv6);
    let cancel = CancellationToken::new();
    watch_signals(cancel.clone());
    let mut server = Embedded::new(&cancel);
    let target = match &spec.host {
        None => {
            let ip = loopback(v6);
            let srv = goodput_engine::iperf3::bind_server(goodput_engine::iperf3::Iperf3ServerSpec {
                listen: SocketAddr::new(ip, 0),
                max_duration: Duration::from_secs(86_400 + 600),
                timeout: Duration::from_secs(10),
                status_interval: spec.interval.0,
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
        Some(h) => resolve(h, spec.port, v4, v6).await?[0],
    };
    let mut views = Views::open(out, None)?;
    views.quiet_if_stdout(iperf3_json);
    if let Some(path) = iperf3_json.filter(|p| p.as_os_str() != "-") {
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
                if spec.host.is_none() {
                    " (embedded goodput iperf3 server)"
                } else {
                    ""
                }
            ),
        ),
        (
            "Protocol".into(),
            format!("iperf3 {}, {mode}", if spec.udp { "UDP" } else { "TCP" }),
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
    let client = goodput_engine::iperf3::Iperf3ClientSpec {
        target,
        bind: spec.bind,
        cport: spec.cport,
        params: p,
        status_interval: spec.interval.0,
        timeout: spec.timeout.0,
        max_records: out.max_records,
    };
    let result = goodput_engine::iperf3::run_client(client, &mut views, cancel.clone()).await;
    server.stop().await;
    let result = match result {
        Ok(r) => r,
        Err(e) => {
            eprintln!("goodput: iperf3 test failed: {e}");
            write_failed(&document, out, &e.to_string());
            return Ok(if cancel.is_cancelled() {
                EXIT_INTERRUPTED
            } else {
                EXIT_FAILED
            });
        }
    };
    let mut result = result;
    result.spec = Some(document);
    for r in &result.connections {
        views.on_connection(r);
    }
    views.finish(&result, out.json.as_deref())?;
    if let Some(path) = iperf3_json {
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
