"""A hostile registry: a raw HTTP/1.1 front on loopback that lies, drips and bloats.

It stands before the real distribution registry and forwards manifest requests to it, then
misbehaves in exactly one way, chosen by :attr:`HostileRegistry.behaviour`:

==========================  ==================================================================
``honest``                  forwards as it is
``drip-head``               a HEAD's status line and headers, one byte at a time
``drip-body``               HEAD omits the digest; the GET body one byte at a time
``oversized-body``          HEAD omits the digest; GET sends a JSON manifest over 4 MiB, chunked
``gzip-body``               HEAD omits the digest; GET sends the manifest gzip-encoded
``empty-204``               HEAD omits the digest; GET answers 204 with no body
``html-200``                HEAD omits the digest; GET answers 200 ``text/html``
``octet-stream-200``        HEAD omits the digest; GET answers the manifest as
                            ``application/octet-stream``
``not-json-200``            HEAD omits the digest; GET answers 200 with a manifest media type and
                            a body that is not JSON
``tampered-index``          a manifest GET answers the registry's index with one more platform
                            manifest added (the body no longer hashes to the digest asked for)
``oversized-token``         a Bearer challenge whose token service answers JSON over 64 KiB
``redirect``                manifest requests are redirected (302) to :attr:`redirect_to`
``throttle``                manifest requests are answered 429 with :attr:`retry_after`
``silent``                  every request is read and never answered: the connection stays
                            open until the client gives up (or :meth:`HostileRegistry.stop`)
==========================  ==================================================================

These misbehave only for requests whose path contains :attr:`HostileRegistry.only` (all
requests when it is empty), and forward the others as they are — so that one signature
manifest, one blob or the referrers endpoint can be singled out:

==========================  ==================================================================
``status``                  answers :attr:`status` with no body
``oversized-get``           a GET answers 200 with a JSON body of :attr:`body_bytes`, chunked
``tampered-get``            a GET answers what the registry sent with one byte more (a manifest
                            no longer hashes to its digest, a blob no longer to its descriptor)
``redirect-get``            a GET is redirected (302) to :attr:`redirect_to`
``html-get``                a GET answers 200 ``text/html``, as a sign-in page or a catch-all
                            route would
``late``                    the first such request gets what the registry answered when it
                            arrived, but only once :meth:`HostileRegistry.release` is called:
                            a lookup whose read came before a change and whose answer after it
                            (re-armed by :meth:`HostileRegistry.hold_next`)
==========================  ==================================================================

``require_basic`` adds a Basic challenge before any of it. It speaks HTTP itself over asyncio
streams because an HTTP framework will neither send headers slowly nor a body that contradicts
them; ``tls`` serves HTTPS. Every request is recorded as :class:`Received` — with its headers
and whether the whole answer was written before the client hung up — so tests assert what
the registry saw, not what the client believes.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import ssl
import threading
from dataclasses import dataclass, field
from http import HTTPStatus
from pathlib import Path

import httpx

from support.certificates import loopback_certificate

__all__ = [
    "OVERSIZED_MANIFEST_BYTES",
    "TAMPERED_CHILD",
    "HostileRegistry",
    "Received",
    "tls_contexts",
]

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
# One byte over the client's manifest cap (4 MiB).
OVERSIZED_MANIFEST_BYTES = 4 * 1024 * 1024 + 1
OVERSIZED_TOKEN_BYTES = 64 * 1024 + 1
# The platform manifest a tampered index adds: content the tag never named.
TAMPERED_CHILD = "sha256:" + "e7" * 32
# Behaviours that single out the requests whose path contains HostileRegistry.only.
_SINGLED_OUT_BEHAVIOURS = frozenset(
    {"status", "oversized-get", "tampered-get", "redirect-get", "html-get", "late"}
)
# Behaviours that omit the digest from the HEAD and mangle the GET fallback's answer.
_GET_FALLBACK_BEHAVIOURS = frozenset(
    {
        "drip-body",
        "oversized-body",
        "gzip-body",
        "empty-204",
        "html-200",
        "octet-stream-200",
        "not-json-200",
    }
)


@dataclass
class Received:
    """One request as the front received it, and how its answer went."""

    method: str
    target: str  # path and query
    headers: dict[str, str]  # names lowercased
    status: int = 0
    completed: bool | None = None  # None while answering; False if the client hung up first


@dataclass
class HostileRegistry:
    """A misbehaving front for ``backend`` (host:port of a plain-HTTP registry)."""

    backend: str
    behaviour: str = "honest"
    drip_interval: float = 0.05
    retry_after: str = "60"
    redirect_to: str | None = None  # scheme://host:port the redirect points at
    require_basic: bool = False
    tls: ssl.SSLContext | None = None
    only: str = ""  # the behaviours of the second table apply to paths containing this
    status: int = 500
    body_bytes: int = OVERSIZED_MANIFEST_BYTES

    received: list[Received] = field(default_factory=list)
    port: int = 0
    _loop: asyncio.AbstractEventLoop | None = None
    _open: set[asyncio.StreamWriter] = field(default_factory=set)
    _server: asyncio.Server | None = None
    _thread: threading.Thread | None = None
    _late_taken: bool = False  # the one late answer of "late" was taken
    _released: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}"

    # --- lifecycle ---------------------------------------------------------------------

    def start(self) -> HostileRegistry:
        ready = threading.Event()

        def serve() -> None:
            self._loop = asyncio.new_event_loop()
            self._loop.run_until_complete(self._start_server())
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=serve, name="hostile-registry", daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("the hostile registry did not start")
        return self

    async def _start_server(self) -> None:
        self._backend = httpx.AsyncClient(base_url=f"http://{self.backend}", timeout=30)
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.tls)
        self.port = self._server.sockets[0].getsockname()[1]

    def stop(self) -> None:
        if self._loop is None:
            return

        async def shutdown() -> None:
            if self._server is not None:
                self._server.close()
            for writer in list(self._open):  # a silent front lets its clients go at once
                writer.close()
            await self._backend.aclose()

        asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(10)
        self._loop = None  # stopped: stopping again does nothing

    def hold_next(self, only: str) -> None:
        """Behave ``late`` for the next request whose path contains ``only``."""
        self._released = asyncio.Event()
        self._late_taken = False
        self.behaviour, self.only = "late", only

    def release(self) -> None:
        """Let the held late answer go."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._released.set)

    # --- one connection, one request -----------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._open.add(writer)
        try:
            await self._serve_one(reader, writer)
        finally:
            self._open.discard(writer)

    async def _serve_one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            writer.close()
            return
        request_line, *lines = head.decode("latin-1").split("\r\n")
        method, target, _ = request_line.split(" ", 2)
        headers = {}
        for line in lines:
            name, sep, value = line.partition(":")
            if sep:
                headers[name.strip().lower()] = value.strip()
        received = Received(method, target, headers)
        self.received.append(received)
        status, answer_headers, body, chunked = await self._answer(method, target, headers)
        received.status = status
        drip_head = self.behaviour == "drip-head"
        drip_body = self.behaviour == "drip-body" and method == "GET"
        received.completed = await self._write(
            writer, _head(status, answer_headers, body, chunked), drip_head
        ) and await self._write(writer, _framed(body, chunked, method), drip_body)
        writer.close()

    async def _write(self, writer: asyncio.StreamWriter, data: bytes, drip: bool) -> bool:
        """Write ``data`` (a byte at a time when dripping); False if the client hung up first."""
        try:
            if not drip:
                writer.write(data)
                await writer.drain()
                return True
            for index in range(len(data)):
                if writer.is_closing():
                    return False
                writer.write(data[index : index + 1])
                await writer.drain()
                await asyncio.sleep(self.drip_interval)
            return True
        except (ConnectionError, OSError):
            return False

    async def _answer(
        self, method: str, target: str, headers: dict[str, str]
    ) -> tuple[int, list[tuple[str, str]], bytes, bool]:
        """(status, headers, body, chunked) for one request."""
        if self.behaviour == "silent":
            await asyncio.Event().wait()  # until the client hangs up or the front stops
        if self.require_basic and not headers.get("authorization", "").startswith("Basic "):
            return 401, [("WWW-Authenticate", 'Basic realm="hostile"')], b"", False
        if target.startswith("/token"):
            token = {"token": "t" * OVERSIZED_TOKEN_BYTES, "expires_in": 300}
            return 200, [("Content-Type", "application/json")], json.dumps(token).encode(), False
        if self.behaviour == "oversized-token" and "authorization" not in headers:
            challenge = f'Bearer realm="{self.url}/token",service="hostile"'
            return 401, [("WWW-Authenticate", challenge)], b"", False
        if self.behaviour in _SINGLED_OUT_BEHAVIOURS and self.only in target:
            singled_out = await self._singled_out(method, target, headers)
            if singled_out is not None:
                return singled_out
        if "/manifests/" in target and self.behaviour == "throttle":
            return 429, [("Retry-After", self.retry_after)], b"", False
        if "/manifests/" in target and self.behaviour == "redirect":
            assert self.redirect_to is not None
            return 302, [("Location", f"{self.redirect_to}{target}")], b"", False
        upstream = await self._backend.request(
            method, target, headers={"Accept": headers.get("accept", "")}
        )
        body = upstream.content
        answer = [
            (name, value)
            for name, value in upstream.headers.items()
            if name.lower() in ("content-type", "docker-content-digest")
        ]
        if "/manifests/" in target and method == "GET" and self.behaviour == "tampered-index":
            index = json.loads(body)
            index["manifests"].append({**index["manifests"][0], "digest": TAMPERED_CHILD})
            return upstream.status_code, answer, json.dumps(index).encode(), False
        if "/manifests/" not in target or self.behaviour not in _GET_FALLBACK_BEHAVIOURS:
            return upstream.status_code, answer, body, False
        if method == "HEAD":  # the digest header omitted: the client must GET the manifest
            return 200, [(n, v) for n, v in answer if n.lower() == "content-type"], b"", False
        return self._mangled(body)

    async def _singled_out(
        self, method: str, target: str, headers: dict[str, str]
    ) -> tuple[int, list[tuple[str, str]], bytes, bool] | None:
        """The answer of a behaviour of the second table; None: forward as it is."""
        if self.behaviour == "status":
            return self.status, [], b"", False
        if self.behaviour == "late":
            if self._late_taken:
                return None
            self._late_taken = True
            upstream = await self._backend.request(
                method, target, headers={"Accept": headers.get("accept", "")}
            )
            await self._released.wait()
            answer = [
                (name, value)
                for name, value in upstream.headers.items()
                if name.lower() in ("content-type", "docker-content-digest")
            ]
            return upstream.status_code, answer, upstream.content, False
        if method != "GET":
            return None
        if self.behaviour == "redirect-get":
            assert self.redirect_to is not None
            return 302, [("Location", f"{self.redirect_to}{target}")], b"", False
        if self.behaviour == "html-get":
            return 200, [("Content-Type", "text/html")], b"<html>Sign in</html>", False
        upstream = await self._backend.get(target, headers={"Accept": headers.get("accept", "")})
        kind = [("Content-Type", upstream.headers.get("content-type", OCI_MANIFEST))]
        if self.behaviour == "tampered-get":
            return upstream.status_code, kind, upstream.content + b" ", False
        padding = self.body_bytes - len(b'{"pad":""}')
        return 200, kind, b'{"pad":"' + b"x" * padding + b'"}', True

    def _mangled(self, manifest: bytes) -> tuple[int, list[tuple[str, str]], bytes, bool]:
        oci = [("Content-Type", OCI_MANIFEST)]
        if self.behaviour == "drip-body":
            return 200, oci, manifest, False
        if self.behaviour == "oversized-body":
            padding = OVERSIZED_MANIFEST_BYTES - len(b'{"pad":""}')
            return 200, oci, b'{"pad":"' + b"x" * padding + b'"}', True
        if self.behaviour == "gzip-body":
            return 200, [*oci, ("Content-Encoding", "gzip")], gzip.compress(manifest), False
        if self.behaviour == "empty-204":
            return 204, [], b"", False
        if self.behaviour == "html-200":
            return 200, [("Content-Type", "text/html")], b"<html>Sign in</html>", False
        if self.behaviour == "octet-stream-200":
            return 200, [("Content-Type", "application/octet-stream")], manifest, False
        if self.behaviour == "not-json-200":
            return 200, oci, b"this is not a manifest", False
        raise ValueError(f"unknown behaviour {self.behaviour!r}")


def _head(status: int, headers: list[tuple[str, str]], body: bytes, chunked: bool) -> bytes:
    framing = [("Transfer-Encoding", "chunked")] if chunked else []
    if not chunked and status != 204:
        framing = [("Content-Length", str(len(body)))]
    lines = [f"HTTP/1.1 {status} {HTTPStatus(status).phrase}"]
    lines += [f"{name}: {value}" for name, value in [*headers, *framing, ("Connection", "close")]]
    # UTF-8, so that a header such as "Retry-After: ²" goes out as the bytes a server would send.
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _framed(body: bytes, chunked: bool, method: str) -> bytes:
    if method == "HEAD" or not body:
        return b""
    if not chunked:
        return body
    step = 64 * 1024
    chunks = [body[i : i + step] for i in range(0, len(body), step)]
    return b"".join(f"{len(c):x}\r\n".encode() + c + b"\r\n" for c in chunks) + b"0\r\n\r\n"


def tls_contexts(directory: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """(server, client) contexts for a self-signed certificate of 127.0.0.1 (made by openssl)."""
    key, cert = loopback_certificate(directory)
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(cert, key)
    return server, ssl.create_default_context(cafile=str(cert))
