"""From an edge's ``image-refresh`` CronJob to the ImageRefreshPolicy that replaces it.

Pure: the shell reads the CronJob, the three workloads it refreshes and (on the jobs-manager
Deployment) the state it keeps; this module turns them into the policy, the carried-over status,
the operator chart's values and the warnings a site engineer must read. Every annotation and
env value is untrusted text: it is bounded and checked, and a value that cannot be read is
either a refusal that says what to fix or is ignored with a warning — never a crash, never a
guess that could re-image a target the CronJob had locked.

What is carried over, and why that way:

- the flap lockout (``refresh-flap-detected``, shared by every image) locks EVERY target:
  refresh attempts at the ceiling and ``lockedAt``, so only ``imagerefresh reset`` lifts it;
- ``refresh-attempt`` (one counter for all images) becomes every target's attempts;
- ``refresh-skip-streak`` (the CronJob counted it on jobs-manager, whose settledness gated all)
  becomes the jobs-manager target's skip streak;
- ``last-refreshed-<image>-digest`` becomes ``lastGood`` of the containers of that image whose
  template pins exactly that digest. Where the template still runs the tag (the CronJob records
  its first observation without re-imaging), it is not carried: ``lastGood`` means "what the
  refresher last wrote there", and a digest it never wrote would make the operator's first
  refresh count as contested by whoever rendered the tag.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from imagerefresh.models import PolicySpec, PolicyStatus, format_duration, parse_duration
from imagerefresh.models.base import format_timestamp
from imagerefresh.models.policy import MIN_INTERVAL, MIN_ROLLOUT_TIMEOUT
from imagerefresh.reference import DEFAULT_DOMAIN, InvalidReference, parse

__all__ = [
    "ANNOTATION_PREFIX",
    "EDGE_SUSPEND_VALUE",
    "MIGRATED_FROM",
    "CronJobSettings",
    "Migration",
    "MigrationRefused",
    "WorkloadRef",
    "interval_of",
    "plan_migration",
    "read_cronjob",
]

ANNOTATION_PREFIX = "tracebloc.io/"
FLAP = ANNOTATION_PREFIX + "refresh-flap-detected"
ATTEMPT = ANNOTATION_PREFIX + "refresh-attempt"
SKIP_STREAK = ANNOTATION_PREFIX + "refresh-skip-streak"
# On the policy: which CronJob it replaces (what --revert looks for) and what was carried.
MIGRATED_FROM = "images.tracebloc.io/migrated-from"
MIGRATED_STATE = "images.tracebloc.io/migrated-state"
# The edge chart's value that keeps the CronJob suspended across its hourly `helm upgrade`.
EDGE_SUSPEND_VALUE = "imageRefresh.suspend: true"
EDGE_SUSPEND_WHY = (
    "not `imageRefresh.enabled: false`, which removes the CronJob AND renders the control-plane "
    "pods `imagePullPolicy: Always` (no longer offline-safe)"
)

MAX_VALUE = 256  # longer annotation or env text is not the CronJob's
MAX_COUNTER = 1_000_000  # a counter past this is garbage, not a count
_COUNTER_RE = re.compile(r"[0-9]{1,7}")
_DIGEST_RE = re.compile(r"sha256:[a-f0-9]{64}")
_NAME_RE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")

# The CronJob's images, the env var that says each is pinned, and the containers running it.
IMAGES = ("jobs-manager", "pods-monitor", "resource-monitor")
_PINNED_ENV = {
    "jobs-manager": "JOBS_MANAGER_PINNED",
    "pods-monitor": "PODS_MONITOR_PINNED",
    "resource-monitor": "RESOURCE_MONITOR_PINNED",
}


class MigrationRefused(ValueError):
    """The CronJob or its workloads cannot be migrated as they are; the message says what to do."""


@dataclass(frozen=True, slots=True)
class WorkloadRef:
    kind: str
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class _Container:
    workload: str  # "jobs-manager", "requests-proxy" or "resource-monitor"
    container: str
    image: str  # which of IMAGES it runs


# FACTS.md: the chart's container names, a hard contract with the CronJob's `set image`.
_CONTAINERS = (
    _Container("jobs-manager", "api", "jobs-manager"),
    _Container("jobs-manager", "pods-monitor-container", "pods-monitor"),
    _Container("requests-proxy", "proxy", "jobs-manager"),  # follows the jobs-manager pin
    _Container("resource-monitor", "tracebloc-resource-monitor", "resource-monitor"),
)


@dataclass(frozen=True)
class CronJobSettings:
    """What the CronJob's spec says: its workloads, schedule, tunables and pins."""

    namespace: str
    name: str
    schedule: str
    suspended: bool
    workloads: Mapping[str, WorkloadRef]  # "jobs-manager" | "requests-proxy" | "resource-monitor"
    registry: str
    tag: str
    rollout_timeout: timedelta
    max_refresh_attempts: int
    max_skip_ticks: int
    pinned: Mapping[str, bool]
    warnings: tuple[str, ...] = ()

    @property
    def cronjob(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def mirror(self) -> bool:
        return _registry_domain(self.registry) != DEFAULT_DOMAIN


@dataclass(frozen=True)
class Migration:
    """The policy (full object), its carried status, the chart values and what to read."""

    policy: dict[str, Any]
    status: dict[str, Any]
    values: dict[str, Any]
    carried: tuple[str, ...]  # one line per piece of state carried over, saying from where
    warnings: tuple[str, ...]
    locked: bool
    pull_secrets: tuple[str, ...] = field(default=())


def _text(value: Any) -> str | None:
    """A bounded string, or None when it is not one."""
    if not isinstance(value, str) or len(value) > MAX_VALUE:
        return None
    return value.strip()


def _shown(value: Any) -> str:
    """An untrusted value quoted for a message: short, printable, never the whole of it."""
    text = str(value)
    clipped = text[:40] + ("…" if len(text) > 40 else "")
    return repr("".join(c if c.isprintable() else "?" for c in clipped))


def _env(container: Mapping[str, Any], cronjob: str) -> dict[str, str]:
    """The refresh container's literal env; a variable read from elsewhere is refused."""
    env: dict[str, str] = {}
    for entry in container.get("env") or ():
        if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str):
            continue
        name = entry["name"]
        if "value" not in entry:
            raise MigrationRefused(
                f"env {name} of CronJob {cronjob} is not a literal value (valueFrom): it cannot "
                f"be read here; set it as a literal in the edge chart's values, or migrate by "
                "hand (docs/migration.md)"
            )
        value = _text(entry["value"])
        if value is None:
            raise MigrationRefused(
                f"env {name} of CronJob {cronjob} is unreadable (not a string of at most "
                f"{MAX_VALUE} characters); fix the CronJob or migrate by hand"
            )
        env[name] = value
    return env


def _counter(env: Mapping[str, str], name: str, default: int, cronjob: str) -> int:
    if name not in env:
        return default
    value = env[name]
    if _COUNTER_RE.fullmatch(value) is None or not 1 <= int(value) <= MAX_COUNTER:
        raise MigrationRefused(
            f"env {name}={_shown(value)} of CronJob {cronjob} is not a positive whole number; "
            "fix it in the edge chart's values, or migrate by hand"
        )
    return int(value)


def _pin(env: Mapping[str, str], name: str, cronjob: str) -> bool:
    value = env.get(name, "0")
    if value not in ("0", "1"):
        raise MigrationRefused(
            f"env {name}={_shown(value)} of CronJob {cronjob} is neither 0 nor 1; fix the edge "
            "chart's values"
        )
    return value == "1"


def _registry_domain(registry: str) -> str:
    return parse(f"{registry}/tracebloc/x").domain


def read_cronjob(cronjob: Mapping[str, Any]) -> CronJobSettings:
    """The CronJob's settings; :class:`MigrationRefused` naming what is missing or unreadable."""
    metadata = cronjob.get("metadata") or {}
    namespace, name = str(metadata.get("namespace") or ""), str(metadata.get("name") or "")
    where = f"{namespace}/{name}"
    spec = cronjob.get("spec") or {}
    template = (((spec.get("jobTemplate") or {}).get("spec") or {}).get("template") or {}).get(
        "spec"
    ) or {}
    containers = [c for c in template.get("containers") or () if isinstance(c, Mapping)]
    refresh = next((c for c in containers if c.get("name") == "refresh"), None)
    if refresh is None:
        names = ", ".join(str(c.get("name")) for c in containers) or "none"
        raise MigrationRefused(
            f"CronJob {where} has no container 'refresh' (it has: {names}): it is not the edge "
            "chart's image-refresh CronJob; name the right one (kubectl get cronjob -A)"
        )
    env = _env(refresh, where)
    warnings: list[str] = []
    required = ("DEPLOYMENT_NAME", "REQUESTS_PROXY_DEPLOYMENT", "RESOURCE_MONITOR_DAEMONSET")
    missing = [var for var in required if not env.get(var)]
    if missing:
        raise MigrationRefused(
            f"CronJob {where} does not name its workloads: env {', '.join(missing)} missing from "
            "container 'refresh' (chart 1.9.x renders all three); upgrade the edge chart first, "
            "or migrate by hand"
        )
    node_agents = env.get("NODE_AGENTS_NAMESPACE") or "tracebloc-node-agents"
    if "NODE_AGENTS_NAMESPACE" not in env:
        warnings.append(
            "env NODE_AGENTS_NAMESPACE is not set: the resource-monitor DaemonSet is looked up in "
            "tracebloc-node-agents, the chart's default"
        )
    roles = {
        "jobs-manager": ("Deployment", namespace, "DEPLOYMENT_NAME"),
        "requests-proxy": ("Deployment", namespace, "REQUESTS_PROXY_DEPLOYMENT"),
        "resource-monitor": ("DaemonSet", node_agents, "RESOURCE_MONITOR_DAEMONSET"),
    }
    workloads: dict[str, WorkloadRef] = {}
    for role, (kind, home, var) in roles.items():
        if _NAME_RE.fullmatch(env[var]) is None or _NAME_RE.fullmatch(home) is None:
            raise MigrationRefused(
                f"env {var}={_shown(env[var])} (namespace {_shown(home)}) of CronJob {where} is "
                "not a Kubernetes object name; fix the CronJob"
            )
        workloads[role] = WorkloadRef(kind, home, env[var])
    registry = env.get("IMAGE_REGISTRY") or DEFAULT_DOMAIN
    tag = env.get("IMAGE_TAG") or "prod"
    try:
        parse(f"{registry}/tracebloc/jobs-manager:{tag}")
    except InvalidReference as error:
        raise MigrationRefused(
            f"env IMAGE_REGISTRY={_shown(registry)} / IMAGE_TAG={_shown(tag)} of CronJob {where} "
            f"do not make an image reference ({error}); fix the edge chart's values"
        ) from error
    for var, default in (("IMAGE_REGISTRY", DEFAULT_DOMAIN), ("IMAGE_TAG", "prod")):
        if var not in env:
            warnings.append(f"env {var} is not set: {default}, the CronJob's default, is used")
    timeout_text = env.get("ROLLOUT_TIMEOUT", "10m")
    try:
        rollout_timeout = parse_duration(timeout_text)
    except ValueError as error:
        raise MigrationRefused(
            f"env ROLLOUT_TIMEOUT of CronJob {where}: {error}; fix the edge chart's values"
        ) from error
    if rollout_timeout < MIN_ROLLOUT_TIMEOUT:
        warnings.append(
            f"env ROLLOUT_TIMEOUT={timeout_text} is under the policy's minimum: rolloutTimeout 30s"
        )
        rollout_timeout = MIN_ROLLOUT_TIMEOUT
    return CronJobSettings(
        namespace=namespace,
        name=name,
        schedule=str(spec.get("schedule") or ""),
        suspended=spec.get("suspend") is True,
        workloads=workloads,
        registry=registry,
        tag=tag,
        rollout_timeout=rollout_timeout,
        max_refresh_attempts=_counter(env, "MAX_REFRESH_ATTEMPTS", 3, where),
        max_skip_ticks=_counter(env, "MAX_SKIP_TICKS", 8, where),
        pinned={image: _pin(env, _PINNED_ENV[image], where) for image in IMAGES},
        warnings=tuple(warnings),
    )


def _minutes(field_text: str) -> list[int] | None:
    """The minutes a cron minute field names, when it is a plain list, ``*/N`` or ``*``."""
    if field_text == "*":
        return list(range(60))
    if field_text.startswith("*/"):
        step = field_text[2:]
        if not step.isdigit() or not 1 <= int(step) <= 59:
            return None
        return list(range(0, 60, int(step)))
    parts = field_text.split(",")
    if not all(p.isdigit() and len(p) <= 2 and int(p) <= 59 for p in parts):
        return None
    return sorted({int(p) for p in parts})


def interval_of(schedule: str, cronjob: str = "the CronJob") -> timedelta:
    """The period of a schedule that fires at evenly spaced minutes every hour of every day.

    ``*/15 * * * *`` and ``7,22,37,52 * * * *`` are every 15 minutes; ``7 * * * *`` is hourly.
    Anything else (hours, days, ``*/7`` — whose gap wraps unevenly past the hour) has no fixed
    period: :class:`MigrationRefused`, asking for ``--interval``.
    """
    fields = schedule.split()
    refusal = MigrationRefused(
        f"the schedule {_shown(schedule)} of {cronjob} has no fixed period (only evenly spaced "
        "minutes every hour of every day do, such as '*/15 * * * *' or '7,22,37,52 * * * *'); "
        "give the policy's tick period with --interval, e.g. --interval 15m"
    )
    aliases = {"@hourly": ["0", "*", "*", "*", "*"]}
    if len(fields) == 1 and fields[0] in aliases:
        fields = aliases[fields[0]]
    if len(fields) != 5 or fields[1:] != ["*", "*", "*", "*"]:
        raise refusal
    minutes = _minutes(fields[0])
    if not minutes:
        raise refusal
    gaps = {b - a for a, b in zip(minutes, [*minutes[1:], minutes[0] + 60], strict=True)}
    if len(gaps) != 1:
        raise refusal
    return timedelta(minutes=gaps.pop())


def _count(value: Any, what: str, warnings: list[str]) -> int | None:
    text = _text(value)
    if text is None or _COUNTER_RE.fullmatch(text) is None or int(text) > MAX_COUNTER:
        warnings.append(f"annotation {what}={_shown(value)} is not a count: ignored")
        return None
    return int(text)


def _short_duration(value: timedelta) -> str:
    """``15m``, ``1h``, ``90s`` — what a person writes, still a Go duration."""
    seconds = value.total_seconds()
    if seconds and seconds % 3600 == 0:
        return f"{int(seconds // 3600)}h"
    if seconds and seconds % 60 == 0:
        return f"{int(seconds // 60)}m"
    return format_duration(value)


def _container_of(workload: Mapping[str, Any], name: str) -> Mapping[str, Any] | None:
    spec = ((workload.get("spec") or {}).get("template") or {}).get("spec") or {}
    for entry in [*(spec.get("containers") or ()), *(spec.get("initContainers") or ())]:
        if isinstance(entry, Mapping) and entry.get("name") == name:
            return entry
    return None


def _pull_secrets(workload: Mapping[str, Any]) -> list[str]:
    spec = ((workload.get("spec") or {}).get("template") or {}).get("spec") or {}
    return [
        str(ref["name"])
        for ref in spec.get("imagePullSecrets") or ()
        if isinstance(ref, Mapping) and isinstance(ref.get("name"), str) and ref["name"]
    ]


def plan_migration(
    settings: CronJobSettings,
    workloads: Mapping[str, Mapping[str, Any] | None],
    *,
    policy_name: str,
    now: datetime,
    interval: timedelta | None = None,
) -> Migration:
    """The policy replacing ``settings``' CronJob, from its workloads as read now.

    ``workloads`` maps each role of :attr:`CronJobSettings.workloads` to the object read (None:
    it does not exist). ``interval`` overrides the schedule's period (``--interval``).
    """
    where = settings.cronjob
    absent = [str(ref) for role, ref in settings.workloads.items() if workloads.get(role) is None]
    if absent:
        raise MigrationRefused(
            f"the workloads CronJob {where} refreshes are absent: {', '.join(absent)} (named by "
            "its env); check the release's namespace and names, or remove the CronJob's stale "
            "env by upgrading the edge chart"
        )
    if interval is None:
        interval = interval_of(settings.schedule, f"CronJob {where}")
    elif interval < MIN_INTERVAL:
        raise MigrationRefused(f"--interval {format_duration(interval)} is under 30s")
    warnings = list(settings.warnings)
    carried: list[str] = []
    jobs_manager = workloads["jobs-manager"]
    assert jobs_manager is not None
    annotations = (jobs_manager.get("metadata") or {}).get("annotations") or {}
    if not isinstance(annotations, Mapping):
        annotations = {}
    state_home = str(settings.workloads["jobs-manager"])

    # -- the containers: tracked repository, tag, pins -------------------------------------------
    targets: dict[str, dict[str, Any]] = {}
    live: dict[tuple[str, str], Any] = {}
    for entry in _CONTAINERS:
        ref = settings.workloads[entry.workload]
        workload = workloads[entry.workload]
        assert workload is not None
        container = _container_of(workload, entry.container)
        if container is None:
            raise MigrationRefused(
                f"{ref} has no container {entry.container!r}, which the CronJob refreshes with "
                f"the {entry.image} image; the workload is not the edge chart's: fix it (helm "
                "upgrade) or migrate by hand"
            )
        expected = parse(f"{settings.registry}/tracebloc/{entry.image}:{settings.tag}")
        try:
            running = parse(str(container.get("image") or ""))
        except InvalidReference as error:
            raise MigrationRefused(
                f"container {entry.container!r} of {ref} runs an unreadable image ({error}); "
                "fix the workload"
            ) from error
        if running.repository != expected.repository:
            raise MigrationRefused(
                f"container {entry.container!r} of {ref} runs {running.repository}, not "
                f"{expected.repository} that the CronJob refreshes (IMAGE_REGISTRY="
                f"{settings.registry}); the operator never changes repositories — fix the "
                "workload (helm upgrade) or the CronJob's IMAGE_REGISTRY first"
            )
        live[(entry.workload, entry.container)] = running
        declared: dict[str, Any] = {"name": entry.container, "image": expected.familiar}
        if settings.pinned[entry.image]:
            if running.digest is None:
                raise MigrationRefused(
                    f"{_PINNED_ENV[entry.image]}=1 says the {entry.image} image is pinned by "
                    f"digest, but container {entry.container!r} of {ref} runs {running.familiar} "
                    "(no digest): the pin in the edge chart's values did not reach the workload. "
                    "Run the edge's helm upgrade so the template carries the digest, then run "
                    "this again"
                )
            declared["digest"] = running.digest
            carried.append(
                f"{ref} container {entry.container}: pinned to {running.digest} "
                f"({_PINNED_ENV[entry.image]}=1, the digest its template carries)"
            )
        home = {"namespace": ref.namespace} if ref.namespace != settings.namespace else {}
        target = targets.setdefault(
            entry.workload, {"kind": ref.kind, "name": ref.name, **home, "containers": []}
        )
        target["containers"].append(declared)
    if settings.mirror:
        warnings.append(
            f"IMAGE_REGISTRY is {settings.registry}, a mirror: the CronJob resolved digests from "
            "docker.io and went inert here, and the edge chart rendered these containers "
            "imagePullPolicy: Always (its pull-policy helper gives a mirror Always), so they "
            "were not offline-safe. The policy tracks the mirror's repositories "
            f"({settings.registry}/tracebloc/…) and pins digests the mirror itself holds"
        )

    # -- the state on the jobs-manager Deployment -------------------------------------------
    ceiling = settings.max_refresh_attempts
    attempts = 0
    if ATTEMPT in annotations:
        counted = _count(annotations[ATTEMPT], ATTEMPT, warnings)
        if counted is not None:
            attempts = counted
    locked_by = None
    if FLAP in annotations:
        value = _count(annotations[FLAP], FLAP, warnings)
        locked_by = f"{FLAP}={value if value is not None else _shown(annotations[FLAP])}"
    elif attempts >= ceiling:
        locked_by = f"{ATTEMPT}={attempts}, at MAX_REFRESH_ATTEMPTS={ceiling}"
        warnings.append(
            f"{ATTEMPT}={attempts} is at the ceiling though {FLAP} is absent: treated as the "
            "CronJob's lockout (fail closed)"
        )
    if locked_by is not None:
        attempts = ceiling
        carried.append(
            f"flap lockout ({locked_by} on {state_home}): every target Locked, refreshAttempts "
            f"{ceiling}, until imagerefresh reset {settings.namespace}/{policy_name}"
        )
    elif attempts:
        carried.append(
            f"{ATTEMPT}={attempts} on {state_home} (one counter for all images): refreshAttempts "
            f"{attempts} of {ceiling} on every target"
        )
    streak = 0
    if SKIP_STREAK in annotations:
        counted = _count(annotations[SKIP_STREAK], SKIP_STREAK, warnings)
        if counted is not None:
            streak = min(counted, settings.max_skip_ticks)
            carried.append(
                f"{SKIP_STREAK}={counted} on {state_home}: skipStreak {streak} of "
                f"{settings.max_skip_ticks} on the jobs-manager target"
            )
    last_good: dict[str, dict[str, str]] = {}
    for image in IMAGES:
        key = f"{ANNOTATION_PREFIX}last-refreshed-{image}-digest"
        if key not in annotations:
            continue
        text = _text(annotations[key])
        if text is None or _DIGEST_RE.fullmatch(text) is None:
            warnings.append(f"annotation {key}={_shown(annotations[key])} is not a digest: ignored")
            continue
        for entry in _CONTAINERS:
            if entry.image != image:
                continue
            running = live[(entry.workload, entry.container)]
            ref = settings.workloads[entry.workload]
            if running.digest == text:
                last_good.setdefault(entry.workload, {})[entry.container] = str(running)
                carried.append(f"{key} → lastGood of {ref} container {entry.container}")
            else:
                warnings.append(
                    f"{key}={text[:19]}… not carried to {ref} container {entry.container}: its "
                    f"template runs {running.familiar}, so the CronJob recorded that digest "
                    "without writing it there (as it does on its first observation, or before a "
                    "chart upgrade re-rendered the tag); the operator compares the pods' "
                    "digests itself"
                )

    # -- the policy, its status and the chart values ---------------------------------------------
    spec: dict[str, Any] = {
        "interval": _short_duration(interval),
        "maxSkipTicks": settings.max_skip_ticks,
        "maxRefreshAttempts": ceiling,
        "rolloutTimeout": _short_duration(settings.rollout_timeout),
        "targets": list(targets.values()),
    }
    PolicySpec.model_validate(spec)  # what the API server admits, the operator reads
    origin = f"migrated from the image-refresh CronJob {where}"
    statuses = []
    for role in targets:
        ref = settings.workloads[role]
        entry_status: dict[str, Any] = {
            "kind": ref.kind,
            "namespace": ref.namespace,
            "name": ref.name,
            "refreshAttempts": attempts,
        }
        if locked_by is not None:
            entry_status["phase"] = "Locked"
            entry_status["lockedAt"] = format_timestamp(now)
            entry_status["message"] = (
                f"locked: {origin}, whose flap lockout ({locked_by} on {state_home}) no human "
                "had cleared; no re-imaging until a reset: imagerefresh reset "
                f"{settings.namespace}/{policy_name}"
            )
        else:
            entry_status["phase"] = "Suspended"
            entry_status["message"] = f"{origin}; the operator takes over once it is unsuspended"
        if role == "jobs-manager" and streak:
            entry_status["skipStreak"] = streak
            entry_status["message"] += f"; skipStreak {streak} from {SKIP_STREAK}"
        if role in last_good:
            entry_status["lastGood"] = last_good[role]
            entry_status["message"] += "; lastGood from its last-refreshed-*-digest annotations"
        if attempts and locked_by is None:
            entry_status["message"] += f"; refreshAttempts {attempts} from {ATTEMPT}"
        statuses.append(entry_status)
    status: dict[str, Any] = {"targets": statuses}
    PolicyStatus.model_validate(status)
    summary = "; ".join(carried) or "no state to carry"
    policy = {
        "apiVersion": "images.tracebloc.io/v1alpha1",
        "kind": "ImageRefreshPolicy",
        "metadata": {
            "name": policy_name,
            "namespace": settings.namespace,
            "annotations": {
                MIGRATED_FROM: f"CronJob/{where}",
                MIGRATED_STATE: summary[: MAX_VALUE * 8],
            },
        },
        "spec": spec,
    }
    secrets = sorted({name for role in targets for name in _pull_secrets(workloads[role] or {})})
    without = [str(settings.workloads[r]) for r in targets if not _pull_secrets(workloads[r] or {})]
    if without:
        warnings.append(
            f"{', '.join(without)} name no imagePullSecrets in their pod templates: the operator "
            "then uses their ServiceAccount's; list those secrets in rbac.pullSecrets.names too "
            "(kubectl get serviceaccount -o yaml)"
        )
    values: dict[str, Any] = {"watch": {"namespaces": [settings.namespace]}}
    node_agents = settings.workloads["resource-monitor"].namespace
    if node_agents != settings.namespace:
        values["allowNamespacePairs"] = [
            {"policyNamespace": settings.namespace, "targetNamespace": node_agents}
        ]
    if secrets:
        values["rbac"] = {"pullSecrets": {"names": secrets}}
    values["policies"] = [{"name": policy_name, "namespace": settings.namespace, "spec": spec}]
    return Migration(
        policy=policy,
        status=status,
        values=values,
        carried=tuple(carried),
        warnings=tuple(warnings),
        locked=locked_by is not None,
        pull_secrets=tuple(secrets),
    )
