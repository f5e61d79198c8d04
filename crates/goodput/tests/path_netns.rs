//! `goodput trace` and `goodput ping` on a chain of network namespaces the
//! test builds: client → r1 → r2 → r3 → server, forwarding, links of MTU
//! 9000 but r2–r3 at 1500, r1 silent (nftables drops the ICMP time
//! exceeded it sends), IPv4 and IPv6 on every link, and a second way from
//! r1 to r3 through r4 for a route change. Debian's tracepath and
//! traceroute run on the same chain in the same test and must find the
//! same hops and path MTU.
//!
//! Making namespaces needs root (CAP_NET_ADMIN), iproute2 and nftables:
//! without them the test says so and passes, except under CI=true, where
//! it fails.

mod common;

use common::{have, result_doc, tmp, Reaped};
use serde_json::Value;
use std::process::{Command, Output};
use std::time::Duration;

/// The chain's namespaces, removed when dropped.
struct Chain {
    tag: String,
}

/// The namespaces, by role.
const NODES: [&str; 6] = ["c", "r1", "r2", "r3", "r4", "s"];

/// Links: the two ends, the link's number (its subnets are 10.81.N.0/24
/// and fd81:N::/64, .1 on the first end) and its MTU.
const LINKS: [(&str, &str, u8, u32); 6] = [
    ("c", "r1", 1, 9000),
    ("r1", "r2", 2, 9000),
    ("r2", "r3", 3, 1500),
    ("r3", "s", 4, 9000),
    ("r1", "r4", 5, 9000),
    ("r4", "r3", 6, 9000),
];

/// Static routes: at a node, to link N's subnet, via link M's end (.1 or .2).
const ROUTES: [(&str, u8, u8, u8); 14] = [
    ("r1", 3, 2, 2),
    ("r1", 4, 2, 2),
    ("r1", 6, 2, 2),
    ("r2", 1, 2, 1),
    ("r2", 4, 3, 2),
    ("r2", 5, 2, 1),
    ("r2", 6, 3, 2),
    ("r3", 1, 3, 1),
    ("r3", 2, 3, 1),
    ("r3", 5, 6, 1),
    ("r4", 1, 5, 1),
    ("r4", 2, 5, 1),
    ("r4", 3, 6, 2),
    ("r4", 4, 6, 2),
];

fn ok(cmd: &mut Command) -> bool {
    cmd.status().is_ok_and(|s| s.success())
}

impl Chain {
    /// `None` (after saying why) where namespaces cannot be made.
    fn make(name: &str) -> Option<Self> {
        let ci = std::env::var_os("CI").is_some();
        // SAFETY: geteuid only reads the process's credentials.
        if unsafe { libc::geteuid() } != 0 {
            assert!(!ci, "the namespace tests need root in CI");
            eprintln!("not root: skipping the path namespace tests");
            return None;
        }
        if !have("ip", &["-V"], "apt-get install iproute2")
            || !have("nft", &["--version"], "apt-get install nftables")
        {
            return None;
        }
        let c = Chain {
            tag: format!("gp{}{name}", std::process::id()),
        };
        let fail = |what: String| {
            assert!(!ci, "cannot make the chain: {what}");
            eprintln!("cannot make the chain ({what}): skipping");
        };
        for n in NODES {
            let ns = c.ns(n);
            if !ok(Command::new("ip").args(["netns", "add", &ns])) {
                fail(format!("ip netns add {ns}"));
                return None;
            }
            c.ip(n, &["link", "set", "lo", "up"]);
            // Forwarding, and ICMP errors without Linux's rate limit, so
            // that every probe of a fast trace is answered.
            c.sh(
                n,
                "sysctl",
                &[
                    "-qw",
                    "net.ipv4.ip_forward=1",
                    "net.ipv6.conf.all.forwarding=1",
                    "net.ipv4.icmp_ratelimit=0",
                    "net.ipv6.icmp.ratelimit=0",
                ],
            );
        }
        for (a, b, n, mtu) in LINKS {
            let (x, y) = (format!("{}x{n}", c.tag), format!("{}y{n}", c.tag));
            let steps: [Vec<String>; 3] = [
                vec![
                    "link".into(),
                    "add".into(),
                    x.clone(),
                    "type".into(),
                    "veth".into(),
                    "peer".into(),
                    "name".into(),
                    y.clone(),
                ],
                vec!["link".into(), "set".into(), x.clone(), "netns".into(), c.ns(a)],
                vec!["link".into(), "set".into(), y.clone(), "netns".into(), c.ns(b)],
            ];
            for s in steps {
                if !ok(Command::new("ip").args(&s)) {
                    fail(format!("ip {}", s.join(" ")));
                    return None;
                }
            }
            for (node, dev, end) in [(a, &x, 1), (b, &y, 2)] {
                let l = format!("l{n}");
                c.ip(
                    node,
                    &["link", "set", dev, "name", &l, "mtu", &mtu.to_string(), "up"],
                );
                c.ip(node, &["addr", "add", &format!("10.81.{n}.{end}/24"), "dev", &l]);
                c.ip(
                    node,
                    &["addr", "add", &format!("fd81:{n}::{end}/64"), "dev", &l, "nodad"],
                );
            }
        }
        c.ip("c", &["route", "add", "default", "via", "10.81.1.2"]);
        c.ip("c", &["-6", "route", "add", "default", "via", "fd81:1::2"]);
        c.ip("s", &["route", "add", "default", "via", "10.81.4.1"]);
        c.ip("s", &["-6", "route", "add", "default", "via", "fd81:4::1"]);
        for (node, to, link, end) in ROUTES {
            c.ip(
                node,
                &[
                    "route",
                    "add",
                    &format!("10.81.{to}.0/24"),
                    "via",
                    &format!("10.81.{link}.{end}"),
                ],
            );
            c.ip(
                node,
                &[
                    "-6",
                    "route",
                    "add",
                    &format!("fd81:{to}::/64"),
                    "via",
                    &format!("fd81:{link}::{end}"),
                ],
            );
        }
        // r1 answers nothing: its time-exceeded messages are dropped.
        c.nft(
            "r1",
            "table inet silent {\n chain out {\n  type filter hook output priority 0;\n  icmp type time-exceeded drop\n  icmpv6 type time-exceeded drop\n }\n}\n",
        );
        // Neighbours found before the first trace: IPv6 neighbour
        // discovery holds a new hop's first packets for up to a second or
        // more, longer than the probes wait. A TCP connect to a closed port
        // (answered by a reset) takes the path both ways.
        for dest in ["10.81.4.2", "fd81:4::2"] {
            let st = c
                .exec("c", env!("CARGO_BIN_EXE_goodput"))
                .args([
                    "ping", dest, "-M", "tcp", "-p", "9", "-c", "1", "-W", "5s", "-v", "0", "--json", "-",
                ])
                .output()
                .unwrap();
            // A reset is no answer (exit 1), but it came back along the path.
            let doc: Value = serde_json::from_slice(&st.stdout).unwrap_or_default();
            assert_eq!(
                doc["ping"]["replies"][0]["refused"], true,
                "the chain does not carry a connect to {dest}: {doc}"
            );
        }
        Some(c)
    }

    fn ns(&self, node: &str) -> String {
        format!("{}-{node}", self.tag)
    }

    /// `ip -n NS args`, which must succeed.
    fn ip(&self, node: &str, args: &[&str]) {
        let st = Command::new("ip")
            .arg("-n")
            .arg(self.ns(node))
            .args(args)
            .status()
            .unwrap();
        assert!(st.success(), "ip -n {} {}", self.ns(node), args.join(" "));
    }

    /// A program run inside a node, which must succeed.
    fn sh(&self, node: &str, program: &str, args: &[&str]) {
        let st = self.exec(node, program).args(args).status().unwrap();
        assert!(st.success(), "{program} {} in {node}", args.join(" "));
    }

    /// An nftables ruleset loaded in a node.
    fn nft(&self, node: &str, rules: &str) {
        let file = tmp("path-netns", &format!("{}-{node}.nft", self.tag));
        std::fs::write(&file, rules).unwrap();
        self.sh(node, "nft", &["-f", file.to_str().unwrap()]);
    }

    /// A command to run inside a node.
    fn exec(&self, node: &str, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns(node), program]);
        c
    }

    /// `goodput ARGS --json FILE` in the client's namespace: its output
    /// and result document.
    fn goodput(&self, name: &str, args: &[&str]) -> (Output, Value) {
        let json = tmp("path-netns", &format!("{}-{name}.json", self.tag));
        let out = self
            .exec("c", env!("CARGO_BIN_EXE_goodput"))
            .args(args)
            .arg("--json")
            .arg(&json)
            .output()
            .unwrap();
        let doc = result_doc(&json);
        (out, doc)
    }
}

impl Drop for Chain {
    fn drop(&mut self) {
        for n in NODES {
            let _ = Command::new("ip").args(["netns", "delete", &self.ns(n)]).status();
        }
    }
}

fn text(o: &Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A trace's hops as (hop, the address that answered or None).
fn hops_of(doc: &Value) -> Vec<(u64, Option<String>)> {
    doc["trace"]["hops"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            let addrs = h["addresses"].as_array().unwrap();
            assert!(addrs.len() <= 1, "one router per hop on this chain: {h}");
            (
                h["hop"].as_u64().unwrap(),
                addrs.first().map(|a| a.as_str().unwrap().to_owned()),
            )
        })
        .collect()
}

/// tracepath's hops, the hop that said `pmtu N` with N, and its Resume
/// line's pmtu and hops.
type TracepathView = (
    Vec<(u64, Option<String>)>,
    Option<(u64, u64)>,
    Option<u64>,
    Option<u64>,
);

/// tracepath's hops (the last line of each hop number: the one after a
/// `pmtu` line is the hop's own answer), the hop whose line says
/// `pmtu N` with N, and its Resume line's pmtu and hops.
fn tracepath_view(out: &str) -> TracepathView {
    let mut hops: Vec<(u64, Option<String>)> = Vec::new();
    let mut drop = None;
    let (mut pmtu, mut count) = (None, None);
    for line in out.lines() {
        let l = line.trim();
        if let Some(rest) = l.strip_prefix("Resume:") {
            let w: Vec<&str> = rest.split_whitespace().collect();
            let after = |k: &str| {
                w.iter()
                    .position(|x| *x == k)
                    .and_then(|i| w.get(i + 1))
                    .and_then(|v| v.parse().ok())
            };
            pmtu = after("pmtu");
            count = after("hops");
            continue;
        }
        let Some((n, rest)) = l.split_once(':') else {
            continue;
        };
        let Ok(n) = n.parse::<u64>() else { continue }; // "1?" is [LOCALHOST]
        let w: Vec<&str> = rest.split_whitespace().collect();
        let addr = match w.first() {
            Some(&"no") => None,
            Some(a) => Some(a.to_string()),
            None => continue,
        };
        if let Some(i) = w.iter().position(|x| *x == "pmtu") {
            drop = Some((n, w[i + 1].parse().unwrap()));
            continue;
        }
        hops.retain(|(h, _)| *h != n);
        hops.push((n, addr));
    }
    (hops, drop, pmtu, count)
}

/// traceroute's hops: the first address on each line, None for `* * *`.
fn traceroute_view(out: &str) -> Vec<(u64, Option<String>)> {
    out.lines()
        .skip(1)
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let n = w.first()?.parse().ok()?;
            let addr = w[1..]
                .iter()
                .find(|x| **x != "*" && x.contains(['.', ':']))
                .map(|a| a.to_string());
            Some((n, addr))
        })
        .collect()
}

fn some(a: &str) -> Option<String> {
    Some(a.to_owned())
}

/// The trace of the chain as it must come out, for a family.
fn expected(v6: bool) -> Vec<(u64, Option<String>)> {
    let a = |n: u8| match v6 {
        true => some(&format!("fd81:{n}::2")),
        false => some(&format!("10.81.{n}.2")),
    };
    vec![(1, None), (2, a(2)), (3, a(3)), (4, a(4))]
}

fn trace_and_compare(v6: bool) {
    let Some(chain) = Chain::make(if v6 { "t6" } else { "t4" }) else {
        return;
    };
    let dest = if v6 { "fd81:4::2" } else { "10.81.4.2" };
    let told_by = if v6 { "fd81:2::2" } else { "10.81.2.2" };
    // Debian's tracepath on the same chain, first: it keeps the kernel's
    // cached path MTU (goodput's probes ignore it), which a run before it
    // would have taught the kernel. The same hops, the same pmtu at the
    // same hop.
    if have("tracepath", &["-V"], "apt-get install iputils-tracepath") {
        let o = chain.exec("c", "tracepath").args(["-n", dest]).output().unwrap();
        let tp = String::from_utf8_lossy(&o.stdout).into_owned();
        let (hops, drop, pmtu, count) = tracepath_view(&tp);
        assert_eq!(hops, expected(v6), "tracepath:\n{tp}");
        assert_eq!(drop, Some((3, 1500)), "tracepath:\n{tp}");
        assert_eq!((pmtu, count), (Some(1500), Some(4)), "tracepath:\n{tp}");
    }
    // And traceroute: the same hops, `* * *` at the silent one.
    if have("traceroute", &["--version"], "apt-get install traceroute") {
        let fam = if v6 { "-6" } else { "-4" };
        let o = chain
            .exec("c", "traceroute")
            .args([fam, "-n", "-w", "1", dest])
            .output()
            .unwrap();
        let tr = String::from_utf8_lossy(&o.stdout).into_owned();
        assert_eq!(traceroute_view(&tr), expected(v6), "traceroute:\n{tr}");
        // And traceroute's own path MTU discovery: `F=N` where the size
        // changed, the interface's 9000 at hop 1 and 1500 at hop 3, as
        // goodput has it.
        let o = chain
            .exec("c", "traceroute")
            .args([fam, "-n", "--mtu", "-w", "1", dest])
            .output()
            .unwrap();
        let tr = String::from_utf8_lossy(&o.stdout).into_owned();
        let sizes: Vec<(u64, u64)> = tr
            .lines()
            .skip(1)
            .flat_map(|l| {
                let w: Vec<&str> = l.split_whitespace().collect();
                let hop: u64 = w.first().and_then(|h| h.parse().ok()).unwrap_or(0);
                w.iter()
                    .filter_map(|x| x.strip_prefix("F=")?.parse().ok())
                    .map(|f| (hop, f))
                    .collect::<Vec<_>>()
            })
            .collect();
        assert_eq!(sizes, vec![(1, 9000), (3, 1500)], "traceroute --mtu:\n{tr}");
    }
    let (out, doc) = chain.goodput("trace", &["trace", dest, "--pmtu", "-w", "500ms"]);
    let console = text(&out);
    assert_eq!(out.status.code(), Some(0), "{console}");
    let t = &doc["trace"];
    assert_eq!(doc["kind"], "trace");
    assert_eq!(hops_of(&doc), expected(v6), "{console}");
    assert_eq!(t["reached"], true);
    // The silent hop gave up at ten times the next hop's RTT, as
    // traceroute's NEAR does, not after the whole 500 ms.
    let took = doc["summary"]["duration_s"].as_f64().unwrap();
    assert!(took < 0.25, "{took} s");
    assert_eq!(t["hop_count"], 4);
    assert_eq!(t["back_hops"], 4);
    assert_eq!(t["local_mtu"], 9000);
    assert_eq!(t["pmtu"], 1500, "{console}");
    let h3 = &t["hops"][2];
    assert_eq!(h3["mtu"]["hop"], 3, "{h3}");
    assert_eq!(h3["mtu"]["mtu"], 1500, "{h3}");
    assert_eq!(h3["mtu"]["reported_by"], told_by, "{h3}");
    assert_eq!(h3["mtu"]["from_bytes"], 9000, "{h3}");
    // The silent hop is "no reply" on every probe; the rest answered all.
    for (i, h) in t["hops"].as_array().unwrap().iter().enumerate() {
        let answers: Vec<&str> = h["probes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["answer"].as_str().unwrap())
            .collect();
        let want = match i {
            0 => "no_reply",
            3 => "reached",
            _ => "time_exceeded",
        };
        assert_eq!(answers, vec![want; 3], "hop {}: {h}", i + 1);
    }
    // The console: traceroute's layout and tracepath's Resume line.
    assert!(console.contains(" 1  * * *"), "{console}");
    assert!(
        console.contains(&format!(" 3  {}", expected(v6)[2].1.as_ref().unwrap())),
        "{console}"
    );
    assert!(console.contains("pmtu 1500 (told by"), "{console}");
    assert!(console.contains("Resume: pmtu 1500 hops 4 back 4"), "{console}");
    assert!(
        console.contains(t["path_checksum"].as_str().unwrap()),
        "{console}"
    );

    // ICMP echo probes (this namespace allows ICMP sockets) and TCP SYN
    // probes find the same hops.
    chain.sh("c", "sysctl", &["-qw", "net.ipv4.ping_group_range=0 2147483647"]);
    let (out, icmp) = chain.goodput("icmp", &["trace", dest, "-M", "icmp", "--pmtu", "-w", "500ms"]);
    assert_eq!(hops_of(&icmp), expected(v6), "{}", text(&out));
    assert_eq!(icmp["trace"]["pmtu"], 1500);
    // Without the early give-up, the silent hop costs the whole wait.
    let (_, patient) = chain.goodput("patient", &["trace", dest, "-w", "500ms", "--wait-near", "0"]);
    assert!(patient["summary"]["duration_s"].as_f64().unwrap() >= 0.5);
    assert_eq!(hops_of(&patient), expected(v6));
    let (out, tcp) = chain.goodput("tcp", &["trace", dest, "-M", "tcp", "-p", "9", "-w", "500ms"]);
    assert_eq!(hops_of(&tcp), expected(v6), "{}", text(&out));
    assert_eq!(
        tcp["trace"]["hops"][3]["probes"][0]["code"], "reset",
        "nothing listens on port 9"
    );
    // One path, one checksum, whatever the probes were.
    assert_eq!(icmp["trace"]["path_checksum"], t["path_checksum"]);
    assert_eq!(tcp["trace"]["path_checksum"], t["path_checksum"]);
}

#[test]
fn trace_finds_the_hops_the_silent_router_and_the_mtu_drop_as_tracepath_and_traceroute_do() {
    trace_and_compare(false);
}

#[test]
fn trace_over_ipv6_finds_the_same() {
    trace_and_compare(true);
}

#[test]
fn the_path_checksum_follows_the_route_not_the_rtts() {
    let Some(chain) = Chain::make("rc") else { return };
    let trace = |name: &str| {
        let (out, doc) = chain.goodput(name, &["trace", "10.81.4.2", "-w", "2s"]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
        doc
    };
    let before = trace("before");
    let sum = before["trace"]["path_checksum"].as_str().unwrap().to_owned();
    let rtt_at_4 = |d: &Value| {
        let mut v: Vec<f64> = d["trace"]["hops"][3]["probes"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|p| p["rtt_us"].as_f64())
            .collect();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let quiet_rtt = rtt_at_4(&before);

    // Only the RTTs change: r2's link to r3 shaped to 1 Mbit/s behind a
    // queue of up to 400 ms, filled by 1,400-byte pings every 2 ms (5.6
    // Mbit/s) from the client.
    chain.ip("r2", &["link", "set", "l3", "txqueuelen", "1000"]);
    chain.sh(
        "r2",
        "tc",
        &[
            "qdisc", "add", "dev", "l3", "root", "tbf", "rate", "1mbit", "burst", "4kb", "latency", "400ms",
        ],
    );
    chain.sh("c", "sysctl", &["-qw", "net.ipv4.ping_group_range=0 2147483647"]);
    let mut filler = chain.exec("c", env!("CARGO_BIN_EXE_goodput"));
    filler.args([
        "ping",
        "10.81.4.2",
        "-M",
        "icmp",
        "-i",
        "2ms",
        "-c",
        "2500",
        "-s",
        "1400",
        "-W",
        "2s",
        "-v",
        "0",
    ]);
    let filler = Reaped::spawn(filler);
    std::thread::sleep(Duration::from_millis(600));
    let loaded = trace("loaded");
    drop(filler);
    let loaded_rtt = rtt_at_4(&loaded);
    assert!(
        loaded_rtt > quiet_rtt + 50_000.0,
        "the queue should hold the probes back: {quiet_rtt} µs quiet, {loaded_rtt} µs loaded"
    );
    assert_eq!(hops_of(&loaded), expected(false));
    assert_eq!(
        loaded["trace"]["path_checksum"],
        sum.as_str(),
        "RTTs alone must not change the checksum"
    );
    chain.sh("r2", "tc", &["qdisc", "del", "dev", "l3", "root"]);

    // r1's way to r3's and the server's networks.
    let route_r1_via = |via: &str| {
        for to in [3, 4] {
            chain.ip(
                "r1",
                &["route", "replace", &format!("10.81.{to}.0/24"), "via", via],
            );
        }
    };
    // The route moves: r1 sends towards r3 and the server through r4.
    route_r1_via("10.81.5.2");
    let moved = trace("moved");
    assert_eq!(
        hops_of(&moved),
        // r3 answers from the address it sends back from (Linux's way,
        // icmp_errors_use_inbound_ifaddr=0), on its link to r2 still.
        vec![
            (1, None),
            (2, some("10.81.5.2")),
            (3, some("10.81.3.2")),
            (4, some("10.81.4.2"))
        ],
        "{}",
        moved["trace"]
    );
    assert_ne!(
        moved["trace"]["path_checksum"],
        sum.as_str(),
        "a new router must change the checksum"
    );
    // And back: the first path's checksum again.
    route_r1_via("10.81.2.2");
    let back = trace("back");
    assert_eq!(back["trace"]["path_checksum"], sum.as_str());
}

#[test]
fn a_black_hole_is_found_where_the_mtu_drop_sends_no_icmp() {
    let Some(chain) = Chain::make("bh") else { return };
    // r2 no longer says "fragmentation needed": 9000-byte probes vanish.
    chain.nft(
        "r2",
        "table inet mute {\n chain out {\n  type filter hook output priority 0;\n  icmp type destination-unreachable icmp code frag-needed drop\n }\n}\n",
    );
    let (out, doc) = chain.goodput("bh", &["trace", "10.81.4.2", "--pmtu", "-w", "300ms"]);
    let console = text(&out);
    let t = &doc["trace"];
    assert_eq!(t["black_hole"]["hop"], 3, "{console}");
    assert_eq!(t["black_hole"]["lost_bytes"], 9000, "{console}");
    assert_eq!(t["black_hole"]["passed_bytes"], 1500, "{console}");
    assert_eq!(t["black_hole"]["exact"], true, "{console}");
    // Found in rounds timed by a small probe's answer, not probe by probe
    // at the full wait: the silent hops' 300 ms and little more.
    let took = doc["summary"]["duration_s"].as_f64().unwrap();
    assert!(took < 1.5, "{took} s");
    assert_eq!(t["pmtu"], 1500, "{console}");
    assert_eq!(t["reached"], true, "{console}");
    assert_eq!(hops_of(&doc), expected(false), "{console}");
    assert!(
        console.contains("Black hole : from hop 3 probes of 9000 bytes"),
        "{console}"
    );
    // Found after three silent hops, not after the last one.
    assert!(!console.contains(" 7  * * *"), "{console}");

    // A network no router has a route to is "!N" at r1, not a black hole.
    // Linux sends "no route" unreachables from a per-source token bucket
    // that earns a token a second and that its other ICMP errors to that
    // source drain (with icmp_ratelimit=0 they leave it empty): r1 has just
    // answered the trace above, so give it two seconds.
    std::thread::sleep(Duration::from_secs(2));
    let (out, doc) = chain.goodput(
        "nowhere",
        &["trace", "10.81.9.9", "--pmtu", "-w", "300ms", "-m", "6"],
    );
    let t = &doc["trace"];
    assert!(t["black_hole"].is_null(), "{}", text(&out));
    assert_eq!(t["reached"], false);
    assert_eq!(
        t["hops"].as_array().unwrap().len(),
        1,
        "an unreachable ends the trace: {t}"
    );
    assert_eq!(t["hops"][0]["probes"][0]["code"], "!N", "{t}");
    assert!(text(&out).contains(" 1  10.81.1.2  "), "{}", text(&out));

    // Every router silent (r2 still says "fragmentation needed"): three
    // silent hops, then the destination; no black hole, the MTU drop at
    // hop 3, and no hop past the destination.
    chain.sh("r2", "nft", &["delete", "table", "inet", "mute"]);
    for r in ["r2", "r3"] {
        chain.nft(
            r,
            "table inet silent {\n chain out {\n  type filter hook output priority 0;\n  icmp type time-exceeded drop\n }\n}\n",
        );
    }
    let (out, doc) = chain.goodput("all-silent", &["trace", "10.81.4.2", "--pmtu", "-w", "300ms"]);
    let t = &doc["trace"];
    assert_eq!(
        hops_of(&doc),
        vec![(1, None), (2, None), (3, None), (4, some("10.81.4.2"))],
        "{}",
        text(&out)
    );
    assert!(t["black_hole"].is_null(), "{}", text(&out));
    assert_eq!(
        (t["pmtu"].as_u64(), t["hop_count"].as_u64()),
        (Some(1500), Some(4))
    );
    assert_eq!(t["hops"][2]["mtu"]["reported_by"], "10.81.2.2", "{t}");
}

#[test]
fn ping_counts_exactly_and_runs_without_root() {
    let Some(chain) = Chain::make("pg") else { return };
    chain.sh("c", "sysctl", &["-qw", "net.ipv4.ping_group_range=0 2147483647"]);
    let (out, doc) = chain.goodput(
        "icmp",
        &["ping", "10.81.4.2", "-M", "icmp", "-c", "10", "-i", "20ms"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let p = &doc["ping"];
    assert_eq!(
        (p["sent"].as_u64(), p["received"].as_u64(), p["lost"].as_u64()),
        (Some(10), Some(10), Some(0))
    );
    assert_eq!(p["method"], "icmp");
    assert_eq!(p["replies"][0]["ttl"], 61, "three routers on the way back");
    // A big reply is counted whole (r2's MTU 1500 fragments it).
    let (out, big) = chain.goodput(
        "big",
        &[
            "ping",
            "fd81:4::2",
            "-M",
            "icmp",
            "-c",
            "3",
            "-i",
            "50ms",
            "-s",
            "4000",
        ],
    );
    let answered: Vec<u64> = big["ping"]["replies"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["bytes"].as_u64())
        .collect();
    assert!(
        !answered.is_empty() && answered.iter().all(|b| *b == 4008),
        "{}",
        text(&out)
    );
    let rtt = &p["rtt"];
    assert!(rtt["min_us"].as_f64().unwrap() <= rtt["avg_us"].as_f64().unwrap());
    assert!(rtt["avg_us"].as_f64().unwrap() <= rtt["max_us"].as_f64().unwrap());

    // r2 drops every second echo request: exactly half are lost, and the
    // lost ones are the even ones.
    chain.nft(
        "r2",
        "table inet halve {\n chain relay {\n  type filter hook forward priority 0;\n  icmp type echo-request numgen inc mod 2 == 1 drop\n }\n}\n",
    );
    let (out, doc) = chain.goodput(
        "halved",
        &[
            "ping",
            "10.81.4.2",
            "-M",
            "icmp",
            "-c",
            "10",
            "-i",
            "20ms",
            "-W",
            "300ms",
        ],
    );
    let p = &doc["ping"];
    assert_eq!(
        (p["received"].as_u64(), p["lost"].as_u64()),
        (Some(5), Some(5)),
        "{}",
        text(&out)
    );
    assert_eq!(p["loss_percent"], 50.0);
    let answered: Vec<u64> = p["replies"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["rtt_us"].is_number())
        .map(|r| r["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(answered, vec![1, 3, 5, 7, 9]);
    chain.sh("r2", "nft", &["delete", "table", "inet", "halve"]);

    // Ctrl-C keeps what was measured: the replies so far, the hops so far.
    let json = tmp("path-netns", &format!("{}-int.json", chain.tag));
    let mut cmd = chain.exec("c", env!("CARGO_BIN_EXE_goodput"));
    cmd.args([
        "ping",
        "10.81.4.2",
        "-M",
        "icmp",
        "-c",
        "1000",
        "-i",
        "50ms",
        "-v",
        "0",
        "--json",
    ])
    .arg(&json);
    let child = Reaped::spawn(cmd);
    std::thread::sleep(Duration::from_millis(1000));
    let (code, out, err) = child.stop(libc::SIGINT);
    assert_eq!(code, Some(130), "{out}{err}");
    let doc = result_doc(&json);
    assert_eq!(doc["end"], "interrupted");
    let p = &doc["ping"];
    let got = p["received"].as_u64().unwrap();
    assert!((10..=25).contains(&got), "about 20 answered in a second: {p}");
    assert_eq!(p["lost"], 0, "a request still waiting is not lost: {p}");
    // UDP past r2 dropped: hops 3 and 4 are silent for 20 s; hop 2
    // answered, and silent hop 1 gave up at ten times hop 2's RTT.
    chain.nft(
        "r2",
        "table inet nothrough {\n chain relay {\n  type filter hook forward priority 0;\n  meta l4proto udp drop\n }\n}\n",
    );
    let json = tmp("path-netns", &format!("{}-int-trace.json", chain.tag));
    let mut cmd = chain.exec("c", env!("CARGO_BIN_EXE_goodput"));
    cmd.args(["trace", "10.81.4.2", "-w", "20s", "-m", "4", "--json"])
        .arg(&json);
    let child = Reaped::spawn(cmd);
    std::thread::sleep(Duration::from_millis(1000));
    let started = std::time::Instant::now();
    let (code, out, err) = child.stop(libc::SIGINT);
    assert!(started.elapsed() < Duration::from_secs(5), "it stopped at once");
    assert_eq!(code, Some(130), "{out}{err}");
    let doc = result_doc(&json);
    assert_eq!(doc["end"], "interrupted");
    assert_eq!(
        hops_of(&doc),
        vec![(1, None), (2, some("10.81.2.2"))],
        "hops 3 and 4 were still waiting: {}",
        doc["trace"]
    );
    chain.sh("r2", "nft", &["delete", "table", "inet", "nothrough"]);

    // As nobody, where ICMP sockets are not open to nobody's group: auto
    // times TCP connects instead and says why; a trace (UDP) needs nothing.
    chain.sh("c", "sysctl", &["-qw", "net.ipv4.ping_group_range=1 0"]);
    let bin = tmp("path-netns", &format!("{}-goodput", chain.tag));
    std::fs::copy(env!("CARGO_BIN_EXE_goodput"), &bin).unwrap();
    for dir in [bin.as_path(), bin.parent().unwrap()] {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let nobody = |args: &[&str]| {
        let mut c = chain.exec("c", "setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(&bin)
            .args(args);
        // Nobody cannot write the scratch directory: the document comes
        // on standard output.
        c.args(["--json", "-"]).output().unwrap()
    };
    let o = nobody(&["ping", "10.81.4.2", "-c", "3", "-i", "20ms", "-p", "22"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let doc: Value = serde_json::from_slice(&o.stdout).unwrap();
    let p = &doc["ping"];
    assert_eq!(p["method"], "tcp");
    assert_eq!(
        (p["received"].as_u64(), p["errors"].as_u64()),
        (Some(0), Some(3)),
        "a reset is no answer: {p}"
    );
    assert!(p["replies"][0]["refused"].as_bool().unwrap());
    assert!(
        p["fallback"]
            .as_str()
            .unwrap()
            .contains("net.ipv4.ping_group_range (1 0)"),
        "{p}"
    );
    let o = nobody(&["ping", "10.81.4.2", "-M", "icmp", "-c", "1"]);
    assert_ne!(o.status.code(), Some(0));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("ICMP echo sockets are not open to this user"),
        "{}",
        text(&o)
    );
    let o = nobody(&["trace", "10.81.4.2", "--pmtu", "-w", "300ms"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let doc: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(hops_of(&doc), expected(false));
    assert_eq!(doc["trace"]["pmtu"], 1500);
}
