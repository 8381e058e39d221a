"""The archive on S3-compatible storage with Object Lock in compliance mode (ADR-25; Ceph RGW in
production, versitygw in the tests), through boto3.

Every object is written with ``ObjectLockMode=COMPLIANCE`` and a retain-until date: until then
no one, the root account included, can delete that version or shorten its retention, and the
bucket's versioning cannot be suspended. The bucket must have Object Lock enabled (it can only
be enabled when the bucket is created): `S3Storage` creates the bucket that way if it does not
exist, and refuses a bucket without it.

Where S3 is: ``s3://BUCKET/PREFIX``; the endpoint and credentials come from boto3's own
configuration (``AWS_ENDPOINT_URL_S3`` or ``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, profiles). Path-style addressing (what Ceph RGW and versitygw serve
without wildcard DNS) unless ``SPOTCAP_S3_ADDRESSING=virtual``.
"""

from __future__ import annotations

import hashlib
import os
from datetime import datetime
from pathlib import Path
from typing import Any

from replay.archive.storage import ArchiveError, Retention

CONNECT_TIMEOUT_S = 10
READ_TIMEOUT_S = 120
SHA256_METADATA = "spotcap-sha256"
"""The user metadata (``x-amz-meta-spotcap-sha256``) holding each object's SHA-256 (hex)."""


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def parse_s3_url(url: str) -> tuple[str, str]:
    """``s3://bucket/prefix`` -> (bucket, prefix without slashes at the ends)."""
    rest = url.removeprefix("s3://")
    bucket, _, prefix = rest.partition("/")
    if not bucket:
        raise ArchiveError(f"{url!r} names no bucket: write s3://BUCKET or s3://BUCKET/PREFIX")
    return bucket, prefix.strip("/")


class S3Storage:
    enforces_retention = True

    def __init__(self, url: str, *, client: Any = None, create: bool = False) -> None:
        import boto3
        from botocore.config import Config
        from botocore.exceptions import BotoCoreError, ClientError

        self._errors: tuple[type[BaseException], ...] = (BotoCoreError, ClientError, OSError)
        self.url = url
        self.bucket, self.prefix = parse_s3_url(url)
        style = os.environ.get("SPOTCAP_S3_ADDRESSING", "path")
        config = Config(
            s3={"addressing_style": style},
            connect_timeout=CONNECT_TIMEOUT_S,
            read_timeout=READ_TIMEOUT_S,
            retries={"max_attempts": 3, "mode": "standard"},
        )
        self._s3 = client or boto3.client("s3", config=config)
        self._check_bucket(create)

    def _error(self, error: BaseException) -> str:
        response = getattr(error, "response", None)
        if isinstance(response, dict) and "Error" in response:
            e = response["Error"]
            return f"{e.get('Code', '?')}: {e.get('Message', '')}".strip()
        return str(error)

    def _check_bucket(self, create: bool) -> None:
        try:
            self._s3.head_bucket(Bucket=self.bucket)
        except self._errors as error:
            if not create:
                raise ArchiveError(
                    f"cannot reach bucket {self.bucket} ({self._error(error)}); check the URL, "
                    "AWS_ENDPOINT_URL_S3 and the credentials"
                ) from error
            try:
                self._s3.create_bucket(Bucket=self.bucket, ObjectLockEnabledForBucket=True)
            except self._errors as create_error:
                raise ArchiveError(
                    f"cannot create bucket {self.bucket} with Object Lock: "
                    f"{self._error(create_error)}"
                ) from create_error
        if create:
            try:
                lock = self._s3.get_object_lock_configuration(Bucket=self.bucket)
                enabled = lock["ObjectLockConfiguration"]["ObjectLockEnabled"] == "Enabled"
            except self._errors:
                enabled = False
            except KeyError:
                enabled = False
            if not enabled:
                raise ArchiveError(
                    f"bucket {self.bucket} has no Object Lock; the archive needs a bucket "
                    "created with Object Lock enabled (it cannot be turned on afterwards)"
                )

    def _key(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def put(self, key: str, source: Path, retain_until: datetime) -> None:
        """Store `source` as a new locked version of `key`, unless the current version holds
        these bytes already, locked at least as long (an export run again after one cut
        short writes no second version of what the first stored)."""
        digest = sha256_file(source)
        if self._stored(key, digest, retain_until):
            return
        try:
            with source.open("rb") as body:
                self._s3.put_object(
                    Bucket=self.bucket,
                    Key=self._key(key),
                    Body=body,
                    ObjectLockMode="COMPLIANCE",
                    ObjectLockRetainUntilDate=retain_until,
                    ChecksumAlgorithm="SHA256",
                    Metadata={SHA256_METADATA: digest},
                )
        except self._errors as error:
            raise ArchiveError(f"S3 refused {key}: {self._error(error)}") from error

    def _stored(self, key: str, digest: str, retain_until: datetime) -> bool:
        """Whether the current version of `key` is these bytes (by the SHA-256 the archive
        wrote with it), locked in compliance mode until `retain_until` or later."""
        try:
            found = self._s3.head_object(Bucket=self.bucket, Key=self._key(key))
        except self._errors:
            return False  # missing (or unreadable: the put says why)
        until = found.get("ObjectLockRetainUntilDate")
        return (
            found.get("Metadata", {}).get(SHA256_METADATA) == digest
            and found.get("ObjectLockMode") == "COMPLIANCE"
            and until is not None
            and until >= retain_until
        )

    def fetch(self, key: str, target: Path) -> Path:
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._s3.download_file(self.bucket, self._key(key), str(target))
        except self._errors as error:
            raise ArchiveError(f"cannot fetch {key} from S3: {self._error(error)}") from error
        return target

    def read(self, key: str) -> bytes:
        try:
            answer = self._s3.get_object(Bucket=self.bucket, Key=self._key(key))
            data: bytes = answer["Body"].read()
        except self._errors as error:
            raise ArchiveError(f"cannot read {key} from S3: {self._error(error)}") from error
        return data

    def exists(self, key: str) -> bool:
        try:
            self._s3.head_object(Bucket=self.bucket, Key=self._key(key))
        except self._errors:
            return False
        return True

    def keys(self, prefix: str) -> list[str]:
        out: list[str] = []
        strip = len(self.prefix) + 1 if self.prefix else 0
        try:
            pages = self._s3.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=self._key(prefix)
            )
            for page in pages:
                out.extend(str(o["Key"])[strip:] for o in page.get("Contents", []))
        except self._errors as error:
            raise ArchiveError(f"cannot list the archive in S3: {self._error(error)}") from error
        return sorted(out)

    def retention(self, key: str) -> Retention | None:
        try:
            answer = self._s3.get_object_retention(Bucket=self.bucket, Key=self._key(key))
        except self._errors as error:
            code = getattr(error, "response", {}).get("Error", {}).get("Code")
            if code == "NoSuchObjectLockConfiguration":  # a version written without a lock
                return Retention("NONE", datetime.min)
            raise ArchiveError(
                f"cannot read the retention of {key}: {self._error(error)}"
            ) from error
        r = answer.get("Retention") or {}
        if "Mode" not in r:
            return Retention("NONE", datetime.min)
        return Retention(str(r["Mode"]), r["RetainUntilDate"])

    def describe(self) -> str:
        return f"the archive in {self.url}"
