-- sweeplab store, schema version 5 (an older store is upgraded by store/sqlite.py _MIGRATIONS).
-- Times are seconds since the epoch (float). JSON columns hold text.
-- The metric values (trials.value, metrics.value) have no declared type: SQLite writes a whole number
-- in a REAL column as an integer, and -0.0 came back as 0. Untyped, a float is kept as it was written.
-- Paths (log_path, checkpoint path, artifact path) are relative to the store directory when inside it.
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS sweeps (
    id         INTEGER PRIMARY KEY,
    name       TEXT NOT NULL UNIQUE,
    state      TEXT NOT NULL,              -- types.SweepState
    method     TEXT NOT NULL,
    metric     TEXT,                       -- objective metric name
    goal       TEXT NOT NULL,              -- minimize | maximize
    spec       TEXT NOT NULL,              -- resolved spec, JSON
    spec_path  TEXT,
    seed       INTEGER,
    created    REAL NOT NULL,
    updated    REAL NOT NULL,              -- bumped on every write batch touching the sweep
    ended      REAL,
    end_reason TEXT,                       -- which budget / why it ended
    spend      TEXT,                       -- JSON {"trials", "seconds", "cpu_seconds", "gpu_seconds", "cost"}
    driver     TEXT,                       -- JSON {"pid", "host", "started"} of the driver running it now
    backend    TEXT,                       -- where it last ran: local | ray (NULL: a store before version 2)
    address    TEXT                        -- the Ray address it was given (NULL: none, a new local cluster)
);
CREATE TABLE IF NOT EXISTS trials (
    id         INTEGER PRIMARY KEY,
    sweep_id   INTEGER NOT NULL REFERENCES sweeps(id),
    number     INTEGER NOT NULL,           -- 0-based, in creation order within the sweep
    state      TEXT NOT NULL,              -- types.TrialState
    params     TEXT NOT NULL,              -- JSON, flat dotted names -> value
    config     TEXT,                       -- JSON, the resolved (nested) config handed to user code
    value,                                 -- the objective, when finite (no type: see below)
    metrics    TEXT,                       -- JSON final metrics
    attempts   INTEGER NOT NULL DEFAULT 0,
    seed       INTEGER,
    created    REAL NOT NULL,
    started    REAL,
    ended      REAL,
    reason     TEXT,                       -- why it ended: error line, prune decision, rule firing
    resources  TEXT,                       -- JSON resources it holds / held
    last_step  INTEGER,
    profile    TEXT,                       -- JSON profile summary
    objective_values TEXT,                 -- JSON list aligned to the spec's objectives (null: missing)
    feasible   INTEGER,                    -- 1 / 0 against the spec's constraints (NULL: none, or unknown)
    seq        INTEGER,                    -- change number in its sweep of the columns the dashboard lists
    UNIQUE (sweep_id, number)
);
CREATE INDEX IF NOT EXISTS trials_sweep_state ON trials (sweep_id, state);
-- a sweep's best trial (`best`, `status`, the dashboard) is a seek, not a scan of its trials
CREATE INDEX IF NOT EXISTS trials_sweep_best ON trials (sweep_id, state, value);
CREATE TABLE IF NOT EXISTS attempts (
    id         INTEGER PRIMARY KEY,
    trial_id   INTEGER NOT NULL REFERENCES trials(id),
    number     INTEGER NOT NULL,           -- 1-based
    state      TEXT NOT NULL,              -- running, completed, failed, preempted, interrupted, pruned, ...
    started    REAL NOT NULL,
    ended      REAL,
    reason     TEXT,
    error_type TEXT,
    traceback  TEXT,
    exit_code  INTEGER,
    signal     INTEGER,
    host       TEXT,
    pid        INTEGER,
    log_path   TEXT,
    slot       TEXT,                       -- JSON: which CPU/GPU slot it ran on
    UNIQUE (trial_id, number)
);
CREATE TABLE IF NOT EXISTS metrics (
    trial_id INTEGER NOT NULL,
    attempt  INTEGER NOT NULL,
    step     INTEGER NOT NULL,
    key      TEXT NOT NULL,
    value,                                 -- NaN is stored as NULL (no type: see below)
    time     REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS metrics_trial_key_step ON metrics (trial_id, key, step);
CREATE TABLE IF NOT EXISTS events (
    id       INTEGER PRIMARY KEY,
    sweep_id INTEGER NOT NULL,
    trial_id INTEGER,
    attempt  INTEGER,
    time     REAL NOT NULL,
    kind     TEXT NOT NULL,                -- see store/sqlite.py EVENT_KINDS
    message  TEXT,
    data     TEXT                          -- JSON
);
CREATE INDEX IF NOT EXISTS events_sweep ON events (sweep_id, id);
CREATE INDEX IF NOT EXISTS events_trial ON events (trial_id, id);
CREATE TABLE IF NOT EXISTS checkpoints (
    id       INTEGER PRIMARY KEY,
    trial_id INTEGER NOT NULL,
    attempt  INTEGER NOT NULL,
    step     INTEGER,
    path     TEXT NOT NULL,
    checksum TEXT,
    bytes    INTEGER,
    seconds  REAL,
    time     REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS checkpoints_trial ON checkpoints (trial_id, id);
CREATE TABLE IF NOT EXISTS system_samples (
    trial_id INTEGER NOT NULL,
    attempt  INTEGER NOT NULL,
    time     REAL NOT NULL,
    cpu      REAL,                         -- percent of one core
    rss      REAL,                         -- bytes
    gpu_util REAL,                         -- percent
    gpu_mem  REAL                          -- bytes
);
CREATE INDEX IF NOT EXISTS system_trial ON system_samples (trial_id, time);
CREATE TABLE IF NOT EXISTS artifacts (
    id       INTEGER PRIMARY KEY,
    trial_id INTEGER NOT NULL,
    attempt  INTEGER,
    name     TEXT NOT NULL,
    path     TEXT NOT NULL,
    time     REAL NOT NULL
);
