//! The flags of `goodput echo`.

use super::{parse_millis, ViewArgs};
use clap::Args;
use goodput_core::units::{ByteSize, HumanDuration};
use std::path::PathBuf;

/// `goodput echo`: the echo load test.
#[derive(Debug, Args)]
pub struct EchoArgs {
    /// The echo server, HOST:PORT ([v6]:PORT), or HOST with --port.
    pub target: String,
    /// Port, when TARGET has none.
    #[arg(long, short = 'p', default_value_t = 7)]
    pub port: u16,
    /// Connections to create.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub connections: u64,
    /// Start connections in groups of this many (default: all at once).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub batch_size: Option<u64>,
    /// Pause between groups (a bare number is milliseconds).
    #[arg(long, default_value = "1000", value_name = "MS", value_parser = parse_millis)]
    pub batch_delay: HumanDuration,
    /// Messages per connection (0: connect only).
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub messages: u64,
    /// Bytes per message.
    #[arg(long, default_value = "1024", value_name = "SIZE")]
    pub message_size: ByteSize,
    /// Time between messages on a connection (a bare number is milliseconds).
    #[arg(long, default_value = "1000", value_name = "MS", value_parser = parse_millis)]
    pub message_rate: HumanDuration,
    /// Closed loop: start the timer for the next message only when the
    /// previous echo is back. Without it the schedule is open loop and each
    /// round trip is measured from the message's scheduled send time.
    #[arg(long)]
    pub send_after_recv: bool,
    /// Connect one at a time (maximum connections test) instead of all at
    /// once (connection storm test).
    #[arg(long)]
    pub sync_connect: bool,
    /// Keep every connection open until all are done.
    #[arg(long)]
    pub hold: bool,
    /// After all are done, keep them open until Enter is pressed (or, when
    /// standard input is not a terminal, for --hold-for).
    #[arg(long)]
    pub pause: bool,
    /// After all are done, keep them open this long.
    #[arg(long, value_name = "DURATION")]
    pub hold_for: Option<HumanDuration>,
    /// Create every socket before the clock starts (messages are slices of
    /// one pattern built beforehand in any case).
    #[arg(long)]
    pub preallocate: bool,
    /// TLS to the server (give --ca or --insecure).
    #[arg(long)]
    pub tls: bool,
    /// With --tls: accept any certificate (encrypted, not authenticated).
    #[arg(long, requires = "tls", conflicts_with = "ca")]
    pub insecure: bool,
    /// With --tls: trust certificates that chain to the CA certificates in
    /// this PEM file.
    #[arg(long, value_name = "FILE", requires = "tls")]
    pub ca: Option<PathBuf>,
    /// With --tls: the server name sent (SNI) and checked (default: the
    /// host as given).
    #[arg(long, value_name = "NAME", requires = "tls")]
    pub sni: Option<String>,
    /// Longest connect (with --tls, including the handshake).
    #[arg(long, default_value = "10s", value_name = "DURATION")]
    pub connect_timeout: HumanDuration,
    /// Longest wait for an echo to make progress.
    #[arg(long, default_value = "10s", value_name = "DURATION")]
    pub reply_timeout: HumanDuration,
    /// Use IPv4 only.
    #[arg(short = '4', conflicts_with = "ipv6")]
    pub ipv4: bool,
    /// Use IPv6 only.
    #[arg(short = '6')]
    pub ipv6: bool,
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
    #[arg(long = "assert", value_name = "EXPR", help = goodput_core::catalogue::assert_help(goodput_core::kind::Kind::Echo))]
    pub assert: Vec<goodput_core::assertion::Assertion>,
}
