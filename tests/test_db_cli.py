"""`spotcap db`: migrations through the CLI, on the embedded server of a home and on a DSN."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from infra import servers
from projections.catchup import PROJECTIONS, RunReport
from projections.follow import FollowReport
from projections.postgres.migrate import Migration, MigrationStatus, migrate_report, status_rows
from spotcap.cli import main


def test_db_migrate_starts_the_homes_server_and_is_idempotent(tmp_path: Path) -> None:
    home = ["--home", str(tmp_path / "home")]
    runner = CliRunner()
    try:
        first = runner.invoke(main, [*home, "db", "migrate", "--json"])
        assert first.exit_code == 0, first.output
        report = json.loads(first.output)
        assert report["applied"] == [
            "0001_fleet_state",
            "0002_views",
            "0003_rankings_journal",
            "0004_instance_events_view",
            "0005_consumed_topics",
            "0006_ranked_guaranteed_rate",
        ]
        second = runner.invoke(main, [*home, "db", "migrate"])
        assert second.exit_code == 0 and "up to date: 6 migrations applied" in second.output
        status = runner.invoke(main, [*home, "db", "status", "--json"])
        assert json.loads(status.output)["embedded"]["running"] is True
    finally:
        stopped = runner.invoke(main, [*home, "db", "stop"])
    assert "stopped the embedded PostgreSQL" in stopped.output
    assert "no embedded PostgreSQL runs" in runner.invoke(main, [*home, "db", "stop"]).output


def test_db_migrate_on_a_dsn(postgres: servers.Server, tmp_path: Path) -> None:
    runner = CliRunner()
    args = ["--home", str(tmp_path), "db", "migrate", "--postgres", postgres.address]
    assert runner.invoke(main, args).exit_code == 0
    assert "up to date" in runner.invoke(main, args).output


def test_an_unreachable_database_is_one_sentence(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main,
        ["--home", str(tmp_path), "db", "migrate", "--postgres", "postgresql://u:pw@127.0.0.1:1/x"],
    )
    assert result.exit_code == 1
    assert "cannot connect to PostgreSQL at postgresql://u:***@127.0.0.1:1/x" in result.output
    assert "Traceback" not in result.output


def test_what_project_and_db_print_as_json() -> None:
    assert MigrationStatus(3, "outbox", applied=False).as_json() == {
        "version": 3,
        "name": "outbox",
        "applied": False,
    }
    report = RunReport("ledger", events=1_000, seconds=0.12345, unpriced=2).as_json()
    assert report == {"projection": "ledger", "events": 1_000, "seconds": 0.123,
                      "events_per_s": 8100, "unpriced": 2}  # fmt: skip
    assert RunReport("fleet", events=0, seconds=0.0).as_json()["events_per_s"] == 0


def test_db_migrate_json_and_db_status_rows_name_each_migration() -> None:
    applied = [Migration(2, "ledger_state", "SELECT 1")]
    states = [MigrationStatus(1, "fleet", applied=True), MigrationStatus(2, "ledger_state", True),
              MigrationStatus(3, "outbox", applied=False)]  # fmt: skip
    assert applied[0].label == "0002_ledger_state"
    assert migrate_report("postgresql://u:***@h/x", applied, states) == {
        "database": "postgresql://u:***@h/x",
        "applied": ["0002_ledger_state"],
        "migrations": [s.as_json() for s in states],
    }
    assert status_rows(states) == [("0001", "fleet", "yes"), ("0002", "ledger_state", "yes"),
                                   ("0003", "outbox", "[yellow]no[/]")]  # fmt: skip


def test_a_run_of_the_projections_in_words() -> None:
    report = RunReport("ledger", events=12_345, seconds=2.0, unpriced=2)
    assert report.describe(rebuilt=True, source="embedded log at /h/log") == (
        "ledger (ClickHouse) rebuilt: 12,345 events in 2.0 s (6,172 events/s) from the embedded"
        " log at /h/log; 2 events could not be priced (dead-lettered)"
    )
    fleet = RunReport("fleet", events=0, seconds=0.0)
    assert fleet.describe(rebuilt=False, source="log") == (
        "fleet state (PostgreSQL) brought up to date: 0 events in 0.0 s (0 events/s) from the log"
    )
    assert PROJECTIONS["postgres"] == PROJECTIONS["fleet"] == ("fleet",)
    assert PROJECTIONS["clickhouse"] == ("ledger",) and PROJECTIONS["all"] == ("fleet", "ledger")
    followed = FollowReport(fleet_events=10, ledger_events=20, ledger_rounds=3, unpriced=1)
    assert followed.describe() == (
        "fleet state: 10 records taken; ledger: 20 events in 3 rounds, 1 unpriced"
    )
