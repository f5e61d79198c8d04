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

/// Whether the kernel's clock is marked synchronised (what the host page
/// reads).
fn clock_synchronised() -> bool {
    // SAFETY: adjtimex with modes 0 only reads; the struct is zeroed.
    let mut tx: libc::timex = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::adjtimex(&mut tx) };
    rc >= 0 && rc != libc::TIME_ERROR && tx.status & libc::STA_UNSYNC == 0
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
        stamp(0.0, 8.0, 24_000.0),
    ));
    // b → c never ran: its last run did not start.
    b_runs.push(Seed::not_ok(
        "lat/b/c/nonstart",
        "lat",
        "b",
        "c",
        now - 30 * 60_000,
        RunState::NonStart,
        "limit max_running 1: tp/b/a is running",
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

    // The loss grid: a cell per direction, row → column.
    browser.go(&format!("{base}/ui/grid?metric=loss"));
    assert_eq!(browser.title(), "Loss grid · goodput");
    let dirs = browser.all("rect.dir");
    assert_eq!(dirs.len(), 6, "3 hosts: 6 directions");
    let cell =
        |from: &str, to: &str| browser.one(&format!("rect.dir[data-from=\"{from}\"][data-to=\"{to}\"]"));
    // Every direction once, with one colour: a → b is measured by a's
    // test (forward: 0.2 %, a warning) and by b's (its replies: 8 %,
    // critical); both ends' halves used to be drawn apart, in two cells
    // of two colours.
    let ends = browser.script(
        "return Array.from(document.querySelectorAll('rect.dir')).map(r => r.dataset.from + '>' + r.dataset.to)",
    );
    let mut ends: Vec<String> = ends
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap().to_owned())
        .collect();
    ends.sort();
    assert_eq!(ends, ["a>b", "a>c", "b>a", "b>c", "c>a", "c>b"]);
    let expect = [
        ("a", "b", "critical", "#D55E00", "8 %"),
        ("b", "c", "no_data", "#BBBBBB", "not started"),
        ("b", "a", "ok", "#009E73", "0 %"),
        ("a", "c", "ok", "#009E73", "0 %"),
        ("c", "a", "ok", "#009E73", "0 %"),
        ("c", "b", "no_data", "#BBBBBB", "not started"),
    ];
    for (s, d, status, fill, value) in expect {
        let el = cell(s, d);
        assert_eq!(
            browser.attr(&el, "data-status").as_deref(),
            Some(status),
            "{s}>{d}"
        );
        assert_eq!(browser.attr(&el, "fill").as_deref(), Some(fill), "{s}>{d}");
        // The latest value with its unit, in the cell itself.
        let text = browser.script(&format!(
            "return document.querySelector('rect.dir[data-from=\"{s}\"][data-to=\"{d}\"]').parentNode.querySelector('text.value').textContent"
        ));
        assert_eq!(text.as_str(), Some(value), "{s}>{d}");
    }
    // The tooltip carries both measurements of the direction, their
    // values and times.
    let tip = |from: &str, to: &str| {
        browser
            .script(&format!(
                "return document.querySelector('rect.dir[data-from=\"{from}\"][data-to=\"{to}\"] title').textContent"
            ))
            .as_str()
            .unwrap()
            .to_owned()
    };
    let t = tip("a", "b");
    assert!(
        t.starts_with("a → b: critical")
            && t.contains("lat (stamp) run by a: warning, last 0.200% at ")
            && t.contains("lat (stamp) run by b: critical, last 8.000% at "),
        "{t}"
    );
    // A pair whose last run did not start says why, not "no result".
    let t = tip("b", "c");
    assert!(
        t.contains("not started (") && t.contains("limit max_running 1"),
        "{t}"
    );
    let rules = browser.text(&browser.one("#rules"));
    assert!(
        rules.contains(
            "loss: mean of loss over 30m; warning when loss is above 0 %, critical when at or above 1 %"
        ),
        "{rules}"
    );
    assert_eq!(browser.all("#legend li").len(), 9);
    let scale = browser.text(&browser.one("#scale"));
    assert!(
        scale.contains("loss below 0.1 % is good, below 2 % fair, 2 % and more poor"),
        "{scale}"
    );
    browser.screenshot(&shots().join("grid-loss.png"));

    // Jitter has no rule: its cells are coloured by their values.
    browser.go(&format!("{base}/ui/grid?metric=jitter"));
    let el = cell("a", "b");
    assert_eq!(browser.attr(&el, "data-status").as_deref(), Some("ok"));
    assert_eq!(browser.attr(&el, "data-level").as_deref(), Some("good"));
    assert_eq!(browser.attr(&el, "fill").as_deref(), Some("#009E73"));
    let el = cell("b", "a");
    assert_eq!(browser.attr(&el, "data-level").as_deref(), Some("poor"));
    assert_eq!(browser.attr(&el, "fill").as_deref(), Some("#CC79A7"));
    let t = tip("b", "a");
    assert!(t.contains("latest 12 ms at "), "{t}");
    // The whole week of a → c's delay has no rule for jitter either.
    assert_eq!(
        browser.attr(&cell("a", "c"), "data-level").as_deref(),
        Some("good")
    );

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
    let el = cell("a", "b");
    assert_eq!(browser.attr(&el, "data-status").as_deref(), Some("warning"));
    let t = tip("a", "b");
    assert!(t.contains("latest 300 Mbit/s at "), "{t}");
    browser.screenshot(&shots().join("grid-throughput.png"));

    // A click on a cell opens the pair.
    browser.click(&cell("a", "b"));
    assert!(
        browser.url().ends_with("/ui/pair?source=a&dest=b"),
        "{}",
        browser.url()
    );
    let sections = browser.all("main > section.measurement");
    assert_eq!(sections.len(), 2, "tp and lat a → b");
    // And b's measurements toward a, asked of b's agent.
    assert_eq!(
        browser
            .all("div.remote[data-agent=\"b\"] > section.measurement")
            .len(),
        2
    );
    // The latest figures, with their units, above the charts.
    let latest =
        |task: &str| browser.text(&browser.one(&format!("main > section[data-task=\"{task}\"] p.latest")));
    let tp = latest("tp");
    assert!(
        tp.starts_with("Latest (10 min ago, ") && tp.contains("300 Mbit/s throughput a → b"),
        "{tp}"
    );
    let lat = latest("lat");
    assert!(
        lat.starts_with("Latest (5 min ago, ")
            && lat.contains("0.2 % loss a → b")
            && lat.contains("0 % loss b → a")
            && lat.contains("410 µs round-trip delay")
            && lat.contains("205 µs jitter"),
        "{lat}"
    );
    // No axis label is cut off at the chart's right edge.
    let clipped = browser.script(
        "return Array.from(document.querySelectorAll('svg.chart')).filter(svg => { \
           const box = svg.getBoundingClientRect(); \
           const shown = getComputedStyle(svg).overflow === 'visible'; \
           return Array.from(svg.querySelectorAll('text')).some(t => { \
             const r = t.getBoundingClientRect(); \
             return r.right > (shown ? window.innerWidth : box.right + 0.5); }); }).length",
    );
    assert_eq!(clipped.as_u64(), Some(0), "charts with a label cut off");
    let charts = browser.all("main > section svg.chart");
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
        "return document.querySelectorAll('main > section[data-task=\"lat\"] svg.chart')[0].querySelectorAll('circle.point').length",
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
    browser.click(&browser.one("main > section[data-task=\"tp\"] svg.chart a circle.point"));
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

    // A year draws the same charts, over the week there is: from a
    // little before the first run, not a year with a week at its end.
    browser.go(&format!("{base}/ui/pair?source=a&dest=b&range=1y"));
    assert_eq!(browser.all("main > section svg.chart").len(), 4);
    let span = browser.text(&browser.one("main > p:nth-of-type(2)"));
    assert!(span.contains("(since the first run in the range)"), "{span}");
    let first = goodput_core::time::ms_rfc3339(now - 8 * 86_400_000);
    let shown = span.get(..10).unwrap_or("").to_owned();
    assert!(
        shown.as_str() >= &first[..10],
        "the range starts {shown}, before {}: {span}",
        &first[..10]
    );
    // The hour and six hours, for a young mesh or a fresh change.
    for range in ["1h", "6h"] {
        browser.click(&browser.one(&format!(".ranges a[href$='range={range}']")));
        assert!(
            browser.url().ends_with(&format!("range={range}")),
            "{}",
            browser.url()
        );
        assert_eq!(browser.all("main > section svg.chart").len(), 4, "{range}");
    }
    let points = browser.script(
        "return document.querySelectorAll('main > section[data-task=\"lat\"] svg.chart')[0].querySelectorAll('circle.point').length",
    );
    // The last 6 hours: the hourly runs of 1 to 5 hours ago (that of 6
    // hours ago is just out) and the one of five minutes ago, a median
    // and a p95 each.
    assert_eq!(points.as_u64(), Some(2 * 6), "6h points");

    // b's row stays on this agent, which asks b's for b's measurements
    // (the browser may not reach b's agent).
    browser.go(&format!("{base}/ui/grid?metric=loss"));
    browser.click(&cell("b", "a"));
    assert!(
        browser
            .url()
            .starts_with(&format!("{base}/ui/pair?source=b&dest=a")),
        "{}",
        browser.url()
    );
    assert_eq!(browser.all("section.measurement").len(), 4, "a's two and b's two");
    assert_eq!(
        browser
            .all("div.remote[data-agent=\"b\"] section.measurement")
            .len(),
        2,
        "b's tp and lat"
    );
    let lat = browser.text(&browser.one("div.remote section[data-task=\"lat\"] p.latest"));
    assert!(
        lat.contains("8 % loss a → b") && lat.contains("24 ms round-trip delay"),
        "{lat}"
    );
    // Its points lead to its runs, asked of b's agent too.
    browser.click(&browser.one("div.remote section[data-task=\"tp\"] svg.chart a circle.point"));
    assert!(
        browser.url().starts_with(&format!("{base}/ui/runs?via=b&")),
        "{}",
        browser.url()
    );
    assert!(browser.all("table.runs tr").len() >= 2, "a header and b's run");

    // The host page and the alerts.
    browser.go(&format!("{base}/ui/host"));
    let health = browser.text(&browser.one("#health"));
    for word in ["clock", "archive", "queues", "alert deliveries", "configuration"] {
        assert!(health.contains(word), "{word}: {health}");
    }
    assert!(browser.all("#timeline").len() == 1);
    // Readable: words, not JSON; the clock's error in a sensible unit,
    // and what an unsynchronised clock means.
    assert!(
        !health.contains('{') && !health.contains('[') && !health.contains('"'),
        "{health}"
    );
    let clock = browser.text(&browser.one("#health tr:nth-child(4) td"));
    let synced = clock_synchronised();
    if synced {
        assert!(clock.starts_with("synchronised: estimated error "), "{clock}");
    } else {
        assert!(
            clock.contains(" — the clock is not synchronised; one-way delays are not exact until chrony or ntpd synchronises it"),
            "{clock}"
        );
    }
    assert!(!clock.contains("000 µs"), "{clock}");
    // The schedule's last time label is not cut off either.
    let cut = browser.script(
        "const svg = document.getElementById('timeline'); const box = svg.getBoundingClientRect(); \
         return Array.from(svg.querySelectorAll('text')).filter(t => t.getBoundingClientRect().right > box.right + 0.5).length",
    );
    assert_eq!(cut.as_u64(), Some(0), "timeline labels cut off");
    browser.screenshot(&shots().join("host.png"));
    browser.go(&format!("{base}/ui/alerts"));
    let alerts = browser.all("tr.alert");
    assert_eq!(alerts.len(), 2, "a's two alerts: loss a → b, throughput a → b");
    // Each alert names its task.
    let tasks: Vec<String> = browser
        .all("tr.alert td.task")
        .iter()
        .map(|c| browser.text(c))
        .collect();
    assert!(
        tasks.contains(&"lat".to_owned()) && tasks.contains(&"tp".to_owned()),
        "{tasks:?}"
    );
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
