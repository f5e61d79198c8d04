//! `goodput iperf3 HOST`: drives a stock iperf3 server.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use goodput_core::iperf3::control::{encode_json, Expect, Message, State};
use goodput_core::iperf3::params::{Params, Protocol};
use goodput_core::iperf3::results::{Results, StreamResult, MAX_RESULTS_LEN};
use goodput_core::iperf3::{client_sends_on, cookie_text, make_cookie, stream_id, udp, COOKIE_LEN};
use goodput_core::plan::TcpPattern;
use goodput_core::result::{
    ConnectionRecord, Detail, EndReason, Iperf3Detail, Iperf3PeerStream, Iperf3Protocol, Iperf3StreamRecord,
    Outcome, PeerView, Span, Summary, TcpSettings, TestKind, TestResult, WireProtocol,
};
use socket2::SockRef;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpSocket, TcpStream, UdpSocket};
use tokio_util::sync::CancellationToken;

use super::streams::{Budget, DataPhase, DataSocket, StreamFinal, StreamState};
use super::{addr_text, io, server_error, Control, Iperf3Error};
use crate::tcp::unix_ms_now;
use crate::tool_info;
use crate::{EngineError, Observer, RunClock};

/// What `goodput iperf3` runs.
#[derive(Debug, Clone)]
pub struct Iperf3ClientSpec {
    /// The iperf3 server.
    pub target: SocketAddr,
    /// Local address for every socket (`-B`).
    pub bind: Option<IpAddr>,
    /// Local port of the first data stream (`--cport`); the others use the
    /// following ports.
    pub cport: Option<u16>,
    /// The test's parameters, sent to the server as they are.
    pub params: Params,
    /// Interval between status reports.
    pub status_interval: Duration,
    /// How long a connect or a server answer may take.
    pub timeout: Duration,
    /// Most intervals kept in the result.
    pub max_records: usize,
}

/// Socket options from the parameters, for a data socket of `addr`'s family.
pub(crate) fn apply_params(sock: &SockRef<'_>, p: &Params, addr: &SocketAddr) -> std::io::Result<()> {
    if p.window > 0 {
        sock.set_send_buffer_size(p.window as usize)?;
        sock.set_recv_buffer_size(p.window as usize)?;
    }
    if p.protocol == Protocol::Tcp {
        if p.mss > 0 {
            sock.set_mss(p.mss)?;
        }
        if p.nodelay {
            sock.set_nodelay(true)?;
        }
    }
    if p.tos > 0 {
        match addr {
            SocketAddr::V4(_) => sock.set_tos(u32::from(p.tos))?,
            SocketAddr::V6(_) => sock.set_tclass_v6(u32::from(p.tos))?,
        }
    }
    Ok(())
}

async fn connect_tcp(
    target: SocketAddr,
    bind: Option<IpAddr>,
    port: u16,
    params: Option<&Params>,
    timeout: Duration,
) -> Result<TcpStream, Iperf3Error> {
    let s = if target.is_ipv4() {
        TcpSocket::new_v4()
    } else {
        TcpSocket::new_v6()
    }
    .map_err(io("socket"))?;
    if let Some(p) = params {
        apply_params(&SockRef::from(&s), p, &target).map_err(io("setting socket options"))?;
        if let Some(cc) = &p.congestion {
            SockRef::from(&s)
                .set_tcp_congestion(cc.as_bytes())
                .map_err(io("TCP_CONGESTION"))?;
        }
    }
    if bind.is_some() || port != 0 {
        if port != 0 {
            s.set_reuseaddr(true).map_err(io("SO_REUSEADDR"))?;
        }
        let ip = bind.unwrap_or(if target.is_ipv4() {
            IpAddr::from([0, 0, 0, 0])
        } else {
            IpAddr::from([0u16; 8])
        });
        s.bind(SocketAddr::new(ip, port)).map_err(io("bind"))?;
    }
    let stream = tokio::time::timeout(timeout, s.connect(target))
        .await
        .map_err(|_| Iperf3Error::Timeout("connect"))?
        .map_err(io("connect"))?;
    Ok(stream)
}

async fn open_udp(
    target: SocketAddr,
    bind: Option<IpAddr>,
    port: u16,
    p: &Params,
    timeout: Duration,
) -> Result<UdpSocket, Iperf3Error> {
    let ip = bind.unwrap_or(if target.is_ipv4() {
        IpAddr::from([0, 0, 0, 0])
    } else {
        IpAddr::from([0u16; 8])
    });
    let domain = socket2::Domain::for_address(target);
    let s = socket2::Socket::new(domain, socket2::Type::DGRAM.cloexec(), None).map_err(io("socket"))?;
    apply_params(&SockRef::from(&s), p, &target).map_err(io("setting socket options"))?;
    if port != 0 {
        s.set_reuse_address(true).map_err(io("SO_REUSEADDR"))?;
    }
    s.bind(&SocketAddr::new(ip, port).into()).map_err(io("bind"))?;
    s.set_nonblocking(true).map_err(io("socket"))?;
    let sock = UdpSocket::from_std(s.into()).map_err(io("socket"))?;
    sock.connect(target).await.map_err(io("connect"))?;
    sock.send(&udp::HELLO).await.map_err(io("UDP hello"))?;
    // Wait for the reply; in reverse mode data can overtake it (iperf3
    // tolerates two such datagrams; goodput skips any data-sized ones).
    let mut buf = vec![0u8; 65_536];
    let deadline = tokio::time::Instant::now() + timeout;
    let mut skipped = 0;
    loop {
        let n = tokio::time::timeout_at(deadline, sock.recv(&mut buf))
            .await
            .map_err(|_| Iperf3Error::Timeout("the UDP stream reply"))?
            .map_err(io("UDP stream reply"))?;
        if udp::is_reply(&buf[..n]) {
            return Ok(sock);
        }
        skipped += 1;
        if skipped > 64 {
            return Err(Iperf3Error::Protocol(
                "no UDP stream reply among the first 64 datagrams".into(),
            ));
        }
    }
}

/// Runs one iperf3 test against a stock server and returns its result.
pub async fn run_client(
    spec: Iperf3ClientSpec,
    observer: &mut dyn Observer,
    cancel: CancellationToken,
) -> Result<TestResult, EngineError> {
    let clock = RunClock::start();
    let started_unix_ms = unix_ms_now();
    let mut g = ResultParts::default();
    let outcome = converse(&spec, observer, &cancel, &mut g).await;
    if let Err(e) = &outcome {
        if g.streams.is_empty() {
            return Err(EngineError::Iperf3(e.to_string()));
        }
    }
    Ok(assemble(&spec, clock, started_unix_ms, g, outcome.err()))
}

async fn converse(
    spec: &Iperf3ClientSpec,
    observer: &mut dyn Observer,
    cancel: &CancellationToken,
    g: &mut ResultParts,
) -> Result<(), Iperf3Error> {
    let p = &spec.params;
    let ctl_stream = tokio::select! {
        r = connect_tcp(spec.target, spec.bind, 0, None, spec.timeout) => r?,
        _ = cancel.cancelled() => return Err(Iperf3Error::Cancelled),
    };
    ctl_stream.set_nodelay(true).map_err(io("TCP_NODELAY"))?;
    g.control_local = ctl_stream.local_addr().map(addr_text).unwrap_or_default();
    g.control_remote = ctl_stream.peer_addr().map(addr_text).unwrap_or_default();
    let mut ctl = Control::new(ctl_stream);
    let mut random = [0u8; 36];
    rand::RngCore::fill_bytes(&mut rand::thread_rng(), &mut random);
    let cookie: [u8; COOKIE_LEN] = make_cookie(&random);
    g.cookie = cookie_text(&cookie);
    ctl.send(&cookie, "sending the cookie").await?;

    let expect_state = |m: Message, want: State| -> Result<(), Iperf3Error> {
        match m {
            Message::State(s) if s == want => Ok(()),
            Message::State(State::AccessDenied) => Err(Iperf3Error::Busy),
            Message::State(State::ServerTerminate) => Err(Iperf3Error::Terminated("server")),
            Message::ServerError { code, errno } => Err(server_error(code, errno)),
            other => Err(Iperf3Error::Protocol(format!(
                "expected state {}, got {other}",
                want.name()
            ))),
        }
    };
    let m = ctl
        .read_within(Expect::State, "the server's greeting", spec.timeout)
        .await?;
    expect_state(m, State::ParamExchange)?;
    ctl.send(&encode_json(&p.to_json()), "sending the parameters")
        .await?;
    let m = ctl
        .read_within(Expect::State, "CREATE_STREAMS", spec.timeout)
        .await?;
    expect_state(m, State::CreateStreams)?;

    // Streams one after another, in the order the server numbers them.
    let n = p.stream_count();
    let mut sockets = Vec::with_capacity(n);
    for i in 0..n {
        let port = spec.cport.map_or(0, |c| c.saturating_add(i as u16));
        let sender = client_sends_on(i, p.parallel as usize, p.reverse, p.bidirectional);
        let sock = match p.protocol {
            Protocol::Tcp => {
                let mut s = connect_tcp(spec.target, spec.bind, port, Some(p), spec.timeout).await?;
                s.write_all(&cookie)
                    .await
                    .map_err(io("sending the stream cookie"))?;
                if g.congestion_used.is_none() {
                    g.congestion_used = SockRef::from(&s)
                        .tcp_congestion()
                        .ok()
                        .map(|c| String::from_utf8_lossy(&c).trim_end_matches('\0').to_owned());
                }
                DataSocket::Tcp(s)
            }
            Protocol::Udp => DataSocket::Udp(open_udp(spec.target, spec.bind, port, p, spec.timeout).await?),
        };
        g.streams.push(StreamState::new(stream_id(i), sender, &sock));
        sockets.push(sock);
    }
    let m = ctl.read_within(Expect::State, "TEST_START", spec.timeout).await?;
    expect_state(m, State::TestStart)?;
    let m = ctl
        .read_within(Expect::State, "TEST_RUNNING", spec.timeout)
        .await?;
    expect_state(m, State::TestRunning)?;

    // Data.
    let budget = Arc::new(Budget::new(p.num, p.blockcount, u64::from(p.len)));
    let mut phase = DataPhase::start(p, &g.streams, sockets, budget.clone(), spec.max_records, false);
    let omit = Duration::from_secs(u64::from(p.omit));
    let mut ticker = phase.ticker(spec.status_interval);
    let omit_end = phase.at(omit);
    let time_end = phase.at(omit + Duration::from_secs(u64::from(p.time)));
    tokio::pin!(omit_end, time_end);
    let mut omit_done = omit.is_zero();
    let timed = p.time > 0 && p.num == 0 && p.blockcount == 0;
    let mut budget_end = false;
    let mut failure = None;
    loop {
        tokio::select! {
            biased;
            _ = cancel.cancelled() => {
                g.end = Some(EndReason::Interrupted);
                break;
            }
            m = ctl.read(Expect::State, "the running test") => {
                failure = Some(match m {
                    Ok(Message::State(State::ServerTerminate)) => Iperf3Error::Terminated("server"),
                    Ok(Message::ServerError { code, errno }) => server_error(code, errno),
                    Ok(other) => Iperf3Error::Protocol(format!("unexpected {other} while the test runs")),
                    Err(e) => e,
                });
                break;
            }
            _ = &mut omit_end, if !omit_done => {
                omit_done = true;
                phase.meter.end_omit();
            }
            _ = &mut time_end, if timed => break,
            _ = budget.notify.notified(), if !timed => {
                budget_end = true;
                break;
            }
            _ = ticker.tick() => {
                let iv = phase.meter.sample();
                observer.on_interval(&iv);
                g.intervals.push(iv);
            }
        }
    }
    // Senders stopped by the budget finish their last block by themselves.
    if !budget_end || failure.is_some() || g.end.is_some() {
        phase.stop.cancel();
    }
    let held = phase.join_senders().await;
    // The test ends for us when the senders stopped (or now, receiving).
    let f = phase.figures();
    observer.on_interval(&f.last);
    g.intervals.push(f.last);
    (g.finals, g.errors_at_end, g.cpu) = (f.finals, f.errors, f.cpu);
    (g.iperf3_intervals, g.intervals_omitted) = (f.intervals, f.intervals_omitted);
    if failure.is_none() && g.end.is_none() {
        // Let what was written reach the server before it stops counting
        // at TEST_END: wait for the send queues to be acknowledged, then a
        // moment for the server to read its receive buffers.
        if drain_send_queues(&held, Duration::from_secs(2)).await {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    let result = async {
        if let Some(f) = failure {
            return Err(f);
        }
        if g.end == Some(EndReason::Interrupted) {
            let _ = ctl.send_state(State::ClientTerminate, "CLIENT_TERMINATE").await;
            return Err(Iperf3Error::Cancelled);
        }
        ctl.send_state(State::TestEnd, "TEST_END").await?;
        let m = ctl
            .read_within(Expect::State, "EXCHANGE_RESULTS", spec.timeout)
            .await?;
        expect_state(m, State::ExchangeResults)?;
        let mine = local_results(p, &g.streams, &g.finals, g.cpu, g.congestion_used.clone());
        ctl.send(&encode_json(&mine.to_json()), "sending results").await?;
        let body = match ctl
            .read_within(
                Expect::Json { max: MAX_RESULTS_LEN },
                "the server's results",
                spec.timeout,
            )
            .await?
        {
            Message::Json(b) => b,
            other => return Err(Iperf3Error::Protocol(format!("expected results, got {other}"))),
        };
        g.peer = Some(Results::from_json(&body).map_err(|e| Iperf3Error::Protocol(e.to_string()))?);
        let m = ctl
            .read_within(Expect::State, "DISPLAY_RESULTS", spec.timeout)
            .await?;
        expect_state(m, State::DisplayResults)?;
        ctl.send_state(State::IperfDone, "IPERF_DONE").await?;
        Ok(())
    }
    .await;
    phase.close().await;
    drop(held);
    ctl.close_gracefully(Duration::from_secs(1)).await;
    g.end.get_or_insert(EndReason::Completed);
    result
}

/// Waits until every TCP sender's queue is empty (bounded): the bytes were
/// acknowledged by the server's kernel, so a server that reads on until
/// TEST_END counts them.
async fn drain_send_queues(held: &[DataSocket], limit: Duration) -> bool {
    use std::os::fd::AsRawFd;
    let outq = |fd: i32| -> i32 {
        let mut v: libc::c_int = 0;
        // SAFETY: SIOCOUTQ writes one c_int.
        let rc = unsafe { libc::ioctl(fd, libc::TIOCOUTQ, &mut v) };
        if rc == 0 {
            v
        } else {
            0
        }
    };
    let deadline = Instant::now() + limit;
    let mut any = false;
    for s in held {
        if let DataSocket::Tcp(t) = s {
            any = true;
            while outq(t.as_raw_fd()) > 0 && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
    }
    any
}

/// This end's results message.
pub(crate) fn local_results(
    p: &Params,
    streams: &[Arc<StreamState>],
    finals: &[StreamFinal],
    cpu: goodput_core::result::CpuUtil,
    congestion_used: Option<String>,
) -> Results {
    let any_sender = streams.iter().any(|s| s.sender);
    Results {
        cpu_util: [cpu.total_percent, cpu.user_percent, cpu.system_percent],
        sender_has_retransmits: match (any_sender, p.protocol) {
            (false, _) => -1,
            (true, Protocol::Tcp) => 1,
            (true, Protocol::Udp) => 0,
        },
        congestion_used,
        streams: streams
            .iter()
            .zip(finals)
            .map(|(s, f)| {
                let u = f.udp.unwrap_or_default();
                StreamResult {
                    id: i64::from(s.id),
                    bytes: f.bytes,
                    retransmits: f.retransmits.map_or(-1, |r| r as i64),
                    jitter: u.jitter_ms / 1000.0,
                    errors: u.lost as i64,
                    packets: u.packets as i64,
                    omitted: None,
                    start_time: 0.0,
                    end_time: f.seconds,
                }
            })
            .collect(),
        server_output_json: None,
        server_output_text: None,
    }
}

/// The peer's entry for a stream as the result model records it.
pub(crate) fn peer_stream(r: &StreamResult) -> Iperf3PeerStream {
    Iperf3PeerStream {
        bytes: r.bytes,
        retransmits: r.retransmits,
        jitter_ms: r.jitter * 1000.0,
        lost: r.errors,
        packets: r.packets,
        seconds: r.end_time - r.start_time,
    }
}

/// Builds the result document of one iperf3 test (client or server side).
#[allow(clippy::too_many_arguments)]
pub(crate) fn build_result(
    kind: TestKind,
    p: &Params,
    addresses: Vec<String>,
    status_interval: Duration,
    started_unix_ms: u64,
    run_ns: u64,
    parts: ResultParts,
) -> TestResult {
    let ResultParts {
        cookie,
        control_local,
        control_remote,
        streams,
        finals,
        errors_at_end,
        intervals,
        intervals_omitted,
        iperf3_intervals,
        peer,
        cpu,
        congestion_used,
        end,
        error,
        server_output_text,
        server_output_json,
    } = parts;
    let end = end.unwrap_or(EndReason::Completed);
    let is_client = kind == TestKind::Iperf3Client;
    let mut records = Vec::new();
    let mut details = Vec::new();
    for (i, (s, f)) in streams.iter().zip(&finals).enumerate() {
        let peer_entry = peer.as_ref().and_then(|r| r.stream(i64::from(s.id)));
        let outcome = match (errors_at_end.get(i).cloned().flatten(), &error, end) {
            (Some(e), _, _) => Outcome::NetworkError {
                during: if s.sender { "send" } else { "recv" }.into(),
                errno: None,
                name: "stream error".into(),
                message: e,
            },
            (None, _, EndReason::Interrupted) => Outcome::Aborted {
                reason: "the run was stopped".into(),
            },
            (None, Some(e), _) => Outcome::ProtocolError {
                kind: goodput_core::result::ProtocolErrorKind::BadMessage,
                direction: None,
                offset: None,
                expected: None,
                actual: None,
                message: e.clone(),
            },
            (None, None, _) => Outcome::Succeeded,
        };
        let client_sends = if is_client { s.sender } else { !s.sender };
        let elapsed_ns = (f.seconds * 1e9) as u64;
        let (sent, received) = if s.sender { (f.bytes, 0) } else { (0, f.bytes) };
        records.push(ConnectionRecord {
            index: i as u64,
            connection_id: format!("{cookie}/{}", s.id),
            local_address: addr_text(s.local),
            remote_address: addr_text(s.remote),
            start_s: 0.0,
            time_slice_s: run_ns as f64 / 1e9,
            elapsed_ns,
            pattern: Some(if client_sends {
                TcpPattern::Push
            } else {
                TcpPattern::Pull
            }),
            transfer_bytes: f.bytes,
            buffer_bytes: u64::from(p.len),
            rate_limit_bytes_per_second: p.bandwidth / 8,
            sent_bytes: sent,
            received_bytes: received,
            outcome,
            peer: peer_entry.map(|r| PeerView {
                sent_bytes: if s.sender { 0 } else { r.bytes },
                received_bytes: if s.sender { r.bytes } else { 0 },
                elapsed_ns: ((r.end_time - r.start_time).max(0.0) * 1e9) as u64,
                outcome: Outcome::Succeeded,
            }),
            shutdown: None,
            quic: None,
            tcp_info: f.tcp_info,
            media: None,
            timed: None,
        });
        details.push(Iperf3StreamRecord {
            id: s.id,
            sender: s.sender,
            local_address: addr_text(s.local),
            remote_address: addr_text(s.remote),
            bytes: f.bytes,
            seconds: f.seconds,
            retransmits: f.retransmits,
            max_snd_cwnd_bytes: f.max_cwnd,
            rtt_us: f.rtt,
            udp: f.udp,
            peer: peer_entry.map(peer_stream),
        });
    }
    let summary = Summary::from_records(
        &records,
        finals.first().map_or(run_ns, |f| (f.seconds * 1e9) as u64),
    );
    let pattern = if p.bidirectional {
        TcpPattern::Duplex
    } else if p.reverse {
        TcpPattern::Pull
    } else {
        TcpPattern::Push
    };
    let limit = if p.num > 0 { Some(p.num) } else { None };
    TestResult {
        assertions: Vec::new(),
        spec: None,
        error: None,
        schema_version: goodput_core::result::SCHEMA_VERSION,
        tool: tool_info(),
        kind,
        started_unix_ms,
        settings: TcpSettings {
            wire: WireProtocol::Iperf3,
            pattern: Some(pattern),
            verify: None,
            transfer_bytes: limit.map(|n| Span { lo: n, hi: n }),
            buffer_bytes: Some(Span {
                lo: u64::from(p.len),
                hi: u64::from(p.len),
            }),
            push_bytes: None,
            pull_bytes: None,
            connections: Some(p.stream_count() as u64),
            iterations: Some(1),
            rate_limit_bytes_per_second: (p.bandwidth > 0).then_some(Span {
                lo: p.bandwidth / 8,
                hi: p.bandwidth / 8,
            }),
            rate_period_ms: None,
            shutdown: None,
            addresses,
            status_interval_ms: status_interval.as_millis() as u64,
            time_limit_ms: (p.time > 0).then(|| u64::from(p.time + p.omit) * 1000),
        },
        intervals,
        intervals_omitted,
        connections: records,
        summary,
        connections_omitted: 0,
        end,
        detail: Detail::Iperf3(Box::new(Iperf3Detail {
            protocol: match p.protocol {
                Protocol::Tcp => Iperf3Protocol::Tcp,
                Protocol::Udp => Iperf3Protocol::Udp,
            },
            cookie,
            control_local,
            control_remote,
            client_version: if is_client {
                Some(format!("goodput {}", env!("CARGO_PKG_VERSION")))
            } else {
                p.client_version.clone()
            },
            reverse: p.reverse,
            bidirectional: p.bidirectional,
            parallel: p.parallel,
            block_bytes: p.len,
            omit_s: p.omit,
            duration_s: p.time,
            bytes_limit: p.num,
            blocks_limit: p.blockcount,
            target_bits_per_second: p.bandwidth,
            tos: p.tos,
            title: p.title.clone(),
            extra_data: p.extra_data.clone(),
            streams: details,
            intervals: iperf3_intervals,
            cpu,
            peer_cpu: peer.as_ref().map(|r| goodput_core::result::CpuUtil {
                total_percent: r.cpu_util[0],
                user_percent: r.cpu_util[1],
                system_percent: r.cpu_util[2],
            }),
            congestion_used,
            peer_congestion_used: peer.as_ref().and_then(|r| r.congestion_used.clone()),
            server_output_json: server_output_json
                .or_else(|| peer.as_ref().and_then(|r| r.server_output_json.clone())),
            server_output_text: server_output_text
                .or_else(|| peer.as_ref().and_then(|r| r.server_output_text.clone())),
            error,
        })),
    }
}

/// Everything a finished test hands to [`build_result`], gathered as the
/// test goes (whatever it got to before a failure).
#[derive(Default)]
pub(crate) struct ResultParts {
    pub(crate) cookie: String,
    pub(crate) control_local: String,
    pub(crate) control_remote: String,
    pub(crate) streams: Vec<Arc<StreamState>>,
    pub(crate) finals: Vec<StreamFinal>,
    pub(crate) errors_at_end: Vec<Option<String>>,
    pub(crate) intervals: Vec<goodput_core::result::Interval>,
    pub(crate) intervals_omitted: u64,
    pub(crate) iperf3_intervals: Vec<goodput_core::result::Iperf3Interval>,
    pub(crate) peer: Option<Results>,
    pub(crate) cpu: goodput_core::result::CpuUtil,
    pub(crate) congestion_used: Option<String>,
    /// Absent: the test completed.
    pub(crate) end: Option<EndReason>,
    pub(crate) error: Option<String>,
    pub(crate) server_output_text: Option<String>,
    pub(crate) server_output_json: Option<serde_json::Value>,
}

fn assemble(
    spec: &Iperf3ClientSpec,
    clock: RunClock,
    started_unix_ms: u64,
    mut g: ResultParts,
    error: Option<Iperf3Error>,
) -> TestResult {
    g.error = error
        .filter(|e| !matches!(e, Iperf3Error::Cancelled))
        .map(|e| e.to_string());
    build_result(
        TestKind::Iperf3Client,
        &spec.params,
        vec![spec.target.to_string()],
        spec.status_interval,
        started_unix_ms,
        clock.now_ns(),
        g,
    )
}
