"""Which generations a unit keeps (ADR-19: three generations or seven days, as the contract
says), decided from the manifests alone; pure.

The newest complete generation is always kept, whatever the rule: pruning never leaves a unit
with nothing to resume from. Parts of a generation that has no manifest and is older than the
newest published one belong to an interrupted save and are removed with the pruned ones.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["DAY_US", "Retention", "generations_to_prune", "orphans"]

DAY_US = 86_400_000_000


@dataclass(frozen=True, slots=True)
class Retention:
    """Keep the newest `generations`, or every generation younger than `days`: one of the two."""

    generations: int | None = 3
    days: float | None = None

    def __post_init__(self) -> None:
        if (self.generations is None) == (self.days is None):
            raise ValueError("retention keeps either generations or days, not both or neither")
        if self.generations is not None and self.generations < 1:
            raise ValueError("retention keeps at least one generation")
        if self.days is not None and self.days <= 0:
            raise ValueError("retention keeps generations for more than 0 days")

    def __str__(self) -> str:
        if self.generations is not None:
            return f"{self.generations} generations"
        return f"{self.days:g} days"


def generations_to_prune(
    published: Iterable[tuple[int, int]], retention: Retention, now_us: int
) -> list[int]:
    """Of the published generations, as (generation, created_at_us), the ones to remove."""
    newest_first = sorted(published, reverse=True)
    if not newest_first:
        return []
    if retention.generations is not None:
        doomed = newest_first[retention.generations :]
    else:
        assert retention.days is not None
        cutoff_us = now_us - int(retention.days * DAY_US)
        doomed = [(g, at) for g, at in newest_first[1:] if at < cutoff_us]
    return sorted(g for g, _ in doomed)


def orphans(with_parts: Iterable[int], published: Iterable[int]) -> list[int]:
    """Generations that have parts but no manifest and are older than the newest published."""
    published_set = set(published)
    if not published_set:
        return []
    newest = max(published_set)
    return sorted(g for g in set(with_parts) - published_set if g < newest)
