-- An instance's events are read from the journal (docs/performance.md, "Projections"). The
-- table `instance_events` repeated, for every instance event (a third of the journal's rows,
-- checkpoints included), its id, type and time with the instance's id, in a heap and two
-- indexes that the writer filled on each batch. It is now a view over the journal with the same
-- columns and rows: the instance's id from the payload (a replacement's is the instance it
-- replaces), the state the event implies (`IMPLIED_STATE` in projections/postgres/lifecycle.py;
-- a test checks that they agree), read by `spotcap why` through one expression index.

DROP VIEW instance_anomalies;
DROP TABLE instance_events;

CREATE INDEX journal_instance ON journal (
    (CASE event_type WHEN 'replacement_requested' THEN payload->>'replaces_instance_id'
                     ELSE payload->>'instance_id' END),
    occurred_at)
WHERE event_type IN ('instance_launched', 'advisory', 'notice_received', 'drain_started',
                     'drain_completed', 'instance_lost', 'instance_deleted',
                     'replacement_requested', 'checkpoint_written', 'work_wasted');

CREATE VIEW instance_events AS
SELECT event_id,
       CASE event_type WHEN 'replacement_requested' THEN payload->>'replaces_instance_id'
                       ELSE payload->>'instance_id' END AS instance_id,
       event_type,
       CASE event_type
           WHEN 'instance_launched' THEN 'running'
           WHEN 'advisory' THEN 'advised'
           WHEN 'notice_received' THEN 'noticed'
           WHEN 'drain_started' THEN 'draining'
           WHEN 'drain_completed' THEN 'drained'
           WHEN 'instance_lost' THEN 'lost'
           WHEN 'instance_deleted' THEN 'deleted'
           WHEN 'replacement_requested' THEN 'replaced'
       END AS implied_state,
       occurred_at
FROM journal
WHERE event_type IN ('instance_launched', 'advisory', 'notice_received', 'drain_started',
                     'drain_completed', 'instance_lost', 'instance_deleted',
                     'replacement_requested', 'checkpoint_written', 'work_wasted');

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
