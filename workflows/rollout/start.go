package rollout

// StartRolloutsName is the activity that starts a batch of rollouts from
// inside a worker (package activities/bookkeeping): with the worker's own
// Temporal client and eager workflow start, each rollout's first workflow
// task comes back with its start and runs in that worker at once, instead
// of waiting on the task queue. A workflow that admits a set's rollouts, or
// restores them, calls it.
const StartRolloutsName = "StartRollouts"

// MaxStartBatch bounds the inputs of one StartRollouts call: its input and
// result are in the caller's history.
const MaxStartBatch = 512

// StartRolloutsInput is one batch of rollouts to start.
type StartRolloutsInput struct {
	// Inputs are the runs to start: attempt 0 of a new rollout, or a later
	// attempt (a restore's).
	Inputs []Input `json:"inputs"`
	// TaskQueue the rollouts run on; empty: the worker's rollout task
	// queue. Eager start takes effect only on a queue this worker polls.
	TaskQueue string `json:"task_queue,omitempty"`
	// Memo entries added to every rollout's memo (a submission's stamp).
	Memo map[string]any `json:"memo,omitempty"`
	// InOrder starts the inputs one at a time, in order, so their start
	// times follow it; otherwise several start at once.
	InOrder bool `json:"in_order,omitempty"`
}

// StartRolloutsResult says what became of each input, by rollout id. A
// call retried after it started some reports those as Existing.
type StartRolloutsResult struct {
	// Started were started by this call.
	Started []string `json:"started"`
	// Existing had a run of the input's attempt already (running or
	// closed): nothing was started.
	Existing []string `json:"existing"`
	// Superseded have a run of a later attempt than the input's: nothing
	// was started.
	Superseded []string `json:"superseded,omitempty"`
}
