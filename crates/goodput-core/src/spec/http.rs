//! `goodput http` and `goodput tls` as documents.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{Family, SpecError};
use crate::alert;
use crate::assertion::{Assertion, Figure};
use crate::http::{check_json_filter, compile_regex, StatusRange};
use crate::kind::{ms, target, Kind, KindSpec, Marking, Reach, Target};
use crate::schedule::{Ms, RunClass};
use crate::units::{ByteSize, HumanDuration};

/// The largest `max_body`: 1 GiB read and counted (only the first
/// [`crate::http::MAX_CHECKED_BODY`] bytes are kept for the checks).
pub const MAX_BODY: u64 = 1 << 30;
/// The most redirects followed.
pub const MAX_FOLLOW: u32 = 30;
/// The most headers a request may add, and the longest request body.
pub const MAX_HEADERS: usize = 64;
/// The longest request body given in a spec, bytes.
pub const MAX_DATA: usize = 1 << 20;

/// The request's method.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "UPPERCASE")]
pub enum HttpMethod {
    /// GET.
    #[default]
    Get,
    /// HEAD (no body).
    Head,
    /// POST, with `data` as its body.
    Post,
}

impl HttpMethod {
    /// Its name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            HttpMethod::Get => "GET",
            HttpMethod::Head => "HEAD",
            HttpMethod::Post => "POST",
        }
    }
}

/// Which HTTP version to speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum HttpVersion {
    /// Over TLS, what ALPN agrees (HTTP/2 offered first); in clear,
    /// HTTP/1.1.
    #[default]
    Auto,
    /// HTTP/1.1 only.
    Http1,
    /// HTTP/2 only (over TLS by ALPN `h2`, in clear with prior knowledge).
    Http2,
}

/// An HTTP(S) request, its phases timed. Every field has the default of
/// its flag in `goodput http`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct HttpSpec {
    /// The URL, `http://` or `https://`.
    pub url: String,
    /// The method.
    pub method: HttpMethod,
    /// The request body (POST).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data: Option<String>,
    /// Headers added to the request, each `Name: value`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub header: Vec<String>,
    /// Which HTTP version to speak.
    pub version: HttpVersion,
    /// The status codes that pass, `LOW-HIGH` or one code.
    pub expect_status: String,
    /// A substring the body must contain.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expect_body: Option<String>,
    /// A regular expression the body must match.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expect_body_regex: Option<String>,
    /// A jq filter over the body read as JSON, which must give neither
    /// false nor null (e.g. `.status == "ok"`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expect_json: Option<String>,
    /// Redirects followed at most (0: none; the redirect is the answer).
    pub follow: u32,
    /// Body bytes read at most; a longer body is cut there and said so.
    pub max_body: ByteSize,
    /// How long one request may take, redirects and body included.
    pub timeout: HumanDuration,
    /// Trust certificates that chain to the CA certificates in this PEM
    /// file instead of the system's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ca: Option<PathBuf>,
    /// Do not verify the certificate (its facts are still read).
    pub insecure: bool,
    /// Connect to this address for the URL's host, `HOST:ADDR` (curl's
    /// `--resolve` without the port).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resolve: Option<String>,
    /// Requests to make.
    pub count: u64,
    /// Time between the starts of requests.
    pub interval: HumanDuration,
    /// Address family.
    pub family: Family,
    /// Pass/fail assertions, such as "total < 200ms" or "cert_days_left >= 14".
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub assert: Vec<Assertion>,
}

impl Default for HttpSpec {
    fn default() -> Self {
        Self {
            url: String::new(),
            method: HttpMethod::Get,
            data: None,
            header: Vec::new(),
            version: HttpVersion::Auto,
            expect_status: "200-299".into(),
            expect_body: None,
            expect_body_regex: None,
            expect_json: None,
            follow: 0,
            max_body: ByteSize(10 << 20),
            timeout: HumanDuration(Duration::from_secs(10)),
            ca: None,
            insecure: false,
            resolve: None,
            count: 1,
            interval: HumanDuration(Duration::from_secs(1)),
            family: Family::Any,
            assert: Vec::new(),
        }
    }
}

/// A URL split into what a request needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UrlParts {
    /// Whether it is `https`.
    pub tls: bool,
    /// The host as written (brackets off an IPv6 address).
    pub host: String,
    /// The port, the scheme's when none is written.
    pub port: u16,
    /// The path and query, `/` at least.
    pub path: String,
}

/// Splits an `http://` or `https://` URL (no user info, no fragment
/// sent).
pub fn split_url(url: &str) -> Result<UrlParts, String> {
    let (tls, rest) = if let Some(r) = url.strip_prefix("https://") {
        (true, r)
    } else if let Some(r) = url.strip_prefix("http://") {
        (false, r)
    } else {
        return Err(format!("'{url}' is not an http:// or https:// URL"));
    };
    let (authority, path) = match rest.find(['/', '?', '#']) {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let path = path.split('#').next().unwrap_or("/");
    let path = if path.starts_with('/') {
        path.to_owned()
    } else {
        format!("/{path}")
    };
    if authority.contains('@') {
        return Err(format!("'{url}': user names in URLs are not supported"));
    }
    let default_port = if tls { 443 } else { 80 };
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (h, after) = v6
            .split_once(']')
            .ok_or_else(|| format!("'{url}': an IPv6 address needs its closing ]"))?;
        let port = match after.strip_prefix(':') {
            Some(p) => p.parse().map_err(|_| format!("'{url}': bad port '{p}'"))?,
            None if after.is_empty() => default_port,
            None => return Err(format!("'{url}': junk after the address")),
        };
        (h.to_owned(), port)
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (
                h.to_owned(),
                p.parse().map_err(|_| format!("'{url}': bad port '{p}'"))?,
            ),
            None => (authority.to_owned(), default_port),
        }
    };
    if host.is_empty() {
        return Err(format!("'{url}' names no host"));
    }
    if port == 0 {
        return Err(format!("'{url}': port 0"));
    }
    Ok(UrlParts {
        tls,
        host,
        port,
        path,
    })
}

impl KindSpec for HttpSpec {
    const KIND: Kind = Kind::Http;
    const CLASS: RunClass = RunClass::Normal;
    const RATE_LIMITED: bool = false;
    // The engine sets no TOS on its connections.
    const DSCP: Marking<Self> = None;
    // http over TLS: the certificate's days left (a clear URL has none).
    const FAMILIES: &'static [alert::Family] = &[alert::Family::Certificate];

    fn validate(&self) -> Result<(), SpecError> {
        crate::assertion::check(Self::KIND, &self.assert)?;
        if self.url.trim().is_empty() {
            return Err(SpecError::new("url", "is required: the URL to ask"));
        }
        split_url(&self.url).map_err(|e| SpecError::new("url", e))?;
        StatusRange::parse(&self.expect_status).map_err(|e| SpecError::new("expect_status", e))?;
        if let Some(r) = &self.expect_body_regex {
            compile_regex(r).map_err(|e| SpecError::new("expect_body_regex", e))?;
        }
        if let Some(j) = &self.expect_json {
            check_json_filter(j).map_err(|e| SpecError::new("expect_json", format!("a jq filter: {e}")))?;
        }
        if self.header.len() > MAX_HEADERS {
            return Err(SpecError::new("header", format!("at most {MAX_HEADERS} headers")));
        }
        for h in &self.header {
            match h.split_once(':') {
                Some((n, v))
                    if !n.trim().is_empty()
                        && n.trim().bytes().all(|b| b.is_ascii_graphic() && b != b':')
                        && !v.contains(['\r', '\n']) => {}
                _ => {
                    return Err(SpecError::new(
                        "header",
                        format!("'{h}' is not `Name: value` (one line)"),
                    ))
                }
            }
        }
        if let Some(d) = &self.data {
            if self.method != HttpMethod::Post {
                return Err(SpecError::new("data", "is sent only with `method` POST"));
            }
            if d.len() > MAX_DATA {
                return Err(SpecError::new(
                    "data",
                    format!("must be at most {MAX_DATA} bytes"),
                ));
            }
        }
        if self.follow > MAX_FOLLOW {
            return Err(SpecError::new(
                "follow",
                format!("must be 0-{MAX_FOLLOW} redirects"),
            ));
        }
        if self.max_body.0 > MAX_BODY {
            return Err(SpecError::new("max_body", "must be at most 1GiB"));
        }
        if self.timeout.0 < Duration::from_millis(1) || self.timeout.0 > Duration::from_secs(600) {
            return Err(SpecError::new("timeout", "must be 1ms-10m"));
        }
        if !(1..=100_000).contains(&self.count) {
            return Err(SpecError::new("count", "must be 1-100000"));
        }
        if let Some(r) = &self.resolve {
            resolve_pair(r).map_err(|e| SpecError::new("resolve", e))?;
        }
        Ok(())
    }

    fn assertions(&self) -> &[Assertion] {
        &self.assert
    }

    fn expected_ms(&self) -> Option<Ms> {
        Some(
            ms(self.interval.0)
                .saturating_mul(self.count.saturating_sub(1))
                .saturating_add(ms(self.timeout.0)),
        )
    }

    fn targets(&self) -> Vec<Target> {
        match split_url(&self.url) {
            Ok(u) => vec![(u.host, Some(u.port))],
            Err(_) => vec![(self.url.clone(), None)],
        }
    }

    fn bitrate(&self) -> Option<u64> {
        None
    }

    fn names_a_file(&self) -> Option<&'static str> {
        self.ca.as_ref().map(|_| "ca")
    }

    fn reach(&self) -> Reach {
        // Web servers only: none of the beacon's services.
        Reach {
            services: &[],
            port: split_url(&self.url).ok().map(|u| u.port),
        }
    }

    fn figures() -> Vec<&'static Figure> {
        crate::catalogue::with_common(&crate::catalogue::HTTP)
    }
}

/// `HOST:ADDR` of `resolve`, split (the address may be IPv6, bracketed
/// or not).
pub fn resolve_pair(s: &str) -> Result<(String, std::net::IpAddr), String> {
    let (h, a) = s
        .split_once(':')
        .ok_or_else(|| format!("'{s}' is not HOST:ADDRESS"))?;
    let a = a.trim_start_matches('[').trim_end_matches(']');
    let addr = a
        .parse()
        .map_err(|_| format!("'{a}' in '{s}' is not an IP address"))?;
    if h.is_empty() {
        return Err(format!("'{s}' names no host"));
    }
    Ok((h.to_owned(), addr))
}

/// A TLS connect and handshake only, for the certificate's and the
/// protocol's facts. Every field has the default of its flag in
/// `goodput tls`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct TlsSpec {
    /// `HOST:PORT` (443 when no port is given).
    pub host: String,
    /// The name sent as SNI and checked against the certificate (the
    /// host when not given).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sni: Option<String>,
    /// Application protocols offered by ALPN, most wanted first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub alpn: Vec<String>,
    /// Trust certificates that chain to the CA certificates in this PEM
    /// file instead of the system's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ca: Option<PathBuf>,
    /// Do not count an unverified chain as a failure (its facts are read
    /// either way).
    pub insecure: bool,
    /// How long connect and handshake may take.
    pub timeout: HumanDuration,
    /// Address family.
    pub family: Family,
    /// Pass/fail assertions, such as "cert_days_left >= 14".
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub assert: Vec<Assertion>,
}

impl Default for TlsSpec {
    fn default() -> Self {
        Self {
            host: String::new(),
            sni: None,
            alpn: Vec::new(),
            ca: None,
            insecure: false,
            timeout: HumanDuration(Duration::from_secs(10)),
            family: Family::Any,
            assert: Vec::new(),
        }
    }
}

impl KindSpec for TlsSpec {
    const KIND: Kind = Kind::Tls;
    const CLASS: RunClass = RunClass::Normal;
    const RATE_LIMITED: bool = false;
    // The engine sets no TOS on its connection.
    const DSCP: Marking<Self> = None;
    const FAMILIES: &'static [alert::Family] = &[alert::Family::Certificate];

    fn validate(&self) -> Result<(), SpecError> {
        crate::assertion::check(Self::KIND, &self.assert)?;
        if self.host.trim().is_empty() {
            return Err(SpecError::new("host", "is required: HOST:PORT to connect to"));
        }
        super::split_target(&self.host, 443).map_err(|e| SpecError::new("host", e))?;
        if self.alpn.len() > 16 || self.alpn.iter().any(|a| a.is_empty() || a.len() > 255) {
            return Err(SpecError::new("alpn", "at most 16 protocols of 1-255 bytes each"));
        }
        if self.timeout.0 < Duration::from_millis(1) || self.timeout.0 > Duration::from_secs(600) {
            return Err(SpecError::new("timeout", "must be 1ms-10m"));
        }
        Ok(())
    }

    fn assertions(&self) -> &[Assertion] {
        &self.assert
    }

    fn expected_ms(&self) -> Option<Ms> {
        Some(ms(self.timeout.0))
    }

    fn targets(&self) -> Vec<Target> {
        vec![target(&self.host, 443)]
    }

    fn bitrate(&self) -> Option<u64> {
        None
    }

    fn names_a_file(&self) -> Option<&'static str> {
        self.ca.as_ref().map(|_| "ca")
    }

    fn reach(&self) -> Reach {
        Reach {
            services: &[],
            port: self.targets().first().and_then(|t| t.1),
        }
    }

    fn figures() -> Vec<&'static Figure> {
        crate::catalogue::with_common(&crate::catalogue::TLS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_split() {
        let u = split_url("https://example.org:8443/a/b?c=1#frag").unwrap();
        assert_eq!(
            u,
            UrlParts {
                tls: true,
                host: "example.org".into(),
                port: 8443,
                path: "/a/b?c=1".into()
            }
        );
        let u = split_url("http://[::1]/").unwrap();
        assert_eq!((u.host.as_str(), u.port, u.tls), ("::1", 80, false));
        assert_eq!(split_url("http://h?q").unwrap().path, "/?q");
        assert!(split_url("ftp://x/").is_err());
        assert!(split_url("http://:80/").is_err());
        assert!(split_url("http://u@h/").is_err());
    }

    #[test]
    fn rules_name_their_field() {
        let ok = HttpSpec {
            url: "https://example.org/".into(),
            ..HttpSpec::default()
        };
        ok.validate().unwrap();
        let bad = |s: HttpSpec| s.validate().unwrap_err().field;
        assert_eq!(bad(HttpSpec::default()), "url");
        assert_eq!(
            bad(HttpSpec {
                expect_status: "300-200".into(),
                ..ok.clone()
            }),
            "expect_status"
        );
        assert_eq!(
            bad(HttpSpec {
                expect_body_regex: Some("(".into()),
                ..ok.clone()
            }),
            "expect_body_regex"
        );
        assert_eq!(
            bad(HttpSpec {
                header: vec!["X-A\r\nB: c".into()],
                ..ok.clone()
            }),
            "header"
        );
        assert_eq!(
            bad(HttpSpec {
                data: Some("x".into()),
                ..ok.clone()
            }),
            "data"
        );
        assert_eq!(
            bad(HttpSpec {
                resolve: Some("h:nope".into()),
                ..ok.clone()
            }),
            "resolve"
        );
        let t = TlsSpec {
            host: "example.org".into(),
            ..TlsSpec::default()
        };
        t.validate().unwrap();
        assert_eq!(t.targets(), vec![("example.org".to_owned(), Some(443))]);
    }
}
