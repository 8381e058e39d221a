-- A ranking names the guaranteed rate it weighed against (`pool_ranked`'s optional
-- `guaranteed_price_per_vcpu_h_eur_micros`, docs/deciders.md): a column of `rankings`, which
-- journals rankings, and a key of the payload the view `events` rebuilds from them, so that the
-- view still gives every event back as it came. Rankings applied before have none (null).

ALTER TABLE rankings ADD COLUMN guaranteed_price_per_vcpu_h_eur_micros bigint;

CREATE OR REPLACE VIEW events AS
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
           'input_event_ids', to_jsonb(input_event_ids),
           'guaranteed_price_per_vcpu_h_eur_micros', guaranteed_price_per_vcpu_h_eur_micros)
FROM rankings;
