//! `goodput trace` and `goodput ping` on loopback, as any user runs them:
//! the destination at hop 1, documents that run again with `goodput run`,
//! flag errors, assertions, TCP connect times against a real listener, and
//! ICMP echo or the reason it is not allowed. (The routed chain, tracepath
//! and traceroute beside them, and the unprivileged run are in
//! `path_netns.rs`.)

mod common;

use common::{goodput, result_doc, run, tmp};
use std::io::Write;
use std::process::Stdio;

#[test]
fn trace_reaches_loopback_at_hop_one_on_both_families() {
    for (dest, name) in [("127.0.0.1", "v4"), ("::1", "v6")] {
        let json = tmp("path", &format!("trace-{name}.json"));
        let (code, out, err) = run(&[
            "trace",
            dest,
            "-w",
            "500ms",
            "--assert",
            "hops == 1",
            "--json",
            json.to_str().unwrap(),
        ]);
        assert_eq!(code, Some(0), "{out}{err}");
        let doc = result_doc(&json);
        let t = &doc["trace"];
        assert_eq!(t["reached"], true, "{t}");
        assert_eq!(t["hop_count"], 1);
        assert_eq!(t["hops"][0]["addresses"], serde_json::json!([dest]));
        assert_eq!(t["hops"][0]["probes"].as_array().unwrap().len(), 3);
        assert_eq!(t["path_checksum"].as_str().unwrap().len(), 16);
        assert_eq!(doc["assertions"][0]["passed"], true);
        assert!(
            out.contains(&format!(" 1  {dest}")) && out.contains("reached"),
            "{out}"
        );
        assert!(out.contains("Resume: hops 1 back 1"), "{out}");
    }
    // A reverse name from /etc/hosts (no DNS query for loopback).
    let json = tmp("path", "names.json");
    let (code, out, err) = run(&[
        "trace",
        "127.0.0.1",
        "--names",
        "-q",
        "1",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0), "{out}{err}");
    let name = &result_doc(&json)["trace"]["hops"][0]["names"][0];
    assert!(name.as_str().is_some_and(|n| !n.is_empty()), "{name}");
    assert!(
        out.contains(&format!(" 1  {} (127.0.0.1)", name.as_str().unwrap())),
        "{out}"
    );
}

#[test]
fn a_trace_document_runs_again_and_bad_flags_say_why() {
    let (code, spec, err) = run(&["trace", "127.0.0.1", "-q", "2", "-w", "300ms", "--print-spec"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(spec.contains("\"kind\": \"trace\""), "{spec}");
    let json = tmp("path", "again.json");
    let mut child = goodput()
        .args(["run", "-", "-v", "0", "--json"])
        .arg(&json)
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(spec.as_bytes()).unwrap();
    assert!(child.wait().unwrap().success());
    let doc = result_doc(&json);
    assert_eq!(doc["kind"], "trace");
    assert_eq!(doc["trace"]["probes_per_hop"], 2);
    assert_eq!(doc["trace"]["hops"][0]["probes"].as_array().unwrap().len(), 2);

    let (code, _, err) = run(&["trace", "127.0.0.1", "-M", "tcp", "--pmtu"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--pmtu and --size need udp or icmp"), "{err}");
    let (code, _, err) = run(&["trace", "127.0.0.1", "-f", "5", "-m", "3"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--first-hop <= --max-hops"), "{err}");
    let (code, _, err) = run(&["ping", "127.0.0.1", "-c", "0"]);
    assert_eq!(code, Some(2), "{err}");
    let (code, _, err) = run(&["trace", "127.0.0.1", "--assert", "goodput > 1Mbit"]);
    assert_eq!(code, Some(2), "a trace has no good-put: {err}");
}

#[test]
fn ping_times_tcp_connects_to_a_listener_and_a_closed_port() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port().to_string();
    let json = tmp("path", "tcp.json");
    let (code, out, err) = run(&[
        "ping",
        "127.0.0.1",
        "-M",
        "tcp",
        "-p",
        &port,
        "-c",
        "4",
        "-i",
        "20ms",
        "--assert",
        "loss == 0%",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0), "{out}{err}");
    let p = &result_doc(&json)["ping"];
    assert_eq!(
        (p["sent"].as_u64(), p["received"].as_u64()),
        (Some(4), Some(4)),
        "{p}"
    );
    assert!(
        p["replies"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r.get("refused").is_none()),
        "{p}"
    );
    assert!(out.contains("seq=1 connected time="), "{out}");
    assert!(out.contains("rtt min/avg/max/mdev = "), "{out}");
    drop(listener);
    // A closed port answers with a reset: the host is up, but no service
    // answered. It is counted apart, never as an answer: exit 1.
    let (code, out, err) = run(&[
        "ping",
        "127.0.0.1",
        "-M",
        "tcp",
        "-p",
        &port,
        "-c",
        "2",
        "-i",
        "20ms",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(1), "{out}{err}");
    let p = &result_doc(&json)["ping"];
    assert_eq!(
        (p["received"].as_u64(), p["lost"].as_u64(), p["errors"].as_u64()),
        (Some(0), Some(2), Some(2)),
        "{p}"
    );
    assert_eq!(p["replies"][0]["refused"], true);
    assert!(
        p.get("rtt").is_none_or(|r| r.is_null()),
        "a reset is no round trip of the service: {p}"
    );
    assert!(
        out.contains("seq=1 reset: port closed, no answer from a service time="),
        "{out}"
    );
    assert!(
        out.contains("2 requests, 0 connected, 2 reset (port closed), 100.0% loss"),
        "{out}"
    );
}

#[test]
fn ping_uses_icmp_where_this_user_may_and_says_why_not_where_not() {
    // SAFETY: getgid only reads the process's credentials.
    let gid = u64::from(unsafe { libc::getgid() });
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ping_group_range").unwrap();
    let r: Vec<u64> = range.split_whitespace().map(|x| x.parse().unwrap()).collect();
    // Root may open a raw ICMP socket where ICMP datagram sockets are not
    // open to its group.
    // SAFETY: geteuid only reads the process's credentials.
    let allowed = (r[0] <= gid && gid <= r[1]) || unsafe { libc::geteuid() } == 0;
    let json = tmp("path", "icmp.json");
    let (code, out, err) = run(&[
        "ping",
        "127.0.0.1",
        "-M",
        "icmp",
        "-c",
        "3",
        "-i",
        "20ms",
        "--json",
        json.to_str().unwrap(),
    ]);
    if allowed {
        assert_eq!(code, Some(0), "{out}{err}");
        let p = &result_doc(&json)["ping"];
        assert_eq!(
            (p["method"].as_str(), p["received"].as_u64()),
            (Some("icmp"), Some(3)),
            "{p}"
        );
        assert_eq!(
            p["replies"][0]["bytes"], 64,
            "56 data bytes and the 8-byte header"
        );
        assert!(out.contains("64 bytes: icmp_seq=1"), "{out}");
    } else {
        assert_eq!(code, Some(3), "{out}{err}");
        assert!(err.contains("net.ipv4.ping_group_range"), "{err}");
        // The failed run still leaves its document, with the reason.
        let doc = result_doc(&json);
        assert_eq!(doc["end"], "failed");
        assert!(doc["error"]["message"]
            .as_str()
            .unwrap()
            .contains("ICMP echo sockets are not open"));
    }
}
