package checkpoint

import (
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/turnstile-rl/turnstile/participants/protocol"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

func (in RestoreInput) validate() error {
	if err := ValidateName("checkpoint_id", in.CheckpointID); err != nil {
		return err
	}
	if in.RestoreID != "" {
		if err := ValidateName("restore_id", in.RestoreID); err != nil {
			return err
		}
	}
	if err := ValidateRoot(in.Root); err != nil {
		return err
	}
	_, err := protocol.ValidateParticipants(in.Participants)
	return err
}

// EffectiveRestoreID is the restore's id: RestoreID, or the checkpoint id
// when it is empty. Start the workflow as RestoreWorkflowID of it.
func (in RestoreInput) EffectiveRestoreID() string {
	if in.RestoreID != "" {
		return in.RestoreID
	}
	return in.CheckpointID
}

// restoreRun is the state of one Restore execution.
type restoreRun struct {
	in     RestoreInput
	phase  string
	logger log.Logger
}

// Restore installs a committed checkpoint as new attempts: it validates the
// whole checkpoint before touching anything, fixes the attempt map (one
// above the highest attempt ever issued, persisted so a re-run reuses it),
// restores the environment servers as those attempts (the old ones are
// refused from then on), ends any old run still alive, starts the new runs
// held for the checkpoint, and only when all of it is installed resumes the
// environment servers, then the rollouts. Running the same restore (same
// restore id) again finishes an interrupted one and never starts a second
// run of one attempt; a restore under a new restore id restores the same
// checkpoint again, also on environment servers that are still alive.
func Restore(ctx workflow.Context, in RestoreInput) (RestoreResult, error) {
	if err := in.validate(); err != nil {
		return RestoreResult{}, temporal.NewNonRetryableApplicationError("invalid restore input: "+err.Error(), ErrInvalidCoordinatorInput, nil)
	}
	if in.TaskQueue == "" {
		in.TaskQueue = rollout.TaskQueue
	}
	in.RestoreID = in.EffectiveRestoreID()
	r := &restoreRun{in: in, logger: log.With(workflow.GetLogger(ctx), "checkpoint", in.CheckpointID, "restore", in.RestoreID)}
	res := RestoreResult{CheckpointID: in.CheckpointID}
	markCheckpoint(ctx, in.CheckpointID, r.logger)

	r.setPhase(ctx, "validate", "reading and checking the whole checkpoint")
	var val ValidateCheckpointResult
	if err := runStep(ctx, step{"validate checkpoint", 30 * time.Minute, ValidateCheckpointName}, ValidateCheckpointInput{
		CheckpointID: in.CheckpointID, Root: in.Root, Participants: in.Participants,
	}, &val); err != nil {
		return RestoreResult{}, r.fail(err)
	}

	r.setPhase(ctx, "attempts", fmt.Sprintf("set %s: %d records", val.Set, val.Records))
	var plan PlanAttemptsResult
	if err := runStep(ctx, step{"plan attempts", 30 * time.Minute, PlanAttemptsName}, PlanAttemptsInput{
		CheckpointID: in.CheckpointID, RestoreID: in.RestoreID, Root: in.Root, Participants: in.Participants,
	}, &plan); err != nil {
		return RestoreResult{}, r.fail(err)
	}
	res.AttemptsDigest = plan.Digest
	if err := r.fenceSet(ctx, val.Set); err != nil {
		return RestoreResult{}, r.fail(err)
	}

	r.setPhase(ctx, "participants", fmt.Sprintf("installing %d environment servers as the new attempts", len(in.Participants)))
	var rp RestoreParticipantsResult
	if err := runStep(ctx, step{"restore participants", 30 * time.Minute, RestoreParticipantsName}, RestoreParticipantsInput{
		CheckpointID: in.CheckpointID, RestoreID: in.RestoreID, Root: in.Root, Participants: in.Participants,
	}, &rp); err != nil {
		return RestoreResult{}, r.fail(err)
	}

	r.setPhase(ctx, "terminate", fmt.Sprintf("ending runs of the replaced attempts and of %d rollouts started after the cut", plan.Fence))
	var term TerminateStaleResult
	if err := runStep(ctx, step{"terminate replaced runs", 30 * time.Minute, TerminateStaleName}, TerminateStaleInput{
		CheckpointID: in.CheckpointID, RestoreID: in.RestoreID, Root: in.Root,
	}, &term); err != nil {
		return RestoreResult{}, r.fail(err)
	}
	res.Terminated = term.Terminated

	r.setPhase(ctx, "start", fmt.Sprintf("starting %d new attempts, held until everything is installed", plan.Start))
	var st StartRestoredResult
	//lint:ignore S1016 spelled out: a field added to RestoreInput must not reach the step unnoticed
	if err := runStep(ctx, step{fmt.Sprintf("start %d rollouts", plan.Start), time.Hour, StartRestoredName}, StartRestoredInput{
		CheckpointID: in.CheckpointID, RestoreID: in.RestoreID, Root: in.Root, Participants: in.Participants, TaskQueue: in.TaskQueue,
	}, &st); err != nil {
		return RestoreResult{}, r.fail(err)
	}
	res.Restored, res.StartedOver, res.OfferedAgain, res.Started, res.Queued = st.Continue, st.StartOver, st.OfferAgain, st.Started, st.Queued
	res.Replayed, res.ReplayDiverged = st.Replayed, st.Diverged

	// Environment servers first: a rollout released before its server
	// would only be answered "parked".
	r.setPhase(ctx, "resume", "resuming environment servers, then rollouts")
	var resP ResumeParticipantsResult
	if err := runStep(ctx, step{"resume participants", 10 * time.Minute, ResumeRestoredParticipantsName}, ResumeRestoredParticipantsInput{
		CheckpointID: in.CheckpointID, RestoreID: in.RestoreID, Participants: in.Participants,
	}, &resP); err != nil {
		return RestoreResult{}, r.fail(err)
	}
	var resR ResumeRolloutsResult
	if err := runStep(ctx, step{"resume rollouts", 30 * time.Minute, ResumeRestoredRolloutsName}, ResumeRestoredRolloutsInput{
		CheckpointID: in.CheckpointID, RestoreID: in.RestoreID, Root: in.Root,
	}, &resR); err != nil {
		return RestoreResult{}, r.fail(err)
	}
	r.setPhase(ctx, "done", fmt.Sprintf("%d continue, %d start over, %d offer their result again", res.Restored, res.StartedOver, res.OfferedAgain))
	return res, nil
}

// fenceSet writes the set's fence record before anything is installed,
// started or resumed: a run of the set started before it, which the
// attempt map could not name (a dataset rollout or a custom id visibility
// did not list yet), stops at its next check instead of acting on the
// restored world.
func (r *restoreRun) fenceSet(ctx workflow.Context, set string) error {
	r.setPhase(ctx, "fence", fmt.Sprintf("set %s: every run started before now is of the world this restore replaces", set))
	var fr FenceSetResult
	return runStep(ctx, step{"fence the set", 10 * time.Minute, FenceSetName}, FenceSetInput{
		CheckpointID: r.in.CheckpointID, RestoreID: r.in.RestoreID, Set: set,
	}, &fr)
}

func (r *restoreRun) setPhase(ctx workflow.Context, phase, detail string) {
	r.phase = phase
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("**%s** — %s: %s", phase, r.what(), detail))
	r.logger.Info("restore phase", "phase", phase, "detail", detail)
}

// fail names the step that failed. Nothing is rolled back: a failure
// before the participants step touched nothing, and after it every step is
// idempotent, so running the same restore again finishes it.
func (r *restoreRun) fail(err error) error {
	hint := "nothing was touched"
	var app *temporal.ApplicationError
	switch {
	case r.phase == "validate" || r.phase == "attempts":
	case errors.As(err, &app) && app.Type() == ErrNotInstalled:
		// The same restore would be refused the same way.
		hint = "environment servers it installed stay paused; resume them and restore again under a new restore id"
	default:
		hint = "environment servers and rollouts stay paused; run the same restore again, under the same restore id, to finish it"
	}
	return temporal.NewNonRetryableApplicationError(
		fmt.Sprintf("%s failed in phase %s: %v (%s)", r.what(), r.phase, err, hint), ErrRestoreFailed, err)
}

// what names the restore in details and errors.
func (r *restoreRun) what() string {
	if r.in.RestoreID == r.in.CheckpointID {
		return "restore of checkpoint " + r.in.CheckpointID
	}
	return fmt.Sprintf("restore %s of checkpoint %s", r.in.RestoreID, r.in.CheckpointID)
}
