//! Hostile reloads and clocks: a configuration that would expand to
//! hundreds of millions of pairs, an emptied or cut-short file, a pinned
//! configuration URL that redirects to plain HTTP elsewhere, the pSConfig
//! importer on a huge template, and a wall clock stepped back and
//! forward under a running agent (libfaketime, wall clock only). Each
//! agent runs under the servers' address-space limit; the old schedule
//! must stay in force, the refusal must name its limit in the log and in
//! /api/v1/health, and the runs must keep coming.

mod common;

use common::{now_ms, wait_for};

use common::agents::{get_json, state, Agent, Ports, TOKEN};
use common::{goodput, limit_address_space, tmp, Reaped, SERVER_ADDRESS_SPACE};
use serde_json::Value;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One agent, `a`, at `ip`, measuring STAMP to its own reflector every
/// `every` seconds (a list group: no peer to book with).
fn solo_config(ip: &str, ports: Ports, every: u64) -> String {
    format!(
        r#"[agent]
api_port = {api}

[addresses.a]
address = "{ip}"

[groups.solo]
type = "list"
addresses = ["a"]

[tests.latency]
kind = "stamp"
host = "{{{{source}}}}"
port = {stamp}
count = 5
interval = "20ms"
timeout = "1s"

[schedules.often]
repeat = "PT{every}S"

[tasks.latency]
group = "solo"
test = "latency"
schedule = "often"
"#,
        api = ports.api,
        stamp = ports.stamp,
    )
}

fn write(group: &str, name: &str, text: &str) -> PathBuf {
    let p = tmp(group, name);
    std::fs::write(&p, text).unwrap();
    p
}

fn health(a: &Agent, ports: Ports) -> Value {
    get_json(&a.ip, ports.api, "/api/v1/health")
}

fn tasks(a: &Agent, ports: Ports) -> Vec<String> {
    get_json(&a.ip, ports.api, "/api/v1/tasks")
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            format!(
                "{}:{}",
                t["task"].as_str().unwrap(),
                t["source"].as_str().unwrap()
            )
        })
        .collect()
}

/// The agent's runs of task `latency` that ended (any state but scheduled
/// or running).
fn ended(a: &Agent, ports: Ports) -> Vec<Value> {
    a.runs(ports)
        .into_iter()
        .filter(|r| r["task"] == "latency" && r["kind"] == "stamp")
        .filter(|r| !["scheduled", "running"].contains(&state(r)))
        .collect()
}

/// Sends SIGHUP and waits until health's config_error contains `says`
/// (the agent stays up and answers meanwhile).
fn refused_on_reload(a: &mut Agent, ports: Ports, says: &str) -> String {
    a.signal(libc::SIGHUP);
    wait_for(
        Duration::from_secs(60),
        &format!("a config_error with {says:?}"),
        || {
            assert!(
                a.child.as_mut().unwrap().alive(),
                "the agent died on the reload: {}",
                a.log_text()
            );
            let h = health(a, ports);
            h["config_error"]
                .as_str()
                .filter(|e| e.contains(says))
                .map(str::to_owned)
        },
    )
}

/// A valid mesh document of `n` addresses in one mesh group (the first
/// is the agent, `a`), about 65 bytes an address.
fn huge_mesh(ip: &str, ports: Ports, n: usize) -> String {
    let mut t = format!(
        "[agent]\napi_port = {}\n\n[addresses.a]\naddress = \"{ip}\"\n",
        ports.api
    );
    for i in 1..n {
        t += &format!(
            "[addresses.h{i}]\naddress = \"10.{}.{}.{}\"\n",
            i >> 16,
            (i >> 8) & 255,
            i & 255
        );
    }
    let names: Vec<String> = std::iter::once("\"a\"".to_string())
        .chain((1..n).map(|i| format!("\"h{i}\"")))
        .collect();
    t += &format!(
        "[groups.all]\ntype = \"mesh\"\naddresses = [{}]\n\n\
         [tests.latency]\nkind = \"stamp\"\nhost = \"{{{{dest}}}}\"\nport = {}\n\n\
         [schedules.often]\nrepeat = \"PT1M\"\n\n\
         [tasks.mesh]\ngroup = \"all\"\ntest = \"latency\"\nschedule = \"often\"\n",
        names.join(", "),
        ports.stamp
    );
    t
}

#[test]
fn a_reload_that_would_expand_to_400_million_pairs_keeps_the_old_schedule() {
    let group = "reload-huge";
    let ports = Ports::pick();
    let ip = "127.0.0.61";
    let config = write(group, "mesh.toml", &solo_config(ip, ports, 2));
    let mut a = Agent::start(group, "a", ip, &config, ports, &[]);
    wait_for(Duration::from_secs(30), "a first run", || {
        (!ended(&a, ports).is_empty()).then_some(())
    });
    let before = tasks(&a, ports);
    assert_eq!(before, ["latency:a"]);
    // 20,000 addresses in one mesh: about 1.3 MB of TOML that reads and
    // names nothing unknown, and 399,980,000 pairs.
    let huge = huge_mesh(ip, ports, 20_000);
    assert!((1_000_000..2_000_000).contains(&huge.len()), "{}", huge.len());
    std::fs::write(&config, &huge).unwrap();
    let started = Instant::now();
    let e = refused_on_reload(&mut a, ports, "limit max_pairs");
    assert!(
        e.contains("groups.all: limit max_pairs: a mesh of 20,000 addresses makes 399,980,000 pairs, 250,000 allowed"),
        "{e}"
    );
    eprintln!("refused in {:?}: {e}", started.elapsed());
    assert!(
        a.log_text()
            .contains("configuration not loaded, the previous one stays")
            && a.log_text().contains("399,980,000 pairs"),
        "{}",
        a.log_text()
    );
    // The old schedule is in force and runs go on being stored.
    assert_eq!(tasks(&a, ports), before);
    let n = ended(&a, ports).len();
    wait_for(Duration::from_secs(20), "runs after the refusal", || {
        (ended(&a, ports).len() >= n + 2).then_some(())
    });
    // Its memory stayed small: the pairs were counted, never built.
    let pid = a.child.as_ref().unwrap().pid();
    let hwm_mib = common::proc_kib(pid, "VmHWM") / 1024;
    eprintln!("agent's peak resident memory: {hwm_mib} MiB");
    assert!(hwm_mib < 512, "peak resident memory {hwm_mib} MiB");
    a.stop(libc::SIGTERM);
}

#[test]
fn an_emptied_or_cut_short_configuration_is_refused_and_the_tasks_stay() {
    let group = "reload-empty";
    let ports = Ports::pick();
    let ip = "127.0.0.62";
    let good = solo_config(ip, ports, 2);
    let config = write(group, "mesh.toml", &good);
    let mut a = Agent::start(group, "a", ip, &config, ports, &[]);
    wait_for(Duration::from_secs(30), "a first run", || {
        (!ended(&a, ports).is_empty()).then_some(())
    });
    assert_eq!(tasks(&a, ports), ["latency:a"]);

    // Empty: it reads as a document with nothing in it.
    std::fs::write(&config, "").unwrap();
    let e = refused_on_reload(&mut a, ports, "names no address");
    assert!(
        e.contains("the new document names no address (the one in force names 1): an empty or cut-short document is refused"),
        "{e}"
    );
    assert_eq!(tasks(&a, ports), ["latency:a"]);

    // Cut short at a line: it still reads, but its tasks are gone.
    let cut = &good[..good.find("[tasks.latency]").unwrap()];
    std::fs::write(&config, cut).unwrap();
    let e = refused_on_reload(&mut a, ports, "names no task");
    assert!(e.contains("no task (the one in force has 1)"), "{e}");
    assert_eq!(tasks(&a, ports), ["latency:a"]);

    // Cut short inside a line: not TOML.
    let mid = &good[..good.find("interval = \"20").unwrap() + 14];
    std::fs::write(&config, mid).unwrap();
    refused_on_reload(&mut a, ports, "not valid TOML");
    assert_eq!(tasks(&a, ports), ["latency:a"]);

    // Runs went on, and a good document loads again.
    let n = ended(&a, ports).len();
    wait_for(Duration::from_secs(20), "runs after the refusals", || {
        (ended(&a, ports).len() >= n + 2).then_some(())
    });
    std::fs::write(&config, &good).unwrap();
    a.signal(libc::SIGHUP);
    wait_for(Duration::from_secs(30), "the good document back", || {
        health(&a, ports)["config_error"].is_null().then_some(())
    });
    a.stop(libc::SIGTERM);
}

#[test]
fn import_psconfig_refuses_a_template_past_its_limits_with_a_clear_error() {
    let group = "reload-psconfig";
    // A pSConfig template with 20,000 addresses in one mesh group.
    let n = 20_000;
    let addresses: serde_json::Map<String, Value> = (0..n)
        .map(|i| {
            (
                format!("h{i}"),
                serde_json::json!({"address": format!("10.{}.{}.{}", i >> 16, (i >> 8) & 255, i & 255)}),
            )
        })
        .collect();
    let names: Vec<Value> = (0..n)
        .map(|i| serde_json::json!({"name": format!("h{i}")}))
        .collect();
    let template = serde_json::json!({
        "addresses": addresses,
        "groups": {"all": {"type": "mesh", "addresses": names}},
        "tests": {"rtt": {"type": "rtt", "spec": {"source": "{% address[0] %}", "dest": "{% address[1] %}"}}},
        "schedules": {"often": {"repeat": "PT1M"}},
        "tasks": {"all-rtt": {"group": "all", "test": "rtt", "schedule": "often"}}
    });
    let path = write(group, "huge.json", &template.to_string());
    let run = |path: &Path| {
        let mut cmd = goodput();
        cmd.args(["agent", "import-psconfig"])
            .arg(path)
            .stdin(Stdio::null());
        limit_address_space(&mut cmd, SERVER_ADDRESS_SPACE);
        Reaped::spawn(cmd).wait(Duration::from_secs(120))
    };
    let (code, out, err) = run(&path);
    eprintln!("{err}");
    assert_eq!(code, Some(3), "stdout {} bytes; stderr: {err}", out.len());
    assert!(
        err.contains(
            "tasks.all-rtt: limit max_pairs: the tasks up to it expand to as many as 400,000,000 pairs, 250,000 allowed; refused before expanding"
        ),
        "{err}"
    );
    assert!(out.is_empty(), "{} bytes written", out.len());
    // A document past 16 MiB is refused unread.
    let big = write(group, "big.json", &" ".repeat((16 << 20) + 1));
    let (code, _, err) = run(&big);
    assert_eq!(code, Some(3), "{err}");
    assert!(
        err.contains("limit max_config_bytes: larger than 16777216 bytes"),
        "{err}"
    );
}

/// A TLS server on loopback with the certificate `goodput agent
/// --print-fingerprint` makes (rcgen): each request gets the answer
/// `answer()` gives at that moment.
fn https_server(
    cert: &Path,
    key: &Path,
    answer: Arc<dyn Fn() -> Vec<u8> + Send + Sync>,
) -> (u16, Arc<AtomicBool>) {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_file(key).unwrap();
    let config = Arc::new(
        rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .unwrap(),
    );
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let stop = Arc::new(AtomicBool::new(false));
    let stopped = stop.clone();
    listener.set_nonblocking(true).unwrap();
    std::thread::spawn(move || {
        while !stopped.load(Ordering::Relaxed) {
            let Ok((tcp, _)) = listener.accept() else {
                std::thread::sleep(Duration::from_millis(20));
                continue;
            };
            tcp.set_nonblocking(false).unwrap();
            tcp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let conn = rustls::ServerConnection::new(config.clone()).unwrap();
            let mut tls = rustls::StreamOwned::new(conn, tcp);
            let mut request = Vec::new();
            let mut buf = [0u8; 4096];
            while !request.windows(4).any(|w| w == b"\r\n\r\n") && request.len() < 65_536 {
                match tls.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => request.extend_from_slice(&buf[..n]),
                }
            }
            let _ = tls.write_all(&answer());
            tls.conn.send_close_notify();
            let _ = tls.flush();
        }
    });
    (port, stop)
}

/// A plain HTTP server on loopback that answers every request with `body`.
fn http_server(body: String) -> (u16, Arc<AtomicBool>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let stop = Arc::new(AtomicBool::new(false));
    let stopped = stop.clone();
    listener.set_nonblocking(true).unwrap();
    std::thread::spawn(move || {
        while !stopped.load(Ordering::Relaxed) {
            let Ok((mut tcp, _)) = listener.accept() else {
                std::thread::sleep(Duration::from_millis(20));
                continue;
            };
            tcp.set_nonblocking(false).unwrap();
            tcp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut buf = [0u8; 4096];
            let _ = tcp.read(&mut buf);
            let _ = tcp.write_all(
                format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                )
                .as_bytes(),
            );
        }
    });
    (port, stop)
}

#[test]
fn a_pinned_configuration_url_never_follows_a_redirect_to_plain_http_elsewhere() {
    let group = "reload-redirect";
    let ports = Ports::pick();
    let ip = "127.0.0.63";
    let good = solo_config(ip, ports, 2);
    // What the plain server serves: the same mesh with a second task.
    let evil = format!(
        "{good}\n[tasks.latency-again]\ngroup = \"solo\"\ntest = \"latency\"\nschedule = \"often\"\n"
    );
    let (plain, stop_plain) = http_server(evil);
    // The HTTPS server's certificate: made by goodput (rcgen), pinned.
    let store = tmp(group, "tls.sqlite");
    let out = goodput()
        .args(["agent", "--print-fingerprint", "--archive"])
        .arg(&store)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let pin = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    let cert = PathBuf::from(format!("{}.tls-cert.pem", store.display()));
    let key = PathBuf::from(format!("{}.tls-key.pem", store.display()));
    let redirect = Arc::new(AtomicBool::new(false));
    let answer = {
        let redirect = redirect.clone();
        let good = good.clone();
        Arc::new(move || {
            if redirect.load(Ordering::Relaxed) {
                format!(
                    "HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:{plain}/mesh.toml\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                )
                .into_bytes()
            } else {
                format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{good}",
                    good.len()
                )
                .into_bytes()
            }
        })
    };
    let (https, stop_https) = https_server(&cert, &key, answer);
    let url = format!("https://127.0.0.1:{https}/mesh.toml#{pin}");
    let mut a = Agent::start(group, "a", ip, &PathBuf::from(&url), ports, &[]);
    assert_eq!(tasks(&a, ports), ["latency:a"]);
    // Now the pinned server sends the agent to plain HTTP on another port.
    redirect.store(true, Ordering::Relaxed);
    let e = refused_on_reload(&mut a, ports, "redirected to");
    assert!(
        e.contains(&format!(
            "redirected to http://127.0.0.1:{plain}: a pinned configuration URL follows redirects only to its own https origin"
        )),
        "{e}"
    );
    assert_eq!(
        tasks(&a, ports),
        ["latency:a"],
        "the redirected document was put in force"
    );
    a.stop(libc::SIGTERM);
    stop_plain.store(true, Ordering::Relaxed);
    stop_https.store(true, Ordering::Relaxed);
    let _ = TcpStream::connect(("127.0.0.1", plain));
}

/// libfaketime's library, if Debian's `faketime` package is installed.
fn libfaketime() -> Option<PathBuf> {
    let found = [
        "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
        "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
        "/usr/lib/faketime/libfaketime.so.1",
    ]
    .iter()
    .map(PathBuf::from)
    .find(|p| p.exists());
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "libfaketime is required in CI (apt install faketime)"
        );
        eprintln!("libfaketime not installed: skipping (apt install faketime)");
    }
    found
}

/// Starts agent `a` under libfaketime: its wall clock (only) is offset by
/// what `offset_file` says, read again at every call.
fn start_faked(group: &str, ip: &str, config: &Path, ports: Ports, lib: &Path, offset_file: &Path) -> Agent {
    let archive = tmp(group, "a.sqlite");
    let log = tmp(group, "a.log");
    let token = tmp(group, "token");
    std::fs::write(&token, TOKEN).unwrap();
    let mut cmd = goodput();
    cmd.args(["agent", "--config"])
        .arg(config)
        .args(["--as", "a", "--archive"])
        .arg(&archive)
        .arg("--token-file")
        .arg(&token)
        .args(["--beacon-port", &ports.beacon.to_string()])
        .args(["--stamp-port", &ports.stamp.to_string()])
        .env("LD_PRELOAD", lib)
        .env("FAKETIME_TIMESTAMP_FILE", offset_file)
        .env("FAKETIME_NO_CACHE", "1")
        .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap());
    limit_address_space(&mut cmd, SERVER_ADDRESS_SPACE);
    let a = Agent {
        name: "a".into(),
        ip: ip.into(),
        archive,
        log,
        child: Some(Reaped::spawn_as_is(cmd)),
        netns: None,
    };
    wait_for(Duration::from_secs(20), "the agent's API", || {
        TcpStream::connect((ip, ports.api)).ok()
    });
    a
}

#[test]
fn the_schedule_follows_a_wall_clock_stepped_back_and_forward() {
    let Some(lib) = libfaketime() else { return };
    let group = "reload-clock";
    let ports = Ports::pick();
    let ip = "127.0.0.64";
    let every = 2;
    let config = write(group, "mesh.toml", &solo_config(ip, ports, every));
    let offset = write(group, "faketime", "+0\n");
    let mut a = start_faked(group, ip, &config, ports, &lib, &offset);
    let finished = |a: &Agent, from: u64, to: u64| -> Vec<Value> {
        ended(a, ports)
            .into_iter()
            .filter(|r| state(r) == "finished")
            .filter(|r| (from..to).contains(&r["scheduled_ms"].as_u64().unwrap()))
            .collect()
    };
    wait_for(Duration::from_secs(30), "two runs on the true clock", || {
        (finished(&a, now_ms() - 600_000, u64::MAX).len() >= 2).then_some(())
    });

    // One hour back.
    std::fs::write(&offset, "-3600\n").unwrap();
    let stepped = now_ms() - 3_600_000;
    // Runs keep coming on the stepped clock, within a repeat or two.
    let after_back = wait_for(
        Duration::from_secs(6 * every),
        "runs on the stepped-back clock",
        || {
            let f = finished(&a, stepped - 60_000, stepped + 600_000);
            (f.len() >= 3).then_some(f)
        },
    );
    let h = wait_for(Duration::from_secs(5), "the step in health", || {
        let h = health(&a, ports);
        (h["clock_steps"]["count"].as_u64() == Some(1)).then_some(h)
    });
    let step = h["clock_steps"]["last_ms"].as_i64().unwrap();
    assert!((-3_602_000..=-3_598_000).contains(&step), "{h}");
    assert!(
        a.log_text()
            .contains("the wall clock stepped back 3600 s; schedule re-planned"),
        "{}",
        a.log_text()
    );
    // And the next run shown is one that comes.
    let next = get_json(ip, ports.api, "/api/v1/tasks")[0]["next_ms"]
        .as_u64()
        .unwrap();
    let fake_now = now_ms() - 3_600_000;
    assert!(next <= fake_now + 2 * every * 1000, "next {next}, now {fake_now}");

    // Back to the true time: one hour forward. The runs it passed over
    // are missed, not run in a burst.
    let forward_at = now_ms();
    std::fs::write(&offset, "+0\n").unwrap();
    wait_for(Duration::from_secs(10), "the second step in health", || {
        (health(&a, ports)["clock_steps"]["count"].as_u64() == Some(2)).then_some(())
    });
    // Said once the runs it passed over are stored.
    wait_for(Duration::from_secs(20), "the step forward in the log", || {
        a.log_text()
            .contains("the wall clock stepped forward 3600 s; schedule re-planned (")
            .then_some(())
    });
    wait_for(
        Duration::from_secs(6 * every),
        "runs on the true clock again",
        || (finished(&a, forward_at, u64::MAX).len() >= 3).then_some(()),
    );
    let runs = ended(&a, ports);
    let skipped: Vec<&Value> = runs
        .iter()
        .filter(|r| {
            let at = r["scheduled_ms"].as_u64().unwrap();
            at > stepped + 600_000 && at < forward_at - 60_000
        })
        .collect();
    assert!(
        skipped.iter().all(|r| state(r) == "missed"),
        "a run of the skipped hour ran: {:?}",
        skipped.iter().find(|r| state(r) != "missed")
    );
    // The 49 minutes of runs every 2 s the window holds, each missed.
    assert!(skipped.len() > 1_400, "{} missed", skipped.len());
    assert!(after_back
        .iter()
        .all(|r| r["id"].as_str().unwrap().starts_with("latency/a/-/")));

    // Twenty seconds back: the runs due again have run already under
    // their ids, so they come round under replay ids (`ID~2`).
    let back_at = now_ms();
    std::fs::write(&offset, "-20\n").unwrap();
    wait_for(Duration::from_secs(10), "the third step in health", || {
        (health(&a, ports)["clock_steps"]["count"].as_u64() == Some(3)).then_some(())
    });
    let replays = wait_for(Duration::from_secs(6 * every), "replayed runs", || {
        let r: Vec<Value> = finished(&a, back_at - 30_000, back_at)
            .into_iter()
            .filter(|r| r["id"].as_str().unwrap().ends_with("~2"))
            .collect();
        (r.len() >= 3).then_some(r)
    });
    for r in &replays {
        let id = r["id"].as_str().unwrap();
        let first = get_json(
            ip,
            ports.api,
            &format!("/api/v1/runs/{}", id.trim_end_matches("~2")),
        );
        // Kept as it was: run, or missed by the step forward.
        assert!(["finished", "missed"].contains(&state(&first)), "{first}");
        assert_eq!(first["scheduled_ms"], r["scheduled_ms"], "{first}");
    }
    for line in a.log_text().lines().filter(|l| l.contains("wall clock")) {
        eprintln!("{line}");
    }
    a.stop(libc::SIGTERM);
}
