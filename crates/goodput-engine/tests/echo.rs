//! The echo load test against real loopback servers: goodput's echo
//! service, and test servers that corrupt, cut short or refuse, so every
//! count can be checked exactly.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use goodput_core::result::{Outcome, TestResult};
use goodput_engine::echo::{run_echo, EchoSpec, Hold};
use goodput_engine::services::bind_services;
use goodput_engine::{CancellationToken, NullObserver, Observer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

fn spec(target: SocketAddr) -> EchoSpec {
    EchoSpec {
        target,
        connections: 20,
        batch_size: None,
        batch_delay: Duration::from_millis(10),
        messages: 5,
        message_size: 100,
        message_interval: Duration::from_millis(5),
        send_after_recv: false,
        sync_connect: false,
        hold: Hold::No,
        connect_timeout: Duration::from_secs(5),
        reply_timeout: Duration::from_secs(2),
        status_interval: Duration::from_millis(100),
        max_records: 10_000,
        tls: None,
        preallocate: false,
    }
}

async fn goodput_echo() -> (
    SocketAddr,
    CancellationToken,
    tokio::task::JoinHandle<goodput_engine::services::ServiceCounters>,
) {
    let s = bind_services(&[], &["127.0.0.1:0".parse().unwrap()], &[], None).unwrap();
    let addr = s.echo_addrs()[0];
    let cancel = CancellationToken::new();
    let task = tokio::spawn(s.run(
        cancel.clone(),
        goodput_engine::admission::Admission::new(goodput_engine::admission::AdmissionLimits::unlimited()),
    ));
    (addr, cancel, task)
}

/// A test echo server: `act(connection, byte offset, chunk)` may change
/// the chunk or return `None` to close the connection.
async fn odd_server(act: fn(u64, u64, &mut Vec<u8>) -> Option<()>) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let n = Arc::new(AtomicU64::new(0));
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let conn = n.fetch_add(1, Ordering::Relaxed);
            tokio::spawn(async move {
                let mut off = 0u64;
                let mut buf = vec![0u8; 4096];
                loop {
                    let k = match s.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(k) => k,
                    };
                    let mut chunk = buf[..k].to_vec();
                    let at = off;
                    off += k as u64;
                    if act(conn, at, &mut chunk).is_none() {
                        break;
                    }
                    if s.write_all(&chunk).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    addr
}

async fn run(s: EchoSpec) -> TestResult {
    run_echo(s, &mut NullObserver, CancellationToken::new())
        .await
        .unwrap()
}

#[tokio::test]
async fn every_message_echoed_by_goodput_echo_service() {
    let (addr, cancel, task) = goodput_echo().await;
    let r = run(spec(addr)).await;
    let d = r.echo().unwrap();
    assert_eq!(
        (d.established, d.sent, d.echoed, d.mismatched, d.short, d.missing),
        (20, 100, 100, 0, 0, 0)
    );
    let rt = d.round_trip.unwrap();
    assert_eq!(rt.count, 100);
    assert!(rt.min_us > 0.0 && rt.p50_us <= rt.p99_us && rt.p99_us <= rt.max_us);
    assert_eq!(d.connect_time.unwrap().count, 20);
    assert_eq!(r.summary.successful, 20);
    assert_eq!(r.summary.sent_bytes, 20 * 5 * 100);
    assert_eq!(r.summary.received_bytes, 20 * 5 * 100);
    cancel.cancel();
    let c = task.await.unwrap();
    assert_eq!((c.echo_connections, c.echo_bytes), (20, 10_000));
}

/// One corrupted byte in the third message of every connection: exactly
/// one mismatched message per connection.
#[tokio::test]
async fn corrupted_echoes_are_counted_per_message() {
    let addr = odd_server(|_, at, chunk| {
        // Byte 250 of the stream is in the third 100-byte message.
        if (at..at + chunk.len() as u64).contains(&250) {
            chunk[(250 - at) as usize] ^= 0x55;
        }
        Some(())
    })
    .await;
    let r = run(spec(addr)).await;
    let d = r.echo().unwrap();
    assert_eq!((d.sent, d.echoed, d.mismatched), (100, 100, 20));
    assert_eq!(r.summary.data_errors, 20);
    assert!(r
        .connections
        .iter()
        .all(|c| matches!(c.outcome, Outcome::ProtocolError { .. })));
}

/// A server that stops echoing after 250 bytes: two messages back, one
/// short, two missing, per connection.
#[tokio::test]
async fn short_and_missing_echoes_are_counted() {
    let addr = odd_server(|_, at, chunk| {
        if at >= 250 {
            return None;
        }
        chunk.truncate((250 - at).min(chunk.len() as u64) as usize);
        Some(())
    })
    .await;
    let mut s = spec(addr);
    s.connections = 4;
    s.message_interval = Duration::from_millis(20);
    let r = run(s).await;
    let d = r.echo().unwrap();
    assert_eq!(d.echoed, 8, "{d:?}");
    assert_eq!(d.short, 4, "{d:?}");
    // The server closed on reading the fourth message: per connection the
    // fourth (and the fifth, if the writer got to it first) went unanswered.
    assert!((16..=20).contains(&d.sent), "{d:?}");
    assert!((4..=8).contains(&d.missing), "{d:?}");
    assert_eq!(d.missing, d.sent - 12, "{d:?}");
    assert_eq!(r.summary.network_errors, 4);
}

#[tokio::test]
async fn refused_connections_are_counted_by_kind() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut s = spec(SocketAddr::from(([127, 0, 0, 1], port)));
    s.connections = 7;
    let r = run(s).await;
    let d = r.echo().unwrap();
    assert_eq!((d.established, d.refused, d.sent), (0, 7, 0));
    assert_eq!(r.summary.network_errors, 7);
}

/// Closed loop: each message waits for the previous echo plus the interval,
/// so 5 messages at 30 ms take at least 4 × 30 ms.
#[tokio::test]
async fn send_after_recv_paces_from_each_echo() {
    let (addr, cancel, _task) = goodput_echo().await;
    let mut s = spec(addr);
    s.connections = 2;
    s.send_after_recv = true;
    s.message_interval = Duration::from_millis(30);
    let t = Instant::now();
    let r = run(s).await;
    assert!(t.elapsed() >= Duration::from_millis(120));
    assert_eq!(r.echo().unwrap().echoed, 10);
    cancel.cancel();
}

#[derive(Default)]
struct Notes(Vec<String>);

impl Observer for Notes {
    fn on_interval(&mut self, _: &goodput_core::result::Interval) {}
    fn on_connection(&mut self, _: &goodput_core::result::ConnectionRecord) {}
    fn on_notice(&mut self, text: &str) {
        self.0.push(text.to_owned());
    }
}

/// Batches report progress; --hold-for keeps every connection open after
/// all are done; connect-only runs send nothing.
#[tokio::test]
async fn batches_hold_and_connect_only() {
    let (addr, cancel, task) = goodput_echo().await;
    let mut s = spec(addr);
    s.connections = 10;
    s.messages = 0;
    s.batch_size = Some(3);
    s.batch_delay = Duration::from_millis(20);
    s.sync_connect = true;
    s.hold = Hold::For(Duration::from_millis(300));
    let mut notes = Notes::default();
    let t = Instant::now();
    let r = run_echo(s, &mut notes, CancellationToken::new()).await.unwrap();
    assert!(t.elapsed() >= Duration::from_millis(300 + 3 * 20));
    let batches: Vec<_> = notes.0.iter().filter(|n| n.starts_with("batch ")).collect();
    assert_eq!(batches.len(), 3, "{:?}", notes.0);
    assert!(
        batches[0].starts_with("batch 1: 3 connections started"),
        "{batches:?}"
    );
    assert!(notes.0.iter().any(|n| n.contains("holding them open")));
    let d = r.echo().unwrap();
    assert_eq!((d.established, d.sent), (10, 0));
    assert_eq!(r.summary.successful, 10);
    cancel.cancel();
    assert_eq!(task.await.unwrap().echo_connections, 10);
}

async fn tls_echo(
    cert_key: Option<(&std::path::Path, &std::path::Path)>,
) -> (
    SocketAddr,
    CancellationToken,
    tokio::task::JoinHandle<goodput_engine::services::ServiceCounters>,
) {
    let cfg = goodput_engine::tls::server_config(cert_key).unwrap();
    let s = bind_services(&[], &[], &["127.0.0.1:0".parse().unwrap()], Some(cfg)).unwrap();
    let addr = s.echo_tls_addrs()[0];
    let cancel = CancellationToken::new();
    let task = tokio::spawn(s.run(
        cancel.clone(),
        goodput_engine::admission::Admission::new(goodput_engine::admission::AdmissionLimits::unlimited()),
    ));
    (addr, cancel, task)
}

fn tls_spec(addr: SocketAddr, trust: goodput_engine::tls::Trust, name: &str) -> EchoSpec {
    let mut s = spec(addr);
    s.connections = 5;
    s.tls = Some((
        goodput_engine::tls::client_config(&trust).unwrap(),
        goodput_engine::tls::server_name(name).unwrap(),
    ));
    s
}

/// TLS echo with the generated self-signed certificate, client --insecure.
#[tokio::test]
async fn tls_echo_with_a_generated_certificate() {
    let (addr, cancel, task) = tls_echo(None).await;
    let mut s = tls_spec(addr, goodput_engine::tls::Trust::Anything, "localhost");
    s.preallocate = true;
    let r = run(s).await;
    let d = r.echo().unwrap();
    assert_eq!((d.established, d.echoed, d.mismatched), (5, 25, 0));
    cancel.cancel();
    let c = task.await.unwrap();
    assert_eq!(
        (c.echo_connections, c.echo_bytes, c.tls_handshake_failures),
        (5, 2500, 0)
    );
}

/// A certificate from --cert/--key signed by a CA the client trusts (--ca);
/// a name the certificate does not carry fails every handshake.
#[tokio::test]
async fn tls_echo_with_a_ca_and_sni_checks() {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path();
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let leaf_key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["echo.test".to_owned()])
        .unwrap()
        .signed_by(&leaf_key, &ca, &ca_key)
        .unwrap();
    let (ca_pem, cert_pem, key_pem) = (dir.join("ca.pem"), dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&ca_pem, ca.pem()).unwrap();
    std::fs::write(&cert_pem, leaf.pem()).unwrap();
    std::fs::write(&key_pem, leaf_key.serialize_pem()).unwrap();

    let (addr, cancel, task) = tls_echo(Some((&cert_pem, &key_pem))).await;
    let trust = goodput_engine::tls::Trust::CaFile(ca_pem.clone());
    let d = run(tls_spec(addr, trust.clone(), "echo.test"))
        .await
        .echo()
        .cloned()
        .unwrap();
    assert_eq!((d.established, d.echoed), (5, 25));
    let bad = run(tls_spec(addr, trust, "other.test")).await;
    let d = bad.echo().unwrap();
    assert_eq!((d.established, d.other_failures), (0, 5));
    assert_eq!(bad.summary.network_errors, 5);
    cancel.cancel();
    let c = task.await.unwrap();
    assert_eq!(c.tls_handshake_failures, 5);
}

/// A server that echoes the first message and then takes every byte
/// without answering: each connection fails on the reply timeout, in the
/// open loop and the closed, however the reader and the writer were
/// interleaved when the echo came back.
#[tokio::test]
async fn a_server_that_stops_answering_times_out() {
    let addr = odd_server(|_, at, chunk| {
        chunk.truncate(100u64.saturating_sub(at).min(chunk.len() as u64) as usize);
        Some(())
    })
    .await;
    for closed_loop in [false, true] {
        let mut s = spec(addr);
        s.connections = 3;
        s.send_after_recv = closed_loop;
        s.reply_timeout = Duration::from_millis(300);
        let t = Instant::now();
        let r = tokio::time::timeout(Duration::from_secs(10), run(s))
            .await
            .unwrap_or_else(|_| panic!("closed loop {closed_loop}: no reply timeout in 10 s"));
        let d = r.echo().unwrap();
        let sent = if closed_loop { 3 * 2 } else { 3 * 5 };
        assert_eq!(
            (d.established, d.timed_out, d.echoed, d.sent, d.missing),
            (3, 3, 3, sent, sent - 3),
            "closed loop {closed_loop}: {d:?}"
        );
        assert_eq!(r.summary.network_errors, 3);
        assert!(t.elapsed() >= Duration::from_millis(300), "{:?}", t.elapsed());
    }
}

/// One connection, closed loop, back to back (the latency test): the
/// messages run on a thread of their own with blocking calls, and every
/// count is kept as on the async path.
fn back_to_back(addr: SocketAddr, messages: u64) -> EchoSpec {
    let mut s = spec(addr);
    s.connections = 1;
    s.messages = messages;
    s.message_size = 64;
    s.message_interval = Duration::ZERO;
    s.send_after_recv = true;
    s
}

#[tokio::test]
async fn back_to_back_closed_loop_counts_every_echo() {
    let (addr, cancel, task) = goodput_echo().await;
    let r = run(back_to_back(addr, 2000)).await;
    let d = r.echo().unwrap();
    assert_eq!(
        (
            d.established,
            d.sent,
            d.echoed,
            d.mismatched,
            d.short,
            d.missing,
            d.extra_bytes
        ),
        (1, 2000, 2000, 0, 0, 0, 0)
    );
    assert_eq!(d.round_trip.unwrap().count, 2000);
    assert_eq!(
        r.intervals
            .iter()
            .map(|i| i.echo.as_ref().unwrap().echoed)
            .sum::<u64>(),
        2000
    );
    assert_eq!(
        (r.summary.sent_bytes, r.summary.received_bytes),
        (128_000, 128_000)
    );
    assert!(matches!(r.connections[0].outcome, Outcome::Succeeded));
    cancel.cancel();
    let c = task.await.unwrap();
    assert_eq!((c.echo_connections, c.echo_bytes), (1, 128_000));
}

/// A byte changed in the fifth message: that message alone is counted as
/// mismatched, and the connection ends with a data error.
#[tokio::test]
async fn back_to_back_counts_a_corrupted_echo() {
    let addr = odd_server(|_, at, chunk| {
        if (at..at + chunk.len() as u64).contains(&(4 * 64 + 10)) {
            chunk[(4 * 64 + 10 - at) as usize] ^= 0x01;
        }
        Some(())
    })
    .await;
    let r = run(back_to_back(addr, 50)).await;
    let d = r.echo().unwrap();
    assert_eq!((d.sent, d.echoed, d.mismatched), (50, 50, 1));
    assert!(matches!(r.connections[0].outcome, Outcome::ProtocolError { .. }));
    assert_eq!(r.summary.data_errors, 1);
}

/// A server that answers the first message and then no more: the second
/// waits out the reply timeout, counted as timed out and missing.
#[tokio::test]
async fn back_to_back_times_out_on_a_silent_server() {
    let addr = odd_server(|_, at, chunk| {
        chunk.truncate(64u64.saturating_sub(at).min(chunk.len() as u64) as usize);
        Some(())
    })
    .await;
    let mut s = back_to_back(addr, 10);
    s.reply_timeout = Duration::from_millis(300);
    let t = Instant::now();
    let r = tokio::time::timeout(Duration::from_secs(10), run(s))
        .await
        .unwrap();
    let d = r.echo().unwrap();
    assert_eq!((d.timed_out, d.sent, d.echoed, d.missing), (1, 2, 1, 1), "{d:?}");
    assert!(t.elapsed() >= Duration::from_millis(300), "{:?}", t.elapsed());
    assert_eq!(r.summary.network_errors, 1);
}

/// Stopping the run wakes the blocked thread at once: the connection is
/// aborted (not failed) long before its 10 s reply timeout.
#[tokio::test]
async fn back_to_back_stops_at_once() {
    let addr = odd_server(|_, _, chunk| {
        chunk.clear();
        Some(())
    })
    .await;
    let mut s = back_to_back(addr, 10);
    s.reply_timeout = Duration::from_secs(10);
    let cancel = CancellationToken::new();
    let stopper = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        stopper.cancel();
    });
    let t = Instant::now();
    let r = run_echo(s, &mut NullObserver, cancel).await.unwrap();
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    assert_eq!(r.end, goodput_core::result::EndReason::Interrupted);
    let d = r.echo().unwrap();
    assert_eq!((d.sent, d.echoed, d.timed_out), (1, 0, 0), "{d:?}");
    assert!(matches!(r.connections[0].outcome, Outcome::Aborted { .. }));
    assert_eq!(r.summary.network_errors, 0);
}

/// --hold-for keeps the connection open after its messages on this path
/// too, and it closes cleanly after.
#[tokio::test]
async fn back_to_back_holds_the_connection() {
    let (addr, cancel, task) = goodput_echo().await;
    let mut s = back_to_back(addr, 100);
    s.hold = Hold::For(Duration::from_millis(300));
    let t = Instant::now();
    let r = run(s).await;
    assert!(t.elapsed() >= Duration::from_millis(300));
    let d = r.echo().unwrap();
    assert_eq!((d.sent, d.echoed), (100, 100));
    assert_eq!(r.summary.successful, 1);
    cancel.cancel();
    assert_eq!(task.await.unwrap().echo_bytes, 6400);
}
