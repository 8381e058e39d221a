"""Kafka 4.4 in KRaft mode: fetch its jars from Maven Central, start a single-node broker.

The jars come through ``infra/kafka/pom.xml`` (``mvn``) and are cached under ``$SPOTCAP_CACHE``
(default ``~/.cache/spotcap``); broker and controller run in one JVM. ``java`` is
``$SPOTCAP_JAVA``, else ``$JAVA_HOME/bin/java``, else ``java`` on PATH.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from infra.servers.process import (
    Server,
    ServerError,
    append_log,
    cache_dir,
    file_lock,
    ports_of,
    prepare_dir,
    running,
    server_status,
    spawn,
    state_of,
    tcp_connects,
    wait_ready,
    write_state,
)

KAFKA_VERSION = "4.4.0"
INFRA_DIR = Path(__file__).resolve().parent.parent
KAFKA_POM = INFRA_DIR / "kafka" / "pom.xml"
KAFKA_LOG4J2 = INFRA_DIR / "kafka" / "log4j2.yaml"


def fetch_kafka() -> Path:
    """Return the directory of Kafka's jars, fetching them from Maven Central with mvn if needed.

    The jars land in ``<cache>/kafka-4.4.0/libs``; a marker file holding the SHA-256 of
    ``infra/kafka/pom.xml`` says they are complete, so a second call does nothing.
    """
    home = cache_dir() / f"kafka-{KAFKA_VERSION}"
    libs = home / "libs"
    marker = home / "libs.complete"
    pom_hash = hashlib.sha256(KAFKA_POM.read_bytes()).hexdigest()

    def complete() -> bool:
        try:
            return marker.read_text().strip() == pom_hash and any(libs.glob("kafka_2.13-*.jar"))
        except OSError:
            return False

    if complete():
        return libs
    with file_lock(home / ".fetch.lock"):
        if complete():
            return libs
        mvn = os.environ.get("SPOTCAP_MVN") or shutil.which("mvn")
        if mvn is None:
            raise ServerError(
                "kafka",
                "cannot fetch the Kafka jars: mvn is not on PATH",
                fix="install Maven 3.8+ (apt-get install maven) or set SPOTCAP_MVN",
            )
        tmp = home / f"libs.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        log_path = home / "fetch.log"
        argv = [
            mvn,
            "-q",
            "-B",
            "-f",
            str(KAFKA_POM),
            "dependency:copy-dependencies",
            f"-DoutputDirectory={tmp}",
        ]
        with log_path.open("wb") as log:
            try:
                code = subprocess.run(
                    argv, stdout=log, stderr=subprocess.STDOUT, timeout=900, check=False
                ).returncode
            except subprocess.TimeoutExpired:
                code = -1
        if code != 0 or not any(tmp.glob("kafka_2.13-*.jar")):
            shutil.rmtree(tmp, ignore_errors=True)
            raise ServerError(
                "kafka",
                f"fetching the jars with Maven failed (exit {code}): {' '.join(argv)}",
                log_path=log_path,
                fix="check access to Maven Central (https://repo.maven.apache.org) and ~/.m2",
            )
        shutil.rmtree(libs, ignore_errors=True)
        tmp.rename(libs)
        marker.write_text(pom_hash + "\n")
    return libs


def _java(java: str | None) -> str:
    if java:
        return java
    if os.environ.get("SPOTCAP_JAVA"):
        return os.environ["SPOTCAP_JAVA"]
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").exists():
        return str(Path(java_home) / "bin" / "java")
    return shutil.which("java") or "java"


def _random_cluster_id() -> str:
    while True:  # base64url of 16 random bytes, 22 chars, like kafka-storage random-uuid
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


def _kafka_properties(
    data_dir: Path, broker_port: int, controller_port: int, proxied: tuple[int, str] | None = None
) -> str:
    listeners = f"PLAINTEXT://127.0.0.1:{broker_port},CONTROLLER://127.0.0.1:{controller_port}"
    advertised = f"PLAINTEXT://127.0.0.1:{broker_port}"
    protocols = "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT"
    if proxied is not None:  # a listener whose clients are told to come through a proxy
        port, through = proxied
        listeners += f",PROXIED://127.0.0.1:{port}"
        advertised += f",PROXIED://{through}"
        protocols += ",PROXIED:PLAINTEXT"
    props = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
        "listeners": listeners,
        "advertised.listeners": advertised,
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": protocols,
        "log.dirs": str(data_dir / "logs"),
        "num.partitions": "1",
        "auto.create.topics.enable": "false",
        "min.insync.replicas": "1",
        "default.replication.factor": "1",
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        # Retention checked every 5 s (default 5 min), so a test sees what retention deletes.
        "log.retention.check.interval.ms": "5000",
    }
    lines = ["# written by infra.servers; a restart keeps its ports when free (ports.json)"]
    lines += [f"{k}={v}" for k, v in props.items()]
    return "\n".join(lines) + "\n"


def _kafka_probe(broker_port: int) -> Callable[[float], bool]:
    from confluent_kafka.admin import AdminClient

    quiet = logging.getLogger("spotcap.infra.kafka_probe")
    quiet.propagate = False
    quiet.addHandler(logging.NullHandler())

    def probe(budget_s: float) -> bool:
        if not tcp_connects(broker_port):
            return False
        conf: dict[str, Any] = {
            "bootstrap.servers": f"127.0.0.1:{broker_port}",
            "socket.timeout.ms": 3000,
            "logger": quiet,
        }
        admin = AdminClient(conf)
        try:
            md = admin.list_topics(timeout=max(budget_s, 0.5))
        except Exception:
            return False
        return bool(md.brokers) and 1 in md.brokers

    return probe


def start_kafka(
    data_dir: Path,
    timeout_s: float = 120,
    *,
    java: str | None = None,
    advertised_through: str | None = None,
) -> Server:
    """Start a single-node KRaft Kafka from ``data_dir`` and wait until it answers metadata.

    Formats the storage on first use; a restart on the same directory keeps the topics.
    ``java`` overrides the Java binary (else $SPOTCAP_JAVA, $JAVA_HOME/bin/java, PATH).

    ``advertised_through`` ("HOST:PORT", a proxy's address) adds a second listener whose
    clients are told the broker is at that address: a Kafka client connects to the broker it
    is told of after bootstrap, so a proxy in front of the broker sees its traffic only when
    the broker advertises the proxy. The listener's own port (the proxy's upstream) is
    `proxied_listener`'s; ``Server.address`` stays the direct one.
    """
    name = "kafka"
    data_dir = prepare_dir(data_dir)
    existing = running(data_dir, name)
    if existing is not None:
        return existing
    libs = fetch_kafka()
    java_bin = _java(java)
    log_path = data_dir / "kafka.log"
    props_path = data_dir / "server.properties"
    broker_port, controller_port, *extra = ports_of(data_dir, 3 if advertised_through else 2)
    proxied = (extra[0], advertised_through) if advertised_through else None
    props_path.write_text(_kafka_properties(data_dir, broker_port, controller_port, proxied))
    listener = {"proxied_port": proxied[0]} if proxied else {}
    classpath = f"{libs}/*"
    log4j = f"-Dlog4j2.configurationFile={KAFKA_LOG4J2}"
    fix_java = "needs Java 17+: set JAVA_HOME or SPOTCAP_JAVA, or put java on PATH"

    timings: dict[str, float] = {}
    if not (data_dir / "logs" / "meta.properties").exists():
        cid_path = data_dir / "cluster.id"
        if not cid_path.exists():
            cid_path.write_text(_random_cluster_id() + "\n")
        argv = [
            java_bin,
            "-Xmx256m",
            log4j,
            "-cp",
            classpath,
            "kafka.tools.StorageTool",
            "format",
            "--config",
            str(props_path),
            "--cluster-id",
            cid_path.read_text().strip(),
            "--ignore-formatted",
        ]
        append_log(log_path, "formatting storage: " + " ".join(argv))
        t0 = time.monotonic()
        try:
            with log_path.open("ab") as log:
                code = subprocess.run(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd=data_dir,
                    timeout=max(timeout_s, 30.0),
                    check=False,
                ).returncode
        except OSError as exc:
            append_log(log_path, f"cannot execute {java_bin!r}: {exc}")
            raise ServerError(
                name, f"cannot execute java {java_bin!r}: {exc}", log_path=log_path, fix=fix_java
            ) from exc
        except subprocess.TimeoutExpired as exc:
            raise ServerError(
                name, "storage format timed out", log_path=log_path, fix=fix_java
            ) from exc
        if code != 0:
            raise ServerError(
                name,
                f"storage format (kafka.tools.StorageTool format) failed with exit code {code}",
                log_path=log_path,
                fix=f"{fix_java}; or remove {data_dir} to start from empty storage",
            )
        timings["format_s"] = round(time.monotonic() - t0, 3)

    argv = [
        java_bin,
        "-Xms256m",
        "-Xmx768m",
        "-XX:+UseG1GC",
        "-Djava.awt.headless=true",
        log4j,
        f"-Dkafka.logs.dir={data_dir}",
        "-cp",
        classpath,
        "kafka.Kafka",
        str(props_path),
    ]
    probe = _kafka_probe(broker_port)
    proc = spawn(name, argv, log_path, data_dir)
    server = Server(name, f"127.0.0.1:{broker_port}", proc.pid, data_dir, log_path)
    write_state(data_dir, state_of(server, controller_port=controller_port, **listener))
    timings["ready_s"] = round(
        wait_ready(
            name,
            proc,
            probe,
            timeout_s,
            log_path=log_path,
            fix=f"{fix_java}; read {log_path}; a broken data dir can be removed ({data_dir})",
        ),
        3,
    )
    write_state(
        data_dir, state_of(server, controller_port=controller_port, timings=timings, **listener)
    )
    return server


def proxied_listener(server: Server) -> str:
    """The listener a proxy forwards to (``advertised_through``): "127.0.0.1:PORT"."""
    state = server_status(server.data_dir)
    if "proxied_port" not in state:
        raise ServerError("kafka", "was started without advertised_through: no proxied listener")
    return f"127.0.0.1:{int(state['proxied_port'])}"
