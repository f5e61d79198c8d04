//! Soft-failure alerts end to end on loopback: an agent whose archive the
//! test seeds evaluates its rules (every second, a new state held for two
//! evaluations), opens exactly the alerts the figures call for, sends them
//! to a real Alertmanager (Debian's `prometheus-alertmanager`) and to a
//! webhook that refuses its first POSTs (so the agent retries), shows them
//! on the grid and its pages; after a restart with good figures the
//! alerts end and Alertmanager lets them go; a maintenance window turns
//! the pair's cells to maintenance.

mod common;

use common::agents::{get_json, http, seeded_pair, Agent, Ports};
use common::alerting::{Alertmanager, Hook};
use common::seed::{now_ms, seed, stamp, tcp, Seed};
use common::wait_equal;
use std::time::Duration;

fn config_text(api: u16, am: &str, hook: &str, extra: &str) -> String {
    seeded_pair(api, "127.0.0.7", "127.0.0.8", false)
        + &format!(
            r#"
[alerts]
every = "1s"
hold = 2

[alerts.rules.loss]
metric = "loss"
window = "1h"
statistic = "last"
warning = "~:0"
critical = "@1:"

[[alerts.send_to]]
alertmanager = "{am}"

[[alerts.send_to]]
webhook = "{hook}"
{extra}"#
        )
}

/// The grid's half-cells of a metric: (source>dest, direction, status).
fn grid(ports: Ports, metric: &str) -> Vec<(String, String, String)> {
    let g = get_json("127.0.0.7", ports.api, &format!("/api/v1/grid?metric={metric}"));
    let mut v: Vec<_> = g["cells"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                format!(
                    "{}>{}",
                    c["source"].as_str().unwrap(),
                    c["dest"].as_str().unwrap()
                ),
                c["direction"].as_str().unwrap().to_owned(),
                c["status"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    v.sort();
    v
}

fn s(a: &str, b: &str, c: &str) -> (String, String, String) {
    (a.into(), b.into(), c.into())
}

#[test]
fn alerts_open_reach_alertmanager_and_a_webhook_and_end_after_the_hold() {
    let Some(am) = Alertmanager::start("alerts", "127.0.0.1") else {
        return;
    };
    let hook = Hook::start("127.0.0.1", 2);
    let ports = Ports::pick();
    let text = config_text(ports.api, &am.url, &hook.url, "");
    let config = common::tmp("alerts", "mesh.toml");
    std::fs::write(&config, &text).unwrap();
    let archive = common::tmp("alerts", "a.sqlite");
    let now = now_ms();
    // Throughput: a week of 900 Mbit/s (five runs: a baseline), then 100
    // (below 30% of the pair's median: critical). Loss: 0.5% on the way there (warning),
    // 2% on the way back (critical). Delay steady: no alert.
    let ab = |id: &str, task: &'static str, at: u64, f| Seed::ok(id, task, "a", "b", at, f);
    let mut runs = vec![
        ab("tp-0", "tp", now - 6 * 86_400_000, tcp(895.0)),
        ab("tp-1", "tp", now - 5 * 86_400_000, tcp(900.0)),
        ab("tp-2", "tp", now - 3 * 86_400_000, tcp(910.0)),
        ab("tp-3", "tp", now - 86_400_000, tcp(890.0)),
        ab("tp-4", "tp", now - 60_000, tcp(100.0)),
        ab("lat-1", "lat", now - 20 * 60_000, stamp(0.0, 0.0, 400.0)),
        ab("lat-2", "lat", now - 60_000, stamp(0.5, 2.0, 400.0)),
    ];
    seed(&archive, &text, &runs);
    let started = now_ms();
    let mut agent = Agent::start("alerts", "a", "127.0.0.7", &config, ports, &[]);

    let want = vec![
        (
            "goodput_loss".to_string(),
            "a".to_string(),
            "b".to_string(),
            "warning".to_string(),
        ),
        ("goodput_loss".into(), "b".into(), "a".into(), "critical".into()),
        (
            "goodput_throughput".into(),
            "a".into(),
            "b".into(),
            "critical".into(),
        ),
    ];
    wait_equal(Duration::from_secs(30), "Alertmanager's alerts", &want, || {
        am.summary()
    });
    let open = get_json("127.0.0.7", ports.api, "/api/v1/alerts");
    let open = open.as_array().unwrap();
    assert_eq!(open.len(), 3, "{open:?}");
    for a in open {
        // Two evaluations a second apart before a state is taken.
        let start = a["start_ms"].as_u64().unwrap();
        assert!(
            start >= started + 2000,
            "{a}: opened {} ms after the start",
            start - started
        );
        assert!(a["end_ms"].is_null());
    }
    let tp = open.iter().find(|a| a["metric"] == "throughput").unwrap();
    assert_eq!(tp["value"].as_f64(), Some(100e6));
    assert!(
        tp["threshold"]
            .as_str()
            .unwrap()
            .contains("baseline 895.000 Mbit/s")
            && tp["threshold"]
                .as_str()
                .unwrap()
                .contains("(critical when throughput is below 30 % of its baseline)"),
        "{tp}"
    );
    // Each alert names its task and says its thresholds in words.
    assert_eq!(tp["task"], "tp");
    assert_eq!(
        tp["thresholds_text"],
        "warning when throughput is below 70 % of its baseline, critical when below 30 % of its \
         baseline (its baseline: the median of 7d, once it has 5 runs)"
    );
    // Alertmanager holds the labels that name the pair, direction and rule.
    let held = am.alerts();
    let back = held
        .iter()
        .find(|a| a["labels"]["severity"] == "critical" && a["labels"]["alertname"] == "goodput_loss")
        .unwrap();
    assert_eq!(back["labels"]["direction"], "backward");
    assert_eq!(back["labels"]["source"], "a");
    assert_eq!(back["labels"]["rule"], "loss");
    assert_eq!(back["labels"]["task"], "lat");
    // The webhook refused twice; each start still arrived once.
    wait_equal(Duration::from_secs(30), "webhook starts", &3, || {
        hook.events().len()
    });
    let ev = hook.events();
    assert_eq!(
        ev,
        vec![
            (
                "start".to_string(),
                "loss a>b".to_string(),
                "warning".to_string(),
                "loss".to_string()
            ),
            (
                "start".into(),
                "loss b>a".into(),
                "critical".into(),
                "loss".into()
            ),
            (
                "start".into(),
                "throughput a>b".into(),
                "critical".into(),
                "throughput".into()
            ),
        ]
    );
    assert!(
        *hook.attempts.lock().unwrap() >= 5,
        "the refused POSTs were retried"
    );
    // The grid: exactly those half-cells.
    assert_eq!(
        grid(ports, "loss"),
        vec![s("a>b", "backward", "critical"), s("a>b", "forward", "warning")]
    );
    let tpg = grid(ports, "throughput");
    assert_eq!(tpg[1], s("a>b", "forward", "critical"), "{tpg:?}");
    assert_eq!(tpg[0].2, "not_run", "the test does not measure b → a: {tpg:?}");
    assert_eq!(grid(ports, "delay"), vec![s("a>b", "round_trip", "ok")]);
    // The page shows them, coloured, with the value in the tooltip.
    let (st, page) = http("127.0.0.7", ports.api, "GET", "/ui/grid?metric=loss", None, "");
    assert_eq!(st, 200);
    assert!(
        page.contains(r#"data-direction="forward" data-from="a" data-to="b" data-status="warning""#),
        "{page}"
    );
    assert!(page.contains(r#"data-direction="backward" data-from="b" data-to="a" data-status="critical""#));
    assert!(page.contains("last 0.500%"), "{page}");
    assert!(
        page.contains(
            "loss: last of loss over 1h; warning when loss is above 0 %, critical when at or above 1 %"
        ),
        "{page}"
    );

    // Good figures while the agent is down; after the restart the open
    // alerts go on from the archive and end after two good evaluations.
    agent.stop(libc::SIGTERM);
    let now = now_ms();
    runs = vec![
        ab("tp-5", "tp", now - 1000, tcp(905.0)),
        ab("lat-3", "lat", now - 1000, stamp(0.0, 0.0, 400.0)),
    ];
    seed(&archive, &text, &runs);
    let mut agent = Agent::start("alerts", "a", "127.0.0.7", &config, ports, &[]);
    wait_equal(
        Duration::from_secs(30),
        "Alertmanager's alerts to resolve",
        &vec![],
        || am.summary(),
    );
    wait_equal(Duration::from_secs(30), "webhook ends", &6, || {
        hook.events().len()
    });
    assert_eq!(hook.events().iter().filter(|e| e.0 == "end").count(), 3);
    let all = get_json("127.0.0.7", ports.api, "/api/v1/alerts?state=all");
    let all = all.as_array().unwrap();
    assert_eq!(all.len(), 3, "the same three alerts, ended: {all:?}");
    assert!(all.iter().all(|a| a["end_ms"].as_u64().is_some()), "{all:?}");
    assert_eq!(
        grid(ports, "loss"),
        vec![s("a>b", "backward", "ok"), s("a>b", "forward", "ok")]
    );

    // A maintenance window over the pair: its cells say so.
    let start = goodput_core::time::ms_rfc3339(now_ms() - 60_000);
    let end = goodput_core::time::ms_rfc3339(now_ms() + 3_600_000);
    let extra = format!(
        "\n[[alerts.maintenance]]\nhosts = [\"b\"]\nstart = \"{start}\"\nend = \"{end}\"\nreason = \"fibre work\"\n"
    );
    std::fs::write(&config, config_text(ports.api, &am.url, &hook.url, &extra)).unwrap();
    agent.signal(libc::SIGHUP);
    wait_equal(
        Duration::from_secs(30),
        "maintenance",
        &vec![
            s("a>b", "backward", "maintenance"),
            s("a>b", "forward", "maintenance"),
        ],
        || grid(ports, "loss"),
    );
    let (_, page) = http("127.0.0.7", ports.api, "GET", "/ui/grid?metric=loss", None, "");
    assert!(
        page.contains("maintenance until") && page.contains("fibre work"),
        "{page}"
    );
    agent.stop(libc::SIGTERM);
}

#[test]
fn a_receiver_that_never_answers_is_given_up_counted_and_the_agent_goes_on() {
    // Nothing listens here: each POST is refused at once.
    let dead = format!("http://127.0.0.1:{}/hook", common::free_tcp_port());
    let ports = Ports::pick();
    let text = config_text(ports.api, &dead, &dead, "");
    let config = common::tmp("alerts-dead", "mesh.toml");
    std::fs::write(&config, &text).unwrap();
    let archive = common::tmp("alerts-dead", "a.sqlite");
    let now = now_ms();
    seed(
        &archive,
        &text,
        &[Seed::ok(
            "lat-1",
            "lat",
            "a",
            "b",
            now - 60_000,
            stamp(0.5, 0.0, 400.0),
        )],
    );
    let mut agent = Agent::start("alerts-dead", "a", "127.0.0.7", &config, ports, &[]);
    // Six attempts, 1 + 2 + 4 + 8 + 16 s apart (and a quarter more at
    // most): the webhook's start event is given up within a minute. The
    // Alertmanager batches (resent every second) are given up in turn.
    wait_equal(Duration::from_secs(75), "a delivery given up", &true, || {
        let (_, page) = http("127.0.0.7", ports.api, "GET", "/ui/host", None, "");
        page.contains(" given up, ") && !page.contains(" 0 given up, ")
    });
    // The agent still evaluates and answers.
    let before = get_json("127.0.0.7", ports.api, "/api/v1/grid?metric=loss")["agents"][0]["evaluated_ms"]
        .as_u64()
        .unwrap();
    wait_equal(Duration::from_secs(10), "another evaluation", &true, || {
        get_json("127.0.0.7", ports.api, "/api/v1/grid?metric=loss")["agents"][0]["evaluated_ms"]
            .as_u64()
            .unwrap()
            > before
    });
    assert!(
        agent.log_text().contains("alerts: gave up sending to"),
        "{}",
        agent.log_text()
    );
    agent.stop(libc::SIGTERM);
}
