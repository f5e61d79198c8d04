//! What a kind of run adds to the common record, as one tagged value.
//!
//! The JSON document keeps the shape it always had: one optional top-level
//! key per kind of detail (`"stamp": {…}`, `"services": {…}` …), absent when
//! there is none. Reading a document takes its `kind` to decide which keys
//! may be there, and refuses a key that does not belong to the kind.

use serde::{Deserialize, Serialize};

use super::{
    AdmissionCounters, ConnectionRecord, EchoDetail, EndReason, Interval, Iperf3Detail, MediaDetail,
    MediaServerCounters, OwampDetail, OwampServerCounters, QuicDetail, QuicServerCounters, RunFailure,
    ServiceCounters, StampDetail, StampReflectorCounters, Summary, TcpSettings, TestKind, TestResult,
    ToolInfo, TtcpDetail, TwampDetail,
};
use crate::assertion::AssertionOutcome;
use crate::dns::DnsDetail;
use crate::http::{HttpDetail, TlsDetail};
use crate::ndt7::{Ndt7Detail, Ndt7ServerCounters};
use crate::path::{PingDetail, TraceDetail};
use crate::spec::TestSpec;

/// A run's own detail, by kind of run.
///
/// A run that failed before it had its detail carries [`Detail::None`],
/// whatever its kind; the result's `kind` still says what it was.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Detail {
    /// Nothing beyond the common record: a TCP client, or a run that
    /// ended before it had its detail.
    #[default]
    None,
    /// A server: each service it runs counts on its own.
    Server(Box<ServerDetail>),
    /// iperf3 runs (either side): the figures iperf3 itself reports.
    Iperf3(Box<Iperf3Detail>),
    /// STAMP sender runs: delay, loss and reordering.
    Stamp(Box<StampDetail>),
    /// TTCP runs (either side): ttcp's own figures.
    Ttcp(Box<TtcpDetail>),
    /// Echo load tests: connections, messages and round trips.
    Echo(Box<EchoDetail>),
    /// UDP media-stream clients: the plan, frames, datagrams and jitter.
    Media(Box<MediaDetail>),
    /// QUIC perf clients: picoquic's statistics and quinn's figures.
    Quic(Box<QuicDetail>),
    /// Trace runs: the hops, the path MTU and the path's checksum.
    Trace(Box<TraceDetail>),
    /// Ping runs: every request and the round trips.
    Ping(Box<PingDetail>),
    /// OWAMP client runs: each direction's one-way figures.
    Owamp(Box<OwampDetail>),
    /// TWAMP client runs: round-trip and one-way figures.
    Twamp(Box<TwampDetail>),
    /// DNS runs: every query, the answers and the resolution times.
    Dns(Box<DnsDetail>),
    /// ndt7 client runs: each subtest's rate, round trip and
    /// retransmissions.
    Ndt7(Box<Ndt7Detail>),
    /// HTTP client runs: each request's phases, status and checks.
    Http(Box<HttpDetail>),
    /// TLS handshakes: the protocol's and the certificate's facts.
    Tls(Box<TlsDetail>),
}

/// What a server's services did over its life; a service that does not
/// run has no counters.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ServerDetail {
    /// The discard and echo services.
    pub services: Option<ServiceCounters>,
    /// The STAMP reflector.
    pub stamp_reflector: Option<StampReflectorCounters>,
    /// The UDP media-stream service.
    pub media_server: Option<MediaServerCounters>,
    /// The QUIC perf service.
    pub quic_server: Option<QuicServerCounters>,
    /// The OWAMP server (owampd's part).
    pub owamp_server: Option<OwampServerCounters>,
    /// The TWAMP server (twampd's part).
    pub twamp_server: Option<OwampServerCounters>,
    /// How the TCP services admitted connections.
    pub admission: Option<AdmissionCounters>,
    /// The ndt7 service.
    pub ndt7_server: Option<Ndt7ServerCounters>,
}

/// For a kind of detail held whole by one variant: the reader, the writer
/// and the taker, on the detail and on the result.
macro_rules! whole {
    ($($(#[$doc:meta])* $name:ident, $name_mut:ident, $into:ident: $ty:ty => $variant:ident;)*) => {
        impl Detail {
            $(
                $(#[$doc])*
                pub fn $name(&self) -> Option<&$ty> {
                    match self {
                        Detail::$variant(d) => Some(d),
                        _ => None,
                    }
                }
                $(#[$doc])*
                pub fn $name_mut(&mut self) -> Option<&mut $ty> {
                    match self {
                        Detail::$variant(d) => Some(d),
                        _ => None,
                    }
                }
                $(#[$doc])*
                pub fn $into(self) -> Option<$ty> {
                    match self {
                        Detail::$variant(d) => Some(*d),
                        _ => None,
                    }
                }
            )*
        }
        impl TestResult {
            $(
                $(#[$doc])*
                pub fn $name(&self) -> Option<&$ty> {
                    self.detail.$name()
                }
                $(#[$doc])*
                pub fn $name_mut(&mut self) -> Option<&mut $ty> {
                    self.detail.$name_mut()
                }
                $(#[$doc])*
                pub fn $into(self) -> Option<$ty> {
                    self.detail.$into()
                }
            )*
        }
    };
}

/// For a server's counters of one service: the reader and the writer.
macro_rules! server {
    ($($(#[$doc:meta])* $name:ident, $name_mut:ident: $ty:ty;)*) => {
        impl Detail {
            $(
                $(#[$doc])*
                pub fn $name(&self) -> Option<&$ty> {
                    match self {
                        Detail::Server(s) => s.$name.as_ref(),
                        _ => None,
                    }
                }
                $(#[$doc])*
                pub fn $name_mut(&mut self) -> Option<&mut $ty> {
                    match self {
                        Detail::Server(s) => s.$name.as_mut(),
                        _ => None,
                    }
                }
            )*
        }
        impl TestResult {
            $(
                $(#[$doc])*
                pub fn $name(&self) -> Option<&$ty> {
                    self.detail.$name()
                }
                $(#[$doc])*
                pub fn $name_mut(&mut self) -> Option<&mut $ty> {
                    self.detail.$name_mut()
                }
            )*
        }
    };
}

whole! {
    /// iperf3's own figures.
    iperf3, iperf3_mut, into_iperf3: Iperf3Detail => Iperf3;
    /// A STAMP sender's figures.
    stamp, stamp_mut, into_stamp: StampDetail => Stamp;
    /// ttcp's own figures.
    ttcp, ttcp_mut, into_ttcp: TtcpDetail => Ttcp;
    /// An echo load test's figures.
    echo, echo_mut, into_echo: EchoDetail => Echo;
    /// A media-stream client's figures.
    media, media_mut, into_media: MediaDetail => Media;
    /// A QUIC perf client's figures.
    quic, quic_mut, into_quic: QuicDetail => Quic;
    /// A trace's hops.
    trace, trace_mut, into_trace: TraceDetail => Trace;
    /// A ping's round trips.
    ping, ping_mut, into_ping: PingDetail => Ping;
    /// An OWAMP client's figures.
    owamp, owamp_mut, into_owamp: OwampDetail => Owamp;
    /// A TWAMP client's figures.
    twamp, twamp_mut, into_twamp: TwampDetail => Twamp;
    /// A DNS run's queries and answers.
    dns, dns_mut, into_dns: DnsDetail => Dns;
    /// An ndt7 client's figures.
    ndt7, ndt7_mut, into_ndt7: Ndt7Detail => Ndt7;
    /// An HTTP client's requests.
    http, http_mut, into_http: HttpDetail => Http;
    /// A TLS handshake's facts.
    tls, tls_mut, into_tls: TlsDetail => Tls;
}

server! {
    /// A server's discard and echo counters.
    services, services_mut: ServiceCounters;
    /// A server's STAMP reflector counters.
    stamp_reflector, stamp_reflector_mut: StampReflectorCounters;
    /// A server's media-stream counters.
    media_server, media_server_mut: MediaServerCounters;
    /// A server's QUIC perf counters.
    quic_server, quic_server_mut: QuicServerCounters;
    /// A server's OWAMP counters.
    owamp_server, owamp_server_mut: OwampServerCounters;
    /// A server's TWAMP counters.
    twamp_server, twamp_server_mut: OwampServerCounters;
    /// A server's TCP admission counters.
    admission, admission_mut: AdmissionCounters;
    /// A server's ndt7 counters.
    ndt7_server, ndt7_server_mut: Ndt7ServerCounters;
}

impl Detail {
    /// A server's detail, made on first use (a server result starts with
    /// none and gains each service's counters as the service stops).
    pub fn server_mut(&mut self) -> &mut ServerDetail {
        if !matches!(self, Detail::Server(_)) {
            *self = Detail::Server(Box::default());
        }
        match self {
            Detail::Server(s) => s,
            _ => unreachable!("made a server detail just above"),
        }
    }
}

// The document as written: the common record and one optional key per
// kind of detail. Only the JSON shape and its schema are made from it, so
// its doc comments are the schema's descriptions, as they always were.
/// The complete result of one run (client or server).
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(rename = "TestResult")]
struct Document {
    /// Shape version of this document ([`SCHEMA_VERSION`]).
    schema_version: u32,
    /// Program that wrote it.
    tool: ToolInfo,
    /// Which test and which side.
    kind: TestKind,
    /// The test as a document, when it was run from one (`goodput run`
    /// reads it back to run the same test again).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    spec: Option<TestSpec>,
    /// Wall-clock start, milliseconds since the Unix epoch.
    started_unix_ms: u64,
    /// Settings in force.
    settings: TcpSettings,
    /// One snapshot per status interval, in order (up to the record cap,
    /// plus the final one).
    intervals: Vec<Interval>,
    /// Intervals beyond the cap, not kept here (they were streamed to the
    /// status file and JSON lines).
    intervals_omitted: u64,
    /// One record per connection that ended (or was aborted), in end order.
    connections: Vec<ConnectionRecord>,
    /// Totals and distributions over the connections.
    summary: Summary,
    /// Records not kept in `connections` because the run had more than the
    /// cap (they are in the summary and in `--connection-file`).
    connections_omitted: u64,
    /// Why the run ended.
    end: EndReason,
    /// The spec's assertions over this result, each with what was
    /// measured and whether it held.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    assertions: Vec<AssertionOutcome>,
    /// Why the run failed, and how far it got, when it ended `failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<RunFailure>,
    /// Servers running the discard or echo services: what they did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    services: Option<ServiceCounters>,
    /// iperf3 tests only: the figures iperf3 itself reports, both ends'.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    iperf3: Option<Iperf3Detail>,
    /// STAMP sender runs only: delay, loss and reordering per session and in total.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    stamp: Option<StampDetail>,
    /// Servers running the STAMP reflector: what it received and answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    stamp_reflector: Option<StampReflectorCounters>,
    /// TTCP runs: ttcp's own figures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ttcp: Option<TtcpDetail>,
    /// Echo load tests: connections, messages and round trips.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    echo: Option<EchoDetail>,
    /// UDP media-stream runs: the plan, frames, datagrams and jitter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    media: Option<MediaDetail>,
    /// Servers running the UDP media-stream service: what it answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    media_server: Option<MediaServerCounters>,
    /// QUIC perf runs: picoquic's statistics and quinn's connection figures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    quic: Option<QuicDetail>,
    /// Servers running the QUIC perf service: what it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    quic_server: Option<QuicServerCounters>,
    /// Servers running OWAMP (owampd's part): sessions and refusals.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    owamp_server: Option<OwampServerCounters>,
    /// Servers running TWAMP (twampd's part): sessions and refusals.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    twamp_server: Option<OwampServerCounters>,
    /// Servers: how the TCP services (test port, discard, echo, TLS echo)
    /// admitted connections.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    admission: Option<AdmissionCounters>,
    /// Trace runs: the hops, the path MTU and the path's checksum.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    trace: Option<TraceDetail>,
    /// Ping runs: every request and the round trips.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ping: Option<PingDetail>,
    /// OWAMP client runs only: each direction's loss, one-way delay,
    /// reordering and hops.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    owamp: Option<OwampDetail>,
    /// TWAMP client runs only: round-trip and one-way delay, loss each
    /// way, the reflector's processing time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    twamp: Option<TwampDetail>,
    /// DNS runs only: every query, the answers, the resolution times and
    /// the replies that were ignored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    dns: Option<DnsDetail>,
    /// ndt7 client runs only: each subtest's rate, round trip and
    /// retransmissions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ndt7: Option<Ndt7Detail>,
    /// Servers running the ndt7 service: its subtests and refusals.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ndt7_server: Option<Ndt7ServerCounters>,
    /// HTTP client runs only: each request's phases, status, checks and
    /// TLS facts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    http: Option<HttpDetail>,
    /// TLS handshakes only: the protocol's and the certificate's facts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tls: Option<TlsDetail>,
}

/// The same document, borrowed from a result to be written.
#[derive(Serialize)]
struct DocumentRef<'a> {
    schema_version: u32,
    tool: &'a ToolInfo,
    kind: TestKind,
    #[serde(skip_serializing_if = "Option::is_none")]
    spec: Option<&'a TestSpec>,
    started_unix_ms: u64,
    settings: &'a TcpSettings,
    intervals: &'a [Interval],
    intervals_omitted: u64,
    connections: &'a [ConnectionRecord],
    summary: &'a Summary,
    connections_omitted: u64,
    end: EndReason,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    assertions: &'a [AssertionOutcome],
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a RunFailure>,
    #[serde(skip_serializing_if = "Option::is_none")]
    services: Option<&'a ServiceCounters>,
    #[serde(skip_serializing_if = "Option::is_none")]
    iperf3: Option<&'a Iperf3Detail>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stamp: Option<&'a StampDetail>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stamp_reflector: Option<&'a StampReflectorCounters>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ttcp: Option<&'a TtcpDetail>,
    #[serde(skip_serializing_if = "Option::is_none")]
    echo: Option<&'a EchoDetail>,
    #[serde(skip_serializing_if = "Option::is_none")]
    media: Option<&'a MediaDetail>,
    #[serde(skip_serializing_if = "Option::is_none")]
    media_server: Option<&'a MediaServerCounters>,
    #[serde(skip_serializing_if = "Option::is_none")]
    quic: Option<&'a QuicDetail>,
    #[serde(skip_serializing_if = "Option::is_none")]
    quic_server: Option<&'a QuicServerCounters>,
    #[serde(skip_serializing_if = "Option::is_none")]
    owamp_server: Option<&'a OwampServerCounters>,
    #[serde(skip_serializing_if = "Option::is_none")]
    twamp_server: Option<&'a OwampServerCounters>,
    #[serde(skip_serializing_if = "Option::is_none")]
    admission: Option<&'a AdmissionCounters>,
    #[serde(skip_serializing_if = "Option::is_none")]
    trace: Option<&'a TraceDetail>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ping: Option<&'a PingDetail>,
    #[serde(skip_serializing_if = "Option::is_none")]
    owamp: Option<&'a OwampDetail>,
    #[serde(skip_serializing_if = "Option::is_none")]
    twamp: Option<&'a TwampDetail>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dns: Option<&'a DnsDetail>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ndt7: Option<&'a Ndt7Detail>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ndt7_server: Option<&'a Ndt7ServerCounters>,
    #[serde(skip_serializing_if = "Option::is_none")]
    http: Option<&'a HttpDetail>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tls: Option<&'a TlsDetail>,
}

impl Serialize for TestResult {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let d = &self.detail;
        DocumentRef {
            schema_version: self.schema_version,
            tool: &self.tool,
            kind: self.kind,
            spec: self.spec.as_ref(),
            started_unix_ms: self.started_unix_ms,
            settings: &self.settings,
            intervals: &self.intervals,
            intervals_omitted: self.intervals_omitted,
            connections: &self.connections,
            summary: &self.summary,
            connections_omitted: self.connections_omitted,
            end: self.end,
            assertions: &self.assertions,
            error: self.error.as_ref(),
            services: d.services(),
            iperf3: d.iperf3(),
            stamp: d.stamp(),
            stamp_reflector: d.stamp_reflector(),
            ttcp: d.ttcp(),
            echo: d.echo(),
            media: d.media(),
            media_server: d.media_server(),
            quic: d.quic(),
            quic_server: d.quic_server(),
            owamp_server: d.owamp_server(),
            twamp_server: d.twamp_server(),
            admission: d.admission(),
            trace: d.trace(),
            ping: d.ping(),
            owamp: d.owamp(),
            twamp: d.twamp(),
            dns: d.dns(),
            ndt7: d.ndt7(),
            ndt7_server: d.ndt7_server(),
            http: d.http(),
            tls: d.tls(),
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for TestResult {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let doc = Document::deserialize(d)?;
        TestResult::from_document(doc).map_err(serde::de::Error::custom)
    }
}

impl schemars::JsonSchema for TestResult {
    fn schema_name() -> String {
        "TestResult".to_owned()
    }

    fn json_schema(gen: &mut schemars::gen::SchemaGenerator) -> schemars::schema::Schema {
        Document::json_schema(gen)
    }
}

fn boxed<T>(v: Option<T>) -> Option<Box<T>> {
    v.map(Box::new)
}

impl TestResult {
    fn from_document(mut doc: Document) -> Result<TestResult, String> {
        let detail = match doc.kind {
            TestKind::TcpClient => None,
            TestKind::TcpServer => {
                let s = ServerDetail {
                    services: doc.services.take(),
                    stamp_reflector: doc.stamp_reflector.take(),
                    media_server: doc.media_server.take(),
                    quic_server: doc.quic_server.take(),
                    owamp_server: doc.owamp_server.take(),
                    twamp_server: doc.twamp_server.take(),
                    admission: doc.admission.take(),
                    ndt7_server: doc.ndt7_server.take(),
                };
                (s != ServerDetail::default()).then(|| Detail::Server(Box::new(s)))
            }
            TestKind::Iperf3Client | TestKind::Iperf3Server => boxed(doc.iperf3.take()).map(Detail::Iperf3),
            TestKind::StampSender => boxed(doc.stamp.take()).map(Detail::Stamp),
            TestKind::TtcpTransmit | TestKind::TtcpReceive => boxed(doc.ttcp.take()).map(Detail::Ttcp),
            TestKind::EchoClient => boxed(doc.echo.take()).map(Detail::Echo),
            TestKind::MediaClient => boxed(doc.media.take()).map(Detail::Media),
            TestKind::QuicClient => boxed(doc.quic.take()).map(Detail::Quic),
            TestKind::Trace => boxed(doc.trace.take()).map(Detail::Trace),
            TestKind::Ping => boxed(doc.ping.take()).map(Detail::Ping),
            TestKind::OwampClient => boxed(doc.owamp.take()).map(Detail::Owamp),
            TestKind::TwampClient => boxed(doc.twamp.take()).map(Detail::Twamp),
            TestKind::DnsClient => boxed(doc.dns.take()).map(Detail::Dns),
            TestKind::Ndt7Client => boxed(doc.ndt7.take()).map(Detail::Ndt7),
            TestKind::HttpClient => boxed(doc.http.take()).map(Detail::Http),
            TestKind::TlsClient => boxed(doc.tls.take()).map(Detail::Tls),
        };
        // Whatever the kind did not take does not belong to it.
        let left = [
            ("services", doc.services.is_some()),
            ("iperf3", doc.iperf3.is_some()),
            ("stamp", doc.stamp.is_some()),
            ("stamp_reflector", doc.stamp_reflector.is_some()),
            ("ttcp", doc.ttcp.is_some()),
            ("echo", doc.echo.is_some()),
            ("media", doc.media.is_some()),
            ("media_server", doc.media_server.is_some()),
            ("quic", doc.quic.is_some()),
            ("quic_server", doc.quic_server.is_some()),
            ("owamp_server", doc.owamp_server.is_some()),
            ("twamp_server", doc.twamp_server.is_some()),
            ("admission", doc.admission.is_some()),
            ("trace", doc.trace.is_some()),
            ("ping", doc.ping.is_some()),
            ("owamp", doc.owamp.is_some()),
            ("twamp", doc.twamp.is_some()),
            ("dns", doc.dns.is_some()),
            ("ndt7", doc.ndt7.is_some()),
            ("ndt7_server", doc.ndt7_server.is_some()),
            ("http", doc.http.is_some()),
            ("tls", doc.tls.is_some()),
        ];
        if let Some((key, _)) = left.iter().find(|(_, there)| *there) {
            let kind = serde_json::to_value(doc.kind).unwrap_or_default();
            return Err(format!(
                "a {} result has no `{key}`",
                kind.as_str().unwrap_or("?")
            ));
        }
        Ok(TestResult {
            schema_version: doc.schema_version,
            tool: doc.tool,
            kind: doc.kind,
            spec: doc.spec,
            started_unix_ms: doc.started_unix_ms,
            settings: doc.settings,
            intervals: doc.intervals,
            intervals_omitted: doc.intervals_omitted,
            connections: doc.connections,
            summary: doc.summary,
            connections_omitted: doc.connections_omitted,
            end: doc.end,
            assertions: doc.assertions,
            error: doc.error,
            detail: detail.unwrap_or_default(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::result::{WireProtocol, SCHEMA_VERSION};

    fn result(kind: TestKind, detail: Detail) -> TestResult {
        TestResult {
            schema_version: SCHEMA_VERSION,
            tool: ToolInfo {
                name: "goodput".into(),
                version: "0".into(),
            },
            kind,
            spec: None,
            started_unix_ms: 1,
            settings: TcpSettings::bare(WireProtocol::Goodput, Vec::new(), 0),
            intervals: Vec::new(),
            intervals_omitted: 0,
            connections: Vec::new(),
            summary: Summary::from_records(&[], 0),
            connections_omitted: 0,
            end: EndReason::Completed,
            assertions: Vec::new(),
            error: None,
            detail,
        }
    }

    #[test]
    fn a_servers_counters_sit_at_the_top_of_the_document_and_come_back() {
        let counters = ServiceCounters {
            echo_bytes: 7,
            ..ServiceCounters::default()
        };
        let r = result(
            TestKind::TcpServer,
            Detail::Server(Box::new(ServerDetail {
                services: Some(counters),
                admission: Some(AdmissionCounters::default()),
                ..ServerDetail::default()
            })),
        );
        let v = serde_json::to_value(&r).unwrap();
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        assert!(
            keys.contains(&"services") && keys.contains(&"admission"),
            "{keys:?}"
        );
        assert!(
            !keys.contains(&"detail") && !keys.contains(&"stamp_reflector"),
            "{keys:?}"
        );
        assert_eq!(v["services"]["echo_bytes"], 7);
        let back: TestResult = serde_json::from_value(v).unwrap();
        assert_eq!(back.detail, r.detail);
        assert_eq!(back.services(), Some(&counters));
        assert_eq!(back.stamp(), None);
    }

    #[test]
    fn a_result_with_no_detail_reads_back_as_none_whatever_its_kind() {
        for kind in [TestKind::TcpClient, TestKind::TcpServer, TestKind::StampSender] {
            let v = serde_json::to_value(result(kind, Detail::None)).unwrap();
            let back: TestResult = serde_json::from_value(v).unwrap();
            assert_eq!(back.detail, Detail::None, "{kind:?}");
        }
    }

    #[test]
    fn owamp_and_twamp_details_sit_under_their_keys_and_come_back() {
        use crate::result::{
            ClockState, OneWayDirection, OneWayStats, OneWaySummary, StampHistograms, StampReflectorMode,
            StampStats,
        };
        let delay = OneWayStats {
            count: 9,
            min_us: -12.5,
            median_us: 40.0,
            max_us: 90.0,
            jitter_us: 7.0,
            synchronized: false,
            error_bound_us: Some(1500.0),
            ipdv: None,
        };
        let way = OneWayDirection {
            sid: "c0a80001e95f3a1c0000000000000001".into(),
            sender: "192.0.2.1:8760".into(),
            receiver: "192.0.2.2:8761".into(),
            sent: 10,
            unsent: 0,
            received: 9,
            lost: 1,
            duplicates: 0,
            reordered: 0,
            reordered_percent: 0.0,
            n_reordering_percent: Vec::new(),
            delay: Some(delay),
            percentiles: None,
            hops: None,
            histogram_ns: None,
            histogram_negative_ns: None,
            first_ns: Some(1_700_000_000_000_000_000),
            last_ns: Some(1_700_000_000_900_000_000),
            intervals: vec![OneWaySummary {
                start_ns: 1_700_000_000_000_000_000,
                end_ns: 1_700_000_000_900_000_000,
                sent: 10,
                unsent: 0,
                received: 9,
                lost: 1,
                duplicates: 0,
                reordered: 0,
                delay: Some(delay),
                hops: None,
                histogram_ns: None,
                histogram_negative_ns: None,
            }],
        };
        let owamp = OwampDetail {
            mode: "open".into(),
            padding: 0,
            packet_bytes: 14,
            interval_ns: 100_000_000,
            poisson: false,
            dscp: 0,
            timeout_ms: 2000,
            local_clock: ClockState {
                synchronized: false,
                error_us: None,
            },
            to: None,
            from: Some(way),
        };
        let r = result(TestKind::OwampClient, Detail::Owamp(Box::new(owamp.clone())));
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["kind"], "owamp_client");
        assert_eq!(v["owamp"]["from"]["lost"], 1);
        assert_eq!(v["owamp"]["from"]["delay"]["min_us"], -12.5);
        assert_eq!(v["owamp"]["to"], serde_json::Value::Null);
        let back: TestResult = serde_json::from_value(v.clone()).unwrap();
        assert_eq!(back.owamp(), Some(&owamp));
        let mut wrong = v;
        wrong["kind"] = "twamp_client".into();
        assert_eq!(
            serde_json::from_value::<TestResult>(wrong)
                .unwrap_err()
                .to_string(),
            "a twamp_client result has no `owamp`"
        );

        let stats = StampStats {
            sent: 100,
            received: 98,
            lost: 2,
            not_sent: 0,
            send_failures: Vec::new(),
            lost_forward: Some(1),
            lost_backward: Some(1),
            reflector_mode: StampReflectorMode::Stateful,
            duplicates: 0,
            late: 0,
            unmatched: 0,
            ssid_mismatch: 0,
            ssid_zero: 0,
            reordered: 0,
            reordered_percent: 0.0,
            n_reordering_percent: Vec::new(),
            rtt: None,
            forward: None,
            backward: None,
            rtt_ipdv: None,
            hops_forward: None,
            hops_backward: None,
            histograms: StampHistograms::default(),
        };
        let twamp = TwampDetail {
            mode: "authenticated".into(),
            padding: 64,
            packet_bytes: 112,
            interval_ns: 100_000_000,
            dscp: 46,
            timeout_ms: 2000,
            local_clock: ClockState {
                synchronized: true,
                error_us: Some(3.0),
            },
            sid: "c0a80001e95f3a1c0000000000000002".into(),
            stats,
            processing: None,
        };
        let r = result(TestKind::TwampClient, Detail::Twamp(Box::new(twamp.clone())));
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["twamp"]["stats"]["lost_backward"], 1);
        assert_eq!(v["twamp"]["local_clock"]["error_us"], 3.0);
        let back: TestResult = serde_json::from_value(v).unwrap();
        assert_eq!(back.twamp(), Some(&twamp));
        assert_eq!(back.owamp(), None);
    }

    #[test]
    fn a_key_that_is_not_the_kinds_is_refused() {
        let server = result(
            TestKind::TcpServer,
            Detail::Server(Box::new(ServerDetail {
                services: Some(ServiceCounters::default()),
                ..ServerDetail::default()
            })),
        );
        let mut v = serde_json::to_value(server).unwrap();
        v["kind"] = "tcp_client".into();
        let e = serde_json::from_value::<TestResult>(v).unwrap_err();
        assert_eq!(e.to_string(), "a tcp_client result has no `services`");
    }
}
