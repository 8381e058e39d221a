"""What `spotcap demo --fresh` (and so `make demo`) may delete: only what a demo wrote.

A demo run records the end offsets it left on the region's topics. `--fresh` deletes the
region's topics only when they hold nothing beyond that (or the partial output of a demo run
that did not finish); records anything else wrote since, such as contracts published by hand,
make it refuse and say where they are. When it does delete, it says what.
"""

from __future__ import annotations

import json
from pathlib import Path

from streams.embedded import EmbeddedLog
from streams.log import EventLog
from streams.runs import last_run
from streams.topics import region_end_offsets

Ends = dict[str, dict[str, int]]  # topic -> partition (as text, JSON's keys) -> end offset


def _ends_path(runs_dir: Path, region: str) -> Path:
    return runs_dir / f"{region}.demo-ends.json"


def current_ends(log: EventLog, region: str) -> Ends:
    """The region's topics' end offsets now (topics the log does not have left out)."""
    return {
        topic: {str(p): o for p, o in found.items()}
        for topic, found in region_end_offsets(log, region).items()
        if found is not None
    }


def record_demo_ends(log: EventLog, runs_dir: Path, region: str) -> None:
    """Remember what a finished demo run left, for the next `--fresh`."""
    path = _ends_path(runs_dir, region)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(current_ends(log, region), sort_keys=True, indent=2))


def recorded_ends(runs_dir: Path, region: str) -> Ends | None:
    """The end offsets the last finished demo run of `region` left (None: none recorded)."""
    try:
        raw: Ends = json.loads(_ends_path(runs_dir, region).read_text())
    except (OSError, ValueError):
        return None
    return raw


def fresh_plan(log: EmbeddedLog, runs_dir: Path, region: str) -> tuple[str, str] | str:
    """What `--fresh` would delete: a sentence saying so, or (refusal, hint) when the region's
    topics hold records that no demo run wrote."""
    now = current_ends(log, region)
    total = sum(sum(parts.values()) for parts in now.values())
    if total == 0:
        return ""
    run = last_run(runs_dir, region)
    recorded = recorded_ends(runs_dir, region)
    if recorded is None and run is not None and " demo" in run.command and run.state != "finished":
        recorded = now  # the partial output of a demo run that did not finish
    extra = {
        topic: sum(
            max(0, end - (recorded or {}).get(topic, {}).get(p, 0)) for p, end in parts.items()
        )
        for topic, parts in now.items()
    }
    extra = {topic: count for topic, count in extra.items() if count}
    if extra:
        where = ", ".join(f"{topic}: {count:,}" for topic, count in sorted(extra.items()))
        return (
            f"--fresh would delete {sum(extra.values()):,} records of region {region} that no demo "
            f"run wrote ({where}), such as contracts published by hand",
            f"run the demo with another --home or --region, or move {log.root} aside "
            "yourself if they may go",
        )
    # The command on a line of its own: a person reads the sentence at 80 columns.
    by = f", written by\n  {run.command}" if run is not None else ""
    return f"--fresh replaces {total:,} records of region {region}{by}"


__all__ = ["current_ends", "fresh_plan", "record_demo_ends", "recorded_ends"]
