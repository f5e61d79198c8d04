//! The dashboard in a real headless browser (Debian's chromium through
//! chromedriver): two agents on loopback with archives the test seeds
//! (a week of throughput and delay, a failed run and a non-start, loss on
//! known directions), their grid, pair explorer, host and alerts pages.
//! The pages load without console errors, show the expected cells,
//! colours and numbers, and clicks navigate (into a pair, across ranges,
//! to the raw runs behind a point, and to the other agent's pages).
//! Screenshots of each page go to `target/screenshots/` (or
//! `$GOODPUT_SCREENSHOTS`).

mod common;

use common::agents::{get_json, Agent, Ports};
use common::seed::{now_ms, seed, stamp, tcp, Seed};
use common::webdriver::Browser;
use goodput_archive::RunState;
use std::path::PathBuf;
use std::time::{Duration, Instant};

fn config_text(api: u16) -> String {
    format!(
        r#"[agent]
api_port = {api}

[addresses.a]
address = "127.0.0.7"
[addresses.b]
address = "127.0.0.8"
[addresses.c]
address = "127.0.0.9"
no_agent = true

[groups.all]
type = "mesh"
addresses = ["a", "b", "c"]

[tests.lat]
kind = "stamp"
host = "{{{{dest}}}}"

[tests.tp]
kind = "tcp"
hosts = ["{{{{dest}}}}"]
duration = "1s"

# Nothing runs: the archives are seeded.
[schedules.later]
repeat = "6h"
start = "2099-01-01T00:00:00Z"

[tasks.lat]
group = "all"
test = "lat"
schedule = "later"

[tasks.tp]
group = "all"
test = "tp"
schedule = "later"

[alerts]
every = "1s"
hold = 1
"#
    )
}

fn shots() -> PathBuf {
    std::env::var_os("GOODPUT_SCREENSHOTS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/screenshots"))
}

/// A week of history for a pair: throughput every 6 h, delay every hour.
fn week(source: &'static str, dest: &'static str, now: u64, mbit: f64, ms: f64) -> Vec<Seed> {
    let mut v = Vec::new();
    for i in 1..=28u64 {
        let at = now - i * 6 * 3_600_000;
        let wobble = (i % 5) as f64 * 4.0;
        v.push(Seed::ok(
            format!("tp/{source}/{dest}/{at}"),
            "tp",
            source,
            dest,
            at,
            tcp(mbit - wobble),
        ));
    }
    for i in 1..=168u64 {
        let at = now - i * 3_600_000;
        let wobble = (i % 7) as f64 * 0.02;
        v.push(Seed::ok(
            format!("lat/{source}/{dest}/{at}"),
            "lat",
            source,
            dest,
            at,
            stamp(0.0, 0.0, (ms + wobble) * 1000.0),
        ));
    }
    v
}

#[test]
fn the_dashboard_shows_the_grid_a_pairs_history_and_the_host_in_a_browser() {
    let Some(browser) = Browser::start("dashboard") else {
        return;
    };
    let ports = Ports::pick();
    let text = config_text(ports.api);
    let config = common::tmp("dashboard", "mesh.toml");
    std::fs::write(&config, &text).unwrap();
    let now = now_ms();
    // a: a → b lost 0.2% on the way there in the last half hour (warning)
    // and its last throughput fell to 300 Mbit/s (below 70% of its
    // median: warning); a failed run and a non-start yesterday.
    let mut a_runs = week("a", "b", now, 940.0, 0.4);
    a_runs.extend(week("a", "c", now, 620.0, 1.2));
    a_runs.push(Seed::ok(
        "lat/a/b/now",
        "lat",
        "a",
        "b",
        now - 5 * 60_000,
        stamp(0.2, 0.0, 410.0),
    ));
    a_runs.push(Seed::ok(
        "tp/a/b/now",
        "tp",
        "a",
        "b",
        now - 10 * 60_000,
        tcp(300.0),
    ));
    a_runs.push(Seed::not_ok(
        "tp/a/b/failed",
        "tp",
        "a",
        "b",
        now - 22 * 3_600_000,
        RunState::Failed,
        "connect to 127.0.0.8:4444: connection refused",
    ));
    a_runs.push(Seed::not_ok(
        "tp/a/b/nonstart",
        "tp",
        "a",
        "b",
        now - 20 * 3_600_000,
        RunState::NonStart,
        "no common free slot within the slip: b is busy with tp/b/a",
    ));
    // b: b → a lost 8% of the replies, so the direction a → b: over the
    // window (the 6 h repeat interval, longer than the rule's 30 min) the
    // mean is above 1% (critical);
    // nothing measured b → c yet.
    let mut b_runs = week("b", "a", now, 930.0, 0.4);
    b_runs.push(Seed::ok(
        "lat/b/a/now",
        "lat",
        "b",
        "a",
        now - 5 * 60_000,
        stamp(0.0, 8.0, 400.0),
    ));
    seed(&common::tmp("dashboard", "a.sqlite"), &text, &a_runs);
    seed(&common::tmp("dashboard", "b.sqlite"), &text, &b_runs);
    let mut a = Agent::start("dashboard", "a", "127.0.0.7", &config, ports, &[]);
    let mut b = Agent::start("dashboard", "b", "127.0.0.8", &config, ports, &[]);
    let base = format!("http://127.0.0.7:{}", ports.api);
    // Both agents have evaluated (hold 1, every second).
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let g = get_json("127.0.0.7", ports.api, "/api/v1/grid?metric=loss");
        let ready = g["agents"]
            .as_array()
            .unwrap()
            .iter()
            .all(|x| x["evaluated_ms"].as_u64() > Some(0));
        if ready
            && g["cells"]
                .as_array()
                .unwrap()
                .iter()
                .any(|c| c["status"] == "critical")
        {
            break;
        }
        assert!(Instant::now() < deadline, "no evaluation: {g}");
        std::thread::sleep(Duration::from_millis(200));
    }

    // The loss grid.
    browser.go(&format!("{base}/ui/grid?metric=loss"));
    assert_eq!(browser.title(), "Loss grid · goodput");
    let halves = browser.all("polygon.half");
    assert_eq!(halves.len(), 12, "3 hosts: 6 cells of 2 halves");
    let half = |src: &str, dst: &str, dir: &str| {
        browser.one(&format!(
            "polygon.half[data-source=\"{src}\"][data-dest=\"{dst}\"][data-direction=\"{dir}\"]"
        ))
    };
    let expect = [
        ("a", "b", "forward", "warning", "#E69F00"),
        ("a", "b", "backward", "ok", "#009E73"),
        ("a", "c", "forward", "ok", "#009E73"),
        ("b", "a", "forward", "ok", "#009E73"),
        ("b", "a", "backward", "critical", "#D55E00"),
        ("b", "c", "forward", "no_data", "#BBBBBB"),
        ("c", "a", "forward", "not_run", "#FFFFFF"),
    ];
    for (s, d, dir, status, fill) in expect {
        let el = half(s, d, dir);
        assert_eq!(
            browser.attr(&el, "data-status").as_deref(),
            Some(status),
            "{s}>{d} {dir}"
        );
        assert_eq!(browser.attr(&el, "fill").as_deref(), Some(fill), "{s}>{d} {dir}");
    }
    // The tooltip carries the value and its time.
    let tip = browser.script(
        "return document.querySelector('polygon.half[data-source=\"b\"][data-dest=\"a\"][data-direction=\"backward\"] title').textContent",
    );
    let tip = tip.as_str().unwrap();
    assert!(
        tip.starts_with("a → b: critical") && tip.contains("last 8.000% at "),
        "{tip}"
    );
    let rules = browser.text(&browser.one("#rules"));
    assert!(
        rules.contains("loss: mean of loss over 30m; warning outside ~:0 (%); critical outside @1:"),
        "{rules}"
    );
    assert!(browser.all("#legend li").len() == 6);
    browser.screenshot(&shots().join("grid-loss.png"));

    // One-way delay has a grid of its own, linked from every page, apart
    // from the round trip's.
    let links: Vec<String> = browser
        .all("header a")
        .iter()
        .map(|a| browser.attr(a, "href").unwrap_or_default())
        .collect();
    assert!(
        links.iter().any(|h| h == "/ui/grid?metric=one_way_delay")
            && links.iter().any(|h| h == "/ui/grid?metric=delay"),
        "{links:?}"
    );
    browser.go(&format!("{base}/ui/grid?metric=one_way_delay"));
    assert_eq!(browser.title(), "One-way delay grid · goodput");

    browser.go(&format!("{base}/ui/grid?metric=throughput"));
    let el = half("a", "b", "forward");
    assert_eq!(browser.attr(&el, "data-status").as_deref(), Some("warning"));
    browser.screenshot(&shots().join("grid-throughput.png"));

    // A click on a half-cell opens the pair.
    browser.click_at(&half("a", "b", "forward"), -8, -8);
    assert!(
        browser.url().ends_with("/ui/pair?source=a&dest=b"),
        "{}",
        browser.url()
    );
    let sections = browser.all("section.measurement");
    assert_eq!(sections.len(), 2, "tp and lat a → b");
    let charts = browser.all("svg.chart");
    // Throughput, retransmits (none: not drawn), delay, loss, jitter.
    assert_eq!(charts.len(), 4, "charts");
    let text = browser.text(&browser.one("main"));
    assert!(
        text.contains("2 runs failed or did not start in this range"),
        "{text}"
    );
    let marks = browser
        .script("return Array.from(document.querySelectorAll('path.mark title')).map(t => t.textContent)");
    let marks: Vec<String> = marks
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.as_str().unwrap().to_owned())
        .collect();
    assert!(
        marks
            .iter()
            .any(|m| m.starts_with("failed ") && m.contains("connection refused")),
        "{marks:?}"
    );
    assert!(
        marks
            .iter()
            .any(|m| m.starts_with("non_start ") && m.contains("b is busy")),
        "{marks:?}"
    );
    assert!(marks.iter().any(|m| m.starts_with("loss at ")), "{marks:?}");
    browser.screenshot(&shots().join("pair-1d.png"));
    // The week: the same charts, one point per hour.
    browser.click(&browser.one(".ranges a[href$='range=1w']"));
    assert!(browser.url().ends_with("range=1w"), "{}", browser.url());
    let points = browser.script(
        "return document.querySelectorAll('section[data-task=\"lat\"] svg.chart')[0].querySelectorAll('circle.point').length",
    );
    // Median and p95 of one point per hour: 167 of the 168 hourly runs
    // (the oldest falls just before the week's first whole hour) and the
    // latest run, five minutes old, which shares its hour with the run of
    // an hour ago in the first five minutes of an hour.
    let points = points.as_u64().unwrap();
    assert!((2 * 167..=2 * 170).contains(&points), "{points} points");
    browser.screenshot(&shots().join("pair-1w.png"));
    // A point leads to the runs behind it, and a run to its record.
    // (The point, not its link: in SVG the link's box is not the point's.)
    // A week's six-hourly points are far apart (a year's overlap).
    browser.click(&browser.one("section[data-task=\"tp\"] svg.chart a circle.point"));
    assert!(
        browser.url().contains("/ui/runs?source=a&dest=b&kind=tcp"),
        "{}",
        browser.url()
    );
    let rows = browser.all("table.runs tr");
    assert!(rows.len() >= 2, "a header and a run");
    browser.click(&browser.one("table.runs a"));
    assert!(
        browser.url().contains("/api/v1/runs/tp/a/b/"),
        "{}",
        browser.url()
    );
    let body = browser.text(&browser.one("body"));
    assert!(body.contains("\"measurement_key\""), "{body}");

    // A year draws the same charts.
    browser.go(&format!("{base}/ui/pair?source=a&dest=b&range=1y"));
    assert_eq!(browser.all("svg.chart").len(), 4);

    // b's row leads to b's own agent.
    browser.go(&format!("{base}/ui/grid?metric=loss"));
    browser.click_at(&half("b", "a", "backward"), 8, 8);
    assert!(
        browser
            .url()
            .starts_with(&format!("http://127.0.0.8:{}/ui/pair?source=b&dest=a", ports.api)),
        "{}",
        browser.url()
    );
    assert_eq!(browser.all("section.measurement").len(), 2);

    // The host page and the alerts.
    browser.go(&format!("{base}/ui/host"));
    let health = browser.text(&browser.one("#health"));
    for word in ["clock", "archive", "queues", "alert deliveries", "configuration"] {
        assert!(health.contains(word), "{word}: {health}");
    }
    assert!(browser.all("#timeline").len() == 1);
    browser.screenshot(&shots().join("host.png"));
    browser.go(&format!("{base}/ui/alerts"));
    let alerts = browser.all("tr.alert");
    assert_eq!(alerts.len(), 2, "a's two alerts: loss a → b, throughput a → b");
    browser.screenshot(&shots().join("alerts.png"));

    // No page wrote to the console in error.
    let errors: Vec<(String, String)> = browser
        .console()
        .into_iter()
        .filter(|(l, _)| l == "SEVERE")
        .collect();
    assert!(errors.is_empty(), "console errors: {errors:?}");
    a.stop(libc::SIGTERM);
    b.stop(libc::SIGTERM);
}
