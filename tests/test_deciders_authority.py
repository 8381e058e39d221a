"""Two signatures where authority is spent (ADR-30): the deciders check a published contract
that raises a floor or a cap, or changes the approver, against the keys they trust.

The events are the compiler's own (`compile_contracts` with the keyring and the files'
``.signatures.json``), and the deciders are the region's, all of them, through the runtime's
core (`DeciderCore`, what the embedded runner, the simulator and each Faust stage run). The
compiler's baseline of what was published is a file beside its output: a compile against a
baseline that says too much (edited, or an empty ``--out``: the bootstrap) accepts a raise
that was never signed twice, and the deciders, which know the version in force, refuse it.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from contracts import FeasibilityEnv, compile_contracts
from contracts.approvals import SIGNATURES_SUFFIX, ChangeControl, Published
from contracts.approvals import sign_contract_file as sign
from contracts.signing import raw_public_bytes
from infra import servers
from projections.read import why
from schemas.events import ContractPublished, ContractRefused, Envelope, FallbackDecided
from streams.deciders import DeciderSettings
from streams.deciders.authority import ChangeTrust
from streams.kafka import KafkaLog
from streams.runtime.core import DeciderCore
from streams.runtime.embedded import EmbeddedRunner, ListSink
from streams.runtime.journal import RuntimeTopics
from streams.runtime.sequencer import prepare
from streams.runtime.service import decider_settings
from streams.writer import EventWriter
from tests.decider_events import MIN, Events, H, fleet, spread_fleet
from tests.factories import T0_US
from tests.runtime_scenario import CODEC, by_id
from tests.test_contract_approvals import BOARD, KEYRING, OWNER, STRANGER, contract
from tests.test_runtime_faust import Region as FaustRegion
from tests.test_runtime_faust import assert_same, region_factory

__all__ = ["region_factory"]  # a fixture, used by name

SPOTCAP = str(Path(sys.executable).with_name("spotcap"))
GUARANTEED = [s for s in spread_fleet(halls=3) if s.model == "guaranteed"]


def _b64(signer: object) -> str:
    return base64.b64encode(raw_public_bytes(signer.public_key())).decode()  # type: ignore[attr-defined]


TRUST = ChangeTrust(
    owners={"data-platform": _b64(OWNER)}, authorities={"capacity-board": _b64(BOARD)}
)


def cap(eur: str) -> str:
    return f'fallback:\n  spend_cap_per_day_eur_micros: "EUR {eur}"\n  approver: a@example.org\n'


def published(
    path: Path, version: int, extra: str, baseline: dict[str, Published], at_us: int
) -> Envelope:
    """The compiler's ``contract_published`` for `path` written as `version` with `extra`,
    against `baseline` (what the compiler believes was published); the compile must pass."""
    sig = path.with_name(path.name + SIGNATURES_SUFFIX)
    control = ChangeControl(KEYRING, baseline, {path: sig.read_bytes()} if sig.exists() else {})
    result = compile_contracts(
        {path: path.read_bytes()}, FeasibilityEnv(), published_at_us=at_us,
        change_control=control,
    )  # fmt: skip
    assert result.ok, [str(e) for e in result.errors]
    [event] = result.events
    return event


def write(path: Path, version: int, extra: str, *signers: tuple[object, str]) -> None:
    path.write_text(contract(version=version, extra=extra))
    path.with_name(path.name + SIGNATURES_SUFFIX).unlink(missing_ok=True)
    for signer, name in signers:
        sign(path, signer, name)  # type: ignore[arg-type]


class Region:
    """The region's deciders (with `trust`), its guaranteed pools registered."""

    def __init__(self, trust: ChangeTrust | None = TRUST) -> None:
        self.core = DeciderCore(DeciderSettings(trust=trust))
        self.events = Events()
        self.out: list[Envelope] = []
        self.feed(*fleet(self.events, GUARANTEED))

    def feed(self, *events: Envelope) -> list[Envelope]:
        made: list[Envelope] = []
        for event in events:
            made += self.core.process(event)
        self.out += made
        return made

    def shortfall(self, at_us: int) -> FallbackDecided:
        """64 vCPU asked for with no reclaimable pool: the arbiter's answer, by the cap."""
        made = self.feed(self.events.claim("etl", 64, at_us))
        [decided] = [e.payload for e in made if isinstance(e.payload, FallbackDecided)]
        return decided


def refusals(out: list[Envelope]) -> list[ContractRefused]:
    return [e.payload for e in out if isinstance(e.payload, ContractRefused)]


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "etl.yaml"


def first_version(path: Path, region: Region) -> Envelope:
    """Version 1 with a 1 EUR daily cap, signed by the owner and the board: in force."""
    write(path, 1, cap("1.00"), (OWNER, "data-platform"), (BOARD, "capacity-board"))
    v1 = published(path, 1, cap("1.00"), {}, T0_US + MIN)
    assert refusals(region.feed(v1)) == []
    return v1


def test_a_raise_signed_by_the_owner_alone_is_refused_and_spends_nothing(path: Path) -> None:
    region = Region()
    first_version(path, region)
    write(path, 2, cap("500.00"), (OWNER, "data-platform"))
    # The compiler's baseline says 500 EUR were already published: it sees no change.
    v2 = published(path, 2, cap("500.00"), {"etl": Published(0, 500_000_000, "a@example.org")},
                   T0_US + 2 * MIN)  # fmt: skip
    assert isinstance(v2.payload, ContractPublished)
    assert set(v2.payload.signatures) == {"data-platform"}
    made = region.feed(v2)
    [v2_refused] = [e for e in made if isinstance(e.payload, ContractRefused)]
    [refused] = refusals(made)
    assert v2_refused.causation_id == v2.event_id
    assert (refused.workload_id, refused.contract_version, refused.in_force_version) == (
        "etl", 2, 1,
    )  # fmt: skip
    assert refused.signers == ("data-platform",) and refused.owner == "data-platform"
    assert "raises the daily spend cap from EUR 1.00 to EUR 500.00" in refused.reason
    assert "a higher authority's is missing or does not verify" in refused.reason
    assert "the owner data-platform's" not in refused.reason  # the owner's signature holds
    said = why.sentence({"event_type": v2_refused.event_type, "key": "etl",
                         "payload": v2_refused.payload.to_avro()})  # fmt: skip
    assert said.startswith("version 2 of the contract of etl was refused, version 1 stays")
    assert "EUR 500.00" in said and "signed by data-platform" in said
    # Version 1 stays in force: beyond its 1 EUR the approver is paged, nothing is bought.
    decided = region.shortfall(T0_US + H)
    assert decided.kind == "escalated" and decided.awaiting_approval
    assert decided.cap_eur_micros == 1_000_000 and decided.projected_eur_micros == 0


def test_a_raise_signed_by_the_owner_and_a_higher_authority_takes_effect(path: Path) -> None:
    region = Region()
    first_version(path, region)
    write(path, 2, cap("500.00"), (OWNER, "data-platform"), (BOARD, "capacity-board"))
    v2 = published(path, 2, cap("500.00"), {"etl": Published(0, 1_000_000, "a@example.org")},
                   T0_US + 2 * MIN)  # fmt: skip
    assert refusals(region.feed(v2)) == []
    decided = region.shortfall(T0_US + H)
    assert decided.kind == "within_cap" and not decided.awaiting_approval
    assert decided.cap_eur_micros == 500_000_000 and decided.projected_eur_micros > 0


def test_a_lowering_signed_by_the_owner_alone_takes_effect(path: Path) -> None:
    region = Region()
    write(path, 1, cap("500.00"), (OWNER, "data-platform"), (BOARD, "capacity-board"))
    assert refusals(region.feed(published(path, 1, cap("500.00"), {}, T0_US + MIN))) == []
    write(path, 2, cap("1.00"), (OWNER, "data-platform"))
    v2 = published(path, 2, cap("1.00"), {"etl": Published(0, 500_000_000, "a@example.org")},
                   T0_US + 2 * MIN)  # fmt: skip
    assert refusals(region.feed(v2)) == []
    decided = region.shortfall(T0_US + H)
    assert decided.kind == "escalated" and decided.cap_eur_micros == 1_000_000


def test_signatures_bind_the_authority_the_event_declares(path: Path) -> None:
    """Both signatures of version 2 with a 500 EUR cap, carried by an event that says 5,000
    EUR (or a floor, or another approver), or by the wrong keys: refused."""
    region = Region()
    v1 = first_version(path, region)
    write(path, 2, cap("500.00"), (OWNER, "data-platform"), (BOARD, "capacity-board"))
    v2 = published(path, 2, cap("500.00"), {"etl": Published(0, 1_000_000, "a@example.org")},
                   T0_US + 2 * MIN)  # fmt: skip
    p = v2.payload
    assert isinstance(p, ContractPublished)
    for n, forged in enumerate(
        [
            dataclasses.replace(p, spend_cap_eur_micros=5_000_000_000),
            dataclasses.replace(p, floor_vcpu=64),
            dataclasses.replace(p, approver="mallory@example.org"),
            dataclasses.replace(p, contract_version=3),
            dataclasses.replace(p, owner="capacity-board"),  # the board as its own owner
            dataclasses.replace(p, signatures={}),
        ]
    ):
        event = dataclasses.replace(
            v2, event_id=f"00000000-0000-4000-8000-{n:012d}", payload=forged,
            occurred_at=T0_US + (3 + n) * MIN, recorded_at=T0_US + (3 + n) * MIN,
        )  # fmt: skip
        [refused] = refusals(region.feed(event))
        assert refused.in_force_version == v1.payload.contract_version  # type: ignore[union-attr]
    # The same signatures by keys the deciders do not trust for those names count for nothing.
    strangers = ChangeTrust(
        owners={"data-platform": _b64(STRANGER)}, authorities={"capacity-board": _b64(BOARD)}
    )
    other = Region(strangers)
    other_v1 = dataclasses.replace(v1)
    assert len(refusals(other.feed(other_v1))) == 1  # a new workload's cap: refused too
    assert "the owner data-platform's is missing" in refusals(other.out)[0].reason


def test_without_a_keyring_the_deciders_take_every_version_as_before(path: Path) -> None:
    region = Region(trust=None)
    first_version(path, region)
    write(path, 2, cap("500.00"))  # unsigned
    v2 = published(path, 2, cap("500.00"), {"etl": Published(0, 500_000_000, "a@example.org")},
                   T0_US + 2 * MIN)  # fmt: skip
    assert refusals(region.feed(v2)) == []
    assert region.shortfall(T0_US + H).kind == "within_cap"


def test_the_keyring_of_spotcap_run_streams(tmp_path: Path) -> None:
    ring = tmp_path / "keyring.yaml"
    ring.write_text(
        "format: spotcap.keyring/v1\n"
        f"owners:\n  data-platform: {_b64(OWNER)}\n"
        f"authorities:\n  capacity-board: {_b64(BOARD)}\n"
    )
    assert decider_settings(ring).trust == TRUST
    assert decider_settings(None).trust is None
    ring.write_text("format: spotcap.keyring/v1\nowners:\n  data-platform: not-a-key\n")
    env = {**os.environ, "SPOTCAP_HOME": str(tmp_path / "home")}
    env.pop("SPOTCAP_KAFKA_BOOTSTRAP", None)
    done = subprocess.run(
        [SPOTCAP, "run", "streams", "--keyring", str(ring)],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode != 0
    assert "owners.data-platform: not the base64 of a 32-byte Ed25519 public key" in done.stderr
    assert "--keyring" in done.stderr
    ring.write_text(f"format: spotcap.keyring/v1\nowners:\n  data-platform: {_b64(OWNER)}\n")
    done = subprocess.run(
        [SPOTCAP, "run", "streams", "--keyring", str(ring)],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode != 0 and "at least one owner and one higher authority" in done.stderr
    json.dumps(TRUST.owners)  # the trust is plain data (names and base64 keys)


def test_the_faust_workers_under_a_keyring_refuse_a_raise_signed_once(
    kafka: servers.Server, tmp_path: Path, path: Path, region_factory: list[FaustRegion]
) -> None:
    """`spotcap run streams --keyring` on the real broker: the workers make the embedded
    runner's decisions with the same keys, a `contract_refused` among them, and the version in
    force (1 EUR a day) escalates the shortfall instead of spending on the refused one."""
    name = f"auth-{uuid.uuid4().hex[:6]}"
    events = Events(name)
    write(path, 1, cap("1.00"), (OWNER, "data-platform"), (BOARD, "capacity-board"))
    v1 = published(path, 1, cap("1.00"), {}, T0_US + MIN)
    write(path, 2, cap("500.00"), (OWNER, "data-platform"))
    v2 = published(path, 2, cap("500.00"), {"etl": Published(0, 500_000_000, "a@example.org")},
                   T0_US + 2 * MIN)  # fmt: skip
    inputs = [
        *fleet(events, GUARANTEED),
        dataclasses.replace(v1, region=name),
        dataclasses.replace(v2, region=name),
        events.claim("etl", 64, T0_US + H),
    ]
    prepare(kafka.address, CODEC, RuntimeTopics(name))
    log = KafkaLog(kafka.address)
    writer = EventWriter(log, CODEC, name)
    for event in inputs:
        writer.write(event)
    writer.close()
    ring = tmp_path / "keyring.yaml"
    ring.write_text(
        "format: spotcap.keyring/v1\n"
        f"owners:\n  data-platform: {_b64(OWNER)}\n"
        f"authorities:\n  capacity-board: {_b64(BOARD)}\n"
    )
    sink = ListSink()
    EmbeddedRunner(log, CODEC, name, sink, settings=decider_settings(ring)).run()
    expected = by_id(sink.decisions)
    types = sorted(CODEC.decode(b).event_type for b in expected.values())
    assert "contract_refused" in types and "fallback_decided" in types, types
    region = FaustRegion(kafka.address, name, tmp_path)
    region_factory.append(region)
    region.start("all", "all", "--keyring", str(ring))
    region.read_until(expected)
    region.settle()
    assert_same(by_id(region.decisions), expected)
    [refused] = refusals(region.decisions)
    assert refused.contract_version == 2 and refused.in_force_version == 1
    [decided] = [d.payload for d in region.decisions if isinstance(d.payload, FallbackDecided)]
    assert decided.kind == "escalated" and decided.cap_eur_micros == 1_000_000
