//! The media-stream service of `goodput server`: one thread per listening
//! socket answers requests (a cookie challenge first, so a spoofed source
//! never gets more than one datagram no larger than its own), streams
//! frames to each accepted client, or receives and plays out its upload.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use goodput_core::media::limits::{stream_memory, MediaLimits};
use goodput_core::media::wire::{Message, RejectReason, Request, COOKIE_LEN};
use goodput_core::result::MediaServerCounters;
use socket2::{Domain, Protocol, Socket, Type};
use tokio_util::sync::CancellationToken;

use super::{datagrams, send_message, Incoming, Outgoing, SILENCE};
use crate::datagram::{self, RecvBatch, SocketThreads};
use crate::EngineError;

/// Datagrams per `recvmmsg`.
const BATCH: usize = 16;
/// Receive buffer per message: a whole GRO run.
const RECV_BUF: usize = 65_536;
/// A cookie is good for this many seconds (and one period more).
const COOKIE_PERIOD_S: u64 = 30;
/// Finished streams' keys are remembered this long, so a late copy of
/// their request does not start the stream again.
const FORGET_AFTER: Duration = Duration::from_secs(60);

/// How to run the media service.
#[derive(Debug, Clone)]
pub struct MediaServerSpec {
    /// Addresses to listen on (IPv6 sockets are v6-only).
    pub listen: Vec<SocketAddr>,
    /// Most streams open at once, per socket.
    pub max_streams: usize,
    /// Bounds on each request's fields.
    pub limits: MediaLimits,
    /// Most memory all open streams of every socket may hold, bytes (each
    /// counted at its ceiling, [`stream_memory`]).
    pub max_memory: u64,
    /// Most streams one client address may hold open at once, over every
    /// socket.
    pub max_per_client: usize,
    /// Most of `max_memory` one client address may hold at once, bytes.
    pub max_client_memory: u64,
}

/// What one client address holds: its open streams and their memory.
#[derive(Debug, Default, Clone, Copy)]
struct ClientUse {
    streams: usize,
    bytes: u64,
}

/// What the socket threads share: the spec, the memory the open streams
/// hold, and what each client address holds of it.
struct Shared {
    spec: MediaServerSpec,
    committed: AtomicU64,
    peak: AtomicU64,
    /// Open streams and memory by client address (an address is removed
    /// when its last stream ends, so there are at most as many entries as
    /// open streams).
    clients: Mutex<HashMap<IpAddr, ClientUse>>,
}

impl Shared {
    /// Admits a stream of `bytes` from `client`: within the address's own
    /// share first (streams, then memory), then within the whole budget.
    /// The refusal names the limit that was reached.
    fn commit(&self, client: IpAddr, bytes: u64) -> Result<(), RejectReason> {
        // A panic elsewhere cannot leave the map half-updated: every change
        // below is a plain field update.
        let mut clients = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        let mine = clients.get(&client).copied().unwrap_or_default();
        if mine.streams >= self.spec.max_per_client {
            return Err(RejectReason::ClientStreams);
        }
        let theirs = mine.bytes.checked_add(bytes);
        if theirs.is_none_or(|b| b > self.spec.max_client_memory) {
            return Err(RejectReason::ClientMemory);
        }
        let max = self.spec.max_memory;
        self.committed
            .fetch_update(Relaxed, Relaxed, |c| c.checked_add(bytes).filter(|&n| n <= max))
            .map_err(|_| RejectReason::Memory)?;
        self.peak.fetch_max(self.committed.load(Relaxed), Relaxed);
        let e = clients.entry(client).or_default();
        e.streams += 1;
        e.bytes = e.bytes.saturating_add(bytes);
        Ok(())
    }

    /// Gives back what a stream of `client` held.
    fn release(&self, client: IpAddr, bytes: u64) {
        let _ = self
            .committed
            .fetch_update(Relaxed, Relaxed, |c| Some(c.saturating_sub(bytes)));
        let mut clients = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(e) = clients.get_mut(&client) {
            e.streams = e.streams.saturating_sub(1);
            e.bytes = e.bytes.saturating_sub(bytes);
            if e.streams == 0 {
                clients.remove(&client);
            }
        }
    }
}

/// The address a client's streams are counted under (an IPv4-mapped IPv6
/// address as its IPv4 address).
fn client_of(peer: SocketAddr) -> IpAddr {
    peer.ip().to_canonical()
}

/// The media service with its sockets bound.
pub struct BoundMedia {
    spec: MediaServerSpec,
    sockets: Vec<Socket>,
}

/// Binds the service's sockets (so a port in use is reported at start).
pub fn bind_media(spec: MediaServerSpec) -> Result<BoundMedia, EngineError> {
    let mut sockets = Vec::new();
    for &addr in &spec.listen {
        let err = |source| EngineError::Listen { addr, source };
        let s = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP)).map_err(err)?;
        if addr.is_ipv6() {
            s.set_only_v6(true).map_err(err)?;
        }
        s.bind(&addr.into()).map_err(err)?;
        let fd = s.as_raw_fd();
        datagram::enable_ancillary(fd, addr.is_ipv6(), true).map_err(err)?;
        datagram::enable_gro(fd);
        datagram::set_buffer(fd, true, 16 << 20);
        datagram::set_buffer(fd, false, 4 << 20);
        sockets.push(s);
    }
    Ok(BoundMedia { spec, sockets })
}

impl BoundMedia {
    /// The addresses actually bound (port 0 resolved).
    pub fn local_addrs(&self) -> Vec<SocketAddr> {
        datagram::bound_addrs(&self.sockets)
    }

    /// Starts one thread per socket, serving until `cancel`.
    pub fn start(self, cancel: CancellationToken) -> RunningMedia {
        let shared = Shared {
            spec: self.spec,
            committed: AtomicU64::new(0),
            peak: AtomicU64::new(0),
            clients: Mutex::new(HashMap::new()),
        };
        RunningMedia(SocketThreads::spawn(
            "media-server",
            self.sockets,
            shared,
            &cancel,
            serve,
        ))
    }

    /// Serves until `cancel`; returns the counters of all sockets.
    pub async fn run(self, cancel: CancellationToken) -> MediaServerCounters {
        self.start(cancel).wait().await
    }
}

/// A media service whose threads are running.
pub struct RunningMedia(SocketThreads<MediaServerCounters>);

impl RunningMedia {
    /// Waits for the threads to stop (after the cancel) and adds up their counters.
    pub async fn wait(self) -> MediaServerCounters {
        self.0
            .wait(|t, c| {
                t.challenged += c.challenged;
                t.internal_errors += c.internal_errors;
                t.accepted += c.accepted;
                t.rejected += c.rejected;
                t.rejected_limits += c.rejected_limits;
                t.rejected_memory += c.rejected_memory;
                t.rejected_per_client += c.rejected_per_client;
                // Every thread read the same shared peak.
                t.memory_peak_bytes = t.memory_peak_bytes.max(c.memory_peak_bytes);
                t.completed += c.completed;
                t.abandoned += c.abandoned;
                t.unsolicited += c.unsolicited;
                t.sent += c.sent;
                t.received += c.received;
                t.send_errors += c.send_errors;
            })
            .await
    }
}

enum Role {
    Send(Box<Outgoing>),
    Recv(Box<Incoming>, Instant),
}

struct Stream {
    peer: SocketAddr,
    key: (SocketAddr, u64),
    from: Option<(IpAddr, u32)>,
    role: Role,
    /// Bytes of the memory budget it holds.
    memory: u64,
}

fn cookie(secret: &RandomState, src: SocketAddr, nonce: u64, period: u64) -> [u8; COOKIE_LEN] {
    let mut out = [0u8; COOKIE_LEN];
    for (i, half) in out.chunks_mut(8).enumerate() {
        let h = secret.hash_one((src, nonce, period, i as u8));
        half.copy_from_slice(&h.to_be_bytes());
    }
    out
}

fn period_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() / COOKIE_PERIOD_S)
}

struct Server<'a> {
    spec: &'a MediaServerSpec,
    shared: &'a Shared,
    fd: RawFd,
    secret: RandomState,
    streams: HashMap<u32, Stream>,
    by_key: HashMap<(SocketAddr, u64), u32>,
    finished: HashMap<(SocketAddr, u64), Instant>,
    /// Streams that ended lately, by id and peer: their late reports, data
    /// and End copies are expected, not unsolicited.
    ended: HashMap<u32, (SocketAddr, Instant)>,
    next_id: u32,
    c: MediaServerCounters,
}

fn serve(sock: Socket, shared: &Shared, cancel: &CancellationToken) -> MediaServerCounters {
    let mut s = Server {
        spec: &shared.spec,
        shared,
        fd: sock.as_raw_fd(),
        secret: RandomState::new(),
        streams: HashMap::new(),
        by_key: HashMap::new(),
        finished: HashMap::new(),
        ended: HashMap::new(),
        next_id: rand::random::<u32>() | 1,
        c: MediaServerCounters::default(),
    };
    let mut batch = RecvBatch::new(BATCH, RECV_BUF);
    let mut last_sweep = Instant::now();
    while !cancel.is_cancelled() {
        let now = Instant::now();
        // Everything queued, a batch at a time.
        loop {
            // ICMP errors from earlier sends surface here as errors; go on.
            let n = batch.recv(s.fd).unwrap_or_default();
            for i in 0..n {
                let (buf, meta) = batch.get(i);
                let t_ns = meta.t_ns.unwrap_or_else(datagram::now_unix_ns);
                for d in datagrams(buf, meta.segment) {
                    // A bug in handling one datagram must not end the
                    // service for everyone: counted, and the loop goes on.
                    let handled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        s.datagram(d, meta.src, meta.dst, t_ns, now)
                    }));
                    if handled.is_err() {
                        s.c.internal_errors += 1;
                    }
                }
            }
            if n < BATCH {
                break;
            }
        }
        let mut wake = now + Duration::from_millis(100);
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| s.tick(now, &mut wake))).is_err() {
            s.c.internal_errors += 1;
        }
        if now.duration_since(last_sweep) > Duration::from_secs(5) {
            last_sweep = now;
            s.finished.retain(|_, t| now.duration_since(*t) < FORGET_AFTER);
            s.ended.retain(|_, (_, t)| now.duration_since(*t) < FORGET_AFTER);
        }
        poll_until(&[s.fd], wake);
    }
    // Stopped: count what was still running.
    let ids: Vec<u32> = s.streams.keys().copied().collect();
    for id in ids {
        s.end(id, false, Instant::now());
    }
    s.c.memory_peak_bytes = shared.peak.load(Relaxed);
    s.c
}

/// Sleeps until a datagram arrives on any of `fds` or `until`.
pub(crate) fn poll_until(fds: &[RawFd], until: Instant) {
    let left = until.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return;
    }
    let mut p: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let ts = libc::timespec {
        tv_sec: left.as_secs() as libc::time_t,
        tv_nsec: i64::from(left.subsec_nanos()),
    };
    // SAFETY: the pollfd array and timespec live for the call.
    unsafe { libc::ppoll(p.as_mut_ptr(), p.len() as libc::nfds_t, &ts, std::ptr::null()) };
}

impl Server<'_> {
    fn datagram(&mut self, d: &[u8], src: SocketAddr, dst: Option<(IpAddr, u32)>, t_ns: i64, now: Instant) {
        let Ok(m) = Message::decode(d) else {
            self.c.unsolicited += 1;
            return;
        };
        let stream = match m {
            Message::Report(r) => Some(r.stream),
            Message::Data(h) => Some(h.stream),
            Message::End { stream, .. } => Some(stream),
            _ => None,
        };
        if let Some((peer, _)) = stream.and_then(|id| self.ended.get(&id)) {
            if *peer == src {
                return;
            }
        }
        match m {
            Message::Request(r) => self.request(r, src, dst, now),
            Message::Report(r) => match self.streams.get_mut(&r.stream) {
                Some(Stream {
                    peer,
                    role: Role::Send(o),
                    ..
                }) if *peer == src => o.heard(r, now),
                _ => self.c.unsolicited += 1,
            },
            Message::Data(h) => match self.streams.get_mut(&h.stream) {
                Some(Stream {
                    peer,
                    role: Role::Recv(i, last),
                    ..
                }) if *peer == src => {
                    self.c.received += 1;
                    *last = now;
                    i.data(&h, d, t_ns, None);
                }
                _ => self.c.unsolicited += 1,
            },
            Message::End {
                stream,
                sent,
                send_errors,
            } => match self.streams.get_mut(&stream) {
                Some(Stream {
                    peer,
                    role: Role::Recv(i, _),
                    ..
                }) if *peer == src => {
                    i.end_sent = Some(sent);
                    i.end_send_errors = Some(send_errors);
                }
                _ => self.c.unsolicited += 1,
            },
            _ => self.c.unsolicited += 1,
        }
    }

    fn request(&mut self, r: Request, src: SocketAddr, dst: Option<(IpAddr, u32)>, now: Instant) {
        let key = (src, r.nonce);
        let reply = |m: Message| {
            let _ = send_message(self.fd, Some(src), dst, &m);
        };
        if let Some(&id) = self.by_key.get(&key) {
            // Our Accept was lost: say it again.
            reply(Message::Accept {
                nonce: r.nonce,
                stream: id,
            });
            return;
        }
        if self.finished.contains_key(&key) {
            self.c.unsolicited += 1;
            return;
        }
        let p = period_now();
        let good = [p, p.wrapping_sub(1)]
            .iter()
            .any(|&q| cookie(&self.secret, src, r.nonce, q) == r.cookie);
        if !good {
            self.c.challenged += 1;
            reply(Message::Challenge {
                nonce: r.nonce,
                cookie: cookie(&self.secret, src, r.nonce, p),
            });
            return;
        }
        let reject = |reason| Message::Reject {
            nonce: r.nonce,
            reason,
        };
        // Every field is checked before anything is sized from it.
        let plan = match self.spec.limits.check(&r) {
            Ok(p) => p,
            Err(why) => {
                self.c.rejected += 1;
                self.c.rejected_limits += 1;
                reply(reject(why));
                return;
            }
        };
        if self.streams.len() >= self.spec.max_streams {
            self.c.rejected += 1;
            reply(reject(RejectReason::Busy));
            return;
        }
        let memory = stream_memory(&plan, r.upload, r.buffer_ms);
        if let Err(why) = self.shared.commit(client_of(src), memory) {
            self.c.rejected += 1;
            match why {
                RejectReason::Memory => self.c.rejected_memory += 1,
                _ => self.c.rejected_per_client += 1,
            }
            reply(reject(why));
            return;
        }
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1).max(1);
        reply(Message::Accept {
            nonce: r.nonce,
            stream: id,
        });
        self.c.accepted += 1;
        let role = if r.upload {
            let depth = Duration::from_millis(u64::from(r.buffer_ms));
            Role::Recv(Box::new(Incoming::new(plan, id, now, depth, r.verify_data)), now)
        } else {
            Role::Send(Box::new(Outgoing::new(plan, id, now, dst)))
        };
        self.by_key.insert(key, id);
        self.streams.insert(
            id,
            Stream {
                peer: src,
                key,
                from: dst,
                role,
                memory,
            },
        );
    }

    fn tick(&mut self, now: Instant, wake: &mut Instant) {
        let mut ended = Vec::new();
        for (&id, st) in self.streams.iter_mut() {
            match &mut st.role {
                Role::Send(o) => {
                    o.pump(self.fd, Some(st.peer), now);
                    let last = o.report.is_some_and(|r| r.last);
                    if o.finished_sending() && last {
                        ended.push((id, true));
                    } else if o.silent(now) {
                        // Finished sending but no last report: the stream
                        // still ran; a stream cut short did not.
                        ended.push((id, o.finished_sending()));
                    } else if let Some(w) = o.next_wake() {
                        *wake = (*wake).min(w);
                    }
                }
                Role::Recv(i, last_data) => {
                    i.play(now);
                    while let Some(r) = i.report_due(now) {
                        let _ = send_message(self.fd, Some(st.peer), st.from, &Message::Report(r));
                        if !r.last {
                            break;
                        }
                    }
                    if i.finished() {
                        ended.push((id, true));
                    } else if now.saturating_duration_since(*last_data) > SILENCE
                        && now.saturating_duration_since(*last_data) > i.play_delay()
                    {
                        ended.push((id, false));
                    } else {
                        *wake = (*wake).min(i.next_wake());
                    }
                }
            }
        }
        for (id, ok) in ended {
            self.end(id, ok, now);
        }
    }

    fn end(&mut self, id: u32, ok: bool, now: Instant) {
        let Some(st) = self.streams.remove(&id) else {
            return;
        };
        self.shared.release(client_of(st.peer), st.memory);
        self.by_key.remove(&st.key);
        self.finished.insert(st.key, now);
        self.ended.insert(id, (st.peer, now));
        if ok {
            self.c.completed += 1;
        } else {
            self.c.abandoned += 1;
        }
        if let Role::Send(o) = st.role {
            self.c.sent += o.sent;
            self.c.send_errors += o.send_errors;
        }
    }
}
