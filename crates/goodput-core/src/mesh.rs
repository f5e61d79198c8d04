//! The agent's mesh configuration, in the spirit of perfSONAR's pSConfig:
//! named addresses, groups that make pairs of them, tests (spec documents
//! with `{{source}}` and `{{dest}}` where the pair's addresses go),
//! schedules, and tasks that bind a group, a test and a schedule. Each
//! agent reads the same document and runs only the tasks whose source is
//! one of its own addresses.
//!
//! ```toml
//! [addresses.alpha]
//! address = "10.0.0.1"
//! [addresses.beta]
//! address = "10.0.0.2"
//! [addresses.router]
//! address = "10.0.0.254"
//! no_agent = true           # a perfSONAR host (owampd, twampd), a STAMP reflector,
//!                           # an iperf3 server: no negotiation
//! [addresses.ps-east]
//! address = "10.0.0.9"
//! no_agent = true
//! pscheduler = true         # its pScheduler books and serves iperf3 runs to it
//!
//! [groups.core]
//! type = "mesh"             # every ordered pair; "disjoint": a × b; "list": each alone
//! addresses = ["alpha", "beta"]
//!
//! [tests.throughput]
//! kind = "tcp"
//! hosts = ["{{dest}}"]
//! duration = "20s"
//!
//! [schedules.every-6h]
//! repeat = "PT6H"           # ISO 8601, or "6h"
//! slip = "PT1H"
//! sliprand = true
//!
//! [tasks.core-throughput]
//! group = "core"
//! test = "throughput"
//! schedule = "every-6h"
//! ```

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::schedule::{mix, Ms, Repeat, RunClass};
use crate::spec::{SpecError, TestSpec};
use crate::time::{duration_ms, rfc3339_ms};

/// The whole configuration document.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct MeshConfig {
    /// Hosts by name.
    pub addresses: BTreeMap<String, Address>,
    /// Sets of addresses and how they pair.
    pub groups: BTreeMap<String, Group>,
    /// Tests by name: spec documents (any kind but `server`) in which
    /// `{{source}}` and `{{dest}}` stand for a pair's addresses.
    #[schemars(with = "BTreeMap<String, TestSpec>")]
    pub tests: BTreeMap<String, serde_json::Value>,
    /// When tasks run.
    pub schedules: BTreeMap<String, Schedule>,
    /// What runs: a group, a test and a schedule.
    pub tasks: BTreeMap<String, Task>,
    /// What every agent of the mesh serves.
    pub agent: AgentSection,
    /// Soft-failure rules, where alerts go, maintenance windows.
    pub alerts: crate::alert::AlertsSection,
    /// Where every agent of the mesh forwards the runs that end on it
    /// (besides its own `--forward-to`), by name.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub archives: BTreeMap<String, ArchiveTarget>,
}

/// An archive the mesh's agents forward their runs to.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct ArchiveTarget {
    /// `goodput`: a fleet archive's API base URL
    /// (`https://archive.example:8780`); `http`: the URL each batch is
    /// POSTed to, as given.
    pub url: String,
    /// What listens there.
    pub kind: ArchiveKind,
    /// The SHA-256 fingerprint of its certificate (an https:// URL with a
    /// self-signed certificate; none: the system's roots).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_sha256: Option<String>,
    /// Fields to keep or rename in each run before it is sent (`http`
    /// only: a goodput archive takes runs as goodput writes them).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transform: Option<Transform>,
}

/// What an archive target is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ArchiveKind {
    /// A goodput fleet archive (`goodput agent --role archive`): batches
    /// go to `/api/v1/archive/runs` with the mesh's token, and the agent
    /// registers there.
    #[default]
    Goodput,
    /// Any HTTP receiver (a log shipper's HTTP input, a web hook): each
    /// batch is POSTed to the URL as a JSON array of runs, transformed;
    /// any 2xx answer takes the batch.
    Http,
    /// perfSONAR's archives (a central archive's Logstash HTTP input, or
    /// anything pScheduler's `http` archiver posts to): each run is POSTed
    /// alone, to the URL as given, as the document pScheduler's http
    /// archiver sends (`goodput_archive::pscheduler_out`): the test, the
    /// run and the result in the result format of the test type that
    /// measures the same thing (tcp and iperf3: throughput; owamp:
    /// latency; ping, twamp and stamp: rtt; trace: trace), one document
    /// per direction measured, with the measuring host's address in the
    /// `x-ps-observer` header. Only the run's source sends it; runs of
    /// other kinds are not sent (counted, and said once in the log). No
    /// transform: perfSONAR's pipeline reads the fields by name.
    Pscheduler,
}

/// Which fields of a run are sent, and under which names. A field is a
/// dotted path into the run's JSON (`figures.loss_pct`). `select` keeps
/// only the fields named (all when empty); `rename` then moves a field to
/// another path (`{ "figures.loss_pct" = "loss" }`). A path that is not
/// in a run is skipped for that run.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct Transform {
    /// The fields kept (empty: all).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub select: Vec<String>,
    /// Field → its new path.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub rename: BTreeMap<String, String>,
}

/// The deepest path a transform may name.
const MAX_PATH_DEPTH: usize = 16;

impl Transform {
    /// Every path names something: non-empty segments, not too deep, and
    /// no two renames land on the same path.
    pub fn validate(&self) -> Result<(), (String, String)> {
        let check = |place: &str, path: &str| -> Result<(), (String, String)> {
            let parts: Vec<&str> = path.split('.').collect();
            if parts.iter().any(|p| p.is_empty()) {
                return Err((
                    place.into(),
                    format!("'{path}' is not a field path (write a.b.c)"),
                ));
            }
            if parts.len() > MAX_PATH_DEPTH {
                return Err((
                    place.into(),
                    format!("'{path}' is deeper than {MAX_PATH_DEPTH} fields"),
                ));
            }
            Ok(())
        };
        for p in &self.select {
            check("select", p)?;
        }
        let mut to = std::collections::BTreeSet::new();
        for (from, into) in &self.rename {
            check("rename", from)?;
            check("rename", into)?;
            if !to.insert(into.as_str()) {
                return Err(("rename".into(), format!("two fields are renamed to '{into}'")));
            }
        }
        // One field inside another, among the fields renamed or among
        // their new paths: which moves first would decide what is left.
        let nested =
            |a: &str, b: &str| b.len() > a.len() && b.starts_with(a) && b.as_bytes()[a.len()] == b'.';
        for paths in [
            self.rename.keys().map(String::as_str).collect::<Vec<_>>(),
            to.iter().copied().collect(),
        ] {
            for a in &paths {
                if let Some(b) = paths.iter().find(|b| nested(a, b)) {
                    return Err((
                        "rename".into(),
                        format!("'{b}' is inside '{a}': rename one or the other"),
                    ));
                }
            }
        }
        Ok(())
    }

    /// `run` with only the selected fields, then renamed.
    pub fn apply(&self, run: serde_json::Value) -> serde_json::Value {
        let mut out = if self.select.is_empty() {
            run
        } else {
            let mut kept = serde_json::Value::Object(Default::default());
            for path in &self.select {
                // Read, not taken: a field and one inside it may both be
                // selected, in either order.
                if let Some(v) = path.split('.').try_fold(&run, |v, k| v.get(k)) {
                    put(&mut kept, path, v.clone());
                }
            }
            kept
        };
        // All taken before any is put, so that renames may swap fields.
        let moved: Vec<(&String, serde_json::Value)> = self
            .rename
            .iter()
            .filter_map(|(from, into)| take(&mut out, from).map(|v| (into, v)))
            .collect();
        for (into, v) in moved {
            put(&mut out, into, v);
        }
        out
    }
}

/// Removes and returns the value at a dotted path.
fn take(v: &mut serde_json::Value, path: &str) -> Option<serde_json::Value> {
    let (parent, last) = match path.rsplit_once('.') {
        Some((p, l)) => (p.split('.').try_fold(v, |v, k| v.get_mut(k))?, l),
        None => (v, path),
    };
    parent.as_object_mut()?.remove(last)
}

/// Sets the value at a dotted path, making objects on the way (a value
/// that is in the way and not an object is replaced).
fn put(v: &mut serde_json::Value, path: &str, value: serde_json::Value) {
    let mut at = v;
    for k in path.split('.') {
        if !at.is_object() {
            *at = serde_json::Value::Object(Default::default());
        }
        at = at
            .as_object_mut()
            .expect("made an object above")
            .entry(k.to_string())
            .or_insert(serde_json::Value::Null);
    }
    *at = value;
}

/// What every agent of the mesh serves (its own flags may change it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct AgentSection {
    /// TCP port of each agent's HTTP API, where peers book runs.
    pub api_port: u16,
}

impl Default for AgentSection {
    fn default() -> Self {
        Self { api_port: 8780 }
    }
}

/// One host.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct Address {
    /// Its name or IP address, as tests reach it.
    pub address: String,
    /// Other addresses of the same host by label (`ipv6 = "2001:db8::1"`);
    /// a task with that `label` uses them.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Free-form tags (site, role), for the dashboard and for filters.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// No agent runs there (a perfSONAR host, whose owampd and twampd
    /// answer owamp and twamp tests; a stock iperf3 server, a router's
    /// reflector, a plain `goodput server`): it is only ever tested to,
    /// with no negotiation, and never runs tasks itself.
    pub no_agent: bool,
    /// A perfSONAR host whose pScheduler takes throughput tasks (with
    /// `no_agent`): an `iperf3` test to it is booked with its pScheduler
    /// (`https://ADDRESS/pscheduler/`), this agent the task's lead, and
    /// runs against the iperf3 server pScheduler starts for that run.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub pscheduler: bool,
    /// The SHA-256 fingerprint of its agent's certificate (64 hex digits,
    /// colons allowed; `goodput agent --print-fingerprint`): its API is
    /// then HTTPS, and other agents accept that certificate only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_sha256: Option<String>,
}

/// How a group pairs its addresses.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Group {
    /// Every ordered pair of distinct addresses.
    Mesh {
        /// The addresses.
        addresses: Vec<String>,
    },
    /// Every address of `a` with every address of `b`, both directions
    /// unless `unidirectional` (then from `a` to `b` only).
    Disjoint {
        /// One side.
        a: Vec<String>,
        /// The other.
        b: Vec<String>,
        /// Only `a` → `b`.
        #[serde(default)]
        unidirectional: bool,
    },
    /// Each address alone: single-ended tests (`{{source}}` only).
    List {
        /// The addresses.
        addresses: Vec<String>,
    },
}

/// When a task's runs are due.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct Schedule {
    /// Time between runs: ISO 8601 (`PT6H`, `P1D`) or `6h`, `30m`.
    pub repeat: String,
    /// How late a run may start after its time (default: none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slip: Option<String>,
    /// Start each run at a random point within its slip (the same point on
    /// every agent), spreading a mesh's runs.
    pub sliprand: bool,
    /// No run before this time (RFC 3339, UTC: `2026-12-01T00:00:00Z`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start: Option<String>,
    /// No run after this time (RFC 3339, UTC).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub until: Option<String>,
    /// No more runs than this.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_runs: Option<u64>,
    /// A cron expression instead of `repeat` (five fields, UTC:
    /// `0 */6 * * *`, `30 2 * * mon-fri`, or `@daily`, `@hourly` …).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
}

/// Which end of a pair leads the booking of a run's slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Lead {
    /// The source (it runs the test; the default).
    #[default]
    Source,
    /// The destination.
    Destination,
}

/// A group, a test and a schedule.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct Task {
    /// The group's name.
    pub group: String,
    /// The test's name.
    pub test: String,
    /// The schedule's name.
    pub schedule: String,
    /// How it shares hosts (default: by the test's kind — throughput kinds
    /// exclusive, STAMP background, the rest normal).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub class: Option<RunClass>,
    /// Which end books the slot (`scheduled_by`, pSConfig's word).
    pub scheduled_by: Lead,
    /// Use the addresses' alternatives with this label.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// DSCP code point for the test's traffic (e.g. 8, CS1, "scavenger").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dscp: Option<u8>,
    /// Kept in the document but not run.
    pub disabled: bool,
}

/// One pair of one task, as the agent that runs it sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct PairTask {
    /// The task's name.
    pub task: String,
    /// The source's name (the end that runs the test).
    pub source: String,
    /// The destination's name (none for a `list` group).
    pub dest: Option<String>,
    /// Whether an agent runs at the destination (else no negotiation).
    pub dest_has_agent: bool,
    /// Which end books the slot.
    pub lead: Lead,
    /// The test with the pair's addresses filled in, validated.
    pub spec: TestSpec,
    /// Its class.
    pub class: RunClass,
    /// When its runs are due (milliseconds since the Unix epoch).
    pub repeat: Repeat,
    /// A seed for `sliprand`, the same on every agent.
    pub seed: u64,
}

impl PairTask {
    /// Run `n`'s id: the same on every agent, so a result stored by both
    /// ends (or twice) is one run. It ends with the run's base time (ms
    /// since the Unix epoch, before any `sliprand` spread), not its
    /// number, so a schedule changed later never gives a new run an old
    /// run's id.
    pub fn run_id(&self, n: u64) -> String {
        let base = self.repeat.base(n).unwrap_or(u64::MAX);
        format!(
            "{}/{}/{}/{base}",
            self.task,
            self.source,
            self.dest.as_deref().unwrap_or("-")
        )
    }

    /// How long a run holds its hosts' calendars, milliseconds: what its
    /// spec says it lasts, and a margin for connecting and the last bytes
    /// to drain. A test with no length of its own (a byte count) books a
    /// minute.
    pub fn expected_ms(&self) -> Ms {
        const MARGIN: Ms = 2_000;
        self.spec
            .expected_ms()
            .map_or(60_000, |m| m.saturating_add(MARGIN))
    }
}

/// 64 hex digits, colons allowed.
fn is_sha256(pin: &str) -> bool {
    let hex: String = pin.chars().filter(|c| *c != ':').collect();
    hex.len() == 64 && hex.chars().all(|c| c.is_ascii_hexdigit())
}

/// The most pairs a configuration may expand to: over all its tasks, and
/// within any one group. Every pair is a filled-in spec each agent keeps
/// (a few hundred bytes), so this bounds what a document costs an agent
/// before anything is expanded: 250,000 pairs are a 500-host full mesh,
/// or 250 hosts in two tasks each way.
pub const MAX_PAIRS: u64 = 250_000;

/// The most bytes a configuration document may have.
pub const MAX_DOCUMENT_BYTES: usize = 16 << 20;

impl Group {
    /// How many ordered pairs the group makes at most, by arithmetic (no
    /// pair is built): a mesh of n makes n × (n − 1), a disjoint group
    /// |a| × |b| each way asked, a list one per address.
    pub fn pair_count(&self) -> u64 {
        let n = |v: &Vec<String>| v.len() as u64;
        match self {
            Group::Mesh { addresses } => n(addresses).saturating_mul(n(addresses).saturating_sub(1)),
            Group::Disjoint { a, b, unidirectional } => {
                let one_way = n(a).saturating_mul(n(b));
                if *unidirectional {
                    one_way
                } else {
                    one_way.saturating_mul(2)
                }
            }
            Group::List { addresses } => n(addresses),
        }
    }

    fn describe(&self) -> String {
        match self {
            Group::Mesh { addresses } => format!("a mesh of {} addresses", grouped(addresses.len() as u64)),
            Group::Disjoint { a, b, .. } => format!(
                "{} × {} addresses",
                grouped(a.len() as u64),
                grouped(b.len() as u64)
            ),
            Group::List { addresses } => format!("a list of {} addresses", grouped(addresses.len() as u64)),
        }
    }
}

/// A count with thousands separated (`250,000`).
pub(crate) fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

impl MeshConfig {
    /// Reads a document (JSON, or TOML when `toml`), with the same kind of
    /// errors as spec files: the place and what is wrong. A document
    /// longer than [`MAX_DOCUMENT_BYTES`] is refused unread.
    pub fn read(text: &str, toml: bool) -> Result<Self, SpecError> {
        if text.len() > MAX_DOCUMENT_BYTES {
            return Err(SpecError::new(
                "",
                format!(
                    "limit max_config_bytes: the document has {} bytes, {} allowed",
                    grouped(text.len() as u64),
                    grouped(MAX_DOCUMENT_BYTES as u64)
                ),
            ));
        }
        let value: serde_json::Value = if toml {
            let t: toml::Value = toml::from_str(text).map_err(|e| {
                SpecError::new(
                    "",
                    format!("not valid TOML: {}", crate::spec::one_line(&e.to_string())),
                )
            })?;
            serde_json::to_value(t).map_err(|e| SpecError::new("", e.to_string()))?
        } else {
            serde_json::from_str(text).map_err(|e| SpecError::new("", format!("not valid JSON: {e}")))?
        };
        let config: MeshConfig = serde_path_to_error::deserialize(value).map_err(|e| {
            let path = e.path().to_string();
            SpecError::new(
                if path == "." { "" } else { &path },
                crate::spec::suggest(&e.inner().to_string()),
            )
        })?;
        config.validate()?;
        Ok(config)
    }

    /// Every name resolves, every group pairs something, every test reads
    /// as a valid spec once a pair's addresses are in, every schedule reads.
    pub fn validate(&self) -> Result<(), SpecError> {
        if self.agent.api_port == 0 {
            return Err(SpecError::new("agent.api_port", "must be a port, 1 to 65535"));
        }
        // Counted before any group is expanded: a document may name many
        // addresses in few bytes, and its pairs grow as their square.
        self.check_pair_count()?;
        self.alerts.validate(self)?;
        let mut urls = std::collections::BTreeSet::new();
        for (name, a) in &self.archives {
            let place = format!("archives.{name}");
            let url = a.url.trim_end_matches('/');
            if !(url.starts_with("http://") || url.starts_with("https://")) || url.len() < 10 {
                return Err(SpecError::new(
                    &format!("{place}.url"),
                    format!("'{}' is not an http:// or https:// URL", a.url),
                ));
            }
            if !urls.insert(url) {
                return Err(SpecError::new(
                    &format!("{place}.url"),
                    format!("'{url}' is named by another archive too"),
                ));
            }
            if let Some(pin) = &a.tls_sha256 {
                if !is_sha256(pin) {
                    return Err(SpecError::new(
                        &format!("{place}.tls_sha256"),
                        format!("'{pin}' is not a SHA-256 fingerprint (64 hex digits)"),
                    ));
                }
                if !url.starts_with("https://") {
                    return Err(SpecError::new(
                        &format!("{place}.tls_sha256"),
                        "a certificate fingerprint is for an https:// URL",
                    ));
                }
            }
            if let Some(t) = &a.transform {
                if a.kind == ArchiveKind::Goodput {
                    return Err(SpecError::new(
                        &format!("{place}.transform"),
                        "a goodput archive takes runs as goodput writes them; a transform is for kind = \"http\"",
                    ));
                }
                if a.kind == ArchiveKind::Pscheduler {
                    return Err(SpecError::new(
                        &format!("{place}.transform"),
                        "a pscheduler archive is sent pScheduler's own documents, which perfSONAR's \
                         pipeline reads by their field names; a transform is for kind = \"http\"",
                    ));
                }
                t.validate()
                    .map_err(|(at, why)| SpecError::new(&format!("{place}.transform.{at}"), why))?;
            }
        }
        for (name, a) in &self.addresses {
            if a.address.trim().is_empty() {
                return Err(SpecError::new(&format!("addresses.{name}.address"), "is empty"));
            }
            if a.pscheduler && !a.no_agent {
                return Err(SpecError::new(
                    &format!("addresses.{name}.pscheduler"),
                    "a pScheduler host runs no goodput agent: set no_agent = true beside it",
                ));
            }
            if let Some(pin) = &a.tls_sha256 {
                if !is_sha256(pin) {
                    return Err(SpecError::new(
                        &format!("addresses.{name}.tls_sha256"),
                        format!("'{pin}' is not a SHA-256 fingerprint (64 hex digits)"),
                    ));
                }
            }
        }
        for (name, g) in &self.groups {
            let place = format!("groups.{name}");
            let members: Vec<&String> = match g {
                Group::Mesh { addresses } | Group::List { addresses } => addresses.iter().collect(),
                Group::Disjoint { a, b, .. } => a.iter().chain(b.iter()).collect(),
            };
            for m in &members {
                if !self.addresses.contains_key(m.as_str()) {
                    return Err(SpecError::new(&place, format!("no address named '{m}'")));
                }
            }
            if self.pairs(g).is_empty() {
                return Err(SpecError::new(
                    &place,
                    "makes no pair (a mesh needs two addresses)",
                ));
            }
        }
        for (name, s) in &self.schedules {
            s.repeat_of()
                .map_err(|e| SpecError::new(&format!("schedules.{name}.{}", e.0), e.1))?;
        }
        for (name, t) in &self.tasks {
            let place = format!("tasks.{name}");
            let group = self.groups.get(&t.group).ok_or_else(|| {
                SpecError::new(&format!("{place}.group"), format!("no group named '{}'", t.group))
            })?;
            let template = self.tests.get(&t.test).ok_or_else(|| {
                SpecError::new(&format!("{place}.test"), format!("no test named '{}'", t.test))
            })?;
            if !self.schedules.contains_key(&t.schedule) {
                return Err(SpecError::new(
                    &format!("{place}.schedule"),
                    format!("no schedule named '{}'", t.schedule),
                ));
            }
            let single = matches!(group, Group::List { .. });
            let text = template.to_string();
            if !single && !text.contains("{{dest}}") {
                return Err(SpecError::new(
                    &format!("tests.{}", t.test),
                    format!(
                        "names no peer for the pairs of group '{}': write \"{{{{dest}}}}\" where the destination's address goes",
                        t.group
                    ),
                ));
            }
            if single && text.contains("{{dest}}") {
                return Err(SpecError::new(
                    &format!("tests.{}", t.test),
                    format!(
                        "uses {{{{dest}}}}, but group '{}' is a list: it has no destination",
                        t.group
                    ),
                ));
            }
            if let Some(label) = &t.label {
                for (source, dest) in self.pairs(group) {
                    for n in std::iter::once(&source).chain(dest.as_ref()) {
                        if !self.addresses[n].labels.contains_key(label) {
                            return Err(SpecError::new(
                                &format!("{place}.label"),
                                format!("address '{n}' has no '{label}' label"),
                            ));
                        }
                    }
                }
            }
            // The test, filled in for the group's first pair, must be a spec.
            let (source, dest) = self.pairs(group).remove(0);
            let spec = self
                .fill(template, &source, dest.as_deref(), t.label.as_deref())
                .map_err(|e| e.within(&format!("tests.{}", t.test)))?;
            if matches!(spec, TestSpec::Server(_)) {
                return Err(SpecError::new(
                    &format!("tests.{}", t.test),
                    "a server is not a test: every agent serves already",
                ));
            }
            // A mark the test's kind cannot make is refused, not dropped.
            if let Some(d) = t.dscp {
                let mut marked = spec;
                marked
                    .set_dscp(d)
                    .map_err(|e| SpecError::new(&format!("{place}.dscp"), e.message))?;
            }
        }
        Ok(())
    }

    /// How many pairs the tasks expand to at most (each enabled or
    /// disabled task counts its group's pairs), by arithmetic.
    pub fn pair_count(&self) -> u64 {
        self.tasks
            .values()
            .filter_map(|t| self.groups.get(&t.group))
            .fold(0u64, |sum, g| sum.saturating_add(g.pair_count()))
    }

    /// Refuses a document whose groups or tasks would expand past
    /// [`MAX_PAIRS`], naming the count.
    pub fn check_pair_count(&self) -> Result<(), SpecError> {
        for (name, g) in &self.groups {
            let n = g.pair_count();
            if n > MAX_PAIRS {
                return Err(SpecError::new(
                    &format!("groups.{name}"),
                    format!(
                        "limit max_pairs: {} makes {} pairs, {} allowed",
                        g.describe(),
                        grouped(n),
                        grouped(MAX_PAIRS)
                    ),
                ));
            }
        }
        let n = self.pair_count();
        if n > MAX_PAIRS {
            return Err(SpecError::new(
                "tasks",
                format!(
                    "limit max_pairs: the {} tasks make {} pairs, {} allowed",
                    self.tasks.len(),
                    grouped(n),
                    grouped(MAX_PAIRS)
                ),
            ));
        }
        Ok(())
    }

    /// The ordered (source, destination) pairs of a group.
    pub fn pairs(&self, g: &Group) -> Vec<(String, Option<String>)> {
        let mut out = Vec::new();
        match g {
            Group::Mesh { addresses } => {
                for s in addresses {
                    for d in addresses.iter().filter(|d| *d != s) {
                        out.push((s.clone(), Some(d.clone())));
                    }
                }
            }
            Group::Disjoint { a, b, unidirectional } => {
                for x in a {
                    for y in b.iter().filter(|y| *y != x) {
                        out.push((x.clone(), Some(y.clone())));
                        if !unidirectional {
                            out.push((y.clone(), Some(x.clone())));
                        }
                    }
                }
            }
            Group::List { addresses } => out.extend(addresses.iter().map(|a| (a.clone(), None))),
        }
        // A source with no agent cannot run anything.
        out.retain(|(s, _)| self.addresses.get(s).is_some_and(|a| !a.no_agent));
        out.dedup();
        out
    }

    fn address_of(&self, name: &str, label: Option<&str>) -> String {
        let a = &self.addresses[name];
        label.and_then(|l| a.labels.get(l)).unwrap_or(&a.address).clone()
    }

    /// A test template with a pair's addresses in, read and validated.
    fn fill(
        &self,
        template: &serde_json::Value,
        source: &str,
        dest: Option<&str>,
        label: Option<&str>,
    ) -> Result<TestSpec, SpecError> {
        let text = template
            .to_string()
            .replace("{{source}}", &self.address_of(source, label))
            .replace(
                "{{dest}}",
                &dest.map(|d| self.address_of(d, label)).unwrap_or_default(),
            );
        let value: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| SpecError::new("", e.to_string()))?;
        let spec = crate::spec::read_one(value)?;
        spec.validate()?;
        Ok(spec)
    }

    /// The tasks an agent runs: every enabled pair whose source is one of
    /// `mine` (its address names).
    pub fn tasks_for(&self, mine: &[String]) -> Result<Vec<PairTask>, SpecError> {
        let mut out = Vec::new();
        // Looked up once per pair: a set, not a scan of every address.
        let mine: std::collections::HashSet<&str> = mine.iter().map(String::as_str).collect();
        for (name, t) in self.tasks.iter().filter(|(_, t)| !t.disabled) {
            let group = &self.groups[&t.group];
            let schedule = &self.schedules[&t.schedule];
            let repeat = schedule
                .repeat_of()
                .map_err(|e| SpecError::new(&format!("schedules.{}.{}", t.schedule, e.0), e.1))?;
            for (source, dest) in self.pairs(group) {
                if !mine.contains(source.as_str()) {
                    continue;
                }
                let mut spec = self
                    .fill(&self.tests[&t.test], &source, dest.as_deref(), t.label.as_deref())
                    .map_err(|e| e.within(&format!("tests.{}", t.test)))?;
                if let Some(d) = t.dscp {
                    spec.set_dscp(d)
                        .map_err(|e| SpecError::new(&format!("tasks.{name}.dscp"), e.message))?;
                }
                let class = t.class.unwrap_or(spec.class());
                let seed = mix(crate::hash::fnv1a(
                    format!("{name}\0{source}\0{}", dest.as_deref().unwrap_or("")).as_bytes(),
                ));
                out.push(PairTask {
                    task: name.clone(),
                    dest_has_agent: dest.as_ref().is_some_and(|d| !self.addresses[d].no_agent),
                    source,
                    dest,
                    lead: t.scheduled_by,
                    spec,
                    class,
                    repeat,
                    seed,
                });
            }
        }
        Ok(out)
    }

    /// The names of the addresses an agent with these IP addresses or
    /// host names holds.
    pub fn addresses_of(&self, identities: &[String]) -> Vec<String> {
        self.addresses
            .iter()
            .filter(|(_, a)| {
                identities.iter().any(|i| {
                    i.eq_ignore_ascii_case(&a.address) || a.labels.values().any(|l| l.eq_ignore_ascii_case(i))
                })
            })
            .map(|(n, _)| n.clone())
            .collect()
    }
}

impl Schedule {
    /// The schedule as a [`Repeat`], or the field that is wrong and why.
    pub fn repeat_of(&self) -> Result<Repeat, (&'static str, String)> {
        let (every, cron) = match (&self.cron, self.repeat.trim()) {
            (Some(_), r) if !r.is_empty() => {
                return Err(("cron", "give repeat or cron, not both".into()));
            }
            (Some(_), _) if self.max_runs.is_some() => {
                return Err((
                    "max_runs",
                    "is for repeat schedules; a cron schedule ends with until".into(),
                ));
            }
            (Some(c), _) => (0, Some(c.parse::<crate::cron::Cron>().map_err(|e| ("cron", e))?)),
            (None, _) => {
                let every = duration_ms(&self.repeat).map_err(|e| ("repeat", e))?;
                if every == 0 {
                    return Err(("repeat", "must be above zero".into()));
                }
                (every, None)
            }
        };
        let slip = match &self.slip {
            Some(s) => duration_ms(s).map_err(|e| ("slip", e))?,
            None => 0,
        };
        let start = match &self.start {
            Some(s) => rfc3339_ms(s).map_err(|e| ("start", e))?,
            None => 0,
        };
        let until = match &self.until {
            Some(s) => Some(rfc3339_ms(s).map_err(|e| ("until", e))?),
            None => None,
        };
        Ok(Repeat {
            start,
            every,
            until,
            max_runs: self.max_runs,
            slip,
            sliprand: self.sliprand,
            cron,
        })
    }
}

/// A task whose runs would overlap themselves: each lasts longer than the
/// time between two of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SelfOverlap {
    /// The task's name.
    pub task: String,
    /// How long one run lasts by its test's own settings (a latencybg
    /// stream's packets times their interval, a throughput test's
    /// duration), milliseconds.
    pub run_ms: Ms,
    /// The schedule's repeat, milliseconds.
    pub every_ms: Ms,
}

impl MeshConfig {
    /// The enabled tasks whose test lasts longer than their schedule's
    /// repeat (the test as the group's first pair fills it in: every pair
    /// of a task runs the same test). A cron schedule, a test with no
    /// length of its own and a test that does not read are left out: the
    /// first two have no fixed gap or length to compare, and `validate`
    /// names the last.
    pub fn self_overlaps(&self) -> Vec<SelfOverlap> {
        let mut out = Vec::new();
        for (name, t) in self.tasks.iter().filter(|(_, t)| !t.disabled) {
            let (Some(group), Some(schedule), Some(test)) = (
                self.groups.get(&t.group),
                self.schedules.get(&t.schedule),
                self.tests.get(&t.test),
            ) else {
                continue;
            };
            let Ok(repeat) = schedule.repeat_of() else {
                continue;
            };
            if repeat.cron.is_some() || repeat.every == 0 {
                continue;
            }
            let Some((source, dest)) = self.pairs(group).into_iter().next() else {
                continue;
            };
            let Ok(spec) = self.fill(test, &source, dest.as_deref(), t.label.as_deref()) else {
                continue;
            };
            if let Some(run_ms) = spec.expected_ms().filter(|m| *m > repeat.every) {
                out.push(SelfOverlap {
                    task: name.clone(),
                    run_ms,
                    every_ms: repeat.every,
                });
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transform_keeps_the_selected_fields_and_renames_them() {
        let run = serde_json::json!({
            "id": "r1", "task": "t", "spec": {"kind": "tcp", "hosts": ["h"]},
            "figures": {"loss_pct": 1.5, "goodput_up_bps": 9e8, "jitter_ms": null},
            "result": {"big": [1, 2, 3]}
        });
        let t = Transform {
            select: vec![
                "id".into(),
                "figures.loss_pct".into(),
                "figures.goodput_up_bps".into(),
                "absent.x".into(),
            ],
            rename: [
                ("figures.loss_pct".to_string(), "loss".to_string()),
                ("id".to_string(), "meta.run_id".to_string()),
            ]
            .into(),
        };
        t.validate().unwrap();
        assert_eq!(
            t.apply(run.clone()),
            serde_json::json!({"meta": {"run_id": "r1"}, "loss": 1.5, "figures": {"goodput_up_bps": 9e8}})
        );
        // No select: everything, renamed; renames may swap two fields.
        let swap = Transform {
            select: vec![],
            rename: [
                ("id".to_string(), "task".to_string()),
                ("task".to_string(), "id".to_string()),
            ]
            .into(),
        };
        let out = swap.apply(run.clone());
        assert_eq!(
            (out["id"].as_str(), out["task"].as_str()),
            (Some("t"), Some("r1"))
        );
        assert_eq!(out["result"], run["result"]);
        // A rename into a field that is not an object replaces it.
        let into = Transform {
            select: vec![],
            rename: [("id".to_string(), "task.name".to_string())].into(),
        };
        assert_eq!(into.apply(run)["task"], serde_json::json!({"name": "r1"}));
        for bad in ["", "a..b", ".a", "a."] {
            let t = Transform {
                select: vec![bad.into()],
                rename: Default::default(),
            };
            assert!(t.validate().unwrap_err().1.contains("not a field path"), "{bad}");
        }
        let deep = Transform {
            select: vec![vec!["x"; 17].join(".")],
            rename: Default::default(),
        };
        assert!(deep.validate().unwrap_err().1.contains("deeper than 16"));
        let clash = Transform {
            select: vec![],
            rename: [
                ("a".to_string(), "c".to_string()),
                ("b".to_string(), "c".to_string()),
            ]
            .into(),
        };
        assert_eq!(clash.validate().unwrap_err().1, "two fields are renamed to 'c'");
        for (pairs, why) in [
            (vec![("a", "y"), ("a.c", "z")], "'a.c' is inside 'a'"),
            (vec![("x", "m"), ("y", "m.n")], "'m.n' is inside 'm'"),
        ] {
            let t = Transform {
                select: vec![],
                rename: pairs
                    .into_iter()
                    .map(|(a, b)| (a.to_string(), b.to_string()))
                    .collect(),
            };
            assert!(t.validate().unwrap_err().1.starts_with(why), "{why}");
        }
        // A field and one inside it both selected, in either order.
        let doc = serde_json::json!({"a": {"b": 1, "c": 2}, "d": 3});
        for select in [["a.b", "a"], ["a", "a.b"]] {
            let t = Transform {
                select: select.iter().map(|s| s.to_string()).collect(),
                rename: Default::default(),
            };
            assert_eq!(
                t.apply(doc.clone()),
                serde_json::json!({"a": {"b": 1, "c": 2}}),
                "{select:?}"
            );
        }
    }

    #[test]
    fn archives_in_the_mesh_document_are_checked() {
        let base = "[addresses.a]\naddress = \"10.0.0.1\"\n";
        let ok = format!(
            "{base}[archives.central]\nurl = \"https://archive.example:8780/\"\ntls_sha256 = \"{}\"\n\
             [archives.logs]\nurl = \"http://10.0.0.9:8080/in\"\nkind = \"http\"\n\
             [archives.logs.transform]\nselect = [\"id\", \"figures\"]\nrename = {{ figures = \"metrics\" }}\n",
            "ab".repeat(32)
        );
        let m = MeshConfig::read(&ok, true).unwrap();
        assert_eq!(m.archives["central"].kind, ArchiveKind::Goodput);
        assert_eq!(
            m.archives["logs"].transform.as_ref().unwrap().rename["figures"],
            "metrics"
        );
        for (doc, place, why) in [
            ("[archives.x]\nurl = \"ftp://h/\"\n", "archives.x.url", "not an http"),
            (
                "[archives.x]\nurl = \"http://h:1/\"\ntls_sha256 = \"00\"\n",
                "archives.x.tls_sha256",
                "not a SHA-256",
            ),
            (
                &format!("[archives.x]\nurl = \"http://h:1/\"\ntls_sha256 = \"{}\"\n", "00".repeat(32)),
                "archives.x.tls_sha256",
                "for an https:// URL",
            ),
            (
                "[archives.x]\nurl = \"http://h:1/\"\n[archives.x.transform]\nselect = [\"id\"]\n",
                "archives.x.transform",
                "kind = \"http\"",
            ),
            (
                "[archives.x]\nurl = \"http://h:1/\"\nkind = \"http\"\n[archives.x.transform]\nselect = [\"a..b\"]\n",
                "archives.x.transform.select",
                "not a field path",
            ),
            (
                "[archives.x]\nurl = \"http://h:1\"\n[archives.y]\nurl = \"http://h:1/\"\n",
                "archives.y.url",
                "named by another archive",
            ),
            (
                "[archives.x]\nurl = \"http://h:1/\"\nkind = \"pscheduler\"\n[archives.x.transform]\nselect = [\"id\"]\n",
                "archives.x.transform",
                "pScheduler's own documents",
            ),
            ("[archives.x]\nurl = \"http://h:1\"\nkind = \"kafka\"\n", "archives.x.kind", "unknown variant"),
        ] {
            let e = MeshConfig::read(&format!("{base}{doc}"), true).unwrap_err();
            assert_eq!(e.field, place, "{doc}");
            assert!(e.message.contains(why), "{doc}: {}", e.message);
        }
    }

    const MESH: &str = r#"
[addresses.alpha]
address = "10.0.0.1"
tags = ["site-a"]
labels = { v6 = "2001:db8::1" }
[addresses.beta]
address = "10.0.0.2"
labels = { v6 = "2001:db8::2" }
[addresses.gamma]
address = "10.0.0.3"
labels = { v6 = "2001:db8::3" }
[addresses.router]
address = "10.0.0.254"
no_agent = true

[groups.core]
type = "mesh"
addresses = ["alpha", "beta", "gamma"]
[groups.to-router]
type = "disjoint"
a = ["alpha", "beta"]
b = ["router"]

[tests.throughput]
kind = "tcp"
hosts = ["{{dest}}"]
duration = "20s"
[tests.latency]
kind = "stamp"
host = "{{dest}}"
port = 8620

[schedules.six-hourly]
repeat = "PT6H"
slip = "PT1H"
sliprand = true
[schedules.always]
repeat = "1m"

[tasks.core-throughput]
group = "core"
test = "throughput"
schedule = "six-hourly"
[tasks.core-latency-v6]
group = "core"
test = "latency"
schedule = "always"
label = "v6"
dscp = 8
[tasks.router-latency]
group = "to-router"
test = "latency"
schedule = "always"
"#;

    /// A two-host mesh whose one task runs `test` (a TOML table body)
    /// with `dscp`.
    fn marked(test: &str, dscp: u8) -> String {
        format!(
            r#"
[addresses.a]
address = "10.0.0.1"
[addresses.b]
address = "10.0.0.2"
[groups.pair]
type = "mesh"
addresses = ["a", "b"]
[tests.t]
{test}
[schedules.s]
repeat = "1h"
[tasks.marked]
group = "pair"
test = "t"
schedule = "s"
dscp = {dscp}
"#
        )
    }

    #[test]
    fn a_task_mark_reaches_the_kinds_that_mark_and_is_refused_by_the_rest() {
        // iperf3 marks through its own `tos`, the whole byte: DSCP 8 (CS1)
        // is 32 there.
        let c = MeshConfig::read(&marked("kind = \"iperf3\"\nhost = \"{{dest}}\"", 8), true).unwrap();
        let tasks = c.tasks_for(&["a".into()]).unwrap();
        match &tasks[0].spec {
            TestSpec::Iperf3(s) => assert_eq!(s.tos, 32),
            other => panic!("{other:?}"),
        }
        let c = MeshConfig::read(&marked("kind = \"udp\"\nhost = \"{{dest}}\"", 46), true).unwrap();
        match &c.tasks_for(&["a".into()]).unwrap()[0].spec {
            TestSpec::Udp(s) => assert_eq!(s.dscp, 46),
            other => panic!("{other:?}"),
        }
        // The kinds whose packets the engine does not mark refuse it,
        // naming the kind and the kinds that can.
        for test in [
            "kind = \"echo\"\ntarget = \"{{dest}}\"",
            "kind = \"quic\"\nhost = \"{{dest}}\"",
            "kind = \"ttcp\"\nrole = \"transmit\"\nhost = \"{{dest}}\"",
            "kind = \"trace\"\nhost = \"{{dest}}\"",
            "kind = \"ping\"\nhost = \"{{dest}}\"",
        ] {
            let kind = test.split('"').nth(1).unwrap();
            let e = MeshConfig::read(&marked(test, 8), true).unwrap_err().to_string();
            assert_eq!(
                e,
                format!(
                    "tasks.marked.dscp: {kind} cannot mark its packets; dscp is for tcp, udp, stamp, iperf3, owamp, twamp"
                )
            );
        }
        let e = MeshConfig::read(&marked("kind = \"tcp\"\nhosts = [\"{{dest}}\"]", 64), true)
            .unwrap_err()
            .to_string();
        assert_eq!(e, "tasks.marked.dscp: must be 0-63");
    }

    #[test]
    fn each_agent_gets_its_own_pairs_and_islands_get_none() {
        let c = MeshConfig::read(MESH, true).unwrap();
        let mine = c.addresses_of(&["10.0.0.1".into()]);
        assert_eq!(mine, vec!["alpha".to_string()]);
        let tasks = c.tasks_for(&mine).unwrap();
        let mut seen: Vec<(String, Option<String>)> =
            tasks.iter().map(|t| (t.task.clone(), t.dest.clone())).collect();
        seen.sort();
        let want: Vec<(String, Option<String>)> = [
            ("core-latency-v6", "beta"),
            ("core-latency-v6", "gamma"),
            ("core-throughput", "beta"),
            ("core-throughput", "gamma"),
            ("router-latency", "router"),
        ]
        .iter()
        .map(|(t, d)| (t.to_string(), Some(d.to_string())))
        .collect();
        assert_eq!(seen, want);
        let throughput = tasks.iter().find(|t| t.task == "core-throughput").unwrap();
        assert_eq!(throughput.class, RunClass::Exclusive);
        assert!(throughput.dest_has_agent);
        match &throughput.spec {
            TestSpec::Tcp(s) => assert_eq!(s.hosts, vec!["10.0.0.2".to_string()]),
            other => panic!("{other:?}"),
        }
        let v6 = tasks.iter().find(|t| t.task == "core-latency-v6").unwrap();
        assert_eq!(v6.class, RunClass::Background);
        match &v6.spec {
            TestSpec::Stamp(s) => {
                assert!(s.host.as_deref().is_some_and(|h| h.starts_with("2001:db8::")));
                assert_eq!(s.dscp, 8);
            }
            other => panic!("{other:?}"),
        }
        let router = tasks.iter().find(|t| t.task == "router-latency").unwrap();
        assert!(!router.dest_has_agent, "the router runs no agent");
        // The router is a destination only: it runs nothing.
        assert!(c.tasks_for(&["router".into()]).unwrap().is_empty());
        // 3 hosts in a mesh: 6 ordered pairs of each core task; 2 to the router.
        let all: Vec<String> = c.addresses.keys().cloned().collect();
        assert_eq!(c.tasks_for(&all).unwrap().len(), 6 + 6 + 2);
    }

    #[test]
    fn the_same_pair_spreads_the_same_way_on_every_agent() {
        let c = MeshConfig::read(MESH, true).unwrap();
        let a = c.tasks_for(&["alpha".into()]).unwrap();
        let b = c.tasks_for(&["alpha".into(), "beta".into()]).unwrap();
        let pick = |v: &[PairTask]| {
            v.iter()
                .find(|t| t.task == "core-throughput" && t.dest.as_deref() == Some("beta"))
                .map(|t| t.seed)
        };
        assert_eq!(pick(&a), pick(&b));
        let t = a.iter().find(|t| t.task == "core-throughput").unwrap();
        assert_eq!(
            (t.repeat.every, t.repeat.slip, t.repeat.sliprand),
            (6 * 3_600_000, 3_600_000, true)
        );
    }

    #[test]
    fn mistakes_name_their_place() {
        let cases: [(&str, &str, &str); 9] = [
            (
                "[groups.core]",
                "[groups.core]\nextra = 1",
                "groups.core: unknown field",
            ),
            (
                r#"addresses = ["alpha", "beta", "gamma"]"#,
                r#"addresses = ["alpha", "beta", "gama"]"#,
                "groups.core: no address named 'gama'",
            ),
            (
                r#"test = "throughput""#,
                r#"test = "thruput""#,
                "tasks.core-throughput.test: no test named 'thruput'",
            ),
            (
                r#"repeat = "PT6H""#,
                r#"repeat = "every six hours""#,
                "schedules.six-hourly.repeat: 'every six hours' is not a duration",
            ),
            (
                r#"hosts = ["{{dest}}"]"#,
                r#"hosts = ["10.0.0.9"]"#,
                "tests.throughput: names no peer for the pairs of group 'core'",
            ),
            (
                r#"duration = "20s""#,
                r#"duration = "20s"
connections = 0"#,
                "tests.throughput.tcp.connections: must be at least 1",
            ),
            (
                r#"label = "v6""#,
                r#"label = "v7""#,
                "tasks.core-latency-v6.label: address 'alpha' has no 'v7' label",
            ),
            (
                r#"repeat = "1m""#,
                "repeat = \"1m\"\ncron = \"* * * * *\"",
                "schedules.always.cron: give repeat or cron, not both",
            ),
            (
                r#"repeat = "1m""#,
                "cron = \"61 * * * *\"",
                "schedules.always.cron: minute: '61' is outside 0-59",
            ),
        ];
        for (from, to, says) in cases {
            assert!(MESH.contains(from), "{from}");
            let e = MeshConfig::read(&MESH.replacen(from, to, 1), true).unwrap_err();
            let text = format!("{}: {}", e.field, e.message);
            assert!(text.contains(says), "{text:?} lacks {says:?}");
        }
    }

    #[test]
    fn each_run_has_a_stable_id_and_books_what_its_spec_lasts() {
        let c = MeshConfig::read(MESH, true).unwrap();
        let tasks = c.tasks_for(&["alpha".into()]).unwrap();
        let t = tasks
            .iter()
            .find(|t| t.task == "core-throughput" && t.dest.as_deref() == Some("beta"))
            .unwrap();
        // Named by the run's base time: the seventh six hours on.
        let base = t.repeat.start + 7 * 6 * 3_600_000;
        assert_eq!(t.run_id(7), format!("core-throughput/alpha/beta/{base}"));
        assert_ne!(t.run_id(7), t.run_id(8));
        // 20 s, and a margin.
        assert_eq!(t.expected_ms(), 22_000);
        let stamp = tasks.iter().find(|t| t.task == "router-latency").unwrap();
        // 100 packets 100 ms apart, the 2 s timeout, the margin.
        assert_eq!(stamp.expected_ms(), 10_000 + 2_000 + 2_000);
    }

    #[test]
    fn owamp_and_twamp_tests_to_perfsonar_hosts_round_trip_and_pair() {
        // A goodput host measuring two perfSONAR hosts (no agent: owampd
        // and twampd answer) with their own protocols.
        let text = r#"
[addresses.gp]
address = "192.0.2.10"
[addresses.ps-east]
address = "192.0.2.20"
no_agent = true
[addresses.ps-west]
address = "2001:db8::30"
no_agent = true

[groups.perfsonar]
type = "disjoint"
a = ["gp"]
b = ["ps-east", "ps-west"]
unidirectional = true

[tests.owd]
kind = "owamp"
host = "{{dest}}"
direction = "both"
count = 600
interval = "100ms"
padding = 20
dscp = 46

[tests.owd-stream]
kind = "owamp"
host = "{{dest}}"
direction = "to"
continuous = true
summary_every = 600

[tests.rtt]
kind = "twamp"
host = "{{dest}}"
count = 100
mode = "authenticated"
key_identity = "mesh"
passphrase_file = "/etc/goodput/twamp.pfs"

[schedules.often]
repeat = "PT10M"
[schedules.daily]
repeat = "P1D"

[tasks.owd]
group = "perfsonar"
test = "owd"
schedule = "often"
[tasks.owd-stream]
group = "perfsonar"
test = "owd-stream"
schedule = "daily"
[tasks.rtt]
group = "perfsonar"
test = "rtt"
schedule = "often"
"#;
        let c = MeshConfig::read(text, true).unwrap();
        // TOML → JSON → TOML, the same configuration each time.
        let json = serde_json::to_string(&c).unwrap();
        let back = MeshConfig::read(&json, false).unwrap();
        assert_eq!(back, c);
        let again = MeshConfig::read(&toml::to_string(&back).unwrap(), true).unwrap();
        assert_eq!(again, c);

        let pairs = c.tasks_for(&["gp".into()]).unwrap();
        let got: Vec<(&str, &str, bool, crate::kind::Kind, RunClass)> = pairs
            .iter()
            .map(|p| {
                (
                    p.task.as_str(),
                    p.dest.as_deref().unwrap_or(""),
                    p.dest_has_agent,
                    p.spec.kind(),
                    p.class,
                )
            })
            .collect();
        use crate::kind::Kind::{Owamp, Twamp};
        use RunClass::Background;
        assert_eq!(
            got,
            [
                ("owd", "ps-east", false, Owamp, Background),
                ("owd", "ps-west", false, Owamp, Background),
                ("owd-stream", "ps-east", false, Owamp, Background),
                ("owd-stream", "ps-west", false, Owamp, Background),
                ("rtt", "ps-east", false, Twamp, Background),
                ("rtt", "ps-west", false, Twamp, Background),
            ]
        );
        let TestSpec::Owamp(o) = &pairs[1].spec else {
            panic!("{:?}", pairs[1].spec)
        };
        assert_eq!(o.host.as_deref(), Some("2001:db8::30"));
        assert_eq!((o.count, o.padding, o.dscp), (600, 20, 46));
        assert_eq!(
            pairs[1].spec.targets(),
            vec![("2001:db8::30".to_owned(), Some(861))]
        );
        // 600 packets 100 ms apart, the 2 s loss timeout and the margin.
        assert_eq!(pairs[0].expected_ms(), 60_000 + 2_000 + 2_000);
        // A continuous stream has no end of its own: it books a minute.
        assert_eq!(pairs[2].expected_ms(), 60_000);
        assert_eq!(
            pairs[4].spec.targets(),
            vec![("192.0.2.20".to_owned(), Some(862))]
        );
        // A TWAMP test in authenticated mode without its key is refused
        // where it is written.
        let e = MeshConfig::read(&text.replace("key_identity = \"mesh\"\n", ""), true).unwrap_err();
        assert_eq!(
            e.to_string(),
            "tests.rtt.twamp.key_identity: is required in authenticated mode (with `passphrase_file`)"
        );
    }

    /// A full mesh of `n` addresses with one task, as TOML.
    fn big_mesh(n: usize) -> String {
        let mut t = String::new();
        for i in 0..n {
            t += &format!(
                "[addresses.h{i}]\naddress = \"10.{}.{}.{}\"\n",
                i >> 16,
                (i >> 8) & 255,
                i & 255
            );
        }
        let names: Vec<String> = (0..n).map(|i| format!("\"h{i}\"")).collect();
        t += &format!(
            "[groups.all]\ntype = \"mesh\"\naddresses = [{}]\n\
             [tests.latency]\nkind = \"stamp\"\nhost = \"{{{{dest}}}}\"\n\
             [schedules.often]\nrepeat = \"1m\"\n\
             [tasks.mesh]\ngroup = \"all\"\ntest = \"latency\"\nschedule = \"often\"\n",
            names.join(", ")
        );
        t
    }

    #[test]
    fn a_document_that_would_expand_past_the_pair_limit_is_refused_uncounted() {
        // 20,000 addresses: 399,980,000 pairs, refused by arithmetic (the
        // pairs would take tens of GB).
        let started = std::time::Instant::now();
        let e = MeshConfig::read(&big_mesh(20_000), true).unwrap_err();
        assert_eq!(e.field, "groups.all");
        assert_eq!(
            e.message,
            "limit max_pairs: a mesh of 20,000 addresses makes 399,980,000 pairs, 250,000 allowed"
        );
        assert!(started.elapsed() < std::time::Duration::from_secs(20));
        // 500 addresses: 249,500 pairs, within the limit.
        let c = MeshConfig::read(&big_mesh(500), true).unwrap();
        assert_eq!(c.pair_count(), 249_500);
        // Two tasks over the same 400 addresses: 2 × 159,600.
        let mut two = big_mesh(400);
        two += "[tasks.again]\ngroup = \"all\"\ntest = \"latency\"\nschedule = \"often\"\n";
        let e = MeshConfig::read(&two, true).unwrap_err();
        assert_eq!(
            (e.field.as_str(), e.message.as_str()),
            (
                "tasks",
                "limit max_pairs: the 2 tasks make 319,200 pairs, 250,000 allowed"
            )
        );
        // Disjoint and list groups are counted the same way.
        let g = Group::Disjoint {
            a: vec!["a".into(); 3],
            b: vec!["b".into(); 5],
            unidirectional: false,
        };
        assert_eq!(g.pair_count(), 30);
        assert_eq!(
            Group::List {
                addresses: vec!["a".into(); 7]
            }
            .pair_count(),
            7
        );
        assert_eq!(Group::Mesh { addresses: vec![] }.pair_count(), 0);
    }

    #[test]
    fn a_document_past_the_byte_limit_is_refused_unread() {
        let text = " ".repeat(MAX_DOCUMENT_BYTES + 1);
        let e = MeshConfig::read(&text, true).unwrap_err();
        assert_eq!(
            e.message,
            "limit max_config_bytes: the document has 16,777,217 bytes, 16,777,216 allowed"
        );
    }

    #[test]
    fn a_task_longer_than_its_repeat_is_named_with_both_durations() {
        let doc = |count: u32, repeat: &str, cron: bool| {
            let schedule = if cron {
                "cron = \"* * * * *\"".to_string()
            } else {
                format!("repeat = \"{repeat}\"")
            };
            format!(
                r#"
[addresses.a]
address = "10.0.0.1"
[addresses.b]
address = "10.0.0.2"
[groups.ab]
type = "mesh"
addresses = ["a", "b"]
[tests.bg]
kind = "stamp"
host = "{{{{dest}}}}"
count = {count}
interval = "200ms"
[schedules.s]
{schedule}
[tasks.latency-bg]
group = "ab"
test = "bg"
schedule = "s"
[tasks.off]
group = "ab"
test = "bg"
schedule = "s"
disabled = true
"#
            )
        };
        // 600 packets 0.2 s apart on a one-minute repeat: two minutes
        // and more (the reflector's last answers are waited for).
        let c = MeshConfig::read(&doc(600, "PT1M", false), true).unwrap();
        let run_ms = c.tests_of_first_pair_length("latency-bg");
        assert!(run_ms > 120_000, "{run_ms}");
        assert_eq!(
            c.self_overlaps(),
            [SelfOverlap {
                task: "latency-bg".into(),
                run_ms,
                every_ms: 60_000
            }]
        );
        // It fits in five minutes; a cron schedule has no fixed gap.
        assert!(MeshConfig::read(&doc(600, "PT5M", false), true)
            .unwrap()
            .self_overlaps()
            .is_empty());
        assert!(MeshConfig::read(&doc(600, "", true), true)
            .unwrap()
            .self_overlaps()
            .is_empty());
        // Ten packets: two seconds and its wait, well inside a minute.
        assert!(MeshConfig::read(&doc(10, "PT1M", false), true)
            .unwrap()
            .self_overlaps()
            .is_empty());
    }

    impl MeshConfig {
        /// The length of a task's test as its first pair fills it in.
        fn tests_of_first_pair_length(&self, task: &str) -> Ms {
            let t = &self.tasks[task];
            let (s, d) = self.pairs(&self.groups[&t.group]).remove(0);
            self.fill(&self.tests[&t.test], &s, d.as_deref(), None)
                .unwrap()
                .expected_ms()
                .unwrap()
        }
    }
}
