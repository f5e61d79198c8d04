//! The runs this agent leads with a perfSONAR host: an `iperf3` test to
//! an address marked `pscheduler = true` is booked with that host's
//! pScheduler as pScheduler's own lead books it — this agent the lead and
//! participant 0 (the source, iperf3's client), the host participant 1
//! (the destination, whose pScheduler starts its iperf3 server for that
//! run only) — and run by the agent's own iperf3 client at its slot.
//!
//! The calls, in the order pScheduler's lead makes them (learned from its
//! scheduler and recorded from a real one; `tests/data/pscheduler/`):
//! the tools that can run the test (`GET tools?test=…&api=6`), the task
//! (`POST tasks/UUID?participant=1`, with the participants and the task's
//! key), the times its calendar has free (`GET tasks/UUID/runtimes`), the
//! run (`PUT tasks/UUID/runs/RUN` with its start), the run's participant
//! data (`GET`, its server's port), and both ends' data together (`PUT`
//! `part-data-full`). Ours says schema 1, so the host's iperf3 server asks
//! for no login (pScheduler's tool requires one only of a client whose
//! data says schema 2 or later). A host that refuses is a non-start with
//! its words; a task made for a run that then did not book is deleted.

use std::net::IpAddr;
use std::time::Duration;

use goodput_core::schedule::{place, Booking, Calendar, NonStart};
use goodput_core::spec::{Family, Iperf3Spec, TestSpec};
use goodput_core::time::ms_rfc3339;
use reqwest::{Client, Method, Response};
use serde_json::{json, Value};

use crate::answer::body_capped;
use crate::clock;
use crate::state::booking::{Booked, BookedBy, Placed, Planning};
use crate::state::config::PsHost;
use crate::state::peer::unreachable;
use crate::state::Shared;

/// A run booked with a pScheduler host, as the executor needs it.
#[derive(Debug, Clone)]
pub(crate) struct PsBooking {
    /// The task's URL at the host (`…/pscheduler/tasks/UUID`).
    pub(crate) task_url: String,
    /// The task's key (what changes it there).
    pub(crate) key: String,
    /// The host's name in the configuration.
    pub(crate) host: String,
}

/// How long after the run's start the client connects: pScheduler's
/// server starts at the start, and its own client waits 3 s.
pub(crate) const CLIENT_DELAY_MS: u64 = 3_000;
/// How far ahead of a run's time it is booked: the calls take a few
/// round trips each, over a long path.
pub(crate) const LOOKAHEAD: u64 = 20_000;
/// The least notice a run is booked with (pScheduler's own lead asks for
/// a start about 10 s ahead).
const MIN_NOTICE: u64 = 10_000;
/// Attempts when the host's calendar changes between reading and booking.
const ATTEMPTS: usize = 3;
/// The largest answer read from the host.
const MAX_ANSWER: u64 = 1 << 20;
/// Each call's time limit.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// The most free spans of the host's calendar used.
const MAX_SPANS: usize = 1_000;

/// pScheduler's throughput test for a goodput iperf3 spec: what maps, and
/// a reason for what pScheduler's test cannot say.
pub(crate) fn throughput_test(spec: &Iperf3Spec, participants: &[String; 2]) -> Result<Value, String> {
    let no = |what: &str| Err(format!("pScheduler's throughput test has no {what}"));
    if spec.bytes.is_some() || spec.blockcount.is_some() {
        return no("size-bound test (bytes, blockcount): it runs for a time");
    }
    if spec.bidir {
        return no("bidirectional test (bidir)");
    }
    if spec.cport.is_some() {
        return no("client port (cport)");
    }
    if spec.no_delay {
        return no("no_delay");
    }
    let time = spec.time.0;
    if time.subsec_millis() != 0 || time.as_secs() == 0 {
        return Err("a test with a pScheduler host runs whole seconds (time)".into());
    }
    let mut s = serde_json::Map::new();
    s.insert("schema".into(), json!(1));
    s.insert("source".into(), json!(participants[0]));
    s.insert("dest".into(), json!(participants[1]));
    s.insert("duration".into(), json!(format!("PT{}S", time.as_secs())));
    let omit = spec.omit.0.as_secs();
    if omit > 0 {
        s.insert("omit".into(), json!(format!("PT{omit}S")));
    }
    if spec.parallel > 1 {
        s.insert("parallel".into(), json!(spec.parallel));
    }
    if spec.reverse {
        s.insert("reverse".into(), json!(true));
    }
    if spec.udp {
        s.insert("udp".into(), json!(true));
    }
    if let Some(b) = spec.bitrate {
        s.insert("bandwidth".into(), json!(b.0));
    }
    if let Some(l) = spec.length {
        s.insert("buffer-length".into(), json!(l.0));
    }
    if let Some(w) = spec.window {
        s.insert("window-size".into(), json!(w.0));
    }
    if let Some(m) = spec.mss {
        s.insert("mss".into(), json!(m));
    }
    if let Some(c) = &spec.congestion {
        s.insert("congestion".into(), json!(c));
    }
    if spec.tos > 0 {
        s.insert("ip-tos".into(), json!(spec.tos));
    }
    if let Some(b) = spec.bind {
        s.insert("local-address".into(), json!(b.to_string()));
    }
    match spec.family {
        Family::Any => {}
        Family::Ipv4 => {
            s.insert("ip-version".into(), json!(4));
        }
        Family::Ipv6 => {
            s.insert("ip-version".into(), json!(6));
        }
    }
    Ok(json!({ "type": "throughput", "spec": Value::Object(s) }))
}

/// A time as pScheduler writes one (`2026-11-28T15:39:42+00:00`).
fn iso(ms: u64) -> String {
    let t = ms_rfc3339(ms);
    match t.strip_suffix('Z') {
        Some(base) => format!("{base}+00:00"),
        None => t,
    }
}

/// The longest run a host may reckon for a task (a day).
const MAX_RUN_MS: u64 = 86_400_000;

/// A random id in pScheduler's shape (a UUID) and a task key.
fn ids() -> (String, String, String) {
    let key: String = uuid::Uuid::new_v4().simple().to_string();
    (
        uuid::Uuid::new_v4().to_string(),
        uuid::Uuid::new_v4().to_string(),
        key,
    )
}

/// What a call answered: its status and its body (at most
/// [`MAX_ANSWER`] bytes).
struct Answer {
    status: u16,
    body: Vec<u8>,
}

impl Answer {
    fn ok(&self) -> bool {
        (200..300).contains(&self.status)
    }
    /// pScheduler's words for a refusal: its text, trimmed and bounded.
    fn words(&self) -> String {
        let text = String::from_utf8_lossy(&self.body);
        let text = text.trim();
        let mut t: String = text.chars().take(500).collect();
        if t.len() < text.len() {
            t.push('…');
        }
        if t.is_empty() {
            format!("HTTP {}", self.status)
        } else {
            t.replace('\n', " ")
        }
    }
    fn json(&self) -> Result<Value, String> {
        serde_json::from_slice(&self.body).map_err(|e| format!("its answer is not JSON: {e}"))
    }
}

/// One call to the host.
async fn call(client: &Client, method: Method, url: &str, body: Option<&Value>) -> Result<Answer, String> {
    let mut req = client.request(method, url).timeout(CALL_TIMEOUT);
    if let Some(b) = body {
        req = req.json(b);
    }
    let r: Response = req.send().await.map_err(unreachable)?;
    let status = r.status().as_u16();
    let body = body_capped(r, MAX_ANSWER).await.map_err(|e| match e {
        Some(e) => unreachable(e),
        None => format!("its answer is larger than {MAX_ANSWER} bytes"),
    })?;
    Ok(Answer { status, body })
}

/// A client for the host: from this host's address, and, as pScheduler's
/// own lead, taking whatever certificate the host shows (perfSONAR hosts
/// serve self-signed ones).
fn client(host: &PsHost) -> Result<Client, String> {
    let tls = goodput_engine::tls::client_config(&goodput_engine::tls::Trust::Anything)
        .map_err(|e| e.to_string())?;
    Client::builder()
        .connect_timeout(Duration::from_secs(5))
        .local_address(host.from)
        .use_preconfigured_tls((*tls).clone())
        .build()
        .map_err(|e| e.to_string())
}

/// The host's calendar in `[from, to)` as busy spans: everything outside
/// the free spans its `runtimes` gave.
fn busy_calendar(free: &[(u64, u64)], from: u64, to: u64) -> Calendar {
    let mut c = Calendar::new();
    let mut at = from;
    let mut n = 0u64;
    let mut busy = |start: u64, end: u64, c: &mut Calendar| {
        if end > start {
            n += 1;
            let _ = c.book(Booking {
                run: u64::MAX - n,
                start,
                end,
                class: goodput_core::schedule::RunClass::Exclusive,
            });
        }
    };
    let mut spans: Vec<(u64, u64)> = free.to_vec();
    spans.sort_unstable();
    for (lower, upper) in spans {
        if upper <= at {
            continue;
        }
        busy(at, lower.min(to), &mut c);
        at = at.max(upper);
        if at >= to {
            break;
        }
    }
    busy(at, to, &mut c);
    c
}

/// Reads `runtimes`' answer: `[{"lower": TIME, "upper": TIME}, …]`.
fn free_spans(v: &Value) -> Result<Vec<(u64, u64)>, String> {
    let list = v.as_array().ok_or("its free times are not a list")?;
    if list.len() > MAX_SPANS {
        return Err(format!("it gave more than {MAX_SPANS} free times"));
    }
    list.iter()
        .map(|s| {
            let t = |f: &str| {
                s.get(f)
                    .and_then(Value::as_str)
                    .ok_or_else(|| format!("a free time has no {f}"))
                    .and_then(goodput_archive::pscheduler::iso_time_ms)
            };
            Ok((t("lower")?, t("upper")?))
        })
        .collect()
}

/// The run's spec as goodput's client runs it: to the port the host's
/// server listens on.
fn client_spec(spec: &TestSpec, port: u16) -> TestSpec {
    let mut spec = spec.clone();
    if let TestSpec::Iperf3(s) = &mut spec {
        s.port = port;
    }
    spec
}

/// Places one run with the host's pScheduler: its task made there, a slot
/// free on both calendars booked on both, and the run's server port read.
pub(crate) async fn place_run(shared: &Shared, p: &Planning, host: &PsHost) -> (Placed, Option<Booked>) {
    let TestSpec::Iperf3(spec) = &p.spec else {
        return (
            Placed::NonStart(format!("pScheduler host {} runs iperf3 tests only", host.name)),
            None,
        );
    };
    let test = match throughput_test(spec, &host.participants) {
        Ok(t) => t,
        Err(e) => return (Placed::NonStart(e), None),
    };
    let client = match client(host) {
        Ok(c) => c,
        Err(e) => {
            return (
                Placed::NonStart(format!("no HTTPS client for {}: {e}", host.name)),
                None,
            )
        }
    };
    let unreachable = |e: String| Placed::NonStart(format!("pScheduler host {} unreachable: {e}", host.name));
    let refused = |what: &str, a: &Answer| {
        Placed::NonStart(format!(
            "pScheduler host {} refused {what}: {}",
            host.name,
            a.words()
        ))
    };
    // Can it run the test with iperf3?
    let tools = with_query(
        &format!("{}/tools", host.url),
        &[("test", &test.to_string()), ("api", "6")],
    );
    match call(&client, Method::GET, &tools, None).await {
        Err(e) => return (unreachable(e), None),
        Ok(a) if !a.ok() => return (refused("the test", &a), None),
        Ok(a) => {
            let can = a.json().ok().and_then(|v| {
                v.as_array()?
                    .iter()
                    .find(|t| t.pointer("/tool/name").and_then(Value::as_str) == Some("iperf3"))
                    .cloned()
            });
            match can {
                None => {
                    return (
                        Placed::NonStart(format!(
                            "pScheduler host {} has no iperf3 tool for this test",
                            host.name
                        )),
                        None,
                    )
                }
                Some(t) if t.pointer("/can-run/can-run") != Some(&Value::Bool(true)) => {
                    let why = t
                        .pointer("/can-run/reasons")
                        .map_or_else(|| "no reason given".to_owned(), Value::to_string);
                    return (
                        Placed::NonStart(format!(
                            "pScheduler host {}'s iperf3 cannot run this test: {why}",
                            host.name
                        )),
                        None,
                    );
                }
                Some(_) => {}
            }
        }
    }
    let (uuid, run, key) = ids();
    let task_url = format!("{}/tasks/{uuid}", host.url);
    let task = json!({
        "schedule": { "slip": format!("PT{}S", p.slip / 1000) },
        "test": test,
        "tool": "iperf3",
        "participants": host.participants,
        "_key": key,
    });
    match call(
        &client,
        Method::POST,
        &format!("{task_url}?participant=1"),
        Some(&task),
    )
    .await
    {
        Err(e) => return (unreachable(e), None),
        Ok(a) if !a.ok() => return (refused("the task", &a), None),
        Ok(_) => {}
    }
    // The run's length as the host reckons it (set-up, the test, its
    // client's wait, the server's end): both calendars hold the same.
    let duration = match call(&client, Method::GET, &format!("{task_url}?detail=True"), None).await {
        Err(e) => Err(unreachable(e)),
        Ok(a) if !a.ok() => Err(refused("to show the task", &a)),
        Ok(a) => a
            .json()
            .and_then(|v| {
                let text = v
                    .pointer("/detail/duration")
                    .and_then(Value::as_str)
                    .ok_or("its task has no duration")?;
                let s = goodput_archive::pscheduler::iso_seconds(text)?;
                let ms = (s * 1000.0).ceil() as u64;
                if ms == 0 || ms > MAX_RUN_MS {
                    return Err(format!("its task's duration {text} is not from 1 ms to a day"));
                }
                Ok(ms)
            })
            .map_err(|e| Placed::NonStart(format!("pScheduler host {}: {e}", host.name))),
    };
    let duration = match duration {
        Ok(d) => d,
        Err(placed) => {
            let _ = call(&client, Method::DELETE, &format!("{task_url}?key={key}"), None).await;
            return (placed, None);
        }
    };
    let booking = PsBooking {
        task_url: task_url.clone(),
        key: key.clone(),
        host: host.name.clone(),
    };
    let placed = book(shared, p, host, &client, &booking, &run, duration).await;
    if !matches!(placed.0, Placed::Booked { .. }) {
        // The task holds nothing there now; it is deleted all the same.
        let _ = call(&client, Method::DELETE, &format!("{task_url}?key={key}"), None).await;
    }
    placed
}

/// Books run `run` of the task: a slot free on both calendars, then the
/// run there, its participant data, and both ends' data handed back.
async fn book(
    shared: &Shared,
    p: &Planning,
    host: &PsHost,
    client: &Client,
    booking: &PsBooking,
    run: &str,
    duration: u64,
) -> (Placed, Option<Booked>) {
    let unreachable = |e: String| Placed::NonStart(format!("pScheduler host {} unreachable: {e}", host.name));
    let refused = |what: &str, a: &Answer| {
        Placed::NonStart(format!(
            "pScheduler host {} refused {what}: {}",
            host.name,
            a.words()
        ))
    };
    let run_url = format!("{}/runs/{run}?key={}", booking.task_url, booking.key);
    let mut last_busy = String::new();
    for _ in 0..ATTEMPTS {
        let now = clock::now_ms();
        let earliest = p.at.max(now + MIN_NOTICE);
        let Some(slip) = p.at.saturating_add(p.slip).checked_sub(earliest) else {
            return (
                Placed::NonStart(format!(
                    "its time ({}) and slip passed before it could be booked with pScheduler host {}",
                    iso(p.at),
                    host.name
                )),
                None,
            );
        };
        let to = earliest.saturating_add(slip).saturating_add(duration);
        let times = with_query(
            &format!("{}/runtimes", booking.task_url),
            &[("start", &iso(earliest)), ("end", &iso(to))],
        );
        let free = match call(client, Method::GET, &times, None).await {
            Err(e) => return (unreachable(e), None),
            Ok(a) if !a.ok() => return (refused("its free times", &a), None),
            Ok(a) => match a.json().and_then(|v| free_spans(&v)) {
                Ok(f) => f,
                Err(e) => {
                    return (
                        Placed::NonStart(format!("pScheduler host {}: {e}", host.name)),
                        None,
                    )
                }
            },
        };
        let theirs = busy_calendar(&free, earliest, to);
        // Here first, so nothing booked meanwhile takes the slot.
        let b = {
            let mut inner = shared.lock();
            match place(
                &inner.book.calendar,
                Some(&theirs),
                earliest,
                slip,
                duration,
                p.class,
            ) {
                Ok(start) => {
                    let mut b = Booked::new(
                        p.wanted(),
                        start,
                        start.saturating_add(duration),
                        BookedBy::ThisAgent,
                    );
                    match inner.book.calendar.book(b.booking()) {
                        Ok(()) => {
                            inner.book.tentative.insert(b.number, b.id.clone());
                            inner.counters.booked += 1;
                            b.pscheduler = Some(booking.clone());
                            b
                        }
                        Err(x) => {
                            let id = inner.run_name(x.run);
                            return (
                                Placed::NonStart(format!(
                                    "this host busy with run {id} until {}",
                                    iso(x.end)
                                )),
                                None,
                            );
                        }
                    }
                }
                Err(NonStart::PeerBusy { until, .. }) => {
                    return (
                        Placed::NonStart(format!("pScheduler host {} busy until {}", host.name, iso(until))),
                        None,
                    )
                }
                Err(NonStart::Busy { run, until }) => {
                    let id = inner.run_name(run);
                    return (
                        Placed::NonStart(format!("this host busy with run {id} until {}", iso(until))),
                        None,
                    );
                }
                Err(_) => {
                    return (
                        Placed::NonStart(format!(
                            "no free slot common to this host and pScheduler host {} within the slip",
                            host.name
                        )),
                        None,
                    )
                }
            }
        };
        let release = |shared: &Shared, b: &Booked| {
            let mut inner = shared.lock();
            inner.book.calendar.release(b.number);
            inner.book.tentative.remove(&b.number);
        };
        let start = json!({ "start-time": iso(b.start_ms) });
        match call(client, Method::PUT, &run_url, Some(&start)).await {
            Err(e) => {
                release(shared, &b);
                return (unreachable(e), None);
            }
            // Its calendar changed since it was read: read it again.
            Ok(a) if a.status == 409 => {
                release(shared, &b);
                last_busy = a.words();
                continue;
            }
            Ok(a) if !a.ok() => {
                release(shared, &b);
                return (refused("the run", &a), None);
            }
            Ok(_) => {}
        }
        let data = match participant_data(client, &run_url).await {
            Ok(d) => d,
            Err(e) => {
                release(shared, &b);
                return (
                    Placed::NonStart(format!("pScheduler host {}: {e}", host.name)),
                    None,
                );
            }
        };
        let port = data.get("server_port").and_then(Value::as_u64).unwrap_or(0);
        let Ok(port @ 1..) = u16::try_from(port) else {
            release(shared, &b);
            return (
                Placed::NonStart(format!(
                    "pScheduler host {} gave no server port for the run",
                    host.name
                )),
                None,
            );
        };
        // Ours first (schema 1: no login asked of our client), then its.
        let full = json!({ "part-data-full": [ { "schema": 1 }, data ] });
        match call(client, Method::PUT, &run_url, Some(&full)).await {
            Err(e) => {
                release(shared, &b);
                return (unreachable(e), None);
            }
            Ok(a) if !a.ok() => {
                release(shared, &b);
                return (refused("the run's data", &a), None);
            }
            Ok(_) => {}
        }
        let mut b = b;
        b.spec = client_spec(&b.spec, port);
        return (
            Placed::Booked {
                start: b.start_ms,
                end: b.end_ms,
            },
            Some(b),
        );
    }
    (
        Placed::NonStart(format!(
            "pScheduler host {} busy: its calendar changed while booking, {ATTEMPTS} times (last: {last_busy})",
            host.name
        )),
        None,
    )
}

/// The run's participant data at the host (its server's port).
async fn participant_data(client: &Client, run_url: &str) -> Result<Value, String> {
    let a = call(client, Method::GET, run_url, None).await?;
    if !a.ok() {
        return Err(format!("its run does not read: {}", a.words()));
    }
    let v = a.json()?;
    v.get("participant-data")
        .filter(|d| d.is_object())
        .cloned()
        .ok_or_else(|| "its run has no participant data".to_owned())
}

/// `url` with a query of `pairs`, encoded.
fn with_query(url: &str, pairs: &[(&str, &str)]) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut u) => {
            u.query_pairs_mut().extend_pairs(pairs);
            u.to_string()
        }
        // The URL is made from a checked address; a bad one fails the call.
        Err(_) => url.to_owned(),
    }
}

/// Lets the host go of a run that will not be run (the agent stops, or
/// the run was taken off this calendar): its task is deleted there.
pub(crate) async fn cancel(booking: &PsBooking, from: Option<IpAddr>) {
    let host = PsHost {
        name: booking.host.clone(),
        url: String::new(),
        participants: [String::new(), String::new()],
        from,
    };
    if let Ok(c) = client(&host) {
        let url = format!("{}?key={}", booking.task_url, booking.key);
        let _ = call(&c, Method::DELETE, &url, None).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(text: &str) -> Iperf3Spec {
        let spec = goodput_core::spec::read_one(serde_json::from_str(text).unwrap()).unwrap();
        let TestSpec::Iperf3(s) = spec else {
            panic!("not iperf3: {text}")
        };
        s
    }

    #[test]
    fn a_goodput_spec_is_a_throughput_test() {
        let p = ["10.0.0.1".to_owned(), "10.0.0.2".to_owned()];
        let t = throughput_test(
            &spec(
                r#"{"kind":"iperf3","host":"10.0.0.2","time":"20s","parallel":4,"reverse":true,"omit":"2s"}"#,
            ),
            &p,
        )
        .unwrap();
        assert_eq!(
            t,
            json!({"type":"throughput","spec":{"schema":1,"source":"10.0.0.1","dest":"10.0.0.2",
                "duration":"PT20S","omit":"PT2S","parallel":4,"reverse":true}})
        );
        for (bad, why) in [
            (r#"{"kind":"iperf3","host":"h","bytes":"1G"}"#, "size-bound"),
            (r#"{"kind":"iperf3","host":"h","bidir":true}"#, "bidir"),
            (r#"{"kind":"iperf3","host":"h","time":"1500ms"}"#, "whole seconds"),
        ] {
            let e = throughput_test(&spec(bad), &p).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn free_times_become_the_hosts_busy_calendar() {
        // Free 10–20 and 30–40 within 0–50: busy 0–10, 20–30, 40–50.
        let c = busy_calendar(&[(30, 40), (10, 20)], 0, 50);
        // The slip keeps the run within the 0–50 the calendar covers.
        let start = |from: u64, len: u64| {
            place(
                &Calendar::new(),
                Some(&c),
                from,
                50 - from - len,
                len,
                goodput_core::schedule::RunClass::Exclusive,
            )
        };
        assert_eq!(start(0, 10).ok(), Some(10));
        assert_eq!(start(21, 10).ok(), Some(30));
        assert!(start(0, 11).is_err(), "no free span is 11 long");
        // Nothing free: busy throughout.
        let none = busy_calendar(&[], 0, 50);
        assert!(place(
            &Calendar::new(),
            Some(&none),
            0,
            40,
            5,
            goodput_core::schedule::RunClass::Exclusive
        )
        .is_err());
    }

    #[test]
    fn query_values_are_encoded() {
        let u = with_query(
            "https://10.0.0.2/pscheduler/tasks/x/runtimes",
            &[("start", "2026-11-28T15:39:42+00:00"), ("test", r#"{"a":1}"#)],
        );
        assert_eq!(
            u,
            "https://10.0.0.2/pscheduler/tasks/x/runtimes?start=2026-11-28T15%3A39%3A42%2B00%3A00&test=%7B%22a%22%3A1%7D"
        );
    }
}
