//! The receiving end of a media stream: datagrams into frame slots, frames
//! played out on the buffer-depth clock and classified as ctsTraffic does
//! (completed: exactly the frame's bytes; dropped: fewer; repeated: more,
//! because a datagram came twice), plus datagram loss, duplicates, RFC 4737
//! reordering with extent, late arrivals, RFC 3550 jitter and RFC 3393
//! IPDV from the send timestamps (the clock offset cancels in both).

use std::collections::VecDeque;

use super::wire::{DataHeader, Report};
use super::{FrameShape, MediaPlan};
use crate::stamp::stats::SignedHistogram;

/// How many recent arrivals reordering extent looks back over.
const EXTENT_WINDOW: usize = 4096;
/// How many recent sequences duplicate detection and IPDV remember (a
/// datagram older than this behind the highest counts as a duplicate).
const SEQ_WINDOW: u64 = 1 << 13;
/// Most frames a receiver buffers ahead of play-out; its ring holds twice
/// as many slots.
pub const MAX_BUFFERED_FRAMES: u32 = 1 << 17;
/// Most memory the transit and IPDV histograms can take (four auto-resizing
/// HdrHistograms at 3 significant digits over the whole i64 range, about
/// 442 KB each).
const HISTOGRAM_BYTES: u64 = 4 * 448 * 1024;

/// What happened to one datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrival {
    /// Counted into its frame.
    Ok,
    /// Its sequence had arrived before.
    Duplicate,
    /// Its frame had already been played.
    Late,
    /// Frame number outside the stream or the buffer window, or the header
    /// does not match the plan.
    Error,
}

/// A played frame's fate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameFate {
    /// All its bytes, once.
    Completed,
    /// Fewer bytes than the frame holds (a datagram lost or late).
    Dropped,
    /// More bytes: a datagram arrived twice.
    Repeated,
}

/// One played frame, for the jitter file.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PlayedFrame {
    /// Frame number.
    pub frame: u32,
    /// Its fate.
    pub fate: FrameFate,
    /// Send and receive time of its last datagram (sender's and our
    /// monotonic clocks, ns), when any arrived.
    pub last: Option<(u64, u64)>,
}

#[derive(Debug, Clone, Default)]
struct Slot {
    frame: u32,
    bytes: u64,
    last: Option<(u64, u64)>,
}

/// Counts over a stream (and, by difference, over an interval).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MediaCounts {
    /// Distinct datagrams received.
    pub received: u64,
    /// Datagrams whose sequence arrived again.
    pub duplicates: u64,
    /// RFC 4737 reordered datagrams.
    pub reordered: u64,
    /// Sum of reordering extents (for the mean).
    pub extent_sum: u64,
    /// Largest reordering extent.
    pub extent_max: u64,
    /// Datagrams for frames already played.
    pub late: u64,
    /// Datagrams out of the stream or the window, or not matching the plan.
    pub errors: u64,
    /// Datagrams whose payload did not match the pattern.
    pub corrupt: u64,
    /// Frames played complete.
    pub completed: u64,
    /// Frames played short.
    pub dropped: u64,
    /// Frames played with a datagram twice.
    pub repeated: u64,
}

/// One stream's receiver.
#[derive(Debug)]
pub struct MediaReceiver {
    plan: MediaPlan,
    shape: FrameShape,
    ring: Vec<Slot>,
    /// Next frame to play (1-based); frames below it are played.
    head: u32,
    /// Counts so far.
    pub counts: MediaCounts,
    next_exp: Option<u64>,
    arrivals: VecDeque<(u64, u64)>,
    arrival_pos: u64,
    highest: Option<u64>,
    /// Per slot `seq % SEQ_WINDOW`: the sequence + 1 stored there (0 =
    /// none) and its transit time.
    seen_seq: Vec<u64>,
    seen_transit: Vec<i64>,
    jitter_ns: f64,
    prev_transit: Option<i64>,
    first_transit: Option<i64>,
    /// Transit (receive − send) of each datagram relative to the first
    /// datagram's, so the unknown clock offset cancels; delay variation
    /// (RFC 5481) is this minus its minimum.
    pub transit: SignedHistogram,
    /// IPDV between consecutive sequences.
    pub ipdv: SignedHistogram,
}

impl MediaReceiver {
    /// A receiver for `plan` buffering `buffered` frames ahead of play-out
    /// (at most [`MAX_BUFFERED_FRAMES`]; more are taken as that many).
    pub fn new(plan: MediaPlan, buffered: u32) -> Self {
        let ring = Self::ring_slots(buffered);
        Self {
            plan,
            shape: plan.shape(),
            ring: vec![Slot::default(); ring],
            head: 1,
            counts: MediaCounts::default(),
            next_exp: None,
            arrivals: VecDeque::new(),
            arrival_pos: 0,
            highest: None,
            seen_seq: vec![0; SEQ_WINDOW as usize],
            seen_transit: vec![0; SEQ_WINDOW as usize],
            jitter_ns: 0.0,
            prev_transit: None,
            first_transit: None,
            transit: SignedHistogram::default(),
            ipdv: SignedHistogram::default(),
        }
    }

    fn ring_slots(buffered: u32) -> usize {
        2 * buffered.clamp(1, MAX_BUFFERED_FRAMES) as usize
    }

    /// The most memory a receiver buffering `buffered` frames can take,
    /// bytes: its ring, sequence and reordering windows, and histograms at
    /// their largest.
    pub fn memory_bytes(buffered: u32) -> u64 {
        let ring = Self::ring_slots(buffered) as u64 * std::mem::size_of::<Slot>() as u64;
        let windows = SEQ_WINDOW * 16 + EXTENT_WINDOW as u64 * 16;
        ring + windows + HISTOGRAM_BYTES + std::mem::size_of::<Self>() as u64
    }

    /// The next frame to be played.
    pub fn head(&self) -> u32 {
        self.head
    }

    /// RFC 3550 interarrival jitter, nanoseconds.
    pub fn jitter_ns(&self) -> f64 {
        self.jitter_ns
    }

    /// Highest sequence seen.
    pub fn highest_seq(&self) -> Option<u64> {
        self.highest
    }

    /// Datagrams lost so far, given that `sent` were sent (use the highest
    /// sequence + 1 while the stream runs, the End message's count after).
    pub fn lost(&self, sent: u64) -> u64 {
        sent.saturating_sub(self.counts.received)
    }

    /// Takes in a datagram of `len` bytes (header included) that arrived at
    /// `recv_ns`; `payload_ok` is false when its payload failed the pattern.
    pub fn datagram(&mut self, h: &DataHeader, len: usize, recv_ns: u64, payload_ok: bool) -> Arrival {
        let frames = self.plan.frames;
        let expected = self.shape.size(u32::from(h.index));
        if h.frame == 0
            || h.frame > frames
            || u32::from(h.count) != self.shape.count()
            || expected.map(|e| e as usize) != Some(len)
        {
            self.counts.errors += 1;
            return Arrival::Error;
        }
        // Duplicates by sequence.
        let transit = recv_ns as i64 - h.sent_ns as i64;
        if self.seen_before(h.seq) {
            self.counts.duplicates += 1;
            // A repeat still lands in its frame (which then plays Repeated).
            self.add_to_frame(h.frame, len, h.sent_ns, recv_ns);
            return Arrival::Duplicate;
        }
        self.counts.received += 1;
        if !payload_ok {
            self.counts.corrupt += 1;
        }
        self.order(h.seq);
        self.remember(h.seq, transit);
        // RFC 3550 jitter in arrival order.
        if let Some(p) = self.prev_transit {
            let d = (transit - p).unsigned_abs() as f64;
            self.jitter_ns += (d - self.jitter_ns) / 16.0;
        }
        self.prev_transit = Some(transit);
        let first = *self.first_transit.get_or_insert(transit);
        self.transit.record(transit - first);
        if h.frame < self.head {
            self.counts.late += 1;
            return Arrival::Late;
        }
        if !self.in_window(h.frame) {
            self.counts.errors += 1;
            return Arrival::Error;
        }
        self.add_to_frame(h.frame, len, h.sent_ns, recv_ns);
        Arrival::Ok
    }

    /// Whether `frame` is in the ring's window (wide arithmetic: the head
    /// plus the ring can pass `u32::MAX`).
    fn in_window(&self, frame: u32) -> bool {
        frame >= self.head && u64::from(frame) < u64::from(self.head) + self.ring.len() as u64
    }

    fn add_to_frame(&mut self, frame: u32, len: usize, sent_ns: u64, recv_ns: u64) {
        if !self.in_window(frame) {
            return;
        }
        let n = self.ring.len();
        let slot = &mut self.ring[frame as usize % n];
        if slot.frame != frame {
            *slot = Slot {
                frame,
                bytes: 0,
                last: None,
            };
        }
        slot.bytes += len as u64;
        slot.last = Some((sent_ns, recv_ns));
    }

    fn slot(seq: u64) -> usize {
        (seq % SEQ_WINDOW) as usize
    }

    fn transit_of(&self, seq: u64) -> Option<i64> {
        let i = Self::slot(seq);
        (self.seen_seq[i] == seq + 1).then(|| self.seen_transit[i])
    }

    fn seen_before(&self, seq: u64) -> bool {
        match self.highest {
            None => false,
            Some(h) if seq > h => false,
            Some(h) if h - seq >= SEQ_WINDOW => true,
            Some(_) => self.seen_seq[Self::slot(seq)] == seq + 1,
        }
    }

    fn remember(&mut self, seq: u64, transit: i64) {
        // IPDV of each consecutive pair, once both have arrived.
        if let Some(t) = seq.checked_sub(1).and_then(|p| self.transit_of(p)) {
            self.ipdv.record(transit - t);
        }
        if let Some(t) = self.transit_of(seq + 1) {
            self.ipdv.record(t - transit);
        }
        let i = Self::slot(seq);
        self.seen_seq[i] = seq + 1;
        self.seen_transit[i] = transit;
        self.highest = Some(self.highest.map_or(seq, |h| h.max(seq)));
    }

    /// RFC 4737 §4: reordered when below NextExp; extent = arrival
    /// positions back to the earliest arrival with a greater sequence.
    fn order(&mut self, seq: u64) {
        let pos = self.arrival_pos;
        self.arrival_pos += 1;
        match self.next_exp {
            Some(n) if seq < n => {
                self.counts.reordered += 1;
                if let Some(&(_, i)) = self.arrivals.iter().find(|&&(s, _)| s > seq) {
                    let extent = pos - i;
                    self.counts.extent_sum += extent;
                    self.counts.extent_max = self.counts.extent_max.max(extent);
                }
            }
            _ => self.next_exp = Some(seq + 1),
        }
        self.arrivals.push_back((seq, pos));
        if self.arrivals.len() > EXTENT_WINDOW {
            self.arrivals.pop_front();
        }
    }

    /// Plays every frame before `frame` (1-based; frames past the stream's
    /// end are not played) and returns them in order.
    pub fn play_until(&mut self, frame: u32) -> Vec<PlayedFrame> {
        let stop = frame.min(self.plan.frames + 1);
        let mut out = Vec::new();
        let n = self.ring.len();
        while self.head < stop {
            let k = self.head;
            let slot = std::mem::take(&mut self.ring[k as usize % n]);
            let (bytes, last) = if slot.frame == k {
                (slot.bytes, slot.last)
            } else {
                (0, None)
            };
            let fate = match bytes.cmp(&self.plan.frame_bytes) {
                std::cmp::Ordering::Equal => FrameFate::Completed,
                std::cmp::Ordering::Less => FrameFate::Dropped,
                std::cmp::Ordering::Greater => FrameFate::Repeated,
            };
            match fate {
                FrameFate::Completed => self.counts.completed += 1,
                FrameFate::Dropped => self.counts.dropped += 1,
                FrameFate::Repeated => self.counts.repeated += 1,
            }
            out.push(PlayedFrame { frame: k, fate, last });
            self.head += 1;
        }
        out
    }

    /// The report a receiver sends back: its counts so far; loss from
    /// `sent` when the sender's End has told it, else from the highest
    /// sequence seen.
    pub fn report(&self, stream: u32, sent: Option<u64>, last: bool) -> Report {
        let c = &self.counts;
        let sent = sent.unwrap_or_else(|| self.highest.map_or(0, |h| h + 1));
        Report {
            stream,
            received: c.received,
            lost: self.lost(sent),
            highest_seq: self.highest.unwrap_or(u64::MAX),
            duplicates: c.duplicates,
            reordered: c.reordered,
            late: c.late,
            errors: c.errors,
            corrupt: c.corrupt,
            completed: c.completed.min(u64::from(u32::MAX)) as u32,
            dropped: c.dropped.min(u64::from(u32::MAX)) as u32,
            repeated: c.repeated.min(u64::from(u32::MAX)) as u32,
            jitter_ns: self.jitter_ns as u64,
            last,
        }
    }

    /// Whether every frame has been played.
    pub fn finished(&self) -> bool {
        self.head > self.plan.frames
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 10 frames of 3 datagrams (1000 + 1000 + 500 bytes).
    fn plan() -> MediaPlan {
        MediaPlan::new(2500 * 8 * 10, 10, 1, 1000).unwrap()
    }

    struct Feed {
        r: MediaReceiver,
        sizes: Vec<u32>,
    }

    impl Feed {
        fn new(buffered: u32) -> Self {
            let p = plan();
            Self {
                sizes: p.datagram_sizes(),
                r: MediaReceiver::new(p, buffered),
            }
        }
        /// Datagram `seq` (frame = seq / 3 + 1), sent at seq ms, received
        /// `delay` ms later.
        fn send(&mut self, seq: u64, delay_ms: u64) -> Arrival {
            let i = (seq % 3) as u16;
            let h = DataHeader {
                stream: 1,
                seq,
                frame: (seq / 3) as u32 + 1,
                index: i,
                count: 3,
                sent_ns: seq * 1_000_000,
            };
            let len = self.sizes[usize::from(i)] as usize;
            self.r.datagram(&h, len, (seq + delay_ms) * 1_000_000, true)
        }
    }

    /// The exploit's plan (7101 fps for 7 days) with a buffer of 2^32 - 1
    /// frames once sized the ring in 32-bit arithmetic: 171,776,092,160
    /// bytes. The ring is now capped, and so is what it can cost.
    #[test]
    fn the_ring_is_bounded_whatever_the_depth() {
        let p = MediaPlan::new(100_000_000_000, 7101, 604_800, 65_507).unwrap();
        let buffered = p.buffered_frames(u64::from(u32::MAX));
        assert_eq!(buffered, p.frames);
        let mut r = MediaReceiver::new(p, buffered);
        assert_eq!(r.ring.len(), 2 * MAX_BUFFERED_FRAMES as usize);
        assert!(MediaReceiver::memory_bytes(u32::MAX) < 16 << 20);
        // A frame past the window is an error, not an index out of range.
        let shape = p.shape();
        let h = DataHeader {
            stream: 1,
            seq: 0,
            frame: 2 * MAX_BUFFERED_FRAMES + 1,
            index: 0,
            count: shape.count() as u16,
            sent_ns: 0,
        };
        assert_eq!(
            r.datagram(&h, shape.size(0).unwrap() as usize, 1, true),
            Arrival::Error
        );
        let h = DataHeader {
            frame: u32::MAX,
            seq: 1,
            ..h
        };
        assert_eq!(
            r.datagram(&h, shape.size(0).unwrap() as usize, 1, true),
            Arrival::Error
        );
    }

    #[test]
    fn sizes_of_the_test_plan() {
        assert_eq!(plan().datagram_sizes(), vec![1000, 1000, 500]);
        assert_eq!(plan().frames, 10);
    }

    /// Every 10th datagram dropped, one duplicated, one pair swapped: the
    /// counts equal what was done to the stream.
    #[test]
    fn drops_duplicates_and_swaps_are_counted_exactly() {
        let mut f = Feed::new(10);
        let mut order: Vec<u64> = (0..30).filter(|s| s % 10 != 9).collect();
        // Swap 4 and 5; repeat 12.
        let a = order.iter().position(|&s| s == 4).unwrap();
        order.swap(a, a + 1);
        let b = order.iter().position(|&s| s == 12).unwrap();
        order.insert(b + 1, 12);
        for s in order {
            f.send(s, 5);
        }
        let played = f.r.play_until(11);
        assert_eq!(played.len(), 10);
        let c = f.r.counts;
        assert_eq!(c.received, 27);
        assert_eq!(f.r.lost(30), 3);
        assert_eq!(c.duplicates, 1);
        assert_eq!(c.reordered, 1);
        assert_eq!((c.extent_sum, c.extent_max), (1, 1));
        // Seqs 9, 19, 29 are in frames 4, 7, 10; 12 is in frame 5.
        assert_eq!((c.completed, c.dropped, c.repeated), (6, 3, 1));
        assert_eq!(played[4].fate, FrameFate::Repeated);
        assert_eq!(played[3].fate, FrameFate::Dropped);
        assert_eq!(c.late + c.errors, 0);
    }

    #[test]
    fn late_and_out_of_window_datagrams() {
        let mut f = Feed::new(2); // ring of 4 frames
        f.send(0, 1);
        f.r.play_until(2); // frame 1 played (short: 1 of 3 datagrams)
        assert_eq!(f.send(1, 1), Arrival::Late);
        // Frame 6 is beyond head 2 + ring 4.
        assert_eq!(f.send(15, 1), Arrival::Error);
        // Past the last frame.
        let h = DataHeader {
            stream: 1,
            seq: 99,
            frame: 11,
            index: 0,
            count: 3,
            sent_ns: 0,
        };
        assert_eq!(f.r.datagram(&h, 1000, 0, true), Arrival::Error);
        // A length the plan does not have.
        let h = DataHeader { frame: 2, ..h };
        assert_eq!(f.r.datagram(&h, 999, 0, true), Arrival::Error);
        assert_eq!(
            (f.r.counts.late, f.r.counts.errors, f.r.counts.dropped),
            (1, 3, 1)
        );
    }

    #[test]
    fn constant_delay_has_no_jitter_and_a_step_shows_in_ipdv() {
        let mut f = Feed::new(10);
        for s in 0..10 {
            f.send(s, 5);
        }
        assert_eq!(f.r.jitter_ns(), 0.0);
        assert_eq!(f.r.ipdv.max(), 0);
        f.send(10, 9); // 4 ms more than the one before
        assert_eq!(f.r.ipdv.max(), 4_000_000);
        assert!((f.r.jitter_ns() - 4_000_000.0 / 16.0).abs() < 1.0);
        // Transit includes any offset; its spread does not.
        assert_eq!(f.r.transit.max() - f.r.transit.min(), 4_000_000);
    }

    #[test]
    fn corrupt_payloads_are_counted_and_the_frame_still_plays() {
        let mut f = Feed::new(10);
        let h = DataHeader {
            stream: 1,
            seq: 0,
            frame: 1,
            index: 0,
            count: 3,
            sent_ns: 0,
        };
        f.r.datagram(&h, 1000, 1, false);
        f.send(1, 0);
        f.send(2, 0);
        f.r.play_until(2);
        assert_eq!((f.r.counts.corrupt, f.r.counts.completed), (1, 1));
    }
}
