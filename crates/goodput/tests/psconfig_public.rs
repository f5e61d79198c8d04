//! `goodput agent import-psconfig` over pSConfig templates that no one on
//! this project wrote (fixtures/psconfig/public, sources in SOURCES.md)
//! and over ESnet-shaped ones written here (fixtures/psconfig/*-shaped):
//! every enabled throughput, latency, latencybg, rtt and trace task is
//! carried over, and the paths each runs — where the data starts, where
//! it goes, which host schedules it — are what pSConfig's own expansion
//! gives. That expansion is written again here, small and on its own
//! (mesh, disjoint, list; excludes, excludes-self, unidirectional; hosts'
//! no-agent and disabled; labels), so the importer is checked against
//! the template, not against itself. Each imported document is then
//! loaded by `goodput agent --check-config`.

mod common;

use common::{run, tmp};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// The kinds of test pSConfig tasks that goodput measures.
const MEASURED: [&str; 5] = ["throughput", "latency", "latencybg", "rtt", "trace"];

fn fixture(name: &str) -> String {
    format!("{}/tests/fixtures/psconfig/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// One path a task measures: (from address, to address or "-", the
/// address that schedules it).
type Path = (String, String, String);

struct End {
    name: String,
    address: String,
    host: Option<String>,
    no_agent: bool,
    disabled: bool,
}

fn flag(v: &Value, k: &str) -> bool {
    v.get(k).and_then(Value::as_bool) == Some(true)
}

/// An address (with a label, when asked, toward a peer) as pSConfig
/// resolves it: the address's entry for that peer first, then its own
/// label, then itself.
fn end(t: &Value, name: &str, label: Option<&str>, peer: Option<&str>) -> Option<End> {
    let a = t["addresses"].get(name)?;
    let host_name = a.get("host").and_then(Value::as_str);
    let host = host_name.and_then(|h| t.get("hosts").and_then(|x| x.get(h)));
    let hflag = |k: &str| host.is_some_and(|h| flag(h, k));
    let remote = peer.and_then(|p| a.get("remote-addresses").and_then(|r| r.get(p)));
    let via_remote = match (remote, label) {
        (Some(r), Some(l)) => match r.get("labels").and_then(|x| x.get(l)) {
            Some(x) => Some(x),
            None if r.get("address").is_none() => return None,
            None => None,
        },
        (Some(r), None) if r.get("address").is_some() => Some(r),
        _ => None,
    };
    let (address, l) = match (via_remote, label) {
        (Some(x), _) => (x["address"].as_str()?.to_owned(), Some(x)),
        (None, Some(l)) => {
            let x = a.get("labels")?.get(l)?;
            (x["address"].as_str()?.to_owned(), Some(x))
        }
        (None, None) => (a["address"].as_str()?.to_owned(), None),
    };
    Some(End {
        name: name.to_owned(),
        address,
        host: host_name.map(str::to_owned),
        no_agent: flag(a, "no-agent") || hflag("no-agent") || l.is_some_and(|l| flag(l, "no-agent")),
        disabled: flag(a, "disabled") || hflag("disabled") || l.is_some_and(|l| flag(l, "disabled")),
    })
}

/// The (name, label) a selector list picks: by name, or by an address
/// class (the public templates' classes select by tag).
fn select(t: &Value, list: &Value, default_label: Option<&str>) -> Vec<(String, Option<String>)> {
    let mut out = Vec::new();
    for s in list.as_array().into_iter().flatten() {
        if let Some(class) = s.get("class").and_then(Value::as_str) {
            let tag = t["address-classes"][class]["match-filter"]["tag"]
                .as_str()
                .expect("a class that selects by tag");
            let hosts = t.get("hosts");
            for (n, a) in t["addresses"].as_object().unwrap() {
                let mut tags: Vec<&str> = a["tags"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .collect();
                if let Some(h) = a
                    .get("host")
                    .and_then(Value::as_str)
                    .and_then(|h| hosts.and_then(|x| x.get(h)))
                {
                    tags.extend(
                        h["tags"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .filter_map(Value::as_str),
                    );
                }
                if tags.iter().any(|x| x.eq_ignore_ascii_case(tag)) {
                    out.push((n.clone(), default_label.map(str::to_owned)));
                }
            }
            continue;
        }
        let name = s["name"].as_str().unwrap().to_owned();
        let label = s.get("label").and_then(Value::as_str).or(default_label);
        out.push((name, label.map(str::to_owned)));
    }
    out
}

/// pSConfig's combinations of a group.
fn combinations(t: &Value, g: &Value) -> Vec<Vec<End>> {
    let dl = g.get("default-address-label").and_then(Value::as_str);
    let scope = g.get("excludes-self").and_then(Value::as_str).unwrap_or("host");
    let mut excluded = BTreeSet::new();
    for x in g["excludes"].as_array().into_iter().flatten() {
        let l = x["local-address"]["name"].as_str().unwrap().to_owned();
        for y in x["target-addresses"].as_array().into_iter().flatten() {
            excluded.insert((l.clone(), y["name"].as_str().unwrap().to_owned()));
        }
    }
    let keep = |a: &End, b: &End| {
        if excluded.contains(&(a.name.clone(), b.name.clone())) {
            return false;
        }
        let same_host = a.host.is_some()
            && a.host.as_deref().map(str::to_lowercase) == b.host.as_deref().map(str::to_lowercase);
        match scope {
            "host" => !same_host && a.address != b.address,
            "address" => a.address != b.address,
            _ => true,
        }
    };
    let pairs =
        |xs: &[(String, Option<String>)], ys: &[(String, Option<String>)], out: &mut Vec<Vec<End>>| {
            for (x, xl) in xs {
                for (y, yl) in ys {
                    let (Some(a), Some(b)) = (
                        end(t, x, xl.as_deref(), Some(y)),
                        end(t, y, yl.as_deref(), Some(x)),
                    ) else {
                        continue;
                    };
                    if keep(&a, &b) {
                        out.push(vec![a, b]);
                    }
                }
            }
        };
    let mut out = Vec::new();
    match g["type"].as_str().unwrap() {
        "mesh" => {
            let a = select(t, &g["addresses"], dl);
            pairs(&a, &a, &mut out);
        }
        "disjoint" => {
            let a = select(t, &g["a-addresses"], dl);
            let b = select(t, &g["b-addresses"], dl);
            pairs(&a, &b, &mut out);
            if !flag(g, "unidirectional") {
                pairs(&b, &a, &mut out);
            }
        }
        "list" => out.extend(
            select(t, &g["addresses"], dl)
                .into_iter()
                .filter_map(|(n, l)| end(t, &n, l.as_deref(), None))
                .map(|e| vec![e]),
        ),
        other => panic!("group type {other}"),
    }
    out
}

/// `{% address[i] %}` (or pscheduler_address) → i.
fn index(v: Option<&Value>) -> Option<usize> {
    let s = v?.as_str()?;
    let inner = s.trim().strip_prefix("{%")?.strip_suffix("%}")?.trim();
    let inner = inner.strip_prefix("pscheduler_").unwrap_or(inner);
    inner.strip_prefix("address[")?.strip_suffix(']')?.parse().ok()
}

/// The paths pSConfig runs for each enabled measured task, by task name:
/// who schedules (scheduled-by, or the first end with an agent), where
/// the data starts (the spec's source) and goes (its dest). With each,
/// how many of them start at an end with no agent in a test that
/// measures only from where it starts (rtt, trace): goodput cannot run
/// those, and says so.
fn psconfig_paths(t: &Value) -> BTreeMap<String, (BTreeSet<Path>, usize)> {
    let mut out = BTreeMap::new();
    for (name, task) in t["tasks"].as_object().unwrap() {
        let test = &t["tests"][task["test"].as_str().unwrap()];
        let ty = test["type"].as_str().unwrap_or("");
        if flag(task, "disabled") || flag(test, "disabled") || !MEASURED.contains(&ty) {
            continue;
        }
        let g = &t["groups"][task["group"].as_str().unwrap()];
        let k = task.get("scheduled-by").and_then(Value::as_u64).unwrap_or(0) as usize;
        let mut paths = BTreeSet::new();
        let mut unrunnable = 0;
        for c in combinations(t, g) {
            if c.iter().any(|e| e.disabled) {
                continue;
            }
            let Some(sched) = (!c[k].no_agent)
                .then_some(k)
                .or_else(|| c.iter().position(|e| !e.no_agent))
            else {
                continue;
            };
            let src = index(test["spec"].get("source")).unwrap_or(sched);
            let dst = index(test["spec"].get("dest"));
            if c[src].no_agent && matches!(ty, "rtt" | "trace") {
                unrunnable += 1;
                continue;
            }
            paths.insert((
                c[src].address.clone(),
                dst.map_or("-".to_owned(), |d| c[d].address.clone()),
                c[sched].address.clone(),
            ));
        }
        out.insert(name.clone(), (paths, unrunnable));
    }
    out
}

/// The paths the imported configuration runs, by the template's task
/// name (a task carried over as several is `name`, `name~2` …): each
/// goodput pair (its source runs the test, toward its destination), the
/// direction its test measures, and the end that books the slot.
fn goodput_paths(c: &toml::Value) -> BTreeMap<String, BTreeSet<Path>> {
    goodput_expand(c, None).0
}

/// How many pairs the address named `who` runs.
fn goodput_paths_of(c: &toml::Value, who: Option<&str>) -> usize {
    goodput_expand(c, who).1
}

/// Every enabled pair as a path by task (and how many of them run at
/// `who`).
fn goodput_expand(c: &toml::Value, who: Option<&str>) -> (BTreeMap<String, BTreeSet<Path>>, usize) {
    let mut count = 0;
    let addr = |n: &str, label: Option<&str>| -> String {
        let a = &c["addresses"][n];
        label
            .and_then(|l| a.get("labels").and_then(|x| x.get(l)))
            .and_then(toml::Value::as_str)
            .unwrap_or_else(|| a["address"].as_str().unwrap())
            .to_owned()
    };
    let no_agent = |n: &str| c["addresses"][n].get("no_agent").and_then(toml::Value::as_bool) == Some(true);
    let names = |v: &toml::Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_str().unwrap().to_owned())
            .collect()
    };
    let mut out: BTreeMap<String, BTreeSet<Path>> = BTreeMap::new();
    let Some(tasks) = c.get("tasks").and_then(toml::Value::as_table) else {
        return (out, 0);
    };
    for (name, task) in tasks {
        if task.get("disabled").and_then(toml::Value::as_bool) == Some(true) {
            continue;
        }
        let base = name.split('~').next().unwrap().to_owned();
        let g = &c["groups"][task["group"].as_str().unwrap()];
        let test = &c["tests"][task["test"].as_str().unwrap()];
        let label = task.get("label").and_then(toml::Value::as_str);
        let dest_leads = task.get("scheduled_by").and_then(toml::Value::as_str) == Some("destination");
        let mut pairs: Vec<(String, Option<String>)> = Vec::new();
        match g["type"].as_str().unwrap() {
            "mesh" => {
                let a = names(&g["addresses"]);
                for s in &a {
                    for d in a.iter().filter(|d| *d != s) {
                        pairs.push((s.clone(), Some(d.clone())));
                    }
                }
            }
            "disjoint" => {
                let (a, b) = (names(&g["a"]), names(&g["b"]));
                let uni = g.get("unidirectional").and_then(toml::Value::as_bool) == Some(true);
                for x in &a {
                    for y in b.iter().filter(|y| *y != x) {
                        pairs.push((x.clone(), Some(y.clone())));
                        if !uni {
                            pairs.push((y.clone(), Some(x.clone())));
                        }
                    }
                }
            }
            _ => pairs.extend(names(&g["addresses"]).into_iter().map(|a| (a, None))),
        }
        // The test's own word for which way the data goes.
        let backwards = test.get("direction").and_then(toml::Value::as_str) == Some("from")
            || test.get("pattern").and_then(toml::Value::as_str) == Some("pull")
            || test.get("reverse").and_then(toml::Value::as_bool) == Some(true);
        let set = out.entry(base).or_default();
        pairs.dedup();
        for (s, d) in pairs.into_iter().filter(|(s, _)| !no_agent(s)) {
            count += usize::from(who == Some(s.as_str()));
            let (sa, da) = (addr(&s, label), d.as_deref().map(|d| addr(d, label)));
            let books = match &d {
                Some(d) if dest_leads && !no_agent(d) => addr(d, label),
                _ => sa.clone(),
            };
            let da = da.unwrap_or_else(|| {
                // A written-out destination (a list group's test).
                test.get("host")
                    .or_else(|| test.get("hosts").and_then(|h| h.get(0)))
                    .and_then(toml::Value::as_str)
                    .filter(|h| !h.contains("{{"))
                    .map_or("-".to_owned(), str::to_owned)
            });
            set.insert(if backwards {
                (da, sa, books)
            } else {
                (sa, da, books)
            });
        }
    }
    (out, count)
}

fn import(path: &str, stem: &str) -> (toml::Value, String, std::path::PathBuf) {
    let out = tmp("psconfig_public", &format!("{stem}.toml"));
    let (code, _, err) = run(&["agent", "import-psconfig", path, "-o", out.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{stem}: {err}");
    let text = std::fs::read_to_string(&out).unwrap();
    (toml::from_str(&text).unwrap(), err, out)
}

/// Imports each template, compares its paths with pSConfig's, and has
/// `--check-config` load the result. Returns the number of tasks.
fn check(file: &str, want_tasks: usize) {
    let path = fixture(file);
    let stem = file.rsplit('/').next().unwrap().trim_end_matches(".json");
    let t: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let want = psconfig_paths(&t);
    assert_eq!(
        want.len(),
        want_tasks,
        "{stem}: enabled measured tasks in the template"
    );
    let (c, err, out) = import(&path, stem);
    let got = goodput_paths(&c);
    for (task, (paths, unrunnable)) in &want {
        if *unrunnable > 0 {
            let note = format!("tasks.{task}: {unrunnable} pairs whose source has no agent are not run");
            assert!(err.contains(&note), "{stem}: no note '{note}'\n{err}");
        }
        let empty = BTreeSet::new();
        let g = got.get(task).unwrap_or(&empty);
        assert!(
            !paths.is_empty() || g.is_empty(),
            "{stem}: task {task} has no pair in pSConfig"
        );
        assert!(
            paths.is_empty() || !g.is_empty(),
            "{stem}: task {task} not imported\n{err}"
        );
        assert_eq!(
            g, paths,
            "{stem}: task {task}: goodput's paths (left) are not pSConfig's (right)\n{err}"
        );
    }
    // The agent loads it, and a host of it runs the pairs counted here.
    let host = c["addresses"]
        .as_table()
        .unwrap()
        .iter()
        .find(|(_, a)| a.get("no_agent").and_then(toml::Value::as_bool) != Some(true))
        .map(|(n, _)| n.clone());
    let who = host.clone().unwrap_or_else(|| "198.51.100.250".into());
    let (code, stdout, stderr) = run(&[
        "agent",
        "--check-config",
        "--config",
        out.to_str().unwrap(),
        "--as",
        &who,
    ]);
    assert!(
        matches!(code, Some(0 | 1)),
        "{stem}: --check-config: {stdout}{stderr}"
    );
    assert!(stdout.contains(": valid: "), "{stem}: {stdout}{stderr}");
    // What the import writes never overlaps itself (a latencybg stream
    // and its ends fit in its repeat).
    assert!(
        !stderr.contains("would overlap themselves"),
        "{stem}: the imported tasks overlap themselves: {stderr}"
    );
    if let Some(h) = host {
        let address = c["addresses"][&h]["address"].as_str().unwrap().to_owned();
        let mine = goodput_paths_of(&c, Some(&h));
        let runs = format!("It runs {mine} task pairs");
        assert!(
            stdout.contains(&runs) || (mine == 0 && stdout.contains("runs no task")),
            "{stem}: {h} ({address}): want '{runs}'\n{stdout}"
        );
    }
}

#[test]
fn perfsonars_own_examples_import_every_task_on_psconfigs_paths() {
    for (file, tasks) in [
        ("public/example-1-simple.json", 3),
        ("public/example-2-testbed.json", 6),
        ("public/example-3-circuits.json", 2),
        ("public/example-4-snmp.json", 0),
        ("public/example-5-classes.json", 3),
        ("public/skeleton.json", 3),
    ] {
        check(file, tasks);
    }
}

#[test]
fn netsage_mesh_imports_every_task_on_psconfigs_paths() {
    check("public/psconfig-netsage-mesh.json", 10);
}

/// A template written here in the shape of ESnet's production mesh
/// (whose repository carries no licence to keep a copy): reverse tests
/// (`source = {% address[1] %}`), `{% flip %}` toward hosts with no
/// agent, hosts that are disabled or have no agent, excludes, the same
/// host on both sides, `scheduled-by`, a latencybg on a schedule shorter
/// than its session, an http and an esmond archiver.
#[test]
fn production_shaped_mesh_runs_reverse_and_flipped_tests_from_the_right_end() {
    check("esnet-shaped.json", 8);
    let (c, err, _) = import(&fixture("esnet-shaped.json"), "esnet-shaped-values");
    // Reverse: alpha's agent pulls from charlie (no agent), so the data
    // flows charlie → alpha as pScheduler would run it.
    let t = &c["tasks"]["throughput-reverse"];
    assert_eq!(t["test"].as_str(), Some("tp-reverse~turned"));
    assert_eq!(c["tests"]["tp-reverse~turned"]["pattern"].as_str(), Some("pull"));
    // Flip: the one-way latency from charlie (no agent) to alpha is
    // measured by alpha asking charlie's owampd to send.
    let flipped: Vec<&str> = c["tasks"]
        .as_table()
        .unwrap()
        .iter()
        .filter(|(n, t)| {
            n.starts_with("owd") && !n.contains("far") && t["test"].as_str() == Some("owd~turned")
        })
        .map(|(n, _)| n.as_str())
        .collect();
    assert_eq!(flipped, ["owd~2"], "{err}");
    assert_eq!(c["tests"]["owd~turned"]["direction"].as_str(), Some("from"));
    assert_eq!(c["tests"]["owd"]["direction"].as_str(), Some("to"));
    // scheduled-by 1: the destination books the slot where it has an agent.
    assert!(
        c["tasks"]
            .as_table()
            .unwrap()
            .iter()
            .any(|(n, t)| n.starts_with("owd-far-end-books")
                && t["scheduled_by"].as_str() == Some("destination")),
        "{err}"
    );
    // A latencybg of 600 packets at 0.2 s on a one-minute schedule: a
    // 120 s session, with its ends (2 s wait, 3 s set-up and fetch) a run
    // every 125 s, and the note says so.
    let t = &c["tasks"]["loss-minutely"];
    assert_eq!(t["schedule"].as_str(), Some("every-minute~125s"));
    assert_eq!(
        c["schedules"]["every-minute~125s"]["repeat"].as_str(),
        Some("PT125S")
    );
    assert_eq!(
        c["tests"][t["test"].as_str().unwrap()]["duration"].as_str(),
        Some("120s")
    );
    assert!(err.contains("tasks.loss-minutely: a latencybg run lasts 125 s (a session of 120 s, then 5 s to set up, wait for the last packets and fetch), longer than schedule 'every-minute' repeats (60 s)"), "{err}");
    // pScheduler's http archiver → a pscheduler archive; esmond is named.
    assert_eq!(c["archives"]["central"]["kind"].as_str(), Some("pscheduler"));
    assert_eq!(
        c["archives"]["central"]["url"].as_str(),
        Some("https://archive.example.net/logstash")
    );
    assert!(
        err.contains("archives.old-esmond: pScheduler's esmond archiver"),
        "{err}"
    );
    // A disabled host's address is gone; no-agent comes from the host.
    assert!(c["addresses"].get("delta-tp").is_none());
    assert_eq!(c["addresses"]["charlie-tp"]["no_agent"].as_bool(), Some(true));
    // The disabled task is kept, disabled.
    assert_eq!(c["tasks"]["off"]["disabled"].as_bool(), Some(true));
}
