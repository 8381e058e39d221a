"""A demo run for tests/test_demo.py's following test, in a process of its own (without the
suite's SPOTCAP_ settings, so the ledger is the home's own and its children open it):

    python -m tests.demo_follow HOME REGION follow|after FLUSH_EVERY

`follow`: the projections follow the log while the run writes it (`sim.materialise.Follower`,
as `spotcap demo` runs them); `after`: they are rebuilt from the finished log
(`sim.materialise.materialise`). Prints the projections' report as JSON.
"""

from __future__ import annotations

import json
import sys
from functools import partial
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sim import SimConfig  # noqa: E402
from sim.demo import run_demo  # noqa: E402
from sim.materialise import Follower, materialise  # noqa: E402
from spotcap.config import Settings  # noqa: E402
from spotcap.wiring import make_codec, open_log, open_log_and_codec, runs_dir, stores  # noqa: E402


def main() -> None:
    home, region, mode, flush_every = Path(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
    settings = Settings(home=home, region=region)
    config = SimConfig(seed=9, days=0.25, workloads=20, region=region)
    opener = partial(open_log_and_codec, settings)
    follow = mode == "follow"
    follower = Follower(opener, region, stores(settings), rebuild=True) if follow else None
    log = open_log(settings)
    try:
        run_demo(
            log,
            make_codec(settings),
            runs_dir(settings),
            config,
            compare=False,
            follower=follower,
            flush_every=flush_every,
        )
    finally:
        log.close()
    if follower is not None:
        report = follower.result()
    else:
        report = materialise(opener, region, stores(settings), rebuild=True)
    print(json.dumps(report, sort_keys=True))


if __name__ == "__main__":
    main()
