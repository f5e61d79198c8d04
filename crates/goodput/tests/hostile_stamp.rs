//! Hostile input against the STAMP reflector and the other stateless UDP
//! ports of a real `goodput server`, run under an address-space limit: no
//! unknown source gets more bytes back than it sent, one source cannot
//! take more than its per-source rate, every datagram is counted, and a
//! normal STAMP sender still succeeds afterwards.

mod common;

use std::net::UdpSocket;
use std::time::{Duration, Instant};

use common::*;

/// Peak RSS the server may reach here; an idle server is about 10 MiB and
/// the reflector's state is bounded at 65,536 sources.
const RSS_CEILING_KIB: u64 = 64 * 1024;
/// IPv4 + UDP headers: what a datagram costs on the wire beyond its payload.
const HEADERS: u64 = 28;

struct Server {
    child: Reaped,
    stamp: u16,
    discard: u16,
    iperf3: u16,
    json: std::path::PathBuf,
}

fn start(group: &str, extra: &[&str]) -> Server {
    let (port, stamp, discard, iperf3) = (free_tcp_port(), free_udp_port(), free_udp_port(), free_tcp_port());
    let json = tmp(group, "server.json");
    let mut cmd = goodput();
    cmd.args(["server", "--listen", "127.0.0.1", "--no-udp", "--verbosity", "1"])
        .args(["--port", &port.to_string()])
        .args([
            "--stamp",
            "--stamp-listen",
            "127.0.0.1",
            "--stamp-port",
            &stamp.to_string(),
        ])
        .args(["--discard-port", &discard.to_string()])
        .args([
            "--iperf3",
            "--iperf3-listen",
            "127.0.0.1",
            "--iperf3-port",
            &iperf3.to_string(),
        ])
        .arg("--json")
        .arg(&json)
        .args(extra);
    let child = spawn_limited(cmd, SERVER_ADDRESS_SPACE);
    wait_tcp_listening(port);
    wait_udp_bound(stamp);
    Server {
        child,
        stamp,
        discard,
        iperf3,
        json,
    }
}

impl Server {
    /// Stops the server with SIGINT; returns its banner and result document.
    fn stop(mut self) -> (String, serde_json::Value) {
        assert!(self.child.alive(), "the server died");
        let peak = proc_kib(self.child.pid(), "VmHWM");
        assert!(peak > 0 && peak < RSS_CEILING_KIB, "server peak RSS {peak} KiB");
        let (code, out, err) = self.child.stop(libc::SIGINT);
        assert_eq!(code, Some(0), "stdout: {out}\nstderr: {err}");
        assert!(!err.contains("panicked"), "{err}");
        let doc = serde_json::from_str(&std::fs::read_to_string(&self.json).unwrap()).unwrap();
        (out, doc)
    }
}

/// Bytes sent and received by one unknown source, payload and datagrams.
#[derive(Debug, Default)]
struct Exchange {
    sent_bytes: u64,
    sent_datagrams: u64,
    got_bytes: u64,
    got_datagrams: u64,
}

impl Exchange {
    fn wire_in(&self) -> u64 {
        self.sent_bytes + HEADERS * self.sent_datagrams
    }
    fn wire_out(&self) -> u64 {
        self.got_bytes + HEADERS * self.got_datagrams
    }
}

/// Sends each datagram from a fresh socket (a source the server has never
/// seen), collects every answer for a short while after, and checks that no
/// datagram got more bytes back than it carried, payload or on the wire.
fn probe(port: u16, datagrams: &[Vec<u8>]) -> Exchange {
    let mut x = Exchange::default();
    let mut sockets = Vec::new();
    for d in datagrams {
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        s.send_to(d, ("127.0.0.1", port)).unwrap();
        x.sent_bytes += d.len() as u64;
        x.sent_datagrams += 1;
        sockets.push(s);
    }
    std::thread::sleep(Duration::from_millis(300));
    let mut buf = vec![0u8; 70_000];
    for (s, d) in sockets.iter().zip(datagrams) {
        s.set_nonblocking(true).unwrap();
        let (mut bytes, mut count) = (0u64, 0u64);
        // An ICMP port-unreachable shows as a refused read: no bytes.
        while let Ok(n) = s.recv(&mut buf) {
            bytes += n as u64;
            count += 1;
        }
        let len = d.len() as u64;
        assert!(bytes <= len, "{bytes} B back for a {len}-B datagram");
        assert!(
            bytes + HEADERS * count <= len + HEADERS,
            "{count} datagrams back for one"
        );
        x.got_bytes += bytes;
        x.got_datagrams += count;
    }
    x
}

/// Datagrams of every interesting length: empty, under the 14-octet
/// TWAMP-Light minimum, short TWAMP-Light, the 44-octet base packet, with
/// TLVs, jumbo, and over the reflector's 9,000-octet cap.
fn lengths() -> Vec<Vec<u8>> {
    let mut x: u32 = 7;
    [0usize, 1, 13, 14, 20, 43, 44, 45, 60, 100, 1000, 1472, 9000, 9500]
        .iter()
        .map(|&n| {
            (0..n)
                .map(|_| {
                    x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
                    (x >> 16) as u8
                })
                .collect()
        })
        .collect()
}

/// Bytes out ÷ bytes in for an unknown source, on each stateless UDP port
/// of the server: the STAMP reflector never answers with more than it got
/// (short requests are not padded by default), UDP discard and the iperf3
/// port (no test running) answer nothing.
#[test]
fn no_udp_service_sends_an_unknown_source_more_than_it_got() {
    let server = start("hostile-stamp-amp", &[]);
    let datagrams = lengths();
    let stamp = probe(server.stamp, &datagrams);
    let discard = probe(server.discard, &datagrams);
    let iperf3 = probe(server.iperf3, &datagrams);
    for (name, x) in [("stamp", &stamp), ("discard", &discard), ("iperf3", &iperf3)] {
        eprintln!(
            "{name}: payload {} B in, {} B out (ratio {:.3}); on the wire {} B in, {} B out (ratio {:.3})",
            x.sent_bytes,
            x.got_bytes,
            x.got_bytes as f64 / x.sent_bytes as f64,
            x.wire_in(),
            x.wire_out(),
            x.wire_out() as f64 / x.wire_in() as f64
        );
        assert!(x.got_bytes <= x.sent_bytes, "{name}: {x:?}");
        assert!(x.wire_out() <= x.wire_in(), "{name}: {x:?}");
    }
    // STAMP answers every request of 14..=9000 octets with its own size;
    // the three under 14 and the one over 9000 get nothing.
    let answered: u64 = datagrams
        .iter()
        .map(|d| d.len())
        .filter(|n| (14..=9000).contains(n))
        .map(|n| n as u64)
        .sum();
    assert_eq!((stamp.got_datagrams, stamp.got_bytes), (10, answered));
    assert_eq!((discard.got_datagrams, iperf3.got_datagrams), (0, 0));
    let (banner, doc) = server.stop();
    assert!(banner.contains("at most 10000 packets/s per source"), "{banner}");
    let c = &doc["stamp_reflector"];
    assert_eq!(c["received"], 14, "{c}");
    assert_eq!(c["reflected"], 10, "{c}");
    assert_eq!(c["short_answered"], 3, "{c}");
    assert_eq!(c["too_short"], 3, "{c}");
    assert_eq!(c["oversized"], 1, "{c}");
}

/// With `--stamp-pad-short`, a short TWAMP-Light request gets the full
/// 44-octet packet that RFC 8762 §4.6 asks for: the one reply larger than
/// its request, and only when the operator allows it.
#[test]
fn padding_short_requests_is_opt_in() {
    let server = start("hostile-stamp-pad", &["--stamp-pad-short"]);
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    s.send_to(&[0u8; 14], ("127.0.0.1", server.stamp)).unwrap();
    let mut buf = [0u8; 100];
    assert_eq!(s.recv(&mut buf).unwrap(), 44);
    let (banner, _) = server.stop();
    assert!(banner.contains("short requests padded to 44 B"), "{banner}");
}

/// One source flooding past its rate is cut to its bucket while another
/// source is still answered; the counter says how many were dropped, and
/// a normal STAMP sender succeeds afterwards.
#[test]
fn a_flooding_source_is_held_to_its_rate() {
    let server = start("hostile-stamp-rate", &["--stamp-rate-limit", "100"]);
    let flood = UdpSocket::bind("127.0.0.1:0").unwrap();
    let other = UdpSocket::bind("127.0.0.2:0").unwrap();
    let target = ("127.0.0.1", server.stamp);
    let req = [0u8; 44];
    let t0 = Instant::now();
    for _ in 0..1000 {
        flood.send_to(&req, target).unwrap();
    }
    let mut buf = [0u8; 100];
    flood.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
    let mut answered = 0u64;
    while flood.recv(&mut buf).is_ok() {
        answered += 1;
    }
    let elapsed = t0.elapsed().as_secs_f64();
    // A bucket of one second's worth, refilled at 100/s while we sent and
    // listened.
    let most = 100 + (100.0 * elapsed).ceil() as u64;
    assert!(
        (100..=most).contains(&answered),
        "{answered} answered in {elapsed:.2} s"
    );
    // The flood does not shut out another source.
    other.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    other.send_to(&req, target).unwrap();
    assert_eq!(other.recv(&mut buf).unwrap(), 44);
    // A normal sender from a third address.
    let out = goodput()
        .args(["stamp", "127.0.0.1", "--port", &server.stamp.to_string()])
        .args(["--count", "20", "--interval", "20ms", "--bind", "127.0.0.3"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (_, doc) = server.stop();
    let c = &doc["stamp_reflector"];
    let limited = c["rate_limited"].as_u64().unwrap();
    let reflected = c["reflected"].as_u64().unwrap();
    assert_eq!(reflected, answered + 1 + 20, "{c}");
    assert_eq!(limited + answered, 1000, "{c}");
}
