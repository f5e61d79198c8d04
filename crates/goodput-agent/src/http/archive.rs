//! A fleet archive's intake: runs forwarded by agents, and pScheduler
//! results.

use std::collections::HashMap;
use std::net::IpAddr;

use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use goodput_archive::pscheduler::RefusalKind;
use goodput_archive::{Run, RunState};
use serde::Deserialize;

use crate::clock;
use crate::http::accept::Caller;
use crate::limits::Write;

use super::auth::{authorise, caller_is, write_quota};
use super::runs::{out_of_range, read_spec};
use super::{count_refusal, internal, only_archive, unreadable, unstored, Ctx, Failure};
use crate::state::booking::base_of;

/// A batch of runs forwarded by an agent.
#[derive(Deserialize, schemars::JsonSchema)]
pub(crate) struct Ingest {
    /// The runs, whole (with their result documents).
    runs: Vec<serde_json::Value>,
}

/// Most runs in one forwarded batch.
const MAX_INGEST_RUNS: usize = 5_000;
/// Longest id, task or host name an archive takes.
const MAX_NAME: usize = 512;

/// One forwarded run checked: its figures and key worked out here from
/// its documents, not taken on trust.
/// A forwarded run refused: its id, the reason, and whether the reason
/// is a date or figure out of range (counted apart).
struct Refused {
    id: String,
    reason: String,
    out_of_range: bool,
}

fn checked_run(v: serde_json::Value, now: u64) -> Result<Run, Refused> {
    let id = v["id"].as_str().unwrap_or("").to_string();
    let fail = |reason: String| Refused {
        id: id.clone(),
        reason,
        out_of_range: false,
    };
    let range = |reason: String| Refused {
        id: id.clone(),
        reason,
        out_of_range: true,
    };
    let mut run: Run = serde_json::from_value(v).map_err(|e| fail(format!("not a run: {e}")))?;
    if [
        Some(&run.id),
        Some(&run.task),
        Some(&run.source),
        run.dest.as_ref(),
        Some(&run.kind),
        run.reason.as_ref(),
        run.figures.path_checksum.as_ref(),
    ]
    .into_iter()
    .flatten()
    .any(|t| t.contains('\0'))
    {
        return Err(fail("a NUL character is in no name, id, kind or reason".into()));
    }
    if run.id.is_empty() || run.id.len() > MAX_NAME {
        return Err(fail(format!("its id must be 1 to {MAX_NAME} bytes")));
    }
    for (what, text) in [("task", run.task.as_str()), ("source", run.source.as_str())]
        .into_iter()
        .chain(run.dest.as_deref().map(|d| ("dest", d)))
    {
        if text.is_empty() || text.len() > MAX_NAME {
            return Err(fail(format!("its {what} must be 1 to {MAX_NAME} bytes")));
        }
    }
    if !run.state.has_ended() {
        return Err(fail(format!(
            "only ended runs are archived, not one {}",
            run.state.as_str()
        )));
    }
    let spec = read_spec(run.spec.clone()).map_err(|e| fail(e.1))?;
    let key = goodput_archive::measurement_key(&spec, &run.source, run.dest.as_deref());
    if run.kind == crate::state::minutes::KIND {
        // A background stream's per-minute summary: its figures are the
        // minute's (its document is a summary, not a test's result).
        run.measurement_key = format!("{key}/minute");
        run.figures.path_checksum = None;
        // Its figures are taken as sent: each must make sense.
        return match out_of_range(&run, now) {
            None => Ok(run),
            Some(e) => Err(range(e)),
        };
    }
    run.kind = spec.kind().into();
    run.measurement_key = key;
    if let Some(doc) = &run.result {
        let result: goodput_core::result::TestResult = serde_json::from_value(doc.clone())
            .map_err(|e| fail(format!("its result does not read: {e}")))?;
        run.figures = goodput_archive::figures_of(&result);
    } else if run.state == RunState::Finished {
        return Err(fail("a finished run without its result".into()));
    } else {
        run.figures = Default::default();
    }
    match out_of_range(&run, now) {
        None => Ok(run),
        Some(e) => Err(range(e)),
    }
}

/// `POST /api/v1/archive/runs`: a fleet's archive stores the runs an agent
/// forwards, by id (a run sent twice is stored once). Runs that do not
/// read, and runs the caller does not own (it is neither their source's
/// nor their dest's configured address: [`Owners::check`]), are refused
/// one by one, each with its reason; the rest are stored in one
/// transaction.
pub(crate) async fn ingest(
    State(s): State<Ctx>,
    ConnectInfo(Caller(from)): ConnectInfo<Caller>,
    headers: HeaderMap,
    body: Result<Json<Ingest>, axum::extract::rejection::JsonRejection>,
) -> Result<Json<serde_json::Value>, Failure> {
    only_archive(&s)?;
    authorise(&s, from.ip(), &headers)?;
    let Json(batch) = body.map_err(|e| {
        s.lock().counters.ingest_refused += 1;
        unreadable(&e)
    })?;
    if batch.runs.len() > MAX_INGEST_RUNS {
        s.lock().counters.ingest_refused += 1;
        return Err(Failure(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "at most {MAX_INGEST_RUNS} runs in one batch, not {}",
                batch.runs.len()
            ),
        ));
    }
    write_quota(&s, from.ip(), Write::Ingest, batch.runs.len() as u64)?;
    let now = clock::now_ms();
    let mut good = Vec::with_capacity(batch.runs.len());
    let mut refused = Vec::new();
    let mut out_of_range = 0;
    let mut malformed = 0;
    for v in batch.runs {
        match checked_run(v, now) {
            Ok(r) => good.push(r),
            Err(r) => {
                out_of_range += u64::from(r.out_of_range);
                malformed += 1;
                refused.push(serde_json::json!({"id": r.id, "reason": r.reason}));
            }
        }
    }
    // Each run only from its own agent.
    let loaded = s.loaded();
    let mut owners = Owners::new(from.ip());
    let unnamed: Vec<String> = good
        .iter()
        .filter(|r| !names_its_pair(r))
        .map(|r| r.id.clone())
        .collect();
    let mut stored = HashMap::new();
    for id in s.archive.existing(&unnamed).await.map_err(internal)? {
        if let Some(r) = s.archive.get(&id).await.map_err(internal)? {
            stored.insert(id, (r.source, r.dest));
        }
    }
    let mut not_owner = 0u64;
    let mut owned = Vec::with_capacity(good.len());
    for r in good {
        match owners.check(&loaded, &r, stored.get(&r.id)).await {
            Ok(()) => owned.push(r),
            Err(why) => {
                not_owner += 1;
                refused.push(serde_json::json!({"id": r.id, "reason": why}));
            }
        }
    }
    let good = owned;
    s.store_now(&good).await.map_err(unstored)?;
    {
        let mut inner = s.lock();
        inner.counters.ingested += good.len() as u64;
        inner.counters.ingest_refused += malformed;
        inner.counters.refused_out_of_range += out_of_range;
        inner.counters.refused_not_owner += not_owner;
        inner.counters.refused += out_of_range + not_owner;
    }
    Ok(Json(
        serde_json::json!({"stored": good.len(), "refused": refused}),
    ))
}

/// Whether a forwarded run's id names its pair: a configured run's
/// `TASK/SOURCE/DEST/BASE_MS` (`BASE_MS~K` after a clock step back),
/// or a per-minute summary of one (`…/minute/START_MS`). An on-demand
/// run's id (`on-demand/UUID`) names none.
pub(crate) fn names_its_pair(run: &Run) -> bool {
    let pair = format!(
        "{}/{}/{}/",
        run.task,
        run.source,
        run.dest.as_deref().unwrap_or("-")
    );
    let Some(tail) = run.id.strip_prefix(&pair) else {
        return false;
    };
    let (base, minute) = match tail.split_once('/') {
        Some((b, rest)) => (b, Some(rest)),
        None => (tail, None),
    };
    base_of(base).is_some()
        && minute.is_none_or(|m| {
            m.strip_prefix("minute/")
                .is_some_and(|t| !t.is_empty() && t.bytes().all(|c| c.is_ascii_digit()))
        })
}

/// `POST` or `PUT /api/v1/archive/pscheduler`: a fleet's archive stores
/// a result a perfSONAR pScheduler `http` archiver sends, mapped to
/// goodput's figures (`goodput_archive::pscheduler`); a single-ended
/// test without a source is the `x-ps-observer` header's. Its ends get the
/// mesh's names where the configuration has their addresses, and its
/// measurement is the configured task's of the same kind between them
/// (a mesh imported with `import-psconfig` from the same template has
/// them), so the grid, series and alerts cover it.
pub(crate) async fn pscheduler(
    State(s): State<Ctx>,
    ConnectInfo(Caller(from)): ConnectInfo<Caller>,
    headers: HeaderMap,
    body: Result<Json<serde_json::Value>, axum::extract::rejection::JsonRejection>,
) -> Result<Json<serde_json::Value>, Failure> {
    only_archive(&s)?;
    authorise(&s, from.ip(), &headers)?;
    write_quota(&s, from.ip(), Write::PScheduler, 1)?;
    let refused = |status: StatusCode, why: String| {
        s.lock().counters.pscheduler_refused += 1;
        Failure(status, why)
    };
    let Json(doc) = body.map_err(|e| {
        let f = unreadable(&e);
        refused(f.0, f.1)
    })?;
    // Whose measurement a single-ended result is: perfSONAR's pSConfig
    // names the host that ran the task in this header.
    let observer = match headers.get("x-ps-observer").map(|v| v.to_str()) {
        None => None,
        Some(Ok(o)) => Some(o),
        Some(Err(_)) => {
            return Err(refused(
                StatusCode::BAD_REQUEST,
                "not a pScheduler result goodput maps: the x-ps-observer header is not plain text".into(),
            ))
        }
    };
    let mapped = goodput_archive::pscheduler::from_pscheduler_observed(&doc, observer).map_err(|e| {
        let status = match e.kind {
            RefusalKind::NoKind => StatusCode::UNPROCESSABLE_ENTITY,
            RefusalKind::Malformed => StatusCode::BAD_REQUEST,
            RefusalKind::OutOfRange => {
                // Figures, latency buckets and the clock error past what
                // is physically sensible.
                count_refusal(&s, |c| c.refused_out_of_range += 1);
                StatusCode::BAD_REQUEST
            }
        };
        refused(status, format!("not a pScheduler result goodput maps: {e}"))
    })?;
    let mut run = mapped.run;
    if let Some(e) = out_of_range(&run, clock::now_ms()) {
        count_refusal(&s, |c| c.refused_out_of_range += 1);
        return Err(refused(StatusCode::BAD_REQUEST, format!("run {}: {e}", run.id)));
    }
    let spec = read_spec(run.spec.clone()).map_err(|e| {
        refused(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!("its test as goodput's: {}", e.1),
        )
    })?;
    let loaded = s.loaded();
    if let Some(n) = loaded.name_of_host(&run.source) {
        run.source = n;
    }
    if let Some(n) = run.dest.as_deref().and_then(|d| loaded.name_of_host(d)) {
        run.dest = Some(n);
    }
    // The configured task of the same kind between the same ends; of
    // several (latency and latencybg are both STAMP), the one whose test
    // is this one.
    let own_key = goodput_archive::measurement_key(&spec, &run.source, run.dest.as_deref());
    let candidates: Vec<&goodput_core::mesh::PairTask> = loaded
        .pairs
        .iter()
        .filter(|p| p.source == run.source && p.dest == run.dest && p.spec.kind() == run.kind)
        .collect();
    let configured = candidates
        .iter()
        .find(|p| goodput_archive::measurement_key(&p.spec, &p.source, p.dest.as_deref()) == own_key)
        .or(candidates.first());
    run.measurement_key = match configured {
        Some(p) => {
            run.task = p.task.clone();
            goodput_archive::measurement_key(&p.spec, &p.source, p.dest.as_deref())
        }
        None => own_key,
    };
    s.store_now(std::slice::from_ref(&run)).await.map_err(unstored)?;
    s.lock().counters.pscheduler_ingested += 1;
    Ok(Json(serde_json::json!({
        "stored": run.id,
        "kind": run.kind,
        "task": run.task,
        "source": run.source,
        "dest": run.dest,
        "measurement_key": run.measurement_key,
        "test_type": mapped.test_type,
    })))
}

/// Who a caller of `POST /api/v1/archive/runs` is, worked out once per
/// configured name in a batch.
struct Owners {
    ip: IpAddr,
    known: HashMap<String, Result<(), String>>,
}

impl Owners {
    fn new(ip: IpAddr) -> Self {
        Self {
            ip: ip.to_canonical(),
            known: HashMap::new(),
        }
    }

    /// Whether the caller is configured address `name` ([`caller_is`]).
    async fn is(&mut self, loaded: &crate::state::config::Loaded, name: &str) -> Result<(), String> {
        if let Some(known) = self.known.get(name) {
            return known.clone();
        }
        let found = caller_is(loaded, name, self.ip).await;
        self.known.insert(name.to_owned(), found.clone());
        found
    }

    /// A forwarded run may be written only by its own agent: its ends
    /// are addresses of this archive's mesh, the caller is one of them
    /// (each end of a two-ended run keeps and forwards its own record),
    /// its id names that pair unless it is an on-demand run's, and a
    /// record already stored under an id that names no pair has the
    /// same ends (`stored`). `Err` is the reason, as the refusal says it.
    async fn check(
        &mut self,
        loaded: &crate::state::config::Loaded,
        run: &Run,
        stored: Option<&(String, Option<String>)>,
    ) -> Result<(), String> {
        let ends: Vec<&str> = std::iter::once(run.source.as_str())
            .chain(run.dest.as_deref())
            .collect();
        if let Some(e) = ends.iter().find(|e| !loaded.config.addresses.contains_key(**e)) {
            return Err(format!(
                "not owner: {e}, an end of run {}, is not an address of this archive's mesh",
                run.id
            ));
        }
        let mut why = Vec::new();
        let mut mine = false;
        for e in &ends {
            match self.is(loaded, e).await {
                Ok(()) => {
                    mine = true;
                    break;
                }
                Err(e) => why.push(e),
            }
        }
        if !mine {
            return Err(format!(
                "not owner: run {} is stored only from its source or dest ({})",
                run.id,
                why.join("; ")
            ));
        }
        if !run.id.starts_with("on-demand/") && !names_its_pair(run) {
            return Err(format!(
                "not owner: run {}'s id does not name its task {}, source {} and dest {}",
                run.id,
                run.task,
                run.source,
                run.dest.as_deref().unwrap_or("-")
            ));
        }
        if let Some((source, dest)) = stored {
            if (source, dest) != (&run.source, &run.dest) {
                return Err(format!(
                    "not owner: run {} is stored from {source} to {}, and only its own agent \
                     replaces it",
                    run.id,
                    dest.as_deref().unwrap_or("-")
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    /// A forwarded run's id names its task, source and dest, unless it
    /// is an on-demand run's.
    #[test]
    fn a_forwarded_runs_id_names_its_pair() {
        let run = |id: &str, source: &str, dest: Option<&str>| goodput_archive::Run {
            id: id.into(),
            task: "latency".into(),
            source: source.into(),
            dest: dest.map(Into::into),
            kind: goodput_core::kind::Kind::Stamp.into(),
            class: goodput_core::schedule::RunClass::Background,
            state: goodput_archive::RunState::Failed,
            reason: None,
            scheduled_ms: 1,
            start_ms: None,
            end_ms: None,
            measurement_key: String::new(),
            spec: serde_json::json!({"kind": "stamp"}),
            result: None,
            figures: Default::default(),
        };
        for (id, source, dest) in [
            ("latency/a/b/1795800240000", "a", Some("b")),
            ("latency/a/b/1795800240000~2", "a", Some("b")),
            ("latency/a/b/1795800240000/minute/1795800240000", "a", Some("b")),
            ("latency/a/-/1795800240000", "a", None),
        ] {
            assert!(super::names_its_pair(&run(id, source, dest)), "{id}");
        }
        for (id, source, dest) in [
            ("latency/a/b/1795800240000", "b", Some("a")),
            ("latency/a/b/1795800240000", "a", Some("c")),
            ("latency/a/b/1795800240000", "a", None),
            ("latency/a/b/", "a", Some("b")),
            ("latency/a/b/x", "a", Some("b")),
            ("latency/a/b/1795800240000/minute/", "a", Some("b")),
            ("latency/a/b/1795800240000/other/1", "a", Some("b")),
            ("throughput/a/b/1795800240000", "a", Some("b")),
            ("on-demand/00000000-0000-4000-8000-000000000001", "a", Some("b")),
        ] {
            assert!(!super::names_its_pair(&run(id, source, dest)), "{id}");
        }
    }
}
