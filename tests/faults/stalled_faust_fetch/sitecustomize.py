"""Fault injection for `spotcap run streams` processes a test starts with this directory first
on PYTHONPATH: once Faust's consumer has handed over SPOTCAP_TEST_STALL_AFTER records, it
fetches nothing more, while its group membership and heartbeats go on: a worker that stops
making decisions with records waiting and no error, as faust-streaming #629 describes (a
consumer that sends no fetch request for its partitions after a rebalance or a reconnect)."""

from __future__ import annotations

import asyncio
import os
from typing import Any

from faust.transport.drivers import aiokafka

AFTER = int(os.environ.get("SPOTCAP_TEST_STALL_AFTER", "500"))
_fetch_records = aiokafka.AIOKafkaConsumerThread._fetch_records
_handed: list[int] = [0]


async def _stalling(self: Any, consumer: Any, active: Any, timeout: Any = None, **kw: Any) -> Any:
    if _handed[0] >= AFTER:
        await asyncio.sleep(timeout or 1.0)
        return {}
    records = await _fetch_records(self, consumer, active, timeout=timeout, **kw)
    _handed[0] += sum(len(batch) for batch in records.values())
    return records


aiokafka.AIOKafkaConsumerThread._fetch_records = _stalling  # type: ignore[method-assign,assignment]
