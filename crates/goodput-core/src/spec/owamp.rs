//! `goodput owamp` as a document: an OWAMP (RFC 4656) client, owping's
//! one-off test or powstream's endless one.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{Family, SpecError};
use crate::alert;
use crate::assertion::{Assertion, Figure};
use crate::kind::{ms, target, BeaconService, Kind, KindSpec, Marking, Reach, Target};
use crate::schedule::{Ms, RunClass};
use crate::units::{HumanDuration, PortRange};

/// OWAMP-Control's registered TCP port.
pub const OWAMP_PORT: u16 = 861;

/// The largest test packet either kind sends or asks a peer to send,
/// bytes of UDP payload (a jumbo frame's worth).
pub const MAX_TEST_PACKET: u32 = 9000;

/// An OWAMP test packet's header before padding: open mode.
pub const OPEN_HEADER: u32 = 14;

/// The same, authenticated and encrypted modes.
pub const AUTHENTICATED_HEADER: u32 = 48;

/// The longest KeyID, bytes of UTF-8 (RFC 4656 §3.1: 80 octets).
pub const MAX_KEY_IDENTITY: usize = 80;

/// The most packets one session may ask for: a day at 10,000 packets/s
/// is under it, so it bounds nothing a real test wants.
pub const MAX_COUNT: u64 = 1_000_000_000;

/// The most packets a continuous stream's summary may span.
pub const MAX_SUMMARY_EVERY: u64 = 1_000_000;

/// The longest a loss timeout or a packet interval may be.
pub const MAX_WAIT: Duration = Duration::from_secs(3600);

/// Which way an OWAMP test's packets go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum OwampDirection {
    /// One session each way (owping's default).
    #[default]
    Both,
    /// From this host to the server only (owping `-t`).
    To,
    /// From the server to this host only (owping `-f`).
    From,
}

impl OwampDirection {
    /// Whether it sends packets to the server.
    pub fn sends(self) -> bool {
        matches!(self, OwampDirection::Both | OwampDirection::To)
    }

    /// Whether it asks the server to send packets here.
    pub fn receives(self) -> bool {
        matches!(self, OwampDirection::Both | OwampDirection::From)
    }
}

/// The security mode of OWAMP- and TWAMP-Control and of the test packets
/// (RFC 4656 §3.1).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum SecurityMode {
    /// Nothing authenticated or encrypted.
    #[default]
    Open,
    /// The control connection encrypted; test packets' timestamps in the
    /// clear, their sequence numbers encrypted.
    Authenticated,
    /// Control and test packets encrypted.
    Encrypted,
}

impl SecurityMode {
    /// Its name, as documents and results write it.
    pub fn name(self) -> &'static str {
        match self {
            SecurityMode::Open => "open",
            SecurityMode::Authenticated => "authenticated",
            SecurityMode::Encrypted => "encrypted",
        }
    }

    /// Whether it needs a shared secret.
    pub fn needs_key(self) -> bool {
        self != SecurityMode::Open
    }

    /// An OWAMP (and a TWAMP sender's) test packet's header in this mode,
    /// bytes before padding.
    pub fn header(self) -> u32 {
        match self {
            SecurityMode::Open => OPEN_HEADER,
            SecurityMode::Authenticated | SecurityMode::Encrypted => AUTHENTICATED_HEADER,
        }
    }
}

/// An OWAMP (RFC 4656) test. Every field has the default of its flag in
/// `goodput owamp`, which are owping's where owping has one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct OwampSpec {
    /// The OWAMP server (`HOST`, `HOST:PORT`, `[v6]:PORT`): owampd, a
    /// perfSONAR host, or goodput's; none: an embedded goodput server on
    /// loopback.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// OWAMP-Control TCP port, when `host` has none.
    pub port: u16,
    /// Which way packets go: `both` (a session each way), `to` the server
    /// or `from` it.
    pub direction: OwampDirection,
    /// Packets per session (with `continuous`: unused).
    pub count: u64,
    /// Time between packets (with `poisson`, the mean).
    pub interval: HumanDuration,
    /// Send times drawn from an exponential distribution with `interval`
    /// as its mean (owping's `-i` with `e`), rather than a fixed interval.
    pub poisson: bool,
    /// Bytes of padding after the test packet's header (14 bytes open, 48
    /// authenticated or encrypted); at most 9000 bytes in all.
    pub padding: u32,
    /// DSCP of the test packets (0-63).
    pub dscp: u8,
    /// A packet that has not arrived this long after it was sent is lost
    /// (owping's `-L`; its default is the control round trip plus 2 s).
    pub timeout: HumanDuration,
    /// Security mode: `open`, `authenticated` or `encrypted` (the last two
    /// with `key_identity` and `passphrase_file`).
    pub mode: SecurityMode,
    /// The KeyID the server knows the shared secret by (owping's `-u`; at
    /// most 80 bytes of UTF-8).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_identity: Option<String>,
    /// A pass-phrase file in owamp's `pfs` format (owping's `-k`) holding
    /// the secret of `key_identity`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub passphrase_file: Option<PathBuf>,
    /// UDP ports to take the test ports from (`LOW..HIGH`; owping's `-P`);
    /// none: any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub test_ports: Option<PortRange>,
    /// Local address to connect and send from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bind: Option<IpAddr>,
    /// Address family.
    pub family: Family,
    /// Status line period.
    pub status_interval: HumanDuration,
    /// A stream that never ends, cut into a summary every
    /// `summary_every` packets (powstream); `count` is then unused.
    pub continuous: bool,
    /// With `continuous`: packets per summary (powstream's `-N`;
    /// pScheduler's `latencybg` default is 600).
    pub summary_every: u64,
    /// With `continuous`: how long the stream sends (none: until
    /// stopped); the sessions under way then finish.
    /// A mesh's stream lasts as long as its schedule's `repeat`, so the
    /// next run takes over where it ends.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duration: Option<HumanDuration>,
    /// Pass/fail assertions over the result's figures, such as
    /// "loss.to < 0.1%" (see `goodput_core::assertion`); any that fails
    /// gives the exit status for failed assertions.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub assert: Vec<Assertion>,
}

/// What a continuous stream adds to its duration: the first session's
/// set-up (2 s) and the last session's fetch (a second).
pub const STREAM_ENDS_MS: u64 = 3_000;

impl Default for OwampSpec {
    fn default() -> Self {
        Self {
            host: None,
            port: OWAMP_PORT,
            direction: OwampDirection::Both,
            count: 100,
            interval: HumanDuration(Duration::from_millis(100)),
            poisson: false,
            padding: 0,
            dscp: 0,
            timeout: HumanDuration(Duration::from_secs(2)),
            mode: SecurityMode::Open,
            key_identity: None,
            passphrase_file: None,
            test_ports: None,
            bind: None,
            family: Family::Any,
            status_interval: HumanDuration(Duration::from_secs(1)),
            continuous: false,
            summary_every: 600,
            duration: None,
            assert: Vec::new(),
        }
    }
}

impl OwampSpec {
    /// UDP payload of one test packet, bytes: the mode's header and the
    /// padding.
    pub fn packet_bytes(&self) -> u32 {
        self.mode.header().saturating_add(self.padding)
    }
}

/// The rules OWAMP and TWAMP share: a key for the modes that need one, a
/// key identity RFC 4656 can carry, intervals and timeouts in bounds.
pub(crate) fn validate_control(
    mode: SecurityMode,
    key_identity: &Option<String>,
    passphrase_file: &Option<PathBuf>,
) -> Result<(), SpecError> {
    if let Some(k) = key_identity {
        if k.is_empty() || k.len() > MAX_KEY_IDENTITY {
            return Err(SpecError::new(
                "key_identity",
                format!(
                    "must be 1-{MAX_KEY_IDENTITY} bytes of UTF-8 (it is {} bytes)",
                    k.len()
                ),
            ));
        }
    }
    match (
        mode.needs_key(),
        key_identity.is_some(),
        passphrase_file.is_some(),
    ) {
        (true, false, _) => Err(SpecError::new(
            "key_identity",
            format!("is required in {} mode (with `passphrase_file`)", mode.name()),
        )),
        (true, true, false) => Err(SpecError::new(
            "passphrase_file",
            format!(
                "is required in {} mode (owamp's pfs file holding the key of `key_identity`)",
                mode.name()
            ),
        )),
        (false, true, _) => Err(SpecError::new(
            "key_identity",
            "is for the authenticated and encrypted modes; set `mode`",
        )),
        (false, false, true) => Err(SpecError::new(
            "passphrase_file",
            "is for the authenticated and encrypted modes; set `mode`",
        )),
        _ => Ok(()),
    }
}

/// `interval` and `timeout` in bounds.
pub(crate) fn validate_times(interval: Duration, timeout: Duration) -> Result<(), SpecError> {
    if interval < Duration::from_micros(1) || interval > MAX_WAIT {
        return Err(SpecError::new("interval", "must be 1us to 1h"));
    }
    if timeout.is_zero() || timeout > MAX_WAIT {
        return Err(SpecError::new("timeout", "must be above zero and at most 1h"));
    }
    Ok(())
}

impl KindSpec for OwampSpec {
    const KIND: Kind = Kind::Owamp;
    // A few small packets a second, like STAMP: beside anything.
    const CLASS: RunClass = RunClass::Background;
    const RATE_LIMITED: bool = false;
    const DSCP: Marking<Self> = Some(|s, d| s.dscp = d);
    // One-way only: no round trip.
    const FAMILIES: &'static [alert::Family] = &[
        alert::Family::Loss,
        alert::Family::OneWayDelay,
        alert::Family::Jitter,
    ];

    /// Every rule of `goodput owamp`'s flags.
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
        if self.padding > max {
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
        if self.summary_every == 0 || self.summary_every > MAX_SUMMARY_EVERY {
            return Err(SpecError::new(
                "summary_every",
                format!("must be 1-{MAX_SUMMARY_EVERY} packets"),
            ));
        }
        if self.status_interval.0 < Duration::from_millis(10) {
            return Err(SpecError::new("status_interval", "must be at least 10ms"));
        }
        if let Some(d) = self.duration {
            if !self.continuous {
                return Err(SpecError::new(
                    "duration",
                    "is for a continuous stream (a session lasts count × interval)",
                ));
            }
            if d.0 < Duration::from_secs(1) {
                return Err(SpecError::new("duration", "must be at least 1s"));
            }
        }
        Ok(())
    }

    fn assertions(&self) -> &[Assertion] {
        &self.assert
    }

    fn expected_ms(&self) -> Option<Ms> {
        // A continuous stream sends for its duration (none: never ends),
        // after the first session's set-up (2 s), and its last session
        // then waits out the loss timeout and is fetched (a second).
        if self.continuous {
            return self.duration.map(|d| {
                ms(d.0)
                    .saturating_add(ms(self.timeout.0))
                    .saturating_add(STREAM_ENDS_MS)
            });
        }
        Some({
            let sending = self.count as f64 * ms(self.interval.0) as f64;
            (sending.min(u64::MAX as f64 / 4.0) as Ms).saturating_add(ms(self.timeout.0))
        })
    }

    fn targets(&self) -> Vec<Target> {
        self.host.iter().map(|h| target(h, self.port)).collect()
    }

    fn bitrate(&self) -> Option<u64> {
        let per_second = 1.0 / self.interval.0.as_secs_f64().max(1e-9);
        let ways = if self.direction == OwampDirection::Both {
            2.0
        } else {
            1.0
        };
        Some((per_second * f64::from(self.packet_bytes()) * 8.0 * ways) as u64)
    }

    fn names_a_file(&self) -> Option<&'static str> {
        self.passphrase_file.is_some().then_some("passphrase_file")
    }

    fn reach(&self) -> Reach {
        // The beacon's service, and the registered control port, where a
        // perfSONAR host answers.
        Reach {
            services: &[BeaconService::Owamp],
            port: Some(OWAMP_PORT),
        }
    }

    fn figures() -> Vec<&'static Figure> {
        crate::catalogue::with_common(&crate::catalogue::OWAMP)
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
    fn an_owamp_spec_takes_owpings_defaults() {
        let specs = read_document("kind = \"owamp\"", true).unwrap();
        assert_eq!(specs, vec![TestSpec::Owamp(OwampSpec::default())]);
        let TestSpec::Owamp(o) = &specs[0] else {
            panic!("{specs:?}")
        };
        assert_eq!((o.port, o.count, o.padding, o.summary_every), (861, 100, 0, 600));
        assert_eq!(o.direction, OwampDirection::Both);
        assert_eq!(o.mode, SecurityMode::Open);
        assert_eq!(o.interval.0, Duration::from_millis(100));
        assert_eq!(o.timeout.0, Duration::from_secs(2));
        assert!(!o.poisson && !o.continuous);
        assert_eq!(o.packet_bytes(), 14);
        assert_eq!(specs[0].expected_ms(), Some(100 * 100 + 2_000));
        assert_eq!(specs[0].class(), RunClass::Background);
        assert_eq!(specs[0].targets(), vec![]);
        // 10 packets/s of 14 bytes, both ways.
        assert_eq!(specs[0].bitrate(), Some(2 * 10 * 14 * 8));
    }

    #[test]
    fn an_owamp_spec_round_trips_and_a_stream_has_no_end() {
        let spec = TestSpec::Owamp(OwampSpec {
            host: Some("ps.example.net:8610".into()),
            direction: OwampDirection::From,
            poisson: true,
            padding: 100,
            mode: SecurityMode::Encrypted,
            key_identity: Some("mesh".into()),
            passphrase_file: Some("/etc/goodput/owamp.pfs".into()),
            test_ports: Some("8760..8960".parse().unwrap()),
            continuous: true,
            summary_every: 300,
            ..OwampSpec::default()
        });
        let json = serde_json::to_string(&spec).unwrap();
        assert!(json.contains(r#""direction":"from""#), "{json}");
        assert!(json.contains(r#""mode":"encrypted""#), "{json}");
        assert!(json.contains(r#""test_ports":"8760..8960""#), "{json}");
        assert_eq!(read_document(&json, false).unwrap(), vec![spec.clone()]);
        let toml = toml::to_string(&spec).unwrap();
        assert_eq!(read_document(&toml, true).unwrap(), vec![spec.clone()]);
        assert_eq!(spec.expected_ms(), None);
        assert_eq!(spec.targets(), vec![("ps.example.net".to_owned(), Some(8610))]);
        assert_eq!(spec.names_a_file(), Some("passphrase_file"));
    }

    #[test]
    fn bad_owamp_specs_name_the_field() {
        assert_eq!(
            error(r#"{"kind": "owamp", "count": 0}"#),
            "owamp.count: must be 1-1000000000 packets"
        );
        assert_eq!(
            error(r#"{"kind": "owamp", "interval": "0s"}"#),
            "owamp.interval: must be 1us to 1h"
        );
        assert_eq!(
            error(r#"{"kind": "owamp", "timeout": "0s"}"#),
            "owamp.timeout: must be above zero and at most 1h"
        );
        assert_eq!(
            error(r#"{"kind": "owamp", "summary_every": 0}"#),
            "owamp.summary_every: must be 1-1000000 packets"
        );
        assert_eq!(
            error(r#"{"kind": "owamp", "padding": 8987}"#),
            "owamp.padding: must be at most 8986 bytes in open mode (a 14-byte header and the \
             padding make at most 9000 bytes)"
        );
        // 48 bytes of header leave less room.
        assert!(error(
            r#"{"kind": "owamp", "padding": 8953, "mode": "authenticated", "key_identity": "k",
                "passphrase_file": "/k.pfs"}"#
        )
        .starts_with("owamp.padding: must be at most 8952 bytes in authenticated mode"));
        assert!(read_document(
            r#"{"kind": "owamp", "padding": 8952, "mode": "authenticated", "key_identity": "k",
                "passphrase_file": "/k.pfs"}"#,
            false
        )
        .is_ok());
        assert_eq!(
            error(r#"{"kind": "owamp", "mode": "authenticated"}"#),
            "owamp.key_identity: is required in authenticated mode (with `passphrase_file`)"
        );
        assert_eq!(
            error(r#"{"kind": "owamp", "mode": "encrypted", "key_identity": "k"}"#),
            "owamp.passphrase_file: is required in encrypted mode (owamp's pfs file holding the \
             key of `key_identity`)"
        );
        assert_eq!(
            error(r#"{"kind": "owamp", "key_identity": "k", "passphrase_file": "/k.pfs"}"#),
            "owamp.key_identity: is for the authenticated and encrypted modes; set `mode`"
        );
        let long = "k".repeat(81);
        assert_eq!(
            error(&format!(
                r#"{{"kind": "owamp", "mode": "authenticated", "key_identity": "{long}", "passphrase_file": "/k"}}"#
            )),
            "owamp.key_identity: must be 1-80 bytes of UTF-8 (it is 81 bytes)"
        );
        assert!(error(r#"{"kind": "owamp", "test_ports": "9000..8000"}"#).starts_with("owamp.test_ports: "));
        assert_eq!(
            error(r#"{"kind": "owamp", "direction": "sideways"}"#),
            "owamp.direction: unknown variant `sideways`, expected one of `both`, `to`, `from`"
        );
        assert_eq!(
            TestSpec::Owamp(OwampSpec::default())
                .set_dscp(64)
                .unwrap_err()
                .to_string(),
            "dscp: must be 0-63"
        );
        let mut s = TestSpec::Owamp(OwampSpec::default());
        s.set_dscp(46).unwrap();
        let TestSpec::Owamp(o) = &s else { panic!("{s:?}") };
        assert_eq!(o.dscp, 46);
    }
}
