-- Read-side views over the fleet state: what `spotcap query` and docs/queries.md use.

-- The instance state machine's allowed moves (mirrors TRANSITIONS in
-- projections/postgres/lifecycle.py; a test checks that they agree). from_state '' is "no
-- state yet".
CREATE TABLE instance_transitions (
    from_state text NOT NULL,
    to_state   text NOT NULL,
    PRIMARY KEY (from_state, to_state)
);
INSERT INTO instance_transitions (from_state, to_state) VALUES
    ('', 'running'), ('requested', 'running'),
    ('running', 'advised'), ('running', 'noticed'), ('running', 'draining'),
    ('running', 'lost'), ('running', 'deleted'),
    ('advised', 'advised'), ('advised', 'noticed'), ('advised', 'draining'),
    ('advised', 'lost'), ('advised', 'deleted'), ('advised', 'replaced'),
    ('noticed', 'noticed'), ('noticed', 'draining'), ('noticed', 'lost'),
    ('noticed', 'deleted'), ('noticed', 'replaced'),
    ('draining', 'drained'), ('draining', 'lost'), ('draining', 'deleted'),
    ('draining', 'replaced'),
    ('drained', 'lost'), ('drained', 'deleted'), ('drained', 'replaced'),
    ('replaced', 'draining'), ('replaced', 'drained'), ('replaced', 'lost'),
    ('lost', 'replaced'), ('lost', 'deleted');

-- Transitions that the state machine does not allow, found in event-time order: a step that
-- was skipped (a drain completed that never started), or a fact after the end (an advisory
-- for a lost instance). The instance row keeps the furthest state; this view says what was odd.
CREATE VIEW instance_anomalies AS
WITH ordered AS (
    SELECT event_id, instance_id, event_type, implied_state, occurred_at,
           lag(implied_state) OVER w AS from_state
    FROM instance_events
    WHERE implied_state IS NOT NULL
    WINDOW w AS (PARTITION BY instance_id ORDER BY occurred_at, event_id)
)
SELECT o.event_id, o.instance_id, o.event_type, coalesce(o.from_state, '') AS from_state,
       o.implied_state AS to_state, o.occurred_at
FROM ordered o
LEFT JOIN instance_transitions t
       ON t.from_state = coalesce(o.from_state, '') AND t.to_state = o.implied_state
WHERE t.to_state IS NULL;

-- Exclusions with their readmission (the readmission naming them, else the pool's next one).
CREATE VIEW exclusion_history AS
SELECT e.event_id, e.pool_id, e.reason, e.observed_interruption_per_h,
       e.expected_interruption_per_h, e.reclaimed_instances, e.window_start_at, e.window_end_at,
       e.evidence_event_ids, e.occurred_at AS excluded_at,
       r.event_id AS readmission_event_id, r.occurred_at AS readmitted_at, r.healthy_s
FROM exclusions e
LEFT JOIN LATERAL (
    SELECT r.event_id, r.occurred_at, r.healthy_s
    FROM readmissions r
    WHERE r.pool_id = e.pool_id
      AND (r.exclusion_event_id = e.event_id
           OR (r.exclusion_event_id IS NULL AND r.occurred_at >= e.occurred_at))
    ORDER BY (r.exclusion_event_id = e.event_id) DESC NULLS LAST, r.occurred_at, r.event_id
    LIMIT 1
) r ON true;

CREATE VIEW exclusions_active AS
SELECT h.*
FROM exclusion_history h
JOIN pools p ON p.pool_id = h.pool_id AND p.exclusion_event_id = h.event_id
WHERE p.excluded;

-- Fallback spend by authority, per workload and UTC day. Each fallback_decided carries the
-- workload's spend of the day so far including itself; its own share is the increase over the
-- previous decision of that workload and day.
CREATE VIEW fallback_spend_by_authority AS
WITH steps AS (
    SELECT workload_id, kind, event_id, occurred_at,
           (occurred_at AT TIME ZONE 'UTC')::date AS day,
           spend_eur_micros - coalesce(lag(spend_eur_micros) OVER (
               PARTITION BY workload_id, (occurred_at AT TIME ZONE 'UTC')::date
               ORDER BY occurred_at, event_id), 0) AS step_eur_micros
    FROM fallbacks
)
SELECT workload_id, day, kind,
       count(*) AS decisions,
       sum(greatest(step_eur_micros, 0))::bigint AS spend_eur_micros
FROM steps
GROUP BY workload_id, day, kind;
