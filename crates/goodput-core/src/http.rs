//! What `goodput http` and `goodput tls` measure, without any I/O: the
//! status range and body checks a response is held to, and the result
//! records of both kinds. The engine drives the phases and hands the
//! bytes and times in here.

use serde::{Deserialize, Serialize};

/// The most bytes of a body kept for its checks (substring, regular
/// expression, JSON): a larger body is counted to `max_body` but checked
/// on its first this many bytes only.
pub const MAX_CHECKED_BODY: u64 = 16 << 20;

/// A range of HTTP status codes, `200-299` or one code `204`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatusRange {
    /// The lowest code that passes.
    pub low: u16,
    /// The highest code that passes.
    pub high: u16,
}

impl StatusRange {
    /// Reads `LOW-HIGH` or `CODE` (100-599 each, LOW <= HIGH).
    pub fn parse(s: &str) -> Result<Self, String> {
        let code = |t: &str| -> Result<u16, String> {
            let v: u16 = t
                .trim()
                .parse()
                .map_err(|_| format!("'{t}' is not a status code (100-599)"))?;
            if (100..=599).contains(&v) {
                Ok(v)
            } else {
                Err(format!("{v} is not a status code (100-599)"))
            }
        };
        let (low, high) = match s.split_once('-') {
            Some((a, b)) => (code(a)?, code(b)?),
            None => {
                let c = code(s)?;
                (c, c)
            }
        };
        if low > high {
            return Err(format!("{low}-{high} is empty: the low code comes first"));
        }
        Ok(Self { low, high })
    }

    /// Whether `status` is in it.
    pub fn holds(self, status: u16) -> bool {
        (self.low..=self.high).contains(&status)
    }
}

/// What a response's body must hold; every check that is set must pass.
#[derive(Debug, Clone, Default)]
pub struct BodyChecks {
    /// A substring.
    pub substring: Option<String>,
    /// A regular expression (Rust's `regex` syntax, bounded in size).
    pub regex: Option<regex::Regex>,
    /// A jq filter over the body read as JSON; it passes when its one
    /// output is neither `false` nor `null`.
    pub json: Option<String>,
}

/// The largest compiled regular expression, bytes (the `regex` crate's
/// own bound on what a pattern may grow to).
const MAX_REGEX_BYTES: usize = 1 << 20;

/// Compiles a body pattern with a size bound; the error is in words.
pub fn compile_regex(pattern: &str) -> Result<regex::Regex, String> {
    regex::RegexBuilder::new(pattern)
        .size_limit(MAX_REGEX_BYTES)
        .dfa_size_limit(MAX_REGEX_BYTES)
        .build()
        .map_err(|e| format!("not a regular expression: {e}"))
}

/// Checks a jq filter for the body without running it.
pub fn check_json_filter(filter: &str) -> Result<(), String> {
    crate::psconfig::jq::parse(filter).map(|_| ())
}

impl BodyChecks {
    /// Whether any check is set (then the engine keeps the body's first
    /// bytes to check).
    pub fn any(&self) -> bool {
        self.substring.is_some() || self.regex.is_some() || self.json.is_some()
    }

    /// Holds `body` (its first bytes, when `cut` says the rest was not
    /// read) to every check; the first that fails, in words.
    pub fn check(&self, body: &[u8], cut: bool) -> Result<(), String> {
        if let Some(s) = &self.substring {
            if !contains(body, s.as_bytes()) {
                return Err(format!(
                    "the body{} does not contain \"{s}\"",
                    if cut { "'s first bytes" } else { "" }
                ));
            }
        }
        if let Some(r) = &self.regex {
            let text = String::from_utf8_lossy(body);
            if !r.is_match(&text) {
                return Err(format!("the body does not match /{}/", r.as_str()));
            }
        }
        if let Some(f) = &self.json {
            if cut {
                return Err("the body was cut at `max_body`, so it cannot be read as JSON".into());
            }
            let v: serde_json::Value =
                serde_json::from_slice(body).map_err(|e| format!("the body is not JSON: {e}"))?;
            let ok = crate::psconfig::jq::holds(f, &v).map_err(|e| format!("the JSON filter {f}: {e}"))?;
            if !ok {
                return Err(format!("the JSON filter {f} gave false or null"));
            }
        }
        Ok(())
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || hay.windows(needle.len()).any(|w| w == needle)
}

/// What a TLS handshake showed about the server.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TlsFacts {
    /// The protocol version agreed (`TLSv1.3`, `TLSv1.2`).
    pub protocol: String,
    /// The cipher suite agreed, by its IANA name.
    pub cipher: String,
    /// The application protocol agreed by ALPN (`h2`, `http/1.1`), when
    /// one was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alpn: Option<String>,
    /// Whether the chain verified against the trusted roots for the name
    /// (always false when verification was skipped).
    pub chain_valid: bool,
    /// Why it did not, in words; or that it was not checked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify_error: Option<String>,
    /// Certificates the server sent.
    pub chain_length: u64,
    /// The leaf's subject.
    pub subject: String,
    /// The leaf's issuer.
    pub issuer: String,
    /// The leaf's subject alternative names (DNS names and addresses).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub names: Vec<String>,
    /// The leaf's end of validity, seconds since the Unix epoch.
    pub not_after_unix: i64,
    /// Days until the leaf expires (negative: it has).
    pub days_left: f64,
    /// Days until the first certificate of the chain to expire does
    /// (of those read: at most `MAX_CHAIN_READ`).
    pub chain_days_left: f64,
}

/// The most certificates of a chain read for their dates.
pub const MAX_CHAIN_READ: usize = 16;

/// Days between `now` and `not_after`, both seconds since the epoch.
pub fn days_left(not_after_unix: i64, now_unix: i64) -> f64 {
    (not_after_unix.saturating_sub(now_unix)) as f64 / 86_400.0
}

/// One request and response of an exchange (a redirect adds one).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct HttpHop {
    /// The URL asked.
    pub url: String,
    /// The address connected to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// The protocol spoken (`HTTP/1.1`, `HTTP/2`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// The status code (none: no response).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// Name resolution, ms (none: an address, or `resolve`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns_ms: Option<f64>,
    /// TCP connect, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connect_ms: Option<f64>,
    /// TLS handshake, ms (https only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_ms: Option<f64>,
    /// Request sent to the response's head in, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_byte_ms: Option<f64>,
    /// The response's head to the body's end (or its cut), ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transfer_ms: Option<f64>,
    /// Body bytes read.
    pub body_bytes: u64,
    /// Whether the body was cut at `max_body`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cut: bool,
    /// The redirect's target, when the response was one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub location: Option<String>,
    /// The TLS facts (https only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsFacts>,
    /// What went wrong, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One request of the run, with the redirects it followed.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct HttpExchange {
    /// Each request and response, the first asked first.
    pub hops: Vec<HttpHop>,
    /// From the first name lookup to the last body byte, ms.
    pub total_ms: f64,
    /// Whether the final response passed every check (status range, body).
    pub matched: bool,
    /// Why it did not, in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mismatch: Option<String>,
    /// Whether it failed before a final response (connect, TLS, timeout,
    /// too many redirects).
    pub failed: bool,
}

impl HttpExchange {
    /// The final response's hop.
    pub fn last(&self) -> Option<&HttpHop> {
        self.hops.last()
    }

    /// Redirects followed.
    pub fn redirects(&self) -> u64 {
        self.hops.len().saturating_sub(1) as u64
    }
}

/// `goodput http`'s detail: every request, and the medians over them.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct HttpDetail {
    /// The URL first asked.
    pub url: String,
    /// Every request, in order.
    pub exchanges: Vec<HttpExchange>,
    /// Requests that got a final response.
    pub completed: u64,
    /// Requests whose final response passed every check.
    pub matched: u64,
}

impl HttpDetail {
    /// The median of one phase over the exchanges that measured it, ms
    /// (each exchange's sum over its hops).
    pub fn median_ms(&self, phase: fn(&HttpHop) -> Option<f64>) -> Option<f64> {
        let v: Vec<f64> = self
            .exchanges
            .iter()
            .filter(|e| !e.failed)
            .filter_map(|e| {
                let xs: Vec<f64> = e.hops.iter().filter_map(phase).collect();
                (!xs.is_empty()).then(|| xs.iter().sum())
            })
            .collect();
        median(v)
    }

    /// The median total time of the exchanges that completed, ms.
    pub fn median_total_ms(&self) -> Option<f64> {
        median(
            self.exchanges
                .iter()
                .filter(|e| !e.failed)
                .map(|e| e.total_ms)
                .collect(),
        )
    }

    /// The last exchange's final hop.
    pub fn last_hop(&self) -> Option<&HttpHop> {
        self.exchanges.last()?.last()
    }

    /// The TLS facts of the last exchange's final hop.
    pub fn tls(&self) -> Option<&TlsFacts> {
        self.exchanges
            .iter()
            .rev()
            .flat_map(|e| e.hops.iter().rev())
            .find_map(|h| h.tls.as_ref())
    }
}

/// `goodput tls`'s detail.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TlsDetail {
    /// The host and port as asked.
    pub target: String,
    /// The address connected to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// The name sent as SNI and checked.
    pub server_name: String,
    /// Name resolution, ms (none: an address).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns_ms: Option<f64>,
    /// TCP connect, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connect_ms: Option<f64>,
    /// TLS handshake, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handshake_ms: Option<f64>,
    /// What the handshake showed (none: it did not complete).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub facts: Option<TlsFacts>,
    /// What went wrong, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_ranges_read_and_hold() {
        let r = StatusRange::parse("200-299").unwrap();
        assert!(r.holds(200) && r.holds(299) && !r.holds(301));
        assert_eq!(
            StatusRange::parse("204").unwrap(),
            StatusRange { low: 204, high: 204 }
        );
        assert!(StatusRange::parse("299-200").is_err());
        assert!(StatusRange::parse("99").is_err());
        assert!(StatusRange::parse("abc").is_err());
    }

    #[test]
    fn body_checks_say_which_failed() {
        let c = BodyChecks {
            substring: Some("hello".into()),
            regex: Some(compile_regex("w[o]rld$").unwrap()),
            json: None,
        };
        c.check(b"hello world", false).unwrap();
        assert!(c.check(b"hullo world", false).unwrap_err().contains("\"hello\""));
        assert!(c
            .check(b"hello worlds", false)
            .unwrap_err()
            .contains("/w[o]rld$/"));
        let j = BodyChecks {
            json: Some(".status == \"ok\"".into()),
            ..BodyChecks::default()
        };
        j.check(br#"{"status":"ok"}"#, false).unwrap();
        assert!(j
            .check(br#"{"status":"down"}"#, false)
            .unwrap_err()
            .contains("false"));
        assert!(j.check(b"not json", false).unwrap_err().contains("not JSON"));
        assert!(j.check(br#"{"status":"ok"}"#, true).unwrap_err().contains("cut"));
        assert!(check_json_filter("def f: f; f").is_err());
    }

    #[test]
    fn medians_skip_failed_exchanges() {
        let ex = |ms: f64, failed: bool| HttpExchange {
            hops: vec![HttpHop {
                connect_ms: Some(ms),
                ..HttpHop::default()
            }],
            total_ms: ms,
            failed,
            ..HttpExchange::default()
        };
        let d = HttpDetail {
            exchanges: vec![ex(1.0, false), ex(3.0, false), ex(100.0, true)],
            ..HttpDetail::default()
        };
        assert_eq!(d.median_ms(|h| h.connect_ms), Some(2.0));
        assert_eq!(d.median_total_ms(), Some(2.0));
        assert_eq!(days_left(86_400 * 3, 86_400), 2.0);
    }
}
