//! `goodput server --iperf3`: answers stock iperf3 clients, one test at a
//! time, telling anyone else that the server is busy, as iperf3 does.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use goodput_core::iperf3::control::{encode_json, encode_server_error, errors, Expect, Message, State};
use goodput_core::iperf3::params::{Params, Protocol, MAX_PARAMS_LEN};
use goodput_core::iperf3::results::{Results, MAX_RESULTS_LEN};
use goodput_core::iperf3::{client_sends_on, cookie_matches, cookie_text, stream_id, udp, COOKIE_LEN};
use goodput_core::result::{EndReason, TestKind, TestResult};
use socket2::{Domain, SockRef, Socket, Type};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::client::{apply_params, build_result, local_results, ResultParts};
use super::streams::{Budget, DataPhase, DataSocket, StreamState};
use super::{addr_text, io, Control, Iperf3Error};
use crate::tcp::unix_ms_now;
use crate::{EngineError, Observer};

/// How `goodput server --iperf3` serves.
#[derive(Debug, Clone)]
pub struct Iperf3ServerSpec {
    /// TCP (and, for UDP tests, UDP) address. `[::]` listens dual-stack,
    /// as iperf3 does.
    pub listen: SocketAddr,
    /// Longest test accepted (time + omit), and the cap on untimed tests.
    pub max_duration: Duration,
    /// How long a client may take to send its cookie, parameters, streams
    /// or results.
    pub timeout: Duration,
    /// Interval of the per-stream figures kept in each test's result.
    pub status_interval: Duration,
    /// Most intervals kept per test.
    pub max_records: usize,
    /// Stop after this many tests.
    pub exit_after: Option<u64>,
    /// The only client addresses served (empty: any). Others are told the
    /// server is busy, unread, as a second client is.
    pub allow: Vec<IpAddr>,
}

impl Iperf3ServerSpec {
    fn allows(&self, peer: &SocketAddr) -> bool {
        let ip = peer.ip().to_canonical();
        self.allow.is_empty() || self.allow.iter().any(|a| a.to_canonical() == ip)
    }
}

/// A bound iperf3 server.
pub struct Iperf3Server {
    listener: TcpListener,
    spec: Iperf3ServerSpec,
}

/// Binds the iperf3 listener. Must be called inside a tokio runtime.
pub fn bind_server(spec: Iperf3ServerSpec) -> Result<Iperf3Server, EngineError> {
    // [::] takes IPv4 too, like iperf3 without -4/-6.
    let only_v6 = !spec.listen.ip().is_unspecified();
    let listener = crate::socket::tcp_listener(spec.listen, false, only_v6, 128)
        .and_then(TcpListener::from_std)
        .map_err(|source| EngineError::Listen {
            addr: spec.listen,
            source,
        })?;
    Ok(Iperf3Server { listener, spec })
}

/// One test's view of the listener: TCP data connections are handed over
/// while the test is creating its streams; everyone else is refused.
struct Handoff {
    wanted: Arc<AtomicBool>,
    rx: mpsc::Receiver<TcpStream>,
    /// Set once the results are out: the test is only closing down, so a
    /// newcomer waits for it (as in iperf3's backlog) instead of being told
    /// the server is busy.
    finishing: Arc<AtomicBool>,
}

async fn refuse(mut s: TcpStream) {
    // ACCESS_DENIED, without reading the newcomer's cookie.
    let _ = tokio::time::timeout(Duration::from_secs(2), async {
        let _ = s.write_all(&[State::AccessDenied.byte()]).await;
        let _ = s.shutdown().await;
    })
    .await;
}

impl Iperf3Server {
    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr().unwrap_or(self.spec.listen)
    }

    /// Serves tests until `cancel` (or `exit_after`); each finished test's
    /// result goes to [`Observer::on_result`]. Returns the number of tests.
    pub async fn run(self, observer: &mut dyn Observer, cancel: CancellationToken) -> u64 {
        let mut tests = 0u64;
        let mut next: Option<(TcpStream, SocketAddr)> = None;
        loop {
            let (sock, peer) = match next.take() {
                Some(a) => a,
                None => tokio::select! {
                    _ = cancel.cancelled() => break,
                    a = self.listener.accept() => match a {
                        Ok(a) => a,
                        Err(e) => {
                            observer.on_notice(&format!("iperf3: accept failed: {e}"));
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            continue;
                        }
                    },
                },
            };
            if !self.spec.allows(&peer) {
                observer.on_notice(&format!(
                    "iperf3: refused {}, which is not among the clients allowed",
                    addr_text(peer)
                ));
                tokio::spawn(refuse(sock));
                continue;
            }
            let wanted = Arc::new(AtomicBool::new(false));
            let finishing = Arc::new(AtomicBool::new(false));
            let (tx, rx) = mpsc::channel(256);
            let handoff = Handoff {
                wanted: wanted.clone(),
                rx,
                finishing: finishing.clone(),
            };
            let test = serve_test(&self.spec, self.local_addr(), sock, peer, handoff, cancel.clone());
            tokio::pin!(test);
            let result = loop {
                tokio::select! {
                    r = &mut test => break r,
                    a = self.listener.accept(), if next.is_none() => match a {
                        // Out of descriptors, say: do not spin on it.
                        Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
                        Ok((s, from)) if !self.spec.allows(&from) => {
                            observer.on_notice(&format!(
                                "iperf3: refused {}, which is not among the clients allowed",
                                addr_text(from)
                            ));
                            tokio::spawn(refuse(s));
                        }
                        Ok((s, from)) if finishing.load(Relaxed) => next = Some((s, from)),
                        Ok((s, from)) => if wanted.load(Relaxed) {
                            if let Err(mpsc::error::TrySendError::Full(s) | mpsc::error::TrySendError::Closed(s)) = tx.try_send(s) {
                                tokio::spawn(refuse(s));
                            }
                        } else {
                            observer.on_notice(&format!(
                                "iperf3: refused {} (busy with a test from {})",
                                addr_text(from),
                                addr_text(peer)
                            ));
                            tokio::spawn(refuse(s));
                        }
                    },
                }
            };
            tests += 1;
            if let Some(e) = result.iperf3().and_then(|d| d.error.as_ref()) {
                observer.on_notice(&format!("iperf3: test from {} failed: {e}", addr_text(peer)));
            }
            observer.on_result(&result);
            if cancel.is_cancelled() || self.spec.exit_after.is_some_and(|n| tests >= n) {
                break;
            }
        }
        tests
    }
}

struct Served {
    params: Option<Params>,
    parts: ResultParts,
}

async fn serve_test(
    spec: &Iperf3ServerSpec,
    local: SocketAddr,
    sock: TcpStream,
    peer: SocketAddr,
    handoff: Handoff,
    cancel: CancellationToken,
) -> TestResult {
    let started_unix_ms = unix_ms_now();
    let t0 = Instant::now();
    let mut served = Served {
        params: None,
        parts: ResultParts {
            control_local: sock.local_addr().map(addr_text).unwrap_or_default(),
            control_remote: addr_text(peer),
            ..ResultParts::default()
        },
    };
    let r = run_test(spec, local, sock, handoff, &cancel, &mut served).await;
    if let Err(e) = r {
        served.parts.error = Some(e.to_string());
        if matches!(e, Iperf3Error::Cancelled | Iperf3Error::Terminated(_)) {
            served.parts.end = Some(EndReason::Interrupted);
        }
    }
    let p = served.params.unwrap_or_else(|| Params::new(Protocol::Tcp));
    build_result(
        TestKind::Iperf3Server,
        &p,
        vec![addr_text(local)],
        spec.status_interval,
        started_unix_ms,
        t0.elapsed().as_nanos() as u64,
        served.parts,
    )
}

/// A UDP socket bound to the test port, sharing it with the stream sockets.
fn udp_listener(local: SocketAddr) -> std::io::Result<UdpSocket> {
    let s = Socket::new(Domain::for_address(local), Type::DGRAM.cloexec(), None)?;
    s.set_reuse_address(true)?;
    if local.is_ipv6() {
        s.set_only_v6(!local.ip().is_unspecified())?;
    }
    s.bind(&local.into())?;
    s.set_nonblocking(true)?;
    UdpSocket::from_std(s.into())
}

async fn run_test(
    spec: &Iperf3ServerSpec,
    local: SocketAddr,
    sock: TcpStream,
    mut handoff: Handoff,
    cancel: &CancellationToken,
    served: &mut Served,
) -> Result<(), Iperf3Error> {
    let mut sock = sock;
    let _ = sock.set_nodelay(true);
    let client_ip = sock.peer_addr().map(|a| crate::socket::unmapped_ip(a.ip())).ok();
    let mut cookie = [0u8; COOKIE_LEN];
    tokio::time::timeout(spec.timeout, sock.read_exact(&mut cookie))
        .await
        .map_err(|_| Iperf3Error::Timeout("the cookie"))?
        .map_err(io("reading the cookie"))?;
    let mut ctl = Control::new(sock);
    served.parts.cookie = cookie_text(&cookie);
    ctl.send_state(State::ParamExchange, "PARAM_EXCHANGE").await?;
    let body = match ctl
        .read_within(
            Expect::Json { max: MAX_PARAMS_LEN },
            "the parameters",
            spec.timeout,
        )
        .await
    {
        Ok(Message::Json(b)) => b,
        Ok(other) => return Err(Iperf3Error::Protocol(format!("expected parameters, got {other}"))),
        Err(Iperf3Error::Frame(e)) => {
            let _ = ctl
                .send(&encode_server_error(errors::RECV_PARAMS, 0), "SERVER_ERROR")
                .await;
            return Err(Iperf3Error::Frame(e));
        }
        Err(e) => return Err(e),
    };
    let p = match Params::from_json(&body) {
        Ok(p) => p,
        Err(e) => {
            let _ = ctl.send(&encode_server_error(e.code, 0), "SERVER_ERROR").await;
            return Err(Iperf3Error::Protocol(format!("refused the parameters: {e}")));
        }
    };
    served.params = Some(p.clone());
    let wanted = Duration::from_secs(u64::from(p.time) + u64::from(p.omit));
    if wanted > spec.max_duration {
        // IEMAXSERVERTESTDURATIONEXCEEDED (3.20+ servers send it too).
        let _ = ctl.send(&encode_server_error(37, 0), "SERVER_ERROR").await;
        return Err(Iperf3Error::Protocol(format!(
            "refused a {} s test (the server allows {} s)",
            wanted.as_secs(),
            spec.max_duration.as_secs()
        )));
    }
    let udp_listen = match p.protocol {
        Protocol::Udp => Some(udp_listener(local).map_err(io("binding the UDP port"))?),
        Protocol::Tcp => None,
    };
    handoff.wanted.store(p.protocol == Protocol::Tcp, Relaxed);
    ctl.send_state(State::CreateStreams, "CREATE_STREAMS").await?;

    let n = p.stream_count();
    let mut sockets = Vec::with_capacity(n);
    let mut udp_listen = udp_listen;
    let creation = async {
        for i in 0..n {
            let sock = match &mut udp_listen {
                None => loop {
                    let mut s = tokio::time::timeout(spec.timeout, handoff.rx.recv())
                        .await
                        .map_err(|_| Iperf3Error::Timeout("the data connections"))?
                        .ok_or(Iperf3Error::Cancelled)?;
                    let mut got = [0u8; COOKIE_LEN];
                    let read = tokio::time::timeout(spec.timeout, s.read_exact(&mut got)).await;
                    if matches!(read, Ok(Ok(_))) && cookie_matches(&cookie, &got) {
                        let _ = apply_params(&SockRef::from(&s), &p, &s.peer_addr().unwrap_or(local));
                        if let Some(cc) = &p.congestion {
                            // iperf3 only warns when the algorithm is missing.
                            let _ = SockRef::from(&s).set_tcp_congestion(cc.as_bytes());
                        }
                        break DataSocket::Tcp(s);
                    }
                    tokio::spawn(refuse(s));
                },
                Some(listen) => {
                    let mut buf = [0u8; 64];
                    let from = loop {
                        let (len, from) = tokio::time::timeout(spec.timeout, listen.recv_from(&mut buf))
                            .await
                            .map_err(|_| Iperf3Error::Timeout("the UDP streams"))?
                            .map_err(io("UDP stream hello"))?;
                        // Only the control connection's host may open a UDP
                        // stream: a hello with a forged source must not turn
                        // the server into a flood aimed at someone else.
                        if len == 4 && client_ip == Some(crate::socket::unmapped_ip(from.ip())) {
                            break from;
                        }
                    };
                    // That socket becomes the stream's; a fresh one takes
                    // the next hello.
                    let fresh = udp_listener(local).map_err(io("binding the UDP port"))?;
                    let stream = std::mem::replace(listen, fresh);
                    stream
                        .connect(from)
                        .await
                        .map_err(io("connecting the UDP stream"))?;
                    let _ = apply_params(&SockRef::from(&stream), &p, &from);
                    stream.send(&udp::REPLY).await.map_err(io("UDP stream reply"))?;
                    DataSocket::Udp(stream)
                }
            };
            let client_sends = client_sends_on(i, p.parallel as usize, p.reverse, p.bidirectional);
            served
                .parts
                .streams
                .push(StreamState::new(stream_id(i), !client_sends, &sock));
            sockets.push(sock);
        }
        Ok::<(), Iperf3Error>(())
    };
    let created = tokio::select! {
        r = creation => r,
        m = ctl.read(Expect::State, "stream creation") => Err(match m {
            Ok(Message::State(State::ClientTerminate)) => Iperf3Error::Terminated("client"),
            Ok(other) => Iperf3Error::Protocol(format!("unexpected {other} during stream creation")),
            Err(e) => e,
        }),
        _ = cancel.cancelled() => Err(Iperf3Error::Cancelled),
    };
    handoff.wanted.store(false, Relaxed);
    while let Ok(s) = handoff.rx.try_recv() {
        tokio::spawn(refuse(s));
    }
    drop(udp_listen);
    if let Err(e) = created {
        if matches!(e, Iperf3Error::Timeout(_)) {
            let _ = ctl
                .send(&encode_server_error(errors::STREAM_ACCEPT, 0), "SERVER_ERROR")
                .await;
        }
        return Err(e);
    }
    served.parts.congestion_used = sockets.iter().find_map(|s| match s {
        DataSocket::Tcp(t) => SockRef::from(t)
            .tcp_congestion()
            .ok()
            .map(|c| String::from_utf8_lossy(&c).trim_end_matches('\0').to_owned()),
        DataSocket::Udp(_) | DataSocket::Gone => None,
    });
    ctl.send(
        &[State::TestStart.byte(), State::TestRunning.byte()],
        "TEST_START",
    )
    .await?;

    // The client ends the test; the byte and block limits bind the
    // server's senders too (`-R`, `--bidir`), as iperf3's server stops
    // sending at `-n`/`-k` (it used to send on until TEST_END).
    let budget = Arc::new(Budget::new(p.num, p.blockcount, u64::from(p.len)));
    let mut phase = DataPhase::start(&p, &served.parts.streams, sockets, budget, spec.max_records, true);
    let omit = Duration::from_secs(u64::from(p.omit));
    let mut ticker = phase.ticker(spec.status_interval);
    let omit_end = phase.at(omit);
    // iperf3's safety timer: time + omit + 40 s; untimed tests get the cap.
    let safety = if p.time > 0 {
        wanted + Duration::from_secs(40)
    } else {
        spec.max_duration
    };
    let safety_end = phase.at(safety);
    tokio::pin!(omit_end, safety_end);
    let mut omit_done = omit.is_zero();
    let outcome: Result<(), Iperf3Error> = loop {
        tokio::select! {
            biased;
            _ = cancel.cancelled() => {
                let _ = ctl.send_state(State::ServerTerminate, "SERVER_TERMINATE").await;
                break Err(Iperf3Error::Cancelled);
            }
            m = ctl.read(Expect::State, "the running test") => break match m {
                Ok(Message::State(State::TestEnd)) => Ok(()),
                Ok(Message::State(State::ClientTerminate)) => Err(Iperf3Error::Terminated("client")),
                Ok(other) => Err(Iperf3Error::Protocol(format!("unexpected {other} while the test runs"))),
                Err(e) => Err(e),
            },
            _ = &mut omit_end, if !omit_done => {
                omit_done = true;
                phase.meter.end_omit();
            }
            _ = &mut safety_end => {
                break Err(Iperf3Error::Timeout("TEST_END (the test ran past its length plus 40 s)"));
            }
            _ = ticker.tick() => {
                let iv = phase.meter.sample();
                served.parts.intervals.push(iv);
            }
        }
    };
    phase.stop.cancel();
    let held = phase.join_senders().await;
    if outcome.is_ok() {
        // The client stopped sending before TEST_END: take in what is
        // still on its way so both ends count the same bytes.
        phase.settle();
        wait_quiet(
            phase.meter.streams(),
            Duration::from_millis(50),
            Duration::from_secs(2),
        )
        .await;
    }
    let f = phase.figures();
    let parts = &mut served.parts;
    parts.intervals.push(f.last);
    (parts.finals, parts.errors_at_end, parts.cpu) = (f.finals, f.errors, f.cpu);
    (parts.iperf3_intervals, parts.intervals_omitted) = (f.intervals, f.intervals_omitted);
    phase.close().await;
    drop(held);
    outcome?;

    ctl.send_state(State::ExchangeResults, "EXCHANGE_RESULTS").await?;
    let body = match ctl
        .read_within(
            Expect::Json { max: MAX_RESULTS_LEN },
            "the client's results",
            spec.timeout,
        )
        .await?
    {
        Message::Json(b) => b,
        other => return Err(Iperf3Error::Protocol(format!("expected results, got {other}"))),
    };
    let theirs = Results::from_json(&body).map_err(|e| Iperf3Error::Protocol(e.to_string()))?;
    let mut mine = local_results(
        &p,
        &served.parts.streams,
        &served.parts.finals,
        served.parts.cpu,
        served.parts.congestion_used.clone(),
    );
    // A sending stream reports the receiver's jitter and loss, as iperf3 does.
    for s in &mut mine.streams {
        let sending = served
            .parts
            .streams
            .iter()
            .any(|st| i64::from(st.id) == s.id && st.sender);
        if sending {
            if let Some(t) = theirs.stream(s.id) {
                s.jitter = t.jitter;
                s.errors = t.errors;
            }
        }
    }
    if p.get_server_output {
        let text = server_text(&p, &served.parts);
        served.parts.server_output_text = Some(text.clone());
        mine.server_output_text = Some(text);
    }
    served.parts.peer = Some(theirs);
    ctl.send(&encode_json(&mine.to_json()), "sending results").await?;
    ctl.send_state(State::DisplayResults, "DISPLAY_RESULTS").await?;
    handoff.finishing.store(true, Relaxed);
    // IPERF_DONE or a close ends it; either is fine.
    let _ = ctl.read_within(Expect::State, "IPERF_DONE", spec.timeout).await;
    ctl.close_gracefully(Duration::from_secs(1)).await;
    Ok(())
}

/// Waits until no receiving stream's count moved for `quiet` (at most `limit`).
async fn wait_quiet(streams: &[Arc<StreamState>], quiet: Duration, limit: Duration) {
    let total = || {
        streams
            .iter()
            .filter(|s| !s.sender)
            .map(|s| s.bytes.load(Relaxed))
            .sum::<u64>()
    };
    if streams.iter().all(|s| s.sender) {
        return;
    }
    let deadline = Instant::now() + limit;
    let mut last = total();
    let mut since = Instant::now();
    while Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
        let now = total();
        if now != last {
            last = now;
            since = Instant::now();
        } else if since.elapsed() >= quiet {
            break;
        }
    }
}

/// The text a server returns for `--get-server-output`.
fn server_text(p: &Params, parts: &ResultParts) -> String {
    let mut s = format!(
        "goodput {} iperf3 server: {} test from {}, cookie {}\n",
        env!("CARGO_PKG_VERSION"),
        match p.protocol {
            Protocol::Tcp => "TCP",
            Protocol::Udp => "UDP",
        },
        parts.control_remote,
        parts.cookie
    );
    for (st, f) in parts.streams.iter().zip(&parts.finals) {
        let rate = if f.seconds > 0.0 {
            f.bytes as f64 * 8.0 / f.seconds
        } else {
            0.0
        };
        s.push_str(&format!(
            "[{:>3}] {} {} -> {}: {} bytes in {:.3} s = {:.2} Mbit/s{}\n",
            st.id,
            if st.sender { "sent" } else { "received" },
            addr_text(st.local),
            addr_text(st.remote),
            f.bytes,
            f.seconds,
            rate / 1e6,
            match f.udp {
                Some(u) if !st.sender => format!(
                    ", jitter {:.3} ms, lost {}/{} datagrams",
                    u.jitter_ms, u.lost, u.packets
                ),
                _ => String::new(),
            }
        ));
    }
    s
}
