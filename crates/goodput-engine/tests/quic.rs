//! QUIC perf end to end over loopback: goodput's client against goodput's
//! server (IPv4 and IPv6), every scenario form, unlimited responses,
//! unidirectional requests, media and datagram frames, malformed and short
//! requests, and a lying server whose byte counts the client must catch.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use goodput_core::quic::scenario::Scenario;
use goodput_core::result::{QuicDetail, QuicServerCounters, TestResult};
use goodput_engine::quic::{bind_quic, run_quic, QuicMode, QuicServerSpec, QuicSpec};
use goodput_engine::tls::Trust;
use goodput_engine::{CancellationToken, NullObserver};

fn server_spec(ip: IpAddr) -> QuicServerSpec {
    QuicServerSpec {
        listen: vec![SocketAddr::new(ip, 0)],
        cert_key: None,
        max_connections: 100,
        max_per_client: 100,
        max_streams: 1000,
        max_response: 1 << 40,
        retry: true,
        max_handshakes: 100,
        handshake_timeout: std::time::Duration::from_secs(10),
        max_mtu: None,
    }
}

fn spec(target: SocketAddr, mode: QuicMode) -> QuicSpec {
    QuicSpec {
        target,
        server_name: "localhost".into(),
        trust: Trust::Anything,
        mode,
        connections: 1,
        duration: Duration::from_secs(1),
        uni: false,
        scenario_text: None,
        status_interval: Duration::from_millis(500),
        max_records: 100,
        max_mtu: None,
    }
}

fn scenario(s: &str) -> QuicMode {
    QuicMode::Scenario(Scenario::parse(s).unwrap())
}

/// A running server: its address, and how to stop it and get its counters.
struct Server {
    addr: SocketAddr,
    cancel: CancellationToken,
    task: tokio::task::JoinHandle<QuicServerCounters>,
}

impl Server {
    fn start(spec: QuicServerSpec) -> Self {
        let b = bind_quic(spec).unwrap();
        let addr = b.local_addrs()[0];
        let cancel = CancellationToken::new();
        let c = cancel.clone();
        let task = tokio::spawn(async move { b.run(c, None).await });
        Self { addr, cancel, task }
    }

    async fn stop(self) -> QuicServerCounters {
        self.cancel.cancel();
        self.task.await.unwrap()
    }
}

async fn client(spec: QuicSpec) -> TestResult {
    run_quic(spec, &mut NullObserver, CancellationToken::new())
        .await
        .unwrap()
}

async fn run(ip: IpAddr, f: impl FnOnce(SocketAddr) -> QuicSpec) -> (TestResult, QuicServerCounters) {
    let server = Server::start(server_spec(ip));
    let r = client(f(server.addr)).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    (r, server.stop().await)
}

fn q(r: &TestResult) -> &QuicDetail {
    r.quic().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_scenario_moves_exact_bytes_v4_and_v6() {
    for ip in [IpAddr::V4(Ipv4Addr::LOCALHOST), IpAddr::V6(Ipv6Addr::LOCALHOST)] {
        let (r, s) = run(ip, |a| spec(a, scenario("*1:397:5000000;"))).await;
        let d = q(&r);
        assert_eq!((d.transactions, d.failed_streams), (1, 0), "{:?}", d.errors);
        assert_eq!(d.upload_bytes, 397);
        assert_eq!(d.download_bytes, 5_000_000);
        assert_eq!(s.bytes_received, 397);
        assert_eq!(s.bytes_sent, 5_000_000);
        assert_eq!((s.connections, s.streams), (1, 1));
        assert_eq!(r.connections[0].outcome, goodput_core::result::Outcome::Succeeded);
        let p = r.connections[0].quic.expect("quinn's figures in the record");
        assert!(p.rtt_us > 0, "{p:?}");
        // Loopback carries 64 KiB datagrams: path MTU discovery climbs past
        // quinn's default ceiling of 1,452 bytes to ours.
        assert!(p.mtu_bytes > 1452, "MTU discovery stopped at {} B", p.mtu_bytes);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_and_current_forms_move_the_same_bytes() {
    let ip = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let (legacy, _) = run(ip, |a| spec(a, scenario("*1:0:-:397:5000;*1:4:0:432:4999;"))).await;
    let (current, _) = run(ip, |a| spec(a, scenario("=a:*1:397:5000;=b:=a:*1:432:4999;"))).await;
    for r in [&legacy, &current] {
        let d = q(r);
        assert_eq!(
            (d.transactions, d.upload_bytes, d.download_bytes),
            (2, 829, 9999),
            "{d:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeats_dependencies_and_parallel_streams() {
    let (r, s) = run(IpAddr::V4(Ipv4Addr::LOCALHOST), |a| {
        spec(a, scenario("=b1:*20:256:12345;=b2:=b1:*5:100:1000;"))
    })
    .await;
    let d = q(&r);
    assert_eq!((d.transactions, d.failed_streams), (25, 0));
    assert_eq!(d.download_bytes, 20 * 12345 + 5 * 1000);
    assert_eq!(d.upload_bytes, 20 * 256 + 5 * 100);
    assert_eq!(s.streams, 25);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlimited_response_ends_with_stop_sending() {
    // A second request after the first keeps the connection open while the
    // server takes in the STOP_SENDING.
    let (r, s) = run(IpAddr::V4(Ipv4Addr::LOCALHOST), |a| {
        spec(a, scenario("=a:b8:-2000000;=b:=a:8:1000"))
    })
    .await;
    let d = q(&r);
    assert_eq!((d.transactions, d.failed_streams), (2, 0), "{:?}", d.errors);
    assert!(d.download_bytes >= 2_001_000);
    assert_eq!(s.stopped, 1);
    // Timed download: the same mechanism.
    let (r, _) = run(IpAddr::V4(Ipv4Addr::LOCALHOST), |a| {
        spec(a, QuicMode::DownloadFor(Duration::from_millis(500)))
    })
    .await;
    assert_eq!(q(&r).transactions, 1);
    assert!(q(&r).download_bytes > 1_000_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unidirectional_requests_get_server_streams() {
    let (r, s) = run(IpAddr::V6(Ipv6Addr::LOCALHOST), |a| QuicSpec {
        uni: true,
        ..spec(a, scenario("*10:100:5000"))
    })
    .await;
    let d = q(&r);
    assert_eq!((d.transactions, d.failed_streams), (10, 0), "{:?}", d.errors);
    assert_eq!(d.download_bytes, 50_000);
    assert_eq!(s.bytes_sent, 50_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uni_replies_are_matched_by_size_not_arrival_order() {
    let server = Server::start(server_spec(IpAddr::V4(Ipv4Addr::LOCALHOST)));
    // Small and large replies finish in another order than their requests
    // start; taking "the next reply stream" failed this every time.
    for _ in 0..5 {
        let r = client(QuicSpec {
            uni: true,
            ..spec(server.addr, scenario("=a:*4:8:1000;=b:*4:8:3000000;"))
        })
        .await;
        let d = q(&r);
        assert_eq!((d.transactions, d.failed_streams), (8, 0), "{:?}", d.errors);
        assert_eq!(d.download_bytes, 4 * 1000 + 4 * 3_000_000);
    }
    // An unlimited request among finite ones takes the stream that
    // outgrows them all, and stops it.
    let r = client(QuicSpec {
        uni: true,
        ..spec(server.addr, scenario("=a:*3:8:2000;=b:*1:8:-400000;"))
    })
    .await;
    let d = q(&r);
    assert_eq!((d.transactions, d.failed_streams), (4, 0), "{:?}", d.errors);
    assert!(d.download_bytes >= 6000 + 400_000, "{}", d.download_bytes);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zero_size_uni_requests_both_ways() {
    // Our client with a server that answers size 0 with an empty stream
    // (ours, as quinn's does) and with one that opens none.
    let server = Server::start(server_spec(IpAddr::V4(Ipv4Addr::LOCALHOST)));
    let (silent, h) = uni_server(true).await;
    for addr in [server.addr, silent] {
        let r = client(QuicSpec {
            uni: true,
            ..spec(addr, scenario("=a:*1:1000:0;=b:=a:*1:8:1000000;"))
        })
        .await;
        let d = q(&r);
        assert_eq!(
            (d.transactions, d.failed_streams),
            (2, 0),
            "{addr}: {:?}",
            d.errors
        );
        assert_eq!(d.download_bytes, 1_000_000);
    }
    h.abort();
    // Our server answers a size-0 unidirectional request with an empty
    // stream, which quinn perf's client waits for.
    let conn = raw_connection(server.addr).await;
    let mut send = conn.open_uni().await.unwrap();
    send.write_all(&0u64.to_be_bytes()).await.unwrap();
    send.write_all(&[7u8; 992]).await.unwrap();
    send.finish().unwrap();
    let mut reply = tokio::time::timeout(Duration::from_secs(2), conn.accept_uni())
        .await
        .expect("an empty reply stream within 2 s")
        .unwrap();
    assert_eq!(reply.read_to_end(1 << 20).await.unwrap().len(), 0);
    conn.close(0u32.into(), b"");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_uni_reply_of_a_size_nobody_asked_is_an_error() {
    // This server answers every unidirectional request with 1,000 bytes.
    let (addr, h) = uni_server(false).await;
    let r = client(QuicSpec {
        uni: true,
        ..spec(addr, scenario("*1:8:3000;"))
    })
    .await;
    let d = q(&r);
    assert_eq!((d.transactions, d.failed_streams), (0, 1), "{:?}", d.errors);
    assert!(
        d.errors[0].contains("a reply stream of 1000 bytes matches no outstanding request (asked: 3000 B)"),
        "{:?}",
        d.errors
    );
    h.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn media_frames_arrive_on_their_clock() {
    let _one = MEDIA.lock().await;
    let t0 = Instant::now();
    let (r, _) = run(IpAddr::V4(Ipv4Addr::LOCALHOST), |a| {
        spec(a, scenario("=v1:s30:n30:1000:I5000;=a1:d50:n25:200;"))
    })
    .await;
    let d = q(&r);
    assert_eq!(d.failed_streams, 0, "{:?}", d.errors);
    let v = &d.media[0];
    assert_eq!(
        (v.id.as_str(), v.received_frames, v.expected_frames),
        ("v1", 30, 30)
    );
    // 30 frames at 30/s: the last is due 967 ms after the first.
    assert!(t0.elapsed() >= Duration::from_millis(950));
    assert!(v.delay_max_us < 200_000.0, "{v:?}");
    assert_eq!(d.download_bytes, 5000 + 29 * 1000);
    let g = &d.media[1];
    assert_eq!(
        (g.id.as_str(), g.received_frames, g.expected_frames),
        ("a1", 25, 25)
    );
}

/// Opens a bidirectional stream on `conn` and sends a picoquic media
/// request on it (FIN after the header).
async fn media_request(
    conn: &quinn::Connection,
    datagram: bool,
    frequency: u8,
    frames: u32,
    size: u32,
) -> (quinn::SendStream, quinn::RecvStream) {
    let (mut send, recv) = conn.open_bi().await.unwrap();
    let mut header = Vec::new();
    goodput_core::quic::Request::Media(goodput_core::quic::MediaRequest {
        datagram,
        frame_size: size,
        priority: 0,
        frequency,
        frames,
        first_frame_size: size,
    })
    .encode(&mut header);
    send.write_all(&header).await.unwrap();
    send.finish().unwrap();
    (send, recv)
}

/// A media request on a raw stream: its frames' server timestamps (µs).
async fn media_timestamps(server: SocketAddr, frequency: u8, frames: u32, size: u32) -> Vec<u64> {
    let conn = raw_connection(server).await;
    let (_send, mut recv) = media_request(&conn, false, frequency, frames, size).await;
    let body = recv.read_to_end(1 << 24).await.unwrap();
    conn.close(0u32.into(), b"");
    assert_eq!(body.len(), (frames * size) as usize);
    body.chunks(size as usize)
        .map(|f| u64::from_be_bytes(f[..8].try_into().unwrap()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn media_frames_leave_on_time_not_on_the_next_millisecond() {
    let _one = MEDIA.lock().await;
    let server = Server::start(server_spec(IpAddr::V4(Ipv4Addr::LOCALHOST)));
    // 70 frames at 70/s, each stamped by the server as it leaves: how
    // late against the first, from the server's own clock (the client's
    // receive path plays no part). tokio's millisecond timer made the
    // median about a millisecond here (1,084 µs in one run); the
    // timerfd's is well under 300.
    let stamps = media_timestamps(server.addr, 70, 70, 300).await;
    let mut late: Vec<i64> = stamps
        .iter()
        .enumerate()
        .map(|(k, &t)| (t - stamps[0]) as i64 - (k as i64 * 1_000_000 / 70))
        .collect();
    late.sort();
    assert!(late[35] < 300, "median {} µs late: {late:?}", late[35]);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn datagrams_name_their_request_by_its_wire_stream_id() {
    let server = Server::start(server_spec(IpAddr::V4(Ipv4Addr::LOCALHOST)));
    let conn = raw_connection(server.addr).await;
    // Stream 0: a small request; stream 4 (the second bidirectional one):
    // three datagram frames. picoquic reads the stream ID from each frame.
    let (mut send, mut recv) = conn.open_bi().await.unwrap();
    send.write_all(&8u64.to_be_bytes()).await.unwrap();
    send.finish().unwrap();
    recv.read_to_end(100).await.unwrap();
    let (send, _recv) = media_request(&conn, true, 100, 3, 100).await;
    assert_eq!(u64::from(send.id()), 4);
    for k in 0..3u8 {
        let d = tokio::time::timeout(Duration::from_secs(2), conn.read_datagram())
            .await
            .expect("a datagram frame")
            .unwrap();
        // Varints 4 (the stream) and k (the frame), one byte each.
        assert_eq!((d[0], d[1]), (4, k), "{:?}", &d[..4]);
    }
    conn.close(0u32.into(), b"");
    server.stop().await;
}

/// Tests that count or time frame clocks run one at a time.
static MEDIA: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The timerfds this process holds.
fn timerfds() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|l| l.to_string_lossy().contains("timerfd"))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn media_streams_end_with_their_connection() {
    let _one = MEDIA.lock().await;
    let server = Server::start(server_spec(IpAddr::V4(Ipv4Addr::LOCALHOST)));
    let before = timerfds();
    // 20 datagram media requests of 100,000 frames at 1/s, then the
    // client goes away.
    let conn = raw_connection(server.addr).await;
    for _ in 0..20 {
        media_request(&conn, true, 1, 100_000, 100).await;
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while timerfds() < before + 20 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(timerfds(), before + 20, "one frame clock per media stream");
    conn.close(0u32.into(), b"bye");
    // Their frame clocks (and tasks) go with the connection, not after
    // the last of their 100,000 frames.
    let deadline = Instant::now() + Duration::from_secs(3);
    while timerfds() > before && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(timerfds(), before);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_per_second_and_handshakes() {
    let (r, _) = run(IpAddr::V4(Ipv4Addr::LOCALHOST), |a| {
        spec(
            a,
            QuicMode::Requests {
                streams: 10,
                request: 512,
                response: 4000,
            },
        )
    })
    .await;
    let rq = q(&r).requests.clone().unwrap();
    assert!(rq.completed > 100, "{rq:?}");
    assert_eq!(q(&r).download_bytes, rq.completed * 4000);
    assert!(rq.latency.unwrap().p50_us > 0.0);
    let (r, s) = run(IpAddr::V4(Ipv4Addr::LOCALHOST), |a| QuicSpec {
        duration: Duration::from_millis(500),
        ..spec(a, QuicMode::Handshakes)
    })
    .await;
    let h = q(&r).handshakes.clone().unwrap();
    assert!(h.completed > 10 && h.failed == 0, "{h:?}");
    assert_eq!(s.connections, h.completed);
}

/// A quinn client that sends raw bytes on one stream, then FIN.
async fn raw_stream(server: SocketAddr, bytes: &[u8]) -> (Vec<u8>, Option<String>) {
    let conn = raw_connection(server).await;
    let (mut send, mut recv) = conn.open_bi().await.unwrap();
    send.write_all(bytes).await.unwrap();
    send.finish().unwrap();
    let r = tokio::time::timeout(Duration::from_secs(5), recv.read_to_end(1 << 20))
        .await
        .unwrap();
    conn.close(0u32.into(), b"");
    match r {
        Ok(b) => (b, None),
        Err(e) => (Vec::new(), Some(e.to_string())),
    }
}

/// A plain quinn perf connection to `server`, certificate unchecked.
async fn raw_connection(server: SocketAddr) -> quinn::Connection {
    let mut tls =
        rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoCheck))
            .with_no_client_auth();
    tls.alpn_protocols = vec![b"perf".to_vec()];
    let cfg = quinn::ClientConfig::new(Arc::new(
        quinn::crypto::rustls::QuicClientConfig::try_from(tls).unwrap(),
    ));
    let mut ep = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
    ep.set_default_client_config(cfg);
    ep.connect(server, "localhost").unwrap().await.unwrap()
}

#[derive(Debug)]
struct NoCheck;

impl rustls::client::danger::ServerCertVerifier for NoCheck {
    fn verify_server_cert(
        &self,
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &[rustls::pki_types::CertificateDer<'_>],
        _: &rustls::pki_types::ServerName<'_>,
        _: &[u8],
        _: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        _: &[u8],
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        Ok(rustls::client::danger::HandshakeSignatureValid::assertion())
    }
    fn verify_tls13_signature(
        &self,
        _: &[u8],
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        Ok(rustls::client::danger::HandshakeSignatureValid::assertion())
    }
    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        rustls::crypto::ring::default_provider()
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn short_and_malformed_requests_get_a_clean_close() {
    let server = Server::start(server_spec(IpAddr::V4(Ipv4Addr::LOCALHOST)));
    let addr = server.addr;
    // 3 bytes then FIN; an empty stream; a media header with frequency 0.
    for bytes in [
        &[0u8, 0, 1][..],
        &[][..],
        &[0xFF, 0xFF, 0xFF, 0xFE, 0, 0, 1, 0, 0, 0, 0, 0, 1, 0, 0, 1][..],
    ] {
        let (got, err) = raw_stream(addr, bytes).await;
        assert_eq!((got.len(), err), (0, None), "{bytes:?}");
    }
    // The server still works.
    let r = client(spec(addr, scenario("*1:8:1000"))).await;
    assert_eq!(q(&r).transactions, 1);
    let c = server.stop().await;
    assert_eq!(c.short_requests, 3);
}

/// A server that answers every request with `extra` more (or fewer) bytes
/// than asked.
async fn liar(extra: i64) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let ep = quinn::Endpoint::server(test_server_config(), "127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = ep.local_addr().unwrap();
    let h = tokio::spawn(async move {
        if let Some(i) = ep.accept().await {
            let conn = i.await.unwrap();
            while let Ok((mut send, mut recv)) = conn.accept_bi().await {
                let req = recv.read_to_end(1 << 20).await.unwrap();
                let n = u64::from_be_bytes(req[..8].try_into().unwrap());
                let give = (n as i64 + extra).max(0) as usize;
                send.write_all(&vec![b'0'; give]).await.unwrap();
                send.finish().unwrap();
            }
        }
    });
    (addr, h)
}

/// A server for unidirectional requests only: with `honest_zero`, it
/// answers size 0 with no stream (as the draft's text reads) and every
/// other size exactly; without, every request with 1,000 bytes.
async fn uni_server(honest_zero: bool) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let ep = quinn::Endpoint::server(test_server_config(), "127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = ep.local_addr().unwrap();
    let h = tokio::spawn(async move {
        while let Some(i) = ep.accept().await {
            let conn = i.await.unwrap();
            tokio::spawn(async move {
                while let Ok(mut recv) = conn.accept_uni().await {
                    let conn = conn.clone();
                    tokio::spawn(async move {
                        let req = recv.read_to_end(1 << 20).await.unwrap();
                        let n = u64::from_be_bytes(req[..8].try_into().unwrap());
                        let give = match (honest_zero, n) {
                            (true, 0) => return,
                            (true, n) => n as usize,
                            (false, _) => 1000,
                        };
                        let mut send = conn.open_uni().await.unwrap();
                        send.write_all(&vec![b'0'; give]).await.unwrap();
                        send.finish().unwrap();
                        let _ = send.stopped().await;
                    });
                }
            });
        }
    });
    (addr, h)
}

/// A perf server configuration with a fresh self-signed certificate.
fn test_server_config() -> quinn::ServerConfig {
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    let key = rustls::pki_types::PrivateKeyDer::try_from(cert.key_pair.serialize_der()).unwrap();
    let mut tls =
        rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![cert.cert.der().clone()], key)
            .unwrap();
    tls.alpn_protocols = vec![b"perf".to_vec()];
    quinn::ServerConfig::with_crypto(Arc::new(
        quinn::crypto::rustls::QuicServerConfig::try_from(tls).unwrap(),
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_byte_counts_are_errors() {
    for (extra, word) in [(10, "too many"), (-10, "too few")] {
        let (addr, h) = liar(extra).await;
        let r = client(spec(addr, scenario("*1:8:1000"))).await;
        let d = q(&r);
        assert_eq!((d.transactions, d.failed_streams), (0, 1), "{extra}");
        assert!(d.errors[0].contains(word), "{:?}", d.errors);
        assert!(!r.connections[0].outcome.is_success());
        h.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reference_examples_run_to_the_right_byte_counts() {
    // (scenario, transactions, upload bytes, download bytes)
    let cases: &[(&str, u64, u64, u64)] = &[
        ("*1:397:5000000;", 1, 397, 5_000_000),
        ("* 100:256 : 12345;", 100, 25_600, 1_234_500),
        ("=b1:*1:397:1000000;", 1, 397, 1_000_000),
        ("= b1:256 : 12345; = b2:=b1: 256 : 12345;", 2, 512, 24_690),
        // 150 frames in groups of 30: five streams, 20 kB first frames.
        (
            "=v1:s30:n150:2000:G30:I20000;",
            5,
            5 * 16,
            5 * 20_000 + 145 * 2000,
        ),
        ("=a1:d50:n250:100;", 1, 16, 0),
    ];
    let server = Server::start(server_spec(IpAddr::V4(Ipv4Addr::LOCALHOST)));
    let addr = server.addr;
    let runs = cases.iter().map(|&(s, ..)| {
        let sp = spec(addr, scenario(s));
        tokio::spawn(async move { client(sp).await })
    });
    let runs: Vec<_> = runs.collect();
    for (&(s, tx, up, down), r) in cases.iter().zip(runs) {
        let r = r.await.unwrap();
        let d = q(&r);
        assert_eq!(
            (d.transactions, d.failed_streams, d.upload_bytes, d.download_bytes),
            (tx, 0, up, down),
            "{s}: {:?}",
            d.errors
        );
        for m in &d.media {
            assert_eq!(m.received_frames, m.expected_frames, "{s}: {m:?}");
        }
    }
    server.stop().await;
}

/// Writes a certificate and key into `dir` (a temporary directory the
/// caller holds).
fn write_cert(
    dir: &std::path::Path,
    name: &str,
    alg: &'static rcgen::SignatureAlgorithm,
) -> (std::path::PathBuf, std::path::PathBuf) {
    let key = rcgen::KeyPair::generate_for(alg).unwrap();
    let params = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    let cert = params.self_signed(&key).unwrap();
    let (c, k) = (dir.join(format!("{name}.crt")), dir.join(format!("{name}.key")));
    std::fs::write(&c, cert.pem()).unwrap();
    std::fs::write(&k, key.serialize_pem()).unwrap();
    (c, k)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificates_from_files_are_verified_with_the_ca() {
    let dir = tempfile::tempdir().unwrap();
    for (name, alg) in [
        ("ed25519", &rcgen::PKCS_ED25519),
        ("p384", &rcgen::PKCS_ECDSA_P384_SHA384),
    ] {
        let (cert, key) = write_cert(dir.path(), name, alg);
        let server = Server::start(QuicServerSpec {
            cert_key: Some((cert.clone(), key)),
            ..server_spec(IpAddr::V4(Ipv4Addr::LOCALHOST))
        });
        let addr = server.addr;
        let ok = client(QuicSpec {
            trust: Trust::CaFile(cert.clone()),
            ..spec(addr, scenario("*1:8:1000"))
        })
        .await;
        assert_eq!(q(&ok).transactions, 1, "{name}: {:?}", q(&ok).errors);
        // The wrong name fails the handshake.
        let bad = client(QuicSpec {
            trust: Trust::CaFile(cert),
            server_name: "example.org".into(),
            ..spec(addr, scenario("*1:8:1000"))
        })
        .await;
        assert_eq!(q(&bad).transactions, 0);
        assert!(q(&bad).errors[0].contains("handshake"), "{:?}", q(&bad).errors);
        server.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_over_the_per_client_limit_are_refused() {
    let server = Server::start(QuicServerSpec {
        max_per_client: 1,
        ..server_spec(IpAddr::V4(Ipv4Addr::LOCALHOST))
    });
    let addr = server.addr;
    let r = client(QuicSpec {
        connections: 3,
        ..spec(addr, QuicMode::DownloadFor(Duration::from_millis(500)))
    })
    .await;
    assert_eq!(q(&r).transactions, 1, "{:?}", q(&r).errors);
    assert_eq!(r.connections.iter().filter(|c| c.outcome.is_success()).count(), 1);
    let c = server.stop().await;
    assert_eq!((c.connections, c.refused_connections), (1, 2));
}
