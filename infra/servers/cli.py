"""The command line ``python -m infra.servers``: fetch-kafka, fetch-promtool, fetch-versitygw,
fetch-kube-apiserver; start, stop or status a server."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

from infra.servers.alertmanager import fetch_alertmanager, fetch_amtool, fetch_prometheus
from infra.servers.kafka import fetch_kafka, start_kafka
from infra.servers.kubernetes import fetch_kube_apiserver, start_kubernetes
from infra.servers.nats import start_nats
from infra.servers.openbao import start_openbao
from infra.servers.postgres import start_postgres
from infra.servers.process import Server, ServerError, server_status, stop
from infra.servers.promtool import fetch_promtool
from infra.servers.slurm import start_slurm
from infra.servers.toxiproxy import fetch_toxiproxy, start_toxiproxy
from infra.servers.versitygw import fetch_versitygw, start_versitygw

NAMES = ("kafka", "postgres", "nats", "openbao", "slurm", "versitygw", "kubernetes", "toxiproxy")

_STARTERS: dict[str, Callable[[Path], Server]] = {
    "kafka": start_kafka,
    "postgres": start_postgres,
    "nats": start_nats,
    "openbao": start_openbao,
    "slurm": start_slurm,
    "versitygw": start_versitygw,
    "kubernetes": start_kubernetes,
    "toxiproxy": start_toxiproxy,
}
_FETCHERS: dict[str, Callable[[], Path]] = {
    "fetch-kafka": fetch_kafka,
    "fetch-promtool": fetch_promtool,
    "fetch-alertmanager": fetch_alertmanager,
    "fetch-amtool": fetch_amtool,
    "fetch-prometheus": fetch_prometheus,
    "fetch-versitygw": fetch_versitygw,
    "fetch-kube-apiserver": fetch_kube_apiserver,
    "fetch-toxiproxy": fetch_toxiproxy,
}


def main(argv: list[str] | None = None) -> int:
    """Run one command; returns the exit code (0 done, 1 error, 3 status of a stopped server)."""
    parser = argparse.ArgumentParser(
        prog="python -m infra.servers",
        description=(
            "Fetch and run spotcap's real servers on 127.0.0.1 (free ports).\n\n"
            "  fetch-kafka                fetch Kafka's jars from Maven Central (cached)\n"
            "  fetch-promtool             find promtool (from Debian's prometheus package)\n"
            "  fetch-alertmanager         find alertmanager (Debian's prometheus-alertmanager)\n"
            "  fetch-amtool               find amtool (Debian's prometheus-alertmanager)\n"
            "  fetch-prometheus           find prometheus (Debian's prometheus package)\n"
            "  fetch-versitygw            build the versitygw S3 server with go install (cached)\n"
            "  fetch-kube-apiserver       build kube-apiserver with go build (cached)\n"
            "  fetch-toxiproxy            build Toxiproxy (network faults) with go install\n"
            "  SERVER start               start; prints {name, address, pid} as JSON\n"
            "  SERVER stop                stop cleanly (idempotent)\n"
            "  SERVER status              print the state as JSON; exit 3 if not running\n"
            "\n"
            "SERVER is kafka, postgres, nats, openbao, slurm, versitygw, kubernetes or\n"
            "toxiproxy (its HTTP API; proxies are made through it). OpenBao\n"
            "runs in dev mode (in memory); Slurm is one node from Debian's packages (slurm-wlm,\n"
            "slurmrestd, munge); kubernetes is kube-apiserver over Debian's etcd. OpenBao's root\n"
            "token is in DIR/token, versitygw's keys in DIR/credentials.json, kubernetes'\n"
            "administrator kubeconfig in DIR/admin.kubeconfig.\n"
        ),
        epilog=(
            "Environment: SPOTCAP_CACHE (jar cache, default ~/.cache/spotcap), SPOTCAP_JAVA or "
            "JAVA_HOME (java for Kafka), SPOTCAP_MVN, SPOTCAP_GO, SPOTCAP_NATS_SERVER, SPOTCAP_BAO "
            "(bao for OpenBao), SPOTCAP_ETCD, SPOTCAP_KUBE_APISERVER, SPOTCAP_TOXIPROXY. Errors go "
            "to stderr, exit code 1."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "server",
        choices=[*NAMES, *_FETCHERS],
        help="which server",
    )
    parser.add_argument("action", nargs="?", choices=["start", "stop", "status"], help="what to do")
    parser.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="data directory of the server (default: .spotcap/servers/<server>)",
    )
    args = parser.parse_args(argv)
    try:
        if args.server in _FETCHERS:
            what = {
                "fetch-kafka": "libs",
                "fetch-promtool": "promtool",
                "fetch-alertmanager": "alertmanager",
                "fetch-amtool": "amtool",
                "fetch-prometheus": "prometheus",
            }.get(args.server, "binary")
            print(json.dumps({what: str(_FETCHERS[args.server]())}))
            return 0
        if args.action is None:
            parser.error("an action is required: start, stop or status")
        data_dir = args.dir or Path(".spotcap") / "servers" / args.server
        if args.action == "start":
            server = _STARTERS[args.server](data_dir)
            print(json.dumps({"name": server.name, "address": server.address, "pid": server.pid}))
            return 0
        if args.action == "stop":
            stop(data_dir)
            return 0
        status = server_status(data_dir)
        print(json.dumps(status))
        return 0 if status["running"] else 3
    except ServerError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    except OSError as exc:  # a folder that cannot be written (read-only, full, not ours)
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"{where}{exc.strerror or exc}", file=sys.stderr)
        return 1
