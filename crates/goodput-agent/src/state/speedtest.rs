//! Browsers' ndt7 tests (the /speedtest page, or any ndt7 client) kept in
//! the archive: each subtest the beacon's ndt7 service ran becomes a run
//! of kind ndt7 from the client's address to this agent, with the
//! server's figures of it.

use std::sync::Arc;

use goodput_archive::{figures_of, measurement_key, Run, RunState};
use goodput_core::ndt7::Ndt7ServerTest;
use goodput_core::schedule::RunClass;
use goodput_engine::ndt7::server::{test_result, TestSink};

use crate::clock;
use crate::state::Shared;

/// The task name browser tests are filed under.
pub(crate) const TASK: &str = "speedtest";

/// Subtests waiting to be stored; past it a subtest is counted in the log
/// and dropped (the service's own limits keep far fewer running).
const QUEUE: usize = 256;

/// A sink for the ndt7 service, and the task that stores what it gets
/// (it ends when the service, and so the sink, is gone).
pub(crate) fn sink(shared: &Arc<Shared>) -> (TestSink, tokio::task::JoinHandle<()>) {
    let (tx, mut rx) = tokio::sync::mpsc::channel::<(Ndt7ServerTest, u64)>(QUEUE);
    let shared = shared.clone();
    let store = tokio::spawn(async move {
        while let Some((t, end)) = rx.recv().await {
            let run = run_of(&shared, &t, end);
            shared.store(&[run]).await;
        }
    });
    let sink: TestSink = Arc::new(move |t: Ndt7ServerTest| {
        if tx.try_send((t, clock::now_ms())).is_err() {
            crate::log::log("a browser's ndt7 subtest was not kept: too many waiting to be stored");
        }
    });
    (sink, store)
}

fn run_of(shared: &Shared, t: &Ndt7ServerTest, end_ms: u64) -> Run {
    let loaded = shared.loaded();
    let me = loaded
        .mine
        .first()
        .cloned()
        .unwrap_or_else(|| "this agent".into());
    let port = shared
        .options
        .ndt7_port
        .unwrap_or(goodput_core::spec::server::NDT7_PORT);
    let server = format!("ws://{me}:{port}");
    let ms = (t.figures.seconds.max(0.0) * 1e3) as u64;
    let start_ms = end_ms.saturating_sub(ms);
    let result = test_result(t, &server, start_ms);
    // The client's address without its port: the host that tested.
    let client = t
        .client
        .rsplit_once(':')
        .map_or(t.client.as_str(), |(ip, _)| ip)
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let spec = result
        .spec
        .clone()
        .unwrap_or_else(|| goodput_core::spec::Ndt7Spec::default().into());
    let (state, reason) = match &result.error {
        Some(e) => (RunState::Failed, Some(e.message.clone())),
        None => (RunState::Finished, None),
    };
    Run {
        id: uuid::Uuid::new_v4().to_string(),
        task: TASK.into(),
        measurement_key: measurement_key(&spec, &client, Some(&me)),
        source: client,
        dest: Some(me),
        kind: spec.kind().into(),
        class: RunClass::Exclusive,
        state,
        reason,
        scheduled_ms: start_ms,
        start_ms: Some(start_ms),
        end_ms: Some(end_ms),
        spec: serde_json::to_value(&spec).unwrap_or_default(),
        figures: figures_of(&result),
        result: serde_json::to_value(&result).ok(),
    }
}
