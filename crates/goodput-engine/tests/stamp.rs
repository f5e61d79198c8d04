//! End-to-end tests of STAMP over real loopback sockets: goodput's sender
//! against goodput's reflector, directly and through a relay that drops,
//! duplicates, reorders and delays chosen packets.

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use goodput_core::result::{Outcome, StampReflectorMode, StampStats, TestResult};
use goodput_core::stamp::{Cidr, ReflectorPacket, SenderPacket};
use goodput_engine::stamp::{bind_reflector, run_sender, ReflectorSpec, StampSenderSpec};
use goodput_engine::{CancellationToken, NullObserver};

fn reflector_spec(ip: IpAddr, stateful: bool) -> ReflectorSpec {
    ReflectorSpec {
        listen: vec![SocketAddr::new(ip, 0)],
        stateful,
        allow: Vec::new(),
        per_source_rate: 0,
        session_timeout: Duration::from_secs(60),
        pad_short: false,
    }
}

fn sender_spec(target: SocketAddr, count: u64) -> StampSenderSpec {
    StampSenderSpec {
        target,
        bind: None,
        sessions: 1,
        interval: Duration::from_millis(5),
        count: Some(count),
        duration: None,
        packet_bytes: 44,
        dscp: 0,
        ssid: None,
        timeout: Duration::from_millis(500),
        status_interval: Duration::from_millis(200),
        max_records: 1000,
        reflector_stateful: false,
    }
}

/// Runs a reflector, then the sender against `target(reflector address)`;
/// returns the sender's result and the reflector's counters.
async fn run(
    refl: ReflectorSpec,
    spec: impl FnOnce(SocketAddr) -> StampSenderSpec,
) -> (TestResult, goodput_core::result::StampReflectorCounters) {
    let r = bind_reflector(refl).expect("bind reflector");
    let addr = r.local_addrs()[0];
    let cancel = CancellationToken::new();
    let running = r.start(cancel.clone());
    let result = run_sender(spec(addr), &mut NullObserver, CancellationToken::new())
        .await
        .expect("sender runs");
    cancel.cancel();
    (result, running.wait().await)
}

fn total(r: &TestResult) -> &StampStats {
    &r.stamp().expect("stamp detail").total
}

#[tokio::test]
async fn ipv4_stateless_every_packet_comes_back() {
    let (res, c) = run(reflector_spec(Ipv4Addr::LOCALHOST.into(), false), |a| {
        sender_spec(a, 40)
    })
    .await;
    let t = total(&res);
    assert_eq!((t.sent, t.received, t.lost, t.duplicates), (40, 40, 0, 0));
    assert_eq!((c.received, c.reflected), (40, 40));
    let rtt = t.rtt.expect("rtt");
    assert!(rtt.min_us > 0.0 && rtt.max_us < 100_000.0, "{rtt:?}");
    // Loopback: no router in between either way.
    assert_eq!(t.hops_forward.map(|h| (h.min, h.max)), Some((0, 0)));
    assert_eq!(t.hops_backward.map(|h| (h.min, h.max)), Some((0, 0)));
    assert_eq!(res.summary.successful, 1);
    assert!(res.intervals.iter().all(|iv| iv.stamp.is_some()));
    assert_eq!(
        res.intervals.iter().map(|iv| iv.stamp.unwrap().sent).sum::<u64>(),
        40
    );
    // The histograms are there and decode.
    let h = t.histograms.rtt_ns.as_deref().expect("rtt histogram");
    let back = goodput_core::stamp::stats::decode_histogram(h).expect("decodes");
    assert_eq!(back.len(), 40);
}

#[tokio::test]
async fn ipv6_stateful_with_ssid_and_several_sessions() {
    let (res, c) = run(reflector_spec(Ipv6Addr::LOCALHOST.into(), true), |a| {
        StampSenderSpec {
            sessions: 5,
            ssid: Some(1000),
            packet_bytes: 200,
            ..sender_spec(a, 20)
        }
    })
    .await;
    let t = total(&res);
    assert_eq!((t.sent, t.received, t.lost), (100, 100, 0));
    assert_eq!((t.ssid_mismatch, t.ssid_zero, t.unmatched), (0, 0, 0));
    assert_eq!((t.lost_forward, t.lost_backward), (Some(0), Some(0)));
    assert_eq!(c.sessions, 5);
    assert_eq!(c.reflected, 100);
    let d = res.stamp().unwrap();
    let ssids: Vec<u16> = d.per_session.iter().map(|s| s.ssid).collect();
    assert_eq!(ssids, vec![1000, 1001, 1002, 1003, 1004]);
    assert!(d.per_session.iter().all(|s| s.stats.received == 20));
}

#[tokio::test]
async fn nobody_listening_is_a_failed_session_not_a_hang() {
    // A port that was free a moment ago: the kernel answers with ICMP.
    let port = UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let target = SocketAddr::from(([127, 0, 0, 1], port));
    let start = Instant::now();
    let res = run_sender(
        sender_spec(target, 5),
        &mut NullObserver,
        CancellationToken::new(),
    )
    .await
    .unwrap();
    assert!(start.elapsed() < Duration::from_secs(5));
    assert_eq!(res.summary.network_errors, 1);
    assert!(matches!(res.connections[0].outcome, Outcome::NetworkError { .. }));
}

/// What the relay does to packets, by sender sequence number.
#[derive(Default, Clone)]
struct Faults {
    drop_forward: HashSet<u32>,
    drop_backward: HashSet<u32>,
    dup_forward: HashSet<u32>,
    dup_backward: HashSet<u32>,
    /// Hold this forward packet until the next one has gone.
    hold_forward: HashSet<u32>,
    /// Added to every forward packet.
    delay_forward: Duration,
}

/// A UDP relay for one sender: packets to its address go on to the
/// reflector, replies come back to whoever sent last. Stops when dropped.
struct UdpRelay {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    handle: Option<thread::JoinHandle<()>>,
}

impl UdpRelay {
    fn start(reflector: SocketAddr, f: Faults) -> Self {
        let front = UdpSocket::bind("127.0.0.1:0").unwrap();
        let back = UdpSocket::bind("127.0.0.1:0").unwrap();
        back.connect(reflector).unwrap();
        front.set_nonblocking(true).unwrap();
        back.set_nonblocking(true).unwrap();
        let addr = front.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let handle = thread::spawn(move || {
            let mut sender: Option<SocketAddr> = None;
            let mut held: Option<Vec<u8>> = None;
            let mut delayed: VecDeque<(Instant, Vec<u8>)> = VecDeque::new();
            let mut buf = [0u8; 9000];
            let deadline = Instant::now() + Duration::from_secs(30);
            while !s.load(Ordering::Relaxed) && Instant::now() < deadline {
                let mut idle = true;
                while let Some((at, _)) = delayed.front() {
                    if *at > Instant::now() {
                        break;
                    }
                    let (_, p) = delayed.pop_front().unwrap();
                    let _ = back.send(&p);
                }
                if let Ok((n, from)) = front.recv_from(&mut buf) {
                    idle = false;
                    sender = Some(from);
                    let p = buf[..n].to_vec();
                    let seq = SenderPacket::read(&p).map_or(u32::MAX, |s| s.seq);
                    let mut out = Vec::new();
                    if f.hold_forward.contains(&seq) {
                        held = Some(p);
                    } else if !f.drop_forward.contains(&seq) {
                        out.push(p.clone());
                        if f.dup_forward.contains(&seq) {
                            out.push(p);
                        }
                        if let Some(h) = held.take() {
                            out.push(h);
                        }
                    }
                    for p in out {
                        if f.delay_forward.is_zero() {
                            let _ = back.send(&p);
                        } else {
                            delayed.push_back((Instant::now() + f.delay_forward, p));
                        }
                    }
                }
                if let Ok(n) = back.recv(&mut buf) {
                    idle = false;
                    let seq = ReflectorPacket::read(&buf[..n]).map_or(u32::MAX, |r| r.sender_seq);
                    if let (Some(to), false) = (sender, f.drop_backward.contains(&seq)) {
                        let _ = front.send_to(&buf[..n], to);
                        if f.dup_backward.contains(&seq) {
                            let _ = front.send_to(&buf[..n], to);
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

impl Drop for UdpRelay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

fn set(v: &[u32]) -> HashSet<u32> {
    v.iter().copied().collect()
}

/// Loss per direction, duplicates and reordering equal what the relay did.
#[tokio::test]
async fn relay_faults_are_counted_exactly_with_a_stateful_reflector() {
    let faults = Faults {
        drop_forward: set(&[10, 50, 51, 120]),
        drop_backward: set(&[30, 77, 150]),
        dup_forward: set(&[100]),
        dup_backward: set(&[60, 90]),
        hold_forward: set(&[140]),
        ..Faults::default()
    };
    let mut relay = None;
    let (res, c) = run(reflector_spec(Ipv4Addr::LOCALHOST.into(), true), |a| {
        let r = UdpRelay::start(a, faults.clone());
        let spec = sender_spec(r.addr, 200);
        relay = Some(r);
        spec
    })
    .await;
    drop(relay);
    let t = total(&res);
    assert_eq!(t.sent, 200);
    assert_eq!(t.lost, 7, "{t:?}");
    assert_eq!((t.lost_forward, t.lost_backward), (Some(4), Some(3)));
    assert_eq!(t.received, 193);
    assert_eq!(t.duplicates, 3);
    assert_eq!(t.reordered, 1);
    assert_eq!(t.n_reordering_percent.len(), 1);
    assert_eq!(t.late, 0);
    assert_eq!(t.reflector_mode, StampReflectorMode::Stateful);
    // The reflector saw 200 − 4 dropped + 1 duplicate.
    assert_eq!(c.received, 197);
}

/// Only replies lost: every reply carries the sender's own number, so the
/// sender cannot see that the reflector is stateful; told so (reflector_stateful), it
/// splits the loss exactly. The last reply lost too: that packet may have
/// been lost either way, and counts in neither direction.
#[tokio::test]
async fn replies_lost_only_split_when_the_reflector_is_known_stateful() {
    let faults = Faults {
        drop_backward: set(&[0, 7, 33, 34, 120, 199]),
        ..Faults::default()
    };
    for declared in [true, false] {
        let mut relay = None;
        let (res, c) = run(reflector_spec(Ipv4Addr::LOCALHOST.into(), true), |a| {
            let r = UdpRelay::start(a, faults.clone());
            let spec = StampSenderSpec {
                reflector_stateful: declared,
                ..sender_spec(r.addr, 200)
            };
            relay = Some(r);
            spec
        })
        .await;
        drop(relay);
        let t = total(&res);
        assert_eq!((t.sent, t.received, t.lost), (200, 194, 6), "{t:?}");
        assert_eq!(c.received, 200);
        if declared {
            assert_eq!((t.lost_forward, t.lost_backward), (Some(0), Some(5)));
            assert_eq!(t.reflector_mode, StampReflectorMode::Stateful);
        } else {
            assert_eq!((t.lost_forward, t.lost_backward), (None, None));
            assert_eq!(t.reflector_mode, StampReflectorMode::Unknown);
        }
    }
}

/// A stateless reflector: the same loss, but no split is claimed.
#[tokio::test]
async fn stateless_reflector_gives_round_trip_loss_only() {
    let faults = Faults {
        drop_forward: set(&[5, 6]),
        drop_backward: set(&[20]),
        ..Faults::default()
    };
    let mut relay = None;
    let (res, _) = run(reflector_spec(Ipv4Addr::LOCALHOST.into(), false), |a| {
        let r = UdpRelay::start(a, faults.clone());
        let spec = sender_spec(r.addr, 50);
        relay = Some(r);
        spec
    })
    .await;
    drop(relay);
    let t = total(&res);
    assert_eq!((t.sent, t.received, t.lost), (50, 47, 3));
    assert_eq!((t.lost_forward, t.lost_backward), (None, None));
    assert_eq!(t.reflector_mode, StampReflectorMode::Unknown);
}

/// A delay the relay adds shows in the round-trip delay: never less than
/// 1 ms under it, and at most 5 ms over it (the relay's polling thread
/// sends late when the test suite loads the machine's two cores; seen at
/// +1.06 ms in CI).
#[tokio::test]
async fn relay_delay_shows_in_round_trip_delay() {
    async fn median_rtt_us(delay: Duration) -> f64 {
        let mut relay = None;
        let (res, _) = run(reflector_spec(Ipv4Addr::LOCALHOST.into(), false), |a| {
            let r = UdpRelay::start(
                a,
                Faults {
                    delay_forward: delay,
                    ..Faults::default()
                },
            );
            let spec = sender_spec(r.addr, 40);
            relay = Some(r);
            spec
        })
        .await;
        drop(relay);
        let t = total(&res);
        assert_eq!(t.lost, 0);
        t.rtt.unwrap().median_us
    }
    let base = median_rtt_us(Duration::ZERO).await;
    let slow = median_rtt_us(Duration::from_millis(30)).await;
    let added = slow - base;
    assert!(
        (29_000.0..35_000.0).contains(&added),
        "base {base} µs, with delay {slow} µs"
    );
}

/// Malformed, short, oversized and foreign datagrams never stop the
/// reflector, and each is counted.
#[tokio::test]
async fn reflector_counts_and_survives_junk() {
    let r = bind_reflector(reflector_spec(Ipv4Addr::LOCALHOST.into(), true)).unwrap();
    let addr = r.local_addrs()[0];
    let cancel = CancellationToken::new();
    let running = r.start(cancel.clone());
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    // Empty, 1 byte and 13 bytes: dropped as too short.
    for n in [0usize, 1, 13] {
        s.send_to(&vec![0xAB; n], addr).unwrap();
    }
    // A 14-byte TWAMP-Light request: answered with its own length (no
    // padding unless the reflector is told to pad).
    s.send_to(&[0, 0, 0, 9, 1, 2, 3, 4, 5, 6, 7, 8, 0, 1], addr)
        .unwrap();
    let mut buf = [0u8; 10_000];
    let n = s.recv(&mut buf).unwrap();
    assert_eq!(n, 14);
    assert_eq!(
        &buf[..4],
        &[0, 0, 0, 0],
        "stateful: the reflector's own first number"
    );
    // A request whose TLV overruns: answered, same size, with M set.
    let mut req = vec![0u8; 60];
    req[44..48].copy_from_slice(&[0x80, 7, 0, 200]);
    s.send_to(&req, addr).unwrap();
    let n = s.recv(&mut buf).unwrap();
    assert_eq!(n, 60);
    assert_eq!(buf[44] & goodput_core::stamp::TLV_M, goodput_core::stamp::TLV_M);
    // Random junk of every length up to 300 bytes.
    let mut x: u32 = 12345;
    for n in 14..300usize {
        let junk: Vec<u8> = (0..n)
            .map(|_| {
                x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
                (x >> 16) as u8
            })
            .collect();
        s.send_to(&junk, addr).unwrap();
    }
    // Oversized: longer than any symmetric reply.
    s.send_to(&vec![0u8; 9500], addr).unwrap();
    // Still answering after all that.
    s.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
    while s.recv(&mut buf).is_ok() {}
    s.send_to(&[0u8; 44], addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    assert_eq!(s.recv(&mut buf).unwrap(), 44);
    cancel.cancel();
    let c = running.wait().await;
    assert_eq!(c.too_short, 3);
    assert_eq!(c.oversized, 1);
    // The TWAMP-Light request and the junk of 14..=43 bytes.
    assert_eq!(c.short_answered, 1 + 30);
    assert!(c.malformed_tlvs >= 1);
    assert_eq!(c.received, 3 + 1 + 1 + 286 + 1 + 1);
    assert_eq!(c.reflected, 1 + 1 + 286 + 1);
}

/// With padding allowed, a short TWAMP-Light request gets the full base
/// packet that RFC 8762 §4.6 asks for; without it, its own length.
#[tokio::test]
async fn padding_short_requests_is_opt_in() {
    for (pad_short, want) in [(false, 14usize), (true, 44)] {
        let mut spec = reflector_spec(Ipv4Addr::LOCALHOST.into(), false);
        spec.pad_short = pad_short;
        let r = bind_reflector(spec).unwrap();
        let addr = r.local_addrs()[0];
        let cancel = CancellationToken::new();
        let running = r.start(cancel.clone());
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        s.send_to(&[0, 0, 0, 9, 1, 2, 3, 4, 5, 6, 7, 8, 0, 1], addr)
            .unwrap();
        let mut buf = [0u8; 100];
        let n = s.recv(&mut buf).unwrap();
        assert_eq!(n, want, "pad_short {pad_short}");
        if pad_short {
            let reply = ReflectorPacket::read(&buf[..n]).unwrap();
            assert_eq!(reply.sender_seq, 9);
            assert_eq!(reply.sender_timestamp, 0x0102_0304_0506_0708);
        }
        cancel.cancel();
        let c = running.wait().await;
        assert_eq!((c.short_answered, c.reflected), (1, 1));
    }
}

/// The ACL drops sources outside it; the rate limit caps one source.
#[tokio::test]
async fn acl_and_per_source_rate_limit() {
    let mut spec = reflector_spec(Ipv4Addr::LOCALHOST.into(), false);
    spec.allow = vec!["10.0.0.0/8".parse::<Cidr>().unwrap()];
    let (res, c) = run(spec, |a| StampSenderSpec {
        timeout: Duration::from_millis(200),
        ..sender_spec(a, 5)
    })
    .await;
    assert_eq!(total(&res).received, 0);
    assert_eq!((c.denied, c.reflected), (5, 0));

    let mut spec = reflector_spec(Ipv4Addr::LOCALHOST.into(), false);
    spec.per_source_rate = 10;
    spec.allow = vec!["127.0.0.0/8".parse::<Cidr>().unwrap()];
    let (res, c) = run(spec, |a| StampSenderSpec {
        interval: Duration::from_millis(1),
        timeout: Duration::from_millis(300),
        ..sender_spec(a, 100)
    })
    .await;
    let t = total(&res);
    // A 10-packet bucket plus 10/s of refill while sending: far fewer than
    // 100 pass (the bound allows for a slow machine stretching the run).
    let most = 10 + (10.0 * res.summary.duration_s).ceil() as u64 + 1;
    assert!(t.received >= 10 && t.received <= most, "{} > {most}", t.received);
    assert!(t.received < 50, "{}", t.received);
    assert_eq!(c.rate_limited + c.reflected, 100);
    assert_eq!(c.reflected, t.received);
}

/// Many sessions share one reflector and each gets its own numbering.
#[tokio::test]
async fn many_sessions_stateful_counters_are_per_session() {
    let (res, c) = run(reflector_spec(Ipv4Addr::LOCALHOST.into(), true), |a| {
        StampSenderSpec {
            sessions: 50,
            interval: Duration::from_millis(20),
            ..sender_spec(a, 10)
        }
    })
    .await;
    let t = total(&res);
    assert_eq!((t.sent, t.received, t.lost), (500, 500, 0));
    assert_eq!(c.sessions, 50);
    let per: HashMap<u64, u64> = res
        .stamp()
        .as_ref()
        .unwrap()
        .per_session
        .iter()
        .map(|s| (s.index, s.stats.received))
        .collect();
    assert_eq!(per.len(), 50);
    assert!(per.values().all(|&n| n == 10));
}

/// A reflector on the wildcard address answers from the address each
/// request was sent to (IP_PKTINFO): a sender talking to 127.0.0.2 through
/// a connected socket only accepts replies from 127.0.0.2.
#[tokio::test]
async fn replies_leave_from_the_address_the_request_arrived_on() {
    let r = bind_reflector(reflector_spec(Ipv4Addr::UNSPECIFIED.into(), false)).unwrap();
    let port = r.local_addrs()[0].port();
    let cancel = CancellationToken::new();
    let running = r.start(cancel.clone());
    for ip in [[127, 0, 0, 1], [127, 0, 0, 2], [127, 1, 2, 3]] {
        let target = SocketAddr::from((ip, port));
        let res = run_sender(
            sender_spec(target, 10),
            &mut NullObserver,
            CancellationToken::new(),
        )
        .await
        .unwrap();
        assert_eq!(total(&res).received, 10, "{target}");
    }
    cancel.cancel();
    assert_eq!(running.wait().await.reflected, 30);
}

/// The agent's hub: two runs of three sessions each to one stateful
/// reflector share one socket; every packet is answered and counted once,
/// and each session's SSID is its own.
#[tokio::test]
async fn hub_runs_share_a_socket_and_count_every_packet() {
    let r = bind_reflector(reflector_spec(Ipv4Addr::new(127, 0, 0, 7).into(), true)).expect("bind reflector");
    let addr = r.local_addrs()[0];
    let cancel = CancellationToken::new();
    let running = r.start(cancel.clone());
    let hub = goodput_engine::stamp::StampHub::new();
    let spec = || StampSenderSpec {
        sessions: 3,
        interval: Duration::from_millis(20),
        reflector_stateful: true,
        ..sender_spec(addr, 20)
    };
    let (mut oa, mut ob) = (NullObserver, NullObserver);
    let (a, b) = tokio::join!(
        hub.run_sender(spec(), &mut oa, CancellationToken::new()),
        hub.run_sender(spec(), &mut ob, CancellationToken::new())
    );
    cancel.cancel();
    let c = running.wait().await;
    let mut ssids = HashSet::new();
    for res in [a.expect("run a"), b.expect("run b")] {
        let t = total(&res);
        assert_eq!(
            (t.sent, t.received, t.lost, t.not_sent, t.duplicates),
            (60, 60, 0, 0, 0)
        );
        assert_eq!(t.lost_forward, Some(0));
        let s = res.stamp().unwrap();
        assert_eq!(s.per_session.len(), 3);
        for p in &s.per_session {
            assert_eq!((p.stats.sent, p.stats.received), (20, 20), "{p:?}");
            assert!(ssids.insert(p.ssid), "SSID {} twice", p.ssid);
        }
        // One socket for all of them.
        let locals: HashSet<&str> = res.connections.iter().map(|c| c.local_address.as_str()).collect();
        assert_eq!(locals.len(), 1, "{locals:?}");
    }
    assert_eq!((c.received, c.reflected, c.sessions), (120, 120, 6));
    assert_eq!(hub.counters().unknown.load(Ordering::Relaxed), 0);
    assert_eq!(hub.counters().sessions.load(Ordering::Relaxed), 0);
}
