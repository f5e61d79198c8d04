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

use common::agents::{check_mesh, get_json, http, mesh_config, state, Agent, Ports, TOKEN};
use serde_json::Value;
use std::time::{Duration, Instant};

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
    let (tcp, stamp, non_starts) = check_mesh(&agents, ports, &[("throughput", 20), ("latency", 20)]);
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
    // `goodput agent run`: a asks b's agent for a slot and runs a test now.
    let spec = common::tmp("agent-mesh", "on-demand.json");
    std::fs::write(
        &spec,
        format!(
            r#"{{"kind": "tcp", "hosts": ["{}:{}"], "duration": "1s"}}"#,
            ips[1], ports.beacon
        ),
    )
    .unwrap();
    let url = format!("http://{}:{}", ips[0], ports.api);
    let token = common::tmp("agent-token", "token");
    let (code, out, err) = common::run(&[
        "agent",
        "run",
        "--agent",
        &url,
        "--token-file",
        token.to_str().unwrap(),
        "--dest",
        "b",
        spec.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        out.contains(": finished") && out.contains("throughput_up_bps"),
        "{out}"
    );
    let id = out.split_whitespace().nth(1).unwrap().trim_end_matches(':');
    let at_b = get_json(ips[1], ports.api, &format!("/api/v1/runs/{id}"));
    assert_eq!(at_b["state"], "finished", "{at_b}");
    // Without the token it is refused, and says why.
    let (code, _, err) = common::run(&["agent", "run", "--agent", &url, spec.to_str().unwrap()]);
    assert_eq!(code, Some(3), "{err}");
    assert!(err.contains("HTTP 401") && err.contains("token"), "{err}");
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
    // d is a plain goodput server with no agent: the on-demand run below
    // goes there, beside b's quota.
    let d = "127.0.0.8";
    let extra = format!("[addresses.d]\naddress = \"{d}\"\nno_agent = true\n");
    let config = mesh_config("agent-faults", &names, &ips, ports, 6, 3, &extra);
    let mut server = common::goodput();
    server.args([
        "server",
        "--listen",
        d,
        "--port",
        &ports.beacon.to_string(),
        "--no-udp",
    ]);
    let _server = common::Reaped::spawn(server);
    let good = std::fs::read_to_string(&config).unwrap();
    // c is configured but never started: a peer that is down. b allows
    // each requester one run an hour.
    let mut a = Agent::start("agent-faults", "a", ips[0], &config, ports, &[]);
    // And b takes throughput from 127.0.0.1 (this test) only at a time
    // of day six hours from now.
    let now_min = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        / 60
        % 1440;
    let (w0, w1) = ((now_min + 360) % 1440, (now_min + 420) % 1440);
    let window = format!(
        "127.0.0.1/32={:02}:{:02}-{:02}:{:02}",
        w0 / 60,
        w0 % 60,
        w1 / 60,
        w1 % 60
    );
    let mut b = Agent::start(
        "agent-faults",
        "b",
        ips[1],
        &config,
        ports,
        &[
            "--runs-per-hour",
            "1",
            "--window",
            &window,
            "--max-bitrate",
            "udp=1Mbit",
        ],
    );

    // Calls that change something need the token.
    let spec = format!(
        r#"{{"spec": {{"kind": "tcp", "hosts": ["{}:{}"], "duration": "3s"}}}}"#,
        ips[1], ports.beacon
    );
    let to_d = format!(
        r#"{{"spec": {{"kind": "tcp", "hosts": ["{d}:{}"], "duration": "3s"}}}}"#,
        ports.beacon
    );
    for token in [None, Some("wrong-token-wrong-token")] {
        let (status, body) = http(ips[0], ports.api, "POST", "/api/v1/runs", token, &spec);
        assert_eq!(status, 401, "{body}");
        assert!(body.contains("token"), "{body}");
        let (status, _) = http(ips[0], ports.api, "POST", "/api/v1/reservations", token, "{}");
        assert_eq!(status, 401);
    }

    // A booking must come from the run's other end, whatever it carries.
    let forged = r#"{"id": "throughput/b/a/0", "task": "throughput", "source": "b", "dest": "a",
        "spec": {"kind": "udp", "host": "192.0.2.1"}, "class": "background",
        "scheduled_ms": 0, "start_ms": 0, "end_ms": 1}"#;
    let (status, body) = http(
        ips[0],
        ports.api,
        "POST",
        "/api/v1/reservations",
        Some(TOKEN),
        forged,
    );
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("is not b, the run's other end"), "{body}");

    // Outside its window b refuses throughput from here, naming the window.
    let (status, body) = http(ips[1], ports.api, "POST", "/api/v1/runs", Some(TOKEN), &spec);
    assert_eq!(status, 403, "{body}");
    assert!(
        body.contains("limit window: exclusive runs from 127.0.0.1 only"),
        "{body}"
    );

    // And faster UDP than b allows is refused, naming the limit.
    let fast = format!(r#"{{"spec": {{"kind": "udp", "host": "{d}", "bitrate": "10Mbit"}}}}"#);
    let (status, body) = http(ips[1], ports.api, "POST", "/api/v1/runs", Some(TOKEN), &fast);
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("limit max_bitrate: a udp run of 10"), "{body}");

    // 1,000 junk requests leave it serving.
    let huge = "x".repeat(5 << 20);
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
    let (status, body) = http(ips[0], ports.api, "POST", "/api/v1/runs", Some(TOKEN), &to_d);
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

#[test]
fn agents_call_each_other_over_tls_with_pinned_certificates() {
    let group = "agent-tls";
    let ports = Ports::pick();
    let plain = common::free_tcp_port();
    let names = ["a", "b"];
    let ips = ["127.0.0.11", "127.0.0.12"];
    // Each agent's certificate, made and kept beside its archive.
    let fingerprint = |name: &str| {
        let archive = common::tmp(group, &format!("{name}.sqlite"));
        let (code, out, err) = common::run(&[
            "agent",
            "--print-fingerprint",
            "--archive",
            archive.to_str().unwrap(),
        ]);
        assert_eq!(code, Some(0), "{err}");
        let f = out.trim().to_owned();
        assert_eq!(f.len(), 64, "{f}");
        f
    };
    let (fa, fb) = (fingerprint("a"), fingerprint("b"));
    assert_eq!(fingerprint("a"), fa, "the certificate is kept, not made again");
    let base = std::fs::read_to_string(mesh_config(group, &names, &ips, ports, 6, 3, "")).unwrap();
    let with_pins = |pin_a: &str, pin_b: &str| {
        base.replace(
            &format!("address = \"{}\"\n", ips[0]),
            &format!("address = \"{}\"\ntls_sha256 = \"{pin_a}\"\n", ips[0]),
        )
        .replace(
            &format!("address = \"{}\"\n", ips[1]),
            &format!("address = \"{}\"\ntls_sha256 = \"{pin_b}\"\n", ips[1]),
        )
    };
    // a has a wrong pin for b; b has both right.
    let wrong = "00".repeat(32);
    let config_a = common::tmp(group, "mesh-a.toml");
    std::fs::write(&config_a, with_pins(&fa, &wrong)).unwrap();
    let config_b = common::tmp(group, "mesh-b.toml");
    std::fs::write(&config_b, with_pins(&fa, &fb)).unwrap();
    let plain_at = |ip: &str| format!("{ip}:{plain}");
    let mut a = Agent::start(
        group,
        "a",
        ips[0],
        &config_a,
        ports,
        &["--plain-api-listen", &plain_at(ips[0])],
    );
    let mut b = Agent::start(
        group,
        "b",
        ips[1],
        &config_b,
        ports,
        &["--plain-api-listen", &plain_at(ips[1])],
    );
    // The API port speaks TLS only.
    let (status, _) = http(ips[0], ports.api, "GET", "/api/v1/health", None, "");
    assert_eq!(status, 0, "plain HTTP was answered on the TLS port");
    std::thread::sleep(Duration::from_secs(20));
    let runs_at = |ip: &str| -> Vec<Value> {
        get_json(ip, plain, "/api/v1/runs?limit=10000")
            .as_array()
            .unwrap()
            .clone()
    };
    let at_a = runs_at(ips[0]);
    let at_b = runs_at(ips[1]);
    // b → a: b checked a's certificate, booked, ran, and handed a the
    // results, all over TLS.
    let b_to_a: Vec<&Value> = at_b
        .iter()
        .filter(|r| r["source"] == "b" && r["kind"] != "stamp_minute" && state(r) == "finished")
        .collect();
    assert!(b_to_a.len() >= 2, "b ran too little: {at_b:#?}");
    for r in &b_to_a {
        assert!(
            at_a.iter().any(|x| x["id"] == r["id"] && state(x) == "finished"),
            "run {} did not reach a",
            r["id"]
        );
    }
    // a → b: a's pin for b is wrong, so it never books with b, and says why.
    // (A run whose time came too close to a late planner tick, under
    // load, is a non-start of its own kind: it was never asked of b.)
    let a_to_b: Vec<&Value> = at_a.iter().filter(|r| r["source"] == "a").collect();
    assert!(
        a_to_b.iter().any(|r| r["reason"]
            .as_str()
            .is_some_and(|w| w.starts_with("peer b unreachable"))),
        "{a_to_b:#?}"
    );
    for r in a_to_b {
        assert_eq!(state(r), "non_start", "{r}");
        let why = r["reason"].as_str().unwrap();
        assert!(
            why.starts_with("peer b unreachable") || why.contains("slip passed before it could be booked"),
            "{why}"
        );
    }
    // `goodput agent run` reaches an HTTPS agent with its pin (and only
    // with the right one).
    let spec = common::tmp(group, "on-demand.json");
    std::fs::write(
        &spec,
        format!(
            r#"{{"kind": "stamp", "host": "{}", "port": {}, "count": 5, "interval": "10ms"}}"#,
            ips[0], ports.stamp
        ),
    )
    .unwrap();
    let token = common::tmp("agent-token", "token");
    let on_demand = |pin: &str| {
        common::run(&[
            "agent",
            "run",
            "--agent",
            &format!("https://{}:{}", ips[1], ports.api),
            "--token-file",
            token.to_str().unwrap(),
            "--pin",
            pin,
            spec.to_str().unwrap(),
        ])
    };
    let (code, out, err) = on_demand(&fb);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains(": finished"), "{out}");
    let (code, _, err) = on_demand(&"11".repeat(32));
    assert_eq!(code, Some(3), "{err}");
    // A second agent on b's archive is refused.
    let b_archive = common::tmp(group, "b.sqlite");
    let second = |config: &std::path::Path| {
        common::run(&[
            "agent",
            "--config",
            config.to_str().unwrap(),
            "--as",
            "b",
            "--archive",
            b_archive.to_str().unwrap(),
            "--api-listen",
            "127.0.0.12:1",
        ])
    };
    let (code, _, err) = second(&config_b);
    assert_eq!(code, Some(3), "{err}");
    assert!(err.contains("another agent is using this archive"), "{err}");
    a.stop(libc::SIGTERM);
    b.stop(libc::SIGTERM);
    // An agent whose certificate is not the one pinned for it refuses to
    // start, saying so.
    let (code, _, err) = second(&config_a);
    assert_eq!(code, Some(3), "{err}");
    assert!(
        err.contains("addresses.b.tls_sha256 is") && err.contains(&fb),
        "{err}"
    );
}

#[test]
fn agents_trace_each_other_in_the_background_and_keep_the_paths() {
    let ports = Ports::pick();
    let ips = ["127.0.0.5", "127.0.0.6"];
    let mut t = format!("[agent]\napi_port = {}\n\n", ports.api);
    for (n, ip) in ["a", "b"].iter().zip(ips) {
        t += &format!("[addresses.{n}]\naddress = \"{ip}\"\n");
    }
    t += r#"
[groups.pair]
type = "mesh"
addresses = ["a", "b"]

[tests.path]
kind = "trace"
host = "{{dest}}"
max_hops = 4
wait = "300ms"

[schedules.often]
repeat = "PT3S"

[tasks.path]
group = "pair"
test = "path"
schedule = "often"
"#;
    let config = common::tmp("agent-trace", "mesh.toml");
    std::fs::write(&config, t).unwrap();
    let mut agents: Vec<Agent> = ["a", "b"]
        .iter()
        .zip(ips)
        .map(|(n, ip)| Agent::start("agent-trace", n, ip, &config, ports, &[]))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    let finished = |a: &Agent| {
        a.runs(ports)
            .into_iter()
            .filter(|r| r["kind"] == "trace" && state(r) == "finished" && r["source"] == a.name.as_str())
            .count()
    };
    while agents.iter().any(|a| finished(a) < 3) {
        assert!(
            Instant::now() < deadline,
            "traces did not finish: {}",
            agents[0].log_text()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let tasks = get_json(ips[0], ports.api, "/api/v1/tasks");
    assert!(
        tasks.to_string().contains("\"background\""),
        "a trace is a background test: {tasks}"
    );
    // One path on loopback: b at hop 1, never changed.
    let paths = get_json(ips[0], ports.api, "/api/v1/paths?source=a&dest=b");
    assert_eq!(paths["changed"], false, "{paths}");
    assert_eq!(paths["changes"], 0, "{paths}");
    let p = &paths["paths"].as_array().unwrap()[0];
    assert_eq!(paths["paths"].as_array().unwrap().len(), 1, "{paths}");
    assert!(p["runs"].as_u64().unwrap() >= 3, "{paths}");
    assert_eq!(p["hops"], 1.0, "{paths}");
    assert_eq!(p["hops_addresses"], serde_json::json!([["127.0.0.6"]]), "{paths}");
    let run = get_json(
        ips[0],
        ports.api,
        &format!("/api/v1/runs/{}", p["last_run"].as_str().unwrap()),
    );
    assert_eq!(
        run["result"]["trace"]["path_checksum"], p["path_checksum"],
        "{run}"
    );
    assert_eq!(run["figures"]["path_checksum"], p["path_checksum"], "{run}");
    let hops = get_json(
        ips[0],
        ports.api,
        "/api/v1/series?source=a&dest=b&kind=trace&metric=hops",
    );
    assert!(
        hops["points"]
            .as_array()
            .unwrap()
            .iter()
            .all(|x| x["mean"] == 1.0),
        "{hops}"
    );
    let (_, metrics) = http(ips[1], ports.api, "GET", "/metrics", None, "");
    assert!(
        // No sample timestamp: Prometheus keeps an old run's figure.
        metrics.contains("goodput_hops{task=\"path\",source=\"b\",dest=\"a\",kind=\"trace\"} 1\n"),
        "{metrics}"
    );
    for a in &mut agents {
        a.stop(libc::SIGTERM);
    }
}
