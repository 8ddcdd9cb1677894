"""Docker Hub's token and rate-limit behaviour, reproduced in front of the real registry.

The front is a small HTTP server on loopback that forwards ``/v2/`` to a real distribution
registry and adds what Docker Hub does around it:

* every ``/v2/`` request without a valid Bearer token is answered 401 with
  ``WWW-Authenticate: Bearer realm="<front>/token",service="registry.test",scope=…``;
* ``/token`` issues tokens (anonymous, or for the configured users with Basic auth — the
  password is checked: a wrong one is answered 401, as Docker Hub does) with an
  ``expires_in`` lifetime, for every ``scope`` parameter of the request (as Docker Hub does;
  ``single_scope_tokens`` refuses requests naming several, as a stricter token service may);
* manifest responses carry ``ratelimit-limit`` / ``ratelimit-remaining`` (``N;w=SECONDS``) and
  ``docker-ratelimit-source`` (the client's address, or an opaque id of the user — Docker Hub
  sends a user id, never the name); only manifest GETs lower the remaining count (HEADs are free);
* at zero remaining, manifest requests get Docker Hub's JSON 429 with ``Retry-After``;
* a repository listed in ``private`` answers manifest requests of any other identity 404
  ``NAME_UNKNOWN`` — as registries that hide private repositories from those who may not read
  them do (GitHub's, GitLab's): to such an identity a signed digest looks unsigned.

It records every request it served, so tests assert what the registry actually received.
Switches reproduce failures a real registry shows: an omitted or malformed digest header,
a token service answering non-JSON, added latency, 5xx.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import secrets
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

import httpx
from aiohttp import web

__all__ = ["HubFront", "ServedRequest", "user_id"]

SERVICE = "registry.test"


def user_id(user: str) -> str:
    """The opaque id the front reports for ``user`` (Docker Hub reports a UUID, not the name)."""
    return hashlib.sha256(user.encode()).hexdigest()[:32]


@dataclass(frozen=True)
class ServedRequest:
    method: str
    path: str
    kind: str  # "token", "manifest", "other"
    identity: str
    status: int
    scopes: tuple[str, ...] = ()  # of a token request, in the order asked


@dataclass
class HubFront:
    """A Docker-Hub-like front for ``backend`` (host:port of a plain-HTTP registry)."""

    backend: str
    limit: int | None = 100
    remaining: int = 100
    window_seconds: int = 21600
    token_lifetime: int = 300
    users: dict[str, str] = field(default_factory=dict)
    retry_after: int = 60
    # Failure switches.
    omit_digest: bool = False
    malformed_digest: bool = False
    token_not_json: bool = False
    delay_seconds: float = 0.0
    fail_status: int | None = None
    single_scope_tokens: bool = False
    # Answer every challenge after the first only once a request carrying a token was served:
    # two requests that met the challenge together, the second's 401 read after the first's
    # token was in use.
    late_second_challenge: bool = False
    # repository path → the identities that may read it; everyone else is answered 404.
    private: dict[str, frozenset[str]] = field(default_factory=dict)

    served: list[ServedRequest] = field(default_factory=list)
    in_flight: int = 0
    max_in_flight: int = 0
    # token → (identity, granted scopes, expires at)
    _tokens: dict[str, tuple[str, frozenset[str], float]] = field(default_factory=dict)
    _remaining_by_identity: dict[str, int] = field(default_factory=dict)
    port: int = 0
    _challenges: int = 0
    _token_used: asyncio.Event | None = None
    _loop: asyncio.AbstractEventLoop | None = None
    _runner: web.AppRunner | None = None
    _thread: threading.Thread | None = None

    # --- what tests read ---------------------------------------------------------------

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def counts(self) -> Counter[tuple[str, str]]:
        """(kind, method) → number of requests served."""
        return Counter((r.kind, r.method) for r in self.served)

    def remaining_for(self, identity: str) -> int:
        return self._remaining_by_identity.get(identity, self.remaining)

    # --- lifecycle ---------------------------------------------------------------------

    def start(self) -> HubFront:
        ready = threading.Event()

        def serve() -> None:
            self._loop = asyncio.new_event_loop()
            asyncio.set_event_loop(self._loop)
            self._loop.run_until_complete(self._start_server())
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=serve, name="hub-front", daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("the Docker Hub front did not start")
        return self

    async def _start_server(self) -> None:
        self._token_used = asyncio.Event()
        app = web.Application()
        app.router.add_get("/token", self._token)
        app.router.add_route("*", "/v2/{tail:.*}", self._registry)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", self.port)
        await site.start()
        server = site._server
        assert server is not None
        self.port = server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self._backend = httpx.AsyncClient(base_url=f"http://{self.backend}", timeout=30)

    def stop(self) -> None:
        if self._loop is None:
            return

        async def shutdown() -> None:
            await self._backend.aclose()
            if self._runner is not None:
                await self._runner.cleanup()

        asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(10)

    # --- handlers ----------------------------------------------------------------------

    def _identity_of_basic(self, request: web.Request) -> str | None:
        header = request.headers.get("Authorization", "")
        if not header.startswith("Basic "):
            return None
        user, _, password = base64.b64decode(header[6:]).decode().partition(":")
        return user if self.users.get(user) == password else ""

    async def _token(self, request: web.Request) -> web.Response:
        identity = self._identity_of_basic(request)
        if identity == "":
            return self._record(
                request,
                "token",
                "?",
                web.json_response({"details": "incorrect username or password"}, status=401),
            )
        identity = identity or "anonymous"
        if self.token_not_json:
            return self._record(request, "token", identity, web.Response(text="<html>oops</html>"))
        scopes = tuple(request.query.getall("scope", []))
        if self.single_scope_tokens and len(scopes) > 1:
            refused = web.json_response({"details": "one scope per request"}, status=403)
            return self._record(request, "token", identity, refused, scopes)
        token = secrets.token_hex(16)
        self._tokens[token] = (identity, frozenset(scopes), time.time() + self.token_lifetime)
        body = {
            "token": token,
            "access_token": token,
            "expires_in": self.token_lifetime,
            "issued_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        return self._record(request, "token", identity, web.json_response(body), scopes)

    def _authorized_identity(self, request: web.Request, path: str) -> str | None:
        header = request.headers.get("Authorization", "")
        if not header.startswith("Bearer "):
            return None
        entry = self._tokens.get(header[7:])
        if entry is None or time.time() >= entry[2]:
            return None
        identity, scopes, _ = entry
        return identity if f"repository:{path}:pull" in scopes else None

    def _ratelimit_headers(self, identity: str) -> dict[str, str]:
        if self.limit is None:
            return {}
        left = self.remaining_for(identity)
        return {
            "ratelimit-limit": f"{self.limit};w={self.window_seconds}",
            "ratelimit-remaining": f"{max(left, 0)};w={self.window_seconds}",
            "docker-ratelimit-source": "127.0.0.1"
            if identity == "anonymous"
            else user_id(identity),
        }

    async def _registry(self, request: web.Request) -> web.StreamResponse:
        tail = request.match_info["tail"]
        is_manifest = "/manifests/" in tail
        path = tail.split("/manifests/")[0] if is_manifest else ""
        kind = "manifest" if is_manifest else "other"
        identity = self._authorized_identity(request, path) if is_manifest else "anonymous"
        if identity is None:
            self._challenges += 1
            if self.late_second_challenge and self._challenges > 1:
                assert self._token_used is not None
                await asyncio.wait_for(self._token_used.wait(), timeout=30)
            challenge = (
                f'Bearer realm="http://{self.host}/token",service="{SERVICE}",'
                f'scope="repository:{path}:pull"'
            )
            return self._record(
                request,
                kind,
                "?",
                web.json_response(
                    {"errors": [{"code": "UNAUTHORIZED"}]},
                    status=401,
                    headers={"WWW-Authenticate": challenge},
                ),
            )
        if self._token_used is not None:
            self._token_used.set()
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            return await self._serve_authorized(request, tail, kind, identity, is_manifest)
        finally:
            self.in_flight -= 1

    async def _serve_authorized(
        self, request: web.Request, tail: str, kind: str, identity: str, is_manifest: bool
    ) -> web.StreamResponse:
        if self.delay_seconds:
            await asyncio.sleep(self.delay_seconds)
        if self.fail_status is not None:
            return self._record(request, kind, identity, web.Response(status=self.fail_status))
        repository = tail.split("/manifests/")[0] if is_manifest else ""
        if is_manifest and identity not in self.private.get(repository, frozenset([identity])):
            hidden = {"errors": [{"code": "NAME_UNKNOWN", "message": "repository name not known"}]}
            return self._record(request, kind, identity, web.json_response(hidden, status=404))
        if is_manifest and self.limit is not None and self.remaining_for(identity) <= 0:
            body = {
                "errors": [
                    {"code": "TOOMANYREQUESTS", "message": "You have reached your pull rate limit."}
                ]
            }
            headers = {**self._ratelimit_headers(identity), "Retry-After": str(self.retry_after)}
            return self._record(
                request, kind, identity, web.json_response(body, status=429, headers=headers)
            )
        upstream = await self._backend.request(
            request.method, f"/v2/{tail}", headers={"Accept": request.headers.get("Accept", "")}
        )
        if is_manifest and request.method == "GET" and upstream.status_code == 200:
            self._remaining_by_identity[identity] = self.remaining_for(identity) - 1
        headers = {
            k: v
            for k, v in upstream.headers.items()
            if k.lower() in ("content-type", "docker-content-digest")
        }
        if is_manifest:
            headers.update(self._ratelimit_headers(identity))
            if self.omit_digest:
                headers.pop("docker-content-digest", None)
                headers.pop("Docker-Content-Digest", None)
            if self.malformed_digest:
                headers["Docker-Content-Digest"] = "sha256:not-a-digest"
        response = web.Response(
            status=upstream.status_code,
            headers=headers,
            body=upstream.content if request.method != "HEAD" else None,
        )
        return self._record(request, kind, identity, response)

    def _record(
        self,
        request: web.Request,
        kind: str,
        identity: str,
        response: web.Response,
        scopes: tuple[str, ...] = (),
    ) -> web.Response:
        self.served.append(
            ServedRequest(request.method, request.path, kind, identity, response.status, scopes)
        )
        return response


def _main() -> None:  # pragma: no cover - a manual and benchmark entry point
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("backend", help="host:port of the registry behind the front")
    args = parser.parse_args()
    front = HubFront(args.backend).start()
    print(json.dumps({"front": front.host}), flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    _main()
