"""The keyring is recorded with a run (ADR-30, issue 24): the keys the deciders trusted for
changes of authority are an item of the deciders' journal (``keyring_trusted``), recorded by
the region's sequencer at its start and whenever its keyring changes, so that a replay of the
journal with no keyring given makes the run's decisions byte for byte, refusals and
acceptances included, across a change of keyring.

On the real broker: `spotcap run streams --keyring` (sequencer and Faust workers), the
embedded runner as the reference, and the journal replayed with no keyring.
"""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path

import pytest

from contracts.approvals import Published
from contracts.signing import FileSigner
from infra import servers
from schemas.events import ContractRefused, Envelope, FallbackDecided, KeyringTrusted
from streams.deciders import DeciderSettings, RegionView
from streams.deciders.authority import trust_digest
from streams.kafka import KafkaLog
from streams.runtime import state_codec
from streams.runtime.core import Clock, DeciderCore
from streams.runtime.embedded import CheckpointFile, EmbeddedRunner, ListSink, replay_journal
from streams.runtime.journal import Header, RuntimeTopics
from streams.runtime.kafka_io import PartitionReader
from streams.runtime.sequencer import Sequencer, prepare
from streams.runtime.service import decider_settings
from streams.writer import EventWriter
from tests.decider_events import MIN, Events, H, fleet
from tests.factories import T0_US
from tests.runtime_scenario import CODEC, by_id
from tests.test_contract_approvals import BOARD, OWNER
from tests.test_deciders_authority import GUARANTEED, _b64, cap, published, write
from tests.test_runtime_faust import Region as FaustRegion
from tests.test_runtime_faust import assert_same, region_factory

__all__ = ["region_factory"]  # a fixture, used by name

BOARD_2 = FileSigner.from_bytes(bytes(range(40, 72)))
"""The board's new key: the second keyring trusts it, and no longer the first key."""


def keyring(path: Path, board: FileSigner) -> Path:
    path.write_text(
        "format: spotcap.keyring/v1\n"
        f"owners:\n  data-platform: {_b64(OWNER)}\n"
        f"authorities:\n  capacity-board: {_b64(board)}\n"
    )
    return path


def version(
    path: Path, name: str, n: int, eur: str, *boards: FileSigner, before: str, at_us: int
) -> Envelope:
    """Version `n` of etl with a daily cap of `eur`, signed by the owner and `boards` (as the
    capacity board); the compiler's baseline says `before` (EUR) was published."""
    write(path, n, cap(eur), (OWNER, "data-platform"), *((b, "capacity-board") for b in boards))
    baseline = {"etl": Published(0, int(float(before) * 1_000_000), "a@example.org")}
    return dataclasses.replace(published(path, n, cap(eur), baseline, at_us), region=name)


def phases(tmp_path: Path, name: str) -> tuple[list[Envelope], list[Envelope]]:
    """Under the first keyring: version 1 (1 EUR a day, both signatures) in force, version 2
    (500 EUR, the owner alone) refused, version 3 (500 EUR, owner and board) accepted, then a
    shortfall spent within 500 EUR. Under the second keyring (the board's key replaced):
    version 4 (900 EUR) signed with the board's old key refused, version 5 signed with its new
    key accepted, then another shortfall."""
    path = tmp_path / "etl.yaml"
    events = Events(name)
    first = [
        *fleet(events, GUARANTEED),
        version(path, name, 1, "1.00", BOARD, before="0", at_us=T0_US + MIN),
        version(path, name, 2, "500.00", before="500.00", at_us=T0_US + 2 * MIN),
        version(path, name, 3, "500.00", BOARD, before="1.00", at_us=T0_US + 3 * MIN),
        events.claim("etl", 64, T0_US + H),
    ]
    second = [
        version(path, name, 4, "900.00", BOARD, before="900.00", at_us=T0_US + 2 * H),
        version(path, name, 5, "900.00", BOARD_2, before="900.00", at_us=T0_US + 2 * H + MIN),
        events.claim("etl", 64, T0_US + 3 * H),
    ]
    return first, second


def write_inputs(log: KafkaLog, name: str, inputs: list[Envelope]) -> None:
    writer = EventWriter(log, CODEC, name)
    for event in inputs:
        writer.write(event)
    writer.close()


def journal(bootstrap: str, name: str) -> list[tuple[Header, bytes]]:
    reader = PartitionReader(bootstrap, RuntimeTopics(name).journal)
    try:
        end = reader.end()
        records = reader.read_until(end - 1) if end else []
    finally:
        reader.close()
    out = [(Header.decode(m.headers), m.offset, m.value or b"") for m in records]
    return [(h, v) for h, offset, v in out if h.position == offset]  # racing writers' dropped


def recorded_keyrings(bootstrap: str, name: str) -> list[tuple[int, str]]:
    """(position, keyring SHA-256) of every keyring the journal records."""
    out = []
    for header, value in journal(bootstrap, name):
        if header.kind == "fact":
            p = CODEC.decode(value).payload
            if isinstance(p, KeyringTrusted):
                out.append((header.position, p.keyring_sha256))
    return out


def refused_versions(decisions: list[Envelope]) -> list[int]:
    return sorted(
        d.payload.contract_version for d in decisions if isinstance(d.payload, ContractRefused)
    )


def test_a_run_under_a_keyring_replays_byte_for_byte_without_one(
    kafka: servers.Server, tmp_path: Path, region_factory: list[FaustRegion]
) -> None:
    """`spotcap run streams --keyring` refuses a raise signed once and accepts one signed
    twice, then runs again with the board's key replaced; the journal, replayed with no
    keyring, gives every decision of the run byte for byte (and so does the embedded runner
    given each keyring in turn)."""
    name = f"kr-{uuid.uuid4().hex[:6]}"
    first, second = phases(tmp_path, name)
    ring_1 = keyring(tmp_path / "ring-1.yaml", BOARD)
    ring_2 = keyring(tmp_path / "ring-2.yaml", BOARD_2)
    prepare(kafka.address, CODEC, RuntimeTopics(name))
    log = KafkaLog(kafka.address)

    # The reference: the embedded runner, given the first keyring, then the second.
    checkpoint = CheckpointFile(tmp_path / "embedded.checkpoint")
    reference = ListSink()
    write_inputs(log, name, first)
    EmbeddedRunner(log, CODEC, name, reference, settings=decider_settings(ring_1),
                   checkpoint=checkpoint).run()  # fmt: skip
    expected_first = by_id(reference.decisions)
    assert refused_versions(reference.decisions) == [2]
    [decided] = [d.payload for d in reference.decisions if isinstance(d.payload, FallbackDecided)]
    assert decided.kind == "within_cap" and decided.cap_eur_micros == 500_000_000

    run = FaustRegion(kafka.address, name, tmp_path)
    region_factory.append(run)
    run.start("all", "first", "--keyring", str(ring_1))
    run.read_until(expected_first)
    run.settle()
    assert_same(by_id(run.decisions), expected_first)
    run.stop()

    write_inputs(log, name, second)
    EmbeddedRunner(log, CODEC, name, reference, settings=decider_settings(ring_2),
                   checkpoint=checkpoint).run()  # fmt: skip
    expected = by_id(reference.decisions)
    assert refused_versions(reference.decisions) == [2, 4]  # the old key counts no more
    again = FaustRegion(kafka.address, name, tmp_path)
    region_factory.append(again)
    again.start("all", "second", "--keyring", str(ring_2))
    again.read_until(expected)
    again.settle()
    assert_same(by_id(again.decisions), expected)

    # The journal says which keys were trusted from where: the first keyring at the start,
    # the second where the run went on with it.
    recorded = recorded_keyrings(kafka.address, name)
    digests = [digest for _, digest in recorded]
    assert digests == [trust_digest(decider_settings(r).trust) for r in (ring_1, ring_2)]
    assert recorded[0][0] == 0 and recorded[1][0] > len(first)

    # Replayed with no keyring given: the run's decisions, byte for byte.
    replayed = ListSink()
    replay_journal(kafka.address, CODEC, name, replayed)
    assert_same(by_id(replayed.decisions), expected)
    assert refused_versions(replayed.decisions) == [2, 4]

    # The record is what makes it so: the same items without the keyrings' records accept
    # every version (nothing refused), a different history.
    core = DeciderCore()
    blind: list[Envelope] = []
    for header, value in journal(kafka.address, name):
        if header.kind == "clock":
            assert header.clock_us is not None
            blind += core.apply(Clock(header.clock_us))
        elif header.kind == "fact":
            event = CODEC.decode(value)
            if not isinstance(event.payload, KeyringTrusted):
                blind += core.apply(event)
    assert refused_versions(blind) == []


def test_the_sequencer_records_a_keyring_once_and_its_removal(
    kafka: servers.Server, tmp_path: Path
) -> None:
    """A sequencer restarted with the keyring in force records nothing more; one started
    without a keyring after one with records the empty keyring (every version takes effect
    from there, as the run did), and the replay follows."""
    name = f"ks-{uuid.uuid4().hex[:6]}"
    first, second = phases(tmp_path, name)
    ring = decider_settings(keyring(tmp_path / "ring.yaml", BOARD))
    prepare(kafka.address, CODEC, RuntimeTopics(name))
    log = KafkaLog(kafka.address)

    def sequence(settings: DeciderSettings, inputs: list[Envelope]) -> None:
        write_inputs(log, name, inputs)
        wanted = {e.event_id for e in inputs}
        sequencer = Sequencer(kafka.address, CODEC, RuntimeTopics(name), settings=settings)
        try:
            sequencer.start()
            for _ in range(600):  # bounded: until every input is in the journal
                sequencer.step(0.5)
                if wanted <= set(sequencer.sequence.seen.snapshot()):
                    break
            assert wanted <= set(sequencer.sequence.seen.snapshot())
        finally:
            sequencer.close()

    sequence(ring, first[:-1])
    sequence(ring, first[-1:])  # restarted with the same keyring: no new record
    assert [d for _, d in recorded_keyrings(kafka.address, name)] == [trust_digest(ring.trust)]
    sequence(decider_settings(None), second)  # no keyring now: recorded as such
    recorded = recorded_keyrings(kafka.address, name)
    assert [d for _, d in recorded] == [trust_digest(ring.trust), trust_digest(None)]

    replayed = ListSink()
    replay_journal(kafka.address, CODEC, name, replayed)
    assert refused_versions(replayed.decisions) == [2]  # 4 is taken: no keyring any more


def test_a_view_stored_before_the_keyring_was_recorded_reads_with_none() -> None:
    """A stage's state stored by the release before (its region view without `trust`) reads
    back with no keyring in force, instead of refusing the stored state; a stored class with
    more fields than this release knows is still refused."""
    view = RegionView(region="eu-west-1", now_us=T0_US)
    stored = state_codec.to_json(view)
    name, *values = stored["@c"]
    older = {"@c": [name, *values[:-1]]}  # `trust` is the view's last field
    assert state_codec.from_json(older) == view
    with pytest.raises(state_codec.StateCodecError, match="another release"):
        state_codec.from_json({"@c": [name, *values, None]})
