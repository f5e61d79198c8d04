//! Where the agents' alerts go in the tests: a real Prometheus
//! Alertmanager (Debian's `prometheus-alertmanager`), started and stopped
//! by the test, and a webhook sink that records each POST (and can refuse
//! the first ones, to make the agent retry).

use super::{free_tcp_port, tmp, Reaped};
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub const ALERTMANAGER: &str = "prometheus-alertmanager";

/// A running Alertmanager.
pub struct Alertmanager {
    pub url: String,
    addr: (String, u16),
    _child: Reaped,
}

impl Alertmanager {
    /// Starts one on `ip` (none, after saying why, where it is not
    /// installed outside CI).
    pub fn start(group: &str, ip: &str) -> Option<Self> {
        if !super::have(
            ALERTMANAGER,
            &["--version"],
            "apt-get install prometheus-alertmanager",
        ) {
            return None;
        }
        let port = free_tcp_port();
        let config = tmp(group, "alertmanager.yml");
        // Every alert to a receiver that sends nothing on; the test reads
        // what Alertmanager holds through its API.
        std::fs::write(
            &config,
            "route:\n  receiver: none\n  group_wait: 1s\n  group_interval: 1s\n  repeat_interval: 1h\nreceivers:\n  - name: none\n",
        )
        .unwrap();
        let storage = tmp(group, "alertmanager-data");
        std::fs::create_dir_all(&storage).unwrap();
        let log = std::fs::File::create(tmp(group, "alertmanager.log")).unwrap();
        let mut cmd = Command::new(ALERTMANAGER);
        cmd.arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.path={}", storage.display()))
            .arg(format!("--web.listen-address={ip}:{port}"))
            .arg("--cluster.listen-address=")
            .stdout(Stdio::null())
            .stderr(log);
        let child = Reaped::spawn_as_is(cmd);
        let am = Alertmanager {
            url: format!("http://{ip}:{port}"),
            addr: (ip.into(), port),
            _child: child,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(200) = am.get("/-/ready").map(|(s, _)| s) {
                return Some(am);
            }
            assert!(
                Instant::now() < deadline,
                "Alertmanager did not start: {}",
                std::fs::read_to_string(tmp(group, "alertmanager.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn get(&self, path: &str) -> Option<(u16, String)> {
        let mut s = TcpStream::connect((self.addr.0.as_str(), self.addr.1)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
        write!(s, "GET {path} HTTP/1.0\r\nHost: {}\r\n\r\n", self.addr.0).ok()?;
        let mut out = String::new();
        s.read_to_string(&mut out).ok()?;
        let status = out.split_whitespace().nth(1)?.parse().ok()?;
        Some((
            status,
            out.split_once("\r\n\r\n").map_or("", |(_, b)| b).to_owned(),
        ))
    }

    /// The alerts it holds that have not ended.
    pub fn alerts(&self) -> Vec<Value> {
        let (status, body) = self.get("/api/v2/alerts").expect("Alertmanager answers");
        assert_eq!(status, 200, "{body}");
        serde_json::from_str::<Value>(&body)
            .unwrap()
            .as_array()
            .unwrap()
            .clone()
    }

    /// Its alerts as (alertname, from, to, severity), sorted.
    pub fn summary(&self) -> Vec<(String, String, String, String)> {
        let mut v: Vec<_> = self
            .alerts()
            .iter()
            .map(|a| {
                let l = &a["labels"];
                let s = |k: &str| l[k].as_str().unwrap_or("").to_owned();
                (s("alertname"), s("from"), s("to"), s("severity"))
            })
            .collect();
        v.sort();
        v
    }
}

/// A webhook receiver: records each POST's JSON body; answers the first
/// `refuse` with 500 (and, with `start_with`, a JSON array of more than
/// `max_items` with 422, as a receiver of one document a request would).
pub struct Hook {
    pub url: String,
    pub received: Arc<Mutex<Vec<Value>>>,
    pub attempts: Arc<Mutex<u64>>,
}

impl Hook {
    pub fn start(ip: &str, refuse: u64) -> Self {
        Self::start_with(ip, refuse, usize::MAX)
    }

    pub fn start_with(ip: &str, refuse: u64, max_items: usize) -> Self {
        let l = TcpListener::bind((ip, 0)).unwrap();
        let url = format!("http://{}/hook", l.local_addr().unwrap());
        let received = Arc::new(Mutex::new(Vec::new()));
        let attempts = Arc::new(Mutex::new(0u64));
        let (r, a) = (received.clone(), attempts.clone());
        std::thread::spawn(move || {
            for conn in l.incoming() {
                let Ok(mut c) = conn else { return };
                let _ = c.set_read_timeout(Some(Duration::from_secs(5)));
                let mut reader = BufReader::new(c.try_clone().unwrap());
                let mut len = 0usize;
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        break;
                    }
                    if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                        len = v.trim().parse().unwrap_or(0);
                    }
                    if line == "\r\n" {
                        break;
                    }
                }
                let mut body = vec![0u8; len.min(1 << 20)];
                let _ = reader.read_exact(&mut body);
                let n = {
                    let mut a = a.lock().unwrap();
                    *a += 1;
                    *a
                };
                let too_many = serde_json::from_slice::<Value>(&body)
                    .ok()
                    .and_then(|v| v.as_array().map(Vec::len))
                    .is_some_and(|n| n > max_items);
                let status = if n <= refuse {
                    "500 Internal Server Error"
                } else if too_many {
                    "422 Unprocessable Entity"
                } else {
                    if let Ok(v) = serde_json::from_slice(&body) {
                        r.lock().unwrap().push(v);
                    }
                    "200 OK"
                };
                let _ = write!(
                    c,
                    "HTTP/1.1 {status}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                );
            }
        });
        Hook {
            url,
            received,
            attempts,
        }
    }

    /// The events received: (event, metric, from, to, severity), sorted.
    pub fn events(&self) -> Vec<(String, String, String, String)> {
        let mut v: Vec<_> = self
            .received
            .lock()
            .unwrap()
            .iter()
            .map(|e| {
                let a = &e["alert"];
                let dir = a["direction"].as_str().unwrap_or("");
                let (s, d) = (
                    a["source"].as_str().unwrap_or(""),
                    a["dest"].as_str().unwrap_or(""),
                );
                let (from, to) = if dir == "backward" { (d, s) } else { (s, d) };
                (
                    e["event"].as_str().unwrap_or("").to_owned(),
                    format!("{} {from}>{to}", a["metric"].as_str().unwrap_or("")),
                    a["severity"].as_str().unwrap_or("").to_owned(),
                    a["rule"].as_str().unwrap_or("").to_owned(),
                )
            })
            .collect();
        v.sort();
        v
    }
}
