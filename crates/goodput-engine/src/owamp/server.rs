//! The OWAMP and TWAMP servers (owampd's and twampd's part of `goodput
//! server`): one TCP listener per address, a task per control connection
//! under connection limits, the set-up of [`conn::server_handshake`], then
//! the request loop. Every number a client sends is bounded before it is
//! used; every refusal is an Accept code the client understands and a
//! counted reason.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use goodput_core::owamp::control::{
    self, AcceptSession, Command, ControlError, DataRecord, FetchAck, FetchSession, RequestSession,
    ServerGreeting, SkipRange, Slot, StopHeader, StopSession,
};
use goodput_core::owamp::crypto::{TestKeys, BLOCK};
use goodput_core::owamp::packet;
use goodput_core::owamp::schedule::Schedule;
use goodput_core::owamp::{Accept, Mode};
use goodput_core::result::OwampServerCounters;
use goodput_core::stamp::{ntp_from_unix_ns, unix_ns_from_ntp, Cidr};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::conn::{self, ControlConn, ControlFailure, ServerPolicy};
use super::endpoint::{self, Received, RecvPlan, SendOutcome, SendPlan, TestSocket};
use super::reflector::{self, ReflectorSession};
use crate::EngineError;

/// What one client may ask of the server, and how long it may idle.
#[derive(Debug, Clone)]
pub struct SessionLimits {
    /// Control connections open at once.
    pub max_connections: usize,
    /// Control connections open at once from one client address.
    pub max_per_client: usize,
    /// A control connection silent this long, before its sessions start
    /// or after they have ended, is closed (the set-up included).
    pub control_timeout: Duration,
    /// Sessions one client address may hold at once.
    pub max_sessions: usize,
    /// Packets one OWAMP session may have.
    pub max_packets: u32,
    /// Schedule slots one OWAMP session may have.
    pub max_slots: u32,
    /// Octets of padding a test packet may carry.
    pub max_padding: u32,
    /// The longest Timeout a session may ask for.
    pub max_timeout: Duration,
    /// How far ahead a session may start.
    pub max_start_ahead: Duration,
    /// How long ago a session may have started.
    pub max_start_behind: Duration,
    /// Bits per second one client address may have sent or reflected
    /// (IP and UDP headers counted; 0: no limit).
    pub max_bits_per_second: u64,
    /// Memory all OWAMP receive logs may hold, octets.
    pub max_log_memory: u64,
    /// How long a finished receive log is kept for Fetch-Session.
    pub log_keep: Duration,
    /// A TWAMP session whose sender has been silent this long ends.
    pub reflector_idle: Duration,
}

impl Default for SessionLimits {
    fn default() -> Self {
        Self {
            max_connections: 64,
            max_per_client: 8,
            control_timeout: Duration::from_secs(30),
            max_sessions: 16,
            max_packets: 100_000,
            max_slots: 1024,
            max_padding: (endpoint::MAX_TEST_PACKET - 112) as u32,
            max_timeout: Duration::from_secs(60),
            max_start_ahead: Duration::from_secs(300),
            max_start_behind: Duration::from_secs(86_400),
            max_bits_per_second: 100_000_000,
            max_log_memory: 64 << 20,
            log_keep: Duration::from_secs(300),
            reflector_idle: Duration::from_secs(120),
        }
    }
}

/// How to run one OWAMP or TWAMP server.
#[derive(Debug, Clone)]
pub struct ControlServerSpec {
    /// TWAMP (Request-TW-Session, a reflector per session) rather than
    /// OWAMP.
    pub twoway: bool,
    /// Addresses of the control listeners (IPv6 ones are v6-only).
    pub listen: Vec<SocketAddr>,
    /// Modes and keys offered at set-up.
    pub policy: ServerPolicy,
    /// Client addresses served (empty: every address).
    pub allow: Vec<Cidr>,
    /// UDP ports of test sessions, both ends included (`None`: any).
    pub test_ports: Option<(u16, u16)>,
    /// The limits.
    pub limits: SessionLimits,
}

/// A server with its listeners bound.
pub struct BoundControlServer {
    spec: ControlServerSpec,
    listeners: Vec<TcpListener>,
}

/// Binds the server's control listeners (so a port in use is reported at
/// start).
pub fn bind_control_server(spec: ControlServerSpec) -> Result<BoundControlServer, EngineError> {
    let mut listeners = Vec::new();
    for &addr in &spec.listen {
        let l = crate::socket::tcp_listener(addr, false, addr.is_ipv6(), 1024)
            .map_err(|source| EngineError::Listen { addr, source })?;
        listeners.push(TcpListener::from_std(l).map_err(|source| EngineError::Listen { addr, source })?);
    }
    Ok(BoundControlServer { spec, listeners })
}

/// What the whole server shares: its spec, counters, the clients' use and
/// the kept receive logs.
struct Shared {
    spec: ControlServerSpec,
    started_ntp: u64,
    counters: Mutex<OwampServerCounters>,
    clients: Mutex<HashMap<IpAddr, ClientUse>>,
    connections: Mutex<usize>,
    /// The server's end; every session's token is a child of it.
    cancel: CancellationToken,
    /// Every session's task, waited for before the counters are read.
    tasks: TaskTracker,
    /// OWAMP receive logs by SID, kept for Fetch-Session.
    logs: Mutex<HashMap<[u8; 16], Arc<ReceiveLog>>>,
    /// Octets of memory the receive logs have reserved.
    log_bytes: Mutex<u64>,
}

/// What an OWAMP receive session keeps for Fetch-Session: the request as
/// accepted (port and SID filled in), its slots, and once the session has
/// ended, its records and the sender's Stop-Sessions figures.
struct ReceiveLog {
    request: RequestSession,
    slots: Vec<Slot>,
    /// Octets reserved in the memory budget, given back when it expires.
    reserved: u64,
    ended: Mutex<Option<EndedLog>>,
}

struct EndedLog {
    records: Vec<DataRecord>,
    next_seq: u32,
    skips: Vec<SkipRange>,
    expires: tokio::time::Instant,
}

/// Memory one kept record is counted as (its size in the log).
const RECORD_BYTES: u64 = std::mem::size_of::<DataRecord>() as u64;
/// Records kept beyond a session's packet count, for duplicates.
const DUPLICATE_ALLOWANCE: u32 = 1024;

/// What one client address holds at the moment.
#[derive(Debug, Default, Clone, Copy)]
struct ClientUse {
    connections: usize,
    sessions: usize,
    bits_per_second: u64,
}

impl Shared {
    fn count(&self, f: impl FnOnce(&mut OwampServerCounters)) {
        if let Ok(mut c) = self.counters.lock() {
            f(&mut c);
        }
    }

    fn client<R>(&self, ip: IpAddr, f: impl FnOnce(&mut ClientUse) -> R) -> R {
        let mut map = self.clients.lock().unwrap_or_else(|p| p.into_inner());
        let u = map.entry(ip).or_default();
        let r = f(u);
        if u.connections == 0 && u.sessions == 0 && u.bits_per_second == 0 {
            map.remove(&ip);
        }
        r
    }
}

/// A control connection's place; given back when dropped.
struct ConnPlace {
    shared: Arc<Shared>,
    ip: IpAddr,
}

impl ConnPlace {
    fn take(shared: &Arc<Shared>, ip: IpAddr) -> Option<Self> {
        let l = &shared.spec.limits;
        let mut total = shared.connections.lock().unwrap_or_else(|p| p.into_inner());
        if *total >= l.max_connections {
            return None;
        }
        let ok = shared.client(ip, |u| {
            if u.connections >= l.max_per_client {
                return false;
            }
            u.connections += 1;
            true
        });
        if ok {
            *total += 1;
            Some(Self {
                shared: shared.clone(),
                ip,
            })
        } else {
            None
        }
    }
}

impl Drop for ConnPlace {
    fn drop(&mut self) {
        *self.shared.connections.lock().unwrap_or_else(|p| p.into_inner()) -= 1;
        self.shared.client(self.ip, |u| u.connections -= 1);
    }
}

/// A session's share of its client's limits; given back when dropped.
struct SessionPlace {
    shared: Arc<Shared>,
    ip: IpAddr,
    bits_per_second: u64,
}

impl Drop for SessionPlace {
    fn drop(&mut self) {
        let b = self.bits_per_second;
        self.shared.client(self.ip, |u| {
            u.sessions -= 1;
            u.bits_per_second -= b;
        });
    }
}

impl BoundControlServer {
    /// The control listeners' addresses (port 0 resolved).
    pub fn local_addrs(&self) -> Vec<SocketAddr> {
        self.listeners
            .iter()
            .filter_map(|l| l.local_addr().ok())
            .collect()
    }

    /// Serves until `cancel`; returns the counters.
    pub async fn run(self, cancel: CancellationToken) -> OwampServerCounters {
        let shared = Arc::new(Shared {
            spec: self.spec,
            started_ntp: ntp_from_unix_ns(crate::datagram::now_unix_ns()),
            counters: Mutex::new(OwampServerCounters::default()),
            clients: Mutex::new(HashMap::new()),
            connections: Mutex::new(0),
            cancel: cancel.clone(),
            tasks: TaskTracker::new(),
            logs: Mutex::new(HashMap::new()),
            log_bytes: Mutex::new(0),
        });
        let mut tasks = tokio::task::JoinSet::new();
        if !shared.spec.twoway {
            tasks.spawn(expire_logs(shared.clone(), cancel.clone()));
        }
        for l in self.listeners {
            tasks.spawn(accept_loop(l, shared.clone(), cancel.clone()));
        }
        while tasks.join_next().await.is_some() {}
        shared.tasks.close();
        shared.tasks.wait().await;
        let c = *shared.counters.lock().unwrap_or_else(|p| p.into_inner());
        c
    }
}

/// Drops receive logs kept past their time, every second.
async fn expire_logs(shared: Arc<Shared>, cancel: CancellationToken) {
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
        let now = tokio::time::Instant::now();
        let mut gone = Vec::new();
        {
            let mut logs = shared.logs.lock().unwrap_or_else(|p| p.into_inner());
            logs.retain(|_, log| {
                let expired = log
                    .ended
                    .lock()
                    .map(|e| e.as_ref().is_some_and(|e| e.expires <= now))
                    .unwrap_or(true);
                if expired {
                    gone.push(log.reserved);
                }
                !expired
            });
        }
        for bytes in gone {
            shared.release_log(bytes);
            shared.count(|c| c.logs_expired += 1);
        }
    }
}

impl Shared {
    /// Reserves `bytes` of the receive logs' budget; false when full.
    fn reserve_log(&self, bytes: u64) -> bool {
        let mut used = self.log_bytes.lock().unwrap_or_else(|p| p.into_inner());
        if used.saturating_add(bytes) > self.spec.limits.max_log_memory {
            return false;
        }
        *used += bytes;
        true
    }

    fn release_log(&self, bytes: u64) {
        let mut used = self.log_bytes.lock().unwrap_or_else(|p| p.into_inner());
        *used = used.saturating_sub(bytes);
    }
}

/// A greeting offering no mode: RFC 4656's way to turn a client away.
fn no_modes() -> [u8; ServerGreeting::LEN] {
    ServerGreeting {
        modes: 0,
        challenge: [0; 16],
        salt: [0; 16],
        count: 0,
    }
    .encode()
}

async fn accept_loop(l: TcpListener, shared: Arc<Shared>, cancel: CancellationToken) {
    let mut conns = tokio::task::JoinSet::new();
    loop {
        let (s, peer) = tokio::select! {
            _ = cancel.cancelled() => break,
            Some(_) = conns.join_next(), if !conns.is_empty() => continue,
            a = l.accept() => match a {
                Ok(a) => a,
                Err(_) => {
                    // Out of descriptors, say: do not spin.
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
        };
        let ip = crate::socket::unmapped_ip(peer.ip());
        let allow = &shared.spec.allow;
        if !allow.is_empty() && !allow.iter().any(|c| c.contains(ip)) {
            shared.count(|c| c.denied += 1);
            let _ = s.try_write(&no_modes());
            continue;
        }
        let Some(place) = ConnPlace::take(&shared, ip) else {
            shared.count(|c| c.busy += 1);
            let _ = s.try_write(&no_modes());
            continue;
        };
        let (shared, cancel) = (shared.clone(), cancel.clone());
        conns.spawn(async move {
            let _ = s.set_nodelay(true);
            tokio::select! {
                _ = cancel.cancelled() => {}
                _ = serve_connection(s, ip, &shared) => {}
            }
            drop(place);
        });
    }
    conns.shutdown().await;
}

/// One accepted session of a control connection.
struct Session {
    sid: [u8; 16],
    role: Role,
    cancel: CancellationToken,
    task: Option<JoinHandle<Outcome>>,
    timeout: Duration,
    /// OWAMP receivers: when the last packet is due plus the timeout
    /// (Unix ns), after which the server may send its Stop-Sessions.
    local_end_ns: i64,
    _place: SessionPlace,
}

enum Role {
    /// A TWAMP reflector, ready to start.
    Reflect(Option<ReflectorSession>),
    /// An OWAMP receiver: its socket, plan and latest end (Unix ns) until
    /// it starts; its log.
    Receive(Option<(TestSocket, RecvPlan, i64)>, Arc<ReceiveLog>),
    /// An OWAMP sender: its socket and plan until it starts.
    Send(Option<(TestSocket, SendPlan)>),
}

/// What a session's task leaves.
enum Outcome {
    Reflected,
    Received(Received),
    Sent(SendOutcome),
}

impl Session {
    fn alive(&self) -> bool {
        self.task.as_ref().is_some_and(|t| !t.is_finished())
    }
}

/// Why a request was refused: the Accept code and the counter.
struct Refusal(Accept, fn(&mut OwampServerCounters));

async fn serve_connection(s: TcpStream, ip: IpAddr, shared: &Arc<Shared>) {
    let spec = &shared.spec;
    let t = spec.limits.control_timeout;
    let local_ip = s
        .local_addr()
        .map(|a| crate::socket::unmapped_ip(a.ip()))
        .unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED));
    let mut conn = match conn::server_handshake(s, &spec.policy, shared.started_ntp, t).await {
        Ok((c, _)) => c,
        Err(ControlFailure::Timeout(_)) => {
            shared.count(|c| c.idle_timeouts += 1);
            return;
        }
        Err(ControlFailure::Protocol(_)) => {
            shared.count(|c| c.setup_refused += 1);
            return;
        }
        Err(_) => return,
    };
    shared.count(|c| c.connections += 1);
    let mut sessions: Vec<Session> = Vec::new();
    let mut started = false;
    let mut stop_sent = false;
    let end = loop {
        if started && !spec.twoway && !stop_sent {
            // As owampd: the server's Stop-Sessions goes out when its own
            // sessions are done, unless the client's comes first.
            let readable = tokio::select! {
                r = conn.get_ref().readable() => r.map(|_| true),
                () = local_done(waits(&sessions)) => Ok(false),
            };
            match readable {
                Ok(true) => {}
                Ok(false) => {
                    if let Err(e) = send_own_stop(&mut conn, shared, &mut sessions).await {
                        break Some(e);
                    }
                    stop_sent = true;
                    continue;
                }
                Err(e) => break Some(e.into()),
            }
        }
        let first = match conn.recv_first_block(t).await {
            Ok(b) => b,
            Err(ControlFailure::Timeout(_)) if started && sessions.iter().any(Session::alive) => continue,
            Err(e) => break Some(e),
        };
        let step = match Command::from_byte(first[0]) {
            Ok(Command::RequestSession | Command::RequestTwSession) => {
                if started {
                    Err(ControlFailure::protocol("a request while sessions run"))
                } else {
                    request(&mut conn, first, shared, ip, local_ip, &mut sessions).await
                }
            }
            Ok(Command::StartSessions) => {
                stop_sent = false;
                start(&mut conn, first, shared, &mut sessions, &mut started).await
            }
            Ok(Command::StopSessions) if started => {
                stop(&mut conn, first, shared, &mut sessions, &mut started, stop_sent).await
            }
            Ok(Command::StopSessions) => Err(ControlFailure::protocol("Stop-Sessions before Start-Sessions")),
            Ok(Command::FetchSession) if !spec.twoway && !started => fetch(&mut conn, first, shared).await,
            Ok(Command::FetchSession) => Err(ControlFailure::protocol(match spec.twoway {
                true => "Fetch-Session is no TWAMP command",
                false => "Fetch-Session while sessions run",
            })),
            Err(e) => Err(ControlFailure::protocol(e.to_string())),
        };
        if let Err(e) = step {
            break Some(e);
        }
    };
    match end {
        Some(ControlFailure::Timeout(_)) => shared.count(|c| c.idle_timeouts += 1),
        Some(ControlFailure::Protocol(_) | ControlFailure::Hmac(_)) => {
            shared.count(|c| c.protocol_errors += 1)
        }
        _ => {}
    }
    // Receive logs of sessions the client never stopped are kept, with
    // every packet not seen counted lost.
    finish(shared, sessions, &HashMap::new()).await;
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Sends an Accept-Session.
async fn answer(
    conn: &mut ControlConn<TcpStream>,
    accept: Accept,
    port: u16,
    sid: [u8; 16],
) -> Result<(), ControlFailure> {
    let mut m = AcceptSession {
        accept: accept.byte(),
        port,
        sid,
    }
    .encode();
    conn.send(&mut m).await
}

async fn refuse(
    conn: &mut ControlConn<TcpStream>,
    shared: &Shared,
    r: Refusal,
) -> Result<(), ControlFailure> {
    shared.count(r.1);
    answer(conn, r.0, 0, [0; 16]).await
}

/// Request-Session or Request-TW-Session: read whole (slots bounded before
/// they are read), checked against the limits, answered.
async fn request(
    conn: &mut ControlConn<TcpStream>,
    first: [u8; BLOCK],
    shared: &Arc<Shared>,
    ip: IpAddr,
    local_ip: IpAddr,
    sessions: &mut Vec<Session>,
) -> Result<(), ControlFailure> {
    let spec = &shared.spec;
    let mut msg = [0u8; RequestSession::LEN];
    msg[..BLOCK].copy_from_slice(&first);
    conn.recv_rest(&mut msg).await?;
    let owamp_request = msg[0] == Command::RequestSession.byte();
    let mut slots = Vec::new();
    if owamp_request {
        if spec.twoway {
            // Its slots would follow, of a length not worth trusting.
            refuse(
                conn,
                shared,
                Refusal(Accept::NotSupported, |c| c.refused_unsupported += 1),
            )
            .await?;
            return Err(ControlFailure::protocol("Request-Session on a TWAMP server"));
        }
        let n = be32(&msg, 4);
        if n == 0 || n > spec.limits.max_slots {
            refuse(
                conn,
                shared,
                Refusal(Accept::PermanentLimit, |c| c.refused_slots += 1),
            )
            .await?;
            return Err(ControlFailure::protocol(format!(
                "{n} schedule slots (1 to {} taken); the connection cannot go on without reading them",
                spec.limits.max_slots
            )));
        }
        let mut buf = vec![0u8; n as usize * BLOCK];
        conn.recv_blocks(&mut buf).await?;
        conn.recv_hmac().await?;
        for b in buf.chunks_exact(BLOCK) {
            let b: &[u8; BLOCK] = b.try_into().expect("a block");
            match Slot::decode(b) {
                Ok(s) => slots.push(s),
                Err(_) => {
                    return refuse(
                        conn,
                        shared,
                        Refusal(Accept::NotSupported, |c| c.refused_unsupported += 1),
                    )
                    .await
                }
            }
        }
    } else if !spec.twoway {
        return refuse(
            conn,
            shared,
            Refusal(Accept::NotSupported, |c| c.refused_unsupported += 1),
        )
        .await;
    }
    let req = match RequestSession::decode(&msg) {
        Ok(r) => r,
        Err(ControlError::Invalid(_) | ControlError::Command(_)) => {
            return refuse(
                conn,
                shared,
                Refusal(Accept::NotSupported, |c| c.refused_unsupported += 1),
            )
            .await
        }
    };
    let checked = check(&req, &slots, conn.mode, shared, ip, sessions.len());
    let (bits_per_second, dscp) = match checked {
        Ok(v) => v,
        Err(r) => return refuse(conn, shared, r).await,
    };
    // The client's place for the session, taken now that it fits.
    let place = SessionPlace {
        shared: shared.clone(),
        ip,
        bits_per_second,
    };
    if !req.twoway {
        return one_way(conn, req, slots, shared, ip, local_ip, dscp, place, sessions).await;
    }
    let socket = match endpoint::test_socket(local_ip, spec.test_ports, dscp) {
        Ok(s) => s,
        Err(e) => {
            drop(place);
            return refuse(conn, shared, test_socket_refusal(&e)).await;
        }
    };
    let port = socket.local.port();
    let socket = socket.sock;
    let sid = make_sid(local_ip);
    let keys = conn.keys.as_ref().map(|k| TestKeys::derive(k, &sid));
    let sender_ip = match req.sender.is_unspecified() {
        true => ip,
        false => crate::socket::unmapped_ip(req.sender),
    };
    let session = ReflectorSession {
        socket,
        mode: conn.mode,
        keys: keys.filter(|_| conn.mode.is_secured()),
        sender: SocketAddr::new(sender_ip, req.sender_port),
        max_bits_per_second: spec.limits.max_bits_per_second,
        idle: spec.limits.reflector_idle,
    };
    answer(conn, Accept::Ok, port, sid).await?;
    shared.count(|c| c.sessions += 1);
    sessions.push(Session {
        sid,
        role: Role::Reflect(Some(session)),
        cancel: shared.cancel.child_token(),
        task: None,
        timeout: duration_of(req.timeout).min(spec.limits.max_timeout),
        local_end_ns: i64::MIN,
        _place: place,
    });
    Ok(())
}

/// How long after the start packet `seq` of a schedule is due, 32.32
/// seconds.
fn offset_of(sid: &[u8; 16], slots: &[Slot], seq: u32) -> u64 {
    // The slots were checked to be 1 or more when the session was asked.
    let Ok(mut s) = Schedule::new(sid, slots) else {
        return 0;
    };
    (0..=seq).fold(0u64, |t, _| t.saturating_add(s.next_gap()))
}

fn test_socket_refusal(e: &std::io::Error) -> Refusal {
    match e.kind() {
        std::io::ErrorKind::AddrInUse => Refusal(Accept::TemporaryLimit, |c| c.refused_ports += 1),
        _ => Refusal(Accept::Internal, |c| c.refused_ports += 1),
    }
}

/// An OWAMP session: the server receives (it makes the SID, opens a test
/// socket and keeps a log) or sends (to the client's receiver port, with
/// the client's SID).
#[allow(clippy::too_many_arguments)]
async fn one_way(
    conn: &mut ControlConn<TcpStream>,
    mut req: RequestSession,
    slots: Vec<Slot>,
    shared: &Arc<Shared>,
    ip: IpAddr,
    local_ip: IpAddr,
    dscp: u8,
    place: SessionPlace,
    sessions: &mut Vec<Session>,
) -> Result<(), ControlFailure> {
    let spec = &shared.spec;
    let timeout = duration_of(req.timeout);
    let timeout_ns = i64::try_from(timeout.as_nanos()).unwrap_or(i64::MAX);
    let start_ns = unix_ns_from_ntp(req.start_time, crate::datagram::now_unix_ns());
    let mode = conn.mode;
    if req.conf_sender && req.receiver_port == 0 {
        drop(place);
        return refuse(
            conn,
            shared,
            Refusal(Accept::NotSupported, |c| c.refused_unsupported += 1),
        )
        .await;
    }
    let socket = match endpoint::test_socket(local_ip, spec.test_ports, dscp) {
        Ok(s) => s,
        Err(e) => {
            drop(place);
            return refuse(conn, shared, test_socket_refusal(&e)).await;
        }
    };
    let port = socket.local.port();
    let them = |port: u16| SocketAddr::new(ip, port);
    let mut local_end = i64::MIN;
    let role = if req.conf_receiver {
        let max_records = req.packets.saturating_add(DUPLICATE_ALLOWANCE);
        let reserved = u64::from(max_records) * RECORD_BYTES;
        if !shared.reserve_log(reserved) {
            drop(place);
            return refuse(
                conn,
                shared,
                Refusal(Accept::TemporaryLimit, |c| c.refused_memory += 1),
            )
            .await;
        }
        req.sid = make_sid(local_ip);
        req.receiver_port = port;
        let keys = conn.keys.as_ref().map(|k| TestKeys::derive(k, &req.sid));
        let plan = RecvPlan {
            peer: them(req.sender_port),
            mode,
            keys: keys.filter(|_| mode.is_secured()),
            padding: req.padding as usize,
            packets: req.packets,
            max_records: max_records as usize,
        };
        // The last packet is due at a time both ends compute from the
        // SID; past it and the loss timeout the server may say it is done
        // (as owampd does), and ten seconds later it stops listening if
        // the client has not said so.
        let last = offset_of(&req.sid, &slots, req.packets.saturating_sub(1));
        let last_ns = i64::try_from((u128::from(last) * 1_000_000_000) >> 32).unwrap_or(i64::MAX);
        local_end = start_ns.saturating_add(last_ns).saturating_add(timeout_ns);
        let end_ns = local_end.saturating_add(10_000_000_000);
        let log = Arc::new(ReceiveLog {
            request: req.clone(),
            slots: slots.clone(),
            reserved,
            ended: Mutex::new(None),
        });
        shared
            .logs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(req.sid, log.clone());
        Role::Receive(Some((socket, plan, end_ns)), log)
    } else {
        let keys = conn.keys.as_ref().map(|k| TestKeys::derive(k, &req.sid));
        let plan = SendPlan {
            peer: them(req.receiver_port),
            mode,
            keys: keys.filter(|_| mode.is_secured()),
            padding: req.padding as usize,
            packets: req.packets,
            // Slots were checked to be 1 or more when the session was asked.
            gaps: match Schedule::new(&req.sid, &slots) {
                Ok(s) => Box::new(s),
                Err(_) => endpoint::fixed_gaps(0),
            },
            start_ns,
            timeout_ns,
        };
        Role::Send(Some((socket, plan)))
    };
    answer(conn, Accept::Ok, port, req.sid).await?;
    shared.count(|c| c.sessions += 1);
    sessions.push(Session {
        sid: req.sid,
        role,
        cancel: shared.cancel.child_token(),
        task: None,
        timeout,
        local_end_ns: local_end,
        _place: place,
    });
    Ok(())
}

/// A 32.32 duration.
fn duration_of(v: u64) -> Duration {
    Duration::from_nanos(((u128::from(v) * 1_000_000_000) >> 32).min(u128::from(u64::MAX)) as u64)
}

/// Checks a decoded request against the limits; on success, the bits per
/// second it reserves of its client's share and its DSCP. Takes the
/// client's session place (given back by the caller's [`SessionPlace`]).
fn check(
    req: &RequestSession,
    slots: &[Slot],
    mode: Mode,
    shared: &Shared,
    ip: IpAddr,
    held: usize,
) -> Result<(u64, u8), Refusal> {
    let l = &shared.spec.limits;
    let Some(dscp) = req.dscp() else {
        return Err(Refusal(Accept::NotSupported, |c| c.refused_unsupported += 1));
    };
    // Nobody else is sent to, or answered: the sender (TWAMP, OWAMP with
    // the server receiving) or the receiver (the server sending) is the
    // control connection's client.
    let theirs = match req.conf_sender {
        true => req.receiver,
        false => req.sender,
    };
    let theirs = crate::socket::unmapped_ip(theirs);
    if !theirs.is_unspecified() && theirs != ip {
        return Err(Refusal(Accept::Failure, |c| c.refused_address += 1));
    }
    if req.padding > l.max_padding {
        return Err(Refusal(Accept::PermanentLimit, |c| c.refused_padding += 1));
    }
    if duration_of(req.timeout) > l.max_timeout {
        return Err(Refusal(Accept::PermanentLimit, |c| c.refused_timeout += 1));
    }
    let now = ntp_from_unix_ns(crate::datagram::now_unix_ns());
    let ahead = Duration::from_secs(req.start_time.saturating_sub(now) >> 32);
    let behind = Duration::from_secs(now.saturating_sub(req.start_time) >> 32);
    if ahead > l.max_start_ahead || behind > l.max_start_behind {
        return Err(Refusal(Accept::PermanentLimit, |c| c.refused_start_time += 1));
    }
    let mut bits_per_second = 0;
    if !req.twoway {
        if req.packets == 0 || req.packets > l.max_packets {
            return Err(Refusal(Accept::PermanentLimit, |c| c.refused_packets += 1));
        }
        // The mean gap over the schedule, as the packets cycle through it.
        let total_ns: u128 = slots.iter().map(|s| u128::from(s.gap_ns())).sum();
        let mean_ns = total_ns / slots.len().max(1) as u128;
        let ip_udp = if ip.is_ipv6() { 48 } else { 28 };
        let bits = (packet::sender_header(mode) as u128 + u128::from(req.padding) + ip_udp) * 8;
        bits_per_second = match mean_ns {
            0 => u64::MAX,
            m => (bits * 1_000_000_000 / m).min(u128::from(u64::MAX)) as u64,
        };
        if l.max_bits_per_second > 0 && bits_per_second > l.max_bits_per_second {
            return Err(Refusal(Accept::PermanentLimit, |c| c.refused_bandwidth += 1));
        }
    }
    if held >= l.max_sessions {
        return Err(Refusal(Accept::TemporaryLimit, |c| c.refused_sessions += 1));
    }
    shared.client(ip, |u| {
        if u.sessions >= l.max_sessions {
            return Err(Refusal(Accept::TemporaryLimit, |c| c.refused_sessions += 1));
        }
        if l.max_bits_per_second > 0
            && u.bits_per_second.saturating_add(bits_per_second) > l.max_bits_per_second
        {
            return Err(Refusal(Accept::TemporaryLimit, |c| c.refused_bandwidth += 1));
        }
        u.sessions += 1;
        u.bits_per_second += bits_per_second;
        Ok((bits_per_second, dscp))
    })
}

/// A session id as owamp makes it: the receiver's IPv4 address (the last
/// four octets of an IPv6 one), the time, four random octets.
fn make_sid(receiver: IpAddr) -> [u8; 16] {
    let mut sid = [0u8; 16];
    match receiver {
        IpAddr::V4(a) => sid[..4].copy_from_slice(&a.octets()),
        IpAddr::V6(a) => sid[..4].copy_from_slice(&a.octets()[12..]),
    }
    sid[4..12].copy_from_slice(&ntp_from_unix_ns(crate::datagram::now_unix_ns()).to_be_bytes());
    sid[12..].copy_from_slice(&rand::random::<[u8; 4]>());
    sid
}

/// Start-Sessions: every accepted session starts.
async fn start(
    conn: &mut ControlConn<TcpStream>,
    first: [u8; BLOCK],
    shared: &Arc<Shared>,
    sessions: &mut [Session],
    started: &mut bool,
) -> Result<(), ControlFailure> {
    let mut msg = [0u8; 32];
    msg[..BLOCK].copy_from_slice(&first);
    conn.recv_rest(&mut msg).await?;
    for s in sessions.iter_mut() {
        let cancel = s.cancel.clone();
        let tasks = shared.tasks.clone();
        match &mut s.role {
            Role::Reflect(r) => {
                if let Some(r) = r.take() {
                    let early = reflector::drain(&r);
                    shared.count(|c| c.packets_ignored += early);
                    let shared = shared.clone();
                    s.task = Some(tasks.spawn(async move {
                        let t = reflector::reflect(r, cancel).await;
                        shared.count(|c| {
                            c.packets_reflected += t.reflected;
                            c.packets_ignored += t.ignored;
                        });
                        Outcome::Reflected
                    }));
                }
            }
            Role::Receive(setup, _) => {
                if let Some((sock, plan, end_ns)) = setup.take() {
                    s.task = Some(tasks.spawn(async move {
                        let timer = cancel.clone();
                        let left = end_ns.saturating_sub(crate::datagram::now_unix_ns()).max(0) as u64;
                        let deadline = async move {
                            tokio::select! {
                                _ = tokio::time::sleep(Duration::from_nanos(left)) => timer.cancel(),
                                _ = timer.cancelled() => {}
                            }
                        };
                        let (r, ()) =
                            tokio::join!(endpoint::receive_session(&sock.sock, &plan, &cancel), deadline);
                        Outcome::Received(r)
                    }));
                }
            }
            Role::Send(setup) => {
                if let Some((sock, plan)) = setup.take() {
                    s.task = Some(tasks.spawn(async move {
                        Outcome::Sent(endpoint::send_session(&sock.sock, plan, &cancel).await)
                    }));
                }
            }
        }
    }
    *started = true;
    let mut ack = control::start_ack(Accept::Ok.byte());
    conn.send(&mut ack).await
}

/// Stop-Sessions. TWAMP: the reflectors end after their sessions'
/// Timeout (late packets are still answered). OWAMP: the client's record
/// of each session it sent (bounded by what was accepted) ends the
/// server's receivers; the server's senders end and it answers with its
/// own Stop-Sessions, as owping waits for.
async fn stop(
    conn: &mut ControlConn<TcpStream>,
    first: [u8; BLOCK],
    shared: &Arc<Shared>,
    sessions: &mut Vec<Session>,
    started: &mut bool,
    stop_sent: bool,
) -> Result<(), ControlFailure> {
    *started = false;
    if shared.spec.twoway {
        let mut msg = [0u8; 32];
        msg[..BLOCK].copy_from_slice(&first);
        conn.recv_rest(&mut msg).await?;
        for s in sessions.drain(..) {
            let Session {
                cancel,
                task,
                timeout,
                _place,
                ..
            } = s;
            shared.tasks.spawn(async move {
                tokio::select! {
                    _ = tokio::time::sleep(timeout) => {}
                    _ = cancel.cancelled() => {}
                }
                cancel.cancel();
                if let Some(t) = task {
                    let _ = t.await;
                }
                drop(_place);
            });
        }
        return Ok(());
    }
    let header = StopHeader::decode(&first).map_err(|e| ControlFailure::protocol(e.to_string()))?;
    let receiving: Vec<([u8; 16], u32)> = sessions
        .iter()
        .filter_map(|s| match &s.role {
            Role::Receive(_, log) => Some((s.sid, log.request.packets)),
            _ => None,
        })
        .collect();
    if header.sessions as usize > receiving.len() {
        return Err(ControlFailure::protocol(format!(
            "Stop-Sessions names {} sessions; the client sends in {}",
            header.sessions,
            receiving.len()
        )));
    }
    let mut told = HashMap::new();
    for _ in 0..header.sessions {
        let mut sid = [0u8; 16];
        conn.recv_blocks(&mut sid).await?;
        let Some(&(_, packets)) = receiving.iter().find(|(s, _)| *s == sid) else {
            return Err(ControlFailure::protocol(
                "Stop-Sessions names a session the client does not send in",
            ));
        };
        let mut b = [0u8; BLOCK];
        conn.recv_blocks(&mut b).await?;
        let next_seq = be32(&b, 0).min(packets);
        let n = be32(&b, 4);
        if n > packets {
            return Err(ControlFailure::protocol(format!(
                "{n} skip ranges in a session of {packets} packets"
            )));
        }
        let mut raw = b[8..].to_vec();
        let rest = StopSession::tail_len(n as usize) - BLOCK;
        if rest > 0 {
            let mut more = vec![0u8; rest];
            conn.recv_blocks(&mut more).await?;
            raw.extend_from_slice(&more);
        }
        let skips = raw
            .chunks_exact(8)
            .take(n as usize)
            .map(|c| SkipRange {
                first: be32(c, 0),
                last: be32(c, 4),
            })
            .collect::<Vec<_>>();
        told.insert(sid, (next_seq, skips));
    }
    conn.recv_hmac().await?;
    if !stop_sent {
        send_own_stop(conn, shared, sessions).await?;
    }
    let done = std::mem::take(sessions);
    finish(shared, done, &told).await;
    Ok(())
}

/// What a connection's own sessions wait for before they are done.
enum LocalWait<'a> {
    /// A sender's task.
    Sender(&'a JoinHandle<Outcome>),
    /// A receiver's end, Unix ns.
    Until(i64),
}

fn waits(sessions: &[Session]) -> Vec<LocalWait<'_>> {
    sessions
        .iter()
        .filter_map(|s| match (&s.role, &s.task) {
            (Role::Send(_), Some(t)) => Some(LocalWait::Sender(t)),
            (Role::Receive(..), _) => Some(LocalWait::Until(s.local_end_ns)),
            _ => None,
        })
        .collect()
}

/// Whether the connection's own sessions are done: every sender has
/// sent, every receiver is past its last packet and timeout. Polled, so
/// it can wait beside the control socket.
async fn local_done(waits: Vec<LocalWait<'_>>) {
    loop {
        let now = crate::datagram::now_unix_ns();
        let done = waits.iter().all(|w| match w {
            LocalWait::Sender(t) => t.is_finished(),
            LocalWait::Until(end) => now >= *end,
        });
        if done {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The server's Stop-Sessions: its senders end (if still sending), then
/// one record per session it sent in.
async fn send_own_stop(
    conn: &mut ControlConn<TcpStream>,
    shared: &Shared,
    sessions: &mut [Session],
) -> Result<(), ControlFailure> {
    for s in sessions.iter() {
        if matches!(s.role, Role::Send(_)) {
            s.cancel.cancel();
        }
    }
    let mut sent = Vec::new();
    for s in sessions.iter_mut() {
        if let Role::Send(_) = s.role {
            let outcome = match s.task.take() {
                Some(t) => t.await.ok(),
                None => None,
            };
            let (next_seq, skips) = match outcome {
                Some(Outcome::Sent(o)) => {
                    shared.count(|c| c.packets_sent += o.sent);
                    (o.next_seq, o.skips)
                }
                _ => (0, Vec::new()),
            };
            sent.push(StopSession {
                sid: s.sid,
                next_seq,
                skips,
            });
        }
    }
    let mut head = StopHeader {
        accept: 0,
        sessions: sent.len() as u32,
    }
    .encode();
    conn.send_blocks(&mut head).await?;
    for s in &sent {
        let mut b = s.encode();
        conn.send_blocks(&mut b).await?;
    }
    conn.send_hmac().await
}

/// Ends sessions: stops their tasks, and puts each receiver's records in
/// its log (trimmed to the sender's next sequence number, every packet
/// not seen below it counted lost). A receiver that never started leaves
/// no log.
async fn finish(shared: &Shared, sessions: Vec<Session>, told: &HashMap<[u8; 16], (u32, Vec<SkipRange>)>) {
    for s in &sessions {
        s.cancel.cancel();
    }
    for s in sessions {
        let outcome = match s.task {
            Some(t) => t.await.ok(),
            None => None,
        };
        match (s.role, outcome) {
            (Role::Receive(_, log), Some(Outcome::Received(mut r))) => {
                shared.count(|c| {
                    c.packets_received += r.records.len() as u64;
                    c.packets_ignored += r.refused + r.over_budget;
                });
                let (next_seq, skips) = told
                    .get(&s.sid)
                    .cloned()
                    .unwrap_or((log.request.packets, Vec::new()));
                // A lost packet's send time is when it was due (next_seq
                // is bounded by the session's packets).
                let schedule = Schedule::new(&log.request.sid, &log.slots).ok();
                let mut t = log.request.start_time;
                let due: Vec<u64> = match schedule {
                    Some(mut schedule) => (0..next_seq)
                        .map(|_| {
                            t = t.wrapping_add(schedule.next_gap());
                            t
                        })
                        .collect(),
                    None => Vec::new(),
                };
                endpoint::fill_lost(&mut r.records, next_seq, |seq| {
                    due.get(seq as usize).copied().unwrap_or(0)
                });
                // Records stay in arrival order; a lost one goes where the
                // receiver gave up on it, its due time plus the timeout,
                // as owampd's log has it (owping reads a log in that order
                // and cannot go back to a packet long past).
                let timeout = log.request.timeout;
                r.records.sort_by_key(|rec| match rec.is_lost() {
                    true => rec.send_time.wrapping_add(timeout),
                    false => rec.recv_time,
                });
                if let Ok(mut e) = log.ended.lock() {
                    *e = Some(EndedLog {
                        records: r.records,
                        next_seq,
                        skips,
                        expires: tokio::time::Instant::now() + shared.spec.limits.log_keep,
                    });
                }
            }
            (Role::Receive(_, log), _) => {
                let removed = shared
                    .logs
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&s.sid)
                    .is_some();
                if removed {
                    shared.release_log(log.reserved);
                }
            }
            (Role::Send(_), Some(Outcome::Sent(o))) => shared.count(|c| c.packets_sent += o.sent),
            _ => {}
        }
    }
}

/// Fetch-Session: the kept log of a session this server received, as
/// owampd sends it: Fetch-Ack, the request as accepted, its slots, the
/// skip ranges and the records, each part with its HMAC.
async fn fetch(
    conn: &mut ControlConn<TcpStream>,
    first: [u8; BLOCK],
    shared: &Arc<Shared>,
) -> Result<(), ControlFailure> {
    let mut msg = [0u8; FetchSession::LEN];
    msg[..BLOCK].copy_from_slice(&first);
    conn.recv_rest(&mut msg).await?;
    let f = FetchSession::decode(&msg).map_err(|e| ControlFailure::protocol(e.to_string()))?;
    let log = shared
        .logs
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&f.sid)
        .cloned();
    // Copied out, so no lock is held while the client reads.
    let ended = log.as_ref().and_then(|log| {
        log.ended.lock().ok().and_then(|e| {
            e.as_ref().map(|e| {
                let wanted: Vec<DataRecord> = e
                    .records
                    .iter()
                    .filter(|r| r.seq >= f.begin && r.seq <= f.end)
                    .copied()
                    .collect();
                (wanted, e.next_seq, e.skips.clone())
            })
        })
    });
    let (Some(log), Some((records, next_seq, skips))) = (log, ended) else {
        shared.count(|c| c.fetches_refused += 1);
        let mut ack = FetchAck {
            accept: Accept::Failure.byte(),
            finished: false,
            next_seq: 0,
            skips: 0,
            records: 0,
        }
        .encode();
        return conn.send(&mut ack).await;
    };
    let mut ack = FetchAck {
        accept: 0,
        finished: true,
        next_seq,
        skips: skips.len() as u32,
        records: records.len() as u32,
    }
    .encode();
    conn.send(&mut ack).await?;
    let mut echo = log.request.encode();
    conn.send(&mut echo).await?;
    let mut slot_blocks: Vec<u8> = log.slots.iter().flat_map(|s| s.encode()).collect();
    conn.send_blocks(&mut slot_blocks).await?;
    conn.send_hmac().await?;
    if !skips.is_empty() {
        let mut b: Vec<u8> = skips
            .iter()
            .flat_map(|s| s.first.to_be_bytes().into_iter().chain(s.last.to_be_bytes()))
            .collect();
        b.resize(control::pad16(b.len()), 0);
        conn.send_blocks(&mut b).await?;
    }
    conn.send_hmac().await?;
    // Sixteen records are 25 blocks: sent a group at a time.
    for group in records.chunks(16) {
        let mut b = vec![0u8; control::pad16(group.len() * DataRecord::LEN)];
        for (i, r) in group.iter().enumerate() {
            r.encode(&mut b[i * DataRecord::LEN..]);
        }
        conn.send_blocks(&mut b).await?;
    }
    conn.send_hmac().await?;
    shared.count(|c| c.fetches += 1);
    Ok(())
}
