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
    self, AcceptSession, Command, ControlError, RequestSession, ServerGreeting, Slot,
};
use goodput_core::owamp::crypto::{TestKeys, BLOCK};
use goodput_core::owamp::packet;
use goodput_core::owamp::{Accept, Mode};
use goodput_core::result::OwampServerCounters;
use goodput_core::stamp::{ntp_from_unix_ns, Cidr};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::conn::{self, ControlConn, ControlFailure, ServerPolicy};
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
            max_padding: 9000 - 112,
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
}

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
        });
        let mut tasks = tokio::task::JoinSet::new();
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
    task: Option<JoinHandle<()>>,
    timeout: Duration,
    _place: SessionPlace,
}

enum Role {
    /// A TWAMP reflector, ready to start.
    Reflect(Option<ReflectorSession>),
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
    let end = loop {
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
            Ok(Command::StartSessions) => start(&mut conn, first, shared, &mut sessions, &mut started).await,
            Ok(Command::StopSessions) => {
                stop(&mut conn, first, &shared.tasks, &mut sessions, &mut started).await
            }
            Ok(Command::FetchSession) => Err(ControlFailure::protocol(
                "Fetch-Session: this server keeps no receive logs",
            )),
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
    for s in &sessions {
        s.cancel.cancel();
    }
    for s in sessions {
        if let Some(t) = s.task {
            let _ = t.await;
        }
    }
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
        drop(place);
        return refuse(
            conn,
            shared,
            Refusal(Accept::NotSupported, |c| c.refused_unsupported += 1),
        )
        .await;
    }
    let socket = match reflector::bind_test_socket(local_ip, spec.test_ports, dscp) {
        Ok(s) => s,
        Err(e) => {
            drop(place);
            let code = match e.kind() {
                std::io::ErrorKind::AddrInUse => Accept::TemporaryLimit,
                _ => Accept::Internal,
            };
            return refuse(conn, shared, Refusal(code, |c| c.refused_ports += 1)).await;
        }
    };
    let port = socket.local_addr().map(|a| a.port()).unwrap_or(0);
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
        let Role::Reflect(r) = &mut s.role;
        if let Some(r) = r.take() {
            let early = reflector::drain(&r);
            shared.count(|c| c.packets_ignored += early);
            let (cancel, shared) = (s.cancel.clone(), shared.clone());
            s.task = Some(shared.tasks.clone().spawn(async move {
                let t = reflector::reflect(r, cancel).await;
                shared.count(|c| {
                    c.packets_reflected += t.reflected;
                    c.packets_ignored += t.ignored;
                });
            }));
        }
    }
    *started = true;
    let mut ack = control::start_ack(Accept::Ok.byte());
    conn.send(&mut ack).await
}

/// Stop-Sessions: TWAMP's reflectors end after their sessions' Timeout
/// (late packets are still answered).
async fn stop(
    conn: &mut ControlConn<TcpStream>,
    first: [u8; BLOCK],
    tasks: &TaskTracker,
    sessions: &mut Vec<Session>,
    started: &mut bool,
) -> Result<(), ControlFailure> {
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
        tasks.spawn(async move {
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
    *started = false;
    Ok(())
}
