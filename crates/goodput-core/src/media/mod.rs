//! The UDP media stream: ctsTraffic's frame arithmetic, goodput's own
//! wire format, the receiver's play-out accounting and the figures that
//! go into the result model. No I/O: the engine moves the datagrams.

pub mod limits;
pub mod receiver;
pub mod stats;
pub mod wire;

use wire::DATA_HEADER_LEN;

/// Smallest datagram size a plan may use: two headers and a byte, so that
/// when a frame's last datagram borrows from the one before it (see
/// [`MediaPlan::datagram_sizes`]) both still hold a header and a byte.
pub const MIN_DATAGRAM_BYTES: u32 = 2 * DATA_HEADER_LEN as u32 + 1;
/// Largest datagram size: the most a UDP payload over IPv4 can carry.
pub const MAX_DATAGRAM_BYTES: u32 = 65_507;
/// Most datagrams in one frame: the data header numbers them in 16 bits.
pub const MAX_DATAGRAMS_PER_FRAME: u64 = u16::MAX as u64;

/// Why a stream cannot be planned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// Bit rate, frame rate or length is zero.
    #[error("the bit rate, frame rate and length must all be above zero")]
    Zero,
    /// Length × frame rate does not fit in 32 bits.
    #[error("length × frame rate is {0} frames, more than 4294967295")]
    TooManyFrames(u64),
    /// A frame would not hold one datagram header plus a byte.
    #[error("frames of {frame} bytes are too small: each needs at least {min} (raise the bit rate or lower the frame rate)")]
    FrameTooSmall {
        /// Bytes per frame.
        frame: u64,
        /// The least.
        min: u64,
    },
    /// The stream would be more than 2⁶⁴ bytes.
    #[error("bit rate × length is more than 2^64 bytes")]
    TooLarge,
    /// A datagram would not hold two headers plus a byte, or exceeds UDP.
    #[error("--datagram-size must be {min}..=65507 bytes (got {got})")]
    DatagramSize {
        /// What was asked.
        got: u32,
        /// The least.
        min: u32,
    },
    /// A frame would need more datagrams than the header can number.
    #[error(
        "frames of {frame} bytes need {per_frame} datagrams of at most {datagram} bytes, more than 65535 \
         (raise --datagram-size or --frame-rate, or lower the bit rate)"
    )]
    TooManyDatagrams {
        /// Bytes per frame.
        frame: u64,
        /// Datagram size.
        datagram: u32,
        /// Datagrams one frame would need.
        per_frame: u64,
    },
}

/// The sizes of one frame's datagrams, without a list: `count` datagrams,
/// each `full` bytes except the last two, which are `penult` and `last`
/// (for a one-datagram frame, `last` only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameShape {
    count: u32,
    full: u32,
    penult: u32,
    last: u32,
}

impl FrameShape {
    /// Datagrams per frame (at most [`MAX_DATAGRAMS_PER_FRAME`]).
    pub fn count(&self) -> u32 {
        self.count
    }

    /// The size of datagram `i` (from 0), or `None` past the frame's end.
    pub fn size(&self, i: u32) -> Option<u32> {
        match i {
            i if i >= self.count => None,
            i if i + 1 == self.count => Some(self.last),
            i if i + 2 == self.count => Some(self.penult),
            _ => Some(self.full),
        }
    }

    /// Every size in order.
    pub fn sizes(&self) -> impl Iterator<Item = u32> + '_ {
        (0..self.count).filter_map(|i| self.size(i))
    }
}

/// A stream's shape, computed the same way on both ends (ctsTraffic's
/// arithmetic, README worked example: 25,000,000 b/s, 60 fps, 60 s →
/// 3,600 frames of 52,083 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MediaPlan {
    /// Bits per second, rounded down to whole bytes.
    pub bits_per_second: u64,
    /// Frames per second.
    pub frame_rate: u32,
    /// Stream length, seconds.
    pub length_s: u32,
    /// Frames in the stream (length × rate).
    pub frames: u32,
    /// Bytes in the stream, a whole number of frames.
    pub total_bytes: u64,
    /// Bytes per frame, headers included.
    pub frame_bytes: u64,
    /// Largest datagram, bytes (UDP payload).
    pub datagram_bytes: u32,
}

impl MediaPlan {
    /// Plans a stream. `bits_per_second` is rounded down to a multiple of 8.
    pub fn new(
        bits_per_second: u64,
        frame_rate: u32,
        length_s: u32,
        datagram_bytes: u32,
    ) -> Result<Self, PlanError> {
        let bps = bits_per_second - bits_per_second % 8;
        if bps == 0 || frame_rate == 0 || length_s == 0 {
            return Err(PlanError::Zero);
        }
        if !(MIN_DATAGRAM_BYTES..=MAX_DATAGRAM_BYTES).contains(&datagram_bytes) {
            return Err(PlanError::DatagramSize {
                got: datagram_bytes,
                min: MIN_DATAGRAM_BYTES,
            });
        }
        let frames64 = u64::from(length_s) * u64::from(frame_rate);
        let frames = u32::try_from(frames64).map_err(|_| PlanError::TooManyFrames(frames64))?;
        let mut total = (bps / 8)
            .checked_mul(u64::from(length_s))
            .ok_or(PlanError::TooLarge)?;
        total -= total % frames64;
        let frame_bytes = total / frames64;
        if frame_bytes < DATA_HEADER_LEN as u64 + 1 {
            return Err(PlanError::FrameTooSmall {
                frame: frame_bytes,
                min: DATA_HEADER_LEN as u64 + 1,
            });
        }
        let per_frame = frame_bytes.div_ceil(u64::from(datagram_bytes));
        if per_frame > MAX_DATAGRAMS_PER_FRAME {
            return Err(PlanError::TooManyDatagrams {
                frame: frame_bytes,
                datagram: datagram_bytes,
                per_frame,
            });
        }
        Ok(Self {
            bits_per_second: bps,
            frame_rate,
            length_s,
            frames,
            total_bytes: total,
            frame_bytes,
            datagram_bytes,
        })
    }

    /// The sizes of one frame's datagrams. Each is at most the datagram
    /// size; when that would leave a last datagram too small for a header
    /// and a byte, the one before it is shortened so the last one carries
    /// the header and at least one payload byte (as ctsTraffic). Computed,
    /// not listed: a plan has at most [`MAX_DATAGRAMS_PER_FRAME`].
    pub fn shape(&self) -> FrameShape {
        let min_last = DATA_HEADER_LEN as u64 + 1;
        let d = u64::from(self.datagram_bytes);
        // The plan guarantees 1 <= count <= 65,535 and frame_bytes >= min_last.
        let count = self.frame_bytes.div_ceil(d);
        let rem = self.frame_bytes - (count - 1) * d;
        let (penult, last) = if count == 1 {
            (0, rem)
        } else if rem >= min_last {
            (d, rem)
        } else {
            // d >= 2 * header + 1, so the shortened one still holds a
            // header and a byte.
            (d - (min_last - rem), min_last)
        };
        FrameShape {
            count: count as u32,
            full: self.datagram_bytes,
            penult: penult as u32,
            last: last as u32,
        }
    }

    /// The sizes of one frame's datagrams, in order, as a list (see
    /// [`MediaPlan::shape`]).
    pub fn datagram_sizes(&self) -> Vec<u32> {
        self.shape().sizes().collect()
    }

    /// When frame `k` (1-based) is due, nanoseconds after the stream starts.
    pub fn frame_due_ns(&self, k: u32) -> u64 {
        (u128::from(k) * 1_000_000_000 / u128::from(self.frame_rate)) as u64
    }

    /// Frames the receiver buffers before play-out starts: buffer depth ×
    /// frame rate, at least one and at most the whole stream.
    pub fn buffered_frames(&self, buffer_depth_ms: u64) -> u32 {
        let n = buffer_depth_ms.saturating_mul(u64::from(self.frame_rate)) / 1000;
        n.clamp(1, u64::from(self.frames)) as u32
    }

    /// The rate actually delivered, bits per second (a little below the
    /// nominal rate because of the rounding).
    pub fn effective_bits_per_second(&self) -> f64 {
        self.total_bytes as f64 * 8.0 / f64::from(self.length_s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ctsTraffic's README example, to the byte.
    #[test]
    fn ctstraffic_worked_example() {
        let p = MediaPlan::new(25_000_000, 60, 60, 1400).unwrap();
        assert_eq!(p.frames, 3600);
        assert_eq!(p.total_bytes, 187_498_800);
        assert_eq!(p.frame_bytes, 52_083);
        assert_eq!(p.effective_bits_per_second(), 24_999_840.0);
        let sizes = p.datagram_sizes();
        assert_eq!(sizes.len(), 38);
        assert!(sizes[..37].iter().all(|&s| s == 1400));
        assert_eq!(sizes[37], 283);
        assert_eq!(sizes.iter().map(|&s| u64::from(s)).sum::<u64>(), 52_083);
        assert_eq!(p.buffered_frames(1000), 60);
        assert_eq!(p.frame_due_ns(60), 1_000_000_000);
    }

    #[test]
    fn bit_rate_rounds_down_to_whole_bytes() {
        let p = MediaPlan::new(1_000_007, 10, 1, 1400).unwrap();
        assert_eq!(p.bits_per_second, 1_000_000);
        assert_eq!(p.total_bytes, 125_000);
        assert_eq!(p.frame_bytes, 12_500);
    }

    #[test]
    fn a_short_last_datagram_borrows_from_the_one_before() {
        // 1400 + 10 bytes: 10 is less than a header plus a byte.
        let p = MediaPlan::new(1410 * 8, 1, 1, 1400).unwrap();
        let sizes = p.datagram_sizes();
        let last = DATA_HEADER_LEN as u32 + 1;
        assert_eq!(sizes, vec![1410 - last, last]);
        // Every datagram can hold the header and a byte.
        for d in [MIN_DATAGRAM_BYTES, 100, 1400] {
            for fb in (DATA_HEADER_LEN as u64 + 1)..5000u64 {
                let p = MediaPlan::new(fb * 8, 1, 1, d).unwrap();
                let s = p.datagram_sizes();
                assert_eq!(s.iter().map(|&x| u64::from(x)).sum::<u64>(), fb);
                assert!(
                    s.iter().all(|&x| x as usize > DATA_HEADER_LEN && x <= d),
                    "{fb}: {s:?}"
                );
                assert_eq!(s.len() as u32, p.shape().count());
            }
        }
    }

    /// The computed shape is what the list-building rule gives, for every
    /// frame of up to a few datagrams around the borrowing edge.
    #[test]
    fn the_shape_matches_the_rule_it_replaced() {
        fn by_rule(frame: u64, d: u64) -> Vec<u32> {
            let min_last = DATA_HEADER_LEN as u64 + 1;
            let (mut left, mut out) = (frame, Vec::new());
            while left > 0 {
                let mut size = left.min(d);
                let rest = left - size;
                if rest > 0 && rest < min_last {
                    size -= min_last - rest;
                }
                out.push(size as u32);
                left -= size;
            }
            out
        }
        for d in [MIN_DATAGRAM_BYTES, 100, 1400] {
            for fb in (DATA_HEADER_LEN as u64 + 1)..(4 * u64::from(d)) {
                let p = MediaPlan::new(fb * 8, 1, 1, d).unwrap();
                assert_eq!(p.datagram_sizes(), by_rule(fb, u64::from(d)), "{fb} / {d}");
                assert_eq!(p.shape().size(p.shape().count()), None);
            }
        }
    }

    #[test]
    fn frames_needing_more_datagrams_than_the_header_numbers_are_refused() {
        // 1 frame/s of 100 MB in 1,400-byte datagrams: 71,429 datagrams.
        assert!(matches!(
            MediaPlan::new(800_000_000, 1, 1, 1400),
            Err(PlanError::TooManyDatagrams {
                per_frame: 71_429,
                ..
            })
        ));
        // 65,535 datagrams exactly is the most.
        let p = MediaPlan::new(65_535 * 1400 * 8, 1, 1, 1400).unwrap();
        assert_eq!(p.shape().count(), 65_535);
        // A 35-byte datagram once made a 1-byte datagram (no room for its
        // header): the least is now two headers and a byte.
        assert!(matches!(
            MediaPlan::new(36 * 8, 1, 1, 35),
            Err(PlanError::DatagramSize { min: 69, .. })
        ));
    }

    #[test]
    fn bad_plans_say_why() {
        assert_eq!(MediaPlan::new(0, 60, 60, 1400), Err(PlanError::Zero));
        assert!(matches!(
            MediaPlan::new(8000, 60, 60, 1400),
            Err(PlanError::FrameTooSmall { .. })
        ));
        assert!(matches!(
            MediaPlan::new(8_000_000, 60, 60, 10),
            Err(PlanError::DatagramSize { .. })
        ));
        assert!(matches!(
            MediaPlan::new(8_000_000, 60, 60, 70_000),
            Err(PlanError::DatagramSize { .. })
        ));
        assert!(matches!(
            MediaPlan::new(u64::MAX, u32::MAX, u32::MAX, 1400),
            Err(PlanError::TooManyFrames(_))
        ));
        assert_eq!(MediaPlan::new(u64::MAX, 1, 1000, 1400), Err(PlanError::TooLarge));
    }
}
