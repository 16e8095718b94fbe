"""The HTTP face's representation: JSON bodies of the management media type, errors, entity
tags and conditional requests, and request bodies read as attribute maps (http.py serves them,
http_resources.py answers with them).

Owns: the JSON encoding of the agent's values (bytes as hex, sets and tuples as lists, anything
else as its string), the media type with its `type=` parameter, the error body ({status,
description}), an entity's ETag (the agent's tag, the AMQP face's too) and a page's (a digest of
its JSON), matching If-Match/If-None-Match (weak tags compare equal), a 405 with its Allow
header, whether a content type is JSON, and a request body as a map of attributes (400 when it
is not one).
Must not touch: paths and methods (http.py, http_resources.py), the agent, sockets.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from .model import ManagementError, etag

MEDIA_TYPE = "application/amqp-management+json"
JSON_TYPES = (MEDIA_TYPE, "application/json")

Headers = list[tuple[str, str]]


class Response(NamedTuple):
    status: int
    headers: Headers
    body: bytes


def to_json(value: Any) -> bytes:
    def fallback(obj: Any) -> Any:
        if isinstance(obj, (bytes, bytearray, memoryview)):
            return bytes(obj).hex()
        if isinstance(obj, (set, frozenset, tuple)):
            return list(obj)
        return str(obj)

    return json.dumps(value, default=fallback, separators=(",", ":"), sort_keys=True).encode()


def digest_tag(body: bytes) -> str:
    return '"' + hashlib.sha256(body).hexdigest()[:24] + '"'


def entity_tag(entity: Mapping[str, Any]) -> str:
    return f'"{etag(entity)}"'


def json_response(status: int, value: Any, *headers: tuple[str, str], kind: str | None = None) -> Response:
    body = to_json(value)
    media = MEDIA_TYPE + (f"; type={kind}" if kind else "")
    return Response(status, [("content-type", media), *headers], body)


def error_response(status: int, description: str, *headers: tuple[str, str]) -> Response:
    return json_response(status, {"status": status, "description": description}, *headers, kind="error")


def only(method: str, allowed: str, fn: Callable[[], Response]) -> Response:
    return fn() if method == allowed else error_response(405, f"{method} not allowed here", ("allow", f"{allowed}, HEAD"))


def tag_matches(header: str | None, tag: str) -> bool:
    """Whether an If-Match/If-None-Match header names `tag` (or is `*`); weak tags compare equal."""
    if header is None:
        return False
    tags = [t.strip().removeprefix("W/") for t in header.split(",")]
    return "*" in tags or tag in tags


def with_tag(response: Response, entity: Mapping[str, Any]) -> Response:
    return Response(response.status, [*response.headers, ("etag", entity_tag(entity))], response.body)


def is_json(content_type: str | None) -> bool:
    return content_type is not None and content_type.split(";", 1)[0].strip().lower() in JSON_TYPES


def body_map(body: bytes) -> dict[str, Any]:
    try:
        value = json.loads(body or b"{}")
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ManagementError(400, f"the body is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ManagementError(400, "the body must be a JSON map of attributes")
    return value
