//! `goodput agent`'s flags.

use clap::Args;
use std::path::PathBuf;

/// The measurement agent. This build reads and checks a mesh
/// configuration and prints the tasks this host would run; the daemon that
/// runs them is not built yet.
#[derive(Debug, Args)]
pub struct AgentArgs {
    /// The mesh configuration (JSON, or TOML for a .toml name; `-` reads
    /// standard input): addresses, groups, tests, schedules, tasks.
    #[arg(long, value_name = "FILE")]
    pub config: PathBuf,
    /// Check the configuration and print the tasks this host will run and
    /// with whom, then exit (exit status 2 if the configuration is wrong).
    #[arg(long)]
    pub check_config: bool,
    /// Who this host is: an address or a name from the configuration
    /// (repeatable; default: the addresses on this host's interfaces and
    /// its host name).
    #[arg(long = "as", value_name = "ADDRESS|NAME")]
    pub identity: Vec<String>,
}
