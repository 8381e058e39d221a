"""contracts.flags: which combinations of `contracts compile`'s flags are refused, and why."""

from __future__ import annotations

import pytest

from contracts.flags import GIVE_A_KEY, compile_flag_refusal


def refusal(**flags: bool) -> str | None:
    given = {"pools": True, "unchecked": False, "signing": True, "unsigned": False}
    given |= {"publish": False, **flags}
    found = compile_flag_refusal(**given)
    return None if found is None else found.message


def test_checked_signed_contracts_may_be_compiled_and_published() -> None:
    assert refusal() is None
    assert refusal(publish=True) is None
    assert refusal(pools=False, unchecked=True, signing=False, unsigned=True) is None


@pytest.mark.parametrize(
    ("flags", "start"),
    [
        ({"pools": False}, "rules "),
        ({"pools": False, "unchecked": True, "publish": True}, "--unchecked contracts are not"),
        ({"unsigned": True}, "give --key or --transit-key, or --unsigned, not both"),
        ({"signing": False, "unsigned": True, "publish": True}, "--unsigned contracts are not"),
        ({"signing": False, "publish": True}, "--publish needs signed bundles"),
    ],
)
def test_each_rule_refuses_with_its_own_sentence(flags: dict[str, bool], start: str) -> None:
    message = refusal(**flags)
    assert message is not None and message.startswith(start)


def test_a_refusal_says_how_to_fix_it() -> None:
    found = compile_flag_refusal(
        pools=True, unchecked=False, signing=False, unsigned=False, publish=True
    )
    assert found is not None and found.hint == GIVE_A_KEY
    no_catalogue = compile_flag_refusal(
        pools=False, unchecked=False, signing=True, unsigned=False, publish=False
    )
    assert no_catalogue is not None and "--pools FILE" in no_catalogue.hint
