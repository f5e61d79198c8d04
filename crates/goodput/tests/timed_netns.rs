//! Timed TCP tests (`--duration`, `--omit`) between two network namespaces
//! joined by a veth pair, each end shaped with `tbf rate 100mbit`: the
//! receivers' good-put against the physical limit of the path and against
//! Debian's iperf3 on the same path in the same test.
//!
//! Making namespaces needs root (CAP_NET_ADMIN) and iproute2: without them
//! the test says so and passes, except under CI=true, where it fails.

mod common;

use common::{have, result_doc, tmp, Reaped};
use std::process::Command;
use std::time::Duration;

/// The shaped rate of each veth end, bits/s.
const RATE: f64 = 100e6;
/// Payload per full segment: the 1500-byte MTU less IPv4 (20), TCP (20)
/// and its timestamp option (12).
const MSS: f64 = 1448.0;
/// Bytes tbf counts per full segment: the payload, 52 bytes of headers and
/// the 14-byte Ethernet header.
const FRAME: f64 = 1514.0;
/// A pure ACK as tbf counts it (Ethernet, IPv4, TCP with timestamps).
const ACK_FRAME: f64 = 66.0;

/// The most good-put one direction can carry, bits/s.
fn one_way_limit() -> f64 {
    RATE * MSS / FRAME
}

/// In duplex each link also carries the other direction's ACKs: one per
/// two segments (Linux's delayed ACK), when they do not ride on data.
fn duplex_limit() -> f64 {
    RATE * MSS / (FRAME + ACK_FRAME / 2.0)
}

/// Two namespaces joined by a shaped veth pair; removed when dropped.
struct Path {
    a: String,
    b: String,
}

impl Path {
    /// `None` (after saying why) where namespaces cannot be made.
    fn make() -> Option<Self> {
        let ci = std::env::var_os("CI").is_some();
        // SAFETY: geteuid only reads the process's credentials.
        if unsafe { libc::geteuid() } != 0 {
            assert!(!ci, "the namespace tests need root in CI");
            eprintln!("not root: skipping the namespace tests");
            return None;
        }
        if !have("ip", &["-V"], "apt-get install iproute2")
            || !have("tc", &["-V"], "apt-get install iproute2")
        {
            return None;
        }
        let id = std::process::id();
        let p = Path {
            a: format!("gp-a-{id}"),
            b: format!("gp-b-{id}"),
        };
        let (va, vb) = (format!("gpa{id}"), format!("gpb{id}"));
        let steps: Vec<Vec<&str>> = vec![
            vec!["netns", "add", &p.a],
            vec!["netns", "add", &p.b],
            vec!["link", "add", &va, "type", "veth", "peer", "name", &vb],
            vec!["link", "set", &va, "netns", &p.a],
            vec!["link", "set", &vb, "netns", &p.b],
            vec!["-n", &p.a, "addr", "add", "10.77.0.1/24", "dev", &va],
            vec!["-n", &p.b, "addr", "add", "10.77.0.2/24", "dev", &vb],
            vec!["-n", &p.a, "link", "set", &va, "up"],
            vec!["-n", &p.b, "link", "set", &vb, "up"],
            vec!["-n", &p.a, "link", "set", "lo", "up"],
            vec!["-n", &p.b, "link", "set", "lo", "up"],
        ];
        for s in steps {
            let ok = Command::new("ip").args(&s).status().is_ok_and(|st| st.success());
            if !ok {
                assert!(!ci, "cannot make the test namespaces: ip {}", s.join(" "));
                eprintln!("cannot make network namespaces (ip {}): skipping", s.join(" "));
                return None;
            }
        }
        for (ns, dev) in [(&p.a, &va), (&p.b, &vb)] {
            p.shape(ns, dev, "add", "100mbit");
        }
        Some(p)
    }

    /// Sets (`add` or `change`) the tbf shaper of one end.
    fn shape(&self, ns: &str, dev: &str, verb: &str, rate: &str) {
        let st = Command::new("tc")
            .args(["-n", ns, "qdisc", verb, "dev", dev, "root", "tbf", "rate", rate])
            .args(["burst", "64kb", "latency", "50ms"])
            .status()
            .unwrap();
        assert!(st.success(), "tc qdisc {verb} {rate} on {dev}");
    }

    /// A command run inside namespace `ns`.
    fn exec(&self, ns: &str, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns, program]);
        c
    }
}

impl Drop for Path {
    fn drop(&mut self) {
        // Deleting a namespace deletes its end of the veth pair, and so both.
        for ns in [&self.a, &self.b] {
            let _ = Command::new("ip").args(["netns", "delete", ns]).status();
        }
    }
}

/// Runs goodput's timed client in A against the server in B and returns
/// its result document.
fn goodput_run(path: &Path, name: &str, args: &[&str]) -> serde_json::Value {
    let json = tmp("timed-netns", &format!("{name}.json"));
    let out = path
        .exec(&path.a, env!("CARGO_BIN_EXE_goodput"))
        .args(["tcp", "10.77.0.2", "--port", "5201", "-v", "1", "--json"])
        .arg(&json)
        .args(args)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "goodput {args:?}: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("(receiver side)"), "{stdout}");
    let doc = result_doc(&json);
    let s = &doc["summary"];
    let conns = doc["connections"].as_array().unwrap();
    // Every connection of a timed run ends successful, and both ends'
    // counts agree exactly.
    assert_eq!(s["successful"].as_u64(), Some(conns.len() as u64), "{s}");
    for c in conns {
        assert_eq!(c["outcome"]["status"], "succeeded", "{c}");
        assert_eq!(c["peer"]["received_bytes"], c["sent_bytes"], "{c}");
        assert_eq!(c["peer"]["sent_bytes"], c["received_bytes"], "{c}");
    }
    doc
}

/// iperf3's receiver figures (client→server, server→client), bits/s.
fn iperf3_run(path: &Path, args: &[&str]) -> (f64, f64) {
    let server = Reaped::spawn({
        let mut c = path.exec(&path.b, "iperf3");
        c.args(["-s", "-1", "-p", "5301"]);
        c
    });
    std::thread::sleep(Duration::from_millis(500));
    let out = path
        .exec(&path.a, "iperf3")
        .args(["-c", "10.77.0.2", "-p", "5301", "-t", "10", "-J"])
        .args(args)
        .output()
        .unwrap();
    let _ = server.wait(Duration::from_secs(5));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("iperf3 -J");
    let end = &v["end"];
    let received = end["sum_received"]["bits_per_second"].as_f64().unwrap();
    let reverse = end["sum_received_bidir_reverse"]["bits_per_second"].as_f64();
    match (args.contains(&"-R"), reverse) {
        (_, Some(r)) => (received, r),
        (true, None) => (0.0, received),
        (false, None) => (received, 0.0),
    }
}

/// The receiver-side good-put of one direction of a result, bits/s.
fn goodput_of(doc: &serde_json::Value, dir: &str) -> f64 {
    doc["summary"]["timed"][dir]["bytes_per_second"]
        .as_f64()
        .unwrap_or_else(|| panic!("no {dir} figure: {}", doc["summary"]))
        * 8.0
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn within(what: &str, got: f64, want: f64, tolerance: f64) {
    let off = (got / want - 1.0).abs();
    assert!(
        off <= tolerance,
        "{what}: {:.2} Mbit/s is {:.2}% from {:.2} Mbit/s (allowed {:.1}%)",
        got / 1e6,
        off * 100.0,
        want / 1e6,
        tolerance * 100.0
    );
    eprintln!(
        "{what}: {:.2} Mbit/s, {:.2}% from {:.2} Mbit/s",
        got / 1e6,
        off * 100.0,
        want / 1e6
    );
}

#[test]
fn timed_tests_measure_the_shaped_path_as_iperf3_does() {
    if !have("iperf3", &["--version"], "apt-get install iperf3") {
        return;
    }
    let Some(path) = Path::make() else { return };
    let server = Reaped::spawn({
        let mut c = path.exec(&path.b, env!("CARGO_BIN_EXE_goodput"));
        c.args(["server", "--port", "5201", "--no-udp", "-v", "0"]);
        c
    });
    std::thread::sleep(Duration::from_millis(500));

    // Push, pull, four connections (their sum) and duplex, each against
    // the path's limit and iperf3's receiver on the same path.
    // (name, goodput's flags, iperf3's flags, directions, the path's limit)
    type Case = (
        &'static str,
        &'static [&'static str],
        &'static [&'static str],
        &'static str,
        f64,
    );
    let cases: [Case; 4] = [
        ("push", &["-c", "1"], &[], "up", one_way_limit()),
        (
            "pull",
            &["-c", "1", "--pattern", "pull"],
            &["-R"],
            "down",
            one_way_limit(),
        ),
        ("four", &["-c", "4"], &["-P", "4"], "up", one_way_limit()),
        (
            "duplex",
            &["-c", "1", "--pattern", "duplex"],
            &["--bidir"],
            "both",
            duplex_limit(),
        ),
    ];
    for (name, ours, theirs, dir, limit) in cases {
        let mut args = ours.to_vec();
        args.extend(["--duration", "10s"]);
        let dirs: &[&str] = match dir {
            "up" => &["up"],
            "down" => &["down"],
            _ => &["up", "down"],
        };
        // Duplex varies from run to run by about ±0.7% with either tool
        // (how many ACKs ride on data rather than taking a frame of their
        // own): three runs of each, alternated, and their medians.
        let runs = if dir == "both" { 3 } else { 1 };
        let mut figures: Vec<(Vec<f64>, Vec<f64>)> = vec![(Vec::new(), Vec::new()); dirs.len()];
        for _ in 0..runs {
            let doc = goodput_run(&path, name, &args);
            let (up, down) = iperf3_run(&path, theirs);
            for (i, d) in dirs.iter().enumerate() {
                figures[i].0.push(goodput_of(&doc, d));
                figures[i].1.push(if *d == "up" { up } else { down });
            }
        }
        let (mut our_sum, mut their_sum) = (0.0, 0.0);
        for (d, (ours, iperf3)) in dirs.iter().zip(figures) {
            let (ours, iperf3) = (median(ours), median(iperf3));
            within(&format!("{name} {d} against the path's limit"), ours, limit, 0.01);
            // One duplex direction of either tool moves by up to ±0.7%
            // from run to run (iperf3 --bidir: 93.2–94.5 Mbit/s in six
            // runs): a direction is held to 2% of iperf3's, the two
            // directions' sum, which the ACKs' share does not move, to 1%.
            let tolerance = if dirs.len() > 1 { 0.02 } else { 0.01 };
            within(
                &format!("{name} {d} against iperf3's receiver"),
                ours,
                iperf3,
                tolerance,
            );
            our_sum += ours;
            their_sum += iperf3;
        }
        if dirs.len() > 1 {
            within(
                &format!("{name}, both directions, against iperf3's"),
                our_sum,
                their_sum,
                0.01,
            );
        }
    }

    // A warm-up: the first 2 s of the path at 20 Mbit/s, then 100 Mbit/s.
    // With --omit 3s the rate is the full path's; the bytes of the slow
    // start are still received, verified and counted.
    let dev = format!("gpa{}", std::process::id());
    path.shape(&path.a, &dev, "change", "20mbit");
    let shaper = {
        let (ns, dev) = (path.a.clone(), dev.clone());
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(2));
            Command::new("tc")
                .args(["-n", &ns, "qdisc", "change", "dev", &dev, "root", "tbf"])
                .args(["rate", "100mbit", "burst", "64kb", "latency", "50ms"])
                .status()
                .unwrap()
        })
    };
    let doc = goodput_run(&path, "omit", &["-c", "1", "--duration", "10s", "--omit", "3s"]);
    assert!(shaper.join().unwrap().success());
    let c = &doc["connections"][0];
    let up = &c["timed"]["up"];
    let bytes = up["bytes"].as_u64().unwrap();
    let warm = up["warm_up_bytes"].as_u64().unwrap();
    assert_eq!(
        bytes,
        c["sent_bytes"].as_u64().unwrap(),
        "every byte counted: {c}"
    );
    assert_eq!(bytes, c["peer"]["received_bytes"].as_u64().unwrap());
    assert_eq!(
        doc["summary"]["timed"]["up"]["warm_up_bytes"].as_u64(),
        Some(warm)
    );
    let after = goodput_of(&doc, "up");
    within("after a 3 s warm-up", after, one_way_limit(), 0.01);
    let all_in = bytes as f64 * 8.0 / (up["elapsed_ns"].as_f64().unwrap() / 1e9);
    assert!(
        all_in < 0.9 * after,
        "the warm-up's slow seconds must lower the all-in rate: {all_in} against {after}"
    );
    // 2 s at 20 Mbit/s and 1 s at 100 Mbit/s, about 17 MB, in the warm-up.
    let expected_warm = (2.0 * 20e6 + 1.0 * 100e6) / 8.0 * MSS / FRAME;
    let ratio = warm as f64 / expected_warm;
    assert!(
        (0.85..1.15).contains(&ratio),
        "warm-up bytes {warm} against {expected_warm}"
    );
    drop(server);
}
