//! `goodput tcp` as a document.

use std::net::IpAddr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::SpecError;
use crate::alert;
use crate::assertion::{Assertion, Figure};
use crate::kind::{ms, target, BeaconService, Kind, KindSpec, Marking, Reach, Target};
use crate::plan::TcpPattern;
use crate::result::ShutdownMode;
use crate::schedule::{Ms, RunClass};
use crate::session::VerifyMode;
use crate::units::{ByteRate, ByteSize, HumanDuration, PortRange, ValueRange};

/// The largest send/recv buffer a test may use, bytes (64 MiB).
pub const MAX_BUFFER: u64 = 64 << 20;

/// The TCP wire protocol a client speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TcpWire {
    /// goodput's session protocol: parameters negotiated in-band.
    #[default]
    Goodput,
    /// ctsTraffic's protocol: both ends need the same pattern, transfer,
    /// segments and verification.
    Cts,
}

/// Which address family to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Family {
    /// Every address a host resolves to.
    #[default]
    Any,
    /// IPv4 only (`-4`).
    Ipv4,
    /// IPv6 only (`-6`).
    Ipv6,
}

impl Family {
    /// The family of the `-4` and `-6` flags.
    pub fn of(ipv4: bool, ipv6: bool) -> Self {
        match (ipv4, ipv6) {
            (true, _) => Family::Ipv4,
            (_, true) => Family::Ipv6,
            _ => Family::Any,
        }
    }
}

/// Socket options for every data connection.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct SocketSpec {
    /// SO_SNDBUF (default: the kernel's autotuning).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub send_buffer: Option<ByteSize>,
    /// SO_RCVBUF (default: the kernel's autotuning).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recv_buffer: Option<ByteSize>,
    /// TCP_NODELAY.
    pub no_delay: bool,
    /// TCP_CONGESTION algorithm, e.g. cubic, bbr.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub congestion: Option<String>,
    /// DSCP code point 0-63.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dscp: Option<u8>,
    /// TCP keepalive idle time before probes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keepalive: Option<HumanDuration>,
    /// SO_BINDTODEVICE interface.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interface: Option<String>,
}

impl SocketSpec {
    /// A DSCP of 0-63 and socket buffers below 4 GiB.
    pub fn validate(&self) -> Result<(), SpecError> {
        if self.dscp.is_some_and(|d| d > 63) {
            return Err(SpecError::new("socket.dscp", "must be 0-63"));
        }
        for (field, v) in [
            ("socket.send_buffer", self.send_buffer),
            ("socket.recv_buffer", self.recv_buffer),
        ] {
            if v.is_some_and(|b| u32::try_from(b.0).is_err()) {
                return Err(SpecError::new(field, "must be below 4 GiB"));
            }
        }
        Ok(())
    }
}

/// A TCP good-put and reliability test. Every field has the default of its
/// flag in `goodput tcp`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct TcpSpec {
    /// Server names or addresses, each `HOST`, `HOST:PORT` or
    /// `[v6]:PORT`; every address is used, round robin. Empty: an embedded
    /// server on loopback.
    pub hosts: Vec<String>,
    /// Server port.
    pub port: u16,
    /// Address family.
    pub family: Family,
    /// Local addresses for outgoing connections, round robin per family.
    pub bind: Vec<IpAddr>,
    /// Local port, or a range used in turn ("0": ephemeral).
    pub local_port: PortRange,
    /// Wire protocol.
    pub wire: TcpWire,
    /// Data-flow pattern: push, pull, push_pull, duplex.
    pub pattern: TcpPattern,
    /// Pattern bytes per connection, or a range picked per connection
    /// (not used with `duration`).
    pub transfer: ValueRange<ByteSize>,
    /// A timed test: each connection's senders send for this long, then
    /// close their direction; the receivers' counts and times give the
    /// good-put. push, pull and duplex only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duration: Option<HumanDuration>,
    /// With `duration`: the warm-up at the start of each connection's data
    /// phase that is left out of the good-put (its bytes still count).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub omit: Option<HumanDuration>,
    /// Bytes per send and recv call, or a range picked per connection.
    pub buffer: ValueRange<ByteSize>,
    /// push_pull: bytes per client-to-server segment.
    pub push_bytes: ByteSize,
    /// push_pull: bytes per server-to-client segment.
    pub pull_bytes: ByteSize,
    /// Verification of received data: data or connection.
    pub verify: VerifyMode,
    /// Per-connection send rate limit, or a range (default: unlimited).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<ValueRange<ByteRate>>,
    /// Quantum over which the rate limit is enforced.
    pub rate_period: HumanDuration,
    /// Sends per burst (with `burst_delay`; not with a rate limit).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub burst_count: Option<u32>,
    /// Pause between bursts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub burst_delay: Option<HumanDuration>,
    /// Concurrent connections; a new one starts as each ends.
    pub connections: u64,
    /// Passes over the connections (0: until the time limit or Ctrl-C).
    pub iterations: u64,
    /// Most connect attempts pending at once (0: unlimited).
    pub throttle: u64,
    /// How successful connections are closed: graceful, rude, random.
    pub shutdown: ShutdownMode,
    /// Socket options.
    pub socket: SocketSpec,
    /// Stop after this long (in-flight connections are recorded as aborted).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_limit: Option<HumanDuration>,
    /// Status line period.
    pub status_interval: HumanDuration,
    /// Fail a connection that moves nothing for this long.
    pub idle_timeout: HumanDuration,
    /// Pass/fail assertions over the result's figures, such as
    /// "goodput >= 900Mbit" (see `goodput_core::assertion`); any that
    /// fails gives the exit status for failed assertions.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub assert: Vec<crate::assertion::Assertion>,
}

impl Default for TcpSpec {
    fn default() -> Self {
        Self {
            hosts: Vec::new(),
            port: 4444,
            family: Family::Any,
            bind: Vec::new(),
            local_port: PortRange { lo: 0, hi: 0 },
            wire: TcpWire::Goodput,
            pattern: TcpPattern::Push,
            transfer: ValueRange::single(ByteSize(1 << 30)),
            duration: None,
            omit: None,
            buffer: ValueRange::single(ByteSize(1 << 20)),
            push_bytes: ByteSize(1 << 20),
            pull_bytes: ByteSize(1 << 20),
            verify: VerifyMode::Data,
            rate_limit: None,
            rate_period: HumanDuration(Duration::from_millis(100)),
            burst_count: None,
            burst_delay: None,
            connections: 8,
            iterations: 1,
            throttle: 1000,
            shutdown: ShutdownMode::Graceful,
            socket: SocketSpec::default(),
            time_limit: None,
            status_interval: HumanDuration(Duration::from_secs(5)),
            idle_timeout: HumanDuration(Duration::from_secs(30)),
            assert: Vec::new(),
        }
    }
}

impl TcpSpec {
    /// The rules of a timed test.
    fn check_timed(&self) -> Result<(), SpecError> {
        let Some(duration) = self.duration else {
            return match self.omit {
                Some(_) => Err(SpecError::new("omit", "needs `duration`")),
                None => Ok(()),
            };
        };
        if duration.0.is_zero() {
            return Err(SpecError::new("duration", "must be above zero"));
        }
        // The session protocol carries it in milliseconds, in 32 bits.
        if duration.0.as_millis() > u128::from(u32::MAX) {
            return Err(SpecError::new("duration", "must be at most 49 days"));
        }
        if self.pattern == TcpPattern::PushPull {
            return Err(SpecError::new(
                "duration",
                "cannot time push_pull, which moves its bytes in segments: give `transfer`",
            ));
        }
        if self.wire == TcpWire::Cts {
            return Err(SpecError::new(
                "duration",
                "needs the goodput wire: ctsTraffic's protocol has no timed end",
            ));
        }
        if self.omit.is_some_and(|o| o.0 >= duration.0) {
            return Err(SpecError::new("omit", "must be shorter than `duration`"));
        }
        Ok(())
    }

    /// The data rules, shared with the server's `--wire cts` data.
    pub fn check_data(&self) -> Result<(), SpecError> {
        check_data(
            self.pattern,
            self.transfer,
            self.buffer,
            self.push_bytes,
            self.pull_bytes,
        )
    }
}

impl KindSpec for TcpSpec {
    const KIND: Kind = Kind::Tcp;
    const CLASS: RunClass = RunClass::Exclusive;
    const RATE_LIMITED: bool = true;
    const DSCP: Marking<Self> = Some(|s, d| s.socket.dscp = Some(d));
    const FAMILIES: &'static [alert::Family] = &[alert::Family::Throughput];

    /// Every rule of `goodput tcp`'s flags.
    fn validate(&self) -> Result<(), SpecError> {
        crate::assertion::check(Self::KIND, &self.assert)?;
        for h in &self.hosts {
            super::split_target(h, self.port).map_err(|e| SpecError::new("hosts", e))?;
        }
        self.check_data()?;
        self.check_timed()?;
        check_run(self.status_interval, self.idle_timeout, self.time_limit)?;
        if self.connections == 0 {
            return Err(SpecError::new("connections", "must be at least 1"));
        }
        if let Some(r) = self.rate_limit {
            let period = self.rate_period.0;
            if r.lo.0 == 0 || (u128::from(r.lo.0) * period.as_nanos() / 1_000_000_000) == 0 {
                return Err(SpecError::new(
                    "rate_limit",
                    format!(
                        "{r} with `rate_period` {} ms gives less than one byte per period",
                        period.as_millis()
                    ),
                ));
            }
            if self.burst_count.is_some() || self.burst_delay.is_some() {
                return Err(SpecError::new("burst_count", "cannot be used with `rate_limit`"));
            }
        }
        if self.rate_period.0.is_zero() {
            return Err(SpecError::new("rate_period", "must be above zero"));
        }
        match (self.burst_count, self.burst_delay) {
            (Some(0), _) => return Err(SpecError::new("burst_count", "must be at least 1")),
            (Some(_), None) => return Err(SpecError::new("burst_count", "needs `burst_delay`")),
            (None, Some(_)) => return Err(SpecError::new("burst_delay", "needs `burst_count`")),
            _ => {}
        }
        if !self.local_port.is_ephemeral() && u64::from(self.local_port.len()) < self.connections {
            return Err(SpecError::new(
                "local_port",
                format!(
                    "range has {} ports, fewer than `connections` {}",
                    self.local_port.len(),
                    self.connections
                ),
            ));
        }
        self.socket.validate()
    }

    fn assertions(&self) -> &[Assertion] {
        &self.assert
    }

    fn expected_ms(&self) -> Option<Ms> {
        self.duration.or(self.time_limit).map(|d| ms(d.0))
    }

    fn targets(&self) -> Vec<Target> {
        self.hosts.iter().map(|h| target(h, self.port)).collect()
    }

    fn bitrate(&self) -> Option<u64> {
        self.rate_limit
            .as_ref()
            .map(|r| r.hi.0.saturating_mul(8).saturating_mul(self.connections.max(1)))
    }

    fn names_a_file(&self) -> Option<&'static str> {
        None
    }

    fn reach(&self) -> Reach {
        Reach {
            services: &[BeaconService::TestPort],
            port: None,
        }
    }

    fn figures() -> Vec<&'static Figure> {
        crate::catalogue::with_common(&crate::catalogue::TCP)
    }
}

/// The rules on a test's data: a transfer of at least a byte, buffers of
/// 1 byte to 64 MiB, push-pull segments of at least a byte.
pub fn check_data(
    pattern: TcpPattern,
    transfer: ValueRange<ByteSize>,
    buffer: ValueRange<ByteSize>,
    push_bytes: ByteSize,
    pull_bytes: ByteSize,
) -> Result<(), SpecError> {
    if transfer.lo.0 == 0 {
        return Err(SpecError::new("transfer", "must be at least 1 byte"));
    }
    if buffer.lo.0 == 0 || buffer.hi.0 > MAX_BUFFER {
        return Err(SpecError::new(
            "buffer",
            format!(
                "must be between 1 byte and {} (got {buffer})",
                crate::units::format_size(MAX_BUFFER)
            ),
        ));
    }
    if pattern == TcpPattern::PushPull && (push_bytes.0 == 0 || pull_bytes.0 == 0) {
        return Err(SpecError::new(
            "push_bytes",
            "and `pull_bytes` must be at least 1 byte",
        ));
    }
    Ok(())
}

/// The rules on a run's clock: status lines at least 10 ms apart, an idle
/// timeout and a time limit above zero.
pub fn check_run(
    status_interval: HumanDuration,
    idle_timeout: HumanDuration,
    time_limit: Option<HumanDuration>,
) -> Result<(), SpecError> {
    if status_interval.0 < Duration::from_millis(10) {
        return Err(SpecError::new("status_interval", "must be at least 10ms"));
    }
    if idle_timeout.0.is_zero() {
        return Err(SpecError::new("idle_timeout", "must be above zero"));
    }
    if time_limit.is_some_and(|t| t.0.is_zero()) {
        return Err(SpecError::new("time_limit", "must be above zero"));
    }
    Ok(())
}
