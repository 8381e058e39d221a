"""Every failure a person can cause, through the real `spotcap` entry point: exit status other
than 0, one readable sentence that says what to do, no traceback, and nothing good lost.

The tests run as root, which no permission bit stops: a read-only home is a read-only bind
mount in a mount namespace of its own (``unshare -m``), a home nobody may create is one under
/sys (the kernel refuses it to root too), a home under a file is what it says.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from infra import servers
from spotcap.config import Settings
from spotcap.wiring import open_log
from tests.cli_support import SPOTCAP, assert_one_sentence, spotcap

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"
CATALOGUE = EXAMPLES / "region" / "demo-region.yaml"
CONTRACT = EXAMPLES / "contracts" / "etl-nightly.yaml"
SMALL = ("--days", "0.1", "--no-projections")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _ends(home: Path) -> dict[str, int]:
    result = spotcap("--home", str(home), "topics", "list", "--json")
    assert result.returncode == 0, result.stderr
    return {row["topic"]: row["records"] for row in json.loads(result.stdout)}


@pytest.fixture(scope="module")
def demo_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A home holding a small demo run: the good data the failures must leave alone."""
    home = tmp_path_factory.mktemp("good") / "home"
    result = spotcap("--home", str(home), "demo", *SMALL)
    assert result.returncode == 0, result.stderr
    return home


# -- the home ---------------------------------------------------------------------------------


def test_a_home_that_is_a_file(tmp_path: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("mine\n")
    for result in (
        spotcap("--home", str(afile), "topics", "list"),
        spotcap("topics", "apply", env={"SPOTCAP_HOME": str(afile)}),
    ):
        assert_one_sentence(result, f"the data directory {afile} is a file", "--home")
    under = spotcap("--home", str(afile / "h"), "demo", *SMALL)
    assert_one_sentence(under, f"{afile} is a file")
    assert afile.read_text() == "mine\n"


def test_a_read_only_home_refuses_writes_and_still_reads(demo_home: Path) -> None:
    assert shutil.which("unshare"), "the read-only home needs unshare (util-linux)"
    before = _ends(demo_home)
    read_only = [
        "unshare",
        "-m",
        "sh",
        "-c",
        'mount --bind "$0" "$0" && mount -o remount,ro,bind "$0" "$0" && exec "$@"',
        str(demo_home),
    ]
    wrote = spotcap("--home", str(demo_home), "demo", "--fresh", *SMALL, prefix=read_only)
    assert_one_sentence(wrote, "read-only file system", str(demo_home))
    assert "--home" in wrote.stderr
    listed = spotcap("--home", str(demo_home), "topics", "list", prefix=read_only)
    assert listed.returncode == 0, listed.stderr
    assert _ends(demo_home) == before


def test_a_home_nobody_may_create() -> None:
    result = spotcap("--home", "/sys/spotcap-home", "topics", "apply")
    assert_one_sentence(result, "/sys/spotcap-home", "not permitted")


# -- servers ----------------------------------------------------------------------------------


def test_an_unreachable_kafka_fails_fast_and_reports_no_missing_topics(tmp_path: Path) -> None:
    kafka = f"127.0.0.1:{_free_port()}"
    listed = spotcap("--kafka", kafka, "topics", "list", timeout_s=120)
    assert_one_sentence(listed, f"Kafka at {kafka} did not answer within 10 s", "--kafka")
    assert "missing" not in listed.stdout + listed.stderr
    assert "rdkafka" not in listed.stderr  # librdkafka's own lines go to the log, at debug
    demo = spotcap("--home", str(tmp_path / "h"), "--kafka", kafka, "demo", *SMALL, timeout_s=120)
    assert_one_sentence(demo, f"Kafka at {kafka} did not answer")
    assert "rdkafka" not in demo.stderr


def test_a_broker_lost_mid_run_is_named(tmp_path: Path) -> None:
    try:
        broker = servers.start_kafka(tmp_path / "kafka")
    except servers.ServerError as error:
        pytest.fail(f"could not start Kafka:\n{error}", pytrace=False)
    try:
        run = subprocess.Popen(
            [
                SPOTCAP,
                "--home",
                str(tmp_path / "h"),
                "--kafka",
                broker.address,
                "--region",
                "lost",
                "demo",
                "--days",
                "60",
                "--no-projections",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        log = open_log(Settings.load(home=tmp_path / "h", kafka_bootstrap=broker.address))
        deadline = time.monotonic() + 180
        while True:  # stop the broker once the run is writing
            assert run.poll() is None, run.communicate()
            try:
                if sum(log.end_offsets("lost.lifecycle").values()) > 0:
                    break
            except Exception:
                pass
            assert time.monotonic() < deadline, "the demo wrote nothing within 180 s"
            time.sleep(1)
    finally:
        servers.stop(broker)
    out, err = run.communicate(timeout=300)
    result = subprocess.CompletedProcess(run.args, run.returncode, out, err)
    assert_one_sentence(result, f"Kafka at {broker.address} went away", "not acknowledged")
    assert " of 0 " not in err and "rdkafka" not in err


def test_an_unreachable_schema_registry(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{_free_port()}"
    result = spotcap(
        "--home", str(tmp_path / "h"), "demo", *SMALL, env={"SPOTCAP_SCHEMA_REGISTRY_URL": url}
    )
    assert_one_sentence(result, f"schema registry {url} is unreachable (connection refused)")


def test_a_busy_or_invalid_port(tmp_path: Path) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        busy = spotcap("--home", str(tmp_path), "notices", "serve", "--metadata-port", str(port))
    assert_one_sentence(busy, "already in use", str(port))
    invalid = spotcap("notices", "serve", "--metadata-port", "70000")
    assert_one_sentence(invalid, "70000 is not in the range", code=2)
    foreign = spotcap("notices", "serve", "--metadata-host", "192.0.2.1", "--days", "0.01")
    assert_one_sentence(foreign, "address this machine does not have")


# -- files a person wrote ---------------------------------------------------------------------


def _catalogue(tmp_path: Path, old: str, new: str, encoding: str = "utf-8") -> Path:
    text = CATALOGUE.read_text()
    assert old in text
    path = tmp_path / "catalogue.yaml"
    path.write_bytes(text.replace(old, new, 1).encode(encoding))
    return path


@pytest.mark.parametrize(
    ("old", "new", "encoding", "said"),
    [
        ("hall: hall-a", "hall: 2026-13-45", "utf-8", "2026-13-45 is not a real date"),
        ("hall: hall-a", "hall: " + "[" * 500 + "]" * 500, "utf-8", "nested more than 64"),
        ("hall: hall-a", "hall: hall-\u00e4", "latin-1", "line 10: byte 0xe4 is not UTF-8"),
        (
            "expected_interruptions_per_h: 0.02585",
            "expected_interruptions_per_h: .inf",
            "utf-8",
            "expected_interruptions_per_h: Input should be a finite number",
        ),
    ],
    ids=["impossible-date", "deep-nesting", "not-utf8", "infinite-rate"],
)
def test_a_bad_pool_catalogue(tmp_path: Path, old: str, new: str, encoding: str, said: str) -> None:
    path = _catalogue(tmp_path, old, new, encoding)
    home = tmp_path / "h"
    result = spotcap("--home", str(home), "demo", *SMALL, "--catalogue", str(path))
    assert_one_sentence(result, str(path), said)
    assert not home.exists()  # refused before anything was written


@pytest.mark.parametrize(
    ("old", "new", "said"),
    [
        ("deadline: 2026-12-01T06:00:00Z", "deadline: 2026-13-45", "2026-13-45 is not a real date"),
        ("owner: data-platform", "owner: " + "[" * 500 + "]" * 500, "nested more than 64"),
        ("target_vcpu: 800", "target_vcpu: true", "true is not a whole number"),
        ("deadline: 2026-12-01T06:00:00Z", "deadline: 2026-12-01", "2026-12-01 is not a timestamp"),
    ],
    ids=["impossible-date", "deep-nesting", "boolean", "date-not-time"],
)
def test_a_bad_contract_is_named_in_yaml_words(
    tmp_path: Path, old: str, new: str, said: str
) -> None:
    text = CONTRACT.read_text()
    assert old in text
    (tmp_path / "contracts").mkdir()
    (tmp_path / "contracts" / "etl.yaml").write_text(text.replace(old, new, 1))
    out = tmp_path / "bundles"
    result = spotcap(
        "contracts", "compile", str(tmp_path / "contracts"), "--out", str(out),
        "--pools", str(CATALOGUE), "--unsigned",
    )  # fmt: skip
    assert_one_sentence(result, "contracts refused; nothing was written")
    assert said in result.stdout + result.stderr
    assert "datetime" not in result.stdout + result.stderr
    assert "True" not in result.stdout + result.stderr
    assert not out.exists() or not any(out.iterdir())


@pytest.mark.parametrize("days", ["nan", "inf", "-inf"])
def test_days_that_are_not_a_number(tmp_path: Path, days: str) -> None:
    result = spotcap("--home", str(tmp_path / "h"), "demo", "--days", days)
    assert_one_sentence(result, f"{days} is not a finite number", code=2)


def test_an_unwritable_contracts_out_is_refused_before_the_run(tmp_path: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("")
    home = tmp_path / "h"
    result = spotcap(
        "--home", str(home), "demo", *SMALL, "--contracts-out", str(afile / "contracts")
    )
    assert_one_sentence(result, "--contracts-out", str(afile / "contracts"))
    assert not home.exists()  # the run never started


# -- make demo and what a person published ----------------------------------------------------


def test_fresh_replaces_a_demo_and_keeps_what_was_published_by_hand(tmp_path: Path) -> None:
    home = tmp_path / "h"
    assert spotcap("--home", str(home), "demo", *SMALL).returncode == 0
    again = spotcap("--home", str(home), "demo", "--fresh", *SMALL)
    assert again.returncode == 0, again.stderr
    assert "--fresh replaces" in again.stderr and "records of region dev" in again.stderr
    key = tmp_path / "key.pem"
    assert spotcap("contracts", "keygen", "--out", str(key)).returncode == 0
    published = spotcap(
        "--home", str(home), "contracts", "compile", str(EXAMPLES / "contracts"),
        "--out", str(tmp_path / "bundles"), "--pools", str(CATALOGUE), "--key", str(key),
        "--publish",
    )  # fmt: skip
    assert published.returncode == 0, published.stderr
    before = _ends(home)
    refused = spotcap("--home", str(home), "demo", "--fresh", *SMALL)
    assert_one_sentence(refused, "--fresh would delete", "that no demo run wrote", "dev.demand")
    assert _ends(home) == before


def test_a_second_demo_on_kafka_hints_no_fresh(kafka: servers.Server, tmp_path: Path) -> None:
    args = ("--home", str(tmp_path / "h"), "--kafka", kafka.address, "--region", "hint")
    assert spotcap(*args, "demo", *SMALL).returncode == 0
    again = spotcap(*args, "demo", *SMALL)
    assert_one_sentence(again, "already holds")
    assert "--fresh" not in again.stderr and "--region" in again.stderr
