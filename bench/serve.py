"""`spotcap serve` latency per endpoint against a bare server doing the same HTTP work with the
libraries alone, in the same run.

    .venv/bin/python bench/serve.py [--home DIR] [--requests N] [--rounds R]

Without --home, a demo home (`spotcap demo --days 1`) is made under a temporary directory. Two
servers run, each in its own process over the same stores: `spotcap serve`, and
`bench/serve_bare.py` (FastAPI on uvicorn as `spotcap serve` runs them, psycopg with a new
connection per request, chdb, prometheus_client, the SQL written there; no module of
spotcap's). Before any clock, each endpoint's body is asked of both and checked equal (JSON
parsed; the metrics' text line by line but for the read durations, which are times); the run
stops if one differs. Then, per endpoint, `--rounds` rounds of N sequential GETs to each server,
one keep-alive connection each, alternating request by request, the server asked first
alternating from round to round. Per round the ratio is the bare server's median over the
served one's (1.0: as fast as the libraries alone; the time ratio, so the rate ratio as
elsewhere); the table gives the medians over all requests and each ratio's median and range
over the rounds.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from projections.postgres.connection import DEFAULT_SCHEMA, connect
from projections.read import fleet as fq
from projections.stores import Stores

SPOTCAP = str(Path(sys.executable).with_name("spotcap"))
BARE = str(Path(__file__).resolve().with_name("serve_bare.py"))
REGION = "dev"  # the demo's
DURATIONS = "spotcap_store_read_duration_seconds{"  # a time, different at every scrape


def child_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "SPOTCAP_CHDB_PATH"}


def start(command: list[str], out: Path, marker: str) -> tuple[subprocess.Popen[str], str, int]:
    with out.open("w") as stdout:
        process = subprocess.Popen(command, stdout=stdout, stderr=subprocess.STDOUT, text=True,
                                   env=child_env())  # fmt: skip
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        text = out.read_text()
        if marker in text:
            address = text.split(marker, 1)[1].split()[0].split(":")
            return process, address[0], int(address[1])
        if process.poll() is not None:
            break
        time.sleep(0.2)
    process.kill()
    raise SystemExit(f"{command[0]} did not start within 120 s (its output: {out})")


def getter(host: str, port: int) -> Callable[[str], bytes]:
    client = http.client.HTTPConnection(host, port, timeout=120)

    def get(path: str) -> bytes:
        client.request("GET", path)
        response = client.getresponse()
        body = response.read()
        if response.status != 200:
            raise SystemExit(f"GET {path}: {response.status} {body[:200]!r}")
        return body

    return get


def same_body(path: str, served: bytes, bare: bytes) -> str | None:
    """None if both answered the same, else what differs."""
    if path == "/metrics":
        mine = [x for x in served.decode().splitlines() if not x.startswith(DURATIONS)]
        theirs = [x for x in bare.decode().splitlines() if not x.startswith(DURATIONS)]
        if mine == theirs:
            return None
        differ = [(a, b) for a, b in zip(mine, theirs, strict=False) if a != b]
        return f"{len(mine)} and {len(theirs)} lines; first differing: {differ[:1]}"
    a, b = json.loads(served), json.loads(bare)
    if a == b:
        return None
    return f"served {json.dumps(a)[:300]} ... bare {json.dumps(b)[:300]}"


def timed(get: Callable[[str], bytes], path: str) -> float:
    t0 = time.perf_counter()
    get(path)
    return time.perf_counter() - t0


def ms(xs: list[float]) -> str:
    """Median (p95) in milliseconds."""
    p95 = sorted(xs)[max(int(len(xs) * 0.95) - 1, 0)]
    return f"{statistics.median(xs) * 1e3:7.1f} ({p95 * 1e3:6.1f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", type=Path, default=None)
    parser.add_argument("--requests", type=int, default=50, help="per endpoint, side and round")
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-serve-"))
    home = args.home
    if home is None:
        home = tmp / "home"
        print("making a demo home (spotcap demo --days 1) ...", flush=True)
        subprocess.run([SPOTCAP, "--home", str(home), "demo", "--days", "1"], check=True,
                       env=child_env(), stdout=subprocess.DEVNULL)  # fmt: skip
    stores = Stores(home)
    dsn = stores.fleet_dsn()
    with connect(dsn) as conn:
        # A lost instance (replaced, when every lost one was): the longest chain of causes.
        found = fq.instances(conn, state="lost", limit=1) or fq.instances(
            conn, state="replaced", limit=1
        )
        lost = found[0]["instance_id"]
    paths = ["/api/v1/pools?limit=200", "/api/v1/instances?limit=200", f"/api/v1/why/{lost}",
             "/metrics"]  # fmt: skip
    served_process, host, port = start(
        [SPOTCAP, "--home", str(home), "serve", "--port", "0", "--log-level", "warning"],
        tmp / "serve.out", " on http://",
    )  # fmt: skip
    bare_process = None
    try:
        bare_process, bare_host, bare_port = start(
            [sys.executable, BARE, "--dsn", dsn, "--schema", DEFAULT_SCHEMA, "--ledger",
             str(home / "ledger"), "--log", str(home / "log"), "--region", REGION],
            tmp / "bare.out", "listening on http://",
        )  # fmt: skip
        sides = {"served": getter(host, port), "bare": getter(bare_host, bare_port)}
        for path in paths:  # outside the clocks: both answer the same
            differs = same_body(path, sides["served"](path), sides["bare"](path))
            if differs is not None:
                raise SystemExit(f"{path}: the bare server answers otherwise: {differs}")
        print(f"every endpoint's body the same on both servers ({len(paths)} endpoints)")
        times: dict[str, dict[str, list[float]]] = {p: {"served": [], "bare": []} for p in paths}
        ratios: dict[str, list[float]] = {p: [] for p in paths}
        for r in range(args.rounds):
            order = ("served", "bare") if r % 2 == 0 else ("bare", "served")
            for path in paths:
                got: dict[str, list[float]] = {"served": [], "bare": []}
                for _ in range(args.requests):
                    for side in order:
                        got[side].append(timed(sides[side], path))
                for side in order:
                    times[path][side] += got[side]
                ratios[path].append(statistics.median(got["bare"]) /
                                    statistics.median(got["served"]))  # fmt: skip
            print(f"  round {r + 1}/{args.rounds} ({order[0]} first): "
                  + ", ".join(f"{p.split('?')[0][:24]} {ratios[p][-1]:.2f}" for p in paths),
                  flush=True)  # fmt: skip
    finally:
        for process in (served_process, bare_process):
            if process is not None:
                process.terminate()
                process.wait(timeout=30)
    print(f"\n{args.rounds} rounds of {args.requests} sequential requests per endpoint and "
          "server, one keep-alive connection each; median (p95) in ms")  # fmt: skip
    print(f"{'endpoint':<44} {'served':>16} {'bare server':>16} {'bare/served':>18}")
    for path in paths:
        s, b, q = times[path]["served"], times[path]["bare"], ratios[path]
        shown = path if len(path) <= 42 else path[:39] + "..."
        spread = f"{statistics.median(q):.2f} ({min(q):.2f}-{max(q):.2f})"
        print(f"{shown:<44} {ms(s):>16} {ms(b):>16} {spread:>18}")
    if args.home is None:
        stores.stop_embedded_postgres()


if __name__ == "__main__":
    main()
