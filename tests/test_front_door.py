"""What a newcomer and an unlucky operator meet at the front door: two commands on one home, two
regions in one home, a typo'd home, a read-only copy of a home, Ctrl-C, a store that cannot be
opened, and output read in a pipe (80 columns): each is a sentence or a readable table, never a
corrupted home, another region's data, a traceback or a cut amount."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path

import pytest

from projections.money import eur_text
from projections.stores import Stores
from streams.embedded import EmbeddedLog
from tests.cli_support import SPOTCAP, assert_one_sentence, spotcap

REPO = Path(__file__).resolve().parent.parent


def _own_env() -> dict[str, str]:
    """The environment of a person's shell: none of the suite's SPOTCAP_ settings."""
    return {k: v for k, v in os.environ.items() if not k.startswith("SPOTCAP_")}


def cli(home: Path, *args: str, region: str = "dev") -> subprocess.CompletedProcess[str]:
    return spotcap("--home", str(home), "--region", region, *args, timeout_s=900)


@pytest.fixture(scope="module")
def demo_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A home with a short demo of region dev in it, projections included."""
    home = tmp_path_factory.mktemp("front") / "home"
    made = cli(home, "demo", "--days", "0.2", "--workloads", "30", "--json")
    assert made.returncode == 0, made.stderr[-2000:]
    try:
        yield home
    finally:
        Stores(home).stop_embedded_postgres()


@pytest.fixture
def read_only(tmp_path: Path) -> Iterator[Callable[[Path], Path]]:
    """A read-only view of a folder: a read-only bind mount (the machine's own file system
    refuses every write to it, for root too)."""
    mounts: list[Path] = []

    def view(source: Path) -> Path:
        target = tmp_path / f"read-only-{len(mounts)}"
        target.mkdir()
        for command in (["mount", "--bind", str(source), str(target)],
                        ["mount", "-o", "remount,ro,bind", str(target)]):  # fmt: skip
            done = subprocess.run(command, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                pytest.fail(f"cannot make a read-only view for the test: {done.stderr}")
        mounts.append(target)
        return target

    yield view
    for target in mounts:
        subprocess.run(["umount", str(target)], check=False)


# -- two commands on one home ------------------------------------------------------------------


def test_a_second_fresh_demo_is_refused_while_the_first_runs(tmp_path: Path) -> None:
    home = tmp_path / "home"
    first = subprocess.Popen(
        [SPOTCAP, "--home", str(home), "demo", "--fresh", "--days", "2", "--workloads", "20",
         "--no-compare", "--json"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=_own_env(),
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 240
        while not list((home / ".holders").glob("*.json")):
            assert time.monotonic() < deadline and first.poll() is None, "the first did not start"
            time.sleep(0.1)
        second = cli(home, "demo", "--fresh", "--days", "0.05", "--workloads", "5")
        assert_one_sentence(second, "another spotcap command is using the home", "demo --fresh")
        reading = cli(home, "query", "pools")
        assert_one_sentence(reading, "another spotcap command is using the home")
        assert first.wait(timeout=900) == 0, first.stderr.read() if first.stderr else ""
        assert not list((home / ".holders").glob("*.json")), "a holder outlived its command"
        assert cli(home, "query", "pools", "--limit", "1").returncode == 0
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
        Stores(home).stop_embedded_postgres()


def test_a_projection_over_a_replaced_log_refuses(tmp_path: Path) -> None:
    home = tmp_path / "home"
    try:
        assert cli(home, "demo", "--days", "0.1", "--workloads", "10").returncode == 0
        replaced = cli(home, "demo", "--fresh", "--days", "0.05", "--workloads", "8",
                       "--no-projections")  # fmt: skip
        assert replaced.returncode == 0, replaced.stderr
        for which in ("fleet", "ledger"):
            refused = cli(home, "project", which)
            assert_one_sentence(refused, "was built from another log", f"rebuild {which}")
        rebuilt = cli(home, "rebuild", "--json")
        assert rebuilt.returncode == 0, rebuilt.stderr
        assert cli(home, "project").returncode == 0
    finally:
        Stores(home).stop_embedded_postgres()


# -- regions, a missing home, a read-only home --------------------------------------------------


def test_another_region_in_a_home_is_refused_and_never_shown(demo_home: Path) -> None:
    other = cli(demo_home, "demo", "--days", "0.05", "--workloads", "5", region="eu")
    assert_one_sentence(other, "holds region dev, not eu")
    assert "eu.lifecycle" not in EmbeddedLog(demo_home / "log").topics(), "it ran before refusing"
    for args in (["query", "pools"], ["query", "workloads"], ["report", "savings"],
                 ["why", "ci-data-000"], ["project"]):  # fmt: skip
        assert_one_sentence(cli(demo_home, *args, region="nosuch"), "holds region dev, not nosuch")


def test_a_reading_command_on_a_missing_home_is_a_sentence(tmp_path: Path) -> None:
    missing = tmp_path / "no" / "such" / "home"
    for args in (["query", "pools"], ["why", "x"], ["report", "savings"], ["topics", "list"],
                 ["log", "cat", "lifecycle"], ["project"], ["serve", "--port", "0"],
                 ["replay", "--rules", str(REPO / "replay/rules/recorded.yaml")]):  # fmt: skip
        assert_one_sentence(cli(missing, *args), f"there is no spotcap home at {missing}")
    assert not (tmp_path / "no").exists(), "a reading command made the home"


def test_a_read_only_home_is_read_and_verified(
    demo_home: Path, read_only: Callable[[Path], Path]
) -> None:
    view = read_only(demo_home.parent) / demo_home.name
    cat = cli(view, "log", "cat", "lifecycle", "--json")
    assert cat.returncode == 0 and len(cat.stdout.splitlines()) > 100, cat.stderr
    verify = cli(view, "log", "verify")
    assert verify.returncode == 0 and "no damage" in verify.stdout, verify.stderr
    assert cli(view, "topics", "list").returncode == 0
    # What cannot run on it says so in one sentence (no traceback, no log that cannot exist).
    query = cli(view, "query", "pools")
    assert_one_sentence(query, "Read-only file system")
    named = re.search(r"read its log (\S+),", query.stderr)
    assert named is None or Path(named.group(1)).is_file(), query.stderr


def test_health_reports_a_ledger_that_cannot_be_opened(
    tmp_path: Path, read_only: Callable[[Path], Path]
) -> None:
    """`spotcap serve` on a read-only home with no ledger yet: the ledger's folder cannot be
    made, and /api/v1/health says so (200, the ledger down with the reason), not a 500."""
    (tmp_path / "copy" / "home").mkdir(parents=True)
    home = read_only(tmp_path / "copy") / "home"
    server = subprocess.Popen(
        [SPOTCAP, "--home", str(home), "serve", "--port", "0", "--log-level", "warning"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_own_env(),
    )  # fmt: skip
    try:
        assert server.stdout is not None
        first = server.stdout.readline()
        url = re.search(r"on (http://[0-9.]+:[0-9]+)", first)
        assert url, (first, server.poll())
        with urllib.request.urlopen(f"{url.group(1)}/api/v1/health", timeout=120) as answer:
            assert answer.status == 200
            health = json.loads(answer.read())
    finally:
        server.terminate()
        server.wait(timeout=60)
    assert health["status"] == "degraded" and health["stores"]["ledger"]["up"] is False
    assert "cannot be made" in health["stores"]["ledger"]["detail"]
    assert health["stores"]["fleet"]["up"] is False
    err = server.stderr.read() if server.stderr else ""
    assert "Traceback" not in err, err


# -- options, Ctrl-C -------------------------------------------------------------------------


def test_home_and_region_are_accepted_after_replay(demo_home: Path) -> None:
    rules = str(REPO / "replay/rules/recorded.yaml")
    after = spotcap("replay", "--home", str(demo_home), "--region", "dev", "--rules", rules,
                    "--json", timeout_s=900)  # fmt: skip
    assert after.returncode == 0, after.stderr
    assert json.loads(after.stdout)["rule"] == "recorded"


def test_ctrl_c_of_a_demo_exits_130_with_a_sentence(tmp_path: Path) -> None:
    home = tmp_path / "home"
    run = subprocess.Popen(
        [SPOTCAP, "--home", str(home), "demo", "--days", "30", "--workloads", "20",
         "--no-projections"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=_own_env(),
    )  # fmt: skip
    marker = home / "log" / "_runs" / "dev.json"
    deadline = time.monotonic() + 240
    while not (marker.exists() and json.loads(marker.read_text())["outcome"] == "running"):
        assert time.monotonic() < deadline and run.poll() is None, "the run did not start"
        time.sleep(0.1)
    run.send_signal(signal.SIGINT)
    code = run.wait(timeout=240)
    err = run.stderr.read() if run.stderr else ""
    assert code == 130, err
    assert "interrupted (Ctrl-C)" in err and "Traceback" not in err
    assert json.loads(marker.read_text())["outcome"] == "failed"


# -- output in a pipe ------------------------------------------------------------------------


def test_money_and_ids_are_whole_at_80_columns(demo_home: Path) -> None:
    """In a pipe (80 columns) every amount and every workload id of `report savings` is printed
    whole on one line, as its --json says it."""
    text = cli(demo_home, "report", "savings").stdout
    data = json.loads(cli(demo_home, "report", "savings", "--json").stdout)
    assert max(len(line) for line in text.splitlines()) <= 80
    lines = set(text.splitlines())
    for w in data["workloads"]:
        assert w["workload_id"] in lines, w["workload_id"]
        for cause, amount in w["eur"].items():
            if cause == "cost":  # the table shows every cost line, not their sum
                continue
            euros = eur_text(int(Decimal(amount).scaleb(6)))
            assert any(line.endswith(f" {euros}") for line in lines), (w["workload_id"], cause)
    assert "…" not in text


def test_a_limit_that_cuts_rows_says_so(demo_home: Path) -> None:
    cut = cli(demo_home, "query", "workloads", "--limit", "5")
    assert cut.returncode == 0 and "the first 5 rows only" in cut.stderr
    assert "workloads (the first 5 rows)" in cut.stdout
    whole = cli(demo_home, "query", "workloads", "--limit", "1000")
    assert "rows only" not in whole.stderr and "(30 rows)" in whole.stdout


def test_every_json_amount_is_a_decimal_string_in_euros(demo_home: Path) -> None:
    rules = str(REPO / "replay/rules/flat-guaranteed-rate.yaml")
    replayed = json.loads(cli(demo_home, "replay", "--rules", rules, "--diff", "--json").stdout)
    money = re.compile(r"^-?\d+\.\d{6}$")
    rows = replayed["diff"]["rows"]
    assert rows and all(money.match(r["delta_eur"]) for r in rows)
    assert all(money.match(v) for t in replayed["diff"]["totals"].values()
               for k, v in t.items() if k.endswith("_eur"))  # fmt: skip
    savings = json.loads(cli(demo_home, "report", "savings", "--json").stdout)
    assert all(money.match(v) for v in savings["total"].values())


def test_undecodable_records_of_log_cat_json_go_to_stderr(tmp_path: Path) -> None:
    from streams.topics import region_topics, topic_name

    log = EmbeddedLog(tmp_path / "log")
    log.apply_topics(region_topics("dev"))
    producer = log.producer()
    producer.produce(topic_name("dev", "lifecycle"), b"\x00not avro", key=b"k")
    producer.flush()
    log.close()
    result = cli(tmp_path, "log", "cat", "lifecycle", "--json")
    assert result.returncode == 0 and result.stdout == ""
    assert json.loads(result.stderr.splitlines()[0])["undecodable"].startswith("dev.lifecycle")
