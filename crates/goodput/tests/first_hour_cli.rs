//! The first hour of a new user at the command line (issue 43, "One-shot
//! tests"): the default test against a remote host is short and says how
//! far it got, a missing server is one clear line and not a thousand,
//! a failed assertion is named on standard error at every verbosity, and
//! the summaries carry units without noise.

mod common;

use common::netns::Lan;
use common::{free_tcp_port, run, tmp, wait_tcp_listening, Reaped};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_goodput");

/// Held while a test has its namespaces: `Lan` names them by process, so
/// two tests of this process cannot have theirs at once.
static NAMESPACES: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Lines of `text` that contain `needle`.
fn count(text: &str, needle: &str) -> usize {
    text.lines().filter(|l| l.contains(needle)).count()
}

/// Whether `line` has a parenthesis inside another.
fn nested(line: &str) -> bool {
    let mut depth = 0;
    for c in line.chars() {
        match c {
            '(' if depth > 0 => return true,
            '(' => depth += 1,
            ')' => depth -= 1,
            _ => {}
        }
    }
    false
}

/// A remote host with no size is iperf3's 10-second timed test, with a
/// status line every second that counts the time left; loopback and an
/// explicit size keep ctsTraffic's 8 × 1 GiB. Run between two network
/// namespaces, so the host is a real address off loopback.
#[test]
fn a_remote_host_gets_a_short_timed_test() {
    // What the flags choose, without a network.
    let spec = |args: &[&str]| -> serde_json::Value {
        let mut all = vec!["tcp"];
        all.extend_from_slice(args);
        all.push("--print-spec");
        let (code, out, err) = run(&all);
        assert_eq!(code, Some(0), "{err}");
        serde_json::from_str(&out).unwrap()
    };
    let remote = spec(&["192.0.2.7"]);
    assert_eq!(remote["duration"], "10s", "{remote}");
    assert_eq!(remote["status_interval"], "1s", "{remote}");
    for args in [
        &["127.0.0.1"][..],
        &["::1"],
        &["localhost"],
        &[],
        &["192.0.2.7", "--transfer", "1GiB"],
        &["192.0.2.7", "--pattern", "pushpull"],
    ] {
        let s = spec(args);
        assert!(s.get("duration").is_none(), "{args:?}: {s}");
        assert_eq!(s["transfer"], "1GiB", "{args:?}: {s}");
        assert_eq!(s["status_interval"], "5s", "{args:?}: {s}");
    }
    let (_, help, _) = run(&["tcp", "--help"]);
    assert!(help.contains("runs a timed test of --duration 10s"), "{help}");

    let _held = NAMESPACES.lock().unwrap_or_else(|e| e.into_inner());
    let Some(lan) = Lan::make(1) else { return };
    let (server_ns, client_ns) = (&lan.agents[0], &lan.bridge);
    let port = free_tcp_port().to_string();
    let _server = Reaped(Some(
        Command::new("ip")
            .args(["netns", "exec", server_ns, BIN, "server", "-p", &port, "-v", "0"])
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    ));
    std::thread::sleep(Duration::from_millis(500));
    let json = tmp("first-hour", "timed.json");
    let started = Instant::now();
    let out = Command::new("ip")
        .args(["netns", "exec", client_ns, BIN, "tcp", "10.77.0.1", "-p", &port])
        .args(["-c", "2", "--json", json.to_str().unwrap()])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let took = started.elapsed();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Ten seconds and a little setup, not 2 × 1 GiB at whatever the path
    // carries.
    assert!(
        took >= Duration::from_secs(10) && took < Duration::from_secs(25),
        "{took:?}"
    );
    assert!(stdout.contains("Duration per connection    10.000 s"), "{stdout}");
    assert!(stdout.contains("Status interval            1000 ms"), "{stdout}");
    // A status line a second, each with the time left, down to none.
    let left: Vec<&str> = stdout.lines().filter(|l| l.ends_with(" s left")).collect();
    assert!((8..=13).contains(&left.len()), "{stdout}");
    assert!(left.first().unwrap().ends_with("  9 s left"), "{stdout}");
    assert!(left.last().unwrap().ends_with("  0 s left"), "{stdout}");
    let doc = common::result_doc(&json);
    assert_eq!(doc["summary"]["successful"], 2, "{doc}");
}

/// A sized test's status line counts the bytes done of the total.
#[test]
fn a_sized_test_counts_bytes_done_of_the_total() {
    let (code, out, err) = run(&[
        "tcp",
        "--transfer",
        "4MiB",
        "-c",
        "2",
        "--status-interval",
        "100ms",
        "--rate-limit",
        "20MB/s",
    ]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(count(&out, "Progress") >= 1, "{out}");
    let progress: Vec<&str> = out.lines().filter(|l| l.ends_with(" of 8 MiB")).collect();
    assert!(progress.len() >= 2, "{out}");
    // The last line has (about) everything: the rates it sums are rounded
    // to whole bytes per second.
    let last = progress.last().unwrap();
    assert!(last.contains("8 MiB of 8 MiB") || last.contains("7.9"), "{out}");
}

/// Nothing listening: 1,000 refused echo connections are one line with
/// their count and the server to start, not 1,000 lines; a TCP test is a
/// start failure (exit 3) that names the server to run.
#[test]
fn a_missing_server_is_one_line_that_names_it() {
    let port = free_tcp_port().to_string();
    let target = format!("127.0.0.1:{port}");
    let (_, out, err) = run(&["echo", &target]);
    assert_eq!(count(&out, "ECONNREFUSED"), 1, "{out}{err}");
    assert!(
        out.contains(&format!(
            "ECONNREFUSED during connect: Connection refused × 1000 ({target}): is `goodput server --echo` running there?"
        )),
        "{out}"
    );

    let (code, out, err) = run(&["tcp", "127.0.0.1", "-p", &port]);
    assert_eq!(code, Some(3), "{out}{err}");
    assert_eq!(count(&out, "ECONNREFUSED"), 1, "{out}");
    assert!(out.contains("× 8 ("), "{out}");
    assert!(
        err.contains(&format!(
            "goodput: error: nothing listens on TCP {target}: start `goodput server` there (or `goodput server --tcp`)"
        )),
        "{err}"
    );
    // A test that did start and lost some connections is no start failure.
    let server_port = free_tcp_port();
    let _server = Reaped(Some(
        common::goodput()
            .args(["server", "-p", &server_port.to_string(), "-v", "0"])
            .spawn()
            .unwrap(),
    ));
    wait_tcp_listening(server_port);
    let (code, out, err) = run(&[
        "tcp",
        "127.0.0.1",
        "--target",
        &target,
        "-p",
        &server_port.to_string(),
        "--transfer",
        "1MiB",
    ]);
    assert_ne!(code, Some(3), "{out}{err}");
}

/// A failed --assert is one line on standard error at every verbosity,
/// with the measured value in units; the exit status stays 4.
#[test]
fn a_failed_assertion_is_named_on_standard_error() {
    for v in ["0", "1", "2", "5"] {
        let (code, out, err) = run(&[
            "tcp",
            "--transfer",
            "1MiB",
            "-c",
            "1",
            "-v",
            v,
            "--assert",
            "goodput < 1bit",
            "--assert",
            "goodput > 1bit",
        ]);
        assert_eq!(code, Some(4), "-v {v}: {out}{err}");
        assert_eq!(count(&err, "assertion failed"), 1, "-v {v}: {err}");
        let line = err.lines().find(|l| l.contains("assertion failed")).unwrap();
        assert!(
            line.starts_with("goodput: assertion failed: goodput < 1bit (measured "),
            "{line}"
        );
        assert!(line.ends_with("bit/s)"), "{line}");
    }
}

/// The summaries: sizes in one form, no direction that moved nothing, the
/// legend only at -v 5; iperf3's table in iperf3's units; an idle server
/// silent; a server's iperf3 tests counted.
#[test]
fn summaries_carry_units_without_noise() {
    // 3 MiB + 1 B: not a whole unit, where the exact count used to nest.
    let (code, out, err) = run(&["tcp", "--transfer", "3145729", "-c", "1"]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        out.contains("  Total Bytes Sent : 3.00 MiB   Total Bytes Recv : "),
        "{out}"
    );
    let goodput = out.lines().find(|l| l.starts_with("  Good-put : ")).unwrap();
    assert!(
        goodput.contains("sent ") && !goodput.contains("received"),
        "{goodput}"
    );
    for line in out.lines() {
        assert!(!nested(line), "nested parentheses: {line}");
    }
    assert!(!out.contains("* TimeSlice"), "{out}");
    assert_eq!(count(&out, "Legend"), 1, "{out}");
    let (_, out, _) = run(&["tcp", "--transfer", "1MiB", "-c", "1", "-v", "5"]);
    assert!(
        out.contains("* TimeSlice - seconds since the run started"),
        "{out}"
    );

    // One server: idle first, then an iperf3 test against it.
    let (port, iperf3_port) = (free_tcp_port(), free_tcp_port());
    let server = common::goodput()
        .args(["server", "-p", &port.to_string(), "--iperf3", "--iperf3-port"])
        .arg(iperf3_port.to_string())
        .args(["--status-interval", "100ms", "--time-limit", "4s"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    wait_tcp_listening(iperf3_port);
    std::thread::sleep(Duration::from_millis(800));
    let (code, out, err) = run(&[
        "iperf3",
        "127.0.0.1",
        "-p",
        &iperf3_port.to_string(),
        "-t",
        "1",
        "-b",
        "40M",
    ]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains(" MBytes "), "{out}");
    assert!(!out.contains(" B blocks"), "{out}");
    let server = server.wait_with_output().unwrap();
    let served = String::from_utf8_lossy(&server.stdout);
    // Idle: no interval of zeros, no status line at all.
    assert_eq!(count(&served, "TimeSlice"), 0, "{served}");
    let line = served
        .lines()
        .find(|l| l.starts_with("iperf3 service: 1 test; received "))
        .unwrap_or_else(|| panic!("{served}"));
    // About 5 MB at 40 Mbit/s for a second.
    let received: f64 = line["iperf3 service: 1 test; received ".len()..]
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(line.contains(" MiB, sent "), "{line}");
    assert!((3.0..8.0).contains(&received), "{line}");
}

/// `goodput ping` in a fresh network namespace, where ICMP datagram
/// sockets are open to no group (net.ipv4.ping_group_range "1 0"): root
/// pings with ICMP on a raw socket and says so; nobody falls back to TCP
/// connects, where a reset (a closed port) is counted apart and never as
/// an answer, and a listening port is.
#[test]
fn ping_as_root_uses_icmp_and_a_reset_is_no_answer() {
    let _held = NAMESPACES.lock().unwrap_or_else(|e| e.into_inner());
    let Some(lan) = Lan::make(1) else { return };
    let ns = &lan.agents[0];
    let sysctl = Command::new("ip")
        .args([
            "netns",
            "exec",
            ns,
            "sysctl",
            "-qw",
            "net.ipv4.ping_group_range=1 0",
        ])
        .status()
        .unwrap();
    assert!(sysctl.success());
    let exec = |user: Option<&std::path::Path>, args: &[&str]| {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns]);
        match user {
            None => c.arg(BIN),
            Some(bin) => c
                .args([
                    "setpriv",
                    "--reuid=65534",
                    "--regid=65534",
                    "--clear-groups",
                    "--",
                ])
                .arg(bin),
        };
        let o = c.args(args).stdin(Stdio::null()).output().unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let (code, out, err) = exec(None, &["ping", "10.77.0.1", "-c", "3", "-i", "20ms"]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        out.contains("--- 10.77.0.1 ping statistics (ICMP echo) ---"),
        "{out}"
    );
    assert!(out.contains("3 requests, 3 answered, 0.0% loss"), "{out}");
    assert_eq!(count(&out, "64 bytes: icmp_seq="), 3, "{out}");
    assert!(
        err.contains("pinging with ICMP echo on a raw socket instead"),
        "{err}"
    );

    // Nobody may open either: TCP connects, to a closed port and to a
    // listening one (a goodput server in the namespace).
    let bin = tmp("first-hour-ping", "goodput");
    std::fs::copy(BIN, &bin).unwrap();
    for dir in [bin.as_path(), bin.parent().unwrap()] {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let (code, out, err) = exec(
        Some(&bin),
        &["ping", "10.77.0.1", "-c", "2", "-i", "20ms", "-p", "9"],
    );
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(err.contains("timing TCP connects to port 9 instead"), "{err}");
    assert!(
        out.contains("2 requests, 0 connected, 2 reset (port closed), 100.0% loss"),
        "{out}"
    );
    let port = free_tcp_port().to_string();
    let _server = Reaped(Some(
        Command::new("ip")
            .args(["netns", "exec", ns, BIN, "server", "-p", &port, "-v", "0"])
            .spawn()
            .unwrap(),
    ));
    let ping = || {
        exec(
            Some(&bin),
            &["ping", "10.77.0.1", "-c", "2", "-i", "20ms", "-p", &port],
        )
    };
    // Any connect answered (exit 0, as ping's one reply of several) says
    // the server listens; a run that began before it did may still have
    // a reset, so the run that counts is the next one.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (code, out, err) = ping();
        if code == Some(0) {
            break;
        }
        assert!(Instant::now() < deadline, "the server never listened: {out}{err}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let (code, out, err) = ping();
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("2 requests, 2 connected, 0.0% loss"), "{out}");
    assert!(!out.contains("reset"), "{out}");
}
