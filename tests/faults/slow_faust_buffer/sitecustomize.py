"""Fault injection for `spotcap run streams` processes a test starts with this directory first
on PYTHONPATH: Faust's send buffer (which carries table changelog writes) hands each message on
0.15 s late, as on a loaded machine. Faust's own flush gives up on that buffer after 0.1 s
(``ProducerBuffer.flush_atmost``), so a worker that relied on it committed offsets whose
snapshot was still unsent."""

from __future__ import annotations

import asyncio
from typing import Any

from faust.transport import producer

DELAY_S = 0.15
_send_pending = producer.ProducerBuffer._send_pending


async def _late(self: Any, fut: Any) -> None:
    await asyncio.sleep(DELAY_S)
    await _send_pending(self, fut)


producer.ProducerBuffer._send_pending = _late  # type: ignore[method-assign]
