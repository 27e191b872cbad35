package checkpoint

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/turnstile-rl/turnstile/participants/protocol"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// ServerDigest is the short digest of an environment server's URL that
// names its recovery (a URL holds characters a workflow ID or a path
// component should not).
func ServerDigest(serverURL string) string {
	sum := sha256.Sum256([]byte(serverURL))
	return hex.EncodeToString(sum[:6])
}

// EffectiveRestoreID is the restore id of the recovery: RequestID, or
// "recover-<server digest>".
func (in RecoverServerInput) EffectiveRestoreID() string {
	if in.RequestID != "" {
		return in.RequestID
	}
	return "recover-" + ServerDigest(in.Server)
}

// Validate checks a recovery input; the error names the bad field.
func (in RecoverServerInput) Validate() error {
	if err := rollout.ValidateSet(in.Set); err != nil {
		return err
	}
	// The replacement may listen where the dead server did (a restart in
	// place): each URL is checked on its own.
	for _, u := range []struct{ what, url string }{{"server", in.Server}, {"replacement", in.Replacement}} {
		clean, err := protocol.ValidateParticipants([]string{u.url})
		if err != nil {
			return fmt.Errorf("%s: %w", u.what, err)
		}
		if clean[0] != u.url {
			return fmt.Errorf("%s %q: write a base URL without spaces or a trailing slash", u.what, u.url)
		}
	}
	if in.CheckpointID != "" {
		if err := ValidateName("checkpoint_id", in.CheckpointID); err != nil {
			return err
		}
	}
	if in.RequestID != "" {
		if err := ValidateName("request_id", in.RequestID); err != nil {
			return err
		}
	}
	return ValidateRoot(in.Root)
}

// recoverRun is the state of one RecoverServer execution.
type recoverRun struct {
	in     RecoverServerInput
	rid    string
	status RecoverStatus
	logger log.Logger
}

// RecoverServer moves the rollouts of a set whose sessions lived on a dead
// environment server to its replacement, and touches nothing else. It
// reuses the restore's steps on that subset: the plan (which rollouts, the
// checkpoint, their new attempts) is persisted as the attempt map of a
// restore of the checkpoint; the dead server's artifact is installed on the
// replacement as those attempts only; their old runs are ended; their new
// runs start held (from the boundary, or from the seed for restart-only
// environments and for rollouts the checkpoint does not hold); then the
// replacement resumes, then the new runs. Rollouts on healthy servers keep
// their runs, attempts and sessions. Running it again (same request) finishes
// an interrupted recovery and starts no attempt twice.
func RecoverServer(ctx workflow.Context, in RecoverServerInput) (RecoverServerResult, error) {
	if err := in.Validate(); err != nil {
		return RecoverServerResult{}, temporal.NewNonRetryableApplicationError("invalid recover input: "+err.Error(), ErrInvalidCoordinatorInput, nil)
	}
	if in.TaskQueue == "" {
		in.TaskQueue = rollout.TaskQueue
	}
	r := &recoverRun{in: in, rid: in.EffectiveRestoreID(),
		logger: log.With(workflow.GetLogger(ctx), "set", in.Set, "server", in.Server)}
	r.status.Result.RestoreID = r.rid
	if err := workflow.SetQueryHandler(ctx, QueryRecoverStatus, func() (RecoverStatus, error) { return r.status, nil }); err != nil {
		return RecoverServerResult{}, err
	}
	r.setPhase(ctx, "plan", "finding the rollouts the dead server held")
	var plan PlanRecoveryResult
	if err := runStep(ctx, step{"plan recovery", 30 * time.Minute, PlanRecoveryName}, PlanRecoveryInput{
		Set: in.Set, Server: in.Server, Replacement: in.Replacement, CheckpointID: in.CheckpointID, Root: in.Root, RestoreID: r.rid,
	}, &plan); err != nil {
		return RecoverServerResult{}, r.fail(err)
	}
	res := &r.status.Result
	res.CheckpointID, res.Participant, res.Affected = plan.CheckpointID, plan.Participant, plan.Affected
	res.Continue, res.StartOver, res.Untouched = plan.Continue, plan.StartOver, plan.Untouched
	markCheckpoint(ctx, plan.CheckpointID, r.logger)
	if plan.Affected == 0 {
		r.setPhase(ctx, "done", "the dead server held no running rollout of the set")
		return *res, nil
	}
	if err := r.install(ctx, plan); err != nil {
		return RecoverServerResult{}, r.fail(err)
	}
	r.setPhase(ctx, "done", fmt.Sprintf("%d rollouts moved to %s (%d continue, %d of them by replay; %d start over); %d untouched",
		res.Affected, in.Replacement, res.Continue, res.Replayed, res.StartOver, res.Untouched))
	return *res, nil
}

// install runs the restore's steps on the plan's rollouts only.
func (r *recoverRun) install(ctx workflow.Context, plan PlanRecoveryResult) error {
	in, res := r.in, &r.status.Result
	cp := plan.CheckpointID
	r.setPhase(ctx, "participant", fmt.Sprintf("installing participant %d of checkpoint %s on %s", plan.Participant, cp, in.Replacement))
	var rp RestoreParticipantsResult
	if err := runStep(ctx, step{"restore the replacement", 30 * time.Minute, RestoreParticipantsName}, RestoreParticipantsInput{
		CheckpointID: cp, RestoreID: r.rid, Root: in.Root, Participants: plan.Participants, Indexes: []int{plan.Participant},
	}, &rp); err != nil {
		return err
	}
	r.setPhase(ctx, "terminate", fmt.Sprintf("ending the old runs of %d rollouts", plan.Affected))
	var term TerminateStaleResult
	if err := runStep(ctx, step{"terminate replaced runs", 30 * time.Minute, TerminateStaleName}, TerminateStaleInput{
		CheckpointID: cp, RestoreID: r.rid, Root: in.Root,
	}, &term); err != nil {
		return err
	}
	res.Terminated = term.Terminated
	r.setPhase(ctx, "start", fmt.Sprintf("starting %d new attempts, held until the replacement resumes", plan.Affected))
	var st StartRestoredResult
	if err := runStep(ctx, step{fmt.Sprintf("start %d rollouts", plan.Affected), time.Hour, StartRestoredName}, StartRestoredInput{
		CheckpointID: cp, RestoreID: r.rid, Root: in.Root, Participants: plan.Participants, TaskQueue: in.TaskQueue,
	}, &st); err != nil {
		return err
	}
	res.Started = st.Started
	// A rollout its old run finished meanwhile (a false positive) did not
	// move.
	res.Affected -= st.FinishedMeanwhile
	// What each started as: a replay that diverged turned a planned
	// continuation into a start-over.
	res.Continue, res.StartOver = st.Continue, st.StartOver+st.OfferAgain
	res.Replayed, res.ReplayDiverged = st.Replayed, st.Diverged
	r.setPhase(ctx, "resume", "resuming the replacement, then the moved rollouts")
	var resP ResumeParticipantsResult
	if err := runStep(ctx, step{"resume the replacement", 10 * time.Minute, ResumeRestoredParticipantsName}, ResumeRestoredParticipantsInput{
		CheckpointID: cp, RestoreID: r.rid, Participants: []string{in.Replacement},
	}, &resP); err != nil {
		return err
	}
	var resR ResumeRolloutsResult
	return runStep(ctx, step{"resume moved rollouts", 30 * time.Minute, ResumeRestoredRolloutsName}, ResumeRestoredRolloutsInput{
		CheckpointID: cp, RestoreID: r.rid, Root: in.Root,
	}, &resR)
}

func (r *recoverRun) setPhase(ctx workflow.Context, phase, detail string) {
	r.status.Phase, r.status.Detail = phase, detail
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("**%s** — recovery of set %s from %s: %s", phase, r.in.Set, r.in.Server, detail))
	r.logger.Info("recover phase", "phase", phase, "detail", detail)
}

// fail names the phase that failed; every step is idempotent, so running
// the same recovery again finishes it.
func (r *recoverRun) fail(err error) error {
	hint := "nothing was touched"
	if r.status.Phase != "plan" {
		hint = "the replacement and the moved rollouts stay paused; run the same recovery again to finish it"
	}
	r.status.Phase, r.status.Detail = "failed", err.Error()
	return temporal.NewNonRetryableApplicationError(
		fmt.Sprintf("recovery of set %s from %s failed: %v (%s)", r.in.Set, r.in.Server, err, hint), ErrRestoreFailed, err)
}
