"""The cyclic garbage collector's pace in the demo's processes (issue 26).

A simulated day of the demo allocates millions of container objects (envelopes, payloads, the
deciders' states, decoded records), nearly all freed by reference counting, none in cycles
that outlive a young collection. At Python's default thresholds (700, 10, 10) the collector
still ran 660 young and 60 middle collections a simulated day in the deciders' run, and 5 full
ones that walked every live object (the deciders' states, the run's summary): about a tenth of
the run's CPU at 1 day, 11% at 2 (each full collection walks a larger heap). At
`THRESHOLDS` it ran 5-8 young collections and no other, 2% of the CPU.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

THRESHOLDS = (50_000, 20, 10)


@contextmanager
def fewer_collections() -> Iterator[None]:
    """Collect at `THRESHOLDS` within the block, then as before."""
    before = gc.get_threshold()
    gc.set_threshold(*THRESHOLDS)
    try:
        yield
    finally:
        gc.set_threshold(*before)
