//! `goodput quic` as a document.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{Family, SpecError};
use crate::alert;
use crate::assertion::{Assertion, Figure};
use crate::kind::{ms, target, BeaconService, Kind, KindSpec, Marking, Reach, Target};
use crate::quic::scenario::{Body, Scenario};
use crate::schedule::{Ms, RunClass};
use crate::units::{ByteSize, HumanDuration, SizeOrTime};

/// The scenario run when none is given: one 100,000,000-byte download.
pub const DEFAULT_SCENARIO: &str = "*1:8:100000000;";

/// A QUIC perf test (the picoquic / quinn-perf protocol). Every field has
/// the default of its flag in `goodput quic`. What runs is, first found:
/// `handshakes`, `rps` or `latency`, `upload`, `download`, else `scenario`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct QuicSpec {
    /// Server name or address (`HOST`, `HOST:PORT`); none: an embedded
    /// goodput server on loopback.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// Server UDP port.
    pub port: u16,
    /// picoquic scenario (`*1:397:5000000;`, media `s30:n150:2000`,
    /// datagrams `d50:n250:100`, or the legacy form); default: one
    /// 100,000,000-byte download. Not with the other ways of running.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scenario: Option<String>,
    /// Upload this many bytes after the 8-byte header, or for this long.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upload: Option<SizeOrTime>,
    /// Download this many bytes, or for this long (an unlimited request
    /// ended by STOP_SENDING).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub download: Option<SizeOrTime>,
    /// Requests per second: `streams` requests outstanding per connection
    /// for `duration`.
    pub rps: bool,
    /// One request at a time per connection, for `duration`.
    pub latency: bool,
    /// Open and close connections as fast as possible for `duration`.
    pub handshakes: bool,
    /// Requests outstanding per connection with `rps` (1-10000).
    pub streams: u32,
    /// Request payload bytes with `rps` and `latency` (after the 8-byte
    /// header).
    pub request: ByteSize,
    /// Response bytes with `rps` and `latency`.
    pub response: ByteSize,
    /// Length of `rps`, `latency` and `handshakes` runs.
    pub duration: HumanDuration,
    /// Connections at once, each running the whole scenario (1-10000).
    pub connections: u32,
    /// Ask for responses on unidirectional streams (batch requests only).
    pub uni: bool,
    /// The largest UDP payload of a QUIC packet, bytes, both ways (this
    /// end's path MTU discovery stops there and the server is told it may
    /// send no larger), 1200-65527; default: discovery up to 6,500 bytes.
    /// quinn perf's packets are 1,452 bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_mtu: Option<u16>,
    /// Trust certificates from this PEM file (default: the system's roots;
    /// the embedded server's certificate is always accepted).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ca: Option<PathBuf>,
    /// Accept any server certificate (signatures are still checked).
    pub insecure: bool,
    /// TLS server name (default: the host, or localhost for an address).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sni: Option<String>,
    /// Address family.
    pub family: Family,
    /// Status line period.
    pub status_interval: HumanDuration,
    /// Pass/fail assertions over the result's figures, such as
    /// "goodput >= 900Mbit" (see `goodput_core::assertion`); any that
    /// fails gives the exit status for failed assertions.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub assert: Vec<crate::assertion::Assertion>,
}

impl Default for QuicSpec {
    fn default() -> Self {
        Self {
            host: None,
            port: 4433,
            scenario: None,
            upload: None,
            download: None,
            rps: false,
            latency: false,
            handshakes: false,
            streams: 1,
            request: ByteSize(512),
            response: ByteSize(4000),
            duration: HumanDuration(Duration::from_secs(10)),
            connections: 1,
            uni: false,
            max_mtu: None,
            ca: None,
            insecure: false,
            sni: None,
            family: Family::Any,
            status_interval: HumanDuration(Duration::from_secs(1)),
            assert: Vec::new(),
        }
    }
}

impl QuicSpec {
    /// The scenario that runs, as text: the one given (or the default),
    /// or the one an upload or download of a size stands for; `None` for
    /// the runs that are not scenarios (timed, requests, handshakes).
    pub fn scenario_text(&self) -> Option<String> {
        if self.handshakes || self.rps || self.latency {
            return None;
        }
        match (self.upload, self.download) {
            (Some(SizeOrTime::Size(n)), _) => Some(format!("*1:{}:0;", n.0.saturating_add(8))),
            (Some(SizeOrTime::Time(_)), _) | (None, Some(SizeOrTime::Time(_))) => None,
            (None, Some(SizeOrTime::Size(n))) => Some(format!("*1:8:{};", n.0)),
            (None, None) => Some(
                self.scenario
                    .clone()
                    .unwrap_or_else(|| DEFAULT_SCENARIO.to_owned()),
            ),
        }
    }

    /// The scenario that runs, parsed (`None` when the run is not one).
    pub fn parsed_scenario(&self) -> Result<Option<Scenario>, SpecError> {
        self.scenario_text()
            .map(|text| {
                Scenario::parse(&text).map_err(|e| SpecError::new("scenario", format!("'{text}': {e}")))
            })
            .transpose()
    }
}

impl KindSpec for QuicSpec {
    const KIND: Kind = Kind::Quic;
    const CLASS: RunClass = RunClass::Exclusive;
    const RATE_LIMITED: bool = true;
    // The engine sets no TOS on the QUIC endpoint's socket.
    const DSCP: Marking<Self> = None;
    const FAMILIES: &'static [alert::Family] = &[alert::Family::Throughput];

    /// Every rule of `goodput quic`'s flags.
    fn validate(&self) -> Result<(), SpecError> {
        crate::assertion::check(Self::KIND, &self.assert)?;
        // The ways of running exclude each other, as the flags do.
        let given = [
            ("upload", self.upload.is_some()),
            ("download", self.download.is_some()),
            ("rps", self.rps),
            ("latency", self.latency),
            ("handshakes", self.handshakes),
            ("scenario", self.scenario.is_some()),
        ];
        for (i, (a, a_on)) in given.iter().enumerate() {
            if let Some((b, _)) = given[i + 1..].iter().find(|(_, on)| *a_on && *on) {
                return Err(SpecError::new(a, format!("cannot be used with `{b}`")));
            }
        }
        if self.insecure && self.ca.is_some() {
            return Err(SpecError::new("insecure", "cannot be used with `ca`"));
        }
        if !(1..=10_000).contains(&self.streams) {
            return Err(SpecError::new("streams", "must be 1-10000"));
        }
        if !(1..=10_000).contains(&self.connections) {
            return Err(SpecError::new("connections", "must be 1-10000"));
        }
        if self.status_interval.0 < Duration::from_millis(10) {
            return Err(SpecError::new("status_interval", "must be at least 10ms"));
        }
        if self.duration.0.is_zero() {
            return Err(SpecError::new("duration", "must be above zero"));
        }
        check_mtu("max_mtu", self.max_mtu)?;
        for (field, v) in [("upload", self.upload), ("download", self.download)] {
            if matches!(v, Some(SizeOrTime::Time(d)) if d.0.is_zero()) {
                return Err(SpecError::new(field, "must be above zero"));
            }
        }
        if let Some(s) = self.parsed_scenario()? {
            if self.uni && s.descs.iter().any(|d| !matches!(d.body, Body::Batch { .. })) {
                return Err(SpecError::new(
                    "uni",
                    "applies to batch requests; media descriptions always use bidirectional streams",
                ));
            }
        }
        Ok(())
    }

    fn assertions(&self) -> &[Assertion] {
        &self.assert
    }

    fn expected_ms(&self) -> Option<Ms> {
        Some(ms(self.duration.0))
    }

    fn targets(&self) -> Vec<Target> {
        self.host.iter().map(|h| target(h, self.port)).collect()
    }

    fn bitrate(&self) -> Option<u64> {
        None
    }

    fn names_a_file(&self) -> Option<&'static str> {
        self.ca.is_some().then_some("ca")
    }

    fn reach(&self) -> Reach {
        Reach {
            services: &[BeaconService::Quic],
            port: None,
        }
    }

    fn figures() -> Vec<&'static Figure> {
        crate::catalogue::with_common(&crate::catalogue::QUIC)
    }
}

/// A QUIC packet-size cap: QUIC's smallest allowed UDP payload (RFC 9000
/// §14) to its largest (§18.2).
pub(crate) fn check_mtu(field: &str, v: Option<u16>) -> Result<(), SpecError> {
    match v {
        Some(n) if !(1200..=65_527).contains(&n) => Err(SpecError::new(
            field,
            format!("must be 1200-65527 B (QUIC's range), not {n}"),
        )),
        _ => Ok(()),
    }
}
