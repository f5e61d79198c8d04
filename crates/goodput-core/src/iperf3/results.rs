//! The results JSON both ends exchange after `TEST_END` (client first).
//! Readers are tolerant the way the protocol's history requires: 3.12/3.13
//! print −1 as 18446744073709551615, pre-3.2 peers omit stream times, and
//! pre-3.14 peers omit the `omitted_*` keys.

use serde_json::{Map, Value};

/// Largest results message goodput reads (iperf3 has no limit; a server
/// report embedded with `--get-server-output` is the big case).
pub const MAX_RESULTS_LEN: u32 = 16 << 20;

/// One side's results.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Results {
    /// CPU use over the test, percent of one CPU: total, user, system.
    pub cpu_util: [f64; 3],
    /// 1: sent TCP with retransmit counts; 0: sent without them (UDP);
    /// −1: only received.
    pub sender_has_retransmits: i64,
    /// The congestion control algorithm in use, when known.
    pub congestion_used: Option<String>,
    /// Per stream.
    pub streams: Vec<StreamResult>,
    /// The server's whole JSON report (`--get-server-output`, JSON mode).
    pub server_output_json: Option<Value>,
    /// The server's text report (`--get-server-output`, text mode).
    pub server_output_text: Option<String>,
}

/// One stream's figures.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct StreamResult {
    /// Stream id (1, 3, 4, …).
    pub id: i64,
    /// Bytes sent (a sending stream) or received.
    pub bytes: u64,
    /// TCP retransmits, −1 when not a sender or unknown.
    pub retransmits: i64,
    /// UDP jitter, seconds.
    pub jitter: f64,
    /// UDP datagrams lost (receiver's count).
    pub errors: i64,
    /// UDP datagrams: sent (sender) or highest sequence seen (receiver).
    pub packets: i64,
    /// Loss and packets during the omit period (3.14+; both or neither).
    pub omitted: Option<(i64, i64)>,
    /// Start, seconds from the stream's start (always 0).
    pub start_time: f64,
    /// End, seconds from the stream's start.
    pub end_time: f64,
}

/// Why a results message cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad results JSON: {0}")]
pub struct ResultsError(pub String);

/// An integer the way iperf3 wrote it: values at or above 2^63 are −1 as
/// printed by 3.12/3.13; floats are truncated.
fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => n
            .as_i64()
            .or_else(|| n.as_u64().map(|u| if u >= 1 << 63 { -1 } else { u as i64 }))
            .or_else(|| n.as_f64().map(|f| f as i64)),
        _ => None,
    }
}

impl Results {
    /// The JSON message.
    pub fn to_json(&self) -> Vec<u8> {
        let mut m = Map::new();
        m.insert("cpu_util_total".into(), self.cpu_util[0].into());
        m.insert("cpu_util_user".into(), self.cpu_util[1].into());
        m.insert("cpu_util_system".into(), self.cpu_util[2].into());
        m.insert(
            "sender_has_retransmits".into(),
            self.sender_has_retransmits.into(),
        );
        if let Some(c) = &self.congestion_used {
            m.insert("congestion_used".into(), c.clone().into());
        }
        let streams = self
            .streams
            .iter()
            .map(|s| {
                let mut o = Map::new();
                o.insert("id".into(), s.id.into());
                o.insert("bytes".into(), s.bytes.into());
                o.insert("retransmits".into(), s.retransmits.into());
                o.insert("jitter".into(), s.jitter.into());
                o.insert("errors".into(), s.errors.into());
                if let Some((e, _)) = s.omitted {
                    o.insert("omitted_errors".into(), e.into());
                }
                o.insert("packets".into(), s.packets.into());
                if let Some((_, p)) = s.omitted {
                    o.insert("omitted_packets".into(), p.into());
                }
                o.insert("start_time".into(), s.start_time.into());
                o.insert("end_time".into(), s.end_time.into());
                Value::Object(o)
            })
            .collect();
        m.insert("streams".into(), Value::Array(streams));
        if let Some(j) = &self.server_output_json {
            m.insert("server_output_json".into(), j.clone());
        }
        if let Some(t) = &self.server_output_text {
            m.insert("server_output_text".into(), t.clone().into());
        }
        serde_json::to_vec(&Value::Object(m)).expect("a JSON map serialises")
    }

    /// Reads a peer's results message.
    pub fn from_json(body: &[u8]) -> Result<Self, ResultsError> {
        let v: Value = serde_json::from_slice(body).map_err(|e| ResultsError(e.to_string()))?;
        let Value::Object(m) = v else {
            return Err(ResultsError("not a JSON object".into()));
        };
        let f = |k: &str| m.get(k).and_then(Value::as_f64);
        let cpu_util = [
            f("cpu_util_total").ok_or_else(|| ResultsError("no cpu_util_total".into()))?,
            f("cpu_util_user").unwrap_or(0.0),
            f("cpu_util_system").unwrap_or(0.0),
        ];
        let sender_has_retransmits = m
            .get("sender_has_retransmits")
            .and_then(int)
            .ok_or_else(|| ResultsError("no sender_has_retransmits".into()))?;
        let Some(Value::Array(list)) = m.get("streams") else {
            return Err(ResultsError("no streams array".into()));
        };
        let mut streams = Vec::with_capacity(list.len().min(1024));
        for (i, s) in list.iter().enumerate() {
            let Value::Object(o) = s else {
                return Err(ResultsError(format!("stream {i} is not an object")));
            };
            let need = |k: &str| {
                o.get(k)
                    .and_then(int)
                    .ok_or_else(|| ResultsError(format!("stream {i} has no {k}")))
            };
            let time = |k: &str| o.get(k).and_then(Value::as_f64).unwrap_or(0.0);
            let omitted = match (
                o.get("omitted_errors").and_then(int),
                o.get("omitted_packets").and_then(int),
            ) {
                (Some(e), Some(p)) => Some((e, p)),
                (None, None) => None,
                _ => {
                    return Err(ResultsError(format!(
                        "stream {i} has only one of omitted_errors/omitted_packets"
                    )))
                }
            };
            streams.push(StreamResult {
                id: need("id")?,
                bytes: need("bytes")?.max(0) as u64,
                retransmits: need("retransmits")?,
                jitter: o
                    .get("jitter")
                    .and_then(Value::as_f64)
                    .ok_or_else(|| ResultsError(format!("stream {i} has no jitter")))?,
                errors: need("errors")?,
                packets: need("packets")?,
                omitted,
                start_time: time("start_time"),
                end_time: time("end_time"),
            });
        }
        Ok(Results {
            cpu_util,
            sender_has_retransmits,
            congestion_used: m
                .get("congestion_used")
                .and_then(Value::as_str)
                .map(str::to_owned),
            streams,
            server_output_json: m.get("server_output_json").cloned(),
            server_output_text: m
                .get("server_output_text")
                .and_then(Value::as_str)
                .map(str::to_owned),
        })
    }

    /// The entry for a stream id.
    pub fn stream(&self, id: i64) -> Option<&StreamResult> {
        self.streams.iter().find(|s| s.id == id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn reads_a_captured_3_12_message_with_unsigned_minus_one() {
        let body = br#"{"cpu_util_total":42.93,"cpu_util_user":0.78,"cpu_util_system":42.15,"sender_has_retransmits":18446744073709551615,"congestion_used":"cubic","streams":[{"id":1,"bytes":1315284484,"retransmits":18446744073709551615,"jitter":0,"errors":0,"packets":0,"start_time":0,"end_time":2.000057},{"id":3,"bytes":1340924028,"retransmits":175,"jitter":0,"errors":0,"packets":0}]}"#;
        let r = Results::from_json(body).unwrap();
        assert_eq!(r.sender_has_retransmits, -1);
        assert_eq!(r.streams.len(), 2);
        assert_eq!(r.streams[0].retransmits, -1);
        assert_eq!(r.stream(3).unwrap().bytes, 1340924028);
        assert_eq!(r.stream(3).unwrap().end_time, 0.0, "pre-3.2 peers send no times");
        assert_eq!(r.congestion_used.as_deref(), Some("cubic"));
    }

    #[test]
    fn refuses_missing_required_keys_and_half_omitted_pairs() {
        assert!(Results::from_json(br#"{"streams":[]}"#).is_err());
        assert!(Results::from_json(
            br#"{"cpu_util_total":1,"sender_has_retransmits":0,"streams":[{"id":1}]}"#
        )
        .is_err());
        assert!(Results::from_json(br#"{"cpu_util_total":1,"sender_has_retransmits":0,"streams":[{"id":1,"bytes":1,"retransmits":0,"jitter":0,"errors":0,"packets":0,"omitted_errors":0}]}"#).is_err());
        assert!(Results::from_json(b"nope").is_err());
    }

    proptest! {
        #[test]
        fn round_trips(
            cpu in prop::array::uniform3(0.0f64..400.0),
            shr in -1i64..=1,
            streams in prop::collection::vec((1i64..200, any::<u64>().prop_map(|b| b >> 1), -1i64..1000, 0.0f64..1.0, 0i64..1000, 0i64..100000, proptest::option::of((0i64..10, 0i64..10)), 0.0f64..100.0), 0..10),
        ) {
            let r = Results {
                cpu_util: cpu,
                sender_has_retransmits: shr,
                congestion_used: Some("cubic".into()),
                streams: streams.into_iter().map(|(id, bytes, retransmits, jitter, errors, packets, omitted, end)| StreamResult {
                    id, bytes, retransmits, jitter, errors, packets, omitted, start_time: 0.0, end_time: end,
                }).collect(),
                server_output_json: None,
                server_output_text: Some("text".into()),
            };
            prop_assert_eq!(Results::from_json(&r.to_json()).unwrap(), r);
        }

        #[test]
        fn arbitrary_input_never_panics(s in "\\PC{0,300}") {
            let _ = Results::from_json(s.as_bytes());
        }
    }
}
