//! goodput's I/O engine: tokio clients and servers that drive the pure
//! protocol core over real sockets.
//!
//! The entry points take a spec, an [`Observer`] that receives interval
//! snapshots and connection records as they happen, and a cancellation
//! token; they return the complete [`goodput_core::result::TestResult`]. The
//! command line is one caller; the agent will be another.
#![warn(missing_docs, unreachable_pub)]

pub mod admission;
mod counters;
mod datagram;
pub mod echo;
pub mod http;
pub mod iperf3;
mod lowat;
pub mod media;
pub mod ndt7;
mod observer;
pub mod owamp;
mod own_runtime;
pub mod path;
pub mod quic;
pub mod run;
pub mod services;
pub mod socket;
pub mod stamp;
pub mod tcp;
mod timer;
pub mod tls;
pub mod ttcp;

pub use counters::RunClock;
pub use observer::{NullObserver, Observer};
pub use tokio_util::sync::CancellationToken;

/// This program's name and version, for result documents.
pub(crate) fn tool_info() -> goodput_core::result::ToolInfo {
    goodput_core::result::ToolInfo {
        name: "goodput".into(),
        version: env!("CARGO_PKG_VERSION").into(),
    }
}

/// A failure that stops a whole run before or outside any one connection.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// Could not listen on an address.
    #[error("cannot listen on {addr}")]
    Listen {
        /// The address.
        addr: std::net::SocketAddr,
        /// The cause.
        source: std::io::Error,
    },
    /// The settings cannot work together.
    #[error("{0}")]
    Config(String),
    /// An iperf3 test failed before any data stream was open.
    #[error("{0}")]
    Iperf3(String),
}
