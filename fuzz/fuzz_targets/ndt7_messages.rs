//! Feeds arbitrary bytes to what goodput's ndt7 client and server read
//! from a peer: a measurement message (as text) and the kernel's
//! TCP_INFO bytes of any length. Neither may panic; a measurement that
//! reads writes back to one that reads the same.
#![no_main]

use goodput_core::ndt7::{Measurement, TcpInfo};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(m) = Measurement::parse(text) {
            let again = Measurement::parse(&m.to_text()).expect("a written measurement reads");
            assert_eq!(again, m);
        }
    }
    let t = TcpInfo::from_kernel(data, 0);
    if let Some(r) = t.retransmission_ratio() {
        assert!((0.0..=1.0).contains(&r));
    }
});
