//! The control connection's framing. Three things travel on it besides the
//! cookie: one-byte states, JSON messages with a 4-byte big-endian length,
//! and after a `SERVER_ERROR` state two big-endian `i32`s (iperf3's error
//! code and errno). Which one comes next depends on the protocol phase, so
//! the reader says what it expects: [`ControlDecoder::next`].

/// The state values iperf3 puts on the wire (a signed byte each).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum State {
    /// Server: every stream is in; set up timers.
    TestStart,
    /// Server: start moving data.
    TestRunning,
    /// Client: the end condition was reached.
    TestEnd,
    /// Server: send me your parameters.
    ParamExchange,
    /// Server: open your data streams now.
    CreateStreams,
    /// Server: interrupted by a signal.
    ServerTerminate,
    /// Client: interrupted by a signal.
    ClientTerminate,
    /// Server: send me your results.
    ExchangeResults,
    /// Server: results done, print them.
    DisplayResults,
    /// Client: finished.
    IperfDone,
    /// Server: busy with another test, or a data connection's cookie was wrong.
    AccessDenied,
    /// Server: an error code and errno follow.
    ServerError,
}

impl State {
    /// The wire byte.
    pub fn byte(self) -> u8 {
        let v: i8 = match self {
            State::TestStart => 1,
            State::TestRunning => 2,
            State::TestEnd => 4,
            State::ParamExchange => 9,
            State::CreateStreams => 10,
            State::ServerTerminate => 11,
            State::ClientTerminate => 12,
            State::ExchangeResults => 13,
            State::DisplayResults => 14,
            State::IperfDone => 16,
            State::AccessDenied => -1,
            State::ServerError => -2,
        };
        v as u8
    }

    /// The state a wire byte stands for, if it is one a peer may send
    /// (iperf3's unused values 3, 5–8 and 15 are not).
    pub fn from_byte(b: u8) -> Option<State> {
        Some(match b as i8 {
            1 => State::TestStart,
            2 => State::TestRunning,
            4 => State::TestEnd,
            9 => State::ParamExchange,
            10 => State::CreateStreams,
            11 => State::ServerTerminate,
            12 => State::ClientTerminate,
            13 => State::ExchangeResults,
            14 => State::DisplayResults,
            16 => State::IperfDone,
            -1 => State::AccessDenied,
            -2 => State::ServerError,
            _ => return None,
        })
    }

    /// iperf3's name for the state, as its sources and debug output spell it.
    pub fn name(self) -> &'static str {
        match self {
            State::TestStart => "TEST_START",
            State::TestRunning => "TEST_RUNNING",
            State::TestEnd => "TEST_END",
            State::ParamExchange => "PARAM_EXCHANGE",
            State::CreateStreams => "CREATE_STREAMS",
            State::ServerTerminate => "SERVER_TERMINATE",
            State::ClientTerminate => "CLIENT_TERMINATE",
            State::ExchangeResults => "EXCHANGE_RESULTS",
            State::DisplayResults => "DISPLAY_RESULTS",
            State::IperfDone => "IPERF_DONE",
            State::AccessDenied => "ACCESS_DENIED",
            State::ServerError => "SERVER_ERROR",
        }
    }
}

/// What the reader expects next on the control connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// A state byte (a `SERVER_ERROR` brings its payload with it).
    State,
    /// A JSON message of at most this many bytes.
    Json {
        /// Largest accepted length, bytes.
        max: u32,
    },
}

/// One decoded control message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// A state byte other than `SERVER_ERROR`.
    State(State),
    /// `SERVER_ERROR` with iperf3's error code and the errno (absent when the
    /// peer closed after the code, as some 3.12 paths do).
    ServerError {
        /// iperf3's `i_errno`.
        code: i32,
        /// The OS errno, when sent.
        errno: Option<i32>,
    },
    /// A JSON message body (not yet parsed).
    Json(Vec<u8>),
}

/// For error texts: the state's name, the error code, or the JSON body's
/// size (never its raw bytes).
impl std::fmt::Display for Message {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Message::State(s) => write!(f, "state {}", s.name()),
            Message::ServerError { code, errno: Some(e) } => write!(f, "SERVER_ERROR {code} (errno {e})"),
            Message::ServerError { code, errno: None } => write!(f, "SERVER_ERROR {code}"),
            Message::Json(b) => write!(f, "a JSON message of {} bytes", b.len()),
        }
    }
}

/// Why the control stream cannot be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// A byte that is not one of iperf3's states.
    #[error("received an unknown control message (state byte {0})")]
    UnknownState(u8),
    /// A JSON length of zero or above the limit.
    #[error("JSON message of {len} bytes (allowed: 1..={max})")]
    BadLength {
        /// The announced length.
        len: u32,
        /// The limit in force.
        max: u32,
    },
}

/// An incremental decoder: feed it whatever the socket returned, then take
/// messages out as the protocol phase expects them. Bounded: it never holds
/// more than one message plus what was fed beyond it.
#[derive(Debug, Default)]
pub struct ControlDecoder {
    buf: Vec<u8>,
    start: usize,
}

impl ControlDecoder {
    /// An empty decoder.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends received bytes.
    pub fn feed(&mut self, data: &[u8]) {
        if self.start > 0 && self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        } else if self.start > 4096 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        self.buf.extend_from_slice(data);
    }

    /// Bytes fed and not yet decoded.
    pub fn buffered(&self) -> usize {
        self.buf.len() - self.start
    }

    fn pending(&self) -> &[u8] {
        &self.buf[self.start..]
    }

    /// The next message if all of it has arrived, `Ok(None)` if more bytes
    /// are needed. An error is final: the connection cannot be resynchronised.
    pub fn next(&mut self, expect: Expect) -> Result<Option<Message>, FrameError> {
        let p = self.pending();
        match expect {
            Expect::State => {
                let Some(&b) = p.first() else {
                    return Ok(None);
                };
                let state = State::from_byte(b).ok_or(FrameError::UnknownState(b))?;
                if state != State::ServerError {
                    self.start += 1;
                    return Ok(Some(Message::State(state)));
                }
                if p.len() < 9 {
                    return Ok(None);
                }
                let code = i32::from_be_bytes([p[1], p[2], p[3], p[4]]);
                let errno = i32::from_be_bytes([p[5], p[6], p[7], p[8]]);
                self.start += 9;
                Ok(Some(Message::ServerError {
                    code,
                    errno: Some(errno),
                }))
            }
            Expect::Json { max } => {
                if p.len() < 4 {
                    return Ok(None);
                }
                let len = u32::from_be_bytes([p[0], p[1], p[2], p[3]]);
                if len == 0 || len > max {
                    return Err(FrameError::BadLength { len, max });
                }
                let total = 4 + len as usize;
                if p.len() < total {
                    return Ok(None);
                }
                let body = p[4..total].to_vec();
                self.start += total;
                Ok(Some(Message::Json(body)))
            }
        }
    }

    /// What the bytes left at end of stream still say: a `SERVER_ERROR`
    /// whose errno never came (the peer closed after the code).
    pub fn at_eof(&self) -> Option<Message> {
        let p = self.pending();
        (p.len() >= 5 && p[0] == State::ServerError.byte()).then(|| Message::ServerError {
            code: i32::from_be_bytes([p[1], p[2], p[3], p[4]]),
            errno: None,
        })
    }
}

/// A JSON message with its length prefix.
pub fn encode_json(body: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(4 + body.len());
    v.extend_from_slice(&(body.len() as u32).to_be_bytes());
    v.extend_from_slice(body);
    v
}

/// `SERVER_ERROR` with its two integers.
pub fn encode_server_error(code: i32, errno: i32) -> [u8; 9] {
    let mut v = [0u8; 9];
    v[0] = State::ServerError.byte();
    v[1..5].copy_from_slice(&code.to_be_bytes());
    v[5..9].copy_from_slice(&errno.to_be_bytes());
    v
}

/// iperf3 error codes goodput sends or names (`i_errno`, stable since 3.0).
pub mod errors {
    /// Test duration too long.
    pub const DURATION: i32 = 5;
    /// Too many parallel streams.
    pub const NUM_STREAMS: i32 = 6;
    /// Block size invalid (TCP).
    pub const BLOCK_SIZE: i32 = 7;
    /// Socket buffer size too large.
    pub const BUF_SIZE: i32 = 8;
    /// MSS too large.
    pub const MSS: i32 = 10;
    /// Bad `--omit`.
    pub const OMIT: i32 = 12;
    /// Not implemented.
    pub const UNIMPLEMENTED: i32 = 13;
    /// Bad burst count.
    pub const BURST: i32 = 15;
    /// No SCTP support.
    pub const NO_SCTP: i32 = 18;
    /// UDP block size invalid.
    pub const UDP_BLOCK_SIZE: i32 = 20;
    /// Bad TOS.
    pub const BAD_TOS: i32 = 21;
    /// Unable to receive parameters.
    pub const RECV_PARAMS: i32 = 114;
    /// Unable to receive results.
    pub const RECV_RESULTS: i32 = 117;
    /// The client terminated.
    pub const CLIENT_TERM: i32 = 119;
    /// The server is busy.
    pub const ACCESS_DENIED: i32 = 121;
    /// Test authorisation failed.
    pub const AUTH_TEST: i32 = 142;
    /// Unable to accept a stream connection.
    pub const STREAM_ACCEPT: i32 = 204;

    /// iperf3's text for a code, for the codes a server commonly sends.
    pub fn describe(code: i32) -> &'static str {
        match code {
            DURATION => "test duration too long",
            NUM_STREAMS => "number of parallel streams too large",
            BLOCK_SIZE => "block size too large",
            BUF_SIZE => "socket buffer size too large",
            MSS => "MSS too large",
            OMIT => "bogus value for --omit",
            UNIMPLEMENTED => "not implemented",
            BURST => "invalid burst count",
            NO_SCTP => "no SCTP support available",
            UDP_BLOCK_SIZE => "block size invalid",
            BAD_TOS => "bad TOS value",
            27 => "total required bandwidth is larger than server limit",
            37 => "client's requested duration exceeds the server's maximum permitted limit",
            RECV_PARAMS => "unable to receive parameters from client",
            RECV_RESULTS => "unable to receive results",
            CLIENT_TERM => "the client has terminated",
            ACCESS_DENIED => "the server is busy running a test",
            AUTH_TEST => "test authorization failed",
            160 => "server test duration expired",
            STREAM_ACCEPT => "unable to accept stream connection",
            _ => "iperf3 server error",
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn messages_read_as_text_not_debug() {
        use super::{Message, State};
        assert_eq!(Message::State(State::TestStart).to_string(), "state TEST_START");
        assert_eq!(
            Message::Json(vec![b'{'; 17]).to_string(),
            "a JSON message of 17 bytes"
        );
        let e = Message::ServerError {
            code: 37,
            errno: Some(0),
        };
        assert_eq!(e.to_string(), "SERVER_ERROR 37 (errno 0)");
        for b in 0..=255u8 {
            if let Some(s) = State::from_byte(b) {
                assert!(s.name().chars().all(|c| c.is_ascii_uppercase() || c == '_'));
            }
        }
    }

    use super::*;
    use proptest::prelude::*;

    #[test]
    fn states_round_trip_and_unused_values_are_unknown() {
        for b in 0..=255u8 {
            if let Some(s) = State::from_byte(b) {
                assert_eq!(s.byte(), b);
            }
        }
        for unused in [0u8, 3, 5, 6, 7, 8, 15, 17, 0xFD] {
            assert_eq!(State::from_byte(unused), None, "{unused}");
        }
        assert_eq!(State::AccessDenied.byte(), 0xFF);
    }

    #[test]
    fn states_that_arrive_together_come_out_one_at_a_time() {
        let mut d = ControlDecoder::new();
        d.feed(&[1, 2]);
        assert_eq!(d.next(Expect::State), Ok(Some(Message::State(State::TestStart))));
        assert_eq!(
            d.next(Expect::State),
            Ok(Some(Message::State(State::TestRunning)))
        );
        assert_eq!(d.next(Expect::State), Ok(None));
    }

    #[test]
    fn server_error_waits_for_both_integers_and_survives_a_short_close() {
        let mut d = ControlDecoder::new();
        let e = encode_server_error(27, 0);
        d.feed(&e[..5]);
        assert_eq!(d.next(Expect::State), Ok(None));
        assert_eq!(
            d.at_eof(),
            Some(Message::ServerError {
                code: 27,
                errno: None
            })
        );
        d.feed(&e[5..]);
        assert_eq!(
            d.next(Expect::State),
            Ok(Some(Message::ServerError {
                code: 27,
                errno: Some(0)
            }))
        );
    }

    #[test]
    fn json_length_is_bounded_before_buffering() {
        let mut d = ControlDecoder::new();
        d.feed(&[0, 0, 0x20, 1]);
        assert_eq!(
            d.next(Expect::Json { max: 8192 }),
            Err(FrameError::BadLength { len: 8193, max: 8192 })
        );
        let mut d = ControlDecoder::new();
        d.feed(&[0, 0, 0, 0]);
        assert!(d.next(Expect::Json { max: 8192 }).is_err());
    }

    #[test]
    fn unknown_state_is_an_error() {
        let mut d = ControlDecoder::new();
        d.feed(&[3]);
        assert_eq!(d.next(Expect::State), Err(FrameError::UnknownState(3)));
    }

    fn arb_state() -> impl Strategy<Value = State> {
        prop::sample::select(vec![
            State::TestStart,
            State::TestRunning,
            State::TestEnd,
            State::ParamExchange,
            State::CreateStreams,
            State::ServerTerminate,
            State::ClientTerminate,
            State::ExchangeResults,
            State::DisplayResults,
            State::IperfDone,
            State::AccessDenied,
        ])
    }

    #[derive(Debug, Clone)]
    enum Item {
        State(State),
        Error(i32, i32),
        Json(Vec<u8>),
    }

    fn arb_item() -> impl Strategy<Value = Item> {
        prop_oneof![
            arb_state().prop_map(Item::State),
            (any::<i32>(), any::<i32>()).prop_map(|(c, e)| Item::Error(c, e)),
            prop::collection::vec(any::<u8>(), 1..300).prop_map(Item::Json),
        ]
    }

    proptest! {
        /// Whatever the split into reads, a sequence of messages decodes to
        /// itself.
        #[test]
        fn any_message_sequence_round_trips_across_any_split(
            items in prop::collection::vec(arb_item(), 0..20),
            cuts in prop::collection::vec(1usize..64, 0..40),
        ) {
            let mut wire = Vec::new();
            for it in &items {
                match it {
                    Item::State(s) => wire.push(s.byte()),
                    Item::Error(c, e) => wire.extend_from_slice(&encode_server_error(*c, *e)),
                    Item::Json(b) => wire.extend_from_slice(&encode_json(b)),
                }
            }
            let mut d = ControlDecoder::new();
            let mut at = 0;
            let mut cut = cuts.iter().cycle();
            let mut got = Vec::new();
            let mut expected = items.iter();
            let mut want = expected.next();
            while let Some(w) = want {
                let expect = match w {
                    Item::Json(_) => Expect::Json { max: 1000 },
                    _ => Expect::State,
                };
                match d.next(expect).unwrap() {
                    Some(m) => {
                        got.push(m);
                        want = expected.next();
                    }
                    None => {
                        prop_assert!(at < wire.len(), "decoder wants bytes past the end");
                        let n = (*cut.next().unwrap_or(&7)).min(wire.len() - at);
                        d.feed(&wire[at..at + n]);
                        at += n;
                    }
                }
            }
            prop_assert_eq!(at, wire.len());
            prop_assert_eq!(d.buffered(), 0);
            for (it, m) in items.iter().zip(&got) {
                match (it, m) {
                    (Item::State(s), Message::State(t)) => prop_assert_eq!(s, t),
                    (Item::Error(c, e), Message::ServerError { code, errno }) => {
                        prop_assert_eq!(c, code);
                        prop_assert_eq!(Some(*e), *errno);
                    }
                    (Item::Json(b), Message::Json(j)) => prop_assert_eq!(b, j),
                    _ => prop_assert!(false, "mismatch {:?} vs {:?}", it, m),
                }
            }
        }

        /// Arbitrary bytes never panic the decoder, and it never returns a
        /// JSON body above the limit.
        #[test]
        fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..400), json in any::<bool>()) {
            let mut d = ControlDecoder::new();
            d.feed(&bytes);
            let expect = if json { Expect::Json { max: 64 } } else { Expect::State };
            for _ in 0..400 {
                match d.next(expect) {
                    Ok(Some(Message::Json(b))) => prop_assert!(!b.is_empty() && b.len() <= 64),
                    Ok(Some(_)) => {}
                    Ok(None) | Err(_) => break,
                }
            }
            let _ = d.at_eof();
        }
    }
}
