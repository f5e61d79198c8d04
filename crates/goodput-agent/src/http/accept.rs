//! The API's accept loop: each connection past the gate, its TLS
//! handshake (if any) done apart, and the caller's address for the
//! handlers.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Semaphore};
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;
use tokio_util::either::Either;

use crate::http::listen::{Gate, Slot};

/// The API's listening socket, plain or TLS: each connection is let in
/// by the gate first (per-address and overall caps, see
/// [`super::listen`]), then its handshake is done in a task of its own
/// (at most 64 at once, 10 s each), so a slow client holds up no one else.
pub(crate) struct ApiListener {
    rx: mpsc::Receiver<Accepted>,
    local: SocketAddr,
}

/// A connection let in, with its place at the gate.
pub(crate) type Accepted = (Either<TcpStream, TlsStream<TcpStream>>, SocketAddr, Slot);

/// Handshakes under way at once, at most.
const MAX_HANDSHAKES: usize = 64;

impl ApiListener {
    pub(crate) fn new(tcp: TcpListener, tls: Option<TlsAcceptor>, gate: Arc<Gate>) -> std::io::Result<Self> {
        let local = tcp.local_addr()?;
        let (tx, rx) = mpsc::channel(MAX_HANDSHAKES);
        let permits = Arc::new(Semaphore::new(MAX_HANDSHAKES));
        tokio::spawn(async move {
            loop {
                let (stream, from) = tokio::select! {
                    _ = tx.closed() => return,
                    got = tcp.accept() => match got {
                        Ok(x) => x,
                        Err(_) => {
                            // Out of descriptors, say: wait rather than spin.
                            tokio::time::sleep(Duration::from_millis(100)).await;
                            continue;
                        }
                    },
                };
                // Refused: closed at once, before anything is read.
                let Ok(slot) = gate.admit(from.ip()) else {
                    continue;
                };
                let Some(tls) = &tls else {
                    if tx.send((Either::Left(stream), from, slot)).await.is_err() {
                        return;
                    }
                    continue;
                };
                let Ok(permit) = permits.clone().try_acquire_owned() else {
                    // Too many handshakes under way: this one is turned away.
                    continue;
                };
                let (tls, tx) = (tls.clone(), tx.clone());
                tokio::spawn(async move {
                    let _permit = permit;
                    let handshake = tokio::time::timeout(Duration::from_secs(10), tls.accept(stream));
                    let done = tokio::select! {
                        _ = slot.evicted.cancelled() => return,
                        done = handshake => done,
                    };
                    if let Ok(Ok(s)) = done {
                        let _ = tx.send((Either::Right(s), from, slot)).await;
                    }
                });
            }
        });
        Ok(Self { rx, local })
    }

    /// The next connection let in (none: the listener has ended).
    pub(crate) async fn accept(&mut self) -> Option<Accepted> {
        self.rx.recv().await
    }

    pub(crate) fn local_addr(&self) -> SocketAddr {
        self.local
    }
}

/// Who called: the caller's address, for the API's handlers.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Caller(pub(crate) SocketAddr);
