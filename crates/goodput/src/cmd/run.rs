//! `goodput run FILE`: the specs of a document, run in order.

use super::quic::run_quic;
use super::stamp::run_stamp;
use super::tcp::run_tcp;
use super::udp::run_udp;
use super::{usage, Stop, EXIT_INTERRUPTED, EXIT_OK};
use crate::flags::{RunArgs, ViewArgs};
use anyhow::anyhow;
use goodput_core::spec::TestSpec;
use std::io;

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
    let several = specs.len() > 1;
    let mut status = EXIT_OK;
    for (i, spec) in specs.into_iter().enumerate() {
        let views = numbered_views(&args.views, several.then_some(i + 1));
        let code = match spec {
            TestSpec::Tcp(t) => run_tcp(t, &views).await?,
            TestSpec::Stamp(t) => run_stamp(t, &views, None).await?,
            TestSpec::Udp(t) => run_udp(t, &views, None).await?,
            TestSpec::Quic(t) => run_quic(t, &views, None).await?,
        };
        if status == EXIT_OK {
            status = code;
        }
        if code == EXIT_INTERRUPTED {
            break;
        }
    }
    Ok(status)
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
