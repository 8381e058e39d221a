"""The ``--pools`` file: the region's pool catalogue, against which rules (c) and (d) check.

There is one pool file format, the catalogue file of `schemas.pools` (``format:
spotcap.pools/v1``, documented there), in YAML or JSON: the same file the simulator and the
provider read, for example ``examples/region/demo-region.yaml``. Its `Pool`s satisfy
`feasibility.PoolLike`. An error names the file and the pool (its id, else its position).
"""

from __future__ import annotations

from schemas.pools import FORMAT, Pool, PoolCatalogue, PoolCatalogueError

POOL_FILE_HINT = (
    f"the --pools file is a pool catalogue (format: {FORMAT}, with region and pools; "
    "schemas/pools.py documents it), for example examples/region/demo-region.yaml"
)


class PoolFileError(ValueError):
    """The pool file cannot be used; the message names the file and the pool."""


def load_pools(name: str, text: str) -> list[Pool]:
    """The pools of a catalogue file's text; `name` is used in error messages."""
    try:
        return PoolCatalogue.from_yaml(text, source=name).pools()
    except PoolCatalogueError as error:
        raise PoolFileError(str(error)) from error
