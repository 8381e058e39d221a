"""The actuator service in one process: the guard's orders carried out through the simulated
region's provider from an embedded log, with every tag, each once across restarts cut short at
each step of a launch and a delete (the SIGKILL version against the served cloud is
tests/test_actuator_kill.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from provider.actuator import (
    ActuatorOptions,
    ActuatorService,
    ActuatorStateError,
    Counts,
    OrderBook,
    Progress,
    failure_id,
)
from provider.base import CALL_TAG, DECISION_TAG, OWNER_TAG, POOL_TAG, LaunchRequest, owned_tags
from schemas.events import (
    ActuationOrdered,
    CapacityReleased,
    Envelope,
    InstanceDeleted,
    InstanceLaunched,
)
from sim import ReclaimSettings, RegionSim, SimConfig
from streams.deciders.actuator import RELEASED_MEMORY_US
from streams.deciders.workload import CLAIM_TAG, ROLE_TAG
from streams.writer import publish
from tests.actuator_support import CLAIM, CODEC, WORKLOAD, Decisions

ME = "spotcap-test"
CONFIG = SimConfig(
    seed=2,
    days=1.0,
    halls=2,
    workloads=0,
    reclaims=ReclaimSettings(background=False, waves_per_day=0.0),
)
CONFIG = replace(CONFIG, orchestrator=replace(CONFIG.orchestrator, orchestrator_id=ME))
RECLAIMABLE = ("c7-amd.16.hall-a.reclaimable", "c7-amd.16.hall-b.reclaimable")


class Killed(BaseException):
    """Stands for a kill at a step (not an Exception: nothing on the way catches it)."""


class Region(Decisions):
    """A quiet simulated region (its provider), and the decisions on an embedded log."""

    def __init__(self, root: Path) -> None:
        self.sim = RegionSim(CONFIG)
        self.provider = self.sim.provider
        super().__init__(root / "log", self.provider.region, ME, self.provider.now_us)
        self.provider.poll_events()  # the catalogue the region published at its start
        self.pools(self.sim.catalogue)
        self.state_dir = root / "actuator"

    def placement(self, pools: tuple[str, ...] = RECLAIMABLE, vcpu_each: int = 32) -> Envelope:
        return super().placement(pools, vcpu_each)

    def service(self, on_step: Callable[[str], None] | None = None) -> ActuatorService:
        service = ActuatorService(
            self.log,
            CODEC,
            self.provider,
            self.state_dir,
            orchestrator_id=ME,
            options=ActuatorOptions(snapshot_every_s=0.0, poll_s=0.05),
        )
        service.on_step = on_step
        return service


@pytest.fixture
def region(tmp_path: Path) -> Iterator[Region]:
    yield Region(tmp_path)


def _instances(region: Region, kind: type[InstanceLaunched | InstanceDeleted]) -> list[str]:
    """The instances of the `kind` events in the log, once per event."""
    return sorted(e.payload.instance_id for e in region.events() if isinstance(e.payload, kind))


def _killer(region: Region, kill_at: str) -> Callable[[str], None]:
    """A step hook that stops the service the first time it reaches `kill_at`."""
    first = [True]

    def kill(step_name: str) -> None:
        if step_name == kill_at and first[0]:
            first[0] = False
            region.provider.poll_events()  # the answers queued in the process die with it
            raise Killed(step_name)

    return kill


def _until_settled(service: ActuatorService, rounds: int = 20) -> None:
    for _ in range(rounds):
        service.step()
        if service.caught_up and not service.book.open_orders:
            return
    raise AssertionError(f"orders still open: {service.book.orders()}")


def test_the_actuator_says_what_it_did() -> None:
    counts = Counts(launched=1_500, deleted=2, failed=3, refused=4, recovered=5, gone=6)
    assert counts.describe() == (
        "launched 1,500, deleted 2, launch failed 3, refused 4, recovered after a restart 5"
    )
    progress = Progress(events=12_345, open_orders=7, counts=counts, caught_up=True)
    assert progress.describe() == (
        "actuator: 12,345 events read, 7 orders open; launched 1,500, deleted 2, failed 3, "
        "refused 4"
    )


def test_orders_wait_for_their_decision_and_carry_every_tag(region: Region) -> None:
    placed = region.placement()
    orders = [e for e in region.events() if e.event_type == "actuation_ordered"]
    assert len(orders) == 4  # two 16-vCPU instances in each of two pools
    book = OrderBook(ME)
    for order in orders:  # the guard's orders first, as the partitioned runtime may write them
        book.observe(order)
    assert book.ready(placed.occurred_at) == []
    for event in region.events():
        book.observe(event)
    ready = book.ready(placed.occurred_at)
    assert [o.order_id for o in ready] == [o.event_id for o in orders]
    request = book.launch_request(ready[0])
    assert request.tags[OWNER_TAG] == ME
    assert request.tags[DECISION_TAG] == placed.event_id
    assert request.tags[CALL_TAG] == orders[0].event_id
    assert request.tags[CLAIM_TAG] == CLAIM
    assert request.tags[ROLE_TAG] == "spread"
    assert request.tags[POOL_TAG] == RECLAIMABLE[0]


def test_a_forgetting_book_keeps_the_causes_of_open_orders_and_forgets_the_rest(
    region: Region,
) -> None:
    """The simulator's loop's book (`forgets`): what was settled goes, a cause an order still
    waits on stays, whatever the moment asked for; a book made without it refuses to forget."""
    placed = region.placement()
    book = OrderBook(ME, forgets=True)
    for event in region.events():
        book.observe(event)
    later = placed.occurred_at + 86_400_000_000
    book.forget(later)  # every order is still open: their cause stays
    ready = book.ready(later)
    assert len(ready) == 4
    assert book.launch_request(ready[0]).tags[DECISION_TAG] == placed.event_id
    for order in ready:
        book.finish(order.order_id)
    book.forget(later)
    assert book.snapshot()["causes"] == []
    assert book.snapshot()["finished"] == []
    with pytest.raises(ValueError, match="forgets=True"):
        OrderBook(ME).forget(later)


def test_a_forgetting_book_forgets_a_claim_a_day_after_its_release(region: Region) -> None:
    """What the book learnt of events for a claim stays while the guard remembers the claim's
    release (a day), and goes after: no order is caused through it again."""
    placed = region.placement()
    book = OrderBook(ME, forgets=True)
    for event in region.events():
        book.observe(event)
    for order in book.orders():
        book.finish(order.order_id)
    released_at = placed.occurred_at + 60_000_000
    release = CapacityReleased(CLAIM, WORKLOAD, "kubernetes", 32, "work done")
    book.observe(replace(region.fact(release, "intake/kubernetes"), occurred_at=released_at))
    learnt = {key for key, claim in book.snapshot()["claims"] if claim == CLAIM}
    assert placed.event_id in learnt and placed.causation_id in learnt
    book.forget(released_at + RELEASED_MEMORY_US)  # released exactly a day before: kept
    assert {key for key, claim in book.snapshot()["claims"] if claim == CLAIM} == learnt
    book.forget(released_at + RELEASED_MEMORY_US + 1)
    assert book.snapshot()["claims"] == []


def test_the_service_launches_each_order_once_and_writes_the_answers(region: Region) -> None:
    placed = region.placement()
    with region.service() as service:
        _until_settled(service)
        assert service.counts.launched == 4
    launched = [e for e in region.events() if e.event_type == "instance_launched"]
    assert len(launched) == 4
    assert {e.causation_id for e in launched} == {placed.event_id}
    mine = region.provider.list_by_tag(DECISION_TAG, placed.event_id)
    assert len(mine) == 4
    assert {e.payload.instance_id for e in launched} == {i.instance_id for i in mine}  # type: ignore[union-attr]
    with region.service() as again:  # a restart acts on nothing twice
        _until_settled(again)
        assert again.counts.launched == 0
    assert len(region.provider.list_by_tag(DECISION_TAG, placed.event_id)) == 4


def test_an_order_sent_again_after_its_answer_is_not_carried_out_again(region: Region) -> None:
    """A restarted decider sends a decision again (same id, same bytes); a tailing actuator
    reads the copy after the launch that answered it (it was written later). Seen in the live
    fault run: six launch orders carried out twice after the broker was killed."""
    region.placement()
    orders = [e for e in region.events() if e.event_type == "actuation_ordered"]
    with region.service() as service:
        _until_settled(service)
        assert service.counts.launched == 4
        publish(region.log, CODEC, region.region, orders)  # the copies, after the answers
        _until_settled(service)
        assert service.counts.launched == 4
    with region.service() as again:  # nor after a restart, from the stored book
        publish(region.log, CODEC, region.region, orders)
        _until_settled(again)
        assert again.counts.launched == 0
    assert len(_instances(region, InstanceLaunched)) == 4


@pytest.mark.parametrize("kill_at", ["started", "called", "answered"])
def test_a_launch_cut_short_at_any_step_happens_once(region: Region, kill_at: str) -> None:
    placed = region.placement()
    with pytest.raises(Killed), region.service(_killer(region, kill_at)) as service:
        _until_settled(service)
    with region.service() as restarted:
        _until_settled(restarted)
    mine = region.provider.list_by_tag(DECISION_TAG, placed.event_id)
    assert len(mine) == 4, f"killed at {kill_at}: {len(mine)} instances for 4 orders"
    assert _instances(region, InstanceLaunched) == sorted(i.instance_id for i in mine)


@pytest.mark.parametrize("kill_at", ["started", "called", "answered"])
def test_a_delete_cut_short_at_any_step_happens_once(region: Region, kill_at: str) -> None:
    placed = region.placement()
    with region.service() as service:
        _until_settled(service)
    mine = sorted(i.instance_id for i in region.provider.list_by_tag(DECISION_TAG, placed.event_id))
    theirs = region.provider.launch(
        LaunchRequest(RECLAIMABLE[0], "not-ours", owned_tags("someone-else", "not-ours"))
    )
    region.provider.poll_events()
    decisions = region.returned(placed, (mine[0], mine[1], theirs.instance_id))
    refused = [e for e in decisions if e.event_type == "actuation_refused"]
    assert [e.payload.instance_id for e in refused] == [theirs.instance_id]  # type: ignore[union-attr]
    with pytest.raises(Killed), region.service(_killer(region, kill_at)) as service:
        _until_settled(service)
    with region.service() as restarted:
        _until_settled(restarted)
    left = sorted(i.instance_id for i in region.provider.list_by_tag(DECISION_TAG, placed.event_id))
    assert left == mine[2:]
    assert region.provider.list_by_tag(OWNER_TAG, "someone-else"), "another owner's was deleted"
    assert _instances(region, InstanceDeleted) == mine[:2]


def test_a_refused_launch_is_a_launch_failed_caused_by_the_decision(region: Region) -> None:
    placed = region.placement(pools=(RECLAIMABLE[0], "no-such-pool"), vcpu_each=16)
    with region.service() as service:
        _until_settled(service)
        assert (service.counts.launched, service.counts.failed) == (1, 1)
    failed = [e for e in region.events() if e.event_type == "launch_failed"]
    orders = [e for e in region.events() if isinstance(e.payload, ActuationOrdered)]
    assert [e.causation_id for e in failed] == [placed.event_id]
    assert failed[0].event_id == failure_id(placed.event_id, 1)
    assert failed[0].payload.error_class == "UnknownPoolError"  # type: ignore[union-attr]
    launched = [e for e in region.events() if isinstance(e.payload, InstanceLaunched)]
    assert len(launched) + len(failed) == len(orders)


def test_one_actuator_per_state_folder(region: Region) -> None:
    second = region.service()
    with region.service(), pytest.raises(ActuatorStateError, match="another actuator holds"):
        second.__enter__()
