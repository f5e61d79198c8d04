//! `goodput twamp` as a document: a TWAMP (RFC 5357) Control-Client and
//! Session-Sender, as twping is.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::owamp::{validate_control, validate_times, SecurityMode, MAX_COUNT, MAX_TEST_PACKET};
use super::{Family, SpecError};
use crate::alert;
use crate::assertion::{Assertion, Figure};
use crate::kind::{ms, target, BeaconService, Kind, KindSpec, Marking, Reach, Target};
use crate::schedule::{Ms, RunClass};
use crate::units::{HumanDuration, PortRange};

/// TWAMP-Control's registered TCP port (UDP 862 is STAMP's; the two
/// share the number without conflict).
pub const TWAMP_PORT: u16 = 862;

/// A reflected TWAMP test packet's header before padding: open mode.
pub const REFLECTED_OPEN_HEADER: u32 = 41;

/// The same, authenticated and encrypted modes.
pub const REFLECTED_AUTHENTICATED_HEADER: u32 = 112;

/// A TWAMP test. Every field has the default of its flag in
/// `goodput twamp`, which are twping's where twping has one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct TwampSpec {
    /// The TWAMP server (`HOST`, `HOST:PORT`, `[v6]:PORT`): twampd, a
    /// perfSONAR host, or goodput's; none: an embedded goodput server on
    /// loopback.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// TWAMP-Control TCP port, when `host` has none.
    pub port: u16,
    /// Packets in the session.
    pub count: u64,
    /// Time between packets.
    pub interval: HumanDuration,
    /// Bytes of padding after the sender's header (14 bytes open, 48
    /// authenticated or encrypted); none: twping's default, just enough
    /// for the reflector to answer at the same size (27 open, 64
    /// otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub padding: Option<u32>,
    /// DSCP of the test packets (0-63; the reflector answers with the
    /// same).
    pub dscp: u8,
    /// A packet whose reflection has not come back this long after it
    /// was sent is lost.
    pub timeout: HumanDuration,
    /// Security mode: `open`, `authenticated` or `encrypted` (the last two
    /// with `key_identity` and `passphrase_file`).
    pub mode: SecurityMode,
    /// The KeyID the server knows the shared secret by (at most 80 bytes
    /// of UTF-8).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_identity: Option<String>,
    /// A pass-phrase file in owamp's `pfs` format holding the secret of
    /// `key_identity`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub passphrase_file: Option<PathBuf>,
    /// UDP ports to take the test port from (`LOW..HIGH`); none: any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub test_ports: Option<PortRange>,
    /// Local address to connect and send from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bind: Option<IpAddr>,
    /// Address family.
    pub family: Family,
    /// Status line period.
    pub status_interval: HumanDuration,
    /// Pass/fail assertions over the result's figures, such as
    /// "rtt.median < 5ms" (see `goodput_core::assertion`); any that fails
    /// gives the exit status for failed assertions.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub assert: Vec<Assertion>,
}

impl Default for TwampSpec {
    fn default() -> Self {
        Self {
            host: None,
            port: TWAMP_PORT,
            count: 100,
            interval: HumanDuration(Duration::from_millis(100)),
            padding: None,
            dscp: 0,
            timeout: HumanDuration(Duration::from_secs(2)),
            mode: SecurityMode::Open,
            key_identity: None,
            passphrase_file: None,
            test_ports: None,
            bind: None,
            family: Family::Any,
            status_interval: HumanDuration(Duration::from_secs(1)),
            assert: Vec::new(),
        }
    }
}

impl TwampSpec {
    /// The reflected packet's header in `mode`, bytes before padding.
    pub fn reflected_header(mode: SecurityMode) -> u32 {
        match mode {
            SecurityMode::Open => REFLECTED_OPEN_HEADER,
            SecurityMode::Authenticated | SecurityMode::Encrypted => REFLECTED_AUTHENTICATED_HEADER,
        }
    }

    /// The padding sent: `padding`, or twping's default, the difference
    /// between the reflected and the sent header.
    pub fn padding_bytes(&self) -> u32 {
        self.padding
            .unwrap_or(Self::reflected_header(self.mode) - self.mode.header())
    }

    /// UDP payload of one test packet sent, bytes.
    pub fn packet_bytes(&self) -> u32 {
        self.mode.header().saturating_add(self.padding_bytes())
    }
}

impl KindSpec for TwampSpec {
    const KIND: Kind = Kind::Twamp;
    // A few small packets a second, like STAMP: beside anything.
    const CLASS: RunClass = RunClass::Background;
    const RATE_LIMITED: bool = false;
    const DSCP: Marking<Self> = Some(|s, d| s.dscp = d);
    const FAMILIES: &'static [alert::Family] =
        &[alert::Family::Loss, alert::Family::Delay, alert::Family::Jitter];

    /// Every rule of `goodput twamp`'s flags.
    fn validate(&self) -> Result<(), SpecError> {
        crate::assertion::check(Self::KIND, &self.assert)?;
        if let Some(h) = &self.host {
            super::split_target(h, self.port).map_err(|e| SpecError::new("host", e))?;
        }
        if self.count == 0 || self.count > MAX_COUNT {
            return Err(SpecError::new("count", format!("must be 1-{MAX_COUNT} packets")));
        }
        validate_times(self.interval.0, self.timeout.0)?;
        let max = MAX_TEST_PACKET - self.mode.header();
        if self.padding_bytes() > max {
            return Err(SpecError::new(
                "padding",
                format!(
                    "must be at most {max} bytes in {} mode (a {}-byte header and the padding \
                     make at most {MAX_TEST_PACKET} bytes)",
                    self.mode.name(),
                    self.mode.header()
                ),
            ));
        }
        if self.dscp > 63 {
            return Err(SpecError::new("dscp", "must be 0-63"));
        }
        validate_control(self.mode, &self.key_identity, &self.passphrase_file)?;
        if self.status_interval.0 < Duration::from_millis(10) {
            return Err(SpecError::new("status_interval", "must be at least 10ms"));
        }
        Ok(())
    }

    fn assertions(&self) -> &[Assertion] {
        &self.assert
    }

    fn expected_ms(&self) -> Option<Ms> {
        let sending = self.count as f64 * ms(self.interval.0) as f64;
        Some((sending.min(u64::MAX as f64 / 4.0) as Ms).saturating_add(ms(self.timeout.0)))
    }

    fn targets(&self) -> Vec<Target> {
        self.host.iter().map(|h| target(h, self.port)).collect()
    }

    fn bitrate(&self) -> Option<u64> {
        let per_second = 1.0 / self.interval.0.as_secs_f64().max(1e-9);
        Some((per_second * f64::from(self.packet_bytes()) * 8.0) as u64)
    }

    fn names_a_file(&self) -> Option<&'static str> {
        self.passphrase_file.is_some().then_some("passphrase_file")
    }

    fn reach(&self) -> Reach {
        Reach {
            services: &[BeaconService::Twamp],
            port: None,
        }
    }

    fn figures() -> Vec<&'static Figure> {
        crate::catalogue::with_common(&crate::catalogue::TWAMP)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{read_document, TestSpec};

    fn error(text: &str) -> String {
        read_document(text, false).unwrap_err().to_string()
    }

    #[test]
    fn a_twamp_spec_takes_twpings_defaults() {
        let specs = read_document(r#"{"kind": "twamp", "host": "ps.example.net"}"#, false).unwrap();
        let TestSpec::Twamp(t) = &specs[0] else {
            panic!("{specs:?}")
        };
        assert_eq!((t.port, t.count, t.padding), (862, 100, None));
        assert_eq!(t.interval.0, Duration::from_millis(100));
        assert_eq!(t.timeout.0, Duration::from_secs(2));
        // twping pads so that the reflector answers at the size it got.
        assert_eq!((t.padding_bytes(), t.packet_bytes()), (27, 41));
        let keyed = TwampSpec {
            mode: SecurityMode::Authenticated,
            ..t.clone()
        };
        assert_eq!((keyed.padding_bytes(), keyed.packet_bytes()), (64, 112));
        assert_eq!(specs[0].targets(), vec![("ps.example.net".to_owned(), Some(862))]);
        assert_eq!(specs[0].expected_ms(), Some(100 * 100 + 2_000));
        assert_eq!(specs[0].class(), RunClass::Background);
        let json = serde_json::to_string(&specs[0]).unwrap();
        assert!(!json.contains("padding"), "{json}");
        assert_eq!(read_document(&json, false).unwrap(), specs);
    }

    #[test]
    fn bad_twamp_specs_name_the_field() {
        assert_eq!(
            error(r#"{"kind": "twamp", "count": 0}"#),
            "twamp.count: must be 1-1000000000 packets"
        );
        assert_eq!(
            error(r#"{"kind": "twamp", "interval": "2h"}"#),
            "twamp.interval: must be 1us to 1h"
        );
        assert!(error(r#"{"kind": "twamp", "padding": 9000}"#)
            .starts_with("twamp.padding: must be at most 8986 bytes in open mode"));
        assert_eq!(
            error(r#"{"kind": "twamp", "mode": "encrypted"}"#),
            "twamp.key_identity: is required in encrypted mode (with `passphrase_file`)"
        );
        assert_eq!(
            error(r#"{"kind": "twamp", "passphrase_file": "/k.pfs"}"#),
            "twamp.passphrase_file: is for the authenticated and encrypted modes; set `mode`"
        );
        assert_eq!(
            error(r#"{"kind": "twamp", "continuous": true}"#),
            "twamp.continuous: unknown field; known fields: host, port, count, interval, padding, \
             dscp, timeout, mode, key_identity, passphrase_file, test_ports, bind, family, \
             status_interval, assert"
        );
    }
}
