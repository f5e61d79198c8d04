//! Every flag, with its help text, default and validation, in one place;
//! `--help` is generated from these definitions.

mod agent;
mod check;
mod dns;
mod echo;
mod http;
mod iperf3;
mod ndt7;
mod owamp;
mod path;
mod quic;
mod report;
mod server;
mod stamp;
mod tcp;
mod ttcp;
mod udp;

pub use agent::*;
pub use check::*;
pub use dns::*;
pub use echo::*;
pub use http::*;
pub use iperf3::*;
pub use ndt7::*;
pub use owamp::*;
pub use path::*;
pub use quic::*;
pub use report::*;
pub use server::*;
pub use stamp::*;
pub use tcp::*;
pub use ttcp::*;
pub use udp::*;

use clap::{Args, Parser, Subcommand, ValueEnum};
use goodput_core::units::{ByteSize, HumanDuration, ValueRange};
use std::path::PathBuf;

/// Network good-put and reliability measurement for Linux.
///
/// Sizes take K/M/G/T (x1000) or KiB/MiB/GiB/TiB (x1024) suffixes; rates are
/// bytes per second (10MB/s) unless written in bits (80Mbit); durations take
/// ns/us/ms/s/m/h (a bare number is seconds); ranges are written LOW..HIGH.
#[derive(Debug, Parser)]
#[command(name = "goodput", version, propagate_version = true, max_term_width = 100)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// TCP good-put and reliability test (ctsTraffic-style). With no HOST and
    /// no --target, starts a server on loopback and runs against it.
    Tcp(Box<TcpArgs>),
    /// Serve goodput clients: TCP tests and UDP media streams on --port (4444
    /// by default), and with flags iperf3, STAMP, QUIC perf, discard and echo.
    Server(Box<ServerArgs>),
    /// Run an iperf3 test against a stock iperf3 server (or, with no HOST,
    /// against an embedded goodput iperf3 server on loopback). Sizes follow
    /// iperf3: K, M, G are ×1024 for -n/-l/-w and ×1000 for -b (bits/s).
    Iperf3(Box<Iperf3Args>),
    /// STAMP (RFC 8762) Session-Sender: round-trip and one-way delay, loss
    /// per direction, duplicates, reordering and hops against any STAMP or
    /// TWAMP-Light reflector (or, with no HOST, an embedded goodput
    /// reflector on loopback).
    Stamp(Box<StampArgs>),
    /// OWAMP (RFC 4656) client, owping's equivalent: one-way delay, loss,
    /// duplicates, reordering and hops each way against owampd, a
    /// perfSONAR host or a goodput agent, in open, authenticated or
    /// encrypted mode; owping's summary plus exact percentiles.
    Owamp(Box<OwampArgs>),
    /// TWAMP (RFC 5357) client, twping's equivalent: round-trip delay,
    /// one-way delay and loss each way, the reflector's processing time and
    /// hops against twampd, a perfSONAR host or a goodput agent.
    Twamp(Box<TwampArgs>),
    /// TTCP: memory-to-memory transfer with no protocol on the wire, to or
    /// from anything (`-t HOST` transmits, `-r` receives): a discard
    /// service, nc, socat, a classic ttcp.
    Ttcp(Box<TtcpArgs>),
    /// Echo server load test (EchoServerTest's options): many connections,
    /// paced messages, every echoed byte checked, round-trip percentiles.
    /// Works against any server that echoes bytes back (RFC 862).
    Echo(Box<EchoArgs>),
    /// UDP media stream (ctsTraffic's UDP test): the server streams frames
    /// at --bitrate and --frame-rate, the client plays them out after
    /// --buffer-depth and counts completed, dropped, repeated and error
    /// frames, datagram loss, duplicates, reordering and jitter. With no
    /// HOST, an embedded server on loopback.
    Udp(Box<UdpArgs>),
    /// QUIC perf client (draft-banks-quic-performance, ALPN perf) for
    /// picoquic, msquic secnetperf, quinn-perf and goodput servers: a
    /// picoquic scenario, or --upload / --download / --rps / --latency /
    /// --handshakes. With no HOST, an embedded goodput server on loopback.
    Quic(Box<QuicArgs>),
    /// M-Lab's ndt7 speed test against any ndt7 server (a goodput server
    /// with --ndt7, an agent, an M-Lab ndt-server): about 10 s of download
    /// then 10 s of upload over a WebSocket, with the rate, the round trip
    /// and the retransmissions the sender's TCP saw.
    Ndt7(Box<Ndt7Args>),
    /// Traceroute without root: UDP probes of rising TTL (or TCP SYN, or
    /// ICMP echo where allowed), ICMP answers read from the socket's error
    /// queue; --pmtu finds the path MTU and the hop where it drops. Prints
    /// each hop, tracepath's summary and a checksum of the path.
    Trace(Box<TraceArgs>),
    /// Round trips where no STAMP reflector runs: ICMP echo on an
    /// unprivileged ICMP socket (a raw one as root), or TCP connect time to
    /// a port (tcpping's way, a reset counted apart) where ICMP is not
    /// allowed.
    Ping(Box<PingArgs>),
    /// DNS queries to a server or the system's resolver over UDP, TCP or
    /// DNS over TLS: each timed from query to reply, with its response
    /// code and answers; --expect and --expect-pattern check the answers,
    /// --count gives resolution percentiles, lost queries are retried.
    Dns(Box<DnsArgs>),
    /// An HTTP(S) request with each phase timed (name resolution, TCP
    /// connect, TLS handshake, first byte, transfer) over HTTP/1.1 or
    /// HTTP/2, redirects followed with --follow, the status and body
    /// checked, the body capped, and the TLS facts: protocol, cipher,
    /// chain validity, days until the certificate expires.
    Http(Box<HttpArgs>),
    /// A TLS connect and handshake only, against any TLS port: protocol,
    /// cipher, ALPN, the chain's validity in words, the leaf's subject,
    /// issuer and names, and days until it (and the chain's first)
    /// expires; --min-days N fails (exit 4) a certificate that expires
    /// sooner.
    Tls(Box<TlsArgs>),
    /// Nagios/Icinga plugin: a pair's metric over a window in an agent's
    /// archive against --warning and --critical ranges; one line with
    /// performance data, exit 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN (the
    /// agent down, no data, a bad flag).
    Check(Box<CheckArgs>),
    /// A self-contained HTML report (and PNG charts with --png) from result
    /// documents: headline figures, rates and delays over each run's own
    /// clock, histograms and percentiles, hops; with --baseline, each
    /// run's difference from a baseline, figure by figure.
    Report(Box<ReportArgs>),
    /// Run the tests a spec document describes (JSON or TOML; `-` reads
    /// standard input): one test, or several under `tests`, in order. Make
    /// one with a command's --print-spec.
    Run(Box<RunArgs>),
    /// The measurement agent: serves goodput's services, runs its share of
    /// a mesh's scheduled tests, keeps them in an archive and answers an
    /// HTTP API; --check-config prints the tasks this host would run.
    Agent(Box<AgentArgs>),
    /// Print the JSON Schema of the result document (--json), or with
    /// --spec of the spec document (`goodput run`), with --mesh of the
    /// agent's mesh configuration, with --openapi the agent API's OpenAPI
    /// document.
    Schema {
        /// The spec document's schema instead of the result's.
        #[arg(long, conflicts_with_all = ["mesh", "openapi"])]
        spec: bool,
        /// The mesh configuration's schema instead of the result's.
        #[arg(long, conflicts_with = "openapi")]
        mesh: bool,
        /// The agent API's OpenAPI 3.1 document.
        #[arg(long)]
        openapi: bool,
    },
    /// Print a shell completion script, made from the same flag definitions
    /// as --help (e.g. `goodput completions bash > /etc/bash_completion.d/goodput`).
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff), made from the same flag definitions as
    /// --help: of goodput, or of one command (`goodput man tcp | man -l -`).
    Man {
        /// A command whose page to print (default: goodput's own).
        command: Option<String>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PatternArg {
    /// Client sends, server receives.
    Push,
    /// Server sends, client receives.
    Pull,
    /// Alternate --push-bytes and --pull-bytes segments, client first.
    Pushpull,
    /// Both directions at once, half of --transfer each way.
    Duplex,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum VerifyArg {
    /// Compare every received byte with the pattern.
    Data,
    /// Check byte counts and connection integrity only.
    Connection,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ShutdownArg {
    /// shutdown(SHUT_WR), then wait for the server's FIN.
    Graceful,
    /// SO_LINGER 0 and close: an RST, so the client keeps no TIME_WAIT.
    Rude,
    /// Graceful or rude with equal odds per connection.
    Random,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum WireArg {
    /// goodput's session protocol: parameters negotiated in-band.
    Goodput,
    /// ctsTraffic's protocol (37-byte id, raw pattern, DONE); both ends need
    /// the same --pattern, --transfer, --push-bytes/--pull-bytes and --verify.
    Cts,
}

/// What the data looks like (client; server only with --wire cts).
#[derive(Debug, Args)]
pub struct PatternArgs {
    /// Data-flow pattern.
    #[arg(long, value_enum, default_value = "push")]
    pub pattern: PatternArg,
    /// Pattern bytes per connection, or a range LOW..HIGH picked per
    /// connection (negotiated, so both ends agree). Default 1GiB; but
    /// `goodput tcp` against a HOST off loopback, given neither
    /// --transfer nor --duration, runs a timed test of --duration 10s
    /// (iperf3's default) instead.
    #[arg(long, value_name = "SIZE|RANGE")]
    pub transfer: Option<ValueRange<ByteSize>>,
    /// Bytes per send and recv call, or a range picked per connection.
    #[arg(long, default_value = "1MiB", value_name = "SIZE|RANGE")]
    pub buffer: ValueRange<ByteSize>,
    /// pushpull: bytes per client-to-server segment.
    #[arg(long, default_value = "1MiB", value_name = "SIZE")]
    pub push_bytes: ByteSize,
    /// pushpull: bytes per server-to-client segment.
    #[arg(long, default_value = "1MiB", value_name = "SIZE")]
    pub pull_bytes: ByteSize,
    /// Verification of received data.
    #[arg(long, value_enum, default_value = "data")]
    pub verify: VerifyArg,
}

/// Socket options for every data connection.
#[derive(Debug, Args)]
pub struct SocketArgs {
    /// SO_SNDBUF in bytes (default: the kernel's autotuning).
    #[arg(long, value_name = "SIZE")]
    pub send_buffer: Option<ByteSize>,
    /// SO_RCVBUF in bytes (default: the kernel's autotuning).
    #[arg(long, value_name = "SIZE")]
    pub recv_buffer: Option<ByteSize>,
    /// Set TCP_NODELAY (disable Nagle's algorithm).
    #[arg(long)]
    pub no_delay: bool,
    /// TCP congestion control algorithm (TCP_CONGESTION), e.g. cubic, bbr.
    #[arg(long, value_name = "ALGO")]
    pub congestion: Option<String>,
    /// DSCP code point 0-63 for IP_TOS / IPV6_TCLASS.
    #[arg(long, value_parser = clap::value_parser!(u8).range(0..=63))]
    pub dscp: Option<u8>,
    /// Enable TCP keepalive with this idle time before probes.
    #[arg(long, value_name = "DURATION")]
    pub keepalive: Option<HumanDuration>,
    /// Bind every socket to this interface (SO_BINDTODEVICE).
    #[arg(long, value_name = "IFNAME")]
    pub interface: Option<String>,
}

/// Run control and outputs, shared by client and server.
#[derive(Debug, Args)]
pub struct OutputArgs {
    /// Stop after this long (in-flight connections are recorded as aborted).
    #[arg(long, value_name = "DURATION")]
    pub time_limit: Option<HumanDuration>,
    /// Status line period (default: 1s for a timed test of at most 60 s,
    /// 5s otherwise).
    #[arg(long, value_name = "DURATION")]
    pub status_interval: Option<HumanDuration>,
    /// Fail a connection that moves nothing for this long.
    #[arg(long, default_value = "30s", value_name = "DURATION")]
    pub idle_timeout: HumanDuration,
    #[command(flatten)]
    pub views: ViewArgs,
}

/// The console and the output files (every test kind).
#[derive(Debug, Args)]
pub struct ViewArgs {
    /// Console detail 0-5: 0 nothing at all, 1 status lines, 2 status and
    /// errors, 3 connection lines, 4 errors and connections, 5 everything.
    #[arg(long, short = 'v', default_value_t = 2, value_parser = clap::value_parser!(u8).range(0..=5))]
    pub verbosity: u8,
    /// Status per interval: CSV for a .csv name, aligned text otherwise.
    #[arg(long, value_name = "FILE")]
    pub status_file: Option<PathBuf>,
    /// One record per connection: CSV for a .csv name, text lines otherwise.
    #[arg(long, value_name = "FILE")]
    pub connection_file: Option<PathBuf>,
    /// Text log of every failed connection (not .csv).
    #[arg(long, value_name = "FILE")]
    pub error_file: Option<PathBuf>,
    /// Write the result document (JSON, see `goodput schema`) here at the end.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Stream intervals and connections as JSON lines ("-" = standard output).
    #[arg(long, value_name = "FILE")]
    pub json_stream: Option<PathBuf>,
    /// Most connection records, and most status intervals, kept in the JSON
    /// document (all are counted in the summary and written to the files).
    #[arg(long, default_value_t = 100_000, value_name = "N")]
    pub max_records: usize,
}

/// A duration where a bare number means milliseconds (EchoServerTest's unit).
fn parse_millis(s: &str) -> Result<HumanDuration, String> {
    if let Ok(ms) = s.parse::<u64>() {
        return Ok(HumanDuration(std::time::Duration::from_millis(ms)));
    }
    s.parse::<HumanDuration>().map_err(|e| e.to_string())
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The spec document: a .json or .toml file, or `-` for standard input
    /// (JSON or TOML, told apart by its first character).
    pub file: PathBuf,
    #[command(flatten)]
    pub views: ViewArgs,
    /// Print the tests the document describes, every field written out
    /// (the defaults filled in), as JSON, and exit without running them.
    #[arg(long)]
    pub print_spec: bool,
}

/// ctsTraffic's transfer per connection, when none is given.
pub const DEFAULT_TRANSFER: u64 = 1 << 30;

/// The status interval of runs longer than a minute, or of unknown length.
pub const LONG_STATUS_INTERVAL: std::time::Duration = std::time::Duration::from_secs(5);

/// The status interval of a run known to end within a minute.
pub const SHORT_STATUS_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

impl PatternArgs {
    /// The transfer per connection: the flag's, or the default.
    pub fn transfer_or_default(&self) -> ValueRange<ByteSize> {
        self.transfer
            .unwrap_or_else(|| ValueRange::single(ByteSize(DEFAULT_TRANSFER)))
    }
}

impl PatternArg {
    /// The pattern in the spec's terms.
    pub fn spec(self) -> goodput_core::plan::TcpPattern {
        use goodput_core::plan::TcpPattern;
        match self {
            PatternArg::Push => TcpPattern::Push,
            PatternArg::Pull => TcpPattern::Pull,
            PatternArg::Pushpull => TcpPattern::PushPull,
            PatternArg::Duplex => TcpPattern::Duplex,
        }
    }
}

impl VerifyArg {
    /// The verification in the spec's terms.
    pub fn spec(self) -> goodput_core::session::VerifyMode {
        match self {
            VerifyArg::Data => goodput_core::session::VerifyMode::Data,
            VerifyArg::Connection => goodput_core::session::VerifyMode::Connection,
        }
    }
}

impl WireArg {
    /// The wire in the spec's terms.
    pub fn spec(self) -> goodput_core::spec::TcpWire {
        match self {
            WireArg::Goodput => goodput_core::spec::TcpWire::Goodput,
            WireArg::Cts => goodput_core::spec::TcpWire::Cts,
        }
    }
}

impl SocketArgs {
    /// The socket options in the spec's terms.
    pub fn spec(&self) -> goodput_core::spec::SocketSpec {
        goodput_core::spec::SocketSpec {
            send_buffer: self.send_buffer,
            recv_buffer: self.recv_buffer,
            no_delay: self.no_delay,
            congestion: self.congestion.clone(),
            dscp: self.dscp,
            keepalive: self.keepalive,
            interface: self.interface.clone(),
        }
    }
}
