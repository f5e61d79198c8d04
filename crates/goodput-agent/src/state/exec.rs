//! Runs what is booked: each run whose source is this host starts at its
//! slot through the engine's one run entry, is cut at the slot's end, and
//! is stored (and handed to the agent at the other end). And the beacon:
//! the services other hosts test against, for as long as the agent runs.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use goodput_archive::RunState;
use goodput_core::schedule::RunClass;
use goodput_core::spec::{ServerSpec, TestSpec};
use goodput_engine::run::{run, RunContext};
use goodput_engine::NullObserver;
use tokio::task::JoinSet;

use crate::clock;
use crate::log::log;
use crate::state::booking::{self, Booked};
use crate::state::minutes::{self, Minutes};
use crate::state::peer;
use crate::state::Shared;

/// Intervals and connection records kept in a stored result.
const MAX_RECORDS: usize = 200;

/// Starts each booked run at its slot.
pub(crate) async fn executor(shared: Arc<Shared>) {
    let mut running = JoinSet::new();
    loop {
        let now = clock::now_ms();
        let next = {
            let inner = shared.lock();
            inner
                .book
                .booked
                .values()
                .filter(|b| b.runs_here && !b.started)
                .map(|b| b.start_ms)
                .min()
        };
        let wait = next.map_or(Duration::from_secs(3600), |t| {
            Duration::from_millis(t.saturating_sub(now))
        });
        tokio::select! {
            _ = shared.cancel.cancelled() => break,
            _ = shared.wake.notified() => continue,
            _ = tokio::time::sleep(wait) => {}
            Some(_) = running.join_next(), if !running.is_empty() => continue,
        }
        let now = clock::now_ms();
        let start: Vec<Booked> = {
            let mut inner = shared.lock();
            let due: Vec<u64> = inner
                .book
                .booked
                .values()
                .filter(|b| b.runs_here && !b.started && b.start_ms <= now)
                .map(|b| b.number)
                .collect();
            due.iter()
                .filter_map(|n| {
                    let b = inner.book.booked.get_mut(n)?;
                    b.started = true;
                    Some(b.clone())
                })
                .collect()
        };
        for b in start {
            running.spawn(execute(shared.clone(), b));
        }
    }
    // The runs under way see the same cancellation and store themselves.
    while running.join_next().await.is_some() {}
    // Runs booked with a perfSONAR host that will not run now: their
    // tasks there are deleted (within 2 s all told), so its server does
    // not wait for a client that will not come.
    let waiting: Vec<(booking::pscheduler::PsBooking, Option<IpAddr>)> = {
        let inner = shared.lock();
        let loaded = inner.loaded.clone();
        inner
            .book
            .booked
            .values()
            .filter(|b| !b.started)
            .filter_map(|b| {
                let from = loaded.ips_of(&b.source).into_iter().next();
                b.pscheduler.clone().map(|p| (p, from))
            })
            .collect()
    };
    if !waiting.is_empty() {
        let all = futures_util::future::join_all(
            waiting
                .iter()
                .map(|(p, from)| booking::pscheduler::cancel(p, *from)),
        );
        let _ = tokio::time::timeout(Duration::from_secs(2), all).await;
    }
}

/// Runs one booked run and stores it.
async fn execute(shared: Arc<Shared>, b: Booked) {
    let start = clock::now_ms();
    // Background streams have slots of their own: a mesh's host keeps one
    // to every other, beside its few exclusive and normal runs.
    let background = b.class == RunClass::Background;
    let refused = {
        let mut inner = shared.lock();
        let limits = &shared.options.limits;
        if background {
            if inner.running_background >= limits.max_background {
                Some(format!(
                    "limit max_background: {} background runs were under way",
                    limits.max_background
                ))
            } else {
                inner.running_background += 1;
                None
            }
        } else if inner.running >= limits.max_running {
            Some(format!(
                "limit max_running: {} runs were under way",
                limits.max_running
            ))
        } else {
            inner.running += 1;
            None
        }
    };
    let record = if let Some(why) = refused {
        shared.lock().counters.refused += 1;
        let mut r = b.record(RunState::Failed, Some(why));
        r.start_ms = None;
        r.end_ms = None;
        r
    } else {
        let mut r = b.record(RunState::Running, None);
        r.start_ms = Some(start);
        r.end_ms = None;
        shared.store(&[r]).await;
        // The slot is the run's: it stops at the slot's end.
        let token = shared.cancel.child_token();
        shared.lock().cuts.insert(b.number, (token.clone(), None));
        let cut = Duration::from_millis(b.end_ms.saturating_sub(start));
        let timer = {
            let token = token.clone();
            tokio::spawn(async move {
                tokio::time::sleep(cut).await;
                token.cancel();
            })
        };
        // A perfSONAR host's iperf3 server starts at the slot's start;
        // its client, as pScheduler's own, connects 3 s later.
        if b.pscheduler.is_some() {
            let at = b.start_ms + booking::pscheduler::CLIENT_DELAY_MS;
            let wait = Duration::from_millis(at.saturating_sub(clock::now_ms()));
            tokio::select! {
                _ = token.cancelled() => {}
                _ = tokio::time::sleep(wait) => {}
            }
        }
        let result = engine_run(&shared, &b, token.clone()).await;
        timer.abort();
        let end = clock::now_ms();
        let cut_why = {
            let mut inner = shared.lock();
            let why = inner.cuts.remove(&b.number).and_then(|(_, why)| why);
            if background {
                inner.running_background -= 1;
            } else {
                inner.running -= 1;
            }
            why
        };
        let stopping = shared.cancel.is_cancelled();
        match result {
            Ok(result) => {
                let mut r = Shared::finished(
                    &b,
                    &result,
                    start,
                    end,
                    token.is_cancelled() && !stopping && cut_why.is_none(),
                    stopping,
                );
                // Cut short on request: what it measured until then.
                if let (Some(why), false) = (cut_why, stopping) {
                    r.state = RunState::Cancelled;
                    r.reason = Some(why);
                }
                r
            }
            Err(why) => {
                let mut r = b.record(RunState::Failed, Some(why));
                r.start_ms = Some(start);
                r.end_ms = Some(end);
                r
            }
        }
    };
    {
        let mut inner = shared.lock();
        inner.book.calendar.release(b.number);
        inner.book.booked.remove(&b.number);
    }
    shared.store(std::slice::from_ref(&record)).await;
    shared.note_latest(&record);
    if let Some(p) = &b.peer {
        let mut delivered = Err(String::new());
        for attempt in 0..3 {
            if attempt > 0 {
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            delivered = peer::deliver(&shared, p, &record).await;
            if delivered.is_ok() {
                break;
            }
        }
        if let Err(e) = delivered {
            shared.lock().counters.results_undelivered += 1;
            log(&format!("run {}: its result did not reach {}: {e}", b.id, p.name));
        }
    }
}

/// Runs a booked run's spec through the engine in a task of its own, so
/// that a panic in it fails the run instead of the agent's bookkeeping.
async fn engine_run(
    shared: &Arc<Shared>,
    b: &Booked,
    token: tokio_util::sync::CancellationToken,
) -> Result<goodput_core::result::TestResult, String> {
    let spec = b.spec.clone();
    let context = RunContext {
        stamp_reflector_stateful: peer_beacon_reflector(shared, b),
        ..RunContext::with_records(MAX_RECORDS)
    };
    let joined = if b.class == RunClass::Background && matches!(b.spec, TestSpec::Stamp(_)) {
        // A background stream is kept as per-minute summaries; one to a
        // reflector runs on the agent's STAMP hub beside every other.
        let (tx, store) = summary_store(shared, &b.id);
        let mut minutes = Minutes::new(b.clone(), tx);
        let hub = shared.stamp_hub.clone();
        let joined = tokio::spawn(async move {
            let on_hub = if let TestSpec::Stamp(s) = &spec {
                s.host.is_some().then(|| s.clone())
            } else {
                None
            };
            let mut result = if let Some(s) = on_hub {
                let stateful = context.stamp_reflector_stateful;
                hub.run_spec(&s, stateful, &mut minutes, token, context.max_records)
                    .await
            } else {
                // Boxed: the engine's whole run is a large future, and
                // this task (one per stream) would otherwise hold its room
                // while it runs on the hub.
                Box::pin(run(&spec, context, &mut minutes, token)).await
            };
            minutes.finish();
            // The hub kept counts only: the run's round trip is the
            // minutes'.
            minutes.fill_round_trip(&mut result);
            (result, minutes.dropped, minutes.after_close)
        })
        .await;
        // The observer, and with it the queue's sender, is gone: the store
        // drains what is queued and ends.
        let _ = store.await;
        joined.map(|(result, dropped, after_close)| {
            if dropped + after_close > 0 {
                log(&format!(
                    "run {}: {dropped} minute summaries not stored (the archive was behind), \
                     {after_close} packet fates came after their minute was stored",
                    b.id
                ));
            }
            result
        })
    } else if matches!(&b.spec, TestSpec::Owamp(o) if o.continuous) {
        // A continuous OWAMP stream is kept summary by summary.
        let (tx, store) = summary_store(shared, &b.id);
        let mut summaries = minutes::Summaries::new(b.clone(), tx);
        let joined = tokio::spawn(async move {
            let result = run(&spec, context, &mut summaries, token).await;
            (result, summaries.dropped)
        })
        .await;
        let _ = store.await;
        joined.map(|(result, dropped)| {
            if dropped > 0 {
                log(&format!(
                    "run {}: {dropped} stream summaries not stored (the archive was behind)",
                    b.id
                ));
            }
            result
        })
    } else {
        tokio::spawn(async move { run(&spec, context, &mut NullObserver, token).await }).await
    };
    joined.map_err(|e| format!("the run stopped abnormally: {e}"))
}

/// A queue of a stream's summary rows and the task that stores them; the
/// task ends once the queue's sender is dropped and it is drained; a
/// stored row is told to the run's tap, if any. A row is queued boxed:
/// the queue's first block holds 32 slots from its start, 20 KB per
/// stream were they whole rows.
fn summary_store(
    shared: &Arc<Shared>,
    run_id: &str,
) -> (
    tokio::sync::mpsc::Sender<Box<goodput_archive::Run>>,
    tokio::task::JoinHandle<()>,
) {
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Box<goodput_archive::Run>>(minutes::QUEUE);
    let shared = shared.clone();
    let run_id = run_id.to_owned();
    let store = tokio::spawn(async move {
        while let Some(row) = rx.recv().await {
            shared.store(std::slice::from_ref(&*row)).await;
            shared.tell_tap(&run_id, &row);
        }
    });
    (tx, store)
}

/// A STAMP run to a peer agent's beacon (its address or one of its
/// labels', at the beacon's STAMP port, which agents of a mesh share with
/// this one): that reflector numbers its replies itself (see [`beacon`]), so
/// the sender is told, and a session that lost only replies still splits
/// its loss by direction (every reply then carries the sender's own
/// number, as a stateless reflector's would).
fn peer_beacon_reflector(shared: &Shared, b: &Booked) -> bool {
    let (TestSpec::Stamp(s), Some(peer)) = (&b.spec, &b.peer) else {
        return false;
    };
    let Some(Ok((host, port))) = s
        .host
        .as_deref()
        .map(|h| goodput_core::spec::split_target(h, s.port))
    else {
        return false;
    };
    if port != shared.options.stamp_port {
        return false;
    }
    // The same comparison as everywhere a host is named: case-blind
    // names, IP addresses however they are written.
    shared.loaded().name_of_host(&host).as_deref() == Some(peer.name.as_str())
}

/// Serves the beacon's services on this host's configured addresses until
/// the agent stops.
pub(crate) async fn beacon(shared: Arc<Shared>) {
    let loaded = shared.loaded();
    let ips: Vec<IpAddr> = loaded
        .mine
        .iter()
        .filter_map(|m| loaded.config.addresses[m].address.parse().ok())
        .collect();
    let spec = ServerSpec {
        listen: ips.iter().map(IpAddr::to_string).collect(),
        port: shared.options.beacon_port,
        stamp: true,
        stamp_port: shared.options.stamp_port,
        stamp_listen: ips.clone(),
        // Its own sequence numbers in each session's replies (RFC 8762's
        // stateful mode): a sender then tells the loss on the way here
        // from the loss on the way back, so the mesh's STAMP loss has a
        // direction.
        stamp_stateful: true,
        iperf3: shared.options.iperf3_port.is_some(),
        iperf3_port: shared.options.iperf3_port.unwrap_or(5201),
        // The iperf3 service has one address: this host's only one, or all.
        iperf3_listen: match ips[..] {
            [one] => Some(one),
            _ => None,
        },
        quic: shared.options.quic_port.is_some(),
        quic_port: shared.options.quic_port.unwrap_or(4433),
        quic_listen: ips.clone(),
        owamp: shared.options.owamp_port.is_some(),
        owamp_port: shared.options.owamp_port.unwrap_or(861),
        twamp: shared.options.twamp_port.is_some(),
        twamp_port: shared.options.twamp_port.unwrap_or(862),
        ow_twamp_listen: ips.clone(),
        ndt7: shared.options.ndt7_port.is_some(),
        ndt7_port: shared
            .options
            .ndt7_port
            .unwrap_or(goodput_core::spec::server::NDT7_PORT),
        ..ServerSpec::default()
    };
    let spec = TestSpec::Server(spec);
    // Browsers' ndt7 tests (the /speedtest page's) are kept as runs.
    let (ndt7_sink, ndt7_store) = match shared.options.ndt7_port {
        Some(_) => {
            let (sink, store) = crate::state::speedtest::sink(&shared);
            (Some(sink), Some(store))
        }
        None => (None, None),
    };
    let result = run(
        &spec,
        RunContext {
            ndt7_tests: ndt7_sink,
            ..RunContext::with_records(1)
        },
        &mut NullObserver,
        shared.cancel.child_token(),
    )
    .await;
    if let Some(store) = ndt7_store {
        let _ = store.await;
    }
    if let Some(e) = result.error {
        if !shared.cancel.is_cancelled() {
            log(&format!("the beacon's services stopped: {}", e.message));
        }
        shared.lock().beacon_error = Some(e.message);
    }
}
