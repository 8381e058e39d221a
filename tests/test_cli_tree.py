"""The command tree as people meet it: help on every option, --version, global options after
the command, the root's help line of each lazy command equal to the command's own."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import click

from spotcap.cli import LAZY_COMMANDS, main
from tests.cli_support import spotcap


def _walk(command: click.Command, path: tuple[str, ...]) -> Iterator[tuple[str, click.Command]]:
    yield " ".join(path), command
    if isinstance(command, click.Group):
        ctx = click.Context(command)
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            assert sub is not None, name
            yield from _walk(sub, (*path, name))


def test_every_option_of_every_command_has_help() -> None:
    missing = [
        f"{where} {param.opts}"
        for where, command in _walk(main, ("spotcap",))
        for param in command.params
        if isinstance(param, click.Option) and not (param.help or "").strip()
    ]
    assert missing == []


def test_every_command_has_help() -> None:
    assert [w for w, c in _walk(main, ("spotcap",)) if not (c.help or "").strip()] == []


def test_the_roots_help_line_of_a_lazy_command_is_its_own() -> None:
    for name, lazy in LAZY_COMMANDS.items():
        command = lazy.load()
        assert lazy.short_help == command.get_short_help_str(1_000), name


def test_help_imports_no_subcommand_module() -> None:
    code = (
        "import sys\n"
        "from spotcap.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "heavy = [m for m in ('pyarrow', 'psycopg', 'nats', 'sim', 'spotcap.cli.demo',"
        " 'spotcap.cli.query', 'projections', 'streams')"
        " if m in sys.modules]\n"
        "print('HEAVY', heavy)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert "HEAVY []" in out, out
    assert "demo" in out and "why" in out  # the lazy commands are listed all the same


def test_version() -> None:
    result = spotcap("--version")
    assert result.returncode == 0 and result.stdout.startswith("spotcap "), result


def test_global_options_after_the_command(tmp_path: Path) -> None:
    home = tmp_path / "h"
    applied = spotcap("topics", "apply", "--home", str(home), "--region", "eu-1")
    assert applied.returncode == 0, applied.stderr
    assert (home / "log").is_dir()
    listed = spotcap(
        "topics", "list", "--json", "--region", "eu-1", env={"SPOTCAP_HOME": str(home)}
    )
    assert listed.returncode == 0 and '"topic": "eu-1.lifecycle"' in listed.stdout
    # after the command wins over before it, as the last word does
    elsewhere = spotcap("--home", str(tmp_path / "other"), "topics", "list", "--home", str(home))
    assert str(home / "log") in elsewhere.stdout
    bad = spotcap("topics", "list", "--region", "Not_A_Region")
    assert bad.returncode == 2 and "not a valid region name" in bad.stderr
