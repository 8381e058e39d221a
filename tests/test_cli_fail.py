"""The CLI stops on an error one way: `spotcap.fail.fail` (one sentence, how to fix it, exit 1, or
2 for a usage error; the JSON report instead with ``--json``), and nowhere else."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from spotcap.fail import EXIT_FAILURE, EXIT_USAGE, fail
from tests.layering import PRODUCT

REPO = Path(__file__).resolve().parent.parent
SPOTCAP = REPO / "spotcap"
# The command line's modules and every part's: only `fail` ends the process (the parts raise).
# Left out: `fail` itself, `python -m spotcap.cli`, and the schema generator (a developer's
# script run as `python -m schemas.generate`, with its own exit status).
ENDS_THE_PROCESS = (
    SPOTCAP / "fail.py",
    SPOTCAP / "cli" / "__main__.py",
    REPO / "schemas" / "generate.py",
)
PRODUCT_FILES = sorted(
    p for part in PRODUCT for p in (REPO / part).rglob("*.py") if p not in ENDS_THE_PROCESS
)


@click.command()
@click.option("--usage", is_flag=True)
@click.option("--json", "as_json", is_flag=True)
def stops(usage: bool, as_json: bool) -> None:
    report = {"ok": False, "error": "the [bold]thing[/] is missing"} if as_json else None
    fail("the [bold]thing[/] is missing", "create it first", usage=usage, json_report=report)


def test_an_error_is_one_sentence_and_a_hint_on_stderr_and_exit_1() -> None:
    result = CliRunner().invoke(stops, [])
    assert result.exit_code == EXIT_FAILURE == 1
    assert result.stdout == ""
    # Markup in the message is printed as written, not interpreted.
    assert result.stderr.splitlines() == ["error: the [bold]thing[/] is missing", "create it first"]
    assert isinstance(result.exception, SystemExit)  # a clean exit, not a traceback


def test_a_usage_error_exits_2() -> None:
    assert CliRunner().invoke(stops, ["--usage"]).exit_code == EXIT_USAGE == 2


def test_with_json_the_report_goes_to_stdout() -> None:
    result = CliRunner().invoke(stops, ["--json"])
    assert result.exit_code == 1 and result.stderr == ""
    assert json.loads(result.stdout) == {"ok": False, "error": "the [bold]thing[/] is missing"}


def _exits(path: Path) -> list[str]:
    """Lines of `path` that stop the process some other way than `fail`."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            owner = getattr(func.value, "id", "") if isinstance(func, ast.Attribute) else ""
            if (owner, name) in {("sys", "exit"), ("ctx", "exit"), ("ctx", "fail")} or name in {
                "exit",
                "ClickException",
                "Abort",
            }:
                found.append(f"{path.name}:{node.lineno} calls {owner or ''}.{name}")
        if isinstance(node, ast.Raise) and node.exc is not None:
            raised = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if getattr(raised, "id", "") == "SystemExit":
                found.append(f"{path.name}:{node.lineno} raises SystemExit")
    return found


@pytest.mark.parametrize("path", PRODUCT_FILES, ids=lambda p: str(p.relative_to(REPO)))
def test_no_other_module_of_the_product_exits_on_its_own(path: Path) -> None:
    assert _exits(path) == []


def test_the_check_finds_an_exit_of_each_kind(tmp_path: Path) -> None:
    planted = tmp_path / "planted.py"
    planted.write_text(
        "import sys\nimport click\n"
        "def a(ctx):\n"
        "    sys.exit(1)\n"
        "    raise SystemExit(2)\n"
        "    ctx.exit(1)\n"
        "    raise click.ClickException('x')\n"
    )
    assert len(_exits(planted)) == 4
