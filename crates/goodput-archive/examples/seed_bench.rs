//! Seeds an archive for the dashboard's benchmark (`bench/run.sh
//! dashboard`), through `Archive::put`, the call the agent stores its
//! results with, in transactions of `--batch` runs (hourly aggregates
//! kept as the agent's are).
//!
//!   cargo run --release -p goodput-archive --example seed_bench -- \
//!       --dir DIR [--hosts 50] [--api-port 18791] [--hours 2] [--batch 5000] [--year-pair]
//!       [--database postgres://…]
//!
//! (`--pairs N` is `--hosts N`.)
//!
//! Writes `DIR/mesh.toml`, a full mesh of `--hosts` addresses
//! (`h01`…, at 127.0.3.N) with two tasks between every ordered pair —
//! `lat`, STAMP once a minute, and `tp`, a TCP test every 6 h — whose
//! schedules start in 2099 (nothing runs while it is measured), and
//! `DIR/archive.sqlite` with, for every ordered pair, the last `--hours`
//! hours of one-minute STAMP runs and a week of six-hourly TCP runs. With
//! `--year-pair`, h01 → h02's STAMP runs go back a whole year instead
//! (525,600 runs). The figures vary from pair to pair and from run to
//! run (a pseudo-random hash of the pair and the time, the same on every
//! run of this tool): delay from the hosts' distance with noise and a
//! daily swing, a few pairs with loss (some above 1%), a few whose delay
//! rose in the last half hour, a few whose last throughput fell.
//! With `--database`, the runs go to that database (a fleet archive's
//! PostgreSQL; give it a new one) instead of `DIR/archive.sqlite`.
//! Prints what it stored and how fast.

use std::path::PathBuf;
use std::time::Instant;

use goodput_archive::{measurement_key, Archive, Figures, Run, RunState};
use goodput_core::mesh::{MeshConfig, PairTask};

const MINUTE: u64 = 60_000;
const HOUR: u64 = 3_600_000;
const DAY: u64 = 86_400_000;

struct Args {
    dir: PathBuf,
    hosts: usize,
    api_port: u16,
    hours: u64,
    year_pair: bool,
    batch: usize,
    database: Option<String>,
}

fn args() -> Args {
    let mut a = Args {
        dir: PathBuf::new(),
        hosts: 50,
        api_port: 18791,
        hours: 2,
        year_pair: false,
        batch: 5000,
        database: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--dir" => a.dir = PathBuf::from(value()),
            "--hosts" | "--pairs" => a.hosts = value().parse().expect("--hosts N"),
            "--api-port" => a.api_port = value().parse().expect("--api-port PORT"),
            "--hours" => a.hours = value().parse().expect("--hours N"),
            "--batch" => a.batch = value().parse().expect("--batch N"),
            "--year-pair" => a.year_pair = true,
            "--database" => a.database = Some(value()),
            other => panic!("unknown argument {other}"),
        }
    }
    assert!(!a.dir.as_os_str().is_empty(), "--dir DIR is required");
    assert!((2..=250).contains(&a.hosts), "--hosts from 2 to 250");
    a
}

/// The mesh configuration: every host an agent, two tasks per ordered pair.
fn config_text(hosts: usize, api_port: u16) -> String {
    let mut t = format!("[agent]\napi_port = {api_port}\n\n");
    for i in 1..=hosts {
        t += &format!("[addresses.{}]\naddress = \"127.0.3.{i}\"\n", name(i));
    }
    let all: Vec<String> = (1..=hosts).map(|i| format!("\"{}\"", name(i))).collect();
    t += &format!(
        r#"
[groups.all]
type = "mesh"
addresses = [{}]

[tests.lat]
kind = "stamp"
host = "{{{{dest}}}}"

[tests.tp]
kind = "tcp"
hosts = ["{{{{dest}}}}"]
duration = "10s"

# Nothing runs while the benchmark measures: the archive is seeded.
[schedules.minutely]
repeat = "PT1M"
start = "2099-01-01T00:00:00Z"

[schedules.six_hourly]
repeat = "PT6H"
start = "2099-01-01T00:00:00Z"

[tasks.lat]
group = "all"
test = "lat"
schedule = "minutely"

[tasks.tp]
group = "all"
test = "tp"
schedule = "six_hourly"

[alerts]
every = "1m"
hold = 1
"#,
        all.join(", ")
    );
    t
}

fn name(i: usize) -> String {
    format!("h{i:02}")
}

/// splitmix64: the same figures on every run of the tool.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// A number in [0, 1) from a seed.
fn unit(seed: u64) -> f64 {
    (mix(seed) >> 11) as f64 / (1u64 << 53) as f64
}

fn index(n: &str) -> u64 {
    n.trim_start_matches('h').parse().unwrap_or(0)
}

/// What a pair is like: its round trip, its loss and its throughput.
struct Character {
    rtt_us: f64,
    /// 0: no loss; 1: now and then one packet in a hundred (a warning); 2:
    /// a few percent (critical).
    loss: u8,
    /// Its delay rose in the last half hour.
    delay_rose: bool,
    mbit: f64,
    /// What its last throughput run got of the usual: 1, 0.5 or 0.2.
    last_fraction: f64,
}

fn character(source: &str, dest: &str) -> Character {
    let (s, d) = (index(source), index(dest));
    let seed = s * 1000 + d;
    // Hosts on a circle; the round trip grows with the distance.
    let (a, b) = (s.min(d) as f64, s.max(d) as f64);
    let dist = (b - a).min(50.0 - (b - a)).abs() / 25.0;
    let rtt_us = 300.0 + dist * 60_000.0 * (0.8 + 0.4 * unit(s.min(d) * 1000 + s.max(d)));
    let l = unit(seed ^ 0x1055);
    let t = unit(seed ^ 0x7477);
    Character {
        rtt_us,
        loss: if l < 0.03 {
            2
        } else if l < 0.10 {
            1
        } else {
            0
        },
        delay_rose: unit(seed ^ 0xde1a) < 0.03,
        mbit: 200.0 + 9_000.0 * unit(seed ^ 0x0bb5).powi(2),
        last_fraction: if t < 0.02 {
            0.2
        } else if t < 0.06 {
            0.5
        } else {
            1.0
        },
    }
}

/// One STAMP run's figures at `at`.
fn stamp_figures(c: &Character, seed: u64, at: u64, now: u64) -> Figures {
    let noise = unit(seed ^ at);
    // A daily swing of ±10%, and noise.
    let day = ((at % DAY) as f64 / DAY as f64 * std::f64::consts::TAU).sin();
    let mut median = c.rtt_us * (1.0 + 0.1 * day + 0.08 * (noise - 0.5));
    if c.delay_rose && at + 30 * MINUTE >= now {
        median = median * 2.5 + 5_000.0;
    }
    let (fwd, back) = match c.loss {
        2 => (1.0 + 3.0 * noise, if noise < 0.3 { 1.0 } else { 0.0 }),
        1 if noise < 0.2 => (1.0, 0.0),
        _ if noise > 0.9995 => (1.0, 0.0),
        _ => (0.0, 0.0),
    };
    let p95 = median * (1.2 + 0.3 * unit(seed ^ at ^ 0x95));
    Figures {
        loss_pct: Some(fwd + back),
        loss_forward_pct: Some(fwd),
        loss_backward_pct: Some(back),
        duplicates: Some(0.0),
        reordered: Some(0.0),
        delay_min_us: Some(median * 0.85),
        delay_median_us: Some(median),
        delay_p95_us: Some(p95),
        delay_max_us: Some(median * (1.6 + unit(seed ^ at ^ 0x3a) * 2.0)),
        jitter_us: Some(p95 - median),
        errors: Some(0.0),
        ..Figures::default()
    }
}

/// One TCP run's figures.
fn tcp_figures(c: &Character, seed: u64, at: u64, last: bool) -> Figures {
    let f = if last { c.last_fraction } else { 1.0 };
    let mbit = c.mbit * f * (0.9 + 0.1 * unit(seed ^ at));
    Figures {
        throughput_up_bps: Some(mbit * 1e6),
        retransmits: Some((unit(seed ^ at ^ 0x7e) * 40.0).floor()),
        errors: Some(0.0),
        ..Figures::default()
    }
}

fn run(p: &PairTask, key: &str, spec: &serde_json::Value, at: u64, figures: Figures) -> Run {
    let dest = p.dest.clone().unwrap_or_default();
    Run {
        id: format!("{}/{}/{}/{at}", p.task, p.source, dest),
        task: p.task.clone(),
        source: p.source.clone(),
        dest: p.dest.clone(),
        kind: p.spec.kind().into(),
        class: p.class,
        state: RunState::Finished,
        reason: None,
        scheduled_ms: at,
        start_ms: Some(at),
        end_ms: Some(at + if p.task == "tp" { 10_000 } else { 1_000 }),
        measurement_key: key.into(),
        spec: spec.clone(),
        result: None,
        figures,
    }
}

#[tokio::main]
async fn main() {
    let a = args();
    std::fs::create_dir_all(&a.dir).expect("--dir");
    let text = config_text(a.hosts, a.api_port);
    std::fs::write(a.dir.join("mesh.toml"), &text).expect("mesh.toml");
    let config = MeshConfig::read(&text, true).expect("the mesh configuration");
    let names: Vec<String> = config.addresses.keys().cloned().collect();
    let pairs = config.tasks_for(&names).expect("the tasks");
    let db = a.dir.join("archive.sqlite");
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
    }
    let archive = match &a.database {
        Some(url) => Archive::connect(url).await.expect("the database"),
        None => Archive::open(&db).await.expect("the archive"),
    };
    // Whole minutes, the last a minute ago.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
        / MINUTE
        * MINUTE;
    let started = Instant::now();
    let mut stored = 0u64;
    let mut batch: Vec<Run> = Vec::with_capacity(a.batch);
    let mut year_runs = 0u64;
    for p in &pairs {
        let dest = p.dest.as_deref().unwrap_or("");
        let key = measurement_key(&p.spec, &p.source, p.dest.as_deref());
        let spec = serde_json::to_value(&p.spec).unwrap();
        let c = character(&p.source, dest);
        let seed = mix(index(&p.source) * 1000 + index(dest));
        let times: Vec<(u64, bool)> = match p.task.as_str() {
            "lat" => {
                let span = if a.year_pair && p.source == "h01" && dest == "h02" {
                    365 * DAY
                } else {
                    a.hours * HOUR
                };
                let n = span / MINUTE;
                if span > a.hours * HOUR {
                    year_runs = n;
                }
                (1..=n).rev().map(|i| (now - i * MINUTE, i == 1)).collect()
            }
            _ => (0..28)
                .rev()
                .map(|i| (now - 10 * MINUTE - i * 6 * HOUR, i == 0))
                .collect(),
        };
        for (at, last) in times {
            let f = match p.task.as_str() {
                "lat" => stamp_figures(&c, seed, at, now),
                _ => tcp_figures(&c, seed, at, last),
            };
            batch.push(run(p, &key, &spec, at, f));
            if batch.len() == a.batch {
                archive.put(&batch).await.expect("put");
                stored += batch.len() as u64;
                batch.clear();
            }
        }
    }
    if !batch.is_empty() {
        archive.put(&batch).await.expect("put");
        stored += batch.len() as u64;
    }
    let took = started.elapsed().as_secs_f64();
    let size = archive.size_bytes().await.expect("size");
    println!(
        "seeded {}: {} hosts, {} measurements, {stored} runs ({} of them h01 -> h02's year of STAMP minutes) \
         in {took:.1} s ({:.0} runs/s, batches of {}); archive {:.0} MiB",
        a.database.as_deref().map_or_else(|| db.display().to_string(), |u| u.to_string()),
        a.hosts,
        pairs.len(),
        year_runs,
        stored as f64 / took,
        a.batch,
        size as f64 / 1_048_576.0
    );
}
