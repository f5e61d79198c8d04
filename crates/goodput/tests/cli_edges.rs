//! Edges of the command line found by trying it as a user would: values
//! that used to panic, outputs that could not be written yet reported
//! success, options that failed each connection instead of the run, and
//! `-` for standard output on every output flag.

mod common;

use std::time::{Duration, Instant};

use common::*;

fn run(args: &[&str]) -> (Option<i32>, String, String, Duration) {
    let t = Instant::now();
    let mut cmd = goodput();
    cmd.args(args);
    let (code, out, err) = Reaped::spawn(cmd).wait(Duration::from_secs(60));
    (code, out, err, t.elapsed())
}

#[test]
fn iperf3_length_zero_is_the_default_length() {
    let json = tmp("edges", "l0.json");
    let (code, out, err, _) = run(&[
        "iperf3",
        "-l",
        "0",
        "-k",
        "10",
        "-v",
        "0",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert!(!err.contains("panicked"), "{err}");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    // Ten blocks of iperf3's default TCP length, 128 KiB.
    assert_eq!(
        v["iperf3"]["streams"][0]["bytes"].as_u64(),
        Some(10 * 131_072),
        "{v}"
    );
}

#[test]
fn an_unwritable_perf_log_stops_the_run_before_it_starts() {
    let json = tmp("edges", "perf.json");
    let _ = std::fs::remove_file(&json);
    let (code, _, err, took) = run(&[
        "quic",
        "--perf-log",
        "/nonexistent-goodput-dir/p.csv",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(3), "{err}");
    assert!(err.contains("/nonexistent-goodput-dir/p.csv"), "{err}");
    // The default run downloads 100 MB; it must not have happened.
    assert!(took < Duration::from_secs(5), "{took:?}");
    assert!(!json.exists(), "no result document for a run that did not start");
}

#[test]
fn a_write_error_on_the_jitter_file_is_exit_3() {
    let (code, _, err, _) = run(&["udp", "--length", "1s", "--jitter-file", "/dev/full", "-v", "0"]);
    assert_eq!(code, Some(3), "{err}");
    assert!(
        err.contains("/dev/full") && err.contains("No space left"),
        "{err}"
    );
}

#[test]
fn bad_socket_options_stop_the_run_before_it_starts() {
    for (flag, value, says) in [
        ("--congestion", "no-such-cc", "TCP_CONGESTION 'no-such-cc'"),
        ("--interface", "nosuch0", "SO_BINDTODEVICE 'nosuch0'"),
        ("--bind", "192.0.2.1", "--bind 192.0.2.1"),
        ("--bind", "::1", "--bind has no IPv4 address"),
    ] {
        let (code, out, err, took) = run(&[
            "tcp",
            "--transfer",
            "1MB",
            "--iterations",
            "1",
            "--connections",
            "4",
            flag,
            value,
        ]);
        assert_eq!(code, Some(3), "{flag} {value}: {out}\n{err}");
        assert!(err.contains(says), "{flag} {value}: {err}");
        assert!(
            !out.contains("Connection"),
            "{flag} {value}: no connection was tried: {out}"
        );
        assert!(took < Duration::from_secs(5), "{took:?}");
    }
}

#[test]
fn dash_is_standard_output_for_every_output() {
    // The result document.
    let (code, out, err, _) = run(&[
        "tcp",
        "--transfer",
        "1MB",
        "--iterations",
        "1",
        "--connections",
        "2",
        "--json",
        "-",
    ]);
    assert_eq!(code, Some(0), "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("stdout is the result document alone");
    assert_eq!(v["schema_version"], 1);
    assert!(!std::path::Path::new("-").exists(), "no file named -");
    // The status file, as CSV would need a name: the text table.
    let (code, out, err, _) = run(&[
        "tcp",
        "--transfer",
        "1MB",
        "--iterations",
        "1",
        "--status-file",
        "-",
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("TimeSlice"), "{out}");
    assert!(
        !out.contains("configured settings"),
        "the console keeps off stdout: {out}"
    );
    // The jitter file.
    let (code, out, err, _) = run(&["udp", "--length", "1s", "--bitrate", "1M", "--jitter-file", "-"]);
    assert_eq!(code, Some(0), "{err}");
    let mut lines = out.lines();
    assert_eq!(lines.next(), Some(goodput_header()), "{out}");
    assert!(lines.count() > 10, "rows follow");
}

fn goodput_header() -> &'static str {
    "Stream,Sequence,Frame,SendTime_ns,RecvTime_unix_ns,RelativeInFlight_us,Ipdv_us,Arrival"
}

#[test]
fn tcp_takes_host_colon_port() {
    let port = free_tcp_port();
    let mut cmd = goodput();
    cmd.args([
        "server",
        "--listen",
        "127.0.0.1",
        "--no-udp",
        "-v",
        "0",
        "--port",
        &port.to_string(),
    ]);
    let server = Reaped::spawn(cmd);
    wait_tcp_listening(port);
    for target in [format!("127.0.0.1:{port}"), format!("localhost:{port}")] {
        let (code, out, err, _) = run(&[
            "tcp",
            &target,
            "-4",
            "--transfer",
            "1MB",
            "--iterations",
            "1",
            "-v",
            "1",
        ]);
        assert_eq!(code, Some(0), "{target}: {out}\n{err}");
        assert!(out.contains(&format!("127.0.0.1:{port}")), "{target}: {out}");
    }
    drop(server);
}

#[test]
fn the_server_refuses_limits_of_zero() {
    for (flag, value) in [
        ("--max-connections", "0"),
        ("--max-per-client", "0"),
        ("--max-duration", "0s"),
        ("--hello-timeout", "0s"),
        ("--udp-max-streams", "0"),
        ("--udp-max-bitrate", "0"),
        ("--udp-max-length", "0s"),
        ("--udp-max-buffer", "0s"),
        ("--udp-max-memory", "0"),
        ("--quic-max-connections", "0"),
        ("--quic-max-handshakes", "0"),
    ] {
        let (code, out, err, _) = run(&["server", "--port", "0", "--listen", "127.0.0.1", flag, value]);
        assert_eq!(code, Some(2), "{flag} {value}: {out}\n{err}");
        assert!(err.contains(flag), "{flag}: {err}");
        assert!(
            !out.contains("listening") && !out.contains("Limits"),
            "it never started: {out}"
        );
    }
}

#[test]
fn stamp_rate_zero_names_the_accepted_range() {
    let (code, _, err, _) = run(&["stamp", "--rate", "0"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("--rate must be above 0 and at most 1000000 packets/s"),
        "{err}"
    );
}

#[test]
fn the_servers_view_counts_every_connection_not_the_records_kept() {
    let json = tmp("edges", "records.json");
    let (code, out, err, _) = run(&[
        "tcp",
        "--transfer",
        "64",
        "--connections",
        "10",
        "--iterations",
        "5",
        "--max-records",
        "10",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains("Server's view (50 connections) : sent 0 B   received 3200 B"),
        "{out}"
    );
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(v["connections"].as_array().unwrap().len(), 10);
    assert_eq!(v["connections_omitted"], 40);
    assert_eq!(v["summary"]["peer"]["connections"], 50, "{}", v["summary"]);
    assert_eq!(v["summary"]["peer"]["received_bytes"], 3200);
}

#[test]
fn sizes_that_are_not_whole_units_are_scaled() {
    let (code, out, err, _) = run(&["iperf3", "-n", "1234567", "-v", "1"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("after 1.18 MiB (1234567 B)"), "{out}");
}

#[test]
fn quic_to_a_closed_port_fails_at_once() {
    let port = free_udp_port();
    let p = port.to_string();
    for extra in [&[][..], &["-c", "5"], &["--handshakes", "--duration", "5s"]] {
        let mut args = vec!["quic", "127.0.0.1", &p];
        args.extend_from_slice(extra);
        let (code, out, err, took) = run(&args);
        assert_eq!(code, Some(1), "{extra:?}: {out}\n{err}");
        if extra.is_empty() {
            assert!(
                format!("{out}{err}").contains(&format!("nothing listens on UDP 127.0.0.1:{port}")),
                "{out}\n{err}"
            );
        }
        // It was 10 s, the handshake timeout (or the whole --duration of
        // failing handshakes); the endpoint's close waits 1 s.
        assert!(took < Duration::from_secs(3), "{extra:?}: {took:?}");
    }
}

#[test]
fn quic_status_intervals_add_up_to_the_download_and_count_the_stream_in_flight() {
    let json = tmp("edges", "quic-intervals.json");
    let (code, out, err, _) = run(&[
        "quic",
        "--download",
        "100MB",
        "--status-interval",
        "50ms",
        "-v",
        "0",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0), "{out}\n{err}");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let ivs = v["intervals"].as_array().unwrap();
    assert!(ivs.len() >= 2, "{ivs:?}");
    let (mut prev, mut bytes) = (0.0, 0.0);
    for iv in ivs {
        let t = iv["time_slice_s"].as_f64().unwrap();
        bytes += iv["recv_bytes_per_second"].as_f64().unwrap() * (t - prev);
        prev = t;
    }
    let received = v["summary"]["received_bytes"].as_f64().unwrap();
    assert_eq!(received, 100e6);
    // Rates are whole bytes per second: at most a byte per interval lost.
    assert!(
        (bytes - received).abs() <= ivs.len() as f64 + 1.0,
        "{bytes} of {received}"
    );
    assert!(
        ivs.iter().any(|iv| iv["in_flight"] == 1),
        "the download's stream counts while it runs: {ivs:?}"
    );
    assert!(
        ivs.iter().all(|iv| iv["in_flight"].as_u64() <= Some(1)),
        "{ivs:?}"
    );
}

#[test]
fn the_progress_bar_shows_both_directions_and_redraws_four_times_a_second() {
    // A terminal for standard error: util-linux's script(1) runs the client
    // on a pseudo-terminal and copies what it drew.
    if !have("script", &["--version"], "apt-get install bsdutils") {
        return;
    }
    let bin = env!("CARGO_BIN_EXE_goodput");
    let command = format!("{bin} tcp --transfer 2MB --rate-limit 1MB/s --connections 2 --iterations 1 -v 1");
    let t = Instant::now();
    let out = std::process::Command::new("script")
        .args(["-qfec", &command, "/dev/null"])
        .env("TERM", "xterm")
        .output()
        .unwrap();
    let took = t.elapsed();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let drawn = String::from_utf8_lossy(&out.stdout);
    // Each redraw writes the bar's line again.
    let frames = drawn.matches("/2 connections  ").count();
    let wanted = (took.as_secs_f64() * 4.0 * 0.75) as usize;
    assert!(frames >= wanted.max(4), "{frames} redraws in {took:?}:\n{drawn}");
    // A push: the send rate is the one that moves; both are shown.
    assert!(
        drawn.contains("send 16.") || drawn.contains("send 15.") || drawn.contains("send 17."),
        "{drawn}"
    );
    assert!(drawn.contains("  recv "), "{drawn}");
}

#[test]
fn quic_records_past_the_cap_are_counted_as_omitted() {
    let json = tmp("edges", "quic-cap.json");
    let (code, out, err, _) = run(&[
        "quic",
        "-c",
        "5",
        "--max-records",
        "2",
        "--download",
        "1MB",
        "--status-interval",
        "10ms",
        "-v",
        "0",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0), "{out}\n{err}");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(v["connections"].as_array().unwrap().len(), 2);
    assert_eq!(
        v["connections_omitted"], 3,
        "records vanish without a trace otherwise"
    );
    assert_eq!(v["summary"]["successful"], 5);
    assert!(
        v["intervals"].as_array().unwrap().len() <= 2,
        "{}",
        v["intervals"]
    );
}
