//! The part of pScheduler's REST API (`/pscheduler`, HTTPS) that a
//! perfSONAR lead calls on a throughput test's destination, on its own
//! listener: the host's identity, the tools it offers, the task, the free
//! time for its runs, each run (its participant data, this end's result)
//! and their cancellation. Answers take pScheduler's shapes: data as JSON,
//! everything else (and every refusal) as one line of plain text with
//! pScheduler's status codes, so a lead reports a refusal as it would its
//! own host's. The state is [`crate::state::pscheduler`].
//!
//! pScheduler's API has no token: the leads that may use it are named by
//! address (`--pscheduler-allow`, else `--allow`), and a task is visible
//! and changeable only from the address that made it.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{ConnectInfo, DefaultBodyLimit, Path, Query, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use goodput_core::stamp::Cidr;
use serde_json::{json, Value};

use crate::clock;
use crate::http::accept::{ApiListener, Caller};
use crate::http::listen::Gate;
use crate::log::log;
use crate::state::pscheduler::{book_run, iso, PsOptions, PsRefusal, PsState, Throughput};
use crate::state::pscheduler_single::{self as single, SingleState, SingleTest, TestType};

use super::Ctx;

/// The highest API level spoken (pScheduler 5's).
const API_LEVEL: u64 = 6;
/// Largest request body (a task is a few kilobytes).
const MAX_BODY: usize = 64 << 10;
/// Longest a lead may have a run's result waited for, seconds.
const MAX_WAIT_S: u64 = 60;

#[derive(Clone)]
struct Participant {
    shared: Ctx,
    state: Arc<PsState>,
    /// The rtt and trace tasks this agent leads.
    single: Arc<SingleState>,
    options: Arc<PsOptions>,
    allow: Arc<Vec<Cidr>>,
}

/// An answer in pScheduler's plain-text form.
fn text(status: StatusCode, message: &str) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain")],
        format!("{message}\n"),
    )
        .into_response()
}

/// An answer of JSON data.
fn data(v: &Value) -> Response {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        format!("{v}\n"),
    )
        .into_response()
}

fn not_found() -> Response {
    text(StatusCode::NOT_FOUND, "Resource not found.")
}

fn refused(r: PsRefusal) -> Response {
    match r {
        PsRefusal::Bad(m) => text(StatusCode::BAD_REQUEST, &m),
        PsRefusal::Forbidden(m) => text(StatusCode::FORBIDDEN, &m),
        PsRefusal::NotFound => not_found(),
        PsRefusal::Conflict(m) => text(StatusCode::CONFLICT, &m),
        PsRefusal::CannotDo(m) => text(
            StatusCode::UNPROCESSABLE_ENTITY,
            &format!("Unable to complete request: {m}"),
        ),
        PsRefusal::Failed(m) => text(StatusCode::INTERNAL_SERVER_ERROR, &m),
    }
}

/// Whether `s` is a UUID as pScheduler names tasks and runs.
fn is_uuid(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 36
        && b.iter().enumerate().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => *c == b'-',
            _ => c.is_ascii_hexdigit(),
        })
}

/// The values whose keys start with `_` (private: keys, credentials)
/// shown as null, as pScheduler shows them.
fn sanitised(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, v)| {
                    let v = if k.starts_with('_') {
                        Value::Null
                    } else {
                        sanitised(v)
                    };
                    (k.clone(), v)
                })
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(sanitised).collect()),
        other => other.clone(),
    }
}

/// The `https://HOST/pscheduler` this request reached, from its Host
/// header when that is a plain host and port, else the listener's
/// address.
fn root_url(headers: &HeaderMap, local: Option<SocketAddr>) -> String {
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .filter(|h| {
            !h.is_empty()
                && h.len() <= 255
                && h.bytes()
                    .all(|c| c.is_ascii_alphanumeric() || b".-:[]".contains(&c))
        })
        .map(str::to_owned)
        .or_else(|| local.map(|a| a.to_string()))
        .unwrap_or_else(|| "localhost".into());
    format!("https://{host}/pscheduler")
}

/// This host's name for pScheduler (its configured address, or the
/// kernel's host name).
fn host_name(p: &Participant) -> String {
    let loaded = p.shared.loaded();
    if let Some(a) = loaded.mine.first().and_then(|m| loaded.config.addresses.get(m)) {
        return a.address.clone();
    }
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most `buf.len()` bytes into `buf`.
    let n = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if n == 0 {
        let end = buf.iter().position(|c| *c == 0).unwrap_or(buf.len());
        if let Ok(s) = std::str::from_utf8(&buf[..end]) {
            return s.to_owned();
        }
    }
    "goodput".into()
}

/// The iperf3 tool as pScheduler's `tools` lists it.
fn tool() -> Value {
    tool_of("iperf3")
}

/// A tool as pScheduler's `tools` lists it: iperf3 for throughput, and
/// goodput's ping and trace for the tests this agent leads.
fn tool_of(name: &str) -> Value {
    let (test, description) = match name {
        "goodput-ping" => ("rtt", "goodput's ping: ICMP echo round trips"),
        "goodput-trace" => ("trace", "goodput's trace: the path hop by hop"),
        "goodput-owamp" => (
            "latency",
            "goodput's OWAMP client: one-way loss and delay to the far end's OWAMP server",
        ),
        "goodput-powstream" => (
            "latencybg",
            "goodput's continuous OWAMP stream: a result per summary to the far end's OWAMP server",
        ),
        _ => (
            "throughput",
            "goodput agent's iperf3 server, started for each run",
        ),
    };
    json!({
        "schema": 1,
        "name": name,
        "description": description,
        "version": "1.0",
        "tests": [test],
        "preference": 10,
        "maintainer": {"name": "goodput", "email": "", "href": ""},
    })
}

type Params = Query<HashMap<String, String>>;

/// A whole number from the query, or a 400 naming it.
fn number(q: &HashMap<String, String>, name: &str) -> Result<Option<u64>, String> {
    match q.get(name) {
        None => Ok(None),
        Some(v) => v
            .trim()
            .parse::<u64>()
            .map(Some)
            .map_err(|_| format!("Invalid {name}: '{v}' is not a whole number")),
    }
}

/// A time from the query (an ISO 8601 time with an offset; a `+` sent
/// unescaped arrives as a space).
fn time(q: &HashMap<String, String>, name: &str) -> Result<u64, String> {
    let v = q.get(name).ok_or_else(|| format!("Missing {name} time"))?;
    goodput_archive::pscheduler::iso_time_ms(&v.replace(' ', "+"))
        .map_err(|e| format!("Invalid {name} time: {e}"))
}

async fn root(State(p): State<Participant>) -> Response {
    data(&json!(format!(
        "This is the pScheduler API server on {} (a goodput agent)",
        host_name(&p)
    )))
}

async fn api() -> Response {
    data(&json!(API_LEVEL))
}

async fn hostname(State(p): State<Participant>) -> Response {
    data(&json!(host_name(&p)))
}

async fn clock_state() -> Response {
    let c = clock::state();
    data(&json!({
        "time": iso(clock::now_ms()),
        "synchronized": c.synchronised,
        "source": "system",
        "reference": format!(
            "kernel clock (adjtimex), estimated error {} us, maximum error {} us",
            c.estimated_error_us, c.maximum_error_us
        ),
    }))
}

async fn tests(headers: HeaderMap) -> Response {
    let root = root_url(&headers, None);
    data(&json!(["latency", "latencybg", "rtt", "throughput", "trace"]
        .iter()
        .map(|t| format!("{root}/tests/{t}"))
        .collect::<Vec<_>>()))
}

/// `GET /tests/NAME`: the tests offered: throughput as a participant,
/// rtt, trace, latency and latencybg as their lead (and only
/// participant).
async fn test_named(Path(name): Path<String>) -> Response {
    let (description, class) = match name.as_str() {
        "throughput" => ("Measure network throughput between hosts", "exclusive"),
        "rtt" => ("Measure the round-trip time between hosts", "background"),
        "trace" => ("Trace the path between IP hosts", "background"),
        "latency" => ("Measure one-way latency and loss between hosts", "background"),
        "latencybg" => (
            "Continuously measure one-way latency and loss between hosts",
            "background-multi",
        ),
        _ => return not_found(),
    };
    data(&json!({
        "schema": 1,
        "name": name,
        "description": description,
        "version": "1.0",
        "scheduling-class": class,
    }))
}

/// `GET /tools?test=…`: whether iperf3 can run the test (API 6 and on:
/// every tool with its verdict; before: the tools that can).
async fn tools(State(p): State<Participant>, Query(q): Params) -> Response {
    let Some(test) = q.get("test") else {
        return data(&json!([
            "iperf3",
            "goodput-ping",
            "goodput-trace",
            "goodput-owamp",
            "goodput-powstream"
        ]
        .iter()
        .map(|t| tool_of(t))
        .collect::<Vec<_>>()));
    };
    let api = match number(&q, "api") {
        Ok(a) => a.unwrap_or(1),
        Err(e) => return text(StatusCode::BAD_REQUEST, &e),
    };
    let max = p.shared.options.limits.max_duration;
    let (verdict, tool) = match serde_json::from_str::<Value>(test) {
        Err(e) => (
            json!({"can-run": false, "reasons": [format!("the test is not JSON: {e}")]}),
            tool(),
        ),
        Ok(t) => {
            let single = t
                .get("type")
                .and_then(Value::as_str)
                .and_then(|ty| TestType::named(ty).ok());
            let read = match single {
                Some(ty) => (SingleTest::read(&t, max).map(|_| ()), tool_of(ty.tool())),
                None => (Throughput::read(&t, max).map(|_| ()), tool()),
            };
            match read {
                (Ok(()), tool) => (json!({"can-run": true}), tool),
                (Err(e), tool) => (json!({"can-run": false, "reasons": [e]}), tool),
            }
        }
    };
    if api >= 6 {
        data(&json!([{ "can-run": verdict, "tool": tool }]))
    } else if verdict["can-run"] == json!(true) {
        data(&json!([tool]))
    } else {
        data(&json!([]))
    }
}

async fn tool_named(Path(name): Path<String>) -> Response {
    if [
        "iperf3",
        "goodput-ping",
        "goodput-trace",
        "goodput-owamp",
        "goodput-powstream",
    ]
    .contains(&name.as_str())
    {
        data(&tool_of(&name))
    } else {
        text(
            StatusCode::NOT_FOUND,
            &format!("No tool \"{name}\" is available."),
        )
    }
}

/// `POST /tasks`: a pScheduler client gives this agent a task to lead:
/// an rtt or trace test whose source (its only participant) is this
/// agent. Answers the task's URL.
async fn tasks_post(
    State(p): State<Participant>,
    ConnectInfo(Caller(from)): ConnectInfo<Caller>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let doc: Value = match serde_json::from_slice(&body) {
        Ok(v @ Value::Object(_)) => v,
        Ok(_) => return text(StatusCode::BAD_REQUEST, "Invalid JSON: a task is an object"),
        Err(e) => return text(StatusCode::BAD_REQUEST, &format!("Invalid JSON: {e}")),
    };
    let requester = from.ip().to_canonical();
    let others = p.state.count_of(requester);
    match single::create(&p.shared, &p.single, &p.options, requester, doc, others).await {
        Ok(uuid) => {
            log(&format!(
                "pScheduler task {uuid} from {requester}: this agent leads it"
            ));
            data(&json!(format!("{}/tasks/{uuid}", root_url(&headers, None))))
        }
        Err(r) => {
            log(&format!("pScheduler task from {requester} refused: {r:?}"));
            refused(r)
        }
    }
}

/// A led task's answers (`task_get` and the rest call these first).
fn led_task_get(p: &Participant, uuid: &str, from: IpAddr, headers: &HeaderMap, detail: bool) -> Response {
    let href = format!("{}/tasks/{uuid}", root_url(headers, None));
    match p
        .single
        .owned(uuid, from, |t| single::task_view(t, &href, detail))
    {
        Ok(doc) => data(&sanitised(&doc)),
        Err(r) => refused(r),
    }
}

/// `GET /tasks/UUID/cli`: the task's test as pScheduler's command line
/// gives it.
async fn task_cli(
    State(p): State<Participant>,
    ConnectInfo(Caller(from)): ConnectInfo<Caller>,
    Path(uuid): Path<String>,
) -> Response {
    if !is_uuid(&uuid) {
        return not_found();
    }
    match p.single.owned(&uuid, from.ip().to_canonical(), |t| {
        let mut cli = vec![t.test.ty.name().to_owned()];
        cli.extend(single::spec_cli(&t.doc));
        cli
    }) {
        Ok(cli) => data(&json!(cli)),
        Err(r) => refused(r),
    }
}

/// `GET /tasks/UUID/runs/RUN` of a led task (`RUN` may be `first` or
/// `next`): the run, waited for (`wait-local`, `wait-merged`) until it
/// has its result, `wait` seconds at most.
async fn led_run_get(
    p: &Participant,
    uuid: &str,
    run: &str,
    from: IpAddr,
    q: &HashMap<String, String>,
    headers: &HeaderMap,
) -> Response {
    if !is_uuid(run) && run != "first" && run != "next" {
        return not_found();
    }
    let flag = |k: &str| {
        q.get(k)
            .is_some_and(|v| !matches!(v.to_ascii_lowercase().as_str(), "false" | "0" | "no"))
    };
    let (wait_local, wait_merged) = (flag("wait-local"), flag("wait-merged"));
    if wait_local && wait_merged {
        return text(StatusCode::BAD_REQUEST, "Cannot wait on local and merged results");
    }
    let wait_s = match number(q, "wait") {
        Ok(w) => w.unwrap_or(30).min(MAX_WAIT_S),
        Err(e) => return text(StatusCode::BAD_REQUEST, &e),
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(wait_s);
    let root = root_url(headers, None);
    loop {
        let woken = p.single.done.notified();
        let now = clock::now_ms();
        let view = match p.single.owned(uuid, from, |t| {
            single::pick(t, run, now).map(|r| (r.uuid.clone(), r.result.is_some(), single::run_view(t, r)))
        }) {
            Ok(Some(v)) => v,
            Ok(None) => return not_found(),
            Err(r) => return refused(r),
        };
        let (id, has_result, mut view) = view;
        if !(wait_local || wait_merged) || has_result || tokio::time::Instant::now() >= deadline {
            let href = format!("{root}/tasks/{uuid}/runs/{id}");
            view["task-href"] = json!(format!("{root}/tasks/{uuid}"));
            view["result-href"] = json!(format!("{href}/result"));
            view["href"] = json!(href);
            return data(&sanitised(&view));
        }
        // Woken when a run ends, and at least once a second.
        let _ = tokio::time::timeout_at(
            deadline.min(tokio::time::Instant::now() + Duration::from_secs(1)),
            woken,
        )
        .await;
    }
}

/// `GET /tasks/UUID/runs/RUN/result?format=…`: a led run's result as
/// JSON, or as text the way pScheduler's own formatters lay it out.
async fn run_result(
    State(p): State<Participant>,
    ConnectInfo(Caller(from)): ConnectInfo<Caller>,
    Path((uuid, run)): Path<(String, String)>,
    Query(q): Params,
) -> Response {
    if !is_uuid(&uuid) || !(is_uuid(&run) || run == "first") {
        return not_found();
    }
    let format = q.get("format").map_or("application/json", String::as_str);
    if !["application/json", "text/plain", "text/html"].contains(&format) {
        return text(StatusCode::BAD_REQUEST, &format!("Unsupported format {format}"));
    }
    let now = clock::now_ms();
    let found = p.single.owned(&uuid, from.ip().to_canonical(), |t| {
        single::pick(t, &run, now).map(|r| ((t.test.ty, t.test.bucket_s), r.result.clone()))
    });
    let ((ty, bucket), result) = match found {
        Ok(Some((ty, Some(result)))) => (ty, result),
        Ok(_) => return not_found(),
        Err(r) => return refused(r),
    };
    match format {
        "application/json" => data(&sanitised(&result)),
        "text/plain" => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            single::result_text(ty, &result, bucket),
        )
            .into_response(),
        _ => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
            format!(
                "<pre>{}</pre>",
                html_escaped(&single::result_text(ty, &result, bucket))
            ),
        )
            .into_response(),
    }
}

fn html_escaped(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// `POST /tasks/UUID?participant=N`: the lead makes its task here.
async fn task_post(
    State(p): State<Participant>,
    ConnectInfo(Caller(from)): ConnectInfo<Caller>,
    Path(uuid): Path<String>,
    Query(q): Params,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if !is_uuid(&uuid) {
        return not_found();
    }
    let participant = match number(&q, "participant") {
        Ok(Some(n)) => n,
        Ok(None) => return text(StatusCode::BAD_REQUEST, "Invalid participant: none given"),
        Err(e) => return text(StatusCode::BAD_REQUEST, &e),
    };
    let doc: Value = match serde_json::from_slice(&body) {
        Ok(v @ Value::Object(_)) => v,
        Ok(_) => return text(StatusCode::BAD_REQUEST, "Invalid JSON: a task is an object"),
        Err(e) => return text(StatusCode::BAD_REQUEST, &format!("Invalid JSON: {e}")),
    };
    let lead = from.ip().to_canonical();
    let n = u32::try_from(participant).unwrap_or(u32::MAX);
    let others = p.single.active_of(lead);
    if let Err(r) = p
        .state
        .add_task(&p.shared, &p.options, &uuid, lead, n, doc, others)
    {
        return refused(r);
    }
    let url = format!("{}/tasks/{uuid}", root_url(&headers, None));
    text(StatusCode::OK, &url)
}

/// `GET /tasks/UUID[?detail]`: the task as posted, its private values
/// hidden.
async fn task_get(
    State(p): State<Participant>,
    ConnectInfo(Caller(from)): ConnectInfo<Caller>,
    Path(uuid): Path<String>,
    Query(q): Params,
    headers: HeaderMap,
) -> Response {
    if !is_uuid(&uuid) {
        return not_found();
    }
    let detail = q.contains_key("detail") && q.get("detail").map(String::as_str) != Some("false");
    if p.single.has(&uuid) {
        return led_task_get(&p, &uuid, from.ip().to_canonical(), &headers, detail);
    }
    let href = format!("{}/tasks/{uuid}", root_url(&headers, None));
    match p.state.owned(&uuid, from.ip().to_canonical(), |t| {
        let mut doc = t.doc.clone();
        let participants = doc
            .as_object_mut()
            .and_then(|m| m.remove("participants"))
            .unwrap_or(Value::Null);
        doc["href"] = json!(href);
        if detail {
            doc["detail"] = json!({
                "href": href,
                "runs-href": format!("{href}/runs"),
                "first-run-href": format!("{href}/runs/first"),
                "next-run-href": format!("{href}/runs/next"),
                "participants": participants,
                "participant": t.participant,
                "duration": goodput_archive::pscheduler_out::iso_duration(t.test.run_ms() as f64 / 1000.0),
                "enabled": true,
                "runs": t.runs.len(),
            });
        }
        sanitised(&doc)
    }) {
        Ok(doc) => data(&doc),
        Err(r) => refused(r),
    }
}

/// `DELETE /tasks/UUID`: the task and its runs are cancelled.
async fn task_delete(
    State(p): State<Participant>,
    ConnectInfo(Caller(from)): ConnectInfo<Caller>,
    Path(uuid): Path<String>,
) -> Response {
    if !is_uuid(&uuid) {
        return not_found();
    }
    if p.single.has(&uuid) {
        return match single::cancel(&p.shared, &p.single, &uuid, from.ip().to_canonical()).await {
            Ok(()) => text(StatusCode::OK, "OK"),
            Err(r) => refused(r),
        };
    }
    match p.state.remove_task(&uuid, from.ip().to_canonical()) {
        Ok(()) => text(StatusCode::OK, "OK"),
        Err(r) => refused(r),
    }
}

/// `GET /tasks/UUID/runtimes?start=…&end=…`: where a run fits here.
async fn runtimes(
    State(p): State<Participant>,
    ConnectInfo(Caller(from)): ConnectInfo<Caller>,
    Path(uuid): Path<String>,
    Query(q): Params,
) -> Response {
    if !is_uuid(&uuid) {
        return not_found();
    }
    let (from_ms, to_ms) = match (time(&q, "start"), time(&q, "end")) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => return text(StatusCode::BAD_REQUEST, &e),
    };
    match p
        .state
        .runtimes(&p.shared, &uuid, from.ip().to_canonical(), from_ms, to_ms)
    {
        Ok(free) => data(&Value::Array(
            free.into_iter()
                .map(|(a, b)| json!({"lower": iso(a), "upper": iso(b)}))
                .collect(),
        )),
        Err(r) => refused(r),
    }
}

/// `GET /tasks/UUID/runs`: the runs' URLs.
async fn runs_list(
    State(p): State<Participant>,
    ConnectInfo(Caller(from)): ConnectInfo<Caller>,
    Path(uuid): Path<String>,
    headers: HeaderMap,
) -> Response {
    if !is_uuid(&uuid) {
        return not_found();
    }
    let base = format!("{}/tasks/{uuid}/runs", root_url(&headers, None));
    if p.single.has(&uuid) {
        return match p.single.owned(&uuid, from.ip().to_canonical(), |t| {
            t.runs
                .iter()
                .map(|r| json!(format!("{base}/{}", r.uuid)))
                .collect::<Vec<_>>()
        }) {
            Ok(list) => data(&Value::Array(list)),
            Err(r) => refused(r),
        };
    }
    match p.state.owned(&uuid, from.ip().to_canonical(), |t| {
        t.runs
            .keys()
            .map(|r| json!(format!("{base}/{r}")))
            .collect::<Vec<_>>()
    }) {
        Ok(list) => data(&Value::Array(list)),
        Err(r) => refused(r),
    }
}

/// `PUT /tasks/UUID/runs/RUN`: a new run at `start-time` (booked here),
/// or the lead's every participant's data or results for it.
async fn run_put(
    State(p): State<Participant>,
    ConnectInfo(Caller(from)): ConnectInfo<Caller>,
    Path((uuid, run)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    if !is_uuid(&uuid) || !is_uuid(&run) {
        return not_found();
    }
    let lead = from.ip().to_canonical();
    if p.single.has(&uuid) {
        return text(
            StatusCode::FORBIDDEN,
            "This agent leads the task and books its runs itself",
        );
    }
    let Ok(Value::Object(doc)) = serde_json::from_slice::<Value>(&body) else {
        return text(StatusCode::BAD_REQUEST, "Invalid or missing run data");
    };
    let exists = match p.state.owned(&uuid, lead, |t| t.runs.contains_key(&run)) {
        Ok(e) => e,
        Err(r) => return refused(r),
    };
    if !exists {
        let Some(start) = doc.get("start-time").and_then(Value::as_str) else {
            return text(StatusCode::BAD_REQUEST, "Missing start time");
        };
        let Ok(start_ms) = goodput_archive::pscheduler::iso_time_ms(start) else {
            return text(StatusCode::BAD_REQUEST, "Invalid start time");
        };
        return match book_run(&p.shared, &p.state, &p.options, &uuid, &run, lead, start_ms).await {
            Ok(_) => text(StatusCode::OK, "OK"),
            Err(r) => {
                log(&format!(
                    "pScheduler run {run} of task {uuid} from {lead} refused: {r:?}"
                ));
                refused(r)
            }
        };
    }
    let which = if doc.contains_key("part-data-full") {
        "part-data-full"
    } else if doc.contains_key("result-full") {
        "result-full"
    } else if doc.contains_key("start-time") {
        // The same run put again.
        return text(StatusCode::OK, "OK");
    } else {
        return text(StatusCode::BAD_REQUEST, "Nothing to update");
    };
    let value = doc.get(which).cloned();
    match p.state.owned(&uuid, lead, |t| match t.runs.get_mut(&run) {
        Some(r) if which == "part-data-full" => r.part_data_full = value,
        Some(r) => r.result_full = value,
        None => {}
    }) {
        Ok(()) => text(StatusCode::OK, "OK"),
        Err(r) => refused(r),
    }
}

/// `GET /tasks/UUID/runs/RUN[?wait-local=true&wait=S]`: the run, its
/// participant data and (once the slot is over) this end's result,
/// waited for up to `wait` seconds when asked.
async fn run_get(
    State(p): State<Participant>,
    ConnectInfo(Caller(from)): ConnectInfo<Caller>,
    Path((uuid, run)): Path<(String, String)>,
    Query(q): Params,
    headers: HeaderMap,
) -> Response {
    if is_uuid(&uuid) && p.single.has(&uuid) {
        return led_run_get(&p, &uuid, &run, from.ip().to_canonical(), &q, &headers).await;
    }
    if !is_uuid(&uuid) || !is_uuid(&run) {
        return not_found();
    }
    let lead = from.ip().to_canonical();
    let wait_local = q.get("wait-local").is_some_and(|v| v != "false" && v != "0");
    let wait_s = match number(&q, "wait") {
        Ok(w) => w.unwrap_or(30).min(MAX_WAIT_S),
        Err(e) => return text(StatusCode::BAD_REQUEST, &e),
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(wait_s);
    let port = p.options.iperf3_port;
    loop {
        // Registered before looking, so a result stored in between wakes it.
        let woken = p.state.done.notified();
        let view = match p.state.run_view(&uuid, &run, lead, port) {
            Ok(v) => v,
            Err(r) => return refused(r),
        };
        if !wait_local || !view["result"].is_null() || tokio::time::Instant::now() >= deadline {
            let mut view = sanitised(&view);
            let href = format!("{}/tasks/{uuid}/runs/{run}", root_url(&headers, None));
            view["task-href"] = json!(format!("{}/tasks/{uuid}", root_url(&headers, None)));
            view["result-href"] = json!(format!("{href}/result"));
            view["href"] = json!(href);
            return data(&view);
        }
        let _ = tokio::time::timeout_at(deadline, woken).await;
    }
}

/// `DELETE /tasks/UUID/runs/RUN`: the run is cancelled; its server, if
/// up, ends now.
async fn run_delete(
    State(p): State<Participant>,
    ConnectInfo(Caller(from)): ConnectInfo<Caller>,
    Path((uuid, run)): Path<(String, String)>,
) -> Response {
    if !is_uuid(&uuid) || !is_uuid(&run) {
        return not_found();
    }
    match p.state.remove_run(&uuid, &run, from.ip().to_canonical()) {
        Ok(()) => text(StatusCode::OK, "OK"),
        Err(r) => refused(r),
    }
}

/// Only the allowed leads get past; an API level above ours is refused
/// as pScheduler refuses it; no request takes longer than a wait allows.
async fn admit(State(p): State<Participant>, req: Request, next: Next) -> Response {
    let Some(ConnectInfo(Caller(from))) = req.extensions().get::<ConnectInfo<Caller>>().copied() else {
        return text(StatusCode::FORBIDDEN, "Forbidden");
    };
    let ip: IpAddr = from.ip().to_canonical();
    if !p.allow.iter().any(|c| c.contains(ip)) {
        return text(
            StatusCode::FORBIDDEN,
            &format!(
                "Forbidden: {ip} may not use this pScheduler participant (goodput agent --pscheduler-allow)"
            ),
        );
    }
    let api = req
        .uri()
        .query()
        .and_then(|q| q.split('&').find_map(|kv| kv.strip_prefix("api=")));
    if let Some(a) = api {
        match a.parse::<u64>() {
            Ok(n) if n > API_LEVEL => {
                return text(
                    StatusCode::NOT_IMPLEMENTED,
                    &format!("No API above {API_LEVEL} is supported"),
                )
            }
            Ok(_) => {}
            Err(_) => return text(StatusCode::BAD_REQUEST, &format!("Invalid API value '{a}'")),
        }
    }
    match tokio::time::timeout(Duration::from_secs(MAX_WAIT_S + 10), next.run(req)).await {
        Ok(r) => r,
        Err(_) => text(StatusCode::SERVICE_UNAVAILABLE, "The request took too long"),
    }
}

fn routes(p: Participant) -> Router {
    use axum::routing::MethodRouter;
    let api: [(&str, MethodRouter<Participant>); 16] = [
        ("", get(root)),
        ("/", get(root)),
        ("/api", get(api)),
        ("/hostname", get(hostname)),
        ("/clock", get(clock_state)),
        ("/tests", get(tests)),
        ("/tests/{name}", get(test_named)),
        ("/tools", get(tools)),
        ("/tools/{name}", get(tool_named)),
        ("/tasks", axum::routing::post(tasks_post)),
        ("/tasks/{uuid}", get(task_get).post(task_post).delete(task_delete)),
        ("/tasks/{uuid}/runtimes", get(runtimes)),
        ("/tasks/{uuid}/cli", get(task_cli)),
        ("/tasks/{uuid}/runs", get(runs_list)),
        ("/tasks/{uuid}/runs/{run}/result", get(run_result)),
        (
            "/tasks/{uuid}/runs/{run}",
            get(run_get).put(run_put).delete(run_delete),
        ),
    ];
    let app = api
        .into_iter()
        .fold(Router::new(), |r, (path, m)| {
            r.route(&format!("/pscheduler{path}"), m)
        })
        .fallback(|| async { not_found() })
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .layer(middleware::from_fn_with_state(p.clone(), admit))
        .with_state(p);
    // A lead joins its participant's root URL (which ends in a slash)
    // and `/api` or `/tools`: `/pscheduler//api`. Paths are read with
    // repeated slashes as one, before routing.
    Router::new().fallback_service(tower::ServiceExt::map_request(app, |mut req: Request| {
        if req.uri().path().contains("//") {
            if let Some(uri) = single_slashes(req.uri()) {
                *req.uri_mut() = uri;
            }
        }
        req
    }))
}

/// `uri` with each run of slashes in its path made one.
fn single_slashes(uri: &axum::http::Uri) -> Option<axum::http::Uri> {
    let mut path = String::with_capacity(uri.path().len());
    for c in uri.path().chars() {
        if !(c == '/' && path.ends_with('/')) {
            path.push(c);
        }
    }
    let whole = match uri.query() {
        Some(q) => format!("{path}?{q}"),
        None => path,
    };
    whole.parse().ok()
}

/// Binds pScheduler's participant API when asked for: its sockets (HTTPS
/// with the agent's certificate) and the app that answers on them.
pub(crate) fn bind(shared: &Ctx) -> Result<Vec<(ApiListener, Router, Arc<Gate>)>, String> {
    let Some(options) = shared.options.pscheduler.clone() else {
        return Ok(Vec::new());
    };
    let allow = if options.allow.is_empty() {
        shared.options.limits.allow.clone()
    } else {
        options.allow.clone()
    };
    if allow.is_empty() {
        return Err(
            "--pscheduler-listen needs --pscheduler-allow (or --allow): pScheduler's API has no token, \
             so the leads that may use it must be named by address"
                .into(),
        );
    }
    let names: Vec<String> = options.listen.iter().map(|a| a.ip().to_string()).collect();
    let given = shared
        .options
        .tls_cert
        .as_ref()
        .map(|(c, k)| (c.as_path(), k.as_path()));
    let (chain, key) = crate::tls::identity(given, &shared.options.archive, &names)?;
    let acceptor = crate::tls::acceptor(chain, key)?;
    // The tasks leads made here before a restart, and the file that
    // keeps them.
    let kept = crate::state::pscheduler::kept_path(shared);
    let state = Arc::new(PsState::load(shared, &kept));
    tokio::spawn(state.clone().keep(kept, shared.cancel.clone()));
    tokio::spawn(state.clone().restore_runs(shared.clone(), options.clone()));
    let p = Participant {
        shared: shared.clone(),
        state,
        single: Arc::new(SingleState::default()),
        options: Arc::new(options.clone()),
        allow: Arc::new(allow),
    };
    let app = routes(p);
    let gate = Gate::new(shared.options.connections.clone());
    let mut out = Vec::new();
    for a in &options.listen {
        let l = super::router::listen_socket(*a)
            .map_err(|e| format!("cannot listen on {a} for pScheduler's API: {e}"))?;
        log(&format!(
            "pScheduler participant API on https://{}/pscheduler",
            l.local_addr().unwrap_or(*a)
        ));
        let l = ApiListener::new(l, Some(acceptor.clone()), gate.clone()).map_err(|e| e.to_string())?;
        out.push((l, app.clone(), gate.clone()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuids_are_checked_by_shape() {
        assert!(is_uuid("4f3e8b9a-0c1d-4e2f-8a3b-5c6d7e8f9a0b"));
        for bad in [
            "",
            "4f3e8b9a-0c1d-4e2f-8a3b-5c6d7e8f9a0",
            "4f3e8b9a0c1d-4e2f-8a3b-5c6d7e8f9a0bb",
            "4f3e8b9a-0c1d-4e2f-8a3b-5c6d7e8f9a0g",
            "../../../../../../etc/passwd/xxxxxxx",
        ] {
            assert!(!is_uuid(bad), "{bad}");
        }
    }

    #[test]
    fn a_leads_doubled_slash_reads_as_one() {
        let u: axum::http::Uri = "/pscheduler//tools?test=%7B%7D&api=6".parse().unwrap();
        assert_eq!(
            single_slashes(&u).unwrap().to_string(),
            "/pscheduler/tools?test=%7B%7D&api=6"
        );
    }

    #[test]
    fn private_values_are_shown_as_null() {
        let v = json!({"_key": "secret", "test": {"spec": {"_auth": {"x": 1}, "dest": "h"}}});
        assert_eq!(
            sanitised(&v),
            json!({"_key": null, "test": {"spec": {"_auth": null, "dest": "h"}}})
        );
    }
}
