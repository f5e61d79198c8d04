//! A test-only TCP relay between a client and a server that can flip chosen
//! bytes and records what crossed it, so tests know the ground truth.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};

/// Flip `mask` into byte `offset` of one direction of connection `conn`
/// (connections counted in accept order from 0).
#[derive(Debug, Clone, Copy)]
pub struct Flip {
    pub conn: usize,
    pub client_to_server: bool,
    pub offset: u64,
    pub mask: u8,
}

#[derive(Debug, Default)]
pub struct Recording {
    /// Per connection: (client→server bytes, server→client bytes).
    pub streams: Vec<(Vec<u8>, Vec<u8>)>,
}

pub struct Relay {
    pub addr: SocketAddr,
    pub recording: Arc<Mutex<Recording>>,
}

/// Copies one direction. A FIN is passed on as a FIN; a reset is passed on
/// as a reset (SO_LINGER 0 on the other socket, then both are closed by the
/// caller), so the far end sees what it would see without the relay.
async fn pump(
    from: Arc<TcpStream>,
    to: Arc<TcpStream>,
    flip: Option<Flip>,
    record: Option<(Arc<Mutex<Recording>>, usize, bool)>,
) -> bool {
    let mut buf = vec![0u8; 64 * 1024];
    let mut offset = 0u64;
    loop {
        if from.readable().await.is_err() {
            return false;
        }
        let n = match from.try_read(&mut buf) {
            Ok(0) => {
                let _ = socket2::SockRef::from(&*to).shutdown(std::net::Shutdown::Write);
                return true;
            }
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(_) => {
                let _ = goodput_engine::socket::set_rude_close(&*to);
                return false;
            }
        };
        if let Some(f) = flip {
            if f.offset >= offset && f.offset < offset + n as u64 {
                buf[(f.offset - offset) as usize] ^= f.mask;
            }
        }
        if let Some((rec, i, c2s)) = &record {
            let mut r = rec.lock().unwrap();
            let s = &mut r.streams[*i];
            if *c2s {
                s.0.extend_from_slice(&buf[..n])
            } else {
                s.1.extend_from_slice(&buf[..n])
            }
        }
        offset += n as u64;
        let mut done = 0;
        while done < n {
            if to.writable().await.is_err() {
                return false;
            }
            match to.try_write(&buf[done..n]) {
                Ok(k) => done += k,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                Err(_) => {
                    let _ = goodput_engine::socket::set_rude_close(&*from);
                    return false;
                }
            }
        }
    }
}

impl Relay {
    pub async fn start(upstream: SocketAddr, flips: Vec<Flip>, record: bool) -> Relay {
        let listener = TcpListener::bind(SocketAddr::new(upstream.ip(), 0))
            .await
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let recording = Arc::new(Mutex::new(Recording::default()));
        let rec = recording.clone();
        tokio::spawn(async move {
            let mut conn = 0usize;
            while let Ok((client, _)) = listener.accept().await {
                let server = match TcpStream::connect(upstream).await {
                    Ok(s) => s,
                    Err(_) => continue,
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                rec.lock().unwrap().streams.push((Vec::new(), Vec::new()));
                let client = Arc::new(client);
                let server = Arc::new(server);
                let f_c2s = flips
                    .iter()
                    .copied()
                    .find(|f| f.conn == conn && f.client_to_server);
                let f_s2c = flips
                    .iter()
                    .copied()
                    .find(|f| f.conn == conn && !f.client_to_server);
                let r1 = record.then(|| (rec.clone(), conn, true));
                let r2 = record.then(|| (rec.clone(), conn, false));
                tokio::spawn(async move {
                    // When one direction ends in a reset the other stops too,
                    // and both sockets close with the reset armed in pump().
                    let up = pump(client.clone(), server.clone(), f_c2s, r1);
                    let down = pump(server.clone(), client.clone(), f_s2c, r2);
                    tokio::pin!(up, down);
                    tokio::select! {
                        ok = &mut up => if ok { down.await; },
                        ok = &mut down => if ok { up.await; },
                    }
                });
                conn += 1;
            }
        });
        Relay { addr, recording }
    }
}
