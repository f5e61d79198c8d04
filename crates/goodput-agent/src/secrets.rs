//! Secrets never leave the process: every view of the configuration (the
//! API, the pages, `/metrics`, the log) shows URLs without their
//! passwords, keys and tokens, and fields named for a secret without
//! their values. The agent itself keeps and uses them whole.

/// What a secret's value is shown as.
pub(crate) const HIDDEN: &str = "…";

/// Whether a query parameter or a field of this name holds a secret.
fn secret_name(name: &str) -> bool {
    let n = name.to_ascii_lowercase().replace('-', "_");
    const WORDS: [&str; 11] = [
        "password",
        "passwd",
        "pwd",
        "secret",
        "token",
        "api_key",
        "apikey",
        "access_key",
        "private_key",
        "authorization",
        "signature",
    ];
    WORDS.iter().any(|w| n.contains(w)) || matches!(n.as_str(), "key" | "auth" | "sig" | "pass")
}

/// A URL without its password (the user's part ends at the last '@', as a
/// password may hold '?', '/' or '@' unencoded) and without the values of
/// query parameters named for a secret.
pub(crate) fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    // The authority ends at the first '/', '?' or '#' after the last '@'.
    let (user, after) = match rest.rsplit_once('@') {
        Some((u, a)) if u.contains(':') => (format!("{}:{HIDDEN}@", u.split(':').next().unwrap_or("")), a),
        // A user part alone may be a token (https://TOKEN@host/).
        Some((u, a)) if !u.contains('/') && u.len() >= 16 => (format!("{HIDDEN}@"), a),
        _ => (String::new(), rest),
    };
    let (after, fragment) = match after.split_once('#') {
        Some((a, f)) => (a, Some(f)),
        None => (after, None),
    };
    let mut out = format!("{scheme}://{user}");
    match after.split_once('?') {
        Some((base, q)) => {
            let q: Vec<String> = q
                .split('&')
                .map(|kv| match kv.split_once('=') {
                    Some((k, _)) if secret_name(k) => format!("{k}={HIDDEN}"),
                    _ => kv.to_string(),
                })
                .collect();
            out += base;
            out += "?";
            out += &q.join("&");
        }
        None => out += after,
    }
    if let Some(f) = fragment {
        out += "#";
        out += f;
    }
    out
}

/// Free text (an error, a log line) with every URL in it redacted.
pub(crate) fn redact_text(text: &str) -> String {
    if !text.contains("://") {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        // The scheme: the letters just before "://".
        let start = rest[..at]
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '+' || c == '-' || c == '.'))
            .map_or(0, |i| i + 1);
        let end = rest[at..]
            .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '<' | '>' | ')' | ']' | ','))
            .map_or(rest.len(), |i| at + i);
        // Punctuation that ends a sentence is not the URL's.
        let end = start.max(at) + rest[start.max(at)..end].trim_end_matches(['.', ':', ';']).len();
        out += &rest[..start];
        out += &redact_url(&rest[start..end]);
        rest = &rest[end..];
    }
    out += rest;
    out
}

/// A document (the configuration as JSON) with every field named for a
/// secret hidden and every URL in it redacted.
pub(crate) fn redact_json(v: &mut serde_json::Value) {
    use serde_json::Value;
    match v {
        Value::Object(map) => {
            for (k, v) in map.iter_mut() {
                if secret_name(k) && !matches!(v, Value::Null | Value::Bool(_)) {
                    *v = Value::String(HIDDEN.into());
                } else {
                    redact_json(v);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(redact_json),
        Value::String(s) if s.contains("://") => *s = redact_text(s),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_lose_passwords_and_keys_only() {
        for (url, shown) in [
            (
                "postgres://goodput:s3cret@db:5432/fleet",
                "postgres://goodput:…@db:5432/fleet",
            ),
            ("postgres://goodput@db/fleet", "postgres://goodput@db/fleet"),
            (
                "https://am.example:9093/api/v2/alerts?api_key=k3y&team=net",
                "https://am.example:9093/api/v2/alerts?api_key=…&team=net",
            ),
            (
                "https://hooks.example/in?token=abc&sig=zz#x",
                "https://hooks.example/in?token=…&sig=…#x",
            ),
            ("https://archive:8780#AB:CD", "https://archive:8780#AB:CD"),
            (
                "https://0123456789abcdef0123@hooks.example/x",
                "https://…@hooks.example/x",
            ),
            ("/var/lib/goodput/archive.db", "/var/lib/goodput/archive.db"),
        ] {
            assert_eq!(redact_url(url), shown, "{url}");
        }
    }

    #[test]
    fn text_and_documents_are_redacted_everywhere() {
        assert_eq!(
            redact_text("cannot fetch http://u:pw@h/x?key=1: refused (http://a:b@c)"),
            "cannot fetch http://u:…@h/x?key=…: refused (http://a:…@c)"
        );
        let mut doc = serde_json::json!({
            "alerts": {"send_to": [{"webhook": "https://h/x?apikey=s", "alertmanager": "http://u:p@am:9093"}]},
            "archives": {"f": {"url": "https://u:p@a:8780", "tls_sha256": "AB"}},
            "headers": {"Authorization": "Bearer s3cret", "X-Api-Key": "k"},
            "measurement_key": "not a secret",
        });
        redact_json(&mut doc);
        let text = doc.to_string();
        for secret in ["apikey=s", "u:p@", "s3cret", "\"k\""] {
            assert!(!text.contains(secret), "{secret} in {text}");
        }
        assert_eq!(doc["archives"]["f"]["tls_sha256"], "AB");
        assert_eq!(doc["measurement_key"], "not a secret");
    }
}
