//! `goodput http` and `goodput tls` against servers written here to be
//! hostile, on loopback, the client under an address-space limit: an
//! endless body, endless headers, a server that accepts and never
//! answers, and a TLS server whose chain is 1,000 certificates. Each
//! must end in bounded time and memory, without a panic, with the limit
//! that stopped it said.

mod common;

use common::*;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A server on a free port that hands each connection to `serve` on a
/// thread of its own (the threads end with the test process).
fn serve(serve: fn(TcpStream)) -> u16 {
    let port = free_tcp_port();
    let l = TcpListener::bind(("127.0.0.1", port)).unwrap();
    std::thread::spawn(move || {
        for s in l.incoming().take(16).flatten() {
            std::thread::spawn(move || serve(s));
        }
    });
    port
}

/// Reads the request's head (up to a bound), so the client sees its
/// request taken.
fn read_head(s: &mut TcpStream) {
    let mut buf = [0u8; 4096];
    let mut seen = Vec::new();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    while !seen.windows(4).any(|w| w == b"\r\n\r\n") && seen.len() < 65536 {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => seen.extend_from_slice(&buf[..n]),
        }
    }
}

/// goodput under the limit, at most 20 s; exit code, output, document,
/// and how long it took.
fn run(group: &str, args: &[&str]) -> (Option<i32>, String, serde_json::Value, Duration) {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let json = tmp(group, &format!("r{}.json", N.fetch_add(1, Ordering::Relaxed)));
    let mut cmd = goodput();
    cmd.args(args).arg("--json").arg(&json);
    let t = Instant::now();
    let (code, out, err) = spawn_limited(cmd, SERVER_ADDRESS_SPACE).wait(Duration::from_secs(20));
    let took = t.elapsed();
    let doc = std::fs::read_to_string(&json)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(serde_json::Value::Null);
    assert!(!err.contains("panicked"), "{err}");
    (code, format!("{out}{err}"), doc, took)
}

fn hop(doc: &serde_json::Value) -> &serde_json::Value {
    &doc["http"]["exchanges"][0]["hops"][0]
}

#[test]
fn endless_bodies_and_heads_and_silence_are_bounded() {
    // A body that never ends (its length says 100 GB): cut at the cap.
    let port = serve(|mut s| {
        read_head(&mut s);
        let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 100000000000\r\n\r\n");
        let chunk = vec![b'z'; 64 << 10];
        while s.write_all(&chunk).is_ok() {}
    });
    let url = format!("http://127.0.0.1:{port}/");
    let (code, out, doc, took) = run("hostile-http", &["http", &url, "--max-body", "4MiB"]);
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(hop(&doc)["body_bytes"], 4 << 20, "{doc}");
    assert_eq!(hop(&doc)["cut"], true);
    assert!(took < Duration::from_secs(10), "{took:?}");
    // With a body check, only the first bytes are kept, and the check
    // says it read a cut body.
    let (code, out, doc, _) = run(
        "hostile-http",
        &["http", &url, "--max-body", "4MiB", "--expect-body", "nothere"],
    );
    assert_eq!(code, Some(4), "{out}");
    assert!(
        doc["http"]["exchanges"][0]["mismatch"]
            .as_str()
            .unwrap()
            .contains("first bytes"),
        "{doc}"
    );

    // Headers that never end: hyper's head limit stops it.
    let port = serve(|mut s| {
        read_head(&mut s);
        let _ = s.write_all(b"HTTP/1.1 200 OK\r\n");
        let line = format!("X-Endless: {}\r\n", "a".repeat(1000));
        while s.write_all(line.as_bytes()).is_ok() {}
    });
    let url = format!("http://127.0.0.1:{port}/");
    let (code, out, doc, took) = run("hostile-http", &["http", &url]);
    assert_eq!(code, Some(1), "{out}");
    let e = hop(&doc)["error"].as_str().unwrap().to_owned();
    assert!(e.contains("the response") && e.contains("too large"), "{e}");
    assert!(took < Duration::from_secs(10), "{took:?}");

    // Accepts, reads, never answers: the timeout names the phase.
    let port = serve(|mut s| {
        read_head(&mut s);
        std::thread::sleep(Duration::from_secs(30));
    });
    let url = format!("http://127.0.0.1:{port}/");
    let (code, out, doc, took) = run("hostile-http", &["http", &url, "--timeout", "500ms"]);
    assert_eq!(code, Some(1), "{out}");
    assert_eq!(
        hop(&doc)["error"],
        "timed out during the wait for the response (the request's `timeout`)",
        "{doc}"
    );
    assert!(took < Duration::from_secs(5), "{took:?}");
    // And tls against it (it never handshakes).
    let (code, out, doc, took) = run(
        "hostile-http",
        &[
            "tls",
            &format!("127.0.0.1:{port}"),
            "--insecure",
            "--timeout",
            "500ms",
        ],
    );
    assert_eq!(code, Some(1), "{out}");
    assert!(
        doc["tls"]["error"]
            .as_str()
            .unwrap()
            .contains("timed out after 500 ms"),
        "{doc}"
    );
    assert!(took < Duration::from_secs(5), "{took:?}");
}

#[test]
fn a_chain_of_a_thousand_certificates_is_refused_in_bounded_time() {
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let der = cert.cert.der().clone();
    let chain = vec![der; 1000];
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(cert.key_pair.serialize_der().into());
    let cfg = Arc::new(
        rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .unwrap(),
    );
    let port = free_tcp_port();
    let l = TcpListener::bind(("127.0.0.1", port)).unwrap();
    std::thread::spawn(move || {
        for mut s in l.incoming().take(4).flatten() {
            let cfg = cfg.clone();
            std::thread::spawn(move || {
                let Ok(mut conn) = rustls::ServerConnection::new(cfg) else {
                    return;
                };
                s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                for _ in 0..100 {
                    if conn.complete_io(&mut s).is_err() || !conn.is_handshaking() {
                        break;
                    }
                }
            });
        }
    });
    let target = format!("127.0.0.1:{port}");
    let (code, out, doc, took) = run(
        "hostile-chain",
        &["tls", &target, "--insecure", "--sni", "localhost"],
    );
    assert_eq!(code, Some(1), "{out}");
    let e = doc["tls"]["error"].as_str().unwrap();
    assert!(
        e.starts_with("TLS handshake:") && e.contains("64 KiB limit"),
        "{e}"
    );
    assert!(took < Duration::from_secs(10), "{took:?}");
    let (code, out, doc, _) = run(
        "hostile-chain",
        &[
            "http",
            &format!("https://localhost:{port}/"),
            "--resolve",
            "localhost:127.0.0.1",
            "--insecure",
        ],
    );
    assert_eq!(code, Some(1), "{out}");
    assert!(
        hop(&doc)["error"].as_str().unwrap().contains("64 KiB limit"),
        "{doc}"
    );
}
