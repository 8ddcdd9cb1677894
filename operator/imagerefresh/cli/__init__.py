"""The ``imagerefresh`` command line.

``run`` starts the operator; ``plan`` shows what its next tick would do, changing nothing;
``reset`` clears a lock; ``refresh-now`` ticks a policy at once (``--outside-window``: a refresh
outside its windows, once); ``audit`` lists what no policy covers; ``migrate-cronjob`` replaces an
edge's image-refresh CronJob with a policy; ``resolve`` asks a registry for a tag's digest
exactly as the operator does, so an SRE can see what a tick would pin and what the registry
says about the pull budget.

Every command fails the same way: one line, ``Error: …``, saying what went wrong and what to
do, and an exit status listed in its ``--help`` (``Exit status``). 0 is success, 1 a failure,
2 a usage error (click's own) for every command; ``audit`` (1: findings, 3: could not audit)
and ``run`` (4: leadership lost) add their own, and no status means two things within one
command. The one-shot commands (all but ``run``) were run by a person with their own
kubeconfig: their Kubernetes errors are worded for that (:meth:`KubeError.for_one_shot`).

One module per command (:mod:`.operate` is ``run``), each registering itself on :func:`main`;
:mod:`.group` holds what they share.
"""

from __future__ import annotations

# Imported for their effect: each module adds its command to the group.
from imagerefresh.cli import annotate, audit, migrate, operate, plan, resolve  # noqa: F401
from imagerefresh.cli.group import (
    AUDIT_UNREADABLE_EXIT,
    LEADERSHIP_LOST_EXIT,
    LOG_FORMAT_ENV,
    LOG_LEVEL_ENV,
    CommandFailed,
    CouldNotAudit,
    kubectl_plugin,
    main,
)
from imagerefresh.cli.operate import lease_namespace, run

__all__ = [
    "AUDIT_UNREADABLE_EXIT",
    "LEADERSHIP_LOST_EXIT",
    "LOG_FORMAT_ENV",
    "LOG_LEVEL_ENV",
    "CommandFailed",
    "CouldNotAudit",
    "kubectl_plugin",
    "lease_namespace",
    "main",
    "run",
]
