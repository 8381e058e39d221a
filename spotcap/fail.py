"""`fail`: the one way the `spotcap` command stops on an error.

A person reads one sentence that says what is wrong, then (dimmed) how to fix it, on stderr, and
never a traceback; a machine that asked for ``--json`` reads its JSON report on stdout instead.
The exit status is 1, or 2 for a usage error (options that cannot go together, a missing or
malformed option), as click gives for its own usage errors.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from typing import Any, NoReturn

import click
from rich.console import Console
from rich.markup import escape

EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report a command stopped by Ctrl-C
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, as shells report a writer whose reader went away

_stderr = Console(stderr=True)


def fail(
    message: str,
    hint: str = "",
    *,
    usage: bool = False,
    json_report: Mapping[str, Any] | None = None,
    exit_code: int | None = None,
) -> NoReturn:
    """Report `message` (one sentence) and `hint` (how to fix it), then exit.

    With `json_report` (the command's ``--json``), that report goes to stdout instead of the
    sentence to stderr.
    """
    if json_report is not None:
        click.echo(json.dumps(json_report, indent=2, sort_keys=True))
    else:
        # soft_wrap: a long path must not be broken across lines (people copy it, tests grep it)
        _stderr.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
        if hint:
            _stderr.print(f"[dim]{escape(hint)}[/]", highlight=False, soft_wrap=True)
    sys.exit(exit_code if exit_code is not None else EXIT_USAGE if usage else EXIT_FAILURE)


def reader_went_away() -> NoReturn:
    """The reader of stdout stopped reading (`spotcap log cat | head`): nothing is wrong, so
    nothing is said; exit as a command killed by SIGPIPE would, with stdout pointed at
    /dev/null so the interpreter's last flush cannot fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    sys.exit(EXIT_BROKEN_PIPE)


__all__ = [
    "EXIT_BROKEN_PIPE",
    "EXIT_FAILURE",
    "EXIT_INTERRUPTED",
    "EXIT_USAGE",
    "fail",
    "reader_went_away",
]
