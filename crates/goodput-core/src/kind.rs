//! The test kinds, and the facts every kind states about itself.
//!
//! A kind has one home: its name is [`Kind`], its facts are the
//! [`KindSpec`] its spec struct implements (`spec/<kind>.rs`). Nothing
//! outside this module and the spec module lists the kinds or matches
//! their names: a new kind is a compile error at every place that must
//! learn it, never a `_ =>` arm that quietly forgets it.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::alert::Family;
use crate::assertion::{Assertion, Figure};
use crate::schedule::{Ms, RunClass};
use crate::spec::SpecError;

/// A test kind, as a document's `kind` names it.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// TCP good-put and reliability (`goodput tcp`).
    Tcp,
    /// A media-like UDP stream (`goodput udp`).
    Udp,
    /// QUIC perf (`goodput quic`).
    Quic,
    /// A STAMP Session-Sender (`goodput stamp`).
    Stamp,
    /// An iperf3 client (`goodput iperf3`).
    Iperf3,
    /// Load on an echo server (`goodput echo`).
    Echo,
    /// One end of a TTCP transfer (`goodput ttcp`).
    Ttcp,
    /// A traceroute (`goodput trace`).
    Trace,
    /// Round trips by ICMP echo or TCP connect (`goodput ping`).
    Ping,
    /// The services a peer tests against (`goodput server`).
    Server,
    /// An OWAMP client, owping's or powstream's test (`goodput owamp`).
    Owamp,
    /// A TWAMP client, twping's test (`goodput twamp`).
    Twamp,
    /// DNS queries to a server or the system's resolver (`goodput dns`).
    Dns,
    /// An ndt7 speed test (`goodput ndt7`).
    Ndt7,
    /// An HTTP(S) request, its phases timed (`goodput http`).
    Http,
    /// A TLS connect and handshake (`goodput tls`).
    Tls,
}

/// Runs `$body` with `$S` bound to the spec struct of `$kind`: the one
/// place that goes from a kind's name to its facts without a spec value.
macro_rules! with_spec {
    ($kind:expr, $S:ident => $body:expr) => {{
        use crate::spec::*;
        match $kind {
            Kind::Tcp => {
                type $S = TcpSpec;
                $body
            }
            Kind::Udp => {
                type $S = UdpSpec;
                $body
            }
            Kind::Quic => {
                type $S = QuicSpec;
                $body
            }
            Kind::Stamp => {
                type $S = StampSpec;
                $body
            }
            Kind::Iperf3 => {
                type $S = Iperf3Spec;
                $body
            }
            Kind::Echo => {
                type $S = EchoSpec;
                $body
            }
            Kind::Ttcp => {
                type $S = TtcpSpec;
                $body
            }
            Kind::Trace => {
                type $S = TraceSpec;
                $body
            }
            Kind::Ping => {
                type $S = PingSpec;
                $body
            }
            Kind::Server => {
                type $S = ServerSpec;
                $body
            }
            Kind::Owamp => {
                type $S = OwampSpec;
                $body
            }
            Kind::Twamp => {
                type $S = TwampSpec;
                $body
            }
            Kind::Dns => {
                type $S = DnsSpec;
                $body
            }
            Kind::Ndt7 => {
                type $S = Ndt7Spec;
                $body
            }
            Kind::Http => {
                type $S = HttpSpec;
                $body
            }
            Kind::Tls => {
                type $S = TlsSpec;
                $body
            }
        }
    }};
}

impl Kind {
    /// Every kind, in the order error messages list them.
    pub const ALL: [Kind; 16] = [
        Kind::Tcp,
        Kind::Udp,
        Kind::Quic,
        Kind::Stamp,
        Kind::Iperf3,
        Kind::Echo,
        Kind::Ttcp,
        Kind::Trace,
        Kind::Ping,
        Kind::Server,
        Kind::Owamp,
        Kind::Twamp,
        Kind::Dns,
        Kind::Ndt7,
        Kind::Http,
        Kind::Tls,
    ];

    /// The kind's name, as a document's `kind` and the command name.
    pub const fn name(self) -> &'static str {
        match self {
            Kind::Tcp => "tcp",
            Kind::Udp => "udp",
            Kind::Quic => "quic",
            Kind::Stamp => "stamp",
            Kind::Iperf3 => "iperf3",
            Kind::Echo => "echo",
            Kind::Ttcp => "ttcp",
            Kind::Trace => "trace",
            Kind::Ping => "ping",
            Kind::Server => "server",
            Kind::Owamp => "owamp",
            Kind::Twamp => "twamp",
            Kind::Dns => "dns",
            Kind::Ndt7 => "ndt7",
            Kind::Http => "http",
            Kind::Tls => "tls",
        }
    }

    /// The names of `kinds`, comma-separated (for error messages).
    pub fn names(kinds: impl IntoIterator<Item = Kind>) -> String {
        kinds.into_iter().map(Kind::name).collect::<Vec<_>>().join(", ")
    }

    /// How its runs share a host unless a task says otherwise.
    pub fn class(self) -> RunClass {
        with_spec!(self, S => S::CLASS)
    }

    /// Whether an agent's `--max-bitrate KIND=RATE` may name it.
    pub fn rate_limited(self) -> bool {
        with_spec!(self, S => S::RATE_LIMITED)
    }

    /// Whether it can mark its packets with a DSCP code point.
    pub fn marks_dscp(self) -> bool {
        with_spec!(self, S => S::DSCP.is_some())
    }

    /// The figures its assertions may name: its own, then the common
    /// counts.
    pub fn figures(self) -> Vec<&'static Figure> {
        with_spec!(self, S => S::figures())
    }

    /// The alert families its runs measure.
    pub fn families(self) -> &'static [Family] {
        with_spec!(self, S => S::FAMILIES)
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Kind {
    type Err = String;

    /// A kind by its name; the error lists every kind.
    fn from_str(s: &str) -> Result<Self, String> {
        Kind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| format!("unknown kind '{s}'; one of {}", Kind::names(Kind::ALL)))
    }
}

impl From<Kind> for String {
    fn from(k: Kind) -> Self {
        k.name().to_owned()
    }
}

impl PartialEq<str> for Kind {
    fn eq(&self, other: &str) -> bool {
        self.name() == other
    }
}

impl PartialEq<&str> for Kind {
    fn eq(&self, other: &&str) -> bool {
        self.name() == *other
    }
}

impl PartialEq<String> for Kind {
    fn eq(&self, other: &String) -> bool {
        self.name() == other
    }
}

impl PartialEq<Kind> for String {
    fn eq(&self, other: &Kind) -> bool {
        self == other.name()
    }
}

/// A host a spec's traffic goes to, and the port when the kind uses one
/// (none: ICMP).
pub type Target = (String, Option<u16>);

/// Whether and how a kind marks its packets with a DSCP code point: the
/// setter that puts a mesh task's `dscp` (0-63) into the spec, or `None`
/// when the kind cannot mark them (a task that asks is refused).
pub type Marking<S> = Option<fn(&mut S, u8)>;

/// A service an agent's beacon answers on; the agent knows its port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BeaconService {
    /// The TCP and UDP test port (`goodput server`'s).
    TestPort,
    /// The STAMP Session-Reflector.
    Stamp,
    /// The iperf3 server, when on.
    Iperf3,
    /// The QUIC perf server, when on.
    Quic,
    /// The OWAMP server (TCP 861 for control), when on.
    Owamp,
    /// The TWAMP server (TCP 862 for control), when on.
    Twamp,
    /// The ndt7 speed-test service, when on.
    Ndt7,
}

/// Where a test given on demand (through an agent's API) may go on a
/// peer, besides the ports the mesh's own tests of the kind use to it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Reach {
    /// The beacon's services it may test against.
    pub services: &'static [BeaconService],
    /// A port of its own it may reach (a probe's default port).
    pub port: Option<u16>,
}

/// The facts a test kind states about itself. Each `spec/<kind>.rs`
/// implements it for its spec struct; [`crate::spec::TestSpec`] answers
/// every question by asking its kind. No fact has a default: a new kind
/// states each one, or does not compile.
pub trait KindSpec: Sized + Into<crate::spec::TestSpec> {
    /// Which kind this is.
    const KIND: Kind;

    /// How its runs share a host unless a task says otherwise: the kinds
    /// that fill a path are exclusive, the few-small-probes kinds
    /// background, the rest normal.
    const CLASS: RunClass;

    /// Whether an agent's `--max-bitrate` may cap it (the kinds that send
    /// a test stream).
    const RATE_LIMITED: bool;

    /// Whether and how it takes a mesh task's `dscp`.
    const DSCP: Marking<Self>;

    /// The alert families its runs measure (none: no alert rule of a
    /// family applies to it).
    const FAMILIES: &'static [Family];

    /// Every rule a valid spec keeps; the error names the field (without
    /// the kind's prefix: [`crate::spec::TestSpec::validate`] adds it).
    fn validate(&self) -> Result<(), SpecError>;

    /// The assertions over its result.
    fn assertions(&self) -> &[Assertion];

    /// How long a run lasts by its own settings, milliseconds, before any
    /// margin; `None` when it has no length of its own (a byte count).
    fn expected_ms(&self) -> Option<Ms>;

    /// The hosts its traffic goes to, with their ports.
    fn targets(&self) -> Vec<Target>;

    /// The rate it asks for, bits/s; `None`: as fast as it can, or no
    /// rate at all.
    fn bitrate(&self) -> Option<u64>;

    /// The field that names a file on the host that runs it, when one is
    /// set (a spec given through an agent's API is refused for it).
    fn names_a_file(&self) -> Option<&'static str>;

    /// Where it may go on a peer when given on demand.
    fn reach(&self) -> Reach;

    /// The figures its assertions may name: its own, then the common
    /// counts.
    fn figures() -> Vec<&'static Figure>;
}

/// Milliseconds of a duration, capped so that sums cannot overflow.
pub(crate) fn ms(d: std::time::Duration) -> Ms {
    d.as_millis().min(u128::from(u64::MAX / 2)) as Ms
}

/// `host` (a name, an address, `HOST:PORT` or `[v6]:PORT`) split with
/// `port` as its default; a target that does not split is kept whole.
pub(crate) fn target(host: &str, port: u16) -> Target {
    match crate::spec::split_target(host, port) {
        Ok((h, p)) => (h, Some(p)),
        Err(_) => (host.to_owned(), Some(port)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_read_back_and_unknown_names_list_every_kind() {
        for k in Kind::ALL {
            assert_eq!(k.name().parse::<Kind>(), Ok(k));
            assert_eq!(k.to_string(), k.name());
            assert_eq!(serde_json::to_value(k).unwrap(), serde_json::json!(k.name()));
            assert_eq!(
                serde_json::from_value::<Kind>(serde_json::json!(k.name())).unwrap(),
                k
            );
        }
        assert_eq!(
            "bogus".parse::<Kind>().unwrap_err(),
            "unknown kind 'bogus'; one of tcp, udp, quic, stamp, iperf3, echo, ttcp, trace, ping, server, owamp, twamp, dns, ndt7, http, tls"
        );
    }

    #[test]
    fn all_holds_every_kind_once() {
        // `ALL` is written by hand; the schema derived from the enum is
        // not, so it tells when a variant is missing from `ALL`.
        let schema = serde_json::to_value(schemars::schema_for!(Kind)).unwrap();
        let mut variants: Vec<String> = serde_json::to_string(&schema)
            .unwrap()
            .split('"')
            .filter(|w| serde_json::from_value::<Kind>(serde_json::json!(w)).is_ok())
            .map(str::to_owned)
            .collect();
        variants.sort();
        variants.dedup();
        let mut all: Vec<String> = Kind::ALL.iter().map(|k| k.name().to_owned()).collect();
        all.sort();
        let before = all.len();
        all.dedup();
        assert_eq!(all.len(), before, "a kind is in ALL twice");
        assert_eq!(all, variants);
    }

    #[test]
    fn each_kind_measures_its_alert_families() {
        use Family::*;
        let measured =
            |k: Kind| -> Vec<Family> { Family::ALL.into_iter().filter(|f| f.measured_by(k)).collect() };
        for k in Kind::ALL {
            let want: &[Family] = match k {
                Kind::Tcp | Kind::Iperf3 | Kind::Quic | Kind::Ttcp => &[Throughput],
                Kind::Udp => &[Throughput, Loss, Jitter],
                Kind::Ping => &[Loss, Delay, Jitter],
                Kind::Stamp | Kind::Twamp => &[Loss, Delay, OneWayDelay, Jitter],
                Kind::Owamp => &[Loss, OneWayDelay, Jitter],
                Kind::Echo => &[Delay],
                Kind::Trace => &[Path],
                Kind::Server => &[],
                Kind::Dns => &[Loss, Delay, Errors],
                Kind::Ndt7 => &[Throughput],
                Kind::Http | Kind::Tls => &[Certificate],
            };
            assert_eq!(measured(k), want, "{k}");
        }
    }

    #[test]
    fn on_demand_specs_reach_their_beacon_services_and_name_their_files() {
        use crate::path::ProbeMethod;
        use crate::spec::*;
        use BeaconService::*;
        let reach = |spec: TestSpec| {
            let r = spec.reach();
            (r.services.to_vec(), r.port)
        };
        assert_eq!(reach(TcpSpec::default().into()), (vec![TestPort], None));
        assert_eq!(reach(UdpSpec::default().into()), (vec![TestPort], None));
        assert_eq!(reach(StampSpec::default().into()), (vec![Stamp], None));
        assert_eq!(reach(Iperf3Spec::default().into()), (vec![Iperf3], None));
        assert_eq!(reach(QuicSpec::default().into()), (vec![Quic], None));
        assert_eq!(reach(EchoSpec::default().into()), (vec![], None));
        assert_eq!(reach(TtcpSpec::default().into()), (vec![], None));
        assert_eq!(reach(ServerSpec::default().into()), (vec![], None));
        assert_eq!(reach(OwampSpec::default().into()), (vec![Owamp], Some(861)));
        assert_eq!(reach(TwampSpec::default().into()), (vec![Twamp], Some(862)));
        assert_eq!(
            reach(PingSpec::default().into()),
            (vec![TestPort], Some(PingSpec::default().port))
        );
        // A trace reaches its method's default port, but not a port it set.
        let trace = |method, port| {
            TraceSpec {
                method,
                port,
                ..TraceSpec::default()
            }
            .into()
        };
        assert_eq!(
            reach(trace(ProbeMethod::Udp, None)),
            (vec![TestPort, Stamp], Some(33434))
        );
        assert_eq!(
            reach(trace(ProbeMethod::Tcp, None)),
            (vec![TestPort, Stamp], Some(80))
        );
        assert_eq!(
            reach(trace(ProbeMethod::Icmp, None)),
            (vec![TestPort, Stamp], None)
        );
        assert_eq!(
            reach(trace(ProbeMethod::Udp, Some(4000))),
            (vec![TestPort, Stamp], None)
        );

        let ca = Some(std::path::PathBuf::from("/etc/ca.pem"));
        let echo: TestSpec = EchoSpec {
            ca: ca.clone(),
            ..EchoSpec::default()
        }
        .into();
        let quic: TestSpec = QuicSpec {
            ca,
            ..QuicSpec::default()
        }
        .into();
        assert_eq!(echo.names_a_file(), Some("ca"));
        assert_eq!(quic.names_a_file(), Some("ca"));
        assert_eq!(TestSpec::from(EchoSpec::default()).names_a_file(), None);
        assert_eq!(TestSpec::from(QuicSpec::default()).names_a_file(), None);
        let pfs = Some(std::path::PathBuf::from("/etc/owamp/owamp-server.pfs"));
        let owamp: TestSpec = OwampSpec {
            passphrase_file: pfs.clone(),
            ..OwampSpec::default()
        }
        .into();
        let twamp: TestSpec = TwampSpec {
            passphrase_file: pfs,
            ..TwampSpec::default()
        }
        .into();
        assert_eq!(owamp.names_a_file(), Some("passphrase_file"));
        assert_eq!(twamp.names_a_file(), Some("passphrase_file"));
        assert_eq!(TestSpec::from(OwampSpec::default()).names_a_file(), None);
        assert_eq!(TestSpec::from(TwampSpec::default()).names_a_file(), None);
    }
}
