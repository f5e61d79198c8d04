//! A kind has one home: `goodput_core::kind` (the names) and each spec's
//! `KindSpec` (the facts). This test reads every crate's sources and fails
//! where code outside that home matches on a kind's name, compares with it,
//! keeps a list of kind names, or ends a match over kinds with `_ =>` — the
//! places a new kind would silently fall through instead of failing to
//! compile.

use std::path::{Path, PathBuf};

use goodput_core::kind::Kind;

/// Files where kind names are not kinds: each entry is a file and a name
/// that may appear there in a pattern or list, and why.
const NOT_KINDS: &[(&str, &str, &str)] = &[
    // pScheduler's tool names: its iperf3 tool, not our kind.
    (
        "crates/goodput-agent/src/http/pscheduler.rs",
        "iperf3",
        "pScheduler tool name",
    ),
    (
        "crates/goodput-agent/src/state/pscheduler.rs",
        "iperf3",
        "pScheduler tool name",
    ),
    // pSConfig and pScheduler name their test types `throughput`,
    // `latency`, `rtt` and `trace`: perfSONAR's words, not our kinds.
    (
        "crates/goodput-core/src/psconfig/mod.rs",
        "trace",
        "pScheduler test type",
    ),
    (
        "crates/goodput-archive/src/pscheduler.rs",
        "trace",
        "pScheduler test type",
    ),
    (
        "crates/goodput-core/src/psconfig/mod.rs",
        "dns",
        "pScheduler test type",
    ),
    (
        "crates/goodput-archive/src/pscheduler.rs",
        "dns",
        "pScheduler test type",
    ),
    (
        "crates/goodput-core/src/psconfig/mod.rs",
        "http",
        "pScheduler test type",
    ),
    // The agent leads pScheduler's rtt and trace tests: `trace` is the
    // test type, `ping` the pScheduler tool a task may ask for.
    (
        "crates/goodput-agent/src/http/pscheduler.rs",
        "trace",
        "pScheduler test type",
    ),
    (
        "crates/goodput-agent/src/state/pscheduler_single.rs",
        "trace",
        "pScheduler test type",
    ),
    (
        "crates/goodput-agent/src/state/pscheduler_single.rs",
        "ping",
        "pScheduler tool name",
    ),
    (
        "crates/goodput-agent/src/state/pscheduler_single.rs",
        "owamp",
        "pScheduler latency protocol",
    ),
    // A traceroute's probe methods (`probe-type`) are udp, tcp and icmp.
    (
        "crates/goodput-core/src/psconfig/mod.rs",
        "udp",
        "trace probe method",
    ),
    (
        "crates/goodput-core/src/psconfig/mod.rs",
        "tcp",
        "trace probe method",
    ),
    // iperf3's parameter document has `tcp` and `udp` flags.
    (
        "crates/goodput-core/src/iperf3/params.rs",
        "tcp",
        "iperf3 JSON field",
    ),
    (
        "crates/goodput-core/src/iperf3/params.rs",
        "udp",
        "iperf3 JSON field",
    ),
    // ttcp's spec field `udp` is its `-u` flag.
    ("crates/goodput/src/cmd/ttcp.rs", "udp", "ttcp spec field"),
];

/// One place that breaks the rule.
#[derive(Debug)]
struct Finding {
    file: String,
    line: usize,
    what: String,
}

/// The workspace this test belongs to; `KINDS_LINT_ROOT` points it at
/// another tree (an older checkout, to see what it would have found).
fn workspace() -> PathBuf {
    std::env::var_os("KINDS_LINT_ROOT")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."))
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Every `crates/*/src/**/*.rs`, relative to the workspace.
fn all_sources(root: &Path) -> Vec<(String, String)> {
    let mut files = Vec::new();
    for c in std::fs::read_dir(root.join("crates")).unwrap().flatten() {
        sources(&c.path().join("src"), &mut files);
    }
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().replace('\\', "/");
            (rel, std::fs::read_to_string(&p).unwrap())
        })
        .collect()
}

/// The kind names quoted as string literals on `line`, with their byte
/// offsets.
fn quoted_kinds(line: &str) -> Vec<(usize, Kind)> {
    let mut out = Vec::new();
    for k in Kind::ALL {
        let q = format!("\"{}\"", k.name());
        let mut from = 0;
        while let Some(i) = line[from..].find(&q).map(|i| i + from) {
            out.push((i, k));
            from = i + q.len();
        }
    }
    out.sort_by_key(|(i, _)| *i);
    out
}

/// Whether the literal at `at..at+len` is used as a pattern, a comparison
/// or a field set to a kind.
fn used_as_kind(line: &str, at: usize, len: usize) -> Option<&'static str> {
    let before = line[..at].trim_end();
    let after = line[at + len..].trim_start();
    let or = |s: &str| s.starts_with('|') && !s.starts_with("||");
    if after.starts_with("=>") {
        return Some("a match arm on a kind's name");
    }
    if or(after) || (before.ends_with('|') && !before.ends_with("||")) {
        return Some("an or-pattern of kind names");
    }
    if before.ends_with("==") || before.ends_with("!=") || after.starts_with("==") || after.starts_with("!=")
    {
        return Some("a comparison with a kind's name");
    }
    if let Some(b) = before.strip_suffix("kind:") {
        if !b.ends_with('"') {
            return Some("a `kind` field set to a kind's name");
        }
    }
    None
}

/// The kind names on `line` that stand as items of a list: after `[`, a
/// comma or nothing (not a value after `:` or `=`, as in a document).
fn listed_kinds(line: &str) -> Vec<Kind> {
    quoted_kinds(line)
        .into_iter()
        .filter(|(at, _)| {
            let before = line[..*at].trim_end();
            before.is_empty() || before.ends_with('[') || before.ends_with(',')
        })
        .map(|(_, k)| k)
        .collect()
}

/// Whether `line` holds a list of two or more kind names: inside one pair
/// of brackets, or as a line of only string literals (a list rustfmt broke
/// over lines).
fn lists_kinds(line: &str) -> Vec<Kind> {
    let t = line.trim();
    let only_literals = !t.is_empty()
        && t.split(',')
            .map(str::trim)
            .filter(|x| !x.is_empty())
            .all(|x| x.len() >= 2 && x.starts_with('"') && x.ends_with('"'));
    if only_literals && listed_kinds(t).len() >= 2 {
        return listed_kinds(t);
    }
    let mut from = 0;
    while let Some(open) = line[from..].find('[').map(|i| i + from) {
        let Some(close) = line[open..].find(']').map(|i| i + open) else {
            break;
        };
        let listed = listed_kinds(&line[open..close]);
        if listed.len() >= 2 {
            return listed;
        }
        from = close;
    }
    Vec::new()
}

/// Whether `name` stands for something else than our kind in `file`.
fn not_a_kind(file: &str, name: &str) -> bool {
    NOT_KINDS.iter().any(|(f, n, _)| *f == file && *n == name)
}

/// Whether the arm that starts `t` (a trimmed line of `file`) matches a
/// kind.
fn kind_arm(file: &str, t: &str) -> bool {
    let t = t.trim_start_matches("Some(").trim_start_matches('(');
    ["Kind::", "TestSpec::", "TestKind::"]
        .iter()
        .any(|p| t.starts_with(p) || t.contains(&format!("| {p}")))
        || quoted_kinds(t)
            .first()
            .is_some_and(|(i, k)| *i == 0 && !not_a_kind(file, k.name()))
}

fn indent(l: &str) -> usize {
    l.len() - l.trim_start().len()
}

/// Every break of the rule in one file.
fn check(file: &str, text: &str) -> Vec<Finding> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (n, line) in lines.iter().enumerate() {
        let code = line.trim_start();
        if code.starts_with("//") {
            continue;
        }
        let mut found = |what: String| {
            out.push(Finding {
                file: file.to_owned(),
                line: n + 1,
                what,
            })
        };
        for (at, k) in quoted_kinds(line) {
            if not_a_kind(file, k.name()) {
                continue;
            }
            if let Some(why) = used_as_kind(line, at, k.name().len() + 2) {
                found(format!("{why} (\"{k}\"): {}", code.trim_end()));
            }
        }
        let listed = lists_kinds(line);
        if !listed.iter().all(|k| not_a_kind(file, k.name())) {
            found(format!("a list of kind names: {}", code.trim_end()));
        }
        if code.starts_with("_ =>") || code.starts_with("_ if ") {
            // The arms of the same match: the lines above at the same
            // indentation, up to the `match` (less indented).
            let depth = indent(line);
            let over_kinds = lines[..n]
                .iter()
                .rev()
                .filter(|l| !l.trim().is_empty())
                .take_while(|l| indent(l) >= depth)
                .filter(|l| indent(l) == depth)
                .any(|l| kind_arm(file, l.trim_start()));
            if over_kinds {
                found(format!("`_ =>` after arms on kinds: {}", code.trim_end()));
            }
        }
    }
    out
}

/// Findings outside the kind's home and the allow-list.
fn findings() -> Vec<Finding> {
    let root = workspace();
    all_sources(&root)
        .iter()
        .filter(|(f, _)| f != "crates/goodput-core/src/kind.rs")
        .flat_map(|(f, text)| check(f, text))
        .collect()
}

#[test]
fn no_kind_is_named_outside_its_home() {
    let found = findings();
    let report: Vec<String> = found
        .iter()
        .map(|f| format!("{}:{}: {}", f.file, f.line, f.what))
        .collect();
    assert!(
        report.is_empty(),
        "kinds named outside goodput_core::kind (use Kind and the spec's KindSpec facts):\n{}",
        report.join("\n")
    );
}

#[test]
fn the_lint_sees_the_patterns_it_forbids() {
    let bad = r#"
fn class(kind: &str) -> RunClass {
    match kind {
        "tcp" | "iperf3" => RunClass::Exclusive,
        "stamp" => RunClass::Background,
        _ => RunClass::Normal,
    }
}
fn set(spec: &mut TestSpec) {
    match spec {
        TestSpec::Tcp(s) => s.x = 1,
        _ => {}
    }
    let known = ["tcp", "udp", "quic"];
    let known = [
        "tcp", "udp",
    ];
    if kind == "trace" {}
    let m = Metric { kind: "stamp" };
    let ok = matches!(kind, "ping" | "echo");
}
"#;
    let found = check("x.rs", bad);
    let lines: Vec<usize> = found.iter().map(|f| f.line).collect();
    // Lines of `bad` (the first is empty): the or-pattern, the arm, the
    // wildcard after name arms, the wildcard after variant arms, the two
    // lists, the comparison, the field, the matches!.
    for want in [4, 5, 6, 12, 14, 16, 18, 19, 20] {
        assert!(lines.contains(&want), "line {want} not found: {found:#?}");
    }
    // What is not a kind's use passes: a document, a name printed, a
    // variant's name given out, a match on something else.
    let fine = r#"
let doc = json!({"kind": "tcp", "hosts": ["h"]});
let text = format!("kind = \"stamp\"");
let name = match m { ProbeMethod::Udp => "udp", ProbeMethod::Tcp => "tcp" };
match x {
    Some(1) => {}
    _ => {}
}
"#;
    let found = check("y.rs", fine);
    assert!(found.is_empty(), "{found:#?}");
}

#[test]
fn the_temporary_allow_list_names_files_that_exist() {
    let root = workspace();
    for (f, _, _) in NOT_KINDS {
        assert!(root.join(f).exists(), "{f} is gone: drop it from NOT_KINDS");
    }
}
