"""Parts depend downward only and import only the third-party modules their rule lists; the
deciders import nothing that does I/O or reads a clock (tests/layering.py holds the rule).

The checker is shown to fail on a planted violation of every kind, written to files under a
temporary repository and checked the way the real tree is.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.layering import (
    ARCHITECTURE_PAGE,
    PRODUCT,
    PROJECT,
    RULES,
    check_source,
    check_tree,
    dependency_matrix,
    drawn_matrix,
    part_edges,
    rule_for,
    with_matrix,
)

REPO = Path(__file__).resolve().parent.parent


def test_the_repository_keeps_the_layering_rule() -> None:
    violations = check_tree(REPO)
    assert not violations, "layering violations:\n" + "\n".join(map(str, violations))


def test_every_folder_of_python_code_has_a_rule() -> None:
    folders = {p.relative_to(REPO).parts[0] for p in REPO.glob("*/**/*.py")}
    folders -= {".venv", "build", "spotcap.egg-info"}
    assert folders <= set(PROJECT), folders - set(PROJECT)
    assert set(PROJECT) <= set(RULES)
    assert rule_for(Path("streams/deciders/exclusion.py")) == (
        "streams/deciders",
        RULES["streams/deciders"],
    )
    assert rule_for(Path("streams/kafka.py")) == ("streams", RULES["streams"])
    assert rule_for(Path("streams/intake/kubernetes.py")) == (
        "streams/intake",
        RULES["streams/intake"],
    )


def plant(root: Path, relative: str, source: str) -> list[str]:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(source)
    return [str(v) for v in check_tree(root)]


PLANTED = (
    [
        # (file, source, words the violation names)
        ("schemas/up.py", "from streams.log import Record\n", "schemas/ may import only schemas"),
        ("contracts/up.py", "import provider.base\n", "contracts/ may import only"),
        ("provider/side.py", "from agent import drain\n", "provider/ may import only"),
        ("streams/side.py", "from projections import fleet\n", "streams/ may import only"),
        ("projections/above.py", "from replay import engine\n", "projections/ may import only"),
        ("replay/up.py", "import spotcap.cli\n", "replay/ may import only"),
        # The parts added by the house move, each kept in its place.
        ("replay/above.py", "from console import app\n", "replay/ may import only"),
        ("sim/up.py", "from replay.decisions import what_if\n", "sim/ may import only"),
        ("sim/side.py", "from agent.spool import Spool\n", "sim/ may import only"),
        ("provider/sim.py", "from sim import RegionSim\n", "provider/ may import only"),
        ("console/up.py", "from spotcap.wiring import stores\n", "console/ may import only"),
        ("console/side.py", "import sim.demo\n", "console/ may import only"),
        ("projections/up.py", "from sim.demo import run_demo\n", "projections/ may import only"),
        ("streams/up.py", "from projections.catchup import catch_up\n", "streams/ may import only"),
        ("agent/drain/up.py", "from streams.log import Record\n", "agent/ may import only"),
        ("spotcap/cli/x.py", "import fastapi\n", "fastapi is not on spotcap/"),
        ("spotcap/cli/y.py", "from projections.catchup import _Together\n", "public names"),
        ("spotcap/cli/z.py", "from sim import _private\n", "public names"),
        ("bench/x.py", "from spotcap.wiring import open_log\n", "bench/ may import only"),
        ("bench/y.py", "import spotcap.cli\n", "bench/ may import only"),
        ("schemas/kafka.py", "import confluent_kafka\n", "confluent_kafka is not on schemas/"),
        ("provider/pg.py", "from psycopg import sql\n", "psycopg is not on provider/"),
        ("infra/servers/x.py", "from schemas.codec import Codec\n", "infra/ may import only infra"),
        ("spotcap/x.py", "from infra.servers import start_kafka\n", "spotcap/ may import only"),
        (
            "schemas/dyn.py",
            "import importlib\nimportlib.import_module('streams.kafka')\n",
            "by importlib.import_module",
        ),
        (
            "schemas/dyn2.py",
            "from importlib import import_module as im\nim('provider')\n",
            "by importlib.import_module",
        ),
        ("contracts/dunder.py", "__import__('confluent_kafka')\n", "by __import__"),
        (
            "agent/computed.py",
            "import importlib\nname = 'x'\nimportlib.import_module(name)\n",
            "computed name",
        ),
        (
            "streams/deciders/up.py",
            "from streams.kafka import KafkaLog\n",
            "streams/deciders/ may import only",
        ),
        (
            "streams/deciders/c.py",
            "from contracts import compile_contracts\n",
            "streams/deciders/ may import only",
        ),
        (
            "streams/deciders/codec.py",
            "from schemas.codec import Codec\n",
            "reads the released schemas",
        ),
        ("streams/deciders/ids.py", "from schemas.ids import new_event_id\n", "random"),
        (
            "streams/deciders/now.py",
            "from datetime import datetime\nx = datetime.now()\n",
            "calls datetime.datetime.now",
        ),
        (
            "streams/deciders/now2.py",
            "import datetime as dt\nx = dt.datetime.utcnow()\n",
            "calls datetime.datetime.utcnow",
        ),
        (
            "streams/deciders/now3.py",
            "from datetime import date as d\nx = d.today()\n",
            "calls datetime.date.today",
        ),
        (
            "streams/deciders/now4.py",
            "from datetime import datetime as D\nx = D.today()\n",
            "calls datetime.datetime.today",
        ),
        ("streams/deciders/u4.py", "import uuid\nx = uuid.uuid4()\n", "calls uuid.uuid4"),
        ("streams/deciders/u1.py", "from uuid import uuid1\n", "imports uuid.uuid1"),
        ("streams/deciders/dyn.py", "__import__('time')\n", "reads the clock"),
        ("streams/deciders/third.py", "import pydantic\n", "pydantic is not on streams/deciders/"),
        # The intake alone in streams talks to the Kubernetes API, and stays below projections.
        ("streams/kube.py", "from kubernetes import client\n", "kubernetes is not on streams/"),
        ("streams/intake/up.py", "from projections import x\n", "streams/intake/ may import only"),
        ("streams/intake/pg.py", "import psycopg\n", "psycopg is not on streams/intake/"),
    ]
    + [
        (
            f"streams/deciders/m_{module}.py",
            f"import {module}\n",
            f"imports {module}: streams/deciders/ may not",
        )
        for module in (
            "confluent_kafka",
            "faust",
            "time",
            "random",
            "os",
            "socket",
            "psycopg",
            "chdb",
            "subprocess",
            "pathlib",
            "asyncio",
            "threading",
        )
    ]
    + [
        (
            "streams/deciders/from_os.py",
            "from os import path\n",
            "imports os.path: streams/deciders/ may not",
        ),
        (
            "streams/deciders/inner.py",
            "def f():\n    import time\n    return time\n",
            "imports time",
        ),
    ]
)


@pytest.mark.parametrize(("relative", "source", "words"), PLANTED, ids=[p[0] for p in PLANTED])
def test_the_checker_fails_on_a_planted_violation(
    tmp_path: Path, relative: str, source: str, words: str
) -> None:
    found = plant(tmp_path, relative, source)
    assert len(found) >= 1 and all(f.startswith(f"{relative}:") for f in found), found
    assert any(words in f for f in found), found


def test_what_the_rule_allows_passes(tmp_path: Path) -> None:
    allowed = {
        "schemas/a.py": "import fastavro\nfrom schemas.events import Envelope\nimport os, json\n",
        "contracts/a.py": "from schemas.contracts import Contract\nimport cryptography\n",
        "provider/a.py": "from contracts import bundle_for\nimport openstack\n",
        "replay/a.py": "from streams.log import Record\nfrom projections import x\n",
        "spotcap/a.py": "import click\nfrom replay import y\nfrom streams.kafka import KafkaLog\n",
        "agent/ship.py": "from streams.writer import EventWriter\nfrom agent.spool import Spool\n",
        "sim/a.py": "from projections.catchup import run_projections\nfrom provider import base\n",
        "replay/b.py": "from sim.demo import write_run\nfrom projections.stores import Stores\n",
        "console/a.py": "import fastapi\nfrom replay.run import replay_log\nimport jinja2\n",
        "projections/a.py": "from streams.merged import MergedHistory\nimport pyarrow\n",
        "bench/b.py": "from sim.demo import run_demo\nfrom console.access import ReadAccess\n",
        "infra/a.py": "import subprocess\nfrom infra.servers import process\n",
        "bench/a.py": "from infra.servers import start_kafka\nfrom tests.factories import notice\n",
        "tests/a.py": "import pytest\nfrom spotcap.cli import main\nimport chdb\n",
        "streams/deciders/a.py": (
            "from __future__ import annotations\n"
            "import math, uuid\n"
            "from datetime import datetime, timedelta\n"
            "from dataclasses import dataclass\n"
            "from schemas.events import Envelope\n"
            "from schemas.ids import derived_event_id\n"
            "from streams.deciders.maps import put\n"
            "x = datetime.fromtimestamp(0) + timedelta(seconds=60)\n"
            "y = uuid.uuid5(uuid.NAMESPACE_URL, 'x')\n"
        ),
        "streams/a.py": "import confluent_kafka\nimport time\nfrom streams.deciders import maps\n",
        "streams/intake/a.py": "import urllib3\nimport kubernetes\nfrom streams import log\n",
    }
    for relative, source in allowed.items():
        assert check_source(Path(relative), source) == [], relative


def test_the_architecture_page_draws_the_parts_as_they_import_each_other() -> None:
    """docs/architecture.md's matrix is the code's (regenerate: python -m tests.layering
    --write), and the parts' order keeps every import pointing down."""
    edges = part_edges(REPO)
    page = (REPO / ARCHITECTURE_PAGE).read_text(encoding="utf-8")
    assert drawn_matrix(page) == dependency_matrix(edges), "run: python -m tests.layering --write"
    for part, imported in edges.items():
        below = set(PRODUCT[: PRODUCT.index(part)])
        assert imported <= below, f"{part} imports {sorted(imported - below)}, above or beside it"
    assert all(f"**`{part}`**" in page for part in PRODUCT), "a part without its paragraph"


def test_the_matrix_shows_a_planted_import(tmp_path: Path) -> None:
    plant(tmp_path, "schemas/a.py", "x = 1\n")
    plant(tmp_path, "contracts/b.py", "from schemas import a\n")
    edges = part_edges(tmp_path)
    assert edges["contracts"] == {"schemas"} and edges["schemas"] == set()
    matrix = dependency_matrix(edges).splitlines()
    (row,) = [line.split() for line in matrix[1:] if line.split()[1] == "contracts"]
    assert row[2] == "x"  # column 1: schemas
    assert (
        drawn_matrix(with_matrix("<!-- parts:begin -->\n```\nold\n```\n<!-- parts:end -->", "new"))
        == "new"
    )
