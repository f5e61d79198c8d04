//! `/speedtest`: a page that runs M-Lab's ndt7 test from any browser to
//! this agent's beacon, with nothing to install: our own small script,
//! no external assets. It runs the download, then the upload, and shows
//! the rate, the round trip and the retransmissions as they come (the
//! server's TCP_INFO in its measurements). The beacon keeps each subtest
//! in the archive (`state::speedtest`), and holds the page's tests to
//! the ndt7 service's limits (length, subtests at once, per address and
//! per minute).

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{Html, IntoResponse, Response};

use crate::state::Shared;

/// The page, or 404 when the agent serves no ndt7.
pub(crate) async fn page(State(s): State<Arc<Shared>>) -> Response {
    let Some(port) = s.options.ndt7_port else {
        return (
            StatusCode::NOT_FOUND,
            "this agent serves no ndt7 speed test (start it with --ndt7)",
        )
            .into_response();
    };
    let html = PAGE.replace("{{PORT}}", &port.to_string());
    // Its own script, and WebSockets to the ndt7 port of whatever name
    // the browser reached this agent by; nothing else.
    let policy = format!(
        "default-src 'none'; script-src 'self'; connect-src ws://*:{port}; \
         style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    );
    let mut r = ([(header::CACHE_CONTROL, "no-store")], Html(html)).into_response();
    if let Ok(v) = header::HeaderValue::from_str(&policy) {
        r.headers_mut().insert(header::CONTENT_SECURITY_POLICY, v);
    }
    r
}

/// The page's script.
pub(crate) async fn script() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/javascript; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        SCRIPT,
    )
        .into_response()
}

const SCRIPT: &str = r#""use strict";
const PORT = Number(document.body.dataset.port);
const PROTOCOL = "net.measurementlab.ndt.v7";
const base = "ws://" + location.hostname + ":" + PORT + "/ndt/v7/";

function show(row, f) {
  const r = document.getElementById(row);
  if (f.rate !== undefined) r.querySelector(".rate").textContent = (f.rate / 1e6).toFixed(1) + " Mbit/s";
  if (f.rtt !== undefined) r.querySelector(".rtt").textContent = f.rtt;
  if (f.retrans !== undefined) r.querySelector(".retrans").textContent = f.retrans;
  if (f.bytes !== undefined) r.querySelector(".bytes").textContent = f.bytes.toLocaleString();
  r.dataset.rate = f.rate === undefined ? r.dataset.rate : String(f.rate);
}

function server(row, text) {
  let m;
  try { m = JSON.parse(text); } catch (e) { return null; }
  const t = m.TCPInfo || {};
  const f = {};
  if (t.RTT !== undefined && t.MinRTT !== undefined) {
    f.rtt = (t.RTT / 1000).toFixed(2) + " ms (" + (t.MinRTT / 1000).toFixed(2) + " ms)";
  }
  if (t.BytesSent > 0 && t.BytesRetrans !== undefined) {
    f.retrans = (100 * t.BytesRetrans / t.BytesSent).toFixed(2) + " %";
  }
  show(row, f);
  return m;
}

function download() {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(base + "download", PROTOCOL);
    ws.binaryType = "arraybuffer";
    let start = 0, bytes = 0, shown = 0;
    ws.onopen = () => { start = performance.now(); };
    ws.onmessage = (ev) => {
      const now = performance.now();
      if (typeof ev.data === "string") { server("download", ev.data); return; }
      bytes += ev.data.byteLength;
      if (now - shown > 250) {
        shown = now;
        show("download", { rate: bytes * 8 / ((now - start) / 1000), bytes });
      }
    };
    ws.onerror = () => reject(new Error("the download could not run (the agent may be busy: try again in a minute)"));
    ws.onclose = () => {
      if (start > 0) show("download", { rate: bytes * 8 / ((performance.now() - start) / 1000), bytes });
      resolve();
    };
  });
}

function upload() {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(base + "upload", PROTOCOL);
    ws.binaryType = "arraybuffer";
    let closed = false;
    ws.onmessage = (ev) => {
      if (typeof ev.data !== "string") return;
      // The server counts what arrived: its figures are the upload's.
      const m = server("upload", ev.data);
      if (m && m.AppInfo && m.AppInfo.ElapsedTime > 0) {
        show("upload", { rate: m.AppInfo.NumBytes * 8 / (m.AppInfo.ElapsedTime / 1e6), bytes: m.AppInfo.NumBytes });
      }
    };
    ws.onerror = () => reject(new Error("the upload could not run (the agent may be busy: try again in a minute)"));
    ws.onclose = () => { closed = true; resolve(); };
    ws.onopen = () => {
      const start = performance.now();
      let data = new Uint8Array(8192);
      crypto.getRandomValues(data.subarray(0, 1024));
      let sent = 0;
      const pump = () => {
        if (closed) return;
        if (performance.now() - start > 10000) { ws.close(); return; }
        // Twice as large once a sixteenth of what was sent exceeds it.
        if (data.length < (1 << 24) && sent / 16 >= data.length) data = new Uint8Array(data.length * 2);
        while (ws.bufferedAmount < 4 * data.length && !closed) { ws.send(data); sent += data.length; }
        setTimeout(pump, 10);
      };
      pump();
    };
  });
}

const state = document.getElementById("state");
function set(s, text) { state.dataset.state = s; state.textContent = text; }
document.getElementById("start").onclick = async () => {
  const button = document.getElementById("start");
  button.disabled = true;
  try {
    set("download", "download…");
    await download();
    set("upload", "upload…");
    await upload();
    set("done", "done");
  } catch (e) {
    set("failed", e.message);
  }
  button.disabled = false;
};
"#;

const PAGE: &str = r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>goodput speed test</title>
<style>
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 40em; color: #222; }
table { border-collapse: collapse; margin: 1em 0; }
td, th { padding: .3em 1em; text-align: right; border-bottom: 1px solid #ddd; }
th:first-child, td:first-child { text-align: left; }
button { font-size: 1.1em; padding: .4em 1.2em; }
#state { font-weight: bold; }
</style></head>
<body data-port="{{PORT}}">
<h1>Speed test to this host</h1>
<p>M-Lab's ndt7 test to this goodput agent: about ten seconds of download,
then ten of upload. Your address and the figures are kept in the agent's
archive.</p>
<p><button id="start">Start</button> <span id="state" data-state="idle">ready</span></p>
<table>
<tr><th></th><th>rate</th><th>round trip (min)</th><th>retransmitted</th><th>bytes</th></tr>
<tr id="download"><td>download</td><td class="rate">-</td><td class="rtt">-</td><td class="retrans">-</td><td class="bytes">-</td></tr>
<tr id="upload"><td>upload</td><td class="rate">-</td><td class="rtt">-</td><td class="retrans">-</td><td class="bytes">-</td></tr>
</table>
<script src="/speedtest.js"></script>
</body></html>
"#;
