//! `goodput dns` against Debian's unbound, started here on loopback with a
//! zone of its own (no recursion, nothing asked of the internet), over
//! UDP, TCP and DNS over TLS; dig asks the same questions beside it.

mod common;

use std::net::UdpSocket;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::peers::{dig, Unbound};
use common::{goodput, result_doc, tmp};

/// The zone every test starts from; `www`'s address is what a test
/// changes.
fn zone(www: &str) -> String {
    format!(
        "  local-zone: \"goodput.test.\" static\n\
         \x20 local-data: \"www.goodput.test. 60 IN A {www}\"\n\
         \x20 local-data: \"www.goodput.test. 60 IN AAAA 2001:db8::53\"\n\
         \x20 local-data: \"goodput.test. 60 IN MX 10 mail.goodput.test.\"\n\
         \x20 local-data: \"goodput.test. 60 IN MX 20 backup.goodput.test.\"\n\
         \x20 local-data: 'txt.goodput.test. 60 IN TXT \"v=goodput1 dns\"'\n"
    )
}

/// Runs goodput dns with `args` and a --json file; the exit code, stderr
/// and the result's `dns` detail.
fn goodput_dns(group: &str, args: &[&str]) -> (Option<i32>, String, serde_json::Value) {
    let json = tmp(group, &format!("dns-{}.json", common::now_ms()));
    let out = goodput()
        .arg("dns")
        .args(args)
        .arg("--json")
        .arg(&json)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let doc = result_doc(&json);
    (out.status.code(), stderr, doc["dns"].clone())
}

fn strings(v: &serde_json::Value) -> Vec<String> {
    let mut s: Vec<String> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap().trim_matches('"').to_owned())
        .collect();
    s.sort();
    s
}

#[test]
fn answers_read_as_dig_reads_them_over_udp_tcp_and_tls() {
    if !Unbound::available() {
        return;
    }
    let u = Unbound::start("dns-answers", &zone("192.0.2.1"));
    let ca = u.ca();
    let questions = [
        ("www.goodput.test", "A", vec!["192.0.2.1"]),
        ("www.goodput.test", "AAAA", vec!["2001:db8::53"]),
        ("txt.goodput.test", "TXT", vec!["v=goodput1 dns"]),
        (
            "goodput.test",
            "MX",
            vec!["10 mail.goodput.test.", "20 backup.goodput.test."],
        ),
    ];
    let mut side_by_side = Vec::new();
    for (name, record, want) in &questions {
        for transport in ["udp", "tcp", "tls"] {
            let server = if transport == "tls" {
                u.tls_server()
            } else {
                u.server()
            };
            let mut args = vec![
                *name,
                "-t",
                record,
                "--server",
                &server,
                "--transport",
                transport,
                "-c",
                "3",
            ];
            args.extend(["-i", "20ms"]);
            if transport == "tls" {
                args.extend(["--ca", &ca, "--tls-name", "dns.goodput.test"]);
            }
            for w in want {
                args.extend(["--expect", w]);
            }
            let (code, err, d) = goodput_dns("dns-answers", &args);
            assert_eq!(code, Some(0), "{name} {record} over {transport}: {err}");
            assert_eq!(d["transport"], transport);
            assert_eq!(
                (d["queries"].as_u64(), d["answered"].as_u64()),
                (Some(3), Some(3)),
                "{d}"
            );
            assert_eq!(
                (d["lost"].as_u64(), d["mismatched"].as_u64()),
                (Some(0), Some(0)),
                "{d}"
            );
            assert_eq!(d["rcode"], "NOERROR");
            assert_eq!(d["answer_count"].as_u64(), Some(want.len() as u64));
            let got = strings(&d["query_log"][2]["answers"]);
            let mut expected: Vec<String> = want.iter().map(|w| w.to_string()).collect();
            expected.sort();
            assert_eq!(got, expected, "{name} {record} over {transport}");
            // dig reads the same records off the same server.
            let dig_transport: &[&str] = match transport {
                "udp" => &["+notcp"],
                "tcp" => &["+tcp"],
                _ => &["+tls", "+tls-hostname=dns.goodput.test"],
            };
            let ca_arg = format!("+tls-ca={ca}");
            let mut dargs = vec![*name, record, "+tries=1", "+time=2"];
            dargs.extend(dig_transport);
            if transport == "tls" {
                dargs.push(&ca_arg);
            }
            let (dig_answers, dig_ms) = dig(&server, &dargs).expect("dig got no answer");
            let mut dig_answers: Vec<String> = dig_answers.iter().map(|a| a.replace('"', "")).collect();
            dig_answers.sort();
            assert_eq!(
                got, dig_answers,
                "goodput and dig disagree on {name} {record} over {transport}"
            );
            let p50 = d["resolution"]["p50_us"].as_f64().unwrap();
            assert!(p50 > 0.0 && p50 < 2e6, "{d}");
            side_by_side.push(format!(
                "{name} {record} {transport}: goodput p50 {:.3} ms (min {:.3}), dig {dig_ms} ms",
                p50 / 1e3,
                d["resolution"]["min_us"].as_f64().unwrap() / 1e3
            ));
        }
    }
    eprintln!(
        "resolution times, goodput beside dig:\n{}",
        side_by_side.join("\n")
    );

    // A name the zone does not have: NXDOMAIN, as a name and a figure.
    let server = u.server();
    let (code, err, d) = goodput_dns(
        "dns-answers",
        &[
            "nothing.goodput.test",
            "--server",
            &server,
            "-c",
            "1",
            "--assert",
            "rcode == 3",
        ],
    );
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(
        (d["rcode"].as_str(), d["rcode_value"].as_u64()),
        (Some("NXDOMAIN"), Some(3))
    );
    assert_eq!(d["rcodes"]["NXDOMAIN"].as_u64(), Some(1));
    assert_eq!(d["answer_count"].as_u64(), Some(0));
    // And an expectation it cannot meet is a failed assertion.
    let (code, err, d) = goodput_dns(
        "dns-answers",
        &[
            "nothing.goodput.test",
            "--server",
            &server,
            "-c",
            "1",
            "--expect",
            "192.0.2.1",
        ],
    );
    assert_eq!(code, Some(4), "{err}");
    assert!(
        err.contains("query 1: the answer (NXDOMAIN) does not hold 192.0.2.1"),
        "{err}"
    );
    assert_eq!(d["mismatched"].as_u64(), Some(1));
}

#[test]
fn a_changed_zone_makes_expect_fail_and_says_what_came() {
    if !Unbound::available() {
        return;
    }
    let mut u = Unbound::start("dns-changed", &zone("192.0.2.1"));
    let server = u.server();
    let args = [
        "www.goodput.test",
        "--server",
        &server,
        "-c",
        "2",
        "-i",
        "20ms",
        "--expect",
        "192.0.2.1",
    ];
    let (code, err, d) = goodput_dns("dns-changed", &args);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(d["mismatched"].as_u64(), Some(0));
    assert_eq!(d["query_log"][0]["matched"], true);

    u.serve(&zone("192.0.2.99"));
    let (code, err, d) = goodput_dns("dns-changed", &args);
    assert_eq!(code, Some(4), "{err}");
    assert!(
        err.contains("query 1: the answer (192.0.2.99) does not hold 192.0.2.1"),
        "{err}"
    );
    assert!(
        err.contains("assertion failed: mismatched == 0 (measured 2)"),
        "{err}"
    );
    assert_eq!(d["mismatched"].as_u64(), Some(2));
    assert_eq!(d["query_log"][1]["matched"], false);
    assert_eq!(strings(&d["query_log"][1]["answers"]), ["192.0.2.99"]);
    // The HTML report heads the run with its figures.
    let json = tmp("dns-changed", "changed.json");
    let status = goodput()
        .arg("dns")
        .args(args)
        .arg("--json")
        .arg(&json)
        .stdin(Stdio::null())
        .output()
        .unwrap()
        .status;
    assert_eq!(status.code(), Some(4));
    let html = tmp("dns-changed", "report.html");
    let (code, _, err) = common::run(&["report", json.to_str().unwrap(), "-o", html.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{err}");
    let page = std::fs::read_to_string(&html).unwrap();
    for want in [
        "DNS queries",
        "Resolution median",
        "Answers not as expected",
        "Response code",
    ] {
        assert!(page.contains(want), "no {want:?} in the report");
    }
    // A pattern meets the new address where the old value does not.
    let (code, err, _) = goodput_dns(
        "dns-changed",
        &[
            "www.goodput.test",
            "--server",
            &server,
            "-c",
            "1",
            "--expect-pattern",
            r"^192\.0\.2\.\d+$",
        ],
    );
    assert_eq!(code, Some(0), "{err}");
}

#[test]
fn a_silent_server_is_lost_after_its_retries() {
    // A UDP port that takes queries and never answers.
    let silent = UdpSocket::bind("127.0.0.1:0").unwrap();
    let server = silent.local_addr().unwrap().to_string();
    let t0 = Instant::now();
    let (code, err, d) = goodput_dns(
        "dns-silent",
        &[
            "www.goodput.test",
            "--server",
            &server,
            "-c",
            "2",
            "-i",
            "10ms",
            "--timeout",
            "150ms",
            "--retries",
            "2",
        ],
    );
    let took = t0.elapsed();
    assert_eq!(code, Some(1), "{err}");
    assert_eq!(
        (d["queries"].as_u64(), d["lost"].as_u64(), d["retries"].as_u64()),
        (Some(2), Some(2), Some(4))
    );
    assert_eq!(d["query_log"][0]["attempts"].as_u64(), Some(3));
    assert_eq!(
        d["query_log"][0]["error"],
        "no reply after 3 tries: no reply within 150 ms"
    );
    assert!(
        err.contains("query 2: no reply after 3 tries: no reply within 150 ms"),
        "{err}"
    );
    // Two queries of three 150 ms tries each, one after the other.
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(10),
        "{took:?}"
    );
    // Every try was a query on the wire: six of them.
    silent.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 512];
    let mut seen = 0;
    while silent.recv_from(&mut buf).is_ok() {
        seen += 1;
    }
    assert_eq!(seen, 6);
}

#[test]
fn a_mesh_dns_task_is_archived_checked_shown_and_alerts_when_its_answer_changes() {
    use common::agents::{get_json, Agent, Ports};
    if !Unbound::available() {
        return;
    }
    let mut u = Unbound::start("dns-mesh", &zone("192.0.2.1"));
    let ports = Ports::pick();
    // The server runs no agent: an address with `no_agent`, asked at
    // unbound's port.
    let config = tmp("dns-mesh", "mesh.toml");
    std::fs::write(
        &config,
        format!(
            r#"[agent]
api_port = {api}

[addresses.a]
address = "127.0.0.41"
[addresses.ns]
address = "127.0.0.1"
no_agent = true

[groups.resolvers]
type = "disjoint"
a = ["a"]
b = ["ns"]

[tests.www]
kind = "dns"
name = "www.goodput.test"
server = "{{{{dest}}}}:{port}"
count = 3
interval = "20ms"
timeout = "500ms"
expect = ["192.0.2.1"]

[schedules.often]
repeat = "PT1S"

[tasks.www]
group = "resolvers"
test = "www"
schedule = "often"

[alerts]
every = "1s"
hold = 1

[alerts.rules.answers]
metric = "errors"
window = "1m"
statistic = "last"
critical = "@1:"
"#,
            api = ports.api,
            port = u.port
        ),
    )
    .unwrap();
    let mut agent = Agent::start("dns-mesh", "a", "127.0.0.41", &config, ports, &[]);
    let finished = |agent: &Agent| -> Vec<serde_json::Value> {
        agent
            .runs(ports)
            .into_iter()
            .filter(|r| r["state"] == "finished" && r["kind"] == "dns")
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while finished(&agent).len() < 2 {
        assert!(Instant::now() < deadline, "no dns runs: {}", agent.log_text());
        std::thread::sleep(Duration::from_millis(200));
    }
    let runs = finished(&agent);
    let f = &runs[0]["figures"];
    assert_eq!(f["errors"].as_f64(), Some(0.0), "{}", runs[0]);
    assert_eq!(f["loss_pct"].as_f64(), Some(0.0), "{}", runs[0]);
    let median = f["delay_median_us"].as_f64().unwrap();
    assert!(median > 0.0 && median < 500_000.0, "{}", runs[0]);
    // The run's document holds the queries.
    let id = runs[0]["id"].as_str().unwrap();
    let doc = get_json("127.0.0.41", ports.api, &format!("/api/v1/runs/{id}"));
    let d = &doc["result"]["dns"];
    assert_eq!(
        (d["answered"].as_u64(), d["mismatched"].as_u64()),
        (Some(3), Some(0)),
        "{doc}"
    );

    // goodput check reads the resolution time of the pair's dns runs.
    let url = format!("http://127.0.0.41:{}", ports.api);
    let (code, out, err) = common::run(&[
        "check",
        "-H",
        &url,
        "-s",
        "a",
        "-d",
        "ns",
        "--kind",
        "dns",
        "-m",
        "delay_median",
        "-w",
        "500",
        "-c",
        "1000",
    ]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.starts_with("GOODPUT DELAY_MEDIAN OK - "), "{out}");
    assert!(out.contains("a -> ns, dns"), "{out}");

    // The pair page charts them.
    let (status, page) = common::agents::http(
        "127.0.0.41",
        ports.api,
        "GET",
        "/ui/pair?source=a&dest=ns",
        None,
        "",
    );
    assert_eq!(status, 200);
    assert!(page.contains("DNS resolution time"), "{page}");
    assert!(
        page.contains("Failures (lost queries, answers not as expected)"),
        "{page}"
    );

    // The answer changes: the errors rule opens an alert on the pair.
    u.serve(&zone("192.0.2.99"));
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let open = get_json("127.0.0.41", ports.api, "/api/v1/alerts");
        let hit = open
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["metric"] == "errors" && a["dest"] == "ns")
            .cloned();
        if let Some(a) = hit {
            assert_eq!(
                (a["severity"].as_str(), a["value"].as_f64()),
                (Some("critical"), Some(3.0)),
                "{a}"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no alert: {open}\n{}",
            agent.log_text()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    let runs = finished(&agent);
    let last = runs.iter().max_by_key(|r| r["start_ms"].as_u64()).unwrap();
    assert_eq!(last["figures"]["errors"].as_f64(), Some(3.0), "{last}");
    agent.stop(libc::SIGTERM);
}
