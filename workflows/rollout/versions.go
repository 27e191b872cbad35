package rollout

// Every workflow.GetVersion change id of the Rollout workflow, with why it
// exists. A change id guards commands a run recorded before the change did
// not make: such a run replays DefaultVersion and keeps its old commands.
//
// When one can go: a change id is needed only while a run recorded before
// it may still be replayed, i.e. while such a run is open in some namespace
// (a closed run is never replayed by a worker; a restore starts new runs,
// it does not replay old ones). Once no open run predates a change, delete
// its id and the DefaultVersion branch, and move the replay fixtures
// recorded before it to the release that still reads them.

// localEnvChange is the workflow.GetVersion change id of environment
// operations run as local activities. A run recorded before it
// (DefaultVersion) schedules them as regular activities, as it did; a run
// whose limits ask for regular activities never calls GetVersion, so its
// commands are those of before too.
const localEnvChange = "env-local-activities"

// upsertChange is the workflow.GetVersion change id of one search-attribute
// upsert per turn. With environment calls local, the phases "seeding",
// "environment" and "verifying" last only inside the workflow task that runs
// their local activities, and what a workflow task upserts becomes visible
// only when it completes: so no reader could see them, and their upserts
// (each one a history event and a visibility write) are skipped. The next
// phase that is waited in (model, parked, awaiting ack, completed, failed)
// carries the turn and progress time, so RolloutTurn, RolloutPhase and
// RolloutProgressAt are right at every point a reader can observe. A run
// recorded before it (DefaultVersion), or one with regular environment
// calls, upserts every phase change as it did.
const upsertChange = "one-upsert-per-turn"

// budgetsChange is the workflow.GetVersion change id of budgets. Runs
// recorded before it (DefaultVersion) get none of the new commands: the
// RolloutPhase upsert of a failure. Budget checks themselves add no command
// (workflow.Now is history time), and changed activity options are not
// compared on replay.
const budgetsChange = "budgets"

// detailsChange is the workflow.GetVersion change id of per-step rewards and
// verify details in the result. Runs recorded before it (DefaultVersion)
// keep neither, so a result they compute again on replay keeps its receipt.
const detailsChange = "step-rewards-verify-details"

// setFenceChange is the workflow.GetVersion change id of the set fence
// check: a run recorded before it (DefaultVersion) never consults the
// record, so its commands are those of before.
const setFenceChange = "set-fence"

// groupsChange is the workflow.GetVersion change id of group ledgers. Runs
// recorded before it (DefaultVersion), and rollouts outside a group (no
// Input.GroupSize), make no report: their command sequence is unchanged.
const groupsChange = "group-ledger"

// upsertDeltaChange is the workflow.GetVersion change id of phase upserts
// that carry only what changed. An upsert merges into the run's search
// attributes, so RolloutId, RolloutSet and RolloutAttempt (fixed for a run)
// need to be sent once per run, and RolloutPhase and RolloutTurn only when
// they move: a turn of a rollout waiting in "model" each turn then upserts
// its turn and progress time alone, about 280 history bytes fewer per turn.
// The first upsert of every run (a continued-as-new or restored one too)
// still sends them all. Runs recorded before it (DefaultVersion) upsert
// every attribute, as they did, so their histories replay.
const upsertDeltaChange = "upsert-changed-attributes"

// progressChange is the workflow.GetVersion change id of the progress
// attributes. Only runs whose input asks for them (Input.ProgressAttributes)
// call GetVersion, so runs recorded before, and runs started without the
// flag, replay with exactly the commands they had. The attributes ride on
// the phase upsert the run makes anyway: no command is added per turn.
const progressChange = "progress-attributes"
