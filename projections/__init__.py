"""The projections: state materialised from the log, and the read side over it.

What it owns: the PostgreSQL fleet state (`postgres/`), the ClickHouse ledger (`ledger/`), where
their stores are and how to open them (`stores`), bringing them up to date with the log and
rebuilding them (`catchup`, `write_behind`; the live fleet processor), following the log as a
service (`follow`: `spotcap run projections`), relaying the outbox to the audit topic (`relay`:
`spotcap run relay`), and the read side the command line and the console share (`read/`: SRE
queries, `why`, savings, lag).

What it may import: `schemas`, `contracts`, `streams` (the catch-up reads the log); psycopg,
chdb, clickhouse-connect, pyarrow. Who calls it: the simulator's demo, replay, the console and
the command line (`spotcap project`, `rebuild`, `run projections`, `run relay`, `query`, `why`,
`report`, `db`).
"""
