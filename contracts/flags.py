"""What `spotcap contracts compile` refuses before it compiles: the rules of its flags.

Unchecked (no pool catalogue) or unsigned contracts are never published, and bundles are
written signed unless asked otherwise. Each refusal is a `FlagRefusal`: the sentence saying
what is wrong and the one saying how to fix it.
"""

from __future__ import annotations

from typing import NamedTuple

from contracts.feasibility import RULES, RULES_NEEDING_POOLS

GIVE_A_KEY = (
    "give --key KEYFILE (create one with `spotcap contracts keygen --out FILE`) or "
    "--transit-key NAME"
)


class FlagRefusal(NamedTuple):
    """Why a compile's flags are refused, and how to fix them."""

    message: str
    hint: str = ""


NO_SIGNER = FlagRefusal(
    "no --key or --transit-key: bundles must be signed for nodes and admission to use them; "
    "nothing was written",
    f"{GIVE_A_KEY}, or --unsigned to try contracts out",
)
"""Without a signer and without --unsigned, once the contracts are accepted."""


def compile_flag_refusal(
    *, pools: bool, unchecked: bool, signing: bool, unsigned: bool, publish: bool
) -> FlagRefusal | None:
    """The first rule the flags break (None: none): checking needs the pool catalogue unless
    --unchecked; signing is --key/--transit-key or --unsigned, not both; only checked, signed
    contracts are published."""
    if not pools and not unchecked:
        rules = " and ".join(f"{rule} ({RULES[rule]})" for rule in RULES_NEEDING_POOLS)
        return FlagRefusal(
            f"rules {rules} need the pool catalogue; nothing was written",
            "give --pools FILE (format spotcap.pools/v1, e.g. examples/region/demo-region.yaml), "
            "or --unchecked to try contracts out before a catalogue exists",
        )
    if not pools and publish:
        return FlagRefusal(
            "--unchecked contracts are not published: their floors and rates were never "
            "checked against the pool catalogue, and admission would let their work in",
            "give --pools FILE to publish, or leave out --publish to try them out",
        )
    if unsigned and signing:
        return FlagRefusal("give --key or --transit-key, or --unsigned, not both")
    if unsigned and publish:
        return FlagRefusal(
            "--unsigned contracts are not published: every node agent refuses their bundles, "
            "and admission would let their work in",
            "give --key KEYFILE or --transit-key NAME to publish, or leave out --publish to "
            "try them out",
        )
    if publish and not signing:
        return FlagRefusal("--publish needs signed bundles; nothing was written", GIVE_A_KEY)
    return None
