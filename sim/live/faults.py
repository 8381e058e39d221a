"""Faults injected into a live run (`LiveConfig.faults`): a server of the region (Kafka,
PostgreSQL, NATS) or one of its services (the deciders, the projections, the actuator, a real
agent) killed (SIGKILL) or paused (SIGSTOP) at a moment of sim time, for a while of wall time.

A killed server is started again on the ports it had (`infra.servers` keeps them), after
`for_s`; a killed service is started again by its supervisor (`processes.Service`); a paused
one gets SIGCONT after `for_s`. The faults run one after another in a thread of their own, each
once the region's clock reached its moment (a fault still running delays the next), so the run
itself only ticks the injector. What happened is `Injector.done`: each fault with the sim second
and the wall second it began and how long it lasted.

`plan(seed, ...)` draws a schedule: every (target, how) pair once, at seeded random moments of a
window (by default around the scenario's wave, so a wave is in flight).
"""

from __future__ import annotations

import json
import logging
import os
import random
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from sim.live.processes import LiveError, Servers, Service

log = logging.getLogger(__name__)

SERVERS = ("kafka", "postgres", "nats")
SERVICES = ("deciders", "projections", "actuator", "agent")
HOWS = ("kill", "stop")


@dataclass(frozen=True, slots=True)
class Fault:
    """`how` ("kill": SIGKILL; "stop": SIGSTOP) to `target` (a server of `SERVERS` or a service
    of `SERVICES`; "agent": the first real agent) at sim second `at_s` of the span; `for_s`:
    wall seconds paused, or down before a killed server is started again."""

    target: str
    how: str
    at_s: int
    for_s: float

    def describe(self) -> str:
        what = {"kill": "SIGKILL", "stop": "SIGSTOP"}[self.how]
        if self.how == "stop":
            return f"{what} {self.target} for {self.for_s:g} s"
        if self.target in SERVERS:
            return f"{what} {self.target}, started again {self.for_s:g} s later"
        return f"{what} {self.target} (its supervisor starts it again)"


def plan(
    seed: int,
    window_s: tuple[int, int],
    targets: Sequence[str] = (*SERVERS, *SERVICES),
    hows: Sequence[str] = HOWS,
    *,
    pause_s: tuple[float, float] = (10.0, 40.0),
    down_s: tuple[float, float] = (2.0, 10.0),
    pauses: dict[str, float] | None = None,
) -> tuple[Fault, ...]:
    """Every (target, how) once, in a seeded random order at seeded random moments of
    `window_s` (sim seconds), pauses of `pause_s` and server downtimes of `down_s` (wall s);
    `pauses` fixes the pause of a target (default: the broker's is 40 s, longer than its
    clients' 30 s deadlines, as when the region's sequencer used to exit on it)."""
    fixed = {"kafka": 40.0} if pauses is None else pauses
    rng = random.Random(seed)
    pairs = [(t, h) for t in targets for h in hows]
    rng.shuffle(pairs)
    start, end = window_s
    moments = sorted(rng.randint(start, end) for _ in pairs)
    faults = []
    for (target, how), at_s in zip(pairs, moments, strict=True):
        span = pause_s if how == "stop" else down_s
        for_s = round(rng.uniform(*span), 1) if how == "stop" or target in SERVERS else 0.0
        if how == "stop" and target in fixed:
            for_s = fixed[target]
        faults.append(Fault(target, how, at_s, for_s))
    return tuple(faults)


class Injector:
    """Runs `faults` against a live run's servers and services, in order, in a thread."""

    def __init__(
        self,
        faults: Sequence[Fault],
        servers: Servers,
        services: Callable[[], dict[str, Service]],
        sim_s: Callable[[], float],
        say: Callable[[str], None],
    ) -> None:
        self.faults = sorted(faults, key=lambda f: f.at_s)
        self.servers = servers
        self.services = services
        self.sim_s = sim_s
        self.say = say
        self.done: list[dict[str, Any]] = []
        self.failure: Exception | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="faults", daemon=True)

    def start(self) -> None:
        if self.faults:
            self._thread.start()

    @property
    def finished(self) -> bool:
        return len(self.done) == len(self.faults) or self.failure is not None

    def close(self, timeout_s: float = 300.0) -> None:
        """Let the fault under way end (a paused process is resumed, a server started)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    def _run(self) -> None:
        try:
            for fault in self.faults:
                while self.sim_s() < fault.at_s:
                    if self._stop.wait(0.2):
                        return
                began_sim_s, began = self.sim_s(), time.monotonic()
                self.say(f"fault at sim second {began_sim_s:.0f}: {fault.describe()}")
                self._inject(fault)
                self.done.append(
                    asdict(fault)
                    | {
                        "began_sim_s": round(began_sim_s),
                        "lasted_s": round(time.monotonic() - began, 1),
                    }
                )
        except Exception as error:  # the run says so and stops
            log.exception("a fault could not be injected")
            self.failure = error

    def _inject(self, fault: Fault) -> None:
        sig = signal.SIGKILL if fault.how == "kill" else signal.SIGSTOP
        if fault.target in SERVERS:
            pid = self._server_pid(fault.target)
            os.kill(pid, sig)
            time.sleep(fault.for_s)
            if fault.how == "stop":
                os.kill(pid, signal.SIGCONT)
            else:
                self._restart_server(fault.target)
            return
        deadline = time.monotonic() + 300.0  # a service its supervisor is restarting: wait
        while True:
            service = self._service(fault.target)
            proc = service.proc
            if proc is not None and proc.poll() is None:
                break
            if time.monotonic() > deadline:
                raise LiveError(f"the fault {fault.describe()}: {service.name} is not running")
            time.sleep(0.5)
        proc.send_signal(sig)
        if fault.how == "stop":
            time.sleep(fault.for_s)
            proc.send_signal(signal.SIGCONT)

    def _server_pid(self, name: str) -> int:
        state = json.loads((self.servers.folder / name / "server.json").read_text())
        return int(state["pid"])

    def _restart_server(self, name: str) -> None:
        """Start `name` again on its ports; PostgreSQL's backends outlive a killed postmaster
        for a moment (its shared memory is theirs until they exit): tried a few times."""
        for attempt in range(5):
            try:
                self.servers.restart(name)
                return
            except LiveError:
                if attempt == 4:
                    raise
                time.sleep(3.0)

    def _service(self, target: str) -> Service:
        services = self.services()
        if target == "agent":
            agents = sorted(name for name in services if name.startswith("agent-"))
            if not agents:
                raise LiveError("the fault on an agent: no real agent runs yet")
            return services[agents[0]]
        if target not in services:
            raise LiveError(f"the fault on {target}: no such service ({', '.join(services)})")
        return services[target]
