"""``/healthz``: answered by the event loop itself, whatever role the process plays.

A standby for the leader-election Lease runs no kopf, so kopf's liveness endpoint cannot be
the probe's target; this one answers from the first moment of ``imagerefresh run`` to the last
— as long as the loop turns, which is what liveness means here. It answers ``200`` with the
role (``{"role": "leader"}`` or ``"standby"``) on ``GET /healthz`` and ``404`` on anything else.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable

__all__ = ["serve_health"]

_MAX_REQUEST = 8192


async def serve_health(address: str, port: int, role: Callable[[], str]) -> asyncio.Server:
    """Start answering ``/healthz`` on ``address:port``; the caller closes the server."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(5):  # not wait_for, which may swallow a cancellation
                line = await reader.readline()
            # Drain the headers (bounded): a probe sends a handful.
            size = len(line)
            while size < _MAX_REQUEST:
                async with asyncio.timeout(5):
                    header = await reader.readline()
                size += len(header)
                if header in (b"\r\n", b"\n", b""):
                    break
            parts = line.decode("latin-1").split()
            found = len(parts) >= 2 and parts[0] in ("GET", "HEAD") and parts[1] == "/healthz"
            body = json.dumps({"role": role()}).encode() if found else b'{"error": "not found"}'
            status = "200 OK" if found else "404 Not Found"
            head = (
                f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
            ).encode()
            writer.write(head if parts and parts[0] == "HEAD" else head + body)
            await writer.drain()
        except (TimeoutError, ConnectionError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    return await asyncio.start_server(answer, address, port, reuse_address=True)
