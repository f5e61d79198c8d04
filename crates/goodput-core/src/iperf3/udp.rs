//! UDP streams: the 4-byte handshake, the datagram header, and the
//! receiver's statistics computed exactly as iperf3 computes them.

/// What a client sends to open a UDP stream (3.12+; servers accept any
/// 4-byte datagram).
pub const HELLO: [u8; 4] = *b"9876";
/// The server's reply (3.12+).
pub const REPLY: [u8; 4] = *b"6789";
/// The reply of servers before 3.12 (987654321 little-endian).
pub const LEGACY_REPLY: [u8; 4] = [0xB1, 0x68, 0xDE, 0x3A];

/// Whether a datagram is a server's handshake reply.
pub fn is_reply(d: &[u8]) -> bool {
    d == REPLY || d == LEGACY_REPLY
}

/// The header at the start of every data datagram (network byte order).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Sender's monotonic clock, seconds (truncated to 32 bits).
    pub sec: u32,
    /// Microseconds within the second.
    pub usec: u32,
    /// Sequence number, from 1.
    pub seq: u64,
}

impl Header {
    /// Header length: 12 bytes, or 16 with 64-bit counters.
    pub fn len(wide: bool) -> usize {
        if wide {
            16
        } else {
            12
        }
    }

    /// Writes the header into the start of `buf` (at least [`Header::len`]
    /// bytes). With 32-bit counters the sequence wraps as iperf3's does.
    pub fn write(&self, buf: &mut [u8], wide: bool) {
        buf[0..4].copy_from_slice(&self.sec.to_be_bytes());
        buf[4..8].copy_from_slice(&self.usec.to_be_bytes());
        if wide {
            buf[8..16].copy_from_slice(&self.seq.to_be_bytes());
        } else {
            buf[8..12].copy_from_slice(&(self.seq as u32).to_be_bytes());
        }
    }

    /// Reads a header; `None` when the datagram is too short.
    pub fn read(buf: &[u8], wide: bool) -> Option<Header> {
        if buf.len() < Header::len(wide) {
            return None;
        }
        let word = |i: usize| u32::from_be_bytes([buf[i], buf[i + 1], buf[i + 2], buf[i + 3]]);
        let seq = if wide {
            u64::from_be_bytes(buf[8..16].try_into().expect("8 bytes"))
        } else {
            u64::from(word(8))
        };
        Some(Header {
            sec: word(0),
            usec: word(4),
            seq,
        })
    }

    /// The send time in seconds.
    pub fn time_s(&self) -> f64 {
        f64::from(self.sec) + f64::from(self.usec) / 1e6
    }
}

/// iperf3's receiver statistics for one stream (§7 of the reference):
/// `packets` is the highest sequence seen, a gap counts as lost, and a late
/// or repeated datagram counts as out of order and takes one back off the
/// loss count. Jitter is RFC 1889's running estimate (gain 1/16) over the
/// transit times in arrival order, starting from zero.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReceiverStats {
    /// Highest sequence number seen (iperf3's `packet_count`).
    pub highest: u64,
    /// Datagrams counted lost (iperf3's `cnt_error`).
    pub lost: u64,
    /// Datagrams that arrived with a sequence at or below the highest.
    pub out_of_order: u64,
    /// Datagrams that arrived (goodput's addition: iperf3 reports `highest`).
    pub received: u64,
    /// Payload bytes that arrived (whole datagrams).
    pub bytes: u64,
    /// Running jitter estimate, seconds.
    pub jitter_s: f64,
    prev_transit: Option<f64>,
}

impl ReceiverStats {
    /// Counts one datagram of `len` bytes with sequence `seq`, sent at
    /// `sent_s` on the sender's clock and received at `arrival_s` on ours.
    pub fn record(&mut self, seq: u64, len: usize, sent_s: f64, arrival_s: f64) {
        self.received += 1;
        self.bytes += len as u64;
        if seq > self.highest {
            self.lost += seq - self.highest - 1;
            self.highest = seq;
        } else {
            self.out_of_order += 1;
            self.lost = self.lost.saturating_sub(1);
        }
        let transit = arrival_s - sent_s;
        let d = (transit - self.prev_transit.unwrap_or(transit)).abs();
        self.prev_transit = Some(transit);
        self.jitter_s += (d - self.jitter_s) / 16.0;
    }

    /// Loss as a percentage of `highest`.
    pub fn lost_percent(&self) -> f64 {
        if self.highest == 0 {
            0.0
        } else {
            self.lost as f64 * 100.0 / self.highest as f64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn header_matches_the_captured_bytes() {
        // From a 3.12 capture: sec 355, usec 713227, seq 1.
        let wire = [0, 0, 1, 0x63, 0, 0x0A, 0xE2, 0x0B, 0, 0, 0, 1];
        let h = Header::read(&wire, false).unwrap();
        assert_eq!(
            h,
            Header {
                sec: 355,
                usec: 713_227,
                seq: 1
            }
        );
        let mut out = [0u8; 12];
        h.write(&mut out, false);
        assert_eq!(out, wire);
        let mut wide = [0u8; 16];
        h.write(&mut wide, true);
        assert_eq!(&wide[8..], &[0, 0, 0, 0, 0, 0, 0, 1]);
        assert_eq!(Header::read(&wide, true).unwrap(), h);
        assert!(Header::read(&wide[..11], false).is_none());
    }

    #[test]
    fn handshake_bytes() {
        assert_eq!(HELLO, [0x39, 0x38, 0x37, 0x36]);
        assert!(is_reply(&[0x36, 0x37, 0x38, 0x39]));
        assert!(is_reply(&LEGACY_REPLY));
        assert!(!is_reply(&HELLO));
    }

    #[test]
    fn loss_and_reordering_follow_iperf3() {
        let mut s = ReceiverStats::default();
        for seq in [1, 2, 5, 3, 6, 6] {
            s.record(seq, 100, 0.0, 0.0);
        }
        // 5 after 2: 3 and 4 lost (2). 3 late: out of order, loss 1.
        // 6: fine. 6 again: out of order, loss 0.
        assert_eq!(
            (s.highest, s.lost, s.out_of_order, s.received, s.bytes),
            (6, 0, 2, 6, 600)
        );
        let mut t = ReceiverStats::default();
        t.record(4, 1, 0.0, 0.0);
        assert_eq!((t.highest, t.lost), (4, 3));
        assert!((t.lost_percent() - 75.0).abs() < 1e-12);
    }

    #[test]
    fn jitter_is_the_rfc1889_running_estimate() {
        let mut s = ReceiverStats::default();
        // Transits 10 ms, 12 ms, 10 ms: D = 0, 2 ms, 2 ms.
        s.record(1, 1, 0.0, 0.010);
        s.record(2, 1, 1.0, 1.012);
        s.record(3, 1, 2.0, 2.010);
        let j1 = 0.002 / 16.0;
        let j2 = j1 + (0.002 - j1) / 16.0;
        assert!((s.jitter_s - j2).abs() < 1e-12, "{}", s.jitter_s);
    }

    proptest! {
        /// Without duplicates, iperf3's loss count is exactly the number of
        /// sequence numbers up to the highest that never arrived.
        #[test]
        fn loss_is_exact_for_any_order_without_duplicates(
            keep in prop::collection::vec(any::<bool>(), 1..300),
            swaps in prop::collection::vec((0usize..300, 0usize..300), 0..50),
        ) {
            let mut seqs: Vec<u64> = keep.iter().enumerate().filter(|(_, k)| **k).map(|(i, _)| i as u64 + 1).collect();
            for (a, b) in swaps {
                if !seqs.is_empty() {
                    let n = seqs.len();
                    seqs.swap(a % n, b % n);
                }
            }
            let mut s = ReceiverStats::default();
            for &q in &seqs {
                s.record(q, 1, 0.0, 0.0);
            }
            let highest = seqs.iter().copied().max().unwrap_or(0);
            prop_assert_eq!(s.highest, highest);
            prop_assert_eq!(s.lost, highest - seqs.len() as u64);
        }
    }
}
