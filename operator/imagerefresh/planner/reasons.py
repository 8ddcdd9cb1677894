"""Every reason the operator puts on a condition or an event, in one place.

Reasons are CamelCase and stable: alerts and runbooks match on them.
"""

# Events about a target (posted on the policy and on the workload).
REFRESHING = "Refreshing"  # a refresh patch was applied
REFRESHED = "Refreshed"  # a refresh settled on the new digests
REFRESH_FAILED = "RefreshFailed"  # a refresh failed or timed out: a flap
ROLLING_BACK = "RollingBack"  # the failed refresh is patched back to the previous images
ROLLED_BACK = "RolledBack"  # a rollback settled on the previous images
ROLLBACK_STALLED = "RollbackStalled"  # a rollback did not settle: no longer followed
ROLLBACK_SUPERSEDED = "RollbackSuperseded"  # someone else changed the images during a rollback
CONTESTED = "Contested"  # another writer moved images we wrote: a contested attempt
PATCH_CONFLICT = "PatchConflict"  # the guarded patch's preconditions failed: retried next tick
PATCH_REFUSED = "PatchRefused"  # the API server (or the write guard) refused a patch for good
PATCH_OUTCOME_UNKNOWN = "PatchOutcomeUnknown"  # no answer to a patch: re-read next tick
STATUS_NOT_WRITTEN = "StatusNotWritten"  # the status (or a patch's intent) could not be written
PULL_POLICY_ALWAYS = "PullPolicyAlways"  # a declared container is pulled Always: not offline-safe
WORKLOAD_MISSING = "WorkloadMissing"
CONFLICT = "Conflict"
FROZEN = "Frozen"
LOCKED = "Locked"
WAITING_FOR_WINDOW = "WaitingForWindow"  # a drifted target waits for its next refresh window
LOCKSTEP_WAITING = "LockstepWaiting"  # a drifted target waits for a lockstep peer that cannot move

# Events about the policy.
RESET = "Reset"  # the reset annotation was honoured
REFRESH_OUTSIDE_WINDOW = "RefreshOutsideWindow"  # the override annotation was honoured, once
POLICY_INVALID = "PolicyInvalid"  # the spec could not be read: the policy does nothing
STATUS_UNREADABLE = "StatusUnreadable"  # the status could not be read: fail closed

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
