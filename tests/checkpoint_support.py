"""What the checkpoint client's tests share: a workload set up as in production on the real
versitygw and OpenBao (its own S3 account owning its bucket, its own transit key and token), the
control plane's credentials beside it (an S3 account of its own, an OpenBao token without the
workload's grant), and the root of each, standing in for whoever runs the storage."""

from __future__ import annotations

import json
import os
import secrets
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
import hvac
from botocore.config import Config

from checkpoint import CheckpointClient, Retention, S3Bucket, TransitKeys
from checkpoint.provision import provision_workload_key
from checkpoint.store import provision_bucket
from infra import servers
from schemas.checkpoints import Failed, Quarantined, Written

CONTROL_PLANE_POLICY = 'path "transit/sign/*" { capabilities = ["update"] }\n'


def s3_client(server: servers.Server, access: str, secret: str) -> Any:
    return boto3.client(
        "s3",
        endpoint_url=server.address,
        aws_access_key_id=access,
        aws_secret_access_key=secret,
        region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 2}),
    )


@dataclass
class Reports:
    """A reporter that keeps what it is told (the agent's side in these tests)."""

    messages: list[Written | Failed | Quarantined] = field(default_factory=list)

    def report(self, message: Written | Failed | Quarantined) -> None:
        self.messages.append(message)


@dataclass
class Workload:
    workload_id: str
    gw: servers.Server
    bao: servers.Server
    s3: Any
    """The workload's own S3 client (it owns the bucket)."""
    bucket: S3Bucket
    key_name: str
    token: str
    """The workload's OpenBao token: data keys and unwrapping on its key, nothing else."""
    control_plane_s3: Any
    control_plane_token: str
    root_s3: Any
    access: str
    secret: str

    def child_env(self, unit_id: str, **extra: Any) -> dict[str, str]:
        """The environment of a workload process (`tests.checkpoint_workload`): its own
        credentials travel in the environment, never on a command line."""
        config = {
            "gw": self.gw.address,
            "access": self.access,
            "secret": self.secret,
            "bucket": self.bucket.name,
            "bao": self.bao.address,
            "token": self.token,
            "key": self.key_name,
            "workload": self.workload_id,
            "unit": unit_id,
            **extra,
        }
        return {**os.environ, "CKPT_TEST": json.dumps(config)}

    def keys(self, token: str | None = None) -> TransitKeys:
        return TransitKeys(self.bao.address, token or self.token, self.key_name)

    def client(
        self,
        unit_id: str = "unit-1",
        *,
        retention: Retention | None = None,
        reporter: Any = None,
        **kwargs: Any,
    ) -> CheckpointClient:
        return CheckpointClient(
            self.workload_id,
            unit_id,
            self.bucket,
            self.keys(),
            retention=retention,
            reporter=reporter,
            **kwargs,
        )


def client_from_env() -> tuple[CheckpointClient, dict[str, Any]]:
    """In a workload process: the client its environment describes, and that description."""
    config: dict[str, Any] = json.loads(os.environ["CKPT_TEST"])
    gw = servers.Server("versitygw", config["gw"], 0, Path("."), Path("."))
    bucket = S3Bucket(s3_client(gw, config["access"], config["secret"]), config["bucket"])
    keys = TransitKeys(config["bao"], config["token"], config["key"])
    return CheckpointClient(config["workload"], config["unit"], bucket, keys), config


def make_workload(gw: servers.Server, bao: servers.Server) -> Workload:
    """A workload of its own (a new id, accounts, bucket, key and tokens) on the servers."""
    workload_id = f"wl-{uuid.uuid4().hex[:10]}"
    access, secret = f"{workload_id}-key", secrets.token_urlsafe(18)
    cp_access, cp_secret = f"cp-{uuid.uuid4().hex[:10]}", secrets.token_urlsafe(18)
    servers.versitygw_create_user(gw, access, secret, "userplus")  # may create buckets
    servers.versitygw_create_user(gw, cp_access, cp_secret, "user")
    s3 = s3_client(gw, access, secret)
    bucket = provision_bucket(s3, workload_id, [access])
    root_token = servers.openbao_token(bao)
    key = provision_workload_key(bao.address, root_token, workload_id)
    admin = hvac.Client(url=bao.address, token=root_token, timeout=10)
    token = admin.auth.token.create(policies=[key.policy_name], ttl="2h")["auth"]["client_token"]
    admin.sys.create_or_update_policy("spotcap-control-plane", CONTROL_PLANE_POLICY)
    cp_token = admin.auth.token.create(policies=["spotcap-control-plane"], ttl="2h")["auth"][
        "client_token"
    ]
    root_access, root_secret = servers.versitygw_credentials(gw)
    return Workload(
        workload_id,
        gw,
        bao,
        s3,
        bucket,
        key.key_name,
        token,
        s3_client(gw, cp_access, cp_secret),
        cp_token,
        s3_client(gw, root_access, root_secret),
        access,
        secret,
    )
