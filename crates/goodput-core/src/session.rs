//! goodput's TCP session protocol: the in-band negotiation that spares users
//! ctsTraffic's "must match on both sides" flags.
//!
//! ```text
//! client                                      server
//!   | -- Hello (pattern, transfer, ...) -------> |
//!   | <-- Accept (connection id) or Reject ----- |
//!   |  ===== raw pattern bytes as planned =====  |
//!   | <-- Completion (server's counts, verdict)  |
//!   | -- FIN (graceful) or RST (rude) ---------> |   the server never closes first
//! ```
//!
//! A timed test (a Timed Hello, kind 5, with a duration) has no byte plan:
//! each sender sends for the duration on its own clock, and each direction
//! ends with the sender's FIN, so the receiver counts exactly what arrived.
//!
//! ```text
//! client                                      server
//!   | -- Timed Hello (pattern, duration) ------> |
//!   | <-- Accept ------------------------------- |
//!   |  == client's data for the duration, FIN => |  (none in pull: FIN at once)
//!   |  <= server's data for the duration ======  |  (none in push)
//!   |     server reads the client's data to FIN  |
//!   | <-- Timed Completion, FIN ---------------- |  the server's trailer
//! ```
//!
//! The client reads the server's direction to its FIN: the last
//! [`TIMED_COMPLETION_FRAME`] bytes are the server's Timed Completion (kind
//! 6: its counts, its receive time and what it received inside the
//! warm-up), everything before them is data. The client has closed its
//! side first, so the client, not the server, keeps the TIME-WAIT.
//!
//! Every message is a frame: the magic `GDPT`, a version byte, a kind byte,
//! a big-endian `u16` body length, then the body. Integers are big-endian.
//! Bodies have fixed sizes in version 1 (except Reject's bounded text), so a
//! decoder never reads past [`MAX_BODY`] and never allocates on its say-so.

use crate::plan::{Direction, TcpPattern, TransferPlan};

/// Frame magic.
pub const MAGIC: &[u8; 4] = b"GDPT";
/// Protocol version this code speaks.
pub const VERSION: u8 = 1;
/// Frame header length.
pub const HEADER_LEN: usize = 8;
/// Largest body any message may have.
pub const MAX_BODY: usize = 1024;
/// Longest reason text in a Reject.
pub const MAX_REASON: usize = 512;

const KIND_HELLO: u8 = 1;
const KIND_ACCEPT: u8 = 2;
const KIND_REJECT: u8 = 3;
const KIND_COMPLETION: u8 = 4;
const KIND_TIMED_HELLO: u8 = 5;
const KIND_TIMED_COMPLETION: u8 = 6;

const HELLO_LEN: usize = 64;
const ACCEPT_LEN: usize = 16;
const COMPLETION_LEN: usize = 36;
const TIMED_HELLO_LEN: usize = HELLO_LEN + 8;
const TIMED_COMPLETION_LEN: usize = COMPLETION_LEN + 16;

/// Bytes of the server's Timed Completion frame, which ends the server's
/// direction of a timed test.
pub const TIMED_COMPLETION_FRAME: usize = HEADER_LEN + TIMED_COMPLETION_LEN;

/// Whether received bytes are compared with the pattern.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum VerifyMode {
    /// Byte counts and connection integrity only.
    Connection,
    /// Every received byte compared with the pattern.
    Data,
}

/// The client's request: everything the server needs to play its part.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hello {
    /// Data-flow pattern.
    pub pattern: TcpPattern,
    /// Verification the server applies to what it receives.
    pub verify: VerifyMode,
    /// Pattern bytes for the whole connection (meaning per pattern as in
    /// [`TransferPlan::new`]).
    pub transfer: u64,
    /// Push-pull client→server segment.
    pub push_segment: u64,
    /// Push-pull server→client segment.
    pub pull_segment: u64,
    /// Bytes per server send and receive call.
    pub server_buffer: u32,
    /// Server SO_SNDBUF (0 = system default).
    pub server_send_buffer: u32,
    /// Server SO_RCVBUF (0 = system default).
    pub server_recv_buffer: u32,
    /// Server send rate limit in bytes/s (0 = unlimited).
    pub server_rate: u64,
    /// Rate-limit quantum in milliseconds.
    pub rate_period_ms: u32,
    /// Burst size in sends (0 = no bursts).
    pub burst_count: u32,
    /// Pause between bursts in milliseconds.
    pub burst_delay_ms: u32,
    /// Timed tests: how long each end sends, milliseconds (0: a byte
    /// plan of `transfer` bytes).
    pub duration_ms: u32,
    /// Timed tests: the warm-up at the start of the data phase that each
    /// receiver reports apart, milliseconds.
    pub omit_ms: u32,
}

impl Hello {
    /// Whether this is a timed test (ended by time, not by a byte count).
    pub fn is_timed(&self) -> bool {
        self.duration_ms > 0
    }

    /// The byte plan both ends follow (a timed test's: unbounded in the
    /// directions that send).
    pub fn plan(&self) -> TransferPlan {
        match self.is_timed() {
            true => TransferPlan::timed(self.pattern),
            false => TransferPlan::new(self.pattern, self.transfer, self.push_segment, self.pull_segment),
        }
    }

    /// Checks every field against what a server allows, and returns the
    /// plan it would serve. Every number here came from the peer: nothing
    /// is used before it is bounded, and the plan's arithmetic cannot wrap
    /// or divide by zero for any value that passes.
    pub fn check(&self, limits: &HelloLimits) -> Result<TransferPlan, HelloRefusal> {
        if self.transfer > limits.max_transfer {
            return Err(HelloRefusal::Transfer {
                asked: self.transfer,
                limit: limits.max_transfer,
            });
        }
        if self.server_buffer == 0 || u64::from(self.server_buffer) > limits.max_buffer {
            return Err(HelloRefusal::Buffer {
                asked: self.server_buffer,
                limit: limits.max_buffer,
            });
        }
        if self.pattern == TcpPattern::PushPull && (self.push_segment == 0 || self.pull_segment == 0) {
            return Err(HelloRefusal::EmptySegment);
        }
        if self.server_rate > 0 {
            if !(1..=MAX_PERIOD_MS).contains(&self.rate_period_ms) {
                return Err(HelloRefusal::RatePeriod(self.rate_period_ms));
            }
            // The same rule the client's flags follow: a quantum must
            // release at least one byte, or the limit would mean nothing
            // (and the pacer would have to fall back to unlimited).
            let per_period = u128::from(self.server_rate) * u128::from(self.rate_period_ms) / 1000;
            if per_period == 0 {
                return Err(HelloRefusal::RateBelowOneByte {
                    rate: self.server_rate,
                    period_ms: self.rate_period_ms,
                });
            }
        }
        if self.burst_count > 0 && self.burst_delay_ms > MAX_PERIOD_MS {
            return Err(HelloRefusal::BurstDelay(self.burst_delay_ms));
        }
        if self.is_timed() {
            if u64::from(self.duration_ms) > limits.max_duration_ms {
                return Err(HelloRefusal::Duration {
                    asked_ms: self.duration_ms,
                    limit_ms: limits.max_duration_ms,
                });
            }
            if self.pattern == TcpPattern::PushPull {
                return Err(HelloRefusal::TimedPushPull);
            }
            if self.omit_ms >= self.duration_ms {
                return Err(HelloRefusal::Omit {
                    omit_ms: self.omit_ms,
                    duration_ms: self.duration_ms,
                });
            }
        }
        Ok(self.plan())
    }
}

/// Longest rate-limit quantum or pause between bursts a hello may ask for,
/// milliseconds. Longer ones would let a connection sit silent past any
/// idle watchdog while holding its place.
pub const MAX_PERIOD_MS: u32 = 60_000;

/// What a server lets one connection ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HelloLimits {
    /// Largest transfer, bytes.
    pub max_transfer: u64,
    /// Largest send/receive size, bytes.
    pub max_buffer: u64,
    /// Longest timed test, milliseconds.
    pub max_duration_ms: u64,
}

/// Why a hello is outside what the server allows; the text is the reason
/// sent back in the Reject.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HelloRefusal {
    /// The transfer is above the server's limit.
    #[error("transfer of {asked} bytes is above the server's limit of {limit} bytes")]
    Transfer {
        /// Bytes asked.
        asked: u64,
        /// The server's limit.
        limit: u64,
    },
    /// The send/receive size is zero or above the server's limit.
    #[error("buffer of {asked} bytes is outside the server's limits of 1 to {limit} bytes")]
    Buffer {
        /// Bytes asked.
        asked: u32,
        /// The server's limit.
        limit: u64,
    },
    /// A push-pull segment of zero bytes.
    #[error("push-pull segments must be at least one byte")]
    EmptySegment,
    /// A rate-limit quantum of zero or above [`MAX_PERIOD_MS`].
    #[error("rate-limit period of {0} ms is outside 1 to 60000 ms")]
    RatePeriod(u32),
    /// A rate that releases less than one byte per quantum.
    #[error("rate limit of {rate} B/s is below one byte per {period_ms} ms period")]
    RateBelowOneByte {
        /// Bytes per second asked.
        rate: u64,
        /// Quantum, milliseconds.
        period_ms: u32,
    },
    /// A pause between bursts above [`MAX_PERIOD_MS`].
    #[error("pause between bursts of {0} ms is above 60000 ms")]
    BurstDelay(u32),
    /// A timed test longer than the server allows.
    #[error("duration of {asked_ms} ms is above the server's limit of {limit_ms} ms")]
    Duration {
        /// Milliseconds asked.
        asked_ms: u32,
        /// The server's limit.
        limit_ms: u64,
    },
    /// Push-pull moves bytes in segments: it has no timed form.
    #[error("push-pull is byte-based and cannot be timed")]
    TimedPushPull,
    /// A warm-up as long as the test.
    #[error("warm-up of {omit_ms} ms is not shorter than the duration of {duration_ms} ms")]
    Omit {
        /// Warm-up, milliseconds.
        omit_ms: u32,
        /// Duration, milliseconds.
        duration_ms: u32,
    },
}

/// Why the server refused a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RejectCode {
    /// The client speaks a version the server does not.
    UnsupportedVersion,
    /// The hello could not be decoded.
    Malformed,
    /// A parameter is outside what the server allows.
    OverLimit,
    /// Too many connections from this client or in total.
    TooManyConnections,
    /// The server is shutting down.
    ShuttingDown,
    /// The hello did not arrive whole within the server's deadline.
    HelloTimeout,
    /// A code this version does not know.
    Other,
}

impl RejectCode {
    fn code(self) -> u16 {
        match self {
            RejectCode::UnsupportedVersion => 1,
            RejectCode::Malformed => 2,
            RejectCode::OverLimit => 3,
            RejectCode::TooManyConnections => 4,
            RejectCode::ShuttingDown => 5,
            RejectCode::HelloTimeout => 6,
            RejectCode::Other => 0xffff,
        }
    }
    fn from_code(c: u16) -> Self {
        match c {
            1 => RejectCode::UnsupportedVersion,
            2 => RejectCode::Malformed,
            3 => RejectCode::OverLimit,
            4 => RejectCode::TooManyConnections,
            5 => RejectCode::ShuttingDown,
            6 => RejectCode::HelloTimeout,
            _ => RejectCode::Other,
        }
    }
}

impl std::fmt::Display for RejectCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RejectCode::UnsupportedVersion => "unsupported version",
            RejectCode::Malformed => "malformed hello",
            RejectCode::OverLimit => "over a limit",
            RejectCode::TooManyConnections => "too many connections",
            RejectCode::ShuttingDown => "shutting down",
            RejectCode::HelloTimeout => "hello too slow",
            RejectCode::Other => "other reason",
        })
    }
}

/// How one end judged the pattern exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Every byte moved (and matched, when verifying).
    Success,
    /// A received byte differed from the pattern.
    DataMismatch {
        /// Direction of the stream the byte was in.
        direction: Direction,
        /// Offset of the byte within that stream.
        offset: u64,
        /// Pattern byte.
        expected: u8,
        /// Received byte.
        actual: u8,
    },
    /// The peer stopped before sending everything.
    NotAllData,
    /// The peer sent more than agreed.
    TooMuchData,
    /// The server gave up for a reason of its own (shutdown, timeout).
    Aborted,
}

/// The server's closing record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    /// Pattern bytes the server sent.
    pub sent: u64,
    /// Pattern bytes the server received.
    pub received: u64,
    /// Nanoseconds from the server's accept of the hello to its data end.
    pub elapsed_ns: u64,
    /// The server's verdict.
    pub verdict: Verdict,
    /// Timed tests only: what the server received inside the warm-up.
    pub timed: Option<WarmUp>,
}

/// What a receiver of a timed test counted inside its warm-up: the bytes
/// it had received at the first read past the warm-up's end, and when that
/// was (nanoseconds from the start of its data phase).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WarmUp {
    /// Bytes received by then.
    pub bytes: u64,
    /// When, nanoseconds into the data phase (0: no warm-up asked).
    pub at_ns: u64,
}

/// A session message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// Client → server request.
    Hello(Hello),
    /// Server → client acceptance with the connection id (a UUID's bytes).
    Accept {
        /// Shared id both ends log.
        connection_id: [u8; 16],
    },
    /// Server → client refusal.
    Reject {
        /// Machine-readable reason.
        code: RejectCode,
        /// Text for the user.
        reason: String,
    },
    /// Server → client closing record.
    Completion(Completion),
}

/// A frame that cannot be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// The bytes do not start with the magic: not a goodput peer.
    #[error("not a goodput session message (bad magic {0:02x?})")]
    BadMagic([u8; 4]),
    /// A version this code does not speak.
    #[error("unsupported session protocol version {0} (this goodput speaks version {VERSION})")]
    UnsupportedVersion(u8),
    /// A kind of message this version does not define.
    #[error("unknown session message kind {0}")]
    UnknownKind(u8),
    /// The body length is wrong for the kind, or above [`MAX_BODY`].
    #[error("session message kind {kind} has invalid body length {len}")]
    BadLength {
        /// Message kind.
        kind: u8,
        /// Declared length.
        len: usize,
    },
    /// A field holds a value the protocol does not allow.
    #[error("invalid session field {0}")]
    BadField(&'static str),
}

struct Reader<'a> {
    b: &'a [u8],
}

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> [u8; N] {
        let (h, t) = self.b.split_at(N);
        self.b = t;
        h.try_into().expect("length checked by caller")
    }
    fn u8(&mut self) -> u8 {
        self.take::<1>()[0]
    }
    fn u16(&mut self) -> u16 {
        u16::from_be_bytes(self.take())
    }
    fn u32(&mut self) -> u32 {
        u32::from_be_bytes(self.take())
    }
    fn u64(&mut self) -> u64 {
        u64::from_be_bytes(self.take())
    }
}

fn direction_code(d: Direction) -> u8 {
    match d {
        Direction::ClientToServer => 0,
        Direction::ServerToClient => 1,
    }
}

impl Message {
    /// The message's name, for errors about an unexpected one.
    pub fn name(&self) -> &'static str {
        match self {
            Message::Hello(_) => "Hello",
            Message::Accept { .. } => "Accept",
            Message::Reject { .. } => "Reject",
            Message::Completion(_) => "Completion",
        }
    }

    fn kind(&self) -> u8 {
        match self {
            Message::Hello(h) if h.is_timed() => KIND_TIMED_HELLO,
            Message::Hello(_) => KIND_HELLO,
            Message::Accept { .. } => KIND_ACCEPT,
            Message::Reject { .. } => KIND_REJECT,
            Message::Completion(c) if c.timed.is_some() => KIND_TIMED_COMPLETION,
            Message::Completion(_) => KIND_COMPLETION,
        }
    }

    /// Appends the encoded frame to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.extend_from_slice(MAGIC);
        out.push(VERSION);
        out.push(self.kind());
        out.extend_from_slice(&[0, 0]);
        match self {
            Message::Hello(h) => {
                out.push(h.pattern.code());
                out.push(match h.verify {
                    VerifyMode::Connection => 0,
                    VerifyMode::Data => 1,
                });
                out.extend_from_slice(&[0, 0]);
                out.extend_from_slice(&h.transfer.to_be_bytes());
                out.extend_from_slice(&h.push_segment.to_be_bytes());
                out.extend_from_slice(&h.pull_segment.to_be_bytes());
                out.extend_from_slice(&h.server_rate.to_be_bytes());
                out.extend_from_slice(&h.server_buffer.to_be_bytes());
                out.extend_from_slice(&h.server_send_buffer.to_be_bytes());
                out.extend_from_slice(&h.server_recv_buffer.to_be_bytes());
                out.extend_from_slice(&h.rate_period_ms.to_be_bytes());
                out.extend_from_slice(&h.burst_count.to_be_bytes());
                out.extend_from_slice(&h.burst_delay_ms.to_be_bytes());
                out.extend_from_slice(&[0u8; 4]);
                if h.is_timed() {
                    out.extend_from_slice(&h.duration_ms.to_be_bytes());
                    out.extend_from_slice(&h.omit_ms.to_be_bytes());
                }
            }
            Message::Accept { connection_id } => out.extend_from_slice(connection_id),
            Message::Reject { code, reason } => {
                let mut text = reason.as_bytes();
                if text.len() > MAX_REASON {
                    let mut cut = MAX_REASON;
                    while !reason.is_char_boundary(cut) {
                        cut -= 1;
                    }
                    text = &text[..cut];
                }
                out.extend_from_slice(&code.code().to_be_bytes());
                out.extend_from_slice(&(text.len() as u16).to_be_bytes());
                out.extend_from_slice(text);
            }
            Message::Completion(c) => {
                out.extend_from_slice(&c.sent.to_be_bytes());
                out.extend_from_slice(&c.received.to_be_bytes());
                out.extend_from_slice(&c.elapsed_ns.to_be_bytes());
                let (status, dir, offset, expected, actual) = match c.verdict {
                    Verdict::Success => (0u8, 0u8, 0u64, 0u8, 0u8),
                    Verdict::DataMismatch {
                        direction,
                        offset,
                        expected,
                        actual,
                    } => (1, direction_code(direction), offset, expected, actual),
                    Verdict::NotAllData => (2, 0, 0, 0, 0),
                    Verdict::TooMuchData => (3, 0, 0, 0, 0),
                    Verdict::Aborted => (4, 0, 0, 0, 0),
                };
                out.extend_from_slice(&[status, dir, expected, actual]);
                out.extend_from_slice(&offset.to_be_bytes());
                if let Some(w) = c.timed {
                    out.extend_from_slice(&w.bytes.to_be_bytes());
                    out.extend_from_slice(&w.at_ns.to_be_bytes());
                }
            }
        }
        let body = (out.len() - start - HEADER_LEN) as u16;
        out[start + 6..start + 8].copy_from_slice(&body.to_be_bytes());
    }

    /// Decodes one frame from the start of `buf`. `Ok(None)` means more bytes
    /// are needed; `Ok(Some((msg, n)))` consumed `n` bytes.
    pub fn decode(buf: &[u8]) -> Result<Option<(Message, usize)>, WireError> {
        if buf.len() < 4 {
            if !MAGIC.starts_with(buf) {
                let mut m = [0u8; 4];
                m[..buf.len()].copy_from_slice(buf);
                return Err(WireError::BadMagic(m));
            }
            return Ok(None);
        }
        if &buf[..4] != MAGIC {
            return Err(WireError::BadMagic(buf[..4].try_into().expect("4 bytes")));
        }
        if buf.len() < HEADER_LEN {
            return Ok(None);
        }
        if buf[4] != VERSION {
            return Err(WireError::UnsupportedVersion(buf[4]));
        }
        let kind = buf[5];
        let len = usize::from(u16::from_be_bytes([buf[6], buf[7]]));
        let expected = match kind {
            KIND_HELLO => Some(HELLO_LEN),
            KIND_TIMED_HELLO => Some(TIMED_HELLO_LEN),
            KIND_ACCEPT => Some(ACCEPT_LEN),
            KIND_COMPLETION => Some(COMPLETION_LEN),
            KIND_TIMED_COMPLETION => Some(TIMED_COMPLETION_LEN),
            KIND_REJECT => None,
            k => return Err(WireError::UnknownKind(k)),
        };
        let bad_len = matches!(expected, Some(e) if e != len)
            || (kind == KIND_REJECT && !(4..=4 + MAX_REASON).contains(&len))
            || len > MAX_BODY;
        if bad_len {
            return Err(WireError::BadLength { kind, len });
        }
        if buf.len() < HEADER_LEN + len {
            return Ok(None);
        }
        let mut r = Reader {
            b: &buf[HEADER_LEN..HEADER_LEN + len],
        };
        let msg = match kind {
            KIND_HELLO | KIND_TIMED_HELLO => {
                let pattern = TcpPattern::from_code(r.u8()).ok_or(WireError::BadField("pattern"))?;
                let verify = match r.u8() {
                    0 => VerifyMode::Connection,
                    1 => VerifyMode::Data,
                    _ => return Err(WireError::BadField("verify")),
                };
                let _reserved: [u8; 2] = r.take();
                let h = Hello {
                    pattern,
                    verify,
                    transfer: r.u64(),
                    push_segment: r.u64(),
                    pull_segment: r.u64(),
                    server_rate: r.u64(),
                    server_buffer: r.u32(),
                    server_send_buffer: r.u32(),
                    server_recv_buffer: r.u32(),
                    rate_period_ms: r.u32(),
                    burst_count: r.u32(),
                    burst_delay_ms: r.u32(),
                    duration_ms: 0,
                    omit_ms: 0,
                };
                let _reserved: [u8; 4] = r.take();
                let h = match kind {
                    KIND_TIMED_HELLO => Hello {
                        duration_ms: r.u32(),
                        omit_ms: r.u32(),
                        ..h
                    },
                    _ => h,
                };
                if kind == KIND_TIMED_HELLO && h.duration_ms == 0 {
                    return Err(WireError::BadField("duration_ms"));
                }
                if h.server_buffer == 0 {
                    return Err(WireError::BadField("server_buffer"));
                }
                if h.pattern == TcpPattern::PushPull && (h.push_segment == 0 || h.pull_segment == 0) {
                    return Err(WireError::BadField("pushpull segment"));
                }
                if h.server_rate != 0 && h.rate_period_ms == 0 {
                    return Err(WireError::BadField("rate_period_ms"));
                }
                Message::Hello(h)
            }
            KIND_ACCEPT => Message::Accept {
                connection_id: r.take(),
            },
            KIND_REJECT => {
                let code = RejectCode::from_code(r.u16());
                let n = usize::from(r.u16());
                if n != len - 4 {
                    return Err(WireError::BadField("reason length"));
                }
                let reason = String::from_utf8_lossy(r.b).into_owned();
                Message::Reject { code, reason }
            }
            KIND_COMPLETION | KIND_TIMED_COMPLETION => {
                let sent = r.u64();
                let received = r.u64();
                let elapsed_ns = r.u64();
                let [status, dir, expected, actual] = r.take::<4>();
                let offset = r.u64();
                let verdict = match status {
                    0 => Verdict::Success,
                    1 => Verdict::DataMismatch {
                        direction: match dir {
                            0 => Direction::ClientToServer,
                            1 => Direction::ServerToClient,
                            _ => return Err(WireError::BadField("direction")),
                        },
                        offset,
                        expected,
                        actual,
                    },
                    2 => Verdict::NotAllData,
                    3 => Verdict::TooMuchData,
                    4 => Verdict::Aborted,
                    _ => return Err(WireError::BadField("verdict")),
                };
                let timed = (kind == KIND_TIMED_COMPLETION).then(|| WarmUp {
                    bytes: r.u64(),
                    at_ns: r.u64(),
                });
                Message::Completion(Completion {
                    sent,
                    received,
                    elapsed_ns,
                    verdict,
                    timed,
                })
            }
            _ => unreachable!("kind checked above"),
        };
        Ok(Some((msg, HEADER_LEN + len)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn hello() -> Hello {
        Hello {
            pattern: TcpPattern::PushPull,
            verify: VerifyMode::Data,
            transfer: 1 << 30,
            push_segment: 1 << 20,
            pull_segment: 4096,
            server_buffer: 65536,
            server_send_buffer: 0,
            server_recv_buffer: 262144,
            server_rate: 1_000_000,
            rate_period_ms: 100,
            burst_count: 0,
            burst_delay_ms: 0,
            duration_ms: 0,
            omit_ms: 0,
        }
    }

    fn timed() -> Hello {
        Hello {
            pattern: TcpPattern::Duplex,
            transfer: 0,
            duration_ms: 10_000,
            omit_ms: 2_000,
            ..hello()
        }
    }

    const LIMITS: HelloLimits = HelloLimits {
        max_transfer: 1 << 40,
        max_buffer: 16 << 20,
        max_duration_ms: 3_600_000,
    };

    #[test]
    fn a_timed_hello_plans_unbounded_directions_and_is_checked() {
        let plan = timed().check(&LIMITS).unwrap();
        assert_eq!(
            (plan.client_to_server, plan.server_to_client),
            (u64::MAX, u64::MAX)
        );
        let pull = Hello {
            pattern: TcpPattern::Pull,
            ..timed()
        };
        let plan = pull.check(&LIMITS).unwrap();
        assert_eq!((plan.client_to_server, plan.server_to_client), (0, u64::MAX));
        type Case = (fn(&mut Hello), &'static str);
        let cases: [Case; 3] = [
            (
                |h| h.duration_ms = 3_600_001,
                "duration of 3600001 ms is above the server's limit of 3600000 ms",
            ),
            (|h| h.pattern = TcpPattern::PushPull, "push-pull is byte-based"),
            (|h| h.omit_ms = 10_000, "warm-up of 10000 ms is not shorter"),
        ];
        for (change, want) in cases {
            let mut h = timed();
            change(&mut h);
            let reason = h.check(&LIMITS).unwrap_err().to_string();
            assert!(reason.contains(want), "{reason:?} lacks {want:?}");
        }
    }

    #[test]
    fn timed_messages_have_their_own_kinds_and_lengths() {
        let mut out = Vec::new();
        Message::Hello(timed()).encode(&mut out);
        assert_eq!(&out[4..8], &[1, 5, 0, 72]);
        assert_eq!(&out[out.len() - 8..], &[0, 0, 0x27, 0x10, 0, 0, 0x07, 0xd0]);
        let mut out = Vec::new();
        let c = Completion {
            sent: 1,
            received: 2,
            elapsed_ns: 3,
            verdict: Verdict::Success,
            timed: Some(WarmUp { bytes: 4, at_ns: 5 }),
        };
        Message::Completion(c).encode(&mut out);
        assert_eq!(out.len(), TIMED_COMPLETION_FRAME);
        assert_eq!(&out[4..8], &[1, 6, 0, 52]);
        // A timed hello that says no duration is not one.
        let mut out = Vec::new();
        Message::Hello(timed()).encode(&mut out);
        let n = out.len();
        out[n - 8..n - 4].copy_from_slice(&[0; 4]);
        assert_eq!(Message::decode(&out), Err(WireError::BadField("duration_ms")));
    }

    #[test]
    fn check_refuses_each_out_of_bounds_field_with_a_readable_reason() {
        assert!(hello().check(&LIMITS).is_ok());
        type Case = (fn(&mut Hello), &'static str);
        let cases: [Case; 6] = [
            (
                |h| h.transfer = (1 << 40) + 1,
                "transfer of 1099511627777 bytes is above",
            ),
            (|h| h.server_buffer = (16 << 20) + 1, "buffer of 16777217 bytes"),
            (|h| h.server_buffer = 0, "outside the server's limits of 1 to"),
            (|h| h.rate_period_ms = 60_001, "rate-limit period of 60001 ms"),
            (
                |h| {
                    h.server_rate = 1;
                    h.rate_period_ms = 1
                },
                "rate limit of 1 B/s is below one byte per 1 ms period",
            ),
            (
                |h| {
                    h.burst_count = 2;
                    h.burst_delay_ms = u32::MAX
                },
                "pause between bursts",
            ),
        ];
        for (change, want) in cases {
            let mut h = hello();
            change(&mut h);
            let reason = h.check(&LIMITS).unwrap_err().to_string();
            assert!(reason.contains(want), "{reason:?} lacks {want:?}");
        }
    }

    #[test]
    fn check_plans_the_overflowing_pushpull_hello() {
        let mut h = hello();
        h.push_segment = 1 << 63;
        h.pull_segment = 1 << 63;
        let plan = h.check(&LIMITS).unwrap();
        assert_eq!(plan.total(), 1 << 30);
    }

    #[test]
    fn reject_codes_read_as_words() {
        assert_eq!(RejectCode::TooManyConnections.to_string(), "too many connections");
        assert_eq!(RejectCode::from_code(6), RejectCode::HelloTimeout);
        assert_eq!(
            Message::Accept {
                connection_id: [0; 16]
            }
            .name(),
            "Accept"
        );
    }

    proptest! {
        /// Whatever a peer puts in a hello, checking and planning it never
        /// panics, and an accepted plan moves at most what was asked.
        #[test]
        fn check_never_panics(body in proptest::collection::vec(any::<u8>(), HELLO_LEN)) {
            let mut frame = b"GDPT\x01\x01\x00\x40".to_vec();
            frame.extend_from_slice(&body);
            if let Ok(Some((Message::Hello(h), _))) = Message::decode(&frame) {
                if let Ok(plan) = h.check(&LIMITS) {
                    prop_assert!(plan.total() <= h.transfer.saturating_add(1));
                    prop_assert!(plan.segments().take(4).count() <= 4);
                }
            }
        }
    }

    #[test]
    fn hello_golden_bytes() {
        let mut out = Vec::new();
        Message::Hello(hello()).encode(&mut out);
        let mut want = Vec::new();
        want.extend_from_slice(b"GDPT\x01\x01\x00\x40");
        want.extend_from_slice(&[2, 1, 0, 0]);
        want.extend_from_slice(&(1u64 << 30).to_be_bytes());
        want.extend_from_slice(&(1u64 << 20).to_be_bytes());
        want.extend_from_slice(&4096u64.to_be_bytes());
        want.extend_from_slice(&1_000_000u64.to_be_bytes());
        want.extend_from_slice(&65536u32.to_be_bytes());
        want.extend_from_slice(&0u32.to_be_bytes());
        want.extend_from_slice(&262144u32.to_be_bytes());
        want.extend_from_slice(&100u32.to_be_bytes());
        want.extend_from_slice(&[0u8; 12]);
        assert_eq!(out, want);
    }

    #[test]
    fn every_message_round_trips() {
        let msgs = vec![
            Message::Hello(hello()),
            Message::Accept {
                connection_id: [7; 16],
            },
            Message::Reject {
                code: RejectCode::OverLimit,
                reason: "transfer 2 TiB is above the server's limit of 1 TiB".into(),
            },
            Message::Completion(Completion {
                sent: 5,
                received: 1 << 40,
                elapsed_ns: 123,
                verdict: Verdict::DataMismatch {
                    direction: Direction::ClientToServer,
                    offset: 1_048_577,
                    expected: 1,
                    actual: 0,
                },
                timed: None,
            }),
            Message::Completion(Completion {
                sent: 0,
                received: 0,
                elapsed_ns: 0,
                verdict: Verdict::TooMuchData,
                timed: None,
            }),
            Message::Hello(timed()),
            Message::Completion(Completion {
                sent: 1 << 33,
                received: 0,
                elapsed_ns: 10_000_000_000,
                verdict: Verdict::Success,
                timed: Some(WarmUp {
                    bytes: 1 << 20,
                    at_ns: 2_000_000_123,
                }),
            }),
        ];
        for m in msgs {
            let mut out = Vec::new();
            m.encode(&mut out);
            for cut in 0..out.len() {
                assert_eq!(Message::decode(&out[..cut]), Ok(None), "prefix {cut} of {m:?}");
            }
            let (back, n) = Message::decode(&out).unwrap().unwrap();
            assert_eq!(n, out.len());
            assert_eq!(back, m);
        }
    }

    #[test]
    fn reject_reason_is_bounded() {
        let mut out = Vec::new();
        Message::Reject {
            code: RejectCode::Other,
            reason: "é".repeat(600),
        }
        .encode(&mut out);
        assert!(out.len() <= HEADER_LEN + 4 + MAX_REASON);
        assert!(Message::decode(&out).unwrap().is_some());
    }

    #[test]
    fn wrong_version_and_magic_are_named() {
        let mut out = Vec::new();
        Message::Accept {
            connection_id: [0; 16],
        }
        .encode(&mut out);
        out[4] = 9;
        assert_eq!(Message::decode(&out), Err(WireError::UnsupportedVersion(9)));
        assert!(matches!(
            Message::decode(b"GET / HTTP/1.1"),
            Err(WireError::BadMagic(_))
        ));
        assert!(matches!(Message::decode(b"GX"), Err(WireError::BadMagic(_))));
    }

    #[test]
    fn oversized_length_is_rejected_before_reading_body() {
        let mut buf = b"GDPT\x01\x03\xff\xff".to_vec();
        buf.extend_from_slice(&[0; 10]);
        assert!(matches!(Message::decode(&buf), Err(WireError::BadLength { .. })));
    }

    proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = Message::decode(&bytes);
        }

        #[test]
        fn decode_never_panics_after_valid_header(kind in 0u8..8, len in 0u16..2000, body in proptest::collection::vec(any::<u8>(), 0..1100)) {
            let mut buf = b"GDPT\x01".to_vec();
            buf.push(kind);
            buf.extend_from_slice(&len.to_be_bytes());
            buf.extend_from_slice(&body);
            if let Ok(Some((_, n))) = Message::decode(&buf) {
                prop_assert!(n <= buf.len());
            }
        }
    }
}
