//! The flags of `goodput udp`.

use super::{VerifyArg, ViewArgs};
use clap::Args;
use goodput_core::units::BitRate as Iperf3Rate;
use goodput_core::units::HumanDuration;
use std::net::IpAddr;
use std::path::PathBuf;

/// `goodput udp`: media streams.
#[derive(Debug, Args)]
pub struct UdpArgs {
    /// Server host name or address (default: an embedded goodput server on
    /// loopback).
    pub host: Option<String>,
    /// Server UDP port.
    #[arg(long, short = 'p', default_value_t = 4444)]
    pub port: u16,
    /// Stream bit rate, bits/s (k, m, g ×1000), rounded down to whole
    /// bytes; datagram headers count towards it, as in ctsTraffic.
    #[arg(long, short = 'b', default_value = "25M", value_name = "RATE")]
    pub bitrate: Iperf3Rate,
    /// Frames per second.
    #[arg(long, default_value_t = 60, value_name = "FPS", value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub frame_rate: u32,
    /// Stream length, whole seconds (frames = length × frame rate).
    #[arg(long, default_value = "10s", value_name = "DURATION")]
    pub length: HumanDuration,
    /// Play-out delay: frames are played this long after the stream opens,
    /// one per frame interval; a frame not complete by then is dropped.
    #[arg(long, default_value = "1s", value_name = "DURATION")]
    pub buffer_depth: HumanDuration,
    /// Largest UDP datagram (payload incl. the 34-byte header), bytes.
    #[arg(long, default_value_t = 1400, value_name = "BYTES")]
    pub datagram_size: u32,
    /// Concurrent streams, each from its own UDP socket.
    #[arg(long, short = 'c', default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub connections: u32,
    /// Streams each connection runs in turn (0 = until --time-limit or Ctrl-C).
    #[arg(long, default_value_t = 1)]
    pub iterations: u64,
    /// The client streams to the server, which plays out and reports back.
    #[arg(long)]
    pub upload: bool,
    /// data: check every payload against the pattern; connection: count only.
    #[arg(long, value_enum, default_value = "data")]
    pub verify: VerifyArg,
    /// DSCP of the datagrams (0-63).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=63))]
    pub dscp: u8,
    /// Local address to send from (repeatable, round robin).
    #[arg(long, short = 'B', value_name = "ADDR")]
    pub bind: Vec<IpAddr>,
    /// Use IPv4 only.
    #[arg(short = '4', conflicts_with = "ipv6")]
    pub ipv4: bool,
    /// Use IPv6 only.
    #[arg(short = '6')]
    pub ipv6: bool,
    /// Every received datagram (CSV): stream, sequence, frame, send time
    /// (sender's monotonic ns), receive time (Unix ns), time in flight
    /// relative to the first datagram (µs), IPDV (µs), fate.
    #[arg(long, value_name = "FILE")]
    pub jitter_file: Option<PathBuf>,
    /// Stop after this long (open streams are recorded as aborted).
    #[arg(long, alias = "duration", value_name = "DURATION")]
    pub time_limit: Option<HumanDuration>,
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
    #[arg(long = "assert", value_name = "EXPR", help = goodput_core::catalogue::assert_help(goodput_core::kind::Kind::Udp))]
    pub assert: Vec<goodput_core::assertion::Assertion>,
}
