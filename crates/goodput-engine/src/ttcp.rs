//! TTCP: memory-to-memory transfer with no protocol on the wire, so either
//! end can be anything (a discard service, `nc`, `socat`, a classic ttcp).
//! One blocking socket on one thread, as ttcp itself: a single stream needs
//! no runtime, and blocking calls are the cheapest per byte. Socket timeouts
//! of 200 ms let the loop see a cancel.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use goodput_core::result::{
    ConnectionRecord, Detail, EndReason, Outcome, SummaryBuilder, TcpSettings, TestKind, TestResult,
    TtcpDetail, WireProtocol, SCHEMA_VERSION,
};
use goodput_core::ttcp::{fill_pattern, MIN_UDP_BUFLEN, UDP_END_MARKERS, UDP_MARKER_LEN};
use socket2::{Domain, Protocol, SockRef, Socket, Type};
use tokio_util::sync::CancellationToken;

use crate::socket::{addr_text, unmapped_ip};
use crate::EngineError;

/// How often a blocked call comes back to look at the cancel.
const POLL: Duration = Duration::from_millis(200);

/// Which end this is.
#[derive(Debug, Clone, Copy)]
pub enum TtcpRole {
    /// `-t`: connect (or send) to this address.
    Transmit(SocketAddr),
    /// `-r`: listen (or bind) on this address.
    Receive(SocketAddr),
}

/// A TTCP run.
#[derive(Debug, Clone)]
pub struct TtcpSpec {
    /// Transmit or receive.
    pub role: TtcpRole,
    /// UDP instead of TCP.
    pub udp: bool,
    /// Bytes per write / read call.
    pub buflen: usize,
    /// Buffers to send (transmitter).
    pub nbuf: u64,
    /// TCP_NODELAY.
    pub nodelay: bool,
    /// SO_SNDBUF (transmitter) / SO_RCVBUF (receiver).
    pub sockbuf: Option<u32>,
    /// Pattern from memory; when false the transmitter sends standard input
    /// and the receiver writes what arrives to standard output.
    pub sinkmode: bool,
    /// UDP receiver: a transfer with nothing arriving for this long ends
    /// (its end markers were lost).
    pub udp_idle: Duration,
    /// How long a TCP connect may take.
    pub connect_timeout: Duration,
}

/// Progress lines ttcp prints before its report (`socket`, `connect`,
/// `accept from …`); `on_line` gets each.
pub type Lines<'a> = &'a mut (dyn FnMut(String) + Send);

struct Meter {
    bytes: u64,
    calls: u64,
    sleeps: u64,
    datagrams: u64,
    start: Option<(Instant, (f64, f64))>,
    end: Option<(Instant, (f64, f64))>,
}

impl Meter {
    fn new() -> Self {
        Self {
            bytes: 0,
            calls: 0,
            sleeps: 0,
            datagrams: 0,
            start: None,
            end: None,
        }
    }
    fn start(&mut self) {
        self.start = Some((Instant::now(), thread_cpu()));
    }
    fn stop(&mut self) {
        self.end = Some((Instant::now(), thread_cpu()));
    }
    fn spans(&self) -> (f64, f64, f64) {
        match (self.start, self.end) {
            (Some((t0, c0)), Some((t1, c1))) => (
                t1.duration_since(t0).as_secs_f64(),
                (c1.0 - c0.0).max(0.0),
                (c1.1 - c0.1).max(0.0),
            ),
            _ => (0.0, 0.0, 0.0),
        }
    }
}

/// User and system CPU seconds of the calling thread.
fn thread_cpu() -> (f64, f64) {
    // SAFETY: getrusage fills one plain struct.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_THREAD, &mut ru);
        ru
    };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    (secs(ru.ru_utime), secs(ru.ru_stime))
}

fn timed_out(e: &io::Error) -> bool {
    matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut)
}

/// Runs the transfer on the calling thread (call it from a blocking task)
/// and returns the result document.
pub fn run_ttcp(
    spec: &TtcpSpec,
    data: DataStreams,
    lines: Lines<'_>,
    cancel: &CancellationToken,
) -> Result<TestResult, EngineError> {
    if spec.buflen == 0 || (spec.udp && spec.buflen < MIN_UDP_BUFLEN) {
        return Err(EngineError::Config(format!(
            "the buffer length must be at least {} bytes",
            if spec.udp { MIN_UDP_BUFLEN } else { 1 }
        )));
    }
    let started_unix_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let t0 = Instant::now();
    let mut run = Run {
        spec,
        m: Meter::new(),
        local: String::new(),
        peer: String::new(),
        lines,
        cancel,
        data,
    };
    let outcome = match (spec.role, spec.udp) {
        (TtcpRole::Transmit(to), false) => tcp_transmit(&mut run, to),
        (TtcpRole::Receive(at), false) => tcp_receive(&mut run, at),
        (TtcpRole::Transmit(to), true) => udp_transmit(&mut run, to),
        (TtcpRole::Receive(at), true) => udp_receive(&mut run, at),
    };
    let Run {
        mut m, local, peer, ..
    } = run;
    if m.end.is_none() && m.start.is_some() {
        m.stop();
    }
    let (real_s, user_s, system_s) = m.spans();
    let transmit = matches!(spec.role, TtcpRole::Transmit(_));
    let interrupted = cancel.is_cancelled();
    let (outcome, error) = match outcome {
        Ok(()) => (Outcome::Succeeded, None),
        Err(Stop::Cancelled) => (
            Outcome::Aborted {
                reason: "interrupted".into(),
            },
            Some("interrupted".to_owned()),
        ),
        Err(Stop::Io(during, e)) => {
            let text = format!("{during}: {e}");
            (crate::socket::network_outcome(during, &e), Some(text))
        }
        Err(Stop::Setup(e)) => return Err(e),
    };
    let elapsed_ns = (real_s * 1e9) as u64;
    let record = ConnectionRecord {
        index: 0,
        connection_id: String::new(),
        local_address: local,
        remote_address: peer.clone(),
        start_s: 0.0,
        time_slice_s: t0.elapsed().as_secs_f64(),
        elapsed_ns,
        pattern: None,
        transfer_bytes: if transmit {
            spec.nbuf * spec.buflen as u64
        } else {
            m.bytes
        },
        buffer_bytes: spec.buflen as u64,
        rate_limit_bytes_per_second: 0,
        sent_bytes: if transmit { m.bytes } else { 0 },
        received_bytes: if transmit { 0 } else { m.bytes },
        outcome,
        peer: None,
        shutdown: None,
        quic: None,
        tcp_info: None,
        media: None,
        timed: None,
    };
    let mut summary = SummaryBuilder::default();
    summary.add(&record);
    Ok(TestResult {
        assertions: Vec::new(),
        spec: None,
        error: None,
        schema_version: SCHEMA_VERSION,
        tool: crate::tool_info(),
        kind: if transmit {
            TestKind::TtcpTransmit
        } else {
            TestKind::TtcpReceive
        },
        started_unix_ms,
        settings: TcpSettings {
            connections: Some(1),
            ..TcpSettings::bare(
                WireProtocol::Raw,
                vec![match spec.role {
                    TtcpRole::Transmit(a) | TtcpRole::Receive(a) => a.to_string(),
                }],
                0,
            )
        },
        intervals: Vec::new(),
        intervals_omitted: 0,
        connections: vec![record],
        summary: summary.finish(elapsed_ns),
        connections_omitted: 0,
        end: if interrupted {
            EndReason::Interrupted
        } else {
            EndReason::Completed
        },
        detail: Detail::Ttcp(Box::new(TtcpDetail {
            transmit,
            udp: spec.udp,
            buflen: spec.buflen as u64,
            nbuf: spec.nbuf,
            bytes: m.bytes,
            calls: m.calls,
            sleeps: m.sleeps,
            datagrams: m.datagrams,
            real_s,
            user_s,
            system_s,
            sinkmode: spec.sinkmode,
            peer,
            error,
        })),
    })
}

/// Where the data comes from and goes to without `sinkmode`: the command
/// line gives standard input and output; the engine never opens either
/// itself.
pub struct DataStreams {
    /// What a transmitter sends.
    pub input: Box<dyn Read + Send>,
    /// Where a receiver writes what arrives.
    pub output: Box<dyn Write + Send>,
}

impl DataStreams {
    /// No data streams (for `sinkmode`, where none is read or written).
    pub fn none() -> Self {
        Self {
            input: Box::new(io::empty()),
            output: Box::new(io::sink()),
        }
    }
}

/// One transfer's settings, meter, addresses and outputs, shared by the
/// four ways of running it.
struct Run<'a, 'l> {
    spec: &'a TtcpSpec,
    m: Meter,
    local: String,
    peer: String,
    lines: Lines<'l>,
    cancel: &'a CancellationToken,
    data: DataStreams,
}

enum Stop {
    Cancelled,
    Io(&'static str, io::Error),
    Setup(EngineError),
}

fn io_stop(during: &'static str) -> impl FnOnce(io::Error) -> Stop {
    move |e| Stop::Io(during, e)
}

fn source_buffer(spec: &TtcpSpec) -> Vec<u8> {
    let mut buf = vec![0u8; spec.buflen];
    fill_pattern(&mut buf);
    buf
}

/// Fills `buf` from the data input (non-sink mode); returns the bytes read.
fn read_input(input: &mut dyn Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match input.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

fn tcp_transmit(r: &mut Run<'_, '_>, to: SocketAddr) -> Result<(), Stop> {
    let Run {
        spec,
        m,
        local,
        peer,
        lines,
        cancel,
        data,
    } = r;
    let s =
        Socket::new(Domain::for_address(to), Type::STREAM, Some(Protocol::TCP)).map_err(io_stop("socket"))?;
    lines("socket".into());
    if spec.nodelay {
        s.set_nodelay(true).map_err(io_stop("setsockopt"))?;
        lines("nodelay".into());
    }
    if let Some(b) = spec.sockbuf {
        s.set_send_buffer_size(b as usize)
            .map_err(io_stop("setsockopt"))?;
        lines("sndbuf".into());
    }
    s.connect_timeout(&to.into(), spec.connect_timeout)
        .map_err(io_stop("connect"))?;
    lines("connect".into());
    *peer = to.to_string();
    *local = s
        .local_addr()
        .ok()
        .and_then(|a| a.as_socket())
        .map(|a| a.to_string())
        .unwrap_or_default();
    s.set_write_timeout(Some(POLL)).map_err(io_stop("setsockopt"))?;
    let mut sock: TcpStream = s.into();
    let mut buf = source_buffer(spec);
    m.start();
    let mut left = spec.nbuf;
    while left > 0 {
        let len = if spec.sinkmode {
            buf.len()
        } else {
            let n = read_input(&mut *data.input, &mut buf).map_err(io_stop("read stdin"))?;
            if n == 0 {
                break;
            }
            n
        };
        let mut off = 0;
        while off < len {
            if cancel.is_cancelled() {
                return Err(Stop::Cancelled);
            }
            m.calls += 1;
            match sock.write(&buf[off..len]) {
                Ok(n) => {
                    off += n;
                    m.bytes += n as u64;
                }
                Err(e) if timed_out(&e) || e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(Stop::Io("send", e)),
            }
        }
        if spec.sinkmode {
            left -= 1;
        }
    }
    m.stop();
    let _ = sock.shutdown(std::net::Shutdown::Write);
    Ok(())
}

fn tcp_receive(r: &mut Run<'_, '_>, at: SocketAddr) -> Result<(), Stop> {
    let Run {
        spec,
        m,
        local,
        peer,
        lines,
        cancel,
        data,
    } = r;
    let s = Socket::new(Domain::for_address(at), Type::STREAM, Some(Protocol::TCP))
        .map_err(|e| Stop::Setup(EngineError::Listen { addr: at, source: e }))?;
    lines("socket".into());
    let _ = s.set_reuse_address(true);
    if at.is_ipv6() && at.ip().is_unspecified() {
        let _ = s.set_only_v6(false);
    }
    if let Some(b) = spec.sockbuf {
        s.set_recv_buffer_size(b as usize)
            .map_err(io_stop("setsockopt"))?;
        lines("rcvbuf".into());
    }
    s.bind(&at.into())
        .and_then(|()| s.listen(1))
        .map_err(|e| Stop::Setup(EngineError::Listen { addr: at, source: e }))?;
    let listener: TcpListener = s.into();
    listener.set_nonblocking(true).map_err(io_stop("listen"))?;
    *local = listener.local_addr().map(|a| a.to_string()).unwrap_or_default();
    lines(format!("listening on {local}"));
    let (mut sock, from) = loop {
        if cancel.is_cancelled() {
            return Err(Stop::Cancelled);
        }
        match listener.accept() {
            Ok(a) => break a,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::Interrupted => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => return Err(Stop::Io("accept", e)),
        }
    };
    drop(listener);
    sock.set_nonblocking(false).map_err(io_stop("accept"))?;
    sock.set_read_timeout(Some(POLL)).map_err(io_stop("setsockopt"))?;
    *peer = addr_text(from);
    *local = sock.local_addr().map(addr_text).unwrap_or_default();
    lines(format!("accept from {}", unmapped_ip(from.ip())));
    let mut buf = vec![0u8; spec.buflen];
    let mut out = (!spec.sinkmode).then_some(&mut data.output);
    m.start();
    loop {
        if cancel.is_cancelled() {
            return Err(Stop::Cancelled);
        }
        m.calls += 1;
        match sock.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                m.bytes += n as u64;
                if let Some(o) = out.as_mut() {
                    o.write_all(&buf[..n]).map_err(io_stop("write stdout"))?;
                }
            }
            Err(e) if timed_out(&e) || e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Stop::Io("recv", e)),
        }
    }
    m.stop();
    if let Some(o) = out {
        o.flush().map_err(io_stop("write stdout"))?;
    }
    Ok(())
}

fn udp_socket(bind: SocketAddr) -> io::Result<UdpSocket> {
    let s = Socket::new(Domain::for_address(bind), Type::DGRAM, Some(Protocol::UDP))?;
    if bind.is_ipv6() && bind.ip().is_unspecified() {
        let _ = s.set_only_v6(false);
    }
    s.bind(&bind.into())?;
    Ok(s.into())
}

/// Sends one datagram, sleeping and retrying while the kernel has no
/// buffer (ENOBUFS), as ttcp does.
fn send_datagram(
    sock: &UdpSocket,
    buf: &[u8],
    m: &mut Meter,
    cancel: &CancellationToken,
) -> Result<(), Stop> {
    loop {
        if cancel.is_cancelled() {
            return Err(Stop::Cancelled);
        }
        m.calls += 1;
        match sock.send(buf) {
            Ok(_) => return Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                m.sleeps += 1;
                std::thread::sleep(Duration::from_millis(18));
            }
            Err(e) if timed_out(&e) || e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Stop::Io("send", e)),
        }
    }
}

fn udp_transmit(r: &mut Run<'_, '_>, to: SocketAddr) -> Result<(), Stop> {
    let Run {
        spec,
        m,
        local,
        peer,
        lines,
        cancel,
        data,
    } = r;
    let any: SocketAddr = if to.is_ipv6() {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    } else {
        (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
    };
    let sock = udp_socket(any).map_err(io_stop("socket"))?;
    lines("socket".into());
    if let Some(b) = spec.sockbuf {
        SockRef::from(&sock)
            .set_send_buffer_size(b as usize)
            .map_err(io_stop("setsockopt"))?;
        lines("sndbuf".into());
    }
    sock.connect(to).map_err(io_stop("connect"))?;
    sock.set_write_timeout(Some(POLL))
        .map_err(io_stop("setsockopt"))?;
    *peer = to.to_string();
    *local = sock.local_addr().map(|a| a.to_string()).unwrap_or_default();
    let mut buf = source_buffer(spec);
    m.start();
    let marker_calls = m.calls;
    send_datagram(&sock, &buf[..UDP_MARKER_LEN], m, cancel)?;
    // The start marker is not a data call.
    m.calls = marker_calls;
    let mut left = spec.nbuf;
    while left > 0 {
        let len = if spec.sinkmode {
            buf.len()
        } else {
            let n = read_input(&mut *data.input, &mut buf).map_err(io_stop("read stdin"))?;
            if n <= UDP_MARKER_LEN {
                // Shorter would read as a marker: the rest is not sent.
                break;
            }
            n
        };
        send_datagram(&sock, &buf[..len], m, cancel)?;
        m.bytes += len as u64;
        m.datagrams += 1;
        if spec.sinkmode {
            left -= 1;
        }
    }
    m.stop();
    for _ in 0..UDP_END_MARKERS {
        let mut scratch = Meter::new();
        let _ = send_datagram(&sock, &buf[..UDP_MARKER_LEN], &mut scratch, cancel);
    }
    Ok(())
}

fn udp_receive(r: &mut Run<'_, '_>, at: SocketAddr) -> Result<(), Stop> {
    let Run {
        spec,
        m,
        local,
        peer,
        lines,
        cancel,
        data,
    } = r;
    let sock = udp_socket(at).map_err(|e| Stop::Setup(EngineError::Listen { addr: at, source: e }))?;
    lines("socket".into());
    if let Some(b) = spec.sockbuf {
        SockRef::from(&sock)
            .set_recv_buffer_size(b as usize)
            .map_err(io_stop("setsockopt"))?;
        lines("rcvbuf".into());
    }
    sock.set_read_timeout(Some(POLL)).map_err(io_stop("setsockopt"))?;
    *local = sock.local_addr().map(|a| a.to_string()).unwrap_or_default();
    lines(format!("listening on {local}"));
    // Room for the largest datagram, so a longer one is counted whole.
    let mut buf = vec![0u8; spec.buflen.max(65_536)];
    let mut out = (!spec.sinkmode).then_some(&mut data.output);
    let mut going = false;
    let mut last = Instant::now();
    loop {
        if cancel.is_cancelled() {
            return Err(Stop::Cancelled);
        }
        if going && last.elapsed() >= spec.udp_idle {
            lines(format!(
                "nothing for {} ms: the end marker was lost, ending",
                spec.udp_idle.as_millis()
            ));
            break;
        }
        let calls = m.calls;
        m.calls += 1;
        match sock.recv_from(&mut buf) {
            Ok((n, from)) if n <= UDP_MARKER_LEN => {
                m.calls = calls;
                if going {
                    break;
                }
                going = true;
                *peer = addr_text(from);
                lines(format!("start marker from {}", unmapped_ip(from.ip())));
                m.start();
                last = Instant::now();
            }
            Ok((n, from)) => {
                if !going {
                    // No start marker (a plain sender): start at the first datagram.
                    going = true;
                    *peer = addr_text(from);
                    m.start();
                }
                m.bytes += n as u64;
                m.datagrams += 1;
                last = Instant::now();
                m.end = Some((last, thread_cpu()));
                if let Some(o) = out.as_mut() {
                    o.write_all(&buf[..n]).map_err(io_stop("write stdout"))?;
                }
            }
            Err(e) if timed_out(&e) || e.kind() == io::ErrorKind::Interrupted => {
                m.calls = calls;
            }
            Err(e) => return Err(Stop::Io("recv", e)),
        }
    }
    if m.end.is_none() {
        m.stop();
    }
    if let Some(o) = out {
        o.flush().map_err(io_stop("write stdout"))?;
    }
    Ok(())
}
