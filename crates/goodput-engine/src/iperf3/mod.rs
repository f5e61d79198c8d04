//! iperf3 compatibility: a client that drives stock iperf3 servers and a
//! server that answers stock iperf3 clients (3.0–3.21). The wire formats are
//! in `goodput_core::iperf3`; this module moves the bytes: the control
//! connection, TCP and UDP data streams, the interval meter and the results
//! exchange.

mod client;
mod server;
mod streams;

pub use client::{run_client, Iperf3ClientSpec};
pub use server::{bind_server, Iperf3Server, Iperf3ServerSpec};

use std::io;
use std::time::Duration;

use goodput_core::iperf3::control::{ControlDecoder, Expect, FrameError, Message, State};
use goodput_core::result::CpuUtil;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Why an iperf3 test failed.
#[derive(Debug, thiserror::Error)]
pub enum Iperf3Error {
    /// A socket call failed.
    #[error("{during}: {source}")]
    Io {
        /// What was being done.
        during: &'static str,
        /// The cause.
        source: io::Error,
    },
    /// The peer closed the control connection.
    #[error("the control connection closed unexpectedly ({during})")]
    Closed {
        /// The phase.
        during: &'static str,
    },
    /// The control stream could not be decoded.
    #[error("{0}")]
    Frame(#[from] FrameError),
    /// The peer did not answer in time.
    #[error("timed out waiting for {0}")]
    Timeout(&'static str),
    /// The server is running another test.
    #[error("the server is busy running a test; try again later")]
    Busy,
    /// The server reported an error.
    #[error("the server reported error {code} ({text}){}", errno.map(|e| format!(", errno {e}")).unwrap_or_default())]
    Server {
        /// iperf3's error code.
        code: i32,
        /// Its description.
        text: &'static str,
        /// The server's errno.
        errno: Option<i32>,
    },
    /// The peer sent something the protocol does not allow here.
    #[error("{0}")]
    Protocol(String),
    /// The peer ended the test (SERVER_TERMINATE / CLIENT_TERMINATE).
    #[error("the {0} terminated the test")]
    Terminated(&'static str),
    /// Stopped by the user.
    #[error("stopped by the user")]
    Cancelled,
}

/// The control connection: a socket and a decoder.
pub(crate) struct Control {
    stream: TcpStream,
    dec: ControlDecoder,
    buf: Vec<u8>,
}

impl Control {
    pub(crate) fn new(stream: TcpStream) -> Self {
        Self {
            stream,
            dec: ControlDecoder::new(),
            buf: vec![0; 16 * 1024],
        }
    }

    /// The next message, reading as needed.
    pub(crate) async fn read(
        &mut self,
        expect: Expect,
        during: &'static str,
    ) -> Result<Message, Iperf3Error> {
        loop {
            if let Some(m) = self.dec.next(expect)? {
                return Ok(m);
            }
            let n = self
                .stream
                .read(&mut self.buf)
                .await
                .map_err(|source| Iperf3Error::Io { during, source })?;
            if n == 0 {
                return match self.dec.at_eof() {
                    Some(Message::ServerError { code, errno }) => Err(server_error(code, errno)),
                    _ => Err(Iperf3Error::Closed { during }),
                };
            }
            self.dec.feed(&self.buf[..n]);
        }
    }

    /// [`Control::read`] with a deadline.
    pub(crate) async fn read_within(
        &mut self,
        expect: Expect,
        during: &'static str,
        limit: Duration,
    ) -> Result<Message, Iperf3Error> {
        tokio::time::timeout(limit, self.read(expect, during))
            .await
            .map_err(|_| Iperf3Error::Timeout(during))?
    }

    pub(crate) async fn send(&mut self, bytes: &[u8], during: &'static str) -> Result<(), Iperf3Error> {
        self.stream
            .write_all(bytes)
            .await
            .map_err(|source| Iperf3Error::Io { during, source })
    }

    pub(crate) async fn send_state(&mut self, s: State, during: &'static str) -> Result<(), Iperf3Error> {
        self.send(&[s.byte()], during).await
    }

    /// Shuts our side and reads until the peer closes (bounded).
    pub(crate) async fn close_gracefully(mut self, limit: Duration) {
        let _ = self.stream.shutdown().await;
        let _ = tokio::time::timeout(limit, async {
            while matches!(self.stream.read(&mut self.buf).await, Ok(n) if n > 0) {}
        })
        .await;
    }
}

/// Maps an I/O error to [`Iperf3Error::Io`] with what was being done.
pub(crate) fn io(during: &'static str) -> impl FnOnce(io::Error) -> Iperf3Error {
    move |source| Iperf3Error::Io { during, source }
}

pub(crate) fn server_error(code: i32, errno: Option<i32>) -> Iperf3Error {
    if code == goodput_core::iperf3::control::errors::ACCESS_DENIED {
        return Iperf3Error::Busy;
    }
    Iperf3Error::Server {
        code,
        text: goodput_core::iperf3::control::errors::describe(code),
        errno,
    }
}

/// CLOCK_MONOTONIC now, in seconds and microseconds (iperf3's UDP
/// timestamps since 3.7 use this clock).
pub(crate) fn monotonic_now() -> (u64, u32) {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64, (ts.tv_nsec / 1000) as u32)
}

/// Process CPU time so far: (user, system) seconds.
pub(crate) fn cpu_times() -> (f64, f64) {
    // SAFETY: getrusage fills one rusage struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let s = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    (s(ru.ru_utime), s(ru.ru_stime))
}

/// CPU use between two [`cpu_times`] readings over `wall` seconds, in
/// percent of one CPU.
pub(crate) fn cpu_util(before: (f64, f64), after: (f64, f64), wall: f64) -> CpuUtil {
    if wall <= 0.0 {
        return CpuUtil::default();
    }
    let user = (after.0 - before.0).max(0.0) / wall * 100.0;
    let system = (after.1 - before.1).max(0.0) / wall * 100.0;
    CpuUtil {
        total_percent: user + system,
        user_percent: user,
        system_percent: system,
    }
}

/// The payload iperf3 sends: random bytes, or `0123456789` repeated with
/// `--repeating-payload`.
pub(crate) fn payload(len: usize, repeating: bool) -> std::sync::Arc<[u8]> {
    use rand::RngCore;
    let mut v = vec![0u8; len];
    if repeating {
        for (i, b) in v.iter_mut().enumerate() {
            *b = b'0' + (i % 10) as u8;
        }
    } else {
        rand::thread_rng().fill_bytes(&mut v);
    }
    v.into()
}

pub(crate) use crate::socket::addr_text;
