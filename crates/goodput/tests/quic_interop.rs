//! QUIC perf across QUIC stacks: goodput (quinn) against a perf peer on
//! aioquic (PyPI), both ways, on loopback: bidirectional downloads and
//! uploads, and unidirectional requests of mixed sizes and of size 0 with
//! servers that answer size 0 with an empty stream and with none.
//!
//! The peer, `tests/peers/aioquic_perf.py`, is goodput's own reading of
//! the perf protocol on an independent QUIC stack: the independent perf
//! implementations (quic-go's perf, quinn's, picoquic's) are not delivered
//! by a registry this project can reach (docs/quic-interop.md has the
//! manual runs against them). `.ci/run` installs aioquic and sets CI=true,
//! which makes a missing aioquic a failure; elsewhere these tests skip.

mod common;

use std::process::{Command, Stdio};

use common::{free_udp_port, goodput, wait_udp_bound, Reaped};

const PEER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/peers/aioquic_perf.py");

fn have_aioquic() -> bool {
    common::works("python3", &["-c", "import aioquic"], "pip install aioquic==1.7.2")
}

/// The aioquic perf server on a free port.
fn aioquic_server(extra: &[&str]) -> (Reaped, u16) {
    let port = free_udp_port();
    let mut cmd = Command::new("python3");
    cmd.arg(PEER)
        .args(["server", "--port", &port.to_string(), "--timeout", "120"])
        .args(extra);
    let srv = Reaped::spawn(cmd);
    wait_udp_bound(port);
    (srv, port)
}

/// `goodput quic` against `port`: exit status and output.
fn goodput_quic(port: u16, args: &[&str]) -> (Option<i32>, String) {
    let out = goodput()
        .args(["quic", "127.0.0.1", &port.to_string(), "--insecure", "-v", "1"])
        .args(args)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), text)
}

fn expect(text: &str, lines: &[&str]) {
    for l in lines {
        assert!(text.contains(l), "{l}: {text}");
    }
}

#[test]
fn goodput_client_against_an_aioquic_server() {
    if !have_aioquic() {
        return;
    }
    for empty_uni in [true, false] {
        let (_srv, port) = aioquic_server(if empty_uni { &[] } else { &["--no-empty-uni"] });
        let (code, text) = goodput_quic(port, &["*1:8:5000000;"]);
        assert_eq!(code, Some(0), "{text}");
        expect(&text, &["Nb_transactions: 1\n", "Download_bytes: 5000000\n"]);
        let (code, text) = goodput_quic(port, &["--upload", "5000000"]);
        assert_eq!(code, Some(0), "{text}");
        expect(&text, &["Nb_transactions: 1\n", "Upload_bytes: 5000008\n"]);
        // Mixed sizes: replies end in another order than requests start.
        let (code, text) = goodput_quic(port, &["=a:*4:8:1000;=b:*4:8:3000000;", "--uni"]);
        assert_eq!(code, Some(0), "{text}");
        expect(&text, &["Nb_transactions: 8\n", "Download_bytes: 12004000\n"]);
        // Size 0 first, whether its reply is an empty stream or none.
        let (code, text) = goodput_quic(port, &["=a:*1:1000:0;=b:=a:*1:8:1000000;", "--uni"]);
        assert_eq!(code, Some(0), "empty reply stream {empty_uni}: {text}");
        expect(&text, &["Nb_transactions: 2\n", "Download_bytes: 1000000\n"]);
    }
}

#[test]
fn aioquic_client_against_the_goodput_server() {
    if !have_aioquic() {
        return;
    }
    let (srv, port) = common::quic_server(&[]);
    // Every request at once; each unidirectional one, size 0 included,
    // must get exactly one reply stream of its size.
    let out = Command::new("python3")
        .arg(PEER)
        .args(["client", "--port", &port.to_string()])
        .args([
            "--bidi",
            "0,1000,3000000",
            "--uni",
            "0,0,1000,1000,3000000,3000000",
        ])
        .args(["--upload", "1000", "--timeout", "20"])
        .stderr(Stdio::inherit())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let v: serde_json::Value = serde_json::from_str(text.trim()).expect("one JSON line");
    assert_eq!(out.status.code(), Some(0), "{v}");
    assert_eq!(
        v["uni_got"],
        serde_json::json!([0, 0, 1000, 1000, 3000000, 3000000])
    );
    let (_, out, _) = srv.stop(libc::SIGINT);
    // 9 streams: 3 + 6 requests, each carrying 8 + 1000 bytes.
    assert!(out.contains("QUIC perf service: 1 connections"), "{out}");
    assert!(out.contains("9 streams"), "{out}");
    assert!(out.contains("9072 B received"), "{out}");
}
