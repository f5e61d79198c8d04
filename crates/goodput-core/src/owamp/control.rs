//! OWAMP-Control (RFC 4656 §3) and TWAMP-Control (RFC 5357 §3) messages,
//! in the clear: each type encodes to and decodes from its exact octets.
//! Encryption and HMACs are the [`Channel`](super::crypto::Channel)'s; a
//! message's HMAC block is left zero here and filled when sealed.
//!
//! Decoding never trusts a count: the caller bounds every number (slots,
//! packets, skip ranges, records) before it reads or allocates by it.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::crypto::BLOCK;

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
fn put16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_be_bytes());
}
fn put32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_be_bytes());
}
fn put64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_be_bytes());
}
fn arr16(b: &[u8], at: usize) -> [u8; 16] {
    let mut a = [0u8; 16];
    a.copy_from_slice(&b[at..at + 16]);
    a
}

/// A message that cannot be what it claims.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ControlError {
    /// A field holds a value the protocol does not define.
    #[error("{0}")]
    Invalid(&'static str),
    /// The command byte names no command this end takes here.
    #[error("unexpected command {0}")]
    Command(u8),
}

/// The command byte that opens a client's request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    /// Request-Session (OWAMP), 1.
    RequestSession,
    /// Start-Sessions, 2.
    StartSessions,
    /// Stop-Sessions, 3.
    StopSessions,
    /// Fetch-Session (OWAMP), 4.
    FetchSession,
    /// Request-TW-Session (TWAMP), 5.
    RequestTwSession,
}

impl Command {
    /// The wire value.
    pub fn byte(self) -> u8 {
        match self {
            Self::RequestSession => 1,
            Self::StartSessions => 2,
            Self::StopSessions => 3,
            Self::FetchSession => 4,
            Self::RequestTwSession => 5,
        }
    }

    /// From the first octet of a request's first block.
    pub fn from_byte(b: u8) -> Result<Self, ControlError> {
        Ok(match b {
            1 => Self::RequestSession,
            2 => Self::StartSessions,
            3 => Self::StopSessions,
            4 => Self::FetchSession,
            5 => Self::RequestTwSession,
            other => return Err(ControlError::Command(other)),
        })
    }
}

/// Server-Greeting (64 octets): the modes the server offers, a challenge,
/// and the PBKDF2 salt and iteration count for authenticated modes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerGreeting {
    /// Bitmask of [`super::Mode`] bits offered (0: the server refuses
    /// this client).
    pub modes: u32,
    /// Challenge the client returns inside its Token.
    pub challenge: [u8; 16],
    /// PBKDF2 salt.
    pub salt: [u8; 16],
    /// PBKDF2 iterations.
    pub count: u32,
}

impl ServerGreeting {
    /// Octets on the wire.
    pub const LEN: usize = 64;

    /// Encodes.
    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        put32(&mut b, 12, self.modes);
        b[16..32].copy_from_slice(&self.challenge);
        b[32..48].copy_from_slice(&self.salt);
        put32(&mut b, 48, self.count);
        b
    }

    /// Decodes.
    pub fn decode(b: &[u8; Self::LEN]) -> Self {
        Self {
            modes: be32(b, 12),
            challenge: arr16(b, 16),
            salt: arr16(b, 32),
            count: be32(b, 48),
        }
    }
}

/// Set-Up-Response (164 octets): the mode chosen and, for authenticated
/// modes, the key identity, Token and Client-IV.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetupResponse {
    /// One mode bit (0: the client gives up).
    pub mode: u32,
    /// Key identity, NUL-padded (80 octets).
    pub key_id: [u8; 80],
    /// The encrypted Token.
    pub token: [u8; 64],
    /// The IV of the client's CBC chain.
    pub client_iv: [u8; 16],
}

impl SetupResponse {
    /// Octets on the wire.
    pub const LEN: usize = 164;

    /// Encodes.
    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        put32(&mut b, 0, self.mode);
        b[4..84].copy_from_slice(&self.key_id);
        b[84..148].copy_from_slice(&self.token);
        b[148..164].copy_from_slice(&self.client_iv);
        b
    }

    /// Decodes.
    pub fn decode(b: &[u8; Self::LEN]) -> Self {
        let mut key_id = [0u8; 80];
        key_id.copy_from_slice(&b[4..84]);
        let mut token = [0u8; 64];
        token.copy_from_slice(&b[84..148]);
        Self {
            mode: be32(b, 0),
            key_id,
            token,
            client_iv: arr16(b, 148),
        }
    }

    /// The key identity as text (up to its first NUL).
    pub fn identity(&self) -> String {
        let end = self.key_id.iter().position(|&c| c == 0).unwrap_or(80);
        String::from_utf8_lossy(&self.key_id[..end]).into_owned()
    }
}

/// The identity field for a key name, NUL-padded; `None` when longer than
/// 80 octets.
pub fn key_id(name: &str) -> Option<[u8; 80]> {
    let mut out = [0u8; 80];
    let b = name.as_bytes();
    if b.len() > 80 {
        return None;
    }
    out[..b.len()].copy_from_slice(b);
    Some(out)
}

/// Server-Start (48 octets). Its first 32 octets are always clear; the
/// last block (Start-Time) is encrypted in authenticated modes and added
/// to the server's running HMAC without a digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerStart {
    /// Accept code ([`super::Accept`]).
    pub accept: u8,
    /// The IV of the server's CBC chain.
    pub server_iv: [u8; 16],
    /// When the server started (NTP format).
    pub start_time: u64,
}

impl ServerStart {
    /// Octets on the wire.
    pub const LEN: usize = 48;

    /// Encodes (clear).
    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[15] = self.accept;
        b[16..32].copy_from_slice(&self.server_iv);
        put64(&mut b, 32, self.start_time);
        b
    }

    /// Decodes (clear).
    pub fn decode(b: &[u8; Self::LEN]) -> Self {
        Self {
            accept: b[15],
            server_iv: arr16(b, 16),
            start_time: be64(b, 32),
        }
    }
}

/// A schedule slot's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotKind {
    /// Exponentially distributed gap with this mean (Poisson stream), 0.
    Exponential,
    /// Fixed gap, 1.
    Fixed,
}

/// One schedule slot (16 octets): a gap before the next packet, in NTP
/// 32.32 seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    /// Fixed or exponential.
    pub kind: SlotKind,
    /// The gap, or its mean, as 32.32 fixed-point seconds.
    pub gap: u64,
}

impl Slot {
    /// Encodes one block.
    pub fn encode(&self) -> [u8; BLOCK] {
        let mut b = [0u8; BLOCK];
        b[0] = match self.kind {
            SlotKind::Exponential => 0,
            SlotKind::Fixed => 1,
        };
        put64(&mut b, 8, self.gap);
        b
    }

    /// Decodes one block.
    pub fn decode(b: &[u8; BLOCK]) -> Result<Self, ControlError> {
        let kind = match b[0] {
            0 => SlotKind::Exponential,
            1 => SlotKind::Fixed,
            _ => return Err(ControlError::Invalid("a schedule slot of unknown type")),
        };
        Ok(Self {
            kind,
            gap: be64(b, 8),
        })
    }

    /// The gap in nanoseconds.
    pub fn gap_ns(&self) -> u64 {
        ((u128::from(self.gap) * 1_000_000_000) >> 32) as u64
    }

    /// A gap given in nanoseconds.
    pub fn from_ns(kind: SlotKind, ns: u64) -> Self {
        Self {
            kind,
            gap: ((u128::from(ns) << 32) / 1_000_000_000) as u64,
        }
    }
}

/// Request-Session (command 1) or Request-TW-Session (command 5): 112
/// octets, the last block its HMAC. An OWAMP request is followed by its
/// slots and one more HMAC block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestSession {
    /// TWAMP's Request-TW-Session rather than OWAMP's Request-Session.
    pub twoway: bool,
    /// The server is to be the sender (OWAMP).
    pub conf_sender: bool,
    /// The server is to be the receiver (OWAMP).
    pub conf_receiver: bool,
    /// Schedule slots that follow (OWAMP; 0 in TWAMP).
    pub slots: u32,
    /// Packets in the session (OWAMP; 0 in TWAMP).
    pub packets: u32,
    /// Sender's UDP port.
    pub sender_port: u16,
    /// Receiver's UDP port (0: the server picks).
    pub receiver_port: u16,
    /// Sender's address.
    pub sender: IpAddr,
    /// Receiver's address.
    pub receiver: IpAddr,
    /// The session's id (zero in a request whose server is the receiver:
    /// the receiver makes it).
    pub sid: [u8; 16],
    /// Octets of padding after each test packet's header.
    pub padding: u32,
    /// When the session starts (NTP format).
    pub start_time: u64,
    /// How long after the session a packet may still arrive, 32.32 s
    /// (OWAMP); TWAMP: how long the reflector waits after Stop-Sessions.
    pub timeout: u64,
    /// Type-P descriptor: a DSCP in the low 6 bits of the first octet
    /// (the word `dscp << 24`, as owping writes it), else zero.
    pub type_p: u32,
}

impl RequestSession {
    /// Octets on the wire, HMAC block included.
    pub const LEN: usize = 112;

    /// Encodes (HMAC block zero).
    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[0] = if self.twoway {
            Command::RequestTwSession.byte()
        } else {
            Command::RequestSession.byte()
        };
        b[1] = if self.sender.is_ipv6() { 6 } else { 4 };
        b[2] = u8::from(self.conf_sender && !self.twoway);
        b[3] = u8::from(self.conf_receiver && !self.twoway);
        put32(&mut b, 4, self.slots);
        put32(&mut b, 8, self.packets);
        put16(&mut b, 12, self.sender_port);
        put16(&mut b, 14, self.receiver_port);
        write_addr(&mut b[16..32], self.sender);
        write_addr(&mut b[32..48], self.receiver);
        b[48..64].copy_from_slice(&self.sid);
        put32(&mut b, 64, self.padding);
        put64(&mut b, 68, self.start_time);
        put64(&mut b, 76, self.timeout);
        put32(&mut b, 84, self.type_p);
        b
    }

    /// Decodes (the HMAC block is the channel's).
    pub fn decode(b: &[u8; Self::LEN]) -> Result<Self, ControlError> {
        let twoway = match Command::from_byte(b[0])? {
            Command::RequestSession => false,
            Command::RequestTwSession => true,
            _ => return Err(ControlError::Command(b[0])),
        };
        let v6 = match b[1] & 0x0F {
            4 => false,
            6 => true,
            _ => return Err(ControlError::Invalid("an IP version other than 4 or 6")),
        };
        let conf_sender = match b[2] {
            0 => false,
            1 => true,
            _ => return Err(ControlError::Invalid("Conf-Sender other than 0 or 1")),
        };
        let conf_receiver = match b[3] {
            0 => false,
            1 => true,
            _ => return Err(ControlError::Invalid("Conf-Receiver other than 0 or 1")),
        };
        if !twoway && conf_sender == conf_receiver {
            return Err(ControlError::Invalid(
                "a one-way session needs the server as exactly one of sender and receiver",
            ));
        }
        if twoway && (conf_sender || conf_receiver) {
            return Err(ControlError::Invalid(
                "a two-way session with Conf-Sender or Conf-Receiver set",
            ));
        }
        Ok(Self {
            twoway,
            conf_sender,
            conf_receiver,
            slots: be32(b, 4),
            packets: be32(b, 8),
            sender_port: be16(b, 12),
            receiver_port: be16(b, 14),
            sender: read_addr(&b[16..32], v6),
            receiver: read_addr(&b[32..48], v6),
            sid: arr16(b, 48),
            padding: be32(b, 64),
            start_time: be64(b, 68),
            timeout: be64(b, 76),
            type_p: be32(b, 84),
        })
    }

    /// The DSCP the Type-P descriptor asks for; `None` when it holds
    /// anything beyond a DSCP (a PHB id, which owamp refuses too).
    pub fn dscp(&self) -> Option<u8> {
        (self.type_p & !0x3F00_0000 == 0).then_some((self.type_p >> 24) as u8)
    }

    /// The Type-P descriptor for a DSCP.
    pub fn type_p_of(dscp: u8) -> u32 {
        u32::from(dscp & 0x3F) << 24
    }
}

fn write_addr(b: &mut [u8], ip: IpAddr) {
    match ip {
        IpAddr::V4(a) => b[..4].copy_from_slice(&a.octets()),
        IpAddr::V6(a) => b.copy_from_slice(&a.octets()),
    }
}

fn read_addr(b: &[u8], v6: bool) -> IpAddr {
    if v6 {
        IpAddr::V6(Ipv6Addr::from(arr16(b, 0)))
    } else {
        IpAddr::V4(Ipv4Addr::new(b[0], b[1], b[2], b[3]))
    }
}

/// Accept-Session (48 octets, the last block its HMAC).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcceptSession {
    /// Accept code.
    pub accept: u8,
    /// The server's UDP port for the session (its receiver's or
    /// reflector's; the sender's when the server sends).
    pub port: u16,
    /// The session id the server gives (OWAMP receiver) or echoes.
    pub sid: [u8; 16],
}

impl AcceptSession {
    /// Octets on the wire.
    pub const LEN: usize = 48;

    /// Encodes (HMAC block zero).
    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[0] = self.accept;
        put16(&mut b, 2, self.port);
        b[4..20].copy_from_slice(&self.sid);
        b
    }

    /// Decodes.
    pub fn decode(b: &[u8; Self::LEN]) -> Self {
        Self {
            accept: b[0],
            port: be16(b, 2),
            sid: arr16(b, 4),
        }
    }
}

/// Start-Sessions (32 octets): the command block and its HMAC.
pub fn start_sessions() -> [u8; 32] {
    let mut b = [0u8; 32];
    b[0] = Command::StartSessions.byte();
    b
}

/// Start-Ack (32 octets): an accept code and the HMAC block.
pub fn start_ack(accept: u8) -> [u8; 32] {
    let mut b = [0u8; 32];
    b[0] = accept;
    b
}

/// Stop-Sessions' first block: the accept code and how many sessions'
/// records follow (OWAMP; TWAMP sends 0 records and its HMAC next).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StopHeader {
    /// Accept code (0: the sessions ended normally).
    pub accept: u8,
    /// Sessions whose SID and skip ranges follow.
    pub sessions: u32,
}

impl StopHeader {
    /// Encodes the first block.
    pub fn encode(&self) -> [u8; BLOCK] {
        let mut b = [0u8; BLOCK];
        b[0] = Command::StopSessions.byte();
        b[1] = self.accept;
        put32(&mut b, 4, self.sessions);
        b
    }

    /// Decodes the first block.
    pub fn decode(b: &[u8; BLOCK]) -> Result<Self, ControlError> {
        if b[0] != Command::StopSessions.byte() {
            return Err(ControlError::Command(b[0]));
        }
        Ok(Self {
            accept: b[1],
            sessions: be32(b, 4),
        })
    }
}

/// A range of sequence numbers the sender scheduled but did not send
/// (RFC 4656 §3.8), both ends included.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SkipRange {
    /// First skipped.
    pub first: u32,
    /// Last skipped.
    pub last: u32,
}

/// One sending session's part of an OWAMP Stop-Sessions: after its SID
/// block, the next sequence number and the skip ranges, padded to blocks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StopSession {
    /// The session.
    pub sid: [u8; 16],
    /// The sequence number the sender would have sent next (the count it
    /// scheduled).
    pub next_seq: u32,
    /// Packets scheduled and not sent.
    pub skips: Vec<SkipRange>,
}

impl StopSession {
    /// Encodes: the SID block, then the next sequence number, the number
    /// of ranges and the ranges, zero-padded to whole blocks.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(BLOCK + pad16(8 + 8 * self.skips.len()));
        b.extend_from_slice(&self.sid);
        b.extend_from_slice(&self.next_seq.to_be_bytes());
        b.extend_from_slice(&(self.skips.len() as u32).to_be_bytes());
        for s in &self.skips {
            b.extend_from_slice(&s.first.to_be_bytes());
            b.extend_from_slice(&s.last.to_be_bytes());
        }
        b.resize(BLOCK + pad16(8 + 8 * self.skips.len()), 0);
        b
    }

    /// Octets after the SID block for `n` skip ranges.
    pub fn tail_len(n: usize) -> usize {
        pad16(8 + 8 * n)
    }
}

/// `n` rounded up to whole blocks.
pub fn pad16(n: usize) -> usize {
    n.div_ceil(BLOCK) * BLOCK
}

/// Fetch-Session (command 4, 48 octets with its HMAC): the records from
/// `begin` to `end` (0xFFFFFFFF: to the last) of one session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FetchSession {
    /// First sequence number wanted.
    pub begin: u32,
    /// Last sequence number wanted.
    pub end: u32,
    /// The session.
    pub sid: [u8; 16],
}

impl FetchSession {
    /// Octets on the wire.
    pub const LEN: usize = 48;

    /// Encodes (HMAC block zero).
    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[0] = Command::FetchSession.byte();
        put32(&mut b, 8, self.begin);
        put32(&mut b, 12, self.end);
        b[16..32].copy_from_slice(&self.sid);
        b
    }

    /// Decodes.
    pub fn decode(b: &[u8; Self::LEN]) -> Result<Self, ControlError> {
        if b[0] != Command::FetchSession.byte() {
            return Err(ControlError::Command(b[0]));
        }
        Ok(Self {
            begin: be32(b, 8),
            end: be32(b, 12),
            sid: arr16(b, 16),
        })
    }
}

/// Fetch-Ack (32 octets with its HMAC).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FetchAck {
    /// Accept code.
    pub accept: u8,
    /// Whether the session had ended (then `next_seq` and `skips` count).
    pub finished: bool,
    /// The sender's next sequence number, from its Stop-Sessions.
    pub next_seq: u32,
    /// Skip ranges that follow.
    pub skips: u32,
    /// Data records that follow.
    pub records: u32,
}

impl FetchAck {
    /// Octets on the wire.
    pub const LEN: usize = 32;

    /// Encodes (HMAC block zero).
    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[0] = self.accept;
        b[1] = u8::from(self.finished);
        if self.finished {
            put32(&mut b, 4, self.next_seq);
            put32(&mut b, 8, self.skips);
        }
        put32(&mut b, 12, self.records);
        b
    }

    /// Decodes.
    pub fn decode(b: &[u8; Self::LEN]) -> Self {
        Self {
            accept: b[0],
            finished: b[1] != 0,
            next_seq: be32(b, 4),
            skips: be32(b, 8),
            records: be32(b, 12),
        }
    }
}

/// One received packet as a receiver keeps it and Fetch-Session returns
/// it (RFC 4656 §3.8, 25 octets). A lost packet has a zero receive time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataRecord {
    /// Sequence number.
    pub seq: u32,
    /// The sender's error estimate.
    pub send_err: u16,
    /// The receiver's error estimate.
    pub recv_err: u16,
    /// Send time (NTP format).
    pub send_time: u64,
    /// Receive time (NTP format; 0: lost).
    pub recv_time: u64,
    /// TTL of the received packet (255: not known or lost).
    pub ttl: u8,
}

impl DataRecord {
    /// Octets on the wire.
    pub const LEN: usize = 25;

    /// Encodes.
    pub fn encode(&self, b: &mut [u8]) {
        put32(b, 0, self.seq);
        put16(b, 4, self.send_err);
        put16(b, 6, self.recv_err);
        put64(b, 8, self.send_time);
        put64(b, 16, self.recv_time);
        b[24] = self.ttl;
    }

    /// Decodes 25 octets.
    pub fn decode(b: &[u8]) -> Self {
        Self {
            seq: be32(b, 0),
            send_err: be16(b, 4),
            recv_err: be16(b, 6),
            send_time: be64(b, 8),
            recv_time: be64(b, 16),
            ttl: b[24],
        }
    }

    /// Whether this records a packet that never arrived.
    pub fn is_lost(&self) -> bool {
        self.recv_time == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_round_trips_and_refuses_nonsense() {
        let r = RequestSession {
            twoway: false,
            conf_sender: false,
            conf_receiver: true,
            slots: 1,
            packets: 100,
            sender_port: 9000,
            receiver_port: 0,
            sender: "192.0.2.1".parse().unwrap(),
            receiver: "192.0.2.2".parse().unwrap(),
            sid: [0; 16],
            padding: 27,
            start_time: 0x1122_3344_5566_7788,
            timeout: 2 << 32,
            type_p: RequestSession::type_p_of(46),
        };
        let b = r.encode();
        assert_eq!(b[0], 1);
        assert_eq!(b[1], 4);
        assert_eq!(&b[16..20], &[192, 0, 2, 1]);
        assert_eq!(RequestSession::decode(&b).unwrap(), r);
        assert_eq!(r.dscp(), Some(46));
        let mut bad = b;
        bad[2] = 1; // both sender and receiver
        assert!(RequestSession::decode(&bad).is_err());
        let mut bad = b;
        bad[1] = 5;
        assert!(RequestSession::decode(&bad).is_err());
        let mut bad = b;
        bad[0] = 9;
        assert_eq!(RequestSession::decode(&bad), Err(ControlError::Command(9)));
    }

    #[test]
    fn slots_carry_gaps_in_32_32_seconds() {
        let s = Slot::from_ns(SlotKind::Fixed, 100_000_000);
        assert_eq!(s.gap, 0x1999_9999);
        assert_eq!(Slot::decode(&s.encode()).unwrap(), s);
        assert_eq!(s.gap_ns(), 99_999_999);
        let mut b = s.encode();
        b[0] = 2;
        assert!(Slot::decode(&b).is_err());
    }

    #[test]
    fn stop_sessions_pad_skip_ranges_to_blocks() {
        let s = StopSession {
            sid: [1; 16],
            next_seq: 200,
            skips: vec![SkipRange { first: 3, last: 4 }],
        };
        let b = s.encode();
        assert_eq!(b.len(), 32);
        assert_eq!(be32(&b, 16), 200);
        assert_eq!(be32(&b, 20), 1);
        assert_eq!((be32(&b, 24), be32(&b, 28)), (3, 4));
        assert_eq!(StopSession::tail_len(0), 16);
        assert_eq!(StopSession::tail_len(2), 32);
    }

    #[test]
    fn a_data_record_round_trips() {
        let r = DataRecord {
            seq: 7,
            send_err: 0x8101,
            recv_err: 0x0001,
            send_time: 5 << 32,
            recv_time: (5 << 32) + 9,
            ttl: 254,
        };
        let mut b = [0u8; 25];
        r.encode(&mut b);
        assert_eq!(DataRecord::decode(&b), r);
        assert!(!r.is_lost());
    }

    #[test]
    fn the_fixed_messages_have_their_rfc_sizes() {
        assert_eq!(
            ServerGreeting::LEN + SetupResponse::LEN + ServerStart::LEN,
            64 + 164 + 48
        );
        let ack = FetchAck {
            accept: 0,
            finished: false,
            next_seq: 9,
            skips: 9,
            records: 3,
        };
        let d = FetchAck::decode(&ack.encode());
        assert_eq!(
            (d.next_seq, d.skips, d.records),
            (0, 0, 3),
            "unfinished sessions carry no counts"
        );
        let g = ServerGreeting {
            modes: 7,
            challenge: [1; 16],
            salt: [2; 16],
            count: 2048,
        };
        assert_eq!(ServerGreeting::decode(&g.encode()), g);
    }
}
