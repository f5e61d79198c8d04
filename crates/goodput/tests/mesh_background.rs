//! One agent leading continuous background STAMP streams to many peers
//! (127.0.1.x, no agent of their own), answered by reflectors in this test
//! that count what they reflect per address. What is checked: background
//! runs have their own limit (`--max-background`), refuse past it naming
//! it, and take none of `--max-running`'s slots; and the per-minute
//! summaries' counts equal the reflectors' own counts exactly.

mod common;

use common::agents::{get_json, state, Agent, Ports};
use goodput_core::stamp::{ntp_from_unix_ns, reflect, ErrorEstimate, ReflectInput, ReflectorPacket};
use serde_json::Value;
use std::collections::BTreeMap;
use std::net::UdpSocket;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const PEERS: usize = 48;
const MAX_BACKGROUND: usize = 40;
/// The schedule's period and each stream's length, seconds.
const EVERY_S: u64 = 20;
const STREAM_S: u64 = 8;

fn unix_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

/// A stateless reflector on `ip:port` counting the requests it answered.
fn reflector(ip: &str, port: u16, count: Arc<AtomicU64>, stop: Arc<AtomicBool>) {
    let s = UdpSocket::bind((ip, port)).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    std::thread::spawn(move || {
        let (mut buf, mut out) = ([0u8; 2048], [0u8; 2048]);
        while !stop.load(Ordering::Relaxed) {
            let Ok((n, from)) = s.recv_from(&mut buf) else {
                continue;
            };
            let input = ReflectInput {
                t2_unix_ns: unix_ns(),
                ttl: 255,
                seq: None,
                error: ErrorEstimate::from_clock(1000, false),
                pad_short: false,
            };
            let Some((len, _)) = reflect(&buf[..n], &input, &mut out) else {
                continue;
            };
            ReflectorPacket::set_timestamp(&mut out[..len], ntp_from_unix_ns(unix_ns()));
            if s.send_to(&out[..len], from).is_ok() {
                count.fetch_add(1, Ordering::Relaxed);
            }
        }
    });
}

fn u(v: &Value, k: &str) -> u64 {
    v[k].as_u64().unwrap_or_else(|| panic!("{k} in {v}"))
}

#[test]
fn background_streams_have_their_own_limit_and_exact_summaries() {
    let ports = Ports::pick();
    let reflect_port = common::free_udp_port();
    let stop = Arc::new(AtomicBool::new(false));
    let ips: Vec<String> = (1..=PEERS).map(|i| format!("127.0.1.{i}")).collect();
    let counts: Vec<Arc<AtomicU64>> = ips.iter().map(|_| Arc::new(AtomicU64::new(0))).collect();
    for (ip, c) in ips.iter().zip(&counts) {
        reflector(ip, reflect_port, c.clone(), stop.clone());
    }
    let me = "127.0.0.60";
    let mut t = format!(
        "[agent]\napi_port = {}\n\n[addresses.me]\naddress = \"{me}\"\n",
        ports.api
    );
    for (i, ip) in ips.iter().enumerate() {
        t += &format!("[addresses.p{i}]\naddress = \"{ip}\"\nno_agent = true\n");
    }
    t += &format!(
        "[tests.bg]\nkind = \"stamp\"\nhost = \"{{{{dest}}}}\"\nport = {reflect_port}\n\
         continuous = true\nrate = 10\nduration = \"{STREAM_S}s\"\n\n\
         [schedules.often]\nrepeat = \"PT{EVERY_S}S\"\n\n"
    );
    for i in 0..PEERS {
        t += &format!(
            "[groups.g{i}]\ntype = \"disjoint\"\na = [\"me\"]\nb = [\"p{i}\"]\nunidirectional = true\n\
             [tasks.t{i}]\ngroup = \"g{i}\"\ntest = \"bg\"\nschedule = \"often\"\n"
        );
    }
    let config = common::tmp("mesh-background", "mesh.toml");
    std::fs::write(&config, t).unwrap();
    // One slot for runs that are not background: every stream still runs.
    let mut agent = Agent::start(
        "mesh-background",
        "me",
        me,
        &config,
        ports,
        &[
            "--max-running",
            "1",
            "--max-background",
            &MAX_BACKGROUND.to_string(),
        ],
    );
    // Two rounds of streams, then a quiet moment between rounds (every
    // stream of a round has ended and been stored) to read both sides.
    let period_ms = EVERY_S * 1000;
    let deadline = std::time::Instant::now() + Duration::from_secs(3 * EVERY_S + 15);
    let runs = loop {
        assert!(
            std::time::Instant::now() < deadline,
            "no two rounds of streams: {}",
            agent.log_text()
        );
        std::thread::sleep(Duration::from_millis(500));
        let phase = common::now_ms() % period_ms;
        if !(STREAM_S * 1000 + 5_000..period_ms - 1_000).contains(&phase) {
            continue;
        }
        let runs: Vec<Value> = agent
            .runs(ports)
            .into_iter()
            .filter(|r| r["kind"] == "stamp" && matches!(state(r), "finished" | "failed"))
            .collect();
        let rounds = runs.len() / PEERS;
        if rounds >= 2 {
            break runs;
        }
    };
    let counted: Vec<u64> = counts.iter().map(|c| c.load(Ordering::Relaxed)).collect();
    let finished: Vec<&Value> = runs.iter().filter(|r| state(r) == "finished").collect();
    let refused: Vec<&Value> = runs.iter().filter(|r| state(r) == "failed").collect();
    assert_eq!(finished.len() + refused.len(), runs.len(), "{runs:?}");
    // Each round: MAX_BACKGROUND run, the rest are refused by that limit,
    // and none by max_running's single slot.
    let rounds = runs.len() / PEERS;
    assert_eq!(finished.len(), rounds * MAX_BACKGROUND, "{runs:?}");
    assert_eq!(refused.len(), rounds * (PEERS - MAX_BACKGROUND), "{runs:?}");
    for r in &refused {
        let why = r["reason"].as_str().unwrap_or("");
        assert_eq!(
            why,
            format!("limit max_background: {MAX_BACKGROUND} background runs were under way"),
            "{r}"
        );
    }
    // The summaries, per peer, against what its reflector answered.
    let rows = get_json(me, ports.api, "/api/v1/runs?kind=stamp_minute&limit=10000");
    let mut by_dest: BTreeMap<String, [u64; 5]> = BTreeMap::new();
    for row in rows.as_array().unwrap() {
        // The list leaves the documents out; each row's is read on its own.
        let id = row["id"].as_str().unwrap();
        let one = get_json(me, ports.api, &format!("/api/v1/runs/{id}"));
        let d = &one["result"];
        let e = by_dest
            .entry(row["dest"].as_str().unwrap().to_owned())
            .or_default();
        for (k, name) in ["sent", "received", "lost", "not_sent", "late"]
            .iter()
            .enumerate()
        {
            e[k] += u(d, name);
        }
    }
    let mut streams = 0;
    for (i, reflected) in counted.iter().enumerate() {
        let [sent, received, lost, not_sent, late] =
            by_dest.get(&format!("p{i}")).copied().unwrap_or_default();
        // Every packet that left came back (the reflector answered it) or
        // is lost; none was refused by the kernel on loopback.
        assert_eq!(
            (received, sent, not_sent, late),
            (*reflected, received + lost, 0, 0),
            "p{i}: the summaries say {sent} sent, {received} received, {lost} lost, \
             {not_sent} not sent, {late} late; its reflector answered {reflected}"
        );
        streams += usize::from(sent > 0);
        // A stream of STREAM_S seconds at 10/s sends about 10 × STREAM_S
        // packets a round.
        assert!(sent <= (rounds as u64) * (10 * STREAM_S + 2), "p{i}: {sent} sent");
    }
    assert!(
        streams >= MAX_BACKGROUND,
        "only {streams} peers' streams were summarised"
    );
    let total: u64 = counted.iter().sum();
    assert!(
        total >= (finished.len() as u64) * (10 * STREAM_S - 2),
        "{total} packets reflected for {} streams",
        finished.len()
    );
    stop.store(true, Ordering::Relaxed);
    agent.stop(libc::SIGTERM);
}
