//! goodput's protocol core.
//!
//! Everything here is pure: wire formats, the data pattern and its verifier,
//! transfer and pacing arithmetic, metric math and the result model. No
//! sockets, no clocks, no async. The engine feeds bytes and times in and acts
//! on what comes out, so every protocol decision can be reproduced in a unit
//! test without opening a socket.
#![warn(missing_docs, unreachable_pub)]

pub mod alert;
pub mod assertion;
pub mod catalogue;
pub mod check;
pub mod cron;
pub mod cts;
pub mod dns;
pub mod echo;
pub mod hash;
pub mod http;
pub mod iperf3;
pub mod kind;
pub mod media;
pub mod mesh;
pub mod metrics;
pub mod ndt7;
pub mod owamp;
pub mod path;
pub mod pattern;
pub mod plan;
pub mod psconfig;
pub mod quic;
pub mod rate;
pub mod result;
pub mod schedule;
pub mod session;
pub mod spec;
pub mod stamp;
pub mod time;
pub mod ttcp;
pub mod units;
