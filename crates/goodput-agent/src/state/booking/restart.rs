//! The restart's side of booking: after a start, the runs that were under
//! way or due while the agent was down are stored as missed, and runs
//! booked for later are booked again.

use goodput_archive::{RunFilter, RunState};
use goodput_core::spec::TestSpec;

use crate::clock;
use crate::log::log;
use crate::state::booking::{missed_run, Booked, BookedBy, Wanted};
use crate::state::Shared;

impl Shared {
    /// After a start: the runs that were under way or due while the agent
    /// was down are stored as missed; runs booked for later are booked
    /// again.
    pub(crate) async fn recover(&self) -> Result<(), String> {
        let now = clock::now_ms();
        let last_alive: Option<u64> = std::fs::read_to_string(self.heartbeat_path())
            .ok()
            .and_then(|t| t.trim().parse().ok());
        let loaded = self.loaded();
        let mut missed = Vec::new();
        let mut again = Vec::new();
        for state in [RunState::Running, RunState::Scheduled] {
            let open = self
                .archive
                .runs(&RunFilter {
                    state: Some(state),
                    limit: 100_000,
                    ..RunFilter::default()
                })
                .await
                .map_err(|e| e.to_string())?;
            for mut r in open {
                let later = r.start_ms.is_some_and(|s| s > now + 1000);
                match (state, later, serde_json::from_value::<TestSpec>(r.spec.clone())) {
                    (RunState::Scheduled, true, Ok(spec)) => again.push((r, spec)),
                    (RunState::Running, ..) => {
                        r.state = RunState::Missed;
                        r.reason = Some("the agent stopped during the run".into());
                        missed.push(r);
                    }
                    _ => {
                        r.state = RunState::Missed;
                        r.reason = Some("the agent was not running at its time".into());
                        missed.push(r);
                    }
                }
            }
        }
        // Runs due while the agent was down that it has no record of.
        if let Some(from) = last_alive {
            for led in &loaded.led {
                let t = &led.task;
                // At most 10,000 per pair: a long absence with a short
                // repeat is not worth a row for every run.
                let due = t.repeat.due_between(t.seed, from, now, 10_000);
                let ids: Vec<String> = due.iter().map(|(n, _)| t.run_id(*n)).collect();
                let known = self.archive.existing(&ids).await.map_err(|e| e.to_string())?;
                for ((_, at), id) in due.into_iter().zip(ids) {
                    if known.contains(&id) {
                        continue;
                    }
                    missed.push(missed_run(led, id, at, "the agent was not running at its time"));
                }
            }
        }
        // Runs booked for later are booked again (or, if their slot is
        // taken meanwhile, missed).
        {
            let mut inner = self.lock();
            for (mut r, spec) in again {
                let runs_here = loaded.mine.contains(&r.source);
                let other = if runs_here {
                    r.dest.clone()
                } else {
                    Some(r.source.clone())
                };
                // A run booked with a perfSONAR host's pScheduler: its
                // task there was deleted when the agent stopped.
                let with_pscheduler = runs_here
                    && r.dest.as_deref().is_some_and(|d| {
                        loaded
                            .pscheduler_host(&r.source, d, &spec, r.class, None)
                            .is_some()
                    });
                if with_pscheduler {
                    r.state = RunState::Missed;
                    r.reason = Some(
                        "the agent stopped before it; its task at the pScheduler host was deleted".into(),
                    );
                    missed.push(r);
                    continue;
                }
                // A pScheduler lead's run here is booked again by the
                // participant, which keeps its tasks' runs; with no
                // participant, it is missed.
                if !runs_here && r.task.starts_with("pscheduler/") {
                    if self.options.pscheduler.is_none() {
                        r.state = RunState::Missed;
                        r.reason =
                            Some("the agent restarted without --pscheduler-listen, which booked it".into());
                        missed.push(r);
                    }
                    continue;
                }
                let (start_ms, end_ms) = (r.start_ms.unwrap_or(0), r.end_ms.unwrap_or(0));
                let run = Wanted {
                    id: r.id,
                    task: r.task,
                    source: r.source,
                    dest: r.dest,
                    spec,
                    class: r.class,
                    scheduled_ms: r.scheduled_ms,
                    runs_here,
                    peer: other.and_then(|o| loaded.peer(&o)),
                };
                let b = Booked::new(run, start_ms, end_ms, BookedBy::Restart);
                if inner.book.calendar.book(b.booking()).is_ok() {
                    inner.book.booked.insert(b.number, b);
                } else {
                    let mut r = b.record(
                        RunState::Missed,
                        Some("its slot was taken while the agent was down".into()),
                    );
                    r.start_ms = None;
                    r.end_ms = None;
                    missed.push(r);
                }
            }
        }
        if !missed.is_empty() {
            log(&format!("{} runs missed while the agent was down", missed.len()));
            self.store(&missed).await;
        }
        // The latest figures per measurement, for /metrics.
        if let Ok(recent) = self
            .archive
            .runs(&RunFilter {
                state: Some(RunState::Finished),
                limit: 5000,
                ..RunFilter::default()
            })
            .await
        {
            for r in recent.iter().rev() {
                self.note_latest(r);
            }
        }
        self.heartbeat();
        Ok(())
    }
}
