"""`spotcap serve` latency per endpoint against the same read in-process, in the same run.

    .venv/bin/python bench/serve.py [--home DIR] [--requests N]

Without --home, a demo home (`spotcap demo --days 1`) is made under a temporary directory. The
server runs in its own process (as in production); each endpoint gets N sequential GETs over one
keep-alive connection, alternating with N bare reads (so both see the same load). The bare
reference is the same read function called in this process, with what the server does around
it that is not the web stack (a new PostgreSQL connection per request, or the embedded ledger
opened and closed) and `json.dumps` of the rows, so the ratio is what the HTTP layer (FastAPI,
pydantic validation of the response, uvicorn) costs.
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
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from prometheus_client import generate_latest

from console.access import ReadAccess
from console.metrics import registry_for
from projections.postgres.connection import connect
from projections.read import fleet as fq
from projections.read.rows import json_row
from projections.read.savings import savings
from projections.read.why import why
from projections.stores import Stores
from streams.embedded import EmbeddedLog

SPOTCAP = str(Path(sys.executable).with_name("spotcap"))


def child_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "SPOTCAP_CHDB_PATH"}


def start(home: Path, logs: Path) -> tuple[subprocess.Popen[str], str, int]:
    out = logs / "serve.out"
    with out.open("w") as stdout:
        process = subprocess.Popen(
            [SPOTCAP, "--home", str(home), "serve", "--port", "0", "--log-level", "warning"],
            stdout=stdout, stderr=subprocess.DEVNULL, text=True, env=child_env(),
        )  # fmt: skip
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        text = out.read_text()
        if " on http://" in text:
            address = text.split(" on http://", 1)[1].split(":")
            return process, address[0], int(address[1])
        time.sleep(0.2)
    process.kill()
    raise SystemExit("spotcap serve did not start within 120 s")


def interleaved(
    n: int, served: Callable[[], Any], bare: Callable[[], Any]
) -> tuple[list[float], list[float]]:
    """`n` timings of each, one after the other (after one warm-up call of each)."""
    served(), bare()
    out: tuple[list[float], list[float]] = ([], [])
    for _ in range(n):
        for call, times in ((served, out[0]), (bare, out[1])):
            t0 = time.perf_counter()
            call()
            times.append(time.perf_counter() - t0)
    return out


def ms(xs: list[float]) -> str:
    """Median (p95) in milliseconds."""
    p95 = sorted(xs)[max(int(len(xs) * 0.95) - 1, 0)]
    return f"{statistics.median(xs) * 1e3:7.1f} ({p95 * 1e3:6.1f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", type=Path, default=None)
    parser.add_argument("--requests", type=int, default=50)
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
        lost = fq.instances(conn, state="lost", limit=1)[0]["instance_id"]
        workload = fq.workloads(conn, limit=1)[0]["workload_id"]

    def fleet_read(read: Callable[[Any], Any]) -> Callable[[], Any]:
        def call() -> Any:
            with connect(dsn) as c:
                return json.dumps(read(c))

        return call

    def ledger_read() -> Any:
        store = stores.open_ledger()
        try:
            return json.dumps(savings(store, workload=workload).as_json())
        finally:
            store.close()

    # The collector: the same reads, no HTTP.
    registry = registry_for(ReadAccess(stores, "dev", lambda: EmbeddedLog(home / "log")))
    cases: list[tuple[str, Callable[[], Any]]] = [
        ("/api/v1/pools?limit=200", fleet_read(lambda c: [json_row(r) for r in fq.pools(c)])),
        ("/api/v1/instances?limit=200",
         fleet_read(lambda c: [json_row(r) for r in fq.instances(c)])),
        (f"/api/v1/why/{lost}", fleet_read(lambda c: why(c, lost).as_json())),
        (f"/api/v1/reports/savings?workload={workload}", ledger_read),
        ("/metrics", lambda: generate_latest(registry)),
    ]  # fmt: skip
    process, host, port = start(home, tmp)
    try:
        client = http.client.HTTPConnection(host, port, timeout=60)

        def get(path: str) -> Callable[[], Any]:
            def call() -> Any:
                client.request("GET", path)
                response = client.getresponse()
                body = response.read()
                assert response.status == 200, (path, response.status, body[:200])
                return body

            return call

        # Served and bare calls alternate, so that both see the same load on a shared machine.
        timings = {path: interleaved(args.requests, get(path), call) for path, call in cases}
    finally:
        process.terminate()
        process.wait(timeout=30)
    print(f"{args.requests} sequential requests per endpoint, one keep-alive connection; "
          "median (p95) in ms")  # fmt: skip
    print(f"{'endpoint':<52} {'served':>16} {'bare read':>16} {'bare/served':>11}")
    for path, _ in cases:
        s, b = timings[path]
        shown = path if len(path) <= 50 else path[:47] + "..."
        print(f"{shown:<52} {ms(s):>16} {ms(b):>16} "
              f"{statistics.median(b) / statistics.median(s):>10.2f}x")  # fmt: skip
    if args.home is None:
        stores.stop_embedded_postgres()


if __name__ == "__main__":
    main()
