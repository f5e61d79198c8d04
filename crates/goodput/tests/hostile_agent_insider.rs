//! Insiders: callers that hold the mesh's token, calling from a peer's
//! address or from an address the mesh does not have. Agents run on
//! loopback addresses (127.0.0.61, .62; .63 is configured nowhere), each
//! under the servers' address-space limit. What must hold: a record is
//! written only by the agent that ran it (proven by the address it comes
//! from, never by what the body says), bookings and fleet registrations
//! the same; every write path has a quota per requester and refuses
//! figures and times out of range; a client's on-demand runs never use
//! up the quota a peer's scheduled runs need; on-demand specs reach only
//! test services and name no file; the refusal counters move.

mod common;

use common::agents::http_from;
use common::now_ms;

use common::agents::{get_json, mesh_config, state, Agent, Ports, TOKEN};
use serde_json::{json, Value};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// An on-demand run's record that says it did not start, from `source`
/// to `dest`, with `change` applied.
fn non_start(n: usize, source: &str, dest: &str, spec: &Value, change: impl Fn(&mut Value)) -> Value {
    let at = now_ms();
    let mut r = json!({
        "id": format!("on-demand/00000000-0000-4000-8000-{n:012}"),
        "task": "on-demand", "source": source, "dest": dest, "kind": "stamp",
        "class": "background", "state": "non_start", "reason": "forged",
        "scheduled_ms": at, "start_ms": null, "end_ms": null,
        "measurement_key": "", "spec": spec, "result": null, "figures": {}
    });
    change(&mut r);
    r
}

fn counters(ip: &str, port: u16) -> Value {
    get_json(ip, port, "/api/v1/health")["counters"].clone()
}

/// The properties a test checks, gathered: one run names every one that
/// does not hold (and the test fails at its end if any does not).
#[derive(Default)]
struct Checks(Vec<String>);

impl Checks {
    fn check(&mut self, holds: bool, what: impl Into<String>) {
        if !holds {
            let what = what.into();
            eprintln!("DOES NOT HOLD: {what}");
            self.0.push(what);
        }
    }

    fn done(self) {
        assert!(
            self.0.is_empty(),
            "{} properties do not hold:\n{}",
            self.0.len(),
            self.0.join("\n")
        );
    }
}

#[test]
fn records_bookings_and_on_demand_runs_only_as_their_owner_may() {
    let group = "hostile-insider";
    let ports = Ports::pick();
    let (a_ip, b_ip, stranger) = ("127.0.0.61", "127.0.0.62", "127.0.0.63");
    // Both tasks every 10 s; b lets each requester book 40 runs an hour.
    let config = mesh_config(group, &["a", "b"], &[a_ip, b_ip], ports, 10, 4, "");
    let mut a = Agent::start(group, "a", a_ip, &config, ports, &[]);
    let mut b = Agent::start(group, "b", b_ip, &config, ports, &["--runs-per-hour", "40"]);
    let started = now_ms();
    let mut c = Checks::default();

    let stamp_to_b =
        json!({"kind": "stamp", "host": b_ip, "port": ports.stamp, "count": 3, "interval": "10ms"});
    // 1. A run a ran to b: its record is a's, whatever a caller says.
    let deadline = Instant::now() + Duration::from_secs(40);
    let mine = loop {
        let found = a.runs(ports).into_iter().find(|r| {
            r["source"] == "a" && r["dest"] == "b" && r["task"] == "latency" && state(r) == "finished"
        });
        if let Some(r) = found {
            break r;
        }
        assert!(
            Instant::now() < deadline,
            "a finished no run to b: {}",
            a.log_text()
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    let id = mine["id"].as_str().unwrap().to_owned();
    let path = format!("/api/v1/runs/{id}");
    let forged = |source: &str, dest: &str| {
        let mut r = mine.clone();
        r["source"] = source.into();
        r["dest"] = dest.into();
        r["state"] = "failed".into();
        r["reason"] = "forged".into();
        r["result"] = Value::Null;
        r["figures"] = json!({"loss_pct": 99.0});
        r.to_string()
    };
    let stands = |c: &mut Checks, after: &str| {
        let now = get_json(a_ip, ports.api, &path);
        c.check(
            now["source"] == "a" && now["state"] == "finished" && now["figures"] == mine["figures"],
            format!(
                "a's record stands after {after}: {} {} {}",
                now["source"], now["state"], now["figures"]
            ),
        );
    };
    // From b's address, source and dest swapped.
    let (status, body) = http_from(b_ip, a_ip, ports.api, "PUT", &path, &forged("b", "a"));
    c.check(
        status == 403
            && body.contains(
                "is task latency from a to b here; the record handed over says task latency from b to a",
            ),
        format!("swapped ends from b's address refused: {status} {body}"),
    );
    stands(&mut c, "swapped ends from b's address");
    // From an unconfigured address, naming an unconfigured host.
    let (status, body) = http_from(stranger, a_ip, ports.api, "PUT", &path, &forged("nowhere", "a"));
    c.check(
        status == 403,
        format!("an unconfigured source from {stranger} refused: {status} {body}"),
    );
    stands(&mut c, "an unconfigured source");
    // From b's address, the ends as they are: b did not run it.
    let (status, body) = http_from(b_ip, a_ip, ports.api, "PUT", &path, &forged("a", "b"));
    c.check(
        status == 403 && body.contains("may only say it did not start"),
        format!("a's own run handed over from b's address refused: {status} {body}"),
    );
    stands(&mut c, "its own ends from b's address");

    // 2. Quota spill-over. A client asks a for on-demand runs to b until
    // b refuses them (b books them for a's address): a's own scheduled
    // runs to b must still be booked afterwards.
    let ask = json!({"spec": stamp_to_b, "slip": "10s"}).to_string();
    let mut refused_at_b = None;
    for i in 0..60 {
        let (status, body) = http_from("127.0.0.1", a_ip, ports.api, "POST", "/api/v1/runs", &ask);
        assert_eq!(status, 201, "on-demand run {i}: {body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        if v["state"] == "non_start" {
            let why = v["reason"].as_str().unwrap_or("").to_owned();
            assert!(why.contains("peer b refused: limit runs_per_hour"), "{why}");
            refused_at_b = Some((i, why));
            break;
        }
    }
    let (asked, why) = refused_at_b.expect("b never refused an on-demand run");
    eprintln!("b refused on-demand run {asked}: {why}");
    let flood_over = now_ms();
    // Two rounds of the schedule (10 s each, 4 s of slip) later.
    std::thread::sleep(Duration::from_secs(26));
    let mesh_to_b: Vec<Value> = a
        .runs(ports)
        .into_iter()
        .filter(|r| r["task"] != "on-demand" && r["source"] == "a" && r["dest"] == "b")
        .filter(|r| r["scheduled_ms"].as_u64().unwrap_or(0) > flood_over)
        .collect();
    let refused = mesh_to_b
        .iter()
        .filter(|r| r["reason"].as_str().unwrap_or("").contains("limit runs_per_hour"))
        .count();
    let booked = mesh_to_b
        .iter()
        .filter(|r| ["scheduled", "running", "finished"].contains(&state(r)))
        .count();
    eprintln!(
        "after the on-demand runs: {} of a's scheduled runs to b, {booked} booked, {refused} refused by b's quota",
        mesh_to_b.len()
    );
    c.check(
        refused == 0,
        format!("spill-over: b refused {refused} of a's scheduled runs after a client's on-demand runs"),
    );
    c.check(
        booked >= 2,
        format!("spill-over: only {booked} of a's scheduled runs to b were booked"),
    );

    // 3. A booking with an unconfigured source, from anywhere.
    let at = now_ms() + 120_000;
    let booking = json!({
        "id": "on-demand/11111111-2222-4333-8444-555555555555", "task": "on-demand",
        "source": "nowhere", "dest": "a",
        "spec": {"kind": "tcp", "hosts": [format!("{a_ip}:{}", ports.beacon)], "duration": "1s"},
        "class": "exclusive", "scheduled_ms": at, "start_ms": at, "end_ms": at + 3000
    })
    .to_string();
    for from in [stranger, b_ip] {
        let (status, body) = http_from(from, a_ip, ports.api, "POST", "/api/v1/reservations", &booking);
        c.check(
            status == 403
                && body.contains("nowhere, the run's other end, is not an address of this agent's mesh"),
            format!("a booking for an unconfigured source from {from} refused: {status} {body}"),
        );
    }
    let schedule = get_json(
        a_ip,
        ports.api,
        &format!("/api/v1/schedule?from_ms={}&to_ms={}", at - 1000, at + 5000),
    );
    c.check(
        !schedule.to_string().contains("11111111-2222"),
        "the forged booking is not on a's calendar",
    );

    // 4. On-demand specs: test services only, never the API; no file.
    let on_demand = |spec: Value| {
        http_from(
            "127.0.0.1",
            a_ip,
            ports.api,
            "POST",
            "/api/v1/runs",
            &json!({ "spec": spec, "slip": "5s" }).to_string(),
        )
    };
    let (status, body) =
        on_demand(json!({"kind": "tcp", "hosts": [format!("{b_ip}:{}", ports.api)], "duration": "1s"}));
    c.check(
        status == 403 && body.contains(&format!("{b_ip}:{} is the agents' API", ports.api)),
        format!("an on-demand test to b's API port refused: {status} {body}"),
    );
    let (status, body) = on_demand(json!({"kind": "tcp", "hosts": [format!("{b_ip}:22")], "duration": "1s"}));
    c.check(
        status == 403 && body.contains("port 22 of b is not one of its tcp test services"),
        format!("an on-demand test to b's port 22 refused: {status} {body}"),
    );
    // Whether a file exists on the agent: the same answer either way.
    let echo = |ca: &str| {
        json!({"kind": "echo", "target": format!("{b_ip}:{}", ports.beacon), "tls": true, "ca": ca,
               "messages": 1})
    };
    let exists = on_demand(echo("/etc/passwd"));
    let missing = on_demand(echo("/no/such/file.pem"));
    c.check(
        exists.0 == 403 && exists.1.contains("ca names a file on the agent"),
        format!("a spec naming a file refused: {} {}", exists.0, exists.1),
    );
    c.check(
        exists == missing,
        format!("the same answer whether the file exists or not: {exists:?} / {missing:?}"),
    );

    // 5. Figures and times out of range, handed over from b's address as
    // records of on-demand runs b says did not start.
    let spec = stamp_to_b.clone();
    type Change = Box<dyn Fn(&mut Value)>;
    let cases: Vec<(&str, Change, &str)> = vec![
        (
            "a 1e308 delay",
            Box::new(|r| r["figures"]["delay_median_us"] = json!(1e308)),
            "figure delay_median_us is 1e308",
        ),
        (
            "a -1e308 throughput",
            Box::new(|r| r["figures"]["throughput_up_bps"] = json!(-1e308)),
            "figure throughput_up_bps is -1e308",
        ),
        (
            "a negative loss",
            Box::new(|r| r["figures"]["loss_pct"] = json!(-5.0)),
            "figure loss_pct is -5",
        ),
        (
            "a loss over 100 %",
            Box::new(|r| r["figures"]["loss_pct"] = json!(250.0)),
            "figure loss_pct is 250",
        ),
        (
            "a date ten days ahead",
            Box::new(|r| r["scheduled_ms"] = json!(now_ms() + 10 * 86_400_000)),
            "is more than a day ahead of this agent's clock",
        ),
    ];
    for (n, (what, change, says)) in cases.into_iter().enumerate() {
        let r = non_start(900 + n, "b", "a", &spec, change);
        let id = r["id"].as_str().unwrap().to_owned();
        let path = format!("/api/v1/runs/{id}");
        let (status, body) = http_from(b_ip, a_ip, ports.api, "PUT", &path, &r.to_string());
        c.check(
            status == 400 && body.contains(says),
            format!("a record with {what} refused: {status} {body}"),
        );
        let (status, _) = http_from(b_ip, a_ip, ports.api, "GET", &path, "");
        c.check(status == 404, format!("a record with {what} not stored"));
    }
    // A record in range goes in.
    let ok = non_start(999, "b", "a", &spec, |r| r["figures"]["loss_pct"] = json!(0.0));
    let path = format!("/api/v1/runs/{}", ok["id"].as_str().unwrap());
    let (status, body) = http_from(b_ip, a_ip, ports.api, "PUT", &path, &ok.to_string());
    assert_eq!(status, 204, "a record in range: {body}");

    // 6. A flood of records from b's address: cut by the write quota.
    let flood_start = Instant::now();
    let (mut stored, mut limited) = (0, 0);
    for n in 0..1000 {
        let r = non_start(n, "b", "a", &spec, |_| {});
        let path = format!("/api/v1/runs/{}", r["id"].as_str().unwrap());
        let (status, body) = http_from(b_ip, a_ip, ports.api, "PUT", &path, &r.to_string());
        match status {
            204 => stored += 1,
            429 if body.contains("limit writes_per_minute: 127.0.0.62 is over its 600 results a minute") => {
                limited += 1
            }
            s => panic!("record {n}: {s} {body}"),
        }
    }
    let took = flood_start.elapsed();
    eprintln!("a flood of 1000 records in {took:?}: {stored} stored, {limited} refused by the quota");
    // A minute's allowance (600) and 10 a second since.
    let most = 600 + (took.as_secs_f64() * 10.0).ceil() as usize;
    c.check(
        stored <= most,
        format!("the write quota: {stored} of 1000 forged records went in ({most} allowed)"),
    );
    assert!(stored >= 590, "the quota let only {stored} in");
    // Memory and descriptors after the attacks: the agent's peak resident
    // memory under 256 MiB, and no descriptor left behind by the calls.
    let pid = a.child.as_ref().unwrap().pid();
    let peak_kib = common::proc_kib(pid, "VmHWM");
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count());
    eprintln!(
        "agent a after the attacks: peak resident {} MiB, {fds} descriptors",
        peak_kib / 1024
    );
    assert!(
        peak_kib > 0 && peak_kib < 256 << 10,
        "agent a peaked at {peak_kib} KiB"
    );
    assert!(fds < 200, "agent a holds {fds} descriptors");

    // 7. The counters of what was refused moved, and /metrics shows it.
    let n = counters(a_ip, ports.api);
    eprintln!("a's counters: {n}");
    let at_least = |k: &str, least: u64| n[k].as_u64().unwrap_or(0) >= least;
    c.check(
        at_least("refused_not_owner", 5),
        format!("refused_not_owner moved: {n}"),
    );
    c.check(at_least("refused_spec", 4), format!("refused_spec moved: {n}"));
    c.check(
        at_least("refused_out_of_range", 5),
        format!("refused_out_of_range moved: {n}"),
    );
    c.check(
        limited > 0 && at_least("refused_write_quota", limited as u64),
        format!("refused_write_quota moved: {n}"),
    );
    let (_, metrics) = http_from("127.0.0.1", a_ip, ports.api, "GET", "/metrics", "");
    let total: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("goodput_agent_refused_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    c.check(
        limited > 0 && total >= limited as u64 + 14,
        format!("goodput_agent_refused_total moved: {total}"),
    );
    eprintln!("ran {} s", (now_ms() - started) / 1000);
    a.stop(libc::SIGTERM);
    b.stop(libc::SIGTERM);
    c.done();
}

/// A fleet archive (SQLite, plain HTTP on 127.0.0.64) for the mesh of
/// `config`.
fn archive(group: &str, config: &std::path::Path, port: u16) -> common::Reaped {
    archive_on(group, config, "127.0.0.64", port)
}

/// The same, on `ip`.
fn archive_on(group: &str, config: &std::path::Path, ip: &str, port: u16) -> common::Reaped {
    let token = common::tmp(group, "token");
    std::fs::write(&token, TOKEN).unwrap();
    let log = std::fs::File::create(common::tmp(group, "archive.log")).unwrap();
    let mut cmd = common::goodput();
    cmd.args(["agent", "--role", "archive", "--config"])
        .arg(config)
        .args(["--plain-api-listen", &format!("{ip}:{port}")])
        .arg("--archive")
        .arg(common::tmp(group, "archive.sqlite"))
        .arg("--token-file")
        .arg(&token)
        .arg("--no-beacon")
        .stdout(std::process::Stdio::null())
        .stderr(log);
    common::limit_address_space(&mut cmd, common::SERVER_ADDRESS_SPACE);
    let child = common::Reaped::spawn_as_is(cmd);
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect((ip, port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "the archive did not start: {}",
            std::fs::read_to_string(common::tmp(group, "archive.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    child
}

#[test]
fn a_fleet_archive_takes_registrations_from_their_agent_and_figures_in_range() {
    let group = "hostile-insider-fleet";
    let ports = Ports::pick();
    let (a_ip, b_ip, stranger, at) = ("127.0.0.65", "127.0.0.66", "127.0.0.63", "127.0.0.64");
    // c is configured by host name: what the name resolves to is c.
    let config = mesh_config(
        group,
        &["a", "b", "c"],
        &[a_ip, b_ip, "localhost"],
        ports,
        60,
        10,
        "",
    );
    let port = common::free_tcp_port();
    let _archive = archive(group, &config, port);
    let mut c = Checks::default();
    let registration = json!({
        "version": "0", "addresses": [a_ip], "services": [], "clock_synchronised": true,
        "clock_error_s": 0.0, "config_loaded": "2026-11-27T00:00:00.000Z", "config_error": null,
        "lease_s": 600
    })
    .to_string();

    // Registrations: only as the caller's own address.
    let (status, body) = http_from(a_ip, at, port, "PUT", "/api/v1/fleet/agents/b", &registration);
    c.check(
        status == 403 && body.contains("127.0.0.65 is not b"),
        format!("a registering as b refused: {status} {body}"),
    );
    let (status, body) = http_from(stranger, at, port, "PUT", "/api/v1/fleet/agents/a", &registration);
    c.check(
        status == 403,
        format!("{stranger} registering as a refused: {status} {body}"),
    );
    let (status, body) = http_from(a_ip, at, port, "PUT", "/api/v1/fleet/agents/c", &registration);
    c.check(
        status == 403 && body.contains("127.0.0.65 is not c"),
        format!("a registering as c (localhost) refused: {status} {body}"),
    );
    let (status, body) = http_from(a_ip, at, port, "PUT", "/api/v1/fleet/agents/a", &registration);
    assert_eq!(status, 204, "a registering as itself: {body}");
    let wild = registration.replace("\"clock_error_s\":0.0", "\"clock_error_s\":1e308");
    assert_ne!(wild, registration);
    let (status, body) = http_from(a_ip, at, port, "PUT", "/api/v1/fleet/agents/a", &wild);
    c.check(
        status == 400 && body.contains("clock_error_s must be 0 to 3600 s, not 1e308"),
        format!("a registration with a clock error of 1e308 s refused: {status} {body}"),
    );
    let (status, body) = http_from(
        "127.0.0.1",
        at,
        port,
        "PUT",
        "/api/v1/fleet/agents/c",
        &registration,
    );
    assert_eq!(status, 204, "c (localhost) registering from 127.0.0.1: {body}");
    let fleet = get_json(at, port, "/api/v1/fleet/agents");
    let state_of = |n: &str| {
        fleet
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["name"] == n)
            .map(|x| x["state"].clone())
    };
    assert_eq!(state_of("a"), Some(json!("up")), "{fleet}");
    c.check(
        state_of("b") == Some(json!("unregistered")),
        format!("b is not registered by others: {:?}", state_of("b")),
    );

    // Forwarded runs: per-minute figures and times are checked too.
    let spec = json!({"kind": "stamp", "host": b_ip, "port": ports.stamp, "count": 60, "interval": "1s"});
    let now = now_ms();
    let minute = |n: u64, figures: Value, at_ms: u64| {
        json!({
            "id": format!("latency/a/b/{now}/minute/{n}"), "task": "latency", "source": "a",
            "dest": "b", "kind": "stamp_minute", "class": "background", "state": "finished",
            "reason": null, "scheduled_ms": at_ms, "start_ms": at_ms, "end_ms": at_ms + 60_000,
            "measurement_key": "", "spec": spec, "result": {"sent": 60}, "figures": figures
        })
    };
    let batch = json!({"runs": [
        minute(1, json!({"loss_pct": 0.0, "delay_median_us": 120.0}), now),
        minute(2, json!({"loss_pct": 1e308}), now),
        minute(3, json!({"delay_median_us": -1e308}), now),
        minute(4, json!({"duplicates": -3.0}), now),
        minute(5, json!({"loss_pct": 0.0}), now + 30 * 86_400_000),
    ]})
    .to_string();
    let (status, body) = http_from(a_ip, at, port, "POST", "/api/v1/archive/runs", &batch);
    assert_eq!(status, 200, "{body}");
    let answer: Value = serde_json::from_str(&body).unwrap();
    let reasons: Vec<String> = answer["refused"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["reason"].as_str().unwrap_or("").to_owned())
        .collect();
    c.check(
        answer["stored"] == 1 && reasons.len() == 4,
        format!("forwarded minutes out of range refused: {answer}"),
    );
    for (i, says) in [
        "figure loss_pct is 1e308, outside 0 to 100 %",
        "figure delay_median_us is -1e308",
        "figure duplicates is -3",
        "more than a day ahead",
    ]
    .iter()
    .enumerate()
    {
        c.check(
            reasons.get(i).is_some_and(|r| r.contains(says)),
            format!("a forwarded minute refused: {says} ({reasons:?})"),
        );
    }

    // A pScheduler result with a bucket of 1e308 ms.
    let ps = |bucket: &str| {
        json!({
            "id": "8a9b0c1d-2e3f-4051-8263-748596a7b8c9",
            "schedule": {"start": "2026-11-26T15:01:00Z", "duration": "PT1M"},
            "test": {"type": "latencybg", "spec": {"source": a_ip, "dest": b_ip}},
            "participants": [a_ip, b_ip],
            "result": {"succeeded": true, "packets-sent": 600, "packets-lost": 6,
                       "histogram-latency": { bucket: 594 }}
        })
        .to_string()
    };
    let (status, body) = http_from(a_ip, at, port, "POST", "/api/v1/archive/pscheduler", &ps("1e308"));
    c.check(
        status == 400 && body.contains("bucket '1e308' is outside -3600000 to 3600000 ms"),
        format!("a pScheduler bucket of 1e308 ms refused: {status} {body}"),
    );
    // And one whose clocks' error is 1e308 ms.
    let mut wild: Value = serde_json::from_str(&ps("10.5")).unwrap();
    wild["result"]["max-clock-error"] = json!(1e308);
    let (status, body) = http_from(
        a_ip,
        at,
        port,
        "POST",
        "/api/v1/archive/pscheduler",
        &wild.to_string(),
    );
    c.check(
        status == 400 && body.contains("result.max-clock-error is 1e+308, not a time of 0 to 3600000 ms"),
        format!("a pScheduler clock error of 1e308 ms refused: {status} {body}"),
    );
    let (status, body) = http_from(a_ip, at, port, "POST", "/api/v1/archive/pscheduler", &ps("10.5"));
    assert_eq!(status, 200, "{body}");

    let n = counters(at, port);
    eprintln!("the archive's counters: {n}");
    c.check(
        n["refused_not_owner"].as_u64() == Some(3),
        format!("refused_not_owner: {n}"),
    );
    c.check(
        n["refused_out_of_range"].as_u64() == Some(7),
        format!("refused_out_of_range: {n}"),
    );
    c.check(n["refused"].as_u64() == Some(10), format!("refused: {n}"));
    c.done();
}

#[test]
fn a_fleet_archive_stores_a_forwarded_run_only_from_its_own_agent() {
    let group = "hostile-insider-ingest";
    let ports = Ports::pick();
    let (a_ip, b_ip, c_ip, stranger, at) = (
        "127.0.0.67",
        "127.0.0.68",
        "127.0.0.69",
        "127.0.0.63",
        "127.0.0.64",
    );
    let config = mesh_config(group, &["a", "b", "c"], &[a_ip, b_ip, c_ip], ports, 60, 10, "");
    let port = common::free_tcp_port();
    let _archive = archive(group, &config, port);
    let mut c = Checks::default();
    let spec = json!({"kind": "stamp", "host": c_ip, "port": ports.stamp, "count": 20, "interval": "20ms"});
    let now = now_ms();
    // A failed run's record (no result document to forge figures from).
    let run = |id: String, source: &str, dest: &str, reason: &str| {
        json!({
            "id": id, "task": "latency", "source": source, "dest": dest, "kind": "stamp",
            "class": "background", "state": "failed", "reason": reason, "scheduled_ms": now,
            "start_ms": now, "end_ms": now + 1_000, "measurement_key": "", "spec": spec,
            "result": null, "figures": {}
        })
    };
    let id = |source: &str, dest: &str, base: u64| format!("latency/{source}/{dest}/{base}");
    let on_demand = "on-demand/00000000-0000-4000-8000-000000000067".to_string();
    let post = |from: &str, runs: Vec<Value>| {
        let (status, body) = http_from(
            from,
            at,
            port,
            "POST",
            "/api/v1/archive/runs",
            &json!({ "runs": runs }).to_string(),
        );
        assert_eq!(status, 200, "a batch from {from}: {body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        let refused: Vec<(String, String)> = v["refused"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r["id"].as_str().unwrap_or("").to_owned(),
                    r["reason"].as_str().unwrap_or("").to_owned(),
                )
            })
            .collect();
        eprintln!("from {from}: stored {}, refused {refused:?}", v["stored"]);
        (v["stored"].as_u64().unwrap_or(u64::MAX), refused)
    };

    // a forwards its own: a run it led (a → c), one it held as the
    // dest (c → a), an on-demand run.
    let (stored, refused) = post(
        a_ip,
        vec![
            run(id("a", "c", now), "a", "c", "a's own"),
            run(id("c", "a", now), "c", "a", "a's own, as the dest"),
            run(on_demand.clone(), "a", "c", "a's own on-demand run"),
        ],
    );
    assert_eq!((stored, refused.len()), (3, 0), "a's own runs: {refused:?}");

    // A caller the mesh does not have: a's run replaced, a new one in
    // a's name, one from an address the mesh does not have.
    let (stored, refused) = post(
        stranger,
        vec![
            run(id("a", "c", now), "a", "c", "forged"),
            run(id("a", "c", now + 1), "a", "c", "forged"),
            run(id("x", "c", now), "x", "c", "forged"),
        ],
    );
    c.check(
        stored == 0 && refused.len() == 3,
        format!("{stranger}: nothing stored, 3 refused: {stored} {refused:?}"),
    );
    for (i, says) in [
        format!("{stranger} is not a; {stranger} is not c"),
        format!("{stranger} is not a; {stranger} is not c"),
        "x, an end of run latency/x/c/".to_string(),
    ]
    .iter()
    .enumerate()
    {
        c.check(
            refused
                .get(i)
                .is_some_and(|(_, r)| r.starts_with("not owner: ") && r.contains(says.as_str())),
            format!("{stranger}'s run {i} refused: {says} ({refused:?})"),
        );
    }

    // b, a peer holding the token: runs claiming a's source (one a's,
    // one new, one with the ends swapped under a's id, a's on-demand run
    // said to be b's) refused; b's own stored in the same batch.
    let (stored, refused) = post(
        b_ip,
        vec![
            run(id("a", "c", now), "a", "c", "forged"),
            run(id("a", "c", now + 2), "a", "c", "forged"),
            run(id("a", "c", now), "b", "c", "forged"),
            run(on_demand.clone(), "b", "c", "forged"),
            run(id("b", "c", now), "b", "c", "b's own"),
        ],
    );
    c.check(
        stored == 1 && refused.len() == 4,
        format!("{b_ip}: b's own stored, 4 refused: {stored} {refused:?}"),
    );
    for (i, says) in [
        format!("{b_ip} is not a; {b_ip} is not c"),
        format!("{b_ip} is not a; {b_ip} is not c"),
        format!(
            "{}'s id does not name its task latency, source b and dest c",
            id("a", "c", now)
        ),
        format!("{on_demand} is stored from a to c"),
    ]
    .iter()
    .enumerate()
    {
        c.check(
            refused
                .get(i)
                .is_some_and(|(_, r)| r.starts_with("not owner: ") && r.contains(says.as_str())),
            format!("{b_ip}'s run {i} refused: {says} ({refused:?})"),
        );
    }

    // What the archive holds: a's records as a sent them, b's own, no
    // forged one.
    let one = |id: &str| {
        let (status, body) = common::agents::http(at, port, "GET", &format!("/api/v1/runs/{id}"), None, "");
        (
            status,
            serde_json::from_str::<Value>(&body).unwrap_or(Value::Null),
        )
    };
    for (id, reason) in [
        (id("a", "c", now), "a's own"),
        (id("c", "a", now), "a's own, as the dest"),
        (on_demand.clone(), "a's own on-demand run"),
        (id("b", "c", now), "b's own"),
    ] {
        let (status, r) = one(&id);
        c.check(
            status == 200 && r["reason"] == reason && r["state"] == "failed",
            format!("run {id} is as its agent sent it ({reason}): {status} {r}"),
        );
    }
    for id in [id("a", "c", now + 1), id("a", "c", now + 2), id("x", "c", now)] {
        let (status, r) = one(&id);
        c.check(status == 404, format!("forged run {id} not stored: {status} {r}"));
    }
    let n = counters(at, port);
    eprintln!("the archive's counters: {n}");
    c.check(
        n["refused_not_owner"].as_u64() == Some(7),
        format!("refused_not_owner is 7: {n}"),
    );
    c.check(n["ingested"].as_u64() == Some(4), format!("ingested is 4: {n}"));
    c.check(n["refused"].as_u64() == Some(7), format!("refused is 7: {n}"));
    c.done();
}

/// Agents forward from their mesh address, to an archive named by IP
/// address (b) and by host name (a, `localhost`, which resolves to
/// 127.0.0.1 and ::1; a has no IPv6 mesh address, so its batches go to
/// 127.0.0.1 from 127.0.0.70): the archive, which stores a run only from
/// one of its ends, takes every run they forward and refuses none.
#[test]
fn agents_forward_from_their_mesh_address_to_an_archive_by_address_or_name() {
    let group = "hostile-insider-forward";
    let ports = Ports::pick();
    let (a_ip, b_ip) = ("127.0.0.70", "127.0.0.71");
    let config = mesh_config(group, &["a", "b"], &[a_ip, b_ip], ports, 3, 1, "");
    let port = common::free_tcp_port();
    let _archive = archive_on(group, &config, "127.0.0.1", port);
    let by_name = format!("http://localhost:{port}");
    let by_ip = format!("http://127.0.0.1:{port}");
    let mut a = Agent::start(group, "a", a_ip, &config, ports, &["--forward-to", &by_name]);
    let mut b = Agent::start(group, "b", b_ip, &config, ports, &["--forward-to", &by_ip]);
    let mut c = Checks::default();
    let ended = ["finished", "failed", "non_start", "cancelled", "missed"];
    let archived = || -> Vec<Value> {
        get_json("127.0.0.1", port, "/api/v1/runs?limit=10000")
            .as_array()
            .unwrap()
            .clone()
    };
    // Until the archive holds runs of both sources (60 s at most).
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        let runs = archived();
        if ["a", "b"].iter().all(|s| runs.iter().any(|r| r["source"] == *s)) {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    // What each agent has ended by now, then its queue emptied (30 s at
    // most): all of it is on the archive.
    let mut mine: Vec<(String, String)> = Vec::new();
    for agent in [&a, &b] {
        for r in agent.runs(ports) {
            if ended.iter().any(|e| r["state"] == *e) {
                mine.push((agent.name.clone(), r["id"].as_str().unwrap().to_owned()));
            }
        }
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    let queued =
        |agent: &Agent| get_json(&agent.ip, ports.api, "/api/v1/health")["forwarding"][0]["backlog"].as_u64();
    while Instant::now() < deadline && [&a, &b].iter().any(|x| queued(x) != Some(0)) {
        std::thread::sleep(Duration::from_millis(500));
    }
    let on_archive: Vec<String> = archived()
        .iter()
        .map(|r| r["id"].as_str().unwrap_or("").to_owned())
        .collect();
    let missing: Vec<&(String, String)> = mine.iter().filter(|(_, id)| !on_archive.contains(id)).collect();
    eprintln!(
        "{} runs ended on a and b, {} on the archive",
        mine.len(),
        on_archive.len()
    );
    c.check(
        ["a", "b"].iter().all(|n| mine.iter().any(|(m, _)| m == n)) && missing.is_empty(),
        format!(
            "every run a and b ended is on the archive; {} missing, first: {:?}",
            missing.len(),
            &missing[..missing.len().min(5)]
        ),
    );
    for agent in [&a, &b] {
        for l in agent
            .log_text()
            .lines()
            .filter(|l| l.contains("forwarding"))
            .take(5)
        {
            eprintln!("{}: {l}", agent.name);
        }
        let h = get_json(&agent.ip, ports.api, "/api/v1/health");
        c.check(
            h["forwarding"][0]["dropped"].as_u64() == Some(0) && h["forwarding"][0]["last_error"].is_null(),
            format!(
                "agent {} forwards without refusals: {}",
                agent.name, h["forwarding"]
            ),
        );
    }
    let n = counters("127.0.0.1", port);
    eprintln!("the archive's counters: {n}");
    c.check(
        n["ingested"].as_u64().is_some_and(|i| i >= mine.len() as u64),
        format!("{} runs ingested: {n}", mine.len()),
    );
    // Both registered, a through the archive's name too (from its own
    // address, found by resolving the name).
    let listed = get_json("127.0.0.1", port, "/api/v1/fleet/agents");
    for name in ["a", "b"] {
        let up = listed
            .as_array()
            .is_some_and(|l| l.iter().any(|x| x["name"] == name && x["state"] == "up"));
        c.check(up, format!("agent {name} registered: {listed}"));
    }
    a.stop(libc::SIGTERM);
    b.stop(libc::SIGTERM);
    c.done();
}
