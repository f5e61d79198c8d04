//! ctsTraffic's TCP wire protocol (goodput's `--wire cts`): the server sends
//! a 37-byte connection id (a lowercase UUID string and a NUL) first, then raw
//! pattern bytes flow as both ends were configured, then the server sends the
//! four ASCII bytes `DONE`. Nothing is negotiated: both ends must be started
//! with the same pattern, transfer and verify flags.

/// Length of the connection id the server sends first.
pub const CONNECTION_ID_LEN: usize = 37;

/// The server's end-of-data marker.
pub const DONE: &[u8; 4] = b"DONE";

/// The 37-byte connection id for a UUID rendered as 36 characters.
pub fn encode_connection_id(uuid_hyphenated_lower: &str) -> Option<[u8; CONNECTION_ID_LEN]> {
    let b = uuid_hyphenated_lower.as_bytes();
    if b.len() != CONNECTION_ID_LEN - 1 {
        return None;
    }
    let mut out = [0u8; CONNECTION_ID_LEN];
    out[..36].copy_from_slice(b);
    Some(out)
}

/// The id text of a received 37-byte connection id (the trailing NUL and
/// anything not printable are dropped; ctsTraffic does not validate it).
pub fn decode_connection_id(bytes: &[u8; CONNECTION_ID_LEN]) -> String {
    bytes[..36]
        .iter()
        .map(|&b| if b.is_ascii_graphic() { b as char } else { '?' })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_is_uuid_text_plus_nul() {
        let id = encode_connection_id("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0").unwrap();
        assert_eq!(id[36], 0);
        assert_eq!(&id[..8], b"0f1e2d3c");
        assert_eq!(decode_connection_id(&id), "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0");
        assert!(encode_connection_id("short").is_none());
    }
}
