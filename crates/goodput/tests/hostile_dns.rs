//! `goodput dns` against a DNS server that lies: replies cut short or
//! truncated, a compression pointer that points at itself, messages past
//! every size the query allowed, a flood of replies with other ids. The
//! server is written here (its bytes must be wrong on purpose); goodput
//! runs with its address space limited, and each run must end in time,
//! without a panic, with what it ignored counted.

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::{goodput, limit_address_space, result_doc, tmp};

/// What goodput may map: its runtime and one 64 KiB buffer, far below
/// what reading a peer's numbers as sizes would ask.
const ADDRESS_SPACE: u64 = 1 << 30;

/// The question's name (its first label) and the end of the question
/// section in `query`.
fn question(query: &[u8]) -> (String, usize) {
    let mut i = 12;
    let mut first = None;
    while i < query.len() && query[i] != 0 {
        let n = query[i] as usize;
        if first.is_none() {
            first = Some(String::from_utf8_lossy(&query[i + 1..i + 1 + n]).into_owned());
        }
        i += 1 + n;
    }
    (first.unwrap_or_default(), i + 1 + 4)
}

/// A response header for `query` (same id, QR, RD copied, RA), `flags`
/// or'ed in, with `answers` answer records, then the question.
fn response(query: &[u8], flags: u16, answers: u16) -> Vec<u8> {
    let (_, end) = question(query);
    let mut m = Vec::new();
    m.extend_from_slice(&query[0..2]);
    let rd = u16::from(query[2] & 1) << 8;
    m.extend_from_slice(&(0x8080 | rd | flags).to_be_bytes());
    m.extend_from_slice(&1u16.to_be_bytes());
    m.extend_from_slice(&answers.to_be_bytes());
    m.extend_from_slice(&[0, 0, 0, 0]);
    m.extend_from_slice(&query[12..end]);
    m
}

/// An A record for the question's name (a pointer to offset 12).
fn a_record(m: &mut Vec<u8>, ip: [u8; 4]) {
    m.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4]);
    m.extend_from_slice(&ip);
}

/// The reply a UDP query gets, by the question's first label; several
/// datagrams for a flood.
fn udp_replies(query: &[u8]) -> Vec<Vec<u8>> {
    let (label, _) = question(query);
    match label.as_str() {
        // Truncated: no answer, TC set; TCP has the answer.
        "tc" => vec![response(query, 0x0200, 0)],
        // Cut short: the header promises an answer that is not there.
        "cut" => {
            let mut m = response(query, 0, 1);
            a_record(&mut m, [192, 0, 2, 8]);
            m.truncate(m.len() - 7);
            vec![m]
        }
        // The answer's name is a compression pointer to itself.
        "loop" => {
            let mut m = response(query, 0, 1);
            let at = m.len() as u16;
            m.extend_from_slice(&(0xc000 | at).to_be_bytes());
            m.extend_from_slice(&[0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 192, 0, 2, 9]);
            vec![m]
        }
        // 4,000 bytes: past the 1,232 the query's EDNS allowed.
        "big" => {
            let n = 250;
            let mut m = response(query, 0, n);
            for i in 0..n {
                a_record(&mut m, [10, 0, (i >> 8) as u8, i as u8]);
            }
            vec![m]
        }
        // 2,000 replies with other ids, then the right one.
        "flood" => {
            let mut out = Vec::new();
            for i in 0..2000u16 {
                let mut m = response(query, 0, 1);
                let id = u16::from_be_bytes([query[0], query[1]]).wrapping_add(1 + i % 1000);
                m[0..2].copy_from_slice(&id.to_be_bytes());
                a_record(&mut m, [192, 0, 2, 66]);
                out.push(m);
            }
            let mut m = response(query, 0, 1);
            a_record(&mut m, [192, 0, 2, 10]);
            out.push(m);
            out
        }
        // Only a reply with another id: the query is never answered.
        "wrongid" => {
            let mut m = response(query, 0, 0);
            m[0] ^= 0xff;
            vec![m]
        }
        _ => {
            let mut m = response(query, 0, 1);
            a_record(&mut m, [192, 0, 2, 1]);
            vec![m]
        }
    }
}

/// The reply a TCP query gets: the length prefix and the bytes (which
/// may disagree on purpose).
fn tcp_reply(query: &[u8]) -> (u16, Vec<u8>) {
    let (label, _) = question(query);
    match label.as_str() {
        "tc" => {
            let mut m = response(query, 0, 1);
            a_record(&mut m, [192, 0, 2, 7]);
            (m.len() as u16, m)
        }
        // A whole 64 KiB message: 4,090 answers.
        "huge" => {
            let mut m = response(query, 0, 0);
            let room = (65_535 - m.len()) / 16;
            m[6..8].copy_from_slice(&(room as u16).to_be_bytes());
            for i in 0..room {
                a_record(&mut m, [10, 1, (i >> 8) as u8, i as u8]);
            }
            (m.len() as u16, m)
        }
        // 65,535 bytes announced, a few sent, then the connection closes.
        "short" => {
            let m = response(query, 0, 0);
            (65_535, m)
        }
        _ => {
            let mut m = response(query, 0, 1);
            a_record(&mut m, [192, 0, 2, 1]);
            (m.len() as u16, m)
        }
    }
}

/// The hostile server on one loopback port, UDP and TCP; stops when
/// dropped.
struct Hostile {
    port: u16,
    stop: Arc<AtomicBool>,
    threads: Vec<thread::JoinHandle<()>>,
}

impl Hostile {
    fn start() -> Self {
        let tcp = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = tcp.local_addr().unwrap().port();
        let udp = UdpSocket::bind(("127.0.0.1", port)).unwrap();
        udp.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
        tcp.set_nonblocking(true).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let u = thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while !s.load(Ordering::Relaxed) {
                let Ok((n, from)) = udp.recv_from(&mut buf) else {
                    continue;
                };
                if n < 17 {
                    continue;
                }
                let replies = udp_replies(&buf[..n]);
                for (i, r) in replies.iter().enumerate() {
                    // A flood's last datagram, the reply, waits until
                    // the flood has had time to be read.
                    if i > 0 && i + 1 == replies.len() {
                        thread::sleep(Duration::from_millis(100));
                    }
                    let _ = udp.send_to(r, from);
                }
            }
        });
        let s = stop.clone();
        let t = thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                match tcp.accept() {
                    Ok((c, _)) => {
                        thread::spawn(move || serve_tcp(c));
                    }
                    Err(_) => thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        Hostile {
            port,
            stop,
            threads: vec![u, t],
        }
    }
}

fn serve_tcp(mut c: TcpStream) {
    c.set_nonblocking(false).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut len = [0u8; 2];
    if c.read_exact(&mut len).is_err() {
        return;
    }
    let mut q = vec![0u8; usize::from(u16::from_be_bytes(len))];
    if c.read_exact(&mut q).is_err() {
        return;
    }
    let (announced, bytes) = tcp_reply(&q);
    let _ = c.write_all(&announced.to_be_bytes());
    let _ = c.write_all(&bytes);
}

impl Drop for Hostile {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// goodput dns NAME against the hostile server under the address-space
/// limit: the exit code, stderr, the `dns` detail and the time it took.
fn ask(h: &Hostile, name: &str, extra: &[&str]) -> (Option<i32>, String, serde_json::Value, Duration) {
    let json = tmp("hostile-dns", &format!("{name}-{}.json", common::now_ms()));
    let server = format!("127.0.0.1:{}", h.port);
    let mut cmd = goodput();
    cmd.args([
        "dns",
        name,
        "--server",
        &server,
        "--timeout",
        "300ms",
        "--retries",
        "1",
        "-c",
        "1",
    ])
    .args(extra)
    .arg("--json")
    .arg(&json)
    .stdin(Stdio::null());
    limit_address_space(&mut cmd, ADDRESS_SPACE);
    let t0 = Instant::now();
    let out = cmd.output().unwrap();
    let took = t0.elapsed();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!err.contains("panicked"), "{name}: {err}");
    let doc = result_doc(&json);
    (out.status.code(), err, doc["dns"].clone(), took)
}

fn count(d: &serde_json::Value, key: &str) -> u64 {
    d[key].as_u64().unwrap_or_else(|| panic!("no {key} in {d}"))
}

#[test]
fn hostile_replies_are_counted_and_bounded() {
    let h = Hostile::start();
    // Every run is one query of at most two 300 ms tries.
    let in_time = |took: Duration| assert!(took < Duration::from_secs(5), "{took:?}");

    // TC: asked again over TCP, answered there.
    let (code, err, d, took) = ask(&h, "tc.hostile.test", &[]);
    in_time(took);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(count(&d, "truncated"), 1);
    assert_eq!(d["query_log"][0]["transport"], "tcp");
    assert_eq!(d["query_log"][0]["answers"][0], "192.0.2.7");

    // Cut short, and a compression loop: malformed on each try, lost.
    for name in ["cut.hostile.test", "loop.hostile.test"] {
        let (code, err, d, took) = ask(&h, name, &[]);
        in_time(took);
        assert_eq!(code, Some(1), "{name}: {err}");
        assert_eq!(
            (count(&d, "malformed"), count(&d, "lost"), count(&d, "retries")),
            (2, 1, 1),
            "{name}: {d}"
        );
        assert!(err.contains("no reply after 2 tries"), "{name}: {err}");
    }

    // Over the advertised UDP size: ignored as oversized, lost.
    let (code, err, d, took) = ask(&h, "big.hostile.test", &[]);
    in_time(took);
    assert_eq!(code, Some(1), "{err}");
    assert_eq!((count(&d, "oversized"), count(&d, "lost")), (2, 1), "{d}");

    // A whole 64 KiB message over TCP: read, its 4,000-odd records
    // counted, 64 of them kept.
    let (code, err, d, took) = ask(&h, "huge.hostile.test", &["--transport", "tcp"]);
    in_time(took);
    assert_eq!(code, Some(0), "{err}");
    // 12 header bytes and 23 of question, then 16-byte records.
    assert_eq!(count(&d, "answer_count"), (65_535 - 35) / 16);
    assert_eq!(d["query_log"][0]["answers"].as_array().unwrap().len(), 64);

    // 65,535 bytes announced, a few sent, the connection closed.
    let (code, err, d, took) = ask(&h, "short.hostile.test", &["--transport", "tcp"]);
    in_time(took);
    assert_eq!(code, Some(1), "{err}");
    assert_eq!((count(&d, "malformed"), count(&d, "lost")), (2, 1), "{d}");
    assert!(
        err.contains("closed the connection after 36 of the 65535 bytes its reply announced"),
        "{err}"
    );

    // A flood of other ids before the reply: counted, the reply read.
    let (code, err, d, took) = ask(&h, "flood.hostile.test", &[]);
    in_time(took);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(d["query_log"][0]["answers"][0], "192.0.2.10");
    let unsolicited = count(&d, "unsolicited");
    // The socket's buffer may drop some of the 2,000; most arrive.
    assert!((100..=2000).contains(&unsolicited), "{unsolicited}");

    // Only another id: unsolicited, the query lost after its tries.
    let (code, err, d, took) = ask(&h, "wrongid.hostile.test", &[]);
    in_time(took);
    assert_eq!(code, Some(1), "{err}");
    assert_eq!((count(&d, "unsolicited"), count(&d, "lost")), (2, 1), "{d}");
}
