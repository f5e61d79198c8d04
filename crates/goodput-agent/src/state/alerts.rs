//! Soft-failure alerts: every `alerts.every` the rules in force
//! (`goodput_core::alert`) are evaluated over the measurements this agent
//! runs (it is their source, so each measurement is judged by one agent),
//! in each direction they have. A state taken after its hold opens or
//! ends an alert, which is stored in the archive and sent on: to
//! Prometheus Alertmanager (`POST /api/v2/alerts`, every open alert on
//! every evaluation, so Alertmanager keeps it, and once more with its end)
//! and to webhooks (one POST per start and end). Deliveries wait in a
//! bounded queue and are retried with backoff; what is dropped is
//! counted, never silent.
//!
//! The evaluation also leaves the grid's half-cells: each measurement's
//! status per metric family and direction.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use futures_util::{StreamExt, TryStreamExt};

use goodput_archive::{measurement_key, AlertRecord, Metric};
use goodput_core::alert::{median, Direction, Family, Rule, Status, Tracker, Watch};
use goodput_core::mesh::PairTask;
use goodput_core::schedule::Repeat;
use goodput_core::time::ms_rfc3339;
use serde::Serialize;

use crate::clock;
use crate::log::log;
use crate::state::Shared;

/// One half of a grid cell: a measurement's state for one metric family
/// in one direction.
#[derive(Debug, Clone, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub(crate) struct HalfCell {
    /// The task.
    pub(crate) task: String,
    /// Its kind of test.
    pub(crate) kind: String,
    /// The end that runs it.
    pub(crate) source: String,
    /// The other end.
    pub(crate) dest: Option<String>,
    /// The metric family.
    pub(crate) metric: Family,
    /// Which way.
    pub(crate) direction: Direction,
    /// Its state.
    pub(crate) status: Status,
    /// The newest run's value in the window (archive units).
    pub(crate) value: Option<f64>,
    /// That run's start (ms).
    pub(crate) at_ms: Option<u64>,
    /// Why it has this state (the rule and its threshold, or the
    /// maintenance window).
    pub(crate) why: Option<String>,
}

/// Counts of deliveries since start.
#[derive(Debug, Clone, Copy, Default, Serialize, schemars::JsonSchema)]
pub(crate) struct DeliveryCounters {
    /// Waiting in the queue.
    pub(crate) queued: usize,
    /// Accepted by their receiver.
    pub(crate) sent: u64,
    /// Attempts that failed (each is retried until its last).
    pub(crate) failed_attempts: u64,
    /// Given up after every retry.
    pub(crate) given_up: u64,
    /// Dropped from a full queue (the oldest first).
    pub(crate) dropped: u64,
}

/// A POST waiting to go.
struct Outgoing {
    url: String,
    body: serde_json::Value,
    attempts: u32,
    next_ms: u64,
}

/// Key of one tracked state: rule, task, source, destination, direction.
type TrackKey = (String, String, String, Option<String>, Direction);

/// The alerting state.
#[derive(Default)]
pub(crate) struct AlertState {
    trackers: HashMap<TrackKey, Tracker>,
    open: HashMap<TrackKey, AlertRecord>,
    loaded_open: bool,
    /// The last evaluation's half-cells.
    pub(crate) cells: Vec<HalfCell>,
    /// Its rules' legend lines.
    pub(crate) legend: Vec<String>,
    /// When it ran (ms).
    pub(crate) evaluated_ms: u64,
    /// Evaluations since start.
    pub(crate) evaluations: u64,
    /// Why the rules did not read (a configuration that validated but
    /// whose rules fail is not expected; kept for the host page).
    pub(crate) error: Option<String>,
    queue: VecDeque<Outgoing>,
    pub(crate) delivery: DeliveryCounters,
    /// When each peer agent last answered its API (ms), by name.
    peer_answered: HashMap<String, u64>,
}

/// An alert as the API shows it: the stored record, with its rule's
/// thresholds in words.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub(crate) struct AlertView {
    #[serde(flatten)]
    pub(crate) record: AlertRecord,
    /// Its rule's thresholds in words, as the configuration has them now
    /// ("warning when loss is above 0 %, critical when at or above 1 %";
    /// empty for a rule no longer configured).
    pub(crate) thresholds_text: String,
}

/// Alerts with their rules' thresholds in words.
pub(crate) fn with_words(loaded: &crate::state::config::Loaded, records: Vec<AlertRecord>) -> Vec<AlertView> {
    let rules = loaded.config.alerts.rules().unwrap_or_default();
    records
        .into_iter()
        .map(|record| AlertView {
            thresholds_text: rules
                .iter()
                .find(|r| r.name == record.rule)
                .map(Rule::thresholds_text)
                .unwrap_or_default(),
            record,
        })
        .collect()
}

/// Most deliveries waiting; past it the oldest is dropped.
pub(crate) const MAX_QUEUE: usize = 1000;
/// Attempts per delivery.
const ATTEMPTS: u32 = 6;

impl AlertState {
    /// The open alerts.
    pub(crate) fn open(&self) -> Vec<AlertRecord> {
        let mut v: Vec<AlertRecord> = self.open.values().cloned().collect();
        v.sort_by(|a, b| b.start_ms.cmp(&a.start_ms).then(a.id.cmp(&b.id)));
        v
    }

    fn enqueue(&mut self, url: String, body: serde_json::Value, now: u64) {
        if self.queue.len() >= MAX_QUEUE {
            self.queue.pop_front();
            self.delivery.dropped += 1;
        }
        self.queue.push_back(Outgoing {
            url,
            body,
            attempts: 0,
            next_ms: now,
        });
        self.delivery.queued = self.queue.len();
    }
}

/// The time between a task's runs (ms): its `repeat`, or for a cron
/// schedule the gap between its next two runs.
fn interval(r: &Repeat, now: u64) -> u64 {
    match &r.cron {
        None => r.every.max(1),
        Some(c) => {
            let n0 = c.next_at_or_after(now / 60_000).unwrap_or(0);
            r.next(n0).saturating_sub(n0).saturating_mul(60_000).max(60_000)
        }
    }
}

fn metric_of(name: &str) -> Option<Metric> {
    serde_json::from_value(serde_json::Value::String(name.into())).ok()
}

/// An hour (ms): the archive's stored aggregates' step.
const HOUR: u64 = 3_600_000;

/// Runs the evaluations until the agent stops.
pub(crate) async fn evaluator(shared: Arc<Shared>) {
    loop {
        let every = shared.loaded().config.alerts.every_ms().unwrap_or(60_000);
        tokio::select! {
            _ = shared.cancel.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_millis(every)) => {}
        }
        if let Err(e) = evaluate(&shared, clock::now_ms()).await {
            log(&format!("alerts: {e}"));
            shared.alerting().error = Some(e);
        }
    }
}

/// The pair's direction as hosts: (from, to).
fn ends<'a>(source: &'a str, dest: Option<&'a str>, d: Direction) -> (&'a str, &'a str) {
    let dest = dest.unwrap_or("");
    match d {
        Direction::Backward => (dest, source),
        _ => (source, dest),
    }
}

/// What judging one measurement leaves: the states seen, its half-cells
/// and the tracker keys it visited.
#[derive(Default)]
struct Judged {
    seen: Vec<Seen>,
    cells: Vec<CellPart>,
    visited: Vec<TrackKey>,
}

/// A state seen: its tracker, the state, the value, the threshold text,
/// the metric's name and the measurement's key.
type Seen = (TrackKey, Status, Option<f64>, String, String, String);

/// A half-cell before the trackers decide its state: the cell, the
/// trackers of its rules, the no-data tracker, in maintenance, not run,
/// a baseline still forming.
type CellPart = (
    HalfCell,
    Vec<TrackKey>,
    Option<TrackKey>,
    bool,
    bool,
    Option<String>,
);

/// How many measurements are judged at once (each reads the archive).
const JUDGED_AT_ONCE: usize = 8;

/// Every rule over one measurement.
async fn judge(
    shared: &Shared,
    loaded: &crate::state::config::Loaded,
    rules: &[Rule],
    p: &PairTask,
    now: u64,
) -> Result<Judged, String> {
    let section = &loaded.config.alerts;
    let archive = &shared.archive;
    let mut out = Judged::default();
    let Some(task) = loaded.config.tasks.get(&p.task) else {
        return Ok(out);
    };
    let kind = p.spec.kind();
    let key = measurement_key(&p.spec, &p.source, p.dest.as_deref());
    let every = interval(&p.repeat, now);
    let maintenance = section.maintenance_of(&p.source, p.dest.as_deref(), now);
    let covering: Vec<&Rule> = rules
        .iter()
        .filter(|r| r.covers(&p.task, &task.group, &task.test))
        .collect();
    // Every figure's runs over the widest window a rule looks at, in one
    // read (was: one query per rule, metric and direction).
    let widest = covering
        .iter()
        .filter(|r| r.family.is_some_and(|f| f != Family::Path))
        .map(|r| r.window.ms(every).max(every))
        .max();
    let recent = match (widest, maintenance) {
        (Some(w), None) => archive
            .recent(&key, now.saturating_sub(w), now.saturating_add(1))
            .await
            .map_err(|e| e.to_string())?,
        _ => Default::default(),
    };
    // The last finished run: the newest of those, or, with none in the
    // window, asked of the whole archive.
    let last_run = match recent.runs.last() {
        Some((at, _)) => Some(*at),
        None => archive.last_finished(&key).await.map_err(|e| e.to_string())?,
    };
    let tkey = |r: &Rule, d: Direction| {
        (
            r.name.clone(),
            p.task.clone(),
            p.source.clone(),
            p.dest.clone(),
            d,
        )
    };
    // No data: no finished run over the rule's window, once the task
    // and this agent have been about for that long.
    let mut no_data_key = None;
    if let Some(r) = covering.iter().find(|r| r.watch == Watch::NoData) {
        let k = tkey(r, Direction::RoundTrip);
        out.visited.push(k.clone());
        no_data_key = Some(k.clone());
        let window = r.window.ms(every);
        let last = last_run;
        let about = shared.started_ms.max(p.repeat.start);
        let state = match last {
            Some(t) if t.saturating_add(window) >= now => Some(Status::Ok),
            _ if now.saturating_sub(about) < window => None,
            _ => Some(Status::NoData),
        };
        if let (Some(s), None) = (state, maintenance) {
            let last_text = last.map_or("never".into(), ms_rfc3339);
            out.seen.push((
                k,
                s,
                None,
                format!("{} (last finished run: {last_text})", r.legend()),
                "no_data".into(),
                key.clone(),
            ));
        }
    }
    let mut measured_in_week: Option<Vec<Metric>> = None;
    for family in Family::ALL.into_iter().filter(|f| f.measured_by(kind)) {
        for &d in family.directions() {
            let Some(metric) = family.archive_metric(d).and_then(metric_of) else {
                continue;
            };
            let mut newest: Option<(u64, f64)> = None;
            let mut keys = Vec::new();
            let mut forming: Option<String> = None;
            for r in covering.iter().filter(|r| r.family == Some(family)) {
                let k = tkey(r, d);
                out.visited.push(k.clone());
                keys.push(k.clone());
                if maintenance.is_some() {
                    continue;
                }
                // At least the task's repeat interval: every
                // evaluation sees the latest run.
                let window = r.window.ms(every).max(every);
                let from = now.saturating_sub(window);
                let value = if family == Family::Path {
                    let h = archive
                        .paths(&key, from, now.saturating_add(1))
                        .await
                        .map_err(|e| e.to_string())?;
                    if let Some(p) = h.paths.iter().max_by_key(|p| p.last_ms) {
                        if newest.is_none_or(|(t, _)| p.last_ms >= t) {
                            newest = Some((p.last_ms, h.changes as f64));
                        }
                    }
                    (h.runs > 0).then_some(h.changes as f64)
                } else {
                    let points = recent.series(metric, from, now.saturating_add(1));
                    if let Some(p) = points.last() {
                        if newest.is_none_or(|(t, _)| p.at_ms >= t) {
                            newest = Some((p.at_ms, p.mean));
                        }
                    }
                    let values: Vec<f64> = points.iter().map(|p| p.mean).collect();
                    r.statistic.of(&values)
                };
                let Some(v) = value else {
                    continue;
                };
                let baseline = if r.relative() {
                    let (b, runs) =
                        baseline(archive, &key, metric, now.saturating_sub(r.baseline_ms), now).await?;
                    // One or two runs of a new mesh are no pair's usual:
                    // nothing is judged against them.
                    if runs < u64::from(r.baseline_runs) {
                        forming = Some(format!(
                            "{}: baseline forming ({runs} of {} runs)",
                            r.name, r.baseline_runs
                        ));
                        continue;
                    }
                    b
                } else {
                    None
                };
                let Some(state) = r.judge(v, baseline) else {
                    continue;
                };
                let unit = family.unit();
                let mut text = format!("{} = {}", r.name, unit.show(v));
                if family == Family::Path {
                    text = format!("{}: {v} path changes", r.name);
                }
                if let Some(b) = baseline {
                    text.push_str(&format!(", baseline {}", unit.show(b)));
                }
                if let Some(t) = r.passed_text(state) {
                    text.push_str(&format!(" ({t})"));
                }
                out.seen
                    .push((k, state, Some(v), text, family.name().into(), key.clone()));
            }
            // A direction (or figure) this test has not measured in a
            // week, though it ran: not run, rather than no data.
            let mut not_run = false;
            if newest.is_none() && maintenance.is_none() {
                if let Some(last) = last_run {
                    const WEEK: u64 = 7 * 86_400_000;
                    // The metrics measured over the week, read once for
                    // all the directions that need them.
                    if measured_in_week.is_none() {
                        let from = now.saturating_sub(WEEK) / HOUR * HOUR;
                        let to = (now / HOUR + 1) * HOUR;
                        measured_in_week = Some(
                            archive
                                .metrics_measured(&key, from, to)
                                .await
                                .map_err(|e| e.to_string())?,
                        );
                    }
                    let any = measured_in_week.as_ref().is_some_and(|m| m.contains(&metric));
                    not_run = !any && last.saturating_add(WEEK) > now;
                }
            }
            out.cells.push((
                HalfCell {
                    task: p.task.clone(),
                    kind: kind.into(),
                    source: p.source.clone(),
                    dest: p.dest.clone(),
                    metric: family,
                    direction: d,
                    status: Status::Ok,
                    value: newest.map(|n| n.1),
                    at_ms: newest.map(|n| n.0),
                    why: maintenance.map(|m| {
                        format!(
                            "maintenance until {}{}",
                            m.end,
                            if m.reason.is_empty() {
                                String::new()
                            } else {
                                format!(": {}", m.reason)
                            }
                        )
                    }),
                },
                keys,
                no_data_key.clone(),
                maintenance.is_some(),
                not_run,
                forming,
            ));
        }
    }
    Ok(out)
}

/// One evaluation: every rule over every measurement this agent runs.
pub(crate) async fn evaluate(shared: &Shared, now: u64) -> Result<(), String> {
    let loaded = shared.loaded();
    let section = &loaded.config.alerts;
    let rules = section.rules().map_err(|e| e.to_string())?;
    let archive = &shared.archive;
    let first = !shared.alerting().loaded_open;
    if first {
        // Alerts open when the agent stopped go on from their state.
        let open = archive
            .alerts(true, 0, u64::MAX, 100_000)
            .await
            .map_err(|e| e.to_string())?;
        let mut st = shared.alerting();
        for a in open {
            let d = match a.direction.as_str() {
                "forward" => Direction::Forward,
                "backward" => Direction::Backward,
                _ => Direction::RoundTrip,
            };
            let status = match a.severity.as_str() {
                "critical" => Status::Critical,
                "warning" => Status::Warning,
                _ => Status::NoData,
            };
            let key = (
                a.rule.clone(),
                a.task.clone(),
                a.source.clone(),
                a.dest.clone(),
                d,
            );
            st.trackers.insert(key.clone(), Tracker::new(status));
            st.open.insert(key, a);
        }
        st.loaded_open = true;
    }
    let mine: Vec<&PairTask> = loaded
        .pairs
        .iter()
        .filter(|p| shared.speaks_for(&loaded, &p.source))
        .collect();
    // (key, state seen, value, threshold text) for each tracked state;
    // and the cells.
    let mut seen: Vec<Seen> = Vec::new();
    let mut cells: Vec<CellPart> = Vec::new();
    let mut visited: HashSet<TrackKey> = HashSet::new();
    let began = std::time::Instant::now();
    // (By index: a closure over references trips the spawned task's Send
    // check.)
    let judged: Vec<Judged> = futures_util::stream::iter(0..mine.len())
        .map(|i| judge(shared, &loaded, &rules, mine[i], now))
        .buffered(JUDGED_AT_ONCE)
        .try_collect()
        .await?;
    for j in judged {
        seen.extend(j.seen);
        cells.extend(j.cells);
        visited.extend(j.visited);
    }
    if let Some(r) = rules.iter().find(|r| r.watch == Watch::AgentUnreachable) {
        let j = peers_answer(shared, &loaded, r, now).await;
        seen.extend(j.seen);
        visited.extend(j.visited);
    }
    // Take the states, open and end alerts.
    let mut stored = Vec::new();
    let mut ended = Vec::new();
    let mut started = Vec::new();
    let agent = loaded.mine.first().cloned().unwrap_or_default();
    {
        let mut st = shared.alerting();
        for (k, state, value, text, metric, mkey) in seen {
            let hold = rules.iter().find(|r| r.name == k.0).map_or(1, |r| r.hold);
            let change = st
                .trackers
                .entry(k.clone())
                .or_insert_with(|| Tracker::new(Status::Ok))
                .observe(state, hold);
            let current = st.trackers[&k].current;
            if let Some(open) = st.open.get_mut(&k) {
                open.updated_ms = now;
                // The latest value while the state holds.
                if state == current {
                    open.value = value.or(open.value);
                    open.threshold = text.clone();
                }
                stored.push(open.clone());
            }
            let Some((from, to)) = change else {
                continue;
            };
            if from.alerting() {
                if let Some(mut a) = st.open.remove(&k) {
                    a.end_ms = Some(now);
                    a.updated_ms = now;
                    ended.push(a.clone());
                    stored.push(a);
                }
            }
            if to.alerting() {
                let a = AlertRecord {
                    id: format!(
                        "{}/{}/{}/{}/{}/{now}",
                        k.0,
                        k.1,
                        k.2,
                        k.3.as_deref().unwrap_or("-"),
                        k.4.name()
                    ),
                    rule: k.0.clone(),
                    task: k.1.clone(),
                    source: k.2.clone(),
                    dest: k.3.clone(),
                    direction: k.4.name().into(),
                    metric,
                    severity: to.name().into(),
                    value,
                    threshold: text,
                    measurement_key: mkey,
                    start_ms: now,
                    updated_ms: now,
                    end_ms: None,
                };
                started.push(a.clone());
                stored.push(a.clone());
                st.open.insert(k, a);
            }
        }
        // Alerts of rules or measurements no longer in the configuration end.
        let gone: Vec<TrackKey> = st
            .open
            .keys()
            .filter(|k| !visited.contains(*k))
            .cloned()
            .collect();
        for k in gone {
            st.trackers.remove(&k);
            if let Some(mut a) = st.open.remove(&k) {
                a.end_ms = Some(now);
                a.updated_ms = now;
                ended.push(a.clone());
                stored.push(a);
            }
        }
        st.trackers.retain(|k, _| visited.contains(k));
        // The cells: the worst state taken by the family's rules; no data
        // before any rule has had a value, or when the no-data rule says so.
        st.cells = cells
            .into_iter()
            .map(|(mut c, keys, nd, maintenance, not_run, forming)| {
                if maintenance {
                    c.status = Status::Maintenance;
                    return c;
                }
                if not_run {
                    c.status = Status::NotRun;
                    c.why = Some("this test has not measured it in the last 7 days".into());
                    return c;
                }
                let taken: Vec<(Status, &TrackKey)> = keys
                    .iter()
                    .filter_map(|k| st.trackers.get(k).map(|t| (t.current, k)))
                    .collect();
                let mut status = if taken.is_empty() {
                    Status::NoData
                } else {
                    Status::Ok
                };
                let mut why = None;
                for (s, k) in &taken {
                    if *s > status {
                        status = *s;
                        why = st.open.get(*k).map(|a| a.threshold.clone());
                    }
                }
                if let Some(ndk) = nd.as_ref() {
                    if st.trackers.get(ndk).is_some_and(|t| t.current == Status::NoData)
                        && status < Status::NoData
                    {
                        status = Status::NoData;
                        why = st.open.get(ndk).map(|a| a.threshold.clone());
                    }
                }
                // A baseline still forming leaves the cell with its value
                // and says why no rule judges it yet.
                if let (Some(f), true) = (&forming, why.is_none() && c.value.is_some()) {
                    if status == Status::NoData {
                        status = Status::Ok;
                    }
                    why = Some(f.clone());
                }
                if status == Status::NoData && why.is_none() {
                    why = Some("no result in the window yet".into());
                }
                c.status = status;
                c.why = why;
                c
            })
            .collect();
        st.legend = rules.iter().map(Rule::legend).collect();
        st.evaluated_ms = now;
        st.evaluations += 1;
        st.error = None;
        // Deliveries.
        let words = |rule: &str| {
            rules
                .iter()
                .find(|r| r.name == rule)
                .map(Rule::thresholds_text)
                .unwrap_or_default()
        };
        let silenced = |a: &AlertRecord| {
            section
                .maintenance_of(&a.source, a.dest.as_deref(), now)
                .is_some()
        };
        for r in &section.send_to {
            if let Some(url) = &r.alertmanager {
                let firing: Vec<&AlertRecord> = st.open.values().filter(|a| !silenced(a)).collect();
                let batch: Vec<serde_json::Value> = firing
                    .into_iter()
                    .chain(ended.iter())
                    .map(|a| alertmanager_alert(a, &agent, &words(&a.rule)))
                    .collect();
                if !batch.is_empty() {
                    let url = format!("{}/api/v2/alerts", url.trim_end_matches('/'));
                    st.enqueue(url, serde_json::Value::Array(batch), now);
                }
            }
            if let Some(url) = &r.webhook {
                for (event, a) in started
                    .iter()
                    .map(|a| ("start", a))
                    .chain(ended.iter().map(|a| ("end", a)))
                {
                    let body = serde_json::json!({
                        "event": event,
                        "agent": agent,
                        "alert": AlertView { record: a.clone(), thresholds_text: words(&a.rule) },
                    });
                    st.enqueue(url.clone(), body, now);
                }
            }
        }
    }
    let judging = began.elapsed();
    if !stored.is_empty() {
        archive.put_alerts(&stored).await.map_err(|e| e.to_string())?;
    }
    // A slow evaluation is said, with where its time went: the next one
    // starts `alerts.every` after it ends.
    let took = began.elapsed();
    if took > Duration::from_secs(10) {
        log(&format!(
            "alerts: evaluated {} measurements in {:.1} s ({:.1} s judging them, {:.1} s storing {} alerts)",
            mine.len(),
            took.as_secs_f64(),
            judging.as_secs_f64(),
            (took - judging).as_secs_f64(),
            stored.len()
        ));
    }
    for a in &started {
        log(&format!(
            "alert {}: {} {} {} ({})",
            a.severity,
            a.metric,
            a.direction,
            pair_text(a),
            a.threshold
        ));
    }
    for a in &ended {
        log(&format!(
            "alert ended: {} {} {} {}",
            a.severity,
            a.metric,
            a.direction,
            pair_text(a)
        ));
    }
    shared.wake_delivery.notify_one();
    Ok(())
}

/// How long one peer's answer is waited for.
const PEER_ANSWER: Duration = Duration::from_secs(3);

/// The agent-unreachable rule: every peer agent this one runs tests with
/// (a pair it leads, or one led toward it) is asked for its health; one
/// that has not answered for the rule's window (since this agent started,
/// for one never heard) is critical.
async fn peers_answer(
    shared: &Shared,
    loaded: &crate::state::config::Loaded,
    rule: &Rule,
    now: u64,
) -> Judged {
    let mut out = Judged::default();
    let agent = loaded.mine.first().cloned().unwrap_or_default();
    // Each peer and the tasks shared with it.
    let mut peers: std::collections::BTreeMap<String, (crate::state::config::Peer, Vec<String>)> =
        std::collections::BTreeMap::new();
    for p in &loaded.pairs {
        let Some(dest) = p.dest.as_deref() else {
            continue;
        };
        let mine = |n: &str| loaded.mine.iter().any(|m| m == n);
        let other = match (mine(&p.source), mine(dest)) {
            (true, false) => dest,
            (false, true) => p.source.as_str(),
            _ => continue,
        };
        let Some(peer) = loaded.peer(other) else {
            continue;
        };
        let e = peers
            .entry(other.to_owned())
            .or_insert_with(|| (peer, Vec::new()));
        if !e.1.contains(&p.task) {
            e.1.push(p.task.clone());
        }
    }
    let asked = futures_util::future::join_all(peers.values().map(|(peer, _)| async move {
        let url = format!("{}/api/v1/health", peer.url);
        let answer = tokio::time::timeout(
            PEER_ANSWER,
            shared.client(peer).get(&url).timeout(PEER_ANSWER).send(),
        )
        .await;
        // Any HTTP answer, even a refusal, is an agent that is up.
        match answer {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(root_cause(&e)),
            Err(_) => Err(format!("no answer in {} s", PEER_ANSWER.as_secs())),
        }
    }))
    .await;
    let window = rule.window.ms(60_000);
    let mut st = shared.alerting();
    st.peer_answered.retain(|name, _| peers.contains_key(name));
    for ((name, (_, tasks)), answer) in peers.iter().zip(asked) {
        let last = *st.peer_answered.entry(name.clone()).or_insert(shared.started_ms);
        let last = match &answer {
            Ok(()) => {
                st.peer_answered.insert(name.clone(), now);
                now
            }
            Err(_) => last,
        };
        let k = (
            rule.name.clone(),
            tasks.join(", "),
            agent.clone(),
            Some(name.clone()),
            Direction::RoundTrip,
        );
        out.visited.push(k.clone());
        if loaded
            .config
            .alerts
            .maintenance_of(&agent, Some(name), now)
            .is_some()
        {
            continue;
        }
        let silent = now.saturating_sub(last);
        let (state, text) = match answer {
            Ok(()) => (Status::Ok, format!("the agent at {name} answers")),
            Err(_) if silent < window => continue,
            Err(e) => (
                Status::Critical,
                format!(
                    "the agent at {name} has not answered for {} s (since {}): {e}; {}",
                    silent / 1000,
                    ms_rfc3339(last),
                    rule.thresholds_text()
                ),
            ),
        };
        out.seen.push((
            k,
            state,
            Some(silent as f64 / 1000.0),
            text,
            rule.name.clone(),
            String::new(),
        ));
    }
    out
}

/// The innermost cause of an HTTP error ("Connection refused").
fn root_cause(e: &reqwest::Error) -> String {
    let mut s: &dyn std::error::Error = e;
    while let Some(inner) = s.source() {
        s = inner;
    }
    s.to_string()
}

fn pair_text(a: &AlertRecord) -> String {
    format!("{} → {}", a.source, a.dest.as_deref().unwrap_or("-"))
}

/// The median of a measurement's runs over a window (per run for a short
/// history, per hour, the stored aggregates, once there are a day's) and
/// how many runs it is made of.
async fn baseline(
    archive: &goodput_archive::Archive,
    key: &str,
    metric: Metric,
    from: u64,
    to: u64,
) -> Result<(Option<f64>, u64), String> {
    let hourly = archive
        .series(
            key,
            metric,
            from / HOUR * HOUR,
            (to / HOUR + 1) * HOUR,
            Some(HOUR),
        )
        .await
        .map_err(|e| e.to_string())?;
    let points = if hourly.len() >= 24 {
        hourly
    } else {
        archive
            .series(key, metric, from, to.saturating_add(1), None)
            .await
            .map_err(|e| e.to_string())?
    };
    let runs = points.iter().fold(0u64, |n, p| n.saturating_add(p.count));
    let values: Vec<f64> = points.iter().map(|p| p.mean).collect();
    Ok((
        (!values.is_empty())
            .then(|| median(&values))
            .filter(|m| m.is_finite()),
        runs,
    ))
}

/// An alert as Alertmanager's API v2 takes it.
fn alertmanager_alert(a: &AlertRecord, agent: &str, thresholds: &str) -> serde_json::Value {
    let d = match a.direction.as_str() {
        "backward" => Direction::Backward,
        "forward" => Direction::Forward,
        _ => Direction::RoundTrip,
    };
    let (from, to) = ends(&a.source, a.dest.as_deref(), d);
    let mut v = serde_json::json!({
        "labels": {
            "alertname": format!("goodput_{}", a.metric),
            "severity": a.severity,
            "rule": a.rule,
            "task": a.task,
            "source": a.source,
            "dest": a.dest.clone().unwrap_or_default(),
            "direction": a.direction,
            "from": from,
            "to": to,
            "agent": agent,
        },
        "annotations": {
            "summary": format!("{} {} {} → {}", a.metric, a.severity, from, to),
            "description": a.threshold,
            "thresholds": thresholds,
            "value": a.value.map(|v| v.to_string()).unwrap_or_default(),
        },
        "startsAt": ms_rfc3339(a.start_ms),
    });
    if let Some(end) = a.end_ms {
        v["endsAt"] = serde_json::Value::String(ms_rfc3339(end));
    }
    v
}

/// Sends the queued deliveries until the agent stops: each POST in
/// order of its next try, a failed one again after 1, 2, 4, 8 and 16 s
/// (with up to a quarter more at random), then given up and counted.
pub(crate) async fn deliverer(shared: Arc<Shared>) {
    let client = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(3))
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap_or_default();
    loop {
        let now = clock::now_ms();
        let next = {
            let mut st = shared.alerting();
            let due = st.queue.iter().position(|o| o.next_ms <= now);
            due.and_then(|i| st.queue.remove(i))
        };
        let Some(mut out) = next else {
            let wait = shared
                .alerting()
                .queue
                .iter()
                .map(|o| o.next_ms.saturating_sub(now))
                .min()
                .unwrap_or(60_000)
                .clamp(10, 60_000);
            tokio::select! {
                _ = shared.cancel.cancelled() => return,
                _ = shared.wake_delivery.notified() => {}
                _ = tokio::time::sleep(Duration::from_millis(wait)) => {}
            }
            continue;
        };
        let result = client.post(&out.url).json(&out.body).send().await;
        let ok = match result {
            Ok(r) if r.status().is_success() => Ok(()),
            Ok(r) => Err(format!("HTTP {}", r.status())),
            Err(e) => Err(e.to_string()),
        };
        let mut st = shared.alerting();
        match ok {
            Ok(()) => st.delivery.sent += 1,
            Err(e) => {
                st.delivery.failed_attempts += 1;
                out.attempts += 1;
                if out.attempts >= ATTEMPTS {
                    st.delivery.given_up += 1;
                    drop(st);
                    log(&format!(
                        "alerts: gave up sending to {} after {ATTEMPTS} attempts: {e}",
                        out.url
                    ));
                    // One lock at a time: the mutex is not reentrant.
                    let mut st = shared.alerting();
                    st.delivery.queued = st.queue.len();
                    continue;
                }
                let backoff = 1000u64 << (out.attempts - 1).min(10);
                let jitter = goodput_core::schedule::mix(now ^ u64::from(out.attempts)) % (backoff / 4 + 1);
                out.next_ms = clock::now_ms().saturating_add(backoff + jitter);
                if st.queue.len() >= MAX_QUEUE {
                    st.delivery.dropped += 1;
                } else {
                    st.queue.push_back(out);
                }
            }
        }
        st.delivery.queued = st.queue.len();
    }
}
