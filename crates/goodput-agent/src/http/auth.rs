//! Who may write: the bearer token, the allow list, the caller's address
//! against the configured ends of what it writes, and each requester's
//! write allowance.

use std::net::IpAddr;

use axum::http::{HeaderMap, StatusCode};

use crate::clock;
use crate::limits::Write;
use crate::state::Shared;

use super::{count_refusal, Failure};

/// Whether the request carries the token (compared in constant time).
pub(crate) fn token_matches(token: &str, headers: &HeaderMap) -> bool {
    let given = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    given.len() == token.len()
        && given
            .bytes()
            .zip(token.bytes())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

/// A caller that may change things: an admitted address with the token.
pub(crate) fn authorise(shared: &Shared, from: IpAddr, headers: &HeaderMap) -> Result<(), Failure> {
    let allow = &shared.options.limits.allow;
    let from = from.to_canonical();
    if !allow.is_empty() && !allow.iter().any(|c| c.contains(from)) {
        shared.lock().counters.refused += 1;
        return Err(Failure(
            StatusCode::FORBIDDEN,
            format!("limit allow: {from} is not in this agent's allowed addresses"),
        ));
    }
    let Some(token) = &shared.options.token else {
        return Err(Failure(
            StatusCode::FORBIDDEN,
            "this agent has no token set, so it takes no bookings or runs from others".into(),
        ));
    };
    if !token_matches(token, headers) {
        return Err(Failure(
            StatusCode::UNAUTHORIZED,
            "missing or wrong token (Authorization: Bearer TOKEN)".into(),
        ));
    }
    Ok(())
}

/// How long a host name's lookup may take when a caller claims to be an
/// address configured by name.
const RESOLVE_WITHIN: std::time::Duration = std::time::Duration::from_secs(2);
/// A write refused because the caller does not own what it writes.
pub(crate) fn not_owner(s: &Shared, why: String) -> Failure {
    count_refusal(s, |c| c.refused_not_owner += 1);
    Failure(StatusCode::FORBIDDEN, why)
}

/// Whether a caller at `ip` is the configured address `name`: one of its
/// configured IP addresses, or, for an address configured by host name,
/// one its name resolves to now (looked up within 2 s; no answer is no).
/// An address the mesh does not have is no one. `Err` says why not.
pub(crate) async fn caller_is(
    loaded: &crate::state::config::Loaded,
    name: &str,
    ip: IpAddr,
) -> Result<(), String> {
    let ip = ip.to_canonical();
    let Some(a) = loaded.config.addresses.get(name) else {
        return Err(format!("{name} is not an address of this agent's mesh"));
    };
    if loaded.ips_of(name).contains(&ip) {
        return Ok(());
    }
    let names: Vec<&str> = std::iter::once(&a.address)
        .chain(a.labels.values())
        .map(|t| t.trim_start_matches('[').trim_end_matches(']'))
        .filter(|t| t.parse::<IpAddr>().is_err())
        .take(8)
        .collect();
    for host in names {
        if let Ok(Ok(found)) = tokio::time::timeout(RESOLVE_WITHIN, tokio::net::lookup_host((host, 0))).await
        {
            if found.into_iter().any(|a| a.ip().to_canonical() == ip) {
                return Ok(());
            }
        }
    }
    Err(format!("{ip} is not {name}"))
}

/// A call about a run must come from the agent at its other end: a
/// configured address, and the caller one of its IP addresses (or of
/// what its host name resolves to).
pub(crate) async fn from_the_other_end(
    s: &Shared,
    loaded: &crate::state::config::Loaded,
    other: &str,
    ip: IpAddr,
) -> Result<(), Failure> {
    if !loaded.config.addresses.contains_key(other) {
        return Err(not_owner(
            s,
            format!("{other}, the run's other end, is not an address of this agent's mesh"),
        ));
    }
    caller_is(loaded, other, ip)
        .await
        .map_err(|e| not_owner(s, format!("{e}, the run's other end")))
}

/// A requester's write quota: `n` writes of `kind`, or 429 naming the
/// limit.
pub(crate) fn write_quota(s: &Shared, who: IpAddr, kind: Write, n: u64) -> Result<(), Failure> {
    let now = clock::now_ms();
    let mut inner = s.lock();
    match inner
        .writes
        .take(&s.options.limits, who.to_canonical(), kind, n, now)
    {
        Ok(()) => Ok(()),
        Err(e) => {
            inner.counters.refused += 1;
            inner.counters.refused_write_quota += 1;
            Err(Failure(StatusCode::TOO_MANY_REQUESTS, e))
        }
    }
}
