//! Benchmark load for STAMP and TWAMP reflectors (used by `bench/run.sh
//! stamp` and `twamp`): keeps WINDOW valid requests outstanding on each of
//! SOCKETS connected UDP sockets, with `sendmmsg`/`recvmmsg`, and prints
//! the replies per second the reflector sustained. Closed loop, so it
//! measures the reflector, not a send rate; any reflector (goodput's,
//! stamp-suite's, twampd's) is loaded the same.
//!
//! With `--twamp`, ADDR:PORT is a TWAMP-Control server: each socket first
//! gets its own session (open mode, Request-TW-Session, Start-Sessions) and
//! floods the reflector port the server gave it; a TWAMP open sender packet
//! of SIZE octets is STAMP's (sequence, timestamp, error estimate, zeros).
//!
//! usage: stamp_flood [--twamp] ADDR:PORT SECONDS [SOCKETS=4] [WINDOW=64] [SIZE=44]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use goodput_core::stamp::{ntp_from_unix_ns, ErrorEstimate, SenderPacket};

const BATCH: usize = 64;

fn main() {
    let mut args: Vec<String> = std::env::args().collect();
    let twamp = args.get(1).is_some_and(|a| a == "--twamp");
    if twamp {
        args.remove(1);
    }
    if args.len() < 3 {
        eprintln!("usage: stamp_flood [--twamp] ADDR:PORT SECONDS [SOCKETS] [WINDOW] [SIZE]");
        std::process::exit(2);
    }
    let target: SocketAddr = args[1].parse().expect("ADDR:PORT");
    let secs: f64 = args[2].parse().expect("SECONDS");
    let n_sock: usize = args.get(3).map_or(4, |s| s.parse().expect("SOCKETS"));
    let window: usize = args.get(4).map_or(64, |s| s.parse().expect("WINDOW"));
    let size: usize = args.get(5).map_or(44, |s| s.parse().expect("SIZE"));
    let bind = if target.is_ipv4() {
        "127.0.0.1:0"
    } else {
        "[::1]:0"
    };
    let mut controls = Vec::new();
    let socks: Vec<UdpSocket> = (0..n_sock)
        .map(|_| {
            let s = UdpSocket::bind(bind).expect("bind");
            if twamp {
                let (ctrl, port) = twamp_session(target, &s, size);
                controls.push(ctrl);
                s.connect(SocketAddr::new(target.ip(), port)).expect("connect");
            } else {
                s.connect(target).expect("connect");
            }
            s.set_nonblocking(true).expect("nonblocking");
            s
        })
        .collect();
    let mut outstanding = vec![0usize; n_sock];
    let mut seq = vec![0u32; n_sock];
    let mut last_reply = vec![Instant::now(); n_sock];
    let mut out = vec![0u8; BATCH * size];
    let mut inb = vec![0u8; BATCH * 9000];
    let (mut sent, mut received) = (0u64, 0u64);
    let warmup = Duration::from_millis(500);
    let start = Instant::now();
    let mut counted_from = None;
    let mut counted_base = 0u64;
    loop {
        let now = Instant::now();
        if counted_from.is_none() && now - start >= warmup {
            counted_from = Some(now);
            counted_base = received;
        }
        if let Some(f) = counted_from {
            if (now - f).as_secs_f64() >= secs {
                let rate = (received - counted_base) as f64 / (now - f).as_secs_f64();
                println!("{rate:.0} {sent} {received}");
                return;
            }
        }
        let mut busy = false;
        for (i, s) in socks.iter().enumerate() {
            let fd = s.as_raw_fd();
            // A window lost to drops would stall the loop: refill it after 200 ms of silence.
            if outstanding[i] > 0 && now - last_reply[i] > Duration::from_millis(200) {
                outstanding[i] = 0;
                last_reply[i] = now;
            }
            let room = window.saturating_sub(outstanding[i]).min(BATCH);
            if room > 0 {
                let t = ntp_from_unix_ns(
                    std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .unwrap_or_default()
                        .as_nanos() as i64,
                );
                for k in 0..room {
                    SenderPacket {
                        seq: seq[i],
                        timestamp: t,
                        error: ErrorEstimate::from_clock(1000, false),
                        ssid: 0,
                    }
                    .write(&mut out[k * size..(k + 1) * size]);
                    seq[i] = seq[i].wrapping_add(1);
                }
                let got = mmsg(fd, &mut out, size, room, true);
                sent += got as u64;
                outstanding[i] += got;
                busy |= got > 0;
            }
            let got = mmsg(fd, &mut inb, 9000, BATCH, false);
            if got > 0 {
                received += got as u64;
                outstanding[i] = outstanding[i].saturating_sub(got);
                last_reply[i] = now;
                busy = true;
            }
        }
        if !busy {
            let mut fds: Vec<libc::pollfd> = socks
                .iter()
                .map(|s| libc::pollfd {
                    fd: s.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                })
                .collect();
            // SAFETY: a valid array of pollfds for sockets we own.
            unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 10) };
        }
    }
}

/// Opens a TWAMP-Control connection in open mode and one session whose
/// sender is `udp`, packets of `size` octets; returns the connection (kept
/// open while the session runs) and the reflector's port.
fn twamp_session(ctrl: SocketAddr, udp: &UdpSocket, size: usize) -> (TcpStream, u16) {
    use goodput_core::owamp::control::{
        self, AcceptSession, RequestSession, ServerGreeting, ServerStart, SetupResponse,
    };
    let mut c = TcpStream::connect(ctrl).expect("TWAMP-Control connect");
    let mut g = [0u8; ServerGreeting::LEN];
    c.read_exact(&mut g).expect("Server-Greeting");
    assert!(
        ServerGreeting::decode(&g).modes & 1 != 0,
        "the server does not offer open mode"
    );
    let setup = SetupResponse {
        mode: 1,
        key_id: [0; 80],
        token: [0; 64],
        client_iv: [0; 16],
    };
    c.write_all(&setup.encode()).expect("Set-Up-Response");
    let mut st = [0u8; ServerStart::LEN];
    c.read_exact(&mut st).expect("Server-Start");
    assert_eq!(ServerStart::decode(&st).accept, 0, "Server-Start refused");
    let local = udp.local_addr().expect("local");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos() as i64;
    let req = RequestSession {
        twoway: true,
        conf_sender: false,
        conf_receiver: false,
        slots: 0,
        packets: 0,
        sender_port: local.port(),
        receiver_port: local.port(),
        sender: local.ip(),
        receiver: ctrl.ip(),
        sid: [0; 16],
        padding: (size.max(14) - 14) as u32,
        start_time: ntp_from_unix_ns(now),
        timeout: 2 << 32,
        type_p: 0,
    };
    c.write_all(&req.encode()).expect("Request-TW-Session");
    let mut a = [0u8; AcceptSession::LEN];
    c.read_exact(&mut a).expect("Accept-Session");
    let a = AcceptSession::decode(&a);
    assert_eq!(a.accept, 0, "Accept-Session refused");
    c.write_all(&control::start_sessions()).expect("Start-Sessions");
    let mut ack = [0u8; 32];
    c.read_exact(&mut ack).expect("Start-Ack");
    assert_eq!(ack[0], 0, "Start-Ack refused");
    (c, a.port)
}

/// One `sendmmsg` (send) or `recvmmsg` of `n` slots of `slot` bytes in
/// `buf` on a connected socket; returns how many moved.
fn mmsg(fd: i32, buf: &mut [u8], slot: usize, n: usize, send: bool) -> usize {
    let mut iov: Vec<libc::iovec> = (0..n)
        .map(|k| libc::iovec {
            iov_base: buf[k * slot..].as_mut_ptr().cast(),
            iov_len: slot,
        })
        .collect();
    let mut hdrs: Vec<libc::mmsghdr> = (0..n)
        .map(|k| {
            // SAFETY: all-zero is a valid mmsghdr.
            let mut h: libc::mmsghdr = unsafe { std::mem::zeroed() };
            h.msg_hdr.msg_iov = &mut iov[k];
            h.msg_hdr.msg_iovlen = 1;
            h
        })
        .collect();
    // SAFETY: the headers point at `iov` and `buf`, alive for the call.
    let r = unsafe {
        if send {
            libc::sendmmsg(fd, hdrs.as_mut_ptr(), n as u32, libc::MSG_DONTWAIT)
        } else {
            libc::recvmmsg(
                fd,
                hdrs.as_mut_ptr(),
                n as u32,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        }
    };
    r.max(0) as usize
}
