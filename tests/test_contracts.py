"""The interruption contract: units, tiers, and errors that name file, line, field and fix."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contracts import (
    TIERS,
    CompileResult,
    ContractError,
    FeasibilityEnv,
    compile_contracts,
)
from contracts.feasibility import RULES
from contracts.pool_file import load_pools
from schemas.codec import Codec
from schemas.contracts.units import (
    INT32_MAX,
    INT64_MAX,
    MAX_DURATION_S,
    MAX_EUR_MICROS,
    MAX_PRIORITY,
    MAX_SIZE_BYTES,
    MAX_VCPU,
    MAX_VERSION,
    UnitError,
    parse_duration_s,
    parse_eur_micros,
    parse_rate_per_h,
    parse_size_bytes,
)
from schemas.events import ContractPublished

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples" / "contracts"
T0_US = 1_796_000_000_000_000

BASE = """\
apiVersion: spotcap/v1
kind: InterruptionContract
workload: etl
version: 1
owner: data-platform
scheduler: kubernetes
tier: t3
target_vcpu: 100
checkpoint:
  size_bytes: 1 GiB
"""


@dataclass(frozen=True)
class Pool:
    """A pool as the feasibility rules read it (the real catalogue is not imported)."""

    pool_id: str
    purchase_model: str
    capacity_vcpu: int
    expected_interruptions_per_h: float
    correlation_group: str
    hall: str


def compile_one(text: str, env: FeasibilityEnv | None = None, name: str = "etl") -> CompileResult:
    return compile_contracts(
        {Path(f"contracts/{name}.yaml"): text}, env or FeasibilityEnv(), published_at_us=T0_US
    )


def only_error(text: str, env: FeasibilityEnv | None = None) -> ContractError:
    result = compile_one(text, env)
    assert len(result.errors) == 1, [str(e) for e in result.errors]
    assert not result.accepted
    return result.errors[0]


def assert_located(error: ContractError, line: int, field: str, *words: str) -> None:
    """The error names the file, the line and the field, says what is wrong and how to fix."""
    text = str(error)
    assert text.startswith(f"contracts/etl.yaml:{line}: {field}: "), text
    assert re.search(r"\(fix: .+\)$", text), text
    for word in words:
        assert word in text, (word, text)


# -- the examples -----------------------------------------------------------------------------


def example_files() -> dict[Path, str]:
    return {p: p.read_text() for p in sorted(EXAMPLES.glob("*.yaml"))}


def test_every_example_compiles_with_the_sample_pool_catalogue() -> None:
    pools = load_pools("pools", (EXAMPLES / "pools.catalogue.json").read_text())
    result = compile_contracts(example_files(), FeasibilityEnv(pools=pools), published_at_us=T0_US)
    assert result.errors == ()
    assert result.unchecked_rules == ()
    tiers = sorted(c.contract.tier for c in result.accepted)
    assert tiers == ["bespoke", "t1", "t2", "t3", "t4", "t5"]


def test_examples_without_pools_report_the_rules_not_checked() -> None:
    result = compile_contracts(example_files(), FeasibilityEnv(), published_at_us=T0_US)
    assert result.ok
    assert result.unchecked_rules == ("floor-within-committed", "rate-diversifiable")


def test_compiling_is_deterministic_and_events_carry_the_given_time() -> None:
    first = compile_contracts(example_files(), FeasibilityEnv(), published_at_us=T0_US)
    second = compile_contracts(example_files(), FeasibilityEnv(), published_at_us=T0_US)
    assert first == second
    for compiled in first.accepted:
        assert compiled.event.occurred_at == T0_US
        assert compiled.event.key == compiled.contract.workload
        payload = compiled.event.payload
        assert isinstance(payload, ContractPublished)
        assert payload.contract_sha256 == compiled.bundle_sha256
        assert payload.source_sha256 == compiled.source_sha256
        assert payload.scheduler == compiled.contract.scheduler


# -- tiers and resolution ---------------------------------------------------------------------


def test_a_tier_contract_inherits_every_default_it_does_not_override() -> None:
    result = compile_one(BASE + "drain_budget_s: 1m40s\n")
    contract = result.accepted[0].contract
    t3 = TIERS["t3"]
    assert contract.drain_budget_s == 100
    assert contract.checkpoint.method == t3.checkpoint_method
    assert contract.checkpoint.periodic_interval_s == t3.periodic_interval_s
    assert contract.restart.semantics == t3.restart_semantics
    assert contract.tolerated_interruptions_per_h == t3.tolerated_interruptions_per_h
    assert contract.priority == t3.priority


def test_the_t1_floor_is_thirty_percent_of_the_target_rounded_up() -> None:
    text = BASE.replace("tier: t3", "tier: t1").replace("checkpoint:\n  size_bytes: 1 GiB\n", "")
    contract = compile_one(text.replace("target_vcpu: 100", "target_vcpu: 101")).accepted[0]
    assert contract.contract.floor_vcpu == 31


def test_overriding_the_method_to_none_drops_the_tiers_periodic_interval() -> None:
    text = (
        BASE.replace("  size_bytes: 1 GiB", "  method: none") + "restart:\n  semantics: requeue\n"
    )
    contract = compile_one(text).accepted[0].contract
    assert contract.checkpoint.periodic_interval_s is None
    assert not contract.checkpoint_on_notice


def test_units_are_converted_to_the_unit_the_field_names() -> None:
    text = BASE.replace("1 GiB", "1536 MiB") + (
        "drain_budget_s: 1m30s\n"
        "tolerated_interruptions_per_h: 1.2/day\n"
        "fallback:\n"
        '  spend_cap_per_day_eur_micros: "EUR 120.50"\n'
        "  approver: a.person@example.org\n"
    )
    contract = compile_one(text).accepted[0].contract
    assert contract.checkpoint.size_bytes == 1536 * 2**20
    assert contract.drain_budget_s == 90
    assert contract.tolerated_interruptions_per_h == pytest.approx(0.05)
    assert contract.fallback.spend_cap_per_day_eur_micros == 120_500_000


# -- every error names file, line and field ---------------------------------------------------


def test_bad_yaml_names_the_line_and_the_key() -> None:
    error = only_error(BASE + "drain_budget_s: [90\n")
    assert error.rule == "yaml"
    assert_located(error, 12, "drain_budget_s", "YAML syntax error")


def test_bad_indentation_names_the_line() -> None:
    text = BASE + "restart:\n  semantics: resume\n effects_on_completion_only: true\n"
    error = only_error(text)
    assert error.line == 13
    assert "YAML syntax error" in error.message


def test_unknown_tier() -> None:
    error = only_error(BASE.replace("tier: t3", "tier: t9"))
    assert_located(error, 7, "tier", "'t9'", "bespoke", "docs/contracts.md#tiers")


def test_missing_approver_when_a_spend_cap_is_set() -> None:
    text = BASE + 'fallback:\n  spend_cap_per_day_eur_micros: "EUR 120.50"\n'
    error = only_error(text)
    assert error.rule == "spend-cap-has-approver"
    assert_located(error, 11, "fallback.approver", "EUR 120.50", "add fallback.approver")


@pytest.mark.parametrize(
    ("line_text", "field", "accepted"),
    [
        ("drain_budget_s: 90 sec", "drain_budget_s", "s, m, h"),
        ("tolerated_interruptions_per_h: 3/week", "tolerated_interruptions_per_h", "/h, /day"),
    ],
)
def test_wrong_unit_lists_the_accepted_units(line_text: str, field: str, accepted: str) -> None:
    error = only_error(BASE + line_text + "\n")
    assert_located(error, 11, field, "accepted units: " + accepted)


def test_wrong_size_unit_on_a_nested_field() -> None:
    error = only_error(BASE.replace("1 GiB", "1 gigabyte"))
    assert_located(error, 10, "checkpoint.size_bytes", "'gigabyte'", "GiB")


def test_money_as_a_bare_decimal_is_refused() -> None:
    text = BASE + "fallback:\n  spend_cap_per_day_eur_micros: 120.5\n  approver: x\n"
    error = only_error(text)
    assert_located(error, 12, "fallback.spend_cap_per_day_eur_micros", "EUR 120.50")


def test_unknown_field_suggests_the_closest_name() -> None:
    error = only_error(BASE + "drain_budgte_s: 90\n")
    assert_located(
        error, 11, "drain_budgte_s", "not a contract field", "did you mean drain_budget_s"
    )


def test_a_monthly_spend_cap_is_pointed_at_the_daily_one() -> None:
    error = only_error(BASE + "fallback:\n  spend_cap_per_month_eur_micros: 5\n")
    assert_located(error, 12, "fallback.spend_cap_per_month_eur_micros", "per day")


def test_wrong_api_version() -> None:
    error = only_error(BASE.replace("spotcap/v1", "spotcap/v2"))
    assert_located(error, 1, "apiVersion", "'spotcap/v2'", "write apiVersion: spotcap/v1")


def test_missing_required_field_points_at_its_parent() -> None:
    error = only_error(BASE.replace("owner: data-platform\n", ""))
    assert_located(error, 1, "owner", "is required")


def test_duplicate_workload_ids_across_files_refuse_both() -> None:
    files = {
        Path("contracts/a.yaml"): BASE,
        Path("contracts/b.yaml"): "# the same workload again\n" + BASE,
    }
    result = compile_contracts(files, FeasibilityEnv(), published_at_us=T0_US)
    assert not result.accepted
    assert [str(e).split(": ")[0] for e in result.errors] == [
        "contracts/a.yaml:3",
        "contracts/b.yaml:4",
    ]
    assert "also declared in contracts/b.yaml:4" in result.errors[0].message
    assert all(e.field == "workload" and e.rule == "duplicate" for e in result.errors)


def test_a_key_written_twice_is_refused() -> None:
    error = only_error(BASE + "owner: someone-else\n")
    assert_located(error, 11, "owner", "written twice", "first on line 5")


def test_a_second_document_is_refused_at_its_own_line() -> None:
    lines = BASE.splitlines(keepends=True)
    assert lines[7].startswith("target_vcpu:")
    error = only_error("".join([*lines[:8], "---\n", *lines[8:]]))
    assert error.rule == "yaml"
    assert_located(error, 9, "(document)", "second YAML document", "one contract per file")


def test_bespoke_names_every_missing_field_at_the_tier_line() -> None:
    result = compile_one(BASE.replace("tier: t3", "tier: bespoke"))
    fields = {e.field for e in result.errors}
    assert {"drain_budget_s", "restart.semantics", "floor_vcpu", "priority"} <= fields
    assert {"checkpoint.method", "proactive_drain_on_advisory"} <= fields
    assert all(e.line in (7, 9) for e in result.errors)


def test_bespoke_requires_a_reviewer() -> None:
    text = (EXAMPLES / "genomics-align.yaml").read_text()
    text = text.replace("reviewed_by: platform-review@example.org\n", "")
    result = compile_contracts(
        {Path("contracts/etl.yaml"): text}, FeasibilityEnv(), published_at_us=T0_US
    )
    assert [e.field for e in result.errors] == ["reviewed_by"]


def test_resume_without_a_checkpoint_blames_the_tier_default() -> None:
    error = only_error(BASE.replace("  size_bytes: 1 GiB", "  method: none"))
    assert_located(error, 7, "restart.semantics", "tier t3 default", "requeue")


def test_a_floor_above_the_target() -> None:
    error = only_error(BASE + "floor_vcpu: 200\n")
    assert_located(error, 11, "floor_vcpu", "larger than target_vcpu", "at most 100")


def test_slurm_requeue_on_kubernetes() -> None:
    error = only_error(BASE.replace("  size_bytes: 1 GiB", "  method: slurm-requeue"))
    assert_located(error, 10, "checkpoint.method", "scheduler slurm")


def test_a_workload_id_that_cannot_be_a_label() -> None:
    error = only_error(BASE.replace("workload: etl", "workload: ETL_nightly"))
    assert_located(error, 3, "workload", "lower-case")


def test_a_deadline_without_timezone() -> None:
    error = only_error(BASE + "deadline: 2026-12-01T06:00:00\n")
    assert_located(error, 11, "deadline", "timezone", "2026-12-01T06:00:00Z")


def test_a_file_that_is_not_a_mapping() -> None:
    error = only_error("- just\n- a list\n")
    assert_located(error, 1, "(document)", "one YAML mapping")


# -- units ------------------------------------------------------------------------------------


@given(st.integers(0, 10_000), st.integers(0, 59), st.integers(0, 59))
def test_durations_in_any_unit_agree(hours: int, minutes: int, seconds: int) -> None:
    total = hours * 3600 + minutes * 60 + seconds
    assert parse_duration_s(f"{hours}h{minutes}m{seconds}s") == total
    assert parse_duration_s(total) == total
    assert parse_duration_s(f"{total}s") == total


@given(st.integers(0, 4096), st.sampled_from(["KiB", "MiB", "GiB", "KB", "MB", "GB"]))
def test_sizes_are_exact(number: int, unit: str) -> None:
    scale = {"KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "KB": 10**3, "MB": 10**6, "GB": 10**9}
    assert parse_size_bytes(f"{number} {unit}") == number * scale[unit]


@given(st.integers(0, 10**9), st.integers(0, 99))
def test_money_is_exact_micro_euros(euros: int, cents: int) -> None:
    micros = euros * 1_000_000 + cents * 10_000
    assert parse_eur_micros(f"EUR {euros}.{cents:02d}") == micros
    assert parse_eur_micros(f"{euros}.{cents:02d} EUR") == micros


@pytest.mark.parametrize(
    ("parse", "value"),
    [
        (parse_duration_s, "1.5m"),
        (parse_duration_s, True),
        (parse_duration_s, 1.5),
        (parse_size_bytes, "1.5 B"),
        (parse_size_bytes, "2 Gb"),
        (parse_eur_micros, "USD 5"),
        (parse_eur_micros, "EUR 0.0000001"),
        (parse_rate_per_h, "nan"),
        (parse_rate_per_h, "1/fortnight"),
    ],
)
def test_units_refuse_what_they_do_not_know(parse: object, value: object) -> None:
    assert callable(parse)
    with pytest.raises(UnitError) as raised:
        parse(value)
    assert raised.value.fix


# -- the docs keep up with the tiers ----------------------------------------------------------


def test_docs_table_lists_every_tier_default() -> None:
    docs = (REPO / "docs" / "contracts.md").read_text()
    for name, tier in TIERS.items():
        row = next(line for line in docs.splitlines() if line.startswith(f"| `{name}` |"))
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[2] == f"{tier.drain_budget_s} s", row
        assert cells[3] == tier.checkpoint_method, row
        assert cells[5] == tier.restart_semantics, row
        assert cells[7] == f"{tier.tolerated_interruptions_per_h:g}", row
        assert cells[8] == f"{tier.floor_percent}%", row
        assert cells[9] == str(tier.priority), row


def test_the_deadline_becomes_exact_event_microseconds() -> None:
    compiled = compile_one(BASE + "deadline: 2026-12-01T06:00:00.000123+01:00\n").accepted[0]
    payload = compiled.event.payload
    assert isinstance(payload, ContractPublished)
    assert payload.deadline_at == 1_796_101_200_000_123


# -- no input crashes the compiler ------------------------------------------------------------

_ERROR_FORMAT = re.compile(r"^contracts/etl\.yaml:(\d+): \S.*: .+ \(fix: .+\)$", re.DOTALL)


def _assert_well_formed(text: str, result: CompileResult) -> None:
    lines = max(1, len(text.splitlines()) + 1)
    for error in result.errors:
        match = _ERROR_FORMAT.match(str(error))
        assert match, str(error)
        assert 1 <= int(match.group(1)) <= lines, str(error)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_any_text_is_refused_or_accepted_never_crashes(text: str) -> None:
    result = compile_one(text)
    assert result.accepted or result.errors
    _assert_well_formed(text, result)


SCALARS = st.one_of(
    st.integers(-5, 10**12),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.none(),
    st.text(alphabet="abcdefgGiBMshm0123456789 ./:-_", max_size=12),
)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 9), SCALARS)
def test_any_value_in_any_field_gives_located_errors(line: int, value: object) -> None:
    lines = BASE.splitlines()
    key, _, _ = lines[line].partition(":")
    lines[line] = f"{key}: {json.dumps(value)}" if value is not None else f"{key}: null"
    text = "\n".join(lines) + "\n"
    result = compile_one(text)
    _assert_well_formed(text, result)
    for error in result.errors:
        if error.rule == "schema" and error.field != "(document)":
            assert error.line == line + 1 or error.field.startswith("checkpoint"), str(error)


# -- bounds: every integer fits the event, and a realistic range ------------------------------


def _set(text: str, key: str, value: str) -> str:
    return re.sub(rf"^{key}: .*$", f"{key}: {value}", text, flags=re.MULTILINE)


@pytest.mark.parametrize(
    ("edit", "line", "field"),
    [
        (lambda t: _set(t, "version", "99999999999"), 4, "version"),
        (lambda t: _set(t, "target_vcpu", "99999999999999999999"), 8, "target_vcpu"),
        (lambda t: t + "floor_vcpu: 10000001\n", 11, "floor_vcpu"),
        (lambda t: t + "priority: 3000000000\n", 11, "priority"),
        (lambda t: t + "drain_budget_s: 9999999h\n", 11, "drain_budget_s"),
        (lambda t: t.replace("1 GiB", "2000 TiB"), 10, "checkpoint.size_bytes"),
        (
            lambda t: t.replace("1 GiB", "1 GiB\n  periodic_interval_s: 99999999999"),
            11,
            "checkpoint.periodic_interval_s",
        ),
        (
            lambda t: (
                t
                + 'fallback:\n  spend_cap_per_day_eur_micros: "EUR 99999999999999999.00"\n'
                + "  approver: a@example.org\n"
            ),
            12,
            "fallback.spend_cap_per_day_eur_micros",
        ),
        (lambda t: _set(t, "version", "9" * 5000), 4, "version"),
        (lambda t: t.replace("1 GiB", "9" * 5000 + " GiB"), 10, "checkpoint.size_bytes"),
    ],
)
def test_integers_beyond_their_bound_are_refused_located(
    edit: object, line: int, field: str
) -> None:
    assert callable(edit)
    error = only_error(edit(BASE))
    assert_located(error, line, field)
    assert "too large" in error.message or "digits" in error.message, str(error)


def test_the_bounds_fit_the_events_avro_types_and_encode() -> None:
    bounds = (MAX_VERSION, MAX_VCPU, MAX_DURATION_S, MAX_SIZE_BYTES, MAX_EUR_MICROS)
    assert all(b <= INT64_MAX for b in bounds)
    assert MAX_PRIORITY <= INT32_MAX  # priority is an Avro int
    text = (
        _set(_set(BASE, "version", str(MAX_VERSION)), "target_vcpu", str(MAX_VCPU))
        + f"priority: {MAX_PRIORITY}\n"
        + f"fallback:\n  spend_cap_per_day_eur_micros: {MAX_EUR_MICROS}\n"
        + "  approver: a@example.org\n"
    )
    (compiled,) = compile_one(text).accepted
    assert Codec().decode(Codec().encode(compiled.event)) == compiled.event


# -- the file's bytes ------------------------------------------------------------------------


def compile_bytes(data: bytes, published_at_us: int = T0_US) -> CompileResult:
    return compile_contracts(
        {Path("contracts/etl.yaml"): data}, FeasibilityEnv(), published_at_us=published_at_us
    )


def test_source_sha256_is_the_sha256_of_the_bytes_as_written() -> None:
    for data in (
        BASE.encode(),
        BASE.replace("\n", "\r\n").encode(),
        b"\xef\xbb\xbf" + BASE.encode(),
    ):
        (compiled,) = compile_bytes(data).accepted
        assert compiled.source_sha256 == hashlib.sha256(data).hexdigest()
        assert compiled.bundle.source_sha256 == compiled.source_sha256
    # a text stands for its UTF-8 bytes
    assert compile_one(BASE).accepted[0].source_sha256 == hashlib.sha256(BASE.encode()).hexdigest()


def test_a_file_that_is_not_utf8_is_refused_at_the_line_of_the_bad_byte() -> None:
    result = compile_bytes((BASE + "description: café\n").encode("latin-1"))
    (error,) = result.errors
    assert str(error).startswith("contracts/etl.yaml:11: (encoding): byte 0xe9"), str(error)
    assert "UTF-8" in error.fix


# -- event ids ------------------------------------------------------------------------------


def test_each_publication_is_a_distinct_event_and_rerunning_one_is_idempotent() -> None:
    first = compile_one(BASE).accepted[0]
    changed = compile_contracts(
        {Path("contracts/etl.yaml"): BASE.replace("1 GiB", "2 GiB")},
        FeasibilityEnv(),
        published_at_us=T0_US + 1_000_000,
    ).accepted[0]
    reverted = compile_bytes(BASE.encode(), published_at_us=T0_US + 2_000_000).accepted[0]
    assert reverted.bundle_sha256 == first.bundle_sha256  # byte-for-byte the same contract
    ids = {first.event.event_id, changed.event.event_id, reverted.event.event_id}
    assert len(ids) == 3  # the revert is not dropped as a duplicate of the first publication
    assert compile_bytes(BASE.encode()).accepted[0].event.event_id == first.event.event_id


# -- YAML features that hide where a value came from ------------------------------------------


@pytest.mark.parametrize(
    ("text", "line", "field", "words"),
    [
        (BASE + "description: &d text\nreviewed_by: *d\n", 11, "description", "anchor '&d'"),
        (
            "x-common: &common\n  size_bytes: 1 GiB\n" + BASE,
            1,
            "x-common",
            "anchor '&common'",
        ),
        (BASE + "<<: {drain_budget_s: 500}\n", 11, "<<", "merge keys"),
        (
            BASE.replace("  size_bytes: 1 GiB\n", "  <<: {size_bytes: 1 GiB}\n"),
            10,
            "checkpoint.<<",
            "merge keys",
        ),
    ],
)
def test_anchors_aliases_and_merge_keys_are_refused_at_their_line(
    text: str, line: int, field: str, words: str
) -> None:
    error = only_error(text)
    assert error.rule == "yaml"
    assert_located(error, line, field, words)


@pytest.mark.parametrize("section", ["checkpoint", "restart", "fallback"])
def test_a_section_written_empty_is_refused(section: str) -> None:
    text = BASE.replace("checkpoint:\n  size_bytes: 1 GiB\n", "") + f"{section}:\n"
    error = only_error(text)
    assert_located(error, 9, section, "is empty (null)", "or leave the section out")


def test_a_results_rows_name_each_file_once_accepted_or_with_its_errors() -> None:
    files = example_files()
    first = next(iter(files))
    files[Path("contracts/broken.yaml")] = "tier: t9\n"
    result = compile_contracts(files, FeasibilityEnv(), published_at_us=T0_US)
    rows = result.rows()
    assert [r[0] for r in rows] == sorted(p.as_posix() for p in files)
    by_file = {r[0]: r for r in rows}
    assert by_file["contracts/broken.yaml"][1:4] == ("", "", "")
    assert by_file["contracts/broken.yaml"][4] == len(
        result.errors_for(Path("contracts/broken.yaml"))
    )
    assert by_file[first.as_posix()][4] is None and by_file[first.as_posix()][1]


def test_a_publication_time_names_its_timezone() -> None:
    from schemas.contracts.model import parse_epoch_us

    assert parse_epoch_us("2026-11-30T09:00:00Z") == parse_epoch_us("2026-11-30T10:00:00+01:00")
    assert parse_epoch_us("1970-01-01T00:00:01.5Z") == 1_500_000
    for bad in ("2026-11-30T09:00:00", "yesterday"):
        with pytest.raises(ValueError):
            parse_epoch_us(bad)


def test_each_rule_left_unchecked_is_one_warning_sentence() -> None:
    result = compile_contracts(example_files(), FeasibilityEnv(), published_at_us=T0_US)
    assert result.unchecked_warnings == tuple(
        f"rule {rule} was not checked ({RULES[rule]}): --unchecked without --pools; "
        "published-contracts.json records it"
        for rule in ("floor-within-committed", "rate-diversifiable")
    )
    pools = load_pools("pools", (EXAMPLES / "pools.catalogue.json").read_text())
    checked = compile_contracts(example_files(), FeasibilityEnv(pools=pools), published_at_us=T0_US)
    assert checked.unchecked_warnings == ()
