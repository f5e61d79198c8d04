//! iperf3 interoperability, both ways, against Debian's iperf3 (3.12 in CI):
//! goodput's client against a stock `iperf3 -s`, and a stock `iperf3 -c`
//! against `goodput server --iperf3`. Every check compares figures from the
//! two programs' own reports.
//!
//! `.ci/run` installs iperf3 and sets CI=true, which makes a missing iperf3
//! a failure; elsewhere these tests are skipped (with a message) when
//! iperf3 is not installed.

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;

/// The tests move a lot of data; one at a time keeps UDP loss and timing
/// out of each other's way on a 2-core machine.
static SERIAL: Mutex<()> = Mutex::new(());

fn have_iperf3() -> bool {
    common::works("iperf3", &["--version"], "apt-get install iperf3")
}

fn goodput() -> Command {
    Command::new(env!("CARGO_BIN_EXE_goodput"))
}

fn tmp(name: &str) -> PathBuf {
    common::tmp("iperf3", name)
}

/// A port free for both TCP and UDP on 127.0.0.1.
fn free_port() -> u16 {
    loop {
        let t = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = t.local_addr().unwrap().port();
        if UdpSocket::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// Waits until something listens on TCP `port` (read from /proc, so no
/// probe connection is made: a probe would count as a test for iperf3 -1).
fn wait_listening(port: u16) {
    let needle = format!(":{port:04X} ");
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        for f in ["/proc/net/tcp", "/proc/net/tcp6"] {
            let t = std::fs::read_to_string(f).unwrap_or_default();
            if t.lines().any(|l| {
                let cols: Vec<&str> = l.split_whitespace().collect();
                cols.len() > 3 && format!("{} ", cols[1]).ends_with(&needle) && cols[3] == "0A"
            }) {
                return;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("nothing listens on port {port}");
}

/// A one-test stock iperf3 server printing its -J report.
fn iperf3_server(port: u16) -> Child {
    let c = Command::new("iperf3")
        .args(["-s", "-1", "-J", "-B", "127.0.0.1", "-p"])
        .arg(port.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_listening(port);
    c
}

fn finish(c: Child) -> Value {
    let out = c.wait_with_output().unwrap();
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("iperf3 -J output: {e}\n{}", String::from_utf8_lossy(&out.stdout)))
}

fn check(out: &Output) -> String {
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(0), "{text}");
    text
}

/// Runs goodput's client against a stock server; returns (our result
/// document, our -J document, the server's -J report).
fn client_run(name: &str, args: &[&str]) -> (Value, Value, Value) {
    let port = free_port();
    let server = iperf3_server(port);
    let json = tmp(&format!("{name}.json"));
    let ij = tmp(&format!("{name}-iperf3.json"));
    let out = goodput()
        .args(["iperf3", "127.0.0.1", "-v", "1", "-p"])
        .arg(port.to_string())
        .args(args)
        .arg("--json")
        .arg(&json)
        .arg("--iperf3-json")
        .arg(&ij)
        .output()
        .unwrap();
    check(&out);
    let server = finish(server);
    let ours: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let ij: Value = serde_json::from_slice(&std::fs::read(&ij).unwrap()).unwrap();
    (ours, ij, server)
}

fn streams(ours: &Value) -> Vec<Value> {
    ours["iperf3"]["streams"].as_array().unwrap().clone()
}

/// The server's end-of-test bytes per stream socket, in socket order (its
/// sockets are numbered in accept order, like stream ids).
fn server_stream_bytes(server: &Value, sender: bool) -> Vec<u64> {
    server["end"]["streams"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| {
            let o = if s.get("udp").is_some() {
                &s["udp"]
            } else if sender {
                &s["sender"]
            } else {
                &s["receiver"]
            };
            (o["sender"].as_bool() == Some(sender)).then(|| o["bytes"].as_u64().unwrap())
        })
        .collect()
}

#[test]
fn client_tcp_upload_counts_agree_with_the_iperf3_server() {
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !have_iperf3() {
        return;
    }
    let (ours, ij, server) = client_run("tcp", &["-t", "2"]);
    let s = streams(&ours);
    assert_eq!(s.len(), 1);
    assert_eq!(s[0]["id"], 1);
    assert_eq!(s[0]["sender"], true);
    let sent = s[0]["bytes"].as_u64().unwrap();
    assert!(sent > 0);
    // The server counted every byte we sent (goodput waits for its send
    // queue to drain before TEST_END), and said so in the exchange.
    assert_eq!(server_stream_bytes(&server, false), vec![sent]);
    assert_eq!(s[0]["peer"]["bytes"].as_u64(), Some(sent));
    assert_eq!(ours["summary"]["successful"], 1);
    assert!(ours["connections"][0]["tcp_info"]["rtt_us"].as_u64().is_some());
    // Our -J shape: sender/receiver per stream and the sums.
    assert_eq!(ij["end"]["sum_sent"]["bytes"].as_u64(), Some(sent));
    assert_eq!(ij["end"]["sum_received"]["bytes"].as_u64(), Some(sent));
    assert_eq!(ij["end"]["streams"][0]["sender"]["bytes"].as_u64(), Some(sent));
    assert_eq!(ij["start"]["test_start"]["protocol"], "TCP");
    assert!(ij["intervals"].as_array().unwrap().len() >= 2);
    // 2 s at the interval default of 1 s, as the server's own report.
    let secs = ij["end"]["sum_sent"]["seconds"].as_f64().unwrap();
    assert!((1.9..2.6).contains(&secs), "{secs}");
}

#[test]
fn client_tcp_reverse_and_parallel_match_the_server_per_stream() {
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !have_iperf3() {
        return;
    }
    let (ours, _, server) = client_run("reverse", &["-t", "2", "-R"]);
    let s = streams(&ours);
    assert_eq!(s[0]["sender"], false);
    let got = s[0]["bytes"].as_u64().unwrap();
    let server_sent = server_stream_bytes(&server, true);
    assert_eq!(server_sent.len(), 1);
    // The server's figure reached us through the results exchange...
    assert_eq!(s[0]["peer"]["bytes"].as_u64(), Some(server_sent[0]));
    // ...and we received all but what was in flight when the test ended.
    assert!(got > 0 && got <= server_sent[0], "{got} vs {server_sent:?}");

    let (ours, _, server) = client_run("parallel", &["-t", "2", "-P", "4"]);
    let s = streams(&ours);
    let ids: Vec<u64> = s.iter().map(|x| x["id"].as_u64().unwrap()).collect();
    assert_eq!(ids, [1, 3, 4, 5]);
    let mine: Vec<u64> = s.iter().map(|x| x["bytes"].as_u64().unwrap()).collect();
    assert_eq!(server_stream_bytes(&server, false), mine);
    assert_eq!(ours["summary"]["successful"], 4);
}

#[test]
fn client_bidir_and_byte_count() {
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !have_iperf3() {
        return;
    }
    let (ours, ij, server) = client_run("bidir", &["-t", "2", "--bidir"]);
    let s = streams(&ours);
    assert_eq!(s.len(), 2);
    assert_eq!(
        (s[0]["sender"].as_bool(), s[1]["sender"].as_bool()),
        (Some(true), Some(false))
    );
    // Each side's peer entry is the server's own figure for that stream.
    assert_eq!(
        s[0]["peer"]["bytes"].as_u64(),
        Some(server_stream_bytes(&server, false)[0])
    );
    assert_eq!(
        s[1]["peer"]["bytes"].as_u64(),
        Some(server_stream_bytes(&server, true)[0])
    );
    assert!(s[0]["bytes"].as_u64().unwrap() > 0 && s[1]["bytes"].as_u64().unwrap() > 0);
    assert!(ij["end"]["sum_sent_bidir_reverse"]["bytes"].as_u64().unwrap() > 0);

    // -n 10M: whole 128 KiB blocks, so exactly 10 MiB, and the server got all.
    let (ours, _, server) = client_run("bytes", &["-n", "10M"]);
    let s = streams(&ours);
    assert_eq!(s[0]["bytes"].as_u64(), Some(10 << 20));
    assert_eq!(server_stream_bytes(&server, false), vec![10 << 20]);
    assert_eq!(server["start"]["test_start"]["bytes"].as_u64(), Some(10 << 20));

    // -n 10M over four streams, which share sender threads: the blocks the
    // streams claim add up to exactly 10 MiB, and the server got each one.
    let (ours, _, server) = client_run("bytes-p4", &["-n", "10M", "-P", "4"]);
    let mine: Vec<u64> = streams(&ours)
        .iter()
        .map(|x| x["bytes"].as_u64().unwrap())
        .collect();
    assert_eq!(mine.iter().sum::<u64>(), 10 << 20, "{mine:?}");
    assert!(
        mine.iter().all(|&b| b % (128 << 10) == 0),
        "whole blocks: {mine:?}"
    );
    assert_eq!(server_stream_bytes(&server, false), mine);
}

#[test]
fn client_udp_at_a_set_rate_both_directions() {
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !have_iperf3() {
        return;
    }
    let (ours, ij, server) = client_run("udp", &["-u", "-b", "20M", "-t", "2", "-l", "1400"]);
    let s = streams(&ours);
    let sent = s[0]["udp"]["packets"].as_u64().unwrap();
    let bytes = s[0]["bytes"].as_u64().unwrap();
    assert_eq!(bytes, sent * 1400);
    // 20 Mbit/s for 2 s is 3571 datagrams of 1400 B; pacing keeps to it.
    assert!((3400..=3700).contains(&sent), "{sent}");
    let srv = &server["end"]["streams"][0]["udp"];
    let (lost, highest) = (
        srv["lost_packets"].as_u64().unwrap(),
        srv["packets"].as_u64().unwrap(),
    );
    // The server's figures agree with what we sent: its highest sequence is
    // our last datagram unless the tail was lost, and its byte count is
    // exactly the datagrams it did not count lost.
    assert!(highest <= sent);
    assert_eq!(s[0]["peer"]["bytes"].as_u64().unwrap(), (highest - lost) * 1400);
    assert_eq!(s[0]["peer"]["lost"].as_i64(), Some(lost as i64));
    assert_eq!(ij["end"]["sum"]["packets"].as_u64(), Some(sent));

    let (ours, _, server) = client_run("udp-r", &["-u", "-b", "20M", "-t", "2", "-l", "1400", "-R"]);
    let s = streams(&ours);
    let u = &s[0]["udp"];
    let server_sent = server["end"]["streams"][0]["udp"]["packets"].as_u64().unwrap();
    let arrived = u["received"].as_u64().unwrap();
    assert!(
        arrived > 3000 && arrived <= server_sent,
        "{arrived} of {server_sent}"
    );
    assert_eq!(s[0]["bytes"].as_u64().unwrap(), arrived * 1400);
    // iperf3's loss arithmetic: highest sequence minus arrivals (no
    // duplicates on loopback).
    assert_eq!(
        u["lost"].as_u64().unwrap() + u["out_of_order"].as_u64().unwrap(),
        u["packets"].as_u64().unwrap() - arrived + u["out_of_order"].as_u64().unwrap()
    );
    assert!(u["jitter_ms"].as_f64().unwrap() >= 0.0);
}

/// A goodput server with the iperf3 service on a free port.
struct GoodputServer {
    child: Child,
    port: u16,
}

impl GoodputServer {
    fn start() -> Self {
        let port = free_port();
        let child = goodput()
            .args([
                "server",
                "--listen",
                "127.0.0.1",
                "--port",
                "0",
                "--iperf3",
                "--iperf3-listen",
                "127.0.0.1",
            ])
            .args([
                "--iperf3-port",
                &port.to_string(),
                "-v",
                "2",
                "--status-interval",
                "1h",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        wait_listening(port);
        Self { child, port }
    }

    fn iperf3(&self, args: &[&str]) -> (Output, Value) {
        let out = Command::new("iperf3")
            .args(["-c", "127.0.0.1", "-J", "-p"])
            .arg(self.port.to_string())
            .args(args)
            .output()
            .unwrap();
        let v = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        (out, v)
    }

    fn stop(mut self) -> String {
        // SIGINT: the server prints its summary and exits.
        unsafe_kill(self.child.id());
        let mut s = String::new();
        self.child.stdout.take().unwrap().read_to_string(&mut s).unwrap();
        let status = self.child.wait().unwrap();
        assert!(status.code().is_some(), "server died by a signal");
        s
    }
}

impl Drop for GoodputServer {
    fn drop(&mut self) {
        // A failed assertion must not leave the server running.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn unsafe_kill(pid: u32) {
    let _ = Command::new("kill").args(["-INT", &pid.to_string()]).status();
}

fn sum(v: &Value, key: &str) -> u64 {
    v["end"][key]["bytes"]
        .as_u64()
        .unwrap_or_else(|| panic!("no end.{key}.bytes in {v}"))
}

#[test]
fn iperf3_client_tcp_against_goodput_server() {
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !have_iperf3() {
        return;
    }
    let srv = GoodputServer::start();
    // Upload: the receiver figures come from goodput's server through the
    // results exchange, and match to the byte (the server takes in what was
    // in flight before it counts).
    let (out, v) = srv.iperf3(&["-t", "2"]);
    check(&out);
    assert!(sum(&v, "sum_sent") > 0);
    assert_eq!(sum(&v, "sum_received"), sum(&v, "sum_sent"));
    assert!(
        v["end"]["cpu_utilization_percent"]["remote_total"]
            .as_f64()
            .unwrap()
            > 0.0
    );

    // Reverse: the server's sent figure is at least what the client got.
    let (out, v) = srv.iperf3(&["-t", "2", "-R"]);
    check(&out);
    assert!(sum(&v, "sum_received") > 0 && sum(&v, "sum_sent") >= sum(&v, "sum_received"));

    // -P 4 with byte count: every stream, exact.
    let (out, v) = srv.iperf3(&["-n", "20M", "-P", "4"]);
    check(&out);
    assert_eq!(v["end"]["streams"].as_array().unwrap().len(), 4);
    assert_eq!(sum(&v, "sum_received"), sum(&v, "sum_sent"));
    assert!(sum(&v, "sum_sent") >= 20 << 20);

    // The same sent by the server (its four senders share a thread): the
    // server's blocks add up to exactly 20 MiB and the client got them all.
    let (out, v) = srv.iperf3(&["-n", "20M", "-P", "4", "-R"]);
    check(&out);
    assert_eq!(v["end"]["streams"].as_array().unwrap().len(), 4);
    assert_eq!(sum(&v, "sum_sent"), 20 << 20);
    assert_eq!(sum(&v, "sum_received"), 20 << 20);

    // --bidir: both directions have the server's figures.
    let (out, v) = srv.iperf3(&["-t", "2", "--bidir"]);
    check(&out);
    assert_eq!(sum(&v, "sum_received"), sum(&v, "sum_sent"));
    assert!(sum(&v, "sum_sent_bidir_reverse") > 0);
    assert!(sum(&v, "sum_sent_bidir_reverse") >= sum(&v, "sum_received_bidir_reverse"));

    // --get-server-output shows goodput's own report.
    let (out, v) = srv.iperf3(&["-t", "1", "--get-server-output"]);
    check(&out);
    let text = v["server_output_text"].as_str().unwrap_or_default();
    assert!(text.contains("goodput") && text.contains("received"), "{v}");

    let console = srv.stop();
    assert_eq!(console.matches("iperf3 TCP test").count(), 6, "{console}");
}

#[test]
fn iperf3_client_udp_against_goodput_server() {
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !have_iperf3() {
        return;
    }
    let srv = GoodputServer::start();
    let (out, v) = srv.iperf3(&["-u", "-b", "20M", "-t", "2", "-l", "1400"]);
    check(&out);
    let u = &v["end"]["sum"];
    let sent = v["end"]["streams"][0]["udp"]["packets"].as_u64().unwrap();
    assert!((3400..=3700).contains(&sent), "{v}");
    // The loss and byte figures come from goodput's receiver.
    let lost = u["lost_packets"].as_u64().unwrap();
    assert_eq!(sum(&v, "sum_received"), (sent - lost) * 1400, "{v}");

    let (out, v) = srv.iperf3(&["-u", "-b", "20M", "-t", "2", "-l", "1400", "-R"]);
    check(&out);
    let sent = sum(&v, "sum_sent");
    assert!(sent >= 3400 * 1400, "{v}");
    assert!(sum(&v, "sum_received") <= sent);

    let (out, v) = srv.iperf3(&["-u", "-b", "10M", "-t", "2", "-l", "1400", "--bidir", "-P", "2"]);
    check(&out);
    assert_eq!(v["end"]["streams"].as_array().unwrap().len(), 4);
    assert!(sum(&v, "sum_sent_bidir_reverse") > 0);
    srv.stop();
}

#[test]
fn goodput_server_refuses_a_second_client_and_survives_bad_input() {
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !have_iperf3() {
        return;
    }
    let srv = GoodputServer::start();
    let port = srv.port;
    let first = Command::new("iperf3")
        .args(["-c", "127.0.0.1", "-t", "3", "-p", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(800));
    let second = Command::new("iperf3")
        .args(["-c", "127.0.0.1", "-t", "1", "-p", &port.to_string()])
        .output()
        .unwrap();
    assert_ne!(second.status.code(), Some(0));
    let text = String::from_utf8_lossy(&second.stderr).to_string() + &String::from_utf8_lossy(&second.stdout);
    assert!(text.contains("busy"), "{text}");
    assert_eq!(first.wait_with_output().unwrap().status.code(), Some(0));

    let cookie = b"abcdefghijklmnopqrstuvwxyz2345672345\0";
    let talk = |bytes: &[u8]| -> Vec<u8> {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
        let _ = s.write_all(bytes);
        let mut got = Vec::new();
        let _ = s.read_to_end(&mut got);
        got
    };
    // Oversized parameters: PARAM_EXCHANGE, then SERVER_ERROR 114, then close.
    let mut msg = cookie.to_vec();
    msg.extend_from_slice(&(1u32 << 20).to_be_bytes());
    assert_eq!(
        talk(&msg),
        [&[9u8, 0xFE][..], &114i32.to_be_bytes(), &0i32.to_be_bytes()].concat()
    );
    // Malformed JSON: the same error code.
    let mut msg = cookie.to_vec();
    msg.extend_from_slice(&5u32.to_be_bytes());
    msg.extend_from_slice(b"{nope");
    assert_eq!(
        talk(&msg),
        [&[9u8, 0xFE][..], &114i32.to_be_bytes(), &0i32.to_be_bytes()].concat()
    );
    // Too many streams: iperf3's IENUMSTREAMS (6).
    let json = br#"{"tcp":true,"time":1,"parallel":500,"len":1000}"#;
    let mut msg = cookie.to_vec();
    msg.extend_from_slice(&(json.len() as u32).to_be_bytes());
    msg.extend_from_slice(json);
    assert_eq!(
        talk(&msg),
        [&[9u8, 0xFE][..], &6i32.to_be_bytes(), &0i32.to_be_bytes()].concat()
    );
    // A client that vanishes after CREATE_STREAMS, and one whose data
    // connection has the wrong cookie (answered with ACCESS_DENIED).
    {
        let json = br#"{"tcp":true,"time":1,"parallel":1,"len":1000}"#;
        let mut ctl = TcpStream::connect(("127.0.0.1", port)).unwrap();
        ctl.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        ctl.write_all(cookie).unwrap();
        ctl.write_all(&(json.len() as u32).to_be_bytes()).unwrap();
        ctl.write_all(json).unwrap();
        let mut b = [0u8; 2];
        ctl.read_exact(&mut b).unwrap();
        assert_eq!(b, [9, 10]);
        let mut data = TcpStream::connect(("127.0.0.1", port)).unwrap();
        data.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        data.write_all(b"wrongwrongwrongwrongwrongwrongwrong1\0").unwrap();
        let mut r = [0u8; 1];
        data.read_exact(&mut r).unwrap();
        assert_eq!(r, [0xFF]);
        drop(ctl);
    }
    // A client killed in the middle of a test: the server sees its control
    // connection close, ends that test and serves the next.
    let mut doomed = Command::new("iperf3")
        .args(["-c", "127.0.0.1", "-t", "10", "-P", "2", "-p", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1200));
    doomed.kill().unwrap();
    doomed.wait().unwrap();
    // A UDP hello from another address than the control connection's opens
    // no stream (no reply, no data aimed at it); the real host's does.
    {
        let json = br#"{"udp":true,"time":1,"parallel":1,"len":1400,"bandwidth":1000000}"#;
        // The previous test may still be ending: retry while told "busy".
        let deadline = Instant::now() + Duration::from_secs(10);
        let ctl = loop {
            let mut ctl = TcpStream::connect(("127.0.0.1", port)).unwrap();
            ctl.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            ctl.write_all(cookie).unwrap();
            let mut b = [0u8; 1];
            ctl.read_exact(&mut b).unwrap();
            if b[0] == 9 {
                ctl.write_all(&(json.len() as u32).to_be_bytes()).unwrap();
                ctl.write_all(json).unwrap();
                ctl.read_exact(&mut b).unwrap();
                assert_eq!(b[0], 10);
                break ctl;
            }
            assert_eq!(b[0], 0xFF);
            assert!(Instant::now() < deadline, "the server stayed busy");
            std::thread::sleep(Duration::from_millis(100));
        };
        let forged = UdpSocket::bind("127.0.0.2:0").unwrap();
        forged.set_read_timeout(Some(Duration::from_millis(700))).unwrap();
        forged.send_to(b"9876", ("127.0.0.1", port)).unwrap();
        let mut r = [0u8; 64];
        assert!(forged.recv_from(&mut r).is_err(), "a forged hello was answered");
        let real = UdpSocket::bind("127.0.0.1:0").unwrap();
        real.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        real.send_to(b"9876", ("127.0.0.1", port)).unwrap();
        let (n, _) = real.recv_from(&mut r).unwrap();
        assert_eq!(&r[..n], b"6789");
        drop(ctl);
    }
    // Still serving, once the UDP test just abandoned has ended (the
    // server notices its control connection close a moment later; until
    // then it answers "busy", which stock iperf3 reports with status 0).
    let deadline = Instant::now() + Duration::from_secs(10);
    let (out, v) = loop {
        let (out, v) = srv.iperf3(&["-t", "1"]);
        let busy = v["error"].as_str().is_some_and(|e| e.contains("busy"));
        if !busy || Instant::now() > deadline {
            break (out, v);
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    check(&out);
    assert_eq!(sum(&v, "sum_received"), sum(&v, "sum_sent"));
    let console = srv.stop();
    assert!(console.contains("iperf3: refused"), "{console}");
    assert!(console.contains("failed"), "{console}");
}

#[test]
fn busy_and_refused_servers_are_clear_errors_for_the_client() {
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let port = free_port();
    let out = goodput()
        .args(["iperf3", "127.0.0.1", "-t", "1", "-p", &port.to_string()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("connect") && err.contains("refused"), "{err}");

    // The embedded server: no HOST runs a whole test on loopback.
    let out = goodput()
        .args(["iperf3", "-t", "1", "-P", "2", "--bidir"])
        .output()
        .unwrap();
    let text = check(&out);
    assert!(
        text.contains("iperf3 TCP test, bidirectional, 2 stream(s)"),
        "{text}"
    );
}

#[test]
fn omit_and_block_count_against_the_embedded_server() {
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    // -O 1 -t 2: three seconds in all; the figures cover the last two and
    // the first interval is marked omitted; -J goes to standard output.
    let out = goodput()
        .args(["iperf3", "-t", "2", "-O", "1", "-v", "0", "--iperf3-json", "-"])
        .output()
        .unwrap();
    let text = check(&out);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {text}"));
    assert_eq!(v["start"]["test_start"]["omit"], 1);
    let ivs = v["intervals"].as_array().unwrap();
    assert!(ivs.len() >= 3, "{v}");
    assert_eq!(ivs[0]["sum"]["omitted"], true);
    assert_eq!(ivs[ivs.len() - 1]["sum"]["omitted"], false);
    let secs = v["end"]["sum_sent"]["seconds"].as_f64().unwrap();
    assert!((1.9..2.5).contains(&secs), "{secs}");
    // The sender's figures start at the omit boundary: less than the sum of
    // all intervals.
    let all: u64 = ivs.iter().map(|i| i["sum"]["bytes"].as_u64().unwrap()).sum();
    let counted = v["end"]["sum_sent"]["bytes"].as_u64().unwrap();
    assert!(counted > 0 && counted < all, "{counted} of {all}");

    // -k 100 -l 64K: exactly 100 blocks each way of the exchange.
    let json = tmp("blocks.json");
    let out = goodput()
        .args(["iperf3", "-k", "100", "-l", "64K", "-v", "0", "--json"])
        .arg(&json)
        .output()
        .unwrap();
    check(&out);
    let r: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let s = &r["iperf3"]["streams"][0];
    assert_eq!(s["bytes"].as_u64(), Some(100 * 65536));
    assert_eq!(s["peer"]["bytes"].as_u64(), Some(100 * 65536));
    assert_eq!(r["kind"], "iperf3_client");
    assert_eq!(r["settings"]["wire"], "iperf3");
}
