//! What a media server accepts from a request, and what a stream costs it
//! in memory: every field a peer sends is checked here, before anything is
//! sized from it.

use super::receiver::MediaReceiver;
use super::wire::{RejectReason, Request};
use super::MediaPlan;

/// Bytes a sending stream holds beside its plan: the send buffer (one GSO
/// batch plus two largest datagrams) and the stream's own state.
pub const SENDER_STREAM_BYTES: u64 = 60_000 + 2 * 65_536 + 4096;

/// A server's bounds on one stream's request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MediaLimits {
    /// Highest bit rate, bits/s.
    pub max_bits_per_second: u64,
    /// Longest stream, seconds.
    pub max_length_s: u32,
    /// Highest frame rate, frames/s.
    pub max_frame_rate: u32,
    /// Deepest play-out buffer for an upload the server receives, ms.
    pub max_buffer_ms: u32,
}

impl Default for MediaLimits {
    /// 100 Gbit/s, 7 days, 10,000 frames/s and a 10 s buffer.
    fn default() -> Self {
        Self {
            max_bits_per_second: 100_000_000_000,
            max_length_s: 7 * 24 * 3600,
            max_frame_rate: 10_000,
            max_buffer_ms: 10_000,
        }
    }
}

impl MediaLimits {
    /// Checks a request field by field against the limits, then plans it
    /// (checked arithmetic throughout); the reason says what was refused.
    pub fn check(&self, r: &Request) -> Result<MediaPlan, RejectReason> {
        if r.bits_per_second > self.max_bits_per_second {
            return Err(RejectReason::BitRate);
        }
        if r.length_s > self.max_length_s {
            return Err(RejectReason::Length);
        }
        if r.frame_rate > self.max_frame_rate {
            return Err(RejectReason::FrameRate);
        }
        if r.upload && r.buffer_ms > self.max_buffer_ms {
            return Err(RejectReason::Buffer);
        }
        MediaPlan::new(r.bits_per_second, r.frame_rate, r.length_s, r.datagram_bytes)
            .map_err(|_| RejectReason::BadPlan)
    }

    /// The most memory one stream within these limits can cost the server,
    /// bytes: an upload at the highest frame rate with the deepest buffer.
    pub fn stream_ceiling(&self) -> u64 {
        let frames = u64::from(self.max_buffer_ms) * u64::from(self.max_frame_rate) / 1000;
        let buffered = u32::try_from(frames.max(1)).unwrap_or(u32::MAX);
        MediaReceiver::memory_bytes(buffered).max(SENDER_STREAM_BYTES)
    }
}

/// What a checked stream costs the server, bytes: for an upload, the
/// receiver's play-out ring, sequence windows and histograms at their
/// largest; for a download, the sender's buffers.
pub fn stream_memory(plan: &MediaPlan, upload: bool, buffer_ms: u32) -> u64 {
    if upload {
        MediaReceiver::memory_bytes(plan.buffered_frames(u64::from(buffer_ms)))
    } else {
        SENDER_STREAM_BYTES
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::media::wire::COOKIE_LEN;

    fn request(bps: u64, fps: u32, len: u32, dgram: u32, buffer_ms: u32) -> Request {
        Request {
            nonce: 1,
            bits_per_second: bps,
            frame_rate: fps,
            length_s: len,
            datagram_bytes: dgram,
            upload: true,
            verify_data: true,
            buffer_ms,
            cookie: [0; COOKIE_LEN],
        }
    }

    /// The request that once made a server ask for 171,776,092,160 bytes.
    #[test]
    fn the_exploit_is_refused_field_by_field() {
        let l = MediaLimits::default();
        let mut r = request(100_000_000_000, 7101, 604_800, 65_507, u32::MAX);
        assert_eq!(l.check(&r), Err(RejectReason::Buffer));
        r.buffer_ms = 10_000;
        // Within every limit, the plan is checked: 7101 fps × 7 days is
        // 4.29 billion frames, which fits, and 100 Gbit/s at 7101 fps is
        // 1.76 MB frames in 27 datagrams, so this one is served...
        let p = l.check(&r).unwrap();
        // ...with at most 142,020 ring slots.
        assert!(stream_memory(&p, true, r.buffer_ms) <= l.stream_ceiling());
        r.frame_rate = 10_001;
        assert_eq!(l.check(&r), Err(RejectReason::FrameRate));
        r.frame_rate = 60;
        r.length_s = 604_801;
        assert_eq!(l.check(&r), Err(RejectReason::Length));
        r.length_s = 60;
        r.bits_per_second = 100_000_000_001;
        assert_eq!(l.check(&r), Err(RejectReason::BitRate));
        r.bits_per_second = 1_000_000;
        r.datagram_bytes = 70_000;
        assert_eq!(l.check(&r), Err(RejectReason::BadPlan));
    }

    #[test]
    fn the_ceiling_at_the_defaults_is_a_few_megabytes() {
        let c = MediaLimits::default().stream_ceiling();
        assert!((4 << 20..16 << 20).contains(&c), "{c}");
        // A download's buffer depth is the client's business.
        let p = MediaPlan::new(25_000_000, 60, 10, 1400).unwrap();
        assert_eq!(stream_memory(&p, false, u32::MAX), SENDER_STREAM_BYTES);
    }

    proptest::proptest! {
        /// Any request either is refused or plans within the limits, and
        /// what it would cost is at most the documented ceiling.
        #[test]
        fn any_request_is_refused_or_bounded(
            bps in proptest::prelude::any::<u64>(),
            fps in proptest::prelude::any::<u32>(),
            len in proptest::prelude::any::<u32>(),
            dgram in proptest::prelude::any::<u32>(),
            buffer_ms in proptest::prelude::any::<u32>(),
            upload in proptest::prelude::any::<bool>(),
        ) {
            let l = MediaLimits::default();
            let r = Request { upload, ..request(bps, fps, len, dgram, buffer_ms) };
            if let Ok(p) = l.check(&r) {
                proptest::prop_assert!(p.bits_per_second <= l.max_bits_per_second);
                proptest::prop_assert!(p.frame_rate <= l.max_frame_rate && p.length_s <= l.max_length_s);
                proptest::prop_assert!(u64::from(p.shape().count()) <= crate::media::MAX_DATAGRAMS_PER_FRAME);
                proptest::prop_assert!(stream_memory(&p, upload, buffer_ms) <= l.stream_ceiling());
            }
        }
    }
}
