//! goodput's runs out to perfSONAR's archives, as a user runs it: an
//! agent forwards real runs of every kind it maps (tcp, iperf3, owamp,
//! twamp, stamp, ping, trace) against a `goodput server` on loopback to
//! a `kind = "pscheduler"` archive, here an HTTP receiver the test
//! starts. Each request is one document, with the agent's address in
//! `x-ps-observer`; each document passes pScheduler's own JSON Schemas
//! for its test type's spec and result (kept in
//! `fixtures/pscheduler-schemas/`), and goodput's pScheduler ingest
//! reads it back with the figures the agent indexed. A kind perfSONAR
//! has no test type for (udp) is not sent, counted and said once.

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::agents::{get_json, pair_head, Agent, Ports};
use common::{free_tcp_port, goodput, Reaped};
use goodput_archive::pscheduler::from_pscheduler;
use goodput_archive::Figures;
use serde_json::Value;

/// One request the receiver got.
#[derive(Debug, Clone)]
struct Request {
    method: String,
    path: String,
    headers: BTreeMap<String, String>,
    body: Value,
}

/// An HTTP receiver in the place of Logstash's HTTP input: records each
/// request and answers 200 (the first `refuse` with 503).
struct Receiver {
    url: String,
    got: Arc<Mutex<Vec<Request>>>,
}

impl Receiver {
    fn start(refuse: usize) -> Self {
        let l = TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let url = format!("http://{}/pscheduler", l.local_addr().unwrap());
        let got = Arc::new(Mutex::new(Vec::new()));
        let g = got.clone();
        std::thread::spawn(move || {
            let mut seen = 0usize;
            for conn in l.incoming() {
                let Ok(mut c) = conn else { return };
                let _ = c.set_read_timeout(Some(Duration::from_secs(5)));
                let mut reader = BufReader::new(c.try_clone().unwrap());
                let mut first = String::new();
                if reader.read_line(&mut first).unwrap_or(0) == 0 {
                    continue;
                }
                let mut parts = first.split_whitespace();
                let method = parts.next().unwrap_or("").to_owned();
                let path = parts.next().unwrap_or("").to_owned();
                let mut headers = BTreeMap::new();
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                        break;
                    }
                    if let Some((k, v)) = line.split_once(':') {
                        headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_owned());
                    }
                }
                let len: usize = headers
                    .get("content-length")
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0);
                let mut body = vec![0u8; len.min(4 << 20)];
                let _ = reader.read_exact(&mut body);
                seen += 1;
                let status = if seen <= refuse {
                    "503 Service Unavailable"
                } else {
                    g.lock().unwrap().push(Request {
                        method,
                        path,
                        headers,
                        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
                    });
                    "200 OK"
                };
                let _ = write!(
                    c,
                    "HTTP/1.1 {status}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                );
            }
        });
        Receiver { url, got }
    }

    fn requests(&self) -> Vec<Request> {
        self.got.lock().unwrap().clone()
    }
}

/// pScheduler's schema `name` (a file of the fixtures), with the shared
/// dictionary in place, as its `json_validate` assembles it.
fn schema(name: &str) -> jsonschema::Validator {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/pscheduler-schemas");
    let read = |f: &str| -> Value {
        serde_json::from_str(&std::fs::read_to_string(format!("{dir}/{f}.json")).unwrap()).unwrap()
    };
    let mut s = read(name);
    s["pScheduler"] = read("dictionary");
    jsonschema::validator_for(&s).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// What `v` says is wrong with `doc`, if anything.
fn errors(v: &jsonschema::Validator, doc: &Value) -> Vec<String> {
    v.iter_errors(doc)
        .map(|e| format!("{e} (at {})", e.instance_path()))
        .collect()
}

/// `a` and `b` agree to `rel` of the larger, or both are absent.
fn same(what: &str, a: Option<f64>, b: Option<f64>, rel: f64, abs: f64) {
    match (a, b) {
        (None, None) => {}
        (Some(x), Some(y)) => assert!(
            (x - y).abs() <= abs + rel * x.abs().max(y.abs()),
            "{what}: {x} read back, {y} measured"
        ),
        _ => panic!("{what}: {a:?} read back, {b:?} measured"),
    }
}

fn figures(v: &Value) -> Figures {
    serde_json::from_value(v.clone()).unwrap()
}

fn mesh(api: u16, server: &Ports, extra_ports: &BTreeMap<&str, u16>, archive: &str, start: &str) -> String {
    let p = |k: &str| extra_ports[k];
    pair_head(api, "127.0.0.2", "127.0.0.3", false)
        + &format!(
            r#"[archives.perfsonar]
url = "{archive}"
kind = "pscheduler"

[tests.tcp]
kind = "tcp"
hosts = ["{{{{dest}}}}:{tcp}"]
duration = "1s"
connections = 2

[tests.iperf3]
kind = "iperf3"
host = "{{{{dest}}}}"
port = {iperf3}
time = "1s"

[tests.owamp]
kind = "owamp"
host = "{{{{dest}}}}"
port = {owamp}
interval = "20ms"
continuous = true
summary_every = 50
duration = "3s"

[tests.twamp]
kind = "twamp"
host = "{{{{dest}}}}"
port = {twamp}
count = 20
interval = "10ms"

[tests.stamp]
kind = "stamp"
host = "{{{{dest}}}}"
port = {stamp}
count = 20
interval = "10ms"

[tests.ping]
kind = "ping"
host = "{{{{dest}}}}"
count = 5
interval = "50ms"

[tests.trace]
kind = "trace"
host = "{{{{dest}}}}"
max_hops = 3

[tests.udp]
kind = "udp"
host = "{{{{dest}}}}:{tcp}"
length = "1s"
bitrate = "1M"

[schedules.once]
repeat = "1d"
start = "{start}"
slip = "PT60S"
max_runs = 1

[tasks.tcp]
group = "ab"
test = "tcp"
schedule = "once"
[tasks.iperf3]
group = "ab"
test = "iperf3"
schedule = "once"
[tasks.owamp]
group = "ab"
test = "owamp"
schedule = "once"
[tasks.twamp]
group = "ab"
test = "twamp"
schedule = "once"
[tasks.stamp]
group = "ab"
test = "stamp"
schedule = "once"
[tasks.ping]
group = "ab"
test = "ping"
schedule = "once"
[tasks.trace]
group = "ab"
test = "trace"
schedule = "once"
[tasks.udp]
group = "ab"
test = "udp"
schedule = "once"
"#,
            tcp = server.beacon,
            iperf3 = p("iperf3"),
            owamp = p("owamp"),
            twamp = p("twamp"),
            stamp = server.stamp,
        )
}

#[test]
fn every_mapped_kind_goes_out_as_pscheduler_sends_it_and_reads_back_the_same() {
    let group = "pscheduler-export";
    // The far end: a goodput server at 127.0.0.3 with every service.
    let server_ports = Ports::pick();
    let more = BTreeMap::from([
        ("iperf3", free_tcp_port()),
        ("owamp", free_tcp_port()),
        ("twamp", free_tcp_port()),
    ]);
    let mut c = goodput();
    c.args(["server", "--listen", "127.0.0.3", "--port"])
        .arg(server_ports.beacon.to_string())
        .args(["--status-interval", "1h", "-v", "1"])
        .args(["--stamp", "--stamp-listen", "127.0.0.3", "--stamp-port"])
        .arg(server_ports.stamp.to_string())
        .args(["--owamp", "--owamp-port"])
        .arg(more["owamp"].to_string())
        .args(["--twamp", "--twamp-port"])
        .arg(more["twamp"].to_string())
        .args(["--ow-twamp-listen", "127.0.0.3"])
        .args(["--iperf3", "--iperf3-port"])
        .arg(more["iperf3"].to_string());
    let _server = Reaped::spawn(c);
    for p in [server_ports.beacon, more["owamp"], more["twamp"], more["iperf3"]] {
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.3", p)).is_err() {
            assert!(Instant::now() < deadline, "the server does not listen on {p}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    // perfSONAR's archive refuses the first two requests: the runs stay
    // queued and go again.
    let receiver = Receiver::start(2);
    let ports = Ports::pick();
    let start = goodput_core::time::ms_rfc3339(common::now_ms() + 3_000);
    let config = common::tmp(group, "mesh.toml");
    std::fs::write(
        &config,
        mesh(ports.api, &server_ports, &more, &receiver.url, &start),
    )
    .unwrap();
    let agent = Agent::start(group, "a", "127.0.0.2", &config, ports, &[]);

    // Every task's run ends, and every document of the mapped ones
    // arrives (owamp's two directions, tcp's one, …), within a bound.
    let want_docs = 8; // tcp, iperf3, owamp ×2, twamp, stamp, ping, trace
    let tasks = ["tcp", "iperf3", "owamp", "twamp", "stamp", "ping", "trace", "udp"];
    let deadline = Instant::now() + Duration::from_secs(90);
    let runs = loop {
        let runs = agent.runs(ports);
        let ended = tasks
            .iter()
            .filter(|t| {
                runs.iter()
                    .any(|r| r["task"] == **t && matches!(r["state"].as_str(), Some("finished" | "failed")))
            })
            .count();
        if ended == tasks.len() && receiver.requests().len() >= want_docs {
            break runs;
        }
        assert!(
            Instant::now() < deadline,
            "not every run ended and went out in 90 s: {} runs {:?}, {} documents; log:\n{}",
            runs.len(),
            runs.iter()
                .map(|r| (r["kind"].clone(), r["state"].clone(), r["reason"].clone()))
                .collect::<Vec<_>>(),
            receiver.requests().len(),
            agent.log_text()
        );
        std::thread::sleep(Duration::from_millis(250));
    };
    // A moment more: nothing further comes (the udp run is not sent).
    std::thread::sleep(Duration::from_secs(2));
    let requests = receiver.requests();
    assert_eq!(
        requests.len(),
        want_docs,
        "one request per document: {requests:#?}"
    );

    let by_id: BTreeMap<String, Value> = runs
        .iter()
        .map(|r| {
            let id = r["id"].as_str().unwrap().to_owned();
            let full = get_json("127.0.0.2", ports.api, &format!("/api/v1/runs/{id}"));
            (id, full)
        })
        .collect();
    for r in by_id.values() {
        assert_eq!(r["state"], "finished", "every run finished: {r:#}");
    }

    let mut kinds_seen: BTreeMap<String, usize> = BTreeMap::new();
    for req in &requests {
        let doc = &req.body;
        assert_eq!(req.method, "POST");
        assert_eq!(req.path, "/pscheduler");
        assert_eq!(
            req.headers.get("content-type").map(String::as_str),
            Some("application/json")
        );
        // perfSONAR's pipeline files the result under this host.
        assert_eq!(
            req.headers.get("x-ps-observer").map(String::as_str),
            Some("127.0.0.2")
        );
        let ty = doc["test"]["type"].as_str().unwrap().to_owned();
        let id = doc["reference"]["goodput"]["run"].as_str().unwrap();
        let run = &by_id[id];
        let kind = run["kind"].as_str().unwrap().to_owned();
        *kinds_seen.entry(kind.clone()).or_insert(0) += 1;
        assert_eq!(doc["tool"]["name"], format!("goodput-{kind}"));
        assert_eq!(doc["participants"][0], "127.0.0.2", "{doc:#}");
        // Where perfSONAR's pipeline reads its ids and times.
        let task_href = doc["task"]["href"].as_str().unwrap();
        let run_href = doc["run"]["href"].as_str().unwrap();
        assert!(
            task_href.starts_with("https://127.0.0.2/pscheduler/tasks/"),
            "{task_href}"
        );
        assert_eq!(
            run_href,
            format!("{task_href}/runs/{}", doc["id"].as_str().unwrap())
        );
        assert!(doc["run"]["start-time"].is_string() && doc["run"]["end-time"].is_string());
        assert!(doc["task"]["detail"]["duration"]
            .as_str()
            .unwrap()
            .starts_with("PT"));

        // pScheduler's own schemas: the result, and the spec.
        let result_errors = errors(&schema(&format!("{ty}-result")), &doc["result"]);
        assert!(
            result_errors.is_empty(),
            "{kind} as {ty}: {result_errors:#?}\n{doc:#}"
        );
        let spec_version = doc["test"]["spec"]["schema"].as_u64().unwrap();
        let spec_errors = errors(
            &schema(&format!("{ty}-spec-v{spec_version}")),
            &doc["test"]["spec"],
        );
        assert!(spec_errors.is_empty(), "{kind} spec: {spec_errors:#?}\n{doc:#}");

        // goodput's own ingest reads it back with the same figures.
        let back = from_pscheduler(doc).unwrap_or_else(|e| panic!("{kind}: {e}\n{doc:#}"));
        assert_eq!(back.test_type, ty);
        let g = back.run.figures;
        let f = figures(&run["figures"]);
        // Each kind's detail is a key of the result document.
        let detail = &run["result"];
        match kind.as_str() {
            "tcp" | "iperf3" => {
                assert_eq!(ty, "throughput");
                let reverse = doc["test"]["spec"]["reverse"] == true;
                if reverse {
                    same(
                        "throughput down",
                        g.throughput_down_bps,
                        f.throughput_down_bps,
                        1e-12,
                        0.0,
                    );
                } else {
                    same(
                        "throughput up",
                        g.throughput_up_bps,
                        f.throughput_up_bps,
                        1e-12,
                        0.0,
                    );
                    same("retransmits", g.retransmits, f.retransmits, 0.0, 0.0);
                    assert!(g.throughput_up_bps.unwrap() > 1e6, "{kind}: a real rate");
                }
            }
            "owamp" => {
                assert_eq!(ty, "latency");
                let to = doc["test"]["spec"]["source"] == "127.0.0.2";
                let way = if to {
                    &detail["owamp"]["to"]
                } else {
                    &detail["owamp"]["from"]
                };
                let (loss, owd) = if to {
                    (f.loss_forward_pct, f.owd_forward_median_us)
                } else {
                    (f.loss_backward_pct, f.owd_backward_median_us)
                };
                same("one-way loss", g.loss_pct, loss, 1e-12, 0.0);
                same("duplicates", g.duplicates, way["duplicates"].as_f64(), 0.0, 0.0);
                same("reordered", g.reordered, way["reordered"].as_f64(), 0.0, 0.0);
                assert_eq!(doc["result"]["packets-sent"], way["sent"]);
                if way["delay"]["synchronized"] == true {
                    // Milliseconds to two decimals: within 10 µs.
                    same("one-way median", g.owd_forward_median_us, owd, 1e-3, 10.0);
                } else {
                    // Clocks not synchronised: no delay goes out as one.
                    assert!(doc["result"].get("histogram-latency").is_none(), "{doc:#}");
                    assert!(doc["result"]["diags"]
                        .as_str()
                        .unwrap()
                        .contains("not synchronised"));
                    assert_eq!(g.owd_forward_median_us, None);
                    assert_eq!(owd, None);
                }
            }
            "twamp" | "stamp" => {
                assert_eq!(ty, "rtt");
                same("loss", g.loss_pct, f.loss_pct, 1e-12, 0.0);
                same("smallest round trip", g.delay_min_us, f.delay_min_us, 0.0, 0.001);
                same("largest round trip", g.delay_max_us, f.delay_max_us, 0.0, 0.001);
                same("duplicates", g.duplicates, f.duplicates, 0.0, 0.0);
                same("reordered", g.reordered, f.reordered, 0.0, 0.0);
                assert!(f.delay_min_us.unwrap() > 0.0);
                if kind == "twamp" {
                    assert_eq!(doc["test"]["spec"]["protocol"], "twamp");
                    assert_eq!(back.run.kind, "twamp", "TWAMP reads back as TWAMP");
                }
            }
            "ping" => {
                assert_eq!(ty, "rtt");
                same("loss", g.loss_pct, f.loss_pct, 1e-12, 0.0);
                same("smallest round trip", g.delay_min_us, f.delay_min_us, 0.0, 0.001);
                same("largest round trip", g.delay_max_us, f.delay_max_us, 0.0, 0.001);
                same("mdev", g.jitter_us, f.jitter_us, 0.0, 0.001);
                same("duplicates", g.duplicates, f.duplicates, 0.0, 0.0);
                // Exact over the round trips, and goodput's HdrHistogram's
                // within 0.1%.
                same(
                    "median round trip",
                    g.delay_median_us,
                    f.delay_median_us,
                    2e-3,
                    1.0,
                );
                assert_eq!(
                    doc["result"]["roundtrips"].as_array().unwrap().len() as u64,
                    detail["ping"]["sent"].as_u64().unwrap()
                );
            }
            "trace" => {
                assert_eq!(ty, "trace");
                same("hops", g.hops, f.hops, 0.0, 0.0);
                assert_eq!(
                    g.path_checksum, f.path_checksum,
                    "the path's checksum read back differs from the one measured"
                );
                assert_eq!(f.hops, Some(1.0), "127.0.0.3 is one hop away");
            }
            other => panic!("a {other} run was sent"),
        }
    }
    assert_eq!(
        kinds_seen,
        BTreeMap::from([
            ("iperf3".to_owned(), 1),
            ("owamp".to_owned(), 2),
            ("ping".to_owned(), 1),
            ("stamp".to_owned(), 1),
            ("tcp".to_owned(), 1),
            ("trace".to_owned(), 1),
            ("twamp".to_owned(), 1),
        ])
    );

    // A wrong field fails pScheduler's schema: the check can fail.
    let tp = requests
        .iter()
        .find(|r| r.body["test"]["type"] == "throughput")
        .unwrap();
    let mut wrong = tp.body["result"].clone();
    wrong["summary"]["summary"]["throughput-bits"] = "fast".into();
    assert!(!errors(&schema("throughput-result"), &wrong).is_empty());
    let mut wrong = tp.body["result"].clone();
    wrong["intervals"] = Value::Null;
    assert!(!errors(&schema("throughput-result"), &wrong).is_empty());

    // The udp run was not sent: counted, and said once.
    let health = get_json("127.0.0.2", ports.api, "/api/v1/health");
    let fwd = health["forwarding"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["url"] == receiver.url.as_str())
        .unwrap_or_else(|| panic!("{health:#}"))
        .clone();
    // The udp run, and the summary rows of the background streams
    // (STAMP's minutes, OWAMP's sessions), which stand beside their runs.
    let parts = runs
        .iter()
        .filter(|r| r["kind"].as_str().unwrap().contains('_'))
        .count();
    assert!(parts >= 1, "the continuous OWAMP stream has its summaries");
    assert_eq!(fwd["not_sent"], 1 + parts as u64, "{fwd:#}");
    assert_eq!(fwd["backlog"], 0, "{fwd:#}");
    assert_eq!(fwd["delivered"], 7, "{fwd:#}");
    // And on /metrics, under the archive's URL.
    let (status, metrics) = common::agents::http("127.0.0.2", ports.api, "GET", "/metrics", None, "");
    assert_eq!(status, 200, "{metrics}");
    let line = format!(
        "goodput_forward_not_sent_total{{archive=\"{}\"}} {}",
        receiver.url,
        1 + parts
    );
    assert!(metrics.lines().any(|l| l == line), "no `{line}` in:\n{metrics}");
    let log = agent.log_text();
    let said: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("are not sent") && l.contains("udp"))
        .collect();
    assert_eq!(said.len(), 1, "{log}");
    assert!(
        said[0].contains("goodput's udp tests have no pScheduler test type"),
        "{log}"
    );
    // The refused requests were retried.
    assert!(log.contains("HTTP 503"), "{log}");
}
