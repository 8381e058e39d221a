"""What a failure nobody caught says to a person: one sentence and its fix, never a traceback.

Commands stop through `spotcap.fail.fail` where they know what went wrong. What escapes them
anyway comes here, at the root of the command (`spotcap.cli.root.SpotcapGroup.invoke`): an
operating-system error (a read-only or full disk, a permission, a busy port), a log that cannot
be reached, a Ctrl-C. Anything else is a bug in spotcap: its traceback goes to a file the
sentence names, so nothing is lost for the report, and ``SPOTCAP_TRACEBACK=1`` shows it
in place.
"""

from __future__ import annotations

import errno
import os
import tempfile
import time
import traceback
from pathlib import Path

from spotcap.fail import EXIT_INTERRUPTED, fail, reader_went_away

# errno -> (what it means in words, what a person can do about it)
_OS_ERRORS: dict[int, tuple[str, str]] = {
    errno.EROFS: ("is on a read-only file system", "choose a writable --home (or SPOTCAP_HOME)"),
    errno.EACCES: (
        "cannot be written: permission denied",
        "choose a directory you may write (--home or SPOTCAP_HOME), or fix its permissions",
    ),
    errno.EPERM: (
        "cannot be written: operation not permitted",
        "choose a directory you may write (--home or SPOTCAP_HOME), or fix its permissions",
    ),
    errno.ENOTDIR: (
        "cannot be used: part of its path is a file, not a directory",
        "choose another path, or move the file out of the way",
    ),
    errno.EISDIR: ("is a directory where a file was expected", "name a file, not a directory"),
    errno.ENOSPC: ("cannot be written: the disk is full", "free some space and run again"),
    errno.EDQUOT: ("cannot be written: the disk quota is used up", "free some space"),
    errno.ENOENT: ("does not exist", "check the path"),
    errno.EEXIST: ("already exists", "choose another path, or move it out of the way"),
}


def explain_os_error(error: OSError) -> tuple[str, str]:
    """(sentence, fix) for an operating-system error, naming the path or address involved."""
    # asyncio's text names the address: "error while attempting to bind on address (...)"
    said = " ".join(str(error).split()).removeprefix(f"[Errno {error.errno}] ")
    if error.errno == errno.EADDRINUSE:
        return (
            f"cannot listen, the port is already in use ({said})",
            "choose another port, or stop the program that listens there",
        )
    if error.errno == errno.EADDRNOTAVAIL:
        return (
            f"cannot listen on an address this machine does not have ({said})",
            "listen on 127.0.0.1, 0.0.0.0 or an address of this machine",
        )
    where = error.filename if error.filename is not None else None
    words, fix = _OS_ERRORS.get(
        error.errno or 0, (f"failed: {error.strerror or error}", "check the path and try again")
    )
    if where is None:
        return f"an operating-system call {words}", fix
    return f"{where} {words}", fix


def unwritable_directory(directory: Path) -> tuple[str, str] | None:
    """Why files cannot be written under `directory` (made if missing), or None: asked before
    a long run, not found out at its end."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".spotcap-probe-"):
            pass
    except OSError as error:
        return explain_os_error(error)
    return None


def crash_report(error: BaseException) -> Path:
    """Write `error`'s traceback to a file of its own and return where."""
    folder = Path(os.environ.get("SPOTCAP_CRASH_DIR") or tempfile.gettempdir())
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"spotcap-crash-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}.txt"
    path.write_text("".join(traceback.format_exception(error)))
    return path


def fail_on(error: BaseException) -> None:
    """Stop with a sentence for `error` (returns only for exits, which pass through)."""
    from projections.provenance import LogReplacedError, RegionMismatchError
    from schemas.registry import RegistryError
    from streams.log import LogError

    if isinstance(error, (SystemExit, GeneratorExit)):
        return
    if isinstance(error, KeyboardInterrupt):
        fail("interrupted (Ctrl-C); what was acknowledged before it is kept",
             exit_code=EXIT_INTERRUPTED)  # fmt: skip
    if isinstance(error, (LogError, RegistryError, LogReplacedError, RegionMismatchError)):
        fail(str(error))
    if isinstance(error, BrokenPipeError):
        reader_went_away()
    if isinstance(error, OSError):
        message, fix = explain_os_error(error)
        fail(message, fix)
    if isinstance(error, RecursionError):
        fail(
            "the input is nested too deeply to read",
            "flatten the file named in the command (a few levels of nesting are plenty)",
        )
    if os.environ.get("SPOTCAP_TRACEBACK"):
        return
    try:
        where = f"the details are in {crash_report(error)}"
    except OSError:
        where = "set SPOTCAP_TRACEBACK=1 to see the details"
    fail(
        f"spotcap stopped on an error it did not expect ({type(error).__name__}: {error})",
        f"this is a bug in spotcap; {where}, please report them",
    )


__all__ = ["crash_report", "explain_os_error", "fail_on", "unwritable_directory"]
