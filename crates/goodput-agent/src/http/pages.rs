//! The web dashboard, on the API's own server under `/ui`: pages built on
//! the server as HTML with inline SVG (the charts of
//! `goodput_report::chart`), so they need no script, no asset from
//! anywhere, and draw as fast as the archive answers.
//!
//! - `/ui/grid?metric=…`: the mesh's grid for one metric family, rows the
//!   sources, columns the destinations, each cell split into its two
//!   directions (upper left: row → column; lower right: column → row) and
//!   coloured by state, with a tooltip of the value and its time and a
//!   legend of every threshold; a click opens the pair.
//! - `/ui/pair?source=…&dest=…&range=…`: a pair's history, both
//!   directions, over 1 day to 1 year (aggregated in the archive), with
//!   failed runs and non-starts marked on the time axis; each point leads
//!   to the raw results behind it (`/ui/runs`).
//! - `/ui/host`: this agent's health, its calendar as a timeline, and its
//!   recent non-starts with their reasons.
//! - `/ui/alerts`: open and recent alerts.

use std::fmt::Write as _;
use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::Router;
use goodput_archive::{measurement_key, Metric, Run, RunFilter, RunState};
use goodput_core::alert::{Direction, Family, Status};
use goodput_core::mesh::PairTask;
use goodput_core::time::ms_rfc3339;
use goodput_report::chart::{self, escape, palette, Band, Chart, Mark, Point, Series, Style};
use serde::Deserialize;

use crate::clock;
use crate::http::grid::{scale_legend, short, shown_status, DirectionCell, GridCell, Level};
use crate::state::Shared;

type Ctx = Arc<Shared>;

/// The dashboard's routes.
pub(crate) fn routes() -> Router<Ctx> {
    Router::new()
        .route("/", get(|| async { Redirect::to("/ui/grid") }))
        .route("/ui", get(|| async { Redirect::to("/ui/grid") }))
        .route("/ui/", get(|| async { Redirect::to("/ui/grid") }))
        .route("/ui/grid", get(grid_page))
        .route("/ui/pair", get(pair_page))
        .route("/ui/runs", get(runs_page))
        .route("/ui/host", get(host_page))
        .route("/ui/alerts", get(alerts_page))
        .route("/speedtest", get(crate::http::speedtest::page))
        .route("/speedtest.js", get(crate::http::speedtest::script))
        // Browsers ask for it on every page of the API too: nothing.
        .route("/favicon.ico", get(|| async { StatusCode::NO_CONTENT }))
}

/// A state's colour (Okabe and Ito's palette: told apart with any colour
/// vision) and its words.
pub(crate) fn status_style(s: Status) -> (&'static str, &'static str) {
    match s {
        Status::Ok => (palette::GREEN, "OK"),
        Status::Warning => (palette::ORANGE, "warning"),
        Status::Critical => (palette::VERMILLION, "critical"),
        Status::NoData => ("#BBBBBB", "no data"),
        Status::AgentDown => ("#555555", "agent down"),
        Status::NotRun => ("#FFFFFF", "not run"),
        Status::Maintenance => (palette::SKY, "maintenance"),
    }
}

const CSS: &str = "
body{font-family:sans-serif;margin:0;color:#222;background:#fafafa}
header{background:#1f3b57;color:#fff;padding:8px 16px;display:flex;gap:16px;align-items:center;flex-wrap:wrap}
header a{color:#fff;text-decoration:none;padding:3px 8px;border-radius:3px}
header a.on{background:#fff;color:#1f3b57}
header .who{margin-left:auto;font-size:13px;opacity:.85}
main{padding:12px 16px}
table{border-collapse:collapse}
td,th{padding:3px 6px;font-size:13px}
table.grid th{font-weight:normal}
table.grid th.col{writing-mode:vertical-rl;transform:rotate(180deg);height:90px;text-align:left}
table.grid td.cell{padding:1px}
table.list{background:#fff}
table.list td,table.list th{border:1px solid #ddd;text-align:left}
.swatch{display:inline-block;width:14px;height:14px;border:1px solid #888;vertical-align:middle;margin-right:4px}
.legend li{margin:2px 0}
.warn{color:#a33}
.charts svg{background:#fff;border:1px solid #ddd;margin:6px 0;display:block}
.charts svg.chart{overflow:visible;margin-right:48px}
.latest{font-size:14px}
.latest .figure{margin-right:6px}
.remote{border-left:3px solid #ddd;padding-left:8px}
.ranges a{margin-right:8px}
.ranges a.on{font-weight:bold}
code{font-size:12px}
";

/// A whole page.
fn page(title: &str, nav: &str, who: &str, body: &str) -> Html<String> {
    let mut links = String::new();
    // A grid per metric family, then the other pages.
    let grids = Family::ALL.map(|f| (format!("/ui/grid?metric={}", f.name()), f.title(), f.name()));
    let others = [("/ui/alerts", "Alerts"), ("/ui/host", "Host")].map(|(h, n)| (h.to_owned(), n, n));
    for (href, name, key) in grids.into_iter().chain(others) {
        let on = if key.eq_ignore_ascii_case(nav) {
            " class=\"on\""
        } else {
            ""
        };
        let _ = write!(links, "<a href=\"{href}\"{on}>{name}</a>");
    }
    Html(format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><link rel=\"icon\" href=\"data:,\">\
         <title>{} · goodput</title><style>{CSS}</style></head><body><header><strong>goodput</strong>{links}<span class=\"who\">{}</span></header><main>{body}</main></body></html>",
        escape(title),
        escape(who)
    ))
}

fn who(s: &Shared) -> String {
    let l = s.loaded();
    format!(
        "agent {} · {}",
        l.mine.join(", "),
        ms_rfc3339(clock::now_ms())
            .get(..19)
            .unwrap_or("")
            .replace('T', " ")
            + " UTC"
    )
}

/// A value in a family's display unit, with the unit.
fn show(f: Family, v: f64) -> String {
    match f {
        Family::Path => format!("{v} path changes"),
        _ => f.unit().show(v),
    }
}

#[derive(Deserialize)]
struct GridQuery {
    metric: Option<String>,
}

fn bad_request(text: String) -> Response {
    (StatusCode::BAD_REQUEST, Html(format!("<p>{}</p>", escape(&text)))).into_response()
}

async fn grid_page(State(s): State<Ctx>, Query(q): Query<GridQuery>) -> Response {
    let family = match Family::named(q.metric.as_deref().unwrap_or("loss")) {
        Ok(f) => f,
        Err(e) => return bad_request(e),
    };
    let g = crate::http::grid::grid_view(&s, family, false).await;
    let loaded = s.loaded();
    let mut body = String::new();
    let _ = write!(
        body,
        "<h1>{} grid</h1><p>Rows run the test; columns are its other end. {}</p>",
        family.title(),
        if family.directional() {
            "Each cell is the direction row → column (measured by either end), with its latest value."
        } else {
            "Each cell is the row's round trip toward the column (or the path the row traced), with its latest value."
        }
    );
    if g.hosts.is_empty() {
        body.push_str("<p>No task of this mesh measures this metric.</p>");
    } else {
        body.push_str("<table class=\"grid\" id=\"grid\"><tr><th></th>");
        for h in &g.hosts {
            let _ = write!(body, "<th class=\"col\">{}</th>", escape(h));
        }
        body.push_str("</tr>");
        // The directions by their ends, found once (not searched for
        // per cell).
        let by_pair: std::collections::HashMap<(&str, &str), &DirectionCell> = g
            .directions
            .iter()
            .map(|d| ((d.from.as_str(), d.to.as_str()), d))
            .collect();
        for row in &g.hosts {
            let _ = write!(body, "<tr><th class=\"row\">{}</th>", escape(row));
            for col in &g.hosts {
                body.push_str("<td class=\"cell\">");
                if row != col {
                    let d = by_pair.get(&(row.as_str(), col.as_str())).copied();
                    body.push_str(&cell_svg(family, row, col, d, &g.cells));
                }
                body.push_str("</td>");
            }
            body.push_str("</tr>");
        }
        body.push_str("</table>");
    }
    body.push_str("<h2>Legend</h2><ul class=\"legend\" id=\"legend\">");
    let down = g.directions.iter().any(|c| c.status == Status::AgentDown);
    for st in [
        Status::Ok,
        Status::Warning,
        Status::Critical,
        Status::NoData,
        Status::NotRun,
        Status::Maintenance,
        Status::AgentDown,
    ]
    .into_iter()
    .filter(|s| *s != Status::AgentDown || down)
    {
        let (color, words) = status_style(st);
        let _ = write!(
            body,
            "<li><span class=\"swatch\" style=\"background:{color}\"></span>{words}</li>"
        );
    }
    for l in [Level::Good, Level::Fair, Level::Poor] {
        let _ = write!(
            body,
            "<li><span class=\"swatch\" style=\"background:{}\"></span>{} by value (no alert)</li>",
            level_color(l),
            l.name()
        );
    }
    let _ = write!(
        body,
        "</ul><p id=\"scale\">Without an alert a cell is coloured by its latest value: {}. An alert, when one applies, wins.</p>",
        escape(scale_legend(family))
    );
    body.push_str("<ul class=\"legend\" id=\"rules\">");
    for l in g.legend.iter().filter(|l| {
        l.starts_with("no_data")
            || l.split(": ")
                .nth(1)
                .is_some_and(|rest| rest.contains(&format!(" of {} over", family.name())))
    }) {
        let _ = write!(body, "<li>{}</li>", escape(l));
    }
    body.push_str("</ul>");
    let quiet: Vec<&crate::http::grid::AgentSeen> = g.agents.iter().filter(|a| !a.answered).collect();
    if !quiet.is_empty() {
        body.push_str("<p class=\"warn\">");
        for a in quiet {
            let _ = write!(
                body,
                "The agent at {} did not answer ({}). ",
                escape(&a.name),
                escape(a.error.as_deref().unwrap_or(""))
            );
        }
        body.push_str("</p>");
    }
    let open = s.alerting().open();
    let open: Vec<_> = open.into_iter().filter(|a| a.metric == family.name()).collect();
    if !open.is_empty() {
        body.push_str("<h2>Open alerts here</h2>");
        body.push_str(&alerts_table(&alert_values(&s, &open)));
    }
    let mut html = page(
        &format!("{} grid", family.title()),
        family.name(),
        &who(&s),
        &body,
    )
    .0;
    // Refresh with the evaluations, at most once a minute.
    let every_s = loaded
        .config
        .alerts
        .every_ms()
        .unwrap_or(60_000)
        .div_ceil(1000)
        .max(60);
    html = html.replacen(
        "<meta charset=\"utf-8\">",
        &format!("<meta charset=\"utf-8\"><meta http-equiv=\"refresh\" content=\"{every_s}\">"),
        1,
    );
    Html(html).into_response()
}

fn urlencode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => out.push(b as char),
            _ => {
                let _ = write!(out, "%{b:02X}");
            }
        }
    }
    out
}

/// A value's level's colour (no alert): Okabe and Ito's green, yellow
/// and reddish purple, apart from the alerts' orange and vermillion.
pub(crate) fn level_color(l: Level) -> &'static str {
    match l {
        Level::Good => palette::GREEN,
        Level::Fair => "#F0E442",
        Level::Poor => "#CC79A7",
    }
}

/// A direction's colour: its alert state's, or with none (OK) its
/// value's level's.
fn direction_color(status: Status, level: Option<Level>) -> &'static str {
    match (status, level) {
        (Status::Ok, Some(l)) => level_color(l),
        (s, _) => status_style(s).0,
    }
}

/// One cell: the direction row → column, coloured by state (or by value)
/// with its latest value written in it.
fn cell_svg(family: Family, row: &str, col: &str, d: Option<&DirectionCell>, cells: &[GridCell]) -> String {
    const W: u32 = 92;
    const H: u32 = 30;
    let href = escape(&format!(
        "/ui/pair?source={}&dest={}",
        urlencode(row),
        urlencode(col)
    ));
    let status = d.map_or(Status::NotRun, |d| d.status);
    let level = d.and_then(|d| d.level);
    let color = direction_color(status, level);
    let words = match (status, level) {
        (Status::Ok, Some(l)) => format!("OK, {} by value", l.name()),
        (s, _) => status_style(s).1.to_owned(),
    };
    let arrow = if d.is_some_and(|d| d.round_trip) && family != Family::Path {
        "↔"
    } else {
        "→"
    };
    let mut title = format!("{row} {arrow} {col}: {words}");
    let value = d.and_then(|d| d.value.map(|v| short(family, v)));
    if let (Some(d), Some(v)) = (d, &value) {
        if let Some(t) = d.at_ms {
            let _ = write!(title, "\nlatest {v} at {}", ms_rfc3339(t));
        }
    }
    for c in d
        .map_or(&[][..], |d| d.cells.as_slice())
        .iter()
        .filter_map(|&i| cells.get(i))
    {
        let h = &c.cell;
        let _ = write!(
            title,
            "\n{} ({}) run by {}: {}",
            h.task,
            h.kind,
            h.source,
            match (shown_status(c), c.level) {
                (Status::Ok, Some(l)) if h.status == Status::NoData =>
                    format!("no rule judged it; by value {}", l.name()),
                (s, _) => status_style(s).1.to_owned(),
            }
        );
        if let (Some(v), Some(t)) = (h.value, h.at_ms) {
            let _ = write!(title, ", last {} at {}", show(family, v), ms_rfc3339(t));
        }
        if let Some(b) = c.baseline {
            let _ = write!(title, ", usually {}", short(family, b));
        }
        if let Some(w) = h.why.as_deref().filter(|_| shown_status(c) == h.status) {
            let _ = write!(title, "; {w}");
        }
    }
    if d.is_none() {
        title.push_str("\nno test of this pair measures it");
    }
    // The text: the value, or for a cell without one, its state.
    let text = match (&value, status) {
        (Some(v), _) => v.clone(),
        (None, Status::NotRun) => String::new(),
        (None, Status::NoData)
            if d.and_then(|d| d.why.as_deref())
                .is_some_and(|w| w.starts_with("not started")) =>
        {
            "not started".into()
        }
        (None, s) => status_style(s).1.to_owned(),
    };
    let ink = match color {
        "#555555" | palette::VERMILLION => "#fff",
        _ => "#000",
    };
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{H}\" viewBox=\"0 0 {W} {H}\" class=\"cellsvg\"><a href=\"{href}\">\
         <rect x=\"0.5\" y=\"0.5\" width=\"{}\" height=\"{}\" fill=\"{color}\" stroke=\"#666\" stroke-width=\"0.6\" class=\"dir\" \
         data-direction=\"{}\" data-from=\"{}\" data-to=\"{}\" data-status=\"{}\" data-level=\"{}\"><title>{}</title></rect>\
         <text x=\"{}\" y=\"19\" text-anchor=\"middle\" font-size=\"11\" fill=\"{ink}\" class=\"value\" pointer-events=\"none\">{}</text></a></svg>",
        W - 1,
        H - 1,
        d.map_or(Direction::Forward, |d| d.direction).name(),
        escape(row),
        escape(col),
        status.name(),
        level.map_or("", Level::name),
        escape(&title),
        W / 2,
        escape(&text)
    )
}

/// The alerts as a table, a row each: what, where, which task, the
/// rule's thresholds in words (`thresholds_text`, where the alert
/// carries it; else the rule's name), the value that passed them, and
/// when. Reads the alerts' JSON, so that the fields the API adds show.
fn alerts_table(alerts: &[serde_json::Value]) -> String {
    let mut t = String::from(
        "<table class=\"list alerts\"><tr><th>severity</th><th>metric</th><th>task</th><th>pair</th><th>direction</th>\
         <th>thresholds</th><th>what</th><th>started</th><th>ended</th></tr>",
    );
    let text = |a: &serde_json::Value, k: &str| a.get(k).and_then(|v| v.as_str()).unwrap_or("").to_owned();
    for a in alerts {
        let severity = text(a, "severity");
        let sev = match severity.as_str() {
            "critical" => Status::Critical,
            "warning" => Status::Warning,
            _ => Status::NoData,
        };
        let (color, _) = status_style(sev);
        let words = text(a, "thresholds_text");
        let thresholds = if words.is_empty() {
            format!("rule {}", text(a, "rule"))
        } else {
            words
        };
        let dest = text(a, "dest");
        let _ = write!(
            t,
            "<tr class=\"alert\" data-severity=\"{}\" data-metric=\"{}\" data-task=\"{}\"><td><span class=\"swatch\" style=\"background:{color}\"></span>{}</td>\
             <td>{}</td><td class=\"task\">{}</td><td>{} → {}</td><td>{}</td><td class=\"thresholds\">{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(&severity),
            escape(&text(a, "metric")),
            escape(&text(a, "task")),
            escape(&severity),
            escape(&text(a, "metric")),
            escape(&text(a, "task")),
            escape(&text(a, "source")),
            escape(if dest.is_empty() { "-" } else { &dest }),
            escape(&text(a, "direction")),
            escape(&thresholds),
            escape(&text(a, "threshold")),
            a.get("start_ms").and_then(|v| v.as_u64()).map(ms_rfc3339).unwrap_or_default(),
            a.get("end_ms")
                .and_then(|v| v.as_u64())
                .map(ms_rfc3339)
                .unwrap_or_else(|| "open".into()),
        );
    }
    t.push_str("</table>");
    t
}

/// Alerts as the table reads them, with their rules' thresholds in words.
fn alert_values(s: &Ctx, alerts: &[goodput_archive::AlertRecord]) -> Vec<serde_json::Value> {
    crate::state::alerts::with_words(&s.loaded(), alerts.to_vec())
        .iter()
        .filter_map(|a| serde_json::to_value(a).ok())
        .collect()
}

#[derive(Deserialize)]
struct PairQuery {
    source: String,
    dest: String,
    range: Option<String>,
    /// `sections`: only this agent's measurements' sections, without the
    /// page around them (what another agent asks for to show them).
    part: Option<String>,
}

/// The ranges offered and their lengths (ms).
const RANGES: [(&str, u64); 7] = [
    ("1h", HOUR),
    ("6h", 6 * HOUR),
    ("1d", 86_400_000),
    ("3d", 3 * 86_400_000),
    ("1w", 7 * 86_400_000),
    ("1m", 30 * 86_400_000),
    ("1y", 365 * 86_400_000),
];

const HOUR: u64 = 3_600_000;

/// The time range and step of a chart: about 300 points; ranges of three
/// days and more in whole hours, so the archive answers from its hourly
/// aggregates.
pub(crate) fn span_of(range_ms: u64, now: u64) -> (u64, u64, u64) {
    let raw = (range_ms / 300).max(1000);
    if range_ms >= 3 * 86_400_000 {
        let step = raw.div_ceil(HOUR) * HOUR;
        let to = (now / HOUR + 1) * HOUR;
        (to.saturating_sub(range_ms.div_ceil(HOUR) * HOUR), to, step)
    } else {
        (now.saturating_sub(range_ms), now.saturating_add(1), raw)
    }
}

/// Most bytes of another agent's sections read.
const MAX_SECTIONS: u64 = 8 << 20;

/// A young measurement's range: from a little before its first run in
/// the range (not a dot at the right edge of a day or a year), at least
/// ten minutes.
fn fitted(range_ms: u64, first_ms: Option<u64>, now: u64) -> u64 {
    match first_ms {
        Some(t) if t < now => {
            let age = now - t;
            let wanted = age.saturating_add(age / 10).max(10 * 60_000);
            range_ms.min(wanted)
        }
        _ => range_ms,
    }
}

async fn pair_page(State(s): State<Ctx>, Query(q): Query<PairQuery>) -> Response {
    let range_name = q.range.as_deref().unwrap_or("1d");
    let Some(&(_, range_ms)) = RANGES.iter().find(|(n, _)| *n == range_name) else {
        let names: Vec<&str> = RANGES.iter().map(|(n, _)| *n).collect();
        return bad_request(format!(
            "range: '{range_name}' is not one of {}",
            names.join(", ")
        ));
    };
    let sections_only = match q.part.as_deref() {
        None => false,
        Some("sections") => true,
        Some(o) => return bad_request(format!("part: '{o}' is not sections")),
    };
    let loaded = s.loaded();
    let now = clock::now_ms();
    // The measurements between the two this process speaks for: an
    // agent's own, every configured one on a fleet's archive.
    let configured: Vec<&PairTask> = loaded
        .pairs
        .iter()
        .filter(|p| {
            s.speaks_for(&loaded, &p.source)
                && ((p.source == q.source && p.dest.as_deref() == Some(q.dest.as_str()))
                    || (p.source == q.dest && p.dest.as_deref() == Some(q.source.as_str())))
        })
        .collect();
    let (from0, _, _) = span_of(range_ms, now);
    // A fleet's archive holds runs no configured task names too (a
    // perfSONAR host's, through its pScheduler archiver; a task since
    // removed): each such measurement in the range gets its section.
    let stored = if s.is_archive() {
        stored_measurements(&s, &q.source, &q.dest, &configured, from0).await
    } else {
        Vec::new()
    };
    let ms: Vec<(&PairTask, String)> = configured
        .into_iter()
        .map(|p| (p, measurement_key(&p.spec, &p.source, p.dest.as_deref())))
        .chain(stored.iter().map(|(p, k)| (p, k.clone())))
        .collect();
    // The range fits the data: from the first run in it.
    let mut first: Option<u64> = None;
    for (p, _) in &ms {
        let f = RunFilter {
            source: Some(p.source.clone()),
            dest: p.dest.clone(),
            kind: Some(p.spec.kind().into()),
            from_ms: Some(from0),
            limit: 1000,
            ..RunFilter::default()
        };
        if let Ok(runs) = s.archive.runs(&f).await {
            if runs.len() >= 1000 {
                first = Some(from0);
            } else if let Some(t) = runs.iter().map(|r| r.start_ms.unwrap_or(r.scheduled_ms)).min() {
                first = Some(first.map_or(t, |f| f.min(t)));
            }
        }
    }
    let (from, to, step) = span_of(fitted(range_ms, first, now), now);
    let mut sections = String::new();
    for (p, key) in &ms {
        match measurement_section(&s, p, key, from, to, step).await {
            Ok(html) => sections.push_str(&html),
            Err(e) => {
                let _ = write!(sections, "<p class=\"warn\">{}</p>", escape(&e));
            }
        }
    }
    if sections_only {
        return Html(sections).into_response();
    }
    let mut body = format!(
        "<h1>{} ⇄ {}</h1><p class=\"ranges\">",
        escape(&q.source),
        escape(&q.dest)
    );
    for (n, _) in RANGES {
        let on = if n == range_name { " class=\"on\"" } else { "" };
        let _ = write!(
            body,
            "<a href=\"/ui/pair?source={}&amp;dest={}&amp;range={n}\"{on}>{n}</a>",
            urlencode(&q.source),
            urlencode(&q.dest)
        );
    }
    body.push_str("</p>");
    if !ms.is_empty() {
        let _ = write!(
            body,
            "<p>{} to {} UTC{}, one point per {} (the mean of the runs in it; the band spans their smallest to largest).</p>",
            ms_rfc3339(from).get(..16).unwrap_or("").replace('T', " "),
            ms_rfc3339(to).get(..16).unwrap_or("").replace('T', " "),
            if to - from < range_ms {
                " (since the first run in the range)"
            } else {
                ""
            },
            goodput_core::alert::span_text(step)
        );
    }
    body.push_str(&sections);
    // The measurements the other agents run: asked of them and shown
    // here (the browser may not reach them).
    for other in [&q.source, &q.dest] {
        let Some(peer) = loaded.peer(other) else {
            continue;
        };
        let runs_there = loaded.pairs.iter().any(|p| {
            p.source == *other
                && (p.dest.as_deref() == Some(q.source.as_str())
                    || p.dest.as_deref() == Some(q.dest.as_str()))
        });
        // An archive holds every agent's runs: it asks none of them.
        if !runs_there || s.speaks_for(&loaded, other) {
            continue;
        }
        let url = format!(
            "{}/ui/pair?source={}&dest={}&range={}&part=sections",
            peer.url,
            urlencode(&q.source),
            urlencode(&q.dest),
            urlencode(range_name)
        );
        let client = s.client(&peer);
        match crate::http::grid::ask_peer(&client, &url, MAX_SECTIONS, "answer").await {
            Ok(bytes) => {
                let html = String::from_utf8_lossy(&bytes);
                let _ = write!(
                    body,
                    "<div class=\"remote\" data-agent=\"{}\"><p class=\"via\">From {}'s agent (asked by this one):</p>{}</div>",
                    escape(other),
                    escape(other),
                    via(&html, other)
                );
            }
            Err(e) => {
                let _ = write!(
                    body,
                    "<p class=\"warn\">The agent at {} runs tests of this pair but did not answer: {}.</p>",
                    escape(other),
                    escape(&e)
                );
            }
        }
    }
    if ms.is_empty() && !body.contains("class=\"remote\"") && !body.contains("class=\"warn\"") {
        let _ = write!(
            body,
            "<p>No agent runs a test between {} and {}.</p>",
            escape(&q.source),
            escape(&q.dest)
        );
    }
    page(&format!("{} ⇄ {}", q.source, q.dest), "", &who(&s), &body).into_response()
}

/// Another agent's sections with their links to runs kept on this
/// agent (which asks that agent for them).
fn via(html: &str, agent: &str) -> String {
    html.replace(
        "href=\"/ui/runs?",
        &format!("href=\"/ui/runs?via={}&amp;", urlencode(agent)),
    )
}

/// A time past in words: "40 s", "5 min", "3 h", "2 d".
fn ago_text(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0..60 => format!("{s} s"),
        60..3_600 => format!("{} min", s / 60),
        3_600..172_800 => format!("{} h", s / 3_600),
        _ => format!("{} d", s / 86_400),
    }
}

/// The latest figures of a measurement, above its charts: throughput,
/// loss, delay and jitter, each with its unit, and when.
async fn latest_line(s: &Shared, p: &PairTask, key: &str) -> String {
    let Ok(Some(at)) = s.archive.last_finished(key).await else {
        return "<p class=\"latest\">No finished run yet.</p>".into();
    };
    let Ok(recent) = s.archive.recent(key, at, at.saturating_add(1)).await else {
        return String::new();
    };
    let dest = p.dest.as_deref().unwrap_or("");
    let mut figures = Vec::new();
    let there = format!("{} → {}", p.source, dest);
    let back = format!("{} → {}", dest, p.source);
    for (metric, family, name) in [
        (
            Metric::ThroughputUp,
            Family::Throughput,
            format!("throughput {there}"),
        ),
        (
            Metric::ThroughputDown,
            Family::Throughput,
            format!("throughput {back}"),
        ),
        (Metric::LossForward, Family::Loss, format!("loss {there}")),
        (Metric::LossBackward, Family::Loss, format!("loss {back}")),
        (Metric::DelayMedian, Family::Delay, "round-trip delay".to_string()),
        (
            Metric::OwdForwardMedian,
            Family::OneWayDelay,
            format!("one-way delay {there}"),
        ),
        (
            Metric::OwdBackwardMedian,
            Family::OneWayDelay,
            format!("one-way delay {back}"),
        ),
        (Metric::Jitter, Family::Jitter, "jitter".to_string()),
    ] {
        if let Some(x) = recent.series(metric, 0, u64::MAX).last() {
            figures.push(format!(
                "<span class=\"figure\" data-metric=\"{}\"><b>{}</b> {}</span>",
                family.name(),
                escape(&short(family, x.mean)),
                escape(&name)
            ));
        }
    }
    // A one-way delay that is not exact is said so, with the clocks'
    // error, rather than left out without a word.
    if Family::OneWayDelay.measured_by(p.spec.kind()) {
        let f = RunFilter {
            source: Some(p.source.clone()),
            dest: p.dest.clone(),
            kind: Some(p.spec.kind().into()),
            state: Some(RunState::Finished),
            // Scheduled at most a day before it started (its slip).
            from_ms: Some(at.saturating_sub(86_400_000)),
            to_ms: Some(at.saturating_add(1)),
            limit: 10,
        };
        let latest = s.archive.runs(&f).await.ok().and_then(|runs| {
            runs.into_iter()
                .find(|r| r.measurement_key == key && r.start_ms.unwrap_or(r.scheduled_ms) == at)
        });
        if let Some(r) = latest.filter(|r| r.figures.owd_synchronized == Some(false)) {
            let error = r.figures.owd_clock_error_us.map_or(String::new(), |e| {
                format!(
                    ", the clocks' error {}",
                    goodput_core::catalogue::Quantity::Time.show(e / 1e6)
                )
            });
            figures.push(format!(
                "<span class=\"figure unsync\">one-way delay not exact (clocks not synchronised{})</span>",
                escape(&error)
            ));
        }
    }
    let ago = clock::now_ms().saturating_sub(at);
    format!(
        "<p class=\"latest\">Latest ({} ago, {} UTC): {}</p>",
        ago_text(ago),
        ms_rfc3339(at).get(..16).unwrap_or("").replace('T', " "),
        figures.join(" · ")
    )
}

/// The most measurements between two ends that no configured task names
/// one pair page shows.
const MAX_STORED_MEASUREMENTS: usize = 32;

/// The measurements between `a` and `b` (either way) the archive holds
/// runs of since `from_ms` that none of `configured` is, each as a task
/// made from its newest run (its task's name, ends, kind and spec; no
/// schedule, no lead) with the key its runs are filed under. At most
/// 1,000 runs each way are read, and [`MAX_STORED_MEASUREMENTS`] kept.
async fn stored_measurements(
    s: &Shared,
    a: &str,
    b: &str,
    configured: &[&PairTask],
    from_ms: u64,
) -> Vec<(PairTask, String)> {
    let mut seen: std::collections::HashSet<String> = configured
        .iter()
        .map(|p| measurement_key(&p.spec, &p.source, p.dest.as_deref()))
        .collect();
    let mut found = Vec::new();
    for (source, dest) in [(a, b), (b, a)] {
        let f = RunFilter {
            source: Some(source.to_owned()),
            dest: Some(dest.to_owned()),
            from_ms: Some(from_ms),
            limit: 1000,
            ..RunFilter::default()
        };
        let Ok(runs) = s.archive.runs(&f).await else {
            continue;
        };
        // Newest first: each measurement is made from its latest run.
        for r in runs {
            if found.len() >= MAX_STORED_MEASUREMENTS {
                return found;
            }
            if !seen.insert(r.measurement_key.clone()) {
                continue;
            }
            let Ok(spec) = crate::http::runs::read_spec(r.spec.clone()) else {
                continue;
            };
            found.push((
                PairTask {
                    task: r.task,
                    source: r.source,
                    dest: r.dest,
                    dest_has_agent: false,
                    lead: goodput_core::mesh::Lead::Source,
                    spec,
                    class: r.class,
                    repeat: goodput_core::schedule::Repeat::every(0, 0),
                    seed: 0,
                },
                r.measurement_key,
            ));
        }
    }
    found
}

/// The charts of one measurement, whose runs are filed under `key`.
async fn measurement_section(
    s: &Shared,
    p: &PairTask,
    key: &str,
    from: u64,
    to: u64,
    step: u64,
) -> Result<String, String> {
    let key = key.to_owned();
    let kind = p.spec.kind();
    let dest = p.dest.clone().unwrap_or_default();
    let a = &s.archive;
    let mut out = format!(
        "<section class=\"measurement charts\" data-task=\"{}\" data-source=\"{}\" data-dest=\"{}\"><h2>{}: {} → {} ({})</h2>",
        escape(&p.task),
        escape(&p.source),
        escape(&dest),
        escape(&p.task),
        escape(&p.source),
        escape(&dest),
        escape(kind.name())
    );
    out.push_str(&latest_line(s, p, &key).await);
    // Failures and non-starts, marked on every chart.
    let mut marks = Vec::new();
    for state in [RunState::Failed, RunState::NonStart, RunState::Missed] {
        let f = RunFilter {
            source: Some(p.source.clone()),
            dest: p.dest.clone(),
            kind: Some(kind.into()),
            state: Some(state),
            from_ms: Some(from),
            to_ms: Some(to),
            limit: 500,
        };
        for r in a
            .runs(&f)
            .await
            .map_err(|e| e.to_string())?
            .iter()
            .filter(|r| r.task == p.task)
        {
            marks.push(Mark {
                at_ms: r.start_ms.unwrap_or(r.scheduled_ms),
                color: if state == RunState::Failed {
                    palette::VERMILLION
                } else {
                    palette::PURPLE
                },
                title: format!(
                    "{} {}: {}",
                    state.as_str(),
                    ms_rfc3339(r.scheduled_ms),
                    r.reason.as_deref().unwrap_or("no reason given")
                ),
            });
        }
    }
    let series = |metric: Metric| {
        let key = key.clone();
        async move {
            a.series(&key, metric, from, to, Some(step))
                .await
                .map_err(|e| e.to_string())
        }
    };
    let link = |at: u64| {
        format!(
            "/ui/runs?source={}&dest={}&kind={}&from_ms={at}&to_ms={}",
            urlencode(&p.source),
            urlencode(&dest),
            kind,
            at.saturating_add(step)
        )
    };
    let line =
        |name: &str, color: &'static str, pts: &[goodput_archive::Point], scale: f64, unit: &str| Series {
            name: name.into(),
            color,
            style: Style::LineDots,
            points: pts
                .iter()
                .map(|x| Point {
                    at_ms: x.at_ms,
                    value: x.mean / scale,
                    title: Some(format!(
                        "{name} {}: {:.3} {unit} (mean of {} run{}; {:.3} to {:.3})",
                        ms_rfc3339(x.at_ms),
                        x.mean / scale,
                        x.count,
                        if x.count == 1 { "" } else { "s" },
                        x.min / scale,
                        x.max / scale
                    )),
                    link: Some(link(x.at_ms)),
                })
                .collect(),
        };
    let new_chart = |title: &str, unit: &str| {
        let mut c = Chart::new(title, unit, from, to);
        c.marks = marks.clone();
        c.gap_ms = step.saturating_mul(3).max(p.repeat.every.saturating_mul(3));
        c
    };
    if Family::Throughput.measured_by(kind) {
        let mut c = new_chart("Throughput", "Mbit/s");
        // Each chart's series are read at once (the pool has connections
        // to spare, and a year's aggregates take milliseconds each).
        let (up, down) = tokio::try_join!(series(Metric::ThroughputUp), series(Metric::ThroughputDown))?;
        c.series.push(line(
            &format!("{} → {}", p.source, dest),
            palette::BLUE,
            &up,
            1e6,
            "Mbit/s",
        ));
        if !down.is_empty() {
            c.series.push(line(
                &format!("{} → {}", dest, p.source),
                palette::ORANGE,
                &down,
                1e6,
                "Mbit/s",
            ));
        }
        out.push_str(&chart::svg(&c));
        let re = series(Metric::Retransmits).await?;
        if re.iter().any(|x| x.max > 0.0) || kind == goodput_core::kind::Kind::Iperf3.name() {
            let mut c = new_chart("TCP retransmits", "segments");
            c.series
                .push(line("retransmits", palette::VERMILLION, &re, 1.0, "segments"));
            out.push_str(&chart::svg(&c));
        }
    }
    if Family::Delay.measured_by(kind) {
        // A DNS run's round trip is a query and its reply.
        let title = if kind == goodput_core::kind::Kind::Dns.name() {
            "DNS resolution time"
        } else {
            "Round-trip delay"
        };
        let mut c = new_chart(title, "ms");
        let (lo, hi, med, p95, loss) = tokio::try_join!(
            series(Metric::DelayMin),
            series(Metric::DelayMax),
            series(Metric::DelayMedian),
            series(Metric::DelayP95),
            series(Metric::Loss)
        )?;
        let band: Vec<(u64, f64, f64)> = lo
            .iter()
            .filter_map(|l| {
                hi.iter()
                    .find(|h| h.at_ms == l.at_ms)
                    .map(|h| (l.at_ms, l.min / 1e3, h.max / 1e3))
            })
            .collect();
        c.bands.push(Band {
            name: "min to max".into(),
            color: palette::SKY,
            points: band,
        });
        c.series.push(line("median", palette::BLUE, &med, 1e3, "ms"));
        if !p95.is_empty() {
            c.series.push(line("p95", palette::PURPLE, &p95, 1e3, "ms"));
        }
        for x in loss.iter().filter(|x| x.max > 0.0) {
            c.marks.push(Mark {
                at_ms: x.at_ms,
                color: palette::ORANGE,
                title: format!(
                    "loss at {}: up to {:.3}% (mean {:.3}%)",
                    ms_rfc3339(x.at_ms),
                    x.max,
                    x.mean
                ),
            });
        }
        out.push_str(&chart::svg(&c));
    }
    if Family::OneWayDelay.measured_by(kind) {
        let (f, b) = tokio::try_join!(
            series(Metric::OwdForwardMedian),
            series(Metric::OwdBackwardMedian)
        )?;
        // Runs whose clocks were not synchronised have no one-way delay
        // (the gaps): their documents keep the relative figures, marked.
        if !f.is_empty() || !b.is_empty() || kind == goodput_core::kind::Kind::Owamp.name() {
            let mut c = new_chart("One-way delay (synchronised clocks)", "ms");
            c.series.push(line(
                &format!("{} → {}", p.source, dest),
                palette::BLUE,
                &f,
                1e3,
                "ms",
            ));
            if !b.is_empty() {
                c.series.push(line(
                    &format!("{} → {}", dest, p.source),
                    palette::ORANGE,
                    &b,
                    1e3,
                    "ms",
                ));
            }
            out.push_str(&chart::svg(&c));
        }
    }
    if Family::Loss.measured_by(kind) {
        let mut c = new_chart("Loss", "%");
        let (f, b) = tokio::try_join!(series(Metric::LossForward), series(Metric::LossBackward))?;
        c.series.push(line(
            &format!("{} → {}", p.source, dest),
            palette::BLUE,
            &f,
            1.0,
            "%",
        ));
        if !b.is_empty() {
            c.series.push(line(
                &format!("{} → {}", dest, p.source),
                palette::ORANGE,
                &b,
                1.0,
                "%",
            ));
        }
        out.push_str(&chart::svg(&c));
    }
    if Family::Jitter.measured_by(kind) {
        let mut c = new_chart("Jitter", "ms");
        let j = series(Metric::Jitter).await?;
        c.series.push(line("jitter", palette::GREEN, &j, 1e3, "ms"));
        out.push_str(&chart::svg(&c));
    }
    if Family::Errors.measured_by(kind) {
        let mut c = new_chart("Failures (lost queries, answers not as expected)", "failures");
        let e = series(Metric::Errors).await?;
        c.series
            .push(line("failures", palette::VERMILLION, &e, 1.0, "failures"));
        out.push_str(&chart::svg(&c));
    }
    if Family::Certificate.measured_by(kind) {
        let mut c = new_chart("Days until the certificate expires", "days");
        let d = series(Metric::CertDaysLeft).await?;
        c.series.push(line("days left", palette::GREEN, &d, 1.0, "days"));
        out.push_str(&chart::svg(&c));
        let t = series(Metric::HttpTotal).await?;
        if !t.is_empty() {
            let mut c = new_chart("HTTP request time (median, redirects included)", "ms");
            c.series.push(line("request", palette::BLUE, &t, 1e3, "ms"));
            out.push_str(&chart::svg(&c));
        }
    }
    if Family::Path.measured_by(kind) {
        let mut c = new_chart("Hops to the destination", "hops");
        let h = series(Metric::Hops).await?;
        c.series.push(line("hops", palette::BLUE, &h, 1.0, "hops"));
        out.push_str(&chart::svg(&c));
        let paths = a.paths(&key, from, to).await.map_err(|e| e.to_string())?;
        let _ = write!(
            out,
            "<p>{} distinct path{}, {} change{} in {} trace{}.</p><table class=\"list paths\"><tr><th>path checksum</th><th>hops</th><th>traces</th><th>first</th><th>last</th></tr>",
            paths.paths.len(),
            if paths.paths.len() == 1 { "" } else { "s" },
            paths.changes,
            if paths.changes == 1 { "" } else { "s" },
            paths.runs,
            if paths.runs == 1 { "" } else { "s" }
        );
        for x in &paths.paths {
            let _ = write!(
                out,
                "<tr><td><a href=\"/api/v1/runs/{}\"><code>{}</code></a></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                escape(&x.last_run),
                escape(&x.path_checksum),
                x.hops.map_or("not reached".into(), |h| h.to_string()),
                x.runs,
                ms_rfc3339(x.first_ms),
                ms_rfc3339(x.last_ms)
            );
        }
        out.push_str("</table>");
    }
    if !marks.is_empty() {
        let _ = write!(
            out,
            "<p>{} run{} failed or did not start in this range (marked ▲ under the charts; hover for the reason).</p>",
            marks.len(),
            if marks.len() == 1 { "" } else { "s" }
        );
    }
    out.push_str("</section>");
    Ok(out)
}

#[derive(Deserialize)]
struct RunsQuery {
    source: Option<String>,
    dest: Option<String>,
    kind: Option<String>,
    from_ms: Option<u64>,
    to_ms: Option<u64>,
    /// The agent that holds them: asked for its table, shown here.
    via: Option<String>,
    /// `table`: the table alone, without the page around it.
    part: Option<String>,
}

async fn runs_page(State(s): State<Ctx>, Query(q): Query<RunsQuery>) -> Response {
    if let Some(agent) = q.via.as_deref() {
        let loaded = s.loaded();
        let Some(peer) = loaded.peer(agent) else {
            return bad_request(format!("via: '{agent}' is not another agent of this mesh"));
        };
        let mut url = format!("{}/ui/runs?part=table", peer.url);
        for (k, v) in [
            ("source", q.source.clone()),
            ("dest", q.dest.clone()),
            ("kind", q.kind.clone()),
            ("from_ms", q.from_ms.map(|t| t.to_string())),
            ("to_ms", q.to_ms.map(|t| t.to_string())),
        ] {
            if let Some(v) = v {
                let _ = write!(url, "&{k}={}", urlencode(&v));
            }
        }
        let client = s.client(&peer);
        let body = match crate::http::grid::ask_peer(&client, &url, MAX_SECTIONS, "answer").await {
            // Each run's record stays on that agent.
            Ok(b) => format!(
                "<p class=\"via\">From {}'s agent (asked by this one).</p>{}",
                escape(agent),
                String::from_utf8_lossy(&b).replace(
                    "href=\"/api/v1/runs/",
                    &format!("href=\"{}/api/v1/runs/", escape(&peer.url))
                )
            ),
            Err(e) => format!(
                "<p class=\"warn\">The agent at {} did not answer: {}.</p>",
                escape(agent),
                escape(&e)
            ),
        };
        return page("runs", "", &who(&s), &body).into_response();
    }
    let f = RunFilter {
        source: q.source.clone(),
        dest: q.dest.clone().filter(|d| !d.is_empty()),
        kind: q.kind.clone(),
        from_ms: q.from_ms,
        to_ms: q.to_ms,
        limit: 1000,
        ..RunFilter::default()
    };
    // A point's runs are those that started in its step; the filter reads
    // the due time, so look a little earlier and keep the starts.
    let mut wide = f.clone();
    wide.from_ms = f.from_ms.map(|t| t.saturating_sub(3_600_000));
    let runs: Vec<Run> = match s.archive.runs(&wide).await {
        Ok(r) => r
            .into_iter()
            .filter(|r| {
                let t = r.start_ms.unwrap_or(r.scheduled_ms);
                f.from_ms.is_none_or(|a| t >= a) && f.to_ms.is_none_or(|b| t < b)
            })
            .collect(),
        Err(e) => return (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    };
    let mut body = format!(
        "<h1>Runs</h1><p>{} run{}.</p>",
        runs.len(),
        if runs.len() == 1 { "" } else { "s" }
    );
    let table_at = body.len();
    body.push_str("<table class=\"list runs\"><tr><th>run</th><th>state</th><th>started</th><th>figures</th><th>reason</th></tr>");
    for r in &runs {
        let figures = serde_json::to_value(&r.figures)
            .ok()
            .and_then(|v| v.as_object().cloned())
            .map(|o| {
                o.iter()
                    .filter(|(_, v)| !v.is_null())
                    .map(|(k, v)| format!("{k} {v}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .unwrap_or_default();
        let _ = write!(
            body,
            "<tr><td><a href=\"/api/v1/runs/{}\">{}</a></td><td>{}</td><td>{}</td><td><code>{}</code></td><td>{}</td></tr>",
            escape(&r.id),
            escape(&r.id),
            r.state.as_str(),
            r.start_ms.map(ms_rfc3339).unwrap_or_default(),
            escape(&figures),
            escape(r.reason.as_deref().unwrap_or(""))
        );
    }
    body.push_str("</table>");
    if q.part.as_deref() == Some("table") {
        return Html(body.split_off(table_at)).into_response();
    }
    page("runs", "", &who(&s), &body).into_response()
}

async fn alerts_page(State(s): State<Ctx>) -> Response {
    let now = clock::now_ms();
    let all = match s
        .archive
        .alerts(false, now.saturating_sub(7 * 86_400_000), u64::MAX, 1000)
        .await
    {
        Ok(a) => a,
        Err(e) => return (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    };
    let (open, ended): (Vec<_>, Vec<_>) = all.into_iter().partition(|a| a.end_ms.is_none());
    let mut body = format!("<h1>Alerts</h1><h2>Open ({})</h2>", open.len());
    body.push_str(&alerts_table(&alert_values(&s, &open)));
    let _ = write!(body, "<h2>Ended in the last 7 days ({})</h2>", ended.len());
    body.push_str(&alerts_table(&alert_values(&s, &ended)));
    page("alerts", "alerts", &who(&s), &body).into_response()
}

async fn host_page(State(s): State<Ctx>) -> Response {
    let health = match crate::http::status::health_view(&s).await {
        Ok(h) => serde_json::to_value(h).unwrap_or_default(),
        Err(_) => serde_json::Value::Null,
    };
    let now = clock::now_ms();
    let (from, to) = (now.saturating_sub(30 * 60_000), now.saturating_add(90 * 60_000));
    let cal = crate::http::schedule::schedule_view(&s, from, to);
    let mut body = String::from("<h1>This agent</h1><table class=\"list health\" id=\"health\">");
    let row = |body: &mut String, k: &str, v: String| {
        let _ = write!(body, "<tr><th>{}</th><td>{}</td></tr>", escape(k), escape(&v));
    };
    let get = |k: &str| health.get(k).cloned().unwrap_or_default();
    let text = |v: serde_json::Value| match v {
        serde_json::Value::String(s) => s,
        serde_json::Value::Null => "none".into(),
        o => o.to_string(),
    };
    let names = |v: serde_json::Value| match v {
        serde_json::Value::Array(a) if a.is_empty() => "none".to_string(),
        serde_json::Value::Array(a) => a.into_iter().map(text).collect::<Vec<_>>().join(", "),
        o => text(o),
    };
    row(&mut body, "identity", names(get("identity")));
    row(&mut body, "version", text(get("version")));
    row(
        &mut body,
        "up for",
        duration_words(get("uptime_s").as_u64().unwrap_or(0).saturating_mul(1_000_000)),
    );
    let clock = get("clock");
    row(
        &mut body,
        "clock",
        clock_words(
            clock["synchronised"] == true,
            clock["estimated_error_us"].as_i64().unwrap_or(0),
            clock["maximum_error_us"].as_i64().unwrap_or(0),
        ),
    );
    let steps = get("clock_steps");
    if let Some(n) = steps["count"].as_u64().filter(|n| *n > 0) {
        row(
            &mut body,
            "clock steps",
            format!(
                "{n} seen; the last at {}, by {}",
                text(steps["last_at"].clone()),
                duration_words(
                    steps["last_ms"]
                        .as_i64()
                        .unwrap_or(0)
                        .unsigned_abs()
                        .saturating_mul(1000)
                )
            ),
        );
    }
    let ret = s.options.retention;
    row(
        &mut body,
        "archive",
        format!(
            "{} runs in {} (kept: {} days, at most {})",
            text(get("archive_runs")),
            goodput_core::units::format_size(get("archive_bytes").as_u64().unwrap_or(0)),
            ret.max_age_ms / 86_400_000,
            goodput_core::units::format_size(ret.max_bytes)
        ),
    );
    row(
        &mut body,
        "queues",
        format!(
            "{} runs booked, {} running, {} held for peers",
            text(get("booked")),
            text(get("running")),
            text(get("held_for_peers"))
        ),
    );
    row(&mut body, "configuration", text(get("config_source")));
    row(&mut body, "loaded", text(get("config_loaded")));
    row(&mut body, "last load's error", text(get("config_error")));
    row(&mut body, "beacon error", text(get("beacon_error")));
    {
        let st = s.alerting();
        row(
            &mut body,
            "alerts",
            format!(
                "{} open; rules last evaluated {}{}",
                st.open().len(),
                if st.evaluated_ms == 0 {
                    "never".into()
                } else {
                    ms_rfc3339(st.evaluated_ms)
                },
                st.error
                    .as_ref()
                    .map(|e| format!(" (error: {e})"))
                    .unwrap_or_default()
            ),
        );
        let d = st.delivery;
        row(
            &mut body,
            "alert deliveries",
            format!(
                "{} sent, {} queued (at most {}), {} failed attempts, {} given up, {} dropped",
                d.sent,
                d.queued,
                crate::state::alerts::MAX_QUEUE,
                d.failed_attempts,
                d.given_up,
                d.dropped
            ),
        );
    }
    row(&mut body, "counters", counter_words(&get("counters")));
    body.push_str("</table><h2>Schedule</h2>");
    body.push_str(&timeline(&cal, now));
    // Non-starts of the last day, with their reasons.
    let mut non = Vec::new();
    for state in [RunState::NonStart, RunState::Missed] {
        let f = RunFilter {
            state: Some(state),
            from_ms: Some(now.saturating_sub(86_400_000)),
            limit: 200,
            ..RunFilter::default()
        };
        non.extend(s.archive.runs(&f).await.unwrap_or_default());
    }
    non.sort_by_key(|r| std::cmp::Reverse(r.scheduled_ms));
    let _ = write!(body, "<h2>Runs that did not start (last day: {})</h2>", non.len());
    body.push_str(
        "<table class=\"list nonstarts\"><tr><th>run</th><th>due</th><th>state</th><th>reason</th></tr>",
    );
    for r in non.iter().take(200) {
        let _ = write!(
            body,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(&r.id),
            ms_rfc3339(r.scheduled_ms),
            r.state.as_str(),
            escape(r.reason.as_deref().unwrap_or(""))
        );
    }
    body.push_str("</table>");
    page("host", "host", &who(&s), &body).into_response()
}

/// A length of time in microseconds in words, in its largest sensible
/// unit: "850 µs", "3.2 ms", "16 s", "5 min", "2 h 5 min", "3 d 4 h".
pub(crate) fn duration_words(us: u64) -> String {
    let short = |x: f64, unit: &str| {
        let t = if x >= 10.0 {
            format!("{x:.0}")
        } else {
            format!("{x:.1}")
        };
        format!("{} {unit}", t.strip_suffix(".0").unwrap_or(&t))
    };
    let s = us / 1_000_000;
    match us {
        0..1_000 => format!("{us} µs"),
        1_000..1_000_000 => short(us as f64 / 1e3, "ms"),
        1_000_000..60_000_000 => short(us as f64 / 1e6, "s"),
        60_000_000..3_600_000_000 => format!("{} min", s / 60),
        3_600_000_000..86_400_000_000 => format!("{} h {} min", s / 3_600, s % 3_600 / 60),
        _ => format!("{} d {} h", s / 86_400, s % 86_400 / 3_600),
    }
}

/// The kernel clock's state in words, with what it means for the
/// measurements when it is not synchronised.
pub(crate) fn clock_words(synchronised: bool, estimated_us: i64, maximum_us: i64) -> String {
    let est = duration_words(estimated_us.max(0).unsigned_abs());
    let max = duration_words(maximum_us.max(0).unsigned_abs());
    if synchronised {
        format!("synchronised: estimated error {est}, at most {max}")
    } else {
        format!(
            "{max} — the clock is not synchronised; one-way delays are not exact until chrony or ntpd synchronises it \
             (its maximum error; estimated {est})"
        )
    }
}

/// The agent's counters in words ("booked 3, non starts 1, …"), the
/// ones not yet counted left out.
fn counter_words(v: &serde_json::Value) -> String {
    let Some(o) = v.as_object() else {
        return "none".into();
    };
    let said: Vec<String> = o
        .iter()
        .filter_map(|(k, v)| {
            v.as_u64()
                .filter(|n| *n > 0)
                .map(|n| format!("{} {n}", k.replace('_', " ")))
        })
        .collect();
    if said.is_empty() {
        "none counted yet".into()
    } else {
        said.join(", ")
    }
}

/// The calendar as a timeline: a lane per class, the free slots for an
/// exclusive run, and a line at now.
fn timeline(cal: &crate::http::schedule::ScheduleView, now: u64) -> String {
    let (w, lane) = (900.0f64, 22.0f64);
    let left = 110.0;
    let span = cal.to_ms.saturating_sub(cal.from_ms).max(1) as f64;
    let x = |t: u64| left + (t.clamp(cal.from_ms, cal.to_ms) - cal.from_ms) as f64 / span * (w - left - 10.0);
    let lanes = ["exclusive", "normal", "background", "free"];
    let h = 30.0 + lane * lanes.len() as f64 + 20.0;
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"11\" class=\"timeline\" id=\"timeline\">"
    );
    for (i, name) in lanes.iter().enumerate() {
        let y = 20.0 + lane * i as f64;
        let _ = write!(s, "<text x=\"4\" y=\"{:.1}\">{name}</text><line x1=\"{left}\" x2=\"{:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"#eee\"/>", y + 14.0, w - 10.0, y + lane, y + lane);
    }
    for r in &cal.runs {
        let i = match r.class {
            goodput_core::schedule::RunClass::Exclusive => 0,
            goodput_core::schedule::RunClass::Normal => 1,
            goodput_core::schedule::RunClass::Background => 2,
        };
        let y = 22.0 + lane * i as f64;
        let (a, b) = (x(r.start_ms), x(r.end_ms));
        let color = if r.started { palette::BLUE } else { palette::SKY };
        let _ = write!(
            s,
            "<rect x=\"{a:.1}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{color}\" class=\"booking\"><title>{} ({}): {} to {}{}</title></rect>",
            (b - a).max(1.5),
            lane - 6.0,
            escape(&r.id),
            if r.runs_here { "runs here" } else { "held for a peer" },
            ms_rfc3339(r.start_ms),
            ms_rfc3339(r.end_ms),
            if r.started { ", under way" } else { "" }
        );
    }
    for (a0, b0) in &cal.free {
        let y = 22.0 + lane * 3.0;
        let (a, b) = (x(*a0), x(*b0));
        let _ = write!(
            s,
            "<rect x=\"{a:.1}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{}\" fill-opacity=\"0.5\" class=\"free\"><title>free for an exclusive run: {} to {}</title></rect>",
            (b - a).max(1.0),
            lane - 6.0,
            palette::GREEN,
            ms_rfc3339(*a0),
            ms_rfc3339(*b0)
        );
    }
    let nx = x(now);
    let _ = write!(
        s,
        "<line x1=\"{nx:.1}\" x2=\"{nx:.1}\" y1=\"14\" y2=\"{:.1}\" stroke=\"{}\" stroke-width=\"1.5\"/><text x=\"{nx:.1}\" y=\"11\" text-anchor=\"middle\">now</text>",
        h - 18.0,
        palette::VERMILLION
    );
    let span_ms = cal.to_ms - cal.from_ms;
    for i in 0..=8u64 {
        let t = cal.from_ms + span_ms * i / 8;
        // The last label ends at the axis' end (centred, it was cut off).
        let anchor = if i == 8 { "end" } else { "middle" };
        let _ = write!(
            s,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"{anchor}\" class=\"tick\">{}</text>",
            x(t),
            h - 4.0,
            chart::time_label(t, span_ms)
        );
    }
    s.push_str("</svg>");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_ranges_are_whole_hours_and_short_ones_end_now() {
        let now = 1_700_000_123_456;
        for (_, r) in RANGES {
            let (from, to, step) = span_of(r, now);
            assert!(to > now && from < now);
            assert!((to - from) / step <= 320, "{r}: {} points", (to - from) / step);
            if r >= 3 * 86_400_000 {
                assert_eq!((from % HOUR, to % HOUR, step % HOUR), (0, 0, 0));
            }
        }
    }

    #[test]
    fn clock_errors_read_in_sensible_units_with_a_hint() {
        assert_eq!(
            clock_words(false, 16_000_000, 16_000_000),
            "16 s — the clock is not synchronised; one-way delays are not exact until chrony or ntpd \
             synchronises it (its maximum error; estimated 16 s)"
        );
        assert_eq!(
            clock_words(true, 850, 3_200),
            "synchronised: estimated error 850 µs, at most 3.2 ms"
        );
        assert_eq!(duration_words(125_000_000), "2 min");
        assert_eq!(duration_words(7_500 * 1_000_000), "2 h 5 min");
        assert_eq!(duration_words(1_500_000), "1.5 s");
        assert_eq!(duration_words(u64::MAX), "213503982 d 8 h");
    }

    #[test]
    fn alerts_show_their_task_and_thresholds_in_words_when_they_carry_them() {
        let a = serde_json::json!({"severity": "warning", "metric": "loss", "task": "lat", "source": "a",
            "dest": "b", "direction": "forward", "rule": "loss", "threshold": "loss = 0.200% (outside ~:0)",
            "start_ms": 0, "end_ms": null,
            "thresholds_text": "warning when loss is above 0 %, critical when at or above 1 %"});
        let t = alerts_table(std::slice::from_ref(&a));
        assert!(
            t.contains("<th>task</th>") && t.contains("<td class=\"task\">lat</td>"),
            "{t}"
        );
        assert!(
            t.contains(
                "<td class=\"thresholds\">warning when loss is above 0 %, critical when at or above 1 %</td>"
            ),
            "{t}"
        );
        // An alert without the words (an older agent's): the rule's name.
        let mut old = a;
        old.as_object_mut().unwrap().remove("thresholds_text");
        let t = alerts_table(&[old]);
        assert!(t.contains("<td class=\"thresholds\">rule loss</td>"), "{t}");
    }

    #[test]
    fn names_in_links_are_encoded() {
        assert_eq!(urlencode("a b&c/ü"), "a%20b%26c%2F%C3%BC");
    }
}
