//! The archive on a real SQLite file and on a real PostgreSQL (a
//! throwaway cluster per test): runs stored and read back, figures from
//! real result documents, series, retention, and a newer schema refused.
//! Each test that touches the database runs on both engines, so that the
//! two cannot drift apart.

mod pg;

use goodput_archive::{figures_of, measurement_key, Archive, ArchiveError, Metric, Run, RunFilter, RunState};
use goodput_core::result::{
    ClockState, Detail, OneWayDirection, OneWayStats, OwampDetail, TestKind, TestResult, TwampDetail,
};
use goodput_core::schedule::RunClass;
use goodput_core::spec::TestSpec;

/// Where a test's archive lives.
enum Engine {
    Sqlite(tempfile::TempDir),
    /// The cluster lives as long as the test: dropping it stops it.
    Postgres(#[allow(dead_code)] pg::Cluster, String),
}

impl Engine {
    fn sqlite() -> Engine {
        Engine::Sqlite(tempfile::tempdir().unwrap())
    }

    fn postgres() -> Option<Engine> {
        let c = pg::Cluster::start()?;
        let url = c.database("archive");
        Some(Engine::Postgres(c, url))
    }

    /// The archive (again: reopening finds what was stored).
    async fn open(&self) -> Archive {
        match self {
            Engine::Sqlite(dir) => Archive::open(&dir.path().join("archive.db")).await.unwrap(),
            Engine::Postgres(_, url) => Archive::connect(url).await.unwrap(),
        }
    }

    fn is_postgres(&self) -> bool {
        matches!(self, Engine::Postgres(..))
    }

    /// Runs one statement on the database outside the archive.
    async fn execute(&self, sql: &str) {
        use sqlx::Connection;
        match self {
            Engine::Sqlite(dir) => {
                let path = dir.path().join("archive.db");
                let mut c = sqlx::SqliteConnection::connect(&format!("sqlite://{}", path.display()))
                    .await
                    .unwrap();
                sqlx::query(sql).execute(&mut c).await.unwrap();
            }
            Engine::Postgres(_, url) => {
                let mut c = sqlx::PgConnection::connect(url).await.unwrap();
                sqlx::query(sql).execute(&mut c).await.unwrap();
            }
        }
    }
}

/// A test body run once on SQLite and once on PostgreSQL.
macro_rules! on_both {
    ($name:ident) => {
        mod $name {
            #[tokio::test]
            async fn sqlite() {
                super::$name(&super::Engine::sqlite()).await;
            }
            #[tokio::test]
            async fn postgres() {
                if let Some(e) = super::Engine::postgres() {
                    super::$name(&e).await;
                }
            }
        }
    };
}

on_both!(runs_are_stored_once_by_id_and_read_back_whole);
on_both!(filters_and_series_find_a_measurements_runs);
on_both!(retention_deletes_the_oldest_first_and_keeps_under_the_size);
on_both!(size_pruning_deletes_runs_dated_in_the_future_before_real_history);
on_both!(a_newer_archive_is_refused_with_a_clear_message);
on_both!(a_measurements_paths_and_their_changes_come_back);
on_both!(alerts_are_stored_updated_ended_and_listed);
on_both!(ended_runs_are_queued_for_each_target_and_the_limit_drops_background_first);
on_both!(agents_register_and_renew_their_leases);
on_both!(recent_runs_give_every_metrics_series_as_series_does);
on_both!(one_way_medians_and_their_clocks_state_are_stored_and_served);

/// PostgreSQL over TLS: with `sslmode=verify-full` and the server's
/// certificate as the root, the archive connects and stores; a server
/// that takes TCP only over TLS refuses a plain connection, and a
/// certificate from another root is refused by the archive.
#[tokio::test]
async fn postgres_over_tls_checks_the_servers_certificate() {
    let names = vec!["localhost".to_string(), "127.0.0.1".to_string()];
    let server = rcgen::generate_simple_self_signed(names.clone()).unwrap();
    let Some(c) = pg::Cluster::start_tls(&server.cert.pem(), &server.key_pair.serialize_pem()) else {
        return;
    };
    c.database("archive");
    let root = c.dir().join("root.pem");
    std::fs::write(&root, server.cert.pem()).unwrap();
    let other = rcgen::generate_simple_self_signed(names).unwrap();
    let wrong_root = c.dir().join("other-root.pem");
    std::fs::write(&wrong_root, other.cert.pem()).unwrap();
    let url = |query: &str| format!("{}?{query}", c.url("archive"));

    let a = Archive::connect(&url(&format!(
        "sslmode=verify-full&sslrootcert={}",
        root.display()
    )))
    .await
    .unwrap();
    let (doc, r) = fixture("tcp-duplex");
    a.put(&[run("tls-1", 1_000_000, RunState::Finished, &doc, &r)])
        .await
        .unwrap();
    assert_eq!(a.count().await.unwrap(), 1);
    drop(a);

    let Err(plain) = Archive::connect(&url("sslmode=disable")).await else {
        panic!("a plain connection was taken");
    };
    let plain = plain.to_string();
    assert!(
        plain.contains("no encryption") || plain.contains("pg_hba"),
        "{plain}"
    );
    let Err(forged) = Archive::connect(&url(&format!(
        "sslmode=verify-full&sslrootcert={}",
        wrong_root.display()
    )))
    .await
    else {
        panic!("a certificate from another root was taken");
    };
    let forged = forged.to_string();
    assert!(forged.to_lowercase().contains("certificate"), "{forged}");
}

/// The database connection cut in the middle of a batch: the watcher
/// waits until the archive's connection is inside the batch's transaction
/// and has written rows (an INSERT running, a transaction id given), then
/// terminates it. None of the batch is visible, and the same batch sent
/// again goes in whole.
#[tokio::test]
async fn a_connection_cut_mid_batch_leaves_nothing_and_the_batch_goes_in_whole_again() {
    use sqlx::Connection;
    let Some(c) = pg::Cluster::start() else {
        return;
    };
    let url = c.database("archive");
    let a = Archive::connect(&url).await.unwrap();
    let (doc, r) = fixture("tcp-duplex");
    let runs: Vec<Run> = (0..10_000u64)
        .map(|i| {
            run(
                &format!("cut-{i}"),
                1_000_000 + i * 60_000,
                RunState::Finished,
                &doc,
                &r,
            )
        })
        .collect();
    let mut watcher = sqlx::PgConnection::connect(&url).await.unwrap();
    let cut = async {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            let pid: Option<i32> = sqlx::query_scalar(
                "SELECT pid FROM pg_stat_activity WHERE datname = 'archive' AND pid <> pg_backend_pid() \
                 AND backend_xid IS NOT NULL AND query ILIKE 'INSERT INTO run%' LIMIT 1",
            )
            .fetch_optional(&mut watcher)
            .await
            .unwrap();
            if let Some(pid) = pid {
                let done: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1)")
                    .bind(pid)
                    .fetch_one(&mut watcher)
                    .await
                    .unwrap();
                assert!(done);
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "never saw the batch's transaction writing"
            );
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
    };
    let (stored, ()) = tokio::join!(a.put(&runs), cut);
    let why = stored
        .expect_err("the batch was stored although its connection was cut")
        .to_string();
    assert!(why.contains("terminat"), "not cut by the test: {why}");
    for table in ["runs", "run_documents", "rollups"] {
        assert_eq!(
            c.psql("archive", &format!("SELECT COUNT(*) FROM {table}")),
            "0",
            "{table}"
        );
    }
    a.put(&runs).await.unwrap();
    assert_eq!(a.count().await.unwrap(), 10_000);
    assert_eq!(c.psql("archive", "SELECT COUNT(*) FROM run_documents"), "10000");
}

/// `Archive::recent` (one read, every metric) gives, metric by metric,
/// the series `Archive::series` reads without a step: same points, same
/// runs left out (failed, outside the window, without the figure), runs
/// that started in the same millisecond averaged.
async fn one_way_medians_and_their_clocks_state_are_stored_and_served(e: &Engine) {
    let a = e.open().await;
    let (doc, stamp) = fixture("stamp");
    let base = 20_000_000;
    // Synchronised, a little negative within the clocks' error: stored.
    let mut synced = run("o-1", base, RunState::Finished, &doc, &stamp);
    synced.figures.owd_forward_median_us = Some(-12.5);
    synced.figures.owd_backward_median_us = Some(830.0);
    synced.figures.owd_synchronized = Some(true);
    assert_eq!(synced.figures.out_of_range(), None);
    // Unsynchronised: marked, no median.
    let mut unsynced = run("o-2", base + 60_000, RunState::Finished, &doc, &stamp);
    unsynced.figures.owd_forward_median_us = None;
    unsynced.figures.owd_backward_median_us = None;
    unsynced.figures.owd_synchronized = Some(false);
    // Its clocks' error is kept beside the mark.
    unsynced.figures.owd_clock_error_us = Some(27_000.0);
    a.put(&[synced.clone(), unsynced.clone()]).await.unwrap();
    let back = a.get("o-1").await.unwrap().unwrap();
    assert_eq!(back.figures, synced.figures);
    let back = a.get("o-2").await.unwrap().unwrap();
    assert_eq!(back.figures.owd_synchronized, Some(false));
    assert_eq!(back.figures.owd_clock_error_us, Some(27_000.0));
    assert_eq!(back.figures.owd_forward_median_us, None);
    let key = &synced.measurement_key;
    let series = a
        .series(key, Metric::OwdForwardMedian, base, base + 120_000, None)
        .await
        .unwrap();
    let points: Vec<(u64, f64)> = series.iter().map(|p| (p.at_ms, p.mean)).collect();
    assert_eq!(points, [(base + 5, -12.5)]);
    let recent = a.recent(key, base, base + 120_000).await.unwrap();
    assert_eq!(
        recent
            .series(Metric::OwdBackwardMedian, base, base + 120_000)
            .iter()
            .map(|p| p.mean)
            .collect::<Vec<_>>(),
        [830.0]
    );
    // A figure beyond an hour either way is refused before it is stored.
    let mut wild = synced.figures.clone();
    wild.owd_forward_median_us = Some(-3.7e9);
    assert_eq!(
        wild.out_of_range().as_deref(),
        Some("figure owd_forward_median_us is -3700000000, outside minus an hour to an hour")
    );
}

async fn recent_runs_give_every_metrics_series_as_series_does(e: &Engine) {
    let a = e.open().await;
    let (stamp_doc, stamp) = fixture("stamp");
    let (tcp_doc, tcp) = fixture("tcp-duplex");
    let mut runs = Vec::new();
    for i in 0..30u64 {
        let at = 10_000_000 + i * 60_000;
        let mut r = run(&format!("s-{i}"), at, RunState::Finished, &stamp_doc, &stamp);
        // Varied figures, and a second run in the same millisecond.
        r.figures.delay_median_us = r.figures.delay_median_us.map(|d| d + i as f64 * 7.25);
        r.figures.loss_pct = (i % 3 != 0).then_some(i as f64 / 10.0);
        if i == 5 {
            let mut twin = r.clone();
            twin.id = "s-5-twin".into();
            twin.figures.delay_median_us = Some(1234.5);
            runs.push(twin);
        }
        if i == 7 {
            r.state = RunState::Failed;
        }
        runs.push(r);
    }
    // Another measurement's runs stay out.
    let mut other = run("t-1", 10_000_000, RunState::Finished, &tcp_doc, &tcp);
    other.measurement_key = runs[0].measurement_key.clone() + "/other";
    runs.push(other);
    a.put(&runs).await.unwrap();
    let key = &runs[0].measurement_key;
    let (from, to) = (10_000_000 + 3 * 60_000, 10_000_000 + 25 * 60_000);
    let recent = a.recent(key, from, to).await.unwrap();
    assert_eq!(
        recent.runs.len(),
        22 - 1 + 1,
        "22 starts in the window, one failed, one twin"
    );
    let mut compared = 0;
    for m in goodput_archive::Metric::ALL {
        let want = a.series(key, m, from, to, None).await.unwrap();
        let got = recent.series(m, from, to);
        assert_eq!(got.len(), want.len(), "{m:?}");
        for (g, w) in got.iter().zip(&want) {
            assert_eq!(
                (g.at_ms, g.count, g.min, g.max),
                (w.at_ms, w.count, w.min, w.max),
                "{m:?}"
            );
            assert!(
                (g.mean - w.mean).abs() <= 1e-9 * w.mean.abs().max(1.0),
                "{m:?}: {g:?} {w:?}"
            );
        }
        compared += want.len();
        // A narrower window of the same read.
        let narrow = a.series(key, m, from + 600_000, to, None).await.unwrap();
        assert_eq!(recent.series(m, from + 600_000, to).len(), narrow.len(), "{m:?}");
    }
    assert!(compared > 40, "only {compared} points compared");
    // The metrics measured over whole hours: those whose hourly series
    // has a point.
    let (h_from, h_to) = (0, 3_600_000 * 10);
    let mut hourly = Vec::new();
    for m in goodput_archive::Metric::ALL {
        if !a
            .series(key, m, h_from, h_to, Some(3_600_000))
            .await
            .unwrap()
            .is_empty()
        {
            hourly.push(m);
        }
    }
    assert!(hourly.len() >= 3, "{hourly:?}");
    assert_eq!(a.metrics_measured(key, h_from, h_to).await.unwrap(), hourly);
    assert!(a.metrics_measured(key, h_to, 2 * h_to).await.unwrap().is_empty());
    let twin = recent.series(goodput_archive::Metric::DelayMedian, from, to);
    assert!(
        twin.iter().any(|p| p.count == 2),
        "the twins make one point of two runs"
    );
}

fn fixture(name: &str) -> (serde_json::Value, TestResult) {
    let path = format!("{}/tests/fixtures/{name}.json", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(path).unwrap();
    (
        serde_json::from_str(&text).unwrap(),
        serde_json::from_str(&text).unwrap(),
    )
}

fn run(id: &str, at: u64, state: RunState, doc: &serde_json::Value, result: &TestResult) -> Run {
    let spec: TestSpec = serde_json::from_value(doc["spec"].clone()).unwrap();
    Run {
        id: id.into(),
        task: "core".into(),
        source: "alpha".into(),
        dest: Some("beta".into()),
        kind: spec.kind().into(),
        class: RunClass::of_kind(spec.kind()),
        state,
        reason: None,
        scheduled_ms: at,
        start_ms: Some(at + 5),
        end_ms: Some(at + 1000),
        measurement_key: measurement_key(&spec, "alpha", Some("beta")),
        spec: doc["spec"].clone(),
        result: Some(doc.clone()),
        figures: figures_of(result),
    }
}

#[test]
fn figures_come_from_each_kinds_result() {
    let (doc, r) = fixture("tcp-duplex");
    let f = figures_of(&r);
    let up = doc["summary"]["timed"]["up"]["bytes_per_second"]
        .as_f64()
        .unwrap()
        * 8.0;
    let down = doc["summary"]["timed"]["down"]["bytes_per_second"]
        .as_f64()
        .unwrap()
        * 8.0;
    assert_eq!(
        (f.throughput_up_bps, f.throughput_down_bps),
        (Some(up), Some(down))
    );
    assert_eq!(f.errors, Some(0.0));
    assert_eq!(f.loss_pct, None);

    let (doc, r) = fixture("stamp");
    let f = figures_of(&r);
    let rtt = &doc["stamp"]["total"]["rtt"];
    assert_eq!(f.delay_min_us, rtt["min_us"].as_f64());
    assert_eq!(f.delay_median_us, rtt["median_us"].as_f64());
    assert_eq!(f.delay_max_us, rtt["max_us"].as_f64());
    let p95 = f.delay_p95_us.unwrap();
    assert!(
        p95 >= f.delay_median_us.unwrap() && p95 <= f.delay_max_us.unwrap() * 1.001,
        "{f:?}"
    );
    assert_eq!(f.jitter_us, Some(p95 - f.delay_median_us.unwrap()));
    assert_eq!(f.loss_pct, Some(0.0));
    // Its one-way delays came from unsynchronised clocks (loopback, no
    // clock error known): marked, and not stored as delays.
    assert_eq!(doc["stamp"]["total"]["forward"]["synchronized"], false);
    assert_eq!(f.owd_synchronized, Some(false));
    assert_eq!((f.owd_forward_median_us, f.owd_backward_median_us), (None, None));

    let (doc, r) = fixture("udp");
    let f = figures_of(&r);
    let t = &doc["media"]["total"];
    assert_eq!(f.jitter_us, t["jitter_us"].as_f64());
    assert_eq!(f.loss_pct, t["loss_percent"].as_f64());
    let bps = t["received_bytes"].as_f64().unwrap() * 8.0 / doc["summary"]["duration_s"].as_f64().unwrap();
    assert_eq!(f.throughput_down_bps, Some(bps));
}

async fn runs_are_stored_once_by_id_and_read_back_whole(e: &Engine) {
    let a = e.open().await;
    let (doc, r) = fixture("tcp-duplex");
    let mut first = run("run-1", 1_000_000, RunState::Running, &doc, &r);
    first.result = None;
    a.put(&[first]).await.unwrap();
    // The same run again, finished: stored once, the later state wins.
    let done = run("run-1", 1_000_000, RunState::Finished, &doc, &r);
    a.put(std::slice::from_ref(&done)).await.unwrap();
    assert_eq!(a.count().await.unwrap(), 1);
    assert_eq!(a.get("run-1").await.unwrap(), Some(done.clone()));
    assert_eq!(a.get("run-2").await.unwrap(), None);
    let ids = ["run-1".to_string(), "run-2".to_string()];
    assert_eq!(
        a.existing(&ids).await.unwrap(),
        ["run-1".to_string()].into_iter().collect()
    );
    // A state is changed only from the one expected.
    assert!(!a
        .mark_if("run-1", RunState::Scheduled, RunState::Failed, "x")
        .await
        .unwrap());
    assert_eq!(a.get("run-1").await.unwrap(), Some(done.clone()));

    // Reopened, the database holds the same.
    drop(a);
    let a = e.open().await;
    assert_eq!(a.get("run-1").await.unwrap(), Some(done));
    assert_eq!(a.schema_version().await.unwrap(), goodput_archive::SCHEMA_VERSION);
}

async fn filters_and_series_find_a_measurements_runs(e: &Engine) {
    let a = e.open().await;
    let (tcp, tr) = fixture("tcp-duplex");
    let (stamp, sr) = fixture("stamp");
    let mut runs = Vec::new();
    for i in 0..10u64 {
        runs.push(run(&format!("t{i}"), i * 60_000, RunState::Finished, &tcp, &tr));
        runs.push(run(&format!("s{i}"), i * 60_000, RunState::Finished, &stamp, &sr));
    }
    let mut skipped = run("t-late", 700_000, RunState::NonStart, &tcp, &tr);
    skipped.reason = Some("peer busy with run 7 until 700020 ms".into());
    skipped.result = None;
    skipped.figures = Default::default();
    runs.push(skipped);
    a.put(&runs).await.unwrap();

    let tcp_runs = a
        .runs(&RunFilter {
            kind: Some("tcp".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(tcp_runs.len(), 11);
    assert_eq!(tcp_runs[0].id, "t-late", "newest first");
    assert!(
        tcp_runs.iter().all(|r| r.result.is_none()),
        "lists leave the documents out"
    );
    let non_starts = a
        .runs(&RunFilter {
            state: Some(RunState::NonStart),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(non_starts.len(), 1);
    assert_eq!(
        non_starts[0].reason.as_deref(),
        Some("peer busy with run 7 until 700020 ms")
    );
    let window = a
        .runs(&RunFilter {
            from_ms: Some(120_000),
            to_ms: Some(300_000),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(window.len(), 6);

    let key = &runs[0].measurement_key;
    assert_ne!(
        key, &runs[1].measurement_key,
        "tcp and stamp are different measurements"
    );
    let raw = a
        .series(key, Metric::ThroughputUp, 0, 3_600_000, None)
        .await
        .unwrap();
    assert_eq!(raw.len(), 10, "the non-start has no value");
    let up = runs[0].figures.throughput_up_bps.unwrap();
    assert!(raw.iter().all(|p| p.count == 1 && p.mean == up));
    let per_5min = a
        .series(key, Metric::ThroughputUp, 0, 3_600_000, Some(300_000))
        .await
        .unwrap();
    assert_eq!(per_5min.iter().map(|p| p.count).collect::<Vec<_>>(), vec![5, 5]);
    assert_eq!(per_5min[1].at_ms, 300_000);
    let delay = a
        .series(
            &runs[1].measurement_key,
            Metric::DelayP95,
            0,
            3_600_000,
            Some(3_600_000),
        )
        .await
        .unwrap();
    assert_eq!(delay.len(), 1);
    assert_eq!(delay[0].count, 10);

    // The hourly aggregates agree with the runs, and storing the same
    // runs again counts them once.
    a.put(&runs).await.unwrap();
    let hourly = a
        .series(key, Metric::ThroughputUp, 0, 3_600_000, Some(3_600_000))
        .await
        .unwrap();
    let raw_hour = a
        .series(key, Metric::ThroughputUp, 0, 3_600_001, Some(3_600_000))
        .await
        .unwrap();
    assert_eq!(hourly.len(), 1);
    assert_eq!(hourly[0].count, 10);
    assert_eq!((hourly[0].min, hourly[0].max), (raw_hour[0].min, raw_hour[0].max));
    assert!((hourly[0].mean - raw_hour[0].mean).abs() < 1e-6 * up);
}

async fn retention_deletes_the_oldest_first_and_keeps_under_the_size(e: &Engine) {
    use goodput_archive::PARTITION_MS;
    let a = e.open().await;
    let (doc, r) = fixture("udp");
    // 400 runs a second apart in four spans of PostgreSQL's partitions.
    let at = |i: u64| (i / 100) * PARTITION_MS + (i % 100) * 1000;
    let runs: Vec<Run> = (0..400u64)
        .map(|i| run(&format!("r{i:04}"), at(i), RunState::Finished, &doc, &r))
        .collect();
    a.put(&runs).await.unwrap();
    let before = a.size_bytes().await.unwrap();
    assert!(before > 1 << 19, "{before}");

    // By age: everything scheduled before the second span, and its first
    // 20 runs.
    let keep = goodput_archive::Retention {
        max_age_ms: 1_000_000,
        max_bytes: 1 << 40,
    };
    let p = a.prune(&keep, at(120) + 1_000_000).await.unwrap();
    assert_eq!((p.by_age, p.by_size), (120, 0));
    assert!(a.get("r0119").await.unwrap().is_none());
    assert!(a.get("r0120").await.unwrap().is_some());
    assert_eq!(a.count().await.unwrap(), 280);

    // By size: under 90% of 80% of what is left, the oldest gone first.
    let left = a.size_bytes().await.unwrap();
    let keep = goodput_archive::Retention {
        max_age_ms: u64::MAX,
        max_bytes: left / 10 * 8,
    };
    let p = a.prune(&keep, at(400)).await.unwrap();
    assert!(p.by_size > 0);
    assert!(a.size_bytes().await.unwrap() <= keep.max_bytes / 10 * 9);
    let left = a.runs(&RunFilter::default()).await.unwrap();
    assert_eq!(left.len() as u64, 280 - p.by_size);
    let oldest = left.iter().map(|r| r.scheduled_ms).min().unwrap();
    assert_eq!(oldest, at(120 + p.by_size), "the oldest runs went first");
    if e.is_postgres() {
        // Whole partitions went: the rest of the second span.
        assert_eq!(p.by_size, 80);
    }
}

/// Real history (300 runs over four of PostgreSQL's spans, the newest an
/// hour old), a booking for tomorrow, a run handed over by a peer whose
/// clock is ten minutes ahead, and forged ended runs dated in the future
/// (150 in ten months, 20 in two days), which take the archive past its
/// size limit. Pruning for size deletes every forged run and nothing else:
/// it used to delete the oldest runs first by their stated time, so the
/// real history went and the forged runs, the "newest", stayed.
async fn size_pruning_deletes_runs_dated_in_the_future_before_real_history(e: &Engine) {
    use goodput_archive::PARTITION_MS;
    const HOUR: u64 = 3_600_000;
    let a = e.open().await;
    let (doc, r) = fixture("udp");
    let now = 4 * PARTITION_MS + 10 * 86_400_000;
    let real_at = |i: u64| now - HOUR - (299 - i) * 8 * HOUR;
    let mut real: Vec<Run> = (0..300u64)
        .map(|i| run(&format!("real-{i:03}"), real_at(i), RunState::Finished, &doc, &r))
        .collect();
    let mut booked = run("booked-tomorrow", now + 86_400_000, RunState::Scheduled, &doc, &r);
    booked.result = None;
    real.push(booked);
    real.push(run(
        "skewed-peer",
        now + 10 * 60_000,
        RunState::Finished,
        &doc,
        &r,
    ));
    a.put(&real).await.unwrap();
    let real_size = a.size_bytes().await.unwrap();

    let forged: Vec<Run> = (0..170u64)
        .map(|i| {
            let at = if i < 150 {
                now + 300 * 86_400_000 + i * 60_000
            } else {
                now + 2 * 86_400_000 + i * 60_000
            };
            run(&format!("forged-{i:03}"), at, RunState::Finished, &doc, &r)
        })
        .collect();
    a.put(&forged).await.unwrap();

    // Room for the real history (90% of the limit), not for the forged runs.
    let keep = goodput_archive::Retention {
        max_age_ms: u64::MAX,
        max_bytes: real_size * 10 / 9 * 11 / 10,
    };
    let size = a.size_bytes().await.unwrap();
    assert!(size > keep.max_bytes, "{size} bytes, {real_size} of them real");
    let p = a.prune(&keep, now).await.unwrap();
    assert_eq!((p.by_age, p.by_size), (0, 170));
    let left = a.runs(&RunFilter::default()).await.unwrap();
    let mut ids: Vec<&str> = left.iter().map(|r| r.id.as_str()).collect();
    ids.sort_unstable();
    let mut want: Vec<&str> = real.iter().map(|r| r.id.as_str()).collect();
    want.sort_unstable();
    assert_eq!(ids, want, "the real history, whole, and nothing forged");
    assert!(a.get("real-299").await.unwrap().is_some());
    assert!(a.get("forged-160").await.unwrap().is_none());
    // No aggregate of a forged hour is left behind.
    let key = &real[0].measurement_key;
    let future = a
        .series(key, Metric::Loss, now + HOUR, now + 400 * 86_400_000, Some(HOUR))
        .await
        .unwrap();
    assert!(future.is_empty(), "{future:?}");
}

async fn a_newer_archive_is_refused_with_a_clear_message(e: &Engine) {
    let a = e.open().await;
    drop(a);
    // A later goodput's step.
    e.execute("INSERT INTO archive_schema (version) VALUES (99)")
        .await;
    let opened = match e {
        Engine::Sqlite(dir) => Archive::open(&dir.path().join("archive.db")).await,
        Engine::Postgres(_, url) => Archive::connect(url).await,
    };
    match opened {
        Err(e @ ArchiveError::Newer { found: 99, .. }) => {
            assert!(
                e.to_string().contains("newer than this goodput understands"),
                "{e}"
            );
        }
        Err(other) => panic!("{other}"),
        Ok(_) => panic!("a newer archive was opened"),
    }
}

#[test]
fn traces_and_pings_have_figures() {
    let (doc, r) = fixture("trace");
    let f = figures_of(&r);
    assert_eq!(f.hops, Some(4.0));
    assert_eq!(f.path_checksum.as_deref(), doc["trace"]["path_checksum"].as_str());
    assert_eq!(f.throughput_up_bps, None, "a trace moves no data");
    let (doc, r) = fixture("ping");
    let f = figures_of(&r);
    let p = &doc["ping"];
    assert_eq!(f.loss_pct, p["loss_percent"].as_f64());
    assert_eq!(f.delay_min_us, p["rtt"]["min_us"].as_f64());
    assert_eq!(f.delay_max_us, p["rtt"]["max_us"].as_f64());
    assert_eq!(f.delay_median_us, p["percentiles"]["p50_us"].as_f64());
    assert_eq!(f.jitter_us, p["rtt"]["mdev_us"].as_f64());
}

async fn a_measurements_paths_and_their_changes_come_back(e: &Engine) {
    let a = e.open().await;
    let (doc, r) = fixture("trace");
    // A second path: hop 2 is another router (and so another checksum).
    let mut moved_doc = doc.clone();
    moved_doc["trace"]["hops"][1]["addresses"] = serde_json::json!(["10.81.5.2"]);
    let mut moved: TestResult = serde_json::from_value(moved_doc.clone()).unwrap();
    let t = moved.trace_mut().unwrap();
    t.path_checksum = goodput_core::path::path_checksum(&t.hops);
    moved_doc["trace"]["path_checksum"] = t.path_checksum.clone().into();
    assert_ne!(t.path_checksum, r.trace().unwrap().path_checksum);
    // first, first, moved, moved, first: two paths, two changes.
    let which = [false, false, true, true, false];
    let runs: Vec<Run> = which
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let (d, x) = if *m { (&moved_doc, &moved) } else { (&doc, &r) };
            run(&format!("tr{i}"), i as u64 * 300_000, RunState::Finished, d, x)
        })
        .collect();
    a.put(&runs).await.unwrap();
    let key = &runs[0].measurement_key;
    let h = a.paths(key, 0, 3_600_000).await.unwrap();
    assert_eq!((h.runs, h.changes, h.paths.len()), (5, 2, 2), "{h:?}");
    assert_eq!(h.paths[0].runs, 3);
    assert_eq!((h.paths[0].first_ms, h.paths[0].last_ms), (5, 1_200_005));
    assert_eq!(h.paths[0].last_run, "tr4");
    assert_eq!(h.paths[1].runs, 2);
    assert_eq!(h.paths[1].last_run, "tr3");
    assert_eq!(h.paths[0].hops, Some(4.0));
    // A window with one path: no change.
    let calm = a.paths(key, 0, 600_000).await.unwrap();
    assert_eq!((calm.runs, calm.changes, calm.paths.len()), (2, 0, 1));
    // The hop count is a series like the others.
    let hops = a.series(key, Metric::Hops, 0, 3_600_000, None).await.unwrap();
    assert_eq!(hops.len(), 5);
    assert!(hops.iter().all(|p| p.mean == 4.0));
    // And the figures read back from the row.
    let back = a.get("tr2").await.unwrap().unwrap();
    assert_eq!(
        back.figures.path_checksum,
        moved.trace().unwrap().path_checksum.clone().into()
    );
}

#[tokio::test]
async fn a_one_way_run_stored_before_clock_errors_were_kept_still_loads() {
    // An archive of schema 7 (one-way medians and their mark, no clock
    // error) holding an unsynchronised run: opened by this build, the run
    // reads back as it was, its clock error unknown.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("archive.db");
    let (doc, stamp) = fixture("stamp");
    let mut old = run("owd-old", 0, RunState::Finished, &doc, &stamp);
    old.figures.owd_forward_median_us = None;
    old.figures.owd_synchronized = Some(false);
    // As a build before clock errors were kept made its figures.
    old.figures.owd_clock_error_us = None;
    let a = Archive::open(&path).await.unwrap();
    a.put(std::slice::from_ref(&old)).await.unwrap();
    drop(a);
    {
        use sqlx::Connection;
        let mut c = sqlx::SqliteConnection::connect(&format!("sqlite://{}", path.display()))
            .await
            .unwrap();
        for s in [
            "ALTER TABLE runs DROP COLUMN http_total_us",
            "ALTER TABLE runs DROP COLUMN cert_days_left",
            "ALTER TABLE runs DROP COLUMN owd_clock_error_us",
            "DELETE FROM archive_schema WHERE version > 7",
        ] {
            sqlx::query(s).execute(&mut c).await.unwrap();
        }
    }
    let a = Archive::open(&path).await.unwrap();
    assert_eq!(a.schema_version().await.unwrap(), goodput_archive::SCHEMA_VERSION);
    let back = a.get("owd-old").await.unwrap().unwrap();
    assert_eq!(back.figures.owd_clock_error_us, None);
    assert_eq!(back.figures, old.figures);
}

#[tokio::test]
async fn an_archive_of_the_first_schema_is_brought_up_to_date_with_its_runs() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("archive.db");
    let (tcp, tr) = fixture("tcp-duplex");
    let a = Archive::open(&path).await.unwrap();
    a.put(&[run("old", 0, RunState::Finished, &tcp, &tr)])
        .await
        .unwrap();
    drop(a);
    {
        // Back to the first step's schema, as an agent before traces left it.
        use sqlx::Connection;
        let mut c = sqlx::SqliteConnection::connect(&format!("sqlite://{}", path.display()))
            .await
            .unwrap();
        for s in [
            "ALTER TABLE runs DROP COLUMN http_total_us",
            "ALTER TABLE runs DROP COLUMN cert_days_left",
            "ALTER TABLE runs DROP COLUMN owd_clock_error_us",
            "ALTER TABLE runs DROP COLUMN owd_forward_median_us",
            "ALTER TABLE runs DROP COLUMN owd_backward_median_us",
            "ALTER TABLE runs DROP COLUMN owd_synchronized",
            "DROP TABLE agents",
            "DROP TABLE outbox",
            "DROP INDEX runs_pair_state_time",
            "DROP TABLE alerts",
            "ALTER TABLE runs DROP COLUMN loss_forward_pct",
            "ALTER TABLE runs DROP COLUMN loss_backward_pct",
            "DROP INDEX runs_key_path",
            "ALTER TABLE runs DROP COLUMN hops",
            "ALTER TABLE runs DROP COLUMN path_checksum",
            "DELETE FROM archive_schema WHERE version > 1",
        ] {
            sqlx::query(s).execute(&mut c).await.unwrap();
        }
    }
    let a = Archive::open(&path).await.unwrap();
    assert_eq!(a.schema_version().await.unwrap(), goodput_archive::SCHEMA_VERSION);
    let old = a.get("old").await.unwrap().unwrap();
    assert_eq!(old.figures.throughput_up_bps, figures_of(&tr).throughput_up_bps);
    assert_eq!(old.figures.hops, None);
    assert_eq!(old.figures.owd_clock_error_us, None);
    let (doc, r) = fixture("trace");
    a.put(&[run("new", 60_000, RunState::Finished, &doc, &r)])
        .await
        .unwrap();
    assert_eq!(a.get("new").await.unwrap().unwrap().figures.hops, Some(4.0));
}

/// A result of `kind` with `detail`, from the STAMP fixture's common
/// record.
fn with_detail(kind: TestKind, detail: Detail) -> TestResult {
    let (_, mut r) = fixture("stamp");
    r.kind = kind;
    r.detail = detail;
    r
}

fn one_way(median_us: f64, synchronized: bool) -> OneWayStats {
    OneWayStats {
        count: 100,
        min_us: median_us - 50.0,
        median_us,
        max_us: median_us + 400.0,
        jitter_us: 120.0,
        synchronized,
        error_bound_us: synchronized.then_some(80.0),
        ipdv: None,
    }
}

fn direction(sent: u64, lost: u64, delay: OneWayStats) -> OneWayDirection {
    OneWayDirection {
        sid: "c0000201e95f3a1c0000000000000001".into(),
        sender: "192.0.2.1:8760".into(),
        receiver: "192.0.2.2:8761".into(),
        sent,
        unsent: 0,
        received: sent - lost,
        lost,
        duplicates: 1,
        reordered: 2,
        reordered_percent: 0.0,
        n_reordering_percent: Vec::new(),
        delay: Some(delay),
        percentiles: None,
        hops: None,
        histogram_ns: None,
        histogram_negative_ns: None,
        first_ns: None,
        last_ns: None,
        intervals: Vec::new(),
    }
}

fn owamp(to: Option<OneWayDirection>, from: Option<OneWayDirection>) -> TestResult {
    with_detail(
        TestKind::OwampClient,
        Detail::Owamp(Box::new(OwampDetail {
            mode: "open".into(),
            padding: 0,
            packet_bytes: 14,
            interval_ns: 100_000_000,
            poisson: false,
            dscp: 0,
            timeout_ms: 2000,
            local_clock: ClockState {
                synchronized: true,
                error_us: Some(40.0),
            },
            to,
            from,
        })),
    )
}

#[test]
fn owamp_fills_the_one_way_series_each_way_and_never_the_round_trip() {
    // to = forward (source → destination), from = backward.
    let f = figures_of(&owamp(
        Some(direction(200, 20, one_way(5_000.0, true))),
        Some(direction(100, 0, one_way(7_000.0, true))),
    ));
    assert_eq!(f.loss_forward_pct, Some(10.0));
    assert_eq!(f.loss_backward_pct, Some(0.0));
    assert_eq!(f.loss_pct, Some(20.0 * 100.0 / 300.0));
    assert_eq!((f.duplicates, f.reordered), (Some(2.0), Some(4.0)));
    assert_eq!(f.owd_forward_median_us, Some(5_000.0));
    assert_eq!(f.owd_backward_median_us, Some(7_000.0));
    assert_eq!(f.owd_synchronized, Some(true));
    assert_eq!(f.jitter_us, Some(120.0));
    assert_eq!(
        (f.delay_min_us, f.delay_median_us, f.delay_p95_us, f.delay_max_us),
        (None, None, None, None)
    );
    assert_eq!(f.out_of_range(), None);

    // Unsynchronised clocks: a negative "delay" is the clocks' offset,
    // not a figure. Loss and jitter stay; the one-way medians do not.
    let f = figures_of(&owamp(Some(direction(200, 20, one_way(-3_000.0, false))), None));
    assert_eq!(f.owd_synchronized, Some(false));
    assert_eq!((f.owd_forward_median_us, f.owd_backward_median_us), (None, None));
    assert_eq!(f.loss_forward_pct, Some(10.0));
    assert_eq!(f.loss_backward_pct, None);
    assert_eq!(f.jitter_us, Some(120.0));
    assert_eq!(f.out_of_range(), None);

    // One direction synchronised, the other not: each as it is.
    let f = figures_of(&owamp(
        Some(direction(10, 0, one_way(900.0, true))),
        Some(direction(10, 0, one_way(-40.0, false))),
    ));
    assert_eq!(f.owd_synchronized, Some(false));
    assert_eq!(
        (f.owd_forward_median_us, f.owd_backward_median_us),
        (Some(900.0), None)
    );
}

#[test]
fn a_streams_summary_is_a_row_of_one_direction() {
    use goodput_archive::one_way_summary_figures;
    use goodput_core::result::OneWaySummary;
    let summary = |delay: OneWayStats| OneWaySummary {
        start_ns: 1_700_000_000_000_000_000,
        end_ns: 1_700_000_059_900_000_000,
        sent: 600,
        unsent: 0,
        received: 594,
        lost: 6,
        duplicates: 1,
        reordered: 2,
        delay: Some(delay),
        hops: None,
        histogram_ns: None,
        histogram_negative_ns: None,
    };
    let f = one_way_summary_figures(&summary(one_way(10_220.0, true)), true);
    assert_eq!(
        (f.loss_pct, f.loss_forward_pct, f.loss_backward_pct),
        (Some(1.0), Some(1.0), None)
    );
    assert_eq!(
        (f.duplicates, f.reordered, f.jitter_us),
        (Some(1.0), Some(2.0), Some(120.0))
    );
    assert_eq!(
        (f.owd_forward_median_us, f.owd_backward_median_us),
        (Some(10_220.0), None)
    );
    assert_eq!(f.owd_synchronized, Some(true));
    // The other way, from unsynchronised clocks: loss, no delay.
    let f = one_way_summary_figures(&summary(one_way(-700.0, false)), false);
    assert_eq!((f.loss_forward_pct, f.loss_backward_pct), (None, Some(1.0)));
    assert_eq!((f.owd_forward_median_us, f.owd_backward_median_us), (None, None));
    assert_eq!(f.owd_synchronized, Some(false));
    assert_eq!(f.out_of_range(), None);
}

#[test]
fn twamp_fills_the_round_trip_and_its_synchronised_one_way_delays() {
    let (_, st) = fixture("stamp");
    let mut stats = st.stamp().unwrap().total.clone();
    stats.forward = Some(one_way(300.0, true));
    stats.backward = Some(one_way(250.0, true));
    let r = with_detail(
        TestKind::TwampClient,
        Detail::Twamp(Box::new(TwampDetail {
            mode: "open".into(),
            padding: 27,
            packet_bytes: 41,
            interval_ns: 100_000_000,
            dscp: 0,
            timeout_ms: 2000,
            local_clock: ClockState {
                synchronized: true,
                error_us: None,
            },
            sid: "c0000201e95f3a1c0000000000000002".into(),
            stats: stats.clone(),
            processing: None,
        })),
    );
    let f = figures_of(&r);
    assert_eq!(f.delay_median_us, stats.rtt.map(|d| d.median_us));
    assert!(f.delay_p95_us.is_some());
    assert_eq!(f.owd_forward_median_us, Some(300.0));
    assert_eq!(f.owd_backward_median_us, Some(250.0));
    assert_eq!(f.owd_synchronized, Some(true));
}

#[test]
fn loss_splits_by_direction_where_the_test_tells_them_apart() {
    let (_, mut r) = fixture("stamp");
    let t = &mut r.stamp_mut().unwrap().total;
    t.sent = 1000;
    t.lost = 10;
    t.lost_forward = Some(4);
    t.lost_backward = Some(6);
    let f = figures_of(&r);
    assert_eq!(f.loss_pct, Some(1.0));
    assert_eq!(f.loss_forward_pct, Some(0.4));
    // Of the 996 requests that reached the reflector, 6 replies were lost.
    assert_eq!(f.loss_backward_pct, Some(6.0 * 100.0 / 996.0));
    // A reflector that does not number its replies: the round trip counts
    // as the measuring host's direction, the other is unknown.
    let t = &mut r.stamp_mut().unwrap().total;
    t.lost_forward = None;
    t.lost_backward = None;
    let f = figures_of(&r);
    assert_eq!((f.loss_forward_pct, f.loss_backward_pct), (Some(1.0), None));
    let (_, r) = fixture("udp");
    let f = figures_of(&r);
    // A download: the loss is the way back.
    assert_eq!((f.loss_forward_pct, f.loss_backward_pct), (None, f.loss_pct));
}

async fn alerts_are_stored_updated_ended_and_listed(e: &Engine) {
    use goodput_archive::AlertRecord;
    let a = e.open().await;
    let alert = |id: &str, start: u64| AlertRecord {
        id: id.into(),
        rule: "loss".into(),
        task: "lat".into(),
        source: "a".into(),
        dest: Some("b".into()),
        direction: "forward".into(),
        metric: "loss".into(),
        severity: "warning".into(),
        value: Some(0.5),
        threshold: "loss = 0.500% (outside ~:0)".into(),
        measurement_key: "k".into(),
        start_ms: start,
        updated_ms: start,
        end_ms: None,
    };
    a.put_alerts(&[alert("one", 1000), alert("two", 2000)])
        .await
        .unwrap();
    let open = a.alerts(true, 0, u64::MAX, 10).await.unwrap();
    assert_eq!(
        open.iter().map(|x| x.id.as_str()).collect::<Vec<_>>(),
        ["two", "one"]
    );
    let mut ended = alert("one", 1000);
    ended.end_ms = Some(5000);
    ended.value = Some(0.0);
    a.put_alerts(&[ended.clone()]).await.unwrap();
    let open = a.alerts(true, 0, u64::MAX, 10).await.unwrap();
    assert_eq!(open.len(), 1);
    assert_eq!(open[0].id, "two");
    // Every alert open at some time in [4000, 6000): both.
    let all = a.alerts(false, 4000, 6000, 10).await.unwrap();
    assert_eq!(all.len(), 2);
    assert_eq!(all.iter().find(|x| x.id == "one").unwrap(), &ended);
    // One that ended before the window is not in it.
    assert_eq!(a.alerts(false, 5001, 6000, 10).await.unwrap().len(), 1);
    // Updated, then ended, in one call (one evaluation): its last state;
    // and more alerts than one statement holds.
    let mut updated = alert("two", 2000);
    updated.updated_ms = 7000;
    let mut closed = updated.clone();
    closed.end_ms = Some(7000);
    let mut many: Vec<AlertRecord> = (0..1234).map(|i| alert(&format!("m{i}"), 8000 + i)).collect();
    many.insert(0, updated);
    many.push(closed.clone());
    a.put_alerts(&many).await.unwrap();
    let open = a.alerts(true, 0, u64::MAX, 10_000).await.unwrap();
    assert_eq!(open.len(), 1234);
    assert!(open.iter().all(|x| x.id.starts_with('m')));
    let all = a.alerts(false, 0, u64::MAX, 10_000).await.unwrap();
    assert_eq!(all.iter().find(|x| x.id == "two").unwrap(), &closed);
}

async fn ended_runs_are_queued_for_each_target_and_the_limit_drops_background_first(e: &Engine) {
    let a = e.open().await;
    let (doc, r) = fixture("stamp");
    let targets = ["https://one".to_string(), "https://two".to_string()];
    let mut runs: Vec<Run> = (0..10u64)
        .map(|i| run(&format!("q{i}"), i * 1000, RunState::Finished, &doc, &r))
        .collect();
    runs[0].state = RunState::Scheduled;
    runs[1].class = RunClass::Background;
    runs[2].class = RunClass::Background;
    a.put_queued(&runs, &targets, 100).await.unwrap();
    // Again, later: queued once, at the first time.
    a.put_queued(&runs[3..], &targets, 200).await.unwrap();
    let sizes = a.backlog_sizes().await.unwrap();
    assert_eq!(
        sizes,
        vec![
            ("https://one".to_string(), 9, Some(100)),
            ("https://two".to_string(), 9, Some(100))
        ],
        "the scheduled run is not queued"
    );
    let (batch, gone) = a.backlog("https://one", 4).await.unwrap();
    assert!(gone.is_empty());
    assert_eq!(
        batch.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
        ["q1", "q2", "q3", "q4"]
    );
    assert!(batch.iter().all(|r| r.result.is_some()), "whole runs");
    a.dequeue("https://one", &["q1".into(), "q2".into()])
        .await
        .unwrap();
    assert_eq!(a.backlog_sizes().await.unwrap()[0].1, 7);
    // The limit: 5 on "two" drops the two background runs, then the
    // oldest two of the rest.
    assert_eq!(a.trim_backlog("https://two", 5).await.unwrap(), 4);
    let (left, _) = a.backlog("https://two", 100).await.unwrap();
    assert_eq!(
        left.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
        ["q5", "q6", "q7", "q8", "q9"]
    );
    // A run queued after it was stored (a state set afterwards).
    a.enqueue(&["q1".into(), "q0".into()], "https://one", 300)
        .await
        .unwrap();
    let (again, _) = a.backlog("https://one", 100).await.unwrap();
    assert_eq!(again.len(), 8, "q1 again, not the scheduled q0");
}

async fn agents_register_and_renew_their_leases(e: &Engine) {
    use goodput_archive::AgentRecord;
    let a = e.open().await;
    let rec = |name: &str, seen: u64| AgentRecord {
        name: name.into(),
        info: serde_json::json!({"version": "0.1.0", "addresses": ["10.0.0.1"]}),
        seen_ms: seen,
        lease_until_ms: seen + 90_000,
    };
    a.put_agent(&rec("b", 1000)).await.unwrap();
    a.put_agent(&rec("a", 2000)).await.unwrap();
    a.put_agent(&rec("b", 5000)).await.unwrap();
    assert_eq!(a.agents().await.unwrap(), vec![rec("a", 2000), rec("b", 5000)]);
}
