"""Child processes end with the process that started them (`streams.children`, issue 27): a
parent killed with SIGKILL runs nothing, yet its pool's workers and the commands it started
through `children.argv` end; a child whose parent ended before it asked ends at once.

The parent is a real process (a Python started by the test), its children real processes,
read from /proc. Waits are bounded and generous.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from streams import children
from tests.kube_support import wait_until
from tests.projection_support import ended, process_tree

WAIT_S = 120

PARENT = textwrap.dedent(
    """
    import json, multiprocessing, os, subprocess, sys, time
    from concurrent.futures import ProcessPoolExecutor
    from streams import children

    if __name__ == "__main__":
        pool = ProcessPoolExecutor(
            2, mp_context=multiprocessing.get_context("spawn"),
            initializer=children.pool_initializer, initargs=(os.getpid(),),
        )
        workers = sorted({f.result() for f in [pool.submit(os.getpid) for _ in range(8)]})
        command = subprocess.Popen(children.argv(["sleep", "600"]))
        print(json.dumps({"workers": workers, "command": command.pid}), flush=True)
        time.sleep(600)
    """
)


def test_a_killed_parents_pool_workers_and_commands_end_with_it(tmp_path: Path) -> None:
    script = tmp_path / "parent.py"
    script.write_text(PARENT)
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        started = json.loads(parent.stdout.readline())
        # The command becomes `sleep` (exec), under the pid Popen gave; the workers are there.
        comm = Path(f"/proc/{started['command']}/comm")
        wait_until(lambda: comm.read_text().strip() == "sleep", WAIT_S, "the command's exec")
        tree = process_tree(parent.pid)[1:]
        assert set(started["workers"]) | {started["command"]} <= set(tree), (started, tree)
    finally:
        parent.kill()
        parent.wait(timeout=60)
    wait_until(lambda: all(ended(pid) for pid in tree), WAIT_S, f"the children {tree} to end")


def test_a_child_whose_parent_is_already_gone_ends_at_once() -> None:
    # As if its parent had died before it asked: its parent (this process) is not the one it
    # was told of.
    assert os.getpid() != 1
    done = subprocess.run(
        [sys.executable, "-c", "from streams.children import die_with_parent; "
         "die_with_parent(1); print('lived on')"],
        capture_output=True, text=True, timeout=WAIT_S, check=False,
    )  # fmt: skip
    assert done.returncode == -signal.SIGKILL and "lived on" not in done.stdout
    asked = subprocess.run(  # its real parent: it lives on
        children.argv(["echo", "lived on"]), capture_output=True, text=True, timeout=WAIT_S,
        check=False,
    )  # fmt: skip
    assert asked.returncode == 0 and asked.stdout == "lived on\n"
