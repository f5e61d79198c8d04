//! ndt7 in the agent: one agent on loopback whose beacon serves ndt7 and
//! the /speedtest page. Headless chromium opens the page and runs a test
//! from the browser: it completes, shows its figures, and both subtests
//! are runs of kind ndt7 in the archive with the browser's address. The
//! same agent's mesh has an ndt7 task to a host without an agent (a
//! `goodput server --ndt7` on another loopback address): it runs on its
//! schedule and is archived with its figures.

mod common;

use common::agents::{get_json, http, Agent, Ports};
use common::webdriver::Browser;
use common::*;
use std::time::{Duration, Instant};

fn config(api: u16, dest_ndt7: u16) -> String {
    format!(
        r#"[agent]
api_port = {api}

[addresses.a]
address = "127.0.0.7"
[addresses.far]
address = "127.0.0.8"
no_agent = true

[groups.all]
type = "mesh"
addresses = ["a", "far"]

[tests.speed]
kind = "ndt7"
url = "ws://{{{{dest}}}}:{dest_ndt7}"

[schedules.often]
repeat = "PT30S"

[tasks.speed]
group = "all"
test = "speed"
schedule = "often"
"#
    )
}

/// The ndt7 runs, each read whole (the list leaves the result out).
fn ndt7_runs(ip: &str, api: u16) -> Vec<serde_json::Value> {
    get_json(ip, api, "/api/v1/runs?limit=1000")
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["kind"] == "ndt7")
        .map(|r| get_json(ip, api, &format!("/api/v1/runs/{}", r["id"].as_str().unwrap())))
        .collect()
}

#[test]
fn a_browser_runs_the_speed_test_page_and_the_mesh_runs_its_ndt7_task() {
    let Some(browser) = Browser::start("ndt7-agent") else {
        return;
    };
    // The mesh task's destination: a plain goodput server with ndt7,
    // subtests of 2 s to keep the test short.
    let far_port = free_tcp_port();
    let mut far = goodput();
    far.args([
        "server",
        "--listen",
        "127.0.0.8",
        "-p",
        &free_tcp_port().to_string(),
        "--no-udp",
    ])
    .args([
        "--ndt7",
        "--ndt7-port",
        &far_port.to_string(),
        "--ndt7-length",
        "2s",
    ]);
    let _far = Reaped::spawn(far);

    let ports = Ports::pick();
    let page_port = free_tcp_port();
    let path = tmp("ndt7-agent", "mesh.toml");
    std::fs::write(&path, config(ports.api, far_port)).unwrap();
    let agent = Agent::start(
        "ndt7-agent",
        "a",
        "127.0.0.7",
        &path,
        ports,
        &["--ndt7", "--ndt7-port", &page_port.to_string()],
    );

    browser.go(&format!("http://127.0.0.7:{}/speedtest", ports.api));
    assert_eq!(browser.title(), "goodput speed test");
    browser.click(&browser.one("#start"));
    // Ten seconds each way, and the closes.
    let deadline = Instant::now() + Duration::from_secs(40);
    let state = loop {
        let s = browser.script("return document.getElementById('state').dataset.state");
        let s = s.as_str().unwrap_or("").to_owned();
        if s == "done" || s == "failed" || Instant::now() > deadline {
            break s;
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    let text = browser.script("return document.body.innerText");
    assert_eq!(state, "done", "{text}\n{}", agent.log_text());
    for row in ["download", "upload"] {
        let rate = browser.script(&format!("return document.getElementById('{row}').dataset.rate"));
        let rate: f64 = rate.as_str().unwrap_or("0").parse().unwrap();
        assert!(rate > 1e6, "{row} rate shown: {rate} ({text})");
        let rtt = browser.script(&format!(
            "return document.querySelector('#{row} .rtt').textContent"
        ));
        assert!(
            rtt.as_str().unwrap().ends_with(" ms)"),
            "{row} round trip shown: {rtt}"
        );
    }
    let console = browser.console();
    assert!(
        console.iter().all(|(level, _)| level != "SEVERE"),
        "no errors in the page: {console:?}"
    );

    // Both subtests are runs, from the browser's address to the agent,
    // and the mesh's task has run to the other host.
    let deadline = Instant::now() + Duration::from_secs(30);
    let (page, mesh) = loop {
        let runs = ndt7_runs("127.0.0.7", ports.api);
        let page: Vec<_> = runs
            .iter()
            .filter(|r| r["task"] == "speedtest")
            .cloned()
            .collect();
        let mesh: Vec<_> = runs
            .iter()
            .filter(|r| r["task"] == "speed" && r["state"] == "finished")
            .cloned()
            .collect();
        if (page.len() >= 2 && !mesh.is_empty()) || Instant::now() > deadline {
            break (page, mesh);
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    assert_eq!(page.len(), 2, "{page:#?}\n{}", agent.log_text());
    for r in &page {
        assert_eq!(r["state"], "finished", "{r:#}");
        // The browser reached 127.0.0.7 from loopback's first address.
        assert_eq!(r["source"], "127.0.0.1", "the browser's address: {r:#}");
        assert_eq!(r["dest"], "a");
        let d = &r["result"]["ndt7"];
        assert!(
            d["client_address"].as_str().unwrap().starts_with("127.0.0.1:"),
            "{d}"
        );
    }
    let down = page
        .iter()
        .find(|r| r["result"]["ndt7"]["download"].is_object())
        .unwrap();
    let up = page
        .iter()
        .find(|r| r["result"]["ndt7"]["upload"].is_object())
        .unwrap();
    assert!(
        down["figures"]["throughput_down_bps"].as_f64().unwrap() > 1e6,
        "{down:#}"
    );
    assert!(
        up["figures"]["throughput_up_bps"].as_f64().unwrap() > 1e6,
        "{up:#}"
    );
    assert!(
        down["figures"]["delay_min_us"].as_f64().unwrap() > 0.0,
        "{down:#}"
    );

    assert!(!mesh.is_empty(), "the mesh's ndt7 task ran: {}", agent.log_text());
    let m = &mesh[0];
    assert_eq!(
        (m["source"].as_str(), m["dest"].as_str()),
        (Some("a"), Some("far"))
    );
    assert!(
        m["figures"]["throughput_down_bps"].as_f64().unwrap() > 1e6,
        "{m:#}"
    );
    assert!(m["figures"]["throughput_up_bps"].as_f64().unwrap() > 1e6, "{m:#}");

    // The pair page charts the task's throughput from those runs.
    let (status, page) = http(
        "127.0.0.7",
        ports.api,
        "GET",
        "/ui/pair?source=a&dest=far",
        None,
        "",
    );
    assert_eq!(status, 200, "{page}");
    assert!(page.contains("ndt7") && page.contains("Throughput"), "{page}");
    assert!(page.contains("a → far"), "the pair's series: {page}");
}
