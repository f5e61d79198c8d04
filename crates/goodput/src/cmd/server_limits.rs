//! The server's listen addresses and the limits its services check.

use super::{usage, Stop};
use crate::flags::ServerArgs;
use goodput_core::media::limits::MediaLimits;
use goodput_core::units::ByteSize;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

pub(crate) fn listen_addrs(args: &ServerArgs) -> Result<(Vec<SocketAddr>, bool), Stop> {
    if args.listen.is_empty() || args.listen.iter().any(|l| l == "*") {
        let mut v = vec![
            SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), args.port),
            SocketAddr::new(Ipv6Addr::UNSPECIFIED.into(), args.port),
        ];
        for l in args.listen.iter().filter(|l| *l != "*") {
            v.push(parse_listen(l, args.port)?);
        }
        return Ok((v, true));
    }
    let v = args
        .listen
        .iter()
        .map(|l| parse_listen(l, args.port))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((v, false))
}

pub(crate) fn parse_listen(s: &str, port: u16) -> Result<SocketAddr, Stop> {
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Ok(a);
    }
    let bare = s.trim_start_matches('[').trim_end_matches(']');
    bare.parse::<IpAddr>()
        .map(|ip| SocketAddr::new(ip, port))
        .map_err(|_| {
            usage(format!(
                "--listen '{s}': expected an IP address, optionally with :PORT ([v6]:PORT), or *"
            ))
        })
}

/// A limit of zero would refuse every client, or (for a duration) end
/// every connection at once: refused, naming the flag, rather than obeyed.
pub(crate) fn check_server_limits(args: &ServerArgs) -> Result<(), Stop> {
    let counts: [(&str, Option<u64>); 9] = [
        ("--max-connections", args.max_connections),
        ("--max-per-client", args.max_per_client),
        ("--max-pending", Some(args.max_pending)),
        ("--max-pending-per-client", Some(args.max_pending_per_client)),
        ("--udp-max-streams", Some(args.udp_max_streams as u64)),
        ("--udp-max-bitrate", Some(args.udp_max_bitrate.0)),
        ("--quic-max-connections", Some(args.quic_max_connections as u64)),
        ("--quic-max-per-client", Some(args.quic_max_per_client as u64)),
        ("--quic-max-handshakes", Some(args.quic_max_handshakes as u64)),
    ];
    if let Some((flag, _)) = counts.iter().find(|(_, v)| *v == Some(0)) {
        return Err(usage(format!("{flag} must be at least 1")));
    }
    if args.max_transfer.0 == 0 || args.quic_max_response.0 == 0 {
        let flag = if args.max_transfer.0 == 0 {
            "--max-transfer"
        } else {
            "--quic-max-response"
        };
        return Err(usage(format!("{flag} must be at least 1 byte")));
    }
    let durations = [
        ("--max-duration", args.max_duration.0),
        ("--hello-timeout", args.hello_timeout.0),
        ("--udp-max-length", args.udp_max_length.0),
        ("--udp-max-buffer", args.udp_max_buffer.0),
    ];
    if let Some((flag, _)) = durations.iter().find(|(_, d)| d.is_zero()) {
        return Err(usage(format!("{flag} must be above zero")));
    }
    Ok(())
}

/// The media service's limits for `goodput server`, from its flags.
pub(crate) fn media_limits(args: &ServerArgs) -> Result<(MediaLimits, u64), Stop> {
    let length = args.udp_max_length.0;
    let max_length_s = u32::try_from(length.as_secs())
        .ok()
        .filter(|&s| s >= 1 && length.subsec_nanos() == 0)
        .ok_or_else(|| usage("--udp-max-length must be a whole number of seconds, 1s to 4294967295s"))?;
    let max_buffer_ms = u32::try_from(args.udp_max_buffer.0.as_millis())
        .ok()
        .filter(|&ms| ms >= 1)
        .ok_or_else(|| usage("--udp-max-buffer must be 1ms to 4294967295ms"))?;
    let max_memory = match args.udp_max_memory {
        Some(ByteSize(0)) => return Err(usage("--udp-max-memory must be above zero")),
        Some(ByteSize(b)) => b,
        None => physical_memory() / 8,
    };
    let limits = MediaLimits {
        max_bits_per_second: args.udp_max_bitrate.0,
        max_length_s,
        max_frame_rate: args.udp_max_frame_rate,
        max_buffer_ms,
    };
    Ok((limits, max_memory))
}

/// Physical memory, bytes (4 GiB when the system will not say).
pub(crate) fn physical_memory() -> u64 {
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
