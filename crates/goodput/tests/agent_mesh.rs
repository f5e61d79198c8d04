//! Agents on loopback addresses (127.0.0.2, .3, …), each its own process
//! with its own archive, running a compressed mesh schedule: exclusive TCP
//! throughput (`duration`) and background STAMP between every pair. What
//! is checked comes from each agent's API: no two exclusive runs overlap
//! on any agent, every due run is accounted for (finished, or a non-start
//! with its reason), every result is in both ends' archives. And the
//! faults: a peer down, a peer over its quota, requests without the
//! token, a wrong configuration on SIGHUP, junk requests, and an agent
//! killed and restarted.

mod common;

use common::{free_tcp_port, free_udp_port, goodput, tmp, Reaped};
use serde_json::Value;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

const TOKEN: &str = "mesh-test-token-0123456789";

/// One HTTP/1.1 request; the status and the body.
fn http(host: &str, port: u16, method: &str, path: &str, token: Option<&str>, body: &str) -> (u16, String) {
    let mut s = TcpStream::connect((host, port)).unwrap_or_else(|e| panic!("{host}:{port}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\n{auth}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    // A server may answer (413) and close before a huge body is all sent.
    let _ = s.write_all(req.as_bytes());
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out).to_string();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    // Chunked bodies: join the chunks.
    let body = if text.to_ascii_lowercase().contains("transfer-encoding: chunked") {
        let mut joined = String::new();
        let mut rest = body;
        while let Some((size, tail)) = rest.split_once("\r\n") {
            let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
            if n == 0 || tail.len() < n {
                break;
            }
            joined += &tail[..n];
            rest = &tail[n..].trim_start_matches("\r\n");
        }
        joined
    } else {
        body.to_owned()
    };
    (status, body)
}

fn get_json(host: &str, port: u16, path: &str) -> Value {
    let (status, body) = http(host, port, "GET", path, None, "");
    assert_eq!(status, 200, "GET {path} on {host}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {path}: {e}: {body}"))
}

/// Ports every agent uses on its own address.
#[derive(Clone, Copy)]
struct Ports {
    api: u16,
    beacon: u16,
    stamp: u16,
}

impl Ports {
    fn pick() -> Self {
        Ports {
            api: free_tcp_port(),
            beacon: free_tcp_port(),
            stamp: free_udp_port(),
        }
    }
}

/// An agent process.
struct Agent {
    name: String,
    ip: String,
    archive: PathBuf,
    log: PathBuf,
    child: Option<Reaped>,
}

impl Agent {
    fn start(group: &str, name: &str, ip: &str, config: &PathBuf, ports: Ports, extra: &[&str]) -> Agent {
        let archive = tmp(group, &format!("{name}.sqlite"));
        let log = tmp(group, &format!("{name}.log"));
        let mut a = Agent {
            name: name.into(),
            ip: ip.into(),
            archive,
            log,
            child: None,
        };
        a.spawn(config, ports, extra);
        a
    }

    fn spawn(&mut self, config: &PathBuf, ports: Ports, extra: &[&str]) {
        let token = tmp("agent-token", "token");
        std::fs::write(&token, TOKEN).unwrap();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let mut cmd = goodput();
        cmd.args(["agent", "--config"])
            .arg(config)
            .args(["--as", &self.name, "--archive"])
            .arg(&self.archive)
            .arg("--token-file")
            .arg(&token)
            .args(["--beacon-port", &ports.beacon.to_string()])
            .args(["--stamp-port", &ports.stamp.to_string()])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(log);
        self.child = Some(Reaped::spawn_as_is(cmd));
        // Up when its API answers.
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect((self.ip.as_str(), ports.api)).is_err() {
            assert!(
                Instant::now() < deadline,
                "agent {} did not start: {}",
                self.name,
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Stops it with `signal` and waits for it.
    fn stop(&mut self, signal: i32) {
        if let Some(c) = self.child.take() {
            c.stop(signal);
        }
    }

    fn runs(&self, ports: Ports) -> Vec<Value> {
        let v = get_json(&self.ip, ports.api, "/api/v1/runs?limit=10000");
        v.as_array().unwrap().clone()
    }
}

/// A mesh of `names` at `ips`: throughput every `every` s with `slip` s
/// of slip, STAMP every `every` s in the background.
fn mesh_config(
    group: &str,
    names: &[&str],
    ips: &[&str],
    ports: Ports,
    every: u64,
    slip: u64,
    extra: &str,
) -> PathBuf {
    let mut t = format!("[agent]\napi_port = {}\n\n", ports.api);
    for (n, ip) in names.iter().zip(ips) {
        t += &format!("[addresses.{n}]\naddress = \"{ip}\"\n");
    }
    let list: Vec<String> = names.iter().map(|n| format!("\"{n}\"")).collect();
    t += &format!(
        r#"
[groups.all]
type = "mesh"
addresses = [{}]

[tests.throughput]
kind = "tcp"
hosts = ["{{{{dest}}}}:{}"]
duration = "1s"

[tests.latency]
kind = "stamp"
host = "{{{{dest}}}}"
port = {}
count = 20
interval = "20ms"

[schedules.often]
repeat = "PT{every}S"
slip = "PT{slip}S"
sliprand = true

[tasks.throughput]
group = "all"
test = "throughput"
schedule = "often"

[tasks.latency]
group = "all"
test = "latency"
schedule = "often"
{extra}
"#,
        list.join(", "),
        ports.beacon,
        ports.stamp
    );
    let path = tmp(group, "mesh.toml");
    std::fs::write(&path, t).unwrap();
    path
}

fn state(r: &Value) -> &str {
    r["state"].as_str().unwrap_or("")
}

/// The run number at the end of a run id (`task/source/dest/n`).
fn number(id: &str) -> u64 {
    id.rsplit('/').next().unwrap().parse().unwrap()
}

/// The mesh's checks over every agent's archive, read through the API.
fn check_mesh(agents: &[Agent], ports: Ports) -> (usize, usize, usize) {
    let mut finished_tcp = 0;
    let mut finished_stamp = 0;
    let mut non_starts = 0;
    let all: Vec<Vec<Value>> = agents.iter().map(|a| a.runs(ports)).collect();
    for (a, runs) in agents.iter().zip(&all) {
        // No two exclusive runs overlap on this agent (as source or dest).
        let mut spans: Vec<(u64, u64, &str)> = runs
            .iter()
            .filter(|r| r["class"] == "exclusive" && ["finished", "failed", "cancelled"].contains(&state(r)))
            .filter(|r| r["start_ms"].is_u64() && r["end_ms"].is_u64())
            .map(|r| {
                (
                    r["start_ms"].as_u64().unwrap(),
                    r["end_ms"].as_u64().unwrap(),
                    r["id"].as_str().unwrap(),
                )
            })
            .collect();
        spans.sort();
        for w in spans.windows(2) {
            assert!(
                w[0].1 <= w[1].0,
                "agent {}: exclusive runs {} ({}..{}) and {} ({}..{}) overlap",
                a.name,
                w[0].2,
                w[0].0,
                w[0].1,
                w[1].2,
                w[1].0,
                w[1].1
            );
        }
        for r in runs {
            let id = r["id"].as_str().unwrap();
            match state(r) {
                "non_start" | "failed" | "missed" => {
                    let why = r["reason"].as_str().unwrap_or("");
                    assert!(
                        !why.is_empty(),
                        "agent {}: run {id} is {} with no reason",
                        a.name,
                        state(r)
                    );
                    if state(r) == "non_start" {
                        non_starts += 1;
                    }
                }
                "finished" => {}
                "scheduled" | "running" => {}
                s => panic!("agent {}: run {id} in state {s}", a.name),
            }
        }
        // Each pair this agent leads: its runs' numbers have no gap (every
        // due run was booked, run or said why not).
        let mut by_pair: std::collections::BTreeMap<String, Vec<u64>> = Default::default();
        for r in runs.iter().filter(|r| r["source"] == a.name.as_str()) {
            let id = r["id"].as_str().unwrap();
            let pair = id.rsplit_once('/').unwrap().0.to_owned();
            by_pair.entry(pair).or_default().push(number(id));
        }
        assert!(
            !by_pair.is_empty(),
            "agent {} led no run: {}",
            a.name,
            a.log_text()
        );
        for (pair, mut ns) in by_pair {
            ns.sort_unstable();
            ns.dedup();
            let span = ns.last().unwrap() - ns.first().unwrap() + 1;
            assert_eq!(
                span as usize,
                ns.len(),
                "agent {}: pair {pair} has gaps: {ns:?}",
                a.name
            );
        }
        // Its finished runs: figures, and the same record at the other end.
        for r in runs
            .iter()
            .filter(|r| r["source"] == a.name.as_str() && state(r) == "finished")
        {
            let id = r["id"].as_str().unwrap();
            let f = &r["figures"];
            match r["kind"].as_str().unwrap() {
                "tcp" => {
                    finished_tcp += 1;
                    assert!(
                        f["throughput_up_bps"].as_f64().unwrap_or(0.0) > 1e6,
                        "run {id}: {f}"
                    );
                }
                "stamp" => {
                    finished_stamp += 1;
                    assert!(
                        f["delay_median_us"].as_f64().unwrap_or(0.0) > 0.0,
                        "run {id}: {f}"
                    );
                    assert_eq!(f["loss_pct"].as_f64(), Some(0.0), "run {id}: {f}");
                }
                k => panic!("run {id}: kind {k}"),
            }
            let dest = r["dest"].as_str().unwrap();
            let (d, theirs) = agents.iter().zip(&all).find(|(x, _)| x.name == dest).unwrap();
            let other = theirs
                .iter()
                .find(|x| x["id"] == id)
                .unwrap_or_else(|| panic!("run {id} finished at {} is not in {}'s archive", a.name, d.name));
            assert_eq!(
                other["figures"], r["figures"],
                "run {id}: the two archives differ"
            );
            // And its whole result through the API.
            let one = get_json(&d.ip, ports.api, &format!("/api/v1/runs/{id}"));
            assert_eq!(one["result"]["spec"]["kind"], r["kind"], "run {id}: {one}");
        }
    }
    (finished_tcp, finished_stamp, non_starts)
}

#[test]
fn three_agents_share_a_mesh_without_overlap() {
    let ports = Ports::pick();
    let names = ["a", "b", "c"];
    let ips = ["127.0.0.2", "127.0.0.3", "127.0.0.4"];
    // Six throughput pairs of 3 s booked (1 s and the margin) every 20 s
    // on three hosts, where any two pairs share a host: nearly full.
    let config = mesh_config("agent-mesh", &names, &ips, ports, 20, 15, "");
    let mut agents: Vec<Agent> = names
        .iter()
        .zip(ips)
        .map(|(n, ip)| Agent::start("agent-mesh", n, ip, &config, ports, &[]))
        .collect();
    std::thread::sleep(Duration::from_secs(50));
    let (tcp, stamp, non_starts) = check_mesh(&agents, ports);
    eprintln!("finished: {tcp} throughput, {stamp} latency; {non_starts} non-starts");
    // In 50 s every one of the six pairs runs latency at least once (its
    // runs are due every 20 s, spread over 15 s), and throughput finishes
    // for most of them.
    assert!(tcp >= 4, "only {tcp} throughput runs finished");
    assert!(stamp >= 6, "only {stamp} latency runs finished");
    let mut pairs: Vec<String> = agents
        .iter()
        .flat_map(|a| a.runs(ports))
        .filter(|r| r["kind"] == "stamp" && state(r) == "finished")
        .map(|r| format!("{}>{}", r["source"], r["dest"]))
        .collect();
    pairs.sort();
    pairs.dedup();
    assert_eq!(pairs.len(), 6, "latency results for {pairs:?} only");
    // The API's other views answer.
    let health = get_json(ips[0], ports.api, "/api/v1/health");
    assert_eq!(health["identity"], serde_json::json!(["a"]));
    assert!(health["archive_runs"].as_u64().unwrap() > 0);
    let tasks = get_json(ips[0], ports.api, "/api/v1/tasks");
    assert_eq!(tasks.as_array().unwrap().len(), 4, "{tasks}");
    let openapi = get_json(ips[0], ports.api, "/api/v1/openapi.json");
    assert_eq!(openapi["openapi"], "3.1.0");
    let series = get_json(
        ips[0],
        ports.api,
        "/api/v1/series?source=a&dest=b&kind=stamp&metric=delay_median",
    );
    assert!(!series["points"].as_array().unwrap().is_empty(), "{series}");
    let (status, metrics) = http(ips[1], ports.api, "GET", "/metrics", None, "");
    assert_eq!(status, 200);
    assert!(metrics.ends_with("# EOF\n"), "{metrics}");
    assert!(
        metrics.contains(
            "goodput_delay_median_seconds{task=\"latency\",source=\"b\",dest=\"a\",kind=\"stamp\"}"
        ),
        "{metrics}"
    );
    for a in &mut agents {
        a.stop(libc::SIGTERM);
        assert!(a.log_text().contains("stopped"), "{}", a.log_text());
    }
}

#[test]
fn faults_are_named_and_nothing_committed_is_lost() {
    let ports = Ports::pick();
    let names = ["a", "b", "c"];
    let ips = ["127.0.0.5", "127.0.0.6", "127.0.0.7"];
    let config = mesh_config("agent-faults", &names, &ips, ports, 6, 3, "");
    let good = std::fs::read_to_string(&config).unwrap();
    // c is configured but never started: a peer that is down. b allows
    // each requester one run an hour.
    let mut a = Agent::start("agent-faults", "a", ips[0], &config, ports, &[]);
    let mut b = Agent::start(
        "agent-faults",
        "b",
        ips[1],
        &config,
        ports,
        &["--runs-per-hour", "1"],
    );

    // Calls that change something need the token.
    let spec = format!(
        r#"{{"spec": {{"kind": "tcp", "hosts": ["{}:{}"], "duration": "3s"}}}}"#,
        ips[1], ports.beacon
    );
    for token in [None, Some("wrong-token-wrong-token")] {
        let (status, body) = http(ips[0], ports.api, "POST", "/api/v1/runs", token, &spec);
        assert_eq!(status, 401, "{body}");
        assert!(body.contains("token"), "{body}");
        let (status, _) = http(ips[0], ports.api, "POST", "/api/v1/reservations", token, "{}");
        assert_eq!(status, 401);
    }

    // 1,000 junk requests leave it serving.
    let huge = "x".repeat(2 << 20);
    for i in 0..1000 {
        let (status, body) = match i % 5 {
            0 => http(
                ips[0],
                ports.api,
                "POST",
                "/api/v1/runs",
                Some(TOKEN),
                "{not json",
            ),
            1 => http(ips[0], ports.api, "POST", "/api/v1/runs", Some(TOKEN), &huge),
            2 => http(ips[0], ports.api, "GET", &format!("/no/such/path/{i}"), None, ""),
            3 => http(ips[0], ports.api, "GET", "/api/v1/runs?limit=banana", None, ""),
            _ => http(
                ips[0],
                ports.api,
                "POST",
                "/api/v1/runs",
                Some(TOKEN),
                r#"{"spec": {"kind": "tcp", "connections": 0}}"#,
            ),
        };
        assert!((400..500).contains(&status), "junk request {i}: {status} {body}");
    }
    assert_eq!(
        get_json(ips[0], ports.api, "/api/v1/health")["identity"],
        serde_json::json!(["a"])
    );

    // A configuration with an error: the old schedule stays, the error shows.
    std::fs::write(&config, good.replace("repeat = \"PT6S\"", "repeat = \"often\"")).unwrap();
    // SAFETY: signals a child this test started.
    unsafe { libc::kill(a.child.as_ref().unwrap().pid() as i32, libc::SIGHUP) };
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let h = get_json(ips[0], ports.api, "/api/v1/health");
        if let Some(e) = h["config_error"].as_str() {
            assert!(e.contains("schedules.often.repeat"), "{e}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the bad configuration was not reported: {h}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        get_json(ips[0], ports.api, "/api/v1/tasks")
            .as_array()
            .unwrap()
            .len(),
        4
    );
    std::fs::write(&config, &good).unwrap();

    // Runs go on meanwhile: to c (down) they do not start, to b only one
    // an hour is allowed.
    std::thread::sleep(Duration::from_secs(16));
    let runs = a.runs(ports);
    let reason_of = |dest: &str, needle: &str| {
        runs.iter().any(|r| {
            r["source"] == "a"
                && r["dest"] == dest
                && state(r) == "non_start"
                && r["reason"].as_str().unwrap_or("").contains(needle)
        })
    };
    assert!(reason_of("c", "peer c unreachable"), "{runs:#?}");
    assert!(reason_of("b", "peer b refused: limit runs_per_hour"), "{runs:#?}");

    // An agent killed during a run: what it had stored stays, the run it
    // was in is recorded missed, and so are the runs due while it was down.
    let (status, body) = http(ips[0], ports.api, "POST", "/api/v1/runs", Some(TOKEN), &spec);
    assert_eq!(status, 201, "{body}");
    let on_demand: Value = serde_json::from_str(&body).unwrap();
    let id = on_demand["id"].as_str().unwrap().to_owned();
    let deadline = Instant::now() + Duration::from_secs(60);
    while get_json(ips[0], ports.api, &format!("/api/v1/runs/{id}"))["state"] != "running" {
        assert!(Instant::now() < deadline, "the on-demand run never ran");
        std::thread::sleep(Duration::from_millis(50));
    }
    let before = a.runs(ports);
    a.stop(libc::SIGKILL);
    std::thread::sleep(Duration::from_secs(8));
    a.spawn(&config, ports, &[]);
    let after = a.runs(ports);
    for r in before
        .iter()
        .filter(|r| ["finished", "non_start"].contains(&state(r)))
    {
        let kept = after.iter().find(|x| x["id"] == r["id"]);
        assert_eq!(
            kept.map(|x| &x["state"]),
            Some(&r["state"]),
            "run {} was lost",
            r["id"]
        );
    }
    let cut = after.iter().find(|r| r["id"] == id.as_str()).unwrap();
    assert_eq!(state(cut), "missed", "{cut}");
    assert_eq!(cut["reason"], "the agent stopped during the run");
    let missed = after
        .iter()
        .filter(|r| state(r) == "missed" && r["reason"] == "the agent was not running at its time")
        .count();
    assert!(
        missed >= 2,
        "runs due while the agent was down are not marked missed: {after:#?}"
    );
    a.stop(libc::SIGTERM);
    b.stop(libc::SIGTERM);
}
