//! `goodput stamp` as a document.

use std::net::IpAddr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{Family, SpecError};
use crate::alert;
use crate::assertion::{Assertion, Figure};
use crate::kind::{ms, target, BeaconService, Kind, KindSpec, Marking, Reach, Target};
use crate::schedule::{Ms, RunClass};
use crate::stamp::{BASE_LEN, MAX_PACKET_LEN};
use crate::units::HumanDuration;

/// A STAMP (RFC 8762) Session-Sender run. Every field has the default of
/// its flag in `goodput stamp`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct StampSpec {
    /// Reflector name or address (`HOST`, `HOST:PORT`); none: an embedded
    /// goodput reflector on loopback.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// Reflector UDP port.
    pub port: u16,
    /// Time between packets of a session (default 100ms; not with `rate`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interval: Option<HumanDuration>,
    /// Packets per second per session, instead of `interval`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate: Option<f64>,
    /// Packets per session (default 100 when `duration` is not given).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub count: Option<u64>,
    /// Length of the run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duration: Option<HumanDuration>,
    /// Packet size, bytes (44 + padding, up to 9000).
    pub size: usize,
    /// DSCP of the packets (0-63).
    pub dscp: u8,
    /// SSID of the first session (the others count up).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ssid: Option<u16>,
    /// A packet with no reply after this long is lost.
    pub timeout: HumanDuration,
    /// Concurrent sessions, each from its own UDP port.
    pub sessions: u32,
    /// Local address to send from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bind: Option<IpAddr>,
    /// Address family.
    pub family: Family,
    /// Make the embedded reflector stateful (its own sequence numbers).
    pub stateful: bool,
    /// Status line period.
    pub status_interval: HumanDuration,
    /// One long-lived stream (no `count`): it sends until `duration` ends
    /// or it is stopped. An agent keeps a background one as per-minute
    /// summaries; a mesh gives it a `duration` within its schedule's
    /// `repeat`, so the next run takes over where it ends (powstream's
    /// model, as OWAMP's `continuous`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub continuous: bool,
    /// Pass/fail assertions over the result's figures, such as
    /// "goodput >= 900Mbit" (see `goodput_core::assertion`); any that
    /// fails gives the exit status for failed assertions.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub assert: Vec<crate::assertion::Assertion>,
}

impl Default for StampSpec {
    fn default() -> Self {
        Self {
            host: None,
            port: 862,
            interval: None,
            rate: None,
            count: None,
            duration: None,
            size: BASE_LEN,
            dscp: 0,
            ssid: None,
            timeout: HumanDuration(Duration::from_secs(2)),
            sessions: 1,
            bind: None,
            family: Family::Any,
            stateful: false,
            status_interval: HumanDuration(Duration::from_secs(1)),
            continuous: false,
            assert: Vec::new(),
        }
    }
}

impl StampSpec {
    /// The interval when neither `interval` nor `rate` is given.
    pub const DEFAULT_INTERVAL: HumanDuration = HumanDuration(Duration::from_millis(100));

    /// The time between packets: `interval`, or one over `rate`.
    pub fn packet_interval(&self) -> Duration {
        match (self.rate, self.interval) {
            (Some(r), _) if r.is_finite() && r > 0.0 => Duration::from_secs_f64(1.0 / r),
            (_, Some(i)) => i.0,
            _ => Self::DEFAULT_INTERVAL.0,
        }
    }

    /// Packets per session: `count`, or 100 when no `duration` is given;
    /// none for a continuous stream.
    pub fn packet_count(&self) -> Option<u64> {
        if self.continuous {
            return None;
        }
        match (self.count, self.duration) {
            (None, None) => Some(100),
            (c, _) => c,
        }
    }
}

impl KindSpec for StampSpec {
    const KIND: Kind = Kind::Stamp;
    const CLASS: RunClass = RunClass::Background;
    const RATE_LIMITED: bool = true;
    const DSCP: Marking<Self> = Some(|s, d| s.dscp = d);
    // One-way delay too, when the two clocks are synchronised.
    const FAMILIES: &'static [alert::Family] = &[
        alert::Family::Loss,
        alert::Family::Delay,
        alert::Family::OneWayDelay,
        alert::Family::Jitter,
    ];

    /// Every rule of `goodput stamp`'s flags.
    fn validate(&self) -> Result<(), SpecError> {
        crate::assertion::check(Self::KIND, &self.assert)?;
        if let Some(h) = &self.host {
            super::split_target(h, self.port).map_err(|e| SpecError::new("host", e))?;
        }
        if let Some(r) = self.rate {
            if self.interval.is_some() {
                return Err(SpecError::new("interval", "cannot be used with `rate`"));
            }
            if !(r.is_finite() && r > 0.0 && r <= 1e6) {
                return Err(SpecError::new(
                    "rate",
                    "must be above 0 and at most 1000000 packets/s (0.5 sends one every 2 s)",
                ));
            }
        }
        if self.packet_interval() < Duration::from_micros(1) {
            return Err(SpecError::new("interval", "must be at least 1us"));
        }
        if !(BASE_LEN..=MAX_PACKET_LEN).contains(&self.size) {
            return Err(SpecError::new(
                "size",
                format!(
                    "must be {BASE_LEN}..={MAX_PACKET_LEN} bytes (the 44-byte STAMP packet plus padding)"
                ),
            ));
        }
        if self.dscp > 63 {
            return Err(SpecError::new("dscp", "must be 0-63"));
        }
        if self.ssid == Some(0) {
            return Err(SpecError::new("ssid", "must be 1-65535"));
        }
        if !(1..=100_000).contains(&self.sessions) {
            return Err(SpecError::new("sessions", "must be 1-100000"));
        }
        if self.timeout.0.is_zero() {
            return Err(SpecError::new("timeout", "must be above zero"));
        }
        if self.continuous && self.count.is_some() {
            return Err(SpecError::new(
                "count",
                "is for a session of its own length; a continuous stream sends until its \
                 `duration` ends or it is stopped",
            ));
        }
        if self.count == Some(0) {
            return Err(SpecError::new("count", "must be at least 1"));
        }
        if self.duration.is_some_and(|d| d.0.is_zero()) {
            return Err(SpecError::new("duration", "must be above zero"));
        }
        if self.status_interval.0 < Duration::from_millis(10) {
            return Err(SpecError::new("status_interval", "must be at least 10ms"));
        }
        if self.stateful && self.host.is_some() {
            return Err(SpecError::new(
                "stateful",
                "configures the embedded reflector; a remote reflector is set up on its own side",
            ));
        }
        Ok(())
    }

    fn assertions(&self) -> &[Assertion] {
        &self.assert
    }

    fn expected_ms(&self) -> Option<Ms> {
        // A continuous stream's last packets wait out their timeout after
        // its duration; with none it has no end of its own.
        if self.continuous {
            return self.duration.map(|d| ms(d.0).saturating_add(ms(self.timeout.0)));
        }
        self.duration.map(|d| ms(d.0)).or_else(|| {
            let every = match (self.rate, self.interval) {
                (Some(r), _) if r > 0.0 => 1000.0 / r,
                (_, Some(i)) => ms(i.0) as f64,
                _ => 100.0,
            };
            Some((self.count.unwrap_or(100) as f64 * every) as Ms + ms(self.timeout.0))
        })
    }

    fn targets(&self) -> Vec<Target> {
        self.host.iter().map(|h| target(h, self.port)).collect()
    }

    fn bitrate(&self) -> Option<u64> {
        let per_second = match (self.rate, self.interval) {
            (Some(r), _) => r,
            (None, Some(i)) if !i.0.is_zero() => 1.0 / i.0.as_secs_f64(),
            _ => 10.0,
        };
        Some((per_second * self.size as f64 * 8.0 * f64::from(self.sessions.max(1))) as u64)
    }

    fn names_a_file(&self) -> Option<&'static str> {
        None
    }

    fn reach(&self) -> Reach {
        Reach {
            services: &[BeaconService::Stamp],
            port: None,
        }
    }

    fn figures() -> Vec<&'static Figure> {
        crate::catalogue::with_common(&crate::catalogue::STAMP)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continuous_stream_has_no_count_and_lasts_its_duration_and_timeout() {
        let s: StampSpec = serde_json::from_str(
            r#"{"host": "192.0.2.1", "continuous": true, "duration": "59m", "rate": 10}"#,
        )
        .unwrap();
        s.validate().unwrap();
        assert_eq!(s.packet_count(), None);
        assert_eq!(s.expected_ms(), Some(59 * 60_000 + 2_000));
        let endless = StampSpec {
            continuous: true,
            ..StampSpec::default()
        };
        assert_eq!(endless.packet_count(), None);
        assert_eq!(endless.expected_ms(), None);
        let counted = StampSpec {
            continuous: true,
            count: Some(600),
            ..StampSpec::default()
        };
        let e = counted.validate().unwrap_err();
        assert!(e.to_string().starts_with("count:"), "{e}");
    }
}
