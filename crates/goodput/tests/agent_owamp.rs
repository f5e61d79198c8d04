//! Two agents on loopback addresses, each serving OWAMP and TWAMP on its
//! beacon (`--owamp`, `--twamp`), measuring each other as a perfSONAR mesh
//! imported with `import-psconfig` would: a continuous OWAMP stream
//! (powstream's, latencybg's) kept summary by summary, and TWAMP round
//! trips. What is checked comes from the agents' API.

mod common;

use common::agents::{get_json, state, Agent, Ports};
use common::{free_tcp_port, tmp};
use serde_json::Value;
use std::time::{Duration, Instant};

#[test]
fn agents_stream_owamp_by_summaries_and_reflect_twamp_for_each_other() {
    let group = "agent-owamp";
    let ports = Ports::pick();
    let (owamp_port, twamp_port) = (free_tcp_port(), free_tcp_port());
    let names = ["a", "b"];
    let ips = ["127.0.0.21", "127.0.0.22"];
    let config = tmp(group, "mesh.toml");
    std::fs::write(
        &config,
        format!(
            r#"[agent]
api_port = {api}

[addresses.a]
address = "{a}"
[addresses.b]
address = "{b}"

[groups.pair]
type = "mesh"
addresses = ["a", "b"]

[tests.bg]
kind = "owamp"
host = "{{{{dest}}}}"
port = {owamp_port}
interval = "20ms"
continuous = true
summary_every = 50
duration = "3s"

[tests.rtt]
kind = "twamp"
host = "{{{{dest}}}}"
port = {twamp_port}
count = 20
interval = "10ms"

[schedules.often]
repeat = "PT10S"

[tasks.bg]
group = "pair"
test = "bg"
schedule = "often"

[tasks.rtt]
group = "pair"
test = "rtt"
schedule = "often"
"#,
            api = ports.api,
            a = ips[0],
            b = ips[1],
        ),
    )
    .unwrap();
    let extra = [
        "--owamp",
        "--owamp-port",
        &owamp_port.to_string(),
        "--twamp",
        "--twamp-port",
        &twamp_port.to_string(),
    ];
    let mut agents: Vec<Agent> = names
        .iter()
        .zip(ips)
        .map(|(n, ip)| Agent::start(group, n, ip, &config, ports, &extra))
        .collect();
    // Wait until a's stream and round trips to b have run once.
    let deadline = Instant::now() + Duration::from_secs(45);
    let runs = loop {
        let runs: Vec<Value> = get_json(ips[0], ports.api, "/api/v1/runs?limit=10000")
            .as_array()
            .unwrap()
            .clone();
        let done = |task: &str| {
            runs.iter().any(|r| {
                r["task"] == task
                    && r["source"] == "a"
                    && r["kind"] != "owamp_summary"
                    && state(r) == "finished"
            })
        };
        if done("bg") && done("rtt") {
            break runs;
        }
        assert!(
            Instant::now() < deadline,
            "no finished runs: {runs:#?}\n{}",
            agents[0].log_text()
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    // The list leaves results out: read each of a's runs to b whole.
    let runs: Vec<Value> = runs
        .iter()
        .filter(|r| r["source"] == "a" && r["dest"] == "b" && state(r) == "finished")
        .map(|r| {
            get_json(
                ips[0],
                ports.api,
                &format!("/api/v1/runs/{}", r["id"].as_str().unwrap()),
            )
        })
        .collect();
    for a in &mut agents {
        a.stop(libc::SIGTERM);
    }
    let from_a = |kind: &str| -> Vec<&Value> { runs.iter().filter(|r| r["kind"] == kind).collect() };
    // The stream: 3 s of sessions of 50 packets at 20 ms (1 s each), so
    // 3 summaries each way in its first run, every one whole and
    // loss-free.
    let summaries = from_a("owamp_summary");
    for way in ["to", "from"] {
        let rows: Vec<&&Value> = summaries
            .iter()
            .filter(|r| r["id"].as_str().unwrap().contains(&format!("/summary/{way}/")))
            .collect();
        let first_run = rows
            .iter()
            .map(|r| r["id"].as_str().unwrap().split("/summary/").next().unwrap())
            .min()
            .unwrap();
        let first: Vec<&&&Value> = rows
            .iter()
            .filter(|r| r["id"].as_str().unwrap().starts_with(&format!("{first_run}/")))
            .collect();
        assert_eq!(first.len(), 3, "{way}: {summaries:#?}");
        for r in &rows {
            assert_eq!(state(r), "finished", "{r:#}");
            assert_eq!(r["result"]["sent"], 50, "{r:#}");
            assert_eq!(r["result"]["lost"], 0, "{r:#}");
            let col = if way == "to" {
                "loss_forward_pct"
            } else {
                "loss_backward_pct"
            };
            assert_eq!(r["figures"][col], 0.0, "{r:#}");
        }
    }
    // The stream's whole run ended by its duration, not as interrupted.
    let stream = from_a("owamp");
    let s = stream
        .iter()
        .find(|r| state(r) == "finished")
        .expect("a finished stream");
    assert_eq!(s["result"]["owamp"]["to"]["lost"], 0, "{s:#}");
    // TWAMP: the round trip, loss split by the reflector's numbering.
    let rtt = from_a("twamp");
    let t = rtt
        .iter()
        .find(|r| state(r) == "finished")
        .expect("a finished twamp run");
    let stats = &t["result"]["twamp"]["stats"];
    assert_eq!(stats["sent"], 20, "{t:#}");
    assert_eq!(stats["lost"], 0, "{t:#}");
    assert!(stats["rtt"]["median_us"].as_f64().unwrap() > 0.0, "{t:#}");
}
