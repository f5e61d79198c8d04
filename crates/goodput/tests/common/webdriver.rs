//! A real headless browser for the dashboard's tests: Debian's `chromium`
//! driven through `chromedriver` over the W3C WebDriver protocol (plain
//! HTTP and JSON: the few calls the tests make need no client crate).

use super::{free_tcp_port, tmp, Reaped};
use serde_json::{json, Value};
use std::process::Command;
use std::time::{Duration, Instant};

/// The W3C name of an element reference.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// A browser session; chromedriver and the browser go when it is dropped.
pub struct Browser {
    port: u16,
    session: String,
    _driver: Reaped,
}

impl Browser {
    /// Starts chromedriver and a headless chromium (none, after saying
    /// why, where they are not installed outside CI).
    pub fn start(group: &str) -> Option<Self> {
        if !super::have(
            "chromedriver",
            &["--version"],
            "apt-get install chromium chromium-driver",
        ) {
            return None;
        }
        let binary = ["/usr/bin/chromium", "/usr/lib/chromium/chromium"]
            .into_iter()
            .find(|p| std::path::Path::new(p).exists())
            .unwrap_or("chromium");
        let port = free_tcp_port();
        let log = std::fs::File::create(tmp(group, "chromedriver.log")).unwrap();
        let mut cmd = Command::new("chromedriver");
        cmd.arg(format!("--port={port}"))
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        let driver = Reaped::spawn_as_is(cmd);
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "chromedriver did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        let profile = tmp(group, "chromium-profile");
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": binary,
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                         "--window-size=1280,1000", format!("--user-data-dir={}", profile.display())]
            },
            "goog:loggingPrefs": {"browser": "ALL"}
        }}});
        let (status, body) = http("127.0.0.1", port, "POST", "/session", None, &caps.to_string());
        assert_eq!(status, 200, "a browser session: {body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        let session = v["value"]["sessionId"].as_str().unwrap().to_owned();
        Some(Browser {
            port,
            session,
            _driver: driver,
        })
    }

    fn call(&self, method: &str, path: &str, body: Value) -> Value {
        let (status, text) = http(
            "127.0.0.1",
            self.port,
            method,
            &format!("/session/{}{path}", self.session),
            None,
            &if method == "GET" {
                String::new()
            } else {
                body.to_string()
            },
        );
        let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}: {text}"));
        assert_eq!(status, 200, "{method} {path}: {v}");
        v["value"].clone()
    }

    /// Opens a URL and waits for the page to load.
    pub fn go(&self, url: &str) {
        self.call("POST", "/url", json!({ "url": url }));
    }

    /// The page's URL.
    pub fn url(&self) -> String {
        self.call("GET", "/url", Value::Null).as_str().unwrap().to_owned()
    }

    /// The page's title.
    pub fn title(&self) -> String {
        self.call("GET", "/title", Value::Null)
            .as_str()
            .unwrap()
            .to_owned()
    }

    /// Every element a CSS selector matches.
    pub fn all(&self, css: &str) -> Vec<String> {
        self.call(
            "POST",
            "/elements",
            json!({"using": "css selector", "value": css}),
        )
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e[ELEMENT].as_str().unwrap().to_owned())
        .collect()
    }

    /// The one element a selector matches first.
    pub fn one(&self, css: &str) -> String {
        self.all(css)
            .into_iter()
            .next()
            .unwrap_or_else(|| panic!("nothing matches {css} on {}", self.url()))
    }

    /// An element's attribute.
    pub fn attr(&self, el: &str, name: &str) -> Option<String> {
        self.call("GET", &format!("/element/{el}/attribute/{name}"), Value::Null)
            .as_str()
            .map(str::to_owned)
    }

    /// An element's text.
    pub fn text(&self, el: &str) -> String {
        self.call("GET", &format!("/element/{el}/text"), Value::Null)
            .as_str()
            .unwrap_or("")
            .to_owned()
    }

    /// Clicks an element.
    pub fn click(&self, el: &str) {
        self.call("POST", &format!("/element/{el}/click"), json!({}));
    }

    /// Clicks a point of an element, `dx`, `dy` pixels from its centre
    /// (a half of a grid cell: its centre is on the diagonal).
    pub fn click_at(&self, el: &str, dx: i64, dy: i64) {
        let origin = json!({ ELEMENT: el });
        self.call(
            "POST",
            "/actions",
            json!({"actions": [{"type": "pointer", "id": "mouse", "parameters": {"pointerType": "mouse"}, "actions": [
                {"type": "pointerMove", "origin": origin, "x": dx, "y": dy},
                {"type": "pointerDown", "button": 0},
                {"type": "pointerUp", "button": 0}
            ]}]}),
        );
        // The click's navigation has begun; wait for the page to load.
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.script("return document.readyState") != "complete" && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Runs a script in the page; its result.
    pub fn script(&self, js: &str) -> Value {
        self.call("POST", "/execute/sync", json!({"script": js, "args": []}))
    }

    /// The browser console's entries since the last call (level, message).
    pub fn console(&self) -> Vec<(String, String)> {
        self.call("POST", "/se/log", json!({"type": "browser"}))
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .map(|e| {
                (
                    e["level"].as_str().unwrap_or("").to_owned(),
                    e["message"].as_str().unwrap_or("").to_owned(),
                )
            })
            .collect()
    }

    /// Saves a screenshot of the page as PNG.
    pub fn screenshot(&self, path: &std::path::Path) {
        use base64::Engine as _;
        let b64 = self.call("GET", "/screenshot", Value::Null);
        let png = base64::engine::general_purpose::STANDARD
            .decode(b64.as_str().unwrap())
            .unwrap();
        assert!(png.starts_with(b"\x89PNG"), "a PNG");
        if let Some(d) = path.parent() {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::write(path, png).unwrap();
    }
}

/// One HTTP/1.1 request to chromedriver: it keeps connections open, so
/// the answer is read by its length, not to the end.
fn http(host: &str, port: u16, method: &str, path: &str, _token: Option<&str>, body: &str) -> (u16, String) {
    use std::io::{BufRead, BufReader, Read, Write};
    let mut s = std::net::TcpStream::connect((host, port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut r = BufReader::new(s);
    let mut status_line = String::new();
    r.read_line(&mut status_line).unwrap();
    let status = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let mut len = None;
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).unwrap() == 0 || line == "\r\n" {
            break;
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            len = v.trim().parse::<usize>().ok();
        }
    }
    let mut out = Vec::new();
    match len {
        Some(n) => {
            out.resize(n, 0);
            r.read_exact(&mut out).unwrap();
        }
        None => {
            let _ = r.read_to_end(&mut out);
        }
    }
    (status, String::from_utf8_lossy(&out).into_owned())
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = http(
            "127.0.0.1",
            self.port,
            "DELETE",
            &format!("/session/{}", self.session),
            None,
            "",
        );
    }
}
