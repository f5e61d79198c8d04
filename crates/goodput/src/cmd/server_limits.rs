//! The limits the server's media service checks.

use super::{flag_error, Stop};
use goodput_core::media::limits::MediaLimits;
use goodput_core::spec::ServerSpec;
use goodput_core::units::ByteSize;

/// The media service's limits, and its memory budget in bytes.
pub(crate) fn media_limits(spec: &ServerSpec) -> Result<(MediaLimits, u64), Stop> {
    let max_memory = match spec.udp_max_memory {
        Some(ByteSize(b)) => b,
        None => physical_memory() / 8,
    };
    let limits = MediaLimits {
        max_bits_per_second: spec.udp_max_bitrate.0,
        max_length_s: spec.udp_max_length_s().map_err(|e| flag_error(&e))?,
        max_frame_rate: spec.udp_max_frame_rate,
        max_buffer_ms: spec.udp_max_buffer_ms().map_err(|e| flag_error(&e))?,
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
