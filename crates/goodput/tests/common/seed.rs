//! Archives seeded with runs of known figures, for the tests of what the
//! agent shows and says about them (alerts, the dashboard).

use goodput_archive::{measurement_key, Archive, Figures, Run, RunState};
use goodput_core::mesh::MeshConfig;
use goodput_core::schedule::RunClass;

/// A run to seed: its task, pair, time, state and figures.
pub struct Seed {
    pub id: String,
    pub task: &'static str,
    pub source: &'static str,
    pub dest: &'static str,
    pub at: u64,
    pub state: RunState,
    pub reason: Option<String>,
    pub figures: Figures,
}

impl Seed {
    /// A finished run.
    pub fn ok(
        id: impl Into<String>,
        task: &'static str,
        source: &'static str,
        dest: &'static str,
        at: u64,
        figures: Figures,
    ) -> Self {
        Seed {
            id: id.into(),
            task,
            source,
            dest,
            at,
            state: RunState::Finished,
            reason: None,
            figures,
        }
    }

    /// A run that failed or did not start, and why.
    pub fn not_ok(
        id: impl Into<String>,
        task: &'static str,
        source: &'static str,
        dest: &'static str,
        at: u64,
        state: RunState,
        reason: &str,
    ) -> Self {
        Seed {
            id: id.into(),
            task,
            source,
            dest,
            at,
            state,
            reason: Some(reason.into()),
            figures: Figures::default(),
        }
    }
}

pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// Stores the runs in an archive, each with the spec and measurement key
/// its task's pair has in the mesh configuration `config` (TOML).
pub fn seed(archive: &std::path::Path, config: &str, runs: &[Seed]) {
    let c = MeshConfig::read(config, true).unwrap();
    let names: Vec<String> = c.addresses.keys().cloned().collect();
    let pairs = c.tasks_for(&names).unwrap();
    let out: Vec<Run> = runs
        .iter()
        .map(|r| {
            let p = pairs
                .iter()
                .find(|p| p.task == r.task && p.source == r.source && p.dest.as_deref() == Some(r.dest))
                .unwrap_or_else(|| panic!("no pair {} {}>{}", r.task, r.source, r.dest));
            Run {
                id: r.id.clone(),
                task: r.task.into(),
                source: r.source.into(),
                dest: Some(r.dest.into()),
                kind: p.spec.kind().into(),
                class: RunClass::of_kind(p.spec.kind()),
                state: r.state,
                reason: r.reason.clone(),
                scheduled_ms: r.at,
                start_ms: Some(r.at),
                end_ms: Some(r.at + 1000),
                measurement_key: measurement_key(&p.spec, r.source, Some(r.dest)),
                spec: serde_json::to_value(&p.spec).unwrap(),
                result: None,
                figures: r.figures.clone(),
            }
        })
        .collect();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let a = Archive::open(archive).await.unwrap();
        for chunk in out.chunks(500) {
            a.put(chunk).await.unwrap();
        }
    });
}

/// A STAMP run's figures: loss each way (%), median delay (µs).
pub fn stamp(fwd: f64, back: f64, median_us: f64) -> Figures {
    Figures {
        loss_pct: Some(fwd + back),
        loss_forward_pct: Some(fwd),
        loss_backward_pct: Some(back),
        delay_median_us: Some(median_us),
        delay_min_us: Some(median_us * 0.8),
        delay_p95_us: Some(median_us * 1.5),
        delay_max_us: Some(median_us * 2.0),
        jitter_us: Some(median_us * 0.5),
        errors: Some(0.0),
        ..Figures::default()
    }
}

/// A TCP run's figures: good-put up, Mbit/s.
pub fn tcp(mbit: f64) -> Figures {
    Figures {
        throughput_up_bps: Some(mbit * 1e6),
        retransmits: Some(0.0),
        errors: Some(0.0),
        ..Figures::default()
    }
}
