"""`spotcap archive verify`: check an archive with nothing but the archive and a public key.

For every month: the manifest's signature; each file's SHA-256, size, rows and schema; the
Merkle tree head recomputed from the events; that every cost line names an archived event of
the month; the chain (the previous month's manifest by its SHA-256, the RFC 9162 consistency
proof from its tree to this one, and the tree recomputed from its frontier and this month's
events); and, where the storage has Object Lock, each object's retention. Every problem is a
finding that names the month, the object and what is wrong.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from contracts.signing import key_id_of
from replay.archive import layout
from replay.archive.export import archived_months, head_left_behind
from replay.archive.merkle import Extension, leaf_hash, root_of, verify_consistency
from replay.archive.storage import ArchiveError, ArchiveStorage
from schemas.ids import derived_event_id

PublicKey = Ed25519PublicKey  # the one key an auditor trusts


@dataclass(frozen=True, slots=True)
class Finding:
    month: str
    subject: str  # the object or aspect: "events.parquet", "signature", "chain", ...
    message: str
    error: bool = True  # False: a note (e.g. a directory cannot lock anything)

    def __str__(self) -> str:
        return f"{self.month}: {self.subject}: {self.message}"


@dataclass(slots=True)
class MonthReport:
    month: str
    events: int = 0
    findings: list[Finding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not any(f.error for f in self.findings)

    @property
    def problems(self) -> int:
        """How many findings are errors (notes are not)."""
        return sum(1 for f in self.findings if f.error)

    def result(self) -> str:
        """The month's result in words: ``verified`` or how many problems."""
        n = self.problems
        return f"{n} problem{'s' if n > 1 else ''}" if n else "verified"

    def as_json(self) -> dict[str, Any]:
        """The report as `archive verify --json` and the API give it."""
        return {
            "month": self.month,
            "ok": self.ok,
            "events": self.events,
            "findings": [
                {"subject": f.subject, "message": f.message, "error": f.error}
                for f in self.findings
            ],
        }


def failure_sentence(reports: list[MonthReport]) -> str:
    """Why the archive does not verify: how many months have problems, and which."""
    months = [r.month for r in reports if not r.ok]
    return (
        f"the archive does not verify: {len(months)} month(s) with problems ({', '.join(months)})"
    )


def signed_by(public_key: PublicKey, signature: bytes, manifest: bytes) -> bool:
    """Whether `signature` is `public_key`'s signature of the manifest's bytes."""
    try:
        public_key.verify(signature, manifest)
    except InvalidSignature:
        return False
    return True


def _months_in(storage: ArchiveStorage, region: str) -> list[str]:
    months = set()
    for k in storage.keys(f"{region}/"):
        parts = k.split("/")
        if len(parts) == 3:
            months.add(parts[1])
    return sorted(months)


def verify_archive(
    storage: ArchiveStorage,
    public_key: Ed25519PublicKey,
    region: str,
    month: str | None = None,
    *,
    on_month: Callable[[str], None] | None = None,
    through: str | None = None,
) -> list[MonthReport]:
    """Check every month of `region` (or one, with its link to the one before), and, for the
    whole archive, its signed head; with `through`, that the archive reaches that month."""
    signed = archived_months(storage, region)
    present = _months_in(storage, region)
    reports: list[MonthReport] = []
    if month is not None:
        if month not in present:
            report = MonthReport(month)
            later = [m for m in signed if m > month]
            why = f" ({later[0]}'s chain links back through it)" if later else ""
            report.findings.append(Finding(month, "month", f"is not in {storage.describe()}{why}"))
            return [report]
        wanted = [month]
    else:
        wanted = present
        if not present:
            report = MonthReport("-")
            report.findings.append(
                Finding("-", "archive", f"{storage.describe()} holds no month of region {region}")
            )
            return [report]
    with tempfile.TemporaryDirectory(prefix="spotcap-verify-") as tmp:
        for m in wanted:
            if on_month is not None:
                on_month(m)
            reports.append(_Month(storage, public_key, region, m, Path(tmp) / m).check())
    if month is None:
        reports.extend(_gaps(storage, region, signed))
        reports.extend(_head(storage, public_key, region, signed, through))
    return reports


def _head(
    storage: ArchiveStorage,
    public_key: Ed25519PublicKey,
    region: str,
    signed: list[str],
    through: str | None,
) -> list[MonthReport]:
    """The archive's signed head names its newest month, which must be there and be the newest;
    with `through`, the newest must reach that month (a head rolled back with its newest month
    deleted is found only so: the auditor says which month the archive must hold)."""
    newest = signed[-1] if signed else None
    report = MonthReport(newest or "-")

    def fail(message: str) -> list[MonthReport]:
        report.findings.append(Finding(report.month, "head", message))
        return [report, *short]

    short: list[MonthReport] = []
    if through is not None and (newest is None or newest < through):
        missing = f"the months after it are missing from {storage.describe()}"
        short.append(MonthReport(through, findings=[Finding(
            through, "archive", f"ends at {newest or 'no month'}, before {through}: "
            f"{missing} (deleted, or never exported)")]))  # fmt: skip
    try:
        data = storage.read(layout.head_key(region))
        signature = storage.read(layout.head_key(region, layout.HEAD_SIGNATURE))
    except ArchiveError:
        first = (
            f"; if {newest} is the first month ever archived, an export that stopped before "
            f"the head leaves it so: `spotcap archive export --month {newest}` completes it"
            if len(signed) == 1 else ""
        )  # fmt: skip
        return fail(
            f"is missing from {storage.describe()}: without the signed head a deleted newest "
            f"month cannot be told from one never exported (an export writes it){first}"
        )
    if newest is not None and head_left_behind(storage, public_key, region, newest) is not None:
        return fail(
            f"does not name {newest} yet: an export of {newest} stopped after the month's "
            "signed manifest and before the archive's signed head; run `spotcap archive export "
            f"--month {newest}` again to complete it"
        )
    if not signed_by(public_key, signature, data):
        return fail("its signature does not verify under the trusted key: it was changed")
    if storage.enforces_retention:  # each version locked, so an older head cannot be put back
        for name in (layout.HEAD, layout.HEAD_SIGNATURE):
            try:
                held = storage.retention(layout.head_key(region, name))
            except ArchiveError as error:
                return fail(f"{name}'s retention cannot be read: {error}")
            if held is None or held.mode != "COMPLIANCE":
                return fail(f"{name} is not locked in compliance mode: it was put over the head")
    try:
        head = json.loads(data)
        named, sha = str(head["month"]), str(head["manifest_sha256"])
    except (ValueError, KeyError, TypeError):
        return fail("is not a head of this format (a signed JSON naming a month)")
    if named not in signed:
        report.month = named
        return fail(
            f"names {named} as the newest month, which is missing from {storage.describe()} "
            f"(its manifest's SHA-256 was {sha}): the newest month was deleted"
        )
    if named != newest:
        return fail(f"names {named} as the newest month, but {newest} is archived after it")
    try:
        manifest = storage.read(layout.key(region, named, layout.MANIFEST))
    except ArchiveError:
        return fail(f"names {named}, whose manifest cannot be read")
    if layout.sha256_hex(manifest) != sha:
        return fail(f"names {named}'s manifest with SHA-256 {sha}, not the one archived")
    return short


def _gaps(storage: ArchiveStorage, region: str, months: list[str]) -> list[MonthReport]:
    """Months that a later month's chain links to but that are gone."""
    out = []
    for m in months:
        try:
            manifest = json.loads(storage.read(layout.key(region, m, layout.MANIFEST)))
            previous = manifest["chain"]["previous_month"]
        except (ArchiveError, ValueError, KeyError, TypeError):
            continue
        if previous is not None and previous not in months:
            report = MonthReport(previous)
            report.findings.append(
                Finding(
                    previous,
                    "month",
                    f"is missing from {storage.describe()}: {m}'s manifest links to it "
                    f"(SHA-256 {manifest['chain']['previous_manifest_sha256']})",
                )
            )
            out.append(report)
    return out


class _Month:
    def __init__(
        self,
        storage: ArchiveStorage,
        public_key: Ed25519PublicKey,
        region: str,
        month: str,
        workdir: Path,
    ) -> None:
        self.storage, self.public_key = storage, public_key
        self.region, self.month, self.workdir = region, month, workdir
        self.report = MonthReport(month)

    def fail(self, subject: str, message: str, *, error: bool = True) -> None:
        self.report.findings.append(Finding(self.month, subject, message, error))

    def key(self, name: str) -> str:
        return layout.key(self.region, self.month, name)

    def check(self) -> MonthReport:
        manifest_bytes = self._read(layout.MANIFEST)
        signature = self._read(layout.SIGNATURE)
        if manifest_bytes is None:
            return self.report
        try:
            manifest: dict[str, Any] = json.loads(manifest_bytes)
        except ValueError as error:
            self.fail(layout.MANIFEST, f"is not JSON ({error}): it was changed after export")
            return self.report
        self._signature(manifest, manifest_bytes, signature)
        try:
            self._files(manifest)
            self._chain(manifest)
        except (KeyError, TypeError, ValueError) as error:
            self.fail(layout.MANIFEST, f"lacks or garbles a field ({error!r})")
        self._retention(manifest)
        return self.report

    def _read(self, name: str) -> bytes | None:
        if not self.storage.exists(self.key(name)):
            self.fail(name, "is missing")
            return None
        return self.storage.read(self.key(name))

    def _signature(self, manifest: dict[str, Any], data: bytes, signature: bytes | None) -> None:
        if signature is None:
            return
        named = manifest.get("signing", {}).get("key_id")
        given = key_id_of(self.public_key)
        if not signed_by(self.public_key, signature, data):
            if named != given:
                self.fail(
                    "signature",
                    f"the manifest is signed by {named}, not by the public key "
                    f"given ({given}): it does not come from the key you trust",
                )
            else:
                self.fail(
                    "signature",
                    f"does not verify with {given}: manifest.json was changed "
                    "after it was signed (or the signature was)",
                )

    def _files(self, manifest: dict[str, Any]) -> None:
        files: dict[str, Any] = manifest["files"]
        paths: dict[str, Path] = {}
        optional = [layout.AUDIT] if layout.AUDIT in files else []
        for name in (*layout.data_files(manifest), *optional):
            entry = files.get(name)
            if entry is None:
                self.fail(layout.MANIFEST, f"lists no {name}")
                continue
            if not self.storage.exists(self.key(name)):
                self.fail(name, "is missing")
                continue
            path = self.storage.fetch(self.key(name), self.workdir / name)
            data = path.read_bytes()
            digest = layout.sha256_hex(data)
            if digest != entry["sha256"]:
                self.fail(
                    name,
                    f"SHA-256 is {digest}, the manifest says {entry['sha256']}: the "
                    f"file was changed after export ({len(data):,} bytes, the manifest "
                    f"says {entry['bytes']:,})",
                )
                continue
            paths[name] = path
        events_path = paths.get(layout.EVENTS)
        if events_path is not None:
            self._events(manifest, events_path)
        lines_path = paths.get(layout.COST_LINES)
        if lines_path is not None and events_path is not None:
            self._cost_lines(manifest, lines_path, events_path)
        derived = {name: (t,) for name, t in layout.TYPED_FILES.items()}
        for name, types in {**derived, layout.PRICED: layout.priced_types(manifest)}.items():
            typed_path = paths.get(name)
            if typed_path is not None and events_path is not None:
                self._typed(manifest, name, types, typed_path, events_path)

    def _parquet(self, name: str, path: Path, entry: dict[str, Any]) -> Any:
        try:
            table = pq.read_table(path)
        except Exception as error:  # pyarrow raises several types for a damaged file
            self.fail(name, f"is not a readable Parquet file: {error}")
            return None
        if table.num_rows != entry["rows"]:
            self.fail(name, f"holds {table.num_rows:,} rows, the manifest says {entry['rows']:,}")
        fingerprint = layout.schema_fingerprint(table.schema)
        if fingerprint != entry["schema_sha256"]:
            self.fail(
                name,
                f"schema fingerprint is {fingerprint}, the manifest says {entry['schema_sha256']}",
            )
        return table

    def _events(self, manifest: dict[str, Any], path: Path) -> None:
        table = self._parquet(layout.EVENTS, path, manifest["files"][layout.EVENTS])
        if table is None:
            return
        self.report.events = table.num_rows
        ids = table.column("event_id").to_pylist()
        blobs = table.column("avro").to_pylist()
        leaves = [leaf_hash(layout.leaf_data(i, b)) for i, b in zip(ids, blobs, strict=True)]
        self.leaves = leaves
        root = root_of(leaves).hex()
        merkle = manifest["merkle"]
        if len(leaves) != merkle["size"] or root != merkle["root"]:
            self.fail(
                "merkle",
                f"the events give a tree of {len(leaves):,} with root {root}; "
                f"the manifest says {merkle['size']:,} with root {merkle['root']} (a "
                "forged or mistaken tree head)",
            )
        start, end = layout.month_bounds_us(self.month)
        times = table.column("occurred_at").cast("int64")
        if len(times) and (pc.min(times).as_py() < start or pc.max(times).as_py() >= end):
            self.fail(layout.EVENTS, f"holds events outside {self.month}")

    def _cost_lines(self, manifest: dict[str, Any], path: Path, events_path: Path) -> None:
        table = self._parquet(layout.COST_LINES, path, manifest["files"][layout.COST_LINES])
        if table is None or table.num_rows == 0:
            return
        events = pq.read_table(events_path, columns=["event_id"]).column("event_id")
        # An hour of a reservation's cost on the idle floor names the reservation (which may be
        # of an earlier month); its own id is derived from the reservation and the hour.
        accrual = pc.equal(table.column("event_type"), "reservation_committed")
        hours = table.filter(accrual)
        if "decided_by" in table.column_names:
            for line_id, reservation, hour in zip(
                hours.column("event_id").cast("string").to_pylist(),
                hours.column("decided_by").to_pylist(),
                hours.column("occurred_at").cast("int64").to_pylist(),
                strict=True,
            ):
                if derived_event_id(reservation, "idle_floor", str(hour)) != line_id:
                    self.fail(
                        layout.COST_LINES,
                        f"line {line_id} is not the idle floor's hour {hour} of reservation "
                        f"{reservation}",
                    )
                    break
            table = table.filter(pc.invert(accrual))
        named = pc.unique(table.column("event_id").cast("string"))
        stray = pc.filter(named, pc.invert(pc.is_in(named, value_set=events)))
        if len(stray):
            self.fail(
                layout.COST_LINES,
                f"{len(stray):,} lines name events that are not in "
                f"the month's events (e.g. {stray[0].as_py()})",
            )

    def _typed(
        self,
        manifest: dict[str, Any],
        name: str,
        types: tuple[str, ...],
        path: Path,
        events_path: Path,
    ) -> None:
        """A derived file holds the month's events of its types, each once (its values are
        the events', as `replay.archive.export.write_typed_files` derives them)."""
        table = self._parquet(name, path, manifest["files"][name])
        if table is None:
            return
        events = pq.read_table(events_path, columns=["event_id", "event_type"])
        kept = pc.is_in(events.column("event_type"), value_set=pa.array(types))
        wanted = pc.filter(events.column("event_id"), kept)
        held = table.column("event_id")
        if (
            len(held) != len(wanted)
            or len(pc.unique(held)) != len(held)
            # min_count=0: all of nothing is true (by default arrow says null, and an empty
            # month, with none of these events, failed its own verify)
            or not pc.all(pc.is_in(held, value_set=wanted), min_count=0).as_py()
        ):
            self.fail(
                name,
                f"does not hold the month's {len(wanted):,} {' and '.join(types)} events each once "
                f"({len(held):,} rows)",
            )
        if name == layout.RATE_CARDS and layout.IN_FORCE in table.column_names:
            self._card_integrals(table)

    def _card_integrals(self, table: Any) -> None:
        """Formats 3 and 4: the cards are in their order and their integrals are theirs (a
        replay prices from these columns without sorting); format 4 also marks the cards
        published past the allowed lateness, which are in force nowhere."""
        pools = table.column("pool_id").to_pylist()
        starts = table.column("valid_from_at").to_pylist()
        ids = table.column("event_id").to_pylist()
        fourth = layout.REFUSED_LATE in table.column_names
        published = table.column("occurred_at").cast("int64").to_pylist()
        order = (
            list(zip(pools, starts, published, ids, strict=True))
            if fourth
            else list(zip(pools, starts, ids, strict=True))
        )
        if order != sorted(order):
            by = "start, publication" if fourth else "start"
            self.fail(layout.RATE_CARDS, f"is not sorted by pool, {by} and event id")
            return
        refused = layout.refused_late(starts, published) if fourth else None
        in_force, ip, ig = layout.card_integrals(
            pools,
            starts,
            table.column("price_per_vcpu_h_eur_micros").to_pylist(),
            table.column("guaranteed_price_per_vcpu_h_eur_micros").to_pylist(),
            refused,
        )
        checks: list[tuple[str, list[bool] | list[int]]] = [
            (layout.IN_FORCE, in_force),
            (layout.PRICE_INTEGRAL, ip),
            (layout.GUARANTEED_INTEGRAL, ig),
        ]
        if refused is not None:
            checks.insert(0, (layout.REFUSED_LATE, refused))
        for column, expected in checks:
            held = [int(v) for v in table.column(column).to_pylist()]
            wanted = [int(v) for v in expected]
            if held != wanted:
                pairs = enumerate(zip(held, wanted, strict=True))
                first = next(i for i, (one, other) in pairs if one != other)
                self.fail(
                    layout.RATE_CARDS,
                    f"{column} of card {ids[first]} is {held[first]}, its cards give "
                    f"{wanted[first]}",
                )

    def _chain(self, manifest: dict[str, Any]) -> None:
        chain = manifest["chain"]
        previous = chain["previous_month"]
        size, root = int(chain["size"]), chain["root"]
        leaves = getattr(self, "leaves", None)
        if previous is None:
            earlier = [m for m in archived_months(self.storage, self.region) if m < self.month]
            if earlier:
                self.fail(
                    "chain", f"claims to start the chain, but {earlier[-1]} is archived before it"
                )
            before_size, before_root, frontier = 0, None, []
        else:
            if previous != layout.previous_month(self.month):
                self.fail("chain", f"links to {previous}, not to the month before")
            key = layout.key(self.region, previous, layout.MANIFEST)
            if not self.storage.exists(key):
                self.fail("chain", f"links to {previous}, which is missing from the archive")
                return
            previous_bytes = self.storage.read(key)
            digest = layout.sha256_hex(previous_bytes)
            if digest != chain["previous_manifest_sha256"]:
                self.fail(
                    "chain",
                    f"{previous}'s manifest has SHA-256 {digest}, this manifest "
                    f"links to {chain['previous_manifest_sha256']}: {previous} was changed",
                )
            earlier_chain = json.loads(previous_bytes)["chain"]
            before_size, before_root = int(earlier_chain["size"]), earlier_chain["root"]
            frontier = earlier_chain["frontier"]
            if before_size != chain["previous_size"] or before_root != chain["previous_root"]:
                self.fail(
                    "chain",
                    f"starts from a tree of {chain['previous_size']:,} with root "
                    f"{chain['previous_root']}, but {previous} ended at {before_size:,} "
                    f"with root {before_root}",
                )
            proof = [bytes.fromhex(h) for h in chain["consistency_proof"]]
            if not verify_consistency(
                before_size, bytes.fromhex(before_root or ""), size, bytes.fromhex(root), proof
            ):
                self.fail(
                    "chain",
                    f"the consistency proof from {previous}'s tree "
                    f"({before_size:,}) to this one ({size:,}) does not verify",
                )
        if leaves is not None:
            try:
                ext = Extension(before_size, [bytes.fromhex(h) for h in frontier], leaves)
            except ValueError as error:
                self.fail("chain", f"the previous month's frontier is damaged: {error}")
                return
            if ext.size != size or ext.root().hex() != root:
                self.fail(
                    "chain",
                    f"the archived events extend the chain to {ext.size:,} with "
                    f"root {ext.root().hex()}, the manifest says {size:,} with root {root}",
                )

    def _retention(self, manifest: dict[str, Any]) -> None:
        if not self.storage.enforces_retention:
            self.fail(
                "retention",
                "a local directory locks nothing: anyone with write access "
                "can change it (export to S3 with Object Lock for that)",
                error=False,
            )
            return
        wanted = datetime.fromisoformat(
            manifest["retention"]["retain_until"].replace("Z", "+00:00")
        )
        optional = [layout.AUDIT] if layout.AUDIT in manifest["files"] else []
        for name in (*layout.data_files(manifest), *optional, layout.MANIFEST, layout.SIGNATURE):
            if not self.storage.exists(self.key(name)):
                continue
            try:
                held = self.storage.retention(self.key(name))
            except ArchiveError as error:
                self.fail(name, f"retention cannot be read: {error}")
                continue
            if held is None or held.mode != "COMPLIANCE":
                mode = held.mode if held else "none"
                self.fail(name, f"is not locked in compliance mode (mode {mode})")
                continue
            until = held.retain_until.astimezone(UTC)
            if until < wanted:
                self.fail(
                    name,
                    f"is locked only until {until:%Y-%m-%d}, not "
                    f"{wanted:%Y-%m-%d} as the manifest says",
                )
