"""A client for the two calls of the Confluent Schema Registry REST API the codec needs.

Registering is idempotent on the registry's side (the same schema under the same subject gets
the same id); fetched schemas are cached by the codec, so this client does no caching.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any

_CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


class RegistryError(RuntimeError):
    """The registry could not be reached or refused a request."""


class HttpSchemaRegistry:
    """Talks to a Confluent-compatible registry (Confluent, Karapace, Apicurio's ccompat API)."""

    def __init__(self, url: str, timeout_s: float = 10.0) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s

    def register(self, subject: str, schema: Mapping[str, Any]) -> int:
        body = json.dumps({"schema": json.dumps(schema, sort_keys=True)}).encode()
        answer = self._call("POST", f"/subjects/{subject}/versions", body)
        return int(answer["id"])

    def schema(self, schema_id: int) -> Mapping[str, Any]:
        answer = self._call("GET", f"/schemas/ids/{schema_id}", None)
        parsed: Mapping[str, Any] = json.loads(answer["schema"])
        return parsed

    def _call(self, method: str, path: str, body: bytes | None) -> Mapping[str, Any]:
        request = urllib.request.Request(
            self.url + path,
            data=body,
            method=method,
            headers={"Content-Type": _CONTENT_TYPE, "Accept": _CONTENT_TYPE},
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                answer: Mapping[str, Any] = json.loads(response.read())
                return answer
        except urllib.error.HTTPError as error:
            detail = error.read().decode(errors="replace")[:300]
            raise RegistryError(
                f"schema registry {self.url} answered {error.code} to {method} {path}: {detail}"
            ) from error
        except (urllib.error.URLError, TimeoutError, OSError) as error:
            # In words: urllib's own text is "<urlopen error [Errno 111] ...>", a timeout's "".
            reason = error.reason if isinstance(error, urllib.error.URLError) else error
            said = (
                f"no answer within {self.timeout_s:.0f} s"
                if isinstance(reason, TimeoutError)
                else getattr(reason, "strerror", None) or str(reason) or type(reason).__name__
            )
            raise RegistryError(
                f"schema registry {self.url} is unreachable ({said.lower()}); check "
                "SPOTCAP_SCHEMA_REGISTRY_URL or unset it to use single-object encoding"
            ) from error
