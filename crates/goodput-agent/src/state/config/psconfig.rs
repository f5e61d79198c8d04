//! perfSONAR pSConfig templates as they are published: told from a
//! goodput mesh document by their content, with their `includes` read
//! (files and URLs) and merged the way pSConfig's agents merge them, then
//! handed to core's importer. This is the agent's I/O half of the import
//! (`goodput_core::psconfig` is pure): the agent subscribes to a template
//! through it, and `goodput agent import-psconfig` and `--check-config`
//! read one through it.
//!
//! pSConfig's rules, from its agents' code: each include is read and the
//! objects of its ten top-level maps (`addresses`, `address-classes`,
//! `archives`, `contexts`, `groups`, `hosts`, `schedules`, `subtasks`,
//! `tasks`, `tests`) are added to the template's; a name the template
//! (or an earlier include) already holds keeps its first object, and the
//! later one is skipped with a warning; an include that cannot be read
//! fails the whole template, so the agent keeps what it ran before; object
//! members whose name starts with `#` are comments and are removed first.
//!
//! Where goodput differs, it says so: pSConfig reads only the template's
//! own includes, goodput also follows an include's includes (each one
//! named in a note, as pSConfig's agent would leave it out); and
//! everything is bounded, each bound named in its refusal: at most
//! [`MAX_INCLUDES`] documents, [`MAX_INCLUDE_DEPTH`] deep, no document
//! twice on one chain (a loop), [`MAX_TEMPLATE_BYTES`] for the template
//! and its includes together, [`INCLUDE_TIMEOUT`] for each include and
//! [`TEMPLATE_DEADLINE`] for all of them.

use std::collections::HashSet;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::time::Duration;

use goodput_core::psconfig::{import_psconfig, ImportChoices, Imported};
use serde_json::{Map, Value};

use super::{fetch_within, ConfigSource};

/// The most documents a template may include, over every level.
pub(crate) const MAX_INCLUDES: usize = 32;
/// How deep includes may nest (the template's own includes are level 1).
pub(crate) const MAX_INCLUDE_DEPTH: usize = 4;
/// The most bytes the template and all its includes may have together
/// (what one configuration document may have).
pub(crate) const MAX_TEMPLATE_BYTES: usize = goodput_core::mesh::MAX_DOCUMENT_BYTES;
/// How long one include may take to read.
pub(crate) const INCLUDE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long all of a template's includes may take to read.
pub(crate) const TEMPLATE_DEADLINE: Duration = Duration::from_secs(30);
/// The most notes about names already held that are said one by one.
const MAX_COLLISION_NOTES: usize = 20;

/// The top-level maps whose objects an include adds (pSConfig's list).
const MERGED: [&str; 10] = [
    "addresses",
    "address-classes",
    "archives",
    "contexts",
    "groups",
    "hosts",
    "schedules",
    "subtasks",
    "tasks",
    "tests",
];

/// Whether a JSON document is a pSConfig template rather than a goodput
/// mesh document (both have `addresses`, `groups`, `tests`, `schedules`
/// and `tasks`): it has a top-level object only pSConfig has, a test
/// written as pScheduler's `type` and `spec`, or a group that selects
/// its addresses with objects (`{"name": …}`) where goodput lists names.
pub(crate) fn is_template(doc: &Value) -> bool {
    let Some(top) = doc.as_object() else {
        return false;
    };
    const ONLY_PSCONFIG: [&str; 6] = [
        "includes",
        "address-classes",
        "hosts",
        "contexts",
        "subtasks",
        "_meta",
    ];
    if ONLY_PSCONFIG.iter().any(|k| top.contains_key(*k)) {
        return true;
    }
    let pscheduler_test = top.get("tests").and_then(Value::as_object).is_some_and(|t| {
        t.values()
            .any(|t| t.get("type").is_some() && t.get("spec").is_some())
    });
    let selectors = top.get("groups").and_then(Value::as_object).is_some_and(|g| {
        g.values().any(|g| {
            ["addresses", "a-addresses", "b-addresses"].iter().any(|k| {
                g.get(*k)
                    .and_then(Value::as_array)
                    .is_some_and(|a| a.iter().any(Value::is_object))
            })
        })
    });
    pscheduler_test || selectors
}

/// Whether a JSON document is perfSONAR 4.0's MeshConfig (what a pSConfig
/// Web Admin publishes with `format=meshconfig`), which is not a template.
pub(crate) fn is_meshconfig(doc: &Value) -> bool {
    doc.get("organizations").is_some_and(Value::is_array)
}

/// A template with its includes merged in, and a note for each thing the
/// merge did that a reader should know (a name skipped, an include's own
/// includes followed).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Merged {
    /// The template, without `includes`.
    pub template: Value,
    /// One line each.
    pub notes: Vec<String>,
    /// How many includes were read.
    pub includes: usize,
}

/// Converts a template's text read from `origin`: its includes read and
/// merged, then core's importer. The notes are the merge's, then the
/// importer's.
pub async fn convert(origin: &ConfigSource, text: &str, choices: ImportChoices) -> Result<Imported, String> {
    let template = parse(text).map_err(|e| format!("{origin}: {e}"))?;
    let merged = with_includes(origin, template, text.len()).await?;
    let mut imported = import_psconfig(&merged.template, choices).map_err(|e| format!("{origin}: {e}"))?;
    let mut notes = merged.notes;
    notes.append(&mut imported.notes);
    imported.notes = notes;
    Ok(imported)
}

/// A document's JSON with pSConfig's comments (members named `#…`)
/// removed. serde_json refuses nesting deeper than 128, so the walk is
/// bounded too.
pub(crate) fn parse(text: &str) -> Result<Value, String> {
    let doc: Value =
        serde_json::from_str(text).map_err(|e| format!("not JSON (a pSConfig template is JSON): {e}"))?;
    Ok(decomment(doc))
}

fn decomment(v: Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.into_iter()
                .filter(|(k, _)| !k.starts_with('#'))
                .map(|(k, v)| (k, decomment(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.into_iter().map(decomment).collect()),
        v => v,
    }
}

/// Reads `template`'s includes (and theirs), merged into it. `bytes` is
/// the template's own size, counted against [`MAX_TEMPLATE_BYTES`].
pub(crate) async fn with_includes(
    origin: &ConfigSource,
    template: Value,
    bytes: usize,
) -> Result<Merged, String> {
    let Value::Object(mut root) = template else {
        return Err(format!("{origin}: a pSConfig template is a JSON object"));
    };
    let list = includes_of(&root).map_err(|e| format!("{origin}: {e}"))?;
    root.remove("includes");
    let mut walk = Walk {
        root,
        notes: Vec::new(),
        collisions: 0,
        read: 0,
        bytes,
        seen: HashSet::new(),
    };
    if !list.is_empty() {
        let top = key_of(origin).await;
        walk.seen.insert(top.clone());
        let mut chain = vec![top];
        let read = walk.visit(origin, list, &mut chain);
        match tokio::time::timeout(TEMPLATE_DEADLINE, read).await {
            Ok(r) => r?,
            Err(_) => {
                return Err(format!(
                    "{origin}: limit template_deadline: its includes were not all read within {} s",
                    TEMPLATE_DEADLINE.as_secs()
                ))
            }
        }
    }
    if walk.collisions > MAX_COLLISION_NOTES {
        walk.notes.push(format!(
            "includes: {} more names were already held and skipped",
            walk.collisions - MAX_COLLISION_NOTES
        ));
    }
    Ok(Merged {
        template: Value::Object(walk.root),
        notes: walk.notes,
        includes: walk.read,
    })
}

/// A document's `includes`: a list of strings, at most [`MAX_INCLUDES`].
fn includes_of(doc: &Map<String, Value>) -> Result<Vec<String>, String> {
    let Some(v) = doc.get("includes") else {
        return Ok(Vec::new());
    };
    let list = v
        .as_array()
        .ok_or("includes: must be a list of URLs or file names")?;
    if list.len() > MAX_INCLUDES {
        return Err(format!(
            "includes: limit max_includes: it lists {} documents, {MAX_INCLUDES} allowed",
            list.len()
        ));
    }
    list.iter()
        .enumerate()
        .map(|(i, v)| {
            v.as_str()
                .map(str::to_owned)
                .ok_or_else(|| format!("includes[{i}]: must be a URL or a file name"))
        })
        .collect()
}

/// What identifies a document on an include chain: a file's real path
/// (so two names of one file are one), a URL as written.
async fn key_of(source: &ConfigSource) -> String {
    match source {
        ConfigSource::File(p) => tokio::fs::canonicalize(p)
            .await
            .unwrap_or_else(|_| p.clone())
            .display()
            .to_string(),
        ConfigSource::Url(u) => u.clone(),
    }
}

/// Where an include named in a document read from `origin` is: a URL, or
/// a file (`file://` stripped; relative to the including file's
/// directory). A document read from a URL may include only URLs: a
/// template served by someone else must not make the agent read this
/// host's files.
fn locate(origin: &ConfigSource, name: &str) -> Result<ConfigSource, String> {
    let name = name.trim();
    if name.starts_with("http://") || name.starts_with("https://") {
        return Ok(ConfigSource::Url(name.to_owned()));
    }
    if let Some((scheme, _)) = name.split_once("://") {
        if scheme != "file" {
            return Err(format!(
                "'{scheme}://' is not a scheme an include may have (http://, https://, file:// or a file name)"
            ));
        }
    }
    let path = Path::new(name.strip_prefix("file://").unwrap_or(name));
    match origin {
        ConfigSource::Url(_) => Err(
            "a template read from a URL may include only http:// or https:// URLs, not this host's files"
                .into(),
        ),
        ConfigSource::File(p) if path.is_relative() => {
            let dir = p.parent().unwrap_or(Path::new(""));
            Ok(ConfigSource::File(dir.join(path)))
        }
        ConfigSource::File(_) => Ok(ConfigSource::File(PathBuf::from(path))),
    }
}

/// Python's truth of a JSON value: pSConfig keeps a name already held
/// only when its object is not empty.
fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

/// The merge under way.
struct Walk {
    root: Map<String, Value>,
    notes: Vec<String>,
    collisions: usize,
    /// Includes read so far.
    read: usize,
    /// Bytes read so far, the template's with them.
    bytes: usize,
    /// Every document read (a second mention adds nothing: the first
    /// object of each name wins).
    seen: HashSet<String>,
}

type Visit<'a> = Pin<Box<dyn Future<Output = Result<(), String>> + Send + 'a>>;

impl Walk {
    /// Reads and merges `list`, the includes of the last document of
    /// `chain` (read from `origin`), depth first: each include's objects,
    /// then its own includes, then the next include.
    fn visit<'a>(
        &'a mut self,
        origin: &'a ConfigSource,
        list: Vec<String>,
        chain: &'a mut Vec<String>,
    ) -> Visit<'a> {
        Box::pin(async move {
            for (i, name) in list.iter().enumerate() {
                let place = format!("{origin}: includes[{i}] ({name})");
                let source = locate(origin, name).map_err(|e| format!("{place}: {e}"))?;
                let key = key_of(&source).await;
                if let Some(at) = chain.iter().position(|k| *k == key) {
                    let mut path: Vec<&str> = chain[at..].iter().map(String::as_str).collect();
                    path.push(&key);
                    return Err(format!("{place}: an include loop: {}", path.join(" → ")));
                }
                if chain.len() > MAX_INCLUDE_DEPTH {
                    return Err(format!(
                        "{place}: limit max_include_depth: includes nest deeper than {MAX_INCLUDE_DEPTH} \
                         documents ({} → {key})",
                        chain.join(" → ")
                    ));
                }
                if !self.seen.insert(key.clone()) {
                    continue;
                }
                self.read += 1;
                if self.read > MAX_INCLUDES {
                    return Err(format!(
                        "{place}: limit max_includes: more than {MAX_INCLUDES} documents included"
                    ));
                }
                let (text, _) = fetch_within(&source, None, INCLUDE_TIMEOUT)
                    .await
                    .map_err(|e| format!("{place}: {e}"))?;
                self.bytes = self.bytes.saturating_add(text.len());
                if self.bytes > MAX_TEMPLATE_BYTES {
                    return Err(format!(
                        "{place}: limit max_config_bytes: the template and its includes have more than \
                         {MAX_TEMPLATE_BYTES} bytes together"
                    ));
                }
                let doc = parse(&text).map_err(|e| format!("{place}: {e}"))?;
                drop(text);
                let Value::Object(doc) = doc else {
                    return Err(format!("{place}: not a pSConfig template (not a JSON object)"));
                };
                let nested = includes_of(&doc).map_err(|e| format!("{place}: {e}"))?;
                self.merge(&place, doc)?;
                if !nested.is_empty() {
                    self.notes.push(format!(
                        "{place}: its own includes ({}) are merged too; perfSONAR's pSConfig agent reads \
                         only the template's includes and would leave them out",
                        nested.join(", ")
                    ));
                    chain.push(key);
                    let r = self.visit(&source, nested, chain).await;
                    chain.pop();
                    r?;
                }
            }
            Ok(())
        })
    }

    /// Adds an include's objects to the template's, the first of each
    /// name kept.
    fn merge(&mut self, place: &str, doc: Map<String, Value>) -> Result<(), String> {
        for (field, theirs) in doc {
            if !MERGED.contains(&field.as_str()) || !truthy(&theirs) {
                continue;
            }
            let Value::Object(theirs) = theirs else {
                return Err(format!("{place}: {field}: must be an object of named objects"));
            };
            let ours = self
                .root
                .entry(field.clone())
                .or_insert_with(|| Value::Object(Map::new()));
            if ours.is_null() {
                *ours = Value::Object(Map::new());
            }
            let Value::Object(ours) = ours else {
                return Err(format!(
                    "{field}: must be an object of named objects (an include adds to it)"
                ));
            };
            for (name, object) in theirs {
                if ours.get(&name).is_some_and(truthy) {
                    self.collisions += 1;
                    if self.collisions <= MAX_COLLISION_NOTES {
                        self.notes.push(format!(
                            "{place}: {field}.{name} not merged: an object of that name was read first \
                             (the first one wins, as in pSConfig)"
                        ));
                    }
                } else {
                    ours.insert(name, object);
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("goodput-psconfig-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn put(d: &Path, name: &str, v: &Value) -> PathBuf {
        let p = d.join(name);
        std::fs::write(&p, v.to_string()).unwrap();
        p
    }

    fn merge(p: &Path) -> Result<Merged, String> {
        let text = std::fs::read_to_string(p).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(with_includes(
            &ConfigSource::File(p.to_owned()),
            parse(&text).unwrap(),
            text.len(),
        ))
    }

    #[test]
    fn a_template_is_told_from_a_mesh_document_by_its_content() {
        let mesh = json!({"addresses": {"a": {"address": "10.0.0.1"}}, "groups": {"g": {"type": "mesh", "addresses": ["a"]}},
                          "tests": {"t": {"kind": "stamp", "host": "{{dest}}"}}});
        assert!(!is_template(&mesh));
        let ps = json!({"addresses": {"a": {"address": "10.0.0.1"}}, "groups": {"g": {"type": "mesh", "addresses": [{"name": "a"}]}}});
        assert!(is_template(&ps));
        assert!(is_template(&json!({"tests": {"t": {"type": "rtt", "spec": {}}}})));
        assert!(is_template(&json!({"includes": []})));
        assert!(!is_template(&json!([1])));
        assert!(is_meshconfig(&json!({"organizations": [], "tests": []})));
    }

    #[test]
    fn includes_add_names_the_template_lacks_and_the_first_wins() {
        let d = dir("merge");
        put(
            &d,
            "b.json",
            &json!({"#": "a comment", "tests": {"t": {"type": "rtt", "spec": {"dest": "b"}}, "u": {"type": "trace", "spec": {}}},
                    "addresses": {"empty": {}}, "_meta": {"x": 1}}),
        );
        put(
            &d,
            "c.json",
            &json!({"tests": {"u": {"type": "latency", "spec": {}}, "v": {"type": "rtt", "spec": {}}}}),
        );
        let top = put(
            &d,
            "top.json",
            &json!({"includes": ["b.json", format!("file://{}", d.join("c.json").display())],
                    "addresses": {"empty": {}},
                    "tests": {"t": {"type": "throughput", "spec": {}}}}),
        );
        let m = merge(&top).unwrap();
        let t = &m.template;
        assert_eq!(m.includes, 2);
        assert!(t.get("includes").is_none());
        // The template's t stays; u comes from the first include that has
        // it, v from the second; an empty object is replaced, as pSConfig
        // does (an empty object is false to Python).
        assert_eq!(t["tests"]["t"]["type"], "throughput");
        assert_eq!(t["tests"]["u"]["type"], "trace");
        assert_eq!(t["tests"]["v"]["type"], "rtt");
        assert_eq!(t["addresses"]["empty"], json!({}));
        assert!(t.get("_meta").is_none() && t.get("#").is_none());
        assert_eq!(m.notes.len(), 2, "{:?}", m.notes);
        assert!(m.notes[0].ends_with(
            "includes[0] (b.json): tests.t not merged: an object of that name was read first (the first one wins, as in pSConfig)"
        ), "{:?}", m.notes);
        assert!(m.notes[1].contains("includes[1]") && m.notes[1].contains("tests.u not merged"));
    }

    #[test]
    fn loops_depth_and_count_are_refused_with_their_reason() {
        let d = dir("bounds");
        put(&d, "a.json", &json!({"includes": ["b.json"]}));
        put(&d, "b.json", &json!({"includes": ["a.json"]}));
        let e = merge(&d.join("a.json")).unwrap_err();
        assert!(
            e.contains("includes[0] (a.json): an include loop: ") && e.ends_with("/a.json"),
            "{e}"
        );
        assert!(e.contains("a.json → ") && e.contains("b.json → "), "{e}");
        // A chain of six: the fifth level is too deep.
        for i in 0..6 {
            put(
                &d,
                &format!("n{i}.json"),
                &json!({"includes": [format!("n{}.json", i + 1)]}),
            );
        }
        put(&d, "n6.json", &json!({}));
        let e = merge(&d.join("n0.json")).unwrap_err();
        assert!(
            e.contains("limit max_include_depth: includes nest deeper than 4 documents"),
            "{e}"
        );
        // 33 in one list.
        let many: Vec<String> = (0..33).map(|i| format!("x{i}.json")).collect();
        put(&d, "many.json", &json!({"includes": many}));
        let e = merge(&d.join("many.json")).unwrap_err();
        assert!(
            e.ends_with("includes: limit max_includes: it lists 33 documents, 32 allowed"),
            "{e}"
        );
        // A document included twice (not on one chain) is read once.
        put(
            &d,
            "leaf.json",
            &json!({"tests": {"t": {"type": "rtt", "spec": {}}}}),
        );
        put(&d, "mid.json", &json!({"includes": ["leaf.json"]}));
        put(&d, "twice.json", &json!({"includes": ["leaf.json", "mid.json"]}));
        let m = merge(&d.join("twice.json")).unwrap();
        assert_eq!(m.includes, 2);
        assert!(
            m.notes[0].contains("its own includes (leaf.json) are merged too"),
            "{:?}",
            m.notes
        );
    }

    #[test]
    fn a_template_from_a_url_may_not_include_local_files() {
        let origin = ConfigSource::Url("http://192.0.2.1/t.json".into());
        for name in ["/etc/passwd", "file:///etc/passwd", "local.json"] {
            assert!(
                locate(&origin, name)
                    .unwrap_err()
                    .contains("not this host's files"),
                "{name}"
            );
        }
        assert!(locate(&origin, "ftp://x/y")
            .unwrap_err()
            .contains("'ftp://' is not a scheme"));
        assert_eq!(
            locate(&origin, "https://192.0.2.2/more.json").unwrap(),
            ConfigSource::Url("https://192.0.2.2/more.json".into())
        );
    }
}
