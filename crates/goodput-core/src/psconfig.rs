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
//! Written from pSConfig's published JSON schema and pScheduler's test
//! spec fields; template variables `{% address[0] %}` and
//! `{% address[1] %}` become `{{source}}` and `{{dest}}`.

use crate::kind::Kind;
use crate::mesh::{Address, Group, Lead, MeshConfig, Schedule, Task};
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
/// How long each of those streams runs: the repeat.
const LATENCYBG_DURATION: &str = "24h";

/// The tools pScheduler runs a latency or latencybg test with that speak
/// OWAMP.
const OWAMP_TOOLS: [&str; 2] = ["owping", "powstream"];

/// The tool pScheduler runs a TWAMP rtt test with.
const TWAMP_TOOL: &str = "twping";

/// The tool pScheduler runs an ICMP rtt test with.
const PING_TOOL: &str = "ping";

/// The rtt test's `protocol` values: ICMP echo (ping's) and TWAMP.
const RTT_ICMP: &str = "icmp";
const RTT_TWAMP: &str = "twamp";

/// Converts a pSConfig template (its JSON). Fails only when the document
/// is not a template at all, or when what could be converted is not a
/// valid mesh configuration (the error says where).
pub fn import_psconfig(template: &Value, choices: ImportChoices) -> Result<Imported, String> {
    let top = template
        .as_object()
        .ok_or("a pSConfig template is a JSON object")?;
    for key in ["addresses", "groups", "tests", "tasks"] {
        if !top.get(key).is_some_and(Value::is_object) {
            return Err(format!("not a pSConfig template: no '{key}' object"));
        }
    }
    let mut notes = Vec::new();
    let mut config = MeshConfig::default();
    for key in top.keys() {
        if !matches!(
            key.as_str(),
            "addresses" | "groups" | "tests" | "tasks" | "schedules" | "_meta"
        ) {
            notes.push(format!(
                "{key}: not carried over (goodput has no {})",
                match key.as_str() {
                    "archives" => {
                        "pScheduler archivers: goodput's agents forward goodput runs, not pScheduler results; \
                         name a fleet archive or an HTTP receiver in the mesh document's `archives`"
                    }
                    "hosts" => "host objects; an address that serves no agent is `no_agent`",
                    "contexts" => "contexts",
                    "subtasks" => "subtasks",
                    "address-classes" => "address classes; name the addresses instead",
                    "includes" => "includes; import each template",
                    _ => "such section",
                }
            ));
        }
    }
    addresses(top, &mut config, &mut notes);
    groups(top, &mut config, &mut notes);
    let kinds = tests(top, &mut config, &mut notes, choices);
    schedules(top, &mut config, &mut notes);
    tasks(top, &mut config, &mut notes, &kinds);
    // Groups and addresses no task uses are kept: they cost nothing and
    // the next template edit may use them.
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

fn addresses(top: &Map<String, Value>, config: &mut MeshConfig, notes: &mut Vec<String>) {
    for (name, a) in obj(top, "addresses") {
        let place = format!("addresses.{name}");
        let Some(address) = a.get("address").and_then(Value::as_str) else {
            notes.push(format!("{place}: no 'address'; skipped"));
            continue;
        };
        if disabled(a) {
            notes.push(format!("{place}: disabled; skipped"));
            continue;
        }
        let mut labels = BTreeMap::new();
        for (label, l) in a.get("labels").and_then(Value::as_object).into_iter().flatten() {
            match l.get("address").and_then(Value::as_str) {
                Some(x) if !disabled(l) => {
                    labels.insert(label.clone(), x.to_owned());
                }
                _ => notes.push(format!("{place}.labels.{label}: no address or disabled; skipped")),
            }
        }
        let tags = a
            .get("tags")
            .and_then(Value::as_array)
            .map(|t| t.iter().filter_map(|x| x.as_str().map(str::to_owned)).collect())
            .unwrap_or_default();
        for key in [
            "remote-addresses",
            "pscheduler-address",
            "lead-bind-address",
            "contexts",
        ] {
            if a.get(key).is_some() {
                notes.push(format!("{place}.{key}: not carried over"));
            }
        }
        config.addresses.insert(
            name.clone(),
            Address {
                address: address.to_owned(),
                labels,
                tags,
                no_agent: a.get("no-agent").and_then(Value::as_bool) == Some(true),
                ..Address::default()
            },
        );
    }
}

/// The names an address selector list picks (by name; by class is noted).
fn selected(list: Option<&Value>, place: &str, config: &MeshConfig, notes: &mut Vec<String>) -> Vec<String> {
    let mut out = Vec::new();
    for (i, s) in list.and_then(Value::as_array).into_iter().flatten().enumerate() {
        if disabled(s) {
            continue;
        }
        if let Some(class) = s.get("class").and_then(Value::as_str) {
            notes.push(format!(
                "{place}[{i}]: address class '{class}' not carried over; name its addresses"
            ));
            continue;
        }
        let Some(name) = s.get("name").and_then(Value::as_str) else {
            notes.push(format!("{place}[{i}]: no name; skipped"));
            continue;
        };
        if let Some(label) = s.get("label").and_then(Value::as_str) {
            notes.push(format!(
                "{place}[{i}]: label '{label}' of '{name}' is set per task in goodput (task `label`); the group uses the address"
            ));
        }
        if config.addresses.contains_key(name) {
            out.push(name.to_owned());
        } else {
            notes.push(format!(
                "{place}[{i}]: '{name}' is not a carried-over address; left out"
            ));
        }
    }
    out
}

fn groups(top: &Map<String, Value>, config: &mut MeshConfig, notes: &mut Vec<String>) {
    let names: Vec<(String, Value)> = obj(top, "groups").map(|(k, v)| (k.clone(), v.clone())).collect();
    for (name, g) in names {
        let place = format!("groups.{name}");
        if disabled(&g) {
            notes.push(format!("{place}: disabled; skipped"));
            continue;
        }
        for key in ["excludes", "default-address-label"] {
            if g.get(key).is_some() {
                notes.push(format!(
                    "{place}.{key}: not carried over (every pair of the group is tested)"
                ));
            }
        }
        if let Some(x) = g.get("excludes-self").and_then(Value::as_str) {
            if x == "disabled" {
                notes.push(format!(
                    "{place}.excludes-self: 'disabled' not carried over (goodput never pairs an address with itself)"
                ));
            }
        }
        let group = match g.get("type").and_then(Value::as_str) {
            Some("mesh") => Group::Mesh {
                addresses: selected(g.get("addresses"), &format!("{place}.addresses"), config, notes),
            },
            Some("list") => Group::List {
                addresses: selected(g.get("addresses"), &format!("{place}.addresses"), config, notes),
            },
            Some("disjoint") => Group::Disjoint {
                a: selected(
                    g.get("a-addresses"),
                    &format!("{place}.a-addresses"),
                    config,
                    notes,
                ),
                b: selected(
                    g.get("b-addresses"),
                    &format!("{place}.b-addresses"),
                    config,
                    notes,
                ),
                unidirectional: g.get("unidirectional").and_then(Value::as_bool) == Some(true),
            },
            other => {
                notes.push(format!(
                    "{place}: type {other:?} is not mesh, disjoint or list; skipped"
                ));
                continue;
            }
        };
        let empty = match &group {
            Group::Mesh { addresses } => addresses.len() < 2,
            Group::List { addresses } => addresses.is_empty(),
            Group::Disjoint { a, b, .. } => a.is_empty() || b.is_empty(),
        };
        if empty {
            notes.push(format!(
                "{place}: makes no pair from the carried-over addresses; skipped"
            ));
            continue;
        }
        config.groups.insert(name, group);
    }
}

/// A template string with pSConfig's address variables replaced; `None`
/// when another variable is in it.
fn substitute(s: &str) -> Option<String> {
    let mut out = String::new();
    let mut rest = s;
    while let Some(at) = rest.find("{%") {
        out.push_str(&rest[..at]);
        let end = rest[at..].find("%}")? + at;
        let var: String = rest[at + 2..end].chars().filter(|c| !c.is_whitespace()).collect();
        out.push_str(match var.as_str() {
            "address[0]" | "pscheduler_address[0]" => "{{source}}",
            "address[1]" | "pscheduler_address[1]" => "{{dest}}",
            _ => return None,
        });
        rest = &rest[end + 2..];
    }
    out.push_str(rest);
    Some(out)
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

/// Converts each test; the kind each became, by test name.
fn tests(
    top: &Map<String, Value>,
    config: &mut MeshConfig,
    notes: &mut Vec<String>,
    choices: ImportChoices,
) -> BTreeMap<String, Kind> {
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
    let mut kinds = BTreeMap::new();
    for (name, t) in obj(top, "tests") {
        let place = format!("tests.{name}");
        let tools = tools.get(name.as_str()).map_or(&[][..], Vec::as_slice);
        if disabled(t) {
            notes.push(format!("{place}: disabled; skipped"));
            continue;
        }
        let ty = t.get("type").and_then(Value::as_str).unwrap_or("");
        let spec = t
            .get("spec")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        // Every string in the spec with its variables replaced.
        let mut s = Map::new();
        let mut unknown_var = None;
        for (k, v) in &spec {
            let v = match v {
                Value::String(x) => match substitute(x) {
                    Some(x) => Value::String(x),
                    None => {
                        unknown_var = Some(format!("{k} = {x:?}"));
                        continue;
                    }
                },
                v => v.clone(),
            };
            s.insert(k.clone(), v);
        }
        if let Some(what) = unknown_var {
            notes.push(format!(
                "{place}: spec.{what} uses a template variable other than address[0] and address[1]; skipped"
            ));
            continue;
        }
        match convert_test(ty, &s, choices, tools, &place, notes) {
            Ok((kind, doc)) => {
                kinds.insert(name.clone(), kind);
                config.tests.insert(name.clone(), doc);
            }
            Err(why) => notes.push(format!("{place}: {why}; skipped")),
        }
    }
    kinds
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
    match ty {
        "throughput" | "latency" | "latencybg" | "rtt" | "trace" => {}
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
            // pScheduler's flip: the destination sends, toward the source.
            let direction = if f.flag("flip") { "from" } else { "to" };
            let mut d = json!({
                "kind": Kind::Owamp, "host": dest, "direction": direction, "interval": interval,
            });
            if ty == "latencybg" {
                // powstream: one endless stream, a summary every
                // packet-count packets.
                d["continuous"] = json!(true);
                d["summary_every"] = json!(count.min(crate::spec::owamp::MAX_SUMMARY_EVERY));
                // Each stream runs as long as the daily schedule's repeat
                // (LATENCYBG_REPEAT), so the next day's run takes over.
                d["duration"] = json!(LATENCYBG_DURATION);
            } else {
                d["count"] = json!(count);
            }
            if let Some(t) = dur(&mut f, "packet-timeout")? {
                d["timeout"] = json!(t);
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

fn tasks(
    top: &Map<String, Value>,
    config: &mut MeshConfig,
    notes: &mut Vec<String>,
    kinds: &BTreeMap<String, Kind>,
) {
    for (name, t) in obj(top, "tasks") {
        let place = format!("tasks.{name}");
        let text = |k: &str| t.get(k).and_then(Value::as_str).map(str::to_owned);
        let (Some(group), Some(test)) = (text("group"), text("test")) else {
            notes.push(format!("{place}: no group or test; skipped"));
            continue;
        };
        if !config.groups.contains_key(&group) {
            notes.push(format!(
                "{place}: its group '{group}' was not carried over; skipped"
            ));
            continue;
        }
        let Some(kind) = kinds.get(&test) else {
            notes.push(format!(
                "{place}: its test '{test}' was not carried over; skipped"
            ));
            continue;
        };
        let schedule = match text("schedule") {
            Some(s) if config.schedules.contains_key(&s) => s,
            Some(s) => {
                notes.push(format!(
                    "{place}: its schedule '{s}' was not carried over; skipped"
                ));
                continue;
            }
            None if top
                .get("tests")
                .and_then(|x| x.get(&test))
                .and_then(|x| x.get("type"))
                .and_then(Value::as_str)
                == Some("latencybg") =>
            {
                let s = "latencybg".to_owned();
                config.schedules.entry(s.clone()).or_insert_with(|| Schedule {
                    repeat: LATENCYBG_REPEAT.into(),
                    ..Schedule::default()
                });
                notes.push(format!(
                    "{place}: latencybg streams without a schedule in perfSONAR; here a continuous {kind} stream, renewed daily (schedule 'latencybg')"
                ));
                s
            }
            None => {
                notes.push(format!(
                    "{place}: no schedule (pScheduler would run it once); skipped"
                ));
                continue;
            }
        };
        for key in ["archives", "priority", "reference", "subtasks"] {
            if t.get(key).is_some() {
                notes.push(format!("{place}.{key}: not carried over"));
            }
        }
        // A tool is honoured when its protocol is the kind's.
        let first_tool = t
            .get("tools")
            .and_then(Value::as_array)
            .and_then(|a| a.first())
            .and_then(Value::as_str);
        if let Some(tool) = first_tool {
            let honoured = (*kind == Kind::Owamp && OWAMP_TOOLS.contains(&tool))
                || (*kind == Kind::Twamp && tool == TWAMP_TOOL)
                || (*kind == Kind::Ping && tool == PING_TOOL);
            if !honoured {
                notes.push(format!(
                    "{place}.tools: {tool:?} is not used; the test runs as {kind}"
                ));
            }
        }
        let scheduled_by = match t.get("scheduled-by").and_then(Value::as_u64) {
            None | Some(0) => Lead::Source,
            Some(1) => Lead::Destination,
            Some(n) => {
                notes.push(format!(
                    "{place}.scheduled-by: {n} is not 0 or 1; the source leads"
                ));
                Lead::Source
            }
        };
        config.tasks.insert(
            name.clone(),
            Task {
                group,
                test,
                schedule,
                scheduled_by,
                disabled: disabled(t),
                ..Task::default()
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variables_become_the_pairs_ends() {
        assert_eq!(substitute("{% address[1] %}").as_deref(), Some("{{dest}}"));
        assert_eq!(substitute("x{%address[0]%}y").as_deref(), Some("x{{source}}y"));
        assert_eq!(substitute("{% jq .foo %}"), None);
        assert_eq!(substitute("{% address[1]"), None);
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
            json!({ "kind": "owamp", "host": "{{dest}}", "direction": "from", "count": 50,
                    "interval": "10ms", "padding": 20, "timeout": "5s", "dscp": 46 })
        );
        assert_eq!(
            tests["bg"],
            json!({ "kind": "owamp", "host": "{{dest}}", "direction": "to", "interval": "200ms",
                    "continuous": true, "summary_every": 300, "duration": "24h" })
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
    fn durations_read_iso_and_seconds() {
        assert_eq!(duration(&json!("PT30S")).unwrap(), "30s");
        assert_eq!(duration(&json!("PT0.5S")).unwrap(), "500ms");
        assert_eq!(duration(&json!(0.1)).unwrap(), "100ms");
        assert!(duration(&json!("soon")).is_err());
        assert!(duration(&json!(-1)).is_err());
    }
}
