//! A tokio runtime on a thread of its own, for QUIC endpoints. quinn moves
//! a connection's packets through two tasks (the endpoint's and the
//! connection's) and a stream's through a third; on a multi-thread runtime
//! they wake each other across worker threads. On a 2-core machine a
//! QUIC perf server measured 0.89x quinn perf's (which runs on one
//! thread), 4% of its samples switching out of `epoll_wait` against 0.1%
//! for quinn perf, and at par on one thread. What runs here is what quinn's runtime spawns
//! (endpoint and connection drivers) and what the caller spawns on
//! [`OwnRuntime::handle`]; the caller's own loop (status lines, the
//! observer) stays where it is.

use std::thread::JoinHandle;

use tokio::runtime::Handle;
use tokio::sync::oneshot;

use crate::EngineError;

/// The runtime; it stops when this is dropped (its tasks are dropped with
/// it, so keep it until they are done).
pub(crate) struct OwnRuntime {
    handle: Handle,
    stop: Option<oneshot::Sender<()>>,
    _thread: JoinHandle<()>,
}

impl OwnRuntime {
    /// `threads` workers (1: a current-thread runtime) on thread `name`.
    pub(crate) fn new(name: &str, threads: usize) -> Result<Self, EngineError> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let (stop, stopped) = oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || {
                let rt = match threads {
                    0 | 1 => tokio::runtime::Builder::new_current_thread().enable_all().build(),
                    n => tokio::runtime::Builder::new_multi_thread()
                        .worker_threads(n)
                        .enable_all()
                        .build(),
                };
                match rt {
                    Ok(rt) => {
                        let _ = tx.send(Ok(rt.handle().clone()));
                        // Runs the spawned tasks until told to stop.
                        let _ = rt.block_on(stopped);
                    }
                    Err(e) => {
                        let _ = tx.send(Err(e));
                    }
                }
            })
            .map_err(|e| EngineError::Config(format!("cannot start a thread for QUIC: {e}")))?;
        let handle = rx
            .recv()
            .map_err(|_| EngineError::Config("the QUIC thread ended at start".into()))?
            .map_err(|e| EngineError::Config(format!("cannot start a runtime for QUIC: {e}")))?;
        Ok(Self {
            handle,
            stop: Some(stop),
            _thread: thread,
        })
    }

    /// Where to spawn, and what to enter while making endpoints.
    pub(crate) fn handle(&self) -> &Handle {
        &self.handle
    }
}

impl Drop for OwnRuntime {
    fn drop(&mut self) {
        // The thread drops the runtime itself (not joined here: this may be
        // an async context, where blocking is not allowed).
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn tasks_run_on_the_own_thread_and_come_back() {
        let rt = OwnRuntime::new("goodput-test", 1).unwrap();
        let name = rt
            .handle()
            .spawn(async { std::thread::current().name().map(str::to_owned) })
            .await
            .unwrap();
        assert_eq!(name.as_deref(), Some("goodput-test"));
        drop(rt);
    }
}
