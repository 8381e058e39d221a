"""From a notice to a verified drain and a final checkpoint, from the bundle alone (ADR-14).

The agent owns the trigger and the deadline: the deadline is the notice's own (providers give
30 s to 120 s), the budget the contract's; the drain path comes from the bundle's scheduler.
Each step is recorded (drain started, every eviction attempt, drain completed with duration,
path, verification and overrun, the checkpoint's outcome), with ids derived from the notice.
Drains run on a drain thread, so that intake, metrics and the spool never wait for them, and an
unexpected error in a scheduler path still ends in the local path, never in no drain at all.
The drain threads are the process's `DrainPool`: an agent's drains run one after another in its
own lane, and a thread that finds more lanes waiting runs them too, so a wave of notices to the
agents of one process (``bench/agent.py`` packs hundreds) wakes a few threads, not one per notice.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from agent.checkpoint import CheckpointReport, run_trigger
from agent.clock import Clock
from agent.config import AgentConfig
from agent.drain.base import Deadline, DrainContext, DrainPathImpl, DrainRequest, DrainResult
from agent.metrics import AgentMetrics
from agent.records import Recorder
from agent.workloads import WorkloadChannel
from contracts.bundles import Bundle
from schemas.events import (
    CheckpointTriggered,
    CheckpointWritten,
    DrainCompleted,
    DrainPath,
    DrainStarted,
    DrainTrigger,
)
from schemas.ids import derived_event_id

log = logging.getLogger(__name__)


class DrainPool:
    """The drain threads of a process, shared by the agents in it.

    Handing a drain to a thread that waits costs that thread's wake-up and a turn of the
    interpreter lock: measured 40-80 µs of CPU a notice with hundreds of agents in one process
    (their drain threads woken one by one in a wave), more than the agent's own work. Here a
    job is given to a thread already awake and between jobs if there is one, and a thread is
    woken only when none is: in a wave the first awake thread runs the lanes queued meanwhile
    one after another. A job that blocks (a drain waiting for its processes, its scheduler)
    never holds back the others: a thread that takes a job while more wait wakes another first
    (`_looking` counts the threads awake and between jobs, and those woken on their way)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._jobs: deque[Callable[[], None]] = deque()
        self._looking = 0
        self._sleeping = 0
        self._threads = 0
        self._reserved = 0
        self.wakes = 0
        """Threads woken or started for jobs, ever (a wave's few, not one per notice)."""
        os.register_at_fork(after_in_child=self._forked)

    def _forked(self) -> None:
        """A forked child has none of the parent's threads: it starts its own when needed."""
        self._cond = threading.Condition()
        self._jobs.clear()
        self._looking = self._sleeping = self._threads = self._reserved = 0

    @property
    def threads(self) -> int:
        return self._threads

    def busy(self) -> tuple[int, int]:
        """(threads running a job, jobs waiting for a thread): (1, 0) while one drain blocks
        means every other job handed to the pool has finished."""
        with self._cond:
            return self._threads - self._looking - self._sleeping, len(self._jobs)

    def reserve(self) -> None:
        """One more thread waiting ahead of any job (an agent's start: the first notice then
        finds a thread, as starting one waits for the interpreter lock, milliseconds in a wave)."""
        with self._cond:
            self._reserved += 1
            while self._threads < self._reserved:
                self._start()

    def release(self) -> None:
        """Give back a reserved thread (an agent's close): a thread beyond those reserved ends
        once it finds nothing to do."""
        with self._cond:
            self._reserved -= 1
            if self._sleeping and self._threads > self._reserved:
                self._wake()  # it finds nothing to do and more threads than reserved: it ends

    def submit(self, job: Callable[[], None]) -> None:
        """Run `job` on a drain thread; never blocks."""
        with self._cond:
            self._jobs.append(job)
            if self._looking == 0:
                self._wake()

    def _wake(self) -> None:
        """Wake a sleeping thread, or start one (under the condition's lock)."""
        self.wakes += 1
        if self._sleeping:
            self._sleeping -= 1
            self._looking += 1
            self._cond.notify()
        else:
            self._start()

    def _start(self) -> None:
        self._threads += 1
        self._looking += 1
        threading.Thread(target=self._serve, name="drainer", daemon=True).start()

    def _serve(self) -> None:
        cond = self._cond
        with cond:
            while True:
                if self._jobs:
                    job = self._jobs.popleft()
                    self._looking -= 1
                    if self._jobs and self._looking == 0:
                        self._wake()  # the job may block: the others must not wait for it
                    cond.release()
                    try:
                        job()
                    except Exception:  # logged; the thread must go on serving
                        log.exception("a drain job failed")
                    finally:
                        cond.acquire()
                    self._looking += 1
                elif self._threads > self._reserved:  # started for a wave, or given back
                    self._looking -= 1
                    self._threads -= 1
                    return
                else:
                    self._looking -= 1
                    self._sleeping += 1
                    cond.wait()  # the waker moved this thread from sleeping to looking


POOL = DrainPool()


@dataclass(frozen=True, slots=True)
class DrainOutcome:
    request: DrainRequest
    result: DrainResult
    duration_s: float
    overrun: bool
    deadline_margin_s: float
    signal_latency_s: float | None
    checkpoint: CheckpointReport | None


class Drainer:
    def __init__(
        self,
        config: AgentConfig,
        paths: Mapping[DrainPath, DrainPathImpl],
        recorder: Recorder,
        clock: Clock,
        metrics: AgentMetrics | None = None,
        *,
        channel: WorkloadChannel | None = None,
        pool: DrainPool = POOL,
    ) -> None:
        self._config = config
        self._channel = channel
        self._paths = paths
        self._recorder = recorder
        self._clock = clock
        self._metrics = metrics
        self._pool = pool
        self._lock = threading.Lock()
        self._lane: deque[tuple[DrainRequest, DrainPathImpl, float]] = deque()
        self._scheduled = False
        """The lane is handed to the pool, or being served (under `_lock`). Set with the append
        that finds it clear, cleared only by the lane's job when it finds the lane empty, both
        under `_lock`: so a lane is one job of the pool at most, and its drains run one after
        another whatever the pool's size. Nothing else ends a drain early: `wait` and `stop`
        timing out leave the lane as it is."""
        self._reserved = False
        self._pending = 0
        self._idle_waiters: list[threading.Event] = []
        """Set once no drain is running or queued; made only by `wait` (an event set and
        cleared at every drain cost 2-5 µs of a wave's notice)."""
        self._started_causes: set[str] = set()
        self.outcomes: list[DrainOutcome] = []

    def request_for(
        self,
        bundle: Bundle | None,
        *,
        workload_id: str,
        trigger: DrainTrigger,
        cause_event_id: str,
        deadline_at_us: int,
        issued_at_us: int | None = None,
    ) -> DrainRequest:
        """The drain a notice (or an advisory) asks for, with the contract's fields.

        With the notice's `issued_at_us`, its deadline is never later, by this node's clock,
        than the notice's own term (deadline - issued) from now: a node clock behind the
        provider's would otherwise give the drain more time than the notice did (a clock 10
        minutes behind: 12 minutes for a 2-minute notice). A clock that agrees, or is ahead,
        keeps the notice's deadline (a notice delivered late has less time left, not more)."""
        if issued_at_us is not None:
            term_us = max(0, deadline_at_us - issued_at_us)
            deadline_at_us = min(deadline_at_us, self._clock.now_us() + term_us)
        if bundle is None:
            budget_s = max(1.0, (deadline_at_us - self._clock.now_us()) / 1e6)
            return DrainRequest(
                self._config.instance_id,
                workload_id,
                trigger,
                cause_event_id,
                deadline_at_us,
                budget_s,
                "none",
                "restart",
            )
        if bundle.workload_id != workload_id:
            log.warning(
                "notice %s names workload %s, this node's bundle %s: using the bundle",
                cause_event_id,
                workload_id,
                bundle.workload_id,
            )
        return DrainRequest(
            self._config.instance_id,
            bundle.workload_id,
            trigger,
            cause_event_id,
            deadline_at_us,
            float(bundle.drain_budget_s),
            bundle.checkpoint_method,
            bundle.restart_semantics,
        )

    def path_for(self, bundle: Bundle | None) -> DrainPathImpl:
        if bundle is not None and bundle.scheduler in self._paths:
            return self._paths[bundle.scheduler]
        return self._paths["local"]

    def start(self, request: DrainRequest, path: DrainPathImpl, received_mono_s: float) -> bool:
        """Hand the drain to a drain thread; False if this cause was drained already.

        Never blocks. Drains of this agent run one after another in its lane; a second notice
        while one runs is drained after it.
        """
        with self._lock:
            if request.cause_event_id in self._started_causes:
                return False
            self._started_causes.add(request.cause_event_id)
            self._pending += 1
            self._lane.append((request, path, received_mono_s))
            scheduled, self._scheduled = self._scheduled, True
        if not scheduled:
            self._pool.submit(self._serve)
        return True

    def start_thread(self) -> None:
        """Have a drain thread waiting in the pool now (at agent start), so a notice finds one."""
        with self._lock:
            reserve, self._reserved = not self._reserved, True
        if reserve:
            self._pool.reserve()

    def _serve(self) -> None:
        """Run this agent's queued drains, one after another (a job of the pool)."""
        while True:
            with self._lock:
                if not self._lane:
                    self._scheduled = False
                    return
                request, path, received_mono_s = self._lane.popleft()
            try:
                self.run(request, path, received_mono_s)
            except Exception:  # logged; the next notice must still be served
                log.exception("drain of %s failed", request.cause_event_id)
            finally:
                with self._lock:
                    self._pending -= 1
                    if self._pending == 0 and self._idle_waiters:
                        for waiter in self._idle_waiters:
                            waiter.set()
                        self._idle_waiters.clear()

    def wait(self, timeout_s: float) -> bool:
        """True once no drain is running or queued (False if one still is after `timeout_s`)."""
        with self._lock:
            if self._pending == 0:
                return True
            waiter = threading.Event()
            self._idle_waiters.append(waiter)
        return waiter.wait(timeout_s)

    def stop(self, timeout_s: float) -> None:
        """Let the running drain finish (bounded), then give back the reserved drain thread."""
        self.wait(timeout_s)
        with self._lock:
            release, self._reserved = self._reserved, False
        if release:
            self._pool.release()

    def run(
        self, request: DrainRequest, path: DrainPathImpl, received_mono_s: float
    ) -> DrainOutcome:
        recorder, clock = self._recorder, self._clock
        started_us = clock.now_us()
        started_id = derived_event_id(request.cause_event_id, "drain_started")
        recorder.record(
            DrainStarted(
                instance_id=request.instance_id,
                workload_id=request.workload_id,
                path=path.name,
                drain_budget_s=round(request.drain_budget_s),
                trigger=request.trigger,
            ),
            cause=request.cause_event_id,
            event_id=started_id,
            causation_id=request.cause_event_id,
        )
        deadline = Deadline(clock, request.deadline_at_us, self._config.drain.safety_margin_s)
        ctx = DrainContext(request, deadline, recorder, started_id)
        checkpoint: list[CheckpointReport | None] = [None]
        trigger = None
        if self._channel is not None and self._channel.connected():
            # The units on the node checkpoint through the client: tell them and wait for
            # their final checkpoints before draining (the drain ends the work).
            checkpoint[0] = self._channel.final_checkpoint(
                request, deadline, self._config.checkpoint.timeout_s
            )
        elif request.checkpoint_method != "none":  # a thread only when there is a trigger
            trigger = threading.Thread(
                target=lambda: checkpoint.__setitem__(
                    0, run_trigger(self._config.checkpoint, request, deadline)
                ),
                name="checkpoint",
                daemon=True,
            )
            trigger.start()
        result = self._drain(path, ctx)
        ended_us = clock.now_us()
        duration_s = (ended_us - started_us) / 1e6
        overrun = duration_s > request.drain_budget_s
        margin_s = (request.deadline_at_us - ended_us) / 1e6
        recorder.record(
            DrainCompleted(
                instance_id=request.instance_id,
                workload_id=request.workload_id,
                path=result.path,
                duration_s=round(duration_s, 6),
                verified=result.verified,
                overrun=overrun,
                fell_back_to_local=result.fell_back_to_local,
                deadline_margin_s=round(margin_s, 6),
            ),
            cause=request.cause_event_id,
            causation_id=started_id,
        )
        if trigger is not None:
            # bounded by the trigger's own timeout; a far deadline must not overflow the wait
            left_s = deadline.left_s() + self._config.drain.safety_margin_s
            trigger.join(min(threading.TIMEOUT_MAX, max(0.0, left_s)))
        report = checkpoint[0]
        if (
            report is None
            and request.checkpoint_method == "slurm-requeue"
            and result.signalled_jobs
        ):
            report = CheckpointReport("signalled", 0.0, f"USR1 to {result.signalled_jobs} jobs")
        if report is not None:
            self._record_checkpoint(request, started_id, report)
        signal_latency_s = (
            ctx.first_signal_mono_s - received_mono_s if ctx.first_signal_mono_s else None
        )
        outcome = DrainOutcome(
            request, result, duration_s, overrun, margin_s, signal_latency_s, report
        )
        self._observe(outcome)
        log.info(
            "drained %s (%s) by %s in %.2f s: verified=%s overrun=%s, %.1f s before the deadline"
            "; %s",
            request.instance_id,
            request.trigger,
            result.path,
            duration_s,
            result.verified,
            overrun,
            margin_s,
            result.detail,
        )
        return outcome

    def _drain(self, path: DrainPathImpl, ctx: DrainContext) -> DrainResult:
        try:
            return path.drain(ctx)
        except Exception:
            log.exception("the %s drain path failed; draining locally", path.name)
            local = self._paths["local"]
            if local is path:
                return DrainResult("local", False, True, "the local path failed")
            result = local.drain(ctx)
            return DrainResult("local", result.verified, True, result.detail, 0)

    def _record_checkpoint(
        self, request: DrainRequest, started_id: str, report: CheckpointReport
    ) -> None:
        triggered = self._recorder.record(
            CheckpointTriggered(
                instance_id=request.instance_id,
                workload_id=request.workload_id,
                method=request.checkpoint_method,
                outcome=report.outcome,
                duration_s=round(report.duration_s, 6),
                detail=report.detail,
            ),
            cause=request.cause_event_id,
            causation_id=started_id,
        )
        if report.written_bytes is not None and report.generation is not None:
            self._recorder.record(
                CheckpointWritten(
                    instance_id=request.instance_id,
                    workload_id=request.workload_id,
                    generation=report.generation,
                    written_bytes=report.written_bytes,
                    duration_s=round(report.duration_s, 6),
                    final=True,
                ),
                cause=request.cause_event_id,
                causation_id=triggered.event_id,
            )

    def _observe(self, outcome: DrainOutcome) -> None:
        with self._lock:
            self.outcomes.append(outcome)
        metrics = self._metrics
        if metrics is None:
            return
        path = outcome.result.path
        series = metrics.drain_duration_of.get(path) or metrics.drain_duration.labels(path)
        series.observe(outcome.duration_s)
        if outcome.overrun:
            metrics.overruns.inc()
        if not outcome.result.verified:
            metrics.unverified.inc()
        if outcome.signal_latency_s is not None:
            metrics.notice_to_signal.observe(outcome.signal_latency_s)
