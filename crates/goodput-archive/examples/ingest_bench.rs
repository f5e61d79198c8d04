//! A fleet archive's sustained ingest, for `bench/run.sh fleet`: `--agents`
//! simulated agents (one thread each) post batches of runs to a running
//! `goodput agent --role archive` (`POST /api/v1/archive/runs`, as a
//! forwarding agent does) for `--seconds`, and the rate of runs the
//! archive said it stored is printed.
//!
//!   cargo run --release -p goodput-archive --example ingest_bench -- \
//!       --url http://127.0.0.1:18792 --token-file FILE [--agents 50] [--seconds 20]
//!       [--batch 500] [--docs minute|stamp]
//!
//! `--docs minute` sends what a background STAMP stream forwards: one
//! per-minute summary per run (its figures, and a small document);
//! `--docs stamp` sends whole STAMP results (`tests/fixtures/stamp.json`,
//! 7 KB each), as a scheduled latency test forwards. Each agent's runs
//! have ids of their own, so every run is new to the archive.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

struct Args {
    url: String,
    token: String,
    agents: usize,
    seconds: u64,
    batch: usize,
    stamp_docs: bool,
}

fn args() -> Args {
    let mut a = Args {
        url: String::new(),
        token: String::new(),
        agents: 50,
        seconds: 20,
        batch: 500,
        stamp_docs: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--url" => a.url = value(),
            "--token-file" => {
                a.token = std::fs::read_to_string(value())
                    .expect("--token-file")
                    .trim()
                    .to_owned()
            }
            "--agents" => a.agents = value().parse().expect("--agents N"),
            "--seconds" => a.seconds = value().parse().expect("--seconds N"),
            "--batch" => a.batch = value().parse().expect("--batch N"),
            "--docs" => a.stamp_docs = value() == "stamp",
            other => panic!("unknown argument {other}"),
        }
    }
    assert!(a.url.starts_with("http://"), "--url http://HOST:PORT is required");
    a
}

/// One HTTP/1.1 POST; the status and the body.
fn post(host: &str, path: &str, token: &str, body: &[u8]) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect(host)?;
    s.set_read_timeout(Some(Duration::from_secs(60)))?;
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes())?;
    s.write_all(body)?;
    let mut out = Vec::new();
    s.read_to_end(&mut out)?;
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    Ok((
        status,
        text.split_once("\r\n\r\n").map_or("", |(_, b)| b).to_owned(),
    ))
}

fn main() {
    let a = Arc::new(args());
    let host = a
        .url
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned();
    let stamp: serde_json::Value =
        serde_json::from_str(include_str!("../tests/fixtures/stamp.json")).expect("the STAMP fixture");
    let spec = stamp["spec"].clone();
    let stored = Arc::new(AtomicU64::new(0));
    let sent_bytes = Arc::new(AtomicU64::new(0));
    let refused = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let started = Instant::now();
    let threads: Vec<_> = (0..a.agents)
        .map(|agent| {
            let (a, host, stamp, spec) = (a.clone(), host.clone(), stamp.clone(), spec.clone());
            let (stored, sent_bytes, refused, stop) =
                (stored.clone(), sent_bytes.clone(), refused.clone(), stop.clone());
            std::thread::spawn(move || {
                let source = format!("agent{agent:03}");
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let runs: Vec<serde_json::Value> = (0..a.batch)
                        .map(|_| {
                            n += 1;
                            // A minute per run, going back from now.
                            let at = now_ms.saturating_sub(n * 60_000);
                            let (kind, result, figures) = if a.stamp_docs {
                                (
                                    "stamp",
                                    stamp.clone(),
                                    serde_json::json!({}),
                                )
                            } else {
                                (
                                    "stamp_minute",
                                    serde_json::json!({"minute": {"sent": 600, "lost": n % 3, "rtt_us": {"p50": 812}}}),
                                    serde_json::json!({
                                        "loss_pct": (n % 3) as f64 / 6.0, "loss_forward_pct": (n % 3) as f64 / 6.0,
                                        "duplicates": 0.0, "reordered": 0.0, "delay_min_us": 640.0,
                                        "delay_median_us": 812.0 + (n % 17) as f64, "delay_p95_us": 955.0,
                                        "delay_max_us": 1210.0, "throughput_up_bps": null,
                                        "throughput_down_bps": null, "jitter_us": null, "retransmits": null,
                                        "errors": null
                                    }),
                                )
                            };
                            serde_json::json!({
                                "id": format!("lat/{source}/h02/{at}"),
                                "task": "lat", "source": source, "dest": "h02", "kind": kind,
                                "class": "background", "state": "finished", "reason": null,
                                "scheduled_ms": at, "start_ms": at, "end_ms": at + 60_000,
                                "measurement_key": "", "spec": spec, "result": result, "figures": figures,
                            })
                        })
                        .collect();
                    let body = serde_json::to_vec(&serde_json::json!({ "runs": runs })).unwrap();
                    match post(&host, "/api/v1/archive/runs", &a.token, &body) {
                        Ok((200, text)) => {
                            let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
                            let ok = v["stored"].as_u64().unwrap_or(0);
                            let bad = v["refused"].as_array().map_or(0, Vec::len) as u64;
                            if bad > 0 && refused.fetch_add(bad, Ordering::Relaxed) == 0 {
                                eprintln!("refused: {}", v["refused"][0]);
                            }
                            if !stop.load(Ordering::Relaxed) {
                                stored.fetch_add(ok, Ordering::Relaxed);
                                sent_bytes.fetch_add(body.len() as u64, Ordering::Relaxed);
                            }
                        }
                        Ok((status, text)) => {
                            eprintln!("agent {agent}: HTTP {status}: {}", text.chars().take(300).collect::<String>());
                            std::thread::sleep(Duration::from_millis(200));
                        }
                        Err(e) => {
                            eprintln!("agent {agent}: {e}");
                            std::thread::sleep(Duration::from_millis(200));
                        }
                    }
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(a.seconds));
    stop.store(true, Ordering::Relaxed);
    let took = started.elapsed().as_secs_f64();
    let n = stored.load(Ordering::Relaxed);
    let bytes = sent_bytes.load(Ordering::Relaxed);
    for t in threads {
        let _ = t.join();
    }
    println!(
        "ingest: {} agents posting batches of {} {}: {n} runs stored in {took:.1} s = {:.0} runs/s \
         ({:.1} MiB of JSON, {:.0} bytes a run; {} refused)",
        a.agents,
        a.batch,
        if a.stamp_docs {
            "whole STAMP results"
        } else {
            "per-minute STAMP summaries"
        },
        n as f64 / took,
        bytes as f64 / 1_048_576.0,
        if n > 0 { bytes as f64 / n as f64 } else { 0.0 },
        refused.load(Ordering::Relaxed)
    );
}
