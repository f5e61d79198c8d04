//! `goodput dns`: queries over UDP, TCP or TLS to a server or the system's
//! resolver, each timed from its send to its reply.
//!
//! What comes back is read with bounds that do not depend on the peer: a
//! UDP datagram lands in one 64 KiB buffer owned by the run, a TCP or TLS
//! message is at most its two-byte length (65,535 bytes) into the same
//! buffer, and a try reads at most [`MAX_MESSAGES_PER_TRY`] messages over
//! TCP or TLS and nothing past its timeout. Whatever is not our reply is
//! counted (malformed, unsolicited, oversized) and ignored.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use goodput_core::dns::{
    self, DnsDetail, DnsQuery, DnsTimes, DnsTransport, Expectation, QueryName as Name,
    QueryType as RecordType, Reply, ReplyError,
};
use goodput_core::result::{Detail, EndReason, TestResult};
use goodput_core::spec::{DnsSpec, Family, TestSpec};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};
use tokio_util::sync::CancellationToken;

use super::{empty, resolve, Failure};
use crate::Observer;

/// Messages one TCP or TLS try reads before it gives up on its reply.
const MAX_MESSAGES_PER_TRY: usize = 64;

/// The counts of what came back and was not our reply.
#[derive(Default)]
struct Ignored {
    malformed: u64,
    unsolicited: u64,
    truncated: u64,
    oversized: u64,
}

/// What one try got.
enum Try {
    Answer {
        reply: Reply,
        time: Duration,
        connect: Option<Duration>,
        over: DnsTransport,
    },
    /// No reply: the reason, in words.
    Nothing(String),
}

/// Everything a query needs, fixed for the run.
struct Asker {
    server: SocketAddr,
    transport: DnsTransport,
    name: Name,
    record: RecordType,
    recursion: bool,
    timeout: Duration,
    tls: Option<(Arc<rustls::ClientConfig>, rustls::pki_types::ServerName<'static>)>,
    buf: Vec<u8>,
    ignored: Ignored,
}

pub(super) async fn run(
    document: &TestSpec,
    spec: &DnsSpec,
    observer: &mut dyn Observer,
    cancel: CancellationToken,
    max_records: usize,
) -> Result<TestResult, Failure> {
    let name = dns::query_name(spec.name.trim()).map_err(|e| Failure::setup(format!("`name`: {e}")))?;
    let record = dns::record_type(&spec.record).map_err(|e| Failure::setup(format!("`record`: {e}")))?;
    let expectation = Expectation::new(&spec.expect, spec.expect_pattern.as_deref())
        .map_err(|e| Failure::setup(format!("`expect_pattern`: {e}")))?;
    let port = spec.port();
    let (server, system_resolver, host) = match &spec.server {
        Some(s) => {
            let (v4, v6) = (spec.family == Family::Ipv4, spec.family == Family::Ipv6);
            let found = resolve(s, port, v4, v6)
                .await
                .map_err(|e| Failure::setup(format!("`server`: {e}")))?;
            (
                found[0],
                false,
                super::split_target(s, port)
                    .map(|(h, _)| h)
                    .unwrap_or_else(|_| s.clone()),
            )
        }
        None => {
            let ip = system_resolver_address()?;
            (SocketAddr::new(ip, port), true, ip.to_string())
        }
    };
    let tls = match spec.transport {
        DnsTransport::Tls => {
            let trust = crate::tls::Trust::of(spec.ca.as_deref(), false);
            let config =
                crate::tls::client_config(&trust).map_err(|e| Failure::setup(format!("`ca`: {e}")))?;
            let sni = crate::tls::name_for(&host, spec.tls_name.as_deref());
            let sni =
                crate::tls::server_name(&sni).map_err(|e| Failure::setup(format!("`tls_name`: {e}")))?;
            Some((config, sni))
        }
        DnsTransport::Udp | DnsTransport::Tcp => None,
    };
    observer.on_start(
        "goodput dns",
        &[
            (
                "Server".to_owned(),
                format!(
                    "{server} over {}{}",
                    spec.transport.name(),
                    if system_resolver {
                        " (the system's resolver, /etc/resolv.conf)"
                    } else {
                        ""
                    }
                ),
            ),
            ("Question".into(), format!("{name} {record}")),
            (
                "Pace".into(),
                format!(
                    "{} quer{}, one every {} ms, each try waits {} ms, at most {} retries",
                    spec.count,
                    if spec.count == 1 { "y" } else { "ies" },
                    spec.interval.0.as_millis(),
                    spec.timeout.0.as_millis(),
                    spec.retries
                ),
            ),
        ],
    );
    if expectation.is_set() {
        observer.on_notice(&format!("expecting {}", expectation.describe()));
    }
    let mut asker = Asker {
        server,
        transport: spec.transport,
        name: name.clone(),
        record,
        recursion: spec.recursion,
        timeout: spec.timeout.0,
        tls,
        buf: vec![0; dns::MAX_MESSAGE + 1],
        ignored: Ignored::default(),
    };
    let started_unix_ms = crate::tcp::unix_ms_now();
    let t0 = Instant::now();
    let mut log: Vec<DnsQuery> = Vec::new();
    let mut times: Vec<f64> = Vec::new();
    let (mut answered, mut lost, mut retries, mut mismatched) = (0u64, 0u64, 0u64, 0u64);
    let mut rcodes = std::collections::BTreeMap::<String, u64>::new();
    let mut last: Option<(String, u16, u32)> = None;
    let mut interrupted = false;
    for seq in 1..=spec.count {
        let start = t0
            + spec
                .interval
                .0
                .saturating_mul((seq - 1).min(u64::from(u32::MAX)) as u32);
        tokio::select! {
            _ = tokio::time::sleep_until(start.into()) => {}
            _ = cancel.cancelled() => { interrupted = true; break; }
        }
        let id: u16 = rand::random();
        let mut q = DnsQuery {
            seq,
            attempts: 0,
            transport: spec.transport,
            time_us: None,
            connect_us: None,
            rcode: None,
            answer_count: 0,
            answers: Vec::new(),
            matched: None,
            error: None,
        };
        let mut why = String::new();
        for attempt in 0..=spec.retries {
            q.attempts = attempt + 1;
            let got = tokio::select! {
                t = asker.ask(id) => t,
                _ = cancel.cancelled() => { interrupted = true; Try::Nothing("stopped".into()) }
            };
            match got {
                Try::Answer {
                    reply,
                    time,
                    connect,
                    over,
                } => {
                    q.time_us = Some(time.as_nanos() as f64 / 1e3);
                    q.connect_us = connect.map(|c| c.as_nanos() as f64 / 1e3);
                    q.transport = over;
                    q.rcode = Some(reply.rcode_name.clone());
                    q.answer_count = reply.answer_count;
                    if expectation.is_set() {
                        let met = expectation.met_by(&reply.answers);
                        q.matched = Some(met);
                        if !met {
                            mismatched += 1;
                            observer.on_notice(&format!(
                                "query {seq}: the answer ({}) does not hold {}",
                                answer_words(&reply),
                                expectation.describe()
                            ));
                        }
                    }
                    q.answers = reply.answers;
                    *rcodes.entry(reply.rcode_name.clone()).or_default() += 1;
                    last = Some((reply.rcode_name, reply.rcode, reply.answer_count));
                    break;
                }
                Try::Nothing(reason) => why = reason,
            }
            if interrupted {
                break;
            }
        }
        retries += u64::from(q.attempts.saturating_sub(1));
        match q.time_us {
            Some(t) => {
                answered += 1;
                times.push(t);
            }
            None => {
                lost += 1;
                let text = format!(
                    "no reply after {} {}: {why}",
                    q.attempts,
                    if q.attempts == 1 { "try" } else { "tries" }
                );
                observer.on_notice(&format!("query {seq}: {text}"));
                q.error = Some(text);
            }
        }
        if max_records == 0 || log.len() < max_records {
            log.push(q);
        }
        if interrupted {
            break;
        }
    }
    let queries = answered + lost;
    let ignored = asker.ignored;
    let detail = DnsDetail {
        name: name.to_string(),
        record: record.to_string(),
        transport: spec.transport,
        server: server.to_string(),
        system_resolver,
        expected: expectation.is_set().then(|| expectation.describe()),
        queries,
        answered,
        lost,
        retries,
        mismatched,
        rcodes,
        rcode: last.as_ref().map(|l| l.0.clone()),
        rcode_value: last.as_ref().map(|l| l.1),
        answer_count: last.as_ref().map(|l| l.2),
        resolution: DnsTimes::of(&times),
        malformed: ignored.malformed,
        unsolicited: ignored.unsolicited,
        truncated: ignored.truncated,
        oversized: ignored.oversized,
        query_log: log,
    };
    let mut result = empty(document, started_unix_ms, t0.elapsed().as_nanos() as u64);
    result.settings.addresses = vec![server.to_string()];
    // Each query is one exchange: a lost one failed by the network, an
    // answer not as expected by its data; the rest succeeded.
    result.summary.successful = answered - mismatched;
    result.summary.network_errors = lost;
    result.summary.data_errors = mismatched;
    if interrupted {
        result.end = EndReason::Interrupted;
    }
    result.detail = Detail::Dns(Box::new(detail));
    Ok(result)
}

/// The first nameserver of `/etc/resolv.conf`.
fn system_resolver_address() -> Result<IpAddr, Failure> {
    const PATH: &str = "/etc/resolv.conf";
    // resolv.conf is a small file; more than 64 KiB is not one.
    let bytes =
        std::fs::read(PATH).map_err(|e| Failure::setup(format!("cannot read {PATH}: {e}; give `server`")))?;
    if bytes.len() > 65_536 {
        return Err(Failure::setup(format!("{PATH} is over 64 KiB; give `server`")));
    }
    let (config, _) = resolv_conf::Config::parse_with_errors(&bytes);
    config
        .nameservers
        .into_iter()
        .next()
        .map(IpAddr::from)
        .ok_or_else(|| Failure::setup(format!("{PATH} names no nameserver; give `server`")))
}

fn answer_words(r: &Reply) -> String {
    match (r.rcode, r.answers.is_empty()) {
        (0, true) => "no records".into(),
        (0, false) => r.answers.join(", "),
        (_, true) => r.rcode_name.clone(),
        (_, false) => format!("{}: {}", r.rcode_name, r.answers.join(", ")),
    }
}

impl Asker {
    /// One try of query `id`, over the spec's transport (UDP falls back to
    /// TCP on a truncated reply, within the same try's time).
    async fn ask(&mut self, id: u16) -> Try {
        let query = match dns::query_message(id, &self.name, self.record, self.recursion) {
            Ok(q) => q,
            Err(e) => return Try::Nothing(e),
        };
        let deadline = tokio::time::Instant::now() + self.timeout;
        let outcome = tokio::time::timeout_at(deadline, async {
            match self.transport {
                DnsTransport::Udp => match self.udp(id, &query).await {
                    Ok((reply, _)) if reply.truncated => {
                        self.ignored.truncated += 1;
                        self.stream(id, &query, false)
                            .await
                            .map(|(r, t, c)| (r, t, Some(c), DnsTransport::Tcp))
                    }
                    Ok((reply, time)) => Ok((reply, time, None, DnsTransport::Udp)),
                    Err(e) => Err(e),
                },
                DnsTransport::Tcp => self
                    .stream(id, &query, false)
                    .await
                    .map(|(r, t, c)| (r, t, Some(c), DnsTransport::Tcp)),
                DnsTransport::Tls => self
                    .stream(id, &query, true)
                    .await
                    .map(|(r, t, c)| (r, t, Some(c), DnsTransport::Tls)),
            }
        })
        .await;
        match outcome {
            Ok(Ok((reply, time, connect, over))) => Try::Answer {
                reply,
                time,
                connect,
                over,
            },
            Ok(Err(e)) => Try::Nothing(e),
            Err(_) => Try::Nothing(format!("no reply within {} ms", self.timeout.as_millis())),
        }
    }

    /// A try over UDP: sends, then reads datagrams until our reply (the
    /// caller's timeout ends it).
    async fn udp(&mut self, id: u16, query: &[u8]) -> Result<(Reply, Duration), String> {
        let local: SocketAddr = match self.server {
            SocketAddr::V4(_) => ([0, 0, 0, 0], 0).into(),
            SocketAddr::V6(_) => (std::net::Ipv6Addr::UNSPECIFIED, 0).into(),
        };
        let socket = UdpSocket::bind(local)
            .await
            .map_err(|e| format!("cannot open a UDP socket: {e}"))?;
        socket
            .connect(self.server)
            .await
            .map_err(|e| format!("cannot address {}: {e}", self.server))?;
        let sent = Instant::now();
        socket
            .send(query)
            .await
            .map_err(|e| format!("cannot send to {}: {e}", self.server))?;
        loop {
            let n = socket
                .recv(&mut self.buf)
                .await
                .map_err(|e| format!("{} over UDP: {e}", self.server))?;
            let time = sent.elapsed();
            if n > usize::from(dns::EDNS_PAYLOAD) {
                self.ignored.oversized += 1;
                continue;
            }
            match dns::read_reply(&self.buf[..n], id, &self.name, self.record) {
                Ok(r) => return Ok((r, time)),
                Err(e) => self.count(&e),
            }
        }
    }

    /// A try over TCP or TLS: connects, sends the framed query, reads
    /// framed messages until our reply.
    async fn stream(
        &mut self,
        id: u16,
        query: &[u8],
        tls: bool,
    ) -> Result<(Reply, Duration, Duration), String> {
        let began = Instant::now();
        let tcp = TcpStream::connect(self.server)
            .await
            .map_err(|e| format!("cannot connect to {}: {e}", self.server))?;
        let _ = tcp.set_nodelay(true);
        if tls {
            let (config, sni) = self.tls.clone().ok_or("no TLS configuration")?;
            let stream = tokio_rustls::TlsConnector::from(config)
                .connect(sni, tcp)
                .await
                .map_err(|e| format!("TLS handshake with {}: {e}", self.server))?;
            let connect = began.elapsed();
            self.exchange(stream, id, query)
                .await
                .map(|(r, t)| (r, t, connect))
        } else {
            let connect = began.elapsed();
            self.exchange(tcp, id, query).await.map(|(r, t)| (r, t, connect))
        }
    }

    async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(
        &mut self,
        mut stream: S,
        id: u16,
        query: &[u8],
    ) -> Result<(Reply, Duration), String> {
        let mut framed = Vec::with_capacity(query.len() + 2);
        framed.extend_from_slice(&(query.len().min(dns::MAX_MESSAGE) as u16).to_be_bytes());
        framed.extend_from_slice(query);
        let sent = Instant::now();
        stream
            .write_all(&framed)
            .await
            .map_err(|e| format!("cannot send to {}: {e}", self.server))?;
        stream
            .flush()
            .await
            .map_err(|e| format!("cannot send to {}: {e}", self.server))?;
        for _ in 0..MAX_MESSAGES_PER_TRY {
            let mut len = [0u8; 2];
            stream
                .read_exact(&mut len)
                .await
                .map_err(|e| format!("{} closed the connection before a reply: {e}", self.server))?;
            // At most 65,535 bytes by the prefix's width: the buffer holds it.
            let n = usize::from(u16::from_be_bytes(len));
            let mut got = 0;
            while got < n {
                match stream.read(&mut self.buf[got..n]).await {
                    Ok(0) => {
                        self.ignored.malformed += 1;
                        return Err(format!(
                            "{} closed the connection after {got} of the {n} bytes its reply announced",
                            self.server
                        ));
                    }
                    Ok(k) => got += k,
                    Err(e) => return Err(format!("{}: {e}", self.server)),
                }
            }
            let time = sent.elapsed();
            match dns::read_reply(&self.buf[..n], id, &self.name, self.record) {
                Ok(r) => return Ok((r, time)),
                Err(e @ ReplyError::Malformed(_)) => {
                    // The stream may be out of step: this try is over.
                    self.count(&e);
                    return Err(format!("{}: {e}", self.server));
                }
                Err(e) => self.count(&e),
            }
        }
        Err(format!(
            "{} sent {MAX_MESSAGES_PER_TRY} messages and none was the reply",
            self.server
        ))
    }

    fn count(&mut self, e: &ReplyError) {
        match e {
            ReplyError::Malformed(_) => self.ignored.malformed += 1,
            ReplyError::Unsolicited(_) => self.ignored.unsolicited += 1,
        }
    }
}
