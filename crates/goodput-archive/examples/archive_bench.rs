//! The archive's ingest rate and a year-long series query, on a file in a
//! temporary directory.
//!
//!   cargo run --release -p goodput-archive --example archive_bench -- RUNS BATCH DOCS
//!
//! Stores RUNS results in transactions of BATCH — with DOCS 1 each with a
//! real STAMP result document (7 KB), with DOCS 0 only its figures and
//! spec, as a background stream's per-minute summary is kept — then reads
//! one measurement's series over the span: every point, then one
//! aggregate per day.

use std::time::Instant;

use goodput_archive::{figures_of, measurement_key, Archive, Metric, Run, RunState};
use goodput_core::result::TestResult;
use goodput_core::schedule::RunClass;
use goodput_core::spec::TestSpec;

#[tokio::main]
async fn main() {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("numbers"))
        .collect();
    let (runs, batch, docs) = match args[..] {
        [r, b, d] => (r, b, d != 0),
        _ => (525_600, 1_000, false),
    };
    let text = include_str!("../tests/fixtures/stamp.json");
    let doc: serde_json::Value = serde_json::from_str(text).unwrap();
    let result: TestResult = serde_json::from_str(text).unwrap();
    let spec: TestSpec = serde_json::from_value(doc["spec"].clone()).unwrap();
    let key = measurement_key(&spec, "alpha", Some("beta"));
    let figures = figures_of(&result);
    let dir = tempfile::tempdir().unwrap();
    let archive = Archive::open(&dir.path().join("bench.db")).await.unwrap();
    let minute = 60_000u64;
    let started = Instant::now();
    let mut n = 0;
    while n < runs {
        let chunk: Vec<Run> = (n..(n + batch).min(runs))
            .map(|i| Run {
                id: format!("run-{i}"),
                task: "latency".into(),
                source: "alpha".into(),
                dest: Some("beta".into()),
                kind: "stamp".into(),
                class: RunClass::Background,
                state: RunState::Finished,
                reason: None,
                scheduled_ms: i * minute,
                start_ms: Some(i * minute),
                end_ms: Some(i * minute + 1000),
                measurement_key: key.clone(),
                spec: doc["spec"].clone(),
                result: docs.then(|| doc.clone()),
                figures: figures.clone(),
            })
            .collect();
        archive.put(&chunk).await.unwrap();
        n += chunk.len() as u64;
    }
    let took = started.elapsed().as_secs_f64();
    let size = archive.size_bytes().await.unwrap();
    println!(
        "ingest: {runs} results{} in batches of {batch}: {took:.2} s, {:.0} results/s; archive {:.1} MiB",
        if docs {
            " with their documents"
        } else {
            ", figures only"
        },
        runs as f64 / took,
        size as f64 / 1048576.0
    );
    for (what, step) in [("every point", None), ("one per day", Some(86_400_000))] {
        let mut times = Vec::new();
        let mut points = 0;
        for _ in 0..5 {
            let t = Instant::now();
            points = archive
                .series(&key, Metric::DelayMedian, 0, runs * minute, step)
                .await
                .unwrap()
                .len();
            times.push(t.elapsed().as_secs_f64() * 1000.0);
        }
        times.sort_by(f64::total_cmp);
        println!(
            "series over {runs} minutes, {what}: {points} points, median of 5: {:.1} ms",
            times[2]
        );
    }
}
