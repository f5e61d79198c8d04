//! The API's server: its listening sockets, each admitted connection
//! served with hyper, the admission middleware, the security headers and
//! the routes.

use std::collections::HashSet;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::extract::{ConnectInfo, DefaultBodyLimit, Request, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Router};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::http::accept::{ApiListener, Caller};
use crate::http::listen::{Gate, Watched};
use crate::log::log;
use crate::state::Shared;

use super::auth::{authorise, token_matches};
use super::{archive, fleet, grid, metrics, openapi, runs, schedule, series, status};
use super::{bad, Ctx, Failure};

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
pub(crate) fn listen_socket(a: SocketAddr) -> std::io::Result<TcpListener> {
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
pub(crate) async fn serve(shared: Ctx, listener: ApiListener, gate: Arc<Gate>) {
    let cancel = shared.cancel.clone();
    let app = router(shared, gate.clone());
    serve_app(app, listener, gate, cancel).await;
}

/// Serves `app` on one socket until `cancel` (the API's, or pScheduler's
/// participant API, `super::pscheduler`).
pub(crate) async fn serve_app(
    app: Router,
    mut listener: ApiListener,
    gate: Arc<Gate>,
    cancel: CancellationToken,
) {
    use hyper_util::rt::{TokioIo, TokioTimer};
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
    // A page that runs a script of its own (/speedtest) says so itself.
    h.entry(header::CONTENT_SECURITY_POLICY)
        .or_insert(HeaderValue::from_static(
            "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; \
             form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ));
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
        .route("/api/v1/health", get(status::health))
        .route("/api/v1/config", get(status::config))
        .route("/api/v1/tasks", get(status::tasks))
        .route("/api/v1/schedule", get(schedule::schedule))
        .route("/api/v1/reservations", post(schedule::reserve))
        .route("/api/v1/runs", get(runs::runs).post(runs::on_demand))
        .route("/api/v1/runs/{*id}", get(runs::one_run).put(runs::put_run))
        .route("/api/v1/archive/runs", post(archive::ingest))
        .route(
            "/api/v1/archive/pscheduler",
            post(archive::pscheduler).put(archive::pscheduler),
        )
        .route("/api/v1/fleet/config", get(fleet::config))
        .route("/api/v1/fleet/agents", get(fleet::agents))
        .route("/api/v1/fleet/agents/{name}", axum::routing::put(fleet::register))
        .route("/api/v1/series", get(series::series))
        .route("/api/v1/paths", get(series::paths))
        .route("/api/v1/grid", get(grid::grid))
        .route("/api/v1/alerts", get(series::alerts))
        .merge(crate::http::pages::routes())
        .route("/api/v1/openapi.json", get(openapi::openapi))
        .route("/metrics", get(metrics::metrics))
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
