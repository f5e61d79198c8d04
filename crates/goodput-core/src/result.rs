//! The result model: one typed, versioned document per test. The console,
//! CSV and text files and JSON are all views of these types.

use serde::{Deserialize, Serialize};

use crate::metrics;
use crate::plan::{Direction, TcpPattern};
use crate::session::{RejectCode, VerifyMode};

mod detail;
pub use detail::{Detail, ServerDetail};

/// Version of the JSON document's shape; bumped on any incompatible change.
pub const SCHEMA_VERSION: u32 = 1;

/// The complete result of one run (client or server).
///
/// Written and read as the JSON document of `detail`'s module: the
/// detail's keys sit beside the common ones.
#[derive(Debug, Clone)]
pub struct TestResult {
    /// Shape version of this document ([`SCHEMA_VERSION`]).
    pub schema_version: u32,
    /// Program that wrote it.
    pub tool: ToolInfo,
    /// Which test and which side.
    pub kind: TestKind,
    /// The test as a document, when it was run from one (`goodput run`
    /// reads it back to run the same test again).
    pub spec: Option<crate::spec::TestSpec>,
    /// Wall-clock start, milliseconds since the Unix epoch.
    pub started_unix_ms: u64,
    /// Settings in force.
    pub settings: TcpSettings,
    /// One snapshot per status interval, in order (up to the record cap,
    /// plus the final one).
    pub intervals: Vec<Interval>,
    /// Intervals beyond the cap, not kept here (they were streamed to the
    /// status file and JSON lines).
    pub intervals_omitted: u64,
    /// One record per connection that ended (or was aborted), in end order.
    pub connections: Vec<ConnectionRecord>,
    /// Totals and distributions over the connections.
    pub summary: Summary,
    /// Records not kept in `connections` because the run had more than the
    /// cap (they are in the summary and in `--connection-file`).
    pub connections_omitted: u64,
    /// Why the run ended.
    pub end: EndReason,
    /// The spec's assertions over this result, each with what was
    /// measured and whether it held.
    pub assertions: Vec<crate::assertion::AssertionOutcome>,
    /// Why the run failed, and how far it got, when it ended `failed`.
    pub error: Option<RunFailure>,
    /// What this kind of run adds to the common record.
    pub detail: Detail,
}

/// How a server's TCP services admitted connections over its life, and the
/// places held when the counters were read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct AdmissionCounters {
    /// Connections given an open place.
    pub admitted: u64,
    /// Connections refused because the server held its most connections.
    pub refused_total: u64,
    /// Connections refused because their address held its most connections.
    pub refused_per_client: u64,
    /// Connections reset at once: no place even to say why (too many in
    /// their hello, in total or from the address).
    pub reset_pending: u64,
    /// Connections whose hello or TLS handshake missed its deadline.
    pub hello_timeouts: u64,
    /// Connection tasks that ended in a panic (a bug of the server; the
    /// connection's places were given back).
    pub internal_errors: u64,
    /// Open places held when read.
    pub open_now: u64,
    /// Pending places (hello or handshake) held when read.
    pub pending_now: u64,
    /// Client addresses holding a place when read.
    pub clients_now: u64,
}

/// What a QUIC perf run adds to the common record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct QuicDetail {
    /// What ran: scenario, upload, download, rps, latency or handshakes.
    pub mode: String,
    /// The scenario in picoquic's current grammar (scenario modes).
    pub scenario: Option<String>,
    /// The scenario as given, when it was in the legacy grammar.
    pub legacy_scenario: Option<String>,
    /// Responses requested on unidirectional streams.
    pub unidirectional: bool,
    /// Connections.
    pub connections: u64,
    /// Streams (requests) completed with the right byte count.
    pub transactions: u64,
    /// Streams that failed (wrong byte count, reset, connection lost).
    pub failed_streams: u64,
    /// Stream bytes sent, request headers included (as picoquic counts).
    pub upload_bytes: u64,
    /// Response bytes received.
    pub download_bytes: u64,
    /// From the first connection attempt to the end, seconds.
    pub duration_s: f64,
    /// Transactions per second.
    pub tps: f64,
    /// Upload rate, Mbit/s.
    pub upload_mbps: f64,
    /// Download rate, Mbit/s.
    pub download_mbps: f64,
    /// Media and datagram descriptions: frames and delays.
    pub media: Vec<QuicMediaStats>,
    /// Request/response runs (`--rps`, `--latency`).
    pub requests: Option<QuicRequestStats>,
    /// Handshake runs (`--handshakes`).
    pub handshakes: Option<QuicHandshakeStats>,
    /// The first errors seen (at most 20).
    pub errors: Vec<String>,
}

/// One media or datagram description's frames.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct QuicMediaStats {
    /// The description's name, or `#<index>`.
    pub id: String,
    /// Frames received.
    pub received_frames: u64,
    /// Frames asked for.
    pub expected_frames: u64,
    /// Arrival minus the frame's expected time (stream start + k / rate),
    /// microseconds: smallest, mean, largest.
    pub delay_min_us: f64,
    /// Mean delay.
    pub delay_avg_us: f64,
    /// Largest delay.
    pub delay_max_us: f64,
}

/// Request/response figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct QuicRequestStats {
    /// Requests outstanding per connection.
    pub streams: u32,
    /// Request payload bytes (after the 8-byte header).
    pub request_bytes: u64,
    /// Response bytes.
    pub response_bytes: u64,
    /// Requests completed.
    pub completed: u64,
    /// Requests per second.
    pub per_second: f64,
    /// Request latency (stream opened → response FIN).
    pub latency: Option<Percentiles>,
}

/// Handshake figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct QuicHandshakeStats {
    /// Handshakes completed.
    pub completed: u64,
    /// Handshakes that failed.
    pub failed: u64,
    /// Completed per second.
    pub per_second: f64,
    /// Handshake time.
    pub time: Option<Percentiles>,
}

/// quinn's connection statistics (what it can provide of picoquic's), in
/// each QUIC connection's record (absent when it never connected).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct QuicPathStats {
    /// Smoothed RTT, microseconds.
    pub rtt_us: u64,
    /// Minimum RTT, microseconds; absent where quinn's minimum read 0,
    /// which it does on a fast path when an acknowledgement is stamped
    /// with a receive time taken before the packet it acknowledges was
    /// sent (its batches share one clock reading): not an RTT.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_rtt_us: Option<u64>,
    /// Congestion window, bytes.
    pub cwnd_bytes: u64,
    /// Congestion events.
    pub congestion_events: u64,
    /// Packets declared lost.
    pub lost_packets: u64,
    /// Bytes declared lost.
    pub lost_bytes: u64,
    /// Packets sent.
    pub sent_packets: u64,
    /// UDP datagrams received.
    pub received_datagrams: u64,
    /// UDP bytes sent.
    pub sent_udp_bytes: u64,
    /// UDP bytes received.
    pub received_udp_bytes: u64,
    /// Path MTU, bytes.
    pub mtu_bytes: u16,
}

/// What a server's QUIC perf service did over its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct QuicServerCounters {
    /// Connections established.
    pub connections: u64,
    /// Connections refused (over the limit).
    pub refused_connections: u64,
    /// Handshakes that failed.
    pub handshake_failures: u64,
    /// Retry packets sent to Initials from addresses not yet validated.
    #[serde(default)]
    pub retries_sent: u64,
    /// Initials dropped unanswered (too many handshakes at once, or a
    /// Retry that could not be made).
    #[serde(default)]
    pub dropped_initials: u64,
    /// Handshakes that did not finish within the deadline.
    #[serde(default)]
    pub handshake_timeouts: u64,
    /// Connection tasks that ended in a panic (a bug of the server; the
    /// connection's places were given back).
    #[serde(default)]
    pub internal_errors: u64,
    /// Client streams.
    pub streams: u64,
    /// Streams that ended before their 8-byte header.
    pub short_requests: u64,
    /// Streams refused (response over the limit).
    pub refused_streams: u64,
    /// Responses stopped by the client (STOP_SENDING).
    pub stopped: u64,
    /// Media requests.
    pub media_streams: u64,
    /// DATAGRAM frames sent.
    pub datagrams_sent: u64,
    /// Stream bytes received.
    pub bytes_received: u64,
    /// Stream bytes sent.
    pub bytes_sent: u64,
}

/// What a UDP media-stream run adds to the common record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MediaDetail {
    /// The client streamed to the server (else the server to the client).
    pub upload: bool,
    /// Payloads were checked against the pattern.
    pub verify_data: bool,
    /// Nominal bit rate, bits/s, rounded down to whole bytes.
    pub bits_per_second: u64,
    /// Rate the frame arithmetic delivers, bits/s (headers included).
    pub effective_bits_per_second: f64,
    /// Frames per second.
    pub frame_rate: u32,
    /// Stream length, seconds.
    pub length_s: u32,
    /// Frames per stream.
    pub frames: u32,
    /// Bytes per frame, datagram headers included.
    pub frame_bytes: u64,
    /// Largest datagram (UDP payload), bytes.
    pub datagram_bytes: u32,
    /// Datagrams per frame.
    pub datagrams_per_frame: u32,
    /// Play-out delay after the stream opens, milliseconds.
    pub buffer_depth_ms: u64,
    /// Streams run.
    pub streams: u64,
    /// Streams that failed (refused, no data, socket or pattern errors).
    pub streams_failed: u64,
    /// All streams together.
    pub total: MediaStats,
    /// Mergeable distributions of all streams.
    pub histograms: MediaHistograms,
}

/// One stream's (or all streams') datagram and frame accounting, from the
/// receiving end. Times in microseconds.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MediaStats {
    /// Datagrams the sender sent, when known (its End message, or our own
    /// count when we sent).
    pub sent: Option<u64>,
    /// Datagrams planned that the kernel refused to send (never sent),
    /// when known: our own count when we sent, the sender's End otherwise.
    pub send_errors: Option<u64>,
    /// `send_errors` by reason, when we sent.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub send_failures: Vec<SendFailure>,
    /// Distinct datagrams received.
    pub received: u64,
    /// Bytes received (UDP payload, headers included), when we received.
    pub received_bytes: Option<u64>,
    /// Datagrams sent and never received (refused sends are not in it).
    pub lost: u64,
    /// Datagrams lost or refused, percent of those planned (`sent +
    /// send_errors`): a datagram that could not be sent is lost too.
    pub loss_percent: f64,
    /// Datagrams that arrived more than once (each extra copy counted).
    pub duplicates: u64,
    /// RFC 4737 reordered datagrams.
    pub reordered: u64,
    /// Reordered as a percentage of received.
    pub reordered_percent: f64,
    /// Mean RFC 4737 reordering extent, datagrams, when measured here.
    pub reorder_extent_mean: Option<f64>,
    /// Largest reordering extent, datagrams, when measured here.
    pub reorder_extent_max: Option<u64>,
    /// Datagrams that arrived after their frame was played.
    pub late: u64,
    /// Datagrams outside the stream or the receive window, or not matching
    /// the plan (ctsTraffic's per-datagram Errors).
    pub errors: u64,
    /// Datagrams whose payload did not match the pattern.
    pub corrupt: u64,
    /// Frames played with exactly their bytes.
    pub frames_completed: u64,
    /// Frames played short (a datagram lost or late).
    pub frames_dropped: u64,
    /// Frames played with more bytes (a datagram twice).
    pub frames_repeated: u64,
    /// RFC 3550 interarrival jitter (for several streams, their mean).
    pub jitter_us: f64,
    /// RFC 3393 IPDV of consecutive datagrams, when measured here.
    pub ipdv: Option<IpdvStats>,
    /// RFC 5481 delay variation: one-way delay minus the smallest, when
    /// measured here (the clock offset cancels).
    pub delay_variation: Option<DelayStats>,
}

/// HdrHistograms (V2 compressed, base64, nanoseconds) of a media run.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MediaHistograms {
    /// One-way delay relative to each stream's first datagram, values ≥ 0
    /// (merging streams mixes their baselines; within one it is exact).
    pub relative_delay_ns: Option<String>,
    /// The same, magnitudes of values < 0.
    pub relative_delay_negative_ns: Option<String>,
    /// IPDV, values ≥ 0.
    pub ipdv_ns: Option<String>,
    /// IPDV, magnitudes of values < 0.
    pub ipdv_negative_ns: Option<String>,
}

/// One received media datagram, for the jitter file.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MediaDatagram {
    /// Stream id.
    pub stream: u32,
    /// Datagram sequence.
    pub seq: u64,
    /// Frame number.
    pub frame: u32,
    /// Sender's monotonic clock at send, nanoseconds.
    pub sent_ns: u64,
    /// Receiver's kernel receive time, Unix nanoseconds.
    pub recv_unix_ns: i64,
    /// Time in flight relative to the stream's first datagram, nanoseconds.
    pub relative_delay_ns: i64,
    /// IPDV against the previous sequence, when that one arrived just before.
    pub ipdv_ns: Option<i64>,
    /// ok, corrupt, duplicate, late or error.
    pub arrival: &'static str,
}

/// All media streams within one status interval (ctsTraffic's UDP columns:
/// frame counts are the interval's own, not cumulative).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MediaInterval {
    /// Bits received per second in the interval (sent, on a sending side).
    pub bits_per_second: u64,
    /// Streams open at the end of the interval.
    pub streams: u64,
    /// Frames played complete.
    pub completed: u64,
    /// Frames played short.
    pub dropped: u64,
    /// Frames played with a repeated datagram.
    pub repeated: u64,
    /// Datagrams counted as errors.
    pub errors: u64,
    /// Datagrams received.
    pub received: u64,
    /// Datagrams found lost (by sequence gaps) in the interval.
    pub lost: u64,
    /// Mean RFC 3550 jitter of the open streams, microseconds.
    pub jitter_us: f64,
}

/// What a server's media-stream service did over its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MediaServerCounters {
    /// Requests without a valid cookie, answered with a challenge.
    pub challenged: u64,
    /// Datagrams or timer rounds whose handling panicked (a bug of the
    /// server; the service went on).
    #[serde(default)]
    pub internal_errors: u64,
    /// Streams accepted.
    pub accepted: u64,
    /// Requests refused (limits, bad plan, busy, memory, per client).
    pub rejected: u64,
    /// Of those, refused for a field above the server's limits (bit rate,
    /// length, frame rate, buffer depth) or a plan that cannot be built.
    #[serde(default)]
    pub rejected_limits: u64,
    /// Of those, refused because the memory budget was taken.
    #[serde(default)]
    pub rejected_memory: u64,
    /// Of those, refused because the client's address held the most
    /// streams, or the most of the memory budget, one address may hold.
    #[serde(default)]
    pub rejected_per_client: u64,
    /// Most memory the open streams held at once, bytes (the server's own
    /// accounting of each stream's ceiling).
    #[serde(default)]
    pub memory_peak_bytes: u64,
    /// Streams that ran to the end.
    pub completed: u64,
    /// Streams stopped because the receiver's reports stopped.
    pub abandoned: u64,
    /// Datagrams that were not ours, malformed or for no open stream.
    pub unsolicited: u64,
    /// Data datagrams sent.
    pub sent: u64,
    /// Data datagrams received (uploads).
    pub received: u64,
    /// Sends the kernel refused.
    pub send_errors: u64,
}

/// What an echo load test adds to the common record. Times in microseconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct EchoDetail {
    /// Connections attempted.
    pub connections: u64,
    /// Connections established.
    pub established: u64,
    /// Connects refused (ECONNREFUSED).
    pub refused: u64,
    /// Connects or connections reset (ECONNRESET).
    pub reset: u64,
    /// Connects or echoes that timed out.
    pub timed_out: u64,
    /// Other failures.
    pub other_failures: u64,
    /// Connect time (SYN to established).
    pub connect_time: Option<Percentiles>,
    /// Messages per connection planned.
    pub messages_per_connection: u64,
    /// Message size, bytes.
    pub message_bytes: u64,
    /// Time between messages, microseconds.
    pub message_interval_us: u64,
    /// Closed loop: the next message's timer starts when the echo is back.
    pub send_after_recv: bool,
    /// Messages sent.
    pub sent: u64,
    /// Messages whose echo came back whole.
    pub echoed: u64,
    /// Echoed messages with a wrong byte.
    pub mismatched: u64,
    /// Messages only partly echoed when the connection ended.
    pub short: u64,
    /// Messages with no echo at all when the connection ended.
    pub missing: u64,
    /// Bytes echoed beyond what was sent.
    pub extra_bytes: u64,
    /// Round trip per message, from its scheduled send time (open loop) or
    /// its send time (closed loop) to the last echoed byte.
    pub round_trip: Option<Percentiles>,
    /// Round trips as an HdrHistogram (V2 compressed, base64, nanoseconds).
    pub round_trip_histogram: Option<String>,
    /// Connect times as an HdrHistogram (nanoseconds).
    pub connect_histogram: Option<String>,
}

/// A latency distribution, microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Percentiles {
    /// Samples.
    pub count: u64,
    /// Smallest.
    pub min_us: f64,
    /// Median.
    pub p50_us: f64,
    /// 90th percentile.
    pub p90_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// 99.9th percentile.
    pub p999_us: f64,
    /// Largest.
    pub max_us: f64,
}

impl Percentiles {
    /// From an HdrHistogram of nanoseconds; `None` when it is empty.
    pub fn from_histogram(h: &hdrhistogram::Histogram<u64>) -> Option<Self> {
        let us = |q: f64| h.value_at_quantile(q) as f64 / 1e3;
        (!h.is_empty()).then(|| Self {
            count: h.len(),
            min_us: h.min() as f64 / 1e3,
            p50_us: us(0.5),
            p90_us: us(0.9),
            p99_us: us(0.99),
            p999_us: us(0.999),
            max_us: h.max() as f64 / 1e3,
        })
    }
}

/// One status interval of an echo load test.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct EchoInterval {
    /// Connections established so far.
    pub established: u64,
    /// Connections failed so far.
    pub failed: u64,
    /// Messages sent in the interval.
    pub sent: u64,
    /// Messages echoed in the interval.
    pub echoed: u64,
    /// Mismatched echoes in the interval.
    pub mismatched: u64,
    /// Round trips of the interval's echoes.
    pub round_trip: Option<Percentiles>,
}

/// What a TTCP transmitter or receiver measured, with ttcp's meanings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TtcpDetail {
    /// This end transmitted (`-t`) rather than received (`-r`).
    pub transmit: bool,
    /// UDP (`-u`) rather than TCP.
    pub udp: bool,
    /// Bytes per write or read call (`-l`).
    pub buflen: u64,
    /// Buffers to send (`-n`; the transmitter's plan).
    pub nbuf: u64,
    /// Payload bytes moved (UDP: without the 4-byte start/end markers).
    pub bytes: u64,
    /// Read or write system calls made on the data socket.
    pub calls: u64,
    /// Times the UDP transmitter slept because the kernel had no buffer
    /// (ENOBUFS) and retried.
    pub sleeps: u64,
    /// UDP datagrams carrying data (receiver: the ones that arrived).
    pub datagrams: u64,
    /// Wall-clock time from the first to the last byte (ttcp's "real"), seconds.
    pub real_s: f64,
    /// CPU time in user mode over the same span, seconds.
    pub user_s: f64,
    /// CPU time in the kernel over the same span, seconds.
    pub system_s: f64,
    /// Pattern from memory (`--sinkmode`, the default) rather than stdin/stdout.
    pub sinkmode: bool,
    /// The peer: the address connected to, or the one that connected / sent.
    pub peer: String,
    /// Why the transfer ended early, when it did.
    pub error: Option<String>,
}

/// Program name and version.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ToolInfo {
    /// Always "goodput".
    pub name: String,
    /// Semantic version of the program.
    pub version: String,
}

/// Test kind and side.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TestKind {
    /// `goodput tcp`, the client side.
    TcpClient,
    /// `goodput server`, the TCP server side.
    TcpServer,
    /// `goodput iperf3`, driving an iperf3 server.
    Iperf3Client,
    /// `goodput server --iperf3`, one test of an iperf3 client.
    Iperf3Server,
    /// `goodput stamp`, a STAMP Session-Sender.
    StampSender,
    /// `goodput ttcp -t`, a TTCP transmitter.
    TtcpTransmit,
    /// `goodput ttcp -r`, a TTCP receiver.
    TtcpReceive,
    /// `goodput echo`, loading an echo server.
    EchoClient,
    /// `goodput udp`, the client side of UDP media streams.
    MediaClient,
    /// `goodput quic`, a QUIC perf client.
    QuicClient,
    /// `goodput trace`, a traceroute.
    Trace,
    /// `goodput ping`, ICMP echo or TCP connect round trips.
    Ping,
    /// `goodput owamp`, an OWAMP Control-Client (owping, powstream).
    OwampClient,
    /// `goodput twamp`, a TWAMP Control-Client and Session-Sender (twping).
    TwampClient,
    /// `goodput dns`, DNS queries.
    DnsClient,
    /// `goodput ndt7`, an ndt7 speed-test client (or a browser's test kept
    /// by an agent).
    Ndt7Client,
    /// `goodput http`, an HTTP(S) client.
    HttpClient,
    /// `goodput tls`, a TLS handshake.
    TlsClient,
}

/// Which TCP wire protocol is spoken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum WireProtocol {
    /// goodput's negotiated session protocol.
    Goodput,
    /// ctsTraffic's raw protocol (37-byte id, pattern, `DONE`).
    Cts,
    /// iperf3's control and data protocol.
    Iperf3,
    /// STAMP test packets over UDP (RFC 8762).
    Stamp,
    /// No protocol: raw bytes to any sink or from any source (TTCP).
    Raw,
    /// goodput's UDP media-stream protocol.
    Media,
    /// The QUIC performance protocol (ALPN `perf`).
    Quic,
    /// Path probes and what answers them: TTL-limited UDP, TCP SYN or ICMP
    /// echo, ICMP errors back (trace, ping).
    Probes,
    /// OWAMP-Control over TCP and OWAMP-Test over UDP (RFC 4656).
    Owamp,
    /// TWAMP-Control over TCP and TWAMP-Test over UDP (RFC 5357).
    Twamp,
    /// DNS over UDP, TCP or TLS.
    Dns,
    /// M-Lab's ndt7: WebSocket over TCP or TLS.
    Ndt7,
    /// HTTP/1.1 or HTTP/2 over TCP, with or without TLS.
    Http,
    /// A TLS handshake over TCP, nothing after it.
    Tls,
}

impl From<crate::spec::TcpWire> for WireProtocol {
    fn from(w: crate::spec::TcpWire) -> Self {
        match w {
            crate::spec::TcpWire::Goodput => WireProtocol::Goodput,
            crate::spec::TcpWire::Cts => WireProtocol::Cts,
        }
    }
}

/// How the client ends a successful connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ShutdownMode {
    /// shutdown(SHUT_WR), then wait for the server's FIN.
    Graceful,
    /// SO_LINGER 0 and close: an RST, no TIME_WAIT on the client.
    Rude,
    /// Graceful or rude with equal odds per connection.
    Random,
}

/// An inclusive range of integers (a single value when `lo == hi`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Span {
    /// Lowest value.
    pub lo: u64,
    /// Highest value.
    pub hi: u64,
}

/// The settings of a TCP run, as the result document records them.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TcpSettings {
    /// Wire protocol.
    pub wire: WireProtocol,
    /// Data-flow pattern (client side; a server serves every pattern).
    pub pattern: Option<TcpPattern>,
    /// Verification.
    pub verify: Option<VerifyMode>,
    /// Pattern bytes per connection, bytes.
    pub transfer_bytes: Option<Span>,
    /// Bytes per send/recv call.
    pub buffer_bytes: Option<Span>,
    /// Push-pull client→server segment, bytes.
    pub push_bytes: Option<u64>,
    /// Push-pull server→client segment, bytes.
    pub pull_bytes: Option<u64>,
    /// Concurrent connections.
    pub connections: Option<u64>,
    /// Passes over the connections (0 = until stopped).
    pub iterations: Option<u64>,
    /// Per-connection send rate limit, bytes/s (absent = unlimited).
    pub rate_limit_bytes_per_second: Option<Span>,
    /// Rate-limit quantum, milliseconds.
    pub rate_period_ms: Option<u64>,
    /// Client shutdown mode.
    pub shutdown: Option<ShutdownMode>,
    /// Server addresses (client) or listen addresses (server).
    pub addresses: Vec<String>,
    /// Status interval, milliseconds.
    pub status_interval_ms: u64,
    /// Time limit, milliseconds (absent = none).
    pub time_limit_ms: Option<u64>,
}

impl TcpSettings {
    /// Settings of a test that has none of the TCP test's knobs: the wire,
    /// the addresses and the status interval, every other field absent.
    pub fn bare(wire: WireProtocol, addresses: Vec<String>, status_interval_ms: u64) -> Self {
        Self {
            wire,
            pattern: None,
            verify: None,
            transfer_bytes: None,
            buffer_bytes: None,
            push_bytes: None,
            pull_bytes: None,
            connections: None,
            iterations: None,
            rate_limit_bytes_per_second: None,
            rate_period_ms: None,
            shutdown: None,
            addresses,
            status_interval_ms,
            time_limit_ms: None,
        }
    }
}

/// One status interval, with ctsTraffic's column meanings.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Interval {
    /// Seconds since the run started, at the end of the interval.
    pub time_slice_s: f64,
    /// Bytes sent per second within the interval (all bytes on every socket).
    pub send_bytes_per_second: u64,
    /// Bytes received per second within the interval.
    pub recv_bytes_per_second: u64,
    /// Connections doing pattern I/O at the end of the interval.
    pub in_flight: u64,
    /// Successful connections so far (cumulative).
    pub completed: u64,
    /// Connections failed by a network error so far (cumulative).
    pub network_errors: u64,
    /// Connections failed by a protocol or data error so far (cumulative).
    pub data_errors: u64,
    /// STAMP runs: the interval's packets, loss and delay (sessions count
    /// as connections in the fields above).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stamp: Option<StampInterval>,
    /// Echo load tests: the interval's messages and round trips.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub echo: Option<EchoInterval>,
    /// UDP media streams: the interval's frames, datagrams and jitter
    /// (streams count as connections in the fields above).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media: Option<MediaInterval>,
}

/// How one connection ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Outcome {
    /// Every byte moved, and matched when verifying; both ends agree.
    Succeeded,
    /// A socket call failed.
    NetworkError {
        /// The call or phase that failed (connect, send, recv, ...).
        during: String,
        /// errno value, when the failure had one.
        errno: Option<i32>,
        /// Symbolic errno name (ECONNRESET) or a short kind.
        name: String,
        /// Human-readable text.
        message: String,
    },
    /// The session protocol or the data went wrong.
    ProtocolError {
        /// What kind of protocol error.
        kind: ProtocolErrorKind,
        /// Direction of the affected stream, when known.
        direction: Option<Direction>,
        /// Byte offset within that stream, for data mismatches.
        offset: Option<u64>,
        /// Expected byte, for data mismatches.
        expected: Option<u8>,
        /// Received byte, for data mismatches.
        actual: Option<u8>,
        /// Human-readable text.
        message: String,
    },
    /// Stopped by the user, the time limit or the server before it finished.
    Aborted {
        /// Why.
        reason: String,
    },
}

/// Protocol error kinds (ctsTraffic's three, plus negotiation failures).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ProtocolErrorKind {
    /// A received byte differed from the pattern (ErrorDataDidNotMatchBitPattern).
    DataMismatch,
    /// The peer stopped early (ErrorNotAllDataTransferred).
    NotAllData,
    /// The peer sent more than agreed (ErrorTooMuchDataTransferred).
    TooMuchData,
    /// The server refused the hello.
    Rejected,
    /// A malformed or unexpected session message.
    BadMessage,
    /// No data for longer than the idle timeout.
    IdleTimeout,
    /// The server's own fault: a connection task that panicked. Counted so
    /// that a bug shows in the results instead of hiding in a log.
    Internal,
}

impl ProtocolErrorKind {
    /// ctsTraffic's name for the kind, where it has one.
    pub fn cts_name(self) -> &'static str {
        match self {
            ProtocolErrorKind::DataMismatch => "ErrorDataDidNotMatchBitPattern",
            ProtocolErrorKind::NotAllData => "ErrorNotAllDataTransferred",
            ProtocolErrorKind::TooMuchData => "ErrorTooMuchDataTransferred",
            ProtocolErrorKind::Rejected => "ErrorRejectedByServer",
            ProtocolErrorKind::BadMessage => "ErrorBadSessionMessage",
            ProtocolErrorKind::IdleTimeout => "ErrorIdleTimeout",
            ProtocolErrorKind::Internal => "ErrorInternal",
        }
    }
}

impl Outcome {
    /// Whether the connection succeeded.
    pub fn is_success(&self) -> bool {
        matches!(self, Outcome::Succeeded)
    }
    /// Short text for a CSV cell or console line: `Succeeded`, the errno name
    /// with its message, the ctsTraffic error name, or `Aborted`.
    pub fn label(&self) -> String {
        match self {
            Outcome::Succeeded => "Succeeded".into(),
            Outcome::NetworkError { name, during, .. } => format!("{name} during {during}"),
            Outcome::ProtocolError { kind, .. } => kind.cts_name().into(),
            Outcome::Aborted { .. } => "Aborted".into(),
        }
    }
    /// A protocol error for a rejected hello.
    pub fn rejected(code: RejectCode, reason: &str) -> Self {
        Outcome::ProtocolError {
            kind: ProtocolErrorKind::Rejected,
            direction: None,
            offset: None,
            expected: None,
            actual: None,
            message: format!("server rejected the connection ({code}): {reason}"),
        }
    }
}

/// The server's own view of a connection, from its completion record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PeerView {
    /// Pattern bytes the server sent.
    pub sent_bytes: u64,
    /// Pattern bytes the server received.
    pub received_bytes: u64,
    /// The server's statistics window, nanoseconds.
    pub elapsed_ns: u64,
    /// The server's verdict.
    pub outcome: Outcome,
}

/// Linux `TCP_INFO` fields sampled just before the socket closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TcpInfoSnapshot {
    /// Smoothed round-trip time, microseconds.
    pub rtt_us: u32,
    /// Round-trip time variance, microseconds.
    pub rttvar_us: u32,
    /// Minimum round-trip time seen, microseconds (kernel ≥ 4.6).
    pub min_rtt_us: Option<u32>,
    /// Congestion window, segments.
    pub snd_cwnd_segments: u32,
    /// Send MSS, bytes.
    pub snd_mss_bytes: u32,
    /// Retransmitted segments over the connection's life.
    pub total_retrans_segments: u32,
    /// Bytes retransmitted (kernel ≥ 4.19).
    pub bytes_retrans: Option<u64>,
    /// Delivery rate estimate, bytes/s (kernel ≥ 4.9).
    pub delivery_rate_bytes_per_second: Option<u64>,
    /// Pacing rate, bytes/s (u64::MAX means unlimited).
    pub pacing_rate_bytes_per_second: Option<u64>,
    /// Path MTU, bytes.
    #[serde(default)]
    pub pmtu_bytes: Option<u32>,
}

/// One connection's record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ConnectionRecord {
    /// Sequence number of the connection within this run (0-based).
    pub index: u64,
    /// Id shared with the peer (the server's UUID), or empty when none arrived.
    pub connection_id: String,
    /// Local address `ip:port` (IPv6 in brackets); empty when never bound.
    pub local_address: String,
    /// Remote address `ip:port`.
    pub remote_address: String,
    /// Seconds since the run started, when the connection began.
    pub start_s: f64,
    /// Seconds since the run started, when the record was written.
    pub time_slice_s: f64,
    /// Statistics window (first I/O to end of pattern data), nanoseconds.
    pub elapsed_ns: u64,
    /// Pattern.
    pub pattern: Option<TcpPattern>,
    /// Pattern bytes agreed for the connection.
    pub transfer_bytes: u64,
    /// Bytes per send/recv call on this connection.
    pub buffer_bytes: u64,
    /// Send rate limit on this connection, bytes/s (0 = unlimited).
    pub rate_limit_bytes_per_second: u64,
    /// Pattern bytes this end sent.
    pub sent_bytes: u64,
    /// Pattern bytes this end received.
    pub received_bytes: u64,
    /// This end's verdict.
    pub outcome: Outcome,
    /// The other end's verdict and counts, when it sent them.
    pub peer: Option<PeerView>,
    /// How the connection was closed (client side).
    pub shutdown: Option<ShutdownMode>,
    /// TCP_INFO at close.
    pub tcp_info: Option<TcpInfoSnapshot>,
    /// UDP media streams: this stream's frames and datagrams.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media: Option<MediaStats>,
    /// QUIC connections: quinn's path figures at the end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quic: Option<QuicPathStats>,
    /// Timed TCP tests: each direction's good-put as its receiver measured
    /// it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timed: Option<TimedFigures>,
}

/// A timed connection's good-put in each direction that carried data, as
/// the receiving end measured it: what arrived (and was verified, when
/// verifying) over the receiver's data-phase time.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TimedFigures {
    /// When the client's data phase started, seconds since the run
    /// started (on the client's clock: each receiver's times count from
    /// its own start of the data phase).
    pub data_start_s: f64,
    /// Client → server (push, duplex), measured by the server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub up: Option<ReceiverGoodput>,
    /// Server → client (pull, duplex), measured by the client.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub down: Option<ReceiverGoodput>,
}

impl TimedFigures {
    /// Both directions' good-put after the warm-up, bytes/s.
    pub fn bytes_per_second(&self) -> f64 {
        self.up.map_or(0.0, |g| g.bytes_per_second) + self.down.map_or(0.0, |g| g.bytes_per_second)
    }
}

/// One direction of a timed connection at its receiver.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ReceiverGoodput {
    /// Data bytes received.
    pub bytes: u64,
    /// The receiver's data-phase time: from its start to the last data
    /// byte, nanoseconds.
    pub elapsed_ns: u64,
    /// Of `bytes`, those received inside the warm-up (`omit`).
    pub warm_up_bytes: u64,
    /// When the warm-up ended, nanoseconds into the data phase.
    pub warm_up_ns: u64,
    /// Good-put after the warm-up: (bytes − warm-up bytes) over
    /// (elapsed − warm-up), bytes/s.
    pub bytes_per_second: f64,
}

impl ReceiverGoodput {
    /// The figures of a receiver, with the rate worked out.
    pub fn new(bytes: u64, elapsed_ns: u64, warm_up_bytes: u64, warm_up_ns: u64) -> Self {
        let warm_up_bytes = warm_up_bytes.min(bytes);
        let warm_up_ns = warm_up_ns.min(elapsed_ns);
        Self {
            bytes,
            elapsed_ns,
            warm_up_bytes,
            warm_up_ns,
            bytes_per_second: metrics::bytes_per_second(bytes - warm_up_bytes, elapsed_ns - warm_up_ns),
        }
    }
}

impl ConnectionRecord {
    /// Sending rate over the statistics window, bytes/s.
    pub fn send_bytes_per_second(&self) -> f64 {
        metrics::bytes_per_second(self.sent_bytes, self.elapsed_ns)
    }
    /// Receiving rate over the statistics window, bytes/s.
    pub fn recv_bytes_per_second(&self) -> f64 {
        metrics::bytes_per_second(self.received_bytes, self.elapsed_ns)
    }
}

/// Transport of an iperf3 test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Iperf3Protocol {
    /// TCP streams.
    Tcp,
    /// UDP streams.
    Udp,
}

/// CPU use over a test, percent of one CPU.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CpuUtil {
    /// User plus system.
    pub total_percent: f64,
    /// User time.
    pub user_percent: f64,
    /// System time.
    pub system_percent: f64,
}

/// What an iperf3 test adds to the common record: its parameters, iperf3's
/// own per-stream figures from both ends, and per-stream intervals.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Iperf3Detail {
    /// TCP or UDP.
    pub protocol: Iperf3Protocol,
    /// The test's cookie.
    pub cookie: String,
    /// Our end of the control connection, `ip:port`.
    pub control_local: String,
    /// The peer's end of the control connection.
    pub control_remote: String,
    /// The client's version string (a server records what the client sent).
    pub client_version: Option<String>,
    /// The server sent (`-R`).
    pub reverse: bool,
    /// Both directions (`--bidir`).
    pub bidirectional: bool,
    /// Streams per direction.
    pub parallel: u32,
    /// Block (TCP write) or datagram (UDP) size, bytes.
    pub block_bytes: u32,
    /// Seconds omitted at the start.
    pub omit_s: u32,
    /// Test length, seconds (0 when a byte or block count ends it).
    pub duration_s: u32,
    /// Byte count end condition (0 = none).
    pub bytes_limit: u64,
    /// Block count end condition (0 = none).
    pub blocks_limit: u64,
    /// Target rate per stream, bits/s (0 = unlimited).
    pub target_bits_per_second: u64,
    /// IP TOS byte.
    pub tos: u8,
    /// `-T` title.
    pub title: Option<String>,
    /// `--extra-data`.
    pub extra_data: Option<String>,
    /// Per data stream, in id order.
    pub streams: Vec<Iperf3StreamRecord>,
    /// Per-stream figures per status interval (up to the record cap).
    pub intervals: Vec<Iperf3Interval>,
    /// This end's CPU use.
    pub cpu: CpuUtil,
    /// The peer's CPU use, from the results exchange.
    pub peer_cpu: Option<CpuUtil>,
    /// Congestion control this end used.
    pub congestion_used: Option<String>,
    /// Congestion control the peer reported.
    pub peer_congestion_used: Option<String>,
    /// The server's own report (`--get-server-output`), JSON form.
    pub server_output_json: Option<serde_json::Value>,
    /// The server's own report, text form.
    pub server_output_text: Option<String>,
    /// Why the test failed, when it did.
    pub error: Option<String>,
}

/// One iperf3 data stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Iperf3StreamRecord {
    /// iperf3's stream id (1, 3, 4, …).
    pub id: u32,
    /// Whether this end sent on the stream.
    pub sender: bool,
    /// Local address `ip:port`.
    pub local_address: String,
    /// Remote address.
    pub remote_address: String,
    /// Bytes this end sent or received on it after the omit period.
    pub bytes: u64,
    /// This end's measuring time, seconds.
    pub seconds: f64,
    /// TCP retransmits (this end sending TCP only).
    pub retransmits: Option<u64>,
    /// Largest congestion window seen, bytes (TCP sender).
    pub max_snd_cwnd_bytes: Option<u64>,
    /// Smallest, mean and largest smoothed RTT sampled, microseconds (TCP sender).
    pub rtt_us: Option<[u32; 3]>,
    /// UDP figures (this end's view).
    pub udp: Option<Iperf3UdpStats>,
    /// The peer's figures for the stream, from the results exchange.
    pub peer: Option<Iperf3PeerStream>,
}

/// UDP figures of one stream, with iperf3's meanings.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Iperf3UdpStats {
    /// Sender: datagrams sent. Receiver: highest sequence number seen.
    pub packets: u64,
    /// Receiver: datagrams lost (iperf3's count: late arrivals are taken back).
    pub lost: u64,
    /// Receiver: datagrams at or below the highest sequence seen.
    pub out_of_order: u64,
    /// Receiver: datagrams that arrived.
    pub received: u64,
    /// Receiver: RFC 1889 jitter, milliseconds.
    pub jitter_ms: f64,
}

/// The peer's entry for a stream in the results exchange.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Iperf3PeerStream {
    /// Bytes the peer sent or received.
    pub bytes: u64,
    /// TCP retransmits (−1 = not applicable).
    pub retransmits: i64,
    /// UDP jitter, milliseconds.
    pub jitter_ms: f64,
    /// UDP datagrams lost.
    pub lost: i64,
    /// UDP datagrams (sent, or highest sequence received).
    pub packets: i64,
    /// The peer's measuring time, seconds.
    pub seconds: f64,
}

/// One status interval of an iperf3 test.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Iperf3Interval {
    /// Seconds since the test started (TEST_RUNNING).
    pub start_s: f64,
    /// End of the interval.
    pub end_s: f64,
    /// Inside the omit period.
    pub omitted: bool,
    /// Per stream.
    pub streams: Vec<Iperf3StreamInterval>,
}

/// One stream within one interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Iperf3StreamInterval {
    /// Stream id.
    pub id: u32,
    /// Whether this end sends on it.
    pub sender: bool,
    /// Bytes in the interval.
    pub bytes: u64,
    /// TCP retransmits in the interval (sender).
    pub retransmits: Option<u64>,
    /// Congestion window at the end, bytes (TCP sender).
    pub snd_cwnd_bytes: Option<u64>,
    /// Smoothed RTT, microseconds (TCP sender).
    pub rtt_us: Option<u32>,
    /// RTT variance, microseconds (TCP sender).
    pub rttvar_us: Option<u32>,
    /// Path MTU, bytes (TCP sender).
    pub pmtu_bytes: Option<u32>,
    /// UDP: datagrams sent (sender) or arrived (receiver) in the interval.
    pub packets: Option<u64>,
    /// UDP receiver: datagrams lost in the interval.
    pub lost: Option<u64>,
    /// UDP receiver: jitter at the end of the interval, milliseconds.
    pub jitter_ms: Option<f64>,
}

/// What a STAMP sender run adds to the common record. Delays are in
/// microseconds; histograms are in nanoseconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StampDetail {
    /// UDP payload per test packet, bytes (44 plus padding).
    pub packet_bytes: u32,
    /// Time between packets of one session, nanoseconds.
    pub interval_ns: u64,
    /// Concurrent sessions.
    pub sessions: u32,
    /// RFC 8972 session id sent (absent = none); session `i` uses `ssid + i`.
    pub ssid: Option<u16>,
    /// DSCP of the test packets.
    pub dscp: u8,
    /// How long a packet may take before it counts as lost, milliseconds.
    pub timeout_ms: u64,
    /// All sessions together.
    pub total: StampStats,
    /// Per session, in session order.
    pub per_session: Vec<StampSessionRecord>,
}

/// One STAMP session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StampSessionRecord {
    /// Session index (0-based).
    pub index: u64,
    /// Local address `ip:port`.
    pub local_address: String,
    /// Reflector address.
    pub remote_address: String,
    /// SSID sent (0 = none).
    pub ssid: u16,
    /// Figures of this session.
    pub stats: StampStats,
}

/// Whether the reflector keeps its own sequence per session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum StampReflectorMode {
    /// Seen, or known by the sender's caller (an agent's peer beacon), to
    /// number its replies itself: loss splits into forward and backward.
    Stateful,
    /// Not seen to: a stateless reflector, or a stateful one that lost nothing
    /// on the way in (the two look alike).
    Unknown,
}

/// Loss, duplicates, reordering, delay and hops of STAMP packets.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StampStats {
    /// Test packets sent.
    pub sent: u64,
    /// Packets whose first reply came back within the timeout.
    pub received: u64,
    /// Packets sent with no reply within the timeout (RFC 7680: late =
    /// lost). Packets that could not be sent are not in it: see
    /// `not_sent` and [`StampStats::loss_percent`].
    pub lost: u64,
    /// Packets the schedule planned that never left this host: the socket
    /// refused them (a firewall's drop on the way out reads as EPERM, a
    /// full queue as ENOBUFS), or the sender fell behind and their time
    /// passed. In neither `sent` nor `lost`; the test's loss counts them.
    #[serde(default)]
    pub not_sent: u64,
    /// `not_sent` by reason (at most [`MAX_SEND_FAILURE_REASONS`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub send_failures: Vec<SendFailure>,
    /// Of `lost`, lost on the way to the reflector (stateful reflectors
    /// only). `lost − lost_forward − lost_backward` were lost in a way
    /// the reflector's numbering cannot tell (after a session's last
    /// reply, for one): their direction is unknown.
    pub lost_forward: Option<u64>,
    /// Of `lost`, replies lost on the way back (stateful reflectors only).
    pub lost_backward: Option<u64>,
    /// What the replies showed about the reflector.
    pub reflector_mode: StampReflectorMode,
    /// Replies beyond the first for a packet.
    pub duplicates: u64,
    /// Replies that came after their packet had been counted lost.
    pub late: u64,
    /// Replies that matched no packet sent (or one long forgotten).
    pub unmatched: u64,
    /// Replies carrying another session's SSID (dropped).
    pub ssid_mismatch: u64,
    /// Replies with SSID 0 although one was sent (reflector without RFC 8972).
    pub ssid_zero: u64,
    /// RFC 4737 reordered packets (sequence below the next expected).
    pub reordered: u64,
    /// Reordered / received, percent.
    pub reordered_percent: f64,
    /// n-reordering percent of received packets for n = 1, 2, … up to the
    /// first n with none (empty = no reordering).
    pub n_reordering_percent: Vec<f64>,
    /// Round-trip delay (RFC 2681): (T4 − T1) − (T3 − T2); valid without
    /// clock sync.
    pub rtt: Option<DelayStats>,
    /// One-way delay sender → reflector (T2 − T1).
    pub forward: Option<OneWayStats>,
    /// One-way delay reflector → sender (T4 − T3).
    pub backward: Option<OneWayStats>,
    /// IPDV of round-trip delay between consecutive packets (RFC 3393).
    pub rtt_ipdv: Option<IpdvStats>,
    /// Hops sender → reflector (255 − the TTL the reflector saw).
    pub hops_forward: Option<HopRange>,
    /// Hops reflector → sender (255 − the TTL we saw; assumes the reflector
    /// sends with 255, as STAMP reflectors should).
    pub hops_backward: Option<HopRange>,
    /// Mergeable HdrHistograms of the delays.
    pub histograms: StampHistograms,
}

impl StampStats {
    /// Packets the test tried to send: `sent + not_sent`.
    pub fn planned(&self) -> u64 {
        self.sent.saturating_add(self.not_sent)
    }

    /// Planned packets with no answer: lost on the way, or never sent.
    pub fn missing(&self) -> u64 {
        self.lost.min(self.sent).saturating_add(self.not_sent)
    }

    /// The test's loss, percent of the packets planned: a packet that
    /// could not be sent is a measurement lost. `None` when none was
    /// planned.
    pub fn loss_percent(&self) -> Option<f64> {
        let planned = self.planned();
        (planned > 0).then(|| self.missing() as f64 * 100.0 / planned as f64)
    }
}

/// Most distinct reasons kept in a `send_failures` list; further reasons
/// are counted under `other`.
pub const MAX_SEND_FAILURE_REASONS: usize = 8;

/// Packets that could not be sent, for one reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SendFailure {
    /// The symbolic errno (`EPERM`, `ENOBUFS`), or `late` for packets whose
    /// time had passed before the sender could send them.
    pub reason: String,
    /// What it means, in words.
    pub message: String,
    /// Packets.
    pub packets: u64,
}

impl SendFailure {
    /// Counts `packets` more for `reason` in `list`, keeping the list
    /// bounded: past [`MAX_SEND_FAILURE_REASONS`] reasons, new ones add to
    /// an `other` entry.
    pub fn add(list: &mut Vec<SendFailure>, reason: &str, message: &str, packets: u64) {
        if packets == 0 {
            return;
        }
        if let Some(f) = list.iter_mut().find(|f| f.reason == reason) {
            f.packets = f.packets.saturating_add(packets);
            return;
        }
        if list.len() + 1 >= MAX_SEND_FAILURE_REASONS {
            match list.iter_mut().find(|f| f.reason == "other") {
                Some(f) => f.packets = f.packets.saturating_add(packets),
                None => list.push(SendFailure {
                    reason: "other".into(),
                    message: "other reasons".into(),
                    packets,
                }),
            }
            return;
        }
        list.push(SendFailure {
            reason: reason.into(),
            message: message.into(),
            packets,
        });
    }

    /// Adds every entry of `other` into `list`.
    pub fn merge(list: &mut Vec<SendFailure>, other: &[SendFailure]) {
        for f in other {
            SendFailure::add(list, &f.reason, &f.message, f.packets);
        }
    }

    /// The list in words: `EPERM × 5: operation not permitted; late × 2: …`.
    pub fn describe(list: &[SendFailure]) -> String {
        list.iter()
            .map(|f| format!("{} × {}: {}", f.reason, f.packets, f.message))
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// A delay distribution, microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DelayStats {
    /// Samples.
    pub count: u64,
    /// Smallest (exact).
    pub min_us: f64,
    /// Median (within 0.1%).
    pub median_us: f64,
    /// 90th percentile.
    pub p90_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// Largest (exact).
    pub max_us: f64,
    /// Mean (exact).
    pub mean_us: f64,
}

/// One-way delay, microseconds. Meaningful as absolute values only when
/// `synchronized`; the spread (jitter, IPDV) is valid either way.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct OneWayStats {
    /// Samples.
    pub count: u64,
    /// Smallest.
    pub min_us: f64,
    /// Median.
    pub median_us: f64,
    /// Largest.
    pub max_us: f64,
    /// owping's jitter: 95th percentile minus median.
    pub jitter_us: f64,
    /// Whether both clocks said they were synchronised for every sample.
    pub synchronized: bool,
    /// Largest combined error bound of the two clocks, microseconds.
    pub error_bound_us: Option<f64>,
    /// IPDV of this direction between consecutive packets (RFC 3393).
    pub ipdv: Option<IpdvStats>,
}

/// IPDV (RFC 3393) of consecutive packets, microseconds, signed.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct IpdvStats {
    /// Pairs measured.
    pub count: u64,
    /// Most negative.
    pub min_us: f64,
    /// Median.
    pub median_us: f64,
    /// Most positive.
    pub max_us: f64,
    /// 99th percentile of the absolute value.
    pub p99_abs_us: f64,
}

/// Smallest and largest hop count seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct HopRange {
    /// Fewest hops.
    pub min: u8,
    /// Most hops.
    pub max: u8,
}

/// HdrHistograms (V2 compressed, base64; values in nanoseconds), so results
/// from many runs or hosts can be merged exactly. Signed quantities keep
/// their negative values' magnitudes in a second histogram.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StampHistograms {
    /// Round-trip delay.
    pub rtt_ns: Option<String>,
    /// Forward one-way delay, values ≥ 0.
    pub forward_ns: Option<String>,
    /// Forward one-way delay, magnitudes of values < 0.
    pub forward_negative_ns: Option<String>,
    /// Backward one-way delay, values ≥ 0.
    pub backward_ns: Option<String>,
    /// Backward one-way delay, magnitudes of values < 0.
    pub backward_negative_ns: Option<String>,
}

/// The local clock as the kernel reported it (`ntp_adjtime`) when the
/// test's timestamps were taken.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ClockState {
    /// Whether the kernel said the clock was synchronised.
    pub synchronized: bool,
    /// The kernel's estimate of the clock's error, microseconds (none:
    /// not known).
    pub error_us: Option<f64>,
}

/// What an OWAMP client run adds to the common record: one direction or
/// both, each with owping's figures and goodput's exact ones. Delays are
/// in microseconds, histograms and times in nanoseconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct OwampDetail {
    /// Security mode: `open`, `authenticated` or `encrypted`.
    pub mode: String,
    /// Padding bytes after the test packet's header.
    pub padding: u32,
    /// UDP payload per test packet, bytes (header plus padding).
    pub packet_bytes: u32,
    /// Time between packets (with `poisson`, the mean), nanoseconds.
    pub interval_ns: u64,
    /// Send times drawn from an exponential distribution.
    pub poisson: bool,
    /// DSCP of the test packets.
    pub dscp: u8,
    /// How long a packet may take before it counts as lost, milliseconds.
    pub timeout_ms: u64,
    /// This host's clock.
    pub local_clock: ClockState,
    /// The session from this host to the server (owping's `-t`), when
    /// there was one.
    pub to: Option<OneWayDirection>,
    /// The session from the server to this host (owping's `-f`), when
    /// there was one.
    pub from: Option<OneWayDirection>,
}

/// One OWAMP session: loss, duplicates, reordering, one-way delay and
/// hops of its packets, as the receiver's log shows them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct OneWayDirection {
    /// The session's SID, 32 hex digits.
    pub sid: String,
    /// The sender's test address, `ip:port`.
    pub sender: String,
    /// The receiver's test address, `ip:port`.
    pub receiver: String,
    /// Test packets sent.
    pub sent: u64,
    /// Packets scheduled but not sent (the sender was late beyond the
    /// timeout and skipped them: RFC 4656's skip ranges).
    pub unsent: u64,
    /// Packets that arrived (first copies) within the timeout.
    pub received: u64,
    /// Packets sent that did not arrive within the timeout.
    pub lost: u64,
    /// Copies beyond the first.
    pub duplicates: u64,
    /// RFC 4737 reordered packets.
    pub reordered: u64,
    /// Reordered / received, percent.
    pub reordered_percent: f64,
    /// n-reordering percent of received packets for n = 1, 2, … up to the
    /// first n with none (empty = no reordering).
    pub n_reordering_percent: Vec<f64>,
    /// One-way delay: receive time minus send time, each on its own
    /// host's clock (exact only when `synchronized`).
    pub delay: Option<OneWayStats>,
    /// The delay's percentiles from its HdrHistogram (negative values
    /// possible when the clocks are not synchronised).
    pub percentiles: Option<Percentiles>,
    /// Hops (255 − the TTL the receiver saw).
    pub hops: Option<HopRange>,
    /// One-way delay as an HdrHistogram (V2 compressed, base64), values ≥ 0.
    pub histogram_ns: Option<String>,
    /// Magnitudes of one-way delays < 0 (unsynchronised clocks).
    pub histogram_negative_ns: Option<String>,
    /// Send time of the first packet, Unix nanoseconds.
    pub first_ns: Option<i64>,
    /// Send time of the last packet, Unix nanoseconds.
    pub last_ns: Option<i64>,
    /// A continuous stream's summaries, one per `summary_every` packets,
    /// in order (empty for a test of `count` packets).
    pub intervals: Vec<OneWaySummary>,
}

/// One summary of a continuous OWAMP stream (powstream's summary file):
/// the packets scheduled from `start_ns` to `end_ns`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct OneWaySummary {
    /// Scheduled send time of its first packet, Unix nanoseconds.
    pub start_ns: i64,
    /// Scheduled send time of its last packet, Unix nanoseconds.
    pub end_ns: i64,
    /// Test packets sent.
    pub sent: u64,
    /// Packets scheduled but not sent.
    pub unsent: u64,
    /// Packets that arrived (first copies) within the timeout.
    pub received: u64,
    /// Packets sent that did not arrive within the timeout.
    pub lost: u64,
    /// Copies beyond the first.
    pub duplicates: u64,
    /// RFC 4737 reordered packets.
    pub reordered: u64,
    /// One-way delay of its packets.
    pub delay: Option<OneWayStats>,
    /// Hops.
    pub hops: Option<HopRange>,
    /// One-way delay as an HdrHistogram, values ≥ 0.
    pub histogram_ns: Option<String>,
    /// Magnitudes of one-way delays < 0.
    pub histogram_negative_ns: Option<String>,
}

/// What a TWAMP client run adds to the common record. Delays are in
/// microseconds; histograms are in nanoseconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TwampDetail {
    /// Security mode: `open`, `authenticated` or `encrypted`.
    pub mode: String,
    /// Padding bytes after the sender's header.
    pub padding: u32,
    /// UDP payload per test packet sent, bytes (header plus padding).
    pub packet_bytes: u32,
    /// Time between packets, nanoseconds.
    pub interval_ns: u64,
    /// DSCP of the test packets.
    pub dscp: u8,
    /// How long a packet may take before it counts as lost, milliseconds.
    pub timeout_ms: u64,
    /// This host's clock.
    pub local_clock: ClockState,
    /// The session's SID, 32 hex digits.
    pub sid: String,
    /// Loss, delay (round trip, and one way each way), reordering and
    /// hops, with loss split by the reflector's own sequence numbers.
    pub stats: StampStats,
    /// Time the reflector held each packet (T3 − T2).
    pub processing: Option<DelayStats>,
}

/// All sessions within one status interval. Replies are counted when they
/// arrive, losses when their timeout passes.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StampInterval {
    /// Seconds since the run started, at the end of the interval.
    pub time_slice_s: f64,
    /// Packets sent.
    pub sent: u64,
    /// First replies received.
    pub received: u64,
    /// Packets whose timeout passed without a reply.
    pub lost: u64,
    /// Packets planned in the interval that could not be sent.
    #[serde(default)]
    pub not_sent: u64,
    /// Duplicate replies.
    pub duplicates: u64,
    /// Reordered replies.
    pub reordered: u64,
    /// Round-trip delay of the replies, when there were any.
    pub rtt: Option<DelayStats>,
    /// Median forward one-way delay, microseconds.
    pub forward_median_us: Option<f64>,
    /// Median backward one-way delay, microseconds.
    pub backward_median_us: Option<f64>,
}

/// One STAMP packet's fate, for the per-packet file. Times are Unix
/// nanoseconds (T2 and T3 on the reflector's clock); delays microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StampPacket {
    /// Session index.
    pub session: u64,
    /// Sender sequence number.
    pub seq: u32,
    /// What happened to it.
    pub status: StampPacketStatus,
    /// T1, when it was sent.
    pub t1_ns: i64,
    /// T2, T3, T4 (replies only).
    pub t2_ns: Option<i64>,
    /// T3.
    pub t3_ns: Option<i64>,
    /// T4.
    pub t4_ns: Option<i64>,
    /// Round-trip delay.
    pub rtt_us: Option<f64>,
    /// Forward one-way delay.
    pub forward_us: Option<f64>,
    /// Backward one-way delay.
    pub backward_us: Option<f64>,
    /// The reflector's sequence number.
    pub reflector_seq: Option<u32>,
    /// TTL the reflector saw.
    pub forward_ttl: Option<u8>,
    /// TTL the reply arrived with.
    pub reply_ttl: Option<u8>,
}

/// A STAMP packet's fate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum StampPacketStatus {
    /// First reply, in time.
    Received,
    /// In-time first reply that arrived out of order.
    Reordered,
    /// No reply within the timeout.
    Lost,
    /// A further reply.
    Duplicate,
    /// A reply after the timeout.
    Late,
    /// Planned but never sent: the socket refused it, or its time passed
    /// before the sender could send it. Its sequence number was not used.
    NotSent,
}

/// What a server's discard, echo and TLS echo services did over its life.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ServiceCounters {
    /// TCP discard connections accepted.
    pub discard_connections: u64,
    /// Bytes discarded (TCP and UDP).
    pub discard_bytes: u64,
    /// UDP datagrams discarded.
    pub discard_datagrams: u64,
    /// Echo connections accepted.
    pub echo_connections: u64,
    /// Bytes echoed back.
    pub echo_bytes: u64,
    /// TLS echo connections whose handshake failed.
    pub tls_handshake_failures: u64,
}

/// A STAMP reflector's counters over a server's life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StampReflectorCounters {
    /// Datagrams received.
    pub received: u64,
    /// Packets whose reflection panicked (a bug of the server; the
    /// reflector went on).
    #[serde(default)]
    pub internal_errors: u64,
    /// Replies sent.
    pub reflected: u64,
    /// Requests of 14..43 octets answered: with their own length by default,
    /// with the full 44-octet base packet under `--stamp-pad-short`.
    pub short_answered: u64,
    /// Datagrams under 14 octets, dropped.
    pub too_short: u64,
    /// Datagrams over 9000 octets, dropped (no symmetric reply possible).
    pub oversized: u64,
    /// Dropped by the source ACL.
    pub denied: u64,
    /// Dropped by the per-source rate limit.
    pub rate_limited: u64,
    /// Requests whose TLVs were malformed (answered with M set).
    pub malformed_tlvs: u64,
    /// Replies the kernel refused to send.
    pub send_errors: u64,
    /// Stateful sessions seen.
    pub sessions: u64,
}

/// An OWAMP or TWAMP server's counters over its life (owampd's and
/// twampd's part of `goodput server`): control connections, sessions
/// accepted and refused by reason, and the test packets moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default)]
pub struct OwampServerCounters {
    /// Control connections past the greeting.
    pub connections: u64,
    /// Connections turned away at once: too many at the server or from
    /// one client address (greeting with no modes).
    pub busy: u64,
    /// Connections from addresses outside the allowed CIDRs.
    pub denied: u64,
    /// Set-ups refused: a mode not offered, an unknown key identity or a
    /// wrong passphrase.
    pub setup_refused: u64,
    /// Connections closed for silence (before or between sessions).
    pub idle_timeouts: u64,
    /// Connections closed for a malformed message or a wrong HMAC.
    pub protocol_errors: u64,
    /// Sessions accepted.
    pub sessions: u64,
    /// Refused (3): a Type-P, role or command not supported.
    pub refused_unsupported: u64,
    /// Refused (1): a sender or receiver address that is not the
    /// control connection's client.
    pub refused_address: u64,
    /// Refused (4): more packets than a session may have.
    pub refused_packets: u64,
    /// Refused (4): more schedule slots than a session may have.
    pub refused_slots: u64,
    /// Refused (4): more padding than a packet may carry.
    pub refused_padding: u64,
    /// Refused (4): a timeout longer than allowed.
    pub refused_timeout: u64,
    /// Refused (4): a start time too far ahead or too long past.
    pub refused_start_time: u64,
    /// Refused (4 alone, 5 with the client's other sessions): over the
    /// bandwidth one client may use.
    pub refused_bandwidth: u64,
    /// Refused (5): as many sessions as one client may hold at once.
    pub refused_sessions: u64,
    /// Refused (5): the receive logs' memory budget is spent.
    pub refused_memory: u64,
    /// Refused (5 or 2): no test port could be bound.
    pub refused_ports: u64,
    /// OWAMP test packets received and logged.
    pub packets_received: u64,
    /// OWAMP test packets sent.
    pub packets_sent: u64,
    /// TWAMP test packets reflected.
    pub packets_reflected: u64,
    /// Test packets dropped: from a source without a session, before
    /// Start-Sessions, malformed, with a wrong HMAC, or over the rate.
    pub packets_ignored: u64,
    /// Fetch-Session answered with the records.
    pub fetches: u64,
    /// Fetch-Session refused (an unknown or expired session).
    pub fetches_refused: u64,
    /// Receive logs dropped unfetched when they expired.
    pub logs_expired: u64,
}

/// Why a run failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RunFailure {
    /// How far the run got.
    pub stage: FailureStage,
    /// What went wrong.
    pub message: String,
}

/// How far a failed run got: a failure on this host before the peer was
/// contacted, or one at the peer or during the test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FailureStage {
    /// Before the peer was contacted: a name that does not resolve, an
    /// address or port that cannot be bound, a socket option the host
    /// refuses.
    Setup,
    /// The peer refused the test or the test broke off.
    Test,
}

/// Why a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum EndReason {
    /// Every planned connection finished.
    Completed,
    /// The time limit was reached.
    TimeLimit,
    /// SIGINT or SIGTERM.
    Interrupted,
    /// The server's `--exit-after` count was reached.
    ExitLimit,
    /// The run could not start (a name that does not resolve, an address
    /// that cannot be bound, a server that refuses) or stopped on an error
    /// of its own; `error` says why.
    Failed,
}

/// Minimum, median and maximum of a distribution.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MinMedianMax {
    /// Smallest value.
    pub min: f64,
    /// Median.
    pub median: f64,
    /// Largest value.
    pub max: f64,
}

/// Totals over a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Summary {
    /// Connections that succeeded.
    pub successful: u64,
    /// Connections failed by a network error.
    pub network_errors: u64,
    /// Connections failed by a protocol or data error.
    pub data_errors: u64,
    /// Connections aborted by a stop (signal, time limit).
    pub aborted: u64,
    /// Pattern bytes sent by this end over all connections.
    pub sent_bytes: u64,
    /// Pattern bytes received by this end over all connections.
    pub received_bytes: u64,
    /// Run time, seconds.
    pub duration_s: f64,
    /// Good-put sent over the run, bytes/s.
    pub send_bytes_per_second: f64,
    /// Good-put received over the run, bytes/s.
    pub recv_bytes_per_second: f64,
    /// Per successful connection good-put (both directions), bytes/s; the
    /// minimum and maximum are exact, the median within 0.1%.
    pub connection_bytes_per_second: Option<MinMedianMax>,
    /// Jain's fairness index of per-connection good-put (1 = perfectly fair).
    pub fairness: Option<f64>,
    /// The other end's counts summed over every connection that reported
    /// them (goodput's own server does), whether or not its record was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer: Option<PeerTotals>,
    /// Timed TCP tests: the headline good-put, each direction as its
    /// receivers measured it, over the successful connections.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timed: Option<TimedTotals>,
}

/// A timed test's good-put, summed over its successful connections.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TimedTotals {
    /// Client → server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub up: Option<DirectionTotals>,
    /// Server → client.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub down: Option<DirectionTotals>,
}

/// One direction of a timed test over its connections: the bytes their
/// receivers got after the warm-up, over the window from the first
/// connection's end of warm-up to the last one's last data byte.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DirectionTotals {
    /// Connections that measured this direction.
    pub connections: u64,
    /// Data bytes their receivers received.
    pub bytes: u64,
    /// Of those, received inside the warm-up.
    pub warm_up_bytes: u64,
    /// Start of the window, seconds since the run started.
    pub window_start_s: f64,
    /// End of the window, seconds since the run started.
    pub window_end_s: f64,
    /// (bytes − warm-up bytes) over the window, bytes/s.
    pub bytes_per_second: f64,
}

impl DirectionTotals {
    fn add(this: &mut Option<Self>, data_start_s: f64, g: Option<ReceiverGoodput>) {
        let Some(g) = g else { return };
        let start = data_start_s + g.warm_up_ns as f64 / 1e9;
        let end = data_start_s + g.elapsed_ns as f64 / 1e9;
        let t = this.get_or_insert(Self {
            window_start_s: start,
            window_end_s: end,
            ..Self::default()
        });
        t.connections += 1;
        t.bytes = t.bytes.saturating_add(g.bytes);
        t.warm_up_bytes = t.warm_up_bytes.saturating_add(g.warm_up_bytes);
        t.window_start_s = t.window_start_s.min(start);
        t.window_end_s = t.window_end_s.max(end);
        let seconds = t.window_end_s - t.window_start_s;
        t.bytes_per_second = match seconds > 0.0 {
            true => (t.bytes - t.warm_up_bytes) as f64 / seconds,
            false => 0.0,
        };
    }
}

/// The other end's view of a run, summed over the connections that sent it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PeerTotals {
    /// Connections whose peer reported its counts.
    pub connections: u64,
    /// Pattern bytes the peer sent over them.
    pub sent_bytes: u64,
    /// Pattern bytes the peer received over them.
    pub received_bytes: u64,
}

impl Summary {
    /// Totals over `records` for a run that lasted `duration_ns`.
    pub fn from_records(records: &[ConnectionRecord], duration_ns: u64) -> Self {
        let mut b = SummaryBuilder::default();
        records.iter().for_each(|r| b.add(r));
        b.finish(duration_ns)
    }

    /// Connections that failed (network or data errors; aborts excluded).
    pub fn failures(&self) -> u64 {
        self.network_errors + self.data_errors
    }
}

/// Accumulates a [`Summary`] one record at a time in constant memory, so a
/// server that runs for weeks does not grow with the connections it served.
/// Count, minimum, maximum, Σx and Σx² are exact (and so is Jain's index);
/// the median comes from an HdrHistogram with three significant digits.
#[derive(Debug, Clone)]
pub struct SummaryBuilder {
    successful: u64,
    network_errors: u64,
    data_errors: u64,
    aborted: u64,
    sent_bytes: u64,
    received_bytes: u64,
    rates: RateStats,
    peer: PeerTotals,
    timed: Option<TimedTotals>,
}

#[derive(Debug, Clone)]
struct RateStats {
    n: u64,
    sum: f64,
    sum_sq: f64,
    min: f64,
    max: f64,
    /// Per-connection good-put in bytes/s, for the median.
    hist: hdrhistogram::Histogram<u64>,
}

impl Default for SummaryBuilder {
    fn default() -> Self {
        Self {
            successful: 0,
            network_errors: 0,
            data_errors: 0,
            aborted: 0,
            sent_bytes: 0,
            received_bytes: 0,
            peer: PeerTotals::default(),
            timed: None,
            rates: RateStats {
                n: 0,
                sum: 0.0,
                sum_sq: 0.0,
                min: f64::INFINITY,
                max: 0.0,
                hist: hdrhistogram::Histogram::new(3).expect("3 significant digits is valid"),
            },
        }
    }
}

impl SummaryBuilder {
    /// Counts one connection.
    pub fn add(&mut self, r: &ConnectionRecord) {
        match r.outcome {
            Outcome::Succeeded => {
                self.successful += 1;
                // A timed connection's good-put is its receivers'.
                let x = match &r.timed {
                    Some(t) => {
                        let totals = self.timed.get_or_insert_with(TimedTotals::default);
                        DirectionTotals::add(&mut totals.up, t.data_start_s, t.up);
                        DirectionTotals::add(&mut totals.down, t.data_start_s, t.down);
                        t.bytes_per_second()
                    }
                    None => metrics::bytes_per_second(r.sent_bytes + r.received_bytes, r.elapsed_ns),
                };
                let s = &mut self.rates;
                s.n += 1;
                s.sum += x;
                s.sum_sq += x * x;
                s.min = s.min.min(x);
                s.max = s.max.max(x);
                // Auto-resizing histogram: recording cannot fail for a u64.
                let _ = s.hist.record(x.round() as u64);
            }
            Outcome::NetworkError { .. } => self.network_errors += 1,
            Outcome::ProtocolError { .. } => self.data_errors += 1,
            Outcome::Aborted { .. } => self.aborted += 1,
        }
        self.sent_bytes += r.sent_bytes;
        self.received_bytes += r.received_bytes;
        if let Some(p) = &r.peer {
            self.peer.connections += 1;
            self.peer.sent_bytes = self.peer.sent_bytes.saturating_add(p.sent_bytes);
            self.peer.received_bytes = self.peer.received_bytes.saturating_add(p.received_bytes);
        }
    }

    /// The summary of a run that lasted `duration_ns`.
    pub fn finish(&self, duration_ns: u64) -> Summary {
        let s = &self.rates;
        let spread = (s.n > 0).then(|| MinMedianMax {
            min: s.min,
            // The histogram's median is within 0.1%; clamp it into the
            // exact range so it never reads outside min..max.
            median: (s.hist.value_at_quantile(0.5) as f64).clamp(s.min, s.max),
            max: s.max,
        });
        let fairness = (s.n > 0 && s.sum_sq > 0.0).then(|| s.sum * s.sum / (s.n as f64 * s.sum_sq));
        Summary {
            successful: self.successful,
            network_errors: self.network_errors,
            data_errors: self.data_errors,
            aborted: self.aborted,
            sent_bytes: self.sent_bytes,
            received_bytes: self.received_bytes,
            duration_s: duration_ns as f64 / 1e9,
            send_bytes_per_second: metrics::bytes_per_second(self.sent_bytes, duration_ns),
            recv_bytes_per_second: metrics::bytes_per_second(self.received_bytes, duration_ns),
            connection_bytes_per_second: spread,
            fairness,
            peer: (self.peer.connections > 0).then_some(self.peer),
            timed: self.timed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(outcome: Outcome, sent: u64, elapsed_ns: u64) -> ConnectionRecord {
        ConnectionRecord {
            index: 0,
            connection_id: String::new(),
            local_address: String::new(),
            remote_address: "127.0.0.1:4444".into(),
            start_s: 0.0,
            time_slice_s: 0.0,
            elapsed_ns,
            pattern: Some(TcpPattern::Push),
            transfer_bytes: sent,
            buffer_bytes: 65536,
            rate_limit_bytes_per_second: 0,
            sent_bytes: sent,
            received_bytes: 0,
            outcome,
            peer: None,
            shutdown: None,
            tcp_info: None,
            quic: None,
            media: None,
            timed: None,
        }
    }

    #[test]
    fn summary_counts_each_outcome_kind() {
        let recs = vec![
            record(Outcome::Succeeded, 1000, 1_000_000_000),
            record(Outcome::Succeeded, 3000, 1_000_000_000),
            record(
                Outcome::NetworkError {
                    during: "recv".into(),
                    errno: Some(104),
                    name: "ECONNRESET".into(),
                    message: "reset".into(),
                },
                10,
                5,
            ),
            record(
                Outcome::Aborted {
                    reason: "interrupted".into(),
                },
                7,
                5,
            ),
        ];
        let s = Summary::from_records(&recs, 2_000_000_000);
        assert_eq!(
            (s.successful, s.network_errors, s.data_errors, s.aborted),
            (2, 1, 0, 1)
        );
        assert_eq!(s.sent_bytes, 4017);
        assert_eq!(s.send_bytes_per_second, 2008.5);
        let c = s.connection_bytes_per_second.unwrap();
        assert_eq!((c.min, c.max), (1000.0, 3000.0));
        // Of two values the histogram's median is the lower one.
        assert!((c.median - 1000.0).abs() <= 1.0, "{}", c.median);
        assert!((s.fairness.unwrap() - 0.8).abs() < 1e-12);
        assert_eq!(s.failures(), 1);
    }

    #[test]
    fn summary_median_of_many_is_within_a_tenth_of_a_percent() {
        let recs: Vec<_> = (1..=1001u64)
            .map(|i| record(Outcome::Succeeded, i * 1_000_000, 1_000_000_000))
            .collect();
        let s = Summary::from_records(&recs, 1_000_000_000);
        let c = s.connection_bytes_per_second.unwrap();
        assert_eq!((c.min, c.max), (1e6, 1.001e9));
        assert!((c.median - 501e6).abs() / 501e6 < 1e-3, "{}", c.median);
        let exact =
            crate::metrics::jain_fairness(&(1..=1001).map(|i| i as f64 * 1e6).collect::<Vec<_>>()).unwrap();
        assert!((s.fairness.unwrap() - exact).abs() < 1e-12);
    }

    #[test]
    fn outcome_serialises_with_status_tag() {
        let v = serde_json::to_value(Outcome::Succeeded).unwrap();
        assert_eq!(v, serde_json::json!({"status": "succeeded"}));
    }
}
