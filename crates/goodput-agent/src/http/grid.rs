//! The grid: each measurement's state per metric family and direction,
//! this agent's merged with the other agents' (the JSON view and the
//! dashboard's).

use axum::extract::{Query, State};
use axum::Json;
use goodput_core::time::ms_rfc3339;
use serde::{Deserialize, Serialize};

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
    /// Every half-cell.
    pub(crate) cells: Vec<crate::state::alerts::HalfCell>,
    /// The rules' thresholds, one line each.
    pub(crate) legend: Vec<String>,
    /// The agents asked.
    pub(crate) agents: Vec<AgentSeen>,
}

/// Most bytes read of a peer's grid.
const MAX_GRID: u64 = 16 << 20;

/// The grid of a metric family (see [`GridView`]).
pub(crate) async fn grid_view(s: &Ctx, family: goodput_core::alert::Family, local: bool) -> GridView {
    use goodput_core::alert::Status;
    let loaded = s.loaded();
    let (mut cells, legend, evaluated) = {
        let st = s.alerting();
        let cells: Vec<crate::state::alerts::HalfCell> =
            st.cells.iter().filter(|c| c.metric == family).cloned().collect();
        (cells, st.legend.clone(), st.evaluated_ms)
    };
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
                let got: Result<GridView, String> = async {
                    let r = client
                        .get(&url)
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
                    let bytes = crate::answer::body_capped(r, MAX_GRID)
                        .await
                        .map_err(|e| match e {
                            Some(e) => e.to_string(),
                            None => format!("its grid is larger than {MAX_GRID} bytes"),
                        })?;
                    serde_json::from_slice(&bytes).map_err(|e| format!("its grid does not read: {e}"))
                }
                .await;
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
                            .filter(|c| c.source == name && c.metric == family),
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
            .map(|c| (c.task.clone(), c.source.clone(), c.dest.clone(), c.direction))
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
                cells.push(crate::state::alerts::HalfCell {
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
        for c in cells.iter_mut() {
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
        (&a.source, &a.dest, &a.task, a.direction).cmp(&(&b.source, &b.dest, &b.task, b.direction))
    });
    GridView {
        metric: family,
        hosts,
        cells,
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
