-- Fleet state (DESIGN.md §5, ADR-11): the PostgreSQL projection of the event log.
-- Everything lives in the schema named by the migrator (default "spotcap"), so that a rebuild
-- can drop it whole. Times are timestamptz (UTC), money is bigint micro-euros.

-- Where each projection has read up to: the next offset of each partition, written in the same
-- transaction as the rows that the records before it produced (exactly-once effect).
CREATE TABLE consumed_offsets (
    projection  text   NOT NULL,
    topic       text   NOT NULL,
    partition   int    NOT NULL,
    next_offset bigint NOT NULL CHECK (next_offset >= 0),
    PRIMARY KEY (projection, topic, partition)
);

-- The journal: every event the fleet projection applied (market feeds excepted: rate cards and
-- forward capacity only move the pools' latest values). It is the idempotency guard (an event
-- id is applied once) and the material of `spotcap why` (causation and correlation ids).
CREATE TABLE events (
    event_id       uuid        PRIMARY KEY,
    event_type     text        NOT NULL,
    occurred_at    timestamptz NOT NULL,
    recorded_at    timestamptz NOT NULL,
    key            text        NOT NULL,
    causation_id   uuid,
    correlation_id text,
    producer       text        NOT NULL,
    topic          text        NOT NULL,
    partition      int         NOT NULL,
    "offset"       bigint      NOT NULL,
    payload        jsonb       NOT NULL
);
CREATE INDEX events_causation ON events (causation_id) WHERE causation_id IS NOT NULL;
CREATE INDEX events_key ON events (key, occurred_at);
CREATE INDEX events_type ON events (event_type, occurred_at);
CREATE INDEX events_correlation ON events (correlation_id) WHERE correlation_id IS NOT NULL;

-- Pools: the catalogue entry and, per group of fields, the latest value by its own time
-- (rate card by validity start, forward capacity, ranking and exclusion by event time).
CREATE TABLE pools (
    pool_id                                text PRIMARY KEY,
    sku_family                             text,
    instance_vcpu                          int,
    hall                                   text,
    host_aggregate                         text,
    purchase_model                         text,
    correlation_group                      text,
    capacity_vcpu                          int,
    attributes                             jsonb,
    registered_at                          timestamptz,
    registered_event_id                    uuid,
    price_per_vcpu_h_eur_micros            bigint,
    guaranteed_price_per_vcpu_h_eur_micros bigint,
    rate_valid_from                        timestamptz,
    rate_valid_until                       timestamptz,
    rate_event_id                          uuid,
    forward_available_vcpu                 int,
    forward_horizon_s                      int,
    forward_at                             timestamptz,
    forward_event_id                       uuid,
    rank                                   int,
    pool_count                             int,
    score                                  double precision,
    ranking_id                             text,
    ranked_at                              timestamptz,
    rank_event_id                          uuid,
    excluded                               boolean NOT NULL DEFAULT false,
    exclusion_changed_at                   timestamptz,
    exclusion_event_id                     uuid
);

-- Every ranking the scorer published, with its inputs.
CREATE TABLE rankings (
    event_id                    uuid PRIMARY KEY,
    ranking_id                  text NOT NULL,
    pool_id                     text NOT NULL,
    rank                        int  NOT NULL,
    pool_count                  int  NOT NULL,
    score                       double precision NOT NULL,
    available_vcpu              int  NOT NULL,
    observed_interruption_per_h double precision NOT NULL,
    price_per_vcpu_h_eur_micros bigint NOT NULL,
    correlation_group           text NOT NULL,
    window_s                    int  NOT NULL,
    input_event_ids             uuid[] NOT NULL,
    occurred_at                 timestamptz NOT NULL
);
CREATE INDEX rankings_ranking ON rankings (ranking_id);
CREATE INDEX rankings_pool ON rankings (pool_id, occurred_at);

-- Exclusions with their evidence, and readmissions.
CREATE TABLE exclusions (
    event_id                    uuid PRIMARY KEY,
    pool_id                     text NOT NULL,
    reason                      text NOT NULL,
    observed_interruption_per_h double precision NOT NULL,
    expected_interruption_per_h double precision NOT NULL,
    reclaimed_instances         int  NOT NULL,
    window_start_at             timestamptz NOT NULL,
    window_end_at               timestamptz NOT NULL,
    evidence_event_ids          uuid[] NOT NULL,
    occurred_at                 timestamptz NOT NULL
);
CREATE INDEX exclusions_pool ON exclusions (pool_id, occurred_at);

CREATE TABLE readmissions (
    event_id                    uuid PRIMARY KEY,
    pool_id                     text NOT NULL,
    exclusion_event_id          uuid,
    healthy_s                   int  NOT NULL,
    observed_interruption_per_h double precision NOT NULL,
    expected_interruption_per_h double precision NOT NULL,
    evidence_event_ids          uuid[] NOT NULL,
    occurred_at                 timestamptz NOT NULL
);
CREATE INDEX readmissions_pool ON readmissions (pool_id, occurred_at);

-- Instances: one row each, its state derived from which facts are known (see
-- projections/postgres/lifecycle.py), so that the row does not depend on arrival order.
CREATE TABLE instances (
    instance_id              text PRIMARY KEY,
    state                    text NOT NULL CHECK (state IN ('requested', 'running', 'advised',
                                 'noticed', 'draining', 'drained', 'lost', 'replaced', 'deleted')),
    workload_id              text,
    pool_id                  text,
    vcpu                     int,
    purchase_model           text,
    tags                     jsonb,
    launched_at              timestamptz,
    launch_event_id          uuid,
    advised_at               timestamptz,
    expected_reclaim_at      timestamptz,
    advisory_event_id        uuid,
    noticed_at               timestamptz,
    deadline_at              timestamptz,
    notice_source            text,
    notice_event_id          uuid,
    drain_started_at         timestamptz,
    drain_path               text,
    drain_trigger            text,
    drain_budget_s           int,
    drain_started_event_id   uuid,
    drained_at               timestamptz,
    drain_duration_s         double precision,
    drain_verified           boolean,
    drain_overrun            boolean,
    drain_fell_back_to_local boolean,
    drain_deadline_margin_s  double precision,
    drained_event_id         uuid,
    checkpoint_generation    int,
    checkpoint_at            timestamptz,
    checkpoint_bytes         bigint,
    checkpoint_final         boolean,
    checkpoint_event_id      uuid,
    lost_at                  timestamptz,
    loss_reason              text,
    lost_with_notice         boolean,
    lost_event_id            uuid,
    wasted_at                timestamptz,
    wasted_vcpu_s            double precision,
    wasted_event_id          uuid,
    deleted_at               timestamptz,
    deleted_by               text,
    deleted_principal        text,
    deleted_reason           text,
    deleted_event_id         uuid,
    replacement_at           timestamptz,
    replacement_event_id     uuid,
    last_event_at            timestamptz NOT NULL
);
CREATE INDEX instances_state ON instances (state);
CREATE INDEX instances_workload ON instances (workload_id);
CREATE INDEX instances_pool ON instances (pool_id);

-- Each event that touched an instance, with the state it implies (null: no state change).
-- The view instance_anomalies reads it in event-time order.
CREATE TABLE instance_events (
    event_id      uuid PRIMARY KEY,
    instance_id   text NOT NULL,
    event_type    text NOT NULL,
    implied_state text,
    occurred_at   timestamptz NOT NULL
);
CREATE INDEX instance_events_instance ON instance_events (instance_id, occurred_at);

-- Workloads: the contract in force (the highest version), and every published version.
CREATE TABLE workloads (
    workload_id                  text PRIMARY KEY,
    contract_version             int  NOT NULL,
    owner                        text NOT NULL,
    tier                         text NOT NULL,
    drain_budget_s               int  NOT NULL,
    restart_semantics            text NOT NULL,
    checkpoint_on_notice         boolean NOT NULL,
    proactive_drain_on_advisory  boolean NOT NULL,
    tolerated_interruptions_per_h double precision NOT NULL,
    target_vcpu                  int  NOT NULL,
    floor_vcpu                   int  NOT NULL,
    spend_cap_eur_micros         bigint NOT NULL,
    approver                     text NOT NULL,
    priority                     int  NOT NULL,
    checkpoint_interval_s        int,
    deadline_at                  timestamptz,
    scheduler                    text,
    checkpoint_method            text,
    checkpoint_size_bytes        bigint,
    source_commit                text,
    source_path                  text,
    published_at                 timestamptz NOT NULL,
    contract_event_id            uuid NOT NULL
);

CREATE TABLE contracts (
    event_id         uuid PRIMARY KEY,
    workload_id      text NOT NULL,
    contract_version int  NOT NULL,
    contract         jsonb NOT NULL,
    occurred_at      timestamptz NOT NULL
);
CREATE INDEX contracts_workload ON contracts (workload_id, contract_version);

-- Capacity claims: opened and closed facts on one row.
CREATE TABLE claims (
    claim_id         text PRIMARY KEY,
    workload_id      text NOT NULL,
    scheduler        text,
    cluster          text,
    requested_vcpu   int,
    open_reason      text,
    opened_at        timestamptz,
    opened_event_id  uuid,
    fulfilled_vcpu   int,
    outcome          text,
    close_reason     text,
    closed_at        timestamptz,
    closed_event_id  uuid
);
CREATE INDEX claims_workload ON claims (workload_id);

-- Placements and their allocations; replacements.
CREATE TABLE placements (
    event_id                           uuid PRIMARY KEY,
    workload_id                        text   NOT NULL,
    requested_vcpu                     int    NOT NULL,
    floor_vcpu                         int    NOT NULL,
    cost_per_h_eur_micros              bigint NOT NULL,
    price_first_cost_per_h_eur_micros  bigint NOT NULL,
    premium_per_h_eur_micros           bigint NOT NULL,
    excluded_pool_ids                  text[] NOT NULL,
    claim_id                           text,
    ranking_id                         text,
    occurred_at                        timestamptz NOT NULL
);
CREATE INDEX placements_workload ON placements (workload_id, occurred_at);

CREATE TABLE placement_allocations (
    event_id       uuid NOT NULL,
    pool_id        text NOT NULL,
    purchase_model text NOT NULL,
    vcpu           int  NOT NULL,
    PRIMARY KEY (event_id, pool_id, purchase_model)
);
CREATE INDEX placement_allocations_pool ON placement_allocations (pool_id);

CREATE TABLE replacements (
    event_id             uuid PRIMARY KEY,
    workload_id          text   NOT NULL,
    replaces_instance_id text   NOT NULL,
    vcpu                 int    NOT NULL,
    purchase_model       text   NOT NULL,
    excluded_pool_ids    text[] NOT NULL,
    occurred_at          timestamptz NOT NULL
);
CREATE INDEX replacements_instance ON replacements (replaces_instance_id);

-- Fallback decisions (by authority), returns and approvers' reviews.
CREATE TABLE fallbacks (
    event_id         uuid PRIMARY KEY,
    workload_id      text   NOT NULL,
    kind             text   NOT NULL,
    vcpu             int    NOT NULL,
    spend_eur_micros bigint NOT NULL,
    cap_eur_micros   bigint NOT NULL,
    approver         text   NOT NULL,
    priority         int    NOT NULL,
    reason           text   NOT NULL,
    occurred_at      timestamptz NOT NULL
);
CREATE INDEX fallbacks_workload ON fallbacks (workload_id, occurred_at);

CREATE TABLE fallback_returns (
    event_id          uuid PRIMARY KEY,
    workload_id       text NOT NULL,
    vcpu              int  NOT NULL,
    dwell_s           int  NOT NULL,
    fallback_event_id uuid,
    occurred_at       timestamptz NOT NULL
);

CREATE TABLE fallback_reviews (
    event_id                  uuid PRIMARY KEY,
    workload_id               text   NOT NULL,
    approver                  text   NOT NULL,
    outcome                   text   NOT NULL,
    vcpu                      int    NOT NULL,
    approved_spend_eur_micros bigint NOT NULL,
    valid_until_at            timestamptz,
    note                      text,
    occurred_at               timestamptz NOT NULL
);

-- The transactional outbox of capacity actions (ADR-25): written in the same transaction as
-- the projection rows, shipped to the audit topic by the relay, which marks them sent. The
-- action id is the id the audit record carries, so a resend is recognisable.
CREATE TABLE outbox (
    action_id     uuid PRIMARY KEY,
    seq           bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
    event_id      uuid NOT NULL,
    action        text NOT NULL,
    workload_id   text,
    occurred_at   timestamptz NOT NULL,
    record        jsonb NOT NULL,
    sent_at       timestamptz,
    send_attempts int NOT NULL DEFAULT 0
);
CREATE INDEX outbox_unsent ON outbox (seq) WHERE sent_at IS NULL;
