//! `goodput server`: every service a peer tests against.

use super::iperf3::Iperf3ServerView;
use super::run::{print_or_run, Extras};
use super::server_limits::media_limits;
use super::stamp::stamp_bind_error;
use super::views::Views;
use super::{flag_error, socket_options_of, watch_signals, Stop, EXIT_FAILED, EXIT_OK};
use crate::flags::{ServerArgs, ViewArgs};
use goodput_core::spec::{ServerSpec, TcpWire, TestSpec};
use goodput_core::units::{format_bits_per_second, format_size};
use goodput_engine::admission::AdmissionLimits;
use goodput_engine::media::{bind_media, MediaServerSpec};
use goodput_engine::run::tcp_wire;
use goodput_engine::socket::raise_open_file_limit;
use goodput_engine::stamp::{bind_reflector, ReflectorSpec};
use goodput_engine::tcp::CtsServerPlan;
use goodput_engine::tcp::{bind_server, ServerLimits, TcpServerSpec};
use goodput_engine::CancellationToken;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

pub(crate) async fn server(args: ServerArgs) -> Result<u8, Stop> {
    let spec = args.spec();
    spec.validate().map_err(|e| flag_error(&e))?;
    print_or_run(
        TestSpec::Server(spec),
        args.print_spec,
        &args.output.views,
        &Extras::default(),
    )
    .await
}

/// Serves a validated server spec until its time limit, exit count or a
/// signal: `goodput server`'s path and `goodput run`'s.
pub(crate) async fn run_server(spec: ServerSpec, out: &ViewArgs) -> Result<u8, Stop> {
    let document = TestSpec::Server(spec.clone());
    let socket = socket_options_of(&spec.socket);
    let (listen, listen_defaulted) = spec.listen_addrs().map_err(|e| flag_error(&e))?;
    let listen_for_services = listen.clone();
    let limit = raise_open_file_limit().ok();
    let defaults = AdmissionLimits::for_open_files(limit.unwrap_or(1024));
    let max_connections = spec.max_connections.unwrap_or(defaults.max_connections);
    let max_per_client = spec.max_per_client.unwrap_or(defaults.max_per_client);
    let cancel = CancellationToken::new();
    watch_signals(cancel.clone());
    let tcp = TcpServerSpec {
        wire: tcp_wire(spec.wire),
        cts: (spec.wire == TcpWire::Cts).then_some(CtsServerPlan {
            pattern: spec.pattern,
            verify: spec.verify,
            transfer: spec.transfer.hi.0,
            push_bytes: spec.push_bytes.0,
            pull_bytes: spec.pull_bytes.0,
            buffer: spec.buffer.hi.0,
        }),
        listen,
        listen_defaulted,
        reuse_port: spec.reuse_port,
        socket,
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
        max_records: out.max_records,
    };
    let bound = bind_server(tcp).map_err(|e| Stop::Fatal(e.into()))?;
    let admission = bound.admission();
    let mut views = Views::open(out, spec.exit_after)?;
    let mut banner = vec![
        (
            "Listening on".to_owned(),
            bound
                .local_addrs()
                .iter()
                .map(|a| a.to_string())
                .collect::<Vec<_>>()
                .join(", "),
        ),
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
            let srv = goodput_engine::iperf3::bind_server(goodput_engine::iperf3::Iperf3ServerSpec {
                listen: SocketAddr::new(ip, spec.iperf3_port),
                max_duration: spec.iperf3_max_duration.0,
                timeout: Duration::from_secs(10),
                status_interval: Duration::from_secs(1),
                max_records: out.max_records,
                exit_after: None,
            })
            .map_err(|e| Stop::Fatal(e.into()))?;
            banner.push((
                "iperf3 service".into(),
                format!("{} (TCP, and UDP for UDP tests)", srv.local_addr()),
            ));
            Some(srv)
        }
        false => None,
    };
    let quic = if spec.quic {
        let ips: Vec<IpAddr> = if spec.quic_listen.is_empty() {
            vec![Ipv4Addr::UNSPECIFIED.into(), Ipv6Addr::UNSPECIFIED.into()]
        } else {
            spec.quic_listen.clone()
        };
        let quic_spec = goodput_engine::quic::QuicServerSpec {
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
        };
        let q = goodput_engine::quic::bind_quic(quic_spec).map_err(|e| Stop::Fatal(e.into()))?;
        banner.push((
            "QUIC perf service".into(),
            format!(
                "{} (ALPN perf; {}; {}; at most {} connections, {} per client, {} in their handshake \
                 for up to {} ms; responses up to {} B)",
                q.local_addrs()
                    .iter()
                    .map(|a| a.to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
                if spec.cert.is_some() {
                    "certificate from --cert"
                } else {
                    "self-signed ECDSA P-256 certificate for localhost, generated now"
                },
                if spec.quic_no_retry {
                    "no Retry: unvalidated addresses get up to 3x their bytes"
                } else {
                    "Retry before any state for an unvalidated address"
                },
                spec.quic_max_connections,
                spec.quic_max_per_client,
                spec.quic_max_handshakes,
                spec.hello_timeout.0.as_millis(),
                spec.quic_max_response.0
            ),
        ));
        Some(q)
    } else {
        None
    };
    let media = if spec.no_udp {
        None
    } else {
        let (limits, max_memory) = media_limits(&spec)?;
        let media = MediaServerSpec {
            listen: listen_for_services.clone(),
            max_streams: spec.udp_max_streams,
            limits,
            max_memory,
        };
        let bound = match bind_media(media.clone()) {
            Ok(b) => b,
            // The default :: may not exist (IPv6 disabled): serve IPv4.
            Err(_) if listen_defaulted => {
                let v4: Vec<SocketAddr> = media.listen.iter().copied().filter(|a| a.is_ipv4()).collect();
                bind_media(MediaServerSpec { listen: v4, ..media }).map_err(|e| Stop::Fatal(e.into()))?
            }
            Err(e) => return Err(Stop::Fatal(e.into())),
        };
        banner.push((
            "UDP media service".into(),
            format!(
                "{} (at most {} streams, {} per stream, {} fps, {} s long, {} ms buffer; \
                 {} of memory for streams, at most {} each)",
                bound
                    .local_addrs()
                    .iter()
                    .map(|a| a.to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
                spec.udp_max_streams,
                format_bits_per_second(limits.max_bits_per_second as f64 / 8.0),
                limits.max_frame_rate,
                limits.max_length_s,
                limits.max_buffer_ms,
                format_size(max_memory),
                format_size(limits.stream_ceiling())
            ),
        ));
        Some(bound)
    };
    let reflector = match spec.stamp {
        true => {
            let listen = if spec.stamp_listen.is_empty() {
                vec![Ipv4Addr::UNSPECIFIED.into(), Ipv6Addr::UNSPECIFIED.into()]
            } else {
                spec.stamp_listen.clone()
            };
            let r = bind_reflector(ReflectorSpec {
                listen: listen
                    .into_iter()
                    .map(|ip| SocketAddr::new(ip, spec.stamp_port))
                    .collect(),
                stateful: spec.stamp_stateful,
                allow: spec.stamp_allow.clone(),
                per_source_rate: spec.stamp_rate_limit,
                session_timeout: Duration::from_secs(300),
                pad_short: spec.stamp_pad_short,
            })
            .map_err(|e| stamp_bind_error(e, spec.stamp_port))?;
            banner.push((
                "STAMP reflector".into(),
                format!(
                    "{} (UDP, {}{}{}{})",
                    r.local_addrs()
                        .iter()
                        .map(|a| a.to_string())
                        .collect::<Vec<_>>()
                        .join(", "),
                    if spec.stamp_stateful {
                        "stateful"
                    } else {
                        "stateless"
                    },
                    if spec.stamp_allow.is_empty() {
                        String::new()
                    } else {
                        format!(
                            ", allow {}",
                            spec.stamp_allow
                                .iter()
                                .map(|c| c.to_string())
                                .collect::<Vec<_>>()
                                .join(" ")
                        )
                    },
                    if spec.stamp_rate_limit > 0 {
                        format!(", at most {} packets/s per source", spec.stamp_rate_limit)
                    } else {
                        String::new()
                    },
                    if spec.stamp_pad_short {
                        ", short requests padded to 44 B"
                    } else {
                        ""
                    }
                ),
            ));
            Some(r)
        }
        false => None,
    };
    let services = if spec.discard_port.is_some() || spec.echo_port.is_some() || spec.echo_tls_port.is_some()
    {
        let ips: Vec<IpAddr> = listen_for_services.iter().map(|a| a.ip()).collect();
        let at = |port: Option<u16>| -> Vec<SocketAddr> {
            port.map(|p| ips.iter().map(|&ip| SocketAddr::new(ip, p)).collect())
                .unwrap_or_default()
        };
        let tls = match spec.echo_tls_port {
            Some(_) => Some(
                goodput_engine::tls::server_config(spec.cert.as_deref().zip(spec.key.as_deref()))
                    .map_err(|e| Stop::Fatal(e.into()))?,
            ),
            None => None,
        };
        let s = goodput_engine::services::bind_services(
            &at(spec.discard_port),
            &at(spec.echo_port),
            &at(spec.echo_tls_port),
            tls,
        )
        .map_err(|e| Stop::Fatal(e.into()))?;
        let list = |v: Vec<SocketAddr>| v.iter().map(|a| a.to_string()).collect::<Vec<_>>().join(", ");
        if spec.discard_port.is_some() {
            banner.push((
                "Discard service".into(),
                format!("{} (TCP and UDP)", list(s.discard_addrs())),
            ));
        }
        if spec.echo_port.is_some() {
            banner.push(("Echo service".into(), format!("{} (TCP)", list(s.echo_addrs()))));
        }
        if spec.echo_tls_port.is_some() {
            banner.push((
                "TLS echo service".into(),
                format!(
                    "{} ({})",
                    list(s.echo_tls_addrs()),
                    if spec.cert.is_some() {
                        "certificate from --cert"
                    } else {
                        "self-signed certificate for localhost, 127.0.0.1, ::1, generated now"
                    }
                ),
            ));
        }
        Some(s)
    } else {
        None
    };
    views.console.banner("goodput server", &banner);
    let services_run = async {
        match services {
            Some(s) => Some(s.run(cancel.clone(), admission.clone()).await),
            None => None,
        }
    };
    let iperf3_run = async {
        if let Some(srv) = iperf3 {
            let mut view = Iperf3ServerView {
                verbosity: out.verbosity,
            };
            srv.run(&mut view, cancel.clone()).await;
        }
    };
    let stamp_run = async {
        match reflector {
            Some(r) => Some(r.run(cancel.clone()).await),
            None => None,
        }
    };
    let media_run = async {
        match media {
            Some(m) => Some(m.run(cancel.clone()).await),
            None => None,
        }
    };
    let quic_run = async {
        match quic {
            Some(q) => Some(q.run(cancel.clone()).await),
            None => None,
        }
    };
    let tcp_run = async {
        let r = bound.run(&mut views, cancel.clone()).await;
        // The TCP server can end on its own (--exit-after, --time-limit):
        // the other services end with it.
        cancel.cancel();
        r
    };
    let (result, (), counters, served, streamed, quicked) =
        tokio::join!(tcp_run, iperf3_run, stamp_run, services_run, media_run, quic_run);
    let mut result = result.map_err(|e| Stop::Fatal(e.into()))?;
    // Read again now that the discard and echo services have ended too.
    let adm = admission.counters();
    result.admission = Some(adm);
    let refused = adm.refused_total + adm.refused_per_client + adm.reset_pending + adm.hello_timeouts;
    if out.verbosity > 0 && (refused > 0 || adm.internal_errors > 0) {
        goodput_report::console_line(&format!(
            "Admission (TCP services): {} connections admitted; refused: {} over the total limit, \
             {} over the per-client limit, {} reset with too many in their hello, {} hellos or TLS \
             handshakes too slow; {} internal errors",
            adm.admitted,
            adm.refused_total,
            adm.refused_per_client,
            adm.reset_pending,
            adm.hello_timeouts,
            adm.internal_errors
        ));
    }
    result.services = served;
    if let (Some(c), true) = (served, out.verbosity > 0) {
        goodput_report::console_line(&format!(
            "Simple services: discard {} connections, {} datagrams, {} B; echo {} connections, {} B; {} failed TLS handshakes",
            c.discard_connections,
            c.discard_datagrams,
            c.discard_bytes,
            c.echo_connections,
            c.echo_bytes,
            c.tls_handshake_failures
        ));
    }
    if let Some(c) = counters {
        if out.verbosity > 0 {
            goodput_report::console_line(&format!(
                "STAMP reflector: {} received, {} reflected ({} short requests answered), \
                 dropped: {} under 14 B, {} over 9000 B, {} by the ACL, {} by the rate limit; \
                 {} with malformed TLVs, {} send errors, {} stateful sessions, {} internal errors",
                c.received,
                c.reflected,
                c.short_answered,
                c.too_short,
                c.oversized,
                c.denied,
                c.rate_limited,
                c.malformed_tlvs,
                c.send_errors,
                c.sessions,
                c.internal_errors
            ));
        }
        result.stamp_reflector = Some(c);
    }
    if let Some(c) = streamed {
        if out.verbosity > 0 && (c.accepted > 0 || c.challenged > 0 || c.unsolicited > 0) {
            goodput_report::console_line(&format!(
                "UDP media service: {} streams accepted ({} completed, {} stopped when their reports stopped), \
                 {} refused, {} challenges sent; {} data datagrams sent ({} send errors), {} received; \
                 {} unsolicited or malformed datagrams dropped; {} internal errors",
                c.accepted,
                c.completed,
                c.abandoned,
                c.rejected,
                c.challenged,
                c.sent,
                c.send_errors,
                c.received,
                c.unsolicited,
                c.internal_errors
            ));
        }
        result.media_server = Some(c);
    }
    if let Some(c) = quicked {
        if out.verbosity > 0 {
            goodput_report::console_line(&format!(
                "QUIC perf service: {} connections ({} refused, {} failed handshakes, {} handshakes \
                 timed out, {} internal errors; {} Retry packets sent, {} Initials dropped), {} streams \
                 ({} media, {} ended inside their header, {} refused, {} stopped by the client); \
                 {} B received, {} B sent, {} datagrams",
                c.connections,
                c.refused_connections,
                c.handshake_failures,
                c.handshake_timeouts,
                c.internal_errors,
                c.retries_sent,
                c.dropped_initials,
                c.streams,
                c.media_streams,
                c.short_requests,
                c.refused_streams,
                c.stopped,
                c.bytes_received,
                c.bytes_sent,
                c.datagrams_sent
            ));
        }
        result.quic_server = Some(c);
    }
    result.spec = Some(document);
    views.finish(&result, out.json.as_deref())?;
    Ok(if result.summary.failures() > 0 {
        EXIT_FAILED
    } else {
        EXIT_OK
    })
}
