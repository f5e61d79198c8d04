//! Feeds arbitrary bytes to the session decoder: it must return an error or
//! a message, never panic, never claim more bytes than it was given, and a
//! decoded message must survive encode → decode unchanged. (Not byte-exact:
//! reserved bytes are ignored, unknown reject codes read as `Other`, and
//! reason text is read lossily.)
#![no_main]

use goodput_core::session::Message;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(Some((msg, used))) = Message::decode(data) {
        assert!(used <= data.len());
        let mut again = Vec::new();
        msg.encode(&mut again);
        let (back, n) = Message::decode(&again).expect("own encoding decodes").expect("complete");
        assert_eq!(n, again.len());
        assert_eq!(back, msg);
    }
});
