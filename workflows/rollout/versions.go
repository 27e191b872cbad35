package rollout

// The Rollout and RolloutGroup workflows have no workflow.GetVersion change
// ids: a fresh run records no version marker (each one is a MarkerRecorded
// event and, with the Go SDK, an upsert of TemporalChangeVersion: a
// visibility write), because a rollout is short and its fixed cost is
// counted per episode.
//
// Recorded histories: this release replays only histories recorded by
// itself. The project is pre-1.0, and the change ids this file listed
// before (env-local-activities, one-upsert-per-turn, budgets,
// step-rewards-verify-details, set-fence, group-ledger,
// upsert-changed-attributes, progress-attributes) guarded commands of runs
// recorded by earlier releases; they were collapsed into the code paths
// every fresh run took. Histories recorded by those releases are replayed
// by those releases, whose fixtures stay in git history.
//
// The upgrade rule, for a worker fleet with rollouts in flight: drain
// (let every running rollout finish on the old workers), or checkpoint the
// set, stop the old workers, and restore the checkpoint on the new ones. A
// restore starts new runs from the boundaries a checkpoint recorded; it
// replays nothing, so a checkpoint written by an earlier release (see
// integration/testdata/checkpoint-v1) restores onto this one.
//
// A workflow change from now on either keeps the command sequence of runs
// in flight (replay fixtures in testdata guard it) or is released under
// this rule again, its fixtures re-recorded. A new command a fresh run
// should take can also be asked for by a new field of Input that runs in
// flight do not carry, as ProgressAttributes (the progress upserts) and
// ResultInStore (StoreResult and RolloutReceipt before a held result) are:
// a recorded history replays its own input, so it never takes the new
// path, and a fresh run takes it with no version marker. Add a change id here, with
// why it exists and when it can go, only for a change that must reach runs
// already in flight.
