//! A test-only TCP relay between a client and a server that can flip chosen
//! bytes and records what crossed it, so tests know the ground truth.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
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

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    flip: Option<Flip>,
    record: Option<(Arc<Mutex<Recording>>, usize, bool)>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    let mut offset = 0u64;
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
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
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
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
                let (cr, cw) = client.into_split();
                let (sr, sw) = server.into_split();
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
                tokio::spawn(pump(cr, sw, f_c2s, r1));
                tokio::spawn(pump(sr, cw, f_s2c, r2));
                conn += 1;
            }
        });
        Relay { addr, recording }
    }
}
