//! perfSONAR's results in goodput's archive: the document a pScheduler
//! `http` archiver sends for a run (`id`, `schedule {start, duration}`,
//! `test {type, spec}`, `tool`, `participants`, `result`, …) becomes a
//! [`Run`] with goodput's figures, so that an existing perfSONAR mesh can
//! use goodput's dashboard, series and alerts. The test spec becomes the
//! goodput test `import-psconfig` makes of it
//! (`goodput_core::psconfig::goodput_test`), and the whole document is kept
//! as the run's result: nothing that could not be mapped is dropped.
//!
//! Written from pScheduler's published archiver and test result formats
//! (`throughput`, `latency`, `latencybg`, `rtt`, `trace`).

use goodput_core::psconfig::{goodput_test, has_kind, ImportChoices};
use goodput_core::schedule::RunClass;
use serde_json::{Map, Value};

use crate::{Figures, Run, RunState};

/// A pScheduler result mapped to goodput's model, before the archive
/// names its ends and its measurement.
#[derive(Debug, Clone, PartialEq)]
pub struct PsResult {
    /// The run: id `pscheduler/RUN-UUID`, task `pscheduler-TYPE`, source
    /// and dest as the spec names them (the caller puts the mesh's names
    /// in), `measurement_key` empty (the caller's).
    pub run: Run,
    /// pScheduler's test type.
    pub test_type: String,
}

/// Why a document was not mapped: the caller answers and counts by
/// this, never by the words of [`Refusal::text`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusalKind {
    /// It does not read as a pScheduler result (a field missing, of the
    /// wrong type or too long).
    Malformed,
    /// It reads, but a figure, a histogram bucket or the clock error is
    /// past what is physically sensible.
    OutOfRange,
    /// Its test type has no goodput kind its results map to.
    NoKind,
}

/// A document refused, with the reason in words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// What kind of refusal it is.
    pub kind: RefusalKind,
    /// The reason in words, naming the field and its value.
    pub text: String,
}

impl Refusal {
    fn out_of_range(text: String) -> Self {
        Self {
            kind: RefusalKind::OutOfRange,
            text,
        }
    }
}

impl From<String> for Refusal {
    fn from(text: String) -> Self {
        Self {
            kind: RefusalKind::Malformed,
            text,
        }
    }
}

impl From<&str> for Refusal {
    fn from(text: &str) -> Self {
        text.to_owned().into()
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

/// Largest document fields read (ids, host names).
const MAX_TEXT: usize = 512;

fn text<'a>(v: &'a Value, what: &str) -> Result<&'a str, String> {
    checked(v.as_str().ok_or_else(|| format!("{what} is not a string"))?, what)
}

/// A text field within bounds: 1 to [`MAX_TEXT`] bytes, no NUL.
fn checked<'a>(t: &'a str, what: &str) -> Result<&'a str, String> {
    if t.is_empty() || t.len() > MAX_TEXT {
        return Err(format!("{what} must be 1 to {MAX_TEXT} characters"));
    }
    if t.contains('\0') {
        return Err(format!("{what} holds a NUL character"));
    }
    Ok(t)
}

/// An ISO 8601 date and time with a `Z` or `±HH:MM` offset, in ms since
/// the Unix epoch.
pub fn iso_time_ms(t: &str) -> Result<u64, String> {
    let t = t.trim();
    let bad = || format!("'{t}' is not an ISO 8601 time with an offset");
    if let Some(base) = t.strip_suffix('Z') {
        return goodput_core::time::rfc3339_ms(&format!("{base}Z")).map_err(|_| bad());
    }
    if t.len() < 6 || !t.is_char_boundary(t.len() - 6) {
        return Err(bad());
    }
    let (base, off) = t.split_at(t.len() - 6);
    let sign = match off.as_bytes()[0] {
        b'+' => 1i64,
        b'-' => -1,
        _ => return Err(bad()),
    };
    let (h, m) = off[1..].split_once(':').ok_or_else(bad)?;
    let (h, m): (i64, i64) = (h.parse().map_err(|_| bad())?, m.parse().map_err(|_| bad())?);
    if h > 23 || m > 59 {
        return Err(bad());
    }
    let utc = goodput_core::time::rfc3339_ms(&format!("{base}Z")).map_err(|_| bad())? as i64;
    let ms = utc - sign * (h * 3_600_000 + m * 60_000);
    u64::try_from(ms).map_err(|_| bad())
}

/// An ISO 8601 duration (`PT0.000257S`, `PT10S`, `P1DT2H`) in seconds,
/// to the microsecond.
pub fn iso_seconds(t: &str) -> Result<f64, String> {
    let bad = || format!("'{t}' is not an ISO 8601 duration");
    let rest = t.trim().strip_prefix('P').ok_or_else(bad)?;
    let (mut total, mut number, mut in_time, mut any) = (0f64, String::new(), false, false);
    for c in rest.chars() {
        match c {
            'T' if number.is_empty() && !in_time => in_time = true,
            d if d.is_ascii_digit() || d == '.' => number.push(d),
            unit => {
                let n: f64 = number.parse().map_err(|_| bad())?;
                number.clear();
                any = true;
                total += n * match (unit, in_time) {
                    ('W', false) => 604_800.0,
                    ('D', false) => 86_400.0,
                    ('H', true) => 3_600.0,
                    ('M', true) => 60.0,
                    ('S', true) => 1.0,
                    _ => return Err(bad()),
                };
            }
        }
    }
    if !number.is_empty() || !any || !total.is_finite() || total > 1e9 {
        return Err(bad());
    }
    Ok(total)
}

fn num(v: &Value) -> Option<f64> {
    v.as_f64().filter(|x| x.is_finite())
}

/// A count (a non-negative whole number, bounded).
fn count(v: &Value) -> Option<u64> {
    v.as_u64().filter(|n| *n < 1 << 53)
}

/// The value at quantile `q` of a histogram of (value, count), sorted by
/// value: the smallest value with at least `q` of the counts at or
/// below it.
fn quantile(h: &[(f64, u64)], q: f64) -> Option<f64> {
    let total: u64 = h.iter().map(|(_, n)| *n).fold(0u64, u64::saturating_add);
    if total == 0 {
        return None;
    }
    let want = ((total as f64 * q).ceil() as u64).clamp(1, total);
    let mut seen = 0u64;
    for (v, n) in h {
        seen = seen.saturating_add(*n);
        if seen >= want {
            return Some(*v);
        }
    }
    h.last().map(|(v, _)| *v)
}

/// Maps one document as the `http` archiver sends it, with no observer
/// named ([`from_pscheduler_observed`]).
pub fn from_pscheduler(doc: &Value) -> Result<PsResult, Refusal> {
    from_pscheduler_observed(doc, None)
}

/// Maps one document as the `http` archiver sends it. `observer` is the
/// host that says it made the measurement: the `x-ps-observer` header
/// perfSONAR's pSConfig puts on its archivers (`{% scheduled_by_address %}`,
/// the address of the host that ran the task). A test is filed under
/// its spec's `source` where it names one (a one-way latency goes from
/// its source whoever ran it); a single-ended test without one (rtt,
/// trace, latency from the host that ran it) is its observer's, and
/// only without an observer the first participant's.
pub fn from_pscheduler_observed(doc: &Value, observer: Option<&str>) -> Result<PsResult, Refusal> {
    let top = doc.as_object().ok_or("a pScheduler result is a JSON object")?;
    let uuid = text(top.get("id").ok_or("no id (the run's)")?, "id")?;
    let schedule = top.get("schedule").ok_or("no schedule")?;
    let start_ms = iso_time_ms(text(
        schedule.get("start").ok_or("no schedule.start")?,
        "schedule.start",
    )?)
    .map_err(|e| format!("schedule.start: {e}"))?;
    let duration_ms = match schedule.get("duration") {
        Some(d) => (iso_seconds(text(d, "schedule.duration")?)
            .map_err(|e| format!("schedule.duration: {e}"))?
            * 1000.0)
            .round() as u64,
        None => 0,
    };
    let test = top.get("test").ok_or("no test")?;
    let ty = text(test.get("type").ok_or("no test.type")?, "test.type")?;
    let spec = test
        .get("spec")
        .and_then(Value::as_object)
        .ok_or("no test.spec object")?;
    let tool = test_tool(top);
    // A template's dns tests import as goodput's dns kind, but reading
    // pScheduler's dns results into one is not written.
    if ty == "dns" {
        return Err(Refusal {
            kind: RefusalKind::NoKind,
            text: "test type 'dns': its results are not read yet (the type has no goodput kind for them)"
                .into(),
        });
    }
    let (kind, goodput_spec, _) =
        goodput_test(ty, spec, tool, ImportChoices::default()).map_err(|e| Refusal {
            kind: if has_kind(ty) {
                RefusalKind::Malformed
            } else {
                RefusalKind::NoKind
            },
            text: format!("test type '{ty}': {e}"),
        })?;
    let result = top
        .get("result")
        .and_then(Value::as_object)
        .ok_or("no result object")?;
    let participants: Vec<&str> = top
        .get("participants")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let dest = text(spec.get("dest").ok_or("no test.spec.dest")?, "test.spec.dest")?.to_owned();
    // The source: the spec's, else the observer, else the first
    // participant (the host that ran the test, by its host name).
    let observer = observer
        .map(|o| checked(o.trim(), "the x-ps-observer header"))
        .transpose()?;
    let source = match (spec.get("source"), observer) {
        (Some(s), _) => text(s, "test.spec.source")?.to_owned(),
        (None, Some(o)) => o.to_owned(),
        (None, None) => text(
            &Value::from(
                *participants
                    .first()
                    .ok_or("no test.spec.source and no participants")?,
            ),
            "participants[0]",
        )?
        .to_owned(),
    };
    let succeeded = result.get("succeeded").and_then(Value::as_bool);
    let (state, reason) = match succeeded {
        Some(true) => (RunState::Finished, None),
        Some(false) => (
            RunState::Failed,
            Some(result.get("error").and_then(Value::as_str).map_or_else(
                || "pScheduler says it failed".to_owned(),
                |e| e.chars().take(2000).collect(),
            )),
        ),
        None => return Err("result.succeeded is not true or false".into()),
    };
    let figures = if state == RunState::Finished {
        match ty {
            "throughput" => throughput(result, spec),
            "latency" | "latencybg" => latency(result)?,
            "rtt" => rtt(result)?,
            "trace" => trace(result, &dest),
            _ => Figures::default(),
        }
    } else {
        Figures::default()
    };
    if let Some(e) = figures.out_of_range() {
        return Err(Refusal::out_of_range(format!("result: {e}")));
    }
    let class = match ty {
        "throughput" => RunClass::Exclusive,
        "latencybg" => RunClass::Background,
        _ => RunClass::Normal,
    };
    Ok(PsResult {
        run: Run {
            id: format!("pscheduler/{uuid}"),
            task: format!("pscheduler-{ty}"),
            source,
            dest: Some(dest),
            kind: kind.into(),
            class,
            state,
            reason,
            scheduled_ms: start_ms,
            start_ms: Some(start_ms),
            end_ms: Some(start_ms.saturating_add(duration_ms)),
            measurement_key: String::new(),
            spec: goodput_spec,
            result: Some(doc.clone()),
            figures,
        },
        test_type: ty.to_owned(),
    })
}

/// The tool that ran the test (`tool.name`), when the document says.
fn test_tool(top: &Map<String, Value>) -> Option<&str> {
    top.get("tool")?.get("name")?.as_str().filter(|t| t.len() <= 64)
}

/// throughput: the summary's bits/s (the way the spec's `reverse` says),
/// retransmits, and for UDP the loss and jitter.
fn throughput(r: &Map<String, Value>, spec: &Map<String, Value>) -> Figures {
    let mut f = Figures::default();
    let sum = &r.get("summary").cloned().unwrap_or_default()["summary"];
    let bps = num(&sum["throughput-bits"]);
    if spec.get("reverse").and_then(Value::as_bool) == Some(true) {
        f.throughput_down_bps = bps;
    } else {
        f.throughput_up_bps = bps;
    }
    f.retransmits = count(&sum["retransmits"]).map(|n| n as f64);
    if let (Some(sent), Some(lost)) = (count(&sum["sent"]), count(&sum["lost"])) {
        if sent > 0 {
            let pct = lost.min(sent) as f64 * 100.0 / sent as f64;
            f.loss_pct = Some(pct);
            if f.throughput_down_bps.is_some() {
                f.loss_backward_pct = Some(pct);
            } else {
                f.loss_forward_pct = Some(pct);
            }
        }
    }
    // iperf3's UDP jitter, in milliseconds.
    f.jitter_us = num(&sum["jitter"]).map(|ms| ms * 1000.0);
    f
}

/// latency and latencybg (one way, source → destination): loss,
/// duplicates, reordering, the one-way delay's median from
/// `histogram-latency` (keys: delay in ms, negative where the clocks
/// were apart by more than the delay) and owping's jitter (its 95th
/// percentile less the median), and `max-clock-error` (ms). One-way delay
/// is not the round trip: it goes to the one-way series, never to the
/// round-trip ones, and only when it is exact: no raw packet says a clock
/// was unsynchronised, and the median stands clear of the clock error
/// (`crate::one_way_is_exact`). Otherwise the run is marked and its
/// document keeps the figures.
fn latency(r: &Map<String, Value>) -> Result<Figures, Refusal> {
    let mut f = Figures::default();
    let sent = r.get("packets-sent").and_then(count);
    let lost = r.get("packets-lost").and_then(count);
    if let (Some(sent), Some(lost)) = (sent, lost) {
        if sent > 0 {
            let pct = lost.min(sent) as f64 * 100.0 / sent as f64;
            f.loss_pct = Some(pct);
            f.loss_forward_pct = Some(pct);
        }
    }
    f.duplicates = r.get("packets-duplicated").and_then(count).map(|n| n as f64);
    f.reordered = r.get("packets-reordered").and_then(count).map(|n| n as f64);
    let max_ms = crate::figures::MAX_DELAY_US / 1000.0;
    let clock_error_us = match r.get("max-clock-error") {
        None | Some(Value::Null) => None,
        Some(v) => match num(v).filter(|e| (0.0..=max_ms).contains(e)) {
            Some(ms) => Some(ms * 1000.0),
            None => {
                return Err(Refusal::out_of_range(format!(
                    "result.max-clock-error is {v}, not a time of 0 to 3600000 ms"
                )))
            }
        },
    };
    if let Some(h) = r.get("histogram-latency").and_then(Value::as_object) {
        if h.len() > 1_000_000 {
            return Err("result.histogram-latency has more than 1,000,000 buckets".into());
        }
        let mut buckets = Vec::with_capacity(h.len());
        for (k, v) in h {
            let ms: f64 = k
                .trim()
                .parse()
                .ok()
                .filter(|x: &f64| x.is_finite())
                .ok_or_else(|| format!("result.histogram-latency: bucket '{k}' is not a delay in ms"))?;
            // Within an hour either way: a negative one is clocks out of
            // step, kept (in the document) but never taken for a delay.
            if !(-max_ms..=max_ms).contains(&ms) {
                return Err(Refusal::out_of_range(format!(
                    "result.histogram-latency: bucket '{k}' is outside -3600000 to 3600000 ms"
                )));
            }
            let n = count(v).ok_or_else(|| format!("result.histogram-latency: bucket '{k}' has no count"))?;
            buckets.push((ms * 1000.0, n));
        }
        buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        let used: Vec<(f64, u64)> = buckets.into_iter().filter(|(_, n)| *n > 0).collect();
        let median = quantile(&used, 0.5);
        let p95 = quantile(&used, 0.95);
        f.jitter_us = p95.zip(median).map(|(p, m)| (p - m).max(0.0));
        if median.is_some() {
            let unsynced = r
                .get("raw-packets")
                .and_then(Value::as_array)
                .is_some_and(|packets| {
                    packets.iter().take(1_000_000).any(|p| {
                        ["src-clock-sync", "dst-clock-sync"]
                            .iter()
                            .any(|k| p.get(*k).and_then(Value::as_bool) == Some(false))
                    })
                });
            let exact = median.is_some_and(|m| crate::one_way_is_exact(!unsynced, m, clock_error_us));
            f.owd_synchronized = Some(exact);
            f.owd_forward_median_us = median.filter(|_| exact);
            f.owd_clock_error_us = clock_error_us;
        }
    }
    Ok(f)
}

/// rtt (ping): loss, and the round trip's min, max, stddev (as jitter)
/// and median (from the round trips).
fn rtt(r: &Map<String, Value>) -> Result<Figures, String> {
    let mut f = Figures::default();
    let sent = r.get("sent").and_then(count);
    let lost = r.get("lost").and_then(count);
    f.loss_pct = match (sent, lost) {
        (Some(s), Some(l)) if s > 0 => Some(l.min(s) as f64 * 100.0 / s as f64),
        _ => r.get("loss").and_then(num).map(|x| x.clamp(0.0, 1.0) * 100.0),
    };
    f.loss_forward_pct = f.loss_pct;
    f.duplicates = r.get("duplicates").and_then(count).map(|n| n as f64);
    f.reordered = r.get("reorders").and_then(count).map(|n| n as f64);
    let us = |k: &str| -> Result<Option<f64>, String> {
        r.get(k)
            .and_then(Value::as_str)
            .map(|t| {
                iso_seconds(t)
                    .map(|s| s * 1e6)
                    .map_err(|e| format!("result.{k}: {e}"))
            })
            .transpose()
    };
    f.delay_min_us = us("min")?;
    f.delay_max_us = us("max")?;
    f.jitter_us = us("stddev")?;
    let mut trips: Vec<(f64, u64)> = Vec::new();
    for t in r
        .get("roundtrips")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .take(1_000_000)
    {
        if let Some(x) = t.get("rtt").and_then(Value::as_str) {
            trips.push((
                iso_seconds(x).map_err(|e| format!("result.roundtrips: {e}"))? * 1e6,
                1,
            ));
        }
    }
    trips.sort_by(|a, b| a.0.total_cmp(&b.0));
    f.delay_median_us = quantile(&trips, 0.5);
    f.delay_p95_us = quantile(&trips, 0.95);
    Ok(f)
}

/// trace: the first path's hops to the destination, and its checksum
/// (goodput's, over the answering addresses per hop).
fn trace(r: &Map<String, Value>, dest: &str) -> Figures {
    use goodput_core::path::{path_checksum, ProbeAnswer, TraceHop, TraceProbe};
    let mut f = Figures::default();
    let Some(path) = r
        .get("paths")
        .and_then(Value::as_array)
        .and_then(|p| p.first())
        .and_then(Value::as_array)
    else {
        return f;
    };
    let mut hops: Vec<TraceHop> = path
        .iter()
        .take(255)
        .enumerate()
        .map(|(i, h)| TraceHop {
            hop: (i + 1) as u8,
            probes: Vec::new(),
            addresses: h
                .get("ip")
                .and_then(Value::as_str)
                .filter(|ip| ip.len() <= 64)
                .map(|ip| vec![ip.to_owned()])
                .unwrap_or_default(),
            names: Vec::new(),
            back_hops: None,
            mtu: None,
        })
        .collect();
    let reached = hops.iter().position(|h| h.addresses.iter().any(|a| a == dest));
    f.hops = reached.map(|i| (i + 1) as f64);
    // The hop that is the destination answered as the destination: the
    // checksum says "reached" as it does for goodput's own traces.
    if let Some(i) = reached {
        hops[i].probes.push(TraceProbe {
            answer: ProbeAnswer::Reached,
            from: Some(dest.to_owned()),
            rtt_us: None,
            size: 0,
            reply_ttl: None,
            code: None,
        });
    }
    f.path_checksum = Some(path_checksum(&hops));
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    fn latency(histogram: Value) -> Value {
        serde_json::json!({
            "id": "8a9b0c1d-2e3f-4051-8263-748596a7b8c9",
            "schedule": {"start": "2026-11-26T15:01:00Z", "duration": "PT1M"},
            "test": {"type": "latencybg", "spec": {"source": "10.81.1.1", "dest": "10.81.1.2"}},
            "participants": ["10.81.1.1", "10.81.1.2"],
            "result": {"succeeded": true, "packets-sent": 600, "packets-lost": 6,
                       "histogram-latency": histogram}
        })
    }

    #[test]
    fn buckets_and_figures_outside_physical_sense_are_refused() {
        let ok = from_pscheduler(&latency(serde_json::json!({"10.21": 1, "3600000": 100}))).unwrap();
        assert_eq!(ok.run.figures.owd_forward_median_us, Some(3.6e9));
        for (bucket, says) in [
            ("1e308", "bucket '1e308' is outside -3600000 to 3600000 ms"),
            ("-1e308", "bucket '-1e308' is outside -3600000 to 3600000 ms"),
            (
                "-3600000.5",
                "bucket '-3600000.5' is outside -3600000 to 3600000 ms",
            ),
            (
                "3600000.5",
                "bucket '3600000.5' is outside -3600000 to 3600000 ms",
            ),
        ] {
            let e = from_pscheduler(&latency(serde_json::json!({ bucket: 5 }))).unwrap_err();
            assert!(e.text.contains(says), "{bucket}: {e}");
            assert_eq!(e.kind, RefusalKind::OutOfRange, "{bucket}: {e}");
        }
        // A throughput of 1e308 bits/s is no figure either.
        let mut doc = serde_json::json!({
            "id": "7c1d2e3f-0a4b-4c5d-9e8f-101112131415",
            "schedule": {"start": "2026-11-26T10:00:05Z", "duration": "PT20S"},
            "test": {"type": "throughput", "spec": {"source": "10.81.1.1", "dest": "10.81.1.2"}},
            "result": {"succeeded": true, "summary": {"summary": {"throughput-bits": 9.3e9}}}
        });
        assert!(from_pscheduler(&doc).is_ok());
        doc["result"]["summary"]["summary"]["throughput-bits"] = 1e308.into();
        let e = from_pscheduler(&doc).unwrap_err();
        assert!(
            e.text
                .contains("figure throughput_up_bps is 1e308, outside 0 to 10 Tbit/s"),
            "{e}"
        );
        assert_eq!(e.kind, RefusalKind::OutOfRange, "{e}");
    }
}
