//! The parameter JSON a client sends after `PARAM_EXCHANGE`. Key names and
//! JSON types are exactly iperf3's (a 3.18+ server ignores a key whose type
//! is wrong), unknown keys are ignored, and values are range-checked as
//! iperf3 HEAD does, each failure carrying the iperf3 error code a server
//! sends back.

use serde_json::{Map, Value};

use super::control::errors;

/// Largest parameter message a server accepts (iperf3 3.18+).
pub const MAX_PARAMS_LEN: u32 = 8192;
/// Default TCP block size.
pub const DEFAULT_TCP_LEN: u32 = 128 * 1024;
/// Default UDP datagram size when the control connection's MSS is unknown.
pub const DEFAULT_UDP_LEN: u32 = 1460;
/// Default UDP rate per stream, bits/s ("1M" in iperf3's binary units).
pub const DEFAULT_UDP_BANDWIDTH: u64 = 1 << 20;
/// Most streams per direction.
pub const MAX_PARALLEL: u32 = 128;
/// Longest test, seconds.
pub const MAX_TIME: u32 = 86_400;
/// Longest omit period, seconds.
pub const MAX_OMIT: u32 = 600;
/// Largest TCP block.
pub const MAX_TCP_LEN: u32 = 1 << 20;
/// Smallest and largest UDP datagram.
pub const UDP_LEN: (u32, u32) = (16, 65_507);
/// Largest socket buffer (`-w`).
pub const MAX_WINDOW: u32 = 512 << 20;
/// Largest MSS.
pub const MAX_MSS: u32 = 32_767;

/// Transport of the data streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// TCP streams (connect + cookie).
    Tcp,
    /// UDP streams (4-byte handshake).
    Udp,
}

/// A test's parameters, as both ends understand them.
#[derive(Debug, Clone, PartialEq)]
pub struct Params {
    /// `tcp` or `udp`.
    pub protocol: Protocol,
    /// Seconds discarded at the start (`-O`).
    pub omit: u32,
    /// Test length, seconds (`-t`; 0 when a byte or block count ends it).
    pub time: u32,
    /// Byte count end condition (`-n`, 0 = none).
    pub num: u64,
    /// Block count end condition (`-k`, 0 = none).
    pub blockcount: u64,
    /// Streams per direction (`-P`).
    pub parallel: u32,
    /// Block / datagram size, bytes (`-l`).
    pub len: u32,
    /// Rate per stream, bits/s (`-b`; 0 = unlimited).
    pub bandwidth: u64,
    /// Server sends (`-R`).
    pub reverse: bool,
    /// Both directions (`--bidir`).
    pub bidirectional: bool,
    /// SO_SNDBUF/SO_RCVBUF, bytes (`-w`; 0 = system default).
    pub window: u32,
    /// TCP_MAXSEG (`-M`; 0 = default).
    pub mss: u32,
    /// TCP_NODELAY on data sockets (`-N`).
    pub nodelay: bool,
    /// IP TOS byte (`-S`).
    pub tos: u8,
    /// TCP congestion control (`-C`).
    pub congestion: Option<String>,
    /// Ask the server to return its report (`--get-server-output`).
    pub get_server_output: bool,
    /// 64-bit UDP sequence numbers.
    pub udp_counters_64bit: bool,
    /// Repeating digits payload instead of random bytes.
    pub repeating_payload: bool,
    /// Pacing tick, microseconds (always sent; informational here).
    pub pacing_timer: u32,
    /// SO_MAX_PACING_RATE, bits/s (0 = none).
    pub fqrate: u64,
    /// Packets per burst (0 = no bursts).
    pub burst: u32,
    /// `-T` title.
    pub title: Option<String>,
    /// `--extra-data`.
    pub extra_data: Option<String>,
    /// The client's version string.
    pub client_version: Option<String>,
}

impl Params {
    /// iperf3's defaults for a protocol: 10 s, one stream, default length
    /// and (for UDP) rate.
    pub fn new(protocol: Protocol) -> Self {
        Self {
            protocol,
            omit: 0,
            time: 10,
            num: 0,
            blockcount: 0,
            parallel: 1,
            len: match protocol {
                Protocol::Tcp => DEFAULT_TCP_LEN,
                Protocol::Udp => DEFAULT_UDP_LEN,
            },
            bandwidth: match protocol {
                Protocol::Tcp => 0,
                Protocol::Udp => DEFAULT_UDP_BANDWIDTH,
            },
            reverse: false,
            bidirectional: false,
            window: 0,
            mss: 0,
            nodelay: false,
            tos: 0,
            congestion: None,
            get_server_output: false,
            udp_counters_64bit: false,
            repeating_payload: false,
            pacing_timer: 1000,
            fqrate: 0,
            burst: 0,
            title: None,
            extra_data: None,
            client_version: None,
        }
    }

    /// Number of data connections (twice `parallel` for bidirectional tests).
    pub fn stream_count(&self) -> usize {
        self.parallel as usize * if self.bidirectional { 2 } else { 1 }
    }

    /// The JSON a client sends, with the keys and types iperf3 uses.
    pub fn to_json(&self) -> Vec<u8> {
        let mut m = Map::new();
        let proto = match self.protocol {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
        };
        m.insert(proto.into(), Value::Bool(true));
        m.insert("omit".into(), self.omit.into());
        m.insert("time".into(), self.time.into());
        m.insert("num".into(), self.num.into());
        m.insert("blockcount".into(), self.blockcount.into());
        if self.mss > 0 {
            m.insert("MSS".into(), self.mss.into());
        }
        if self.nodelay {
            m.insert("nodelay".into(), Value::Bool(true));
        }
        m.insert("parallel".into(), self.parallel.into());
        if self.reverse {
            m.insert("reverse".into(), Value::Bool(true));
        }
        if self.bidirectional {
            m.insert("bidirectional".into(), Value::Bool(true));
        }
        if self.window > 0 {
            m.insert("window".into(), self.window.into());
        }
        m.insert("len".into(), self.len.into());
        if self.bandwidth > 0 || self.protocol == Protocol::Udp {
            m.insert("bandwidth".into(), self.bandwidth.into());
        }
        if self.fqrate > 0 {
            m.insert("fqrate".into(), self.fqrate.into());
        }
        m.insert("pacing_timer".into(), self.pacing_timer.into());
        if self.burst > 0 {
            m.insert("burst".into(), self.burst.into());
        }
        if self.tos > 0 {
            m.insert("TOS".into(), self.tos.into());
        }
        if let Some(t) = &self.title {
            m.insert("title".into(), t.clone().into());
        }
        if let Some(t) = &self.extra_data {
            m.insert("extra_data".into(), t.clone().into());
        }
        if let Some(c) = &self.congestion {
            m.insert("congestion".into(), c.clone().into());
        }
        if self.get_server_output {
            m.insert("get_server_output".into(), 1.into());
        }
        if self.udp_counters_64bit {
            m.insert("udp_counters_64bit".into(), 1.into());
        }
        if self.repeating_payload {
            m.insert("repeating_payload".into(), 1.into());
        }
        if let Some(v) = &self.client_version {
            m.insert("client_version".into(), v.clone().into());
        }
        serde_json::to_vec(&Value::Object(m)).expect("a JSON map serialises")
    }

    /// Reads a client's parameter JSON. A key of the wrong JSON type counts
    /// as absent (iperf3 3.18+); unknown keys are ignored; out-of-range
    /// values are refused with the error code iperf3 would send.
    pub fn from_json(body: &[u8]) -> Result<Self, ParamError> {
        let v: Value = serde_json::from_slice(body)
            .map_err(|e| ParamError::new(errors::RECV_PARAMS, format!("parameters are not JSON: {e}")))?;
        let Value::Object(m) = v else {
            return Err(ParamError::new(
                errors::RECV_PARAMS,
                "parameters are not a JSON object",
            ));
        };
        let flag = |k: &str| matches!(m.get(k), Some(Value::Bool(true)));
        let num = |k: &str| -> Option<f64> { m.get(k).and_then(Value::as_f64) };
        let uint = |k: &str| -> Result<Option<u64>, ParamError> {
            match m.get(k) {
                Some(Value::Number(n)) => match n.as_u64() {
                    Some(x) => Ok(Some(x)),
                    None => Err(ParamError::new(
                        errors::RECV_PARAMS,
                        format!("parameter '{k}' must be a non-negative integer (got {n})"),
                    )),
                },
                _ => Ok(None),
            }
        };
        let text = |k: &str| m.get(k).and_then(Value::as_str).map(str::to_owned);
        let protocol = match (flag("tcp"), flag("udp"), flag("sctp")) {
            (_, _, true) => return Err(ParamError::new(errors::NO_SCTP, "SCTP is not supported")),
            (true, false, _) => Protocol::Tcp,
            (false, true, _) => Protocol::Udp,
            _ => {
                return Err(ParamError::new(
                    errors::RECV_PARAMS,
                    "parameters name no protocol (exactly one of tcp, udp)",
                ))
            }
        };
        if flag("mptcp") {
            return Err(ParamError::new(errors::UNIMPLEMENTED, "MPTCP is not supported"));
        }
        if m.contains_key("authtoken") {
            return Err(ParamError::new(
                errors::AUTH_TEST,
                "authentication is not supported",
            ));
        }
        let mut p = Params::new(protocol);
        let range = |k: &str, v: u64, max: u64, code: i32| -> Result<u64, ParamError> {
            if v > max {
                Err(ParamError::new(
                    code,
                    format!("parameter '{k}' is {v}, above {max}"),
                ))
            } else {
                Ok(v)
            }
        };
        // A key that is absent (or of the wrong type) reads as 0.
        let bounded = |k: &str, max: u64, code: i32| range(k, uint(k)?.unwrap_or(0), max, code);
        p.omit = bounded("omit", MAX_OMIT.into(), errors::OMIT)? as u32;
        p.time = bounded("time", MAX_TIME.into(), errors::DURATION)? as u32;
        p.num = uint("num")?.unwrap_or(0);
        p.blockcount = uint("blockcount")?.unwrap_or(0);
        p.parallel = match uint("parallel")?.unwrap_or(1) {
            0 => return Err(ParamError::new(errors::NUM_STREAMS, "parameter 'parallel' is 0")),
            n => range("parallel", n, MAX_PARALLEL.into(), errors::NUM_STREAMS)? as u32,
        };
        if let Some(len) = uint("len")?.filter(|&l| l > 0) {
            let (lo, hi, code) = match protocol {
                Protocol::Tcp => (1, u64::from(MAX_TCP_LEN), errors::BLOCK_SIZE),
                Protocol::Udp => (u64::from(UDP_LEN.0), u64::from(UDP_LEN.1), errors::UDP_BLOCK_SIZE),
            };
            if !(lo..=hi).contains(&len) {
                return Err(ParamError::new(
                    code,
                    format!("parameter 'len' is {len}, outside {lo}..={hi}"),
                ));
            }
            p.len = len as u32;
        }
        p.bandwidth = match uint("bandwidth")? {
            Some(b) => b,
            // A float rate (some builds print doubles) is taken as is.
            None => num("bandwidth")
                .filter(|b| *b >= 0.0)
                .map_or(p.bandwidth, |b| b as u64),
        };
        p.reverse = flag("reverse");
        p.bidirectional = flag("bidirectional");
        if p.reverse && p.bidirectional {
            return Err(ParamError::new(25, "reverse and bidirectional together"));
        }
        p.window = bounded("window", MAX_WINDOW.into(), errors::BUF_SIZE)? as u32;
        p.mss = bounded("MSS", MAX_MSS.into(), errors::MSS)? as u32;
        p.nodelay = flag("nodelay");
        p.tos = bounded("TOS", 255, errors::BAD_TOS)? as u8;
        p.congestion = text("congestion");
        p.get_server_output = uint("get_server_output")?.unwrap_or(0) != 0;
        p.udp_counters_64bit = uint("udp_counters_64bit")?.unwrap_or(0) != 0;
        p.repeating_payload = uint("repeating_payload")?.unwrap_or(0) != 0;
        p.pacing_timer = uint("pacing_timer")?.unwrap_or(1000).min(u64::from(u32::MAX)) as u32;
        p.fqrate = uint("fqrate")?.unwrap_or(0);
        p.burst = bounded("burst", 1000, errors::BURST)? as u32;
        p.title = text("title");
        p.extra_data = text("extra_data");
        p.client_version = text("client_version");
        if protocol == Protocol::Udp && p.udp_counters_64bit && p.len < 20 {
            return Err(ParamError::new(
                errors::UDP_BLOCK_SIZE,
                "64-bit counters need 20-byte datagrams",
            ));
        }
        Ok(p)
    }
}

/// A parameter message a server refuses, with the iperf3 code to send back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ParamError {
    /// iperf3's `i_errno` for the refusal.
    pub code: i32,
    /// What was wrong.
    pub message: String,
}

impl ParamError {
    fn new(code: i32, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn reads_the_captured_3_12_messages() {
        let tcp = br#"{"tcp":true,"omit":0,"time":2,"num":0,"blockcount":0,"parallel":2,"len":131072,"pacing_timer":1000,"client_version":"3.12"}"#;
        let p = Params::from_json(tcp).unwrap();
        assert_eq!(
            (p.protocol, p.time, p.parallel, p.len),
            (Protocol::Tcp, 2, 2, 131072)
        );
        assert_eq!(p.bandwidth, 0);
        assert_eq!(p.client_version.as_deref(), Some("3.12"));

        let udp = br#"{"udp":true,"omit":0,"time":1,"num":0,"blockcount":0,"parallel":3,"len":32768,"bandwidth":1048576,"pacing_timer":1000,"TOS":16,"udp_counters_64bit":1,"repeating_payload":1,"client_version":"3.12"}"#;
        let p = Params::from_json(udp).unwrap();
        assert_eq!(
            (p.protocol, p.parallel, p.len, p.bandwidth, p.tos),
            (Protocol::Udp, 3, 32768, 1 << 20, 16)
        );
        assert!(p.udp_counters_64bit && p.repeating_payload);
    }

    #[test]
    fn writes_exact_types() {
        let mut p = Params::new(Protocol::Tcp);
        p.reverse = true;
        p.nodelay = true;
        p.get_server_output = true;
        p.congestion = Some("reno".into());
        let v: Value = serde_json::from_slice(&p.to_json()).unwrap();
        assert_eq!(v["tcp"], Value::Bool(true));
        assert_eq!(v["reverse"], Value::Bool(true));
        assert_eq!(v["nodelay"], Value::Bool(true));
        assert_eq!(v["get_server_output"], 1);
        assert_eq!(v["num"], 0);
        assert_eq!(v["blockcount"], 0);
        assert_eq!(v["congestion"], "reno");
        assert!(
            v.get("bandwidth").is_none(),
            "unlimited TCP sends no bandwidth key"
        );
        assert!(v.get("udp").is_none());
    }

    #[test]
    fn wrong_types_count_as_absent_and_unknown_keys_are_ignored() {
        let p = Params::from_json(br#"{"tcp":true,"reverse":1,"nodelay":"yes","parallel":2,"whatever":[1]}"#)
            .unwrap();
        assert!(!p.reverse && !p.nodelay);
        assert_eq!(p.parallel, 2);
    }

    #[test]
    fn out_of_range_values_get_iperf3_codes() {
        let code = |j: &str| Params::from_json(j.as_bytes()).unwrap_err().code;
        assert_eq!(code(r#"{"tcp":true,"parallel":200}"#), errors::NUM_STREAMS);
        assert_eq!(code(r#"{"tcp":true,"parallel":0}"#), errors::NUM_STREAMS);
        assert_eq!(code(r#"{"tcp":true,"len":2000000}"#), errors::BLOCK_SIZE);
        assert_eq!(code(r#"{"udp":true,"len":8}"#), errors::UDP_BLOCK_SIZE);
        assert_eq!(code(r#"{"tcp":true,"time":90000}"#), errors::DURATION);
        assert_eq!(code(r#"{"tcp":true,"TOS":300}"#), errors::BAD_TOS);
        assert_eq!(code(r#"{"sctp":true}"#), errors::NO_SCTP);
        assert_eq!(code(r#"{"omit":1}"#), errors::RECV_PARAMS);
        assert_eq!(code(r#"{"tcp":true,"udp":true}"#), errors::RECV_PARAMS);
        assert_eq!(code(r#"[1,2]"#), errors::RECV_PARAMS);
        assert_eq!(code(r#"{"tcp":true,"reverse":true,"bidirectional":true}"#), 25);
        assert_eq!(code(r#"{"tcp":true,"authtoken":"x"}"#), errors::AUTH_TEST);
        assert_eq!(code(r#"{"tcp":true,"time":-1}"#), errors::RECV_PARAMS);
    }

    fn arb_params() -> impl Strategy<Value = Params> {
        (
            any::<bool>(),
            (0u32..=600, 0u32..=86_400, any::<u64>(), any::<u64>(), 1u32..=128),
            (
                any::<u64>(),
                0u8..3,
                0u32..=MAX_WINDOW,
                0u32..=MAX_MSS,
                any::<u8>(),
            ),
            (
                any::<bool>(),
                any::<bool>(),
                any::<bool>(),
                any::<bool>(),
                0u32..=1000,
            ),
            proptest::option::of("[a-z]{1,8}"),
        )
            .prop_map(
                |(
                    udp,
                    (omit, time, num, blocks, parallel),
                    (bw, dir, window, mss, tos),
                    (nd, gso, c64, rep, burst),
                    cc,
                )| {
                    let mut p = Params::new(if udp { Protocol::Udp } else { Protocol::Tcp });
                    p.omit = omit;
                    p.time = time;
                    p.num = num;
                    p.blockcount = blocks;
                    p.parallel = parallel;
                    p.len = if udp { 1400 } else { 65536 };
                    p.bandwidth = if udp { bw } else { bw % 2 * bw };
                    p.reverse = dir == 1;
                    p.bidirectional = dir == 2;
                    p.window = window;
                    p.mss = mss;
                    p.tos = tos;
                    p.nodelay = nd;
                    p.get_server_output = gso;
                    p.udp_counters_64bit = c64;
                    p.repeating_payload = rep;
                    p.burst = burst;
                    p.congestion = cc;
                    p.client_version = Some("goodput".into());
                    p
                },
            )
    }

    proptest! {
        #[test]
        fn written_parameters_read_back_equal(p in arb_params()) {
            let json = p.to_json();
            prop_assert!(json.len() as u32 <= MAX_PARAMS_LEN);
            prop_assert_eq!(Params::from_json(&json).unwrap(), p);
        }

        #[test]
        fn arbitrary_json_never_panics(s in "\\PC{0,200}") {
            let _ = Params::from_json(s.as_bytes());
        }
    }
}
