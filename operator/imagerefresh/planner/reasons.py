"""Every reason the operator puts on a condition or an event, in one place.

Reasons are CamelCase and stable: alerts and runbooks match on them.
"""

# Events about a target (posted on the policy and on the workload).
REFRESHING = "Refreshing"  # a refresh patch was applied
REFRESHED = "Refreshed"  # a refresh settled on the new digests
REFRESH_FAILED = "RefreshFailed"  # a refresh failed or timed out: a flap
ROLLING_BACK = "RollingBack"  # the failed refresh is patched back to the previous images
REFRESH_SUPERSEDED = "RefreshSuperseded"  # someone else changed the images during our refresh
PATCH_CONFLICT = "PatchConflict"  # the guarded patch's preconditions failed: retried next tick
WORKLOAD_MISSING = "WorkloadMissing"
CONFLICT = "Conflict"
FROZEN = "Frozen"
LOCKED = "Locked"

# Events about the policy.
RESET = "Reset"  # the reset annotation was honoured

# Condition reasons.
ALL_CURRENT = "AllCurrent"
NOT_CURRENT = "TargetsNotCurrent"
SUSPENDED = "Suspended"
ROLLOUT_IN_FLIGHT = "RolloutInFlight"
NO_ROLLOUT = "NoRolloutInFlight"
SKIP_CEILING = "SkipCeilingReached"
SETTLING = "NoTargetFrozen"
ATTEMPT_CEILING = "RefreshAttemptsExhausted"
UNLOCKED = "NoTargetLocked"
BUDGET_BELOW_RESERVE = "PullBudgetBelowReserve"
WITHIN_BUDGET = "WithinPullBudget"
EVIDENCE_UNREADABLE = "EvidenceUnreadable"
EVIDENCE_READ = "EvidenceRead"
