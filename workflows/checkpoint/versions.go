package checkpoint

// The Checkpoint, Restore and RecoverServer workflows have no
// workflow.GetVersion change ids: a fresh run records no version marker.
// The Watchdog has two (below), recorded only in a run that declared a
// server dead.
//
// Recorded histories: this release replays only histories recorded by
// itself. The change ids this file listed before (restore-set-fence,
// abort-try-timeout, checkpoint-id-search-attribute,
// commit-bounded-retries) guarded commands of runs recorded by earlier
// releases and were collapsed into the code paths every fresh run took.
// Checkpoints and restores finish within minutes: upgrade workers when
// none runs (or let the ones in flight finish on the old workers). What a
// checkpoint wrote stays restorable across releases: a restore reads the
// checkpoint directory, validated, and replays no history (see
// integration/testdata/checkpoint-v1). The rollouts' rule is in
// workflows/rollout/versions.go.
//
// A workflow change from now on either keeps the command sequence of runs
// in flight (the replay fixtures in testdata guard it) or is released under
// this rule again, its fixtures re-recorded. Add a change id here only for
// a change that must reach runs already in flight.

// changeRetryFailedRecovery: the Watchdog runs a failed recovery again
// (same id) until it succeeds. A watchdog runs as long as its set, so this
// reaches runs in flight: one recorded before it never retried.
const changeRetryFailedRecovery = "watchdog-retry-failed-recovery"

// changeHoldSchedule: the Watchdog pauses the set's checkpoint schedule
// from a declaration until its recovery succeeded (HoldSchedule).
const changeHoldSchedule = "watchdog-hold-schedule"
