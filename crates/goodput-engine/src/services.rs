//! The classic simple services in `goodput server`: discard (RFC 863, TCP
//! and UDP: everything read is dropped) and echo (RFC 862, TCP: everything
//! read is sent back). Sinks and mirrors for TTCP, `nc` and any client.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::task::Poll;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, UdpSocket};
use tokio_util::sync::CancellationToken;

use crate::admission::{Admission, Admits, Slot};
use crate::EngineError;

/// What the services did over the server's life (in the result model, so
/// a server's `--json` carries it).
pub use goodput_core::result::ServiceCounters;

/// The services' counters, and the context their connections are
/// admitted under.
struct Counters {
    admission: Arc<Admission>,
    cancel: CancellationToken,
    discard_connections: AtomicU64,
    discard_bytes: AtomicU64,
    discard_datagrams: AtomicU64,
    echo_connections: AtomicU64,
    echo_bytes: AtomicU64,
    tls_handshake_failures: AtomicU64,
}

impl Admits for Counters {
    fn admission(&self) -> &Admission {
        &self.admission
    }

    /// Connections still open at shutdown are dropped unfinished; only one
    /// dropped before that is a panic.
    fn on_abandoned(&self, _peer: SocketAddr) {
        if !self.cancel.is_cancelled() {
            self.admission.count_internal_error();
        }
    }
}

/// Bound discard and echo sockets.
pub struct BoundServices {
    discard_tcp: Vec<TcpListener>,
    discard_udp: Vec<UdpSocket>,
    echo_tcp: Vec<TcpListener>,
    echo_tls: Vec<TcpListener>,
    tls: Option<Arc<rustls::ServerConfig>>,
}

/// Binds discard (TCP and UDP) on `discard`, echo (TCP) on `echo`, and TLS
/// echo on `echo_tls` with `tls` (required when `echo_tls` is not empty).
pub fn bind_services(
    discard: &[SocketAddr],
    echo: &[SocketAddr],
    echo_tls: &[SocketAddr],
    tls: Option<Arc<rustls::ServerConfig>>,
) -> Result<BoundServices, EngineError> {
    if !echo_tls.is_empty() && tls.is_none() {
        return Err(EngineError::Config(
            "the TLS echo service needs a TLS configuration".into(),
        ));
    }
    let tcp = |addr: SocketAddr| -> Result<TcpListener, EngineError> {
        let l = crate::socket::tcp_listener(addr, false, addr.is_ipv6(), 4096)
            .map_err(|source| EngineError::Listen { addr, source })?;
        TcpListener::from_std(l).map_err(|source| EngineError::Listen { addr, source })
    };
    let udp = |addr: SocketAddr| -> Result<UdpSocket, EngineError> {
        let err = |source| EngineError::Listen { addr, source };
        let s = socket2::Socket::new(
            socket2::Domain::for_address(addr),
            socket2::Type::DGRAM,
            Some(socket2::Protocol::UDP),
        )
        .map_err(err)?;
        if addr.is_ipv6() {
            s.set_only_v6(true).map_err(err)?;
        }
        s.bind(&addr.into()).map_err(err)?;
        s.set_nonblocking(true).map_err(err)?;
        UdpSocket::from_std(s.into()).map_err(err)
    };
    Ok(BoundServices {
        discard_tcp: discard.iter().map(|&a| tcp(a)).collect::<Result<_, _>>()?,
        discard_udp: discard.iter().map(|&a| udp(a)).collect::<Result<_, _>>()?,
        echo_tcp: echo.iter().map(|&a| tcp(a)).collect::<Result<_, _>>()?,
        echo_tls: echo_tls.iter().map(|&a| tcp(a)).collect::<Result<_, _>>()?,
        tls,
    })
}

impl BoundServices {
    /// The discard service's TCP addresses (port 0 resolved).
    pub fn discard_addrs(&self) -> Vec<SocketAddr> {
        self.discard_tcp
            .iter()
            .filter_map(|l| l.local_addr().ok())
            .collect()
    }

    /// The echo service's addresses.
    pub fn echo_addrs(&self) -> Vec<SocketAddr> {
        self.echo_tcp.iter().filter_map(|l| l.local_addr().ok()).collect()
    }

    /// The TLS echo service's addresses.
    pub fn echo_tls_addrs(&self) -> Vec<SocketAddr> {
        self.echo_tls.iter().filter_map(|l| l.local_addr().ok()).collect()
    }

    /// Serves until `cancel`, admitting TCP connections under `admission`
    /// (shared with the TCP test service, so one client's cap covers every
    /// port); returns what was served.
    pub async fn run(self, cancel: CancellationToken, admission: Arc<Admission>) -> ServiceCounters {
        let c = Arc::new(Counters {
            admission,
            cancel: cancel.clone(),
            discard_connections: AtomicU64::new(0),
            discard_bytes: AtomicU64::new(0),
            discard_datagrams: AtomicU64::new(0),
            echo_connections: AtomicU64::new(0),
            echo_bytes: AtomicU64::new(0),
            tls_handshake_failures: AtomicU64::new(0),
        });
        let mut tasks = tokio::task::JoinSet::new();
        for l in self.discard_tcp {
            tasks.spawn(accept_loop(l, c.clone(), cancel.clone(), false));
        }
        for l in self.echo_tcp {
            tasks.spawn(accept_loop(l, c.clone(), cancel.clone(), true));
        }
        if let Some(cfg) = self.tls {
            let acceptor = tokio_rustls::TlsAcceptor::from(cfg);
            for l in self.echo_tls {
                tasks.spawn(tls_accept_loop(l, acceptor.clone(), c.clone(), cancel.clone()));
            }
        }
        for s in self.discard_udp {
            let (c, cancel) = (c.clone(), cancel.clone());
            tasks.spawn(async move {
                let mut buf = vec![0u8; 65_536];
                loop {
                    tokio::select! {
                        _ = cancel.cancelled() => break,
                        r = s.recv_from(&mut buf) => if let Ok((n, _)) = r {
                            c.discard_bytes.fetch_add(n as u64, Relaxed);
                            c.discard_datagrams.fetch_add(1, Relaxed);
                        },
                    }
                }
            });
        }
        while tasks.join_next().await.is_some() {}
        ServiceCounters {
            discard_connections: c.discard_connections.load(Relaxed),
            discard_bytes: c.discard_bytes.load(Relaxed),
            discard_datagrams: c.discard_datagrams.load(Relaxed),
            echo_connections: c.echo_connections.load(Relaxed),
            echo_bytes: c.echo_bytes.load(Relaxed),
            tls_handshake_failures: c.tls_handshake_failures.load(Relaxed),
        }
    }
}

thread_local! {
    // Read space owned by the worker thread: an idle echo connection holds
    // no buffer, so tens of thousands of them cost little memory.
    static SCRATCH: std::cell::RefCell<Vec<u8>> = std::cell::RefCell::new(vec![0; 64 * 1024]);
}

/// Echoes until the peer closes, counting into `echoed`. Reads go into
/// the thread's scratch space and are written straight back; only what the
/// kernel does not take at once is kept, in a buffer of its own.
///
/// The read is tokio's `poll_read`, which takes a read shorter than the
/// scratch space as the socket drained: a message is one `recv` and one
/// `send` after its wake. With `readable` and `try_read` each message cost
/// a second `recv` that found nothing (strace of a back-to-back client: 0.7
/// failed `recvfrom` per message).
async fn echo_connection(s: &mut tokio::net::TcpStream, echoed: &AtomicU64) {
    let mut pending: Vec<u8> = Vec::new();
    loop {
        if !pending.is_empty() {
            if s.write_all(&pending).await.is_err() {
                return;
            }
            echoed.fetch_add(pending.len() as u64, Relaxed);
            pending = Vec::new();
        }
        let step = std::future::poll_fn(|cx| {
            SCRATCH.with(|b| {
                let mut buf = b.borrow_mut();
                let n = {
                    let mut rb = tokio::io::ReadBuf::new(&mut buf[..]);
                    match Pin::new(&mut *s).poll_read(cx, &mut rb) {
                        Poll::Pending => return Poll::Pending,
                        Poll::Ready(Err(_)) => return Poll::Ready(Err(())),
                        Poll::Ready(Ok(())) => rb.filled().len(),
                    }
                };
                if n == 0 {
                    return Poll::Ready(Err(()));
                }
                let sent = match s.try_write(&buf[..n]) {
                    Ok(k) => k,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => 0,
                    Err(_) => return Poll::Ready(Err(())),
                };
                if sent < n {
                    pending.extend_from_slice(&buf[sent..n]);
                }
                Poll::Ready(Ok(sent as u64))
            })
        })
        .await;
        match step {
            Ok(n) => {
                echoed.fetch_add(n, Relaxed);
            }
            Err(()) => return,
        }
    }
}

/// Reads and drops until the peer closes, counting into `discarded`. Reads
/// go into the thread's scratch space, so an idle connection holds no
/// buffer.
async fn discard_connection(s: &mut tokio::net::TcpStream, discarded: &AtomicU64) {
    loop {
        if s.readable().await.is_err() {
            return;
        }
        let read = SCRATCH.with(|b| s.try_read(&mut b.borrow_mut()));
        match read {
            Ok(0) => return,
            Ok(n) => {
                discarded.fetch_add(n as u64, Relaxed);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => return,
        }
    }
}

async fn accept_loop(l: TcpListener, c: Arc<Counters>, cancel: CancellationToken, echo: bool) {
    let mut conns = tokio::task::JoinSet::new();
    loop {
        let (mut s, peer) = tokio::select! {
            _ = cancel.cancelled() => break,
            Some(_) = conns.join_next(), if !conns.is_empty() => continue,
            a = l.accept() => match a {
                Ok(a) => a,
                Err(_) => {
                    // Out of descriptors, say: do not spin.
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                    continue;
                }
            },
        };
        // No greeting to wait for: a connection without an open place is
        // reset at once, one with a place is past its "hello".
        let slot = match Slot::admit_open(&c, peer) {
            Some(slot) => slot,
            None => {
                let _ = crate::socket::set_rude_close(&s);
                continue;
            }
        };
        slot.hello_done();
        let cancel = cancel.clone();
        if echo {
            c.echo_connections.fetch_add(1, Relaxed);
            conns.spawn(async move {
                tokio::select! {
                    _ = cancel.cancelled() => {}
                    _ = echo_connection(&mut s, &slot.ctx().echo_bytes) => {}
                }
                let _ = s.shutdown().await;
                slot.finish();
            });
        } else {
            c.discard_connections.fetch_add(1, Relaxed);
            conns.spawn(async move {
                tokio::select! {
                    _ = cancel.cancelled() => {}
                    _ = discard_connection(&mut s, &slot.ctx().discard_bytes) => {}
                }
                slot.finish();
            });
        }
    }
    conns.shutdown().await;
}

/// TLS echo: handshake (at most 10 s), then everything read is sent back.
async fn tls_accept_loop(
    l: TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    c: Arc<Counters>,
    cancel: CancellationToken,
) {
    let mut conns = tokio::task::JoinSet::new();
    loop {
        let (s, peer) = tokio::select! {
            _ = cancel.cancelled() => break,
            Some(_) = conns.join_next(), if !conns.is_empty() => continue,
            a = l.accept() => match a {
                Ok(a) => a,
                Err(_) => {
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                    continue;
                }
            },
        };
        // The handshake holds a pending place: handshakes never finished
        // are bounded in number as well as in time.
        let slot = match Slot::admit_open(&c, peer) {
            Some(slot) => slot,
            None => {
                let _ = crate::socket::set_rude_close(&s);
                continue;
            }
        };
        let (cancel, acceptor) = (cancel.clone(), acceptor.clone());
        conns.spawn(async move {
            let c = slot.ctx();
            let _ = s.set_nodelay(true);
            let handshake = tokio::time::timeout(std::time::Duration::from_secs(10), acceptor.accept(s));
            let mut t = match handshake.await {
                Ok(Ok(t)) => t,
                Ok(Err(_)) => {
                    c.tls_handshake_failures.fetch_add(1, Relaxed);
                    slot.finish();
                    return;
                }
                Err(_) => {
                    c.tls_handshake_failures.fetch_add(1, Relaxed);
                    c.admission.count_hello_timeout();
                    slot.finish();
                    return;
                }
            };
            slot.hello_done();
            c.echo_connections.fetch_add(1, Relaxed);
            let mut buf = vec![0u8; 16 * 1024];
            loop {
                let n = tokio::select! {
                    _ = cancel.cancelled() => break,
                    r = t.read(&mut buf) => match r {
                        Ok(0) | Err(_) => break,
                        Ok(n) => n,
                    },
                };
                if t.write_all(&buf[..n]).await.is_err() || t.flush().await.is_err() {
                    break;
                }
                c.echo_bytes.fetch_add(n as u64, Relaxed);
            }
            let _ = t.shutdown().await;
            slot.finish();
        });
    }
    conns.shutdown().await;
}
