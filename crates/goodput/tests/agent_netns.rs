//! Four agents, each in its own network namespace, joined by veth pairs
//! to a bridge in a fifth: a full mesh of exclusive TCP throughput
//! (`duration`) and background STAMP on a compressed schedule. Over the
//! run no two exclusive runs overlap on any agent, every due run is
//! accounted for, and every result is in both ends' archives and APIs.
//! The test reaches the agents' APIs from the bridge's namespace (its
//! thread joins it with setns).
//!
//! Making namespaces needs root (CAP_NET_ADMIN) and iproute2: without them
//! the test says so and passes, except under CI=true, where it fails.

mod common;

use common::agents::{check_mesh, get_json, mesh_config, Agent, Ports};
use common::have;
use std::process::Command;
use std::time::Duration;

/// The namespaces and links; removed when dropped.
struct Lan {
    bridge: String,
    agents: Vec<String>,
}

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Lan {
    /// `None` (after saying why) where namespaces cannot be made.
    fn make(n: usize) -> Option<Self> {
        let ci = std::env::var_os("CI").is_some();
        // SAFETY: geteuid only reads the process's credentials.
        if unsafe { libc::geteuid() } != 0 {
            assert!(!ci, "the namespace tests need root in CI");
            eprintln!("not root: skipping the namespace test");
            return None;
        }
        if !have("ip", &["-V"], "apt-get install iproute2") {
            return None;
        }
        let id = std::process::id();
        let lan = Lan {
            bridge: format!("gp-br-{id}"),
            agents: (1..=n).map(|i| format!("gp-ag{i}-{id}")).collect(),
        };
        ip(&["netns", "add", &lan.bridge]);
        let br = |args: &[&str]| {
            let mut v = vec!["netns", "exec", &lan.bridge, "ip"];
            v.extend_from_slice(args);
            ip(&v);
        };
        br(&["link", "add", "br0", "type", "bridge"]);
        br(&["addr", "add", "10.77.0.254/24", "dev", "br0"]);
        br(&["link", "set", "br0", "up"]);
        br(&["link", "set", "lo", "up"]);
        for (i, ns) in lan.agents.iter().enumerate() {
            ip(&["netns", "add", ns]);
            let port = format!("p{}", i + 1);
            br(&[
                "link", "add", &port, "type", "veth", "peer", "name", "eth0", "netns", ns,
            ]);
            br(&["link", "set", &port, "master", "br0", "up"]);
            let addr = format!("10.77.0.{}/24", i + 1);
            ip(&["-n", ns, "addr", "add", &addr, "dev", "eth0"]);
            ip(&["-n", ns, "link", "set", "eth0", "up"]);
            ip(&["-n", ns, "link", "set", "lo", "up"]);
        }
        Some(lan)
    }

    /// Moves this thread into the bridge's namespace.
    fn enter_bridge(&self) {
        let f = std::fs::File::open(format!("/var/run/netns/{}", self.bridge)).unwrap();
        use std::os::fd::AsRawFd;
        // SAFETY: setns on a namespace file this test made; only this
        // thread changes namespace.
        let rc = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(rc, 0, "setns: {}", std::io::Error::last_os_error());
    }
}

impl Drop for Lan {
    fn drop(&mut self) {
        for ns in self.agents.iter().chain(std::iter::once(&self.bridge)) {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

#[test]
fn four_agents_in_namespaces_share_a_mesh() {
    let Some(lan) = Lan::make(4) else {
        return;
    };
    lan.enter_bridge();
    let ports = Ports {
        api: 8780,
        beacon: 4444,
        stamp: 862,
    };
    let names = ["a", "b", "c", "d"];
    let ips = ["10.77.0.1", "10.77.0.2", "10.77.0.3", "10.77.0.4"];
    // Twelve throughput pairs, 3 s booked each (1 s and the margin), due
    // every 30 s with 25 s of slip: two runs at a time fit (disjoint
    // pairs), so the mesh is busy but can place them.
    // And STAMP on a cron schedule, every minute on the minute.
    let cron = "[schedules.each-minute]\ncron = \"* * * * *\"\n\n[tasks.minutely]\ngroup = \"all\"\ntest = \"latency\"\nschedule = \"each-minute\"\n";
    let config = mesh_config("agent-netns", &names, &ips, ports, 30, 25, cron);
    let mut agents: Vec<Agent> = names
        .iter()
        .zip(ips)
        .zip(&lan.agents)
        .map(|((n, ip), ns)| Agent::start_in(Some(ns), "agent-netns", n, ip, &config, ports, &[]))
        .collect();
    std::thread::sleep(Duration::from_secs(100));
    let (tcp, stamp, non_starts) = check_mesh(
        &agents,
        ports,
        &[("throughput", 30), ("latency", 30), ("minutely", 60)],
    );
    // The cron task ran on the minute for every pair (100 s hold at least
    // one minute's turn).
    let mut minutely: Vec<String> = agents
        .iter()
        .zip(ips)
        .flat_map(|(_, ip)| {
            get_json(
                ip,
                ports.api,
                "/api/v1/runs?kind=stamp&state=finished&limit=10000",
            )
            .as_array()
            .unwrap()
            .clone()
        })
        .filter(|r| r["task"] == "minutely")
        .map(|r| {
            let id = r["id"].as_str().unwrap();
            let base: u64 = id.rsplit('/').next().unwrap().parse().unwrap();
            assert_eq!(base % 60_000, 0, "run {id} is not on a minute");
            format!("{}>{}", r["source"], r["dest"])
        })
        .collect();
    minutely.sort();
    minutely.dedup();
    assert_eq!(minutely.len(), 12, "cron runs for {minutely:?} only");
    eprintln!("finished: {tcp} throughput, {stamp} latency; {non_starts} non-starts");
    // In 100 s each of the twelve pairs is due three or four times.
    assert!(tcp >= 12, "only {tcp} throughput runs finished");
    assert!(stamp >= 24, "only {stamp} latency runs finished");
    for (a, ip) in agents.iter().zip(ips) {
        let h = get_json(ip, ports.api, "/api/v1/health");
        assert_eq!(h["identity"], serde_json::json!([a.name]), "{h}");
        assert!(h["config_error"].is_null(), "{h}");
    }
    for a in &mut agents {
        a.stop(libc::SIGTERM);
        assert!(a.log_text().contains("stopped"), "{}", a.log_text());
    }
}
