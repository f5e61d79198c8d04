//! The server kind: every service a peer tests against, bound from one
//! [`ServerSpec`], run until its time limit, exit count or cancellation,
//! and reported as one result (the TCP test port's records, and each other
//! service's counters).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use goodput_core::media::limits::MediaLimits;
use goodput_core::result::{Detail, ServerDetail, TestResult};
use goodput_core::spec::{ServerSpec, TcpWire};
use goodput_core::units::{format_bits_per_second, format_size, ByteSize};
use tokio_util::sync::CancellationToken;

use super::{error_chain, socket_options, Failure};
use crate::admission::AdmissionLimits;
use crate::media::{bind_media, MediaServerSpec};
use crate::owamp::conn::ServerPolicy;
use crate::owamp::server::{bind_control_server, BoundControlServer, ControlServerSpec, SessionLimits};
use crate::socket::raise_open_file_limit;
use crate::stamp::{bind_reflector, ReflectorSpec};
use crate::tcp::{bind_server, CtsServerPlan, ServerLimits, TcpServerSpec};
use crate::{EngineError, NullObserver, Observer};

/// Binds every service the spec asks for, announces them through
/// `observer.on_start`, and serves until the end. `iperf3_observer` gets the
/// iperf3 service's tests (each one's result through `on_result`), kept
/// apart from the TCP test port's records.
pub(crate) async fn run(
    spec: &ServerSpec,
    iperf3_observer: Option<Box<dyn Observer>>,
    ndt7_tests: Option<crate::ndt7::server::TestSink>,
    observer: &mut dyn Observer,
    cancel: CancellationToken,
    max_records: usize,
) -> Result<TestResult, Failure> {
    let setup = |e: EngineError| Failure::setup(error_chain(&e));
    let spec_error = |e: goodput_core::spec::SpecError| Failure::setup(e.to_string());
    let (listen, listen_defaulted) = spec.listen_addrs().map_err(spec_error)?;
    let limit = raise_open_file_limit().ok();
    let defaults = AdmissionLimits::for_open_files(limit.unwrap_or(1024));
    let max_connections = spec.max_connections.unwrap_or(defaults.max_connections);
    let max_per_client = spec.max_per_client.unwrap_or(defaults.max_per_client);
    let tcp = TcpServerSpec {
        wire: spec.wire,
        cts: (spec.wire == TcpWire::Cts).then_some(CtsServerPlan {
            pattern: spec.pattern,
            verify: spec.verify,
            transfer: spec.transfer.hi.0,
            push_bytes: spec.push_bytes.0,
            pull_bytes: spec.pull_bytes.0,
            buffer: spec.buffer.hi.0,
        }),
        listen: listen.clone(),
        listen_defaulted,
        reuse_port: spec.reuse_port,
        socket: socket_options(&spec.socket),
        limits: ServerLimits {
            max_connections,
            max_per_client,
            max_transfer: spec.max_transfer.0,
            max_buffer: spec.max_buffer.0,
            max_duration: spec.max_duration.0,
            max_pending: spec.max_pending,
            max_pending_per_client: spec.max_pending_per_client,
            hello_timeout: spec.hello_timeout.0,
        },
        exit_after: spec.exit_after,
        idle_timeout: spec.idle_timeout.0,
        status_interval: spec.status_interval.0,
        time_limit: spec.time_limit.map(|d| d.0),
        max_records,
    };
    let bound = bind_server(tcp).map_err(setup)?;
    let admission = bound.admission();
    let mut banner = vec![
        ("Listening on".to_owned(), list(&bound.local_addrs())),
        ("Wire".into(), format!("{:?}", spec.wire).to_lowercase()),
        (
            "Limits".into(),
            format!(
                "{} connections, {} per client ({} in their hello, {} per client, {} ms each), \
                 {} per connection, {} buffer, {} s per connection",
                max_connections,
                max_per_client,
                spec.max_pending,
                spec.max_pending_per_client,
                spec.hello_timeout.0.as_millis(),
                format_size(spec.max_transfer.0),
                format_size(spec.max_buffer.0),
                spec.max_duration.0.as_secs()
            ),
        ),
    ];
    if let Some(l) = limit {
        banner.push(("Open-file limit".into(), l.to_string()));
    }
    if let Some(n) = spec.exit_after {
        banner.push(("Exit after".into(), format!("{n} connections")));
    }
    let iperf3 = match spec.iperf3 {
        true => {
            let ip = spec.iperf3_listen.unwrap_or(Ipv6Addr::UNSPECIFIED.into());
            let srv = crate::iperf3::bind_server(crate::iperf3::Iperf3ServerSpec {
                listen: SocketAddr::new(ip, spec.iperf3_port),
                max_duration: spec.iperf3_max_duration.0,
                timeout: Duration::from_secs(10),
                status_interval: Duration::from_secs(1),
                max_records,
                exit_after: None,
                allow: Vec::new(),
            })
            .map_err(setup)?;
            banner.push((
                "iperf3 service".into(),
                format!("{} (TCP, and UDP for UDP tests)", srv.local_addr()),
            ));
            Some(srv)
        }
        false => None,
    };
    // The QUIC service on a runtime of its own (see `own_runtime`), bound
    // inside it so its endpoints' drivers run there.
    let quic = match spec.quic {
        true => {
            let own =
                crate::own_runtime::OwnRuntime::new("goodput-quic", spec.quic_threads).map_err(setup)?;
            let q = {
                let _inside = own.handle().enter();
                crate::quic::bind_quic(quic_spec(spec)).map_err(setup)?
            };
            banner.push(("QUIC perf service".into(), quic_banner(spec, &q.local_addrs())));
            Some((own, q))
        }
        false => None,
    };
    let media = match spec.no_udp {
        true => None,
        false => {
            let (limits, max_memory) = media_limits(spec).map_err(spec_error)?;
            let max_client_memory = client_memory(spec, max_memory, limits.stream_ceiling());
            let media = MediaServerSpec {
                listen: listen.clone(),
                max_streams: spec.udp_max_streams,
                limits,
                max_memory,
                max_per_client: spec.udp_max_per_client,
                max_client_memory,
            };
            let bound = match bind_media(media.clone()) {
                Ok(b) => b,
                // The default :: may not exist (IPv6 disabled): serve IPv4.
                Err(_) if listen_defaulted => {
                    let v4 = media.listen.iter().copied().filter(|a| a.is_ipv4()).collect();
                    bind_media(MediaServerSpec { listen: v4, ..media }).map_err(setup)?
                }
                Err(e) => return Err(setup(e)),
            };
            banner.push((
                "UDP media service".into(),
                format!(
                    "{} (at most {} streams, {} from one address, {} per stream, {} fps, {} s long, \
                     {} ms buffer; {} of memory for streams, {} for one address, at most {} each)",
                    list(&bound.local_addrs()),
                    spec.udp_max_streams,
                    spec.udp_max_per_client,
                    format_bits_per_second(limits.max_bits_per_second as f64 / 8.0),
                    limits.max_frame_rate,
                    limits.max_length_s,
                    limits.max_buffer_ms,
                    format_size(max_memory),
                    format_size(max_client_memory),
                    format_size(limits.stream_ceiling())
                ),
            ));
            Some(bound)
        }
    };
    let reflector = match spec.stamp {
        true => {
            let r = bind_reflector(reflector_spec(spec)).map_err(|e| stamp_bind_error(e, spec.stamp_port))?;
            banner.push(("STAMP reflector".into(), stamp_banner(spec, &r.local_addrs())));
            Some(r)
        }
        false => None,
    };
    let ndt7 = match spec.ndt7 {
        true => {
            let limits = ndt7_limits(spec);
            let ips: Vec<IpAddr> = listen.iter().map(|a| a.ip()).collect();
            let at: Vec<SocketAddr> = ips
                .iter()
                .map(|&ip| SocketAddr::new(ip, spec.ndt7_port))
                .collect();
            let n = crate::ndt7::server::bind_ndt7(&at, limits).map_err(setup)?;
            banner.push(("ndt7 service".into(), ndt7_banner(&limits, &n.local_addrs())));
            Some(n)
        }
        false => None,
    };
    let (owamp, twamp) = ow_twamp_servers(spec)?;
    for (name, srv) in [("OWAMP server", &owamp), ("TWAMP server", &twamp)] {
        if let Some(srv) = srv {
            banner.push((name.into(), ow_twamp_banner(spec, &srv.local_addrs())?));
        }
    }
    let services = match (spec.discard_port, spec.echo_port, spec.echo_tls_port) {
        (None, None, None) => None,
        _ => {
            let ips: Vec<IpAddr> = listen.iter().map(|a| a.ip()).collect();
            let at = |port: Option<u16>| -> Vec<SocketAddr> {
                port.map(|p| ips.iter().map(|&ip| SocketAddr::new(ip, p)).collect())
                    .unwrap_or_default()
            };
            let tls = match spec.echo_tls_port {
                Some(_) => Some(
                    crate::tls::server_config(spec.cert.as_deref().zip(spec.key.as_deref()))
                        .map_err(setup)?,
                ),
                None => None,
            };
            let s = crate::services::bind_services(
                &at(spec.discard_port),
                &at(spec.echo_port),
                &at(spec.echo_tls_port),
                tls,
            )
            .map_err(setup)?;
            if spec.discard_port.is_some() {
                banner.push((
                    "Discard service".into(),
                    format!("{} (TCP and UDP)", list(&s.discard_addrs())),
                ));
            }
            if spec.echo_port.is_some() {
                banner.push(("Echo service".into(), format!("{} (TCP)", list(&s.echo_addrs()))));
            }
            if spec.echo_tls_port.is_some() {
                banner.push((
                    "TLS echo service".into(),
                    format!(
                        "{} ({})",
                        list(&s.echo_tls_addrs()),
                        match &spec.cert {
                            Some(p) => format!("certificate from {}", p.display()),
                            None =>
                                "self-signed certificate for localhost, 127.0.0.1, ::1, generated now".into(),
                        }
                    ),
                ));
            }
            Some(s)
        }
    };
    observer.on_start("goodput server", &banner);
    let services_run = async {
        match services {
            Some(s) => Some(s.run(cancel.clone(), admission.clone()).await),
            None => None,
        }
    };
    let iperf3_run = async {
        if let Some(srv) = iperf3 {
            let mut view = iperf3_observer.unwrap_or_else(|| Box::new(NullObserver));
            srv.run(view.as_mut(), cancel.clone()).await;
        }
    };
    let stamp_run = async {
        match reflector {
            Some(r) => Some(r.run(cancel.clone()).await),
            None => None,
        }
    };
    let owamp_run = async {
        match owamp {
            Some(s) => Some(s.run(cancel.clone()).await),
            None => None,
        }
    };
    let twamp_run = async {
        match twamp {
            Some(s) => Some(s.run(cancel.clone()).await),
            None => None,
        }
    };
    let ndt7_run = async {
        match ndt7 {
            Some(n) => Some(n.run(cancel.clone(), ndt7_tests).await),
            None => None,
        }
    };
    let media_run = async {
        match media {
            Some(m) => Some(m.run(cancel.clone()).await),
            None => None,
        }
    };
    // QUIC connections are numbered, shown and counted with the TCP ones.
    let quic_records = bound.records();
    let quic_run = async {
        match quic {
            Some((own, q)) => own
                .handle()
                .spawn(q.run(cancel.clone(), Some(quic_records)))
                .await
                .ok(),
            None => None,
        }
    };
    let tcp_run = async {
        let r = bound.run(observer, cancel.clone()).await;
        // The TCP server can end on its own (exit_after, time_limit): the
        // other services end with it.
        cancel.cancel();
        r
    };
    let (result, (), reflected, served, streamed, quicked, owamped, twamped, ndt7ed) = tokio::join!(
        tcp_run,
        iperf3_run,
        stamp_run,
        services_run,
        media_run,
        quic_run,
        owamp_run,
        twamp_run,
        ndt7_run
    );
    let mut result = result.map_err(|e| Failure::test(error_chain(&e)))?;
    // Read again now that the discard and echo services have ended too.
    result.detail = Detail::Server(Box::new(ServerDetail {
        admission: Some(admission.counters()),
        services: served,
        stamp_reflector: reflected,
        media_server: streamed,
        quic_server: quicked,
        owamp_server: owamped,
        twamp_server: twamped,
        ndt7_server: ndt7ed,
    }));
    Ok(result)
}

fn ndt7_limits(spec: &ServerSpec) -> crate::ndt7::server::Ndt7Limits {
    crate::ndt7::server::Ndt7Limits {
        max_tests: spec.ndt7_max_tests,
        max_per_client: spec.ndt7_max_per_client,
        per_minute: spec.ndt7_per_minute,
        length: spec.ndt7_length.0,
        max_message: usize::try_from(spec.ndt7_max_message.0).unwrap_or(usize::MAX),
        ..crate::ndt7::server::Ndt7Limits::default()
    }
}

fn ndt7_banner(l: &crate::ndt7::server::Ndt7Limits, addrs: &[SocketAddr]) -> String {
    format!(
        "{} (/ndt/v7/download and /upload; at most {} subtests, {} from one address, {} a minute \
         from one address, {} s each (ended at {} s), messages up to {}; at most {} of buffers)",
        list(addrs),
        l.max_tests,
        l.max_per_client,
        l.per_minute,
        l.length.as_secs(),
        (l.length + crate::ndt7::server::Ndt7Limits::GRACE).as_secs(),
        format_size(l.max_message as u64),
        format_size(l.memory_bound())
    )
}

fn list(addrs: &[SocketAddr]) -> String {
    addrs.iter().map(|a| a.to_string()).collect::<Vec<_>>().join(", ")
}

/// The media service's limits, and its memory budget in bytes (an eighth
/// of physical memory unless the spec gives one).
fn media_limits(spec: &ServerSpec) -> Result<(MediaLimits, u64), goodput_core::spec::SpecError> {
    let max_memory = match spec.udp_max_memory {
        Some(ByteSize(b)) => b,
        None => physical_memory() / 8,
    };
    let limits = MediaLimits {
        max_bits_per_second: spec.udp_max_bitrate.0,
        max_length_s: spec.udp_max_length_s()?,
        max_frame_rate: spec.udp_max_frame_rate,
        max_buffer_ms: spec.udp_max_buffer_ms()?,
    };
    Ok((limits, max_memory))
}

/// What one client address may hold of the media memory budget, bytes: the
/// spec's figure, or a quarter of the budget but at least the costliest
/// stream (`ceiling`), so that a small budget still serves each address
/// one stream of any kind the limits allow.
fn client_memory(spec: &ServerSpec, max_memory: u64, ceiling: u64) -> u64 {
    match spec.udp_max_client_memory {
        Some(ByteSize(b)) => b,
        None => (max_memory / 4).max(ceiling).min(max_memory),
    }
}

/// Physical memory, bytes (4 GiB when the system will not say).
fn physical_memory() -> u64 {
    // SAFETY: sysconf only reads system configuration.
    let (pages, size) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    match (u64::try_from(pages), u64::try_from(size)) {
        (Ok(p), Ok(s)) if p > 0 && s > 0 => p.saturating_mul(s),
        _ => 4 << 30,
    }
}

/// A bind error of the reflector, saying what a privileged port needs.
fn stamp_bind_error(e: EngineError, port: u16) -> Failure {
    if let EngineError::Listen { source, .. } = &e {
        if source.kind() == std::io::ErrorKind::PermissionDenied && port < 1024 {
            return Failure::setup(format!(
                "{e}: {source}; port {port} needs root or CAP_NET_BIND_SERVICE (or choose a port above 1023, such as 8620)"
            ));
        }
    }
    Failure::setup(error_chain(&e))
}

fn quic_spec(spec: &ServerSpec) -> crate::quic::QuicServerSpec {
    let ips: Vec<IpAddr> = match spec.quic_listen.is_empty() {
        true => vec![Ipv4Addr::UNSPECIFIED.into(), Ipv6Addr::UNSPECIFIED.into()],
        false => spec.quic_listen.clone(),
    };
    crate::quic::QuicServerSpec {
        listen: ips
            .iter()
            .map(|&ip| SocketAddr::new(ip, spec.quic_port))
            .collect(),
        cert_key: spec.cert.clone().zip(spec.key.clone()),
        max_connections: spec.quic_max_connections,
        max_per_client: spec.quic_max_per_client,
        max_streams: 10_000,
        max_response: spec.quic_max_response.0,
        retry: !spec.quic_no_retry,
        max_handshakes: spec.quic_max_handshakes,
        handshake_timeout: spec.hello_timeout.0,
        max_mtu: spec.quic_max_mtu,
    }
}

fn quic_banner(spec: &ServerSpec, addrs: &[SocketAddr]) -> String {
    format!(
        "{} (ALPN perf; {}; {}; at most {} connections, {} per client, {} in their handshake \
         for up to {} ms; responses up to {} B; {}; {} thread{})",
        list(addrs),
        match &spec.cert {
            Some(p) => format!("certificate from {}", p.display()),
            None => "self-signed ECDSA P-256 certificate for localhost, generated now".into(),
        },
        match spec.quic_no_retry {
            true => "no Retry: unvalidated addresses get up to 3x their bytes",
            false => "Retry before any state for an unvalidated address",
        },
        spec.quic_max_connections,
        spec.quic_max_per_client,
        spec.quic_max_handshakes,
        spec.hello_timeout.0.as_millis(),
        spec.quic_max_response.0,
        crate::quic::packet_sizes(spec.quic_max_mtu),
        spec.quic_threads,
        if spec.quic_threads == 1 { "" } else { "s" }
    )
}

/// The OWAMP and TWAMP servers the spec asks for, bound.
fn ow_twamp_servers(
    spec: &ServerSpec,
) -> Result<(Option<BoundControlServer>, Option<BoundControlServer>), Failure> {
    if !spec.owamp && !spec.twamp {
        return Ok((None, None));
    }
    let spec_error = |e: goodput_core::spec::SpecError| Failure::setup(e.to_string());
    let modes = spec.ow_twamp_mode_bits().map_err(spec_error)?;
    let keys = match &spec.ow_twamp_pfs {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| {
                Failure::setup(format!("cannot read the passphrase file {}: {e}", path.display()))
            })?;
            goodput_core::owamp::pfs::parse(&text)
                .map_err(|e| Failure::setup(format!("passphrase file {}: {e}", path.display())))?
        }
        None => Vec::new(),
    };
    let ips: Vec<IpAddr> = match spec.ow_twamp_listen.is_empty() {
        true => vec![Ipv4Addr::UNSPECIFIED.into(), Ipv6Addr::UNSPECIFIED.into()],
        false => spec.ow_twamp_listen.clone(),
    };
    let limits = SessionLimits {
        max_connections: spec.ow_twamp_max_connections,
        max_per_client: spec.ow_twamp_max_per_client,
        control_timeout: spec.ow_twamp_idle_timeout.0,
        max_sessions: spec.ow_twamp_max_sessions,
        max_packets: spec.ow_twamp_max_packets,
        max_bits_per_second: spec.ow_twamp_max_bitrate.0,
        max_log_memory: spec.ow_twamp_max_memory.0,
        ..SessionLimits::default()
    };
    let server = |twoway: bool, port: u16| -> Result<BoundControlServer, Failure> {
        bind_control_server(ControlServerSpec {
            twoway,
            listen: ips.iter().map(|&ip| SocketAddr::new(ip, port)).collect(),
            policy: ServerPolicy {
                modes,
                keys: keys.clone(),
                count: 2048,
            },
            allow: spec.ow_twamp_allow.clone(),
            test_ports: spec.ow_twamp_port_range().map_err(spec_error)?,
            limits: limits.clone(),
        })
        .map_err(|e| stamp_bind_error(e, port))
    };
    let owamp = match spec.owamp {
        true => Some(server(false, spec.owamp_port)?),
        false => None,
    };
    let twamp = match spec.twamp {
        true => Some(server(true, spec.twamp_port)?),
        false => None,
    };
    Ok((owamp, twamp))
}

fn ow_twamp_banner(spec: &ServerSpec, addrs: &[SocketAddr]) -> Result<String, Failure> {
    let bits = spec
        .ow_twamp_mode_bits()
        .map_err(|e| Failure::setup(e.to_string()))?;
    let modes: Vec<&str> = goodput_core::owamp::Mode::ALL
        .into_iter()
        .filter(|m| bits & m.bit() != 0)
        .map(|m| m.name())
        .collect();
    let mut s = format!(
        "{} (TCP; {}; at most {} connections, {} per client, {} sessions per client, \
         {} packets per session, {} per client; idle connections closed after {} s",
        list(addrs),
        modes.join(", "),
        spec.ow_twamp_max_connections,
        spec.ow_twamp_max_per_client,
        spec.ow_twamp_max_sessions,
        spec.ow_twamp_max_packets,
        format_bits_per_second(spec.ow_twamp_max_bitrate.0 as f64 / 8.0),
        spec.ow_twamp_idle_timeout.0.as_secs()
    );
    if let Some(p) = &spec.ow_twamp_test_ports {
        s += &format!("; test ports {p}");
    }
    if !spec.ow_twamp_allow.is_empty() {
        let allow: Vec<String> = spec.ow_twamp_allow.iter().map(|c| c.to_string()).collect();
        s += &format!("; allow {}", allow.join(" "));
    }
    Ok(s + ")")
}

fn reflector_spec(spec: &ServerSpec) -> ReflectorSpec {
    let listen = match spec.stamp_listen.is_empty() {
        true => vec![Ipv4Addr::UNSPECIFIED.into(), Ipv6Addr::UNSPECIFIED.into()],
        false => spec.stamp_listen.clone(),
    };
    ReflectorSpec {
        listen: listen
            .into_iter()
            .map(|ip| SocketAddr::new(ip, spec.stamp_port))
            .collect(),
        stateful: spec.stamp_stateful,
        allow: spec.stamp_allow.clone(),
        per_source_rate: spec.stamp_rate_limit,
        session_timeout: Duration::from_secs(300),
        pad_short: spec.stamp_pad_short,
    }
}

fn stamp_banner(spec: &ServerSpec, addrs: &[SocketAddr]) -> String {
    let mut s = format!(
        "{} (UDP, {}",
        list(addrs),
        if spec.stamp_stateful {
            "stateful"
        } else {
            "stateless"
        }
    );
    if !spec.stamp_allow.is_empty() {
        let allow: Vec<String> = spec.stamp_allow.iter().map(|c| c.to_string()).collect();
        s += &format!(", allow {}", allow.join(" "));
    }
    if spec.stamp_rate_limit > 0 {
        s += &format!(", at most {} packets/s per source", spec.stamp_rate_limit);
    }
    if spec.stamp_pad_short {
        s += ", short requests padded to 44 B";
    }
    s + ")"
}
