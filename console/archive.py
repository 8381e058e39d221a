"""The archive's months and their verification, for the API (/api/v1/archive) and the console's
Archive page: the same functions as `spotcap archive verify`, over the archive `spotcap serve` was
given (``--archive``, else $SPOTCAP_ARCHIVE, else ``<home>/archive``) and the one public key it
trusts (``--archive-public-key``).

The listing reads only the manifests and their signatures (small objects); `verify` reads every
file of the months asked for, one verification at a time, and is remembered per month so the
listing can say when each month was last checked and what was found.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request

from console.access import StoreUnavailableError
from console.api import KnownParameters
from console.errors import NotConfiguredError
from console.models import ArchiveListing, Verification
from console.openapi import errors
from contracts.signing import key_id_of
from projections.read.rows import utc_text
from replay.archive import layout
from replay.archive.export import archived_months
from replay.archive.storage import ArchiveError, ArchiveStorage
from replay.archive.verify import PublicKey, signed_by, verify_archive

MONTH_PATTERN = r"^[0-9]{4}-(0[1-9]|1[0-2])$"


@dataclass(frozen=True, slots=True)
class Checked:
    """A month's last verification by this server."""

    at: datetime
    ok: bool
    problems: int


class ArchiveDesk:
    """The archive the server reads, the key it trusts, and what each month's last
    verification found."""

    def __init__(
        self, storage: ArchiveStorage, region: str, public_key: PublicKey | None = None
    ) -> None:
        self.storage, self.region, self.public_key = storage, region, public_key
        self.key_id = key_id_of(public_key) if public_key is not None else None
        self._verifying = threading.Lock()  # one verification at a time: each reads every file
        self._checked: dict[str, Checked] = {}

    def _unreadable(self, error: ArchiveError) -> StoreUnavailableError:
        return StoreUnavailableError(
            "archive",
            f"{self.storage.describe()} cannot be read now ({error}): check that it is "
            "reachable and that `spotcap serve --archive` names it",
        )

    def listing(self) -> dict[str, Any]:
        """Every month of the region in the archive, from its manifest (oldest first)."""
        try:
            keys = self.storage.keys(f"{self.region}/")
            signed = set(archived_months(self.storage, self.region))
            present = sorted({k.split("/")[1] for k in keys if k.count("/") == 2})
            months = [self._month(m, m in signed) for m in present]
        except ArchiveError as error:
            raise self._unreadable(error) from error
        return {
            "archive": self.storage.describe(),
            "region": self.region,
            "trusted_key": self.key_id,
            "locked": self.storage.enforces_retention,
            "months": months,
        }

    def _month(self, month: str, has_manifest: bool) -> dict[str, Any]:
        row: dict[str, Any] = dict.fromkeys(
            ("events", "cost_lines", "first_event_at", "last_event_at", "merkle_root",
             "chain_size", "chain_root", "previous_month", "previous_manifest_sha256",
             "manifest_sha256", "signed_by", "retain_until", "problem"),
        )  # fmt: skip
        row.update(month=month, signature="missing", link="unknown")
        checked = self._checked.get(month)
        row["verification"] = "not_run" if checked is None else (
            "verified" if checked.ok else "problems")  # fmt: skip
        row["verified_at"] = utc_text(checked.at) if checked else None
        row["problems"] = checked.problems if checked else None
        if not has_manifest:
            row["problem"] = f"{layout.MANIFEST} is missing: the month's export did not finish"
            return row
        data = self.storage.read(layout.key(self.region, month, layout.MANIFEST))
        row["manifest_sha256"] = layout.sha256_hex(data)
        try:
            manifest = json.loads(data)
            chain, files = manifest["chain"], manifest["files"]
            row.update(
                events=int(manifest["merkle"]["size"]),
                cost_lines=int(files[layout.COST_LINES]["rows"]),
                first_event_at=_utc(manifest["time_range"]["first_event_at"]),
                last_event_at=_utc(manifest["time_range"]["last_event_at"]),
                merkle_root=str(manifest["merkle"]["root"]),
                chain_size=int(chain["size"]),
                chain_root=str(chain["root"]),
                previous_month=chain["previous_month"],
                previous_manifest_sha256=chain["previous_manifest_sha256"],
                signed_by=str(manifest["signing"]["key_id"]),
                retain_until=_utc(manifest["retention"]["retain_until"]),
            )
        except (ValueError, KeyError, TypeError) as error:
            row["problem"] = f"{layout.MANIFEST} is not a readable manifest ({error!r})"
            return row
        row["signature"] = self._signature(month, data)
        row["link"] = self._link(row["previous_month"], row["previous_manifest_sha256"])
        return row

    def _signature(self, month: str, manifest: bytes) -> str:
        key = layout.key(self.region, month, layout.SIGNATURE)
        if not self.storage.exists(key):
            return "missing"
        if self.public_key is None:
            return "unchecked"
        return (
            "valid" if signed_by(self.public_key, self.storage.read(key), manifest) else "invalid"
        )

    def _link(self, previous: str | None, sha256: str | None) -> str:
        """`first` (the chain starts here), `linked` (the previous month's manifest is there
        with the SHA-256 this one names) or `broken`."""
        if previous is None:
            return "first"
        key = layout.key(self.region, previous, layout.MANIFEST)
        if not self.storage.exists(key):
            return "broken"
        return "linked" if layout.sha256_hex(self.storage.read(key)) == sha256 else "broken"

    def verify(self, month: str | None) -> dict[str, Any]:
        """`spotcap archive verify` of one month (or all), as its `--json` says it."""
        if self.public_key is None:
            raise NotConfiguredError(
                "verifying needs the public key the archive's months are signed with: start "
                "`spotcap serve` with --archive-public-key FILE (the .pub of `spotcap contracts "
                "keygen`)"
            )
        with self._verifying:
            try:
                reports = verify_archive(self.storage, self.public_key, self.region, month)
            except ArchiveError as error:
                raise self._unreadable(error) from error
            at = datetime.now(UTC)  # when this server checked: shown beside each month
            for r in reports:
                if r.month != "-":
                    self._checked[r.month] = Checked(at, r.ok, r.problems)
        return {
            "ok": all(r.ok for r in reports),
            "archive": self.storage.describe(),
            "region": self.region,
            "month": month,
            "checked_at": utc_text(at),
            "months": [r.as_json() for r in reports],
        }


def _utc(value: str | None) -> str | None:
    """A manifest's time as the API writes times (`2026-11-02T14:00:00Z`)."""
    return None if value is None else utc_text(datetime.fromisoformat(value))


async def _desk(request: Request) -> ArchiveDesk:
    desk: ArchiveDesk = request.app.state.archive
    return desk


Desk = Annotated[ArchiveDesk, Depends(_desk)]
Month = Annotated[str | None, Query(pattern=MONTH_PATTERN, description="Only this month "
                                    "(YYYY-MM), with its link to the month before; default "
                                    "every month.")]  # fmt: skip

router = APIRouter(prefix="/api/v1", dependencies=[KnownParameters])


@router.get("/archive", response_model=ArchiveListing, responses=errors(400, 503),
            summary="The archive's months", description="Every month of the region in the "
            "archive the server was given: its signed Merkle root, rows, time range, chain "
            "link to the month before, whether its manifest's signature holds under the "
            "trusted key, and what this server's last `verify` of it found.")  # fmt: skip
def get_archive(desk: Desk) -> dict[str, Any]:
    return desk.listing()


@router.post("/archive/verify", response_model=Verification, responses=errors(400, 409, 503),
             summary="Verify the archive", description="Run `spotcap archive verify` on one "
             "month or all: every file's SHA-256, the signatures, the Merkle trees, the chain "
             "and the retention. 200 whatever it finds: `ok` says whether the archive holds, "
             "and each finding names the month, the object and what is wrong. As `spotcap "
             "archive verify --json`.")  # fmt: skip
def post_verify(desk: Desk, month: Month = None) -> dict[str, Any]:
    return desk.verify(month)
