//! `goodput server` as a document: every service a peer tests against, and
//! the limits that keep them safe to expose.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::tcp::{check_data, check_run, MAX_BUFFER};
use super::{SocketSpec, SpecError, TcpWire};
use crate::alert;
use crate::assertion::{Assertion, Figure};
use crate::kind::{Kind, KindSpec, Marking, Reach, Target};
use crate::plan::TcpPattern;
use crate::schedule::{Ms, RunClass};
use crate::session::VerifyMode;
use crate::stamp::Cidr;
use crate::units::{format_size, BitRate, ByteSize, HumanDuration, ValueRange};

/// The server's services and limits. Every field has the default of its
/// flag in `goodput server`; a service is on when its flag would be given
/// (`stamp`, `quic`, `iperf3` true; a `*_port` of the discard and echo
/// services set; the media service unless `no_udp`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct ServerSpec {
    /// Listen addresses, each `ADDR`, `ADDR:PORT` or `[v6]:PORT` (`*`:
    /// 0.0.0.0 and ::); empty: 0.0.0.0 and :: on `port`.
    pub listen: Vec<String>,
    /// Port of the TCP test service and the media service, for listen
    /// addresses given without one.
    pub port: u16,
    /// SO_REUSEPORT, so several servers can share the port.
    pub reuse_port: bool,
    /// Exit after this many connections have ended.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_after: Option<u64>,
    /// Most concurrent connections in total (default: the open-file limit
    /// less an eighth).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_connections: Option<u64>,
    /// Most concurrent connections from one client address (default: a
    /// quarter of the open-file limit).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_per_client: Option<u64>,
    /// Most connections still in their hello or TLS handshake.
    pub max_pending: u64,
    /// The same from one client address.
    pub max_pending_per_client: u64,
    /// Time for a connection's whole hello to arrive.
    pub hello_timeout: HumanDuration,
    /// Largest transfer one connection may ask for.
    pub max_transfer: ByteSize,
    /// Largest send/recv size one connection may ask for.
    pub max_buffer: ByteSize,
    /// Longest one connection may run before the server aborts it.
    pub max_duration: HumanDuration,
    /// Wire protocol of the TCP test service; with cts the data fields say
    /// what every connection does.
    pub wire: TcpWire,
    /// cts: data-flow pattern.
    pub pattern: TcpPattern,
    /// cts: pattern bytes per connection.
    pub transfer: ValueRange<ByteSize>,
    /// cts: bytes per send and recv call.
    pub buffer: ValueRange<ByteSize>,
    /// cts push_pull: bytes per client-to-server segment.
    pub push_bytes: ByteSize,
    /// cts push_pull: bytes per server-to-client segment.
    pub pull_bytes: ByteSize,
    /// cts: verification of received data.
    pub verify: VerifyMode,
    /// Socket options of the data connections.
    pub socket: SocketSpec,
    /// Stop after this long.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_limit: Option<HumanDuration>,
    /// Status line period.
    pub status_interval: HumanDuration,
    /// Fail a connection that moves nothing for this long.
    pub idle_timeout: HumanDuration,
    /// Port of the discard service (RFC 863, TCP and UDP); none: off.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub discard_port: Option<u16>,
    /// Port of the echo service (RFC 862, TCP); none: off.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub echo_port: Option<u16>,
    /// Port of the TLS echo service; none: off.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub echo_tls_port: Option<u16>,
    /// PEM certificate chain of the TLS echo and QUIC services (with
    /// `key`; none: a self-signed one made at start).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cert: Option<PathBuf>,
    /// PEM private key of the TLS echo and QUIC services.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<PathBuf>,
    /// Run the STAMP reflector.
    pub stamp: bool,
    /// UDP port of the STAMP reflector.
    pub stamp_port: u16,
    /// Addresses of the STAMP reflector (empty: 0.0.0.0 and ::).
    pub stamp_listen: Vec<IpAddr>,
    /// Stateful reflection (a sequence counter per session).
    pub stamp_stateful: bool,
    /// Answer only these sources (empty: every source).
    pub stamp_allow: Vec<Cidr>,
    /// Most STAMP requests per second answered for one source (0: no
    /// limit).
    pub stamp_rate_limit: u32,
    /// Answer short TWAMP-Light requests with the full 44-byte packet.
    pub stamp_pad_short: bool,
    /// Run the OWAMP server (RFC 4656, owampd's part: receiver and
    /// sender, receive logs kept for Fetch-Session).
    pub owamp: bool,
    /// TCP port of OWAMP-Control.
    pub owamp_port: u16,
    /// Run the TWAMP server (RFC 5357, twampd's part: a reflector per
    /// accepted session).
    pub twamp: bool,
    /// TCP port of TWAMP-Control (UDP of the same number is STAMP's).
    pub twamp_port: u16,
    /// Addresses of the OWAMP and TWAMP servers (empty: 0.0.0.0 and ::).
    pub ow_twamp_listen: Vec<IpAddr>,
    /// owamp's passphrase file (`identity<TAB>hex passphrase` lines) for
    /// the authenticated and encrypted modes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ow_twamp_pfs: Option<PathBuf>,
    /// Modes offered, letters of O (open), A (authenticated), E
    /// (encrypted); default: O, or OAE with a passphrase file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ow_twamp_modes: Option<String>,
    /// Serve only clients in these networks (empty: every client).
    pub ow_twamp_allow: Vec<Cidr>,
    /// UDP ports of the test sessions, `LO-HI` (default: any port).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ow_twamp_test_ports: Option<String>,
    /// Most OWAMP or TWAMP control connections at once (each).
    pub ow_twamp_max_connections: usize,
    /// Most control connections at once from one client address.
    pub ow_twamp_max_per_client: usize,
    /// Most sessions one client address holds at once.
    pub ow_twamp_max_sessions: usize,
    /// Most packets in one OWAMP session.
    pub ow_twamp_max_packets: u32,
    /// Highest bit rate of test packets one client address may have sent
    /// or reflected (IP and UDP headers counted).
    pub ow_twamp_max_bitrate: BitRate,
    /// Memory all kept OWAMP receive logs may hold.
    pub ow_twamp_max_memory: ByteSize,
    /// Close a control connection silent this long outside a test.
    pub ow_twamp_idle_timeout: HumanDuration,
    /// Run the QUIC perf server.
    pub quic: bool,
    /// UDP port of the QUIC perf server.
    pub quic_port: u16,
    /// Addresses of the QUIC perf server (empty: 0.0.0.0 and ::).
    pub quic_listen: Vec<IpAddr>,
    /// Most QUIC connections at once.
    pub quic_max_connections: usize,
    /// Most QUIC connections at once from one client address.
    pub quic_max_per_client: usize,
    /// Largest finite response one QUIC stream may ask for.
    pub quic_max_response: ByteSize,
    /// Most QUIC connections in their handshake at once.
    pub quic_max_handshakes: usize,
    /// Accept Initials from unvalidated addresses without a Retry.
    pub quic_no_retry: bool,
    /// The largest UDP payload of a QUIC packet, bytes, both ways
    /// (1200-65527); default: path MTU discovery up to 6,500 bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quic_max_mtu: Option<u16>,
    /// Threads of the QUIC service (1-1024; its own runtime). One, as
    /// quinn perf and picoquic run, is fastest for a few connections: quinn
    /// moves each packet through tasks that would otherwise wake each other
    /// across threads. More serve many connections on many cores.
    pub quic_threads: usize,
    /// Do not serve UDP media streams on `port`.
    pub no_udp: bool,
    /// Most media streams open at once (per listening socket).
    pub udp_max_streams: usize,
    /// Highest bit rate one media stream may ask for.
    pub udp_max_bitrate: BitRate,
    /// Longest media stream a client may ask for, whole seconds.
    pub udp_max_length: HumanDuration,
    /// Highest frame rate a media stream may ask for, frames/s.
    pub udp_max_frame_rate: u32,
    /// Deepest play-out buffer an upload may ask for.
    pub udp_max_buffer: HumanDuration,
    /// Most memory all media streams may hold at once (default: an eighth
    /// of physical memory).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub udp_max_memory: Option<ByteSize>,
    /// Most media streams one client address may hold open at once, over
    /// every listening socket.
    pub udp_max_per_client: usize,
    /// Most of the media memory budget one client address may hold at once
    /// (default: a quarter of `udp_max_memory`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub udp_max_client_memory: Option<ByteSize>,
    /// Run the iperf3 service.
    pub iperf3: bool,
    /// Port of the iperf3 service.
    pub iperf3_port: u16,
    /// Address of the iperf3 service (default :: with IPv4 too).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub iperf3_listen: Option<IpAddr>,
    /// Longest iperf3 test accepted (time plus omit).
    pub iperf3_max_duration: HumanDuration,
    /// Serve M-Lab's ndt7 speed test (WebSocket download and upload).
    pub ndt7: bool,
    /// TCP port of the ndt7 service (on the `listen` addresses).
    pub ndt7_port: u16,
    /// Most ndt7 subtests running at once.
    pub ndt7_max_tests: u64,
    /// Most ndt7 subtests running at once from one client address.
    pub ndt7_max_per_client: u64,
    /// Most ndt7 subtests one client address may start in a minute.
    pub ndt7_per_minute: u32,
    /// How long a subtest sends (ndt7's ten seconds); it is ended at
    /// this plus five seconds whatever the client does.
    pub ndt7_length: HumanDuration,
    /// Largest WebSocket message taken on upload (ndt7's clients send at
    /// most 16 MiB); a larger one ends the subtest.
    pub ndt7_max_message: ByteSize,
}

/// The ndt7 service's default port.
pub const NDT7_PORT: u16 = 4447;

impl ServerSpec {
    fn validate_ndt7(&self) -> Result<(), SpecError> {
        for (field, v) in [
            ("ndt7_max_tests", self.ndt7_max_tests),
            ("ndt7_max_per_client", self.ndt7_max_per_client),
            ("ndt7_per_minute", u64::from(self.ndt7_per_minute)),
        ] {
            if v == 0 {
                return Err(SpecError::new(field, "must be at least 1"));
            }
        }
        if self.ndt7_max_tests > 100_000 {
            return Err(SpecError::new("ndt7_max_tests", "must be at most 100000"));
        }
        let len = self.ndt7_length.0;
        if len < Duration::from_secs(1) || len > Duration::from_secs(60) {
            return Err(SpecError::new("ndt7_length", "must be 1 s to 60 s"));
        }
        let m = self.ndt7_max_message.0;
        if !(crate::ndt7::FIRST_MESSAGE as u64..=64 << 20).contains(&m) {
            return Err(SpecError::new("ndt7_max_message", "must be 8 KiB to 64 MiB"));
        }
        if self.ndt7 && self.ndt7_port == self.port {
            return Err(SpecError::new("ndt7_port", "must differ from `port`"));
        }
        Ok(())
    }
}

impl Default for ServerSpec {
    fn default() -> Self {
        Self {
            listen: Vec::new(),
            port: 4444,
            reuse_port: false,
            exit_after: None,
            max_connections: None,
            max_per_client: None,
            max_pending: 4096,
            max_pending_per_client: 1024,
            hello_timeout: HumanDuration(Duration::from_secs(10)),
            max_transfer: ByteSize(1 << 40),
            max_buffer: ByteSize(16 << 20),
            max_duration: HumanDuration(Duration::from_secs(3600)),
            wire: TcpWire::Goodput,
            pattern: TcpPattern::Push,
            transfer: ValueRange::single(ByteSize(1 << 30)),
            buffer: ValueRange::single(ByteSize(1 << 20)),
            push_bytes: ByteSize(1 << 20),
            pull_bytes: ByteSize(1 << 20),
            verify: VerifyMode::Data,
            socket: SocketSpec::default(),
            time_limit: None,
            status_interval: HumanDuration(Duration::from_secs(5)),
            idle_timeout: HumanDuration(Duration::from_secs(30)),
            discard_port: None,
            echo_port: None,
            echo_tls_port: None,
            cert: None,
            key: None,
            stamp: false,
            stamp_port: 862,
            stamp_listen: Vec::new(),
            stamp_stateful: false,
            stamp_allow: Vec::new(),
            stamp_rate_limit: 10_000,
            stamp_pad_short: false,
            owamp: false,
            owamp_port: crate::owamp::OWAMP_PORT,
            twamp: false,
            twamp_port: crate::owamp::TWAMP_PORT,
            ow_twamp_listen: Vec::new(),
            ow_twamp_pfs: None,
            ow_twamp_modes: None,
            ow_twamp_allow: Vec::new(),
            ow_twamp_test_ports: None,
            ow_twamp_max_connections: 64,
            ow_twamp_max_per_client: 8,
            ow_twamp_max_sessions: 16,
            ow_twamp_max_packets: 100_000,
            ow_twamp_max_bitrate: BitRate(100_000_000),
            ow_twamp_max_memory: ByteSize(64 << 20),
            ow_twamp_idle_timeout: HumanDuration(Duration::from_secs(30)),
            quic: false,
            quic_port: 4433,
            quic_listen: Vec::new(),
            quic_max_connections: 10_000,
            quic_max_per_client: 1_000,
            quic_max_response: ByteSize(100_000_000_000),
            quic_max_handshakes: 1_000,
            quic_no_retry: false,
            quic_max_mtu: None,
            quic_threads: 1,
            no_udp: false,
            udp_max_streams: 10_000,
            udp_max_bitrate: BitRate(100_000_000_000),
            udp_max_length: HumanDuration(Duration::from_secs(168 * 3600)),
            udp_max_frame_rate: 10_000,
            udp_max_buffer: HumanDuration(Duration::from_secs(10)),
            udp_max_memory: None,
            udp_max_per_client: 1_000,
            udp_max_client_memory: None,
            iperf3: false,
            iperf3_port: 5201,
            iperf3_listen: None,
            iperf3_max_duration: HumanDuration(Duration::from_secs(3600)),
            ndt7: false,
            ndt7_port: NDT7_PORT,
            ndt7_max_tests: 16,
            ndt7_max_per_client: 2,
            ndt7_per_minute: 12,
            ndt7_length: HumanDuration(Duration::from_secs(10)),
            ndt7_max_message: ByteSize(crate::ndt7::MAX_MESSAGE as u64),
        }
    }
}

/// A listen address: `ADDR`, `ADDR:PORT` or `[v6]:PORT` (`port` when none
/// is given).
pub fn parse_listen(s: &str, port: u16) -> Option<SocketAddr> {
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Some(a);
    }
    let bare = s.trim_start_matches('[').trim_end_matches(']');
    bare.parse::<IpAddr>().ok().map(|ip| SocketAddr::new(ip, port))
}

impl ServerSpec {
    /// The TCP test service's addresses, and whether they are the default
    /// pair (0.0.0.0 and ::, where the IPv6 socket is IPv6 only).
    pub fn listen_addrs(&self) -> Result<(Vec<SocketAddr>, bool), SpecError> {
        let parse = |l: &str| {
            parse_listen(l, self.port).ok_or_else(|| {
                SpecError::new(
                    "listen",
                    format!("'{l}': expected an IP address, optionally with :PORT ([v6]:PORT), or *"),
                )
            })
        };
        if self.listen.is_empty() || self.listen.iter().any(|l| l == "*") {
            let mut v = vec![
                SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), self.port),
                SocketAddr::new(Ipv6Addr::UNSPECIFIED.into(), self.port),
            ];
            for l in self.listen.iter().filter(|l| *l != "*") {
                v.push(parse(l)?);
            }
            return Ok((v, true));
        }
        let v = self
            .listen
            .iter()
            .map(|l| parse(l))
            .collect::<Result<Vec<_>, _>>()?;
        Ok((v, false))
    }

    /// The media service's longest stream, whole seconds.
    pub fn udp_max_length_s(&self) -> Result<u32, SpecError> {
        let length = self.udp_max_length.0;
        u32::try_from(length.as_secs())
            .ok()
            .filter(|&s| s >= 1 && length.subsec_nanos() == 0)
            .ok_or_else(|| {
                SpecError::new(
                    "udp_max_length",
                    "must be a whole number of seconds, 1s to 4294967295s",
                )
            })
    }

    /// The OWAMP and TWAMP modes offered, as their bitmask (open 1,
    /// authenticated 2, encrypted 4).
    pub fn ow_twamp_mode_bits(&self) -> Result<u32, SpecError> {
        let err = |m: String| SpecError::new("ow_twamp_modes", m);
        let Some(letters) = &self.ow_twamp_modes else {
            return Ok(if self.ow_twamp_pfs.is_some() { 7 } else { 1 });
        };
        let mut bits = 0;
        for c in letters.chars() {
            bits |= match c.to_ascii_uppercase() {
                'O' => 1,
                'A' => 2,
                'E' => 4,
                _ => {
                    return Err(err(format!(
                        "'{c}' in {letters:?}: modes are letters of O, A and E"
                    )))
                }
            };
        }
        if bits == 0 {
            return Err(err("offers no mode".into()));
        }
        if bits & 6 != 0 && self.ow_twamp_pfs.is_none() {
            return Err(err(
                "the authenticated and encrypted modes need `ow_twamp_pfs`, a passphrase file".into(),
            ));
        }
        Ok(bits)
    }

    /// The test sessions' UDP port range, both ends included (`None`:
    /// any port).
    pub fn ow_twamp_port_range(&self) -> Result<Option<(u16, u16)>, SpecError> {
        let Some(r) = &self.ow_twamp_test_ports else {
            return Ok(None);
        };
        // goodput's LOW..HIGH, or owampd's testports LOW-HIGH.
        let parsed = r
            .split_once("..")
            .or_else(|| r.split_once('-'))
            .and_then(|(lo, hi)| Some((lo.trim().parse::<u16>().ok()?, hi.trim().parse::<u16>().ok()?)))
            .filter(|&(lo, hi)| lo >= 1 && lo <= hi);
        parsed.map(Some).ok_or_else(|| {
            SpecError::new(
                "ow_twamp_test_ports",
                format!("'{r}': expected LOW..HIGH (or owampd's LOW-HIGH), two ports 1-65535 in order"),
            )
        })
    }

    /// The media service's deepest play-out buffer, milliseconds.
    pub fn udp_max_buffer_ms(&self) -> Result<u32, SpecError> {
        u32::try_from(self.udp_max_buffer.0.as_millis())
            .ok()
            .filter(|&ms| ms >= 1)
            .ok_or_else(|| SpecError::new("udp_max_buffer", "must be 1ms to 4294967295ms"))
    }
}

impl KindSpec for ServerSpec {
    const KIND: Kind = Kind::Server;
    const CLASS: RunClass = RunClass::Normal;
    const RATE_LIMITED: bool = false;
    // A server is no mesh test (the mesh refuses it); its replies are not
    // marked.
    const DSCP: Marking<Self> = None;
    const FAMILIES: &'static [alert::Family] = &[];

    /// Every rule of `goodput server`'s flags. A limit of zero would refuse
    /// every client, or end every connection at once: refused, naming the
    /// field, rather than obeyed.
    fn validate(&self) -> Result<(), SpecError> {
        check_run(self.status_interval, self.idle_timeout, self.time_limit)?;
        if self.wire == TcpWire::Cts {
            check_data(
                self.pattern,
                self.transfer,
                self.buffer,
                self.push_bytes,
                self.pull_bytes,
            )?;
            if !self.transfer.is_single() || !self.buffer.is_single() {
                return Err(SpecError::new(
                    "wire",
                    "cts needs a single `transfer` and `buffer` (both ends must match)",
                ));
            }
        }
        if self.max_buffer.0 == 0 || self.max_buffer.0 > MAX_BUFFER {
            return Err(SpecError::new(
                "max_buffer",
                format!("must be between 1 byte and {}", format_size(MAX_BUFFER)),
            ));
        }
        let counts: [(&str, Option<u64>); 16] = [
            (
                "ow_twamp_max_connections",
                Some(self.ow_twamp_max_connections as u64),
            ),
            (
                "ow_twamp_max_per_client",
                Some(self.ow_twamp_max_per_client as u64),
            ),
            ("ow_twamp_max_sessions", Some(self.ow_twamp_max_sessions as u64)),
            ("ow_twamp_max_packets", Some(u64::from(self.ow_twamp_max_packets))),
            ("ow_twamp_max_bitrate", Some(self.ow_twamp_max_bitrate.0)),
            ("ow_twamp_max_memory", Some(self.ow_twamp_max_memory.0)),
            ("max_connections", self.max_connections),
            ("max_per_client", self.max_per_client),
            ("max_pending", Some(self.max_pending)),
            ("max_pending_per_client", Some(self.max_pending_per_client)),
            ("udp_max_streams", Some(self.udp_max_streams as u64)),
            ("udp_max_per_client", Some(self.udp_max_per_client as u64)),
            ("udp_max_bitrate", Some(self.udp_max_bitrate.0)),
            ("quic_max_connections", Some(self.quic_max_connections as u64)),
            ("quic_max_per_client", Some(self.quic_max_per_client as u64)),
            ("quic_max_handshakes", Some(self.quic_max_handshakes as u64)),
        ];
        if let Some((field, _)) = counts.iter().find(|(_, v)| *v == Some(0)) {
            return Err(SpecError::new(field, "must be at least 1"));
        }
        super::quic::check_mtu("quic_max_mtu", self.quic_max_mtu)?;
        if !(1..=1024).contains(&self.quic_threads) {
            return Err(SpecError::new("quic_threads", "must be 1-1024"));
        }
        for (field, v) in [
            ("max_transfer", self.max_transfer),
            ("quic_max_response", self.quic_max_response),
        ] {
            if v.0 == 0 {
                return Err(SpecError::new(field, "must be at least 1 byte"));
            }
        }
        for (field, d) in [
            ("max_duration", self.max_duration),
            ("hello_timeout", self.hello_timeout),
            ("udp_max_length", self.udp_max_length),
            ("udp_max_buffer", self.udp_max_buffer),
            ("ow_twamp_idle_timeout", self.ow_twamp_idle_timeout),
        ] {
            if d.0.is_zero() {
                return Err(SpecError::new(field, "must be above zero"));
            }
        }
        if self.udp_max_frame_rate == 0 {
            return Err(SpecError::new("udp_max_frame_rate", "must be at least 1"));
        }
        self.udp_max_length_s()?;
        self.udp_max_buffer_ms()?;
        if self.udp_max_memory == Some(ByteSize(0)) {
            return Err(SpecError::new("udp_max_memory", "must be above zero"));
        }
        if self.udp_max_client_memory == Some(ByteSize(0)) {
            return Err(SpecError::new("udp_max_client_memory", "must be above zero"));
        }
        if self.cert.is_some() != self.key.is_some() {
            return Err(SpecError::new("cert", "and `key` go together"));
        }
        self.ow_twamp_mode_bits()?;
        self.ow_twamp_port_range()?;
        if self.owamp && self.twamp && self.owamp_port == self.twamp_port {
            return Err(SpecError::new("twamp_port", "must differ from `owamp_port`"));
        }
        self.listen_addrs()?;
        self.validate_ndt7()?;
        self.socket.validate()
    }

    fn assertions(&self) -> &[Assertion] {
        &[]
    }

    fn expected_ms(&self) -> Option<Ms> {
        None
    }

    fn targets(&self) -> Vec<Target> {
        Vec::new()
    }

    fn bitrate(&self) -> Option<u64> {
        None
    }

    fn names_a_file(&self) -> Option<&'static str> {
        None
    }

    fn reach(&self) -> Reach {
        // Not a run an agent is asked for (its beacon is its server).
        Reach::default()
    }

    fn figures() -> Vec<&'static Figure> {
        crate::catalogue::with_common(&[])
    }
}
