//! M-Lab's ndt7 speed test without I/O: the measurement messages both
//! ends exchange as WebSocket text, the kernel's `TCP_INFO` read into the
//! names ndt7 gives its fields, how the binary messages grow, and the
//! figures a subtest ends with.
//!
//! The engine speaks the WebSocket and reads the socket; everything here
//! is bytes and numbers in, values out, so a message a peer sends is a
//! unit test without a socket.

use serde::{Deserialize, Serialize};

/// The WebSocket subprotocol every ndt7 upgrade names.
pub const SUBPROTOCOL: &str = "net.measurementlab.ndt.v7";
/// The download subtest's path.
pub const DOWNLOAD_PATH: &str = "/ndt/v7/download";
/// The upload subtest's path.
pub const UPLOAD_PATH: &str = "/ndt/v7/upload";
/// The first binary message's size, bytes (8 KiB, as the specification
/// and every client start).
pub const FIRST_MESSAGE: usize = 1 << 13;
/// The largest binary message an end sends or must take, bytes (16 MiB).
pub const MAX_MESSAGE: usize = 1 << 24;
/// How long a subtest sends, microseconds (ten seconds).
pub const SUBTEST_US: u64 = 10_000_000;
/// The longest a subtest may last before either end closes it,
/// microseconds (fifteen seconds).
pub const MAX_SUBTEST_US: u64 = 15_000_000;
/// The shortest time between two measurement messages an end sends,
/// microseconds.
pub const MEASUREMENT_EVERY_US: u64 = 250_000;
/// The largest measurement message read, bytes: a text message past it is
/// not a measurement (the specification's are a few hundred bytes).
pub const MAX_MEASUREMENT: usize = 64 << 10;

/// Which subtest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Subtest {
    /// The server sends, the client reads.
    Download,
    /// The client sends, the server reads.
    Upload,
}

impl Subtest {
    /// Its name, as in a measurement's `Test`.
    pub const fn name(self) -> &'static str {
        match self {
            Subtest::Download => "download",
            Subtest::Upload => "upload",
        }
    }

    /// Its path on a server.
    pub const fn path(self) -> &'static str {
        match self {
            Subtest::Download => DOWNLOAD_PATH,
            Subtest::Upload => UPLOAD_PATH,
        }
    }

    /// The subtest a request path names (a query string is ignored).
    pub fn of_path(path: &str) -> Option<Subtest> {
        match path.split('?').next().unwrap_or("") {
            DOWNLOAD_PATH => Some(Subtest::Download),
            UPLOAD_PATH => Some(Subtest::Upload),
            _ => None,
        }
    }
}

/// Which end made a measurement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Origin {
    /// The client.
    Client,
    /// The server.
    Server,
}

/// What the application moved so far in a subtest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct AppInfo {
    /// Microseconds since the subtest began.
    #[serde(rename = "ElapsedTime")]
    pub elapsed_us: i64,
    /// Payload bytes sent (download) or received (upload) so far.
    #[serde(rename = "NumBytes")]
    pub num_bytes: i64,
}

/// The connection's ends, as the server sees them.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ConnectionInfo {
    /// The client's address and port.
    #[serde(rename = "Client", default)]
    pub client: String,
    /// The server's address and port.
    #[serde(rename = "Server", default)]
    pub server: String,
    /// The test's identifier.
    #[serde(rename = "UUID", default)]
    pub uuid: String,
}

/// The kernel's `TCP_INFO` of the measuring end's socket, with the names
/// ndt7 gives its fields (times in microseconds, sizes in bytes). A field
/// the kernel did not fill is absent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[allow(missing_docs)]
pub struct TcpInfo {
    #[serde(rename = "State", default, skip_serializing_if = "Option::is_none")]
    pub state: Option<u8>,
    #[serde(rename = "CAState", default, skip_serializing_if = "Option::is_none")]
    pub ca_state: Option<u8>,
    #[serde(rename = "Retransmits", default, skip_serializing_if = "Option::is_none")]
    pub retransmits: Option<u8>,
    #[serde(rename = "RTO", default, skip_serializing_if = "Option::is_none")]
    pub rto: Option<u32>,
    #[serde(rename = "SndMSS", default, skip_serializing_if = "Option::is_none")]
    pub snd_mss: Option<u32>,
    #[serde(rename = "RcvMSS", default, skip_serializing_if = "Option::is_none")]
    pub rcv_mss: Option<u32>,
    #[serde(rename = "Unacked", default, skip_serializing_if = "Option::is_none")]
    pub unacked: Option<u32>,
    #[serde(rename = "Lost", default, skip_serializing_if = "Option::is_none")]
    pub lost: Option<u32>,
    #[serde(rename = "Retrans", default, skip_serializing_if = "Option::is_none")]
    pub retrans: Option<u32>,
    #[serde(rename = "PMTU", default, skip_serializing_if = "Option::is_none")]
    pub pmtu: Option<u32>,
    #[serde(rename = "RTT", default, skip_serializing_if = "Option::is_none")]
    pub rtt: Option<u32>,
    #[serde(rename = "RTTVar", default, skip_serializing_if = "Option::is_none")]
    pub rtt_var: Option<u32>,
    #[serde(rename = "SndCwnd", default, skip_serializing_if = "Option::is_none")]
    pub snd_cwnd: Option<u32>,
    #[serde(rename = "TotalRetrans", default, skip_serializing_if = "Option::is_none")]
    pub total_retrans: Option<u32>,
    #[serde(rename = "PacingRate", default, skip_serializing_if = "Option::is_none")]
    pub pacing_rate: Option<u64>,
    #[serde(rename = "BytesAcked", default, skip_serializing_if = "Option::is_none")]
    pub bytes_acked: Option<u64>,
    #[serde(rename = "BytesReceived", default, skip_serializing_if = "Option::is_none")]
    pub bytes_received: Option<u64>,
    #[serde(rename = "SegsOut", default, skip_serializing_if = "Option::is_none")]
    pub segs_out: Option<u32>,
    #[serde(rename = "SegsIn", default, skip_serializing_if = "Option::is_none")]
    pub segs_in: Option<u32>,
    #[serde(rename = "MinRTT", default, skip_serializing_if = "Option::is_none")]
    pub min_rtt: Option<u32>,
    #[serde(rename = "DeliveryRate", default, skip_serializing_if = "Option::is_none")]
    pub delivery_rate: Option<u64>,
    #[serde(rename = "BusyTime", default, skip_serializing_if = "Option::is_none")]
    pub busy_time: Option<u64>,
    #[serde(rename = "RWndLimited", default, skip_serializing_if = "Option::is_none")]
    pub rwnd_limited: Option<u64>,
    #[serde(rename = "SndBufLimited", default, skip_serializing_if = "Option::is_none")]
    pub sndbuf_limited: Option<u64>,
    #[serde(rename = "BytesSent", default, skip_serializing_if = "Option::is_none")]
    pub bytes_sent: Option<u64>,
    #[serde(rename = "BytesRetrans", default, skip_serializing_if = "Option::is_none")]
    pub bytes_retrans: Option<u64>,
    /// Microseconds since the subtest began, when this was read.
    #[serde(rename = "ElapsedTime", default, skip_serializing_if = "Option::is_none")]
    pub elapsed_us: Option<i64>,
}

fn u8_at(b: &[u8], at: usize) -> Option<u8> {
    b.get(at).copied()
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    let s = b.get(at..at.checked_add(4)?)?;
    Some(u32::from_ne_bytes(s.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    let s = b.get(at..at.checked_add(8)?)?;
    Some(u64::from_ne_bytes(s.try_into().ok()?))
}

impl TcpInfo {
    /// The fields of Linux's `struct tcp_info` as `getsockopt(TCP_INFO)`
    /// wrote them into `raw` (only the bytes it wrote: an older kernel
    /// writes fewer, and the fields past them stay absent), read
    /// `elapsed_us` after the subtest began. Offsets are the kernel's ABI
    /// (`include/uapi/linux/tcp.h`), which only ever grows at its end.
    pub fn from_kernel(raw: &[u8], elapsed_us: i64) -> TcpInfo {
        TcpInfo {
            state: u8_at(raw, 0),
            ca_state: u8_at(raw, 1),
            retransmits: u8_at(raw, 2),
            rto: u32_at(raw, 8),
            snd_mss: u32_at(raw, 16),
            rcv_mss: u32_at(raw, 20),
            unacked: u32_at(raw, 24),
            lost: u32_at(raw, 32),
            retrans: u32_at(raw, 36),
            pmtu: u32_at(raw, 60),
            rtt: u32_at(raw, 68),
            rtt_var: u32_at(raw, 72),
            snd_cwnd: u32_at(raw, 80),
            total_retrans: u32_at(raw, 100),
            pacing_rate: u64_at(raw, 104),
            bytes_acked: u64_at(raw, 120),
            bytes_received: u64_at(raw, 128),
            segs_out: u32_at(raw, 136),
            segs_in: u32_at(raw, 140),
            min_rtt: u32_at(raw, 148),
            delivery_rate: u64_at(raw, 160),
            busy_time: u64_at(raw, 168),
            rwnd_limited: u64_at(raw, 176),
            sndbuf_limited: u64_at(raw, 184),
            bytes_sent: u64_at(raw, 200),
            bytes_retrans: u64_at(raw, 208),
            elapsed_us: Some(elapsed_us),
        }
    }

    /// Bytes retransmitted over bytes sent, as a share 0-1 (none: the
    /// kernel counts neither, or nothing was sent).
    pub fn retransmission_ratio(&self) -> Option<f64> {
        let sent = self.bytes_sent.filter(|&s| s > 0)?;
        let again = self.bytes_retrans?;
        Some((again as f64 / sent as f64).min(1.0))
    }
}

/// One measurement message (WebSocket text), either end's.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Measurement {
    /// What the application moved.
    #[serde(rename = "AppInfo", default, skip_serializing_if = "Option::is_none")]
    pub app_info: Option<AppInfo>,
    /// The connection's ends (servers send it once, first).
    #[serde(rename = "ConnectionInfo", default, skip_serializing_if = "Option::is_none")]
    pub connection_info: Option<ConnectionInfo>,
    /// Which end measured.
    #[serde(rename = "Origin", default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<Origin>,
    /// Which subtest.
    #[serde(rename = "Test", default, skip_serializing_if = "Option::is_none")]
    pub test: Option<Subtest>,
    /// The measuring end's `TCP_INFO`.
    #[serde(rename = "TCPInfo", default, skip_serializing_if = "Option::is_none")]
    pub tcp_info: Option<TcpInfo>,
}

/// Why a text message was not a measurement.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MeasurementError {
    /// Longer than [`MAX_MEASUREMENT`].
    #[error("a measurement message of {0} bytes, longer than the {MAX_MEASUREMENT} bytes one may be")]
    TooLong(usize),
    /// Not the JSON of a measurement.
    #[error("a text message that is not an ndt7 measurement: {0}")]
    NotJson(String),
}

impl Measurement {
    /// A measurement from a text message, bounded in length before it is
    /// parsed. Unknown fields (other servers send more) are ignored;
    /// numbers out of their type's range are an error.
    pub fn parse(text: &str) -> Result<Measurement, MeasurementError> {
        if text.len() > MAX_MEASUREMENT {
            return Err(MeasurementError::TooLong(text.len()));
        }
        serde_json::from_str(text).map_err(|e| {
            let mut m = e.to_string();
            m.truncate(200);
            MeasurementError::NotJson(m)
        })
    }

    /// The message's text.
    pub fn to_text(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| "{}".into())
    }
}

/// The size of the next binary message a sender sends after `sent` bytes
/// in messages of `current` bytes: twice as large once a sixteenth of
/// what was sent exceeds it, never past `max` (so each message is small
/// next to the transfer, and a slow path is still measured in fine steps).
pub fn next_message_size(current: usize, sent: u64, max: usize) -> usize {
    let current = current.clamp(1, max.max(1));
    if current < max && sent / 16 >= current as u64 {
        (current * 2).min(max)
    } else {
        current
    }
}

/// The figures of one subtest, as one end saw it.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SubtestFigures {
    /// Payload bytes moved (the receiving application's count when known).
    pub bytes: u64,
    /// Seconds from the upgrade to the last byte.
    pub seconds: f64,
    /// `bytes` over `seconds`, bits per second.
    pub rate_bps: f64,
    /// The sending socket's smallest round trip, milliseconds (the
    /// kernel's `MinRTT`).
    pub min_rtt_ms: Option<f64>,
    /// The sending socket's smoothed round trip at the end, milliseconds.
    pub rtt_ms: Option<f64>,
    /// Bytes the sender retransmitted over bytes it sent, percent.
    pub retransmission_pct: Option<f64>,
    /// Segments the sender retransmitted.
    pub retransmitted_segments: Option<u64>,
    /// Measurement messages the peer sent.
    pub measurements: u64,
    /// The sender's TCP_INFO came from the server's messages (download)
    /// rather than the client's own socket.
    pub from_server: bool,
}

impl SubtestFigures {
    /// Figures of `bytes` over `seconds`, with the sender's `TCP_INFO`.
    pub fn new(bytes: u64, seconds: f64, sender: Option<&TcpInfo>) -> SubtestFigures {
        let seconds = if seconds.is_finite() && seconds > 0.0 {
            seconds
        } else {
            0.0
        };
        SubtestFigures {
            bytes,
            seconds,
            rate_bps: if seconds > 0.0 {
                bytes as f64 * 8.0 / seconds
            } else {
                0.0
            },
            min_rtt_ms: sender
                .and_then(|t| t.min_rtt)
                .filter(|&r| r > 0 && r != u32::MAX)
                .map(|r| f64::from(r) / 1e3),
            rtt_ms: sender.and_then(|t| t.rtt).map(|r| f64::from(r) / 1e3),
            retransmission_pct: sender.and_then(TcpInfo::retransmission_ratio).map(|r| r * 100.0),
            retransmitted_segments: sender.and_then(|t| t.total_retrans).map(u64::from),
            measurements: 0,
            from_server: false,
        }
    }
}

/// What `goodput ndt7` measured.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Ndt7Detail {
    /// The server's base URL (`ws://host:port` or `wss://…`).
    pub server: String,
    /// The download subtest, when run.
    pub download: Option<SubtestFigures>,
    /// The upload subtest, when run.
    pub upload: Option<SubtestFigures>,
    /// The client's address as the server saw it (its `ConnectionInfo`).
    pub client_address: Option<String>,
}

/// The most subtests a server's result keeps (the rest are counted).
pub const MAX_KEPT_TESTS: usize = 100;

/// What an ndt7 server did over its life.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Ndt7ServerCounters {
    /// Download subtests run to their end.
    pub downloads: u64,
    /// Upload subtests run to their end.
    pub uploads: u64,
    /// Subtests that broke off (the client went away, a protocol error).
    pub broken: u64,
    /// Connections refused because the server ran its most tests at once.
    pub refused_busy: u64,
    /// Connections refused because their address held its most tests.
    pub refused_per_client: u64,
    /// Connections refused because their address started tests too often.
    pub refused_rate: u64,
    /// Upgrades refused: not a WebSocket, a wrong path or subprotocol.
    pub bad_requests: u64,
    /// Upgrades not finished within their deadline.
    pub handshake_timeouts: u64,
    /// Subtests ended at the hard cap (a peer that would not finish).
    pub hard_capped: u64,
    /// Messages past the size limit, or binary messages the wrong way.
    pub oversized_messages: u64,
    /// Payload bytes sent (downloads).
    pub bytes_sent: u64,
    /// Payload bytes received (uploads).
    pub bytes_received: u64,
    /// The first subtests, with the server's figures of each (at most
    /// [`MAX_KEPT_TESTS`]).
    pub tests: Vec<Ndt7ServerTest>,
    /// Subtests past those kept.
    pub tests_omitted: u64,
}

/// One subtest a server ran, for its caller (the agent keeps each browser
/// test as a run).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Ndt7ServerTest {
    /// The client's address and port.
    pub client: String,
    /// Which subtest.
    pub subtest: Subtest,
    /// The server's figures of it (its own socket's TCP_INFO).
    pub figures: SubtestFigures,
    /// Whether it ran to its end.
    pub completed: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_tcp_info_maps_to_ndt7_names_and_stops_where_the_kernel_did() {
        let mut raw = vec![0u8; 232];
        raw[0] = 1; // TCP_ESTABLISHED
        raw[68..72].copy_from_slice(&2500u32.to_ne_bytes());
        raw[148..152].copy_from_slice(&1200u32.to_ne_bytes());
        raw[100..104].copy_from_slice(&7u32.to_ne_bytes());
        raw[200..208].copy_from_slice(&1_000_000u64.to_ne_bytes());
        raw[208..216].copy_from_slice(&25_000u64.to_ne_bytes());
        let t = TcpInfo::from_kernel(&raw, 42);
        assert_eq!(t.state, Some(1));
        assert_eq!(
            (t.rtt, t.min_rtt, t.total_retrans),
            (Some(2500), Some(1200), Some(7))
        );
        assert_eq!(t.retransmission_ratio(), Some(0.025));
        let v = serde_json::to_value(t).unwrap();
        assert_eq!(v["MinRTT"], 1200);
        assert_eq!(v["RTT"], 2500);
        assert_eq!(v["BytesRetrans"], 25_000);
        assert_eq!(v["ElapsedTime"], 42);
        // A kernel that wrote only 104 bytes has no MinRTT nor byte counts.
        let old = TcpInfo::from_kernel(&raw[..104], 1);
        assert_eq!((old.rtt, old.min_rtt, old.bytes_sent), (Some(2500), None, None));
        assert_eq!(old.retransmission_ratio(), None);
        assert_eq!(TcpInfo::from_kernel(&[], 0).state, None);
    }

    #[test]
    fn measurements_read_what_other_servers_send_and_refuse_the_rest() {
        let text = r#"{"AppInfo":{"ElapsedTime":1250000,"NumBytes":917504},
            "ConnectionInfo":{"Client":"[::1]:5000","Server":"[::1]:443","UUID":"x"},
            "Origin":"server","Test":"download","TCPInfo":{"MinRTT":35,"RTT":60,"BBRInfo":1,
            "BytesAcked":900000},"Extra":[1,2,3]}"#;
        let m = Measurement::parse(text).unwrap();
        assert_eq!(
            m.app_info,
            Some(AppInfo {
                elapsed_us: 1_250_000,
                num_bytes: 917_504
            })
        );
        assert_eq!(m.test, Some(Subtest::Download));
        assert_eq!(m.origin, Some(Origin::Server));
        assert_eq!(m.tcp_info.unwrap().min_rtt, Some(35));
        assert_eq!(m.connection_info.unwrap().client, "[::1]:5000");
        assert!(matches!(
            Measurement::parse("not json"),
            Err(MeasurementError::NotJson(_))
        ));
        assert!(matches!(
            Measurement::parse(r#"{"TCPInfo":{"RTT":-1}}"#),
            Err(MeasurementError::NotJson(_))
        ));
        let long = format!("{{\"x\":\"{}\"}}", "a".repeat(MAX_MEASUREMENT));
        assert!(matches!(
            Measurement::parse(&long),
            Err(MeasurementError::TooLong(_))
        ));
        let back = Measurement::parse(&m_round_trip()).unwrap();
        assert_eq!(back.app_info.unwrap().num_bytes, 3);
    }

    fn m_round_trip() -> String {
        Measurement {
            app_info: Some(AppInfo {
                elapsed_us: 1,
                num_bytes: 3,
            }),
            origin: Some(Origin::Client),
            test: Some(Subtest::Upload),
            ..Measurement::default()
        }
        .to_text()
    }

    #[test]
    fn messages_double_once_a_sixteenth_of_the_transfer_exceeds_them() {
        assert_eq!(next_message_size(FIRST_MESSAGE, 0, MAX_MESSAGE), FIRST_MESSAGE);
        assert_eq!(
            next_message_size(FIRST_MESSAGE, 16 * FIRST_MESSAGE as u64 - 1, MAX_MESSAGE),
            FIRST_MESSAGE
        );
        assert_eq!(
            next_message_size(FIRST_MESSAGE, 16 * FIRST_MESSAGE as u64, MAX_MESSAGE),
            2 * FIRST_MESSAGE
        );
        assert_eq!(next_message_size(MAX_MESSAGE, u64::MAX, MAX_MESSAGE), MAX_MESSAGE);
        assert_eq!(next_message_size(0, u64::MAX, 0), 1, "never zero, never past max");
    }

    #[test]
    fn paths_name_their_subtests() {
        assert_eq!(
            Subtest::of_path("/ndt/v7/download?client_name=x"),
            Some(Subtest::Download)
        );
        assert_eq!(Subtest::of_path("/ndt/v7/upload"), Some(Subtest::Upload));
        assert_eq!(Subtest::of_path("/ndt/v7/uploadx"), None);
        assert_eq!(Subtest::of_path("/"), None);
    }

    #[test]
    fn figures_take_rate_rtt_and_retransmissions_from_the_sender() {
        let t = TcpInfo {
            min_rtt: Some(1500),
            rtt: Some(3000),
            bytes_sent: Some(200),
            bytes_retrans: Some(10),
            total_retrans: Some(2),
            ..TcpInfo::default()
        };
        let f = SubtestFigures::new(1_000_000, 2.0, Some(&t));
        assert_eq!(f.rate_bps, 4_000_000.0);
        assert_eq!((f.min_rtt_ms, f.rtt_ms), (Some(1.5), Some(3.0)));
        assert_eq!(f.retransmission_pct, Some(5.0));
        assert_eq!(f.retransmitted_segments, Some(2));
        let none = SubtestFigures::new(5, f64::NAN, None);
        assert_eq!((none.rate_bps, none.seconds, none.min_rtt_ms), (0.0, 0.0, None));
    }
}
