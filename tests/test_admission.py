"""Admission (ADR-04): the Slurm job_submit filter in a real Lua, and the Kyverno policy's logic.

The Lua filter runs in ``lua5.4`` against sample job descriptors, with the ``slurm`` table
stubbed, reading the list the compiler writes. Kyverno cannot run here: its policy is checked
for structure, and its preconditions and deny condition (standard JMESPath) are evaluated with
`jmespath` against sample pod admission requests and the compiler's own ConfigMap. Kyverno's
own variable substitution, context loading and webhook are not exercised.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jmespath
import pytest
import yaml

from contracts import FeasibilityEnv, compile_contracts
from contracts.output import write_outputs
from contracts.published import (
    CONFIGMAP_NAME,
    DEFAULT_NAMESPACE,
    PUBLISHED_CONFIGMAP,
    PUBLISHED_SLURM,
)
from tests.test_contracts import EXAMPLES, REPO, T0_US

ADMISSION = REPO / "infra" / "admission"
FILTER = ADMISSION / "job_submit.lua"
POLICY_FILE = ADMISSION / "kyverno-require-contract.yaml"
SUCCESS, ERROR = 0, -1


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The compiler's outputs for the example contracts (3 on Kubernetes, 3 on Slurm)."""
    files = {p: p.read_text() for p in sorted(EXAMPLES.glob("*.yaml"))}
    result = compile_contracts(files, FeasibilityEnv(), published_at_us=T0_US)
    assert result.ok
    out = tmp_path_factory.mktemp("bundles")
    write_outputs(result, out, signer=None)
    return out


# -- Slurm ------------------------------------------------------------------------------------


def _lua(value: Any) -> str:
    """A Python value as a Lua literal (ASCII strings)."""
    if value is None:
        return "nil"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"[{_lua(k)}] = {_lua(v)}" for k, v in value.items()) + "}"
    raise TypeError(value)


HARNESS = """
local messages = {{}}
slurm = {{
   SUCCESS = 0,
   ERROR = -1,
   log_user = function(fmt, ...) messages[#messages + 1] = string.format(fmt, ...) end,
   log_info = function(fmt, ...) string.format(fmt, ...) end,
}}
dofile({filter})
local rc = {call}
io.write("rc=", tostring(rc), "\\n")
for _, message in ipairs(messages) do io.write("user=", message, "\\n") end
"""

PARTITIONS = {
    "batch": {"name": "batch", "flag_default": 1},
    "reclaimable": {"name": "reclaimable", "flag_default": 0},
    "spot": {"name": "spot", "flag_default": 0},
}


def run_filter(
    tmp_path: Path,
    published: Path,
    job: dict[str, Any],
    *,
    parts: dict[str, Any] | None = None,
    job_rec: dict[str, Any] | None = None,
) -> tuple[int, list[str]]:
    """Run the filter on one job in lua5.4; return its code and the user-visible messages."""
    lua = shutil.which("lua5.4")
    if lua is None:
        pytest.fail(
            "lua5.4 is needed to test infra/admission/job_submit.lua: apt-get install lua5.4"
        )
    parts_lua = _lua(parts if parts is not None else PARTITIONS)
    if job_rec is None:
        call = f"slurm_job_submit({_lua(job)}, {parts_lua}, 1000)"
    else:
        call = f"slurm_job_modify({_lua(job)}, {_lua(job_rec)}, {parts_lua}, 1000)"
    harness = tmp_path / "harness.lua"
    harness.write_text(HARNESS.format(filter=_lua(str(FILTER)), call=call))
    env = {
        "PATH": os.environ.get("PATH", ""),
        "SPOTCAP_PUBLISHED_CONTRACTS": str(published),
        "SPOTCAP_RECLAIMABLE_PARTITIONS": "reclaimable, spot",
    }
    done = subprocess.run(
        [lua, str(harness)], capture_output=True, text=True, env=env, timeout=30, check=False
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    rc = int(lines[0].removeprefix("rc="))
    return rc, [line.removeprefix("user=") for line in lines[1:]]


@pytest.mark.parametrize(
    "job",
    [
        {"partition": "reclaimable", "comment": "spotcap:workload=genomics-align"},
        {"partition": "spot", "comment": "nightly run; spotcap:workload=llm-finetune"},
        {"partition": "reclaimable", "wckey": "thumbnail-backfill"},
        {"partition": "reclaimable", "wckey": "*thumbnail-backfill"},
        {"partition": "reclaimable", "comment": "run 7;spotcap:workload=genomics-align,retry"},
        {
            "partition": "spot",
            "comment": "spotcap:workload=llm-finetune spotcap:workload=llm-finetune",
        },
        {"partition": "batch"},
        {"partition": "batch", "comment": "spotcap:workload=nothing-published"},
        {},
    ],
)
def test_slurm_admits(tmp_path: Path, outputs: Path, job: dict[str, Any]) -> None:
    rc, messages = run_filter(tmp_path, outputs / PUBLISHED_SLURM, job)
    assert (rc, messages) == (SUCCESS, [])


def test_slurm_refuses_a_reclaimable_job_that_names_no_workload(
    tmp_path: Path, outputs: Path
) -> None:
    rc, messages = run_filter(tmp_path, outputs / PUBLISHED_SLURM, {"partition": "reclaimable"})
    assert rc == ERROR
    assert messages == [
        "spotcap: partition reclaimable runs on reclaimable capacity and needs a published "
        "interruption contract: submit with --comment=spotcap:workload=<workload id> "
        "(or --wckey=<workload id>)"
    ]


@pytest.mark.parametrize(
    ("job", "workload", "source"),
    [
        ({"comment": "spotcap:workload=unknown-thing"}, "unknown-thing", "--comment"),
        ({"comment": "spotcap:workload=genomics"}, "genomics", "--comment"),  # a prefix only
        ({"comment": "spotcap:workload=etl-nightly"}, "etl-nightly", "--comment"),  # Kubernetes
        ({"wckey": "api-gateway"}, "api-gateway", "--wckey"),
        # The id runs to whitespace, ';', ',' or the end, and must be published exactly.
        (
            {"comment": "spotcap:workload=genomics-align.other-team"},
            "genomics-align.other-team",
            "--comment",
        ),
        ({"comment": "spotcap:workload=genomics-align_x"}, "genomics-align_x", "--comment"),
        ({"comment": "spotcap:workload=genomics-align/x"}, "genomics-align/x", "--comment"),
        ({"wckey": "genomics-align extra"}, "genomics-align extra", "--wckey"),
    ],
)
def test_slurm_refuses_a_workload_without_a_published_slurm_contract(
    tmp_path: Path, outputs: Path, job: dict[str, Any], workload: str, source: str
) -> None:
    rc, messages = run_filter(tmp_path, outputs / PUBLISHED_SLURM, {"partition": "spot", **job})
    assert rc == ERROR
    assert messages == [
        f"spotcap: workload '{workload}' (from {source}) has no published interruption contract "
        "for Slurm, so it cannot run on partition spot; publish its contract with `spotcap "
        "contracts compile` (scheduler: slurm) or correct the workload id"
    ]


def test_slurm_takes_the_workload_key_only_as_a_word_of_its_own(
    tmp_path: Path, outputs: Path
) -> None:
    job = {"partition": "spot", "comment": "xspotcap:workload=genomics-align"}
    rc, messages = run_filter(tmp_path, outputs / PUBLISHED_SLURM, job)
    assert rc == ERROR
    assert "needs a published interruption contract" in messages[0]


def test_slurm_refuses_a_comment_that_names_two_workloads(tmp_path: Path, outputs: Path) -> None:
    job = {"partition": "spot", "comment": "spotcap:workload=genomics-align spotcap:workload=x"}
    rc, messages = run_filter(tmp_path, outputs / PUBLISHED_SLURM, job)
    assert rc == ERROR
    assert messages == [
        "spotcap: the comment names more than one workload (genomics-align, x); a job on "
        "reclaimable partition spot must name exactly one"
    ]


def test_slurm_checks_every_partition_of_a_list(tmp_path: Path, outputs: Path) -> None:
    rc, messages = run_filter(tmp_path, outputs / PUBLISHED_SLURM, {"partition": "batch,spot"})
    assert rc == ERROR
    assert "partition spot runs on reclaimable capacity" in messages[0]


def test_slurm_uses_the_default_partition_when_none_is_given(tmp_path: Path, outputs: Path) -> None:
    reclaimable_default = {
        "batch": {"name": "batch", "flag_default": 0},
        "reclaimable": {"name": "reclaimable", "flag_default": 1},
    }
    rc, _ = run_filter(tmp_path, outputs / PUBLISHED_SLURM, {}, parts=reclaimable_default)
    assert rc == ERROR


def test_slurm_fails_closed_when_the_published_list_is_missing(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / PUBLISHED_SLURM
    job = {"partition": "reclaimable", "comment": "spotcap:workload=genomics-align"}
    rc, messages = run_filter(tmp_path, missing, job)
    assert rc == ERROR
    assert "cannot be read" in messages[0] and str(missing) in messages[0]
    assert run_filter(tmp_path, missing, {"partition": "batch"}) == (SUCCESS, [])


def test_slurm_checks_a_job_moved_onto_a_reclaimable_partition(
    tmp_path: Path, outputs: Path
) -> None:
    published = outputs / PUBLISHED_SLURM
    named = {"comment": "spotcap:workload=genomics-align"}
    assert run_filter(tmp_path, published, {"partition": "spot"}, job_rec=named) == (SUCCESS, [])
    rc, _ = run_filter(tmp_path, published, {"partition": "spot"}, job_rec={})
    assert rc == ERROR
    assert run_filter(tmp_path, published, {"time_limit": 60}, job_rec={}) == (SUCCESS, [])


@pytest.mark.parametrize(
    "change",
    [
        {"comment": "spotcap:workload=not-published"},
        {"comment": ""},
        {"wckey": "not-published"},
        {"partition": "batch", "comment": "spotcap:workload=not-published"},
    ],
)
def test_slurm_checks_a_renamed_workload_on_a_reclaimable_partition(
    tmp_path: Path, outputs: Path, change: dict[str, Any]
) -> None:
    running = {"partition": "reclaimable", "comment": "", "wckey": "genomics-align"}
    if "comment" in change:
        running = {"partition": "reclaimable", "comment": "spotcap:workload=genomics-align"}
    rc, messages = run_filter(tmp_path, outputs / PUBLISHED_SLURM, change, job_rec=running)
    assert rc == ERROR
    assert messages[0].startswith("spotcap: ")
    assert "partition reclaimable" in messages[0]


def test_slurm_lets_a_job_off_reclaimable_capacity_be_renamed(
    tmp_path: Path, outputs: Path
) -> None:
    published = outputs / PUBLISHED_SLURM
    on_batch = {"partition": "batch", "comment": "spotcap:workload=genomics-align"}
    change = {"comment": "spotcap:workload=not-published"}
    assert run_filter(tmp_path, published, change, job_rec=on_batch) == (SUCCESS, [])
    renamed = {"comment": "spotcap:workload=llm-finetune"}
    on_spot = {"partition": "spot", "comment": "spotcap:workload=genomics-align"}
    assert run_filter(tmp_path, published, renamed, job_rec=on_spot) == (SUCCESS, [])


# -- Kyverno ----------------------------------------------------------------------------------

POLICY = yaml.safe_load(POLICY_FILE.read_text())
_VARIABLE = re.compile(r"\{\{(.+?)\}\}", re.DOTALL)


def substitute(value: Any, context: dict[str, Any]) -> Any:
    """Kyverno-style variables: a value that is one ``{{ }}`` keeps the JMESPath result's type."""
    if not isinstance(value, str):
        return value
    whole = _VARIABLE.fullmatch(value.strip())
    if whole:
        return jmespath.search(whole.group(1).strip(), context)
    return _VARIABLE.sub(lambda m: str(jmespath.search(m.group(1).strip(), context)), value)


def holds(condition: dict[str, Any], context: dict[str, Any]) -> bool:
    key = substitute(condition["key"], context)
    value = substitute(condition["value"], context)
    operator = condition["operator"]
    if operator == "Equals":
        return bool(key == value)
    if operator == "NotEquals":
        return bool(key != value)
    if operator == "AnyIn":
        keys = key if isinstance(key, list) else [key]
        return any(k in value for k in keys)
    if operator == "GreaterThan":
        return float(key) > float(value)
    if operator == "AnyNotIn":
        keys = key if isinstance(key, list) else [key]
        return any(k not in value for k in keys)
    raise AssertionError(f"the policy uses {operator}, which this evaluator does not know")


def block_holds(block: dict[str, Any], context: dict[str, Any]) -> bool:
    """Kyverno conditions: every one of ``all`` and at least one of ``any``."""
    assert set(block) <= {"all", "any"}
    every = all(holds(c, context) for c in block.get("all", []))
    some = any(holds(c, context) for c in block["any"]) if "any" in block else True
    return every and some


DAEMONSET_CONTROLLER = "system:serviceaccount:kube-system:daemon-set-controller"


def admit(
    pod: dict[str, Any],
    configmap: dict[str, Any],
    operation: str = "CREATE",
    *,
    username: str = "alice",
    old: dict[str, Any] | None = None,
) -> tuple[bool, str]:
    """The policy's verdict on an AdmissionReview of `pod` by `username`: (allowed, message)."""
    (rule,) = POLICY["spec"]["rules"]
    (match,) = rule["match"]["any"]
    if pod["kind"] not in match["resources"]["kinds"]:
        return True, ""
    namespace = pod["metadata"].get("namespace", "default")
    if any(namespace in e["resources"].get("namespaces", []) for e in rule["exclude"]["any"]):
        return True, ""
    (source,) = rule["context"]
    assert source["configMap"] == {"name": CONFIGMAP_NAME, "namespace": DEFAULT_NAMESPACE}
    context = {
        "request": {
            "operation": operation,
            "namespace": namespace,
            "userInfo": {"username": username},
            "object": pod,
            "oldObject": old if old is not None else (pod if operation == "UPDATE" else None),
        },
        source["name"]: configmap,
    }
    if not block_holds(rule["preconditions"], context):
        return True, ""
    if block_holds(rule["validate"]["deny"]["conditions"], context):
        return False, " ".join(substitute(rule["validate"]["message"], context).split())
    return True, ""


def pod(
    name: str = "web-1",
    labels: dict[str, str] | None = None,
    namespace: str = "apps",
    **spec: Any,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if labels is not None:
        metadata["labels"] = labels
    spec.setdefault("containers", [{"name": "app", "image": "registry.local/app:1"}])
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


RECLAIMABLE: dict[str, Any] = {"nodeSelector": {"spotcap.io/capacity": "reclaimable"}}
TOLERATES: dict[str, Any] = {
    "tolerations": [{"key": "spotcap.io/reclaimable", "operator": "Exists", "effect": "NoSchedule"}]
}


def affinity(operator: str, values: list[str] | None = None) -> dict[str, Any]:
    term: dict[str, Any] = {"key": "spotcap.io/capacity", "operator": operator}
    if operator in ("In", "NotIn"):
        term["values"] = ["reclaimable"] if values is None else values
    zone = {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["hall1"]}
    required = {"nodeSelectorTerms": [{"matchExpressions": [zone]}, {"matchExpressions": [term]}]}
    return {
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}
    }


@pytest.fixture(scope="module")
def configmap(outputs: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((outputs / PUBLISHED_CONFIGMAP).read_text())
    return loaded


def test_the_policy_is_an_enforcing_fail_closed_validate_policy() -> None:
    assert POLICY["apiVersion"] == "kyverno.io/v1"
    assert POLICY["kind"] == "ClusterPolicy"
    spec = POLICY["spec"]
    assert spec["validationFailureAction"] == "Enforce"
    assert spec["failurePolicy"] == "Fail"
    assert spec["background"] is False
    (rule,) = spec["rules"]
    assert rule["match"]["any"][0]["resources"]["kinds"] == ["Pod"]
    assert "deny" in rule["validate"] and rule["validate"]["message"]


def test_the_compiler_writes_the_configmap_the_policy_reads(configmap: dict[str, Any]) -> None:
    assert configmap["kind"] == "ConfigMap"
    assert configmap["metadata"]["name"] == CONFIGMAP_NAME
    assert set(configmap["data"]) == {"api-gateway", "ci-runners", "etl-nightly"}


@pytest.mark.parametrize(
    "candidate",
    [
        pod(labels={"spotcap.io/workload": "api-gateway"}, **RECLAIMABLE),
        pod(labels={"spotcap.io/workload": "etl-nightly"}, **TOLERATES),
        pod(labels={"spotcap.io/workload": "ci-runners"}, **affinity("In")),
        pod(),  # no reclaimable capacity asked for: no contract needed
        pod(nodeSelector={"spotcap.io/capacity": "guaranteed"}),
        pod(**affinity("In", ["guaranteed", "on-demand"])),  # positively confined elsewhere
        pod(namespace="kube-system", **RECLAIMABLE),
        pod(tolerations=[{"key": "node.kubernetes.io/not-ready", "operator": "Exists"}]),
    ],
)
def test_kyverno_admits(candidate: dict[str, Any], configmap: dict[str, Any]) -> None:
    assert admit(candidate, configmap) == (True, "")


def test_a_daemonset_pod_is_node_infrastructure(configmap: dict[str, Any]) -> None:
    daemon = pod(**TOLERATES)
    daemon["metadata"]["ownerReferences"] = [{"kind": "DaemonSet", "name": "cni", "uid": "1"}]
    assert admit(daemon, configmap, username=DAEMONSET_CONTROLLER) == (True, "")


def test_an_owner_reference_does_not_make_a_daemonset_pod(configmap: dict[str, Any]) -> None:
    # Any pod creator can write ownerReferences; only the API server sets userInfo.
    forged = pod(**TOLERATES)
    forged["metadata"]["ownerReferences"] = [{"kind": "DaemonSet", "name": "cni", "uid": "1"}]
    assert admit(forged, configmap)[0] is False


@pytest.mark.parametrize(
    ("candidate", "label"),
    [
        (pod(**RECLAIMABLE), ""),
        (pod(labels={"team": "web"}, **TOLERATES), ""),
        (pod(**affinity("In")), ""),
        (pod(tolerations=[{"operator": "Exists"}]), ""),  # tolerates every taint
        (pod(tolerations=[{"key": "", "operator": "Exists"}]), ""),
        (pod(**affinity("NotIn", ["guaranteed"])), ""),
        (pod(**affinity("NotIn")), ""),  # also matches nodes without the label
        (pod(**affinity("Exists")), ""),
        (pod(**affinity("DoesNotExist")), ""),
        (pod(**affinity("Gt", None)), ""),
        (pod(nodeName="reclaimable-node-7"), ""),  # skips the scheduler
        (pod(labels={"spotcap.io/workload": "nobody"}, nodeName="node-7"), "nobody"),
        (pod(labels={"spotcap.io/workload": "nobody"}, **RECLAIMABLE), "nobody"),
        (pod(labels={"spotcap.io/workload": "llm-finetune"}, **RECLAIMABLE), "llm-finetune"),
    ],
)
def test_kyverno_refuses(candidate: dict[str, Any], label: str, configmap: dict[str, Any]) -> None:
    allowed, message = admit(candidate, configmap)
    assert not allowed
    assert message.startswith("Pod web-1 targets reclaimable capacity")
    assert f"spotcap.io/workload label ('{label}') names none" in message
    assert "spotcap contracts compile" in message


def test_kyverno_refuses_everything_reclaimable_when_nothing_is_published() -> None:
    empty: dict[str, Any] = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}, "data": None}
    candidate = pod(labels={"spotcap.io/workload": "api-gateway"}, **RECLAIMABLE)
    assert admit(candidate, empty)[0] is False


def test_kyverno_checks_updates_too(configmap: dict[str, Any]) -> None:
    before = pod()
    tolerating = pod(**TOLERATES)
    assert admit(tolerating, configmap, operation="UPDATE", old=before)[0] is False
    gated = pod(schedulingGates=[{"name": "example.com/quota"}])
    selecting = pod(schedulingGates=[{"name": "example.com/quota"}], **affinity("Exists"))
    assert admit(selecting, configmap, operation="UPDATE", old=gated)[0] is False
    published = pod(labels={"spotcap.io/workload": "api-gateway"}, **TOLERATES)
    assert admit(published, configmap, operation="UPDATE", old=before) == (True, "")
    assert admit(tolerating, configmap, operation="DELETE") == (True, "")


def test_kyverno_leaves_bound_and_terminating_pods_alone_on_update(
    configmap: dict[str, Any],
) -> None:
    # Every scheduled pod has spec.nodeName; only a pod created with it skipped the scheduler.
    bound = pod(nodeName="node-7")
    assert admit(bound, configmap, operation="UPDATE") == (True, "")
    terminating = pod(**TOLERATES)
    terminating["metadata"]["deletionTimestamp"] = "2024-05-01T00:00:00Z"
    assert admit(terminating, configmap, operation="UPDATE") == (True, "")
    # deletionTimestamp is read from the stored object, never from the one submitted.
    assert admit(terminating, configmap, operation="UPDATE", old=pod())[0] is False
