//! Path tools: traceroute with path MTU discovery, and ping, on ordinary
//! sockets (no root, no capability).

pub mod ping;
mod sock;
pub mod trace;
