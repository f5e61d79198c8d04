//! QUIC perf (draft-banks-quic-performance, picoquic-compatible) over
//! quinn: the server of `goodput server --quic` and the client of
//! `goodput quic`. Headers and scenarios are in `goodput_core::quic`.

mod client;
mod server;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use goodput_core::quic::ALPN;
use goodput_core::result::{ConnectionRecord, Outcome, QuicPathStats};
use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use quinn::Connection;
use quinn::{TransportConfig, VarInt};

use crate::tls::Trust;
use crate::EngineError;

pub use client::{run_quic, QuicMode, QuicSpec};
pub use server::{bind_quic, BoundQuic, QuicServerSpec};

/// Bytes every response is sliced from (picoquic sends '0' characters).
pub(crate) fn filler() -> Bytes {
    static F: std::sync::OnceLock<Bytes> = std::sync::OnceLock::new();
    F.get_or_init(|| Bytes::from(vec![b'0'; 1 << 20])).clone()
}

/// The largest UDP payload path MTU discovery may climb to. quinn hands the
/// kernel up to ten segments per GSO send and the kernel takes at most 64 KiB
/// per send, so ten of these must fit: 10 × 6,500 + headers < 65,535. On
/// loopback (MTU 65,536) this cuts the packets per byte by 4.5 against
/// quinn's default ceiling of 1,452; on an Ethernet path discovery stops at
/// what the path carries, as before.
const MTU_CEILING: u16 = 6_500;

/// The packet sizes an endpoint uses, in words for its banner.
pub fn packet_sizes(max_mtu: Option<u16>) -> String {
    match max_mtu {
        Some(n) => format!("UDP payloads capped at {n} B both ways"),
        None => format!("UDP payloads up to {MTU_CEILING} B as path MTU discovery finds"),
    }
}

/// How long a silent connection lasts.
const IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// What an endpoint of ours accepts: datagrams up to `max_mtu`, which the
/// peer is told (max_udp_payload_size), else up to QUIC's largest UDP
/// payload, so a peer's own path MTU discovery is never capped by us.
fn endpoint_config(max_mtu: Option<u16>) -> quinn::EndpointConfig {
    let mut e = quinn::EndpointConfig::default();
    // 1,200 to 65,527 is what QUIC allows (RFC 9000 §18.2); the specs
    // check a cap against it, so this cannot fail.
    let _ = e.max_udp_payload_size(max_mtu.unwrap_or(65_527));
    e
}

/// Windows wide enough for loopback rates, many streams for request/response
/// runs, and DATAGRAM support for picoquic's datagram media. A connection
/// silent for `idle` ends without a word; keep-alives go out every 5 s or
/// twice per `idle` if that is shorter. Path MTU discovery climbs to
/// `max_mtu` where one is given, else to `MTU_CEILING`.
fn transport(max_streams: u32, idle: Duration, max_mtu: Option<u16>) -> Arc<TransportConfig> {
    let mut t = TransportConfig::default();
    let mut mtu = quinn::MtuDiscoveryConfig::default();
    mtu.upper_bound(max_mtu.unwrap_or(MTU_CEILING));
    t.mtu_discovery_config(Some(mtu));
    t.stream_receive_window(VarInt::from_u32(32 << 20))
        .receive_window(VarInt::from_u32(64 << 20))
        .send_window(64 << 20)
        .max_concurrent_bidi_streams(VarInt::from_u32(max_streams))
        .max_concurrent_uni_streams(VarInt::from_u32(max_streams))
        .datagram_receive_buffer_size(Some(4 << 20))
        .max_idle_timeout(quinn::IdleTimeout::try_from(idle).ok())
        .keep_alive_interval(Some((idle / 2).min(Duration::from_secs(5))));
    Arc::new(t)
}

/// The server's QUIC configuration: `cert`/`key` PEM files, or a generated
/// ECDSA P-256 self-signed certificate (every perf peer accepts it).
pub(crate) fn server_config(
    cert_key: Option<(PathBuf, PathBuf)>,
    max_streams: u32,
    idle: Duration,
    max_mtu: Option<u16>,
) -> Result<quinn::ServerConfig, EngineError> {
    let tls = crate::tls::server_config(cert_key.as_ref().map(|(c, k)| (c.as_path(), k.as_path())))?;
    let mut tls = (*tls).clone();
    tls.alpn_protocols = vec![ALPN.to_vec()];
    tls.max_early_data_size = 0;
    let crypto = QuicServerConfig::try_from(tls)
        .map_err(|e| EngineError::Config(format!("TLS configuration unusable for QUIC: {e}")))?;
    let mut cfg = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    cfg.transport_config(transport(max_streams, idle, max_mtu));
    Ok(cfg)
}

/// The client's QUIC configuration.
pub(crate) fn client_config(
    trust: &Trust,
    max_streams: u32,
    max_mtu: Option<u16>,
) -> Result<quinn::ClientConfig, EngineError> {
    let tls = crate::tls::client_config(trust)?;
    let mut tls = (*tls).clone();
    tls.alpn_protocols = vec![ALPN.to_vec()];
    let crypto = QuicClientConfig::try_from(tls)
        .map_err(|e| EngineError::Config(format!("TLS configuration unusable for QUIC: {e}")))?;
    let mut cfg = quinn::ClientConfig::new(Arc::new(crypto));
    cfg.transport_config(transport(max_streams, IDLE_TIMEOUT, max_mtu));
    Ok(cfg)
}

/// A UDP socket for an endpoint (IPv6 ones v6-only, big buffers).
pub(crate) fn udp_socket(addr: SocketAddr) -> std::io::Result<std::net::UdpSocket> {
    let s = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::DGRAM,
        Some(socket2::Protocol::UDP),
    )?;
    if addr.is_ipv6() {
        s.set_only_v6(true)?;
    }
    s.bind(&addr.into())?;
    let fd = std::os::fd::AsRawFd::as_raw_fd(&s);
    crate::datagram::set_buffer(fd, true, 8 << 20);
    crate::datagram::set_buffer(fd, false, 8 << 20);
    Ok(s.into())
}

/// A connection's path figures from quinn.
pub(crate) fn path_stats(c: &Connection) -> QuicPathStats {
    let s = c.stats();
    QuicPathStats {
        rtt_us: s.path.rtt.as_micros() as u64,
        min_rtt_us: Some(s.path.min_rtt.as_micros() as u64).filter(|&us| us > 0),
        cwnd_bytes: s.path.cwnd,
        congestion_events: s.path.congestion_events,
        lost_packets: s.path.lost_packets,
        lost_bytes: s.path.lost_bytes,
        sent_packets: s.path.sent_packets,
        received_datagrams: s.udp_rx.datagrams,
        sent_udp_bytes: s.udp_tx.bytes,
        received_udp_bytes: s.udp_rx.bytes,
        mtu_bytes: s.path.current_mtu,
    }
}

pub(crate) fn record(
    index: u64,
    local: String,
    remote: SocketAddr,
    (start, opened, now): (Instant, Instant, Instant),
    up: u64,
    down: u64,
    outcome: Outcome,
) -> ConnectionRecord {
    ConnectionRecord {
        index,
        // quinn keeps the wire's connection IDs to itself: a UUID names
        // the connection in the records, the performance log and -v 4.
        connection_id: uuid::Uuid::new_v4().to_string(),
        local_address: local,
        remote_address: remote.to_string(),
        start_s: opened.duration_since(start).as_secs_f64(),
        time_slice_s: now.duration_since(start).as_secs_f64(),
        elapsed_ns: now.duration_since(opened).as_nanos() as u64,
        pattern: None,
        transfer_bytes: 0,
        buffer_bytes: 0,
        rate_limit_bytes_per_second: 0,
        sent_bytes: up,
        received_bytes: down,
        outcome,
        peer: None,
        shutdown: None,
        // Filled in where there was a connection to measure; none for a
        // failed handshake (whose figures would read 0, a minimum RTT too).
        quic: None,
        tcp_info: None,
        media: None,
        timed: None,
    }
}

pub(crate) fn conn_error(during: &str, e: impl std::fmt::Display) -> Outcome {
    Outcome::NetworkError {
        during: during.into(),
        errno: None,
        name: "QuicError".into(),
        message: e.to_string(),
    }
}

/// When frame `k` of a media stream at `frequency` frames a second is due,
/// on the frame clock that started at `start` (both ends use it).
pub(crate) fn frame_due(start: Instant, k: u32, frequency: u8) -> Instant {
    start + Duration::from_micros(u64::from(k) * 1_000_000 / u64::from(frequency.max(1)))
}

/// Reads what has arrived on `recv`, up to 32 chunks at once (one call per
/// batch, not per packet-sized chunk, as quinn perf reads); the bytes read,
/// or `None` at the stream's FIN.
pub(crate) async fn read_batch(recv: &mut quinn::RecvStream) -> Result<Option<u64>, quinn::ReadError> {
    let mut bufs: [Bytes; 32] = Default::default();
    Ok(recv
        .read_chunks(&mut bufs)
        .await?
        .map(|n| bufs[..n].iter().map(|b| b.len() as u64).sum()))
}

/// QUIC's variable-length integer (RFC 9000 §16).
pub(crate) fn put_varint(out: &mut Vec<u8>, v: u64) {
    match v {
        0..=0x3f => out.push(v as u8),
        0x40..=0x3fff => out.extend_from_slice(&((v as u16) | 0x4000).to_be_bytes()),
        0x4000..=0x3fff_ffff => out.extend_from_slice(&((v as u32) | 0x8000_0000).to_be_bytes()),
        _ => out.extend_from_slice(&((v & 0x3fff_ffff_ffff_ffff) | 0xc000_0000_0000_0000).to_be_bytes()),
    }
}

/// Reads a QUIC varint; returns it and its length.
pub(crate) fn get_varint(b: &[u8]) -> Option<(u64, usize)> {
    let first = *b.first()?;
    let len = 1usize << (first >> 6);
    let bytes = b.get(..len)?;
    let mut v = u64::from(first & 0x3f);
    for &x in &bytes[1..] {
        v = (v << 8) | u64::from(x);
    }
    Some((v, len))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_round_trip() {
        for v in [0, 1, 63, 64, 16383, 16384, (1 << 30) - 1, 1 << 30, (1 << 62) - 1] {
            let mut b = Vec::new();
            put_varint(&mut b, v);
            assert_eq!(get_varint(&b), Some((v, b.len())), "{v}");
        }
        // RFC 9000's examples.
        assert_eq!(get_varint(&[0x9d, 0x7f, 0x3e, 0x7d]), Some((494_878_333, 4)));
        assert_eq!(get_varint(&[0x7b, 0xbd]), Some((15_293, 2)));
        assert_eq!(get_varint(&[0x9d, 0x7f]), None);
    }
}
