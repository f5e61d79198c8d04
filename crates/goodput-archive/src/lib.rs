//! The agent's archive: every run (its spec, participants, times, state and
//! reason, the whole result document) with indexed figures per kind, in
//! one SQLite file (WAL). The SQL keeps to what PostgreSQL reads too, and
//! goes through sqlx, which serves both, so the fleet's archive can be the
//! same code on another pool.
//!
//! Writes are idempotent by run id (a result stored twice is stored once,
//! the later state winning); a size limit is enforced by deleting the
//! oldest runs before the file grows past it, so the archive never fills
//! the disk without saying so.
#![warn(missing_docs, unreachable_pub)]

mod figures;
mod migrations;
pub mod pscheduler;
pub mod pscheduler_out;

use std::path::Path;
use std::str::FromStr;

use goodput_core::catalogue::{self, Series};
use goodput_core::schedule::RunClass;
use serde::{Deserialize, Serialize};
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::sqlite::{
    SqliteAutoVacuum, SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::{Row, SqlitePool};

pub use figures::{figures_of, measurement_key, one_way_is_exact, one_way_summary_figures, Figures};

pub use migrations::SCHEMA_VERSION;

/// What went wrong with the archive.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    /// The database refused or failed.
    #[error("archive: {0}")]
    Db(#[from] sqlx::Error),
    /// The file was written by a newer goodput.
    #[error(
        "archive schema version {found} is newer than this goodput understands ({known}): \
         use a newer goodput, or another archive file"
    )]
    Newer {
        /// The file's version.
        found: i64,
        /// This build's.
        known: i64,
    },
    /// A stored document does not read back.
    #[error("archive: a stored document does not read: {0}")]
    Json(#[from] serde_json::Error),
}

impl ArchiveError {
    /// Whether the database failed for want of disk space: SQLite's
    /// `SQLITE_FULL` (13, with its extended codes; SQLite reports a write
    /// that met `ENOSPC` so), an `ENOSPC` from opening a file, or
    /// PostgreSQL's `disk_full` (53100). Nothing of the failed write was
    /// stored, and a write may succeed again once space returns.
    pub fn is_disk_full(&self) -> bool {
        let ArchiveError::Db(e) = self else {
            return false;
        };
        match e {
            sqlx::Error::Database(d) => {
                if d.try_downcast_ref::<sqlx::postgres::PgDatabaseError>().is_some() {
                    return d.code().as_deref() == Some("53100");
                }
                // SQLite: the primary code is the low byte.
                d.code()
                    .and_then(|c| c.parse::<i64>().ok())
                    .is_some_and(|n| n & 0xff == 13)
            }
            sqlx::Error::Io(io) => io.kind() == std::io::ErrorKind::StorageFull,
            _ => false,
        }
    }
}

/// Where a run stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RunState {
    /// Booked, not begun.
    Scheduled,
    /// Under way.
    Running,
    /// Ended with a result.
    Finished,
    /// Ended by an error (the engine's reason).
    Failed,
    /// Its time passed while the agent was down.
    Missed,
    /// Never started (no slot, peer busy or unreachable, refused).
    NonStart,
    /// Called off.
    Cancelled,
}

impl RunState {
    /// Its name, as stored and in the API.
    pub fn as_str(self) -> &'static str {
        match self {
            RunState::Scheduled => "scheduled",
            RunState::Running => "running",
            RunState::Finished => "finished",
            RunState::Failed => "failed",
            RunState::Missed => "missed",
            RunState::NonStart => "non_start",
            RunState::Cancelled => "cancelled",
        }
    }
}

impl RunState {
    /// Whether the run is over (finished, failed, missed, non-start,
    /// cancelled): what is forwarded to a fleet's archive.
    pub fn has_ended(self) -> bool {
        !matches!(self, RunState::Scheduled | RunState::Running)
    }
}

impl FromStr for RunState {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        serde_json::from_value(serde_json::Value::String(s.into()))
            .map_err(|_| format!("unknown run state '{s}'"))
    }
}

fn class_str(c: RunClass) -> &'static str {
    match c {
        RunClass::Exclusive => "exclusive",
        RunClass::Normal => "normal",
        RunClass::Background => "background",
    }
}

/// One run as the archive keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Run {
    /// Unique, the same on every agent that takes part.
    pub id: String,
    /// The task it belongs to.
    pub task: String,
    /// The end that runs the test.
    pub source: String,
    /// The other end (none for a single-ended test).
    pub dest: Option<String>,
    /// The test's kind.
    pub kind: String,
    /// How it shared its hosts.
    pub class: RunClass,
    /// Where it stands.
    pub state: RunState,
    /// Why it failed or did not start.
    pub reason: Option<String>,
    /// Its time, milliseconds since the Unix epoch.
    pub scheduled_ms: u64,
    /// When it started.
    pub start_ms: Option<u64>,
    /// When it ended.
    pub end_ms: Option<u64>,
    /// Groups the runs of the same measurement ([`measurement_key`]).
    pub measurement_key: String,
    /// The spec it ran.
    pub spec: serde_json::Value,
    /// The whole result document.
    pub result: Option<serde_json::Value>,
    /// Its figures.
    pub figures: Figures,
}

/// Which runs to list.
#[derive(Debug, Clone, Default)]
pub struct RunFilter {
    /// Only this source.
    pub source: Option<String>,
    /// Only this destination.
    pub dest: Option<String>,
    /// Only this kind.
    pub kind: Option<String>,
    /// Only this state.
    pub state: Option<RunState>,
    /// Scheduled at or after (ms).
    pub from_ms: Option<u64>,
    /// Scheduled before (ms).
    pub to_ms: Option<u64>,
    /// At most this many, newest first (0: 1000).
    pub limit: u32,
}

/// A figure the archive indexes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    /// Good-put client → server.
    ThroughputUp,
    /// Good-put server → client.
    ThroughputDown,
    /// Loss, percent.
    Loss,
    /// Loss source → destination, percent.
    LossForward,
    /// Loss destination → source, percent.
    LossBackward,
    /// Median delay.
    DelayMedian,
    /// 95th percentile delay.
    DelayP95,
    /// Jitter.
    Jitter,
    /// Failed connections.
    Errors,
    /// TCP retransmits.
    Retransmits,
    /// Smallest delay.
    DelayMin,
    /// Largest delay.
    DelayMax,
    /// Hops to the destination (traces).
    Hops,
    /// Median one-way delay source → destination (synchronised only).
    OwdForwardMedian,
    /// Median one-way delay destination → source (synchronised only).
    OwdBackwardMedian,
    /// Median time of an HTTP request.
    HttpTotal,
    /// Days until a server's first certificate expires.
    CertDaysLeft,
}

impl Metric {
    /// Every metric.
    pub const ALL: [Metric; 17] = [
        Metric::ThroughputUp,
        Metric::ThroughputDown,
        Metric::Loss,
        Metric::LossForward,
        Metric::LossBackward,
        Metric::DelayMedian,
        Metric::DelayP95,
        Metric::Jitter,
        Metric::Errors,
        Metric::Retransmits,
        Metric::DelayMin,
        Metric::DelayMax,
        Metric::Hops,
        Metric::OwdForwardMedian,
        Metric::OwdBackwardMedian,
        Metric::HttpTotal,
        Metric::CertDaysLeft,
    ];

    /// Its place in [`Metric::ALL`].
    pub fn index(self) -> usize {
        Metric::ALL.iter().position(|m| *m == self).unwrap_or(0)
    }

    /// Its figure in the catalogue, which names its column and its unit.
    pub fn figure(self) -> &'static Series {
        match self {
            Metric::ThroughputUp => &catalogue::THROUGHPUT_UP,
            Metric::ThroughputDown => &catalogue::THROUGHPUT_DOWN,
            Metric::Loss => &catalogue::LOSS,
            Metric::LossForward => &catalogue::LOSS_FORWARD,
            Metric::LossBackward => &catalogue::LOSS_BACKWARD,
            Metric::DelayMedian => &catalogue::DELAY_MEDIAN,
            Metric::DelayP95 => &catalogue::DELAY_P95,
            Metric::Jitter => &catalogue::JITTER,
            Metric::Errors => &catalogue::ERRORS,
            Metric::Retransmits => &catalogue::RETRANSMITS,
            Metric::DelayMin => &catalogue::DELAY_MIN,
            Metric::DelayMax => &catalogue::DELAY_MAX,
            Metric::Hops => &catalogue::HOPS,
            Metric::OwdForwardMedian => &catalogue::OWD_FORWARD_MEDIAN,
            Metric::OwdBackwardMedian => &catalogue::OWD_BACKWARD_MEDIAN,
            Metric::HttpTotal => &catalogue::HTTP_TOTAL,
            Metric::CertDaysLeft => &catalogue::CERT_DAYS_LEFT,
        }
    }

    fn column(self) -> &'static str {
        self.figure().column
    }
}

/// A measurement's finished runs over a window, every metric at once
/// ([`Archive::recent`]): what [`Archive::series`] gives run by run, read
/// in one query for all the metrics.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Recent {
    /// Each run's start (ms) and its value of each metric, in
    /// [`Metric::ALL`]'s order; oldest first.
    pub runs: Vec<(u64, [Option<f64>; Metric::ALL.len()])>,
}

impl Recent {
    /// The series of `metric` over `[from_ms, to_ms)`, as
    /// [`Archive::series`] answers it without a step: a point per start
    /// time (runs that started in the same millisecond averaged), runs
    /// without the figure left out.
    pub fn series(&self, metric: Metric, from_ms: u64, to_ms: u64) -> Vec<Point> {
        let i = metric.index();
        let mut out: Vec<Point> = Vec::new();
        for (at, values) in &self.runs {
            let (Some(v), true) = (values[i], (from_ms..to_ms).contains(at)) else {
                continue;
            };
            match out.last_mut() {
                Some(p) if p.at_ms == *at => {
                    p.mean = (p.mean * p.count as f64 + v) / (p.count + 1) as f64;
                    p.count += 1;
                    p.min = p.min.min(v);
                    p.max = p.max.max(v);
                }
                _ => out.push(Point {
                    at_ms: *at,
                    count: 1,
                    min: v,
                    mean: v,
                    max: v,
                }),
            }
        }
        out
    }
}

/// One point of a series: a run's time and value, or an interval's
/// aggregate of them.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Point {
    /// The run's start, or the interval's start (ms).
    pub at_ms: u64,
    /// Runs in it.
    pub count: u64,
    /// Smallest value.
    pub min: f64,
    /// Mean value.
    pub mean: f64,
    /// Largest value.
    pub max: f64,
}

/// A path a measurement's traces took over a window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PathSeen {
    /// Its checksum (`goodput_core::path::path_checksum`).
    pub path_checksum: String,
    /// Traces that took it.
    pub runs: u64,
    /// The first of them (ms).
    pub first_ms: u64,
    /// The last of them (ms).
    pub last_ms: u64,
    /// Hops to the destination on it (none when it was not reached).
    pub hops: Option<f64>,
    /// The newest run that took it: its document holds the hop list.
    pub last_run: String,
}

/// The paths of a measurement over a window, and how often it moved
/// from one to another.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PathHistory {
    /// Each path, the first taken first.
    pub paths: Vec<PathSeen>,
    /// Times a trace found a path other than the one before it.
    pub changes: u64,
    /// Traces read (at most [`PATH_RUNS`], the newest).
    pub runs: u64,
}

/// An alert: one episode of a rule's state (warning, critical, no data)
/// for one measurement and direction, open while `end_ms` is none.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct AlertRecord {
    /// `rule/task/source/dest/direction/start_ms`.
    pub id: String,
    /// The rule's name.
    pub rule: String,
    /// The measurement's task.
    pub task: String,
    /// The end that runs the test.
    pub source: String,
    /// The other end.
    pub dest: Option<String>,
    /// `forward` (source → destination), `backward` or `round_trip`.
    pub direction: String,
    /// The metric family (throughput, loss, delay, jitter, path, no_data).
    pub metric: String,
    /// `warning`, `critical` or `no_data`.
    pub severity: String,
    /// The window's value when it began, or its latest (archive units:
    /// bits/s, %, µs, changes).
    pub value: Option<f64>,
    /// The threshold passed, as written (with the baseline it was
    /// measured against).
    pub threshold: String,
    /// The measurement.
    pub measurement_key: String,
    /// When it began (ms).
    pub start_ms: u64,
    /// When it was last evaluated (ms).
    pub updated_ms: u64,
    /// When it ended (ms); none while it lasts.
    pub end_ms: Option<u64>,
}

/// An agent of a fleet, as it registered with the archive.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct AgentRecord {
    /// Its name in the mesh (an address's name).
    pub name: String,
    /// What it said of itself: version, addresses, services, clock,
    /// configuration.
    pub info: serde_json::Value,
    /// When it last registered (ms).
    pub seen_ms: u64,
    /// When its lease runs out unless renewed (ms).
    pub lease_until_ms: u64,
}

/// Most traces [`Archive::paths`] reads for one window.
pub const PATH_RUNS: u32 = 100_000;

/// How much the archive keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// Runs older than this are deleted (ms).
    pub max_age_ms: u64,
    /// The archive's data never grows past this many bytes: the oldest
    /// runs go first.
    pub max_bytes: u64,
}

impl Default for Retention {
    /// A year and a half of history, in at most 1 GiB.
    fn default() -> Self {
        Self {
            max_age_ms: 548 * 86_400_000,
            max_bytes: 1 << 30,
        }
    }
}

/// What a pruning removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Pruned {
    /// Runs past the age limit.
    pub by_age: u64,
    /// Runs removed to stay under the size limit.
    pub by_size: u64,
}

/// The archive: one SQLite file (an agent's own), or a PostgreSQL
/// database (a fleet's), behind the same methods and the same SQL wherever
/// the two engines read it alike.
#[derive(Clone)]
pub struct Archive {
    pool: Pool,
    /// PostgreSQL: the partitions this process made or found, so that a
    /// store asks only for new ones (and never needs a second connection
    /// while its transaction holds one). Pruning forgets those it drops.
    partitions_made: std::sync::Arc<std::sync::Mutex<std::collections::HashSet<(&'static str, u64)>>>,
}

#[derive(Clone)]
enum Pool {
    Sqlite(SqlitePool),
    Postgres(PgPool),
}

/// Runs `$body` with `$p` bound to the archive's pool, whichever engine it
/// is, and `$pg` telling which: one body of code, compiled for each.
macro_rules! on_pool {
    ($self:expr, $p:ident, $pg:ident => $body:expr) => {
        match &$self.pool {
            Pool::Sqlite($p) => {
                #[allow(unused_variables)]
                let $pg = false;
                $body
            }
            Pool::Postgres($p) => {
                #[allow(unused_variables)]
                let $pg = true;
                $body
            }
        }
    };
}

/// Runs `$body` in a transaction on a connection of `$pool` taken for it,
/// with `$tx` bound to the transaction, and commits. A transaction that
/// failed anywhere (a statement, or its COMMIT) closes its connection
/// instead of handing it back to the pool: SQLite rolls a transaction
/// back by itself when it runs out of disk (`SQLITE_FULL`), the ROLLBACK
/// sqlx then sends fails, and sqlx's count of open transactions on that
/// connection stays at one, so each later "transaction" on it was only a
/// savepoint inside a transaction never committed: its writes were
/// answered as stored and lost, other connections found the database
/// locked for good, and its own reads saw rows no one else could. A new
/// connection starts clean.
macro_rules! in_transaction {
    ($pool:expr, $tx:ident => $body:expr) => {{
        let mut conn = $pool.acquire().await?;
        let done: Result<_, ArchiveError> = async {
            let mut $tx = sqlx::Connection::begin(&mut *conn).await?;
            let out = $body;
            $tx.commit().await?;
            Ok(out)
        }
        .await;
        if done.is_err() {
            conn.close_on_drop();
        }
        done
    }};
}

const COLUMNS: &str = "id, task, source, dest, kind, class, state, reason, scheduled_ms, start_ms, end_ms, \
     measurement_key, throughput_up_bps, throughput_down_bps, loss_pct, duplicates, reordered, \
     delay_min_us, delay_median_us, delay_p95_us, delay_max_us, jitter_us, retransmits, errors, hops, \
     path_checksum, loss_forward_pct, loss_backward_pct, owd_forward_median_us, owd_backward_median_us, \
     owd_synchronized, owd_clock_error_us, http_total_us, cert_days_left";

/// The same, each named by its table (`runs` is `r`).
const R_COLUMNS: &str =
    "r.id, r.task, r.source, r.dest, r.kind, r.class, r.state, r.reason, r.scheduled_ms, \
     r.start_ms, r.end_ms, r.measurement_key, r.throughput_up_bps, r.throughput_down_bps, r.loss_pct, \
     r.duplicates, r.reordered, r.delay_min_us, r.delay_median_us, r.delay_p95_us, r.delay_max_us, \
     r.jitter_us, r.retransmits, r.errors, r.hops, r.path_checksum, r.loss_forward_pct, r.loss_backward_pct, \
     r.owd_forward_median_us, r.owd_backward_median_us, r.owd_synchronized, r.owd_clock_error_us, \
     r.http_total_us, r.cert_days_left";

impl Archive {
    /// Opens (or creates) the archive file and brings its schema up to
    /// date; a file from a newer goodput is refused.
    pub async fn open(path: &Path) -> Result<Self, ArchiveError> {
        let options = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .foreign_keys(true);
        if std::fs::metadata(path).map_or(true, |m| m.len() == 0) {
            // Deleted runs' pages are reused, and can be given back:
            // incremental auto-vacuum, a property of the file, set as the
            // file is made (before WAL mode is written to it). Not by each
            // connection as it opens: that writes to the file, so while
            // the disk is full no connection could be opened, not even to
            // read.
            use sqlx::Connection;
            sqlx::SqliteConnection::connect_with(&options.clone().auto_vacuum(SqliteAutoVacuum::Incremental))
                .await?
                .close()
                .await?;
        }
        let pool = SqlitePoolOptions::new()
            .max_connections(4)
            .connect_with(options)
            .await?;
        let archive = Self {
            pool: Pool::Sqlite(pool),
            partitions_made: Default::default(),
        };
        archive.migrate().await?;
        Ok(archive)
    }

    /// Connects to a PostgreSQL database (`postgres://user:password@host/db`)
    /// and brings its schema up to date; a schema from a newer goodput is
    /// refused. Several goodput processes may share one database: the
    /// schema steps run under a lock, and nothing is kept outside it.
    pub async fn connect_postgres(url: &str, max_connections: u32) -> Result<Self, ArchiveError> {
        // No JIT: the aggregates' statement rescans a partitioned index
        // per (measurement, hour), and JIT-compiling its plan made 200 of
        // them take 1.2 s instead of 6 ms (PostgreSQL 15's defaults).
        let options = PgConnectOptions::from_str(url)?.options([("jit", "off")]);
        // One connection first: a server that is not there or refuses is
        // then named as such, not as a pool that timed out waiting.
        {
            use sqlx::Connection;
            sqlx::PgConnection::connect_with(&options).await?.close().await?;
        }
        let pool = PgPoolOptions::new()
            .max_connections(max_connections.max(1))
            .acquire_timeout(std::time::Duration::from_secs(10))
            .connect_with(options)
            .await?;
        let archive = Self {
            pool: Pool::Postgres(pool),
            partitions_made: Default::default(),
        };
        archive.migrate().await?;
        Ok(archive)
    }

    /// `postgres://…` or `postgresql://…` connects to PostgreSQL, anything
    /// else (`sqlite://PATH` or a path) opens a SQLite file.
    pub async fn connect(database: &str) -> Result<Self, ArchiveError> {
        if database.starts_with("postgres://") || database.starts_with("postgresql://") {
            Self::connect_postgres(database, 16).await
        } else {
            let path = database.strip_prefix("sqlite://").unwrap_or(database);
            Self::open(Path::new(path)).await
        }
    }

    /// Closes the archive's connections (a SQLite file is then released)
    /// and waits for them.
    pub async fn close(&self) {
        match &self.pool {
            Pool::Sqlite(p) => p.close().await,
            Pool::Postgres(p) => p.close().await,
        }
    }

    /// `sqlite` or `postgres`.
    pub fn engine(&self) -> &'static str {
        match self.pool {
            Pool::Sqlite(_) => "sqlite",
            Pool::Postgres(_) => "postgres",
        }
    }

    async fn migrate(&self) -> Result<(), ArchiveError> {
        on_pool!(self, p, pg => {
            let mut tx = p.begin().await?;
            if pg {
                // One archive process at a time brings the schema up; the
                // others wait, then find it done.
                sqlx::query("SELECT pg_advisory_xact_lock(7190500001)")
                    .execute(&mut *tx)
                    .await?;
            }
            sqlx::query("CREATE TABLE IF NOT EXISTS archive_schema (version BIGINT NOT NULL)")
                .execute(&mut *tx)
                .await?;
            let found: Option<i64> = sqlx::query_scalar("SELECT MAX(version) FROM archive_schema")
                .fetch_one(&mut *tx)
                .await?;
            let found = found.unwrap_or(0);
            if found > SCHEMA_VERSION {
                return Err(ArchiveError::Newer {
                    found,
                    known: SCHEMA_VERSION,
                });
            }
            let steps = if pg { migrations::POSTGRES_STEPS } else { migrations::SQLITE_STEPS };
            for (version, sql) in steps.iter().filter(|(v, _)| *v > found) {
                for statement in sql.split(';').map(str::trim).filter(|s| !s.is_empty()) {
                    sqlx::query(statement).execute(&mut *tx).await?;
                }
                sqlx::query("INSERT INTO archive_schema (version) VALUES ($1)")
                    .bind(version)
                    .execute(&mut *tx)
                    .await?;
            }
            tx.commit().await?;
            Ok(())
        })
    }

    /// Whether a write goes through now: one row rewritten in a
    /// transaction (after a failure for want of space, this tells when
    /// space has returned).
    pub async fn probe_write(&self) -> Result<(), ArchiveError> {
        on_pool!(self, p, pg => {
            in_transaction!(p, tx => {
                sqlx::query(
                    "UPDATE archive_schema SET version = version \
                     WHERE version = (SELECT MAX(version) FROM archive_schema)",
                )
                .execute(&mut *tx)
                .await?;
            })
        })
    }

    /// The schema version of the file.
    pub async fn schema_version(&self) -> Result<i64, ArchiveError> {
        on_pool!(self, p, pg => Ok(sqlx::query_scalar("SELECT MAX(version) FROM archive_schema")
            .fetch_one(p)
            .await?))
    }

    /// Stores runs in one transaction; a run whose id is stored already is
    /// replaced (its later state wins). The hourly aggregates of the
    /// measurements and hours the runs touch are worked out again from the
    /// runs, so storing a run twice counts it once.
    pub async fn put(&self, runs: &[Run]) -> Result<(), ArchiveError> {
        self.put_queued(runs, &[], 0).await
    }

    /// [`Archive::put`], and in the same transaction each run that has
    /// ended is queued for each of `targets` (the archives this agent
    /// forwards to), so that a run stored is never a run forgotten.
    pub async fn put_queued(
        &self,
        runs: &[Run],
        targets: &[String],
        now_ms: u64,
    ) -> Result<(), ArchiveError> {
        let stored = self.store(runs, targets, now_ms).await;
        if let Err(ArchiveError::Db(sqlx::Error::Database(e))) = &stored {
            // No partition for a row: another archive process dropped one
            // this one remembered. Forget them all; the retry makes them.
            if e.code().as_deref() == Some("23514") {
                self.partitions_made
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .clear();
            }
        }
        stored
    }

    async fn store(&self, runs: &[Run], targets: &[String], now_ms: u64) -> Result<(), ArchiveError> {
        // The same id twice in one batch: the later wins (one statement
        // may not touch a row twice in PostgreSQL).
        let mut seen = std::collections::HashSet::new();
        let mut unique: Vec<&Run> = runs.iter().rev().filter(|r| seen.insert(r.id.as_str())).collect();
        unique.reverse();
        on_pool!(self, p, pg => {
            self.ensure_partitions(&unique).await?;
            in_transaction!(p, tx => {
            // Several rows per statement: each statement is a round trip to
            // the database.
            let rows_per = if pg { PG_ROWS_PER_INSERT } else { ROWS_PER_INSERT };
            for chunk in unique.chunks(rows_per) {
                let sql = upsert_sql("runs", COLUMNS, 34, chunk.len(), if pg { "id, scheduled_ms" } else { "id" }, RUNS_UPDATE);
                let mut q = sqlx::query(&sql);
                for r in chunk {
                    let f = &r.figures;
                    q = q
                        .bind(&r.id)
                        .bind(&r.task)
                        .bind(&r.source)
                        .bind(&r.dest)
                        .bind(&r.kind)
                        .bind(class_str(r.class))
                        .bind(r.state.as_str())
                        .bind(&r.reason)
                        .bind(ms(r.scheduled_ms))
                        .bind(r.start_ms.map(ms))
                        .bind(r.end_ms.map(ms))
                        .bind(&r.measurement_key)
                        .bind(f.throughput_up_bps)
                        .bind(f.throughput_down_bps)
                        .bind(f.loss_pct)
                        .bind(f.duplicates)
                        .bind(f.reordered)
                        .bind(f.delay_min_us)
                        .bind(f.delay_median_us)
                        .bind(f.delay_p95_us)
                        .bind(f.delay_max_us)
                        .bind(f.jitter_us)
                        .bind(f.retransmits)
                        .bind(f.errors)
                        .bind(f.hops)
                        .bind(&f.path_checksum)
                        .bind(f.loss_forward_pct)
                        .bind(f.loss_backward_pct)
                        .bind(f.owd_forward_median_us)
                        .bind(f.owd_backward_median_us)
                        .bind(f.owd_synchronized.map(i64::from))
                        .bind(f.owd_clock_error_us)
                        .bind(f.http_total_us)
                        .bind(f.cert_days_left);
                }
                q.execute(&mut *tx).await?;
                // PostgreSQL's documents are partitioned like their runs,
                // by the run's time.
                let sql = if pg {
                    upsert_sql("run_documents", "id, scheduled_ms, spec, result", 4, chunk.len(), "id, scheduled_ms",
                        "spec = excluded.spec, result = excluded.result")
                } else {
                    upsert_sql("run_documents", "id, spec, result", 3, chunk.len(), "id",
                        "spec = excluded.spec, result = excluded.result")
                };
                let mut q = sqlx::query(&sql);
                for r in chunk {
                    q = q.bind(&r.id);
                    if pg {
                        q = q.bind(ms(r.scheduled_ms));
                    }
                    q = q.bind(r.spec.to_string()).bind(r.result.as_ref().map(|v| v.to_string()));
                }
                q.execute(&mut *tx).await?;
            }
            let ended: Vec<&&Run> = unique.iter().filter(|r| r.state.has_ended()).collect();
            for target in targets {
                for chunk in ended.chunks(ROWS_PER_INSERT) {
                    let mut sql = String::from("INSERT INTO outbox (target, id, class, queued_ms) VALUES ");
                    for i in 0..chunk.len() {
                        if i > 0 {
                            sql.push_str(", ");
                        }
                        sql.push_str(&format!("($1, ${}, ${}, $2)", 3 + 2 * i, 4 + 2 * i));
                    }
                    sql.push_str(" ON CONFLICT (target, id) DO NOTHING");
                    let mut q = sqlx::query(&sql).bind(target).bind(ms(now_ms));
                    for r in chunk {
                        q = q.bind(&r.id).bind(class_str(r.class));
                    }
                    q.execute(&mut *tx).await?;
                }
            }
            // The hours touched, per measurement.
            let mut touched: Vec<(&str, u64)> = unique
                .iter()
                .filter_map(|r| r.start_ms.map(|t| (r.measurement_key.as_str(), t / HOUR * HOUR)))
                .collect();
            touched.sort_unstable();
            touched.dedup();
            // Every metric's aggregate, for many hours touched a statement:
            // one a (measurement, hour) was a round trip each, and a batch
            // of a mesh's runs touches thousands.
            for chunk in touched.chunks(HOURS_PER_ROLLUP) {
                let sql = rollup_sql(chunk.len(), pg);
                let mut q = sqlx::query(&sql);
                for (key, hour) in chunk {
                    q = q.bind(*key).bind(ms(*hour));
                }
                q.execute(&mut *tx).await?;
            }
            })
        })
    }

    /// PostgreSQL: the partitions of `runs` and `run_documents` that these
    /// runs fall in, made if missing (under a lock, as several archive
    /// processes may store at once).
    async fn ensure_partitions(&self, runs: &[&Run]) -> Result<(), ArchiveError> {
        let Pool::Postgres(p) = &self.pool else {
            return Ok(());
        };
        let mut wanted: Vec<(&'static str, u64)> = Vec::new();
        for r in runs {
            let period = r.scheduled_ms / PARTITION_MS;
            wanted.push(("runs", period));
            wanted.push(("run_documents", period));
            if let Some(t) = r.start_ms {
                // The hourly aggregates' partition of the run's hour.
                wanted.push(("rollups", t / HOUR * HOUR / PARTITION_MS));
            }
        }
        wanted.sort_unstable();
        wanted.dedup();
        for (table, period) in wanted {
            if self
                .partitions_made
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .contains(&(table, period))
            {
                continue;
            }
            make_partition(p, table, period).await?;
            self.partitions_made
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert((table, period));
        }
        Ok(())
    }

    /// One run, with its result document.
    pub async fn get(&self, id: &str) -> Result<Option<Run>, ArchiveError> {
        on_pool!(self, p, pg => {
        let row = sqlx::query(&format!(
            "SELECT {R_COLUMNS}, d.spec, d.result FROM runs r JOIN run_documents d ON d.id = r.id{} WHERE r.id = $1", doc_join(pg)
        ))
            .bind(id)
            .fetch_optional(p)
            .await?;
        row.map(|r| run_of(&r, true)).transpose()
        })
    }

    /// Sets a run's state and reason only if it is still in `from`;
    /// whether it was.
    pub async fn mark_if(
        &self,
        id: &str,
        from: RunState,
        to: RunState,
        reason: &str,
    ) -> Result<bool, ArchiveError> {
        on_pool!(self, p, pg => {
        let n = sqlx::query("UPDATE runs SET state = $1, reason = $2 WHERE id = $3 AND state = $4")
            .bind(to.as_str())
            .bind(reason)
            .bind(id)
            .bind(from.as_str())
            .execute(p)
            .await?
            .rows_affected();
        Ok(n > 0)
        })
    }

    /// Which of these run ids are stored.
    pub async fn existing(&self, ids: &[String]) -> Result<std::collections::HashSet<String>, ArchiveError> {
        on_pool!(self, p, pg => {
        let mut out = std::collections::HashSet::new();
        for chunk in ids.chunks(500) {
            let marks = (1..=chunk.len())
                .map(|i| format!("${i}"))
                .collect::<Vec<_>>()
                .join(", ");
            let sql = format!("SELECT id FROM runs WHERE id IN ({marks})");
            let mut q = sqlx::query_scalar::<_, String>(&sql);
            for id in chunk {
                q = q.bind(id);
            }
            out.extend(q.fetch_all(p).await?);
        }
        Ok(out)
        })
    }

    /// Runs that pass the filter, newest first, without their result
    /// documents.
    pub async fn runs(&self, f: &RunFilter) -> Result<Vec<Run>, ArchiveError> {
        on_pool!(self, p, pg => {
        // Only the filters given go into the statement: `$n IS NULL OR …`
        // for an absent one keeps the planner from the indexes, and a
        // pair's failures in a year of runs were a scan of every run.
        let mut conditions = Vec::new();
        let mut texts: Vec<&str> = Vec::new();
        for (column, value) in [
            ("r.source", f.source.as_deref()),
            ("r.dest", f.dest.as_deref()),
            ("r.kind", f.kind.as_deref()),
            ("r.state", f.state.map(RunState::as_str)),
        ] {
            if let Some(v) = value {
                texts.push(v);
                conditions.push(format!("{column} = ${}", texts.len()));
            }
        }
        let n = texts.len();
        let mut times = Vec::new();
        if let Some(t) = f.from_ms {
            times.push(ms(t));
            conditions.push(format!("r.scheduled_ms >= ${}", n + times.len()));
        }
        if let Some(t) = f.to_ms {
            times.push(ms(t));
            conditions.push(format!("r.scheduled_ms < ${}", n + times.len()));
        }
        let limit_at = n + times.len() + 1;
        let sql = format!(
            "SELECT {R_COLUMNS}, d.spec, NULL AS result FROM runs r JOIN run_documents d ON d.id = r.id{} \
             {}{} ORDER BY r.scheduled_ms DESC, r.id LIMIT ${limit_at}",
            doc_join(pg),
            if conditions.is_empty() { "" } else { "WHERE " },
            conditions.join(" AND ")
        );
        let mut q = sqlx::query(&sql);
        for t in texts {
            q = q.bind(t);
        }
        for t in times {
            q = q.bind(t);
        }
        let rows = q
            .bind(i64::from(if f.limit == 0 { 1000 } else { f.limit }))
            .fetch_all(p)
            .await?;
        rows.iter().map(|r| run_of(r, false)).collect()
        })
    }

    /// A measurement's series of one metric over `[from, to)`: every
    /// finished run's value, or with `step_ms` one aggregate per step.
    pub async fn series(
        &self,
        key: &str,
        metric: Metric,
        from_ms: u64,
        to_ms: u64,
        step_ms: Option<u64>,
    ) -> Result<Vec<Point>, ArchiveError> {
        on_pool!(self, p, pg => {
        let col = metric.column();
        let step = step_ms.filter(|s| *s > 0).unwrap_or(1).min(i64::MAX as u64) as i64;
        if (step as u64).is_multiple_of(HOUR) && from_ms.is_multiple_of(HOUR) && to_ms.is_multiple_of(HOUR) {
            // Long ranges read the stored hourly aggregates.
            let rows = sqlx::query(
                "SELECT (bucket_ms / $4) * $4 AS at_ms, CAST(SUM(n) AS BIGINT) AS n, MIN(lo) AS lo, SUM(total) / CAST(SUM(n) AS DOUBLE PRECISION) AS mean, \
                 MAX(hi) AS hi FROM rollups WHERE measurement_key = $1 AND metric = $5 AND bucket_ms >= $2 \
                 AND bucket_ms < $3 AND n > 0 GROUP BY (bucket_ms / $4) ORDER BY at_ms",
            )
            .bind(key)
            .bind(ms(from_ms))
            .bind(ms(to_ms))
            .bind(step)
            .bind(col)
            .fetch_all(p)
            .await?;
            return Ok(rows.iter().map(point_of).collect());
        }
        let sql = format!(
            "SELECT (start_ms / $4) * $4 AS at_ms, COUNT(*) AS n, MIN({col}) AS lo, AVG({col}) AS mean, \
             MAX({col}) AS hi FROM runs WHERE measurement_key = $1 AND state = 'finished' \
             AND start_ms >= $2 AND start_ms < $3 AND {col} IS NOT NULL{} \
             GROUP BY (start_ms / $4) ORDER BY at_ms",
            scheduled_since(pg, 5)
        );
        let mut q = sqlx::query(&sql)
            .bind(key)
            .bind(ms(from_ms))
            .bind(ms(to_ms))
            .bind(step);
        if pg {
            q = q.bind(ms(from_ms.saturating_sub(START_LAG_MS)));
        }
        let rows = q.fetch_all(p).await?;
        Ok(rows.iter().map(point_of).collect())
        })
    }

    /// A measurement's finished runs that started in `[from, to)`, with
    /// every metric's value (one query where [`Archive::series`] takes one
    /// per metric).
    pub async fn recent(&self, key: &str, from_ms: u64, to_ms: u64) -> Result<Recent, ArchiveError> {
        on_pool!(self, p, pg => {
        let columns: Vec<&str> = Metric::ALL.iter().map(|m| m.column()).collect();
        let sql = format!(
            "SELECT start_ms, {} FROM runs WHERE measurement_key = $1 AND state = 'finished' \
             AND start_ms >= $2 AND start_ms < $3{} ORDER BY start_ms",
            columns.join(", "),
            scheduled_since(pg, 4)
        );
        let mut q = sqlx::query(&sql).bind(key).bind(ms(from_ms)).bind(ms(to_ms));
        if pg {
            q = q.bind(ms(from_ms.saturating_sub(START_LAG_MS)));
        }
        let rows = q.fetch_all(p).await?;
        let mut out = Recent::default();
        for r in rows {
            let mut values = [None; Metric::ALL.len()];
            for (v, c) in values.iter_mut().zip(&columns) {
                *v = r.try_get(*c)?;
            }
            out.runs.push((r.try_get::<i64, _>("start_ms")?.max(0) as u64, values));
        }
        Ok(out)
        })
    }

    /// The metrics a measurement's finished runs measured in
    /// `[from, to)`, from the hourly aggregates (whole hours).
    pub async fn metrics_measured(
        &self,
        key: &str,
        from_ms: u64,
        to_ms: u64,
    ) -> Result<Vec<Metric>, ArchiveError> {
        on_pool!(self, p, pg => {
        let columns: Vec<String> = sqlx::query_scalar(
            "SELECT DISTINCT metric FROM rollups WHERE measurement_key = $1 AND bucket_ms >= $2 \
             AND bucket_ms < $3 AND n > 0",
        )
        .bind(key)
        .bind(ms(from_ms))
        .bind(ms(to_ms))
        .fetch_all(p)
        .await?;
        Ok(Metric::ALL
            .into_iter()
            .filter(|m| columns.iter().any(|c| c == m.column()))
            .collect())
        })
    }

    /// The paths a measurement's finished traces took over `[from, to)`.
    pub async fn paths(&self, key: &str, from_ms: u64, to_ms: u64) -> Result<PathHistory, ArchiveError> {
        on_pool!(self, p, pg => {
        let sql = format!(
            "SELECT id, start_ms, hops, path_checksum FROM (SELECT id, start_ms, hops, path_checksum FROM runs \
             WHERE measurement_key = $1 AND state = 'finished' AND path_checksum IS NOT NULL \
             AND start_ms >= $2 AND start_ms < $3{} ORDER BY start_ms DESC, id DESC LIMIT $4) AS recent \
             ORDER BY start_ms, id",
            scheduled_since(pg, 5)
        );
        let mut q = sqlx::query(&sql)
            .bind(key)
            .bind(ms(from_ms))
            .bind(ms(to_ms))
            .bind(i64::from(PATH_RUNS));
        if pg {
            q = q.bind(ms(from_ms.saturating_sub(START_LAG_MS)));
        }
        let rows = q.fetch_all(p).await?;
        let mut h = PathHistory::default();
        let mut index: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
        let mut last: Option<String> = None;
        for r in rows {
            let sum: String = r.try_get("path_checksum")?;
            let at = r.try_get::<i64, _>("start_ms")?.max(0) as u64;
            let id: String = r.try_get("id")?;
            let hops: Option<f64> = r.try_get("hops")?;
            h.runs += 1;
            if last.as_ref().is_some_and(|l| *l != sum) {
                h.changes += 1;
            }
            match index.get(&sum).map(|i| &mut h.paths[*i]) {
                Some(p) => {
                    p.runs += 1;
                    p.last_ms = at;
                    p.hops = hops;
                    p.last_run = id;
                }
                None => {
                    index.insert(sum.clone(), h.paths.len());
                    h.paths.push(PathSeen {
                        path_checksum: sum.clone(),
                        runs: 1,
                        first_ms: at,
                        last_ms: at,
                        hops,
                        last_run: id,
                    });
                }
            }
            last = Some(sum);
        }
        Ok(h)
        })
    }

    /// When the newest finished run of a measurement started (ms).
    pub async fn last_finished(&self, key: &str) -> Result<Option<u64>, ArchiveError> {
        on_pool!(self, p, pg => {
        let t: Option<i64> = sqlx::query_scalar(
            "SELECT MAX(start_ms) FROM runs WHERE measurement_key = $1 AND state = 'finished'",
        )
        .bind(key)
        .fetch_one(p)
        .await?;
        Ok(opt_ms(t))
        })
    }

    /// Stores alerts in one transaction, each replacing the row of its id.
    pub async fn put_alerts(&self, alerts: &[AlertRecord]) -> Result<(), ArchiveError> {
        // The last version of each (one updated, then ended in the same
        // evaluation, is there twice; one statement may not touch a row
        // twice).
        let mut at: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
        for (i, a) in alerts.iter().enumerate() {
            at.insert(a.id.as_str(), i);
        }
        let latest: Vec<&AlertRecord> = alerts
            .iter()
            .enumerate()
            .filter(|(i, a)| at.get(a.id.as_str()) == Some(i))
            .map(|(_, a)| a)
            .collect();
        on_pool!(self, p, pg => {
        in_transaction!(p, tx => {
        // 500 alerts (7,000 parameters) a statement.
        for chunk in latest.chunks(500) {
            let sql = upsert_sql(
                "alerts",
                "id, rule, task, source, dest, direction, metric, severity, value, threshold, \
                 measurement_key, start_ms, updated_ms, end_ms",
                14,
                chunk.len(),
                "id",
                "severity = excluded.severity, value = excluded.value, threshold = excluded.threshold, \
                 updated_ms = excluded.updated_ms, end_ms = excluded.end_ms",
            );
            let mut q = sqlx::query(&sql);
            for a in chunk {
                q = q
                    .bind(&a.id)
                    .bind(&a.rule)
                    .bind(&a.task)
                    .bind(&a.source)
                    .bind(&a.dest)
                    .bind(&a.direction)
                    .bind(&a.metric)
                    .bind(&a.severity)
                    .bind(a.value)
                    .bind(&a.threshold)
                    .bind(&a.measurement_key)
                    .bind(ms(a.start_ms))
                    .bind(ms(a.updated_ms))
                    .bind(a.end_ms.map(ms));
            }
            q.execute(&mut *tx).await?;
        }
        })
        })
    }

    /// Alerts, newest first: the open ones, or with `from_ms` every one
    /// that was open at some time in `[from, to)`.
    pub async fn alerts(
        &self,
        open_only: bool,
        from_ms: u64,
        to_ms: u64,
        limit: u32,
    ) -> Result<Vec<AlertRecord>, ArchiveError> {
        on_pool!(self, p, pg => {
        let rows = sqlx::query(
            "SELECT id, rule, task, source, dest, direction, metric, severity, value, threshold, measurement_key, \
             start_ms, updated_ms, end_ms FROM alerts WHERE ($1 = 0 OR end_ms IS NULL) AND start_ms < $3 \
             AND (end_ms IS NULL OR end_ms >= $2) ORDER BY start_ms DESC, id LIMIT $4",
        )
        .bind(i64::from(open_only))
        .bind(ms(from_ms))
        .bind(ms(to_ms))
        .bind(i64::from(limit.max(1)))
        .fetch_all(p)
        .await?;
        Ok(rows
            .iter()
            .map(|r| AlertRecord {
                id: r.get("id"),
                rule: r.get("rule"),
                task: r.get("task"),
                source: r.get("source"),
                dest: r.get("dest"),
                direction: r.get("direction"),
                metric: r.get("metric"),
                severity: r.get("severity"),
                value: r.get("value"),
                threshold: r.get("threshold"),
                measurement_key: r.get("measurement_key"),
                start_ms: r.get::<i64, _>("start_ms").max(0) as u64,
                updated_ms: r.get::<i64, _>("updated_ms").max(0) as u64,
                end_ms: opt_ms(r.get("end_ms")),
            })
            .collect())
        })
    }

    /// Runs stored in each state.
    pub async fn count_by_state(&self) -> Result<Vec<(RunState, u64)>, ArchiveError> {
        on_pool!(self, p, pg => {
        let rows = sqlx::query("SELECT state, COUNT(*) AS n FROM runs GROUP BY state ORDER BY state")
            .fetch_all(p)
            .await?;
        let mut out = Vec::new();
        for r in rows {
            let state: String = r.try_get("state")?;
            let n: i64 = r.try_get("n")?;
            if let Ok(s) = state.parse() {
                out.push((s, n.max(0) as u64));
            }
        }
        Ok(out)
        })
    }

    /// Runs stored.
    pub async fn count(&self) -> Result<u64, ArchiveError> {
        on_pool!(self, p, pg => {
        let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM runs")
            .fetch_one(p)
            .await?;
        Ok(n.max(0) as u64)
        })
    }

    /// Queues runs already stored for `target` (those that have ended).
    pub async fn enqueue(&self, ids: &[String], target: &str, now_ms: u64) -> Result<(), ArchiveError> {
        on_pool!(self, p, pg => {
            for chunk in ids.chunks(500) {
                let marks = (3..chunk.len() + 3).map(|i| format!("${i}")).collect::<Vec<_>>().join(", ");
                let sql = format!(
                    "INSERT INTO outbox (target, id, class, queued_ms) SELECT $1, id, class, $2 FROM runs \
                     WHERE id IN ({marks}) AND state NOT IN ('scheduled', 'running') \
                     ON CONFLICT (target, id) DO NOTHING"
                );
                let mut q = sqlx::query(&sql).bind(target).bind(ms(now_ms));
                for id in chunk {
                    q = q.bind(id);
                }
                q.execute(p).await?;
            }
            Ok(())
        })
    }

    /// The oldest `limit` runs queued for `target`, whole (with their
    /// documents), oldest first; and the queued ids whose run is gone
    /// (pruned), which the caller acknowledges with the rest.
    pub async fn backlog(&self, target: &str, limit: u32) -> Result<(Vec<Run>, Vec<String>), ArchiveError> {
        on_pool!(self, p, pg => {
            let ids: Vec<String> = sqlx::query_scalar(
                "SELECT id FROM outbox WHERE target = $1 ORDER BY queued_ms, id LIMIT $2",
            )
            .bind(target)
            .bind(i64::from(limit.max(1)))
            .fetch_all(p)
            .await?;
            let mut runs = Vec::with_capacity(ids.len());
            for chunk in ids.chunks(500) {
                let marks = (1..=chunk.len()).map(|i| format!("${i}")).collect::<Vec<_>>().join(", ");
                let sql = format!(
                    "SELECT {R_COLUMNS}, d.spec, d.result FROM runs r JOIN run_documents d ON d.id = r.id{} \
                     WHERE r.id IN ({marks})",
                    doc_join(pg)
                );
                let mut q = sqlx::query(&sql);
                for id in chunk {
                    q = q.bind(id);
                }
                for row in q.fetch_all(p).await? {
                    runs.push(run_of(&row, true)?);
                }
            }
            let found: std::collections::HashSet<&str> = runs.iter().map(|r| r.id.as_str()).collect();
            let gone = ids.iter().filter(|i| !found.contains(i.as_str())).cloned().collect();
            Ok((runs, gone))
        })
    }

    /// Takes runs off `target`'s queue (they were delivered).
    pub async fn dequeue(&self, target: &str, ids: &[String]) -> Result<(), ArchiveError> {
        on_pool!(self, p, pg => {
            for chunk in ids.chunks(500) {
                let marks = (2..chunk.len() + 2).map(|i| format!("${i}")).collect::<Vec<_>>().join(", ");
                let sql = format!("DELETE FROM outbox WHERE target = $1 AND id IN ({marks})");
                let mut q = sqlx::query(&sql).bind(target);
                for id in chunk {
                    q = q.bind(id);
                }
                q.execute(p).await?;
            }
            Ok(())
        })
    }

    /// Each target's queue: (target, runs queued, the oldest's queue time
    /// in ms).
    pub async fn backlog_sizes(&self) -> Result<Vec<(String, u64, Option<u64>)>, ArchiveError> {
        on_pool!(self, p, pg => {
            let rows = sqlx::query(
                "SELECT target, COUNT(*) AS n, MIN(queued_ms) AS oldest FROM outbox GROUP BY target ORDER BY target",
            )
            .fetch_all(p)
            .await?;
            Ok(rows
                .iter()
                .map(|r| {
                    (
                        r.get::<String, _>("target"),
                        r.get::<i64, _>("n").max(0) as u64,
                        opt_ms(r.get("oldest")),
                    )
                })
                .collect())
        })
    }

    /// Keeps `target`'s queue at most `max` runs long: the oldest
    /// background runs (per-minute summaries) go first, then the oldest of
    /// any class. How many went (the caller says so: never silently).
    pub async fn trim_backlog(&self, target: &str, max: u64) -> Result<u64, ArchiveError> {
        on_pool!(self, p, pg => {
            let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM outbox WHERE target = $1")
                .bind(target)
                .fetch_one(p)
                .await?;
            let over = (n.max(0) as u64).saturating_sub(max);
            if over == 0 {
                return Ok(0);
            }
            Ok(sqlx::query(
                "DELETE FROM outbox WHERE target = $1 AND id IN (SELECT id FROM outbox WHERE target = $1 \
                 ORDER BY CASE WHEN class = 'background' THEN 0 ELSE 1 END, queued_ms, id LIMIT $2)",
            )
            .bind(target)
            .bind(ms(over))
            .execute(p)
            .await?
            .rows_affected())
        })
    }

    /// Records an agent's registration (its lease renewed to
    /// `lease_until_ms`), replacing what it said before.
    pub async fn put_agent(&self, a: &AgentRecord) -> Result<(), ArchiveError> {
        on_pool!(self, p, pg => {
            sqlx::query(
                "INSERT INTO agents (name, info, seen_ms, lease_until_ms) VALUES ($1, $2, $3, $4) \
                 ON CONFLICT (name) DO UPDATE SET info = excluded.info, seen_ms = excluded.seen_ms, \
                 lease_until_ms = excluded.lease_until_ms",
            )
            .bind(&a.name)
            .bind(a.info.to_string())
            .bind(ms(a.seen_ms))
            .bind(ms(a.lease_until_ms))
            .execute(p)
            .await?;
            Ok(())
        })
    }

    /// Every agent that registered, by name.
    pub async fn agents(&self) -> Result<Vec<AgentRecord>, ArchiveError> {
        on_pool!(self, p, pg => {
            let rows = sqlx::query("SELECT name, info, seen_ms, lease_until_ms FROM agents ORDER BY name")
                .fetch_all(p)
                .await?;
            rows.iter()
                .map(|r| {
                    Ok(AgentRecord {
                        name: r.try_get("name")?,
                        info: serde_json::from_str(&r.try_get::<String, _>("info")?)?,
                        seen_ms: r.try_get::<i64, _>("seen_ms")?.max(0) as u64,
                        lease_until_ms: r.try_get::<i64, _>("lease_until_ms")?.max(0) as u64,
                    })
                })
                .collect()
        })
    }

    /// Bytes the archive's data takes: SQLite's pages in use (free pages
    /// are reused before the file grows), or PostgreSQL's tables with
    /// their indexes.
    pub async fn size_bytes(&self) -> Result<u64, ArchiveError> {
        match &self.pool {
            Pool::Sqlite(p) => {
                let pages: i64 = sqlx::query_scalar("PRAGMA page_count").fetch_one(p).await?;
                let free: i64 = sqlx::query_scalar("PRAGMA freelist_count").fetch_one(p).await?;
                let size: i64 = sqlx::query_scalar("PRAGMA page_size").fetch_one(p).await?;
                Ok(((pages - free).max(0) * size.max(0)) as u64)
            }
            Pool::Postgres(p) => {
                let n: i64 = sqlx::query_scalar(
                    "SELECT CAST(COALESCE(SUM(pg_total_relation_size(c.oid)), 0) AS BIGINT) FROM pg_class c \
                     JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = current_schema() \
                     AND c.relkind = 'r'",
                )
                .fetch_one(p)
                .await?;
                Ok(n.max(0) as u64)
            }
        }
    }

    /// Deletes runs older than the age limit; then, when the data is over
    /// 90% of the size limit, every run dated in the future (see
    /// [`ENDED_AHEAD_MS`]), then the oldest runs until it is under. A run's time is what its writer says, so a forged or faulty
    /// record dated ahead of this clock would otherwise rank as the newest
    /// and outlive every real one. SQLite deletes rows, a tenth of what is
    /// left at a time. PostgreSQL drops whole partitions that lie past the
    /// age limit (and deletes the older rows of the one that straddles
    /// it); for size it drops the partitions that lie wholly beyond any
    /// booking, deletes the future-dated rows of the others, then drops
    /// the oldest partition at a time, never the newest: deleted rows
    /// would not give their space back until a vacuum.
    pub async fn prune(&self, keep: &Retention, now_ms: u64) -> Result<Pruned, ArchiveError> {
        let cutoff = now_ms.saturating_sub(keep.max_age_ms);
        let target = keep.max_bytes / 10 * 9;
        let ended_ahead = ms(now_ms.saturating_add(ENDED_AHEAD_MS));
        let booked_ahead = ms(now_ms.saturating_add(BOOKED_AHEAD_MS));
        match &self.pool {
            Pool::Sqlite(p) => {
                let mut pruned = Pruned {
                    by_age: sqlx::query("DELETE FROM runs WHERE scheduled_ms < $1")
                        .bind(ms(cutoff))
                        .execute(p)
                        .await?
                        .rows_affected(),
                    by_size: 0,
                };
                self.prune_alerts_and_rollups(cutoff).await?;
                if self.size_bytes().await? > target {
                    // Runs dated in the future first, all of them.
                    pruned.by_size += sqlx::query(&format!("DELETE FROM runs WHERE {FUTURE_DATED}"))
                        .bind(ended_ahead)
                        .bind(booked_ahead)
                        .execute(p)
                        .await?
                        .rows_affected();
                    self.prune_future_rollups(ended_ahead).await?;
                }
                while self.size_bytes().await? > target {
                    let total = self.count().await?;
                    if total == 0 {
                        break;
                    }
                    // A tenth of what is left at a time, the oldest first.
                    let batch = (total / 10).max(1);
                    let n = sqlx::query(
                        "DELETE FROM runs WHERE id IN (SELECT id FROM runs ORDER BY scheduled_ms LIMIT $1)",
                    )
                    .bind(batch as i64)
                    .execute(p)
                    .await?
                    .rows_affected();
                    pruned.by_size += n;
                }
                if pruned.by_age + pruned.by_size > 0 {
                    sqlx::query("PRAGMA incremental_vacuum").execute(p).await?;
                }
                Ok(pruned)
            }
            Pool::Postgres(p) => {
                let mut pruned = Pruned::default();
                let mut periods = partitions(p, "runs").await?;
                // Whole spans past the limit.
                while let Some(&first) = periods.first() {
                    if (first + 1).saturating_mul(PARTITION_MS) > cutoff {
                        break;
                    }
                    pruned.by_age += drop_period(p, first).await?;
                    self.forget_period(first);
                    periods.remove(0);
                }
                let mut tx = p.begin().await?;
                sqlx::query("DELETE FROM run_documents WHERE scheduled_ms < $1")
                    .bind(ms(cutoff))
                    .execute(&mut *tx)
                    .await?;
                pruned.by_age += sqlx::query("DELETE FROM runs WHERE scheduled_ms < $1")
                    .bind(ms(cutoff))
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
                tx.commit().await?;
                self.prune_alerts_and_rollups(cutoff).await?;
                if self.size_bytes().await? > target {
                    // Spans that begin beyond any booking hold only runs
                    // dated in the future: the furthest first.
                    while let Some(&last) = periods.last() {
                        if last.saturating_mul(PARTITION_MS) <= booked_ahead.max(0) as u64 {
                            break;
                        }
                        pruned.by_size += drop_period(p, last).await?;
                        self.forget_period(last);
                        periods.pop();
                    }
                    // The future-dated runs of the spans left.
                    let mut tx = p.begin().await?;
                    let future = format!(
                        "WHERE scheduled_ms > $1 AND id IN (SELECT id FROM runs WHERE {FUTURE_DATED})"
                    );
                    sqlx::query(&format!("DELETE FROM run_documents {future}"))
                        .bind(ended_ahead)
                        .bind(booked_ahead)
                        .execute(&mut *tx)
                        .await?;
                    pruned.by_size += sqlx::query(&format!("DELETE FROM runs {future}"))
                        .bind(ended_ahead)
                        .bind(booked_ahead)
                        .execute(&mut *tx)
                        .await?
                        .rows_affected();
                    tx.commit().await?;
                    self.prune_future_rollups(ended_ahead).await?;
                }
                while periods.len() > 1 && self.size_bytes().await? > target {
                    let period = periods.remove(0);
                    pruned.by_size += drop_period(p, period).await?;
                    self.forget_period(period);
                }
                Ok(pruned)
            }
        }
    }

    /// Forgets a dropped span's partitions (made again if a run of that
    /// time comes).
    fn forget_period(&self, period: u64) {
        self.partitions_made
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|(_, p)| *p != period);
    }

    /// The hourly aggregates of hours past `after` (ms): only runs dated
    /// in the future, deleted by then, had any.
    async fn prune_future_rollups(&self, after: i64) -> Result<(), ArchiveError> {
        on_pool!(self, p, pg => {
            sqlx::query("DELETE FROM rollups WHERE bucket_ms > $1")
                .bind(after)
                .execute(p)
                .await?;
            Ok(())
        })
    }

    async fn prune_alerts_and_rollups(&self, cutoff: u64) -> Result<(), ArchiveError> {
        on_pool!(self, p, pg => {
            sqlx::query("DELETE FROM alerts WHERE end_ms IS NOT NULL AND end_ms < $1")
                .bind(ms(cutoff))
                .execute(p)
                .await?;
            sqlx::query("DELETE FROM rollups WHERE bucket_ms < $1")
                .bind(ms(cutoff / HOUR * HOUR))
                .execute(p)
                .await?;
            Ok(())
        })
    }
}

/// A run that has ended is never dated more than this past the archive's
/// clock (ms): its time is when it was due, and a peer whose clock is an
/// hour ahead is broken. [`Archive::prune`] deletes such runs, and any
/// run dated more than [`BOOKED_AHEAD_MS`] ahead, before real history.
pub const ENDED_AHEAD_MS: u64 = 3_600_000;

/// No run is booked further ahead than this (ms): a peer may book at most
/// 7 days ahead.
pub const BOOKED_AHEAD_MS: u64 = 8 * 86_400_000;

/// The runs dated in the future, with `$1` now plus [`ENDED_AHEAD_MS`] and
/// `$2` now plus [`BOOKED_AHEAD_MS`]: ended runs past the first, any run
/// past the second.
const FUTURE_DATED: &str =
    "((scheduled_ms > $1 AND state NOT IN ('scheduled', 'running')) OR scheduled_ms > $2)";

/// PostgreSQL: the spans (`scheduled_ms / PARTITION_MS`) that `table` has
/// partitions for, the oldest first.
async fn partitions(p: &PgPool, table: &str) -> Result<Vec<u64>, ArchiveError> {
    let names: Vec<String> = sqlx::query_scalar(
        "SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid \
         WHERE i.inhparent = to_regclass($1)",
    )
    .bind(table)
    .fetch_all(p)
    .await?;
    let prefix = format!("{table}_p");
    let mut out: Vec<u64> = names
        .iter()
        .filter_map(|n| n.strip_prefix(&prefix)?.parse::<u64>().ok())
        .map(|day| day.saturating_mul(86_400_000) / PARTITION_MS)
        .collect();
    out.sort_unstable();
    Ok(out)
}

/// PostgreSQL: drops one span's partitions of runs, documents and
/// aggregates in one transaction; the runs it held.
async fn drop_period(p: &PgPool, period: u64) -> Result<u64, ArchiveError> {
    let day = period.saturating_mul(PARTITION_MS) / 86_400_000;
    let mut tx = p.begin().await?;
    sqlx::query("SELECT pg_advisory_xact_lock(7190500002)")
        .execute(&mut *tx)
        .await?;
    let n: i64 = match sqlx::query_scalar(&format!("SELECT COUNT(*) FROM runs_p{day}"))
        .fetch_one(&mut *tx)
        .await
    {
        Ok(n) => n,
        // Another archive process dropped it first.
        Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("42P01") => return Ok(0),
        Err(e) => return Err(e.into()),
    };
    for table in ["run_documents", "runs", "rollups"] {
        sqlx::query(&format!("DROP TABLE IF EXISTS {table}_p{day}"))
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await?;
    Ok(n.max(0) as u64)
}

/// The statement that works out the hourly aggregates of every metric
/// for `hours` (measurement, hour) pairs at once, from their runs: the
/// pairs are bound as `($1, $2), ($3, $4), …` (key, hour start in ms). The
/// runs of those hours are read once (PostgreSQL: a lateral join kept
/// from being flattened with `OFFSET 0`, so each pair is an index lookup
/// in each partition: flattened, the planner hashed every run of the
/// table, 4.1 s for 200 pairs against 0.15 s; SQLite's nested loop looks
/// up by itself), then every metric is
/// aggregated from them. A pair with no finished run left gets counts of
/// 0, so an aggregate never outlives its runs.
fn rollup_sql(hours: usize, pg: bool) -> String {
    let cols: Vec<&str> = Metric::ALL.iter().map(|m| m.column()).collect();
    let selects: Vec<String> = cols
        .iter()
        .map(|col| {
            format!(
                "SELECT k, h, '{col}' AS metric, COUNT({col}) AS n, SUM({col}) AS total, MIN({col}) AS lo, \
                 MAX({col}) AS hi FROM hour_runs GROUP BY k, h"
            )
        })
        .collect();
    let values: Vec<String> = (0..hours)
        .map(|i| format!("(${}, ${})", 2 * i + 1, 2 * i + 2))
        .collect();
    let picked = cols
        .iter()
        .map(|c| format!("r.{c}"))
        .collect::<Vec<_>>()
        .join(", ");
    let join = if pg {
        format!(
            "LEFT JOIN LATERAL (SELECT {} FROM runs WHERE measurement_key = t.k AND state = 'finished' \
             AND start_ms >= t.h AND start_ms < t.h + {HOUR} OFFSET 0) r ON true",
            cols.join(", ")
        )
    } else {
        format!(
            "LEFT JOIN runs r ON r.measurement_key = t.k AND r.state = 'finished' AND r.start_ms >= t.h \
             AND r.start_ms < t.h + {HOUR}"
        )
    };
    format!(
        "WITH touched (k, h) AS (VALUES {}), hour_runs AS (SELECT t.k AS k, t.h AS h, {picked} FROM touched t {join}) \
         INSERT INTO rollups (measurement_key, metric, bucket_ms, n, total, lo, hi) \
         SELECT k, metric, h, n, total, lo, hi FROM ({}) AS each_metric WHERE true \
         ON CONFLICT (measurement_key, metric, bucket_ms) DO UPDATE SET n = excluded.n, \
         total = excluded.total, lo = excluded.lo, hi = excluded.hi",
        values.join(", "),
        selects.join(" UNION ALL ")
    )
}

/// (measurement, hour) pairs per aggregate statement.
const HOURS_PER_ROLLUP: usize = 200;

/// The runs' columns that a later store of the same run replaces.
const RUNS_UPDATE: &str = "task = excluded.task, source = excluded.source, dest = excluded.dest, \
     kind = excluded.kind, class = excluded.class, state = excluded.state, reason = excluded.reason, \
     scheduled_ms = excluded.scheduled_ms, start_ms = excluded.start_ms, end_ms = excluded.end_ms, \
     measurement_key = excluded.measurement_key, \
     throughput_up_bps = excluded.throughput_up_bps, throughput_down_bps = excluded.throughput_down_bps, \
     loss_pct = excluded.loss_pct, duplicates = excluded.duplicates, reordered = excluded.reordered, \
     delay_min_us = excluded.delay_min_us, delay_median_us = excluded.delay_median_us, \
     delay_p95_us = excluded.delay_p95_us, delay_max_us = excluded.delay_max_us, \
     jitter_us = excluded.jitter_us, retransmits = excluded.retransmits, errors = excluded.errors, \
     hops = excluded.hops, path_checksum = excluded.path_checksum, \
     loss_forward_pct = excluded.loss_forward_pct, loss_backward_pct = excluded.loss_backward_pct, \
     owd_forward_median_us = excluded.owd_forward_median_us, \
     owd_backward_median_us = excluded.owd_backward_median_us, owd_synchronized = excluded.owd_synchronized, \
     owd_clock_error_us = excluded.owd_clock_error_us, http_total_us = excluded.http_total_us, \
     cert_days_left = excluded.cert_days_left";

/// PostgreSQL's partitions each hold this span of time (30 days, counted
/// from the Unix epoch), named `TABLE_pDAY` after their first day.
pub const PARTITION_MS: u64 = 30 * 86_400_000;

/// Makes `table`'s partition for the span `period` if it is missing.
async fn make_partition(p: &PgPool, table: &str, period: u64) -> Result<(), ArchiveError> {
    let from = period.saturating_mul(PARTITION_MS);
    let to = from.saturating_add(PARTITION_MS);
    let name = format!("{table}_p{}", from / 86_400_000);
    let exists: bool = sqlx::query_scalar("SELECT to_regclass($1) IS NOT NULL")
        .bind(&name)
        .fetch_one(p)
        .await?;
    if exists {
        return Ok(());
    }
    let mut tx = p.begin().await?;
    sqlx::query("SELECT pg_advisory_xact_lock(7190500002)")
        .execute(&mut *tx)
        .await?;
    sqlx::query(&format!(
        "CREATE TABLE IF NOT EXISTS {name} PARTITION OF {table} FOR VALUES FROM ({}) TO ({})",
        ms(from),
        ms(to)
    ))
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(())
}

/// An hour, the stored aggregates' step (ms).
const HOUR: u64 = 3_600_000;

/// Rows per insert statement. Measured with `examples/archive_bench.rs`
/// (50,000 runs, figures only): one row a statement stored 8,500 runs/s,
/// 10–25 rows 24,000–26,000, 50 rows 16,000 and 500 rows 2,900 — a
/// statement's cost in sqlx grows faster than its row count.
const ROWS_PER_INSERT: usize = 20;

/// The same for PostgreSQL, whose statements cost little more for more
/// rows (well under its 65,535 parameters: 34 × 200).
const PG_ROWS_PER_INSERT: usize = 200;

/// `INSERT INTO table (columns) VALUES (…), (…) ON CONFLICT (id) DO UPDATE SET …`
/// for `rows` rows of `width` values.
fn upsert_sql(table: &str, columns: &str, width: usize, rows: usize, conflict: &str, update: &str) -> String {
    let mut sql = format!("INSERT INTO {table} ({columns}) VALUES ");
    let mut n = 0;
    for row in 0..rows {
        if row > 0 {
            sql.push_str(", ");
        }
        sql.push('(');
        for col in 0..width {
            n += 1;
            if col > 0 {
                sql.push_str(", ");
            }
            sql.push_str(&format!("${n}"));
        }
        sql.push(')');
    }
    sql + &format!(" ON CONFLICT ({conflict}) DO UPDATE SET {update}")
}

fn point_of<R>(r: &R) -> Point
where
    R: Row,
    for<'a> &'a str: sqlx::ColumnIndex<R>,
    for<'a> i64: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    for<'a> f64: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
{
    Point {
        at_ms: r.get::<i64, _>("at_ms").max(0) as u64,
        count: r.get::<i64, _>("n").max(0) as u64,
        min: r.get("lo"),
        mean: r.get("mean"),
        max: r.get("hi"),
    }
}

/// PostgreSQL joins a run's document in its own partition.
fn doc_join(pg: bool) -> &'static str {
    if pg {
        " AND d.scheduled_ms = r.scheduled_ms"
    } else {
        ""
    }
}

fn ms(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// A run starts within a day of its time (one that cannot start in its
/// slot is missed), so a window of start times also bounds the time it
/// was scheduled for.
const START_LAG_MS: u64 = 86_400_000;

/// On PostgreSQL, ` AND scheduled_ms >= $n` (the window's start less
/// [`START_LAG_MS`]): the runs are partitioned by `scheduled_ms`, and with
/// the bound the planner looks at the one or two partitions that can
/// hold the window instead of all of them (planning over all took 3–6 ms
/// a statement, longer than running it). SQLite has no partitions, and
/// the bound could draw its planner to the time index.
fn scheduled_since(pg: bool, n: usize) -> String {
    if pg {
        format!(" AND scheduled_ms >= ${n}")
    } else {
        String::new()
    }
}

fn opt_ms(v: Option<i64>) -> Option<u64> {
    v.map(|x| x.max(0) as u64)
}

fn run_of<R>(r: &R, with_result: bool) -> Result<Run, ArchiveError>
where
    R: Row,
    for<'a> &'a str: sqlx::ColumnIndex<R>,
    for<'a> i64: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    for<'a> f64: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    for<'a> String: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
{
    let class: String = r.get("class");
    let state: String = r.get("state");
    let spec: String = r.get("spec");
    let result: Option<String> = if with_result { r.get("result") } else { None };
    Ok(Run {
        id: r.get("id"),
        task: r.get("task"),
        source: r.get("source"),
        dest: r.get("dest"),
        kind: r.get("kind"),
        class: serde_json::from_value(serde_json::Value::String(class))?,
        state: serde_json::from_value(serde_json::Value::String(state))?,
        reason: r.get("reason"),
        scheduled_ms: r.get::<i64, _>("scheduled_ms").max(0) as u64,
        start_ms: opt_ms(r.get("start_ms")),
        end_ms: opt_ms(r.get("end_ms")),
        measurement_key: r.get("measurement_key"),
        spec: serde_json::from_str(&spec)?,
        result: result.map(|t| serde_json::from_str(&t)).transpose()?,
        figures: Figures::with_values(
            catalogue::SERIES.map(|f| r.get::<Option<f64>, _>(f.column)),
            r.get("path_checksum"),
            r.get::<Option<i64>, _>("owd_synchronized").map(|s| s != 0),
        )
        .with_clock_error(r.get("owd_clock_error_us")),
    })
}

#[cfg(test)]
mod catalogue_tests {
    use super::*;

    #[test]
    fn the_archives_metrics_are_the_catalogues_served_series() {
        let names: Vec<String> = Metric::ALL
            .iter()
            .map(|m| serde_json::to_value(m).unwrap().as_str().unwrap().to_owned())
            .collect();
        for (m, name) in Metric::ALL.iter().zip(&names) {
            assert_eq!(m.figure().name, name, "{m:?} is served under another name");
        }
        let mut served: Vec<&str> = catalogue::served_series().map(|(n, _)| n).collect();
        let mut ours: Vec<&str> = names.iter().map(String::as_str).collect();
        served.sort_unstable();
        ours.sort_unstable();
        assert_eq!(ours, served);
    }

    #[test]
    fn every_catalogue_column_is_stored_and_read() {
        let cols = |text: &str| -> Vec<String> {
            text.split(',')
                .map(|c| c.trim().trim_start_matches("r.").to_owned())
                .collect()
        };
        let (written, read) = (cols(COLUMNS), cols(R_COLUMNS));
        for s in &catalogue::SERIES {
            assert!(
                written.iter().any(|c| c == s.column),
                "runs are stored without {}",
                s.column
            );
            assert!(
                read.iter().any(|c| c == s.column),
                "runs are read without {}",
                s.column
            );
        }
    }
}
