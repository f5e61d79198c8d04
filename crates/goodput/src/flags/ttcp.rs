//! The flags of `goodput ttcp`.

use super::ViewArgs;
use clap::Args;
use goodput_core::units::{ByteSize, HumanDuration};
use std::net::IpAddr;

/// `goodput ttcp`: ttcp's own option letters.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("role").required(true).args(["transmit", "receive"])))]
pub struct TtcpArgs {
    /// Transmit: connect to HOST and send.
    #[arg(short = 't', requires = "host")]
    pub transmit: bool,
    /// Receive: accept one connection (or UDP datagrams) and read to the end.
    #[arg(short = 'r', conflicts_with = "host")]
    pub receive: bool,
    /// Where to send (with -t).
    pub host: Option<String>,
    /// Bytes per write / read call.
    #[arg(short = 'l', default_value_t = 8192, value_name = "BUFLEN")]
    pub buflen: usize,
    /// Buffers to send (with -t).
    #[arg(short = 'n', default_value_t = 2048, value_name = "NBUF")]
    pub nbuf: u64,
    /// Port to send to or receive on.
    #[arg(short = 'p', default_value_t = 5001)]
    pub port: u16,
    /// UDP instead of TCP (4-byte datagrams mark the start and the end).
    #[arg(short = 'u')]
    pub udp: bool,
    /// TCP_NODELAY on the transmitter.
    #[arg(short = 'D')]
    pub nodelay: bool,
    /// Socket buffer size: SO_SNDBUF transmitting, SO_RCVBUF receiving.
    #[arg(short = 'b', value_name = "SIZE")]
    pub sockbuf: Option<ByteSize>,
    /// Source and sink the pattern in memory (on by default); with
    /// --sinkmode=false the transmitter sends standard input and the
    /// receiver writes what arrives to standard output.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1,
          default_missing_value = "true", value_name = "BOOL")]
    pub sinkmode: bool,
    /// Receiver address (default :: with IPv4 too).
    #[arg(long, short = 'B', value_name = "ADDR", requires = "receive")]
    pub bind: Option<IpAddr>,
    /// Use IPv4 only.
    #[arg(short = '4', conflicts_with = "ipv6")]
    pub ipv4: bool,
    /// Use IPv6 only.
    #[arg(short = '6')]
    pub ipv6: bool,
    /// UDP receiver: end a transfer when nothing arrives for this long
    /// (its end markers were lost).
    #[arg(long, default_value = "5s", value_name = "DURATION")]
    pub udp_idle: HumanDuration,
    #[command(flatten)]
    pub views: ViewArgs,
    /// Print the test these flags describe as a spec document (JSON, for
    /// `goodput run`) and exit without running it.
    #[arg(long)]
    pub print_spec: bool,
    /// A pass/fail check on the result (repeatable); its help lists the
    /// kind's figures from the catalogue.
    #[arg(long = "assert", value_name = "EXPR", help = goodput_core::catalogue::assert_help(goodput_core::kind::Kind::Ttcp))]
    pub assert: Vec<goodput_core::assertion::Assertion>,
}
