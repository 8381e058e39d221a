-- A batch's rows as one unit (issue 27). ClickHouse has no transaction across tables, so a
-- writer killed between a batch's inserts leaves some of its rows without its offsets. Those
-- rows are found and removed by the next writer before it prices anything
-- (projections/ledger/writer.py): every batch is numbered; before its rows it records its
-- number and the offsets it starts from here; its lines and what it priced carry the number.
-- A writer that finds the last batch recorded here starting from the stored offsets knows it
-- never stored its own offsets, and deletes that batch's lines and priced facts.

-- The last batch each projection began to store (the row of the highest number is kept).
CREATE TABLE IF NOT EXISTS ledger_batches (
    projection_name LowCardinality(String),
    batch           UInt64,
    starts          String
) ENGINE = ReplacingMergeTree(batch)
ORDER BY (projection_name)
SETTINGS concurrent_part_removal_threshold = 1000000000;

-- Ledgers made before this file have no `batch` columns: `writer.apply_ddl` adds them (to the
-- lines, and to the end of the priced facts' sorting key).
