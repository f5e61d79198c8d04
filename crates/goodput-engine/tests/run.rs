//! The one run entry as a library caller (the coming agent) uses it: a
//! spec in, a result out — the observer sees the banner and the records,
//! and a run that cannot start is a result too.

use goodput_core::result::{ConnectionRecord, EndReason, FailureStage, Interval};
use goodput_core::spec::{read_document, TestSpec};
use goodput_engine::run::{run, RunContext};
use goodput_engine::{CancellationToken, Observer};

#[derive(Default)]
struct Seen {
    title: String,
    settings: Vec<(String, String)>,
    connections: u64,
    intervals: u64,
}

impl Observer for Seen {
    fn on_interval(&mut self, _: &Interval) {
        self.intervals += 1;
    }
    fn on_connection(&mut self, _: &ConnectionRecord) {
        self.connections += 1;
    }
    fn on_start(&mut self, title: &str, settings: &[(String, String)]) {
        self.title = title.to_owned();
        self.settings = settings.to_vec();
    }
}

fn spec(json: &str) -> TestSpec {
    read_document(json, false).unwrap().remove(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tcp_spec_runs_against_its_embedded_server() {
    let s = spec(r#"{"kind": "tcp", "connections": 4, "transfer": "256KiB", "pattern": "duplex"}"#);
    let mut seen = Seen::default();
    let r = run(&s, RunContext::default(), &mut seen, CancellationToken::new()).await;
    assert_eq!(r.end, EndReason::Completed, "{:?}", r.error);
    assert_eq!(r.spec.as_ref(), Some(&s));
    assert_eq!(r.summary.successful, 4);
    assert_eq!(r.summary.sent_bytes + r.summary.received_bytes, 4 * 256 * 1024);
    assert_eq!(seen.connections, 4);
    assert_eq!(seen.title, "goodput tcp: configured settings");
    assert!(
        seen.settings
            .iter()
            .any(|(k, v)| k == "Targets" && v.contains("embedded")),
        "{:?}",
        seen.settings
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stamp_spec_counts_every_packet() {
    let s = spec(r#"{"kind": "stamp", "count": 20, "interval": "2ms"}"#);
    let mut seen = Seen::default();
    let r = run(&s, RunContext::default(), &mut seen, CancellationToken::new()).await;
    assert_eq!(r.end, EndReason::Completed, "{:?}", r.error);
    let d = r.stamp().expect("a stamp result");
    assert_eq!((d.total.sent, d.total.received), (20, 20));
    assert_eq!(seen.title, "goodput stamp");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_cannot_start_is_a_failed_result() {
    // RFC 6761: .invalid never resolves.
    let s = spec(r#"{"kind": "tcp", "hosts": ["server.invalid"]}"#);
    let mut seen = Seen::default();
    let r = run(&s, RunContext::default(), &mut seen, CancellationToken::new()).await;
    assert_eq!(r.end, EndReason::Failed);
    let e = r.error.expect("a reason");
    assert_eq!(e.stage, FailureStage::Setup);
    assert!(e.message.contains("server.invalid"), "{}", e.message);
    assert_eq!(r.spec.as_ref(), Some(&s));
    assert!(r.connections.is_empty() && r.intervals.is_empty());
    assert!(seen.title.is_empty(), "nothing started");
    // A server that does not exist on a reachable address: the iperf3
    // client reaches this host but nothing listens — a failure of the test.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let s = spec(&format!(
        r#"{{"kind": "iperf3", "host": "127.0.0.1", "port": {port}, "time": 1}}"#
    ));
    let r = run(
        &s,
        RunContext::default(),
        &mut Seen::default(),
        CancellationToken::new(),
    )
    .await;
    assert_eq!(r.end, EndReason::Failed);
    assert_eq!(r.error.expect("a reason").stage, FailureStage::Test);
}
