//! The flags of `goodput quic`.

use super::ViewArgs;
use clap::Args;
use goodput_core::units::{ByteSize, HumanDuration};
use std::path::PathBuf;

/// `goodput quic`: the QUIC perf client.
#[derive(Debug, Args)]
pub struct QuicArgs {
    /// Server host name or address (default: an embedded goodput server on
    /// loopback).
    pub host: Option<String>,
    /// Server UDP port.
    #[arg(default_value_t = 4433)]
    pub port: u16,
    /// picoquic scenario: `*1:397:5000000;` (repeat, post size, response
    /// size), `=id:=after:*N:post:response`, a response size of `-N`
    /// (unlimited, STOP_SENDING after N bytes), media `s30:n150:2000` and datagrams
    /// `d50:n250:100`; the legacy `*1:0:-:397:5000000;` form is translated.
    /// Post sizes count the 8-byte request header (16 for media), as
    /// picoquic counts them. Default: one 100,000,000-byte download.
    pub scenario: Option<String>,
    /// The scenario, as an option (so it can be given without HOST, to the
    /// embedded server).
    #[arg(
        long = "scenario",
        short = 's',
        value_name = "SCENARIO",
        conflicts_with = "scenario"
    )]
    pub scenario_flag: Option<String>,
    /// Upload SIZE bytes after the 8-byte header (quinn-perf's count), or
    /// for a DURATION (`10s`).
    #[arg(long, value_name = "SIZE|DURATION", conflicts_with_all = ["scenario", "scenario_flag", "download", "rps", "latency", "handshakes"])]
    pub upload: Option<String>,
    /// Download SIZE bytes, or for a DURATION (an unlimited request ended by
    /// STOP_SENDING).
    #[arg(long, value_name = "SIZE|DURATION", conflicts_with_all = ["scenario", "scenario_flag", "rps", "latency", "handshakes"])]
    pub download: Option<String>,
    /// Requests per second: keep --streams requests outstanding per
    /// connection for --duration.
    #[arg(long, conflicts_with_all = ["scenario", "scenario_flag", "latency", "handshakes"])]
    pub rps: bool,
    /// One request at a time per connection (latency).
    #[arg(long, conflicts_with_all = ["scenario", "scenario_flag", "handshakes"])]
    pub latency: bool,
    /// Open and close connections as fast as possible for --duration.
    #[arg(long, conflicts_with_all = ["scenario", "scenario_flag"])]
    pub handshakes: bool,
    /// Requests outstanding per connection with --rps.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub streams: u32,
    /// Request payload bytes with --rps/--latency (after the 8-byte header).
    #[arg(long, default_value = "512", value_name = "SIZE")]
    pub request: ByteSize,
    /// Response bytes with --rps/--latency.
    #[arg(long, default_value = "4000", value_name = "SIZE")]
    pub response: ByteSize,
    /// Length of --rps, --latency and --handshakes runs.
    #[arg(long, default_value = "10s", value_name = "DURATION")]
    pub duration: HumanDuration,
    /// Connections at once, each running the whole scenario.
    #[arg(long, short = 'c', default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub connections: u32,
    /// Ask for responses on unidirectional streams (quinn-perf's --uni).
    #[arg(long)]
    pub uni: bool,
    /// The largest UDP payload of a QUIC packet, bytes, both ways: path
    /// MTU discovery stops there and the server is told to send no larger
    /// (1200-65527). Default: discovery up to 6500. quinn perf's packets
    /// are 1452 bytes; give the same to compare at the same packet size.
    #[arg(long, value_name = "BYTES")]
    pub max_mtu: Option<u16>,
    /// Trust certificates from this PEM file (default: the system's roots;
    /// with no HOST, the embedded server's certificate is accepted).
    #[arg(long, value_name = "FILE", conflicts_with = "insecure")]
    pub ca: Option<PathBuf>,
    /// Accept any server certificate (signatures are still checked).
    #[arg(long)]
    pub insecure: bool,
    /// TLS server name (default: HOST, or localhost for an address).
    #[arg(long, value_name = "NAME")]
    pub sni: Option<String>,
    /// Use IPv4 only.
    #[arg(short = '4', conflicts_with = "ipv6")]
    pub ipv4: bool,
    /// Use IPv6 only.
    #[arg(short = '6')]
    pub ipv6: bool,
    /// Append picoquic's performance-log CSV (Log_v 2, ", "-separated),
    /// one row per connection.
    #[arg(long, value_name = "FILE")]
    pub perf_log: Option<PathBuf>,
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
    #[arg(long = "assert", value_name = "EXPR", help = goodput_core::catalogue::assert_help(goodput_core::kind::Kind::Quic))]
    pub assert: Vec<goodput_core::assertion::Assertion>,
}
