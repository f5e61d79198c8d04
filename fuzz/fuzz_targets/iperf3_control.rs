//! Feeds arbitrary bytes to everything a goodput iperf3 server or client
//! reads from a peer: the control decoder (in either expectation, fed in
//! pieces), the parameter reader and the results reader. None may panic; a
//! decoded JSON body never exceeds the limit; parameters that are accepted
//! survive a write → read round trip.
#![no_main]

use goodput_core::iperf3::control::{ControlDecoder, Expect, Message};
use goodput_core::iperf3::params::Params;
use goodput_core::iperf3::results::Results;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let split = data.first().map_or(1, |b| usize::from(*b % 16) + 1);
    let mut d = ControlDecoder::new();
    let mut expect_json = data.get(1).is_some_and(|b| b & 1 == 1);
    for piece in data.chunks(split) {
        d.feed(piece);
        loop {
            let expect = if expect_json { Expect::Json { max: 256 } } else { Expect::State };
            match d.next(expect) {
                Ok(Some(Message::Json(b))) => assert!(!b.is_empty() && b.len() <= 256),
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(_) => return,
            }
            expect_json = !expect_json;
        }
    }
    let _ = d.at_eof();
    if let Ok(p) = Params::from_json(data) {
        assert_eq!(Params::from_json(&p.to_json()).expect("own parameters read back"), p);
    }
    let _ = Results::from_json(data);
});
