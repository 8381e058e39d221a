"""Admission (ADR-04) in the real servers: work without a published contract is refused by the
session's kube-apiserver, running infra/admission/validating-admission-policy.yaml (CEL, built
into the server), and by the session's slurmctld, loading infra/admission/job_submit.lua
(``JobSubmitPlugins=lua``). The published lists are the compiler's own outputs for the example
contracts; the pod cases are tests/test_admission.py's, where the Kyverno policy's logic meets
the same ones, so the two policies are held to one behaviour.

The session's kube-apiserver is shared, so the policy's binding is narrowed to namespaces
labelled for this module (kube-system too, to show the policy's own exemption of it): a pod
bound to a node elsewhere (the drain tests') stays out of its reach.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from contracts.published import (
    CONFIGMAP_NAME,
    DEFAULT_NAMESPACE,
    PUBLISHED_CONFIGMAP,
    PUBLISHED_SLURM,
)
from infra import servers
from tests import kube_support as kube
from tests.test_admission import (  # the cases the Kyverno policy is held to
    DAEMONSET_CONTROLLER,
    RECLAIMABLE,
    TOLERATES,
    affinity,
    outputs,
    pod,
)

__all__ = ["outputs"]  # a fixture, used by name

POLICY_FILE = kube.ADMISSION / "validating-admission-policy.yaml"
SCOPE_LABEL = "spotcap.io/admission-test"


@dataclass(frozen=True)
class Admission:
    api: k8s.ApiClient
    namespace: str
    refused_when_unpublished: str
    """What the server said while the ConfigMap did not exist yet (fail closed)."""


def _create(api: k8s.ApiClient, candidate: dict[str, Any], namespace: str) -> None:
    """A dry-run create: admission runs in full, nothing is stored."""
    ns = candidate["metadata"].get("namespace", namespace)
    if ns == "apps":  # the shared cases' namespace: this module's own instead
        ns = namespace
    body = {**candidate, "metadata": {**candidate["metadata"], "namespace": ns}}
    kube.core(api).create_namespaced_pod(ns, body, dry_run="All")


def _refusal(api: k8s.ApiClient, candidate: dict[str, Any], namespace: str) -> str | None:
    try:
        _create(api, candidate, namespace)
    except ApiException as error:
        # 403 for a denial; 422 when the binding cannot find its parameter (the ConfigMap).
        if error.status in (403, 422):
            return str(yaml.safe_load(str(error.body))["message"])
        raise
    return None


@pytest.fixture(scope="module")
def admission(kubernetes: servers.Server, outputs: Path) -> Iterator[Admission]:
    """The policy and its binding applied (narrowed to this module's namespaces) and in force,
    first with nothing published, then with the compiler's ConfigMap."""
    api = kube.admin(kubernetes)
    scope = uuid.uuid4().hex[:8]
    namespace = kube.namespace(api, kube.unique("apps"), {SCOPE_LABEL: scope})
    v1 = kube.core(api)
    v1.patch_namespace("kube-system", {"metadata": {"labels": {SCOPE_LABEL: scope}}})
    try:
        v1.create_namespaced_service_account("kube-system", {"metadata": {"name": "default"}})
    except ApiException as error:
        if error.status != 409:
            raise
    policy, binding = yaml.safe_load_all(POLICY_FILE.read_text())
    binding["metadata"]["name"] += f"-{scope}"
    binding["spec"]["matchResources"] = {"namespaceSelector": {"matchLabels": {SCOPE_LABEL: scope}}}
    admissions = k8s.AdmissionregistrationV1Api(api)
    try:
        admissions.create_validating_admission_policy(policy)
    except ApiException as error:
        if error.status != 409:
            raise
    admissions.create_validating_admission_policy_binding(binding)
    labelled = pod(labels={"spotcap.io/workload": "api-gateway"}, **RECLAIMABLE)
    unpublished = kube.wait_until(
        lambda: _refusal(api, labelled, namespace), 60, "the admission policy to be in force"
    )
    configmap = yaml.safe_load((outputs / PUBLISHED_CONFIGMAP).read_text())
    try:
        v1.create_namespace({"metadata": {"name": DEFAULT_NAMESPACE}})
    except ApiException as error:
        if error.status != 409:
            raise
    v1.create_namespaced_config_map(DEFAULT_NAMESPACE, configmap)
    kube.wait_until(
        lambda: _refusal(api, labelled, namespace) is None, 60, "the published contracts to count"
    )
    try:
        yield Admission(api, namespace, unpublished)
    finally:
        admissions.delete_validating_admission_policy_binding(binding["metadata"]["name"])
        v1.delete_namespaced_config_map(CONFIGMAP_NAME, DEFAULT_NAMESPACE)
        api.close()  # type: ignore[no-untyped-call]


def test_the_api_server_fails_closed_while_nothing_is_published(admission: Admission) -> None:
    assert "no params found" in admission.refused_when_unpublished


@pytest.mark.parametrize(
    "candidate",
    [
        pod(labels={"spotcap.io/workload": "api-gateway"}, **RECLAIMABLE),
        pod(labels={"spotcap.io/workload": "etl-nightly"}, **TOLERATES),
        pod(labels={"spotcap.io/workload": "ci-runners"}, **affinity("In")),
        pod(labels={"spotcap.io/workload": "ci-runners"}, nodeName="reclaimable-node-7"),
        pod(),  # no reclaimable capacity asked for: no contract needed
        pod(nodeSelector={"spotcap.io/capacity": "guaranteed"}),
        pod(**affinity("In", ["guaranteed", "on-demand"])),  # positively confined elsewhere
        pod(namespace="kube-system", **RECLAIMABLE),
        pod(tolerations=[{"key": "node.kubernetes.io/not-ready", "operator": "Exists"}]),
    ],
)
def test_the_api_server_admits(candidate: dict[str, Any], admission: Admission) -> None:
    assert _refusal(admission.api, candidate, admission.namespace) is None


@pytest.mark.parametrize(
    ("candidate", "label"),
    [
        (pod(**RECLAIMABLE), ""),
        (pod(labels={"team": "web"}, **TOLERATES), ""),
        (pod(**affinity("In")), ""),
        (pod(tolerations=[{"operator": "Exists"}]), ""),  # tolerates every taint
        (pod(**affinity("NotIn", ["guaranteed"])), ""),
        (pod(**affinity("NotIn")), ""),  # also matches nodes without the label
        (pod(**affinity("Exists")), ""),
        (pod(**affinity("DoesNotExist")), ""),
        (pod(nodeName="reclaimable-node-7"), ""),  # skips the scheduler
        (pod(labels={"spotcap.io/workload": "nobody"}, nodeName="node-7"), "nobody"),
        (pod(labels={"spotcap.io/workload": "nobody"}, **RECLAIMABLE), "nobody"),
        (pod(labels={"spotcap.io/workload": "llm-finetune"}, **RECLAIMABLE), "llm-finetune"),
    ],
)
def test_the_api_server_refuses(
    candidate: dict[str, Any], label: str, admission: Admission
) -> None:
    message = _refusal(admission.api, candidate, admission.namespace)
    assert message is not None
    assert "pod web-1 targets reclaimable capacity" in message
    assert f"spotcap.io/workload label ('{label}') names none" in message
    assert "spotcap contracts compile" in message


def test_only_the_daemonset_controller_itself_is_exempt(
    kubernetes: servers.Server, admission: Admission
) -> None:
    forged = pod(**TOLERATES)
    forged["metadata"]["ownerReferences"] = [
        {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "cni", "uid": str(uuid.uuid4())}
    ]
    assert _refusal(admission.api, forged, admission.namespace) is not None
    controller = kube.admin(kubernetes)  # the API server sets userInfo: impersonate it
    controller.set_default_header("Impersonate-User", DAEMONSET_CONTROLLER)  # type: ignore[no-untyped-call]
    controller.set_default_header("Impersonate-Group", "system:masters")  # type: ignore[no-untyped-call]
    try:
        assert _refusal(controller, forged, admission.namespace) is None
    finally:
        controller.close()  # type: ignore[no-untyped-call]


def test_the_api_server_checks_updates_but_not_pods_being_deleted(admission: Admission) -> None:
    api, ns = admission.api, admission.namespace
    v1 = kube.core(api)
    plain = pod(name="plain", namespace=ns)
    plain["metadata"]["finalizers"] = ["spotcap.io/test-hold"]  # keeps it while deleted
    v1.create_namespaced_pod(ns, plain)
    tolerate = {"spec": {"tolerations": TOLERATES["tolerations"]}}
    with pytest.raises(ApiException) as error:
        v1.patch_namespaced_pod("plain", ns, tolerate)
    assert error.value.status == 403 and "targets reclaimable capacity" in str(error.value.body)
    v1.delete_namespaced_pod("plain", ns)  # stays, terminating, until its finalizer goes
    v1.patch_namespaced_pod("plain", ns, tolerate)  # not re-checked
    v1.patch_namespaced_pod("plain", ns, {"metadata": {"finalizers": None}})


# -- Slurm ------------------------------------------------------------------------------------


def _sbatch(slurm: servers.Server, *options: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SLURM_CONF": str(servers.slurm_conf(slurm))}
    return subprocess.run(
        ["sbatch", "--parsable", "--hold", "-o", "/dev/null", *options, "--wrap", "sleep 60"],
        env=env, capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip


@pytest.fixture
def slurmctld(slurm: servers.Server, outputs: Path) -> Iterator[servers.Server]:
    """The session's Slurm, with the compiler's list of published contracts in place; the
    jobs a test submitted are cancelled after it."""
    shutil.copyfile(outputs / PUBLISHED_SLURM, servers.published_contracts(slurm))
    yield slurm
    env = {**os.environ, "SLURM_CONF": str(servers.slurm_conf(slurm))}
    subprocess.run(["scancel", "--user=root"], env=env, timeout=30, check=True)


@pytest.mark.parametrize(
    "options",
    [
        ("-p", "reclaimable", "--comment=spotcap:workload=genomics-align"),
        ("-p", "reclaimable", "--comment=nightly; spotcap:workload=llm-finetune"),
        ("-p", "reclaimable", "--wckey=thumbnail-backfill"),
        ("-p", "batch"),  # not reclaimable capacity: no contract needed
        ("-p", "batch", "--comment=spotcap:workload=nothing-published"),
    ],
)
def test_slurmctld_admits(slurmctld: servers.Server, options: tuple[str, ...]) -> None:
    done = _sbatch(slurmctld, *options)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().split(";")[0].isdigit()


@pytest.mark.parametrize(
    ("options", "said"),
    [
        (("-p", "reclaimable"), "needs a published interruption contract"),
        (("-p", "batch,reclaimable"), "needs a published interruption contract"),
        (
            ("-p", "reclaimable", "--comment=spotcap:workload=etl-nightly"),  # a Kubernetes one
            "workload 'etl-nightly' (from --comment) has no published interruption contract",
        ),
        (
            ("-p", "reclaimable", "--comment=spotcap:workload=a spotcap:workload=b"),
            "the comment names more than one workload (a, b)",
        ),
    ],
)
def test_slurmctld_refuses(slurmctld: servers.Server, options: tuple[str, ...], said: str) -> None:
    done = _sbatch(slurmctld, *options)
    assert done.returncode != 0 and done.stdout == ""
    assert "sbatch: error: spotcap: " in done.stderr and said in done.stderr


def test_slurmctld_checks_a_job_moved_onto_reclaimable_capacity(slurmctld: servers.Server) -> None:
    env = {**os.environ, "SLURM_CONF": str(servers.slurm_conf(slurmctld))}
    job = _sbatch(slurmctld, "-p", "batch").stdout.strip()
    moved = subprocess.run(
        ["scontrol", "update", f"jobid={job}", "partition=reclaimable"],
        env=env, capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert moved.returncode != 0
    shown = subprocess.run(
        ["scontrol", "show", "job", job, "-o"],
        env=env, capture_output=True, text=True, timeout=30, check=True,
    ).stdout  # fmt: skip
    assert "Partition=batch " in shown


def test_slurmctld_fails_closed_when_the_published_list_cannot_be_read(
    slurmctld: servers.Server,
) -> None:
    published = servers.published_contracts(slurmctld)
    aside = published.with_suffix(".aside")
    published.rename(aside)
    try:
        done = _sbatch(slurmctld, "-p", "reclaimable", "--comment=spotcap:workload=genomics-align")
    finally:
        aside.rename(published)
    assert done.returncode != 0
    assert "the list of published contracts cannot be read" in done.stderr
