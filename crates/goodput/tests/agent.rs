//! `goodput agent --check-config`: the mesh configuration read, checked and
//! turned into this host's tasks; its schema committed and drift-tested.

mod common;

use common::{assert_schema, run, tmp};

fn example() -> String {
    format!("{}/../../packaging/mesh.toml", env!("CARGO_MANIFEST_DIR"))
}

/// A token file, as the agent reads it: with one, --check-config finds
/// nothing wrong with a host that has pairs with other agents.
fn token() -> String {
    let t = tmp("agent", "token");
    std::fs::write(&t, "check-config-token-0123456789\n").unwrap();
    t.to_str().unwrap().to_owned()
}

#[test]
fn check_config_lists_this_hosts_tasks_and_who_tests_to_it() {
    let token = token();
    let (code, out, err) = run(&[
        "agent",
        "--config",
        &example(),
        "--check-config",
        "--as",
        "10.0.0.1",
        "--token-file",
        &token,
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains("valid: 4 addresses, 2 groups, 2 tests, 3 schedules, 4 tasks"),
        "{out}"
    );
    assert!(
        out.contains("This host is alpha (10.0.0.1) (from --as)."),
        "{out}"
    );
    // Two peers × three core tasks, and the router.
    assert!(out.contains("It runs 7 task pairs:"), "{out}");
    let row = |task: &str, with: &str| {
        out.lines()
            .any(|l| l.trim_start().starts_with(task) && l.contains(with))
    };
    assert!(
        row("core-throughput  tcp    exclusive", "beta (10.0.0.2, agent)"),
        "{out}"
    );
    assert!(
        row("core-throughput  tcp    exclusive", "every 6 h, slip 1 h, spread"),
        "{out}"
    );
    assert!(
        row("core-latency-v6  stamp  background", "gamma (10.0.0.3, agent)"),
        "{out}"
    );
    assert!(
        row("router-latency", "router (10.0.0.254, no agent: no negotiation)"),
        "{out}"
    );
    assert!(
        out.contains("Others test to it: 6 task pairs from beta, gamma."),
        "{out}"
    );

    // The router runs no agent: it runs nothing, others test to it.
    let (code, out, _) = run(&[
        "agent",
        "--config",
        &example(),
        "--check-config",
        "--as",
        "router",
    ]);
    assert_eq!(code, Some(0));
    assert!(out.contains("It runs 0 task pairs:"), "{out}");
    assert!(
        out.contains("Others test to it: 3 task pairs from alpha, beta, gamma."),
        "{out}"
    );

    // A host that is none of them says so, and fails the check.
    let (code, out, err) = run(&[
        "agent",
        "--config",
        &example(),
        "--check-config",
        "--as",
        "192.0.2.99",
        "--token-file",
        &token,
    ]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("goodput: problem: this host is none of the mesh's 4 addresses"),
        "{err}"
    );
    assert!(
        out.contains("This host is none of the configured addresses"),
        "{out}"
    );
}

#[test]
fn a_wrong_configuration_names_the_place_and_exits_2() {
    let text = std::fs::read_to_string(example()).unwrap();
    let cases = [
        (
            r#"addresses = ["alpha", "beta", "gamma"]"#,
            r#"addresses = ["alpha", "beta", "gama"]"#,
            "groups.core: no address named 'gama'",
        ),
        (
            r#"repeat = "PT6H""#,
            r#"repeat = "six hours""#,
            "schedules.six-hourly.repeat: 'six hours' is not a duration",
        ),
        (
            "connections = 1",
            "conections = 1",
            "tests.throughput.tcp.conections: unknown field, did you mean connections?",
        ),
        (
            "[groups.core]",
            "[groups.core]\nsize = 3",
            "groups.core: unknown field",
        ),
    ];
    for (i, (from, to, says)) in cases.iter().enumerate() {
        assert!(text.contains(from), "{from}");
        let bad = tmp("agent", &format!("bad{i}.toml"));
        std::fs::write(&bad, text.replacen(from, to, 1)).unwrap();
        let (code, out, err) = run(&["agent", "--config", bad.to_str().unwrap(), "--check-config"]);
        assert_eq!(code, Some(2), "{out}{err}");
        assert!(err.contains(says), "{err} lacks {says}");
        assert_eq!(err.lines().count(), 1, "one line: {err}");
    }
    // The daemon refuses to start on a wrong configuration, saying the same.
    let bad = tmp("agent", "bad0.toml");
    let archive = tmp("agent", "archive.sqlite");
    let (code, _, err) = run(&[
        "agent",
        "--config",
        bad.to_str().unwrap(),
        "--archive",
        archive.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(3), "{err}");
    assert!(err.contains(cases[0].2), "{err}");
    assert!(
        !archive.exists(),
        "an archive was made for a configuration that does not load"
    );
}

#[test]
fn the_committed_openapi_document_is_current() {
    let (code, out, _) = run(&["schema", "--openapi"]);
    assert_eq!(code, Some(0));
    let committed = std::fs::read_to_string(format!(
        "{}/../../schema/agent-openapi-v1.json",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    if let Some((i, (a, b))) = out
        .lines()
        .zip(committed.lines())
        .enumerate()
        .find(|(_, (a, b))| a != b)
    {
        panic!(
            "schema/agent-openapi-v1.json is stale at line {}: {b:?}, now {a:?}; regenerate it with \
             `goodput schema --openapi > schema/agent-openapi-v1.json`",
            i + 1
        );
    }
    assert_eq!(
        out.lines().count(),
        committed.lines().count(),
        "schema/agent-openapi-v1.json is stale"
    );
    let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["openapi"], "3.1.0");
    // Every schema a path refers to is in the document.
    let text = out.as_str();
    let mut from = 0;
    while let Some(i) = text[from..].find("#/components/schemas/") {
        let start = from + i + "#/components/schemas/".len();
        let end = start + text[start..].find('"').unwrap();
        let name = &text[start..end];
        assert!(
            doc["components"]["schemas"][name].is_object(),
            "{name} is referred to but not defined"
        );
        from = end;
    }
}

#[test]
fn the_committed_mesh_schema_is_current_and_holds_a_configuration() {
    let (code, out, _) = run(&["schema", "--mesh"]);
    assert_eq!(code, Some(0));
    let committed = std::fs::read_to_string(format!(
        "{}/../../schema/mesh-v1.json",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    assert_eq!(
        out, committed,
        "schema/mesh-v1.json is stale: regenerate it with `goodput schema --mesh > schema/mesh-v1.json`"
    );
    let config = serde_json::json!({
        "addresses": {
            "a": {"address": "192.0.2.1"},
            "b": {"address": "192.0.2.2", "tags": ["lab"]},
        },
        "groups": {"pair": {"type": "mesh", "addresses": ["a", "b"]}},
        "tests": {"t": {"kind": "tcp", "hosts": ["{{dest}}"], "duration": "10s"}},
        "schedules": {"hourly": {"repeat": "PT1H", "slip": "PT10M", "sliprand": true}},
        "tasks": {"x": {"group": "pair", "test": "t", "schedule": "hourly"}},
    });
    assert_schema("mesh-v1.json", &config);
    let file = tmp("agent", "mesh.json");
    std::fs::write(&file, config.to_string()).unwrap();
    let (code, out, err) = run(&[
        "agent",
        "--config",
        file.to_str().unwrap(),
        "--check-config",
        "--as",
        "a",
        "--token-file",
        &token(),
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("It runs 1 task pairs:"), "{out}");
    // The schema refuses what the agent refuses.
    let validator = jsonschema::validator_for(&serde_json::from_str(&committed).unwrap()).unwrap();
    let mut bad = config.clone();
    bad["groups"]["pair"]["size"] = serde_json::json!(2);
    assert!(!validator.is_valid(&bad), "an unknown field passes the schema");
}
