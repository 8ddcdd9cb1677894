"""Resolve many tracked references at once: one registry request per unique reference.

Every container in every policy that tracks the same reference with the same credentials shares
one resolution per tick (SPEC §4.2). :func:`resolve_all` takes the (reference, credentials)
pairs a tick needs, collapses duplicates, and asks the registries concurrently — bounded per
registry host so that a policy with many targets never bursts one registry. Failures are values
in the result, not exceptions: one unreadable reference blocks only the containers that needed
it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass

from imagerefresh.credentials import Credentials
from imagerefresh.reference import ImageReference
from imagerefresh.registry import RegistryClient, RegistryError, Resolution, registry_host

__all__ = ["DEFAULT_CONCURRENCY_PER_REGISTRY", "ResolutionKey", "resolve_all"]

DEFAULT_CONCURRENCY_PER_REGISTRY = 4


@dataclass(frozen=True, slots=True)
class ResolutionKey:
    """What makes two resolutions the same request: the tracked reference and the identity."""

    reference: ImageReference
    credentials: Credentials | None = None

    @classmethod
    def of(cls, reference: ImageReference, credentials: Credentials | None = None) -> ResolutionKey:
        return cls(reference.tracked(), credentials)


async def resolve_all(
    client: RegistryClient,
    keys: Iterable[ResolutionKey],
    *,
    concurrency_per_registry: int = DEFAULT_CONCURRENCY_PER_REGISTRY,
) -> dict[ResolutionKey, Resolution | RegistryError]:
    """Resolve each unique key once; the value is the resolution or the error that blocked it."""
    unique = list(dict.fromkeys(ResolutionKey.of(key.reference, key.credentials) for key in keys))
    gates: dict[str, asyncio.Semaphore] = {}

    async def one(key: ResolutionKey) -> Resolution | RegistryError:
        host = registry_host(key.reference.domain)
        gate = gates.setdefault(host, asyncio.Semaphore(concurrency_per_registry))
        async with gate:
            try:
                return await client.resolve(key.reference, key.credentials)
            except RegistryError as error:
                return error

    results = await asyncio.gather(*(one(key) for key in unique))
    return dict(zip(unique, results, strict=True))
