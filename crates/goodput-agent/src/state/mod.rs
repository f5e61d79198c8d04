//! What the agent's parts share: the configuration in force, the calendar
//! of booked runs, the runs booked but not yet ended, quotas, and the
//! latest figures per measurement. One lock, never held across an await.

pub(crate) mod alerts;
pub(crate) mod booking;
pub(crate) mod config;
pub(crate) mod exec;
pub(crate) mod fleet;
pub(crate) mod forward;
pub(crate) mod minutes;
pub(crate) mod options;
pub(crate) mod peer;
pub(crate) mod pscheduler;
pub(crate) mod pscheduler_single;
pub(crate) mod speedtest;

use booking::{Book, Booked};

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use goodput_archive::{figures_of, Archive, Figures, Run, RunState};
use goodput_core::result::TestResult;
use serde::Serialize;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::clock;
use crate::limits::{Quotas, Writes};
use crate::log::log;
use crate::state::config::{Loaded, Peer};
use crate::state::options::AgentOptions;

/// A run's number on the calendars: FNV-1a of its id.
pub(crate) fn run_number(id: &str) -> u64 {
    goodput_core::hash::fnv1a(id.as_bytes())
}

/// The latest figures of one measurement.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Latest {
    pub(crate) task: String,
    pub(crate) source: String,
    pub(crate) dest: String,
    pub(crate) kind: String,
    pub(crate) at_ms: u64,
    pub(crate) figures: Figures,
}

/// Most measurements whose latest figures `/metrics` shows.
const MAX_LATEST: usize = 10_000;

/// Counts since start.
#[derive(Debug, Clone, Copy, Default, Serialize, schemars::JsonSchema)]
pub(crate) struct Counters {
    /// Runs this agent booked.
    pub(crate) booked: u64,
    /// Runs peers booked here.
    pub(crate) booked_by_peers: u64,
    /// Runs that did not start.
    pub(crate) non_starts: u64,
    /// Requests refused by a limit (every refusal below counts here too).
    pub(crate) refused: u64,
    /// Writes refused because the caller is not the run's (or the
    /// booking's, or the registration's) owner: not the configured
    /// address of its other end, or a record that is this agent's own.
    pub(crate) refused_not_owner: u64,
    /// Records refused for a figure or a time out of range.
    pub(crate) refused_out_of_range: u64,
    /// Writes refused by a requester's write quota.
    pub(crate) refused_write_quota: u64,
    /// On-demand specs refused for a port that is not a test service's
    /// or for naming a file.
    pub(crate) refused_spec: u64,
    /// Results peers could not be sent.
    pub(crate) results_undelivered: u64,
    /// Runs stored from agents' forwarded batches (a fleet's archive).
    pub(crate) ingested: u64,
    /// Forwarded runs or batches refused as malformed.
    pub(crate) ingest_refused: u64,
    /// perfSONAR pScheduler results stored (a fleet's archive).
    pub(crate) pscheduler_ingested: u64,
    /// perfSONAR pScheduler results refused, each with its reason.
    pub(crate) pscheduler_refused: u64,
    /// Mesh documents served at /api/v1/fleet/config, and of those asks
    /// the ones answered 304 (the asker had this version).
    pub(crate) config_served: u64,
    pub(crate) config_not_modified: u64,
}

pub(crate) struct Inner {
    pub(crate) loaded: Arc<Loaded>,
    pub(crate) config_error: Option<(u64, String)>,
    /// The calendar and the runs on it (booking's state).
    pub(crate) book: Book,
    pub(crate) quotas: Quotas,
    /// Each requester's write quotas.
    pub(crate) writes: Writes,
    pub(crate) running: usize,
    /// Background runs under way (they have slots of their own,
    /// `max_background`, and take none of `max_running`'s).
    pub(crate) running_background: usize,
    /// The runs under way, by number: what cuts one short, and why it
    /// was cut (set by [`Shared::cut_run`]).
    pub(crate) cuts: HashMap<u64, (CancellationToken, Option<String>)>,
    pub(crate) latest: BTreeMap<String, Latest>,
    pub(crate) counters: Counters,
    pub(crate) beacon_error: Option<String>,
}

impl Inner {
    /// A booked or tentative run's id, by its number.
    pub(crate) fn run_name(&self, number: u64) -> String {
        self.book.run_name(number)
    }
}

/// Everything the agent's parts share.
pub(crate) struct Shared {
    pub(crate) options: AgentOptions,
    pub(crate) archive: Archive,
    pub(crate) cancel: CancellationToken,
    pub(crate) started_ms: u64,
    /// The configuration in force at start: the API listens where it
    /// said until a restart.
    pub(crate) started_with: Arc<Loaded>,
    /// HTTP clients for peers: from this host's IPv4 mesh address, its
    /// IPv6 one, and unbound (for peers named by host name).
    http: [reqwest::Client; 3],
    /// The same for pinned HTTPS peers, by family and pin.
    pinned: Mutex<HashMap<(usize, [u8; 32]), reqwest::Client>>,
    /// This host's own mesh addresses, one per family.
    own: [Option<std::net::IpAddr>; 2],
    /// Wakes the executor when a run is booked.
    pub(crate) wake: Notify,
    /// Wakes the alerts' deliverer when something is queued.
    pub(crate) wake_delivery: Notify,
    /// Wakes the forwarders when a run is queued for them.
    pub(crate) wake_forward: Notify,
    /// Each forwarding target's counters, by URL.
    forwarding: Mutex<BTreeMap<String, crate::state::forward::ForwardStatus>>,
    /// Counts configurations put in force (the forwarders and the
    /// registrar watch it for the mesh's `archives`).
    pub(crate) installed: tokio::sync::watch::Sender<u64>,
    inner: Mutex<Inner>,
    alerting: Mutex<crate::state::alerts::AlertState>,
    /// Whether the archive takes writes, and this agent's own runs it
    /// could not store yet.
    unstored: Mutex<Unstored>,
    /// Taken by each store of this agent's own runs, so that runs held
    /// in memory are written back in the order they were given.
    store_turn: tokio::sync::Mutex<()>,
    /// The background STAMP streams' sessions, all on a few shared
    /// sockets (opened by the first stream).
    pub(crate) stamp_hub: Arc<goodput_engine::stamp::StampHub>,
    /// Those told of a stream's summaries as they are stored, by the
    /// run's id (a pScheduler `latencybg` task's run: each summary is a
    /// run of that task).
    taps: Mutex<HashMap<String, tokio::sync::mpsc::Sender<Box<Run>>>>,
}

/// Summaries a tap holds before more are dropped (counted): a stream
/// gives one every few seconds at most.
pub(crate) const TAP_QUEUE: usize = 64;

/// Most runs of its own an agent holds in memory while its archive
/// cannot take them, and most bytes of their documents: past either, the
/// oldest held go (logged).
const MAX_UNSTORED_RUNS: usize = 10_000;
const MAX_UNSTORED_BYTES: usize = 64 << 20;

/// The archive's writes: whether they fail (and why), and the runs of
/// this agent's own that are held until they go through, oldest first.
#[derive(Default)]
struct Unstored {
    /// Since when writes fail (ms), why, and whether for want of space.
    failing: Option<(u64, String, bool)>,
    /// Held runs by the order they came in; a later record of a run
    /// replaces its earlier one.
    runs: BTreeMap<u64, (Run, usize)>,
    order: HashMap<String, u64>,
    next: u64,
    bytes: usize,
    /// Held runs given up for room since start.
    dropped: u64,
}

impl Unstored {
    /// Holds a run (replacing an earlier record of it); the oldest held
    /// past the bounds go. The ids of those that went.
    fn hold(&mut self, run: &Run) -> Vec<String> {
        self.forget(&run.id);
        let bytes = run.spec.to_string().len() + run.result.as_ref().map_or(0, |r| r.to_string().len()) + 512;
        self.next += 1;
        self.order.insert(run.id.clone(), self.next);
        self.runs.insert(self.next, (run.clone(), bytes));
        self.bytes += bytes;
        let mut gone = Vec::new();
        while self.runs.len() > MAX_UNSTORED_RUNS || self.bytes > MAX_UNSTORED_BYTES {
            let Some((_, (run, b))) = self.runs.pop_first() else {
                break;
            };
            self.order.remove(&run.id);
            self.bytes -= b;
            self.dropped += 1;
            gone.push(run.id);
        }
        gone
    }

    /// Forgets held runs that were stored as they are held (or
    /// superseded by a later record stored).
    fn stored(&mut self, runs: &[Run], superseding: &[Run]) {
        for r in runs {
            let Some(&n) = self.order.get(&r.id) else {
                continue;
            };
            if self.runs.get(&n).is_some_and(|(held, _)| held == r) {
                self.forget(&r.id);
            }
        }
        for r in superseding {
            self.forget(&r.id);
        }
    }

    fn forget(&mut self, id: &str) -> Option<Run> {
        let n = self.order.remove(id)?;
        let (run, b) = self.runs.remove(&n)?;
        self.bytes -= b;
        Some(run)
    }
}

/// Why a write to the archive failed, as the API says it.
pub(crate) fn store_failure(e: &goodput_archive::ArchiveError) -> String {
    if e.is_disk_full() {
        format!(
            "the archive's disk is full: nothing was stored ({e}); writes are taken again \
             by themselves once there is room"
        )
    } else {
        format!("the archive's database failed: nothing was stored ({e})")
    }
}

/// An HTTP client for peers, from `from`, checking a pinned certificate.
fn client(from: Option<std::net::IpAddr>, pin: Option<[u8; 32]>) -> reqwest::Client {
    let mut b = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(2))
        .timeout(Duration::from_secs(5))
        .local_address(from);
    if let Some(pin) = pin {
        b = b.use_preconfigured_tls(crate::tls::pinned_client_config(pin));
    }
    b.build().unwrap_or_default()
}

/// The key of a led pair's run counter.
pub(crate) fn pair_key(task: &str, source: &str, dest: Option<&str>) -> String {
    format!("{task}/{source}/{}", dest.unwrap_or("-"))
}

impl Shared {
    pub(crate) fn new(
        options: AgentOptions,
        archive: Archive,
        loaded: Loaded,
        cancel: CancellationToken,
    ) -> Self {
        // Calls to peers come from this host's mesh address of the peer's
        // family, so their allow lists, quotas and windows see the address
        // they know.
        let own: Vec<std::net::IpAddr> = loaded.mine.iter().flat_map(|m| loaded.ips_of(m)).collect();
        let own = [
            own.iter().find(|i| i.is_ipv4()).copied(),
            own.iter().find(|i| i.is_ipv6()).copied(),
        ];
        let http = [client(own[0], None), client(own[1], None), client(None, None)];
        let loaded = Arc::new(loaded);
        Self {
            options,
            archive,
            cancel,
            started_ms: clock::now_ms(),
            started_with: loaded.clone(),
            http,
            pinned: Mutex::new(HashMap::new()),
            own,
            wake: Notify::new(),
            wake_delivery: Notify::new(),
            wake_forward: Notify::new(),
            forwarding: Mutex::new(BTreeMap::new()),
            installed: tokio::sync::watch::Sender::new(0),
            alerting: Mutex::new(crate::state::alerts::AlertState::default()),
            unstored: Mutex::new(Unstored::default()),
            store_turn: tokio::sync::Mutex::new(()),
            stamp_hub: Arc::new(goodput_engine::stamp::StampHub::new()),
            taps: Mutex::new(HashMap::new()),
            inner: Mutex::new(Inner {
                loaded,
                config_error: None,
                book: Book::default(),
                quotas: Quotas::default(),
                writes: Writes::default(),
                running: 0,
                running_background: 0,
                cuts: HashMap::new(),
                latest: BTreeMap::new(),
                counters: Counters::default(),
                beacon_error: None,
            }),
        }
    }

    /// The shared state, locked (a panic elsewhere never poisons it for
    /// good: the data is still consistent at every unlock).
    pub(crate) fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The alerting state, locked (never across an await).
    pub(crate) fn alerting(&self) -> MutexGuard<'_, crate::state::alerts::AlertState> {
        self.alerting.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The HTTP client for calls to a peer.
    pub(crate) fn client(&self, peer: &Peer) -> reqwest::Client {
        let host = peer
            .url
            .split_once("://")
            .map_or(peer.url.as_str(), |(_, r)| r)
            .rsplit_once(':')
            .map_or("", |(h, _)| h)
            .trim_start_matches('[')
            .trim_end_matches(']');
        let family = match host.parse::<std::net::IpAddr>() {
            Ok(ip) if ip.is_ipv4() => 0,
            Ok(_) => 1,
            Err(_) => 2,
        };
        self.family_client(family, peer.pin)
    }

    /// The HTTP client for calls to `url` (a fleet archive's), from this
    /// host's mesh address of the family it reaches: an IP literal's, or
    /// for a host name the first family among its addresses (looked up
    /// within 2 s) of which this host has a mesh address (the connection
    /// then goes only to the name's addresses of that family). A name
    /// that does not resolve: as the system routes it.
    pub(crate) async fn client_to(&self, url: &str, pin: Option<[u8; 32]>) -> reqwest::Client {
        let host = reqwest::Url::parse(url).ok().and_then(|u| {
            u.host_str()
                .map(|h| h.trim_start_matches('[').trim_end_matches(']').to_owned())
        });
        let family = match host.as_deref().map(|h| (h, h.parse::<std::net::IpAddr>())) {
            Some((_, Ok(ip))) => usize::from(ip.is_ipv6()),
            Some((name, Err(_))) => {
                let found =
                    tokio::time::timeout(Duration::from_secs(2), tokio::net::lookup_host((name, 0))).await;
                match found {
                    Ok(Ok(found)) => found
                        .map(|a| usize::from(a.ip().to_canonical().is_ipv6()))
                        .find(|f| self.own[*f].is_some())
                        .unwrap_or(2),
                    _ => 2,
                }
            }
            None => 2,
        };
        self.family_client(family, pin)
    }

    /// The client from this host's mesh address of `family` (0: IPv4,
    /// 1: IPv6, 2: unbound), checking `pin` if given.
    fn family_client(&self, family: usize, pin: Option<[u8; 32]>) -> reqwest::Client {
        let Some(pin) = pin else {
            return self.http[family].clone();
        };
        let mut pinned = self.pinned.lock().unwrap_or_else(|p| p.into_inner());
        pinned
            .entry((family, pin))
            .or_insert_with(|| client(self.own.get(family).copied().flatten(), Some(pin)))
            .clone()
    }

    pub(crate) fn loaded(&self) -> Arc<Loaded> {
        self.lock().loaded.clone()
    }

    pub(crate) fn identity_line(&self) -> String {
        let l = self.loaded();
        if l.mine.is_empty() {
            "this host is none of the configured addresses (a beacon only)".into()
        } else {
            format!("this host is {}", l.mine.join(", "))
        }
    }

    /// What the operator should know about running `loaded` here (none
    /// for a fleet archive: it runs no tests and needs its token anyway).
    pub(crate) fn concerns(&self, loaded: &Loaded) -> Vec<crate::state::config::Concern> {
        if self.is_archive() {
            return Vec::new();
        }
        crate::state::config::concerns(
            &loaded.config,
            &loaded.mine,
            &loaded.identities,
            self.options.token.is_some(),
            clock::state().synchronised,
        )
    }

    pub(crate) fn led_count(&self) -> usize {
        self.loaded().led.len()
    }

    /// Puts a new configuration in force. Each led pair keeps its run
    /// counter if it is still there with the same schedule.
    pub(crate) fn install(&self, loaded: Loaded) {
        let mut inner = self.lock();
        let old = inner.loaded.clone();
        let keep: Vec<String> = loaded
            .led
            .iter()
            .filter(|l| {
                old.led.iter().any(|o| {
                    o.task.task == l.task.task
                        && o.task.source == l.task.source
                        && o.task.dest == l.task.dest
                        && o.task.repeat == l.task.repeat
                })
            })
            .map(|l| pair_key(&l.task.task, &l.task.source, l.task.dest.as_deref()))
            .collect();
        inner.book.next.retain(|k, _| keep.contains(k));
        inner.loaded = Arc::new(loaded);
        inner.config_error = None;
        drop(inner);
        self.installed.send_modify(|n| *n += 1);
    }

    pub(crate) fn config_failed(&self, error: String) {
        self.lock().config_error = Some((clock::now_ms(), error));
    }

    fn unstored(&self) -> MutexGuard<'_, Unstored> {
        self.unstored.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Cuts the run `number` short if it is under way (it is then kept
    /// as cancelled, with `why` and what it measured until then).
    pub(crate) fn cut_run(&self, number: u64, why: &str) -> bool {
        let mut inner = self.lock();
        match inner.cuts.get_mut(&number) {
            Some((token, reason)) => {
                *reason = Some(why.to_owned());
                token.cancel();
                true
            }
            None => false,
        }
    }

    /// Tells the caller of the summaries of run `id` stored from now on,
    /// until [`Shared::untap`].
    pub(crate) fn tap(&self, id: &str) -> tokio::sync::mpsc::Receiver<Box<Run>> {
        let (tx, rx) = tokio::sync::mpsc::channel(TAP_QUEUE);
        self.taps
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id.to_owned(), tx);
        rx
    }

    pub(crate) fn untap(&self, id: &str) {
        self.taps.lock().unwrap_or_else(|e| e.into_inner()).remove(id);
    }

    /// A summary of run `id` was stored: its tap, if any, is told (a tap
    /// that is full or gone misses it; the archive has it).
    pub(crate) fn tell_tap(&self, id: &str, row: &Run) {
        let taps = self.taps.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(tx) = taps.get(id) {
            if tx.try_send(Box::new(row.clone())).is_err() {
                log(&format!(
                    "run {id}: summary {} was not told to its pScheduler task",
                    row.id
                ));
            }
        }
    }

    /// Stores runs of this agent's own (its runs, bookings, non-starts,
    /// minutes), queueing those that ended for the archives it forwards
    /// to. When the archive cannot take them (its disk is full) they are
    /// held in memory, bounded, and written with the next store that goes
    /// through, or by housekeeping's retry: never dropped silently.
    pub(crate) async fn store(&self, runs: &[Run]) {
        let _turn = self.store_turn.lock().await;
        let held: Vec<Run> = {
            let u = self.unstored();
            u.runs
                .values()
                .map(|(r, _)| r)
                .filter(|h| !runs.iter().any(|r| r.id == h.id))
                .cloned()
                .collect()
        };
        let batch: Vec<Run> = held.iter().chain(runs).cloned().collect();
        if batch.is_empty() {
            return;
        }
        match self.put(&batch).await {
            Ok(()) => {
                self.unstored().stored(&held, runs);
                if !held.is_empty() {
                    log(&format!("{} runs held in memory are stored", held.len()));
                }
            }
            // Something held that the database refuses for itself must
            // not keep these out.
            Err(e)
                if !held.is_empty()
                    && !runs.is_empty()
                    && !e.is_disk_full()
                    && self.put(runs).await.is_ok() =>
            {
                self.unstored().stored(&[], runs);
            }
            // Housekeeping's retry: the failure is in health and metrics,
            // and was logged when it began.
            Err(_) if runs.is_empty() => {}
            Err(e) => {
                let mut u = self.unstored();
                let gone: Vec<String> = runs.iter().flat_map(|r| u.hold(r)).collect();
                log(&format!(
                    "cannot store {} runs ({} held in memory until the archive takes them): {e}",
                    runs.len(),
                    u.runs.len()
                ));
                if let Some(first) = gone.first() {
                    log(&format!(
                        "{} held runs given up ({first} the first): at most {MAX_UNSTORED_RUNS} runs \
                         or {} MiB are held in memory",
                        gone.len(),
                        MAX_UNSTORED_BYTES >> 20
                    ));
                }
            }
        }
    }

    /// Stores runs that came from elsewhere (a peer's result, a
    /// booking, a forwarded batch) and must not be answered as stored
    /// unless they are: the error says why, for a 503.
    pub(crate) async fn store_now(&self, runs: &[Run]) -> Result<(), String> {
        // Runs are held: one of them may be an earlier record of these.
        let _turn = if self.unstored().runs.is_empty() {
            None
        } else {
            Some(self.store_turn.lock().await)
        };
        match self.put(runs).await {
            Ok(()) => {
                self.unstored().stored(&[], runs);
                Ok(())
            }
            Err(e) => Err(store_failure(&e)),
        }
    }

    /// The one write of runs: notes whether the archive takes writes.
    async fn put(&self, runs: &[Run]) -> Result<(), goodput_archive::ArchiveError> {
        let targets = self.forward_urls();
        let stored = self.archive.put_queued(runs, &targets, clock::now_ms()).await;
        self.note_write(stored.as_ref().err());
        if stored.is_ok() && !targets.is_empty() && runs.iter().any(|r| r.state.has_ended()) {
            self.wake_forward.notify_waiters();
        }
        stored
    }

    /// Notes a write's outcome: the first failure and the first success
    /// after failures are logged.
    fn note_write(&self, error: Option<&goodput_archive::ArchiveError>) {
        let mut u = self.unstored();
        match (error, &u.failing) {
            (None, None) => {}
            (None, Some((since, ..))) => {
                log(&format!(
                    "the archive takes writes again (they failed since {})",
                    goodput_core::time::ms_rfc3339(*since)
                ));
                u.failing = None;
            }
            (Some(e), failing) => {
                let full = e.is_disk_full();
                if failing.as_ref().is_none_or(|(.., was_full)| *was_full != full) {
                    log(&format!(
                        "{}; this agent's own runs are held in memory (at most {MAX_UNSTORED_RUNS}) \
                         and writes from peers and clients are refused (503) until it takes writes again",
                        store_failure(e)
                    ));
                }
                let since = failing.as_ref().map_or_else(clock::now_ms, |(t, ..)| *t);
                u.failing = Some((since, e.to_string(), full));
            }
        }
    }

    /// When the archive's disk is full: why, in the words the API answers
    /// a write with.
    pub(crate) fn archive_full(&self) -> Option<String> {
        let u = self.unstored();
        let (since, error, true) = u.failing.as_ref()? else {
            return None;
        };
        Some(format!(
            "the archive's disk is full since {}: nothing was stored ({error}); writes are taken \
             again by themselves once there is room",
            goodput_core::time::ms_rfc3339(*since)
        ))
    }

    /// The archive's write state for health and metrics: its disk is
    /// full, the last write error while writes fail, runs held in memory,
    /// runs given up.
    pub(crate) fn archive_writes(&self) -> (bool, Option<String>, usize, u64) {
        let u = self.unstored();
        (
            u.failing.as_ref().is_some_and(|(.., full)| *full),
            u.failing
                .as_ref()
                .map(|(t, e, _)| format!("{}: {e}", goodput_core::time::ms_rfc3339(*t))),
            u.runs.len(),
            u.dropped,
        )
    }

    /// Takes a run of this agent's own back out of memory, where it is
    /// held because the archive could not store it; whether it was.
    pub(crate) fn unhold(&self, id: &str) -> bool {
        self.unstored().forget(id).is_some()
    }

    /// Lets go of a run booked here (its calendar time and booking).
    pub(crate) fn unbook(&self, id: &str) {
        let n = run_number(id);
        let mut inner = self.lock();
        inner.book.calendar.release(n);
        inner.book.booked.remove(&n);
    }

    /// Housekeeping's retry while writes fail: the held runs, or a probe
    /// write when none are held.
    async fn retry_writes(&self) {
        let (failing, held) = {
            let u = self.unstored();
            (u.failing.is_some(), !u.runs.is_empty())
        };
        if held {
            self.store(&[]).await;
        } else if failing {
            let probe = self.archive.probe_write().await;
            self.note_write(probe.as_ref().err());
        }
    }

    /// The forwarding targets' URLs.
    pub(crate) fn forward_urls(&self) -> Vec<String> {
        self.targets().into_iter().map(|t| t.url).collect()
    }

    /// Where this agent forwards its runs: `--forward-to`'s archives, then
    /// the mesh document's `archives` (one target per URL; the flag's
    /// wins). An archive forwards nowhere.
    pub(crate) fn targets(&self) -> Vec<crate::state::forward::ForwardTarget> {
        if self.is_archive() {
            return Vec::new();
        }
        let mut out = self.options.forward.clone();
        for (name, a) in &self.loaded().config.archives {
            match crate::state::forward::ForwardTarget::from_mesh(a) {
                Ok(t) if !out.iter().any(|o| o.url == t.url) => out.push(t),
                Ok(_) => {}
                Err(e) => log(&format!("archives.{name}: {e}")),
            }
        }
        out
    }

    /// Forgets the counters of targets no longer named.
    pub(crate) fn forget_forwarding(&self, keep: &[String]) {
        self.forwarding
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|url, _| keep.contains(url));
    }

    /// This process is a fleet's archive: it speaks for every measurement.
    pub(crate) fn is_archive(&self) -> bool {
        self.options.role == crate::state::options::Role::Archive
    }

    /// Whether this process speaks for the measurements `source` runs:
    /// an agent for its own host's, an archive for all.
    pub(crate) fn speaks_for(&self, loaded: &Loaded, source: &str) -> bool {
        self.is_archive() || loaded.mine.iter().any(|m| m == source)
    }

    /// Changes one forwarding target's counters.
    pub(crate) fn forward_status(
        &self,
        url: &str,
        f: impl FnOnce(&mut crate::state::forward::ForwardStatus),
    ) {
        let mut all = self.forwarding.lock().unwrap_or_else(|p| p.into_inner());
        let s = all
            .entry(url.to_string())
            .or_insert_with(|| crate::state::forward::ForwardStatus {
                url: url.to_string(),
                ..Default::default()
            });
        f(s);
    }

    /// Every forwarding target's counters, with its queue read from the
    /// archive.
    pub(crate) async fn forwarding(&self) -> Vec<crate::state::forward::ForwardStatus> {
        let sizes = self.archive.backlog_sizes().await.unwrap_or_default();
        let now = clock::now_ms();
        let all = self.forwarding.lock().unwrap_or_else(|p| p.into_inner()).clone();
        self.targets()
            .iter()
            .map(|t| {
                let mut s =
                    all.get(&t.url)
                        .cloned()
                        .unwrap_or_else(|| crate::state::forward::ForwardStatus {
                            url: t.url.clone(),
                            ..Default::default()
                        });
                if let Some((_, n, oldest)) = sizes.iter().find(|(u, _, _)| *u == t.url) {
                    s.backlog = *n;
                    s.backlog_age_s = oldest.map_or(0.0, |o| now.saturating_sub(o) as f64 / 1000.0);
                }
                s
            })
            .collect()
    }

    /// Notes a finished run's figures as its measurement's latest.
    pub(crate) fn note_latest(&self, run: &Run) {
        if run.state != RunState::Finished {
            return;
        }
        let at = run.start_ms.unwrap_or(run.scheduled_ms);
        let mut inner = self.lock();
        // Bounded: a measurement past the cap is not tracked here (it is
        // still in the archive).
        if inner.latest.len() >= MAX_LATEST && !inner.latest.contains_key(&run.measurement_key) {
            return;
        }
        let e = inner
            .latest
            .entry(run.measurement_key.clone())
            .or_insert_with(|| Latest {
                task: run.task.clone(),
                source: run.source.clone(),
                dest: run.dest.clone().unwrap_or_default(),
                kind: run.kind.clone(),
                at_ms: 0,
                figures: Figures::default(),
            });
        if at >= e.at_ms {
            e.at_ms = at;
            e.figures = run.figures.clone();
        }
    }

    fn heartbeat_path(&self) -> PathBuf {
        let mut p = self.options.archive.clone().into_os_string();
        p.push(".alive");
        PathBuf::from(p)
    }

    /// Notes that the agent is up now (what a restart reads to find the
    /// runs it missed).
    pub(crate) fn heartbeat(&self) {
        let path = self.heartbeat_path();
        let mut tmp = path.clone().into_os_string();
        tmp.push(".tmp");
        if std::fs::write(&tmp, clock::now_ms().to_string()).is_ok() {
            let _ = std::fs::rename(&tmp, &path);
        }
    }

    /// Called when the agent stops: held runs get a last try.
    pub(crate) async fn shutdown(&self) {
        self.heartbeat();
        self.retry_writes().await;
        let held = self.unstored().runs.len();
        if held > 0 {
            log(&format!(
                "{held} runs of this agent's own are lost: the archive could not take them"
            ));
        }
    }

    /// A result for the archive from a run's result document.
    pub(crate) fn finished(
        b: &Booked,
        result: &TestResult,
        start: u64,
        end: u64,
        cut: bool,
        stopping: bool,
    ) -> Run {
        use goodput_core::result::EndReason;
        let (state, reason) = match result.end {
            EndReason::Failed => (
                RunState::Failed,
                Some(
                    result
                        .error
                        .as_ref()
                        .map_or_else(|| "failed".to_owned(), |e| e.message.clone()),
                ),
            ),
            EndReason::Interrupted if stopping => (RunState::Cancelled, Some("the agent stopped".into())),
            EndReason::Interrupted if cut => (
                RunState::Failed,
                Some(format!(
                    "stopped at the end of its booked slot ({}): it took longer than booked",
                    goodput_core::time::ms_rfc3339(b.end_ms)
                )),
            ),
            _ => match local_shortage(result) {
                // The host, not the network, failed the measurement.
                Some(why) => (RunState::Failed, Some(why)),
                None => (RunState::Finished, None),
            },
        };
        let mut r = b.record(state, reason);
        r.start_ms = Some(start);
        r.end_ms = Some(end);
        r.figures = figures_of(result);
        r.result = serde_json::to_value(result).ok();
        r
    }
}

/// Errors that say this host ran out of something (descriptors, memory,
/// buffers, disk), not that the network failed.
const LOCAL_SHORTAGES: [(i32, &str); 6] = [
    (libc::EMFILE, "this process's descriptors"),
    (libc::ENFILE, "the system's descriptors"),
    (libc::ENOMEM, "memory"),
    (libc::ENOBUFS, "socket buffers"),
    (libc::ENOSPC, "disk space"),
    (libc::EDQUOT, "disk quota"),
];

/// Why a run that ended normally still measured nothing trustworthy: one
/// of its connections or sessions failed for want of a local resource.
/// Such a run is `failed` with that reason, never `finished`: its figures
/// (a lost session, a short transfer) would read as the network's.
pub(crate) fn local_shortage(result: &TestResult) -> Option<String> {
    use goodput_core::result::Outcome;
    let hit: Vec<(i32, &str)> = result
        .connections
        .iter()
        .filter_map(|c| match &c.outcome {
            Outcome::NetworkError {
                errno: Some(e),
                message,
                ..
            } if LOCAL_SHORTAGES.iter().any(|(n, _)| n == e) => Some((*e, message.as_str())),
            _ => None,
        })
        .collect();
    let (errno, message) = *hit.first()?;
    let what = LOCAL_SHORTAGES
        .iter()
        .find(|(n, _)| *n == errno)
        .map_or("a resource", |(_, w)| w);
    Some(format!(
        "this host ran out of {what}: {message} ({} of {} connections or sessions)",
        hit.len(),
        result.connections.len()
    ))
}

/// Every few seconds: the heartbeat, the calendar's past pruned, runs
/// that others ran here and never reported closed; every ten minutes the
/// archive pruned to its retention.
pub(crate) async fn housekeeping(shared: Arc<Shared>) {
    let mut tick = tokio::time::interval(Duration::from_secs(5));
    let mut last_prune = 0u64;
    loop {
        tokio::select! {
            _ = shared.cancel.cancelled() => return,
            _ = tick.tick() => {}
        }
        shared.heartbeat();
        shared.retry_writes().await;
        let now = clock::now_ms();
        // Runs held for peers whose result never came.
        let stale: Vec<Booked> = {
            let mut inner = shared.lock();
            inner.book.calendar.prune_before(now.saturating_sub(3_600_000));
            let gone: Vec<u64> = inner
                .book
                .booked
                .values()
                .filter(|b| !b.runs_here && b.end_ms.saturating_add(60_000) < now)
                .map(|b| b.number)
                .collect();
            gone.iter()
                .filter_map(|n| {
                    inner.book.calendar.release(*n);
                    inner.book.booked.remove(n)
                })
                .collect()
        };
        for b in stale {
            // Only if nothing came meanwhile.
            let why = format!("no result came from {}, which ran the test", b.source);
            match shared
                .archive
                .mark_if(&b.id, RunState::Scheduled, RunState::Failed, &why)
                .await
            {
                Ok(true) => {
                    for t in shared.forward_urls() {
                        if let Err(e) = shared.archive.enqueue(std::slice::from_ref(&b.id), &t, now).await {
                            log(&format!("cannot queue run {} for {t}: {e}", b.id));
                        }
                    }
                    shared.wake_forward.notify_waiters();
                }
                Ok(false) => {}
                Err(e) => log(&format!("cannot store run {}: {e}", b.id)),
            }
        }
        if now.saturating_sub(last_prune) >= 600_000 {
            last_prune = now;
            match shared.archive.prune(&shared.options.retention, now).await {
                Ok(p) if p.by_age + p.by_size > 0 => log(&format!(
                    "archive pruned: {} runs past the age limit, {} to stay under the size limit",
                    p.by_age, p.by_size
                )),
                Ok(_) => {}
                Err(e) => log(&format!("archive pruning failed: {e}")),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use goodput_core::schedule::RunClass;

    fn run(id: &str, state: RunState) -> Run {
        Run {
            id: id.into(),
            task: "t".into(),
            source: "a".into(),
            dest: Some("b".into()),
            kind: goodput_core::kind::Kind::Stamp.into(),
            class: RunClass::Background,
            state,
            reason: None,
            scheduled_ms: 1,
            start_ms: None,
            end_ms: None,
            measurement_key: "k".into(),
            spec: serde_json::json!({"kind": "stamp"}),
            result: None,
            figures: Figures::default(),
        }
    }

    /// A later record of a run replaces the one held; a record stored
    /// lets go of the one held only if it is the same (a newer one held
    /// meanwhile stays), a record stored from elsewhere supersedes it.
    #[test]
    fn held_runs_keep_each_runs_latest_record() {
        let mut u = Unstored::default();
        assert!(u.hold(&run("x", RunState::Scheduled)).is_empty());
        u.hold(&run("y", RunState::Scheduled));
        let sent = run("x", RunState::Scheduled);
        u.hold(&run("x", RunState::Finished));
        assert_eq!(u.runs.len(), 2);
        u.stored(&[sent], &[]);
        assert_eq!(
            u.runs.len(),
            2,
            "x's finished record is newer than the one stored"
        );
        u.stored(&[], &[run("y", RunState::Failed)]);
        let left: Vec<(&str, RunState)> = u.runs.values().map(|(r, _)| (r.id.as_str(), r.state)).collect();
        assert_eq!(left, [("x", RunState::Finished)]);
        u.stored(&[run("x", RunState::Finished)], &[]);
        assert!(u.runs.is_empty() && u.order.is_empty());
        assert_eq!(u.bytes, 0);
    }

    /// Past the bound the oldest held go, counted.
    #[test]
    fn held_runs_are_bounded_oldest_first() {
        let mut u = Unstored::default();
        for i in 0..MAX_UNSTORED_RUNS {
            assert!(u.hold(&run(&format!("r{i}"), RunState::Finished)).is_empty());
        }
        assert_eq!(u.hold(&run("last", RunState::Finished)), ["r0"]);
        assert_eq!(u.runs.len(), MAX_UNSTORED_RUNS);
        assert_eq!(u.dropped, 1);
        assert!(!u.order.contains_key("r0") && u.order.contains_key("last"));
        // Big documents: the byte bound holds too. Two of 3/4 of it do
        // not fit together: every small run and the first go.
        let mut big = run("big-1", RunState::Finished);
        big.result = Some(serde_json::Value::String("x".repeat(MAX_UNSTORED_BYTES / 4 * 3)));
        assert_eq!(u.hold(&big), ["r1"]);
        big.id = "big-2".into();
        let gone = u.hold(&big);
        assert_eq!(gone.len(), MAX_UNSTORED_RUNS);
        assert_eq!(gone[0], "r2");
        assert_eq!(gone.last().map(String::as_str), Some("big-1"));
        assert!(u.bytes <= MAX_UNSTORED_BYTES, "{}", u.bytes);
        assert_eq!(u.order.keys().collect::<Vec<_>>(), ["big-2"]);
    }
}
