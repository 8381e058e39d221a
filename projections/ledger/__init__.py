"""The ClickHouse ledger (DESIGN.md §5, ADR-26): every event, the rankings, and the cost lines
per workload, day and cause, priced by the recorded accounting rule (`rule.py`)."""
