//! The API's connections: how many, from whom, and for how long.
//!
//! The agent's API is exposed all day, so a connection is a resource like
//! any other: the gate caps connections overall and per source address,
//! and when the overall cap is reached a newcomer from an address that
//! holds few connections takes the place of one held by the address that
//! holds the most — a flood from many addresses cannot lock out a peer or
//! an operator who needs one connection. Each connection is served by
//! hyper with a deadline on its request headers (which also closes idle
//! keep-alive connections) and a deadline on any write that makes no
//! progress (a client that stops reading its answer).

use std::collections::HashMap;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use serde::Serialize;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_util::sync::CancellationToken;

use crate::limits::ConnLimits;

/// What the gate refused and holds, for health and `/metrics`.
#[derive(Debug, Clone, Copy, Default, Serialize, schemars::JsonSchema)]
pub(crate) struct ConnCounters {
    /// Connections open now.
    pub(crate) open: u64,
    /// The cap in force.
    pub(crate) max: u64,
    /// Connections accepted since start.
    pub(crate) accepted: u64,
    /// Closed at once: their address held its share already.
    pub(crate) refused_per_address: u64,
    /// Closed at once: every connection was taken by addresses holding no
    /// more than the newcomer's.
    pub(crate) refused_full: u64,
    /// Closed to make room for an address holding fewer.
    pub(crate) evicted: u64,
    /// Requests turned away because their address had its share under way.
    pub(crate) requests_refused_per_address: u64,
    /// Requests turned away because every permit of their pool was taken.
    pub(crate) requests_refused_busy: u64,
    /// Bodies that did not arrive in time.
    pub(crate) slow_bodies: u64,
    /// Mutating requests refused on their headers, before a body was read.
    pub(crate) refused_before_body: u64,
}

struct Held {
    /// Connections per address, each with the token that closes it, oldest
    /// first.
    by_address: HashMap<IpAddr, Vec<(u64, CancellationToken)>>,
    open: usize,
    next_id: u64,
}

/// Counts connections and decides who may have one.
pub(crate) struct Gate {
    limits: ConnLimits,
    max: usize,
    held: Mutex<Held>,
    /// Requests under way per address.
    requests: Mutex<HashMap<IpAddr, usize>>,
    pub(crate) accepted: AtomicU64,
    pub(crate) refused_per_address: AtomicU64,
    pub(crate) refused_full: AtomicU64,
    pub(crate) evicted: AtomicU64,
    pub(crate) requests_refused_per_address: AtomicU64,
    pub(crate) requests_refused_busy: AtomicU64,
    pub(crate) slow_bodies: AtomicU64,
    pub(crate) refused_before_body: AtomicU64,
}

/// Why a connection was not let in.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    PerAddress,
    Full,
}

/// A connection let in: its place is given back when this is dropped.
pub(crate) struct Slot {
    gate: Arc<Gate>,
    ip: IpAddr,
    id: u64,
    /// Cancelled when the gate takes the place back for someone else.
    pub(crate) evicted: CancellationToken,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut guard = self.gate.held.lock().unwrap_or_else(|e| e.into_inner());
        let held = &mut *guard;
        if let Some(list) = held.by_address.get_mut(&self.ip) {
            if let Some(i) = list.iter().position(|(id, _)| *id == self.id) {
                list.remove(i);
                held.open -= 1;
            }
            if list.is_empty() {
                held.by_address.remove(&self.ip);
            }
        }
    }
}

/// A request let in: its address's count is given back when dropped.
pub(crate) struct RequestSlot {
    gate: Arc<Gate>,
    ip: IpAddr,
}

impl Drop for RequestSlot {
    fn drop(&mut self) {
        let mut r = self.gate.requests.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = r.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                r.remove(&self.ip);
            }
        }
    }
}

impl Gate {
    pub(crate) fn new(limits: ConnLimits) -> Arc<Self> {
        let max = limits.effective_max();
        Arc::new(Self {
            max,
            limits,
            held: Mutex::new(Held {
                by_address: HashMap::new(),
                open: 0,
                next_id: 0,
            }),
            requests: Mutex::new(HashMap::new()),
            accepted: AtomicU64::new(0),
            refused_per_address: AtomicU64::new(0),
            refused_full: AtomicU64::new(0),
            evicted: AtomicU64::new(0),
            requests_refused_per_address: AtomicU64::new(0),
            requests_refused_busy: AtomicU64::new(0),
            slow_bodies: AtomicU64::new(0),
            refused_before_body: AtomicU64::new(0),
        })
    }

    pub(crate) fn limits(&self) -> &ConnLimits {
        &self.limits
    }

    /// Lets a connection from `ip` in, or says why not. When every place
    /// is taken, the address holding the most gives up its oldest
    /// connection, if it holds more than `ip` would with this one.
    pub(crate) fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<Slot, Refused> {
        let ip = ip.to_canonical();
        let mut guard = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let held = &mut *guard;
        let mine = held.by_address.get(&ip).map_or(0, Vec::len);
        if mine >= self.limits.per_address {
            self.refused_per_address.fetch_add(1, Ordering::Relaxed);
            return Err(Refused::PerAddress);
        }
        if held.open >= self.max {
            let most = held
                .by_address
                .iter()
                .max_by_key(|(_, l)| l.len())
                .map(|(a, l)| (*a, l.len()));
            match most {
                Some((victim, n)) if n > mine + 1 => {
                    let list = held.by_address.get_mut(&victim).expect("just found");
                    let (_, token) = list.remove(0);
                    if list.is_empty() {
                        held.by_address.remove(&victim);
                    }
                    held.open -= 1;
                    token.cancel();
                    self.evicted.fetch_add(1, Ordering::Relaxed);
                }
                _ => {
                    self.refused_full.fetch_add(1, Ordering::Relaxed);
                    return Err(Refused::Full);
                }
            }
        }
        let id = held.next_id;
        held.next_id += 1;
        let evicted = CancellationToken::new();
        held.by_address.entry(ip).or_default().push((id, evicted.clone()));
        held.open += 1;
        self.accepted.fetch_add(1, Ordering::Relaxed);
        Ok(Slot {
            gate: self.clone(),
            ip,
            id,
            evicted,
        })
    }

    /// Lets a request from `ip` be handled, unless its address has its
    /// share under way.
    pub(crate) fn request(self: &Arc<Self>, ip: IpAddr) -> Option<RequestSlot> {
        let ip = ip.to_canonical();
        let mut r = self.requests.lock().unwrap_or_else(|e| e.into_inner());
        let n = r.entry(ip).or_insert(0);
        if *n >= self.limits.requests_per_address {
            if *n == 0 {
                r.remove(&ip);
            }
            self.requests_refused_per_address.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        *n += 1;
        Some(RequestSlot {
            gate: self.clone(),
            ip,
        })
    }

    /// The longest a body of `announced` bytes (or of the largest size
    /// allowed, when not announced) may take to arrive.
    pub(crate) fn body_deadline(&self, announced: u64) -> Duration {
        let rate = self.limits.body_min_rate.max(1);
        self.limits.body_timeout + Duration::from_millis(announced.saturating_mul(1000) / rate)
    }

    pub(crate) fn counters(&self) -> ConnCounters {
        let open = self.held.lock().unwrap_or_else(|e| e.into_inner()).open as u64;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        ConnCounters {
            open,
            max: self.max as u64,
            accepted: get(&self.accepted),
            refused_per_address: get(&self.refused_per_address),
            refused_full: get(&self.refused_full),
            evicted: get(&self.evicted),
            requests_refused_per_address: get(&self.requests_refused_per_address),
            requests_refused_busy: get(&self.requests_refused_busy),
            slow_bodies: get(&self.slow_bodies),
            refused_before_body: get(&self.refused_before_body),
        }
    }
}

/// A stream whose writes fail once they have made no progress for
/// `stall`: a client that stops reading cannot keep its connection, and
/// the memory of its answer, for ever.
pub(crate) struct Watched<T> {
    inner: T,
    stall: Duration,
    since: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<T> Watched<T> {
    pub(crate) fn new(inner: T, stall: Duration) -> Self {
        Self {
            inner,
            stall,
            since: None,
        }
    }

    fn stalled(&mut self, cx: &mut Context<'_>) -> bool {
        let stall = self.stall;
        let sleep = self
            .since
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(stall)));
        sleep.as_mut().poll(cx).is_ready()
    }
}

fn stall_error() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::TimedOut, "the client stopped reading")
}

impl<T: AsyncRead + Unpin> AsyncRead for Watched<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T> Watched<T> {
    /// A write's outcome, failed once it has been pending for `stall`.
    fn watch<R>(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<std::io::Result<R>>,
    ) -> Poll<std::io::Result<R>> {
        match polled {
            Poll::Pending if self.stalled(cx) => Poll::Ready(Err(stall_error())),
            Poll::Pending => Poll::Pending,
            done => {
                self.since = None;
                done
            }
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Watched<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.watch(cx, polled)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_flush(cx);
        self.watch(cx, polled)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.watch(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(max: usize, per: usize) -> ConnLimits {
        ConnLimits {
            max_connections: max,
            per_address: per,
            ..ConnLimits::default()
        }
    }

    #[test]
    fn one_address_gets_its_share_and_no_more() {
        let g = Gate::new(limits(100, 3));
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let held: Vec<Slot> = (0..3).map(|_| g.admit(a).unwrap()).collect();
        assert_eq!(g.admit(a).err(), Some(Refused::PerAddress));
        drop(held);
        assert!(g.admit(a).is_ok());
        assert_eq!(g.counters().refused_per_address, 1);
    }

    #[test]
    fn when_full_the_address_holding_most_gives_way() {
        let g = Gate::new(limits(4, 4));
        let flood: IpAddr = "10.0.0.1".parse().unwrap();
        let peer: IpAddr = "10.0.0.2".parse().unwrap();
        let held: Vec<Slot> = (0..4).map(|_| g.admit(flood).unwrap()).collect();
        let p = g.admit(peer).expect("the peer takes a flooder's place");
        assert!(
            held[0].evicted.is_cancelled(),
            "the oldest of the flood is closed"
        );
        assert!(!held[1].evicted.is_cancelled());
        assert_eq!(g.counters().open, 4);
        assert_eq!(g.counters().evicted, 1);
        // Two each now would be fair: the peer's second evicts again, its
        // third does not (2 vs 3 + 1).
        let _p2 = g.admit(peer).unwrap();
        assert!(held[1].evicted.is_cancelled());
        assert_eq!(g.admit(peer).err(), Some(Refused::Full));
        assert_eq!(g.counters().refused_full, 1);
        drop(p);
        // The evicted slots dropped late give nothing back twice.
        drop(held);
        assert_eq!(g.counters().open, 1);
    }

    #[test]
    fn requests_per_address_are_capped() {
        let g = Gate::new(ConnLimits {
            requests_per_address: 2,
            ..ConnLimits::default()
        });
        let a: IpAddr = "::ffff:10.0.0.1".parse().unwrap();
        let r1 = g.request(a).unwrap();
        let _r2 = g.request("10.0.0.1".parse().unwrap()).unwrap();
        assert!(g.request(a).is_none(), "one address however it is written");
        drop(r1);
        assert!(g.request(a).is_some());
    }

    #[test]
    fn a_body_has_time_for_its_size() {
        let g = Gate::new(ConnLimits::default());
        assert_eq!(g.body_deadline(0), Duration::from_secs(10));
        assert_eq!(g.body_deadline(4 << 20), Duration::from_secs(10 + 64));
    }
}
