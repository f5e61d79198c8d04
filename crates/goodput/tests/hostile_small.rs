//! Two smaller hostile cases, each against the real binary under an
//! address-space limit:
//!
//! - one client address opening media streams on `goodput server` until it
//!   is refused: it must be stopped by its own share of the memory budget
//!   (or of the streams), long before the whole budget, and another address
//!   must still be served;
//! - `goodput report` of a document with a million intervals: the page must
//!   stay small, say that its charts were downsampled and from how many
//!   intervals, and keep the one peak in the data.

mod common;

use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use common::*;
use goodput_core::media::limits::{stream_memory, MediaLimits};
use goodput_core::media::wire::{Message, RejectReason, Request, COOKIE_LEN};

const MIB: u64 = 1 << 20;

fn start_media(group: &str, extra: &[&str]) -> (Reaped, u16, std::path::PathBuf) {
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
    (child, port, json)
}

fn exchange(s: &UdpSocket, port: u16, m: &Message) -> Message {
    let mut out = Vec::new();
    m.encode(&mut out);
    s.send_to(&out, ("127.0.0.1", port)).unwrap();
    let mut buf = [0u8; 2048];
    let n = s.recv(&mut buf).expect("an answer");
    Message::decode(&buf[..n]).expect("a media message")
}

/// One stream request from `from` through the cookie round trip; the
/// server's answer and the socket (which keeps the stream's peer alive).
fn open(from: Ipv4Addr, port: u16, r: Request) -> (Message, UdpSocket) {
    let s = UdpSocket::bind(SocketAddr::new(IpAddr::V4(from), 0)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let Message::Challenge { cookie, .. } = exchange(&s, port, &Message::Request(r)) else {
        panic!("no challenge")
    };
    let m = exchange(&s, port, &Message::Request(Request { cookie, ..r }));
    (m, s)
}

/// An upload at 1,000 frames/s with a 10 s play-out buffer: the costliest
/// stream the server below allows (10,000 frames held).
fn upload(nonce: u64) -> Request {
    Request {
        nonce,
        bits_per_second: 8_000_000,
        frame_rate: 1000,
        length_s: 60,
        datagram_bytes: 1000,
        upload: true,
        verify_data: false,
        buffer_ms: 10_000,
        cookie: [0; COOKIE_LEN],
    }
}

/// Opens streams from `from` until one is refused (at most `most`, within
/// a time bound); the streams accepted (their sockets) and the refusal.
fn open_until_refused(
    from: Ipv4Addr,
    port: u16,
    most: u64,
    req: impl Fn(u64) -> Request,
) -> (Vec<UdpSocket>, Option<RejectReason>) {
    let t0 = Instant::now();
    let mut held = Vec::new();
    for n in 0..most {
        assert!(t0.elapsed() < Duration::from_secs(2), "streams must open quickly");
        match open(from, port, req(n)) {
            (Message::Accept { .. }, s) => held.push(s),
            (Message::Reject { reason, .. }, _) => return (held, Some(reason)),
            (other, _) => panic!("{other:?}"),
        }
    }
    (held, None)
}

/// With a 64 MiB budget (so 16 MiB for one address by default), one
/// address opening its costliest uploads is refused for its own share
/// after as many as fit in 16 MiB, not after the 23 that fit in the whole
/// budget; another address is still served, and the refusal is counted.
#[test]
fn one_address_gets_its_share_of_the_media_memory_not_the_whole_budget() {
    let budget = 64 * MIB;
    let (mut child, port, json) = start_media(
        "hostile-small-media",
        &["--udp-max-memory", "64MiB", "--udp-max-frame-rate", "1000"],
    );
    let limits = MediaLimits {
        max_frame_rate: 1000,
        ..MediaLimits::default()
    };
    let cost = stream_memory(&limits.check(&upload(0)).unwrap(), true, 10_000);
    let share = budget / 4;
    let fit_share = share / cost;
    let fit_budget = budget / cost;
    assert!(fit_share >= 2 && fit_budget > 2 * fit_share, "{cost}");
    let a = Ipv4Addr::new(127, 0, 0, 1);
    let (held_a, refused) = open_until_refused(a, port, fit_budget + 1, upload);
    eprintln!(
        "one address: {} uploads of {cost} B accepted, then {refused:?} (its share {share} B, \
         the budget {budget} B fits {fit_budget})",
        held_a.len()
    );
    assert_eq!(refused, Some(RejectReason::ClientMemory));
    assert_eq!(held_a.len() as u64, fit_share);
    // A second address is served while the first holds its share.
    let b = Ipv4Addr::new(127, 0, 0, 2);
    let (m, held_b) = open(b, port, upload(1000));
    assert!(matches!(m, Message::Accept { .. }), "{m:?}");
    assert!(child.alive(), "the server died");
    drop((held_a, held_b));
    let (code, out, err) = child.stop(libc::SIGINT);
    assert!(matches!(code, Some(0 | 1)), "exit {code:?}\n{out}\n{err}");
    let doc = result_doc(&json);
    let c = &doc["media_server"];
    assert_eq!(c["accepted"], fit_share + 1, "{c}");
    assert_eq!(c["rejected_per_client"], 1, "{c}");
    assert_eq!(c["rejected_memory"], 0, "{c}");
    let peak = c["memory_peak_bytes"].as_u64().unwrap();
    assert_eq!(peak, (fit_share + 1) * cost, "{c}");
    assert!(out.contains("1 for their address's share"), "{out}");
}

/// Streams per address: with `--udp-max-per-client 4`, the fifth cheap
/// download from one address is refused with that limit named, and
/// another address still gets its four.
#[test]
fn one_address_gets_at_most_its_streams() {
    let (mut child, port, json) = start_media("hostile-small-streams", &["--udp-max-per-client", "4"]);
    let download = |n: u64| Request {
        upload: false,
        bits_per_second: 8_000,
        frame_rate: 1,
        ..upload(n)
    };
    let (held_a, refused_a) = open_until_refused(Ipv4Addr::new(127, 0, 0, 1), port, 10, download);
    assert_eq!((held_a.len(), refused_a), (4, Some(RejectReason::ClientStreams)));
    assert!(RejectReason::ClientStreams
        .to_string()
        .contains("--udp-max-per-client"));
    let (held_b, refused_b) =
        open_until_refused(Ipv4Addr::new(127, 0, 0, 3), port, 10, |n| download(n + 100));
    assert_eq!((held_b.len(), refused_b), (4, Some(RejectReason::ClientStreams)));
    assert!(child.alive(), "the server died");
    drop((held_a, held_b));
    let (code, out, err) = child.stop(libc::SIGINT);
    assert!(matches!(code, Some(0 | 1)), "exit {code:?}\n{out}\n{err}");
    let c = &result_doc(&json)["media_server"];
    assert_eq!(
        (c["accepted"].as_u64(), c["rejected_per_client"].as_u64()),
        (Some(8), Some(2)),
        "{c}"
    );
}

/// Intervals in the large document: as many as the 167 MB one.
const INTERVALS: u64 = 1_000_000;
/// Address space `goodput report` runs in: a few times less than the
/// 1.3 GiB it once took for this document.
const REPORT_ADDRESS_SPACE: u64 = 512 << 20;
/// Largest page it may write for it (it once wrote 322 MB).
const PAGE_CEILING: u64 = 2 << 20;

/// Writes a TCP result document with `INTERVALS` intervals of 100 ms (a
/// steady 800 Mbit/s sent, 400 received, with one 72,000 Mbit/s peak),
/// made around a real run's document; its size in bytes.
fn write_large_document(path: &std::path::Path) -> u64 {
    use std::io::Write as _;
    let small = tmp("hostile-small-report", "small.json");
    let out = goodput()
        .args(["tcp", "-c", "2", "--transfer", "1MiB", "-v", "0", "--json"])
        .arg(&small)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let serde_json::Value::Object(mut doc) = result_doc(&small) else {
        panic!("not an object")
    };
    doc.remove("intervals");
    let mut w = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    w.write_all(b"{").unwrap();
    for (k, v) in &doc {
        write!(w, "{}:{v},", serde_json::Value::from(k.as_str())).unwrap();
    }
    w.write_all(b"\"intervals\":[").unwrap();
    for i in 0..INTERVALS {
        let send: u64 = if i == 777_777 { 9_000_000_000 } else { 100_000_000 };
        write!(
            w,
            "{}{{\"time_slice_s\":{:.1},\"send_bytes_per_second\":{send},\"recv_bytes_per_second\":50000000,\
             \"in_flight\":8,\"completed\":{i},\"network_errors\":0,\"data_errors\":0}}",
            if i == 0 { "" } else { "," },
            (i + 1) as f64 / 10.0
        )
        .unwrap();
    }
    w.write_all(b"]}").unwrap();
    w.flush().unwrap();
    std::fs::metadata(path).unwrap().len()
}

/// Runs `goodput report` on `input` under `REPORT_ADDRESS_SPACE`, within
/// a time bound; its exit status, its stderr and its peak resident size.
// The child is reaped by wait4, which also gives its own peak RSS.
#[allow(clippy::zombie_processes)]
fn report_limited(input: &std::path::Path, page: &std::path::Path) -> (Option<i32>, String, u64) {
    let err_path = tmp("hostile-small-report", "stderr.txt");
    let mut cmd = goodput();
    cmd.arg("report")
        .arg(input)
        .arg("-o")
        .arg(page)
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&err_path).unwrap());
    limit_address_space(&mut cmd, REPORT_ADDRESS_SPACE);
    let child = cmd.spawn().unwrap();
    let pid = child.id() as libc::pid_t;
    let t0 = Instant::now();
    let (mut status, mut usage) = (0, unsafe { std::mem::zeroed::<libc::rusage>() });
    loop {
        // SAFETY: status and usage live for the call; pid is our child.
        let got = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
        assert!(got >= 0, "wait4: {}", std::io::Error::last_os_error());
        if got == pid {
            break;
        }
        if t0.elapsed() > Duration::from_secs(300) {
            // SAFETY: signalling our own child.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            // SAFETY: as above, blocking until the killed child is reaped.
            unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
            panic!("goodput report ran for more than 300 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let code = libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
    let err = std::fs::read_to_string(&err_path).unwrap_or_default();
    (code, err, usage.ru_maxrss as u64 * 1024)
}

/// `goodput report` of a document with a million intervals (about 167 MB)
/// runs in a 512 MiB address space, peaks well under the document's size,
/// writes a page under 2 MiB that says it was downsampled and from how
/// many intervals, and still shows the one peak.
#[test]
fn a_report_of_a_million_intervals_stays_small() {
    let input = tmp("hostile-small-report", "large.json");
    let size = write_large_document(&input);
    assert!(size > 150_000_000, "{size}");
    let page = tmp("hostile-small-report", "large.html");
    let (code, err, peak_rss) = report_limited(&input, &page);
    let page_bytes = std::fs::metadata(&page).map_or(0, |m| m.len());
    eprintln!("report of {size} B, {INTERVALS} intervals: peak RSS {peak_rss} B, page {page_bytes} B");
    assert_eq!(code, Some(0), "{err}");
    assert!(
        peak_rss > 0 && peak_rss < size / 2,
        "peak RSS {peak_rss} B for {size} B"
    );
    assert!(page_bytes > 0 && page_bytes < PAGE_CEILING, "{page_bytes} B");
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(
        html.contains("Downsampled: the document's 1000000 intervals are drawn as 977 buckets of up to 1024"),
        "no downsampling note"
    );
    // The peak's bucket keeps its maximum: 9 GB/s is 72,000 Mbit/s.
    assert_eq!(html.matches("max 72000.000) over 1024 intervals").count(), 1);
    // Every other bucket of the sent rate is 800 Mbit/s throughout.
    assert_eq!(
        html.matches("mean 800.000 Mbit/s (min 800.000, max 800.000)")
            .count(),
        976
    );
}

/// Many intervals of a STAMP run and of a UDP media stream, with a loss
/// every 10th interval: each kind's charts are downsampled too, their
/// loss marks one per bucket (not one per lossy interval), and the page
/// stays valid HTML.
#[test]
fn stamp_and_media_intervals_are_downsampled_with_their_losses() {
    const N: usize = 20_000;
    let stamp = tmp("hostile-small-report", "stamp.json");
    let udp = tmp("hostile-small-report", "udp.json");
    for (args, path) in [
        (
            &["stamp", "-c", "30", "-i", "3ms", "--status-interval", "20ms"][..],
            &stamp,
        ),
        (
            &[
                "udp",
                "--length",
                "1s",
                "--bitrate",
                "1M",
                "--status-interval",
                "200ms",
            ][..],
            &udp,
        ),
    ] {
        let out = goodput()
            .args(args)
            .args(["-v", "0", "--json"])
            .arg(path)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    let mut docs = String::new();
    for (path, part) in [(&stamp, "stamp"), (&udp, "media")] {
        let mut doc = result_doc(path);
        let first = doc["intervals"][0].clone();
        let many: Vec<serde_json::Value> = (0..N)
            .map(|i| {
                let mut iv = first.clone();
                iv["time_slice_s"] = ((i + 1) as f64 / 10.0).into();
                iv[part]["lost"] = u64::from(i % 10 == 0).into();
                iv
            })
            .collect();
        doc["intervals"] = many.into();
        docs += &format!("{doc}\n");
    }
    let input = tmp("hostile-small-report", "kinds.json");
    std::fs::write(&input, docs).unwrap();
    let page = tmp("hostile-small-report", "kinds.html");
    let (code, err, _) = report_limited(&input, &page);
    assert_eq!(code, Some(0), "{err}");
    let html = std::fs::read_to_string(&page).unwrap();
    eprintln!("report of 2 × {N} intervals: page {} B", html.len());
    assert!(html.len() < 3 * PAGE_CEILING as usize, "{} B", html.len());
    // 20,000 intervals: 625 buckets of 32.
    let note = "the document's 20000 intervals are drawn as 625 buckets of up to 32";
    assert_eq!(html.matches(note).count(), 2);
    // 2,000 lossy intervals, at least 3 in every bucket of 32: one mark
    // per bucket, each with the bucket's sums.
    assert_eq!(html.matches("class=\"mark\"").count(), 625);
    assert!(html.contains("<title>4 lost of "), "no loss mark");
    assert!(html.contains("Media bitrate per interval") && html.contains("Round trip per interval"));
    if have("tidy", &["-v"], "apt-get install tidy") {
        let out = std::process::Command::new("tidy")
            .args(["-e", "-q"])
            .arg(&page)
            .output()
            .unwrap();
        // 2: errors; 1: warnings (SVG attributes tidy does not know).
        assert_ne!(
            out.status.code(),
            Some(2),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
