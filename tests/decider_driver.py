"""A minimal in-memory driver of the deciders for tests: not a runtime, no log, no I/O.

It does what any runtime must (docs/deciders.md): fold each input into the region view, step
every decider that reads it (`streams.deciders.step`) under its key, feed the decisions back
as inputs to the others, and, when event time moves on, tick the keys whose timers fell due.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterable
from typing import Any

from schemas.events import Envelope
from streams.deciders import DeciderSettings, RegionView, Tick, all_deciders, step
from streams.deciders.types import Decider


class Driver:
    def __init__(
        self,
        settings: DeciderSettings | None = None,
        deciders: Iterable[Decider[Any]] | None = None,
    ) -> None:
        self.deciders = tuple(deciders) if deciders is not None else all_deciders(settings)
        self.view = RegionView()
        self.states: dict[tuple[int, str], Any] = {}
        self.decisions: list[Envelope] = []
        self._timers: list[tuple[int, int, str]] = []
        self._now_us = 0

    def feed(self, event: Envelope) -> list[Envelope]:
        """Process one input and everything it causes; returns the decisions, in order."""
        out: list[Envelope] = []
        queue = deque([event])
        while queue:
            current = queue.popleft()
            self.view = self.view.evolve(current)
            if current.occurred_at > self._now_us:
                self._now_us = current.occurred_at
                made = self._tick(current.occurred_at)
                out += made
                queue.extend(made)
            for index, decider in enumerate(self.deciders):
                if current.event_type not in decider.inputs:
                    continue
                key = decider.key(current)
                if key is None:
                    continue
                made = self._step(index, key, current)
                out += made
                queue.extend(made)
        self.decisions += out
        return out

    def feed_all(self, events: Iterable[Envelope]) -> list[Envelope]:
        out: list[Envelope] = []
        for event in events:
            out += self.feed(event)
        return out

    def state(self, decider_name: str, key: str) -> Any:
        for index, decider in enumerate(self.deciders):
            if decider.name == decider_name:
                return self.states.get((index, key))
        raise KeyError(decider_name)

    def _step(self, index: int, key: str, event: Envelope | Tick) -> list[Envelope]:
        decider = self.deciders[index]
        state = self.states.get((index, key))
        if state is None:
            state = decider.initial(key)
        state, made = step(decider, state, event, self.view)
        self.states[(index, key)] = state
        due = decider.due_at(state)
        if due is not None:
            heapq.heappush(self._timers, (due, index, key))
        return made

    def _tick(self, now_us: int) -> list[Envelope]:
        out: list[Envelope] = []
        while self._timers and self._timers[0][0] <= now_us:
            due, index, key = heapq.heappop(self._timers)
            state = self.states.get((index, key))
            if state is None or self.deciders[index].due_at(state) != due:
                continue  # stale: the key moved its timer since
            out += self._step(index, key, Tick(due, now_us))
        return out
