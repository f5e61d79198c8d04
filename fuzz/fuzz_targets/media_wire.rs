//! Feeds arbitrary bytes to the media wire decoder as the server does, and
//! runs everything the server computes from a request it accepts: the limit
//! check (under the default limits and under limits taken from the input),
//! the plan, the frame shape, the buffer, what the stream may cost, and a
//! receiver fed the input's data datagrams. None of it may panic (overflow
//! checks are on in fuzz builds), and an accepted request must stay within
//! the limits and the documented per-stream ceiling.
#![no_main]

use goodput_core::media::limits::{stream_memory, MediaLimits};
use goodput_core::media::receiver::MediaReceiver;
use goodput_core::media::wire::{Message, DATA_HEADER_LEN};
use goodput_core::media::{MediaPlan, MAX_DATAGRAMS_PER_FRAME};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(m) = Message::decode(data) else {
        return;
    };
    let tail = &data[data.len().min(64)..];
    let word = |i: usize| {
        let mut b = [0u8; 8];
        for (k, x) in tail.iter().skip(i * 8).take(8).enumerate() {
            b[k] = *x;
        }
        u64::from_be_bytes(b)
    };
    match m {
        Message::Request(r) => {
            let limits = [
                MediaLimits::default(),
                MediaLimits {
                    max_bits_per_second: word(0),
                    max_length_s: word(1) as u32,
                    max_frame_rate: word(2) as u32,
                    max_buffer_ms: word(3) as u32,
                },
            ];
            for l in limits {
                let Ok(plan) = l.check(&r) else { continue };
                assert!(plan.bits_per_second <= l.max_bits_per_second);
                assert!(plan.frame_rate <= l.max_frame_rate && plan.length_s <= l.max_length_s);
                let shape = plan.shape();
                let n = u64::from(shape.count());
                assert!(n >= 1 && n <= MAX_DATAGRAMS_PER_FRAME);
                // The sizes add up to the frame, each holds a header and a byte.
                let sum = match n {
                    1 => u64::from(shape.size(0).unwrap()),
                    _ => {
                        (n - 2) * u64::from(shape.size(0).unwrap())
                            + u64::from(shape.size(shape.count() - 2).unwrap())
                            + u64::from(shape.size(shape.count() - 1).unwrap())
                    }
                };
                assert_eq!(sum, plan.frame_bytes);
                for i in [0, shape.count().saturating_sub(2), shape.count() - 1] {
                    let s = shape.size(i).unwrap();
                    assert!(s as usize > DATA_HEADER_LEN && s <= plan.datagram_bytes);
                }
                assert_eq!(plan.total_bytes, plan.frame_bytes * u64::from(plan.frames));
                let _ = plan.frame_due_ns(plan.frames);
                let buffered = plan.buffered_frames(u64::from(r.buffer_ms));
                assert!(buffered >= 1 && buffered <= plan.frames);
                if l == MediaLimits::default() {
                    assert!(stream_memory(&plan, r.upload, r.buffer_ms) <= l.stream_ceiling());
                }
                // Build a receiver only when it is small, to keep the runs fast.
                if buffered <= 4096 {
                    let mut rx = MediaReceiver::new(plan, buffered);
                    feed(&mut rx, tail);
                    let _ = rx.play_until(buffered.saturating_add(2));
                }
            }
        }
        Message::Data(_) => {
            // The data datagram against a small fixed plan.
            let plan = MediaPlan::new(2500 * 8 * 10, 10, 1, 1000).unwrap();
            let mut rx = MediaReceiver::new(plan, 4);
            feed(&mut rx, data);
            let _ = rx.play_until(12);
        }
        _ => {}
    }
});

/// Splits `bytes` into datagrams at each magic and feeds the data ones.
fn feed(rx: &mut MediaReceiver, bytes: &[u8]) {
    for (k, chunk) in bytes.split(|&b| b == 0xFF).enumerate().take(64) {
        if let Ok(Message::Data(h)) = Message::decode(chunk) {
            let _ = rx.datagram(&h, chunk.len(), k as u64 * 1_000_000, chunk.len() % 2 == 0);
        }
    }
}
