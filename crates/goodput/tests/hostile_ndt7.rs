//! Hostile ndt7 clients against a real `goodput server --ndt7`, run under
//! an address-space limit and, for the flood, a descriptor limit: a
//! client that upgrades and never reads the download, a frame header
//! announcing a 1 GiB upload message, data sent the wrong way during a
//! download, and 10,000 WebSockets opened from one address. Each is
//! ended in bounded time and counted; memory stays bounded; and a real
//! test runs afterwards.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::*;

/// Peak RSS the server may reach here: an idle server with ndt7 is about
/// 40 MiB (its 16 MiB random payload included); a subtest holds at most a
/// message being written and one being read.
const RSS_CEILING_KIB: u64 = 256 * 1024;

const UPGRADE: &str = "Host: goodput\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\
Sec-WebSocket-Protocol: net.measurementlab.ndt.v7\r\n\r\n";

fn request(path: &str) -> String {
    format!("GET {path} HTTP/1.1\r\n{UPGRADE}")
}

/// Connects, upgrades to `path` and reads the answer's head (bounded).
fn upgraded(addr: SocketAddr, path: &str) -> TcpStream {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(request(path).as_bytes()).unwrap();
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") && head.len() < 4096 {
        s.read_exact(&mut b).unwrap();
        head.push(b[0]);
    }
    let text = String::from_utf8_lossy(&head);
    assert!(text.starts_with("HTTP/1.1 101"), "{text}");
    s
}

/// Reads until the server closes (or `limit` passes); the time it took.
fn until_closed(s: &mut TcpStream, limit: Duration) -> Duration {
    let began = Instant::now();
    s.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    let mut buf = vec![0u8; 1 << 16];
    while began.elapsed() < limit {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock || e.kind() == std::io::ErrorKind::TimedOut => {
            }
            Err(_) => break,
        }
    }
    began.elapsed()
}

/// A masked client frame header: binary, FIN, a 64-bit length.
fn frame_header(len: u64) -> Vec<u8> {
    let mut h = vec![0x82, 0x80 | 127];
    h.extend_from_slice(&len.to_be_bytes());
    h.extend_from_slice(&[1, 2, 3, 4]);
    h
}

fn raise_own_descriptors() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit on this process with a valid struct.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
        lim.rlim_cur = lim.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
    }
}

/// Sets a running process's soft descriptor limit (`prlimit(2)`).
fn limit_descriptors(pid: u32, n: u64) {
    let mut old = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: prlimit on a child this test started, with valid structs.
    let rc = unsafe { libc::prlimit(pid as i32, libc::RLIMIT_NOFILE, std::ptr::null(), &mut old) };
    assert_eq!(rc, 0);
    let lim = libc::rlimit {
        rlim_cur: n.min(old.rlim_max),
        rlim_max: old.rlim_max,
    };
    // SAFETY: as above.
    let rc = unsafe { libc::prlimit(pid as i32, libc::RLIMIT_NOFILE, &lim, std::ptr::null_mut()) };
    assert_eq!(rc, 0);
}

#[test]
fn hostile_ndt7_clients_are_bounded_counted_and_the_server_serves_on() {
    raise_own_descriptors();
    let port = free_tcp_port();
    let json = tmp("hostile-ndt7", "server.json");
    let mut cmd = goodput();
    cmd.args([
        "server",
        "--listen",
        "127.0.0.1",
        "-p",
        &free_tcp_port().to_string(),
        "--no-udp",
    ])
    .args(["--ndt7", "--ndt7-port", &port.to_string(), "--ndt7-length", "1s"])
    // The flood is about places at once, not the per-minute rate.
    .args(["--ndt7-per-minute", "1000000", "--json", json.to_str().unwrap()]);
    let mut srv = spawn_limited(cmd, SERVER_ADDRESS_SPACE);
    wait_tcp_listening(port);
    let pid = srv.pid();
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();

    // 1. Upgrades to the download and never reads: its sends stall on a
    // full socket; the server ends it at the hard cap (1 s + 5 s).
    let mut idle = upgraded(addr, "/ndt/v7/download");
    idle.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
    let never_read = Instant::now();

    // 2. A frame header announcing a 1 GiB upload message: refused at
    // the header, before any of it is buffered.
    let mut big = upgraded(addr, "/ndt/v7/upload");
    big.write_all(&frame_header(1 << 30)).unwrap();
    let _ = big.write_all(&vec![0u8; 1 << 20]);
    let took = until_closed(&mut big, Duration::from_secs(10));
    assert!(
        took < Duration::from_secs(3),
        "the 1 GiB message ended its subtest in {took:?}"
    );

    // 3. Data the wrong way: a binary message during the download.
    let mut wrong = upgraded(addr, "/ndt/v7/download");
    let mut frame = frame_header(8);
    frame.extend_from_slice(&[0u8; 8]);
    wrong.write_all(&frame).unwrap();
    let took = until_closed(&mut wrong, Duration::from_secs(10));
    assert!(
        took < Duration::from_secs(3),
        "a binary message the wrong way ended it in {took:?}"
    );

    // 4. 10,000 WebSockets from one address, under a descriptor limit of
    // 512: bounded in count and in time (10 s), every one held open.
    limit_descriptors(pid, 512);
    let began = Instant::now();
    let mut held = Vec::new();
    let mut failed = 0u32;
    for _ in 0..10_000 {
        if began.elapsed() > Duration::from_secs(10) {
            break;
        }
        match TcpStream::connect_timeout(&addr, Duration::from_millis(200)) {
            Ok(mut s) => {
                s.set_nonblocking(true).unwrap();
                let _ = s.write(request("/ndt/v7/download").as_bytes());
                held.push(s);
            }
            Err(_) => failed += 1,
        }
    }
    let opened = held.len();
    eprintln!(
        "flood: {opened} opened, {failed} not connected in {:?}",
        began.elapsed()
    );
    assert!(opened > 1000, "the flood opened only {opened}");
    std::thread::sleep(Duration::from_secs(1));
    let rss = proc_kib(pid, "VmHWM");
    assert!(rss < RSS_CEILING_KIB, "peak RSS {rss} KiB under the flood");
    drop(held);
    limit_descriptors(pid, 20_000);

    // The never-reading client was ended at the hard cap.
    until_closed(&mut idle, Duration::from_secs(15));
    let since = never_read.elapsed();
    assert!(
        since < Duration::from_secs(12),
        "the never-reading client was held {since:?} (hard cap: 6 s)"
    );
    drop(idle);

    // A real test still runs (places given back once the flood is gone).
    let deadline = Instant::now() + Duration::from_secs(20);
    let (code, out, err) = loop {
        let r = run(&["ndt7", &format!("ws://127.0.0.1:{port}"), "--download-only"]);
        if r.0 == Some(0) || Instant::now() > deadline {
            break r;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    assert_eq!(code, Some(0), "a real test after the flood: {out}\n{err}");
    assert!(srv.alive(), "the server is still up");

    let (_, out, err) = srv.stop(libc::SIGINT);
    let doc = result_doc(&json);
    let n = &doc["ndt7_server"];
    let count = |k: &str| n[k].as_u64().unwrap();
    eprintln!("{n}");
    // The never-reading client is broken off at the hard cap, or sooner
    // when loopback's buffers took all the server had to send in its
    // length (it then never answered the Close); the 1 GiB message and
    // the wrong-way one are broken off too.
    assert!(
        count("hard_capped") + count("broken") >= 3,
        "the never-reading client, the 1 GiB and the wrong-way message: {n}\n{out}\n{err}"
    );
    assert!(
        count("oversized_messages") >= 2,
        "1 GiB header and the wrong-way message: {n}"
    );
    let refused = count("refused_busy") + count("refused_per_client");
    assert!(refused >= 1000, "the flood's refusals are counted: {n}");
    assert!(count("downloads") >= 1, "the real test after: {n}");
    assert!(
        !doc["admission"].is_null(),
        "the server still reports its admission"
    );
    assert!(!err.contains("panicked"), "{err}");
}
