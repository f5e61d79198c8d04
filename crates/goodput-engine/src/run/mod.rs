//! One run entry for every kind: [`run`] takes a validated spec, an
//! observer and a cancellation token and returns the run's result — also
//! when the run cannot start (a result ended `failed`, with the reason).
//! The command line is one caller; the agent will be another.

mod dns;
mod echo;
mod http;
mod iperf3;
mod ndt7;
mod owamp;
mod path;
mod quic;
mod server;
mod stamp;
mod tcp;
mod ttcp;
mod twamp;
mod udp;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use goodput_core::assertion::{self, AssertionOutcome};
use goodput_core::result::{
    EndReason, FailureStage, RunFailure, Summary, TcpSettings, TestKind, TestResult, WireProtocol,
    SCHEMA_VERSION,
};
use goodput_core::spec::{SocketSpec, TcpWire, TestSpec};
use tokio_util::sync::CancellationToken;

use crate::socket::{raise_open_file_limit, SocketOptions};
use crate::Observer;

pub use echo::echo_connections;
pub use tcp::concurrent_connections;
pub use ttcp::TtcpLines;

/// What a run takes from its caller besides the spec.
#[derive(Default)]
pub struct RunContext {
    /// Most intervals and connection records kept in the result (0: no
    /// cap); the observer sees them all.
    pub max_records: usize,
    /// echo with `pause`: what releases the held connections (none: the
    /// spec's `hold_for`).
    pub release: Option<crate::echo::Release>,
    /// udp: what gets every received datagram (the command line's jitter
    /// file).
    pub datagram_sink: Option<crate::media::DatagramSink>,
    /// ttcp without `sinkmode`: the data it sends or where what arrives
    /// goes (the command line's standard input and output).
    pub ttcp_data: Option<crate::ttcp::DataStreams>,
    /// ttcp: its progress lines (the command line's standard error).
    pub ttcp_lines: Option<TtcpLines>,
    /// server with its iperf3 service: what sees that service's tests
    /// (none: nothing does).
    pub iperf3_observer: Option<Box<dyn Observer>>,
    /// stamp: the reflector is known to number its replies itself (RFC
    /// 8762 stateful, as goodput agents' beacons do), so a session that
    /// lost only replies still splits its loss by direction.
    pub stamp_reflector_stateful: bool,
    /// server with its ndt7 service: what gets each finished subtest
    /// (the agent keeps browsers' tests as runs).
    pub ndt7_tests: Option<crate::ndt7::server::TestSink>,
}

impl RunContext {
    /// A context that only caps the records kept.
    pub fn with_records(max_records: usize) -> Self {
        Self {
            max_records,
            ..Self::default()
        }
    }
}

/// Runs a validated spec to its end and returns its result, carrying the
/// spec. A run that cannot start, or stops on an error before it has a
/// result, returns [`failed`].
///
/// A server spec serves until its time limit, its exit count or `cancel`.
pub async fn run(
    spec: &TestSpec,
    context: RunContext,
    observer: &mut dyn Observer,
    cancel: CancellationToken,
) -> TestResult {
    let max_records = context.max_records;
    let outcome = match spec {
        TestSpec::Tcp(s) => tcp::run(s, observer, cancel, max_records).await,
        TestSpec::Stamp(s) => {
            stamp::run(s, context.stamp_reflector_stateful, observer, cancel, max_records).await
        }
        TestSpec::Iperf3(s) => iperf3::run(s, observer, cancel, max_records).await,
        TestSpec::Echo(s) => echo::run(s, context.release, observer, cancel, max_records).await,
        TestSpec::Udp(s) => udp::run(s, context.datagram_sink, observer, cancel, max_records).await,
        TestSpec::Quic(s) => quic::run(s, observer, cancel, max_records).await,
        TestSpec::Ttcp(s) => ttcp::run(s, context.ttcp_data, context.ttcp_lines, cancel).await,
        TestSpec::Server(s) => {
            server::run(
                s,
                context.iperf3_observer,
                context.ndt7_tests,
                observer,
                cancel,
                max_records,
            )
            .await
        }
        TestSpec::Trace(s) => path::trace(spec, s, observer, cancel).await,
        TestSpec::Ping(s) => path::ping(spec, s, observer, cancel, max_records).await,
        TestSpec::Owamp(s) => owamp::run(s, observer, cancel, max_records).await,
        TestSpec::Twamp(s) => twamp::run(s, observer, cancel, max_records).await,
        TestSpec::Dns(s) => dns::run(spec, s, observer, cancel, max_records).await,
        TestSpec::Ndt7(s) => ndt7::run(s, observer, cancel).await,
        TestSpec::Http(s) => http::http(spec, s, observer, cancel, max_records).await,
        TestSpec::Tls(s) => http::tls(spec, s, observer, cancel).await,
    };
    let mut result = match outcome {
        Ok(mut r) => {
            r.spec = Some(spec.clone());
            r
        }
        Err(f) => failed(spec, f.stage, f.message),
    };
    result.assertions = match result.end {
        EndReason::Failed => spec
            .assertions()
            .iter()
            .map(|a| AssertionOutcome {
                expression: a.text.clone(),
                measured: None,
                measured_text: "the run failed".into(),
                passed: false,
            })
            .collect(),
        _ => assertion::evaluate(spec.kind(), spec.assertions(), &result),
    };
    result
}

/// A kind's run that ended without a result of its own.
pub(crate) struct Failure {
    stage: FailureStage,
    message: String,
}

impl Failure {
    /// A failure before the peer was contacted.
    pub(crate) fn setup(message: impl Into<String>) -> Self {
        Self {
            stage: FailureStage::Setup,
            message: message.into(),
        }
    }

    /// The peer refused, or the test broke off.
    pub(crate) fn test(message: impl Into<String>) -> Self {
        Self {
            stage: FailureStage::Test,
            message: message.into(),
        }
    }
}

impl From<String> for Failure {
    fn from(message: String) -> Self {
        Failure::setup(message)
    }
}

/// An embedded loopback peer that runs beside a test (when the spec names
/// no host) and stops with it.
pub struct Embedded {
    cancel: CancellationToken,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Embedded {
    /// Nothing running yet; stops with the run (`run`) or after it.
    pub fn new(run: &CancellationToken) -> Self {
        Self {
            cancel: run.child_token(),
            task: None,
        }
    }

    /// Runs `serve` (given the server's cancellation token) on the runtime.
    pub fn start<F>(&mut self, serve: impl FnOnce(CancellationToken) -> F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        self.task = Some(tokio::spawn(serve(self.cancel.clone())));
    }

    /// Stops the server and waits for it.
    pub async fn stop(self) {
        self.cancel.cancel();
        if let Some(t) = self.task {
            let _ = t.await;
        }
    }
}

/// The loopback address of a family.
pub fn loopback(v6: bool) -> IpAddr {
    if v6 {
        Ipv6Addr::LOCALHOST.into()
    } else {
        Ipv4Addr::LOCALHOST.into()
    }
}

/// The most sockets the open-file limit leaves room for (after 64 for
/// everything else), each connection taking `per_connection`, and the
/// limit; `None` when the limit cannot be read.
pub fn socket_room(per_connection: u64) -> Option<(u64, u64)> {
    raise_open_file_limit()
        .ok()
        .map(|limit| (limit.saturating_sub(64) / per_connection.max(1), limit))
}

/// `connections` capped by the open-file limit, each taking
/// `per_connection` descriptors, and the notice that says so when it is.
pub fn capped_connections(connections: u64, per_connection: u64) -> (u64, Option<String>) {
    match socket_room(per_connection) {
        Some((room, limit)) if connections > room => (
            room.max(1),
            Some(format!(
                "`connections` {connections} capped to {room}: the open-file limit (RLIMIT_NOFILE) is {limit}"
            )),
        ),
        _ => (connections, None),
    }
}

pub use goodput_core::spec::split_target;

/// The addresses of `host` (a name or an address, either with `:PORT` or
/// `[v6]:PORT`, which overrides `port`), of the family asked for.
pub async fn resolve(host: &str, port: u16, v4: bool, v6: bool) -> Result<Vec<SocketAddr>, String> {
    let (host, port) = split_target(host, port)?;
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let found: Vec<SocketAddr> = match bare.parse::<IpAddr>() {
        Ok(ip) => vec![SocketAddr::new(ip, port)],
        Err(_) => tokio::net::lookup_host((bare, port))
            .await
            .map_err(|e| format!("cannot resolve '{host}': {e}"))?
            .collect(),
    };
    let mut out = Vec::new();
    for a in found {
        if (v4 && !a.is_ipv4()) || (v6 && !a.is_ipv6()) || out.contains(&a) {
            continue;
        }
        out.push(a);
    }
    if out.is_empty() {
        return Err(format!(
            "'{host}' has no {} address",
            if v4 { "IPv4" } else { "IPv6" }
        ));
    }
    Ok(out)
}

/// A validated spec's socket options (sizes were checked to fit 32 bits).
pub fn socket_options(s: &SocketSpec) -> SocketOptions {
    let fit = |v: Option<goodput_core::units::ByteSize>| v.and_then(|b| u32::try_from(b.0).ok());
    SocketOptions {
        send_buffer: fit(s.send_buffer),
        recv_buffer: fit(s.recv_buffer),
        no_delay: s.no_delay,
        congestion: s.congestion.clone(),
        dscp: s.dscp,
        keepalive: s.keepalive.map(|d| d.0),
        interface: s.interface.clone(),
    }
}

/// The result model's wire of a spec's TCP wire.
pub fn tcp_wire(w: TcpWire) -> WireProtocol {
    match w {
        TcpWire::Goodput => WireProtocol::Goodput,
        TcpWire::Cts => WireProtocol::Cts,
    }
}

/// An error and its causes, one after the other (`cannot listen on …:
/// Address already in use`).
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

/// The kind of result a spec's run produces, and the wire it speaks.
pub fn result_kind(spec: &TestSpec) -> (TestKind, WireProtocol) {
    match spec {
        TestSpec::Tcp(s) => (TestKind::TcpClient, tcp_wire(s.wire)),
        TestSpec::Stamp(_) => (TestKind::StampSender, WireProtocol::Stamp),
        TestSpec::Iperf3(_) => (TestKind::Iperf3Client, WireProtocol::Iperf3),
        TestSpec::Server(s) => (TestKind::TcpServer, tcp_wire(s.wire)),
        TestSpec::Echo(_) => (TestKind::EchoClient, WireProtocol::Raw),
        TestSpec::Udp(_) => (TestKind::MediaClient, WireProtocol::Media),
        TestSpec::Quic(_) => (TestKind::QuicClient, WireProtocol::Quic),
        TestSpec::Trace(_) => (TestKind::Trace, WireProtocol::Probes),
        TestSpec::Ping(_) => (TestKind::Ping, WireProtocol::Probes),
        TestSpec::Owamp(_) => (TestKind::OwampClient, WireProtocol::Owamp),
        TestSpec::Twamp(_) => (TestKind::TwampClient, WireProtocol::Twamp),
        TestSpec::Dns(_) => (TestKind::DnsClient, WireProtocol::Dns),
        TestSpec::Ndt7(_) => (TestKind::Ndt7Client, WireProtocol::Ndt7),
        TestSpec::Http(_) => (TestKind::HttpClient, WireProtocol::Http),
        TestSpec::Tls(_) => (TestKind::TlsClient, WireProtocol::Tls),
        TestSpec::Ttcp(s) => (
            if s.transmits() {
                TestKind::TtcpTransmit
            } else {
                TestKind::TtcpReceive
            },
            WireProtocol::Raw,
        ),
    }
}

/// The result of a run that could not start, or that stopped on an error
/// before it had a result of its own: no intervals, no connections, ended
/// [`EndReason::Failed`] with `reason`, and the spec it was to run — so a
/// scheduler archives and alerts on it like any other result.
pub fn failed(spec: &TestSpec, stage: FailureStage, reason: impl Into<String>) -> TestResult {
    TestResult {
        end: EndReason::Failed,
        error: Some(RunFailure {
            stage,
            message: reason.into(),
        }),
        ..empty(spec, crate::tcp::unix_ms_now(), 0)
    }
}

/// A result of `spec`'s kind with nothing in it yet: no intervals, no
/// connections, ended [`EndReason::Completed`] after `duration_ns`.
pub(crate) fn empty(spec: &TestSpec, started_unix_ms: u64, duration_ns: u64) -> TestResult {
    let (kind, wire) = result_kind(spec);
    TestResult {
        assertions: Vec::new(),
        schema_version: SCHEMA_VERSION,
        tool: crate::tool_info(),
        kind,
        spec: Some(spec.clone()),
        started_unix_ms,
        settings: TcpSettings::bare(wire, Vec::new(), 0),
        intervals: Vec::new(),
        intervals_omitted: 0,
        connections: Vec::new(),
        summary: Summary::from_records(&[], duration_ns),
        connections_omitted: 0,
        end: EndReason::Completed,
        error: None,
        detail: goodput_core::result::Detail::None,
    }
}
