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
use common::netns::Lan;
use std::time::Duration;

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
