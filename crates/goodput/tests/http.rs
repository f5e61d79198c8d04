//! `goodput http` and `goodput tls` against Debian's nginx, started by
//! the test on loopback with certificates made here: one valid, one that
//! expires in two days, one expired, one for another name, all from a
//! test CA given with --ca. HTTP/1.1 and HTTP/2, a redirect, a slow
//! endpoint (the echo module's echo_sleep), a body past the cap; and
//! curl's phase timings beside goodput's on the same requests.

mod common;

use common::peers::{self, TestCa};
use common::{free_tcp_port, goodput, have, tmp, Reaped};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use time::OffsetDateTime;

/// The certificate cases, each on a port of its own.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Cert {
    Valid,
    Expiring,
    Expired,
    WrongName,
}

const CERTS: [Cert; 4] = [Cert::Valid, Cert::Expiring, Cert::Expired, Cert::WrongName];

struct Nginx {
    _server: peers::Nginx,
    dir: PathBuf,
    plain: u16,
    tls: [u16; 4],
}

impl Nginx {
    fn tls_port(&self, c: Cert) -> u16 {
        self.tls[CERTS.iter().position(|x| *x == c).unwrap()]
    }

    fn ca(&self) -> PathBuf {
        self.dir.join("ca.pem")
    }

    fn https(&self, c: Cert, path: &str) -> String {
        format!("https://localhost:{}{path}", self.tls_port(c))
    }

    fn http(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.plain)
    }
}

/// The test's CA, and a certificate of each case signed by it.
fn write_certs(dir: &Path) {
    let now = OffsetDateTime::now_utc();
    let day = time::Duration::days(1);
    let ca = TestCa::new(dir);
    for c in CERTS {
        let (names, from, until): (&[&str], _, _) = match c {
            Cert::Valid => (&["localhost", "127.0.0.1"], now - day, now + day * 90),
            Cert::Expiring => (&["localhost", "127.0.0.1"], now - day * 30, now + day * 2),
            Cert::Expired => (&["localhost", "127.0.0.1"], now - day * 30, now - day),
            Cert::WrongName => (&["wrong.example"], now - day, now + day * 90),
        };
        ca.issue(&format!("{c:?}"), names, from, until);
    }
}

/// nginx on free loopback ports, its config, logs and pid in a scratch
/// directory; `None` (skipped) when nginx is not installed outside CI.
fn nginx(group: &str) -> Option<Nginx> {
    if !peers::Nginx::available() {
        return None;
    }
    let dir = tmp(group, "nginx");
    std::fs::create_dir_all(dir.join("www")).unwrap();
    write_certs(&dir);
    // A body past any small cap: 2 MiB.
    std::fs::write(dir.join("www/big"), vec![b'x'; 2 << 20]).unwrap();
    let plain = free_tcp_port();
    let tls = [free_tcp_port(), free_tcp_port(), free_tcp_port(), free_tcp_port()];
    let d = dir.display();
    let locations = format!(
        r#"
        location = /hello {{ default_type text/plain; return 200 "hello world\n"; }}
        location = /json {{ default_type application/json; return 200 '{{"status":"ok","n":3}}'; }}
        location = /redirect {{ return 302 /hello; }}
        location = /loop {{ return 302 /loop; }}
        location = /slow {{ default_type text/plain; echo_sleep 0.3; echo "slow"; }}
        location = /missing {{ return 404; }}
        location /big {{ root {d}/www; }}
        "#
    );
    let mut servers = format!("server {{ listen 127.0.0.1:{plain}; {locations} }}\n");
    for (c, port) in CERTS.iter().zip(tls) {
        servers.push_str(&format!(
            "server {{ listen 127.0.0.1:{port} ssl http2; ssl_protocols TLSv1.2 TLSv1.3; ssl_certificate {d}/{c:?}.pem; \
             ssl_certificate_key {d}/{c:?}.key; {locations} }}\n"
        ));
    }
    let mut ports = vec![plain];
    ports.extend(tls);
    let server = peers::Nginx::start(&dir, &[peers::NGINX_ECHO_MODULE], &servers, &ports);
    Some(Nginx {
        _server: server,
        dir,
        plain,
        tls,
    })
}

/// Runs goodput with `args` and `--json`; the exit code, the console
/// text and the result document.
fn run(group: &str, args: &[&str]) -> (Option<i32>, String, serde_json::Value) {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let json = tmp(group, &format!("r{}.json", N.fetch_add(1, Ordering::Relaxed)));
    let mut cmd = goodput();
    cmd.args(args).arg("--json").arg(&json);
    let child = Reaped::spawn(cmd);
    let (code, out, err) = child.wait(Duration::from_secs(30));
    let doc = std::fs::read_to_string(&json)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(serde_json::Value::Null);
    (code, format!("{out}{err}"), doc)
}

fn hop(doc: &serde_json::Value, ex: usize, hop: usize) -> &serde_json::Value {
    &doc["http"]["exchanges"][ex]["hops"][hop]
}

#[test]
fn each_certificate_gives_its_facts_and_verdict() {
    let Some(n) = nginx("http-certs") else { return };
    let ca = n.ca().display().to_string();
    let resolve = "localhost:127.0.0.1";

    // Valid: HTTP/2 by ALPN, TLS 1.3, the leaf's names and about 90 days.
    let (code, out, doc) = run(
        "http-certs",
        &[
            "http",
            &n.https(Cert::Valid, "/hello"),
            "--ca",
            &ca,
            "--resolve",
            resolve,
            "--expect-body",
            "hello",
        ],
    );
    assert_eq!(code, Some(0), "{out}");
    let h = hop(&doc, 0, 0);
    assert_eq!(h["status"], 200, "{doc}");
    assert_eq!(h["version"], "HTTP/2");
    assert_eq!(h["body_bytes"], 12);
    let tls = &h["tls"];
    assert_eq!(tls["chain_valid"], true, "{tls}");
    assert_eq!(tls["protocol"], "TLSv1.3");
    assert_eq!(tls["alpn"], "h2");
    assert_eq!(tls["chain_length"], 1);
    assert!(
        tls["names"].as_array().unwrap().iter().any(|x| x == "localhost"),
        "{tls}"
    );
    assert!(tls["subject"].as_str().unwrap().contains("localhost"), "{tls}");
    assert!(
        tls["issuer"].as_str().unwrap().contains("goodput test CA"),
        "{tls}"
    );
    let days = tls["days_left"].as_f64().unwrap();
    assert!((89.0..=90.1).contains(&days), "{days}");
    for k in ["dns_ms", "first_byte_ms", "transfer_ms"] {
        assert!(h.get(k).is_none() || h[k].as_f64().unwrap() >= 0.0, "{k}: {h}");
    }
    assert!(
        h["connect_ms"].as_f64().unwrap() > 0.0 && h["tls_ms"].as_f64().unwrap() > 0.0,
        "{h}"
    );
    assert!(h.get("dns_ms").is_none(), "--resolve makes no lookup: {h}");

    // Expiring in two days: valid, and `goodput tls --min-days 7` fails
    // its assertion (exit 4) while --min-days 1 passes.
    let target = format!("127.0.0.1:{}", n.tls_port(Cert::Expiring));
    let (code, out, doc) = run(
        "http-certs",
        &[
            "tls",
            &target,
            "--sni",
            "localhost",
            "--ca",
            &ca,
            "--min-days",
            "7",
        ],
    );
    assert_eq!(code, Some(4), "{out}");
    let f = &doc["tls"]["facts"];
    assert_eq!(f["chain_valid"], true, "{doc}");
    let days = f["days_left"].as_f64().unwrap();
    assert!((1.9..=2.01).contains(&days), "{days}");
    assert_eq!(doc["assertions"][0]["passed"], false, "{doc}");
    let (code, out, _) = run(
        "http-certs",
        &[
            "tls",
            &target,
            "--sni",
            "localhost",
            "--ca",
            &ca,
            "--min-days",
            "1",
        ],
    );
    assert_eq!(code, Some(0), "{out}");

    // Expired: the facts still read, the verdict in words, exit 1; http
    // sends nothing over it.
    let target = format!("127.0.0.1:{}", n.tls_port(Cert::Expired));
    let (code, out, doc) = run("http-certs", &["tls", &target, "--sni", "localhost", "--ca", &ca]);
    assert_eq!(code, Some(1), "{out}");
    let f = &doc["tls"]["facts"];
    assert_eq!(f["chain_valid"], false);
    assert_eq!(f["verify_error"], "the certificate has expired", "{f}");
    assert!(f["days_left"].as_f64().unwrap() < -0.9, "{f}");
    let (code, out, doc) = run(
        "http-certs",
        &[
            "http",
            &n.https(Cert::Expired, "/hello"),
            "--ca",
            &ca,
            "--resolve",
            resolve,
        ],
    );
    assert_eq!(code, Some(1), "{out}");
    let h = hop(&doc, 0, 0);
    assert!(h.get("status").is_none(), "{h}");
    assert!(
        h["error"]
            .as_str()
            .unwrap()
            .contains("certificate verification failed: the certificate has expired"),
        "{h}"
    );
    assert!(out.contains("the certificate has expired"), "{out}");

    // The wrong name: refused, unless --insecure.
    let (code, out, doc) = run(
        "http-certs",
        &[
            "http",
            &n.https(Cert::WrongName, "/hello"),
            "--ca",
            &ca,
            "--resolve",
            resolve,
        ],
    );
    assert_eq!(code, Some(1), "{out}");
    assert!(
        hop(&doc, 0, 0)["error"]
            .as_str()
            .unwrap()
            .contains("not valid for the name localhost"),
        "{doc}"
    );
    let (code, out, doc) = run(
        "http-certs",
        &[
            "http",
            &n.https(Cert::WrongName, "/hello"),
            "--ca",
            &ca,
            "--resolve",
            resolve,
            "--insecure",
        ],
    );
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(hop(&doc, 0, 0)["tls"]["chain_valid"], false);
    assert_eq!(hop(&doc, 0, 0)["status"], 200);

    // No --ca: the test CA is not among the system's roots.
    let (code, out, _) = run(
        "http-certs",
        &[
            "tls",
            &format!("127.0.0.1:{}", n.tls_port(Cert::Valid)),
            "--sni",
            "localhost",
        ],
    );
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("issuer is not trusted"), "{out}");
}

#[test]
fn versions_redirects_slow_answers_and_the_cap() {
    let Some(n) = nginx("http-paths") else { return };
    let ca = n.ca().display().to_string();
    let resolve = "localhost:127.0.0.1";
    let url = n.https(Cert::Valid, "/hello");

    // --http1 over TLS, and plain HTTP/1.1.
    let (code, out, doc) = run(
        "http-paths",
        &["http", &url, "--ca", &ca, "--resolve", resolve, "--http1"],
    );
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(hop(&doc, 0, 0)["version"], "HTTP/1.1");
    assert_eq!(hop(&doc, 0, 0)["tls"]["alpn"], "http/1.1");
    let (code, out, doc) = run(
        "http-paths",
        &[
            "http",
            &n.http("/json"),
            "--expect-json",
            ".status == \"ok\" and .n == 3",
        ],
    );
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(hop(&doc, 0, 0)["version"], "HTTP/1.1");
    assert!(hop(&doc, 0, 0).get("tls").is_none());
    // A JSON check that does not hold: exit 4, the reason said.
    let (code, out, doc) = run(
        "http-paths",
        &["http", &n.http("/json"), "--expect-json", ".n == 4"],
    );
    assert_eq!(code, Some(4), "{out}");
    assert!(
        doc["http"]["exchanges"][0]["mismatch"]
            .as_str()
            .unwrap()
            .contains("false or null"),
        "{doc}"
    );

    // A redirect: not followed, it is the answer (outside 200-299);
    // followed, two hops, each timed.
    let (code, out, doc) = run("http-paths", &["http", &n.http("/redirect")]);
    assert_eq!(code, Some(4), "{out}");
    assert_eq!(hop(&doc, 0, 0)["status"], 302);
    let (code, out, doc) = run(
        "http-paths",
        &[
            "http",
            &n.http("/redirect"),
            "--follow",
            "3",
            "--assert",
            "redirects == 1",
        ],
    );
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(hop(&doc, 0, 0)["status"], 302);
    assert_eq!(hop(&doc, 0, 1)["status"], 200);
    assert!(hop(&doc, 0, 1)["url"].as_str().unwrap().ends_with("/hello"));
    assert!(hop(&doc, 0, 1)["connect_ms"].as_f64().unwrap() > 0.0);
    // A redirect loop stops at --follow.
    let (code, out, doc) = run("http-paths", &["http", &n.http("/loop"), "--follow", "2"]);
    assert_eq!(code, Some(4), "{out}");
    assert_eq!(doc["http"]["exchanges"][0]["hops"].as_array().unwrap().len(), 3);

    // A slow answer: its 300 ms show in first byte + transfer; a
    // shorter --timeout ends it with the phase named.
    let (code, out, doc) = run("http-paths", &["http", &n.http("/slow"), "--http1"]);
    assert_eq!(code, Some(0), "{out}");
    let h = hop(&doc, 0, 0);
    let waited = h["first_byte_ms"].as_f64().unwrap() + h["transfer_ms"].as_f64().unwrap();
    assert!(waited >= 290.0, "{h}");
    let (code, out, doc) = run("http-paths", &["http", &n.http("/slow"), "--timeout", "100ms"]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        hop(&doc, 0, 0)["error"]
            .as_str()
            .unwrap()
            .contains("timed out during"),
        "{doc}"
    );

    // A body past the cap is cut there and said so.
    let (code, out, doc) = run(
        "http-paths",
        &[
            "http",
            &n.https(Cert::Valid, "/big"),
            "--ca",
            &ca,
            "--resolve",
            resolve,
            "--max-body",
            "64KiB",
        ],
    );
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(hop(&doc, 0, 0)["body_bytes"], 65536, "{doc}");
    assert_eq!(hop(&doc, 0, 0)["cut"], true);
    assert!(out.contains("cut at `max_body`"), "{out}");
    let (code, _, doc) = run("http-paths", &["http", &n.http("/big")]);
    assert_eq!(code, Some(0));
    assert_eq!(hop(&doc, 0, 0)["body_bytes"], 2 << 20);
    assert!(hop(&doc, 0, 0).get("cut").is_none());

    // --count: every request kept; a 404 outside the range.
    let (code, out, doc) = run(
        "http-paths",
        &["http", &n.http("/missing"), "--count", "3", "--interval", "50ms"],
    );
    assert_eq!(code, Some(4), "{out}");
    assert_eq!(doc["http"]["exchanges"].as_array().unwrap().len(), 3);
    assert_eq!(doc["http"]["completed"], 3);
    assert_eq!(doc["http"]["matched"], 0);
    let (code, out, _) = run(
        "http-paths",
        &["http", &n.http("/missing"), "--expect-status", "404"],
    );
    assert_eq!(code, Some(0), "{out}");
}

/// curl's phase times, in ms, and its status and size.
fn curl(url: &str, extra: &[&str]) -> Option<(u16, u64, [f64; 5])> {
    let out = Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-w"])
        .arg("%{http_code} %{size_download} %{time_namelookup} %{time_connect} %{time_appconnect} %{time_starttransfer} %{time_total}")
        .args(extra)
        .arg(url)
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let v: Vec<&str> = text.split_whitespace().collect();
    let t = |i: usize| v[i].parse::<f64>().unwrap() * 1e3;
    Some((
        v[0].parse().ok()?,
        v[1].parse().ok()?,
        [t(2), t(3), t(4), t(5), t(6)],
    ))
}

#[test]
fn curl_and_goodput_time_the_same_requests() {
    if !have("curl", &["--version"], "apt-get install curl") {
        return;
    }
    let Some(n) = nginx("http-curl") else { return };
    let ca = n.ca().display().to_string();
    let port = n.tls_port(Cert::Valid);
    let resolve_curl = format!("localhost:{port}:127.0.0.1");
    for (url, tls) in [(n.http("/big"), false), (n.https(Cert::Valid, "/big"), true)] {
        let extra: Vec<&str> = if tls {
            vec!["--cacert", &ca, "--resolve", &resolve_curl, "--http1.1"]
        } else {
            vec![]
        };
        let (status, size, times) = curl(&url, &extra).expect("curl ran");
        let mut args = vec!["http", url.as_str(), "--http1"];
        if tls {
            args.extend(["--ca", &ca, "--resolve", "localhost:127.0.0.1"]);
        }
        let (code, out, doc) = run("http-curl", &args);
        assert_eq!(code, Some(0), "{out}");
        let h = hop(&doc, 0, 0);
        assert_eq!(h["status"], status);
        assert_eq!(h["body_bytes"], size);
        let ms = |k: &str| h[k].as_f64().unwrap_or(0.0);
        // curl's times are cumulative from the start; goodput's per phase.
        eprintln!(
            "{url}: curl namelookup {:.3} connect {:.3} appconnect {:.3} starttransfer {:.3} total {:.3} ms; \
             goodput dns {:.3} connect {:.3} tls {:.3} first byte {:.3} transfer {:.3} total {:.3} ms",
            times[0],
            times[1],
            times[2],
            times[3],
            times[4],
            ms("dns_ms"),
            ms("connect_ms"),
            ms("tls_ms"),
            ms("first_byte_ms"),
            ms("transfer_ms"),
            doc["http"]["exchanges"][0]["total_ms"].as_f64().unwrap()
        );
    }
}

#[test]
fn mesh_http_and_tls_tasks_run_and_are_archived() {
    use common::agents::{get_json, state, Agent, Ports};
    let Some(n) = nginx("http-mesh") else { return };
    let ports = Ports::pick();
    let port = n.tls_port(Cert::Valid);
    let ca = n.ca().display().to_string();
    // The agent at 127.0.0.9; the web server at 127.0.0.1 runs no agent.
    let config = format!(
        r#"[agent]
api_port = {api}

[addresses.a]
address = "127.0.0.9"
[addresses.web]
address = "127.0.0.1"
no_agent = true

[groups.ab]
type = "disjoint"
a = ["a"]
b = ["web"]
unidirectional = true

[tests.page]
kind = "http"
url = "https://{{{{dest}}}}:{port}/hello"
ca = "{ca}"
expect_body = "hello"

[tests.cert]
kind = "tls"
host = "{{{{dest}}}}:{port}"
ca = "{ca}"
assert = ["cert_days_left >= 30"]

[schedules.often]
repeat = "PT2S"

[tasks.page]
group = "ab"
test = "page"
schedule = "often"

[tasks.cert]
group = "ab"
test = "cert"
schedule = "often"

[alerts]
every = "1s"
hold = 1

# A certificate expiring within 100 days: the test's expires in 90.
[alerts.rules.cert]
metric = "certificate"
window = "1h"
statistic = "last"
warning = "100:"
critical = "7:"
"#,
        api = ports.api
    );
    let file = tmp("http-mesh", "mesh.toml");
    std::fs::write(&file, config).unwrap();
    let _a = Agent::start("http-mesh", "a", "127.0.0.9", &file, ports, &[]);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let (mut page, mut cert) = (None, None);
    while (page.is_none() || cert.is_none()) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(300));
        let runs = get_json("127.0.0.9", ports.api, "/api/v1/runs?limit=100");
        for r in runs.as_array().unwrap() {
            let id = r["id"].as_str().unwrap_or("");
            if state(r) != "finished" {
                continue;
            }
            if id.starts_with("page/") && page.is_none() {
                page = Some(id.to_owned());
            }
            if id.starts_with("cert/") && cert.is_none() {
                cert = Some(id.to_owned());
            }
        }
    }
    let (page, cert) = (
        page.expect("an http run finished"),
        cert.expect("a tls run finished"),
    );
    let doc = get_json("127.0.0.9", ports.api, &format!("/api/v1/runs/{page}"));
    let text = doc.to_string();
    assert!(text.contains("\"chain_valid\":true"), "{text}");
    assert!(text.contains("\"status\":200"), "{text}");
    assert!(text.contains("\"matched\":1"), "{text}");
    let doc = get_json("127.0.0.9", ports.api, &format!("/api/v1/runs/{cert}"));
    let text = doc.to_string();
    assert!(text.contains("\"protocol\":\"TLSv1.3\""), "{text}");
    assert!(text.contains("\"expression\":\"cert_days_left >= 30\""), "{text}");
    assert!(text.contains("\"passed\":true"), "{text}");

    // The days left are a series: /metrics exports them and the
    // request's time, goodput check reads them, and the alert rule on
    // the certificate family opens a warning (90 days, under 100).
    let (status, metrics) = common::agents::http("127.0.0.9", ports.api, "GET", "/metrics", None, "");
    assert_eq!(status, 200);
    let days = metrics
        .lines()
        .find(|l| l.starts_with("goodput_cert_days_left{"))
        .unwrap_or_else(|| panic!("no goodput_cert_days_left in:\n{metrics}"));
    let v: f64 = days.rsplit(' ').next().unwrap().parse().unwrap();
    assert!((89.0..=90.1).contains(&v), "{days}");
    assert!(metrics.contains("goodput_http_total_seconds{"), "{metrics}");
    // The pair page charts them.
    let (status, page) = common::agents::http(
        "127.0.0.9",
        ports.api,
        "GET",
        "/ui/pair?source=a&dest=web",
        None,
        "",
    );
    assert_eq!(status, 200, "{page}");
    assert!(page.contains("Days until the certificate expires"), "{page}");
    assert!(page.contains("HTTP request time"), "{page}");
    let url = format!("http://127.0.0.9:{}", ports.api);
    let (code, out, err) = common::run(&[
        "check",
        "-H",
        &url,
        "-s",
        "a",
        "-d",
        "web",
        "-m",
        "cert_days_left",
        "-w",
        "100:",
        "-c",
        "7:",
    ]);
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(
        out.starts_with("GOODPUT CERT_DAYS_LEFT WARNING - cert_days_left 89."),
        "{out}"
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let open = get_json("127.0.0.9", ports.api, "/api/v1/alerts");
        let found = open
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["metric"] == "certificate")
            .cloned();
        if let Some(a) = found {
            assert_eq!(a["severity"], "warning", "{a}");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no certificate alert: {open}"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}
