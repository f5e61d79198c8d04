//! The echo and ttcp kinds as documents: `--print-spec` writes what the
//! flags describe, `goodput run` runs it the same way against a real peer
//! on loopback, and every rule reads the same from a file as from flags.

mod common;

use std::path::Path;
use std::process::Stdio;

use common::*;

fn run(args: &[&str]) -> (Option<i32>, String, String) {
    let out = goodput().args(args).stdin(Stdio::null()).output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn read(json: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(json).unwrap()).unwrap()
}

/// The settings banner: the console's lines before the status legend.
fn banner(stdout: &str) -> String {
    stdout.split("Legend:").next().unwrap_or("").to_owned()
}

/// `goodput server` on loopback with the given service ports (flag, port),
/// once every one of them listens.
fn services_server(ports: &[(&str, u16)]) -> Reaped {
    let mut c = goodput();
    c.args(["server", "--listen", "127.0.0.1", "--port"])
        .arg(free_tcp_port().to_string())
        .args(["--status-interval", "1h", "-v", "1"]);
    for (flag, port) in ports {
        c.arg(flag).arg(port.to_string());
    }
    let server = Reaped::spawn(c);
    for &(_, port) in ports {
        wait_tcp_listening(port);
    }
    server
}

/// `flags` → `--print-spec` → the document; the document as JSON text.
fn print_spec(kind: &str, flags: &[&str]) -> (serde_json::Value, String) {
    let (code, out, err) = run(&[&[kind], flags, &["--print-spec"]].concat());
    assert_eq!(code, Some(0), "{flags:?}: {err}");
    let doc: serde_json::Value = serde_json::from_str(&out).expect("--print-spec prints JSON alone");
    assert_eq!(doc["kind"], kind);
    (doc, out)
}

/// Each rule: the flags' message, then the same rule through a file.
fn rules_read_the_same(kind: &str, base: &[&str], cases: &[(&[&str], &str, &str, &str)]) {
    for (i, (flags, flag_says, fields, file_says)) in cases.iter().enumerate() {
        let (code, _, err) = run(&[&[kind], base, flags].concat());
        assert_eq!(code, Some(2), "{flags:?}: {err}");
        assert!(err.contains(flag_says), "{flags:?}: {err}");
        let spec = tmp("specs-et", &format!("{kind}-rule{i}.json"));
        std::fs::write(&spec, format!(r#"{{"kind": "{kind}", {fields}}}"#)).unwrap();
        let (code, _, err) = run(&["run", spec.to_str().unwrap()]);
        assert_eq!(code, Some(2), "{fields}: {err}");
        assert!(err.contains(file_says), "{fields}: {err}");
        assert!(!err.trim_end().contains('\n'), "{fields}: one line: {err}");
    }
}

#[test]
fn an_echo_spec_runs_as_its_flags_do() {
    let port = free_tcp_port();
    let server = services_server(&[("--echo-port", port)]);
    let target = format!("127.0.0.1:{port}");
    let flags: &[&str] = &[
        &target,
        "--connections",
        "6",
        "--messages",
        "3",
        "--message-rate",
        "10ms",
        "--message-size",
        "300",
        "--batch-size",
        "3",
        "--batch-delay",
        "20",
        "--hold",
        "-4",
    ];
    let (doc, text) = print_spec("echo", flags);
    assert_eq!(doc["message_size"], "300", "{doc}");
    assert_eq!(doc["family"], "ipv4");
    assert_eq!(doc["hold"], true);
    let spec = tmp("specs-et", "echo.json");
    std::fs::write(&spec, &text).unwrap();
    let by_flags = tmp("specs-et", "echo-flags.json");
    let by_file = tmp("specs-et", "echo-file.json");
    let (c1, o1, e1) = run(&[
        &["echo"],
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
    assert!(
        banner(&o1).contains("3 per connection, 300 B each, every 10 ms"),
        "{o1}"
    );
    assert!(banner(&o1).contains("in batches of 3 every 20 ms"), "{o1}");
    assert_eq!(banner(&o1), banner(&o2));
    let (a, b) = (read(&by_flags), read(&by_file));
    assert_eq!(a["settings"], b["settings"]);
    assert_eq!(a["spec"], doc, "the result carries the spec it ran");
    assert_eq!(b["spec"], doc);
    assert_eq!(b["echo"]["echoed"], 18);
    // The result document runs again.
    let again = tmp("specs-et", "echo-again.json");
    let (code, _, err) = run(&[
        "run",
        by_file.to_str().unwrap(),
        "-v",
        "0",
        "--json",
        again.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(read(&again)["spec"], doc);
    let (code, _, _) = server.stop(libc::SIGINT);
    assert_eq!(code, Some(0));
}

#[test]
fn every_echo_rule_reads_the_same_from_a_file() {
    let cases: [(&[&str], &str, &str, &str); 5] = [
        (
            &["--message-size", "0"],
            "--message-size must be between 1 byte and 16 MiB",
            r#""target": "h", "message_size": 0"#,
            "echo.message_size: must be between 1 byte and 16 MiB",
        ),
        (
            &["--message-size", "17MiB"],
            "--message-size must be between 1 byte and 16 MiB",
            r#""target": "h", "message_size": "17MiB""#,
            "echo.message_size: must be between 1 byte and 16 MiB",
        ),
        (
            &["--messages", "3", "--message-rate", "0"],
            "--message-rate 0 with an open-loop schedule would send every message at once; give a rate or --send-after-recv",
            r#""target": "h", "messages": 3, "message_rate": 0"#,
            "echo.message_rate: 0 with an open-loop schedule would send every message at once; give a rate or `send_after_recv`",
        ),
        (
            &["--status-interval", "5ms"],
            "--status-interval must be at least 10ms",
            r#""target": "h", "status_interval": "5ms""#,
            "echo.status_interval: must be at least 10ms",
        ),
        (
            &["--tls"],
            "--tls needs --ca FILE (the CA that signed the server's certificate) or --insecure",
            r#""target": "h", "tls": true"#,
            "echo.tls: needs `ca` FILE (the CA that signed the server's certificate) or `insecure`",
        ),
    ];
    rules_read_the_same("echo", &["127.0.0.1:7"], &cases);
    // What clap checks for the flags, the spec checks itself.
    for (fields, says) in [
        (r#""target": """#, "echo.target: is required"),
        (
            r#""target": "h", "connections": 0"#,
            "echo.connections: must be 1-1000000",
        ),
        (
            r#""target": "h", "batch_size": 0"#,
            "echo.batch_size: must be at least 1",
        ),
        (r#""target": "h", "sni": "x""#, "echo.sni: needs `tls`"),
        (
            r#""target": "h", "tls": true, "insecure": true, "ca": "/x.pem""#,
            "echo.insecure: cannot be used with `ca`",
        ),
        (
            r#""target": "h", "conections": 3"#,
            "echo.conections: unknown field, did you mean connections?",
        ),
    ] {
        let f = tmp("specs-et", "echo-rule.json");
        std::fs::write(&f, format!(r#"{{"kind": "echo", {fields}}}"#)).unwrap();
        let (code, _, err) = run(&["run", f.to_str().unwrap()]);
        assert_eq!(code, Some(2), "{fields}: {err}");
        assert!(err.contains(says), "{fields}: {err}");
    }
    // --pause with no terminal and no --hold-for: the same from a file.
    let f = tmp("specs-et", "echo-pause.json");
    std::fs::write(&f, r#"{"kind": "echo", "target": "127.0.0.1:7", "pause": true}"#).unwrap();
    let (code, _, err) = run(&["run", f.to_str().unwrap()]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("standard input is not a terminal"), "{err}");
}

/// flags → `--print-spec` → `goodput run` → the result's `spec`: the same
/// document all the way (a closed port: every connection is refused).
#[test]
fn echo_flags_round_trip_through_their_spec() {
    let target = format!("127.0.0.1:{}", free_tcp_port());
    let flags: &[&str] = &[
        &target,
        "--connections",
        "3",
        "--batch-size",
        "2",
        "--batch-delay",
        "25",
        "--messages",
        "9",
        "--message-size",
        "4KiB",
        "--message-rate",
        "0",
        "--send-after-recv",
        "--sync-connect",
        "--pause",
        "--hold-for",
        "100ms",
        "--preallocate",
        "--tls",
        "--insecure",
        "--sni",
        "echo.example",
        "--connect-timeout",
        "3s",
        "--reply-timeout",
        "1500ms",
        "-4",
        "--status-interval",
        "200ms",
    ];
    let (doc, text) = print_spec("echo", flags);
    assert_eq!(doc["sni"], "echo.example");
    assert_eq!(doc["hold_for"], "100ms");
    assert_eq!(doc["message_size"], "4KiB");
    assert_eq!(doc["reply_timeout"], "1500ms");
    let spec = tmp("specs-et", "echo-round.json");
    std::fs::write(&spec, &text).unwrap();
    let result = tmp("specs-et", "echo-round-result.json");
    let (code, _, err) = run(&[
        "run",
        spec.to_str().unwrap(),
        "-v",
        "0",
        "--json",
        result.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(1), "refused connections fail: {err}");
    assert_eq!(read(&result)["spec"], doc);
}
