-- Which log the ledger was built from: the identity of every topic it has consumed
-- (projections/provenance.py; the fleet state keeps the same in PostgreSQL).
CREATE TABLE IF NOT EXISTS consumed_topics (
    projection_name LowCardinality(String),
    topic       String,
    topic_id    String,
    recorded_at DateTime64(6, 'UTC')
) ENGINE = ReplacingMergeTree(recorded_at)
ORDER BY (projection_name, topic)
SETTINGS concurrent_part_removal_threshold = 1000000000;
