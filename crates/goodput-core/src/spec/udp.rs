//! `goodput udp` as a document.

use std::net::IpAddr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{Family, SpecError};
use crate::alert;
use crate::assertion::{Assertion, Figure};
use crate::kind::{ms, target, BeaconService, Kind, KindSpec, Marking, Reach, Target};
use crate::media::receiver::MAX_BUFFERED_FRAMES;
use crate::media::{MediaPlan, PlanError};
use crate::schedule::{Ms, RunClass};
use crate::session::VerifyMode;
use crate::units::{BitRate, HumanDuration};

/// The field a stream-planning error is reported against: the four
/// quantities the plan is made of, any of which may be the one to change.
pub const PLAN_FIELDS: &str = "bitrate/frame_rate/length/datagram_size";

/// A media-like UDP stream test (ctsTraffic's media streaming). Every
/// field has the default of its flag in `goodput udp`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct UdpSpec {
    /// Server name or address (`HOST`, `HOST:PORT`); none: an embedded
    /// goodput server on loopback.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// Server UDP port.
    pub port: u16,
    /// Stream bit rate, bits/s, rounded down to whole bytes; datagram
    /// headers count towards it.
    pub bitrate: BitRate,
    /// Frames per second (1-1000000).
    pub frame_rate: u32,
    /// Stream length, whole seconds.
    pub length: HumanDuration,
    /// Play-out delay: a frame not complete this long after the stream
    /// opens (plus its place in the stream) is dropped.
    pub buffer_depth: HumanDuration,
    /// Largest UDP datagram, bytes, the 34-byte header included.
    pub datagram_size: u32,
    /// Concurrent streams, each from its own UDP socket (1-100000).
    pub connections: u32,
    /// Streams each connection runs in turn (0: until the time limit or
    /// Ctrl-C).
    pub iterations: u64,
    /// The client streams to the server (default: the server streams).
    pub upload: bool,
    /// Verification of received payloads: data or connection.
    pub verify: VerifyMode,
    /// DSCP of the datagrams (0-63).
    pub dscp: u8,
    /// Local addresses to send from, round robin.
    pub bind: Vec<IpAddr>,
    /// Address family.
    pub family: Family,
    /// Stop after this long (open streams are recorded as aborted).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_limit: Option<HumanDuration>,
    /// Status line period.
    pub status_interval: HumanDuration,
    /// Pass/fail assertions over the result's figures, such as
    /// "goodput >= 900Mbit" (see `goodput_core::assertion`); any that
    /// fails gives the exit status for failed assertions.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub assert: Vec<crate::assertion::Assertion>,
}

impl Default for UdpSpec {
    fn default() -> Self {
        Self {
            host: None,
            port: 4444,
            bitrate: BitRate(25_000_000),
            frame_rate: 60,
            length: HumanDuration(Duration::from_secs(10)),
            buffer_depth: HumanDuration(Duration::from_secs(1)),
            datagram_size: 1400,
            connections: 1,
            iterations: 1,
            upload: false,
            verify: VerifyMode::Data,
            dscp: 0,
            bind: Vec::new(),
            family: Family::Any,
            time_limit: None,
            status_interval: HumanDuration(Duration::from_secs(1)),
            assert: Vec::new(),
        }
    }
}

impl UdpSpec {
    /// The stream's shape, as both ends compute it.
    pub fn plan(&self) -> Result<MediaPlan, PlanError> {
        let length = u32::try_from(self.length.0.as_secs()).unwrap_or(u32::MAX);
        MediaPlan::new(self.bitrate.0, self.frame_rate, length, self.datagram_size)
    }

    /// Frames a receiver holds ahead of play-out: buffer depth × frame rate.
    pub fn buffered_frames(&self) -> u64 {
        u64::try_from(self.buffer_depth.0.as_millis())
            .unwrap_or(u64::MAX)
            .saturating_mul(u64::from(self.frame_rate))
            / 1000
    }
}

impl KindSpec for UdpSpec {
    const KIND: Kind = Kind::Udp;
    const CLASS: RunClass = RunClass::Exclusive;
    const RATE_LIMITED: bool = true;
    const DSCP: Marking<Self> = Some(|s, d| s.dscp = d);
    const FAMILIES: &'static [alert::Family] = &[
        alert::Family::Throughput,
        alert::Family::Loss,
        alert::Family::Jitter,
    ];

    /// Every rule of `goodput udp`'s flags.
    fn validate(&self) -> Result<(), SpecError> {
        crate::assertion::check(Self::KIND, &self.assert)?;
        if !(1..=1_000_000).contains(&self.frame_rate) {
            return Err(SpecError::new("frame_rate", "must be 1-1000000"));
        }
        if !(1..=100_000).contains(&self.connections) {
            return Err(SpecError::new("connections", "must be 1-100000"));
        }
        if self.dscp > 63 {
            return Err(SpecError::new("dscp", "must be 0-63"));
        }
        let length = self.length.0;
        if length.subsec_nanos() != 0 || length.is_zero() || length.as_secs() > u64::from(u32::MAX) {
            return Err(SpecError::new(
                "length",
                "must be a whole number of seconds, at least 1s",
            ));
        }
        if self.status_interval.0 < Duration::from_millis(10) {
            return Err(SpecError::new("status_interval", "must be at least 10ms"));
        }
        if self.time_limit.is_some_and(|t| t.0.is_zero()) {
            return Err(SpecError::new("time_limit", "must be above zero"));
        }
        if self.buffer_depth.0 > Duration::from_secs(3600) {
            return Err(SpecError::new("buffer_depth", "must be at most 1h"));
        }
        self.plan()
            .map_err(|e| SpecError::new(PLAN_FIELDS, fields_named(&e.to_string())))?;
        let buffered = self.buffered_frames();
        if buffered > u64::from(MAX_BUFFERED_FRAMES) {
            return Err(SpecError::new(
                "buffer_depth",
                format!(
                    "× `frame_rate` is {buffered} frames, more than a receiver buffers ({MAX_BUFFERED_FRAMES})"
                ),
            ));
        }
        Ok(())
    }

    fn assertions(&self) -> &[Assertion] {
        &self.assert
    }

    fn expected_ms(&self) -> Option<Ms> {
        self.time_limit
            .map(|d| ms(d.0))
            .or(Some(ms(self.length.0).saturating_mul(self.iterations.max(1))))
    }

    fn targets(&self) -> Vec<Target> {
        self.host.iter().map(|h| target(h, self.port)).collect()
    }

    fn bitrate(&self) -> Option<u64> {
        Some(self.bitrate.0)
    }

    fn names_a_file(&self) -> Option<&'static str> {
        None
    }

    fn reach(&self) -> Reach {
        Reach {
            services: &[BeaconService::TestPort],
            port: None,
        }
    }

    fn figures() -> Vec<&'static Figure> {
        crate::catalogue::with_common(&crate::catalogue::UDP)
    }
}

/// A message that names flags (`--frame-rate`) with the spec's field
/// names instead (`` `frame_rate` ``), as a spec error names other fields.
fn fields_named(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(i) = rest.find("--") {
        out.push_str(&rest[..i]);
        let after = &rest[i + 2..];
        let end = after
            .find(|c: char| !(c.is_ascii_lowercase() || c == '-'))
            .unwrap_or(after.len());
        let name = after[..end].trim_end_matches('-');
        if name.is_empty() {
            out.push_str("--");
            rest = after;
        } else {
            out.push('`');
            out.push_str(&name.replace('-', "_"));
            out.push('`');
            rest = &after[name.len()..];
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_in_a_message_become_fields() {
        assert_eq!(
            fields_named("raise --datagram-size or --frame-rate, or -- x"),
            "raise `datagram_size` or `frame_rate`, or -- x"
        );
        assert_eq!(fields_named("no flags"), "no flags");
    }

    #[test]
    fn the_default_stream_plans() {
        let s = UdpSpec::default();
        assert_eq!(s.validate(), Ok(()));
        let p = s.plan().unwrap();
        assert_eq!((p.frame_rate, p.length_s, p.frames), (60, 10, 600));
        assert_eq!(s.buffered_frames(), 60);
    }

    #[test]
    fn a_plan_error_names_the_four_fields() {
        let s = UdpSpec {
            datagram_size: 20,
            ..UdpSpec::default()
        };
        let e = s.validate().unwrap_err();
        assert_eq!(e.field, PLAN_FIELDS);
        assert!(
            e.message.starts_with("`datagram_size` must be 69..=65507 bytes"),
            "{e}"
        );
    }
}
