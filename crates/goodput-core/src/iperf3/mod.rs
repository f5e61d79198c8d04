//! iperf3's wire protocol (3.0–3.21), so goodput can drive stock iperf3
//! servers and answer stock iperf3 clients.
//!
//! * [`control`]: the control connection's framing (state bytes,
//!   length-prefixed JSON, `SERVER_ERROR` payloads) as an incremental decoder.
//! * [`params`]: the parameter JSON the client sends, with iperf3's exact key
//!   names and JSON types, and a validating, type-strict reader.
//! * [`results`]: the results JSON both ends exchange after the test.
//! * [`udp`]: the UDP stream handshake, datagram header and iperf3's receiver
//!   statistics (loss, out-of-order, RFC 1889 jitter).
//!
//! Everything is pure; the engine's `iperf3` module moves the bytes.

pub mod control;
pub mod params;
pub mod results;
pub mod udp;

/// iperf3's default TCP (and UDP) port.
pub const DEFAULT_PORT: u16 = 5201;

/// Length of the cookie that starts the control connection and every TCP
/// data connection: 36 printable characters and a NUL.
pub const COOKIE_LEN: usize = 37;

/// The cookie alphabet iperf3 uses since 3.2 (base32: `a`–`z`, `2`–`7`).
const COOKIE_ALPHABET: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";

/// A cookie made from 36 random bytes (each picks one of 32 symbols).
pub fn make_cookie(random: &[u8; 36]) -> [u8; COOKIE_LEN] {
    let mut c = [0u8; COOKIE_LEN];
    for (out, r) in c.iter_mut().zip(random) {
        *out = COOKIE_ALPHABET[usize::from(r % 32)];
    }
    c
}

/// Whether a received cookie names the same test: iperf3 compares them as C
/// strings, i.e. up to the first NUL within the 37 bytes.
pub fn cookie_matches(expected: &[u8; COOKIE_LEN], got: &[u8; COOKIE_LEN]) -> bool {
    let text = |c: &[u8; COOKIE_LEN]| {
        let end = c.iter().position(|&b| b == 0).unwrap_or(COOKIE_LEN);
        c[..end].to_vec()
    };
    text(expected) == text(got)
}

/// The cookie as text (non-printable bytes shown as `?`), for reports.
pub fn cookie_text(c: &[u8; COOKIE_LEN]) -> String {
    c.iter()
        .take_while(|&&b| b != 0)
        .map(|&b| if b.is_ascii_graphic() { b as char } else { '?' })
        .collect()
}

/// The id of the `index`-th stream (0-based, in connect/accept order):
/// 1, 3, 4, 5, … — iperf3 skips 2, and both ends match results by id.
pub fn stream_id(index: usize) -> u32 {
    if index == 0 {
        1
    } else {
        u32::try_from(index).unwrap_or(u32::MAX - 2) + 2
    }
}

/// Whether the `index`-th stream (0-based, creation order) sends data from
/// the client: forward tests send on every stream, reverse tests on none,
/// bidirectional tests on the first `parallel` (the client's senders are
/// created first).
pub fn client_sends_on(index: usize, parallel: usize, reverse: bool, bidirectional: bool) -> bool {
    if bidirectional {
        index < parallel
    } else {
        !reverse
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookie_is_base32_and_nul_terminated() {
        let c = make_cookie(&[
            0, 1, 25, 26, 31, 32, 255, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24,
            25, 26, 27, 28, 29, 30, 31, 33, 34, 35, 36,
        ]);
        assert_eq!(c[36], 0);
        assert_eq!(&c[..7], b"abz27a7");
        assert!(c[..36].iter().all(|b| COOKIE_ALPHABET.contains(b)));
        assert_eq!(cookie_text(&c).len(), 36);
    }

    #[test]
    fn cookies_compare_as_c_strings() {
        let a = make_cookie(&[5; 36]);
        let mut b = a;
        assert!(cookie_matches(&a, &b));
        b[35] = b'x';
        assert!(!cookie_matches(&a, &b));
        // Bytes after the NUL do not count.
        let mut short = [0u8; COOKIE_LEN];
        short[..3].copy_from_slice(b"abc");
        let mut short2 = short;
        short2[10] = b'z';
        assert!(cookie_matches(&short, &short2));
    }

    #[test]
    fn stream_ids_skip_two() {
        let ids: Vec<u32> = (0..5).map(stream_id).collect();
        assert_eq!(ids, [1, 3, 4, 5, 6]);
    }

    #[test]
    fn roles_by_mode() {
        assert!(client_sends_on(3, 4, false, false));
        assert!(!client_sends_on(0, 4, true, false));
        assert!(client_sends_on(3, 4, false, true));
        assert!(!client_sends_on(4, 4, false, true));
    }
}
