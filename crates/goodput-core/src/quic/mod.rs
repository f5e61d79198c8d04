//! The QUIC performance protocol (draft-banks-quic-performance, ALPN
//! `perf`) and picoquic's extensions to it: request headers and
//! picoquic's scenario strings. No I/O: the engine moves the bytes.
//!
//! A client stream starts with the size of the response it wants (u64,
//! big-endian; all ones = unlimited, ended by the client's STOP_SENDING),
//! then any upload, then FIN; the server drains to the FIN and sends
//! exactly that many bytes and FIN. picoquic's media requests use a
//! 16-byte header whose high 32 bits are `FFFFFFFE` (stream frames) or
//! `FFFFFFFD` (DATAGRAM frames).

pub mod scenario;

/// The ALPN protocol id.
pub const ALPN: &[u8] = b"perf";
/// The response size meaning "until STOP_SENDING".
pub const UNLIMITED: u64 = u64::MAX;
/// Bytes of a plain request header.
pub const HEADER_LEN: usize = 8;
/// Bytes of a picoquic media request header.
pub const MEDIA_HEADER_LEN: usize = 16;
/// High 32 bits of a media-on-stream request.
const MEDIA_STREAM: u32 = 0xFFFF_FFFE;
/// High 32 bits of a media-as-datagrams request.
const MEDIA_DATAGRAM: u32 = 0xFFFF_FFFD;
/// Largest frame size and frame count in a media header (24 bits).
pub const MAX_U24: u32 = 0x00FF_FFFF;

/// The QUIC perf client's title in its banner: views that see it count
/// requests (streams) in the status lines, not connections.
pub const CLIENT_TITLE: &str = "goodput quic";

/// picoquic's application error codes (stream resets, STOP_SENDING and
/// connection closes).
pub mod error_code {
    /// No error.
    pub const NONE: u32 = 0;
    /// Not implemented.
    pub const NOT_IMPLEMENTED: u32 = 1;
    /// Internal error.
    pub const INTERNAL: u32 = 2;
    /// Fewer bytes than requested.
    pub const NOT_ENOUGH_DATA: u32 = 3;
    /// More bytes than requested.
    pub const TOO_MUCH_DATA: u32 = 4;
    /// A media frame was later than the reset delay.
    pub const DELAY_TOO_HIGH: u32 = 5;
    /// Stopped by the peer.
    pub const STOPPED: u32 = 6;
}

/// picoquic media parameters carried in a 16-byte header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MediaRequest {
    /// Frames as QUIC DATAGRAM frames (else on the stream's return side).
    pub datagram: bool,
    /// Bytes per frame (24 bits on the wire for the first frame).
    pub frame_size: u32,
    /// Priority 0-255.
    pub priority: u8,
    /// Frames per second.
    pub frequency: u8,
    /// Frames to send (24 bits).
    pub frames: u32,
    /// Size of the first frame (24 bits).
    pub first_frame_size: u32,
}

/// What a client stream asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    /// A response of this many bytes ([`UNLIMITED`]: until STOP_SENDING).
    Bytes(u64),
    /// picoquic media frames.
    Media(MediaRequest),
}

/// Why a request header is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    /// The stream ended inside the header.
    #[error("the stream ended after {0} of the header's bytes")]
    Short(usize),
    /// A media header field out of range.
    #[error("media request with {0}")]
    Field(&'static str),
}

impl Request {
    /// Appends the header to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        match *self {
            Request::Bytes(n) => out.extend_from_slice(&n.to_be_bytes()),
            Request::Media(m) => {
                let hi = if m.datagram { MEDIA_DATAGRAM } else { MEDIA_STREAM };
                out.extend_from_slice(&hi.to_be_bytes());
                out.extend_from_slice(&m.frame_size.to_be_bytes());
                out.push(m.priority);
                out.push(m.frequency);
                out.extend_from_slice(&m.frames.min(MAX_U24).to_be_bytes()[1..]);
                out.extend_from_slice(&m.first_frame_size.min(MAX_U24).to_be_bytes()[1..]);
            }
        }
    }

    /// The header's length, known from its first 8 bytes.
    pub fn header_len(first: &[u8; HEADER_LEN]) -> usize {
        let hi = u32::from_be_bytes([first[0], first[1], first[2], first[3]]);
        if hi == MEDIA_STREAM || hi == MEDIA_DATAGRAM {
            MEDIA_HEADER_LEN
        } else {
            HEADER_LEN
        }
    }

    /// Decodes a complete header (8 or 16 bytes as [`Request::header_len`]
    /// says); `b` may be longer.
    pub fn decode(b: &[u8]) -> Result<Request, HeaderError> {
        let first: &[u8; HEADER_LEN] = b
            .get(..HEADER_LEN)
            .and_then(|s| s.try_into().ok())
            .ok_or(HeaderError::Short(b.len()))?;
        if Self::header_len(first) == HEADER_LEN {
            return Ok(Request::Bytes(u64::from_be_bytes(*first)));
        }
        let h = b.get(..MEDIA_HEADER_LEN).ok_or(HeaderError::Short(b.len()))?;
        let u24 = |i: usize| u32::from_be_bytes([0, h[i], h[i + 1], h[i + 2]]);
        let m = MediaRequest {
            datagram: u32::from_be_bytes([h[0], h[1], h[2], h[3]]) == MEDIA_DATAGRAM,
            frame_size: u32::from_be_bytes([h[4], h[5], h[6], h[7]]),
            priority: h[8],
            frequency: h[9],
            frames: u24(10),
            first_frame_size: u24(13),
        };
        if m.frequency == 0 {
            return Err(HeaderError::Field("frequency 0"));
        }
        if m.frame_size > MAX_U24 {
            return Err(HeaderError::Field("a frame size above 16 MiB"));
        }
        Ok(Request::Media(m))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_big_endian_u64() {
        let mut b = Vec::new();
        Request::Bytes(5_000_000).encode(&mut b);
        assert_eq!(b, [0, 0, 0, 0, 0, 0x4C, 0x4B, 0x40]);
        assert_eq!(Request::decode(&b), Ok(Request::Bytes(5_000_000)));
        let mut b = Vec::new();
        Request::Bytes(UNLIMITED).encode(&mut b);
        assert_eq!(b, [0xFF; 8]);
        // All ones is a size, not media.
        assert_eq!(Request::header_len(&[0xFF; 8]), 8);
        assert_eq!(Request::decode(&b), Ok(Request::Bytes(UNLIMITED)));
    }

    #[test]
    fn media_header_layout() {
        let m = MediaRequest {
            datagram: false,
            frame_size: 2000,
            priority: 4,
            frequency: 30,
            frames: 150,
            first_frame_size: 20_000,
        };
        let mut b = Vec::new();
        Request::Media(m).encode(&mut b);
        #[rustfmt::skip]
        assert_eq!(b, [
            0xFF, 0xFF, 0xFF, 0xFE,
            0, 0, 0x07, 0xD0,
            4, 30,
            0, 0, 150,
            0, 0x4E, 0x20,
        ]);
        assert_eq!(Request::header_len(b[..8].try_into().unwrap()), 16);
        assert_eq!(Request::decode(&b), Ok(Request::Media(m)));
        let d = MediaRequest { datagram: true, ..m };
        let mut b = Vec::new();
        Request::Media(d).encode(&mut b);
        assert_eq!(&b[..4], &[0xFF, 0xFF, 0xFF, 0xFD]);
        assert_eq!(Request::decode(&b), Ok(Request::Media(d)));
        // A media header cut short is an error, never a panic.
        assert_eq!(Request::decode(&b[..12]), Err(HeaderError::Short(12)));
    }

    proptest::proptest! {
        #[test]
        fn any_header_decodes_or_fails_cleanly(b in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..40)) {
            if let Ok(r) = Request::decode(&b) {
                let mut again = Vec::new();
                r.encode(&mut again);
                proptest::prop_assert_eq!(&again[..], &b[..again.len()]);
            }
        }
    }
}
