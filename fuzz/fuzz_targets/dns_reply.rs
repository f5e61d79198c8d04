//! Feeds arbitrary bytes to `goodput dns`'s reply reader as the engine
//! does, with the id taken from the bytes (so the parse is reached) and
//! the question fixed; then checks what an accepted reply may hold: at
//! most 64 answers kept, each at most 512 bytes, never more kept than
//! counted. An expectation with a value and a pattern is matched
//! against them. None of it may panic.
#![no_main]

use goodput_core::dns::{
    query_name, read_reply, Expectation, QueryType, MAX_ANSWERS_KEPT, MAX_ANSWER_TEXT,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let id = u16::from_be_bytes([
        data.first().copied().unwrap_or(0),
        data.get(1).copied().unwrap_or(0),
    ]);
    let name = query_name("www.goodput.test").expect("a valid name");
    for record in [QueryType::A, QueryType::TXT, QueryType::MX] {
        let Ok(r) = read_reply(data, id, &name, record) else {
            continue;
        };
        assert!(r.answers.len() <= MAX_ANSWERS_KEPT);
        assert!(r.answers.len() as u64 <= u64::from(r.answer_count));
        assert!(r.answers.iter().all(|a| a.len() <= MAX_ANSWER_TEXT));
        let e = Expectation::new(&["192.0.2.1".to_owned()], Some("^v=")).expect("a valid pattern");
        let _ = e.met_by(&r.answers);
    }
});
