-- A ranking's event is journaled once, in `rankings` (DESIGN.md §5; docs/performance.md,
-- "Projections"). The scorer ranks every pool every few minutes: pool_ranked events were six
-- in ten of the journal's rows, each stored twice (its payload as jsonb in the journal with
-- five indexes, and its columns in `rankings`). The journal's own rows move to the table
-- `journal`; `rankings` gets the envelope's fields; and `events`, the journal as every reader
-- (`spotcap why`, the waves, docs/queries.md) knows it, is now a view over both, with a
-- ranking's payload rebuilt from its columns.

ALTER TABLE events RENAME TO journal;
ALTER INDEX events_pkey RENAME TO journal_pkey;
ALTER INDEX events_causation RENAME TO journal_causation;
-- By key and by type, the journal is read for decisions and a workload's or a wave's events
-- (`spotcap why`, the counts, the waves), never for checkpoints, which are half of what is
-- left and are read through `instance_events`: those two indexes leave them out.
DROP INDEX events_key;
DROP INDEX events_type;
CREATE INDEX journal_key ON journal (key, occurred_at) WHERE event_type <> 'checkpoint_written';
CREATE INDEX journal_type ON journal (event_type, occurred_at)
    WHERE event_type <> 'checkpoint_written';
ALTER INDEX events_correlation RENAME TO journal_correlation;

ALTER TABLE rankings
    ADD COLUMN key            text,
    ADD COLUMN causation_id   uuid,
    ADD COLUMN correlation_id text,
    ADD COLUMN recorded_at    timestamptz,
    ADD COLUMN producer       text,
    ADD COLUMN topic          text,
    ADD COLUMN partition      int,
    ADD COLUMN "offset"       bigint;

-- The rankings already applied: their envelope from the journal, which then drops them.
UPDATE rankings r
SET key = j.key, causation_id = j.causation_id, correlation_id = j.correlation_id,
    recorded_at = j.recorded_at, producer = j.producer, topic = j.topic,
    partition = j.partition, "offset" = j."offset"
FROM journal j
WHERE j.event_id = r.event_id;
DELETE FROM journal WHERE event_type = 'pool_ranked';

ALTER TABLE rankings
    ALTER COLUMN key SET NOT NULL,
    ALTER COLUMN recorded_at SET NOT NULL,
    ALTER COLUMN producer SET NOT NULL,
    ALTER COLUMN topic SET NOT NULL,
    ALTER COLUMN partition SET NOT NULL,
    ALTER COLUMN "offset" SET NOT NULL;
-- What `spotcap why` reads the journal by, besides the id: a cause's effects, a wave.
CREATE INDEX rankings_causation ON rankings (causation_id) WHERE causation_id IS NOT NULL;
CREATE INDEX rankings_correlation ON rankings (correlation_id) WHERE correlation_id IS NOT NULL;

CREATE VIEW events AS
SELECT event_id, event_type, occurred_at, recorded_at, key, causation_id, correlation_id,
       producer, topic, partition, "offset", payload
FROM journal
UNION ALL
SELECT event_id, 'pool_ranked'::text, occurred_at, recorded_at, key, causation_id,
       correlation_id, producer, topic, partition, "offset",
       jsonb_build_object(
           'ranking_id', ranking_id, 'pool_id', pool_id, 'rank', rank,
           'pool_count', pool_count, 'score', score, 'available_vcpu', available_vcpu,
           'observed_interruption_per_h', observed_interruption_per_h,
           'price_per_vcpu_h_eur_micros', price_per_vcpu_h_eur_micros,
           'correlation_group', correlation_group, 'window_s', window_s,
           'input_event_ids', to_jsonb(input_event_ids))
FROM rankings;
