//! Reflectors this process knows to be stateful. A sender cannot always
//! tell: a session that lost only replies sees every reply carry its own
//! sequence number, as a stateless reflector's would. Whoever knows better
//! (the agent, whose peers' beacons are stateful) declares the reflector's
//! address for as long as its runs last, and every sender to that address
//! then splits its loss by direction.

use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;

/// The declared addresses, once per declaration that holds them.
static DECLARED: Mutex<Vec<SocketAddr>> = Mutex::new(Vec::new());

/// Declares the reflectors at `addrs` stateful (RFC 8762 §4.3: each
/// session's replies numbered by the reflector itself) until the returned
/// value is dropped. Declare only what is known: against a stateless
/// reflector, every loss would read as replies lost on the way back.
#[must_use = "the declaration ends when this is dropped"]
pub fn declare_stateful(addrs: Vec<SocketAddr>) -> StatefulDeclaration {
    let addrs: Vec<SocketAddr> = addrs.into_iter().map(canonical).collect();
    lock().extend(addrs.iter().copied());
    StatefulDeclaration(addrs)
}

/// A declaration of [`declare_stateful`], in force while it lives.
#[derive(Debug)]
pub struct StatefulDeclaration(Vec<SocketAddr>);

impl Drop for StatefulDeclaration {
    fn drop(&mut self) {
        let mut d = lock();
        for a in &self.0 {
            if let Some(i) = d.iter().position(|x| x == a) {
                d.swap_remove(i);
            }
        }
    }
}

/// Whether the reflector at `addr` is declared stateful.
pub(crate) fn is_declared_stateful(addr: SocketAddr) -> bool {
    let addr = canonical(addr);
    lock().contains(&addr)
}

fn lock() -> std::sync::MutexGuard<'static, Vec<SocketAddr>> {
    // A panic while holding it left a plain list: still good.
    DECLARED.lock().unwrap_or_else(|e| e.into_inner())
}

/// IPv4-mapped IPv6 addresses as IPv4, with no scope or flow label.
fn canonical(a: SocketAddr) -> SocketAddr {
    let ip = match a.ip() {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    };
    SocketAddr::new(ip, a.port())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn declarations_nest_and_end_when_dropped() {
        let a: SocketAddr = "192.0.2.77:862".parse().unwrap();
        let mapped: SocketAddr = "[::ffff:192.0.2.77]:862".parse().unwrap();
        assert!(!is_declared_stateful(a));
        let one = declare_stateful(vec![a]);
        let two = declare_stateful(vec![mapped]);
        assert!(is_declared_stateful(mapped));
        assert!(!is_declared_stateful("192.0.2.77:863".parse().unwrap()));
        drop(one);
        assert!(is_declared_stateful(a));
        drop(two);
        assert!(!is_declared_stateful(a));
    }
}
