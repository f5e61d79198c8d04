//! ndt7 end to end on loopback: one `goodput server --ndt7` process, the
//! `goodput ndt7` client against it both ways, and M-Lab's own JavaScript
//! client from the npm registry (`@m-lab/ndt7`) under Node.js, whose
//! figures must agree with the server's own figures of the same subtests.
//! Subtests run 4 s here (`--ndt7-length`; ndt7's own is 10 s) to keep the
//! suite short.

mod common;

use std::path::PathBuf;
use std::process::{Command, Stdio};

use common::*;

/// The npm package's version the test installs (pinned: its worker files'
/// messages are what the harness reads).
const NDT7_JS: &str = "@m-lab/ndt7@0.1.4";

fn ndt7_server(extra: &[&str]) -> (Reaped, u16, PathBuf) {
    let port = free_tcp_port();
    let json = tmp("ndt7", &format!("server-{port}.json"));
    let mut cmd = goodput();
    cmd.args([
        "server",
        "--listen",
        "127.0.0.1",
        "-p",
        &free_tcp_port().to_string(),
        "--no-udp",
        "--ndt7",
        "--ndt7-port",
        &port.to_string(),
        "--json",
        json.to_str().unwrap(),
    ])
    .args(extra);
    let srv = Reaped::spawn(cmd);
    wait_tcp_listening(port);
    (srv, port, json)
}

/// The npm client, installed once under the target directory.
fn ndt7_js() -> Option<PathBuf> {
    peers::npm_package("ndt7-npm", NDT7_JS, "@m-lab/ndt7/src/ndt7.js")
}

fn rate_of(f: &serde_json::Value) -> f64 {
    f["rate_bps"].as_f64().unwrap()
}

fn assert_near(what: &str, a: f64, b: f64, tolerance: f64) {
    let off = (a - b).abs() / b.max(1.0);
    assert!(
        off <= tolerance,
        "{what}: {a:.0} against {b:.0} is {:.1} % apart (at most {:.0} %)",
        off * 100.0,
        tolerance * 100.0
    );
}

#[test]
fn goodput_and_the_npm_client_agree_with_the_servers_own_figures() {
    let (srv, port, server_json) = ndt7_server(&["--ndt7-length", "4s"]);
    let url = format!("ws://127.0.0.1:{port}");

    // goodput's own client, both ways.
    let client_json = tmp("ndt7", "client.json");
    let (code, out, err) = run(&["ndt7", &url, "--json", client_json.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert!(
        err.contains("download ") && err.contains("upload "),
        "progress lines as they happen: {err}"
    );
    let doc = result_doc(&client_json);
    assert_eq!(doc["kind"], "ndt7_client");
    // One detail key, the kind's own: no other kind's key, not even null.
    for other in ["http", "tls", "dns", "stamp", "ndt7_server"] {
        assert!(doc.get(other).is_none(), "{other} in an ndt7 result");
    }
    let d = &doc["ndt7"];
    // The common totals: each subtest a connection, the upload sent and
    // the download received.
    let s = &doc["summary"];
    assert_eq!(s["successful"], 2, "{s}");
    assert_eq!(s["sent_bytes"], d["upload"]["bytes"], "{s}");
    assert_eq!(s["received_bytes"], d["download"]["bytes"], "{s}");
    for sub in ["download", "upload"] {
        let f = &d[sub];
        assert!(f["bytes"].as_u64().unwrap() > 1_000_000, "{sub}: {f}");
        assert!(rate_of(f) > 1e6, "{sub}: {f}");
        let secs = f["seconds"].as_f64().unwrap();
        assert!(
            (3.0..6.0).contains(&secs),
            "{sub} lasted {secs} s, the server's 4 s"
        );
        assert!(f["min_rtt_ms"].as_f64().unwrap() > 0.0, "{sub}: {f}");
    }
    assert!(d["download"]["from_server"].as_bool().unwrap());
    assert!(
        d["download"]["measurements"].as_u64().unwrap() >= 8,
        "a measurement each 250 ms"
    );
    assert!(d["client_address"].as_str().unwrap().starts_with("127.0.0.1:"));

    // M-Lab's JavaScript client, against the same server.
    let npm = match ndt7_js() {
        Some(m) => {
            let out = Command::new("node")
                .arg("--experimental-websocket")
                .arg(concat!(
                    env!("CARGO_MANIFEST_DIR"),
                    "/tests/ndt7/ndt7-js-node.cjs"
                ))
                .arg(&m)
                .arg(format!("127.0.0.1:{port}"))
                .stdin(Stdio::null())
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success(),
                "{text}\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let v: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
            assert_eq!(v["code"], 0, "the npm client's own verdict: {v}");
            assert_eq!(v["errors"], serde_json::json!([]));
            Some(v)
        }
        None => None,
    };

    let (_, out, _) = srv.stop(libc::SIGINT);
    let server = result_doc(&server_json);
    let n = &server["ndt7_server"];
    let tests = n["tests"].as_array().unwrap();
    let expected = if npm.is_some() { 4 } else { 2 };
    assert_eq!(tests.len(), expected, "{n}");
    assert!(tests.iter().all(|t| t["completed"] == true), "{n}");
    assert_eq!(n["downloads"], expected / 2);
    assert_eq!(n["uploads"], expected / 2);
    assert!(out.contains("ndt7 service:"), "{out}");

    // goodput's client against the server's figures of the same subtests.
    assert_eq!(tests[0]["subtest"], "download");
    assert_eq!(tests[1]["subtest"], "upload");
    assert_near(
        "goodput download rate",
        rate_of(&d["download"]),
        rate_of(&tests[0]["figures"]),
        0.05,
    );
    assert_near(
        "goodput upload rate",
        rate_of(&d["upload"]),
        rate_of(&tests[1]["figures"]),
        0.05,
    );
    // The server's upload figure counts what arrived; so does the client's.
    assert_eq!(d["upload"]["bytes"], tests[1]["figures"]["bytes"]);

    if let Some(v) = npm {
        let (down, up) = (&tests[2]["figures"], &tests[3]["figures"]);
        // The download as the client measured it (its own mean); the
        // upload as M-Lab's speed-test page shows it, from the server's
        // kernel counters in its last measurement (bytes received over
        // elapsed microseconds): under Node the client's own upload mean
        // counts what is still queued in its WebSocket when the server
        // ends the subtest.
        let client_down = v["download"]["LastClientMeasurement"]["MeanClientMbps"]
            .as_f64()
            .unwrap()
            * 1e6;
        let tcp = &v["upload"]["LastServerMeasurement"]["TCPInfo"];
        let client_up =
            tcp["BytesReceived"].as_f64().unwrap() * 8.0 / tcp["ElapsedTime"].as_f64().unwrap() * 1e6;
        eprintln!(
            "npm client download {client_down:.0} bit/s, server {:.0}; upload {client_up:.0}, server {:.0}",
            rate_of(down),
            rate_of(up)
        );
        assert_near("npm client download rate", client_down, rate_of(down), 0.05);
        assert_near("npm client upload rate", client_up, rate_of(up), 0.05);
        let last = &v["download"]["LastServerMeasurement"];
        assert!(last["TCPInfo"]["MinRTT"].as_u64().unwrap() > 0, "{last}");
        let told = last["AppInfo"]["NumBytes"].as_u64().unwrap();
        assert_near(
            "server's told download bytes",
            told as f64,
            down["bytes"].as_f64().unwrap(),
            0.05,
        );
    }
}

#[test]
fn a_server_that_refuses_says_why_and_the_client_fails_with_it() {
    // One subtest a minute from an address: the second is refused 429.
    let (srv, port, _) = ndt7_server(&["--ndt7-per-minute", "1", "--ndt7-length", "1s"]);
    let url = format!("ws://127.0.0.1:{port}");
    let (code, out, err) = run(&["ndt7", &url]);
    assert_eq!(
        code,
        Some(1),
        "the download ran, the upload was refused: {out}\n{err}"
    );
    let said = format!("{out}{err}");
    assert!(
        said.contains("upload subtest") && said.contains("429") && said.contains("in a minute"),
        "{said}"
    );
    // A URL that is not ws:// is a usage error naming the field.
    let (code, _, err) = run(&["ndt7", "http://127.0.0.1:1"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("url"), "{err}");
    let (_, out, _) = srv.stop(libc::SIGINT);
    assert!(out.contains("1 over the per-minute rate"), "{out}");
}

/// The flags' defaults and the document's are one set, and a spec reads
/// back as the document `goodput run` runs.
#[test]
fn ndt7_flags_and_documents_agree() {
    let (code, by_flags, err) = run(&["ndt7", "ws://192.0.2.7:4447", "--print-spec"]);
    assert_eq!(code, Some(0), "{err}");
    let f = tmp("ndt7", "defaults.json");
    std::fs::write(&f, r#"{"kind": "ndt7", "url": "ws://192.0.2.7:4447"}"#).unwrap();
    let (code, by_file, err) = run(&["run", f.to_str().unwrap(), "--print-spec"]);
    assert_eq!(code, Some(0), "{err}");
    let doc = spec_doc(&by_flags);
    assert_eq!(doc, spec_doc(&by_file));
    assert_eq!(
        (doc["download"].as_bool(), doc["upload"].as_bool()),
        (Some(true), Some(true))
    );
    let (code, one, _) = run(&["ndt7", "ws://h", "--upload-only", "--print-spec"]);
    assert_eq!(code, Some(0));
    assert_eq!(spec_doc(&one)["download"], false);
    // A document without a URL is refused, naming the field.
    std::fs::write(&f, r#"{"kind": "ndt7"}"#).unwrap();
    let (code, _, err) = run(&["run", f.to_str().unwrap()]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("ndt7.url: is required"), "{err}");
}

/// `wss://`: Debian's nginx terminates TLS with a certificate made for
/// the test and passes the WebSocket upgrade to goodput's server. The
/// client checks the certificate against `--ca`, takes any with
/// `--insecure`, and refuses it against the system's roots.
#[test]
fn wss_through_nginx_with_its_certificate_checked() {
    if !peers::Nginx::available() {
        return;
    }
    let (srv, ndt7_port, _) = ndt7_server(&["--ndt7-length", "1s"]);
    let dir = tmp("ndt7-nginx", "conf");
    let ca = peers::TestCa::new(&dir);
    let (cert, key) = ca.issue_for_days("server", &["localhost", "127.0.0.1"], 2);
    let tls_port = free_tcp_port();
    let _nginx = peers::Nginx::start(
        &dir,
        &[],
        &format!(
            "server {{\n  listen 127.0.0.1:{tls_port} ssl;\n  ssl_certificate {};\n  ssl_certificate_key {};\n\
             location /ndt/ {{\n   proxy_pass http://127.0.0.1:{ndt7_port};\n   proxy_http_version 1.1;\n\
             proxy_set_header Upgrade $http_upgrade;\n   proxy_set_header Connection \"upgrade\";\n\
             proxy_buffering off;\n   proxy_read_timeout 30s;\n  }}\n }}\n",
            cert.display(),
            key.display()
        ),
        &[tls_port],
    );
    let url = format!("wss://127.0.0.1:{tls_port}");

    let json = tmp("ndt7-nginx", "wss.json");
    let ca = ca.pem().display().to_string();
    let (code, out, err) = run(&["ndt7", &url, "--ca", &ca, "--json", json.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{out}\n{err}");
    let d = &result_doc(&json)["ndt7"];
    assert!(
        rate_of(&d["download"]) > 1e6 && rate_of(&d["upload"]) > 1e6,
        "{d}"
    );
    assert!(d["server"].as_str().unwrap().starts_with("wss://"), "{d}");

    let (code, out, err) = run(&["ndt7", &url, "--insecure", "--download-only"]);
    assert_eq!(code, Some(0), "{out}\n{err}");

    // The system's roots do not know the test's certificate.
    let (code, out, err) = run(&["ndt7", &url, "--download-only"]);
    assert_ne!(code, Some(0), "{out}\n{err}");
    let said = format!("{out}{err}");
    assert!(said.contains("TLS handshake"), "{said}");
    drop(srv);
}
