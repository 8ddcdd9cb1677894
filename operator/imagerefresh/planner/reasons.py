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
PATCH_REFUSED = "PatchRefused"  # the API server refused a patch for good
WRITE_REFUSED = "WriteRefused"  # the write guard refused a write: a bug, never sent
ROLLBACK_UNVERIFIED = "RollbackUnverified"  # with verify: no verified digest to roll back to
ROLLBACK_NOT_ALLOWED = "RollbackNotAllowed"  # not what the workload ran, or a failed build
PATCH_OUTCOME_UNKNOWN = "PatchOutcomeUnknown"  # no answer to a patch: re-read next tick
STATUS_NOT_WRITTEN = "StatusNotWritten"  # the status (or a patch's intent) could not be written
PULL_POLICY_ALWAYS = "PullPolicyAlways"  # a declared container is pulled Always: not offline-safe
WORKLOAD_MISSING = "WorkloadMissing"
CONFLICT = "Conflict"
FROZEN = "Frozen"
LOCKED = "Locked"
WAITING_FOR_WINDOW = "WaitingForWindow"  # a drifted target waits for its next refresh window
LOCKSTEP_WAITING = "LockstepWaiting"  # a drifted target waits for a lockstep peer that cannot move
UNTRUSTED = "Untrusted"  # with spec.verify: a desired digest has no valid signature
SIGNATURES_UNREADABLE = "SignaturesUnreadable"  # its signatures could not be read: not pinned
VERIFICATION_QUEUED = "VerificationQueued"  # the policy's verifications this tick are used up
VERIFICATION_DEFERRED = "VerificationDeferred"  # a signature lookup would go below the reserve
COOLING_DOWN = "CoolingDown"  # a new digest waits out spec.minimumAge
BUILD_FAILED = "BuildFailed"  # a digest whose rollout failed here before is not tried again
PRE_PULLING = "PrePulling"  # a refresh first pulls its digests onto the workload's nodes
PRE_PULL_FAILED = "PrePullFailed"  # a node could not pull (or not in time): the refresh holds
PRE_PULL_NOT_ALLOWED = "PrePullNotAllowed"  # prePull asked of an operator that may not create pods

# Events about the policy.
RESET = "Reset"  # the reset annotation was honoured
REFRESH_OUTSIDE_WINDOW = "RefreshOutsideWindow"  # the override annotation was honoured, once
POLICY_INVALID = "PolicyInvalid"  # the spec could not be read: the policy does nothing
STATUS_UNREADABLE = "StatusUnreadable"  # the status could not be read: fail closed
CRD_OUTDATED = "CRDOutdated"  # the installed CRD would drop fields the operator uses: no action

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
OFFLINE_READY = "RestartsOffline"  # every target's pods would restart with no registry
NOT_OFFLINE_READY = "NeedsRegistryToRestart"  # some container would not restart offline
OFFLINE_NOT_ASSESSED = "OfflineNotAssessed"  # a target's offline readiness is unknown

# Each reason by where it appears, for the reference in docs/api.md (tests/docs keeps the two
# in step): a reason added above belongs in at least one of these.

# Posted about a target: on the policy and on the target's workload.
TARGET_EVENTS = (
    REFRESHING,
    REFRESHED,
    REFRESH_FAILED,
    ROLLING_BACK,
    ROLLED_BACK,
    ROLLBACK_STALLED,
    ROLLBACK_SUPERSEDED,
    CONTESTED,
    PATCH_CONFLICT,
    PATCH_REFUSED,
    WRITE_REFUSED,
    ROLLBACK_UNVERIFIED,
    ROLLBACK_NOT_ALLOWED,
    PATCH_OUTCOME_UNKNOWN,
    PULL_POLICY_ALWAYS,
    WORKLOAD_MISSING,
    CONFLICT,
    FROZEN,
    LOCKED,
    WAITING_FOR_WINDOW,
    LOCKSTEP_WAITING,
    UNTRUSTED,
    SIGNATURES_UNREADABLE,
    VERIFICATION_QUEUED,
    VERIFICATION_DEFERRED,
    COOLING_DOWN,
    BUILD_FAILED,
    PRE_PULLING,
    PRE_PULL_FAILED,
    PRE_PULL_NOT_ALLOWED,
)
# Posted about the policy alone.
POLICY_EVENTS = (
    STATUS_NOT_WRITTEN,
    RESET,
    REFRESH_OUTSIDE_WINDOW,
    POLICY_INVALID,
    STATUS_UNREADABLE,
    CRD_OUTDATED,
)
# Set on a condition (derive_conditions; PolicyInvalid, StatusUnreadable and CRDOutdated by
# mark_unreadable).
CONDITIONS = (
    ALL_CURRENT,
    NOT_CURRENT,
    SUSPENDED,
    ROLLOUT_IN_FLIGHT,
    NO_ROLLOUT,
    SKIP_CEILING,
    SETTLING,
    ATTEMPT_CEILING,
    UNLOCKED,
    BUDGET_BELOW_RESERVE,
    WITHIN_BUDGET,
    EVIDENCE_UNREADABLE,
    EVIDENCE_READ,
    OFFLINE_READY,
    NOT_OFFLINE_READY,
    OFFLINE_NOT_ASSESSED,
    POLICY_INVALID,
    STATUS_UNREADABLE,
    CRD_OUTDATED,
)
# Condition reasons also posted as events when their condition changes (condition_events):
# Ready turning True, RateLimited and Degraded turning either way, OfflineReady turning True or
# False.
CONDITION_EVENTS = (
    ALL_CURRENT,
    OFFLINE_READY,
    NOT_OFFLINE_READY,
    BUDGET_BELOW_RESERVE,
    WITHIN_BUDGET,
    EVIDENCE_UNREADABLE,
    EVIDENCE_READ,
)
