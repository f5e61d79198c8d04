//! A fleet archive's configuration and inventory over HTTP: the mesh
//! document (`GET /api/v1/fleet/config`, with an ETag so that an agent
//! polling it gets 304 until it changes; `?host=NAME`: only the tasks
//! whose groups hold that host, as OSG's per-host "auto" URLs do), an
//! agent's registration (`PUT /api/v1/fleet/agents/{name}`) and the list
//! (`GET /api/v1/fleet/agents`: up, lapsed or never registered).

use axum::extract::{ConnectInfo, Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use goodput_archive::AgentRecord;
use goodput_core::time::ms_rfc3339;
use serde::{Deserialize, Serialize};

use crate::clock;
use crate::http::accept::Caller;
use crate::http::auth::authorise;
use crate::http::{internal, Ctx, Failure};

use crate::state::fleet::Registration;

/// `?host=NAME`.
#[derive(Deserialize)]
pub(crate) struct ConfigQuery {
    host: Option<String>,
}

/// An entity tag for a body: FNV-1a of its bytes.
fn etag(body: &[u8]) -> String {
    let h = goodput_core::hash::fnv1a(body);
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
