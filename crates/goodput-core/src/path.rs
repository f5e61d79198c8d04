//! Path tools' results: `goodput trace` (hops, path MTU, the path's
//! checksum) and `goodput ping` (round trips by ICMP echo or TCP connect).
//! The probing itself is the engine's; here are the documents and the
//! figures read from them.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::result::Percentiles;

/// What a path probe is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ProbeMethod {
    /// UDP datagrams to rising ports (traceroute's and tracepath's default).
    #[default]
    Udp,
    /// TCP SYNs to one port (a connect per probe), for paths that drop UDP.
    Tcp,
    /// ICMP echo requests on an unprivileged ICMP socket.
    Icmp,
}

impl ProbeMethod {
    /// The name in documents and banners.
    pub fn name(self) -> &'static str {
        match self {
            ProbeMethod::Udp => "udp",
            ProbeMethod::Tcp => "tcp",
            ProbeMethod::Icmp => "icmp",
        }
    }
}

/// What came back for one probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ProbeAnswer {
    /// Nothing within the wait.
    NoReply,
    /// ICMP time exceeded: a router on the way.
    TimeExceeded,
    /// The destination answered (port unreachable to a UDP probe, an echo
    /// reply, a SYN-ACK or a reset, or data).
    Reached,
    /// ICMP destination unreachable other than the port (see `code`).
    Unreachable,
}

/// One probe's fate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TraceProbe {
    /// What came back.
    pub answer: ProbeAnswer,
    /// Who answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// Send to answer, microseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rtt_us: Option<f64>,
    /// IP packet size of the probe, bytes.
    pub size: u32,
    /// TTL (hop limit) the answer arrived with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_ttl: Option<u8>,
    /// traceroute's mark of an unreachable: `!N` network, `!H` host, `!P`
    /// protocol, `!X` administratively prohibited, `!<code>` any other.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
}

/// A hop that told the path MTU: it could not forward a probe of `from`
/// bytes onto a link of `mtu` bytes (ICMP fragmentation needed, ICMPv6
/// packet too big).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MtuDrop {
    /// The TTL of the probe that met it (tracepath prints `pmtu N` on that
    /// hop's line).
    pub hop: u8,
    /// The router that said so.
    pub reported_by: String,
    /// Size of the probe it refused, bytes.
    pub from_bytes: u32,
    /// The next link's MTU, bytes.
    pub mtu: u32,
}

/// A size that got no answer and no ICMP where a smaller one got through:
/// an MTU drop whose "fragmentation needed" never came back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct BlackHole {
    /// First hop that stopped answering probes of `lost_bytes`.
    pub hop: u8,
    /// The size lost, bytes.
    pub lost_bytes: u32,
    /// The largest size found to pass, bytes (a search over the sizes
    /// between).
    pub passed_bytes: u32,
    /// Whether the search finished: false when the hop's answers ran out
    /// (an ICMP rate limit) or it ran out of time, so that bigger sizes
    /// than `passed_bytes` may pass too.
    pub exact: bool,
}

/// One hop (one TTL).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TraceHop {
    /// The TTL (hop limit) of its probes.
    pub hop: u8,
    /// Its probes, in send order.
    pub probes: Vec<TraceProbe>,
    /// The addresses that answered, in the order first heard.
    pub addresses: Vec<String>,
    /// Reverse names of `addresses` (with `names`; none where a lookup
    /// found none or took too long).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub names: Vec<Option<String>>,
    /// Hops the answer took back, from its TTL (tracepath's guess: the
    /// sender started at 64, 128 or 255).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub back_hops: Option<u8>,
    /// The path MTU a router told at this hop.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<MtuDrop>,
}

impl TraceHop {
    /// Whether nothing answered at this hop.
    pub fn silent(&self) -> bool {
        self.addresses.is_empty()
    }

    /// tracepath's `asymm N`: the answer came back over a different number
    /// of hops than the probe went.
    pub fn asymmetry(&self) -> Option<u8> {
        self.back_hops.filter(|b| *b != self.hop)
    }

    /// Whether the destination answered here.
    pub fn reached(&self) -> bool {
        self.probes.iter().any(|p| p.answer == ProbeAnswer::Reached)
    }
}

/// A `goodput trace` run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TraceDetail {
    /// The destination as given.
    pub target: String,
    /// The address probed.
    pub address: String,
    /// How probes were sent.
    pub method: ProbeMethod,
    /// Destination port: UDP's first (each probe the next), TCP's only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// First TTL probed.
    pub first_hop: u8,
    /// Last TTL that could be probed.
    pub max_hops: u8,
    /// Probes per hop.
    pub probes_per_hop: u32,
    /// How long a probe waits for its answer, milliseconds.
    pub wait_ms: u64,
    /// IP packet size of the first probes, bytes.
    pub packet_bytes: u32,
    /// Whether path MTU discovery ran (probes with DF, sizes down from the
    /// first).
    pub pmtu_discovery: bool,
    /// The hops, from `first_hop` to where the run stopped.
    pub hops: Vec<TraceHop>,
    /// Whether the destination answered.
    pub reached: bool,
    /// Hops to the destination (its TTL), when reached.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hop_count: Option<u8>,
    /// Hops the destination's answer took back, when reached.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub back_hops: Option<u8>,
    /// The outgoing interface's MTU, bytes (with `pmtu_discovery`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_mtu: Option<u32>,
    /// The path MTU found, bytes (with `pmtu_discovery`); after a black-hole
    /// search that did not finish, the largest size proven to pass.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pmtu: Option<u32>,
    /// A black hole found (with `pmtu_discovery`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub black_hole: Option<BlackHole>,
    /// [`path_checksum`] of `hops`.
    pub path_checksum: String,
}

/// A hash of the path: the hops that answered, in order, each as its
/// answering addresses sorted, with the TTL it answered at, and whether
/// the destination was reached. Hops with no answer at all are left out,
/// so a router that never answers or one whose answers are rate-limited
/// away does not change it; a different router at a hop, a hop more or
/// less, or a destination no longer reached does. Only RTTs changing
/// leaves it as it was. The first 16 hex digits of a SHA-256.
pub fn path_checksum(hops: &[TraceHop]) -> String {
    let mut h = Sha256::new();
    for hop in hops.iter().filter(|h| !h.silent()) {
        let mut addrs: Vec<&str> = hop.addresses.iter().map(String::as_str).collect();
        addrs.sort_unstable();
        h.update(format!("{}={};", hop.hop, addrs.join(",")).as_bytes());
    }
    if hops.iter().any(TraceHop::reached) {
        h.update(b"reached");
    }
    h.finalize()[..8].iter().map(|b| format!("{b:02x}")).collect()
}

/// Hops back from the TTL an answer arrived with, tracepath's way: the
/// answering host started at 64, 128 or 255, whichever is the nearest above.
pub fn back_hops(reply_ttl: u8) -> u8 {
    let start: u16 = match reply_ttl {
        0..=64 => 64,
        65..=128 => 128,
        _ => 255,
    };
    u8::try_from(start + 1 - u16::from(reply_ttl)).unwrap_or(u8::MAX)
}

/// How `goodput ping` measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PingMethod {
    /// ICMP echo where this user may open an ICMP socket, else TCP connect.
    #[default]
    Auto,
    /// ICMP echo on an unprivileged ICMP socket.
    Icmp,
    /// TCP connect time to a port (tcpping's way): SYN to SYN-ACK or reset.
    Tcp,
}

/// One echo request or connect.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PingReply {
    /// Sequence number (1-based).
    pub seq: u64,
    /// Round trip, microseconds; none when lost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rtt_us: Option<f64>,
    /// TTL (hop limit) of the reply, ICMP only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl: Option<u8>,
    /// Bytes of the reply (ICMP: the ICMP message).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u32>,
    /// TCP: the port refused (a reset), which times the round trip too.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub refused: bool,
    /// Why there was no reply, when something said: an ICMP error or a
    /// connect error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Round trips, ping's summary line.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RttSummary {
    /// Smallest, microseconds.
    pub min_us: f64,
    /// Mean.
    pub avg_us: f64,
    /// Largest.
    pub max_us: f64,
    /// Mean deviation from the mean (ping's `mdev`).
    pub mdev_us: f64,
}

impl RttSummary {
    /// Over `rtts` (microseconds); none when empty.
    pub fn of(rtts: &[f64]) -> Option<Self> {
        if rtts.is_empty() {
            return None;
        }
        let n = rtts.len() as f64;
        let avg = rtts.iter().sum::<f64>() / n;
        // ping's mdev: the standard deviation sqrt(E[x²] - E[x]²).
        let sq = rtts.iter().map(|x| x * x).sum::<f64>() / n;
        Some(Self {
            min_us: rtts.iter().copied().fold(f64::INFINITY, f64::min),
            avg_us: avg,
            max_us: rtts.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            mdev_us: (sq - avg * avg).max(0.0).sqrt(),
        })
    }
}

/// A `goodput ping` run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PingDetail {
    /// The destination as given.
    pub target: String,
    /// The address pinged.
    pub address: String,
    /// How (never `auto` here).
    pub method: PingMethod,
    /// Why ICMP was not used, when `auto` fell back to TCP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback: Option<String>,
    /// TCP's port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// ICMP echo data bytes (after the 8-byte header).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload_bytes: Option<u32>,
    /// Time between requests, milliseconds.
    pub interval_ms: u64,
    /// How long a request waits for its reply, milliseconds.
    pub timeout_ms: u64,
    /// Requests sent.
    pub sent: u64,
    /// Requests answered within the timeout.
    pub received: u64,
    /// Requests not answered.
    pub lost: u64,
    /// `lost` as a percentage of `sent`.
    pub loss_percent: f64,
    /// Replies beyond the first for a request.
    pub duplicates: u64,
    /// Requests answered by an error (ICMP unreachable, a failed connect).
    pub errors: u64,
    /// ping's min/avg/max/mdev.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rtt: Option<RttSummary>,
    /// Round-trip percentiles.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percentiles: Option<Percentiles>,
    /// Every request, in order (up to the record cap).
    pub replies: Vec<PingReply>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hop(n: u8, addrs: &[&str], reached: bool) -> TraceHop {
        TraceHop {
            hop: n,
            probes: addrs
                .iter()
                .map(|a| TraceProbe {
                    answer: if reached {
                        ProbeAnswer::Reached
                    } else {
                        ProbeAnswer::TimeExceeded
                    },
                    from: Some((*a).to_owned()),
                    rtt_us: Some(f64::from(n) * 100.0),
                    size: 60,
                    reply_ttl: Some(64),
                    code: None,
                })
                .collect(),
            addresses: addrs.iter().map(|a| (*a).to_owned()).collect(),
            names: Vec::new(),
            back_hops: None,
            mtu: None,
        }
    }

    #[test]
    fn checksum_ignores_silent_hops_and_rtts_and_sees_routers() {
        let a = vec![
            hop(1, &[], false),
            hop(2, &["10.0.2.2"], false),
            hop(3, &["10.0.3.2"], true),
        ];
        let mut slower = a.clone();
        for h in &mut slower {
            for p in &mut h.probes {
                p.rtt_us = p.rtt_us.map(|r| r * 50.0);
            }
        }
        assert_eq!(path_checksum(&a), path_checksum(&slower));
        assert_eq!(path_checksum(&a).len(), 16);
        let mut other = a.clone();
        other[1] = hop(2, &["10.0.5.2"], false);
        assert_ne!(path_checksum(&a), path_checksum(&other));
        let mut longer = a.clone();
        longer[2] = hop(3, &["10.0.9.9"], false);
        longer.push(hop(4, &["10.0.3.2"], true));
        assert_ne!(path_checksum(&a), path_checksum(&longer));
        let mut unreached = a.clone();
        unreached[2] = hop(3, &["10.0.3.2"], false);
        assert_ne!(path_checksum(&a), path_checksum(&unreached));
        // Two routers answering one hop in either order are one path.
        let ab = vec![hop(1, &["10.0.0.1", "10.0.0.2"], false)];
        let ba = vec![hop(1, &["10.0.0.2", "10.0.0.1"], false)];
        assert_eq!(path_checksum(&ab), path_checksum(&ba));
    }

    #[test]
    fn back_hops_guess_the_initial_ttl() {
        assert_eq!(back_hops(64), 1);
        assert_eq!(back_hops(61), 4);
        assert_eq!(back_hops(125), 4);
        assert_eq!(back_hops(255), 1);
        assert_eq!(back_hops(250), 6);
        assert_eq!(back_hops(0), 65);
    }

    #[test]
    fn rtt_summary_as_ping() {
        let s = RttSummary::of(&[100.0, 200.0, 300.0]).unwrap();
        assert_eq!((s.min_us, s.avg_us, s.max_us), (100.0, 200.0, 300.0));
        assert!((s.mdev_us - 81.6496580927726).abs() < 1e-9);
        assert!(RttSummary::of(&[]).is_none());
    }
}
