//! `--assert`: pass/fail checks over a result's figures, in the console
//! summary, the result document and the exit status (4 when one fails).

mod common;

use common::{result_doc, run, tmp};

/// Runs a command that writes `--json`, and returns its exit code, its
/// console text and the document's `assertions`.
fn asserted(name: &str, args: &[&str]) -> (Option<i32>, String, serde_json::Value) {
    let json = tmp("assertions", &format!("{name}.json"));
    let (code, out, err) = run(&[args, &["-v", "1", "--json", json.to_str().unwrap()]].concat());
    assert!(json.exists(), "{args:?}: no document: {err}");
    (
        code,
        format!("{out}{err}"),
        result_doc(&json)["assertions"].clone(),
    )
}

/// One figure family: an assertion that holds (exit 0) and one that does
/// not (exit 4), each with its measured value on the console and in the
/// document.
fn family(name: &str, test: &[&str], holds: &str, fails: &str) {
    let (code, out, a) = asserted(&format!("{name}-pass"), &[test, &["--assert", holds]].concat());
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(a[0]["expression"], holds);
    assert_eq!(a[0]["passed"], true, "{a}");
    assert!(a[0]["measured"].is_number(), "{a}");
    assert!(out.contains(&format!("pass {holds} : measured")), "{out}");

    let (code, out, a) = asserted(&format!("{name}-fail"), &[test, &["--assert", fails]].concat());
    assert_eq!(code, Some(4), "{out}");
    assert_eq!(a[0]["passed"], false, "{a}");
    let measured = a[0]["measured_text"].as_str().unwrap();
    assert!(
        out.contains(&format!("FAIL {fails} : measured {measured}")),
        "{out}"
    );
    assert!(out.contains("Assertions : 0 of 1 held (exit status 4)"), "{out}");
}

/// At `-v 0` nothing is printed, except the assertion that failed: the
/// exit status 4 then says why in a CI log.
#[test]
fn a_silent_run_names_the_assertion_that_failed() {
    let stamp = ["stamp", "--count", "5", "--interval", "10ms", "-v", "0"];
    let (code, out, err) = run(&[
        &stamp[..],
        &["--assert", "rtt.max < 1ns", "--assert", "loss < 50%"],
    ]
    .concat());
    assert_eq!(code, Some(4), "{out}{err}");
    assert!(out.is_empty(), "{out}");
    assert!(
        err.contains("goodput: assertion failed: rtt.max < 1ns (measured "),
        "{err}"
    );
    assert!(!err.contains("loss < 50%"), "only the failed one: {err}");
    let (code, out, err) = run(&[&stamp[..], &["--assert", "loss < 50%"]].concat());
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.is_empty() && err.is_empty(), "{out}{err}");
}

#[test]
fn throughput_holds_and_fails() {
    family(
        "throughput",
        &["tcp", "--duration", "1s", "-c", "2"],
        "goodput >= 1Mbit",
        "goodput >= 100Tbit",
    );
}

#[test]
fn loss_holds_and_fails() {
    family(
        "loss",
        &["udp", "--length", "1s", "--bitrate", "10M"],
        "loss < 0.1%",
        "loss > 50%",
    );
}

#[test]
fn latency_holds_and_fails() {
    family(
        "latency",
        &["stamp", "--count", "20", "--interval", "10ms"],
        "rtt.p99 < 1s",
        "rtt.max < 1ns",
    );
}

#[test]
fn errors_hold_and_fail() {
    family(
        "errors",
        &["tcp", "-c", "2", "--transfer", "1MB"],
        "errors == 0",
        "errors > 0",
    );
}

#[test]
fn a_failed_connection_outranks_a_failed_assertion() {
    // One connection of two goes where nothing listens (port 1): it fails
    // (1), whatever the assertion says. (Had both gone there, the test
    // would not have started: exit 3.)
    let port = common::free_tcp_port();
    let _server = common::Reaped(Some(
        common::goodput()
            .args(["server", "-p", &port.to_string(), "-v", "0"])
            .spawn()
            .unwrap(),
    ));
    common::wait_tcp_listening(port);
    let (code, out, a) = asserted(
        "refused",
        &[
            "tcp",
            "127.0.0.1",
            "--target",
            "127.0.0.1:1",
            "-p",
            &port.to_string(),
            "-c",
            "2",
            "--transfer",
            "1MiB",
            "--assert",
            "goodput > 1Tbit",
        ],
    );
    assert_eq!(code, Some(1), "{out}");
    assert_eq!(a[0]["passed"], false);
}

#[test]
fn an_unknown_figure_or_a_missing_unit_is_a_usage_error_before_the_test() {
    let cases: [(&[&str], &str); 4] = [
        (
            &["tcp", "--assert", "gooput >= 1Gbit"],
            "--assert 'gooput >= 1Gbit': unknown figure 'gooput'; the tcp kind's figures are goodput,",
        ),
        (
            &["tcp", "--assert", "goodput >= 900"],
            "--assert 'goodput >= 900': '900' needs a rate such as 900Mbit or 100MB/s",
        ),
        (
            &["stamp", "--assert", "loss < 0.1"],
            "--assert 'loss < 0.1': '0.1' needs a percentage such as 0.1%",
        ),
        (&["tcp", "--assert", "goodput"], "'goodput' has no comparison"),
    ];
    for (args, says) in cases {
        let (code, out, err) = run(args);
        assert_eq!(code, Some(2), "{args:?}: {out}{err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(
            !out.contains("configured settings"),
            "the test must not start: {out}"
        );
    }
    // The same rule from a document, with the field's place.
    let spec = tmp("assertions", "bad.json");
    std::fs::write(&spec, r#"{"kind": "tcp", "assert": ["rtt.p99 < 5ms"]}"#).unwrap();
    let (code, _, err) = run(&["run", spec.to_str().unwrap()]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("tcp.assert: 'rtt.p99 < 5ms': unknown figure 'rtt.p99'"),
        "{err}"
    );
}

#[test]
fn a_document_carries_its_assertions_and_they_run_as_the_flags_do() {
    let (code, out, err) = run(&[
        "tcp",
        "--duration",
        "1s",
        "--assert",
        "goodput.up > 1Mbit",
        "--assert",
        "errors == 0",
        "--print-spec",
    ]);
    assert_eq!(code, Some(0), "{err}");
    let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        doc["assert"],
        serde_json::json!(["goodput.up > 1Mbit", "errors == 0"])
    );
    let spec = tmp("assertions", "spec.json");
    std::fs::write(&spec, &out).unwrap();
    let (code, out, a) = asserted("document", &["run", spec.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(a.as_array().unwrap().len(), 2);
    assert!(a.as_array().unwrap().iter().all(|x| x["passed"] == true), "{a}");
}

#[test]
fn help_lists_every_figure_of_each_kind() {
    use goodput_core::kind::Kind;
    for kind in [
        Kind::Tcp,
        Kind::Udp,
        Kind::Quic,
        Kind::Stamp,
        Kind::Iperf3,
        Kind::Echo,
        Kind::Ttcp,
    ] {
        let (_, out, _) = run(&[kind.name(), "--help"]);
        let help = out.replace('\n', " ");
        for f in goodput_core::assertion::figures(kind) {
            assert!(help.contains(f.name), "{kind} --help lacks the figure {}", f.name);
        }
    }
}
