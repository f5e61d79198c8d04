//! The agent as the lead of perfSONAR pScheduler's single-participant
//! tests, `rtt`, `trace`, `latency` and `latencybg`: the source of such a test is its
//! only participant, so `pscheduler task rtt --source THIS_AGENT --dest X`
//! hands the whole task to this agent. The task's runs are goodput `ping`,
//! `trace` and `owamp` runs (the last to the far end's OWAMP server, as
//! pScheduler's owping tool runs), booked on the agent's own calendar in their own class
//! (background) under the limits a peer's bookings meet, started by the
//! executor like every run of the agent, and kept in the archive as runs
//! of task `pscheduler/TASK-UUID`. A `latencybg` run is a continuous
//! goodput `owamp` stream (as powstream's) for the task's duration; each
//! of its summaries, as it is stored, is added to the task as a finished
//! run of its own with that summary's result, the way pScheduler's runner
//! adds one for each powstream result. What the pScheduler command line reads
//! back (the task, its runs, each run's result in pScheduler's rtt,
//! trace or latency result format, and that result as text) is made here; the HTTP
//! side is `http::pscheduler`.
//!
//! What the command line asks and reads was learned from pScheduler's
//! `task`, `watch` and `result` commands and its API server's tasks and
//! runs; the spec fields and their meanings from its `rtt`, `trace` and
//! `latency` test plugins and its owping tool.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use goodput_archive::pscheduler_out::{iso_duration, owamp_summary_latency, to_pscheduler, Ends};
use goodput_archive::RunState;
use goodput_core::path::{PingMethod, ProbeMethod};
use goodput_core::result::{Detail, OneWaySummary, TestResult};
use goodput_core::schedule::RunClass;
use goodput_core::spec::owamp::{OwampDirection, MAX_TEST_PACKET, OPEN_HEADER};
use goodput_core::spec::{Family, OwampSpec, PingSpec, TestSpec, TraceSpec};
use goodput_core::units::HumanDuration;
use goodput_core::units::PortRange;
use serde_json::{json, Map, Value};
use tokio::sync::Notify;

use crate::clock;
use crate::log::log;
use crate::state::booking::{Booked, BookedBy, Wanted};
use crate::state::pscheduler::{
    hold, iso, PsOptions, PsRefusal, HORIZON_MS, MAX_RUNS_PER_TASK, MAX_TASKS_ALL,
};
use crate::state::Shared;

/// Most round trips one rtt run sends.
pub(crate) const MAX_COUNT: u64 = 1000;
/// The shortest and longest time between round trips, ms.
pub(crate) const INTERVAL_MS: (u64, u64) = (10, 60_000);
/// The longest a request or a probe waits for its answer, ms.
pub(crate) const MAX_WAIT_MS: u64 = 30_000;
/// Largest ICMP data (rtt `length`) and IP packet (trace `length`), bytes.
pub(crate) const MAX_LENGTH: u64 = 9000;
/// Most hops a trace probes.
pub(crate) const MAX_HOPS: u64 = 64;
/// Most probes a trace sends per hop.
pub(crate) const MAX_QUERIES: u64 = 10;
/// Most packets one latency run sends.
pub(crate) const MAX_PACKETS: u64 = 100_000;
/// The shortest and longest time between latency packets, ms (owping's
/// `-i`; pScheduler's default is 100 ms).
pub(crate) const PACKET_INTERVAL_MS: (f64, f64) = (1.0, 60_000.0);
/// The longest a latency packet may take before it is lost, s.
pub(crate) const MAX_PACKET_TIMEOUT_S: u64 = 60;
/// A run's slot is its own length and this much more: time to start, to
/// hear the last answer, and to be stored.
const SLOT_MARGIN_MS: u64 = 2_000;
/// The first run starts this long after the task is posted (whole
/// seconds, as pScheduler's times are).
const FIRST_START_MS: u64 = 2_000;
/// An ended task is kept this long for its results to be read.
const ENDED_KEEP_MS: u64 = 3_600_000;
/// A repeating task's runs are at least this far apart.
const MIN_REPEAT_MS: u64 = 10_000;
/// A latencybg stream's summaries are at least this far apart
/// (`packet-count` × `packet-interval`; perfSONAR's meshes use 60 s).
const MIN_SUMMARY_MS: f64 = 5_000.0;
/// A latencybg stream's longest duration (and its default, powstream's).
const MAX_STREAM_MS: u64 = 86_400_000;
/// The summaries of a latencybg task kept for pScheduler to read, the
/// newest: a day's at one a minute (the archive keeps every one).
pub(crate) const MAX_SUMMARIES: usize = 1440;
/// Most latencybg tasks under way here at once: each keeps up to
/// [`MAX_SUMMARIES`] results in memory.
pub(crate) const MAX_STREAMING_TASKS: usize = 16;

/// pScheduler's single-participant test types this agent leads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TestType {
    Rtt,
    Trace,
    Latency,
    LatencyBg,
}

impl TestType {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Rtt => "rtt",
            Self::Trace => "trace",
            Self::Latency => "latency",
            Self::LatencyBg => "latencybg",
        }
    }

    /// The tool this agent runs it with.
    pub(crate) fn tool(self) -> &'static str {
        match self {
            Self::Rtt => "goodput-ping",
            Self::Trace => "goodput-trace",
            Self::Latency => "goodput-owamp",
            Self::LatencyBg => "goodput-powstream",
        }
    }

    /// The names a task may ask for the tool by: goodput's, and those of
    /// pScheduler's tools that measure the same (a template's preference
    /// list names those).
    fn answers_to(self, tool: &str) -> bool {
        match self {
            Self::Rtt => matches!(tool, "goodput-ping" | "ping"),
            Self::Trace => matches!(tool, "goodput-trace" | "traceroute" | "tracepath"),
            Self::Latency => matches!(tool, "goodput-owamp" | "owping"),
            Self::LatencyBg => matches!(tool, "goodput-powstream" | "powstream"),
        }
    }

    /// The test type named `name`, or why this agent does not lead it.
    pub(crate) fn named(name: &str) -> Result<Self, String> {
        match name {
            "rtt" => Ok(Self::Rtt),
            "trace" => Ok(Self::Trace),
            "latency" => Ok(Self::Latency),
            "latencybg" => Ok(Self::LatencyBg),
            "throughput" => Err(
                "this goodput agent takes part in throughput tasks other hosts lead (as their destination); \
                 it leads none"
                    .into(),
            ),
            other => Err(format!(
                "this goodput agent leads pScheduler's rtt, trace, latency and latencybg tests only, not {other}"
            )),
        }
    }

    /// Whether its runs add results while they run (pScheduler's
    /// background-multi scheduling class).
    pub(crate) fn multi_result(self) -> bool {
        self == Self::LatencyBg
    }
}

/// A single-participant test read from a task, with every number bounded:
/// the goodput spec it runs as, and its slot's length.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SingleTest {
    pub(crate) ty: TestType,
    pub(crate) spec: TestSpec,
    pub(crate) source: Option<String>,
    pub(crate) dest: String,
    pub(crate) slot_ms: u64,
    /// `latency`'s histogram bucket, seconds (`bucket-width`).
    pub(crate) bucket_s: f64,
}

/// A duration field as milliseconds within `[lo, hi]`.
fn duration_ms(spec: &Map<String, Value>, field: &str, lo: u64, hi: u64) -> Result<Option<u64>, String> {
    let Some(v) = spec.get(field).filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    let text = v
        .as_str()
        .ok_or_else(|| format!("{field} must be an ISO 8601 duration"))?;
    let s = goodput_archive::pscheduler::iso_seconds(text).map_err(|e| format!("{field}: {e}"))?;
    let ms = s * 1000.0;
    if !ms.is_finite() || ms < lo as f64 || ms > hi as f64 {
        return Err(format!(
            "{field} is {text}; this agent takes {} to {}",
            iso_duration(lo as f64 / 1000.0),
            iso_duration(hi as f64 / 1000.0)
        ));
    }
    Ok(Some(ms.round() as u64))
}

/// A whole-number field within `[lo, hi]`.
fn whole(spec: &Map<String, Value>, field: &str, lo: u64, hi: u64) -> Result<Option<u64>, String> {
    match spec.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .filter(|n| (lo..=hi).contains(n))
            .map(Some)
            .ok_or_else(|| format!("{field} must be a whole number from {lo} to {hi}, not {v}")),
    }
}

fn flag(spec: &Map<String, Value>, field: &str) -> Result<Option<bool>, String> {
    match spec.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(v) => Err(format!("{field} must be true or false, not {v}")),
    }
}

fn host(spec: &Map<String, Value>, field: &str) -> Result<Option<String>, String> {
    match spec.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s))
            if !s.is_empty()
                && s.len() <= 255
                && s.bytes()
                    .all(|c| c.is_ascii_alphanumeric() || b".-:_%".contains(&c)) =>
        {
            Ok(Some(s.clone()))
        }
        Some(v) => Err(format!("{field} must be a host name or address, not {v}")),
    }
}

/// The address family of `ip-version`.
fn family(spec: &Map<String, Value>) -> Result<Family, String> {
    match spec.get("ip-version") {
        None | Some(Value::Null) => Ok(Family::Any),
        Some(v) if v == 4 => Ok(Family::Ipv4),
        Some(v) if v == 6 => Ok(Family::Ipv6),
        Some(v) => Err(format!("ip-version must be 4 or 6, not {v}")),
    }
}

/// Fields of the spec this agent cannot honour, named in the refusal.
fn refuse_fields(spec: &Map<String, Value>, known: &[&str], not_here: &[&str]) -> Result<(), String> {
    if let Some(f) = spec.keys().find(|k| not_here.contains(&k.as_str())) {
        return Err(format!(
            "goodput's {f} is not offered: this agent cannot honour the {f} option"
        ));
    }
    if let Some(f) = spec
        .keys()
        .find(|k| !known.contains(&k.as_str()) && !not_here.contains(&k.as_str()))
    {
        return Err(format!("the {f} option is not one of the test's"));
    }
    Ok(())
}

impl SingleTest {
    /// Reads a task's `test` (`{type, spec}`). An error starting `limit `
    /// is the agent's limit, else the request's fault.
    pub(crate) fn read(test: &Value, max_duration: Duration) -> Result<Self, String> {
        let ty = test
            .get("type")
            .and_then(Value::as_str)
            .ok_or("the test has no type")?;
        let ty = TestType::named(ty)?;
        let spec = test
            .get("spec")
            .and_then(Value::as_object)
            .ok_or("the test has no spec")?;
        let t = match ty {
            TestType::Rtt => Self::read_rtt(spec)?,
            TestType::Trace => Self::read_trace(spec)?,
            TestType::Latency => Self::read_latency(spec, false)?,
            TestType::LatencyBg => Self::read_latency(spec, true)?,
        };
        t.spec.validate().map_err(|e| format!("{e}"))?;
        let max_ms = u64::try_from(max_duration.as_millis()).unwrap_or(u64::MAX);
        if t.slot_ms > max_ms {
            return Err(format!(
                "limit max_duration: a run would take {} s, more than the {} s this agent accepts",
                t.slot_ms / 1000,
                max_ms / 1000
            ));
        }
        Ok(t)
    }

    fn read_rtt(spec: &Map<String, Value>) -> Result<Self, String> {
        refuse_fields(
            spec,
            &[
                "schema",
                "count",
                "dest",
                "hostnames",
                "interval",
                "ip-version",
                "source",
                "source-node",
                "suppress-loopback",
                "length",
                "timeout",
                "protocol",
            ],
            &["flow-label", "fragment", "ip-tos", "ttl", "deadline", "port"],
        )?;
        whole(spec, "schema", 1, 4)?;
        if let Some(p) = spec.get("protocol").filter(|p| !p.is_null()) {
            if p != "icmp" {
                return Err(format!(
                    "protocol {p} is not offered: this agent's rtt is ICMP echo"
                ));
            }
        }
        flag(spec, "hostnames")?;
        flag(spec, "suppress-loopback")?;
        let dest = host(spec, "dest")?.ok_or("the spec names no dest")?;
        let source = host(spec, "source")?;
        let count = whole(spec, "count", 1, MAX_COUNT)?.unwrap_or(5);
        let interval = duration_ms(spec, "interval", INTERVAL_MS.0, INTERVAL_MS.1)?.unwrap_or(1000);
        let timeout = duration_ms(spec, "timeout", 1, MAX_WAIT_MS)?.unwrap_or(1000);
        let length = whole(spec, "length", 0, MAX_LENGTH)?.unwrap_or(56);
        let p = PingSpec {
            host: dest.clone(),
            method: PingMethod::Icmp,
            count,
            interval: HumanDuration(Duration::from_millis(interval)),
            timeout: HumanDuration(Duration::from_millis(timeout)),
            size: length as u32,
            bind: source.as_deref().and_then(|s| s.parse().ok()),
            family: family(spec)?,
            ..PingSpec::default()
        };
        let spec = TestSpec::Ping(p);
        let own = spec.expected_ms().unwrap_or(0);
        Ok(Self {
            ty: TestType::Rtt,
            slot_ms: own.saturating_add(SLOT_MARGIN_MS),
            spec,
            source,
            dest,
            bucket_s: 0.001,
        })
    }

    fn read_trace(spec: &Map<String, Value>) -> Result<Self, String> {
        refuse_fields(
            spec,
            &[
                "schema",
                "dest",
                "dest-port",
                "first-ttl",
                "hops",
                "hostnames",
                "ip-version",
                "length",
                "probe-type",
                "queries",
                "source",
                "source-node",
                "wait",
            ],
            &["algorithm", "as", "flow-label", "fragment", "ip-tos", "sendwait"],
        )?;
        whole(spec, "schema", 1, 2)?;
        let dest = host(spec, "dest")?.ok_or("the spec names no dest")?;
        let source = host(spec, "source")?;
        let method = match spec.get("probe-type").and_then(Value::as_str) {
            None => ProbeMethod::Udp,
            Some("udp") => ProbeMethod::Udp,
            Some("tcp") => ProbeMethod::Tcp,
            Some("icmp") => ProbeMethod::Icmp,
            Some(other) => return Err(format!("probe-type must be icmp, udp or tcp, not {other}")),
        };
        let hops = whole(spec, "hops", 1, MAX_HOPS)?.unwrap_or(30);
        let first = whole(spec, "first-ttl", 1, hops)?.unwrap_or(1);
        let queries = whole(spec, "queries", 1, MAX_QUERIES)?.unwrap_or(1);
        let wait = duration_ms(spec, "wait", 1, MAX_WAIT_MS)?.unwrap_or(5000);
        let length = whole(spec, "length", 28, MAX_LENGTH)?;
        let port = whole(spec, "dest-port", 1, 65_535)?;
        let t = TraceSpec {
            host: dest.clone(),
            method,
            port: port.map(|p| p as u16),
            first_hop: first as u8,
            max_hops: hops as u8,
            probes: queries as u32,
            wait: HumanDuration(Duration::from_millis(wait)),
            size: length.map(|l| l as u32),
            // Names are looked up only when asked: a lookup with no
            // resolver answering would hold the run.
            names: flag(spec, "hostnames")?.unwrap_or(false),
            bind: source.as_deref().and_then(|s| s.parse().ok()),
            family: family(spec)?,
            ..TraceSpec::default()
        };
        let spec = TestSpec::Trace(t);
        let own = spec.expected_ms().unwrap_or(0);
        Ok(Self {
            ty: TestType::Trace,
            slot_ms: own.saturating_add(SLOT_MARGIN_MS),
            spec,
            source,
            dest,
            bucket_s: 0.001,
        })
    }
}

impl SingleTest {
    /// pScheduler's `latency` as owping runs it for a lead that is the
    /// source: a session from the source to the dest's OWAMP server (or,
    /// with `flip`, the lead is the dest and asks the source's server to
    /// send to it).
    /// `latency`, or with `stream` `latencybg` (its own fields and
    /// defaults: a `duration`, 600 packets a summary).
    fn read_latency(spec: &Map<String, Value>, stream: bool) -> Result<Self, String> {
        // latencybg's fields, in its schema's order; latency's are the
        // same but for its duration, and it has reverse and traverse-nat.
        let mut known: Vec<&str> = std::iter::once("schema")
            .chain(LATENCYBG_ORDER.iter().copied())
            .filter(|f| stream || *f != "duration")
            .collect();
        if !stream {
            known.extend(["reverse", "traverse-nat"]);
        }
        refuse_fields(spec, &known, &[])?;
        whole(spec, "schema", 1, 4)?;
        if let Some(p) = spec.get("protocol").filter(|p| !p.is_null()) {
            if p != "owamp" {
                return Err(format!(
                    "protocol {p} is not offered: this agent's latency test is OWAMP (owping)"
                ));
            }
        }
        let refuse_true = |f: &str, why: &str| match flag(spec, f) {
            Ok(Some(true)) => Err(format!("{f} is not offered: {why}")),
            Ok(_) => Ok(()),
            Err(e) => Err(e),
        };
        refuse_true(
            "output-raw",
            "goodput keeps an OWAMP session's counts and delay histogram, not each packet",
        )?;
        refuse_true(
            "reverse",
            "a latency run here measures the direction its source sends (use flip, or a task the \
             other way)",
        )?;
        refuse_true("traverse-nat", "this agent's OWAMP client does not traverse NAT")?;
        let flip = flag(spec, "flip")?.unwrap_or(false);
        let dest = plain_host(spec, "dest")?.ok_or("the spec names no dest")?;
        let source = plain_host(spec, "source")?;
        host(spec, "source-node")?;
        host(spec, "dest-node")?;
        let count = whole(spec, "packet-count", 1, MAX_PACKETS)?.unwrap_or(if stream { 600 } else { 100 });
        let interval_ms = match spec.get("packet-interval").filter(|v| !v.is_null()) {
            None => 100.0,
            Some(v) => v
                .as_f64()
                .map(|s| s * 1000.0)
                .filter(|ms| (PACKET_INTERVAL_MS.0..=PACKET_INTERVAL_MS.1).contains(ms))
                .ok_or_else(|| {
                    format!(
                        "packet-interval must be {} to {} seconds, not {v}",
                        PACKET_INTERVAL_MS.0 / 1000.0,
                        PACKET_INTERVAL_MS.1 / 1000.0
                    )
                })?,
        };
        // 0 (pScheduler's default) is owping's own; goodput's is 2 s.
        let timeout_s = whole(spec, "packet-timeout", 0, MAX_PACKET_TIMEOUT_S)?.unwrap_or(0);
        let padding = whole(
            spec,
            "packet-padding",
            0,
            u64::from(MAX_TEST_PACKET - OPEN_HEADER),
        )?;
        let port = whole(spec, "ctrl-port", 1, 65_535)?;
        // owping's -D: the DSCP.
        let dscp = whole(spec, "ip-tos", 0, 63)?;
        let test_ports = match spec.get("data-ports").filter(|v| !v.is_null()) {
            None => None,
            Some(v) => {
                let end = |f: &str| {
                    v.get(f)
                        .and_then(Value::as_u64)
                        .filter(|p| (1..=65_535).contains(p))
                };
                match (end("lower"), end("upper")) {
                    (Some(lo), Some(hi)) if lo < hi => Some(PortRange {
                        lo: lo as u16,
                        hi: hi as u16,
                    }),
                    _ => {
                        return Err(format!(
                        "data-ports must be {{\"lower\": N, \"upper\": M}} with 1 <= N < M <= 65535, not {v}"
                    ))
                    }
                }
            }
        };
        let bucket_s = match spec.get("bucket-width").filter(|v| !v.is_null()) {
            None => 0.001,
            Some(v) => v
                .as_f64()
                .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
                .filter(|w| *w >= 1e-6 && *w < 1.0)
                .ok_or_else(|| {
                    format!("bucket-width must be at least 0.000001 and below 1 second, not {v}")
                })?,
        };
        family(spec)?;
        let duration_ms = if stream {
            let d = duration_ms(spec, "duration", 1_000, MAX_STREAM_MS)?.unwrap_or(MAX_STREAM_MS);
            if count as f64 * interval_ms < MIN_SUMMARY_MS {
                return Err(format!(
                    "packet-count × packet-interval is a summary every {} s; this agent gives one \
                     at most every {} s",
                    count as f64 * interval_ms / 1000.0,
                    MIN_SUMMARY_MS / 1000.0
                ));
            }
            Some(d)
        } else {
            None
        };
        // The far end's OWAMP server, and this end's address.
        let (far, near) = if flip {
            (
                source.clone().ok_or("with flip the spec must name the source")?,
                Some(dest.clone()),
            )
        } else {
            (dest.clone(), source.clone())
        };
        let o = OwampSpec {
            host: Some(far),
            port: port.map_or(goodput_core::spec::owamp::OWAMP_PORT, |p| p as u16),
            direction: if flip {
                OwampDirection::From
            } else {
                OwampDirection::To
            },
            count,
            interval: HumanDuration(Duration::from_micros((interval_ms * 1000.0).round() as u64)),
            padding: padding.unwrap_or(0) as u32,
            dscp: dscp.unwrap_or(0) as u8,
            timeout: HumanDuration(if timeout_s == 0 {
                OwampSpec::default().timeout.0
            } else {
                Duration::from_secs(timeout_s)
            }),
            test_ports,
            bind: near.as_deref().and_then(|s| s.parse().ok()),
            family: family(spec)?,
            continuous: stream,
            summary_every: if stream {
                count
            } else {
                OwampSpec::default().summary_every
            },
            duration: duration_ms.map(|ms| HumanDuration(Duration::from_millis(ms))),
            ..OwampSpec::default()
        };
        let spec = TestSpec::Owamp(o);
        let own = spec.expected_ms().unwrap_or(0);
        Ok(Self {
            ty: if stream {
                TestType::LatencyBg
            } else {
                TestType::Latency
            },
            // OWAMP-Control's set-up and the session's fetch too.
            slot_ms: own.saturating_add(SLOT_MARGIN_MS + 2_000),
            spec,
            source,
            dest,
            bucket_s,
        })
    }
}

/// A host field as `host`, but with no port in it (an IPv6 address is
/// taken whole).
fn plain_host(spec: &Map<String, Value>, field: &str) -> Result<Option<String>, String> {
    let h = host(spec, field)?;
    if let Some(h) = &h {
        if h.contains(':') && h.parse::<std::net::Ipv6Addr>().is_err() {
            return Err(format!("{field} must be a host name or address, not {h:?}"));
        }
    }
    Ok(h)
}

/// When a task's runs start: the first at `start` (or as soon as may
/// be), then every `repeat` until `max-runs` or `until`, all within the
/// agent's horizon and the per-task cap.
pub(crate) fn run_starts(schedule: Option<&Value>, slot_ms: u64, now: u64) -> Result<Vec<u64>, String> {
    let empty = Map::new();
    let s = match schedule {
        None | Some(Value::Null) => &empty,
        Some(Value::Object(m)) => m,
        Some(_) => return Err("the schedule must be an object".into()),
    };
    if let Some(f) = s.keys().find(|k| {
        ![
            "start",
            "slip",
            "sliprand",
            "repeat",
            "max-runs",
            "until",
            "repeat-cron",
        ]
        .contains(&k.as_str())
    }) {
        return Err(format!("the schedule's {f} is not one of pScheduler's"));
    }
    if s.get("repeat-cron").is_some_and(|v| !v.is_null()) {
        return Err("repeat-cron is not offered: give repeat with max-runs or until".into());
    }
    let soonest = (now + FIRST_START_MS).div_ceil(1000) * 1000;
    let first = match s.get("start").and_then(Value::as_str) {
        None => soonest,
        Some(t) => {
            let at = goodput_archive::pscheduler::iso_time_ms(t).map_err(|e| format!("start: {e}"))?;
            at.max(soonest)
        }
    };
    if first > now.saturating_add(HORIZON_MS) {
        return Err("start must be within 7 days".into());
    }
    let Some(repeat) = s.get("repeat").filter(|v| !v.is_null()) else {
        return Ok(vec![first]);
    };
    let repeat_s = repeat
        .as_str()
        .ok_or("repeat must be an ISO 8601 duration")
        .and_then(|r| {
            goodput_archive::pscheduler::iso_seconds(r).map_err(|_| "repeat must be an ISO 8601 duration")
        })?;
    let repeat_ms = (repeat_s * 1000.0).round();
    let min = MIN_REPEAT_MS.max(slot_ms);
    if !repeat_ms.is_finite() || repeat_ms < min as f64 || repeat_ms > 86_400_000.0 {
        return Err(format!(
            "repeat must be from {} (the run's slot, at least 10 s) to P1D",
            iso_duration(min as f64 / 1000.0)
        ));
    }
    let repeat_ms = repeat_ms as u64;
    let max_runs = match s.get("max-runs").filter(|v| !v.is_null()) {
        None => None,
        Some(v) => Some(
            v.as_u64()
                .filter(|n| (1..=MAX_RUNS_PER_TASK as u64).contains(n))
                .ok_or_else(|| format!("max-runs must be from 1 to {MAX_RUNS_PER_TASK}"))?,
        ),
    };
    let until = match s.get("until").and_then(Value::as_str) {
        None => None,
        Some(t) => Some(goodput_archive::pscheduler::iso_time_ms(t).map_err(|e| format!("until: {e}"))?),
    };
    if max_runs.is_none() && until.is_none() {
        return Err(format!(
            "a repeating task needs max-runs (at most {MAX_RUNS_PER_TASK}) or until: this agent books \
             every run of a task when it is posted"
        ));
    }
    let end = until.unwrap_or(u64::MAX).min(now.saturating_add(HORIZON_MS));
    let mut starts = Vec::new();
    let mut at = first;
    while at < end && starts.len() < max_runs.unwrap_or(u64::MAX) as usize {
        if starts.len() >= MAX_RUNS_PER_TASK {
            return Err(format!(
                "limit pscheduler_runs_per_task: the task would have more than {MAX_RUNS_PER_TASK} runs"
            ));
        }
        starts.push(at);
        at += repeat_ms;
    }
    if starts.is_empty() {
        return Err("until is before the first run".into());
    }
    Ok(starts)
}

/// Where a run stands, in pScheduler's words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RunPhase {
    Pending,
    Running,
    Finished,
    Failed,
    Missed,
    NonStart,
    Canceled,
}

impl RunPhase {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Running => "running",
            Self::Finished => "finished",
            Self::Failed => "failed",
            Self::Missed => "missed",
            Self::NonStart => "nonstart",
            Self::Canceled => "canceled",
        }
    }

    fn display(self) -> &'static str {
        match self {
            Self::Pending => "Pending",
            Self::Running => "Running",
            Self::Finished => "Finished",
            Self::Failed => "Failed",
            Self::Missed => "Missed",
            Self::NonStart => "Non-Starter",
            Self::Canceled => "Canceled",
        }
    }

    fn ended(self) -> bool {
        !matches!(self, Self::Pending | Self::Running)
    }
}

/// One run of a led task.
#[derive(Debug, Clone)]
pub(crate) struct LedRun {
    pub(crate) uuid: String,
    pub(crate) number: u64,
    pub(crate) added_ms: u64,
    pub(crate) start_ms: u64,
    pub(crate) end_ms: u64,
    pub(crate) phase: RunPhase,
    /// pScheduler's result of the run (`succeeded`, the figures or the
    /// error), once it ended.
    pub(crate) result: Option<Value>,
    /// When it really started and ended.
    pub(crate) ran: Option<(u64, u64)>,
    /// Why it did not start.
    pub(crate) errors: Option<String>,
    /// A latencybg stream's summary, added while its run ran (booked
    /// runs: false).
    pub(crate) summary: bool,
}

/// A task a pScheduler client gave this agent to lead.
#[derive(Debug)]
pub(crate) struct LedTask {
    pub(crate) requester: IpAddr,
    /// The task as posted, its tool filled in.
    pub(crate) doc: Value,
    pub(crate) test: SingleTest,
    pub(crate) added_ms: u64,
    /// This host's name for pScheduler (the participant).
    pub(crate) here: String,
    /// In start order.
    pub(crate) runs: Vec<LedRun>,
}

impl LedTask {
    fn ended(&self) -> bool {
        self.runs.iter().all(|r| r.phase.ended())
    }

    fn last_end(&self) -> u64 {
        self.runs
            .iter()
            .map(|r| r.ran.map_or(r.end_ms, |x| x.1))
            .max()
            .unwrap_or(self.added_ms)
    }
}

/// The tasks this agent leads for pScheduler clients, under one lock;
/// `done` wakes those waiting for a run's result.
#[derive(Default)]
pub(crate) struct SingleState {
    tasks: Mutex<HashMap<String, LedTask>>,
    pub(crate) done: Notify,
}

impl SingleState {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, LedTask>> {
        self.tasks.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether `uuid` is a task this agent leads.
    pub(crate) fn has(&self, uuid: &str) -> bool {
        self.lock().contains_key(uuid)
    }

    /// The tasks from `requester` whose runs have not all ended.
    pub(crate) fn active_of(&self, requester: IpAddr) -> usize {
        self.lock()
            .values()
            .filter(|t| t.requester == requester && !t.ended())
            .count()
    }

    /// Runs `f` on the task `uuid` if `requester` posted it.
    pub(crate) fn owned<R>(
        &self,
        uuid: &str,
        requester: IpAddr,
        f: impl FnOnce(&mut LedTask) -> R,
    ) -> Result<R, PsRefusal> {
        match self.lock().get_mut(uuid) {
            Some(t) if t.requester == requester => Ok(f(t)),
            _ => Err(PsRefusal::NotFound),
        }
    }
}

/// Takes a task `requester` posted for this agent to lead (`others`: the
/// tasks it keeps here as a participant): its test read, its tool chosen,
/// every run booked. Returns the task's UUID.
pub(crate) async fn create(
    shared: &Arc<Shared>,
    st: &Arc<SingleState>,
    ps: &PsOptions,
    requester: IpAddr,
    mut doc: Value,
    others: usize,
) -> Result<String, PsRefusal> {
    let bad = |e: String| PsRefusal::Bad(e);
    let test_doc = doc
        .get("test")
        .ok_or_else(|| bad("the task has no test".into()))?;
    let test = SingleTest::read(test_doc, shared.options.limits.max_duration).map_err(|e| {
        if e.starts_with("limit ") {
            PsRefusal::Forbidden(format!("Task forbidden by limits:\n{e}"))
        } else if e.starts_with("this goodput agent") {
            PsRefusal::CannotDo(e)
        } else {
            bad(format!("Invalid test specification: {e}"))
        }
    })?;
    // The tool: the one asked for, or the first of the task's preferences
    // this agent has, or its own.
    let mut asked: Vec<String> = Vec::new();
    if let Some(t) = doc.get("tool").filter(|t| !t.is_null()) {
        asked.push(
            t.as_str()
                .ok_or_else(|| bad("tool must be a name".into()))?
                .to_owned(),
        );
    }
    if let Some(list) = doc.get("tools").filter(|t| !t.is_null()) {
        let list = list
            .as_array()
            .ok_or_else(|| bad("tools must be a list of names".into()))?;
        for t in list.iter().take(32) {
            asked.push(
                t.as_str()
                    .ok_or_else(|| bad("tools must be a list of names".into()))?
                    .to_owned(),
            );
        }
    }
    if !asked.is_empty() && !asked.iter().any(|t| test.ty.answers_to(t)) {
        return Err(PsRefusal::CannotDo(format!(
            "No tool in common: this agent runs {} with {}, not {}",
            test.ty.name(),
            test.ty.tool(),
            asked.join(", ")
        )));
    }
    if doc
        .get("archives")
        .and_then(Value::as_array)
        .is_some_and(|a| !a.is_empty())
    {
        return Err(PsRefusal::CannotDo(
            "this agent keeps its runs in its own archive and runs no pScheduler archivers; \
             post the task without archives"
                .into(),
        ));
    }
    if doc.get("contexts").is_some_and(|c| !c.is_null()) {
        return Err(PsRefusal::CannotDo(
            "contexts are not offered by this agent".into(),
        ));
    }
    let now = clock::now_ms();
    let starts = run_starts(doc.get("schedule"), test.slot_ms, now).map_err(|e| {
        if e.starts_with("limit ") {
            PsRefusal::Forbidden(format!("Task forbidden by limits:\n{e}"))
        } else {
            bad(format!("Invalid schedule: {e}"))
        }
    })?;
    let uuid = uuid::Uuid::new_v4().to_string();
    let loaded = shared.loaded();
    let here_name = loaded.mine.first().cloned();
    let here = here_name
        .as_ref()
        .and_then(|m| loaded.config.addresses.get(m))
        .map(|a| a.address.clone())
        .or_else(|| test.source.clone())
        .unwrap_or_else(|| "localhost".into());
    if let Value::Object(m) = &mut doc {
        m.insert("tool".into(), json!(test.ty.tool()));
        m.remove("tools");
    }
    {
        let mut tasks = st.lock();
        // Tasks whose runs all ended an hour ago are forgotten; past the
        // cap of all tasks, the oldest ended ones first.
        tasks.retain(|_, t| !t.ended() || now.saturating_sub(t.last_end()) < ENDED_KEEP_MS);
        let mine = tasks
            .values()
            .filter(|t| t.requester == requester && !t.ended())
            .count()
            + others;
        let streaming = tasks
            .values()
            .filter(|t| t.test.ty.multi_result() && !t.ended())
            .count();
        if test.ty.multi_result() && streaming >= MAX_STREAMING_TASKS {
            return Err(PsRefusal::Forbidden(format!(
                "Task forbidden by limits:\nlimit pscheduler_latencybg_tasks: {streaming} latencybg tasks are under way here, {MAX_STREAMING_TASKS} allowed"
            )));
        }
        if mine >= ps.max_tasks {
            return Err(PsRefusal::Forbidden(format!(
                "Task forbidden by limits:\nlimit pscheduler_max_tasks: {requester} keeps {mine} tasks here, {} allowed",
                ps.max_tasks
            )));
        }
        if tasks.len() >= MAX_TASKS_ALL {
            let oldest = tasks
                .iter()
                .filter(|(_, t)| t.ended())
                .min_by_key(|(_, t)| t.last_end())
                .map(|(k, _)| k.clone());
            match oldest {
                Some(k) => {
                    tasks.remove(&k);
                }
                None => {
                    return Err(PsRefusal::Forbidden(format!(
                    "Task forbidden by limits:\nlimit pscheduler_tasks: {MAX_TASKS_ALL} tasks are kept here"
                )))
                }
            }
        }
        tasks.insert(
            uuid.clone(),
            LedTask {
                requester,
                doc,
                test: test.clone(),
                added_ms: now,
                here: here.clone(),
                runs: Vec::new(),
            },
        );
    }
    // Every run booked now; any refusal takes the task back.
    let source = here_name.unwrap_or_else(|| here.clone());
    let mut booked = Vec::new();
    for start in starts {
        let run = uuid::Uuid::new_v4().to_string();
        match book(shared, requester, &uuid, &run, &test, &source, start, now).await {
            Ok(b) => booked.push((run, b)),
            Err(r) => {
                for (_, b) in &booked {
                    shared.unbook(&b.id);
                }
                let records: Vec<_> = booked
                    .iter()
                    .map(|(_, b)| {
                        let mut r = b.record(RunState::Cancelled, Some("the task was refused".into()));
                        r.start_ms = None;
                        r.end_ms = None;
                        r
                    })
                    .collect();
                shared.store(&records).await;
                st.lock().remove(&uuid);
                return Err(r);
            }
        }
    }
    let _ = st.owned(&uuid, requester, |t| {
        t.runs = booked
            .iter()
            .map(|(run, b)| LedRun {
                uuid: run.clone(),
                number: b.number,
                added_ms: now,
                start_ms: b.start_ms,
                end_ms: b.end_ms,
                phase: RunPhase::Pending,
                result: None,
                ran: None,
                errors: None,
                summary: false,
            })
            .collect();
    });
    shared.wake.notify_one();
    tokio::spawn(follow(shared.clone(), st.clone(), uuid.clone(), here));
    Ok(uuid)
}

/// Books one run: a background run of this host's on its calendar,
/// under the limits a peer's booking meets (runs held for others, the
/// run's length, runs per hour), stored as scheduled before it counts.
#[allow(clippy::too_many_arguments)]
async fn book(
    shared: &Arc<Shared>,
    requester: IpAddr,
    task: &str,
    run: &str,
    test: &SingleTest,
    source: &str,
    start: u64,
    now: u64,
) -> Result<Booked, PsRefusal> {
    let class = RunClass::of_kind(test.spec.kind());
    let wanted = Wanted {
        id: format!("pscheduler/{task}/{run}"),
        task: format!("pscheduler/{task}"),
        source: source.to_owned(),
        dest: Some(test.dest.clone()),
        spec: test.spec.clone(),
        class,
        scheduled_ms: start,
        runs_here: true,
        peer: None,
    };
    let end = start.saturating_add(test.slot_ms);
    let mut b = Booked::new(wanted, start, end, BookedBy::Peer(requester));
    b.booked_by = format!("pScheduler client {}", requester.to_canonical());
    hold(shared, &b, requester, class, now).await?;
    Ok(b)
}

/// Follows a task's runs as the executor runs them: each run's phase, and
/// once it is stored, its record as pScheduler's result.
async fn follow(shared: Arc<Shared>, st: Arc<SingleState>, task: String, here: String) {
    let Some(test) = st.lock().get(&task).map(|t| t.test.clone()) else {
        return;
    };
    loop {
        // The next run not yet ended.
        let next = st.lock().get(&task).and_then(|t| {
            t.runs
                .iter()
                .find(|r| !r.phase.ended())
                .map(|r| (r.uuid.clone(), r.number, r.start_ms, r.end_ms))
        });
        let Some((run, number, start, end)) = next else {
            return;
        };
        let id = format!("pscheduler/{task}/{run}");
        // A latencybg run's summaries, told as they are stored.
        let mut tap = test.ty.multi_result().then(|| Tap::new(&shared, &id));
        let wait = Duration::from_millis(start.saturating_sub(clock::now_ms()));
        tokio::select! {
            _ = shared.cancel.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
        // Under way until the executor lets go of it (its slot's end at
        // the latest, and the time to store it).
        let give_up = Duration::from_millis(end.saturating_sub(clock::now_ms()) + 30_000);
        let t0 = tokio::time::Instant::now();
        loop {
            let (held, started) = {
                let inner = shared.lock();
                match inner.book.booked.get(&number) {
                    Some(b) => (true, b.started),
                    None => (false, false),
                }
            };
            if !held {
                break;
            }
            if started {
                set_phase(&st, &task, &run, RunPhase::Running);
            }
            if t0.elapsed() > give_up {
                break;
            }
            tokio::select! {
                _ = shared.cancel.cancelled() => return,
                _ = tokio::time::sleep(Duration::from_millis(100)) => {}
                Some(row) = next_row(&mut tap) => add_summary(&st, &task, &row, &test, &here),
            }
        }
        // The executor stores the stream's last summaries before it lets
        // go of the run.
        if let Some(t) = &mut tap {
            while let Ok(row) = t.rx.try_recv() {
                add_summary(&st, &task, &row, &test, &here);
            }
        }
        drop(tap);
        // The executor lets go of the run before it stores its last
        // record: the record that says it ended is waited for (10 s).
        let mut stored = shared.archive.get(&id).await;
        for _ in 0..100 {
            if !matches!(&stored, Ok(Some(r)) if !r.state.has_ended()) {
                break;
            }
            tokio::select! {
                _ = shared.cancel.cancelled() => return,
                _ = tokio::time::sleep(Duration::from_millis(100)) => {}
            }
            stored = shared.archive.get(&id).await;
        }
        let (phase, result, ran, errors) = match stored {
            Ok(Some(r)) => outcome(&r, &here, &test),
            Ok(None) => (
                RunPhase::Failed,
                Some(failed("the run's record was not stored")),
                None,
                None,
            ),
            Err(e) => {
                log(&format!("pScheduler run {id}: its record does not read: {e}"));
                (
                    RunPhase::Failed,
                    Some(failed(&format!("the run's record does not read: {e}"))),
                    None,
                    None,
                )
            }
        };
        let known = st
            .owned_any(&task, |t| {
                if let Some(r) = t.runs.iter_mut().find(|r| r.uuid == run) {
                    if !r.phase.ended() {
                        r.phase = phase;
                        r.result = result;
                        r.ran = ran;
                        r.errors = errors;
                    }
                }
            })
            .is_some();
        st.done.notify_waiters();
        if !known {
            return;
        }
    }
}

impl SingleState {
    fn owned_any<R>(&self, uuid: &str, f: impl FnOnce(&mut LedTask) -> R) -> Option<R> {
        self.lock().get_mut(uuid).map(f)
    }
}

fn set_phase(st: &SingleState, task: &str, run: &str, phase: RunPhase) {
    st.owned_any(task, |t| {
        if let Some(r) = t.runs.iter_mut().find(|r| r.uuid == run && !r.phase.ended()) {
            r.phase = phase;
        }
    });
}

/// A run's summaries as they are stored, while it is held (untapped when
/// dropped).
struct Tap {
    shared: Arc<Shared>,
    id: String,
    rx: tokio::sync::mpsc::Receiver<Box<goodput_archive::Run>>,
}

impl Tap {
    fn new(shared: &Arc<Shared>, id: &str) -> Self {
        Self {
            shared: shared.clone(),
            id: id.to_owned(),
            rx: shared.tap(id),
        }
    }
}

impl Drop for Tap {
    fn drop(&mut self) {
        self.shared.untap(&self.id);
    }
}

/// The next summary of a tapped run; never, with no tap.
async fn next_row(tap: &mut Option<Tap>) -> Option<Box<goodput_archive::Run>> {
    match tap {
        Some(t) => t.rx.recv().await,
        None => std::future::pending().await,
    }
}

/// Adds a stream's stored summary to its task as a finished run with
/// that summary's latencybg result, as pScheduler's runner adds one for
/// each powstream result (its times the moment it was added); past
/// [`MAX_SUMMARIES`] the oldest summary goes.
fn add_summary(st: &SingleState, task: &str, row: &goodput_archive::Run, test: &SingleTest, here: &str) {
    let Some(summary) = row
        .result
        .as_ref()
        .and_then(|v| serde_json::from_value::<OneWaySummary>(v.clone()).ok())
    else {
        log(&format!(
            "pScheduler task {task}: summary {} does not read",
            row.id
        ));
        return;
    };
    // The source sends, with flip or without (flip only says which end
    // runs the client).
    let sender = test.source.as_deref().unwrap_or(here);
    let mut result = owamp_summary_latency(&summary, sender, &test.dest, test.bucket_s);
    result["schema"] = json!(1);
    let now = clock::now_ms();
    let phase = if result["succeeded"] == true {
        RunPhase::Finished
    } else {
        RunPhase::Failed
    };
    st.owned_any(task, |t| {
        if t.runs.iter().filter(|r| r.summary).count() >= MAX_SUMMARIES {
            if let Some(i) = t.runs.iter().position(|r| r.summary) {
                t.runs.remove(i);
            }
        }
        t.runs.push(LedRun {
            uuid: uuid::Uuid::new_v4().to_string(),
            number: 0,
            added_ms: now,
            start_ms: now,
            end_ms: now,
            phase,
            result: Some(result),
            ran: Some((now, now)),
            errors: None,
            summary: true,
        });
    });
    st.done.notify_waiters();
}

/// A time as pScheduler shows a task's and a run's: to the second.
fn iso_s(ms: u64) -> String {
    iso(ms / 1000 * 1000).replace(".000+", "+")
}

/// pScheduler's result of a failure.
fn failed(why: &str) -> Value {
    json!({"schema": 1, "succeeded": false, "error": why, "diags": why})
}

/// How a run ended: its phase, its result, when it really ran, and why
/// it did not start.
type Ended = (RunPhase, Option<Value>, Option<(u64, u64)>, Option<String>);

/// A stored run as pScheduler sees it: its phase, its result (in the
/// test type's result format, from `pscheduler_out`), when it ran, and why
/// it did not start.
fn outcome(r: &goodput_archive::Run, here: &str, test: &SingleTest) -> Ended {
    let ran = r.start_ms.zip(r.end_ms);
    let why = r.reason.clone().unwrap_or_else(|| r.state.as_str().to_owned());
    match r.state {
        RunState::Finished | RunState::Failed => {
            let ends = Ends {
                source: here.to_owned(),
                dest: r.dest.clone(),
                observer: here.to_owned(),
            };
            let result = match (test.ty, r.state) {
                // Its results are its summaries' runs, as powstream's.
                (TestType::LatencyBg, RunState::Finished) => return (RunPhase::Finished, None, ran, None),
                (TestType::Latency, RunState::Finished) => latency_of(r, test.bucket_s),
                _ => match to_pscheduler(r, &ends) {
                    Ok(docs) => docs
                        .into_iter()
                        .next()
                        .map(|d| d["result"].clone())
                        .unwrap_or_else(|| failed("the run has no result")),
                    Err(e) => failed(&e.to_string()),
                },
            };
            let mut result = result;
            if let Value::Object(m) = &mut result {
                m.insert("schema".into(), json!(1));
            }
            let phase = if r.state == RunState::Finished && result["succeeded"] == true {
                RunPhase::Finished
            } else {
                RunPhase::Failed
            };
            (phase, Some(result), ran, None)
        }
        RunState::Missed => (RunPhase::Missed, Some(failed(&why)), None, Some(why)),
        RunState::NonStart => (RunPhase::NonStart, Some(failed(&why)), None, Some(why)),
        RunState::Cancelled => (RunPhase::Canceled, Some(failed(&why)), ran, Some(why)),
        RunState::Scheduled | RunState::Running => (
            RunPhase::Failed,
            Some(failed("the run did not end within its slot")),
            ran,
            None,
        ),
    }
}

/// A finished OWAMP run as pScheduler's latency result, as its owping
/// tool reports one: the direction measured, the delays even on clocks
/// that were not synchronised (`diags` says so), buckets `bucket_s` wide.
fn latency_of(r: &goodput_archive::Run, bucket_s: f64) -> Value {
    let Some(doc) = &r.result else {
        return failed("the run has no result");
    };
    let read: TestResult = match serde_json::from_value(doc.clone()) {
        Ok(x) => x,
        Err(e) => return failed(&format!("the run's result does not read: {e}")),
    };
    let Detail::Owamp(o) = &read.detail else {
        return failed("the run has no OWAMP detail");
    };
    match o.to.as_ref().or(o.from.as_ref()) {
        Some(d) => goodput_archive::pscheduler_out::owamp_latency(d, bucket_s, true),
        None => failed("the OWAMP run measured no session"),
    }
}

/// Cancels the task: its runs not yet started are taken off the
/// calendar and kept as cancelled; a run under way is cut short (a
/// latencybg stream: with the summaries it gave until then).
pub(crate) async fn cancel(
    shared: &Arc<Shared>,
    st: &SingleState,
    uuid: &str,
    requester: IpAddr,
) -> Result<(), PsRefusal> {
    let (pending, mut under_way): (Vec<(String, u64)>, Vec<u64>) = st.owned(uuid, requester, |t| {
        let runs = t.runs.iter().filter(|r| !r.summary);
        (
            runs.clone()
                .filter(|r| r.phase == RunPhase::Pending)
                .map(|r| (r.uuid.clone(), r.number))
                .collect(),
            runs.filter(|r| r.phase == RunPhase::Running)
                .map(|r| r.number)
                .collect(),
        )
    })?;
    let mut records = Vec::new();
    for (run, number) in pending {
        let b = {
            let mut inner = shared.lock();
            match inner.book.booked.get(&number) {
                Some(b) if !b.started => {
                    inner.book.calendar.release(number);
                    inner.book.booked.remove(&number)
                }
                Some(_) => {
                    under_way.push(number);
                    None
                }
                None => None,
            }
        };
        if let Some(b) = b {
            let mut r = b.record(
                RunState::Cancelled,
                Some("the pScheduler client cancelled the task".into()),
            );
            r.start_ms = None;
            r.end_ms = None;
            records.push(r);
            st.owned_any(uuid, |t| {
                if let Some(x) = t.runs.iter_mut().find(|x| x.uuid == run) {
                    x.phase = RunPhase::Canceled;
                    x.result = Some(failed("the pScheduler client cancelled the task"));
                }
            });
        }
    }
    shared.store(&records).await;
    // The runs the executor has taken (their phase may not say so yet):
    // each is cut once it is under way (2 s at most); `follow` keeps its
    // record when it ends.
    for number in under_way {
        for _ in 0..40 {
            if shared.cut_run(number, "the pScheduler client cancelled the task")
                || !shared.lock().book.booked.contains_key(&number)
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    st.done.notify_waiters();
    Ok(())
}

/// The task as pScheduler's API shows it (`detail` with its summary).
pub(crate) fn task_view(t: &LedTask, href: &str, detail: bool) -> Value {
    let mut doc = t.doc.clone();
    doc["href"] = json!(href);
    if detail {
        let now = clock::now_ms();
        doc["detail"] = json!({
            "added": iso_s(t.added_ms),
            "anytime": doc.pointer("/schedule/start").is_none_or(Value::is_null),
            "cli": spec_cli(&t.doc),
            "diags": format!("Led by a goodput agent, run with goodput's {} kind", t.test.spec.kind()),
            "duration": iso_duration(t.test.slot_ms as f64 / 1000.0),
            "enabled": true,
            "exclusive": false,
            "hints": {"requester": t.requester.to_string(), "server": t.here},
            "multi-result": t.test.ty.multi_result(),
            "participant": 0,
            "participants": [t.here],
            "post": "P0D",
            "runs": t.runs.len(),
            "runs-started": t.runs.iter().filter(|r| !r.summary && r.start_ms <= now).count(),
            "slip": doc.pointer("/schedule/slip").cloned().unwrap_or(json!("P0D")),
            "start": doc.pointer("/schedule/start").cloned().unwrap_or(Value::Null),
            "href": href,
            "runs-href": format!("{href}/runs"),
            "first-run-href": format!("{href}/runs/first"),
            "next-run-href": format!("{href}/runs/next"),
        });
    }
    doc
}

/// latencybg's spec properties in its schema's order.
const LATENCYBG_ORDER: [&str; 17] = [
    "source",
    "source-node",
    "dest",
    "dest-node",
    "protocol",
    "duration",
    "packet-count",
    "packet-interval",
    "packet-timeout",
    "packet-padding",
    "ctrl-port",
    "data-ports",
    "ip-tos",
    "ip-version",
    "bucket-width",
    "output-raw",
    "flip",
];

/// The options of the task's spec as pScheduler's command line gives
/// them (its `cli`): `--name value` in name order (latency: in its
/// database's order), a flag for `true`.
pub(crate) fn spec_cli(doc: &Value) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(spec) = doc.pointer("/test/spec").and_then(Value::as_object) {
        let mut keys: Vec<&String> = spec
            .keys()
            .filter(|k| *k != "schema" && !k.starts_with('_'))
            .collect();
        let bg = doc.pointer("/test/type") == Some(&json!("latencybg"));
        if bg {
            // latencybg's spec-to-cli follows its schema's properties,
            // and gives a flag for every boolean given, false too.
            keys.sort_by_key(|k| LATENCYBG_ORDER.iter().position(|o| o == k).unwrap_or(usize::MAX));
        } else if doc.pointer("/test/type") == Some(&json!("latency")) {
            // latency's spec-to-cli follows the spec's own order, which
            // pScheduler's database keeps as PostgreSQL's jsonb does:
            // shorter keys first.
            keys.sort_by(|a, b| a.len().cmp(&b.len()).then(a.cmp(b)));
        } else {
            keys.sort();
        }
        for k in keys {
            if k == "data-ports" {
                let end = |f: &str| spec[k].get(f).and_then(Value::as_u64).unwrap_or(0);
                out.push(format!("--{k}"));
                out.push(format!("{}-{}", end("lower"), end("upper")));
                continue;
            }
            match &spec[k] {
                Value::Bool(_) if bg => out.push(format!("--{k}")),
                Value::Bool(true) => out.push(format!("--{k}")),
                Value::Bool(false) | Value::Null => {}
                Value::String(s) => {
                    out.push(format!("--{k}"));
                    out.push(s.clone());
                }
                v => {
                    out.push(format!("--{k}"));
                    out.push(v.to_string());
                }
            }
        }
    }
    out
}

/// A run as pScheduler's API shows it: its times and state, and, once it
/// ended, this participant's result, the whole list and the merged one.
pub(crate) fn run_view(t: &LedTask, r: &LedRun) -> Value {
    let (start, end) = r.ran.unwrap_or((r.start_ms, r.end_ms));
    // owping's result is the run's result itself; ping's and trace's
    // tools wrap theirs with the tool's diags.
    let flat = matches!(t.test.ty, TestType::Latency | TestType::LatencyBg);
    if r.summary {
        // As pScheduler's runner posts a powstream result: the merged
        // result only.
        return json!({
            "added": iso_s(r.added_ms),
            "start-time": iso_s(r.start_ms),
            "end-time": iso_s(r.end_ms),
            "duration": "P0D",
            "state": r.phase.name(),
            "state-display": r.phase.display(),
            "errors": Value::Null,
            "priority": 0,
            "limit-diags": Value::Null,
            "participant": 0,
            "participants": [t.here],
            "participant-data": Value::Null,
            "participant-data-full": Value::Null,
            "result": Value::Null,
            "result-full": Value::Null,
            "result-merged": r.result,
        });
    }
    let envelope = r.result.as_ref().map(|res| {
        if flat {
            return res.clone();
        }
        json!({
            "schema": 1,
            "succeeded": res["succeeded"],
            "error": res.get("error").cloned().unwrap_or(Value::Null),
            "diags": res.get("diags").cloned().unwrap_or(Value::Null),
            "result": res,
        })
    });
    json!({
        "added": iso_s(r.added_ms),
        "start-time": iso_s(start),
        "end-time": iso_s(end.max(start)),
        "duration": iso_duration(end.saturating_sub(start) as f64 / 1000.0),
        "state": r.phase.name(),
        "state-display": r.phase.display(),
        "errors": r.errors,
        "priority": Value::Null,
        "limit-diags": Value::Null,
        "participant": 0,
        "participants": [t.here],
        "participant-data": {},
        "participant-data-full": [{}],
        "result": envelope,
        "result-full": envelope.as_ref().map(|e| json!([e])),
        "result-merged": r.result,
    })
}

/// The run `which` of a task: a run's UUID, `first` (the first of all)
/// or `next` (the first not yet started).
pub(crate) fn pick<'a>(t: &'a LedTask, which: &str, now: u64) -> Option<&'a LedRun> {
    match which {
        "first" => t.runs.first(),
        "next" => t.runs.iter().find(|r| r.start_ms >= now),
        uuid => t.runs.iter().find(|r| r.uuid == uuid),
    }
}

/// A duration of pScheduler's as milliseconds, if it is one.
fn ms_of(v: &Value) -> Option<f64> {
    v.as_str()
        .and_then(|s| goodput_archive::pscheduler::iso_seconds(s).ok())
        .map(|s| s * 1000.0)
}

/// The result as text, as pScheduler's own formatters lay it out, so the
/// command line prints what it prints for its own runs: for `rtt` a line
/// per round trip and the loss and round-trip summary, for `trace` a line
/// per hop.
pub(crate) fn result_text(ty: TestType, result: &Value, bucket_s: f64) -> String {
    if result["succeeded"] != true {
        return "Run failed.".into();
    }
    let mut out = String::new();
    match ty {
        TestType::Latency | TestType::LatencyBg => latency_text(&mut out, result, bucket_s),
        TestType::Rtt => {
            let empty = Vec::new();
            for (i, trip) in result["roundtrips"]
                .as_array()
                .unwrap_or(&empty)
                .iter()
                .enumerate()
            {
                let n = format!("{:<8}", i + 1);
                let line = if let Some(e) = trip.get("error").and_then(Value::as_str) {
                    e.to_owned()
                } else if let Some(ip) = trip.get("ip").and_then(Value::as_str) {
                    let name = trip.get("hostname").and_then(Value::as_str).unwrap_or(ip);
                    let mut l = format!("{name} ({ip})");
                    if let Some(b) = trip.get("length").and_then(Value::as_u64) {
                        l.push_str(&format!("  {b} Bytes"));
                    }
                    if let Some(ttl) = trip.get("ttl").and_then(Value::as_u64) {
                        l.push_str(&format!("  TTL {ttl}"));
                    }
                    if let Some(ms) = trip.get("rtt").and_then(ms_of) {
                        l.push_str(&format!("  RTT {ms:.4} ms"));
                    }
                    l
                } else {
                    "No Response".into()
                };
                out.push_str(&format!("{n}{line}\n"));
            }
            let loss = result["loss"].as_f64().unwrap_or(1.0);
            let stat = |f: &str| {
                result
                    .get(f)
                    .and_then(ms_of)
                    .map_or("None".to_owned(), |ms| format!("{ms:.4}"))
            };
            out.push_str(&format!(
                "\n{}% Packet Loss  RTT Min/Mean/Max/StdDev = {}/{}/{}/{} ms",
                (loss * 100.0).floor() as u64,
                stat("min"),
                stat("mean"),
                stat("max"),
                stat("stddev")
            ));
        }
        TestType::Trace => {
            let empty = Vec::new();
            let paths = result["paths"].as_array().unwrap_or(&empty);
            for (p, path) in paths.iter().enumerate() {
                if paths.len() > 1 {
                    out.push_str(&format!("Path {}:\n\n", p + 1));
                }
                for (i, hop) in path.as_array().unwrap_or(&empty).iter().enumerate() {
                    let n = format!("{:<8}", i + 1);
                    match hop.get("ip").and_then(Value::as_str) {
                        Some(ip) => {
                            let name = hop.get("hostname").and_then(Value::as_str).unwrap_or(ip);
                            out.push_str(&format!("{n}{name} ({ip})"));
                            if let Some(ms) = hop.get("rtt").and_then(ms_of) {
                                out.push_str(&format!(" {ms:.1} ms"));
                            }
                            if let Some(m) = hop.get("mtu").and_then(Value::as_u64) {
                                out.push_str(&format!(" mtu {m}"));
                            }
                            out.push('\n');
                        }
                        None => out.push_str(&format!("{n}No Response\n")),
                    }
                }
            }
        }
    }
    out.trim_end().to_owned()
}

/// A histogram's figures as pScheduler's latency formatter gives them:
/// mean, mode(s), extremes, variance and the NIST percentiles (25, 50,
/// 75, 95) taken bucket by bucket.
#[derive(Debug, Default, PartialEq)]
struct HistStats {
    mean: f64,
    modes: Vec<f64>,
    min: f64,
    max: f64,
    variance: f64,
    /// 25th, 50th, 75th and 95th; none where the walk did not settle one.
    pct: [Option<f64>; 4],
}

/// `buckets` as (value, count), in any order.
fn hist_stats(buckets: &[(f64, u64)]) -> Option<HistStats> {
    let total: u64 = buckets.iter().map(|b| b.1).sum();
    if total == 0 {
        return None;
    }
    let mut sorted = buckets.to_vec();
    sorted.sort_by(|a, b| a.0.total_cmp(&b.0));
    let n = total as f64;
    let mean = sorted.iter().map(|(v, c)| v * *c as f64).sum::<f64>() / n;
    let most = sorted.iter().map(|b| b.1).max().unwrap_or(0);
    // In the order the formatter meets them: the histogram's own.
    let modes = buckets.iter().filter(|b| b.1 == most).map(|b| b.0).collect();
    let variance = sorted
        .iter()
        .map(|(v, c)| (v - mean).powi(2) * *c as f64)
        .sum::<f64>()
        / n;
    // The NIST rank p/100·(N+1) = k + d: the value at rank k, moved d of
    // the way to the next bucket's when rank k+1 lies in the next one.
    // The percentiles are settled in turn; one waiting for the next
    // bucket holds the later ones back until that bucket.
    let mut pct = [None; 4];
    let mut which = 0;
    let mut waiting: Option<f64> = None;
    let mut seen = 0u64;
    for (v, c) in &sorted {
        seen += c;
        while which < 4 {
            let rank = [25.0, 50.0, 75.0, 95.0][which] / 100.0 * (n + 1.0);
            let (k, d) = (rank.floor(), rank - rank.floor());
            if (seen as f64) < k {
                break;
            }
            let value = if let Some(w) = waiting.take() {
                Some(w + d * (v - w))
            } else if k == 0.0 || (seen >= total && k >= n) || k + d < seen as f64 {
                Some(*v)
            } else {
                waiting = Some(*v);
                None
            };
            match value {
                Some(x) => {
                    pct[which] = Some(x);
                    which += 1;
                }
                None => break,
            }
        }
    }
    Some(HistStats {
        mean,
        modes,
        min: sorted[0].0,
        max: sorted[sorted.len() - 1].0,
        variance,
        pct,
    })
}

/// `LABEL ...... 1.23 UNITS`, the label dotted out to 22 characters; an
/// absent or zero figure is `Not Reported`, as pScheduler prints it.
fn figure_line(label: &str, value: Option<f64>, units: &str) -> String {
    let head = format!("{label} ...");
    let dots = ".".repeat(22usize.saturating_sub(head.len()));
    match value.filter(|v| *v != 0.0) {
        Some(v) => format!("{head}{dots} {v:.2} {units}\n"),
        None => format!("{head}{dots} Not Reported\n"),
    }
}

/// A histogram of the result (`{"value": count}`) as (value, count), in
/// the result's order.
fn buckets_of(h: &Value) -> Vec<(String, f64, u64)> {
    h.as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, n)| Some((k.clone(), k.parse::<f64>().ok()?, n.as_u64()?)))
                .collect()
        })
        .unwrap_or_default()
}

/// A number as Python's `str` gives a float (`0.0`, `0.12`).
fn py_float(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e16 {
        format!("{v:.1}")
    } else {
        format!("{v}")
    }
}

/// pScheduler's latency result as its text formatter lays it out: the
/// packet counts, the one-way delay figures and histogram (keys in
/// milliseconds, from buckets `bucket_s` wide), the TTL figures and
/// histogram.
fn latency_text(out: &mut String, result: &Value, bucket_s: f64) {
    let count = |f: &str| {
        result
            .get(f)
            .and_then(Value::as_u64)
            .map_or("Not Reported".to_owned(), |n| n.to_string())
    };
    out.push_str("Packet Statistics\n-----------------\n");
    for (label, f) in [
        ("Packets Sent .........", "packets-sent"),
        ("Packets Received .....", "packets-received"),
        ("Packets Lost .........", "packets-lost"),
        ("Packets Duplicated ...", "packets-duplicated"),
        ("Packets Reordered ....", "packets-reordered"),
    ] {
        out.push_str(&format!("{label} {} packets\n", count(f)));
    }
    out.push_str("\nOne-way Latency Statistics\n--------------------------\n");
    // Keys in buckets to milliseconds, shown to the bucket's precision.
    let scale = bucket_s / 0.001;
    let places = (-bucket_s.log10()).trunc() as i64 - 1;
    let places = places.max(0) as usize;
    let mut delays: Vec<(String, f64, u64)> = buckets_of(&result["histogram-latency"])
        .into_iter()
        .map(|(_, v, n)| {
            let text = format!("{:.*}", places, v * scale);
            let v = text.parse().unwrap_or(v * scale);
            (text, v, n)
        })
        .collect();
    // Keys that print alike are one bucket (the last one given wins).
    let mut merged: Vec<(String, f64, u64)> = Vec::new();
    for d in delays.drain(..) {
        match merged.iter_mut().find(|m| m.0 == d.0) {
            Some(m) => m.2 = d.2,
            None => merged.push(d),
        }
    }
    let delays = merged;
    let st = hist_stats(&delays.iter().map(|d| (d.1, d.2)).collect::<Vec<_>>());
    let get = |f: fn(&HistStats) -> Option<f64>| st.as_ref().and_then(f);
    out.push_str(&figure_line("Delay Median", get(|s| s.pct[1]), "ms"));
    out.push_str(&figure_line("Delay Minimum", get(|s| Some(s.min)), "ms"));
    out.push_str(&figure_line("Delay Maximum", get(|s| Some(s.max)), "ms"));
    out.push_str(&figure_line("Delay Mean", get(|s| Some(s.mean)), "ms"));
    out.push_str("Delay Mode ........... ");
    for m in st.as_ref().map(|s| s.modes.clone()).unwrap_or_default() {
        out.push_str(&format!("{m:.2} ms "));
    }
    out.push('\n');
    out.push_str(&figure_line("Delay 25th Percentile", get(|s| s.pct[0]), "ms"));
    out.push_str(&figure_line("Delay 75th Percentile", get(|s| s.pct[2]), "ms"));
    out.push_str(&figure_line("Delay 95th Percentile", get(|s| s.pct[3]), "ms"));
    out.push_str(&format!(
        "Max Clock Error ...... {} ms\n",
        result
            .get("max-clock-error")
            .and_then(Value::as_f64)
            .map_or("Not Reported".to_owned(), py_float)
    ));
    out.push_str("Common Jitter Measurements:\n");
    let nonzero = |x: Option<f64>| x.filter(|v| *v != 0.0);
    if let (Some(p95), Some(p50)) = (nonzero(get(|s| s.pct[3])), nonzero(get(|s| s.pct[1]))) {
        out.push_str(&format!("    P95 - P50 ........ {:.2} ms\n", p95 - p50));
    }
    if let (Some(p75), Some(p25)) = (nonzero(get(|s| s.pct[2])), nonzero(get(|s| s.pct[0]))) {
        out.push_str(&format!("    P75 - P25 ........ {:.2} ms\n", p75 - p25));
    }
    out.push_str(&figure_line("    Variance", get(|s| Some(s.variance)), "ms"));
    out.push_str(&figure_line(
        "    Std Deviation",
        get(|s| Some(s.variance.sqrt())),
        "ms",
    ));
    out.push_str("Histogram:\n");
    let mut shown = delays.clone();
    shown.sort_by(|a, b| a.1.total_cmp(&b.1));
    for (k, _, n) in shown {
        out.push_str(&format!("    {k} ms: {n} packets\n"));
    }
    out.push_str("\nTTL Statistics\n--------------\n");
    let ttls = buckets_of(&result["histogram-ttl"]);
    let tt = hist_stats(&ttls.iter().map(|d| (d.1, d.2)).collect::<Vec<_>>());
    let get = |f: fn(&HistStats) -> Option<f64>| tt.as_ref().and_then(f);
    out.push_str(&figure_line("TTL Median", get(|s| s.pct[1]), ""));
    out.push_str(&figure_line("TTL Minimum", get(|s| Some(s.min)), ""));
    out.push_str(&figure_line("TTL Maximum", get(|s| Some(s.max)), ""));
    out.push_str(&figure_line("TTL Mean", get(|s| Some(s.mean)), ""));
    out.push_str("TTL Mode ............. ");
    for m in tt.as_ref().map(|s| s.modes.clone()).unwrap_or_default() {
        out.push_str(&format!("{m:.2} "));
    }
    out.push('\n');
    out.push_str(&figure_line("TTL 25th Percentile", get(|s| s.pct[0]), ""));
    out.push_str(&figure_line("TTL 75th Percentile", get(|s| s.pct[2]), ""));
    out.push_str(&figure_line("TTL 95th Percentile", get(|s| s.pct[3]), ""));
    out.push_str("Histogram:\n");
    let mut ttls = ttls;
    ttls.sort_by(|a, b| a.1.total_cmp(&b.1));
    for (k, _, n) in ttls {
        out.push_str(&format!("    {k}: {n} packets\n"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn test(ty: &str, spec: Value) -> Value {
        json!({"type": ty, "spec": spec})
    }

    const HOUR: Duration = Duration::from_secs(3600);

    #[test]
    fn rtt_and_trace_specs_read_with_pschedulers_defaults() {
        let t = SingleTest::read(
            &test(
                "rtt",
                json!({"schema": 1, "source": "10.40.0.2", "dest": "10.40.0.1", "count": 3}),
            ),
            HOUR,
        )
        .unwrap();
        let TestSpec::Ping(p) = &t.spec else { panic!() };
        assert_eq!((p.count, p.method, p.size), (3, PingMethod::Icmp, 56));
        assert_eq!(p.bind, Some("10.40.0.2".parse().unwrap()));
        // 3 × 1 s, 1 s for the last reply, 2 s of margin.
        assert_eq!(t.slot_ms, 6_000);
        let t = SingleTest::read(&test("trace", json!({"dest": "10.40.0.1"})), HOUR).unwrap();
        let TestSpec::Trace(x) = &t.spec else { panic!() };
        assert_eq!((x.max_hops, x.probes, x.first_hop), (30, 1, 1));
        assert_eq!(x.method, ProbeMethod::Udp);
    }

    #[test]
    fn absurd_numbers_and_unknown_options_are_refused_by_name() {
        let e = |ty: &str, spec: Value| SingleTest::read(&test(ty, spec), HOUR).unwrap_err();
        assert!(e("rtt", json!({"dest": "x", "count": 1_000_000_000u64})).contains("count"));
        assert!(e("rtt", json!({"dest": "x", "interval": "P1D"})).contains("interval"));
        assert!(e("rtt", json!({"dest": "x", "interval": "PT0.000001S"})).contains("interval"));
        assert!(e("rtt", json!({"dest": "x", "timeout": "PT1H"})).contains("timeout"));
        assert!(e("rtt", json!({"dest": "x", "length": 100_000})).contains("length"));
        assert!(e("rtt", json!({"dest": "x", "ttl": 3})).contains("ttl"));
        assert!(e("rtt", json!({"dest": "x", "bogus": 3})).contains("bogus"));
        assert!(e("rtt", json!({"dest": "x; rm -rf /"})).contains("dest"));
        assert!(e("trace", json!({"dest": "x", "hops": 1000})).contains("hops"));
        assert!(e("trace", json!({"dest": "x", "queries": 0})).contains("queries"));
        assert!(e("trace", json!({"dest": "x", "first-ttl": 9, "hops": 3})).contains("first-ttl"));
        assert!(e("trace", json!({"dest": "x", "wait": "PT100S"})).contains("wait"));
        // 1000 round trips a minute apart: past the agent's longest run.
        let long = e("rtt", json!({"dest": "x", "count": 1000, "interval": "PT60S"}));
        assert!(long.starts_with("limit max_duration"), "{long}");
        // A day's stream, past the agent's longest run.
        let day = e("latencybg", json!({"dest": "x"}));
        assert!(day.starts_with("limit max_duration"), "{day}");
        assert!(e("latencybg", json!({"dest": "x", "duration": "P2D"})).contains("duration"));
        let fast = json!({"dest": "x", "duration": "PT1M", "packet-count": 10, "packet-interval": 0.1});
        assert!(e("latencybg", fast).contains("summary every 1 s"));
        let rev = json!({"dest": "x", "duration": "PT1M", "reverse": true});
        assert!(e("latencybg", rev).contains("reverse"));
        assert!(e("latency", json!({"dest": "x", "packet-count": 0})).contains("packet-count"));
        assert!(e("latency", json!({"dest": "x", "packet-interval": 0})).contains("packet-interval"));
        assert!(e("latency", json!({"dest": "x", "packet-padding": 9000})).contains("packet-padding"));
        assert!(e("latency", json!({"dest": "x", "ip-tos": 255})).contains("ip-tos"));
        assert!(e("latency", json!({"dest": "x", "bucket-width": 1.5})).contains("bucket-width"));
        assert!(e("latency", json!({"dest": "x", "reverse": true})).contains("reverse"));
        assert!(e("latency", json!({"dest": "x", "flip": true})).contains("source"));
        let d = json!({"dest": "x", "data-ports": {"lower": 9000, "upper": 8000}});
        assert!(e("latency", d).contains("data-ports"));
        assert!(e("throughput", json!({"dest": "x"})).contains("leads none"));
    }

    #[test]
    fn a_latencybg_spec_reads_as_powstream_runs_it() {
        let t = SingleTest::read(
            &test(
                "latencybg",
                json!({"schema": 1, "source": "10.40.0.2", "dest": "10.40.0.1", "duration": "PT40S",
                    "packet-count": 100, "packet-interval": 0.1}),
            ),
            HOUR,
        )
        .unwrap();
        assert_eq!(t.ty, TestType::LatencyBg);
        let TestSpec::Owamp(o) = &t.spec else { panic!() };
        assert!(o.continuous);
        assert_eq!(o.summary_every, 100);
        assert_eq!(o.duration, Some(HumanDuration(Duration::from_secs(40))));
        assert_eq!(o.interval.0, Duration::from_millis(100));
        assert_eq!(o.host.as_deref(), Some("10.40.0.1"));
        assert_eq!(o.direction, OwampDirection::To);
        // The stream, its loss timeout, its ends and the margin.
        assert_eq!(
            t.slot_ms,
            40_000 + o.timeout.0.as_millis() as u64 + goodput_core::spec::owamp::STREAM_ENDS_MS + 4_000
        );
        // powstream's defaults: 600 packets 0.1 s apart, a day.
        let d = SingleTest::read(&test("latencybg", json!({"dest": "10.40.0.1"})), 2 * 24 * HOUR).unwrap();
        let TestSpec::Owamp(o) = &d.spec else { panic!() };
        assert_eq!(
            (o.summary_every, o.duration),
            (600, Some(HumanDuration(Duration::from_secs(86_400))))
        );
    }

    #[test]
    fn a_latencybg_tasks_cli_is_in_its_schemas_order() {
        let doc = json!({"test": {"type": "latencybg", "spec": {"schema": 1, "dest": "10.40.0.1",
            "source": "10.40.0.3", "duration": "PT40S", "packet-interval": 0.1, "packet-count": 100,
            "flip": false}}});
        // As the real one's detail.cli, and its flag for a false boolean.
        assert_eq!(
            spec_cli(&doc),
            [
                "--source",
                "10.40.0.3",
                "--dest",
                "10.40.0.1",
                "--duration",
                "PT40S",
                "--packet-count",
                "100",
                "--packet-interval",
                "0.1",
                "--flip"
            ]
        );
    }

    #[test]
    fn a_schedule_gives_one_run_or_a_bounded_repeat() {
        let now = 1_795_800_000_300;
        assert_eq!(run_starts(None, 6000, now).unwrap(), vec![1_795_800_003_000]);
        let slip = json!({"slip": "PT5M"});
        assert_eq!(run_starts(Some(&slip), 6000, now).unwrap().len(), 1);
        let r = json!({"repeat": "PT1M", "max-runs": 3});
        let s = run_starts(Some(&r), 6000, now).unwrap();
        assert_eq!(s, vec![1_795_800_003_000, 1_795_800_063_000, 1_795_800_123_000]);
        let e = run_starts(Some(&json!({"repeat": "PT1M"})), 6000, now).unwrap_err();
        assert!(e.contains("max-runs"), "{e}");
        let e = run_starts(Some(&json!({"repeat": "PT1S", "max-runs": 3})), 6000, now).unwrap_err();
        assert!(e.contains("repeat"), "{e}");
        let e = run_starts(Some(&json!({"repeat": "PT1M", "max-runs": 100_000})), 6000, now).unwrap_err();
        assert!(e.contains("max-runs"), "{e}");
        let e = run_starts(Some(&json!({"start": "2030-01-01T00:00:00Z"})), 6000, now).unwrap_err();
        assert!(e.contains("7 days"), "{e}");
    }

    #[test]
    fn results_read_as_pschedulers_text() {
        let r = json!({
            "succeeded": true, "loss": 0.0,
            "roundtrips": [
                {"seq": 1, "ip": "10.40.0.1", "hostname": "pspk", "length": 64, "ttl": 64, "rtt": "PT0.000077S"},
                {"seq": 2}
            ],
            "min": "PT0.000051S", "mean": "PT0.00006S", "max": "PT0.000077S", "stddev": "PT0.000011S"
        });
        assert_eq!(
            result_text(TestType::Rtt, &r, 0.001),
            "1       pspk (10.40.0.1)  64 Bytes  TTL 64  RTT 0.0770 ms\n2       No Response\n\n\
             0% Packet Loss  RTT Min/Mean/Max/StdDev = 0.0510/0.0600/0.0770/0.0110 ms"
        );
        let t = json!({"succeeded": true, "paths": [[{}, {"ip": "10.40.0.1", "rtt": "PT0.000045S"}]]});
        assert_eq!(
            result_text(TestType::Trace, &t, 0.001),
            "1       No Response\n2       10.40.0.1 (10.40.0.1) 0.0 ms"
        );
        assert_eq!(
            result_text(TestType::Trace, &json!({"succeeded": false}), 0.001),
            "Run failed."
        );
    }

    #[test]
    fn latency_specs_read_as_owping_runs_them() {
        let spec = json!({"schema": 1, "source": "10.40.0.2", "dest": "10.40.0.1", "packet-count": 100,
            "packet-interval": 0.01, "packet-padding": 100, "ctrl-port": 8610, "ip-tos": 46,
            "data-ports": {"lower": 9000, "upper": 9010}, "bucket-width": 0.0001, "ip-version": 4});
        let t = SingleTest::read(&test("latency", spec), HOUR).unwrap();
        let TestSpec::Owamp(o) = &t.spec else { panic!() };
        assert_eq!(o.host.as_deref(), Some("10.40.0.1"));
        assert_eq!((o.port, o.count, o.padding, o.dscp), (8610, 100, 100, 46));
        assert_eq!(o.direction, OwampDirection::To);
        assert_eq!(o.interval.0, Duration::from_millis(10));
        assert_eq!(o.test_ports, Some(PortRange { lo: 9000, hi: 9010 }));
        assert_eq!(o.bind, Some("10.40.0.2".parse().unwrap()));
        assert_eq!(o.family, Family::Ipv4);
        assert_eq!(t.bucket_s, 0.0001);
        // 1 s of packets, 2 s of loss timeout, 4 s of margin.
        assert_eq!(t.slot_ms, 7_000);
        // flip: this end is the dest and the source's server sends to it.
        let spec = json!({"source": "10.40.0.1", "dest": "10.40.0.2", "flip": true});
        let t = SingleTest::read(&test("latency", spec), HOUR).unwrap();
        let TestSpec::Owamp(o) = &t.spec else { panic!() };
        assert_eq!(o.host.as_deref(), Some("10.40.0.1"));
        assert_eq!(o.direction, OwampDirection::From);
        assert_eq!(o.bind, Some("10.40.0.2".parse().unwrap()));
    }

    /// The recorded lead's result, printed as its own formatter printed
    /// it, to the character.
    #[test]
    fn a_latency_result_prints_as_pschedulers_formatter_prints_it() {
        let recorded = include_str!("../../../goodput/tests/data/pscheduler/latency-cli-to-lead.jsonl");
        let mut result = Value::Null;
        let mut text = String::new();
        for line in recorded.lines() {
            let e: Value = serde_json::from_str(line).unwrap();
            let path = e["path"].as_str().unwrap();
            let body = e["response"]["body"].as_str().unwrap_or("");
            if path.contains("wait-merged") {
                result = serde_json::from_str::<Value>(body).unwrap()["result-merged"].clone();
            }
            if path.contains("/result?format=text") {
                text = body.to_owned();
            }
        }
        assert_eq!(result_text(TestType::Latency, &result, 0.001), text.trim());
        // No delays: the figures are not reported.
        let bare = json!({"succeeded": true, "packets-sent": 3, "packets-received": 0});
        let t = result_text(TestType::Latency, &bare, 0.001);
        assert!(t.contains("Delay Median ......... Not Reported\n"), "{t}");
        assert!(t.contains("Packets Lost ......... Not Reported packets"), "{t}");
    }

    #[test]
    fn nist_percentiles_follow_the_buckets() {
        // 1..=9 one each: rank p·10.
        let b: Vec<(f64, u64)> = (1..=9).map(|v| (v as f64, 1)).collect();
        let s = hist_stats(&b).unwrap();
        assert_eq!(s.pct, [Some(2.5), Some(5.0), Some(7.5), Some(9.0)]);
        assert_eq!((s.min, s.max, s.mean), (1.0, 9.0, 5.0));
        let s = hist_stats(&[(0.07, 3), (0.08, 1)]).unwrap();
        assert_eq!(s.modes, vec![0.07]);
        assert!(hist_stats(&[]).is_none());
    }

    #[test]
    fn a_latency_tasks_cli_is_in_its_database_order() {
        let doc = json!({"test": {"type": "latency", "spec": {"schema": 1, "source": "a", "dest": "b",
            "packet-count": 100, "flip": false, "data-ports": {"lower": 1, "upper": 2}}}});
        assert_eq!(
            spec_cli(&doc),
            [
                "--dest",
                "b",
                "--source",
                "a",
                "--data-ports",
                "1-2",
                "--packet-count",
                "100"
            ]
        );
    }

    #[test]
    fn a_tasks_cli_is_its_options_in_name_order() {
        let doc = json!({"test": {"type": "rtt", "spec": {"schema": 1, "source": "a", "dest": "b", "count": 3, "hostnames": false}}});
        assert_eq!(spec_cli(&doc), ["--count", "3", "--dest", "b", "--source", "a"]);
    }
}
