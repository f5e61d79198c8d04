//! The ndt7 client: one WebSocket per subtest, to any ndt7 server (ws://
//! or wss://). The download reads what the server sends and keeps its
//! measurements (its `TCP_INFO`: the sender's round trip and
//! retransmissions); the upload sends growing binary messages for ten
//! seconds and keeps the server's count of what arrived, with this end's
//! own `TCP_INFO` as the sender's.

use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use goodput_core::ndt7::{
    next_message_size, Measurement, Subtest, SubtestFigures, FIRST_MESSAGE, MAX_MEASUREMENT, MAX_MESSAGE,
    MAX_SUBTEST_US, SUBPROTOCOL, SUBTEST_US,
};
use goodput_core::spec::Ndt7Url;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};
use tokio_tungstenite::WebSocketStream;
use tokio_util::sync::CancellationToken;

use crate::tls::Trust;

/// One client run's settings.
pub struct Ndt7ClientSpec {
    /// The server.
    pub url: Ndt7Url,
    /// The addresses of its host, tried in order.
    pub addrs: Vec<SocketAddr>,
    /// How a `wss://` server's certificate is checked.
    pub trust: Trust,
    /// The deadline of the TCP connect, TLS handshake and upgrade.
    pub connect_timeout: Duration,
}

/// What one subtest measured.
pub struct SubtestOutcome {
    /// The figures.
    pub figures: SubtestFigures,
    /// The client's address as the server saw it.
    pub client_address: Option<String>,
}

/// A line of progress (the console shows them as they come).
pub type Progress<'a> = &'a mut (dyn FnMut(String) + Send);

/// Runs one subtest; the error says what failed, with the URL.
pub async fn run_subtest(
    spec: &Ndt7ClientSpec,
    which: Subtest,
    progress: Progress<'_>,
    cancel: &CancellationToken,
) -> Result<SubtestOutcome, String> {
    let url = spec.url.subtest(which);
    let tcp = connect(&spec.addrs, spec.connect_timeout)
        .await
        .map_err(|e| format!("{url}: {e}"))?;
    let fd = tcp.as_raw_fd();
    let mut request = url
        .as_str()
        .into_client_request()
        .map_err(|e| format!("{url}: not a WebSocket URL: {e}"))?;
    request
        .headers_mut()
        .insert("sec-websocket-protocol", HeaderValue::from_static(SUBPROTOCOL));
    let config = super::ws_config(MAX_MESSAGE);
    let deadline = spec.connect_timeout;
    if spec.url.tls {
        let cfg = crate::tls::client_config(&spec.trust).map_err(|e| format!("{url}: {e}"))?;
        let name = crate::tls::server_name(&crate::tls::name_for(&spec.url.host, None))
            .map_err(|e| format!("{url}: {e}"))?;
        let tls = tokio::time::timeout(deadline, tokio_rustls::TlsConnector::from(cfg).connect(name, tcp))
            .await
            .map_err(|_| format!("{url}: no TLS handshake within {} s", deadline.as_secs()))?
            .map_err(|e| format!("{url}: TLS handshake: {e}"))?;
        let (ws, _) = tokio::time::timeout(
            deadline,
            tokio_tungstenite::client_async_with_config(request, tls, Some(config)),
        )
        .await
        .map_err(|_| format!("{url}: no WebSocket upgrade within {} s", deadline.as_secs()))?
        .map_err(|e| upgrade_error(&url, e))?;
        drive(ws, which, fd, progress, cancel).await
    } else {
        let (ws, _) = tokio::time::timeout(
            deadline,
            tokio_tungstenite::client_async_with_config(request, tcp, Some(config)),
        )
        .await
        .map_err(|_| format!("{url}: no WebSocket upgrade within {} s", deadline.as_secs()))?
        .map_err(|e| upgrade_error(&url, e))?;
        drive(ws, which, fd, progress, cancel).await
    }
}

fn upgrade_error(url: &str, e: WsError) -> String {
    match e {
        WsError::Http(r) => {
            let body = r
                .body()
                .as_ref()
                .map(|b| String::from_utf8_lossy(&b[..b.len().min(200)]).into_owned())
                .unwrap_or_default();
            format!(
                "{url}: the server refused the test: HTTP {} {}",
                r.status(),
                body.trim()
            )
        }
        e => format!("{url}: WebSocket upgrade failed: {e}"),
    }
}

async fn connect(addrs: &[SocketAddr], timeout: Duration) -> Result<TcpStream, String> {
    let mut last = String::from("no address to connect to");
    for &a in addrs {
        match tokio::time::timeout(timeout, TcpStream::connect(a)).await {
            Ok(Ok(s)) => return Ok(s),
            Ok(Err(e)) => last = format!("cannot connect to {a}: {e}"),
            Err(_) => last = format!("cannot connect to {a}: no answer within {} s", timeout.as_secs()),
        }
    }
    Err(last)
}

/// What the server's measurements said, the latest of each.
#[derive(Default)]
struct Heard {
    last: Option<Measurement>,
    client_address: Option<String>,
    count: u64,
    min_rtt_us: Option<u32>,
}

impl Heard {
    fn take(&mut self, text: &str) {
        if text.len() > MAX_MEASUREMENT {
            return;
        }
        let Ok(m) = Measurement::parse(text) else {
            return;
        };
        self.count += 1;
        if let Some(c) = &m.connection_info {
            if !c.client.is_empty() {
                self.client_address = Some(c.client.chars().take(64).collect());
            }
        }
        if let Some(r) = m
            .tcp_info
            .and_then(|t| t.min_rtt)
            .filter(|&r| r > 0 && r != u32::MAX)
        {
            self.min_rtt_us = Some(self.min_rtt_us.map_or(r, |m| m.min(r)));
        }
        self.last = Some(m);
    }
}

fn rate_text(bps: f64) -> String {
    goodput_core::units::format_bits_per_second(bps / 8.0)
}

async fn drive<S>(
    ws: WebSocketStream<S>,
    which: Subtest,
    fd: RawFd,
    progress: Progress<'_>,
    cancel: &CancellationToken,
) -> Result<SubtestOutcome, String>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let start = Instant::now();
    let length = Duration::from_micros(SUBTEST_US);
    let hard = Duration::from_micros(MAX_SUBTEST_US);
    let (mut tx, mut rx) = ws.split();
    let heard = Mutex::new(Heard::default());
    let moved = AtomicU64::new(0);
    let last_byte_us = AtomicU64::new(0);
    let micros = || start.elapsed().as_micros().min(u128::from(u64::MAX)) as u64;
    let reader = async {
        while let Some(m) = rx.next().await {
            match m {
                Ok(Message::Binary(b)) => match which {
                    Subtest::Download => {
                        moved.fetch_add(b.len() as u64, Relaxed);
                        last_byte_us.store(micros(), Relaxed);
                    }
                    Subtest::Upload => return Err("the server sent data during the upload".to_owned()),
                },
                Ok(Message::Text(t)) => heard.lock().unwrap_or_else(|e| e.into_inner()).take(t.as_str()),
                Ok(Message::Close(_)) => return Ok(()),
                Ok(_) => {}
                Err(WsError::ConnectionClosed | WsError::AlreadyClosed) => return Ok(()),
                Err(e) => return Err(format!("the connection broke: {e}")),
            }
        }
        Ok(())
    };
    let writer = async {
        if which == Subtest::Download {
            // Nothing to send; the reader's end is the subtest's.
            std::future::pending::<()>().await;
        }
        let mut payload = vec![0u8; MAX_MESSAGE];
        rand::RngCore::fill_bytes(&mut rand::thread_rng(), &mut payload);
        let payload = Bytes::from(payload);
        let mut size = FIRST_MESSAGE;
        while start.elapsed() < length {
            tx.send(Message::Binary(payload.slice(..size)))
                .await
                .map_err(|e| format!("the connection broke: {e}"))?;
            let total = moved.fetch_add(size as u64, Relaxed) + size as u64;
            last_byte_us.store(micros(), Relaxed);
            size = next_message_size(size, total, MAX_MESSAGE);
        }
        let _ = tx.send(Message::Close(None)).await;
        Ok::<(), String>(())
    };
    let end = {
        tokio::pin!(reader, writer);
        let mut tick =
            tokio::time::interval_at((start + Duration::from_secs(1)).into(), Duration::from_secs(1));
        let mut written = which == Subtest::Download;
        let mut closing: Option<Instant> = None;
        let end: Result<(), String> = loop {
            let close_by = closing.unwrap_or(start + hard);
            tokio::select! {
                r = &mut reader => break r,
                w = &mut writer, if !written => {
                    written = true;
                    w?;
                    // The server's last measurement and its Close follow.
                    closing = Some(Instant::now() + Duration::from_secs(3));
                }
                _ = tick.tick() => {
                    let n = moved.load(Relaxed);
                    let s = start.elapsed().as_secs_f64();
                    let h = heard.lock().unwrap_or_else(|e| e.into_inner());
                    let rtt = h.last.as_ref().and_then(|m| m.tcp_info).and_then(|t| t.rtt);
                    progress(format!(
                        "{:<8} {:>5.1} s  {:>14}  {}",
                        which.name(),
                        s,
                        rate_text(n as f64 * 8.0 / s.max(1e-9)),
                        match (h.min_rtt_us, rtt) {
                            (Some(m), Some(r)) => format!("round trip {:.3} ms (min {:.3} ms)", f64::from(r) / 1e3, f64::from(m) / 1e3),
                            _ => String::new(),
                        }
                    ));
                }
                _ = tokio::time::sleep_until(close_by.into()) => {
                    if closing.is_some() {
                        break Ok(());
                    }
                    break Err(format!("the subtest did not end within {} s", hard.as_secs()));
                }
                _ = cancel.cancelled() => break Err("stopped".to_owned()),
            }
        };
        end
    };
    // Send the answer to the server's Close (tungstenite queued it) and
    // let the server close the connection first, as ndt7 asks.
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        let _ = tx.close().await;
        while rx.next().await.is_some() {}
    })
    .await;
    end?;
    let heard = heard.into_inner().unwrap_or_else(|e| e.into_inner());
    let mut figures = match which {
        Subtest::Download => {
            let sender = heard.last.as_ref().and_then(|m| m.tcp_info);
            let mut f = SubtestFigures::new(
                moved.load(Relaxed),
                last_byte_us.load(Relaxed) as f64 / 1e6,
                sender.as_ref(),
            );
            f.from_server = sender.is_some();
            f
        }
        Subtest::Upload => {
            let own = super::read_tcp_info(fd, micros() as i64);
            // The server's count of what arrived, when it said so.
            let (bytes, secs) = match heard.last.as_ref().and_then(|m| m.app_info) {
                Some(a) if a.num_bytes > 0 && a.elapsed_us > 0 => {
                    (a.num_bytes as u64, a.elapsed_us as f64 / 1e6)
                }
                _ => (moved.load(Relaxed), last_byte_us.load(Relaxed) as f64 / 1e6),
            };
            SubtestFigures::new(bytes, secs, own.as_ref())
        }
    };
    if which == Subtest::Download {
        if let Some(m) = heard.min_rtt_us {
            figures.min_rtt_ms = Some(f64::from(m) / 1e3);
        }
    }
    figures.measurements = heard.count;
    Ok(SubtestOutcome {
        figures,
        client_address: heard.client_address,
    })
}
