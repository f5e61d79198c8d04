//! One-way delay from clocks that were not synchronised is never alerted
//! on as if it were exact. An agent's archive is seeded with OWAMP runs
//! to a perfSONAR host (no agent) whose figures come from real result
//! documents through the archive's own `figures_of`: the way there from
//! unsynchronised clocks, its "delay" the clocks' offset (negative), the
//! way back from synchronised clocks and slow. A rule on one-way delay
//! that any negative value breaks (`0:100ms`) must leave the way there
//! alone and raise the way back; the loss rule still sees the way there.

mod common;

use common::agents::{get_json, pair_head, Agent, Ports};
use common::seed::{now_ms, seed, Seed};
use common::wait_equal;
use goodput_core::result::{
    ClockState, Detail, OneWayDirection, OneWayStats, OwampDetail, TestKind, TestResult,
};
use std::time::Duration;

fn config_text(api: u16) -> String {
    pair_head(api, "127.0.0.7", "127.0.0.9", false)
        + r#"[tests.owd]
kind = "owamp"
host = "{{dest}}"

# Nothing runs during the test: the archive is seeded.
[schedules.later]
repeat = "1d"
start = "2099-01-01T00:00:00Z"

[tasks.owd]
group = "ab"
test = "owd"
schedule = "later"

[alerts]
every = "1s"
hold = 2

[alerts.rules.one_way_delay]
metric = "one_way_delay"
window = "1h"
statistic = "last"
warning = "0:50ms"
critical = "0:100ms"

[alerts.rules.loss]
metric = "loss"
window = "1h"
statistic = "last"
warning = "~:0"
critical = "@1:"
"#
}

fn one_way(median_us: f64, synchronized: bool) -> OneWayStats {
    OneWayStats {
        count: 180,
        min_us: median_us - 200.0,
        median_us,
        max_us: median_us + 900.0,
        jitter_us: 150.0,
        synchronized,
        error_bound_us: synchronized.then_some(60.0),
        ipdv: None,
    }
}

fn direction(sent: u64, lost: u64, delay: OneWayStats) -> OneWayDirection {
    OneWayDirection {
        sid: "7f000009e95f3a1c0000000000000001".into(),
        sender: "127.0.0.7:8760".into(),
        receiver: "127.0.0.9:8761".into(),
        sent,
        unsent: 0,
        received: sent - lost,
        lost,
        duplicates: 0,
        reordered: 0,
        reordered_percent: 0.0,
        n_reordering_percent: Vec::new(),
        delay: Some(delay),
        percentiles: None,
        hops: None,
        histogram_ns: None,
        histogram_negative_ns: None,
        first_ns: None,
        last_ns: None,
        intervals: Vec::new(),
    }
}

/// An OWAMP result: the common record of a real (STAMP) result document,
/// with an OWAMP detail of `to` and `from`.
fn owamp_result(to: OneWayDirection, from: OneWayDirection) -> TestResult {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../goodput-archive/tests/fixtures/stamp.json"
    ))
    .unwrap();
    let mut r: TestResult = serde_json::from_str(&text).unwrap();
    r.kind = TestKind::OwampClient;
    r.detail = Detail::Owamp(Box::new(OwampDetail {
        mode: "open".into(),
        padding: 0,
        packet_bytes: 14,
        interval_ns: 100_000_000,
        poisson: false,
        dscp: 0,
        timeout_ms: 2000,
        local_clock: ClockState {
            synchronized: false,
            error_us: None,
        },
        to: Some(to),
        from: Some(from),
    }));
    r
}

/// The grid's half-cells of a metric: (direction, status).
fn grid(ports: Ports, metric: &str) -> Vec<(String, String)> {
    let g = get_json("127.0.0.7", ports.api, &format!("/api/v1/grid?metric={metric}"));
    let mut v: Vec<_> = g["cells"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["direction"].as_str().unwrap().to_owned(),
                c["status"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    v.sort();
    v
}

fn s(a: &str, b: &str) -> (String, String) {
    (a.into(), b.into())
}

#[test]
fn an_unsynchronised_one_way_delay_raises_no_alert_and_loss_still_does() {
    let ports = Ports::pick();
    let text = config_text(ports.api);
    let config = common::tmp("one_way_alerts", "mesh.toml");
    std::fs::write(&config, &text).unwrap();
    let archive = common::tmp("one_way_alerts", "a.sqlite");
    let now = now_ms();
    // The way there: 3 ms "below zero" (the clocks' offset), 1 of 200
    // lost. The way back: 120 ms, synchronised, nothing lost.
    let r = owamp_result(
        direction(200, 1, one_way(-3_000.0, false)),
        direction(200, 0, one_way(120_000.0, true)),
    );
    let figures = goodput_archive::figures_of(&r);
    assert_eq!(figures.owd_synchronized, Some(false));
    assert_eq!(figures.owd_backward_median_us, Some(120_000.0));
    seed(
        &archive,
        &text,
        &[Seed::ok("owd-1", "owd", "a", "b", now - 60_000, figures)],
    );
    let mut agent = Agent::start("one_way_alerts", "a", "127.0.0.7", &config, ports, &[]);

    // The way back is past 100 ms: critical. The way there has no exact
    // one-way delay: not measured, not an alert (a negative value would
    // have been outside 0:100ms).
    wait_equal(
        Duration::from_secs(30),
        "one-way delay half-cells",
        &vec![s("backward", "critical"), s("forward", "not_run")],
        || grid(ports, "one_way_delay"),
    );
    // Loss applies whatever the clocks: 0.5% on the way there.
    wait_equal(
        Duration::from_secs(30),
        "loss half-cells",
        &vec![s("backward", "ok"), s("forward", "warning")],
        || grid(ports, "loss"),
    );
    let open = get_json("127.0.0.7", ports.api, "/api/v1/alerts");
    let mut open: Vec<(String, String, String)> = open
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                a["metric"].as_str().unwrap().to_owned(),
                a["direction"].as_str().unwrap().to_owned(),
                a["severity"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    open.sort();
    assert_eq!(
        open,
        [
            ("loss".to_owned(), "forward".to_owned(), "warning".to_owned()),
            (
                "one_way_delay".to_owned(),
                "backward".to_owned(),
                "critical".to_owned()
            ),
        ]
    );
    agent.stop(libc::SIGTERM);
}
