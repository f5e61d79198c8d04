//! Tests as documents: `--print-spec` writes what the flags describe,
//! `goodput run` runs it the same way, and a bad document gets the same
//! clear, one-line error as a bad flag (exit 2).

mod common;

use common::*;

#[test]
fn a_spec_from_flags_runs_as_the_flags_do() {
    let cases: [&[&str]; 4] = [
        &[
            "--transfer",
            "1MB",
            "--connections",
            "3",
            "--rate-limit",
            "25Mbit",
        ],
        &[
            "--pattern",
            "pushpull",
            "--transfer",
            "256KiB",
            "--push-bytes",
            "16KiB",
            "--pull-bytes",
            "32KiB",
            "-c",
            "2",
        ],
        &[
            "--pattern",
            "duplex",
            "--duration",
            "1s",
            "--omit",
            "200ms",
            "-c",
            "2",
        ],
        &[
            "--pattern",
            "duplex",
            "--transfer",
            "64KiB..128KiB",
            "--buffer",
            "4KiB..8KiB",
            "-c",
            "4",
            "-n",
            "2",
            "--shutdown",
            "rude",
        ],
    ];
    for (i, flags) in cases.iter().enumerate() {
        let spec = tmp("specs", &format!("case{i}.json"));
        let (code, out, err) = run(&[&["tcp"], *flags, &["--print-spec"]].concat());
        assert_eq!(code, Some(0), "{err}");
        std::fs::write(&spec, &out).unwrap();
        let doc = spec_doc(&out);
        assert_eq!(doc["kind"], "tcp");

        let by_flags = tmp("specs", &format!("flags{i}.json"));
        let by_file = tmp("specs", &format!("file{i}.json"));
        let (c1, o1, e1) = run(&[
            &["tcp"],
            *flags,
            &["-v", "1", "--json", by_flags.to_str().unwrap()],
        ]
        .concat());
        let (c2, o2, e2) = run(&[
            "run",
            spec.to_str().unwrap(),
            "-v",
            "1",
            "--json",
            by_file.to_str().unwrap(),
        ]);
        assert_eq!((c1, c2), (Some(0), Some(0)), "{e1}\n{e2}");
        assert!(banner(&o1).contains("goodput tcp: configured settings"), "{o1}");
        assert_eq!(banner(&o1), banner(&o2), "case {i}: the same banner");
        assert_eq!(
            settings(&by_flags),
            settings(&by_file),
            "case {i}: the same settings"
        );
    }
}

#[test]
fn every_rule_reads_the_same_from_a_file_as_from_flags() {
    // (flags, the flag path's message, spec fields, the file path's message)
    let cases: [(&[&str], &str, &str, &str); 13] = [
        (
            &["-c", "0"],
            "--connections must be at least 1",
            r#""connections": 0"#,
            "tcp.connections: must be at least 1",
        ),
        (
            &["--transfer", "0"],
            "--transfer must be at least 1 byte",
            r#""transfer": 0"#,
            "tcp.transfer: must be at least 1 byte",
        ),
        (
            &["--buffer", "128MiB"],
            "--buffer must be between 1 byte and 64 MiB",
            r#""buffer": "128MiB""#,
            "tcp.buffer: must be between 1 byte and 64 MiB",
        ),
        (
            &["--pattern", "pushpull", "--push-bytes", "0"],
            "--push-bytes and --pull-bytes must be at least 1 byte",
            r#""pattern": "push_pull", "push_bytes": 0"#,
            "tcp.push_bytes: and `pull_bytes` must be at least 1 byte",
        ),
        (
            &["--rate-limit", "1", "--rate-period", "1ms"],
            "--rate-limit 1 B/s (8.00 bit/s) with --rate-period 1 ms gives less than one byte per period",
            r#""rate_limit": 1, "rate_period": "1ms""#,
            "tcp.rate_limit: 1 B/s (8.00 bit/s) with `rate_period` 1 ms gives less than one byte per period",
        ),
        (
            &["--rate-period", "0s"],
            "--rate-period must be above zero",
            r#""rate_period": "0s""#,
            "tcp.rate_period: must be above zero",
        ),
        (
            &["--local-port", "5000..5001", "-c", "4"],
            "--local-port range has 2 ports, fewer than --connections 4",
            r#""local_port": "5000..5001", "connections": 4"#,
            "tcp.local_port: range has 2 ports, fewer than `connections` 4",
        ),
        (
            &["--status-interval", "1ms"],
            "--status-interval must be at least 10ms",
            r#""status_interval": "1ms""#,
            "tcp.status_interval: must be at least 10ms",
        ),
        (
            &["--idle-timeout", "0s"],
            "--idle-timeout must be above zero",
            r#""idle_timeout": 0"#,
            "tcp.idle_timeout: must be above zero",
        ),
        (
            &["--duration", "0s"],
            "--duration must be above zero",
            r#""duration": "0s""#,
            "tcp.duration: must be above zero",
        ),
        (
            &["--duration", "5s", "--pattern", "pushpull"],
            "--duration cannot time push_pull, which moves its bytes in segments: give --transfer",
            r#""duration": "5s", "pattern": "push_pull""#,
            "tcp.duration: cannot time push_pull, which moves its bytes in segments: give `transfer`",
        ),
        (
            &["--duration", "5s", "--wire", "cts"],
            "--duration needs the goodput wire: ctsTraffic's protocol has no timed end",
            r#""duration": "5s", "wire": "cts""#,
            "tcp.duration: needs the goodput wire: ctsTraffic's protocol has no timed end",
        ),
        (
            &["--duration", "5s", "--omit", "5s"],
            "--omit must be shorter than --duration",
            r#""duration": "5s", "omit": "5s""#,
            "tcp.omit: must be shorter than `duration`",
        ),
    ];
    for (i, (flags, flag_says, fields, file_says)) in cases.iter().enumerate() {
        let (code, _, err) = run(&[&["tcp"], *flags].concat());
        assert_eq!(code, Some(2), "{flags:?}: {err}");
        assert!(err.contains(flag_says), "{flags:?}: {err}");
        let spec = tmp("specs", &format!("rule{i}.json"));
        std::fs::write(&spec, format!(r#"{{"kind": "tcp", {fields}}}"#)).unwrap();
        let (code, _, err) = run(&["run", spec.to_str().unwrap()]);
        assert_eq!(code, Some(2), "{fields}: {err}");
        assert!(err.contains(file_says), "{fields}: {err}");
    }
}

#[test]
fn a_bad_document_gets_one_line_naming_the_place() {
    let cases = [
        (
            "unknown.json",
            r#"{"kind": "tcp", "conections": 5}"#,
            "tcp.conections: unknown field, did you mean connections?",
        ),
        (
            "type.json",
            r#"{"kind": "tcp", "connections": "many"}"#,
            "tcp.connections: invalid type: string \"many\", expected u64",
        ),
        (
            "negative.json",
            r#"{"kind": "tcp", "transfer": -1}"#,
            "tcp.transfer: -1 is negative",
        ),
        (
            "kind.json",
            r#"{"kind": "ftp"}"#,
            "kind: unknown kind 'ftp'; one of tcp",
        ),
        ("bad.toml", "kind = \"tcp\"\nconnections = [", "not valid TOML:"),
        ("bad.json", "{\"kind\": ", "not valid JSON:"),
        (
            "many.json",
            r#"{"tests": [{"kind": "tcp"}, {"kind": "tcp", "iterations": -2}]}"#,
            "tests[1].tcp.iterations:",
        ),
    ];
    for (name, text, says) in cases {
        let path = tmp("specs", name);
        std::fs::write(&path, text).unwrap();
        let (code, out, err) = run(&["run", path.to_str().unwrap()]);
        assert_eq!(code, Some(2), "{name}: {out}\n{err}");
        let line = err.trim_end();
        assert!(!line.contains('\n'), "{name}: one line: {err}");
        assert!(line.contains(says), "{name}: {err}");
        assert!(
            line.contains(path.to_str().unwrap()),
            "{name}: names the file: {err}"
        );
    }
    let (code, _, err) = run(&["run", "/nonexistent-goodput/spec.json"]);
    assert_eq!(code, Some(3), "{err}");
}

#[test]
fn a_toml_document_runs_its_tests_in_order_each_with_its_own_files() {
    let doc = tmp("specs", "two.toml");
    std::fs::write(
        &doc,
        r#"
[[tests]]
kind = "tcp"
transfer = "256KiB"
connections = 2

[[tests]]
kind = "tcp"
pattern = "pull"
transfer = "128KiB"
connections = 3
"#,
    )
    .unwrap();
    let json = tmp("specs", "two.json");
    let (code, out, err) = run(&[
        "run",
        doc.to_str().unwrap(),
        "-v",
        "1",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0), "{out}\n{err}");
    let read = |n: u32| -> serde_json::Value {
        let p = json.with_file_name(format!("two-{n}.json"));
        result_doc(&p)
    };
    let (a, b) = (read(1), read(2));
    assert_eq!(a["summary"]["successful"], 2);
    assert_eq!(a["summary"]["sent_bytes"], 2 * 256 * 1024);
    assert_eq!(b["summary"]["successful"], 3);
    assert_eq!(b["summary"]["received_bytes"], 3 * 128 * 1024);
    assert_eq!(
        out.matches("goodput tcp: configured settings").count(),
        2,
        "{out}"
    );
}

#[test]
fn committed_spec_schema_matches_the_spec_model() {
    let (code, out, _) = run(&["schema", "--spec"]);
    assert_eq!(code, Some(0));
    let committed =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../schema/spec-v1.json")).unwrap();
    assert_eq!(
        out, committed,
        "schema/spec-v1.json is stale: regenerate it with `goodput schema --spec > schema/spec-v1.json`"
    );
    let schema: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(schema.to_string().contains("\"tcp\""));
}

#[test]
fn a_result_carries_its_spec_and_runs_again() {
    let first = tmp("specs", "first.json");
    let again = tmp("specs", "again.json");
    let (code, _, err) = run(&[
        "tcp",
        "--transfer",
        "300KB",
        "-c",
        "3",
        "--pattern",
        "pull",
        "-v",
        "0",
        "--json",
        first.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0), "{err}");
    let a = result_doc(&first);
    assert_eq!(a["spec"]["kind"], "tcp");
    assert_eq!(a["spec"]["transfer"], "300KB");
    assert_eq!(a["spec"]["pattern"], "pull");
    // The result document itself is something goodput run takes.
    let (code, _, err) = run(&[
        "run",
        first.to_str().unwrap(),
        "-v",
        "0",
        "--json",
        again.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0), "{err}");
    let b = result_doc(&again);
    assert_eq!(a["spec"], b["spec"]);
    assert_eq!(b["summary"]["received_bytes"], 3 * 300_000);
    // A result without its spec (an older one, or another kind) says so.
    let bare = tmp("specs", "bare.json");
    std::fs::write(&bare, r#"{"schema_version": 1, "kind": "tcp_client"}"#).unwrap();
    let (code, _, err) = run(&["run", bare.to_str().unwrap()]);
    assert_eq!(code, Some(2));
    assert!(err.contains("does not carry the test it ran"), "{err}");
}

#[test]
fn a_stamp_spec_runs_as_its_flags_do() {
    let flags: &[&str] = &["-c", "30", "-i", "5ms", "--size", "100", "--sessions", "2"];
    let spec = tmp("specs", "stamp.json");
    let (code, out, err) = run(&[&["stamp"], flags, &["--print-spec"]].concat());
    assert_eq!(code, Some(0), "{err}");
    std::fs::write(&spec, &out).unwrap();
    let by_flags = tmp("specs", "stamp-flags.json");
    let by_file = tmp("specs", "stamp-file.json");
    let (c1, o1, e1) = run(&[
        &["stamp"],
        flags,
        &["-v", "1", "--json", by_flags.to_str().unwrap()],
    ]
    .concat());
    let (c2, o2, e2) = run(&[
        "run",
        spec.to_str().unwrap(),
        "-v",
        "1",
        "--json",
        by_file.to_str().unwrap(),
    ]);
    assert_eq!((c1, c2), (Some(0), Some(0)), "{e1}\n{e2}");
    let head = |o: &str| without_ports(o.split("Legend:").next().unwrap_or(""));
    assert!(head(&o1).contains("100 B every 5.000 ms"), "{o1}");
    assert_eq!(head(&o1), head(&o2));
    assert_eq!(settings(&by_flags), settings(&by_file));
    let r = result_doc(&by_file);
    assert_eq!(r["spec"]["kind"], "stamp");
    assert_eq!(r["stamp"]["total"]["sent"], 60, "{}", r["stamp"]["total"]);
    assert_eq!(r["stamp"]["packet_bytes"], 100);
    // Rules read the same from a file.
    for (fields, says) in [
        (r#""rate": 0"#, "stamp.rate: must be above 0"),
        (r#""size": 10"#, "stamp.size: must be 44..=9000 bytes"),
        (
            r#""host": "192.0.2.1", "stateful": true"#,
            "stamp.stateful: configures the embedded reflector",
        ),
        (
            r#""rate": 5, "interval": "1s""#,
            "stamp.interval: cannot be used with `rate`",
        ),
    ] {
        let f = tmp("specs", "stamp-rule.json");
        std::fs::write(&f, format!(r#"{{"kind": "stamp", {fields}}}"#)).unwrap();
        let (code, _, err) = run(&["run", f.to_str().unwrap()]);
        assert_eq!(code, Some(2), "{fields}: {err}");
        assert!(err.contains(says), "{fields}: {err}");
    }
}

#[test]
fn an_iperf3_spec_runs_as_its_flags_do() {
    let flags: &[&str] = &["-t", "1", "-P", "2", "-l", "64K", "-i", "500ms"];
    let spec = tmp("specs", "iperf3.json");
    let (code, out, err) = run(&[&["iperf3"], flags, &["--print-spec"]].concat());
    assert_eq!(code, Some(0), "{err}");
    let doc = spec_doc(&out);
    assert_eq!(doc["kind"], "iperf3");
    assert_eq!(doc["length"], "64KiB");
    assert_eq!(doc["time"], "1s");
    std::fs::write(&spec, &out).unwrap();
    let by_flags = tmp("specs", "iperf3-flags.json");
    let by_file = tmp("specs", "iperf3-file.json");
    let (c1, o1, e1) = run(&[&["iperf3"], flags, &["--json", by_flags.to_str().unwrap()]].concat());
    let (c2, o2, e2) = run(&["run", spec.to_str().unwrap(), "--json", by_file.to_str().unwrap()]);
    assert_eq!((c1, c2), (Some(0), Some(0)), "{e1}\n{e2}");
    let head = |o: &str| without_ports(o.split("Legend:").next().unwrap_or(""));
    assert!(head(&o1).contains("2 per direction"), "{o1}");
    assert!(head(&o1).contains("65536 B"), "{o1}");
    assert_eq!(head(&o1), head(&o2));
    assert_eq!(settings(&by_flags), settings(&by_file));
    let r = result_doc(&by_file);
    assert_eq!(r["spec"], doc);
    assert_eq!(r["settings"]["buffer_bytes"]["lo"], 65536);
    // Rules read the same from a file as from the flags: the flag's
    // message names the flag, the file's names the field.
    for (flags, fields, by_flag, by_file) in [
        (
            &["-t", "0"][..],
            r#""time": 0"#,
            "--time must be at least 1 second",
            "iperf3.time: must be at least 1 second",
        ),
        (
            &["-l", "5G"][..],
            r#""length": "5G""#,
            "--length is too large",
            "iperf3.length: is too large",
        ),
        (
            &["-i", "1ms"][..],
            r#""interval": "1ms""#,
            "--interval must be at least 10ms",
            "iperf3.interval: must be at least 10ms",
        ),
    ] {
        let (code, _, err) = run(&[&["iperf3"], flags].concat());
        assert_eq!(code, Some(2), "{flags:?}: {err}");
        assert!(err.contains(by_flag), "{flags:?}: {err}");
        let f = tmp("specs", "iperf3-rule.json");
        std::fs::write(&f, format!(r#"{{"kind": "iperf3", {fields}}}"#)).unwrap();
        let (code, _, err) = run(&["run", f.to_str().unwrap()]);
        assert_eq!(code, Some(2), "{fields}: {err}");
        assert!(err.contains(by_file), "{fields}: {err}");
    }
    for (fields, says) in [
        (r#""time": "1.5s""#, "iperf3.time: must be whole seconds"),
        (
            r#""reverse": true, "bidir": true"#,
            "iperf3.reverse: cannot be used with `bidir`",
        ),
    ] {
        let f = tmp("specs", "iperf3-rule2.json");
        std::fs::write(&f, format!(r#"{{"kind": "iperf3", {fields}}}"#)).unwrap();
        let (code, _, err) = run(&["run", f.to_str().unwrap()]);
        assert_eq!(code, Some(2), "{fields}: {err}");
        assert!(err.contains(says), "{fields}: {err}");
    }
}

/// Debian's iperf3 server runs a test from a document as from the flags.
#[test]
fn an_iperf3_document_runs_against_stock_iperf3() {
    if !have("iperf3", &["--version"], "apt-get install iperf3") {
        return;
    }
    let port = free_tcp_port();
    let server = Reaped::spawn({
        let mut c = std::process::Command::new("iperf3");
        c.args(["-s", "-1", "-p", &port.to_string()]);
        c
    });
    wait_tcp_listening(port);
    let spec = tmp("specs", "iperf3-stock.toml");
    std::fs::write(
        &spec,
        format!("kind = \"iperf3\"\nhost = \"127.0.0.1\"\nport = {port}\nbytes = \"8M\"\nreverse = true\n"),
    )
    .unwrap();
    let json = tmp("specs", "iperf3-stock-result.json");
    let (code, out, err) = run(&["run", spec.to_str().unwrap(), "--json", json.to_str().unwrap()]);
    drop(server);
    assert_eq!(code, Some(0), "{out}{err}");
    let r = result_doc(&json);
    assert_eq!(r["spec"]["bytes"], "8MiB");
    assert_eq!(r["summary"]["received_bytes"], 8 << 20, "{}", r["summary"]);
}

/// A run that cannot start is still a result: `failed`, with its reason
/// and its spec, in --json; the exit status stays what it was.
#[test]
fn a_run_that_cannot_start_leaves_a_failed_result() {
    // Nothing listens: the iperf3 client cannot connect (exit 1).
    let closed = free_tcp_port().to_string();
    let json = tmp("specs", "failed-iperf3.json");
    let (code, _, err) = run(&[
        "iperf3",
        "127.0.0.1",
        "-p",
        &closed,
        "-t",
        "1",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(1), "{err}");
    let r = result_doc(&json);
    assert_eq!(r["end"], "failed", "{r}");
    assert_eq!(r["kind"], "iperf3_client");
    assert_eq!(r["spec"]["port"].to_string(), closed);
    assert_eq!(r["error"]["stage"], "test", "the server refused: {r}");
    assert!(!r["error"]["message"].as_str().unwrap().is_empty(), "{r}");
    // A name that cannot resolve (RFC 6761's .invalid): exit 3.
    let json = tmp("specs", "failed-stamp.json");
    let (code, _, err) = run(&[
        "stamp",
        "reflector.invalid",
        "-c",
        "3",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(3), "{err}");
    let r = result_doc(&json);
    assert_eq!(r["end"], "failed", "{r}");
    assert_eq!(r["spec"]["kind"], "stamp");
    assert_eq!(r["error"]["stage"], "setup", "{r}");
    let reason = r["error"]["message"].as_str().unwrap();
    assert!(
        err.contains(reason),
        "the document's reason is the error printed: {reason} / {err}"
    );
    assert!(r["connections"].as_array().unwrap().is_empty());
}

/// The server is a document too: `goodput run` serves what `goodput
/// server`'s flags describe, and its result carries the spec.
#[test]
fn a_server_spec_serves_as_its_flags_do() {
    let port = free_tcp_port().to_string();
    let discard = free_tcp_port();
    let discard_port = discard.to_string();
    let flags: &[&str] = &[
        "--port",
        &port,
        "--listen",
        "127.0.0.1",
        "--exit-after",
        "2",
        "--no-udp",
        "--discard-port",
        &discard_port,
    ];
    let (code, out, err) = run(&[&["server"], flags, &["--print-spec"]].concat());
    assert_eq!(code, Some(0), "{err}");
    let doc = spec_doc(&out);
    assert_eq!(doc["kind"], "server");
    assert_eq!(doc["exit_after"], 2);
    assert_eq!(doc["listen"][0], "127.0.0.1");
    let spec = tmp("specs", "server.json");
    std::fs::write(&spec, &out).unwrap();
    let json = tmp("specs", "server-result.json");
    let server = Reaped::spawn({
        let mut c = goodput();
        c.args([
            "run",
            spec.to_str().unwrap(),
            "-v",
            "1",
            "--json",
            json.to_str().unwrap(),
        ]);
        c
    });
    wait_tcp_listening(port.parse().unwrap());
    wait_tcp_listening(discard);
    // The discard service's counters reach the result document.
    {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(("127.0.0.1", discard)).unwrap();
        s.write_all(&[7u8; 12_345]).unwrap();
        s.shutdown(std::net::Shutdown::Write).unwrap();
        // The service closes its end once it has read everything.
        let _ = s.read(&mut [0u8; 1]);
    }
    let (code, _, err) = run(&[
        "tcp",
        "127.0.0.1",
        "-p",
        &port,
        "-c",
        "2",
        "--transfer",
        "1MB",
        "-v",
        "0",
    ]);
    assert_eq!(code, Some(0), "{err}");
    let (code, out, err) = server.wait(std::time::Duration::from_secs(10));
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("Exit count reached"), "{out}");
    let r = result_doc(&json);
    assert_eq!(r["kind"], "tcp_server");
    assert_eq!(r["spec"], doc);
    assert_eq!(r["summary"]["received_bytes"], 2_000_000, "{}", r["summary"]);
    assert_eq!(r["services"]["discard_connections"], 1, "{}", r["services"]);
    assert_eq!(r["services"]["discard_bytes"], 12_345, "{}", r["services"]);
    // The server's rules read the same from a file as from its flags.
    for (flags, fields, by_flag, by_file) in [
        (
            &["--udp-max-length", "1.5s"][..],
            r#""udp_max_length": "1.5s""#,
            "--udp-max-length must be a whole number of seconds",
            "server.udp_max_length: must be a whole number of seconds",
        ),
        (
            &["--max-pending", "0"][..],
            r#""max_pending": 0"#,
            "--max-pending must be at least 1",
            "server.max_pending: must be at least 1",
        ),
        (
            &["--listen", "nowhere"][..],
            r#""listen": ["nowhere"]"#,
            "--listen 'nowhere': expected an IP address",
            "server.listen: 'nowhere': expected an IP address",
        ),
        (
            &["--wire", "cts", "--transfer", "1M..2M"][..],
            r#""wire": "cts", "transfer": "1M..2M""#,
            "--wire cts needs a single --transfer and --buffer",
            "server.wire: cts needs a single `transfer` and `buffer`",
        ),
    ] {
        let (code, _, err) = run(&[&["server"], flags].concat());
        assert_eq!(code, Some(2), "{flags:?}: {err}");
        assert!(err.contains(by_flag), "{flags:?}: {err}");
        let f = tmp("specs", "server-rule.json");
        std::fs::write(&f, format!(r#"{{"kind": "server", {fields}}}"#)).unwrap();
        let (code, _, err) = run(&["run", f.to_str().unwrap()]);
        assert_eq!(code, Some(2), "{fields}: {err}");
        assert!(err.contains(by_file), "{fields}: {err}");
    }
}

/// The schema check the tests above rely on does refuse what the schema
/// does not allow.
#[test]
fn the_committed_spec_schema_refuses_a_bad_document() {
    let schema: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../schema/spec-v1.json")).unwrap(),
    )
    .unwrap();
    let v = jsonschema::validator_for(&schema).unwrap();
    assert!(v.is_valid(&serde_json::json!({"kind": "tcp", "connections": 3})));
    assert!(!v.is_valid(&serde_json::json!({"kind": "tcp", "connections": "many"})));
    assert!(!v.is_valid(&serde_json::json!({"kind": "tcp", "conections": 3})));
    assert!(!v.is_valid(&serde_json::json!({"kind": "bogus"})));
    assert!(!v.is_valid(&serde_json::json!({"kind": "iperf3", "parallel": -1})));
    assert!(!v.is_valid(&serde_json::json!({"kind": "tcp", "socket": {"no_dlay": true}})));
    assert!(v.is_valid(&serde_json::json!({"tests": [{"kind": "tcp"}, {"kind": "server", "stamp": true}]})));
    assert!(!v.is_valid(&serde_json::json!({"tests": [{"kind": "tcp"}], "extra": 1})));
}

/// The flags' defaults and the spec's defaults are one set: for every kind,
/// what the command prints with no flags (beyond the required ones) is what
/// `goodput run --print-spec` prints for a document with no fields (beyond
/// the same ones).
#[test]
fn every_kind_defaults_as_its_flags_do() {
    let cases: [(&[&str], &str); 8] = [
        (&["tcp"], r#"{"kind": "tcp"}"#),
        (&["udp"], r#"{"kind": "udp"}"#),
        (&["quic"], r#"{"kind": "quic"}"#),
        (&["stamp"], r#"{"kind": "stamp"}"#),
        (&["iperf3"], r#"{"kind": "iperf3"}"#),
        (
            &["echo", "192.0.2.7"],
            r#"{"kind": "echo", "target": "192.0.2.7"}"#,
        ),
        (
            &["ttcp", "-t", "192.0.2.7"],
            r#"{"kind": "ttcp", "role": "transmit", "host": "192.0.2.7"}"#,
        ),
        (&["server"], r#"{"kind": "server"}"#),
    ];
    for (flags, document) in cases {
        let (code, by_flags, err) = run(&[flags, &["--print-spec"]].concat());
        assert_eq!(code, Some(0), "{flags:?}: {err}");
        let f = tmp("specs", &format!("defaults-{}.json", flags[0]));
        std::fs::write(&f, document).unwrap();
        let (code, by_file, err) = run(&["run", f.to_str().unwrap(), "--print-spec"]);
        assert_eq!(code, Some(0), "{document}: {err}");
        assert_eq!(spec_doc(&by_flags), spec_doc(&by_file), "{flags:?}");
    }
    // Several tests print as a document of several.
    let f = tmp("specs", "defaults-two.toml");
    std::fs::write(&f, "[[tests]]\nkind = \"tcp\"\n[[tests]]\nkind = \"stamp\"\n").unwrap();
    let (code, out, err) = run(&["run", f.to_str().unwrap(), "--print-spec"]);
    assert_eq!(code, Some(0), "{err}");
    let doc = spec_doc(&out);
    assert_eq!(doc["tests"][1]["kind"], "stamp", "{doc}");
}

/// OWAMP and TWAMP tests are documents too: `goodput run` reads them
/// with owping's and twping's defaults, and a run that cannot start
/// leaves a failed result of their own kind carrying the spec.
#[test]
fn owamp_and_twamp_documents_print_with_their_defaults_and_fail_as_their_kind() {
    let f = tmp("specs", "latency-kinds.toml");
    std::fs::write(
        &f,
        "[[tests]]\nkind = \"owamp\"\nhost = \"owampd.invalid\"\ndirection = \"to\"\n\
         [[tests]]\nkind = \"twamp\"\nhost = \"twampd.invalid\"\n",
    )
    .unwrap();
    let (code, out, err) = run(&["run", f.to_str().unwrap(), "--print-spec"]);
    assert_eq!(code, Some(0), "{err}");
    let doc = spec_doc(&out);
    let (o, t) = (&doc["tests"][0], &doc["tests"][1]);
    assert_eq!(o["kind"], "owamp", "{doc}");
    assert_eq!(
        (o["port"].as_u64(), o["count"].as_u64(), o["interval"].as_str()),
        (Some(861), Some(100), Some("100ms"))
    );
    assert_eq!(
        (o["direction"].as_str(), o["mode"].as_str()),
        (Some("to"), Some("open"))
    );
    assert_eq!(t["kind"], "twamp", "{doc}");
    assert_eq!(
        (t["port"].as_u64(), t["timeout"].as_str()),
        (Some(862), Some("2s"))
    );
    assert!(t.get("padding").is_none(), "twping's default padding: {t}");

    for (i, kind) in [(1, "owamp"), (2, "twamp")] {
        let one = tmp("specs", &format!("latency-kind-{kind}.json"));
        std::fs::write(
            &one,
            format!(r#"{{"kind": "{kind}", "host": "{kind}d.invalid", "count": 3}}"#),
        )
        .unwrap();
        let json = tmp("specs", &format!("failed-{kind}-{i}.json"));
        let (code, _, err) = run(&["run", one.to_str().unwrap(), "--json", json.to_str().unwrap()]);
        assert_eq!(code, Some(3), "{kind}: {err}");
        let r = result_doc(&json);
        assert_eq!(r["end"], "failed", "{r}");
        assert_eq!(r["kind"], format!("{kind}_client"), "{r}");
        assert_eq!(r["spec"]["kind"], kind, "{r}");
        assert_eq!(r["spec"]["count"], 3, "{r}");
        assert_eq!(r["error"]["stage"], "setup", "{r}");
        assert!(r.get(kind).is_none(), "no detail before it ran: {r}");
    }
}
