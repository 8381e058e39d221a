"""The deciders as a service on Kafka (`spotcap run streams`, docs/deciders.md): a region's
sequencer, its Faust workers, or both in one process.

A region has exactly one sequencer and as many workers as its stage partitions can use; workers
share the stage partitions as one Kafka consumer group and take over a stopped or killed
worker's partitions from its tables. Decisions go to the region's ``decisions`` topic under ids
derived from their causes: after a crash a worker may send a decision again (same id, same
bytes), and consumers drop duplicates by event id.
"""

from __future__ import annotations

import logging
import signal
import threading
from pathlib import Path
from types import FrameType
from typing import Any

from contracts.approvals import KeyringError, keyring_keys
from schemas.codec import Codec
from streams.deciders import DeciderSettings
from streams.deciders.authority import ChangeTrust
from streams.runtime.journal import RuntimeTopics
from streams.runtime.sequencer import prepare, run_sequencer

ROLES = ("all", "sequencer", "worker")


def decider_settings(keyring: Path | None) -> DeciderSettings:
    """The deciders' settings: with `keyring` (``spotcap.keyring/v1``, the file the compiler
    reads), a published change of authority takes effect only with the owner's and a higher
    authority's signatures by its keys (ADR-30). `KeyringError` says what is wrong."""
    if keyring is None:
        return DeciderSettings()
    try:
        owners, authorities = keyring_keys(keyring.read_bytes(), str(keyring))
    except OSError as error:
        raise KeyringError(f"cannot read the keyring {keyring}: {error.strerror}") from error
    if not owners or not authorities:
        raise KeyringError(
            f"{keyring}: the deciders need at least one owner and one higher authority key, "
            "or no change of authority could ever take effect"
        )
    return DeciderSettings(trust=ChangeTrust(owners, authorities))


def run_streams(
    role: str, bootstrap: str, codec: Codec, topics: RuntimeTopics, **worker: Any
) -> None:
    """Prepare the region's topics, then run `role` until SIGTERM or SIGINT: ``sequencer``,
    ``worker`` (a Faust worker with the `worker` options of `FaustConfig`), or ``all`` (the
    sequencer in a thread beside a worker; the thread's death stops the process, loudly).
    A `LogError` while preparing means the broker or the partition counts are wrong."""
    prepare(bootstrap, codec, topics)
    # The sequencer records the keyring in the journal (`Sequencer.step`); the workers take the
    # keys from there, whatever keyring a worker was given.
    settings: DeciderSettings = worker.get("settings") or DeciderSettings()
    if role == "sequencer":
        _sequencer_until_signal(bootstrap, codec, topics, settings)
        return
    from streams.runtime.faust_app import FaustConfig, run_worker  # Faust loads slowly

    config = FaustConfig(bootstrap, topics, codec=codec, **worker)
    if role == "worker":
        if settings.trust is not None:
            logging.getLogger("spotcap.runtime").warning(
                "a worker does not use --keyring: the region's sequencer records its keyring "
                "in the journal, and every worker decides with the keys recorded there"
            )
        run_worker(config)
        return
    stop = threading.Event()
    sequencer = threading.Thread(
        target=_sequence,
        args=(bootstrap, codec, topics, settings, stop),
        name="sequencer",
        daemon=True,
    )
    sequencer.start()
    try:
        run_worker(config)  # until SIGTERM/SIGINT (Faust's worker handles both)
    finally:
        stop.set()
        sequencer.join(timeout=30.0)


def _sequence(
    bootstrap: str,
    codec: Codec,
    topics: RuntimeTopics,
    settings: DeciderSettings,
    stop: threading.Event,
) -> None:
    try:
        run_sequencer(bootstrap, codec, topics, settings=settings, should_stop=stop.is_set)
    except Exception:  # the thread's death must be seen: stop the process, loudly
        logging.getLogger("spotcap.runtime.sequencer").exception("the sequencer stopped")
        signal.raise_signal(signal.SIGTERM)


def _sequencer_until_signal(
    bootstrap: str, codec: Codec, topics: RuntimeTopics, settings: DeciderSettings
) -> None:
    stop = threading.Event()

    def on_signal(_signum: int, _frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    run_sequencer(bootstrap, codec, topics, settings=settings, should_stop=stop.is_set)


__all__ = ["ROLES", "run_streams"]
