//! Soft-failure alerting, the pure part: the mesh configuration's
//! `[alerts]` section (rules, where alerts go, maintenance windows), the
//! built-in rules, thresholds relative to a pair's own baseline, and the
//! hysteresis that keeps a state from flapping.
//!
//! A rule watches one metric family of every measurement it covers, in
//! each direction the measurement has: over a window it reduces the runs
//! to one value by a statistic, compares it with a warning and a critical
//! threshold, and a new state must hold for `hold` evaluations in a row
//! before it is taken.
//!
//! Thresholds are ranges in the Nagios plugin grammar of `goodput check`
//! (`[@][START:][END]`, an alert outside START..END, or inside with `@`),
//! with the metric's units (`900Mbit`, `5ms`, `1%`, or bare in Mbit/s, ms
//! or %). An end may also be relative to the pair's baseline (the median
//! of its runs over `baseline`, 7 days by default): `0.7x` is 0.7 times
//! the baseline, `1.5x+1ms` half as much again and a millisecond more.
//! So `0.7x:` alerts below 70% of the pair's usual throughput, `~:0` on
//! any loss, `@1:` at 1% and above.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::catalogue;
use crate::check::{CheckMetric, Range};
use crate::schedule::Ms;
use crate::spec::SpecError;

/// What the grid shows and a rule watches.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Family {
    /// Good-put, each direction.
    Throughput,
    /// Packet loss, each direction where the test tells them apart.
    Loss,
    /// Median round-trip delay.
    Delay,
    /// Median one-way delay, each direction, from synchronised clocks
    /// only (a run whose clocks were not has no value: it is never
    /// alerted on as if it were exact).
    OneWayDelay,
    /// Jitter.
    Jitter,
    /// Path changes seen by traces.
    Path,
    /// Failures a run counts (the archive's `errors`): for DNS, the
    /// queries with no reply and the answers that did not hold what was
    /// expected, so a rule on it says an answer stopped matching.
    Errors,
    /// Days until a server's certificate (the first of its chain)
    /// expires: a threshold such as `< 14` is a certificate expiring
    /// within 14 days.
    Certificate,
}

impl Family {
    /// Every family, in the grid's order.
    pub const ALL: [Family; 8] = [
        Family::Throughput,
        Family::Loss,
        Family::Delay,
        Family::OneWayDelay,
        Family::Jitter,
        Family::Path,
        Family::Errors,
        Family::Certificate,
    ];

    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            Family::Throughput => "throughput",
            Family::Loss => "loss",
            Family::Delay => "delay",
            Family::OneWayDelay => "one_way_delay",
            Family::Jitter => "jitter",
            Family::Path => "path",
            Family::Errors => "errors",
            Family::Certificate => "certificate",
        }
    }

    /// What its value is, in a sentence's words.
    pub fn words(self) -> &'static str {
        match self {
            Family::Throughput => "throughput",
            Family::Loss => "loss",
            Family::Delay => "the round-trip delay",
            Family::OneWayDelay => "the one-way delay",
            Family::Jitter => "jitter",
            Family::Path => "the count of path changes",
            Family::Errors => "the count of failures",
            Family::Certificate => "the days until the certificate expires",
        }
    }

    /// Its name in headings.
    pub fn title(self) -> &'static str {
        match self {
            Family::Throughput => "Throughput",
            Family::Loss => "Loss",
            Family::Delay => "Delay",
            Family::OneWayDelay => "One-way delay",
            Family::Jitter => "Jitter",
            Family::Path => "Path",
            Family::Errors => "Errors",
            Family::Certificate => "Certificate",
        }
    }

    /// The family of a name.
    pub fn named(name: &str) -> Result<Self, String> {
        Family::ALL.into_iter().find(|f| f.name() == name).ok_or_else(|| {
            let names: Vec<&str> = Family::ALL.iter().map(|f| f.name()).collect();
            format!("no metric '{name}'; the metrics are {}", names.join(", "))
        })
    }

    /// Whether a test of this kind measures it.
    pub fn measured_by(self, kind: crate::kind::Kind) -> bool {
        kind.families().contains(&self)
    }

    /// Whether it has a figure per direction (else one for the pair's
    /// round trip, or for the path the source traced).
    pub fn directional(self) -> bool {
        matches!(self, Family::Throughput | Family::Loss | Family::OneWayDelay)
    }

    /// The archive's metric (its API name) for a direction: `None` where
    /// the family has no such figure.
    pub fn archive_metric(self, d: Direction) -> Option<&'static str> {
        match (self, d) {
            (Family::Throughput, Direction::Forward) => Some(catalogue::THROUGHPUT_UP.name),
            (Family::Throughput, Direction::Backward) => Some(catalogue::THROUGHPUT_DOWN.name),
            (Family::Loss, Direction::Forward) => Some(catalogue::LOSS_FORWARD.name),
            (Family::Loss, Direction::Backward) => Some(catalogue::LOSS_BACKWARD.name),
            (Family::Delay, Direction::RoundTrip) => Some(catalogue::DELAY_MEDIAN.name),
            (Family::OneWayDelay, Direction::Forward) => Some(catalogue::OWD_FORWARD_MEDIAN.name),
            (Family::OneWayDelay, Direction::Backward) => Some(catalogue::OWD_BACKWARD_MEDIAN.name),
            (Family::Jitter, Direction::RoundTrip) => Some(catalogue::JITTER.name),
            (Family::Path, Direction::Forward) => Some(catalogue::HOPS.name),
            (Family::Errors, Direction::RoundTrip) => Some(catalogue::ERRORS.name),
            (Family::Certificate, Direction::Forward) => Some(catalogue::CERT_DAYS_LEFT.name),
            _ => None,
        }
    }

    /// The directions it has.
    pub fn directions(self) -> &'static [Direction] {
        match self {
            Family::Throughput | Family::Loss | Family::OneWayDelay => {
                &[Direction::Forward, Direction::Backward]
            }
            Family::Delay | Family::Jitter => &[Direction::RoundTrip],
            Family::Path => &[Direction::Forward],
            Family::Errors => &[Direction::RoundTrip],
            Family::Certificate => &[Direction::Forward],
        }
    }

    /// Its units, as thresholds take them.
    pub fn unit(self) -> CheckMetric {
        let figure = match self {
            Family::Throughput => &catalogue::THROUGHPUT_UP,
            Family::Loss => &catalogue::LOSS,
            Family::Delay => &catalogue::DELAY_MEDIAN,
            Family::OneWayDelay => &catalogue::OWD_FORWARD_MEDIAN,
            Family::Jitter => &catalogue::JITTER,
            Family::Path => &catalogue::HOPS,
            Family::Errors => &catalogue::ERRORS,
            Family::Certificate => &catalogue::CERT_DAYS_LEFT,
        };
        CheckMetric::of(figure).expect("goodput check takes every family's figure")
    }
}

/// Which way a figure goes, relative to the measurement (its source runs
/// the test toward its destination).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// Source → destination.
    Forward,
    /// Destination → source.
    Backward,
    /// There and back (or the source's view of the path).
    RoundTrip,
}

impl Direction {
    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            Direction::Forward => "forward",
            Direction::Backward => "backward",
            Direction::RoundTrip => "round_trip",
        }
    }
}

/// A half-cell's (or an alert's) state, from best to worst for the
/// grid's colours.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// No test of this pair measures the metric.
    NotRun,
    /// Silenced by a maintenance window.
    Maintenance,
    /// Within every threshold.
    Ok,
    /// No result for longer than the no-data rule allows (or none yet).
    NoData,
    /// The agent that runs the measurement let its lease with the fleet's
    /// archive lapse: down, not merely without data (shown on a fleet
    /// archive's grid only).
    AgentDown,
    /// Past a warning threshold.
    Warning,
    /// Past a critical threshold.
    Critical,
}

impl Status {
    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            Status::NotRun => "not_run",
            Status::Maintenance => "maintenance",
            Status::Ok => "ok",
            Status::NoData => "no_data",
            Status::AgentDown => "agent_down",
            Status::Warning => "warning",
            Status::Critical => "critical",
        }
    }

    /// Whether it is an alert.
    pub fn alerting(self) -> bool {
        matches!(self, Status::NoData | Status::Warning | Status::Critical)
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How a window's runs become one value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Statistic {
    /// Mean of the runs' values.
    Mean,
    /// Median of the runs' values.
    Median,
    /// Smallest.
    Min,
    /// Largest.
    Max,
    /// The newest run's.
    Last,
}

impl Statistic {
    /// Of the runs' values, oldest first; none when there are none.
    pub fn of(self, values: &[f64]) -> Option<f64> {
        if values.is_empty() {
            return None;
        }
        Some(match self {
            Statistic::Mean => values.iter().sum::<f64>() / values.len() as f64,
            Statistic::Median => median(values),
            Statistic::Min => values.iter().copied().fold(f64::INFINITY, f64::min),
            Statistic::Max => values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            Statistic::Last => values[values.len() - 1],
        })
    }
}

/// The median (the mean of the middle two for an even count).
pub fn median(values: &[f64]) -> f64 {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// One end of a threshold range.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Bound {
    /// In archive units (bits/s, %, µs, a count).
    Fixed(f64),
    /// `factor` × the baseline + `plus` (archive units).
    Relative { factor: f64, plus: f64 },
}

impl Bound {
    fn read(text: &str, unit: &CheckMetric) -> Result<Self, String> {
        let t = text.trim();
        match t.split_once('x') {
            Some((factor, rest)) => {
                let factor: f64 = factor
                    .trim()
                    .parse()
                    .ok()
                    .filter(|f: &f64| f.is_finite() && *f >= 0.0)
                    .ok_or_else(|| format!("'{t}': the factor before x must be a number ≥ 0"))?;
                let rest = rest.trim();
                let plus = match rest.strip_prefix('+') {
                    _ if rest.is_empty() => 0.0,
                    Some(p) => one_value(p, unit)?,
                    None => return Err(format!("'{t}': after x comes nothing or +VALUE (1.5x+1ms)")),
                };
                Ok(Bound::Relative { factor, plus })
            }
            None => Ok(Bound::Fixed(one_value(t, unit)?)),
        }
    }

    /// In words, in the unit thresholds are written in: `20 ms`, `70 % of
    /// its baseline`, `1.5 × its baseline + 1 ms`.
    fn words(self, unit: &CheckMetric) -> String {
        match self {
            Bound::Fixed(v) => amount(v, unit),
            Bound::Relative { factor, plus } if plus == 0.0 && factor <= 1.0 => {
                format!("{} % of its baseline", number(factor * 100.0))
            }
            Bound::Relative { factor, plus: 0.0 } => {
                format!("{} × its baseline", number(factor))
            }
            Bound::Relative { factor, plus } => {
                format!("{} × its baseline + {}", number(factor), amount(plus, unit))
            }
        }
    }

    fn at(self, baseline: Option<f64>) -> Option<f64> {
        match self {
            Bound::Fixed(v) => Some(v),
            Bound::Relative { factor, plus } => baseline.map(|b| b * factor + plus),
        }
    }
}

/// A number without trailing zeros, at most three decimals.
fn number(v: f64) -> String {
    let t = format!("{v:.3}");
    let t = t.trim_end_matches('0').trim_end_matches('.');
    if t == "-0" {
        "0".into()
    } else {
        t.into()
    }
}

/// A value in archive units with the unit thresholds are written in
/// (`20 ms`, `1 %`, `900 Mbit/s`, a bare count).
fn amount(v: f64, unit: &CheckMetric) -> String {
    let x = number(v / unit.scale);
    match unit.unit {
        "" => x,
        u => format!("{x} {u}"),
    }
}

/// A value with the unit's grammar, through a one-ended range (`END`).
fn one_value(text: &str, unit: &CheckMetric) -> Result<f64, String> {
    Range::parse(&format!("{text}:"), unit).map(|r| r.start)
}

/// A threshold: a range whose ends may be relative to a baseline.
#[derive(Debug, Clone, PartialEq)]
pub struct Threshold {
    start: Option<Bound>,
    end: Option<Bound>,
    inside: bool,
    /// As written.
    pub text: String,
}

impl Threshold {
    /// Reads `[@][START:][END]`, each end a value or `Fx[+VALUE]`.
    pub fn parse(text: &str, unit: &CheckMetric) -> Result<Self, String> {
        let t = text.trim();
        let (inside, body) = match t.strip_prefix('@') {
            Some(b) => (true, b),
            None => (false, t),
        };
        let (start, end) = match body.split_once(':') {
            Some((s, e)) => (s.trim(), e.trim()),
            None => ("", body.trim()),
        };
        let start = match start {
            "" => Some(Bound::Fixed(0.0)),
            "~" => None,
            s => Some(Bound::read(s, unit).map_err(|e| format!("'{t}': {e}"))?),
        };
        let end = match end {
            "" if body.contains(':') => None,
            "" => return Err(format!("'{t}' has no end: write START:END, START: or END")),
            e => Some(Bound::read(e, unit).map_err(|e| format!("'{t}': {e}"))?),
        };
        if let (Some(Bound::Fixed(s)), Some(Bound::Fixed(e))) = (start, end) {
            if s > e {
                return Err(format!("'{t}': the start is above the end"));
            }
        }
        Ok(Self {
            start,
            end,
            inside,
            text: t.to_owned(),
        })
    }

    /// Whether it uses the baseline.
    pub fn relative(&self) -> bool {
        [self.start, self.end]
            .iter()
            .any(|b| matches!(b, Some(Bound::Relative { .. })))
    }

    /// When it raises, in words: `above 20 ms`, `below 70 % of its
    /// baseline`, `at or above 1 %`, `below 10 or above 20 Mbit/s`.
    pub fn words(&self, unit: &CheckMetric) -> String {
        let at = |b: Bound| b.words(unit);
        // An omitted start is 0, which no figure but one-way delay goes
        // below: it is left unsaid.
        let start = self.start.filter(|b| !matches!(b, Bound::Fixed(v) if *v == 0.0));
        match (self.inside, start, self.end) {
            (false, None, None) => "never".into(),
            (false, Some(s), None) => format!("below {}", at(s)),
            (false, None, Some(e)) => format!("above {}", at(e)),
            (false, Some(s), Some(e)) => format!("below {} or above {}", at(s), at(e)),
            (true, None, None) => "always".into(),
            (true, Some(s), None) => format!("at or above {}", at(s)),
            (true, None, Some(e)) => format!("at or below {}", at(e)),
            (true, Some(s), Some(e)) => format!("from {} to {}", at(s), at(e)),
        }
    }

    /// Whether `v` raises it (none: it needs a baseline there is not).
    pub fn alerts(&self, v: f64, baseline: Option<f64>) -> Option<bool> {
        let start = match self.start {
            None => f64::NEG_INFINITY,
            Some(b) => b.at(baseline)?,
        };
        let end = match self.end {
            None => f64::INFINITY,
            Some(b) => b.at(baseline)?,
        };
        let outside = v < start || v > end;
        Some(outside != self.inside)
    }
}

/// A rule as the configuration writes it.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct RuleConfig {
    /// What it watches: throughput, loss, delay (the round trip),
    /// one_way_delay (synchronised clocks only), jitter, path, `no_data`
    /// (no finished run for longer than its window), or
    /// `agent_unreachable` (a peer agent this one runs tests with has not
    /// answered its API for longer than its window).
    pub metric: String,
    /// How far back it looks (`30m`, `1d`; for `no_data` a count of the
    /// task's repeat interval is written `3 repeats`). A window shorter
    /// than a task's repeat interval is taken as that interval, so that
    /// each evaluation sees the task's latest run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window: Option<String>,
    /// How the window's runs become one value (mean, median, min, max,
    /// last).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub statistic: Option<Statistic>,
    /// The warning range.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warning: Option<String>,
    /// The critical range.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub critical: Option<String>,
    /// The baseline's window (relative thresholds): the median of the
    /// pair's runs over it. Default 7 days.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub baseline: Option<String>,
    /// Runs the baseline must have before a threshold relative to it is
    /// judged (default 5): until then the rule says "baseline forming"
    /// and raises nothing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub baseline_runs: Option<u32>,
    /// Evaluations in a row a new state must hold before it is taken
    /// (default: `alerts.hold`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hold: Option<u32>,
    /// Only the tasks of these groups (empty: any).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
    /// Only the tasks of these tests (empty: any).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tests: Vec<String>,
    /// Only these tasks (empty: any).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tasks: Vec<String>,
    /// Kept in the document but not evaluated (a built-in rule of the same
    /// name is turned off so).
    pub disabled: bool,
}

/// Where alerts go over HTTP.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct Receiver {
    /// Prometheus Alertmanager's base URL (`http://alertmanager:9093`):
    /// alerts are POSTed to its `/api/v2/alerts`, again on every
    /// evaluation while they last, and once more with their end.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alertmanager: Option<String>,
    /// A URL that takes each alert's start and end as a JSON POST.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub webhook: Option<String>,
}

/// A time when a host's or pair's alerts are silenced.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct Maintenance {
    /// Every pair with one of these addresses (names).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<String>,
    /// These pairs, either way round (`[["a", "b"]]`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pairs: Vec<[String; 2]>,
    /// From (RFC 3339, UTC).
    pub start: String,
    /// Until (RFC 3339, UTC).
    pub end: String,
    /// Why, for the dashboard.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub reason: String,
}

/// The `[alerts]` section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct AlertsSection {
    /// How often the rules are evaluated.
    pub every: String,
    /// Evaluations in a row a new state must hold (hysteresis).
    pub hold: u32,
    /// Whether the built-in rules apply (a rule of the same name replaces
    /// one).
    pub defaults: bool,
    /// Rules by name.
    pub rules: BTreeMap<String, RuleConfig>,
    /// Where alerts are sent.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub send_to: Vec<Receiver>,
    /// Maintenance windows.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub maintenance: Vec<Maintenance>,
}

impl Default for AlertsSection {
    fn default() -> Self {
        Self {
            every: "1m".into(),
            hold: 3,
            defaults: true,
            rules: BTreeMap::new(),
            send_to: Vec::new(),
            maintenance: Vec::new(),
        }
    }
}

/// A rule's window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Window {
    /// A fixed length, ms.
    Fixed(Ms),
    /// This many of the task's repeat intervals.
    Repeats(u32),
}

impl Window {
    /// In ms, for a task repeating every `every` ms.
    pub fn ms(self, every: Ms) -> Ms {
        match self {
            Window::Fixed(ms) => ms,
            Window::Repeats(n) => every.saturating_mul(u64::from(n)),
        }
    }
}

/// What a rule watches besides a metric family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Watch {
    /// Its metric family's values.
    Figures,
    /// Whether finished runs keep coming (`no_data`).
    NoData,
    /// Whether the peer agents answer (`agent_unreachable`).
    AgentUnreachable,
}

/// The runs a baseline needs by default before a rule judges against it:
/// one or two runs of a new mesh are no pair's usual.
pub const BASELINE_RUNS: u32 = 5;

/// The name of the rule (and alert) of a peer agent that does not answer.
pub const AGENT_UNREACHABLE: &str = "agent_unreachable";

/// A rule, read and checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    /// Its name.
    pub name: String,
    /// What it watches (none: `no_data` or `agent_unreachable`).
    pub family: Option<Family>,
    /// Figures, finished runs or peer agents.
    pub watch: Watch,
    /// How far back.
    pub window: Window,
    /// The window's value.
    pub statistic: Statistic,
    /// Warning range.
    pub warning: Option<Threshold>,
    /// Critical range.
    pub critical: Option<Threshold>,
    /// The baseline's window, ms.
    pub baseline_ms: Ms,
    /// Runs the baseline needs before a relative threshold is judged.
    pub baseline_runs: u32,
    /// Evaluations in a row before a change.
    pub hold: u32,
    /// Scope.
    pub groups: Vec<String>,
    /// Scope.
    pub tests: Vec<String>,
    /// Scope.
    pub tasks: Vec<String>,
}

impl Rule {
    /// Whether it covers a task.
    pub fn covers(&self, task: &str, group: &str, test: &str) -> bool {
        (self.tasks.is_empty() || self.tasks.iter().any(|t| t == task))
            && (self.groups.is_empty() || self.groups.iter().any(|g| g == group))
            && (self.tests.is_empty() || self.tests.iter().any(|t| t == test))
    }

    /// The state of a window's value against the thresholds, critical
    /// first; none when a relative threshold has no baseline.
    pub fn judge(&self, value: f64, baseline: Option<f64>) -> Option<Status> {
        if let Some(c) = &self.critical {
            if c.alerts(value, baseline)? {
                return Some(Status::Critical);
            }
        }
        if let Some(w) = &self.warning {
            if w.alerts(value, baseline)? {
                return Some(Status::Warning);
            }
        }
        Some(Status::Ok)
    }

    /// Whether a threshold is relative to the baseline.
    pub fn relative(&self) -> bool {
        [&self.warning, &self.critical]
            .iter()
            .any(|t| t.as_ref().is_some_and(Threshold::relative))
    }

    /// Its thresholds in words: "warning when loss is above 0 %,
    /// critical when at or above 1 %"; "critical when throughput is below
    /// 30 % of its baseline (the median of 7d, once it has 5 runs)".
    pub fn thresholds_text(&self) -> String {
        let window = match self.window {
            Window::Repeats(n) => format!("{n} repeat intervals"),
            Window::Fixed(ms) => span_text(ms),
        };
        let Some(f) = self.family else {
            return match self.watch {
                Watch::AgentUnreachable => {
                    format!("critical when a peer agent has not answered for {window}")
                }
                _ => format!("no data when no run has finished for {window}"),
            };
        };
        let unit = f.unit();
        let mut parts = Vec::new();
        for (word, t) in [("warning", &self.warning), ("critical", &self.critical)] {
            if let Some(t) = t {
                let subject = if parts.is_empty() {
                    format!("{} is ", f.words())
                } else {
                    String::new()
                };
                parts.push(format!("{word} when {subject}{}", t.words(&unit)));
            }
        }
        let mut s = parts.join(", ");
        if self.relative() {
            s.push_str(&format!(
                " (its baseline: the median of {}, once it has {} runs)",
                span_text(self.baseline_ms),
                self.baseline_runs
            ));
        }
        s
    }

    /// The threshold of one state in words ("critical when throughput is
    /// below 30 % of its baseline"); none for a state no threshold gives.
    pub fn passed_text(&self, state: Status) -> Option<String> {
        let f = self.family?;
        let t = match state {
            Status::Critical => self.critical.as_ref(),
            Status::Warning => self.warning.as_ref(),
            _ => None,
        }?;
        Some(format!(
            "{} when {} is {}",
            state.name(),
            f.words(),
            t.words(&f.unit())
        ))
    }

    /// One line for the legend: what it watches and its thresholds.
    pub fn legend(&self) -> String {
        if self.watch == Watch::AgentUnreachable {
            return format!("{}: {}", self.name, self.thresholds_text());
        }
        let Some(f) = self.family else {
            let w = match self.window {
                Window::Repeats(n) => format!("{n} repeat intervals"),
                Window::Fixed(ms) => span_text(ms),
            };
            return format!("{}: no result for {w}", self.name);
        };
        let mut s = format!(
            "{}: {} of {} over {}",
            self.name,
            statistic_name(self.statistic),
            f.name(),
            match self.window {
                Window::Fixed(ms) => span_text(ms),
                Window::Repeats(n) => format!("{n} repeat intervals"),
            }
        );
        // The thresholds in words, as alerts and the API say them.
        if self.warning.is_some() || self.critical.is_some() {
            s.push_str("; ");
            s.push_str(&self.thresholds_text());
        }
        s
    }
}

/// A span of time in the largest unit that divides it: `30m`, `7d`,
/// `90s`, `1500ms`.
pub fn span_text(ms: Ms) -> String {
    for (unit, len) in [("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)] {
        if ms >= len && ms.is_multiple_of(len) {
            return format!("{}{unit}", ms / len);
        }
    }
    format!("{ms}ms")
}

fn statistic_name(s: Statistic) -> &'static str {
    match s {
        Statistic::Mean => "mean",
        Statistic::Median => "median",
        Statistic::Min => "minimum",
        Statistic::Max => "maximum",
        Statistic::Last => "last",
    }
}

/// The built-in rules: loss (any loss over 30 minutes is a warning, 1%
/// and more critical), throughput (the last run below 70% of the pair's
/// 7-day median is a warning, below 30% critical), delay (the median
/// round trip over 30 minutes above 1.5× the 7-day median and 1 ms more
/// is a warning, above 3× and 10 ms more critical), one-way delay (the
/// same, each direction, over synchronised runs only), path (a trace that
/// found another path in the last day is a warning), and no data (no
/// finished run for 3 repeat intervals).
pub fn default_rules() -> BTreeMap<String, RuleConfig> {
    let rule = |metric: &str, window: &str, statistic, warning: &str, critical: Option<&str>| RuleConfig {
        metric: metric.into(),
        window: Some(window.into()),
        statistic,
        warning: (!warning.is_empty()).then(|| warning.into()),
        critical: critical.map(Into::into),
        ..RuleConfig::default()
    };
    BTreeMap::from([
        (
            "loss".into(),
            rule("loss", "30m", Some(Statistic::Mean), "~:0", Some("@1:")),
        ),
        (
            "throughput".into(),
            rule("throughput", "1d", Some(Statistic::Last), "0.7x:", Some("0.3x:")),
        ),
        (
            "delay".into(),
            rule(
                "delay",
                "30m",
                Some(Statistic::Median),
                "~:1.5x+1ms",
                Some("~:3x+10ms"),
            ),
        ),
        (
            Family::OneWayDelay.name().into(),
            rule(
                Family::OneWayDelay.name(),
                "30m",
                Some(Statistic::Median),
                "~:1.5x+1ms",
                Some("~:3x+10ms"),
            ),
        ),
        (
            "path".into(),
            rule("path", "1d", Some(Statistic::Max), "~:0", None),
        ),
        ("no_data".into(), rule("no_data", "3 repeats", None, "", None)),
        (
            AGENT_UNREACHABLE.into(),
            RuleConfig {
                // The window already waits: no hold beyond it.
                hold: Some(1),
                ..rule(AGENT_UNREACHABLE, "3m", None, "", None)
            },
        ),
    ])
}

impl AlertsSection {
    /// The evaluation period, ms.
    pub fn every_ms(&self) -> Result<Ms, SpecError> {
        let ms = crate::time::duration_ms(&self.every).map_err(|e| SpecError::new("alerts.every", e))?;
        if ms < 1000 {
            return Err(SpecError::new("alerts.every", "must be at least 1s"));
        }
        Ok(ms)
    }

    /// The rules in force: the built-in ones unless `defaults = false`,
    /// each replaced by a rule of its name, less the disabled ones.
    pub fn rules(&self) -> Result<Vec<Rule>, SpecError> {
        let mut all = if self.defaults {
            default_rules()
        } else {
            BTreeMap::new()
        };
        for (name, r) in &self.rules {
            all.insert(name.clone(), r.clone());
        }
        let mut out = Vec::new();
        for (name, r) in all.iter().filter(|(_, r)| !r.disabled) {
            let place = format!("alerts.rules.{name}");
            let at = |field: &str| format!("{place}.{field}");
            let (family, watch) = match r.metric.as_str() {
                "no_data" => (None, Watch::NoData),
                AGENT_UNREACHABLE => (None, Watch::AgentUnreachable),
                m => (
                    Some(Family::named(m).map_err(|e| {
                        SpecError::new(&at("metric"), format!("{e}, no_data, {AGENT_UNREACHABLE}"))
                    })?),
                    Watch::Figures,
                ),
            };
            let window_text = r.window.clone().unwrap_or_else(|| {
                match watch {
                    Watch::NoData => "3 repeats",
                    Watch::AgentUnreachable => "3m",
                    Watch::Figures => "30m",
                }
                .into()
            });
            if watch == Watch::AgentUnreachable && crate::time::duration_ms(window_text.trim()).is_err() {
                return Err(SpecError::new(
                    &at("window"),
                    format!("'{window_text}': {AGENT_UNREACHABLE} takes a duration (3m)"),
                ));
            }
            let window = match window_text
                .trim()
                .strip_suffix("repeats")
                .or(window_text.trim().strip_suffix("repeat"))
            {
                Some(n) => Window::Repeats(n.trim().parse().ok().filter(|n| *n > 0).ok_or_else(|| {
                    SpecError::new(&at("window"), format!("'{window_text}': write N repeats, N ≥ 1"))
                })?),
                None => Window::Fixed(
                    crate::time::duration_ms(&window_text)
                        .ok()
                        .filter(|ms| *ms > 0)
                        .ok_or_else(|| {
                            SpecError::new(
                                &at("window"),
                                format!("'{window_text}' is not a duration (30m, 1d) or N repeats"),
                            )
                        })?,
                ),
            };
            let unit = family.map(Family::unit);
            let threshold = |field: &str, t: &Option<String>| -> Result<Option<Threshold>, SpecError> {
                match (t, unit) {
                    (None, _) => Ok(None),
                    (Some(_), None) => Err(SpecError::new(
                        &at(field),
                        format!("{} takes no thresholds", r.metric),
                    )),
                    (Some(t), Some(u)) => Threshold::parse(t, &u)
                        .map(Some)
                        .map_err(|e| SpecError::new(&at(field), e)),
                }
            };
            let warning = threshold("warning", &r.warning)?;
            let critical = threshold("critical", &r.critical)?;
            if family.is_some() && warning.is_none() && critical.is_none() {
                return Err(SpecError::new(
                    &place,
                    "has neither a warning nor a critical threshold",
                ));
            }
            let baseline_ms = match &r.baseline {
                None => 7 * 86_400_000,
                Some(b) => crate::time::duration_ms(b)
                    .ok()
                    .filter(|ms| *ms > 0)
                    .ok_or_else(|| SpecError::new(&at("baseline"), format!("'{b}' is not a duration")))?,
            };
            let baseline_runs = r.baseline_runs.unwrap_or(BASELINE_RUNS);
            if baseline_runs == 0 || baseline_runs > 10_000 {
                return Err(SpecError::new(&at("baseline_runs"), "must be 1 to 10000 runs"));
            }
            let hold = r.hold.unwrap_or(self.hold);
            if hold == 0 || hold > 1000 {
                return Err(SpecError::new(&at("hold"), "must be 1 to 1000 evaluations"));
            }
            out.push(Rule {
                name: name.clone(),
                family,
                watch,
                window,
                statistic: r.statistic.unwrap_or(Statistic::Mean),
                warning,
                critical,
                baseline_ms,
                baseline_runs,
                hold,
                groups: r.groups.clone(),
                tests: r.tests.clone(),
                tasks: r.tasks.clone(),
            });
        }
        Ok(out)
    }

    /// Checks the section against the mesh's names.
    pub fn validate(&self, config: &crate::mesh::MeshConfig) -> Result<(), SpecError> {
        self.every_ms()?;
        if self.hold == 0 || self.hold > 1000 {
            return Err(SpecError::new("alerts.hold", "must be 1 to 1000 evaluations"));
        }
        for r in self.rules()? {
            let place = format!("alerts.rules.{}", r.name);
            if let Some(g) = r.groups.iter().find(|g| !config.groups.contains_key(*g)) {
                return Err(SpecError::new(
                    &format!("{place}.groups"),
                    format!("no group named '{g}'"),
                ));
            }
            if let Some(t) = r.tests.iter().find(|t| !config.tests.contains_key(*t)) {
                return Err(SpecError::new(
                    &format!("{place}.tests"),
                    format!("no test named '{t}'"),
                ));
            }
            if let Some(t) = r.tasks.iter().find(|t| !config.tasks.contains_key(*t)) {
                return Err(SpecError::new(
                    &format!("{place}.tasks"),
                    format!("no task named '{t}'"),
                ));
            }
        }
        for (i, s) in self.send_to.iter().enumerate() {
            let place = format!("alerts.send_to[{i}]");
            if s.alertmanager.is_none() && s.webhook.is_none() {
                return Err(SpecError::new(&place, "names neither alertmanager nor webhook"));
            }
            for u in s.alertmanager.iter().chain(s.webhook.iter()) {
                if !(u.starts_with("http://") || u.starts_with("https://")) {
                    return Err(SpecError::new(
                        &place,
                        format!("'{u}' is not an http:// or https:// URL"),
                    ));
                }
            }
        }
        for (i, m) in self.maintenance.iter().enumerate() {
            let place = format!("alerts.maintenance[{i}]");
            let (start, end) = m.span().map_err(|e| SpecError::new(&place, e))?;
            if end <= start {
                return Err(SpecError::new(&place, "ends before it starts"));
            }
            for h in m.hosts.iter().chain(m.pairs.iter().flatten()) {
                if !config.addresses.contains_key(h) {
                    return Err(SpecError::new(&place, format!("no address named '{h}'")));
                }
            }
            if m.hosts.is_empty() && m.pairs.is_empty() {
                return Err(SpecError::new(&place, "names no hosts and no pairs"));
            }
        }
        Ok(())
    }

    /// The maintenance window silencing a pair at `now`, if any.
    pub fn maintenance_of(&self, source: &str, dest: Option<&str>, now: Ms) -> Option<&Maintenance> {
        self.maintenance.iter().find(|m| {
            m.span().is_ok_and(|(s, e)| s <= now && now < e)
                && (m.hosts.iter().any(|h| h == source || Some(h.as_str()) == dest)
                    || m.pairs.iter().any(|[a, b]| {
                        (a == source && Some(b.as_str()) == dest) || (b == source && Some(a.as_str()) == dest)
                    }))
        })
    }
}

impl Maintenance {
    /// Its start and end, ms.
    pub fn span(&self) -> Result<(Ms, Ms), String> {
        Ok((
            crate::time::rfc3339_ms(&self.start).map_err(|e| format!("start: {e}"))?,
            crate::time::rfc3339_ms(&self.end).map_err(|e| format!("end: {e}"))?,
        ))
    }
}

/// A state with hysteresis: a new state is taken once it has been seen
/// `hold` evaluations in a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tracker {
    /// The state taken.
    pub current: Status,
    /// The state seen lately, not yet taken.
    candidate: Status,
    /// Evaluations in a row it has been seen.
    seen: u32,
}

impl Tracker {
    /// Starting from a state (OK for a new pair; an open alert's state
    /// after a restart).
    pub fn new(current: Status) -> Self {
        Self {
            current,
            candidate: current,
            seen: 0,
        }
    }

    /// Takes an evaluation's state; the change, when one is taken.
    pub fn observe(&mut self, state: Status, hold: u32) -> Option<(Status, Status)> {
        if state == self.current {
            self.candidate = state;
            self.seen = 0;
            return None;
        }
        if state == self.candidate {
            self.seen = self.seen.saturating_add(1);
        } else {
            self.candidate = state;
            self.seen = 1;
        }
        if self.seen >= hold.max(1) {
            let from = self.current;
            self.current = state;
            self.seen = 0;
            return Some((from, state));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(f: Family) -> CheckMetric {
        f.unit()
    }

    #[test]
    fn thresholds_read_absolute_and_relative_ends() {
        let loss = unit(Family::Loss);
        let any = Threshold::parse("~:0", &loss).unwrap();
        assert_eq!(any.alerts(0.0, None), Some(false));
        assert_eq!(any.alerts(0.001, None), Some(true));
        let one = Threshold::parse("@1:", &loss).unwrap();
        assert_eq!(one.alerts(0.99, None), Some(false));
        assert_eq!(one.alerts(1.0, None), Some(true));
        let tp = unit(Family::Throughput);
        let low = Threshold::parse("0.7x:", &tp).unwrap();
        assert!(low.relative());
        assert_eq!(low.alerts(60e6, None), None, "no baseline: no verdict");
        assert_eq!(low.alerts(60e6, Some(100e6)), Some(true));
        assert_eq!(low.alerts(70e6, Some(100e6)), Some(false));
        let abs = Threshold::parse("900Mbit:", &tp).unwrap();
        assert_eq!(abs.alerts(899e6, None), Some(true));
        let bare = Threshold::parse("900:", &tp).unwrap();
        assert_eq!(bare.alerts(901e6, None), Some(false));
        let delay = unit(Family::Delay);
        let d = Threshold::parse("~:1.5x+1ms", &delay).unwrap();
        // Baseline 2 ms (2000 µs): alert above 4 ms.
        assert_eq!(d.alerts(4000.0, Some(2000.0)), Some(false));
        assert_eq!(d.alerts(4001.0, Some(2000.0)), Some(true));
        for bad in ["", "x:", "1.5y", "-1x", "2:1", "1.5x1ms", "NaN"] {
            assert!(Threshold::parse(bad, &delay).is_err(), "{bad} read");
        }
    }

    #[test]
    fn the_defaults_read_and_say_what_they_do() {
        let rules = AlertsSection::default().rules().unwrap();
        let names: Vec<&str> = rules.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "agent_unreachable",
                "delay",
                "loss",
                "no_data",
                "one_way_delay",
                "path",
                "throughput"
            ]
        );
        let rules = &rules[1..];
        let loss = &rules[1];
        assert_eq!(loss.judge(0.0, None), Some(Status::Ok));
        assert_eq!(loss.judge(0.01, None), Some(Status::Warning));
        assert_eq!(loss.judge(1.0, None), Some(Status::Critical));
        assert_eq!(loss.window, Window::Fixed(30 * 60_000));
        assert_eq!(rules[2].window.ms(60_000), 180_000);
        let owd = &rules[3];
        assert_eq!(owd.family, Some(Family::OneWayDelay));
        // 1.5 × a 10 ms baseline and 1 ms more: 16 ms.
        assert_eq!(owd.judge(15_900.0, Some(10_000.0)), Some(Status::Ok));
        assert_eq!(owd.judge(16_100.0, Some(10_000.0)), Some(Status::Warning));
        assert_eq!(owd.judge(40_100.0, Some(10_000.0)), Some(Status::Critical));
        let tp = &rules[5];
        assert_eq!(tp.judge(50e6, Some(100e6)), Some(Status::Warning));
        assert_eq!(tp.judge(20e6, Some(100e6)), Some(Status::Critical));
        assert_eq!(tp.judge(95e6, Some(100e6)), Some(Status::Ok));
        assert!(
            loss.legend()
                .contains("warning when loss is above 0 %, critical when at or above 1 %"),
            "{}",
            loss.legend()
        );
        assert!(
            tp.legend().contains("its baseline: the median of 7d"),
            "{}",
            tp.legend()
        );
    }

    #[test]
    fn thresholds_read_in_words() {
        let rules = AlertsSection::default().rules().unwrap();
        let text = |name: &str| rules.iter().find(|r| r.name == name).unwrap().thresholds_text();
        assert_eq!(
            text("loss"),
            "warning when loss is above 0 %, critical when at or above 1 %"
        );
        assert_eq!(
            text("throughput"),
            "warning when throughput is below 70 % of its baseline, critical when below 30 % \
             of its baseline (its baseline: the median of 7d, once it has 5 runs)"
        );
        assert_eq!(
            text("delay"),
            "warning when the round-trip delay is above 1.5 × its baseline + 1 ms, critical \
             when above 3 × its baseline + 10 ms (its baseline: the median of 7d, once it has 5 runs)"
        );
        assert_eq!(
            text("no_data"),
            "no data when no run has finished for 3 repeat intervals"
        );
        assert_eq!(
            text("agent_unreachable"),
            "critical when a peer agent has not answered for 3m"
        );
        let tp = rules.iter().find(|r| r.name == "throughput").unwrap();
        assert_eq!(
            tp.passed_text(Status::Critical).as_deref(),
            Some("critical when throughput is below 30 % of its baseline")
        );
        assert_eq!(tp.passed_text(Status::Ok), None);
        let unit = Family::Delay.unit();
        let words = |t: &str| Threshold::parse(t, &unit).unwrap().words(&unit);
        assert_eq!(words("20"), "above 20 ms");
        assert_eq!(words("~:20ms"), "above 20 ms");
        assert_eq!(words("5:"), "below 5 ms");
        assert_eq!(words("5:20"), "below 5 ms or above 20 ms");
        assert_eq!(words("@5:20"), "from 5 ms to 20 ms");
        assert_eq!(words("@~:2.5"), "at or below 2.5 ms");
        let mbit = Family::Throughput.unit();
        let t = Threshold::parse("900Mbit:", &mbit).unwrap();
        assert_eq!(t.words(&mbit), "below 900 Mbit/s");
    }

    #[test]
    fn a_baseline_needs_its_runs_and_says_so_when_configured() {
        let mut s = AlertsSection::default();
        s.rules.insert(
            "throughput".into(),
            RuleConfig {
                metric: "throughput".into(),
                warning: Some("0.8x:".into()),
                baseline_runs: Some(3),
                ..RuleConfig::default()
            },
        );
        let rules = s.rules().unwrap();
        let tp = rules.iter().find(|r| r.name == "throughput").unwrap();
        assert_eq!(tp.baseline_runs, 3);
        assert!(tp.thresholds_text().ends_with("once it has 3 runs)"));
        let loss = rules.iter().find(|r| r.name == "loss").unwrap();
        assert_eq!(loss.baseline_runs, BASELINE_RUNS);
        s.rules.get_mut("throughput").unwrap().baseline_runs = Some(0);
        let e = s.rules().unwrap_err().to_string();
        assert!(e.contains("alerts.rules.throughput.baseline_runs"), "{e}");
        s.rules.get_mut("throughput").unwrap().baseline_runs = None;
        s.rules.insert(
            AGENT_UNREACHABLE.into(),
            RuleConfig {
                metric: AGENT_UNREACHABLE.into(),
                window: Some("3 repeats".into()),
                ..RuleConfig::default()
            },
        );
        let e = s.rules().unwrap_err().to_string();
        assert!(e.contains("takes a duration"), "{e}");
    }

    #[test]
    fn a_rule_of_a_default_name_replaces_it_and_bad_rules_say_where() {
        let mut s = AlertsSection::default();
        s.rules.insert(
            "loss".into(),
            RuleConfig {
                metric: "loss".into(),
                warning: Some("~:5".into()),
                ..RuleConfig::default()
            },
        );
        s.rules.insert(
            "delay".into(),
            RuleConfig {
                disabled: true,
                ..RuleConfig::default()
            },
        );
        let rules = s.rules().unwrap();
        assert!(rules.iter().all(|r| r.name != "delay"));
        let loss = rules.iter().find(|r| r.name == "loss").unwrap();
        assert_eq!(loss.judge(2.0, None), Some(Status::Ok));
        assert!(loss.critical.is_none());
        s.rules.insert(
            "odd".into(),
            RuleConfig {
                metric: "color".into(),
                warning: Some("1".into()),
                ..RuleConfig::default()
            },
        );
        let e = s.rules().unwrap_err().to_string();
        assert!(
            e.contains("alerts.rules.odd.metric") && e.contains("no metric 'color'"),
            "{e}"
        );
        s.rules.remove("odd");
        s.rules.insert(
            "empty".into(),
            RuleConfig {
                metric: "jitter".into(),
                ..RuleConfig::default()
            },
        );
        let e = s.rules().unwrap_err().to_string();
        assert!(e.contains("neither a warning nor a critical"), "{e}");
    }

    #[test]
    fn a_new_state_must_hold_before_it_is_taken() {
        let mut t = Tracker::new(Status::Ok);
        assert_eq!(t.observe(Status::Critical, 3), None);
        assert_eq!(t.observe(Status::Critical, 3), None);
        // A different state in between starts the count again.
        assert_eq!(t.observe(Status::Warning, 3), None);
        assert_eq!(t.observe(Status::Critical, 3), None);
        assert_eq!(t.observe(Status::Critical, 3), None);
        assert_eq!(
            t.observe(Status::Critical, 3),
            Some((Status::Ok, Status::Critical))
        );
        assert_eq!(t.current, Status::Critical);
        // One OK does not end it.
        assert_eq!(t.observe(Status::Ok, 2), None);
        assert_eq!(t.observe(Status::Critical, 2), None);
        assert_eq!(t.observe(Status::Ok, 2), None);
        assert_eq!(t.observe(Status::Ok, 2), Some((Status::Critical, Status::Ok)));
        // hold 1: at once.
        assert_eq!(t.observe(Status::Warning, 1), Some((Status::Ok, Status::Warning)));
    }

    #[test]
    fn statistics_and_maintenance() {
        let v = [3.0, 1.0, 2.0, 10.0];
        assert_eq!(Statistic::Mean.of(&v), Some(4.0));
        assert_eq!(Statistic::Median.of(&v), Some(2.5));
        assert_eq!(Statistic::Last.of(&v), Some(10.0));
        assert_eq!(Statistic::Max.of(&[]), None);
        let mut s = AlertsSection::default();
        s.maintenance.push(Maintenance {
            hosts: vec!["b".into()],
            pairs: vec![["c".into(), "d".into()]],
            start: "2026-01-01T00:00:00Z".into(),
            end: "2026-01-01T01:00:00Z".into(),
            reason: "fibre work".into(),
        });
        let t = crate::time::rfc3339_ms("2026-01-01T00:30:00Z").unwrap();
        assert!(s.maintenance_of("a", Some("b"), t).is_some());
        assert!(s.maintenance_of("d", Some("c"), t).is_some());
        assert!(s.maintenance_of("a", Some("c"), t).is_none());
        assert!(s.maintenance_of("a", Some("b"), t + 3_600_000).is_none());
    }
}
