//! Measurements read back: a measurement's series, paths with their
//! hops, and alerts.

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::Json;
use goodput_archive::{Metric, RunFilter, RunState};
use serde::{Deserialize, Serialize};

use crate::clock;

use super::{bad, internal, Ctx, Failure};

#[derive(Deserialize)]
pub(crate) struct SeriesQuery {
    /// The measurement (or `source`, `dest` and `kind` to find it).
    key: Option<String>,
    source: Option<String>,
    dest: Option<String>,
    kind: Option<String>,
    metric: String,
    from_ms: Option<u64>,
    to_ms: Option<u64>,
    step_ms: Option<u64>,
}

/// A measurement's series.
#[derive(Serialize, schemars::JsonSchema)]
pub(crate) struct SeriesView {
    /// The measurement.
    key: String,
    /// The kind of test whose runs these are (none when asked by `key`).
    #[serde(skip_serializing_if = "Option::is_none")]
    kind: Option<String>,
    /// The figure, by its wire name (`throughput_up`, `delay_median`).
    metric: Metric,
    /// The unit of its values: `bit/s`, `%`, `µs` or `count`.
    unit: &'static str,
    from_ms: u64,
    to_ms: u64,
    step_ms: Option<u64>,
    points: Vec<PointView>,
}

/// One point of a series, with its time in words beside its milliseconds.
#[derive(Serialize, schemars::JsonSchema)]
pub(crate) struct PointView {
    #[serde(flatten)]
    point: goodput_archive::Point,
    /// `at_ms` as ISO 8601 UTC (`2026-01-01T00:00:00.000Z`).
    at: String,
}

/// A figure's unit as the series API states it.
fn unit_of(metric: Metric) -> &'static str {
    match metric.figure().unit {
        "" => "count",
        u => u,
    }
}

/// The metric a query names, by its wire name; the error lists them all.
fn metric_named(name: &str) -> Result<Metric, Failure> {
    serde_json::from_value(serde_json::Value::String(name.to_owned())).map_err(|_| {
        let names: Vec<&str> = Metric::ALL.iter().map(|m| m.figure().name).collect();
        bad(format!("metric: '{name}' is not one of {}", names.join(", ")))
    })
}

/// The measurement a query names: its `key`, or the newest finished run's
/// of `source`, `dest` and `kind`; without a kind, the one kind of test
/// between them whose runs have the metric (several: refused, naming
/// them, rather than guessed).
async fn measurement_of(
    s: &Ctx,
    key: Option<String>,
    source: Option<String>,
    dest: Option<String>,
    kind: Option<String>,
    metric: Metric,
) -> Result<(String, Option<String>), Failure> {
    if let Some(k) = key {
        return Ok((k, None));
    }
    if let Some(kind) = kind {
        let k = measurement(s, None, source, dest, Some(kind.clone())).await?;
        return Ok((k, Some(kind)));
    }
    let mut having = Vec::new();
    for kind in goodput_core::kind::Kind::ALL {
        let f = RunFilter {
            source: source.clone(),
            dest: dest.clone(),
            kind: Some(kind.name().into()),
            state: Some(RunState::Finished),
            limit: 1,
            ..RunFilter::default()
        };
        let Some(run) = s.archive.runs(&f).await.map_err(internal)?.into_iter().next() else {
            continue;
        };
        let measured = s
            .archive
            .metrics_measured(&run.measurement_key, 0, u64::MAX / 2)
            .await
            .map_err(internal)?;
        if measured.contains(&metric) {
            having.push((kind.name(), run.measurement_key));
        }
    }
    let pair = format!(
        "{} → {}",
        source.as_deref().unwrap_or("any source"),
        dest.as_deref().unwrap_or("any destination")
    );
    match having.len() {
        0 => Err(Failure(
            StatusCode::NOT_FOUND,
            format!(
                "no finished run of {pair} has {}; name the test's kind with kind=",
                metric.figure().name
            ),
        )),
        1 => {
            let (kind, key) = having.remove(0);
            Ok((key, Some(kind.to_owned())))
        }
        _ => {
            let kinds: Vec<&str> = having.iter().map(|h| h.0).collect();
            Err(bad(format!(
                "kind: runs of {} kinds of test between {pair} have {}: {}; say which with kind=",
                kinds.len(),
                metric.figure().name,
                kinds.join(", ")
            )))
        }
    }
}

/// The measurement a query names: its `key`, or the newest finished run's
/// of `source`, `dest` and `kind`.
async fn measurement(
    s: &Ctx,
    key: Option<String>,
    source: Option<String>,
    dest: Option<String>,
    kind: Option<String>,
) -> Result<String, Failure> {
    if let Some(k) = key {
        return Ok(k);
    }
    let f = RunFilter {
        source,
        dest,
        kind,
        state: Some(RunState::Finished),
        limit: 1,
        ..RunFilter::default()
    };
    let last = s.archive.runs(&f).await.map_err(internal)?;
    last.first()
        .map(|r| r.measurement_key.clone())
        .ok_or_else(|| Failure(StatusCode::NOT_FOUND, "no finished run matches".into()))
}

pub(crate) async fn series(
    State(s): State<Ctx>,
    Query(q): Query<SeriesQuery>,
) -> Result<Json<SeriesView>, Failure> {
    let metric = metric_named(&q.metric)?;
    let now = clock::now_ms();
    let to = q.to_ms.unwrap_or(now);
    let from = q.from_ms.unwrap_or(to.saturating_sub(86_400_000));
    let (key, kind) = measurement_of(&s, q.key, q.source, q.dest, q.kind, metric).await?;
    let points = s
        .archive
        .series(&key, metric, from, to, q.step_ms)
        .await
        .map_err(internal)?;
    Ok(Json(SeriesView {
        key,
        kind,
        metric,
        unit: unit_of(metric),
        from_ms: from,
        to_ms: to,
        step_ms: q.step_ms,
        points: points
            .into_iter()
            .map(|point| PointView {
                at: goodput_core::time::ms_rfc3339(point.at_ms),
                point,
            })
            .collect(),
    }))
}

#[derive(Deserialize)]
pub(crate) struct PathsQuery {
    key: Option<String>,
    source: Option<String>,
    dest: Option<String>,
    kind: Option<String>,
    from_ms: Option<u64>,
    to_ms: Option<u64>,
}

/// Most paths listed with their hops.
const PATHS_WITH_HOPS: usize = 32;

/// A path, with the hop list of its newest trace.
#[derive(Serialize, schemars::JsonSchema)]
pub(crate) struct PathView {
    #[serde(flatten)]
    seen: goodput_archive::PathSeen,
    /// The answering addresses of each hop, first hop first (empty for a
    /// hop that did not answer).
    hops_addresses: Vec<Vec<String>>,
}

/// The paths a measurement's traces took over a window.
#[derive(Serialize, schemars::JsonSchema)]
pub(crate) struct PathsView {
    key: String,
    from_ms: u64,
    to_ms: u64,
    /// Whether the path changed in the window (a trace found a path other
    /// than the one before it).
    changed: bool,
    /// How many times it did.
    changes: u64,
    /// Traces read.
    runs: u64,
    /// Each path, the first taken first (the first 32 with their hops).
    paths: Vec<PathView>,
}

pub(crate) async fn paths(
    State(s): State<Ctx>,
    Query(q): Query<PathsQuery>,
) -> Result<Json<PathsView>, Failure> {
    let now = clock::now_ms();
    let to = q.to_ms.unwrap_or(now);
    let from = q.from_ms.unwrap_or(to.saturating_sub(86_400_000));
    let kind = q.kind.or_else(|| Some("trace".into()));
    let key = measurement(&s, q.key, q.source, q.dest, kind).await?;
    let h = s.archive.paths(&key, from, to).await.map_err(internal)?;
    let mut out = Vec::with_capacity(h.paths.len());
    for (i, seen) in h.paths.into_iter().enumerate() {
        let mut hops_addresses = Vec::new();
        if i < PATHS_WITH_HOPS {
            let run = s.archive.get(&seen.last_run).await.map_err(internal)?;
            let result: Option<goodput_core::result::TestResult> = run
                .and_then(|r| r.result)
                .and_then(|v| serde_json::from_value(v).ok());
            if let Some(t) = result.and_then(|r| r.into_trace()) {
                hops_addresses = t.hops.into_iter().map(|h| h.addresses).collect();
            }
        }
        out.push(PathView { seen, hops_addresses });
    }
    Ok(Json(PathsView {
        key,
        from_ms: from,
        to_ms: to,
        changed: h.changes > 0,
        changes: h.changes,
        runs: h.runs,
        paths: out,
    }))
}

#[derive(Deserialize)]
pub(crate) struct AlertsQuery {
    /// `open` (default) or `all`.
    state: Option<String>,
    from_ms: Option<u64>,
    to_ms: Option<u64>,
    limit: Option<u32>,
}

pub(crate) async fn alerts(
    State(s): State<Ctx>,
    Query(q): Query<AlertsQuery>,
) -> Result<Json<Vec<crate::state::alerts::AlertView>>, Failure> {
    let open = match q.state.as_deref() {
        None | Some("open") => true,
        Some("all") => false,
        Some(o) => return Err(bad(format!("state: '{o}' is not open or all"))),
    };
    let now = clock::now_ms();
    let to = q.to_ms.unwrap_or(u64::MAX);
    let from = q.from_ms.unwrap_or(if open {
        0
    } else {
        now.saturating_sub(7 * 86_400_000)
    });
    let limit = q.limit.unwrap_or(1000).min(10_000);
    let records = s.archive.alerts(open, from, to, limit).await.map_err(internal)?;
    Ok(Json(crate::state::alerts::with_words(&s.loaded(), records)))
}
