//! Helpers shared by the command-line test files: the binary, scratch
//! files, free ports, waiting for a listener, and children that are killed
//! when a test fails.
#![allow(dead_code)]

pub mod agents;
pub mod alerting;
pub mod netns;
pub mod peers;
pub mod seed;
pub mod webdriver;

use std::io::Read;
use std::net::{TcpListener, UdpSocket};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The wall clock, ms since the Unix epoch (as run records have it).
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

pub fn goodput() -> Command {
    Command::new(env!("CARGO_BIN_EXE_goodput"))
}

/// Removes this process's scratch directories when it exits.
extern "C" fn remove_scratch() {
    let suffix = format!("-{}", std::process::id());
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        if name.starts_with("goodput-") && name.ends_with(&suffix) {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// A scratch file under a directory of this test process; the directory
/// is removed when the process exits.
pub fn tmp(group: &str, name: &str) -> PathBuf {
    static CLEANUP: std::sync::Once = std::sync::Once::new();
    // SAFETY: registers a plain function that only touches the file system.
    CLEANUP.call_once(|| unsafe {
        libc::atexit(remove_scratch);
    });
    let dir = std::env::temp_dir().join(format!("goodput-{group}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// Whether `tool --version` (or `-h`) runs. Missing tools skip a test,
/// except under CI=true, where they fail it.
pub fn have(tool: &str, probe: &[&str], install: &str) -> bool {
    let ok = Command::new(tool)
        .args(probe)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "{tool} is required in CI ({install})"
        );
        eprintln!("{tool} not installed: skipping ({install})");
    }
    ok
}

/// A port free for TCP and UDP on 127.0.0.1 and ::1, chosen below the
/// kernel's ephemeral range: a port taken from the ephemeral range (bind to
/// port 0) can be handed to another test's outgoing connection before the
/// server under test binds it. Each test process walks its own sequence
/// from a start derived from its process id.
fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u32>().ok())
        .unwrap_or(32768);
    // Ports [10000, low) when the range leaves room; else the old way.
    if low < 12000 {
        return UdpSocket::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
    }
    let span = low - 10000;
    let start = std::process::id().wrapping_mul(2654435761) % span;
    for _ in 0..span {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = (10000 + (start + n) % span) as u16;
        let free = TcpListener::bind(("127.0.0.1", port)).is_ok()
            && UdpSocket::bind(("127.0.0.1", port)).is_ok()
            && TcpListener::bind(("::1", port)).is_ok()
            && UdpSocket::bind(("::1", port)).is_ok();
        if free {
            return port;
        }
    }
    panic!("no free port below {low}");
}

pub fn free_tcp_port() -> u16 {
    free_port()
}

pub fn free_udp_port() -> u16 {
    free_port()
}

fn proc_has(files: &[&str], port: u16, listening_only: bool) -> bool {
    let needle = format!(":{port:04X}");
    files.iter().any(|f| {
        std::fs::read_to_string(f).unwrap_or_default().lines().any(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            cols.len() > 3 && cols[1].ends_with(&needle) && (!listening_only || cols[3] == "0A")
        })
    })
}

/// Calls `f` every 200 ms until it gives a value, and returns it; fails
/// the test, naming `what`, if none came within `limit`.
pub fn wait_for<T>(limit: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "gave up waiting for {what} after {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Waits until `got` gives `want`; fails the test with the last value it
/// gave if that did not happen within `limit`.
pub fn wait_equal<T: PartialEq + std::fmt::Debug>(
    limit: Duration,
    what: &str,
    want: &T,
    mut got: impl FnMut() -> T,
) {
    let deadline = Instant::now() + limit;
    loop {
        let g = got();
        if &g == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: still {g:?} after {limit:?}, want {want:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Waits until something listens on TCP `port` (read from /proc: no probe
/// connection, which a one-connection receiver would take for its peer).
pub fn wait_tcp_listening(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if proc_has(&["/proc/net/tcp", "/proc/net/tcp6"], port, true) {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("nothing listens on TCP port {port}");
}

/// Waits until something has UDP `port` bound.
pub fn wait_udp_bound(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if proc_has(&["/proc/net/udp", "/proc/net/udp6"], port, false) {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("nothing bound UDP port {port}");
}

/// A child process killed when dropped (a failed assertion must not leave
/// it running).
pub struct Reaped(pub Option<Child>);

impl Reaped {
    /// Spawns with standard output and error piped.
    pub fn spawn(mut cmd: Command) -> Self {
        Reaped(Some(
            cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap(),
        ))
    }

    /// Spawns as configured (for a child whose output goes to a file).
    pub fn spawn_as_is(mut cmd: Command) -> Self {
        Reaped(Some(cmd.spawn().unwrap()))
    }

    /// Signals the child, waits up to 10 s for it, and returns its exit
    /// code, standard output and standard error.
    pub fn stop(mut self, signal: i32) -> (Option<i32>, String, String) {
        let c = self.0.as_mut().unwrap();
        // SAFETY: signals a child process this test started.
        unsafe { libc::kill(c.id() as i32, signal) };
        self.wait(Duration::from_secs(10))
    }

    /// Waits up to `limit` for the child to end by itself (then kills it).
    pub fn wait(mut self, limit: Duration) -> (Option<i32>, String, String) {
        let mut c = self.0.take().unwrap();
        let deadline = Instant::now() + limit;
        while c.try_wait().unwrap().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = c.kill();
        let code = c.wait().ok().and_then(|s| s.code());
        let mut out = String::new();
        let mut err = String::new();
        if let Some(mut o) = c.stdout.take() {
            o.read_to_string(&mut out).unwrap();
        }
        if let Some(mut e) = c.stderr.take() {
            e.read_to_string(&mut err).unwrap();
        }
        (code, out, err)
    }
}

impl Drop for Reaped {
    fn drop(&mut self) {
        if let Some(c) = &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Address space a server under hostile input may map: enough for the
/// runtime's threads, jemalloc's arenas and every service's buffers at
/// their default limits, far below what a client-sized allocation would
/// ask. A regression then fails the test (an allocation error) instead of
/// exhausting the machine.
pub const SERVER_ADDRESS_SPACE: u64 = 4 << 30;

/// Spawns `cmd` (output piped) with its address space limited to `bytes`
/// (`setrlimit(RLIMIT_AS)` in the child before exec).
pub fn spawn_limited(mut cmd: Command, bytes: u64) -> Reaped {
    limit_address_space(&mut cmd, bytes);
    Reaped::spawn(cmd)
}

/// Makes `cmd`'s child run with its address space limited to `bytes`
/// (`setrlimit(RLIMIT_AS)` in the child before exec).
pub fn limit_address_space(cmd: &mut Command, bytes: u64) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the forked child before exec and only
    // calls setrlimit, which is async-signal-safe.
    unsafe {
        cmd.pre_exec(move || {
            let lim = libc::rlimit {
                rlim_cur: bytes,
                rlim_max: bytes,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

impl Reaped {
    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.0.as_ref().unwrap().id()
    }

    /// Whether the child is still running.
    pub fn alive(&mut self) -> bool {
        self.0.as_mut().unwrap().try_wait().unwrap().is_none()
    }
}

/// A field of `/proc/PID/status` in KiB (`VmRSS`, `VmHWM`, `VmSize`).
pub fn proc_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| {
            let rest = l.strip_prefix(field)?.strip_prefix(':')?;
            rest.split_whitespace().next()?.parse().ok()
        })
        .unwrap_or(0)
}

/// Checks `doc` against a committed schema (`spec-v1.json` or
/// `result-v1.json` under `schema/`), listing every violation.
pub fn assert_schema(schema_file: &str, doc: &serde_json::Value) {
    let path = format!("{}/../../schema/{schema_file}", env!("CARGO_MANIFEST_DIR"));
    let schema: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let errors: Vec<String> = validator
        .iter_errors(doc)
        .map(|e| format!("{e} (at {})", e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "not valid against {schema_file}: {errors:#?}\n{doc:#}"
    );
}

/// A spec document as printed by `--print-spec`, checked against the
/// committed spec schema.
pub fn spec_doc(text: &str) -> serde_json::Value {
    let doc: serde_json::Value = serde_json::from_str(text).unwrap();
    assert_schema("spec-v1.json", &doc);
    doc
}

/// A result document written with `--json`, checked against the committed
/// result schema.
pub fn result_doc(path: &std::path::Path) -> serde_json::Value {
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    assert_schema("result-v1.json", &doc);
    doc
}

/// Runs goodput with `args` (standard input empty) and returns its exit
/// code, standard output and standard error.
pub fn run(args: &[&str]) -> (Option<i32>, String, String) {
    let out = goodput().args(args).stdin(Stdio::null()).output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Text with loopback ports (an embedded server's differ every run) taken
/// out.
pub fn without_ports(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(i) = rest.find("127.0.0.1:") {
        out.push_str(&rest[..i + 10]);
        rest = rest[i + 10..].trim_start_matches(|c: char| c.is_ascii_digit());
        out.push('P');
    }
    out.push_str(rest);
    out
}

/// The settings banner: the console's lines before the status legend,
/// loopback ports taken out.
pub fn banner(stdout: &str) -> String {
    without_ports(stdout.split("Legend:").next().unwrap_or(""))
}

/// A result document's `settings`, loopback ports taken out.
pub fn settings(json: &std::path::Path) -> String {
    without_ports(&result_doc(json)["settings"].to_string())
}

/// `goodput server` on loopback with the given service ports (flag, port),
/// once every one of them listens.
pub fn services_server(ports: &[(&str, u16)]) -> Reaped {
    let mut c = goodput();
    c.args(["server", "--listen", "127.0.0.1", "--port"])
        .arg(free_tcp_port().to_string())
        .args(["--status-interval", "1h", "-v", "1"]);
    for (flag, port) in ports {
        c.arg(flag).arg(port.to_string());
    }
    let server = Reaped::spawn(c);
    for &(_, port) in ports {
        wait_tcp_listening(port);
    }
    server
}

/// `goodput server` with only its QUIC perf service on loopback (and its
/// TCP port, which every server has) plus `extra` flags, bound; its UDP
/// port.
pub fn quic_server(extra: &[&str]) -> (Reaped, u16) {
    let port = free_udp_port();
    let mut cmd = goodput();
    cmd.args([
        "server",
        "--listen",
        "127.0.0.1",
        "-p",
        &free_tcp_port().to_string(),
        "--no-udp",
    ])
    .args(["--quic", "--quic-listen", &format!("127.0.0.1:{port}")])
    .args(extra);
    let srv = Reaped::spawn(cmd);
    wait_udp_bound(port);
    (srv, port)
}

/// Whether `program args` runs and succeeds (a probe such as `python3 -c
/// "import aioquic"`); in CI a failing probe fails the test instead.
pub fn works(program: &str, args: &[&str], install: &str) -> bool {
    let ok = Command::new(program)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "{program} {args:?} must work in CI ({install})"
        );
        eprintln!("{program} {args:?} does not work here: skipping ({install})");
    }
    ok
}
