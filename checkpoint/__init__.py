"""The checkpoint client (ADR-18 to ADR-21): the library workloads use so that their work
survives a reclaim because their state does.

What it owns: saving a generation (sealed parts first, the manifest last: `client`), restoring
the newest complete one, listing and pruning by retention (`retention`); the workload's bucket
(`store`) and key (`keys`: a data key per generation from OpenBao transit under the workload's
own key, so the platform can neither read nor decrypt), the sealing format (`sealing`) and the
manifest (`manifest`); the periodic interval as a loss budget (`interval`) and when to save
(`periodic`); the node-local channel to the agent (`channel`: notices in, ``written`` out);
restart semantics, effects on completion and quarantine (`restart`); provisioning a workload's
key (`provision`); and the framework integrations, built once (`integrations`: PyTorch, Spark,
Slurm).

What it may import: of the project, `schemas` only (the channel's wire model); boto3,
botocore and cryptography, and in `integrations` the framework it integrates. It imports
nothing of the control plane: a workload installs it (``pip install spotcap[checkpoint]``) and
talks to its node's agent and its own bucket, never to the control plane. Who calls it: the
workloads, and the integrations' entry points.
"""

from checkpoint.channel import AgentChannel
from checkpoint.client import (
    CheckpointClient,
    Generation,
    NoValidGenerationError,
    PruneReport,
    Restored,
)
from checkpoint.interval import IntervalDecision, LossBudget, PoolRisk, periodic_interval
from checkpoint.keys import KeyAccessError, TransitKeys
from checkpoint.periodic import Checkpointer
from checkpoint.restart import UnitQuarantinedError, UnitRunner
from checkpoint.retention import Retention
from checkpoint.store import S3Bucket, StoreAccessDeniedError, StoreError, bucket_for

__all__ = [
    "AgentChannel",
    "CheckpointClient",
    "Checkpointer",
    "Generation",
    "IntervalDecision",
    "KeyAccessError",
    "LossBudget",
    "NoValidGenerationError",
    "PoolRisk",
    "PruneReport",
    "Restored",
    "Retention",
    "S3Bucket",
    "StoreAccessDeniedError",
    "StoreError",
    "TransitKeys",
    "UnitQuarantinedError",
    "UnitRunner",
    "bucket_for",
    "periodic_interval",
]
