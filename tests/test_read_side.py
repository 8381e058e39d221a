"""The projections materialised from a demo log: an incremental run (the fleet state as a live
processor on the chain) equals a rebuild through the merged history row for row; the read side
(query, why, report savings) answers from them."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from projections.catchup import fleet_processor
from projections.ledger.store import ChdbStore
from projections.postgres.connection import Connection
from projections.postgres.migrate import drop, migrate
from projections.postgres.writer import FleetWriter
from spotcap.cli import main
from spotcap.config import Settings
from spotcap.wiring import make_codec, open_log, stores
from streams.topics import topic_name
from tests.projection_support import dump_fleet

pytestmark = pytest.mark.slow


class Home:
    def __init__(self, root: Path) -> None:
        self.settings = Settings.load(home=root, region="demo")
        self.args = ["--home", str(root), "--region", "demo"]

    def cli(self, *args: str) -> str:
        result = CliRunner().invoke(main, [*self.args, *args], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return result.output

    def json(self, *args: str) -> Any:
        """The command's --json, from its stdout alone (a notice may go to stderr)."""
        result = CliRunner().invoke(main, [*self.args, *args, "--json"], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)


def ledger_dump(store: ChdbStore) -> dict[str, list[Any]]:
    out = {}
    for table, order in (("events", "event_id"), ("rankings", "event_id"),
                         ("ledger_lines", "workload_id, day, cause, event_id")):  # fmt: skip
        out[table] = store.query(f"SELECT * FROM {table} FINAL ORDER BY {order}")
    return out


def run_processor_to_end(home: Home, conn: Connection) -> None:
    """The fleet state's live processor, run until it has applied everything in the log."""
    log = open_log(home.settings)
    writer = FleetWriter(conn)
    processor = fleet_processor(log, make_codec(home.settings), home.settings.region, writer)
    try:
        ends = {}
        for logical in ("lifecycle", "market", "demand", "decisions", "usage"):
            name = topic_name("demo", logical)
            ends.update({(name, p): o for p, o in log.end_offsets(name).items() if o})
        for _ in range(10_000):
            processor.run_once()
            stored = writer.stored_offsets()
            if all(stored.get(tp, 0) >= end for tp, end in ends.items()):
                break
        else:
            raise AssertionError("the processor did not catch up")
    finally:
        processor.close()
        log.close()


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory, chdb_path: Path) -> Iterator[Home]:
    h = Home(tmp_path_factory.mktemp("read-side"))
    # The stand-in's run: the queries below expect what it does (losses left lost, no
    # exclusion); the deciders' demo is tested in tests/test_loop_replay.py.
    h.cli(
        "demo",
        "--days",
        "0.5",
        "--workloads",
        "40",
        "--no-projections",
        "--orchestrator",
        "baseline",
    )
    try:
        yield h
    finally:
        stores(h.settings).stop_embedded_postgres()


@pytest.fixture(scope="module")
def incremental(home: Home) -> dict[str, Any]:
    conn = stores(home.settings).open_fleet()
    run_processor_to_end(home, conn)
    home.cli("project", "ledger")
    store = stores(home.settings).open_ledger()
    assert isinstance(store, ChdbStore)
    return {"fleet": dump_fleet(conn), "ledger": ledger_dump(store)}


def test_a_rebuild_equals_the_incremental_projections_row_for_row(
    home: Home, incremental: dict[str, Any]
) -> None:
    report = home.json("rebuild", "all")
    assert [r["projection"] for r in report] == ["fleet", "ledger"]
    assert report[0]["events"] > 10_000
    conn = stores(home.settings).open_fleet()
    rebuilt = dump_fleet(conn)
    for table, rows in incremental["fleet"].items():
        assert rebuilt[table] == rows, table
    store = stores(home.settings).open_ledger()
    assert isinstance(store, ChdbStore)
    assert ledger_dump(store) == incremental["ledger"]
    # Nothing is left to apply: every projection is at the log's end.
    assert all(row["lag"] == 0 for row in home.json("query", "lag"))


def test_the_live_processor_fills_a_fresh_database_under_a_group_that_read_everything(
    home: Home, incremental: dict[str, Any]
) -> None:
    """The fleet state lost (dropped and made anew) while its consumer group's commits stay at
    the log's end: the processor starts each partition the new database holds no offset for at
    the log's beginning, not at the group's commit, and the state comes back row for row."""
    conn = stores(home.settings).open_fleet(migrated=False)
    drop(conn)
    migrate(conn)
    assert not any(dump_fleet(conn).values())
    run_processor_to_end(home, conn)
    refilled = dump_fleet(conn)
    for table, rows in incremental["fleet"].items():
        assert refilled[table] == rows, table


def test_why_a_lost_instance_names_its_launch_notice_and_loss(
    home: Home, incremental: object
) -> None:
    lost = home.json("query", "instances", "--state", "lost", "--limit", "500")
    assert lost, "the demo lost no instance"
    noticed = [r for r in lost if r["noticed_at"]]
    answer = home.json("why", noticed[0]["instance_id"])
    kinds = [s["event_type"] for s in answer["steps"]]
    assert answer["kind"] == "instance"
    assert {"instance_launched", "notice_received", "instance_lost"} <= set(kinds)
    assert kinds.index("notice_received") < kinds.index("instance_lost")
    notice = answer["steps"][kinds.index("notice_received")]
    assert "reclaim notice reached" in notice["sentence"] and notice["event_id"]
    text = home.cli("why", noticed[0]["instance_id"])
    assert notice["event_id"] in text and "was lost after its notice" in text


def test_the_savings_report_adds_up_to_the_ledger(home: Home, incremental: object) -> None:
    report = home.json("report", "savings")
    workloads = report["workloads"]
    assert len(workloads) > 10
    # Issue 22: capacity beyond the claims is a cost line, and the reservations' idle part
    # is the platform's, a row of its own.
    assert {"surplus", "idle_floor"} <= set(report["total"])
    assert Decimal(report["total"]["surplus"]) > 0
    [platform] = [w for w in workloads if w["workload_id"] == "(platform)"]
    assert Decimal(platform["eur"]["idle_floor"]) > 0
    for cause, total in report["total"].items():
        assert Decimal(total) == sum(Decimal(w["eur"][cause]) for w in workloads), cause
    for w in workloads:
        eur = {k: Decimal(v) for k, v in w["eur"].items()}
        costs = sum(v for k, v in eur.items() if k not in ("counterfactual", "cost", "net_saving"))
        assert (
            eur["net_saving"]
            == eur["counterfactual"] - costs
            == eur["counterfactual"] - eur["cost"]
        )
    path, database = stores(home.settings).ledger_location()
    store = ChdbStore(path, database)
    (view,) = store.query("SELECT sum(net_saving_eur_micros) AS n FROM net_saving")
    assert Decimal(report["total"]["net_saving"]) == Decimal(view["n"]).scaleb(-6)
    one = workloads[0]["workload_id"]
    only = home.json("report", "savings", "--workload", one)
    assert [w["workload_id"] for w in only["workloads"]] == [one]


def test_queries_answer_in_tables_and_json(home: Home, incremental: object) -> None:
    pools = home.json("query", "pools")
    assert pools and {"pool_id", "price_per_vcpu_h_eur", "excluded"} <= set(pools[0])
    # Money in JSON is euros as exact decimal strings, as in the savings report.
    assert Decimal(pools[0]["price_per_vcpu_h_eur"]) > 0
    assert "pools (" in home.cli("query", "pools", "--limit", "3")
    workloads = home.json("query", "workloads")
    assert len(workloads) == 40
    running = home.json("query", "instances", "--state", "running", "--limit", "5")
    assert all(r["state"] == "running" for r in running)
    assert home.json("query", "exclusions") == []  # the stand-in orchestrator excludes nothing
    bad = CliRunner().invoke(main, [*home.args, "query", "instances", "--since", "yesterday"])
    assert bad.exit_code == 2 and "is not a date or time" in bad.output


def test_why_something_unknown_is_one_sentence(home: Home, incremental: object) -> None:
    result = CliRunner().invoke(main, [*home.args, "why", "no-such-thing"])
    assert result.exit_code == 1
    assert "nothing called 'no-such-thing' in the fleet state" in result.output


def test_the_demo_materialises_both_projections_and_says_what_to_ask(
    tmp_path: Path, chdb_path: Path
) -> None:
    h = Home(tmp_path / "demo")
    try:
        report = h.json("demo", "--days", "0.25", "--workloads", "20")
        text = Home(tmp_path / "demo2").cli("demo", "--days", "0.25", "--workloads", "20")
        stores(Home(tmp_path / "demo2").settings).stop_embedded_postgres()
    finally:
        stores(h.settings).stop_embedded_postgres()
    projected = report["projections"]
    assert [p["projection"] for p in projected["projections"]] == ["fleet", "ledger"]
    money = projected["savings_micros"]
    # 20 workloads leave most of the region's reservations idle: the platform's idle floor
    # outweighs what they save, and the net saving says so.
    assert money["net_saving"] == money["counterfactual"] - money["cost"]
    assert money["counterfactual"] > 0
    assert projected["why_examples"] and all(
        c.startswith("spotcap why ") for c in projected["why_examples"]
    )
    assert re.search(r"net saving -?€", text) and "ask why something happened:" in text
    assert f"spotcap --home {tmp_path / 'demo2'} --region demo why " in text


def test_the_columns_write_values_for_people() -> None:
    """`projections.read.columns`: nothing for a missing value, thousands separators, euros,
    UTC times, and every table's keys unique."""
    from datetime import UTC, datetime, timedelta, timezone

    from projections.read import columns as c

    assert [f(None) for f in (c.as_text, c.as_int, c.as_eur, c.as_time, c.as_float, c.as_yes)] == [
        ""
    ] * 6
    assert (c.as_int(1_234_567), c.as_eur(1_418_611_440), c.as_yes(False)) == (
        "1,234,567",
        "€1,418.61",
        "no",
    )
    east = datetime(2026, 11, 2, 9, 30, tzinfo=timezone(timedelta(hours=2)))
    assert c.as_time(east) == "2026-11-02 07:30:00" and east.astimezone(UTC).hour == 7
    for table in (c.POOLS, c.RANKINGS, c.EXCLUSIONS, c.INSTANCES, c.WORKLOADS, c.LAG):
        keys = [key for _, key, _, _ in table]
        assert len(set(keys)) == len(keys)
