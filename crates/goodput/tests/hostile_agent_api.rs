//! The agent's API attacked as a stranger would: floods of idle
//! connections from many addresses, slow request bodies with and without
//! the token, idle and half-sent requests — while a normal client's
//! health request and the peer's calls must still be answered within a
//! second and the mesh's scheduled runs still finish. And a run that runs
//! out of descriptors is stored `failed`, never `finished`.
//!
//! Agents run under the servers' address-space limit (the harness's) and
//! a descriptor limit set here on the running process.

mod common;

use common::agents::connect_from;
use common::now_ms;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::agents::{get_json, state, Agent, Ports, TOKEN};
use serde_json::Value;

const A: &str = "127.0.5.1";
const B: &str = "127.0.5.2";

/// One test at a time: each puts the machine under a flood, and the
/// others' one-second bounds must not measure it.
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// Raises this test process's descriptor limit to its hard limit (the
/// flood holds thousands of sockets); returns it.
fn raise_own_descriptors() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit on this process with a valid struct.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
        lim.rlim_cur = lim.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
    }
    lim.rlim_cur
}

/// Sets a running process's soft descriptor limit (`prlimit(2)`; the hard
/// one stays, so it can be raised again).
fn limit_descriptors(pid: u32, n: u64) {
    let mut old = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: prlimit on a child this test started, with valid structs.
    let rc = unsafe { libc::prlimit(pid as i32, libc::RLIMIT_NOFILE, std::ptr::null(), &mut old) };
    assert_eq!(rc, 0, "prlimit: {}", std::io::Error::last_os_error());
    let lim = libc::rlimit {
        rlim_cur: n.min(old.rlim_max),
        rlim_max: old.rlim_max,
    };
    // SAFETY: as above.
    let rc = unsafe { libc::prlimit(pid as i32, libc::RLIMIT_NOFILE, &lim, std::ptr::null_mut()) };
    assert_eq!(rc, 0, "prlimit: {}", std::io::Error::last_os_error());
}

fn open_descriptors(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// One request from `src`; its status (0: no answer) and how long it took.
fn timed(
    src: &str,
    dst: &str,
    port: u16,
    method: &str,
    path: &str,
    token: bool,
    body: &str,
) -> (u16, Duration) {
    let t = Instant::now();
    let Ok(mut s) = connect_from(src, dst, port, Duration::from_secs(5)) else {
        return (0, t.elapsed());
    };
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let auth = if token {
        format!("Authorization: Bearer {TOKEN}\r\n")
    } else {
        String::new()
    };
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {dst}\r\n{auth}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    if s.write_all(req.as_bytes()).is_err() {
        return (0, t.elapsed());
    }
    let mut head = [0u8; 64];
    let n = s.read(&mut head).unwrap_or(0);
    let status = String::from_utf8_lossy(&head[..n])
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, t.elapsed())
}

/// The status line's code of whatever the server sent on `s` within
/// `wait` (0: nothing, or the connection closed).
fn status_within(s: &mut TcpStream, wait: Duration) -> u16 {
    s.set_read_timeout(Some(wait)).unwrap();
    let mut head = [0u8; 64];
    let n = s.read(&mut head).unwrap_or(0);
    String::from_utf8_lossy(&head[..n])
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

/// Whether the server closed `s` within `wait` (a read sees the end, or
/// a reset).
fn closed_within(s: &mut TcpStream, wait: Duration) -> bool {
    s.set_read_timeout(Some(wait)).unwrap();
    let mut b = [0u8; 256];
    loop {
        match s.read(&mut b) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return false
            }
            Err(_) => return true,
        }
    }
}

/// Polls a request every 200 ms until stopped; the worst time and the
/// statuses that were not `want`.
struct Probe {
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<(Duration, Vec<u16>, u32)>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Probe {
    fn start(
        src: &'static str,
        port: u16,
        method: &'static str,
        path: &'static str,
        token: bool,
        want: u16,
    ) -> Probe {
        let stop = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(Mutex::new((Duration::ZERO, Vec::new(), 0u32)));
        let thread = {
            let (stop, seen) = (stop.clone(), seen.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let body = if method == "GET" { "" } else { "{}" };
                    let (status, took) = timed(src, A, port, method, path, token, body);
                    let mut s = seen.lock().unwrap();
                    s.0 = s.0.max(took);
                    s.2 += 1;
                    if status != want {
                        s.1.push(status);
                    }
                    drop(s);
                    std::thread::sleep(Duration::from_millis(200));
                }
            })
        };
        Probe {
            stop,
            seen,
            thread: Some(thread),
        }
    }

    /// The worst time, the unexpected statuses, and how many were asked.
    fn finish(mut self) -> (Duration, Vec<u16>, u32) {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().unwrap().join().unwrap();
        self.seen.lock().unwrap().clone()
    }
}

/// A mesh of `a` and `b`: throughput (exclusive, booked with the other
/// agent) and STAMP every `every` s.
fn two_agents(group: &str, every: u64, slip: u64, extra_a: &[&str]) -> (Ports, Agent, Agent) {
    let ports = Ports::pick();
    let config = common::agents::mesh_config(group, &["a", "b"], &[A, B], ports, every, slip, "");
    let a = Agent::start(group, "a", A, &config, ports, extra_a);
    let b = Agent::start(group, "b", B, &config, ports, &[]);
    (ports, a, b)
}

fn pid(a: &Agent) -> u32 {
    a.child.as_ref().unwrap().pid()
}

fn connections(ports: Ports) -> Value {
    get_json(A, ports.api, "/api/v1/health")["connections"].clone()
}

/// Ceilings the agent stays under after an attack (documented in the
/// guide's agent-security page, docs/guide/agent-security.md).
const RSS_CEILING_KIB: u64 = 256 << 10;
const DESCRIPTORS_AFTER: usize = 200;

#[test]
fn a_flood_of_connections_from_many_addresses_starves_no_one() {
    let _one = one_at_a_time();
    let own = raise_own_descriptors();
    // What this process may hold, less room for the probes and agents'
    // pipes: 18,000 with the usual hard limit of 20,000.
    let flood = (own.saturating_sub(2000) as usize).min(24_000);
    assert!(flood >= 10_000, "this process may open only {own} descriptors");
    // b's throughput runs to a, booked with a (the flooded agent) every
    // 6 s, and STAMP both ways: nothing of the mesh's own collides, so a
    // run that does not finish could only be the flood's doing.
    let group = "hostile-api-flood";
    let ports = Ports::pick();
    let config = common::tmp(group, "mesh.toml");
    std::fs::write(
        &config,
        format!(
            r#"[agent]
api_port = {api}
[addresses.a]
address = "{A}"
[addresses.b]
address = "{B}"
[groups.both]
type = "mesh"
addresses = ["a", "b"]
[groups.b-to-a]
type = "disjoint"
a = ["b"]
b = ["a"]
unidirectional = true
[tests.throughput]
kind = "tcp"
hosts = ["{{{{dest}}}}:{beacon}"]
duration = "1s"
[tests.latency]
kind = "stamp"
host = "{{{{dest}}}}"
port = {stamp}
count = 20
interval = "20ms"
[schedules.often]
repeat = "PT6S"
slip = "PT2S"
sliprand = true
[tasks.throughput]
group = "b-to-a"
test = "throughput"
schedule = "often"
[tasks.latency]
group = "both"
test = "latency"
schedule = "often"
"#,
            api = ports.api,
            beacon = ports.beacon,
            stamp = ports.stamp
        ),
    )
    .unwrap();
    let a = Agent::start(group, "a", A, &config, ports, &[]);
    let b = Agent::start(group, "b", B, &config, ports, &[]);
    // The agent's descriptors as an operator might set them: the flood
    // below holds over four times as many connections.
    limit_descriptors(pid(&a), 4096);
    std::thread::sleep(Duration::from_secs(6));
    let health = Probe::start("127.0.0.1", ports.api, "GET", "/api/v1/health", false, 200);
    let peer = Probe::start(B, ports.api, "GET", "/api/v1/schedule", false, 200);
    let flood_start_ms = now_ms();
    // `flood` connections from 60 addresses, opened as fast as the agent
    // takes them, held, and the oldest closed for new ones once `flood`
    // are held, for 24 s.
    let started = Instant::now();
    let mut held: std::collections::VecDeque<TcpStream> = std::collections::VecDeque::new();
    let (mut opened, mut failed) = (0u32, 0u32);
    let mut open_seen = 0u64;
    while started.elapsed() < Duration::from_secs(24) {
        if held.len() >= flood {
            held.pop_front();
        }
        let src = format!("127.0.9.{}", 1 + (opened + failed) % 60);
        match connect_from(&src, A, ports.api, Duration::from_millis(300)) {
            Ok(s) => {
                held.push_back(s);
                opened += 1;
            }
            Err(_) => failed += 1,
        }
        if (opened + failed) % 2000 == 0 {
            let c = connections(ports);
            if let (Some(open), Some(max)) = (c["open"].as_u64(), c["max"].as_u64()) {
                assert!(open <= max, "more connections open than the cap: {c}");
                open_seen = open_seen.max(open);
            }
        }
    }
    let flood_end_ms = now_ms();
    let (worst_health, bad_health, asked_health) = health.finish();
    let (worst_peer, bad_peer, asked_peer) = peer.finish();
    eprintln!(
        "flood: {opened} connections opened ({failed} not), up to {open_seen} open at the agent; \
         health {asked_health} asked, worst {worst_health:?}; peer {asked_peer} asked, worst {worst_peer:?}"
    );
    assert!(
        opened as usize >= flood,
        "the flood opened only {opened} connections"
    );
    assert!(
        bad_health.is_empty(),
        "health answered {bad_health:?} during the flood"
    );
    assert!(bad_peer.is_empty(), "the peer's calls answered {bad_peer:?}");
    assert!(
        worst_health < Duration::from_secs(1),
        "health took {worst_health:?}"
    );
    assert!(
        worst_peer < Duration::from_secs(1),
        "the peer's call took {worst_peer:?}"
    );
    let c = connections(ports);
    assert!(
        c["max"].as_u64().unwrap() <= 2048,
        "the cap is held to half of 4096 descriptors: {c}"
    );
    // 60 addresses reach the overall cap (1024) before their own (32
    // each): the rest of the flood was closed at once.
    assert!(
        c["refused_full"].as_u64().unwrap() as usize >= flood / 2,
        "the overall cap did not hold the flood: {c}"
    );
    drop(held);
    // The mesh's runs due during the flood, both ways, all finished —
    // the throughput ones booked with the other agent through the flood.
    std::thread::sleep(Duration::from_secs(8));
    for agent in [&a, &b] {
        let during: Vec<Value> = agent
            .runs(ports)
            .into_iter()
            .filter(|r| r["source"] == agent.name.as_str())
            .filter(|r| {
                let at = r["scheduled_ms"].as_u64().unwrap_or(0);
                at >= flood_start_ms && at + 4000 <= flood_end_ms
            })
            .collect();
        // Every one finished: b's throughput runs booked with a through
        // the flood, and each agent's STAMP runs.
        let kinds: &[&str] = if agent.name == "b" {
            &["tcp", "stamp"]
        } else {
            &["stamp"]
        };
        for kind in kinds {
            assert!(
                during.iter().filter(|r| r["kind"] == *kind).count() >= 2,
                "{}: too few {kind} runs were due during the flood: {during:?}",
                agent.name
            );
        }
        for r in &during {
            assert_eq!(state(r), "finished", "{}: {r}", agent.name);
        }
    }
    // Afterwards: descriptors given back, memory under its ceiling.
    let p = pid(&a);
    let deadline = Instant::now() + Duration::from_secs(15);
    while open_descriptors(p) > DESCRIPTORS_AFTER && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    let fds = open_descriptors(p);
    let rss = common::proc_kib(p, "VmRSS");
    let hwm = common::proc_kib(p, "VmHWM");
    eprintln!("after the flood: {fds} descriptors, RSS {rss} KiB (peak {hwm} KiB)");
    assert!(fds <= DESCRIPTORS_AFTER, "{fds} descriptors still open");
    assert!(hwm < RSS_CEILING_KIB, "peak RSS {hwm} KiB");
    let metrics = common::agents::http(A, ports.api, "GET", "/metrics", None, "").1;
    assert!(
        metrics.contains("goodput_agent_api_refused_total{limit=\"connections_per_address\"}"),
        "{metrics}"
    );
}

#[test]
fn slow_bodies_idle_and_half_sent_requests_hold_nothing_others_need() {
    let _one = one_at_a_time();
    raise_own_descriptors();
    let (ports, a, _b) = two_agents(
        "hostile-api-slow",
        4,
        1,
        &["--header-timeout", "2s", "--body-timeout", "2s"],
    );
    limit_descriptors(pid(&a), 4096);
    let health = Probe::start("127.0.0.1", ports.api, "GET", "/api/v1/health", false, 200);
    let peer_read = Probe::start(B, ports.api, "GET", "/api/v1/schedule", false, 200);
    // The peer's token-bearing write path: a run it hands over that does
    // not read is refused with 400 — an answer, not a 503 or a timeout.
    let peer_write = Probe::start(B, ports.api, "PUT", "/api/v1/runs/x", true, 400);
    // 200 strangers announce 4 MB bodies and send one byte: each is
    // refused on its headers, at once.
    let t = Instant::now();
    let mut strangers = Vec::new();
    for i in 0..200 {
        let src = format!("127.0.8.{}", 1 + i % 10);
        let mut s = connect_from(&src, A, ports.api, Duration::from_secs(2)).unwrap();
        s.write_all(b"POST /api/v1/runs HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\nContent-Length: 4000000\r\n\r\n{")
            .unwrap();
        strangers.push(s);
    }
    let refused = strangers
        .iter_mut()
        .map(|s| status_within(s, Duration::from_secs(2)))
        .filter(|st| *st == 401)
        .count();
    eprintln!(
        "200 stranger bodies: {refused} refused with 401 in {:?}",
        t.elapsed()
    );
    assert_eq!(refused, 200, "every tokenless body is refused on its headers");
    // A token holder's 40 slow bodies (64 KiB announced, a byte a second):
    // 32 connections let in, 8 requests read at a time, the others 429,
    // and the 8 cut off with 408 at 2 s + 1 s for the size.
    let mut slow = Vec::new();
    let mut shut_out = 0;
    for _ in 0..40 {
        match connect_from("127.0.8.50", A, ports.api, Duration::from_secs(2)) {
            Ok(mut s) => {
                let head = format!(
                    "POST /api/v1/runs HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\nContent-Length: 65536\r\n\r\n{{"
                );
                if s.write_all(head.as_bytes()).is_ok() {
                    slow.push(s);
                } else {
                    shut_out += 1;
                }
            }
            Err(_) => shut_out += 1,
        }
    }
    let dribble_until = Instant::now() + Duration::from_secs(6);
    let mut statuses = vec![0u16; slow.len()];
    while Instant::now() < dribble_until {
        for (s, st) in slow.iter_mut().zip(statuses.iter_mut()) {
            if *st == 0 {
                let _ = s.write_all(b" ");
                *st = status_within(s, Duration::from_millis(20));
            }
        }
        std::thread::sleep(Duration::from_millis(900));
    }
    let count = |c: u16| statuses.iter().filter(|s| **s == c).count();
    eprintln!(
        "40 slow token bodies: {} connected, {} 429, {} 408, {} closed at once (the per-address cap), all: {:?}",
        slow.len(),
        count(429),
        count(408),
        shut_out + count(0),
        statuses
    );
    // Eight bodies were read at a time and cut off at their deadline;
    // every other request was turned away, at its request (429) or, while
    // the address held its 32 connections, at connect (a connection
    // turned away with 429 is closed, so how many of the last 8 find a
    // place depends on how fast the agent accepts).
    assert_eq!(count(408), 8, "the bodies being read were cut off: {statuses:?}");
    assert_eq!(
        count(429) + count(0) + shut_out,
        32,
        "the address's other requests were turned away: {statuses:?}"
    );
    // 40 idle connections from one address: 32 are let in and the other
    // 8 closed at once; a half-sent request and the 32 are closed by the
    // header deadline.
    let mut idle: Vec<TcpStream> = (0..40)
        .map(|_| connect_from("127.0.7.1", A, ports.api, Duration::from_secs(2)).unwrap())
        .collect();
    let mut half = connect_from("127.0.7.2", A, ports.api, Duration::from_secs(2)).unwrap();
    half.write_all(b"GET /api/v1/health HTTP/1.1\r\nHost: a\r\n")
        .unwrap();
    let t = Instant::now();
    // Well inside the 2 s header deadline: which are closed already.
    std::thread::sleep(Duration::from_millis(300));
    let at_once = idle
        .iter_mut()
        .filter_map(|s| closed_within(s, Duration::from_millis(1)).then_some(()))
        .count();
    assert_eq!(at_once, 8, "one address holds at most 32 connections");
    assert!(
        closed_within(&mut half, Duration::from_secs(5)),
        "a half-sent request stayed open"
    );
    for s in &mut idle {
        assert!(
            closed_within(s, Duration::from_secs(5)),
            "an idle connection stayed open"
        );
    }
    eprintln!("idle and half-sent connections closed after {:?}", t.elapsed());
    let (worst_health, bad_health, _) = health.finish();
    let (worst_read, bad_read, _) = peer_read.finish();
    let (worst_write, bad_write, asked_write) = peer_write.finish();
    eprintln!("health worst {worst_health:?}; peer read {worst_read:?}, write {worst_write:?} ({asked_write} asked)");
    assert!(
        bad_health.is_empty() && bad_read.is_empty(),
        "{bad_health:?} {bad_read:?}"
    );
    assert!(bad_write.is_empty(), "the peer's writes answered {bad_write:?}");
    for w in [worst_health, worst_read, worst_write] {
        assert!(w < Duration::from_secs(1), "a call took {w:?}");
    }
    let c = connections(ports);
    eprintln!("counters: {c}");
    assert!(c["refused_before_body"].as_u64().unwrap() >= 200, "{c}");
    assert!(c["slow_bodies"].as_u64().unwrap() >= 8, "{c}");
    assert!(c["requests_refused_per_address"].as_u64().unwrap() >= 24, "{c}");
    assert!(c["refused_per_address"].as_u64().unwrap() >= 8, "{c}");
    drop((strangers, slow, idle, half));
    let p = pid(&a);
    std::thread::sleep(Duration::from_secs(1));
    let (fds, hwm) = (open_descriptors(p), common::proc_kib(p, "VmHWM"));
    eprintln!("after: {fds} descriptors, peak RSS {hwm} KiB");
    assert!(fds <= DESCRIPTORS_AFTER, "{fds} descriptors still open");
    assert!(hwm < RSS_CEILING_KIB, "peak RSS {hwm} KiB");
}

#[test]
fn a_run_that_runs_out_of_descriptors_is_failed_with_that_reason() {
    let _one = one_at_a_time();
    let ports = Ports::pick();
    // STAMP only, 64 sessions each from its own socket, every 3 s.
    let config = common::tmp("hostile-api-fds", "mesh.toml");
    std::fs::write(
        &config,
        format!(
            r#"[agent]
api_port = {api}
[addresses.a]
address = "{A}"
[addresses.b]
address = "{B}"
[groups.ab]
type = "mesh"
addresses = ["a", "b"]
[tests.latency]
kind = "stamp"
host = "{{{{dest}}}}"
port = {stamp}
count = 10
interval = "20ms"
sessions = 64
[schedules.often]
repeat = "PT3S"
slip = "PT1S"
# Normal, not background: a background STAMP run's sessions share the
# agent's session hub's one socket and need no descriptor of their own;
# a normal run's sender opens a socket per session.
[tasks.latency]
group = "ab"
test = "latency"
schedule = "often"
class = "normal"
"#,
            api = ports.api,
            stamp = ports.stamp
        ),
    )
    .unwrap();
    let a = Agent::start("hostile-api-fds", "a", A, &config, ports, &[]);
    let _b = Agent::start("hostile-api-fds", "b", B, &config, ports, &[]);
    std::thread::sleep(Duration::from_secs(5));
    // Sixteen descriptors to spare: most of a run's 64 sessions get none.
    let p = pid(&a);
    // Its descriptors between runs (a run holds 64 sockets while it
    // lasts): the least seen over two periods.
    let idle = (0..60)
        .map(|_| {
            std::thread::sleep(Duration::from_millis(100));
            open_descriptors(p)
        })
        .min()
        .unwrap();
    let limited_from = now_ms();
    limit_descriptors(p, idle as u64 + 16);
    std::thread::sleep(Duration::from_secs(8));
    limit_descriptors(p, 4096);
    let limited_to = now_ms();
    std::thread::sleep(Duration::from_secs(8));
    let runs: Vec<Value> = a
        .runs(ports)
        .into_iter()
        .filter(|r| r["source"] == "a" && r["kind"] == "stamp")
        .collect();
    let started = |r: &Value| r["start_ms"].as_u64().unwrap_or(0);
    let short: Vec<&Value> = runs
        .iter()
        .filter(|r| started(r) > limited_from + 500 && started(r) + 1000 < limited_to)
        .collect();
    assert!(short.len() >= 2, "no runs while descriptors were short: {runs:?}");
    for r in &short {
        assert_eq!(state(r), "failed", "a run short of descriptors: {r}");
        let why = r["reason"].as_str().unwrap_or("");
        assert!(why.contains("descriptors") && why.contains("of 64"), "{why}");
    }
    eprintln!("while short: {}", short[0]["reason"]);
    let after: Vec<&Value> = runs
        .iter()
        .filter(|r| started(r) > limited_to + 500 && !matches!(state(r), "scheduled" | "running"))
        .collect();
    assert!(!after.is_empty(), "no runs after the limit was lifted");
    assert!(after.iter().all(|r| state(r) == "finished"), "{after:?}");
}

#[test]
fn secrets_in_the_configuration_never_leave_the_agent() {
    let _one = one_at_a_time();
    let ports = Ports::pick();
    let secrets = ["am-s3cret-pw", "hook-k3y-0451", "fleet-pw-9917", "logs-t0ken-77"];
    let extra = format!(
        r#"
[[alerts.send_to]]
alertmanager = "http://alerts:{}@127.0.0.1:9"
[[alerts.send_to]]
webhook = "http://127.0.0.1:9/hook?api_key={}&team=net"
[archives.fleet]
url = "http://fleet:{}@127.0.0.1:9"
[archives.logs]
url = "http://127.0.0.1:9/in?token={}"
kind = "http"
"#,
        secrets[0], secrets[1], secrets[2], secrets[3]
    );
    let config =
        common::agents::mesh_config("hostile-api-secrets", &["a", "b"], &[A, B], ports, 30, 1, &extra);
    let a = Agent::start("hostile-api-secrets", "a", A, &config, ports, &[]);
    // Forwarding and alert delivery fail (nothing listens on port 9) and
    // are logged and shown.
    std::thread::sleep(Duration::from_secs(6));
    let mut seen = Vec::new();
    for path in [
        "/api/v1/config",
        "/api/v1/health",
        "/metrics",
        "/ui/host",
        "/api/v1/fleet/config",
    ] {
        let (status, body) = common::agents::http(A, ports.api, "GET", path, None, "");
        seen.push((path.to_string(), status, body));
    }
    seen.push(("the log".into(), 200, a.log_text()));
    for (what, _, body) in &seen {
        for s in secrets {
            assert!(!body.contains(s), "{what} shows the secret {s}:\n{body}");
        }
    }
    // The views still say where things go, without the secret.
    let config = &seen[0].2;
    assert!(config.contains("http://fleet:…@127.0.0.1:9"), "{config}");
    assert!(config.contains("api_key=…&team=net"), "{config}");
    let health = &seen[1].2;
    assert!(health.contains("token=…"), "{health}");
    // The fleet's agents, holding the token, get the document whole.
    let (status, whole) = common::agents::http(A, ports.api, "GET", "/api/v1/fleet/config", Some(TOKEN), "");
    assert_eq!(status, 200, "{whole}");
    assert!(whole.contains(secrets[2]), "{whole}");
}
