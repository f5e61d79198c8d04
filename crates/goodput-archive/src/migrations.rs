//! The archive's schema, one numbered step at a time. A step is never
//! changed once released: a new one is added. The SQL keeps to what
//! SQLite and PostgreSQL both read (`BIGINT`, `DOUBLE PRECISION`, `TEXT`,
//! `ON CONFLICT`). PostgreSQL's schema began at step 4 as one step, with
//! the tables that grow partitioned by time; later steps are numbered for
//! both engines alike, so one version names one schema on either.

/// (version, SQL statements separated by `;`). The documents (spec and
/// result, several KB) live in their own table, so that lists and series
/// read only the small rows of `runs`.
pub(crate) const SQLITE_STEPS: &[(i64, &str)] = &[
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
    (
        5,
        // Store-and-forward: the runs still to be sent to each archive
        // this agent forwards to, oldest first, with their class (the
        // backlog's limit drops background runs first).
        "CREATE TABLE outbox (
        target TEXT NOT NULL,
        id TEXT NOT NULL,
        class TEXT NOT NULL,
        queued_ms BIGINT NOT NULL,
        PRIMARY KEY (target, id)
    );
    CREATE INDEX outbox_age ON outbox (target, queued_ms)",
    ),
    (
        6,
        // A fleet's inventory: each agent that registered with this
        // archive, what it said of itself (JSON), when, and until when its
        // lease runs.
        "CREATE TABLE agents (
        name TEXT PRIMARY KEY,
        info TEXT NOT NULL,
        seen_ms BIGINT NOT NULL,
        lease_until_ms BIGINT NOT NULL
    )",
    ),
    (
        7,
        // One-way delay, a metric of its own beside the round trip: each
        // direction's median from synchronised clocks, and whether the
        // run's clocks were (0 or 1; null: no one-way delay).
        "ALTER TABLE runs ADD COLUMN owd_forward_median_us DOUBLE PRECISION;
    ALTER TABLE runs ADD COLUMN owd_backward_median_us DOUBLE PRECISION;
    ALTER TABLE runs ADD COLUMN owd_synchronized BIGINT",
    ),
    (
        8,
        // The clocks' error bound of a run's one-way delays (the larger
        // direction's, µs; null: none said, or no one-way delay), kept so
        // that a delay within it is never taken for an exact one. Rows
        // from before stay null.
        "ALTER TABLE runs ADD COLUMN owd_clock_error_us DOUBLE PRECISION",
    ),
    (
        9,
        // An HTTP request's median time (µs) and the days until a
        // server's first certificate expires (http, tls).
        "ALTER TABLE runs ADD COLUMN http_total_us DOUBLE PRECISION;
    ALTER TABLE runs ADD COLUMN cert_days_left DOUBLE PRECISION",
    ),
];

/// PostgreSQL's steps. `runs`, `run_documents` and `rollups` are
/// partitioned by time (declarative range partitions of
/// `crate::PARTITION_MS`, made as runs arrive), so that retention drops
/// whole partitions and a query for a time range reads only its own; a
/// partitioned table's keys hold its partition column, so a run is
/// `(id, scheduled_ms)`, a run's time never changing.
pub(crate) const POSTGRES_STEPS: &[(i64, &str)] = &[
    (
        4,
        "CREATE TABLE runs (
        id TEXT NOT NULL,
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
        errors DOUBLE PRECISION,
        hops DOUBLE PRECISION,
        path_checksum TEXT,
        loss_forward_pct DOUBLE PRECISION,
        loss_backward_pct DOUBLE PRECISION,
        PRIMARY KEY (id, scheduled_ms)
    ) PARTITION BY RANGE (scheduled_ms);
    CREATE TABLE run_documents (
        id TEXT NOT NULL,
        scheduled_ms BIGINT NOT NULL,
        spec TEXT NOT NULL,
        result TEXT,
        PRIMARY KEY (id, scheduled_ms)
    ) PARTITION BY RANGE (scheduled_ms);
    CREATE INDEX runs_id ON runs (id);
    CREATE INDEX runs_key_time ON runs (measurement_key, start_ms);
    CREATE INDEX runs_pair_time ON runs (source, dest, scheduled_ms);
    CREATE INDEX runs_time ON runs (scheduled_ms);
    CREATE INDEX runs_key_path ON runs (measurement_key, start_ms, path_checksum);
    CREATE INDEX runs_pair_state_time ON runs (source, dest, state, scheduled_ms);
    CREATE TABLE rollups (
        measurement_key TEXT NOT NULL,
        metric TEXT NOT NULL,
        bucket_ms BIGINT NOT NULL,
        n BIGINT NOT NULL,
        total DOUBLE PRECISION,
        lo DOUBLE PRECISION,
        hi DOUBLE PRECISION,
        PRIMARY KEY (measurement_key, metric, bucket_ms)
    ) PARTITION BY RANGE (bucket_ms);
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
        5,
        // Store-and-forward: the runs still to be sent to each archive
        // this agent forwards to, oldest first, with their class (the
        // backlog's limit drops background runs first).
        "CREATE TABLE outbox (
        target TEXT NOT NULL,
        id TEXT NOT NULL,
        class TEXT NOT NULL,
        queued_ms BIGINT NOT NULL,
        PRIMARY KEY (target, id)
    );
    CREATE INDEX outbox_age ON outbox (target, queued_ms)",
    ),
    (
        6,
        // A fleet's inventory: each agent that registered with this
        // archive, what it said of itself (JSON), when, and until when its
        // lease runs.
        "CREATE TABLE agents (
        name TEXT PRIMARY KEY,
        info TEXT NOT NULL,
        seen_ms BIGINT NOT NULL,
        lease_until_ms BIGINT NOT NULL
    )",
    ),
    (
        7,
        // One-way delay, a metric of its own beside the round trip: each
        // direction's median from synchronised clocks, and whether the
        // run's clocks were (0 or 1; null: no one-way delay).
        "ALTER TABLE runs ADD COLUMN owd_forward_median_us DOUBLE PRECISION;
    ALTER TABLE runs ADD COLUMN owd_backward_median_us DOUBLE PRECISION;
    ALTER TABLE runs ADD COLUMN owd_synchronized BIGINT",
    ),
    (
        8,
        // The clocks' error bound of a run's one-way delays (the larger
        // direction's, µs; null: none said, or no one-way delay), kept so
        // that a delay within it is never taken for an exact one. Rows
        // from before stay null.
        "ALTER TABLE runs ADD COLUMN owd_clock_error_us DOUBLE PRECISION",
    ),
    (
        9,
        // An HTTP request's median time (µs) and the days until a
        // server's first certificate expires (http, tls).
        "ALTER TABLE runs ADD COLUMN http_total_us DOUBLE PRECISION;
    ALTER TABLE runs ADD COLUMN cert_days_left DOUBLE PRECISION",
    ),
];

/// The newest schema this build knows.
pub const SCHEMA_VERSION: i64 = SQLITE_STEPS[SQLITE_STEPS.len() - 1].0;

// Both engines end at the same version.
const _: () = assert!(POSTGRES_STEPS[POSTGRES_STEPS.len() - 1].0 == SCHEMA_VERSION);
