//! `goodput trace`: probes of rising TTL, several hops in flight at once,
//! answers read from the socket's error queue (UDP, ICMP echo) or from a
//! connect's fate (TCP SYN); path MTU discovery lowers the size as routers
//! tell, and looks for a black hole where none tells.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use goodput_core::path::{back_hops, BlackHole, MtuDrop, ProbeAnswer, ProbeMethod, TraceHop, TraceProbe};
use goodput_core::spec::trace::MAX_UDP_PROBES;
use socket2::{Protocol, Socket, Type};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::sock::{self, ExtError, Heard, ORIGIN_ICMP, ORIGIN_ICMP6, ORIGIN_LOCAL};
use crate::Observer;

/// How long a reverse name may take before the hop is shown without it.
const NAME_WAIT: Duration = Duration::from_secs(2);

/// The reverse name of `ip` (getnameinfo with NI_NAMEREQD, so no name is
/// no answer), or none after [`NAME_WAIT`].
pub async fn reverse_name(ip: IpAddr) -> Option<String> {
    let lookup = tokio::task::spawn_blocking(move || {
        let addr = socket2::SockAddr::from(SocketAddr::new(ip, 0));
        let mut host = [0 as libc::c_char; 1025];
        // SAFETY: addr is a valid sockaddr of the length given; host is a
        // writable buffer of the length given; no service is asked for.
        let r = unsafe {
            libc::getnameinfo(
                addr.as_ptr(),
                addr.len(),
                host.as_mut_ptr(),
                host.len() as libc::socklen_t,
                std::ptr::null_mut(),
                0,
                libc::NI_NAMEREQD,
            )
        };
        // SAFETY: on success getnameinfo wrote a NUL-terminated name.
        (r == 0).then(|| {
            unsafe { std::ffi::CStr::from_ptr(host.as_ptr()) }
                .to_string_lossy()
                .into_owned()
        })
    });
    tokio::time::timeout(NAME_WAIT, lookup).await.ok()?.ok()?
}

/// What a trace is asked to do (a validated spec, resolved).
#[derive(Debug, Clone)]
pub struct TracePlan {
    /// The address probed.
    pub dest: IpAddr,
    /// Local address to send from.
    pub bind: Option<IpAddr>,
    /// How probes are sent.
    pub method: ProbeMethod,
    /// UDP's first port or TCP's port.
    pub port: u16,
    /// First TTL.
    pub first: u8,
    /// Last TTL.
    pub max: u8,
    /// Probes per hop.
    pub probes: u32,
    /// How long a probe waits.
    pub wait: Duration,
    /// Probes in flight at once.
    pub in_flight: u32,
    /// IP packet size of the first probes.
    pub size: u32,
    /// Path MTU discovery.
    pub pmtu: bool,
    /// Look up the hops' reverse names.
    pub names: bool,
    /// A probe gives up after this many times the RTT of an answer from
    /// its own hop (0: never early).
    pub wait_here: f64,
    /// And after this many times the RTT of an answer from a later hop.
    pub wait_near: f64,
}

/// The least a probe waits, however fast the other answers came: below
/// this, a busy machine's scheduling could pass for a silent router.
const MIN_WAIT: Duration = Duration::from_millis(10);

/// What a trace found.
#[derive(Debug, Clone, Default)]
pub struct TraceOutcome {
    /// The hops, first to last probed.
    pub hops: Vec<TraceHop>,
    /// The interface's MTU, when a probe was too big for it.
    pub local_mtu: Option<u32>,
    /// The size the last probes had (the path MTU, with discovery).
    pub size: u32,
    /// A black hole, when discovery found one.
    pub black_hole: Option<BlackHole>,
    /// Stopped by the caller before the end.
    pub interrupted: bool,
}

/// IP and UDP (or ICMP) headers of a probe, bytes.
pub fn header_bytes(v6: bool) -> u32 {
    if v6 {
        48
    } else {
        28
    }
}

/// The smallest MTU a link of the family may have (IPv4's 68, IPv6's 1280).
fn min_mtu(v6: bool) -> u32 {
    if v6 {
        1280
    } else {
        68
    }
}

/// How an answer counts.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    /// An answer of the hop.
    Counted(ProbeAnswer),
    /// "Fragmentation needed" / "packet too big", with the next MTU.
    MtuTold(u32),
}

#[derive(Debug, Clone)]
struct Answer {
    at: Instant,
    /// The kernel's receive timestamp (Unix ns), for a datagram's answer.
    stamp_ns: Option<i64>,
    kind: Kind,
    from: Option<IpAddr>,
    reply_ttl: Option<u8>,
    code: Option<String>,
}

/// traceroute's marks of ICMPv4 unreachable codes.
fn mark_v4(code: u8) -> String {
    match code {
        0 => "!N".into(),
        1 => "!H".into(),
        2 => "!P".into(),
        9 | 10 | 13 => "!X".into(),
        c => format!("!{c}"),
    }
}

/// And of ICMPv6's.
fn mark_v6(code: u8) -> String {
    match code {
        0 => "!N".into(),
        1 => "!X".into(),
        3 => "!H".into(),
        c => format!("!{c}"),
    }
}

/// What an ICMP error says about the probe it quotes; `None` for errors
/// that are not about reaching (a redirect, a local error).
fn classify(e: &ExtError) -> Option<(Kind, Option<String>)> {
    let counted = |a| Some((Kind::Counted(a), None));
    match (e.origin, e.icmp_type, e.icmp_code) {
        (ORIGIN_ICMP, 11, _) | (ORIGIN_ICMP6, 3, _) => counted(ProbeAnswer::TimeExceeded),
        (ORIGIN_ICMP, 3, 3) | (ORIGIN_ICMP6, 1, 4) => counted(ProbeAnswer::Reached),
        (ORIGIN_ICMP, 3, 4) | (ORIGIN_ICMP6, 2, _) => Some((Kind::MtuTold(e.info), None)),
        (ORIGIN_ICMP, 3, c) => Some((Kind::Counted(ProbeAnswer::Unreachable), Some(mark_v4(c)))),
        (ORIGIN_ICMP6, 1, c) => Some((Kind::Counted(ProbeAnswer::Unreachable), Some(mark_v6(c)))),
        _ => None,
    }
}

/// Sends probes and hears their answers.
enum Prober {
    /// UDP or ICMP echo: one socket, answers matched by port or sequence.
    Dgram {
        fd: AsyncFd<Socket>,
        icmp: bool,
        heard: VecDeque<(u32, Answer)>,
        local_mtu: Option<u32>,
    },
    /// TCP: a socket per probe, each in its own task.
    Tcp { tasks: JoinSet<(u32, Answer)> },
}

/// Why a probe could not be sent.
enum SendError {
    /// Bigger than the interface's MTU (the kernel says which).
    TooBig(u32),
    Io(io::Error),
}

struct Tracer {
    plan: TracePlan,
    v6: bool,
    prober: Prober,
    /// Reverse names looked up, by address.
    names: HashMap<String, Option<String>>,
    /// Lookups under way, by address.
    lookups: HashMap<String, tokio::task::JoinHandle<Option<String>>>,
}

impl Tracer {
    fn new(plan: TracePlan) -> Result<Self, String> {
        let v6 = plan.dest.is_ipv6();
        let prober = match plan.method {
            ProbeMethod::Tcp => Prober::Tcp {
                tasks: JoinSet::new(),
            },
            m => {
                let s = match m {
                    ProbeMethod::Icmp => sock::icmp_socket(plan.dest, plan.bind)?,
                    _ => sock::probe_socket(plan.dest, plan.bind, Type::DGRAM, Protocol::UDP)
                        .map_err(|e| format!("cannot open a UDP socket: {e}"))?,
                };
                sock::set_pmtu_probe(&s, v6, plan.pmtu)
                    .map_err(|e| format!("cannot set the socket's DF mode: {e}"))?;
                let fd = sock::register(s, Interest::READABLE | Interest::ERROR)
                    .map_err(|e| format!("cannot register the probe socket: {e}"))?;
                Prober::Dgram {
                    fd,
                    icmp: m == ProbeMethod::Icmp,
                    heard: VecDeque::new(),
                    local_mtu: None,
                }
            }
        };
        Ok(Self {
            plan,
            v6,
            prober,
            names: HashMap::new(),
            lookups: HashMap::new(),
        })
    }

    /// Starts looking up `ip`'s reverse name, once.
    fn look_up(&mut self, ip: IpAddr) {
        let key = ip.to_string();
        if !self.names.contains_key(&key) && !self.lookups.contains_key(&key) {
            self.lookups.insert(key, tokio::spawn(reverse_name(ip)));
        }
    }

    /// Whether the names of a hop's answering addresses are in (taking in
    /// the lookups that have ended).
    async fn names_ready(&mut self, s: &HopState) -> bool {
        let mut ready = true;
        for a in s.probes.iter().filter_map(|p| p.from.as_ref()) {
            if self.names.contains_key(a) {
                continue;
            }
            match self.lookups.get(a) {
                Some(h) if h.is_finished() => {
                    let h = self.lookups.remove(a).expect("just seen");
                    self.names.insert(a.clone(), h.await.ok().flatten());
                }
                Some(_) => ready = false,
                None => {
                    self.names.insert(a.clone(), None);
                }
            }
        }
        ready
    }

    /// UDP's destination port of probe `seq`.
    fn port_of(&self, seq: u32) -> u16 {
        self.plan
            .port
            .saturating_add(u16::try_from(seq).unwrap_or(u16::MAX))
    }

    /// Sends probe `seq`; when it went, on both clocks (taken just before
    /// the system call that sends it).
    fn send(&mut self, seq: u32, ttl: u8, size: u32) -> Result<(Instant, i64), SendError> {
        let v6 = self.v6;
        let payload = size.saturating_sub(header_bytes(v6)) as usize;
        let dest = self.plan.dest;
        let port = self.port_of(seq);
        match &mut self.prober {
            Prober::Dgram {
                fd, icmp, local_mtu, ..
            } => {
                sock::set_ttl(fd.get_ref(), v6, ttl).map_err(SendError::Io)?;
                let (data, to) = match icmp {
                    true => (
                        sock::echo_request(v6, seq as u16, payload),
                        SocketAddr::new(dest, 0),
                    ),
                    false => (vec![0x47u8; payload], SocketAddr::new(dest, port)),
                };
                *local_mtu = None;
                // A send fails with the error an earlier probe's ICMP left
                // on the socket (IP_RECVERR sets it); the failed call clears
                // it, so the next try goes. A probe too big for the
                // interface fails with the MTU queued as a local error.
                let mut last = None;
                for _ in 0..4 {
                    let Prober::Dgram { fd, .. } = &self.prober else {
                        break;
                    };
                    let when = (Instant::now(), sock::wall_ns());
                    match fd.get_ref().send_to(&data, &to.into()) {
                        Ok(_) => return Ok(when),
                        Err(e) => {
                            self.pump().map_err(SendError::Io)?;
                            if let Prober::Dgram {
                                local_mtu: Some(m), ..
                            } = &self.prober
                            {
                                if *m < size && e.raw_os_error() == Some(libc::EMSGSIZE) {
                                    return Err(SendError::TooBig(*m));
                                }
                            }
                            last = Some(e);
                        }
                    }
                }
                Err(SendError::Io(last.unwrap_or_else(|| io::Error::other("no send"))))
            }
            Prober::Tcp { tasks } => {
                let s = sock::probe_socket(dest, self.plan.bind, Type::STREAM, Protocol::TCP)
                    .map_err(SendError::Io)?;
                sock::set_ttl(&s, v6, ttl).map_err(SendError::Io)?;
                let to = SocketAddr::new(dest, self.plan.port);
                let when = (Instant::now(), sock::wall_ns());
                match s.connect(&to.into()) {
                    Ok(()) => {}
                    Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
                    Err(e) => return Err(SendError::Io(e)),
                }
                let wait = self.plan.wait;
                tasks.spawn(async move { (seq, tcp_answer(s, dest, wait).await) });
                Ok(when)
            }
        }
    }

    /// Reads every queued message of the datagram socket into answers.
    fn pump(&mut self) -> io::Result<()> {
        let (port, dest, v6) = (self.plan.port, self.plan.dest, self.v6);
        let Prober::Dgram {
            fd,
            icmp,
            heard,
            local_mtu,
        } = &mut self.prober
        else {
            return Ok(());
        };
        while let Some(h) = sock::receive_any(fd.get_ref())? {
            let at = Instant::now();
            if let Some(e) = &h.error {
                if e.origin == ORIGIN_LOCAL {
                    if e.errno == libc::EMSGSIZE {
                        *local_mtu = Some(e.info);
                    }
                    continue;
                }
            }
            if let Some(a) = dgram_answer(&h, *icmp, v6, port, dest, at) {
                heard.push_back(a);
            }
        }
        Ok(())
    }

    /// The next answer, whenever it comes.
    async fn next(&mut self) -> io::Result<(u32, Answer)> {
        loop {
            if let Prober::Dgram { heard, .. } = &mut self.prober {
                if let Some(a) = heard.pop_front() {
                    return Ok(a);
                }
            }
            match &mut self.prober {
                Prober::Tcp { tasks } => match tasks.join_next().await {
                    Some(Ok(a)) => return Ok(a),
                    Some(Err(e)) => return Err(io::Error::other(format!("a TCP probe's task failed: {e}"))),
                    None => std::future::pending::<()>().await,
                },
                Prober::Dgram { fd, .. } => {
                    let mut g = fd.ready(Interest::READABLE | Interest::ERROR).await?;
                    g.clear_ready();
                }
            }
            self.pump()?;
        }
    }
}

/// The answer a datagram socket's message gives, and to which probe.
fn dgram_answer(
    h: &Heard,
    icmp: bool,
    v6: bool,
    port: u16,
    dest: IpAddr,
    at: Instant,
) -> Option<(u32, Answer)> {
    let seq_of_port = |p: u16| p.checked_sub(port).map(u32::from).filter(|s| *s < MAX_UDP_PROBES);
    match &h.error {
        Some(e) => {
            let (kind, code) = classify(e)?;
            let seq = match icmp {
                true => u32::from(sock::echo_seq(h)?),
                false => seq_of_port(h.peer?.port())?,
            };
            Some((
                seq,
                Answer {
                    at,
                    stamp_ns: h.stamp_ns,
                    kind,
                    from: e.offender,
                    reply_ttl: h.ttl,
                    code,
                },
            ))
        }
        None => {
            let peer = h.peer?;
            let seq = match icmp {
                true if sock::is_echo_reply(h, v6) => u32::from(sock::echo_seq(h)?),
                true => return None,
                // A UDP reply: the destination answered from the probed port.
                false if peer.ip() == dest => seq_of_port(peer.port())?,
                false => return None,
            };
            Some((
                seq,
                Answer {
                    at,
                    stamp_ns: h.stamp_ns,
                    kind: Kind::Counted(ProbeAnswer::Reached),
                    from: Some(peer.ip()),
                    reply_ttl: h.ttl,
                    code: None,
                },
            ))
        }
    }
}

/// A TCP probe's fate: an ICMP error from its error queue, the SYN-ACK
/// (connected) or a reset (refused) from the destination, or nothing.
async fn tcp_answer(s: Socket, dest: IpAddr, wait: Duration) -> Answer {
    let (fate, at) = sock::connect_fate(s, wait).await;
    let answer = |kind, from, reply_ttl, code| Answer {
        at,
        stamp_ns: None,
        kind,
        from,
        reply_ttl,
        code,
    };
    match fate {
        sock::ConnectFate::Connected => answer(Kind::Counted(ProbeAnswer::Reached), Some(dest), None, None),
        sock::ConnectFate::Refused => answer(
            Kind::Counted(ProbeAnswer::Reached),
            Some(dest),
            None,
            Some("reset".into()),
        ),
        sock::ConnectFate::Icmp(h) => match (h.error.as_ref().and_then(classify), h.error) {
            (Some((kind, code)), e) => answer(kind, e.and_then(|e| e.offender), h.ttl, code),
            // An error that says nothing of reaching: the connect failed
            // with its errno.
            (None, e) => answer(
                Kind::Counted(ProbeAnswer::Unreachable),
                None,
                None,
                Some(format!(
                    "!<{}>",
                    io::Error::from_raw_os_error(e.map_or(0, |e| e.errno))
                )),
            ),
        },
        sock::ConnectFate::Failed(e) => answer(
            Kind::Counted(ProbeAnswer::Unreachable),
            None,
            None,
            Some(format!("!<{e}>")),
        ),
        sock::ConnectFate::Silent => answer(Kind::Counted(ProbeAnswer::NoReply), None, None, None),
    }
}

/// A probe on its way.
struct Flight {
    ttl: u8,
    size: u32,
    sent: Instant,
    /// The same moment on the kernel's timestamp clock (Unix ns).
    sent_ns: i64,
}

/// When a probe stops waiting: after the plan's wait, or earlier, as
/// traceroute's `-w MAX,HERE,NEAR` does, after `wait_here` times the RTT
/// of an answer from its own hop or `wait_near` times that of an answer
/// from a later hop (so a silent router costs little when the hops beyond
/// it answer), never before [`MIN_WAIT`].
fn give_up_at(f: &Flight, hops: &BTreeMap<u8, HopState>, plan: &TracePlan) -> Instant {
    let answered = |s: &HopState| {
        s.probes
            .iter()
            .filter(|p| p.answer != ProbeAnswer::NoReply)
            .filter_map(|p| p.rtt_us)
            .fold(None, |m: Option<f64>, r| Some(m.map_or(r, |m| m.min(r))))
    };
    let mut wait = plan.wait;
    let mut shorten = |factor: f64, rtt_us: Option<f64>| {
        if let Some(r) = rtt_us.filter(|_| factor > 0.0) {
            let w = Duration::from_secs_f64((factor * r / 1e6).clamp(0.0, 3600.0)).max(MIN_WAIT);
            wait = wait.min(w);
        }
    };
    shorten(plan.wait_here, hops.get(&f.ttl).and_then(answered));
    let later = hops
        .range(f.ttl.saturating_add(1)..)
        .filter_map(|(_, s)| answered(s))
        .fold(None, |m: Option<f64>, r| Some(m.map_or(r, |m| m.min(r))));
    if f.ttl < u8::MAX {
        shorten(plan.wait_near, later);
    }
    f.sent + wait
}

/// The probes of one hop so far.
#[derive(Default)]
struct HopState {
    probes: Vec<TraceProbe>,
    pending: u32,
    mtu: Option<MtuDrop>,
}

/// Runs a trace; the observer sees each hop when it is complete, in order.
pub async fn trace(
    plan: TracePlan,
    observer: &mut dyn Observer,
    cancel: &CancellationToken,
) -> Result<TraceOutcome, String> {
    let mut t = Tracer::new(plan.clone())?;
    let mut out = TraceOutcome {
        size: plan.size,
        ..TraceOutcome::default()
    };
    let mut seq = 0u32;
    let mut hops: BTreeMap<u8, HopState> = BTreeMap::new();
    let mut next_emit = plan.first;
    // The size a black-hole search found nothing wrong with.
    let mut cleared: Option<u32> = None;
    loop {
        let watch = plan.pmtu && out.black_hole.is_none() && cleared != Some(out.size);
        let end = sweep(
            &mut t,
            &mut seq,
            &mut hops,
            &mut next_emit,
            &mut out,
            observer,
            cancel,
            watch,
        )
        .await?;
        // With discovery on, silence from some hop on may be a black hole:
        // do small probes get further than the big ones did?
        let h = match end {
            SweepEnd::Reached | SweepEnd::Interrupted => break,
            SweepEnd::Silent(h) => h,
            SweepEnd::Done if watch => match silent_tail(&hops) {
                Some(h) => h,
                None => break,
            },
            SweepEnd::Done => break,
        };
        let Some((found_at, passed, exact)) =
            black_hole_search(&mut t, &mut seq, h, out.size, cancel).await?
        else {
            if matches!(end, SweepEnd::Done) {
                break;
            }
            // Silent routers, not a black hole: go on where the sweep was.
            cleared = Some(out.size);
            continue;
        };
        observer.on_notice(&format!(
            "no answer and no ICMP to {}-byte probes from hop {h}, but {passed}-byte probes reach hop {found_at}: \
             a path MTU black hole; tracing again from hop {h} at {passed} bytes",
            out.size
        ));
        if !exact {
            observer.on_notice(&format!(
                "the search for the largest size stopped at {passed} bytes (the hop's answers ran out: an ICMP rate limit?); bigger probes may pass too"
            ));
        }
        out.black_hole = Some(BlackHole {
            hop: h,
            lost_bytes: out.size,
            passed_bytes: passed,
            exact,
        });
        out.size = passed;
        hops.retain(|k, _| *k < h);
        next_emit = h;
    }
    out.hops = hops
        .into_iter()
        .filter(|(_, s)| !s.probes.is_empty())
        .map(|(ttl, s)| hop_of(ttl, s, &t.names))
        .collect();
    Ok(out)
}

/// The first hop of the trailing run of silent hops, when something
/// before it answered or it is the first.
fn silent_tail(hops: &BTreeMap<u8, HopState>) -> Option<u8> {
    let silent = |s: &HopState| s.probes.iter().all(|p| p.answer == ProbeAnswer::NoReply);
    let mut first = None;
    for (ttl, s) in hops.iter().rev() {
        if !silent(s) {
            break;
        }
        first = Some(*ttl);
    }
    first
}

/// The hop's record (with the names looked up, if any were).
fn hop_of(ttl: u8, s: HopState, names: &HashMap<String, Option<String>>) -> TraceHop {
    let mut addresses: Vec<String> = Vec::new();
    for p in &s.probes {
        if let Some(a) = &p.from {
            if !addresses.contains(a) {
                addresses.push(a.clone());
            }
        }
    }
    let back = s.probes.iter().rev().find_map(|p| p.reply_ttl).map(back_hops);
    let names = match names.is_empty() {
        true => Vec::new(),
        false => addresses
            .iter()
            .map(|a| names.get(a).cloned().flatten())
            .collect(),
    };
    TraceHop {
        hop: ttl,
        probes: s.probes,
        addresses,
        names,
        back_hops: back,
        mtu: s.mtu,
    }
}

/// How a sweep ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SweepEnd {
    /// The destination answered.
    Reached,
    /// The last hop is done, or an unreachable stopped it.
    Done,
    /// [`SILENT_RUN`] hops in a row from this one answered nothing (only
    /// when watching for a black hole).
    Silent(u8),
    /// The caller stopped it.
    Interrupted,
}

/// Silent hops in a row that make a discovering trace look for a black
/// hole before it goes on.
const SILENT_RUN: u8 = 3;

/// Probes hops from `next_emit` on until the destination answers, the
/// last hop is done, the caller stops, or (with `watch`) a run of silent
/// hops calls for a black-hole search. Hops are handed to the observer as
/// they complete, in order; `next_emit` is the next to hand on.
#[allow(clippy::too_many_arguments)]
async fn sweep(
    t: &mut Tracer,
    seq: &mut u32,
    hops: &mut BTreeMap<u8, HopState>,
    next_emit: &mut u8,
    out: &mut TraceOutcome,
    observer: &mut dyn Observer,
    cancel: &CancellationToken,
    watch: bool,
) -> Result<SweepEnd, String> {
    let plan = t.plan.clone();
    let from = *next_emit;
    let mut flights: HashMap<u32, Flight> = HashMap::new();
    // Where an earlier sweep already heard the destination (or an
    // unreachable), this one stops too.
    let ends = |s: &HopState| {
        s.probes.iter().any(|p| {
            p.answer == ProbeAnswer::Reached
                || (p.answer == ProbeAnswer::Unreachable && plan.method != ProbeMethod::Tcp)
        })
    };
    let mut stop = hops
        .iter()
        .find(|(_, s)| ends(s))
        .map_or(plan.max, |(ttl, _)| *ttl);
    let mut reached = hops
        .iter()
        .any(|(ttl, s)| *ttl <= stop && s.probes.iter().any(|p| p.answer == ProbeAnswer::Reached));
    hops.retain(|ttl, _| *ttl <= stop);
    let mut silent = 0u8;
    // Probes still out when the sweep stops early are forgotten.
    let forget = |hops: &mut BTreeMap<u8, HopState>| hops.values_mut().for_each(|s| s.pending = 0);
    loop {
        // Send while there is room: the lowest hop still short of probes.
        while flights.len() < plan.in_flight as usize {
            let Some(ttl) = (from..=stop).find(|ttl| {
                let s = hops.get(ttl);
                s.map_or(0, |s| s.probes.len() as u32 + s.pending) < plan.probes
            }) else {
                break;
            };
            if *seq >= MAX_UDP_PROBES {
                return Err(format!(
                    "sent {MAX_UDP_PROBES} probes without finishing: giving up"
                ));
            }
            let this = *seq;
            *seq += 1;
            match t.send(this, ttl, out.size) {
                Ok((sent, sent_ns)) => {
                    hops.entry(ttl).or_default().pending += 1;
                    flights.insert(
                        this,
                        Flight {
                            ttl,
                            size: out.size,
                            sent,
                            sent_ns,
                        },
                    );
                }
                Err(SendError::TooBig(mtu)) => {
                    out.local_mtu = Some(mtu);
                    out.size = mtu;
                }
                Err(SendError::Io(e)) => return Err(format!("cannot send a probe to {}: {e}", plan.dest)),
            }
        }
        // Hand on the hops that are complete, in order.
        while *next_emit <= stop {
            let done = hops
                .get(next_emit)
                .is_some_and(|s| s.pending == 0 && s.probes.len() as u32 >= plan.probes);
            if !done {
                break;
            }
            let s = &hops[next_emit];
            if plan.names && !t.names_ready(s).await {
                // Its names are still being looked up (beside the probes,
                // which go on): hand it on when they are in.
                break;
            }
            let state = HopState {
                probes: s.probes.clone(),
                pending: 0,
                mtu: s.mtu.clone(),
            };
            let hop = hop_of(*next_emit, state, &t.names);
            silent = if hop.silent() { silent + 1 } else { 0 };
            observer.on_hop(&hop);
            let this = *next_emit;
            if this == u8::MAX {
                break;
            }
            *next_emit += 1;
            // Silence before a destination that answered at this size is
            // silent routers, not a black hole.
            if watch && silent >= SILENT_RUN && this < stop && !reached {
                forget(hops);
                return Ok(SweepEnd::Silent(this + 1 - SILENT_RUN));
            }
        }
        let naming = plan.names
            && *next_emit <= stop
            && hops
                .get(next_emit)
                .is_some_and(|s| s.pending == 0 && s.probes.len() as u32 >= plan.probes);
        if naming && flights.is_empty() {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(10)) => continue,
                _ = cancel.cancelled() => {
                    out.interrupted = true;
                    return Ok(SweepEnd::Interrupted);
                }
            }
        }
        if *next_emit > stop || flights.is_empty() {
            return Ok(if reached {
                SweepEnd::Reached
            } else {
                SweepEnd::Done
            });
        }
        let mut deadline = flights.values().map(|f| give_up_at(f, hops, &plan)).min();
        if naming {
            // Look again for the names soon.
            deadline = deadline.map(|d| d.min(Instant::now() + Duration::from_millis(10)));
        }
        tokio::select! {
            a = t.next() => {
                let (n, a) = a.map_err(|e| format!("reading the probes' answers: {e}"))?;
                let Some(f) = flights.remove(&n) else { continue };
                let s = hops.entry(f.ttl).or_default();
                s.pending -= 1;
                match a.kind {
                    Kind::MtuTold(mtu) if plan.pmtu && mtu < f.size && mtu >= min_mtu(t.v6) => {
                        // The probe goes again at the size the router allows.
                        let drop = MtuDrop {
                            hop: f.ttl,
                            reported_by: a.from.map_or_else(|| "?".into(), |ip| ip.to_string()),
                            from_bytes: f.size,
                            mtu,
                        };
                        if mtu < out.size {
                            out.size = mtu;
                            if s.mtu.is_none() {
                                s.mtu = Some(drop);
                            }
                        } else if mtu == out.size && s.mtu.is_none() {
                            // The same drop, told to a probe of a lower
                            // hop than the one first told (answers cross):
                            // it belongs to the lowest hop that met it.
                            let higher = hops
                                .range(f.ttl.saturating_add(1)..)
                                .find(|(_, h)| h.mtu.as_ref().is_some_and(|m| m.mtu == mtu))
                                .map(|(ttl, _)| *ttl);
                            if let Some(h) = higher {
                                hops.get_mut(&h).expect("found above").mtu = None;
                                hops.entry(f.ttl).or_default().mtu = Some(drop);
                            }
                        }
                    }
                    kind => {
                        let (answer, code) = match kind {
                            Kind::Counted(x) => (x, a.code),
                            Kind::MtuTold(m) => (ProbeAnswer::Unreachable, Some(format!("!F-{m}"))),
                        };
                        if plan.names {
                            if let Some(ip) = a.from {
                                t.look_up(ip);
                            }
                        }
                        let s = hops.entry(f.ttl).or_default();
                        s.probes.push(TraceProbe {
                            answer,
                            from: a.from.map(|ip| ip.to_string()),
                            rtt_us: Some(sock::rtt(f.sent, f.sent_ns, a.at, a.stamp_ns).as_nanos() as f64 / 1e3),
                            size: f.size,
                            reply_ttl: a.reply_ttl,
                            code,
                        });
                        if answer == ProbeAnswer::Reached || (answer == ProbeAnswer::Unreachable && plan.method != ProbeMethod::Tcp) {
                            // traceroute stops at the destination and at
                            // an unreachable (nothing beyond gets through).
                            if answer == ProbeAnswer::Reached {
                                reached = true;
                            }
                            stop = stop.min(f.ttl);
                        }
                    }
                }
            }
            _ = tokio::time::sleep_until(deadline.unwrap_or_else(Instant::now)) => {
                let now = Instant::now();
                let late: Vec<u32> = flights
                    .iter()
                    .filter(|(_, f)| give_up_at(f, hops, &plan) <= now)
                    .map(|(n, _)| *n)
                    .collect();
                for n in late {
                    let f = flights.remove(&n).expect("listed above");
                    let s = hops.entry(f.ttl).or_default();
                    s.pending -= 1;
                    s.probes.push(TraceProbe {
                        answer: ProbeAnswer::NoReply,
                        from: None,
                        rtt_us: None,
                        size: f.size,
                        reply_ttl: None,
                        code: None,
                    });
                }
            }
            _ = cancel.cancelled() => {
                out.interrupted = true;
                return Ok(SweepEnd::Interrupted);
            }
        }
        // Probes past the destination are not waited for.
        flights.retain(|_, f| f.ttl <= stop);
        hops.retain(|ttl, _| *ttl <= stop);
    }
}

/// Probes a black-hole search sends at once: a few, so that a router's
/// ICMP rate limit (Linux: a burst of 6 per destination) does not pass
/// for a size that does not get through.
const SEARCH_WIDTH: u32 = 4;

/// The longest a black-hole search goes on for.
const SEARCH_TIME: Duration = Duration::from_secs(10);

/// After big probes got nothing from hop `h` on: a small probe at each of
/// a few hops from `h`; where one gets through, the big size once more (if
/// it passes now, the silence was loss or a rate limit), then rounds of
/// [`SEARCH_WIDTH`] sizes spread over what is left of the range, for the
/// largest size that still gets through. Returns the hop, that size, and
/// whether the search finished (a rate-limited hop can stop it, or
/// [`SEARCH_TIME`]; the size then passed, but a bigger one may too).
async fn black_hole_search(
    t: &mut Tracer,
    seq: &mut u32,
    h: u8,
    big: u32,
    cancel: &CancellationToken,
) -> Result<Option<(u8, u32, bool)>, String> {
    let small = header_bytes(t.v6) + 32;
    if big <= small {
        return Ok(None);
    }
    let last = h.saturating_add(3).min(t.plan.max);
    let first: Vec<(u8, u32)> = (h..=last).map(|ttl| (ttl, small)).collect();
    let passed = probe_round(t, seq, &first, cancel).await?;
    let Some(at) = first
        .iter()
        .zip(&passed)
        .find(|(_, p)| **p)
        .map(|((ttl, _), _)| *ttl)
    else {
        return Ok(None);
    };
    // Each round carries a small probe too: its answer times the round
    // (the others give up at `wait_here` times its RTT), and without it the
    // round says nothing (loss, or the hop's ICMP rate limit).
    let reference = (at, small);
    let Some(again) = checked_round(t, seq, &[(at, big)], reference, cancel).await? else {
        return Ok(None);
    };
    if again.first().is_some_and(|(_, ok)| *ok) {
        return Ok(None);
    }
    let (mut lo, mut hi) = (small, big);
    let began = Instant::now();
    for _ in 0..12 {
        if hi - lo <= 1 || cancel.is_cancelled() {
            break;
        }
        if began.elapsed() > SEARCH_TIME {
            return Ok(Some((at, lo, false)));
        }
        let n = SEARCH_WIDTH.min(hi - lo - 1);
        let sizes: Vec<(u8, u32)> = (1..=n)
            .map(|i| {
                (
                    at,
                    lo + (u64::from(hi - lo) * u64::from(i) / u64::from(n + 1)) as u32,
                )
            })
            .collect();
        // A round that cannot be read leaves what is proven: `lo` passed.
        let Some(passed) = checked_round(t, seq, &sizes, reference, cancel).await? else {
            return Ok(Some((at, lo, false)));
        };
        for ((_, size), ok) in &passed {
            match ok {
                true => lo = lo.max(*size),
                false => hi = hi.min(*size),
            }
        }
        // A size that failed below one that passed: loss; keep the range
        // sane and go on above what passed.
        if hi <= lo {
            hi = sizes
                .iter()
                .map(|(_, s)| *s)
                .filter(|s| *s > lo)
                .min()
                .unwrap_or(lo + 1);
        }
    }
    Ok(Some((at, lo, hi - lo <= 1)))
}

/// [`probe_round`] with `reference` (a probe known to get through) sent
/// last. Routers limit their ICMP in the order probes arrive, so an
/// answered reference says no probe before it went unanswered for want of
/// the router's tokens: a silent one was lost to its size. A round whose
/// reference is not answered is tried again after the plan's wait with
/// only its middle probe (fewer answers to ask of a rate-limited router),
/// twice at most. Each probe with whether it got through; `None` when no
/// try could be read.
async fn checked_round(
    t: &mut Tracer,
    seq: &mut u32,
    probes: &[(u8, u32)],
    reference: (u8, u32),
    cancel: &CancellationToken,
) -> Result<Option<Vec<((u8, u32), bool)>>, String> {
    let mut these = probes.to_vec();
    for attempt in 0..3 {
        if attempt > 0 {
            // Routers earn back a token a second or so: wait longer each
            // time.
            tokio::select! {
                _ = tokio::time::sleep(t.plan.wait.saturating_mul(attempt)) => {}
                _ = cancel.cancelled() => return Ok(None),
            }
            these = vec![probes[probes.len() / 2]];
        }
        let mut all = these.clone();
        all.push(reference);
        let passed = probe_round(t, seq, &all, cancel).await?;
        if passed.last() == Some(&true) {
            return Ok(Some(these.iter().copied().zip(passed).collect()));
        }
    }
    Ok(None)
}

/// Sends probes of (TTL, size) at once and says which got through to where
/// they were aimed: answered by the hop (time exceeded) or the destination.
/// An unreachable or an MTU complaint is not getting through. The round
/// waits for every answer, at most the plan's wait, and no longer than
/// `wait_here` times the first answer's RTT (at least [`MIN_WAIT`]).
async fn probe_round(
    t: &mut Tracer,
    seq: &mut u32,
    probes: &[(u8, u32)],
    cancel: &CancellationToken,
) -> Result<Vec<bool>, String> {
    let mut passed = vec![false; probes.len()];
    let mut out: HashMap<u32, usize> = HashMap::new();
    let start = Instant::now();
    for (i, (ttl, size)) in probes.iter().enumerate() {
        if *seq >= MAX_UDP_PROBES {
            break;
        }
        let n = *seq;
        *seq += 1;
        match t.send(n, *ttl, *size) {
            Ok(_) => {
                out.insert(n, i);
            }
            Err(SendError::TooBig(_)) => {}
            Err(SendError::Io(e)) => return Err(format!("cannot send a probe: {e}")),
        }
    }
    let mut until = start + t.plan.wait;
    while !out.is_empty() {
        tokio::select! {
            a = t.next() => {
                let (m, a) = a.map_err(|e| format!("reading the probes' answers: {e}"))?;
                let Some(i) = out.remove(&m) else { continue };
                passed[i] = matches!(a.kind, Kind::Counted(ProbeAnswer::TimeExceeded | ProbeAnswer::Reached));
                if t.plan.wait_here > 0.0 {
                    let rtt = a.at.saturating_duration_since(start).as_secs_f64();
                    let w = Duration::from_secs_f64((t.plan.wait_here * rtt).clamp(0.0, 3600.0)).max(MIN_WAIT);
                    until = until.min(start + w);
                }
            }
            _ = tokio::time::sleep_until(until) => break,
            _ = cancel.cancelled() => break,
        }
    }
    Ok(passed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(origin: u8, t: u8, c: u8) -> ExtError {
        ExtError {
            errno: 0,
            origin,
            icmp_type: t,
            icmp_code: c,
            info: 1500,
            offender: None,
        }
    }

    fn heard(peer: SocketAddr, error: Option<ExtError>, head: [u8; 8]) -> Heard {
        Heard {
            stamp_ns: None,
            peer: Some(peer),
            head,
            head_len: 8,
            len: 8,
            error,
            ttl: Some(62),
        }
    }

    #[test]
    fn answers_name_their_probe_or_nothing() {
        let dest: IpAddr = "192.0.2.9".parse().unwrap();
        let at = Instant::now();
        let te = Some(ExtError {
            offender: Some("192.0.2.1".parse().unwrap()),
            ..err(ORIGIN_ICMP, 11, 0)
        });
        // UDP: the probe is the quoted destination port less the first.
        let a = dgram_answer(
            &heard(SocketAddr::new(dest, 33440), te, [0; 8]),
            false,
            false,
            33434,
            dest,
            at,
        );
        let (seq, a) = a.unwrap();
        assert_eq!(seq, 6);
        assert_eq!(a.kind, Kind::Counted(ProbeAnswer::TimeExceeded));
        assert_eq!(a.from, Some("192.0.2.1".parse().unwrap()));
        assert_eq!(a.reply_ttl, Some(62));
        // A port below the first, or past the probes there can be: not ours.
        assert!(dgram_answer(
            &heard(SocketAddr::new(dest, 33433), te, [0; 8]),
            false,
            false,
            33434,
            dest,
            at
        )
        .is_none());
        let far = 33434 + MAX_UDP_PROBES as u16;
        assert!(dgram_answer(
            &heard(SocketAddr::new(dest, far), te, [0; 8]),
            false,
            false,
            33434,
            dest,
            at
        )
        .is_none());
        // Data from somewhere else than the destination is nobody's answer.
        let other: IpAddr = "198.51.100.1".parse().unwrap();
        assert!(dgram_answer(
            &heard(SocketAddr::new(other, 33434), None, [0; 8]),
            false,
            false,
            33434,
            dest,
            at
        )
        .is_none());
        // ICMP: the echo sequence, from the quoted request or the reply.
        let reply = [0, 0, 0, 0, 0, 0, 0, 7];
        let (seq, a) = dgram_answer(
            &heard(SocketAddr::new(dest, 0), None, reply),
            true,
            false,
            0,
            dest,
            at,
        )
        .unwrap();
        assert_eq!((seq, a.kind), (7, Kind::Counted(ProbeAnswer::Reached)));
        let request = [8, 0, 0, 0, 0, 0, 0, 7];
        assert!(dgram_answer(
            &heard(SocketAddr::new(dest, 0), None, request),
            true,
            false,
            0,
            dest,
            at
        )
        .is_none());
    }

    #[test]
    fn icmp_errors_classify_as_traceroute_reads_them() {
        let k = |e| classify(&e);
        assert_eq!(
            k(err(ORIGIN_ICMP, 11, 0)),
            Some((Kind::Counted(ProbeAnswer::TimeExceeded), None))
        );
        assert_eq!(
            k(err(ORIGIN_ICMP6, 3, 0)),
            Some((Kind::Counted(ProbeAnswer::TimeExceeded), None))
        );
        assert_eq!(
            k(err(ORIGIN_ICMP, 3, 3)),
            Some((Kind::Counted(ProbeAnswer::Reached), None))
        );
        assert_eq!(
            k(err(ORIGIN_ICMP6, 1, 4)),
            Some((Kind::Counted(ProbeAnswer::Reached), None))
        );
        assert_eq!(k(err(ORIGIN_ICMP, 3, 4)), Some((Kind::MtuTold(1500), None)));
        assert_eq!(k(err(ORIGIN_ICMP6, 2, 0)), Some((Kind::MtuTold(1500), None)));
        assert_eq!(
            k(err(ORIGIN_ICMP, 3, 13)),
            Some((Kind::Counted(ProbeAnswer::Unreachable), Some("!X".into())))
        );
        assert_eq!(
            k(err(ORIGIN_ICMP6, 1, 3)),
            Some((Kind::Counted(ProbeAnswer::Unreachable), Some("!H".into())))
        );
        assert_eq!(k(err(ORIGIN_ICMP, 5, 0)), None);
        assert_eq!(k(err(ORIGIN_LOCAL, 0, 0)), None);
    }
}
