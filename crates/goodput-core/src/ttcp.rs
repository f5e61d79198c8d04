//! TTCP's conventions: the printable-ASCII source pattern, the UDP start
//! and end markers, and the numbers of its classic report.

/// UDP datagrams this long or shorter are markers, not data: the first
/// starts the receiver's clock, the next one stops it.
pub const UDP_MARKER_LEN: usize = 4;
/// End markers a UDP transmitter sends (one may be lost).
pub const UDP_END_MARKERS: usize = 5;
/// Shortest UDP buffer: longer than a marker.
pub const MIN_UDP_BUFLEN: usize = UDP_MARKER_LEN + 1;

/// Fills `buf` with ttcp's source pattern: the printable ASCII characters
/// from space to `~`, over and over.
pub fn fill_pattern(buf: &mut [u8]) {
    for (i, b) in buf.iter_mut().enumerate() {
        *b = b' ' + (i % 95) as u8;
    }
}

/// ttcp's "msec/call": it divides 1024 × real seconds by the calls (a
/// historical quirk every ttcp prints, kept so the lines compare).
pub fn msec_per_call(real_s: f64, calls: u64) -> f64 {
    1024.0 * real_s / calls.max(1) as f64
}

/// Calls per second of real time.
pub fn calls_per_second(real_s: f64, calls: u64) -> f64 {
    calls as f64 / real_s.max(1e-9)
}

/// ttcp's rate: KB (1024 bytes) per second of real time.
pub fn kib_per_second(bytes: u64, real_s: f64) -> f64 {
    bytes as f64 / 1024.0 / real_s.max(1e-9)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_is_printable_and_cycles_every_95_bytes() {
        let mut b = vec![0u8; 300];
        fill_pattern(&mut b);
        assert_eq!(&b[..3], b" !\"");
        assert_eq!(b[94], b'~');
        assert_eq!(b[95], b' ');
        assert!(b.iter().all(|c| (0x20..=0x7E).contains(c)));
    }

    #[test]
    fn report_arithmetic() {
        assert_eq!(msec_per_call(1.0, 1024), 1.0);
        assert_eq!(calls_per_second(2.0, 100), 50.0);
        assert_eq!(kib_per_second(2048, 2.0), 1.0);
        // No division by zero on an empty run.
        assert!(msec_per_call(0.0, 0).is_finite());
        assert!(kib_per_second(0, 0.0).is_finite());
    }
}
