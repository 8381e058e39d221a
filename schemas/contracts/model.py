"""The interruption contract (ADR-01): as written in YAML, and as resolved against its tier.

Two frozen pydantic models, both refusing unknown fields:

* `ContractDocument` is the file as the author wrote it (``apiVersion: spotcap/v1``,
  ``kind: InterruptionContract``). Fields a tier can default are optional here; units are
  parsed (``"90s"``, ``"2 GiB"``, ``"EUR 120.50"``, ``"1/day"``) into the unit the field's name
  carries.
* `Contract` is the resolved contract every other part reads: every field explicit, in base
  units, and consistent (see `consistency_findings`). It is built by `resolve.resolve`.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    field_validator,
    model_validator,
)

from schemas.contracts.errors import ContractFindingsError, Finding
from schemas.contracts.tiers import CheckpointMethod
from schemas.contracts.units import (
    MAX_DURATION_S,
    MAX_EUR_MICROS,
    MAX_PRIORITY,
    MAX_SIZE_BYTES,
    MAX_VCPU,
    MAX_VERSION,
    FixableError,
    parse_duration_s,
    parse_eur_micros,
    parse_rate_per_h,
    parse_size_bytes,
)
from schemas.events import RestartSemantics, Scheduler, Tier

API_VERSION = "spotcap/v1"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
KIND = "InterruptionContract"
WORKLOAD_ID_MAX = 63


def to_epoch_us(moment: datetime) -> int:
    """Microseconds since the epoch of a timezone-aware moment, exactly."""
    return (moment - _EPOCH) // timedelta(microseconds=1)


def parse_epoch_us(text: str) -> int:
    """An ISO 8601 timestamp with a timezone (``2026-11-30T09:00:00Z``) as microseconds since
    the epoch; ValueError for anything else (no timezone: which moment is meant is unknown)."""
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if moment.tzinfo is None:
        raise ValueError(f"{text!r} names no timezone")
    return to_epoch_us(moment)


def _check_workload_id(value: str) -> str:
    # It becomes a Kubernetes label value, a ConfigMap key and a Slurm comment token.
    ok = (
        0 < len(value) <= WORKLOAD_ID_MAX
        and value[0].isalnum()
        and value[-1].isalnum()
        and all(c.islower() or c.isdigit() or c == "-" for c in value)
        and value.isascii()
    )
    if not ok:
        raise FixableError(
            f"{value!r} is not a workload id",
            "use 1-63 lower-case letters, digits and '-', starting and ending with a letter or "
            "digit (it is used as a Kubernetes label value and a Slurm comment)",
        )
    return value


def _check_not_blank(value: str) -> str:
    if not value.strip():
        raise FixableError("is empty", "write a name")
    return value


WorkloadId = Annotated[str, AfterValidator(_check_workload_id)]
Name = Annotated[str, AfterValidator(_check_not_blank)]
DurationS = Annotated[int, BeforeValidator(parse_duration_s)]
SizeBytes = Annotated[int, BeforeValidator(parse_size_bytes)]
EurMicros = Annotated[int, BeforeValidator(parse_eur_micros)]
ApproverKey = Annotated[str, Field(pattern=r"^[A-Za-z0-9+/]{43}=$")]
"""An Ed25519 public key: the base64 of its 32 raw bytes (what ``contracts keygen`` prints)."""
RatePerH = Annotated[float, BeforeValidator(parse_rate_per_h), Field(allow_inf_nan=False)]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


# -- as written -------------------------------------------------------------------------------


class CheckpointDocument(_Frozen):
    """``checkpoint:`` as written; absent fields come from the tier."""

    method: CheckpointMethod | None = None
    size_bytes: SizeBytes | None = Field(default=None, ge=0, le=MAX_SIZE_BYTES)
    periodic_interval_s: DurationS | None = Field(default=None, gt=0, le=MAX_DURATION_S)


class RestartDocument(_Frozen):
    """``restart:`` as written (ADR-21)."""

    semantics: RestartSemantics | None = None
    effects_on_completion_only: StrictBool | None = None


class FallbackDocument(_Frozen):
    """``fallback:`` as written: the authority to spend on guaranteed capacity (ADR-23)."""

    spend_cap_per_day_eur_micros: EurMicros | None = Field(default=None, ge=0, le=MAX_EUR_MICROS)
    approver: Name | None = None
    approver_key: ApproverKey | None = None


_SECTIONS = ("checkpoint", "restart", "fallback")


class ContractDocument(_Frozen):
    """One contract file as its author wrote it."""

    api_version: Literal["spotcap/v1"] = Field(alias="apiVersion")
    kind: Literal["InterruptionContract"]
    workload: WorkloadId
    version: StrictInt = Field(ge=1, le=MAX_VERSION)
    owner: Name
    scheduler: Scheduler
    tier: Tier
    target_vcpu: StrictInt = Field(gt=0, le=MAX_VCPU)
    description: str | None = None
    reviewed_by: Name | None = None
    drain_budget_s: DurationS | None = Field(default=None, gt=0, le=MAX_DURATION_S)
    checkpoint: CheckpointDocument | None = None
    restart: RestartDocument | None = None
    tolerated_interruptions_per_h: RatePerH | None = Field(default=None, ge=0)
    floor_vcpu: StrictInt | None = Field(default=None, ge=0, le=MAX_VCPU)
    deadline: AwareDatetime | None = None
    priority: StrictInt | None = Field(default=None, ge=0, le=MAX_PRIORITY)
    fallback: FallbackDocument | None = None
    proactive_drain_on_advisory: StrictBool | None = None

    @field_validator(*_SECTIONS, mode="before")
    @classmethod
    def _section_not_empty(cls, value: object) -> object:
        # `checkpoint:` with nothing under it is null in YAML; taking the tier's defaults for it
        # would silently ignore what the author meant to write.
        if value is None:
            raise FixableError(
                "is empty (null)",
                "write the fields, or leave the section out to take the tier defaults",
            )
        return value


# -- resolved ---------------------------------------------------------------------------------


class Checkpoint(_Frozen):
    """How the workload checkpoints (ADR-18, ADR-20)."""

    method: CheckpointMethod
    size_bytes: int = Field(ge=0)  # the final checkpoint written on notice, per instance
    periodic_interval_s: int | None = Field(default=None, gt=0)


class Restart(_Frozen):
    """What happens after a loss, and whether effects wait for completion (ADR-21)."""

    semantics: RestartSemantics
    effects_on_completion_only: bool


class FallbackAuthority(_Frozen):
    """Automatic fallback spend per day (UTC), and who is paged beyond it (ADR-23)."""

    spend_cap_per_day_eur_micros: int = Field(ge=0)
    approver: str | None = None
    approver_key: str | None = None
    """The approver's Ed25519 public key (base64 of 32 bytes): only approvals it signs count
    (ADR-30). None: no approval beyond the cap is accepted."""


class Contract(_Frozen):
    """A resolved interruption contract: every field explicit, in base units, consistent."""

    workload: str
    version: int = Field(ge=1)
    owner: str
    scheduler: Scheduler
    tier: Tier
    target_vcpu: int = Field(gt=0)
    drain_budget_s: int = Field(gt=0)
    checkpoint: Checkpoint
    restart: Restart
    tolerated_interruptions_per_h: float = Field(ge=0, allow_inf_nan=False)
    floor_vcpu: int = Field(ge=0)
    deadline: datetime | None = None
    priority: int = Field(ge=0)
    fallback: FallbackAuthority
    proactive_drain_on_advisory: bool
    reviewed_by: str | None = None
    description: str | None = None

    @model_validator(mode="after")
    def _consistent(self) -> Contract:
        findings = consistency_findings(self)
        if findings:
            raise ContractFindingsError(findings)
        return self

    @property
    def checkpoint_on_notice(self) -> bool:
        """Whether a final checkpoint is written when a notice arrives."""
        return self.checkpoint.method != "none"

    @property
    def reclaimable_vcpu(self) -> int:
        """The part of the target placed on reclaimable capacity (the floor is not)."""
        return self.target_vcpu - self.floor_vcpu

    @property
    def deadline_at_us(self) -> int | None:
        if self.deadline is None:
            return None
        return to_epoch_us(self.deadline)


def consistency_findings(contract: Contract) -> list[Finding]:
    """Combinations of fields that cannot all be honoured, whatever the platform has."""
    found: list[Finding] = []
    checkpoint = contract.checkpoint
    if contract.floor_vcpu > contract.target_vcpu:
        found.append(
            Finding(
                "consistency",
                ("floor_vcpu",),
                f"the floor ({contract.floor_vcpu} vCPU) is larger than target_vcpu "
                f"({contract.target_vcpu})",
                f"set floor_vcpu to at most {contract.target_vcpu}",
            )
        )
    if contract.restart.semantics == "resume" and checkpoint.method == "none":
        found.append(
            Finding(
                "consistency",
                ("restart", "semantics"),
                "resume needs a checkpoint to resume from, but checkpoint.method is none",
                "declare a checkpoint.method, or use restart.semantics requeue or restart",
            )
        )
    if checkpoint.method == "slurm-requeue" and contract.scheduler != "slurm":
        found.append(
            Finding(
                "consistency",
                ("checkpoint", "method"),
                f"slurm-requeue needs scheduler slurm, not {contract.scheduler}",
                "use application, spark or pytorch on Kubernetes, or set scheduler: slurm",
            )
        )
    if checkpoint.method == "none" and checkpoint.size_bytes > 0:
        found.append(
            Finding(
                "consistency",
                ("checkpoint", "size_bytes"),
                "a checkpoint size is declared but checkpoint.method is none",
                "remove checkpoint.size_bytes, or declare the checkpoint.method",
            )
        )
    if checkpoint.method == "none" and checkpoint.periodic_interval_s is not None:
        found.append(
            Finding(
                "consistency",
                ("checkpoint", "periodic_interval_s"),
                "a periodic checkpoint interval is declared but checkpoint.method is none",
                "remove checkpoint.periodic_interval_s, or declare the checkpoint.method",
            )
        )
    if contract.tier == "bespoke" and not contract.reviewed_by:
        found.append(
            Finding(
                "consistency",
                ("reviewed_by",),
                "a bespoke contract must name who reviewed it (ADR-02)",
                "add reviewed_by: <the platform reviewer who approved this contract>",
            )
        )
    return found
