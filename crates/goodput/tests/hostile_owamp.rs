//! Hostile input against `goodput server --owamp --twamp`, run under an
//! address-space limit: absurd counts, paddings, start times and timeouts
//! are refused before anything is allocated by them; truncated, unknown
//! and oversized messages end only their own connection; a silent client
//! loses its place after the idle timeout; the TWAMP reflector sends
//! nothing to a source without an accepted, started session.

mod common;
mod owamp_client;

use std::io::{Read, Write};
use std::net::TcpStream as StdTcp;
use std::time::{Duration, Instant};

use common::*;
use goodput_core::owamp::control::{RequestSession, SetupResponse};
use goodput_core::owamp::packet::{self, SenderFields};
use goodput_core::owamp::Mode;
use owamp_client::*;

/// Peak RSS the server may reach here: an idle server is about 10 MiB; a
/// 2^32-slot or 2^32-packet request honoured would be gigabytes.
const RSS_CEILING_KIB: u64 = 64 * 1024;

fn peak_ok(srv: &OwServer) {
    let peak = proc_kib(srv.child.pid(), "VmHWM");
    assert!(peak > 0 && peak < RSS_CEILING_KIB, "server peak RSS {peak} KiB");
}

/// Connects in open mode by hand: the greeting's modes, then the
/// connection past Server-Start.
fn open_raw(port: u16) -> (StdTcp, u32) {
    let mut s = StdTcp::connect((LOOPBACK, port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut g = [0u8; 64];
    s.read_exact(&mut g).unwrap();
    let modes = u32::from_be_bytes([g[12], g[13], g[14], g[15]]);
    (s, modes)
}

fn set_up_open(s: &mut StdTcp) {
    let mut r = [0u8; SetupResponse::LEN];
    r[3] = 1;
    s.write_all(&r).unwrap();
    let mut start = [0u8; 48];
    s.read_exact(&mut start).unwrap();
    assert_eq!(start[15], 0, "Server-Start accepts");
}

/// Whether the server closed the connection (EOF or reset) within 5 s.
fn closed(s: &mut StdTcp) -> bool {
    let mut b = [0u8; 256];
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        match s.read(&mut b) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock || e.kind() == std::io::ErrorKind::TimedOut =>
            {
                return false
            }
            Err(_) => return true,
        }
    }
    false
}

#[test]
fn absurd_numbers_are_refused_before_they_are_used() {
    let srv = start("hostile-owamp-numbers", &[]);
    let rt = runtime();
    rt.block_on(async {
        // 2^32 - 1 slots: refused (4) and the connection closed, as the
        // slots cannot be skipped without reading them.
        let mut c = connect(srv.owamp, Mode::Encrypted).await.unwrap();
        let mut r = ow_request(9999, 10, 0);
        r.slots = u32::MAX;
        let mut m = r.encode();
        c.send(&mut m).await.unwrap();
        let a: [u8; 48] = c.recv().await.unwrap();
        assert_eq!(a[0], 4, "absurd slot count");
        let mut one = [0u8; 16];
        assert!(c.recv_blocks(&mut one).await.is_err(), "the connection is closed");

        let mut c = connect(srv.owamp, Mode::Open).await.unwrap();
        let bad: Vec<(&str, RequestSession)> = vec![
            ("packets", {
                let mut r = ow_request(9999, u32::MAX, 0);
                r.slots = 1;
                r
            }),
            ("padding", ow_request(9999, 10, u32::MAX)),
            ("timeout", {
                let mut r = ow_request(9999, 10, 0);
                r.timeout = u64::MAX;
                r
            }),
            ("start 0", {
                let mut r = ow_request(9999, 10, 0);
                r.start_time = 0;
                r
            }),
            ("start max", {
                let mut r = ow_request(9999, 10, 0);
                r.start_time = u64::MAX;
                r
            }),
        ];
        for (what, r) in bad {
            let a = request(&mut c, &r, &[slot(100)]).await.unwrap();
            assert_eq!(a.accept, 4, "{what}");
        }
        // A zero gap: an infinite rate.
        let a = request(&mut c, &ow_request(9999, 10, 0), &[slot(0)])
            .await
            .unwrap();
        assert_eq!(a.accept, 4, "a zero gap");
        // TWAMP's own absurdities.
        let mut c = connect(srv.twamp, Mode::Authenticated).await.unwrap();
        let mut r = tw_request(9999, u32::MAX);
        assert_eq!(request(&mut c, &r, &[]).await.unwrap().accept, 4, "padding");
        r.padding = 0;
        r.timeout = u64::MAX;
        assert_eq!(request(&mut c, &r, &[]).await.unwrap().accept, 4, "timeout");
    });
    peak_ok(&srv);
    let (_, doc) = srv.stop();
    let o = &doc["owamp_server"];
    assert_eq!(o["refused_slots"], 1, "{o}");
    assert_eq!(o["refused_packets"], 1, "{o}");
    assert_eq!(o["refused_padding"], 1, "{o}");
    assert_eq!(o["refused_timeout"], 1, "{o}");
    assert_eq!(o["refused_start_time"], 2, "{o}");
    assert_eq!(o["refused_bandwidth"], 1, "{o}");
    assert_eq!(o["sessions"], 0, "{o}");
    let t = &doc["twamp_server"];
    assert_eq!(
        (t["refused_padding"].as_u64(), t["refused_timeout"].as_u64()),
        (Some(1), Some(1))
    );
}

#[test]
fn truncated_unknown_and_oversized_messages_end_only_their_connection() {
    let srv = start("hostile-owamp-messages", &["--ow-twamp-idle-timeout", "1s"]);
    // An unknown command.
    let (mut s, _) = open_raw(srv.owamp);
    set_up_open(&mut s);
    s.write_all(&[9u8; 16]).unwrap();
    assert!(closed(&mut s), "an unknown command closes the connection");
    // A truncated request, then silence: the idle timeout ends it.
    let (mut s, _) = open_raw(srv.twamp);
    set_up_open(&mut s);
    let r = tw_request(9999, 0).encode();
    s.write_all(&r[..40]).unwrap();
    assert!(closed(&mut s), "a truncated request is dropped after the timeout");
    // A megabyte of junk after the set-up.
    let (mut s, _) = open_raw(srv.owamp);
    set_up_open(&mut s);
    let junk = vec![0xEEu8; 1 << 20];
    let _ = s.write_all(&junk);
    assert!(closed(&mut s), "junk closes the connection");
    // A Set-Up-Response asking for a mode never offered, and one cut short.
    let (mut s, _) = open_raw(srv.owamp);
    let mut bad = [0u8; SetupResponse::LEN];
    bad[3] = 0x40;
    s.write_all(&bad).unwrap();
    let mut start = [0u8; 48];
    s.read_exact(&mut start).unwrap();
    assert_eq!(start[15], 1, "a mode not offered is refused at Server-Start");
    let (mut s, _) = open_raw(srv.owamp);
    s.write_all(&[0u8; 100]).unwrap();
    assert!(closed(&mut s), "a short set-up times out");
    // Fetch-Session on TWAMP is no TWAMP command.
    let (mut s, _) = open_raw(srv.twamp);
    set_up_open(&mut s);
    let mut f = [0u8; 48];
    f[0] = 4;
    s.write_all(&f).unwrap();
    assert!(closed(&mut s));
    // The server still serves.
    runtime().block_on(async {
        let mut c = connect(srv.twamp, Mode::Encrypted).await.unwrap();
        let a = request(&mut c, &tw_request(9999, 0), &[]).await.unwrap();
        assert_eq!(a.accept, 0);
    });
    peak_ok(&srv);
    let (_, doc) = srv.stop();
    let (o, t) = (&doc["owamp_server"], &doc["twamp_server"]);
    assert_eq!(o["protocol_errors"], 2, "{o}");
    assert_eq!(o["setup_refused"], 1, "{o}");
    assert_eq!(o["idle_timeouts"], 1, "{o}");
    assert_eq!(t["idle_timeouts"], 1, "{t}");
    assert_eq!(t["protocol_errors"], 1, "{t}");
}

#[test]
fn a_silent_client_loses_its_place_after_the_idle_timeout() {
    let srv = start(
        "hostile-owamp-silent",
        &["--ow-twamp-idle-timeout", "1s", "--ow-twamp-max-per-client", "2"],
    );
    let started = Instant::now();
    // Silent before the set-up, and silent after it.
    let (mut a, modes) = open_raw(srv.owamp);
    assert_eq!(modes, 7);
    let (mut b, _) = open_raw(srv.owamp);
    set_up_open(&mut b);
    // Both places taken: the next one is turned away with no modes.
    let (mut c, modes) = open_raw(srv.owamp);
    assert_eq!(modes, 0, "a third connection from the address is refused");
    assert!(closed(&mut c));
    assert!(closed(&mut a) && closed(&mut b), "silent connections are closed");
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_secs(4),
        "{waited:?}"
    );
    // The places are free again.
    let (_d, modes) = open_raw(srv.owamp);
    assert_eq!(modes, 7, "a place is free once the silent ones are gone");
    peak_ok(&srv);
    let (_, doc) = srv.stop();
    let o = &doc["owamp_server"];
    assert_eq!(o["idle_timeouts"], 2, "{o}");
    assert_eq!(o["busy"], 1, "{o}");
}

#[test]
fn the_reflector_answers_no_source_without_a_started_session() {
    let srv = start("hostile-owamp-reflector", &[]);
    let rt = runtime();
    let send = |from: &std::net::UdpSocket, to: u16| {
        let mut b = vec![0u8; 14];
        let f = SenderFields {
            seq: 1,
            timestamp: ntp_now(),
            error: 1,
        };
        assert!(packet::write_sender(Mode::Open, None, &f, &mut b));
        from.send_to(&b, (LOOPBACK, to)).unwrap();
        let mut r = [0u8; 256];
        from.recv_from(&mut r).ok().map(|(n, _)| n)
    };
    rt.block_on(async {
        let mut c = connect(srv.twamp, Mode::Open).await.unwrap();
        let sock = test_socket();
        let a = request(&mut c, &tw_request(sock.local_addr().unwrap().port(), 0), &[])
            .await
            .unwrap();
        assert_eq!(a.accept, 0);
        assert_eq!(send(&sock, a.port), None, "nothing before Start-Sessions");
        assert_eq!(start_sessions(&mut c).await.unwrap(), 0);
        let other = test_socket();
        assert_eq!(send(&other, a.port), None, "nothing to another port");
        let elsewhere = std::net::UdpSocket::bind("127.0.0.2:0").unwrap();
        elsewhere
            .set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        assert_eq!(send(&elsewhere, a.port), None, "nothing to another address");
        assert_eq!(send(&sock, a.port), Some(41), "the session's sender is answered");
        drop(c);
        // The control connection is gone: so is the session.
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(
            send(&sock, a.port),
            None,
            "nothing after the control connection closed"
        );
    });
    let (_, doc) = srv.stop();
    let t = &doc["twamp_server"];
    assert_eq!(t["packets_reflected"], 1, "{t}");
    assert_eq!(t["packets_ignored"], 3, "{t}");
}

#[test]
fn absurd_stop_sessions_end_the_connection_without_allocating() {
    let srv = start("hostile-owamp-stop", &[]);
    let rt = runtime();
    rt.block_on(async {
        // 2^32 - 1 sessions named by a client that sends in one.
        let mut c = connect(srv.owamp, Mode::Authenticated).await.unwrap();
        let a = request(&mut c, &ow_request(9999, 10, 0), &[slot(10)])
            .await
            .unwrap();
        assert_eq!(a.accept, 0);
        assert_eq!(start_sessions(&mut c).await.unwrap(), 0);
        let mut head = goodput_core::owamp::control::StopHeader {
            accept: 0,
            sessions: u32::MAX,
        }
        .encode();
        c.send_blocks(&mut head).await.unwrap();
        c.send_hmac().await.unwrap();
        let mut b = [0u8; 16];
        assert!(c.recv_blocks(&mut b).await.is_err(), "the connection is closed");
        // One session, with 2^32 - 1 skip ranges claimed.
        let mut c = connect(srv.owamp, Mode::Open).await.unwrap();
        let a = request(&mut c, &ow_request(9999, 10, 0), &[slot(10)])
            .await
            .unwrap();
        assert_eq!(start_sessions(&mut c).await.unwrap(), 0);
        let mut head = goodput_core::owamp::control::StopHeader {
            accept: 0,
            sessions: 1,
        }
        .encode();
        c.send_blocks(&mut head).await.unwrap();
        let mut rec = [0u8; 32];
        rec[..16].copy_from_slice(&a.sid);
        rec[16..20].copy_from_slice(&10u32.to_be_bytes());
        rec[20..24].copy_from_slice(&u32::MAX.to_be_bytes());
        c.send_blocks(&mut rec).await.unwrap();
        let mut b = [0u8; 16];
        assert!(c.recv_blocks(&mut b).await.is_err(), "the connection is closed");
        // Stop-Sessions before Start-Sessions, and a Fetch of nothing.
        let mut c = connect(srv.owamp, Mode::Open).await.unwrap();
        assert!(fetch(&mut c, [0; 16]).await.unwrap().is_none());
        let mut head = goodput_core::owamp::control::StopHeader {
            accept: 0,
            sessions: 0,
        }
        .encode();
        c.send_blocks(&mut head).await.unwrap();
        c.send_hmac().await.unwrap();
        assert!(c.recv_blocks(&mut b).await.is_err(), "the connection is closed");
    });
    peak_ok(&srv);
    let (_, doc) = srv.stop();
    let o = &doc["owamp_server"];
    assert_eq!(o["protocol_errors"], 3, "{o}");
    assert_eq!(o["fetches_refused"], 1, "{o}");
}
