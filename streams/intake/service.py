"""The intake as a service: its sources in threads of their own, one writer to the log.

`run_intake` reads the book back from the log (`history`), then takes the sources' batches one
at a time: `claims.decide` says what to write, the writer writes it and waits for the log's
acknowledgement, and only then does the book take it in. A kill at any point
loses nothing and doubles nothing: what the log acknowledged is in the book the next run reads,
and what it did not is decided again, under the same derived event ids.

`serve` is what `spotcap run intake` calls: the Kubernetes watch and the slurmrestd poll from
their settings, until SIGTERM or SIGINT.
"""

from __future__ import annotations

import logging
import queue
import signal
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from schemas.codec import Codec
from schemas.events import CapacityClaimOpened
from streams.intake.claims import Batch, Stamp, decide
from streams.intake.history import read_book
from streams.log import EventLog
from streams.topics import region_topics, topic_name
from streams.writer import EventWriter

log = logging.getLogger(__name__)

PRODUCER = "intake"
JOIN_TIMEOUT_S = 20.0  # a source notices `stop` within its watch window or poll interval


class Source(Protocol):
    """Where pending work is seen: batches of sightings under one claim-id prefix."""

    prefix: str

    def batches(self, stop: threading.Event) -> Iterator[Batch]: ...


@dataclass(frozen=True, slots=True)
class IntakeReport:
    opened: int
    released: int
    open_now: int
    """Claims open when the intake stopped."""

    def describe(self) -> str:
        """The claims the intake wrote, in one line (`spotcap run intake`' last)."""
        return f"claims: {self.opened} opened, {self.released} released, {self.open_now} open"


class IntakeError(RuntimeError):
    """The intake cannot go on; the message says which source and why (never a secret).
    `usage`: what it was given cannot work (no source, a malformed address)."""

    def __init__(self, message: str, *, usage: bool = False) -> None:
        super().__init__(message)
        self.usage = usage


class _SourceFailed:
    def __init__(self, prefix: str, error: BaseException) -> None:
        self.prefix, self.error = prefix, error


def run_intake(
    event_log: EventLog,
    codec: Codec,
    region: str,
    sources: Sequence[Source],
    stop: threading.Event,
    *,
    producer: str = PRODUCER,
) -> IntakeReport:
    """Turn the sources' batches into claim events on the log until `stop` is set."""
    wanted = {topic_name(region, "schemas"), topic_name(region, CapacityClaimOpened.TOPIC)}
    event_log.apply_topics([spec for spec in region_topics(region) if spec.name in wanted])
    book = read_book(event_log, codec, region, [s.prefix for s in sources])
    log.info("intake: %d claims open in the log", len(book.open))
    inbox: queue.Queue[Batch | _SourceFailed] = queue.Queue(maxsize=64)
    threads = [
        threading.Thread(target=_feed, args=(s, stop, inbox), name=f"intake {s.prefix}",
                         daemon=True)
        for s in sources
    ]  # fmt: skip
    for thread in threads:
        thread.start()
    writer = EventWriter(event_log, codec, region)
    opened = released = 0
    listed: set[str] = set()
    try:
        while not stop.is_set():
            try:
                item = inbox.get(timeout=0.5)
            except queue.Empty:
                continue
            if isinstance(item, _SourceFailed):
                raise IntakeError(f"the intake of {item.prefix} stopped: {item.error}")
            events = decide(book, item, Stamp(region, producer, time.time_ns() // 1000))
            for envelope in events:
                writer.write(envelope)
            if events:
                writer.flush()  # acknowledged by the log before the book moves
            for envelope in events:
                book.apply(envelope)
                payload = envelope.payload
                if isinstance(payload, CapacityClaimOpened):
                    opened += 1
                    log.info("opened %s (%s, %d vCPU)", payload.claim_id, payload.workload_id,
                             payload.requested_vcpu)  # fmt: skip
                else:
                    released += 1
                    log.info("released %s", getattr(payload, "claim_id", "?"))
            if item.complete:
                book.forget_released(item.prefix, (s.claim_id for s in item.sightings))
                if item.prefix not in listed:  # once per source: it is serving
                    listed.add(item.prefix)
                    log.info("intake: %s lists %d pieces of work", item.prefix,
                             len(item.sightings))  # fmt: skip
    finally:
        stop.set()
        for thread in threads:
            thread.join(JOIN_TIMEOUT_S)
        writer.close()
    return IntakeReport(opened, released, len(book.open))


def _feed(source: Source, stop: threading.Event, inbox: queue.Queue[Batch | _SourceFailed]) -> None:
    try:
        for batch in source.batches(stop):
            while not stop.is_set():
                try:
                    inbox.put(batch, timeout=0.5)
                    break
                except queue.Full:
                    continue
    except Exception as error:  # the service stops and says which source and why
        inbox.put(_SourceFailed(source.prefix, error))


def serve(
    event_log: EventLog,
    codec: Codec,
    region: str,
    *,
    kubeconfig: Path | None,
    slurmrestd: str | None,
    cluster: str,
    poll_interval_s: float,
) -> IntakeReport:
    """Watch the cluster of `kubeconfig` and poll the slurmrestd at `slurmrestd`
    (``unix:PATH``), either or both, naming their claims after `cluster`, until SIGTERM or
    SIGINT (call it from the main thread); logs a line per claim to stderr."""
    from kubernetes.config import ConfigException

    from streams.intake.kubernetes import KubernetesSource, api_client
    from streams.intake.slurm import SlurmSource

    if kubeconfig is None and slurmrestd is None:
        raise IntakeError("the intake needs a kubeconfig, a slurmrestd, or both", usage=True)
    if slurmrestd is not None and not slurmrestd.startswith("unix:"):
        raise IntakeError(f"slurmrestd {slurmrestd!r} is not unix:PATH", usage=True)
    sources: list[Source] = []
    if kubeconfig is not None:
        try:
            api = api_client(kubeconfig)
        except (ConfigException, OSError, ValueError) as error:
            raise IntakeError(f"the kubeconfig {kubeconfig} cannot be used: {error}") from None
        sources.append(KubernetesSource(api, cluster))
    if slurmrestd is not None:
        socket = Path(slurmrestd.removeprefix("unix:"))
        sources.append(SlurmSource(socket, cluster, poll_interval_s=poll_interval_s))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    return run_intake(event_log, codec, region, sources, stop)
