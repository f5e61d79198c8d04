//! `/metrics` as a real Prometheus (Debian's `prometheus`) reads it: an
//! agent whose archive holds a TCP run three hours old and a STAMP run of
//! a moment ago is scraped every second, and Prometheus's own query API
//! must give every figure of both runs, with the archive's values, and
//! each run's time as a gauge of its own. (A sample stamped with its
//! run's time is dropped as too old for Prometheus's head block, or is
//! outside a query's five-minute look-back: the old run's figures were
//! invisible.)

mod common;

use common::agents::{get_json, http, seeded_pair, Agent, Ports};
use common::seed::{now_ms, seed, stamp, tcp, Seed};
use common::{free_tcp_port, tmp, Reaped};
use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The samples of a `/metrics` text that carry a `task` label: (name,
/// task) → (value, how many fields the line has).
fn figures(text: &str) -> BTreeMap<(String, String), (f64, usize)> {
    let mut out = BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((name, rest)) = line.split_once('{') else {
            continue;
        };
        let Some((labels, values)) = rest.split_once('}') else {
            continue;
        };
        let Some(task) = labels
            .split(',')
            .find_map(|l| l.strip_prefix("task=\""))
            .map(|t| t.trim_end_matches('"').to_owned())
        else {
            continue;
        };
        let fields: Vec<&str> = values.split_whitespace().collect();
        out.insert(
            (name.to_owned(), task),
            (fields[0].parse().unwrap(), fields.len()),
        );
    }
    out
}

#[test]
fn prometheus_scrapes_every_figure_even_of_a_run_hours_old() {
    if !common::have("prometheus", &["--version"], "apt-get install prometheus") {
        return;
    }
    let ports = Ports::pick();
    let text = seeded_pair(ports.api, "127.0.0.13", "127.0.0.14", false);
    let config = tmp("prometheus-scrape", "mesh.toml");
    std::fs::write(&config, &text).unwrap();
    let archive = tmp("prometheus-scrape", "a.sqlite");
    let now = now_ms();
    let old = now - 3 * 3_600_000;
    let fresh = now - 30_000;
    seed(
        &archive,
        &text,
        &[
            Seed::ok("tp-1", "tp", "a", "b", old, tcp(900.0)),
            Seed::ok("lat-1", "lat", "a", "b", fresh, stamp(0.5, 0.25, 400.0)),
        ],
    );
    let _agent = Agent::start("prometheus-scrape", "a", "127.0.0.13", &config, ports, &[]);

    // What the agent exports: no sample carries a timestamp.
    let (st, body) = http("127.0.0.13", ports.api, "GET", "/metrics", None, "");
    assert_eq!(st, 200, "{body}");
    let exported = figures(&body);
    for ((name, task), (_, fields)) in &exported {
        assert_eq!(*fields, 1, "{name}{{task={task}}} has a timestamp: {body}");
    }
    let get = |name: &str, task: &str| exported.get(&(name.to_owned(), task.to_owned())).map(|v| v.0);
    assert_eq!(get("goodput_throughput_up_bits_per_second", "tp"), Some(900e6));
    assert_eq!(get("goodput_loss_ratio", "lat"), Some(0.0075));
    assert_eq!(get("goodput_delay_median_seconds", "lat"), Some(400e-6));
    assert_eq!(
        get("goodput_run_timestamp_seconds", "tp"),
        Some(old as f64 / 1000.0)
    );
    assert_eq!(
        get("goodput_run_timestamp_seconds", "lat"),
        Some(fresh as f64 / 1000.0)
    );
    // The archive's figures are the ones exported.
    let runs = get_json("127.0.0.13", ports.api, "/api/v1/runs?limit=10");
    let tp = runs
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["task"] == "tp")
        .unwrap();
    assert_eq!(tp["figures"]["throughput_up_bps"].as_f64(), Some(900e6));

    // Prometheus, scraping every second.
    let port = free_tcp_port();
    let dir = tmp("prometheus-scrape", "prometheus");
    std::fs::create_dir_all(&dir).unwrap();
    let yml = dir.join("prometheus.yml");
    std::fs::write(
        &yml,
        format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  - job_name: goodput\n    static_configs:\n      - targets: ['127.0.0.13:{}']\n",
            ports.api
        ),
    )
    .unwrap();
    let log_path = dir.join("prometheus.log");
    let mut cmd = Command::new("prometheus");
    cmd.arg(format!("--config.file={}", yml.display()))
        .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log_path).unwrap());
    let _prometheus = Reaped::spawn_as_is(cmd);
    let log = || std::fs::read_to_string(&log_path).unwrap_or_default();

    // Every figure of both runs, through Prometheus's query API.
    let query = |name: &str| -> Vec<(String, f64)> {
        let Ok(s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
            return Vec::new();
        };
        drop(s);
        let (st, body) = http(
            "127.0.0.1",
            port,
            "GET",
            &format!("/api/v1/query?query={name}"),
            None,
            "",
        );
        if st != 200 {
            return Vec::new();
        }
        let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        v["data"]["result"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| {
                Some((
                    r["metric"]["task"].as_str()?.to_owned(),
                    r["value"][1].as_str()?.parse().ok()?,
                ))
            })
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut missing: Vec<String>;
    loop {
        missing = exported
            .iter()
            .filter(|((name, task), (v, _))| !query(name).contains(&(task.clone(), *v)))
            .map(|((name, task), (v, _))| format!("{name}{{task={task}}} {v}"))
            .collect();
        if missing.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "Prometheus lacks {missing:?} after 20 s\n{}",
            log()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    // The whole set was compared: the old run's throughput is among it.
    assert!(exported.len() >= 10, "{exported:?}");
    assert_eq!(
        query("goodput_throughput_up_bits_per_second"),
        vec![("tp".to_owned(), 900e6)]
    );
    assert!(!log().contains("too old"), "{}", log());
}
