"""A second, higher authority (ADR-30): raising a floor or a spend cap, or changing the
fallback's approver, needs the owner's and a higher authority's signatures of that very file;
the compiler refuses otherwise, in the library and through `spotcap contracts compile`."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from contracts import FeasibilityEnv, compile_contracts
from contracts.approvals import (
    SIGNATURES_SUFFIX,
    ChangeControl,
    Keyring,
    Published,
    sign_contract_file,
)
from contracts.signing import FileSigner, raw_public_bytes
from spotcap.config import Settings
from tests.factories import T0_US
from tests.test_contracts import BASE
from tests.test_contracts_cli import cli

SEEDS = {"data-platform": bytes(range(32)), "capacity-board": bytes(range(1, 33))}
OWNER = FileSigner.from_bytes(SEEDS["data-platform"])
BOARD = FileSigner.from_bytes(SEEDS["capacity-board"])
STRANGER = FileSigner.from_bytes(bytes(range(2, 34)))
KEYRING = Keyring(
    owners={"data-platform": OWNER.public_key(), "other-team": STRANGER.public_key()},
    authorities={"capacity-board": BOARD.public_key()},
)
APPROVER_KEY = base64.b64encode(raw_public_bytes(STRANGER.public_key())).decode()
PUBLISHED = {"etl": Published(floor_vcpu=0, spend_cap_eur_micros=0)}


def contract(version: int = 2, extra: str = "") -> str:
    return BASE.replace("version: 1", f"version: {version}") + extra


RAISED_FLOOR = "floor_vcpu: 20\n"
RAISED_CAP = 'fallback:\n  spend_cap_per_day_eur_micros: "EUR 40.00"\n  approver: a@example.org\n'


def compile_with(path: Path, previous: dict[str, Published] | None = None) -> list[str]:
    sig = path.with_name(path.name + SIGNATURES_SUFFIX)
    control = ChangeControl(
        KEYRING, PUBLISHED if previous is None else previous,
        {path: sig.read_bytes()} if sig.exists() else {},
    )  # fmt: skip
    result = compile_contracts(
        {path: path.read_bytes()}, FeasibilityEnv(), published_at_us=T0_US,
        change_control=control,
    )  # fmt: skip
    return [str(e) for e in result.errors]


@pytest.mark.parametrize(
    ("extra", "field", "words"),
    [
        (RAISED_FLOOR, "floor_vcpu", "raises the floor from 0 to 20 vCPU"),
        (RAISED_CAP, "fallback.spend_cap_per_day_eur_micros", "raises the daily spend cap"),
    ],
)
def test_a_raise_needs_the_owners_and_a_higher_authoritys_signatures(
    tmp_path: Path, extra: str, field: str, words: str
) -> None:
    path = tmp_path / "etl.yaml"
    path.write_text(contract(extra=extra))
    [unsigned] = compile_with(path)
    assert f": {field}: " in unsigned and words in unsigned
    assert "the owner data-platform's and a higher authority's" in unsigned
    sign_contract_file(path, OWNER, "data-platform")
    [owner_only] = compile_with(path)
    assert "a higher authority's is missing" in owner_only
    sign_contract_file(path, BOARD, "capacity-board")
    assert compile_with(path) == []


def test_signatures_of_another_version_or_by_the_wrong_keys_do_not_count(tmp_path: Path) -> None:
    path = tmp_path / "etl.yaml"
    path.write_text(contract(extra=RAISED_FLOOR))
    sign_contract_file(path, STRANGER, "data-platform")  # the owner's name, another's key
    sign_contract_file(path, STRANGER, "capacity-board")
    assert len(compile_with(path)) == 1
    sign_contract_file(path, OWNER, "data-platform")
    sign_contract_file(path, BOARD, "capacity-board")
    assert compile_with(path) == []
    path.write_text(contract(extra="floor_vcpu: 30\n"))  # a later edit: the signatures were of v2
    assert len(compile_with(path)) == 1
    # An owner cannot be their own higher authority.
    ring = Keyring(owners={"data-platform": OWNER.public_key()},
                   authorities={"data-platform": OWNER.public_key()})  # fmt: skip
    path.write_text(contract(extra=RAISED_FLOOR))
    sign_contract_file(path, OWNER, "data-platform")
    sig = path.with_name(path.name + SIGNATURES_SUFFIX)
    control = ChangeControl(ring, PUBLISHED, {path: sig.read_bytes()})
    result = compile_contracts({path: path.read_bytes()}, FeasibilityEnv(), published_at_us=T0_US,
                               change_control=control)  # fmt: skip
    assert [e.rule for e in result.errors] == ["two-signatures"]


def test_changing_the_approver_needs_two_signatures_and_lowering_needs_none(
    tmp_path: Path,
) -> None:
    path = tmp_path / "etl.yaml"
    before = {"etl": Published(20, 40_000_000, "a@example.org", None)}
    path.write_text(contract(extra=RAISED_CAP.replace("a@example.org", "b@example.org")
                             + RAISED_FLOOR))  # fmt: skip
    [changed] = compile_with(path, before)
    assert "changes the fallback policy's approver" in changed
    keyed = RAISED_CAP + f"  approver_key: {APPROVER_KEY}\n"
    path.write_text(contract(extra=keyed + RAISED_FLOOR))
    assert "approver" in compile_with(path, before)[0]  # a new approver key is a new policy
    path.write_text(contract(extra=RAISED_CAP.replace("40.00", "10.00") + "floor_vcpu: 5\n"))
    assert compile_with(path, before) == []  # lowering a floor or a cap takes the owner alone


def test_an_unchanged_authority_needs_no_second_signature(tmp_path: Path) -> None:
    path = tmp_path / "etl.yaml"
    path.write_text(contract(extra=RAISED_FLOOR))
    assert compile_with(path, {"etl": Published(20, 0)}) == []


def test_the_cli_refuses_an_unsigned_raise_after_a_first_publication(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path / "home", region="eu-west")
    contracts_dir, out = tmp_path / "contracts", tmp_path / "out"
    contracts_dir.mkdir()
    key = tmp_path / "bundles.pem"
    key.write_bytes(bytes(range(5, 37)))
    path = contracts_dir / "etl.yaml"
    path.write_text(contract(version=1))
    runner = CliRunner()

    def compile_() -> tuple[int, str]:
        result = runner.invoke(cli(settings), ["contracts", "compile", str(contracts_dir),
                                               "--out", str(out), "--unchecked", "--key",
                                               str(key), "--keyring", str(ring_file)])  # fmt: skip
        return result.exit_code, result.output

    ring_file = tmp_path / "keyring.yaml"
    b64 = {n: base64.b64encode(raw_public_bytes(s.public_key())).decode()
           for n, s in (("owner", OWNER), ("board", BOARD))}  # fmt: skip
    ring_file.write_text(
        "format: spotcap.keyring/v1\n"
        f"owners:\n  data-platform: {b64['owner']}\n"
        f"authorities:\n  capacity-board: {b64['board']}\n"
    )
    code, output = compile_()  # the first publication: no floor, no cap
    assert code == 0, output
    published = json.loads((out / "published-contracts.json").read_text())
    assert published["contracts"][0]["floor_vcpu"] == 0
    path.write_text(contract(version=2, extra=RAISED_FLOOR))
    code, output = compile_()
    assert code == 1 and "two signatures" in output and "raises the floor" in output
    for name, seed in SEEDS.items():
        key_file = tmp_path / f"{name}.key"
        key_file.write_bytes(seed)
        signed = runner.invoke(cli(settings), ["contracts", "sign", str(path), "--as", name,
                                               "--key", str(key_file)])  # fmt: skip
        assert signed.exit_code == 0, signed.output
    code, output = compile_()
    assert code == 0, output
    assert (
        json.loads((out / "published-contracts.json").read_text())["contracts"][0]["floor_vcpu"]
        == 20
    )


def test_without_a_keyring_a_raise_is_refused_and_the_fix_names_the_keyring(
    tmp_path: Path,
) -> None:
    path = tmp_path / "etl.yaml"
    path.write_text(contract(extra=RAISED_FLOOR))
    sign_contract_file(path, OWNER, "data-platform")
    sign_contract_file(path, BOARD, "capacity-board")
    sig = path.with_name(path.name + SIGNATURES_SUFFIX)
    control = ChangeControl(Keyring(), PUBLISHED, {path: sig.read_bytes()})
    result = compile_contracts({path: path.read_bytes()}, FeasibilityEnv(), published_at_us=T0_US,
                               change_control=control)  # fmt: skip
    [refused] = [str(e) for e in result.errors]
    assert "no keyring was given" in refused and "--keyring FILE" in refused
