//! Views of goodput's result model: the console, CSV and text files, JSON
//! documents and JSON lines. Each view reads the same typed records, so no
//! two outputs can disagree about a number.
#![warn(missing_docs, unreachable_pub)]

pub mod chart;
mod console;
mod dns;
mod echo;
mod files;
mod format;
mod html;
mod http;
mod intervals;
mod iperf3;
mod media;
mod ndt7;
mod owamp;
mod path;
mod quic;
mod server;
mod sink;
mod stamp;
mod ttcp;

pub use console::{assertions_text, console_line, ConsoleView, Verbosity};
pub use echo::{echo_header, echo_legend, echo_line};
pub use files::{ConnectionFile, ErrorFile, JsonStream, StatusFile, CONNECTION_CSV_HEADER};
pub use format::{connection_line, status_header, status_legend, status_line};
pub use html::{difference, headline_figures, html_report, Better, Figure, Report, ReportChart, ReportInput};
pub use intervals::{read_documents, IntervalDigest, MAX_DOCUMENTS, MAX_INTERVAL_BUCKETS};
pub use iperf3::{iperf3_json, iperf3_summary};
pub use media::{
    media_header, media_legend, media_line, JitterFile, JITTER_CSV_HEADER, MEDIA_CONNECTION_CSV_HEADER,
};
pub use ndt7::{ndt7_server_line, ndt7_server_test_line, ndt7_summary};
pub use owamp::{g3, one_way_text, owamp_summary, twamp_summary};
pub use path::{hop_line, ping_line};
pub use quic::{append_perf_log, quic_summary, PERF_LOG_HEADER};
pub use server::server_service_lines;
pub use sink::{is_stdout, open_output, Output};
pub use stamp::{stamp_header, stamp_legend, stamp_line, stamp_stats_text, PacketFile, PACKET_CSV_HEADER};
pub use ttcp::{ttcp_prefix, ttcp_report};

use goodput_core::result::{ConnectionRecord, Interval, StampPacket, TestResult};

/// A consumer of a run's events. The binary fans events out to every view
/// the user asked for.
pub trait View {
    /// A status interval ended.
    fn interval(&mut self, _iv: &Interval) -> std::io::Result<()> {
        Ok(())
    }
    /// A connection ended.
    fn connection(&mut self, _r: &ConnectionRecord) -> std::io::Result<()> {
        Ok(())
    }
    /// Whether this view shows established connections.
    fn wants_established(&self) -> bool {
        false
    }
    /// A connection was established.
    fn established(&mut self, _index: u64, _local: &str, _remote: &str, _t: f64) -> std::io::Result<()> {
        Ok(())
    }
    /// Whether this view wants every STAMP packet.
    fn wants_packets(&self) -> bool {
        false
    }
    /// A STAMP packet's fate was decided.
    fn packet(&mut self, _p: &StampPacket) -> std::io::Result<()> {
        Ok(())
    }
    /// A trace's hop is complete.
    fn hop(&mut self, _hop: &goodput_core::path::TraceHop) -> std::io::Result<()> {
        Ok(())
    }
    /// A ping's request has its fate.
    fn ping_reply(&mut self, _reply: &goodput_core::path::PingReply) -> std::io::Result<()> {
        Ok(())
    }
    /// A notice for the user.
    fn notice(&mut self, _text: &str) -> std::io::Result<()> {
        Ok(())
    }
    /// The run ended; flush and write closing content.
    fn finish(&mut self, _result: &TestResult) -> std::io::Result<()> {
        Ok(())
    }
}

/// The JSON Schema of the result document, pretty-printed.
pub fn result_schema() -> String {
    let mut schema = serde_json::to_value(schemars::schema_for!(TestResult)).expect("schema serialises");
    close_spec_kinds(&mut schema);
    serde_json::to_string_pretty(&schema).expect("schema serialises") + "\n"
}

/// The JSON Schema of a test spec document (`goodput run`): one spec, or
/// several under `tests`; pretty-printed.
pub fn spec_schema() -> String {
    let mut schema =
        serde_json::to_value(schemars::schema_for!(goodput_core::spec::TestSpec)).expect("schema serialises");
    close_spec_kinds(&mut schema);
    // The document is one spec or `{"tests": [spec, …]}`.
    if let serde_json::Value::Object(root) = &mut schema {
        let one = root.remove("oneOf").unwrap_or_default();
        if let serde_json::Value::Object(defs) = root.entry("definitions").or_insert(serde_json::json!({})) {
            defs.insert("TestSpec".into(), serde_json::json!({ "oneOf": one }));
        }
        root.insert(
            "oneOf".into(),
            serde_json::json!([
                { "$ref": "#/definitions/TestSpec" },
                {
                    "description": "Several tests, run in order.",
                    "type": "object",
                    "required": ["tests"],
                    "properties": {
                        "tests": { "type": "array", "items": { "$ref": "#/definitions/TestSpec" } }
                    },
                    "additionalProperties": false
                }
            ]),
        );
    }
    serde_json::to_string_pretty(&schema).expect("schema serialises") + "\n"
}

/// The JSON Schema of the agent's mesh configuration (`goodput schema --mesh`).
pub fn mesh_schema() -> String {
    let mut schema = serde_json::to_value(schemars::schema_for!(goodput_core::mesh::MeshConfig))
        .expect("schema serialises");
    close_spec_kinds(&mut schema);
    serde_json::to_string_pretty(&schema).expect("schema serialises") + "\n"
}

/// A spec's kind is a tag inside its object, so the derived schema of each
/// kind lists its fields without closing the object; close it, so that the
/// schema refuses an unknown field as `goodput run` does.
fn close_spec_kinds(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Object(o) => {
            let tagged = o
                .get("properties")
                .and_then(|p| p.get("kind"))
                .and_then(|k| k.get("enum"))
                .is_some_and(|e| e.as_array().is_some_and(|a| a.len() == 1));
            if tagged {
                o.insert("additionalProperties".into(), serde_json::Value::Bool(false));
            }
            o.values_mut().for_each(close_spec_kinds);
        }
        serde_json::Value::Array(a) => a.iter_mut().for_each(close_spec_kinds),
        _ => {}
    }
}

/// Writes the result document as pretty JSON.
pub fn write_result_json(path: &std::path::Path, result: &TestResult) -> std::io::Result<()> {
    let mut text = serde_json::to_string_pretty(result).map_err(std::io::Error::other)?;
    text.push('\n');
    let mut out = sink::open_output(path, false)?;
    std::io::Write::write_all(&mut out, text.as_bytes())?;
    std::io::Write::flush(&mut out)
}
