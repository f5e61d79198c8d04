//! The agent checks itself: at start and after a reload (warnings in its
//! log) and in `--check-config` (a `problem:` line each and exit 1) it
//! names what would make its runs fail: no token while this host has
//! pairs with other agents, a host that is none of the mesh's addresses,
//! an unsynchronised clock (a warning only), and a reload that changed a
//! setting only a restart puts in force. `--new-token` makes the token.

mod common;

use common::{free_tcp_port, free_udp_port, goodput, run, tmp, Reaped};
use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

fn example() -> String {
    format!("{}/../../packaging/mesh.toml", env!("CARGO_MANIFEST_DIR"))
}

/// What the kernel says of the clock, read here as the agent reads it.
fn clock_synchronised() -> bool {
    // SAFETY: adjtimex with modes 0 only reads; the struct is zeroed.
    let mut tx: libc::timex = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::adjtimex(&mut tx) };
    rc >= 0 && rc != libc::TIME_ERROR && tx.status & libc::STA_UNSYNC == 0
}

fn lines<'a>(err: &'a str, prefix: &str) -> Vec<&'a str> {
    err.lines().filter(|l| l.starts_with(prefix)).collect()
}

/// A token file as `--new-token` makes it.
fn new_token(name: &str) -> std::path::PathBuf {
    let path = tmp("self-check", name);
    let _ = std::fs::remove_file(&path);
    let (code, _, err) = run(&["agent", "--new-token", "--out", path.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{err}");
    path
}

#[test]
fn check_config_names_each_problem_on_a_line_and_exits_1() {
    let clock = clock_synchronised();
    // alpha without a token: its pairs with beta and gamma (both ways)
    // would all fail.
    let (code, out, err) = run(&[
        "agent",
        "--config",
        &example(),
        "--check-config",
        "--as",
        "10.0.0.1",
    ]);
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(out.contains("It runs 7 task pairs:"), "{out}");
    let problems = lines(&err, "goodput: problem: ");
    assert_eq!(problems.len(), 1, "{err}");
    assert!(
        problems[0].contains("no token (--token-file): 12 task pairs with another agent"),
        "{err}"
    );
    assert!(problems[0].contains("goodput agent --new-token"), "{err}");
    // The clock is the host's: a warning that does not change the exit.
    let warnings = lines(&err, "goodput: warning: ");
    assert_eq!(warnings.len(), usize::from(!clock), "{err}");
    if !clock {
        assert!(warnings[0].contains("clock is not synchronised"), "{err}");
        assert!(warnings[0].contains("one-way delays"), "{err}");
    }

    // With the token the agent reads, nothing is wrong (but the clock).
    let token = new_token("check.token");
    let t = token.to_str().unwrap();
    let (code, _, err) = run(&[
        "agent",
        "--config",
        &example(),
        "--check-config",
        "--as",
        "10.0.0.1",
        "--token-file",
        t,
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert!(lines(&err, "goodput: problem: ").is_empty(), "{err}");
    // The router has no agent and so no booking: it needs no token.
    let (code, _, err) = run(&[
        "agent",
        "--config",
        &example(),
        "--check-config",
        "--as",
        "router",
    ]);
    assert_eq!(code, Some(0), "{err}");

    // A host that is none of the addresses runs nothing: exit 1.
    let (code, out, err) = run(&[
        "agent",
        "--config",
        &example(),
        "--check-config",
        "--as",
        "192.0.2.99",
        "--token-file",
        t,
    ]);
    assert_eq!(code, Some(1), "{out}{err}");
    let problems = lines(&err, "goodput: problem: ");
    assert_eq!(problems.len(), 1, "{err}");
    assert!(
        problems[0].contains("this host is none of the mesh's 4 addresses (looked for 192.0.2.99)"),
        "{err}"
    );
}

#[test]
fn new_token_makes_a_private_file_and_never_overwrites_unasked() {
    let path = new_token("made.token");
    let p = path.to_str().unwrap();
    let meta = std::fs::metadata(&path).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    let first = std::fs::read_to_string(&path).unwrap();
    let digits = first.strip_suffix('\n').expect("one line");
    assert_eq!(digits.len(), 64, "{first}");
    assert!(digits.bytes().all(|b| b.is_ascii_hexdigit()), "{first}");
    // Not a constant: 32 bytes, all zero one time in 2^256.
    assert_ne!(digits, "0".repeat(64));

    // Again: refused, the mesh's token kept.
    let (code, out, err) = run(&["agent", "--new-token", "--out", p]);
    assert_eq!(code, Some(3), "{out}{err}");
    assert!(err.contains("--force"), "{err}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), first);

    // --force replaces it with another, still 0600 whatever it was.
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let (code, out, err) = run(&["agent", "--new-token", "--out", p, "--force"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains(&format!("A new mesh token is in {p} (mode 0600")),
        "{out}"
    );
    assert!(out.contains("--token-file"), "{out}");
    let second = std::fs::read_to_string(&path).unwrap();
    assert_ne!(second, first);
    assert_eq!(
        std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o600
    );
    // The token is never printed.
    assert!(!out.contains(second.trim()), "{out}");
}

/// A two-agent mesh where `a` (127.0.0.1) leads a STAMP pair with `b`.
fn mesh(path: &std::path::Path, api_port: u16) {
    std::fs::write(
        path,
        format!(
            r#"[agent]
api_port = {api_port}

[addresses.a]
address = "127.0.0.1"
[addresses.b]
address = "127.0.0.2"

[groups.pair]
type = "mesh"
addresses = ["a", "b"]

[tests.latency]
kind = "stamp"
host = "{{{{dest}}}}"
count = 10

[schedules.hourly]
repeat = "PT1H"

[tasks.latency]
group = "pair"
test = "latency"
schedule = "hourly"
"#
        ),
    )
    .unwrap();
}

/// Waits (at most 10 s) for a line with `text` in the log.
fn wait_for(log: &std::path::Path, text: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let t = std::fs::read_to_string(log).unwrap_or_default();
        if t.contains(text) || Instant::now() > deadline {
            return t;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn the_agent_warns_at_start_and_when_a_reload_needs_a_restart() {
    let config = tmp("self-check", "mesh.toml");
    let port = free_tcp_port();
    mesh(&config, port);
    let log = tmp("self-check", "agent.log");
    let archive = tmp("self-check", "agent.sqlite");
    let mut cmd = goodput();
    cmd.args(["agent", "--config"])
        .arg(&config)
        .args(["--as", "a", "--archive"])
        .arg(&archive)
        .args(["--beacon-port", &free_tcp_port().to_string()])
        .args(["--stamp-port", &free_udp_port().to_string()])
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap());
    let agent = Reaped::spawn_as_is(cmd);
    let text = wait_for(&log, "started:");
    assert!(text.contains("started:"), "{text}");
    let text = wait_for(&log, "warning: no token");
    let warning = text
        .lines()
        .find(|l| l.contains("goodput agent: warning: no token (--token-file): 2 task pairs"))
        .unwrap_or_else(|| panic!("no token warning in: {text}"));
    assert!(warning.contains("(e.g. latency with b)"), "{warning}");
    let clock = text
        .lines()
        .filter(|l| l.contains("warning: the system clock is not synchronised"));
    assert_eq!(clock.count(), usize::from(!clock_synchronised()), "{text}");

    // The API port changes in the file: the agent still listens where it
    // did, and says so.
    let other = free_tcp_port();
    mesh(&config, other);
    // SAFETY: signals the child this test started.
    unsafe { libc::kill(agent.pid() as i32, libc::SIGHUP) };
    let text = wait_for(&log, "needs a restart");
    assert!(
        text.contains(&format!(
            "goodput agent: warning: needs a restart to take effect: api_port {port} → {other}"
        )),
        "{text}"
    );
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok(),
        "{text}"
    );
    // What stood before the reload is not said again (a configuration
    // URL is read every few minutes).
    assert_eq!(text.matches("warning: no token").count(), 1, "{text}");
    let (_, _, _) = agent.stop(libc::SIGTERM);
}
