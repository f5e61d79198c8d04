//! A fleet's configuration and inventory. A fleet archive serves the mesh
//! document (`GET /api/v1/fleet/config`, with an ETag so that an agent
//! polling it gets 304 until it changes; `?host=NAME`: only the tasks
//! whose groups hold that host, as OSG's per-host "auto" URLs do), and
//! keeps the inventory: each agent registers with every archive it
//! forwards to (`PUT /api/v1/fleet/agents/{name}`: version, addresses,
//! services, clock, configuration) and renews the lease before it runs
//! out; `GET /api/v1/fleet/agents` lists them as up, lapsed or never
//! registered, and the archive's grid shows a lapsed agent's
//! measurements as "agent down" rather than "no data".

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{ConnectInfo, Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use goodput_archive::AgentRecord;
use goodput_core::mesh::ms_rfc3339;
use serde::{Deserialize, Serialize};

use crate::clock;
use crate::http::accept::Caller;
use crate::http::auth::authorise;
use crate::http::{internal, Ctx, Failure};
use crate::log::log;
use crate::state::Shared;

/// `?host=NAME`.
#[derive(Deserialize)]
pub(crate) struct ConfigQuery {
    host: Option<String>,
}

/// An entity tag for a body: FNV-1a of its bytes.
fn etag(body: &[u8]) -> String {
    let h = body.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3)
    });
    format!("\"{h:016x}\"")
}

/// `GET /api/v1/fleet/config[?host=NAME]`: the mesh document in force
/// (JSON), or only what `NAME`'s agent needs; 304 when `If-None-Match`
/// names the same version. Without the token, its secrets are hidden.
pub(crate) async fn config(
    State(s): State<Ctx>,
    Query(q): Query<ConfigQuery>,
    headers: HeaderMap,
) -> Result<Response, Failure> {
    let loaded = s.loaded();
    let mut config = loaded.config.clone();
    if let Some(host) = &q.host {
        if !config.addresses.contains_key(host) {
            return Err(Failure(
                StatusCode::NOT_FOUND,
                format!("no address named '{host}' in the mesh"),
            ));
        }
        let involved: std::collections::BTreeSet<&str> = loaded
            .pairs
            .iter()
            .filter(|p| p.source == *host || p.dest.as_deref() == Some(host.as_str()))
            .map(|p| p.task.as_str())
            .collect();
        config.tasks.retain(|name, _| involved.contains(name.as_str()));
    }
    // The document's secrets (archive and alert URLs with passwords or
    // keys) go only to callers with the token: the fleet's agents.
    let whole = s
        .options
        .token
        .as_deref()
        .is_some_and(|t| crate::http::auth::token_matches(t, &headers));
    let body = if whole {
        serde_json::to_vec_pretty(&config).map_err(internal)?
    } else {
        let mut v = serde_json::to_value(&config).map_err(internal)?;
        crate::secrets::redact_json(&mut v);
        serde_json::to_vec_pretty(&v).map_err(internal)?
    };
    let tag = etag(&body);
    let same = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == tag));
    {
        let mut inner = s.lock();
        inner.counters.config_served += 1;
        inner.counters.config_not_modified += u64::from(same);
    }
    let mut r = if same {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        ([(header::CONTENT_TYPE, "application/json")], body).into_response()
    };
    if let Ok(v) = tag.parse() {
        r.headers_mut().insert(header::ETAG, v);
    }
    r.headers_mut().insert(
        header::CACHE_CONTROL,
        header::HeaderValue::from_static("no-cache"),
    );
    Ok(r)
}

/// What an agent says of itself when it registers.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub(crate) struct Registration {
    /// goodput's version.
    version: String,
    /// Its mesh addresses.
    addresses: Vec<String>,
    /// The services it offers (`tcp:4444`, `stamp:862`, …).
    services: Vec<String>,
    /// Whether its clock is synchronised, and its estimated error (s).
    clock_synchronised: bool,
    clock_error_s: f64,
    /// When its configuration was last loaded, and the last error.
    config_loaded: String,
    config_error: Option<String>,
    /// How long the lease lasts unless renewed (s, 5 to 3600).
    lease_s: u64,
}

/// `PUT /api/v1/fleet/agents/{name}` (the token): registers or renews.
pub(crate) async fn register(
    State(s): State<Ctx>,
    ConnectInfo(Caller(from)): ConnectInfo<Caller>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Result<Json<Registration>, axum::extract::rejection::JsonRejection>,
) -> Result<StatusCode, Failure> {
    crate::http::only_archive(&s)?;
    authorise(&s, from.ip(), &headers)?;
    crate::http::auth::write_quota(&s, from.ip(), crate::limits::Write::Registration, 1)?;
    let Json(r) = body.map_err(|e| crate::http::unreadable(&e))?;
    let loaded = s.loaded();
    if !loaded.config.addresses.contains_key(&name) {
        return Err(Failure(
            StatusCode::NOT_FOUND,
            format!("no address named '{name}' in this archive's mesh"),
        ));
    }
    // Only the agent at that address registers as it: the caller must be
    // one of its configured IP addresses (or what its host name resolves
    // to).
    if let Err(e) = crate::http::auth::caller_is(&loaded, &name, from.ip()).await {
        {
            let mut inner = s.lock();
            inner.counters.refused += 1;
            inner.counters.refused_not_owner += 1;
        }
        return Err(Failure(
            StatusCode::FORBIDDEN,
            format!("{e}: an agent registers only as its own address"),
        ));
    }
    if !(5..=3600).contains(&r.lease_s) {
        return Err(Failure(
            StatusCode::BAD_REQUEST,
            format!("lease_s must be 5 to 3600 s, not {}", r.lease_s),
        ));
    }
    if !(0.0..=3600.0).contains(&r.clock_error_s) {
        {
            let mut inner = s.lock();
            inner.counters.refused += 1;
            inner.counters.refused_out_of_range += 1;
        }
        return Err(Failure(
            StatusCode::BAD_REQUEST,
            format!("clock_error_s must be 0 to 3600 s, not {}", {
                // Huge values in short (1e308, not 309 digits).
                let e = r.clock_error_s;
                if e.abs() >= 1e15 {
                    format!("{e:e}")
                } else {
                    format!("{e}")
                }
            }),
        ));
    }
    let info = serde_json::to_value(&r).map_err(internal)?;
    if info.to_string().len() > 64 << 10 {
        return Err(Failure(
            StatusCode::PAYLOAD_TOO_LARGE,
            "a registration is at most 64 KiB".into(),
        ));
    }
    let now = clock::now_ms();
    s.archive
        .put_agent(&AgentRecord {
            name,
            info,
            seen_ms: now,
            lease_until_ms: now.saturating_add(r.lease_s.saturating_mul(1000)),
        })
        .await
        .map_err(|e| Failure(StatusCode::SERVICE_UNAVAILABLE, crate::state::store_failure(&e)))?;
    Ok(StatusCode::NO_CONTENT)
}

/// One agent in the fleet's list.
#[derive(Serialize, schemars::JsonSchema)]
pub(crate) struct AgentView {
    name: String,
    /// `up` (its lease runs), `lapsed`, or `unregistered` (a configured
    /// address whose agent never registered).
    state: &'static str,
    last_seen: Option<String>,
    lease_until: Option<String>,
    /// What it said when it last registered.
    info: Option<serde_json::Value>,
}

/// `GET /api/v1/fleet/agents`.
pub(crate) async fn agents(State(s): State<Ctx>) -> Result<Json<Vec<AgentView>>, Failure> {
    let known = s.archive.agents().await.map_err(internal)?;
    let loaded = s.loaded();
    let now = clock::now_ms();
    let mut out: Vec<AgentView> = known
        .into_iter()
        .map(|a| AgentView {
            state: if a.lease_until_ms >= now { "up" } else { "lapsed" },
            last_seen: Some(ms_rfc3339(a.seen_ms)),
            lease_until: Some(ms_rfc3339(a.lease_until_ms)),
            info: Some(a.info),
            name: a.name,
        })
        .collect();
    for (name, a) in &loaded.config.addresses {
        if !a.no_agent && !out.iter().any(|v| v.name == *name) {
            out.push(AgentView {
                name: name.clone(),
                state: "unregistered",
                last_seen: None,
                lease_until: None,
                info: None,
            });
        }
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(Json(out))
}

/// The agents whose lease lapsed, with when it ran out (a fleet
/// archive's grid marks their measurements).
pub(crate) async fn lapsed(s: &Shared) -> Vec<(String, u64)> {
    let now = clock::now_ms();
    s.archive
        .agents()
        .await
        .unwrap_or_default()
        .into_iter()
        .filter(|a| a.lease_until_ms < now)
        .map(|a| (a.name, a.lease_until_ms))
        .collect()
}

/// Whether an archive's URL reaches it over IPv6 (or IPv4), for the
/// address a registration leaves from: its IP address's family, or that
/// of the first address its host name resolves to (within 2 s) of a
/// family this host has a mesh address in.
async fn archive_family(url: &str, own: &[std::net::IpAddr]) -> Option<bool> {
    let host = reqwest::Url::parse(url)
        .ok()?
        .host_str()?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    if let Ok(ip) = host.parse::<std::net::IpAddr>() {
        return Some(ip.is_ipv6());
    }
    let found: Vec<std::net::SocketAddr> = tokio::time::timeout(
        Duration::from_secs(2),
        tokio::net::lookup_host((host.as_str(), 0)),
    )
    .await
    .ok()?
    .ok()?
    .collect();
    found
        .into_iter()
        .map(|a| a.ip().to_canonical().is_ipv6())
        .find(|v6| own.iter().any(|ip| ip.is_ipv6() == *v6))
}

/// Registers this agent with each archive it forwards to, and renews the
/// lease a third of its length before it runs out.
pub(crate) async fn registrar(shared: Arc<Shared>) {
    let lease = shared.options.lease.max(Duration::from_secs(5));
    let mut installed = shared.installed.subscribe();
    // By URL: the pin it was made for, and the client.
    let mut clients: std::collections::HashMap<String, (Option<[u8; 32]>, reqwest::Client)> =
        Default::default();
    let mut failing: std::collections::HashSet<String> = Default::default();
    loop {
        // The goodput archives named now (an HTTP receiver takes no
        // registration).
        let targets: Vec<crate::state::forward::ForwardTarget> = shared
            .targets()
            .into_iter()
            .filter(|t| t.kind == goodput_core::mesh::ArchiveKind::Goodput)
            .collect();
        let loaded = shared.loaded();
        // Each name registers from its own address (of the archive's
        // family), which is how the archive knows it is that agent.
        let own: Vec<std::net::IpAddr> = loaded.mine.iter().flat_map(|m| loaded.ips_of(m)).collect();
        clients.retain(|key, (pin, _)| {
            targets.iter().any(|t| {
                key.strip_prefix(&format!("{} ", t.url))
                    .is_some_and(|name| loaded.mine.iter().any(|m| m == name))
                    && t.pin == *pin
            })
        });
        for t in &targets {
            if loaded
                .mine
                .iter()
                .all(|name| clients.contains_key(&format!("{} {name}", t.url)))
            {
                continue;
            }
            // From this name's address of the archive's family: the
            // family of its IP address, or of the first address its host
            // name resolves to that this host has (unresolved: as the
            // system routes it, which the archive refuses as no one's).
            let family = archive_family(&t.url, &own).await;
            for name in &loaded.mine {
                clients.entry(format!("{} {name}", t.url)).or_insert_with(|| {
                    let from = family.and_then(|v6| {
                        loaded
                            .ips_of(name)
                            .into_iter()
                            .chain(own.iter().copied())
                            .find(|ip| ip.is_ipv6() == v6)
                    });
                    let mut b = reqwest::Client::builder()
                        .connect_timeout(Duration::from_secs(5))
                        .timeout(Duration::from_secs(10))
                        .local_address(from);
                    if let Some(pin) = t.pin {
                        b = b.use_preconfigured_tls(crate::tls::pinned_client_config(pin));
                    }
                    (t.pin, b.build().unwrap_or_default())
                });
            }
        }
        let (config_loaded, config_error) = {
            let inner = shared.lock();
            (
                ms_rfc3339(inner.loaded.loaded_ms),
                inner
                    .config_error
                    .as_ref()
                    .map(|(t, e)| format!("{}: {e}", ms_rfc3339(*t))),
            )
        };
        let clock = crate::clock::state();
        let o = &shared.options;
        let mut services = Vec::new();
        if o.beacon {
            services.push(format!("tcp:{}", o.beacon_port));
            services.push(format!("stamp:{}", o.stamp_port));
        }
        services.extend(o.iperf3_port.map(|p| format!("iperf3:{p}")));
        services.extend(o.quic_port.map(|p| format!("quic:{p}")));
        let reg = Registration {
            version: env!("CARGO_PKG_VERSION").into(),
            addresses: loaded
                .mine
                .iter()
                .flat_map(|m| loaded.ips_of(m))
                .map(|i| i.to_string())
                .collect(),
            services,
            clock_synchronised: clock.synchronised,
            clock_error_s: clock.estimated_error_us as f64 / 1e6,
            config_loaded,
            config_error,
            lease_s: lease.as_secs(),
        };
        for (key, (_, client)) in &clients {
            let Some((url, name)) = key.split_once(' ') else {
                continue;
            };
            let mut req = client.put(format!("{url}/api/v1/fleet/agents/{name}")).json(&reg);
            if let Some(t) = &o.token {
                req = req.bearer_auth(t);
            }
            let why = match req.send().await {
                Ok(r) if r.status().is_success() => None,
                Ok(r) => Some(format!("HTTP {}", r.status())),
                Err(e) => Some(e.to_string()),
            };
            let key = format!("{url} {name}");
            match why {
                None => {
                    if failing.remove(&key) {
                        log(&format!("registered with {url} as {name} again"));
                    }
                }
                Some(why) => {
                    if failing.insert(key) {
                        log(&format!("cannot register with {url} as {name} (retrying): {why}"));
                    }
                }
            }
        }
        tokio::select! {
            _ = shared.cancel.cancelled() => return,
            _ = tokio::time::sleep(lease / 3) => {}
            _ = installed.changed() => {}
        }
    }
}
