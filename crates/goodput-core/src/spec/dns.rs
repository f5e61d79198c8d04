//! `goodput dns` as a document: queries to a DNS server (or the system's
//! resolver) over UDP, TCP or TLS, each answer held to an expectation.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{Family, SpecError};
use crate::alert;
use crate::assertion::{Assertion, Figure};
use crate::dns::{self, DnsTransport};
use crate::kind::{ms, target, Kind, KindSpec, Marking, Reach, Target};
use crate::schedule::{Ms, RunClass};
use crate::units::HumanDuration;

/// Most queries in one run.
pub const MAX_QUERIES: u64 = 100_000;
/// Most tries past a query's first.
pub const MAX_RETRIES: u32 = 10;
/// Most values one run may expect.
pub const MAX_EXPECTED: usize = 64;

/// A DNS test. Every field has the default of its flag in `goodput dns`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct DnsSpec {
    /// The name to ask about (`www.example.org`; asked fully qualified,
    /// with no search list).
    pub name: String,
    /// The record type to ask for: A, AAAA, CAA, CNAME, DNSKEY, DS,
    /// HTTPS, MX, NAPTR, NS, PTR, SOA, SRV, SSHFP, SVCB or TXT.
    pub record: String,
    /// The DNS server (`ADDR`, `ADDR:PORT`, `[v6]:PORT` or a name); none:
    /// the system's first resolver (`/etc/resolv.conf`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    /// How queries travel: `udp` (a truncated reply is asked again over
    /// TCP), `tcp` or `tls` (DNS over TLS, port 853 by default).
    pub transport: DnsTransport,
    /// tls: the name the server's certificate must carry; none: the
    /// server's name, or its address when it is given as one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_name: Option<String>,
    /// tls: a PEM file of the certificate authorities to trust; none: the
    /// system's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ca: Option<PathBuf>,
    /// Values each answer must hold (every one among the records of the
    /// asked type: `192.0.2.1`, `10 mail.example.org.`; case and a
    /// trailing dot do not count).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub expect: Vec<String>,
    /// A regular expression at least one record of each answer must
    /// match.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expect_pattern: Option<String>,
    /// Ask the server to recurse (the RD bit).
    pub recursion: bool,
    /// Queries to send.
    pub count: u64,
    /// Time between queries' starts.
    pub interval: HumanDuration,
    /// How long one try waits for its reply (TCP and TLS: with the
    /// connection's set-up).
    pub timeout: HumanDuration,
    /// Tries past the first when a try has no reply in time.
    pub retries: u32,
    /// Address family of the server's address, when it is a name.
    pub family: Family,
    /// Pass/fail assertions over the result's figures, such as
    /// "resolution.p95 < 50ms" or "mismatched == 0".
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub assert: Vec<Assertion>,
}

impl Default for DnsSpec {
    fn default() -> Self {
        Self {
            name: String::new(),
            record: "A".into(),
            server: None,
            transport: DnsTransport::Udp,
            tls_name: None,
            ca: None,
            expect: Vec::new(),
            expect_pattern: None,
            recursion: true,
            count: 3,
            interval: HumanDuration(Duration::from_millis(200)),
            timeout: HumanDuration(Duration::from_secs(2)),
            retries: 2,
            family: Family::Any,
            assert: Vec::new(),
        }
    }
}

impl DnsSpec {
    /// The server's port when its address names none.
    pub fn port(&self) -> u16 {
        self.transport.default_port()
    }
}

impl KindSpec for DnsSpec {
    const KIND: Kind = Kind::Dns;
    // A few small queries: beside anything but an exclusive run.
    const CLASS: RunClass = RunClass::Normal;
    const RATE_LIMITED: bool = false;
    // The engine sets no TOS on its queries.
    const DSCP: Marking<Self> = None;
    // Queries lost, the resolution time as the round trip's delay, and
    // failures: queries lost or answered not as expected.
    const FAMILIES: &'static [alert::Family] =
        &[alert::Family::Loss, alert::Family::Delay, alert::Family::Errors];

    /// Every rule of `goodput dns`'s flags.
    fn validate(&self) -> Result<(), SpecError> {
        crate::assertion::check(Self::KIND, &self.assert)?;
        dns::query_name(self.name.trim()).map_err(|e| {
            SpecError::new(
                "name",
                if self.name.trim().is_empty() {
                    "is required: the name to ask about".to_owned()
                } else {
                    e
                },
            )
        })?;
        dns::record_type(&self.record).map_err(|e| SpecError::new("record", e))?;
        if let Some(s) = &self.server {
            super::split_target(s, self.port()).map_err(|e| SpecError::new("server", e))?;
        }
        if self.transport != DnsTransport::Tls {
            if self.tls_name.is_some() {
                return Err(SpecError::new("tls_name", "is for `transport` tls"));
            }
            if self.ca.is_some() {
                return Err(SpecError::new("ca", "is for `transport` tls"));
            }
        }
        if self.expect.len() > MAX_EXPECTED {
            return Err(SpecError::new(
                "expect",
                format!("must hold at most {MAX_EXPECTED} values"),
            ));
        }
        if self.expect.iter().any(|v| v.trim().is_empty()) {
            return Err(SpecError::new("expect", "holds an empty value"));
        }
        dns::Expectation::new(&self.expect, self.expect_pattern.as_deref())
            .map_err(|e| SpecError::new("expect_pattern", e))?;
        if !(1..=MAX_QUERIES).contains(&self.count) {
            return Err(SpecError::new(
                "count",
                format!("must be 1-{MAX_QUERIES} queries"),
            ));
        }
        if self.interval.0 < Duration::from_millis(1) || self.interval.0 > Duration::from_secs(3600) {
            return Err(SpecError::new("interval", "must be 1ms to 1h"));
        }
        if self.timeout.0 < Duration::from_millis(1) || self.timeout.0 > Duration::from_secs(60) {
            return Err(SpecError::new("timeout", "must be 1ms to 60s"));
        }
        if self.retries > MAX_RETRIES {
            return Err(SpecError::new("retries", format!("must be 0-{MAX_RETRIES}")));
        }
        Ok(())
    }

    fn assertions(&self) -> &[Assertion] {
        &self.assert
    }

    fn expected_ms(&self) -> Option<Ms> {
        let tries = u64::from(self.retries) + 1;
        Some(
            ms(self.interval.0)
                .saturating_mul(self.count.saturating_sub(1))
                .saturating_add(ms(self.timeout.0).saturating_mul(tries)),
        )
    }

    fn targets(&self) -> Vec<Target> {
        self.server.iter().map(|s| target(s, self.port())).collect()
    }

    fn bitrate(&self) -> Option<u64> {
        None
    }

    fn names_a_file(&self) -> Option<&'static str> {
        self.ca.is_some().then_some("ca")
    }

    fn reach(&self) -> Reach {
        // No beacon service answers DNS; its own port only.
        Reach {
            services: &[],
            port: Some(self.port()),
        }
    }

    fn figures() -> Vec<&'static Figure> {
        crate::catalogue::with_common(&crate::catalogue::DNS)
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
    fn a_dns_spec_takes_its_flags_defaults() {
        let specs = read_document(r#"{"kind": "dns", "name": "www.goodput.test"}"#, false).unwrap();
        let TestSpec::Dns(d) = &specs[0] else {
            panic!("{specs:?}")
        };
        assert_eq!(
            (d.record.as_str(), d.count, d.retries, d.recursion),
            ("A", 3, 2, true)
        );
        assert_eq!(d.transport, DnsTransport::Udp);
        assert_eq!(specs[0].targets(), vec![]);
        assert_eq!(specs[0].expected_ms(), Some(2 * 200 + 3 * 2000));
        assert_eq!(specs[0].class(), RunClass::Normal);
        let tls = read_document(
            r#"{"kind": "dns", "name": "a.b", "server": "192.0.2.53", "transport": "tls", "ca": "/ca.pem"}"#,
            false,
        )
        .unwrap();
        assert_eq!(tls[0].targets(), vec![("192.0.2.53".to_owned(), Some(853))]);
        assert_eq!(tls[0].names_a_file(), Some("ca"));
        let json = serde_json::to_string(&tls[0]).unwrap();
        assert_eq!(read_document(&json, false).unwrap(), tls);
    }

    #[test]
    fn bad_dns_specs_name_the_field() {
        assert_eq!(
            error(r#"{"kind": "dns"}"#),
            "dns.name: is required: the name to ask about"
        );
        assert!(error(r#"{"kind": "dns", "name": "a.b", "record": "AXFR"}"#)
            .starts_with("dns.record: unknown record type 'AXFR'; one of A, AAAA"));
        assert_eq!(
            error(r#"{"kind": "dns", "name": "a.b", "ca": "/ca.pem"}"#),
            "dns.ca: is for `transport` tls"
        );
        assert!(error(r#"{"kind": "dns", "name": "a.b", "expect_pattern": "("}"#)
            .starts_with("dns.expect_pattern: not a regular expression"));
        assert_eq!(
            error(r#"{"kind": "dns", "name": "a.b", "retries": 11}"#),
            "dns.retries: must be 0-10"
        );
        assert_eq!(
            error(r#"{"kind": "dns", "name": "a.b", "count": 0}"#),
            "dns.count: must be 1-100000 queries"
        );
    }
}
