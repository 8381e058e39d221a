"""The workload's bucket (ADR-19): one S3 bucket per workload, readable by the workload only.

`Bucket` is the seam the client writes through; `S3Bucket` is it on any S3 API (Ceph RGW in
production, versitygw in the tests) through boto3, with path-style addressing. Parts stream up
in multipart uploads above `MULTIPART_BYTES`, so a save killed half-way leaves an incomplete
upload (and perhaps some finished parts) but never a manifest; `abort_upload` clears those.

`provision_bucket` creates a workload's bucket with the workload's own credentials (so the
workload owns it) and a bucket policy that grants the workload's principal alone; nothing is
granted to the platform, whose credentials are refused on every object.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO, Protocol

from boto3.s3.transfer import TransferConfig
from botocore.exceptions import BotoCoreError, ClientError

__all__ = [
    "MULTIPART_BYTES",
    "Bucket",
    "ObjectInfo",
    "S3Bucket",
    "StoreAccessDeniedError",
    "StoreError",
    "bucket_for",
    "provision_bucket",
    "workload_policy",
]

MULTIPART_BYTES = 16 * 1024 * 1024
_ACCESS_DENIED = frozenset({"AccessDenied", "Forbidden", "403", "InvalidAccessKeyId"})


class StoreError(Exception):
    """The bucket refused or failed an operation; says which, on which key, and the S3 code."""

    def __init__(self, message: str, code: str = "") -> None:
        super().__init__(message)
        self.code = code


class StoreAccessDeniedError(StoreError):
    """The credentials in use may not do this on this bucket."""


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    key: str
    size: int
    modified_us: int


class Bucket(Protocol):
    """The operations a checkpoint client needs of its bucket."""

    name: str

    def put(self, key: str, source: BinaryIO) -> None: ...

    def put_bytes(self, key: str, data: bytes) -> None: ...

    def get(self, key: str, sink: BinaryIO) -> None: ...

    def get_bytes(self, key: str) -> bytes | None:
        """None when there is no such object."""
        ...

    def objects(self, prefix: str) -> list[ObjectInfo]: ...

    def delete(self, keys: Iterable[str]) -> None: ...

    def uploads(self, prefix: str) -> list[tuple[str, str]]:
        """(key, upload id) of every incomplete multipart upload under `prefix`."""
        ...

    def abort_upload(self, key: str, upload_id: str) -> None: ...


def bucket_for(workload_id: str) -> str:
    """The bucket of a workload: ``ckpt-<workload>`` (shortened with a hash past 63)."""
    name = f"ckpt-{workload_id}"
    if len(name) <= 63:
        return name
    digest = hashlib.sha256(workload_id.encode()).hexdigest()[:10]
    return f"{name[:52].rstrip('-')}-{digest}"


def workload_policy(bucket: str, principals: Iterable[str]) -> str:
    """A bucket policy that allows every S3 action to `principals` (the workload's access key
    ids) and to nobody else."""
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Sid": "WorkloadOnly",
                    "Effect": "Allow",
                    "Principal": {"AWS": sorted(principals)},
                    "Action": ["s3:*"],
                    "Resource": [f"arn:aws:s3:::{bucket}", f"arn:aws:s3:::{bucket}/*"],
                }
            ],
        }
    )


def _why(error: ClientError | BotoCoreError, what: str) -> StoreError:
    if isinstance(error, ClientError):
        code = str(error.response.get("Error", {}).get("Code", ""))
        status = str(error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))
        kind = StoreAccessDeniedError if code in _ACCESS_DENIED or status == "403" else StoreError
        return kind(f"{what}: {code or status}", code or status)
    return StoreError(f"{what}: {type(error).__name__}")


class S3Bucket:
    """One workload's bucket through a boto3 S3 client made with the workload's credentials."""

    def __init__(self, client: Any, name: str) -> None:
        self._s3 = client
        self.name = name
        self._transfer = TransferConfig(
            multipart_threshold=MULTIPART_BYTES, multipart_chunksize=MULTIPART_BYTES
        )

    def __repr__(self) -> str:
        return f"S3Bucket({self.name!r})"

    def put(self, key: str, source: BinaryIO) -> None:
        try:
            self._s3.upload_fileobj(source, self.name, key, Config=self._transfer)
        except (ClientError, BotoCoreError) as error:
            raise _why(error, f"put {self.name}/{key}") from None
        except Exception as error:  # boto3's transfer manager wraps failures in its own
            cause = error.__cause__ or error.__context__
            if isinstance(cause, ClientError | BotoCoreError):
                raise _why(cause, f"put {self.name}/{key}") from None
            raise StoreError(f"put {self.name}/{key}: {type(error).__name__}") from None

    def put_bytes(self, key: str, data: bytes) -> None:
        try:
            self._s3.put_object(Bucket=self.name, Key=key, Body=data)
        except (ClientError, BotoCoreError) as error:
            raise _why(error, f"put {self.name}/{key}") from None

    def get(self, key: str, sink: BinaryIO) -> None:
        """Into a seekable `sink`: ranged GETs in parallel above `MULTIPART_BYTES`."""
        try:
            self._s3.download_fileobj(self.name, key, sink, Config=self._transfer)
        except (ClientError, BotoCoreError) as error:
            raise _why(error, f"get {self.name}/{key}") from None
        except Exception as error:  # boto3's transfer manager wraps failures in its own
            cause = error.__cause__ or error.__context__
            if isinstance(cause, ClientError | BotoCoreError):
                raise _why(cause, f"get {self.name}/{key}") from None
            raise StoreError(f"get {self.name}/{key}: {type(error).__name__}") from None

    def get_bytes(self, key: str) -> bytes | None:
        try:
            answer = self._s3.get_object(Bucket=self.name, Key=key)
            return bytes(answer["Body"].read())
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                return None
            raise _why(error, f"get {self.name}/{key}") from None
        except BotoCoreError as error:
            raise _why(error, f"get {self.name}/{key}") from None

    def objects(self, prefix: str) -> list[ObjectInfo]:
        return list(self._list(prefix))

    def _list(self, prefix: str) -> Iterator[ObjectInfo]:
        try:
            pages = self._s3.get_paginator("list_objects_v2").paginate(
                Bucket=self.name, Prefix=prefix
            )
            for page in pages:
                for item in page.get("Contents", ()):
                    modified = item["LastModified"]
                    yield ObjectInfo(
                        str(item["Key"]), int(item["Size"]), int(modified.timestamp() * 1e6)
                    )
        except (ClientError, BotoCoreError) as error:
            raise _why(error, f"list {self.name}/{prefix}") from None

    def delete(self, keys: Iterable[str]) -> None:
        batch = [{"Key": k} for k in keys]
        for start in range(0, len(batch), 1000):
            try:
                answer = self._s3.delete_objects(
                    Bucket=self.name, Delete={"Objects": batch[start : start + 1000]}
                )
            except (ClientError, BotoCoreError) as error:
                raise _why(error, f"delete in {self.name}") from None
            errors = answer.get("Errors") or []
            if errors:
                code = str(errors[0].get("Code", ""))
                kind = StoreAccessDeniedError if code in _ACCESS_DENIED else StoreError
                raise kind(f"delete {self.name}/{errors[0].get('Key')}: {code}", code)

    def uploads(self, prefix: str) -> list[tuple[str, str]]:
        try:
            answer = self._s3.list_multipart_uploads(Bucket=self.name, Prefix=prefix)
        except (ClientError, BotoCoreError) as error:
            raise _why(error, f"list uploads in {self.name}/{prefix}") from None
        return [(str(u["Key"]), str(u["UploadId"])) for u in answer.get("Uploads", ())]

    def abort_upload(self, key: str, upload_id: str) -> None:
        try:
            self._s3.abort_multipart_upload(Bucket=self.name, Key=key, UploadId=upload_id)
        except (ClientError, BotoCoreError) as error:
            raise _why(error, f"abort the upload of {self.name}/{key}") from None


def provision_bucket(client: Any, workload_id: str, principals: Iterable[str]) -> S3Bucket:
    """Create the workload's bucket (if it is not there) with the workload's own credentials
    in `client`, and put the policy that grants `principals` alone."""
    name = bucket_for(workload_id)
    try:
        client.create_bucket(Bucket=name)
    except ClientError as error:
        code = error.response.get("Error", {}).get("Code")
        if code not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
            raise _why(error, f"create bucket {name}") from None
    except BotoCoreError as error:
        raise _why(error, f"create bucket {name}") from None
    try:
        client.put_bucket_policy(Bucket=name, Policy=workload_policy(name, principals))
    except (ClientError, BotoCoreError) as error:
        raise _why(error, f"put the policy of {name}") from None
    return S3Bucket(client, name)
