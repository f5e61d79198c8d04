//! The flags of `goodput server`.

use super::{OutputArgs, PatternArgs, SocketArgs, WireArg};
use clap::Args;
use goodput_core::spec::ServerSpec;
use goodput_core::units::BitRate as Iperf3Rate;
use goodput_core::units::{ByteSize, HumanDuration};
use std::net::IpAddr;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct ServerArgs {
    /// Also run a discard service (RFC 863, TCP and UDP) on this port.
    #[arg(long, value_name = "PORT")]
    pub discard_port: Option<u16>,
    /// Also run an echo service (RFC 862, TCP) on this port.
    #[arg(long, value_name = "PORT")]
    pub echo_port: Option<u16>,
    /// Also run a TLS echo service on this port (certificate from --cert and
    /// --key, or a self-signed one generated at start).
    #[arg(long, value_name = "PORT")]
    pub echo_tls_port: Option<u16>,
    /// PEM certificate chain for the TLS echo service and the QUIC perf
    /// server.
    #[arg(long, value_name = "FILE", requires = "key")]
    pub cert: Option<PathBuf>,
    /// PEM private key for the TLS echo service and the QUIC perf server.
    #[arg(long, value_name = "FILE", requires = "cert")]
    pub key: Option<PathBuf>,
    /// Also run a STAMP (RFC 8762) reflector on UDP --stamp-port.
    #[arg(long)]
    pub stamp: bool,
    /// UDP port of the STAMP reflector (862 needs root or
    /// CAP_NET_BIND_SERVICE).
    #[arg(long, default_value_t = 862, value_name = "PORT")]
    pub stamp_port: u16,
    /// Address of the STAMP reflector (repeatable; default 0.0.0.0 and ::).
    #[arg(long, value_name = "ADDR")]
    pub stamp_listen: Vec<IpAddr>,
    /// Stateful reflection: a sequence counter per session, so senders can
    /// split loss into forward and backward.
    #[arg(long)]
    pub stamp_stateful: bool,
    /// Answer only these sources (repeatable; ADDR or ADDR/PREFIX).
    #[arg(long, value_name = "CIDR")]
    pub stamp_allow: Vec<goodput_core::stamp::Cidr>,
    /// Most STAMP requests per second answered for one source address; a
    /// source may burst one second's worth (0 = no limit).
    #[arg(long, default_value_t = 10_000, value_name = "PPS")]
    pub stamp_rate_limit: u32,
    /// Answer 14..43-byte TWAMP-Light requests with the full 44-byte STAMP
    /// packet (RFC 8762 §4.6). Off by default: such a request is answered
    /// with its own length, so no source gets more bytes than it sent.
    #[arg(long)]
    pub stamp_pad_short: bool,
    /// Also run an OWAMP server (RFC 4656, as owampd) on TCP
    /// --owamp-port: receives from owping and powstream, keeps each
    /// receive log for Fetch-Session, and sends to them.
    #[arg(long)]
    pub owamp: bool,
    /// TCP port of OWAMP-Control (861 needs root or CAP_NET_BIND_SERVICE).
    #[arg(long, default_value_t = 861, value_name = "PORT")]
    pub owamp_port: u16,
    /// Also run a TWAMP server (RFC 5357, as twampd) on TCP --twamp-port:
    /// a reflector per session twping asks for. TCP 862 beside the STAMP
    /// reflector's UDP 862 is no conflict.
    #[arg(long)]
    pub twamp: bool,
    /// TCP port of TWAMP-Control (862 needs root or CAP_NET_BIND_SERVICE).
    #[arg(long, default_value_t = 862, value_name = "PORT")]
    pub twamp_port: u16,
    /// Address of the OWAMP and TWAMP servers (repeatable; default 0.0.0.0
    /// and ::).
    #[arg(long, value_name = "ADDR")]
    pub ow_twamp_listen: Vec<IpAddr>,
    /// owamp's passphrase file (lines `identity<TAB>hex passphrase`, as
    /// pfstore writes them): offers the authenticated and encrypted modes
    /// to the identities in it.
    #[arg(long, value_name = "FILE")]
    pub ow_twamp_pfs: Option<PathBuf>,
    /// Modes the OWAMP and TWAMP servers offer, letters of O (open), A
    /// (authenticated) and E (encrypted), as owampd's authmode [default: O,
    /// or OAE with --ow-twamp-pfs].
    #[arg(long, value_name = "MODES")]
    pub ow_twamp_modes: Option<String>,
    /// Serve OWAMP and TWAMP only to clients in these networks
    /// (repeatable; ADDR or ADDR/PREFIX).
    #[arg(long, value_name = "CIDR")]
    pub ow_twamp_allow: Vec<goodput_core::stamp::Cidr>,
    /// UDP ports of the OWAMP and TWAMP test sessions, LOW..HIGH (for a
    /// firewall; owampd's example uses 8760..9960; owampd's spelling
    /// 8760-9960 is read too) [default: any port].
    #[arg(long, value_name = "LOW..HIGH")]
    pub ow_twamp_test_ports: Option<String>,
    /// Most OWAMP (and, apart, TWAMP) control connections at once.
    #[arg(long, default_value_t = 64, value_name = "N")]
    pub ow_twamp_max_connections: usize,
    /// Most OWAMP or TWAMP control connections from one client address.
    #[arg(long, default_value_t = 8, value_name = "N")]
    pub ow_twamp_max_per_client: usize,
    /// Most OWAMP or TWAMP sessions one client address holds at once;
    /// more are refused with Accept 5 (temporary resource limit).
    #[arg(long, default_value_t = 16, value_name = "N")]
    pub ow_twamp_max_sessions: usize,
    /// Most packets in one OWAMP session; more are refused with Accept 4
    /// (permanent resource limit).
    #[arg(long, default_value_t = 100_000, value_name = "N")]
    pub ow_twamp_max_packets: u32,
    /// Highest bit rate of test packets one client address may have
    /// received, sent or reflected, IP and UDP headers counted.
    #[arg(long, default_value = "100M", value_name = "RATE")]
    pub ow_twamp_max_bitrate: Iperf3Rate,
    /// Memory all kept OWAMP receive logs may hold (32 bytes a packet);
    /// a session past it is refused with Accept 5.
    #[arg(long, default_value = "64MiB", value_name = "SIZE")]
    pub ow_twamp_max_memory: ByteSize,
    /// Close an OWAMP or TWAMP control connection silent this long in its
    /// set-up or outside a running test.
    #[arg(long, default_value = "30s", value_name = "DURATION")]
    pub ow_twamp_idle_timeout: HumanDuration,
    /// Also run a QUIC perf server (ALPN perf) on UDP --quic-port.
    #[arg(long)]
    pub quic: bool,
    /// UDP port of the QUIC perf server.
    #[arg(long, default_value_t = 4433, value_name = "PORT")]
    pub quic_port: u16,
    /// Address of the QUIC perf server, ADDR or ADDR:PORT ([v6]:PORT; a
    /// port here is the server's UDP port, as --quic-port) (repeatable;
    /// default 0.0.0.0 and ::).
    #[arg(long, value_name = "ADDR[:PORT]")]
    pub quic_listen: Vec<ListenAt>,
    /// Most QUIC connections at once.
    #[arg(long, default_value_t = 10_000, value_name = "N")]
    pub quic_max_connections: usize,
    /// Most QUIC connections at once from one client address.
    #[arg(long, default_value_t = 1_000, value_name = "N")]
    pub quic_max_per_client: usize,
    /// Largest finite response one QUIC stream may ask for.
    #[arg(long, default_value = "100GB", value_name = "SIZE")]
    pub quic_max_response: ByteSize,
    /// Most QUIC connections in their handshake at once; past it Initials
    /// are dropped unanswered. Each handshake must finish within
    /// --hello-timeout.
    #[arg(long, default_value_t = 1_000, value_name = "N")]
    pub quic_max_handshakes: usize,
    /// Accept a QUIC Initial from an address not yet validated without a
    /// Retry round trip first. Saves a round trip per connection, but a
    /// forged source then costs the server a handshake's state and gets up
    /// to 3× the bytes it sent (RFC 9000's limit).
    #[arg(long)]
    pub quic_no_retry: bool,
    /// The largest UDP payload of a QUIC packet, bytes, both ways
    /// (1200-65527); default: path MTU discovery up to 6500.
    #[arg(long, value_name = "BYTES")]
    pub quic_max_mtu: Option<u16>,
    /// Threads of the QUIC service. One (as quinn perf and picoquic run) is
    /// fastest for a few connections; more serve many on many cores.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub quic_threads: usize,
    /// Do not serve UDP media streams (`goodput udp`) on UDP --port.
    #[arg(long)]
    pub no_udp: bool,
    /// Most media streams open at once (per listening socket).
    #[arg(long, default_value_t = 10_000, value_name = "N")]
    pub udp_max_streams: usize,
    /// Highest bit rate one media stream may ask for, bits/s (k, m, g ×1000).
    #[arg(long, default_value = "100G", value_name = "RATE")]
    pub udp_max_bitrate: Iperf3Rate,
    /// Longest media stream a client may ask for (1 s to 136 years).
    #[arg(long, default_value = "168h", value_name = "DURATION")]
    pub udp_max_length: HumanDuration,
    /// Highest frame rate a media stream may ask for, frames/s.
    #[arg(long, default_value_t = 10_000, value_name = "FPS",
          value_parser = clap::value_parser!(u32).range(1..))]
    pub udp_max_frame_rate: u32,
    /// Deepest play-out buffer an upload may ask the server to keep
    /// (the server's memory per upload grows with it × the frame rate).
    #[arg(long, default_value = "10s", value_name = "DURATION")]
    pub udp_max_buffer: HumanDuration,
    /// Most memory all media streams may hold at once, each counted at its
    /// ceiling (default: an eighth of physical memory); more are refused.
    #[arg(long, value_name = "SIZE")]
    pub udp_max_memory: Option<ByteSize>,
    /// Most media streams one client address may hold open at once (over
    /// every listen address); more from it are refused.
    #[arg(long, default_value_t = 1_000, value_name = "N")]
    pub udp_max_per_client: usize,
    /// Most of --udp-max-memory one client address may hold at once
    /// (default: a quarter of it), so one address cannot take it all.
    #[arg(long, value_name = "SIZE")]
    pub udp_max_client_memory: Option<ByteSize>,
    /// Also answer stock iperf3 clients (TCP and UDP, -R, --bidir, -P), one
    /// test at a time, on --iperf3-port.
    #[arg(long)]
    pub iperf3: bool,
    /// Port of the iperf3 service (TCP, and UDP for UDP tests).
    #[arg(long, default_value_t = 5201, value_name = "PORT")]
    pub iperf3_port: u16,
    /// Address of the iperf3 service (default :: with IPv4 too, as iperf3).
    #[arg(long, value_name = "ADDR")]
    pub iperf3_listen: Option<IpAddr>,
    /// Longest iperf3 test accepted (time plus omit).
    #[arg(long, default_value = "1h", value_name = "DURATION")]
    pub iperf3_max_duration: HumanDuration,
    /// Also serve M-Lab's ndt7 speed test (WebSocket, ws://) on TCP
    /// --ndt7-port of the listen addresses: any ndt7 client (`goodput
    /// ndt7`, M-Lab's JavaScript and Go clients) measures download and
    /// upload against it.
    #[arg(long)]
    pub ndt7: bool,
    /// TCP port of the ndt7 service.
    #[arg(long, default_value_t = goodput_core::spec::server::NDT7_PORT, value_name = "PORT")]
    pub ndt7_port: u16,
    /// Most ndt7 subtests running at once.
    #[arg(long, default_value_t = 16, value_name = "N")]
    pub ndt7_max_tests: u64,
    /// Most ndt7 subtests running at once from one client address.
    #[arg(long, default_value_t = 2, value_name = "N")]
    pub ndt7_max_per_client: u64,
    /// Most ndt7 subtests one client address may start in a minute (a
    /// test is a download and an upload); past it the upgrade is answered
    /// 429.
    #[arg(long, default_value_t = 12, value_name = "N")]
    pub ndt7_per_minute: u32,
    /// How long an ndt7 subtest sends; a subtest is ended 5 s past it
    /// whatever the client does.
    #[arg(long, default_value = "10s", value_name = "DURATION")]
    pub ndt7_length: HumanDuration,
    /// Largest WebSocket message the ndt7 service takes (and sends); a
    /// larger one ends the subtest.
    #[arg(long, default_value = "16MiB", value_name = "SIZE")]
    pub ndt7_max_message: ByteSize,
    /// Listen address (repeatable), with or without a port; default: 0.0.0.0
    /// and :: (IPv6 only) on --port.
    #[arg(long, value_name = "ADDR")]
    pub listen: Vec<String>,
    /// Port for listen addresses given without one.
    #[arg(long, short = 'p', default_value_t = 4444)]
    pub port: u16,
    /// SO_REUSEPORT, so several server processes can share the port.
    #[arg(long)]
    pub reuse_port: bool,
    /// Exit after this many connections have ended.
    #[arg(long, value_name = "N")]
    pub exit_after: Option<u64>,
    /// Most concurrent connections in total, over the TCP test port and the
    /// discard, echo and TLS echo services [default: the open-file limit
    /// less an eighth, kept for listeners, the other services and files].
    #[arg(long, value_name = "N")]
    pub max_connections: Option<u64>,
    /// Most concurrent connections from one client address, over the same
    /// ports [default: a quarter of the open-file limit, so one client can
    /// never take every descriptor].
    #[arg(long, value_name = "N")]
    pub max_per_client: Option<u64>,
    /// Most connections still in their hello or TLS handshake (or being told
    /// why they were refused); past it new connections are reset at once.
    #[arg(long, default_value_t = 4096, value_name = "N")]
    pub max_pending: u64,
    /// The same from one client address (a client opening many connections
    /// at once stays under it: goodput tcp connects 1,000 at a time).
    #[arg(long, default_value_t = 1024, value_name = "N")]
    pub max_pending_per_client: u64,
    /// Time for a connection's whole hello to arrive (however steadily it
    /// trickles); then it is refused with a reason.
    #[arg(long, default_value = "10s", value_name = "DURATION")]
    pub hello_timeout: HumanDuration,
    /// Largest transfer one connection may ask for.
    #[arg(long, default_value = "1TiB", value_name = "SIZE")]
    pub max_transfer: ByteSize,
    /// Largest send/recv size one connection may ask for.
    #[arg(long, default_value = "16MiB", value_name = "SIZE")]
    pub max_buffer: ByteSize,
    /// Longest one connection may run before the server aborts it.
    #[arg(long, default_value = "1h", value_name = "DURATION")]
    pub max_duration: HumanDuration,
    /// Wire protocol; with cts the --pattern/--transfer/--buffer/--verify
    /// flags below say what every connection does.
    #[arg(long, value_enum, default_value = "goodput")]
    pub wire: WireArg,
    #[command(flatten)]
    pub data: PatternArgs,
    #[command(flatten)]
    pub socket: SocketArgs,
    #[command(flatten)]
    pub output: OutputArgs,
    /// Print the server these flags describe as a spec document (JSON, for
    /// `goodput run`) and exit without serving.
    #[arg(long)]
    pub print_spec: bool,
}

/// An address to listen on, with or without a port: `ADDR`, `ADDR:PORT`,
/// `[v6]:PORT` (a bare IPv6 address is an address).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListenAt {
    /// The address.
    pub ip: IpAddr,
    /// The port, when given.
    pub port: Option<u16>,
}

impl std::str::FromStr for ListenAt {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("'{s}': expected ADDR or ADDR:PORT ([v6]:PORT for IPv6)");
        if let Ok(ip) = s.trim_start_matches('[').trim_end_matches(']').parse() {
            return Ok(ListenAt { ip, port: None });
        }
        let a: std::net::SocketAddr = s.parse().map_err(|_| bad())?;
        if a.port() == 0 {
            return Err(format!("'{s}': the port must be 1 to 65535"));
        }
        Ok(ListenAt {
            ip: a.ip(),
            port: Some(a.port()),
        })
    }
}

impl ServerArgs {
    /// The QUIC perf server's port: the one the --quic-listen addresses
    /// name (they must agree), else --quic-port.
    pub fn quic_port(&self) -> Result<u16, String> {
        let mut named = self.quic_listen.iter().filter_map(|l| l.port.map(|p| (l, p)));
        let Some((first, port)) = named.next() else {
            return Ok(self.quic_port);
        };
        if let Some((other, p)) = named.find(|(_, p)| *p != port) {
            return Err(format!(
                "--quic-listen: {}:{port} and {}:{p} name different ports; the QUIC perf server has one",
                first.ip, other.ip
            ));
        }
        Ok(port)
    }

    /// The spec these flags describe.
    pub fn spec(&self) -> ServerSpec {
        ServerSpec {
            listen: self.listen.clone(),
            port: self.port,
            reuse_port: self.reuse_port,
            exit_after: self.exit_after,
            max_connections: self.max_connections,
            max_per_client: self.max_per_client,
            max_pending: self.max_pending,
            max_pending_per_client: self.max_pending_per_client,
            hello_timeout: self.hello_timeout,
            max_transfer: self.max_transfer,
            max_buffer: self.max_buffer,
            max_duration: self.max_duration,
            wire: self.wire.spec(),
            pattern: self.data.pattern.spec(),
            transfer: self.data.transfer_or_default(),
            buffer: self.data.buffer,
            push_bytes: self.data.push_bytes,
            pull_bytes: self.data.pull_bytes,
            verify: self.data.verify.spec(),
            socket: self.socket.spec(),
            time_limit: self.output.time_limit,
            status_interval: self
                .output
                .status_interval
                .unwrap_or(HumanDuration(super::LONG_STATUS_INTERVAL)),
            idle_timeout: self.output.idle_timeout,
            discard_port: self.discard_port,
            echo_port: self.echo_port,
            echo_tls_port: self.echo_tls_port,
            cert: self.cert.clone(),
            key: self.key.clone(),
            stamp: self.stamp,
            stamp_port: self.stamp_port,
            stamp_listen: self.stamp_listen.clone(),
            stamp_stateful: self.stamp_stateful,
            stamp_allow: self.stamp_allow.clone(),
            stamp_rate_limit: self.stamp_rate_limit,
            stamp_pad_short: self.stamp_pad_short,
            owamp: self.owamp,
            owamp_port: self.owamp_port,
            twamp: self.twamp,
            twamp_port: self.twamp_port,
            ow_twamp_listen: self.ow_twamp_listen.clone(),
            ow_twamp_pfs: self.ow_twamp_pfs.clone(),
            ow_twamp_modes: self.ow_twamp_modes.clone(),
            ow_twamp_allow: self.ow_twamp_allow.clone(),
            ow_twamp_test_ports: self.ow_twamp_test_ports.clone(),
            ow_twamp_max_connections: self.ow_twamp_max_connections,
            ow_twamp_max_per_client: self.ow_twamp_max_per_client,
            ow_twamp_max_sessions: self.ow_twamp_max_sessions,
            ow_twamp_max_packets: self.ow_twamp_max_packets,
            ow_twamp_max_bitrate: self.ow_twamp_max_bitrate,
            ow_twamp_max_memory: self.ow_twamp_max_memory,
            ow_twamp_idle_timeout: self.ow_twamp_idle_timeout,
            quic: self.quic,
            quic_port: self.quic_port().unwrap_or(self.quic_port),
            quic_listen: self.quic_listen.iter().map(|l| l.ip).collect(),
            quic_max_connections: self.quic_max_connections,
            quic_max_per_client: self.quic_max_per_client,
            quic_max_response: self.quic_max_response,
            quic_max_handshakes: self.quic_max_handshakes,
            quic_no_retry: self.quic_no_retry,
            quic_max_mtu: self.quic_max_mtu,
            quic_threads: self.quic_threads,
            no_udp: self.no_udp,
            udp_max_streams: self.udp_max_streams,
            udp_max_bitrate: self.udp_max_bitrate,
            udp_max_length: self.udp_max_length,
            udp_max_frame_rate: self.udp_max_frame_rate,
            udp_max_buffer: self.udp_max_buffer,
            udp_max_memory: self.udp_max_memory,
            udp_max_per_client: self.udp_max_per_client,
            udp_max_client_memory: self.udp_max_client_memory,
            iperf3: self.iperf3,
            iperf3_port: self.iperf3_port,
            iperf3_listen: self.iperf3_listen,
            iperf3_max_duration: self.iperf3_max_duration,
            ndt7: self.ndt7,
            ndt7_port: self.ndt7_port,
            ndt7_max_tests: self.ndt7_max_tests,
            ndt7_max_per_client: self.ndt7_max_per_client,
            ndt7_per_minute: self.ndt7_per_minute,
            ndt7_length: self.ndt7_length,
            ndt7_max_message: self.ndt7_max_message,
        }
    }
}
