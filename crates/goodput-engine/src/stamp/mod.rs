//! STAMP (RFC 8762 / RFC 8972): the Session-Sender (`goodput stamp`) and
//! the Session-Reflector (part of `goodput server`). The packet formats and
//! all accounting are in `goodput_core::stamp`; this module moves the
//! packets, with kernel timestamps and TTLs.

mod hub;
mod reflector;
mod sender;

pub use hub::{HubCounters, StampHub};
pub use reflector::{bind_reflector, BoundReflector, ReflectorSpec, RunningReflector};
pub use sender::{run_sender, StampSenderSpec};
