//! A fleet: agents on loopback addresses forward every run that ends to
//! two archive processes (`goodput agent --role archive`) on one real
//! PostgreSQL (a throwaway cluster made with initdb). The archives are
//! stopped while the agents keep testing, then the database itself is cut
//! and restarted; every run each agent holds must arrive exactly once,
//! the queues must drain, and a wrong token must be refused with the
//! reason on both ends.

mod common;
#[path = "../../goodput-archive/tests/pg/mod.rs"]
mod pg;

use common::agents::{get_json, http, mesh_config, Agent, Ports, TOKEN};
use common::{free_tcp_port, goodput, tmp, Reaped};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::net::TcpStream;
use std::process::Stdio;
use std::time::{Duration, Instant};

/// A fleet archive process: plain HTTP on `127.0.0.1:port`, and HTTPS on
/// `tls_port` when given; with the fingerprint of its certificate.
fn archive_tls(
    group: &str,
    name: &str,
    db: &str,
    config: &std::path::Path,
    port: u16,
    tls_port: Option<u16>,
) -> (Reaped, String) {
    archive_at(group, name, db, config, ("127.0.0.1", port, tls_port), &[])
}

/// The same on address `ip` (HTTP on `port`, HTTPS on `tls_port`), with
/// `extra` flags.
fn archive_at(
    group: &str,
    name: &str,
    db: &str,
    config: &std::path::Path,
    (ip, port, tls_port): (&str, u16, Option<u16>),
    extra: &[&str],
) -> (Reaped, String) {
    let token = tmp(group, "token");
    std::fs::write(&token, TOKEN).unwrap();
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(tmp(group, &format!("{name}.log")))
        .unwrap();
    let state = tmp(group, &format!("{name}-state.sqlite"));
    // The certificate it will serve, made now (and kept beside --archive).
    let out = goodput()
        .args(["agent", "--print-fingerprint", "--archive"])
        .arg(&state)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let pin = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let mut cmd = goodput();
    cmd.args(["agent", "--role", "archive", "--database", db, "--config"])
        .arg(config)
        .args(["--plain-api-listen", &format!("{ip}:{port}")])
        .args(tls_port.map(|p| format!("--api-listen={ip}:{p}")))
        .arg("--archive")
        .arg(&state)
        .arg("--token-file")
        .arg(&token)
        .arg("--no-beacon")
        .args(extra)
        .stdout(Stdio::null())
        .stderr(log);
    common::limit_address_space(&mut cmd, common::SERVER_ADDRESS_SPACE);
    let child = Reaped::spawn_as_is(cmd);
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect((ip, port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "archive {name} did not start: {}",
            std::fs::read_to_string(tmp(group, &format!("{name}.log"))).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    (child, pin)
}

/// A fleet archive on plain HTTP only.
fn archive(group: &str, name: &str, db: &str, config: &std::path::Path, port: u16) -> Reaped {
    archive_tls(group, name, db, config, port, None).0
}

/// Each forwarding target's queue length on an agent.
fn backlogs(a: &Agent, ports: Ports) -> Vec<(String, u64, Option<String>)> {
    let h = get_json(&a.ip, ports.api, "/api/v1/health");
    h["forwarding"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["url"].as_str().unwrap().to_owned(),
                f["backlog"].as_u64().unwrap(),
                f["last_error"].as_str().map(str::to_owned),
            )
        })
        .collect()
}

/// Ended runs by id (state), as an agent holds them.
fn ended(a: &Agent, ports: Ports) -> BTreeMap<String, String> {
    a.runs(ports)
        .iter()
        .filter(|r| !["scheduled", "running"].contains(&r["state"].as_str().unwrap_or("")))
        .map(|r| {
            (
                r["id"].as_str().unwrap().to_owned(),
                r["state"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// Waits until every agent's queues are empty.
fn drained(agents: &[Agent], ports: Ports, limit: Duration) {
    let deadline = Instant::now() + limit;
    loop {
        let all: Vec<_> = agents
            .iter()
            .map(|a| (a.name.clone(), backlogs(a, ports)))
            .collect();
        if all.iter().all(|(_, b)| b.iter().all(|(_, n, _)| *n == 0)) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the queues did not drain: {all:?}\n{}",
            agents.iter().map(|a| a.log_text()).collect::<Vec<_>>().join("\n")
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[test]
fn every_run_reaches_the_fleet_archive_exactly_once_through_outages() {
    let Some(cluster) = pg::Cluster::start() else {
        return;
    };
    let db = cluster.database("fleet");
    let group = "fleet";
    let ports = Ports::pick();
    let names = ["a", "b", "c"];
    let ips = ["127.0.0.2", "127.0.0.3", "127.0.0.4"];
    let config = mesh_config(group, &names, &ips, ports, 6, 3, "");
    let (p1, p2) = (free_tcp_port(), free_tcp_port());
    let mut one = Some(archive(group, "archive-1", &db, &config, p1));
    // The second archive also serves HTTPS; a reaches it there, pinning
    // its certificate.
    let p2s = free_tcp_port();
    let (two, pin2) = archive_tls(group, "archive-2", &db, &config, p2, Some(p2s));
    let to1 = format!("http://127.0.0.1:{p1}");
    let to2 = format!("https://127.0.0.1:{p2s}#{pin2}");
    // a forwards to both archives: each of its runs is posted twice, to
    // two processes on one database, interleaved (to the second over
    // HTTPS).
    let agents: Vec<Agent> = names
        .iter()
        .zip(ips)
        .map(|(n, ip)| {
            let mut extra = vec!["--forward-to", to1.as_str()];
            if *n == "a" {
                extra.extend(["--forward-to", to2.as_str()]);
            }
            Agent::start(group, n, ip, &config, ports, &extra)
        })
        .collect();
    std::thread::sleep(Duration::from_secs(20));
    let h = get_json("127.0.0.1", p1, "/api/v1/health");
    assert_eq!(
        (h["role"].as_str(), h["archive_engine"].as_str()),
        (Some("archive"), Some("postgres"))
    );
    assert!(h["counters"]["ingested"].as_u64().unwrap() > 0, "{h}");

    // The first archive stops; the agents keep testing and queue.
    one.take().unwrap().stop(libc::SIGTERM);
    std::thread::sleep(Duration::from_secs(20));
    for a in &agents {
        let q = backlogs(a, ports);
        let mine = q.iter().find(|(u, _, _)| *u == to1).unwrap();
        assert!(
            mine.1 > 0,
            "agent {}: nothing queued while the archive was down: {q:?}",
            a.name
        );
        assert!(
            mine.2.as_deref().is_some_and(|e| e.contains("connect")),
            "agent {}: no reason given: {q:?}",
            a.name
        );
    }
    let metrics = http(ips[0], ports.api, "GET", "/metrics", None, "").1;
    let age_line = metrics
        .lines()
        .find(|l| {
            l.starts_with(&format!(
                "goodput_forward_backlog_age_seconds{{archive=\"{to1}\"}}"
            ))
        })
        .unwrap_or_else(|| panic!("no backlog age in /metrics:\n{metrics}"));
    let age: f64 = age_line.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(age > 5.0, "{age_line}");

    // Back; then the database itself is cut for 8 s, mid-batch or not.
    let one = archive(group, "archive-1", &db, &config, p1);
    std::thread::sleep(Duration::from_secs(4));
    cluster.stop();
    std::thread::sleep(Duration::from_secs(8));
    cluster.restart();
    drained(&agents, ports, Duration::from_secs(120));

    // What each agent holds now, then every queue empty again: each of
    // those runs is in the archive, once, and nothing else is.
    let before: Vec<BTreeMap<String, String>> = agents.iter().map(|a| ended(a, ports)).collect();
    drained(&agents, ports, Duration::from_secs(60));
    // The agents keep testing: the rows counted before and after the list
    // bound it.
    let rows_before: usize = cluster
        .psql("fleet", "SELECT COUNT(*) FROM runs")
        .parse()
        .unwrap();
    let stored = get_json("127.0.0.1", p2, "/api/v1/runs?limit=100000");
    let stored: BTreeMap<String, String> = stored
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["id"].as_str().unwrap().to_owned(),
                r["state"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let dupes = cluster.psql(
        "fleet",
        "SELECT COUNT(*) FROM (SELECT id FROM runs GROUP BY id HAVING COUNT(*) > 1) d",
    );
    assert_eq!(dupes, "0", "runs stored twice");
    let rows_after: usize = cluster
        .psql("fleet", "SELECT COUNT(*) FROM runs")
        .parse()
        .unwrap();
    assert!(
        (rows_before..=rows_after).contains(&stored.len()),
        "the API lists {} runs, the database held {rows_before} then {rows_after}",
        stored.len()
    );
    let after: Vec<BTreeMap<String, String>> = agents.iter().map(|a| ended(a, ports)).collect();
    let mut held = BTreeSet::new();
    for ((a, b), ag) in before.iter().zip(&after).zip(&agents) {
        for (id, st) in a {
            assert!(
                stored.contains_key(id),
                "agent {}: run {id} ({st}) never reached the archive",
                ag.name
            );
            // The source's record is the one its test wrote.
            if id.split('/').nth(1) == Some(ag.name.as_str()) && st == "finished" {
                assert_eq!(stored[id], "finished", "run {id}");
            }
        }
        held.extend(b.keys().cloned());
    }
    let strays: Vec<&String> = stored.keys().filter(|id| !held.contains(*id)).collect();
    assert!(
        strays.is_empty(),
        "the archive holds runs no agent has: {strays:?}"
    );
    let total: usize = before.iter().map(BTreeMap::len).sum();
    assert!(total > 20, "only {total} runs ended on the agents");
    // The fleet archive answers for the whole mesh: series, grid.
    let series = get_json(
        "127.0.0.1",
        p1,
        "/api/v1/series?source=b&dest=c&kind=stamp&metric=delay_median",
    );
    assert!(!series["points"].as_array().unwrap().is_empty(), "{series}");
    let grid = get_json("127.0.0.1", p2, "/api/v1/grid?metric=delay");
    let cells = grid["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 6, "{grid}");
    assert_eq!(
        grid["agents"].as_array().unwrap().len(),
        1,
        "the archive asks no agent: {grid}"
    );
    eprintln!(
        "{total} runs held by the agents, {} stored once each; the agents' logs:\n{}",
        stored.len(),
        agents[0]
            .log_text()
            .lines()
            .filter(|l| l.contains("forward"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    drop(one);
    drop(two);
}

#[test]
fn a_wrong_token_is_refused_and_both_ends_say_why() {
    let Some(cluster) = pg::Cluster::start() else {
        return;
    };
    let db = cluster.database("fleet");
    let group = "fleet-token";
    let ports = Ports::pick();
    let config = mesh_config(group, &["a", "b"], &["127.0.0.2", "127.0.0.3"], ports, 2, 1, "");
    let port = free_tcp_port();
    let _archive = archive(group, "archive", &db, &config, port);
    // Straight to the archive: no token, a wrong one, junk.
    let (status, body) = http(
        "127.0.0.1",
        port,
        "POST",
        "/api/v1/archive/runs",
        None,
        "{\"runs\":[]}",
    );
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("token"), "{body}");
    let (status, body) = http(
        "127.0.0.1",
        port,
        "POST",
        "/api/v1/archive/runs",
        Some(TOKEN),
        "{\"runs\":[{\"id\":\"x\"}]}",
    );
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["stored"], 0);
    assert_eq!(v["refused"][0]["id"], "x");
    assert!(
        v["refused"][0]["reason"].as_str().unwrap().contains("not a run"),
        "{body}"
    );
    let (status, body) = http(
        "127.0.0.1",
        port,
        "POST",
        "/api/v1/archive/runs",
        Some(TOKEN),
        "not json",
    );
    assert_eq!(status, 400, "{body}");
    // A NUL byte, which PostgreSQL's text cannot hold (bench/fuzz_api.sh
    // found it as a 500): refused with the reason, in a query and in a
    // pScheduler result.
    let (status, body) = http(
        "127.0.0.1",
        port,
        "GET",
        "/api/v1/series?key=a%00b&metric=loss",
        None,
        "",
    );
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("NUL"), "{body}");
    let mut nul: Value = serde_json::from_str(&ps_fixture("latencybg")).unwrap();
    nul["id"] = Value::from("a\u{0}b");
    let (status, body) = http(
        "127.0.0.1",
        port,
        "PUT",
        "/api/v1/archive/pscheduler",
        Some(TOKEN),
        &serde_json::to_string(&nul).unwrap(),
    );
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("NUL"), "{body}");
    let mut run: Value = serde_json::from_str(
        &std::fs::read_to_string(format!(
            "{}/../goodput-archive/tests/fixtures/stamp.json",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap(),
    )
    .unwrap();
    run = serde_json::json!({"id": "x\u{0}", "task": "t", "source": "a", "dest": "b", "kind": "stamp",
        "class": "normal", "state": "finished", "reason": null, "scheduled_ms": 0, "start_ms": 0, "end_ms": 1,
        "measurement_key": "", "spec": run["spec"], "result": run, "figures": {}});
    let (status, body) = http(
        "127.0.0.1",
        port,
        "POST",
        "/api/v1/archive/runs",
        Some(TOKEN),
        &serde_json::json!({ "runs": [run] }).to_string(),
    );
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("NUL") && body.contains("\"stored\":0"), "{body}");

    // An agent with another token: its runs stay queued and it says why.
    let wrong = tmp(group, "wrong-token");
    std::fs::write(&wrong, "another-token-0123456789").unwrap();
    let log = tmp(group, "a.log");
    let mut cmd = goodput();
    cmd.args(["agent", "--config"])
        .arg(&config)
        .args(["--as", "a", "--archive"])
        .arg(tmp(group, "a.sqlite"))
        .arg("--token-file")
        .arg(&wrong)
        .args(["--beacon-port", &ports.beacon.to_string()])
        .args(["--stamp-port", &ports.stamp.to_string()])
        .args(["--forward-to", &format!("http://127.0.0.1:{port}")])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap());
    let _agent = Reaped::spawn_as_is(cmd);
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains("HTTP 401") && text.contains("wrong token") {
            break;
        }
        assert!(Instant::now() < deadline, "the agent did not say why:\n{text}");
        std::thread::sleep(Duration::from_millis(300));
    }
    let h = get_json("127.0.0.2", ports.api, "/api/v1/health");
    let f = &h["forwarding"][0];
    assert!(f["backlog"].as_u64().unwrap() > 0, "{h}");
    assert_eq!(f["delivered"], 0, "{h}");
    assert!(f["last_error"].as_str().unwrap().contains("401"), "{h}");
    assert_eq!(cluster.psql("fleet", "SELECT COUNT(*) FROM runs"), "0");
}

/// A pSConfig template of three hosts and the four test types, as an
/// existing perfSONAR mesh would have it.
const TEMPLATE: &str = r#"{
  "addresses": {
    "site-a": {"address": "10.81.1.1"},
    "site-b": {"address": "10.81.1.2"},
    "site-c": {"address": "10.81.1.3"}
  },
  "groups": {"core": {"type": "mesh", "addresses": [{"name": "site-a"}, {"name": "site-b"}, {"name": "site-c"}]}},
  "tests": {
    "throughput": {"type": "throughput", "spec": {"source": "{% address[0] %}", "dest": "{% address[1] %}", "duration": "PT10S", "parallel": 2}},
    "latencybg": {"type": "latencybg", "spec": {"source": "{% address[0] %}", "dest": "{% address[1] %}", "packet-interval": 0.1, "packet-count": 600}},
    "rtt": {"type": "rtt", "spec": {"source": "{% address[0] %}", "dest": "{% address[1] %}", "count": 5, "interval": "PT1S"}},
    "trace": {"type": "trace", "spec": {"source": "{% address[0] %}", "dest": "{% address[1] %}", "probe-type": "icmp"}}
  },
  "schedules": {"hourly": {"repeat": "PT1H"}, "often": {"repeat": "PT10M"}},
  "tasks": {
    "core-throughput": {"group": "core", "test": "throughput", "schedule": "hourly"},
    "core-latencybg": {"group": "core", "test": "latencybg"},
    "core-rtt": {"group": "core", "test": "rtt", "schedule": "often"},
    "core-trace": {"group": "core", "test": "trace", "schedule": "hourly"}
  }
}"#;

fn ps_fixture(name: &str) -> String {
    std::fs::read_to_string(format!(
        "{}/../goodput-archive/tests/fixtures/pscheduler/{name}.json",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

#[test]
fn a_perfsonar_mesh_archives_its_results_here_as_its_configured_tasks() {
    let Some(cluster) = pg::Cluster::start() else {
        return;
    };
    let db = cluster.database("fleet");
    let group = "fleet-pscheduler";
    // The mesh, from the same template the perfSONAR hosts run.
    let template = tmp(group, "template.json");
    std::fs::write(&template, TEMPLATE).unwrap();
    let config = tmp(group, "mesh.toml");
    let out = goodput()
        .args(["agent", "import-psconfig"])
        .arg(&template)
        .arg("-o")
        .arg(&config)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // Rules any negative delay breaks, round trip and one way: a clock's
    // offset taken for a delay would raise them.
    let mut mesh = std::fs::read_to_string(&config).unwrap();
    mesh.push_str(ALERTS);
    std::fs::write(&config, mesh).unwrap();
    let port = free_tcp_port();
    let _archive = archive(group, "archive", &db, &config, port);
    let post = |method: &str, body: &str| {
        let (status, text) = http(
            "127.0.0.1",
            port,
            method,
            "/api/v1/archive/pscheduler",
            Some(TOKEN),
            body,
        );
        (
            status,
            serde_json::from_str::<Value>(&text).unwrap_or(Value::Null),
        )
    };
    // What a pScheduler http archiver sends (it PUTs by default; POST too).
    let mut keys = std::collections::HashMap::new();
    for (name, method, task, source, dest, kind) in [
        ("throughput", "PUT", "core-throughput", "site-a", "site-b", "tcp"),
        ("latencybg", "POST", "core-latencybg", "site-a", "site-b", "owamp"),
        ("rtt", "POST", "core-rtt", "site-b", "site-c", "ping"),
        ("trace", "PUT", "core-trace", "site-a", "site-c", "trace"),
        ("failed", "POST", "core-throughput", "site-b", "site-a", "tcp"),
    ] {
        let (status, v) = post(method, &ps_fixture(name));
        assert_eq!(status, 200, "{name}: {v}");
        assert_eq!(
            (
                v["task"].as_str(),
                v["source"].as_str(),
                v["dest"].as_str(),
                v["kind"].as_str()
            ),
            (Some(task), Some(source), Some(dest), Some(kind)),
            "{name}: {v}"
        );
        keys.insert(name, v["measurement_key"].as_str().unwrap().to_owned());
    }
    // Sent again (a pScheduler retry): stored once.
    assert_eq!(post("PUT", &ps_fixture("latencybg")).0, 200);
    assert_eq!(cluster.psql("fleet", "SELECT COUNT(*) FROM runs"), "5");
    // Refused, each with its reason, and counted.
    let (status, v) = post("POST", &ps_fixture("unsupported"));
    assert_eq!(status, 422, "{v}");
    assert!(v["error"].as_str().unwrap().contains("type 'dns'"), "{v}");
    let (status, v) = post("POST", "{\"id\": \"x\"}");
    assert_eq!(status, 400, "{v}");
    assert!(v["error"].as_str().unwrap().contains("no schedule"), "{v}");
    let (status, _) = post("POST", "not json");
    assert_eq!(status, 400);
    let (status, _) = http(
        "127.0.0.1",
        port,
        "POST",
        "/api/v1/archive/pscheduler",
        None,
        &ps_fixture("rtt"),
    );
    assert_eq!(status, 401, "no token, no entry");
    let metrics = http("127.0.0.1", port, "GET", "/metrics", None, "").1;
    assert!(
        metrics.contains("goodput_archive_pscheduler_ingested_total 6\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains("goodput_archive_pscheduler_refused_total 3\n"),
        "{metrics}"
    );

    // The figures, through the archive's series of the configured tasks.
    let series = |name: &str, metric: &str| {
        let q = format!(
            "/api/v1/series?key={}&metric={metric}&from_ms=0&to_ms=4102444800000",
            keys[name]
        );
        let s = get_json("127.0.0.1", port, &q);
        let p = s["points"]
            .as_array()
            .unwrap_or_else(|| panic!("{q}: {s}"))
            .clone();
        (q, s, p)
    };
    let point = |name: &str, metric: &str| {
        let (q, s, p) = series(name, metric);
        assert_eq!(p.len(), 1, "{q}: {s}");
        p[0]["mean"].as_f64().unwrap()
    };
    let points = |name: &str, metric: &str| series(name, metric).2.len();
    assert_eq!(point("latencybg", "loss"), 1.0);
    // A latency result is one-way delay, not a round trip.
    assert!((point("latencybg", "owd_forward_median") - 10_220.0).abs() < 1e-6);
    assert_eq!(point("throughput", "throughput_up"), 9.3e9);
    assert_eq!(point("rtt", "loss"), 20.0);
    assert_eq!(point("trace", "hops"), 4.0);
    // The failure, with pScheduler's reason; the document kept whole.
    let failed = get_json("127.0.0.1", port, "/api/v1/runs?state=failed");
    assert_eq!(failed.as_array().unwrap().len(), 1, "{failed}");
    assert!(failed[0]["reason"]
        .as_str()
        .unwrap()
        .contains("Connection refused"));
    let one = get_json(
        "127.0.0.1",
        port,
        "/api/v1/runs/pscheduler/7c1d2e3f-0a4b-4c5d-9e8f-101112131415",
    );
    assert_eq!(one["result"]["result"]["mss"], 1448, "{one}");

    // Round trip and one way, each where it belongs: the ping's delay is
    // no one-way delay, the latency's one-way delay no round trip.
    assert!((point("rtt", "delay_median") - 405.0).abs() < 1e-6);
    assert_eq!(points("rtt", "owd_forward_median"), 0);
    assert_eq!(points("latencybg", "delay_median"), 0);

    one_way_without_synchronised_clocks(port);

    // Hostile sizes, on an archive under the servers' address-space
    // limit: a latency histogram of 300,000 buckets (3.5 MB, under the 4 MiB
    // body limit) is read and its percentiles are right; a larger body and
    // a batch of more runs than the limit are refused with 413.
    let mut big: Value = serde_json::from_str(&ps_fixture("latencybg")).unwrap();
    big["id"] = Value::from("big-histogram");
    let buckets: serde_json::Map<String, Value> = (0..300_000u32)
        .map(|i| (format!("{}.{:03}", i / 1000, i % 1000), Value::from(1)))
        .collect();
    big["result"]["histogram-latency"] = Value::Object(buckets);
    let text = serde_json::to_string(&big).unwrap();
    assert!(text.len() > 3_000_000 && text.len() < 4 << 20, "{}", text.len());
    let (status, v) = post("PUT", &text);
    assert_eq!(status, 200, "{v}");
    let stored = get_json("127.0.0.1", port, "/api/v1/runs/pscheduler/big-histogram");
    let median = stored["figures"]["owd_forward_median_us"].as_f64().unwrap();
    assert!((median - 150_000.0).abs() <= 1_000.0, "{median}");
    let (status, _) = post("PUT", &" ".repeat(5 << 20));
    assert_eq!(status, 413);
    let many = format!("{{\"runs\":[{}]}}", vec!["{\"id\":\"x\"}"; 5_001].join(","));
    let (status, text) = http(
        "127.0.0.1",
        port,
        "POST",
        "/api/v1/archive/runs",
        Some(TOKEN),
        &many,
    );
    assert_eq!(status, 413, "{text}");
    assert!(text.contains("at most 5000 runs"), "{text}");
    let h = get_json("127.0.0.1", port, "/api/v1/health");
    assert_eq!(h["role"], "archive", "still up: {h}");
}

/// The fleet archive's alert rules in `a_perfsonar_mesh_archives_its_results_here_as_its_configured_tasks`.
const ALERTS: &str = r#"
[alerts]
every = "1s"
hold = 1

[alerts.rules.delay]
metric = "delay"
window = "1w"
statistic = "last"
warning = "0:50ms"
critical = "0:100ms"

[alerts.rules.one_way_delay]
metric = "one_way_delay"
window = "1w"
statistic = "last"
warning = "0:50ms"
critical = "0:100ms"
"#;

/// A pScheduler result sent with the `x-ps-observer` header perfSONAR's
/// pSConfig puts on its archivers (the host that ran the task).
fn post_observed(port: u16, body: &str, observer: &str) -> (u16, Value) {
    // The helper writes the token as a header line of its own; the
    // observer's header follows it.
    let auth = format!("{TOKEN}\r\nX-PS-Observer: {observer}");
    let (status, text) = http(
        "127.0.0.1",
        port,
        "POST",
        "/api/v1/archive/pscheduler",
        Some(&auth),
        body,
    );
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// A twping latency result from a host whose clock was out of step
/// (median −13.16 ms one way, clock error 27 ms; the fixture's README
/// tells where it comes from), sent with its observer, and a trace that
/// names no source: each is filed under its observer, the latency is
/// stored with its clock error and no delay, raises no delay alert, and
/// the fleet archive's pair explorer shows both in a real browser.
fn one_way_without_synchronised_clocks(port: u16) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let at = |ago_s: u64| goodput_core::time::ms_rfc3339(now - ago_s * 1000);
    let mut latency: Value = serde_json::from_str(&ps_fixture("latency-unsynchronized")).unwrap();
    latency["schedule"]["start"] = Value::from(at(300));
    let (status, v) = post_observed(port, &latency.to_string(), "10.81.1.1");
    assert_eq!(status, 200, "{v}");
    // Not under its participant's host name (ps-a.example.net): its
    // observer's, site-a, and the configured one-way task to site-c.
    assert_eq!(
        (
            v["source"].as_str(),
            v["dest"].as_str(),
            v["kind"].as_str(),
            v["task"].as_str()
        ),
        (
            Some("site-a"),
            Some("site-c"),
            Some("owamp"),
            Some("core-latencybg")
        ),
        "{v}"
    );
    let run = get_json(
        "127.0.0.1",
        port,
        "/api/v1/runs/pscheduler/3f2e1d0c-9b8a-4776-8554-433221100fed",
    );
    let f = &run["figures"];
    assert_eq!(f["owd_clock_error_us"], 27_000.0, "{run}");
    assert_eq!(f["owd_synchronized"], false, "{run}");
    for none in [
        "owd_forward_median_us",
        "owd_backward_median_us",
        "delay_median_us",
        "delay_min_us",
    ] {
        assert!(f.get(none).is_none_or(Value::is_null), "{none}: {run}");
    }
    assert_eq!(f["loss_forward_pct"], 0.0, "{run}");

    // A trace without a source, run by site-b.
    let mut trace: Value = serde_json::from_str(&ps_fixture("trace")).unwrap();
    trace["id"] = Value::from("a1b2c3d4-e5f6-4789-8abc-0123456789ac");
    trace["schedule"]["start"] = Value::from(at(240));
    trace["test"]["spec"].as_object_mut().unwrap().remove("source");
    trace["participants"] = serde_json::json!(["ps-b.example.net"]);
    let (status, v) = post_observed(port, &trace.to_string(), "10.81.1.2");
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        (v["source"].as_str(), v["dest"].as_str(), v["task"].as_str()),
        (Some("site-b"), Some("site-c"), Some("core-trace")),
        "{v}"
    );

    // A trace site-a ran to a host outside the mesh: no configured task
    // names the pair, and the archive holds it all the same.
    let mut outside = trace.clone();
    outside["id"] = Value::from("a1b2c3d4-e5f6-4789-8abc-0123456789ad");
    outside["test"]["spec"]["dest"] = Value::from("10.81.1.9");
    let (status, v) = post_observed(port, &outside.to_string(), "10.81.1.1");
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        (v["source"].as_str(), v["dest"].as_str(), v["task"].as_str()),
        (Some("site-a"), Some("10.81.1.9"), Some("pscheduler-trace")),
        "{v}"
    );

    // Evaluated: the way site-a → site-c ran but measured no exact
    // one-way delay; no delay alert, either family.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let g = get_json("127.0.0.1", port, "/api/v1/grid?metric=one_way_delay");
        let cell = g["cells"].as_array().unwrap().iter().find(|c| {
            (
                c["task"].as_str(),
                c["source"].as_str(),
                c["dest"].as_str(),
                c["direction"].as_str(),
            ) == (
                Some("core-latencybg"),
                Some("site-a"),
                Some("site-c"),
                Some("forward"),
            )
        });
        if cell.and_then(|c| c["status"].as_str()) == Some("not_run") {
            break;
        }
        assert!(Instant::now() < deadline, "site-a → site-c: {cell:?}");
        std::thread::sleep(Duration::from_millis(250));
    }
    let alerts = get_json("127.0.0.1", port, "/api/v1/alerts");
    let delays: Vec<&Value> = alerts
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["metric"] == "delay" || a["metric"] == "one_way_delay")
        .collect();
    assert!(
        delays.is_empty(),
        "no delay alert from a clock's offset: {alerts}"
    );

    // The pair explorer of the fleet archive, in a real browser: the
    // pairs perfSONAR's hosts measure, with their charts.
    let Some(browser) = common::webdriver::Browser::start("fleet-pscheduler") else {
        return;
    };
    let base = format!("http://127.0.0.1:{port}");
    browser.go(&format!("{base}/ui/pair?source=site-a&dest=site-c&range=1y"));
    let main = browser.text(&browser.one("main"));
    assert!(!main.contains("No agent runs a test"), "{main}");
    assert!(
        !main.contains("did not answer"),
        "an archive asks no agent: {main}"
    );
    // The mesh's tasks between the two, each way; the latency's.
    assert_eq!(browser.all("main > section.measurement").len(), 8, "{main}");
    let ingested =
        "main > section[data-task=\"core-latencybg\"][data-source=\"site-a\"][data-dest=\"site-c\"]";
    let latest = browser.text(&browser.one(&format!("{ingested} p.latest")));
    assert!(latest.contains("0 % loss site-a → site-c"), "{latest}");
    assert!(
        latest.contains("one-way delay not exact (clocks not synchronised, the clocks' error 27.000 ms)"),
        "no exact one-way delay: {latest}"
    );
    assert!(
        !browser.all(&format!("{ingested} svg.chart")).is_empty(),
        "{main}"
    );
    browser.go(&format!("{base}/ui/pair?source=site-b&dest=site-c&range=1y"));
    let main = browser.text(&browser.one("main"));
    for (task, source) in [("core-trace", "site-b"), ("core-rtt", "site-b")] {
        let css = format!("main > section[data-task=\"{task}\"][data-source=\"{source}\"] p.latest");
        let latest = browser.text(&browser.one(&css));
        assert!(latest.starts_with("Latest ("), "{task}: {latest}\n{main}");
    }
    browser.go(&format!("{base}/ui/pair?source=site-a&dest=10.81.1.9&range=1y"));
    let main = browser.text(&browser.one("main"));
    assert_eq!(
        browser
            .all("main > section.measurement[data-task=\"pscheduler-trace\"]")
            .len(),
        1,
        "{main}"
    );
    assert!(main.contains("site-a → 10.81.1.9"), "{main}");
    let errors: Vec<_> = browser
        .console()
        .into_iter()
        .filter(|(level, _)| level == "SEVERE")
        .collect();
    assert!(errors.is_empty(), "{errors:?}");
}

/// A GET with an `If-None-Match`; the status and the ETag answered.
fn get_tagged(port: u16, path: &str, tag: Option<&str>) -> (u16, Option<String>, String) {
    use std::io::{Read, Write};
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let cond = tag.map_or(String::new(), |t| format!("If-None-Match: {t}\r\n"));
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{cond}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    let status = out
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let etag = out
        .lines()
        .find(|l| l.to_ascii_lowercase().starts_with("etag:"))
        .map(|l| l[5..].trim().to_owned());
    let body = out.split_once("\r\n\r\n").map_or("", |(_, b)| b).to_owned();
    (status, etag, body)
}

#[test]
fn agents_take_their_tasks_from_the_archive_and_a_lapsed_lease_shows_as_down() {
    let Some(cluster) = pg::Cluster::start() else {
        return;
    };
    let db = cluster.database("fleet");
    let group = "fleet-inventory";
    let ports = Ports::pick();
    let names = ["a", "b", "c"];
    let ips = ["127.0.0.2", "127.0.0.3", "127.0.0.4"];
    // A task between b and c only; rules evaluated every second.
    let extra = "\n[groups.bc]\ntype = \"mesh\"\naddresses = [\"b\", \"c\"]\n\n\
                 [tasks.bc-latency]\ngroup = \"bc\"\ntest = \"latency\"\nschedule = \"often\"\n\n\
                 [alerts]\nevery = \"1s\"\n";
    let config = mesh_config(group, &names, &ips, ports, 6, 3, extra);
    let (port, tls_port) = (free_tcp_port(), free_tcp_port());
    let (_archive, pin) = archive_tls(group, "archive", &db, &config, port, Some(tls_port));
    // Each host's share of the mesh, tagged.
    let (status, tag_a, body) = get_tagged(port, "/api/v1/fleet/config?host=a", None);
    assert_eq!(status, 200, "{body}");
    let doc: Value = serde_json::from_str(&body).unwrap();
    let tasks: Vec<&String> = doc["tasks"].as_object().unwrap().keys().collect();
    assert_eq!(tasks, ["latency", "throughput"], "a is not in bc");
    let tag_a = tag_a.expect("an ETag");
    assert_eq!(
        get_tagged(port, "/api/v1/fleet/config?host=a", Some(&tag_a)).0,
        304
    );
    let (_, tag_b, body) = get_tagged(port, "/api/v1/fleet/config?host=b", Some(&tag_a));
    let doc: Value = serde_json::from_str(&body).unwrap();
    assert!(doc["tasks"]["bc-latency"].is_object(), "{doc}");
    assert_ne!(tag_b.unwrap(), tag_a);
    assert_eq!(get_tagged(port, "/api/v1/fleet/config?host=nobody", None).0, 404);

    // Agents a and b read their share from the archive every second, and
    // register with a 5 s lease (the shortest); c never starts. a talks
    // to the archive over HTTPS, pinning its certificate; b over HTTP.
    let mut agents: Vec<Agent> = names[..2]
        .iter()
        .zip(ips)
        .map(|(n, ip)| {
            let (to, fragment) = match *n {
                "a" => (format!("https://127.0.0.1:{tls_port}"), format!("#{pin}")),
                _ => (format!("http://127.0.0.1:{port}"), String::new()),
            };
            let url = std::path::PathBuf::from(format!("{to}/api/v1/fleet/config?host={n}{fragment}"));
            Agent::start(
                group,
                n,
                ip,
                &url,
                ports,
                &[
                    "--forward-to",
                    &format!("{to}{fragment}"),
                    "--lease",
                    "5s",
                    "--reload-every",
                    "1s",
                ],
            )
        })
        .collect();
    std::thread::sleep(Duration::from_secs(6));
    let b_config = get_json(ips[1], ports.api, "/api/v1/config");
    assert!(
        b_config["config"]["tasks"]["bc-latency"].is_object(),
        "{b_config}"
    );
    let a_config = get_json(ips[0], ports.api, "/api/v1/config");
    assert!(
        a_config["config"]["tasks"].get("bc-latency").is_none(),
        "{a_config}"
    );
    let fleet = get_json("127.0.0.1", port, "/api/v1/fleet/agents");
    let state = |f: &Value, n: &str| -> String {
        f.as_array().unwrap().iter().find(|x| x["name"] == n).unwrap()["state"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert_eq!(
        (state(&fleet, "a"), state(&fleet, "b"), state(&fleet, "c")),
        ("up".into(), "up".into(), "unregistered".into()),
        "{fleet}"
    );
    let a_info = &fleet[0]["info"];
    assert_eq!(a_info["addresses"], serde_json::json!(["127.0.0.2"]), "{fleet}");
    assert_eq!(a_info["lease_s"], 5);
    // The agents polled the configuration and mostly heard "unchanged".
    let h = get_json("127.0.0.1", port, "/api/v1/health");
    assert!(h["counters"]["config_not_modified"].as_u64().unwrap() >= 4, "{h}");

    // b stops: once its lease lapses it is down on the fleet's grid.
    agents[1].stop(libc::SIGTERM);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let fleet = get_json("127.0.0.1", port, "/api/v1/fleet/agents");
        let grid = get_json("127.0.0.1", port, "/api/v1/grid?metric=delay");
        let cells = grid["cells"].as_array().unwrap();
        let down: Vec<&Value> = cells.iter().filter(|c| c["status"] == "agent_down").collect();
        if state(&fleet, "b") == "lapsed" && !down.is_empty() {
            assert!(down.iter().all(|c| c["source"] == "b"), "{grid}");
            assert_eq!(down.len(), 3, "b → a, b → c twice (two tasks): {grid}");
            assert!(down[0]["why"].as_str().unwrap().contains("lease"), "{grid}");
            assert!(cells
                .iter()
                .filter(|c| c["source"] == "a")
                .all(|c| c["status"] != "agent_down"));
            assert_eq!(state(&fleet, "a"), "up");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "b never showed as down: {fleet}\n{grid}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let page = http("127.0.0.1", port, "GET", "/ui/grid?metric=delay", None, "").1;
    assert!(page.contains("agent down"), "the legend names the state");
    agents[0].stop(libc::SIGTERM);
}

/// Archives named in the mesh document: every agent forwards to the
/// fleet archive (which comes up late) and to an HTTP receiver (which
/// refuses its first six requests, and any batch of more than one run),
/// the receiver's runs cut down and renamed by the archive's `transform`.
/// Each run reaches both, the receiver once from each end that holds it;
/// batches the receiver refuses are halved down to one run; when the
/// receiver leaves the document, the agents stop forwarding to it and say
/// so.
#[test]
fn the_mesh_names_its_archives_and_an_http_receiver_gets_runs_transformed() {
    let Some(cluster) = pg::Cluster::start() else {
        return;
    };
    let db = cluster.database("fleet");
    let group = "fleet-mesh-archives";
    let ports = Ports::pick();
    let names = ["a", "b"];
    let ips = ["127.0.0.2", "127.0.0.3"];
    let port = free_tcp_port();
    // The receiver takes one run a request, and refuses its first six
    // requests (so runs pile up in the queues meanwhile).
    let hook = common::alerting::Hook::start_with("127.0.0.1", 6, 1);
    let fleet = format!("http://127.0.0.1:{port}");
    let archives = format!(
        "\n[archives.fleet]\nurl = \"{fleet}\"\n\n\
         [archives.logs]\nurl = \"{}\"\nkind = \"http\"\n\
         [archives.logs.transform]\n\
         select = [\"id\", \"source\", \"dest\", \"kind\", \"state\", \"figures.delay_median_us\", \"figures.throughput_up_bps\"]\n\
         rename = {{ id = \"run\", \"figures.delay_median_us\" = \"delay.median_us\" }}\n",
        hook.url
    );
    let config = mesh_config(group, &names, &ips, ports, 4, 2, &archives);
    // No --forward-to: the document names where runs go.
    let agents: Vec<Agent> = names
        .iter()
        .zip(ips)
        .map(|(n, ip)| Agent::start(group, n, ip, &config, ports, &["--lease", "6s"]))
        .collect();
    // The fleet archive comes up late (with a 64 KiB body limit): the
    // agents queue for it meanwhile, and register when it is there.
    std::thread::sleep(Duration::from_secs(16));
    let (_archive, _) = archive_at(
        group,
        "archive",
        &db,
        &config,
        ("127.0.0.1", port, None),
        &["--max-body", "64KiB"],
    );
    std::thread::sleep(Duration::from_secs(4));
    let before: Vec<BTreeMap<String, String>> = agents.iter().map(|a| ended(a, ports)).collect();
    drained(&agents, ports, Duration::from_secs(60));
    for a in &agents {
        let urls: BTreeSet<String> = backlogs(a, ports).into_iter().map(|b| b.0).collect();
        assert_eq!(
            urls,
            BTreeSet::from([fleet.clone(), hook.url.clone()]),
            "{}",
            a.name
        );
    }
    let stored = get_json("127.0.0.1", port, "/api/v1/runs?limit=100000");
    let stored: BTreeSet<&str> = stored
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    let received: Vec<Value> = hook
        .received
        .lock()
        .unwrap()
        .iter()
        .flat_map(|b| b.as_array().expect("a JSON array per batch").clone())
        .collect();
    let mut seen = BTreeMap::new();
    for r in &received {
        let keys: BTreeSet<&str> = r.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            BTreeSet::from(["run", "source", "dest", "kind", "state", "figures", "delay"]),
            "{r}"
        );
        let figures: Vec<&String> = r["figures"].as_object().unwrap().keys().collect();
        assert_eq!(figures, ["throughput_up_bps"], "{r}");
        *seen.entry(r["run"].as_str().unwrap().to_owned()).or_insert(0) += 1;
    }
    // Each agent sends its own record of a run (both ends hold one): at
    // most once from each.
    let after: Vec<BTreeMap<String, String>> = agents.iter().map(|a| ended(a, ports)).collect();
    let extra: Vec<_> = seen
        .iter()
        .filter(|(id, n)| **n > after.iter().filter(|h| h.contains_key(id.as_str())).count())
        .collect();
    assert!(
        extra.is_empty(),
        "the receiver got runs more often than agents hold them: {extra:?}"
    );
    let total: usize = before.iter().map(BTreeMap::len).sum();
    assert!(total >= 4, "only {total} runs ended on the agents");
    for (held, a) in before.iter().zip(&agents) {
        for id in held.keys() {
            assert!(
                stored.contains(id.as_str()),
                "agent {}: {id} is not in the fleet archive",
                a.name
            );
            assert!(
                seen.contains_key(id),
                "agent {}: {id} never reached the receiver",
                a.name
            );
        }
    }
    assert!(
        received.iter().any(|r| r["kind"] == "stamp"
            && r["state"] == "finished"
            && r["delay"]["median_us"].as_f64().is_some_and(|d| d > 0.0)),
        "no STAMP run's median delay under its new name"
    );
    assert!(
        *hook.attempts.lock().unwrap() > hook.received.lock().unwrap().len() as u64,
        "the refused batches were sent again"
    );
    // The receiver's 422 for a batch of several: halved down to one.
    assert!(
        agents.iter().any(|a| {
            let log = a.log_text();
            log.lines().any(|l| {
                l.contains(&format!("forwarding to {}: a batch of", hook.url))
                    && l.contains("refused as a whole (HTTP 422")
            })
        }),
        "no batch was halved: {}",
        agents[0].log_text()
    );
    assert!(
        hook.received
            .lock()
            .unwrap()
            .iter()
            .all(|b| b.as_array().unwrap().len() == 1),
        "the receiver took a batch of several"
    );
    // The agents registered with the fleet archive the document names.
    let inventory = get_json("127.0.0.1", port, "/api/v1/fleet/agents");
    let up: Vec<&str> = inventory
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["state"] == "up")
        .map(|a| a["name"].as_str().unwrap())
        .collect();
    assert_eq!(up, ["a", "b"], "{inventory}");

    // The receiver leaves the document: the agents stop sending to it.
    let text = std::fs::read_to_string(&config).unwrap();
    let cut = text.find("[archives.logs]").unwrap();
    std::fs::write(&config, &text[..cut]).unwrap();
    for a in &agents {
        a.signal(libc::SIGHUP);
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    for a in &agents {
        loop {
            let urls: Vec<String> = backlogs(a, ports).into_iter().map(|b| b.0).collect();
            if urls == [fleet.clone()]
                && a.log_text()
                    .contains(&format!("no longer forwarding to {}", hook.url))
            {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{}: {urls:?}\n{}",
                a.name,
                a.log_text()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    let got = hook.received.lock().unwrap().len();
    std::thread::sleep(Duration::from_secs(6));
    assert_eq!(
        hook.received.lock().unwrap().len(),
        got,
        "batches after the receiver left"
    );
}

/// The issue's fault test on real separate hosts: four agents, each in its
/// own network namespace, test each other (TCP and STAMP) and forward to a
/// fleet archive in the bridge's namespace, with its PostgreSQL. The
/// archive is stopped for three minutes while they keep testing, then
/// started again: every run each agent holds arrives exactly once and
/// every queue drains.
#[test]
fn four_agents_in_namespaces_lose_nothing_while_the_archive_is_down_for_minutes() {
    let Some(lan) = common::netns::Lan::make(4) else {
        return;
    };
    // This thread, and what it starts (the database, the archive), live in
    // the bridge's namespace, where every agent's address is reachable.
    lan.enter_bridge();
    let Some(cluster) = pg::Cluster::start() else {
        return;
    };
    let db = cluster.database("fleet");
    let group = "fleet-netns";
    let ports = Ports {
        api: 8780,
        beacon: 4444,
        stamp: 862,
    };
    let names = ["a", "b", "c", "d"];
    let ips = ["10.77.0.1", "10.77.0.2", "10.77.0.3", "10.77.0.4"];
    let config = mesh_config(group, &names, &ips, ports, 30, 25, "");
    let port = 8790;
    let to = format!("http://10.77.0.254:{port}");
    let start_archive = || archive_at(group, "archive", &db, &config, ("10.77.0.254", port, None), &[]).0;
    let archive = start_archive();
    let agents: Vec<Agent> = names
        .iter()
        .zip(ips)
        .zip(&lan.agents)
        .map(|((n, ip), ns)| {
            Agent::start_in(
                Some(ns),
                group,
                n,
                ip,
                &config,
                ports,
                &["--forward-to", to.as_str()],
            )
        })
        .collect();
    std::thread::sleep(Duration::from_secs(30));
    archive.stop(libc::SIGTERM);
    let down = Instant::now();
    std::thread::sleep(Duration::from_secs(180));
    let queued: Vec<u64> = agents.iter().map(|a| backlogs(a, ports)[0].1).collect();
    assert!(
        queued.iter().all(|n| *n > 0),
        "queued while the archive was down: {queued:?}"
    );
    let _archive = start_archive();
    eprintln!(
        "archive down {:.0} s; queues then {queued:?}",
        down.elapsed().as_secs_f64()
    );
    drained(&agents, ports, Duration::from_secs(180));
    let before: Vec<BTreeMap<String, String>> = agents.iter().map(|a| ended(a, ports)).collect();
    drained(&agents, ports, Duration::from_secs(60));
    let stored = get_json("10.77.0.254", port, "/api/v1/runs?limit=100000");
    let stored: BTreeSet<String> = stored
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap().to_owned())
        .collect();
    let after: BTreeSet<String> = agents.iter().flat_map(|a| ended(a, ports).into_keys()).collect();
    for (held, a) in before.iter().zip(&agents) {
        let missing: Vec<&String> = held.keys().filter(|id| !stored.contains(*id)).collect();
        assert!(
            missing.is_empty(),
            "agent {}: never reached the archive: {missing:?}",
            a.name
        );
    }
    let strays: Vec<&String> = stored.iter().filter(|id| !after.contains(*id)).collect();
    assert!(
        strays.is_empty(),
        "the archive holds runs no agent has: {strays:?}"
    );
    let dupes = cluster.psql(
        "fleet",
        "SELECT COUNT(*) FROM (SELECT id FROM runs GROUP BY id HAVING COUNT(*) > 1) d",
    );
    assert_eq!(dupes, "0", "runs stored twice");
    let total: usize = before.iter().map(BTreeMap::len).sum();
    assert!(
        total > 100,
        "only {total} runs ended on the agents in five minutes"
    );
    eprintln!(
        "{total} runs held by the agents, all stored once ({} distinct)",
        stored.len()
    );
}
