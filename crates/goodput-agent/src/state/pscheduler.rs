//! The agent as a participant of perfSONAR pScheduler throughput tasks:
//! the tasks and runs a pScheduler lead keeps here, each run an exclusive
//! booking on the agent's own calendar under the same limits as a peer
//! agent's, and, at its slot, goodput's own iperf3 server for that run
//! only (one test, as `iperf3 -s -1`), closed at the slot's end, when the
//! run is cancelled, or when the agent stops. Each run is kept in the
//! archive as an iperf3 run whose task names the lead.
//!
//! What the lead asks and reads was learned from pScheduler's scheduler,
//! runner and iperf3 tool; the HTTP side is `http::pscheduler`.
//!
//! The tasks and their runs not yet ended are kept across restarts in a
//! file beside the archive (`ARCHIVE.pscheduler-tasks.json`, mode 0600: a
//! task holds the lead's key), written a second after each change. A
//! lead books a repeating task's runs up to a day ahead; after a restart
//! each task is read again under the limits, and each run still to come
//! is booked again (its server starts at its slot, as before), so the
//! lead's runs go on rather than finding no server.

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use goodput_archive::RunState;
use goodput_core::result::TestResult;
use goodput_core::schedule::RunClass;
use goodput_core::spec::{Iperf3Spec, TestSpec};
use goodput_core::stamp::Cidr;
use goodput_core::time::ms_rfc3339;
use goodput_core::units::{BitRate, HumanDuration};
use serde_json::{json, Value};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::clock;
use crate::limits::Bucket;
use crate::log::log;
use crate::state::booking::{Booked, BookedBy, Wanted};
use crate::state::Shared;

/// How the pScheduler participant serves (`goodput agent --pscheduler-…`).
#[derive(Debug, Clone)]
pub struct PsOptions {
    /// Where pScheduler's API (HTTPS, under `/pscheduler`) listens.
    pub listen: Vec<SocketAddr>,
    /// Leads that may use it (empty: the agent's `--allow` list).
    pub allow: Vec<Cidr>,
    /// The TCP port the run's iperf3 server listens on (what the
    /// participant data tells the lead).
    pub iperf3_port: u16,
    /// Most tasks one lead keeps here at once.
    pub max_tasks: usize,
}

impl Default for PsOptions {
    fn default() -> Self {
        Self {
            listen: Vec::new(),
            allow: Vec::new(),
            iperf3_port: 5201,
            max_tasks: 100,
        }
    }
}

/// Most tasks kept here from all leads together.
pub(crate) const MAX_TASKS_ALL: usize = 10_000;
/// Most runs of one task not yet ended (a lead books up to a day ahead).
pub(crate) const MAX_RUNS_PER_TASK: usize = 64;
/// A task with no run for this long is forgotten (pScheduler keeps tasks
/// two days).
pub(crate) const TASK_KEEP_MS: u64 = 2 * 86_400_000;
/// Runs are booked at most this far ahead (pScheduler's horizon is a day).
pub(crate) const HORIZON_MS: u64 = 7 * 86_400_000;
/// The server is up this long before the run's start; pScheduler's client
/// waits 3 s past the start before it connects.
const SERVER_LEAD_MS: u64 = 1_000;

/// A throughput test as pScheduler's `throughput` spec states it, read
/// with every number bounded.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Throughput {
    pub(crate) source: Option<String>,
    pub(crate) dest: String,
    pub(crate) duration_s: u64,
    pub(crate) omit_s: u64,
    pub(crate) link_rtt_ms: u64,
    pub(crate) parallel: u32,
    pub(crate) reverse: bool,
    pub(crate) udp: bool,
    pub(crate) bandwidth: Option<u64>,
}

/// The options of pScheduler's throughput spec the iperf3 tool runs (its
/// `can-run` list); a spec naming another is refused, as iperf3 refuses.
const SPEC_FIELDS: &[&str] = &[
    "schema",
    "source",
    "source-node",
    "dest",
    "dest-node",
    "reverse",
    "omit",
    "duration",
    "interval",
    "link-rtt",
    "parallel",
    "window-size",
    "mss",
    "bandwidth",
    "udp",
    "buffer-length",
    "fq-rate",
    "ip-tos",
    "local-address",
    "ip-version",
    "congestion",
    "zero-copy",
    "flow-label",
    "client-cpu-affinity",
    "server-cpu-affinity",
];

/// An ISO 8601 duration as whole milliseconds, at most `max_s` seconds.
fn iso_ms(v: &Value, field: &str, max_s: u64) -> Result<u64, String> {
    let text = v
        .as_str()
        .ok_or_else(|| format!("{field} must be an ISO 8601 duration"))?;
    let s = goodput_archive::pscheduler::iso_seconds(text).map_err(|e| format!("{field}: {e}"))?;
    if s > max_s as f64 {
        // The test's length is the agent's limit; a round trip's bound is
        // pScheduler's own sense.
        let limit = if field == "link-rtt" {
            ""
        } else {
            "limit max_duration: "
        };
        return Err(format!(
            "{limit}{field} is {s} s, more than the {max_s} s this agent accepts"
        ));
    }
    Ok((s * 1000.0).round() as u64)
}

impl Throughput {
    /// Reads a task's `test` (`{type, spec}`): a throughput test this
    /// agent can be the destination of, with its iperf3 server.
    pub(crate) fn read(test: &Value, max_duration: Duration) -> Result<Self, String> {
        if test.get("type").and_then(Value::as_str) != Some("throughput") {
            return Err("this participant runs throughput tests only".into());
        }
        let spec = test
            .get("spec")
            .and_then(Value::as_object)
            .ok_or("the test has no spec")?;
        if let Some(f) = spec.keys().find(|k| !SPEC_FIELDS.contains(&k.as_str())) {
            return Err(format!("iperf3 does not support the {f} option"));
        }
        let text = |f: &str| -> Result<Option<String>, String> {
            match spec.get(f) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) if s.len() <= 255 && !s.contains('\0') => Ok(Some(s.clone())),
                Some(_) => Err(format!("{f} must be a host name or address of at most 255 bytes")),
            }
        };
        let flag = |f: &str| -> Result<bool, String> {
            match spec.get(f) {
                None | Some(Value::Null) => Ok(false),
                Some(Value::Bool(b)) => Ok(*b),
                Some(_) => Err(format!("{f} must be true or false")),
            }
        };
        let max_s = max_duration.as_secs();
        let duration_ms = match spec.get("duration") {
            None => 10_000,
            Some(v) => iso_ms(v, "duration", max_s)?,
        };
        let omit_ms = match spec.get("omit") {
            None => 0,
            Some(v) => iso_ms(v, "omit", max_s)?,
        };
        let link_rtt_ms = match spec.get("link-rtt") {
            None => 200,
            Some(v) => iso_ms(v, "link-rtt", 60)?,
        };
        let parallel = match spec.get("parallel") {
            None => 1,
            Some(v) => {
                v.as_u64()
                    .filter(|p| (1..=128).contains(p))
                    .ok_or("parallel must be a whole number of streams from 1 to 128")? as u32
            }
        };
        let bandwidth = match spec.get("bandwidth") {
            None | Some(Value::Null) => None,
            Some(v) => Some(
                v.as_u64()
                    .filter(|b| *b > 0 && *b <= 1 << 50)
                    .ok_or("bandwidth must be bits per second, from 1 to 2^50")?,
            ),
        };
        if duration_ms < 1000 {
            return Err("duration must be at least 1 s".into());
        }
        Ok(Self {
            source: text("source")?,
            dest: text("dest")?.ok_or("the spec names no dest")?,
            duration_s: duration_ms / 1000,
            omit_s: omit_ms / 1000,
            link_rtt_ms,
            parallel,
            reverse: flag("reverse")?,
            udp: flag("udp")?,
            bandwidth,
        })
    }

    /// How long a run takes, as pScheduler's iperf3 tool reckons it:
    /// set-up (a second per 50 ms of round trip, at least one), omitted
    /// and measured seconds, 3 s the client waits, 2 s for the server to
    /// end, in whole seconds.
    pub(crate) fn run_ms(&self) -> u64 {
        let setup_ms = (self.link_rtt_ms * 1000 / 50).max(1000);
        let total_ms = setup_ms + (self.omit_s + self.duration_s + 5) * 1000;
        total_ms / 1000 * 1000
    }

    /// The run as goodput's iperf3 spec (what the archive's row says ran).
    pub(crate) fn as_spec(&self, lead: IpAddr, port: u16) -> TestSpec {
        TestSpec::Iperf3(Iperf3Spec {
            host: Some(self.source.clone().unwrap_or_else(|| lead.to_string())),
            port,
            time: HumanDuration(Duration::from_secs(self.duration_s)),
            omit: HumanDuration(Duration::from_secs(self.omit_s)),
            parallel: self.parallel,
            reverse: self.reverse,
            udp: self.udp,
            bitrate: self.bandwidth.map(BitRate),
            ..Iperf3Spec::default()
        })
    }
}

/// A run's phase, in pScheduler's words for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    Pending,
    Running,
    Finished,
    Failed,
}

impl Phase {
    fn name(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Running => "running",
            Self::Finished => "finished",
            Self::Failed => "failed",
        }
    }
}

/// One run of a task, booked here.
#[derive(Debug)]
pub(crate) struct PsRun {
    pub(crate) start_ms: u64,
    pub(crate) end_ms: u64,
    pub(crate) phase: Phase,
    /// This participant's result, once the slot is over.
    pub(crate) result: Option<Value>,
    /// Every participant's data, as the lead sent it.
    pub(crate) part_data_full: Option<Value>,
    /// Every participant's result, as the lead sent it.
    pub(crate) result_full: Option<Value>,
    /// Ends the run's server.
    pub(crate) cancel: CancellationToken,
}

/// A task a lead made here.
#[derive(Debug)]
pub(crate) struct PsTask {
    pub(crate) lead: IpAddr,
    pub(crate) participant: u32,
    /// The task as posted (the lead reads it back).
    pub(crate) doc: Value,
    pub(crate) test: Throughput,
    pub(crate) last_ms: u64,
    pub(crate) runs: BTreeMap<String, PsRun>,
}

/// The participant's tasks, under one lock; `done` wakes those waiting
/// for a run's result; `changed` wakes the keeper of the tasks' file.
#[derive(Default)]
pub(crate) struct PsState {
    tasks: Mutex<HashMap<String, PsTask>>,
    pub(crate) done: Notify,
    changed: Notify,
    /// Runs read from the tasks' file, to be booked again after a restart
    /// (task, lead, run).
    restore: Mutex<Vec<(String, IpAddr, KeptRun)>>,
}

/// A task as its file keeps it.
#[derive(serde::Serialize, serde::Deserialize)]
struct KeptTask {
    uuid: String,
    lead: IpAddr,
    participant: u32,
    doc: Value,
    last_ms: u64,
    /// Its runs not yet ended.
    #[serde(default)]
    runs: Vec<KeptRun>,
}

/// A run as the tasks' file keeps it.
#[derive(serde::Serialize, serde::Deserialize)]
struct KeptRun {
    uuid: String,
    start_ms: u64,
    part_data_full: Option<Value>,
}

/// The largest tasks' file read back (10,000 tasks of a few KB).
const MAX_KEPT_BYTES: u64 = 64 << 20;

/// Where the participant's tasks are kept: beside the archive.
pub(crate) fn kept_path(s: &Shared) -> std::path::PathBuf {
    let mut p = s.options.archive.clone().into_os_string();
    p.push(".pscheduler-tasks.json");
    std::path::PathBuf::from(p)
}

/// Why a request was refused, in pScheduler's answer classes.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum PsRefusal {
    /// 400: the request is wrong.
    Bad(String),
    /// 403: a limit refuses it.
    Forbidden(String),
    /// 404: no such task or run (or not this lead's).
    NotFound,
    /// 409: the slot is taken.
    Conflict(String),
    /// 422: it cannot be done here.
    CannotDo(String),
    /// 500: the archive did not take the record.
    Failed(String),
}

impl PsState {
    pub(crate) fn lock(&self) -> MutexGuard<'_, HashMap<String, PsTask>> {
        self.tasks.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The tasks an earlier run of the agent kept in `path`, each read
    /// again under today's limits; one they refuse, one not heard of for
    /// [`TASK_KEEP_MS`], or an unreadable file is dropped and logged.
    pub(crate) fn load(s: &Shared, path: &std::path::Path) -> Self {
        let st = Self::default();
        let text = match std::fs::File::open(path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return st,
            Err(e) => {
                log(&format!(
                    "pScheduler tasks: {} does not read: {e}",
                    path.display()
                ));
                return st;
            }
            Ok(f) => {
                let mut text = Vec::new();
                match std::io::Read::read_to_end(&mut std::io::Read::take(f, MAX_KEPT_BYTES + 1), &mut text) {
                    Ok(n) if n as u64 <= MAX_KEPT_BYTES => text,
                    Ok(_) => {
                        log(&format!(
                            "pScheduler tasks: {} is larger than {MAX_KEPT_BYTES} bytes; its tasks are dropped",
                            path.display()
                        ));
                        return st;
                    }
                    Err(e) => {
                        log(&format!(
                            "pScheduler tasks: {} does not read: {e}",
                            path.display()
                        ));
                        return st;
                    }
                }
            }
        };
        let kept: Vec<KeptTask> = match serde_json::from_slice(&text) {
            Ok(k) => k,
            Err(e) => {
                log(&format!(
                    "pScheduler tasks: {} is not a tasks' file ({e}); its tasks are dropped",
                    path.display()
                ));
                return st;
            }
        };
        let now = clock::now_ms();
        let mut dropped = 0usize;
        {
            let mut tasks = st.lock();
            for k in kept.into_iter().take(MAX_TASKS_ALL) {
                let test = k
                    .doc
                    .get("test")
                    .ok_or_else(|| "it has no test".to_owned())
                    .and_then(|t| Throughput::read(t, s.options.limits.max_duration));
                match test {
                    Ok(test) if now.saturating_sub(k.last_ms) < TASK_KEEP_MS && k.participant == 1 => {
                        let mut restore = st.restore.lock().unwrap_or_else(|e| e.into_inner());
                        for r in k.runs.into_iter().take(MAX_RUNS_PER_TASK) {
                            restore.push((k.uuid.clone(), k.lead, r));
                        }
                        drop(restore);
                        tasks.insert(
                            k.uuid,
                            PsTask {
                                lead: k.lead,
                                participant: k.participant,
                                doc: k.doc,
                                test,
                                last_ms: k.last_ms,
                                runs: BTreeMap::new(),
                            },
                        );
                    }
                    Ok(_) => dropped += 1,
                    Err(e) => {
                        log(&format!("pScheduler task {} of {} dropped: {e}", k.uuid, k.lead));
                        dropped += 1;
                    }
                }
            }
            if !tasks.is_empty() || dropped > 0 {
                log(&format!(
                    "pScheduler tasks: {} kept from before the restart, {dropped} dropped (expired or refused)",
                    tasks.len()
                ));
            }
        }
        st
    }

    /// Writes the tasks to `path` whole (a temporary file renamed over
    /// it, mode 0600); a failure is logged and the next change tries again.
    fn save(&self, path: &std::path::Path) {
        let kept: Vec<KeptTask> = self
            .lock()
            .iter()
            .map(|(uuid, t)| KeptTask {
                uuid: uuid.clone(),
                lead: t.lead,
                participant: t.participant,
                doc: t.doc.clone(),
                last_ms: t.last_ms,
                runs: t
                    .runs
                    .iter()
                    .filter(|(_, r)| matches!(r.phase, Phase::Pending | Phase::Running))
                    .map(|(id, r)| KeptRun {
                        uuid: id.clone(),
                        start_ms: r.start_ms,
                        part_data_full: r.part_data_full.clone(),
                    })
                    .collect(),
            })
            .collect();
        let write = || -> std::io::Result<()> {
            let text = serde_json::to_vec(&kept).map_err(std::io::Error::other)?;
            let mut tmp = path.as_os_str().to_owned();
            tmp.push(".tmp");
            let tmp = std::path::PathBuf::from(tmp);
            {
                use std::io::Write;
                use std::os::unix::fs::OpenOptionsExt;
                let mut f = std::fs::OpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(true)
                    .mode(0o600)
                    .open(&tmp)?;
                f.write_all(&text)?;
                f.sync_all()?;
            }
            std::fs::rename(&tmp, path)
        };
        if let Err(e) = write() {
            log(&format!("pScheduler tasks: {} not written: {e}", path.display()));
        }
    }

    /// After a restart: books again each kept run whose slot is still to
    /// come (under the limits, as the lead's booking was), with the
    /// participant data the lead gave it; one that can no longer be
    /// booked is kept as missed, with the reason.
    pub(crate) async fn restore_runs(self: Arc<Self>, shared: Arc<Shared>, ps: PsOptions) {
        let runs = std::mem::take(&mut *self.restore.lock().unwrap_or_else(|e| e.into_inner()));
        let (mut again, mut lost) = (0usize, 0usize);
        for (task, lead, r) in runs {
            let id = format!("pscheduler/{task}/{}", r.uuid);
            match book_run(&shared, &self, &ps, &task, &r.uuid, lead, r.start_ms).await {
                Ok(_) => {
                    again += 1;
                    let _ = self.owned(&task, lead, |t| {
                        if let Some(run) = t.runs.get_mut(&r.uuid) {
                            run.part_data_full = r.part_data_full;
                        }
                    });
                }
                Err(e) => {
                    lost += 1;
                    let why = format!("the agent restarted and could not book it again: {e:?}");
                    for from in [RunState::Scheduled, RunState::Missed] {
                        let _ = shared.archive.mark_if(&id, from, RunState::Missed, &why).await;
                    }
                }
            }
        }
        if again + lost > 0 {
            log(&format!(
                "pScheduler runs kept from before the restart: {again} booked again, {lost} could not be"
            ));
        }
    }

    /// Keeps the tasks' file: written a second after a change (changes
    /// within it written together), until the agent stops, and once more
    /// then.
    pub(crate) async fn keep(self: Arc<Self>, path: std::path::PathBuf, cancel: CancellationToken) {
        loop {
            tokio::select! {
                _ = cancel.cancelled() => break,
                _ = self.changed.notified() => {}
            }
            tokio::select! {
                _ = cancel.cancelled() => {}
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
            let (st, p) = (self.clone(), path.clone());
            let _ = tokio::task::spawn_blocking(move || st.save(&p)).await;
        }
        self.save(&path);
    }

    /// Takes the task `uuid` the lead at `lead` posts as participant
    /// `participant`; the same task posted again replaces nothing.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn add_task(
        &self,
        s: &Shared,
        ps: &PsOptions,
        uuid: &str,
        lead: IpAddr,
        participant: u32,
        doc: Value,
        others: usize,
    ) -> Result<(), PsRefusal> {
        if participant != 1 {
            return Err(PsRefusal::CannotDo(format!(
                "this participant is only a throughput test's destination (participant 1), not participant {participant}"
            )));
        }
        let test_doc = doc
            .get("test")
            .ok_or_else(|| PsRefusal::Bad("the task has no test".into()))?;
        let test = Throughput::read(test_doc, s.options.limits.max_duration).map_err(|e| {
            if e.starts_with("limit ") {
                PsRefusal::Forbidden(format!("Task forbidden by limits:\n{e}"))
            } else {
                PsRefusal::Bad(format!("Invalid test specification: {e}"))
            }
        })?;
        if let Some(t) = doc.get("tool").and_then(Value::as_str) {
            if t != "iperf3" {
                return Err(PsRefusal::CannotDo(format!(
                    "this participant runs the iperf3 tool only, not {t}"
                )));
            }
        }
        let spec = test.as_spec(lead, ps.iperf3_port);
        s.options
            .limits
            .check_bitrate(&spec)
            .map_err(|e| PsRefusal::Forbidden(format!("Task forbidden by limits:\n{e}")))?;
        let now = clock::now_ms();
        let mut tasks = self.lock();
        if tasks.contains_key(uuid) {
            return Ok(());
        }
        tasks.retain(|_, t| !t.runs.is_empty() || now.saturating_sub(t.last_ms) < TASK_KEEP_MS);
        // With the tasks it asked this agent to lead.
        let mine = tasks.values().filter(|t| t.lead == lead).count() + others;
        if mine >= ps.max_tasks {
            return Err(PsRefusal::Forbidden(format!(
                "Task forbidden by limits:\nlimit pscheduler_max_tasks: {lead} keeps {mine} tasks here, {} allowed",
                ps.max_tasks
            )));
        }
        if tasks.len() >= MAX_TASKS_ALL {
            return Err(PsRefusal::Forbidden(format!(
                "Task forbidden by limits:\nlimit pscheduler_tasks: {MAX_TASKS_ALL} tasks are kept here"
            )));
        }
        tasks.insert(
            uuid.to_owned(),
            PsTask {
                lead,
                participant,
                doc,
                test,
                last_ms: now,
                runs: BTreeMap::new(),
            },
        );
        drop(tasks);
        self.changed.notify_one();
        Ok(())
    }

    /// Free time for the task's runs in `[from, to)`: the calendar's gaps
    /// an exclusive run fits in, from now on.
    pub(crate) fn runtimes(
        &self,
        s: &Shared,
        uuid: &str,
        lead: IpAddr,
        from: u64,
        to: u64,
    ) -> Result<Vec<(u64, u64)>, PsRefusal> {
        self.owned(uuid, lead, |_| ())?;
        let now = clock::now_ms();
        let from = from.max(now);
        let to = to.min(now.saturating_add(HORIZON_MS));
        if to <= from {
            return Ok(Vec::new());
        }
        Ok(s.lock().book.calendar.free(from, to, RunClass::Exclusive))
    }

    /// The tasks the lead at `lead` keeps here.
    pub(crate) fn count_of(&self, lead: IpAddr) -> usize {
        self.lock().values().filter(|t| t.lead == lead).count()
    }

    /// Runs `f` on the task `uuid` if the lead at `lead` made it.
    pub(crate) fn owned<R>(
        &self,
        uuid: &str,
        lead: IpAddr,
        f: impl FnOnce(&mut PsTask) -> R,
    ) -> Result<R, PsRefusal> {
        let mut tasks = self.lock();
        match tasks.get_mut(uuid) {
            Some(t) if t.lead == lead => Ok(f(t)),
            _ => Err(PsRefusal::NotFound),
        }
    }

    /// Cancels the task and its runs.
    pub(crate) fn remove_task(&self, uuid: &str, lead: IpAddr) -> Result<(), PsRefusal> {
        let mut tasks = self.lock();
        match tasks.get(uuid) {
            Some(t) if t.lead == lead => {
                for r in t.runs.values() {
                    r.cancel.cancel();
                }
                // Each run's own task sees the cancel, ends its server
                // (or never starts it) and releases the booking.
                tasks.remove(uuid);
                drop(tasks);
                self.changed.notify_one();
                Ok(())
            }
            _ => Err(PsRefusal::NotFound),
        }
    }

    /// Cancels one run.
    pub(crate) fn remove_run(&self, uuid: &str, run: &str, lead: IpAddr) -> Result<(), PsRefusal> {
        self.owned(uuid, lead, |t| match t.runs.remove(run) {
            Some(r) => {
                r.cancel.cancel();
                Ok(())
            }
            None => Err(PsRefusal::NotFound),
        })?
    }

    /// A run's document as pScheduler's API shows it to the lead.
    pub(crate) fn run_view(
        &self,
        uuid: &str,
        run: &str,
        lead: IpAddr,
        port: u16,
    ) -> Result<Value, PsRefusal> {
        self.owned(uuid, lead, |t| {
            let r = t.runs.get(run).ok_or(PsRefusal::NotFound)?;
            let participants = t.doc.get("participants").cloned().unwrap_or(Value::Null);
            Ok(json!({
                "start-time": iso(r.start_ms),
                "end-time": iso(r.end_ms),
                "duration": goodput_archive::pscheduler_out::iso_duration((r.end_ms - r.start_ms) as f64 / 1000.0),
                "participant": t.participant,
                "participants": participants,
                "participant-data": participant_data(port),
                "participant-data-full": r.part_data_full,
                "result": r.result,
                "result-full": r.result_full,
                "result-merged": Value::Null,
                "state": r.phase.name(),
                "state-display": r.phase.name(),
                "errors": Value::Null,
                "priority": Value::Null,
            }))
        })?
    }
}

/// An ISO 8601 time as pScheduler writes one (offset `+00:00`).
pub(crate) fn iso(ms: u64) -> String {
    let t = ms_rfc3339(ms);
    match t.strip_suffix('Z') {
        Some(base) => format!("{base}+00:00"),
        None => t,
    }
}

/// What the destination tells the lead about its part: the port its
/// iperf3 server will listen on. No `_auth`: the run's server takes only
/// clients from the lead's or the test's source address ([`clients`]),
/// and pScheduler's client then asks for no credentials.
pub(crate) fn participant_data(port: u16) -> Value {
    json!({ "schema": 1, "server_port": port })
}

/// Books run `run` of task `uuid` at `start_ms` for the lead at `lead`:
/// an exclusive booking on the agent's calendar under the limits a peer
/// agent's bookings meet (held runs, windows, quotas), stored before its
/// server is started for its slot.
pub(crate) async fn book_run(
    shared: &Arc<Shared>,
    ps_state: &Arc<PsState>,
    ps: &PsOptions,
    uuid: &str,
    run: &str,
    lead: IpAddr,
    start_ms: u64,
) -> Result<bool, PsRefusal> {
    let now = clock::now_ms();
    let (test, runs) = ps_state.owned(uuid, lead, |t| (t.test.clone(), t.runs.len()))?;
    if ps_state.owned(uuid, lead, |t| t.runs.contains_key(run))? {
        return Ok(false);
    }
    if runs >= MAX_RUNS_PER_TASK {
        return Err(PsRefusal::Forbidden(format!(
            "Run forbidden by limits:\nlimit pscheduler_runs_per_task: task {uuid} has {runs} runs booked, {MAX_RUNS_PER_TASK} allowed"
        )));
    }
    let end_ms = start_ms.saturating_add(test.run_ms());
    if end_ms <= now || start_ms > now.saturating_add(HORIZON_MS) {
        return Err(PsRefusal::Bad(format!(
            "the run's slot {}–{} must not be over and must start within 7 days",
            iso(start_ms),
            iso(end_ms)
        )));
    }
    let loaded = shared.loaded();
    let here = loaded.mine.first().cloned().unwrap_or_else(|| test.dest.clone());
    let spec = test.as_spec(lead, ps.iperf3_port);
    let wanted = Wanted {
        id: format!("pscheduler/{uuid}/{run}"),
        task: format!("pscheduler/{uuid}"),
        source: test.source.clone().unwrap_or_else(|| lead.to_string()),
        dest: Some(here),
        spec,
        class: RunClass::Exclusive,
        scheduled_ms: start_ms,
        runs_here: false,
        peer: None,
    };
    let mut b = Booked::new(wanted, start_ms, end_ms, BookedBy::Peer(lead));
    b.booked_by = format!("pScheduler lead {}", lead.to_canonical());
    hold(shared, &b, lead, RunClass::Exclusive, now).await?;
    let cancel = shared.cancel.child_token();
    let added = ps_state.owned(uuid, lead, |t| {
        t.last_ms = now;
        t.runs.insert(
            run.to_owned(),
            PsRun {
                start_ms,
                end_ms,
                phase: Phase::Pending,
                result: None,
                part_data_full: None,
                result_full: None,
                cancel: cancel.clone(),
            },
        );
    });
    if added.is_err() {
        // The task was cancelled meanwhile.
        shared.unbook(&b.id);
        return Err(PsRefusal::NotFound);
    }
    ps_state.changed.notify_one();
    tokio::spawn(serve_run(
        shared.clone(),
        ps_state.clone(),
        (uuid.to_owned(), run.to_owned()),
        b,
        ps.iperf3_port,
        cancel,
    ));
    Ok(true)
}

/// Puts a run a pScheduler host asked for (`who`: a lead whose task this
/// agent takes part in, or a client whose task it leads) on the calendar
/// under the limits a peer's booking meets: the runs held for others,
/// the time windows and quotas of `who`, the calendar's slots. The run is
/// stored as scheduled before it counts; a refusal names the limit in
/// pScheduler's words.
pub(crate) async fn hold(
    shared: &Arc<Shared>,
    b: &Booked,
    who: IpAddr,
    class: RunClass,
    now: u64,
) -> Result<(), PsRefusal> {
    let (start, end) = (b.start_ms, b.end_ms);
    {
        let mut inner = shared.lock();
        let ours = BookedBy::ThisAgent.to_string();
        let held = inner.book.booked.values().filter(|b| b.booked_by != ours).count();
        let limits = shared.options.limits.clone();
        if held >= limits.max_held {
            inner.counters.refused += 1;
            return Err(PsRefusal::Forbidden(format!(
                "Run forbidden by limits:\nlimit max_held: this agent holds {held} runs booked by others"
            )));
        }
        let who = who.to_canonical();
        if let Err(e) = limits.check_window(who, start, end, class).and_then(|()| {
            inner
                .quotas
                .take(&limits, (who, Bucket::Mesh), now, class, end - start)
        }) {
            inner.counters.refused += 1;
            return Err(PsRefusal::Forbidden(format!("Run forbidden by limits:\n{e}")));
        }
        if let Err(x) = inner.book.calendar.book(b.booking()) {
            let id = inner.run_name(x.run);
            return Err(PsRefusal::Conflict(format!(
                "Request would create a conflict: busy with run {id} until {}",
                iso(x.end)
            )));
        }
        inner.book.booked.insert(b.number, b.clone());
        inner.counters.booked_by_peers += 1;
    }
    if let Err(why) = shared.store_now(&[b.record(RunState::Scheduled, None)]).await {
        shared.unbook(&b.id);
        return Err(PsRefusal::Failed(why));
    }
    Ok(())
}

/// Keeps the result of the run's test. A connection that is no test (a
/// port scan, a client that gives up before its parameters) does not end
/// the server: its failure is kept only until a test succeeds, and the
/// first test that does ends the server, as `iperf3 -s -1` would.
struct Outcome {
    result: Option<TestResult>,
    stop: CancellationToken,
}

fn iperf3_error(r: &TestResult) -> Option<&str> {
    r.iperf3().and_then(|d| d.error.as_deref())
}

impl goodput_engine::Observer for Outcome {
    fn on_interval(&mut self, _: &goodput_core::result::Interval) {}
    fn on_connection(&mut self, _: &goodput_core::result::ConnectionRecord) {}
    fn on_result(&mut self, r: &TestResult) {
        if iperf3_error(r).is_none() {
            self.result = Some(r.clone());
            self.stop.cancel();
        } else if self.result.is_none() {
            self.result = Some(r.clone());
        }
    }
}

/// One run's slot: its iperf3 server from just before the start, for one
/// test, until the slot's end (or the run's cancel); then the result kept
/// for the lead and stored, and the booking released. The server is a
/// value of this task: whatever ends the task closes its port.
async fn serve_run(
    shared: Arc<Shared>,
    ps_state: Arc<PsState>,
    (task, run): (String, String),
    b: Booked,
    port: u16,
    cancel: CancellationToken,
) {
    let up_at = b.start_ms.saturating_sub(SERVER_LEAD_MS);
    let wait = Duration::from_millis(up_at.saturating_sub(clock::now_ms()));
    let cancelled_early = tokio::select! {
        _ = cancel.cancelled() => true,
        _ = tokio::time::sleep(wait) => false,
    };
    let (record, result) = if cancelled_early {
        // Its cancel is the agent's stop too.
        let r = if shared.cancel.is_cancelled() {
            // Booked again when the agent starts, if its slot is to come.
            b.record(RunState::Missed, Some("the agent stopped before it".into()))
        } else {
            b.record(
                RunState::Cancelled,
                Some("the pScheduler lead cancelled the run".into()),
            )
        };
        let mut r = r;
        r.start_ms = None;
        r.end_ms = None;
        (r, None)
    } else {
        let _ = ps_state.owned(&task, lead_of(&ps_state, &task), |t| {
            if let Some(r) = t.runs.get_mut(&run) {
                r.phase = Phase::Running;
            }
        });
        let start = clock::now_ms();
        let (test_s, omit_s) = if let TestSpec::Iperf3(s) = &b.spec {
            (s.time.0, s.omit.0)
        } else {
            (Duration::from_secs(10), Duration::ZERO)
        };
        let spec = goodput_engine::iperf3::Iperf3ServerSpec {
            listen: SocketAddr::new(std::net::Ipv6Addr::UNSPECIFIED.into(), port),
            max_duration: test_s + omit_s + Duration::from_secs(1),
            timeout: Duration::from_secs(10),
            status_interval: Duration::from_secs(1),
            max_records: 200,
            exit_after: None,
            allow: clients(&ps_state, &task).await,
        };
        match goodput_engine::iperf3::bind_server(spec) {
            Err(e) => {
                let why = format!("cannot listen for the run's iperf3 client on TCP port {port}: {e}");
                log(&format!("pScheduler run {run}: {why}"));
                let mut r = b.record(RunState::Failed, Some(why));
                r.start_ms = Some(start);
                r.end_ms = Some(clock::now_ms());
                (r, None)
            }
            Ok(server) => {
                let slot_end = Duration::from_millis(b.end_ms.saturating_sub(start));
                let stop = cancel.child_token();
                let mut outcome = Outcome {
                    result: None,
                    stop: stop.clone(),
                };
                let cut = tokio::select! {
                    _ = server.run(&mut outcome, stop.clone()) => false,
                    _ = tokio::time::sleep(slot_end) => { stop.cancel(); true }
                };
                let end = clock::now_ms();
                let stopping = shared.cancel.is_cancelled();
                // A test that failed (a client that gave up) is the run's
                // result only when the lead did not cancel the run.
                let failed_try = outcome.result.as_ref().and_then(iperf3_error).map(str::to_owned);
                match outcome.result {
                    Some(result) if failed_try.is_none() || !(stopping || cancel.is_cancelled()) => {
                        let mut r = Shared::finished(&b, &result, start, end, cut, stopping);
                        // The server's figures are this end's (what it
                        // received is "down" to it); the row's source is
                        // the lead's client, so up is source → here.
                        std::mem::swap(
                            &mut r.figures.throughput_up_bps,
                            &mut r.figures.throughput_down_bps,
                        );
                        if let (Some(e), RunState::Finished) = (failed_try, r.state) {
                            r.state = RunState::Failed;
                            r.reason = Some(format!("the iperf3 test failed: {e}"));
                        }
                        (r, Some(result))
                    }
                    _ => {
                        let (state, why) = if stopping {
                            (RunState::Cancelled, "the agent stopped".to_owned())
                        } else if cancel.is_cancelled() {
                            (
                                RunState::Cancelled,
                                "the pScheduler lead cancelled the run".to_owned(),
                            )
                        } else {
                            (
                                RunState::Failed,
                                format!("no iperf3 client came during the slot (until {})", iso(b.end_ms)),
                            )
                        };
                        let mut r = b.record(state, Some(why));
                        r.start_ms = Some(start);
                        r.end_ms = Some(end);
                        (r, None)
                    }
                }
            }
        }
    };
    // The server and its port are gone: the slot is free again.
    {
        let mut inner = shared.lock();
        inner.book.calendar.release(b.number);
        inner.book.booked.remove(&b.number);
    }
    // A run the agent's stop ended before it started stays pending in
    // the tasks' file, to be booked again at the next start.
    let kept_for_restart = record.state == RunState::Missed && shared.cancel.is_cancelled();
    let ps_result = pscheduler_result(&record, result.as_ref());
    let lead = lead_of(&ps_state, &task);
    let _ = (!kept_for_restart).then(|| {
        ps_state.owned(&task, lead, |t| {
            t.last_ms = clock::now_ms();
            if let Some(r) = t.runs.get_mut(&run) {
                r.phase = if record.state == RunState::Finished {
                    Phase::Finished
                } else {
                    Phase::Failed
                };
                r.result = Some(ps_result);
            }
            // Ended runs are kept a while for the lead to read, then dropped.
            let now = clock::now_ms();
            t.runs
                .retain(|_, r| r.result.is_none() || now.saturating_sub(r.end_ms) < 3_600_000);
        })
    });
    ps_state.done.notify_waiters();
    ps_state.changed.notify_one();
    shared.store(std::slice::from_ref(&record)).await;
    shared.note_latest(&record);
}

/// The addresses the run's iperf3 client may come from: the lead's, and
/// the test's `source` and `local-address` (pScheduler's client binds to
/// one of them), a name among them looked up (for at most 5 s). Anyone
/// else who reaches the port during the slot is refused.
async fn clients(ps_state: &PsState, task: &str) -> Vec<IpAddr> {
    let (lead, named) = {
        let tasks = ps_state.lock();
        let Some(t) = tasks.get(task) else {
            return vec![IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED)];
        };
        let spec = t.doc.pointer("/test/spec");
        let named: Vec<String> = ["source", "local-address"]
            .iter()
            .filter_map(|f| spec.and_then(|s| s.get(*f)).and_then(Value::as_str))
            .map(str::to_owned)
            .collect();
        (t.lead, named)
    };
    let mut allow = vec![lead];
    for name in named {
        match name.parse::<IpAddr>() {
            Ok(ip) => allow.push(ip),
            Err(_) => {
                let found = tokio::time::timeout(
                    Duration::from_secs(5),
                    tokio::net::lookup_host((name.as_str(), 0)),
                )
                .await;
                match found {
                    Ok(Ok(addrs)) => allow.extend(addrs.map(|a| a.ip())),
                    _ => log(&format!(
                        "pScheduler task {task}: {name} did not resolve; only the lead's address may run its test"
                    )),
                }
            }
        }
    }
    allow
}

/// The lead that owns `task` (any address when it is gone).
fn lead_of(ps_state: &PsState, task: &str) -> IpAddr {
    ps_state
        .lock()
        .get(task)
        .map_or(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), |t| t.lead)
}

/// This participant's result in pScheduler's throughput result format
/// (what its iperf3 tool's server side reports): the receiver's bits/s
/// over the test and the bytes, or why it failed.
pub(crate) fn pscheduler_result(record: &goodput_archive::Run, result: Option<&TestResult>) -> Value {
    let Some(r) = result.filter(|_| record.state == RunState::Finished) else {
        let why = record.reason.clone().unwrap_or_else(|| "the run failed".into());
        return json!({ "schema": 1, "succeeded": false, "error": why, "diags": why });
    };
    let f = goodput_archive::figures_of(r);
    let seconds = r.summary.duration_s.max(0.0);
    // The direction that carried data: the client's upload, or the
    // server's own sending in a reverse test.
    let bps = f.throughput_up_bps.or(f.throughput_down_bps).unwrap_or(0.0);
    let bps = if bps.is_finite() { bps.max(0.0) } else { 0.0 };
    let mut sum = serde_json::Map::new();
    sum.insert("start".into(), json!(0.0));
    sum.insert("end".into(), json!(seconds));
    sum.insert("throughput-bits".into(), json!(bps));
    sum.insert("throughput-bytes".into(), json!((bps / 8.0 * seconds).round()));
    json!({
        "schema": 1,
        "succeeded": true,
        "intervals": [],
        "summary": { "streams": [], "summary": Value::Object(sum) },
        "diags": format!("goodput agent's iperf3 server: {bps:.0} bit/s over {seconds:.3} s"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn test(spec: Value) -> Value {
        json!({ "type": "throughput", "spec": spec })
    }

    #[test]
    fn a_throughput_spec_reads_with_pschedulers_defaults_and_length() {
        let t = Throughput::read(
            &test(json!({"schema": 1, "source": "10.40.0.1", "dest": "10.40.0.2", "duration": "PT5S"})),
            Duration::from_secs(3600),
        )
        .unwrap();
        assert_eq!(t.duration_s, 5);
        assert_eq!(t.parallel, 1);
        // 4 s of set-up at the default 200 ms round trip, 5 s, 3 + 2 s.
        assert_eq!(t.run_ms(), 14_000);
        let t = Throughput::read(&test(json!({"dest": "x"})), Duration::from_secs(3600)).unwrap();
        assert_eq!(t.run_ms(), 19_000);
    }

    #[test]
    fn absurd_or_unknown_spec_fields_are_refused_with_the_field_named() {
        let max = Duration::from_secs(3600);
        let e = Throughput::read(&test(json!({"dest": "x", "duration": "P400D"})), max).unwrap_err();
        assert_eq!(
            e,
            "limit max_duration: duration is 34560000 s, more than the 3600 s this agent accepts"
        );
        let e = Throughput::read(&test(json!({"dest": "x", "parallel": 100000})), max).unwrap_err();
        assert!(e.contains("parallel"), "{e}");
        let e = Throughput::read(&test(json!({"dest": "x", "single-ended": true})), max).unwrap_err();
        assert!(e.contains("single-ended"), "{e}");
        let e = Throughput::read(&test(json!({"dest": "x", "duration": "PT1.5"})), max).unwrap_err();
        assert!(e.contains("duration"), "{e}");
        let e = Throughput::read(&json!({"type": "latency", "spec": {}}), max).unwrap_err();
        assert!(e.contains("throughput tests only"), "{e}");
    }

    #[test]
    fn times_are_written_with_an_offset() {
        assert_eq!(iso(1_795_800_240_000), "2026-11-27T17:24:00.000+00:00");
    }
}
