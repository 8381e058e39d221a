"""The checkpoint client's save and restore of one large part against the bare S3 transfer of
the same bytes (boto3's upload_fileobj/download_fileobj, same multipart settings), on a
versitygw and an OpenBao started here (infra.servers). The client's extra work: sealing with
AES-256-GCM in 1 MiB chunks to a temporary file, one transit call for the data key (one to
unwrap it on restore), the manifest, the SHA-256 check, opening the chunks. The design's target
for a final checkpoint is 2 GB within 45 s at p99 (on Ceph RGW sized for it).

    .venv/bin/python bench/checkpoint_client.py [--mib 512] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from boto3.s3.transfer import TransferConfig

from checkpoint.store import MULTIPART_BYTES
from infra import servers
from tests.checkpoint_support import make_workload


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-ckpt-") as tmp:
        base = Path(tmp)
        gw = servers.start_versitygw(base / "gw")
        bao = servers.start_openbao(base / "bao")
        try:
            measure(gw, bao, base, args.mib, args.rounds)
        finally:
            servers.stop(gw)
            servers.stop(bao)


def measure(gw: servers.Server, bao: servers.Server, base: Path, mib: int, rounds: int) -> None:
    wl = make_workload(gw, bao)
    source = base / "state.bin"
    with source.open("wb") as f:
        for _ in range(mib):
            f.write(os.urandom(1 << 20))
    size = source.stat().st_size
    client = wl.client("bench")
    transfer = TransferConfig(
        multipart_threshold=MULTIPART_BYTES, multipart_chunksize=MULTIPART_BYTES
    )
    timings: dict[str, list[float]] = {k: [] for k in ("save", "bare up", "restore", "bare down")}
    for step in range(rounds):
        started = time.monotonic()
        client.save({"state": source}, step=step)
        timings["save"].append(time.monotonic() - started)
        started = time.monotonic()
        with source.open("rb") as f:
            wl.s3.upload_fileobj(f, wl.bucket.name, f"bare/{step}", Config=transfer)
        timings["bare up"].append(time.monotonic() - started)
        started = time.monotonic()
        restored = client.restore(into=base / "restored")
        timings["restore"].append(time.monotonic() - started)
        assert restored is not None and restored.files["state"].stat().st_size == size
        started = time.monotonic()
        with (base / "bare.bin").open("wb") as f:
            wl.s3.download_fileobj(wl.bucket.name, f"bare/{step}", f, Config=transfer)
        timings["bare down"].append(time.monotonic() - started)
    mb = size / 1e6
    print(f"{mib} MiB ({mb:.0f} MB), {rounds} rounds, median seconds and MB/s:")
    for name, values in timings.items():
        median = statistics.median(values)
        print(f"  {name:<10} {median:7.2f} s  {mb / median:7.1f} MB/s")
    save, up = statistics.median(timings["save"]), statistics.median(timings["bare up"])
    restore, down = statistics.median(timings["restore"]), statistics.median(timings["bare down"])
    print(
        f"  client / bare: save {save / up:.2f}x, restore {restore / down:.2f}x; a 2 GB final "
        f"checkpoint at this rate: {2000 / (mb / save):.0f} s"
    )


if __name__ == "__main__":
    main()
