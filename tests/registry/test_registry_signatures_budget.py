"""Signature lookups are held to the pull budget's reserve, at the Docker-Hub-like front.

The front (support/hub_front.py) counts manifest GETs against each identity's remaining pulls
and reports them in ``ratelimit-remaining`` on every manifest answer, HEADs included, as
Docker Hub does. A lookup given the asking policy's reserve sends a GET only while the account
keeps that reserve after it; otherwise it stops before the GET (``PullBudgetHeld``, the
budget's own words) — the front's record shows the GET never came.
"""

from __future__ import annotations

import pytest

from imagerefresh.reference import parse
from imagerefresh.registry import PullBudgetHeld, RegistryClient
from imagerefresh.signatures import legacy_tag, parse_public_keys, verify

from support.hub_front import HubFront
from support.registry_env import ImagePusher
from support.signing import TestKey, bundle, legacy, payload, push_signatures

pytestmark = pytest.mark.registry

KEY = TestKey.p256()
RESERVE = 2


def gets(front: HubFront) -> list[str]:
    return [r.path for r in front.served if r.kind == "manifest" and r.method == "GET"]


async def test_a_legacy_lookup_stops_before_the_get_that_would_go_below_the_reserve(
    hub_front: HubFront, pusher: ImagePusher
) -> None:
    image = pusher.push("budget/legacy", "prod", seed="budget-legacy")
    tracked = parse(f"{hub_front.host}/budget/legacy:prod")
    body = payload(image.digest, tracked.repository)
    push_signatures(pusher, "budget/legacy", image.digest, legacy=legacy((body, KEY.sign(body))))
    hub_front.remaining = RESERVE + 1  # one pull to spare
    async with RegistryClient(insecure_registries=[hub_front.host]) as client:
        found = await client.legacy_signature(tracked, image.digest, reserve=RESERVE)
        assert found is not None
        assert verify(image.digest, tracked, parse_public_keys([KEY.pem]), legacy=found).ok
        assert hub_front.remaining_for("anonymous") == RESERVE
        sig = f"/v2/budget/legacy/manifests/{legacy_tag(image.digest)}"
        spent = gets(hub_front)
        with pytest.raises(PullBudgetHeld) as held:
            await client.legacy_signature(tracked, image.digest, reserve=RESERVE)
        assert gets(hub_front) == spent  # the HEAD went (free), the GET did not
        assert [r.method for r in hub_front.served if r.path == sig][-1] == "HEAD"
        assert hub_front.remaining_for("anonymous") == RESERVE
        assert str(held.value) == (
            f"{hub_front.host} for anonymous has {RESERVE} pulls left of 100 per 21600s; "
            f"a signature lookup needs 1 and {RESERVE} stay reserved for the kubelet"
        )
        # Without a reserve (nothing asks for one) the same lookup spends the pull.
        assert await client.legacy_signature(tracked, image.digest) is not None
        assert hub_front.remaining_for("anonymous") == RESERVE - 1


async def test_a_bundle_lookup_stops_before_each_get_that_would_go_below_the_reserve(
    hub_front: HubFront, pusher: ImagePusher
) -> None:
    image = pusher.push("budget/bundle", "prod", seed="budget-bundle")
    tracked = parse(f"{hub_front.host}/budget/bundle:prod")
    push_signatures(pusher, "budget/bundle", image.digest, bundles=[bundle(image.digest, KEY)])
    hub_front.remaining = RESERVE + 1  # the fallback index's GET, then none for the referrer
    async with RegistryClient(insecure_registries=[hub_front.host]) as client:
        with pytest.raises(PullBudgetHeld, match=f"{RESERVE} stay reserved for the kubelet"):
            await client.bundle_signatures(tracked, image.digest, reserve=RESERVE)
        assert len(gets(hub_front)) == 1  # the index: the referrer's manifest was not asked
        assert hub_front.remaining_for("anonymous") == RESERVE
        hub_front._remaining_by_identity.clear()
        hub_front.remaining = 100
        (found,) = await client.bundle_signatures(tracked, image.digest, reserve=RESERVE)
        assert verify(image.digest, tracked, parse_public_keys([KEY.pem]), bundles=[found]).ok
