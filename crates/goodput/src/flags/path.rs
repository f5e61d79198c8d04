//! The flags of `goodput trace` and `goodput ping`.

use super::ViewArgs;
use clap::{Args, ValueEnum};
use goodput_core::units::HumanDuration;
use std::net::IpAddr;

/// How trace probes go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ProbeArg {
    /// UDP datagrams to rising ports (traceroute's and tracepath's way).
    Udp,
    /// TCP SYNs to --port (a connect per probe): for paths that drop UDP.
    Tcp,
    /// ICMP echo on an unprivileged ICMP socket (where
    /// net.ipv4.ping_group_range lets this user).
    Icmp,
}

/// `goodput trace`: the hops to a host, without root.
#[derive(Debug, Args)]
pub struct TraceArgs {
    /// Destination name or address.
    pub host: String,
    /// What the probes are.
    #[arg(long, short = 'M', value_enum, default_value = "udp")]
    pub method: ProbeArg,
    /// Destination port: UDP's first (33434; each probe the next), TCP's
    /// (80). Not with icmp.
    #[arg(long, short = 'p')]
    pub port: Option<u16>,
    /// First TTL (hop limit) to probe.
    #[arg(long, short = 'f', default_value_t = 1, value_name = "TTL")]
    pub first_hop: u8,
    /// Last TTL to probe when the destination has not answered.
    #[arg(long, short = 'm', default_value_t = 30, value_name = "TTL")]
    pub max_hops: u8,
    /// Probes per hop (1-10).
    #[arg(long, short = 'q', default_value_t = 3, value_name = "N")]
    pub probes: u32,
    /// How long a probe waits for its answer at most.
    #[arg(long, short = 'w', default_value = "1s", value_name = "DURATION")]
    pub wait: HumanDuration,
    /// Stop waiting after this many times the RTT of an answer from the
    /// probe's own hop (traceroute's HERE; 0: wait the whole --wait).
    #[arg(long, default_value_t = 3.0, value_name = "FACTOR")]
    pub wait_here: f64,
    /// Stop waiting after this many times the RTT of an answer from a
    /// later hop (traceroute's NEAR), so a silent router costs little when
    /// the hops beyond it answer; at least 10 ms either way.
    #[arg(long, default_value_t = 10.0, value_name = "FACTOR")]
    pub wait_near: f64,
    /// Probes in flight at once, over several hops (traceroute's -N).
    #[arg(long, short = 'N', default_value_t = 16, value_name = "N")]
    pub in_flight: u32,
    /// Path MTU discovery: probes with DF set from the interface's MTU (or
    /// --size) down, as routers tell; the hop where it drops, and a check
    /// for a black hole (a size that gets neither an answer nor an ICMP).
    #[arg(long)]
    pub pmtu: bool,
    /// IP packet size of the probes in bytes (60 for IPv4 and 80 for IPv6;
    /// with --pmtu, the first size tried).
    #[arg(long, short = 's', value_name = "BYTES")]
    pub size: Option<u32>,
    /// Look up reverse names of the hops (off by default, so a trace sends
    /// nothing but its probes; each lookup waits at most 2 s).
    #[arg(long)]
    pub names: bool,
    /// Local address to send from.
    #[arg(long, short = 'B', value_name = "ADDR")]
    pub bind: Option<IpAddr>,
    /// Use IPv4 only.
    #[arg(short = '4', conflicts_with = "ipv6")]
    pub ipv4: bool,
    /// Use IPv6 only.
    #[arg(short = '6')]
    pub ipv6: bool,
    #[command(flatten)]
    pub views: ViewArgs,
    /// Print the test these flags describe as a spec document (JSON, for
    /// `goodput run`) and exit without running it.
    #[arg(long)]
    pub print_spec: bool,
    /// A pass/fail check on the result (repeatable); its help lists the
    /// kind's figures from the catalogue.
    #[arg(long = "assert", value_name = "EXPR", help = goodput_core::catalogue::assert_help(goodput_core::kind::Kind::Trace))]
    pub assert: Vec<goodput_core::assertion::Assertion>,
}

/// How ping measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PingArg {
    /// ICMP echo where this user may open an ICMP socket (or a raw one),
    /// else TCP.
    Auto,
    /// ICMP echo only.
    Icmp,
    /// TCP connect time to --port only.
    Tcp,
}

/// `goodput ping`: round trips to a host.
#[derive(Debug, Args)]
pub struct PingArgs {
    /// Destination name or address.
    pub host: String,
    /// ICMP echo (on an unprivileged ICMP socket, or on a raw one where
    /// this user may open one, as root may), TCP connect time (a reset
    /// from a closed port is counted apart, never as an answer), or ICMP
    /// where allowed and TCP where not.
    #[arg(long, short = 'M', value_enum, default_value = "auto")]
    pub method: PingArg,
    /// TCP's port.
    #[arg(long, short = 'p', default_value_t = 80)]
    pub port: u16,
    /// Requests to send.
    #[arg(long, short = 'c', default_value_t = 5, value_name = "N")]
    pub count: u64,
    /// Time between requests.
    #[arg(long, short = 'i', default_value = "1s", value_name = "DURATION")]
    pub interval: HumanDuration,
    /// How long a request waits for its reply.
    #[arg(long, short = 'W', default_value = "1s", value_name = "DURATION")]
    pub timeout: HumanDuration,
    /// ICMP echo data bytes (after the 8-byte header).
    #[arg(long, short = 's', default_value_t = 56, value_name = "BYTES")]
    pub size: u32,
    /// Local address to send from.
    #[arg(long, short = 'B', value_name = "ADDR")]
    pub bind: Option<IpAddr>,
    /// Use IPv4 only.
    #[arg(short = '4', conflicts_with = "ipv6")]
    pub ipv4: bool,
    /// Use IPv6 only.
    #[arg(short = '6')]
    pub ipv6: bool,
    #[command(flatten)]
    pub views: ViewArgs,
    /// Print the test these flags describe as a spec document (JSON, for
    /// `goodput run`) and exit without running it.
    #[arg(long)]
    pub print_spec: bool,
    /// A pass/fail check on the result (repeatable); its help lists the
    /// kind's figures from the catalogue.
    #[arg(long = "assert", value_name = "EXPR", help = goodput_core::catalogue::assert_help(goodput_core::kind::Kind::Ping))]
    pub assert: Vec<goodput_core::assertion::Assertion>,
}
