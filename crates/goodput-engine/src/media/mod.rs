//! UDP media streams (`goodput udp` and the media service of `goodput
//! server`): frames paced by their deadlines and sent with UDP GSO (or
//! `sendmmsg`), received with `recvmmsg` and GRO, played out on the
//! buffer-depth clock. The frame arithmetic, the wire format and all the
//! accounting are in `goodput_core::media`; this module moves datagrams.
//!
//! Both ends run one blocking thread each that owns its sockets and
//! streams and sleeps in `ppoll` until the next frame, play-out, report or
//! datagram: no async runtime between a deadline and its send call.

mod client;
mod server;

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::RawFd;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use goodput_core::media::receiver::{Arrival, MediaReceiver, PlayedFrame};
use goodput_core::media::wire::{DataHeader, Message, Report, DATA_HEADER_LEN};
use goodput_core::media::{FrameShape, MediaPlan};
use goodput_core::pattern::{Pattern, UNIT_LEN};
use goodput_core::result::{MediaDatagram, SendFailure};

use crate::datagram;

pub use client::{run_media, DatagramSink, MediaSpec};
pub use server::{bind_media, BoundMedia, MediaServerSpec, RunningMedia};

/// How often a receiver reports back.
pub(crate) const REPORT_EVERY: Duration = Duration::from_millis(250);
/// A sender stops a stream whose receiver has not reported for this long.
pub(crate) const SILENCE: Duration = Duration::from_secs(3);
/// End and final-report copies (they are small and may be lost).
const COPIES: u8 = 3;
/// Time between End copies.
const END_SPACING: Duration = Duration::from_millis(50);
/// Most datagrams in one GSO send.
const GSO_SEGMENTS: usize = 63;
/// Most bytes in one GSO send.
const GSO_BYTES: usize = 60_000;

/// The monotonic clock, nanoseconds (the send time in every data header).
pub(crate) fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn pattern() -> &'static Pattern {
    static P: OnceLock<Pattern> = OnceLock::new();
    P.get_or_init(|| Pattern::new(65_536))
}

/// Where in the pattern a datagram's payload starts: an even offset that
/// moves with the sequence, so a payload delivered under another
/// datagram's header does not match.
fn payload_offset(seq: u64) -> u64 {
    (seq % (UNIT_LEN as u64 / 2)) * 2
}

/// Whether a data datagram's payload is the pattern slice its sequence says.
pub(crate) fn payload_ok(seq: u64, payload: &[u8]) -> bool {
    payload == pattern().slice(payload_offset(seq), payload.len())
}

/// A run of equal datagrams (the last may be shorter) sent in one call.
#[derive(Debug, Clone, Copy)]
struct Group {
    first: usize,
    count: usize,
    segment: usize,
}

/// Splits a frame's datagram sizes into GSO groups.
fn groups(sizes: impl IntoIterator<Item = u32>) -> Vec<Group> {
    let mut out: Vec<Group> = Vec::new();
    let mut bytes = 0usize;
    let mut closed = true;
    for (i, s) in sizes.into_iter().enumerate() {
        let s = s as usize;
        let joins = match out.last() {
            Some(g) if !closed => {
                s <= g.segment && g.count < GSO_SEGMENTS && bytes + s <= GSO_BYTES.max(g.segment)
            }
            _ => false,
        };
        if joins {
            let g = out.last_mut().expect("a group is open");
            g.count += 1;
            bytes += s;
            // A shorter datagram must end its group.
            closed = s < g.segment;
        } else {
            out.push(Group {
                first: i,
                count: 1,
                segment: s,
            });
            bytes = s;
            closed = false;
        }
    }
    out
}

/// The sending end of one stream.
pub(crate) struct Outgoing {
    plan: MediaPlan,
    shape: FrameShape,
    groups: Vec<Group>,
    stream: u32,
    base: Instant,
    next_frame: u32,
    seq: u64,
    /// Datagrams sent.
    pub(crate) sent: u64,
    /// Bytes sent (UDP payload).
    pub(crate) sent_bytes: u64,
    /// Sends the kernel refused.
    pub(crate) send_errors: u64,
    /// The first refusal.
    pub(crate) first_error: Option<io::Error>,
    /// `send_errors` by reason.
    pub(crate) failures: Vec<SendFailure>,
    gso: bool,
    buf: Vec<u8>,
    /// When the receiver last reported.
    pub(crate) last_heard: Instant,
    /// Its latest report.
    pub(crate) report: Option<Report>,
    ends: u8,
    next_end: Instant,
    from: Option<(IpAddr, u32)>,
}

impl Outgoing {
    /// A stream whose frame clock starts at `base`.
    pub(crate) fn new(plan: MediaPlan, stream: u32, base: Instant, from: Option<(IpAddr, u32)>) -> Self {
        let shape = plan.shape();
        Self {
            groups: groups(shape.sizes()),
            shape,
            plan,
            stream,
            base,
            next_frame: 1,
            seq: 0,
            sent: 0,
            sent_bytes: 0,
            send_errors: 0,
            first_error: None,
            failures: Vec::new(),
            gso: true,
            buf: Vec::with_capacity(GSO_BYTES + 2 * 65_536),
            last_heard: base,
            report: None,
            ends: 0,
            next_end: base,
            from,
        }
    }

    /// Sends every frame that is due, then the End copies; returns the bytes
    /// sent.
    pub(crate) fn pump(&mut self, fd: RawFd, to: Option<SocketAddr>, now: Instant) -> u64 {
        let before = self.sent_bytes;
        while self.next_frame <= self.plan.frames
            && self.base + Duration::from_nanos(self.plan.frame_due_ns(self.next_frame)) <= now
        {
            self.send_frame(fd, to);
            self.next_frame += 1;
        }
        if self.next_frame > self.plan.frames && self.ends < COPIES && now >= self.next_end {
            self.buf.clear();
            Message::End {
                stream: self.stream,
                sent: self.sent,
                send_errors: self.send_errors,
            }
            .encode(&mut self.buf);
            let _ = datagram::send_segments(fd, to, self.from, &self.buf, self.buf.len(), false);
            self.ends += 1;
            self.next_end = now + END_SPACING;
        }
        self.sent_bytes - before
    }

    /// All frames and End copies are out.
    pub(crate) fn finished_sending(&self) -> bool {
        self.next_frame > self.plan.frames && self.ends >= COPIES
    }

    /// When the next frame or End copy is due.
    pub(crate) fn next_wake(&self) -> Option<Instant> {
        if self.next_frame <= self.plan.frames {
            Some(self.base + Duration::from_nanos(self.plan.frame_due_ns(self.next_frame)))
        } else if self.ends < COPIES {
            Some(self.next_end)
        } else {
            None
        }
    }

    /// The receiver has gone quiet for longer than [`SILENCE`].
    pub(crate) fn silent(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.last_heard) > SILENCE
    }

    /// Takes in a report for this stream.
    pub(crate) fn heard(&mut self, r: Report, now: Instant) {
        self.last_heard = now;
        self.report = Some(r);
    }

    fn send_frame(&mut self, fd: RawFd, to: Option<SocketAddr>) {
        // At most 65,535: the plan refuses more.
        let count = self.shape.count() as u16;
        let pat = pattern();
        for gi in 0..self.groups.len() {
            let g = self.groups[gi];
            self.buf.clear();
            let sent_ns = mono_ns();
            for i in g.first..g.first + g.count {
                let size = self.shape.size(i as u32).unwrap_or(0) as usize;
                let seq = self.seq + (i - g.first) as u64;
                Message::Data(DataHeader {
                    stream: self.stream,
                    seq,
                    frame: self.next_frame,
                    index: i as u16,
                    count,
                    sent_ns,
                })
                .encode(&mut self.buf);
                self.buf
                    .extend_from_slice(pat.slice(payload_offset(seq), size.saturating_sub(DATA_HEADER_LEN)));
            }
            let mut r = datagram::send_segments(fd, to, self.from, &self.buf, g.segment, self.gso);
            if matches!(&r, Err(e) if e.kind() == io::ErrorKind::Unsupported) {
                self.gso = false;
                r = datagram::send_segments(fd, to, self.from, &self.buf, g.segment, false);
            }
            let batch = r.unwrap_or_else(|e| datagram::Batch {
                taken: 0,
                refused: g.count,
                error: Some(e),
            });
            // Datagrams the kernel refused still used their sequence
            // numbers: the receiver counts them lost, as on a real path,
            // and the sender counts them not sent, by reason.
            let refused = g.count.saturating_sub(batch.taken);
            self.send_errors += refused as u64;
            if let Some(e) = batch.error {
                if refused > 0 {
                    let (reason, message) = datagram::send_failure_reason(&e);
                    SendFailure::add(&mut self.failures, &reason, &message, refused as u64);
                }
                self.first_error.get_or_insert(e);
            }
            let took = batch.taken.min(g.count);
            self.sent += took as u64;
            // Same-size datagrams but the group's last: the bytes of the
            // ones taken, whichever they were.
            let bytes: usize = (g.first..g.first + took)
                .map(|i| self.shape.size(i as u32).unwrap_or(0) as usize)
                .sum();
            self.sent_bytes += bytes as u64;
            self.seq += g.count as u64;
        }
    }
}

/// The receiving end of one stream.
pub(crate) struct Incoming {
    /// The play-out accounting.
    pub(crate) rx: MediaReceiver,
    plan: MediaPlan,
    stream: u32,
    /// When frame 1 plays.
    play_base: Instant,
    depth: Duration,
    verify: bool,
    /// Bytes received (UDP payload, every copy).
    pub(crate) recv_bytes: u64,
    /// The sender's End count, once heard.
    pub(crate) end_sent: Option<u64>,
    /// The sender's refused sends, from its End.
    pub(crate) end_send_errors: Option<u64>,
    next_report: Instant,
    lasts: u8,
    first_transit: Option<i64>,
    prev: Option<(u64, i64)>,
}

impl Incoming {
    /// A stream opened at `opened` whose frames play `buffer_depth` later.
    pub(crate) fn new(
        plan: MediaPlan,
        stream: u32,
        opened: Instant,
        buffer_depth: Duration,
        verify: bool,
    ) -> Self {
        let buffered = plan.buffered_frames(buffer_depth.as_millis() as u64);
        Self {
            rx: MediaReceiver::new(plan, buffered),
            plan,
            stream,
            play_base: opened + buffer_depth,
            depth: buffer_depth,
            verify,
            recv_bytes: 0,
            end_sent: None,
            end_send_errors: None,
            next_report: opened + REPORT_EVERY,
            lasts: 0,
            first_transit: None,
            prev: None,
        }
    }

    /// Takes in one data datagram (header decoded, `d` the whole datagram)
    /// received at `recv_ns` (realtime clock); `sink` gets its record.
    pub(crate) fn data(
        &mut self,
        h: &DataHeader,
        d: &[u8],
        recv_ns: i64,
        sink: Option<&mut client::DatagramSink>,
    ) -> Arrival {
        self.recv_bytes += d.len() as u64;
        let ok = !self.verify || payload_ok(h.seq, &d[DATA_HEADER_LEN..]);
        let arrival = self.rx.datagram(h, d.len(), recv_ns as u64, ok);
        if let Some(sink) = sink {
            let transit = recv_ns - h.sent_ns as i64;
            let first = *self.first_transit.get_or_insert(transit);
            let ipdv = match self.prev {
                Some((s, t)) if s + 1 == h.seq => Some(transit - t),
                _ => None,
            };
            if arrival != Arrival::Duplicate && arrival != Arrival::Error {
                self.prev = Some((h.seq, transit));
            }
            sink(&MediaDatagram {
                stream: self.stream,
                seq: h.seq,
                frame: h.frame,
                sent_ns: h.sent_ns,
                recv_unix_ns: recv_ns,
                relative_delay_ns: transit - first,
                ipdv_ns: ipdv,
                arrival: match arrival {
                    Arrival::Ok if ok => "ok",
                    Arrival::Ok => "corrupt",
                    Arrival::Duplicate => "duplicate",
                    Arrival::Late => "late",
                    Arrival::Error => "error",
                },
            });
        }
        arrival
    }

    /// The buffer depth: how long after the stream opened play-out starts.
    pub(crate) fn play_delay(&self) -> Duration {
        self.depth
    }

    /// Plays every frame whose time has come.
    pub(crate) fn play(&mut self, now: Instant) -> Vec<PlayedFrame> {
        if now < self.play_base {
            return Vec::new();
        }
        let since = now.duration_since(self.play_base).as_nanos();
        let k = (since * u128::from(self.plan.frame_rate) / 1_000_000_000) as u64 + 1;
        self.rx.play_until((k + 1).min(u64::from(u32::MAX)) as u32)
    }

    /// Whether play-out has begun with nothing received at all (ctsTraffic
    /// then fails the stream).
    pub(crate) fn starved(&self, now: Instant) -> bool {
        now >= self.play_base && self.rx.counts.received == 0 && self.rx.counts.duplicates == 0
    }

    /// Every frame played and the last reports sent.
    pub(crate) fn finished(&self) -> bool {
        self.rx.finished() && self.lasts >= COPIES
    }

    /// A report, when one is due (every [`REPORT_EVERY`], and the last ones
    /// once every frame has played).
    pub(crate) fn report_due(&mut self, now: Instant) -> Option<Report> {
        if self.rx.finished() {
            if self.lasts < COPIES {
                self.lasts += 1;
                return Some(self.rx.report(self.stream, self.end_sent, true));
            }
            return None;
        }
        if now >= self.next_report {
            self.next_report = now + REPORT_EVERY;
            return Some(self.rx.report(self.stream, self.end_sent, false));
        }
        None
    }

    /// When the next frame plays or the next report is due.
    pub(crate) fn next_wake(&self) -> Instant {
        let k = u64::from(self.rx.head().saturating_sub(1));
        let play = self.play_base
            + Duration::from_nanos((u128::from(k) * 1_000_000_000 / u128::from(self.plan.frame_rate)) as u64);
        if self.rx.finished() {
            return Instant::now();
        }
        play.min(self.next_report)
    }
}

/// Sends one small control message.
pub(crate) fn send_message(
    fd: RawFd,
    to: Option<SocketAddr>,
    from: Option<(IpAddr, u32)>,
    m: &Message,
) -> io::Result<()> {
    let mut b = Vec::with_capacity(96);
    m.encode(&mut b);
    let sent = datagram::send_segments(fd, to, from, &b, b.len(), false)?;
    match sent.error {
        Some(e) if sent.taken == 0 => Err(e),
        _ => Ok(()),
    }
}

/// Splits a received buffer (GRO may have joined several datagrams of
/// `segment` bytes) into its datagrams; an empty datagram is one too.
pub(crate) fn datagrams(buf: &[u8], segment: Option<u16>) -> impl Iterator<Item = &[u8]> {
    let seg = segment.map_or(buf.len().max(1), |s| usize::from(s).max(1));
    std::iter::once(buf)
        .filter(|b| b.is_empty())
        .chain(buf.chunks(seg))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_keep_short_datagrams_last() {
        let p = MediaPlan::new(25_000_000, 60, 60, 1400).unwrap();
        let g = groups(p.datagram_sizes());
        assert_eq!(g.len(), 1);
        assert_eq!((g[0].count, g[0].segment), (38, 1400));
        // Shortened second-to-last: 1400 ×2, 1375, 35 → the 1375 closes a group.
        let sizes = [1400, 1400, 1375, 35];
        let g = groups(sizes.iter().copied());
        assert_eq!(g.iter().map(|g| g.count).collect::<Vec<_>>(), vec![3, 1]);
        // Large frames split by count and bytes.
        let sizes = vec![1400u32; 200];
        let g = groups(sizes.iter().copied());
        assert!(g
            .iter()
            .all(|g| g.count * 1400 <= GSO_BYTES && g.count <= GSO_SEGMENTS));
        assert_eq!(g.iter().map(|g| g.count).sum::<usize>(), 200);
        // Jumbo datagrams go one per group.
        let g = groups([65_000, 65_000, 100]);
        assert_eq!(g.iter().map(|g| g.count).collect::<Vec<_>>(), vec![1, 1, 1]);
    }

    #[test]
    fn payloads_depend_on_the_sequence() {
        let p = pattern().slice(payload_offset(7), 100).to_vec();
        assert!(payload_ok(7, &p));
        assert!(!payload_ok(8, &p));
        let mut bad = p.clone();
        bad[50] ^= 1;
        assert!(!payload_ok(7, &bad));
    }
}
