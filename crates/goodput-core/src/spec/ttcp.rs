//! `goodput ttcp` as a document.

use std::net::IpAddr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{Family, SpecError};
use crate::alert;
use crate::assertion::{Assertion, Figure};
use crate::kind::{target, Kind, KindSpec, Marking, Reach, Target};
use crate::schedule::{Ms, RunClass};
use crate::ttcp::MIN_UDP_BUFLEN;
use crate::units::{ByteSize, HumanDuration};

/// The largest ttcp buffer, bytes (64 MiB).
pub const MAX_BUFLEN: usize = 64 << 20;

/// The largest UDP payload: one datagram.
pub const MAX_UDP_BUFLEN: usize = 65_507;

/// Which end of a ttcp transfer this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TtcpRole {
    /// `-t`: connect to `host` and send.
    Transmit,
    /// `-r`: accept one connection (or UDP datagrams) and read to the end.
    Receive,
}

/// A TTCP transfer, either end, with ttcp's option letters as fields.
/// Every field has the default of its flag in `goodput ttcp`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct TtcpSpec {
    /// Transmit (`-t`) or receive (`-r`); required.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<TtcpRole>,
    /// Where to send (transmit only): a name or address, `HOST:PORT` too.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// Bytes per write / read call (`-l`).
    pub buflen: usize,
    /// Buffers to send (`-n`, transmit).
    pub nbuf: u64,
    /// Port to send to or receive on (`-p`).
    pub port: u16,
    /// UDP instead of TCP (`-u`); 4-byte datagrams mark the start and the
    /// end.
    pub udp: bool,
    /// TCP_NODELAY on the transmitter (`-D`).
    pub nodelay: bool,
    /// Socket buffer size (`-b`): SO_SNDBUF transmitting, SO_RCVBUF
    /// receiving (default: the kernel's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sockbuf: Option<ByteSize>,
    /// The data: true, the pattern, made and dropped in memory; false, the
    /// transmitter sends standard input and the receiver writes what arrives
    /// to standard output.
    pub sinkmode: bool,
    /// Receiver address (default `::`, with IPv4 too; `0.0.0.0` with
    /// `family` ipv4).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bind: Option<IpAddr>,
    /// Address family.
    pub family: Family,
    /// UDP receiver: end a transfer when nothing arrives for this long (its
    /// end markers were lost).
    pub udp_idle: HumanDuration,
    /// Pass/fail assertions over the result's figures, such as
    /// "goodput >= 900Mbit" (see `goodput_core::assertion`); any that
    /// fails gives the exit status for failed assertions.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub assert: Vec<crate::assertion::Assertion>,
}

impl Default for TtcpSpec {
    fn default() -> Self {
        Self {
            role: None,
            host: None,
            buflen: 8192,
            nbuf: 2048,
            port: 5001,
            udp: false,
            nodelay: false,
            sockbuf: None,
            sinkmode: true,
            bind: None,
            family: Family::Any,
            udp_idle: HumanDuration(Duration::from_secs(5)),
            assert: Vec::new(),
        }
    }
}

impl TtcpSpec {
    /// Whether this end transmits.
    pub fn transmits(&self) -> bool {
        self.role == Some(TtcpRole::Transmit)
    }

    /// The socket buffer size in bytes, once `validate` has passed.
    pub fn sockbuf_bytes(&self) -> Option<u32> {
        self.sockbuf.and_then(|b| u32::try_from(b.0).ok())
    }
}

impl KindSpec for TtcpSpec {
    const KIND: Kind = Kind::Ttcp;
    const CLASS: RunClass = RunClass::Exclusive;
    const RATE_LIMITED: bool = true;
    // The engine sets no TOS on TTCP's sockets.
    const DSCP: Marking<Self> = None;
    const FAMILIES: &'static [alert::Family] = &[alert::Family::Throughput];

    /// Every rule of `goodput ttcp`'s flags.
    fn validate(&self) -> Result<(), SpecError> {
        crate::assertion::check(Self::KIND, &self.assert)?;
        match (self.role, &self.host) {
            (None, _) => {
                return Err(SpecError::new(
                    "role",
                    "is required: transmit (-t) or receive (-r)",
                ))
            }
            (Some(TtcpRole::Transmit), None) => {
                return Err(SpecError::new("host", "is required to transmit"))
            }
            (Some(TtcpRole::Receive), Some(_)) => {
                return Err(SpecError::new("host", "is for the transmitter only"))
            }
            _ => {}
        }
        if self.bind.is_some() && self.transmits() {
            return Err(SpecError::new("bind", "is for the receiver only"));
        }
        let min = if self.udp { MIN_UDP_BUFLEN } else { 1 };
        if self.buflen < min || self.buflen > MAX_BUFLEN {
            return Err(SpecError::new(
                "buflen",
                format!("must be between {min} and {MAX_BUFLEN} bytes"),
            ));
        }
        if self.udp && self.buflen > MAX_UDP_BUFLEN {
            return Err(SpecError::new(
                "buflen",
                format!("with `udp` must be at most {MAX_UDP_BUFLEN} bytes (one UDP datagram)"),
            ));
        }
        if self.transmits() && self.nbuf == 0 {
            return Err(SpecError::new("nbuf", "must be at least 1"));
        }
        if self.sockbuf.is_some_and(|b| u32::try_from(b.0).is_err()) {
            return Err(SpecError::new("sockbuf", "must be below 4 GiB"));
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
        self.host.iter().map(|h| target(h, self.port)).collect()
    }

    fn bitrate(&self) -> Option<u64> {
        None
    }

    fn names_a_file(&self) -> Option<&'static str> {
        None
    }

    fn reach(&self) -> Reach {
        // No beacon service answers it: only the mesh's own ports.
        Reach::default()
    }

    fn figures() -> Vec<&'static Figure> {
        crate::catalogue::with_common(&crate::catalogue::TTCP)
    }
}
