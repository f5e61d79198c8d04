//! Who may write: the bearer token, the allow list, the caller's address
//! against the configured ends of what it writes, and each requester's
//! write allowance.

use std::collections::HashMap;
use std::net::IpAddr;

use axum::http::{HeaderMap, StatusCode};
use goodput_archive::Run;

use crate::clock;
use crate::limits::Write;
use crate::state::Shared;

use super::archive::names_its_pair;
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

/// Who a caller of `POST /api/v1/archive/runs` is, worked out once per
/// configured name in a batch.
pub(crate) struct Owners {
    ip: IpAddr,
    known: HashMap<String, Result<(), String>>,
}

impl Owners {
    pub(crate) fn new(ip: IpAddr) -> Self {
        Self {
            ip: ip.to_canonical(),
            known: HashMap::new(),
        }
    }

    /// Whether the caller is configured address `name` ([`caller_is`]).
    async fn is(&mut self, loaded: &crate::state::config::Loaded, name: &str) -> Result<(), String> {
        if let Some(known) = self.known.get(name) {
            return known.clone();
        }
        let found = caller_is(loaded, name, self.ip).await;
        self.known.insert(name.to_owned(), found.clone());
        found
    }

    /// A forwarded run may be written only by its own agent: its ends
    /// are addresses of this archive's mesh, the caller is one of them
    /// (each end of a two-ended run keeps and forwards its own record),
    /// its id names that pair unless it is an on-demand run's, and a
    /// record already stored under an id that names no pair has the
    /// same ends (`stored`). `Err` is the reason, as the refusal says it.
    pub(crate) async fn check(
        &mut self,
        loaded: &crate::state::config::Loaded,
        run: &Run,
        stored: Option<&(String, Option<String>)>,
    ) -> Result<(), String> {
        let ends: Vec<&str> = std::iter::once(run.source.as_str())
            .chain(run.dest.as_deref())
            .collect();
        if let Some(e) = ends.iter().find(|e| !loaded.config.addresses.contains_key(**e)) {
            return Err(format!(
                "not owner: {e}, an end of run {}, is not an address of this archive's mesh",
                run.id
            ));
        }
        let mut why = Vec::new();
        let mut mine = false;
        for e in &ends {
            match self.is(loaded, e).await {
                Ok(()) => {
                    mine = true;
                    break;
                }
                Err(e) => why.push(e),
            }
        }
        if !mine {
            return Err(format!(
                "not owner: run {} is stored only from its source or dest ({})",
                run.id,
                why.join("; ")
            ));
        }
        if !run.id.starts_with("on-demand/") && !names_its_pair(run) {
            return Err(format!(
                "not owner: run {}'s id does not name its task {}, source {} and dest {}",
                run.id,
                run.task,
                run.source,
                run.dest.as_deref().unwrap_or("-")
            ));
        }
        if let Some((source, dest)) = stored {
            if (source, dest) != (&run.source, &run.dest) {
                return Err(format!(
                    "not owner: run {} is stored from {source} to {}, and only its own agent \
                     replaces it",
                    run.id,
                    dest.as_deref().unwrap_or("-")
                ));
            }
        }
        Ok(())
    }
}
