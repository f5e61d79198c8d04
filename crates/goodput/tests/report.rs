//! `goodput report`: every kind of result the commands write becomes one
//! self-contained HTML page that an HTML validator (Debian's tidy) passes
//! and headless chromium opens without a console error; a comparison with
//! a baseline shows each headline figure's difference as the two
//! documents give it; `--png` writes each chart as a PNG image.
//!
//! The results come from real runs on loopback (embedded servers, a
//! `goodput server` for echo, TTCP and the TCP server's own document): every
//! kind a command writes as a document. (The server's iperf3 service
//! reports its tests on the console only, so `iperf3_server` has none.)

mod common;

use common::webdriver::Browser;
use common::{free_tcp_port, goodput, have, tmp, Reaped};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

fn ok(out: Output, what: &str) {
    assert!(
        out.status.success(),
        "{what}: {:?}\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs goodput with `args` plus `--json FILE`; the file.
fn result(name: &str, args: &[&str]) -> PathBuf {
    let json = tmp("report", &format!("{name}.json"));
    let out = goodput().args(args).arg("--json").arg(&json).output().unwrap();
    ok(out, name);
    json
}

/// Result documents of every kind, made once for all tests.
fn results() -> &'static Vec<(&'static str, PathBuf)> {
    static R: OnceLock<Vec<(&'static str, PathBuf)>> = OnceLock::new();
    R.get_or_init(|| {
        let mut v = Vec::new();
        // A server's own document, and a client's against it.
        let (echo, discard, tcp) = (free_tcp_port(), free_tcp_port(), free_tcp_port());
        let server_json = tmp("report", "tcp_server.json");
        let mut c = goodput();
        c.args(["server", "--listen", "127.0.0.1", "--port", &tcp.to_string()])
            .args([
                "--status-interval",
                "1h",
                "-v",
                "1",
                "--echo-port",
                &echo.to_string(),
            ])
            .args(["--discard-port", &discard.to_string(), "--json"])
            .arg(&server_json);
        let server = Reaped::spawn(c);
        common::wait_tcp_listening(tcp);
        common::wait_tcp_listening(echo);
        common::wait_tcp_listening(discard);
        v.push((
            "tcp_client",
            result(
                "tcp_client",
                &[
                    "tcp",
                    "127.0.0.1",
                    "--port",
                    &tcp.to_string(),
                    "--connections",
                    "4",
                    "--transfer",
                    "8MiB",
                    "--status-interval",
                    "20ms",
                    "-v",
                    "0",
                ],
            ),
        ));
        v.push((
            "echo_client",
            result(
                "echo_client",
                &[
                    "echo",
                    "127.0.0.1",
                    "--port",
                    &echo.to_string(),
                    "--connections",
                    "20",
                    "--messages",
                    "20",
                    "-v",
                    "0",
                ],
            ),
        ));
        v.push((
            "ttcp_transmit",
            result(
                "ttcp_transmit",
                &[
                    "ttcp",
                    "-t",
                    "127.0.0.1",
                    "-l",
                    "1000",
                    "-n",
                    "2000",
                    "-v",
                    "0",
                    "-p",
                    &discard.to_string(),
                ],
            ),
        ));
        // A TTCP receiver's document, fed by a transmitter.
        let rport = free_tcp_port();
        let receive_json = tmp("report", "ttcp_receive.json");
        let mut c = goodput();
        c.args([
            "ttcp",
            "-r",
            "-B",
            "127.0.0.1",
            "-v",
            "0",
            "-p",
            &rport.to_string(),
            "--json",
        ])
        .arg(&receive_json);
        let receiver = Reaped::spawn(c);
        common::wait_tcp_listening(rport);
        ok(
            goodput()
                .args([
                    "ttcp",
                    "-t",
                    "127.0.0.1",
                    "-l",
                    "1000",
                    "-n",
                    "500",
                    "-v",
                    "0",
                    "-p",
                    &rport.to_string(),
                ])
                .output()
                .unwrap(),
            "ttcp -t",
        );
        let (code, _, err) = receiver.wait(std::time::Duration::from_secs(10));
        assert_eq!(code, Some(0), "ttcp -r: {err}");
        v.push(("ttcp_receive", receive_json));
        v.push((
            "ping",
            result(
                "ping",
                &[
                    "ping",
                    "-M",
                    "tcp",
                    "127.0.0.1",
                    "-p",
                    &tcp.to_string(),
                    "-c",
                    "5",
                    "-i",
                    "50ms",
                ],
            ),
        ));
        // The pings' connections reset, so the server may exit 1.
        let (code, _, err) = server.stop(libc::SIGINT);
        assert!(matches!(code, Some(0 | 1)), "server: {code:?} {err}");
        v.push(("tcp_server", server_json));
        v.push((
            "stamp",
            result(
                "stamp",
                &[
                    "stamp",
                    "-c",
                    "300",
                    "-i",
                    "3ms",
                    "--status-interval",
                    "100ms",
                    "-v",
                    "0",
                ],
            ),
        ));
        v.push((
            "udp",
            result(
                "udp",
                &[
                    "udp",
                    "--length",
                    "2s",
                    "--bitrate",
                    "5M",
                    "--buffer-depth",
                    "200ms",
                    "--status-interval",
                    "200ms",
                    "-v",
                    "0",
                ],
            ),
        ));
        v.push((
            "quic",
            result(
                "quic",
                &[
                    "quic",
                    "--download",
                    "20M",
                    "--status-interval",
                    "20ms",
                    "-v",
                    "0",
                ],
            ),
        ));
        v.push((
            "quic_latency",
            result(
                "quic_latency",
                &["quic", "--latency", "--duration", "1s", "-v", "0"],
            ),
        ));
        v.push(("iperf3", result("iperf3", &["iperf3", "-t", "1", "-v", "0"])));
        v.push(("trace", result("trace", &["trace", "127.0.0.1"])));
        v
    })
}

fn report(args: &[&std::ffi::OsStr]) -> Output {
    goodput().arg("report").args(args).output().unwrap()
}

fn tidy_errors(html: &Path) -> Option<String> {
    if !have("tidy", &["-v"], "apt-get install tidy") {
        return None;
    }
    // -e: errors only (tidy's exit 2). Its warnings (exit 1) are about
    // SVG it does not know: font-family and font-size on <svg> are SVG
    // presentation attributes, "proprietary" to tidy 5.6.
    let out = Command::new("tidy")
        .args(["-e", "-q"])
        .arg(html)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.code() == Some(2)).then_some(text)
}

#[test]
fn every_kind_renders_as_valid_html_that_chromium_opens_cleanly() {
    let docs = results();
    let html = tmp("report", "all.html");
    let png = tmp("report", "png");
    let _ = std::fs::remove_dir_all(&png);
    let mut args: Vec<&std::ffi::OsStr> =
        vec!["-o".as_ref(), html.as_os_str(), "--png".as_ref(), png.as_os_str()];
    args.extend(docs.iter().map(|(_, p)| p.as_os_str()));
    let out = report(&args);
    ok(out, "report");
    let text = std::fs::read_to_string(&html).unwrap();
    // Self-contained: nothing is fetched.
    for needle in ["<script", "src=\"http", "href=\"http", "@import", "url("] {
        assert!(
            !text.contains(needle),
            "the report refers outside itself: {needle}"
        );
    }
    // Each kind has its section and the charts its data allows.
    let kinds: Vec<String> = docs
        .iter()
        .map(|(_, p)| common::result_doc(p)["kind"].as_str().unwrap().to_owned())
        .collect();
    for want in [
        "tcp_client",
        "tcp_server",
        "echo_client",
        "ttcp_transmit",
        "ttcp_receive",
        "ping",
        "stamp_sender",
        "media_client",
        "quic_client",
        "iperf3_client",
        "trace",
    ] {
        assert!(
            kinds.iter().any(|k| k == want),
            "no {want} document among {kinds:?}"
        );
    }
    for (i, (name, _)) in docs.iter().enumerate() {
        assert!(
            text.contains(&format!("id=\"run-{}\"", i + 1)),
            "{name} has no section"
        );
    }
    for chart in [
        "Rate over time",
        "Rate per connection",
        "Round trip per interval",
        "Lost, duplicated and reordered per interval",
        "Round-trip delay distribution",
        "Media bitrate per interval",
        "Jitter per interval",
        "Echo round-trip distribution",
        "QUIC request latency",
        "Median round trip per hop",
        "Round trip per request",
    ] {
        assert!(text.contains(chart), "no chart \"{chart}\"");
    }
    // The headline figures are the documents' own: the TCP client's
    // four connections and its send rate in Mbit/s.
    let tcp = common::result_doc(&docs[0].1);
    assert_eq!(tcp["summary"]["successful"], 4);
    let rate = tcp["summary"]["send_bytes_per_second"].as_f64().unwrap() * 8.0 / 1e6;
    let shown = if rate >= 100.0 {
        format!("{rate:.1} Mbit/s")
    } else {
        format!("{rate:.3} Mbit/s")
    };
    let section = &text[text.find("id=\"run-1\"").unwrap()..text.find("id=\"run-2\"").unwrap()];
    assert!(
        section.contains(&shown),
        "send rate {shown} not in the TCP client's section"
    );
    assert!(
        section.contains("<td>Connections succeeded</td><td class=\"num\">4</td>"),
        "{section}"
    );
    // STAMP: 300 sent.
    let stamp_at = docs.iter().position(|(n, _)| *n == "stamp").unwrap() + 1;
    let stamp = &text[text.find(&format!("id=\"run-{stamp_at}\"")).unwrap()..];
    assert!(stamp.contains("<td>Packets sent</td><td class=\"num\">300</td>"));

    if let Some(errors) = tidy_errors(&html) {
        panic!("tidy finds errors in the report:\n{errors}");
    }

    // PNG charts: one per chart in the page, real PNGs at twice the size.
    let charts = text.matches("<svg ").count();
    let mut pngs: Vec<_> = std::fs::read_dir(&png)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    pngs.sort();
    assert_eq!(pngs.len(), charts, "{pngs:?}");
    for p in &pngs {
        let b = std::fs::read(p).unwrap();
        assert_eq!(&b[..8], b"\x89PNG\r\n\x1a\n", "{}", p.display());
        let w = u32::from_be_bytes(b[16..20].try_into().unwrap());
        let h = u32::from_be_bytes(b[20..24].try_into().unwrap());
        assert_eq!((w, h), (1800, 520), "{}", p.display());
        assert!(b.len() > 5_000, "{} is nearly empty", p.display());
    }

    let Some(browser) = Browser::start("report") else {
        return;
    };
    browser.go(&format!("file://{}", html.display()));
    assert!(browser.title().contains("goodput report"), "{}", browser.title());
    let svgs = browser.script("return document.querySelectorAll('svg.chart').length");
    assert_eq!(svgs.as_u64(), Some(charts as u64));
    // Charts are drawn at their size (an SVG that failed to parse is not).
    let drawn = browser.script(
        "return [...document.querySelectorAll('svg.chart')].filter(s => s.getBoundingClientRect().width >= 800).length",
    );
    assert_eq!(drawn.as_u64(), Some(charts as u64));
    clean_console_and_screenshot(&browser, "report.png");
}

/// Asserts the page logged nothing to the console, and keeps a
/// screenshot of it in target/screenshots.
fn clean_console_and_screenshot(browser: &Browser, name: &str) {
    let console = browser.console();
    assert!(console.is_empty(), "console: {console:?}");
    let shots = Path::new(env!("CARGO_TARGET_TMPDIR")).join("../screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    browser.screenshot(&shots.join(name));
}

#[test]
fn a_comparison_shows_each_figures_difference_from_the_baseline() {
    let base = result(
        "cmp-base",
        &["tcp", "--connections", "2", "--transfer", "4MiB", "-v", "0"],
    );
    let run = result(
        "cmp-run",
        &["tcp", "--connections", "5", "--transfer", "4MiB", "-v", "0"],
    );
    let html = tmp("report", "compare.html");
    let out = report(&[
        "-o".as_ref(),
        html.as_os_str(),
        "--baseline".as_ref(),
        base.as_os_str(),
        run.as_os_str(),
    ]);
    ok(out, "report --baseline");
    let text = std::fs::read_to_string(&html).unwrap();
    let row = |figure: &str| -> Vec<String> {
        let at = text
            .find(&format!("data-figure=\"{figure}\""))
            .unwrap_or_else(|| panic!("no row for {figure}"));
        let end = at + text[at..].find("</tr>").unwrap();
        text[at..end]
            .split("<td")
            .skip(1)
            .map(|c| {
                let c = &c[c.find('>').unwrap() + 1..];
                c[..c.find("</td>").unwrap()].to_owned()
            })
            .collect()
    };
    // Connections: 2 → 5 is +3, +150 %, better.
    assert_eq!(
        row("Connections succeeded"),
        ["Connections succeeded", "2", "5", "+3", "+150.0 % (better)"]
    );
    // Bytes sent: the documents' own figures and their difference.
    let (b, r) = (common::result_doc(&base), common::result_doc(&run));
    let (bs, rs) = (
        b["summary"]["sent_bytes"].as_u64().unwrap(),
        r["summary"]["sent_bytes"].as_u64().unwrap(),
    );
    let cells = row("Bytes sent");
    assert_eq!(cells[1], format!("{bs} B"));
    assert_eq!(cells[2], format!("{rs} B"));
    let d = rs as i64 - bs as i64;
    assert_eq!(cells[3], format!("{}{d} B", if d > 0 { "+" } else { "" }));
    // Send rate: the difference of the two rates in Mbit/s, and whether
    // it is better (higher) or worse.
    let rate = |d: &serde_json::Value| d["summary"]["send_bytes_per_second"].as_f64().unwrap() * 8.0 / 1e6;
    let cells = row("Send rate");
    let diff = rate(&r) - rate(&b);
    let shown: f64 = cells[3]
        .trim_start_matches('+')
        .trim_end_matches(" Mbit/s")
        .parse()
        .unwrap();
    assert!((shown - diff).abs() < 0.06, "{cells:?} vs {diff}");
    assert!(
        cells[4].ends_with(if diff > 0.0 { "(better)" } else { "(worse)" }),
        "{cells:?}"
    );
    // A figure unchanged says so.
    assert_eq!(row("Data errors")[4], "same");
    if let Some(errors) = tidy_errors(&html) {
        panic!("tidy finds errors in the comparison:\n{errors}");
    }
    let Some(browser) = Browser::start("report-compare") else {
        return;
    };
    browser.go(&format!("file://{}", html.display()));
    let worse_or_better = browser
        .script("return document.querySelectorAll('table.compare tr.better, table.compare tr.worse').length");
    assert!(worse_or_better.as_u64().unwrap() >= 2, "{worse_or_better}");
    clean_console_and_screenshot(&browser, "report-compare.png");
}

#[test]
fn bad_inputs_are_refused_with_reasons() {
    let junk = tmp("report", "junk.json");
    std::fs::write(&junk, "{\"not\": \"a result\"}").unwrap();
    let out = report(&[junk.as_os_str()]);
    assert_eq!(out.status.code(), Some(3));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("is not a goodput result document"), "{err}");
    let out = report(&["/nonexistent/r.json".as_ref()]);
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot open"));
    let out = goodput().arg("report").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    // Two documents as a baseline are one too many.
    let a = tmp("report", "two.json");
    let one = std::fs::read_to_string(&results()[0].1).unwrap();
    std::fs::write(&a, format!("[{one},{one}]")).unwrap();
    let out = report(&["--baseline".as_ref(), a.as_os_str(), a.as_os_str()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("must hold one"));
    // Numbers at their type's ends draw without a panic.
    let mut tcp = common::result_doc(&results()[0].1);
    tcp["started_unix_ms"] = u64::MAX.into();
    tcp["summary"]["duration_s"] = 1e300.into();
    for c in tcp["connections"].as_array_mut().unwrap() {
        c["sent_bytes"] = u64::MAX.into();
        c["received_bytes"] = u64::MAX.into();
        c["elapsed_ns"] = 1.into();
    }
    let ping_at = results().iter().position(|(n, _)| *n == "ping").unwrap();
    let mut ping = common::result_doc(&results()[ping_at].1);
    ping["ping"]["interval_ms"] = u64::MAX.into();
    ping["ping"]["sent"] = u64::MAX.into();
    for r in ping["ping"]["replies"].as_array_mut().unwrap() {
        r["seq"] = u64::MAX.into();
    }
    let extreme = tmp("report", "extreme.json");
    std::fs::write(&extreme, format!("{tcp}\n{ping}\n")).unwrap();
    let html = tmp("report", "extreme.html");
    let out = report(&["-o".as_ref(), html.as_os_str(), extreme.as_os_str()]);
    ok(out, "report of extreme numbers");
}
