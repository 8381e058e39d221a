-- The ledger (DESIGN.md §5, ADR-26). The same statements run on chdb and on a ClickHouse server.
-- Every table is a ReplacingMergeTree whose sorting key ends in the event id: an event inserted
-- twice (at-least-once delivery, a batch retried after a crash) collapses to one row, and every
-- read goes through FINAL (or the views below, which do). Money is Int64 micro-euros.
-- Merges read 1,024 rows a block, one column at a time: a merge of whole rows 8,192 at a time
-- (the payloads' JSON) took the embedded engine's memory 60 MiB past its level (issue 26).
-- Parts merged away are removed by each table's cleanup thread alone: past 100 of them at once
-- ClickHouse removes them with up to 128 threads (`concurrent_part_removal_threshold`), which
-- the embedded engine then keeps idle (110-130 threads, 15-30 MiB of its peak; issue 26).

-- Every event, whole (payload as JSON), for 400 days.
CREATE TABLE IF NOT EXISTS events (
    event_id       UUID,
    event_type     LowCardinality(String),
    occurred_at    DateTime64(6, 'UTC'),
    recorded_at    DateTime64(6, 'UTC'),
    region         LowCardinality(String),
    key            String,
    causation_id   Nullable(UUID),
    correlation_id Nullable(String),
    producer       LowCardinality(String),
    topic          LowCardinality(String),
    partition      UInt32,
    offset         UInt64,
    payload        String
) ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(occurred_at)
ORDER BY (event_type, occurred_at, event_id)
TTL toDateTime(occurred_at) + INTERVAL 400 DAY
SETTINGS merge_max_block_size = 1024, vertical_merge_algorithm_min_rows_to_activate = 1,
    vertical_merge_algorithm_min_columns_to_activate = 1,
    concurrent_part_removal_threshold = 1000000000;

-- Every pool ranking with its inputs, for 13 months.
CREATE TABLE IF NOT EXISTS rankings (
    event_id                    UUID,
    ranking_id                  String,
    pool_id                     LowCardinality(String),
    rank                        UInt32,
    pool_count                  UInt32,
    score                       Float64,
    available_vcpu              Int64,
    observed_interruption_per_h Float64,
    price_per_vcpu_h_eur_micros Int64,
    correlation_group           LowCardinality(String),
    window_s                    UInt32,
    input_event_ids             Array(UUID),
    occurred_at                 DateTime64(6, 'UTC')
) ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(occurred_at)
ORDER BY (pool_id, occurred_at, event_id)
TTL toDateTime(occurred_at) + INTERVAL 13 MONTH
SETTINGS merge_max_block_size = 1024, vertical_merge_algorithm_min_rows_to_activate = 1,
    vertical_merge_algorithm_min_columns_to_activate = 1,
    concurrent_part_removal_threshold = 1000000000;

-- Rate cards: the prices the ledger priced with (and the SQL what-if engine joins on). A card
-- was published at `published_at` (its event's time; a card published more than the rule's
-- allowed lateness after `valid_from` is refused) and read from the log at its position.
CREATE TABLE IF NOT EXISTS rate_cards (
    event_id                               UUID,
    pool_id                                LowCardinality(String),
    purchase_model                         LowCardinality(String),
    price_per_vcpu_h_eur_micros            Int64,
    guaranteed_price_per_vcpu_h_eur_micros Int64,
    valid_from                             DateTime64(6, 'UTC'),
    valid_until                            DateTime64(6, 'UTC'),
    published_at                           DateTime64(6, 'UTC'),
    topic                                  LowCardinality(String),
    partition                              UInt32,
    offset                                 UInt64
) ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(valid_from)
ORDER BY (pool_id, valid_from, event_id)
TTL toDateTime(valid_from) + INTERVAL 400 DAY
SETTINGS merge_max_block_size = 1024, vertical_merge_algorithm_min_rows_to_activate = 1,
    vertical_merge_algorithm_min_columns_to_activate = 1,
    concurrent_part_removal_threshold = 1000000000;

-- Ledger lines per workload, UTC day and cause, each naming the event that caused it, for 7
-- years. cause is 'counterfactual' (the useful work, what the open claims asked for, at
-- guaranteed rates) or a cost: reclaimable_spend, floor_spend, fallback_spend, surplus
-- (capacity running beyond what was asked for), wasted_work, headroom, checkpoint_storage,
-- footprint, idle_floor (reservations' cost nothing ran on: workload '(platform)'). Net
-- saving = counterfactual - every cost (ADR-26); see docs/accounting.md. `decided_by` names the
-- decision that launched the instance (a reservation, for the idle floor); a correction line's
-- event is the late fact (a rate card, claim, launch or end) that re-priced what it touches.
-- `batch`: the writer's batch that wrote the line (0004_batches.sql).
CREATE TABLE IF NOT EXISTS ledger_lines (
    workload_id       LowCardinality(String),
    day               Date,
    cause             LowCardinality(String),
    event_id          UUID,
    amount_eur_micros Int64,
    quantity          Float64,
    unit              LowCardinality(String),
    pool_id           LowCardinality(String),
    purchase_model    LowCardinality(String),
    instance_id       String,
    event_type        LowCardinality(String),
    occurred_at       DateTime64(6, 'UTC'),
    rule              LowCardinality(String),
    decided_by        String,
    batch             UInt64
) ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(day)
ORDER BY (workload_id, day, cause, event_id)
TTL day + INTERVAL 7 YEAR
SETTINGS merge_max_block_size = 1024, vertical_merge_algorithm_min_rows_to_activate = 1,
    vertical_merge_algorithm_min_columns_to_activate = 1,
    concurrent_part_removal_threshold = 1000000000;

-- What the ledger priced from the rate cards (usage intervals, wasted work), with what else
-- the price depends on (the useful vCPU of each piece of a usage interval), at its position in
-- the log: a rate card arriving after events it prices re-prices them from here. One row per
-- batch that priced or re-priced an item (a late claim, launch or end re-prices a usage
-- interval with other pieces): the row of the highest batch is the item as it stands, and
-- deleting a killed batch's rows leaves the item as the batch before had it (0004_batches.sql).
CREATE TABLE IF NOT EXISTS priced_facts (
    event_id    UUID,
    event_type  LowCardinality(String),
    occurred_at DateTime64(6, 'UTC'),
    pool_id     LowCardinality(String),
    from_us     Int64,
    to_us       Int64,
    record      String,
    payload     String,
    pieces      Array(Tuple(Int64, Int64, Int64)),
    decided_by  String,
    topic       LowCardinality(String),
    partition   UInt32,
    offset      UInt64,
    batch       UInt64
) ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(occurred_at)
ORDER BY (pool_id, to_us, event_id, batch)
TTL toDateTime(occurred_at) + INTERVAL 400 DAY
SETTINGS merge_max_block_size = 1024, vertical_merge_algorithm_min_rows_to_activate = 1,
    vertical_merge_algorithm_min_columns_to_activate = 1,
    concurrent_part_removal_threshold = 1000000000;

-- Facts refused past the allowed lateness (a rate card or reservation published too long after
-- the moment it applies from): never priced, reported here and dead-lettered.
CREATE TABLE IF NOT EXISTS late_facts (
    event_id        UUID,
    event_type      LowCardinality(String),
    key             String,
    occurred_at     DateTime64(6, 'UTC'),
    applies_from    DateTime64(6, 'UTC'),
    lateness_s      Float64,
    allowed_s       Int64,
    reason          String
) ENGINE = ReplacingMergeTree
ORDER BY (event_id)
SETTINGS concurrent_part_removal_threshold = 1000000000;

-- Where the ledger has read up to, per partition (inserted after the batch's rows: a crash in
-- between re-inserts the batch, which the sorting keys above collapse).
CREATE TABLE IF NOT EXISTS consumed_offsets (
    projection_name LowCardinality(String),
    topic       String,
    partition   UInt32,
    next_offset UInt64
) ENGINE = ReplacingMergeTree(next_offset)
ORDER BY (projection_name, topic, partition)
SETTINGS concurrent_part_removal_threshold = 1000000000;

-- Net saving per workload and day: the counterfactual minus every cost line.
CREATE VIEW IF NOT EXISTS net_saving AS
SELECT
    workload_id,
    day,
    sumIf(amount_eur_micros, cause = 'counterfactual') AS counterfactual_eur_micros,
    sumIf(amount_eur_micros, cause != 'counterfactual') AS cost_eur_micros,
    counterfactual_eur_micros - cost_eur_micros AS net_saving_eur_micros
FROM ledger_lines FINAL
GROUP BY workload_id, day;

-- Cost lines per workload, day and cause (the counterfactual as a line of its own).
CREATE VIEW IF NOT EXISTS ledger_by_cause AS
SELECT workload_id, day, cause, sum(amount_eur_micros) AS amount_eur_micros,
       count() AS lines
FROM ledger_lines FINAL
GROUP BY workload_id, day, cause;
