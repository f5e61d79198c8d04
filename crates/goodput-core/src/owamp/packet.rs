//! OWAMP-Test and TWAMP-Test packets (RFC 4656 §4.1.2, RFC 5357 §4.2.1)
//! in the three modes.
//!
//! Open mode: the sender's header is 14 octets (sequence, timestamp, error
//! estimate), the reflector's 41. Authenticated and encrypted modes: 48 and
//! 112 octets, the fields on block boundaries, an HMAC block at 32 (sender)
//! or 96 (reflector). Authenticated mode encrypts the first block (the
//! sequence number) alone and its HMAC covers that block; encrypted mode
//! encrypts (CBC from a zero IV) and authenticates every block before the
//! HMAC. Padding follows the header, in the clear.

use super::crypto::TestKeys;
use super::Mode;

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}
fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
fn be64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_be_bytes(a)
}

/// The sender's header length in a mode.
pub fn sender_header(mode: Mode) -> usize {
    match mode {
        Mode::Open => 14,
        Mode::Authenticated | Mode::Encrypted => 48,
    }
}

/// The reflector's header length in a mode.
pub fn reflector_header(mode: Mode) -> usize {
    match mode {
        Mode::Open => 41,
        Mode::Authenticated | Mode::Encrypted => 112,
    }
}

/// How long a reflector's answer to a packet of `received` octets is: as
/// long as the packet, and at least the reflector's header (as twampd).
pub fn reflected_len(mode: Mode, received: usize) -> usize {
    received.max(reflector_header(mode))
}

/// What a sender's packet says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SenderFields {
    /// Sequence number, from 0.
    pub seq: u32,
    /// Send time (NTP format).
    pub timestamp: u64,
    /// Error estimate of the send time.
    pub error: u16,
}

/// What a reflector's packet says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReflectorFields {
    /// The reflector's own sequence number (from 0 per session).
    pub seq: u32,
    /// T3, when the reflector sent it.
    pub timestamp: u64,
    /// Error estimate of T2 and T3.
    pub error: u16,
    /// T2, when the reflector received the sender's packet.
    pub receive_timestamp: u64,
    /// The sender's sequence number.
    pub sender_seq: u32,
    /// T1, the sender's timestamp.
    pub sender_timestamp: u64,
    /// The sender's error estimate.
    pub sender_error: u16,
    /// TTL (hop limit) of the sender's packet when the reflector got it.
    pub sender_ttl: u8,
}

fn protect(mode: Mode, keys: Option<&TestKeys>, buf: &mut [u8], covered: usize, mac_at: usize) {
    let Some(k) = keys.filter(|_| mode != Mode::Open) else {
        return;
    };
    let span = if mode == Mode::Encrypted { covered } else { 16 };
    let mac = k.mac(&buf[..span]);
    k.encrypt(&mut buf[..span]);
    buf[mac_at..mac_at + 16].copy_from_slice(&mac);
}

fn unprotect(mode: Mode, keys: Option<&TestKeys>, buf: &mut [u8], covered: usize, mac_at: usize) -> bool {
    if mode == Mode::Open {
        return true;
    }
    let Some(k) = keys else {
        return false;
    };
    let span = if mode == Mode::Encrypted { covered } else { 16 };
    k.decrypt(&mut buf[..span]);
    k.mac(&buf[..span]) == buf[mac_at..mac_at + 16]
}

/// Writes a sender's packet into `buf` (its length is the packet's: header
/// plus padding, the padding left as the caller filled it). `keys` are
/// needed in the authenticated modes. Returns false when `buf` is shorter
/// than the header.
pub fn write_sender(mode: Mode, keys: Option<&TestKeys>, f: &SenderFields, buf: &mut [u8]) -> bool {
    let h = sender_header(mode);
    if buf.len() < h {
        return false;
    }
    buf[..h].fill(0);
    buf[..4].copy_from_slice(&f.seq.to_be_bytes());
    let (ts, err) = if mode == Mode::Open { (4, 12) } else { (16, 24) };
    buf[ts..ts + 8].copy_from_slice(&f.timestamp.to_be_bytes());
    buf[err..err + 2].copy_from_slice(&f.error.to_be_bytes());
    protect(mode, keys, buf, 32, 32);
    true
}

/// Reads a sender's packet; `None` when it is shorter than the header or
/// its HMAC does not match. Decrypts `buf` in place.
pub fn read_sender(mode: Mode, keys: Option<&TestKeys>, buf: &mut [u8]) -> Option<SenderFields> {
    if buf.len() < sender_header(mode) || !unprotect(mode, keys, buf, 32, 32) {
        return None;
    }
    let (ts, err) = if mode == Mode::Open { (4, 12) } else { (16, 24) };
    Some(SenderFields {
        seq: be32(buf, 0),
        timestamp: be64(buf, ts),
        error: be16(buf, err),
    })
}

struct ReflectorLayout {
    ts: usize,
    err: usize,
    recv: usize,
    sseq: usize,
    sts: usize,
    serr: usize,
    ttl: usize,
}

fn reflector_layout(mode: Mode) -> ReflectorLayout {
    match mode {
        Mode::Open => ReflectorLayout {
            ts: 4,
            err: 12,
            recv: 16,
            sseq: 24,
            sts: 28,
            serr: 36,
            ttl: 40,
        },
        Mode::Authenticated | Mode::Encrypted => ReflectorLayout {
            ts: 16,
            err: 24,
            recv: 32,
            sseq: 48,
            sts: 64,
            serr: 72,
            ttl: 80,
        },
    }
}

/// Where a reflector's transmit timestamp (T3) sits when it can be written
/// last, just before the send: in open and authenticated modes it is in the
/// clear; in encrypted mode it is encrypted with the rest (`None`), so it
/// must be in place before [`write_reflector`].
pub fn reflector_timestamp_at(mode: Mode) -> Option<usize> {
    match mode {
        Mode::Open | Mode::Authenticated => Some(reflector_layout(mode).ts),
        Mode::Encrypted => None,
    }
}

/// Writes a reflector's packet into `buf` (header plus padding). Returns
/// false when `buf` is shorter than the header.
pub fn write_reflector(mode: Mode, keys: Option<&TestKeys>, f: &ReflectorFields, buf: &mut [u8]) -> bool {
    let h = reflector_header(mode);
    if buf.len() < h {
        return false;
    }
    let l = reflector_layout(mode);
    buf[..h].fill(0);
    buf[..4].copy_from_slice(&f.seq.to_be_bytes());
    buf[l.ts..l.ts + 8].copy_from_slice(&f.timestamp.to_be_bytes());
    buf[l.err..l.err + 2].copy_from_slice(&f.error.to_be_bytes());
    buf[l.recv..l.recv + 8].copy_from_slice(&f.receive_timestamp.to_be_bytes());
    buf[l.sseq..l.sseq + 4].copy_from_slice(&f.sender_seq.to_be_bytes());
    buf[l.sts..l.sts + 8].copy_from_slice(&f.sender_timestamp.to_be_bytes());
    buf[l.serr..l.serr + 2].copy_from_slice(&f.sender_error.to_be_bytes());
    buf[l.ttl] = f.sender_ttl;
    protect(mode, keys, buf, 96, 96);
    true
}

/// Reads a reflector's packet; `None` when short or its HMAC does not
/// match. Decrypts `buf` in place.
pub fn read_reflector(mode: Mode, keys: Option<&TestKeys>, buf: &mut [u8]) -> Option<ReflectorFields> {
    if buf.len() < reflector_header(mode) || !unprotect(mode, keys, buf, 96, 96) {
        return None;
    }
    let l = reflector_layout(mode);
    Some(ReflectorFields {
        seq: be32(buf, 0),
        timestamp: be64(buf, l.ts),
        error: be16(buf, l.err),
        receive_timestamp: be64(buf, l.recv),
        sender_seq: be32(buf, l.sseq),
        sender_timestamp: be64(buf, l.sts),
        sender_error: be16(buf, l.serr),
        sender_ttl: buf[l.ttl],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::owamp::crypto::SessionKeys;

    fn keys() -> TestKeys {
        TestKeys::derive(
            &SessionKeys {
                aes: [3; 16],
                hmac: [4; 32],
            },
            &[5; 16],
        )
    }

    const F: SenderFields = SenderFields {
        seq: 42,
        timestamp: 0x0102_0304_0506_0708,
        error: 0x8001,
    };

    #[test]
    fn open_sender_packets_are_14_octets_plus_padding() {
        let mut b = [0xAAu8; 20];
        assert!(write_sender(Mode::Open, None, &F, &mut b));
        assert_eq!(&b[..4], &42u32.to_be_bytes());
        assert_eq!(&b[4..12], &F.timestamp.to_be_bytes());
        assert_eq!(&b[12..14], &[0x80, 0x01]);
        assert_eq!(&b[14..], &[0xAA; 6], "padding untouched");
        assert_eq!(read_sender(Mode::Open, None, &mut b), Some(F));
        assert!(read_sender(Mode::Open, None, &mut b[..13]).is_none());
    }

    #[test]
    fn authenticated_packets_hide_the_sequence_and_show_the_time() {
        let k = keys();
        let mut b = [0u8; 48];
        write_sender(Mode::Authenticated, Some(&k), &F, &mut b);
        assert_ne!(&b[..4], &42u32.to_be_bytes());
        assert_eq!(&b[16..24], &F.timestamp.to_be_bytes(), "second block clear");
        let mut c = b;
        assert_eq!(read_sender(Mode::Authenticated, Some(&k), &mut c), Some(F));
        let mut d = b;
        d[3] ^= 1;
        assert!(read_sender(Mode::Authenticated, Some(&k), &mut d).is_none());
    }

    #[test]
    fn encrypted_packets_hide_both_blocks_and_catch_changes() {
        let k = keys();
        let mut b = [0u8; 48];
        write_sender(Mode::Encrypted, Some(&k), &F, &mut b);
        assert_ne!(&b[16..24], &F.timestamp.to_be_bytes());
        let mut c = b;
        assert_eq!(read_sender(Mode::Encrypted, Some(&k), &mut c), Some(F));
        let mut d = b;
        d[20] ^= 1;
        assert!(read_sender(Mode::Encrypted, Some(&k), &mut d).is_none());
        let mut e = b;
        assert!(read_sender(Mode::Encrypted, None, &mut e).is_none());
    }

    #[test]
    fn reflector_packets_round_trip_in_every_mode() {
        let r = ReflectorFields {
            seq: 1,
            timestamp: 2,
            error: 3,
            receive_timestamp: 4,
            sender_seq: 5,
            sender_timestamp: 6,
            sender_error: 7,
            sender_ttl: 250,
        };
        let k = keys();
        for mode in [Mode::Open, Mode::Authenticated, Mode::Encrypted] {
            let mut b = vec![0u8; reflected_len(mode, 14)];
            assert!(write_reflector(mode, Some(&k), &r, &mut b));
            assert_eq!(read_reflector(mode, Some(&k), &mut b), Some(r), "{mode:?}");
        }
        let mut b = [0u8; 41];
        write_reflector(Mode::Open, None, &r, &mut b);
        assert_eq!(b[40], 250);
        assert_eq!(&b[24..28], &5u32.to_be_bytes());
        assert_eq!(reflected_len(Mode::Open, 14 + 27), 41);
        assert_eq!(reflected_len(Mode::Open, 100), 100);
    }
}
