"""A container registry on 127.0.0.1 for the push tests: the Docker Registry HTTP API v2's push half.

The engine pushes to it as to any registry (127.0.0.0/8 is an insecure registry to dockerd by default):
`GET /v2/`, blob existence checks, uploads (POST, PATCH in chunks, PUT with the digest), then the
manifest. Every blob's bytes are hashed as they come and checked against the digest the engine names
(a wrong one is refused, as a real registry refuses it); the bytes themselves are not kept (only their
size), so a GB image costs no disk. Manifests are kept, to read what was pushed.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import threading
import urllib.parse
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from tests.loopback import serve


@dataclass
class Registry:
    """What the registry holds: blob sizes by digest, manifests by (repository, reference)."""

    blobs: dict[str, int] = field(default_factory=dict)
    manifests: dict[tuple[str, str], bytes] = field(default_factory=dict)
    uploads: dict[str, tuple[Any, int]] = field(default_factory=dict)  # upload id -> (running sha256, size)
    refused: list[str] = field(default_factory=list)
    host: str = ""  # 127.0.0.1:PORT once serving
    lock: threading.Lock = field(default_factory=threading.Lock)

    def manifest(self, repository: str, reference: str) -> dict[str, Any] | None:
        raw = self.manifests.get((repository, reference))
        return json.loads(raw) if raw is not None else None


class _Handler(http.server.BaseHTTPRequestHandler):
    registry: Registry
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the stdlib's name
        pass

    def _reply(self, status: int, headers: dict[str, str] | None = None, body: bytes = b"") -> None:
        self.send_response(status)
        self.send_header("Docker-Distribution-API-Version", "registry/2.0")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _body(self) -> Iterator[bytes]:
        """The request body, plain or chunked, a piece at a time."""
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    return
                yield self.rfile.read(size)
                self.rfile.readline()
        remaining = int(self.headers.get("Content-Length") or 0)
        while remaining:
            piece = self.rfile.read(min(remaining, 1 << 20))
            remaining -= len(piece)
            yield piece

    def _route(self) -> tuple[str, str, str, dict[str, list[str]]]:
        """(repository, kind, rest, query) of /v2/<repository>/<kind>/<rest>."""
        url = urllib.parse.urlsplit(self.path)
        path = url.path.removeprefix("/v2/")
        for kind in ("/blobs/uploads/", "/blobs/", "/manifests/"):
            if kind in path:
                repository, rest = path.split(kind, 1)
                return repository, kind.strip("/"), rest, urllib.parse.parse_qs(url.query)
        return "", "", path, {}

    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        repository, kind, rest, _ = self._route()
        if not kind:
            self._reply(200, {"Content-Type": "application/json"}, b"{}")
        elif kind == "manifests" and (repository, rest) in self.registry.manifests:
            body = self.registry.manifests[(repository, rest)]
            digest = "sha256:" + hashlib.sha256(body).hexdigest()
            kind_of = json.loads(body).get("mediaType", "application/vnd.docker.distribution.manifest.v2+json")
            self._reply(200, {"Content-Type": kind_of, "Docker-Content-Digest": digest}, body)
        else:
            self._reply(404)

    def do_HEAD(self) -> None:  # noqa: N802
        repository, kind, rest, _ = self._route()
        if kind == "blobs" and rest in self.registry.blobs:
            self._reply(200, {"Docker-Content-Digest": rest, "X-Blob-Size": str(self.registry.blobs[rest])})
        else:
            self.do_GET()

    def do_POST(self) -> None:  # noqa: N802
        repository, kind, _, _ = self._route()
        for _ in self._body():
            pass
        upload = uuid.uuid4().hex
        with self.registry.lock:
            self.registry.uploads[upload] = (hashlib.sha256(), 0)
        location = f"/v2/{repository}/blobs/uploads/{upload}"
        self._reply(202, {"Location": location, "Range": "0-0", "Docker-Upload-UUID": upload})

    def _take(self, upload: str) -> tuple[Any, int]:
        digest, size = self.registry.uploads[upload]
        for piece in self._body():
            digest.update(piece)
            size += len(piece)
        self.registry.uploads[upload] = (digest, size)
        return digest, size

    def do_PATCH(self) -> None:  # noqa: N802
        repository, _, upload, _ = self._route()
        _, size = self._take(upload)
        location = f"/v2/{repository}/blobs/uploads/{upload}"
        self._reply(202, {"Location": location, "Range": f"0-{max(size - 1, 0)}", "Docker-Upload-UUID": upload})

    def do_PUT(self) -> None:  # noqa: N802
        repository, kind, rest, query = self._route()
        if kind == "manifests":
            body = b"".join(self._body())
            self.registry.manifests[(repository, rest)] = body
            digest = "sha256:" + hashlib.sha256(body).hexdigest()
            self.registry.manifests[(repository, digest)] = body
            self._reply(201, {"Docker-Content-Digest": digest, "Location": f"/v2/{repository}/manifests/{digest}"})
            return
        hashed, size = self._take(rest)
        claimed = (query.get("digest") or [""])[0]
        if "sha256:" + hashed.hexdigest() != claimed:
            self.registry.refused.append(claimed)
            self._reply(400, {"Content-Type": "application/json"}, b'{"errors":[{"code":"DIGEST_INVALID"}]}')
            return
        self.registry.blobs[claimed] = size
        self._reply(201, {"Docker-Content-Digest": claimed, "Location": f"/v2/{repository}/blobs/{claimed}"})


@contextmanager
def serving() -> Iterator[Registry]:
    """A registry on 127.0.0.1 (a free port) for the block; `registry.host` is its `host:port`."""
    registry = Registry()
    with serve(type("Handler", (_Handler,), {"registry": registry})) as host:
        registry.host = host
        yield registry
