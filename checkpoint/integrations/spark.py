"""Spark: a Structured Streaming query's progress through the client (ADR-18).

The query keeps its checkpoint folder (offsets, commits, source logs, state) on the node's local
disk, which a reclaim takes with the node. `StreamingCheckpoints` is what a ``foreachBatch``
function calls after computing a micro-batch's results: it saves a generation holding the
query's checkpoint folder and every batch's results so far, keyed by batch id. On a new node,
`restore` puts the folder back and returns those results; Spark then re-runs the one batch
whose offsets were logged but not committed (its snapshot was taken inside that batch) with the
same data and the same batch id, and its result replaces itself: each input is counted once.
Only `pyspark`'s public API is used by the callers; this module itself needs only the standard
library and the client.
"""

from __future__ import annotations

import io
import json
import shutil
import tarfile
from pathlib import Path
from typing import Any

from checkpoint.client import CheckpointClient, Generation

__all__ = ["FOLDER_PART", "RESULTS_PART", "StreamingCheckpoints", "pack_folder", "unpack_folder"]

FOLDER_PART = "query-checkpoint"
RESULTS_PART = "batch-results"


def pack_folder(folder: Path) -> bytes:
    """The folder as a gzipped tar (paths relative to it)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        tar.add(folder, arcname=".")
    return buffer.getvalue()


def unpack_folder(data: bytes, folder: Path) -> None:
    """Replace `folder` with the packed one (only plain files and folders inside it)."""
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        tar.extractall(folder, filter="data")


class StreamingCheckpoints:
    """Generations of one streaming query: its checkpoint folder and its batches' results."""

    def __init__(self, client: CheckpointClient, folder: Path) -> None:
        self.client = client
        self.folder = folder
        self.results: dict[int, Any] = {}

    def restore(self) -> int | None:
        """Put the newest generation's folder back; the batch id it was saved in (None: none,
        the query starts from the beginning)."""
        restored = self.client.restore()
        if restored is None:
            return None
        unpack_folder(restored.parts[FOLDER_PART], self.folder)
        results = json.loads(restored.parts[RESULTS_PART])
        self.results = {int(k): v for k, v in results.items()}
        return restored.step

    def batch_done(self, batch_id: int, result: Any) -> Generation:
        """Record a micro-batch's result and save a generation (call it at the end of the
        ``foreachBatch`` function)."""
        self.results[batch_id] = result
        parts = {
            FOLDER_PART: pack_folder(self.folder),
            RESULTS_PART: json.dumps(self.results, sort_keys=True).encode(),
        }
        return self.client.save(parts, step=batch_id)
