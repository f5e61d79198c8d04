//! The agent as a perfSONAR pScheduler participant (`goodput agent
//! --pscheduler-listen`), driven as a real lead drives it: the requests a
//! pScheduler lead made of a pScheduler participant for one throughput
//! run (recorded, `data/pscheduler/`) are replayed against an agent on
//! loopback, with their times moved to now, and Debian's iperf3 client
//! (what pScheduler's iperf3 tool runs on the source) tests to the port
//! the participant data names. The participant's result, its archive row
//! and the port closed after the run are checked; then a hostile lead:
//! a stranger's address, absurd specs, a flood of tasks, a run cancelled
//! while its server is up, and a run abandoned.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::agents::{connect_from, get_json, Agent, Ports};
use common::{free_tcp_port, have, now_ms, tmp, wait_tcp_listening};
use serde_json::{json, Value};

/// One HTTPS request as pScheduler's client sends it (curl, no
/// certificate check, the path as given); the status and the body.
fn call(port: u16, from: &str, method: &str, path: &str, body: Option<&str>) -> (u16, String) {
    let mut cmd = Command::new("curl");
    cmd.args(["-sk", "--path-as-is", "--max-time", "40", "--interface", from])
        .args(["-X", method, "-w", "\n%{http_code}"])
        .arg(format!("https://127.0.0.1:{port}{path}"));
    if let Some(b) = body {
        cmd.args(["-H", "Content-Type: application/json", "--data-binary", b]);
    }
    let out = cmd.output().expect("curl runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, status) = text.rsplit_once('\n').unwrap_or(("", &text));
    (status.trim().parse().unwrap_or(0), body.to_owned())
}

/// An ISO 8601 time as pScheduler writes one.
fn iso(ms: u64) -> String {
    let t = goodput_core::time::ms_rfc3339(ms);
    format!("{}+00:00", t.trim_end_matches('Z'))
}

/// The agent's pScheduler options: its API on loopback for this test's
/// lead, and the runs' iperf3 port.
fn ps_args(ps_port: u16, iperf3_port: u16) -> Vec<String> {
    vec![
        "--pscheduler-listen".to_owned(),
        format!("127.0.0.1:{ps_port}"),
        "--pscheduler-allow".to_owned(),
        "127.0.0.1/32".to_owned(),
        "--pscheduler-iperf3-port".to_owned(),
        iperf3_port.to_string(),
    ]
}

fn start_agent(group: &str, ps_port: u16, iperf3_port: u16, extra: &[&str]) -> (Agent, Ports) {
    let ports = Ports::pick();
    let config = tmp(group, "mesh.toml");
    std::fs::write(
        &config,
        format!(
            "[agent]\napi_port = {}\n\n[addresses.gp]\naddress = \"127.0.0.1\"\n",
            ports.api
        ),
    )
    .unwrap();
    let mut args = ps_args(ps_port, iperf3_port);
    args.extend(extra.iter().map(|s| s.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let agent = Agent::start(group, "gp", "127.0.0.1", &config, ports, &args);
    wait_tcp_listening(ps_port);
    (agent, ports)
}

fn listening(port: u16) -> bool {
    TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(300)).is_ok()
}

fn archived(ports: Ports, id: &str) -> Value {
    let runs = get_json("127.0.0.1", ports.api, "/api/v1/runs?limit=1000");
    runs.as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == id)
        .cloned()
        .unwrap_or(Value::Null)
}

#[test]
fn a_recorded_pscheduler_lead_runs_a_throughput_test_with_the_agent() {
    if !have("iperf3", &["--version"], "apt-get install iperf3")
        || !have("curl", &["--version"], "apt-get install curl")
    {
        return;
    }
    let (ps_port, iperf3_port) = (free_tcp_port(), free_tcp_port());
    let (mut agent, ports) = start_agent("ps-lead", ps_port, iperf3_port, &[]);
    let recorded = include_str!("data/pscheduler/throughput-lead-to-participant.jsonl");
    // The run starts a few seconds from now, as the lead's scheduler
    // puts it; the lead's window is the run's length and 5 min of slip.
    let start = (now_ms() / 1000 + 6) * 1000;
    let mut task = String::new();
    let mut run = String::new();
    let mut client: Option<Value> = None;
    for line in recorded.lines() {
        let e: Value = serde_json::from_str(line).unwrap();
        let method = e["request"]["method"].as_str().unwrap();
        let mut path = e["request"]["path"].as_str().unwrap().to_owned();
        let want: u16 = e["response"]["status"].as_str().unwrap()[..3].parse().unwrap();
        let mut body = e["request"]["body"].clone();
        // The lead asks the participant's root URL joined with `/api` and
        // `/tools` (a doubled slash), as Apache's log shows it.
        if path == "/pscheduler/api" || path.starts_with("/pscheduler/tools?") {
            path = path.replacen("/pscheduler/", "/pscheduler//", 1);
        }
        if let Some((base, _)) = path.split_once("/runtimes?") {
            path = format!(
                "{base}/runtimes?start={}&end={}",
                iso(start).replace('+', "%2B").replace(':', "%3A"),
                iso(start + 314_000).replace('+', "%2B").replace(':', "%3A")
            );
        }
        if method == "PUT" && body.get("start-time").is_some() {
            body = json!({ "start-time": iso(start) });
        }
        if path.contains("wait-local=True") {
            // pScheduler's iperf3 tool on the source: at the start, 3 s
            // more for the server, then the client for the test's 5 s.
            std::thread::sleep(Duration::from_millis((start + 3000).saturating_sub(now_ms())));
            let out = Command::new("iperf3")
                .args(["-c", "127.0.0.1", "-p", &iperf3_port.to_string(), "-t", "5", "-J"])
                .stderr(Stdio::inherit())
                .output()
                .unwrap();
            client = serde_json::from_slice(&out.stdout).ok();
        }
        let text = body.is_object().then(|| body.to_string());
        let (status, answer) = call(ps_port, "127.0.0.1", method, &path, text.as_deref());
        assert_eq!(status, want, "{method} {path}: {answer}");
        if method == "POST" {
            task = path
                .split('/')
                .nth(3)
                .unwrap()
                .split('?')
                .next()
                .unwrap()
                .to_owned();
            assert_eq!(
                answer.trim(),
                format!("https://127.0.0.1:{ps_port}/pscheduler/tasks/{task}")
            );
        } else if path.contains("detail=True") {
            let got: Value = serde_json::from_str(&answer).unwrap();
            // Its length as pScheduler's own participant reckoned it.
            assert_eq!(
                got["detail"]["duration"],
                e["response"]["body"]["detail"]["duration"]
            );
            assert_eq!(got["_key"], Value::Null, "a private value is never shown");
        } else if path.contains("/runtimes?") {
            let got: Value = serde_json::from_str(&answer).unwrap();
            assert_eq!(got[0]["lower"], json!(iso(start)), "{answer}");
        } else if method == "GET" && path.contains("/runs/") {
            let got: Value = serde_json::from_str(&answer).unwrap();
            run = path
                .split('/')
                .nth(5)
                .unwrap()
                .split('?')
                .next()
                .unwrap()
                .to_owned();
            assert_eq!(got["participant-data"]["server_port"], json!(iperf3_port));
            if path.contains("wait-local") {
                assert_eq!(got["state"], "finished", "{answer}");
                let ours = got["result"]["summary"]["summary"]["throughput-bits"]
                    .as_f64()
                    .unwrap();
                let theirs = client.as_ref().expect("iperf3 -J printed its result")["end"]["sum_received"]
                    ["bits_per_second"]
                    .as_f64()
                    .unwrap();
                assert_eq!(got["result"]["succeeded"], true);
                assert!(
                    (ours - theirs).abs() <= theirs * 0.1,
                    "the server measured {ours} bit/s, the client {theirs}"
                );
                let secs = got["result"]["summary"]["summary"]["end"].as_f64().unwrap();
                assert!((4.5..6.0).contains(&secs), "{secs} s");
            } else {
                assert_eq!(got["state"], "pending");
            }
        }
    }
    assert!(client.is_some(), "the replay reached the result");
    // The server was for that one test: its port is closed.
    assert!(
        !listening(iperf3_port),
        "port {iperf3_port} is still open after the run"
    );
    let row = archived(ports, &format!("pscheduler/{task}/{run}"));
    assert_eq!(row["state"], "finished", "{row}");
    assert_eq!(row["kind"], "iperf3");
    assert_eq!(row["class"], "exclusive");
    assert_eq!(row["source"], "10.40.0.1");
    // The lead's client sent: source → this agent is "up".
    let theirs = client.as_ref().unwrap()["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .unwrap();
    let up = row["figures"]["throughput_up_bps"]
        .as_f64()
        .expect("an upload figure");
    assert!(
        (up - theirs).abs() <= theirs * 0.1,
        "archived {up} bit/s, the client {theirs}"
    );
    assert_eq!(row["figures"]["throughput_down_bps"], Value::Null);
    assert_eq!(row["task"], format!("pscheduler/{task}"));
    // The task outlives a restart of the agent: the lead's next run of it
    // is taken, not answered 404 until the lead makes the task again.
    agent.stop(libc::SIGTERM);
    let kept = format!("{}.pscheduler-tasks.json", agent.archive.display());
    let mode = std::fs::metadata(&kept).expect("the tasks' file").permissions();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
        0o600,
        "a task holds the lead's key"
    );
    let config = tmp("ps-lead", "mesh.toml");
    let args = ps_args(ps_port, iperf3_port);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    agent.spawn(&config, ports, &args);
    wait_tcp_listening(ps_port);
    let base = format!("/pscheduler/tasks/{task}");
    let new_run = uuid(77);
    let get_run = || -> Value {
        let path = format!("{base}/runs/{new_run}");
        let (status, answer) = call(ps_port, "127.0.0.1", "GET", &path, None);
        assert_eq!(status, 200, "{path}: {answer}");
        serde_json::from_str(&answer).unwrap()
    };
    let (status, answer) = call(ps_port, "127.0.0.1", "GET", &format!("{base}?detail=True"), None);
    assert_eq!(status, 200, "{answer}");
    let got: Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(got["test"]["type"], "throughput", "{answer}");
    assert_eq!(got["_key"], Value::Null, "a private value is never shown");
    let next = (now_ms() / 1000 + 120) * 1000;
    let body = json!({ "start-time": iso(next) }).to_string();
    let (status, answer) = call(
        ps_port,
        "127.0.0.1",
        "PUT",
        &format!("{base}/runs/{new_run}"),
        Some(&body),
    );
    assert_eq!(status, 200, "{answer}");
    let got = get_run();
    assert_eq!(got["state"], "pending", "{got}");
    assert_eq!(got["participant-data"]["server_port"], json!(iperf3_port));
    // A run booked before a restart (a lead books a day of runs ahead) is
    // booked again, its participant data with it: its server will be
    // there at its slot.
    let data =
        json!({"part-data-full": [{"schema": 1}, {"schema": 3, "server_port": iperf3_port}]}).to_string();
    let (status, answer) = call(
        ps_port,
        "127.0.0.1",
        "PUT",
        &format!("{base}/runs/{new_run}"),
        Some(&data),
    );
    assert_eq!(status, 200, "{answer}");
    std::thread::sleep(Duration::from_millis(1500));
    agent.stop(libc::SIGTERM);
    agent.spawn(&config, ports, &args);
    wait_tcp_listening(ps_port);
    let t0 = Instant::now();
    let row = loop {
        let row = archived(ports, &format!("pscheduler/{task}/{new_run}"));
        if row["state"] != "missed" || t0.elapsed() > Duration::from_secs(10) {
            break row;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(
        row["state"],
        "scheduled",
        "booked again: {row}\n{}",
        agent.log_text()
    );
    let got = get_run();
    assert_eq!(got["state"], "pending", "{got}");
    assert_eq!(got["participant-data-full"][0]["schema"], 1, "{got}");
    assert!(
        agent.log_text().contains("1 booked again"),
        "{}",
        agent.log_text()
    );
    // Deleted, it is gone from the file too (written a second later).
    let (status, answer) = call(ps_port, "127.0.0.1", "DELETE", &base, None);
    assert_eq!(status, 200, "{answer}");
    // The run's own task keeps the cancel, a moment after the answer.
    let t0 = Instant::now();
    let row = loop {
        let row = archived(ports, &format!("pscheduler/{task}/{new_run}"));
        if row["state"] != "scheduled" || t0.elapsed() > Duration::from_secs(10) {
            break row;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(row["state"], "cancelled", "{row}");
    let t0 = std::time::Instant::now();
    while std::fs::read_to_string(&kept).unwrap().contains(&task) {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "the deleted task is still kept"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // A file that is no tasks' file is dropped, with a line in the log,
    // and the agent starts.
    agent.stop(libc::SIGTERM);
    std::fs::write(&kept, b"\x00\xffnot json").unwrap();
    agent.spawn(&config, ports, &args);
    wait_tcp_listening(ps_port);
    let (status, _) = call(ps_port, "127.0.0.1", "GET", &base, None);
    assert_eq!(status, 404);
    assert!(
        agent.log_text().contains("is not a tasks' file"),
        "{}",
        agent.log_text()
    );
    agent.stop(libc::SIGTERM);
}

/// A task for `test` from this test's lead.
fn task(spec: Value) -> String {
    json!({
        "schema": 1,
        "test": {"type": "throughput", "spec": spec},
        "tool": "iperf3",
        "schedule": {"slip": "PT5M"},
        "participants": ["127.0.0.1", "127.0.0.1"],
    })
    .to_string()
}

fn uuid(n: u64) -> String {
    format!("00000000-0000-4000-8000-{n:012x}")
}

#[test]
fn a_hostile_lead_is_held_to_the_limits_and_leaves_no_port_open() {
    if !have("curl", &["--version"], "apt-get install curl") {
        return;
    }
    let (ps_port, iperf3_port) = (free_tcp_port(), free_tcp_port());
    let (mut agent, ports) = start_agent(
        "ps-hostile",
        ps_port,
        iperf3_port,
        &["--pscheduler-max-tasks", "20", "--max-run-length", "1h"],
    );
    let short =
        json!({"source": "127.0.0.1", "dest": "127.0.0.1", "duration": "PT1S", "link-rtt": "PT0.01S"});
    // A stranger is refused before anything else.
    let (status, answer) = call(ps_port, "127.0.0.2", "GET", "/pscheduler/api", None);
    assert_eq!(status, 403, "{answer}");
    assert!(answer.contains("127.0.0.2 may not use"), "{answer}");
    // Absurd specs, with the limit or the field named.
    let post = |n: u64, body: &str| {
        call(
            ps_port,
            "127.0.0.1",
            "POST",
            &format!("/pscheduler/tasks/{}?participant=1", uuid(n)),
            Some(body),
        )
    };
    let (status, answer) = post(1, &task(json!({"dest": "127.0.0.1", "duration": "P400D"})));
    assert_eq!(status, 403, "{answer}");
    assert!(answer.contains("limit max_duration"), "{answer}");
    let (status, answer) = post(2, &task(json!({"dest": "127.0.0.1", "parallel": 1_000_000})));
    assert_eq!(status, 400, "{answer}");
    assert!(answer.contains("parallel"), "{answer}");
    let (status, _) = call(
        ps_port,
        "127.0.0.1",
        "POST",
        "/pscheduler/tasks/not-a-uuid?participant=1",
        Some(&task(short.clone())),
    );
    assert_eq!(status, 404);
    // A task, and a run too far ahead.
    assert_eq!(post(3, &task(short.clone())).0, 200);
    let put = |t: u64, r: u64, start: u64| {
        call(
            ps_port,
            "127.0.0.1",
            "PUT",
            &format!("/pscheduler/tasks/{}/runs/{}", uuid(t), uuid(r)),
            Some(&json!({"start-time": iso(start)}).to_string()),
        )
    };
    let (status, answer) = put(3, 100, now_ms() + 30 * 86_400_000);
    assert_eq!(status, 400, "{answer}");
    // A run cancelled while its server is up: the port closes at once.
    let start = now_ms() + 2000;
    assert_eq!(put(3, 101, start).0, 200);
    // Its slot is taken: an overlapping run of another task conflicts.
    assert_eq!(post(4, &task(short.clone())).0, 200);
    let (status, answer) = put(4, 102, start + 1000);
    assert_eq!(status, 409, "{answer}");
    wait_tcp_listening(iperf3_port);
    // A port scan is no test: the server stays for the run's client.
    drop(TcpStream::connect(("127.0.0.1", iperf3_port)).unwrap());
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        listening(iperf3_port),
        "a connection that was no test ended the run's server"
    );
    // A client from an address that is neither the lead nor the test's
    // source is told the server is busy (iperf3's ACCESS_DENIED, -1),
    // unread, and the server stays for the run's own client.
    let mut stranger = connect_from("127.0.0.2", "127.0.0.1", iperf3_port, Duration::from_secs(2)).unwrap();
    stranger.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let mut byte = [0u8; 1];
    assert_eq!(
        stranger.read(&mut byte).unwrap(),
        1,
        "the stranger was not answered"
    );
    assert_eq!(byte[0] as i8, -1, "the stranger was served, not refused");
    assert!(listening(iperf3_port), "the stranger ended the run's server");
    let (status, _) = call(
        ps_port,
        "127.0.0.1",
        "DELETE",
        &format!("/pscheduler/tasks/{}?key=x?", uuid(3)),
        None,
    );
    assert_eq!(status, 200);
    let t0 = Instant::now();
    while listening(iperf3_port) {
        assert!(
            t0.elapsed() < Duration::from_secs(2),
            "the cancelled run's port is still open"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // A run abandoned: no client comes; the port closes at its slot's
    // end (1 s set-up, 1 s, 3 + 2 s) and the run failed, saying why.
    let start = now_ms() + 1500;
    assert_eq!(put(4, 103, start).0, 200);
    wait_tcp_listening(iperf3_port);
    std::thread::sleep(Duration::from_millis((start + 7_300).saturating_sub(now_ms())));
    let t0 = Instant::now();
    while listening(iperf3_port) {
        assert!(
            t0.elapsed() < Duration::from_secs(2),
            "the abandoned run's port is open past its slot"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let (status, answer) = call(
        ps_port,
        "127.0.0.1",
        "GET",
        &format!(
            "/pscheduler/tasks/{}/runs/{}?wait-local=True&wait=5",
            uuid(4),
            uuid(103)
        ),
        None,
    );
    assert_eq!(status, 200);
    let got: Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(got["state"], "failed", "{answer}");
    assert!(
        got["result"]["error"]
            .as_str()
            .unwrap()
            .contains("no iperf3 client came"),
        "{answer}"
    );
    let row = archived(ports, &format!("pscheduler/{}/{}", uuid(4), uuid(103)));
    assert_eq!(row["state"], "failed", "{row}");
    let row = archived(ports, &format!("pscheduler/{}/{}", uuid(3), uuid(101)));
    assert_eq!(row["state"], "cancelled", "{row}");
    // A flood of tasks from one lead: held to --pscheduler-max-tasks (20,
    // one of which it keeps already), the limit named.
    let body = tmp("ps-hostile", "task.json");
    std::fs::write(&body, task(short)).unwrap();
    let flood = tmp("ps-hostile", "flood.curl");
    let mut f = std::fs::File::create(&flood).unwrap();
    for n in 0..2000u64 {
        writeln!(
            f,
            "url = \"https://127.0.0.1:{ps_port}/pscheduler/tasks/{}?participant=1\"\nrequest = \"POST\"\n\
             data-binary = \"@{}\"\nheader = \"Content-Type: application/json\"\ninsecure\nsilent\n\
             write-out = \"%{{http_code}}\\n\"\noutput = \"/dev/null\"\nnext",
            uuid(1000 + n),
            body.display()
        )
        .unwrap();
    }
    drop(f);
    let out = Command::new("curl").arg("-K").arg(&flood).output().unwrap();
    let codes = String::from_utf8_lossy(&out.stdout);
    let ok = codes.lines().filter(|c| *c == "200").count();
    let refused = codes.lines().filter(|c| *c == "403").count();
    assert_eq!((ok, refused), (19, 1981), "{}", &codes[..codes.len().min(400)]);
    let (status, answer) = post(5000, &task(json!({"dest": "127.0.0.1"})));
    assert_eq!(status, 403);
    assert!(
        answer.contains("limit pscheduler_max_tasks: 127.0.0.1 keeps 20 tasks here, 20 allowed"),
        "{answer}"
    );
    assert!(!listening(iperf3_port));
    agent.stop(libc::SIGTERM);
}
