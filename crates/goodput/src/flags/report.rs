//! The flags of `goodput report`.

use clap::Args;
use std::path::PathBuf;

/// `goodput report`: an HTML report (and PNG charts) from result documents.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Result documents (`--json` of any command, or `goodput run`'s; a
    /// file may hold several documents, one after another or in an array).
    #[arg(required = true, value_name = "RESULT.json")]
    pub results: Vec<PathBuf>,
    /// A baseline result: each run is compared with it, headline figure by
    /// headline figure (the difference and the change in percent).
    #[arg(long, short = 'b', value_name = "RESULT.json")]
    pub baseline: Option<PathBuf>,
    /// The HTML file written (self-contained: no script, no font, nothing
    /// fetched); `-` writes to standard output.
    #[arg(long, short = 'o', default_value = "report.html", value_name = "FILE")]
    pub output: PathBuf,
    /// Also write each chart as a PNG file into this directory (made if
    /// missing), named after the run's number and what it shows.
    #[arg(long, value_name = "DIR")]
    pub png: Option<PathBuf>,
    /// The largest document read, in MiB (a larger one is refused).
    #[arg(long, default_value_t = 256, value_name = "MiB")]
    pub max_input_mib: u64,
}
