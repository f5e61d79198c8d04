//! `goodput agent import-psconfig`: a pSConfig template (fixtures written
//! from pSConfig's published schema and pScheduler's test specs, not
//! copied from perfSONAR) becomes a mesh configuration that the agent
//! itself accepts, with the right tasks and a note for every thing left
//! out.

mod common;

use common::{run, tmp};

fn fixture(name: &str) -> String {
    format!("{}/tests/fixtures/psconfig/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// Imports `fixture` with `extra` flags: (configuration TOML as a value,
/// the notes on standard error, the file written).
fn import(name: &str, extra: &[&str]) -> (toml::Value, String, std::path::PathBuf) {
    let out = tmp("psconfig", &format!("{name}-{}.toml", extra.join("_")));
    let template = fixture(name);
    let mut args = vec!["agent", "import-psconfig", &template, "-o", out.to_str().unwrap()];
    args.extend_from_slice(extra);
    let (code, _, err) = run(&args);
    assert_eq!(code, Some(0), "{err}");
    let text = std::fs::read_to_string(&out).unwrap();
    (toml::from_str(&text).unwrap(), err, out)
}

#[test]
fn a_mesh_template_imports_to_the_right_tests_and_tasks() {
    let (c, err, path) = import("mesh.json", &[]);
    let test = |n: &str| c["tests"][n].clone();
    // throughput → tcp: the duration, parallel streams as connections.
    let t = test("throughput");
    assert_eq!(t["kind"].as_str(), Some("tcp"));
    assert_eq!(t["hosts"][0].as_str(), Some("{{dest}}"));
    assert_eq!(t["duration"].as_str(), Some("20s"));
    assert_eq!(t["connections"].as_integer(), Some(4));
    // UDP throughput → iperf3 whatever the choice, with its bandwidth.
    let t = test("udp-throughput");
    assert_eq!(t["kind"].as_str(), Some("iperf3"));
    assert_eq!(t["udp"].as_bool(), Some(true));
    assert_eq!(t["bitrate"].as_str(), Some("100000000"));
    assert_eq!(t["time"].as_str(), Some("10s"));
    // latencybg → owamp as powstream runs it: one continuous stream, a
    // summary every packet-count packets, each run as long as the daily
    // repeat; latency → owamp as owping: the count, interval and padding.
    // Both one way, source → destination.
    let t = test("latencybg");
    let want: toml::Value = toml::from_str(
        r#"kind = "owamp"
host = "{{dest}}"
direction = "to"
interval = "100ms"
continuous = true
summary_every = 600
duration = "86395s""#,
    )
    .unwrap();
    assert_eq!(t, want);
    let t = test("latency");
    let want: toml::Value = toml::from_str(
        r#"kind = "owamp"
host = "{{dest}}"
direction = "to"
count = 200
interval = "50ms"
padding = 56
family = "ipv4""#,
    )
    .unwrap();
    assert_eq!(t, want);
    // rtt → ping.
    let t = test("rtt");
    assert_eq!(t["kind"].as_str(), Some("ping"));
    assert_eq!(t["count"].as_integer(), Some(10));
    assert_eq!(t["interval"].as_str(), Some("500ms"));
    assert_eq!(t["size"].as_integer(), Some(100));
    // trace → trace.
    let t = test("trace");
    assert_eq!(t["kind"].as_str(), Some("trace"));
    assert_eq!(t["max_hops"].as_integer(), Some(20));
    assert_eq!(t["method"].as_str(), Some("icmp"));
    assert_eq!(t["wait"].as_str(), Some("2s"));
    // http → http, to the pair's destination; a jq variable cannot be
    // filled.
    let t = test("web");
    assert_eq!(t["kind"].as_str(), Some("http"));
    assert_eq!(t["url"].as_str(), Some("https://{{dest}}/"));
    assert_eq!(t["timeout"].as_str(), Some("5s"));
    assert!(c["tests"].get("jq").is_none());

    // Groups: the disabled address is left out of the mesh; the disjoint
    // group keeps its direction.
    let core: Vec<&str> = c["groups"]["core"]["addresses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(core, ["site-a", "site-b", "site-c"]);
    assert_eq!(c["groups"]["edge"]["type"].as_str(), Some("disjoint"));
    assert_eq!(c["groups"]["edge"]["unidirectional"].as_bool(), Some(true));
    assert!(c["groups"].get("by-class").is_none());
    assert_eq!(c["addresses"]["router"]["no_agent"].as_bool(), Some(true));
    assert_eq!(
        c["addresses"]["site-a"]["labels"]["v6"].as_str(),
        Some("2001:db8::a")
    );

    // Schedules: repeat, slip and spread carried; a relative until is not.
    assert_eq!(c["schedules"]["every-4h"]["slip"].as_str(), Some("PT4H"));
    assert_eq!(c["schedules"]["every-4h"]["sliprand"].as_bool(), Some(true));
    assert_eq!(
        c["schedules"]["once-a-day"]["start"].as_str(),
        Some("2026-12-01T00:00:00Z")
    );
    assert!(c["schedules"]["once-a-day"].get("until").is_none());
    assert_eq!(c["schedules"]["latencybg"]["repeat"].as_str(), Some("P1D"));

    // Tasks: the seven that can run, and none of the others.
    let mut tasks: Vec<&String> = c["tasks"].as_table().unwrap().keys().collect();
    tasks.sort();
    assert_eq!(
        tasks,
        [
            "core-latency",
            "core-latencybg",
            "core-rtt",
            "core-throughput",
            "core-trace",
            "core-web",
            "edge-udp"
        ]
    );
    assert_eq!(
        c["tasks"]["core-latencybg"]["schedule"].as_str(),
        Some("latencybg")
    );
    assert_eq!(
        c["tasks"]["core-latency"]["scheduled_by"].as_str(),
        Some("destination")
    );

    // pScheduler's http archiver is carried over as a pscheduler archive.
    assert_eq!(c["archives"]["central"]["kind"].as_str(), Some("pscheduler"));
    assert_eq!(
        c["archives"]["central"]["url"].as_str(),
        Some("https://archive.example.net/logstash")
    );
    assert!(!err.contains("archives"), "{err}");

    // Every skipped thing has its line, on standard error and in the file.
    let text = std::fs::read_to_string(&path).unwrap();
    for needle in [
        "addresses.old: disabled (or its host is); skipped",
        "addresses.*.lead-bind-address: not carried over (1 addresses)",
        "groups.by-class.addresses[0]: address class 'east-hosts': no class named 'east-hosts'; it selects nothing",
        "tests.jq: spec.dest",
        "tests.throughput: spec fields not carried over: omit",
        "tests.rtt: spec fields not carried over: ttl",
        "schedules.once-a-day.until: \"@PT30D\" is not an RFC 3339 time",
        "tasks.*.reference: not carried over (1 tasks)",
        "tasks.core-jq: its test 'jq' was not carried over; skipped",
        "tasks.class-trace: makes no pair goodput can run; skipped",
        "tasks.one-shot: no schedule (pScheduler would run it once); skipped",
        "tasks.core-latencybg: latencybg streams without a schedule",
    ] {
        assert!(err.contains(needle), "no note \"{needle}\" in:\n{err}");
        assert!(text.contains(needle), "no comment \"{needle}\" in:\n{text}");
    }
    assert!(err.contains("imported 7 tasks"), "{err}");
    // What is carried over now is not noted as lost: latencybg's flip is
    // its direction, and core-rtt's tool (ping) is the kind it runs as.
    assert!(!err.contains("tests.latencybg: spec fields"), "{err}");
    assert!(!err.contains("tasks.core-rtt.tools"), "{err}");
    assert!(!err.to_lowercase().contains("stamp"), "{err}");

    // The agent accepts the result as it is: site-a runs its share
    // (with the mesh's token: its pairs are with other agents).
    let token = tmp("psconfig", "token");
    std::fs::write(&token, "psconfig-test-token-0123456789\n").unwrap();
    let (code, out, err) = run(&[
        "agent",
        "--config",
        path.to_str().unwrap(),
        "--check-config",
        "--as",
        "site-a",
        "--token-file",
        token.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("valid:"), "{out}");
    // Two peers for each of the six core tasks, and the router for edge-udp.
    assert!(out.contains("It runs 13 task pairs:"), "{out}");
}

#[test]
fn the_kind_choices_make_iperf3_throughput_and_stamp_rtt() {
    let (c, _, _) = import("mesh.json", &["--throughput", "iperf3", "--rtt", "stamp"]);
    let t = &c["tests"]["throughput"];
    assert_eq!(t["kind"].as_str(), Some("iperf3"));
    assert_eq!(t["parallel"].as_integer(), Some(4));
    assert_eq!(t["omit"].as_str(), Some("2s"));
    assert_eq!(t["host"].as_str(), Some("{{dest}}"));
    let t = &c["tests"]["rtt"];
    assert_eq!(t["kind"].as_str(), Some("stamp"));
    assert_eq!(t["count"].as_integer(), Some(10));
}

#[test]
fn twamp_rtt_and_owamp_latency_import_to_their_own_kinds() {
    let (c, err, path) = import("latency-twamp.json", &[]);
    let test = |n: &str| c["tests"][n].clone();
    let want = |text: &str| -> toml::Value { toml::from_str(text).unwrap() };
    assert_eq!(
        test("twamp-rtt"),
        want(
            r#"kind = "twamp"
host = "{{dest}}"
count = 100
interval = "100ms"
dscp = 46"#
        )
    );
    assert_eq!(
        test("twping-rtt"),
        want(
            r#"kind = "twamp"
host = "{{dest}}"
count = 10
interval = "1s"
timeout = "2s""#
        )
    );
    assert_eq!(
        test("owping-reverse"),
        want(
            r#"kind = "owamp"
host = "{{dest}}"
direction = "to"
count = 100
interval = "100ms"
timeout = "10s""#
        )
    );
    let mut tasks: Vec<&String> = c["tasks"].as_table().unwrap().keys().collect();
    tasks.sort();
    assert_eq!(tasks, ["ps-owping", "ps-twamp", "ps-twping"]);
    assert!(err.contains("imported 3 tasks"), "{err}");
    // The length of an ICMP echo has no TWAMP counterpart: said, not lost.
    assert!(
        err.contains("tests.twping-rtt: spec fields not carried over: length"),
        "{err}"
    );
    // The agent takes it, perfSONAR hosts (no agent) and all.
    let (code, out, err) = run(&[
        "agent",
        "--config",
        path.to_str().unwrap(),
        "--check-config",
        "--as",
        "goodput-host",
    ]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("It runs 6 task pairs:"), "{out}");
}

#[test]
fn what_is_not_a_template_is_refused_with_a_reason() {
    let bad = tmp("psconfig", "bad.json");
    std::fs::write(&bad, "{\"addresses\": {}, \"groups\": {}}").unwrap();
    let (code, _, err) = run(&["agent", "import-psconfig", bad.to_str().unwrap()]);
    assert_eq!(code, Some(3));
    assert!(
        err.contains("not a pSConfig template: no 'tests' object"),
        "{err}"
    );
    std::fs::write(&bad, "addresses = 1").unwrap();
    let (code, _, err) = run(&["agent", "import-psconfig", bad.to_str().unwrap()]);
    assert_eq!(code, Some(3));
    assert!(err.contains("not JSON"), "{err}");
    let (code, _, err) = run(&["agent", "import-psconfig", "/nonexistent/template.json"]);
    assert_eq!(code, Some(3));
    assert!(err.contains("cannot read"), "{err}");
    let (code, _, _) = run(&[
        "agent",
        "import-psconfig",
        &fixture("mesh.json"),
        "--throughput",
        "udp",
    ]);
    assert_eq!(code, Some(2));
}

#[test]
fn jq_template_variables_are_evaluated_per_combination_and_bounded() {
    let started = std::time::Instant::now();
    let (c, err, _) = import("jq.json", &[]);
    // A jq expression the template runs on each address combination:
    // the end addresses become the pair's own ends, and a value every
    // combination shares is put in as it is.
    let t = &c["tests"]["throughput"];
    assert_eq!(t["kind"].as_str(), Some("tcp"));
    assert_eq!(t["hosts"][0].as_str(), Some("{{dest}}"));
    assert_eq!(t["duration"].as_str(), Some("25s"));
    assert_eq!(c["tests"]["trace"]["method"].as_str(), Some("icmp"));
    let tasks = c["tasks"].as_table().unwrap();
    assert!(tasks.contains_key("pair-throughput"), "{err}");
    // A value that differs for each pair has no place in one test
    // document; endless expressions are refused by name, quickly.
    for needle in [
        "tests.rtt: spec.interval: {% jq .addresses[0]._meta.site | ascii_downcase %} gives a different text for each combination",
        "tests.rtt: spec.timeout: {% jq until(false; .) %} is refused: `until/2` is not one of the builtins allowed",
        "tests.rtt: spec.length: {% jq [range(1e18)] %} is refused: `range/1` is not one of the builtins allowed",
    ] {
        assert!(err.contains(needle), "no note \"{needle}\" in:\n{err}");
    }
    // Left out, so the default interval.
    assert_eq!(c["tests"]["rtt"]["interval"].as_str(), Some("1s"));
    assert!(!err.contains("tests.throughput:"), "{err}");
    assert!(!err.contains("tests.trace:"), "{err}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}
