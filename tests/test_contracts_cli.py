"""``spotcap contracts``: compile, verify and keygen through click, publishing to a real log."""

from __future__ import annotations

import hashlib
import json
import shutil
import stat
from datetime import UTC, datetime
from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result

from contracts.signing import key_id_of, load_public_key
from schemas.codec import Codec
from schemas.errors import EncodeError
from schemas.events import ContractPublished
from spotcap.cli.contracts import contracts
from spotcap.config import Settings
from streams.embedded import EmbeddedLog
from streams.log import LogError
from streams.schema_store import load_schemas
from streams.topics import topic_name
from tests import test_bundles
from tests.test_bundles import TransitKey
from tests.test_contracts import BASE, EXAMPLES

transit_key = test_bundles.transit_key  # a fresh ed25519 key on the real OpenBao
POOLS = str(EXAMPLES / "pools.catalogue.json")
PUBLISHED_AT = "2026-11-30T00:00:00Z"
PUBLISHED_AT_US = int(datetime(2026, 11, 30, tzinfo=UTC).timestamp()) * 1_000_000


def cli(settings: Settings) -> click.Group:
    """`contracts` registered under a parent that holds the settings, as the main CLI does."""

    @click.group()
    @click.pass_context
    def root(ctx: click.Context) -> None:
        ctx.obj = settings

    root.add_command(contracts)
    return root


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(home=tmp_path / "home", region="eu-west")


@pytest.fixture
def key(tmp_path: Path) -> Path:
    key_file = tmp_path / "signing.pem"
    result = CliRunner().invoke(contracts, ["keygen", "--out", str(key_file)])
    assert result.exit_code == 0, result.output
    return key_file


def invoke(settings: Settings, *args: str) -> Result:
    return CliRunner().invoke(cli(settings), ["contracts", *args])


def test_keygen_json_names_the_files_and_the_public_key(tmp_path: Path) -> None:
    key_file = tmp_path / "k.pem"
    result = CliRunner().invoke(contracts, ["keygen", "--out", str(key_file), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["private_key_file"] == str(key_file)
    assert report["public_key_file"] == str(tmp_path / "k.pem.pub")
    public_key = load_public_key((tmp_path / "k.pem.pub").read_bytes())
    assert load_public_key(report["public_key"].encode()) == public_key
    assert report["key_id"] == key_id_of(public_key)


def test_keygen_writes_a_private_key_only_its_owner_reads(tmp_path: Path, key: Path) -> None:
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert key.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")
    assert (tmp_path / "signing.pem.pub").read_bytes().startswith(b"-----BEGIN PUBLIC KEY-----")
    again = CliRunner().invoke(contracts, ["keygen", "--out", str(key)])
    assert again.exit_code == 1
    assert "refusing to overwrite" in again.output


def test_compile_sign_publish_and_verify(settings: Settings, tmp_path: Path, key: Path) -> None:
    out = tmp_path / "bundles"
    result = invoke(
        settings,
        "compile",
        str(EXAMPLES),
        "--out",
        str(out),
        "--key",
        str(key),
        "--pools",
        POOLS,
        "--publish",
        "--published-at",
        PUBLISHED_AT,
        "--json",
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["ok"] and report["published"] == 6 and report["unchecked_rules"] == []
    workloads = sorted(a["workload_id"] for a in report["accepted"])
    assert [p.name for p in sorted(out.glob("*.bundle.json"))] == [
        f"{w}.bundle.json" for w in workloads
    ]
    published = json.loads((out / "published-contracts.json").read_text())
    assert published["unchecked_rules"] == []
    assert published["bundles_signed"] is True

    verified = invoke(
        settings,
        "verify",
        str(out / "etl-nightly.bundle.json"),
        "--pubkey",
        str(key.with_name(key.name + ".pub")),
        "--json",
    )
    assert verified.exit_code == 0, verified.output
    assert json.loads(verified.stdout)["bundle"]["drain_budget_s"] == 90

    log = EmbeddedLog(settings.log_dir)
    consumer = log.consumer("test", [topic_name("eu-west", "demand")])
    records = consumer.poll(max_records=100, timeout_s=1.0)
    consumer.close()
    codec = Codec()
    # Published through EventWriter: its writer schema is on the schemas topic.
    assert codec.fingerprint in load_schemas(log, "eu-west")
    log.close()
    events = [codec.decode(r.value or b"", r.origin) for r in records]
    assert sorted(e.key for e in events) == workloads
    for record, event in zip(records, events, strict=True):
        assert record.key == event.key.encode()
        assert event.region == "eu-west"
        assert event.occurred_at == PUBLISHED_AT_US
        assert isinstance(event.payload, ContractPublished)
    by_workload = {a["workload_id"]: a for a in report["accepted"]}
    for event in events:
        assert isinstance(event.payload, ContractPublished)
        assert event.event_id == by_workload[event.key]["event_id"]
        assert event.payload.contract_sha256 == by_workload[event.key]["contract_sha256"]


def test_a_tampered_bundle_fails_verification(
    settings: Settings, tmp_path: Path, key: Path
) -> None:
    out = tmp_path / "bundles"
    compiled = invoke(
        settings, "compile", str(EXAMPLES), "--out", str(out), "--key", str(key), "--pools", POOLS
    )
    assert compiled.exit_code == 0, compiled.output
    bundle = out / "ci-runners.bundle.json"
    bundle.write_bytes(bundle.read_bytes().replace(b'"drain_budget_s":30', b'"drain_budget_s":99'))
    result = invoke(
        settings, "verify", str(bundle), "--pubkey", str(key.with_name(key.name + ".pub"))
    )
    assert result.exit_code == 1
    assert "TamperedBundleError" in result.output


def test_a_refused_contract_writes_nothing_and_names_file_line_field(
    settings: Settings, tmp_path: Path
) -> None:
    contracts_dir = tmp_path / "contracts"
    shutil.copytree(EXAMPLES, contracts_dir)
    (contracts_dir / "broken.yaml").write_text(
        BASE.replace("workload: etl", "workload: broken") + "drain_budget_s: 90 sec\n"
    )
    out = tmp_path / "bundles"
    result = invoke(settings, "compile", str(contracts_dir), "--out", str(out), "--pools", POOLS)
    assert result.exit_code == 1
    assert f"{contracts_dir}/broken.yaml:11: drain_budget_s: '90 sec'" in result.output
    assert "nothing was written" in result.output
    assert not out.exists()


def test_without_pools_compile_refuses_and_writes_nothing(
    settings: Settings, tmp_path: Path
) -> None:
    out = tmp_path / "b"
    result = invoke(settings, "compile", str(EXAMPLES), "--out", str(out))
    assert result.exit_code == 2  # a usage error, as click gives for its own
    for words in ("floor-within-committed", "rate-diversifiable", "--pools", "--unchecked"):
        assert words in result.output, words
    assert "nothing was written" in result.output
    assert not out.exists()


def test_unchecked_writes_and_records_the_rules_not_checked(
    settings: Settings, tmp_path: Path
) -> None:
    out = tmp_path / "b"
    result = invoke(
        settings, "compile", str(EXAMPLES), "--out", str(out), "--unchecked", "--unsigned"
    )
    assert result.exit_code == 0, result.output
    assert "rule floor-within-committed was not checked" in result.output
    assert "rule rate-diversifiable was not checked" in result.output
    assert "bundles are written unsigned" in result.output
    published = json.loads((out / "published-contracts.json").read_text())
    assert published["unchecked_rules"] == ["floor-within-committed", "rate-diversifiable"]
    assert len(published["contracts"]) == 6


@pytest.mark.parametrize("throughput", ["0", "0 MB", "-5 MB", "fast"])
def test_a_store_throughput_that_is_not_positive_is_refused_at_the_option(
    settings: Settings, tmp_path: Path, throughput: str
) -> None:
    out = tmp_path / "b"
    result = invoke(
        settings,
        *["compile", str(EXAMPLES), "--out", str(out), "--pools", POOLS],
        *["--store-throughput", throughput],
    )
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit)  # a usage error, not a traceback
    assert "Invalid value for '--store-throughput'" in result.output
    assert not out.exists()


def test_a_stale_bundle_is_removed(settings: Settings, tmp_path: Path) -> None:
    out = tmp_path / "bundles"
    out.mkdir()
    (out / "retired-workload.bundle.json").write_text("{}")
    compiled = invoke(
        settings, "compile", str(EXAMPLES), "--out", str(out), "--pools", POOLS, "--unsigned"
    )
    assert compiled.exit_code == 0, compiled.output
    assert not (out / "retired-workload.bundle.json").exists()


def test_compile_signs_through_openbao_transit(
    settings: Settings, tmp_path: Path, transit_key: TransitKey
) -> None:
    out = tmp_path / "bundles"
    env = {"BAO_ADDR": transit_key.address, "BAO_TOKEN": transit_key.token}
    result = CliRunner(env=env).invoke(
        cli(settings),
        [
            *["contracts", "compile", str(EXAMPLES), "--out", str(out), "--pools", POOLS],
            *["--transit-key", transit_key.name],
        ],
    )
    assert result.exit_code == 0, result.output
    public = tmp_path / "transit.pub"
    exported = transit_key.client().read(f"transit/export/public-key/{transit_key.name}")
    public.write_text(exported["data"]["keys"]["2"])
    bundles = sorted(out.glob("*.bundle.json"))
    assert len(bundles) == 6  # every accepted contract was signed through transit
    for bundle in bundles:
        verified = invoke(settings, "verify", str(bundle), "--pubkey", str(public))
        assert verified.exit_code == 0, verified.output


def test_unchecked_contracts_are_never_published(settings: Settings, tmp_path: Path) -> None:
    out = tmp_path / "bundles"
    result = invoke(
        settings, "compile", str(EXAMPLES), "--out", str(out), "--unchecked", "--publish"
    )
    assert result.exit_code == 2  # a usage error, as click gives for its own
    assert "not published" in result.output
    assert not out.exists()


# -- nothing is written unsigned, and nothing half-way -----------------------------------------


def test_without_a_signer_compile_writes_nothing(settings: Settings, tmp_path: Path) -> None:
    out = tmp_path / "bundles"
    result = invoke(settings, "compile", str(EXAMPLES), "--out", str(out), "--pools", POOLS)
    assert result.exit_code == 2  # a usage error, as click gives for its own
    assert isinstance(result.exception, SystemExit)
    for words in ("no --key or --transit-key", "--unsigned", "nothing was written"):
        assert words in result.output, words
    assert not out.exists()  # no bundles, no Kyverno ConfigMap, no Slurm list


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (["--publish"], "--publish needs signed bundles"),
        (["--unsigned", "--publish"], "--unsigned contracts are not published"),
        (["--unsigned", "--key", "KEY"], "not both"),
    ],
)
def test_unsigned_contracts_are_never_published(
    settings: Settings, tmp_path: Path, key: Path, flags: list[str], words: str
) -> None:
    out = tmp_path / "bundles"
    flags = [str(key) if flag == "KEY" else flag for flag in flags]
    result = invoke(settings, "compile", str(EXAMPLES), "--out", str(out), "--pools", POOLS, *flags)
    assert result.exit_code == 2  # a usage error, as click gives for its own
    assert words in result.output
    assert not out.exists()
    assert not settings.log_dir.exists()


def test_unsigned_writes_unsigned_bundles_and_says_so(settings: Settings, tmp_path: Path) -> None:
    out = tmp_path / "bundles"
    result = invoke(
        settings, "compile", str(EXAMPLES), "--out", str(out), "--pools", POOLS, "--unsigned"
    )
    assert result.exit_code == 0, result.output
    assert "bundles are written unsigned" in result.output
    bundle = json.loads((out / "etl-nightly.bundle.json").read_text())
    assert "signature" not in bundle
    assert json.loads((out / "published-contracts.json").read_text())["bundles_signed"] is False


def test_huge_values_are_refused_located_before_anything_is_written(
    settings: Settings, tmp_path: Path, key: Path
) -> None:
    contracts_dir = tmp_path / "contracts"
    contracts_dir.mkdir()
    (contracts_dir / "etl.yaml").write_text(
        BASE
        + "fallback:\n"
        + '  spend_cap_per_day_eur_micros: "EUR 99999999999999999.00"\n'
        + "  approver: a@example.com\n"
    )
    out = tmp_path / "bundles"
    result = invoke(
        settings,
        *["compile", str(contracts_dir), "--out", str(out), "--unchecked", "--key", str(key)],
    )
    assert result.exit_code == 1
    assert isinstance(result.exception, SystemExit)
    assert f"{contracts_dir}/etl.yaml:12: fallback.spend_cap_per_day_eur_micros:" in result.output
    assert "too large" in result.output
    assert not out.exists()


def test_an_event_that_cannot_be_encoded_writes_nothing(
    settings: Settings, tmp_path: Path, key: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(self: Codec, envelope: object) -> bytes:
        raise EncodeError("int too large to encode")

    monkeypatch.setattr(Codec, "encode", refuse)
    out = tmp_path / "bundles"
    result = invoke(
        settings,
        *["compile", str(EXAMPLES), "--out", str(out), "--pools", POOLS, "--key", str(key)],
        "--publish",
    )
    assert result.exit_code == 1
    assert isinstance(result.exception, SystemExit)  # a clean error, not a traceback
    assert "cannot be encoded" in result.output and "nothing was written" in result.output
    assert not out.exists()


def test_a_log_that_refuses_the_events_writes_nothing(
    settings: Settings, tmp_path: Path, key: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def unreachable(_settings: Settings) -> object:
        raise LogError("broker unreachable")

    monkeypatch.setattr("spotcap.wiring.open_log", unreachable)
    out = tmp_path / "bundles"
    result = invoke(
        settings,
        *["compile", str(EXAMPLES), "--out", str(out), "--pools", POOLS, "--key", str(key)],
        "--publish",
    )
    assert result.exit_code == 1
    assert isinstance(result.exception, SystemExit)
    assert "broker unreachable" in result.output and "nothing was written" in result.output
    assert not out.exists()


# -- the file as written ---------------------------------------------------------------------


def test_source_sha256_is_the_hash_of_the_files_bytes(settings: Settings, tmp_path: Path) -> None:
    contracts_dir = tmp_path / "contracts"
    contracts_dir.mkdir()
    data = BASE.replace("\n", "\r\n").encode()
    (contracts_dir / "etl.yaml").write_bytes(data)
    out = tmp_path / "bundles"
    result = invoke(
        settings, "compile", str(contracts_dir), "--out", str(out), "--unchecked", "--unsigned"
    )
    assert result.exit_code == 0, result.output
    (entry,) = json.loads((out / "published-contracts.json").read_text())["contracts"]
    assert entry["source_sha256"] == hashlib.sha256(data).hexdigest()


def test_a_file_that_is_not_utf8_is_refused_at_its_line(settings: Settings, tmp_path: Path) -> None:
    contracts_dir = tmp_path / "contracts"
    contracts_dir.mkdir()
    (contracts_dir / "etl.yaml").write_bytes((BASE + "description: café\n").encode("latin-1"))
    out = tmp_path / "bundles"
    result = invoke(
        settings, "compile", str(contracts_dir), "--out", str(out), "--unchecked", "--unsigned"
    )
    assert result.exit_code == 1
    assert isinstance(result.exception, SystemExit)
    assert f"{contracts_dir}/etl.yaml:11: (encoding): byte 0xe9" in result.output
    assert not out.exists()
