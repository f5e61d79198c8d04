//! An agent subscribed to a pSConfig template, as perfSONAR's pSConfig
//! agent subscribes: `--config` names a publisher's per-host URL
//! (`/pub/auto/HOST`, served here by a loopback server the test starts),
//! the template is told by its content, its includes are read, and it is
//! converted again on every reload. A change (here in an include) comes
//! into force on the reload period; a broken template, an include that
//! never answers and a template that converts to no task keep the old
//! schedule, with the reason in the log and /api/v1/health. And
//! `--check-config` warns about a task whose runs overlap themselves.

mod common;
mod psconfig_http;

use common::agents::{get_json, Agent, Ports};
use common::{run, tmp, wait_for};
use psconfig_http::{Answer, Publisher};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// The template: `a` (the agent) tests to `b` (no agent there) with the
/// tests of its include; `tasks` are the template's own tasks.
fn template(ip: &str, include: &str, tasks: Value) -> String {
    json!({
        "includes": [include],
        "addresses": {
            "a": {"address": ip},
            "b": {"address": "127.0.0.72", "no-agent": true}
        },
        "groups": {
            "ab": {"type": "disjoint", "a-addresses": [{"name": "a"}], "b-addresses": [{"name": "b"}],
                   "unidirectional": true}
        },
        "tests": {
            "rtt": {"type": "rtt", "spec": {"dest": "{% address[1] %}", "count": 2, "interval": "PT0.2S"}}
        },
        "schedules": {"hourly": {"repeat": "PT1H"}},
        "tasks": tasks
    })
    .to_string()
}

/// The include: its tests (one that the template already names, which
/// the template's keeps), and `tasks`.
fn include(tasks: Value) -> String {
    json!({
        "tests": {
            "rtt": {"type": "rtt", "spec": {"dest": "{% address[1] %}", "count": 50}},
            "trace": {"type": "trace", "spec": {"dest": "{% address[1] %}"}}
        },
        "tasks": tasks
    })
    .to_string()
}

fn tasks(a: &Agent, ports: Ports) -> Vec<String> {
    let mut t: Vec<String> = get_json(&a.ip, ports.api, "/api/v1/tasks")
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            format!(
                "{}:{}",
                t["task"].as_str().unwrap(),
                t["source"].as_str().unwrap()
            )
        })
        .collect();
    t.sort();
    t
}

fn config_error(a: &Agent, ports: Ports) -> Option<String> {
    get_json(&a.ip, ports.api, "/api/v1/health")["config_error"]
        .as_str()
        .map(str::to_owned)
}

#[test]
fn an_agent_subscribed_to_a_template_follows_it_and_keeps_its_schedule_when_it_breaks() {
    let group = "psconfig-subscribe";
    let ports = Ports::pick();
    let ip = "127.0.0.71";
    let publisher = Publisher::start();
    let inc = publisher.url("/inc/tests.json");
    let rtt = json!({"rtt-ab": {"group": "ab", "test": "rtt", "schedule": "hourly"}});
    let trace = json!({"trace-ab": {"group": "ab", "test": "trace", "schedule": "hourly"}});
    publisher.put("/pub/auto/a", Answer::Json(200, template(ip, &inc, rtt.clone())));
    publisher.put("/inc/tests.json", Answer::Json(200, include(json!({}))));
    let url = publisher.url("/pub/auto/a");
    let listen = format!("{ip}:{}", ports.api);
    let mut a = Agent::start(
        group,
        "a",
        ip,
        &url.clone().into(),
        ports,
        &["--api-listen", &listen, "--reload-every", "1s"],
    );
    assert_eq!(tasks(&a, ports), ["rtt-ab:a"]);
    assert_eq!(config_error(&a, ports), None);
    // The template's own rtt test is kept over the include's, and said.
    let log = a.log_text();
    assert!(
        log.contains("includes[0] (http://127.0.0.1:")
            && log.contains("tests.rtt not merged: an object of that name was read first"),
        "{log}"
    );

    // A task added in the include is in force on the next period.
    publisher.put("/inc/tests.json", Answer::Json(200, include(trace.clone())));
    let t0 = Instant::now();
    wait_for(Duration::from_secs(15), "the include's new task", || {
        (tasks(&a, ports) == ["rtt-ab:a", "trace-ab:a"]).then_some(())
    });
    eprintln!("the change was in force after {:?}", t0.elapsed());

    // A broken template: the old schedule stays.
    publisher.put(
        "/pub/auto/a",
        Answer::Json(200, "{\"addresses\": {\"a\": ".into()),
    );
    let e = wait_for(Duration::from_secs(15), "the broken template's error", || {
        config_error(&a, ports).filter(|e| e.contains("not valid JSON"))
    });
    assert!(
        e.contains(&format!("{url}: not valid JSON: EOF while parsing")),
        "{e}"
    );
    assert_eq!(tasks(&a, ports), ["rtt-ab:a", "trace-ab:a"]);

    // An include that never answers: refused after its 10 s, the old
    // schedule stays.
    publisher.put("/pub/auto/a", Answer::Json(200, template(ip, &inc, rtt.clone())));
    publisher.put("/inc/tests.json", Answer::Never);
    let e = wait_for(Duration::from_secs(40), "the silent include's error", || {
        config_error(&a, ports).filter(|e| e.contains("no answer"))
    });
    assert!(
        e.ends_with(&format!(
            "{url}: includes[0] ({inc}): cannot fetch {inc}: no answer within 10 s"
        )),
        "{e}"
    );
    assert_eq!(tasks(&a, ports), ["rtt-ab:a", "trace-ab:a"]);

    // A template that converts to no task (its one test has no goodput
    // kind) where the one in force has two.
    let web = json!({
        "addresses": {"a": {"address": ip}},
        "groups": {"solo": {"type": "list", "addresses": [{"name": "a"}]}},
        "tests": {"web": {"type": "idle", "spec": {"duration": "PT5S"}}},
        "schedules": {"hourly": {"repeat": "PT1H"}},
        "tasks": {"web": {"group": "solo", "test": "web", "schedule": "hourly"}}
    });
    publisher.put("/pub/auto/a", Answer::Json(200, web.to_string()));
    let e = wait_for(Duration::from_secs(15), "the emptied template's error", || {
        config_error(&a, ports).filter(|e| e.contains("no task"))
    });
    assert!(e.contains("names no task (the one in force has 2)"), "{e}");
    assert_eq!(tasks(&a, ports), ["rtt-ab:a", "trace-ab:a"]);

    // Good again: in force, the error gone.
    publisher.put("/inc/tests.json", Answer::Json(200, include(json!({}))));
    publisher.put("/pub/auto/a", Answer::Json(200, template(ip, &inc, rtt)));
    wait_for(Duration::from_secs(15), "the good template back", || {
        (config_error(&a, ports).is_none() && tasks(&a, ports) == ["rtt-ab:a"]).then_some(())
    });
    assert!(
        a.log_text()
            .contains("configuration not loaded, the previous one stays"),
        "{}",
        a.log_text()
    );
    a.stop(libc::SIGTERM);
}

#[test]
fn check_config_warns_of_a_task_whose_runs_overlap_themselves() {
    // A goodput mesh document: 600 STAMP packets 0.2 s apart on a
    // one-minute repeat.
    let mesh = tmp("psconfig-overlap", "mesh.toml");
    std::fs::write(
        &mesh,
        r#"
[addresses.a]
address = "192.0.2.1"
[addresses.b]
address = "192.0.2.2"
no_agent = true
[groups.ab]
type = "disjoint"
a = ["a"]
b = ["b"]
unidirectional = true
[tests.bg]
kind = "stamp"
host = "{{dest}}"
count = 600
interval = "200ms"
[schedules.minutely]
repeat = "PT1M"
[tasks.latency-bg]
group = "ab"
test = "bg"
schedule = "minutely"
"#,
    )
    .unwrap();
    let (code, out, err) = run(&[
        "agent",
        "--check-config",
        "--config",
        mesh.to_str().unwrap(),
        "--as",
        "a",
    ]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        err.contains(
            "goodput: warning: task latency-bg: each run lasts 2 min 2 s but the task repeats every 1 min: \
             runs would overlap themselves"
        ),
        "{err}"
    );
    // A pSConfig template, told by its content although named .toml: a
    // two-minute throughput test every minute.
    let token = tmp("psconfig-overlap", "token");
    std::fs::write(&token, common::agents::TOKEN).unwrap();
    let template = tmp("psconfig-overlap", "template.toml");
    std::fs::write(
        &template,
        json!({
            "addresses": {"a": {"address": "192.0.2.1"}, "b": {"address": "192.0.2.2"}},
            "groups": {"ab": {"type": "mesh", "addresses": [{"name": "a"}, {"name": "b"}]}},
            "tests": {"tput": {"type": "throughput", "spec": {"source": "{% address[0] %}",
                      "dest": "{% address[1] %}", "duration": "PT2M"}}},
            "schedules": {"minutely": {"repeat": "PT1M"}},
            "tasks": {"tput-ab": {"group": "ab", "test": "tput", "schedule": "minutely"}}
        })
        .to_string(),
    )
    .unwrap();
    let (code, out, err) = run(&[
        "agent",
        "--check-config",
        "--config",
        template.to_str().unwrap(),
        "--as",
        "a",
        "--token-file",
        token.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("It runs 1 task pairs:"), "{out}");
    assert!(
        err.contains("goodput: warning: task tput-ab: each run lasts 2 min") && err.contains("every 1 min"),
        "{err}"
    );
    // Fits: no warning.
    std::fs::write(
        &template,
        std::fs::read_to_string(&template)
            .unwrap()
            .replace("PT1M", "PT1H"),
    )
    .unwrap();
    let (code, _, err) = run(&[
        "agent",
        "--check-config",
        "--config",
        template.to_str().unwrap(),
        "--as",
        "a",
        "--token-file",
        token.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert!(!err.contains("overlap"), "{err}");
}
