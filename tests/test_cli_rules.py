"""Rules the command line takes from the parts that own them: the replay's day span, serve's
sign-in configuration, and where `log repair` wrote its README."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from console.signin import SignInError, sign_in_for
from replay.ledgers import day_number, day_span
from streams.embedded_check import Repaired, repair_readme


def test_the_day_span_is_open_ended_and_refuses_a_first_day_after_the_last() -> None:
    first, last = datetime(2026, 11, 2), datetime(2026, 11, 5)
    assert day_span(None, None) == (None, None)
    assert day_span(first, None) == (day_number(first.date()), None)
    assert day_span(first, last) == (day_number(first.date()), day_number(last.date()))
    assert day_span(first, first) == (day_number(first.date()),) * 2
    with pytest.raises(ValueError, match="--from is after --to"):
        day_span(last, first)


def test_an_issuer_and_an_audience_go_together() -> None:
    for issuer, audience in (("https://issuer.example", None), (None, "spotcap")):
        with pytest.raises(SignInError, match="go together: give both or neither"):
            sign_in_for("127.0.0.1", issuer, audience)


def test_without_an_issuer_only_loopback_is_served_and_it_is_said() -> None:
    issuer, warning = sign_in_for("127.0.0.1", None, None)
    assert issuer is None and warning is not None and warning.startswith("no sign-in")
    with pytest.raises(SignInError, match="needs sign-in: give the OIDC issuer") as refused:
        sign_in_for("192.0.2.1", None, None)  # TEST-NET-1: never this machine
    assert refused.value.status == 401


def test_the_repair_readme_is_in_the_run_folder_of_the_first_part_moved(tmp_path: Path) -> None:
    segment = tmp_path / "demo.lifecycle" / "0" / "00000000000000000000.avro"
    moved = tmp_path / "_quarantine" / "repair-20261205T000000Z" / "demo.lifecycle" / "0" / "a"
    fresh = Repaired(segment, 0, 0, "7 on", "a new empty segment", None)
    cut = Repaired(segment, 10, 20, "3-4", "bad block", moved)
    assert repair_readme([fresh], tmp_path) is None
    readme = tmp_path / "_quarantine" / "repair-20261205T000000Z" / "README"
    assert repair_readme([fresh, cut], tmp_path) == readme
