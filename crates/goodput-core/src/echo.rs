//! Echo load-test accounting: what one connection sent, what came back, and
//! each message's round trip. The bytes sent are the goodput pattern at a
//! per-connection offset, so every echoed byte can be checked; a message is
//! echoed when its last byte is back, and its round trip runs from the time
//! it was *scheduled* to be sent (open loop), so a slow server cannot hide
//! its delay behind a late send (no coordinated omission).

use std::collections::VecDeque;

use crate::pattern::Pattern;

/// One connection's echo accounting.
#[derive(Debug)]
pub struct EchoTracker {
    size: u64,
    base: u64,
    /// Start times (ns, any clock) of messages sent and not yet echoed.
    waiting: VecDeque<u64>,
    sent_msgs: u64,
    received: u64,
    current_bad: bool,
    /// Messages fully echoed.
    pub echoed: u64,
    /// Echoed messages with at least one wrong byte.
    pub mismatched: u64,
    /// Bytes that came back beyond what was sent.
    pub extra_bytes: u64,
}

impl EchoTracker {
    /// A tracker for messages of `size` bytes whose stream starts at
    /// pattern offset `base`.
    pub fn new(size: usize, base: u64) -> Self {
        Self {
            size: size as u64,
            base,
            waiting: VecDeque::new(),
            sent_msgs: 0,
            received: 0,
            current_bad: false,
            echoed: 0,
            mismatched: 0,
            extra_bytes: 0,
        }
    }

    /// The next message's bytes (pattern offset of the stream so far).
    pub fn next_message<'p>(&self, pattern: &'p Pattern) -> &'p [u8] {
        pattern.slice(self.base + self.sent_msgs * self.size, self.size as usize)
    }

    /// Messages sent.
    pub fn sent(&self) -> u64 {
        self.sent_msgs
    }

    /// Bytes echoed back so far.
    pub fn received_bytes(&self) -> u64 {
        self.received
    }

    /// Messages sent and not fully echoed.
    pub fn outstanding(&self) -> u64 {
        self.waiting.len() as u64
    }

    /// Records that the next message went out; `start_ns` is when it was
    /// scheduled (open loop) or sent (closed loop).
    pub fn sent_one(&mut self, start_ns: u64) {
        self.sent_msgs += 1;
        self.waiting.push_back(start_ns);
    }

    /// Takes in echoed bytes at `now_ns`; calls `done` with each completed
    /// message's round trip (ns) and whether it matched.
    pub fn received_chunk(
        &mut self,
        pattern: &Pattern,
        mut chunk: &[u8],
        now_ns: u64,
        mut done: impl FnMut(u64, bool),
    ) {
        let limit = self.sent_msgs * self.size;
        while !chunk.is_empty() {
            if self.received >= limit {
                self.extra_bytes += chunk.len() as u64;
                return;
            }
            // Up to the end of the current message.
            let msg_end = (self.received / self.size + 1) * self.size;
            let take = ((msg_end - self.received) as usize).min(chunk.len());
            let want = pattern.slice(self.base + self.received, take);
            if want != &chunk[..take] {
                self.current_bad = true;
            }
            self.received += take as u64;
            chunk = &chunk[take..];
            if self.received == msg_end {
                let start = self.waiting.pop_front().unwrap_or(now_ns);
                let ok = !self.current_bad;
                self.echoed += 1;
                if !ok {
                    self.mismatched += 1;
                }
                self.current_bad = false;
                done(now_ns.saturating_sub(start), ok);
            }
        }
    }

    /// At the end: (messages partly echoed, messages not echoed at all).
    pub fn unfinished(&self) -> (u64, u64) {
        let partial = u64::from(!self.received.is_multiple_of(self.size) && !self.waiting.is_empty());
        (partial, self.waiting.len() as u64 - partial)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_echoes_complete_messages_with_round_trips() {
        let p = Pattern::new(64 * 1024);
        let mut t = EchoTracker::new(10, 1000);
        let m0 = t.next_message(&p).to_vec();
        t.sent_one(100);
        let m1 = t.next_message(&p).to_vec();
        t.sent_one(200);
        assert_ne!(m0, m1);
        let mut rtts = Vec::new();
        let both: Vec<u8> = m0.iter().chain(&m1).copied().collect();
        t.received_chunk(&p, &both[..7], 300, |r, ok| rtts.push((r, ok)));
        assert!(rtts.is_empty());
        t.received_chunk(&p, &both[7..15], 400, |r, ok| rtts.push((r, ok)));
        assert_eq!(rtts, vec![(300, true)]);
        assert_eq!(t.unfinished(), (1, 0));
        t.received_chunk(&p, &both[15..], 500, |r, ok| rtts.push((r, ok)));
        assert_eq!(rtts, vec![(300, true), (300, true)]);
        assert_eq!((t.echoed, t.mismatched, t.extra_bytes), (2, 0, 0));
        assert_eq!(t.unfinished(), (0, 0));
        // More than was sent is counted, not matched.
        t.received_chunk(&p, b"xyz", 600, |_, _| panic!("nothing was waiting"));
        assert_eq!(t.extra_bytes, 3);
    }

    #[test]
    fn a_corrupted_byte_marks_its_message_only() {
        let p = Pattern::new(64 * 1024);
        let mut t = EchoTracker::new(4, 0);
        let mut wire = Vec::new();
        for i in 0..3 {
            wire.extend_from_slice(t.next_message(&p));
            t.sent_one(i);
        }
        wire[5] ^= 0xFF;
        let mut oks = Vec::new();
        t.received_chunk(&p, &wire, 10, |_, ok| oks.push(ok));
        assert_eq!(oks, vec![true, false, true]);
        assert_eq!(t.mismatched, 1);
    }

    #[test]
    fn missing_echoes_are_counted_at_the_end() {
        let mut t = EchoTracker::new(8, 0);
        for i in 0..5 {
            t.sent_one(i);
        }
        assert_eq!(t.unfinished(), (0, 5));
        assert_eq!(t.outstanding(), 5);
    }
}
