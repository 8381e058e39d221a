"""Parts depend downward only (DESIGN.md §1): schemas <- streams/projections/agent/provider <-
replay <- spotcap. A part importing upward or sideways fails here, naming the file and import."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PARTS = ("schemas", "contracts", "streams", "projections", "agent", "provider", "replay", "spotcap")
ALLOWED = {
    "schemas": {"schemas"},
    "contracts": {"schemas", "contracts"},
    "streams": {"schemas", "contracts", "streams"},
    "projections": {"schemas", "contracts", "projections"},
    "agent": {"schemas", "contracts", "agent"},
    "provider": {"schemas", "contracts", "provider"},
    "replay": {"schemas", "contracts", "streams", "projections", "agent", "provider", "replay"},
    "spotcap": set(PARTS),
}


def imported_parts(path: Path) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        found.extend((node.lineno, n.split(".")[0]) for n in names if n.split(".")[0] in PARTS)
    return found


@pytest.mark.parametrize("part", PARTS)
def test_parts_import_only_what_is_below_them(part: str) -> None:
    wrong = [
        f"{path.relative_to(REPO)}:{line} imports {target}"
        for path in sorted((REPO / part).rglob("*.py"))
        for line, target in imported_parts(path)
        if target not in ALLOWED[part]
    ]
    assert not wrong, "upward or sideways imports:\n" + "\n".join(wrong)
