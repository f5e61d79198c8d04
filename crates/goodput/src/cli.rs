//! Every flag, with its help text, default and validation, in one place;
//! `--help` is generated from these definitions.

use std::net::IpAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use goodput_core::units::{ByteRate, ByteSize, HumanDuration, PortRange, ValueRange};

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
    /// Run the tests a spec document describes (JSON or TOML; `-` reads
    /// standard input): one test, or several under `tests`, in order. Make
    /// one with a command's --print-spec.
    Run(Box<RunArgs>),
    /// Print the JSON Schema of the result document (--json), or with
    /// --spec of the spec document (`goodput run`).
    Schema {
        /// The spec document's schema instead of the result's.
        #[arg(long)]
        spec: bool,
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
    /// connection (negotiated, so both ends agree).
    #[arg(long, default_value = "1GiB", value_name = "SIZE|RANGE")]
    pub transfer: ValueRange<ByteSize>,
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
    #[arg(long, alias = "duration", value_name = "DURATION")]
    pub time_limit: Option<HumanDuration>,
    /// Status line period.
    #[arg(long, default_value = "5s", value_name = "DURATION")]
    pub status_interval: HumanDuration,
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
}

/// A size as iperf3 reads it: K, M, G, T multiply by 1024 (KiB … also
/// accepted).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Iperf3Size(pub u64);

impl std::str::FromStr for Iperf3Size {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let t = s.trim();
        let split = t
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(t.len());
        let (num, suffix) = t.split_at(split);
        let mult: u64 = match suffix.trim() {
            "" => 1,
            "k" | "K" | "KiB" => 1 << 10,
            "m" | "M" | "MiB" => 1 << 20,
            "g" | "G" | "GiB" => 1 << 30,
            "t" | "T" | "TiB" => 1 << 40,
            _ => {
                return Err(format!(
                    "'{s}': expected a number with an optional K, M, G or T (×1024)"
                ))
            }
        };
        let v: f64 = num.parse().map_err(|_| format!("'{s}': not a number"))?;
        let bytes = v * mult as f64;
        if !(0.0..1.8e19).contains(&bytes) {
            return Err(format!("'{s}': out of range"));
        }
        Ok(Iperf3Size(bytes.round() as u64))
    }
}

/// A rate in bits/s as iperf3 reads it: k, m, g, t multiply by 1000.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Iperf3Rate(pub u64);

impl std::str::FromStr for Iperf3Rate {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let t = s.trim();
        if t.contains('/') {
            return Err(format!("'{s}': burst counts (RATE/N) are not supported"));
        }
        let split = t
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(t.len());
        let (num, suffix) = t.split_at(split);
        let mult: f64 = match suffix.trim() {
            "" => 1.0,
            "k" | "K" => 1e3,
            "m" | "M" => 1e6,
            "g" | "G" => 1e9,
            "t" | "T" => 1e12,
            _ => {
                return Err(format!(
                    "'{s}': expected bits/s with an optional k, m, g or t (×1000)"
                ))
            }
        };
        let v: f64 = num.parse().map_err(|_| format!("'{s}': not a number"))?;
        let bits = v * mult;
        if !(0.0..1.8e19).contains(&bits) {
            return Err(format!("'{s}': out of range"));
        }
        Ok(Iperf3Rate(bits.round() as u64))
    }
}

/// `goodput iperf3`: iperf3's own option letters.
#[derive(Debug, Args)]
pub struct Iperf3Args {
    /// iperf3 server host name or address (default: an embedded goodput
    /// iperf3 server on loopback).
    pub host: Option<String>,
    /// Server port.
    #[arg(long, short = 'p', default_value_t = 5201)]
    pub port: u16,
    /// Test length in seconds (ignored with -n or -k).
    #[arg(long, short = 't', default_value_t = 10, value_name = "SECONDS")]
    pub time: u32,
    /// End after this many bytes (sent, or received with -R).
    #[arg(
        long = "bytes",
        short = 'n',
        value_name = "SIZE",
        conflicts_with = "blockcount"
    )]
    pub bytes: Option<Iperf3Size>,
    /// End after this many blocks (of -l bytes).
    #[arg(long, short = 'k', value_name = "N")]
    pub blockcount: Option<u64>,
    /// Parallel streams per direction (1-128).
    #[arg(long, short = 'P', default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=128))]
    pub parallel: u32,
    /// Reverse: the server sends.
    #[arg(long, short = 'R', conflicts_with = "bidir")]
    pub reverse: bool,
    /// Both directions at once (-P streams each way).
    #[arg(long)]
    pub bidir: bool,
    /// UDP instead of TCP.
    #[arg(long, short = 'u')]
    pub udp: bool,
    /// Target rate per stream in bits/s (UDP default 1M = 1048576; TCP
    /// default unlimited).
    #[arg(long, short = 'b', value_name = "RATE")]
    pub bitrate: Option<Iperf3Rate>,
    /// Block (TCP write) or datagram (UDP) size (TCP default 128K; UDP
    /// default 1460).
    #[arg(long, short = 'l', value_name = "SIZE")]
    pub length: Option<Iperf3Size>,
    /// Socket buffer size (SO_SNDBUF and SO_RCVBUF) on both ends.
    #[arg(long, short = 'w', value_name = "SIZE")]
    pub window: Option<Iperf3Size>,
    /// TCP congestion control algorithm on both ends.
    #[arg(long, short = 'C', value_name = "ALGO")]
    pub congestion: Option<String>,
    /// TCP maximum segment size, bytes.
    #[arg(long = "set-mss", short = 'M', value_name = "BYTES")]
    pub mss: Option<u32>,
    /// TCP_NODELAY on the data connections.
    #[arg(long = "no-delay", short = 'N')]
    pub no_delay: bool,
    /// Seconds to leave out of the figures at the start.
    #[arg(long, short = 'O', default_value_t = 0, value_name = "SECONDS")]
    pub omit: u32,
    /// IP type of service byte (0-255; DSCP × 4).
    #[arg(long, short = 'S', default_value_t = 0, value_name = "TOS")]
    pub tos: u8,
    /// Local port of the first data stream (the others use the next ports).
    #[arg(long, value_name = "PORT")]
    pub cport: Option<u16>,
    /// Local address to bind.
    #[arg(long, short = 'B', value_name = "ADDR")]
    pub bind: Option<IpAddr>,
    /// Use IPv4 only.
    #[arg(short = '4', conflicts_with = "ipv6")]
    pub ipv4: bool,
    /// Use IPv6 only.
    #[arg(short = '6')]
    pub ipv6: bool,
    /// Ask the server for its own report and show it.
    #[arg(long)]
    pub get_server_output: bool,
    /// 64-bit UDP sequence numbers.
    #[arg(long)]
    pub udp_counters_64bit: bool,
    /// Send the digits 0-9 repeated instead of random bytes.
    #[arg(long)]
    pub repeating_payload: bool,
    /// Title, echoed into both ends' JSON.
    #[arg(long, short = 'T')]
    pub title: Option<String>,
    /// Extra data string, echoed into both ends' JSON.
    #[arg(long)]
    pub extra_data: Option<String>,
    /// Status interval.
    #[arg(long, short = 'i', default_value = "1s", value_name = "DURATION")]
    pub interval: HumanDuration,
    /// How long a connect or a server answer may take.
    #[arg(long, default_value = "30s", value_name = "DURATION")]
    pub timeout: HumanDuration,
    /// Also write the result in iperf3's -J JSON shape to FILE ("-" = stdout).
    #[arg(long, value_name = "FILE")]
    pub iperf3_json: Option<PathBuf>,
    #[command(flatten)]
    pub views: ViewArgs,
}

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
}

/// A duration where a bare number means milliseconds (EchoServerTest's unit).
fn parse_millis(s: &str) -> Result<HumanDuration, String> {
    if let Ok(ms) = s.parse::<u64>() {
        return Ok(HumanDuration(std::time::Duration::from_millis(ms)));
    }
    s.parse::<HumanDuration>().map_err(|e| e.to_string())
}

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
}

/// `goodput stamp`: a STAMP Session-Sender.
#[derive(Debug, Args)]
pub struct StampArgs {
    /// Reflector host name or address (default: an embedded goodput
    /// reflector on loopback).
    pub host: Option<String>,
    /// Reflector UDP port.
    #[arg(long, short = 'p', default_value_t = 862)]
    pub port: u16,
    /// Time between packets of one session.
    #[arg(
        long,
        short = 'i',
        default_value = "100ms",
        value_name = "DURATION",
        conflicts_with = "rate"
    )]
    pub interval: HumanDuration,
    /// Packets per second per session (instead of --interval).
    #[arg(long, value_name = "PPS")]
    pub rate: Option<f64>,
    /// Packets per session (default 100 when no --duration is given).
    #[arg(long, short = 'c', value_name = "N")]
    pub count: Option<u64>,
    /// Send for this long (with --count, whichever ends first).
    #[arg(long, short = 'd', value_name = "DURATION")]
    pub duration: Option<HumanDuration>,
    /// UDP payload per packet in bytes: the 44-byte STAMP packet plus zero
    /// padding (44-9000).
    #[arg(long, short = 's', default_value_t = 44, value_name = "BYTES")]
    pub size: usize,
    /// DSCP of the test packets (0-63).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=63))]
    pub dscp: u8,
    /// RFC 8972 session id (1-65535); session i sends SSID + i.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    pub ssid: Option<u16>,
    /// How long a reply may take before its packet counts as lost.
    #[arg(long, short = 'L', default_value = "2s", value_name = "DURATION")]
    pub timeout: HumanDuration,
    /// Concurrent sessions, each from its own UDP port.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub sessions: u32,
    /// Local address to send from.
    #[arg(long, short = 'B', value_name = "ADDR")]
    pub bind: Option<IpAddr>,
    /// Use IPv4 only.
    #[arg(short = '4', conflicts_with = "ipv6")]
    pub ipv4: bool,
    /// Use IPv6 only.
    #[arg(short = '6')]
    pub ipv6: bool,
    /// The embedded reflector (no HOST) keeps per-session sequence numbers,
    /// so loss splits into forward and backward.
    #[arg(long)]
    pub stateful: bool,
    /// Every packet's fate (CSV for a .csv name, text otherwise): times T1-T4
    /// in Unix ns, delays in µs, TTLs.
    #[arg(long, value_name = "FILE")]
    pub packet_file: Option<PathBuf>,
    /// Status line period.
    #[arg(long, default_value = "1s", value_name = "DURATION")]
    pub status_interval: HumanDuration,
    #[command(flatten)]
    pub views: ViewArgs,
    /// Print the test these flags describe as a spec document (JSON, for
    /// `goodput run`) and exit without running it.
    #[arg(long)]
    pub print_spec: bool,
}

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
}

/// `goodput quic`: the QUIC perf client.
#[derive(Debug, Args)]
pub struct QuicArgs {
    /// Server host name or address (default: an embedded goodput server on
    /// loopback).
    pub host: Option<String>,
    /// Server UDP port.
    #[arg(default_value_t = 4433)]
    pub port: u16,
    /// picoquic scenario: `*1:397:5000000;` (repeat, post size, response
    /// size), `=id:=after:*N:post:response`, `-N` responses (unlimited,
    /// STOP_SENDING after N bytes), media `s30:n150:2000` and datagrams
    /// `d50:n250:100`; the legacy `*1:0:-:397:5000000;` form is translated.
    /// Post sizes count the 8-byte request header (16 for media), as
    /// picoquic counts them. Default: one 100,000,000-byte download.
    pub scenario: Option<String>,
    /// The scenario, as an option (so it can be given without HOST, to the
    /// embedded server).
    #[arg(
        long = "scenario",
        short = 's',
        value_name = "SCENARIO",
        conflicts_with = "scenario"
    )]
    pub scenario_flag: Option<String>,
    /// Upload SIZE bytes after the 8-byte header (quinn-perf's count), or
    /// for a DURATION (`10s`).
    #[arg(long, value_name = "SIZE|DURATION", conflicts_with_all = ["scenario", "scenario_flag", "download", "rps", "latency", "handshakes"])]
    pub upload: Option<String>,
    /// Download SIZE bytes, or for a DURATION (an unlimited request ended by
    /// STOP_SENDING).
    #[arg(long, value_name = "SIZE|DURATION", conflicts_with_all = ["scenario", "scenario_flag", "rps", "latency", "handshakes"])]
    pub download: Option<String>,
    /// Requests per second: keep --streams requests outstanding per
    /// connection for --duration.
    #[arg(long, conflicts_with_all = ["scenario", "scenario_flag", "latency", "handshakes"])]
    pub rps: bool,
    /// One request at a time per connection (latency).
    #[arg(long, conflicts_with_all = ["scenario", "scenario_flag", "handshakes"])]
    pub latency: bool,
    /// Open and close connections as fast as possible for --duration.
    #[arg(long, conflicts_with_all = ["scenario", "scenario_flag"])]
    pub handshakes: bool,
    /// Requests outstanding per connection with --rps.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub streams: u32,
    /// Request payload bytes with --rps/--latency (after the 8-byte header).
    #[arg(long, default_value = "512", value_name = "SIZE")]
    pub request: ByteSize,
    /// Response bytes with --rps/--latency.
    #[arg(long, default_value = "4000", value_name = "SIZE")]
    pub response: ByteSize,
    /// Length of --rps, --latency and --handshakes runs.
    #[arg(long, default_value = "10s", value_name = "DURATION")]
    pub duration: HumanDuration,
    /// Connections at once, each running the whole scenario.
    #[arg(long, short = 'c', default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub connections: u32,
    /// Ask for responses on unidirectional streams (quinn-perf's --uni).
    #[arg(long)]
    pub uni: bool,
    /// Trust certificates from this PEM file (default: the system's roots;
    /// with no HOST, the embedded server's certificate is accepted).
    #[arg(long, value_name = "FILE", conflicts_with = "insecure")]
    pub ca: Option<PathBuf>,
    /// Accept any server certificate (signatures are still checked).
    #[arg(long)]
    pub insecure: bool,
    /// TLS server name (default: HOST, or localhost for an address).
    #[arg(long, value_name = "NAME")]
    pub sni: Option<String>,
    /// Use IPv4 only.
    #[arg(short = '4', conflicts_with = "ipv6")]
    pub ipv4: bool,
    /// Use IPv6 only.
    #[arg(short = '6')]
    pub ipv6: bool,
    /// Append picoquic's performance-log CSV (Log_v 2, ", "-separated),
    /// one row per connection.
    #[arg(long, value_name = "FILE")]
    pub perf_log: Option<PathBuf>,
    /// Status line period.
    #[arg(long, default_value = "1s", value_name = "DURATION")]
    pub status_interval: HumanDuration,
    #[command(flatten)]
    pub views: ViewArgs,
}

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
    /// Also run a QUIC perf server (ALPN perf) on UDP --quic-port.
    #[arg(long)]
    pub quic: bool,
    /// UDP port of the QUIC perf server.
    #[arg(long, default_value_t = 4433, value_name = "PORT")]
    pub quic_port: u16,
    /// Address of the QUIC perf server (repeatable; default 0.0.0.0 and ::).
    #[arg(long, value_name = "ADDR")]
    pub quic_listen: Vec<IpAddr>,
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
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The spec document: a .json or .toml file, or `-` for standard input
    /// (JSON or TOML, told apart by its first character).
    pub file: PathBuf,
    #[command(flatten)]
    pub views: ViewArgs,
}
