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
    let port = free_udp_port();
    let mut srv = Command::new(env!("CARGO_BIN_EXE_goodput"));
    srv.args([
        "server",
        "--listen",
        "127.0.0.1",
        "-p",
        &free_udp_port().to_string(),
        "--no-udp",
        "--quic",
        "--quic-listen",
        &format!("127.0.0.1:{port}"),
    ]);
    let _srv = Reaped::spawn(srv);
    wait_udp_bound(port);
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
        &format!("127.0.0.1:{port}"),
        "--quic-max-mtu",
        "1250",
    ]);
    let srv = Reaped::spawn(srv);
    wait_udp_bound(port);
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
    ] {
        let (code, _, err) = common::run(args);
        assert_eq!(code, Some(2), "{args:?}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
}
