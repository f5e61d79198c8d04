//! UDP media streams from the command line: `goodput udp` with its embedded
//! server and against `goodput server`, every output file, bad input and
//! Ctrl-C.

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use common::{free_tcp_port, goodput, wait_tcp_listening, wait_udp_bound, Reaped};
use serde_json::Value;

fn tmp(name: &str) -> PathBuf {
    common::tmp("udp", name)
}

fn read_json(p: &PathBuf) -> Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

#[test]
fn embedded_download_reports_and_writes_every_file() {
    let json = tmp("run.json");
    let status = tmp("status.csv");
    let conns = tmp("conns.csv");
    let jitter = tmp("jitter.csv");
    let lines = tmp("lines.jsonl");
    let out = goodput()
        .args([
            "udp",
            "-b",
            "4M",
            "--frame-rate",
            "50",
            "--length",
            "2s",
            "--buffer-depth",
            "1s",
        ])
        .args(["--status-interval", "500ms", "--datagram-size", "1000"])
        .arg("--json")
        .arg(&json)
        .arg("--status-file")
        .arg(&status)
        .arg("--connection-file")
        .arg(&conns)
        .arg("--jitter-file")
        .arg(&jitter)
        .arg("--json-stream")
        .arg(&lines)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // 4 Mbit/s at 50 fps: 10,000-byte frames of 10 datagrams, 100 frames.
    assert!(
        text.contains("Total Successful Frames : 100 (100.000%)"),
        "{text}"
    );
    assert!(text.contains("1000 sent, 1000 received, 0 lost"), "{text}");
    assert!(text.contains("Bits/Sec"), "{text}");
    let v = read_json(&json);
    assert_eq!(v["kind"], "media_client");
    assert_eq!(v["settings"]["wire"], "media");
    assert_eq!(v["media"]["frames"], 100);
    assert_eq!(v["media"]["frame_bytes"], 10_000);
    assert_eq!(v["media"]["datagrams_per_frame"], 10);
    assert_eq!(v["media"]["total"]["frames_completed"], 100);
    assert_eq!(v["media"]["total"]["received"], 1000);
    assert_eq!(v["media"]["total"]["received_bytes"], 1_000_000);
    assert!(v["media"]["histograms"]["ipdv_ns"].is_string());
    assert_eq!(v["connections"][0]["media"]["frames_completed"], 100);
    // Status CSV: the common columns, then the media ones.
    let status = std::fs::read_to_string(&status).unwrap();
    let header = status.lines().next().unwrap();
    assert!(
        header.ends_with("Bits/Sec,Streams,Completed,Dropped,Repeated,Errors,Received,Lost,Jitter_ms"),
        "{header}"
    );
    let completed: u64 = status
        .lines()
        .skip(1)
        .map(|l| l.split(',').nth(9).unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(completed, 100, "{status}");
    // Connection CSV: ctsTraffic's UDP columns first.
    let conns = std::fs::read_to_string(&conns).unwrap();
    let mut rows = conns.lines();
    assert!(rows.next().unwrap().starts_with(
        "TimeSlice,LocalAddress,RemoteAddress,Bits/Sec,Completed,Dropped,Repeated,Errors,Result,ConnectionId"
    ));
    let row: Vec<&str> = rows.next().unwrap().split(',').collect();
    assert_eq!(&row[4..9], &["100", "0", "0", "0", "Succeeded"]);
    // Jitter file: one row per datagram.
    let jitter = std::fs::read_to_string(&jitter).unwrap();
    let mut jl = jitter.lines();
    assert_eq!(jl.next().unwrap(), goodput_report_jitter_header());
    let rows: Vec<&str> = jl.collect();
    assert_eq!(rows.len(), 1000);
    assert!(rows.iter().all(|r| r.ends_with(",ok")));
    let seqs: std::collections::HashSet<u64> = rows
        .iter()
        .map(|r| r.split(',').nth(1).unwrap().parse().unwrap())
        .collect();
    assert_eq!(seqs.len(), 1000);
    // JSON lines end with the totals.
    let last: Value =
        serde_json::from_str(std::fs::read_to_string(&lines).unwrap().lines().last().unwrap()).unwrap();
    assert_eq!(last["event"], "end");
    assert_eq!(last["media"]["frames_completed"], 100);
}

fn goodput_report_jitter_header() -> &'static str {
    "Stream,Sequence,Frame,SendTime_ns,RecvTime_unix_ns,RelativeInFlight_us,Ipdv_us,Arrival"
}

#[test]
fn against_goodput_server_both_directions_v4_and_v6() {
    let port = free_tcp_port();
    let mut srv = Command::new(env!("CARGO_BIN_EXE_goodput"));
    srv.args([
        "server",
        "--listen",
        "127.0.0.1",
        "--listen",
        "::1",
        "-p",
        &port.to_string(),
    ]);
    let srv = Reaped::spawn(srv);
    wait_tcp_listening(port);
    // The server binds its media socket after its TCP listener: a client
    // in between is refused (seen once in CI, NetworkErrors [3] in 2 ms).
    wait_udp_bound(port);
    for (host, upload) in [("127.0.0.1", false), ("::1", true), ("localhost", false)] {
        let json = tmp(&format!("srv-{host}-{upload}.json"));
        let mut c = goodput();
        c.args([
            "udp",
            host,
            "-p",
            &port.to_string(),
            "-b",
            "8M",
            "--length",
            "1s",
            "-c",
            "3",
        ])
        .args(["--buffer-depth", "1s", "-v", "1", "--json"])
        .arg(&json);
        if upload {
            c.arg("--upload");
        }
        let out = c.output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{host} {upload}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let v = read_json(&json);
        assert_eq!(v["media"]["upload"], upload);
        assert_eq!(v["media"]["streams"], 3);
        assert_eq!(v["media"]["total"]["frames_completed"], 180, "{host}");
        assert_eq!(v["media"]["total"]["lost"], 0);
    }
    let (code, out, err) = srv.stop(libc::SIGINT);
    assert!(code.is_some(), "{out}{err}");
    assert!(
        out.contains("UDP media service: 9 streams accepted (9 completed"),
        "{out}"
    );
}

#[test]
fn bad_values_are_usage_errors() {
    let cases: &[(&[&str], &str)] = &[
        (
            &["udp", "--length", "1500ms"],
            "--length must be a whole number of seconds",
        ),
        (
            &["udp", "--datagram-size", "20"],
            "--datagram-size must be 69..=65507",
        ),
        (
            &["udp", "-b", "1G", "--frame-rate", "1", "--datagram-size", "1000"],
            "more than 65535",
        ),
        (
            &["udp", "--buffer-depth", "1h", "--frame-rate", "1000"],
            "more than a receiver buffers (131072)",
        ),
        (&["udp", "-b", "100", "--frame-rate", "60"], "too small"),
        (&["udp", "-b", "0"], "must all be above zero"),
        (&["udp", "--status-interval", "1ms"], "--status-interval"),
    ];
    for (args, want) in cases {
        let out = goodput().args(*args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}

#[test]
fn nobody_there_fails_with_a_clear_message() {
    let port = common::free_udp_port();
    let out = goodput()
        .args([
            "udp",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "--length",
            "1s",
            "-v",
            "3",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("ECONNREFUSED"), "{text}");
}

#[test]
fn ctrl_c_keeps_the_summary_and_the_json() {
    let json = tmp("int.json");
    let mut c = goodput();
    c.args([
        "udp",
        "-b",
        "4M",
        "--length",
        "60s",
        "--iterations",
        "0",
        "--json",
    ])
    .arg(&json);
    let run = Reaped::spawn(c);
    std::thread::sleep(Duration::from_millis(2500));
    let (code, out, _) = run.stop(libc::SIGINT);
    assert_eq!(code, Some(130), "{out}");
    assert!(out.contains("Interrupted"), "{out}");
    let v = read_json(&json);
    assert_eq!(v["end"], "interrupted");
    // About a second of frames played after the 1 s buffer.
    let done = v["media"]["total"]["frames_completed"].as_u64().unwrap();
    assert!((30..=150).contains(&done), "{done}");
    assert_eq!(v["connections"][0]["outcome"]["status"], "aborted");
}
