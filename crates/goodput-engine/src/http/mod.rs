//! `goodput http` and `goodput tls`: one request driven phase by phase
//! (name resolution, TCP connect, TLS handshake, request to the
//! response's head, the body) over hyper's client connections, so each
//! phase is timed where it happens; redirects followed one new
//! connection each. Everything a server sends is bounded: the head by
//! hyper's limits, the body by `max_body`, the whole request by
//! `timeout`.

pub(crate) mod handshake;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use goodput_core::http::{BodyChecks, HttpExchange, HttpHop, StatusRange, MAX_CHECKED_BODY};
use goodput_core::spec::http::{split_url, HttpMethod, HttpVersion, UrlParts};
use goodput_core::spec::Family;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::RootCertStore;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::time::{timeout_at, Instant as TokioInstant};

/// The largest response head hyper buffers on HTTP/1.1, bytes.
pub const MAX_HEAD_BYTES: usize = 256 << 10;
/// The largest header list accepted on HTTP/2, bytes.
pub const MAX_H2_HEADER_LIST: u32 = 256 << 10;

/// One request as the run asks it.
pub struct Plan {
    /// The method.
    pub method: HttpMethod,
    /// The request body (POST).
    pub data: Option<Bytes>,
    /// Extra headers.
    pub headers: Vec<(String, String)>,
    /// The version to speak.
    pub version: HttpVersion,
    /// Status codes that pass.
    pub status: StatusRange,
    /// The body's checks.
    pub checks: BodyChecks,
    /// Redirects followed at most.
    pub follow: u32,
    /// Body bytes read at most.
    pub max_body: u64,
    /// How long a whole exchange may take.
    pub timeout: std::time::Duration,
    /// Trusted roots (https).
    pub roots: Option<Arc<RootCertStore>>,
    /// Go on over a chain that does not verify.
    pub insecure: bool,
    /// A host's address given instead of looking it up.
    pub resolve: Option<(String, IpAddr)>,
    /// Address family.
    pub family: Family,
}

fn ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1e3
}

/// Looks `host` up (or takes it as an address, or from `resolve`); the
/// time it took when a lookup was made.
pub(crate) async fn resolve(
    host: &str,
    port: u16,
    family: Family,
    given: Option<&(String, IpAddr)>,
) -> Result<(SocketAddr, Option<f64>), String> {
    if let Some((h, a)) = given {
        if h.eq_ignore_ascii_case(host) {
            return Ok((SocketAddr::new(*a, port), None));
        }
    }
    if let Ok(a) = host.parse::<IpAddr>() {
        return Ok((SocketAddr::new(a, port), None));
    }
    let t = Instant::now();
    let found = tokio::net::lookup_host((host, port))
        .await
        .map_err(|e| format!("cannot resolve {host}: {e}"))?;
    let took = ms(t);
    found
        .into_iter()
        .find(|a| match family {
            Family::Any => true,
            Family::Ipv4 => a.is_ipv4(),
            Family::Ipv6 => a.is_ipv6(),
        })
        .map(|a| (a, Some(took)))
        .ok_or_else(|| format!("{host} has no address of the family asked"))
}

/// One whole exchange: the request and the redirects it follows.
pub async fn exchange(plan: &Plan, url: &str) -> HttpExchange {
    let t0 = Instant::now();
    let deadline = TokioInstant::now() + plan.timeout;
    let mut ex = HttpExchange::default();
    let mut url = url.to_owned();
    let mut method = plan.method;
    let mut body_kept: Vec<u8>;
    loop {
        let (hop, kept) = one_hop(plan, &url, method, deadline).await;
        body_kept = kept;
        let failed = hop.error.is_some();
        let location = hop.location.clone();
        let status = hop.status;
        ex.hops.push(hop);
        if failed {
            ex.failed = true;
            break;
        }
        match (status, location) {
            (Some(s), Some(loc)) if is_redirect(s) && ex.redirects() < u64::from(plan.follow) => {
                match join_url(&url, &loc) {
                    Ok(next) => {
                        if s == 303 || ((s == 301 || s == 302) && method == HttpMethod::Post) {
                            method = HttpMethod::Get;
                        }
                        url = next;
                    }
                    Err(e) => {
                        if let Some(h) = ex.hops.last_mut() {
                            h.error = Some(format!("cannot follow the redirect: {e}"));
                        }
                        ex.failed = true;
                        break;
                    }
                }
            }
            _ => break,
        }
    }
    ex.total_ms = ms(t0);
    if !ex.failed {
        let last = ex.hops.last().cloned().unwrap_or_default();
        let status = last.status.unwrap_or(0);
        let verdict = if !plan.status.holds(status) {
            Err(format!(
                "status {status} is outside {}-{}",
                plan.status.low, plan.status.high
            ))
        } else if plan.checks.any() && method != HttpMethod::Head {
            plan.checks.check(&body_kept, last.cut)
        } else {
            Ok(())
        };
        ex.matched = verdict.is_ok();
        ex.mismatch = verdict.err();
    }
    ex
}

fn is_redirect(s: u16) -> bool {
    matches!(s, 301 | 302 | 303 | 307 | 308)
}

/// A redirect's `Location` made absolute against the URL it came from.
fn join_url(base: &str, location: &str) -> Result<String, String> {
    if location.starts_with("http://") || location.starts_with("https://") {
        split_url(location)?;
        return Ok(location.to_owned());
    }
    let b = split_url(base)?;
    let scheme = if b.tls { "https" } else { "http" };
    let authority = if b.host.contains(':') {
        format!("[{}]:{}", b.host, b.port)
    } else {
        format!("{}:{}", b.host, b.port)
    };
    if let Some(rest) = location.strip_prefix("//") {
        return Ok(format!("{scheme}://{rest}"));
    }
    if location.starts_with('/') {
        return Ok(format!("{scheme}://{authority}{location}"));
    }
    if location.contains("://") {
        return Err(format!("'{location}' is not an http or https URL"));
    }
    // Relative to the base's directory.
    let path = b.path.split('?').next().unwrap_or("/");
    let dir = &path[..path.rfind('/').map_or(0, |i| i + 1)];
    Ok(format!("{scheme}://{authority}{dir}{location}"))
}

/// A phase that did not end by the deadline, in words.
fn late(phase: &str) -> String {
    format!("timed out during {phase} (the request's `timeout`)")
}

/// One request and response on a connection of its own; the body's
/// first bytes when the checks want them.
async fn one_hop(plan: &Plan, url: &str, method: HttpMethod, deadline: TokioInstant) -> (HttpHop, Vec<u8>) {
    let mut hop = HttpHop {
        url: url.to_owned(),
        ..HttpHop::default()
    };
    let mut kept = Vec::new();
    if let Err(e) = drive(plan, url, method, deadline, &mut hop, &mut kept).await {
        hop.error = Some(e);
    }
    (hop, kept)
}

async fn drive(
    plan: &Plan,
    url: &str,
    method: HttpMethod,
    deadline: TokioInstant,
    hop: &mut HttpHop,
    kept: &mut Vec<u8>,
) -> Result<(), String> {
    let u = split_url(url)?;
    let (addr, dns_ms) = timeout_at(
        deadline,
        resolve(&u.host, u.port, plan.family, plan.resolve.as_ref()),
    )
    .await
    .map_err(|_| late("name resolution"))??;
    hop.dns_ms = dns_ms;
    hop.address = Some(addr.to_string());
    let t = Instant::now();
    let tcp = timeout_at(deadline, TcpStream::connect(addr))
        .await
        .map_err(|_| late("TCP connect"))?
        .map_err(|e| format!("TCP connect to {addr}: {e}"))?;
    hop.connect_ms = Some(ms(t));
    let _ = tcp.set_nodelay(true);
    if u.tls {
        let roots = plan
            .roots
            .clone()
            .ok_or("https needs trusted roots (none were loaded)")?;
        let alpn: Vec<Vec<u8>> = match plan.version {
            HttpVersion::Auto => vec![b"h2".to_vec(), b"http/1.1".to_vec()],
            HttpVersion::Http1 => vec![b"http/1.1".to_vec()],
            HttpVersion::Http2 => vec![b"h2".to_vec()],
        };
        let t = Instant::now();
        let (tls, facts) = timeout_at(
            deadline,
            handshake::handshake(
                handshake::Handshake {
                    roots,
                    server_name: &u.host,
                    alpn,
                },
                tcp,
            ),
        )
        .await
        .map_err(|_| late("the TLS handshake"))??;
        hop.tls_ms = Some(ms(t));
        let h2 = facts.alpn.as_deref() == Some("h2");
        let bad_chain = (!facts.chain_valid && !plan.insecure).then(|| facts.verify_error.clone());
        hop.tls = Some(facts);
        if let Some(why) = bad_chain {
            return Err(format!(
                "certificate verification failed: {} (nothing was sent; `insecure` goes on)",
                why.unwrap_or_default()
            ));
        }
        if plan.version == HttpVersion::Http2 && !h2 {
            return Err("the server did not agree to HTTP/2 (ALPN h2)".into());
        }
        request(plan, &u, method, deadline, hop, kept, tls, h2).await
    } else {
        let h2 = plan.version == HttpVersion::Http2;
        request(plan, &u, method, deadline, hop, kept, tcp, h2).await
    }
}

#[allow(clippy::too_many_arguments)]
async fn request<S>(
    plan: &Plan,
    u: &UrlParts,
    method: HttpMethod,
    deadline: TokioInstant,
    hop: &mut HttpHop,
    kept: &mut Vec<u8>,
    stream: S,
    h2: bool,
) -> Result<(), String>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let io = TokioIo::new(stream);
    let authority = if u.host.contains(':') {
        format!("[{}]:{}", u.host, u.port)
    } else {
        format!("{}:{}", u.host, u.port)
    };
    let scheme = if u.tls { "https" } else { "http" };
    let mut b = hyper::Request::builder().method(method.as_str());
    b = if h2 {
        b.uri(format!("{scheme}://{authority}{}", u.path))
    } else {
        b.uri(u.path.as_str())
            .header(hyper::header::HOST, authority.as_str())
    };
    b = b.header(
        hyper::header::USER_AGENT,
        concat!("goodput/", env!("CARGO_PKG_VERSION")),
    );
    for (k, v) in &plan.headers {
        b = b.header(k.as_str(), v.as_str());
    }
    let body = match method {
        HttpMethod::Post => plan.data.clone().unwrap_or_default(),
        _ => Bytes::new(),
    };
    let req = b.body(Full::new(body)).map_err(|e| format!("the request: {e}"))?;
    let (response, driver) = if h2 {
        let (mut sender, conn) = timeout_at(
            deadline,
            hyper::client::conn::http2::Builder::new(TokioExecutor::new())
                .max_header_list_size(MAX_H2_HEADER_LIST)
                .handshake::<_, Full<Bytes>>(io),
        )
        .await
        .map_err(|_| late("the HTTP/2 handshake"))?
        .map_err(|e| format!("HTTP/2 handshake: {e}"))?;
        hop.version = Some("HTTP/2".into());
        let driver = tokio::spawn(conn);
        let t = Instant::now();
        let r = timeout_at(deadline, sender.send_request(req)).await;
        let r = finish_head(r, t, hop)?;
        (r, driver)
    } else {
        let (mut sender, conn) = timeout_at(
            deadline,
            hyper::client::conn::http1::Builder::new()
                .max_buf_size(MAX_HEAD_BYTES)
                .handshake::<_, Full<Bytes>>(io),
        )
        .await
        .map_err(|_| late("the HTTP/1.1 handshake"))?
        .map_err(|e| format!("HTTP/1.1 handshake: {e}"))?;
        hop.version = Some("HTTP/1.1".into());
        let driver = tokio::spawn(conn);
        let t = Instant::now();
        let r = timeout_at(deadline, sender.send_request(req)).await;
        let r = finish_head(r, t, hop)?;
        (r, driver)
    };
    // The connection's task ends with the connection, or here.
    struct Abort(tokio::task::JoinHandle<Result<(), hyper::Error>>);
    impl Drop for Abort {
        fn drop(&mut self) {
            self.0.abort();
        }
    }
    let _driver = Abort(driver);
    hop.status = Some(response.status().as_u16());
    hop.location = response
        .headers()
        .get(hyper::header::LOCATION)
        .and_then(|v| v.to_str().ok())
        .map(|s| s.chars().take(2048).collect());
    let keep = if plan.checks.any() {
        plan.max_body.min(MAX_CHECKED_BODY)
    } else {
        0
    };
    let t = Instant::now();
    let mut body: Incoming = response.into_body();
    loop {
        let frame = match timeout_at(deadline, body.frame()).await {
            Err(_) => {
                hop.transfer_ms = Some(ms(t));
                return Err(late("the body"));
            }
            Ok(None) => break,
            Ok(Some(Err(e))) => {
                hop.transfer_ms = Some(ms(t));
                return Err(format!("the body after {} bytes: {e}", hop.body_bytes));
            }
            Ok(Some(Ok(f))) => f,
        };
        let Ok(data) = frame.into_data() else { continue };
        let room = plan.max_body - hop.body_bytes;
        let take = (data.len() as u64).min(room);
        let have = kept.len() as u64;
        if have < keep {
            let n = take.min(keep - have) as usize;
            kept.extend_from_slice(&data[..n]);
        }
        hop.body_bytes += take;
        if take < data.len() as u64 {
            hop.cut = true;
            break;
        }
    }
    hop.transfer_ms = Some(ms(t));
    Ok(())
}

fn finish_head(
    r: Result<Result<hyper::Response<Incoming>, hyper::Error>, tokio::time::error::Elapsed>,
    t: Instant,
    hop: &mut HttpHop,
) -> Result<hyper::Response<Incoming>, String> {
    match r {
        Err(_) => Err(late("the wait for the response")),
        Ok(Err(e)) => Err(format!("the response: {}", crate::run::error_chain(&e))),
        Ok(Ok(resp)) => {
            hop.first_byte_ms = Some(ms(t));
            Ok(resp)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redirects_resolve_against_their_url() {
        assert_eq!(join_url("http://h:8080/a/b?x", "/c").unwrap(), "http://h:8080/c");
        assert_eq!(join_url("http://h:8080/a/b?x", "c").unwrap(), "http://h:8080/a/c");
        assert_eq!(join_url("https://h/a", "//g/x").unwrap(), "https://g/x");
        assert_eq!(join_url("http://h/", "https://k:1/").unwrap(), "https://k:1/");
        assert!(join_url("http://h/", "ftp://k/").is_err());
        assert_eq!(join_url("http://[::1]:81/", "/z").unwrap(), "http://[::1]:81/z");
    }
}
