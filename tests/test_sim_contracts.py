"""One contract model everywhere: the simulated workloads' contracts are files their owners
wrote, compiled by the real compiler against the region's pool catalogue; the simulation acts on
the resolved contracts, publishes the compiler's own events, and `spotcap demo --contracts-out`
writes files that `spotcap contracts compile --pools <catalogue>` accepts."""

from __future__ import annotations

import re
import statistics
from collections import Counter, defaultdict
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from contracts import FeasibilityEnv, compile_contracts
from contracts.pool_file import PoolFileError, load_pools
from schemas.codec import Codec
from schemas.events import (
    CapacityClaimOpened,
    CheckpointWritten,
    ContractPublished,
    Envelope,
    InstanceLaunched,
    NoticeReceived,
    WorkWasted,
)
from schemas.pools import PoolCatalogue
from sim import RegionSim, SimConfig, workload_contract_files
from sim.clock import EPOCH_US, SECOND_US
from sim.contracts import compile_workload_contracts, repository_commit
from sim.pools import demo_region
from sim.workloads import SimWorkload
from spotcap.cli import main
from streams.embedded import EmbeddedLog
from streams.topics import topic_name

REPO = Path(__file__).resolve().parent.parent
DEMO_REGION = REPO / "examples" / "region" / "demo-region.yaml"
DEFAULT = SimConfig(days=0.01)  # the default 220 workloads of seed 1; the run barely matters
SHORT = SimConfig(seed=2, days=0.5, halls=3, workloads=60)
REQUIRED = {"apiVersion", "kind", "workload", "version", "owner", "scheduler", "tier"}
REQUIRED |= {"target_vcpu", "description"}


@pytest.fixture(scope="module")
def default_sim() -> RegionSim:
    return RegionSim(DEFAULT)


@pytest.fixture(scope="module")
def short_run() -> tuple[RegionSim, list[Envelope]]:
    sim = RegionSim(SHORT)
    return sim, [e for batch in sim.run() for e in batch]


# -- every simulated contract is a real, feasible contract ------------------------------------


def test_every_simulated_contract_compiles_against_the_demo_region(
    default_sim: RegionSim,
) -> None:
    result = default_sim.contracts
    assert [str(e) for e in result.errors] == []
    assert result.unchecked_rules == ()  # rules (c) and (d) ran against the sim's catalogue
    assert len(result.accepted) == len(default_sim.workloads) == 220
    # ...and against the catalogue file a person passes to `spotcap contracts compile --pools`
    assert PoolCatalogue.load(DEMO_REGION) == demo_region(1, "demo")
    pools = load_pools(str(DEMO_REGION), DEMO_REGION.read_text())
    files = workload_contract_files(DEFAULT)
    again = compile_contracts(files, FeasibilityEnv(pools=pools), published_at_us=EPOCH_US)
    assert again.errors == () and len(again.accepted) == 220


@pytest.mark.parametrize(("seed", "halls"), [(2, 4), (3, 2), (7, 3), (11, 4)])
def test_the_generator_writes_feasible_contracts_for_other_regions(seed: int, halls: int) -> None:
    config = SimConfig(seed=seed, halls=halls, workloads=220 if halls == 4 else 60)
    result = compile_workload_contracts(
        workload_contract_files(config),
        demo_region(seed, config.region, halls).pools(),
        published_at_us=config.start_us,
        region=config.region,
    )
    assert [str(e) for e in result.errors] == []


def test_the_files_are_what_owners_write_mostly_a_tier_and_a_few_overrides() -> None:
    files = workload_contract_files(DEFAULT)
    assert files == workload_contract_files(DEFAULT), "deterministic"
    assert files != workload_contract_files(replace(DEFAULT, seed=2))
    documents = {path: yaml.safe_load(text) for path, text in files.items()}
    tiers = Counter(d["tier"] for d in documents.values())
    assert set(tiers) == {"t1", "t2", "t3", "t4", "t5", "bespoke"}
    assert 1 <= tiers["bespoke"] <= 0.1 * len(files)
    overrides = []
    for path, document in documents.items():
        assert path == Path(f"contracts/{document['owner'][5:]}/{document['workload']}.yaml")
        if document["tier"] == "bespoke":
            assert document["reviewed_by"]
            assert "restart" in document and "floor_vcpu" in document
        else:
            overrides.append(len(set(document) - REQUIRED))
    assert statistics.median(overrides) <= 2


def test_the_kinds_keep_their_nature_whatever_their_tier(default_sim: RegionSim) -> None:
    nature = {
        "spark": ("spark", "resume"),
        "pytorch": ("pytorch", "resume"),
        "ci": ("none", "requeue"),
        "service": ("none", "requeue"),
        "slurm": ("slurm-requeue", "resume"),
    }
    tiers_by_kind: defaultdict[str, set[str]] = defaultdict(set)
    for w in default_sim.workloads:
        c = w.contract
        assert (c.checkpoint.method, c.restart.semantics) == nature[w.kind], w.workload_id
        assert c.scheduler == ("slurm" if w.kind == "slurm" else "kubernetes")
        if c.checkpoint.method != "none":
            assert c.checkpoint.size_bytes > 0 and c.checkpoint.periodic_interval_s
            # rule (a) at the compiler's 50 MB/s plus 5 s
            assert c.checkpoint.size_bytes / 50e6 + 5 <= c.drain_budget_s <= 115
        if c.tier == "t1":
            assert c.floor_vcpu == -(-c.target_vcpu * 30 // 100)
        tiers_by_kind[w.kind].add(c.tier)
    assert tiers_by_kind["service"] >= {"t1", "t2", "t3"}
    assert tiers_by_kind["ci"] >= {"t4", "t5"}
    assert 12_000 <= sum(w.contract.target_vcpu for w in default_sim.workloads) <= 60_000


# -- the sim publishes the compiler's events and acts on the resolved contracts ---------------


def test_the_sims_contract_events_are_the_compilers(default_sim: RegionSim) -> None:
    config = DEFAULT
    published = [
        e for e in next(iter(RegionSim(config).run())) if isinstance(e.payload, ContractPublished)
    ]
    files = workload_contract_files(config)
    compiled = compile_contracts(
        files,
        FeasibilityEnv(pools=default_sim.catalogue.pools()),
        published_at_us=config.start_us,
        region=config.region,
        source_commit=repository_commit(files),
    )
    assert tuple(published) == compiled.events
    assert all(e.producer == "contracts/compiler" for e in published)
    for envelope in published:
        assert isinstance(envelope.payload, ContractPublished)
        assert envelope.payload.source_path in {p.as_posix() for p in files}


def test_the_sim_acts_on_the_resolved_contracts(
    short_run: tuple[RegionSim, list[Envelope]],
) -> None:
    sim, events = short_run
    workloads: dict[str, SimWorkload] = {w.workload_id: w for w in sim.workloads}
    pools = {p.pool_id: p for p in sim.catalogue}
    launched: dict[str, tuple[int, str]] = {}
    notices: dict[str, Envelope] = {}
    periodic = finals = 0
    for e in events:
        p = e.payload
        if isinstance(p, CapacityClaimOpened):
            assert p.requested_vcpu <= workloads[p.workload_id].contract.target_vcpu
        elif isinstance(p, InstanceLaunched):
            launched[p.instance_id] = (e.occurred_at, p.workload_id)
            if p.purchase_model == "reclaimable":  # the tolerated rate limits the pools
                tolerated = workloads[p.workload_id].contract.tolerated_interruptions_per_h
                assert pools[p.pool_id].expected_interruptions_per_h <= tolerated
        elif isinstance(p, NoticeReceived):
            notices[p.instance_id] = e
        elif isinstance(p, CheckpointWritten):
            contract = workloads[p.workload_id].contract
            assert contract.checkpoint.method != "none"
            if p.final:
                finals += 1
                written_s = (e.occurred_at - notices[p.instance_id].occurred_at) / SECOND_US
                assert written_s <= contract.drain_budget_s
            else:
                periodic += 1
                interval_us = (contract.checkpoint.periodic_interval_s or 0) * SECOND_US
                assert (e.occurred_at - launched[p.instance_id][0]) % interval_us == 0
        elif isinstance(p, WorkWasted) and workloads[p.workload_id].draft.stateless:
            assert p.wasted_vcpu_s == 0
    assert periodic and finals


def test_a_workload_whose_contract_is_refused_never_runs() -> None:
    # No committed capacity: every floor is refused by rule (c), so admission (ADR-04) keeps
    # those workloads off the region.
    region = demo_region(5, "demo", 2)
    catalogue = PoolCatalogue("demo", [p for p in region if p.purchase_model != "committed"])
    sim = RegionSim(SimConfig(seed=5, days=0.2, halls=2, workloads=40, catalogue=catalogue))
    refused = {e.file for e in sim.contracts.errors}
    assert refused and {e.rule for e in sim.contracts.errors} == {"floor-within-committed"}
    assert len(sim.workloads) == 40 - len(refused)
    refused_ids = {d.workload_id for d in sim.drafts if d.source_path in refused}
    events = [e for batch in sim.run() for e in batch]
    assert not refused_ids & {getattr(e.payload, "workload_id", None) for e in events}


# -- the files, the CLI and the one pool file format ------------------------------------------


def _published(home: Path, region: str) -> list[Envelope]:
    """The contract_published events in a home's embedded log, by event id."""
    log = EmbeddedLog(home / "log")
    codec = Codec()
    topic = topic_name(region, "demand")
    found = []
    try:
        for number in range(log.partitions_for(topic)):
            for record in log.partition(topic, number).read(0, 10**6):
                envelope = codec.decode(record.value or b"", record.origin)
                if isinstance(envelope.payload, ContractPublished):
                    found.append(envelope)
    finally:
        log.close()
    return sorted(found, key=lambda e: e.event_id)


def test_contracts_out_compile_through_the_cli_to_the_same_events(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out, region = tmp_path / "contracts", "sim-contracts"
    runner = CliRunner()
    home = ["--home", str(tmp_path / "demo"), "--region", region]
    demo_args = ["demo", "--days", "0.02", "--no-projections", "--contracts-out", str(out)]
    ran = runner.invoke(main, [*home, *demo_args])
    assert ran.exit_code == 0, ran.output
    assert f"wrote 220 contract files under {out}" in ran.output
    assert len(list(out.rglob("*.yaml"))) == 220
    simulated = _published(tmp_path / "demo", region)
    assert len(simulated) == 220
    assert isinstance(simulated[0].payload, ContractPublished)
    commit = simulated[0].payload.source_commit
    assert commit is not None

    key = tmp_path / "key.pem"
    assert runner.invoke(main, ["contracts", "keygen", "--out", str(key)]).exit_code == 0
    monkeypatch.chdir(out)  # so that the files' paths are those of the contract repository
    start = datetime.fromtimestamp(EPOCH_US // 1_000_000, UTC).isoformat()
    compiled = runner.invoke(
        main,
        [
            *["--home", str(tmp_path / "compile"), "--region", region],
            *["contracts", "compile", ".", "--out", str(tmp_path / "bundles")],
            *["--pools", str(DEMO_REGION), "--publish", "--published-at", start],
            *["--source-commit", commit, "--key", str(key), "--json"],
        ],
    )
    assert compiled.exit_code == 0, compiled.output
    assert _published(tmp_path / "compile", region) == simulated

    again = runner.invoke(main, [*home, "demo", "--days", "0.02", "--contracts-out", str(out)])
    assert again.exit_code == 1 and "already holds contract files" in again.output


def test_pools_take_the_pool_catalogue_format_only(tmp_path: Path) -> None:
    assert len(load_pools("demo", DEMO_REGION.read_text())) == 138
    sample = REPO / "examples" / "contracts" / "pools.catalogue.json"
    assert len(load_pools(str(sample), sample.read_text())) == 24
    simple = "pools:\n  - {pool_id: p1, purchase_model: committed, capacity_vcpu: 8}\n"
    expected = "old.yaml: format is None; this build reads 'spotcap.pools/v1'"
    with pytest.raises(PoolFileError, match=re.escape(expected)):
        load_pools("old.yaml", simple)
    old = tmp_path / "old.yaml"
    old.write_text(simple)
    contracts = REPO / "examples" / "contracts"
    result = CliRunner().invoke(
        main,
        [
            *["--home", str(tmp_path / "h"), "contracts", "compile", str(contracts)],
            *["--out", str(tmp_path / "b"), "--pools", str(old)],
        ],
    )
    assert result.exit_code == 1
    assert "old.yaml" in result.output and "examples/region/demo-region.yaml" in result.output
