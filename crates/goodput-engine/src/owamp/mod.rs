//! OWAMP and TWAMP on the wire: the control connection both ends share,
//! the clients (owping's and twping's part) and the servers (owampd's and
//! twampd's part). The messages and packets are `goodput_core::owamp`'s.

pub mod client;
pub mod conn;
pub mod endpoint;
mod reflector;
pub mod server;
