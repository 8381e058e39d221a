-- The rankings and the rate cards are derived from the events as they are inserted (each insert
-- into `events` is pushed through these views), so a batch is one insert of its events instead of
-- three. Each view writes the columns of its table from the payload's JSON, parsed once per row;
-- a re-inserted batch derives the same rows again, which the tables' sorting keys collapse.

CREATE MATERIALIZED VIEW IF NOT EXISTS rankings_from_events TO rankings AS
WITH JSONExtract(payload, 'Tuple(ranking_id String, pool_id String, rank UInt32, pool_count UInt32,
    score Float64, available_vcpu Int64, observed_interruption_per_h Float64,
    price_per_vcpu_h_eur_micros Int64, correlation_group String, window_s UInt32,
    input_event_ids Array(UUID))') AS p
SELECT
    event_id,
    tupleElement(p, 'ranking_id') AS ranking_id,
    tupleElement(p, 'pool_id') AS pool_id,
    tupleElement(p, 'rank') AS rank,
    tupleElement(p, 'pool_count') AS pool_count,
    tupleElement(p, 'score') AS score,
    tupleElement(p, 'available_vcpu') AS available_vcpu,
    tupleElement(p, 'observed_interruption_per_h') AS observed_interruption_per_h,
    tupleElement(p, 'price_per_vcpu_h_eur_micros') AS price_per_vcpu_h_eur_micros,
    tupleElement(p, 'correlation_group') AS correlation_group,
    tupleElement(p, 'window_s') AS window_s,
    tupleElement(p, 'input_event_ids') AS input_event_ids,
    occurred_at
FROM events
WHERE event_type = 'pool_ranked';

CREATE MATERIALIZED VIEW IF NOT EXISTS rate_cards_from_events TO rate_cards AS
WITH JSONExtract(payload, 'Tuple(pool_id String, purchase_model String,
    price_per_vcpu_h_eur_micros Int64, guaranteed_price_per_vcpu_h_eur_micros Int64,
    valid_from_at Int64, valid_until_at Int64)') AS p
SELECT
    event_id,
    tupleElement(p, 'pool_id') AS pool_id,
    tupleElement(p, 'purchase_model') AS purchase_model,
    tupleElement(p, 'price_per_vcpu_h_eur_micros') AS price_per_vcpu_h_eur_micros,
    tupleElement(p, 'guaranteed_price_per_vcpu_h_eur_micros')
        AS guaranteed_price_per_vcpu_h_eur_micros,
    fromUnixTimestamp64Micro(tupleElement(p, 'valid_from_at'), 'UTC') AS valid_from,
    fromUnixTimestamp64Micro(tupleElement(p, 'valid_until_at'), 'UTC') AS valid_until,
    occurred_at AS published_at,
    topic,
    partition,
    offset
FROM events
WHERE event_type = 'rate_card';
