//! goodput's runs in perfSONAR's shape: a run becomes the document a
//! pScheduler `http` archiver posts for a run (`id`, `schedule`, `test
//! {type, spec}`, `tool`, `participants`, `run`, `task`, `result`), with
//! the result in the result format of the pScheduler test type that
//! measures the same thing, so that a perfSONAR central archive (its
//! Logstash HTTP input into OpenSearch) and its Grafana dashboards show
//! goodput's runs beside perfSONAR's. [`crate::pscheduler`] reads these
//! documents back.
//!
//! Which kind is which test type: a throughput test is `tcp` and `iperf3`
//! (one document per direction measured, `reverse` for the one the far
//! end sent); `latency` is OWAMP's one-way figures (one document per
//! direction, the sender as the source); `rtt` is ping, TWAMP and STAMP
//! (round trips); `trace` is a trace. The other kinds measure nothing
//! pScheduler has a result format for, and are not sent
//! ([`NotSent::NoTestType`]).
//!
//! A figure goes only where it means what pScheduler's field means: a
//! one-way delay measured on clocks that were not synchronised is not a
//! latency (pScheduler's own tools do not run without synchronised
//! clocks), so such a direction is sent with its loss and counts and
//! without its delays, and `diags` says why; STAMP's and TWAMP's
//! spread (95th percentile less the median) is not a standard
//! deviation, so `rtt`'s `stddev` is left out for them. Written from
//! pScheduler's published archiver and result formats.

use std::collections::BTreeMap;

use goodput_core::kind::Kind;
use goodput_core::path::{PingDetail, TraceDetail};
use goodput_core::result::{Detail, OneWayDirection, OneWaySummary, StampStats, TestResult};
use serde_json::{json, Map, Value};

use crate::{Run, RunState};

/// Where a run's ends are, as perfSONAR's pipeline resolves them: the
/// address (an IP address or a host name) of its source and of its
/// destination, and of the host that measured it (the observer, which
/// goes out in the `x-ps-observer` header).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ends {
    /// The run's source (the mesh address of `run.source`).
    pub source: String,
    /// The run's destination.
    pub dest: Option<String>,
    /// The host that measured it and sends it (this agent's address).
    pub observer: String,
}

/// Why a run is not sent to perfSONAR's archives.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotSent {
    /// Its kind has no pScheduler test type.
    #[error("goodput's {0} tests have no pScheduler test type")]
    NoTestType(String),
    /// It is a summary of part of a background stream (a STAMP stream's
    /// minute, a continuous OWAMP stream's session), a row of its own
    /// beside the run it belongs to: the run is sent, not its parts.
    #[error("a {0} row summarises part of a background run, which is sent whole")]
    Part(String),
    /// It has no result to send (a run that never started, was missed or
    /// called off: pScheduler archives finished and failed runs only).
    #[error("a run that is {0} has no result to send")]
    NoResult(&'static str),
    /// Its document does not read as a goodput result.
    #[error("its result does not read: {0}")]
    Unreadable(String),
}

/// The `tool.name` of the documents: goodput and the kind that ran.
fn tool_name(kind: Kind) -> String {
    format!("goodput-{}", kind.name())
}

/// pScheduler's test types, as far as goodput measures them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TestType {
    Throughput,
    Latency,
    Rtt,
    Trace,
}

impl TestType {
    fn name(self) -> &'static str {
        match self {
            TestType::Throughput => "throughput",
            TestType::Latency => "latency",
            TestType::Rtt => "rtt",
            TestType::Trace => "trace",
        }
    }

    /// Who takes part, as pScheduler lists them: both ends of a
    /// throughput test, the measuring host alone otherwise.
    fn two_ended(self) -> bool {
        self == TestType::Throughput
    }
}

/// The pScheduler test type a kind's runs are sent as, if any.
fn test_type(kind: Kind) -> Option<TestType> {
    match kind {
        Kind::Tcp | Kind::Iperf3 => Some(TestType::Throughput),
        Kind::Owamp => Some(TestType::Latency),
        Kind::Ping | Kind::Twamp | Kind::Stamp => Some(TestType::Rtt),
        Kind::Trace => Some(TestType::Trace),
        // A media stream's frames, QUIC's requests, an echo server's
        // load, ttcp's transfer and a server's counters are not what any
        // pScheduler result format holds.
        Kind::Udp | Kind::Quic | Kind::Echo | Kind::Ttcp | Kind::Server => None,
        // pScheduler's dns result is not written yet.
        Kind::Dns => None,
        // pScheduler has no ndt7 test.
        Kind::Ndt7 => None,
        // pScheduler's http test has a result of its own, not written yet.
        Kind::Http | Kind::Tls => None,
    }
}

/// Whether runs of the kind named `kind` are sent (false for a name that
/// is no kind).
pub fn sends_kind(kind: &str) -> bool {
    kind.parse::<Kind>().ok().and_then(test_type).is_some()
}

/// An ISO 8601 duration of `seconds` (`PT0.000257S`), to the nanosecond.
pub fn iso_duration(seconds: f64) -> String {
    let s = if seconds.is_finite() {
        seconds.max(0.0)
    } else {
        0.0
    };
    let text = format!("{s:.9}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    format!("PT{text}S")
}

/// A name for `text` in the shape of a UUID (version 8: made from a
/// hash), the same on every host and at every attempt, so that a run
/// sent twice is one run to an archive that keys by id. Two FNV-1a
/// hashes; not a secret, only a stable name.
pub fn uuid_of(text: &str) -> String {
    let fnv = |seed: u64| {
        text.bytes().fold(seed, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        })
    };
    let hi = fnv(0xcbf2_9ce4_8422_2325);
    let lo = fnv(0x8422_2325_cbf2_9ce4 ^ text.len() as u64);
    let hi = (hi & !0xf000) | 0x8000;
    let lo = (lo & !(0b11 << 62)) | (0b10 << 62);
    format!(
        "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        hi >> 32,
        (hi >> 16) & 0xffff,
        hi & 0xffff,
        lo >> 48,
        lo & 0xffff_ffff_ffff
    )
}

/// pScheduler's `ip-version` of an address, when it is an IP address.
fn ip_version(address: &str) -> Option<u64> {
    match address.trim_matches(['[', ']']).parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(_)) => Some(4),
        Ok(std::net::IpAddr::V6(_)) => Some(6),
        Err(_) => None,
    }
}

/// The documents a run is sent as, one per direction it measured (most
/// runs: one). Each is what pScheduler's `http` archiver posts; `ends`
/// puts perfSONAR's addresses where goodput has its mesh names.
pub fn to_pscheduler(run: &Run, ends: &Ends) -> Result<Vec<Value>, NotSent> {
    // The agent's summary rows (`stamp_minute`, `owamp_summary`) are
    // named by their kind and a suffix; any other name is no kind.
    let kind: Kind = run.kind.parse().map_err(|_| {
        if run.kind.contains('_') {
            NotSent::Part(run.kind.clone())
        } else {
            NotSent::NoTestType(run.kind.clone())
        }
    })?;
    let ty = test_type(kind).ok_or_else(|| NotSent::NoTestType(kind.name().to_owned()))?;
    let succeeded = match run.state {
        RunState::Finished => true,
        RunState::Failed => false,
        s @ (RunState::Scheduled
        | RunState::Running
        | RunState::Missed
        | RunState::NonStart
        | RunState::Cancelled) => return Err(NotSent::NoResult(s.as_str())),
    };
    let result: Option<TestResult> = match &run.result {
        Some(v) => Some(serde_json::from_value(v.clone()).map_err(|e| NotSent::Unreadable(e.to_string()))?),
        None => None,
    };
    let dest = ends.dest.clone().unwrap_or_else(|| ends.source.clone());
    let version = result.as_ref().map_or_else(
        || env!("CARGO_PKG_VERSION").to_owned(),
        |r| r.tool.version.clone(),
    );
    let base = Base {
        run,
        ends,
        kind,
        version,
    };
    if !succeeded {
        // pScheduler's failed result: the error, no figures.
        let why = run.reason.clone().unwrap_or_else(|| "the run failed".into());
        let mut r = Map::new();
        r.insert("succeeded".into(), json!(false));
        r.insert("error".into(), json!(why));
        r.insert(
            "diags".into(),
            json!(format!("goodput {} run {}", kind.name(), run.id)),
        );
        let spec = common_spec(ty, &ends.source, &dest, run);
        return Ok(vec![base.document("", ty, spec, Value::Object(r), false)]);
    }
    let Some(result) = result else {
        return Err(NotSent::Unreadable(
            "a finished run with no result document".into(),
        ));
    };
    let docs = match (&result.detail, ty) {
        (Detail::Owamp(o), _) => {
            let mut out = Vec::new();
            // `to`: this host sent; `from`: the far end sent to it.
            for (way, d, src, dst) in [
                ("", o.to.as_ref(), &ends.source, &dest),
                ("from", o.from.as_ref(), &dest, &ends.source),
            ] {
                let Some(d) = d else { continue };
                let mut spec = common_spec(ty, src, dst, run);
                spec.insert(
                    "packet-count".into(),
                    json!(d.sent.saturating_add(d.unsent).max(1)),
                );
                spec.insert("packet-interval".into(), json!(o.interval_ns as f64 / 1e9));
                if o.padding > 0 {
                    spec.insert("packet-padding".into(), json!(o.padding));
                }
                out.push(base.document(way, ty, spec, latency_result(d), false));
            }
            out
        }
        (Detail::Ping(p), _) => {
            let mut spec = common_spec(ty, &ends.source, &p.address, run);
            spec.insert("count".into(), json!(p.sent.max(1)));
            spec.insert("interval".into(), json!(iso_duration(p.interval_ms as f64 / 1e3)));
            if let Some(b) = p.payload_bytes {
                spec.insert("length".into(), json!(b));
            }
            vec![base.document("", ty, spec, ping_result(p), false)]
        }
        (Detail::Twamp(t), _) => {
            let mut spec = common_spec(ty, &ends.source, &dest, run);
            // Schema 3 names the protocol.
            spec.insert("schema".into(), json!(3));
            spec.insert("protocol".into(), json!("twamp"));
            spec.insert("count".into(), json!(t.stats.planned().max(1)));
            spec.insert("interval".into(), json!(iso_duration(t.interval_ns as f64 / 1e9)));
            vec![base.document("", ty, spec, stamp_result(&t.stats), false)]
        }
        (Detail::Stamp(s), _) => {
            let mut spec = common_spec(ty, &ends.source, &dest, run);
            spec.insert("count".into(), json!(s.total.planned().max(1)));
            spec.insert("interval".into(), json!(iso_duration(s.interval_ns as f64 / 1e9)));
            vec![base.document("", ty, spec, stamp_result(&s.total), false)]
        }
        (Detail::Trace(t), _) => {
            let mut spec = common_spec(ty, &ends.source, &t.address, run);
            spec.insert("probe-type".into(), json!(t.method.name()));
            spec.insert("first-ttl".into(), json!(t.first_hop.max(1)));
            spec.insert("hops".into(), json!(t.max_hops.max(1)));
            vec![base.document("", ty, spec, trace_result(t), false)]
        }
        (_, TestType::Throughput) => throughput_documents(&base, &result, &dest),
        (_, TestType::Latency | TestType::Rtt | TestType::Trace) => {
            return Err(NotSent::Unreadable(format!(
                "a finished {} run without its {} detail",
                kind.name(),
                kind.name()
            )))
        }
    };
    Ok(docs)
}

/// What every document of a run shares.
struct Base<'a> {
    run: &'a Run,
    ends: &'a Ends,
    kind: Kind,
    version: String,
}

impl Base<'_> {
    /// The archiver's document. `way` tells a run's second document from
    /// its first (its own id); `reverse` marks a throughput document the
    /// far end sent.
    fn document(
        &self,
        way: &str,
        ty: TestType,
        spec: Map<String, Value>,
        result: Value,
        reverse: bool,
    ) -> Value {
        let run = self.run;
        let name = if way.is_empty() && !reverse {
            run.id.clone()
        } else {
            format!("{}#{}", run.id, if reverse { "reverse" } else { way })
        };
        let run_uuid = uuid_of(&name);
        // A task is the run's task between the same ends, measured the
        // same way.
        let task_uuid = uuid_of(&format!(
            "{}|{}|{}|{way}{}",
            run.task,
            run.source,
            run.dest.as_deref().unwrap_or(""),
            if reverse { "reverse" } else { "" }
        ));
        let start_ms = run.start_ms.unwrap_or(run.scheduled_ms);
        let end_ms = run.end_ms.unwrap_or(start_ms).max(start_ms);
        let duration = iso_duration((end_ms - start_ms) as f64 / 1e3);
        let host = match self.ends.observer.parse::<std::net::Ipv6Addr>() {
            Ok(v6) => format!("[{v6}]"),
            Err(_) => self.ends.observer.clone(),
        };
        // pScheduler's hrefs, which perfSONAR's pipeline reads the task's
        // and the run's ids from; no pScheduler API answers there.
        let task_href = format!("https://{host}/pscheduler/tasks/{task_uuid}");
        let run_href = format!("{task_href}/runs/{run_uuid}");
        let test = json!({"type": ty.name(), "spec": Value::Object(spec)});
        let participants = if ty.two_ended() {
            let s = test["spec"]["source"].clone();
            let d = test["spec"]["dest"].clone();
            json!([s, d])
        } else {
            json!([self.ends.observer])
        };
        let state = if run.state == RunState::Finished {
            "finished"
        } else {
            "failed"
        };
        let at = |ms: u64| goodput_core::time::ms_rfc3339(ms);
        json!({
            "id": run_uuid,
            "schedule": {"start": at(start_ms), "duration": duration},
            "test": test,
            "tool": {"name": tool_name(self.kind), "version": self.version},
            "participants": participants,
            "run": {
                "href": run_href,
                "task-href": task_href,
                "added": at(run.scheduled_ms),
                "start-time": at(start_ms),
                "end-time": at(end_ms),
                "state": state,
            },
            "task": {
                "href": task_href,
                "test": test,
                "tool": tool_name(self.kind),
                "detail": {"duration": duration},
            },
            "result": result,
            "reference": {
                "goodput": {
                    "run": run.id,
                    "task": run.task,
                    "source": run.source,
                    "dest": run.dest,
                    "kind": self.kind.name(),
                },
            },
        })
    }
}

/// The spec fields every test type has: its schema, the ends and the IP
/// version.
fn common_spec(ty: TestType, source: &str, dest: &str, run: &Run) -> Map<String, Value> {
    let mut spec = Map::new();
    spec.insert("schema".into(), json!(1));
    spec.insert("source".into(), json!(source));
    spec.insert("dest".into(), json!(dest));
    if let Some(v) = ip_version(dest).or_else(|| ip_version(source)) {
        spec.insert("ip-version".into(), json!(v));
    }
    if ty == TestType::Throughput {
        if let Some(d) = run.spec.get("duration").or_else(|| run.spec.get("time")) {
            if let Some(ms) = d.as_str().and_then(|t| goodput_core::time::duration_ms(t).ok()) {
                spec.insert("duration".into(), json!(iso_duration(ms as f64 / 1e3)));
            }
        }
    }
    spec
}

/// A throughput run's documents: one for each direction that carried
/// data (`reverse` for the far end's), its bits/s as goodput measured
/// them, and the retransmits of the direction this end sent.
fn throughput_documents(base: &Base<'_>, r: &TestResult, dest: &str) -> Vec<Value> {
    let figures = crate::figures_of(r);
    let mut streams = 0u64;
    let mut retransmits = None;
    if let Detail::Iperf3(d) = &r.detail {
        streams = u64::from(d.parallel.max(1));
        retransmits = Some(d.streams.iter().filter_map(|s| s.retransmits).sum::<u64>());
    }
    if streams == 0 {
        streams = base
            .run
            .spec
            .get("connections")
            .and_then(Value::as_u64)
            .unwrap_or(1)
            .clamp(1, 1 << 20);
    }
    let seconds = r.summary.duration_s.max(0.0);
    let mut out = Vec::new();
    for (bps, reverse) in [
        (figures.throughput_up_bps, false),
        (figures.throughput_down_bps, true),
    ] {
        let Some(bps) = bps.filter(|b| b.is_finite() && *b >= 0.0) else {
            continue;
        };
        let mut spec = common_spec(TestType::Throughput, &base.ends.source, dest, base.run);
        spec.insert("parallel".into(), json!(streams));
        if reverse {
            spec.insert("reverse".into(), json!(true));
        }
        let mut sum = Map::new();
        sum.insert("start".into(), json!(0.0));
        sum.insert("end".into(), json!(seconds));
        sum.insert("throughput-bits".into(), json!(bps));
        sum.insert("throughput-bytes".into(), json!((bps / 8.0 * seconds).round()));
        if let (Some(n), false) = (retransmits, reverse) {
            sum.insert("retransmits".into(), json!(n));
        }
        let result = json!({
            "succeeded": true,
            "diags": format!(
                "goodput {} {}: {:.0} bit/s over {:.3} s, as its receiver measured it",
                base.kind.name(),
                if reverse { "download" } else { "upload" },
                bps,
                seconds
            ),
            "intervals": [],
            "summary": {"streams": [], "summary": Value::Object(sum)},
        });
        out.push(base.document("", TestType::Throughput, spec, result, reverse));
    }
    out
}

/// Most histogram buckets sent (pScheduler's ingest refuses a million).
const MAX_BUCKETS: usize = 100_000;

/// One OWAMP direction as pScheduler's latency result: the counts, and
/// the one-way delays (`histogram-latency`, milliseconds to two
/// decimals) only when both clocks were synchronised for every packet.
fn latency_result(d: &OneWayDirection) -> Value {
    owamp_latency(d, 0.001, false)
}

/// One OWAMP direction as pScheduler's latency result, its delay
/// histogram's buckets `bucket_s` seconds wide (pScheduler's
/// `bucket-width`: a key is the delay in buckets, to two decimals). With
/// `unsynchronised_too` the delays go in even when the clocks were not
/// synchronised (negative ones too), as pScheduler's owping tool reports
/// them, with `diags` saying so, the clock error to two decimals as that
/// tool gives it, and the TTL histogram when every packet came over the
/// same number of hops.
pub fn owamp_latency(d: &OneWayDirection, bucket_s: f64, unsynchronised_too: bool) -> Value {
    latency_labelled(
        d,
        bucket_s,
        unsynchronised_too,
        &format!("goodput OWAMP session {}", d.sid),
    )
}

/// [`owamp_latency`], its `diags` starting with `what` the figures are of.
fn latency_labelled(d: &OneWayDirection, bucket_s: f64, unsynchronised_too: bool, what: &str) -> Value {
    let mut r = Map::new();
    r.insert("succeeded".into(), json!(true));
    r.insert("packets-sent".into(), json!(d.sent));
    r.insert("packets-received".into(), json!(d.received));
    r.insert("packets-lost".into(), json!(d.lost.min(d.sent)));
    r.insert("packets-duplicated".into(), json!(d.duplicates));
    r.insert("packets-reordered".into(), json!(d.reordered));
    let measured = d.delay.as_ref().is_some_and(|x| x.count > 0);
    let synchronized = measured && d.delay.as_ref().is_some_and(|x| x.synchronized);
    let mut diags = format!("{what} from {} to {}", d.sender, d.receiver);
    if synchronized || (unsynchronised_too && measured) {
        // A key is the delay in buckets to two decimals (ms for 1 ms).
        let width_ns = (bucket_s * 1e9).max(1.0);
        let mut buckets: BTreeMap<i64, u64> = BTreeMap::new();
        let sides = [
            (d.histogram_ns.as_deref(), 1.0),
            (d.histogram_negative_ns.as_deref(), -1.0),
        ];
        for (text, sign) in sides {
            if sign < 0.0 && !unsynchronised_too {
                continue;
            }
            let Some(h) = text.and_then(goodput_core::stamp::stats::decode_histogram) else {
                continue;
            };
            for v in h.iter_recorded() {
                let key = (sign * v.value_iterated_to() as f64 / width_ns * 100.0).round() as i64;
                if buckets.len() >= MAX_BUCKETS && !buckets.contains_key(&key) {
                    continue;
                }
                *buckets.entry(key).or_insert(0) += v.count_at_value();
            }
        }
        if !buckets.is_empty() {
            let h: Map<String, Value> = buckets
                .into_iter()
                .map(|(k, n)| (format!("{:.2}", k as f64 / 100.0), json!(n)))
                .collect();
            r.insert("histogram-latency".into(), Value::Object(h));
        }
        if let Some(e) = d.delay.as_ref().and_then(|x| x.error_bound_us) {
            if e.is_finite() {
                // owping's tool gives it to two decimals.
                let ms = if unsynchronised_too {
                    (e / 10.0).round() / 100.0
                } else {
                    e / 1000.0
                };
                r.insert("max-clock-error".into(), json!(ms));
            }
        }
        if !synchronized {
            diags.push_str(
                "; the clocks were not synchronised: its one-way delays are each host's clock \
                 against the other's",
            );
        }
    } else if d.delay.is_some() {
        diags.push_str(
            "; its one-way delays are left out: the clocks were not synchronised, so they are \
             not delays",
        );
    }
    if unsynchronised_too && d.received > 0 {
        match d.hops {
            Some(h) if h.min == h.max => {
                let ttl = 255u16.saturating_sub(u16::from(h.min));
                r.insert("histogram-ttl".into(), json!({ttl.to_string(): d.received}));
            }
            Some(h) => diags.push_str(&format!(
                "; packets came over {} to {} hops (goodput keeps the range, not a count per TTL)",
                h.min, h.max
            )),
            None => {}
        }
    }
    r.insert("diags".into(), json!(diags));
    Value::Object(r)
}

/// One summary of a continuous OWAMP stream (from `sender` to
/// `receiver`) as pScheduler's latencybg result, as its powstream tool
/// reports one: the same fields as [`owamp_latency`]'s, from that
/// summary's packets only.
pub fn owamp_summary_latency(s: &OneWaySummary, sender: &str, receiver: &str, bucket_s: f64) -> Value {
    let d = OneWayDirection {
        sid: String::new(),
        sender: sender.to_owned(),
        receiver: receiver.to_owned(),
        sent: s.sent,
        unsent: s.unsent,
        received: s.received,
        lost: s.lost,
        duplicates: s.duplicates,
        reordered: s.reordered,
        reordered_percent: 0.0,
        n_reordering_percent: Vec::new(),
        delay: s.delay,
        percentiles: None,
        hops: s.hops,
        histogram_ns: s.histogram_ns.clone(),
        histogram_negative_ns: s.histogram_negative_ns.clone(),
        first_ns: Some(s.start_ns),
        last_ns: Some(s.end_ns),
        intervals: Vec::new(),
    };
    latency_labelled(&d, bucket_s, true, "goodput OWAMP stream summary")
}

/// A ping run as pScheduler's rtt result: every request (up to goodput's
/// record cap) and ping's summary.
fn ping_result(p: &PingDetail) -> Value {
    let mut r = Map::new();
    r.insert("succeeded".into(), json!(true));
    let trips: Vec<Value> = p
        .replies
        .iter()
        .map(|x| {
            let mut t = Map::new();
            t.insert("seq".into(), json!(x.seq.max(1)));
            if let Some(us) = x.rtt_us.filter(|u| u.is_finite() && *u >= 0.0) {
                t.insert("rtt".into(), json!(iso_duration(us / 1e6)));
                if ip_version(&p.address).is_some() {
                    t.insert("ip".into(), json!(p.address));
                }
                if let Some(ttl) = x.ttl.filter(|t| *t > 0) {
                    t.insert("ttl".into(), json!(ttl));
                }
                if let Some(b) = x.bytes.filter(|b| *b > 0) {
                    t.insert("length".into(), json!(b));
                }
            }
            Value::Object(t)
        })
        .collect();
    r.insert("roundtrips".into(), Value::Array(trips));
    if p.sent > 0 {
        r.insert("sent".into(), json!(p.sent));
    }
    r.insert("received".into(), json!(p.received));
    r.insert("lost".into(), json!(p.lost.min(p.sent)));
    r.insert("duplicates".into(), json!(p.duplicates));
    let loss = if p.sent > 0 {
        p.lost.min(p.sent) as f64 / p.sent as f64
    } else {
        1.0
    };
    r.insert("loss".into(), json!(loss));
    if let Some(s) = &p.rtt {
        r.insert("min".into(), json!(iso_duration(s.min_us / 1e6)));
        r.insert("max".into(), json!(iso_duration(s.max_us / 1e6)));
        r.insert("mean".into(), json!(iso_duration(s.avg_us / 1e6)));
        // ping's mdev is the standard deviation.
        r.insert("stddev".into(), json!(iso_duration(s.mdev_us / 1e6)));
    }
    r.insert(
        "diags".into(),
        json!(format!(
            "goodput ping ({}) to {}",
            json!(p.method).as_str().unwrap_or(""),
            p.address
        )),
    );
    Value::Object(r)
}

/// STAMP's and TWAMP's round trips as pScheduler's rtt result: loss of
/// the packets planned (one that could not be sent counts lost), and the
/// round trip's smallest, largest and mean. goodput keeps no list of
/// packets for these, so `roundtrips` is empty.
fn stamp_result(t: &StampStats) -> Value {
    let mut r = Map::new();
    r.insert("succeeded".into(), json!(true));
    r.insert("roundtrips".into(), json!([]));
    let planned = t.planned();
    if planned > 0 {
        r.insert("sent".into(), json!(planned));
    }
    r.insert("received".into(), json!(t.received));
    r.insert("lost".into(), json!(t.missing()));
    r.insert("duplicates".into(), json!(t.duplicates));
    r.insert("reorders".into(), json!(t.reordered));
    r.insert(
        "loss".into(),
        json!(t.loss_percent().map_or(1.0, |p| (p / 100.0).clamp(0.0, 1.0))),
    );
    if let Some(d) = t.rtt.as_ref().filter(|d| d.count > 0) {
        r.insert("min".into(), json!(iso_duration(d.min_us / 1e6)));
        r.insert("max".into(), json!(iso_duration(d.max_us / 1e6)));
        r.insert("mean".into(), json!(iso_duration(d.mean_us / 1e6)));
    }
    Value::Object(r)
}

/// A trace as pScheduler's trace result: one path, one entry per TTL
/// from 1 (an empty one where nothing answered or goodput did not
/// probe), each with the first address that answered, its name and its
/// round trip.
fn trace_result(t: &TraceDetail) -> Value {
    let mut by_ttl: BTreeMap<u8, Value> = BTreeMap::new();
    for h in &t.hops {
        let mut hop = Map::new();
        if let Some(ip) = h.addresses.first().filter(|a| ip_version(a).is_some()) {
            hop.insert("ip".into(), json!(ip));
            if let Some(Some(name)) = h.names.first() {
                hop.insert("hostname".into(), json!(name));
            }
            if let Some(us) = h
                .probes
                .iter()
                .filter(|p| p.from.as_deref() == Some(ip.as_str()))
                .find_map(|p| p.rtt_us)
                .filter(|u| u.is_finite() && *u >= 0.0)
            {
                hop.insert("rtt".into(), json!(iso_duration(us / 1e6)));
            }
        }
        if let Some(m) = &h.mtu {
            if m.mtu > 0 {
                hop.insert("mtu".into(), json!(m.mtu));
            }
        }
        if h.hop > 0 {
            by_ttl.insert(h.hop, Value::Object(hop));
        }
    }
    let last = by_ttl.keys().next_back().copied().unwrap_or(0);
    let path: Vec<Value> = (1..=last)
        .map(|ttl| by_ttl.remove(&ttl).unwrap_or_else(|| json!({})))
        .collect();
    json!({
        "succeeded": true,
        "paths": [path],
        "diags": format!(
            "goodput trace ({}) to {}: {}",
            t.method.name(),
            t.address,
            if t.reached { "reached" } else { "not reached" }
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_ids_are_in_pschedulers_shapes() {
        assert_eq!(iso_duration(10.0), "PT10S");
        assert_eq!(iso_duration(0.000257), "PT0.000257S");
        assert_eq!(iso_duration(-1.0), "PT0S");
        assert_eq!(iso_duration(f64::NAN), "PT0S");
        assert_eq!(
            crate::pscheduler::iso_seconds(&iso_duration(0.000_012_345)).unwrap(),
            0.000_012_345
        );
        let a = uuid_of("tcp/a/b/1764300000000");
        assert_eq!(a, uuid_of("tcp/a/b/1764300000000"), "the same at every attempt");
        assert_ne!(a, uuid_of("tcp/a/b/1764300000001"));
        let parts: Vec<&str> = a.split('-').collect();
        assert_eq!(
            parts.iter().map(|p| p.len()).collect::<Vec<_>>(),
            [8, 4, 4, 4, 12]
        );
        assert!(parts[2].starts_with('8'), "version 8: {a}");
        assert!(
            matches!(&parts[3][..1], "8" | "9" | "a" | "b"),
            "RFC 9562 variant: {a}"
        );
    }

    #[test]
    fn kinds_without_a_test_type_and_runs_without_a_result_are_not_sent() {
        let run = |kind: &str, state: RunState| Run {
            id: "t/a/b/1".into(),
            task: "t".into(),
            source: "a".into(),
            dest: Some("b".into()),
            kind: kind.into(),
            class: goodput_core::schedule::RunClass::Normal,
            state,
            reason: None,
            scheduled_ms: 1,
            start_ms: None,
            end_ms: None,
            measurement_key: String::new(),
            spec: Value::Null,
            result: None,
            figures: crate::Figures::default(),
        };
        let ends = Ends {
            source: "10.0.0.1".into(),
            dest: Some("10.0.0.2".into()),
            observer: "10.0.0.1".into(),
        };
        assert_eq!(
            to_pscheduler(&run("udp", RunState::Finished), &ends),
            Err(NotSent::NoTestType("udp".into()))
        );
        assert_eq!(
            to_pscheduler(&run("stamp", RunState::NonStart), &ends),
            Err(NotSent::NoResult("non_start"))
        );
        assert!(sends_kind("trace") && !sends_kind("quic") && !sends_kind("nonsense"));
        // A failed run goes, with its reason and no figures.
        let mut failed = run("ping", RunState::Failed);
        failed.reason = Some("no route to host".into());
        let docs = to_pscheduler(&failed, &ends).unwrap();
        assert_eq!(docs.len(), 1);
        assert_eq!(docs[0]["result"]["succeeded"], false);
        assert_eq!(docs[0]["result"]["error"], "no route to host");
        assert_eq!(docs[0]["test"]["type"], "rtt");
        let back = crate::pscheduler::from_pscheduler(&docs[0]).unwrap();
        assert_eq!(back.run.state, RunState::Failed);
        assert_eq!(back.run.reason.as_deref(), Some("no route to host"));
    }
}
