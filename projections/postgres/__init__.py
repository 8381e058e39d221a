"""The PostgreSQL fleet state (DESIGN.md §5, ADR-11): migrations, pure mappers from events to
rows, the batch writer that stores offsets with the rows, and the outbox relay."""
