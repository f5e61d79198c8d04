//! perfSONAR's pSConfig templates in goodput's mesh configuration: the
//! addresses, groups, schedules and tasks carry over nearly one to one
//! (goodput's mesh document was modelled on pSConfig), and each pScheduler
//! test spec becomes a goodput test of the kind that measures the same
//! thing with the same protocol where perfSONAR's hosts speak it:
//! throughput → `tcp` (or `iperf3`), latency and latencybg → `owamp`
//! (owping's and powstream's protocol: a perfSONAR host answers it),
//! rtt → `ping` (or `stamp`), or `twamp` when the test asks for TWAMP
//! (`protocol: twamp`, or the `twping` tool), trace → `trace`. Whatever
//! cannot be carried over is named in a note, one line each, never
//! dropped silently.
//!
//! Each task's group is expanded as pSConfig expands it (`expand`), and
//! each combination is placed where pScheduler would run it: the data
//! flows from the spec's `source` to its `dest`, the end that schedules
//! is `scheduled-by` or, when that end has no agent, the first that has
//! one (pSConfig's flip). goodput's pair is run by the end where the data
//! starts, or by the other end with the test turned round when the
//! source has no agent; the end that schedules books the slot. The
//! spec's source and destination variables become `{{source}}` and
//! `{{dest}}` of that pair. A `{% jq %}` variable in a spec is evaluated
//! for each combination, bounded (`jq`): the same text everywhere is put
//! in, the same end's address becomes that end's variable.
//!
//! Written from pSConfig's published JSON schema, its documentation and
//! the behaviour of its task generator, and pScheduler's test spec
//! fields.

use crate::kind::Kind;
use crate::mesh::{Address, ArchiveKind, ArchiveTarget, Group, Lead, MeshConfig, Schedule, Task, MAX_PAIRS};
use expand::Template;

mod dns;
mod expand;
pub(crate) mod jq;
use crate::time::duration_ms;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;

/// Which goodput kinds pScheduler's types become where there is a choice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ImportChoices {
    /// throughput → `iperf3` instead of `tcp` (UDP throughput is always
    /// iperf3).
    pub throughput_iperf3: bool,
    /// rtt → `stamp` instead of `ping`.
    pub rtt_stamp: bool,
}

/// A converted template: the mesh configuration and a line for each thing
/// that was not carried over (or carried over differently).
#[derive(Debug, Clone, PartialEq)]
pub struct Imported {
    /// The configuration (validated).
    pub config: MeshConfig,
    /// What was skipped or changed, with its place in the template.
    pub notes: Vec<String>,
}

/// The schedule latencybg tasks get when the template gives none: a
/// continuous stream, renewed daily as pScheduler renews its background
/// tasks (each stream reports a summary every `packet-count` packets).
const LATENCYBG_REPEAT: &str = "P1D";
/// The repeat of [`LATENCYBG_REPEAT`] in milliseconds: each stream, with
/// its set-up, its last packets' wait and its fetch, ends within it.
const LATENCYBG_REPEAT_MS: u64 = 86_400_000;

/// The tools pScheduler runs a latency or latencybg test with that speak
/// OWAMP.
const OWAMP_TOOLS: [&str; 2] = ["owping", "powstream"];

/// The pScheduler test types goodput measures.
const MEASURED: [&str; 7] = [
    "throughput",
    "latency",
    "latencybg",
    "rtt",
    "trace",
    "dns",
    "http",
];

/// Whether pScheduler's test type `ty` has a goodput kind (its tests
/// import and its results map).
pub fn has_kind(ty: &str) -> bool {
    MEASURED.contains(&ty)
}

/// The tool pScheduler runs a TWAMP rtt test with.
const TWAMP_TOOL: &str = "twping";

/// The tool pScheduler runs an ICMP rtt test with.
const PING_TOOL: &str = "ping";

/// The rtt test's `protocol` values: ICMP echo (ping's) and TWAMP.
const RTT_ICMP: &str = "icmp";
const RTT_TWAMP: &str = "twamp";

/// Converts a pSConfig template (its JSON). Fails only when the document
/// is not a template at all, when it would expand past goodput's bound
/// on pairs (counted before anything is built), or when what could be
/// converted is not a valid mesh configuration (the error says where).
pub fn import_psconfig(template: &Value, choices: ImportChoices) -> Result<Imported, String> {
    let top = template
        .as_object()
        .ok_or("a pSConfig template is a JSON object")?;
    for key in ["addresses", "groups", "tests", "tasks"] {
        if !top.get(key).is_some_and(Value::is_object) {
            return Err(format!("not a pSConfig template: no '{key}' object"));
        }
    }
    let naddr = obj(top, "addresses").count() as u64;
    if naddr > MAX_PAIRS {
        return Err(format!(
            "addresses: limit max_pairs: {} addresses, more than the {} pairs a mesh may expand to; refused before expanding",
            crate::mesh::grouped(naddr),
            crate::mesh::grouped(MAX_PAIRS)
        ));
    }
    let tpl = Template::read(top);
    // Bounded by arithmetic first: a few selectors of a class over many
    // addresses, or many tasks on one big group, would otherwise be
    // built before they are counted.
    let mut bound = 0u64;
    for (name, t) in obj(top, "tasks") {
        let g = t
            .get("group")
            .and_then(Value::as_str)
            .and_then(|g| top.get("groups").and_then(|x| x.get(g)));
        if let Some(g) = g {
            let n = tpl.group_bound(g);
            bound = bound.saturating_add(n);
            if n > MAX_PAIRS || bound > MAX_PAIRS {
                return Err(format!(
                    "tasks.{name}: limit max_pairs: the tasks up to it expand to as many as {} pairs, {} allowed; refused before expanding",
                    crate::mesh::grouped(bound),
                    crate::mesh::grouped(MAX_PAIRS)
                ));
            }
        }
    }
    let mut notes = Vec::new();
    let mut config = MeshConfig::default();
    for key in top.keys() {
        let why = match key.as_str() {
            "addresses" | "groups" | "tests" | "tasks" | "schedules" | "_meta" | "hosts"
            | "address-classes" | "archives" => continue,
            "contexts" => "goodput has no pScheduler contexts",
            "subtasks" => "goodput has no subtasks",
            "includes" => "its includes are resolved before the import (`--config` of a template does it)",
            _ => "goodput has no such section",
        };
        notes.push(format!("{key}: not carried over ({why})"));
    }
    addresses(top, &tpl, &mut config, &mut notes);
    archives(top, &mut config, &mut notes);
    let converted = tests(top, &tpl, &mut config, &mut notes, choices);
    schedules(top, &mut config, &mut notes);
    tasks(top, &tpl, &mut config, &mut notes, &converted);
    // Addresses no task uses are kept: they cost nothing and the next
    // template edit may use them.
    config
        .validate()
        .map_err(|e| format!("the converted configuration is not valid: {e}"))?;
    Ok(Imported { config, notes })
}

fn obj<'a>(top: &'a Map<String, Value>, key: &str) -> impl Iterator<Item = (&'a String, &'a Value)> {
    top.get(key)
        .and_then(Value::as_object)
        .into_iter()
        .flat_map(|m| m.iter())
}

fn disabled(v: &Value) -> bool {
    v.get("disabled").and_then(Value::as_bool) == Some(true)
}

/// Each enabled address, with its host's `no-agent` and tags merged in.
fn addresses(top: &Map<String, Value>, tpl: &Template, config: &mut MeshConfig, notes: &mut Vec<String>) {
    let mut counted: BTreeMap<&str, usize> = BTreeMap::new();
    for (name, a) in obj(top, "addresses") {
        let place = format!("addresses.{name}");
        let Some(x) = tpl.addrs.get(name) else {
            notes.push(format!("{place}: no 'address'; skipped"));
            continue;
        };
        if x.disabled {
            notes.push(format!("{place}: disabled (or its host is); skipped"));
            continue;
        }
        for key in ["pscheduler-address", "lead-bind-address", "contexts"] {
            if a.get(key).is_some() {
                *counted.entry(key).or_default() += 1;
            }
        }
        let labels = x
            .labels
            .iter()
            .filter(|(_, (_, d, _))| !d)
            .map(|(l, (addr, _, _))| (l.clone(), addr.clone()))
            .collect();
        let mut tags: Vec<String> = x.tags.clone();
        tags.dedup();
        config.addresses.insert(
            name.clone(),
            Address {
                address: x.address.clone(),
                labels,
                tags,
                no_agent: x.no_agent,
                ..Address::default()
            },
        );
    }
    for (key, n) in counted {
        let why = match key {
            "pscheduler-address" | "lead-bind-address" => {
                "goodput's agents book runs at the test address (their API listens on every address)"
            }
            _ => "goodput has no pScheduler contexts",
        };
        notes.push(format!(
            "addresses.*.{key}: not carried over ({n} addresses): {why}"
        ));
    }
}

/// pScheduler's http archivers as `pscheduler` archives (goodput sends
/// each run as that archiver would); others are named.
fn archives(top: &Map<String, Value>, config: &mut MeshConfig, notes: &mut Vec<String>) {
    let mut urls = std::collections::BTreeSet::new();
    for (name, a) in obj(top, "archives") {
        let place = format!("archives.{name}");
        match a.get("archiver").and_then(Value::as_str) {
            Some("http") => {}
            Some(other) => {
                notes.push(format!(
                    "{place}: pScheduler's {other} archiver has no goodput counterpart; an http archiver to the same archive becomes kind = \"pscheduler\""
                ));
                continue;
            }
            None => {
                notes.push(format!("{place}: no archiver; skipped"));
                continue;
            }
        }
        let data = a.get("data");
        let url = data
            .and_then(|d| d.get("_url").or_else(|| d.get("url")))
            .and_then(Value::as_str)
            .unwrap_or("");
        if url.contains("{%") || !(url.starts_with("http://") || url.starts_with("https://")) {
            notes.push(format!(
                "{place}: URL {url:?} is not a fixed http:// or https:// URL; skipped"
            ));
            continue;
        }
        if !urls.insert(url.trim_end_matches('/').to_owned()) {
            notes.push(format!("{place}: the same URL as another archive; merged"));
            continue;
        }
        config.archives.insert(
            name.clone(),
            ArchiveTarget {
                url: url.to_owned(),
                kind: ArchiveKind::Pscheduler,
                ..ArchiveTarget::default()
            },
        );
    }
}

/// An ISO 8601 duration as goodput's (`PT30S` → `30s`), or the note why not.
fn duration(v: &Value) -> Result<String, String> {
    let ms = match v {
        Value::String(s) => duration_ms(s)?,
        Value::Number(n) => {
            let s = n.as_f64().ok_or("not a number")?;
            if !(0.0..=1e9).contains(&s) {
                return Err(format!("{s} s is out of range"));
            }
            (s * 1000.0).round() as u64
        }
        _ => return Err("not a duration".into()),
    };
    Ok(if ms % 1000 == 0 {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    })
}

/// Which end of a combination a spec's `source` or `dest` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EndRef {
    /// `{% address[i] %}` (or its pscheduler or lead-bind address).
    Index(usize),
    /// The host that schedules the task (`{% scheduled_by_address %}`,
    /// `{% localhost %}`, or no `source` at all: pScheduler runs the test
    /// where it is asked).
    Scheduler,
    /// A fixed host, written out.
    Written,
}

fn end_ref(v: Option<&Value>) -> EndRef {
    let Some(s) = v.and_then(Value::as_str) else {
        return EndRef::Scheduler;
    };
    let t = s.trim();
    match t
        .strip_prefix("{%")
        .and_then(|x| x.strip_suffix("%}"))
        .map(str::trim)
    {
        Some("scheduled_by_address" | "localhost") => EndRef::Scheduler,
        Some(var) => address_index(var).map_or(EndRef::Written, EndRef::Index),
        None => EndRef::Written,
    }
}

/// `address[i]`, `pscheduler_address[i]`, `lead_bind_address[i]` → i.
fn address_index(var: &str) -> Option<usize> {
    let var: String = var.chars().filter(|c| !c.is_whitespace()).collect();
    let inner = ["address[", "pscheduler_address[", "lead_bind_address["]
        .iter()
        .find_map(|p| var.strip_prefix(p))?
        .strip_suffix(']')?;
    inner.parse().ok().filter(|i| *i < 16)
}

/// A template string with the combination's ends replaced (`src` and
/// `dst` are the spec's source and destination indices); the variable
/// that has no goodput counterpart when there is one.
fn substitute(s: &str, src: Option<usize>, dst: Option<usize>) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = s;
    while let Some(at) = rest.find("{%") {
        out.push_str(&rest[..at]);
        let end = rest[at..].find("%}").ok_or_else(|| rest[at..].to_owned())? + at;
        let var = rest[at + 2..end].trim();
        let i = address_index(var);
        out.push_str(match i {
            Some(_) if i == src => "{{source}}",
            Some(_) if i == dst => "{{dest}}",
            _ if src.is_none() && matches!(var, "scheduled_by_address" | "localhost") => "{{source}}",
            _ => return Err(format!("{{% {var} %}}")),
        });
        rest = &rest[end + 2..];
    }
    out.push_str(rest);
    Ok(out)
}

/// A converted test (its document for a run at the spec's source is in
/// the configuration): its kind, the document that measures the same path from its
/// destination (when the kind can be turned round), and which ends of a
/// combination its source and destination are.
struct Converted {
    kind: Kind,
    turned: Option<Value>,
    src: EndRef,
    dst: EndRef,
    /// How long one latencybg session lasts, ms (its `duration`, or
    /// packet-count × packet-interval).
    session_ms: Option<u64>,
    /// What a latencybg run lasts beyond its session (its ends).
    ends_ms: u64,
}

/// The same test run from the other end: the data still flows from the
/// spec's source to its destination. Kinds that measure only from where
/// they run (ping, STAMP, TWAMP, trace) cannot be turned.
fn turned(kind: Kind, doc: &Value) -> Option<Value> {
    let mut d = doc.clone();
    match kind {
        Kind::Owamp => {
            let to = d["direction"].as_str() != Some("from");
            d["direction"] = json!(if to { "from" } else { "to" });
        }
        Kind::Tcp => {
            let pull = d["pattern"].as_str() == Some("pull");
            d["pattern"] = json!(if pull { "push" } else { "pull" });
        }
        Kind::Iperf3 => {
            let r = d["reverse"].as_bool() == Some(true);
            d["reverse"] = json!(!r);
        }
        // No turned-round form: the end without an agent cannot be asked.
        Kind::Udp
        | Kind::Quic
        | Kind::Stamp
        | Kind::Echo
        | Kind::Ttcp
        | Kind::Trace
        | Kind::Ping
        | Kind::Twamp
        | Kind::Ndt7
        | Kind::Server => return None,
        // A query measures only from where it runs.
        Kind::Dns => return None,
        // Single-ended, measured where it runs.
        Kind::Http | Kind::Tls => return None,
    }
    Some(d)
}

/// Converts each test; what each became, by test name.
fn tests(
    top: &Map<String, Value>,
    tpl: &Template,
    config: &mut MeshConfig,
    notes: &mut Vec<String>,
    choices: ImportChoices,
) -> BTreeMap<String, Converted> {
    // The tools the tasks name for each test (pScheduler picks a task's
    // tool; here a test's kind follows the first its tasks name).
    let mut tools: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for (_, task) in obj(top, "tasks") {
        if let Some(test) = task.get("test").and_then(Value::as_str) {
            let named = task
                .get("tools")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .take(16)
                .map(str::to_owned);
            tools.entry(test).or_default().extend(named);
        }
    }
    let mut out = BTreeMap::new();
    for (name, t) in obj(top, "tests") {
        let place = format!("tests.{name}");
        let tools = tools.get(name.as_str()).map_or(&[][..], Vec::as_slice);
        if disabled(t) {
            notes.push(format!("{place}: disabled; skipped"));
            continue;
        }
        let ty = t.get("type").and_then(Value::as_str).unwrap_or("");
        let mut spec = t
            .get("spec")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        if MEASURED.contains(&ty) {
            jq_spec(top, tpl, name, t, &mut spec, &place, notes);
        }
        if !MEASURED.contains(&ty) {
            let why = if ty.is_empty() {
                "no type".to_owned()
            } else {
                format!("type '{ty}' has no goodput kind")
            };
            notes.push(format!("{place}: {why}; skipped"));
            continue;
        }
        let (src, dst) = if ty == "http" {
            http_ends(&spec)
        } else {
            let (src_key, dst_key) = if ty == "dns" {
                dns::ENDS
            } else {
                ("source", "dest")
            };
            (end_ref(spec.get(src_key)), end_ref(spec.get(dst_key)))
        };
        let index = |e: EndRef| match e {
            EndRef::Index(i) => Some(i),
            _ => None,
        };
        // Every string in the spec with its variables replaced. The
        // nodes name where pScheduler is reached and `flip` who runs the
        // client: the data still flows from source to dest, which the
        // combination's ends decide here.
        let mut s = Map::new();
        for (k, v) in &spec {
            if matches!(
                k.as_str(),
                "source" | "source-node" | "dest-node" | "flip" | "schema"
            ) {
                continue;
            }
            let v = match v {
                Value::String(x) => match substitute(x, index(src), index(dst)) {
                    Ok(x) => Value::String(x),
                    Err(var) => {
                        notes.push(format!(
                            "{place}: spec.{k} uses {var}, which has no goodput counterpart; left out"
                        ));
                        continue;
                    }
                },
                v => v.clone(),
            };
            s.insert(k.clone(), v);
        }
        match convert_test(ty, &s, choices, tools, &place, notes) {
            Ok((kind, doc)) => {
                let session_ms = (ty == "latencybg").then(|| {
                    spec.get("duration")
                        .and_then(|d| duration(d).ok())
                        .and_then(|d| crate::time::duration_ms(&d).ok())
                        .unwrap_or_else(|| {
                            let count = spec.get("packet-count").and_then(Value::as_u64).unwrap_or(600);
                            let every = spec
                                .get("packet-interval")
                                .and_then(|d| duration(d).ok())
                                .and_then(|d| crate::time::duration_ms(&d).ok())
                                .unwrap_or(100);
                            count.min(crate::spec::owamp::MAX_COUNT).saturating_mul(every)
                        })
                });
                let turned = turned(kind, &doc);
                let ends_ms = stream_ends_ms(&doc);
                config.tests.insert(name.clone(), doc);
                out.insert(
                    name.clone(),
                    Converted {
                        kind,
                        turned,
                        src,
                        dst,
                        session_ms,
                        ends_ms,
                    },
                );
            }
            Err(why) => notes.push(format!("{place}: {why}; skipped")),
        }
    }
    out
}

/// Replaces each `{% jq %}` variable in the spec's strings as
/// `jq::resolve` does (an address of the combination becomes the
/// `{% address[i] %}` it is); a field that cannot be is left out, with
/// the reason.
fn jq_spec(
    top: &Map<String, Value>,
    tpl: &Template,
    name: &str,
    t: &Value,
    spec: &mut Map<String, Value>,
    place: &str,
    notes: &mut Vec<String>,
) {
    if !spec.values().any(|v| v.as_str().is_some_and(jq::has_jq)) {
        return;
    }
    let inputs = jq::inputs(top, tpl, name, t);
    let mut steps = jq::TEMPLATE_STEPS;
    let keys: Vec<String> = spec.keys().cloned().collect();
    for k in keys {
        let Some(x) = spec[&k].as_str().filter(|x| jq::has_jq(x)) else {
            continue;
        };
        match jq::resolve(x, inputs.as_deref(), &mut steps) {
            // pSConfig would hand pScheduler an empty end, which it
            // refuses.
            Ok(x) if x.trim().is_empty() && matches!(k.as_str(), "source" | "dest") => {
                notes.push(format!(
                    "{place}: spec.{k}: its {{% jq %}} gives the empty text, no address; left out"
                ));
                spec.remove(&k);
            }
            Ok(x) => spec[&k] = Value::String(x),
            Err(why) => {
                notes.push(format!("{place}: spec.{k}: {why}; left out"));
                spec.remove(&k);
            }
        }
    }
}

/// An http test's ends: pScheduler runs it on `host` (the scheduling
/// host when none), and the end it measures is the address its URL
/// names (`{% address[1] %}` in it), if any.
fn http_ends(spec: &Map<String, Value>) -> (EndRef, EndRef) {
    let src = end_ref(spec.get("host"));
    let url = spec.get("url").and_then(Value::as_str).unwrap_or("");
    let mut dst = EndRef::Written;
    let mut rest = url;
    while let Some(at) = rest.find("{%") {
        let Some(end) = rest[at..].find("%}") else { break };
        if let Some(i) = address_index(rest[at + 2..at + end].trim()) {
            if EndRef::Index(i) != src {
                dst = EndRef::Index(i);
                break;
            }
        }
        rest = &rest[at + end + 2..];
    }
    (src, dst)
}

/// pScheduler's http test (url, parse, timeout, headers, ip-version) as
/// a goodput http test: `parse` is the text the body must contain.
fn http_test(
    spec: &Map<String, Value>,
    place: &str,
    notes: &mut Vec<String>,
) -> Result<(Kind, Value), String> {
    let mut f = Fields {
        spec,
        used: vec!["host", "host-node"],
    };
    let url = f.get("url").and_then(Value::as_str).ok_or("no spec.url")?;
    let mut d = json!({ "kind": Kind::Http, "url": url });
    if let Some(p) = f.get("parse").and_then(Value::as_str) {
        d["expect_body"] = json!(p);
    }
    if let Some(t) = f.get("timeout") {
        d["timeout"] = json!(duration(t).map_err(|e| format!("spec.timeout: {e}"))?);
    }
    if let Some(h) = f.get("headers").and_then(Value::as_object) {
        let list: Vec<String> = h
            .iter()
            .filter_map(|(k, v)| v.as_str().map(|v| format!("{k}: {v}")))
            .take(crate::spec::http::MAX_HEADERS)
            .collect();
        d["header"] = json!(list);
    }
    match f.get("ip-version").and_then(Value::as_u64) {
        Some(4) => d["family"] = json!("ipv4"),
        Some(6) => d["family"] = json!("ipv6"),
        _ => {}
    }
    let rest = f.rest();
    if !rest.is_empty() {
        notes.push(format!(
            "{place}: spec fields not carried over: {}",
            rest.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
        ));
    }
    Ok((Kind::Http, d))
}

/// The spec fields a conversion read; the rest are noted as not carried.
struct Fields<'a> {
    spec: &'a Map<String, Value>,
    used: Vec<&'static str>,
}

impl<'a> Fields<'a> {
    fn get(&mut self, k: &'static str) -> Option<&'a Value> {
        self.used.push(k);
        self.spec.get(k)
    }
    fn u64(&mut self, k: &'static str) -> Option<u64> {
        self.get(k).and_then(Value::as_u64)
    }
    fn flag(&mut self, k: &'static str) -> bool {
        self.get(k).and_then(Value::as_bool) == Some(true)
    }
    fn rest(&self) -> Vec<&String> {
        self.spec
            .keys()
            .filter(|k| {
                !self.used.contains(&k.as_str()) && !matches!(k.as_str(), "schema" | "source" | "source-node")
            })
            .collect()
    }
}

/// One pScheduler test (`type` and `spec`, variables already replaced,
/// and the tool that ran it, when known) as a goodput test document: its
/// kind, the document, and what was not carried over. The same
/// conversion `import_psconfig` makes, so a pScheduler result of a
/// template's test maps to the imported task.
pub fn goodput_test(
    ty: &str,
    spec: &Map<String, Value>,
    tool: Option<&str>,
    choices: ImportChoices,
) -> Result<(Kind, Value, Vec<String>), String> {
    let mut notes = Vec::new();
    let tools: Vec<String> = tool.into_iter().map(str::to_owned).collect();
    let (kind, doc) = convert_test(ty, spec, choices, &tools, "spec", &mut notes)?;
    Ok((kind, doc, notes))
}

fn convert_test(
    ty: &str,
    spec: &Map<String, Value>,
    choices: ImportChoices,
    tools: &[String],
    place: &str,
    notes: &mut Vec<String>,
) -> Result<(Kind, Value), String> {
    if ty == "http" {
        return http_test(spec, place, notes);
    }
    match ty {
        "throughput" | "latency" | "latencybg" | "rtt" | "trace" => {}
        "dns" => {
            let mut f = Fields {
                spec,
                used: Vec::new(),
            };
            return dns::test(&mut f, place, notes);
        }
        "" => return Err("no type".into()),
        other => return Err(format!("type '{other}' has no goodput kind")),
    }
    let mut f = Fields {
        spec,
        used: Vec::new(),
    };
    let dest = f.get("dest").and_then(Value::as_str).map(str::to_owned);
    if let Some(d) = &dest {
        if d != "{{dest}}" {
            notes.push(format!(
                "{place}: spec.dest {d:?} is kept as written (goodput puts the pair's destination where {{{{dest}}}} is)"
            ));
        }
    }
    let dest = dest.ok_or("no spec.dest")?;
    let dur = |f: &mut Fields, k: &'static str| -> Result<Option<String>, String> {
        f.get(k)
            .map(|v| duration(v).map_err(|e| format!("spec.{k}: {e}")))
            .transpose()
    };
    let (kind, mut doc) = match ty {
        "throughput" => {
            let udp = f.flag("udp");
            let duration = dur(&mut f, "duration")?.unwrap_or_else(|| "10s".into());
            let parallel = f.u64("parallel").unwrap_or(1).clamp(1, 128);
            let reverse = f.flag("reverse");
            if udp || choices.throughput_iperf3 {
                let mut d = json!({
                    "kind": Kind::Iperf3, "host": dest, "time": duration, "parallel": parallel,
                    "reverse": reverse, "udp": udp,
                });
                if let Some(b) = f.u64("bandwidth") {
                    d["bitrate"] = json!(b.to_string());
                }
                if let Some(o) = dur(&mut f, "omit")? {
                    d["omit"] = json!(o);
                }
                if let Some(w) = f.u64("window-size") {
                    d["window"] = json!(w.to_string());
                }
                if let Some(m) = f.u64("mss") {
                    d["mss"] = json!(m);
                }
                if f.flag("no-delay") {
                    d["no_delay"] = json!(true);
                }
                (Kind::Iperf3, d)
            } else {
                let mut d = json!({
                    "kind": Kind::Tcp, "hosts": [dest], "duration": duration, "connections": parallel,
                });
                if reverse {
                    d["pattern"] = json!("pull");
                }
                if let Some(b) = f.u64("bandwidth") {
                    // Per connection in goodput; pScheduler's is the total.
                    d["rate_limit"] = json!(format!("{}bit", (b / parallel).max(1)));
                }
                (Kind::Tcp, d)
            }
        }
        "latency" | "latencybg" => {
            if let Some(t) = tools.first().filter(|t| !OWAMP_TOOLS.contains(&t.as_str())) {
                notes.push(format!(
                    "{place}: its tasks name the tool {t:?}; goodput measures it with OWAMP, as owping and powstream do"
                ));
            }
            let interval = f
                .get("packet-interval")
                .map(duration)
                .transpose()
                .map_err(|e| format!("spec.packet-interval: {e}"))?
                .unwrap_or_else(|| "100ms".into());
            let count = f
                .u64("packet-count")
                .unwrap_or(if ty == "latencybg" { 600 } else { 100 })
                .clamp(1, crate::spec::owamp::MAX_COUNT);
            // pScheduler's flip only moves the client (owping -f at the
            // destination): the data still flows source → destination.
            // Its schema-2 `reverse` turns the data round.
            let _ = f.get("flip");
            let direction = if f.flag("reverse") { "from" } else { "to" };
            let mut d = json!({
                "kind": Kind::Owamp, "host": dest, "direction": direction, "interval": interval,
            });
            if ty == "latencybg" {
                // powstream: one endless stream, a summary every
                // packet-count packets.
                d["continuous"] = json!(true);
                d["summary_every"] = json!(count.min(crate::spec::owamp::MAX_SUMMARY_EVERY));
            } else {
                d["count"] = json!(count);
            }
            if let Some(t) = dur(&mut f, "packet-timeout")? {
                d["timeout"] = json!(t);
            }
            if ty == "latencybg" {
                // Each stream, with its ends, fits in the daily schedule's
                // repeat (LATENCYBG_REPEAT), so the next day's run takes
                // over without overlapping it.
                let secs = LATENCYBG_REPEAT_MS.saturating_sub(stream_ends_ms(&d)) / 1000;
                d["duration"] = json!(format!("{secs}s"));
            }
            if let Some(p) = f.u64("packet-padding") {
                let max = crate::spec::owamp::MAX_TEST_PACKET - crate::spec::owamp::OPEN_HEADER;
                d["padding"] = json!(p.min(u64::from(max)));
            }
            dscp_of_tos(&mut f, &mut d);
            (Kind::Owamp, d)
        }
        "rtt" => {
            let protocol = f.get("protocol").and_then(Value::as_str);
            let twamp = protocol == Some(RTT_TWAMP) || tools.first().is_some_and(|t| t == TWAMP_TOOL);
            if let Some(p) = protocol.filter(|p| *p != RTT_TWAMP && *p != RTT_ICMP) {
                notes.push(format!(
                    "{place}: spec.protocol {p:?} is not icmp or twamp; ICMP echo"
                ));
            }
            let count = f.u64("count").unwrap_or(5);
            let interval = dur(&mut f, "interval")?.unwrap_or_else(|| "1s".into());
            if twamp {
                let mut d = json!({
                    "kind": Kind::Twamp, "host": dest, "interval": interval,
                    "count": count.clamp(1, crate::spec::owamp::MAX_COUNT),
                });
                if let Some(t) = dur(&mut f, "timeout")? {
                    d["timeout"] = json!(t);
                }
                dscp_of_tos(&mut f, &mut d);
                (Kind::Twamp, d)
            } else if choices.rtt_stamp {
                (
                    Kind::Stamp,
                    json!({ "kind": Kind::Stamp, "host": dest, "count": count, "interval": interval }),
                )
            } else {
                let mut d = json!({ "kind": Kind::Ping, "host": dest, "count": count, "interval": interval });
                if let Some(l) = f.u64("length") {
                    d["size"] = json!(l.min(65_000));
                }
                if let Some(t) = dur(&mut f, "timeout")? {
                    d["timeout"] = json!(t);
                }
                (Kind::Ping, d)
            }
        }
        "trace" => {
            let mut d = json!({ "kind": Kind::Trace, "host": dest });
            if let Some(h) = f.u64("hops") {
                d["max_hops"] = json!(h.clamp(1, 255));
            }
            if let Some(h) = f.u64("first-ttl") {
                d["first_hop"] = json!(h.clamp(1, 255));
            }
            match f.get("probe-type").and_then(Value::as_str) {
                Some(m @ ("udp" | "tcp" | "icmp")) => d["method"] = json!(m),
                Some(other) => notes.push(format!(
                    "{place}: spec.probe-type {other:?} is not udp, tcp or icmp; udp"
                )),
                None => {}
            }
            if let Some(w) = dur(&mut f, "wait")? {
                d["wait"] = json!(w);
            }
            (Kind::Trace, d)
        }
        other => return Err(format!("type '{other}' has no goodput kind")),
    };
    // Common fields.
    match f.get("ip-version").and_then(Value::as_u64) {
        Some(4) => doc["family"] = json!("ipv4"),
        Some(6) => doc["family"] = json!("ipv6"),
        _ => {}
    }
    let rest = f.rest();
    if !rest.is_empty() {
        notes.push(format!(
            "{place}: spec fields not carried over: {}",
            rest.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
        ));
    }
    Ok((kind, doc))
}

/// pScheduler's `ip-tos` (the whole TOS byte) as the DSCP it carries.
fn dscp_of_tos(f: &mut Fields, d: &mut Value) {
    if let Some(tos) = f.u64("ip-tos") {
        d["dscp"] = json!((tos.min(255) >> 2).min(63));
    }
}

fn schedules(top: &Map<String, Value>, config: &mut MeshConfig, notes: &mut Vec<String>) {
    for (name, s) in obj(top, "schedules") {
        let place = format!("schedules.{name}");
        let text = |k: &str| s.get(k).and_then(Value::as_str).map(str::to_owned);
        let Some(repeat) = text("repeat") else {
            notes.push(format!(
                "{place}: no repeat (a single run); skipped, and tasks using it"
            ));
            continue;
        };
        let mut sch = Schedule {
            repeat,
            slip: text("slip"),
            sliprand: s.get("sliprand").and_then(Value::as_bool) == Some(true),
            max_runs: s.get("max-runs").and_then(Value::as_u64),
            ..Schedule::default()
        };
        for (k, slot) in [("start", &mut sch.start), ("until", &mut sch.until)] {
            if let Some(t) = text(k) {
                if crate::time::rfc3339_ms(&t).is_ok() {
                    *slot = Some(t);
                } else {
                    notes.push(format!(
                        "{place}.{k}: {t:?} is not an RFC 3339 time (relative times are pScheduler's); left out"
                    ));
                }
            }
        }
        config.schedules.insert(name.clone(), sch);
    }
}

/// One pair a goodput task runs: the end that runs it, the other end.
type Pair = (String, Option<String>);

/// How a task's pairs are split into goodput tasks: turned round or not,
/// whether the destination books the slot, and the label the ends use.
type Part = (bool, bool, Option<String>);

fn tasks(
    top: &Map<String, Value>,
    tpl: &Template,
    config: &mut MeshConfig,
    notes: &mut Vec<String>,
    converted: &BTreeMap<String, Converted>,
) {
    let mut references = 0usize;
    let mut priorities = 0usize;
    for (name, t) in obj(top, "tasks") {
        let place = format!("tasks.{name}");
        let text = |k: &str| t.get(k).and_then(Value::as_str).map(str::to_owned);
        let (Some(group), Some(test)) = (text("group"), text("test")) else {
            notes.push(format!("{place}: no group or test; skipped"));
            continue;
        };
        let Some(g) = top.get("groups").and_then(|x| x.get(&group)) else {
            notes.push(format!("{place}: no group named '{group}'; skipped"));
            continue;
        };
        if disabled(g) {
            notes.push(format!("{place}: its group '{group}' is disabled; skipped"));
            continue;
        }
        let Some(conv) = converted.get(&test) else {
            notes.push(format!(
                "{place}: its test '{test}' was not carried over; skipped"
            ));
            continue;
        };
        let kind = conv.kind;
        let Some(mut schedule) = task_schedule(&place, t, conv, config, notes) else {
            continue;
        };
        if let Some(fit) = fitting_schedule(&place, &schedule, conv, config, notes) {
            schedule = fit;
        }
        references += usize::from(t.get("reference").is_some());
        priorities += usize::from(t.get("priority").is_some());
        for key in ["archives", "subtasks"] {
            if t.get(key).is_some() && (key != "archives" || config.archives.is_empty()) {
                notes.push(format!("{place}.{key}: not carried over"));
            }
        }
        let first_tool = t
            .get("tools")
            .and_then(Value::as_array)
            .and_then(|a| a.first())
            .and_then(Value::as_str);
        if let Some(tool) = first_tool {
            let honoured = (kind == Kind::Owamp && OWAMP_TOOLS.contains(&tool))
                || (kind == Kind::Twamp && tool == TWAMP_TOOL)
                || (kind == Kind::Ping && tool == PING_TOOL);
            if !honoured {
                notes.push(format!(
                    "{place}.tools: {tool:?} is not used; the test runs as {kind}"
                ));
            }
        }
        let k = t.get("scheduled-by").and_then(Value::as_u64).unwrap_or(0);
        let combos = match tpl.expand(g, &format!("groups.{group}"), notes) {
            Ok(c) => c,
            Err(why) => {
                notes.push(format!("{place}: its group '{group}': {why}; skipped"));
                continue;
            }
        };
        let single = g.get("type").and_then(Value::as_str) == Some("list");
        let dims = if single { 1 } else { 2 };
        let too_big = |e: EndRef| matches!(e, EndRef::Index(i) if i >= dims);
        if k >= dims as u64
            || too_big(conv.src)
            || too_big(conv.dst)
            || (!single && conv.dst == EndRef::Scheduler)
        {
            notes.push(format!(
                "{place}: its test's ends or scheduled-by {k} do not fit a {} group; skipped",
                if single { "list" } else { "two-ended" }
            ));
            continue;
        }
        let mut parts: BTreeMap<Part, Vec<Pair>> = BTreeMap::new();
        let (mut unrunnable, mut mixed) = (0usize, 0usize);
        for c in &combos {
            if c.iter().any(|e| e.disabled) {
                continue;
            }
            // Who schedules: the scheduled-by end, or the first end with
            // an agent when it has none (pSConfig's flip); none, no task.
            let Some(sched) = (!c[k as usize].no_agent)
                .then_some(k as usize)
                .or_else(|| c.iter().position(|e| !e.no_agent))
            else {
                continue;
            };
            let src = match conv.src {
                EndRef::Index(i) => i,
                _ => sched,
            };
            let dst = match conv.dst {
                EndRef::Index(i) => Some(i),
                _ => None,
            };
            let (runner, target, turn) = if !c[src].no_agent {
                (src, dst, false)
            } else if let (Some(d), true) = (dst, conv.turned.is_some()) {
                if c[d].no_agent {
                    unrunnable += 1;
                    continue;
                }
                (d, Some(src), true)
            } else {
                unrunnable += 1;
                continue;
            };
            // An end picked from a peer's entry is an address of its own.
            for e in c {
                if e.name.contains('>') && !config.addresses.contains_key(&e.name) {
                    config.addresses.insert(
                        e.name.clone(),
                        Address {
                            address: e.address.clone(),
                            no_agent: e.no_agent,
                            ..Address::default()
                        },
                    );
                }
            }
            let label = c[runner].label.clone();
            if target.is_some_and(|x| c[x].label != label) {
                mixed += 1;
                continue;
            }
            let lead = match target {
                Some(x) if !c[x].no_agent && sched != runner => Lead::Destination,
                _ => Lead::Source,
            };
            parts
                .entry((turn, lead == Lead::Destination, label))
                .or_default()
                .push((c[runner].name.clone(), target.map(|x| c[x].name.clone())));
        }
        if unrunnable > 0 {
            notes.push(format!(
                "{place}: {unrunnable} pairs whose source has no agent are not run (a {kind} test runs where its traffic starts)"
            ));
        }
        if mixed > 0 {
            notes.push(format!(
                "{place}: {mixed} pairs whose ends use different labels are not run (a goodput task uses one label)"
            ));
        }
        let mut made = Vec::new();
        for ((turn, dest_leads, label), mut pairs) in parts {
            let lead = if dest_leads {
                Lead::Destination
            } else {
                Lead::Source
            };
            pairs.sort();
            pairs.dedup();
            // A scheduled latencybg streams for one session per run, not
            // for the day its unscheduled streams last.
            let session = conv
                .session_ms
                .filter(|_| schedule != "latencybg")
                .map(|ms| ms.div_ceil(1000).max(1));
            let mut test_name = test.clone();
            let mut doc = config.tests.get(&test).cloned();
            if let (Some(secs), Some(d)) = (session, doc.as_mut()) {
                test_name = format!("{test}~{secs}s");
                d["duration"] = json!(format!("{secs}s"));
            }
            if turn {
                test_name = format!("{test_name}~turned");
                doc = doc.and_then(|d| turned(kind, &d));
            }
            if let Some(d) = doc {
                config.tests.entry(test_name.clone()).or_insert(d);
            }
            for g_name in groups_for(config, &group, g, name, made.len(), &pairs) {
                let task_name = if made.is_empty() {
                    name.clone()
                } else {
                    format!("{name}~{}", made.len() + 1)
                };
                config.tasks.insert(
                    task_name.clone(),
                    Task {
                        group: g_name,
                        test: test_name.clone(),
                        schedule: schedule.clone(),
                        scheduled_by: lead,
                        label: label.clone(),
                        disabled: disabled(t),
                        ..Task::default()
                    },
                );
                made.push(task_name);
            }
        }
        if made.is_empty() {
            notes.push(format!("{place}: makes no pair goodput can run; skipped"));
        } else if made.len() > 1 {
            notes.push(format!(
                "{place}: carried over as {} tasks ({}): its pairs differ in who runs them or who books the slot",
                made.len(),
                made.join(", ")
            ));
        }
    }
    if references > 0 {
        notes.push(format!(
            "tasks.*.reference: not carried over ({references} tasks): goodput names a run by its task, source and destination"
        ));
    }
    if priorities > 0 {
        notes.push(format!(
            "tasks.*.priority: not carried over ({priorities} tasks): goodput's runs share hosts by class, not priority"
        ));
    }
}

/// The schedule a task runs on: its own, or for a latencybg without one
/// a continuous stream renewed daily.
fn task_schedule(
    place: &str,
    t: &Value,
    conv: &Converted,
    config: &mut MeshConfig,
    notes: &mut Vec<String>,
) -> Option<String> {
    match t.get("schedule").and_then(Value::as_str) {
        Some(s) if config.schedules.contains_key(s) => Some(s.to_owned()),
        Some(s) => {
            notes.push(format!(
                "{place}: its schedule '{s}' was not carried over; skipped"
            ));
            None
        }
        None if conv.session_ms.is_some() => {
            let s = "latencybg".to_owned();
            config.schedules.entry(s.clone()).or_insert_with(|| Schedule {
                repeat: LATENCYBG_REPEAT.into(),
                ..Schedule::default()
            });
            notes.push(format!(
                "{place}: latencybg streams without a schedule in perfSONAR; here a continuous {} stream, renewed daily (schedule 'latencybg')",
                conv.kind
            ));
            Some(s)
        }
        None => {
            notes.push(format!(
                "{place}: no schedule (pScheduler would run it once); skipped"
            ));
            None
        }
    }
}

/// What an owamp stream's run lasts beyond its session: the last
/// packets' wait (the test's `timeout`), the set-up and the fetch.
fn stream_ends_ms(doc: &Value) -> u64 {
    let wait = doc["timeout"]
        .as_str()
        .and_then(|t| duration_ms(t).ok())
        .unwrap_or_else(|| crate::spec::owamp::OwampSpec::default().timeout.0.as_millis() as u64);
    wait.saturating_add(crate::spec::owamp::STREAM_ENDS_MS)
}

/// A latencybg whose session outlasts its schedule's repeat would overlap
/// itself: it gets a copy of the schedule repeating as often as a session
/// lasts (whole seconds), named for it.
fn fitting_schedule(
    place: &str,
    schedule: &str,
    conv: &Converted,
    config: &mut MeshConfig,
    notes: &mut Vec<String>,
) -> Option<String> {
    // The run: the session whole seconds long, then its ends.
    let session = conv.session_ms?.div_ceil(1000).max(1) * 1000;
    let run = session.saturating_add(conv.ends_ms);
    let s = config.schedules.get(schedule)?;
    let every = s.repeat_of().ok()?.every;
    if schedule == "latencybg" || every >= run || s.cron.is_some() {
        return None;
    }
    let secs = run.div_ceil(1000);
    let name = format!("{schedule}~{secs}s");
    let fit = Schedule {
        repeat: format!("PT{secs}S"),
        ..s.clone()
    };
    notes.push(format!(
        "{place}: a latencybg run lasts {} s (a session of {} s, then {} s to set up, wait for the last packets and fetch), longer than schedule '{schedule}' repeats ({} s); it repeats every {secs} s (schedule '{name}')",
        run as f64 / 1000.0,
        session as f64 / 1000.0,
        conv.ends_ms as f64 / 1000.0,
        every as f64 / 1000.0
    ));
    config.schedules.insert(name.clone(), fit);
    Some(name)
}

/// The goodput groups whose pairs are exactly `pairs`: the template's
/// group as written when it gives them, else one group per set of
/// sources that test to the same destinations.
fn groups_for(
    config: &mut MeshConfig,
    group: &str,
    g: &Value,
    task: &str,
    part: usize,
    pairs: &[Pair],
) -> Vec<String> {
    let want: std::collections::BTreeSet<&Pair> = pairs.iter().collect();
    let names = |k: &str| -> Vec<String> {
        let mut v: Vec<String> = Vec::new();
        for s in g.get(k).and_then(Value::as_array).into_iter().flatten() {
            if let Some(n) = s.get("name").and_then(Value::as_str) {
                if config.addresses.contains_key(n) && !v.iter().any(|x| x == n) {
                    v.push(n.to_owned());
                }
            }
        }
        v
    };
    let written = match g.get("type").and_then(Value::as_str) {
        Some("mesh") => Some(Group::Mesh {
            addresses: names("addresses"),
        }),
        Some("disjoint") => Some(Group::Disjoint {
            a: names("a-addresses"),
            b: names("b-addresses"),
            unidirectional: g.get("unidirectional").and_then(Value::as_bool) == Some(true),
        }),
        Some("list") => Some(Group::List {
            addresses: names("addresses"),
        }),
        _ => None,
    };
    // The group as written, or one group over the ends the pairs use
    // (a class selects names the template does not write).
    let sources: Vec<String> = pairs
        .iter()
        .map(|p| p.0.clone())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let targets: Vec<String> = pairs
        .iter()
        .filter_map(|p| p.1.clone())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let mut every: Vec<String> = sources.iter().chain(&targets).cloned().collect();
    every.sort();
    every.dedup();
    let candidates = written.into_iter().chain([
        Group::Mesh { addresses: every },
        Group::Disjoint {
            a: sources.clone(),
            b: targets.clone(),
            unidirectional: true,
        },
        Group::List { addresses: sources },
    ]);
    for w in candidates {
        let got = config.pairs(&w);
        if got.iter().collect::<std::collections::BTreeSet<_>>() != want {
            continue;
        }
        let mut name = group.to_owned();
        let mut n = 1;
        loop {
            match config.groups.get(&name) {
                None => {
                    config.groups.insert(name.clone(), w);
                    return vec![name];
                }
                Some(x) if *x == w => return vec![name],
                Some(_) => {
                    n += 1;
                    name = format!("{group}~{n}");
                }
            }
        }
    }
    // Sources that test to the same set of destinations share a group.
    let mut by_source: BTreeMap<&str, Vec<&Option<String>>> = BTreeMap::new();
    for (s, d) in pairs {
        by_source.entry(s).or_default().push(d);
    }
    let mut by_targets: BTreeMap<Vec<&Option<String>>, Vec<String>> = BTreeMap::new();
    for (s, ds) in by_source {
        by_targets.entry(ds).or_default().push(s.to_owned());
    }
    let mut out = Vec::new();
    for (i, (targets, sources)) in by_targets.into_iter().enumerate() {
        let g = if targets.iter().all(|d| d.is_none()) {
            Group::List { addresses: sources }
        } else {
            Group::Disjoint {
                a: sources,
                b: targets.into_iter().flatten().cloned().collect(),
                unidirectional: true,
            }
        };
        let name = format!("{task}~{}", part + i + 1);
        config.groups.insert(name.clone(), g);
        out.push(name);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variables_become_the_pairs_ends() {
        let (s, d) = (Some(0), Some(1));
        assert_eq!(substitute("{% address[1] %}", s, d).as_deref(), Ok("{{dest}}"));
        assert_eq!(
            substitute("x{%address[0]%}y", s, d).as_deref(),
            Ok("x{{source}}y")
        );
        // The reverse idiom: address[1] is where the data starts.
        assert_eq!(substitute("{% address[1] %}", d, s).as_deref(), Ok("{{source}}"));
        assert_eq!(
            substitute("{% pscheduler_address[0] %}", s, d).as_deref(),
            Ok("{{source}}")
        );
        assert_eq!(substitute("{% jq .foo %}", s, d), Err("{% jq .foo %}".into()));
        assert!(substitute("{% address[1]", s, d).is_err());
        assert!(substitute("{% address[2] %}", s, d).is_err());
    }

    #[test]
    fn numbers_at_their_ends_are_bounded_or_refused() {
        let t = json!({
            "addresses": { "a": { "address": "192.0.2.1" }, "b": { "address": "192.0.2.2" } },
            "groups": { "g": { "type": "mesh", "addresses": [{ "name": "a" }, { "name": "b" }] } },
            "tests": {
                "lat": { "type": "latency", "spec": { "dest": "{% address[1] %}", "packet-padding": u64::MAX, "packet-count": u64::MAX } },
                "tp": { "type": "throughput", "spec": { "dest": "{% address[1] %}", "parallel": 0, "bandwidth": u64::MAX } },
                "tr": { "type": "trace", "spec": { "dest": "{% address[1] %}", "hops": u64::MAX, "first-ttl": 0 } },
                "bad": { "type": "rtt", "spec": { "dest": "{% address[1] %}", "interval": -5 } }
            },
            "schedules": { "s": { "repeat": "PT1H", "max-runs": u64::MAX } },
            "tasks": {
                "t1": { "group": "g", "test": "lat", "schedule": "s" },
                "t2": { "group": "g", "test": "tp", "schedule": "s" },
                "t3": { "group": "g", "test": "tr", "schedule": "s" }
            }
        });
        let i = import_psconfig(&t, ImportChoices::default()).unwrap();
        assert_eq!(i.config.tests["lat"]["padding"], 8986);
        assert_eq!(i.config.tests["lat"]["count"], 1_000_000_000);
        assert_eq!(i.config.tests["tp"]["connections"], 1);
        assert_eq!(i.config.tests["tr"]["max_hops"], 255);
        assert_eq!(i.config.tests["tr"]["first_hop"], 1);
        assert!(!i.config.tests.contains_key("bad"));
        assert!(
            i.notes.iter().any(|n| n.starts_with("tests.bad: spec.interval")),
            "{:?}",
            i.notes
        );
    }

    #[test]
    fn http_becomes_an_http_test_run_from_its_host() {
        let t = json!({
            "addresses": { "a": { "address": "192.0.2.1" }, "web": { "address": "www.example.org" } },
            "groups": { "g": { "type": "disjoint", "a-addresses": [{ "name": "a" }], "b-addresses": [{ "name": "web" }] } },
            "tests": {
                "page": { "type": "http", "spec": {
                    "host": "{% address[0] %}", "url": "https://{% address[1] %}/health",
                    "parse": "ok", "timeout": "PT5S", "headers": { "X-Probe": "goodput" },
                    "keep-content": 100
                } }
            },
            "schedules": { "s": { "repeat": "PT1H" } },
            "tasks": { "t": { "group": "g", "test": "page", "schedule": "s" } }
        });
        let i = import_psconfig(&t, ImportChoices::default()).unwrap();
        let d = &i.config.tests["page"];
        assert_eq!(d["kind"], "http", "{:?}", i.notes);
        assert_eq!(d["url"], "https://{{dest}}/health");
        assert_eq!(d["expect_body"], "ok");
        assert_eq!(d["timeout"], "5s");
        assert_eq!(d["header"], json!(["X-Probe: goodput"]));
        assert!(
            i.notes
                .iter()
                .any(|n| n.contains("not carried over: keep-content")),
            "{:?}",
            i.notes
        );
        assert!(
            !i.notes.iter().any(|n| n.contains("has no goodput kind")),
            "{:?}",
            i.notes
        );
        // Run at a, to www.example.org.
        let tasks = i.config.tasks_for(&["a".to_owned()]).unwrap();
        assert_eq!(tasks.len(), 1, "{tasks:?}");
        assert_eq!(tasks[0].dest.as_deref(), Some("web"));
        match &tasks[0].spec {
            crate::spec::TestSpec::Http(h) => assert_eq!(h.url, "https://www.example.org/health"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn latency_becomes_owamp_and_twamp_rtt_becomes_twamp() {
        let t = json!({
            "addresses": { "a": { "address": "192.0.2.1" }, "b": { "address": "192.0.2.2", "no-agent": true } },
            "groups": { "g": { "type": "mesh", "addresses": [{ "name": "a" }, { "name": "b" }] } },
            "tests": {
                "owd": { "type": "latency", "spec": { "dest": "{% address[1] %}", "packet-count": 50,
                          "packet-interval": 0.01, "packet-padding": 20, "packet-timeout": 5,
                          "flip": true, "ip-tos": 184 } },
                "bg": { "type": "latencybg", "spec": { "dest": "{% address[1] %}", "packet-count": 300,
                         "packet-interval": 0.2 } },
                "tw": { "type": "rtt", "spec": { "dest": "{% address[1] %}", "protocol": "twamp",
                         "count": 20, "interval": "PT0.1S" } },
                "tool": { "type": "rtt", "spec": { "dest": "{% address[1] %}" } },
                "icmp": { "type": "rtt", "spec": { "dest": "{% address[1] %}", "protocol": "icmp" } }
            },
            "schedules": { "s": { "repeat": "PT1H" } },
            "tasks": {
                "owd": { "group": "g", "test": "owd", "schedule": "s", "tools": ["owping"] },
                "bg": { "group": "g", "test": "bg", "tools": ["powstream"] },
                "tw": { "group": "g", "test": "tw", "schedule": "s" },
                "tool": { "group": "g", "test": "tool", "schedule": "s", "tools": ["twping", "ping"] },
                "icmp": { "group": "g", "test": "icmp", "schedule": "s", "tools": ["ping"] }
            }
        });
        let i = import_psconfig(&t, ImportChoices::default()).unwrap();
        let tests = &i.config.tests;
        assert_eq!(
            tests["owd"],
            json!({ "kind": "owamp", "host": "{{dest}}", "direction": "to", "count": 50,
                    "interval": "10ms", "padding": 20, "timeout": "5s", "dscp": 46 })
        );
        assert_eq!(
            tests["bg"],
            json!({ "kind": "owamp", "host": "{{dest}}", "direction": "to", "interval": "200ms",
                    "continuous": true, "summary_every": 300, "duration": "86395s" })
        );
        assert_eq!(
            tests["tw"],
            json!({ "kind": "twamp", "host": "{{dest}}", "count": 20, "interval": "100ms" })
        );
        assert_eq!(
            tests["tool"],
            json!({ "kind": "twamp", "host": "{{dest}}", "count": 5, "interval": "1s" })
        );
        assert_eq!(tests["icmp"]["kind"], "ping");
        assert_eq!(i.config.schedules["latencybg"].repeat, "P1D");
        // Tools that chose the kind are not noted; nothing here is lost.
        assert_eq!(
            i.notes,
            vec![
                "tasks.bg: latencybg streams without a schedule in perfSONAR; here a continuous \
                 owamp stream, renewed daily (schedule 'latencybg')"
                    .to_owned()
            ]
        );
        // Each becomes a valid spec of its kind for the pair a → b.
        let pairs = i.config.tasks_for(&["a".to_owned()]).unwrap();
        let kinds: Vec<(String, Kind)> = pairs.iter().map(|p| (p.task.clone(), p.spec.kind())).collect();
        assert_eq!(
            kinds,
            [
                ("bg".to_owned(), Kind::Owamp),
                ("icmp".to_owned(), Kind::Ping),
                ("owd".to_owned(), Kind::Owamp),
                ("tool".to_owned(), Kind::Twamp),
                ("tw".to_owned(), Kind::Twamp),
            ]
        );
    }

    #[test]
    fn a_template_that_would_explode_is_refused_before_it_is_built() {
        // A million addresses: refused on their count alone.
        let mut addresses = Map::new();
        for i in 0..1_000_000u32 {
            addresses.insert(
                format!("h{i}"),
                json!({ "address": format!("10.{}.{}.{}", i >> 16, (i >> 8) & 255, i & 255) }),
            );
        }
        let t = json!({ "addresses": addresses, "groups": {}, "tests": {}, "tasks": {} });
        let started = std::time::Instant::now();
        let e = import_psconfig(&t, ImportChoices::default()).unwrap_err();
        assert!(e.contains("limit max_pairs: 1,000,000 addresses"), "{e}");
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
        // 400 addresses in a class meshed by two tasks: 2 × 400² pairs
        // counted by arithmetic and refused, nothing expanded.
        let mut addresses = Map::new();
        for i in 0..400u32 {
            addresses.insert(
                format!("h{i}"),
                json!({ "address": format!("10.0.{}.{}", i >> 8, i & 255), "tags": ["x"] }),
            );
        }
        let g = json!({ "type": "mesh", "addresses": [{ "class": "all" }] });
        let task = json!({ "group": "g", "test": "t", "schedule": "s" });
        let t = json!({
            "addresses": addresses,
            "address-classes": { "all": { "data-source": { "type": "current-config" },
                                          "match-filter": { "type": "tag", "tag": "x" } } },
            "groups": { "g": g },
            "tests": { "t": { "type": "rtt", "spec": { "dest": "{% address[1] %}" } } },
            "schedules": { "s": { "repeat": "PT1H" } },
            "tasks": { "a": task, "b": task }
        });
        let e = import_psconfig(&t, ImportChoices::default()).unwrap_err();
        assert!(
            e.contains("tasks.b: limit max_pairs: the tasks up to it expand to as many as 320,000 pairs, 250,000 allowed"),
            "{e}"
        );
        // One task fits: the class selects all 400 and the mesh is kept.
        let mut small = t.clone();
        small["tasks"].as_object_mut().unwrap().remove("b");
        let i = import_psconfig(&small, ImportChoices::default()).unwrap();
        assert_eq!(i.config.groups["g"].pair_count(), 400 * 399);
    }

    #[test]
    fn a_class_that_names_itself_is_refused_not_followed() {
        let t = json!({
            "addresses": { "a": { "address": "192.0.2.1" }, "b": { "address": "192.0.2.2" } },
            "address-classes": { "loop": { "data-source": { "type": "current-config" },
                "match-filter": { "type": "address-class", "class": "loop" } } },
            "groups": { "g": { "type": "mesh", "addresses": [{ "class": "loop" }] } },
            "tests": { "t": { "type": "rtt", "spec": { "dest": "{% address[1] %}" } } },
            "schedules": { "s": { "repeat": "PT1H" } },
            "tasks": { "t": { "group": "g", "test": "t", "schedule": "s" } }
        });
        let i = import_psconfig(&t, ImportChoices::default()).unwrap();
        assert!(i.config.tasks.is_empty());
        assert!(
            i.notes
                .iter()
                .any(|n| n.contains("address class 'loop': filters nest deeper than 16")),
            "{:?}",
            i.notes
        );
    }

    #[test]
    fn durations_read_iso_and_seconds() {
        assert_eq!(duration(&json!("PT30S")).unwrap(), "30s");
        assert_eq!(duration(&json!("PT0.5S")).unwrap(), "500ms");
        assert_eq!(duration(&json!(0.1)).unwrap(), "100ms");
        assert!(duration(&json!("soon")).is_err());
        assert!(duration(&json!(-1)).is_err());
    }
}
