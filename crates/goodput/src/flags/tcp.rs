//! The flags of `goodput tcp`.

use super::{OutputArgs, PatternArgs, ShutdownArg, SocketArgs, WireArg};
use clap::Args;
use goodput_core::result::ShutdownMode;
use goodput_core::spec::{Family, TcpSpec};
use goodput_core::units::{ByteRate, HumanDuration, PortRange, ValueRange};
use std::net::IpAddr;

#[derive(Debug, Args)]
pub struct TcpArgs {
    /// Server host name or address; every address it resolves to is used,
    /// round robin. Omit it (and --target) to test against an embedded
    /// loopback server.
    pub host: Option<String>,
    /// More server hosts or addresses (repeatable).
    #[arg(long, value_name = "HOST")]
    pub target: Vec<String>,
    /// Server port.
    #[arg(long, short = 'p', default_value_t = 4444)]
    pub port: u16,
    /// Use IPv4 addresses only.
    #[arg(short = '4', conflicts_with = "ipv6")]
    pub ipv4: bool,
    /// Use IPv6 addresses only.
    #[arg(short = '6')]
    pub ipv6: bool,
    /// Local address for outgoing connections (repeatable, round robin per
    /// address family; sets IP_BIND_ADDRESS_NO_PORT).
    #[arg(long, value_name = "ADDR")]
    pub bind: Vec<IpAddr>,
    /// Local port, or a range LOW..HIGH used in turn (0 = ephemeral).
    #[arg(long, default_value = "0", value_name = "PORT|RANGE")]
    pub local_port: PortRange,
    /// Wire protocol.
    #[arg(long, value_enum, default_value = "goodput")]
    pub wire: WireArg,
    #[command(flatten)]
    pub data: PatternArgs,
    /// Per-connection send rate limit in bytes/s (or bits with 'bit'), or a
    /// range picked per connection (default: unlimited).
    #[arg(long, value_name = "RATE|RANGE")]
    pub rate_limit: Option<ValueRange<ByteRate>>,
    /// Quantum over which --rate-limit is enforced.
    #[arg(long, default_value = "100ms", value_name = "DURATION")]
    pub rate_period: HumanDuration,
    /// Sends per burst (with --burst-delay; not with --rate-limit).
    #[arg(
        long,
        requires = "burst_delay",
        conflicts_with = "rate_limit",
        value_name = "N"
    )]
    pub burst_count: Option<u32>,
    /// Pause between bursts.
    #[arg(long, requires = "burst_count", value_name = "DURATION")]
    pub burst_delay: Option<HumanDuration>,
    /// Send for this long on every connection instead of a --transfer:
    /// each sender stops on its own clock and closes its direction, the
    /// receivers report exactly what arrived, and every connection that
    /// gets there succeeds. The headline good-put is the receivers' bytes
    /// over their data-phase time. Push, pull and duplex (not push-pull,
    /// not --wire cts).
    #[arg(long, value_name = "DURATION", conflicts_with = "transfer")]
    pub duration: Option<HumanDuration>,
    /// With --duration: leave the first seconds of each connection's data
    /// phase out of the good-put (the bytes are still sent, counted and
    /// verified), like iperf3 -O.
    #[arg(long, value_name = "DURATION", requires = "duration")]
    pub omit: Option<HumanDuration>,
    /// Concurrent connections; a new one starts as each ends.
    #[arg(long, short = 'c', default_value_t = 8)]
    pub connections: u64,
    /// Passes over --connections (0 = until --time-limit or Ctrl-C).
    #[arg(long, short = 'n', default_value_t = 1)]
    pub iterations: u64,
    /// Most connect attempts pending at once (0 = unlimited).
    #[arg(long, default_value_t = 1000)]
    pub throttle: u64,
    /// How successful connections are closed.
    #[arg(long, value_enum, default_value = "graceful")]
    pub shutdown: ShutdownArg,
    #[command(flatten)]
    pub socket: SocketArgs,
    #[command(flatten)]
    pub output: OutputArgs,
    /// Print the test these flags describe as a spec document (JSON, for
    /// `goodput run`) and exit without running it.
    #[arg(long)]
    pub print_spec: bool,
    /// A pass/fail check on the result (repeatable); its help lists the
    /// kind's figures from the catalogue.
    #[arg(long = "assert", value_name = "EXPR", help = goodput_core::catalogue::assert_help(goodput_core::kind::Kind::Tcp))]
    pub assert: Vec<goodput_core::assertion::Assertion>,
}

impl TcpArgs {
    /// The spec `goodput tcp`'s flags describe.
    pub fn spec(&self) -> TcpSpec {
        let mut hosts: Vec<String> = self.host.iter().cloned().collect();
        hosts.extend(self.target.iter().cloned());
        TcpSpec {
            assert: self.assert.clone(),
            hosts,
            port: self.port,
            family: Family::of(self.ipv4, self.ipv6),
            bind: self.bind.clone(),
            local_port: self.local_port,
            wire: self.wire.spec(),
            pattern: self.data.pattern.spec(),
            transfer: self.data.transfer,
            duration: self.duration,
            omit: self.omit,
            buffer: self.data.buffer,
            push_bytes: self.data.push_bytes,
            pull_bytes: self.data.pull_bytes,
            verify: self.data.verify.spec(),
            rate_limit: self.rate_limit,
            rate_period: self.rate_period,
            burst_count: self.burst_count,
            burst_delay: self.burst_delay,
            connections: self.connections,
            iterations: self.iterations,
            throttle: self.throttle,
            shutdown: match self.shutdown {
                ShutdownArg::Graceful => ShutdownMode::Graceful,
                ShutdownArg::Rude => ShutdownMode::Rude,
                ShutdownArg::Random => ShutdownMode::Random,
            },
            socket: self.socket.spec(),
            time_limit: self.output.time_limit,
            status_interval: self.output.status_interval,
            idle_timeout: self.output.idle_timeout,
        }
    }
}
