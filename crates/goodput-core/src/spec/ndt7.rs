//! `goodput ndt7` as a document: M-Lab's ndt7 speed test against any
//! ndt7 server (a goodput server or agent, an M-Lab ndt-server).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::SpecError;
use crate::alert;
use crate::assertion::{Assertion, Figure};
use crate::kind::{Kind, KindSpec, Marking, Reach, Target};
use crate::schedule::{Ms, RunClass};

/// An ndt7 test: the download subtest, then the upload subtest, each
/// about ten seconds. Every field has the default of its flag.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct Ndt7Spec {
    /// The server: `ws://HOST[:PORT]` or `wss://HOST[:PORT]`, optionally
    /// with a path before `/ndt/v7/…`; required.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Run the download subtest.
    pub download: bool,
    /// Run the upload subtest.
    pub upload: bool,
    /// Trust certificates from this PEM file for `wss://` (default: the
    /// system's roots).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ca: Option<PathBuf>,
    /// Accept any server certificate for `wss://`.
    pub insecure: bool,
    /// Pass/fail assertions over the result's figures, such as
    /// "download_rate >= 100Mbit".
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub assert: Vec<Assertion>,
}

impl Default for Ndt7Spec {
    fn default() -> Self {
        Self {
            url: None,
            download: true,
            upload: true,
            ca: None,
            insecure: false,
            assert: Vec::new(),
        }
    }
}

/// A server URL taken apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ndt7Url {
    /// `wss://` rather than `ws://`.
    pub tls: bool,
    /// The host (a name, an address; an IPv6 address without brackets).
    pub host: String,
    /// The port (80 or 443 unless given).
    pub port: u16,
    /// What comes before `/ndt/v7/…` (empty, or starting with `/`).
    pub prefix: String,
}

impl Ndt7Url {
    /// Reads `ws://HOST[:PORT][/PREFIX]`; a trailing `/ndt/v7/download`
    /// or `/ndt/v7/upload` is dropped, so a subtest's own URL reads too.
    pub fn parse(url: &str) -> Result<Ndt7Url, String> {
        let (tls, rest) = if let Some(r) = url.strip_prefix("wss://") {
            (true, r)
        } else if let Some(r) = url.strip_prefix("ws://") {
            (false, r)
        } else {
            return Err(format!("'{url}' is not a ws:// or wss:// URL"));
        };
        let rest = rest.split(['?', '#']).next().unwrap_or("");
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        if authority.is_empty() || authority.contains('@') {
            return Err(format!(
                "'{url}' names no host (or names a user, which ndt7 has no use for)"
            ));
        }
        let default_port = if tls { 443 } else { 80 };
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let (h, after) = v6
                .split_once(']')
                .ok_or_else(|| format!("'{url}': an IPv6 address needs its closing ]"))?;
            let port = match after.strip_prefix(':') {
                Some(p) => p
                    .parse()
                    .map_err(|_| format!("'{url}': the port must be a number 1-65535"))?,
                None if after.is_empty() => default_port,
                None => return Err(format!("'{url}': unexpected '{after}' after the address")),
            };
            (h.to_owned(), port)
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (
                    h.to_owned(),
                    p.parse()
                        .map_err(|_| format!("'{url}': the port must be a number 1-65535"))?,
                ),
                None => (authority.to_owned(), default_port),
            }
        };
        if port == 0 {
            return Err(format!("'{url}': the port must be a number 1-65535"));
        }
        let mut prefix = path.trim_end_matches('/').to_owned();
        for sub in [crate::ndt7::DOWNLOAD_PATH, crate::ndt7::UPLOAD_PATH] {
            if let Some(p) = prefix.strip_suffix(sub) {
                prefix = p.to_owned();
            }
        }
        Ok(Ndt7Url {
            tls,
            host,
            port,
            prefix,
        })
    }

    /// The URL of a subtest.
    pub fn subtest(&self, s: crate::ndt7::Subtest) -> String {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        format!(
            "{}://{host}:{}{}{}",
            if self.tls { "wss" } else { "ws" },
            self.port,
            self.prefix,
            s.path()
        )
    }
}

impl Ndt7Spec {
    /// The server's URL taken apart, once `validate` has passed.
    pub fn parsed_url(&self) -> Result<Ndt7Url, SpecError> {
        let url = self.url.as_deref().ok_or_else(|| {
            SpecError::new(
                "url",
                "is required: the ndt7 server, ws://HOST:PORT or wss://HOST",
            )
        })?;
        Ndt7Url::parse(url).map_err(|e| SpecError::new("url", e))
    }
}

impl KindSpec for Ndt7Spec {
    const KIND: Kind = Kind::Ndt7;
    // It fills the path each way, as a TCP test does.
    const CLASS: RunClass = RunClass::Exclusive;
    // The server sets the download's pace; a cap would measure only half.
    const RATE_LIMITED: bool = false;
    const DSCP: Marking<Self> = None;
    const FAMILIES: &'static [alert::Family] = &[alert::Family::Throughput];

    fn validate(&self) -> Result<(), SpecError> {
        crate::assertion::check(Self::KIND, &self.assert)?;
        let url = self.parsed_url()?;
        if !self.download && !self.upload {
            return Err(SpecError::new(
                "download",
                "and `upload` are both off: nothing to run",
            ));
        }
        if !url.tls && (self.ca.is_some() || self.insecure) {
            return Err(SpecError::new(
                "url",
                "is ws://, so `ca` and `insecure` (for wss://) do not apply",
            ));
        }
        if self.ca.is_some() && self.insecure {
            return Err(SpecError::new("ca", "and `insecure` exclude each other"));
        }
        Ok(())
    }

    fn assertions(&self) -> &[Assertion] {
        &self.assert
    }

    fn expected_ms(&self) -> Option<Ms> {
        // Ten seconds a subtest, and the hard cap's margin.
        Some(12_000 * (u64::from(self.download) + u64::from(self.upload)))
    }

    fn targets(&self) -> Vec<Target> {
        match self.parsed_url() {
            Ok(u) => vec![(u.host, Some(u.port))],
            Err(_) => Vec::new(),
        }
    }

    fn bitrate(&self) -> Option<u64> {
        None
    }

    fn names_a_file(&self) -> Option<&'static str> {
        self.ca.as_ref().map(|_| "ca")
    }

    fn reach(&self) -> Reach {
        Reach {
            services: &[crate::kind::BeaconService::Ndt7],
            port: None,
        }
    }

    fn figures() -> Vec<&'static Figure> {
        crate::catalogue::with_common(&crate::catalogue::NDT7)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ndt7::Subtest;

    #[test]
    fn urls_read_with_their_ports_prefixes_and_subtest_paths() {
        let u = Ndt7Url::parse("ws://127.0.0.1:4447").unwrap();
        assert_eq!(
            (u.tls, u.host.as_str(), u.port, u.prefix.as_str()),
            (false, "127.0.0.1", 4447, "")
        );
        assert_eq!(u.subtest(Subtest::Upload), "ws://127.0.0.1:4447/ndt/v7/upload");
        let u = Ndt7Url::parse("wss://ndt.example.org/ndt/v7/download?access_token=x").unwrap();
        assert_eq!((u.tls, u.port, u.prefix.as_str()), (true, 443, ""));
        let u = Ndt7Url::parse("ws://[::1]:9/speed/").unwrap();
        assert_eq!((u.host.as_str(), u.port, u.prefix.as_str()), ("::1", 9, "/speed"));
        assert_eq!(u.subtest(Subtest::Download), "ws://[::1]:9/speed/ndt/v7/download");
        for bad in [
            "http://x",
            "ws://",
            "ws://h:0",
            "ws://h:x",
            "ws://[::1",
            "ws://u@h",
        ] {
            assert!(Ndt7Url::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_spec_needs_a_url_a_subtest_and_tls_for_its_tls_options() {
        let ok = Ndt7Spec {
            url: Some("ws://h:1".into()),
            ..Ndt7Spec::default()
        };
        assert!(ok.validate().is_ok());
        assert_eq!(Ndt7Spec::default().validate().unwrap_err().field, "url");
        let none = Ndt7Spec {
            download: false,
            upload: false,
            ..ok.clone()
        };
        assert_eq!(none.validate().unwrap_err().field, "download");
        let insecure = Ndt7Spec {
            insecure: true,
            ..ok.clone()
        };
        assert_eq!(insecure.validate().unwrap_err().field, "url");
        assert_eq!(ok.targets(), vec![("h".to_owned(), Some(1))]);
    }
}
