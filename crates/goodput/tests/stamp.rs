//! STAMP from the command line, and interoperability both ways with
//! stamp-suite (crates.io), an independent STAMP implementation: goodput's
//! sender against `stamp-suite --is-reflector`, and stamp-suite's sender
//! against `goodput server --stamp`, stateless and stateful, with and
//! without an SSID.
//!
//! `.ci/run` installs stamp-suite and sets CI=true, which makes a missing
//! stamp-suite a failure; elsewhere those tests are skipped with a message.

mod common;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{free_udp_port, goodput, wait_udp_bound as wait_bound_udp, Reaped};
use serde_json::Value;

fn tmp(name: &str) -> std::path::PathBuf {
    common::tmp("stamp", name)
}

fn have_stamp_suite() -> bool {
    common::have("stamp-suite", &["--version"], "cargo install stamp-suite")
}

fn read_json(p: &PathBuf) -> Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

#[test]
fn main_stamp_run_reports_and_writes_files() {
    let json = tmp("cli.json");
    let packets = tmp("cli-packets.csv");
    let status = tmp("cli-status.csv");
    let out = goodput()
        .args([
            "stamp",
            "-c",
            "30",
            "-i",
            "10ms",
            "--stateful",
            "--ssid",
            "42",
            "--json",
        ])
        .arg(&json)
        .arg("--packet-file")
        .arg(&packets)
        .arg("--status-file")
        .arg(&status)
        .args(["--status-interval", "100ms"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("30 sent, 30 received, 0 lost"), "{text}");
    assert!(text.contains("round-trip delay : min"), "{text}");
    assert!(text.contains("RTTmed"), "{text}");
    let v = read_json(&json);
    assert_eq!(v["kind"], "stamp_sender");
    assert_eq!(v["stamp"]["total"]["sent"], 30);
    assert_eq!(v["stamp"]["total"]["received"], 30);
    assert_eq!(v["stamp"]["per_session"][0]["ssid"], 42);
    assert!(v["stamp"]["total"]["histograms"]["rtt_ns"].is_string());
    let rows: Vec<String> = std::fs::read_to_string(&packets)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(rows[0], goodput_report_packet_header());
    assert_eq!(rows.len(), 31);
    assert!(rows[1..].iter().all(|r| r.split(',').nth(2) == Some("received")));
    let status = std::fs::read_to_string(&status).unwrap();
    assert!(status.starts_with("TimeSlice,SendBps,RecvBps,In-Flight,Completed,NetError,DataError,Sent,Recv"));
    let sent: u64 = status
        .lines()
        .skip(1)
        .map(|l| l.split(',').nth(7).unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(sent, 30);
}

fn goodput_report_packet_header() -> &'static str {
    "session,seq,status,t1_unix_ns,t2_unix_ns,t3_unix_ns,t4_unix_ns,rtt_us,forward_us,backward_us,reflector_seq,forward_ttl,reply_ttl"
}

#[test]
fn stamp_bad_values_are_usage_errors() {
    for (args, needle) in [
        (&["stamp", "--size", "20"][..], "--size"),
        (&["stamp", "--count", "0"][..], "--count"),
        (&["stamp", "--rate=0"][..], "--rate"),
        (&["stamp", "127.0.0.1", "--stateful"][..], "--stateful"),
        (&["stamp", "--ssid", "0"][..], "ssid"),
        (&["stamp", "--dscp", "64"][..], "dscp"),
    ] {
        let out = goodput().args(args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

#[test]
fn stamp_to_nobody_exits_one_quickly() {
    let port = free_udp_port();
    let start = Instant::now();
    let out = goodput()
        .args(["stamp", "127.0.0.1", "-c", "3", "-i", "10ms", "-L", "300ms", "-p"])
        .arg(port.to_string())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(start.elapsed() < Duration::from_secs(10));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("ECONNREFUSED"), "{text}");
    assert!(
        text.contains("loss by direction : unknown (no reply came back)"),
        "{text}"
    );
}

/// goodput's sender against stamp-suite's reflector.
fn against_stamp_suite(stateful: bool, ssid: Option<u16>, v6: bool) {
    if !have_stamp_suite() {
        return;
    }
    let port = free_udp_port();
    let addr = if v6 { "::1" } else { "127.0.0.1" };
    let mut cmd = Command::new("stamp-suite");
    cmd.args(["--is-reflector", "--local-addr", addr, "--local-port"])
        .arg(port.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if stateful {
        cmd.arg("--stateful-reflector");
    }
    let refl = Reaped(Some(cmd.spawn().unwrap()));
    wait_bound_udp(port);
    let json = tmp(&format!("to-ss-{stateful}-{ssid:?}-{v6}.json"));
    let mut g = goodput();
    g.args([
        "stamp",
        addr,
        "-c",
        "40",
        "-i",
        "10ms",
        "-L",
        "1s",
        "--sessions",
        "2",
        "-v",
        "1",
        "-p",
    ])
    .arg(port.to_string())
    .arg("--json")
    .arg(&json);
    if let Some(s) = ssid {
        g.args(["--ssid", &s.to_string()]);
    }
    let out = g.output().unwrap();
    let (_, ss_out, ss_err) = refl.stop(libc::SIGINT);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}\n{}\nstamp-suite: {ss_out}{ss_err}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let v = read_json(&json);
    let t = &v["stamp"]["total"];
    assert_eq!(
        (t["sent"].as_u64(), t["received"].as_u64()),
        (Some(80), Some(80)),
        "{t}"
    );
    assert_eq!(t["lost"], 0);
    // The reflector copied the SSIDs back (none zeroed, none foreign).
    assert_eq!(t["ssid_zero"], 0);
    assert_eq!(t["ssid_mismatch"], 0);
    assert_eq!(t["unmatched"], 0);
    assert!(t["rtt"]["min_us"].as_f64().unwrap() > 0.0);
    // stamp-suite fills in the TTL it received: 255 sent, 0 hops on loopback.
    assert_eq!(t["hops_forward"]["max"], 0, "{t}");
    // Its own summary counts the packets too.
    assert!(ss_out.contains("rx: 40, tx: 40"), "{ss_out}");
}

#[test]
fn goodput_sender_to_stamp_suite_stateless() {
    against_stamp_suite(false, None, false);
}

#[test]
fn goodput_sender_to_stamp_suite_stateless_ssid_ipv6() {
    against_stamp_suite(false, Some(300), true);
}

#[test]
fn goodput_sender_to_stamp_suite_stateful() {
    against_stamp_suite(true, None, false);
}

#[test]
fn goodput_sender_to_stamp_suite_stateful_ssid() {
    against_stamp_suite(true, Some(7), false);
}

/// stamp-suite's sender against goodput's reflector.
fn from_stamp_suite(stateful: bool, ssid: Option<u16>) {
    if !have_stamp_suite() {
        return;
    }
    let port = free_udp_port();
    let tcp_port = free_udp_port();
    let mut cmd = goodput();
    cmd.args(["server", "--listen", "127.0.0.1", "--port"])
        .arg(tcp_port.to_string())
        .args(["--stamp", "--stamp-listen", "127.0.0.1", "--stamp-port"])
        .arg(port.to_string())
        .args(["--status-interval", "1h", "-v", "1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if stateful {
        cmd.arg("--stamp-stateful");
    }
    let server = Reaped(Some(cmd.spawn().unwrap()));
    wait_bound_udp(port);
    let mut ss = Command::new("stamp-suite");
    ss.args(["--remote-addr", "127.0.0.1", "--remote-port"])
        .arg(port.to_string())
        .args([
            "--count",
            "30",
            "--send-delay",
            "10ms",
            "--timeout",
            "1",
            "--output-format",
            "json",
        ]);
    if let Some(s) = ssid {
        ss.args(["--ssid", &s.to_string()]);
    }
    let out = ss.output().unwrap();
    let (_, g_out, g_err) = server.stop(libc::SIGINT);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary: Value = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["type"] == "summary")
        .unwrap_or_else(|| panic!("no summary in {stdout}"));
    assert_eq!(summary["packets_sent"], 30, "{summary}");
    assert_eq!(summary["packets_received"], 30, "{summary}");
    assert_eq!(summary["packets_lost"], 0);
    let m = &summary["measurements"];
    assert_eq!(m["unknown_replies"], 0);
    assert_eq!(m["duplicate_replies"], 0);
    // Both modes number 0..29 here (nothing was lost on the way in).
    assert_eq!(m["last_reflector_sequence"], 29);
    assert!(summary["min_rtt_ms"].as_f64().unwrap() > 0.0);
    // goodput's own count, printed when the server stops.
    assert!(
        g_out.contains("STAMP reflector: 30 received, 30 reflected"),
        "{g_out}{g_err}"
    );
    if stateful {
        assert!(g_out.contains("1 stateful sessions"), "{g_out}");
    }
}

#[test]
fn stamp_suite_sender_to_goodput_stateless() {
    from_stamp_suite(false, None);
}

#[test]
fn stamp_suite_sender_to_goodput_stateless_ssid() {
    from_stamp_suite(false, Some(1234));
}

#[test]
fn stamp_suite_sender_to_goodput_stateful() {
    from_stamp_suite(true, None);
}

#[test]
fn stamp_suite_sender_to_goodput_stateful_ssid() {
    from_stamp_suite(true, Some(65535));
}

/// Ctrl-C: sending stops, packets still in flight are left out (neither
/// received nor lost), the summary and the JSON document are written, and
/// the exit status is 130.
#[test]
fn sigint_stops_a_stamp_run_with_a_complete_result() {
    let json = tmp("sigint.json");
    let child = goodput()
        .args(["stamp", "-c", "100000", "-i", "5ms", "-v", "1", "--json"])
        .arg(&json)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let (code, out, err) = Reaped(Some(child)).stop(libc::SIGINT);
    assert_eq!(code, Some(130), "{out}{err}");
    assert!(out.contains("--- STAMP statistics"), "{out}");
    let v = read_json(&json);
    assert_eq!(v["end"], "interrupted");
    let t = &v["stamp"]["total"];
    let (sent, received, lost) = (
        t["sent"].as_u64().unwrap(),
        t["received"].as_u64().unwrap(),
        t["lost"].as_u64().unwrap(),
    );
    assert!(sent > 50, "{t}");
    assert_eq!(sent, received + lost, "{t}");
    assert_eq!(lost, 0, "{t}");
}
