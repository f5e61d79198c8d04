//! End-to-end tests of UDP media streams over real loopback sockets:
//! goodput's client against goodput's media service, directly and through
//! a relay that drops, duplicates, reorders and corrupts chosen datagrams.

use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use goodput_core::media::limits::MediaLimits;
use goodput_core::media::wire::{Message, Request, DATA_HEADER_LEN};
use goodput_core::media::MediaPlan;
use goodput_core::result::{MediaServerCounters, MediaStats, Outcome, ProtocolErrorKind, TestResult};
use goodput_engine::media::{bind_media, run_media, MediaServerSpec, MediaSpec, RunningMedia};
use goodput_engine::{CancellationToken, NullObserver};

fn server_spec(ip: IpAddr) -> MediaServerSpec {
    MediaServerSpec {
        listen: vec![SocketAddr::new(ip, 0)],
        max_streams: 1000,
        limits: MediaLimits {
            max_length_s: 3600,
            ..MediaLimits::default()
        },
        max_memory: 1 << 30,
        max_per_client: usize::MAX,
        max_client_memory: u64::MAX,
    }
}

/// 10 datagrams of 1000 bytes per frame, 50 frames/s, `secs` long.
fn small_plan(secs: u32) -> MediaPlan {
    MediaPlan::new(10_000 * 8 * 50, 50, secs, 1000).unwrap()
}

fn client_spec(target: SocketAddr, plan: MediaPlan) -> MediaSpec {
    MediaSpec {
        targets: vec![target],
        bind: Vec::new(),
        plan,
        // Generous, so a loaded test machine does not turn a slow frame
        // into a dropped one.
        buffer_depth: Duration::from_millis(1000),
        connections: 1,
        iterations: 1,
        upload: false,
        verify_data: true,
        dscp: 0,
        status_interval: Duration::from_millis(250),
        time_limit: None,
        max_records: 1000,
        datagram_sink: None,
    }
}

/// Starts a media server: its address, its cancel and the running service.
fn serve(spec: MediaServerSpec) -> (SocketAddr, CancellationToken, RunningMedia) {
    let b = bind_media(spec).expect("bind media server");
    let addr = b.local_addrs()[0];
    let cancel = CancellationToken::new();
    let running = b.start(cancel.clone());
    (addr, cancel, running)
}

/// Runs a media server, then the client against `target(server address)`.
async fn run(ip: IpAddr, spec: impl FnOnce(SocketAddr) -> MediaSpec) -> (TestResult, MediaServerCounters) {
    let (addr, cancel, running) = serve(server_spec(ip));
    let result = run_media(spec(addr), &mut NullObserver, CancellationToken::new())
        .await
        .expect("client runs");
    // Let the server see the last reports.
    tokio::time::sleep(Duration::from_millis(200)).await;
    cancel.cancel();
    (result, running.wait().await)
}

fn total(r: &TestResult) -> &MediaStats {
    &r.media().expect("media detail").total
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ipv4_download_every_frame_completes() {
    let plan = small_plan(2);
    let (r, server) = run(IpAddr::V4(Ipv4Addr::LOCALHOST), |a| client_spec(a, plan)).await;
    let t = total(&r);
    assert_eq!(r.connections.len(), 1);
    assert_eq!(
        r.connections[0].outcome,
        Outcome::Succeeded,
        "{:?}",
        r.connections[0]
    );
    assert_eq!(t.sent, Some(1000));
    assert_eq!(t.received, 1000);
    assert_eq!(t.received_bytes, Some(plan.total_bytes));
    assert_eq!(
        (t.lost, t.duplicates, t.reordered, t.late, t.errors, t.corrupt),
        (0, 0, 0, 0, 0, 0)
    );
    assert_eq!(
        (t.frames_completed, t.frames_dropped, t.frames_repeated),
        (100, 0, 0)
    );
    assert_eq!(server.accepted, 1);
    assert_eq!(server.challenged, 1);
    assert_eq!(server.completed, 1);
    assert_eq!(server.sent, 1000);
    // Intervals carry the frame counts; together they are the totals.
    let frames: u64 = r
        .intervals
        .iter()
        .filter_map(|iv| iv.media.map(|m| m.completed))
        .sum();
    assert_eq!(frames, 100);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ipv6_upload_is_played_out_by_the_server() {
    let plan = small_plan(2);
    let (r, server) = run(IpAddr::V6(Ipv6Addr::LOCALHOST), |a| MediaSpec {
        upload: true,
        connections: 2,
        ..client_spec(a, plan)
    })
    .await;
    let t = total(&r);
    assert_eq!(r.connections.len(), 2);
    for c in &r.connections {
        assert_eq!(c.outcome, Outcome::Succeeded, "{c:?}");
    }
    assert_eq!(t.sent, Some(2000));
    assert_eq!(t.send_errors, Some(0));
    // The server's last reports: every frame complete at its end.
    assert_eq!(t.received, 2000);
    assert_eq!(
        (t.frames_completed, t.frames_dropped, t.frames_repeated),
        (200, 0, 0)
    );
    assert_eq!(server.received, 2000);
    assert_eq!(server.completed, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn iterations_run_streams_in_turn() {
    let plan = small_plan(1);
    let (r, server) = run(IpAddr::V4(Ipv4Addr::LOCALHOST), |a| MediaSpec {
        connections: 2,
        iterations: 2,
        buffer_depth: Duration::from_millis(1000),
        ..client_spec(a, plan)
    })
    .await;
    assert_eq!(r.connections.len(), 4);
    assert!(r.connections.iter().all(|c| c.outcome.is_success()));
    assert_eq!(total(&r).frames_completed, 200);
    assert_eq!(server.accepted, 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nobody_listening_fails_the_stream_quickly() {
    let port = UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let started = Instant::now();
    let r = run_media(
        client_spec(SocketAddr::from(([127, 0, 0, 1], port)), small_plan(1)),
        &mut NullObserver,
        CancellationToken::new(),
    )
    .await
    .unwrap();
    assert!(started.elapsed() < Duration::from_secs(6));
    assert_eq!(r.connections.len(), 1);
    assert!(
        matches!(&r.connections[0].outcome, Outcome::NetworkError { .. }),
        "{:?}",
        r.connections[0].outcome
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_stops_mid_stream_fails_the_stream() {
    let (addr, cancel, running) = serve(server_spec(IpAddr::V4(Ipv4Addr::LOCALHOST)));
    // A two-second download; the server stops after half a second.
    let stopper = {
        let cancel = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(500)).await;
            cancel.cancel();
        })
    };
    let r = run_media(
        client_spec(addr, small_plan(2)),
        &mut NullObserver,
        CancellationToken::new(),
    )
    .await
    .unwrap();
    stopper.await.unwrap();
    let _ = running.wait().await;
    match &r.connections[0].outcome {
        Outcome::NetworkError { name, .. } => assert_eq!(name, "NoEnd"),
        other => panic!("expected a NoEnd failure, got {other:?}"),
    }
    let t = total(&r);
    assert!(t.frames_completed > 0 && t.frames_dropped > 0, "{t:?}");
    assert_eq!(t.frames_completed + t.frames_dropped + t.frames_repeated, 100);
}

/// What the relay does to data datagrams, by sequence: server → client
/// ones, or client → server ones when `upload`.
#[derive(Default, Clone)]
struct Faults {
    upload: bool,
    drop: HashSet<u64>,
    dup: HashSet<u64>,
    /// Hold this datagram until the next one has gone.
    hold: HashSet<u64>,
    /// Flip a payload byte.
    corrupt: HashSet<u64>,
}

/// A UDP relay for one client: datagrams to its address go on to the
/// server, the server's come back to whoever sent last. Stops when dropped.
struct Relay {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    handle: Option<thread::JoinHandle<()>>,
}

impl Relay {
    fn start(server: SocketAddr, f: Faults) -> Self {
        let front = UdpSocket::bind("127.0.0.1:0").unwrap();
        let back = UdpSocket::bind("127.0.0.1:0").unwrap();
        back.connect(server).unwrap();
        front.set_nonblocking(true).unwrap();
        back.set_nonblocking(true).unwrap();
        let addr = front.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let handle = thread::spawn(move || {
            let mut client: Option<SocketAddr> = None;
            let mut held: Option<Vec<u8>> = None;
            let mut buf = vec![0u8; 65_536];
            let deadline = Instant::now() + Duration::from_secs(30);
            while !s.load(Ordering::Relaxed) && Instant::now() < deadline {
                let mut idle = true;
                if let Ok((n, from)) = front.recv_from(&mut buf) {
                    idle = false;
                    client = Some(from);
                    let out = if f.upload {
                        apply(&f, &mut held, buf[..n].to_vec())
                    } else {
                        vec![buf[..n].to_vec()]
                    };
                    for p in out {
                        let _ = back.send(&p);
                    }
                }
                if let Ok(n) = back.recv(&mut buf) {
                    idle = false;
                    let out = if f.upload {
                        vec![buf[..n].to_vec()]
                    } else {
                        apply(&f, &mut held, buf[..n].to_vec())
                    };
                    if let Some(to) = client {
                        for p in out {
                            let _ = front.send_to(&p, to);
                        }
                    }
                }
                if idle {
                    thread::sleep(Duration::from_micros(50));
                }
            }
        });
        Self {
            addr,
            stop,
            handle: Some(handle),
        }
    }
}

/// The datagrams to pass on in place of `p`.
fn apply(f: &Faults, held: &mut Option<Vec<u8>>, mut p: Vec<u8>) -> Vec<Vec<u8>> {
    let seq = match Message::decode(&p) {
        Ok(Message::Data(h)) => Some(h.seq),
        _ => None,
    };
    let mut out = Vec::new();
    match seq {
        Some(s) if f.drop.contains(&s) => {}
        Some(s) if f.hold.contains(&s) => *held = Some(p),
        Some(s) => {
            if f.corrupt.contains(&s) {
                p[DATA_HEADER_LEN + 1] ^= 0x40;
            }
            if f.dup.contains(&s) {
                out.push(p.clone());
            }
            out.push(p);
            if let Some(h) = held.take() {
                out.push(h);
            }
        }
        None => out.push(p),
    }
    out
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// Runs one stream of 100 frames × 10 datagrams through a relay with a
/// fault of each kind, every fault in a frame of its own, and checks every
/// count.
async fn faults_counted_exactly(upload: bool) {
    let plan = small_plan(2);
    let faults = Faults {
        upload,
        drop: (1..=10).map(|k| k * 100 - 1).collect(), // frames 10, 20, … 100
        dup: [5, 305].into(),                          // frames 1 and 31
        hold: [50, 450].into(),                        // frames 6 and 46
        corrupt: [600, 700].into(),                    // frames 61 and 71
    };
    let (server, cancel, running) = serve(server_spec(IpAddr::V4(Ipv4Addr::LOCALHOST)));
    let relay = Relay::start(server, faults);
    let spec = MediaSpec {
        upload,
        ..client_spec(relay.addr, plan)
    };
    let r = run_media(spec, &mut NullObserver, CancellationToken::new())
        .await
        .unwrap();
    drop(relay);
    cancel.cancel();
    running.wait().await;
    let t = total(&r);
    assert_eq!(t.sent, Some(1000));
    assert_eq!(t.send_errors, Some(0));
    assert_eq!(t.received, 990);
    assert_eq!(t.lost, 10);
    assert!((t.loss_percent - 1.0).abs() < 1e-9, "{}", t.loss_percent);
    assert_eq!(t.duplicates, 2);
    assert_eq!(t.reordered, 2);
    assert_eq!(t.corrupt, 2);
    assert_eq!((t.late, t.errors), (0, 0));
    assert_eq!(t.frames_dropped, 10);
    assert_eq!(t.frames_repeated, 2);
    assert_eq!(t.frames_completed, 88);
    if upload {
        // The server's figures, from its last report: no extent on the wire.
        assert_eq!(t.reorder_extent_max, None);
    } else {
        assert_eq!(t.reorder_extent_max, Some(1));
    }
    // Corrupt payloads fail the stream as a data error.
    assert!(
        matches!(
            &r.connections[0].outcome,
            Outcome::ProtocolError {
                kind: ProtocolErrorKind::DataMismatch,
                ..
            }
        ),
        "{:?}",
        r.connections[0].outcome
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_faults_are_counted_exactly() {
    faults_counted_exactly(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_faults_on_an_upload_are_counted_exactly_by_the_server() {
    faults_counted_exactly(true).await;
}

fn request(nonce: u64, cookie: [u8; 16], length_s: u32) -> Vec<u8> {
    let mut b = Vec::new();
    Message::Request(Request {
        nonce,
        bits_per_second: 4_000_000,
        frame_rate: 50,
        length_s,
        datagram_bytes: 1000,
        upload: false,
        verify_data: false,
        buffer_ms: 500,
        cookie,
    })
    .encode(&mut b);
    b
}

/// Every datagram that arrives within `for_`.
fn collect(s: &UdpSocket, for_: Duration) -> Vec<Vec<u8>> {
    s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
    let mut out = Vec::new();
    let mut buf = vec![0u8; 65_536];
    let end = Instant::now() + for_;
    while Instant::now() < end {
        if let Ok(n) = s.recv(&mut buf) {
            out.push(buf[..n].to_vec());
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_without_the_cookie_gets_only_a_challenge() {
    let (server, cancel, running) = serve(server_spec(IpAddr::V4(Ipv4Addr::LOCALHOST)));
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.connect(server).unwrap();
    let req = request(42, [0; 16], 10);
    s.send(&req).unwrap();
    // A forged cookie is no better.
    s.send(&request(43, [0x5A; 16], 10)).unwrap();
    let got = collect(&s, Duration::from_millis(1500));
    assert_eq!(got.len(), 2, "{got:?}");
    for d in &got {
        assert!(d.len() <= req.len());
        assert!(matches!(Message::decode(d), Ok(Message::Challenge { .. })));
    }
    cancel.cancel();
    let c = running.wait().await;
    assert_eq!((c.challenged, c.accepted, c.sent), (2, 0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn junk_is_counted_and_dropped_and_the_server_goes_on() {
    let (server, cancel, running) = serve(server_spec(IpAddr::V4(Ipv4Addr::LOCALHOST)));
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.connect(server).unwrap();
    let mut junk: Vec<Vec<u8>> = (0..80).map(|n| vec![0xA5; n]).collect();
    // Our magic with a bad version, a bad kind, a truncated request, and
    // data, reports and ends for streams that do not exist.
    junk.push(b"GPMS\x09\x01".to_vec());
    junk.push(b"GPMS\x01\x7f".to_vec());
    junk.push(request(1, [0; 16], 10)[..40].to_vec());
    let mut d = Vec::new();
    Message::Data(goodput_core::media::wire::DataHeader {
        stream: 12345,
        seq: 0,
        frame: 1,
        index: 0,
        count: 1,
        sent_ns: 0,
    })
    .encode(&mut d);
    d.extend_from_slice(&[0; 100]);
    junk.push(d);
    let mut e = Vec::new();
    Message::End {
        stream: 12345,
        sent: 1,
        send_errors: 0,
    }
    .encode(&mut e);
    junk.push(e);
    for j in &junk {
        s.send(j).unwrap();
    }
    // Nothing comes back for any of it.
    assert!(collect(&s, Duration::from_millis(500)).is_empty());
    // A real stream still runs.
    let r = run_media(
        client_spec(server, small_plan(1)),
        &mut NullObserver,
        CancellationToken::new(),
    )
    .await
    .unwrap();
    assert_eq!(r.connections[0].outcome, Outcome::Succeeded);
    // Let the server see the last report, as `run` does (without this the
    // cancel raced it on a loaded machine: completed 0).
    tokio::time::sleep(Duration::from_millis(200)).await;
    cancel.cancel();
    let c = running.wait().await;
    // 80 junk datagrams (the empty one included) and five crafted ones.
    assert_eq!(c.unsolicited, 85);
    assert_eq!((c.accepted, c.completed), (1, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_whose_reports_stop_ends_within_the_timeout() {
    let (server, cancel, running) = serve(server_spec(IpAddr::V4(Ipv4Addr::LOCALHOST)));
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.connect(server).unwrap();
    s.send(&request(7, [0; 16], 60)).unwrap();
    let ch = collect(&s, Duration::from_millis(300));
    let Ok(Message::Challenge { cookie, .. }) = Message::decode(&ch[0]) else {
        panic!("no challenge: {ch:?}");
    };
    // Open a 60 s stream and never report.
    s.send(&request(7, cookie, 60)).unwrap();
    let accepted = Instant::now();
    let mut buf = vec![0u8; 65_536];
    let mut last_data = accepted;
    s.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
    while accepted.elapsed() < Duration::from_secs(6) {
        if let Ok(n) = s.recv(&mut buf) {
            if matches!(Message::decode(&buf[..n]), Ok(Message::Data(_))) {
                last_data = Instant::now();
            }
        }
    }
    let ran = last_data - accepted;
    assert!(
        ran > Duration::from_millis(2500) && ran < Duration::from_millis(3600),
        "data flowed for {ran:?}"
    );
    cancel.cancel();
    let c = running.wait().await;
    assert_eq!((c.accepted, c.abandoned, c.completed), (1, 1, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_the_limits_a_stream_is_refused_with_the_reason() {
    let (server, cancel, running) = serve(MediaServerSpec {
        max_streams: 1,
        limits: MediaLimits {
            max_bits_per_second: 5_000_000,
            ..MediaLimits::default()
        },
        ..server_spec(IpAddr::V4(Ipv4Addr::LOCALHOST))
    });
    // Two streams where one is allowed: one runs, one is refused as busy.
    let r = run_media(
        MediaSpec {
            connections: 2,
            ..client_spec(server, small_plan(1))
        },
        &mut NullObserver,
        CancellationToken::new(),
    )
    .await
    .unwrap();
    let outcomes: Vec<String> = r.connections.iter().map(|c| format!("{:?}", c.outcome)).collect();
    assert_eq!(
        r.connections.iter().filter(|c| c.outcome.is_success()).count(),
        1,
        "{outcomes:?}"
    );
    assert!(
        outcomes.iter().any(|o| o.contains("too many streams open")),
        "{outcomes:?}"
    );
    // A bit rate over the server's limit.
    let fast = MediaPlan::new(8_000_000, 50, 1, 1000).unwrap();
    let r = run_media(
        client_spec(server, fast),
        &mut NullObserver,
        CancellationToken::new(),
    )
    .await
    .unwrap();
    assert!(
        format!("{:?}", r.connections[0].outcome).contains("the bit rate is above its limit"),
        "{:?}",
        r.connections[0].outcome
    );
    cancel.cancel();
    let c = running.wait().await;
    assert_eq!((c.accepted, c.rejected, c.rejected_limits), (1, 2, 1));
}

/// The memory budget counts each open stream at its ceiling: with room
/// for one upload, a second one at once is refused with the reason, and
/// the room comes back when the first ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_memory_budget_refuses_what_it_cannot_hold() {
    let plan = small_plan(1);
    let one = goodput_core::media::limits::stream_memory(&plan, true, 1000);
    let (server, cancel, running) = serve(MediaServerSpec {
        max_memory: one + one / 2,
        ..server_spec(IpAddr::V4(Ipv4Addr::LOCALHOST))
    });
    let upload = |connections| MediaSpec {
        connections,
        upload: true,
        buffer_depth: Duration::from_millis(1000),
        ..client_spec(server, plan)
    };
    let r = run_media(upload(2), &mut NullObserver, CancellationToken::new())
        .await
        .unwrap();
    let outcomes: Vec<String> = r.connections.iter().map(|c| format!("{:?}", c.outcome)).collect();
    assert_eq!(
        r.connections.iter().filter(|c| c.outcome.is_success()).count(),
        1,
        "{outcomes:?}"
    );
    assert!(
        outcomes
            .iter()
            .any(|o| o.contains("memory budget for media streams is taken")),
        "{outcomes:?}"
    );
    // The first stream's memory came back.
    let r = run_media(upload(1), &mut NullObserver, CancellationToken::new())
        .await
        .unwrap();
    assert!(
        r.connections[0].outcome.is_success(),
        "{:?}",
        r.connections[0].outcome
    );
    cancel.cancel();
    let c = running.wait().await;
    assert_eq!((c.accepted, c.rejected_memory), (2, 1));
    assert_eq!(c.memory_peak_bytes, one);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wildcard_server_answers_from_the_address_it_was_asked_on() {
    // The client's socket is connected to 127.0.0.2: anything from
    // 127.0.0.1 (the kernel's first choice) would never reach it.
    let (r, server) = run(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |a| {
        client_spec(SocketAddr::from(([127, 0, 0, 2], a.port())), small_plan(1))
    })
    .await;
    assert_eq!(
        r.connections[0].outcome,
        Outcome::Succeeded,
        "{:?}",
        r.connections[0]
    );
    assert_eq!(total(&r).frames_completed, 50);
    assert_eq!(server.completed, 1);
}
