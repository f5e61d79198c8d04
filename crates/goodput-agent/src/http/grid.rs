//! The grid: each measurement's state per metric family and direction,
//! this agent's merged with the other agents' (the JSON view and the
//! dashboard's).

use axum::extract::{Query, State};
use axum::Json;
use goodput_core::time::ms_rfc3339;
use serde::{Deserialize, Serialize};

use goodput_core::alert::Family;

use super::{bad, Ctx, Failure};

#[derive(Deserialize)]
pub(crate) struct GridQuery {
    metric: Option<String>,
    /// `local`: only this agent's measurements (what peers ask each other).
    scope: Option<String>,
}

/// An agent asked for its half of the grid.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub(crate) struct AgentSeen {
    /// Its address name.
    pub(crate) name: String,
    /// Whether it answered.
    pub(crate) answered: bool,
    /// Why not.
    pub(crate) error: Option<String>,
    /// When its rules were last evaluated (ms; 0: not yet).
    pub(crate) evaluated_ms: u64,
}

/// The grid of one metric: each measurement's state in each direction,
/// from this agent's evaluation and (unless `scope=local`) every other
/// agent's of the mesh.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub(crate) struct GridView {
    /// The metric family.
    pub(crate) metric: goodput_core::alert::Family,
    /// Rows and columns: the address names of the pairs measuring it.
    pub(crate) hosts: Vec<String>,
    /// Every half-cell: one measurement's state in one direction.
    pub(crate) cells: Vec<GridCell>,
    /// Every direction once (what the dashboard draws): the half-cells
    /// of every measurement of it merged, a direction measured by both
    /// ends (or by two tasks) with one state and one colour.
    pub(crate) directions: Vec<DirectionCell>,
    /// The rules' thresholds, one line each.
    pub(crate) legend: Vec<String>,
    /// The agents asked.
    pub(crate) agents: Vec<AgentSeen>,
}

/// One measurement's state in one direction (an alert evaluation's
/// half-cell), with the value scale's judgement of its latest value.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub(crate) struct GridCell {
    #[serde(flatten)]
    pub(crate) cell: crate::state::alerts::HalfCell,
    /// The latest value on the family's scale (see [`scale_legend`]),
    /// when it is recent (within three repeat intervals).
    #[serde(default)]
    pub(crate) level: Option<Level>,
    /// The pair's own usual value (the median of the last week's runs,
    /// archive units) that relative scales compare with: none before
    /// [`MIN_BASELINE_RUNS`] runs.
    #[serde(default)]
    pub(crate) baseline: Option<f64>,
}

/// A value's place on its family's scale.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Level {
    /// As good as the pair usually is, or better than the fixed band.
    Good,
    /// Somewhat worse.
    Fair,
    /// Much worse.
    Poor,
}

impl Level {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Level::Good => "good",
            Level::Fair => "fair",
            Level::Poor => "poor",
        }
    }
}

/// One direction between two hosts (or one host's round trip toward
/// another), as the grid draws it: every measurement of it merged.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub(crate) struct DirectionCell {
    /// Where the packets go from (for a round trip: the end that runs it).
    pub(crate) from: String,
    /// Where they go to.
    pub(crate) to: String,
    /// A round trip's (or a trace's) figure, not one direction's.
    pub(crate) round_trip: bool,
    /// The worst state of its measurements (one that no rule judged but
    /// has a recent value counts as OK, coloured by its level).
    pub(crate) status: goodput_core::alert::Status,
    /// The direction, relative to its measurement, of the half-cell whose
    /// state it shows.
    pub(crate) direction: goodput_core::alert::Direction,
    /// When that state is OK: the worst level of their latest values.
    pub(crate) level: Option<Level>,
    /// The newest value of them (archive units).
    pub(crate) value: Option<f64>,
    /// Its run's start (ms).
    pub(crate) at_ms: Option<u64>,
    /// Why it has this state.
    pub(crate) why: Option<String>,
    /// The measurements behind it: indexes into `cells`.
    pub(crate) cells: Vec<usize>,
}

/// Runs a baseline needs: fewer, and a relative scale says nothing.
pub(crate) const MIN_BASELINE_RUNS: usize = 3;

/// The fallback reason a no-data cell carries when no rule had a value.
const NO_RESULT: &str = "no result in the window yet";

/// A family judged against fixed bounds, the same for every pair (the
/// others are judged against the pair's own baseline): a value is good
/// below `good` (at or above it where `higher_is_better`), fair below
/// `fair`, else poor; `band` says so in a cell's few words, `legend` in
/// the grid's legend.
struct Fixed {
    good: f64,
    fair: f64,
    higher_is_better: bool,
    band: &'static str,
    legend: &'static str,
}

/// The bounds of a family judged against fixed bounds; `None` for those
/// judged against the pair's baseline.
fn fixed(family: Family) -> Option<Fixed> {
    let (good, fair, higher_is_better, band, legend) = match family {
        Family::Loss => (
            0.1,
            2.0,
            false,
            "loss below 0.1 % good, below 2 % fair",
            "loss below 0.1 % is good, below 2 % fair, 2 % and more poor",
        ),
        Family::Jitter => (
            2_000.0,
            10_000.0,
            false,
            "jitter below 2 ms good, below 10 ms fair",
            "jitter below 2 ms is good, below 10 ms fair, 10 ms and more poor",
        ),
        Family::Path => (
            0.5,
            1.5,
            false,
            "no path change in a day good, one fair",
            "no path change in the last day is good, one fair, more poor",
        ),
        Family::Errors => (
            0.5,
            1.5,
            false,
            "no failure good, one fair",
            "no failure in a run is good, one fair, more poor",
        ),
        Family::Certificate => (
            30.0,
            7.0,
            true,
            "30 days or more before the certificate expires good, 7 fair",
            "a certificate 30 days or more from expiring is good, 7 days or more fair, less poor",
        ),
        Family::Throughput | Family::Delay | Family::OneWayDelay => return None,
    };
    Some(Fixed {
        good,
        fair,
        higher_is_better,
        band,
        legend,
    })
}

/// A value's level on its family's scale (archive units: bit/s, %,
/// µs, path changes), and the band in words.
pub(crate) fn level_of(family: Family, v: f64, baseline: Option<f64>) -> (Level, String) {
    let pick = |good: bool, fair: bool| {
        if good {
            Level::Good
        } else if fair {
            Level::Fair
        } else {
            Level::Poor
        }
    };
    if let Some(f) = fixed(family) {
        let level = if f.higher_is_better {
            pick(v >= f.good, v >= f.fair)
        } else {
            pick(v < f.good, v < f.fair)
        };
        return (level, f.band.into());
    }
    match family {
        Family::Throughput => match baseline.filter(|b| *b > 0.0) {
            None => (Level::Good, "no baseline yet".into()),
            Some(b) => (
                pick(v >= 0.8 * b, v >= 0.5 * b),
                format!("{} of its usual {}", percent(v / b), short(family, b)),
            ),
        },
        _ => match baseline {
            None => (Level::Good, "no baseline yet".into()),
            Some(b) => (
                pick(v <= 1.2 * b + 1_000.0, v <= 2.0 * b + 5_000.0),
                format!("its usual {}", short(family, b)),
            ),
        },
    }
}

fn percent(r: f64) -> String {
    format!("{:.0} %", (r * 100.0).clamp(0.0, 1e6))
}

/// The scale in one line, for the grid's legend.
pub(crate) fn scale_legend(family: Family) -> &'static str {
    if let Some(f) = fixed(family) {
        return f.legend;
    }
    if family == Family::Throughput {
        "throughput at 80 % of the pair's usual (its last week's median) or more is good, 50 % fair, less poor"
    } else {
        "delay within 1.2 × the pair's usual (its last week's median) + 1 ms is good, 2 × + 5 ms fair, more poor"
    }
}

/// A value in few characters, with its unit (archive units in).
pub(crate) fn short(family: Family, v: f64) -> String {
    if !v.is_finite() {
        return "?".into();
    }
    match family {
        Family::Throughput => {
            let (x, u) = if v >= 1e9 {
                (v / 1e9, "Gbit/s")
            } else if v >= 1e6 {
                (v / 1e6, "Mbit/s")
            } else if v >= 1e3 {
                (v / 1e3, "kbit/s")
            } else {
                (v, "bit/s")
            };
            format!("{} {u}", digits(x))
        }
        Family::Loss => {
            if v == 0.0 {
                "0 %".into()
            } else if v < 0.1 {
                format!("{v:.2} %")
            } else {
                format!("{} %", digits(v))
            }
        }
        Family::Delay | Family::OneWayDelay | Family::Jitter => {
            if v.abs() >= 1_000.0 {
                format!("{} ms", digits(v / 1_000.0))
            } else {
                format!("{} µs", digits(v))
            }
        }
        Family::Path => {
            let n = v.round().clamp(0.0, 1e9) as u64;
            format!("{n} change{}", if n == 1 { "" } else { "s" })
        }
        Family::Errors => {
            let n = v.round().clamp(0.0, 1e15) as u64;
            format!("{n} failure{}", if n == 1 { "" } else { "s" })
        }
        Family::Certificate => format!("{} d", digits(v)),
    }
}

/// Three significant digits at most, no trailing zeros past the point.
fn digits(x: f64) -> String {
    let t = if x.abs() >= 100.0 {
        format!("{x:.0}")
    } else if x.abs() >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    };
    if t.contains('.') {
        t.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        t
    }
}

/// [`read_values`] once per evaluation and family: the same grid asked
/// again (a page, its refresh, another agent) reads nothing more.
async fn kept_values(
    s: &Ctx,
    loaded: &crate::state::config::Loaded,
    family: Family,
    cells: Vec<crate::state::alerts::HalfCell>,
    evaluated: u64,
) -> Vec<GridCell> {
    type Kept = std::collections::HashMap<(usize, Family), (u64, u64, Vec<GridCell>)>;
    static KEPT: std::sync::OnceLock<std::sync::Mutex<Kept>> = std::sync::OnceLock::new();
    let kept = KEPT.get_or_init(Default::default);
    // This agent's state (a process may hold several in tests), and the
    // configuration it was read under.
    let id = (std::sync::Arc::as_ptr(s) as usize, family);
    if evaluated > 0 {
        if let Some((_, _, v)) = kept.lock().ok().and_then(|k| {
            k.get(&id)
                .filter(|(e, l, _)| *e == evaluated && *l == loaded.loaded_ms)
                .cloned()
        }) {
            return v;
        }
    }
    let v = read_values(s, loaded, family, cells).await;
    if evaluated > 0 {
        if let Ok(mut k) = kept.lock() {
            // One entry per agent state and family: a handful.
            if k.len() > 64 {
                k.clear();
            }
            k.insert(id, (evaluated, loaded.loaded_ms, v.clone()));
        }
    }
    v
}

/// This agent's half-cells with their latest values and levels from the
/// archive, and a non-start's reason where no value is recent.
async fn read_values(
    s: &Ctx,
    loaded: &crate::state::config::Loaded,
    family: Family,
    cells: Vec<crate::state::alerts::HalfCell>,
) -> Vec<GridCell> {
    use futures_util::StreamExt as _;
    let now = crate::clock::now_ms();
    // Each measurement once (its index in the mesh's pairs), with its
    // cells.
    let mut groups: Vec<(usize, Vec<crate::state::alerts::HalfCell>)> = Vec::new();
    let mut rest = Vec::new();
    for c in cells {
        let p = loaded
            .pairs
            .iter()
            .position(|p| p.task == c.task && p.source == c.source && p.dest == c.dest);
        match p {
            Some(p) if family.measured_by(loaded.pairs[p].spec.kind()) => {
                match groups.iter_mut().find(|(q, _)| *q == p) {
                    Some((_, v)) => v.push(c),
                    None => groups.push((p, vec![c])),
                }
            }
            _ => rest.push(GridCell {
                cell: c,
                level: None,
                baseline: None,
            }),
        }
    }
    let archive = &s.archive;
    let fates = fates(archive, now).await;
    let mut all: Vec<GridCell> = futures_util::stream::iter(groups)
        .map(|(i, cells)| read_measurement(archive, family, now, &loaded.pairs[i], cells, &fates))
        .buffered(8)
        .collect::<Vec<Vec<GridCell>>>()
        .await
        .into_iter()
        .flatten()
        .collect();
    all.extend(rest);
    all
}

/// Each measurement's newest run of the last day that failed or did
/// not start, by task, source and destination.
type Fates = std::collections::HashMap<(String, String, Option<String>), goodput_archive::Run>;

/// The last day's failed runs and non-starts (three reads for the whole
/// grid, not one per measurement).
async fn fates(archive: &goodput_archive::Archive, now: u64) -> Fates {
    use goodput_archive::RunState;
    let mut out = Fates::new();
    for state in [RunState::NonStart, RunState::Missed, RunState::Failed] {
        let f = goodput_archive::RunFilter {
            state: Some(state),
            from_ms: Some(now.saturating_sub(86_400_000)),
            limit: 5_000,
            ..goodput_archive::RunFilter::default()
        };
        for r in archive.runs(&f).await.unwrap_or_default() {
            let k = (r.task.clone(), r.source.clone(), r.dest.clone());
            if out.get(&k).is_none_or(|o| o.scheduled_ms < r.scheduled_ms) {
                out.insert(k, r);
            }
        }
    }
    out
}

/// How long a baseline read from the archive is used again.
const BASELINE_KEPT_MS: u64 = 10 * 60_000;

/// Most baselines kept (past it, all are dropped and read again).
const MAX_BASELINES: usize = 100_000;

/// A measurement's usual value of a metric: the median of its hourly
/// means over the last week (the archive's stored aggregates), once it
/// has [`MIN_BASELINE_RUNS`] runs; kept [`BASELINE_KEPT_MS`].
async fn baseline_of(
    archive: &goodput_archive::Archive,
    key: &str,
    metric: goodput_archive::Metric,
    now: u64,
) -> Option<f64> {
    type Kept = std::collections::HashMap<(String, usize), (u64, Option<f64>)>;
    static KEPT: std::sync::OnceLock<std::sync::Mutex<Kept>> = std::sync::OnceLock::new();
    let kept = KEPT.get_or_init(Default::default);
    let id = (key.to_owned(), metric.index());
    if let Some((at, b)) = kept.lock().ok().and_then(|k| k.get(&id).copied()) {
        if at.saturating_add(BASELINE_KEPT_MS) > now {
            return b;
        }
    }
    let to = (now / HOUR + 1) * HOUR;
    let from = to.saturating_sub(WEEK);
    let b = match archive.series(key, metric, from, to, Some(HOUR)).await {
        Ok(pts) if pts.iter().map(|p| p.count).sum::<u64>() >= MIN_BASELINE_RUNS as u64 => {
            let means: Vec<f64> = pts.iter().map(|p| p.mean).collect();
            Some(goodput_core::alert::median(&means)).filter(|m| m.is_finite())
        }
        Ok(_) => None,
        // Not kept: asked again next time.
        Err(_) => return None,
    };
    if let Ok(mut k) = kept.lock() {
        if k.len() >= MAX_BASELINES {
            k.clear();
        }
        k.insert(id, (now, b));
    }
    b
}

/// One measurement's cells with their values read from the archive (see
/// [`read_values`]).
async fn read_measurement(
    archive: &goodput_archive::Archive,
    family: Family,
    now: u64,
    p: &goodput_core::mesh::PairTask,
    cells: Vec<crate::state::alerts::HalfCell>,
    fates: &Fates,
) -> Vec<GridCell> {
    use goodput_core::alert::Status;
    let key = goodput_archive::measurement_key(&p.spec, &p.source, p.dest.as_deref());
    let every = if p.repeat.cron.is_some() {
        HOUR
    } else {
        p.repeat.every.max(1_000)
    };
    let fresh_ms = every.saturating_mul(3);
    let since = now.saturating_sub(fresh_ms);
    // Read only what the evaluation did not give: the recent runs where a
    // cell has no value (no rule watches it), once; a relative scale's
    // baseline (cached a while: it moves slowly).
    let mut recent: Option<Option<goodput_archive::Recent>> = None;
    let mut paths: Option<Option<goodput_archive::PathHistory>> = None;
    let mut out = Vec::new();
    for mut c in cells {
        let metric = family
            .archive_metric(c.direction)
            .and_then(|n| serde_json::from_value::<goodput_archive::Metric>(n.into()).ok());
        let latest = match (c.value, c.at_ms) {
            (Some(v), Some(t)) => Some((t, v)),
            _ if family == Family::Path => {
                if paths.is_none() {
                    paths = Some(
                        archive
                            .paths(&key, now.saturating_sub(86_400_000), now.saturating_add(1))
                            .await
                            .ok(),
                    );
                }
                paths
                    .as_ref()
                    .and_then(Option::as_ref)
                    .filter(|h| h.runs > 0)
                    .and_then(|h| {
                        h.paths
                            .iter()
                            .map(|x| x.last_ms)
                            .max()
                            .map(|t| (t, h.changes as f64))
                    })
            }
            _ => {
                if recent.is_none() {
                    recent = Some(archive.recent(&key, since, now.saturating_add(1)).await.ok());
                }
                match (recent.as_ref().and_then(Option::as_ref), metric) {
                    (Some(r), Some(m)) => r.series(m, 0, u64::MAX).last().map(|x| (x.at_ms, x.mean)),
                    _ => None,
                }
            }
        };
        let relative = matches!(family, Family::Throughput | Family::Delay | Family::OneWayDelay);
        let baseline = match metric {
            Some(m) if relative && latest.is_some() => baseline_of(archive, &key, m, now).await,
            _ => None,
        };
        if c.value.is_none() {
            if let Some((t, v)) = latest {
                c.value = Some(v);
                c.at_ms = Some(t);
            }
        }
        let fresh = latest.filter(|(t, _)| t.saturating_add(fresh_ms) >= now);
        let mut level = None;
        if let Some((_, v)) = fresh {
            if matches!(c.status, Status::Ok | Status::NoData) {
                let v = c.value.unwrap_or(v);
                // (The cell keeps the evaluation's state: where no rule
                // had a value, it is no data with a level, and the
                // direction it shows in is coloured by that level.)
                level = Some(level_of(family, v, baseline).0);
            }
        } else if c.status == Status::NoData && c.why.as_deref().is_none_or(|w| w == NO_RESULT) {
            // Why nothing recent: the last run's fate.
            if let Some(r) = fates.get(&(p.task.clone(), p.source.clone(), p.dest.clone())) {
                let reason = r.reason.as_deref().unwrap_or("no reason given");
                let when = ms_rfc3339(r.scheduled_ms);
                match r.state {
                    goodput_archive::RunState::NonStart | goodput_archive::RunState::Missed => {
                        c.why = Some(format!("not started ({when}): {reason}"));
                    }
                    goodput_archive::RunState::Failed => {
                        c.why = Some(format!("last run failed ({when}): {reason}"));
                    }
                    _ => {}
                }
            }
        }
        out.push(GridCell {
            cell: c,
            level,
            baseline,
        });
    }
    out
}

/// A half-cell's state as the grid draws it: one that no rule judged
/// (no data) but that has a recent value and so a level is OK, coloured
/// by its level.
pub(crate) fn shown_status(g: &GridCell) -> goodput_core::alert::Status {
    use goodput_core::alert::Status;
    match (g.cell.status, g.level) {
        (Status::NoData, Some(_)) => Status::Ok,
        (s, _) => s,
    }
}

/// Every direction once: the cells of the same direction (a pair fed by
/// both its ends, or by two tasks) merged into one state.
pub(crate) fn merge_directions(cells: &[GridCell]) -> Vec<DirectionCell> {
    use goodput_core::alert::{Direction, Status};
    let mut out: Vec<DirectionCell> = Vec::new();
    let mut at: std::collections::HashMap<(String, String), usize> = std::collections::HashMap::new();
    for (i, g) in cells.iter().enumerate() {
        let c = &g.cell;
        let Some(dest) = c.dest.clone() else {
            continue;
        };
        let (from, to) = match c.direction {
            Direction::Backward => (dest, c.source.clone()),
            _ => (c.source.clone(), dest),
        };
        let n = *at.entry((from.clone(), to.clone())).or_insert_with(|| {
            out.push(DirectionCell {
                from,
                to,
                round_trip: c.direction == Direction::RoundTrip || c.metric == Family::Path,
                status: Status::NotRun,
                direction: c.direction,
                level: None,
                value: None,
                at_ms: None,
                why: None,
                cells: Vec::new(),
            });
            out.len() - 1
        });
        out[n].cells.push(i);
    }
    for d in &mut out {
        // The worst state (the newest of its measurements in it) speaks:
        // its value, time and reason; else the newest value of any.
        let by = |i: &usize| {
            let c = &cells[*i].cell;
            (shown_status(&cells[*i]), c.value.is_some(), c.at_ms)
        };
        if let Some(&w) = d.cells.iter().max_by_key(|i| by(i)) {
            let c = &cells[w].cell;
            d.status = shown_status(&cells[w]);
            d.direction = c.direction;
            d.why = c.why.clone();
            d.value = c.value;
            d.at_ms = c.at_ms;
        }
        if d.value.is_none() {
            if let Some(c) = d
                .cells
                .iter()
                .map(|&i| &cells[i].cell)
                .filter(|c| c.value.is_some())
                .max_by_key(|c| c.at_ms)
            {
                d.value = c.value;
                d.at_ms = c.at_ms;
            }
        }
    }
    for d in &mut out {
        d.level = if d.status == Status::Ok {
            d.cells
                .iter()
                .filter(|&&i| shown_status(&cells[i]) == Status::Ok)
                .filter_map(|&i| cells[i].level)
                .max()
        } else {
            None
        };
    }
    out
}

/// Asks another agent for a document (a GET, 3 s at most, at most `cap`
/// bytes): its body, or why not in words.
pub(crate) async fn ask_peer(
    client: &reqwest::Client,
    url: &str,
    cap: u64,
    what: &str,
) -> Result<Vec<u8>, String> {
    let r = client
        .get(url)
        .timeout(std::time::Duration::from_secs(3))
        .send()
        .await
        .map_err(|e| {
            if e.is_timeout() {
                "no answer in time".to_string()
            } else {
                e.to_string()
            }
        })?;
    if !r.status().is_success() {
        return Err(format!("HTTP {}", r.status()));
    }
    let bytes = crate::answer::body_capped(r, cap).await.map_err(|e| match e {
        Some(e) => e.to_string(),
        None => format!("its {what} is larger than {cap} bytes"),
    })?;
    Ok(bytes)
}

const HOUR: u64 = 3_600_000;
const WEEK: u64 = 7 * 86_400_000;

/// Most bytes read of a peer's grid.
const MAX_GRID: u64 = 16 << 20;

/// The grid of a metric family (see [`GridView`]).
pub(crate) async fn grid_view(s: &Ctx, family: Family, local: bool) -> GridView {
    use goodput_core::alert::Status;
    let loaded = s.loaded();
    let (cells, legend, evaluated) = {
        let st = s.alerting();
        let cells: Vec<crate::state::alerts::HalfCell> =
            st.cells.iter().filter(|c| c.metric == family).cloned().collect();
        (cells, st.legend.clone(), st.evaluated_ms)
    };
    // This agent's cells, with their latest values read from the archive
    // and coloured by them where no rule had a value: read once per
    // evaluation (the cells change with it), then kept.
    let mut cells = kept_values(s, &loaded, family, cells, evaluated).await;
    let me = if s.is_archive() {
        "fleet archive".to_string()
    } else {
        loaded.mine.first().cloned().unwrap_or_default()
    };
    let mut agents = vec![AgentSeen {
        name: me,
        answered: true,
        error: None,
        evaluated_ms: evaluated,
    }];
    // Every pair of the mesh that measures the family, by its source.
    let pairs: Vec<&goodput_core::mesh::PairTask> = loaded
        .pairs
        .iter()
        .filter(|p| family.measured_by(p.spec.kind()))
        .collect();
    if !local {
        let mut sources: Vec<String> = pairs
            .iter()
            .map(|p| p.source.clone())
            .filter(|n| !s.speaks_for(&loaded, n))
            .collect();
        sources.sort();
        sources.dedup();
        let mut asks = tokio::task::JoinSet::new();
        for name in sources {
            let Some(peer) = loaded.peer(&name) else {
                continue;
            };
            let client = s.client(&peer);
            let url = format!("{}/api/v1/grid?metric={}&scope=local", peer.url, family.name());
            asks.spawn(async move {
                let got: Result<GridView, String> =
                    ask_peer(&client, &url, MAX_GRID, "grid").await.and_then(|bytes| {
                        serde_json::from_slice(&bytes).map_err(|e| format!("its grid does not read: {e}"))
                    });
                (name, got)
            });
        }
        while let Some(Ok((name, got))) = asks.join_next().await {
            match got {
                Ok(g) => {
                    let at = g.agents.first().map_or(0, |a| a.evaluated_ms);
                    // A peer speaks for the measurements it runs, only.
                    cells.extend(
                        g.cells
                            .into_iter()
                            .filter(|c| c.cell.source == name && c.cell.metric == family),
                    );
                    agents.push(AgentSeen {
                        name,
                        answered: true,
                        error: None,
                        evaluated_ms: at,
                    });
                }
                Err(e) => agents.push(AgentSeen {
                    name,
                    answered: false,
                    error: Some(e),
                    evaluated_ms: 0,
                }),
            }
        }
        agents.sort_by(|a, b| a.name.cmp(&b.name));
    }
    // Pairs no answer covered: no data, and why. (A set, not a search of
    // the cells per pair: a 50-host mesh has 4,900 half-cells.)
    let covered: std::collections::HashSet<(String, String, Option<String>, goodput_core::alert::Direction)> =
        cells
            .iter()
            .map(|c| {
                (
                    c.cell.task.clone(),
                    c.cell.source.clone(),
                    c.cell.dest.clone(),
                    c.cell.direction,
                )
            })
            .collect();
    for p in &pairs {
        if !local || s.speaks_for(&loaded, &p.source) {
            for &d in family.directions() {
                let have = covered.contains(&(p.task.clone(), p.source.clone(), p.dest.clone(), d));
                if have || (local && !s.speaks_for(&loaded, &p.source)) {
                    continue;
                }
                let why = match agents.iter().find(|a| a.name == p.source) {
                    Some(a) if !a.answered => format!(
                        "the agent at {} did not answer: {}",
                        p.source,
                        a.error.as_deref().unwrap_or("")
                    ),
                    Some(a) if a.evaluated_ms == 0 => {
                        format!("{}'s agent has not evaluated its rules yet", p.source)
                    }
                    _ => format!("no agent runs {}'s tests", p.source),
                };
                cells.push(GridCell {
                    cell: crate::state::alerts::HalfCell {
                        task: p.task.clone(),
                        kind: p.spec.kind().into(),
                        source: p.source.clone(),
                        dest: p.dest.clone(),
                        metric: family,
                        direction: d,
                        status: Status::NoData,
                        value: None,
                        at_ms: None,
                        why: Some(why),
                    },
                    level: None,
                    baseline: None,
                });
            }
        }
    }
    let mut hosts: Vec<String> = pairs
        .iter()
        .flat_map(|p| std::iter::once(p.source.clone()).chain(p.dest.clone()))
        .collect();
    hosts.sort();
    hosts.dedup();
    if s.is_archive() {
        // A fleet archive: the measurements of an agent whose lease lapsed
        // are down, not merely without data.
        let lapsed = crate::state::fleet::lapsed(s).await;
        for c in cells.iter_mut().map(|c| &mut c.cell) {
            if matches!(c.status, Status::Maintenance | Status::NotRun) {
                continue;
            }
            if let Some((_, until)) = lapsed.iter().find(|(n, _)| *n == c.source) {
                c.status = Status::AgentDown;
                c.why = Some(format!(
                    "the agent at {} let its lease with this archive lapse at {}: down or cut off",
                    c.source,
                    ms_rfc3339(*until)
                ));
            }
        }
    }
    cells.sort_by(|a, b| {
        let (a, b) = (&a.cell, &b.cell);
        (&a.source, &a.dest, &a.task, a.direction).cmp(&(&b.source, &b.dest, &b.task, b.direction))
    });
    let directions = merge_directions(&cells);
    GridView {
        metric: family,
        hosts,
        cells,
        directions,
        legend,
        agents,
    }
}

pub(crate) async fn grid(
    State(s): State<Ctx>,
    Query(q): Query<GridQuery>,
) -> Result<Json<GridView>, Failure> {
    let family = goodput_core::alert::Family::named(q.metric.as_deref().unwrap_or("loss")).map_err(bad)?;
    let local = match q.scope.as_deref() {
        None | Some("mesh") => false,
        Some("local") => true,
        Some(o) => return Err(bad(format!("scope: '{o}' is not mesh or local"))),
    };
    Ok(Json(grid_view(&s, family, local).await))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::alerts::HalfCell;
    use goodput_core::alert::{Direction, Status};

    #[test]
    fn values_read_short_with_their_units() {
        assert_eq!(short(Family::Throughput, 940e6), "940 Mbit/s");
        assert_eq!(short(Family::Throughput, 1.25e9), "1.25 Gbit/s");
        assert_eq!(short(Family::Loss, 0.0), "0 %");
        assert_eq!(short(Family::Loss, 0.02), "0.02 %");
        assert_eq!(short(Family::Loss, 8.0), "8 %");
        assert_eq!(short(Family::Delay, 410.0), "410 µs");
        assert_eq!(short(Family::Jitter, 12_000.0), "12 ms");
        assert_eq!(short(Family::OneWayDelay, 1_234.0), "1.23 ms");
        assert_eq!(short(Family::Path, 1.0), "1 change");
        assert_eq!(short(Family::Delay, f64::NAN), "?");
    }

    #[test]
    fn the_scale_judges_fixed_bands_and_the_pairs_own_baseline() {
        let l = |f, v, b| level_of(f, v, b).0;
        assert_eq!(l(Family::Loss, 0.0, None), Level::Good);
        assert_eq!(l(Family::Loss, 0.5, None), Level::Fair);
        assert_eq!(l(Family::Loss, 2.0, None), Level::Poor);
        assert_eq!(l(Family::Errors, 0.0, None), Level::Good);
        assert_eq!(l(Family::Errors, 1.0, None), Level::Fair);
        assert_eq!(l(Family::Errors, 2.0, None), Level::Poor);
        // Days left on a certificate: more is better.
        assert_eq!(l(Family::Certificate, 40.0, None), Level::Good);
        assert_eq!(l(Family::Certificate, 10.0, None), Level::Fair);
        assert_eq!(l(Family::Certificate, 3.0, None), Level::Poor);
        // Every family has a legend of its own.
        let legends: std::collections::HashSet<_> = Family::ALL.iter().map(|f| scale_legend(*f)).collect();
        assert_eq!(
            legends.len(),
            Family::ALL.len() - 1,
            "delay and one-way delay share theirs"
        );
        assert_eq!(l(Family::Jitter, 205.0, None), Level::Good);
        assert_eq!(l(Family::Jitter, 12_000.0, None), Level::Poor);
        // Throughput against the pair's usual.
        assert_eq!(l(Family::Throughput, 300e6, None), Level::Good);
        assert_eq!(l(Family::Throughput, 900e6, Some(940e6)), Level::Good);
        assert_eq!(l(Family::Throughput, 600e6, Some(940e6)), Level::Fair);
        assert_eq!(l(Family::Throughput, 300e6, Some(940e6)), Level::Poor);
        assert_eq!(
            level_of(Family::Throughput, 300e6, Some(940e6)).1,
            "32 % of its usual 940 Mbit/s"
        );
        // Delay against the usual, with a millisecond's slack.
        assert_eq!(l(Family::Delay, 1_400.0, Some(400.0)), Level::Good);
        assert_eq!(l(Family::Delay, 5_000.0, Some(400.0)), Level::Fair);
        assert_eq!(l(Family::Delay, 24_000.0, Some(400.0)), Level::Poor);
    }

    fn half(source: &str, dest: &str, d: Direction, status: Status, v: f64, at: u64) -> GridCell {
        GridCell {
            cell: HalfCell {
                task: "lat".into(),
                kind: goodput_core::kind::Kind::Stamp.name().into(),
                source: source.into(),
                dest: Some(dest.into()),
                metric: Family::Loss,
                direction: d,
                status,
                value: Some(v),
                at_ms: Some(at),
                why: None,
            },
            level: Some(level_of(Family::Loss, v, None).0),
            baseline: None,
        }
    }

    #[test]
    fn a_direction_measured_from_both_ends_is_one_cell_the_worst_state_winning() {
        let cells = [
            half("a", "b", Direction::Forward, Status::Warning, 0.2, 10),
            half("a", "b", Direction::Backward, Status::Ok, 0.0, 10),
            half("b", "a", Direction::Forward, Status::Ok, 0.5, 12),
            half("b", "a", Direction::Backward, Status::Critical, 8.0, 9),
        ];
        let d = merge_directions(&cells);
        assert_eq!(d.len(), 2, "{d:?}");
        let ab = d.iter().find(|x| x.from == "a" && x.to == "b").unwrap();
        assert_eq!(
            (ab.status, ab.value, ab.cells.clone()),
            (Status::Critical, Some(8.0), vec![0, 3])
        );
        assert_eq!(ab.level, None, "an alert, not a level");
        let ba = d.iter().find(|x| x.from == "b" && x.to == "a").unwrap();
        // Both OK: the newest value, the worse level.
        assert_eq!(
            (ba.status, ba.value, ba.level),
            (Status::Ok, Some(0.5), Some(Level::Fair))
        );
    }

    #[test]
    fn a_value_no_rule_judged_colours_its_direction_by_its_level() {
        // No rule watches it: the evaluation says no data; its recent
        // value has a level. The API's cell keeps the evaluation's state.
        let mut jitter = half("a", "b", Direction::RoundTrip, Status::NoData, 3_000.0, 10);
        jitter.cell.metric = Family::Jitter;
        jitter.level = Some(level_of(Family::Jitter, 3_000.0, None).0);
        let d = merge_directions(std::slice::from_ref(&jitter));
        assert_eq!((d[0].status, d[0].level), (Status::Ok, Some(Level::Fair)));
        assert_eq!(jitter.cell.status, Status::NoData);
        // Without a recent value (no level) it stays no data.
        jitter.level = None;
        let d = merge_directions(&[jitter]);
        assert_eq!((d[0].status, d[0].level), (Status::NoData, None));
    }
}
