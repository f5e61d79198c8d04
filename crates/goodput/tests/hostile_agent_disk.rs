//! The agent's archive on a disk that fills (item 5 of the hardening
//! issue): an agent with its archive on a small tmpfs, which a filler file
//! fills while the agent runs, the agent's peer hands it results and books
//! runs, and a client asks for runs. While full, every write is refused
//! with 503 naming the full disk, and health and `/metrics` say so; no
//! write is answered 2xx that is not stored. Once the tmpfs is grown the
//! agent takes writes again by itself, stores the runs of its own it held
//! meanwhile, and after a restart every write it answered 2xx is there.
//!
//! Root only (mount); elsewhere it skips, and fails under `CI`.

mod common;

use common::agents::http_from;
use common::{now_ms, wait_for};

use std::io::Write;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use common::agents::{get_json, http, mesh_config, Agent, Ports, TOKEN};
use serde_json::Value;

const GROUP: &str = "agent-disk";
/// The agent, and its peer (played by this test, from the peer's
/// address; no agent runs there).
const A: &str = "127.0.0.61";
const B: &str = "127.0.0.62";
/// The mesh's period (s): a's own runs to b are due this often (each a
/// non-start: b's agent does not answer).
const EVERY: u64 = 4;

/// A tmpfs on a scratch directory, unmounted when dropped (also when the
/// test fails; lazily, in case a process still has a file open there).
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(size: &str) -> Option<Tmpfs> {
        let dir = common::tmp(GROUP, "fs");
        std::fs::create_dir_all(&dir).unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&dir)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            assert!(
                std::env::var_os("CI").is_none(),
                "cannot mount a tmpfs (the test needs root)"
            );
            eprintln!("cannot mount a tmpfs (not root?): skipping");
            return None;
        }
        Some(Tmpfs(dir))
    }

    fn resize(&self, size: &str) {
        let ok = Command::new("mount")
            .args(["-o", &format!("remount,size={size}")])
            .arg(&self.0)
            .status()
            .unwrap();
        assert!(ok.success(), "remount to {size}");
    }

    /// Fills what is left with a file; its size.
    fn fill(&self) -> u64 {
        let mut f = std::fs::File::create(self.0.join("filler")).unwrap();
        let chunk = vec![0x5au8; 64 << 10];
        let mut n = 0u64;
        while f.write_all(&chunk).is_ok() {
            n += chunk.len() as u64;
            assert!(n < 1 << 30, "the tmpfs never filled");
        }
        // The last partial chunk too.
        while f.write_all(&chunk[..512]).is_ok() {
            n += 512;
        }
        let _ = f.sync_all();
        n
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// What the agent answered 2xx for: each run id and the state it was
/// given in that write.
#[derive(Default)]
struct Acknowledged(Vec<(String, &'static str)>);

/// The writes of one round: the peer books run b→a `n` (201) and hands
/// over its result (204); a client asks for an on-demand run (201). Each
/// answer is 2xx or a 503 that names the full disk; what was 2xx is noted.
/// The 503s' bodies.
fn round(ports: Ports, n: u64, acked: &mut Acknowledged) -> Vec<String> {
    let mut refused = Vec::new();
    let mut check = |what: &str, status: u16, body: String| -> bool {
        match status {
            200..=299 => true,
            503 => {
                assert!(
                    body.contains("the archive's disk is full"),
                    "{what}: 503 without the reason: {body}"
                );
                refused.push(body);
                false
            }
            _ => panic!("{what}: {status} {body}"),
        }
    };
    // A slot well ahead, on a base time of the schedule (its period),
    // 3 s long (the 1 s test and the 2 s margin).
    let every = EVERY * 1000;
    let base = (now_ms() / every + 100 + n * 2) * every;
    let id = format!("throughput/b/a/{base}");
    let spec = format!(
        r#"{{"kind": "tcp", "hosts": ["{A}:{}"], "duration": "1s"}}"#,
        ports.beacon
    );
    let booking = format!(
        r#"{{"id": "{id}", "task": "throughput", "source": "b", "dest": "a", "spec": {spec},
            "class": "exclusive", "scheduled_ms": {base}, "start_ms": {base}, "end_ms": {}}}"#,
        base + 3000
    );
    let (status, body) = http_from(B, A, ports.api, "POST", "/api/v1/reservations", &booking);
    let booked = check("booking", status, body);
    if booked {
        acked.0.push((id.clone(), "scheduled"));
    }
    // A peer runs only what was booked: of a run a refused it hands over
    // only that it did not start (a result would be refused as never
    // booked there, 403).
    let (state, reason) = if booked {
        ("finished", "null")
    } else {
        ("non_start", r#""a refused the booking""#)
    };
    let result = format!(
        r#"{{"id": "{id}", "task": "throughput", "source": "b", "dest": "a", "kind": "tcp",
            "class": "exclusive", "state": "{state}", "reason": {reason}, "scheduled_ms": {base},
            "start_ms": {base}, "end_ms": {}, "measurement_key": "", "spec": {spec},
            "result": null, "figures": {{"throughput_up_bps": {}}}}}"#,
        base + 1000,
        1e9 + n as f64
    );
    let (status, body) = http_from(B, A, ports.api, "PUT", &format!("/api/v1/runs/{id}"), &result);
    if check("result", status, body) {
        acked.0.push((id, state));
    }
    let ask = format!(
        r#"{{"spec": {{"kind": "tcp", "hosts": ["{B}:{}"], "duration": "1s"}}, "dest": "b"}}"#,
        ports.beacon
    );
    let (status, body) = http(A, ports.api, "POST", "/api/v1/runs", Some(TOKEN), &ask);
    if check("on-demand run", status, body.clone()) {
        let v: Value = serde_json::from_str(&body).unwrap();
        let state = if v["state"] == "non_start" {
            "non_start"
        } else {
            "scheduled"
        };
        acked.0.push((v["id"].as_str().unwrap().to_string(), state));
    }
    refused
}

/// Every run the agent answered 2xx for is in its archive, in the state
/// of the write acknowledged last (or one after it: a booked run may have
/// ended since).
fn nothing_acknowledged_is_lost(ports: Ports, acked: &Acknowledged, when: &str) {
    let runs = get_json(A, ports.api, "/api/v1/runs?limit=10000");
    let runs = runs.as_array().unwrap();
    let mut last: std::collections::BTreeMap<&str, &str> = Default::default();
    for (id, state) in &acked.0 {
        last.insert(id, state);
    }
    for (id, state) in last {
        let r = runs
            .iter()
            .find(|r| r["id"] == id)
            .unwrap_or_else(|| panic!("{when}: run {id}, answered {state}, is not in the archive"));
        let now = r["state"].as_str().unwrap();
        // A booking may have ended since; a result or a non-start stays.
        if state != "scheduled" {
            assert_eq!(now, state, "{when}: run {id}: {r}");
        }
    }
}

fn health(ports: Ports) -> Value {
    get_json(A, ports.api, "/api/v1/health")
}

fn metric(ports: Ports, name: &str) -> String {
    let (status, text) = http(A, ports.api, "GET", "/metrics", None, "");
    assert_eq!(status, 200, "{text}");
    text.lines()
        .find(|l| l.split_whitespace().next() == Some(name))
        .unwrap_or_else(|| panic!("no {name} in /metrics: {text}"))
        .to_string()
}

/// a's own runs (to b) scheduled in `[from, to)`.
fn own_runs(ports: Ports, from: u64, to: u64) -> Vec<Value> {
    let v = get_json(
        A,
        ports.api,
        &format!("/api/v1/runs?source=a&from_ms={from}&to_ms={to}&limit=10000"),
    );
    v.as_array()
        .unwrap()
        .iter()
        .filter(|r| !r["id"].as_str().unwrap_or("").starts_with("on-demand/"))
        .cloned()
        .collect()
}

#[test]
fn a_full_disk_refuses_writes_loses_nothing_acknowledged_and_recovers_by_itself() {
    let Some(fs) = Tmpfs::mount("16m") else {
        return;
    };
    let ports = Ports::pick();
    let config = mesh_config(GROUP, &["a", "b"], &[A, B], ports, EVERY, 1, "");
    let mut a = Agent {
        name: "a".into(),
        ip: A.into(),
        archive: fs.0.join("a.sqlite"),
        log: common::tmp(GROUP, "a.log"),
        child: None,
        netns: None,
    };
    a.spawn(&config, ports, &[]);
    let mut acked = Acknowledged::default();

    // Room: every write is taken.
    for n in 0..3 {
        let refused = round(ports, n, &mut acked);
        assert!(refused.is_empty(), "{refused:?}");
    }
    assert_eq!(health(ports)["archive_disk_full"], false);

    // The disk fills.
    let filled_ms = now_ms();
    let filler = fs.fill();
    assert!(filler > 1 << 20, "{filler}");
    let mut refused = Vec::new();
    let mut n = 3;
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        refused.extend(round(ports, n, &mut acked));
        n += 1;
        let h = health(ports);
        // Refused, said so, and a's own runs due meanwhile held.
        if refused.len() >= 3 && h["archive_disk_full"] == true && h["archive_held_runs"].as_u64() >= Some(2)
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "full for 40 s: {} writes refused, health {h}\n{}",
            refused.len(),
            a.log_text()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    // Full for two periods more: a's own runs are due meanwhile.
    let until = Instant::now() + Duration::from_secs(2 * EVERY + 1);
    while Instant::now() < until {
        refused.extend(round(ports, n, &mut acked));
        n += 1;
        std::thread::sleep(Duration::from_millis(500));
    }
    let h = health(ports);
    assert!(
        h["archive_write_error"].as_str().unwrap_or("").contains("full"),
        "{h}"
    );
    assert_eq!(
        metric(ports, "goodput_agent_archive_disk_full"),
        "goodput_agent_archive_disk_full 1"
    );
    let held = h["archive_held_runs"].as_u64().unwrap();
    assert!(held >= 2, "{h}");
    // What it answered 2xx while full is there (read back now, and again
    // after the disk grows and after a restart).
    nothing_acknowledged_is_lost(ports, &acked, "while full");

    // Space returns: the agent finds it by itself (no restart, no call).
    fs.resize("256m");
    let grown_ms = now_ms();
    wait_for(Duration::from_secs(20), "writes taken again", || {
        let h = health(ports);
        (h["archive_disk_full"] == false && h["archive_held_runs"] == 0).then_some(())
    });
    assert_eq!(
        metric(ports, "goodput_agent_archive_disk_full"),
        "goodput_agent_archive_disk_full 0"
    );
    assert_eq!(health(ports)["archive_runs_given_up"], 0);
    // Every run of its own due while the disk was full was held and is
    // stored now: each task's run of each base time (a multiple of the
    // period) that was placed (1.5 s ahead) and due (within its 1 s slip)
    // between the filling and the growth.
    let runs = get_json(A, ports.api, "/api/v1/runs?source=a&limit=10000");
    let every = EVERY * 1000;
    let mut due = Vec::new();
    let mut base = (filled_ms + 2000).div_ceil(every) * every;
    while base + 1000 < grown_ms {
        due.extend(["throughput", "latency"].map(|t| format!("{t}/a/b/{base}")));
        base += every;
    }
    assert!(
        due.len() >= 2,
        "full from {filled_ms} to {grown_ms}: no run was due"
    );
    for id in &due {
        assert!(
            runs.as_array().unwrap().iter().any(|r| r["id"] == id.as_str()),
            "run {id}, due while the disk was full, is lost"
        );
    }
    for _ in 0..3 {
        let refused = round(ports, n, &mut acked);
        n += 1;
        assert!(refused.is_empty(), "refused after the disk grew: {refused:?}");
    }
    // New runs of its own are stored as they come.
    wait_for(
        Duration::from_secs(3 * EVERY),
        "a new run of a's own stored",
        || (!own_runs(ports, grown_ms + 500, now_ms() + 60_000).is_empty()).then_some(()),
    );
    nothing_acknowledged_is_lost(ports, &acked, "after the disk grew");

    // And after a restart.
    a.stop(libc::SIGTERM);
    a.spawn(&config, ports, &[]);
    nothing_acknowledged_is_lost(ports, &acked, "after a restart");
    eprintln!(
        "{} writes answered 2xx, all kept; {} refused with 503 while full; {held} runs of a's own \
         held at once, {} due while full, all stored",
        acked.0.len(),
        refused.len(),
        due.len()
    );
    let h = health(ports);
    assert_eq!(h["archive_disk_full"], false, "{h}");
    a.stop(libc::SIGTERM);
}
