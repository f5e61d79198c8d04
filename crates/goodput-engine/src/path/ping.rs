//! `goodput ping`: ICMP echo on an unprivileged ICMP socket, or the time a
//! TCP connect takes (SYN to SYN-ACK or reset) where ICMP sockets are not
//! open to the user or ICMP is filtered.

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use goodput_core::path::{PingMethod, PingReply};
use socket2::{Protocol, Socket, Type};
use tokio::io::Interest;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::sock;
use crate::Observer;

/// What a ping is asked to do (a validated spec, resolved).
#[derive(Debug, Clone)]
pub struct PingPlan {
    /// The address pinged.
    pub dest: IpAddr,
    /// Local address to send from.
    pub bind: Option<IpAddr>,
    /// ICMP, TCP, or ICMP where allowed.
    pub method: PingMethod,
    /// TCP's port.
    pub port: u16,
    /// Requests.
    pub count: u64,
    /// Time between requests.
    pub interval: Duration,
    /// How long a request waits.
    pub timeout: Duration,
    /// ICMP echo data bytes.
    pub payload: u32,
}

/// What a ping measured.
#[derive(Debug, Clone, Default)]
pub struct PingOutcome {
    /// ICMP or TCP.
    pub method: PingMethod,
    /// Why `auto` used TCP.
    pub fallback: Option<String>,
    /// Every request, in sequence order.
    pub replies: Vec<PingReply>,
    /// Replies beyond the first for a request.
    pub duplicates: u64,
    /// Stopped by the caller before the end.
    pub interrupted: bool,
}

/// Runs a ping; the observer sees each request's fate when it is known.
pub async fn ping(
    plan: PingPlan,
    observer: &mut dyn Observer,
    cancel: &CancellationToken,
) -> Result<PingOutcome, String> {
    let icmp = match plan.method {
        PingMethod::Tcp => Err(String::new()),
        _ => sock::icmp_socket(plan.dest, plan.bind),
    };
    // Where unprivileged ICMP sockets are not open to the user, one that
    // may open a raw socket (root, CAP_NET_RAW) still pings with ICMP.
    let icmp = match icmp {
        Err(why) if !why.is_empty() => match sock::raw_icmp_socket(plan.dest, plan.bind) {
            Ok(s) => {
                let why = why.split("; an administrator").next().unwrap_or(&why);
                observer.on_notice(&format!(
                    "{why}: pinging with ICMP echo on a raw socket instead (this user may open one)"
                ));
                return icmp_ping(s, Some(raw_id()), &plan, observer, cancel).await;
            }
            Err(_) => Err(why),
        },
        other => other,
    };
    match (icmp, plan.method) {
        (Ok(s), _) => icmp_ping(s, None, &plan, observer, cancel).await,
        (Err(why), PingMethod::Icmp) => Err(why),
        (Err(why), _) => {
            let fallback = (!why.is_empty())
                .then(|| format!("{why}; timing TCP connects to port {} instead", plan.port));
            if let Some(f) = &fallback {
                observer.on_notice(f);
            }
            let mut out = tcp_ping(&plan, observer, cancel).await?;
            out.fallback = fallback;
            Ok(out)
        }
    }
}

/// The requests' fates so far.
struct Book {
    replies: Vec<Option<PingReply>>,
    decided: u64,
    duplicates: u64,
}

impl Book {
    fn new(count: u64) -> Self {
        Self {
            replies: vec![None; usize::try_from(count).unwrap_or(usize::MAX)],
            decided: 0,
            duplicates: 0,
        }
    }

    /// Records the fate of request `seq` (1-based), once.
    fn decide(&mut self, r: PingReply, observer: &mut dyn Observer) {
        let Some(slot) = usize::try_from(r.seq - 1)
            .ok()
            .and_then(|i| self.replies.get_mut(i))
        else {
            return;
        };
        if slot.is_some() {
            return;
        }
        observer.on_ping(&r);
        *slot = Some(r);
        self.decided += 1;
    }

    fn finish(self, method: PingMethod, interrupted: bool) -> PingOutcome {
        PingOutcome {
            method,
            fallback: None,
            replies: self.replies.into_iter().flatten().collect(),
            duplicates: self.duplicates,
            interrupted,
        }
    }
}

fn lost(seq: u64) -> PingReply {
    PingReply {
        seq,
        rtt_us: None,
        ttl: None,
        bytes: None,
        refused: false,
        error: None,
    }
}

fn micros(d: Duration) -> f64 {
    d.as_nanos() as f64 / 1e3
}

/// The identifier of this process's echo requests on a raw socket (an
/// ICMP datagram socket has the kernel pick one): the process id's low
/// bits, as ping's.
fn raw_id() -> u16 {
    std::process::id() as u16
}

/// ICMP echo on `s`: an ICMP datagram socket, or with `raw_id` a raw one,
/// which sees every ICMP message to this host: only echo replies with
/// this identifier from the destination count.
async fn icmp_ping(
    s: Socket,
    raw_id: Option<u16>,
    plan: &PingPlan,
    observer: &mut dyn Observer,
    cancel: &CancellationToken,
) -> Result<PingOutcome, String> {
    let v6 = plan.dest.is_ipv6();
    let fd = sock::register(s, Interest::READABLE | Interest::ERROR)
        .map_err(|e| format!("cannot register the ICMP socket: {e}"))?;
    let mut book = Book::new(plan.count);
    // In flight by 16-bit wire sequence: (request number, sent at).
    let mut flying: HashMap<u16, (u64, Instant, i64)> = HashMap::new();
    // The same in send order, which is deadline order (one timeout for
    // all): (wire sequence, request number, sent at); entries whose
    // request was answered are skipped when they come up.
    let mut deadlines: VecDeque<(u16, u64, Instant)> = VecDeque::new();
    // Wire sequences answered and not yet reused, for duplicates.
    let mut answered: HashSet<u16> = HashSet::new();
    let start = Instant::now();
    let mut sent = 0u64;
    let to = SocketAddr::new(plan.dest, 0);
    let mut interrupted = false;
    while book.decided < plan.count {
        let next_send = (sent < plan.count).then(|| start + plan.interval.saturating_mul(sent as u32));
        while deadlines
            .front()
            .is_some_and(|(w, n, _)| flying.get(w).map(|f| f.0) != Some(*n))
        {
            deadlines.pop_front();
        }
        let next_loss = deadlines.front().map(|(_, _, at)| *at + plan.timeout);
        let wake = [next_send, next_loss].into_iter().flatten().min();
        tokio::select! {
            g = fd.ready(Interest::READABLE | Interest::ERROR) => {
                let mut g = g.map_err(|e| format!("waiting for replies: {e}"))?;
                g.clear_ready();
                while let Some(h) = sock::receive_any_from(fd.get_ref(), raw_id.is_some() && !v6).map_err(|e| format!("reading replies: {e}"))? {
                    let at = Instant::now();
                    let Some(wire) = sock::echo_seq(&h) else { continue };
                    if let Some(id) = raw_id {
                        let ours = sock::echo_id(&h) == Some(id)
                            && (h.error.is_some() || h.peer.map(|p| p.ip()) == Some(plan.dest));
                        if !ours {
                            continue;
                        }
                    }
                    if h.error.is_none() && !sock::is_echo_reply(&h, v6) {
                        continue;
                    }
                    let Some((n, sent_at, sent_ns)) = flying.get(&wire).copied() else {
                        // A reply to a request already answered.
                        if h.error.is_none() && answered.contains(&wire) {
                            book.duplicates += 1;
                        }
                        continue;
                    };
                    flying.remove(&wire);
                    if h.error.is_none() {
                        answered.insert(wire);
                    }
                    let reply = match &h.error {
                        None => PingReply {
                            seq: n,
                            rtt_us: Some(micros(sock::rtt(sent_at, sent_ns, at, h.stamp_ns))),
                            ttl: h.ttl,
                            bytes: u32::try_from(h.len).ok(),
                            refused: false,
                            error: None,
                        },
                        Some(e) => PingReply {
                            error: Some(icmp_error_text(e.origin, e.icmp_type, e.icmp_code, e.offender)),
                            ..lost(n)
                        },
                    };
                    book.decide(reply, observer);
                }
            }
            _ = tokio::time::sleep_until(wake.unwrap_or_else(Instant::now)), if wake.is_some() => {
                let now = Instant::now();
                if next_send.is_some_and(|t| t <= now) {
                    sent += 1;
                    let wire = sent as u16;
                    answered.remove(&wire);
                    let mut packet = sock::echo_request(v6, wire, plan.payload as usize);
                    if let Some(id) = raw_id {
                        sock::raw_echo_request(&mut packet, v6, id);
                    }
                    // A failed send may only report an earlier reply's ICMP
                    // error (IP_RECVERR); the failed call clears it.
                    let (at, sent_ns) = (Instant::now(), sock::wall_ns());
                    let first = fd.get_ref().send_to(&packet, &to.into());
                    match first.or_else(|_| fd.get_ref().send_to(&packet, &to.into())) {
                        Ok(_) => {
                            // More than 65,536 requests within one timeout:
                            // the oldest with this sequence gives way, lost.
                            if let Some((old, ..)) = flying.insert(wire, (sent, at, sent_ns)) {
                                book.decide(lost(old), observer);
                            }
                            deadlines.push_back((wire, sent, at));
                        }
                        Err(e) => book.decide(PingReply { error: Some(format!("send: {e}")), ..lost(sent) }, observer),
                    }
                }
                while let Some(&(w, n, at)) = deadlines.front() {
                    if at + plan.timeout > now {
                        break;
                    }
                    deadlines.pop_front();
                    if flying.get(&w).map(|f| f.0) == Some(n) {
                        flying.remove(&w);
                        book.decide(lost(n), observer);
                    }
                }
            }
            _ = cancel.cancelled() => {
                interrupted = true;
                break;
            }
        }
    }
    Ok(book.finish(PingMethod::Icmp, interrupted))
}

/// An ICMP error in ping's words.
fn icmp_error_text(origin: u8, t: u8, code: u8, from: Option<IpAddr>) -> String {
    let what = match (origin, t, code) {
        (sock::ORIGIN_ICMP, 11, _) | (sock::ORIGIN_ICMP6, 3, _) => "time to live exceeded".to_owned(),
        (sock::ORIGIN_ICMP, 3, 0) | (sock::ORIGIN_ICMP6, 1, 0) => "destination net unreachable".to_owned(),
        (sock::ORIGIN_ICMP, 3, 1) | (sock::ORIGIN_ICMP6, 1, 3) => "destination host unreachable".to_owned(),
        (sock::ORIGIN_ICMP, 3, 4) | (sock::ORIGIN_ICMP6, 2, _) => "fragmentation needed".to_owned(),
        (sock::ORIGIN_ICMP, 3, 13) | (sock::ORIGIN_ICMP6, 1, 1) => "administratively prohibited".to_owned(),
        (_, t, c) => format!("ICMP error type {t} code {c}"),
    };
    match from {
        Some(ip) => format!("{what} from {ip}"),
        None => what,
    }
}

async fn tcp_ping(
    plan: &PingPlan,
    observer: &mut dyn Observer,
    cancel: &CancellationToken,
) -> Result<PingOutcome, String> {
    let to = SocketAddr::new(plan.dest, plan.port);
    let mut book = Book::new(plan.count);
    let mut tasks: JoinSet<PingReply> = JoinSet::new();
    let start = Instant::now();
    let mut sent = 0u64;
    let mut interrupted = false;
    while book.decided < plan.count {
        let next_send = (sent < plan.count).then(|| start + plan.interval.saturating_mul(sent as u32));
        tokio::select! {
            Some(r) = tasks.join_next(), if !tasks.is_empty() => {
                let r = r.map_err(|e| format!("a connect task failed: {e}"))?;
                book.decide(r, observer);
            }
            _ = tokio::time::sleep_until(next_send.unwrap_or_else(Instant::now)), if next_send.is_some() => {
                sent += 1;
                let (n, bind, timeout) = (sent, plan.bind, plan.timeout);
                tasks.spawn(async move { connect_time(n, to, bind, timeout).await });
            }
            _ = cancel.cancelled() => {
                interrupted = true;
                break;
            }
        }
    }
    Ok(book.finish(PingMethod::Tcp, interrupted))
}

/// One connect, timed: a SYN-ACK or a reset is an answer.
async fn connect_time(seq: u64, to: SocketAddr, bind: Option<IpAddr>, timeout: Duration) -> PingReply {
    let fail = |e: String| PingReply {
        error: Some(e),
        ..lost(seq)
    };
    let s = match sock::probe_socket(to.ip(), bind, Type::STREAM, Protocol::TCP) {
        Ok(s) => s,
        Err(e) => return fail(format!("socket: {e}")),
    };
    let sent = Instant::now();
    match s.connect(&to.into()) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
        Err(e) => return fail(e.to_string()),
    }
    let (fate, at) = sock::connect_fate(s, timeout).await;
    let rtt = Some(micros(at.saturating_duration_since(sent)));
    match fate {
        sock::ConnectFate::Connected => PingReply {
            rtt_us: rtt,
            ..lost(seq)
        },
        sock::ConnectFate::Refused => PingReply {
            rtt_us: rtt,
            refused: true,
            ..lost(seq)
        },
        sock::ConnectFate::Icmp(h) => match h.error {
            Some(e) => fail(icmp_error_text(e.origin, e.icmp_type, e.icmp_code, e.offender)),
            None => lost(seq),
        },
        sock::ConnectFate::Failed(e) => fail(e.to_string()),
        sock::ConnectFate::Silent => lost(seq),
    }
}
