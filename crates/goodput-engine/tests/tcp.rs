//! End-to-end tests of the TCP test over real loopback sockets.

mod relay;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use goodput_core::pattern::byte_at;
use goodput_core::plan::{Direction, TcpPattern, TransferPlan};
use goodput_core::result::{EndReason, Outcome, ProtocolErrorKind, TestResult};
use goodput_core::session::VerifyMode;
use goodput_core::units::{ByteSize, PortRange, ValueRange};
use goodput_engine::socket::SocketOptions;
use goodput_engine::tcp::{
    bind_server, run_client, CtsServerPlan, ServerLimits, ShutdownMode, TcpClientSpec, TcpServerSpec, TcpWire,
};
use goodput_engine::{CancellationToken, NullObserver};
use relay::{Flip, Relay};

fn server_spec(ip: IpAddr) -> TcpServerSpec {
    TcpServerSpec {
        wire: TcpWire::Goodput,
        cts: None,
        listen: vec![SocketAddr::new(ip, 0)],
        listen_defaulted: false,
        reuse_port: false,
        socket: SocketOptions::default(),
        limits: ServerLimits::default(),
        exit_after: None,
        idle_timeout: Duration::from_secs(10),
        status_interval: Duration::from_secs(3600),
        time_limit: Some(Duration::from_secs(60)),
        max_records: 100_000,
    }
}

fn client_spec(target: SocketAddr) -> TcpClientSpec {
    TcpClientSpec {
        wire: TcpWire::Goodput,
        targets: vec![target],
        binds: vec![],
        local_port: PortRange { lo: 0, hi: 0 },
        pattern: TcpPattern::Push,
        verify: VerifyMode::Data,
        transfer: ValueRange::single(ByteSize(1 << 20)),
        buffer: ValueRange::single(ByteSize(64 << 10)),
        push_bytes: 1 << 20,
        pull_bytes: 1 << 20,
        rate_limit: None,
        rate_period: Duration::from_millis(100),
        burst: None,
        connections: 3,
        iterations: 2,
        throttle: 1000,
        shutdown: ShutdownMode::Graceful,
        socket: SocketOptions::default(),
        idle_timeout: Duration::from_secs(10),
        status_interval: Duration::from_secs(3600),
        time_limit: Some(Duration::from_secs(60)),
        max_records: 100_000,
        duration: None,
        omit: Duration::ZERO,
    }
}

/// A server running in the background for one test.
struct TestServer {
    addrs: Vec<SocketAddr>,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<TestResult>,
}

impl TestServer {
    fn start(spec: TcpServerSpec) -> Self {
        let bound = bind_server(spec).unwrap();
        let addrs = bound.local_addrs();
        let stop = CancellationToken::new();
        let st = stop.clone();
        let task = tokio::spawn(async move { bound.run(&mut NullObserver, st).await.unwrap() });
        Self { addrs, stop, task }
    }

    fn addr(&self) -> SocketAddr {
        self.addrs[0]
    }

    /// Stops the server after `grace` (to let it see the last closes).
    async fn stop_after(self, grace: Duration) -> TestResult {
        tokio::time::sleep(grace).await;
        self.stop.cancel();
        self.task.await.unwrap()
    }
}

/// Starts a server, runs `client` against it (through `via` if given), stops
/// the server, and returns both results.
async fn run_pair(
    server: TcpServerSpec,
    client: impl FnOnce(SocketAddr) -> TcpClientSpec,
    via: Option<&dyn Fn(SocketAddr) -> SocketAddr>,
) -> (TestResult, TestResult) {
    let server = TestServer::start(server);
    let addr = server.addr();
    let target = via.map(|f| f(addr)).unwrap_or(addr);
    let c = run_client(client(target), &mut NullObserver, CancellationToken::new())
        .await
        .unwrap();
    // Let the server see the last closes before stopping it.
    (c, server.stop_after(Duration::from_millis(100)).await)
}

fn assert_all_exact(c: &TestResult, s: &TestResult, plan: TransferPlan, expected_conns: u64) {
    assert_eq!(
        c.summary.successful, expected_conns,
        "client: {:#?}",
        c.connections
    );
    assert_eq!(c.summary.failures() + c.summary.aborted, 0);
    assert_eq!(
        s.summary.successful, expected_conns,
        "server: {:#?}",
        s.connections
    );
    for r in &c.connections {
        assert_eq!(r.sent_bytes, plan.client_to_server);
        assert_eq!(r.received_bytes, plan.server_to_client);
        let p = r.peer.as_ref().expect("server's completion");
        assert_eq!(p.received_bytes, plan.client_to_server);
        assert_eq!(p.sent_bytes, plan.server_to_client);
        assert_eq!(p.outcome, Outcome::Succeeded);
    }
    for r in &s.connections {
        assert_eq!(r.received_bytes, plan.client_to_server);
        assert_eq!(r.sent_bytes, plan.server_to_client);
    }
    assert_eq!(c.summary.sent_bytes, s.summary.received_bytes);
    assert_eq!(c.summary.received_bytes, s.summary.sent_bytes);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_pattern_and_verify_mode_is_exact_on_v4_and_v6() {
    for ip in [IpAddr::V4(Ipv4Addr::LOCALHOST), IpAddr::V6(Ipv6Addr::LOCALHOST)] {
        for pattern in [
            TcpPattern::Push,
            TcpPattern::Pull,
            TcpPattern::PushPull,
            TcpPattern::Duplex,
        ] {
            for verify in [VerifyMode::Data, VerifyMode::Connection] {
                let transfer = 1_000_003u64;
                let (c, s) = run_pair(
                    server_spec(ip),
                    |t| TcpClientSpec {
                        pattern,
                        verify,
                        transfer: ValueRange::single(ByteSize(transfer)),
                        push_bytes: 70_001,
                        pull_bytes: 30_000,
                        ..client_spec(t)
                    },
                    None,
                )
                .await;
                let plan = TransferPlan::new(pattern, transfer, 70_001, 30_000);
                assert_all_exact(&c, &s, plan, 6);
                assert!(plan.total() >= transfer, "{pattern:?}");
            }
        }
    }
}

/// Flows fast enough to raise the receive low-water mark (SO_RCVLOWAT, about
/// a millisecond of data) must still end exactly: the mark comes down to the
/// bytes left for each tail and push-pull segment, and back to one byte for
/// the completion record read afterwards, or these runs would hang.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fast_flows_with_a_raised_low_water_mark_end_exactly() {
    let ip = IpAddr::V4(Ipv4Addr::LOCALHOST);
    for pattern in [
        TcpPattern::Push,
        TcpPattern::Pull,
        TcpPattern::PushPull,
        TcpPattern::Duplex,
    ] {
        let transfer = 96_000_007u64;
        let (c, s) = run_pair(
            server_spec(ip),
            |t| TcpClientSpec {
                pattern,
                verify: VerifyMode::Data,
                transfer: ValueRange::single(ByteSize(transfer)),
                push_bytes: 7_000_001,
                pull_bytes: 5_000_003,
                connections: 1,
                ..client_spec(t)
            },
            None,
        )
        .await;
        let plan = TransferPlan::new(pattern, transfer, 7_000_001, 5_000_003);
        assert_all_exact(&c, &s, plan, 2);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flipped_client_to_server_byte_is_one_data_error_at_its_offset() {
    // Connection 1's client→server stream: a 72-byte hello, then pattern bytes.
    let offset = 123_457u64;
    let flips = vec![Flip {
        conn: 1,
        client_to_server: true,
        offset: 72 + offset,
        mask: 0x20,
    }];
    let server = TestServer::start(server_spec(Ipv4Addr::LOCALHOST.into()));
    let addr = server.addr();
    let relay = Relay::start(addr, flips, false).await;
    let spec = TcpClientSpec {
        connections: 1,
        iterations: 4,
        ..client_spec(relay.addr)
    };
    let c = run_client(spec, &mut NullObserver, CancellationToken::new())
        .await
        .unwrap();
    let s = server.stop_after(Duration::from_millis(200)).await;

    assert_eq!(c.summary.data_errors, 1, "{:#?}", c.connections);
    assert_eq!(c.summary.successful, 3);
    assert_eq!(c.summary.network_errors, 0);
    let bad = c.connections.iter().find(|r| !r.outcome.is_success()).unwrap();
    assert_eq!(bad.index, 1);
    match &bad.outcome {
        Outcome::ProtocolError {
            kind,
            direction,
            offset: at,
            expected,
            actual,
            ..
        } => {
            assert_eq!(*kind, ProtocolErrorKind::DataMismatch);
            assert_eq!(*direction, Some(Direction::ClientToServer));
            assert_eq!(*at, Some(offset));
            assert_eq!(*expected, Some(byte_at(offset)));
            assert_eq!(*actual, Some(byte_at(offset) ^ 0x20));
        }
        other => panic!("expected a data mismatch, got {other:?}"),
    }
    assert_eq!(s.summary.data_errors, 1, "{:#?}", s.connections);
    assert_eq!(s.summary.successful, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flipped_server_to_client_byte_is_found_by_the_client() {
    // Connection 2's server→client stream: a 24-byte Accept, then pattern bytes.
    let offset = 65_536 * 3 + 1;
    let flips = vec![Flip {
        conn: 2,
        client_to_server: false,
        offset: 24 + offset,
        mask: 0xff,
    }];
    let server = TestServer::start(server_spec(Ipv4Addr::LOCALHOST.into()));
    let addr = server.addr();
    let relay = Relay::start(addr, flips, false).await;
    let spec = TcpClientSpec {
        pattern: TcpPattern::Pull,
        connections: 1,
        iterations: 4,
        ..client_spec(relay.addr)
    };
    let c = run_client(spec, &mut NullObserver, CancellationToken::new())
        .await
        .unwrap();
    let _ = server.stop_after(Duration::ZERO).await;
    assert_eq!(c.summary.data_errors, 1);
    assert_eq!(c.summary.successful, 3);
    let bad = c.connections.iter().find(|r| !r.outcome.is_success()).unwrap();
    assert_eq!(bad.index, 2);
    assert!(
        matches!(
            bad.outcome,
            Outcome::ProtocolError {
                kind: ProtocolErrorKind::DataMismatch,
                direction: Some(Direction::ServerToClient),
                offset: Some(o),
                ..
            } if o == offset
        ),
        "{:?}",
        bad.outcome
    );
    // The client stopped in the chunk that held the bad byte.
    assert!(
        bad.received_bytes > offset && bad.received_bytes < (1 << 20),
        "{}",
        bad.received_bytes
    );
}

/// (local port, remote port) of every socket in TIME_WAIT, from
/// /proc/net/tcp and tcp6. Ports alone are not enough: another test's
/// connection may use the same local port towards another server.
fn time_wait_pairs() -> Vec<(u16, u16)> {
    let port = |col: &str| u16::from_str_radix(col.rsplit(':').next().unwrap(), 16).unwrap();
    let mut pairs = Vec::new();
    for f in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let text = std::fs::read_to_string(f).unwrap_or_default();
        for line in text.lines().skip(1) {
            let cols: Vec<&str> = line.split_whitespace().collect();
            if cols.len() > 3 && cols[3] == "06" {
                pairs.push((port(cols[1]), port(cols[2])));
            }
        }
    }
    pairs
}

fn endpoint_pairs(r: &TestResult) -> Vec<(u16, u16)> {
    r.connections
        .iter()
        .map(|c| {
            let l = c.local_address.parse::<SocketAddr>().unwrap().port();
            let r = c.remote_address.parse::<SocketAddr>().unwrap().port();
            (l, r)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rude_shutdown_leaves_no_client_time_wait_and_graceful_does() {
    let (c, s) = run_pair(
        server_spec(Ipv4Addr::LOCALHOST.into()),
        |t| TcpClientSpec {
            shutdown: ShutdownMode::Rude,
            transfer: ValueRange::single(ByteSize(1000)),
            ..client_spec(t)
        },
        None,
    )
    .await;
    assert_eq!(c.summary.successful, 6);
    assert_eq!(
        s.summary.successful, 6,
        "the server accepts an RST after its completion"
    );
    let tw = time_wait_pairs();
    for p in endpoint_pairs(&c) {
        assert!(!tw.contains(&p), "rude close left {p:?} in TIME_WAIT");
    }
    assert!(c
        .connections
        .iter()
        .all(|r| r.shutdown == Some(ShutdownMode::Rude)));

    let (c, s) = run_pair(
        server_spec(Ipv4Addr::LOCALHOST.into()),
        |t| TcpClientSpec {
            shutdown: ShutdownMode::Graceful,
            transfer: ValueRange::single(ByteSize(1000)),
            ..client_spec(t)
        },
        None,
    )
    .await;
    assert_eq!(c.summary.successful, 6);
    assert_eq!(s.summary.successful, 6);
    // The client closed first with a FIN and waited for the server's FIN: it
    // is the active closer, so each of its ports sits in TIME_WAIT.
    let tw = time_wait_pairs();
    for p in endpoint_pairs(&c) {
        assert!(tw.contains(&p), "graceful close: {p:?} not in TIME_WAIT");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ranges_stay_inside_and_both_ends_agree() {
    let transfer: ValueRange<ByteSize> = "10000..200000".parse().unwrap();
    let buffer: ValueRange<ByteSize> = "512..8KiB".parse().unwrap();
    let (c, s) = run_pair(
        server_spec(Ipv4Addr::LOCALHOST.into()),
        |t| TcpClientSpec {
            pattern: TcpPattern::Duplex,
            transfer,
            buffer,
            connections: 4,
            iterations: 5,
            ..client_spec(t)
        },
        None,
    )
    .await;
    assert_eq!(c.summary.successful, 20);
    let mut transfers = std::collections::HashSet::new();
    for r in &c.connections {
        assert!(
            transfer.contains(ByteSize(r.transfer_bytes)),
            "{}",
            r.transfer_bytes
        );
        assert!(buffer.contains(ByteSize(r.buffer_bytes)), "{}", r.buffer_bytes);
        let plan = TransferPlan::new(TcpPattern::Duplex, r.transfer_bytes, 0, 0);
        assert_eq!(r.sent_bytes, plan.client_to_server);
        assert_eq!(r.received_bytes, plan.server_to_client);
        let p = r.peer.as_ref().unwrap();
        assert_eq!((p.sent_bytes, p.received_bytes), (r.received_bytes, r.sent_bytes));
        // The server's record of the same connection carries the same plan.
        let srv = s
            .connections
            .iter()
            .find(|x| x.connection_id == r.connection_id)
            .unwrap();
        assert_eq!(srv.transfer_bytes, r.transfer_bytes);
        assert_eq!(srv.buffer_bytes, r.buffer_bytes);
        transfers.insert(r.transfer_bytes);
    }
    assert!(transfers.len() > 1, "a range picks different values");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cts_wire_bytes_match_the_ctstraffic_protocol() {
    let transfer = 300_001u64;
    let plan = CtsServerPlan {
        pattern: TcpPattern::Duplex,
        verify: VerifyMode::Data,
        transfer,
        push_bytes: 1 << 20,
        pull_bytes: 1 << 20,
        buffer: 65536,
    };
    let server = TestServer::start(TcpServerSpec {
        wire: TcpWire::Cts,
        cts: Some(plan),
        ..server_spec(Ipv4Addr::LOCALHOST.into())
    });
    let addr = server.addr();
    let relay = Relay::start(addr, vec![], true).await;
    let spec = TcpClientSpec {
        wire: TcpWire::Cts,
        pattern: TcpPattern::Duplex,
        transfer: ValueRange::single(ByteSize(transfer)),
        connections: 2,
        iterations: 1,
        ..client_spec(relay.addr)
    };
    let c = run_client(spec, &mut NullObserver, CancellationToken::new())
        .await
        .unwrap();
    let s = server.stop_after(Duration::from_millis(200)).await;
    assert_eq!(c.summary.successful, 2, "{:#?}", c.connections);
    assert_eq!(s.summary.successful, 2);
    let half = transfer / 2 + 1; // duplex rounds an odd transfer up
    let rec = relay.recording.lock().unwrap();
    assert_eq!(rec.streams.len(), 2);
    for (c2s, s2c) in &rec.streams {
        // Client → server: raw pattern only, no header of any kind.
        assert_eq!(c2s.len() as u64, half);
        assert!(c2s.iter().enumerate().all(|(i, &b)| b == byte_at(i as u64)));
        // Server → client: 36-char lowercase UUID + NUL, pattern, "DONE".
        assert_eq!(s2c.len() as u64, 37 + half + 4);
        let id = &s2c[..37];
        assert_eq!(id[36], 0);
        let text = std::str::from_utf8(&id[..36]).unwrap();
        assert!(
            uuid::Uuid::parse_str(text).is_ok() && text == text.to_lowercase(),
            "{text}"
        );
        let body = &s2c[37..s2c.len() - 4];
        assert!(body.iter().enumerate().all(|(i, &b)| b == byte_at(i as u64)));
        assert_eq!(&s2c[s2c.len() - 4..], b"DONE");
    }
    // Both ends log the same id.
    for r in &c.connections {
        assert!(s.connections.iter().any(|x| x.connection_id == r.connection_id));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_limit_hello_is_rejected_with_a_reason_and_server_keeps_serving() {
    let server = TestServer::start(TcpServerSpec {
        limits: ServerLimits {
            max_transfer: 5000,
            ..ServerLimits::default()
        },
        ..server_spec(Ipv4Addr::LOCALHOST.into())
    });
    let addr = server.addr();
    let big = run_client(
        TcpClientSpec {
            transfer: ValueRange::single(ByteSize(6000)),
            connections: 1,
            iterations: 1,
            ..client_spec(addr)
        },
        &mut NullObserver,
        CancellationToken::new(),
    )
    .await
    .unwrap();
    match &big.connections[0].outcome {
        Outcome::ProtocolError { kind, message, .. } => {
            assert_eq!(*kind, ProtocolErrorKind::Rejected);
            assert!(
                message.contains("above the server's limit of 5000 bytes"),
                "{message}"
            );
        }
        o => panic!("{o:?}"),
    }
    // Garbage and a future version: both refused, nobody crashes.
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    for junk in [&b"GET / HTTP/1.1\r\n\r\n"[..], &b"GDPT\x09\x01\x00\x40"[..]] {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(junk).await.unwrap();
        let mut reply = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut reply)).await;
        let (m, _) = goodput_core::session::Message::decode(&reply).unwrap().unwrap();
        assert!(
            matches!(m, goodput_core::session::Message::Reject { .. }),
            "{m:?}"
        );
    }
    let ok = run_client(
        TcpClientSpec {
            transfer: ValueRange::single(ByteSize(5000)),
            ..client_spec(addr)
        },
        &mut NullObserver,
        CancellationToken::new(),
    )
    .await
    .unwrap();
    assert_eq!(ok.summary.successful, 6);
    let s = server.stop_after(Duration::ZERO).await;
    assert_eq!(s.summary.successful, 6);
    assert_eq!(s.summary.data_errors, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_peer_is_an_idle_timeout_not_a_hang() {
    // A listener that accepts and never answers the hello.
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let _hold = tokio::spawn(async move {
        let mut keep = Vec::new();
        while let Ok((s, _)) = l.accept().await {
            keep.push(s);
        }
    });
    let c = run_client(
        TcpClientSpec {
            connections: 2,
            iterations: 1,
            idle_timeout: Duration::from_millis(300),
            ..client_spec(addr)
        },
        &mut NullObserver,
        CancellationToken::new(),
    )
    .await
    .unwrap();
    assert_eq!(c.summary.data_errors, 2);
    assert!(c.connections.iter().all(|r| matches!(
        r.outcome,
        Outcome::ProtocolError {
            kind: ProtocolErrorKind::IdleTimeout,
            ..
        }
    )));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_connections_are_network_errors_with_errno_name() {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    drop(l);
    let c = run_client(client_spec(addr), &mut NullObserver, CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(c.summary.network_errors, 6);
    assert!(c.connections.iter().all(|r| matches!(
        &r.outcome,
        Outcome::NetworkError { name, during, .. } if name == "ECONNREFUSED" && during == "connect"
    )));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn time_limit_ends_an_endless_run_and_records_in_flight_as_aborted() {
    let (c, _s) = run_pair(
        server_spec(Ipv4Addr::LOCALHOST.into()),
        |t| TcpClientSpec {
            iterations: 0,
            connections: 2,
            transfer: ValueRange::single(ByteSize(1 << 40)),
            rate_limit: Some(ValueRange::single(goodput_core::units::ByteRate(1_000_000))),
            time_limit: Some(Duration::from_millis(700)),
            ..client_spec(t)
        },
        None,
    )
    .await;
    assert_eq!(c.end, EndReason::TimeLimit);
    assert_eq!(c.summary.aborted, 2, "{:#?}", c.connections);
    assert_eq!(c.summary.failures(), 0);
    for r in &c.connections {
        // 1 MB/s for 0.7 s in 100 ms quanta: 7 or 8 quanta of 100 kB.
        assert!((600_000..=900_000).contains(&r.sent_bytes), "{}", r.sent_bytes);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_range_gives_each_connection_its_own_rate() {
    let rates: ValueRange<goodput_core::units::ByteRate> = "200000..2000000".parse().unwrap();
    let (c, _s) = run_pair(
        server_spec(Ipv4Addr::LOCALHOST.into()),
        |t| TcpClientSpec {
            transfer: ValueRange::single(ByteSize(100_000)),
            rate_limit: Some(rates),
            connections: 4,
            iterations: 2,
            ..client_spec(t)
        },
        None,
    )
    .await;
    assert_eq!(c.summary.successful, 8);
    let distinct: std::collections::HashSet<u64> = c
        .connections
        .iter()
        .map(|r| r.rate_limit_bytes_per_second)
        .collect();
    assert!(distinct.len() > 1, "rates: {distinct:?}");
    for r in &c.connections {
        assert!(rates.contains(goodput_core::units::ByteRate(r.rate_limit_bytes_per_second)));
    }
}

/// Runs 3 duplex connections of `transfer` bytes through a relay that flips
/// client→server byte `offset` of the first; returns (client, server) results.
async fn duplex_with_flip(transfer: u64, offset: u64) -> (TestResult, TestResult) {
    let flips = vec![Flip {
        conn: 0,
        client_to_server: true,
        offset: 72 + offset,
        mask: 0x01,
    }];
    let server = TestServer::start(server_spec(Ipv4Addr::LOCALHOST.into()));
    let addr = server.addr();
    let relay = Relay::start(addr, flips, false).await;
    let spec = TcpClientSpec {
        pattern: TcpPattern::Duplex,
        transfer: ValueRange::single(ByteSize(transfer)),
        connections: 1,
        iterations: 3,
        ..client_spec(relay.addr)
    };
    let c = run_client(spec, &mut NullObserver, CancellationToken::new())
        .await
        .unwrap();
    (c, server.stop_after(Duration::from_millis(200)).await)
}

fn assert_server_found(s: &TestResult, offset: u64) {
    assert_eq!(s.summary.data_errors, 1, "{:#?}", s.connections);
    assert_eq!(s.summary.successful, 2);
    let bad = s.connections.iter().find(|r| !r.outcome.is_success()).unwrap();
    assert!(
        matches!(
            bad.outcome,
            Outcome::ProtocolError {
                kind: ProtocolErrorKind::DataMismatch,
                direction: Some(Direction::ClientToServer),
                offset: Some(o),
                ..
            } if o == offset
        ),
        "{:?}",
        bad.outcome
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplex_flip_found_by_server_is_not_misread_by_the_client() {
    let offset = 200_003u64;
    // Server still sending its 32 MiB half when it finds the byte: it
    // resets, since a completion now would land in the client's pattern
    // stream. The client sees a reset, never a server→client mismatch.
    let (c, s) = duplex_with_flip(64 << 20, offset).await;
    assert_server_found(&s, offset);
    assert_eq!(c.summary.successful, 2);
    let failed: Vec<_> = c.connections.iter().filter(|r| !r.outcome.is_success()).collect();
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].index, 0);
    assert!(
        matches!(failed[0].outcome, Outcome::NetworkError { .. }),
        "{:?}",
        failed[0].outcome
    );

    // Server done sending (1 MiB half fits in the socket buffers) when it
    // finds the byte: its completion is where the client expects it, and the
    // client reports the server's finding exactly.
    let (c, s) = duplex_with_flip(2 << 20, offset).await;
    assert_server_found(&s, offset);
    assert_eq!(c.summary.successful, 2);
    let failed: Vec<_> = c.connections.iter().filter(|r| !r.outcome.is_success()).collect();
    assert_eq!(failed.len(), 1);
    match &failed[0].outcome {
        Outcome::NetworkError { .. } => {}
        Outcome::ProtocolError {
            direction, offset: o, ..
        } => {
            assert_eq!(*direction, Some(Direction::ClientToServer), "{:?}", failed[0]);
            assert_eq!(*o, Some(offset));
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn socket_options_apply_and_a_bad_one_is_a_named_error() {
    let opts = SocketOptions {
        send_buffer: Some(256 << 10),
        recv_buffer: Some(256 << 10),
        no_delay: true,
        congestion: Some("reno".into()),
        dscp: Some(46),
        keepalive: Some(Duration::from_secs(30)),
        interface: Some("lo".into()),
    };
    let (c, s) = run_pair(
        TcpServerSpec {
            socket: opts.clone(),
            ..server_spec(Ipv4Addr::LOCALHOST.into())
        },
        |t| TcpClientSpec {
            socket: opts.clone(),
            pattern: TcpPattern::Duplex,
            ..client_spec(t)
        },
        None,
    )
    .await;
    assert_all_exact(&c, &s, TransferPlan::new(TcpPattern::Duplex, 1 << 20, 0, 0), 6);
    assert!(c
        .connections
        .iter()
        .all(|r| r.tcp_info.is_some_and(|t| t.snd_mss_bytes > 0)));

    let (c, _s) = run_pair(
        server_spec(Ipv4Addr::LOCALHOST.into()),
        |t| TcpClientSpec {
            socket: SocketOptions {
                congestion: Some("no-such-algorithm".into()),
                ..SocketOptions::default()
            },
            ..client_spec(t)
        },
        None,
    )
    .await;
    assert_eq!(c.summary.network_errors, 6);
    assert!(
        c.connections.iter().all(|r| matches!(
            &r.outcome,
            Outcome::NetworkError { during, message, errno, name }
                if during == "setsockopt" && message.contains("no-such-algorithm")
                    && errno.is_some() && name.starts_with('E') && !name.starts_with("E1")
        )),
        "{:?}",
        c.connections[0].outcome
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bind_addresses_and_local_ports_are_used_in_turn() {
    let binds: Vec<IpAddr> = vec!["127.0.0.2".parse().unwrap(), "127.0.0.3".parse().unwrap()];
    // A free range of three ports, found by binding them briefly.
    let base = (20000u16..60000)
        .step_by(7)
        .find(|&p| {
            (p..p + 3).all(|q| {
                std::net::TcpListener::bind(("127.0.0.2", q)).is_ok()
                    && std::net::TcpListener::bind(("127.0.0.3", q)).is_ok()
            })
        })
        .unwrap();
    let (c, _s) = run_pair(
        server_spec(Ipv4Addr::LOCALHOST.into()),
        |t| TcpClientSpec {
            binds: binds.clone(),
            local_port: PortRange {
                lo: base,
                hi: base + 2,
            },
            shutdown: ShutdownMode::Rude,
            connections: 3,
            iterations: 2,
            ..client_spec(t)
        },
        None,
    )
    .await;
    assert_eq!(c.summary.successful, 6, "{:#?}", c.connections);
    for r in &c.connections {
        let local: SocketAddr = r.local_address.parse().unwrap();
        assert_eq!(
            local.ip(),
            binds[(r.index % 2) as usize],
            "connection {}",
            r.index
        );
        assert_eq!(
            local.port(),
            base + (r.index % 3) as u16,
            "connection {}",
            r.index
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bursts_pause_between_groups_of_sends() {
    let (c, _s) = run_pair(
        server_spec(Ipv4Addr::LOCALHOST.into()),
        |t| TcpClientSpec {
            transfer: ValueRange::single(ByteSize(10_000)),
            buffer: ValueRange::single(ByteSize(1000)),
            burst: Some((2, Duration::from_millis(100))),
            connections: 1,
            iterations: 1,
            ..client_spec(t)
        },
        None,
    )
    .await;
    assert_eq!(c.summary.successful, 1);
    // Ten 1000-byte sends in bursts of two: at least four 100 ms pauses.
    let r = &c.connections[0];
    assert!(r.elapsed_ns >= 400_000_000, "{} ns", r.elapsed_ns);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_client_limit_rejects_the_excess_with_a_reason() {
    let (c, s) = run_pair(
        TcpServerSpec {
            limits: ServerLimits {
                max_per_client: 2,
                ..ServerLimits::default()
            },
            ..server_spec(Ipv4Addr::LOCALHOST.into())
        },
        |t| TcpClientSpec {
            // Slow enough that four connections are open at once.
            transfer: ValueRange::single(ByteSize(300_000)),
            rate_limit: Some(ValueRange::single(goodput_core::units::ByteRate(1_000_000))),
            connections: 4,
            iterations: 1,
            ..client_spec(t)
        },
        None,
    )
    .await;
    assert_eq!(c.summary.successful, 2, "{:#?}", c.connections);
    assert_eq!(c.summary.data_errors, 2);
    for r in c.connections.iter().filter(|r| !r.outcome.is_success()) {
        match &r.outcome {
            Outcome::ProtocolError { kind, message, .. } => {
                assert_eq!(*kind, ProtocolErrorKind::Rejected);
                assert!(message.contains("too many connections"), "{message}");
            }
            o => panic!("{o:?}"),
        }
    }
    assert_eq!(s.summary.successful, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn targets_of_both_families_are_used_round_robin() {
    let server = TestServer::start(TcpServerSpec {
        listen: vec!["127.0.0.1:0".parse().unwrap(), "[::1]:0".parse().unwrap()],
        ..server_spec(Ipv4Addr::LOCALHOST.into())
    });
    let addrs = server.addrs.clone();
    assert_eq!(addrs.len(), 2);
    let spec = TcpClientSpec {
        targets: addrs.clone(),
        connections: 2,
        iterations: 3,
        ..client_spec(addrs[0])
    };
    let c = run_client(spec, &mut NullObserver, CancellationToken::new())
        .await
        .unwrap();
    let s = server.stop_after(Duration::ZERO).await;
    assert_eq!(c.summary.successful, 6);
    assert_eq!(s.summary.successful, 6);
    for r in &c.connections {
        let want = addrs[(r.index % 2) as usize];
        assert_eq!(r.remote_address, want.to_string(), "connection {}", r.index);
        let local: SocketAddr = r.local_address.parse().unwrap();
        assert_eq!(local.is_ipv4(), want.is_ipv4());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limit_paces_smoothly_even_with_large_buffers_and_server_counts_in_flight() {
    let (c, s) = run_pair(
        TcpServerSpec {
            status_interval: Duration::from_millis(100),
            ..server_spec(Ipv4Addr::LOCALHOST.into())
        },
        |t| TcpClientSpec {
            // One 1 MiB send would carry the whole 1 MB transfer; pacing
            // must still spread it over about a second.
            transfer: ValueRange::single(ByteSize(1_000_000)),
            buffer: ValueRange::single(ByteSize(1 << 20)),
            rate_limit: Some(ValueRange::single(goodput_core::units::ByteRate(1_000_000))),
            connections: 3,
            iterations: 1,
            ..client_spec(t)
        },
        None,
    )
    .await;
    assert_eq!(c.summary.successful, 3);
    for r in &c.connections {
        // 100 kB per 100 ms quantum, the first released at once; quanta
        // are slices of the run's clock, so the first may have only a
        // moment left when the connection starts (a slow connect on a
        // loaded machine): nine more boundaries, at least 0.8 s.
        assert!(r.elapsed_ns >= 800_000_000, "{} ns", r.elapsed_ns);
        assert_eq!(r.sent_bytes, 1_000_000);
    }
    // The server's own status saw all three connections in flight.
    let most = s.intervals.iter().map(|i| i.in_flight).max().unwrap();
    assert_eq!(most, 3, "{:?}", s.intervals);
}

/// A timed client of `pattern`, `connections` at once, for `ms`.
fn timed_spec(target: SocketAddr, pattern: TcpPattern, connections: u64, ms: u64) -> TcpClientSpec {
    TcpClientSpec {
        pattern,
        connections,
        iterations: 1,
        duration: Some(Duration::from_millis(ms)),
        omit: Duration::from_millis(ms / 4),
        ..client_spec(target)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timed_connections_end_successful_with_both_ends_counts_equal() {
    for pattern in [TcpPattern::Push, TcpPattern::Pull, TcpPattern::Duplex] {
        let (c, s) = run_pair(
            server_spec(Ipv4Addr::LOCALHOST.into()),
            |t| timed_spec(t, pattern, 3, 600),
            None,
        )
        .await;
        assert_eq!(c.summary.successful, 3, "{pattern:?}: {:#?}", c.connections);
        assert_eq!(s.summary.successful, 3, "{pattern:?}: {:#?}", s.connections);
        let up = matches!(pattern, TcpPattern::Push | TcpPattern::Duplex);
        let down = matches!(pattern, TcpPattern::Pull | TcpPattern::Duplex);
        for r in &c.connections {
            let p = r.peer.as_ref().expect("the server's completion");
            // Exactly what one end sent, the other received and verified.
            assert_eq!(p.received_bytes, r.sent_bytes, "{pattern:?}");
            assert_eq!(p.sent_bytes, r.received_bytes, "{pattern:?}");
            assert_eq!(r.sent_bytes > 0, up, "{pattern:?}: {r:?}");
            assert_eq!(r.received_bytes > 0, down, "{pattern:?}: {r:?}");
            let t = r.timed.expect("timed figures");
            assert_eq!(t.up.map(|g| g.bytes), up.then_some(r.sent_bytes));
            assert_eq!(t.down.map(|g| g.bytes), down.then_some(r.received_bytes));
            for g in t.up.iter().chain(t.down.iter()) {
                // A 600 ms test, 150 ms of it warm-up: the receiver's time
                // ends with the last data byte, sent just before 600 ms.
                assert!(
                    g.elapsed_ns >= 500_000_000 && g.elapsed_ns < 1_500_000_000,
                    "{g:?}"
                );
                assert!(g.warm_up_ns >= 150_000_000 && g.warm_up_ns < 300_000_000, "{g:?}");
                assert!(g.warm_up_bytes > 0 && g.warm_up_bytes < g.bytes, "{g:?}");
                let after = (g.bytes - g.warm_up_bytes) as f64 / ((g.elapsed_ns - g.warm_up_ns) as f64 / 1e9);
                assert!((g.bytes_per_second - after).abs() < 1.0, "{g:?}");
            }
        }
        // The server's records agree, connection by connection.
        let total_up: u64 = c.connections.iter().map(|r| r.sent_bytes).sum();
        let total_down: u64 = c.connections.iter().map(|r| r.received_bytes).sum();
        assert_eq!(s.summary.received_bytes, total_up);
        assert_eq!(s.summary.sent_bytes, total_down);
        let totals = c.summary.timed.expect("timed totals");
        assert_eq!(
            totals.up.map(|d| (d.connections, d.bytes)),
            up.then_some((3, total_up))
        );
        assert_eq!(
            totals.down.map(|d| (d.connections, d.bytes)),
            down.then_some((3, total_down))
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timed_flipped_client_to_server_byte_is_a_data_error_at_its_offset() {
    // The client→server stream: an 80-byte Timed Hello, then pattern bytes.
    let offset = 3_000_017u64;
    let flips = vec![Flip {
        conn: 0,
        client_to_server: true,
        offset: 80 + offset,
        mask: 0x04,
    }];
    let server = TestServer::start(server_spec(Ipv4Addr::LOCALHOST.into()));
    let relay = Relay::start(server.addr(), flips, false).await;
    let spec = TcpClientSpec {
        rate_limit: Some(ValueRange::single(goodput_core::units::ByteRate(20 << 20))),
        ..timed_spec(relay.addr, TcpPattern::Duplex, 1, 500)
    };
    let c = run_client(spec, &mut NullObserver, CancellationToken::new())
        .await
        .unwrap();
    let s = server.stop_after(Duration::from_millis(100)).await;
    assert_eq!(c.summary.data_errors, 1, "{:#?}", c.connections);
    let want = |outcome: &Outcome| {
        matches!(
            outcome,
            Outcome::ProtocolError {
                kind: ProtocolErrorKind::DataMismatch,
                direction: Some(Direction::ClientToServer),
                offset: Some(o),
                expected: Some(e),
                actual: Some(a),
                ..
            } if *o == offset && *e == byte_at(offset) && *a == byte_at(offset) ^ 0x04
        )
    };
    assert!(want(&c.connections[0].outcome), "{:?}", c.connections[0].outcome);
    assert_eq!(s.summary.data_errors, 1);
    assert!(want(&s.connections[0].outcome), "{:?}", s.connections[0].outcome);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timed_flipped_server_to_client_byte_is_found_by_the_client() {
    // The server→client stream: a 24-byte Accept, then pattern bytes, then
    // the 60-byte Timed Completion.
    let offset = 2_500_001u64;
    let flips = vec![Flip {
        conn: 0,
        client_to_server: false,
        offset: 24 + offset,
        mask: 0x80,
    }];
    let server = TestServer::start(server_spec(Ipv4Addr::LOCALHOST.into()));
    let relay = Relay::start(server.addr(), flips, false).await;
    let spec = TcpClientSpec {
        rate_limit: Some(ValueRange::single(goodput_core::units::ByteRate(20 << 20))),
        ..timed_spec(relay.addr, TcpPattern::Pull, 1, 500)
    };
    let c = run_client(spec, &mut NullObserver, CancellationToken::new())
        .await
        .unwrap();
    let _ = server.stop_after(Duration::ZERO).await;
    assert_eq!(c.summary.data_errors, 1, "{:#?}", c.connections);
    let r = &c.connections[0];
    assert!(
        matches!(
            r.outcome,
            Outcome::ProtocolError {
                kind: ProtocolErrorKind::DataMismatch,
                direction: Some(Direction::ServerToClient),
                offset: Some(o),
                ..
            } if o == offset
        ),
        "{:?}",
        r.outcome
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_server_direction_is_accept_data_then_its_completion() {
    // What crossed the wire, recorded by the relay: the server's direction
    // is the Accept, the data, and the Timed Completion as its last bytes.
    let server = TestServer::start(server_spec(Ipv4Addr::LOCALHOST.into()));
    let relay = Relay::start(server.addr(), vec![], true).await;
    let spec = TcpClientSpec {
        rate_limit: Some(ValueRange::single(goodput_core::units::ByteRate(20 << 20))),
        ..timed_spec(relay.addr, TcpPattern::Duplex, 1, 300)
    };
    let c = run_client(spec, &mut NullObserver, CancellationToken::new())
        .await
        .unwrap();
    let _ = server.stop_after(Duration::from_millis(100)).await;
    assert_eq!(c.summary.successful, 1, "{:#?}", c.connections);
    let r = &c.connections[0];
    let rec = relay.recording.lock().unwrap();
    let (up, down) = &rec.streams[0];
    assert_eq!(
        up.len() as u64,
        80 + r.sent_bytes,
        "hello, then the data, then FIN"
    );
    let frame = goodput_core::session::TIMED_COMPLETION_FRAME;
    assert_eq!(down.len() as u64, 24 + r.received_bytes + frame as u64);
    let trailer = &down[down.len() - frame..];
    match goodput_core::session::Message::decode(trailer) {
        Ok(Some((goodput_core::session::Message::Completion(done), n))) => {
            assert_eq!(n, frame);
            assert_eq!(done.sent, r.received_bytes);
            assert_eq!(done.received, r.sent_bytes);
            assert!(done.timed.is_some());
        }
        other => panic!("the server's direction does not end with its completion: {other:?}"),
    }
    // Every data byte on the way down is the pattern's.
    let data = &down[24..down.len() - frame];
    assert!(data.iter().enumerate().all(|(i, b)| *b == byte_at(i as u64)));
}
