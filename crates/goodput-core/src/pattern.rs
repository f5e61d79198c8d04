//! The data pattern every sender transmits and every receiver verifies.
//!
//! The repeating unit is ctsTraffic's: 65,536 bytes holding the 16-bit
//! values 0..32767 little-endian, so byte `i` of the unit is the low byte of
//! `i/2` for even `i` and the high byte for odd `i`. A direction's byte stream
//! is the unit repeated from offset 0, whatever the I/O sizes, so a sender
//! sends slices of one shared buffer and a receiver compares each chunk with
//! the buffer at `(bytes received so far) mod 65536` — a `memcmp`, no
//! per-I/O work beyond it.

/// Length of the repeating pattern unit in bytes.
pub const UNIT_LEN: usize = 65536;

/// The byte at position `offset` of a direction's pattern stream.
pub fn byte_at(offset: u64) -> u8 {
    let i = (offset % UNIT_LEN as u64) as usize;
    let value = (i / 2) as u16;
    if i.is_multiple_of(2) {
        value as u8
    } else {
        (value >> 8) as u8
    }
}

/// One immutable pattern buffer: the unit extended by the largest I/O size, so
/// any I/O of up to that size starting at any offset is one contiguous slice.
#[derive(Debug)]
pub struct Pattern {
    bytes: Box<[u8]>,
    max_io: usize,
}

impl Pattern {
    /// A buffer serving I/Os of up to `max_io` bytes.
    pub fn new(max_io: usize) -> Self {
        let len = UNIT_LEN + max_io;
        let bytes: Box<[u8]> = (0..len as u64).map(byte_at).collect();
        Self { bytes, max_io }
    }

    /// The largest I/O this buffer serves as one slice.
    pub fn max_io(&self) -> usize {
        self.max_io
    }

    /// The pattern bytes for stream offset `offset`, at most `len` long (and at
    /// most [`Pattern::max_io`]).
    pub fn slice(&self, offset: u64, len: usize) -> &[u8] {
        let start = (offset % UNIT_LEN as u64) as usize;
        &self.bytes[start..start + len.min(self.max_io)]
    }
}

/// Where a received chunk first differs from the pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mismatch {
    /// Offset of the first wrong byte within the direction's stream.
    pub offset: u64,
    /// The byte the pattern has there.
    pub expected: u8,
    /// The byte that arrived.
    pub actual: u8,
}

/// Checks one direction's received bytes against the pattern, in order.
#[derive(Debug, Clone, Default)]
pub struct PatternVerifier {
    received: u64,
}

impl PatternVerifier {
    /// A verifier at the start of a stream.
    pub fn new() -> Self {
        Self::default()
    }

    /// A verifier that expects the stream's byte at `offset` next (for a
    /// caller that counts the bytes itself and keeps no verifier between
    /// chunks).
    pub fn at(offset: u64) -> Self {
        Self { received: offset }
    }

    /// Bytes checked so far.
    pub fn received(&self) -> u64 {
        self.received
    }

    /// Checks `chunk`, the next bytes of the stream, and advances. Returns the
    /// first mismatch, if any. Chunks of any length are accepted; long chunks
    /// are compared unit-aligned piece by piece against `pattern`.
    pub fn check(&mut self, pattern: &Pattern, chunk: &[u8]) -> Result<(), Mismatch> {
        let mut done = 0usize;
        while done < chunk.len() {
            let offset = self.received + done as u64;
            let n = (chunk.len() - done).min(pattern.max_io().max(1)).min(UNIT_LEN);
            let expected = pattern.slice(offset, n);
            let got = &chunk[done..done + expected.len()];
            if got != expected {
                let i = got
                    .iter()
                    .zip(expected)
                    .position(|(a, b)| a != b)
                    .expect("slices differ");
                self.received += (done + i) as u64;
                return Err(Mismatch {
                    offset: offset + i as u64,
                    expected: expected[i],
                    actual: got[i],
                });
            }
            done += expected.len();
        }
        self.received += chunk.len() as u64;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unit_is_little_endian_u16_counter() {
        assert_eq!(byte_at(0), 0);
        assert_eq!(byte_at(1), 0);
        assert_eq!(byte_at(2), 1);
        assert_eq!(byte_at(3), 0);
        assert_eq!(byte_at(512), 0);
        assert_eq!(byte_at(513), 1);
        assert_eq!(byte_at(65534), 0xff);
        assert_eq!(byte_at(65535), 0x7f);
        assert_eq!(byte_at(65536), 0);
        assert_eq!(byte_at(65536 + 2), 1);
    }

    #[test]
    fn slices_wrap_at_unit_boundary() {
        let p = Pattern::new(1024);
        let s = p.slice(65536 * 3 + 65530, 12);
        let want: Vec<u8> = (0..12).map(|i| byte_at(65530 + i)).collect();
        assert_eq!(s, &want[..]);
    }

    #[test]
    fn verifier_accepts_pattern_in_odd_chunks() {
        let p = Pattern::new(1000);
        let stream: Vec<u8> = (0..300_000u64).map(byte_at).collect();
        let mut v = PatternVerifier::new();
        for chunk in stream.chunks(777) {
            v.check(&p, chunk).unwrap();
        }
        assert_eq!(v.received(), 300_000);
    }

    #[test]
    fn verifier_reports_first_flipped_byte() {
        let p = Pattern::new(4096);
        let mut stream: Vec<u8> = (0..200_000u64).map(byte_at).collect();
        stream[131_077] ^= 0x40;
        stream[150_000] ^= 0x01;
        let mut v = PatternVerifier::new();
        let mut err = None;
        for chunk in stream.chunks(100_000) {
            if let Err(e) = v.check(&p, chunk) {
                err = Some(e);
                break;
            }
        }
        let e = err.expect("mismatch found");
        assert_eq!(e.offset, 131_077);
        assert_eq!(e.expected, byte_at(131_077));
        assert_eq!(e.actual, byte_at(131_077) ^ 0x40);
    }
}
