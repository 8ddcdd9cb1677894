"""/healthz, answered by the event loop: the role it reports, and nothing else served."""

from __future__ import annotations

import httpx

from imagerefresh.health import serve_health

from support.registry_env import free_port


async def test_healthz_reports_the_current_role_and_other_paths_are_not_found() -> None:
    role = ["standby"]
    port = free_port()
    server = await serve_health("127.0.0.1", port, lambda: role[0])
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            first = await client.get("/healthz")
            assert (first.status_code, first.json()) == (200, {"role": "standby"})
            role[0] = "leader"
            assert (await client.get("/healthz")).json() == {"role": "leader"}
            assert (await client.get("/metrics")).status_code == 404
            assert (await client.post("/healthz")).status_code == 404
    finally:
        server.close()
        await server.wait_closed()
