//! The flags of `goodput stamp`.

use super::ViewArgs;
use clap::Args;
use goodput_core::units::HumanDuration;
use std::net::IpAddr;
use std::path::PathBuf;

/// `goodput stamp`: a STAMP Session-Sender.
#[derive(Debug, Args)]
pub struct StampArgs {
    /// Reflector host name or address (default: an embedded goodput
    /// reflector on loopback).
    pub host: Option<String>,
    /// Reflector UDP port.
    #[arg(long, short = 'p', default_value_t = 862)]
    pub port: u16,
    /// Time between packets of one session.
    #[arg(
        long,
        short = 'i',
        default_value = "100ms",
        value_name = "DURATION",
        conflicts_with = "rate"
    )]
    pub interval: HumanDuration,
    /// Packets per second per session (instead of --interval).
    #[arg(long, value_name = "PPS")]
    pub rate: Option<f64>,
    /// Packets per session (default 100 when no --duration is given).
    #[arg(long, short = 'c', value_name = "N")]
    pub count: Option<u64>,
    /// Send for this long (with --count, whichever ends first).
    #[arg(long, short = 'd', value_name = "DURATION")]
    pub duration: Option<HumanDuration>,
    /// UDP payload per packet in bytes: the 44-byte STAMP packet plus zero
    /// padding (44-9000).
    #[arg(long, short = 's', default_value_t = 44, value_name = "BYTES")]
    pub size: usize,
    /// DSCP of the test packets (0-63).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=63))]
    pub dscp: u8,
    /// RFC 8972 session id (1-65535); session i sends SSID + i.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    pub ssid: Option<u16>,
    /// How long a reply may take before its packet counts as lost.
    #[arg(long, short = 'L', default_value = "2s", value_name = "DURATION")]
    pub timeout: HumanDuration,
    /// Concurrent sessions, each from its own UDP port.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub sessions: u32,
    /// Local address to send from.
    #[arg(long, short = 'B', value_name = "ADDR")]
    pub bind: Option<IpAddr>,
    /// Use IPv4 only.
    #[arg(short = '4', conflicts_with = "ipv6")]
    pub ipv4: bool,
    /// Use IPv6 only.
    #[arg(short = '6')]
    pub ipv6: bool,
    /// The embedded reflector (no HOST) keeps per-session sequence numbers,
    /// so loss splits into forward and backward.
    #[arg(long)]
    pub stateful: bool,
    /// Every packet's fate (CSV for a .csv name, text otherwise): times T1-T4
    /// in Unix ns, delays in µs, TTLs.
    #[arg(long, value_name = "FILE")]
    pub packet_file: Option<PathBuf>,
    /// Status line period.
    #[arg(long, default_value = "1s", value_name = "DURATION")]
    pub status_interval: HumanDuration,
    #[command(flatten)]
    pub views: ViewArgs,
    /// Print the test these flags describe as a spec document (JSON, for
    /// `goodput run`) and exit without running it.
    #[arg(long)]
    pub print_spec: bool,
    /// A pass/fail check on the result (repeatable); its help lists the
    /// kind's figures from the catalogue.
    #[arg(long = "assert", value_name = "EXPR", help = goodput_core::catalogue::assert_help(goodput_core::kind::Kind::Stamp))]
    pub assert: Vec<goodput_core::assertion::Assertion>,
}
