//! QUIC perf from the command line: `goodput quic` with its embedded
//! server and against `goodput server --quic`, picoquic's statistics lines,
//! the performance log, the JSON document, and bad input.

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::{free_udp_port, goodput, wait_udp_bound, Reaped};
use serde_json::Value;

fn tmp(name: &str) -> PathBuf {
    common::tmp("quic", name)
}

#[test]
fn against_goodput_server_with_perf_log_and_json() {
    let port = free_udp_port();
    let mut srv = Command::new(env!("CARGO_BIN_EXE_goodput"));
    srv.args([
        "server",
        "--listen",
        "127.0.0.1",
        "-p",
        &free_udp_port().to_string(),
        "--no-udp",
    ])
    .args([
        "--quic",
        "--quic-listen",
        "127.0.0.1",
        "--quic-port",
        &port.to_string(),
    ]);
    let srv = Reaped::spawn(srv);
    wait_udp_bound(port);
    let log = tmp("perf.csv");
    let _ = std::fs::remove_file(&log);
    let json = tmp("run.json");
    for _ in 0..2 {
        let out = goodput()
            .args([
                "quic",
                "127.0.0.1",
                &port.to_string(),
                "*3:397:50000;",
                "--insecure",
                "-v",
                "1",
            ])
            .arg("--perf-log")
            .arg(&log)
            .arg("--json")
            .arg(&json)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        for line in [
            "Nb_transactions: 3\n",
            "Upload_bytes: 1191\n",
            "Download_bytes: 150000\n",
            "Connection_duration_sec: ",
            "TPS: ",
            "Upload_Mbps: ",
            "Download_Mbps: ",
        ] {
            assert!(text.contains(line), "{line}: {text}");
        }
    }
    // The header once, then one row per connection per run.
    let rows: Vec<String> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(rows.len(), 3, "{rows:?}");
    assert!(rows[0].starts_with("Log_v, PQ_v, Duration, Sent, Received, Mpbs_S"));
    let cells: Vec<&str> = rows[1].split(", ").collect();
    assert_eq!(cells.len(), 40);
    assert_eq!(
        (cells[0], cells[3], cells[4], cells[8], cells[11]),
        ("2", "1191", "150000", "perf", "1")
    );
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(v["kind"], "quic_client");
    assert_eq!(v["quic"]["transactions"], 3);
    assert_eq!(v["quic"]["scenario"], "*3:397:50000;");
    assert!(v["connections"][0]["quic"]["rtt_us"].as_u64().unwrap() > 0);
    let (_, out, err) = srv.stop(libc::SIGINT);
    assert!(out.contains("QUIC perf service: 2 connections"), "{out}{err}");
    assert!(out.contains("6 streams"), "{out}");
}

#[test]
fn embedded_shortcuts_and_legacy_note() {
    let out = goodput()
        .args([
            "quic",
            "--scenario",
            "*1:0:-:397:5000;*1:4:0:432:4999;",
            "-v",
            "1",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{text}{err}");
    assert!(text.contains("Download_bytes: 9999"), "{text}");
    assert!(
        format!("{text}{err}").contains("legacy scenario form"),
        "{text}{err}"
    );
    let out = goodput()
        .args(["quic", "--upload", "1MB", "-v", "1"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    // picoquic prints its lines for upload-only runs too (goodput does).
    assert!(text.contains("Upload_bytes: 1000008"), "{text}");
    assert!(text.contains("Download_bytes: 0"), "{text}");
}

#[test]
fn bad_input_is_a_usage_error() {
    for (args, want) in [
        (&["quic", "--scenario", "*0:1:1"][..], "repeat count"),
        (&["quic", "--scenario", "=b:=a:100:1"][..], "depends on 'a'"),
        (&["quic", "--upload", "lots"][..], "--upload 'lots'"),
        (&["quic", "--rps", "--handshakes"][..], "cannot be used with"),
    ] {
        let out = goodput().args(args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
}

#[test]
fn quic_listen_takes_an_address_and_port_as_the_other_listen_flags_do() {
    // The helper's server takes `--quic-listen 127.0.0.1:PORT`.
    let (_srv, port) = common::quic_server(&[]);
    let out = goodput()
        .args([
            "quic",
            "127.0.0.1",
            &port.to_string(),
            "*1:100:1000;",
            "--insecure",
        ])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Two different ports for the one server are refused, naming both.
    let out = goodput()
        .args([
            "server",
            "--quic",
            "--quic-listen",
            "127.0.0.1:4433",
            "--quic-listen",
            "[::1]:4434",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("127.0.0.1:4433 and ::1:4434 name different ports"),
        "{err}"
    );
    // A bare IPv6 address is an address, and a port of 0 is refused.
    let (code, out, err) = common::run(&["server", "--quic", "--quic-listen", "::1", "--print-spec"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("\"::1\""), "{out}");
    let (code, _, err) = common::run(&["server", "--quic", "--quic-listen", "127.0.0.1:0"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("the port must be 1 to 65535"), "{err}");
}

/// The path MTU a client's connection ended at, from its JSON record.
fn client_mtu(extra: &[&str]) -> u64 {
    let json = tmp(&format!("mtu{}.json", extra.len()));
    let out = goodput()
        .args(["quic", "--download", "20M", "--json"])
        .arg(&json)
        .args(extra)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    v["connections"][0]["quic"]["mtu_bytes"].as_u64().unwrap()
}

#[test]
fn max_mtu_caps_the_packets_both_ways() {
    // Loopback carries 65,536: discovery climbs past 1,300 unless capped.
    assert!(client_mtu(&[]) > 1300);
    let capped = client_mtu(&["--max-mtu", "1300"]);
    assert!((1200..=1300).contains(&capped), "{capped}");
    // A server's cap holds our client's packets to it as well.
    let (srv, port) = common::quic_server(&["--quic-max-mtu", "1250"]);
    let mtu = client_mtu(&["127.0.0.1", &port.to_string(), "--insecure"]);
    assert!((1200..=1250).contains(&mtu), "{mtu}");
    let (_, out, _) = srv.stop(libc::SIGINT);
    assert!(out.contains("UDP payloads capped at 1250 B both ways"), "{out}");
    // Outside QUIC's range: a usage error naming the flag.
    for (args, want) in [
        (
            &["quic", "--max-mtu", "1000"][..],
            "--max-mtu must be 1200-65527 B (QUIC's range), not 1000",
        ),
        (
            &["server", "--quic", "--quic-max-mtu", "65528"][..],
            "--quic-max-mtu must be 1200-65527 B (QUIC's range), not 65528",
        ),
        (
            &["server", "--quic", "--quic-threads", "0"][..],
            "--quic-threads must be 1-1024",
        ),
    ] {
        let (code, _, err) = common::run(args);
        assert_eq!(code, Some(2), "{args:?}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
}

#[test]
fn the_server_records_quic_connections_and_every_stopped_stream() {
    let file = tmp("server-connections.csv");
    let _ = std::fs::remove_file(&file);
    let file_arg = file.to_string_lossy().into_owned();
    let (srv, port) = common::quic_server(&["-v", "4", "--connection-file", &file_arg]);
    let p = port.to_string();
    // Two connections of three requests; then five unlimited responses,
    // each stopped by the client after 100,000 bytes, the connection closed
    // at once after the last.
    for args in [
        &["quic", "127.0.0.1", &p, "*3:100:10000;", "-c", "2", "--insecure"][..],
        &["quic", "127.0.0.1", &p, "*5:8:-100000;", "--insecure"][..],
    ] {
        let out = goodput().args(args).output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // No wait: a record still on its way when the server stops is kept.
    let (_, out, err) = srv.stop(libc::SIGINT);
    assert_eq!(out.matches("QUIC connection succeeded").count(), 3, "{out}{err}");
    assert!(out.contains("SuccessfulConnections [3]"), "{out}");
    assert!(out.contains("5 stopped by the client"), "{out}");
    let rows: Vec<String> = std::fs::read_to_string(&file)
        .unwrap()
        .lines()
        .skip(1)
        .map(str::to_owned)
        .collect();
    assert_eq!(rows.len(), 3, "{rows:?}");
    // Server's view: 3 × 10,000 sent and 3 × 100 received per connection.
    let firsts: Vec<&str> = rows
        .iter()
        .filter(|r| r.contains(",30000,"))
        .map(|r| r.as_str())
        .collect();
    assert_eq!(firsts.len(), 2, "{rows:?}");
    for r in rows {
        let cells: Vec<&str> = r.split(',').collect();
        assert_eq!(cells[8], "Succeeded", "{r}");
        assert_eq!(cells[9].len(), 36, "a UUID: {r}");
    }
}

#[test]
fn client_reports_add_up_and_name_what_they_count() {
    // Intervals, the last partial one included, add up to the bytes moved.
    let json = tmp("intervals.json");
    let out = goodput()
        .args([
            "quic",
            "-s",
            "*1:8:200000000;",
            "--status-interval",
            "100ms",
            "-v",
            "5",
            "--json",
        ])
        .arg(&json)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("In-Flight - requests (streams) under way"),
        "{text}"
    );
    assert!(!text.contains("connections so far that succeeded"), "{text}");
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let mut last = 0.0;
    let mut sum = 0.0;
    for iv in v["intervals"].as_array().unwrap() {
        let t = iv["time_slice_s"].as_f64().unwrap();
        sum += iv["recv_bytes_per_second"].as_f64().unwrap() * (t - last);
        last = t;
    }
    let total = v["quic"]["download_bytes"].as_f64().unwrap();
    assert_eq!(total, 200_000_000.0);
    assert!((sum - total).abs() / total < 0.001, "{sum} of {total}");
    // A timed upload is in flight in every full interval.
    let out = goodput()
        .args(["quic", "--upload", "1s", "--status-interval", "200ms", "--json"])
        .arg(&json)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let ivs = v["intervals"].as_array().unwrap();
    assert!(ivs.len() >= 4);
    // Every full interval after the first (which holds the handshake).
    for iv in &ivs[1..ivs.len() - 1] {
        assert_eq!(iv["in_flight"], 1, "{iv}");
    }
    // The performance log names each connection as the JSON does, and a
    // handshake-only connection leaves its path figures empty, not 0.
    let log = tmp("cnx.csv");
    let _ = std::fs::remove_file(&log);
    for extra in [
        &["-s", "*1:8:1000;"][..],
        &["--handshakes", "--duration", "300ms"][..],
    ] {
        let out = goodput()
            .args(["quic", "--json"])
            .arg(&json)
            .arg("--perf-log")
            .arg(&log)
            .args(extra)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0));
    }
    let rows: Vec<String> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .skip(1)
        .map(str::to_owned)
        .collect();
    assert_eq!(rows.len(), 2, "{rows:?}");
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let header: Vec<&str> = goodput_perf_log_header();
    let at = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let first: Vec<&str> = rows[0].split(", ").collect();
    let second: Vec<&str> = rows[1].split(", ").collect();
    assert_eq!(first[at("CNX_ID")].len(), 36, "{first:?}");
    assert_eq!(
        second[at("CNX_ID")],
        v["connections"][0]["connection_id"].as_str().unwrap()
    );
    // quinn's minimum reads 0 on a fast path (an artefact): left empty then.
    assert_ne!(first[at("minrtt")], "0", "{first:?}");
    assert!(first[at("srtt")].parse::<u64>().unwrap() > 0, "{first:?}");
    assert_eq!(second[at("minrtt")], "", "{second:?}");
}

/// picoquic's column names, from the header goodput writes.
fn goodput_perf_log_header() -> Vec<&'static str> {
    let log = tmp("header.csv");
    let _ = std::fs::remove_file(&log);
    let out = goodput()
        .args(["quic", "-s", "*1:8:8;", "--perf-log"])
        .arg(&log)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let text = std::fs::read_to_string(&log).unwrap();
    let header = text.lines().next().unwrap().to_owned();
    header.leak().split(", ").collect()
}
