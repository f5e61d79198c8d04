//! The agent as the lead of pScheduler throughput tasks: an iperf3 test
//! to a mesh address marked `pscheduler = true` is booked with that
//! host's pScheduler and run by the agent's own iperf3 client.
//!
//! The host here plays back what a real pScheduler participant answered
//! a real pScheduler lead (recorded, `data/pscheduler/`), with its ids,
//! times and port moved to this test's, over HTTPS on 443 as perfSONAR
//! serves it; at the run's start it starts Debian's iperf3 server as
//! pScheduler's iperf3 tool does (`iperf3 -s -1 --idle-timeout … --json
//! -p PORT -B DEST`, no login: the lead's participant data says schema 1).
//! Each request the agent makes is checked against the one the recorded
//! lead made; the archived run against the server's own count. Then the
//! host's refusals and silence, each a non-start with its reason, and
//! its answers out of bounds (a run of 1,000 days, 5,000 free spans, a
//! 2 MiB answer, server port 0), each a non-start with its task deleted.

mod common;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::agents::{get_json, http, Agent, Ports, TOKEN};
use common::{free_tcp_port, have, now_ms, tmp, wait_for};
use serde_json::{json, Value};

/// The recorded exchanges between a real lead (A) and participant (B).
const RECORDED: &str = include_str!("data/pscheduler/throughput-lead-to-participant.jsonl");

fn recorded(method: &str, path_has: &str) -> Value {
    RECORDED
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|e| {
            e["request"]["method"] == method && e["request"]["path"].as_str().unwrap().contains(path_has)
        })
        .unwrap_or_else(|| panic!("no recorded {method} …{path_has}…"))
}

fn iso(ms: u64) -> String {
    let t = goodput_core::time::ms_rfc3339(ms);
    format!("{}+00:00", t.trim_end_matches('Z'))
}

/// A query's value.
fn query(path: &str, name: &str) -> Option<String> {
    let q = path.split_once('?')?.1;
    q.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (k == name).then(|| decode(v))
    })
}

fn decode(v: &str) -> String {
    let b = v.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' if i + 2 < b.len() => {
                out.push(u8::from_str_radix(&v[i + 1..i + 3], 16).unwrap());
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8(out).unwrap()
}

/// One request the host got.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    path: String,
    body: Value,
}

/// How the host answers.
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    /// As the recorded participant did.
    Recorded,
    /// Its limits refuse the run (pScheduler's 403 and words).
    RefusesRuns,
    /// The task's length is 1,000 days.
    AbsurdDuration,
    /// Its free times are 5,000 one-second spans.
    ManySpans,
    /// Its free times are a 2 MiB answer.
    HugeAnswer,
    /// Its run's data names server port 0.
    PortZero,
}

/// A run booked at the host.
struct HostRun {
    id: String,
    start: u64,
    port: u16,
    /// Its iperf3 server, once started.
    server: Option<Child>,
}

/// What the host did.
#[derive(Default)]
struct Host {
    seen: Vec<Seen>,
    runs: Vec<HostRun>,
}

/// The pScheduler host at `ip`:443.
fn pscheduler_host(ip: &str, mode: Mode) -> Arc<Mutex<Host>> {
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
    let cert = rcgen::generate_simple_self_signed(vec![ip.to_owned()]).unwrap();
    let chain = vec![CertificateDer::from(cert.cert.der().to_vec())];
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(cert.key_pair.serialize_der()));
    let config = Arc::new(
        rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .unwrap(),
    );
    let listener = TcpListener::bind((ip, 443)).unwrap_or_else(|e| panic!("{ip}:443 (needs root): {e}"));
    let host = Arc::new(Mutex::new(Host::default()));
    let state = host.clone();
    let ip = ip.to_owned();
    std::thread::spawn(move || {
        for tcp in listener.incoming() {
            let Ok(tcp) = tcp else { continue };
            let config = config.clone();
            let state = state.clone();
            let ip = ip.clone();
            std::thread::spawn(move || {
                tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                let conn = rustls::ServerConnection::new(config).unwrap();
                let mut tls = rustls::StreamOwned::new(conn, tcp);
                let Some((method, path, body)) = read_request(&mut tls) else {
                    return;
                };
                let (status, content_type, answer) = answer(&state, &ip, mode, &method, &path, body);
                let head = format!(
                    "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    answer.len()
                );
                let _ = tls.write_all(head.as_bytes());
                let _ = tls.write_all(answer.as_bytes());
                tls.conn.send_close_notify();
                let _ = tls.flush();
            });
        }
    });
    host
}

fn read_request(s: &mut impl Read) -> Option<(String, String, Value)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = s.read(&mut chunk).ok().filter(|n| *n > 0)?;
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut words = head.split_whitespace();
    let (method, path) = (words.next()?.to_owned(), words.next()?.to_owned());
    let length: usize = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())?
        })
        .unwrap_or(0);
    while buf.len() < head_end + length {
        let n = s.read(&mut chunk).ok().filter(|n| *n > 0)?;
        buf.extend_from_slice(&chunk[..n]);
    }
    let body = serde_json::from_slice(&buf[head_end..head_end + length]).unwrap_or(Value::Null);
    Some((method, path, body))
}

/// The host's answer to one request, as the recorded participant gave it.
fn answer(
    state: &Arc<Mutex<Host>>,
    ip: &str,
    mode: Mode,
    method: &str,
    path: &str,
    body: Value,
) -> (&'static str, &'static str, String) {
    state.lock().unwrap().seen.push(Seen {
        method: method.to_owned(),
        path: path.to_owned(),
        body: body.clone(),
    });
    let bare = path.split('?').next().unwrap();
    let parts: Vec<&str> = bare.trim_start_matches('/').split('/').collect();
    let json = "application/json";
    match (method, &parts[..]) {
        ("GET", ["pscheduler", "tools"]) => (
            "200 OK",
            json,
            recorded("GET", "/tools?")["response"]["body"].to_string(),
        ),
        ("POST", ["pscheduler", "tasks", uuid]) => (
            "200 OK",
            "text/plain",
            format!("https://{ip}/pscheduler/tasks/{uuid}\n"),
        ),
        ("GET", ["pscheduler", "tasks", uuid]) if path.contains("detail=True") => {
            // The recorded task, its length as pScheduler's iperf3 tool
            // reckons a 3 s test (4 s set-up, 3 s, 5 s; the recorded 5 s
            // test's was PT14S).
            let mut task = recorded("GET", "?detail=True")["response"]["body"].clone();
            task["detail"]["duration"] = json!(if mode == Mode::AbsurdDuration {
                "P1000D"
            } else {
                "PT12S"
            });
            task["href"] = json!(format!("https://{ip}/pscheduler/tasks/{uuid}"));
            ("200 OK", json, task.to_string())
        }
        ("GET", ["pscheduler", "tasks", _, "runtimes"]) => {
            // The recorded participant's calendar was free: the whole
            // window asked, as it answered.
            let (start, end) = (query(path, "start").unwrap(), query(path, "end").unwrap());
            let ms = |t: &str| goodput_archive::pscheduler::iso_time_ms(t).unwrap();
            if mode == Mode::ManySpans {
                let from = ms(&start);
                let spans: Vec<Value> = (0..5_000u64)
                    .map(|i| json!({"lower": iso(from + 2_000 * i), "upper": iso(from + 2_000 * i + 1_000)}))
                    .collect();
                return ("200 OK", json, Value::Array(spans).to_string());
            }
            if mode == Mode::HugeAnswer {
                return ("200 OK", json, format!("[\"{}\"]", "x".repeat(2 << 20)));
            }
            (
                "200 OK",
                json,
                json!([{ "lower": iso(ms(&start)), "upper": iso(ms(&end)) }]).to_string(),
            )
        }
        ("PUT", ["pscheduler", "tasks", _, "runs", _]) if body.get("start-time").is_some() => {
            if mode == Mode::RefusesRuns {
                return (
                    "403 FORBIDDEN",
                    "text/plain",
                    "Run forbidden by limits:\nlimit throughput-window: no throughput tests from 10.0.0.0/8 now\n".into(),
                );
            }
            let start =
                goodput_archive::pscheduler::iso_time_ms(body["start-time"].as_str().unwrap()).unwrap();
            state.lock().unwrap().runs.push(HostRun {
                id: parts[4].to_owned(),
                start,
                port: free_tcp_port(),
                server: None,
            });
            ("200 OK", "text/plain", "OK\n".into())
        }
        ("GET", ["pscheduler", "tasks", _, "runs", id]) => {
            let h = state.lock().unwrap();
            let Some(r) = h.runs.iter().find(|r| r.id == *id) else {
                return ("404 NOT FOUND", "text/plain", "Resource not found\n".into());
            };
            let mut run = recorded("GET", "?key=")["response"]["body"].clone();
            run["start-time"] = json!(iso(r.start));
            run["end-time"] = json!(iso(r.start + 12_000));
            run["participant-data"]["server_port"] = json!(if mode == Mode::PortZero { 0 } else { r.port });
            ("200 OK", json, run.to_string())
        }
        ("PUT", ["pscheduler", "tasks", _, "runs", id]) if body.get("part-data-full").is_some() => {
            // At the run's start, its server, as pScheduler's iperf3 tool
            // starts it on the destination; a login only when the lead's
            // data says schema 2 or later (it should not here).
            let login = body["part-data-full"][0]["schema"].as_u64().unwrap_or(1) >= 2;
            let (id, state, ip) = (id.to_string(), state.clone(), ip.to_owned());
            std::thread::spawn(move || {
                let (start, port) = {
                    let h = state.lock().unwrap();
                    let r = h.runs.iter().find(|r| r.id == id).unwrap();
                    (r.start, r.port)
                };
                std::thread::sleep(Duration::from_millis(start.saturating_sub(now_ms())));
                let mut cmd = Command::new("iperf3");
                cmd.args([
                    "-s",
                    "-1",
                    "--idle-timeout",
                    "5",
                    "--json",
                    "-p",
                    &port.to_string(),
                    "-B",
                    &ip,
                ]);
                if login {
                    cmd.arg("--authorized-users-path").arg("/nonexistent");
                }
                let child = cmd.stdout(Stdio::piped()).stderr(Stdio::null()).spawn().unwrap();
                let mut h = state.lock().unwrap();
                h.runs.iter_mut().find(|r| r.id == id).unwrap().server = Some(child);
            });
            ("200 OK", "text/plain", "OK\n".into())
        }
        ("DELETE", ["pscheduler", "tasks", _]) => ("200 OK", "text/html; charset=utf-8", "OK\n".into()),
        _ => ("404 NOT FOUND", "text/plain", "Resource not found\n".into()),
    }
}

const AGENT_IP: &str = "127.0.40.2";

fn mesh(ports: Ports, ps_ip: &str, tasks: &str) -> String {
    format!(
        r#"[agent]
api_port = {api}

[addresses.gp]
address = "{AGENT_IP}"

[addresses.ps]
address = "{ps_ip}"
no_agent = true
pscheduler = true

[groups.to-ps]
type = "disjoint"
a = ["gp"]
b = ["ps"]
unidirectional = true

[tests.throughput]
kind = "iperf3"
host = "{{{{dest}}}}"
time = "3s"
{tasks}"#,
        api = ports.api
    )
}

fn runs(ports: Ports) -> Vec<Value> {
    get_json(AGENT_IP, ports.api, "/api/v1/runs?limit=1000")
        .as_array()
        .unwrap()
        .clone()
}

#[test]
fn a_mesh_task_to_a_pscheduler_host_is_booked_there_and_run() {
    if !have("iperf3", &["--version"], "apt-get install iperf3") {
        return;
    }
    let ps_ip = "127.0.40.3";
    let host = pscheduler_host(ps_ip, Mode::Recorded);
    let ports = Ports::pick();
    let config = tmp("ps-lead", "mesh.toml");
    std::fs::write(
        &config,
        mesh(
            ports,
            ps_ip,
            "\n[schedules.often]\nrepeat = \"PT20S\"\nslip = \"PT1M\"\n\n[tasks.to-ps]\ngroup = \"to-ps\"\ntest = \"throughput\"\nschedule = \"often\"\n",
        ),
    )
    .unwrap();
    let mut agent = Agent::start("ps-lead", "gp", AGENT_IP, &config, ports, &[]);
    let run = wait_for(Duration::from_secs(75), "a run of to-ps that ran", || {
        runs(ports)
            .into_iter()
            .find(|r| r["task"] == "to-ps" && (r["state"] == "finished" || r["state"] == "failed"))
    });
    let whole = get_json(
        AGENT_IP,
        ports.api,
        &format!("/api/v1/runs/{}", run["id"].as_str().unwrap()),
    );
    agent.stop(libc::SIGTERM);
    assert_eq!(run["state"], "finished", "{run}\n{}", agent.log_text());
    assert_eq!(run["kind"], "iperf3");
    assert_eq!(run["source"], "gp");
    assert_eq!(run["dest"], "ps");
    let ran = run["start_ms"].as_u64().unwrap();

    // The run booked at the host: the PUT whose start is the run's.
    let seen = host.lock().unwrap().seen.clone();
    let start_of = |s: &Seen| {
        s.body["start-time"]
            .as_str()
            .map(|t| goodput_archive::pscheduler::iso_time_ms(t).unwrap())
    };
    let booked = seen
        .iter()
        .find(|s| start_of(s).is_some_and(|t| (t..t + 1000).contains(&ran)))
        .unwrap_or_else(|| panic!("no run booked at the host for {ran}: {seen:#?}"));
    let start = start_of(booked).unwrap();
    let uuid = booked.path.split('/').nth(3).unwrap().to_owned();
    // The agent asked as the recorded lead asked, in its order.
    let mine: Vec<&Seen> = seen.iter().filter(|s| s.path.contains(&uuid)).collect();
    let order: Vec<String> = mine
        .iter()
        .map(|s| {
            let bare = s.path.split('?').next().unwrap();
            let shape: Vec<&str> = bare
                .split('/')
                .map(|p| if p.len() == 36 { "ID" } else { p })
                .collect();
            format!("{} {}", s.method, shape.join("/"))
        })
        .collect();
    assert_eq!(
        order,
        [
            "POST /pscheduler/tasks/ID",
            "GET /pscheduler/tasks/ID",
            "GET /pscheduler/tasks/ID/runtimes",
            "PUT /pscheduler/tasks/ID/runs/ID",
            "GET /pscheduler/tasks/ID/runs/ID",
            "PUT /pscheduler/tasks/ID/runs/ID",
        ],
        "{mine:#?}"
    );
    let lead = |method: &str, has: &str| recorded(method, has)["request"].clone();
    // Before the task, the tools query: the test, and pScheduler's API
    // version.
    let tools = seen
        .iter()
        .take_while(|s| !s.path.contains(&uuid))
        .filter(|s| s.path.starts_with("/pscheduler/tools?"))
        .last()
        .expect("the tools asked before the task");
    assert_eq!(query(&tools.path, "api").as_deref(), Some("6"));
    let test: Value = serde_json::from_str(&query(&tools.path, "test").unwrap()).unwrap();
    assert_eq!(
        test,
        json!({"type": "throughput", "spec": {"schema": 1, "source": AGENT_IP, "dest": ps_ip, "duration": "PT3S"}})
    );
    // The task: the recorded lead's fields, participant 1 asked.
    let task = mine[0];
    assert_eq!(query(&task.path, "participant").as_deref(), Some("1"));
    let keys = |v: &Value| {
        let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
        k.sort();
        k
    };
    assert_eq!(keys(&task.body), keys(&lead("POST", "/tasks/")["body"]));
    assert_eq!(task.body["participants"], json!([AGENT_IP, ps_ip]));
    assert_eq!(task.body["tool"], "iperf3");
    assert_eq!(task.body["test"], test);
    let key = task.body["_key"].as_str().unwrap().to_owned();
    // The run: booked with the task's key; the agent's client ran in the
    // slot pScheduler reckons (set-up 4 s, the test's 3 s, 5 s more).
    assert_eq!(query(&mine[3].path, "key").as_deref(), Some(key.as_str()));
    assert!(run["end_ms"].as_u64().unwrap() <= start + 12_000, "{run}");
    // Both ends' data: ours says schema 1 (no login), the host's as given.
    let full = &mine[5].body["part-data-full"];
    assert_eq!(full[0], json!({"schema": 1}));
    assert!(
        full[1]["_auth"].is_object(),
        "the host's data is handed back whole"
    );

    // The server's own count of what it received is what the agent kept.
    let port = full[1]["server_port"].as_u64().unwrap() as u16;
    let child = {
        let mut h = host.lock().unwrap();
        let r = h.runs.iter_mut().find(|r| r.port == port).unwrap();
        r.server.take().expect("the run's server started")
    };
    let out = child.wait_with_output().unwrap();
    let server: Value = serde_json::from_slice(&out.stdout).unwrap();
    let received = server["end"]["sum_received"]["bytes"].as_u64().unwrap();
    assert!(received > 0);
    let connected = server["start"]["timestamp"]["timesecs"].as_u64().unwrap() * 1000;
    assert!(
        connected + 1000 >= start + 3000,
        "the client connected at {connected}, before the server's 3 s (start {start})"
    );
    // What the agent's client sent, and what it was told the server got,
    // are the server's own count: TCP loses nothing on the way.
    let ours = &whole["result"]["summary"];
    assert_eq!(ours["sent_bytes"].as_u64(), Some(received), "{ours}");
    assert_eq!(ours["peer"]["received_bytes"].as_u64(), Some(received), "{ours}");
}

#[test]
fn a_pscheduler_hosts_refusal_and_silence_are_non_starts_with_reasons() {
    let ps_ip = "127.0.40.5";
    let host = pscheduler_host(ps_ip, Mode::RefusesRuns);
    let ports = Ports::pick();
    let config = tmp("ps-lead-refused", "mesh.toml");
    // A second pScheduler host that is not there.
    let silent = "\n[addresses.gone]\naddress = \"127.0.40.6\"\nno_agent = true\npscheduler = true\n";
    std::fs::write(&config, mesh(ports, ps_ip, silent)).unwrap();
    let mut agent = Agent::start("ps-lead-refused", "gp", AGENT_IP, &config, ports, &[]);
    let ask = |dest: &str| {
        let spec = json!({"spec": {"kind": "iperf3", "host": dest, "time": "3s"}, "slip": "30s"});
        let (status, body) = http(
            AGENT_IP,
            ports.api,
            "POST",
            "/api/v1/runs",
            Some(TOKEN),
            &spec.to_string(),
        );
        assert_eq!(status, 201, "{body}");
        serde_json::from_str::<Value>(&body).unwrap()
    };
    let refused = ask(ps_ip);
    assert_eq!(refused["state"], "non_start", "{refused}");
    let why = refused["reason"].as_str().unwrap();
    assert!(
        why.contains("pScheduler host ps refused the run: Run forbidden by limits: limit throughput-window"),
        "{why}"
    );
    // The task it made for the run is deleted there, with its key.
    let seen = host.lock().unwrap().seen.clone();
    let key = seen.iter().find(|s| s.method == "POST").unwrap().body["_key"]
        .as_str()
        .unwrap()
        .to_owned();
    let delete = seen
        .iter()
        .find(|s| s.method == "DELETE")
        .expect("the task deleted");
    assert_eq!(query(&delete.path, "key"), Some(key));
    let silent = ask("127.0.40.6");
    assert_eq!(silent["state"], "non_start", "{silent}");
    let why = silent["reason"].as_str().unwrap();
    assert!(why.starts_with("pScheduler host gone unreachable: "), "{why}");
    // Both are in the archive with the reason.
    let rows = runs(ports);
    assert_eq!(
        rows.iter().filter(|r| r["state"] == "non_start").count(),
        2,
        "{rows:?}"
    );
    agent.stop(libc::SIGTERM);
}

#[test]
fn a_pscheduler_hosts_absurd_answers_are_bounded_and_its_task_deleted() {
    // Four hosts, each answering one thing out of bounds.
    let hosts = [
        ("127.0.40.7", "long", Mode::AbsurdDuration),
        ("127.0.40.8", "spans", Mode::ManySpans),
        ("127.0.40.9", "huge", Mode::HugeAnswer),
        ("127.0.40.10", "portless", Mode::PortZero),
    ];
    let seen: Vec<_> = hosts
        .iter()
        .map(|(ip, _, mode)| pscheduler_host(ip, *mode))
        .collect();
    let ports = Ports::pick();
    let config = tmp("ps-lead-absurd", "mesh.toml");
    let more: String = hosts[1..]
        .iter()
        .map(|(ip, name, _)| {
            format!("\n[addresses.{name}]\naddress = \"{ip}\"\nno_agent = true\npscheduler = true\n")
        })
        .collect();
    std::fs::write(&config, mesh(ports, hosts[0].0, &more)).unwrap();
    let mut agent = Agent::start("ps-lead-absurd", "gp", AGENT_IP, &config, ports, &[]);
    let expected = [
        "pScheduler host ps: its task's duration P1000D is not from 1 ms to a day",
        "pScheduler host spans: it gave more than 1000 free times",
        "pScheduler host huge unreachable: its answer is larger than 1048576 bytes",
        "pScheduler host portless gave no server port for the run",
    ];
    for (((ip, _, _), host), words) in hosts.iter().zip(&seen).zip(expected) {
        let spec = json!({"spec": {"kind": "iperf3", "host": ip, "time": "3s"}, "slip": "30s"});
        let (status, body) = http(
            AGENT_IP,
            ports.api,
            "POST",
            "/api/v1/runs",
            Some(TOKEN),
            &spec.to_string(),
        );
        assert_eq!(status, 201, "{body}");
        let run: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(run["state"], "non_start", "{run}");
        assert_eq!(run["reason"].as_str(), Some(words), "{run}");
        // The task made there is deleted with its key; no run stays
        // booked at the host (a run it took is not started: no server).
        let h = host.lock().unwrap();
        let key = h.seen.iter().find(|s| s.method == "POST").unwrap().body["_key"]
            .as_str()
            .unwrap()
            .to_owned();
        let delete = h
            .seen
            .iter()
            .find(|s| s.method == "DELETE")
            .expect("the task deleted");
        assert_eq!(query(&delete.path, "key"), Some(key), "{ip}");
        assert!(h.runs.iter().all(|r| r.server.is_none()), "{ip}");
    }
    // Nothing stays on this agent's calendar either: it is free
    // throughout the next hour.
    let view = get_json(AGENT_IP, ports.api, "/api/v1/schedule");
    assert_eq!(view["bookings"].as_array().map(Vec::len), Some(0), "{view}");
    assert_eq!(view["free"].as_array().map(Vec::len), Some(1), "{view}");
    agent.stop(libc::SIGTERM);
}
