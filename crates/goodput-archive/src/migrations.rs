//! The archive's schema, one numbered step at a time. A step is never
//! changed once released: a new one is added. The SQL keeps to what
//! SQLite and PostgreSQL both read (`BIGINT`, `DOUBLE PRECISION`, `TEXT`,
//! `ON CONFLICT`), so a fleet's archive can run the same steps.

/// (version, SQL statements separated by `;`). The documents (spec and
/// result, several KB) live in their own table, so that lists and series
/// read only the small rows of `runs`.
pub(crate) const STEPS: &[(i64, &str)] = &[
    (
        1,
        "CREATE TABLE runs (
        id TEXT PRIMARY KEY,
        task TEXT NOT NULL,
        source TEXT NOT NULL,
        dest TEXT,
        kind TEXT NOT NULL,
        class TEXT NOT NULL,
        state TEXT NOT NULL,
        reason TEXT,
        scheduled_ms BIGINT NOT NULL,
        start_ms BIGINT,
        end_ms BIGINT,
        measurement_key TEXT NOT NULL,
        throughput_up_bps DOUBLE PRECISION,
        throughput_down_bps DOUBLE PRECISION,
        loss_pct DOUBLE PRECISION,
        duplicates DOUBLE PRECISION,
        reordered DOUBLE PRECISION,
        delay_min_us DOUBLE PRECISION,
        delay_median_us DOUBLE PRECISION,
        delay_p95_us DOUBLE PRECISION,
        delay_max_us DOUBLE PRECISION,
        jitter_us DOUBLE PRECISION,
        retransmits DOUBLE PRECISION,
        errors DOUBLE PRECISION
    );
    CREATE TABLE run_documents (
        id TEXT PRIMARY KEY REFERENCES runs (id) ON DELETE CASCADE,
        spec TEXT NOT NULL,
        result TEXT
    );
    CREATE INDEX runs_key_time ON runs (measurement_key, start_ms);
    CREATE INDEX runs_pair_time ON runs (source, dest, scheduled_ms);
    CREATE INDEX runs_time ON runs (scheduled_ms);
    CREATE TABLE rollups (
        measurement_key TEXT NOT NULL,
        metric TEXT NOT NULL,
        bucket_ms BIGINT NOT NULL,
        n BIGINT NOT NULL,
        total DOUBLE PRECISION,
        lo DOUBLE PRECISION,
        hi DOUBLE PRECISION,
        PRIMARY KEY (measurement_key, metric, bucket_ms)
    )",
    ),
    (
        2,
        // Traces: the hop count, and the path's checksum, so that "the path
        // changed" is a comparison of rows, not of documents.
        "ALTER TABLE runs ADD COLUMN hops DOUBLE PRECISION;
    ALTER TABLE runs ADD COLUMN path_checksum TEXT;
    CREATE INDEX runs_key_path ON runs (measurement_key, start_ms, path_checksum)",
    ),
    (
        3,
        // Loss by direction, and the alerts: one row per episode of a
        // rule's state for one measurement and direction, open while
        // `end_ms` is null.
        "ALTER TABLE runs ADD COLUMN loss_forward_pct DOUBLE PRECISION;
    ALTER TABLE runs ADD COLUMN loss_backward_pct DOUBLE PRECISION;
    CREATE TABLE alerts (
        id TEXT PRIMARY KEY,
        rule TEXT NOT NULL,
        task TEXT NOT NULL,
        source TEXT NOT NULL,
        dest TEXT,
        direction TEXT NOT NULL,
        metric TEXT NOT NULL,
        severity TEXT NOT NULL,
        value DOUBLE PRECISION,
        threshold TEXT NOT NULL,
        measurement_key TEXT NOT NULL,
        start_ms BIGINT NOT NULL,
        updated_ms BIGINT NOT NULL,
        end_ms BIGINT
    );
    CREATE INDEX alerts_open ON alerts (end_ms, start_ms);
    CREATE INDEX alerts_time ON alerts (start_ms)",
    ),
    (
        4,
        // A pair's runs in one state (the pair explorer's failures and
        // non-starts) without reading the pair's every run.
        "CREATE INDEX runs_pair_state_time ON runs (source, dest, state, scheduled_ms)",
    ),
];

/// The newest schema this build knows.
pub const SCHEMA_VERSION: i64 = STEPS[STEPS.len() - 1].0;
