"""Child processes that end with the process that started them.

A service killed with SIGKILL (an operator's ``kill -9``, the OOM killer, the fault harness of
issue 27) runs no signal handler and no ``finally``: a child it started lives on, orphaned,
holding what it held (the projections' ledger child once held the embedded ledger after its
service was killed). The kernel ends such a child instead: `die_with_parent`, called first
thing in the child, asks Linux for a SIGKILL when its parent ends (``PR_SET_PDEATHSIG``), and
ends the child at once if the parent ended before it asked (the child then belongs to another
process already). `pool_initializer` does it in a `ProcessPoolExecutor`'s workers; `argv`
wraps a command for `subprocess.Popen` (the setting survives the ``exec``).

The kernel's parent is the *thread* that started the child: a child is also killed when that
thread ends. Start children from a thread that outlives them (the main thread; a pool's own
manager thread starts the pool's replacement workers and lives as long as the pool).

Who calls it: the projections' ledger rounds, the simulator's children (the demo's baseline
and projections, the live region's services).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Callable, Sequence

PR_SET_PDEATHSIG = 1
"""prctl(2): the signal this process gets when its parent ends (Linux only)."""


class ChildSetupError(OSError):
    """The kernel refused to tie a child to its parent."""


def die_with_parent(parent_pid: int) -> None:
    """In a child of process `parent_pid`: SIGKILL when the parent ends (killed too); ended now
    if the parent has already ended. Elsewhere than on Linux nothing happens."""
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        errno = ctypes.get_errno()
        raise ChildSetupError(
            errno,
            f"prctl(PR_SET_PDEATHSIG) refused in child {os.getpid()} of {parent_pid}: "
            f"{os.strerror(errno)}; the child could outlive a killed parent",
        )
    if os.getppid() != parent_pid:  # the parent ended before the prctl: nobody to signal us
        os.kill(os.getpid(), signal.SIGKILL)


def name_process(name: str) -> None:
    """Name this (child) process as `ps`, `top` and bench/demo.py show it (Linux; at most 15
    characters are kept; elsewhere nothing happens)."""
    try:
        with open("/proc/self/comm", "w") as comm:
            comm.write(name[:15])
    except OSError:
        pass


def pool_initializer(parent_pid: int, then: Callable[[], None] | None = None) -> None:
    """A `ProcessPoolExecutor` initializer (``initargs=(os.getpid(), then)``): `die_with_parent`,
    then `then` (picklable: a module-level function), if any."""
    die_with_parent(parent_pid)
    if then is not None:
        then()


def argv(command: Sequence[str]) -> list[str]:
    """`command` as a `subprocess.Popen` argument list whose process ends with this one (a
    Python of this interpreter calls `die_with_parent`, then execs `command`; ``-P``: a folder
    named like ours in the working directory is not imported instead)."""
    return [sys.executable, "-P", "-m", __name__, str(os.getpid()), *command]


def _exec(args: Sequence[str]) -> None:
    parent, *command = args
    die_with_parent(int(parent))
    os.execvp(command[0], command)


if __name__ == "__main__":
    _exec(sys.argv[1:])
