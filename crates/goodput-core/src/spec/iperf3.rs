//! `goodput iperf3` as a document: an iperf3 client test with iperf3's own
//! option set.

use std::net::IpAddr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{Family, SpecError};
use crate::alert;
use crate::assertion::{Assertion, Figure};
use crate::iperf3::params::{Params, Protocol};
use crate::kind::{ms, target, BeaconService, Kind, KindSpec, Marking, Reach, Target};
use crate::schedule::{Ms, RunClass};
use crate::units::{BitRate, HumanDuration, Iperf3Size};

/// An iperf3 test against an iperf3 server (stock iperf3 or goodput's).
/// Every field has the default of its flag in `goodput iperf3`; sizes read
/// as iperf3 reads them (`128K` = 128 KiB) and rates are bits per second.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct Iperf3Spec {
    /// Server name or address; none: an embedded goodput iperf3 server on
    /// loopback.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// Server port.
    pub port: u16,
    /// Test length, whole seconds (not used with `bytes` or `blockcount`).
    pub time: HumanDuration,
    /// End after this many bytes (sent, or received with `reverse`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes: Option<Iperf3Size>,
    /// End after this many blocks of `length` bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub blockcount: Option<u64>,
    /// Parallel streams per direction (1-128).
    pub parallel: u32,
    /// The server sends.
    pub reverse: bool,
    /// Both directions at once.
    pub bidir: bool,
    /// UDP instead of TCP.
    pub udp: bool,
    /// Target rate per stream (UDP default 1048576 bit/s; TCP unlimited).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bitrate: Option<BitRate>,
    /// Block (TCP write) or datagram (UDP) size; 0 or none: iperf3's
    /// default (TCP 128 KiB, UDP 1460 B).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub length: Option<Iperf3Size>,
    /// Socket buffer size on both ends.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window: Option<Iperf3Size>,
    /// TCP congestion control algorithm on both ends.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub congestion: Option<String>,
    /// TCP maximum segment size, bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mss: Option<u32>,
    /// TCP_NODELAY on the data connections.
    pub no_delay: bool,
    /// Whole seconds left out of the figures at the start.
    pub omit: HumanDuration,
    /// IP type of service byte (DSCP × 4).
    pub tos: u8,
    /// Local port of the first data stream (the others use the next ports).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cport: Option<u16>,
    /// Local address to bind.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bind: Option<IpAddr>,
    /// Address family.
    pub family: Family,
    /// Ask the server for its own report.
    pub get_server_output: bool,
    /// 64-bit UDP sequence numbers.
    pub udp_counters_64bit: bool,
    /// Send the digits 0-9 repeated instead of random bytes.
    pub repeating_payload: bool,
    /// Title, echoed into both ends' JSON.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Extra data string, echoed into both ends' JSON.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub extra_data: Option<String>,
    /// Status line period.
    pub interval: HumanDuration,
    /// How long a connect or a server answer may take.
    pub timeout: HumanDuration,
    /// Pass/fail assertions over the result's figures, such as
    /// "goodput >= 900Mbit" (see `goodput_core::assertion`); any that
    /// fails gives the exit status for failed assertions.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub assert: Vec<crate::assertion::Assertion>,
}

impl Default for Iperf3Spec {
    fn default() -> Self {
        Self {
            host: None,
            port: 5201,
            time: HumanDuration(Duration::from_secs(10)),
            bytes: None,
            blockcount: None,
            parallel: 1,
            reverse: false,
            bidir: false,
            udp: false,
            bitrate: None,
            length: None,
            window: None,
            congestion: None,
            mss: None,
            no_delay: false,
            omit: HumanDuration(Duration::ZERO),
            tos: 0,
            cport: None,
            bind: None,
            family: Family::Any,
            get_server_output: false,
            udp_counters_64bit: false,
            repeating_payload: false,
            title: None,
            extra_data: None,
            interval: HumanDuration(Duration::from_secs(1)),
            timeout: HumanDuration(Duration::from_secs(30)),
            assert: Vec::new(),
        }
    }
}

/// Whole seconds of `d`, or the error for `field`.
fn whole_seconds(field: &str, d: HumanDuration) -> Result<u32, SpecError> {
    if d.0.subsec_nanos() != 0 {
        return Err(SpecError::new(field, "must be whole seconds"));
    }
    u32::try_from(d.0.as_secs()).map_err(|_| SpecError::new(field, "is too long"))
}

impl Iperf3Spec {
    /// The parameters sent to the server (checked as a server checks them
    /// by [`Iperf3Spec::validate`]).
    pub fn params(&self) -> Result<Params, SpecError> {
        let mut p = Params::new(if self.udp { Protocol::Udp } else { Protocol::Tcp });
        p.time = whole_seconds("time", self.time)?;
        p.num = self.bytes.map_or(0, |b| b.0);
        p.blockcount = self.blockcount.unwrap_or(0);
        if p.num > 0 || p.blockcount > 0 {
            p.time = 0;
        }
        p.omit = whole_seconds("omit", self.omit)?;
        p.parallel = self.parallel;
        // A length of 0 is iperf3's default, as stock iperf3 takes it.
        if let Some(l) = self.length.filter(|l| l.0 > 0) {
            p.len = u32::try_from(l.0).map_err(|_| SpecError::new("length", "is too large"))?;
        }
        if let Some(b) = self.bitrate {
            p.bandwidth = b.0;
        }
        p.reverse = self.reverse;
        p.bidirectional = self.bidir;
        if let Some(w) = self.window {
            p.window = u32::try_from(w.0).map_err(|_| SpecError::new("window", "is too large"))?;
        }
        p.mss = self.mss.unwrap_or(0);
        p.nodelay = self.no_delay;
        p.tos = self.tos;
        p.congestion = self.congestion.clone();
        p.get_server_output = self.get_server_output;
        p.udp_counters_64bit = self.udp_counters_64bit;
        p.repeating_payload = self.repeating_payload;
        p.title = self.title.clone();
        p.extra_data = self.extra_data.clone();
        p.client_version = Some(format!("goodput-{}", env!("CARGO_PKG_VERSION")));
        Ok(p)
    }
}

impl KindSpec for Iperf3Spec {
    const KIND: Kind = Kind::Iperf3;
    const CLASS: RunClass = RunClass::Exclusive;
    const RATE_LIMITED: bool = true;
    // iperf3's own `tos` is the whole byte: the code point above the two
    // ECN bits.
    const DSCP: Marking<Self> = Some(|s, d| s.tos = d << 2);
    const FAMILIES: &'static [alert::Family] = &[alert::Family::Throughput];

    /// Every rule of `goodput iperf3`'s flags, and the checks an iperf3
    /// server makes of the parameters, before anything is sent.
    fn validate(&self) -> Result<(), SpecError> {
        crate::assertion::check(Self::KIND, &self.assert)?;
        if let Some(h) = &self.host {
            super::split_target(h, self.port).map_err(|e| SpecError::new("host", e))?;
        }
        if self.interval.0 < Duration::from_millis(10) {
            return Err(SpecError::new("interval", "must be at least 10ms"));
        }
        if self.timeout.0.is_zero() {
            return Err(SpecError::new("timeout", "must be above zero"));
        }
        if !(1..=128).contains(&self.parallel) {
            return Err(SpecError::new("parallel", "must be 1-128"));
        }
        if self.reverse && self.bidir {
            return Err(SpecError::new("reverse", "cannot be used with `bidir`"));
        }
        if self.bytes.is_some() && self.blockcount.is_some() {
            return Err(SpecError::new("bytes", "cannot be used with `blockcount`"));
        }
        let p = self.params()?;
        if p.num == 0 && p.blockcount == 0 && p.time == 0 {
            return Err(SpecError::new(
                "time",
                "must be at least 1 second (or give `bytes` or `blockcount`)",
            ));
        }
        Params::from_json(&p.to_json())
            .map_err(|e| SpecError::new("", format!("invalid iperf3 parameters: {e}")))?;
        Ok(())
    }

    fn assertions(&self) -> &[Assertion] {
        &self.assert
    }

    fn expected_ms(&self) -> Option<Ms> {
        self.bytes.is_none().then(|| ms(self.time.0) + ms(self.omit.0))
    }

    fn targets(&self) -> Vec<Target> {
        self.host.iter().map(|h| target(h, self.port)).collect()
    }

    fn bitrate(&self) -> Option<u64> {
        self.bitrate.map(|b| b.0).filter(|b| *b > 0)
    }

    fn names_a_file(&self) -> Option<&'static str> {
        None
    }

    fn reach(&self) -> Reach {
        Reach {
            services: &[BeaconService::Iperf3],
            port: None,
        }
    }

    fn figures() -> Vec<&'static Figure> {
        crate::catalogue::with_common(&crate::catalogue::IPERF3)
    }
}
