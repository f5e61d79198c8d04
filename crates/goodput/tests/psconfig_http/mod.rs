//! A publisher of pSConfig templates on loopback for the subscription
//! and hostile tests: each path answers what the test put there at that
//! moment, or holds the connection open and never answers.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What a path answers.
#[derive(Clone)]
pub enum Answer {
    /// A status and a JSON body.
    Json(u16, String),
    /// Nothing, ever: the connection is held open until the server stops.
    Never,
}

/// The server; it stops when dropped.
pub struct Publisher {
    pub port: u16,
    paths: Arc<Mutex<HashMap<String, Answer>>>,
    stop: Arc<AtomicBool>,
    /// Requests answered or held, all paths.
    #[allow(dead_code)] // not every test counts them
    pub requests: Arc<AtomicUsize>,
}

impl Publisher {
    pub fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        listener.set_nonblocking(true).unwrap();
        let paths: Arc<Mutex<HashMap<String, Answer>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let requests = Arc::new(AtomicUsize::new(0));
        let (p, s, r) = (paths.clone(), stop.clone(), requests.clone());
        std::thread::spawn(move || {
            // Connections held for `Never`, closed when the server stops.
            let mut held: Vec<TcpStream> = Vec::new();
            while !s.load(Ordering::Relaxed) {
                let Ok((mut tcp, _)) = listener.accept() else {
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                };
                tcp.set_nonblocking(false).unwrap();
                tcp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                let mut request = Vec::new();
                let mut buf = [0u8; 4096];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") && request.len() < 65_536 {
                    match tcp.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                r.fetch_add(1, Ordering::Relaxed);
                let line = String::from_utf8_lossy(&request);
                let path = line.split(' ').nth(1).unwrap_or("/").to_owned();
                let answer = p.lock().unwrap().get(&path).cloned();
                match answer {
                    Some(Answer::Never) => {
                        if held.len() < 64 {
                            held.push(tcp);
                        }
                    }
                    Some(Answer::Json(status, body)) => {
                        let _ = tcp.write_all(
                            format!(
                                "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
                                 Connection: close\r\n\r\n",
                                body.len()
                            )
                            .as_bytes(),
                        );
                        let _ = tcp.write_all(body.as_bytes());
                    }
                    None => {
                        let _ = tcp.write_all(
                            b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                        );
                    }
                }
            }
        });
        Publisher {
            port,
            paths,
            stop,
            requests,
        }
    }

    /// Serves `answer` at `path` from now on.
    pub fn put(&self, path: &str, answer: Answer) {
        self.paths.lock().unwrap().insert(path.to_owned(), answer);
    }

    /// The URL of `path`.
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }
}

impl Drop for Publisher {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}
