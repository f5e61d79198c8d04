//! Hostile requests against the UDP media service of a real `goodput
//! server`, run under an address-space limit: requests that once made the
//! server allocate what the client asked (171,776,092,160 bytes for two
//! datagrams) are refused, through the real cookie round trip, with the
//! reason; an unknown source never gets more bytes than it sent; the server
//! stays up with bounded memory and a normal client still succeeds.

mod common;

use std::net::UdpSocket;
use std::time::Duration;

use common::*;
use goodput_core::media::wire::{Message, RejectReason, Request, COOKIE_LEN};

/// Peak RSS the server may reach here: an idle server is about 10 MiB, and
/// the refused requests must cost it nothing.
const RSS_CEILING_KIB: u64 = 96 * 1024;

struct Server {
    child: Reaped,
    port: u16,
    json: std::path::PathBuf,
}

fn start(group: &str, extra: &[&str]) -> Server {
    let port = free_udp_port();
    let json = tmp(group, "server.json");
    let mut cmd = goodput();
    cmd.args(["server", "--listen", "127.0.0.1", "--verbosity", "1"])
        .args(["--port", &port.to_string()])
        .arg("--json")
        .arg(&json)
        .args(extra);
    let child = spawn_limited(cmd, SERVER_ADDRESS_SPACE);
    wait_tcp_listening(port);
    Server { child, port, json }
}

impl Server {
    fn stop(mut self) -> (String, serde_json::Value) {
        assert!(self.child.alive(), "the server died");
        let peak = proc_kib(self.child.pid(), "VmHWM");
        assert!(peak > 0 && peak < RSS_CEILING_KIB, "server peak RSS {peak} KiB");
        let (code, out, err) = self.child.stop(libc::SIGINT);
        assert!(matches!(code, Some(0 | 1)), "exit {code:?}\n{out}\n{err}");
        assert!(
            !err.contains("panicked") && !err.contains("memory allocation"),
            "{err}"
        );
        let doc = serde_json::from_str(&std::fs::read_to_string(&self.json).unwrap()).unwrap();
        (out, doc)
    }
}

fn encode(m: &Message) -> Vec<u8> {
    let mut b = Vec::new();
    m.encode(&mut b);
    b
}

fn exchange(s: &UdpSocket, port: u16, m: &Message) -> (usize, usize, Message) {
    let out = encode(m);
    s.send_to(&out, ("127.0.0.1", port)).unwrap();
    let mut buf = [0u8; 2048];
    let n = s.recv(&mut buf).expect("an answer");
    (out.len(), n, Message::decode(&buf[..n]).expect("a media message"))
}

/// Sends `r` without a cookie, then again with the one the server gave: the
/// full round trip a real client makes. Returns the server's final answer
/// and checks the challenge was no larger than the request.
fn round_trip(port: u16, r: Request) -> Message {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let (sent, got, m) = exchange(&s, port, &Message::Request(r));
    assert!(got <= sent, "a {got}-byte challenge for a {sent}-byte request");
    let Message::Challenge { nonce, cookie } = m else {
        panic!("no challenge: {m:?}")
    };
    assert_eq!(nonce, r.nonce);
    exchange(&s, port, &Message::Request(Request { cookie, ..r })).2
}

fn request(nonce: u64, bps: u64, fps: u32, len: u32, dgram: u32, buffer_ms: u32) -> Request {
    Request {
        nonce,
        bits_per_second: bps,
        frame_rate: fps,
        length_s: len,
        datagram_bytes: dgram,
        upload: true,
        verify_data: false,
        buffer_ms,
        cookie: [0; COOKIE_LEN],
    }
}

fn normal_client(port: u16, upload: bool) {
    let mut cmd = goodput();
    cmd.args([
        "udp",
        "127.0.0.1",
        "-p",
        &port.to_string(),
        "-b",
        "4M",
        "--frame-rate",
        "50",
    ])
    .args(["--length", "1s", "--verbosity", "1"]);
    if upload {
        cmd.arg("--upload");
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The exploit and its milder variants, each through the cookie round
/// trip, each refused with the field named; then normal clients succeed.
#[test]
fn requests_above_the_limits_are_refused_with_the_reason_and_cost_nothing() {
    let srv = start("hostile-media", &[]);
    let cases = [
        // The exploit: 10^11 b/s, 7101 fps, 7 days, 65,507-byte datagrams,
        // a 4294967295 ms buffer.
        (
            request(1, 100_000_000_000, 7101, 604_800, 65_507, u32::MAX),
            RejectReason::Buffer,
        ),
        // Milder: a buffer of 20 minutes (3.9 GB held for the stream's life).
        (
            request(2, 100_000_000_000, 7101, 600, 65_507, 1_200_000),
            RejectReason::Buffer,
        ),
        (
            request(3, 100_000_000_001, 60, 10, 1400, 1000),
            RejectReason::BitRate,
        ),
        (
            request(4, 25_000_000, 1_000_000, 10, 1400, 1000),
            RejectReason::FrameRate,
        ),
        (
            request(5, 25_000_000, 60, u32::MAX, 1400, 1000),
            RejectReason::Length,
        ),
        // A frame of 1 GB in 1,400-byte datagrams: more than the header
        // numbers, once truncated to 16 bits.
        (
            request(6, 8_000_000_000, 1, 10, 1400, 1000),
            RejectReason::BadPlan,
        ),
        // A 35-byte datagram size once made a 1-byte datagram whose header
        // arithmetic underflowed.
        (request(7, 36 * 8, 1, 10, 35, 1000), RejectReason::BadPlan),
        (
            request(8, 25_000_000, 60, 10, 70_000, 1000),
            RejectReason::BadPlan,
        ),
    ];
    for (r, want) in cases {
        match round_trip(srv.port, r) {
            Message::Reject { nonce, reason } => {
                assert_eq!((nonce, reason), (r.nonce, want), "{r:?}");
            }
            other => panic!("{r:?}: {other:?}"),
        }
    }
    assert!(proc_kib(srv.child.pid(), "VmHWM") < RSS_CEILING_KIB);
    normal_client(srv.port, false);
    normal_client(srv.port, true);
    let (out, doc) = srv.stop();
    let c = &doc["media_server"];
    assert_eq!(c["rejected_limits"], 8, "{c}");
    assert_eq!(c["rejected"], 8, "{c}");
    assert_eq!(c["accepted"], 2, "{c}");
    assert_eq!(c["completed"], 2, "{c}");
    assert!(out.contains("10000 fps"), "{out}");
}

/// With a budget of 8 MiB and a per-stream ceiling of 2.7 MiB (1,000 fps
/// with a 10 s buffer), the third upload held at once and every one after
/// it is refused for memory; what the budget allowed never exceeded it.
/// Each upload comes from an address of its own (127.0.0.10…), so the
/// budget is reached before any address's own share.
#[test]
fn the_memory_budget_holds_across_streams() {
    let srv = start(
        "hostile-media-budget",
        &["--udp-max-memory", "8MiB", "--udp-max-frame-rate", "1000"],
    );
    let mut held = Vec::new();
    let mut refused = 0;
    for nonce in 0..6u64 {
        let s = UdpSocket::bind((std::net::Ipv4Addr::new(127, 0, 0, 10 + nonce as u8), 0)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        // 1,000 fps, 10 s buffer: 10,000 frames buffered.
        let r = request(100 + nonce, 8_000_000, 1000, 60, 1000, 10_000);
        let (_, _, m) = exchange(&s, srv.port, &Message::Request(r));
        let Message::Challenge { cookie, .. } = m else {
            panic!("{m:?}")
        };
        match exchange(&s, srv.port, &Message::Request(Request { cookie, ..r })).2 {
            Message::Accept { .. } => held.push(s),
            Message::Reject { reason, .. } => {
                assert_eq!(reason, RejectReason::Memory);
                refused += 1;
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(
        (held.len(), refused),
        (2, 4),
        "each upload is counted at its ceiling"
    );
    drop(held);
    let (_, doc) = srv.stop();
    let c = &doc["media_server"];
    assert_eq!(c["rejected_memory"], 4, "{c}");
    let peak = c["memory_peak_bytes"].as_u64().unwrap();
    assert!(peak > 0 && peak <= 8 << 20, "{c}");
}

/// An unknown source's request gets one challenge no larger than the
/// request, and junk gets nothing.
#[test]
fn an_unknown_source_gets_no_more_than_it_sent() {
    let srv = start("hostile-media-amp", &[]);
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
    let req = encode(&Message::Request(request(9, 25_000_000, 60, 10, 1400, 1000)));
    let mut junk: Vec<Vec<u8>> = vec![vec![], vec![0; 1], b"GPMS".to_vec(), vec![0xAB; 1400]];
    junk.push(req[..req.len() - 1].to_vec());
    let (mut sent, mut got) = (0usize, 0usize);
    let mut buf = [0u8; 2048];
    for d in junk.iter().chain(std::iter::once(&req)) {
        s.send_to(d, ("127.0.0.1", srv.port)).unwrap();
        sent += d.len();
        while let Ok(n) = s.recv(&mut buf) {
            assert!(n <= d.len(), "{n} bytes back for {}", d.len());
            got += n;
        }
    }
    eprintln!(
        "media: {sent} B in, {got} B out (payload ratio {:.3}); one request {} B → challenge {got} B, \
         on the wire {} → {} B",
        got as f64 / sent as f64,
        req.len(),
        req.len() + 28,
        got + 28
    );
    assert!(got > 0 && got <= req.len());
    let (_, doc) = srv.stop();
    assert_eq!(doc["media_server"]["challenged"], 1);
}
