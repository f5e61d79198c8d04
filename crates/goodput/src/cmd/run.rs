//! `goodput run FILE`: the specs of a document, run in order.

use super::echo::run_echo;
use super::iperf3::run_iperf3;
use super::quic::run_quic;
use super::server::run_server;
use super::stamp::run_stamp;
use super::tcp::run_tcp;
use super::ttcp::run_ttcp;
use super::udp::run_udp;
use super::views::Views;
use super::views::RESULT_WRITTEN;
use super::watch_signals;
use super::{in_flags, print_spec, usage, Stop, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK};
use crate::flags::{RunArgs, ViewArgs};
use anyhow::anyhow;
use goodput_core::result::{EndReason, FailureStage, TestResult};
use goodput_core::spec::TestSpec;
use goodput_engine::run::RunContext;
use goodput_engine::CancellationToken;
use std::io;
use std::path::Path;
use std::sync::atomic::Ordering;

/// `goodput run FILE`: every test of the document, in order, each as its
/// command line would run it. With several tests, each output file gets
/// the test's number before its extension (`out.json` → `out-2.json`).
pub(crate) async fn run_document(args: RunArgs) -> Result<u8, Stop> {
    let from_stdin = goodput_report::is_stdout(&args.file);
    let text = if from_stdin {
        let mut t = String::new();
        io::Read::read_to_string(&mut io::stdin(), &mut t)
            .map_err(|e| Stop::Fatal(anyhow!("cannot read standard input: {e}")))?;
        t
    } else {
        std::fs::read_to_string(&args.file)
            .map_err(|e| Stop::Fatal(anyhow!("cannot read {}: {e}", args.file.display())))?
    };
    let toml = if from_stdin {
        !text.trim_start().starts_with(['{', '['])
    } else {
        args.file
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("toml"))
    };
    let name = args.file.display().to_string();
    let specs = goodput_core::spec::read_document(&text, toml).map_err(|e| usage(format!("{name}: {e}")))?;
    // A transmitter without sinkmode sends standard input: it cannot also
    // have carried the document.
    if from_stdin
        && specs
            .iter()
            .any(|s| matches!(s, TestSpec::Ttcp(t) if t.transmits() && !t.sinkmode))
    {
        return Err(usage(format!(
            "{name}: a ttcp transmitter with sinkmode false sends standard input, which carried this document: give it as a file"
        )));
    }
    let several = specs.len() > 1;
    if args.print_spec {
        if several {
            let text = serde_json::to_string_pretty(&serde_json::json!({ "tests": specs }))
                .map_err(|e| Stop::Fatal(anyhow!(e)))?;
            goodput_report::console_line(&text);
        } else {
            print_spec(&specs[0])?;
        }
        return Ok(EXIT_OK);
    }
    let mut status = EXIT_OK;
    for (i, spec) in specs.into_iter().enumerate() {
        let views = numbered_views(&args.views, several.then_some(i + 1));
        let code = run_spec(spec, &views, &Extras::default()).await?;
        if status == EXIT_OK {
            status = code;
        }
        if code == EXIT_INTERRUPTED {
            break;
        }
    }
    Ok(status)
}

/// What a command writes besides its views: files outside the spec.
#[derive(Default)]
pub(crate) struct Extras<'a> {
    /// `goodput stamp --packet-file`.
    pub(crate) packet_file: Option<&'a Path>,
    /// `goodput iperf3 --iperf3-json`.
    pub(crate) iperf3_json: Option<&'a Path>,
    /// `goodput udp --jitter-file`.
    pub(crate) jitter_file: Option<&'a Path>,
    /// `goodput quic --perf-log`.
    pub(crate) perf_log: Option<&'a Path>,
}

/// A command's validated spec: printed as a document (`--print-spec`) or
/// run.
pub(crate) async fn print_or_run(
    spec: TestSpec,
    print: bool,
    views: &ViewArgs,
    extras: &Extras<'_>,
) -> Result<u8, Stop> {
    if print {
        print_spec(&spec)?;
        return Ok(EXIT_OK);
    }
    run_spec(spec, views, extras).await
}

/// Runs one validated spec as its command runs it. A run that cannot
/// start (or fails before its result) is still a result: a `failed`
/// document with the reason goes to `--json`, and the error ends the
/// program as before.
async fn run_spec(spec: TestSpec, views: &ViewArgs, extras: &Extras<'_>) -> Result<u8, Stop> {
    let document = spec.clone();
    RESULT_WRITTEN.store(false, Ordering::Relaxed);
    let outcome = match spec {
        TestSpec::Tcp(t) => run_tcp(t, views).await,
        TestSpec::Stamp(t) => run_stamp(t, views, extras.packet_file).await,
        TestSpec::Iperf3(t) => run_iperf3(t, views, extras.iperf3_json).await,
        TestSpec::Server(t) => run_server(t, views).await,
        TestSpec::Echo(t) => run_echo(t, views).await,
        TestSpec::Ttcp(t) => run_ttcp(t, views).await,
        TestSpec::Udp(t) => run_udp(t, views, extras.jitter_file).await,
        TestSpec::Quic(t) => run_quic(t, views, extras.perf_log).await,
        TestSpec::Ndt7(t) => super::ndt7::run_ndt7(t, views).await,
        s @ (TestSpec::Trace(_) | TestSpec::Ping(_)) => super::path::run_path(s, views).await,
        s @ (TestSpec::Owamp(_) | TestSpec::Twamp(_)) => run_latency(s, views).await,
        s @ TestSpec::Dns(_) => super::dns::run_dns(s, views).await,
        s @ (TestSpec::Http(_) | TestSpec::Tls(_)) => super::http::run_web(s, views).await,
    };
    match outcome {
        Err(Stop::Fatal(e)) => {
            write_failed(&document, views, &format!("{e:#}"));
            Err(Stop::Fatal(e))
        }
        // A run that ended and was reported: its status, so that a
        // document's next test still runs.
        Err(Stop::Exit(code)) => Ok(code),
        other => other,
    }
}

/// An OWAMP or TWAMP spec, through the engine with the common views.
async fn run_latency(spec: TestSpec, out: &ViewArgs) -> Result<u8, Stop> {
    let views = Views::open(out, None)?;
    super::run_and_report(spec, RunContext::with_records(out.max_records), views, out, |r| {
        r.summary.failures() > 0
    })
    .await
}

/// Writes the `failed` result of `spec` to `--json`, unless the test
/// already wrote its own result there.
pub(crate) fn write_failed(spec: &TestSpec, views: &ViewArgs, reason: &str) {
    write_failed_result(
        &goodput_engine::run::failed(spec, FailureStage::Setup, reason),
        views,
    );
}

fn write_failed_result(result: &TestResult, views: &ViewArgs) {
    let Some(path) = &views.json else { return };
    if RESULT_WRITTEN.swap(true, Ordering::Relaxed) {
        return;
    }
    if let Err(e) = goodput_report::write_result_json(path, result) {
        eprintln!("goodput: cannot write {}: {e}", path.display());
    }
}

/// Runs a validated spec through the engine (`goodput_engine::run::run`),
/// stopped by SIGINT or SIGTERM. A result ended `failed` is dealt with here
/// (its document, its exit status) and comes back as the error.
pub(crate) async fn engine_run(
    document: &TestSpec,
    context: RunContext,
    views: &mut Views,
    out: &ViewArgs,
) -> Result<TestResult, Stop> {
    let cancel = CancellationToken::new();
    watch_signals(cancel.clone());
    let result = goodput_engine::run::run(document, context, views, cancel.clone()).await;
    if result.end == EndReason::Failed {
        return Err(match failed_run(&result, out, cancel.is_cancelled()) {
            Ok(code) => Stop::Exit(code),
            Err(e) => e,
        });
    }
    Ok(result)
}

/// Ends the command for a result that ended `failed`: the document goes to
/// `--json`; a failure before the peer was contacted ends the program as
/// any run that cannot start (exit 3), one at the peer or during the test
/// is a failed test (exit 1; 130 when it was interrupted).
fn failed_run(result: &TestResult, views: &ViewArgs, cancelled: bool) -> Result<u8, Stop> {
    write_failed_result(result, views);
    let Some(f) = &result.error else {
        return Err(Stop::Fatal(anyhow!("the run failed")));
    };
    match f.stage {
        FailureStage::Setup => Err(Stop::Fatal(anyhow!("{}", in_flags(&f.message)))),
        FailureStage::Test => {
            let kind = result.spec.as_ref().map_or("the", |s| s.kind().name());
            eprintln!("goodput: {kind} test failed: {}", in_flags(&f.message));
            Ok(if cancelled { EXIT_INTERRUPTED } else { EXIT_FAILED })
        }
    }
}

/// The views of test `n` of several: each output file named with `-n`
/// before its extension (standard output stays as it is).
pub(crate) fn numbered_views(v: &ViewArgs, n: Option<usize>) -> ViewArgs {
    let number = |p: &Option<std::path::PathBuf>| -> Option<std::path::PathBuf> {
        let p = p.as_ref()?;
        let Some(n) = n.filter(|_| !goodput_report::is_stdout(p)) else {
            return Some(p.clone());
        };
        let stem = p
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let name = match p.extension() {
            Some(e) => format!("{stem}-{n}.{}", e.to_string_lossy()),
            None => format!("{stem}-{n}"),
        };
        Some(p.with_file_name(name))
    };
    ViewArgs {
        verbosity: v.verbosity,
        status_file: number(&v.status_file),
        connection_file: number(&v.connection_file),
        error_file: number(&v.error_file),
        json: number(&v.json),
        json_stream: number(&v.json_stream),
        max_records: v.max_records,
    }
}
