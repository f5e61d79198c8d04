//! The udp and quic kinds as documents: `--print-spec` writes what the
//! flags describe, `goodput run` runs it the same way, every rule reads the
//! same from a file as from the flags, and a spec written and read back is
//! the same spec.

mod common;

use common::*;

/// Runs `kind` with `flags`, and `goodput run` of what `--print-spec`
/// prints for them; both must succeed with the same banner, settings and
/// spec. Returns the banner and the file run's result.
fn flags_and_file_agree(kind: &str, name: &str, flags: &[&str]) -> (String, serde_json::Value) {
    let spec = tmp("specs-uq", &format!("{name}.json"));
    let (code, out, err) = run(&[&[kind], flags, &["--print-spec"]].concat());
    assert_eq!(code, Some(0), "{err}");
    let printed = spec_doc(&out);
    assert_eq!(printed["kind"], kind);
    std::fs::write(&spec, &out).unwrap();

    let by_flags = tmp("specs-uq", &format!("{name}-flags.json"));
    let by_file = tmp("specs-uq", &format!("{name}-file.json"));
    let (c1, o1, e1) = run(&[&[kind], flags, &["-v", "1", "--json", by_flags.to_str().unwrap()]].concat());
    let (c2, o2, e2) = run(&[
        "run",
        spec.to_str().unwrap(),
        "-v",
        "1",
        "--json",
        by_file.to_str().unwrap(),
    ]);
    assert_eq!((c1, c2), (Some(0), Some(0)), "{name}:\n{o1}{e1}\n{o2}{e2}");
    assert!(banner(&o1).contains(&format!("goodput {kind}")), "{o1}");
    assert_eq!(banner(&o1), banner(&o2), "{name}: the same banner");
    assert_eq!(
        settings(&by_flags),
        settings(&by_file),
        "{name}: the same settings"
    );
    let (a, b) = (result_doc(&by_flags), result_doc(&by_file));
    assert_eq!(a["spec"], printed, "{name}: the flags' result carries the spec");
    assert_eq!(b["spec"], printed, "{name}: the file's result carries the spec");
    (banner(&o1), b)
}

/// Each rule: the flags fail with `flag_says`, a document with `fields`
/// fails with `file_says`, both with exit status 2 on one line.
fn rules_read_the_same(kind: &str, cases: &[(&[&str], &str, &str, &str)]) {
    for (i, (flags, flag_says, fields, file_says)) in cases.iter().enumerate() {
        let (code, _, err) = run(&[&[kind], *flags].concat());
        assert_eq!(code, Some(2), "{flags:?}: {err}");
        assert!(err.contains(flag_says), "{flags:?}: {err}");
        let spec = tmp("specs-uq", &format!("{kind}-rule{i}.json"));
        std::fs::write(&spec, format!(r#"{{"kind": "{kind}", {fields}}}"#)).unwrap();
        let (code, _, err) = run(&["run", spec.to_str().unwrap()]);
        assert_eq!(code, Some(2), "{fields}: {err}");
        assert!(err.contains(file_says), "{fields}: {err}");
        assert!(!err.trim_end().contains('\n'), "{fields}: one line: {err}");
    }
}

/// `--print-spec` of `flags`, read back by `goodput run` and printed by
/// it in the result, is the same document; written as TOML it reads the
/// same too.
fn round_trips(kind: &str, name: &str, flags: &[&str]) -> serde_json::Value {
    let (code, out, err) = run(&[&[kind], flags, &["--print-spec"]].concat());
    assert_eq!(code, Some(0), "{err}");
    let printed = spec_doc(&out);
    let path = tmp("specs-uq", &format!("{name}.json"));
    std::fs::write(&path, &out).unwrap();
    let result = tmp("specs-uq", &format!("{name}-result.json"));
    let (code, o, err) = run(&[
        "run",
        path.to_str().unwrap(),
        "-v",
        "0",
        "--json",
        result.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0), "{o}{err}");
    let r = result_doc(&result);
    assert_eq!(r["spec"], printed, "{name}: JSON → spec → JSON");
    // The result document runs again, as the same spec.
    let again = tmp("specs-uq", &format!("{name}-again.json"));
    let (code, o, err) = run(&[
        "run",
        result.to_str().unwrap(),
        "-v",
        "0",
        "--json",
        again.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0), "{o}{err}");
    assert_eq!(result_doc(&again)["spec"], printed, "{name}: result → spec");
    printed
}

#[test]
fn a_udp_spec_runs_as_its_flags_do() {
    let (head, r) = flags_and_file_agree(
        "udp",
        "udp-down",
        &["--length", "1s", "-b", "2M", "-c", "2", "--frame-rate", "30"],
    );
    assert!(head.contains("2000000 b/s"), "{head}");
    assert!(head.contains("30 fps, 1 s = 30 frames"), "{head}");
    assert_eq!(r["spec"]["kind"], "udp");
    assert_eq!(r["spec"]["bitrate"], "2Mbit");
    assert_eq!(r["settings"]["connections"], 2);
    let (head, r) = flags_and_file_agree(
        "udp",
        "udp-up",
        &[
            "--length",
            "1s",
            "-b",
            "500k",
            "--upload",
            "--verify",
            "connection",
            "--datagram-size",
            "600",
            "--buffer-depth",
            "500ms",
            "-4",
        ],
    );
    assert!(head.contains("upload: this client streams"), "{head}");
    assert!(head.contains("counts only"), "{head}");
    assert!(head.contains("500 ms play-out buffer"), "{head}");
    assert_eq!(r["spec"]["upload"], true);
    assert_eq!(r["spec"]["family"], "ipv4");
}

#[test]
fn every_udp_rule_reads_the_same_from_a_file_as_from_flags() {
    rules_read_the_same(
        "udp",
        &[
            (
                &["--length", "1500ms"],
                "--length must be a whole number of seconds, at least 1s",
                r#""length": "1500ms""#,
                "udp.length: must be a whole number of seconds, at least 1s",
            ),
            (
                &["--length", "0s"],
                "--length must be a whole number of seconds, at least 1s",
                r#""length": 0"#,
                "udp.length: must be a whole number of seconds, at least 1s",
            ),
            (
                &["--status-interval", "1ms"],
                "--status-interval must be at least 10ms",
                r#""status_interval": "1ms""#,
                "udp.status_interval: must be at least 10ms",
            ),
            (
                &["--time-limit", "0s"],
                "--time-limit must be above zero",
                r#""time_limit": "0s""#,
                "udp.time_limit: must be above zero",
            ),
            (
                &["--buffer-depth", "2h"],
                "--buffer-depth must be at most 1h",
                r#""buffer_depth": "2h""#,
                "udp.buffer_depth: must be at most 1h",
            ),
            (
                &["--datagram-size", "20"],
                "--bitrate/--frame-rate/--length/--datagram-size: --datagram-size must be 69..=65507 bytes (got 20)",
                r#""datagram_size": 20"#,
                "udp.bitrate/frame_rate/length/datagram_size: `datagram_size` must be 69..=65507 bytes (got 20)",
            ),
            (
                &["-b", "1G", "--frame-rate", "1", "--datagram-size", "1000"],
                "--bitrate/--frame-rate/--length/--datagram-size: frames of 125000000 bytes need 125000 datagrams \
                 of at most 1000 bytes, more than 65535 (raise --datagram-size or --frame-rate, or lower the bit rate)",
                r#""bitrate": "1G", "frame_rate": 1, "datagram_size": 1000"#,
                "udp.bitrate/frame_rate/length/datagram_size: frames of 125000000 bytes need 125000 datagrams \
                 of at most 1000 bytes, more than 65535 (raise `datagram_size` or `frame_rate`, or lower the bit rate)",
            ),
            (
                &["-b", "100", "--frame-rate", "60"],
                "--bitrate/--frame-rate/--length/--datagram-size: frames of 0 bytes are too small: each needs at least 35",
                r#""bitrate": 100, "frame_rate": 60"#,
                "udp.bitrate/frame_rate/length/datagram_size: frames of 0 bytes are too small: each needs at least 35",
            ),
            (
                &["-b", "0"],
                "--bitrate/--frame-rate/--length/--datagram-size: the bit rate, frame rate and length must all be above zero",
                r#""bitrate": "0""#,
                "udp.bitrate/frame_rate/length/datagram_size: the bit rate, frame rate and length must all be above zero",
            ),
            (
                &["--buffer-depth", "1h", "--frame-rate", "1000"],
                "--buffer-depth × --frame-rate is 3600000 frames, more than a receiver buffers (131072)",
                r#""buffer_depth": "1h", "frame_rate": 1000"#,
                "udp.buffer_depth: × `frame_rate` is 3600000 frames, more than a receiver buffers (131072)",
            ),
            // Ranges the flags' parser keeps; a document meets them here.
            (
                &["--frame-rate", "0"],
                "--frame-rate <FPS>': 0 is not in 1..=1000000",
                r#""frame_rate": 0"#,
                "udp.frame_rate: must be 1-1000000",
            ),
            (
                &["-c", "0"],
                "--connections <CONNECTIONS>': 0 is not in 1..=100000",
                r#""connections": 0"#,
                "udp.connections: must be 1-100000",
            ),
            (
                &["--dscp", "64"],
                "--dscp <DSCP>': 64 is not in 0..=63",
                r#""dscp": 64"#,
                "udp.dscp: must be 0-63",
            ),
        ],
    );
}

#[test]
fn a_udp_spec_round_trips() {
    let printed = round_trips(
        "udp",
        "udp-trip",
        &[
            "--length",
            "1s",
            "--bitrate",
            "1500k",
            "--frame-rate",
            "25",
            "--buffer-depth",
            "250ms",
            "--datagram-size",
            "1200",
            "-c",
            "2",
            "--iterations",
            "2",
            "--upload",
            "--verify",
            "connection",
            "--dscp",
            "10",
            "-B",
            "127.0.0.1",
            "-4",
            "--time-limit",
            "30s",
            "--status-interval",
            "250ms",
        ],
    );
    assert_eq!(printed["bitrate"], "1500kbit");
    assert_eq!(printed["bind"], serde_json::json!(["127.0.0.1"]));
    assert_eq!(printed["time_limit"], "30s");
    assert!(printed.get("jitter_file").is_none(), "{printed}");
    // The flags' defaults, written out.
    let (code, out, err) = run(&["udp", "--print-spec"]);
    assert_eq!(code, Some(0), "{err}");
    let d = spec_doc(&out);
    assert_eq!(d["bitrate"], "25Mbit");
    assert_eq!(d["length"], "10s");
    assert!(d.get("host").is_none(), "{d}");
}

#[test]
fn a_quic_spec_runs_as_its_flags_do() {
    let (head, r) = flags_and_file_agree("quic", "quic-download", &["--download", "200KB", "-c", "2"]);
    assert!(head.contains("scenario *1:8:200000;"), "{head}");
    assert_eq!(r["spec"]["download"], "200KB");
    assert_eq!(r["settings"]["connections"], 2);
    let (head, r) = flags_and_file_agree("quic", "quic-scenario", &["--scenario", "*2:100:50000;"]);
    assert!(head.contains("scenario *2:100:50000;"), "{head}");
    assert_eq!(r["spec"]["scenario"], "*2:100:50000;");
    let (head, r) = flags_and_file_agree(
        "quic",
        "quic-rps",
        &[
            "--rps",
            "--duration",
            "500ms",
            "--streams",
            "2",
            "--request",
            "100",
            "--response",
            "1000",
        ],
    );
    assert!(
        head.contains("requests per second for 0.500 s: 2 request(s) outstanding per connection, 100 B up"),
        "{head}"
    );
    assert_eq!(r["spec"]["rps"], true);
    assert_eq!(r["spec"]["response"], "1KB");
}

#[test]
fn a_quic_spec_with_tls_options_runs_against_a_server_as_its_flags_do() {
    let port = free_udp_port();
    let mut srv = goodput();
    srv.args([
        "server",
        "--listen",
        "127.0.0.1",
        "-p",
        &free_udp_port().to_string(),
        "--no-udp",
        "--quic",
        "--quic-listen",
        "127.0.0.1",
        "--quic-port",
        &port.to_string(),
    ]);
    let _srv = Reaped::spawn(srv);
    wait_udp_bound(port);
    let port = port.to_string();
    let (head, r) = flags_and_file_agree(
        "quic",
        "quic-server",
        &[
            "127.0.0.1",
            &port,
            "*1:397:50000;",
            "--insecure",
            "--sni",
            "perf.example",
            "-4",
        ],
    );
    assert!(
        head.contains("(TLS name perf.example, any certificate accepted)"),
        "{head}"
    );
    assert_eq!(r["spec"]["host"], "127.0.0.1");
    assert_eq!(r["spec"]["insecure"], true);
    assert_eq!(r["spec"]["sni"], "perf.example");
    assert_eq!(r["spec"]["scenario"], "*1:397:50000;");
}

#[test]
fn every_quic_rule_reads_the_same_from_a_file_as_from_flags() {
    rules_read_the_same(
        "quic",
        &[
            (
                &["--status-interval", "1ms"],
                "--status-interval must be at least 10ms",
                r#""status_interval": "1ms""#,
                "quic.status_interval: must be at least 10ms",
            ),
            (
                &["--duration", "0s"],
                "--duration must be above zero",
                r#""duration": 0"#,
                "quic.duration: must be above zero",
            ),
            (
                &["--upload", "0s"],
                "--upload must be above zero",
                r#""upload": "0s""#,
                "quic.upload: must be above zero",
            ),
            (
                &["--download", "lots"],
                "--download 'lots': expected a size (1GB, 100MiB) or a duration (10s)",
                r#""download": "lots""#,
                "quic.download: 'lots': expected a size (1GB, 100MiB) or a duration (10s)",
            ),
            (
                &["--scenario", "*0:1:1"],
                "scenario '*0:1:1': scenario description 1 ('*0:1:1'): '*0': the repeat count must be 1-1000000",
                r#""scenario": "*0:1:1""#,
                "quic.scenario: '*0:1:1': scenario description 1 ('*0:1:1'): '*0': the repeat count must be 1-1000000",
            ),
            (
                &["--uni", "--scenario", "s30:n150:2000"],
                "--uni applies to batch requests; media descriptions always use bidirectional streams",
                r#""uni": true, "scenario": "s30:n150:2000""#,
                "quic.uni: applies to batch requests; media descriptions always use bidirectional streams",
            ),
            // Combinations and ranges the flags' parser refuses; a
            // document meets them here.
            (
                &["--rps", "--handshakes"],
                "'--rps' cannot be used with '--handshakes'",
                r#""rps": true, "handshakes": true"#,
                "quic.rps: cannot be used with `handshakes`",
            ),
            (
                &["--upload", "1MB", "--download", "1MB"],
                "'--upload <SIZE|DURATION>' cannot be used with '--download <SIZE|DURATION>'",
                r#""upload": "1MB", "download": "1MB""#,
                "quic.upload: cannot be used with `download`",
            ),
            (
                &["--latency", "--scenario", "*1:8:100;"],
                "cannot be used with",
                r#""latency": true, "scenario": "*1:8:100;""#,
                "quic.latency: cannot be used with `scenario`",
            ),
            (
                &["--ca", "ca.pem", "--insecure"],
                "'--ca <FILE>' cannot be used with '--insecure'",
                r#""ca": "ca.pem", "insecure": true"#,
                "quic.insecure: cannot be used with `ca`",
            ),
            (
                &["--streams", "0"],
                "0 is not in 1..=10000",
                r#""streams": 0"#,
                "quic.streams: must be 1-10000",
            ),
            (
                &["-c", "0"],
                "0 is not in 1..=10000",
                r#""connections": 0"#,
                "quic.connections: must be 1-10000",
            ),
        ],
    );
}

#[test]
fn a_quic_spec_round_trips() {
    // Without HOST the embedded server is trusted whatever --ca says, so
    // the TLS fields ride along without a certificate to hand.
    let printed = round_trips(
        "quic",
        "quic-trip",
        &[
            "--download",
            "64KiB",
            "-c",
            "3",
            "--uni",
            "--ca",
            "/nonexistent/ca.pem",
            "--sni",
            "perf.example",
            "-4",
            "--status-interval",
            "250ms",
            "--duration",
            "2s",
            "--request",
            "1KiB",
            "--response",
            "1500",
        ],
    );
    assert_eq!(printed["download"], "64KiB");
    assert_eq!(printed["ca"], "/nonexistent/ca.pem");
    assert_eq!(printed["family"], "ipv4");
    let printed = round_trips("quic", "quic-trip-timed", &["--upload", "300ms"]);
    assert_eq!(printed["upload"], "300ms");
    // The performance log is an output, not part of the test.
    let log = tmp("specs-uq", "perf.csv");
    let (code, out, err) = run(&["quic", "--perf-log", log.to_str().unwrap(), "--print-spec"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(!out.contains("perf"), "{out}");
    assert!(!log.exists(), "--print-spec writes no file");
    let d = spec_doc(&out);
    assert_eq!(d["port"], 4433);
    assert_eq!(d["duration"], "10s");
    assert!(d.get("scenario").is_none(), "{d}");
}
