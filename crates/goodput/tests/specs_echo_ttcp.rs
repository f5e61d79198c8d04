//! The echo and ttcp kinds as documents: `--print-spec` writes what the
//! flags describe, `goodput run` runs it the same way against a real peer
//! on loopback, and every rule reads the same from a file as from flags.

mod common;

use std::fs::File;
use std::process::Stdio;
use std::time::Duration;

use common::*;

/// `flags` → `--print-spec` → the document; the document as JSON text.
fn print_spec(kind: &str, flags: &[&str]) -> (serde_json::Value, String) {
    let (code, out, err) = run(&[&[kind], flags, &["--print-spec"]].concat());
    assert_eq!(code, Some(0), "{flags:?}: {err}");
    let doc = spec_doc(&out);
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
    let (a, b) = (result_doc(&by_flags), result_doc(&by_file));
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
    assert_eq!(result_doc(&again)["spec"], doc);
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
    assert_eq!(result_doc(&result)["spec"], doc);
}

/// One end of ttcp, from flags or (`file`) from their `--print-spec`
/// document through `goodput run`, with `extra` arguments after.
fn ttcp_end(name: &str, flags: &[&str], file: bool, extra: &[&str]) -> std::process::Command {
    let mut c = goodput();
    if file {
        let (_, text) = print_spec("ttcp", flags);
        let spec = tmp("specs-et", &format!("{name}.json"));
        std::fs::write(&spec, text).unwrap();
        c.arg("run").arg(spec);
    } else {
        c.arg("ttcp").args(flags);
    }
    c.args(extra);
    c
}

/// Text with a port number taken out.
fn without(text: &str, port: u16) -> String {
    text.replace(&port.to_string(), "PORT")
}

#[test]
fn a_ttcp_spec_runs_as_its_flags_do() {
    let mut seen: Vec<(String, String, String, String)> = Vec::new();
    for file in [false, true] {
        let port = free_tcp_port();
        let p = port.to_string();
        let rj = tmp("specs-et", &format!("ttcp-r-{file}.json"));
        let tj = tmp("specs-et", &format!("ttcp-t-{file}.json"));
        let rflags: &[&str] = &["-r", "-B", "127.0.0.1", "-l", "4096", "-p", &p];
        let tflags: &[&str] = &[
            "-t",
            "127.0.0.1",
            "-l",
            "4096",
            "-n",
            "64",
            "-D",
            "-b",
            "256KiB",
            "-p",
            &p,
        ];
        let r = Reaped::spawn(ttcp_end(
            &format!("ttcp-r-{file}"),
            rflags,
            file,
            &["--json", rj.to_str().unwrap()],
        ));
        wait_tcp_listening(port);
        let out = ttcp_end(
            &format!("ttcp-t-{file}"),
            tflags,
            file,
            &["--json", tj.to_str().unwrap()],
        )
        .stdin(Stdio::null())
        .output()
        .unwrap();
        let (text, err) = (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        );
        assert_eq!(out.status.code(), Some(0), "{text}{err}");
        assert!(text.contains("ttcp-t: 262144 bytes in "), "{text}");
        let (code, rtext, rerr) = r.wait(Duration::from_secs(10));
        assert_eq!(code, Some(0), "{rtext}{rerr}");
        assert!(rtext.contains("ttcp-r: 262144 bytes in "), "{rtext}");
        let (t, r) = (result_doc(&tj), result_doc(&rj));
        assert_eq!(t["spec"]["role"], "transmit");
        assert_eq!(t["spec"]["sockbuf"], "256KiB");
        assert_eq!(r["spec"]["role"], "receive");
        assert_eq!(r["spec"]["bind"], "127.0.0.1");
        let settings = |v: &serde_json::Value| without(&v["settings"].to_string(), port);
        let spec = |v: &serde_json::Value| without(&v["spec"].to_string(), port);
        seen.push((
            without(err.lines().next().unwrap_or(""), port),
            without(rerr.lines().next().unwrap_or(""), port),
            format!("{} {}", settings(&t), settings(&r)),
            format!("{} {}", spec(&t), spec(&r)),
        ));
    }
    let (a, b) = (&seen[0], &seen[1]);
    assert!(
        a.0.starts_with("ttcp-t: buflen=4096, nbuf=64, port=PORT, sockbufsize=262144  tcp  -> 127.0.0.1"),
        "{}",
        a.0
    );
    assert_eq!(a.0, b.0, "the transmitter's banner");
    assert_eq!(a.1, b.1, "the receiver's banner");
    assert_eq!(a.2, b.2, "the same settings");
    assert_eq!(a.3, b.3, "the same spec");
}

/// `sinkmode` false from a document: the transmitter sends standard input
/// and the receiver writes what arrives to standard output, as with
/// `--sinkmode=false`.
#[test]
fn a_ttcp_spec_without_sinkmode_moves_standard_input_to_standard_output() {
    let port = free_tcp_port();
    let p = port.to_string();
    let src = tmp("specs-et", "stdin-src.bin");
    let data: Vec<u8> = (0..70_001u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 11) as u8)
        .collect();
    std::fs::write(&src, &data).unwrap();
    let sink = tmp("specs-et", "stdout-sink.bin");
    let mut rc = ttcp_end(
        "nosink-r",
        &["-r", "--sinkmode=false", "-B", "127.0.0.1", "-p", &p],
        true,
        &[],
    );
    rc.stdout(Stdio::from(File::create(&sink).unwrap()))
        .stderr(Stdio::piped());
    let r = Reaped::spawn_as_is(rc);
    wait_tcp_listening(port);
    let out = ttcp_end(
        "nosink-t",
        &["-t", "127.0.0.1", "--sinkmode=false", "-l", "4096", "-p", &p],
        true,
        &[],
    )
    .stdin(Stdio::from(File::open(&src).unwrap()))
    .output()
    .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("ttcp-t: 70001 bytes in"));
    let (code, _, err) = r.wait(Duration::from_secs(10));
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("ttcp-r: 70001 bytes in"), "{err}");
    assert_eq!(std::fs::read(&sink).unwrap(), data);
    // A document read from standard input cannot also be the data.
    let doc = tmp("specs-et", "nosink-t.json");
    let out = goodput()
        .args(["run", "-"])
        .stdin(Stdio::from(File::open(&doc).unwrap()))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("give it as a file"));
}

#[test]
fn every_ttcp_rule_reads_the_same_from_a_file() {
    let cases: [(&[&str], &str, &str, &str); 5] = [
        (
            &["-l", "0"],
            "-l must be between 1 and 67108864 bytes",
            r#""role": "transmit", "host": "h", "buflen": 0"#,
            "ttcp.buflen: must be between 1 and 67108864 bytes",
        ),
        (
            &["-u", "-l", "4"],
            "-l must be between 5 and 67108864 bytes",
            r#""role": "transmit", "host": "h", "udp": true, "buflen": 4"#,
            "ttcp.buflen: must be between 5 and 67108864 bytes",
        ),
        (
            &["-u", "-l", "65508"],
            "-l with -u must be at most 65507 bytes (one UDP datagram)",
            r#""role": "transmit", "host": "h", "udp": true, "buflen": 65508"#,
            "ttcp.buflen: with `udp` must be at most 65507 bytes (one UDP datagram)",
        ),
        (
            &["-n", "0"],
            "-n must be at least 1",
            r#""role": "transmit", "host": "h", "nbuf": 0"#,
            "ttcp.nbuf: must be at least 1",
        ),
        (
            &["-b", "4GiB"],
            "-b must be below 4 GiB",
            r#""role": "transmit", "host": "h", "sockbuf": "4GiB""#,
            "ttcp.sockbuf: must be below 4 GiB",
        ),
    ];
    rules_read_the_same("ttcp", &["-t", "127.0.0.1"], &cases);
    // What clap checks for the flags, the spec checks itself.
    for (fields, says) in [
        (r#""port": 5001"#, "ttcp.role: is required"),
        (r#""role": "transmit""#, "ttcp.host: is required to transmit"),
        (
            r#""role": "receive", "host": "h""#,
            "ttcp.host: is for the transmitter only",
        ),
        (
            r#""role": "transmit", "host": "h", "bind": "127.0.0.1""#,
            "ttcp.bind: is for the receiver only",
        ),
        (
            r#""role": "receive", "bufflen": 5"#,
            "ttcp.bufflen: unknown field, did you mean buflen?",
        ),
    ] {
        let f = tmp("specs-et", "ttcp-rule.json");
        std::fs::write(&f, format!(r#"{{"kind": "ttcp", {fields}}}"#)).unwrap();
        let (code, _, err) = run(&["run", f.to_str().unwrap()]);
        assert_eq!(code, Some(2), "{fields}: {err}");
        assert!(err.contains(says), "{fields}: {err}");
    }
}
