//! What every kind's run shares: the result of a run that could not start.

use goodput_core::result::{
    EndReason, Summary, TcpSettings, TestKind, TestResult, WireProtocol, SCHEMA_VERSION,
};
use goodput_core::spec::TestSpec;

/// The kind of result a spec's run produces, and the wire it speaks.
pub fn result_kind(spec: &TestSpec) -> (TestKind, WireProtocol) {
    match spec {
        TestSpec::Tcp(s) => (
            TestKind::TcpClient,
            match s.wire {
                goodput_core::spec::TcpWire::Goodput => WireProtocol::Goodput,
                goodput_core::spec::TcpWire::Cts => WireProtocol::Cts,
            },
        ),
        TestSpec::Stamp(_) => (TestKind::StampSender, WireProtocol::Stamp),
        TestSpec::Iperf3(_) => (TestKind::Iperf3Client, WireProtocol::Iperf3),
        TestSpec::Server(s) => (
            TestKind::TcpServer,
            match s.wire {
                goodput_core::spec::TcpWire::Goodput => WireProtocol::Goodput,
                goodput_core::spec::TcpWire::Cts => WireProtocol::Cts,
            },
        ),
    }
}

/// The result of a run that could not start, or that stopped on an error
/// before it had a result of its own: no intervals, no connections, ended
/// [`EndReason::Failed`] with `reason`, and the spec it was to run — so a
/// scheduler archives and alerts on it like any other result.
pub fn failed(spec: &TestSpec, reason: impl Into<String>) -> TestResult {
    let (kind, wire) = result_kind(spec);
    TestResult {
        schema_version: SCHEMA_VERSION,
        tool: crate::tool_info(),
        kind,
        spec: Some(spec.clone()),
        started_unix_ms: crate::tcp::unix_ms_now(),
        settings: TcpSettings::bare(wire, Vec::new(), 0),
        intervals: Vec::new(),
        intervals_omitted: 0,
        connections: Vec::new(),
        summary: Summary::from_records(&[], 0),
        connections_omitted: 0,
        end: EndReason::Failed,
        error: Some(reason.into()),
        services: None,
        iperf3: None,
        stamp: None,
        stamp_reflector: None,
        ttcp: None,
        echo: None,
        media: None,
        media_server: None,
        quic: None,
        quic_server: None,
        admission: None,
    }
}
