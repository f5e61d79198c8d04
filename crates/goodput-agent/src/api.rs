//! The HTTP API, `/api/v1` (JSON) and `/metrics` (OpenMetrics text). It is
//! also how agents book runs with each other and hand over results.
//! Reading needs nothing; booking, asking for runs and storing results
//! need the shared token (`Authorization: Bearer …`) and an address the
//! allow list admits.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::extract::{ConnectInfo, DefaultBodyLimit, Path, Query, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use goodput_archive::{Metric, Run, RunFilter, RunState};
use goodput_core::mesh::{duration_ms, ms_rfc3339};
use goodput_core::schedule::RunClass;
use goodput_core::spec::TestSpec;
use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::limits::{Bucket, Write};
use crate::listen::{Gate, Watched};
use crate::peer::{Reservation, SlotView};
use crate::plan::{plan, Placed, Planning};
use crate::state::{run_number, Booked, Counters, Shared};
use crate::tls::{ApiListener, Caller};
use crate::{clock, log};

pub(crate) type Ctx = Arc<Shared>;

/// An error answer: a status and one sentence.
pub(crate) struct Failure(pub(crate) StatusCode, pub(crate) String);

impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        (self.0, Json(serde_json::json!({ "error": self.1 }))).into_response()
    }
}

fn bad(text: impl Into<String>) -> Failure {
    Failure(StatusCode::BAD_REQUEST, text.into())
}

/// A body that does not read: 413 when it is past the body limit (a
/// forwarder then sends smaller batches), else 400.
pub(crate) fn unreadable(e: &axum::extract::rejection::JsonRejection) -> Failure {
    let status = if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
        StatusCode::PAYLOAD_TOO_LARGE
    } else {
        StatusCode::BAD_REQUEST
    };
    Failure(status, e.body_text())
}

pub(crate) fn internal(e: impl std::fmt::Display) -> Failure {
    Failure(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
}

/// A write the archive did not take: 503, and why.
fn unstored(why: String) -> Failure {
    Failure(StatusCode::SERVICE_UNAVAILABLE, why)
}

/// A write refused at once while the archive's disk is full.
fn archive_has_room(s: &Shared) -> Result<(), Failure> {
    s.archive_full().map_or(Ok(()), |why| Err(unstored(why)))
}

/// Binds the API's listening sockets: HTTPS when this host's address has
/// a pinned certificate in the configuration (the certificate must be the
/// one pinned) and always for a fleet archive, and the plain ones asked
/// for.
pub(crate) async fn bind(shared: &Shared, gate: &Arc<Gate>) -> Result<Vec<ApiListener>, String> {
    let loaded = shared.loaded();
    let pins: Vec<(&String, &String)> = loaded
        .mine
        .iter()
        .filter_map(|m| loaded.config.addresses[m].tls_sha256.as_ref().map(|p| (m, p)))
        .collect();
    let acceptor = match pins.first() {
        // A fleet archive takes tokens from across the network: its API is
        // always HTTPS (--plain-api-listen adds plain sockets, for a local
        // proxy or Prometheus), with the given certificate or one made
        // once beside --archive; agents pin its fingerprint.
        None if shared.is_archive() => {
            let names: Vec<String> = shared
                .options
                .api_listen
                .iter()
                .map(|a| a.ip().to_string())
                .collect();
            let given = shared
                .options
                .tls_cert
                .as_ref()
                .map(|(c, k)| (c.as_path(), k.as_path()));
            let (chain, key) = crate::tls::identity(given, &shared.options.archive, &names)?;
            Some(crate::tls::acceptor(chain, key)?)
        }
        None => None,
        Some(_) => {
            let names: Vec<String> = loaded
                .mine
                .iter()
                .map(|m| loaded.config.addresses[m].address.clone())
                .collect();
            let given = shared
                .options
                .tls_cert
                .as_ref()
                .map(|(c, k)| (c.as_path(), k.as_path()));
            let (chain, key) = crate::tls::identity(given, &shared.options.archive, &names)?;
            let have = crate::tls::fingerprint(chain[0].as_ref());
            for (name, pin) in &pins {
                let want = crate::tls::read_pin(pin)?;
                if crate::tls::read_pin(&have)? != want {
                    return Err(format!(
                        "addresses.{name}.tls_sha256 is {pin}, but this agent's certificate is {have} \
                         (`goodput agent --print-fingerprint`)"
                    ));
                }
            }
            Some(crate::tls::acceptor(chain, key)?)
        }
    };
    let mut addrs = shared.options.api_listen.clone();
    // A fleet archive given only plain sockets (behind a proxy) listens
    // on those alone.
    let plain_only = shared.is_archive() && !shared.options.plain_api_listen.is_empty();
    if addrs.is_empty() && !plain_only {
        let port = loaded.config.agent.api_port;
        addrs = loaded
            .mine
            .iter()
            .filter_map(|m| loaded.config.addresses[m].address.parse::<IpAddr>().ok())
            .map(|ip| SocketAddr::new(ip, port))
            .collect();
        if addrs.is_empty() {
            addrs.push(SocketAddr::new(std::net::Ipv6Addr::UNSPECIFIED.into(), port));
        }
    }
    let mut out = Vec::new();
    let plain = shared.options.plain_api_listen.iter().map(|a| (*a, None));
    for (a, tls) in addrs.into_iter().map(|a| (a, acceptor.clone())).chain(plain) {
        let l = listen_socket(a).map_err(|e| format!("cannot listen on {a} for the API: {e}"))?;
        let scheme = if tls.is_some() { "https" } else { "http" };
        log(&format!("API on {scheme}://{}", l.local_addr().unwrap_or(a)));
        out.push(ApiListener::new(l, tls, gate.clone()).map_err(|e| e.to_string())?);
    }
    Ok(out)
}

/// A listening socket with the longest accept queue the system allows: a
/// flood of connections fills a short one, and a new client's SYN is then
/// dropped and sent again only a second later. The gate closes what it
/// does not admit, so the queue drains as fast as the agent accepts.
fn listen_socket(a: SocketAddr) -> std::io::Result<TcpListener> {
    let s = if a.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    s.set_reuseaddr(true)?;
    s.bind(a)?;
    // The kernel holds it to net.core.somaxconn (4096 on current kernels).
    s.listen(65_535)
}

/// Serves the API on one socket until the agent stops: each connection
/// in a task of its own, served by hyper with a deadline on request
/// headers (which also ends idle kept-alive connections) and on writes
/// that make no progress, and closed when the gate gives its place to
/// another address.
pub(crate) async fn serve(shared: Ctx, mut listener: ApiListener, gate: Arc<Gate>) {
    use hyper_util::rt::{TokioIo, TokioTimer};
    let cancel = shared.cancel.clone();
    let app = router(shared, gate.clone());
    let limits = gate.limits().clone();
    let local = listener.local_addr();
    loop {
        let (io, from, slot) = tokio::select! {
            _ = cancel.cancelled() => return,
            got = listener.accept() => match got {
                Some(x) => x,
                None => {
                    log(&format!("the API on {local} stopped accepting"));
                    return;
                }
            },
        };
        let app = app.clone();
        let cancel = cancel.clone();
        let limits = limits.clone();
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |mut req: Request<hyper::body::Incoming>| {
                req.extensions_mut().insert(ConnectInfo(Caller(from)));
                tower::ServiceExt::oneshot(app.clone(), req)
            });
            let io = TokioIo::new(Watched::new(io, limits.write_stall));
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_timeout)
                .max_buf_size(MAX_HEAD)
                .serve_connection(io, svc);
            tokio::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => {}
                // Its place went to an address holding fewer.
                _ = slot.evicted.cancelled() => {}
                _ = cancel.cancelled() => {
                    conn.as_mut().graceful_shutdown();
                    let _ = tokio::time::timeout(std::time::Duration::from_secs(5), conn).await;
                }
            }
            drop(slot);
        });
    }
}

/// Largest request head (request line and headers) read, bytes.
const MAX_HEAD: usize = 64 * 1024;

/// What the admission step shares: the agent, the gate, and the request
/// permits of the two pools (the mesh's agents and token holders; every
/// one else).
#[derive(Clone)]
struct Admission {
    shared: Ctx,
    gate: Arc<Gate>,
    peers: Arc<Semaphore>,
    public: Arc<Semaphore>,
    /// The mesh's IP addresses, for the configuration they were read from.
    mesh_ips: Arc<std::sync::Mutex<(usize, Arc<HashSet<IpAddr>>)>>,
}

impl Admission {
    /// Whether `ip` is an address of the mesh's configuration.
    fn in_mesh(&self, ip: IpAddr) -> bool {
        let loaded = self.shared.loaded();
        let id = Arc::as_ptr(&loaded) as usize;
        let ips = {
            let mut m = self.mesh_ips.lock().unwrap_or_else(|e| e.into_inner());
            if m.0 != id {
                let set: HashSet<IpAddr> = loaded
                    .config
                    .addresses
                    .keys()
                    .flat_map(|n| loaded.ips_of(n))
                    .map(|ip| ip.to_canonical())
                    .collect();
                *m = (id, Arc::new(set));
            }
            m.1.clone()
        };
        ips.contains(&ip)
    }
}

/// An answer that also closes the connection (its body, if any, is not
/// read).
fn closing(f: Failure) -> Response {
    let mut r = f.into_response();
    r.headers_mut().insert(
        axum::http::header::CONNECTION,
        axum::http::HeaderValue::from_static("close"),
    );
    r
}

/// Every request passes here before its handler: a request that would
/// change something is refused on its headers when the caller may not
/// (before a byte of its body is read), an address has at most its share
/// of requests under way, a body must arrive in the time its size earns,
/// and only then is a permit taken — from the peers' pool for the mesh's
/// addresses and token holders, from the public pool for everyone else,
/// so a flood of strangers never takes the permits bookings need.
async fn admit(State(a): State<Admission>, req: Request, next: Next) -> Response {
    use axum::http::Method;
    let Some(ConnectInfo(Caller(from))) = req.extensions().get::<ConnectInfo<Caller>>().copied() else {
        return next.run(req).await;
    };
    let ip = from.ip().to_canonical();
    let mutating = !matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS);
    let has_token = if mutating {
        if let Err(why) = authorise(&a.shared, ip, req.headers()) {
            a.gate.refused_before_body.fetch_add(1, Ordering::Relaxed);
            return closing(why);
        }
        true
    } else {
        a.shared
            .options
            .token
            .as_deref()
            .is_some_and(|t| token_matches(t, req.headers()))
    };
    let Some(_mine) = a.gate.request(ip) else {
        return closing(Failure(
            StatusCode::TOO_MANY_REQUESTS,
            format!(
                "limit requests_per_address: {ip} has {} requests under way",
                a.gate.limits().requests_per_address
            ),
        ));
    };
    let announced = req
        .headers()
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let chunked = req.headers().contains_key(axum::http::header::TRANSFER_ENCODING);
    let req = if announced.unwrap_or(0) > 0 || chunked {
        if !mutating {
            return closing(bad(format!("a {} takes no body", req.method())));
        }
        let max = a.shared.options.limits.max_body;
        if announced.is_some_and(|n| n > max as u64) {
            return closing(Failure(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("limit max_body: the body is larger than {max} bytes"),
            ));
        }
        let deadline = a.gate.body_deadline(announced.unwrap_or(max as u64));
        let (parts, body) = req.into_parts();
        match tokio::time::timeout(deadline, axum::body::to_bytes(body, max)).await {
            Ok(Ok(bytes)) => Request::from_parts(parts, axum::body::Body::from(bytes)),
            Ok(Err(e)) => {
                let too_large =
                    std::error::Error::source(&e).is_some_and(|s| s.is::<http_body_util::LengthLimitError>());
                return closing(if too_large {
                    Failure(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        format!("limit max_body: the body is larger than {max} bytes"),
                    )
                } else {
                    bad(format!("the body did not read: {e}"))
                });
            }
            Err(_) => {
                a.gate.slow_bodies.fetch_add(1, Ordering::Relaxed);
                return closing(Failure(
                    StatusCode::REQUEST_TIMEOUT,
                    format!(
                        "limit body_timeout: the body did not arrive within {} s",
                        deadline.as_secs()
                    ),
                ));
            }
        }
    } else {
        req
    };
    let pool = if has_token || a.in_mesh(ip) {
        &a.peers
    } else {
        &a.public
    };
    // Requests past the limit are turned away, not queued.
    let Ok(_held) = pool.clone().try_acquire_owned() else {
        a.gate.requests_refused_busy.fetch_add(1, Ordering::Relaxed);
        return Failure(
            StatusCode::SERVICE_UNAVAILABLE,
            "limit max_requests: too many requests under way".into(),
        )
        .into_response();
    };
    next.run(req).await
}

/// Headers on every answer: the pages load nothing from elsewhere, run no
/// script and are not to be framed; no answer's type is to be guessed.
async fn secure_headers(req: Request, next: Next) -> Response {
    use axum::http::{header, HeaderValue};
    let mut r = next.run(req).await;
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; \
             form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    r
}

/// The routes.
pub(crate) fn router(shared: Ctx, gate: Arc<Gate>) -> Router {
    let requests = shared.options.limits.max_requests.max(1);
    let admission = Admission {
        shared: shared.clone(),
        gate: gate.clone(),
        peers: Arc::new(Semaphore::new(requests)),
        public: Arc::new(Semaphore::new(requests)),
        mesh_ips: Arc::new(std::sync::Mutex::new((0, Arc::new(HashSet::new())))),
    };
    let body = shared.options.limits.max_body;
    Router::new()
        .route("/api/v1/health", get(health))
        .route("/api/v1/config", get(config))
        .route("/api/v1/tasks", get(tasks))
        .route("/api/v1/schedule", get(schedule))
        .route("/api/v1/reservations", post(reserve))
        .route("/api/v1/runs", get(runs).post(on_demand))
        .route("/api/v1/runs/{*id}", get(one_run).put(put_run))
        .route("/api/v1/archive/runs", post(ingest))
        .route("/api/v1/archive/pscheduler", post(pscheduler).put(pscheduler))
        .route("/api/v1/fleet/config", get(crate::fleet::config))
        .route("/api/v1/fleet/agents", get(crate::fleet::agents))
        .route(
            "/api/v1/fleet/agents/{name}",
            axum::routing::put(crate::fleet::register),
        )
        .route("/api/v1/series", get(series))
        .route("/api/v1/paths", get(paths))
        .route("/api/v1/grid", get(grid))
        .route("/api/v1/alerts", get(alerts))
        .merge(crate::dashboard::routes())
        .route("/api/v1/openapi.json", get(openapi))
        .route("/metrics", get(metrics))
        .fallback(|| async {
            Failure(
                StatusCode::NOT_FOUND,
                "no such path: see /api/v1/openapi.json".into(),
            )
        })
        .layer(DefaultBodyLimit::max(body))
        // A NUL byte is in no name, id or key: refused before any handler
        // (PostgreSQL's text cannot hold one; SQLite would store it).
        .layer(middleware::from_fn(|req: Request, next: Next| async move {
            let uri = req.uri().to_string();
            if uri.to_ascii_lowercase().contains("%00") {
                return bad("a NUL byte (%00) is in no name, id or key").into_response();
            }
            next.run(req).await
        }))
        .layer(middleware::from_fn_with_state(admission, admit))
        .layer(Extension(gate))
        .layer(middleware::from_fn(secure_headers))
        .with_state(shared)
}

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

/// The agent's state at a glance.
#[derive(Serialize, schemars::JsonSchema)]
pub(crate) struct Health {
    version: String,
    uptime_s: u64,
    now: String,
    identity: Vec<String>,
    clock: crate::clock::ClockState,
    /// The wall clock's steps (forward or back) seen since start; after
    /// each the schedule was planned again.
    clock_steps: crate::clock::Steps,
    archive_bytes: u64,
    archive_runs: u64,
    /// Runs booked and not ended.
    booked: usize,
    /// Runs under way on this host.
    running: usize,
    /// Runs others booked here and not ended.
    held_for_peers: usize,
    config_source: String,
    config_loaded: String,
    config_error: Option<String>,
    beacon_error: Option<String>,
    counters: Counters,
    /// `agent`, or `archive` (a fleet's).
    role: crate::Role,
    /// The archive's engine: `sqlite` or `postgres`.
    archive_engine: String,
    /// Each archive this agent forwards to: its queue (length and the
    /// oldest's age) and delivery counters.
    forwarding: Vec<crate::forward::ForwardStatus>,
    /// The API's connections: open, the cap, and what was refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    connections: Option<crate::listen::ConnCounters>,
    /// The archive's disk is full: writes are refused (503) until there
    /// is room again, which the agent finds by itself.
    archive_disk_full: bool,
    /// While the archive's writes fail: since when, and the database's
    /// error.
    archive_write_error: Option<String>,
    /// This agent's own runs held in memory until the archive takes them.
    archive_held_runs: usize,
    /// Held runs given up for room since start.
    archive_runs_given_up: u64,
}

async fn health(
    State(s): State<Ctx>,
    Extension(gate): Extension<Arc<Gate>>,
) -> Result<Json<Health>, Failure> {
    let mut h = health_view(&s).await?;
    h.connections = Some(gate.counters());
    Ok(Json(h))
}

/// The agent's health (the API's and the host page's).
pub(crate) async fn health_view(s: &Ctx) -> Result<Health, Failure> {
    let archive_bytes = s.archive.size_bytes().await.map_err(internal)?;
    let archive_runs = s.archive.count().await.map_err(internal)?;
    let forwarding = shown(s.forwarding().await);
    let (archive_disk_full, archive_write_error, archive_held_runs, archive_runs_given_up) =
        s.archive_writes();
    let archive_write_error = archive_write_error.as_deref().map(crate::secrets::redact_text);
    let inner = s.lock();
    let now = clock::now_ms();
    Ok(Health {
        archive_disk_full,
        archive_write_error,
        archive_held_runs,
        archive_runs_given_up,
        role: s.options.role,
        archive_engine: s.archive.engine().into(),
        forwarding,
        connections: None,
        version: env!("CARGO_PKG_VERSION").into(),
        uptime_s: now.saturating_sub(s.started_ms) / 1000,
        now: ms_rfc3339(now),
        identity: inner.loaded.mine.clone(),
        clock: crate::clock::state(),
        clock_steps: crate::clock::steps(),
        archive_bytes,
        archive_runs,
        booked: inner.booked.len(),
        running: inner.running,
        held_for_peers: inner.booked.values().filter(|b| !b.runs_here).count(),
        config_source: crate::secrets::redact_url(&s.options.config.to_string()),
        config_loaded: ms_rfc3339(inner.loaded.loaded_ms),
        config_error: inner
            .config_error
            .as_ref()
            .map(|(t, e)| format!("{}: {}", ms_rfc3339(*t), crate::secrets::redact_text(e))),
        beacon_error: inner.beacon_error.clone(),
        counters: inner.counters,
    })
}

/// Forwarding targets as shown: URLs and errors without their secrets.
fn shown(mut f: Vec<crate::forward::ForwardStatus>) -> Vec<crate::forward::ForwardStatus> {
    for t in &mut f {
        t.url = crate::secrets::redact_url(&t.url);
        t.last_error = t.last_error.as_deref().map(crate::secrets::redact_text);
    }
    f
}

/// `GET /api/v1/config`: the configuration in force, with every secret in
/// it hidden (anyone may read this).
async fn config(State(s): State<Ctx>) -> Json<serde_json::Value> {
    let inner = s.lock();
    let mut view = serde_json::json!({
        "source": s.options.config.to_string(),
        "loaded": ms_rfc3339(inner.loaded.loaded_ms),
        "error": inner.config_error.as_ref().map(|(t, e)| serde_json::json!({"at": ms_rfc3339(*t), "message": e})),
        "identity": inner.loaded.mine,
        "looked_for": inner.loaded.identities,
        "config": inner.loaded.config,
    });
    crate::secrets::redact_json(&mut view);
    Json(view)
}

/// A task pair this agent leads.
#[derive(Serialize, schemars::JsonSchema)]
pub(crate) struct TaskView {
    task: String,
    source: String,
    dest: Option<String>,
    kind: String,
    class: RunClass,
    /// The other agent, when one books with this one.
    peer: Option<String>,
    runs_here: bool,
    every_ms: u64,
    slip_ms: u64,
    /// The next run's time (ms), if any is left.
    next_ms: Option<u64>,
}

async fn tasks(State(s): State<Ctx>) -> Json<Vec<TaskView>> {
    let inner = s.lock();
    let now = clock::now_ms();
    Json(
        inner
            .loaded
            .led
            .iter()
            .map(|l| {
                let t = &l.task;
                let n = t.repeat.first_at_or_after(now);
                TaskView {
                    task: t.task.clone(),
                    source: t.source.clone(),
                    dest: t.dest.clone(),
                    kind: t.spec.kind().into(),
                    class: t.class,
                    peer: l.peer.as_ref().map(|p| p.name.clone()),
                    runs_here: l.runs_here,
                    every_ms: t.repeat.every,
                    slip_ms: t.repeat.slip,
                    next_ms: t.repeat.run(t.seed, n).map(|(at, _)| at),
                }
            })
            .collect(),
    )
}

#[derive(Deserialize)]
struct Range {
    from_ms: Option<u64>,
    to_ms: Option<u64>,
}

/// The calendar over a time range: the bookings and the free slots where
/// an exclusive run would fit.
#[derive(Serialize, schemars::JsonSchema)]
pub(crate) struct ScheduleView {
    pub(crate) from_ms: u64,
    pub(crate) to_ms: u64,
    pub(crate) bookings: Vec<SlotView>,
    /// Free for an exclusive run: `[start, end)` pairs (ms).
    pub(crate) free: Vec<(u64, u64)>,
    /// The runs booked here, in full.
    pub(crate) runs: Vec<Booked>,
}

async fn schedule(State(s): State<Ctx>, Query(q): Query<Range>) -> Result<Json<ScheduleView>, Failure> {
    let now = clock::now_ms();
    let from = q.from_ms.unwrap_or(now);
    let to = q.to_ms.unwrap_or(from.saturating_add(3_600_000));
    if to < from || to - from > 31 * 86_400_000 {
        return Err(bad("to_ms must be after from_ms, at most 31 days on"));
    }
    Ok(Json(schedule_view(&s, from, to)))
}

/// The calendar over `[from, to)`.
pub(crate) fn schedule_view(s: &Ctx, from: u64, to: u64) -> ScheduleView {
    let inner = s.lock();
    let slot = |b: &Booked| SlotView {
        id: b.id.clone(),
        number: b.number,
        start_ms: b.start_ms,
        end_ms: b.end_ms,
        class: b.class,
    };
    let within: Vec<&Booked> = inner
        .booked
        .values()
        .filter(|b| b.start_ms < to && from < b.end_ms)
        .collect();
    ScheduleView {
        from_ms: from,
        to_ms: to,
        bookings: within.iter().map(|b| slot(b)).collect(),
        free: inner.calendar.free(from, to, RunClass::Exclusive),
        runs: within.into_iter().cloned().collect(),
    }
}

/// A peer books a run on this agent's calendar. A mesh run's spec and
/// class are this agent's own (from its configuration), never the
/// caller's; an on-demand run may only be booked here as its destination.
async fn reserve(
    State(s): State<Ctx>,
    ConnectInfo(Caller(from)): ConnectInfo<Caller>,
    headers: HeaderMap,
    body: Result<Json<Reservation>, axum::extract::rejection::JsonRejection>,
) -> Result<(StatusCode, Json<serde_json::Value>), Failure> {
    authorise(&s, from.ip(), &headers)?;
    not_an_archive(&s)?;
    archive_has_room(&s)?;
    let Json(r) = body.map_err(|e| unreadable(&e))?;
    let loaded = s.loaded();
    let here = |n: &str| loaded.mine.iter().any(|m| m == n);
    let runs_here = here(&r.source);
    if !runs_here && !r.dest.as_deref().is_some_and(here) {
        return Err(bad(format!(
            "neither end of run {} ({} → {}) is this agent",
            r.id,
            r.source,
            r.dest.as_deref().unwrap_or("-")
        )));
    }
    let other = if runs_here {
        r.dest.clone()
    } else {
        Some(r.source.clone())
    };
    let other = other.ok_or_else(|| bad("a single-ended run is not booked with another agent"))?;
    from_the_other_end(&s, &loaded, &other, from.ip()).await?;
    let on_demand = r.id.starts_with("on-demand/");
    let (spec, class) = if on_demand {
        // Asked of the source by a client: this agent only holds the time.
        if runs_here {
            return Err(bad(
                "an on-demand run is run by the agent it was asked of, not booked with it",
            ));
        }
        let spec = read_spec(r.spec.clone())?;
        // It tests to this host's test services, as the agent it was
        // asked of checked.
        let here_name = r.dest.clone().unwrap_or_default();
        if let Some(h) = targets(&spec)
            .iter()
            .find(|h| loaded.name_of_host(h).as_deref() != Some(here_name.as_str()))
        {
            count_refusal(&s, |c| c.refused_spec += 1);
            return Err(Failure(
                StatusCode::FORBIDDEN,
                format!("spec: {h} is not {here_name}, the run's destination"),
            ));
        }
        services_only(&s, &loaded, &here_name, &spec)?;
        let class = RunClass::of_kind(spec.kind());
        (spec, class)
    } else {
        let t = loaded
            .pairs
            .iter()
            .find(|t| t.task == r.task && t.source == r.source && t.dest == r.dest)
            .ok_or_else(|| {
                Failure(
                    StatusCode::FORBIDDEN,
                    format!(
                        "no task {} from {} to {} in this agent's configuration",
                        r.task,
                        r.source,
                        r.dest.as_deref().unwrap_or("-")
                    ),
                )
            })?;
        let base =
            r.id.strip_prefix(&format!(
                "{}/{}/{}/",
                t.task,
                t.source,
                t.dest.as_deref().unwrap_or("-")
            ))
            .and_then(base_of)
            .filter(|b| t.repeat.is_base(*b))
            .ok_or_else(|| bad(format!("run id {} is not one of task {}'s runs", r.id, t.task)))?;
        // Its slot lies in its run's window: spread and slip after its
        // base time, its booked length.
        let latest = base
            .saturating_add(t.repeat.slip.saturating_mul(2))
            .saturating_add(60_000);
        if r.start_ms < base.saturating_sub(60_000)
            || r.start_ms > latest
            || r.end_ms != r.start_ms.saturating_add(t.expected_ms())
        {
            return Err(bad(format!(
                "run {}'s slot is not where its schedule puts it",
                r.id
            )));
        }
        (t.spec.clone(), t.class)
    };
    let now = clock::now_ms();
    if r.end_ms <= r.start_ms || r.start_ms > now.saturating_add(7 * 86_400_000) || r.end_ms < now {
        return Err(bad(
            "the slot must end after it starts, not be over, and start within 7 days",
        ));
    }
    let b = Booked {
        number: run_number(&r.id),
        id: r.id.clone(),
        task: r.task.clone(),
        source: r.source.clone(),
        dest: r.dest.clone(),
        spec,
        class,
        scheduled_ms: r.scheduled_ms,
        start_ms: r.start_ms,
        end_ms: r.end_ms,
        runs_here,
        started: false,
        booked_by: from.ip().to_canonical().to_string(),
        peer: loaded.peer(&other),
    };
    {
        let mut inner = s.lock();
        if let Some(old) = inner.booked.get(&b.number) {
            if old.start_ms == b.start_ms && old.end_ms == b.end_ms {
                return Ok((
                    StatusCode::OK,
                    Json(serde_json::json!({"id": r.id, "state": "scheduled"})),
                ));
            }
            return Err(Failure(
                StatusCode::CONFLICT,
                format!("run {} is booked here already, for another slot", r.id),
            ));
        }
        let held = inner
            .booked
            .values()
            .filter(|b| b.booked_by != "this agent")
            .count();
        if held >= s.options.limits.max_held {
            inner.counters.refused += 1;
            return Err(Failure(
                StatusCode::FORBIDDEN,
                format!("limit max_held: this agent holds {held} runs booked by others"),
            ));
        }
        let limits = s.options.limits.clone();
        let who = from.ip().to_canonical();
        // A peer's on-demand runs (its clients') are charged apart from
        // its mesh runs, which this agent's configuration bounds: a
        // client never uses up the quota the peer's schedule needs.
        let bucket = if on_demand { Bucket::OnDemand } else { Bucket::Mesh };
        if let Err(e) = limits
            .check_window(who, r.start_ms, r.end_ms, class)
            .and_then(|()| {
                inner
                    .quotas
                    .take(&limits, (who, bucket), now, class, r.end_ms - r.start_ms)
            })
        {
            inner.counters.refused += 1;
            return Err(Failure(StatusCode::FORBIDDEN, e));
        }
        if let Err(x) = inner.calendar.book(b.booking()) {
            let id = inner.run_name(x.run);
            return Err(Failure(
                StatusCode::CONFLICT,
                format!("busy with run {id} until {}", ms_rfc3339(x.end)),
            ));
        }
        inner.booked.insert(b.number, b.clone());
        inner.counters.booked_by_peers += 1;
    }
    if let Err(why) = s.store_now(&[b.record(RunState::Scheduled, None)]).await {
        s.unbook(&b.id);
        return Err(unstored(why));
    }
    s.wake.notify_one();
    Ok((
        StatusCode::CREATED,
        Json(serde_json::json!({"id": r.id, "state": "scheduled"})),
    ))
}

/// How long a host name's lookup may take when a caller claims to be an
/// address configured by name.
const RESOLVE_WITHIN: std::time::Duration = std::time::Duration::from_secs(2);
/// How far ahead of this agent's clock a record may be dated.
const MAX_AHEAD_MS: u64 = 86_400_000;
/// Longest reason a record may carry.
const MAX_REASON: usize = 8 << 10;

/// Counts a refusal under `refused` and one of its kinds.
fn count_refusal(s: &Shared, which: impl FnOnce(&mut Counters)) {
    let mut inner = s.lock();
    inner.counters.refused += 1;
    which(&mut inner.counters);
}

/// A write refused because the caller does not own what it writes.
fn not_owner(s: &Shared, why: String) -> Failure {
    count_refusal(s, |c| c.refused_not_owner += 1);
    Failure(StatusCode::FORBIDDEN, why)
}

/// Whether a caller at `ip` is the configured address `name`: one of its
/// configured IP addresses, or, for an address configured by host name,
/// one its name resolves to now (looked up within 2 s; no answer is no).
/// An address the mesh does not have is no one. `Err` says why not.
pub(crate) async fn caller_is(loaded: &crate::config::Loaded, name: &str, ip: IpAddr) -> Result<(), String> {
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
async fn from_the_other_end(
    s: &Shared,
    loaded: &crate::config::Loaded,
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

/// A record from the network checked before it is stored: dated no more
/// than a day ahead of this agent's clock, a reason of at most 8 KiB,
/// every figure in range (`Figures::out_of_range`).
fn out_of_range(run: &Run, now: u64) -> Option<String> {
    let ahead = now.saturating_add(MAX_AHEAD_MS);
    for (what, t) in [
        ("scheduled_ms", Some(run.scheduled_ms)),
        ("start_ms", run.start_ms),
        ("end_ms", run.end_ms),
    ] {
        if let Some(t) = t.filter(|t| *t > ahead) {
            return Some(format!(
                "its {what} {t} is more than a day ahead of this agent's clock ({})",
                ms_rfc3339(now)
            ));
        }
    }
    if run.reason.as_ref().is_some_and(|r| r.len() > MAX_REASON) {
        return Some(format!("its reason is longer than {MAX_REASON} bytes"));
    }
    run.figures.out_of_range().map(|e| format!("its {e}"))
}

/// [`out_of_range`] as a refusal (counted).
fn in_range(s: &Shared, run: &Run, now: u64) -> Result<(), Failure> {
    match out_of_range(run, now) {
        None => Ok(()),
        Some(e) => {
            count_refusal(s, |c| c.refused_out_of_range += 1);
            Err(bad(format!("run {}: {e}", run.id)))
        }
    }
}

/// A run id's base time: `BASE_MS`, or `BASE_MS~K` for the K-th run of
/// that base time (the wall clock stepped back and it came round again,
/// see `plan`).
fn base_of(tail: &str) -> Option<u64> {
    let (base, again) = match tail.split_once('~') {
        Some((b, k)) => (b, Some(k)),
        None => (tail, None),
    };
    if let Some(k) = again {
        k.parse::<u32>().ok().filter(|k| *k >= 2)?;
    }
    base.parse().ok()
}

/// The task, source and dest of a configured run, from its id
/// (`task/source/dest/BASE_MS`, a base time of its schedule).
fn configured_run(loaded: &crate::config::Loaded, id: &str) -> Option<(String, String, Option<String>)> {
    let (pair, base) = id.rsplit_once('/')?;
    let base = base_of(base)?;
    loaded
        .pairs
        .iter()
        .find(|t| {
            pair == format!("{}/{}/{}", t.task, t.source, t.dest.as_deref().unwrap_or("-"))
                && t.repeat.is_base(base)
        })
        .map(|t| (t.task.clone(), t.source.clone(), t.dest.clone()))
}

/// The (host, port) each of a spec's targets reaches; no port for probes
/// that have none (ICMP).
fn target_ports(spec: &TestSpec) -> Vec<(String, Option<u16>)> {
    let split = |t: &str, port: u16| match goodput_core::spec::split_target(t, port) {
        Ok((h, p)) => (h, Some(p)),
        Err(_) => (t.to_owned(), Some(port)),
    };
    match spec {
        TestSpec::Tcp(s) => s.hosts.iter().map(|t| split(t, s.port)).collect(),
        TestSpec::Echo(s) => vec![split(&s.target, s.port)],
        TestSpec::Stamp(s) => s.host.iter().map(|t| split(t, s.port)).collect(),
        TestSpec::Udp(s) => s.host.iter().map(|t| split(t, s.port)).collect(),
        TestSpec::Quic(s) => s.host.iter().map(|t| split(t, s.port)).collect(),
        TestSpec::Iperf3(s) => s.host.iter().map(|t| split(t, s.port)).collect(),
        TestSpec::Ttcp(s) => s.host.iter().map(|t| split(t, s.port)).collect(),
        TestSpec::Trace(s) => vec![(s.host.clone(), s.dest_port())],
        TestSpec::Ping(s) => vec![(
            s.host.clone(),
            (s.method != goodput_core::path::PingMethod::Icmp).then_some(s.port),
        )],
        TestSpec::Server(_) => Vec::new(),
    }
}

/// An on-demand spec given through the API: it names no file on the
/// agent (whether a file exists is no one's business), and it reaches
/// only the test services of `dest`: the beacon's (TCP and UDP test
/// port, STAMP, iperf3 and QUIC when on; the mesh's agents share these
/// ports) and the ports the mesh's own tests use to it, never an agent's
/// API port.
fn services_only(
    s: &Shared,
    loaded: &crate::config::Loaded,
    dest: &str,
    spec: &TestSpec,
) -> Result<(), Failure> {
    let refuse = |why: String| {
        count_refusal(s, |c| c.refused_spec += 1);
        Failure(StatusCode::FORBIDDEN, why)
    };
    let file = match spec {
        TestSpec::Echo(e) => e.ca.is_some(),
        TestSpec::Quic(q) => q.ca.is_some(),
        _ => false,
    };
    if file {
        return Err(refuse(
            "spec: ca names a file on the agent, and a spec given through the API names no file \
             (put the test in the mesh configuration)"
                .into(),
        ));
    }
    let o = &s.options;
    let api = loaded.config.agent.api_port;
    let kind = spec.kind();
    let mut allowed: Vec<u16> = match spec {
        TestSpec::Tcp(_) | TestSpec::Udp(_) => vec![o.beacon_port],
        TestSpec::Stamp(_) => vec![o.stamp_port],
        TestSpec::Iperf3(_) => o.iperf3_port.into_iter().collect(),
        TestSpec::Quic(_) => o.quic_port.into_iter().collect(),
        // Probes reach their own default ports, or a test service's.
        TestSpec::Trace(t) => {
            let mut v = vec![o.beacon_port, o.stamp_port];
            v.extend(t.port.is_none().then(|| t.dest_port()).flatten());
            v
        }
        TestSpec::Ping(_) => vec![o.beacon_port, goodput_core::spec::PingSpec::default().port],
        _ => Vec::new(),
    };
    for p in loaded
        .pairs
        .iter()
        .filter(|p| p.dest.as_deref() == Some(dest) && p.spec.kind() == kind)
    {
        allowed.extend(target_ports(&p.spec).into_iter().filter_map(|(_, port)| port));
    }
    let has_agent = loaded.config.addresses.get(dest).is_some_and(|a| !a.no_agent);
    for (host, port) in target_ports(spec) {
        let Some(port) = port else { continue };
        if has_agent && port == api {
            return Err(refuse(format!(
                "spec: {host}:{port} is the agents' API, not a test service"
            )));
        }
        if !allowed.contains(&port) {
            let mut list: Vec<String> = allowed.iter().map(u16::to_string).collect();
            list.sort();
            list.dedup();
            return Err(refuse(format!(
                "spec: port {port} of {dest} is not one of its {kind} test services (ports: {})",
                if list.is_empty() {
                    "none".to_owned()
                } else {
                    list.join(", ")
                }
            )));
        }
    }
    Ok(())
}

/// The hosts a spec tests to (without ports).
fn targets(spec: &TestSpec) -> Vec<String> {
    let host = |t: &str| {
        goodput_core::spec::split_target(t, 1)
            .map(|(h, _)| h)
            .unwrap_or_else(|_| t.to_owned())
    };
    match spec {
        TestSpec::Tcp(s) => s.hosts.iter().map(|t| host(t)).collect(),
        TestSpec::Echo(s) => vec![host(&s.target)],
        TestSpec::Stamp(s) => s.host.iter().map(|t| host(t)).collect(),
        TestSpec::Udp(s) => s.host.iter().map(|t| host(t)).collect(),
        TestSpec::Quic(s) => s.host.iter().map(|t| host(t)).collect(),
        TestSpec::Iperf3(s) => s.host.iter().map(|t| host(t)).collect(),
        TestSpec::Ttcp(s) => s.host.iter().map(|t| host(t)).collect(),
        TestSpec::Trace(s) => vec![host(&s.host)],
        TestSpec::Ping(s) => vec![host(&s.host)],
        TestSpec::Server(_) => Vec::new(),
    }
}

/// Only a fleet's archive takes forwarded runs and registrations.
pub(crate) fn only_archive(s: &Shared) -> Result<(), Failure> {
    if !s.is_archive() {
        return Err(Failure(
            StatusCode::NOT_FOUND,
            "this agent is not a fleet's archive (goodput agent --role archive)".into(),
        ));
    }
    Ok(())
}

/// A fleet's archive runs no tests.
fn not_an_archive(s: &Shared) -> Result<(), Failure> {
    if s.is_archive() {
        return Err(Failure(
            StatusCode::CONFLICT,
            "this is a fleet's archive (--role archive): it runs no tests; ask an agent".into(),
        ));
    }
    Ok(())
}

/// A batch of runs forwarded by an agent.
#[derive(Deserialize, schemars::JsonSchema)]
pub(crate) struct Ingest {
    /// The runs, whole (with their result documents).
    runs: Vec<serde_json::Value>,
}

/// Most runs in one forwarded batch.
const MAX_INGEST_RUNS: usize = 5_000;
/// Longest id, task or host name an archive takes.
const MAX_NAME: usize = 512;

/// One forwarded run checked: its figures and key worked out here from
/// its documents, not taken on trust.
fn checked_run(v: serde_json::Value, now: u64) -> Result<Run, (String, String)> {
    let id = v["id"].as_str().unwrap_or("").to_string();
    let fail = |why: String| (id.clone(), why);
    let mut run: Run = serde_json::from_value(v).map_err(|e| fail(format!("not a run: {e}")))?;
    if [
        Some(&run.id),
        Some(&run.task),
        Some(&run.source),
        run.dest.as_ref(),
        Some(&run.kind),
        run.reason.as_ref(),
        run.figures.path_checksum.as_ref(),
    ]
    .into_iter()
    .flatten()
    .any(|t| t.contains('\0'))
    {
        return Err(fail("a NUL character is in no name, id, kind or reason".into()));
    }
    if run.id.is_empty() || run.id.len() > MAX_NAME {
        return Err(fail(format!("its id must be 1 to {MAX_NAME} bytes")));
    }
    for (what, text) in [("task", run.task.as_str()), ("source", run.source.as_str())]
        .into_iter()
        .chain(run.dest.as_deref().map(|d| ("dest", d)))
    {
        if text.is_empty() || text.len() > MAX_NAME {
            return Err(fail(format!("its {what} must be 1 to {MAX_NAME} bytes")));
        }
    }
    if !run.state.has_ended() {
        return Err(fail(format!(
            "only ended runs are archived, not one {}",
            run.state.as_str()
        )));
    }
    let spec = read_spec(run.spec.clone()).map_err(|e| fail(e.1))?;
    let key = goodput_archive::measurement_key(&spec, &run.source, run.dest.as_deref());
    if run.kind == crate::minutes::KIND {
        // A background stream's per-minute summary: its figures are the
        // minute's (its document is a summary, not a test's result).
        run.measurement_key = format!("{key}/minute");
        run.figures.path_checksum = None;
        // Its figures are taken as sent: each must make sense.
        return match out_of_range(&run, now) {
            None => Ok(run),
            Some(e) => Err(fail(e)),
        };
    }
    run.kind = spec.kind().into();
    run.measurement_key = key;
    if let Some(doc) = &run.result {
        let result: goodput_core::result::TestResult = serde_json::from_value(doc.clone())
            .map_err(|e| fail(format!("its result does not read: {e}")))?;
        run.figures = goodput_archive::figures_of(&result);
    } else if run.state == RunState::Finished {
        return Err(fail("a finished run without its result".into()));
    } else {
        run.figures = Default::default();
    }
    match out_of_range(&run, now) {
        None => Ok(run),
        Some(e) => Err(fail(e)),
    }
}

/// `POST /api/v1/archive/runs`: a fleet's archive stores the runs an agent
/// forwards, by id (a run sent twice is stored once). Runs that do not
/// read, and runs the caller does not own (it is neither their source's
/// nor their dest's configured address: [`Owners::check`]), are refused
/// one by one, each with its reason; the rest are stored in one
/// transaction.
async fn ingest(
    State(s): State<Ctx>,
    ConnectInfo(Caller(from)): ConnectInfo<Caller>,
    headers: HeaderMap,
    body: Result<Json<Ingest>, axum::extract::rejection::JsonRejection>,
) -> Result<Json<serde_json::Value>, Failure> {
    only_archive(&s)?;
    authorise(&s, from.ip(), &headers)?;
    let Json(batch) = body.map_err(|e| {
        s.lock().counters.ingest_refused += 1;
        unreadable(&e)
    })?;
    if batch.runs.len() > MAX_INGEST_RUNS {
        s.lock().counters.ingest_refused += 1;
        return Err(Failure(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "at most {MAX_INGEST_RUNS} runs in one batch, not {}",
                batch.runs.len()
            ),
        ));
    }
    write_quota(&s, from.ip(), Write::Ingest, batch.runs.len() as u64)?;
    let now = clock::now_ms();
    let mut good = Vec::with_capacity(batch.runs.len());
    let mut refused = Vec::new();
    let mut out_of_range = 0;
    let mut malformed = 0;
    for v in batch.runs {
        match checked_run(v, now) {
            Ok(r) => good.push(r),
            Err((id, reason)) => {
                out_of_range += u64::from(reason.contains("figure ") || reason.contains("ahead of"));
                malformed += 1;
                refused.push(serde_json::json!({"id": id, "reason": reason}));
            }
        }
    }
    // Each run only from its own agent.
    let loaded = s.loaded();
    let mut owners = Owners::new(from.ip());
    let unnamed: Vec<String> = good
        .iter()
        .filter(|r| !names_its_pair(r))
        .map(|r| r.id.clone())
        .collect();
    let mut stored = HashMap::new();
    for id in s.archive.existing(&unnamed).await.map_err(internal)? {
        if let Some(r) = s.archive.get(&id).await.map_err(internal)? {
            stored.insert(id, (r.source, r.dest));
        }
    }
    let mut not_owner = 0u64;
    let mut owned = Vec::with_capacity(good.len());
    for r in good {
        match owners.check(&loaded, &r, stored.get(&r.id)).await {
            Ok(()) => owned.push(r),
            Err(why) => {
                not_owner += 1;
                refused.push(serde_json::json!({"id": r.id, "reason": why}));
            }
        }
    }
    let good = owned;
    s.store_now(&good).await.map_err(unstored)?;
    {
        let mut inner = s.lock();
        inner.counters.ingested += good.len() as u64;
        inner.counters.ingest_refused += malformed;
        inner.counters.refused_out_of_range += out_of_range;
        inner.counters.refused_not_owner += not_owner;
        inner.counters.refused += out_of_range + not_owner;
    }
    Ok(Json(
        serde_json::json!({"stored": good.len(), "refused": refused}),
    ))
}

/// Whether a forwarded run's id names its pair: a configured run's
/// `TASK/SOURCE/DEST/BASE_MS` (`BASE_MS~K` after a clock step back),
/// or a per-minute summary of one (`…/minute/START_MS`). An on-demand
/// run's id (`on-demand/UUID`) names none.
fn names_its_pair(run: &Run) -> bool {
    let pair = format!(
        "{}/{}/{}/",
        run.task,
        run.source,
        run.dest.as_deref().unwrap_or("-")
    );
    let Some(tail) = run.id.strip_prefix(&pair) else {
        return false;
    };
    let (base, minute) = match tail.split_once('/') {
        Some((b, rest)) => (b, Some(rest)),
        None => (tail, None),
    };
    base_of(base).is_some()
        && minute.is_none_or(|m| {
            m.strip_prefix("minute/")
                .is_some_and(|t| !t.is_empty() && t.bytes().all(|c| c.is_ascii_digit()))
        })
}

/// Who a caller of `POST /api/v1/archive/runs` is, worked out once per
/// configured name in a batch.
struct Owners {
    ip: IpAddr,
    known: HashMap<String, Result<(), String>>,
}

impl Owners {
    fn new(ip: IpAddr) -> Self {
        Self {
            ip: ip.to_canonical(),
            known: HashMap::new(),
        }
    }

    /// Whether the caller is configured address `name` ([`caller_is`]).
    async fn is(&mut self, loaded: &crate::config::Loaded, name: &str) -> Result<(), String> {
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
    async fn check(
        &mut self,
        loaded: &crate::config::Loaded,
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

/// `POST` or `PUT /api/v1/archive/pscheduler`: a fleet's archive stores
/// a result a perfSONAR pScheduler `http` archiver sends, mapped to
/// goodput's figures (`goodput_archive::pscheduler`). Its ends get the
/// mesh's names where the configuration has their addresses, and its
/// measurement is the configured task's of the same kind between them
/// (a mesh imported with `import-psconfig` from the same template has
/// them), so the grid, series and alerts cover it.
async fn pscheduler(
    State(s): State<Ctx>,
    ConnectInfo(Caller(from)): ConnectInfo<Caller>,
    headers: HeaderMap,
    body: Result<Json<serde_json::Value>, axum::extract::rejection::JsonRejection>,
) -> Result<Json<serde_json::Value>, Failure> {
    only_archive(&s)?;
    authorise(&s, from.ip(), &headers)?;
    write_quota(&s, from.ip(), Write::PScheduler, 1)?;
    let refused = |status: StatusCode, why: String| {
        s.lock().counters.pscheduler_refused += 1;
        Failure(status, why)
    };
    let Json(doc) = body.map_err(|e| {
        let f = unreadable(&e);
        refused(f.0, f.1)
    })?;
    let mapped = goodput_archive::pscheduler::from_pscheduler(&doc).map_err(|e| {
        let status = if e.contains("has no goodput kind") {
            StatusCode::UNPROCESSABLE_ENTITY
        } else {
            StatusCode::BAD_REQUEST
        };
        if e.contains(", outside 0 to ") || e.contains("is outside 0 to ") {
            count_refusal(&s, |c| c.refused_out_of_range += 1);
        }
        refused(status, format!("not a pScheduler result goodput maps: {e}"))
    })?;
    let mut run = mapped.run;
    if let Some(e) = out_of_range(&run, clock::now_ms()) {
        count_refusal(&s, |c| c.refused_out_of_range += 1);
        return Err(refused(StatusCode::BAD_REQUEST, format!("run {}: {e}", run.id)));
    }
    let spec = read_spec(run.spec.clone()).map_err(|e| {
        refused(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!("its test as goodput's: {}", e.1),
        )
    })?;
    let loaded = s.loaded();
    if let Some(n) = loaded.name_of_host(&run.source) {
        run.source = n;
    }
    if let Some(n) = run.dest.as_deref().and_then(|d| loaded.name_of_host(d)) {
        run.dest = Some(n);
    }
    // The configured task of the same kind between the same ends; of
    // several (latency and latencybg are both STAMP), the one whose test
    // is this one.
    let own_key = goodput_archive::measurement_key(&spec, &run.source, run.dest.as_deref());
    let candidates: Vec<&goodput_core::mesh::PairTask> = loaded
        .pairs
        .iter()
        .filter(|p| p.source == run.source && p.dest == run.dest && p.spec.kind() == run.kind)
        .collect();
    let configured = candidates
        .iter()
        .find(|p| goodput_archive::measurement_key(&p.spec, &p.source, p.dest.as_deref()) == own_key)
        .or(candidates.first());
    run.measurement_key = match configured {
        Some(p) => {
            run.task = p.task.clone();
            goodput_archive::measurement_key(&p.spec, &p.source, p.dest.as_deref())
        }
        None => own_key,
    };
    s.store_now(std::slice::from_ref(&run)).await.map_err(unstored)?;
    s.lock().counters.pscheduler_ingested += 1;
    Ok(Json(serde_json::json!({
        "stored": run.id,
        "kind": run.kind,
        "task": run.task,
        "source": run.source,
        "dest": run.dest,
        "measurement_key": run.measurement_key,
        "test_type": mapped.test_type,
    })))
}

fn read_spec(v: serde_json::Value) -> Result<TestSpec, Failure> {
    let spec = goodput_core::spec::read_one(v).map_err(|e| bad(format!("spec: {e}")))?;
    spec.validate().map_err(|e| bad(format!("spec: {e}")))?;
    if matches!(spec, TestSpec::Server(_)) {
        return Err(bad(
            "spec: a server is not a run (the agent's beacon is its server)",
        ));
    }
    Ok(spec)
}

#[derive(Deserialize)]
struct RunsQuery {
    source: Option<String>,
    dest: Option<String>,
    kind: Option<String>,
    state: Option<String>,
    from_ms: Option<u64>,
    to_ms: Option<u64>,
    limit: Option<u32>,
}

async fn runs(State(s): State<Ctx>, Query(q): Query<RunsQuery>) -> Result<Json<Vec<Run>>, Failure> {
    let state = match q.state.as_deref() {
        None => None,
        Some(t) => Some(t.parse::<RunState>().map_err(bad)?),
    };
    let f = RunFilter {
        source: q.source,
        dest: q.dest,
        kind: q.kind,
        state,
        from_ms: q.from_ms,
        to_ms: q.to_ms,
        limit: q.limit.unwrap_or(1000).min(10_000),
    };
    Ok(Json(s.archive.runs(&f).await.map_err(internal)?))
}

async fn one_run(State(s): State<Ctx>, Path(id): Path<String>) -> Result<Json<Run>, Failure> {
    match s.archive.get(&id).await.map_err(internal)? {
        Some(r) => Ok(Json(r)),
        None => Err(Failure(StatusCode::NOT_FOUND, format!("no run '{id}'"))),
    }
}

/// The agent at a run's other end hands over its end: the result of a
/// run it ran, or why a run it led did not start (which lets go of the
/// time held here for it). Who may write is proven by where the call
/// comes from, never by what the body says: the run's ends are the ones
/// booked here (its booking, or its stored record, or the configured
/// task its id names), the body must name the same ones, and the caller
/// must be the configured address of the end that is not this host. A
/// record of a run this host runs is never replaced; a run never booked
/// here can only be said not to have started.
async fn put_run(
    State(s): State<Ctx>,
    ConnectInfo(Caller(from)): ConnectInfo<Caller>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Result<Json<Run>, axum::extract::rejection::JsonRejection>,
) -> Result<StatusCode, Failure> {
    authorise(&s, from.ip(), &headers)?;
    write_quota(&s, from.ip(), Write::Result, 1)?;
    let Json(mut run) = body.map_err(|e| unreadable(&e))?;
    if run.id != id {
        return Err(bad(format!("the path names run '{id}', the body '{}'", run.id)));
    }
    if matches!(run.state, RunState::Scheduled | RunState::Running) {
        return Err(bad(
            "only a run's end is handed over (finished, failed, non_start, cancelled, missed)",
        ));
    }
    let loaded = s.loaded();
    let n = run_number(&id);
    // What this agent knows of the run's ends, in order of trust.
    let booked = s
        .lock()
        .booked
        .get(&n)
        .filter(|b| b.id == id)
        .map(|b| (b.task.clone(), b.source.clone(), b.dest.clone()));
    let stored = s.archive.get(&id).await.map_err(internal)?;
    let known = booked.is_some() || stored.is_some();
    let ends = booked
        .or_else(|| {
            stored
                .as_ref()
                .map(|r| (r.task.clone(), r.source.clone(), r.dest.clone()))
        })
        .or_else(|| configured_run(&loaded, &id));
    let (task, source, dest) = match ends {
        Some(e) => e,
        // An on-demand run that was never booked here (this agent
        // refused it, or never heard of it): its leader may only say it
        // did not start, and only as the source it names.
        None if id.starts_with("on-demand/") && run.state == RunState::NonStart => {
            (run.task.clone(), run.source.clone(), run.dest.clone())
        }
        None => {
            return Err(not_owner(
                &s,
                format!(
                    "run {id} is not booked here, not in this agent's archive and not a run of \
                     its configured tasks: there is nothing of it to hand over"
                ),
            ))
        }
    };
    if (&run.task, &run.source, &run.dest) != (&task, &source, &dest) {
        return Err(not_owner(
            &s,
            format!(
                "run {id} is task {task} from {source} to {} here; the record handed over says \
                 task {} from {} to {}",
                dest.as_deref().unwrap_or("-"),
                run.task,
                run.source,
                run.dest.as_deref().unwrap_or("-")
            ),
        ));
    }
    let here = |n: &str| loaded.mine.iter().any(|m| m == n);
    let runs_here = here(&source);
    if !runs_here && !dest.as_deref().is_some_and(here) {
        return Err(bad(format!("neither end of run {id} is this agent")));
    }
    let other = if runs_here {
        dest.clone()
    } else {
        Some(source.clone())
    };
    let other = other.ok_or_else(|| bad("a single-ended run has no other end"))?;
    from_the_other_end(&s, &loaded, &other, from.ip()).await?;
    // This host runs it: the other end (which led it) can only say it
    // did not start, and a record this host made stands.
    if runs_here {
        if run.state != RunState::NonStart {
            return Err(not_owner(
                &s,
                format!("run {id} runs here: its other end may only say it did not start"),
            ));
        }
        if stored.as_ref().is_some_and(|r| r.state != RunState::Scheduled) {
            return Err(not_owner(
                &s,
                format!("run {id} ran here: its record is this agent's"),
            ));
        }
    }
    if !known && runs_here && id.starts_with("on-demand/") {
        return Err(not_owner(
            &s,
            format!("run {id} would run here, but it was never asked of this agent"),
        ));
    }
    // A run never booked here did not run with this host.
    if !known && run.state != RunState::NonStart {
        return Err(not_owner(
            &s,
            format!("run {id} was never booked here: only that it did not start can be handed over"),
        ));
    }
    // The key is worked out here, from the spec the run carries, and the
    // figures from its result document.
    let spec = read_spec(run.spec.clone())?;
    run.kind = spec.kind().into();
    run.measurement_key = goodput_archive::measurement_key(&spec, &run.source, run.dest.as_deref());
    if let Some(doc) = &run.result {
        let result: goodput_core::result::TestResult = serde_json::from_value(doc.clone())
            .map_err(|e| bad(format!("run {id}: its result does not read: {e}")))?;
        run.figures = goodput_archive::figures_of(&result);
    }
    in_range(&s, &run, clock::now_ms())?;
    {
        let mut inner = s.lock();
        match inner.booked.get(&n) {
            // This host runs it and has begun: its own record stands.
            Some(b) if b.runs_here && b.started => {
                return Err(Failure(
                    StatusCode::CONFLICT,
                    format!("run {id} is under way here"),
                ));
            }
            Some(_) => {
                inner.calendar.release(n);
                inner.booked.remove(&n);
            }
            None => {}
        }
    }
    s.store_now(std::slice::from_ref(&run)).await.map_err(unstored)?;
    s.note_latest(&run);
    Ok(StatusCode::NO_CONTENT)
}

/// An on-demand run: this agent runs `spec` now, or at the first slot
/// free on both ends within `slip`.
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct OnDemand {
    /// The test (any kind but `server`), with its host filled in: an
    /// address of the mesh (its agent, if it has one, books the slot too).
    spec: serde_json::Value,
    /// The name of that address, as a check (optional).
    #[serde(default)]
    dest: Option<String>,
    /// How late it may start, e.g. `30s` (default 1 minute, at most 1 h).
    #[serde(default)]
    slip: Option<String>,
}

async fn on_demand(
    State(s): State<Ctx>,
    ConnectInfo(Caller(from)): ConnectInfo<Caller>,
    headers: HeaderMap,
    body: Result<Json<OnDemand>, axum::extract::rejection::JsonRejection>,
) -> Result<(StatusCode, Json<serde_json::Value>), Failure> {
    authorise(&s, from.ip(), &headers)?;
    not_an_archive(&s)?;
    archive_has_room(&s)?;
    let Json(q) = body.map_err(|e| unreadable(&e))?;
    let spec = read_spec(q.spec)?;
    let loaded = s.loaded();
    // It tests to an address of the mesh, never elsewhere: its hosts are
    // one configured address, which is its destination.
    let hosts = targets(&spec);
    if hosts.is_empty() {
        return Err(bad("spec: name the host it tests to (an address of the mesh)"));
    }
    let mut names: Vec<String> = Vec::new();
    for h in &hosts {
        let name = loaded
            .name_of_host(h)
            .ok_or_else(|| bad(format!("spec: {h} is not an address of the mesh")))?;
        if !names.contains(&name) {
            names.push(name);
        }
    }
    let [dest] = &names[..] else {
        return Err(bad(format!(
            "spec: its hosts are several addresses ({})",
            names.join(", ")
        )));
    };
    if q.dest.as_ref().is_some_and(|d| d != dest) {
        return Err(bad(format!(
            "dest: the spec tests to {dest}, not {}",
            q.dest.as_deref().unwrap_or("")
        )));
    }
    let dest = dest.clone();
    let slip = match &q.slip {
        None => 60_000,
        Some(t) => duration_ms(t).map_err(|e| bad(format!("slip: {e}")))?,
    };
    if slip > 3_600_000 {
        return Err(bad("slip: at most 1 h"));
    }
    s.options.limits.check_bitrate(&spec).map_err(|e| {
        s.lock().counters.refused += 1;
        Failure(StatusCode::FORBIDDEN, e)
    })?;
    services_only(&s, &loaded, &dest, &spec)?;
    let class = RunClass::of_kind(spec.kind());
    let now = clock::now_ms();
    let duration = goodput_core::mesh::PairTask {
        task: String::new(),
        source: String::new(),
        dest: None,
        dest_has_agent: false,
        lead: Default::default(),
        spec: spec.clone(),
        class,
        repeat: goodput_core::schedule::Repeat::every(0, 0),
        seed: 0,
    }
    .expected_ms();
    {
        let mut inner = s.lock();
        let limits = s.options.limits.clone();
        let who = from.ip().to_canonical();
        // Wherever in its slip it lands, it must be inside the window.
        if let Err(e) = limits
            .check_window(who, now, now.saturating_add(slip).saturating_add(duration), class)
            .and_then(|()| {
                inner
                    .quotas
                    .take(&limits, (who, Bucket::OnDemand), now, class, duration)
            })
        {
            inner.counters.refused += 1;
            return Err(Failure(StatusCode::FORBIDDEN, e));
        }
    }
    let id = format!("on-demand/{}", uuid::Uuid::new_v4());
    let source = loaded
        .mine
        .first()
        .cloned()
        .unwrap_or_else(|| "this-agent".into());
    let p = Planning {
        id: id.clone(),
        task: "on-demand".into(),
        source,
        peer: loaded.peer(&dest),
        dest: Some(dest),
        spec,
        class,
        at: now,
        slip,
        duration,
        runs_here: true,
    };
    let placed = plan(&s, p).await;
    // Its record did not reach the archive: it is not run.
    if s.unhold(&id) {
        s.unbook(&id);
        return Err(unstored(s.archive_full().unwrap_or_else(|| {
            format!("the archive could not store run {id}: it was not booked")
        })));
    }
    Ok(match placed {
        Placed::Booked { start, end } => (
            StatusCode::CREATED,
            Json(serde_json::json!({"id": id, "state": "scheduled", "start_ms": start, "end_ms": end})),
        ),
        Placed::NonStart(why) => (
            StatusCode::CREATED,
            Json(serde_json::json!({"id": id, "state": "non_start", "reason": why})),
        ),
        Placed::Known => (
            StatusCode::CONFLICT,
            Json(serde_json::json!({"error": format!("run {id} exists already")})),
        ),
    })
}

#[derive(Deserialize)]
struct SeriesQuery {
    /// The measurement (or `source`, `dest` and `kind` to find it).
    key: Option<String>,
    source: Option<String>,
    dest: Option<String>,
    kind: Option<String>,
    metric: String,
    from_ms: Option<u64>,
    to_ms: Option<u64>,
    step_ms: Option<u64>,
}

/// A measurement's series.
#[derive(Serialize, schemars::JsonSchema)]
pub(crate) struct SeriesView {
    key: String,
    metric: Metric,
    from_ms: u64,
    to_ms: u64,
    step_ms: Option<u64>,
    points: Vec<goodput_archive::Point>,
}

/// The measurement a query names: its `key`, or the newest finished run's
/// of `source`, `dest` and `kind`.
async fn measurement(
    s: &Ctx,
    key: Option<String>,
    source: Option<String>,
    dest: Option<String>,
    kind: Option<String>,
) -> Result<String, Failure> {
    if let Some(k) = key {
        return Ok(k);
    }
    let f = RunFilter {
        source,
        dest,
        kind,
        state: Some(RunState::Finished),
        limit: 1,
        ..RunFilter::default()
    };
    let last = s.archive.runs(&f).await.map_err(internal)?;
    last.first()
        .map(|r| r.measurement_key.clone())
        .ok_or_else(|| Failure(StatusCode::NOT_FOUND, "no finished run matches".into()))
}

async fn series(State(s): State<Ctx>, Query(q): Query<SeriesQuery>) -> Result<Json<SeriesView>, Failure> {
    let metric: Metric = serde_json::from_value(serde_json::Value::String(q.metric.clone()))
        .map_err(|_| bad(format!("metric: '{}' is not one of {:?}", q.metric, Metric::ALL)))?;
    let now = clock::now_ms();
    let to = q.to_ms.unwrap_or(now);
    let from = q.from_ms.unwrap_or(to.saturating_sub(86_400_000));
    let key = measurement(&s, q.key, q.source, q.dest, q.kind).await?;
    let points = s
        .archive
        .series(&key, metric, from, to, q.step_ms)
        .await
        .map_err(internal)?;
    Ok(Json(SeriesView {
        key,
        metric,
        from_ms: from,
        to_ms: to,
        step_ms: q.step_ms,
        points,
    }))
}

#[derive(Deserialize)]
struct PathsQuery {
    key: Option<String>,
    source: Option<String>,
    dest: Option<String>,
    kind: Option<String>,
    from_ms: Option<u64>,
    to_ms: Option<u64>,
}

/// Most paths listed with their hops.
const PATHS_WITH_HOPS: usize = 32;

/// A path, with the hop list of its newest trace.
#[derive(Serialize, schemars::JsonSchema)]
pub(crate) struct PathView {
    #[serde(flatten)]
    seen: goodput_archive::PathSeen,
    /// The answering addresses of each hop, first hop first (empty for a
    /// hop that did not answer).
    hops_addresses: Vec<Vec<String>>,
}

/// The paths a measurement's traces took over a window.
#[derive(Serialize, schemars::JsonSchema)]
pub(crate) struct PathsView {
    key: String,
    from_ms: u64,
    to_ms: u64,
    /// Whether the path changed in the window (a trace found a path other
    /// than the one before it).
    changed: bool,
    /// How many times it did.
    changes: u64,
    /// Traces read.
    runs: u64,
    /// Each path, the first taken first (the first 32 with their hops).
    paths: Vec<PathView>,
}

async fn paths(State(s): State<Ctx>, Query(q): Query<PathsQuery>) -> Result<Json<PathsView>, Failure> {
    let now = clock::now_ms();
    let to = q.to_ms.unwrap_or(now);
    let from = q.from_ms.unwrap_or(to.saturating_sub(86_400_000));
    let kind = q.kind.or_else(|| Some("trace".into()));
    let key = measurement(&s, q.key, q.source, q.dest, kind).await?;
    let h = s.archive.paths(&key, from, to).await.map_err(internal)?;
    let mut out = Vec::with_capacity(h.paths.len());
    for (i, seen) in h.paths.into_iter().enumerate() {
        let mut hops_addresses = Vec::new();
        if i < PATHS_WITH_HOPS {
            let run = s.archive.get(&seen.last_run).await.map_err(internal)?;
            let result: Option<goodput_core::result::TestResult> = run
                .and_then(|r| r.result)
                .and_then(|v| serde_json::from_value(v).ok());
            if let Some(t) = result.and_then(|r| r.into_trace()) {
                hops_addresses = t.hops.into_iter().map(|h| h.addresses).collect();
            }
        }
        out.push(PathView { seen, hops_addresses });
    }
    Ok(Json(PathsView {
        key,
        from_ms: from,
        to_ms: to,
        changed: h.changes > 0,
        changes: h.changes,
        runs: h.runs,
        paths: out,
    }))
}

#[derive(Deserialize)]
struct GridQuery {
    metric: Option<String>,
    /// `local`: only this agent's measurements (what peers ask each other).
    scope: Option<String>,
}

/// An agent asked for its half of the grid.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub(crate) struct AgentSeen {
    /// Its address name.
    pub(crate) name: String,
    /// Whether it answered.
    pub(crate) answered: bool,
    /// Why not.
    pub(crate) error: Option<String>,
    /// When its rules were last evaluated (ms; 0: not yet).
    pub(crate) evaluated_ms: u64,
}

/// The grid of one metric: each measurement's state in each direction,
/// from this agent's evaluation and (unless `scope=local`) every other
/// agent's of the mesh.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub(crate) struct GridView {
    /// The metric family.
    pub(crate) metric: goodput_core::alert::Family,
    /// Rows and columns: the address names of the pairs measuring it.
    pub(crate) hosts: Vec<String>,
    /// Every half-cell.
    pub(crate) cells: Vec<crate::alerts::HalfCell>,
    /// The rules' thresholds, one line each.
    pub(crate) legend: Vec<String>,
    /// The agents asked.
    pub(crate) agents: Vec<AgentSeen>,
}

/// Most bytes read of a peer's grid.
const MAX_GRID: u64 = 16 << 20;

/// The grid of a metric family (see [`GridView`]).
pub(crate) async fn grid_view(s: &Ctx, family: goodput_core::alert::Family, local: bool) -> GridView {
    use goodput_core::alert::Status;
    let loaded = s.loaded();
    let (mut cells, legend, evaluated) = {
        let st = s.alerting();
        let cells: Vec<crate::alerts::HalfCell> =
            st.cells.iter().filter(|c| c.metric == family).cloned().collect();
        (cells, st.legend.clone(), st.evaluated_ms)
    };
    let me = if s.is_archive() {
        "fleet archive".to_string()
    } else {
        loaded.mine.first().cloned().unwrap_or_default()
    };
    let mut agents = vec![AgentSeen {
        name: me,
        answered: true,
        error: None,
        evaluated_ms: evaluated,
    }];
    // Every pair of the mesh that measures the family, by its source.
    let pairs: Vec<&goodput_core::mesh::PairTask> = loaded
        .pairs
        .iter()
        .filter(|p| family.measured_by(p.spec.kind()))
        .collect();
    if !local {
        let mut sources: Vec<String> = pairs
            .iter()
            .map(|p| p.source.clone())
            .filter(|n| !s.speaks_for(&loaded, n))
            .collect();
        sources.sort();
        sources.dedup();
        let mut asks = tokio::task::JoinSet::new();
        for name in sources {
            let Some(peer) = loaded.peer(&name) else {
                continue;
            };
            let client = s.client(&peer);
            let url = format!("{}/api/v1/grid?metric={}&scope=local", peer.url, family.name());
            asks.spawn(async move {
                let got: Result<GridView, String> = async {
                    let r = client
                        .get(&url)
                        .timeout(std::time::Duration::from_secs(3))
                        .send()
                        .await
                        .map_err(|e| {
                            if e.is_timeout() {
                                "no answer in time".to_string()
                            } else {
                                e.to_string()
                            }
                        })?;
                    if !r.status().is_success() {
                        return Err(format!("HTTP {}", r.status()));
                    }
                    let bytes = crate::peer::body_capped(r, MAX_GRID).await.map_err(|e| match e {
                        Some(e) => e.to_string(),
                        None => format!("its grid is larger than {MAX_GRID} bytes"),
                    })?;
                    serde_json::from_slice(&bytes).map_err(|e| format!("its grid does not read: {e}"))
                }
                .await;
                (name, got)
            });
        }
        while let Some(Ok((name, got))) = asks.join_next().await {
            match got {
                Ok(g) => {
                    let at = g.agents.first().map_or(0, |a| a.evaluated_ms);
                    // A peer speaks for the measurements it runs, only.
                    cells.extend(
                        g.cells
                            .into_iter()
                            .filter(|c| c.source == name && c.metric == family),
                    );
                    agents.push(AgentSeen {
                        name,
                        answered: true,
                        error: None,
                        evaluated_ms: at,
                    });
                }
                Err(e) => agents.push(AgentSeen {
                    name,
                    answered: false,
                    error: Some(e),
                    evaluated_ms: 0,
                }),
            }
        }
        agents.sort_by(|a, b| a.name.cmp(&b.name));
    }
    // Pairs no answer covered: no data, and why. (A set, not a search of
    // the cells per pair: a 50-host mesh has 4,900 half-cells.)
    let covered: std::collections::HashSet<(String, String, Option<String>, goodput_core::alert::Direction)> =
        cells
            .iter()
            .map(|c| (c.task.clone(), c.source.clone(), c.dest.clone(), c.direction))
            .collect();
    for p in &pairs {
        if !local || s.speaks_for(&loaded, &p.source) {
            for &d in family.directions() {
                let have = covered.contains(&(p.task.clone(), p.source.clone(), p.dest.clone(), d));
                if have || (local && !s.speaks_for(&loaded, &p.source)) {
                    continue;
                }
                let why = match agents.iter().find(|a| a.name == p.source) {
                    Some(a) if !a.answered => format!(
                        "the agent at {} did not answer: {}",
                        p.source,
                        a.error.as_deref().unwrap_or("")
                    ),
                    Some(a) if a.evaluated_ms == 0 => {
                        format!("{}'s agent has not evaluated its rules yet", p.source)
                    }
                    _ => format!("no agent runs {}'s tests", p.source),
                };
                cells.push(crate::alerts::HalfCell {
                    task: p.task.clone(),
                    kind: p.spec.kind().into(),
                    source: p.source.clone(),
                    dest: p.dest.clone(),
                    metric: family,
                    direction: d,
                    status: Status::NoData,
                    value: None,
                    at_ms: None,
                    why: Some(why),
                });
            }
        }
    }
    let mut hosts: Vec<String> = pairs
        .iter()
        .flat_map(|p| std::iter::once(p.source.clone()).chain(p.dest.clone()))
        .collect();
    hosts.sort();
    hosts.dedup();
    if s.is_archive() {
        // A fleet archive: the measurements of an agent whose lease lapsed
        // are down, not merely without data.
        let lapsed = crate::fleet::lapsed(s).await;
        for c in cells.iter_mut() {
            if matches!(c.status, Status::Maintenance | Status::NotRun) {
                continue;
            }
            if let Some((_, until)) = lapsed.iter().find(|(n, _)| *n == c.source) {
                c.status = Status::AgentDown;
                c.why = Some(format!(
                    "the agent at {} let its lease with this archive lapse at {}: down or cut off",
                    c.source,
                    ms_rfc3339(*until)
                ));
            }
        }
    }
    cells.sort_by(|a, b| {
        (&a.source, &a.dest, &a.task, a.direction).cmp(&(&b.source, &b.dest, &b.task, b.direction))
    });
    GridView {
        metric: family,
        hosts,
        cells,
        legend,
        agents,
    }
}

async fn grid(State(s): State<Ctx>, Query(q): Query<GridQuery>) -> Result<Json<GridView>, Failure> {
    let family = goodput_core::alert::Family::named(q.metric.as_deref().unwrap_or("loss")).map_err(bad)?;
    let local = match q.scope.as_deref() {
        None | Some("mesh") => false,
        Some("local") => true,
        Some(o) => return Err(bad(format!("scope: '{o}' is not mesh or local"))),
    };
    Ok(Json(grid_view(&s, family, local).await))
}

#[derive(Deserialize)]
struct AlertsQuery {
    /// `open` (default) or `all`.
    state: Option<String>,
    from_ms: Option<u64>,
    to_ms: Option<u64>,
    limit: Option<u32>,
}

async fn alerts(
    State(s): State<Ctx>,
    Query(q): Query<AlertsQuery>,
) -> Result<Json<Vec<goodput_archive::AlertRecord>>, Failure> {
    let open = match q.state.as_deref() {
        None | Some("open") => true,
        Some("all") => false,
        Some(o) => return Err(bad(format!("state: '{o}' is not open or all"))),
    };
    let now = clock::now_ms();
    let to = q.to_ms.unwrap_or(u64::MAX);
    let from = q.from_ms.unwrap_or(if open {
        0
    } else {
        now.saturating_sub(7 * 86_400_000)
    });
    let limit = q.limit.unwrap_or(1000).min(10_000);
    Ok(Json(
        s.archive.alerts(open, from, to, limit).await.map_err(internal)?,
    ))
}

async fn openapi() -> Json<serde_json::Value> {
    Json(crate::openapi::document())
}

/// The latest figures per measurement, run counts, archive size and the
/// clock, in the OpenMetrics text format.
async fn metrics(State(s): State<Ctx>, Extension(gate): Extension<Arc<Gate>>) -> Result<Response, Failure> {
    let by_state = s.archive.count_by_state().await.map_err(internal)?;
    let bytes = s.archive.size_bytes().await.map_err(internal)?;
    let forwarding = shown(s.forwarding().await);
    let clock = crate::clock::state();
    let mut out = String::new();
    out += "# TYPE goodput_agent_runs gauge\n# HELP goodput_agent_runs Runs in the archive by state.\n";
    let counts: BTreeMap<&str, u64> = by_state.iter().map(|(st, n)| (st.as_str(), *n)).collect();
    for st in [
        "scheduled",
        "running",
        "finished",
        "failed",
        "missed",
        "non_start",
        "cancelled",
    ] {
        out += &format!(
            "goodput_agent_runs{{state=\"{st}\"}} {}\n",
            counts.get(st).unwrap_or(&0)
        );
    }
    let c = gate.counters();
    out += "# TYPE goodput_agent_api_connections gauge\n# HELP goodput_agent_api_connections The API's connections open now.\n";
    out += &format!("goodput_agent_api_connections {}\n", c.open);
    out += "# TYPE goodput_agent_api_connections_max gauge\n";
    out += &format!("goodput_agent_api_connections_max {}\n", c.max);
    out += "# TYPE goodput_agent_api_refused counter\n# HELP goodput_agent_api_refused Connections and requests the API turned away, by limit.\n";
    for (limit, n) in [
        ("connections_per_address", c.refused_per_address),
        ("connections_full", c.refused_full),
        ("evicted", c.evicted),
        ("requests_per_address", c.requests_refused_per_address),
        ("max_requests", c.requests_refused_busy),
        ("body_timeout", c.slow_bodies),
        ("before_body", c.refused_before_body),
    ] {
        out += &format!("goodput_agent_api_refused_total{{limit=\"{limit}\"}} {n}\n");
    }
    out += "# TYPE goodput_agent_archive_bytes gauge\n# UNIT goodput_agent_archive_bytes bytes\n";
    out += &format!("goodput_agent_archive_bytes {bytes}\n");
    let (full, _, held, given_up) = s.archive_writes();
    out += "# TYPE goodput_agent_archive_disk_full gauge\n\
            # HELP goodput_agent_archive_disk_full 1 while the archive's disk is full (writes refused).\n";
    out += &format!("goodput_agent_archive_disk_full {}\n", u8::from(full));
    out += "# TYPE goodput_agent_archive_held_runs gauge\n\
            # HELP goodput_agent_archive_held_runs The agent's own runs held in memory until the archive takes them.\n";
    out += &format!("goodput_agent_archive_held_runs {held}\n");
    out += "# TYPE goodput_agent_archive_runs_given_up counter\n\
            # HELP goodput_agent_archive_runs_given_up Held runs given up for room.\n";
    out += &format!("goodput_agent_archive_runs_given_up_total {given_up}\n");
    out += "# TYPE goodput_agent_clock_synchronised gauge\n";
    out += &format!(
        "goodput_agent_clock_synchronised {}\n",
        u8::from(clock.synchronised)
    );
    out +=
        "# TYPE goodput_agent_clock_error_seconds gauge\n# UNIT goodput_agent_clock_error_seconds seconds\n";
    out += &format!(
        "goodput_agent_clock_error_seconds {}\n",
        clock.estimated_error_us as f64 / 1e6
    );
    let inner = s.lock();
    out += "# TYPE goodput_agent_booked gauge\n";
    out += &format!("goodput_agent_booked {}\n", inner.booked.len());
    out += "# TYPE goodput_agent_running gauge\n";
    out += &format!("goodput_agent_running {}\n", inner.running);
    out += "# TYPE goodput_agent_config_error gauge\n";
    out += &format!(
        "goodput_agent_config_error {}\n",
        u8::from(inner.config_error.is_some())
    );
    out += "# TYPE goodput_agent_non_starts counter\n";
    out += &format!("goodput_agent_non_starts_total {}\n", inner.counters.non_starts);
    out += "# TYPE goodput_agent_refused counter\n";
    out += &format!("goodput_agent_refused_total {}\n", inner.counters.refused);
    out += "# TYPE goodput_agent_refused_writes counter\n# HELP goodput_agent_refused_writes Writes refused, by why: not the record's owner, a figure out of range, over the requester's write quota, a spec asking for what on-demand runs may not.\n";
    for (why, n) in [
        ("not_owner", inner.counters.refused_not_owner),
        ("out_of_range", inner.counters.refused_out_of_range),
        ("write_quota", inner.counters.refused_write_quota),
        ("spec", inner.counters.refused_spec),
    ] {
        out += &format!("goodput_agent_refused_writes_total{{why=\"{why}\"}} {n}\n");
    }
    let esc = |v: &str| v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n");
    if s.is_archive() {
        out += "# TYPE goodput_archive_ingested counter\n# HELP goodput_archive_ingested Runs stored from agents' forwarded batches.\n";
        out += &format!("goodput_archive_ingested_total {}\n", inner.counters.ingested);
        out += "# TYPE goodput_archive_ingest_refused counter\n# HELP goodput_archive_ingest_refused Forwarded runs or batches refused as malformed.\n";
        out += &format!(
            "goodput_archive_ingest_refused_total {}\n",
            inner.counters.ingest_refused
        );
        out += "# TYPE goodput_archive_pscheduler_ingested counter\n\
                # HELP goodput_archive_pscheduler_ingested perfSONAR pScheduler results stored.\n";
        out += &format!(
            "goodput_archive_pscheduler_ingested_total {}\n",
            inner.counters.pscheduler_ingested
        );
        out += "# TYPE goodput_archive_pscheduler_refused counter\n\
                # HELP goodput_archive_pscheduler_refused perfSONAR pScheduler results refused \
                (malformed, or of a type goodput does not map).\n";
        out += &format!(
            "goodput_archive_pscheduler_refused_total {}\n",
            inner.counters.pscheduler_refused
        );
    }
    if !forwarding.is_empty() {
        out += "# TYPE goodput_forward_backlog_runs gauge\n# HELP goodput_forward_backlog_runs Runs queued for an archive.\n";
        for f in &forwarding {
            out += &format!(
                "goodput_forward_backlog_runs{{archive=\"{}\"}} {}\n",
                esc(&f.url),
                f.backlog
            );
        }
        out += "# TYPE goodput_forward_backlog_age_seconds gauge\n# UNIT goodput_forward_backlog_age_seconds seconds\n\
                # HELP goodput_forward_backlog_age_seconds How long the oldest queued run has waited.\n";
        for f in &forwarding {
            out += &format!(
                "goodput_forward_backlog_age_seconds{{archive=\"{}\"}} {}\n",
                esc(&f.url),
                f.backlog_age_s
            );
        }
        for (name, help, get) in [
            (
                "goodput_forward_delivered",
                "Runs an archive said it stored.",
                (|f| f.delivered) as fn(&crate::forward::ForwardStatus) -> u64,
            ),
            (
                "goodput_forward_failures",
                "Batches that failed, each retried.",
                |f| f.failures,
            ),
            (
                "goodput_forward_dropped",
                "Runs dropped from the queue (its limit, or refused as malformed).",
                |f| f.dropped,
            ),
        ] {
            out += &format!("# TYPE {name} counter\n# HELP {name} {help}\n");
            for f in &forwarding {
                out += &format!("{name}_total{{archive=\"{}\"}} {}\n", esc(&f.url), get(f));
            }
        }
    }
    type Family = (
        &'static str,
        &'static str,
        &'static str,
        fn(&goodput_archive::Figures) -> Option<f64>,
    );
    let families: [Family; 9] = [
        (
            "goodput_throughput_up_bits_per_second",
            "bits_per_second",
            "Latest good-put client to server.",
            |f| f.throughput_up_bps,
        ),
        (
            "goodput_throughput_down_bits_per_second",
            "bits_per_second",
            "Latest good-put server to client.",
            |f| f.throughput_down_bps,
        ),
        ("goodput_loss_ratio", "ratio", "Latest loss.", |f| {
            f.loss_pct.map(|p| p / 100.0)
        }),
        (
            "goodput_delay_median_seconds",
            "seconds",
            "Latest median delay.",
            |f| f.delay_median_us.map(|u| u / 1e6),
        ),
        (
            "goodput_delay_p95_seconds",
            "seconds",
            "Latest 95th percentile delay.",
            |f| f.delay_p95_us.map(|u| u / 1e6),
        ),
        ("goodput_jitter_seconds", "seconds", "Latest jitter.", |f| {
            f.jitter_us.map(|u| u / 1e6)
        }),
        ("goodput_retransmits", "", "Latest retransmits.", |f| {
            f.retransmits
        }),
        ("goodput_errors", "", "Latest failed connections.", |f| f.errors),
        (
            "goodput_hops",
            "",
            "Latest hop count to the destination (traces).",
            |f| f.hops,
        ),
    ];
    for (name, unit, help, get) in families {
        out += &format!("# TYPE {name} gauge\n# HELP {name} {help}\n");
        if !unit.is_empty() {
            out += &format!("# UNIT {name} {unit}\n");
        }
        for l in inner.latest.values() {
            if let Some(v) = get(&l.figures) {
                out += &format!(
                    "{name}{{task=\"{}\",source=\"{}\",dest=\"{}\",kind=\"{}\"}} {v} {}\n",
                    esc(&l.task),
                    esc(&l.source),
                    esc(&l.dest),
                    esc(&l.kind),
                    l.at_ms as f64 / 1000.0
                );
            }
        }
    }
    out += "# EOF\n";
    Ok((
        [(
            axum::http::header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        out,
    )
        .into_response())
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_replayed_run_id_has_its_base_time() {
        assert_eq!(super::base_of("1795800240000"), Some(1_795_800_240_000));
        assert_eq!(super::base_of("1795800240000~2"), Some(1_795_800_240_000));
        assert_eq!(super::base_of("1795800240000~17"), Some(1_795_800_240_000));
        for bad in [
            "1795800240000~1",
            "1795800240000~",
            "1795800240000~x",
            "~2",
            "12a",
        ] {
            assert_eq!(super::base_of(bad), None, "{bad}");
        }
    }

    /// A forwarded run's id names its task, source and dest, unless it
    /// is an on-demand run's.
    #[test]
    fn a_forwarded_runs_id_names_its_pair() {
        let run = |id: &str, source: &str, dest: Option<&str>| goodput_archive::Run {
            id: id.into(),
            task: "latency".into(),
            source: source.into(),
            dest: dest.map(Into::into),
            kind: "stamp".into(),
            class: goodput_core::schedule::RunClass::Background,
            state: goodput_archive::RunState::Failed,
            reason: None,
            scheduled_ms: 1,
            start_ms: None,
            end_ms: None,
            measurement_key: String::new(),
            spec: serde_json::json!({"kind": "stamp"}),
            result: None,
            figures: Default::default(),
        };
        for (id, source, dest) in [
            ("latency/a/b/1795800240000", "a", Some("b")),
            ("latency/a/b/1795800240000~2", "a", Some("b")),
            ("latency/a/b/1795800240000/minute/1795800240000", "a", Some("b")),
            ("latency/a/-/1795800240000", "a", None),
        ] {
            assert!(super::names_its_pair(&run(id, source, dest)), "{id}");
        }
        for (id, source, dest) in [
            ("latency/a/b/1795800240000", "b", Some("a")),
            ("latency/a/b/1795800240000", "a", Some("c")),
            ("latency/a/b/1795800240000", "a", None),
            ("latency/a/b/", "a", Some("b")),
            ("latency/a/b/x", "a", Some("b")),
            ("latency/a/b/1795800240000/minute/", "a", Some("b")),
            ("latency/a/b/1795800240000/other/1", "a", Some("b")),
            ("throughput/a/b/1795800240000", "a", Some("b")),
            ("on-demand/00000000-0000-4000-8000-000000000001", "a", Some("b")),
        ] {
            assert!(!super::names_its_pair(&run(id, source, dest)), "{id}");
        }
    }
}
