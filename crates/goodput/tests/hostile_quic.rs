//! Forged and abandoned QUIC handshakes against a real `goodput server
//! --quic`, run under an address-space limit. The Initials are real ones,
//! captured from `goodput quic` aimed at a socket of the test that never
//! answers, then sent to the server from a source that never answers
//! either (as a forged address would). By default the server answers each
//! with one Retry smaller than the Initial and keeps nothing; without Retry
//! it holds at most --quic-max-handshakes half-open connections, each
//! cheap, for --hello-timeout, and stays near RFC 9000's 3× budget.

mod common;

use std::collections::HashMap;
use std::net::UdpSocket;
use std::os::fd::AsRawFd;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;

/// Peak RSS the server may reach here. An idle server with QUIC is about
/// 14 MiB; each half-open handshake costs about 50 KiB (it cost 1.17 MiB
/// when every connection started with its 10,000-stream allowance, so 300
/// of them would pass 340 MiB).
const RSS_CEILING_KIB: u64 = 96 * 1024;

/// `n` client Initials with distinct connection IDs, the first datagram of
/// each connection `goodput quic -c n` tries to open to a socket that never
/// answers.
fn capture_initials(n: usize) -> Vec<Vec<u8>> {
    let sink = UdpSocket::bind("127.0.0.1:0").unwrap();
    big_receive_buffer(&sink);
    sink.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    let port = sink.local_addr().unwrap().port();
    let mut cmd = goodput();
    cmd.args(["quic", "127.0.0.1", &port.to_string(), "--insecure"])
        .args(["-c", &n.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let client = Reaped::spawn_as_is(cmd);
    let mut seen: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
    let mut buf = vec![0u8; 65_536];
    let deadline = Instant::now() + Duration::from_secs(10);
    while seen.len() < n && Instant::now() < deadline {
        let Ok(k) = sink.recv(&mut buf) else { continue };
        let d = &buf[..k];
        // A long-header Initial: form bit set, type 0; DCID after the version.
        if k >= 1200 && d[0] & 0x80 != 0 && d[0] & 0x30 == 0 {
            let len = usize::from(d[5]);
            seen.entry(d[6..6 + len].to_vec()).or_insert_with(|| d.to_vec());
        }
    }
    drop(client);
    assert_eq!(seen.len(), n, "captured Initials");
    seen.into_values().collect()
}

/// 32 MiB of receive buffer: SO_RCVBUFFORCE where the test may pass the
/// kernel's cap (as root), else SO_RCVBUF up to the cap.
fn big_receive_buffer(s: &UdpSocket) {
    let size: libc::c_int = 32 << 20;
    for option in [libc::SO_RCVBUFFORCE, libc::SO_RCVBUF] {
        // SAFETY: sets an integer option on a socket this test owns.
        let r = unsafe {
            libc::setsockopt(
                s.as_raw_fd(),
                libc::SOL_SOCKET,
                option,
                (&size as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if r == 0 {
            return;
        }
    }
}

/// What one silent source sent and got back: bytes and datagrams, and the
/// largest reply.
#[derive(Debug, Default)]
struct Exchange {
    sent: u64,
    received: u64,
    replies: u64,
    largest: usize,
    /// Bytes of replies in short-header (1-RTT) packets.
    short_header: u64,
}

/// Sends every Initial once from a fresh socket, then listens for `listen`
/// without ever answering. Replies are read between sends and the sends
/// pause briefly every 25 datagrams, so neither end's receive buffer (the
/// kernel's default cap, about 208 KiB, unless the test may raise it) drops
/// a datagram the counts depend on.
fn send_silently(port: u16, initials: &[Vec<u8>], listen: Duration) -> Exchange {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    big_receive_buffer(&s);
    let mut x = Exchange::default();
    let mut buf = vec![0u8; 65_536];
    let take = |k: usize, buf: &[u8], x: &mut Exchange| {
        x.received += k as u64;
        x.replies += 1;
        x.largest = x.largest.max(k);
        if buf[0] & 0x80 == 0 {
            x.short_header += k as u64;
        }
    };
    s.set_nonblocking(true).unwrap();
    for (i, d) in initials.iter().enumerate() {
        x.sent += s.send_to(d, ("127.0.0.1", port)).unwrap() as u64;
        if i % 25 == 24 {
            std::thread::sleep(Duration::from_millis(2));
        }
        while let Ok(k) = s.recv(&mut buf) {
            take(k, &buf, &mut x);
        }
    }
    s.set_nonblocking(false).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
    let end = Instant::now() + listen;
    while Instant::now() < end {
        if let Ok(k) = s.recv(&mut buf) {
            take(k, &buf, &mut x);
        }
    }
    x
}

fn start(group: &str, extra: &[&str]) -> (Reaped, u16, std::path::PathBuf) {
    let (port, quic) = (free_tcp_port(), free_udp_port());
    let json = tmp(group, "server.json");
    let mut cmd = goodput();
    cmd.args(["server", "--listen", "127.0.0.1", "--no-udp", "--verbosity", "1"])
        .args(["--port", &port.to_string()])
        .args([
            "--quic",
            "--quic-listen",
            "127.0.0.1",
            "--quic-port",
            &quic.to_string(),
        ])
        .arg("--json")
        .arg(&json)
        .args(extra);
    let child = spawn_limited(cmd, SERVER_ADDRESS_SPACE);
    wait_tcp_listening(port);
    wait_udp_bound(quic);
    (child, quic, json)
}

/// A normal client's download through whatever the server now does.
fn normal_download(port: u16) {
    let mut cmd = goodput();
    cmd.args([
        "quic",
        "127.0.0.1",
        &port.to_string(),
        "--insecure",
        "--download",
        "1MB",
    ]);
    let (code, out, err) = Reaped::spawn(cmd).wait(Duration::from_secs(30));
    assert_eq!(code, Some(0), "stdout: {out}\nstderr: {err}");
}

/// Stops the server after checking it is alive and under its ceiling;
/// returns its banner and `quic_server` counters.
fn stop(mut child: Reaped, json: &std::path::Path) -> (String, serde_json::Value) {
    assert!(child.alive(), "the server died");
    let peak = proc_kib(child.pid(), "VmHWM");
    assert!(peak > 0 && peak < RSS_CEILING_KIB, "server peak RSS {peak} KiB");
    let (code, out, err) = child.stop(libc::SIGINT);
    assert_eq!(code, Some(0), "stdout: {out}\nstderr: {err}");
    assert!(!err.contains("panicked"), "{err}");
    let doc: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap();
    (out, doc["quic_server"].clone())
}

#[test]
fn forged_initials_get_one_small_retry_and_no_state() {
    let initials = capture_initials(200);
    let (child, port, json) = start("hq-retry", &[]);
    // The same Initials from two sources: Retry keeps no state, so each
    // gets its own answer.
    for _ in 0..2 {
        let x = send_silently(port, &initials, Duration::from_millis(1500));
        assert_eq!(x.sent, 200 * 1200, "{x:?}");
        assert_eq!(x.replies, 200, "one Retry per Initial: {x:?}");
        assert!(x.largest < 200, "a Retry is small: {x:?}");
        assert!(x.received * 5 < x.sent, "{x:?}");
    }
    normal_download(port);
    let (banner, c) = stop(child, &json);
    assert!(banner.contains("Retry before any state"), "{banner}");
    // Every forged Initial got a Retry and nothing else; the normal client
    // got one too, then its connection.
    assert_eq!(c["retries_sent"], 401, "{c}");
    assert_eq!(c["connections"], 1, "{c}");
    assert_eq!(c["handshake_timeouts"], 0, "{c}");
    assert_eq!(c["handshake_failures"], 0, "{c}");
    assert_eq!(c["internal_errors"], 0, "{c}");
}

#[test]
fn without_retry_half_open_handshakes_are_few_cheap_and_brief() {
    let initials = capture_initials(500);
    let (child, port, json) = start(
        "hq-noretry",
        &[
            "--quic-no-retry",
            "--quic-max-handshakes",
            "300",
            "--hello-timeout",
            "2s",
        ],
    );
    let t = Instant::now();
    let x = send_silently(port, &initials, Duration::from_millis(3500));
    // quinn holds each unvalidated connection to 3× what it received, in
    // whole datagrams, and lets one small 1-RTT packet (its new connection
    // IDs) through besides: at most 3 × 1200 + 200 B per handshake.
    let handshakes = 300;
    assert!(x.received > 0, "{x:?}");
    assert!(x.received - x.short_header <= 3 * 1200 * handshakes, "{x:?}");
    assert!(x.received <= (3 * 1200 + 200) * handshakes, "{x:?}");
    // The handshakes ended by themselves, at the deadline.
    while t.elapsed() < Duration::from_secs(4) {
        std::thread::sleep(Duration::from_millis(100));
    }
    normal_download(port);
    let (banner, c) = stop(child, &json);
    assert!(banner.contains("no Retry"), "{banner}");
    assert_eq!(c["retries_sent"], 0, "{c}");
    assert_eq!(c["handshake_timeouts"], 300, "{c}");
    assert_eq!(c["dropped_initials"], 200, "{c}");
    assert_eq!(c["connections"], 1, "{c}");
    assert_eq!(c["internal_errors"], 0, "{c}");
}
