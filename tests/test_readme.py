"""README's first command block works as written after `make demo`, and every number a human
table prints carries thousands separators.

Run in a directory of its own (with the repository's .venv and examples linked in), so the
default home ./.spotcap is that directory's, as it is a newcomer's. The one change to the text:
``--days 7`` runs as ``--days 0.2`` (the same commands, a shorter simulated week).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from tests.cli_support import spotcap

REPO = Path(__file__).resolve().parent.parent
# A table cell that is a bare number of four digits or more, e.g. "│ 13509 │".
_BARE_NUMBER = re.compile(r"[│|]\s*-?\d{4,}(?:\.\d+)?\s*(?:[│|]|$)")


def _readme_commands() -> list[list[str]]:
    text = (REPO / "README.md").read_text()
    block = text.split("## Using it", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    commands = []
    for line in block.splitlines():
        words = shlex.split(line, comments=True)
        if words:
            assert words[0] == ".venv/bin/spotcap", line
            commands.append(words[1:])
    return commands


def _make_demo_command() -> list[str]:
    recipe = (REPO / "Makefile").read_text().split("\ndemo:", 1)[1].split("\n")[1]
    words = shlex.split(recipe.strip())
    assert words[0] == "$(BIN)/spotcap", recipe
    return words[1:]


def _shorter(args: list[str]) -> list[str]:
    if "demo" not in args:
        return args
    if "--days" in args:
        at = args.index("--days")
        return [*args[: at + 1], "0.2", *args[at + 2 :]]
    return [*args, "--days", "0.2"]


def test_readme_sequence_after_make_demo(tmp_path: Path) -> None:
    (tmp_path / ".venv").symlink_to(REPO / ".venv")
    (tmp_path / "examples").symlink_to(REPO / "examples")
    outputs = []
    try:
        for args in [_make_demo_command(), *_readme_commands()]:
            result = spotcap(*_shorter(args), cwd=tmp_path, timeout_s=900)
            assert result.returncode == 0, (args, result.stderr[-2000:])
            assert "Traceback" not in result.stderr
            outputs.append((args, result.stdout))
    finally:
        spotcap("db", "stop", cwd=tmp_path)
    assert (tmp_path / ".spotcap" / "log").is_dir() and (tmp_path / "bundles").is_dir()
    bare = [
        (args, line)
        for args, out in outputs
        for line in out.splitlines()
        if _BARE_NUMBER.search(line)
    ]
    assert bare == [], bare
