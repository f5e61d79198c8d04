//! `goodput trace` and `goodput ping` as documents.

use std::net::IpAddr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{Family, SpecError};
use crate::alert;
use crate::assertion::{Assertion, Figure};
use crate::kind::{ms, BeaconService, Kind, KindSpec, Marking, Reach, Target};
use crate::path::{PingMethod, ProbeMethod};
use crate::schedule::{Ms, RunClass};
use crate::units::HumanDuration;

/// The smallest IPv4 probe: a 20-byte IP header, an 8-byte UDP or ICMP
/// header, and nothing more.
pub const MIN_PROBE_BYTES: u32 = 28;
/// The largest probe (an IP packet's 16-bit length).
pub const MAX_PROBE_BYTES: u32 = 65_535;
/// UDP probes use destination ports `port`, `port + 1`, … up to this many.
pub const MAX_UDP_PROBES: u32 = 4096;

/// A traceroute with optional path MTU discovery. Every field has the
/// default of its flag in `goodput trace`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct TraceSpec {
    /// Destination name or address.
    pub host: String,
    /// How probes are sent: `udp`, `tcp` (SYN to `port`) or `icmp` (echo).
    pub method: ProbeMethod,
    /// Destination port: UDP's first (33434 unless given; each probe the
    /// next), TCP's (80 unless given). Not with `icmp`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// First TTL (hop limit) probed.
    pub first_hop: u8,
    /// Stop at this TTL if the destination has not answered.
    pub max_hops: u8,
    /// Probes per hop.
    pub probes: u32,
    /// How long a probe waits for its answer at most.
    pub wait: HumanDuration,
    /// A probe stops waiting after this many times the RTT of an answer
    /// from its own hop (traceroute's HERE; 0: not early).
    pub wait_here: f64,
    /// And after this many times the RTT of an answer from a later hop
    /// (traceroute's NEAR; 0: not early).
    pub wait_near: f64,
    /// Probes in flight at once (over several hops).
    pub in_flight: u32,
    /// IP packet size of the probes, bytes (default 60 for IPv4 and 80
    /// for IPv6; with `pmtu`, the outgoing interface's MTU).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size: Option<u32>,
    /// Path MTU discovery: probes with DF set, sizes lowered as routers
    /// tell, and a check for a black hole.
    pub pmtu: bool,
    /// Look up the reverse names of the hops (off: a trace sends nothing
    /// but its probes).
    pub names: bool,
    /// Local address to send from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bind: Option<IpAddr>,
    /// Address family.
    pub family: Family,
    /// Pass/fail assertions over the result's figures, such as
    /// "hops <= 8" (see `goodput_core::assertion`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub assert: Vec<crate::assertion::Assertion>,
}

impl Default for TraceSpec {
    fn default() -> Self {
        Self {
            host: String::new(),
            method: ProbeMethod::Udp,
            port: None,
            first_hop: 1,
            max_hops: 30,
            probes: 3,
            wait: HumanDuration(Duration::from_secs(1)),
            wait_here: 3.0,
            wait_near: 10.0,
            in_flight: 16,
            size: None,
            pmtu: false,
            names: false,
            bind: None,
            family: Family::Any,
            assert: Vec::new(),
        }
    }
}

impl TraceSpec {
    /// The destination port of the method (none for ICMP).
    pub fn dest_port(&self) -> Option<u16> {
        match self.method {
            ProbeMethod::Udp => Some(self.port.unwrap_or(33434)),
            ProbeMethod::Tcp => Some(self.port.unwrap_or(80)),
            ProbeMethod::Icmp => None,
        }
    }
}

impl KindSpec for TraceSpec {
    const KIND: Kind = Kind::Trace;
    const CLASS: RunClass = RunClass::Background;
    const RATE_LIMITED: bool = false;
    // The engine sets no TOS on its probes.
    const DSCP: Marking<Self> = None;
    const FAMILIES: &'static [alert::Family] = &[alert::Family::Path];

    /// Every rule of `goodput trace`'s flags.
    fn validate(&self) -> Result<(), SpecError> {
        crate::assertion::check(Self::KIND, &self.assert)?;
        if self.host.trim().is_empty() {
            return Err(SpecError::new("host", "is required: the destination to trace"));
        }
        if self.first_hop == 0 || self.max_hops == 0 || self.first_hop > self.max_hops {
            return Err(SpecError::new(
                "first_hop",
                "and `max_hops` must be 1-255 with `first_hop` <= `max_hops`",
            ));
        }
        if !(1..=10).contains(&self.probes) {
            return Err(SpecError::new("probes", "must be 1-10 per hop"));
        }
        if !(1..=256).contains(&self.in_flight) {
            return Err(SpecError::new("in_flight", "must be 1-256"));
        }
        if self.wait.0 < Duration::from_millis(1) || self.wait.0 > Duration::from_secs(60) {
            return Err(SpecError::new("wait", "must be 1ms-60s"));
        }
        for (field, v) in [("wait_here", self.wait_here), ("wait_near", self.wait_near)] {
            if !(v.is_finite() && (0.0..=1000.0).contains(&v)) {
                return Err(SpecError::new(
                    field,
                    "must be a factor of 0-1000 (0: wait the whole `wait`)",
                ));
            }
        }
        if let Some(s) = self.size {
            if !(MIN_PROBE_BYTES..=MAX_PROBE_BYTES).contains(&s) {
                return Err(SpecError::new(
                    "size",
                    format!("must be {MIN_PROBE_BYTES}-{MAX_PROBE_BYTES} bytes (the whole IP packet)"),
                ));
            }
        }
        match self.method {
            ProbeMethod::Icmp if self.port.is_some() => {
                return Err(SpecError::new("port", "means nothing to ICMP echo probes"));
            }
            ProbeMethod::Tcp if self.pmtu || self.size.is_some() => {
                return Err(SpecError::new(
                    "method",
                    "tcp sends bare SYNs, whose size is the kernel's: `pmtu` and `size` need udp or icmp",
                ));
            }
            ProbeMethod::Udp => {
                let p = u32::from(self.dest_port().unwrap_or(0));
                if p == 0 || p + MAX_UDP_PROBES > 65_536 {
                    return Err(SpecError::new(
                        "port",
                        format!(
                            "must be 1-{}: UDP probes use up to {MAX_UDP_PROBES} ports from it",
                            65_536 - MAX_UDP_PROBES
                        ),
                    ));
                }
            }
            _ => {}
        }
        if self.port == Some(0) {
            return Err(SpecError::new("port", "must be 1-65535"));
        }
        Ok(())
    }

    fn assertions(&self) -> &[Assertion] {
        &self.assert
    }

    /// Every probe waiting its full time, a round per `in_flight` probes,
    /// and a black-hole search's 16 more.
    fn expected_ms(&self) -> Option<Ms> {
        let rounds =
            (u64::from(self.max_hops) * u64::from(self.probes)).div_ceil(u64::from(self.in_flight.max(1)));
        Some(ms(self.wait.0).saturating_mul(rounds + if self.pmtu { 20 } else { 1 }))
    }

    fn targets(&self) -> Vec<Target> {
        vec![(self.host.clone(), self.dest_port())]
    }

    fn bitrate(&self) -> Option<u64> {
        None
    }

    fn names_a_file(&self) -> Option<&'static str> {
        None
    }

    fn reach(&self) -> Reach {
        // Its own default port, or a test service's.
        Reach {
            services: &[BeaconService::TestPort, BeaconService::Stamp],
            port: self.port.is_none().then(|| self.dest_port()).flatten(),
        }
    }

    fn figures() -> Vec<&'static Figure> {
        crate::catalogue::with_common(&crate::catalogue::TRACE)
    }
}

/// `goodput ping`: round trips by ICMP echo or TCP connect.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct PingSpec {
    /// Destination name or address.
    pub host: String,
    /// `auto` (ICMP where this user may, else TCP), `icmp` or `tcp`.
    pub method: PingMethod,
    /// TCP's port.
    pub port: u16,
    /// Requests to send.
    pub count: u64,
    /// Time between requests.
    pub interval: HumanDuration,
    /// How long a request waits for its reply.
    pub timeout: HumanDuration,
    /// ICMP echo data bytes (after the 8-byte ICMP header).
    pub size: u32,
    /// Local address to send from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bind: Option<IpAddr>,
    /// Address family.
    pub family: Family,
    /// Pass/fail assertions, such as "loss == 0%" or "rtt.p99 < 5ms".
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub assert: Vec<crate::assertion::Assertion>,
}

impl Default for PingSpec {
    fn default() -> Self {
        Self {
            host: String::new(),
            method: PingMethod::Auto,
            port: 80,
            count: 5,
            interval: HumanDuration(Duration::from_secs(1)),
            timeout: HumanDuration(Duration::from_secs(1)),
            size: 56,
            bind: None,
            family: Family::Any,
            assert: Vec::new(),
        }
    }
}

impl KindSpec for PingSpec {
    const KIND: Kind = Kind::Ping;
    const CLASS: RunClass = RunClass::Background;
    const RATE_LIMITED: bool = false;
    // The engine sets no TOS on its echo requests or connects.
    const DSCP: Marking<Self> = None;
    const FAMILIES: &'static [alert::Family] =
        &[alert::Family::Loss, alert::Family::Delay, alert::Family::Jitter];

    /// Every rule of `goodput ping`'s flags.
    fn validate(&self) -> Result<(), SpecError> {
        crate::assertion::check(Self::KIND, &self.assert)?;
        if self.host.trim().is_empty() {
            return Err(SpecError::new("host", "is required: the destination to ping"));
        }
        if !(1..=1_000_000).contains(&self.count) {
            return Err(SpecError::new("count", "must be 1-1000000"));
        }
        if self.interval.0 < Duration::from_millis(1) {
            return Err(SpecError::new("interval", "must be at least 1ms"));
        }
        if self.timeout.0 < Duration::from_millis(1) || self.timeout.0 > Duration::from_secs(60) {
            return Err(SpecError::new("timeout", "must be 1ms-60s"));
        }
        if self.size > 65_000 {
            return Err(SpecError::new("size", "must be 0-65000 data bytes"));
        }
        if self.port == 0 {
            return Err(SpecError::new("port", "must be 1-65535"));
        }
        Ok(())
    }

    fn assertions(&self) -> &[Assertion] {
        &self.assert
    }

    fn expected_ms(&self) -> Option<Ms> {
        Some(
            ms(self.interval.0)
                .saturating_mul(self.count)
                .saturating_add(ms(self.timeout.0)),
        )
    }

    fn targets(&self) -> Vec<Target> {
        vec![(
            self.host.clone(),
            (self.method != crate::path::PingMethod::Icmp).then_some(self.port),
        )]
    }

    fn bitrate(&self) -> Option<u64> {
        None
    }

    fn names_a_file(&self) -> Option<&'static str> {
        None
    }

    fn reach(&self) -> Reach {
        // Its own default port, or the test port.
        Reach {
            services: &[BeaconService::TestPort],
            port: Some(PingSpec::default().port),
        }
    }

    fn figures() -> Vec<&'static Figure> {
        crate::catalogue::with_common(&crate::catalogue::PING)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules() {
        let ok = TraceSpec {
            host: "192.0.2.1".into(),
            ..TraceSpec::default()
        };
        ok.validate().unwrap();
        assert_eq!(ok.dest_port(), Some(33434));
        let bad = |s: TraceSpec| s.validate().unwrap_err().field;
        assert_eq!(bad(TraceSpec::default()), "host");
        assert_eq!(
            bad(TraceSpec {
                first_hop: 9,
                max_hops: 3,
                ..ok.clone()
            }),
            "first_hop"
        );
        assert_eq!(
            bad(TraceSpec {
                probes: 0,
                ..ok.clone()
            }),
            "probes"
        );
        assert_eq!(
            bad(TraceSpec {
                size: Some(20),
                ..ok.clone()
            }),
            "size"
        );
        assert_eq!(
            bad(TraceSpec {
                port: Some(65000),
                ..ok.clone()
            }),
            "port"
        );
        let tcp = TraceSpec {
            method: ProbeMethod::Tcp,
            pmtu: true,
            ..ok.clone()
        };
        assert_eq!(bad(tcp), "method");
        let icmp = TraceSpec {
            method: ProbeMethod::Icmp,
            port: Some(80),
            ..ok.clone()
        };
        assert_eq!(bad(icmp), "port");
        let p = PingSpec {
            host: "x".into(),
            ..PingSpec::default()
        };
        p.validate().unwrap();
        assert_eq!(
            PingSpec {
                count: 0,
                ..p.clone()
            }
            .validate()
            .unwrap_err()
            .field,
            "count"
        );
        assert_eq!(PingSpec { port: 0, ..p }.validate().unwrap_err().field, "port");
    }
}
