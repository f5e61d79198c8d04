//! STAMP (RFC 8762) with the RFC 8972 extensions, unauthenticated mode:
//! timestamps, error estimates, the Session-Sender and Session-Reflector
//! packets, the reflector's reply rule (symmetric size, TLVs with the U and
//! M flags), and the sender's accounting in [`stats`].
//!
//! Everything is big-endian. Times are handled as signed nanoseconds since
//! the Unix epoch; the wire carries them as 64-bit NTP timestamps (or PTPv2
//! truncated timestamps when the error estimate's Z bit says so).

pub mod stats;

/// Length of the unauthenticated base packet, both directions.
pub const BASE_LEN: usize = 44;
/// Shortest request a reflector answers: a TWAMP-Light sender's 14 octets
/// (sequence, timestamp, error estimate). Anything shorter is dropped.
pub const MIN_REQUEST_LEN: usize = 14;
/// Largest packet goodput sends or reflects (a jumbo frame's UDP payload).
pub const MAX_PACKET_LEN: usize = 9000;
/// STAMP's default port (TWAMP-Test receiver port, RFC 8545).
pub const DEFAULT_PORT: u16 = 862;
/// The TTL / hop limit a Session-Sender sends with, so hops = 255 − TTL seen.
pub const SEND_TTL: u8 = 255;

/// Seconds from 1900-01-01 (NTP era 0) to 1970-01-01.
const NTP_UNIX_OFFSET: i64 = 2_208_988_800;
/// Seconds in one NTP era (2³²).
const NTP_ERA: i64 = 1 << 32;

/// Encodes Unix nanoseconds as a 64-bit NTP timestamp (seconds since 1900,
/// modulo the era, and a 2⁻³² s fraction).
pub fn ntp_from_unix_ns(ns: i64) -> u64 {
    let secs = ns.div_euclid(1_000_000_000);
    let sub = ns.rem_euclid(1_000_000_000) as u64;
    let ntp_secs = (secs + NTP_UNIX_OFFSET).rem_euclid(NTP_ERA) as u64;
    // Round to the nearest 2⁻³² s so that decoding gives the same nanosecond.
    let frac = ((sub << 32) + 500_000_000) / 1_000_000_000;
    (ntp_secs << 32) + frac
}

/// Decodes an NTP timestamp to Unix nanoseconds, choosing the era that puts
/// it nearest to `near_unix_ns` (so 2036's wrap is handled).
pub fn unix_ns_from_ntp(ntp: u64, near_unix_ns: i64) -> i64 {
    let secs = (ntp >> 32) as i64;
    let frac = ntp & 0xFFFF_FFFF;
    let sub = ((frac * 1_000_000_000 + (1 << 31)) >> 32) as i64;
    let near_secs = near_unix_ns.div_euclid(1_000_000_000) + NTP_UNIX_OFFSET;
    let era = (near_secs - secs + NTP_ERA / 2).div_euclid(NTP_ERA);
    let unix_secs = secs + era * NTP_ERA - NTP_UNIX_OFFSET;
    unix_secs * 1_000_000_000 + sub
}

/// TAI − UTC in seconds, used to read PTPv2 truncated timestamps (TAI) from
/// peers that set the Z bit. 37 s since 2017; no leap second is scheduled.
pub const TAI_UTC_OFFSET_S: i64 = 37;

/// Decodes a PTPv2 truncated timestamp (32-bit TAI seconds since 1970, 32-bit
/// nanoseconds) to Unix (UTC) nanoseconds near `near_unix_ns`.
pub fn unix_ns_from_ptp(ts: u64, near_unix_ns: i64) -> i64 {
    let secs = (ts >> 32) as i64 - TAI_UTC_OFFSET_S;
    let ns = (ts & 0xFFFF_FFFF).min(999_999_999) as i64;
    let near = near_unix_ns.div_euclid(1_000_000_000);
    let era = (near - secs + NTP_ERA / 2).div_euclid(NTP_ERA);
    (secs + era * NTP_ERA) * 1_000_000_000 + ns
}

/// Decodes a timestamp field in the format its error estimate names.
pub fn decode_timestamp(ts: u64, err: ErrorEstimate, near_unix_ns: i64) -> i64 {
    if err.ptp {
        unix_ns_from_ptp(ts, near_unix_ns)
    } else {
        unix_ns_from_ntp(ts, near_unix_ns)
    }
}

/// The 16-bit Error Estimate (RFC 4656 §4.1.2): S | Z | Scale(6) | Multiplier(8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ErrorEstimate {
    /// S: the clock is synchronised to UTC by an external source.
    pub synchronized: bool,
    /// Z: the timestamps are PTPv2 truncated, not NTP (RFC 8186).
    pub ptp: bool,
    /// Scale, 0..=63.
    pub scale: u8,
    /// Multiplier; 0 is invalid.
    pub multiplier: u8,
}

impl ErrorEstimate {
    /// Decodes the wire form.
    pub fn from_u16(v: u16) -> Self {
        Self {
            synchronized: v & 0x8000 != 0,
            ptp: v & 0x4000 != 0,
            scale: ((v >> 8) & 0x3F) as u8,
            multiplier: (v & 0xFF) as u8,
        }
    }

    /// The wire form.
    pub fn to_u16(self) -> u16 {
        (u16::from(self.synchronized) << 15)
            | (u16::from(self.ptp) << 14)
            | (u16::from(self.scale & 0x3F) << 8)
            | u16::from(self.multiplier)
    }

    /// From the kernel clock's state (`ntp_adjtime`): the estimated error in
    /// microseconds and whether `STA_UNSYNC` is clear. As owamp does: the
    /// error in 32.32 fixed-point seconds, shifted right until it fits below
    /// 0xFF (the shifts counted in Scale), plus one as the Multiplier, so the
    /// encoded bound is never below the kernel's.
    pub fn from_clock(esterror_us: u64, synchronized: bool) -> Self {
        // 2³² / 10⁶ units of 2⁻³² s per microsecond.
        let mut v: u128 = (u128::from(esterror_us) << 32) / 1_000_000;
        let mut scale: u8 = 0;
        while v >= 0xFF && scale < 63 {
            v >>= 1;
            scale += 1;
        }
        Self {
            synchronized,
            ptp: false,
            scale,
            multiplier: (v as u8).saturating_add(1),
        }
    }

    /// The error bound in nanoseconds (Multiplier × 2^(Scale − 32) s); `None`
    /// when the Multiplier is 0 (invalid).
    pub fn error_ns(self) -> Option<f64> {
        (self.multiplier != 0)
            .then(|| f64::from(self.multiplier) * 2f64.powi(i32::from(self.scale) - 32) * 1e9)
    }
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn be64(b: &[u8], at: usize) -> u64 {
    u64::from_be_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

/// A Session-Sender test packet (RFC 8762 §4.2.1, SSID from RFC 8972 §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SenderPacket {
    /// Sequence number, from 0 per session.
    pub seq: u32,
    /// T1 as sent (NTP or PTP form).
    pub timestamp: u64,
    /// The sender's error estimate.
    pub error: ErrorEstimate,
    /// Session id (0 = none).
    pub ssid: u16,
}

impl SenderPacket {
    /// Writes the base packet into `buf[..44]` and zeroes the rest of `buf`
    /// (padding). `buf` must be at least [`BASE_LEN`] long.
    pub fn write(&self, buf: &mut [u8]) {
        buf.fill(0);
        buf[0..4].copy_from_slice(&self.seq.to_be_bytes());
        buf[4..12].copy_from_slice(&self.timestamp.to_be_bytes());
        buf[12..14].copy_from_slice(&self.error.to_u16().to_be_bytes());
        buf[14..16].copy_from_slice(&self.ssid.to_be_bytes());
    }

    /// Reads a request; a TWAMP-Light request shorter than 44 octets reads as
    /// if zero-filled. `None` below [`MIN_REQUEST_LEN`].
    pub fn read(buf: &[u8]) -> Option<Self> {
        if buf.len() < MIN_REQUEST_LEN {
            return None;
        }
        Some(Self {
            seq: be32(buf, 0),
            timestamp: be64(buf, 4),
            error: ErrorEstimate::from_u16(be16(buf, 12)),
            ssid: if buf.len() >= 16 { be16(buf, 14) } else { 0 },
        })
    }
}

/// A Session-Reflector test packet (RFC 8762 §4.3.1, SSID from RFC 8972).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReflectorPacket {
    /// The reflector's sequence number (a copy of the sender's when stateless).
    pub seq: u32,
    /// T3, the reflector's transmit time.
    pub timestamp: u64,
    /// The reflector's error estimate (covers T2 and T3).
    pub error: ErrorEstimate,
    /// Session id copied from the request.
    pub ssid: u16,
    /// T2, the reflector's receive time.
    pub receive_timestamp: u64,
    /// The request's sequence number.
    pub sender_seq: u32,
    /// The request's T1.
    pub sender_timestamp: u64,
    /// The request's error estimate.
    pub sender_error: ErrorEstimate,
    /// TTL / hop limit the request arrived with.
    pub sender_ttl: u8,
}

impl ReflectorPacket {
    /// Writes the base reply into `buf[..44]` (the rest is left alone).
    pub fn write(&self, buf: &mut [u8]) {
        buf[..BASE_LEN].fill(0);
        buf[0..4].copy_from_slice(&self.seq.to_be_bytes());
        buf[4..12].copy_from_slice(&self.timestamp.to_be_bytes());
        buf[12..14].copy_from_slice(&self.error.to_u16().to_be_bytes());
        buf[14..16].copy_from_slice(&self.ssid.to_be_bytes());
        buf[16..24].copy_from_slice(&self.receive_timestamp.to_be_bytes());
        buf[24..28].copy_from_slice(&self.sender_seq.to_be_bytes());
        buf[28..36].copy_from_slice(&self.sender_timestamp.to_be_bytes());
        buf[36..38].copy_from_slice(&self.sender_error.to_u16().to_be_bytes());
        buf[40] = self.sender_ttl;
    }

    /// Reads a reply; `None` when shorter than the base packet.
    pub fn read(buf: &[u8]) -> Option<Self> {
        if buf.len() < BASE_LEN {
            return None;
        }
        Some(Self {
            seq: be32(buf, 0),
            timestamp: be64(buf, 4),
            error: ErrorEstimate::from_u16(be16(buf, 12)),
            ssid: be16(buf, 14),
            receive_timestamp: be64(buf, 16),
            sender_seq: be32(buf, 24),
            sender_timestamp: be64(buf, 28),
            sender_error: ErrorEstimate::from_u16(be16(buf, 36)),
            sender_ttl: buf[40],
        })
    }

    /// Overwrites T3 in an encoded reply (stamped just before sending).
    pub fn set_timestamp(buf: &mut [u8], ts: u64) {
        buf[4..12].copy_from_slice(&ts.to_be_bytes());
    }
}

/// TLV flag: the type is not recognised (RFC 8972 §4).
pub const TLV_U: u8 = 0x80;
/// TLV flag: the TLV is malformed.
pub const TLV_M: u8 = 0x40;
/// TLV flag: integrity (HMAC) check failed.
pub const TLV_I: u8 = 0x20;
/// TLV type 1, Extra Padding: the only type goodput's reflector processes
/// (its value is copied back as is).
pub const TLV_EXTRA_PADDING: u8 = 1;

/// What the reflector did with the TLVs of one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TlvOutcome {
    /// TLVs seen.
    pub tlvs: u32,
    /// TLVs echoed with U set (type not recognised).
    pub unrecognized: u32,
    /// Whether a TLV's length ran past the packet (it got M, and the rest
    /// of the packet was copied unparsed).
    pub malformed: bool,
}

/// Processes the TLV area of a reply in place (it already holds a copy of
/// the request's bytes past the base packet): recognised types get U
/// cleared, others U set, and a TLV whose length runs past the end gets M
/// set and ends the parsing (RFC 8972 §4). Zero bytes are padding, not TLVs:
/// a request padded with zeros (the common case) decodes as none. A TLV area
/// shorter than a TLV header is left as it is.
pub fn process_tlvs(area: &mut [u8]) -> TlvOutcome {
    let mut out = TlvOutcome::default();
    let mut at = 0;
    while at + 4 <= area.len() {
        let (flags, ty, len) = (area[at], area[at + 1], usize::from(be16(area, at + 2)));
        if flags == 0 && ty == 0 && len == 0 {
            // All-zero header: trailing zero padding, as STAMP senders pad.
            if area[at..].iter().all(|&b| b == 0) {
                break;
            }
        }
        out.tlvs += 1;
        if at + 4 + len > area.len() {
            area[at] = flags | TLV_M;
            out.malformed = true;
            break;
        }
        if ty == TLV_EXTRA_PADDING {
            area[at] = flags & !(TLV_U | TLV_M);
        } else {
            area[at] = (flags | TLV_U) & !TLV_M;
            out.unrecognized += 1;
        }
        at += 4 + len;
    }
    out
}

/// The reflector's view of one received request.
#[derive(Debug, Clone, Copy)]
pub struct ReflectInput {
    /// T2 (kernel receive time), Unix nanoseconds.
    pub t2_unix_ns: i64,
    /// TTL / hop limit the request arrived with (0 when unknown).
    pub ttl: u8,
    /// The reflector's sequence number for this reply (stateful), or `None`
    /// to copy the sender's (stateless).
    pub seq: Option<u32>,
    /// The reflector's clock error estimate.
    pub error: ErrorEstimate,
    /// Answer a request shorter than the base packet (a 14..43-octet
    /// TWAMP-Light request) with the full 44-octet reply, as RFC 8762 §4.6
    /// asks. Off by default: the reply is then cut to the request's own
    /// length, so an unknown source never gets more bytes than it sent.
    pub pad_short: bool,
}

/// Builds the reply to `req` in `out` and returns its length, or `None` when
/// the request is too short to answer. The length is the request's own
/// (never more bytes out than in), except that a request shorter than the
/// 44-octet base packet gets the full base packet when
/// [`ReflectInput::pad_short`] allows it; never more than `out.len()`. `out`
/// must hold at least [`BASE_LEN`] octets. T3 is left zero; stamp it with
/// [`ReflectorPacket::set_timestamp`] just before sending.
pub fn reflect(req: &[u8], input: &ReflectInput, out: &mut [u8]) -> Option<(usize, TlvOutcome)> {
    let s = SenderPacket::read(req)?;
    let len = if input.pad_short {
        req.len().max(BASE_LEN)
    } else {
        req.len()
    }
    .min(out.len());
    if len > BASE_LEN {
        out[BASE_LEN..len].copy_from_slice(&req[BASE_LEN..len]);
    }
    ReflectorPacket {
        seq: input.seq.unwrap_or(s.seq),
        timestamp: 0,
        error: input.error,
        ssid: s.ssid,
        receive_timestamp: ntp_from_unix_ns(input.t2_unix_ns),
        sender_seq: s.seq,
        sender_timestamp: s.timestamp,
        sender_error: s.error,
        sender_ttl: input.ttl,
    }
    .write(out);
    let tlv = if len > BASE_LEN {
        process_tlvs(&mut out[BASE_LEN..len])
    } else {
        TlvOutcome::default()
    };
    Some((len, tlv))
}

/// An address block for access lists (`10.0.0.0/8`, `2001:db8::/32`, or a
/// single address).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    net: std::net::IpAddr,
    prefix: u8,
}

impl Cidr {
    /// Whether `ip` lies in the block (an IPv4 address never matches an IPv6
    /// block or the other way round).
    pub fn contains(&self, ip: std::net::IpAddr) -> bool {
        use std::net::IpAddr::{V4, V6};
        let mask = |bits: u32, width: u32| -> u128 {
            if bits == 0 {
                0
            } else {
                (!0u128 << (width - bits)) & (!0u128 >> (128 - width))
            }
        };
        match (self.net, ip) {
            (V4(n), V4(a)) => {
                let m = mask(u32::from(self.prefix), 32);
                u128::from(u32::from(n)) & m == u128::from(u32::from(a)) & m
            }
            (V6(n), V6(a)) => {
                let m = mask(u32::from(self.prefix), 128);
                u128::from(n) & m == u128::from(a) & m
            }
            _ => false,
        }
    }
}

impl std::str::FromStr for Cidr {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (addr, prefix) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let net: std::net::IpAddr = addr
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse()
            .map_err(|_| format!("'{s}': expected ADDRESS or ADDRESS/PREFIX"))?;
        let width = if net.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => width,
            Some(p) => p
                .parse::<u8>()
                .ok()
                .filter(|&p| p <= width)
                .ok_or_else(|| format!("'{s}': the prefix length must be 0..={width}"))?,
        };
        Ok(Self { net, prefix })
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.net, self.prefix)
    }
}

impl serde::Serialize for Cidr {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Cidr {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl schemars::JsonSchema for Cidr {
    fn schema_name() -> String {
        "Cidr".into()
    }
    fn json_schema(_: &mut schemars::gen::SchemaGenerator) -> schemars::schema::Schema {
        schemars::schema::SchemaObject {
            instance_type: Some(schemars::schema::InstanceType::String.into()),
            metadata: Some(Box::new(schemars::schema::Metadata {
                description: Some(
                    "an address block such as \"10.0.0.0/8\" or \"2001:db8::/32\", or one address".into(),
                ),
                ..Default::default()
            })),
            ..Default::default()
        }
        .into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ntp_round_trips_to_the_nanosecond() {
        for ns in [0i64, 1, 999_999_999, 1_700_000_000_123_456_789, -5] {
            let back = unix_ns_from_ntp(ntp_from_unix_ns(ns), ns);
            assert_eq!(back, ns, "{ns}");
        }
        // The Unix epoch is NTP second 2,208,988,800 exactly.
        assert_eq!(ntp_from_unix_ns(0), 2_208_988_800u64 << 32);
        // Half a second is fraction 2³¹.
        assert_eq!(ntp_from_unix_ns(500_000_000) & 0xFFFF_FFFF, 1 << 31);
    }

    #[test]
    fn ntp_era_wrap_of_2036_is_unfolded() {
        // 2036-02-07T06:28:16Z is NTP era 1 second 0.
        let wrap_unix_s = NTP_ERA - NTP_UNIX_OFFSET;
        let after = (wrap_unix_s + 10) * 1_000_000_000;
        let ntp = ntp_from_unix_ns(after);
        assert_eq!(ntp >> 32, 10);
        assert_eq!(unix_ns_from_ntp(ntp, after - 20_000_000_000), after);
        let before = (wrap_unix_s - 10) * 1_000_000_000;
        assert_eq!(unix_ns_from_ntp(ntp_from_unix_ns(before), after), before);
    }

    #[test]
    fn ptp_timestamps_are_tai() {
        let unix_s = 1_700_000_000i64;
        let ts = (((unix_s + TAI_UTC_OFFSET_S) as u64) << 32) | 250;
        assert_eq!(
            unix_ns_from_ptp(ts, unix_s * 1_000_000_000),
            unix_s * 1_000_000_000 + 250
        );
        let err = ErrorEstimate {
            ptp: true,
            ..ErrorEstimate::default()
        };
        assert_eq!(
            decode_timestamp(ts, err, unix_s * 1_000_000_000),
            unix_s * 1_000_000_000 + 250
        );
    }

    #[test]
    fn error_estimate_bits_and_bound() {
        let e = ErrorEstimate::from_u16(0x8000 | 0x4000 | (5 << 8) | 7);
        assert!(e.synchronized && e.ptp);
        assert_eq!((e.scale, e.multiplier), (5, 7));
        assert_eq!(e.to_u16(), 0xC507);
        assert_eq!(ErrorEstimate::from_u16(0).error_ns(), None);
        // 1 ms estimated error, synchronised: bound at least 1 ms, under 2 ms.
        let k = ErrorEstimate::from_clock(1000, true);
        assert!(k.synchronized && !k.ptp);
        let ns = k.error_ns().unwrap();
        assert!((1e6..2e6).contains(&ns), "{ns}");
        // Zero error still encodes a valid (non-zero) multiplier.
        assert_eq!(ErrorEstimate::from_clock(0, false).multiplier, 1);
        // A huge error saturates the scale instead of looping.
        assert_eq!(ErrorEstimate::from_clock(u64::MAX, false).scale, 63);
    }

    /// A Session-Sender packet written out byte by byte from RFC 8762
    /// §4.2.1 and RFC 8972 §3.
    #[test]
    fn golden_sender_packet() {
        let p = SenderPacket {
            seq: 0x0102_0304,
            timestamp: 0xE1E2_E3E4_E5E6_E7E8,
            error: ErrorEstimate {
                synchronized: true,
                ptp: false,
                scale: 0x12,
                multiplier: 0x34,
            },
            ssid: 0xABCD,
        };
        let mut buf = [0xFFu8; 48];
        p.write(&mut buf);
        let mut want = [0u8; 48];
        want[..16].copy_from_slice(&[
            0x01, 0x02, 0x03, 0x04, // sequence number
            0xE1, 0xE2, 0xE3, 0xE4, 0xE5, 0xE6, 0xE7, 0xE8, // timestamp
            0x92, 0x34, // S=1 Z=0 scale 0x12, multiplier 0x34
            0xAB, 0xCD, // SSID
        ]);
        assert_eq!(buf, want);
        assert_eq!(SenderPacket::read(&buf), Some(p));
    }

    /// A Session-Reflector packet byte by byte from RFC 8762 §4.3.1.
    #[test]
    fn golden_reflector_packet() {
        let p = ReflectorPacket {
            seq: 7,
            timestamp: 0x1111_1111_2222_2222,
            error: ErrorEstimate::from_u16(0x0001),
            ssid: 0x0102,
            receive_timestamp: 0x3333_3333_4444_4444,
            sender_seq: 9,
            sender_timestamp: 0x5555_5555_6666_6666,
            sender_error: ErrorEstimate::from_u16(0x8003),
            sender_ttl: 250,
        };
        let mut buf = [0xEEu8; 44];
        p.write(&mut buf);
        #[rustfmt::skip]
        let want: [u8; 44] = [
            0, 0, 0, 7,                                     // 0: sequence number
            0x11, 0x11, 0x11, 0x11, 0x22, 0x22, 0x22, 0x22, // 4: T3
            0x00, 0x01,                                     // 12: error estimate
            0x01, 0x02,                                     // 14: SSID
            0x33, 0x33, 0x33, 0x33, 0x44, 0x44, 0x44, 0x44, // 16: T2
            0, 0, 0, 9,                                     // 24: sender sequence
            0x55, 0x55, 0x55, 0x55, 0x66, 0x66, 0x66, 0x66, // 28: T1
            0x80, 0x03,                                     // 36: sender error estimate
            0, 0,                                           // 38: MBZ
            250,                                            // 40: Ses-Sender TTL
            0, 0, 0,                                        // 41: MBZ
        ];
        assert_eq!(buf, want);
        assert_eq!(ReflectorPacket::read(&buf), Some(p));
        assert_eq!(ReflectorPacket::read(&buf[..43]), None);
    }

    fn input(seq: Option<u32>) -> ReflectInput {
        ReflectInput {
            t2_unix_ns: 1_700_000_000_000_000_000,
            ttl: 64,
            seq,
            error: ErrorEstimate::from_clock(10, false),
            pad_short: true,
        }
    }

    #[test]
    fn reflect_is_symmetric_and_copies_the_sender_fields() {
        let mut req = [0u8; 100];
        SenderPacket {
            seq: 42,
            timestamp: 0xDEAD_BEEF_0000_0001,
            error: ErrorEstimate::from_u16(0x8101),
            ssid: 77,
        }
        .write(&mut req);
        // An Extra Padding TLV filling the rest, sent with U set as senders do.
        req[44..48].copy_from_slice(&[TLV_U, TLV_EXTRA_PADDING, 0, 52]);
        req[60] = 0x5A; // its value is copied back
        let mut out = [0u8; MAX_PACKET_LEN];
        let (len, tlv) = reflect(&req, &input(None), &mut out).unwrap();
        assert_eq!(len, 100);
        assert_eq!(out[60], 0x5A);
        let r = ReflectorPacket::read(&out[..len]).unwrap();
        assert_eq!((r.seq, r.sender_seq, r.ssid, r.sender_ttl), (42, 42, 77, 64));
        assert_eq!(r.sender_timestamp, 0xDEAD_BEEF_0000_0001);
        assert_eq!(r.sender_error.to_u16(), 0x8101);
        assert_eq!(
            unix_ns_from_ntp(r.receive_timestamp, input(None).t2_unix_ns),
            1_700_000_000_000_000_000
        );
        assert_eq!((tlv.tlvs, tlv.unrecognized, tlv.malformed), (1, 0, false));
        assert_eq!(out[44], 0, "U cleared: the reflector knows Extra Padding");
        // Stateful: the reflector's own counter.
        let (_, _) = reflect(&req, &input(Some(3)), &mut out).unwrap();
        assert_eq!(ReflectorPacket::read(&out).unwrap().seq, 3);
    }

    #[test]
    fn short_requests_get_their_own_length_unless_padding_is_allowed() {
        let req = [0, 0, 0, 5, 1, 2, 3, 4, 5, 6, 7, 8, 0x80, 1];
        // Default: never more bytes out than in. The cut reply still carries
        // the reflector's sequence number and T3's place.
        let mut out = [0xFFu8; 64];
        let own = ReflectInput {
            pad_short: false,
            ..input(Some(7))
        };
        let (len, _) = reflect(&req, &own, &mut out).unwrap();
        assert_eq!(len, req.len());
        assert_eq!(&out[..4], &[0, 0, 0, 7]);
        // Allowed to pad: the full base packet, as RFC 8762 §4.6 asks.
        let mut out = [0xFFu8; 64];
        let (len, _) = reflect(&req, &input(None), &mut out).unwrap();
        assert_eq!(len, BASE_LEN);
        let r = ReflectorPacket::read(&out[..len]).unwrap();
        assert_eq!((r.sender_seq, r.ssid), (5, 0));
        assert_eq!(r.sender_timestamp, 0x0102_0304_0506_0708);
        for pad_short in [false, true] {
            let i = ReflectInput {
                pad_short,
                ..input(None)
            };
            assert!(reflect(&req[..13], &i, &mut out).is_none());
            assert!(reflect(&[], &i, &mut out).is_none());
        }
    }

    #[test]
    fn tlv_flags_follow_rfc_8972() {
        // Extra Padding (known) with U set by the sender, then type 9
        // (unknown to us) with U clear, then a TLV whose length overruns.
        let mut area = vec![
            0x80, 1, 0, 2, 0xAA, 0xBB, // extra padding, 2 bytes
            0x00, 9, 0, 1, 0xCC, // type 9, 1 byte
            0x80, 3, 0, 50, 1, 2, // type 3, claims 50 bytes, has 2
        ];
        let o = process_tlvs(&mut area);
        assert_eq!(o.tlvs, 3);
        assert_eq!(o.unrecognized, 1);
        assert!(o.malformed);
        assert_eq!(area[0], 0x00, "U cleared on a recognised type");
        assert_eq!(area[6], TLV_U, "U set on an unrecognised type");
        assert_eq!(area[11], 0x80 | TLV_M, "M set on the overrun");
        assert_eq!(&area[4..6], &[0xAA, 0xBB], "values are echoed");
        // Zero padding is not a TLV.
        let mut zeros = vec![0u8; 40];
        assert_eq!(process_tlvs(&mut zeros), TlvOutcome::default());
        assert!(zeros.iter().all(|&b| b == 0));
    }

    #[test]
    fn cidr_blocks() {
        let c: Cidr = "10.1.0.0/16".parse().unwrap();
        assert!(c.contains("10.1.200.3".parse().unwrap()));
        assert!(!c.contains("10.2.0.1".parse().unwrap()));
        assert!(!c.contains("::1".parse().unwrap()));
        let all: Cidr = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains("192.0.2.1".parse().unwrap()));
        let one: Cidr = "::1".parse().unwrap();
        assert!(one.contains("::1".parse().unwrap()) && !one.contains("::2".parse().unwrap()));
        let v6: Cidr = "2001:db8::/32".parse().unwrap();
        assert!(v6.contains("2001:db8:ffff::1".parse().unwrap()));
        assert_eq!(v6.to_string(), "2001:db8::/32");
        assert!("10.0.0.0/33".parse::<Cidr>().is_err());
        assert!("nonsense".parse::<Cidr>().is_err());
    }

    proptest::proptest! {
        /// Any datagram: the reply is symmetric (or absent below 14 bytes),
        /// carries the request's sequence, and TLV parsing stays in bounds.
        #[test]
        fn reflect_any_bytes(
            req in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..600),
            pad_short in proptest::prelude::any::<bool>(),
        ) {
            let mut out = [0u8; 1024];
            let i = ReflectInput { pad_short, ..input(Some(1)) };
            match reflect(&req, &i, &mut out) {
                None => proptest::prop_assert!(req.len() < MIN_REQUEST_LEN),
                Some((len, tlv)) => {
                    if pad_short {
                        proptest::prop_assert_eq!(len, req.len().max(BASE_LEN));
                    } else {
                        // No amplification: exactly the request's size.
                        proptest::prop_assert_eq!(len, req.len());
                    }
                    if len >= BASE_LEN {
                        let r = ReflectorPacket::read(&out[..len]).unwrap();
                        proptest::prop_assert_eq!(r.sender_seq, u32::from_be_bytes([req[0], req[1], req[2], req[3]]));
                    }
                    proptest::prop_assert!(tlv.unrecognized <= tlv.tlvs);
                }
            }
        }

        /// Any reply bytes fed to a tracker: never a panic, and a verdict
        /// that is not a first reply leaves the pending count alone.
        #[test]
        fn tracker_takes_any_reply(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 44..120)) {
            let mut t = stats::Tracker::new(1_000_000_000, 3);
            for i in 0..4 {
                t.sent(1_700_000_000_000_000_000 + i);
            }
            let r = ReflectorPacket::read(&bytes).unwrap();
            let v = t.reply(&r, 1_700_000_000_100_000_000, Some(64), ErrorEstimate::default());
            let pending = t.pending();
            match v {
                stats::Verdict::First(_) => proptest::prop_assert_eq!(pending, 3),
                _ => proptest::prop_assert_eq!(pending, 4),
            }
        }
    }

    #[test]
    fn reflect_never_panics_on_any_length() {
        let mut out = [0u8; 128];
        for n in 0..200usize {
            let req: Vec<u8> = (0..n).map(|i| (i * 37 % 251) as u8).collect();
            if let Some((len, _)) = reflect(&req, &input(None), &mut out) {
                assert_eq!(len, n.clamp(BASE_LEN, 128));
            } else {
                assert!(n < MIN_REQUEST_LEN);
            }
        }
    }
}
