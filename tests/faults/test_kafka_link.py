"""The link to the Kafka broker faulted (Toxiproxy, `infra.servers.toxiproxy`): a producer and
a processor (`streams.processing.runner.Processor`: consume, decide, write, commit) reach the
broker only through a proxy, which adds latency and then black-holes the link for a while.
Afterwards, read straight from the broker: every record produced is in the log once, and every
input's output is there, each event id once (a batch written again after the link came back
is the same events again, byte for byte), and the group committed to the end.

A Kafka client connects to the broker it is told of after bootstrap, so the broker advertises
the proxy (`start_kafka(advertised_through=...)`) on a listener of its own; the checks use the
direct listener, which no fault touches."""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions
from confluent_kafka.admin import AdminClient

from infra import servers
from infra.servers.kafka import proxied_listener
from infra.servers.toxiproxy import Proxy
from schemas.events import Envelope, RateCard
from streams.kafka import KafkaLog
from streams.topics import region_topics, topic_name
from tests.factories import notice
from tests.runtime_scenario import by_id
from tests.test_processing_chain import CODEC, history, price_of, processor
from tests.test_runtime_faust import Region, assert_same, record

pytestmark = pytest.mark.slow

PARTITION_S = 12.0
"""Longer than the producer's linger and the consumer's polls, shorter than the group's
session timeout (45 s): the link comes back before the broker gives the member up."""


def committed_all(bootstrap: str, log: KafkaLog, topic: str, group: str) -> bool:
    """The group committed every partition of `topic` to its end (asked of the broker by an
    admin client: a consumer in the group would make it rebalance)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    (future,) = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group)], request_timeout=30
    ).values()
    committed = {tp.partition: tp.offset for tp in future.result().topic_partitions
                 if tp.topic == topic}  # fmt: skip
    return all(committed.get(n, -1) >= end for n, end in log.end_offsets(topic).items() if end)


@pytest.fixture(scope="module")
def proxied(
    tmp_path_factory: pytest.TempPathFactory, toxiproxy: servers.Server
) -> Iterator[tuple[servers.Server, Proxy]]:
    """A broker of its own whose clients come through a proxy (its upstream is the broker's
    proxied listener, known once the broker runs)."""
    api = servers.Toxiproxy(toxiproxy.address)
    proxy = api.proxy(f"kafka-{uuid.uuid4().hex[:8]}", "127.0.0.1:9")
    folder: Path = tmp_path_factory.mktemp("kafka-proxied")
    broker = servers.start_kafka(folder, advertised_through=proxy.listen)
    try:
        proxy.upstream(proxied_listener(broker))
        yield broker, proxy
    finally:
        servers.stop(broker)


def test_a_producer_and_a_processor_ride_out_latency_and_a_partition(
    proxied: tuple[servers.Server, Proxy],
) -> None:
    broker, proxy = proxied
    region = f"t{uuid.uuid4().hex[:10]}"
    direct = KafkaLog(broker.address)
    direct.apply_topics(region_topics(region, partitions_scale=0.5))
    through = KafkaLog(proxy.listen)
    lifecycle = topic_name(region, "lifecycle")
    group = f"g-{uuid.uuid4().hex}"
    producer = through.producer()
    proc = processor(through, region, group, price_of)
    total = 300

    def produce(seqs: range) -> None:
        for seq in seqs:
            event = notice(region, seq % 13, seq=seq)
            producer.produce(lifecycle, CODEC.encode(event), key=event.key.encode())

    def run_for(seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            proc.run_once()

    try:
        produce(range(0, 100))
        assert len(producer.flush(60)) == 100
        run_for(3)
        proxy.latency(100, jitter_ms=50)
        produce(range(100, 200))
        assert len(producer.flush(120)) == 100
        run_for(3)
        proxy.partition()  # records produced now wait in the producer for the link
        healer = threading.Timer(PARTITION_S, proxy.heal)  # whatever blocks here meanwhile
        healer.start()
        produce(range(200, total))
        run_for(PARTITION_S)
        healer.join()
        assert len(producer.flush(120)) == total - 200
        deadline = time.monotonic() + 180
        while (
            not committed_all(broker.address, direct, lifecycle, group)
            and time.monotonic() < deadline
        ):
            run_for(1)
    finally:
        proxy.heal()
        proc.close()
        producer.close()
    assert committed_all(broker.address, direct, lifecycle, group), (
        "the processor did not commit to the end"
    )

    inputs = history(direct, region, "lifecycle")
    assert len(inputs) == total, "each record produced is in the log once"
    assert len({e.event_id for e in inputs}) == total
    written = history(direct, region, "market")
    by_id: dict[str, Envelope] = {}
    for event in written:
        assert by_id.setdefault(event.event_id, event) == event, "a resend is the same event"
    prices = Counter(
        e.payload.price_per_vcpu_h_eur_micros for e in by_id.values()
        if isinstance(e.payload, RateCard)
    )  # fmt: skip
    assert sorted(prices) == list(range(total)) and set(prices.values()) == {1}


def test_the_deciders_ride_out_latency_and_a_partition(
    proxied: tuple[servers.Server, Proxy], tmp_path: Path
) -> None:
    """The deciders as `spotcap run streams` processes (a sequencer and a Faust worker) reach
    the broker only through the proxy; a third of the way through the scenario the link gets
    latency and then a black hole longer than the worker's session timeout (6 s). Nobody
    restarts anything by hand (a worker whose watch finds it stalled after the heal exits and
    is started again, as the live region's supervisor does: `Region`): afterwards the
    decisions are exactly the embedded runner's over the same inputs (by event id and bytes;
    a resend is the same decision)."""
    broker, proxy = proxied
    name = f"rtf-net-{uuid.uuid4().hex[:6]}"
    expected = by_id(record(broker.address, name))  # inputs written straight to the broker
    region = Region(broker.address, name, tmp_path)  # decisions read straight from it too
    region.bootstrap = proxy.listen  # the processes come through the proxy
    try:
        region.start("sequencer", "sequencer")
        region.start("worker", "worker-1")
        region.read_until(expected, share=1 / 3)
        proxy.latency(100, jitter_ms=50)
        region.settle(2.0)
        proxy.partition()
        seen = len({d.event_id for d in region.decisions})
        assert seen < len(expected), "the partition came too late to test anything"
        region.settle(PARTITION_S)
        proxy.heal()
        region.read_until(expected)  # fails if a process exited
        region.settle()
    finally:
        proxy.heal()
        region.stop()
    assert_same(by_id(region.decisions), expected)
