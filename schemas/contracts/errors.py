"""What is wrong with a contract: a finding about a field, and the error a person reads.

A `Finding` is what the model, the tier resolution and the feasibility rules produce: a field
path, what is wrong and how to fix it. The compiler turns it into a `ContractError` by adding
the file and the line the field was written on, printed as::

    contracts/etl.yaml:12: drain_budget_s: 130 s is more than ... (fix: ...)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

KeyPath = tuple[str | int, ...]


def dotted(path: KeyPath) -> str:
    """``("checkpoint", "size_bytes")`` -> ``"checkpoint.size_bytes"``; list items as ``[i]``."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text or "(document)"


@dataclass(frozen=True, slots=True)
class Finding:
    """One problem with one field of a contract, before it is placed in a file."""

    rule: str  # "schema", "tier", "consistency", or a feasibility rule id
    path: KeyPath
    message: str
    fix: str

    @property
    def field(self) -> str:
        return dotted(self.path)


class ContractFindingsError(ValueError):
    """One or more findings that stop a contract from being resolved."""

    def __init__(self, findings: list[Finding]) -> None:
        super().__init__("; ".join(f"{f.field}: {f.message}" for f in findings))
        self.findings = findings


@dataclass(frozen=True, slots=True)
class ContractError:
    """A refused contract, located: file, line, field, what is wrong and how to fix it."""

    file: Path
    line: int
    field: str
    message: str
    fix: str
    rule: str

    def __str__(self) -> str:
        return f"{self.file.as_posix()}:{self.line}: {self.field}: {self.message} (fix: {self.fix})"

    def to_json(self) -> dict[str, str | int]:
        return {
            "file": self.file.as_posix(),
            "line": self.line,
            "field": self.field,
            "message": self.message,
            "fix": self.fix,
            "rule": self.rule,
        }
