"""README.md works as written: `make demo`, then every user's story in order, as a newcomer runs
them; every doc is linked from it; `spotcap --help` names only files that exist.

Run in a directory of its own (the repository's .venv, examples and replay rules linked in), so
the default home ./.spotcap is that directory's, as it is a newcomer's. The changes to the text:
the demo runs 0.2 sim days instead of 7 (the same commands, a shorter week), and the operator's
Kafka address is the suite's broker's.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from infra.servers import Server
from tests.cli_support import spotcap

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text(encoding="utf-8")
README_KAFKA = "127.0.0.1:9092"
# A table cell that is a bare number of four digits or more, e.g. "│ 13509 │" (a zero-padded
# label such as a migration's version "0001" is not a quantity).
_BARE_NUMBER = re.compile(r"[│|]\s*-?[1-9]\d{3,}(?:\.\d+)?\s*(?:[│|]|$)")


def _stories() -> list[tuple[str, list[list[str]]]]:
    """Each user's section of "Who does what": its title and the commands of its sh block."""
    part = README.split("## Who does what", 1)[1].split("\n## ", 1)[0]
    stories = []
    for section in part.split("\n### ")[1:]:
        title = section.splitlines()[0]
        block = section.split("```sh\n", 1)[1].split("```", 1)[0]
        commands = []
        for line in block.splitlines():
            words = shlex.split(line, comments=True)
            if words:
                assert words[0] == ".venv/bin/spotcap", line
                commands.append(words[1:])
        stories.append((title, commands))
    return stories


def _make_demo_command() -> list[str]:
    recipe = (REPO / "Makefile").read_text().split("\ndemo:", 1)[1].split("\n")[1]
    words = shlex.split(recipe.strip())
    assert words[0] == "$(BIN)/spotcap", recipe
    return [*words[1:], "--days", "0.2"]


def test_the_stories_cover_every_user() -> None:
    titles = [title.split(":")[0] for title, _ in _stories()]
    assert titles == ["SRE", "Workload owner", "Finance", "Auditor", "Operator"]
    assert all(commands for _, commands in _stories())


def test_make_demo_then_every_story_as_written(tmp_path: Path, kafka: Server) -> None:
    for name in (".venv", "examples", "replay"):
        (tmp_path / name).symlink_to(REPO / name)
    outputs = []
    try:
        demo = spotcap(*_make_demo_command(), cwd=tmp_path, timeout_s=900)
        assert demo.returncode == 0, demo.stderr[-2000:]
        for title, commands in _stories():
            for written in commands:
                args = [a.replace(README_KAFKA, kafka.address) for a in written]
                result = spotcap(*args, cwd=tmp_path, timeout_s=900)
                assert result.returncode == 0, (title, args, result.stderr[-2000:])
                assert "Traceback" not in result.stderr, (title, args)
                assert result.stdout.strip(), (title, args, "printed nothing")
                outputs.append((args, result.stdout))
    finally:
        spotcap("db", "stop", cwd=tmp_path)
    assert (tmp_path / ".spotcap" / "archive").is_dir() and (tmp_path / "archive.key.pub").exists()
    bare = [
        (args, line)
        for args, out in outputs
        for line in out.splitlines()
        if _BARE_NUMBER.search(line)
    ]
    assert bare == [], bare


def test_every_doc_is_linked_from_the_readme() -> None:
    docs = sorted(p.relative_to(REPO).as_posix() for p in (REPO / "docs").glob("*.md"))
    assert [d for d in docs if f"`{d}`" not in README] == []


def test_help_names_only_files_that_exist() -> None:
    """Every docs/ or file path that `spotcap --help` and its commands' help name exists (no
    design record numbers, no DESIGN.md, which live outside the repository)."""
    import click

    from spotcap.cli import LAZY_COMMANDS, main

    def helps(command: click.Command) -> list[str]:
        texts = [command.help or "", *(getattr(p, "help", None) or "" for p in command.params)]
        if isinstance(command, click.Group):
            texts += [t for sub in command.commands.values() for t in helps(sub)]
        return texts

    texts = [*helps(main), *(lazy.short_help for lazy in LAZY_COMMANDS.values())]
    texts += [t for lazy in LAZY_COMMANDS.values() for t in helps(lazy.load())]
    named = {m for text in texts for m in re.findall(r"\b(?:docs|infra|replay)/[\w./-]+\w", text)}
    assert named and [n for n in sorted(named) if not (REPO / n).exists()] == []
    assert not [t for t in texts if re.search(r"\bADR-\d|DESIGN\.md", t)]
