//! The agent as the lead of perfSONAR pScheduler's single-participant
//! tests (`rtt`, `trace`, `latency`, `latencybg`), driven as pScheduler's command line
//! drives a lead: the requests `pscheduler task rtt|trace|latency --source
//! LEAD` made of a
//! real pScheduler lead (recorded, `data/pscheduler/*-cli-to-lead.jsonl`)
//! are replayed against an agent on loopback, each answer checked for the
//! status and the shape the real lead gave (the fields the command line
//! reads), the result's figures against the archived run's own, and the
//! text the command line prints against the real lead's, number for
//! number in layout. Then hostile clients: absurd numbers, a stranger, a
//! test the agent does not lead, an unbounded repeat, another client's
//! task, and a flood of tasks.

mod common;

use std::io::Write;
use std::process::Command;

use common::agents::{get_json, Agent, Ports};
use common::{free_tcp_port, goodput, have, now_ms, spawn_limited, tmp, wait_tcp_listening};
use serde_json::{json, Value};

/// The address the recorded command line ran from, and the lead's.
const CLI: &str = "10.40.0.1";
const LEAD: &str = "10.40.0.3";

/// One HTTPS request as pScheduler's client sends it (no certificate
/// check): the status, the content type and the body.
fn call(port: u16, from: &str, method: &str, path: &str, body: Option<&str>) -> (u16, String, String) {
    let mut cmd = Command::new("curl");
    cmd.args(["-sk", "--path-as-is", "--max-time", "40", "--interface", from])
        .args(["-X", method, "-w", "\n%{content_type}\n%{http_code}"])
        .arg(format!("https://127.0.0.1:{port}{path}"));
    if let Some(b) = body {
        cmd.args(["-H", "Content-Type: application/json", "--data-binary", b]);
    }
    let out = cmd.output().expect("curl runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut parts = text.rsplitn(3, '\n');
    let status = parts.next().unwrap_or("").trim().parse().unwrap_or(0);
    let kind = parts.next().unwrap_or("").to_owned();
    (status, kind, parts.next().unwrap_or("").to_owned())
}

fn start_agent(group: &str, ps_port: u16, extra: &[&str]) -> (Agent, Ports) {
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
    let mut args = vec![
        "--pscheduler-listen".to_owned(),
        format!("127.0.0.1:{ps_port}"),
        "--pscheduler-allow".to_owned(),
        "127.0.0.1/32".to_owned(),
        "--pscheduler-allow".to_owned(),
        "127.0.0.3/32".to_owned(),
        "--pscheduler-iperf3-port".to_owned(),
        free_tcp_port().to_string(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let agent = Agent::start(group, "gp", "127.0.0.1", &config, ports, &args);
    wait_tcp_listening(ps_port);
    (agent, ports)
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

/// Every key of the recorded answer `theirs` is in `ours` (objects
/// followed down), but for the `unmet` ones, each with its reason.
fn has_shape(theirs: &Value, ours: &Value, at: &str, unmet: &[&str]) {
    let (Value::Object(t), Value::Object(o)) = (theirs, ours) else {
        return;
    };
    for (k, v) in t {
        if unmet.contains(&k.as_str()) {
            continue;
        }
        let got = o
            .get(k)
            .unwrap_or_else(|| panic!("{at}: the answer has no {k} (the real lead's had {v})"));
        // A histogram's buckets are the run's own.
        if v.is_object() && !k.starts_with("histogram-") {
            has_shape(v, got, &format!("{at}.{k}"), unmet);
        }
    }
}

/// The command line's printed result with names, addresses and numbers
/// made alike: its layout.
fn layout(text: &str, names: &[&str]) -> String {
    let mut t = text.to_owned();
    for n in names {
        t = t.replace(n, "HOST");
    }
    let mut out = String::new();
    for c in t.chars() {
        if c.is_ascii_digit() {
            if !out.ends_with('9') {
                out.push('9');
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The latency result's printed text as its lines' labels: the figures
/// and the histograms' buckets (which differ from run to run) left out.
fn latency_layout(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| !(l.starts_with("    ") && l.ends_with(" packets")))
        .map(|l| l.split(" ...").next().unwrap_or(l).trim_end().to_owned())
        .collect()
}

/// Replays the command line's requests of a recorded session on the
/// agent at `ps_port`; returns the task's and the run's UUIDs, the run's
/// merged result and the text printed. `owamp`: the port of the OWAMP
/// server a latency task is to use (put in its spec as `ctrl-port`, with
/// its packets 10 ms apart).
fn replay(ps_port: u16, recorded: &str, test: &str, owamp: Option<u16>) -> (String, String, Value, String) {
    let mut ids: Vec<(String, String)> = Vec::new();
    let (mut task, mut run) = (String::new(), String::new());
    let mut merged = Value::Null;
    let mut printed = String::new();
    let mut seen_text = false;
    for line in recorded.lines() {
        let e: Value = serde_json::from_str(line).unwrap();
        if e["remote_addr"] != CLI {
            // The lead's calls to itself, as its own participant.
            continue;
        }
        let method = e["method"].as_str().unwrap();
        let mut path = e["path"].as_str().unwrap().to_owned();
        for (theirs, ours) in &ids {
            path = path.replace(theirs, ours);
        }
        let want = e["response"]["status"].as_u64().unwrap() as u16;
        let theirs_body = e["response"]["body"].as_str().unwrap_or("");
        let body = e["request"]["body"]
            .as_str()
            .filter(|b| !b.is_empty())
            .map(|b| b.replace(LEAD, "127.0.0.1").replace(CLI, "127.0.0.1"))
            .map(|b| match (owamp, method) {
                (Some(port), "POST") => {
                    let mut doc: Value = serde_json::from_str(&b).unwrap();
                    doc["test"]["spec"]["ctrl-port"] = json!(port);
                    // 10 ms apart rather than 100 ms: the test is short.
                    doc["test"]["spec"]["packet-interval"] = json!(0.01);
                    doc.to_string()
                }
                _ => b,
            });
        let (status, kind, answer) = call(ps_port, "127.0.0.1", method, &path, body.as_deref());
        assert_eq!(status, want, "{method} {path}: {answer}");
        let theirs_kind = e["response"]["headers"]
            .as_array()
            .and_then(|h| h.iter().find(|h| h[0] == "Content-Type"))
            .and_then(|h| h[1].as_str())
            .unwrap_or("");
        if status != 200 {
            continue;
        }
        if theirs_kind.starts_with("application/json") {
            assert!(kind.starts_with("application/json"), "{method} {path}: {kind}");
        }
        if method == "POST" {
            let url: String = serde_json::from_str(&answer).expect("the task's URL as a JSON string");
            let theirs: String = serde_json::from_str(theirs_body).unwrap();
            let prefix = format!("https://127.0.0.1:{ps_port}/pscheduler/tasks/");
            task = url
                .strip_prefix(&prefix)
                .unwrap_or_else(|| panic!("{url}"))
                .to_owned();
            ids.push((theirs.rsplit('/').next().unwrap().to_owned(), task.clone()));
            continue;
        }
        if path.ends_with("/cli") {
            let mut got: Value = serde_json::from_str(&answer).unwrap();
            if let (Some(port), Some(args)) = (owamp, got.as_array_mut()) {
                // The options this test added, in the place pScheduler's
                // order gives them.
                for (option, value) in [
                    ("--ctrl-port", port.to_string()),
                    ("--packet-interval", "0.01".into()),
                ] {
                    let at = args.iter().position(|a| a == option).expect(option);
                    assert_eq!(args[at + 1], value);
                    args.drain(at..at + 2);
                }
            }
            let theirs = theirs_body.replace(LEAD, "127.0.0.1").replace(CLI, "127.0.0.1");
            let theirs: Value = serde_json::from_str(&theirs).unwrap();
            assert_eq!(got, theirs, "the task's command line");
            continue;
        }
        if path.contains("/result?format=text") && test == "latency" {
            assert!(kind.starts_with("text/plain"), "{kind}");
            assert_eq!(
                latency_layout(answer.trim()),
                latency_layout(theirs_body.trim()),
                "the printed result's layout:\n{answer}"
            );
            printed = answer;
            seen_text = true;
            continue;
        }
        if path.contains("/result?format=text") {
            assert!(kind.starts_with("text/plain"), "{kind}");
            assert_eq!(
                layout(answer.trim(), &["127.0.0.1 (127.0.0.1)"]),
                layout(theirs_body.trim(), &[&format!("pspk ({CLI})")]),
                "the printed result's layout:\n{answer}"
            );
            printed = answer;
            seen_text = true;
            continue;
        }
        let got: Value = serde_json::from_str(&answer).unwrap_or_else(|e| panic!("{path}: {e}: {answer}"));
        if path == "/pscheduler/" {
            assert!(got.is_string(), "{answer}");
            continue;
        }
        let theirs: Value = serde_json::from_str(theirs_body).unwrap();
        if path.contains("/runs/") {
            // A run: the fields `watch` and `result` read, as the real
            // lead gave them; goodput's ping counts no reordered replies
            // and looks no names up.
            has_shape(&theirs, &got, &path, &["reorders", "hostname"]);
            assert_eq!(got["participant"], 0);
            assert_eq!(got["participants"], json!(["127.0.0.1"]));
            if run.is_empty() {
                let href = got["href"].as_str().unwrap();
                run = href.rsplit('/').next().unwrap().to_owned();
                let theirs_run = theirs["href"]
                    .as_str()
                    .unwrap()
                    .rsplit('/')
                    .next()
                    .unwrap()
                    .to_owned();
                ids.push((theirs_run, run.clone()));
                assert_eq!(
                    href,
                    format!("https://127.0.0.1:{ps_port}/pscheduler/tasks/{task}/runs/{run}")
                );
            }
            if path.contains("wait-merged") {
                assert_eq!(got["state"], "finished", "{answer}");
                assert_eq!(got["result-merged"]["succeeded"], true, "{answer}");
                merged = got["result-merged"].clone();
            }
        } else {
            // The task: the tool and the links `watch` follows.
            has_shape(&theirs, &got, &path, &[]);
            let tool = match test {
                "rtt" => "ping",
                "latency" => "owamp",
                _ => "trace",
            };
            assert_eq!(got["tool"], format!("goodput-{tool}"));
            assert_eq!(got["detail"]["multi-result"], false);
            assert_eq!(got["detail"]["participants"], json!(["127.0.0.1"]));
            assert_eq!(got["test"]["type"], test);
        }
    }
    assert!(seen_text && !merged.is_null(), "the replay reached the result");
    (task, run, merged, printed)
}

fn seconds(v: &Value) -> f64 {
    let s = v.as_str().unwrap();
    let n = s.trim_start_matches("PT").trim_end_matches('S');
    n.parse().unwrap_or_else(|_| panic!("{s}"))
}

#[test]
fn the_pscheduler_command_line_runs_an_rtt_test_led_by_the_agent() {
    if !have("curl", &["--version"], "apt-get install curl") {
        return;
    }
    let ps_port = free_tcp_port();
    let (mut agent, ports) = start_agent("ps-single-rtt", ps_port, &[]);
    let recorded = include_str!("data/pscheduler/rtt-cli-to-lead.jsonl");
    let (task, run, merged, printed) = replay(ps_port, recorded, "rtt", None);
    // The figures are the archived run's own.
    let row = archived(ports, &format!("pscheduler/{task}/{run}"));
    assert_eq!(row["state"], "finished", "{row}");
    assert_eq!(row["kind"], "ping");
    assert_eq!(row["class"], "background");
    assert_eq!(row["task"], format!("pscheduler/{task}"));
    assert_eq!(row["spec"]["count"], 3, "the recorded --count 3");
    let trips = merged["roundtrips"].as_array().unwrap();
    assert_eq!(trips.len(), 3, "{merged}");
    assert_eq!(merged["sent"], 3);
    assert_eq!(
        printed.lines().filter(|l| l.contains("RTT ")).count(),
        4,
        "{printed}"
    );
    for t in trips {
        assert_eq!(t["ip"], "127.0.0.1", "{t}");
    }
    let min_us = row["figures"]["delay_min_us"].as_f64().unwrap();
    let max_us = row["figures"]["delay_max_us"].as_f64().unwrap();
    assert!(
        (seconds(&merged["min"]) * 1e6 - min_us).abs() < 0.01,
        "{merged} {row}"
    );
    assert!(
        (seconds(&merged["max"]) * 1e6 - max_us).abs() < 0.01,
        "{merged} {row}"
    );
    assert_eq!(
        merged["loss"].as_f64().unwrap() * 100.0,
        row["figures"]["loss_pct"].as_f64().unwrap()
    );
    agent.stop(libc::SIGTERM);
}

#[test]
fn the_pscheduler_command_line_runs_a_trace_led_by_the_agent() {
    if !have("curl", &["--version"], "apt-get install curl") {
        return;
    }
    let ps_port = free_tcp_port();
    let (mut agent, ports) = start_agent("ps-single-trace", ps_port, &[]);
    let recorded = include_str!("data/pscheduler/trace-cli-to-lead.jsonl");
    let (task, run, merged, printed) = replay(ps_port, recorded, "trace", None);
    let row = archived(ports, &format!("pscheduler/{task}/{run}"));
    assert_eq!(row["state"], "finished", "{row}");
    assert_eq!(row["kind"], "trace");
    assert_eq!(row["class"], "background");
    let path = merged["paths"][0].as_array().unwrap();
    assert_eq!(
        path.len() as f64,
        row["figures"]["hops"].as_f64().unwrap(),
        "{merged} {row}"
    );
    assert_eq!(path.last().unwrap()["ip"], "127.0.0.1", "{merged}");
    assert_eq!(printed.lines().count(), path.len(), "{printed}");
    agent.stop(libc::SIGTERM);
}

/// goodput's own OWAMP server on loopback, as the far end's owampd: the
/// server (stopped when dropped) and its control port.
fn owamp_server() -> (common::Reaped, u16) {
    let owamp = free_tcp_port();
    let mut server = goodput();
    server
        .args(["server", "--listen", "127.0.0.1", "--no-udp", "--verbosity", "0"])
        .args(["--port", &free_tcp_port().to_string()])
        .args(["--owamp", "--owamp-port", &owamp.to_string()])
        .args(["--ow-twamp-listen", "127.0.0.1"]);
    let server = spawn_limited(server, 4 << 30);
    wait_tcp_listening(owamp);
    (server, owamp)
}

#[test]
fn the_pscheduler_command_line_runs_a_latency_test_led_by_the_agent() {
    if !have("curl", &["--version"], "apt-get install curl") {
        return;
    }
    let (_server, owamp) = owamp_server();
    let ps_port = free_tcp_port();
    let (mut agent, ports) = start_agent("ps-single-latency", ps_port, &[]);
    let recorded = include_str!("data/pscheduler/latency-cli-to-lead.jsonl");
    let (task, run, merged, printed) = replay(ps_port, recorded, "latency", Some(owamp));
    let id = format!("pscheduler/{task}/{run}");
    let row = get_json("127.0.0.1", ports.api, &format!("/api/v1/runs/{id}"));
    assert_eq!(row["state"], "finished", "{row}");
    assert_eq!(row["kind"], "owamp");
    assert_eq!(row["class"], "background");
    assert_eq!(row["task"], format!("pscheduler/{task}"));
    assert_eq!(row["spec"]["count"], 100, "the recorded --packet-count 100");
    assert_eq!(row["spec"]["direction"], "to", "owping -t: the source sends");
    assert_eq!(row["spec"]["interval"], "10ms", "{row}");
    // The figures are the archived session's own.
    let to = &row["result"]["owamp"]["to"];
    assert_eq!(merged["packets-sent"], to["sent"], "{merged} {to}");
    assert_eq!(merged["packets-sent"], 100, "{merged}");
    assert_eq!(merged["packets-received"], to["received"], "{merged} {to}");
    assert_eq!(merged["packets-lost"], 0, "{merged}");
    assert_eq!(merged["packets-duplicated"], to["duplicates"]);
    assert_eq!(merged["packets-reordered"], to["reordered"]);
    let in_histogram: u64 = merged["histogram-latency"]
        .as_object()
        .unwrap()
        .values()
        .map(|n| n.as_u64().unwrap())
        .sum();
    assert_eq!(in_histogram, 100, "every packet's delay: {merged}");
    // The slowest bucket is the session's slowest packet (1 ms buckets
    // to two decimals: 10 µs).
    let slowest = merged["histogram-latency"]
        .as_object()
        .unwrap()
        .keys()
        .map(|k| k.parse::<f64>().unwrap())
        .fold(f64::MIN, f64::max);
    let max_us = to["delay"]["max_us"].as_f64().unwrap();
    assert!(
        (slowest * 1000.0 - max_us).abs() <= 10.0,
        "{slowest} ms vs {max_us} us"
    );
    assert_eq!(merged["histogram-ttl"], json!({"255": 100}), "{merged}");
    // Valid against pScheduler's own latency response schema.
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/pscheduler-schemas");
    let read = |f: &str| -> Value {
        serde_json::from_str(&std::fs::read_to_string(format!("{dir}/{f}.json")).unwrap()).unwrap()
    };
    let mut schema = read("latency-result");
    schema["pScheduler"] = read("dictionary");
    let v = jsonschema::validator_for(&schema).unwrap();
    let wrong: Vec<String> = v.iter_errors(&merged).map(|e| e.to_string()).collect();
    assert!(wrong.is_empty(), "{wrong:?}\n{merged}");
    assert!(
        printed.contains("Packets Sent ......... 100 packets"),
        "{printed}"
    );
    assert!(printed.contains("Packets Lost ......... 0 packets"), "{printed}");
    agent.stop(libc::SIGTERM);
}

/// The recorded exchanges of the command line (not the lead's own calls).
fn cli_exchanges(recorded: &str) -> Vec<Value> {
    recorded
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["remote_addr"] == CLI)
        .collect()
}

/// The body of the last recorded answer to a GET whose path `matches`.
fn last_answer(recorded: &[Value], matches: impl Fn(&str) -> bool) -> Value {
    let e = recorded
        .iter()
        .rev()
        .find(|e| e["method"] == "GET" && matches(e["path"].as_str().unwrap()))
        .expect("the recording has it");
    let body = e["response"]["body"].as_str().unwrap();
    serde_json::from_str(body).unwrap_or_else(|_| json!(body))
}

#[test]
fn the_pscheduler_command_line_runs_a_latencybg_stream_led_by_the_agent() {
    if !have("curl", &["--version"], "apt-get install curl") {
        return;
    }
    let (_server, owamp) = owamp_server();
    let ps_port = free_tcp_port();
    let (mut agent, ports) = start_agent("ps-single-latencybg", ps_port, &[]);
    let recorded = cli_exchanges(include_str!("data/pscheduler/latencybg-cli-to-lead.jsonl"));
    // `pscheduler task latencybg --source LEAD --dest X --duration PT40S
    // --packet-count 100 --packet-interval 0.1`, as it posted it, made
    // short: 100 packets 50 ms apart (a summary every 5 s) for 11 s, to
    // this test's OWAMP server.
    let post = recorded.iter().find(|e| e["method"] == "POST").unwrap();
    let body = post["request"]["body"]
        .as_str()
        .unwrap()
        .replace(LEAD, "127.0.0.1")
        .replace(CLI, "127.0.0.1");
    let mut doc: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(doc["test"]["type"], "latencybg");
    assert_eq!(doc["test"]["spec"]["packet-count"], 100);
    doc["test"]["spec"]["ctrl-port"] = json!(owamp);
    doc["test"]["spec"]["duration"] = json!("PT11S");
    doc["test"]["spec"]["packet-interval"] = json!(0.05);
    // The task's UUID, as the agent named it when it took the task.
    let post = |doc: &Value| -> String {
        let body = doc.to_string();
        let (status, _, answer) = call(ps_port, "127.0.0.1", "POST", "/pscheduler/tasks", Some(&body));
        assert_eq!(status, 200, "{answer}");
        let url: String = serde_json::from_str(&answer).unwrap();
        url.rsplit('/').next().unwrap().to_owned()
    };
    let task = post(&doc);
    let base = format!("/pscheduler/tasks/{task}");
    let get = |path: &str| -> Value {
        let (status, kind, answer) = call(ps_port, "127.0.0.1", "GET", path, None);
        assert_eq!(status, 200, "{path}: {answer}");
        if kind.starts_with("application/json") {
            serde_json::from_str(&answer).unwrap_or_else(|e| panic!("{path}: {e}: {answer}"))
        } else {
            json!(answer)
        }
    };
    // What `task` and `watch` read: a task with results that come as
    // they come, which `watch` therefore does not follow.
    let detail = get(&format!("{base}?detail=True"));
    let theirs = last_answer(&recorded, |p| p.ends_with("?detail=True"));
    has_shape(&theirs, &detail, "task", &[]);
    assert_eq!(theirs["detail"]["multi-result"], true);
    assert_eq!(detail["detail"]["multi-result"], true, "{detail}");
    assert_eq!(detail["tool"], "goodput-powstream");
    let first = get(&format!("{base}/runs/first"));
    let theirs_first = last_answer(&recorded, |p| p.ends_with("/runs/first"));
    has_shape(&theirs_first, &first, "runs/first", &[]);
    // The stream runs its 11 s; then its run is over.
    let t0 = std::time::Instant::now();
    let main = loop {
        let run = get(&format!("{base}/runs/first"));
        if run["state"] == "finished" {
            break run;
        }
        assert!(t0.elapsed().as_secs() < 60, "the stream did not end: {run}");
        std::thread::sleep(std::time::Duration::from_millis(500));
    };
    // What `result TASK` reads: every run; the booked one has no result
    // of its own, as powstream's has none.
    let runs = get(&format!("{base}/runs"));
    let runs: Vec<String> = runs
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u.as_str().unwrap().rsplit('/').next().unwrap().to_owned())
        .collect();
    let theirs_runs = last_answer(&recorded, |p| p.ends_with("/runs"));
    assert_eq!(
        theirs_runs.as_array().unwrap().len(),
        3,
        "the real lead's: its run and 2 summaries"
    );
    assert_eq!(
        runs[0],
        main["href"].as_str().unwrap().rsplit('/').next().unwrap()
    );
    let theirs_main_id = theirs_runs[0]
        .as_str()
        .unwrap()
        .rsplit('/')
        .next()
        .unwrap()
        .to_owned();
    let theirs_main = last_answer(&recorded, |p| p.ends_with(&theirs_main_id));
    assert_eq!(theirs_main["state"], "finished");
    assert_eq!(theirs_main["result-merged"], Value::Null);
    has_shape(&theirs_main, &main, "the stream's run", &[]);
    assert_eq!(main["result-merged"], Value::Null, "{main}");
    assert_eq!(main["state"], "finished", "{main}");
    // The archive: the stream's run, and a row per summary.
    let id = format!("pscheduler/{task}/{}", runs[0]);
    let row = get_json("127.0.0.1", ports.api, &format!("/api/v1/runs/{id}"));
    assert_eq!(row["state"], "finished", "{row}");
    assert_eq!(row["class"], "background");
    assert_eq!(row["spec"]["continuous"], true, "{row}");
    assert_eq!(row["spec"]["summary_every"], 100, "{row}");
    let all = get_json("127.0.0.1", ports.api, "/api/v1/runs?limit=1000");
    let mut rows: Vec<Value> = all
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| {
            r["id"]
                .as_str()
                .unwrap()
                .starts_with(&format!("{id}/summary/to/"))
        })
        // A list's rows come without their documents.
        .map(|r| {
            get_json(
                "127.0.0.1",
                ports.api,
                &format!("/api/v1/runs/{}", r["id"].as_str().unwrap()),
            )
        })
        .collect();
    rows.sort_by_key(|r| r["start_ms"].as_u64());
    // 11 s of packets 50 ms apart: two whole summaries and a part.
    assert!(rows.len() >= 2, "{} summaries: {all}", rows.len());
    assert_eq!(runs.len(), 1 + rows.len(), "a run per summary stored: {runs:?}");
    let theirs_summary_id = theirs_runs[2]
        .as_str()
        .unwrap()
        .rsplit('/')
        .next()
        .unwrap()
        .to_owned();
    let theirs_summary = last_answer(&recorded, |p| p.ends_with(&theirs_summary_id));
    let theirs_text = last_answer(&recorded, |p| {
        p.contains(&theirs_summary_id) && p.contains("/result?format=text")
    });
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/pscheduler-schemas");
    let read = |f: &str| -> Value {
        serde_json::from_str(&std::fs::read_to_string(format!("{dir}/{f}.json")).unwrap()).unwrap()
    };
    let mut schema = read("latency-result");
    schema["pScheduler"] = read("dictionary");
    let v = jsonschema::validator_for(&schema).unwrap();
    let (mut sent, mut received) = (0, 0);
    for (run, row) in runs[1..].iter().zip(&rows) {
        let view = get(&format!("{base}/runs/{run}"));
        has_shape(&theirs_summary, &view, "a summary's run", &[]);
        assert_eq!(view["state"], "finished", "{view}");
        assert_eq!(view["result"], Value::Null);
        let merged = &view["result-merged"];
        // The summary's figures are the archived summary's own.
        let stored = &row["result"];
        assert_eq!(merged["packets-sent"], stored["sent"], "{merged} {stored}");
        assert_eq!(
            merged["packets-received"], stored["received"],
            "{merged} {stored}"
        );
        assert_eq!(merged["packets-lost"], stored["lost"], "{merged} {stored}");
        assert_eq!(merged["packets-lost"], 0, "{merged}");
        assert_eq!(merged["packets-duplicated"], stored["duplicates"]);
        let in_histogram: u64 = merged["histogram-latency"]
            .as_object()
            .unwrap()
            .values()
            .map(|n| n.as_u64().unwrap())
            .sum();
        assert_eq!(
            json!(in_histogram),
            stored["received"],
            "every packet's delay: {merged}"
        );
        let wrong: Vec<String> = v.iter_errors(merged).map(|e| e.to_string()).collect();
        assert!(wrong.is_empty(), "{wrong:?}\n{merged}");
        sent += merged["packets-sent"].as_u64().unwrap();
        received += merged["packets-received"].as_u64().unwrap();
        let text = get(&format!("{base}/runs/{run}/result?format=text/plain"));
        assert_eq!(
            latency_layout(text.as_str().unwrap().trim()),
            latency_layout(theirs_text.as_str().unwrap().trim()),
            "the printed result's layout:\n{text}"
        );
    }
    // The first two summaries are whole; every packet of the stream is in
    // one summary, and each arrived.
    assert_eq!(rows[0]["result"]["sent"], 100);
    assert_eq!(rows[1]["result"]["sent"], 100);
    let to = &row["result"]["owamp"]["to"];
    assert_eq!(json!(sent), to["sent"], "{to}");
    assert_eq!(json!(received), to["received"], "{to}");
    assert_eq!(sent, received);
    // The task's command line, as the real lead's (the options this test
    // changed aside).
    let cli = get(&format!("{base}/cli"));
    let mut cli: Vec<String> = serde_json::from_value(cli).unwrap();
    for (option, value) in [
        ("--ctrl-port", owamp.to_string()),
        ("--duration", "PT11S".into()),
        ("--packet-interval", "0.05".into()),
    ] {
        let at = cli.iter().position(|a| a == option).expect(option);
        assert_eq!(cli[at + 1], value);
        cli[at + 1] = String::new();
    }
    let theirs_cli: Vec<String> =
        serde_json::from_value(last_answer(&recorded, |p| p.ends_with("/cli"))).unwrap();
    let theirs_cli: Vec<String> = theirs_cli
        .iter()
        .map(|a| a.replace(LEAD, "127.0.0.1").replace(CLI, "127.0.0.1"))
        .collect();
    let mut want = theirs_cli.clone();
    for option in ["--duration", "--packet-interval"] {
        let at = want.iter().position(|a| a == option).unwrap();
        want[at + 1] = String::new();
    }
    cli.retain(|a| a != "--ctrl-port");
    cli.retain(|a| !a.is_empty());
    want.retain(|a| !a.is_empty());
    assert_eq!(cli, want, "the task's command line");
    // A client that gives up on a stream: cancelling the task cuts its
    // run short, the summaries given until then kept, and frees its
    // background slot, rather than letting it stream to its end.
    doc["test"]["spec"]["duration"] = json!("PT10M");
    let long = post(&doc);
    let base = format!("/pscheduler/tasks/{long}");
    let t0 = std::time::Instant::now();
    while get(&format!("{base}/runs")).as_array().unwrap().len() < 2 {
        assert!(t0.elapsed().as_secs() < 30, "no summary came");
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
    let status = get_json("127.0.0.1", ports.api, "/api/v1/health");
    assert_eq!(status["running_background"], 1, "{status}");
    let (code, _, answer) = call(ps_port, "127.0.0.1", "DELETE", &base, None);
    assert_eq!(code, 200, "{answer}");
    let t0 = std::time::Instant::now();
    let cut = loop {
        let run = get(&format!("{base}/runs/first"));
        if run["state"] != "running" && run["state"] != "pending" {
            break run;
        }
        assert!(t0.elapsed().as_secs() < 10, "the stream went on: {run}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert_eq!(cut["state"], "canceled", "{cut}");
    let run = cut["href"].as_str().unwrap().rsplit('/').next().unwrap();
    let row = get_json(
        "127.0.0.1",
        ports.api,
        &format!("/api/v1/runs/pscheduler/{long}/{run}"),
    );
    assert_eq!(row["state"], "cancelled", "{row}");
    assert_eq!(row["reason"], "the pScheduler client cancelled the task", "{row}");
    assert!(row["end_ms"].as_u64().unwrap() < now_ms(), "{row}");
    let status = get_json("127.0.0.1", ports.api, "/api/v1/health");
    assert_eq!(status["running_background"], 0, "{status}");
    let summaries = get(&format!("{base}/runs")).as_array().unwrap().len() - 1;
    assert!(summaries >= 1, "the summary given before the cut is kept");
    agent.stop(libc::SIGTERM);
}

/// A task for `test` from this test's client.
fn task(ty: &str, spec: Value, schedule: Value) -> String {
    json!({"schema": 1, "test": {"type": ty, "spec": spec}, "schedule": schedule}).to_string()
}

#[test]
fn a_hostile_pscheduler_client_is_held_to_the_limits() {
    if !have("curl", &["--version"], "apt-get install curl") {
        return;
    }
    let ps_port = free_tcp_port();
    let (mut agent, ports) = start_agent(
        "ps-single-hostile",
        ps_port,
        &["--pscheduler-max-tasks", "20", "--max-run-length", "1h"],
    );
    let post = |from: &str, body: &str| call(ps_port, from, "POST", "/pscheduler/tasks", Some(body));
    let later = json!({"start": format!("{}+00:00", goodput_core::time::ms_rfc3339(now_ms() + 120_000).trim_end_matches('Z'))});
    // A stranger is refused before anything else.
    let (status, _, answer) = post("127.0.0.2", &task("rtt", json!({"dest": "127.0.0.1"}), json!({})));
    assert_eq!(status, 403, "{answer}");
    assert!(answer.contains("127.0.0.2 may not use"), "{answer}");
    // Absurd numbers, each refused with its field named.
    for (ty, spec, field) in [
        (
            "rtt",
            json!({"dest": "127.0.0.1", "count": 1_000_000_000u64}),
            "count",
        ),
        ("rtt", json!({"dest": "127.0.0.1", "interval": "P1D"}), "interval"),
        (
            "rtt",
            json!({"dest": "127.0.0.1", "interval": "PT0.0001S"}),
            "interval",
        ),
        ("rtt", json!({"dest": "127.0.0.1", "timeout": "PT1H"}), "timeout"),
        ("rtt", json!({"dest": "127.0.0.1", "length": 1_000_000}), "length"),
        ("rtt", json!({"dest": "127.0.0.1", "ttl": 1}), "ttl"),
        ("trace", json!({"dest": "127.0.0.1", "hops": 1000}), "hops"),
        ("trace", json!({"dest": "127.0.0.1", "queries": 500}), "queries"),
        ("trace", json!({"dest": "127.0.0.1", "wait": "PT10M"}), "wait"),
        ("trace", json!({"dest": "127.0.0.1", "first-ttl": 0}), "first-ttl"),
        ("trace", json!({"dest": "-f /etc/passwd"}), "dest"),
        (
            "latency",
            json!({"dest": "127.0.0.1", "packet-count": 1_000_000_000u64}),
            "packet-count",
        ),
        (
            "latency",
            json!({"dest": "127.0.0.1", "packet-interval": 0.000_000_1}),
            "packet-interval",
        ),
        (
            "latency",
            json!({"dest": "127.0.0.1", "packet-interval": 86_400}),
            "packet-interval",
        ),
        (
            "latency",
            json!({"dest": "127.0.0.1", "packet-padding": 1_000_000}),
            "packet-padding",
        ),
        (
            "latency",
            json!({"dest": "127.0.0.1", "packet-timeout": 1_000_000}),
            "packet-timeout",
        ),
        (
            "latency",
            json!({"dest": "127.0.0.1", "ctrl-port": 0}),
            "ctrl-port",
        ),
        (
            "latency",
            json!({"dest": "127.0.0.1", "output-raw": true}),
            "output-raw",
        ),
        (
            "latency",
            json!({"dest": "127.0.0.1", "protocol": "twamp"}),
            "protocol",
        ),
        ("latency", json!({"dest": "127.0.0.1:22"}), "dest"),
        (
            "latencybg",
            json!({"dest": "127.0.0.1", "duration": "P30D"}),
            "duration",
        ),
        (
            "latencybg",
            json!({"dest": "127.0.0.1", "duration": "PT1M", "packet-count": 1, "packet-interval": 0.001}),
            "packet-count × packet-interval",
        ),
        (
            "latencybg",
            json!({"dest": "127.0.0.1", "duration": "PT1M", "output-raw": true}),
            "output-raw",
        ),
    ] {
        let (status, _, answer) = post("127.0.0.1", &task(ty, spec.clone(), json!({})));
        assert_eq!(status, 400, "{spec}: {answer}");
        assert!(answer.contains(field), "{spec}: {answer}");
    }
    // A run longer than the agent's longest: the limit named.
    let (status, _, answer) = post(
        "127.0.0.1",
        &task(
            "rtt",
            json!({"dest": "127.0.0.1", "count": 1000, "interval": "PT60S"}),
            json!({}),
        ),
    );
    assert_eq!(status, 403, "{answer}");
    assert!(answer.contains("limit max_duration"), "{answer}");
    // 100,000 packets a minute apart: past the agent's longest run.
    let (status, _, answer) = post(
        "127.0.0.1",
        &task(
            "latency",
            json!({"dest": "127.0.0.1", "packet-count": 100_000, "packet-interval": 60}),
            json!({}),
        ),
    );
    assert_eq!(status, 403, "{answer}");
    assert!(answer.contains("limit max_duration"), "{answer}");
    // Tests it does not lead, with the reason.
    let (status, _, answer) = post(
        "127.0.0.1",
        &task("throughput", json!({"dest": "127.0.0.1"}), json!({})),
    );
    assert_eq!(status, 422, "{answer}");
    // A repeat without end, refused; a bounded one booked, then cancelled.
    let (status, _, answer) = post(
        "127.0.0.1",
        &task("rtt", json!({"dest": "127.0.0.1"}), json!({"repeat": "PT1M"})),
    );
    assert_eq!(status, 400, "{answer}");
    assert!(answer.contains("max-runs"), "{answer}");
    let mut bounded = later.clone();
    bounded["repeat"] = json!("PT1M");
    bounded["max-runs"] = json!(3);
    let (status, _, answer) = post("127.0.0.1", &task("rtt", json!({"dest": "127.0.0.1"}), bounded));
    assert_eq!(status, 200, "{answer}");
    let url: String = serde_json::from_str(&answer).unwrap();
    let path = url.split_once(&format!("{ps_port}")).unwrap().1.to_owned();
    let (_, _, runs) = call(ps_port, "127.0.0.1", "GET", &format!("{path}/runs"), None);
    let runs: Vec<String> = serde_json::from_str(&runs).unwrap();
    assert_eq!(runs.len(), 3, "{runs:?}");
    // Another client's task is not there for it.
    let (status, _, _) = call(ps_port, "127.0.0.3", "GET", &path, None);
    assert_eq!(status, 404);
    let (status, _, _) = call(ps_port, "127.0.0.3", "DELETE", &path, None);
    assert_eq!(status, 404);
    let (status, _, answer) = call(ps_port, "127.0.0.1", "DELETE", &path, None);
    assert_eq!(status, 200, "{answer}");
    let (_, _, first) = call(ps_port, "127.0.0.1", "GET", &format!("{path}/runs/first"), None);
    let first: Value = serde_json::from_str(&first).unwrap();
    assert_eq!(first["state"], "canceled", "{first}");
    let task_id = path.rsplit('/').next().unwrap();
    let run_id = runs[0].rsplit('/').next().unwrap();
    let row = archived(ports, &format!("pscheduler/{task_id}/{run_id}"));
    assert_eq!(row["state"], "cancelled", "{row}");
    // Streams: each keeps its summaries' results for pScheduler to read,
    // so no more than 16 latencybg tasks are under way at once.
    let mut streams = Vec::new();
    for _ in 0..16 {
        let body = task(
            "latencybg",
            json!({"dest": "127.0.0.1", "duration": "PT1M"}),
            later.clone(),
        );
        let (status, _, answer) = post("127.0.0.1", &body);
        assert_eq!(status, 200, "{answer}");
        let url: String = serde_json::from_str(&answer).unwrap();
        streams.push(url.split_once(&format!("{ps_port}")).unwrap().1.to_owned());
    }
    let body = task(
        "latencybg",
        json!({"dest": "127.0.0.1", "duration": "PT1M"}),
        later.clone(),
    );
    let (status, _, answer) = post("127.0.0.1", &body);
    assert_eq!(status, 403, "{answer}");
    assert!(answer.contains("limit pscheduler_latencybg_tasks"), "{answer}");
    for path in &streams {
        let (status, _, answer) = call(ps_port, "127.0.0.1", "DELETE", path, None);
        assert_eq!(status, 200, "{answer}");
    }
    // A day's stream is past this agent's longest run (1 h here).
    let (status, _, answer) = post(
        "127.0.0.1",
        &task("latencybg", json!({"dest": "127.0.0.1"}), later.clone()),
    );
    assert_eq!(status, 403, "{answer}");
    assert!(answer.contains("limit max_duration"), "{answer}");
    // A flood of tasks from one client: held to --pscheduler-max-tasks.
    let body = tmp("ps-single-hostile", "task.json");
    std::fs::write(
        &body,
        task("rtt", json!({"dest": "127.0.0.1", "count": 1}), later),
    )
    .unwrap();
    let flood = tmp("ps-single-hostile", "flood.curl");
    let mut f = std::fs::File::create(&flood).unwrap();
    for _ in 0..1000 {
        writeln!(
            f,
            "url = \"https://127.0.0.1:{ps_port}/pscheduler/tasks\"\nrequest = \"POST\"\n\
             data-binary = \"@{}\"\nheader = \"Content-Type: application/json\"\ninsecure\nsilent\n\
             write-out = \"%{{http_code}}\\n\"\noutput = \"/dev/null\"\nnext",
            body.display()
        )
        .unwrap();
    }
    drop(f);
    let out = Command::new("curl").arg("-K").arg(&flood).output().unwrap();
    let codes = String::from_utf8_lossy(&out.stdout);
    let ok = codes.lines().filter(|c| *c == "200").count();
    let refused = codes.lines().filter(|c| *c == "403").count();
    assert_eq!((ok, refused), (20, 980), "{}", &codes[..codes.len().min(400)]);
    let (status, _, answer) = post(
        "127.0.0.1",
        &task("trace", json!({"dest": "127.0.0.1"}), json!({})),
    );
    assert_eq!(status, 403);
    assert!(
        answer.contains("limit pscheduler_max_tasks: 127.0.0.1 keeps 20 tasks here, 20 allowed"),
        "{answer}"
    );
    // Another client still has its own share.
    let (status, _, answer) = post(
        "127.0.0.3",
        &task("rtt", json!({"dest": "127.0.0.1", "count": 1}), json!({})),
    );
    assert_eq!(status, 200, "{answer}");
    agent.stop(libc::SIGTERM);
}
