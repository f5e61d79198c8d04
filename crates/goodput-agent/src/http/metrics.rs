//! `/metrics`: the agent's counters and the latest figures of each
//! measurement as OpenMetrics text.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Extension;

use crate::http::listen::Gate;

use super::status::shown;
use super::{internal, Ctx, Failure};

/// The latest figures per measurement, run counts, archive size and the
/// clock, in the OpenMetrics text format.
pub(crate) async fn metrics(
    State(s): State<Ctx>,
    Extension(gate): Extension<Arc<Gate>>,
) -> Result<Response, Failure> {
    let by_state = s.archive.count_by_state().await.map_err(internal)?;
    let bytes = s.archive.size_bytes().await.map_err(internal)?;
    let forwarding = shown(s.forwarding().await);
    let clock = crate::clock::state();
    let mut out = String::new();
    out += "# TYPE goodput_agent_runs gauge\n# HELP goodput_agent_runs Runs in the archive by state.\n";
    let counts: BTreeMap<&str, u64> = by_state.iter().map(|(st, n)| (st.as_str(), *n)).collect();
    for st in [
        "scheduled",
        "running",
        "finished",
        "failed",
        "missed",
        "non_start",
        "cancelled",
    ] {
        out += &format!(
            "goodput_agent_runs{{state=\"{st}\"}} {}\n",
            counts.get(st).unwrap_or(&0)
        );
    }
    let c = gate.counters();
    out += "# TYPE goodput_agent_api_connections gauge\n# HELP goodput_agent_api_connections The API's connections open now.\n";
    out += &format!("goodput_agent_api_connections {}\n", c.open);
    out += "# TYPE goodput_agent_api_connections_max gauge\n";
    out += &format!("goodput_agent_api_connections_max {}\n", c.max);
    out += "# TYPE goodput_agent_api_refused counter\n# HELP goodput_agent_api_refused Connections and requests the API turned away, by limit.\n";
    for (limit, n) in [
        ("connections_per_address", c.refused_per_address),
        ("connections_full", c.refused_full),
        ("evicted", c.evicted),
        ("requests_per_address", c.requests_refused_per_address),
        ("max_requests", c.requests_refused_busy),
        ("body_timeout", c.slow_bodies),
        ("before_body", c.refused_before_body),
    ] {
        out += &format!("goodput_agent_api_refused_total{{limit=\"{limit}\"}} {n}\n");
    }
    out += "# TYPE goodput_agent_archive_bytes gauge\n# UNIT goodput_agent_archive_bytes bytes\n";
    out += &format!("goodput_agent_archive_bytes {bytes}\n");
    let (full, _, held, given_up) = s.archive_writes();
    out += "# TYPE goodput_agent_archive_disk_full gauge\n\
            # HELP goodput_agent_archive_disk_full 1 while the archive's disk is full (writes refused).\n";
    out += &format!("goodput_agent_archive_disk_full {}\n", u8::from(full));
    out += "# TYPE goodput_agent_archive_held_runs gauge\n\
            # HELP goodput_agent_archive_held_runs The agent's own runs held in memory until the archive takes them.\n";
    out += &format!("goodput_agent_archive_held_runs {held}\n");
    out += "# TYPE goodput_agent_archive_runs_given_up counter\n\
            # HELP goodput_agent_archive_runs_given_up Held runs given up for room.\n";
    out += &format!("goodput_agent_archive_runs_given_up_total {given_up}\n");
    out += "# TYPE goodput_agent_clock_synchronised gauge\n";
    out += &format!(
        "goodput_agent_clock_synchronised {}\n",
        u8::from(clock.synchronised)
    );
    out +=
        "# TYPE goodput_agent_clock_error_seconds gauge\n# UNIT goodput_agent_clock_error_seconds seconds\n";
    out += &format!(
        "goodput_agent_clock_error_seconds {}\n",
        clock.estimated_error_us as f64 / 1e6
    );
    let inner = s.lock();
    out += "# TYPE goodput_agent_booked gauge\n";
    out += &format!("goodput_agent_booked {}\n", inner.book.booked.len());
    out += "# TYPE goodput_agent_running gauge\n";
    out += &format!("goodput_agent_running {}\n", inner.running);
    out += "# TYPE goodput_agent_running_background gauge\n";
    out += &format!("goodput_agent_running_background {}\n", inner.running_background);
    out += "# TYPE goodput_agent_config_error gauge\n";
    out += &format!(
        "goodput_agent_config_error {}\n",
        u8::from(inner.config_error.is_some())
    );
    out += "# TYPE goodput_agent_non_starts counter\n";
    out += &format!("goodput_agent_non_starts_total {}\n", inner.counters.non_starts);
    out += "# TYPE goodput_agent_refused counter\n";
    out += &format!("goodput_agent_refused_total {}\n", inner.counters.refused);
    out += "# TYPE goodput_agent_refused_writes counter\n# HELP goodput_agent_refused_writes Writes refused, by why: not the record's owner, a figure out of range, over the requester's write quota, a spec asking for what on-demand runs may not.\n";
    for (why, n) in [
        ("not_owner", inner.counters.refused_not_owner),
        ("out_of_range", inner.counters.refused_out_of_range),
        ("write_quota", inner.counters.refused_write_quota),
        ("spec", inner.counters.refused_spec),
    ] {
        out += &format!("goodput_agent_refused_writes_total{{why=\"{why}\"}} {n}\n");
    }
    let esc = |v: &str| v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n");
    if s.is_archive() {
        out += "# TYPE goodput_archive_ingested counter\n# HELP goodput_archive_ingested Runs stored from agents' forwarded batches.\n";
        out += &format!("goodput_archive_ingested_total {}\n", inner.counters.ingested);
        out += "# TYPE goodput_archive_ingest_refused counter\n# HELP goodput_archive_ingest_refused Forwarded runs or batches refused as malformed.\n";
        out += &format!(
            "goodput_archive_ingest_refused_total {}\n",
            inner.counters.ingest_refused
        );
        out += "# TYPE goodput_archive_pscheduler_ingested counter\n\
                # HELP goodput_archive_pscheduler_ingested perfSONAR pScheduler results stored.\n";
        out += &format!(
            "goodput_archive_pscheduler_ingested_total {}\n",
            inner.counters.pscheduler_ingested
        );
        out += "# TYPE goodput_archive_pscheduler_refused counter\n\
                # HELP goodput_archive_pscheduler_refused perfSONAR pScheduler results refused \
                (malformed, or of a type goodput does not map).\n";
        out += &format!(
            "goodput_archive_pscheduler_refused_total {}\n",
            inner.counters.pscheduler_refused
        );
    }
    if !forwarding.is_empty() {
        out += "# TYPE goodput_forward_backlog_runs gauge\n# HELP goodput_forward_backlog_runs Runs queued for an archive.\n";
        for f in &forwarding {
            out += &format!(
                "goodput_forward_backlog_runs{{archive=\"{}\"}} {}\n",
                esc(&f.url),
                f.backlog
            );
        }
        out += "# TYPE goodput_forward_backlog_age_seconds gauge\n# UNIT goodput_forward_backlog_age_seconds seconds\n\
                # HELP goodput_forward_backlog_age_seconds How long the oldest queued run has waited.\n";
        for f in &forwarding {
            out += &format!(
                "goodput_forward_backlog_age_seconds{{archive=\"{}\"}} {}\n",
                esc(&f.url),
                f.backlog_age_s
            );
        }
        for (name, help, get) in [
            (
                "goodput_forward_delivered",
                "Runs an archive said it stored.",
                (|f| f.delivered) as fn(&crate::state::forward::ForwardStatus) -> u64,
            ),
            (
                "goodput_forward_failures",
                "Batches that failed, each retried.",
                |f| f.failures,
            ),
            (
                "goodput_forward_dropped",
                "Runs dropped from the queue (its limit, or refused as malformed).",
                |f| f.dropped,
            ),
            (
                "goodput_forward_not_sent",
                "Runs taken off the queue unsent: the archive has no place for their kind.",
                |f| f.not_sent,
            ),
        ] {
            out += &format!("# TYPE {name} counter\n# HELP {name} {help}\n");
            for f in &forwarding {
                out += &format!("{name}_total{{archive=\"{}\"}} {}\n", esc(&f.url), get(f));
            }
        }
    }
    // The figures carry no timestamps: the scrape's time is theirs.
    // Prometheus refuses a sample older than its head block ("too old"),
    // so a run's own time would hide a six-hourly figure for most of its
    // life; that time is a gauge of its own instead.
    let labels = |l: &crate::state::Latest| {
        format!(
            "task=\"{}\",source=\"{}\",dest=\"{}\",kind=\"{}\"",
            esc(&l.task),
            esc(&l.source),
            esc(&l.dest),
            esc(&l.kind)
        )
    };
    out += "# TYPE goodput_run_timestamp_seconds gauge\n# UNIT goodput_run_timestamp_seconds seconds\n\
            # HELP goodput_run_timestamp_seconds When the run the measurement's figures are from started (Unix time).\n";
    for l in inner.latest.values() {
        out += &format!(
            "goodput_run_timestamp_seconds{{{}}} {}\n",
            labels(l),
            l.at_ms as f64 / 1000.0
        );
    }
    // The figures' families, each as the catalogue exports it.
    for (series, e) in goodput_core::catalogue::SERIES
        .iter()
        .filter_map(|s| s.exported.map(|e| (s, e)))
    {
        let name = e.name;
        out += &format!("# TYPE {name} gauge\n# HELP {name} {}\n", e.help);
        if !e.unit.is_empty() {
            out += &format!("# UNIT {name} {}\n", e.unit);
        }
        for l in inner.latest.values() {
            if let Some(v) = l.figures.value(series).map(|v| v / e.per) {
                out += &format!("{name}{{{}}} {v}\n", labels(l));
            }
        }
    }
    out += "# EOF\n";
    Ok((
        [(
            axum::http::header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        out,
    )
        .into_response())
}
