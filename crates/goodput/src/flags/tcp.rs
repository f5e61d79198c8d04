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
    /// Send for this long on every connection instead of a --transfer
    /// (the default against a HOST off loopback is 10s, unless --transfer,
    /// --pattern pushpull or --wire cts is given):
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
        // A remote host gets iperf3's 10-second timed test: ctsTraffic's
        // 8 × 1 GiB takes minutes on a slow path. Loopback (the embedded
        // server too) and any explicit size keep the sized test.
        let duration = self.duration.or_else(|| {
            let sized = self.data.transfer.is_some()
                || self.data.pattern == super::PatternArg::Pushpull
                || self.wire == WireArg::Cts;
            let remote = !hosts.is_empty() && !hosts.iter().all(|h| is_loopback(h));
            (remote && !sized).then_some(HumanDuration(DEFAULT_DURATION))
        });
        let status_interval = self.output.status_interval.unwrap_or_else(|| {
            HumanDuration(match duration {
                Some(d) if d.0 <= std::time::Duration::from_secs(60) => super::SHORT_STATUS_INTERVAL,
                _ => super::LONG_STATUS_INTERVAL,
            })
        });
        TcpSpec {
            assert: self.assert.clone(),
            hosts,
            port: self.port,
            family: Family::of(self.ipv4, self.ipv6),
            bind: self.bind.clone(),
            local_port: self.local_port,
            wire: self.wire.spec(),
            pattern: self.data.pattern.spec(),
            transfer: self.data.transfer_or_default(),
            duration,
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
            status_interval,
            idle_timeout: self.output.idle_timeout,
        }
    }
}

/// The length of a timed test `goodput tcp HOST` runs by default.
pub const DEFAULT_DURATION: std::time::Duration = std::time::Duration::from_secs(10);

/// Whether `host` (as written: an address, `[v6]`, or a name) is this
/// machine's loopback: 127.0.0.0/8, ::1 or the name localhost.
pub fn is_loopback(host: &str) -> bool {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    if let Ok(ip) = bare.parse::<IpAddr>() {
        return ip.is_loopback();
    }
    if let Ok(sa) = host.parse::<std::net::SocketAddr>() {
        return sa.ip().is_loopback();
    }
    let name = bare.split(':').next().unwrap_or(bare).trim_end_matches('.');
    name.eq_ignore_ascii_case("localhost") || name.to_ascii_lowercase().ends_with(".localhost")
}

#[cfg(test)]
mod tests {
    use super::is_loopback;

    #[test]
    fn loopback_hosts_are_told_from_remote_ones() {
        for h in [
            "127.0.0.1",
            "127.3.2.1",
            "::1",
            "[::1]",
            "localhost",
            "LOCALHOST.",
            "127.0.0.1:4444",
            "[::1]:4444",
        ] {
            assert!(is_loopback(h), "{h}");
        }
        for h in [
            "10.0.0.1",
            "192.0.2.7",
            "2001:db8::1",
            "example.org",
            "localhost.example.org",
        ] {
            assert!(!is_loopback(h), "{h}");
        }
    }
}
