//! The flags of `goodput ndt7`.

use super::ViewArgs;
use clap::Args;
use std::path::PathBuf;

/// `goodput ndt7`: M-Lab's ndt7 speed test against any ndt7 server.
#[derive(Debug, Args)]
pub struct Ndt7Args {
    /// The ndt7 server: ws://HOST[:PORT] or wss://HOST[:PORT] (a goodput
    /// server with --ndt7, an agent's beacon, an M-Lab ndt-server); a
    /// subtest's own URL (…/ndt/v7/download) reads too.
    pub url: String,
    /// Run only the download subtest.
    #[arg(long, conflicts_with = "upload_only")]
    pub download_only: bool,
    /// Run only the upload subtest.
    #[arg(long)]
    pub upload_only: bool,
    /// Trust certificates from this PEM file for wss:// (default: the
    /// system's roots).
    #[arg(long, value_name = "FILE", conflicts_with = "insecure")]
    pub ca: Option<PathBuf>,
    /// Accept any server certificate for wss:// (signatures are still
    /// checked).
    #[arg(long)]
    pub insecure: bool,
    #[command(flatten)]
    pub views: ViewArgs,
    /// Print the test these flags describe as a spec document (JSON, for
    /// `goodput run`) and exit without running it.
    #[arg(long)]
    pub print_spec: bool,
    /// A pass/fail check on the result (repeatable); its help lists the
    /// kind's figures from the catalogue.
    #[arg(long = "assert", value_name = "EXPR", help = goodput_core::catalogue::assert_help(goodput_core::kind::Kind::Ndt7))]
    pub assert: Vec<goodput_core::assertion::Assertion>,
}
