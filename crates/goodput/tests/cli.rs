//! Tests of the `goodput` binary as a user runs it.

mod common;

use std::path::PathBuf;
use std::process::Stdio;

use common::goodput;
use std::time::{Duration, Instant};

fn tmp(name: &str) -> PathBuf {
    common::tmp("cli", name)
}

#[test]
fn main_job_runs_and_exits_zero_with_summary_and_files() {
    let json = tmp("main.json");
    let status = tmp("main-status.csv");
    let conns = tmp("main-conns.csv");
    let out = goodput()
        .args([
            "tcp",
            "--transfer",
            "8MiB",
            "--status-interval",
            "100ms",
            "--json",
        ])
        .arg(&json)
        .arg("--status-file")
        .arg(&status)
        .arg("--connection-file")
        .arg(&conns)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("SuccessfulConnections [8]"), "{stdout}");
    assert!(stdout.contains("Gbit/s") || stdout.contains("Mbit/s"), "{stdout}");
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(doc["schema_version"], 1);
    assert_eq!(doc["summary"]["successful"], 8);
    assert_eq!(doc["summary"]["sent_bytes"], 8 * 8 * 1024 * 1024);
    assert_eq!(doc["connections"].as_array().unwrap().len(), 8);
    let status = std::fs::read_to_string(&status).unwrap();
    assert!(status.starts_with("TimeSlice,SendBps,RecvBps,In-Flight,Completed,NetError,DataError\n"));
    let last = status.lines().last().unwrap();
    assert_eq!(last.split(',').nth(4), Some("8"), "{status}");
    let conns = std::fs::read_to_string(&conns).unwrap();
    assert_eq!(conns.lines().count(), 9);
    assert!(
        conns
            .lines()
            .skip(1)
            .all(|l| l.split(',').nth(8) == Some("Succeeded")),
        "{conns}"
    );
}

#[test]
fn sigint_mid_run_flushes_files_and_prints_summary() {
    let json = tmp("int.json");
    let status = tmp("int-status.csv");
    let stream = tmp("int-stream.jsonl");
    let child = goodput()
        .args([
            "tcp",
            "--iterations",
            "0",
            "--connections",
            "4",
            "--transfer",
            "1TiB",
            "--rate-limit",
            "50MB/s",
            "--status-interval",
            "100ms",
            "--json",
        ])
        .arg(&json)
        .arg("--status-file")
        .arg(&status)
        .arg("--json-stream")
        .arg(&stream)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1200));
    // SAFETY: sending a signal to our own child process.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let t0 = Instant::now();
    let out = child.wait_with_output().unwrap();
    assert!(t0.elapsed() < Duration::from_secs(10));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(130), "{stdout}");
    assert!(stdout.contains("Interrupted"), "{stdout}");
    assert!(stdout.contains("Aborted [4]"), "{stdout}");
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(doc["end"], "interrupted");
    assert_eq!(doc["summary"]["aborted"], 4);
    let sent = doc["summary"]["sent_bytes"].as_u64().unwrap();
    assert!(
        sent > 10_000_000,
        "aborted connections keep their byte counts: {sent}"
    );
    let status = std::fs::read_to_string(&status).unwrap();
    assert!(status.lines().count() >= 5, "{status}");
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&stream)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.last().unwrap()["event"], "end");
    assert!(lines.iter().filter(|l| l["event"] == "connection").count() == 4);
}

/// Nothing listens: every connect is refused, the test never started
/// (exit 3), the refused connects are one line with their count, and the
/// error names the server to start.
#[test]
fn unreachable_server_is_a_start_failure_that_names_the_server() {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port().to_string();
    drop(l);
    let out = goodput()
        .args(["tcp", "127.0.0.1", "--port", &port, "--connections", "2"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stdout.contains(&format!(
            "ECONNREFUSED during connect: Connection refused × 2 (127.0.0.1:{port})"
        )),
        "{stdout}"
    );
    assert!(
        stderr.contains(&format!(
            "nothing listens on TCP 127.0.0.1:{port}: start `goodput server`"
        )),
        "{stderr}"
    );
}

#[test]
fn bad_values_are_usage_errors_naming_the_flag() {
    for (args, needle) in [
        (vec!["tcp", "--buffer", "12 parsecs"], "--buffer"),
        (vec!["tcp", "--transfer", "9..3"], "upper bound"),
        (vec!["tcp", "--pattern", "sideways"], "sideways"),
        (vec!["tcp", "--connections", "0"], "--connections"),
        (
            vec!["tcp", "--rate-limit", "5", "--rate-period", "100ms"],
            "less than one byte",
        ),
        (vec!["tcp", "--local-port", "5000..5001"], "--local-port"),
        (vec!["server", "--listen", "not-an-address"], "--listen"),
        (vec!["tcp", "--verbosity", "9"], "verbosity"),
    ] {
        let out = goodput().args(&args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}

#[test]
fn verbosity_zero_prints_nothing() {
    let out = goodput()
        .args(["tcp", "--transfer", "1MiB", "--verbosity", "0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(out.stdout.is_empty(), "{}", String::from_utf8_lossy(&out.stdout));
    assert!(out.stderr.is_empty());
}

#[test]
fn separate_server_process_serves_a_client_and_exits_after_count() {
    let port = common::free_tcp_port().to_string();
    let server_json = tmp("srv.json");
    let mut server = goodput()
        .args([
            "server",
            "--listen",
            "127.0.0.1",
            "--port",
            &port,
            "--exit-after",
            "6",
            "--json",
        ])
        .arg(&server_json)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let out = goodput()
        .args([
            "tcp",
            "localhost",
            "-4",
            "--port",
            &port,
            "-c",
            "3",
            "-n",
            "2",
            "--transfer",
            "2MiB",
        ])
        .args(["--pattern", "pull"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = server.try_wait().unwrap() {
            break s;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "server did not exit after 6"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(0));
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&server_json).unwrap()).unwrap();
    assert_eq!(doc["end"], "exit_limit");
    assert_eq!(doc["summary"]["successful"], 6);
    assert_eq!(doc["summary"]["sent_bytes"], 6 * 2 * 1024 * 1024);
}

#[test]
fn committed_schema_matches_the_result_model() {
    let out = goodput().arg("schema").output().unwrap();
    let committed = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../schema/result-v1.json"
    ))
    .unwrap();
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        committed,
        "schema/result-v1.json is stale: regenerate it with `goodput schema > schema/result-v1.json`"
    );
}

#[test]
fn sigterm_stops_a_server_with_its_files_complete() {
    let port = common::free_tcp_port().to_string();
    let json = tmp("term.json");
    let conns = tmp("term-conns.csv");
    let server = goodput()
        .args(["server", "--listen", "127.0.0.1", "--port", &port, "--json"])
        .arg(&json)
        .arg("--connection-file")
        .arg(&conns)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let out = goodput()
        .args([
            "tcp",
            "127.0.0.1",
            "--port",
            &port,
            "-c",
            "2",
            "--transfer",
            "1MiB",
            "-v",
            "0",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    std::thread::sleep(Duration::from_millis(200));
    // SAFETY: sending a signal to our own child process.
    unsafe { libc::kill(server.id() as i32, libc::SIGTERM) };
    let out = server.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("SuccessfulConnections [2]"), "{stdout}");
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(doc["end"], "interrupted");
    assert_eq!(doc["summary"]["received_bytes"], 2 * 1024 * 1024);
    assert_eq!(std::fs::read_to_string(&conns).unwrap().lines().count(), 3);
}

#[test]
fn text_files_and_json_lines_on_stdout() {
    let status = tmp("status.txt");
    let conns = tmp("conns.log");
    let out = goodput()
        .args([
            "tcp",
            "--transfer",
            "1MiB",
            "-c",
            "2",
            "--pattern",
            "duplex",
            "--json-stream",
            "-",
        ])
        .arg("--status-file")
        .arg(&status)
        .arg("--connection-file")
        .arg(&conns)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    // With JSON lines on stdout, stdout holds nothing else.
    let stdout = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<serde_json::Value> = stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.iter().filter(|l| l["event"] == "connection").count(), 2);
    let end = lines.last().unwrap();
    assert_eq!(end["event"], "end");
    assert_eq!(end["summary"]["sent_bytes"], 1024 * 1024);
    assert_eq!(end["summary"]["received_bytes"], 1024 * 1024);
    // Text status file: legend, then the console's aligned columns.
    let status = std::fs::read_to_string(&status).unwrap();
    assert!(status.starts_with("Legend:"), "{status}");
    let header = status
        .lines()
        .find(|l| l.contains("TimeSlice") && l.contains("DataError"))
        .unwrap();
    assert_eq!(header.find("DataError").unwrap() + "DataError".len(), 79);
    // Text connection file: ctsTraffic-style lines.
    let conns = std::fs::read_to_string(&conns).unwrap();
    assert_eq!(conns.lines().count(), 2, "{conns}");
    assert!(conns
        .lines()
        .all(|l| l.contains("TCP connection succeeded") && l.contains("SendBytes[524288]")));
}

#[test]
fn unwritable_json_path_is_refused_before_the_run() {
    let out = goodput()
        .args(["tcp", "--json", "/nonexistent-dir/x.json", "--transfer", "1GiB"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert!(
        out.stdout.is_empty(),
        "the run started: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot write /nonexistent-dir/x.json"));
}

#[test]
fn a_closed_stdout_neither_panics_nor_changes_the_exit_status() {
    use std::io::{BufRead, BufReader};
    let mut child = goodput()
        .args([
            "tcp",
            "--transfer",
            "64MiB",
            "--status-interval",
            "10ms",
            "--connections",
            "2",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Read the first line, then close the pipe, as `| head -1` does.
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(first.starts_with("goodput tcp"), "{first}");
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(out.status.code(), Some(0), "{err}");
}
