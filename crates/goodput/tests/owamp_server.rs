//! `goodput server --owamp --twamp` driven by a test client built on the
//! core codec and the engine's handshake: TWAMP sessions reflected with
//! the right fields in every mode, OWAMP sessions received and fetched,
//! TCP and UDP sharing port 862, and every refusal's Accept code and
//! counted reason.

mod common;
mod owamp_client;

use std::time::Duration;

use common::*;
use goodput_core::owamp::crypto::TestKeys;
use goodput_core::owamp::packet::{self, SenderFields};
use goodput_core::owamp::Mode;
use owamp_client::*;

/// Sends `n` packets of a TWAMP session from `sock` and returns the
/// reflector's answers, decoded, with their lengths.
fn exchange(
    sock: &std::net::UdpSocket,
    to: u16,
    mode: Mode,
    keys: Option<&TestKeys>,
    n: u32,
    padding: usize,
) -> Vec<(SenderFields, packet::ReflectorFields, usize, usize)> {
    let mut got = Vec::new();
    for i in 0..n {
        let f = SenderFields {
            seq: 100 + i,
            timestamp: ntp_now(),
            error: 0x0001,
        };
        let mut b = vec![0xA5u8; packet::sender_header(mode) + padding];
        assert!(packet::write_sender(mode, keys, &f, &mut b));
        sock.send_to(&b, (LOOPBACK, to)).unwrap();
        let mut r = [0u8; 2048];
        let (len, _) = sock.recv_from(&mut r).expect("an answer from the reflector");
        let back = packet::read_reflector(mode, keys, &mut r[..len]).expect("a valid reflector packet");
        got.push((f, back, b.len(), len));
    }
    got
}

#[test]
fn twamp_reflects_in_every_mode_with_its_own_sequence_numbers() {
    let srv = start("owamp-server-reflect", &[]);
    let rt = runtime();
    for mode in Mode::ALL {
        rt.block_on(async {
            let mut c = connect(srv.twamp, mode).await.unwrap();
            let sock = test_socket();
            let port = sock.local_addr().unwrap().port();
            let a = request(&mut c, &tw_request(port, 20), &[]).await.unwrap();
            assert_eq!(a.accept, 0, "{mode}");
            assert_ne!(a.port, 0);
            assert_eq!(
                &a.sid[..4],
                &[127, 0, 0, 1],
                "the SID starts with the receiver's address"
            );
            assert_eq!(start_sessions(&mut c).await.unwrap(), 0);
            let keys = c
                .keys
                .as_ref()
                .filter(|_| mode.is_secured())
                .map(|k| TestKeys::derive(k, &a.sid));
            let got = exchange(&sock, a.port, mode, keys.as_ref(), 5, 20);
            for (i, (sent, back, sent_len, len)) in got.iter().enumerate() {
                assert_eq!(back.seq, i as u32, "{mode}: the reflector's own numbers");
                assert_eq!(back.sender_seq, sent.seq);
                assert_eq!(back.sender_timestamp, sent.timestamp);
                assert_eq!(back.sender_error, sent.error);
                assert_eq!(back.sender_ttl, 255, "the TTL the reflector received");
                assert!(back.receive_timestamp >= sent.timestamp && back.timestamp >= back.receive_timestamp);
                assert_eq!(*len, packet::reflected_len(mode, *sent_len), "{mode}");
            }
            tw_stop(&mut c).await.unwrap();
        });
    }
    let (out, doc) = srv.stop();
    assert!(out.contains("TWAMP server"), "{out}");
    let t = &doc["twamp_server"];
    assert_eq!(t["sessions"], 3, "{t}");
    assert_eq!(t["connections"], 3, "{t}");
    assert_eq!(t["packets_reflected"], 15, "{t}");
    assert_eq!(t["packets_ignored"], 0, "{t}");
}

#[test]
fn tcp_and_udp_share_the_twamp_port_number() {
    let p = free_tcp_port();
    let srv = start_on(
        "owamp-server-862",
        free_tcp_port(),
        p,
        &[
            "--stamp",
            "--stamp-listen",
            "127.0.0.1",
            "--stamp-port",
            &p.to_string(),
        ],
    );
    wait_udp_bound(p);
    // STAMP on UDP p.
    let u = test_socket();
    let mut req = [0u8; 44];
    req[3] = 7;
    u.send_to(&req, (LOOPBACK, p)).unwrap();
    let mut back = [0u8; 128];
    let (n, from) = u
        .recv_from(&mut back)
        .expect("the STAMP reflector answers on UDP");
    assert_eq!((n, from.port(), back[3]), (44, p, 7));
    // TWAMP-Control on TCP p.
    runtime().block_on(async {
        let mut c = connect(p, Mode::Open).await.unwrap();
        let sock = test_socket();
        let a = request(&mut c, &tw_request(sock.local_addr().unwrap().port(), 0), &[])
            .await
            .unwrap();
        assert_eq!(a.accept, 0);
        assert_eq!(start_sessions(&mut c).await.unwrap(), 0);
        assert_eq!(exchange(&sock, a.port, Mode::Open, None, 2, 0).len(), 2);
    });
    let (_, doc) = srv.stop();
    assert_eq!(doc["stamp_reflector"]["reflected"], 1);
    assert_eq!(doc["twamp_server"]["packets_reflected"], 2);
}

#[test]
fn refusals_carry_the_accept_code_clients_understand() {
    let srv = start("owamp-server-refusals", &["--ow-twamp-max-sessions", "2"]);
    let rt = runtime();
    rt.block_on(async {
        let mut c = connect(srv.twamp, Mode::Open).await.unwrap();
        let base = tw_request(9999, 0);
        let cases: Vec<(&str, goodput_core::owamp::control::RequestSession, u8)> = vec![
            (
                "padding",
                {
                    let mut r = base.clone();
                    r.padding = 100_000;
                    r
                },
                4,
            ),
            (
                "timeout",
                {
                    let mut r = base.clone();
                    r.timeout = 3600 << 32;
                    r
                },
                4,
            ),
            (
                "start ahead",
                {
                    let mut r = base.clone();
                    r.start_time += 3600 << 32;
                    r
                },
                4,
            ),
            (
                "start long past",
                {
                    let mut r = base.clone();
                    r.start_time -= (7 * 86_400) << 32;
                    r
                },
                4,
            ),
            (
                "someone else",
                {
                    let mut r = base.clone();
                    r.sender = "192.0.2.7".parse().unwrap();
                    r
                },
                1,
            ),
            (
                "type-p",
                {
                    let mut r = base.clone();
                    r.type_p = 0x4000_0000;
                    r
                },
                3,
            ),
            ("first", base.clone(), 0),
            ("second", base.clone(), 0),
            ("third", base.clone(), 5),
        ];
        for (what, r, code) in cases {
            let a = request(&mut c, &r, &[]).await.unwrap();
            assert_eq!(a.accept, code, "{what}");
            if code != 0 {
                assert_eq!((a.port, a.sid), (0, [0; 16]), "{what}: a refusal names no port");
            }
        }
        let mut c = connect(srv.owamp, Mode::Open).await.unwrap();
        let too_many = ow_request(9999, 10_000_000, 0);
        assert_eq!(request(&mut c, &too_many, &[slot(100)]).await.unwrap().accept, 4);
        let too_fast = ow_request(9999, 1000, 1000);
        let fast =
            goodput_core::owamp::control::Slot::from_ns(goodput_core::owamp::control::SlotKind::Fixed, 1_000);
        assert_eq!(request(&mut c, &too_fast, &[fast]).await.unwrap().accept, 4);
    });
    let (_, doc) = srv.stop();
    let t = &doc["twamp_server"];
    for (k, v) in [
        ("refused_padding", 1),
        ("refused_timeout", 1),
        ("refused_start_time", 2),
        ("refused_address", 1),
        ("refused_unsupported", 1),
        ("refused_sessions", 1),
        ("sessions", 2),
    ] {
        assert_eq!(t[k], v, "{k}: {t}");
    }
    let o = &doc["owamp_server"];
    assert_eq!(o["refused_packets"], 1, "{o}");
    assert_eq!(o["refused_bandwidth"], 1, "{o}");
}

#[test]
fn an_owamp_receive_session_is_kept_and_fetched_as_owampd_sends_it() {
    let srv = start("owamp-server-fetch", &[]);
    let rt = runtime();
    for mode in Mode::ALL {
        rt.block_on(async {
            let mut c = connect(srv.owamp, mode).await.unwrap();
            let sock = test_socket();
            let port = sock.local_addr().unwrap().port();
            let req = ow_request(port, 10, 20);
            let a = request(&mut c, &req, &[slot(10)]).await.unwrap();
            assert_eq!(a.accept, 0, "{mode}");
            assert_eq!(&a.sid[..4], &[127, 0, 0, 1]);
            assert_eq!(start_sessions(&mut c).await.unwrap(), 0);
            let keys = c
                .keys
                .as_ref()
                .filter(|_| mode.is_secured())
                .map(|k| TestKeys::derive(k, &a.sid));
            let mut sent = Vec::new();
            // Packet 3 never goes; packet 5 goes twice.
            for seq in [0u32, 1, 2, 4, 5, 5, 6, 7, 8, 9] {
                let f = SenderFields {
                    seq,
                    timestamp: ntp_now(),
                    error: 0x0001,
                };
                let mut b = vec![0u8; packet::sender_header(mode) + 20];
                assert!(packet::write_sender(mode, keys.as_ref(), &f, &mut b));
                sock.send_to(&b, (LOOPBACK, a.port)).unwrap();
                sent.push(f);
            }
            // A stranger's packet is not logged.
            let stranger = test_socket();
            let mut b = vec![0u8; packet::sender_header(mode) + 20];
            packet::write_sender(mode, keys.as_ref(), &sent[0], &mut b);
            stranger.send_to(&b, (LOOPBACK, a.port)).unwrap();
            tokio::time::sleep(Duration::from_millis(200)).await;
            ow_stop(&mut c, a.sid, 10).await.unwrap();
            assert_eq!(
                read_stop(&mut c).await.unwrap(),
                vec![],
                "the server sent in no session"
            );
            let got = fetch(&mut c, a.sid).await.unwrap().expect("the log is kept");
            assert_eq!((got.ack.finished, got.ack.next_seq, got.ack.skips), (true, 10, 0));
            assert_eq!(got.ack.records, 11, "ten sent, one twice, one lost");
            assert_eq!(got.records.len(), 11);
            assert_eq!(got.request.sid, a.sid, "the request comes back with its SID");
            assert_eq!(got.request.receiver_port, a.port, "and the receiver's port");
            assert_eq!((got.request.packets, got.request.padding), (10, 20));
            assert_eq!(got.slots, vec![slot(10)]);
            let lost: Vec<u32> = got
                .records
                .iter()
                .filter(|r| r.is_lost())
                .map(|r| r.seq)
                .collect();
            assert_eq!(lost, vec![3], "{mode}");
            assert_eq!(
                got.records.iter().filter(|r| r.seq == 5).count(),
                2,
                "duplicates kept"
            );
            for r in got.records.iter().filter(|r| !r.is_lost()) {
                assert!(
                    sent.iter()
                        .any(|f| (f.seq, f.timestamp, f.error) == (r.seq, r.send_time, r.send_err)),
                    "the record carries what was sent: {r:?}"
                );
                assert!(r.recv_time >= r.send_time);
                assert_eq!(r.ttl, 255);
            }
            // An unknown session is refused.
            assert!(fetch(&mut c, [9; 16]).await.unwrap().is_none());
        });
    }
    let (_, doc) = srv.stop();
    let o = &doc["owamp_server"];
    assert_eq!(o["sessions"], 3, "{o}");
    assert_eq!(o["packets_received"], 30, "{o}");
    assert_eq!(o["packets_ignored"], 3, "{o}");
    assert_eq!(o["fetches"], 3, "{o}");
    assert_eq!(o["fetches_refused"], 3, "{o}");
}

#[test]
fn the_owamp_server_sends_to_the_clients_receiver_and_reports_it() {
    let srv = start("owamp-server-send", &[]);
    runtime().block_on(async {
        let mut c = connect(srv.owamp, Mode::Encrypted).await.unwrap();
        let sock = test_socket();
        let mut req = ow_request(0, 5, 0);
        (req.conf_sender, req.conf_receiver) = (true, false);
        req.receiver_port = sock.local_addr().unwrap().port();
        req.sid = [7; 16];
        let a = request(&mut c, &req, &[slot(5)]).await.unwrap();
        assert_eq!((a.accept, a.sid), (0, [7; 16]), "the client's SID is echoed");
        assert_eq!(start_sessions(&mut c).await.unwrap(), 0);
        let keys = TestKeys::derive(c.keys.as_ref().unwrap(), &[7; 16]);
        let mut seqs = Vec::new();
        for _ in 0..5 {
            let mut b = [0u8; 256];
            let (n, from) = sock.recv_from(&mut b).expect("the server's packets");
            assert_eq!((n, from.port()), (48, a.port));
            seqs.push(
                packet::read_sender(Mode::Encrypted, Some(&keys), &mut b[..n])
                    .unwrap()
                    .seq,
            );
        }
        assert_eq!(seqs, vec![0, 1, 2, 3, 4]);
        let mut head = goodput_core::owamp::control::StopHeader {
            accept: 0,
            sessions: 0,
        }
        .encode();
        c.send_blocks(&mut head).await.unwrap();
        c.send_hmac().await.unwrap();
        assert_eq!(read_stop(&mut c).await.unwrap(), vec![([7; 16], 5)]);
    });
    let (_, doc) = srv.stop();
    assert_eq!(doc["owamp_server"]["packets_sent"], 5);
}

#[test]
fn receive_logs_past_the_memory_budget_are_refused_for_now() {
    let srv = start("owamp-server-memory", &["--ow-twamp-max-memory", "512KiB"]);
    runtime().block_on(async {
        let mut c = connect(srv.owamp, Mode::Open).await.unwrap();
        // (10000 + 1024) records of 32 bytes: 352,768 bytes, once.
        let a = request(&mut c, &ow_request(9999, 10_000, 0), &[slot(1)])
            .await
            .unwrap();
        assert_eq!(a.accept, 0);
        let b = request(&mut c, &ow_request(9999, 10_000, 0), &[slot(1)])
            .await
            .unwrap();
        assert_eq!(b.accept, 5, "temporary: the budget frees as logs expire");
    });
    let (_, doc) = srv.stop();
    assert_eq!(doc["owamp_server"]["refused_memory"], 1);
}
