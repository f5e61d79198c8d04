//! A small OWAMP/TWAMP test client for the server tests: a real `goodput
//! server --owamp --twamp` on loopback, driven through the core codec and
//! the engine's `client_handshake`.

#![allow(dead_code)]

use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::time::Duration;

use goodput_core::owamp::control::{self, AcceptSession, RequestSession, Slot, SlotKind};
use goodput_core::owamp::pfs::Key;
use goodput_core::owamp::Mode;
use goodput_engine::owamp::conn::{client_handshake, ControlConn, ControlFailure};
use tokio::net::TcpStream;

use crate::common::*;

pub const IDENTITY: &str = "gptest";
pub const PASSPHRASE: &[u8] = b"goodput-test-pass";
pub const LOOPBACK: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

/// A running `goodput server` with OWAMP and TWAMP on loopback.
pub struct OwServer {
    pub child: Reaped,
    pub owamp: u16,
    pub twamp: u16,
    pub json: PathBuf,
}

/// The key both ends know.
pub fn key() -> Key {
    Key {
        identity: IDENTITY.into(),
        passphrase: PASSPHRASE.to_vec(),
    }
}

/// Starts the server (address space limited) with `extra` flags.
pub fn start(group: &str, extra: &[&str]) -> OwServer {
    start_on(group, free_tcp_port(), free_tcp_port(), extra)
}

/// [`start`] on given OWAMP and TWAMP ports.
pub fn start_on(group: &str, owamp: u16, twamp: u16, extra: &[&str]) -> OwServer {
    let port = free_tcp_port();
    let json = tmp(group, "server.json");
    let pfs = tmp(group, "server.pfs");
    let hex: String = PASSPHRASE.iter().map(|b| format!("{b:02x}")).collect();
    std::fs::write(&pfs, format!("{IDENTITY}\t{hex}\n")).unwrap();
    let mut cmd = goodput();
    cmd.args(["server", "--listen", "127.0.0.1", "--no-udp", "--verbosity", "1"])
        .args(["--port", &port.to_string()])
        .args(["--owamp", "--owamp-port", &owamp.to_string()])
        .args(["--twamp", "--twamp-port", &twamp.to_string()])
        .args(["--ow-twamp-listen", "127.0.0.1"])
        .arg("--ow-twamp-pfs")
        .arg(&pfs)
        .arg("--json")
        .arg(&json)
        .args(extra);
    let child = spawn_limited(cmd, SERVER_ADDRESS_SPACE);
    wait_tcp_listening(owamp);
    wait_tcp_listening(twamp);
    OwServer {
        child,
        owamp,
        twamp,
        json,
    }
}

impl OwServer {
    /// Stops the server with SIGINT; returns its output and result document.
    pub fn stop(mut self) -> (String, serde_json::Value) {
        assert!(self.child.alive(), "the server died");
        let (code, out, err) = self.child.stop(libc::SIGINT);
        assert_eq!(code, Some(0), "stdout: {out}\nstderr: {err}");
        assert!(!err.contains("panicked"), "{err}");
        let doc = serde_json::from_str(&std::fs::read_to_string(&self.json).unwrap()).unwrap();
        (out, doc)
    }
}

/// A runtime for one test's client.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Connects and sets up in `mode`.
pub async fn connect(port: u16, mode: Mode) -> Result<ControlConn<TcpStream>, ControlFailure> {
    let s = TcpStream::connect((LOOPBACK, port)).await?;
    let k = key();
    let (c, _) = client_handshake(s, mode, Some(&k), Duration::from_secs(5)).await?;
    Ok(c)
}

/// The server's clock now, NTP format.
pub fn ntp_now() -> u64 {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    goodput_core::stamp::ntp_from_unix_ns(d.as_nanos() as i64)
}

/// A TWAMP request from `sender_port` on loopback.
pub fn tw_request(sender_port: u16, padding: u32) -> RequestSession {
    RequestSession {
        twoway: true,
        conf_sender: false,
        conf_receiver: false,
        slots: 0,
        packets: 0,
        sender_port,
        receiver_port: sender_port,
        sender: LOOPBACK,
        receiver: LOOPBACK,
        sid: [0; 16],
        padding,
        start_time: ntp_now(),
        timeout: 1 << 32,
        type_p: 0,
    }
}

/// An OWAMP request: the server receives `packets` at `gap_ms` from
/// `sender_port`.
pub fn ow_request(sender_port: u16, packets: u32, padding: u32) -> RequestSession {
    RequestSession {
        twoway: false,
        conf_sender: false,
        conf_receiver: true,
        slots: 1,
        packets,
        sender_port,
        receiver_port: 0,
        sender: LOOPBACK,
        receiver: LOOPBACK,
        sid: [0; 16],
        padding,
        start_time: ntp_now() + (1 << 31),
        timeout: 2 << 32,
        type_p: 0,
    }
}

/// The one-slot schedule of `gap_ms` between packets.
pub fn slot(gap_ms: u64) -> Slot {
    Slot::from_ns(SlotKind::Fixed, gap_ms * 1_000_000)
}

/// Sends a request (with its slots for OWAMP) and reads the answer.
pub async fn request(
    c: &mut ControlConn<TcpStream>,
    r: &RequestSession,
    slots: &[Slot],
) -> Result<AcceptSession, ControlFailure> {
    let mut m = r.encode();
    c.send(&mut m).await?;
    if !r.twoway {
        let mut b: Vec<u8> = slots.iter().flat_map(|s| s.encode()).collect();
        c.send_blocks(&mut b).await?;
        c.send_hmac().await?;
    }
    let a: [u8; AcceptSession::LEN] = c.recv().await?;
    Ok(AcceptSession::decode(&a))
}

/// Start-Sessions; returns the Start-Ack's accept code.
pub async fn start_sessions(c: &mut ControlConn<TcpStream>) -> Result<u8, ControlFailure> {
    let mut m = control::start_sessions();
    c.send(&mut m).await?;
    let ack: [u8; 32] = c.recv().await?;
    Ok(ack[0])
}

/// TWAMP's Stop-Sessions (one session, no records).
pub async fn tw_stop(c: &mut ControlConn<TcpStream>) -> Result<(), ControlFailure> {
    let mut m = [0u8; 32];
    m[..16].copy_from_slice(
        &control::StopHeader {
            accept: 0,
            sessions: 1,
        }
        .encode(),
    );
    c.send(&mut m).await
}

/// A UDP socket on loopback that sends with TTL 255, as a sender must.
pub fn test_socket() -> std::net::UdpSocket {
    let s = std::net::UdpSocket::bind((LOOPBACK, 0)).unwrap();
    s.set_ttl(255).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(500))).unwrap();
    s
}

/// OWAMP's Stop-Sessions from a client that sent in one session.
pub async fn ow_stop(
    c: &mut ControlConn<TcpStream>,
    sid: [u8; 16],
    next_seq: u32,
) -> Result<(), ControlFailure> {
    let mut head = control::StopHeader {
        accept: 0,
        sessions: 1,
    }
    .encode();
    c.send_blocks(&mut head).await?;
    let mut rec = control::StopSession {
        sid,
        next_seq,
        skips: Vec::new(),
    }
    .encode();
    c.send_blocks(&mut rec).await?;
    c.send_hmac().await
}

/// Reads the server's Stop-Sessions; returns its records' (SID, next
/// sequence number).
pub async fn read_stop(c: &mut ControlConn<TcpStream>) -> Result<Vec<([u8; 16], u32)>, ControlFailure> {
    let first = c.recv_first_block(Duration::from_secs(10)).await?;
    let h = control::StopHeader::decode(&first).unwrap();
    assert!(h.sessions <= 16);
    let mut out = Vec::new();
    for _ in 0..h.sessions {
        let mut b = [0u8; 32];
        c.recv_blocks(&mut b).await?;
        let n = u32::from_be_bytes(b[20..24].try_into().unwrap());
        assert_eq!(n, 0, "no skips expected here");
        out.push((
            b[..16].try_into().unwrap(),
            u32::from_be_bytes(b[16..20].try_into().unwrap()),
        ));
    }
    c.recv_hmac().await?;
    Ok(out)
}

/// What Fetch-Session returned.
pub struct Fetched {
    pub ack: control::FetchAck,
    pub request: RequestSession,
    pub slots: Vec<Slot>,
    pub records: Vec<control::DataRecord>,
}

/// Fetch-Session of every record of `sid`; `None` when refused.
pub async fn fetch(c: &mut ControlConn<TcpStream>, sid: [u8; 16]) -> Result<Option<Fetched>, ControlFailure> {
    let mut m = control::FetchSession {
        begin: 0,
        end: u32::MAX,
        sid,
    }
    .encode();
    c.send(&mut m).await?;
    let a: [u8; control::FetchAck::LEN] = c.recv().await?;
    let ack = control::FetchAck::decode(&a);
    if ack.accept != 0 {
        return Ok(None);
    }
    assert!(ack.records <= 100_000 && ack.skips <= 1000);
    let r: [u8; RequestSession::LEN] = c.recv().await?;
    let request = RequestSession::decode(&r).unwrap();
    assert!(request.slots <= 1024);
    let mut sb = vec![0u8; request.slots as usize * 16];
    c.recv_blocks(&mut sb).await?;
    c.recv_hmac().await?;
    let slots = sb
        .chunks_exact(16)
        .map(|b| Slot::decode(b.try_into().unwrap()).unwrap())
        .collect();
    let mut skips = vec![0u8; control::pad16(ack.skips as usize * 8)];
    if !skips.is_empty() {
        c.recv_blocks(&mut skips).await?;
    }
    c.recv_hmac().await?;
    let mut rb = vec![0u8; control::pad16(ack.records as usize * control::DataRecord::LEN)];
    if !rb.is_empty() {
        c.recv_blocks(&mut rb).await?;
    }
    c.recv_hmac().await?;
    let records = rb
        .chunks_exact(control::DataRecord::LEN)
        .take(ack.records as usize)
        .map(control::DataRecord::decode)
        .collect();
    Ok(Some(Fetched {
        ack,
        request,
        slots,
        records,
    }))
}
