//! The soft-failure acceptance test: four agents, each in its own network
//! namespace, run throughput (TCP, every 30 s) and STAMP (every 10 s)
//! between all twelve ordered pairs and evaluate their alert rules every
//! 5 s (a new state held for 2 evaluations). Once every half-cell is OK,
//! the test impairs exactly one direction of one pair (nftables drops 1%
//! of the UDP packets from a as they reach b, at random: `numgen`) and rate-limits
//! another (an htb class holds c's TCP test traffic to d at 50 Mbit/s).
//! Within 30 evaluation cycles the grid shows exactly those half-cells
//! as warning or critical and every other measured half-cell OK, and a
//! real Alertmanager holds exactly those alerts, with the right pair,
//! direction and metric; once the impairments are removed, within 30
//! cycles every cell is OK again and Alertmanager holds nothing. Over the
//! whole run no other alert was ever opened, on any agent.
//!
//! Loss warns above 0.3% (the mean of the last 20 s: two STAMP runs of
//! 400 packets), so that 1% alerts and one stray lost packet does not: the
//! agents' own TCP tests load the two cores, and an unimpaired pair was
//! seen to lose one request in a few minutes. The impaired direction's
//! loss must show as a's forward loss and as b's backward loss (its lost
//! replies), which needs the sender to know that a's beacon reflector is
//! stateful: those replies carry b's own sequence numbers, as a stateless
//! reflector's would.
//!
//! No data alerts after 5 repeat intervals without a result (not 3): the
//! twelve throughput pairs are exclusive and every 30 s, and a pair was
//! seen to miss two slots in a row to its reverse pair (non-starts: the
//! random point in the slip window left no free slot before its end) and
//! to start late in the third.
//!
//! Delay, one-way delay and path rules are off here: the four agents share
//! two cores, so a delay's median is at the scheduler's mercy, and nothing
//! traces.
//!
//! Needs root (network namespaces), iproute2, nftables and Alertmanager;
//! without them the test says so and passes, except under CI=true.

mod common;

use common::agents::{get_json, Agent, Ports};
use common::alerting::Alertmanager;
use common::netns::Lan;
use std::collections::BTreeSet;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const NAMES: [&str; 4] = ["a", "b", "c", "d"];
const IPS: [&str; 4] = ["10.77.0.1", "10.77.0.2", "10.77.0.3", "10.77.0.4"];
const EVERY_S: u64 = 5;
const CYCLES: u64 = 30;

fn config(ports: Ports, am: &str) -> String {
    let mut t = format!("[agent]\napi_port = {}\n\n", ports.api);
    for (n, ip) in NAMES.iter().zip(IPS) {
        t += &format!("[addresses.{n}]\naddress = \"{ip}\"\n");
    }
    t += &format!(
        r#"
[groups.all]
type = "mesh"
addresses = ["a", "b", "c", "d"]

[tests.throughput]
kind = "tcp"
hosts = ["{{{{dest}}}}:{beacon}"]
duration = "1s"
buffer = "128KiB"
connections = 4
socket = {{ send_buffer = "64KiB" }}

[tests.latency]
kind = "stamp"
host = "{{{{dest}}}}"
port = {stamp}
count = 400
interval = "10ms"

[schedules.throughput]
repeat = "PT30S"
slip = "PT25S"
sliprand = true

[schedules.latency]
repeat = "PT10S"

[tasks.throughput]
group = "all"
test = "throughput"
schedule = "throughput"

[tasks.latency]
group = "all"
test = "latency"
schedule = "latency"

[alerts]
every = "{EVERY_S}s"
hold = 2

[alerts.rules.loss]
metric = "loss"
window = "20s"
statistic = "mean"
warning = "~:0.3"
critical = "@1:"

[alerts.rules.throughput]
metric = "throughput"
window = "60s"
statistic = "last"
warning = "200Mbit:"
critical = "100Mbit:"

[alerts.rules.no_data]
metric = "no_data"
window = "5 repeats"

[alerts.rules.delay]
disabled = true

[alerts.rules.one_way_delay]
disabled = true

[alerts.rules.path]
disabled = true

[[alerts.send_to]]
alertmanager = "{am}"
"#,
        beacon = ports.beacon,
        stamp = ports.stamp
    );
    t
}

fn in_ns(ns: &str, cmd: &str, args: &[&str], stdin: Option<&str>) {
    use std::io::Write;
    let mut c = Command::new("ip")
        .args(["netns", "exec", ns, cmd])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if let Some(text) = stdin {
        c.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    }
    let out = c.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{cmd} {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Every half-cell of a metric's grid (as agent a shows the mesh):
/// (source>dest, direction) → status.
fn grid(ports: Ports, metric: &str) -> Vec<((String, String), String)> {
    let g = get_json(IPS[0], ports.api, &format!("/api/v1/grid?metric={metric}"));
    let agents = g["agents"].as_array().unwrap();
    assert!(agents.iter().all(|a| a["answered"] == true), "{g}");
    let mut v: Vec<_> = g["cells"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                (
                    format!(
                        "{}>{}",
                        c["source"].as_str().unwrap(),
                        c["dest"].as_str().unwrap()
                    ),
                    c["direction"].as_str().unwrap().to_owned(),
                ),
                c["status"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    v.sort();
    v
}

/// What the grids should say: `bad` half-cells warning or critical,
/// every other forward/backward loss half and forward throughput half
/// OK, throughput's backward halves not run (a TCP upload).
fn grids_are(ports: Ports, bad_loss: &[(&str, &str)], bad_tp: &[(&str, &str)]) -> Result<(), String> {
    for (metric, bad) in [("loss", bad_loss), ("throughput", bad_tp)] {
        let cells = grid(ports, metric);
        if cells.len() != 24 {
            return Err(format!("{metric}: {} half-cells", cells.len()));
        }
        for ((pair, dir), status) in &cells {
            let is_bad = bad.iter().any(|(p, d)| p == pair && d == dir);
            let ok = if is_bad {
                status == "warning" || status == "critical"
            } else if metric == "throughput" && dir == "backward" {
                status == "not_run"
            } else {
                status == "ok"
            };
            if !ok {
                return Err(format!("{metric} {pair} {dir} is {status}"));
            }
        }
    }
    Ok(())
}

/// The latest runs of the pair a failure of [`grids_are`] names, as its
/// source keeps them: state, reason, times and the loss and throughput
/// figures.
fn recent_runs(ports: Ports, failure: &str) -> String {
    let pair = failure.split_whitespace().nth(1).unwrap_or("");
    let Some((src, dst)) = pair.split_once('>') else {
        return String::new();
    };
    let Some(i) = NAMES.iter().position(|n| *n == src) else {
        return String::new();
    };
    let runs = get_json(
        IPS[i],
        ports.api,
        &format!("/api/v1/runs?source={src}&dest={dst}&limit=6"),
    );
    let lines: Vec<String> = runs
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| {
            let f = &r["figures"];
            format!(
                "{} {} {} start {} end {} reason {} loss {}/{}/{} up {}",
                r["id"],
                r["class"],
                r["state"],
                r["start_ms"],
                r["end_ms"],
                r["reason"],
                f["loss_pct"],
                f["loss_forward_pct"],
                f["loss_backward_pct"],
                f["throughput_up_bps"]
            )
        })
        .collect();
    format!("{src}'s latest runs to {dst}:\n  {}", lines.join("\n  "))
}

/// The STAMP runs from `src` to `dst` that lost packets, with their counts.
fn lossy_runs(ports: Ports, src: &str, dst: &str) -> String {
    let i = NAMES.iter().position(|n| *n == src).unwrap();
    let runs = get_json(
        IPS[i],
        ports.api,
        &format!("/api/v1/runs?source={src}&dest={dst}&kind=stamp&limit=1000"),
    );
    let mut out = String::new();
    for r in runs.as_array().into_iter().flatten() {
        if r["figures"]["loss_pct"].as_f64().unwrap_or(0.0) == 0.0 {
            continue;
        }
        let id = r["id"].as_str().unwrap();
        let one = get_json(IPS[i], ports.api, &format!("/api/v1/runs/{id}"));
        let t = &one["result"]["stamp"]["total"];
        out += &format!(
            "\n  {id} start {}: sent {} received {} lost {} late {} duplicates {} \
             forward {} backward {} reflector {} rtt max {}",
            r["start_ms"],
            t["sent"],
            t["received"],
            t["lost"],
            t["late"],
            t["duplicates"],
            t["lost_forward"],
            t["lost_backward"],
            t["reflector_mode"],
            t["rtt"]["max_us"]
        );
    }
    out
}

fn wait_until(what: &str, limit: Duration, mut f: impl FnMut() -> Result<(), String>) -> Duration {
    let start = Instant::now();
    loop {
        match f() {
            Ok(()) => return start.elapsed(),
            Err(e) if start.elapsed() > limit => panic!("{what}: after {:?}: {e}", start.elapsed()),
            Err(_) => std::thread::sleep(Duration::from_secs(1)),
        }
    }
}

/// Alertmanager's alerts as (alertname, source, from, to).
fn held(am: &Alertmanager) -> BTreeSet<(String, String, String, String)> {
    am.alerts()
        .iter()
        .map(|a| {
            let l = &a["labels"];
            let s = |k: &str| l[k].as_str().unwrap_or("").to_owned();
            (s("alertname"), s("source"), s("from"), s("to"))
        })
        .collect()
}

#[test]
fn one_impaired_direction_and_one_slow_pair_alert_exactly_and_recover() {
    if std::env::var_os("CI").is_none() && !common::have("nft", &["--version"], "apt-get install nftables") {
        return;
    }
    let Some(lan) = Lan::make(4) else {
        return;
    };
    lan.enter_bridge();
    let Some(am) = Alertmanager::start("soft", "10.77.0.254") else {
        return;
    };
    let ports = Ports {
        api: 8780,
        beacon: 4444,
        stamp: 862,
    };
    let path = common::tmp("soft", "mesh.toml");
    std::fs::write(&path, config(ports, &am.url)).unwrap();
    let mut agents: Vec<Agent> = NAMES
        .iter()
        .zip(IPS)
        .zip(&lan.agents)
        .map(|((n, ip), ns)| Agent::start_in(Some(ns), "soft", n, ip, &path, ports, &[]))
        .collect();
    let cycles = Duration::from_secs(CYCLES * EVERY_S);

    // Every pair measured and OK first.
    let t = wait_until("every half-cell OK", Duration::from_secs(150), || {
        grids_are(ports, &[], &[]).map_err(|e| format!("{e}; {}", recent_runs(ports, &e)))
    });
    eprintln!("all OK after {t:?}");
    assert!(held(&am).is_empty(), "{:?}", held(&am));

    // a → b: 1% of the UDP packets (a's STAMP requests to b, and a's
    // reflector's replies to b's requests) dropped at random; c's TCP
    // tests to d held to 50 Mbit/s.
    // Dropped as they arrive at b: a drop in a's own output would be
    // refused to the sender (EPERM), which knows it sent nothing.
    in_ns(
        &lan.agents[1],
        "nft",
        &["-f", "-"],
        Some(&format!(
            "table ip impair {{\n chain in {{\n  type filter hook input priority 0; policy accept;\n  ip saddr {} meta l4proto udp numgen random mod 100 == 0 drop\n }}\n}}\n",
            IPS[0]
        )),
    );
    let tc = |args: &[&str]| in_ns(&lan.agents[2], "tc", args, None);
    tc(&[
        "qdisc", "add", "dev", "eth0", "root", "handle", "1:", "htb", "default", "20",
    ]);
    tc(&[
        "class", "add", "dev", "eth0", "parent", "1:", "classid", "1:10", "htb", "rate", "50mbit", "ceil",
        "50mbit",
    ]);
    // The class is slow enough for a critical alert (below 100 Mbit/s),
    // and has a short queue, as a real shaper has: the 1 s test must end
    // within its booked 3 s slot, every send it began drained, or it ends
    // failed (no data on the grid). Its 4 connections' sends are 128 KiB
    // and their kernel send buffers 64 KiB (the config): with 8
    // connections and the default 1 MiB sends, 8 MiB were still to go at
    // the end, 1.3 s at 50 Mbit/s, and with 128 KiB sends the kernel's
    // autotuned send buffers still held enough to overrun the slot now
    // and then; with the default queue of 1000 packets, 0.25 s more.
    tc(&[
        "qdisc", "add", "dev", "eth0", "parent", "1:10", "handle", "10:", "pfifo", "limit", "100",
    ]);
    tc(&[
        "class", "add", "dev", "eth0", "parent", "1:", "classid", "1:20", "htb", "rate", "10gbit",
    ]);
    let beacon = ports.beacon.to_string();
    tc(&[
        "filter",
        "add",
        "dev",
        "eth0",
        "parent",
        "1:",
        "protocol",
        "ip",
        "u32",
        "match",
        "ip",
        "dst",
        &format!("{}/32", IPS[3]),
        "match",
        "ip",
        "dport",
        &beacon,
        "0xffff",
        "flowid",
        "1:10",
    ]);
    let bad_loss = [("a>b", "forward"), ("b>a", "backward")];
    let bad_tp = [("c>d", "forward")];
    let t = wait_until("the impaired half-cells", cycles, || {
        grids_are(ports, &bad_loss, &bad_tp).map_err(|e| format!("{e}; {}", recent_runs(ports, &e)))
    });
    eprintln!("impairments shown after {t:?}");
    let s = |x: &str| x.to_owned();
    let want: BTreeSet<_> = [
        (s("goodput_loss"), s("a"), s("a"), s("b")),
        (s("goodput_loss"), s("b"), s("a"), s("b")),
        (s("goodput_throughput"), s("c"), s("c"), s("d")),
    ]
    .into();
    wait_until("Alertmanager's alerts", cycles, || {
        let h = held(&am);
        if h == want {
            Ok(())
        } else {
            Err(format!("{h:?}"))
        }
    });
    // The labels say which way and what.
    for a in am.alerts() {
        let l = &a["labels"];
        let dir = l["direction"].as_str().unwrap();
        match (l["alertname"].as_str().unwrap(), l["source"].as_str().unwrap()) {
            ("goodput_loss", "a") => assert_eq!((dir, &l["dest"]), ("forward", &serde_json::json!("b"))),
            ("goodput_loss", "b") => assert_eq!((dir, &l["dest"]), ("backward", &serde_json::json!("a"))),
            ("goodput_throughput", "c") => {
                assert_eq!((dir, l["severity"].as_str().unwrap()), ("forward", "critical"))
            }
            other => panic!("{other:?}: {a}"),
        }
    }

    // Impairments removed: everything OK, every alert resolved.
    in_ns(&lan.agents[1], "nft", &["delete", "table", "ip", "impair"], None);
    tc(&["qdisc", "del", "dev", "eth0", "root"]);
    let t = wait_until("every half-cell OK again", cycles, || {
        grids_are(ports, &[], &[]).map_err(|e| format!("{e}; {}", recent_runs(ports, &e)))
    });
    eprintln!("recovered after {t:?}");
    wait_until("Alertmanager empty", cycles, || {
        let h = held(&am);
        if h.is_empty() {
            Ok(())
        } else {
            Err(format!("{h:?}"))
        }
    });
    // Nothing else ever alerted, on any agent; each alert that was opened
    // has ended.
    let mut keys = BTreeSet::new();
    let mut opened = Vec::new();
    for ip in IPS {
        let all = get_json(ip, ports.api, "/api/v1/alerts?state=all&from_ms=0");
        for a in all.as_array().unwrap() {
            assert!(a["end_ms"].as_u64().is_some(), "still open: {a}");
            let key = (
                a["metric"].as_str().unwrap().to_owned(),
                a["source"].as_str().unwrap().to_owned(),
                a["dest"].as_str().unwrap().to_owned(),
                a["direction"].as_str().unwrap().to_owned(),
            );
            opened.push((key.clone(), a.clone()));
            keys.insert(key);
        }
    }
    let want: BTreeSet<_> = [
        (s("loss"), s("a"), s("b"), s("forward")),
        (s("loss"), s("b"), s("a"), s("backward")),
        (s("throughput"), s("c"), s("d"), s("forward")),
    ]
    .into();
    if keys != want {
        // What opened the others, and the STAMP runs with loss behind them.
        let mut why = String::new();
        for ((metric, src, dst, _), a) in opened.iter().filter(|(k, _)| !want.contains(k)) {
            why += &format!("\n{a}");
            if metric == "loss" {
                why += &lossy_runs(ports, src, dst);
            } else {
                let (from, to) = (
                    a["start_ms"].as_u64().unwrap_or(0),
                    a["end_ms"].as_u64().unwrap_or(0),
                );
                let i = NAMES.iter().position(|n| n == src).unwrap();
                let runs = get_json(
                    IPS[i],
                    ports.api,
                    &format!(
                        "/api/v1/runs?source={src}&dest={dst}&from_ms={}&to_ms={to}&limit=50",
                        from.saturating_sub(150_000)
                    ),
                );
                for r in runs.as_array().into_iter().flatten() {
                    why += &format!(
                        "\n  {} {} scheduled {} start {} end {} reason {}",
                        r["id"], r["state"], r["scheduled_ms"], r["start_ms"], r["end_ms"], r["reason"]
                    );
                }
            }
        }
        panic!("alerts opened: {keys:?}, want {want:?}{why}");
    }
    for a in &mut agents {
        a.stop(libc::SIGTERM);
    }
}
