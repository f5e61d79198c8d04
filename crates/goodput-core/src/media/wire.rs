//! goodput's UDP media-stream messages. Every datagram starts with the
//! magic `GPMS`, a version byte and a kind byte; all integers are
//! big-endian; every length is fixed and checked, so a decoder never reads
//! past what arrived and anything malformed is an error, not a panic.
//!
//! Handshake: Request → Challenge (a cookie; never longer than the
//! Request, so a spoofed source gets no amplification) → Request carrying
//! the cookie → Accept (or Reject) → Data. The receiver sends a Report
//! every 250 ms; a sender stops a stream whose reports stop. End marks
//! the last datagram sent.

/// First four bytes of every datagram.
pub const MAGIC: [u8; 4] = *b"GPMS";
/// Wire version.
pub const VERSION: u8 = 1;
/// Bytes before a kind's own fields: magic, version, kind.
const PREFIX: usize = 6;
/// Data datagram header: prefix, stream id (4), sequence (8), frame (4),
/// index in frame (2), datagrams in frame (2), send time ns (8).
pub const DATA_HEADER_LEN: usize = PREFIX + 4 + 8 + 4 + 2 + 2 + 8;
/// Request length (padded, so a challenge is never longer).
pub const REQUEST_LEN: usize = 64;
/// Cookie length.
pub const COOKIE_LEN: usize = 16;

/// What a client asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// The client's random token, echoed in every answer.
    pub nonce: u64,
    /// Bits per second.
    pub bits_per_second: u64,
    /// Frames per second.
    pub frame_rate: u32,
    /// Stream length, seconds.
    pub length_s: u32,
    /// Largest datagram, bytes.
    pub datagram_bytes: u32,
    /// The client sends (upload) instead of the server.
    pub upload: bool,
    /// Payloads are checked against the pattern.
    pub verify_data: bool,
    /// The receiver's play-out delay, milliseconds (for uploads, the
    /// server plays out with it).
    pub buffer_ms: u32,
    /// The cookie from a Challenge (all zero on the first Request).
    pub cookie: [u8; COOKIE_LEN],
}

/// Why a server refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RejectReason {
    /// Over one of the server's limits (sent by older servers; newer ones
    /// name the limit).
    Limits,
    /// The plan is invalid (see `MediaPlan::new`).
    BadPlan,
    /// The server is busy (too many streams).
    Busy,
    /// The bit rate is above the server's limit.
    BitRate,
    /// The stream is longer than the server's limit.
    Length,
    /// The frame rate is above the server's limit.
    FrameRate,
    /// The upload's play-out buffer is deeper than the server's limit.
    Buffer,
    /// The server's memory budget for media streams is taken.
    Memory,
    /// The client's address holds as many streams as one address may.
    ClientStreams,
    /// The client's address holds as much of the memory budget as one
    /// address may.
    ClientMemory,
    /// A code this version does not know.
    Other(u8),
}

impl RejectReason {
    fn code(self) -> u8 {
        match self {
            RejectReason::Limits => 1,
            RejectReason::BadPlan => 2,
            RejectReason::Busy => 3,
            RejectReason::BitRate => 4,
            RejectReason::Length => 5,
            RejectReason::FrameRate => 6,
            RejectReason::Buffer => 7,
            RejectReason::Memory => 8,
            RejectReason::ClientStreams => 9,
            RejectReason::ClientMemory => 10,
            RejectReason::Other(c) => c,
        }
    }
    fn from_code(c: u8) -> Self {
        match c {
            1 => RejectReason::Limits,
            2 => RejectReason::BadPlan,
            3 => RejectReason::Busy,
            4 => RejectReason::BitRate,
            5 => RejectReason::Length,
            6 => RejectReason::FrameRate,
            7 => RejectReason::Buffer,
            8 => RejectReason::Memory,
            9 => RejectReason::ClientStreams,
            10 => RejectReason::ClientMemory,
            c => RejectReason::Other(c),
        }
    }
}

/// What a client tells its user.
impl std::fmt::Display for RejectReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RejectReason::Limits => f.write_str("over its limits (stream length or bit rate)"),
            RejectReason::BadPlan => f.write_str("the stream's plan is invalid"),
            RejectReason::Busy => f.write_str("too many streams open"),
            RejectReason::BitRate => f.write_str("the bit rate is above its limit (--udp-max-bitrate)"),
            RejectReason::Length => f.write_str("the stream is longer than its limit (--udp-max-length)"),
            RejectReason::FrameRate => {
                f.write_str("the frame rate is above its limit (--udp-max-frame-rate)")
            }
            RejectReason::Buffer => f.write_str("the buffer depth is above its limit (--udp-max-buffer)"),
            RejectReason::Memory => {
                f.write_str("its memory budget for media streams is taken (--udp-max-memory)")
            }
            RejectReason::ClientStreams => {
                f.write_str("this address holds the most streams one address may (--udp-max-per-client)")
            }
            RejectReason::ClientMemory => f.write_str(
                "this address holds its whole share of the memory budget (--udp-max-client-memory)",
            ),
            RejectReason::Other(c) => write!(f, "reason code {c}"),
        }
    }
}

/// A data datagram's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataHeader {
    /// Stream id from the Accept.
    pub stream: u32,
    /// Datagram sequence, from 0, per stream.
    pub seq: u64,
    /// Frame number, from 1.
    pub frame: u32,
    /// Index of this datagram within its frame, from 0.
    pub index: u16,
    /// Datagrams in the frame.
    pub count: u16,
    /// Sender's monotonic clock at send, nanoseconds.
    pub sent_ns: u64,
}

/// A receiver's periodic report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Report {
    /// Stream id.
    pub stream: u32,
    /// Datagrams received so far (distinct sequences).
    pub received: u64,
    /// Datagrams counted lost so far.
    pub lost: u64,
    /// Highest sequence seen (u64::MAX when none yet).
    pub highest_seq: u64,
    /// Datagrams that arrived again.
    pub duplicates: u64,
    /// RFC 4737 reordered datagrams.
    pub reordered: u64,
    /// Datagrams for frames already played.
    pub late: u64,
    /// Datagrams out of the stream, the window or the plan.
    pub errors: u64,
    /// Datagrams whose payload failed the pattern.
    pub corrupt: u64,
    /// Frames played complete.
    pub completed: u32,
    /// Frames played short.
    pub dropped: u32,
    /// Frames played with a datagram twice.
    pub repeated: u32,
    /// RFC 3550 interarrival jitter, nanoseconds.
    pub jitter_ns: u64,
    /// The receiver has played the whole stream: these are its totals.
    pub last: bool,
}

/// Every message kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Message {
    /// Client → server: open a stream.
    Request(Request),
    /// Server → client: repeat the request with this cookie.
    Challenge {
        /// The Request's nonce.
        nonce: u64,
        /// The cookie.
        cookie: [u8; COOKIE_LEN],
    },
    /// Server → client: the stream is open.
    Accept {
        /// The Request's nonce.
        nonce: u64,
        /// Stream id for data and reports.
        stream: u32,
    },
    /// Server → client: refused.
    Reject {
        /// The Request's nonce.
        nonce: u64,
        /// Why.
        reason: RejectReason,
    },
    /// Either way: a data datagram (the payload follows the header).
    Data(DataHeader),
    /// Receiver → sender.
    Report(Report),
    /// Sender → receiver: no more data; `sent` datagrams in all.
    End {
        /// Stream id.
        stream: u32,
        /// Datagrams sent.
        sent: u64,
        /// Datagrams the sender's kernel refused (their sequence numbers
        /// were used, so the receiver counts them lost).
        send_errors: u64,
    },
}

/// Why a datagram did not decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Shorter than its kind needs.
    #[error("datagram too short")]
    Short,
    /// Not ours.
    #[error("bad magic")]
    Magic,
    /// Another version.
    #[error("unsupported version {0}")]
    Version(u8),
    /// Unknown kind.
    #[error("unknown message kind {0}")]
    Kind(u8),
    /// A field out of range.
    #[error("bad field")]
    Field,
}

const K_REQUEST: u8 = 1;
const K_CHALLENGE: u8 = 2;
const K_ACCEPT: u8 = 3;
const K_REJECT: u8 = 4;
const K_DATA: u8 = 5;
const K_REPORT: u8 = 6;
const K_END: u8 = 7;

fn prefix(out: &mut Vec<u8>, kind: u8) {
    out.extend_from_slice(&MAGIC);
    out.push(VERSION);
    out.push(kind);
}

impl Message {
    /// Appends the encoded message to `out` (for Data: the header only).
    pub fn encode(&self, out: &mut Vec<u8>) {
        match *self {
            Message::Request(r) => {
                let start = out.len();
                prefix(out, K_REQUEST);
                out.extend_from_slice(&r.nonce.to_be_bytes());
                out.extend_from_slice(&r.bits_per_second.to_be_bytes());
                out.extend_from_slice(&r.frame_rate.to_be_bytes());
                out.extend_from_slice(&r.length_s.to_be_bytes());
                out.extend_from_slice(&r.datagram_bytes.to_be_bytes());
                out.push(u8::from(r.upload) | (u8::from(r.verify_data) << 1));
                out.extend_from_slice(&r.buffer_ms.to_be_bytes());
                out.extend_from_slice(&r.cookie);
                out.resize(start + REQUEST_LEN, 0);
            }
            Message::Challenge { nonce, cookie } => {
                prefix(out, K_CHALLENGE);
                out.extend_from_slice(&nonce.to_be_bytes());
                out.extend_from_slice(&cookie);
            }
            Message::Accept { nonce, stream } => {
                prefix(out, K_ACCEPT);
                out.extend_from_slice(&nonce.to_be_bytes());
                out.extend_from_slice(&stream.to_be_bytes());
            }
            Message::Reject { nonce, reason } => {
                prefix(out, K_REJECT);
                out.extend_from_slice(&nonce.to_be_bytes());
                out.push(reason.code());
            }
            Message::Data(h) => {
                prefix(out, K_DATA);
                out.extend_from_slice(&h.stream.to_be_bytes());
                out.extend_from_slice(&h.seq.to_be_bytes());
                out.extend_from_slice(&h.frame.to_be_bytes());
                out.extend_from_slice(&h.index.to_be_bytes());
                out.extend_from_slice(&h.count.to_be_bytes());
                out.extend_from_slice(&h.sent_ns.to_be_bytes());
            }
            Message::Report(r) => {
                prefix(out, K_REPORT);
                out.extend_from_slice(&r.stream.to_be_bytes());
                out.extend_from_slice(&r.received.to_be_bytes());
                out.extend_from_slice(&r.lost.to_be_bytes());
                out.extend_from_slice(&r.highest_seq.to_be_bytes());
                for v in [r.duplicates, r.reordered, r.late, r.errors, r.corrupt] {
                    out.extend_from_slice(&v.to_be_bytes());
                }
                for v in [r.completed, r.dropped, r.repeated] {
                    out.extend_from_slice(&v.to_be_bytes());
                }
                out.extend_from_slice(&r.jitter_ns.to_be_bytes());
                out.push(u8::from(r.last));
            }
            Message::End {
                stream,
                sent,
                send_errors,
            } => {
                prefix(out, K_END);
                out.extend_from_slice(&stream.to_be_bytes());
                out.extend_from_slice(&sent.to_be_bytes());
                out.extend_from_slice(&send_errors.to_be_bytes());
            }
        }
    }

    /// Decodes a datagram; for Data, the payload is `&d[DATA_HEADER_LEN..]`.
    pub fn decode(d: &[u8]) -> Result<Message, DecodeError> {
        if d.len() < PREFIX {
            return Err(DecodeError::Short);
        }
        if d[..4] != MAGIC {
            return Err(DecodeError::Magic);
        }
        if d[4] != VERSION {
            return Err(DecodeError::Version(d[4]));
        }
        let mut r = Reader { d, at: PREFIX };
        let m = match d[5] {
            K_REQUEST => {
                if d.len() < REQUEST_LEN {
                    return Err(DecodeError::Short);
                }
                let nonce = r.u64()?;
                let bits_per_second = r.u64()?;
                let frame_rate = r.u32()?;
                let length_s = r.u32()?;
                let datagram_bytes = r.u32()?;
                let flags = r.u8()?;
                if flags & !0b11 != 0 {
                    return Err(DecodeError::Field);
                }
                Message::Request(Request {
                    nonce,
                    bits_per_second,
                    frame_rate,
                    length_s,
                    datagram_bytes,
                    upload: flags & 1 != 0,
                    verify_data: flags & 2 != 0,
                    buffer_ms: r.u32()?,
                    cookie: r.cookie()?,
                })
            }
            K_CHALLENGE => Message::Challenge {
                nonce: r.u64()?,
                cookie: r.cookie()?,
            },
            K_ACCEPT => Message::Accept {
                nonce: r.u64()?,
                stream: r.u32()?,
            },
            K_REJECT => Message::Reject {
                nonce: r.u64()?,
                reason: RejectReason::from_code(r.u8()?),
            },
            K_DATA => {
                let h = DataHeader {
                    stream: r.u32()?,
                    seq: r.u64()?,
                    frame: r.u32()?,
                    index: r.u16()?,
                    count: r.u16()?,
                    sent_ns: r.u64()?,
                };
                if h.count == 0 || h.index >= h.count || h.frame == 0 {
                    return Err(DecodeError::Field);
                }
                Message::Data(h)
            }
            K_REPORT => Message::Report(Report {
                stream: r.u32()?,
                received: r.u64()?,
                lost: r.u64()?,
                highest_seq: r.u64()?,
                duplicates: r.u64()?,
                reordered: r.u64()?,
                late: r.u64()?,
                errors: r.u64()?,
                corrupt: r.u64()?,
                completed: r.u32()?,
                dropped: r.u32()?,
                repeated: r.u32()?,
                jitter_ns: r.u64()?,
                last: match r.u8()? {
                    0 => false,
                    1 => true,
                    _ => return Err(DecodeError::Field),
                },
            }),
            K_END => Message::End {
                stream: r.u32()?,
                sent: r.u64()?,
                send_errors: r.u64()?,
            },
            k => return Err(DecodeError::Kind(k)),
        };
        Ok(m)
    }
}

struct Reader<'a> {
    d: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let b = self.d.get(self.at..self.at + N).ok_or(DecodeError::Short)?;
        self.at += N;
        Ok(b.try_into().expect("N bytes"))
    }
    fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take::<1>()?[0])
    }
    fn u16(&mut self) -> Result<u16, DecodeError> {
        Ok(u16::from_be_bytes(self.take()?))
    }
    fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_be_bytes(self.take()?))
    }
    fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_be_bytes(self.take()?))
    }
    fn cookie(&mut self) -> Result<[u8; COOKIE_LEN], DecodeError> {
        self.take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all() -> Vec<Message> {
        vec![
            Message::Request(Request {
                nonce: 0x0102_0304_0506_0708,
                bits_per_second: 25_000_000,
                frame_rate: 60,
                length_s: 60,
                datagram_bytes: 1400,
                upload: true,
                verify_data: true,
                buffer_ms: 1000,
                cookie: [7; COOKIE_LEN],
            }),
            Message::Challenge {
                nonce: 9,
                cookie: [0xAB; COOKIE_LEN],
            },
            Message::Accept { nonce: 9, stream: 77 },
            Message::Reject {
                nonce: 9,
                reason: RejectReason::Limits,
            },
            Message::Data(DataHeader {
                stream: 77,
                seq: u64::MAX - 1,
                frame: 3600,
                index: 37,
                count: 38,
                sent_ns: 123_456_789,
            }),
            Message::Report(Report {
                stream: 77,
                received: 1000,
                lost: 3,
                highest_seq: 1002,
                duplicates: 4,
                reordered: 5,
                late: 6,
                errors: 7,
                corrupt: 8,
                completed: 9,
                dropped: 10,
                repeated: 11,
                jitter_ns: 12,
                last: true,
            }),
            Message::End {
                stream: 77,
                sent: 5,
                send_errors: 1,
            },
        ]
    }

    #[test]
    fn every_message_round_trips() {
        for m in all() {
            let mut b = Vec::new();
            m.encode(&mut b);
            assert_eq!(Message::decode(&b), Ok(m), "{m:?}");
            // Every shorter prefix is refused, never a panic.
            for n in 0..b.len() {
                assert!(Message::decode(&b[..n]).is_err(), "{m:?} cut to {n}");
            }
        }
    }

    #[test]
    fn a_challenge_is_never_longer_than_a_request() {
        let mut req = Vec::new();
        all()[0].encode(&mut req);
        let mut ch = Vec::new();
        all()[1].encode(&mut ch);
        assert_eq!(req.len(), REQUEST_LEN);
        assert!(ch.len() <= req.len());
    }

    #[test]
    fn data_header_layout_is_fixed() {
        let mut b = Vec::new();
        Message::Data(DataHeader {
            stream: 0x0A0B_0C0D,
            seq: 1,
            frame: 2,
            index: 0,
            count: 1,
            sent_ns: 3,
        })
        .encode(&mut b);
        assert_eq!(b.len(), DATA_HEADER_LEN);
        #[rustfmt::skip]
        let want = [
            b'G', b'P', b'M', b'S', 1, 5,
            0x0A, 0x0B, 0x0C, 0x0D,
            0, 0, 0, 0, 0, 0, 0, 1,
            0, 0, 0, 2,
            0, 0,
            0, 1,
            0, 0, 0, 0, 0, 0, 0, 3,
        ];
        assert_eq!(b, want);
    }

    #[test]
    fn malformed_input_is_an_error() {
        assert_eq!(Message::decode(b"GPMX\x01\x01"), Err(DecodeError::Magic));
        assert_eq!(Message::decode(b"GPMS\x02\x01"), Err(DecodeError::Version(2)));
        assert_eq!(Message::decode(b"GPMS\x01\x63"), Err(DecodeError::Kind(0x63)));
        // Data with index ≥ count.
        let mut b = Vec::new();
        Message::Data(DataHeader {
            stream: 1,
            seq: 0,
            frame: 1,
            index: 0,
            count: 1,
            sent_ns: 0,
        })
        .encode(&mut b);
        b[22..24].copy_from_slice(&5u16.to_be_bytes()); // index 5 of 1
        assert_eq!(Message::decode(&b), Err(DecodeError::Field));
    }

    proptest::proptest! {
        #[test]
        fn any_bytes_decode_or_fail_cleanly(d in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200)) {
            let _ = Message::decode(&d);
            let mut with_magic = b"GPMS\x01".to_vec();
            with_magic.extend_from_slice(&d);
            let _ = Message::decode(&with_magic);
        }
    }
}
