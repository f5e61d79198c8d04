//! Admission to the TCP services of `goodput server` (the TCP test port,
//! discard, echo and TLS echo): places in total and per client address, and
//! a bound on connections that have not finished their hello (or TLS
//! handshake), so that one client can neither take every descriptor nor
//! hold places with greetings it never finishes.
//!
//! A place is a [`Slot`], given back when the slot is dropped — on every
//! path, a panic's unwinding included — so no failure of a connection task
//! can leak one.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

pub use goodput_core::result::AdmissionCounters;

/// How many connections the TCP services hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdmissionLimits {
    /// Open connections in total.
    pub max_connections: u64,
    /// Open connections from one client address.
    pub max_per_client: u64,
    /// Connections in their hello or handshake, or being told why they were
    /// refused, in total. Past it a new connection is reset at once.
    pub max_pending: u64,
    /// The same from one client address.
    pub max_pending_per_client: u64,
}

impl AdmissionLimits {
    /// Defaults sized to the process's open-file limit `nofile`: an eighth
    /// of the descriptors stays free for listeners, the other services and
    /// files, one client address may hold a quarter of them, and at most
    /// 4,096 connections (1,024 from one address) may be in their hello.
    pub fn for_open_files(nofile: u64) -> Self {
        // RLIM_INFINITY is u64::MAX: no server holds more than this anyway.
        let nofile = nofile.min(1 << 24);
        let max_connections = (nofile - nofile / 8).max(1);
        let max_pending = 4096.min(max_connections);
        Self {
            max_connections,
            max_per_client: (nofile / 4).clamp(1, max_connections),
            max_pending,
            max_pending_per_client: (max_pending / 4).max(1),
        }
    }

    /// Limits that never refuse (a server embedded for one local client).
    pub fn unlimited() -> Self {
        Self {
            max_connections: u64::MAX,
            max_per_client: u64::MAX,
            max_pending: u64::MAX,
            max_pending_per_client: u64::MAX,
        }
    }
}

#[derive(Debug, Default)]
struct PerClient {
    open: u64,
    pending: u64,
}

#[derive(Debug, Default)]
struct Places {
    open: u64,
    pending: u64,
    clients: HashMap<IpAddr, PerClient>,
}

#[derive(Debug, Default)]
struct Counts {
    admitted: AtomicU64,
    refused_total: AtomicU64,
    refused_per_client: AtomicU64,
    reset_pending: AtomicU64,
    hello_timeouts: AtomicU64,
    internal_errors: AtomicU64,
}

/// The places of one server's TCP services, shared by all of them.
#[derive(Debug)]
pub struct Admission {
    limits: AdmissionLimits,
    places: Mutex<Places>,
    counts: Counts,
}

/// What [`Admission::try_admit`] decided for a new connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Serve it.
    Open,
    /// Tell it why not (it holds a pending place while it is told).
    Refuse(Refusal),
}

/// Why a connection got no place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The server holds its most connections.
    Total,
    /// The client's address holds its most connections.
    PerClient,
}

impl Refusal {
    /// The reason told to the client.
    pub fn reason(self, limits: &AdmissionLimits, ip: IpAddr) -> String {
        match self {
            Refusal::Total => format!(
                "the server holds its most connections ({})",
                limits.max_connections
            ),
            Refusal::PerClient => format!(
                "{ip} holds the most connections one client address may ({})",
                limits.max_per_client
            ),
        }
    }
}

impl Admission {
    /// Places under `limits`.
    pub fn new(limits: AdmissionLimits) -> Arc<Self> {
        Arc::new(Self {
            limits,
            places: Mutex::new(Places::default()),
            counts: Counts::default(),
        })
    }

    /// The limits.
    pub fn limits(&self) -> &AdmissionLimits {
        &self.limits
    }

    /// Takes a pending place for a connection from `ip`, and an open place
    /// if one is free. `None`: not even a pending place is free (the caller
    /// resets the connection; counted).
    pub fn try_admit(&self, ip: IpAddr) -> Option<Decision> {
        let l = &self.limits;
        let mut p = self.places.lock().unwrap_or_else(|e| e.into_inner());
        let (open_total, pending_total) = (p.open, p.pending);
        let c = p.clients.entry(ip).or_default();
        if pending_total >= l.max_pending || c.pending >= l.max_pending_per_client {
            if c.open == 0 && c.pending == 0 {
                p.clients.remove(&ip);
            }
            self.counts.reset_pending.fetch_add(1, Relaxed);
            return None;
        }
        c.pending += 1;
        let decision = if c.open >= l.max_per_client {
            self.counts.refused_per_client.fetch_add(1, Relaxed);
            Decision::Refuse(Refusal::PerClient)
        } else if open_total >= l.max_connections {
            self.counts.refused_total.fetch_add(1, Relaxed);
            Decision::Refuse(Refusal::Total)
        } else {
            c.open += 1;
            self.counts.admitted.fetch_add(1, Relaxed);
            Decision::Open
        };
        p.pending += 1;
        if decision == Decision::Open {
            p.open += 1;
        }
        Some(decision)
    }

    fn release(&self, ip: IpAddr, open: bool, pending: bool) {
        let mut p = self.places.lock().unwrap_or_else(|e| e.into_inner());
        p.open -= u64::from(open);
        p.pending -= u64::from(pending);
        if let Some(c) = p.clients.get_mut(&ip) {
            c.open -= u64::from(open);
            c.pending -= u64::from(pending);
            if c.open == 0 && c.pending == 0 {
                p.clients.remove(&ip);
            }
        }
    }

    /// Counts a hello or handshake that missed its deadline.
    pub fn count_hello_timeout(&self) {
        self.counts.hello_timeouts.fetch_add(1, Relaxed);
    }

    /// Counts a connection task that panicked.
    pub fn count_internal_error(&self) {
        self.counts.internal_errors.fetch_add(1, Relaxed);
    }

    /// What admission did so far, with the places held now.
    pub fn counters(&self) -> AdmissionCounters {
        let (open, pending, clients) = {
            let p = self.places.lock().unwrap_or_else(|e| e.into_inner());
            (p.open, p.pending, p.clients.len() as u64)
        };
        let c = &self.counts;
        AdmissionCounters {
            admitted: c.admitted.load(Relaxed),
            refused_total: c.refused_total.load(Relaxed),
            refused_per_client: c.refused_per_client.load(Relaxed),
            reset_pending: c.reset_pending.load(Relaxed),
            hello_timeouts: c.hello_timeouts.load(Relaxed),
            internal_errors: c.internal_errors.load(Relaxed),
            open_now: open,
            pending_now: pending,
            clients_now: clients,
        }
    }
}

/// What owns the places a [`Slot`] holds: the admission itself, or a
/// server's context holding it (so a connection keeps one reference for
/// both).
pub trait Admits: Send + Sync + 'static {
    /// The admission the places belong to.
    fn admission(&self) -> &Admission;
    /// Called when a slot is dropped before [`Slot::finish`]: its task
    /// panicked (or was cancelled). The default counts an internal error.
    fn on_abandoned(&self, _peer: SocketAddr) {
        self.admission().count_internal_error();
    }
}

impl Admits for Admission {
    fn admission(&self) -> &Admission {
        self
    }
}

/// A connection's places; given back when dropped. The flags are atomics
/// only so that they change through a shared reference (the connection's
/// other state borrows the context through the slot); one task owns them.
pub struct Slot<C: Admits> {
    ctx: Arc<C>,
    peer: SocketAddr,
    open: bool,
    pending: AtomicBool,
    finished: AtomicBool,
}

impl<C: Admits> Slot<C> {
    /// Admits a connection from `peer` under `ctx`'s admission; `None` when
    /// it must be reset at once.
    pub fn admit(ctx: &Arc<C>, peer: SocketAddr) -> Option<Self> {
        let decision = ctx.admission().try_admit(peer.ip())?;
        Some(Self {
            ctx: ctx.clone(),
            peer,
            open: decision == Decision::Open,
            pending: AtomicBool::new(true),
            finished: AtomicBool::new(false),
        })
    }

    /// Like [`Slot::admit`], for services with no way to say why: only a
    /// connection with an open place gets a slot.
    pub fn admit_open(ctx: &Arc<C>, peer: SocketAddr) -> Option<Self> {
        let slot = Self::admit(ctx, peer)?;
        if slot.open {
            Some(slot)
        } else {
            slot.finish();
            None
        }
    }

    /// The context the slot was admitted under.
    pub fn ctx(&self) -> &C {
        &self.ctx
    }

    /// The connection's peer.
    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// Why the connection got no open place (`None`: it has one).
    pub fn refusal(&self) -> Option<Refusal> {
        if self.open {
            return None;
        }
        let a = self.ctx.admission();
        let p = a.places.lock().unwrap_or_else(|e| e.into_inner());
        let mine = p.clients.get(&self.peer.ip()).map_or(0, |c| c.open);
        Some(if mine >= a.limits.max_per_client {
            Refusal::PerClient
        } else {
            Refusal::Total
        })
    }

    /// The hello (or handshake) is done: the pending place is given back.
    pub fn hello_done(&self) {
        if self.pending.swap(false, Relaxed) {
            self.ctx.admission().release(self.peer.ip(), false, true);
        }
    }

    /// The connection's task ended normally: dropping the slot now only
    /// gives its places back.
    pub fn finish(&self) {
        self.finished.store(true, Relaxed);
    }
}

impl<C: Admits> Drop for Slot<C> {
    fn drop(&mut self) {
        self.ctx
            .admission()
            .release(self.peer.ip(), self.open, *self.pending.get_mut());
        if !*self.finished.get_mut() {
            self.ctx.on_abandoned(self.peer);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(last: u8) -> SocketAddr {
        SocketAddr::from(([10, 0, 0, last], 1000))
    }

    fn limits() -> AdmissionLimits {
        AdmissionLimits {
            max_connections: 3,
            max_per_client: 2,
            max_pending: 4,
            max_pending_per_client: 3,
        }
    }

    #[test]
    fn a_client_at_its_cap_leaves_room_for_others() {
        let a = Admission::new(limits());
        let s1 = Slot::admit(&a, peer(1)).unwrap();
        let s2 = Slot::admit(&a, peer(1)).unwrap();
        s1.hello_done();
        s2.hello_done();
        let s3 = Slot::admit(&a, peer(1)).unwrap();
        assert_eq!(s3.refusal(), Some(Refusal::PerClient));
        let s4 = Slot::admit(&a, peer(2)).unwrap();
        assert_eq!(s4.refusal(), None, "another address still gets a place");
        let c = a.counters();
        assert_eq!((c.admitted, c.refused_per_client, c.open_now), (3, 1, 3));
    }

    #[test]
    fn pending_places_are_bounded_per_client_and_in_total() {
        let a = Admission::new(limits());
        let held: Vec<_> = (0..3).map(|_| Slot::admit(&a, peer(1)).unwrap()).collect();
        assert!(Slot::admit(&a, peer(1)).is_none(), "per-client pending cap");
        let other = Slot::admit(&a, peer(2)).unwrap();
        assert!(Slot::admit(&a, peer(3)).is_none(), "total pending cap");
        assert_eq!(a.counters().reset_pending, 2);
        drop(held);
        drop(other);
        let c = a.counters();
        assert_eq!((c.open_now, c.pending_now, c.clients_now), (0, 0, 0));
    }

    #[test]
    fn a_slot_dropped_by_a_panic_gives_its_places_back_and_counts_it() {
        let a = Admission::new(limits());
        let a2 = a.clone();
        let r = std::thread::spawn(move || {
            let s = Slot::admit(&a2, peer(1)).unwrap();
            s.hello_done();
            panic!("forced");
        })
        .join();
        assert!(r.is_err());
        let c = a.counters();
        assert_eq!((c.open_now, c.pending_now, c.internal_errors), (0, 0, 1));
        let s = Slot::admit(&a, peer(1)).unwrap();
        s.finish();
        drop(s);
        assert_eq!(a.counters().internal_errors, 1, "a finished slot is no error");
    }

    #[test]
    fn defaults_leave_descriptors_free_and_cap_one_client_at_a_quarter() {
        let l = AdmissionLimits::for_open_files(20_000);
        assert_eq!(l.max_connections, 17_500);
        assert_eq!(l.max_per_client, 5_000);
        assert_eq!((l.max_pending, l.max_pending_per_client), (4096, 1024));
        let tiny = AdmissionLimits::for_open_files(8);
        assert!(tiny.max_per_client >= 1 && tiny.max_pending_per_client >= 1);
    }
}
