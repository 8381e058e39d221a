"""The monthly archive on a local directory: export two chained months, verify them with only
the archive and the public key, find a changed byte, a deleted month, an edited manifest and a
forged root; prove one event's inclusion and see a changed one fail; replay from the archive
reproduces the recorded ledger; signing through OpenBao transit."""

from __future__ import annotations

import base64
import json
import shutil
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from contracts.signing import FileSigner, generate_key_pem, key_id_of, load_private_key
from infra import servers
from replay.archive import layout
from replay.archive.export import Exported
from replay.archive.verify import Finding, MonthReport, failure_sentence
from replay.rule_file import shipped_rule_path
from tests.replay_support import OCT_30_US, History, small_config

MONTHS = ("2026-10", "2026-11")


@pytest.fixture(scope="module")
def replay_history(tmp_path_factory: pytest.TempPathFactory, chdb_path: Path) -> History:
    """A small region over the turn of October 2026: two months, both over (a month is archived
    once it has ended), for the chain."""
    return History(tmp_path_factory.mktemp("archive-history"), small_config(start_us=OCT_30_US))


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("keys")
    private_pem, public_pem = generate_key_pem()
    (folder / "archive.key").write_bytes(private_pem)
    (folder / "archive.pub").write_bytes(public_pem)
    return folder / "archive.key", folder / "archive.pub"


@pytest.fixture(scope="module")
def archive(
    replay_history: History, keys: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory
) -> Path:
    where = tmp_path_factory.mktemp("archive") / "local"
    for month in MONTHS:
        done = replay_history.json(
            "archive", "export", "--month", month, "--archive", str(where), "--key", str(keys[0])
        )
        assert done["month"] == month and done["events"] > 1000
    return where


def verify(h: History, where: Path, pub: Path, *extra: str, code: int = 0) -> Any:
    return h.json(
        "archive", "verify", "--archive", str(where), "--public-key", str(pub), *extra, code=code
    )


def errors(report: Any) -> list[str]:
    return [
        f"{m['month']}: {f['subject']}: {f['message']}"
        for m in report["months"]
        for f in m["findings"]
        if f["error"]
    ]


def copy_of(where: Path, tmp_path: Path) -> Path:
    target = tmp_path / "archive"
    shutil.copytree(where, target)
    return target


def test_months_and_an_export_say_themselves() -> None:
    note = Finding("2026-10", "retention", "a directory locks nothing", error=False)
    fine = MonthReport("2026-10", 10, [note])
    broken = MonthReport("2026-11", 5, [Finding("2026-11", "events.parquet", "changed")] * 2)
    assert (fine.problems, fine.result()) == (0, "verified")
    assert (broken.problems, broken.result()) == (2, "2 problems")
    assert MonthReport("2027-01", 1, broken.findings[:1]).result() == "1 problem"
    assert failure_sentence([fine, broken]) == (
        "the archive does not verify: 1 month(s) with problems (2026-11)"
    )
    done = Exported("dev", "2026-10", 87_574, 5_058, "ab" * 32, 90_000, "00", 1.25)
    said = done.describe("the local archive at /a", "ed25519:k", locked=False)
    assert said == (
        "archived 2026-10 of region dev to the local archive at /a: 87,574 events and 5,058 cost"
        " lines in 1.2 s; tree head abababababababab... signed by ed25519:k, chain of 90,000 events"
    )
    locked = done.describe("s3://b/p", "ed25519:k", locked=True)
    assert "to s3://b/p with Object Lock until 2033-11-01: 87,574 events" in locked


def test_two_months_verify_and_chain(
    replay_history: History, archive: Path, keys: tuple[Path, Path]
) -> None:
    report = verify(replay_history, archive, keys[1])
    assert report["ok"] and [m["month"] for m in report["months"]] == list(MONTHS)
    notes = [f["message"] for m in report["months"] for f in m["findings"]]
    assert all("locks nothing" in n for n in notes)
    nov, dec = (json.loads((archive / "rp" / m / layout.MANIFEST).read_text()) for m in MONTHS)
    assert dec["chain"]["previous_month"] == "2026-10"
    assert dec["chain"]["previous_size"] == nov["chain"]["size"] == nov["merkle"]["size"]
    assert dec["chain"]["size"] == nov["merkle"]["size"] + dec["merkle"]["size"]
    assert dec["chain"]["consistency_proof"]
    assert nov["retention"]["retain_until"] == "2033-11-01T00:00:00.000000Z"
    text = replay_history.cli(
        "archive",
        "verify",
        "--archive",
        str(archive),
        "--public-key",
        str(keys[1]),
        "--month",
        "2026-11",
    )
    assert "verified" in text and "2026-10" not in text.split("note")[0].split("┃")[-1]


def test_months_are_archived_once_and_in_order(
    replay_history: History, archive: Path, keys: tuple[Path, Path], tmp_path: Path
) -> None:
    again = replay_history.cli(
        "archive",
        "export",
        "--month",
        "2026-10",
        "--archive",
        str(archive),
        "--key",
        str(keys[0]),
        code=1,
    )
    assert "already archived" in again
    fresh = tmp_path / "fresh"
    out = replay_history.cli(
        "archive", "export", "--month", "2026-11", "--archive", str(fresh), "--key", str(keys[0])
    )
    assert "archived 2026-11" in out
    late = replay_history.cli(
        "archive",
        "export",
        "--month",
        "2026-10",
        "--archive",
        str(fresh),
        "--key",
        str(keys[0]),
        code=1,
    )
    assert "can no longer join the chain" in late


@pytest.mark.parametrize("name", [layout.EVENTS, *layout.DERIVED_FILES])
def test_verify_finds_a_changed_byte(
    replay_history: History, archive: Path, keys: tuple[Path, Path], tmp_path: Path, name: str
) -> None:
    where = copy_of(archive, tmp_path)
    path = where / "rp" / "2026-10" / name
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    report = verify(replay_history, where, keys[1], code=1)
    found = errors(report)
    assert len(found) == 1, found
    assert found[0].startswith(f"2026-10: {name}: SHA-256 is ")
    assert "changed after export" in found[0]


def test_the_typed_files_hold_the_months_cards_usage_and_checkpoints(archive: Path) -> None:
    folder = archive / "rp" / "2026-10"
    manifest = json.loads((folder / layout.MANIFEST).read_bytes())
    assert manifest["format"] == layout.FORMAT
    events = pq.read_table(folder / layout.EVENTS, columns=["event_type", "payload"])
    for name, event_type in layout.TYPED_FILES.items():
        typed = pq.read_table(folder / name)
        assert typed.schema == layout.TYPED_SCHEMAS[name]
        assert manifest["files"][name]["rows"] == typed.num_rows > 100
        payloads = [
            json.loads(p)
            for t, p in zip(
                events.column("event_type").to_pylist(),
                events.column("payload").to_pylist(),
                strict=True,
            )
            if t == event_type
        ]
        rows = typed.drop_columns(["event_id", "occurred_at"])
        if name == layout.RATE_CARDS:
            rows = rows.drop_columns([*layout.CARD_INTEGRALS.names, layout.REFUSED_LATE])
        rows = rows.to_pylist()
        if name == layout.RATE_CARDS:  # sorted by pool, start, publication and event id

            def text(d: dict[str, Any]) -> str:
                return json.dumps(d, sort_keys=True)

            rows, payloads = sorted(rows, key=text), sorted(payloads, key=text)
        assert rows == payloads
    cards = pq.read_table(folder / layout.RATE_CARDS).to_pylist()
    order = [(c["pool_id"], c["valid_from_at"], c["occurred_at"], c["event_id"]) for c in cards]
    assert order == sorted(order)
    assert not any(c[layout.REFUSED_LATE] for c in cards)  # the simulator publishes on time
    # Each card's integrals: the cards in force before it in its pool (of those starting at the
    # same moment, the last), each priced from its start to the next one's.
    by_pool: dict[str, list[dict[str, Any]]] = {}
    for c in cards:
        by_pool.setdefault(c["pool_id"], []).append(c)
    for pool_cards in by_pool.values():
        starts = [c["valid_from_at"] for c in pool_cards]
        in_force = [c for i, c in enumerate(pool_cards) if starts[i + 1 :][:1] != [starts[i]]]
        assert [c[layout.IN_FORCE] for c in pool_cards] == [c in in_force for c in pool_cards]
        for c in pool_cards:
            before = [f for f in in_force if f["valid_from_at"] < c["valid_from_at"]]
            ends = [f["valid_from_at"] for f in before[1:]] + [c["valid_from_at"]] * bool(before)
            for column, price in ((layout.PRICE_INTEGRAL, "price_per_vcpu_h_eur_micros"),
                                  (layout.GUARANTEED_INTEGRAL,
                                   "guaranteed_price_per_vcpu_h_eur_micros")):  # fmt: skip
                expected = sum(
                    (end - f["valid_from_at"]) * f[price]
                    for f, end in zip(before, ends, strict=True)
                )
                assert c[column] == expected


def sign_and_relink(where: Path, signer: FileSigner, manifest: dict[str, Any]) -> None:
    """Write 2026-10's `manifest` signed again, and 2026-11's link to it with it."""
    folder = where / "rp" / "2026-10"
    data = layout.canonical_json(manifest)
    (folder / layout.MANIFEST).write_bytes(data)
    (folder / layout.SIGNATURE).write_bytes(signer.sign(data))
    later = where / "rp" / "2026-11"
    manifest = json.loads((later / layout.MANIFEST).read_bytes())
    manifest["chain"]["previous_manifest_sha256"] = layout.sha256_hex(data)
    data = layout.canonical_json(manifest)
    (later / layout.MANIFEST).write_bytes(data)
    (later / layout.SIGNATURE).write_bytes(signer.sign(data))
    sign_head(where, signer, "2026-11")


def sign_head(where: Path, signer: FileSigner, month: str) -> None:
    """The archive's head naming `month` (as its manifest now is), signed: as an exporter
    with the key would have written it after `month`."""
    manifest = (where / "rp" / month / layout.MANIFEST).read_bytes()
    chain = json.loads(manifest)["chain"]
    head = layout.canonical_json(
        {"format": layout.HEAD_FORMAT, "region": "rp", "month": month,
         "manifest_sha256": layout.sha256_hex(manifest),
         "chain": {"size": chain["size"], "root": chain["root"]}}
    )  # fmt: skip
    (where / "rp" / layout.HEAD).write_bytes(head)
    (where / "rp" / layout.HEAD_SIGNATURE).write_bytes(signer.sign(head))


def as_format_1(where: Path, private_key: Path) -> None:
    """Rewrite 2026-10 of the archive at `where` as format 1 wrote it (no typed files), signed
    again, and 2026-11's link to its manifest with it: an archive begun before format 2."""
    signer = FileSigner.from_bytes(private_key.read_bytes())
    folder = where / "rp" / "2026-10"
    manifest = json.loads((folder / layout.MANIFEST).read_bytes())
    manifest["format"] = layout.FORMAT_1
    for name in layout.DERIVED_FILES:
        del manifest["files"][name]
        (folder / name).unlink()
    sign_and_relink(where, signer, manifest)


def signed_again(where: Path, private_key: Path, names: tuple[str, ...], edit: Any) -> None:
    """2026-10 of the archive at `where` with its manifest edited by `edit` and the entries of
    the files `names` (rewritten by the caller) brought up to date, signed again, and
    2026-11's link to its manifest with it: as an exporter with the key would have written."""
    signer = FileSigner.from_bytes(private_key.read_bytes())
    folder = where / "rp" / "2026-10"
    manifest = json.loads((folder / layout.MANIFEST).read_bytes())
    edit(manifest)
    for name in names:
        data = (folder / name).read_bytes()
        entry = manifest["files"][name]
        entry["sha256"], entry["bytes"] = layout.sha256_hex(data), len(data)
        entry["schema_sha256"] = layout.schema_fingerprint(pq.read_schema(folder / name))
        entry["rows"] = pq.read_metadata(folder / name).num_rows
    sign_and_relink(where, signer, manifest)


def test_a_month_of_format_2_verifies_and_replays(
    replay_history: History, archive: Path, keys: tuple[Path, Path], tmp_path: Path
) -> None:
    """A month exported before format 3: its rate cards without their integrals, and (before
    format 4) only losses, waste and contracts among its priced events: a replay takes the
    claims, launches and reservations from its events file."""
    where = copy_of(archive, tmp_path)
    cards = where / "rp" / "2026-10" / layout.RATE_CARDS
    pq.write_table(pq.read_table(cards).select(layout.RATE_CARDS_SCHEMA_2.names), cards)
    priced = where / "rp" / "2026-10" / layout.PRICED
    table = pq.read_table(priced)
    keep = pc.is_in(table.column("event_type"), value_set=pa.array(layout.PRICED_TYPES_3))
    pq.write_table(table.filter(keep), priced)

    def older(manifest: dict[str, Any]) -> None:
        manifest["format"] = layout.FORMAT_2

    signed_again(where, keys[0], (layout.RATE_CARDS, layout.PRICED), older)
    assert errors(verify(replay_history, where, keys[1])) == []
    replayed = replay_history.json(
        "replay", "--rules", str(shipped_rule_path("recorded")), "--source", "archive",
        "--archive", str(where), "--diff", "--engine", "clickhouse",
    )  # fmt: skip
    assert replayed["diff"]["identical"], replayed["diff"]["rows"][:5]


def test_verify_finds_a_wrong_integral_under_a_good_signature(
    replay_history: History, archive: Path, keys: tuple[Path, Path], tmp_path: Path
) -> None:
    """The integrals a replay prices from are checked against the cards, not only hashed."""
    where = copy_of(archive, tmp_path)
    path = where / "rp" / "2026-10" / layout.RATE_CARDS
    cards = pq.read_table(path)
    column = cards.column(layout.PRICE_INTEGRAL).to_pylist()
    column[7] += 1
    index = cards.schema.get_field_index(layout.PRICE_INTEGRAL)
    changed = cards.set_column(
        index, cards.schema.field(index), pa.array(column, layout.INTEGRAL_TYPE)
    )
    pq.write_table(changed, path)
    signed_again(where, keys[0], (layout.RATE_CARDS,), lambda _: None)
    found = errors(verify(replay_history, where, keys[1], code=1))
    assert len(found) == 1, found
    card = cards.column("event_id")[7].as_py()
    assert found[0].startswith(
        f"2026-10: {layout.RATE_CARDS}: {layout.PRICE_INTEGRAL} of card {card}"
    )


def test_a_month_of_format_1_verifies_and_replays(
    replay_history: History, archive: Path, keys: tuple[Path, Path], tmp_path: Path
) -> None:
    where = copy_of(archive, tmp_path)
    as_format_1(where, keys[0])
    report = verify(replay_history, where, keys[1])
    assert errors(report) == []
    for engine in ("clickhouse", "python"):
        replayed = replay_history.json(
            "replay", "--rules", str(shipped_rule_path("recorded")), "--source", "archive",
            "--archive", str(where), "--diff", "--engine", engine,
        )  # fmt: skip
        assert replayed["diff"]["identical"], replayed["diff"]["rows"][:5]
    (where / "rp" / "2026-10" / layout.SIGNATURE).write_bytes(b"\0" * 64)
    assert any("signature" in e for e in errors(verify(replay_history, where, keys[1], code=1)))


def test_verify_finds_a_deleted_month(
    replay_history: History, archive: Path, keys: tuple[Path, Path], tmp_path: Path
) -> None:
    where = copy_of(archive, tmp_path)
    shutil.rmtree(where / "rp" / "2026-10")
    found = errors(verify(replay_history, where, keys[1], code=1))
    assert any(
        f.startswith("2026-10: month: is missing") and "2026-11's manifest links to it" in f
        for f in found
    ), found
    assert any(f.startswith("2026-11: chain: links to 2026-10, which is missing") for f in found)
    one = errors(verify(replay_history, where, keys[1], "--month", "2026-10", code=1))
    assert one and "is not in" in one[0] and "2026-11's chain links back" in one[0]


def test_verify_finds_an_edited_manifest(
    replay_history: History, archive: Path, keys: tuple[Path, Path], tmp_path: Path
) -> None:
    where = copy_of(archive, tmp_path)
    path = where / "rp" / "2026-11" / layout.MANIFEST
    manifest = json.loads(path.read_text())
    manifest["files"][layout.COST_LINES]["rows"] += 1
    path.write_bytes(layout.canonical_json(manifest))
    found = errors(verify(replay_history, where, keys[1], code=1))
    assert any(
        f.startswith("2026-11: signature: does not verify")
        and "was changed after it was signed" in f
        for f in found
    ), found
    assert any(f.startswith("2026-11: cost_lines.parquet: holds") for f in found), found


def test_verify_finds_a_forged_root(
    replay_history: History, archive: Path, keys: tuple[Path, Path], tmp_path: Path
) -> None:
    where = copy_of(archive, tmp_path)
    path = where / "rp" / "2026-10" / layout.MANIFEST
    manifest = json.loads(path.read_text())
    manifest["merkle"]["root"] = "ab" * 32
    forger_pem, _ = generate_key_pem()
    forger = load_private_key(forger_pem)
    manifest["signing"]["key_id"] = key_id_of(forger.public_key())
    data = layout.canonical_json(manifest)
    path.write_bytes(data)
    (path.parent / layout.SIGNATURE).write_bytes(forger.sign(data))
    found = errors(verify(replay_history, where, keys[1], code=1))
    assert any(
        f.startswith("2026-10: signature: the manifest is signed by")
        and "not by the public key given" in f
        for f in found
    ), found
    assert any(
        f.startswith("2026-10: merkle: the events give a tree of") and "abab" in f for f in found
    ), found
    assert any(f.startswith("2026-11: chain:") for f in found), found  # the link broke too


def test_an_inclusion_proof_holds_and_a_changed_event_fails(
    replay_history: History, archive: Path, keys: tuple[Path, Path], tmp_path: Path
) -> None:
    import pyarrow.parquet as pq

    ids = pq.read_table(archive / "rp" / "2026-11" / layout.EVENTS, columns=["event_id"])
    event_id = ids.column(0)[len(ids) // 3].as_py()
    proof_file = tmp_path / "proof.json"
    replay_history.cli(
        "archive",
        "prove",
        event_id,
        "--month",
        "2026-11",
        "--archive",
        str(archive),
        "--out",
        str(proof_file),
    )
    ok = replay_history.json(
        "archive", "check-proof", str(proof_file), "--public-key", str(keys[1])
    )
    assert ok["ok"] and ok["event"]["matches_id"] and f"entry {len(ids) // 3:,}" in ok["message"]
    proof = json.loads(proof_file.read_text())
    body = bytearray(base64.b64decode(proof["event_bytes"]))
    body[-2] ^= 0x01
    proof["event_bytes"] = base64.b64encode(bytes(body)).decode()
    changed = tmp_path / "changed.json"
    changed.write_text(json.dumps(proof))
    bad = replay_history.json(
        "archive", "check-proof", str(changed), "--public-key", str(keys[1]), code=1
    )
    assert not bad["ok"] and "is not entry" in bad["message"]
    _, other_pub = generate_key_pem()
    other = tmp_path / "other.pub"
    other.write_bytes(other_pub)
    wrong_key = replay_history.json(
        "archive", "check-proof", str(proof_file), "--public-key", str(other), code=1
    )
    assert "not signed by the public key given" in wrong_key["message"]
    missing = replay_history.cli(
        "archive",
        "prove",
        str(uuid.uuid4()),
        "--month",
        "2026-11",
        "--archive",
        str(archive),
        code=1,
    )
    assert "is not in the archive of 2026-11" in missing


@pytest.mark.parametrize("engine", ["clickhouse", "python"])
def test_replay_from_the_archive_reproduces_the_recorded_ledger(
    replay_history: History, archive: Path, engine: str
) -> None:
    report = replay_history.json(
        "replay",
        "--rules",
        str(shipped_rule_path("recorded")),
        "--source",
        "archive",
        "--archive",
        str(archive),
        "--diff",
        "--engine",
        engine,
    )
    assert report["diff"]["identical"], report["diff"]["rows"][:5]
    dec = replay_history.json(
        "replay",
        "--rules",
        str(shipped_rule_path("recorded")),
        "--source",
        "archive",
        "--archive",
        str(archive),
        "--diff",
        "--engine",
        engine,
        "--from",
        "2026-11-01",
    )
    assert dec["diff"]["identical"] and dec["from"] == "2026-11-01"


def test_a_changed_archive_is_not_replayed(
    replay_history: History, archive: Path, tmp_path: Path
) -> None:
    where = copy_of(archive, tmp_path)
    path = where / "rp" / "2026-10" / layout.EVENTS
    path.write_bytes(path.read_bytes() + b"\0")
    out = replay_history.cli(
        "replay",
        "--rules",
        str(shipped_rule_path("recorded")),
        "--source",
        "archive",
        "--archive",
        str(where),
        code=1,
    )
    assert "does not match its manifest" in out and "archive verify --month 2026-10" in out


def test_export_signs_through_openbao_transit(
    replay_history: History,
    openbao: servers.Server,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import hvac

    token = servers.openbao_token(openbao)
    client = hvac.Client(url=openbao.address, token=token)
    if "transit/" not in client.sys.list_mounted_secrets_engines()["data"]:
        client.sys.enable_secrets_engine("transit", path="transit")
    name = f"archive-{uuid.uuid4().hex[:8]}"
    client.secrets.transit.create_key(name=name, key_type="ed25519", mount_point="transit")
    key = client.secrets.transit.read_key(name=name, mount_point="transit")["data"]
    (tmp_path / "transit.pub").write_text(key["keys"]["1"]["public_key"])
    monkeypatch.setenv("BAO_ADDR", openbao.address)
    monkeypatch.setenv("BAO_TOKEN", token)
    where = tmp_path / "archive"
    replay_history.json(
        "archive", "export", "--month", "2026-10", "--archive", str(where), "--transit-key", name
    )
    assert verify(replay_history, where, tmp_path / "transit.pub")["ok"]


def test_a_month_without_typed_events_verifies(
    replay_history: History, keys: tuple[Path, Path], tmp_path: Path
) -> None:
    """A month with no usage, checkpoint or loss events (here no events at all: the month
    before the history begins) verifies as it was exported: its typed files hold the month's
    none of them each once."""
    fresh = tmp_path / "quiet"
    done = replay_history.json(
        "archive", "export", "--month", "2026-09", "--archive", str(fresh), "--key", str(keys[0])
    )
    assert done["events"] == 0
    report = verify(replay_history, fresh, keys[1])
    assert report["ok"], errors(report)


def test_a_month_that_is_not_over_is_not_archived(
    replay_history: History, keys: tuple[Path, Path], tmp_path: Path
) -> None:
    """A month is written once: before its end (this month, by the clock) an export would seal
    it without the events still to come, so it is refused in one sentence, and nothing is
    written."""
    now = datetime.now(UTC)
    for month in (f"{now.year:04d}-{now.month:02d}", f"{now.year + 1:04d}-01"):
        said = replay_history.cli(
            "archive", "export", "--month", month, "--archive", str(tmp_path / "a"),
            "--key", str(keys[0]), code=1,
        )  # fmt: skip
        assert f"{month} is not over" in said and "export it once it has ended" in said
    assert not list((tmp_path / "a").rglob(layout.MANIFEST))


def test_a_deleted_newest_month_is_found(
    replay_history: History, archive: Path, keys: tuple[Path, Path], tmp_path: Path
) -> None:
    """The chain has no month after the newest to link back to it: the signed head does. The
    newest month deleted is found by the head; the head deleted too, by its absence; the head
    rolled back to the month before (signed with the key), by `--through` the month the
    auditor expects."""
    assert verify(replay_history, archive, keys[1], "--through", "2026-11")["ok"]
    where = copy_of(archive, tmp_path)
    shutil.rmtree(where / "rp" / "2026-11")
    found = errors(verify(replay_history, where, keys[1], code=1))
    assert any(
        f.startswith("2026-11: head: names 2026-11 as the newest month, which is missing")
        and "the newest month was deleted" in f
        for f in found
    ), found
    (where / "rp" / layout.HEAD).unlink()
    found = errors(verify(replay_history, where, keys[1], code=1))
    assert any(f.startswith("2026-10: head: is missing from") for f in found), found
    sign_head(where, FileSigner.from_bytes(keys[0].read_bytes()), "2026-10")
    assert verify(replay_history, where, keys[1])["ok"]  # consistent, as far as it goes ...
    found = errors(verify(replay_history, where, keys[1], "--through", "2026-11", code=1))
    assert found == [  # ... but not as far as the auditor knows it must
        "2026-11: archive: ends at 2026-10, before 2026-11: the months after it are missing "
        f"from the local archive at {where} (deleted, or never exported)"
    ]


def test_a_changed_head_is_found(
    replay_history: History, archive: Path, keys: tuple[Path, Path], tmp_path: Path
) -> None:
    where = copy_of(archive, tmp_path)
    head = where / "rp" / layout.HEAD
    head.write_bytes(head.read_bytes().replace(b"2026-11", b"2026-12"))
    found = errors(verify(replay_history, where, keys[1], code=1))
    assert any(f.startswith("2026-11: head: its signature does not verify") for f in found), found


def test_an_export_stopped_before_the_head_is_found_and_completed(
    replay_history: History, archive: Path, keys: tuple[Path, Path], tmp_path: Path
) -> None:
    """A crash after 2026-11's signed manifest and before the head (the head still names
    2026-10), or between the head's signature and the head: verify says so in one sentence,
    and the export run again completes the head, once."""
    signer = FileSigner.from_bytes(keys[0].read_bytes())
    where = copy_of(archive, tmp_path)
    head, head_sig = where / "rp" / layout.HEAD, where / "rp" / layout.HEAD_SIGNATURE
    complete = head.read_bytes()
    sign_head(where, signer, "2026-10")  # what the archive held before 2026-11's head
    stopped = (
        "2026-11: head: does not name 2026-11 yet: an export of 2026-11 stopped after the "
        "month's signed manifest and before the archive's signed head; run `spotcap archive "
        "export --month 2026-11` again to complete it"
    )
    assert errors(verify(replay_history, where, keys[1], code=1)) == [stopped]

    def export_again() -> Any:
        return replay_history.json("archive", "export", "--month", "2026-11", "--archive",
                                   str(where), "--key", str(keys[0]))  # fmt: skip

    done = export_again()
    assert done["completed_head"] is True and done["month"] == "2026-11"
    assert head.read_bytes() == complete
    assert verify(replay_history, where, keys[1], "--through", "2026-11")["ok"]
    again = replay_history.cli("archive", "export", "--month", "2026-11", "--archive",
                               str(where), "--key", str(keys[0]), code=1)  # fmt: skip
    assert "already archived" in again  # complete now: nothing more to write

    # Stopped between the head's signature (2026-11's) and the head (still 2026-10's).
    sign_head(where, signer, "2026-10")
    head_sig.write_bytes(signer.sign(complete))
    assert errors(verify(replay_history, where, keys[1], code=1)) == [stopped]
    said = replay_history.cli("archive", "export", "--month", "2026-11", "--archive",
                              str(where), "--key", str(keys[0]))  # fmt: skip
    assert "stopped before writing the archive's signed head" in said
    assert head.read_bytes() == complete
    assert verify(replay_history, where, keys[1])["ok"]


def test_a_head_put_back_under_a_month_that_does_not_link_to_it_is_not_completed(
    replay_history: History, archive: Path, keys: tuple[Path, Path], tmp_path: Path
) -> None:
    """Only a head naming the month the newest links back to is an export that stopped: a
    head changed otherwise stays a finding, and the export does not overwrite it."""
    where = copy_of(archive, tmp_path)
    head = where / "rp" / layout.HEAD
    head.write_bytes(head.read_bytes().replace(b"2026-11", b"2026-09"))
    found = errors(verify(replay_history, where, keys[1], code=1))
    assert any(f.startswith("2026-11: head: its signature does not verify") for f in found), found
    again = replay_history.cli("archive", "export", "--month", "2026-11", "--archive",
                               str(where), "--key", str(keys[0]), code=1)  # fmt: skip
    assert "already archived" in again
