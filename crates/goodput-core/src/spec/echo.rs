//! `goodput echo` as a document.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{Family, SpecError};
use crate::alert;
use crate::assertion::{Assertion, Figure};
use crate::kind::{target, Kind, KindSpec, Marking, Reach, Target};
use crate::schedule::{Ms, RunClass};
use crate::units::{ByteSize, HumanDuration};

/// The largest echo message, bytes (16 MiB).
pub const MAX_MESSAGE: u64 = 16 << 20;

/// The most connections one echo test may open.
pub const MAX_CONNECTIONS: u64 = 1_000_000;

/// A load test on an echo server: many connections, each sending messages
/// and timing their echoes. Every field has the default of its flag in
/// `goodput echo`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct EchoSpec {
    /// The echo server: `HOST:PORT`, `[v6]:PORT`, or `HOST` with `port`.
    pub target: String,
    /// Port, when `target` has none.
    pub port: u16,
    /// Address family.
    pub family: Family,
    /// Connections to create (1-1000000).
    pub connections: u64,
    /// Start connections in groups of this many (default: all at once).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub batch_size: Option<u64>,
    /// Pause between groups.
    pub batch_delay: HumanDuration,
    /// Messages per connection (0: connect only).
    pub messages: u64,
    /// Bytes per message (1 byte to 16 MiB).
    pub message_size: ByteSize,
    /// Time between messages on a connection.
    pub message_rate: HumanDuration,
    /// Closed loop: the timer for the next message starts when the previous
    /// echo is back (otherwise open loop, timed from the scheduled send).
    pub send_after_recv: bool,
    /// Connect one at a time instead of all at once.
    pub sync_connect: bool,
    /// Keep every connection open until all are done.
    pub hold: bool,
    /// After all are done, keep them open until Enter is pressed on
    /// standard input (when it is not a terminal, for `hold_for`).
    pub pause: bool,
    /// After all are done, keep them open this long.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hold_for: Option<HumanDuration>,
    /// Create every socket before the clock starts.
    pub preallocate: bool,
    /// TLS to the server (with `ca` or `insecure`).
    pub tls: bool,
    /// With `tls`: accept any certificate (encrypted, not authenticated).
    pub insecure: bool,
    /// With `tls`: trust certificates that chain to the CA certificates in
    /// this PEM file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ca: Option<PathBuf>,
    /// With `tls`: the server name sent (SNI) and checked (default: the
    /// host as given).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sni: Option<String>,
    /// Longest connect (with `tls`, including the handshake).
    pub connect_timeout: HumanDuration,
    /// Longest wait for an echo to make progress.
    pub reply_timeout: HumanDuration,
    /// Status line period.
    pub status_interval: HumanDuration,
    /// Pass/fail assertions over the result's figures, such as
    /// "goodput >= 900Mbit" (see `goodput_core::assertion`); any that
    /// fails gives the exit status for failed assertions.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub assert: Vec<crate::assertion::Assertion>,
}

impl Default for EchoSpec {
    fn default() -> Self {
        Self {
            target: String::new(),
            port: 7,
            family: Family::Any,
            connections: 1000,
            batch_size: None,
            batch_delay: HumanDuration(Duration::from_secs(1)),
            messages: 0,
            message_size: ByteSize(1024),
            message_rate: HumanDuration(Duration::from_secs(1)),
            send_after_recv: false,
            sync_connect: false,
            hold: false,
            pause: false,
            hold_for: None,
            preallocate: false,
            tls: false,
            insecure: false,
            ca: None,
            sni: None,
            connect_timeout: HumanDuration(Duration::from_secs(10)),
            reply_timeout: HumanDuration(Duration::from_secs(10)),
            status_interval: HumanDuration(Duration::from_secs(1)),
            assert: Vec::new(),
        }
    }
}

impl EchoSpec {
    /// Bytes per message, once `validate` has passed.
    pub fn message_bytes(&self) -> usize {
        usize::try_from(self.message_size.0).unwrap_or(usize::MAX)
    }
}

impl KindSpec for EchoSpec {
    const KIND: Kind = Kind::Echo;
    const CLASS: RunClass = RunClass::Normal;
    const RATE_LIMITED: bool = true;
    // The engine sets no TOS on the echo client's sockets: a mark is
    // refused, not dropped, until it does.
    const DSCP: Marking<Self> = None;
    const FAMILIES: &'static [alert::Family] = &[alert::Family::Delay];

    /// Every rule of `goodput echo`'s flags.
    fn validate(&self) -> Result<(), SpecError> {
        crate::assertion::check(Self::KIND, &self.assert)?;
        if self.target.trim().is_empty() {
            return Err(SpecError::new(
                "target",
                "is required: the echo server, HOST:PORT, [v6]:PORT, or HOST with `port`",
            ));
        }
        if !(1..=MAX_CONNECTIONS).contains(&self.connections) {
            return Err(SpecError::new("connections", "must be 1-1000000"));
        }
        if self.batch_size == Some(0) {
            return Err(SpecError::new("batch_size", "must be at least 1"));
        }
        if !(1..=MAX_MESSAGE).contains(&self.message_size.0) {
            return Err(SpecError::new(
                "message_size",
                "must be between 1 byte and 16 MiB",
            ));
        }
        if self.messages > 0 && self.message_rate.0.is_zero() && !self.send_after_recv {
            return Err(SpecError::new(
                "message_rate",
                "0 with an open-loop schedule would send every message at once; give a rate or `send_after_recv`",
            ));
        }
        if self.status_interval.0 < Duration::from_millis(10) {
            return Err(SpecError::new("status_interval", "must be at least 10ms"));
        }
        if !self.tls {
            for (field, given) in [
                ("insecure", self.insecure),
                ("ca", self.ca.is_some()),
                ("sni", self.sni.is_some()),
            ] {
                if given {
                    return Err(SpecError::new(field, "needs `tls`"));
                }
            }
        } else if self.insecure && self.ca.is_some() {
            return Err(SpecError::new("insecure", "cannot be used with `ca`"));
        } else if !self.insecure && self.ca.is_none() {
            return Err(SpecError::new(
                "tls",
                "needs `ca` FILE (the CA that signed the server's certificate) or `insecure`",
            ));
        }
        Ok(())
    }

    fn assertions(&self) -> &[Assertion] {
        &self.assert
    }

    fn expected_ms(&self) -> Option<Ms> {
        None
    }

    fn targets(&self) -> Vec<Target> {
        vec![target(&self.target, self.port)]
    }

    fn bitrate(&self) -> Option<u64> {
        None
    }

    fn names_a_file(&self) -> Option<&'static str> {
        self.ca.is_some().then_some("ca")
    }

    fn reach(&self) -> Reach {
        // No beacon service answers it: only the mesh's own ports.
        Reach::default()
    }

    fn figures() -> Vec<&'static Figure> {
        crate::catalogue::with_common(&crate::catalogue::ECHO)
    }
}
