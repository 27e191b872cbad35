package checkpoint

// Every workflow.GetVersion change id of the Checkpoint, Restore and
// RecoverServer workflows, with why it exists. A change id guards commands a
// run recorded before the change did not make: such a run replays
// DefaultVersion and keeps its old commands.
//
// When one can go: a change id is needed only while a run recorded before
// it may still be replayed, i.e. while such a run is open. Checkpoints and
// restores finish within minutes, so a change id here can go one release
// after it was added, together with the replay fixtures recorded before it.

// setFenceChange is the workflow.GetVersion change id of the restore's
// fence step: a restore recorded before it (DefaultVersion) writes no
// fence record, as it did.
const setFenceChange = "restore-set-fence"

// abortTimeoutChange is the change id of abortTryTimeout: an abort try
// recorded before it had one minute, not thirty.
const abortTimeoutChange = "abort-try-timeout"

// searchAttributeChange is the change id of markCheckpoint: a run recorded
// before it upserted no CheckpointId.
const searchAttributeChange = "checkpoint-id-search-attribute"

// commitBoundChange is the change id of commitOptions' bounded retries: a
// commit recorded before it retried without limit for two hours.
const commitBoundChange = "commit-bounded-retries"
