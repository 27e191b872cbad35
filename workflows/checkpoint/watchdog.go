package checkpoint

import (
	"errors"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// watchdogRoundsPerRun is how many probe rounds one run of a watchdog
// makes before it continues as new (its history stays small).
const watchdogRoundsPerRun = 500

// watchdog is the state of one Watchdog run.
type watchdog struct {
	in     WatchdogInput
	det    Detection
	status WatchdogStatus
	stop   workflow.ReceiveChannel
	logger log.Logger
}

// Watchdog watches the environment servers of a set and recovers the
// rollouts of one it declares dead onto a replacement, with no operator.
// It ends when it is signalled to stop (SignalStopWatchdog) or when the
// set, once seen running, has had no running rollout for DefaultIdleRounds
// rounds. A probe round that cannot run (no worker) counts as no
// observation, never as a miss.
func Watchdog(ctx workflow.Context, in WatchdogInput) (WatchdogStatus, error) {
	if err := in.Validate(); err != nil {
		return WatchdogStatus{}, temporal.NewNonRetryableApplicationError("invalid watchdog input: "+err.Error(), ErrInvalidCoordinatorInput, nil)
	}
	if in.TaskQueue == "" {
		in.TaskQueue = rollout.TaskQueue
	}
	det, _ := in.Settings.Parse() // checked by Validate
	w := &watchdog{in: in, det: det, stop: workflow.GetSignalChannel(ctx, SignalStopWatchdog),
		logger: log.With(workflow.GetLogger(ctx), "set", in.Set)}
	w.status = WatchdogStatus{Set: in.Set, Phase: "watching", State: w.initialState(ctx)}
	if err := workflow.SetQueryHandler(ctx, QueryWatchdogStatus, func() (WatchdogStatus, error) { return w.status, nil }); err != nil {
		return WatchdogStatus{}, err
	}
	w.describe(ctx)
	for round := 0; ; round++ {
		if w.stop.ReceiveAsync(nil) {
			return w.finish(ctx, "stopped"), nil
		}
		if res, ok := w.probe(ctx, w.urls()); ok {
			w.observe(ctx, res)
			if w.idle(res.Running) {
				return w.finish(ctx, "done"), nil
			}
		}
		w.retryRecoveries(ctx)
		if round+1 >= watchdogRoundsPerRun || workflow.GetInfo(ctx).GetContinueAsNewSuggested() {
			next := w.in
			st := w.status.State
			next.State = &st
			return WatchdogStatus{}, workflow.NewContinueAsNewError(ctx, WatchdogWorkflowName, next)
		}
		if w.sleep(ctx) {
			return w.finish(ctx, "stopped"), nil
		}
	}
}

// initialState is the state carried in, or a fresh one whose servers all
// count as having answered when watching began.
func (w *watchdog) initialState(ctx workflow.Context) WatchdogState {
	if w.in.State != nil {
		return *w.in.State
	}
	now := workflow.Now(ctx)
	st := WatchdogState{}
	for _, u := range w.in.Participants {
		st.Watched = append(st.Watched, WatchedServer{URL: u, Liveness: Liveness{LastAnswer: now}})
	}
	return st
}

func (w *watchdog) urls() []string {
	out := make([]string, 0, len(w.status.State.Watched))
	for _, s := range w.status.State.Watched {
		out = append(out, s.URL)
	}
	return out
}

// probe runs one probe round; ok is false when the round could not run.
func (w *watchdog) probe(ctx workflow.Context, servers []string) (ProbeParticipantsResult, bool) {
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: w.det.Timeout + 30*time.Second,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 1},
		Summary:             fmt.Sprintf("probe %d environment servers", len(servers)),
	})
	var res ProbeParticipantsResult
	err := workflow.ExecuteActivity(actx, ProbeParticipantsName, ProbeParticipantsInput{
		Set: w.in.Set, Servers: servers, Timeout: w.det.Timeout.String(),
	}).Get(ctx, &res)
	if err != nil || len(res.Answered) != len(servers) {
		w.logger.Warn("probe round did not run; no server counted as missing", "error", err)
		return ProbeParticipantsResult{}, false
	}
	return res, true
}

// observe counts the round's answers and recovers each server found dead.
func (w *watchdog) observe(ctx workflow.Context, res ProbeParticipantsResult) {
	now := workflow.Now(ctx)
	st := &w.status.State
	st.Rounds++
	var dead []int
	for i := range st.Watched {
		l, isDead := w.det.Observe(st.Watched[i].Liveness, res.Answered[i], now)
		st.Watched[i].Liveness = l
		if isDead {
			dead = append(dead, i)
		}
	}
	for _, i := range dead {
		w.recoverServer(ctx, i, now)
	}
}

// idle notes the set's running rollouts and reports whether the watchdog
// is done: the set was seen running and has not been for a while.
func (w *watchdog) idle(running int) bool {
	st := &w.status.State
	if running > 0 {
		st.SeenRunning, st.IdleRounds = true, 0
		return false
	}
	if st.SeenRunning {
		st.IdleRounds++
	}
	return st.IdleRounds >= DefaultIdleRounds
}

// recoverServer declares the i-th watched server dead and moves the set's
// rollouts on it to a replacement through a RecoverServer child.
func (w *watchdog) recoverServer(ctx workflow.Context, i int, now time.Time) {
	st := &w.status.State
	ws := st.Watched[i]
	d := Declaration{Server: ws.URL, DeclaredAt: now, LastAnswer: ws.Liveness.LastAnswer, Misses: ws.Liveness.Misses,
		WorkflowID: AutoRecoverWorkflowID(w.in.Set, ws.URL, ws.Generation)}
	st.Declarations = append(st.Declarations, d)
	st.Watched[i].Retry = nil // a death declared again runs the same recovery now
	k := len(st.Declarations) - 1
	w.logger.Warn("environment server declared dead", "server", ws.URL, "misses", d.Misses, "last_answer", d.LastAnswer)
	w.publish(ctx)
	w.count(ctx, MetricServersDeclaredDead, 1)
	w.holdSchedule(ctx, true, fmt.Sprintf("recovery of %s under way (declared dead %s)", ws.URL, now.UTC().Format(time.RFC3339)))
	replacement, standby, ok := w.replacement(ctx, ws.URL)
	if !ok {
		st.Declarations[k].Error = "stopped while waiting for the server to come back"
		return
	}
	st.Declarations[k].Replacement = replacement
	w.attempt(ctx, i, RecoveryRetry{Declaration: k, Replacement: replacement, Standby: standby})
}

// attempt runs the recovery of the i-th watched server onto r.Replacement
// and records what came of it: on success the replacement is watched as
// the next generation; on failure the recovery is run again later
// (retryRecoveries).
func (w *watchdog) attempt(ctx workflow.Context, i int, r RecoveryRetry) {
	st := &w.status.State
	ws := st.Watched[i]
	w.status.Phase = "recovering"
	w.describe(ctx)
	res, err := w.runRecovery(ctx, ws, r.Replacement)
	d := &st.Declarations[r.Declaration]
	d.RecoveredAt = workflow.Now(ctx)
	w.status.Phase = "watching"
	// Whatever came of it, the server is watched afresh from now.
	st.Watched[i].Liveness = Liveness{LastAnswer: workflow.Now(ctx)}
	if err != nil {
		r.Tries++
		r.NextAt = workflow.Now(ctx).Add(w.det.RetryAfter(r.Tries))
		d.Error, d.Tries = err.Error(), r.Tries
		st.Watched[i].Retry = &r
		w.logger.Error("automatic recovery failed; it runs again", "server", ws.URL, "tries", r.Tries, "next_at", r.NextAt, "error", err)
		w.count(ctx, MetricRecoveriesFailed, 1)
		w.publish(ctx)
		return
	}
	d.Error, d.Recovered = "", res.Affected
	w.count(ctx, MetricRolloutsRecovered, int64(res.Affected))
	st.Watched[i].URL, st.Watched[i].Generation, st.Watched[i].Retry = r.Replacement, ws.Generation+1, nil
	if r.Standby {
		st.StandbyUsed++
	}
	w.publish(ctx)
	w.holdSchedule(ctx, false, fmt.Sprintf("%s recovered onto %s", ws.URL, r.Replacement))
}

// holdSchedule pauses (hold) or releases the set's checkpoint schedule
// around recoveries: from a declaration until every recovery it started
// has succeeded. A cut that fired meanwhile would prepare a restarted,
// still empty server: it would hold none of the moved rollouts' sessions
// and its prepare refuses the recovery's restore. Best effort: a schedule
// that cannot be paused leaves the recovery to its retries.
func (w *watchdog) holdSchedule(ctx workflow.Context, hold bool, note string) {
	st := &w.status.State
	if hold == st.ScheduleHeld || (!hold && w.retrying()) {
		return
	}
	// Runs recorded before the watchdog held schedules replay as they ran.
	if workflow.GetVersion(ctx, changeHoldSchedule, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return
	}
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 30 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 3},
		Summary:             map[bool]string{true: "pause the checkpoint schedule", false: "release the checkpoint schedule"}[hold],
	})
	var res HoldScheduleResult
	err := workflow.ExecuteActivity(actx, HoldScheduleName, HoldScheduleInput{Set: w.in.Set, Hold: hold, Note: note}).Get(ctx, &res)
	if err != nil {
		w.logger.Warn("checkpoint schedule not changed", "hold", hold, "error", err)
		return
	}
	st.ScheduleHeld = res.Held
}

// retrying reports whether a failed recovery waits to run again.
func (w *watchdog) retrying() bool {
	for _, s := range w.status.State.Watched {
		if s.Retry != nil {
			return true
		}
	}
	return false
}

// retryRecoveries runs again each failed recovery whose wait is over.
func (w *watchdog) retryRecoveries(ctx workflow.Context) {
	now := workflow.Now(ctx)
	for i := range w.status.State.Watched {
		r := w.status.State.Watched[i].Retry
		if r == nil || now.Before(r.NextAt) {
			continue
		}
		// Runs recorded before failed recoveries were retried did not
		// retry them: they replay as they ran.
		if workflow.GetVersion(ctx, changeRetryFailedRecovery, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
			return
		}
		w.logger.Info("running a failed recovery again", "server", w.status.State.Watched[i].URL, "tries", r.Tries)
		w.attempt(ctx, i, *r)
	}
}

// count adds n to a watchdog counter of the set.
func (w *watchdog) count(ctx workflow.Context, name string, n int64) {
	workflow.GetMetricsHandler(ctx).WithTags(map[string]string{"set": w.in.Set}).Counter(name).Inc(n)
}

// publish shows the declarations in the watchdog's memo (the set's health
// and the Web UI read it) and its current details.
func (w *watchdog) publish(ctx workflow.Context) {
	if err := workflow.UpsertMemo(ctx, map[string]any{MemoDeclarations: w.status.State.Declarations}); err != nil {
		w.logger.Error("watchdog memo not updated", "error", err)
	}
	w.describe(ctx)
}

// replacement is the next registered standby, else the dead server's own
// address once it answers again (its supervisor restarted it). ok is false
// when the watchdog was stopped while waiting.
func (w *watchdog) replacement(ctx workflow.Context, server string) (url string, standby, ok bool) {
	if st := w.status.State; st.StandbyUsed < len(w.in.Standby) {
		return w.in.Standby[st.StandbyUsed], true, true
	}
	w.status.Phase = "waiting"
	w.describe(ctx)
	for {
		if res, ok := w.probe(ctx, []string{server}); ok && res.Answered[0] {
			return server, false, true
		}
		if w.sleep(ctx) {
			return "", false, false
		}
	}
}

// runRecovery runs the recovery of ws onto replacement as a child that
// outlives the watchdog. A recovery already started under the same id (by
// an earlier run of this watchdog) is not started again.
func (w *watchdog) runRecovery(ctx workflow.Context, ws WatchedServer, replacement string) (RecoverServerResult, error) {
	cctx := workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{
		WorkflowID:            AutoRecoverWorkflowID(w.in.Set, ws.URL, ws.Generation),
		ParentClosePolicy:     enumspb.PARENT_CLOSE_POLICY_ABANDON,
		WorkflowIDReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE_FAILED_ONLY,
		StaticSummary:         fmt.Sprintf("automatic recovery of set %s from the death of %s onto %s", w.in.Set, ws.URL, replacement),
	})
	var res RecoverServerResult
	err := workflow.ExecuteChildWorkflow(cctx, RecoverServerWorkflowName, RecoverServerInput{
		Set: w.in.Set, Server: ws.URL, Replacement: replacement, Root: w.in.Root,
		RequestID: AutoRecoverRequestID(ws.URL, ws.Generation), TaskQueue: w.in.TaskQueue,
	}).Get(ctx, &res)
	var started *temporal.ChildWorkflowExecutionAlreadyStartedError
	if errors.As(err, &started) {
		return res, nil
	}
	return res, err
}

// sleep waits one interval; it reports whether a stop signal came.
func (w *watchdog) sleep(ctx workflow.Context) bool {
	stopped := false
	timer := workflow.NewTimer(ctx, w.det.Every)
	sel := workflow.NewSelector(ctx)
	sel.AddFuture(timer, func(workflow.Future) {})
	sel.AddReceive(w.stop, func(c workflow.ReceiveChannel, _ bool) { c.Receive(ctx, nil); stopped = true })
	sel.Select(ctx)
	return stopped
}

func (w *watchdog) finish(ctx workflow.Context, phase string) WatchdogStatus {
	if w.status.State.ScheduleHeld {
		for i := range w.status.State.Watched {
			w.status.State.Watched[i].Retry = nil // no retry runs after the watchdog ends
		}
		w.holdSchedule(ctx, false, "the watchdog ended ("+phase+")")
	}
	w.status.Phase = phase
	w.describe(ctx)
	return w.status
}

// describe shows the watchdog's phase and last declaration in the Web UI.
func (w *watchdog) describe(ctx workflow.Context) {
	st := w.status.State
	text := fmt.Sprintf("**%s** — set %s: %d environment servers watched (every %s, dead after %d misses and %s silent), %d declared dead",
		w.status.Phase, w.in.Set, len(st.Watched), w.det.Every, w.det.Misses, w.det.Bound, len(st.Declarations))
	if n := len(st.Declarations); n > 0 {
		text += "; last: " + st.Declarations[n-1].Summary()
	}
	workflow.SetCurrentDetails(ctx, text)
}

// Summary is the declaration in one line, as the set's health shows it.
func (d Declaration) Summary() string {
	s := fmt.Sprintf("env server %s declared dead at %s (%d probes missed)", d.Server, d.DeclaredAt.UTC().Format(time.RFC3339), d.Misses)
	switch {
	case d.Error != "":
		return s + ", recovery failed: " + d.Error
	case d.RecoveredAt.IsZero():
		return s + ", recovering"
	default:
		return s + fmt.Sprintf(", recovered %d rollouts onto %s", d.Recovered, d.Replacement)
	}
}
