//! The JSON API as an operator meets it in the first hour, on loopback:
//! a series asked without its kind is the one kind that has the metric
//! (or a 400 naming the kinds, never another test's empty series), with
//! metrics by their wire names, units and ISO times; alerts name their
//! task and say their thresholds in words; a baseline of a few runs
//! raises nothing and says it is forming; a peer agent that stops
//! answering is an `agent_unreachable` alert until it answers again.

mod common;

use common::agents::{get_json, http, seeded_pair, Agent, Ports};
use common::seed::{now_ms, seed, stamp, tcp, Seed};
use serde_json::Value;
use std::time::{Duration, Instant};

/// Polls `got` (every 250 ms, at most `secs`) until it gives a value.
fn wait_until<T>(what: &str, secs: u64, mut got: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = got() {
            return v;
        }
        assert!(Instant::now() < deadline, "{what}: not within {secs} s");
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn mesh(api: u16, a: &str, b: &str, b_agent: bool, extra: &str) -> String {
    seeded_pair(api, a, b, b_agent) + &format!("\n[alerts]\nevery = \"1s\"\nhold = 1\n{extra}")
}

#[test]
fn series_infer_their_kind_name_units_and_times_and_alerts_speak_in_words() {
    let ports = Ports::pick();
    let ip = "127.0.0.9";
    let text = mesh(ports.api, ip, "127.0.0.10", false, "");
    let config = common::tmp("api-first-hour", "mesh.toml");
    std::fs::write(&config, &text).unwrap();
    let archive = common::tmp("api-first-hour", "a.sqlite");
    let now = now_ms();
    let ab = |id: &str, task: &'static str, at: u64, f| Seed::ok(id, task, "a", "b", at, f);
    // A young mesh: four throughput runs, the last far below the others
    // (a baseline of four is still forming), and STAMP with 0.5% loss.
    // The newest run is TCP's, which has no delay.
    seed(
        &archive,
        &text,
        &[
            ab("lat-1", "lat", now - 120_000, stamp(0.5, 0.0, 400.0)),
            ab("tp-1", "tp", now - 100_000, tcp(900.0)),
            ab("tp-2", "tp", now - 90_000, tcp(910.0)),
            ab("tp-3", "tp", now - 80_000, tcp(890.0)),
            ab("tp-4", "tp", now - 60_000, tcp(100.0)),
        ],
    );
    let _agent = Agent::start("api-first-hour", "a", ip, &config, ports, &[]);
    let get = |path: &str| http(ip, ports.api, "GET", path, None, "");

    // Without kind: the one kind whose runs have the metric.
    let v = get_json(
        ip,
        ports.api,
        "/api/v1/series?source=a&dest=b&metric=delay_median&from_ms=0",
    );
    assert_eq!(v["kind"], "stamp", "{v}");
    assert_eq!(v["metric"], "delay_median");
    assert_eq!(v["unit"], "µs");
    let points = v["points"].as_array().unwrap();
    assert_eq!(points.len(), 1, "{v}");
    assert_eq!(points[0]["mean"].as_f64(), Some(400.0));
    let at_ms = points[0]["at_ms"].as_u64().unwrap();
    assert_eq!(at_ms, now - 120_000);
    assert_eq!(points[0]["at"], goodput_core::time::ms_rfc3339(at_ms));
    assert!(points[0]["at"].as_str().unwrap().ends_with('Z'));
    let v = get_json(
        ip,
        ports.api,
        "/api/v1/series?source=a&dest=b&metric=throughput_up&from_ms=0",
    );
    assert_eq!(
        (v["kind"].as_str(), v["unit"].as_str()),
        (Some("tcp"), Some("bit/s"))
    );
    assert_eq!(v["points"].as_array().unwrap().len(), 4);
    // Both kinds count errors: refused, naming them.
    let (st, body) = get("/api/v1/series?source=a&dest=b&metric=errors");
    assert_eq!(st, 400, "{body}");
    assert!(body.contains("tcp, stamp") && body.contains("kind="), "{body}");
    // The kind named still answers as before.
    let v = get_json(
        ip,
        ports.api,
        "/api/v1/series?source=a&dest=b&kind=tcp&metric=errors&from_ms=0",
    );
    assert_eq!(v["points"].as_array().unwrap().len(), 4);
    // A metric by its Rust name: refused with the wire names.
    let (st, body) = get("/api/v1/series?source=a&dest=b&metric=ThroughputUp");
    assert_eq!(st, 400, "{body}");
    assert!(
        body.contains("'ThroughputUp' is not one of throughput_up, throughput_down, loss,"),
        "{body}"
    );
    assert!(!body.contains("DelayMedian"), "{body}");

    // The loss alert: its task and its thresholds in words.
    let alerts: Vec<Value> = wait_until("the loss alert", 20, || {
        let v = get_json(ip, ports.api, "/api/v1/alerts");
        let v = v.as_array().unwrap().clone();
        v.iter().any(|a| a["metric"] == "loss").then_some(v)
    });
    let loss = alerts.iter().find(|a| a["metric"] == "loss").unwrap();
    assert_eq!(loss["task"], "lat");
    assert_eq!(loss["severity"], "warning");
    assert_eq!(
        loss["thresholds_text"],
        "warning when loss is above 0 %, critical when at or above 1 %"
    );
    assert!(
        loss["threshold"]
            .as_str()
            .unwrap()
            .ends_with("(warning when loss is above 0 %)"),
        "{loss}"
    );
    // Four runs are no baseline yet: no throughput alert, and the cell
    // says why.
    let cell = wait_until("the throughput cell", 20, || {
        let g = get_json(ip, ports.api, "/api/v1/grid?metric=throughput&scope=local");
        g["cells"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["direction"] == "forward" && c["why"].is_string())
            .cloned()
    });
    assert_eq!(
        cell["why"], "throughput: baseline forming (4 of 5 runs)",
        "{cell}"
    );
    assert_eq!(cell["status"], "ok");
    assert_eq!(cell["value"].as_f64(), Some(100e6));
    // Several evaluations later, still none.
    std::thread::sleep(Duration::from_secs(3));
    let open = get_json(ip, ports.api, "/api/v1/alerts");
    assert!(
        open.as_array()
            .unwrap()
            .iter()
            .all(|a| a["metric"] != "throughput"),
        "{open}"
    );
}

#[test]
fn a_peer_agent_that_stops_answering_is_an_alert_until_it_answers_again() {
    let ports = Ports::pick();
    let (ia, ib) = ("127.0.0.11", "127.0.0.12");
    let text = mesh(
        ports.api,
        ia,
        ib,
        true,
        "[alerts.rules.agent_unreachable]\nmetric = \"agent_unreachable\"\nwindow = \"3s\"\n",
    );
    let config = common::tmp("api-unreachable", "mesh.toml");
    std::fs::write(&config, &text).unwrap();
    let a = Agent::start("api-unreachable", "a", ia, &config, ports, &[]);
    let mut b = Agent::start("api-unreachable", "b", ib, &config, ports, &[]);
    let unreachable = || -> Vec<Value> {
        let v = get_json(ia, ports.api, "/api/v1/alerts");
        v.as_array()
            .unwrap()
            .iter()
            .filter(|x| x["rule"] == "agent_unreachable")
            .cloned()
            .collect()
    };
    // Both answer: nothing, over more than the window.
    std::thread::sleep(Duration::from_secs(5));
    assert!(unreachable().is_empty(), "{:?}\n{}", unreachable(), a.log_text());

    b.stop(libc::SIGTERM);
    let stopped = now_ms();
    let open = wait_until("agent_unreachable", 20, || {
        let v = unreachable();
        (!v.is_empty()).then_some(v)
    });
    let raised = now_ms();
    assert_eq!(open.len(), 1, "{open:?}");
    let al = &open[0];
    assert_eq!(
        (
            al["source"].as_str(),
            al["dest"].as_str(),
            al["severity"].as_str()
        ),
        (Some("a"), Some("b"), Some("critical")),
        "{al}"
    );
    assert_eq!(al["task"], "lat, tp");
    assert_eq!(
        al["thresholds_text"],
        "critical when a peer agent has not answered for 3s"
    );
    assert!(
        al["threshold"]
            .as_str()
            .unwrap()
            .contains("the agent at b has not answered"),
        "{al}"
    );
    // Within the window and a few evaluations.
    assert!(
        raised - stopped < 10_000,
        "raised {} ms after the stop",
        raised - stopped
    );
    assert!(
        a.log_text().contains("alert critical: agent_unreachable"),
        "{}",
        a.log_text()
    );

    // It answers again: the alert ends.
    b.spawn(&config, ports, &[]);
    wait_until("the alert's end", 15, || unreachable().is_empty().then_some(()));
    let all = get_json(ia, ports.api, "/api/v1/alerts?state=all");
    let ended: Vec<&Value> = all
        .as_array()
        .unwrap()
        .iter()
        .filter(|x| x["rule"] == "agent_unreachable")
        .collect();
    assert_eq!(ended.len(), 1, "{all}");
    assert!(ended[0]["end_ms"].as_u64().is_some(), "{all}");
}
