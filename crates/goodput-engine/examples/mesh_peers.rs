//! A mesh's peers in one process, for `bench/run.sh mesh-scale` and the
//! mesh tests: COUNT loopback addresses from FIRST up (127.0.1.1 and on;
//! 127/8 needs no set-up), each with one UDP socket on PORT that
//!
//! - reflects the STAMP sessions an agent leads to that address
//!   (stateless: the sender's own sequence numbers come back), and
//! - leads one session of its own to the agent's reflector AGENT at RATE
//!   packets/s for SEND_SECONDS (SSID = the address's index + 1).
//!
//! After SECONDS it writes its own log as JSON to LOG: per address, the
//! requests it reflected for the agent, the packets of its own session it
//! sent and the replies it got. The agent's summaries are checked against
//! that log, so every count in it is what happened on this side's sockets.
//!
//! usage: mesh_peers FIRST COUNT PORT AGENT_ADDR:PORT RATE SEND_SECONDS SECONDS LOG

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use goodput_core::stamp::{ntp_from_unix_ns, ErrorEstimate, SenderPacket, BASE_LEN};
use tokio::net::UdpSocket;
use tokio::time::Instant;

/// One address's counts.
#[derive(Default)]
struct Peer {
    reflected: AtomicU64,
    reflect_failed: AtomicU64,
    sent: AtomicU64,
    send_failed: AtomicU64,
    replies: AtomicU64,
}

fn arg<T: std::str::FromStr>(args: &[String], i: usize, name: &str) -> T {
    match args.get(i).map(|a| a.parse()) {
        Some(Ok(v)) => v,
        _ => {
            eprintln!(
                "usage: mesh_peers FIRST COUNT PORT AGENT_ADDR:PORT RATE SEND_SECONDS SECONDS LOG \
                 ({name} is missing or not valid)"
            );
            std::process::exit(2);
        }
    }
}

fn now_unix_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let first: Ipv4Addr = arg(&args, 1, "FIRST");
    let count: u32 = arg(&args, 2, "COUNT");
    let port: u16 = arg(&args, 3, "PORT");
    let agent: SocketAddr = arg(&args, 4, "AGENT_ADDR:PORT");
    let rate: f64 = arg(&args, 5, "RATE");
    let send_s: f64 = arg(&args, 6, "SEND_SECONDS");
    let total_s: f64 = arg(&args, 7, "SECONDS");
    let log: String = arg(&args, 8, "LOG");
    let valid = (1..=65_535).contains(&count) && rate > 0.0 && rate <= 1000.0 && total_s >= send_s;
    if !valid {
        eprintln!("mesh_peers: COUNT must be 1-65535, RATE 0-1000 packets/s, SECONDS at least SEND_SECONDS");
        std::process::exit(2);
    }
    let mut socks = Vec::new();
    let mut addrs = Vec::new();
    for i in 0..count {
        let ip = Ipv4Addr::from(u32::from(first).wrapping_add(i));
        let s = match UdpSocket::bind(SocketAddr::from((ip, port))).await {
            Ok(s) => s,
            Err(e) => {
                eprintln!("mesh_peers: cannot bind {ip}:{port}: {e}");
                std::process::exit(1);
            }
        };
        socks.push(Arc::new(s));
        addrs.push(ip);
    }
    let peers: Arc<Vec<Peer>> = Arc::new((0..count).map(|_| Peer::default()).collect());
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(total_s);
    // Receivers: a reply from the agent's reflector is one of this
    // address's own session; anything else is a request to reflect.
    for (i, s) in socks.iter().enumerate() {
        let (s, peers) = (s.clone(), peers.clone());
        tokio::spawn(async move {
            let mut buf = vec![0u8; 9000];
            let mut out = vec![0u8; 9000];
            loop {
                let Ok((n, from)) = s.recv_from(&mut buf).await else {
                    continue;
                };
                let p = &peers[i];
                if from == agent {
                    if n >= BASE_LEN {
                        p.replies.fetch_add(1, Ordering::Relaxed);
                    }
                    continue;
                }
                let input = goodput_core::stamp::ReflectInput {
                    t2_unix_ns: now_unix_ns(),
                    ttl: 255,
                    seq: None,
                    error: ErrorEstimate::from_clock(1000, false),
                    pad_short: false,
                };
                let Some((len, _)) = goodput_core::stamp::reflect(&buf[..n], &input, &mut out) else {
                    continue;
                };
                goodput_core::stamp::ReflectorPacket::set_timestamp(
                    &mut out[..len],
                    ntp_from_unix_ns(now_unix_ns()),
                );
                match s.send_to(&out[..len], from).await {
                    Ok(_) => p.reflected.fetch_add(1, Ordering::Relaxed),
                    Err(_) => p.reflect_failed.fetch_add(1, Ordering::Relaxed),
                };
            }
        });
    }
    // One sender for every session: each address's packets on its own
    // phase within the interval.
    let interval = Duration::from_secs_f64(1.0 / rate);
    let send_end = start + Duration::from_secs_f64(send_s);
    let mut seq = vec![0u32; count as usize];
    let mut pkt = [0u8; BASE_LEN];
    let step = interval / count;
    let mut k: u64 = 0;
    loop {
        let i = (k % u64::from(count)) as usize;
        let at = start + interval * (k / u64::from(count)) as u32 + step * i as u32;
        if at >= send_end {
            break;
        }
        tokio::time::sleep_until(at).await;
        SenderPacket {
            seq: seq[i],
            timestamp: ntp_from_unix_ns(now_unix_ns()),
            error: ErrorEstimate::from_clock(1000, false),
            ssid: (i as u16).wrapping_add(1).max(1),
        }
        .write(&mut pkt);
        seq[i] = seq[i].wrapping_add(1);
        match socks[i].send_to(&pkt, agent).await {
            Ok(_) => peers[i].sent.fetch_add(1, Ordering::Relaxed),
            Err(_) => peers[i].send_failed.fetch_add(1, Ordering::Relaxed),
        };
        k += 1;
    }
    tokio::time::sleep_until(end).await;
    let rows: Vec<serde_json::Value> = addrs
        .iter()
        .zip(peers.iter())
        .map(|(ip, p)| {
            serde_json::json!({
                "address": ip.to_string(),
                "reflected": p.reflected.load(Ordering::Relaxed),
                "reflect_failed": p.reflect_failed.load(Ordering::Relaxed),
                "sent": p.sent.load(Ordering::Relaxed),
                "send_failed": p.send_failed.load(Ordering::Relaxed),
                "replies": p.replies.load(Ordering::Relaxed),
            })
        })
        .collect();
    let doc = serde_json::json!({ "port": port, "agent": agent.to_string(), "peers": rows });
    if let Err(e) = std::fs::write(&log, serde_json::to_vec_pretty(&doc).unwrap_or_default()) {
        eprintln!("mesh_peers: cannot write {log}: {e}");
        std::process::exit(1);
    }
}
