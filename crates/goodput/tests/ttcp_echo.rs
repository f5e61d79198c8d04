//! TTCP and the echo load test end to end: goodput's transmitter and receiver against each other,
//! against Debian's `nc` (netcat-openbsd) and `socat` in both roles, and
//! against goodput server's discard and echo services.
//!
//! `.ci/run` installs nc and socat and sets CI=true, which makes a missing
//! one a failure; elsewhere those tests are skipped with a message.

mod common;

use std::fs::File;
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{
    free_tcp_port, free_udp_port, goodput, have, services_server, tmp, wait_tcp_listening, wait_udp_bound,
    Reaped,
};
use serde_json::Value;

fn json(name: &str) -> std::path::PathBuf {
    tmp("ttcp", name)
}

fn read(p: &std::path::Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| b' ' + (i % 95) as u8).collect()
}

fn receiver(port: u16, extra: &[&str], out: &std::path::Path) -> Reaped {
    let mut c = goodput();
    c.args(["ttcp", "-r", "-B", "127.0.0.1", "-p"])
        .arg(port.to_string())
        .args(extra)
        .arg("--json")
        .arg(out);
    Reaped::spawn(c)
}

#[test]
fn tcp_transmitter_to_receiver_moves_every_byte() {
    let port = free_tcp_port();
    let rj = json("tcp-r.json");
    let r = receiver(port, &[], &rj);
    wait_tcp_listening(port);
    let tj = json("tcp-t.json");
    let out = goodput()
        .args([
            "ttcp",
            "-t",
            "127.0.0.1",
            "-l",
            "8192",
            "-n",
            "256",
            "-D",
            "-b",
            "256KiB",
            "-p",
        ])
        .arg(port.to_string())
        .arg("--json")
        .arg(&tj)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("ttcp-t: 2097152 bytes in "), "{text}");
    assert!(text.contains("KB/sec +++"), "{text}");
    assert!(text.contains("I/O calls, msec/call = "), "{text}");
    assert!(text.contains("Mbit/s"), "{text}");
    let (code, rtext, rerr) = r.wait(Duration::from_secs(10));
    assert_eq!(code, Some(0), "{rtext}{rerr}");
    assert!(rtext.contains("ttcp-r: 2097152 bytes in "), "{rtext}");
    assert!(rerr.contains("accept from 127.0.0.1"), "{rerr}");
    let (t, r) = (read(&tj), read(&rj));
    assert_eq!(t["kind"], "ttcp_transmit");
    assert_eq!(r["kind"], "ttcp_receive");
    assert_eq!(t["ttcp"]["bytes"], 2_097_152);
    assert_eq!(r["ttcp"]["bytes"], 2_097_152);
    assert_eq!(t["ttcp"]["calls"].as_u64().unwrap(), 256, "{}", t["ttcp"]);
    assert!(r["ttcp"]["calls"].as_u64().unwrap() >= 256 / 2);
    assert_eq!(r["connections"][0]["received_bytes"], 2_097_152);
}

#[test]
fn udp_transmitter_to_receiver_with_markers() {
    let port = free_udp_port();
    let rj = json("udp-r.json");
    // A deep receive buffer: under a loaded test run the burst could
    // otherwise overflow it and take the end markers with it.
    let r = receiver(port, &["-u", "-l", "1000", "-b", "4194304"], &rj);
    wait_udp_bound(port);
    let start = Instant::now();
    let out = goodput()
        .args(["ttcp", "-t", "127.0.0.1", "-u", "-l", "1000", "-n", "300", "-p"])
        .arg(port.to_string())
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("300000 bytes in"), "{text}");
    assert!(text.contains("300 datagrams"), "{text}");
    // The end marker, not the idle timeout (5 s), ends the receiver.
    let (code, rtext, rerr) = r.wait(Duration::from_secs(10));
    assert!(start.elapsed() < Duration::from_secs(4), "{rerr}");
    assert_eq!(code, Some(0), "{rtext}{rerr}");
    assert!(rerr.contains("start marker from 127.0.0.1"), "{rerr}");
    let v = read(&rj);
    let (bytes, dgrams) = (
        v["ttcp"]["bytes"].as_u64().unwrap(),
        v["ttcp"]["datagrams"].as_u64().unwrap(),
    );
    // Loopback may drop a burst; what arrived is whole datagrams.
    assert!(dgrams > 0 && dgrams <= 300, "{dgrams}");
    assert_eq!(bytes, dgrams * 1000);
}

#[test]
fn transmitter_into_nc_delivers_the_pattern() {
    if !have("nc", &["-h"], "apt-get install netcat-openbsd") {
        return;
    }
    let port = free_tcp_port();
    let sink = tmp("ttcp", "nc-sink.bin");
    let mut c = Command::new("nc");
    c.args(["-l", "127.0.0.1"])
        .arg(port.to_string())
        .stdout(Stdio::from(File::create(&sink).unwrap()))
        .stderr(Stdio::null());
    let nc = Reaped::spawn_as_is(c);
    wait_tcp_listening(port);
    let out = goodput()
        .args([
            "ttcp",
            "-t",
            "127.0.0.1",
            "-l",
            "1000",
            "-n",
            "100",
            "-v",
            "0",
            "-p",
        ])
        .arg(port.to_string())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    nc.wait(Duration::from_secs(5));
    let got = std::fs::read(&sink).unwrap();
    assert_eq!(got.len(), 100_000);
    let unit = pattern(1000);
    assert!(got.chunks(1000).all(|c| c == unit.as_slice()));
}

#[test]
fn nc_and_socat_into_the_receiver_arrive_byte_for_byte() {
    if !have("nc", &["-h"], "apt-get install netcat-openbsd")
        || !have("socat", &["-V"], "apt-get install socat")
    {
        return;
    }
    let src = tmp("ttcp", "src.bin");
    let data: Vec<u8> = (0..123_457u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    File::create(&src).unwrap().write_all(&data).unwrap();
    for tool in ["socat", "nc"] {
        let port = free_tcp_port();
        let sink = tmp("ttcp", &format!("{tool}-got.bin"));
        let rj = json(&format!("{tool}-r.json"));
        let mut c = goodput();
        c.args(["ttcp", "-r", "--sinkmode=false", "-B", "127.0.0.1", "-p"])
            .arg(port.to_string())
            .arg("--json")
            .arg(&rj)
            .stdout(Stdio::from(File::create(&sink).unwrap()))
            .stderr(Stdio::piped());
        let r = Reaped::spawn_as_is(c);
        wait_tcp_listening(port);
        let status = match tool {
            "socat" => Command::new("socat")
                .args([
                    "-u",
                    &format!("FILE:{}", src.display()),
                    &format!("TCP:127.0.0.1:{port}"),
                ])
                .status()
                .unwrap(),
            _ => Command::new("nc")
                .args(["-N", "127.0.0.1", &port.to_string()])
                .stdin(Stdio::from(File::open(&src).unwrap()))
                .status()
                .unwrap(),
        };
        assert!(status.success(), "{tool}");
        let (code, _, err) = r.wait(Duration::from_secs(10));
        assert_eq!(code, Some(0), "{tool}: {err}");
        // The report goes to stderr when stdout carries the data.
        assert!(err.contains("ttcp-r: 123457 bytes in"), "{tool}: {err}");
        assert_eq!(std::fs::read(&sink).unwrap(), data, "{tool}");
        assert_eq!(read(&rj)["ttcp"]["bytes"], 123_457);
    }
}

#[test]
fn stdin_transmit_into_socat_is_the_same_file() {
    if !have("socat", &["-V"], "apt-get install socat") {
        return;
    }
    let port = free_tcp_port();
    let sink = tmp("ttcp", "socat-sink.bin");
    let mut c = Command::new("socat");
    c.args([
        "-u",
        &format!("TCP-LISTEN:{port},bind=127.0.0.1"),
        &format!("CREATE:{}", sink.display()),
    ])
    .stdout(Stdio::null())
    .stderr(Stdio::null());
    let s = Reaped::spawn_as_is(c);
    wait_tcp_listening(port);
    let src = tmp("ttcp", "stdin-src.bin");
    let data: Vec<u8> = (0..50_001u32).map(|i| (i % 251) as u8).collect();
    File::create(&src).unwrap().write_all(&data).unwrap();
    let out = goodput()
        .args(["ttcp", "-t", "127.0.0.1", "--sinkmode=false", "-l", "4096", "-p"])
        .arg(port.to_string())
        .stdin(Stdio::from(File::open(&src).unwrap()))
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("ttcp-t: 50001 bytes in"));
    s.wait(Duration::from_secs(5));
    assert_eq!(std::fs::read(&sink).unwrap(), data);
}

#[test]
fn transmitter_into_goodput_discard_and_echo_services() {
    let (discard, echo) = (free_tcp_port(), free_tcp_port());
    let server = services_server(&[("--discard-port", discard), ("--echo-port", echo)]);
    for udp in [false, true] {
        let mut t = goodput();
        t.args([
            "ttcp",
            "-t",
            "127.0.0.1",
            "-l",
            "1024",
            "-n",
            "1000",
            "-v",
            "0",
            "-p",
        ])
        .arg(discard.to_string());
        if udp {
            t.arg("-u");
        }
        assert_eq!(t.status().unwrap().code(), Some(0), "udp {udp}");
    }
    // The echo service sends back what it gets.
    if have("nc", &["-h"], "apt-get install netcat-openbsd") {
        let mut nc = Command::new("nc")
            .args(["-N", "127.0.0.1", &echo.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        nc.stdin.take().unwrap().write_all(b"hello, echo\n").unwrap();
        let out = nc.wait_with_output().unwrap();
        assert_eq!(out.stdout, b"hello, echo\n");
    }
    std::thread::sleep(Duration::from_millis(300));
    let (code, out, err) = server.stop(libc::SIGINT);
    assert_eq!(code, Some(0), "{out}{err}");
    // TCP: every byte; UDP: whatever loopback delivered, plus 6 markers.
    assert!(out.contains("Simple services: discard 1 connections,"), "{out}");
    let bytes: u64 = out
        .split("datagrams, ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{out}"));
    assert!(bytes >= 1_024_000, "{out}");
    assert!(
        out.contains("echo 1 connections, 12 B") || !have("nc", &["-h"], ""),
        "{out}"
    );
}

#[test]
fn ttcp_usage_errors() {
    for (args, needle) in [
        (&["ttcp"][..], "required"),
        (&["ttcp", "-t"][..], "HOST"),
        (&["ttcp", "-r", "127.0.0.1"][..], "cannot be used"),
        (&["ttcp", "-t", "127.0.0.1", "-u", "-l", "4"][..], "-l"),
        (&["ttcp", "-t", "127.0.0.1", "-n", "0"][..], "-n"),
    ] {
        let out = goodput().args(args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

#[test]
fn transmitter_to_nobody_fails_with_the_errno() {
    let port = free_tcp_port();
    let out = goodput()
        .args(["ttcp", "-t", "127.0.0.1", "-p"])
        .arg(port.to_string())
        .output()
        .unwrap();
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(1), "{all}");
    assert!(all.contains("ECONNREFUSED"), "{all}");
}

/// `goodput echo` against `goodput server --echo-port`: every message back,
/// the report, the JSON document and the status CSV.
#[test]
fn echo_load_test_against_goodput_echo_service() {
    let echo = free_tcp_port();
    let server = services_server(&[("--echo-port", echo)]);
    let j = json("echo.json");
    let status = tmp("ttcp", "echo-status.csv");
    let out = goodput()
        .args([
            "echo",
            &format!("127.0.0.1:{echo}"),
            "--connections",
            "30",
            "--messages",
            "4",
        ])
        .args([
            "--message-rate",
            "20",
            "--message-size",
            "300",
            "--batch-size",
            "10",
            "--batch-delay",
            "20",
        ])
        .args(["--status-interval", "100ms", "--json"])
        .arg(&j)
        .arg("--status-file")
        .arg(&status)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{text}{err}");
    assert!(text.contains("connections : 30 established, 0 failed"), "{text}");
    assert!(
        text.contains("messages : 120 sent, 120 echoed, 0 mismatched, 0 short, 0 missing"),
        "{text}"
    );
    assert!(text.contains("round trip : min"), "{text}");
    assert!(err.contains("batch 1: 10 connections started"), "{err}");
    let v = read(&j);
    assert_eq!(v["kind"], "echo_client");
    assert_eq!(v["echo"]["echoed"], 120);
    assert_eq!(v["summary"]["successful"], 30);
    assert!(v["echo"]["round_trip_histogram"].is_string());
    let csv = std::fs::read_to_string(&status).unwrap();
    assert!(
        csv.starts_with("TimeSlice,SendBps,RecvBps,In-Flight,Completed,NetError,DataError,Estab,"),
        "{csv}"
    );
    let (code, sout, _) = server.stop(libc::SIGINT);
    assert_eq!(code, Some(0));
    assert!(sout.contains("echo 30 connections, 36000 B"), "{sout}");
}

#[test]
fn echo_usage_errors() {
    for (args, needle) in [
        (&["echo"][..], "TARGET"),
        (&["echo", "127.0.0.1:7", "--connections", "0"][..], "connections"),
        (
            &["echo", "127.0.0.1:7", "--message-size", "0"][..],
            "--message-size",
        ),
        (&["echo", "127.0.0.1:99999"][..], "port"),
        (
            &["echo", "127.0.0.1:7", "--messages", "3", "--message-rate", "0"][..],
            "--message-rate",
        ),
    ] {
        let out = goodput().args(args).stdin(Stdio::null()).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
    // --pause needs a terminal or --hold-for.
    let out = goodput()
        .args(["echo", "127.0.0.1:7", "--pause"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--hold-for"));
}

/// `goodput echo --tls --insecure` against `goodput server --echo-tls-port`
/// with its generated certificate; --tls without a trust choice is refused.
#[test]
fn tls_echo_from_the_command_line() {
    let port = free_tcp_port();
    let server = services_server(&[("--echo-tls-port", port)]);
    let out = goodput()
        .args([
            "echo",
            &format!("127.0.0.1:{port}"),
            "--tls",
            "--insecure",
            "--connections",
            "4",
        ])
        .args([
            "--messages",
            "3",
            "--message-rate",
            "10ms",
            "--preallocate",
            "-v",
            "1",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("messages : 12 sent, 12 echoed, 0 mismatched"),
        "{text}"
    );
    let out = goodput()
        .args(["echo", &format!("127.0.0.1:{port}"), "--tls"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--insecure"));
    let (code, sout, _) = server.stop(libc::SIGINT);
    assert_eq!(code, Some(0));
    assert!(sout.contains("echo 4 connections"), "{sout}");
}

/// `--pause` on a terminal: the connections stay open until Enter, which
/// the command line reads (the engine only waits for the release).
#[test]
fn pause_holds_the_connections_until_enter() {
    if !have("script", &["--version"], "apt-get install bsdutils") {
        return;
    }
    let echo = free_tcp_port();
    let _server = services_server(&[("--echo-port", echo)]);
    let bin = env!("CARGO_BIN_EXE_goodput");
    let command = format!("{bin} echo 127.0.0.1:{echo} --connections 3 --messages 5 --pause -v 2");
    // script(1) runs the client on a pseudo-terminal and passes our
    // standard input to it.
    let mut child = std::process::Command::new("script")
        .args(["-qfec", &command, "/dev/null"])
        .env("TERM", "xterm")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let s = seen.clone();
    let reader = std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = std::io::Read::read(&mut stdout, &mut buf) {
            if n == 0 {
                break;
            }
            s.lock().unwrap().push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    });
    let waiting = |text: &str, limit: Duration| {
        let deadline = std::time::Instant::now() + limit;
        while std::time::Instant::now() < deadline {
            if seen.lock().unwrap().contains(text) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    };
    assert!(
        waiting("held open until Enter is pressed", Duration::from_secs(10)),
        "{}",
        seen.lock().unwrap()
    );
    // Held: no summary yet, a second later.
    std::thread::sleep(Duration::from_secs(1));
    assert!(child.try_wait().unwrap().is_none(), "{}", seen.lock().unwrap());
    std::io::Write::write_all(child.stdin.as_mut().unwrap(), b"\n").unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "Enter did not release: {}",
            seen.lock().unwrap()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    reader.join().unwrap();
    assert!(status.success(), "{}", seen.lock().unwrap());
    assert!(
        seen.lock().unwrap().contains("15 echoed"),
        "{}",
        seen.lock().unwrap()
    );
}
