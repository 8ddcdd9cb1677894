"""An index's platform manifests, read from the real registry (SPEC §5).

Runtimes built on containers/image (CRI-O, podman) report the platform manifest they pulled,
not the index the tag resolved to; recognising it needs the index's children. They are read
with one GET of the index by digest — a pull, counted and charged — whose body must hash to
that digest, and remembered per index digest, so steady state sends no GET.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from imagerefresh.ratelimit import RequestKind
from imagerefresh.reference import parse
from imagerefresh.registry import ManifestNotFound, RegistryClient, RegistryProtocolError
from imagerefresh.resolver import ResolutionKey, SharedResolver

from support.hostile_registry import TAMPERED_CHILD, HostileRegistry
from support.hub_front import HubFront
from support.registry_env import ImagePusher, PushedImage, client_for

pytestmark = pytest.mark.registry


def platform_digests(pushed: PushedImage) -> frozenset[str]:
    """The children as the registry stored the index (its body, as pushed)."""
    return frozenset(entry["digest"] for entry in json.loads(pushed.body)["manifests"])


@pytest.mark.parametrize("kind", ["oci-index", "docker-list"])
async def test_children_are_the_platform_manifests_read_with_one_counted_and_charged_get(
    hub_front: HubFront, pusher: ImagePusher, kind: str
) -> None:
    pushed = pusher.push(f"children/{kind}", "prod", seed=kind, kind=kind)
    reference = parse(f"{hub_front.host}/children/{kind}:prod")
    async with RegistryClient(insecure_registries=[hub_front.host]) as client:
        children = await client.children(reference, pushed.digest)
        counted = client.ledger.budget(hub_front.host, "anonymous").requests[RequestKind.GET]
    assert children == platform_digests(pushed)
    assert len(children) == 2
    gets = [r for r in hub_front.served if r.method == "GET" and r.kind == "manifest"]
    assert [r.path.rsplit("/", 1)[1] for r in gets if r.status == 200] == [pushed.digest]
    assert counted == len(gets)  # every GET sent is counted, the anonymous challenge's too
    assert hub_front.remaining_for("anonymous") == hub_front.remaining - 1  # a pull, charged


async def test_a_single_platform_manifest_has_no_children(
    registry: str, pusher: ImagePusher
) -> None:
    pushed = pusher.push("children/single", "prod", seed="single")
    async with client_for(registry) as client:
        assert await client.children(parse(pushed.reference), pushed.digest) == frozenset()


@pytest.mark.parametrize(
    ("kind", "may_be_index"),
    [("oci-manifest", False), ("oci-index", True), ("docker-list", True)],
)
async def test_a_resolution_says_whether_its_digest_may_name_an_index(
    registry: str, pusher: ImagePusher, kind: str, may_be_index: bool
) -> None:
    # So that the shell reads children only of what may have them: a single-platform tag's
    # pods reporting another digest cost no GET.
    pushed = pusher.push(f"children/kind-{kind}", "prod", seed=kind, kind=kind)
    async with client_for(registry) as client:
        resolution = await client.resolve(parse(pushed.reference))
    assert resolution.media_type == pushed.media_type
    assert resolution.may_be_index is may_be_index


async def test_an_index_whose_body_does_not_hash_to_its_digest_is_refused(
    hostile: HostileRegistry, pusher: ImagePusher
) -> None:
    hostile.behaviour = "tampered-index"
    pushed = pusher.push("children/tampered", "prod", seed="tampered", kind="oci-index")
    reference = parse(f"{hostile.host}/children/tampered:prod")
    async with client_for(hostile.host) as client:
        with pytest.raises(RegistryProtocolError) as refused:
            await client.children(reference, pushed.digest)
    assert "does not hash to it" in str(refused.value)
    assert TAMPERED_CHILD not in str(refused.value)
    assert refused.value.reference == str(reference)


async def test_the_resolver_reads_an_index_once_and_remembers_it_but_not_a_failure(
    hub_front: HubFront, pusher: ImagePusher
) -> None:
    pushed = pusher.push("children/remembered", "prod", seed="remembered", kind="oci-index")
    key = ResolutionKey.of(parse(f"{hub_front.host}/children/remembered:prod"))
    missing = "sha256:" + "0d" * 32
    async with RegistryClient(insecure_registries=[hub_front.host]) as client:
        shared = SharedResolver(client)
        together = await asyncio.gather(*(shared.children(key, pushed.digest) for _ in range(3)))
        later = await shared.children(key, pushed.digest)
        failures = [await shared.children(key, missing) for _ in range(2)]
    assert set(together) == {later} == {platform_digests(pushed)}
    assert all(isinstance(f, ManifestNotFound) for f in failures)
    gets = [
        r.path.rsplit("/", 1)[1] for r in hub_front.served if r.method == "GET" and r.status != 401
    ]
    served = [g for g in gets if g.startswith("sha256:")]
    assert served.count(pushed.digest) == 1
    assert served.count(missing) == 2  # a failure is asked again, never remembered
