"""projections.read.times: the --since, --from and --to options as people write them."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest

from projections.read.times import DAY_FORM, MOMENT_FORMS, TimeInputError, day_options, since_option


def test_since_reads_a_day_or_a_time_and_none_when_not_given() -> None:
    assert since_option(None) is None
    assert since_option("2026-11-02") == datetime(2026, 11, 2, tzinfo=UTC)


def test_since_in_no_form_read_names_the_forms() -> None:
    with pytest.raises(TimeInputError) as caught:
        since_option("yesterday")
    assert str(caught.value) == "--since 'yesterday' is not a date or time"
    assert caught.value.fix == f"write it as {MOMENT_FORMS}"


def test_days_are_open_when_not_given() -> None:
    assert day_options(None, None) == (None, None)
    assert day_options("2026-11-02", None) == (date(2026, 11, 2), None)
    assert day_options("2026-11-02", "2026-11-02") == (date(2026, 11, 2), date(2026, 11, 2))


@pytest.mark.parametrize(("first", "last", "name"), [("2026-11", None, "--from"),
                                                     (None, "11/02/2026", "--to")])  # fmt: skip
def test_a_day_in_no_form_read_names_its_option_and_the_form(
    first: str | None, last: str | None, name: str
) -> None:
    with pytest.raises(TimeInputError) as caught:
        day_options(first, last)
    assert str(caught.value).startswith(f"{name} '") and "is not a date" in str(caught.value)
    assert caught.value.fix == f"write it as {DAY_FORM}"


def test_a_first_day_after_the_last_is_refused_in_one_sentence() -> None:
    with pytest.raises(TimeInputError) as caught:
        day_options("2026-11-03", "2026-11-02")
    assert str(caught.value).startswith("from 2026-11-03 is after to 2026-11-02")
    assert caught.value.fix == ""
