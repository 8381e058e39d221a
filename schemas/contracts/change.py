"""A change of authority (ADR-30): what raising a floor or a spending cap, or changing the
fallback policy, is, and the bytes its two signers sign.

Data only, shared by the two places that hold such a change to two signatures: the contract
compiler (``contracts.approvals``, from the contract file) and the deciders
(``streams.deciders.authority``, from the ``contract_published`` event). Both compute the same
statement from what they read, so a signature made for the compiler is checked again, byte for
byte, where the authority is spent.

The statement names the workload, the contract version, the SHA-256 of the contract file as
written, and the authority the version holds (floor, daily cap, approver and approver key):
a signature covers exactly one version of one file and the authority it declares, so an event
that carries a signed version's hash with a higher floor does not verify.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from schemas.contracts.units import format_eur

CHANGE_FORMAT = "spotcap.contract-change/v2"


@dataclass(frozen=True, slots=True)
class Authority:
    """What one version of a workload's contract holds of its authority."""

    floor_vcpu: int = 0
    spend_cap_eur_micros: int = 0
    approver: str | None = None
    approver_key: str | None = None

    def __post_init__(self) -> None:
        # The event spells "no approver" as "": one spelling for the comparison and statement.
        if self.approver == "":
            object.__setattr__(self, "approver", None)
        if self.approver_key == "":
            object.__setattr__(self, "approver_key", None)


def change_statement(
    workload: str, version: int, source_sha256: str, authority: Authority
) -> bytes:
    """The canonical bytes the owner and a higher authority sign for one contract version."""
    return json.dumps(
        {
            "format": CHANGE_FORMAT,
            "workload": workload,
            "version": version,
            "source_sha256": source_sha256,
            "floor_vcpu": authority.floor_vcpu,
            "spend_cap_eur_micros": authority.spend_cap_eur_micros,
            "approver": authority.approver,
            "approver_key": authority.approver_key,
        },
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=True,
    ).encode("ascii")


def authority_changes(
    previous: Authority | None, now: Authority
) -> list[tuple[tuple[str, ...], str]]:
    """The changes of authority from `previous` (None: a new workload) to `now`: (the
    contract field, what changed), each needing two signatures. Lowering needs none."""
    before = previous or Authority()
    found: list[tuple[tuple[str, ...], str]] = []
    if now.floor_vcpu > before.floor_vcpu:
        found.append(
            (("floor_vcpu",),
             f"raises the floor from {before.floor_vcpu} to {now.floor_vcpu} vCPU"),
        )  # fmt: skip
    if now.spend_cap_eur_micros > before.spend_cap_eur_micros:
        found.append(
            (("fallback", "spend_cap_per_day_eur_micros"),
             f"raises the daily spend cap from {format_eur(before.spend_cap_eur_micros)} to "
             f"{format_eur(now.spend_cap_eur_micros)}"),
        )  # fmt: skip
    if (now.approver, now.approver_key) != (before.approver, before.approver_key) and (
        previous is not None or now.approver is not None
    ):
        found.append((("fallback", "approver"), "changes the fallback policy's approver"))
    return found


__all__ = ["CHANGE_FORMAT", "Authority", "authority_changes", "change_statement"]
