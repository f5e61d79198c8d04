//! The OWAMP and TWAMP clients: owping's and twping's part of the
//! protocols. One control connection per test: Request-Session(s),
//! Start-Sessions, the test packets, Stop-Sessions, and for OWAMP the
//! server's receive log through Fetch-Session. Every count the server
//! sends is bounded by what this client asked for before anything is
//! allocated by it, and every wait has a limit.

use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;
use std::time::Duration;

use goodput_core::owamp::control::{
    pad16, AcceptSession, DataRecord, FetchAck, FetchSession, RequestSession, SkipRange, Slot, StopHeader,
    StopSession,
};
use goodput_core::owamp::crypto::{TestKeys, BLOCK};
use goodput_core::owamp::packet::{self, ReflectorFields, SenderFields};
use goodput_core::owamp::pfs::Key;
use goodput_core::owamp::schedule::Schedule;
use goodput_core::owamp::{Accept, Mode, SEND_TTL};
use goodput_core::stamp::stats::{SignedHistogram, SplitFacts, Tally, Tracker, Verdict};
use goodput_core::stamp::{ntp_from_unix_ns, ErrorEstimate, ReflectorPacket};
use goodput_core::units::PortRange;
use rand::RngCore;
use tokio::io::Interest;
use tokio::net::{TcpStream, UdpSocket};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::conn::{client_handshake, ControlConn, ControlFailure, ServerHello};
use super::endpoint;
use crate::datagram as msg;

/// The largest test packet either side sends, bytes of UDP payload.
pub const MAX_PACKET: usize = 9000;

/// Why a client run failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The control connection could not be opened.
    #[error("cannot connect to {addr}")]
    Connect {
        /// The server.
        addr: SocketAddr,
        /// The cause.
        source: std::io::Error,
    },
    /// The control connection failed (greeting, set-up, a message).
    #[error(transparent)]
    Control(#[from] ControlFailure),
    /// The server refused a session.
    #[error("the server refused the {what} session: Accept code {code}, {}", Accept::describe(*code))]
    Refused {
        /// Which session.
        what: &'static str,
        /// The Accept code.
        code: u8,
    },
    /// A test socket could not be set up.
    #[error("test socket")]
    Socket(#[source] std::io::Error),
    /// The server said something a client cannot accept.
    #[error("{0}")]
    Protocol(String),
}

impl ClientError {
    fn protocol(s: impl Into<String>) -> Self {
        Self::Protocol(s.into())
    }
}

/// Where and how to open the control connection.
#[derive(Debug, Clone)]
pub struct ControlTarget {
    /// The server's control address.
    pub server: SocketAddr,
    /// Local address to connect (and send test packets) from.
    pub bind: Option<IpAddr>,
    /// The mode to ask for.
    pub mode: Mode,
    /// The key of the authenticated modes.
    pub key: Option<Key>,
    /// The longest wait for a control message the server owes.
    pub io_timeout: Duration,
}

/// An open control connection and what the client learned opening it.
pub struct Control {
    /// The connection.
    pub conn: ControlConn<TcpStream>,
    /// The server's greeting and start.
    pub hello: ServerHello,
    /// How long the greeting and set-up took: a bound on the round trip.
    pub setup_time: Duration,
    /// Our end of the control connection.
    pub local: SocketAddr,
}

/// Connects and goes through the greeting and set-up.
pub async fn open_control(t: &ControlTarget) -> Result<Control, ClientError> {
    let connect = async {
        let sock = crate::socket::tcp_socket(&t.server)?;
        if let Some(ip) = t.bind {
            crate::socket::bind_client(&sock, ip, 0)?;
        }
        sock.set_nonblocking(true)?;
        let s = tokio::net::TcpSocket::from_std_stream(sock.into());
        s.connect(t.server).await
    };
    let begun = Instant::now();
    let stream = match tokio::time::timeout(t.io_timeout, connect).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            return Err(ClientError::Connect {
                addr: t.server,
                source: e,
            })
        }
        Err(_) => {
            return Err(ClientError::Connect {
                addr: t.server,
                source: std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("no answer within {:?}", t.io_timeout),
                ),
            })
        }
    };
    let _ = stream.set_nodelay(true);
    let local = stream.local_addr().map_err(ClientError::Socket)?;
    let (conn, hello) = client_handshake(stream, t.mode, t.key.as_ref(), t.io_timeout).await?;
    Ok(Control {
        conn,
        hello,
        setup_time: begun.elapsed(),
        local,
    })
}

/// A SID as owamp's receiver makes one: its IPv4 address (or the last 4
/// octets of its IPv6 one), the time, 4 random octets.
pub fn new_sid(receiver: IpAddr, now_ntp: u64) -> [u8; 16] {
    let mut sid = [0u8; 16];
    match receiver {
        IpAddr::V4(a) => sid[..4].copy_from_slice(&a.octets()),
        IpAddr::V6(a) => sid[..4].copy_from_slice(&a.octets()[12..]),
    }
    sid[4..12].copy_from_slice(&now_ntp.to_be_bytes());
    rand::rngs::OsRng.fill_bytes(&mut sid[12..]);
    sid
}

/// A duration as a 32.32 NTP interval.
pub fn ntp_duration(d: Duration) -> u64 {
    (d.as_secs() << 32) + ((u64::from(d.subsec_nanos()) << 32) / 1_000_000_000)
}

/// A test socket (the engine's endpoint one) on `ip`, a port of `ports`.
fn test_socket(ip: IpAddr, ports: Option<PortRange>, dscp: u8) -> std::io::Result<UdpSocket> {
    let range = ports.filter(|r| !r.is_ephemeral()).map(|r| (r.lo, r.hi));
    Ok(endpoint::test_socket(ip, range, dscp)?.sock)
}

/// When the sessions start: now plus owping's lead (a second, and a round
/// trip per session for the messages still to go), or `wanted` (Unix ns)
/// when that leaves at least the round trips and a tenth of a second; as
/// an NTP timestamp, an instant and Unix nanoseconds.
fn start_time(setup: Duration, sessions: u32, wanted: Option<i64>) -> (u64, Instant, i64) {
    let rtt = setup.min(Duration::from_secs(5));
    let needed = Duration::from_millis(100) + rtt * (1 + sessions);
    let lead = Duration::from_secs(1) + rtt * (1 + sessions);
    let now_ns = msg::now_unix_ns();
    let at_ns = match wanted {
        Some(w) if w >= now_ns + needed.as_nanos() as i64 => w,
        _ => now_ns + lead.as_nanos() as i64,
    };
    let wait = Duration::from_nanos((at_ns - now_ns).max(0) as u64);
    (ntp_from_unix_ns(at_ns), Instant::now() + wait, at_ns)
}

async fn request(
    conn: &mut ControlConn<TcpStream>,
    req: &RequestSession,
    slots: &[Slot],
    what: &'static str,
) -> Result<AcceptSession, ClientError> {
    let mut b = req.encode();
    conn.send(&mut b).await?;
    if !req.twoway {
        let mut blocks: Vec<u8> = slots.iter().flat_map(|s| s.encode()).collect();
        conn.send_blocks(&mut blocks).await?;
        conn.send_hmac().await?;
    }
    let a = AcceptSession::decode(&conn.recv::<{ AcceptSession::LEN }>().await?);
    if a.accept != Accept::Ok.byte() {
        return Err(ClientError::Refused { what, code: a.accept });
    }
    Ok(a)
}

async fn start(conn: &mut ControlConn<TcpStream>) -> Result<(), ClientError> {
    let mut s = goodput_core::owamp::control::start_sessions();
    conn.send(&mut s).await?;
    let ack: [u8; 32] = conn.recv().await?;
    if ack[0] != Accept::Ok.byte() {
        return Err(ClientError::Refused {
            what: "start of the",
            code: ack[0],
        });
    }
    Ok(())
}

// ---------------------------------------------------------------- TWAMP

/// A TWAMP test as twping runs it.
#[derive(Debug, Clone)]
pub struct TwampRequest {
    /// Packets.
    pub count: u32,
    /// Time between packets.
    pub interval: Duration,
    /// Padding after the sender's header, bytes.
    pub padding: u32,
    /// DSCP.
    pub dscp: u8,
    /// A reflection not back this long after its packet left is lost.
    pub timeout: Duration,
    /// Local UDP ports to choose from.
    pub test_ports: Option<PortRange>,
}

/// What a TWAMP session measured.
#[derive(Debug, Clone)]
pub struct TwampOutcome {
    /// The session's SID (the server's).
    pub sid: [u8; 16],
    /// Our test address.
    pub sender: SocketAddr,
    /// The reflector's test address.
    pub reflector: SocketAddr,
    /// The mode used.
    pub mode: Mode,
    /// Packets, replies and delays, with the loss split by the
    /// reflector's own sequence numbers.
    pub tally: Tally,
    /// T3 − T2 of each first reply, nanoseconds.
    pub processing: SignedHistogram,
    /// Our clock when the session started.
    pub clock: ErrorEstimate,
    /// Send time of the first packet, Unix nanoseconds.
    pub first_ns: Option<i64>,
    /// Send time of the last packet, Unix nanoseconds.
    pub last_ns: Option<i64>,
    /// The session was cut short by the cancel token.
    pub interrupted: bool,
}

/// Runs one TWAMP session to `target` and stops it.
pub async fn run_twamp(
    target: &ControlTarget,
    req: &TwampRequest,
    cancel: CancellationToken,
) -> Result<TwampOutcome, ClientError> {
    let mut c = open_control(target).await?;
    let local_ip = target.bind.unwrap_or(c.local.ip());
    let sock = test_socket(local_ip, req.test_ports, req.dscp).map_err(ClientError::Socket)?;
    let local = sock.local_addr().map_err(ClientError::Socket)?;
    let (start_ntp, start_at, _) = start_time(c.setup_time, 1, None);
    let rq = RequestSession {
        twoway: true,
        conf_sender: false,
        conf_receiver: false,
        slots: 0,
        packets: 0,
        sender_port: local.port(),
        receiver_port: local.port(),
        sender: local_ip,
        receiver: target.server.ip(),
        sid: [0; 16],
        padding: req.padding,
        start_time: start_ntp,
        timeout: ntp_duration(req.timeout),
        type_p: RequestSession::type_p_of(req.dscp),
    };
    let a = request(&mut c.conn, &rq, &[], "TWAMP test").await?;
    if a.port == 0 {
        return Err(ClientError::protocol(
            "the server accepted the session with reflector port 0",
        ));
    }
    let reflector = SocketAddr::new(target.server.ip(), a.port);
    let mode = c.conn.mode;
    let keys = match (&c.conn.keys, mode.is_secured()) {
        (Some(k), true) => Some(TestKeys::derive(k, &a.sid)),
        _ => None,
    };
    start(&mut c.conn).await?;
    sock.connect(reflector).await.map_err(ClientError::Socket)?;
    let mut out = TwampOutcome {
        sid: a.sid,
        sender: local,
        reflector,
        mode,
        tally: Tally::default(),
        processing: SignedHistogram::default(),
        clock: msg::clock_error(),
        first_ns: None,
        last_ns: None,
        interrupted: false,
    };
    twamp_session(&sock, req, mode, keys.as_ref(), start_at, &mut out, &cancel).await;
    // Stop-Sessions: one session, no records, its HMAC.
    let mut stop = [0u8; 32];
    stop[..BLOCK].copy_from_slice(
        &StopHeader {
            accept: if out.interrupted {
                Accept::Failure.byte()
            } else {
                Accept::Ok.byte()
            },
            sessions: 1,
        }
        .encode(),
    );
    c.conn.send(&mut stop).await?;
    Ok(out)
}

fn reflector_packet(f: &ReflectorFields) -> ReflectorPacket {
    ReflectorPacket {
        seq: f.seq,
        timestamp: f.timestamp,
        error: ErrorEstimate::from_u16(f.error),
        ssid: 0,
        receive_timestamp: f.receive_timestamp,
        sender_seq: f.sender_seq,
        sender_timestamp: f.sender_timestamp,
        sender_error: ErrorEstimate::from_u16(f.sender_error),
        sender_ttl: f.sender_ttl,
    }
}

async fn twamp_session(
    sock: &UdpSocket,
    req: &TwampRequest,
    mode: Mode,
    keys: Option<&TestKeys>,
    start_at: Instant,
    out: &mut TwampOutcome,
    cancel: &CancellationToken,
) {
    let len = (packet::sender_header(mode) + req.padding as usize).min(MAX_PACKET);
    let mut buf = vec![0u8; len];
    rand::rngs::OsRng.fill_bytes(&mut buf);
    // A reflection is as long as the packet or the reflector's header.
    let mut inb = vec![0u8; packet::reflected_len(mode, len) + 64];
    let timeout_ns = req.timeout.as_nanos() as i64;
    // twampd numbers the packets it reflects itself: loss splits by way.
    let mut tracker = Tracker::new(timeout_ns, 0).with_stateful_reflector();
    let error = out.clock;
    let mut sent = 0u32;
    let mut next = start_at;
    let mut drain_until: Option<Instant> = None;
    let mut expiry = tokio::time::interval(Duration::from_millis(50));
    let tally = &mut out.tally;
    loop {
        if sent >= req.count && drain_until.is_none() {
            drain_until = Some(Instant::now() + req.timeout);
        }
        if drain_until.is_some() && tracker.pending() == 0 {
            break;
        }
        tokio::select! {
            _ = cancel.cancelled() => {
                tally.sent -= tracker.abandon() as u64;
                out.interrupted = true;
                break;
            }
            _ = tokio::time::sleep_until(drain_until.unwrap_or(next)), if drain_until.is_some() => break,
            _ = tokio::time::sleep_until(next), if drain_until.is_none() => {
                let t1 = msg::now_unix_ns();
                let f = SenderFields {
                    seq: tracker.next_seq(),
                    timestamp: ntp_from_unix_ns(t1),
                    error: error.to_u16(),
                };
                packet::write_sender(mode, keys, &f, &mut buf);
                match sock.send(&buf).await {
                    Ok(_) => {
                        tracker.sent(t1);
                        tally.sent += 1;
                    }
                    Err(e) => {
                        // Refused (a firewall's drop on the way out, a
                        // full queue): it never left, so it is not sent,
                        // and a measurement lost. Its number is used again.
                        let (reason, message) = msg::send_failure_reason(&e);
                        tally.not_sent(1, &reason, &message);
                    }
                }
                out.first_ns.get_or_insert(t1);
                out.last_ns = Some(t1);
                sent += 1;
                next += req.interval;
            }
            r = sock.readable() => {
                if r.is_err() {
                    continue;
                }
                loop {
                    let got = sock.try_io(Interest::READABLE, || {
                        msg::recv_one(sock.as_raw_fd(), &mut inb)
                            .and_then(|m| m.ok_or_else(|| std::io::ErrorKind::WouldBlock.into()))
                    });
                    let meta = match got {
                        Ok(m) => m,
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                        Err(_) => break,
                    };
                    let n = meta.len.min(inb.len());
                    let Some(f) = packet::read_reflector(mode, keys, &mut inb[..n]) else {
                        tally.unmatched += 1;
                        continue;
                    };
                    let t4 = meta.t_ns.unwrap_or_else(msg::now_unix_ns);
                    let v = tracker.reply(&reflector_packet(&f), t4, meta.ttl, error);
                    if let Verdict::First(s) = &v {
                        out.processing.record(s.t[2] - s.t[1]);
                    }
                    tally.verdict(&v, 0, 0);
                }
            }
            _ = expiry.tick() => {
                tally.lost(tracker.expire(msg::now_unix_ns()).len() as u64);
            }
        }
    }
    if !out.interrupted {
        tally.lost(tracker.expire_all().len() as u64);
    }
    let split: SplitFacts = tracker.split();
    tally.finish_session(split);
}

// ---------------------------------------------------------------- OWAMP

/// An OWAMP test as owping runs it.
#[derive(Debug, Clone)]
pub struct OwampRequest {
    /// Packets per session.
    pub count: u32,
    /// The schedule's slots (one: fixed or exponential interval).
    pub slots: Vec<Slot>,
    /// Padding after the header, bytes.
    pub padding: u32,
    /// DSCP.
    pub dscp: u8,
    /// A packet not there this long after its scheduled time is lost.
    pub timeout: Duration,
    /// Local UDP ports to choose from.
    pub test_ports: Option<PortRange>,
    /// A session from us to the server.
    pub to: bool,
    /// A session from the server to us.
    pub from: bool,
    /// Start Time, Unix nanoseconds (none: owping's lead from now; a
    /// time too near for the messages still to go is replaced by that).
    pub start_unix_ns: Option<i64>,
}

impl OwampRequest {
    /// The most data records a server may return for a session: every
    /// packet, and duplicates up to as many again (a log longer than that
    /// is refused, not allocated).
    pub fn max_records(&self) -> u64 {
        u64::from(self.count) * 2 + 16
    }
}

/// One OWAMP session, negotiated.
#[derive(Debug, Clone)]
pub struct SessionPlan {
    /// The SID.
    pub sid: [u8; 16],
    /// The sender's test address.
    pub sender: SocketAddr,
    /// The receiver's test address.
    pub receiver: SocketAddr,
    /// Start Time (NTP).
    pub start_time: u64,
    /// Start Time, Unix nanoseconds.
    pub start_unix_ns: i64,
    /// The test packets' keys (authenticated modes).
    pub keys: Option<TestKeys>,
}

/// What the sender of a session reports at its end.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SenderEnd {
    /// The next sequence number it would have sent.
    pub next_seq: u32,
    /// Packets it scheduled and did not send.
    pub skips: Vec<SkipRange>,
}

/// One direction's outcome: its plan and the receiver's log.
#[derive(Debug, Clone)]
pub struct OneWayOutcome {
    /// The session.
    pub plan: SessionPlan,
    /// The receiver's data records in arrival order.
    pub records: Vec<DataRecord>,
    /// The sender's end.
    pub end: SenderEnd,
}

/// What an OWAMP test measured.
#[derive(Debug, Clone)]
pub struct OwampOutcome {
    /// The mode used.
    pub mode: Mode,
    /// Our clock when the sessions started.
    pub clock: ErrorEstimate,
    /// The session from us to the server.
    pub to: Option<OneWayOutcome>,
    /// The session from the server to us.
    pub from: Option<OneWayOutcome>,
    /// The sessions were cut short by the cancel token.
    pub interrupted: bool,
}

/// The data path both directions use, the engine's OWAMP endpoints.
pub trait Endpoints {
    /// Sends the session's packets on `sock` to the plan's receiver.
    fn send(
        &self,
        sock: UdpSocket,
        plan: &SessionPlan,
        req: &OwampRequest,
        mode: Mode,
        cancel: CancellationToken,
    ) -> impl std::future::Future<Output = SenderEnd> + Send;
    /// Receives the session's packets on `sock` from the plan's sender.
    fn receive(
        &self,
        sock: UdpSocket,
        plan: &SessionPlan,
        req: &OwampRequest,
        mode: Mode,
        cancel: CancellationToken,
    ) -> impl std::future::Future<Output = Vec<DataRecord>> + Send;
}

/// The engine's OWAMP endpoints ([`endpoint`]): the sender on the
/// session's schedule, and the receiver logging the session's packets
/// until the last one's time plus the timeout.
#[derive(Debug, Clone, Copy, Default)]
pub struct EngineEndpoints;

impl Endpoints for EngineEndpoints {
    async fn send(
        &self,
        sock: UdpSocket,
        plan: &SessionPlan,
        req: &OwampRequest,
        mode: Mode,
        cancel: CancellationToken,
    ) -> SenderEnd {
        let Ok(schedule) = Schedule::new(&plan.sid, &req.slots) else {
            return SenderEnd::default();
        };
        let send = endpoint::SendPlan {
            peer: plan.receiver,
            mode,
            keys: plan.keys.clone(),
            padding: req.padding as usize,
            packets: req.count,
            gaps: gaps(schedule),
            start_ns: plan.start_unix_ns,
            timeout_ns: req.timeout.as_nanos() as i64,
        };
        let out = endpoint::send_session(&sock, send, &cancel).await;
        SenderEnd {
            next_seq: out.next_seq,
            skips: out.skips,
        }
    }

    async fn receive(
        &self,
        sock: UdpSocket,
        plan: &SessionPlan,
        req: &OwampRequest,
        mode: Mode,
        cancel: CancellationToken,
    ) -> Vec<DataRecord> {
        let Ok(last) = Schedule::offset_ns(&plan.sid, &req.slots, req.count.saturating_sub(1)) else {
            return Vec::new();
        };
        let recv = endpoint::RecvPlan {
            peer: plan.sender,
            mode,
            keys: plan.keys.clone(),
            padding: req.padding as usize,
            packets: req.count,
            max_records: req.max_records() as usize,
        };
        let stop = cancel.child_token();
        let deadline = instant_of(plan, last) + req.timeout;
        let timer = stop.clone();
        let ends = tokio::spawn(async move {
            tokio::time::sleep_until(deadline).await;
            timer.cancel();
        });
        let mut records = endpoint::receive_session(&sock, &recv, &stop).await.records;
        ends.abort();
        lost_records(&mut records, plan, req);
        records
    }
}

/// The schedule's gaps in nanoseconds, taken as differences of the exact
/// 32.32 offsets so that rounding never adds up over a long session.
fn gaps(mut schedule: Schedule) -> endpoint::Gaps {
    let mut prev = 0u64;
    Box::new(std::iter::from_fn(move || {
        let at = schedule.next_offset_ns();
        let gap = at.saturating_sub(prev);
        prev = at;
        Some(gap)
    }))
}

/// When a session's offset (ns after Start Time) falls, as an instant.
fn instant_of(plan: &SessionPlan, offset_ns: u64) -> Instant {
    let at = plan.start_unix_ns.saturating_add(offset_ns as i64);
    let wait = at - msg::now_unix_ns();
    if wait > 0 {
        Instant::now() + Duration::from_nanos(wait as u64)
    } else {
        Instant::now()
    }
}

/// Adds a lost record (receive time zero, at its scheduled send time) for
/// every packet of the session that never came, walking the schedule once;
/// one bit per packet remembers what came.
fn lost_records(records: &mut Vec<DataRecord>, plan: &SessionPlan, req: &OwampRequest) {
    let mut seen = vec![0u64; (req.count as usize).div_ceil(64)];
    for r in records.iter().filter(|r| r.seq < req.count) {
        seen[r.seq as usize / 64] |= 1 << (r.seq % 64);
    }
    let Ok(mut schedule) = Schedule::new(&plan.sid, &req.slots) else {
        return;
    };
    let max = req.max_records() as usize;
    for seq in 0..req.count {
        let off = schedule.next_offset_ns();
        if seen[seq as usize / 64] & (1 << (seq % 64)) == 0 && records.len() < max {
            records.push(DataRecord {
                seq,
                send_err: 0x0001,
                recv_err: 0x0001,
                send_time: ntp_from_unix_ns(plan.start_unix_ns.saturating_add(off as i64)),
                recv_time: 0,
                ttl: SEND_TTL,
            });
        }
    }
}

/// Runs an OWAMP test: the sessions asked for, their Stop-Sessions, and
/// the server's log of the session it received.
pub async fn run_owamp<E: Endpoints>(
    target: &ControlTarget,
    req: &OwampRequest,
    endpoints: &E,
    cancel: CancellationToken,
) -> Result<OwampOutcome, ClientError> {
    if req.slots.is_empty() || req.count == 0 || !(req.to || req.from) {
        return Err(ClientError::protocol(
            "an OWAMP test needs a slot, a packet and a direction",
        ));
    }
    let mut c = open_control(target).await?;
    let local_ip = target.bind.unwrap_or(c.local.ip());
    let server_ip = target.server.ip();
    let sessions = u32::from(req.to) + u32::from(req.from);
    let (start_ntp, _, start_ns) = start_time(c.setup_time, sessions, req.start_unix_ns);
    let mode = c.conn.mode;
    let keys_for = |sid: &[u8; 16], c: &Control| match (&c.conn.keys, mode.is_secured()) {
        (Some(k), true) => Some(TestKeys::derive(k, sid)),
        _ => None,
    };
    let base = RequestSession {
        twoway: false,
        conf_sender: false,
        conf_receiver: false,
        slots: req.slots.len() as u32,
        packets: req.count,
        sender_port: 0,
        receiver_port: 0,
        sender: local_ip,
        receiver: server_ip,
        sid: [0; 16],
        padding: req.padding,
        start_time: start_ntp,
        timeout: ntp_duration(req.timeout),
        type_p: RequestSession::type_p_of(req.dscp),
    };
    let mut to = None;
    if req.to {
        let sock = test_socket(local_ip, req.test_ports, req.dscp).map_err(ClientError::Socket)?;
        let local = sock.local_addr().map_err(ClientError::Socket)?;
        let rq = RequestSession {
            conf_receiver: true,
            sender_port: local.port(),
            ..base.clone()
        };
        let a = request(&mut c.conn, &rq, &req.slots, "to").await?;
        if a.port == 0 {
            return Err(ClientError::protocol(
                "the server accepted the session with receiver port 0",
            ));
        }
        let plan = SessionPlan {
            sid: a.sid,
            sender: local,
            receiver: SocketAddr::new(server_ip, a.port),
            start_time: start_ntp,
            start_unix_ns: start_ns,
            keys: keys_for(&a.sid, &c),
        };
        to = Some((sock, plan));
    }
    let mut from = None;
    if req.from {
        let sock = test_socket(local_ip, req.test_ports, req.dscp).map_err(ClientError::Socket)?;
        let local = sock.local_addr().map_err(ClientError::Socket)?;
        let sid = new_sid(local_ip, ntp_from_unix_ns(msg::now_unix_ns()));
        let rq = RequestSession {
            conf_sender: true,
            receiver_port: local.port(),
            sender: server_ip,
            receiver: local_ip,
            sid,
            ..base.clone()
        };
        let a = request(&mut c.conn, &rq, &req.slots, "from").await?;
        if a.port == 0 {
            return Err(ClientError::protocol(
                "the server accepted the session with sender port 0",
            ));
        }
        if a.sid != sid {
            return Err(ClientError::protocol(
                "the server answered the from session with another SID",
            ));
        }
        let plan = SessionPlan {
            sid,
            sender: SocketAddr::new(server_ip, a.port),
            receiver: local,
            start_time: start_ntp,
            start_unix_ns: start_ns,
            keys: keys_for(&sid, &c),
        };
        from = Some((sock, plan));
    }
    start(&mut c.conn).await?;
    let clock = msg::clock_error();
    let (to_sock, to) = match to {
        Some((s, p)) => (Some(s), Some(p)),
        None => (None, None),
    };
    let (from_sock, from) = match from {
        Some((s, p)) => (Some(s), Some(p)),
        None => (None, None),
    };
    let send = async {
        match (to_sock, &to) {
            (Some(sock), Some(plan)) => Some(endpoints.send(sock, plan, req, mode, cancel.clone()).await),
            _ => None,
        }
    };
    let receive = async {
        match (from_sock, &from) {
            (Some(sock), Some(plan)) => Some(endpoints.receive(sock, plan, req, mode, cancel.clone()).await),
            _ => None,
        }
    };
    let (sent, received) = tokio::join!(send, receive);
    // As owamp's sender does: Stop-Sessions only once the last packet's
    // scheduled time plus the timeout has passed, so that the receiver
    // has it (owampd counts what is not in when Stop-Sessions comes as
    // lost).
    if let Some(plan) = &to {
        let last = Schedule::offset_ns(&plan.sid, &req.slots, req.count - 1).unwrap_or(0);
        tokio::select! {
            _ = cancel.cancelled() => {}
            _ = tokio::time::sleep_until(instant_of(plan, last) + req.timeout) => {}
        }
    }
    let interrupted = cancel.is_cancelled();
    // Our Stop-Sessions: the session we sent, with where its sender got to.
    let mut head = StopHeader {
        accept: if interrupted {
            Accept::Failure.byte()
        } else {
            Accept::Ok.byte()
        },
        sessions: u32::from(sent.is_some()),
    }
    .encode();
    c.conn.send_blocks(&mut head).await?;
    if let (Some(plan), Some(end)) = (&to, &sent) {
        let mut rec = StopSession {
            sid: plan.sid,
            next_seq: end.next_seq,
            skips: end.skips.clone(),
        }
        .encode();
        c.conn.send_blocks(&mut rec).await?;
    }
    c.conn.send_hmac().await?;
    // The server's: where its sender got to (owampd sends one even with
    // no session of its own).
    // Cut short, the server's sender may still be at it: take what came,
    // up to the highest number seen, and do not wait for its Stop.
    let server_end = if interrupted {
        None
    } else {
        read_stop(&mut c.conn, req, from.as_ref().map(|p| p.sid)).await?
    };
    let from = match (from, received) {
        (Some(plan), Some(records)) => {
            let seen = records
                .iter()
                .filter(|r| !r.is_lost())
                .map(|r| r.seq + 1)
                .max()
                .unwrap_or(0);
            Some(OneWayOutcome {
                plan,
                records,
                end: server_end.unwrap_or(SenderEnd {
                    next_seq: if interrupted { seen } else { req.count },
                    skips: Vec::new(),
                }),
            })
        }
        _ => None,
    };
    let to = match (to, sent) {
        (Some(plan), Some(end)) if !interrupted => {
            let records = fetch(&mut c.conn, req, &plan.sid).await?;
            Some(OneWayOutcome { plan, records, end })
        }
        (Some(plan), Some(end)) => Some(OneWayOutcome {
            plan,
            records: Vec::new(),
            end,
        }),
        _ => None,
    };
    Ok(OwampOutcome {
        mode,
        clock,
        to,
        from,
        interrupted,
    })
}

/// Reads the server's Stop-Sessions; returns its sender's end for
/// `from_sid` when that session is in it.
async fn read_stop(
    conn: &mut ControlConn<TcpStream>,
    req: &OwampRequest,
    from_sid: Option<[u8; 16]>,
) -> Result<Option<SenderEnd>, ClientError> {
    // The server's sender may still be a timeout behind ours.
    let wait = conn.read_timeout + req.timeout;
    let first = conn.recv_first_block(wait).await?;
    let head = StopHeader::decode(&first)
        .map_err(|e| ClientError::protocol(format!("instead of Stop-Sessions: {e}")))?;
    if head.sessions > u32::from(from_sid.is_some()) {
        return Err(ClientError::protocol(format!(
            "the server's Stop-Sessions names {} sending sessions; it has at most {}",
            head.sessions,
            u32::from(from_sid.is_some())
        )));
    }
    let mut found = None;
    for _ in 0..head.sessions {
        let mut b = [0u8; 2 * BLOCK];
        conn.recv_blocks(&mut b).await?;
        let sid: [u8; 16] = b[..16].try_into().expect("16 octets");
        let next_seq = u32::from_be_bytes(b[16..20].try_into().expect("4 octets"));
        let n = u32::from_be_bytes(b[20..24].try_into().expect("4 octets"));
        if next_seq > req.count || n > req.count {
            return Err(ClientError::protocol(format!(
                "the server's Stop-Sessions says {next_seq} packets and {n} skip ranges; the session had {}",
                req.count
            )));
        }
        let mut raw = b[24..32].to_vec();
        let more = StopSession::tail_len(n as usize) - BLOCK;
        if more > 0 {
            let mut rest = vec![0u8; more];
            conn.recv_blocks(&mut rest).await?;
            raw.extend_from_slice(&rest);
        }
        let skips = raw
            .chunks_exact(8)
            .take(n as usize)
            .map(|c| SkipRange {
                first: u32::from_be_bytes(c[..4].try_into().expect("4 octets")),
                last: u32::from_be_bytes(c[4..].try_into().expect("4 octets")),
            })
            .collect();
        if Some(sid) == from_sid {
            found = Some(SenderEnd { next_seq, skips });
        }
    }
    conn.recv_hmac().await?;
    Ok(found)
}

/// Fetch-Session for the whole session: its records in arrival order.
async fn fetch(
    conn: &mut ControlConn<TcpStream>,
    req: &OwampRequest,
    sid: &[u8; 16],
) -> Result<Vec<DataRecord>, ClientError> {
    let mut f = FetchSession {
        begin: 0,
        end: u32::MAX,
        sid: *sid,
    }
    .encode();
    conn.send(&mut f).await?;
    let ack = FetchAck::decode(&conn.recv::<{ FetchAck::LEN }>().await?);
    if ack.accept != Accept::Ok.byte() {
        return Err(ClientError::Refused {
            what: "fetch of the to",
            code: ack.accept,
        });
    }
    if u64::from(ack.records) > req.max_records() || ack.skips > req.count {
        return Err(ClientError::protocol(format!(
            "the server offers {} records and {} skip ranges for a session of {} packets",
            ack.records, ack.skips, req.count
        )));
    }
    // The session's request as the server kept it, and its slots.
    let mut rq = [0u8; RequestSession::LEN];
    conn.recv_blocks(&mut rq[..RequestSession::LEN - BLOCK]).await?;
    conn.recv_hmac().await?;
    let echoed = RequestSession::decode(&rq)
        .map_err(|e| ClientError::protocol(format!("the fetched session's request: {e}")))?;
    if echoed.sid != *sid || echoed.slots as usize != req.slots.len() {
        return Err(ClientError::protocol(format!(
            "the fetched session is not the one asked for ({} slots)",
            echoed.slots
        )));
    }
    let mut slots = vec![0u8; req.slots.len() * BLOCK];
    conn.recv_blocks(&mut slots).await?;
    conn.recv_hmac().await?;
    let mut skips = vec![0u8; pad16(ack.skips as usize * 8)];
    conn.recv_blocks(&mut skips).await?;
    conn.recv_hmac().await?;
    // Records, 16 (25 blocks) at a time.
    let n = ack.records as usize;
    let mut records = Vec::with_capacity(n);
    let mut chunk = [0u8; 400];
    let mut left = n;
    while left > 0 {
        let k = left.min(16);
        let len = if k == 16 { 400 } else { pad16(k * DataRecord::LEN) };
        conn.recv_blocks(&mut chunk[..len]).await?;
        records.extend(
            chunk[..k * DataRecord::LEN]
                .chunks_exact(DataRecord::LEN)
                .map(DataRecord::decode),
        );
        left -= k;
    }
    conn.recv_hmac().await?;
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sid_names_its_receiver_and_time() {
        let sid = new_sid("127.0.0.1".parse().unwrap(), 0xeeb4_8dff_c144_bb1a);
        assert_eq!(
            &sid[..12],
            &[127, 0, 0, 1, 0xee, 0xb4, 0x8d, 0xff, 0xc1, 0x44, 0xbb, 0x1a]
        );
        let v6 = new_sid("2001:db8::c0a8:1".parse().unwrap(), 0);
        assert_eq!(&v6[..4], &[0xc0, 0xa8, 0, 1]);
    }

    /// A scripted OWAMP server on loopback: accepts or refuses the
    /// request with `accept`, then answers Fetch-Session with a Fetch-Ack
    /// offering `records` records (and nothing after it).
    async fn scripted_server(accept: u8, records: u32) -> SocketAddr {
        use super::super::conn::{server_handshake, ServerPolicy};
        use goodput_core::owamp::control::start_ack;
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let sink = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = sink.local_addr().unwrap().port();
        tokio::spawn(async move {
            let _sink = sink;
            let (s, _) = l.accept().await.unwrap();
            let policy = ServerPolicy {
                modes: 1,
                keys: Vec::new(),
                count: 1024,
            };
            let t = Duration::from_secs(5);
            let (mut c, _) = server_handshake(s, &policy, 0, t).await.unwrap();
            let rq: [u8; RequestSession::LEN] = c.recv().await.unwrap();
            let n = RequestSession::decode(&rq).unwrap().slots as usize;
            let mut slots = vec![0u8; n * BLOCK];
            c.recv_blocks(&mut slots).await.unwrap();
            c.recv_hmac().await.unwrap();
            let mut a = AcceptSession {
                accept,
                port: if accept == 0 { port } else { 0 },
                sid: [7; 16],
            }
            .encode();
            c.send(&mut a).await.unwrap();
            if accept != 0 {
                return;
            }
            let _: [u8; 32] = c.recv().await.unwrap();
            c.send(&mut start_ack(0)).await.unwrap();
            // The client's Stop-Sessions (one session, no skips), then ours.
            let _ = c.recv_first_block(t).await.unwrap();
            let mut rec = [0u8; 2 * BLOCK];
            c.recv_blocks(&mut rec).await.unwrap();
            c.recv_hmac().await.unwrap();
            let mut head = StopHeader {
                accept: 0,
                sessions: 0,
            }
            .encode();
            c.send_blocks(&mut head).await.unwrap();
            c.send_hmac().await.unwrap();
            let _: [u8; FetchSession::LEN] = c.recv().await.unwrap();
            let mut ack = FetchAck {
                accept: 0,
                finished: true,
                next_seq: 2,
                skips: 0,
                records,
            }
            .encode();
            c.send(&mut ack).await.unwrap();
            tokio::time::sleep(Duration::from_secs(5)).await;
        });
        addr
    }

    fn request_of(count: u32) -> OwampRequest {
        OwampRequest {
            count,
            slots: vec![Slot::from_ns(
                goodput_core::owamp::control::SlotKind::Fixed,
                1_000_000,
            )],
            padding: 0,
            dscp: 0,
            timeout: Duration::from_millis(100),
            test_ports: None,
            to: true,
            from: false,
            start_unix_ns: None,
        }
    }

    fn target(server: SocketAddr) -> ControlTarget {
        ControlTarget {
            server,
            bind: None,
            mode: Mode::Open,
            key: None,
            io_timeout: Duration::from_secs(5),
        }
    }

    #[tokio::test]
    async fn a_refused_session_names_its_accept_code() {
        let server = scripted_server(Accept::TemporaryLimit.byte(), 0).await;
        let e = run_owamp(
            &target(server),
            &request_of(2),
            &EngineEndpoints,
            CancellationToken::new(),
        )
        .await
        .unwrap_err();
        assert!(matches!(e, ClientError::Refused { what: "to", code: 5 }), "{e}");
        assert!(e.to_string().contains("temporary resource limitation"), "{e}");
    }

    #[tokio::test]
    async fn a_fetch_offering_more_records_than_packets_is_refused_unread() {
        let server = scripted_server(0, 1_000_000_000).await;
        let e = run_owamp(
            &target(server),
            &request_of(2),
            &EngineEndpoints,
            CancellationToken::new(),
        )
        .await
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("offers 1000000000 records and 0 skip ranges for a session of 2 packets"),
            "{e}"
        );
    }

    #[test]
    fn durations_become_32_32_seconds() {
        assert_eq!(ntp_duration(Duration::from_secs(2)), 2 << 32);
        assert_eq!(ntp_duration(Duration::from_millis(100)), 0x1999_9999);
    }
}
