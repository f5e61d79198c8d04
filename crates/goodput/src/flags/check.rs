//! The flags of `goodput check`.

use clap::{Args, ValueEnum};
use goodput_core::units::HumanDuration;

/// How the window's runs become one value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StatArg {
    /// The mean of the runs' values.
    Mean,
    /// The smallest.
    Min,
    /// The largest.
    Max,
    /// The newest run's.
    Last,
}

/// `goodput check`: a Nagios/Icinga plugin over an agent's archive.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The agent whose archive is asked: its API's URL
    /// (http://host:8780).
    #[arg(long, short = 'H', value_name = "URL")]
    pub agent: String,
    /// The agent's certificate fingerprint (SHA-256), for an https://
    /// agent: only that certificate is accepted.
    #[arg(long, value_name = "SHA256")]
    pub pin: Option<String>,
    /// The pair's source (a name of the mesh's addresses).
    #[arg(long, short = 's', value_name = "NAME")]
    pub source: Option<String>,
    /// The pair's destination.
    #[arg(long, short = 'd', value_name = "NAME")]
    pub dest: Option<String>,
    /// The kind of test (default: the metric's: tcp for throughput and
    /// errors, stamp for loss, delay and jitter, owamp for one-way delay,
    /// trace for hops).
    #[arg(long, value_name = "KIND")]
    pub kind: Option<String>,
    /// A measurement key instead of source, dest and kind.
    #[arg(long, value_name = "KEY")]
    pub key: Option<String>,
    /// What to check: throughput_up, throughput_down (printed in Mbit/s),
    /// loss (%), delay_median, delay_p95 (round trip), jitter,
    /// owd_forward_median, owd_backward_median (one way, synchronised
    /// clocks only; all in ms), errors, hops.
    #[arg(long, short = 'm', value_name = "METRIC")]
    pub metric: String,
    /// The window of runs looked at, ending now.
    #[arg(long, short = 'r', default_value = "30m", value_name = "DURATION")]
    pub window: HumanDuration,
    /// How the window's runs become one value.
    #[arg(long, value_enum, default_value = "mean")]
    pub stat: StatArg,
    /// WARNING range, the plugin guidelines' [@][START:][END]: '0' for
    /// any loss, '900:' below 900 Mbit/s, '~:20' above 20 ms; numbers take
    /// the metric's unit (900Mbit, 5ms, 1%) or none (the printed unit).
    #[arg(long, short = 'w', value_name = "RANGE", allow_hyphen_values = true)]
    pub warning: Option<String>,
    /// CRITICAL range, as --warning; checked first.
    #[arg(long, short = 'c', value_name = "RANGE", allow_hyphen_values = true)]
    pub critical: Option<String>,
    /// How long the agent may take to answer (then UNKNOWN).
    #[arg(long, short = 't', default_value = "10s", value_name = "DURATION")]
    pub timeout: HumanDuration,
}
