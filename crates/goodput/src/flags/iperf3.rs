//! The flags of `goodput iperf3`.

use super::ViewArgs;
use clap::Args;
use goodput_core::units::HumanDuration;
use goodput_core::units::{BitRate as Iperf3Rate, Iperf3Size};
use std::net::IpAddr;
use std::path::PathBuf;

/// `goodput iperf3`: iperf3's own option letters.
#[derive(Debug, Args)]
pub struct Iperf3Args {
    /// iperf3 server host name or address (default: an embedded goodput
    /// iperf3 server on loopback).
    pub host: Option<String>,
    /// Server port.
    #[arg(long, short = 'p', default_value_t = 5201)]
    pub port: u16,
    /// Test length in seconds (ignored with -n or -k).
    #[arg(long, short = 't', default_value_t = 10, value_name = "SECONDS")]
    pub time: u32,
    /// End after this many bytes (sent, or received with -R).
    #[arg(
        long = "bytes",
        short = 'n',
        value_name = "SIZE",
        conflicts_with = "blockcount"
    )]
    pub bytes: Option<Iperf3Size>,
    /// End after this many blocks (of -l bytes).
    #[arg(long, short = 'k', value_name = "N")]
    pub blockcount: Option<u64>,
    /// Parallel streams per direction (1-128).
    #[arg(long, short = 'P', default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=128))]
    pub parallel: u32,
    /// Reverse: the server sends.
    #[arg(long, short = 'R', conflicts_with = "bidir")]
    pub reverse: bool,
    /// Both directions at once (-P streams each way).
    #[arg(long)]
    pub bidir: bool,
    /// UDP instead of TCP.
    #[arg(long, short = 'u')]
    pub udp: bool,
    /// Target rate per stream in bits/s (UDP default 1M = 1048576; TCP
    /// default unlimited).
    #[arg(long, short = 'b', value_name = "RATE")]
    pub bitrate: Option<Iperf3Rate>,
    /// Block (TCP write) or datagram (UDP) size (TCP default 128K; UDP
    /// default 1460).
    #[arg(long, short = 'l', value_name = "SIZE")]
    pub length: Option<Iperf3Size>,
    /// Socket buffer size (SO_SNDBUF and SO_RCVBUF) on both ends.
    #[arg(long, short = 'w', value_name = "SIZE")]
    pub window: Option<Iperf3Size>,
    /// TCP congestion control algorithm on both ends.
    #[arg(long, short = 'C', value_name = "ALGO")]
    pub congestion: Option<String>,
    /// TCP maximum segment size, bytes.
    #[arg(long = "set-mss", short = 'M', value_name = "BYTES")]
    pub mss: Option<u32>,
    /// TCP_NODELAY on the data connections.
    #[arg(long = "no-delay", short = 'N')]
    pub no_delay: bool,
    /// Seconds to leave out of the figures at the start.
    #[arg(long, short = 'O', default_value_t = 0, value_name = "SECONDS")]
    pub omit: u32,
    /// IP type of service byte (0-255; DSCP × 4).
    #[arg(long, short = 'S', default_value_t = 0, value_name = "TOS")]
    pub tos: u8,
    /// Local port of the first data stream (the others use the next ports).
    #[arg(long, value_name = "PORT")]
    pub cport: Option<u16>,
    /// Local address to bind.
    #[arg(long, short = 'B', value_name = "ADDR")]
    pub bind: Option<IpAddr>,
    /// Use IPv4 only.
    #[arg(short = '4', conflicts_with = "ipv6")]
    pub ipv4: bool,
    /// Use IPv6 only.
    #[arg(short = '6')]
    pub ipv6: bool,
    /// Ask the server for its own report and show it.
    #[arg(long)]
    pub get_server_output: bool,
    /// 64-bit UDP sequence numbers.
    #[arg(long)]
    pub udp_counters_64bit: bool,
    /// Send the digits 0-9 repeated instead of random bytes.
    #[arg(long)]
    pub repeating_payload: bool,
    /// Title, echoed into both ends' JSON.
    #[arg(long, short = 'T')]
    pub title: Option<String>,
    /// Extra data string, echoed into both ends' JSON.
    #[arg(long)]
    pub extra_data: Option<String>,
    /// Status interval.
    #[arg(long, short = 'i', default_value = "1s", value_name = "DURATION")]
    pub interval: HumanDuration,
    /// How long a connect or a server answer may take.
    #[arg(long, default_value = "30s", value_name = "DURATION")]
    pub timeout: HumanDuration,
    /// Also write the result in iperf3's -J JSON shape to FILE ("-" = stdout).
    #[arg(long, value_name = "FILE")]
    pub iperf3_json: Option<PathBuf>,
    #[command(flatten)]
    pub views: ViewArgs,
    /// Print the test these flags describe as a spec document (JSON, for
    /// `goodput run`) and exit without running it.
    #[arg(long)]
    pub print_spec: bool,
    /// A pass/fail check on the result (repeatable); its help lists the
    /// kind's figures from the catalogue.
    #[arg(long = "assert", value_name = "EXPR", help = goodput_core::catalogue::assert_help(goodput_core::kind::Kind::Iperf3))]
    pub assert: Vec<goodput_core::assertion::Assertion>,
}
