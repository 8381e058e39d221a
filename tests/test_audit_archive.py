"""Capacity actions audited separately (ADR-25): every capacity action, with the identity that
caused it, goes from the fleet state's outbox through `spotcap run relay` to the audit topic,
and the archive exports the month's actions once each as ``audit.jsonl``, under the signed
manifest: a changed byte is found by verify."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from contracts.signing import generate_key_pem
from replay.archive.audit import audit_lines
from spotcap.wiring import stores
from tests.replay_support import History, small_config


def test_the_months_capacity_actions_are_archived_once_with_who_caused_them(
    tmp_path: Path,
) -> None:
    h = History(tmp_path / "home", small_config(region="aud", days=3, workloads=12))
    try:
        h.cli("project", "fleet")
        h.cli("run", "relay", "--once")
        h.cli("run", "relay", "--once")  # nothing more: each action was sent once
    finally:
        stores(h.settings).stop_embedded_postgres()
    private_pem, public_pem = generate_key_pem()
    (tmp_path / "a.key").write_bytes(private_pem)
    (tmp_path / "a.pub").write_bytes(public_pem)
    where = tmp_path / "archive"
    h.json("archive", "export", "--month", "2026-11", "--archive", str(where),
           "--key", str(tmp_path / "a.key"))  # fmt: skip
    [month_dir] = [p for p in where.rglob("2026-11") if p.is_dir()]
    manifest = json.loads((month_dir / "manifest.json").read_text())
    lines = (month_dir / "audit.jsonl").read_bytes().splitlines()
    assert manifest["files"]["audit.jsonl"]["rows"] == len(lines) > 0
    records = [json.loads(line) for line in lines]
    assert {r["occurred_at"][:7] for r in records} == {"2026-11"}
    assert max(Counter(r["action_id"] for r in records).values()) == 1
    assert all(r["version"] == 2 and r["actor"] for r in records)
    actions = {r["action"] for r in records}
    assert {"place", "launch"} <= actions, actions
    launches = [r for r in records if r["action"] == "launch"]
    assert all(r["actor"].startswith("orchestrator:") for r in launches)
    assert all(r["actor"].startswith("producer:") for r in records if r["action"] == "place")
    # The same records, read again and rendered, give the same bytes: once each, in order.
    assert audit_lines(records, "2026-11") == (month_dir / "audit.jsonl").read_bytes()
    ok = h.json("archive", "verify", "--archive", str(where),
                "--public-key", str(tmp_path / "a.pub"))  # fmt: skip
    assert ok["ok"] is True
    changed = bytearray((month_dir / "audit.jsonl").read_bytes())
    changed[10] ^= 0x01
    (month_dir / "audit.jsonl").write_bytes(bytes(changed))
    report = h.json("archive", "verify", "--archive", str(where),
                    "--public-key", str(tmp_path / "a.pub"), code=1)  # fmt: skip
    found = [f for m in report["months"] for f in m["findings"] if f["error"]]
    assert [f["subject"] for f in found] == ["audit.jsonl"], found
    assert "changed after export" in found[0]["message"]
