//! The agent tests' harness: agent processes (on loopback addresses or
//! in network namespaces), HTTP calls to their APIs, a compressed mesh
//! configuration, and the checks over every agent's archive.

use super::{free_tcp_port, free_udp_port, goodput, tmp, Reaped};
use serde_json::Value;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

pub const TOKEN: &str = "mesh-test-token-0123456789";

/// One HTTP/1.1 request; the status and the body.
pub fn http(
    host: &str,
    port: u16,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: &str,
) -> (u16, String) {
    let s = TcpStream::connect((host, port)).unwrap_or_else(|e| panic!("{host}:{port}: {e}"));
    request(s, host, method, path, token, body)
}

/// One HTTP/1.1 request with the token from the local address `src` (a
/// loopback address of this host, as a peer or a stranger would call
/// from); the status and the body.
pub fn http_from(src: &str, host: &str, port: u16, method: &str, path: &str, body: &str) -> (u16, String) {
    let s = connect_from(src, host, port, Duration::from_secs(5))
        .unwrap_or_else(|e| panic!("{src} → {host}:{port}: {e}"));
    request(s, host, method, path, Some(TOKEN), body)
}

/// A TCP connection to `dst:port` from the local address `src` (bound
/// before connecting, port chosen by the system).
pub fn connect_from(src: &str, dst: &str, port: u16, wait: Duration) -> std::io::Result<TcpStream> {
    use socket2::{Domain, Socket, Type};
    let src: std::net::IpAddr = src.parse().expect("an IP address");
    let dst: std::net::IpAddr = dst.parse().expect("an IP address");
    let s = Socket::new(Domain::for_address((dst, port).into()), Type::STREAM, None)?;
    s.bind(&std::net::SocketAddr::new(src, 0).into())?;
    s.connect_timeout(&std::net::SocketAddr::new(dst, port).into(), wait)?;
    Ok(s.into())
}

/// Sends one request on `s` and reads the answer to its end.
fn request(
    mut s: TcpStream,
    host: &str,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: &str,
) -> (u16, String) {
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
            rest = tail[n..].trim_start_matches("\r\n");
        }
        joined
    } else {
        body.to_owned()
    };
    (status, body)
}

pub fn get_json(host: &str, port: u16, path: &str) -> Value {
    let (status, body) = http(host, port, "GET", path, None, "");
    assert_eq!(status, 200, "GET {path} on {host}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {path}: {e}: {body}"))
}

/// Ports every agent uses on its own address.
#[derive(Clone, Copy)]
pub struct Ports {
    pub api: u16,
    pub beacon: u16,
    pub stamp: u16,
}

impl Ports {
    pub fn pick() -> Self {
        Ports {
            api: free_tcp_port(),
            beacon: free_tcp_port(),
            stamp: free_udp_port(),
        }
    }
}

/// An agent process.
pub struct Agent {
    pub name: String,
    pub ip: String,
    pub archive: PathBuf,
    pub log: PathBuf,
    pub child: Option<Reaped>,
    /// The network namespace it runs in (none: this one).
    pub netns: Option<String>,
}

impl Agent {
    pub fn start(group: &str, name: &str, ip: &str, config: &PathBuf, ports: Ports, extra: &[&str]) -> Agent {
        Self::start_in(None, group, name, ip, config, ports, extra)
    }

    /// The same in a network namespace (`ip netns exec`).
    pub fn start_in(
        netns: Option<&str>,
        group: &str,
        name: &str,
        ip: &str,
        config: &PathBuf,
        ports: Ports,
        extra: &[&str],
    ) -> Agent {
        let archive = tmp(group, &format!("{name}.sqlite"));
        let log = tmp(group, &format!("{name}.log"));
        let mut a = Agent {
            name: name.into(),
            ip: ip.into(),
            archive,
            log,
            child: None,
            netns: netns.map(str::to_owned),
        };
        a.spawn(config, ports, extra);
        a
    }

    pub fn spawn(&mut self, config: &PathBuf, ports: Ports, extra: &[&str]) {
        let token = tmp("agent-token", "token");
        std::fs::write(&token, TOKEN).unwrap();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let mut cmd = match &self.netns {
            None => goodput(),
            Some(ns) => {
                let mut c = std::process::Command::new("ip");
                c.args(["netns", "exec", ns, env!("CARGO_BIN_EXE_goodput")]);
                c
            }
        };
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
        // Agents face junk and hostile peers in these tests: each runs
        // under the servers' address-space limit, so a request that made
        // it allocate without bound fails the test instead of the machine.
        super::limit_address_space(&mut cmd, super::SERVER_ADDRESS_SPACE);
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

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Sends it a signal (SIGHUP: read the configuration again).
    pub fn signal(&self, signal: i32) {
        let pid = self.child.as_ref().unwrap().pid() as i32;
        // SAFETY: signals a child process this test started.
        unsafe { libc::kill(pid, signal) };
    }

    /// Stops it with `signal` and waits for it.
    pub fn stop(&mut self, signal: i32) {
        if let Some(c) = self.child.take() {
            c.stop(signal);
        }
    }

    pub fn runs(&self, ports: Ports) -> Vec<Value> {
        let v = get_json(&self.ip, ports.api, "/api/v1/runs?limit=10000");
        v.as_array().unwrap().clone()
    }
}

/// The start of a mesh document for an agent at `a_ip` (address `a`)
/// measuring `b_ip` (address `b`, which runs no agent unless `b_agent`):
/// its API port and a group `ab` from a to b.
pub fn pair_head(api: u16, a_ip: &str, b_ip: &str, b_agent: bool) -> String {
    let no_agent = if b_agent { "" } else { "no_agent = true\n" };
    format!(
        "[agent]\napi_port = {api}\n\n[addresses.a]\naddress = \"{a_ip}\"\n[addresses.b]\naddress = \"{b_ip}\"\n\
         {no_agent}\n[groups.ab]\ntype = \"disjoint\"\na = [\"a\"]\nb = [\"b\"]\nunidirectional = true\n\n"
    )
}

/// A pair ([`pair_head`]) with a STAMP task `lat` and a TCP task `tp`
/// that never run (their schedule starts in 2099): for tests that seed
/// the archive and look at what the agent makes of it.
pub fn seeded_pair(api: u16, a_ip: &str, b_ip: &str, b_agent: bool) -> String {
    pair_head(api, a_ip, b_ip, b_agent)
        + r#"[tests.lat]
kind = "stamp"
host = "{{dest}}"

[tests.tp]
kind = "tcp"
hosts = ["{{dest}}"]
duration = "1s"

# Nothing runs during the test: the archive is seeded.
[schedules.later]
repeat = "1d"
start = "2099-01-01T00:00:00Z"

[tasks.lat]
group = "ab"
test = "lat"
schedule = "later"

[tasks.tp]
group = "ab"
test = "tp"
schedule = "later"
"#
}

/// A mesh of `names` at `ips`: throughput every `every` s with `slip` s
/// of slip, STAMP every `every` s in the background.
pub fn mesh_config(
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

pub fn state(r: &Value) -> &str {
    r["state"].as_str().unwrap_or("")
}

/// The base time at the end of a run id (`task/source/dest/BASE_MS`).
pub fn base_ms(id: &str) -> u64 {
    id.rsplit('/').next().unwrap().parse().unwrap()
}

/// The mesh's checks over every agent's archive, read through the API.
/// `every` gives each task's period in seconds (consecutive runs' base
/// times differ by it).
pub fn check_mesh(agents: &[Agent], ports: Ports, every: &[(&str, u64)]) -> (usize, usize, usize) {
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
        for r in runs
            .iter()
            .filter(|r| r["source"] == a.name.as_str() && r["kind"] != "stamp_minute")
        {
            let id = r["id"].as_str().unwrap();
            let pair = id.rsplit_once('/').unwrap().0.to_owned();
            by_pair.entry(pair).or_default().push(base_ms(id));
        }
        assert!(
            !by_pair.is_empty(),
            "agent {} led no run: {}",
            a.name,
            a.log_text()
        );
        for (pair, mut bases) in by_pair {
            bases.sort_unstable();
            bases.dedup();
            let task = pair.split('/').next().unwrap();
            let every_s = every
                .iter()
                .find(|(t, _)| *t == task)
                .unwrap_or_else(|| panic!("no period for task {task}"))
                .1;
            for w in bases.windows(2) {
                assert_eq!(
                    w[1] - w[0],
                    every_s * 1000,
                    "agent {}: pair {pair} has a gap: {bases:?}",
                    a.name
                );
            }
        }
        // Its finished runs: figures, and the same record at the other end.
        for r in runs.iter().filter(|r| {
            r["source"] == a.name.as_str() && state(r) == "finished" && r["kind"] != "stamp_minute"
        }) {
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
                    // Kept as per-minute summaries too, which add up to
                    // exactly the run's packets.
                    let whole = get_json(&a.ip, ports.api, &format!("/api/v1/runs/{id}"));
                    let sent = whole["result"]["stamp"]["total"]["sent"].as_u64().unwrap();
                    let prefix = format!("{id}/minute/");
                    let minutes: Vec<&Value> = runs
                        .iter()
                        .filter(|m| {
                            m["kind"] == "stamp_minute" && m["id"].as_str().unwrap().starts_with(&prefix)
                        })
                        .collect();
                    assert!(!minutes.is_empty(), "run {id} has no minute summary");
                    let mut in_minutes = 0;
                    for m in minutes {
                        let one = get_json(
                            &a.ip,
                            ports.api,
                            &format!("/api/v1/runs/{}", m["id"].as_str().unwrap()),
                        );
                        in_minutes += one["result"]["sent"].as_u64().unwrap();
                        assert!(
                            !one["result"]["rtt_us_histogram"]
                                .as_str()
                                .unwrap_or("")
                                .is_empty(),
                            "{one}"
                        );
                    }
                    assert_eq!(
                        in_minutes, sent,
                        "run {id}: its minutes count {in_minutes} packets, the run {sent}"
                    );
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
