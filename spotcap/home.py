"""Commands that share a home do so safely: whatever deletes or rewrites a home's data (`demo
--fresh`, `rebuild`, `log repair`) holds the home alone, and refuses while any other command
reads or writes it (and they refuse while it runs), with a sentence naming the other command.

The lock is an flock on ``<home>/.lock``: shared by the commands that read or write the home,
exclusive for the ones that replace its data; the kernel lets go of it when the process ends,
however it ends. Each holder writes ``<home>/.holders/<pid>.json`` (its command and start), so a
refusal can name who holds the home. A home this process cannot write (a read-only copy handed
to an auditor) cannot change under it: reading it needs no lock.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import click

from spotcap.config import Settings
from spotcap.fail import fail

_CANNOT_WRITE = (errno.EROFS, errno.EACCES, errno.EPERM)


def hold_home(settings: Settings, *, exclusive: bool = False) -> None:
    """Hold the home (shared, or `exclusive`) until the running command ends; a sentence and
    exit 1 when another command holds it in a way this one cannot share."""
    home = settings.home
    try:
        if exclusive or not home.is_dir():
            home.mkdir(parents=True, exist_ok=True)
        handle = open(home / ".lock", "a+b")  # noqa: SIM115 - held until the command ends
    except OSError as error:
        if error.errno in _CANNOT_WRITE and not exclusive:
            return  # a read-only home: nothing can replace its data while it is read
        raise
    try:
        fcntl.flock(
            handle.fileno(), (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB
        )
    except BlockingIOError:
        handle.close()
        others = holders(home)
        who = "; ".join(f"`{h['command']}` (pid {h['pid']}, since {h['since']})" for h in others)
        who = who or "a command that has just started"
        what = "replaces" if exclusive else "reads or writes"
        fail(
            f"another spotcap command is using the home {home}: {who}; this command {what} the "
            "home's data and cannot run beside it",
            "wait for that command to finish (or stop it), or use another --home",
        )
    mine = home / ".holders" / f"{os.getpid()}.json"
    try:
        mine.parent.mkdir(exist_ok=True)
        command = " ".join(["spotcap", *sys.argv[1:]])
        since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        mine.write_text(json.dumps({"pid": os.getpid(), "command": command, "since": since}))
    except OSError:
        pass  # naming the holder is a courtesy; the lock is what protects the home

    def release() -> None:
        mine.unlink(missing_ok=True)
        handle.close()  # lets go of the flock

    click.get_current_context().call_on_close(release)


def holders(home: Path) -> list[dict[str, Any]]:
    """The commands that hold the home now (files of processes that are gone are left out)."""
    found = []
    for path in sorted((home / ".holders").glob("*.json")):
        try:
            holder: dict[str, Any] = json.loads(path.read_text())
            os.kill(int(holder["pid"]), 0)
        except (OSError, ValueError, KeyError):
            continue
        if holder["pid"] != os.getpid():
            found.append(holder)
    return found


__all__ = ["hold_home", "holders"]
