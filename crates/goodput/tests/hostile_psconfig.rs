//! Hostile pSConfig templates, read the way the agent reads them (through
//! `goodput agent import-psconfig` and `--check-config`, the same reader
//! the agent's subscription uses), each process under the servers'
//! address-space limit: a million addresses, nesting past any sensible
//! depth, an include loop, includes too many or nested too deep, an
//! include URL that never answers and an oversized include, served by a
//! loopback publisher the test starts. Each is refused with a reason
//! that names it, within a bounded time.

mod common;
mod psconfig_http;

use common::{goodput, limit_address_space, tmp, Reaped, SERVER_ADDRESS_SPACE};
use psconfig_http::{Answer, Publisher};
use serde_json::json;
use std::process::Stdio;
use std::time::{Duration, Instant};

/// `goodput agent ARGS…` under the address-space limit: (exit status,
/// standard error, how long it took).
fn agent(args: &[&str]) -> (Option<i32>, String, Duration) {
    let mut cmd = goodput();
    cmd.arg("agent").args(args).stdin(Stdio::null());
    limit_address_space(&mut cmd, SERVER_ADDRESS_SPACE);
    let started = Instant::now();
    let (code, _, err) = Reaped::spawn(cmd).wait(Duration::from_secs(60));
    (code, err, started.elapsed())
}

/// Imports `template` (a file or URL): it must fail with exit 3 within
/// `within`, its error containing `says`; the error is returned.
fn refused(template: &str, says: &str, within: Duration) -> String {
    let (code, err, took) = agent(&["import-psconfig", template]);
    eprintln!("{template}: {took:?}: {err}");
    assert_eq!(code, Some(3), "{err}");
    assert!(err.contains(says), "{err}");
    assert!(took < within, "took {took:?}: {err}");
    err
}

/// `n` addresses `h0…` as a pSConfig `addresses` object's text, about 40
/// bytes each.
fn addresses(from: usize, n: usize) -> String {
    let mut t = String::with_capacity(n * 40);
    t.push('{');
    for i in from..from + n {
        if i > from {
            t.push(',');
        }
        t += &format!(
            "\"h{i}\":{{\"address\":\"10.{}.{}.{}\"}}",
            i >> 16,
            (i >> 8) & 255,
            i & 255
        );
    }
    t.push('}');
    t
}

#[test]
fn a_million_addresses_are_refused_in_one_document_or_spread_over_includes() {
    let group = "hostile-psconfig-million";
    let one = tmp(group, "million.json");
    let text = format!("{{\"addresses\":{}}}", addresses(0, 1_000_000));
    assert!(text.len() > 16 << 20, "{}", text.len());
    std::fs::write(&one, &text).unwrap();
    drop(text);
    refused(
        one.to_str().unwrap(),
        "limit max_config_bytes: larger than 16777216 bytes",
        Duration::from_secs(10),
    );
    // Four includes of 250,000 each: every one under the limit, together
    // over it.
    let publisher = Publisher::start();
    let mut urls = Vec::new();
    let mut sizes = Vec::new();
    for k in 0..4 {
        let body = format!("{{\"addresses\":{}}}", addresses(k * 250_000, 250_000));
        assert!(body.len() < 16 << 20);
        sizes.push(body.len());
        let path = format!("/part{k}.json");
        publisher.put(&path, Answer::Json(200, body));
        urls.push(publisher.url(&path));
    }
    let top = json!({"includes": urls, "addresses": {}, "groups": {}, "tests": {}, "tasks": {}});
    publisher.put("/top.json", Answer::Json(200, top.to_string()));
    let err = refused(
        &publisher.url("/top.json"),
        "limit max_config_bytes: the template and its includes have more than 16777216 bytes together",
        Duration::from_secs(20),
    );
    // The part that takes the total past the limit is named.
    let mut total = top.to_string().len();
    let past = sizes
        .iter()
        .position(|n| {
            total += n;
            total > 16 << 20
        })
        .unwrap();
    assert!(
        err.contains(&format!("includes[{past}] ({})", urls[past])),
        "{err}"
    );
}

#[test]
fn nesting_past_any_sensible_depth_is_refused() {
    let group = "hostile-psconfig-deep";
    let deep = tmp(group, "deep.json");
    let n = 100_000;
    std::fs::write(
        &deep,
        format!("{{\"addresses\":{{\"a\":{}{}}}}}", "[".repeat(n), "]".repeat(n)),
    )
    .unwrap();
    refused(
        deep.to_str().unwrap(),
        "not JSON (a pSConfig template is JSON): recursion limit exceeded",
        Duration::from_secs(10),
    );
    // The same in an include, and `--check-config` says it too.
    let publisher = Publisher::start();
    publisher.put(
        "/deep.json",
        Answer::Json(
            200,
            format!("{{\"tests\":{}{}}}", "{\"a\":".repeat(n), "}".repeat(n)),
        ),
    );
    let top = json!({"includes": [publisher.url("/deep.json")], "addresses": {}, "groups": {}, "tests": {}, "tasks": {}});
    publisher.put("/top.json", Answer::Json(200, top.to_string()));
    let (code, err, took) = agent(&["--check-config", "--config", &publisher.url("/top.json")]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "includes[0] ({}): not JSON",
            publisher.url("/deep.json")
        )) && err.contains("recursion limit exceeded"),
        "{err}"
    );
    assert!(took < Duration::from_secs(10), "{took:?}");
}

#[test]
fn include_loops_and_too_many_or_too_deep_includes_are_refused() {
    let publisher = Publisher::start();
    let (a, b) = (publisher.url("/a.json"), publisher.url("/b.json"));
    publisher.put(
        "/a.json",
        Answer::Json(
            200,
            json!({"includes": [b], "addresses": {}, "groups": {}, "tests": {}, "tasks": {}}).to_string(),
        ),
    );
    publisher.put("/b.json", Answer::Json(200, json!({"includes": [a]}).to_string()));
    let err = refused(&a, "an include loop", Duration::from_secs(10));
    assert!(
        err.contains(&format!("an include loop: {a} → {b} → {a}")),
        "{err}"
    );
    // Itself.
    publisher.put(
        "/self.json",
        Answer::Json(
            200,
            json!({"includes": [publisher.url("/self.json")]}).to_string(),
        ),
    );
    refused(
        &publisher.url("/self.json"),
        "an include loop",
        Duration::from_secs(10),
    );
    // A chain of eight: the fifth level is refused, nothing past it read.
    for i in 0..8 {
        let next = publisher.url(&format!("/n{}.json", i + 1));
        publisher.put(
            &format!("/n{i}.json"),
            Answer::Json(
                200,
                json!({"includes": [next], "addresses": {}, "groups": {}, "tests": {}, "tasks": {}})
                    .to_string(),
            ),
        );
    }
    let before = publisher.requests.load(std::sync::atomic::Ordering::Relaxed);
    refused(
        &publisher.url("/n0.json"),
        "limit max_include_depth: includes nest deeper than 4 documents",
        Duration::from_secs(10),
    );
    let asked = publisher.requests.load(std::sync::atomic::Ordering::Relaxed) - before;
    assert_eq!(asked, 5, "the template and four levels of includes");
    // 33 includes.
    let many: Vec<String> = (0..33).map(|i| publisher.url(&format!("/x{i}.json"))).collect();
    publisher.put(
        "/many.json",
        Answer::Json(200, json!({"includes": many}).to_string()),
    );
    refused(
        &publisher.url("/many.json"),
        "includes: limit max_includes: it lists 33 documents, 32 allowed",
        Duration::from_secs(10),
    );
    // A template served by someone else may not read this host's files.
    publisher.put(
        "/local.json",
        Answer::Json(200, json!({"includes": ["/etc/passwd"]}).to_string()),
    );
    refused(
        &publisher.url("/local.json"),
        "a template read from a URL may include only http:// or https:// URLs, not this host's files",
        Duration::from_secs(10),
    );
}

#[test]
fn an_include_that_never_answers_or_is_too_big_is_refused_in_bounded_time() {
    let publisher = Publisher::start();
    let silent = publisher.url("/silent.json");
    publisher.put("/silent.json", Answer::Never);
    let top = json!({"includes": [silent], "addresses": {}, "groups": {}, "tests": {}, "tasks": {}});
    publisher.put("/top.json", Answer::Json(200, top.to_string()));
    let started = Instant::now();
    let err = refused(
        &publisher.url("/top.json"),
        &format!("includes[0] ({silent}): cannot fetch {silent}: no answer within 10 s"),
        Duration::from_secs(15),
    );
    assert!(started.elapsed() >= Duration::from_secs(9), "{err}");
    // 17 MiB in one include: refused by its length, unread.
    let big = publisher.url("/big.json");
    publisher.put("/big.json", Answer::Json(200, " ".repeat(17 << 20)));
    let top = json!({"includes": [big], "addresses": {}, "groups": {}, "tests": {}, "tasks": {}});
    publisher.put("/top2.json", Answer::Json(200, top.to_string()));
    refused(
        &publisher.url("/top2.json"),
        &format!("includes[0] ({big}): {big}: limit max_config_bytes: larger than 16777216 bytes"),
        Duration::from_secs(10),
    );
}
