//! `/api/v1/runs`: runs read, a peer's result handed over, and runs
//! asked for on demand.

use axum::extract::{ConnectInfo, Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use goodput_archive::{Run, RunFilter, RunState};
use goodput_core::kind::BeaconService;
use goodput_core::schedule::RunClass;
use goodput_core::spec::TestSpec;
use goodput_core::time::{duration_ms, ms_rfc3339};
use serde::Deserialize;

use crate::clock;
use crate::http::accept::Caller;
use crate::limits::{Bucket, Write};
use crate::state::booking::{base_of, plan, Placed, Planning};
use crate::state::{run_number, Shared};

use super::auth::{authorise, from_the_other_end, not_owner, write_quota};
use super::{
    archive_has_room, bad, count_refusal, internal, not_an_archive, unreadable, unstored, Ctx, Failure,
};

/// How far ahead of this agent's clock a record may be dated.
const MAX_AHEAD_MS: u64 = 86_400_000;
/// Longest reason a record may carry.
const MAX_REASON: usize = 8 << 10;

/// A record from the network checked before it is stored: dated no more
/// than a day ahead of this agent's clock, a reason of at most 8 KiB,
/// every figure in range (`Figures::out_of_range`).
pub(crate) fn out_of_range(run: &Run, now: u64) -> Option<String> {
    let ahead = now.saturating_add(MAX_AHEAD_MS);
    for (what, t) in [
        ("scheduled_ms", Some(run.scheduled_ms)),
        ("start_ms", run.start_ms),
        ("end_ms", run.end_ms),
    ] {
        if let Some(t) = t.filter(|t| *t > ahead) {
            return Some(format!(
                "its {what} {t} is more than a day ahead of this agent's clock ({})",
                ms_rfc3339(now)
            ));
        }
    }
    if run.reason.as_ref().is_some_and(|r| r.len() > MAX_REASON) {
        return Some(format!("its reason is longer than {MAX_REASON} bytes"));
    }
    run.figures.out_of_range().map(|e| format!("its {e}"))
}

/// [`out_of_range`] as a refusal (counted).
fn in_range(s: &Shared, run: &Run, now: u64) -> Result<(), Failure> {
    match out_of_range(run, now) {
        None => Ok(()),
        Some(e) => {
            count_refusal(s, |c| c.refused_out_of_range += 1);
            Err(bad(format!("run {}: {e}", run.id)))
        }
    }
}

/// The task, source and dest of a configured run, from its id
/// (`task/source/dest/BASE_MS`, a base time of its schedule).
fn configured_run(
    loaded: &crate::state::config::Loaded,
    id: &str,
) -> Option<(String, String, Option<String>)> {
    let (pair, base) = id.rsplit_once('/')?;
    let base = base_of(base)?;
    loaded
        .pairs
        .iter()
        .find(|t| {
            pair == format!("{}/{}/{}", t.task, t.source, t.dest.as_deref().unwrap_or("-"))
                && t.repeat.is_base(base)
        })
        .map(|t| (t.task.clone(), t.source.clone(), t.dest.clone()))
}

/// The (host, port) each of a spec's targets reaches; no port for probes
/// that have none (ICMP).
fn target_ports(spec: &TestSpec) -> Vec<(String, Option<u16>)> {
    spec.targets()
}

/// An on-demand spec given through the API: it names no file on the
/// agent (whether a file exists is no one's business), and it reaches
/// only the test services of `dest`: the beacon's (TCP and UDP test
/// port, STAMP, iperf3 and QUIC when on; the mesh's agents share these
/// ports) and the ports the mesh's own tests use to it, never an agent's
/// API port.
pub(crate) fn services_only(
    s: &Shared,
    loaded: &crate::state::config::Loaded,
    dest: &str,
    spec: &TestSpec,
) -> Result<(), Failure> {
    let refuse = |why: String| {
        count_refusal(s, |c| c.refused_spec += 1);
        Failure(StatusCode::FORBIDDEN, why)
    };
    if let Some(field) = spec.names_a_file() {
        return Err(refuse(format!(
            "spec: {field} names a file on the agent, and a spec given through the API names no \
             file (put the test in the mesh configuration)"
        )));
    }
    // A perfSONAR host's pScheduler names the port of the server it
    // starts for the run: the spec's is not used.
    if loaded.config.addresses.get(dest).is_some_and(|a| a.pscheduler) && matches!(spec, TestSpec::Iperf3(_))
    {
        return Ok(());
    }
    let o = &s.options;
    let api = loaded.config.agent.api_port;
    let kind = spec.kind();
    let reach = spec.reach();
    let mut allowed: Vec<u16> = reach
        .services
        .iter()
        .filter_map(|service| match service {
            BeaconService::TestPort => Some(o.beacon_port),
            BeaconService::Stamp => Some(o.stamp_port),
            BeaconService::Iperf3 => o.iperf3_port,
            BeaconService::Quic => o.quic_port,
            BeaconService::Owamp => o.owamp_port,
            BeaconService::Twamp => o.twamp_port,
            BeaconService::Ndt7 => o.ndt7_port,
        })
        .chain(reach.port)
        .collect();
    for p in loaded
        .pairs
        .iter()
        .filter(|p| p.dest.as_deref() == Some(dest) && p.spec.kind() == kind)
    {
        allowed.extend(target_ports(&p.spec).into_iter().filter_map(|(_, port)| port));
    }
    let has_agent = loaded.config.addresses.get(dest).is_some_and(|a| !a.no_agent);
    for (host, port) in target_ports(spec) {
        let Some(port) = port else { continue };
        if has_agent && port == api {
            return Err(refuse(format!(
                "spec: {host}:{port} is the agents' API, not a test service"
            )));
        }
        if !allowed.contains(&port) {
            let mut list: Vec<String> = allowed.iter().map(u16::to_string).collect();
            list.sort();
            list.dedup();
            return Err(refuse(format!(
                "spec: port {port} of {dest} is not one of its {kind} test services (ports: {})",
                if list.is_empty() {
                    "none".to_owned()
                } else {
                    list.join(", ")
                }
            )));
        }
    }
    Ok(())
}

/// The hosts a spec tests to (without ports).
pub(crate) fn targets(spec: &TestSpec) -> Vec<String> {
    // The kind's targets are split already; splitting again keeps a
    // target that does not split (or a trace's, ping's bare host) whole.
    spec.targets()
        .into_iter()
        .map(|(t, _)| {
            goodput_core::spec::split_target(&t, 1)
                .map(|(h, _)| h)
                .unwrap_or(t)
        })
        .collect()
}

pub(crate) fn read_spec(v: serde_json::Value) -> Result<TestSpec, Failure> {
    let spec = goodput_core::spec::read_one(v).map_err(|e| bad(format!("spec: {e}")))?;
    spec.validate().map_err(|e| bad(format!("spec: {e}")))?;
    if matches!(spec, TestSpec::Server(_)) {
        return Err(bad(
            "spec: a server is not a run (the agent's beacon is its server)",
        ));
    }
    Ok(spec)
}

#[derive(Deserialize)]
pub(crate) struct RunsQuery {
    source: Option<String>,
    dest: Option<String>,
    kind: Option<String>,
    state: Option<String>,
    from_ms: Option<u64>,
    to_ms: Option<u64>,
    limit: Option<u32>,
}

pub(crate) async fn runs(
    State(s): State<Ctx>,
    Query(q): Query<RunsQuery>,
) -> Result<Json<Vec<Run>>, Failure> {
    let state = match q.state.as_deref() {
        None => None,
        Some(t) => Some(t.parse::<RunState>().map_err(bad)?),
    };
    let f = RunFilter {
        source: q.source,
        dest: q.dest,
        kind: q.kind,
        state,
        from_ms: q.from_ms,
        to_ms: q.to_ms,
        limit: q.limit.unwrap_or(1000).min(10_000),
    };
    Ok(Json(s.archive.runs(&f).await.map_err(internal)?))
}

pub(crate) async fn one_run(State(s): State<Ctx>, Path(id): Path<String>) -> Result<Json<Run>, Failure> {
    match s.archive.get(&id).await.map_err(internal)? {
        Some(r) => Ok(Json(r)),
        None => Err(Failure(StatusCode::NOT_FOUND, format!("no run '{id}'"))),
    }
}

/// The agent at a run's other end hands over its end: the result of a
/// run it ran, or why a run it led did not start (which lets go of the
/// time held here for it). Who may write is proven by where the call
/// comes from, never by what the body says: the run's ends are the ones
/// booked here (its booking, or its stored record, or the configured
/// task its id names), the body must name the same ones, and the caller
/// must be the configured address of the end that is not this host. A
/// record of a run this host runs is never replaced; a run never booked
/// here can only be said not to have started.
pub(crate) async fn put_run(
    State(s): State<Ctx>,
    ConnectInfo(Caller(from)): ConnectInfo<Caller>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Result<Json<Run>, axum::extract::rejection::JsonRejection>,
) -> Result<StatusCode, Failure> {
    authorise(&s, from.ip(), &headers)?;
    write_quota(&s, from.ip(), Write::Result, 1)?;
    let Json(mut run) = body.map_err(|e| unreadable(&e))?;
    if run.id != id {
        return Err(bad(format!("the path names run '{id}', the body '{}'", run.id)));
    }
    if matches!(run.state, RunState::Scheduled | RunState::Running) {
        return Err(bad(
            "only a run's end is handed over (finished, failed, non_start, cancelled, missed)",
        ));
    }
    let loaded = s.loaded();
    let n = run_number(&id);
    // What this agent knows of the run's ends, in order of trust.
    let booked = s
        .lock()
        .book
        .booked
        .get(&n)
        .filter(|b| b.id == id)
        .map(|b| (b.task.clone(), b.source.clone(), b.dest.clone()));
    let stored = s.archive.get(&id).await.map_err(internal)?;
    let known = booked.is_some() || stored.is_some();
    let ends = booked
        .or_else(|| {
            stored
                .as_ref()
                .map(|r| (r.task.clone(), r.source.clone(), r.dest.clone()))
        })
        .or_else(|| configured_run(&loaded, &id));
    let (task, source, dest) = match ends {
        Some(e) => e,
        // An on-demand run that was never booked here (this agent
        // refused it, or never heard of it): its leader may only say it
        // did not start, and only as the source it names.
        None if id.starts_with("on-demand/") && run.state == RunState::NonStart => {
            (run.task.clone(), run.source.clone(), run.dest.clone())
        }
        None => {
            return Err(not_owner(
                &s,
                format!(
                    "run {id} is not booked here, not in this agent's archive and not a run of \
                     its configured tasks: there is nothing of it to hand over"
                ),
            ))
        }
    };
    if (&run.task, &run.source, &run.dest) != (&task, &source, &dest) {
        return Err(not_owner(
            &s,
            format!(
                "run {id} is task {task} from {source} to {} here; the record handed over says \
                 task {} from {} to {}",
                dest.as_deref().unwrap_or("-"),
                run.task,
                run.source,
                run.dest.as_deref().unwrap_or("-")
            ),
        ));
    }
    let here = |n: &str| loaded.mine.iter().any(|m| m == n);
    let runs_here = here(&source);
    if !runs_here && !dest.as_deref().is_some_and(here) {
        return Err(bad(format!("neither end of run {id} is this agent")));
    }
    let other = if runs_here {
        dest.clone()
    } else {
        Some(source.clone())
    };
    let other = other.ok_or_else(|| bad("a single-ended run has no other end"))?;
    from_the_other_end(&s, &loaded, &other, from.ip()).await?;
    // This host runs it: the other end (which led it) can only say it
    // did not start, and a record this host made stands.
    if runs_here {
        if run.state != RunState::NonStart {
            return Err(not_owner(
                &s,
                format!("run {id} runs here: its other end may only say it did not start"),
            ));
        }
        if stored.as_ref().is_some_and(|r| r.state != RunState::Scheduled) {
            return Err(not_owner(
                &s,
                format!("run {id} ran here: its record is this agent's"),
            ));
        }
    }
    if !known && runs_here && id.starts_with("on-demand/") {
        return Err(not_owner(
            &s,
            format!("run {id} would run here, but it was never asked of this agent"),
        ));
    }
    // A run never booked here did not run with this host.
    if !known && run.state != RunState::NonStart {
        return Err(not_owner(
            &s,
            format!("run {id} was never booked here: only that it did not start can be handed over"),
        ));
    }
    // The key is worked out here, from the spec the run carries, and the
    // figures from its result document.
    let spec = read_spec(run.spec.clone())?;
    run.kind = spec.kind().into();
    run.measurement_key = goodput_archive::measurement_key(&spec, &run.source, run.dest.as_deref());
    if let Some(doc) = &run.result {
        let result: goodput_core::result::TestResult = serde_json::from_value(doc.clone())
            .map_err(|e| bad(format!("run {id}: its result does not read: {e}")))?;
        run.figures = goodput_archive::figures_of(&result);
    }
    in_range(&s, &run, clock::now_ms())?;
    {
        let mut inner = s.lock();
        match inner.book.booked.get(&n) {
            // This host runs it and has begun: its own record stands.
            Some(b) if b.runs_here && b.started => {
                return Err(Failure(
                    StatusCode::CONFLICT,
                    format!("run {id} is under way here"),
                ));
            }
            Some(_) => {
                inner.book.calendar.release(n);
                inner.book.booked.remove(&n);
            }
            None => {}
        }
    }
    s.store_now(std::slice::from_ref(&run)).await.map_err(unstored)?;
    s.note_latest(&run);
    Ok(StatusCode::NO_CONTENT)
}

/// An on-demand run: this agent runs `spec` now, or at the first slot
/// free on both ends within `slip`.
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct OnDemand {
    /// The test (any kind but `server`), with its host filled in: an
    /// address of the mesh (its agent, if it has one, books the slot too).
    spec: serde_json::Value,
    /// The name of that address, as a check (optional).
    #[serde(default)]
    dest: Option<String>,
    /// How late it may start, e.g. `30s` (default 1 minute, at most 1 h).
    #[serde(default)]
    slip: Option<String>,
}

pub(crate) async fn on_demand(
    State(s): State<Ctx>,
    ConnectInfo(Caller(from)): ConnectInfo<Caller>,
    headers: HeaderMap,
    body: Result<Json<OnDemand>, axum::extract::rejection::JsonRejection>,
) -> Result<(StatusCode, Json<serde_json::Value>), Failure> {
    authorise(&s, from.ip(), &headers)?;
    not_an_archive(&s)?;
    archive_has_room(&s)?;
    let Json(q) = body.map_err(|e| unreadable(&e))?;
    let spec = read_spec(q.spec)?;
    let loaded = s.loaded();
    // It tests to an address of the mesh, never elsewhere: its hosts are
    // one configured address, which is its destination.
    let hosts = targets(&spec);
    if hosts.is_empty() {
        return Err(bad("spec: name the host it tests to (an address of the mesh)"));
    }
    let mut names: Vec<String> = Vec::new();
    for h in &hosts {
        let name = loaded
            .name_of_host(h)
            .ok_or_else(|| bad(format!("spec: {h} is not an address of the mesh")))?;
        if !names.contains(&name) {
            names.push(name);
        }
    }
    let [dest] = &names[..] else {
        return Err(bad(format!(
            "spec: its hosts are several addresses ({})",
            names.join(", ")
        )));
    };
    if q.dest.as_ref().is_some_and(|d| d != dest) {
        return Err(bad(format!(
            "dest: the spec tests to {dest}, not {}",
            q.dest.as_deref().unwrap_or("")
        )));
    }
    let dest = dest.clone();
    let slip = match &q.slip {
        None => 60_000,
        Some(t) => duration_ms(t).map_err(|e| bad(format!("slip: {e}")))?,
    };
    if slip > 3_600_000 {
        return Err(bad("slip: at most 1 h"));
    }
    s.options.limits.check_bitrate(&spec).map_err(|e| {
        s.lock().counters.refused += 1;
        Failure(StatusCode::FORBIDDEN, e)
    })?;
    services_only(&s, &loaded, &dest, &spec)?;
    let class = RunClass::of_kind(spec.kind());
    let now = clock::now_ms();
    let duration = goodput_core::mesh::PairTask {
        task: String::new(),
        source: String::new(),
        dest: None,
        dest_has_agent: false,
        lead: Default::default(),
        spec: spec.clone(),
        class,
        repeat: goodput_core::schedule::Repeat::every(0, 0),
        seed: 0,
    }
    .expected_ms();
    {
        let mut inner = s.lock();
        let limits = s.options.limits.clone();
        let who = from.ip().to_canonical();
        // Wherever in its slip it lands, it must be inside the window.
        if let Err(e) = limits
            .check_window(who, now, now.saturating_add(slip).saturating_add(duration), class)
            .and_then(|()| {
                inner
                    .quotas
                    .take(&limits, (who, Bucket::OnDemand), now, class, duration)
            })
        {
            inner.counters.refused += 1;
            return Err(Failure(StatusCode::FORBIDDEN, e));
        }
    }
    let id = format!("on-demand/{}", uuid::Uuid::new_v4());
    let source = loaded
        .mine
        .first()
        .cloned()
        .unwrap_or_else(|| "this-agent".into());
    let pscheduler = loaded.pscheduler_host(&source, &dest, &spec, class, None);
    let p = Planning {
        id: id.clone(),
        task: "on-demand".into(),
        source,
        peer: loaded.peer(&dest),
        pscheduler,
        dest: Some(dest),
        spec,
        class,
        at: now,
        slip,
        duration,
        runs_here: true,
    };
    let placed = plan(&s, p).await;
    // Its record did not reach the archive: it is not run.
    if s.unhold(&id) {
        s.unbook(&id);
        return Err(unstored(s.archive_full().unwrap_or_else(|| {
            format!("the archive could not store run {id}: it was not booked")
        })));
    }
    Ok(match placed {
        Placed::Booked { start, end } => (
            StatusCode::CREATED,
            Json(serde_json::json!({"id": id, "state": "scheduled", "start_ms": start, "end_ms": end})),
        ),
        Placed::NonStart(why) => (
            StatusCode::CREATED,
            Json(serde_json::json!({"id": id, "state": "non_start", "reason": why})),
        ),
        Placed::Known => (
            StatusCode::CONFLICT,
            Json(serde_json::json!({"error": format!("run {id} exists already")})),
        ),
    })
}
