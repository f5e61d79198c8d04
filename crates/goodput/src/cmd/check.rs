//! `goodput check`: one line and an exit status for Nagios or Icinga,
//! from a pair's metric over a window in an agent's archive (perfSONAR's
//! `check_owdelay` / `check_throughput` role).

use super::{runtime, Stop};
use crate::flags::{CheckArgs, StatArg};
use goodput_core::check::{state_of, CheckMetric, Range, State, Statistic};
use std::time::Duration;

/// Runs the check; never an error: every failure is the UNKNOWN state.
pub(crate) fn check(args: &CheckArgs) -> Result<u8, Stop> {
    let name = args.metric.to_uppercase();
    let (state, text, perf) = match evaluate(args) {
        Ok(r) => r,
        Err(why) => (State::Unknown, why, String::new()),
    };
    let perf = if perf.is_empty() {
        perf
    } else {
        format!(" | {perf}")
    };
    // `|` starts the performance data: none in the text (an agent's
    // message, a key), and one line.
    let text: String = text
        .chars()
        .map(|c| if c == '|' || c.is_control() { '/' } else { c })
        .collect();
    goodput_report::console_line(&format!("GOODPUT {name} {state} - {text}{perf}"));
    Ok(state.code())
}

fn evaluate(args: &CheckArgs) -> Result<(State, String, String), String> {
    let metric = CheckMetric::named(&args.metric)?;
    let range = |flag: &str, t: &Option<String>| {
        t.as_deref()
            .map(|t| Range::parse(t, &metric).map_err(|e| format!("--{flag} {e}")))
            .transpose()
    };
    let warning = range("warning", &args.warning)?;
    let critical = range("critical", &args.critical)?;
    if args.key.is_none() && (args.source.is_none() || args.dest.is_none()) {
        return Err("name the pair with --source and --dest (or a measurement with --key)".into());
    }
    if args.window.0.is_zero() {
        return Err("--window must be above zero".into());
    }
    let kind = args.kind.clone().unwrap_or_else(|| metric.kind.name().to_owned());
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let from = now.saturating_sub(args.window.0.as_millis() as u64);
    let mut query = vec![
        ("metric", metric.name.to_owned()),
        ("from_ms", from.to_string()),
        ("to_ms", (now + 1).to_string()),
    ];
    match &args.key {
        Some(k) => query.push(("key", k.clone())),
        None => {
            query.push(("source", args.source.clone().unwrap_or_default()));
            query.push(("dest", args.dest.clone().unwrap_or_default()));
            query.push(("kind", kind.clone()));
        }
    }
    let base = args.agent.trim_end_matches('/').to_owned();
    let timeout = args.timeout.0.max(Duration::from_millis(1));
    let pin = args.pin.clone();
    let rt = runtime().map_err(|_| "cannot start the async runtime".to_owned())?;
    let answer: Result<(u16, serde_json::Value), String> = rt.block_on(async move {
        let mut builder = reqwest::Client::builder().timeout(timeout);
        if let Some(pin) = &pin {
            let tls = goodput_agent::pinned_tls(pin).map_err(|e| format!("--pin {e}"))?;
            builder = builder.use_preconfigured_tls(tls);
        }
        let http = builder.build().map_err(|e| e.to_string())?;
        let r = http
            .get(format!("{base}/api/v1/series"))
            .query(&query)
            .send()
            .await
            .map_err(|e| format!("cannot reach the agent at {base}: {}", root_cause(&e)))?;
        let status = r.status().as_u16();
        // A series answer is bounded too: at most 64 MiB read.
        Ok((status, goodput_agent::json_capped(r, 64 << 20).await))
    });
    let (status, v) = answer?;
    let pair = match &args.key {
        Some(k) => format!("measurement {k}"),
        None => format!(
            "{} -> {}, {kind}",
            args.source.as_deref().unwrap_or(""),
            args.dest.as_deref().unwrap_or("")
        ),
    };
    let window = humanize(args.window.0);
    if status == 404 {
        return Err(format!("no finished run ({pair}) in the agent's archive"));
    }
    if status != 200 {
        let why = v["error"].as_str().unwrap_or("no reason given");
        return Err(format!("the agent answered HTTP {status}: {why}"));
    }
    let points: Vec<(u64, u64, f64, f64, f64)> = v["points"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| {
            Some((
                p["at_ms"].as_u64()?,
                p["count"].as_u64()?,
                p["min"].as_f64()?,
                p["mean"].as_f64()?,
                p["max"].as_f64()?,
            ))
        })
        .collect();
    let runs = points.iter().fold(0u64, |n, p| n.saturating_add(p.1));
    let stat = match args.stat {
        StatArg::Mean => Statistic::Mean,
        StatArg::Min => Statistic::Min,
        StatArg::Max => Statistic::Max,
        StatArg::Last => Statistic::Last,
    };
    let Some(value) = stat.of(&points) else {
        return Err(format!("no result in the last {window} ({pair})"));
    };
    let state = state_of(value, warning.as_ref(), critical.as_ref());
    let how = match args.stat {
        StatArg::Mean => "mean",
        StatArg::Min => "smallest",
        StatArg::Max => "largest",
        StatArg::Last => "newest",
    };
    let text = format!(
        "{} {} ({how} of {runs} runs in the last {window}, {pair})",
        metric.name,
        metric.show(value)
    );
    let th = |r: &Option<Range>| r.as_ref().map_or(String::new(), |r| r.perf(&metric));
    let perf = format!(
        "{}={}{};{};{} runs={runs}",
        metric.name,
        metric.perf(value),
        metric.uom,
        th(&warning),
        th(&critical)
    );
    Ok((state, text, perf))
}

/// The innermost cause of an error ("Connection refused (os error 111)",
/// "operation timed out"): a plugin's line is read on a status page, and
/// reqwest's outer texts repeat the URL.
fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut last: &(dyn std::error::Error + 'static) = e;
    while let Some(x) = last.source() {
        last = x;
    }
    last.to_string()
}

fn humanize(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        s if s % 86_400 == 0 && s >= 172_800 => format!("{} d", s / 86_400),
        s if s % 3600 == 0 && s > 0 => format!("{} h", s / 3600),
        s if s % 60 == 0 && s > 0 => format!("{} min", s / 60),
        _ => format!("{:.3} s", d.as_secs_f64()),
    }
}
