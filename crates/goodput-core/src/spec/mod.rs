//! Tests as documents: what a test *is*, with the same fields, defaults and
//! checks as the command line's flags, read from and written to JSON and
//! TOML. The command line builds a spec from its flags; `goodput run`
//! reads one from a file; both validate it here and run the same path.
//!
//! Field names are the flags' long names with `_` for `-`; quantities are
//! strings in the flags' grammar (`"1GiB"`, `"25Mbit"`, `"500ms"`) or plain
//! numbers, and are written back in the form that reads back the same.

use std::fmt;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};

use serde::{Deserialize, Serialize};

use crate::kind::{Kind, KindSpec, Reach, Target};
use crate::schedule::{Ms, RunClass};

pub mod dns;
pub mod echo;
pub mod http;
pub mod iperf3;
pub mod ndt7;
pub mod owamp;
pub mod quic;
pub mod server;
pub mod stamp;
pub mod tcp;
pub mod trace;
pub mod ttcp;
pub mod twamp;
pub mod udp;

pub use dns::DnsSpec;
pub use echo::EchoSpec;
pub use http::{HttpMethod, HttpSpec, HttpVersion, TlsSpec};
pub use iperf3::Iperf3Spec;
pub use ndt7::{Ndt7Spec, Ndt7Url};
pub use owamp::{OwampDirection, OwampSpec, SecurityMode};
pub use quic::QuicSpec;
pub use server::ServerSpec;
pub use stamp::StampSpec;
pub use tcp::{Family, SocketSpec, TcpSpec, TcpWire};
pub use trace::{PingSpec, TraceSpec};
pub use ttcp::{TtcpRole, TtcpSpec};
pub use twamp::TwampSpec;
pub use udp::UdpSpec;

/// One test, tagged by its kind (`"kind": "tcp"`).
// A spec is built once per run and moved, never stored in bulk: the size of
// its largest kind costs nothing worth a box.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum TestSpec {
    /// A TCP good-put and reliability test (`goodput tcp`).
    Tcp(TcpSpec),
    /// A STAMP Session-Sender run (`goodput stamp`).
    Stamp(StampSpec),
    /// An iperf3 test against an iperf3 server (`goodput iperf3`).
    Iperf3(Iperf3Spec),
    /// The services a peer tests against (`goodput server`).
    Server(ServerSpec),
    /// A load test on an echo server (`goodput echo`).
    Echo(EchoSpec),
    /// One end of a TTCP transfer (`goodput ttcp`).
    Ttcp(TtcpSpec),
    /// A media-like UDP stream test (`goodput udp`).
    Udp(UdpSpec),
    /// A QUIC perf test (`goodput quic`).
    Quic(QuicSpec),
    /// A traceroute, with path MTU discovery (`goodput trace`).
    Trace(TraceSpec),
    /// Round trips by ICMP echo or TCP connect (`goodput ping`).
    Ping(PingSpec),
    /// An OWAMP test, owping's or powstream's (`goodput owamp`).
    Owamp(OwampSpec),
    /// A TWAMP test, twping's (`goodput twamp`).
    Twamp(TwampSpec),
    /// DNS queries (`goodput dns`).
    Dns(DnsSpec),
    /// An ndt7 speed test (`goodput ndt7`).
    Ndt7(Ndt7Spec),
    /// An HTTP(S) request, its phases timed (`goodput http`).
    Http(HttpSpec),
    /// A TLS connect and handshake (`goodput tls`).
    Tls(TlsSpec),
}

/// Runs `$body` with `$s` bound to the spec inside `$spec`, whatever its
/// kind: the one list of `TestSpec`'s variants that every question about a
/// spec goes through (exhaustive, so a new variant is a compile error here
/// until it is listed, and a listed one until its spec is a [`KindSpec`]).
macro_rules! each_kind {
    ($spec:expr, $s:ident => $body:expr) => {
        match $spec {
            TestSpec::Tcp($s) => $body,
            TestSpec::Stamp($s) => $body,
            TestSpec::Iperf3($s) => $body,
            TestSpec::Server($s) => $body,
            TestSpec::Echo($s) => $body,
            TestSpec::Ttcp($s) => $body,
            TestSpec::Udp($s) => $body,
            TestSpec::Quic($s) => $body,
            TestSpec::Trace($s) => $body,
            TestSpec::Ping($s) => $body,
            TestSpec::Owamp($s) => $body,
            TestSpec::Twamp($s) => $body,
            TestSpec::Dns($s) => $body,
            TestSpec::Ndt7($s) => $body,
            TestSpec::Http($s) => $body,
            TestSpec::Tls($s) => $body,
        }
    };
}

/// `From<XSpec> for TestSpec`, for each kind's spec.
macro_rules! into_test_spec {
    ($($variant:ident($spec:ty)),* $(,)?) => {
        $(impl From<$spec> for TestSpec {
            fn from(s: $spec) -> Self {
                TestSpec::$variant(s)
            }
        })*
    };
}

into_test_spec!(
    Tcp(TcpSpec),
    Stamp(StampSpec),
    Iperf3(Iperf3Spec),
    Server(ServerSpec),
    Echo(EchoSpec),
    Ttcp(TtcpSpec),
    Udp(UdpSpec),
    Quic(QuicSpec),
    Trace(TraceSpec),
    Ping(PingSpec),
    Owamp(OwampSpec),
    Twamp(TwampSpec),
    Dns(DnsSpec),
    Ndt7(Ndt7Spec),
    Http(HttpSpec),
    Tls(TlsSpec),
);

/// A kind's marking of a spec, applied.
fn mark<S: KindSpec>(s: &mut S, dscp: u8) -> Result<(), SpecError> {
    let set = S::DSCP.ok_or_else(|| {
        SpecError::new(
            "dscp",
            format!(
                "{} cannot mark its packets; dscp is for {}",
                S::KIND,
                Kind::names(Kind::ALL.into_iter().filter(|k| k.marks_dscp()))
            ),
        )
    })?;
    set(s, dscp);
    Ok(())
}

impl TestSpec {
    /// Its kind.
    pub fn kind(&self) -> Kind {
        fn of<S: KindSpec>(_: &S) -> Kind {
            S::KIND
        }
        each_kind!(self, s => of(s))
    }

    /// The assertions over its result (none for the server).
    pub fn assertions(&self) -> &[crate::assertion::Assertion] {
        each_kind!(self, s => s.assertions())
    }

    /// Every rule a valid spec keeps; the error names the field.
    pub fn validate(&self) -> Result<(), SpecError> {
        each_kind!(self, s => s.validate()).map_err(|e| e.within(self.kind().name()))
    }

    /// How its runs share a host unless a task says otherwise.
    pub fn class(&self) -> RunClass {
        self.kind().class()
    }

    /// How long a run lasts by its own settings, milliseconds (none: it
    /// has no length of its own).
    pub fn expected_ms(&self) -> Option<Ms> {
        each_kind!(self, s => s.expected_ms())
    }

    /// The hosts its traffic goes to, with their ports.
    pub fn targets(&self) -> Vec<Target> {
        each_kind!(self, s => s.targets())
    }

    /// The rate it asks for, bits/s (none: as fast as it can, or no rate).
    pub fn bitrate(&self) -> Option<u64> {
        each_kind!(self, s => s.bitrate())
    }

    /// The field that names a file on the host that runs it, when set.
    pub fn names_a_file(&self) -> Option<&'static str> {
        each_kind!(self, s => s.names_a_file())
    }

    /// Where it may go on a peer when given on demand.
    pub fn reach(&self) -> Reach {
        each_kind!(self, s => s.reach())
    }

    /// Marks its traffic with DSCP code point `dscp` (0-63); refused, with
    /// the kinds that can, when its kind cannot mark packets.
    pub fn set_dscp(&mut self, dscp: u8) -> Result<(), SpecError> {
        if dscp > 63 {
            return Err(SpecError::new("dscp", "must be 0-63"));
        }
        each_kind!(self, s => mark(s, dscp))
    }
}

/// A field that breaks a rule, or a document that does not read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecError {
    /// Where: `tcp.connections`, `tests[1].tcp.transfer`; empty for the
    /// document as a whole.
    pub field: String,
    /// What is wrong; other fields it names are written `` `field` ``.
    pub message: String,
}

impl SpecError {
    /// An error of `field`.
    pub fn new(field: &str, message: impl Into<String>) -> Self {
        Self {
            field: field.to_owned(),
            message: message.into(),
        }
    }

    pub(crate) fn within(mut self, prefix: &str) -> Self {
        self.field = if self.field.is_empty() {
            prefix.to_owned()
        } else {
            format!("{prefix}.{}", self.field)
        };
        self
    }
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.field.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.field, self.message)
        }
    }
}

impl std::error::Error for SpecError {}

/// A host and port from `HOST`, `HOST:PORT`, `ADDR`, `ADDR:PORT` or
/// `[v6]:PORT` (`default_port` when none is given).
pub fn split_target(t: &str, default_port: u16) -> Result<(String, u16), String> {
    if let Ok(a) = t.parse::<SocketAddr>() {
        return Ok((a.ip().to_string(), a.port()));
    }
    if t.parse::<IpAddr>().is_ok()
        || t.trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<Ipv6Addr>()
            .is_ok()
    {
        return Ok((t.to_owned(), default_port));
    }
    match t.rsplit_once(':') {
        Some((h, p)) if !h.contains(':') => {
            let port = p
                .parse::<u16>()
                .map_err(|_| format!("'{t}': the port must be a number 0-65535"))?;
            Ok((h.to_owned(), port))
        }
        _ => Ok((t.to_owned(), default_port)),
    }
}

/// A document: one spec, or several under `tests` (run in order).
#[derive(Deserialize)]
#[serde(untagged)]
enum Document {
    Many { tests: Vec<serde_json::Value> },
    One(serde_json::Value),
}

/// Reads the specs of a JSON or TOML document (`toml` picks the format),
/// each validated; a result document gives the spec it ran. Errors name the place: `tests[1].tcp.conections:
/// unknown field, did you mean connections?`.
pub fn read_document(text: &str, toml: bool) -> Result<Vec<TestSpec>, SpecError> {
    let value: serde_json::Value = if toml {
        let t: toml::Value = toml::from_str(text)
            .map_err(|e| SpecError::new("", format!("not valid TOML: {}", one_line(&e.to_string()))))?;
        serde_json::to_value(t).map_err(|e| SpecError::new("", e.to_string()))?
    } else {
        serde_json::from_str(text).map_err(|e| SpecError::new("", format!("not valid JSON: {e}")))?
    };
    // A result document names the test it ran: run that again.
    let value = match value {
        serde_json::Value::Object(mut o) if o.contains_key("schema_version") => match o.remove("spec") {
            Some(spec) => spec,
            None => {
                return Err(SpecError::new(
                    "spec",
                    "this result document does not carry the test it ran",
                ))
            }
        },
        v => v,
    };
    let (values, many) = match serde_json::from_value::<Document>(value) {
        Ok(Document::Many { tests }) => (tests, true),
        Ok(Document::One(v)) => (vec![v], false),
        Err(e) => return Err(SpecError::new("", e.to_string())),
    };
    let mut specs = Vec::with_capacity(values.len());
    for (i, v) in values.into_iter().enumerate() {
        let place = if many {
            format!("tests[{i}]")
        } else {
            String::new()
        };
        let spec = read_one(v).map_err(|e| if many { e.within(&place) } else { e })?;
        spec.validate()
            .map_err(|e| if many { e.within(&place) } else { e })?;
        specs.push(spec);
    }
    if specs.is_empty() {
        return Err(SpecError::new("tests", "no test in the document"));
    }
    Ok(specs)
}

pub(crate) fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// One spec from a JSON value, with the path of a bad field.
pub fn read_one(v: serde_json::Value) -> Result<TestSpec, SpecError> {
    let kind = match v.get("kind").and_then(|k| k.as_str()) {
        None => {
            return Err(SpecError::new(
                "kind",
                format!("missing; one of {}", Kind::names(Kind::ALL)),
            ))
        }
        Some(k) => k.parse::<Kind>().map_err(|e| SpecError::new("kind", e))?,
    };
    let mut body = v;
    if let Some(o) = body.as_object_mut() {
        o.remove("kind");
    }
    // Each kind's fields read straight into its struct, so a bad field's
    // path is known (through the tagged enum serde would lose it).
    fn read<S: KindSpec + serde::de::DeserializeOwned>(
        body: serde_json::Value,
    ) -> Result<TestSpec, serde_path_to_error::Error<serde_json::Error>> {
        serde_path_to_error::deserialize::<_, S>(body).map(Into::into)
    }
    let spec = match kind {
        Kind::Tcp => read::<TcpSpec>(body),
        Kind::Udp => read::<UdpSpec>(body),
        Kind::Quic => read::<QuicSpec>(body),
        Kind::Stamp => read::<StampSpec>(body),
        Kind::Iperf3 => read::<Iperf3Spec>(body),
        Kind::Echo => read::<EchoSpec>(body),
        Kind::Ttcp => read::<TtcpSpec>(body),
        Kind::Trace => read::<TraceSpec>(body),
        Kind::Ping => read::<PingSpec>(body),
        Kind::Server => read::<ServerSpec>(body),
        Kind::Owamp => read::<OwampSpec>(body),
        Kind::Twamp => read::<TwampSpec>(body),
        Kind::Dns => read::<DnsSpec>(body),
        Kind::Ndt7 => read::<Ndt7Spec>(body),
        Kind::Http => read::<HttpSpec>(body),
        Kind::Tls => read::<TlsSpec>(body),
    };
    spec.map_err(|e| {
        let path = e.path().to_string();
        let inner = e.inner().to_string();
        let field = if path == "." {
            kind.name().to_owned()
        } else {
            format!("{kind}.{path}")
        };
        SpecError::new(&field, suggest(&inner))
    })
}

/// serde's "unknown field `x`, expected one of `a`, `b`" with the nearest
/// known name offered.
pub(crate) fn suggest(message: &str) -> String {
    let Some(rest) = message.strip_prefix("unknown field `") else {
        return message.to_owned();
    };
    let Some((name, expected)) = rest.split_once('`') else {
        return message.to_owned();
    };
    let known: Vec<&str> = expected.split('`').skip(1).step_by(2).collect();
    let best = known
        .iter()
        .map(|k| (distance(name, k), *k))
        .min()
        .filter(|(d, _)| *d <= 2.max(name.len() / 3));
    match best {
        Some((_, k)) => format!("unknown field, did you mean {k}?"),
        None => format!("unknown field; known fields: {}", known.join(", ")),
    }
}

/// Levenshtein distance.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spec_round_trips_through_json_and_toml() {
        let spec = TestSpec::Tcp(TcpSpec {
            hosts: vec!["example.net".into()],
            connections: 100,
            transfer: "1MiB..4MiB".parse().unwrap(),
            rate_limit: Some("25Mbit".parse().unwrap()),
            ..TcpSpec::default()
        });
        let json = serde_json::to_string_pretty(&spec).unwrap();
        assert!(json.contains("\"transfer\": \"1MiB..4MiB\""), "{json}");
        assert!(json.contains("\"rate_limit\": \"25Mbit\""), "{json}");
        assert_eq!(read_document(&json, false).unwrap(), vec![spec.clone()]);
        let toml = toml::to_string(&spec).unwrap();
        assert_eq!(read_document(&toml, true).unwrap(), vec![spec]);
    }

    #[test]
    fn each_spec_names_the_kind_its_document_carries() {
        let specs: Vec<TestSpec> = vec![
            TcpSpec::default().into(),
            StampSpec::default().into(),
            Iperf3Spec::default().into(),
            ServerSpec::default().into(),
            EchoSpec::default().into(),
            TtcpSpec::default().into(),
            UdpSpec::default().into(),
            QuicSpec::default().into(),
            TraceSpec::default().into(),
            PingSpec::default().into(),
            OwampSpec::default().into(),
            TwampSpec::default().into(),
            DnsSpec::default().into(),
            Ndt7Spec::default().into(),
            HttpSpec::default().into(),
            TlsSpec::default().into(),
        ];
        let mut kinds: Vec<Kind> = specs.iter().map(TestSpec::kind).collect();
        for (spec, kind) in specs.iter().zip(&kinds) {
            let doc = serde_json::to_value(spec).unwrap();
            assert_eq!(doc["kind"], serde_json::json!(kind.name()));
        }
        kinds.sort();
        let mut all = Kind::ALL.to_vec();
        all.sort();
        assert_eq!(kinds, all, "one variant per kind");
    }

    #[test]
    fn a_mark_goes_where_the_kind_keeps_it_or_is_refused() {
        let mut s = TestSpec::Iperf3(Iperf3Spec::default());
        s.set_dscp(46).unwrap();
        let TestSpec::Iperf3(i) = &s else { panic!("{s:?}") };
        assert_eq!(i.tos, 46 << 2, "EF in iperf3's TOS byte");
        let mut s = TestSpec::Tcp(TcpSpec::default());
        s.set_dscp(8).unwrap();
        let TestSpec::Tcp(t) = &s else { panic!("{s:?}") };
        assert_eq!(t.socket.dscp, Some(8));
        let mut s = TestSpec::Stamp(StampSpec::default());
        s.set_dscp(10).unwrap();
        let TestSpec::Stamp(t) = &s else { panic!("{s:?}") };
        assert_eq!(t.dscp, 10);
        let mut s = TestSpec::Echo(EchoSpec::default());
        let before = s.clone();
        assert_eq!(
            s.set_dscp(8).unwrap_err().to_string(),
            "dscp: echo cannot mark its packets; dscp is for tcp, udp, stamp, iperf3, owamp, twamp"
        );
        assert_eq!(s, before, "a refused mark changes nothing");
        assert_eq!(
            TestSpec::Udp(UdpSpec::default())
                .set_dscp(64)
                .unwrap_err()
                .to_string(),
            "dscp: must be 0-63"
        );
    }

    #[test]
    fn missing_fields_take_the_flags_defaults() {
        let specs = read_document(r#"{"kind": "tcp"}"#, false).unwrap();
        assert_eq!(specs, vec![TestSpec::Tcp(TcpSpec::default())]);
        let TestSpec::Tcp(t) = &specs[0] else {
            panic!("{specs:?}")
        };
        assert_eq!((t.connections, t.iterations, t.port), (8, 1, 4444));
        assert_eq!(t.transfer.lo.0, 1 << 30);
        let specs = read_document("kind = \"stamp\"", true).unwrap();
        let TestSpec::Stamp(s) = &specs[0] else {
            panic!("{specs:?}")
        };
        assert_eq!((s.port, s.size, s.sessions), (862, 44, 1));
        assert_eq!(s.packet_interval(), std::time::Duration::from_millis(100));
        assert_eq!(s.packet_count(), Some(100));
    }

    #[test]
    fn bad_documents_say_where() {
        let e = |text: &str, toml: bool| read_document(text, toml).unwrap_err().to_string();
        assert_eq!(
            e(r#"{"kind": "tcp", "conections": 5}"#, false),
            "tcp.conections: unknown field, did you mean connections?"
        );
        assert_eq!(
            e(
                r#"{"tests": [{"kind": "tcp"}, {"kind": "tcp", "connections": "many"}]}"#,
                false
            ),
            "tests[1].tcp.connections: invalid type: string \"many\", expected u64"
        );
        assert!(e(r#"{"kind": "tcp", "transfer": -5}"#, false).starts_with("tcp.transfer: -5 is negative"));
        assert_eq!(
            e(r#"{"kind": "bogus"}"#, false),
            "kind: unknown kind 'bogus'; one of tcp, udp, quic, stamp, iperf3, echo, ttcp, trace, ping, server, owamp, twamp, dns, ndt7, http, tls"
        );
        assert_eq!(
            e(r#"{"kind": "stamp", "rate": 0}"#, false)
                .split(" (")
                .next()
                .unwrap(),
            "stamp.rate: must be above 0 and at most 1000000 packets/s"
        );
        assert_eq!(
            e(r#"{"kind": "stamp", "rate": 10, "interval": "1s"}"#, false),
            "stamp.interval: cannot be used with `rate`"
        );
        assert!(
            e("kind = ", true).starts_with("not valid TOML:"),
            "{}",
            e("kind = ", true)
        );
        assert!(!e("kind = ", true).contains('\n'));
        assert_eq!(
            e(r#"{"kind": "tcp", "connections": 0}"#, false),
            "tcp.connections: must be at least 1"
        );
        assert_eq!(e(r#"{"tests": []}"#, false), "tests: no test in the document");
    }

    #[test]
    fn an_echo_spec_takes_the_flags_defaults_and_their_rules() {
        let specs = read_document(r#"{"kind": "echo", "target": "192.0.2.7"}"#, false).unwrap();
        let TestSpec::Echo(e) = &specs[0] else {
            panic!("{specs:?}")
        };
        assert_eq!((e.port, e.connections, e.messages), (7, 1000, 0));
        assert_eq!(e.message_bytes(), 1024);
        assert_eq!(e.message_rate.0, std::time::Duration::from_secs(1));
        assert_eq!(e.connect_timeout.0, std::time::Duration::from_secs(10));
        assert!(!e.tls && e.hold_for.is_none());
        let e = |text: &str| read_document(text, false).unwrap_err().to_string();
        assert!(e(r#"{"kind": "echo"}"#).starts_with("echo.target: is required"));
        assert_eq!(
            e(r#"{"kind": "echo", "target": "h", "message_size": "17MiB"}"#),
            "echo.message_size: must be between 1 byte and 16 MiB"
        );
        assert_eq!(
            e(r#"{"kind": "echo", "target": "h", "tls": true}"#),
            "echo.tls: needs `ca` FILE (the CA that signed the server's certificate) or `insecure`"
        );
        assert_eq!(
            e(r#"{"kind": "echo", "target": "h", "insecure": true}"#),
            "echo.insecure: needs `tls`"
        );
        assert_eq!(
            e(r#"{"kind": "echo", "target": "h", "mesages": 3}"#),
            "echo.mesages: unknown field, did you mean messages?"
        );
    }

    #[test]
    fn a_ttcp_spec_takes_the_flags_defaults_and_their_rules() {
        let specs = read_document("kind = \"ttcp\"\nrole = \"receive\"", true).unwrap();
        let TestSpec::Ttcp(t) = &specs[0] else {
            panic!("{specs:?}")
        };
        assert_eq!((t.buflen, t.nbuf, t.port), (8192, 2048, 5001));
        assert!(t.sinkmode && !t.udp && !t.transmits());
        assert_eq!(t.udp_idle.0, std::time::Duration::from_secs(5));
        let e = |text: &str| read_document(text, false).unwrap_err().to_string();
        assert!(e(r#"{"kind": "ttcp"}"#).starts_with("ttcp.role: is required"));
        assert_eq!(
            e(r#"{"kind": "ttcp", "role": "transmit"}"#),
            "ttcp.host: is required to transmit"
        );
        assert_eq!(
            e(r#"{"kind": "ttcp", "role": "transmit", "host": "h", "udp": true, "buflen": 70000}"#),
            "ttcp.buflen: with `udp` must be at most 65507 bytes (one UDP datagram)"
        );
        assert_eq!(
            e(r#"{"kind": "ttcp", "role": "sideways"}"#),
            "ttcp.role: unknown variant `sideways`, expected `transmit` or `receive`"
        );
    }

    #[test]
    fn a_udp_spec_takes_the_flags_defaults_and_names_a_bad_field() {
        let specs = read_document(r#"{"kind": "udp"}"#, false).unwrap();
        assert_eq!(specs, vec![TestSpec::Udp(UdpSpec::default())]);
        let TestSpec::Udp(u) = &specs[0] else {
            panic!("{specs:?}")
        };
        assert_eq!((u.port, u.frame_rate, u.datagram_size), (4444, 60, 1400));
        assert_eq!(u.bitrate.0, 25_000_000);
        let json = serde_json::to_string(&specs[0]).unwrap();
        assert!(json.contains(r#""bitrate":"25Mbit""#), "{json}");
        assert!(json.contains(r#""length":"10s""#), "{json}");
        let e = |text: &str| read_document(text, false).unwrap_err().to_string();
        assert_eq!(
            e(r#"{"kind": "udp", "frame_rate": 0}"#),
            "udp.frame_rate: must be 1-1000000"
        );
        assert_eq!(
            e(r#"{"kind": "udp", "length": "1500ms"}"#),
            "udp.length: must be a whole number of seconds, at least 1s"
        );
        assert_eq!(
            e(r#"{"kind": "udp", "bitrate": "fast"}"#),
            "udp.bitrate: 'fast': expected bits/s with an optional k, m, g or t (×1000)"
        );
        assert_eq!(
            e(r#"{"kind": "udp", "datagram_sise": 1000}"#),
            "udp.datagram_sise: unknown field, did you mean datagram_size?"
        );
        assert!(
            e(r#"{"kind": "udp", "bitrate": 100}"#)
                .starts_with("udp.bitrate/frame_rate/length/datagram_size: frames of 0 bytes are too small"),
            "{}",
            e(r#"{"kind": "udp", "bitrate": 100}"#)
        );
    }
    #[test]
    fn a_quic_spec_takes_the_flags_defaults_and_names_a_bad_field() {
        let specs = read_document("kind = \"quic\"", true).unwrap();
        assert_eq!(specs, vec![TestSpec::Quic(QuicSpec::default())]);
        let TestSpec::Quic(q) = &specs[0] else {
            panic!("{specs:?}")
        };
        assert_eq!((q.port, q.connections, q.streams), (4433, 1, 1));
        assert_eq!((q.request.0, q.response.0), (512, 4000));
        assert_eq!(q.scenario_text().as_deref(), Some(quic::DEFAULT_SCENARIO));
        let up = QuicSpec {
            upload: Some("1MB".parse().unwrap()),
            ..QuicSpec::default()
        };
        assert_eq!(up.scenario_text().as_deref(), Some("*1:1000008:0;"));
        let json = serde_json::to_string(&TestSpec::Quic(up.clone())).unwrap();
        assert!(json.contains(r#""upload":"1MB""#), "{json}");
        assert_eq!(read_document(&json, false).unwrap(), vec![TestSpec::Quic(up)]);
        let e = |text: &str| read_document(text, false).unwrap_err().to_string();
        assert_eq!(
            e(r#"{"kind": "quic", "rps": true, "handshakes": true}"#),
            "quic.rps: cannot be used with `handshakes`"
        );
        assert_eq!(
            e(r#"{"kind": "quic", "download": "0s"}"#),
            "quic.download: must be above zero"
        );
        assert!(e(r#"{"kind": "quic", "upload": "lots"}"#)
            .starts_with("quic.upload: 'lots': expected a size (1GB, 100MiB) or a duration (10s)"));
        assert!(
            e(r#"{"kind": "quic", "scenario": "*0:1:1"}"#)
                .starts_with("quic.scenario: '*0:1:1': scenario description 1"),
            "{}",
            e(r#"{"kind": "quic", "scenario": "*0:1:1"}"#)
        );
        assert_eq!(
            e(r#"{"kind": "quic", "streams": 0}"#),
            "quic.streams: must be 1-10000"
        );
        assert_eq!(
            e(r#"{"kind": "quic", "sin": "x"}"#),
            "quic.sin: unknown field, did you mean sni?"
        );
    }
}
