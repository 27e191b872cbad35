package checkpoint

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/turnstile-rl/turnstile/participants/protocol"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// Bounds of a checkpoint.
const (
	// CheckpointSettle is how long past its deadline the cut may take: a
	// rollout whose model call is cancelled at the deadline needs a moment
	// to report its park. Past deadline+settle the checkpoint aborts.
	CheckpointSettle = 30 * time.Second
	// MaxCheckpointTimeout bounds the deadline, so a typo cannot hold a set
	// parked for days.
	MaxCheckpointTimeout = 24 * time.Hour
	// DefaultLeaseGrace is a checkpoint's lease grace when its input gives
	// none: a parked rollout resumes by itself at deadline + settle + grace
	// if the checkpoint neither resumed nor renewed it.
	DefaultLeaseGrace = 5 * time.Minute
	// MaxLeaseGrace bounds the lease grace, so a typo cannot hold a set
	// parked for days by a checkpoint that vanished.
	MaxLeaseGrace = 24 * time.Hour
)

// coordinatorRetry retries transient failures (a participant restarting,
// Temporal unavailable); the activities mark what a retry cannot fix.
var coordinatorRetry = &temporal.RetryPolicy{
	InitialInterval:    time.Second,
	BackoffCoefficient: 2,
	MaximumInterval:    30 * time.Second,
	NonRetryableErrorTypes: []string{
		rollout.ErrBadInput, ErrCheckpointInvalid, ErrMemberMissing,
		ErrParticipantRefused, ErrAttemptConflict, ErrMemberRefused,
	},
}

// abortAttempts bounds the tries of a checkpoint's abort.
const abortAttempts = 4

// abortTryTimeout is how long one try of the abort may run. It resumes every
// member by an update each, and a busy set answers updates only between
// rollout workflow tasks: a soak of 1,000 rollouts took minutes to resume
// them, so one-minute tries all timed out and left hundreds parked. A try
// heartbeats its progress, so a dead worker is still noticed within the
// heartbeat timeout.
const abortTryTimeout = 30 * time.Minute

// coordinatorHeartbeat is how soon a dead coordinator worker is noticed, and
// how soon a cancelled fan-out stops.
const coordinatorHeartbeat = 20 * time.Second

// stepOptions are the options of one coordinator step. WaitForCancellation:
// a cancelled park must have stopped sending parks before the abort resumes
// everyone, or a late park would hold a rollout for a dead checkpoint.
func stepOptions(summary string, timeout time.Duration) workflow.ActivityOptions {
	return workflow.ActivityOptions{
		StartToCloseTimeout:    timeout,
		ScheduleToCloseTimeout: 4 * timeout,
		HeartbeatTimeout:       coordinatorHeartbeat,
		WaitForCancellation:    true,
		RetryPolicy:            coordinatorRetry,
		Summary:                summary,
	}
}

// markCheckpoint makes the run searchable by its checkpoint
// (CheckpointId), however it was started: the starter and the trainer set
// it at start, and then it is not upserted again; the Temporal CLI does
// not.
func markCheckpoint(ctx workflow.Context, checkpointID string, logger log.Logger) {
	key := temporal.NewSearchAttributeKeyKeyword(rollout.SACheckpointID)
	if v, ok := workflow.GetTypedSearchAttributes(ctx).GetKeyword(key); ok && v == checkpointID {
		return
	}
	if err := workflow.UpsertTypedSearchAttributes(ctx, key.ValueSet(checkpointID)); err != nil {
		logger.Warn("search attribute upsert failed", "error", err)
	}
}

// step is one coordinator activity of the Checkpoint or Restore workflow.
type step struct {
	summary string // shown in the Web UI, and the prefix of its error
	timeout time.Duration
	name    string // activity name
}

// runStep runs one coordinator activity and waits for its result in out.
func runStep(ctx workflow.Context, s step, in, out any) error {
	return runStepWith(ctx, s, stepOptions(s.summary, s.timeout), in, out)
}

// runStepWith is runStep with the activity options given.
func runStepWith(ctx workflow.Context, s step, opts workflow.ActivityOptions, in, out any) error {
	actx := workflow.WithActivityOptions(ctx, opts)
	if err := workflow.ExecuteActivity(actx, s.name, in).Get(ctx, out); err != nil {
		return fmt.Errorf("%s: %w", s.summary, err)
	}
	return nil
}

// validate checks a checkpoint input and returns its absolute deadline
// (Timeout is turned into one once, from the workflow's start time).
func (in CheckpointInput) validate(now time.Time) (time.Time, error) {
	if err := ValidateName("checkpoint_id", in.CheckpointID); err != nil {
		return time.Time{}, err
	}
	if err := rollout.ValidateSet(in.Set); err != nil {
		return time.Time{}, err
	}
	if err := ValidateRoot(in.Root); err != nil {
		return time.Time{}, err
	}
	if _, err := protocol.ValidateParticipants(in.Participants); err != nil {
		return time.Time{}, err
	}
	deadline := in.Deadline
	switch {
	case !deadline.IsZero() && in.Timeout != "":
		return time.Time{}, errors.New("give deadline or timeout, not both")
	case in.Timeout != "":
		d, err := time.ParseDuration(in.Timeout)
		if err != nil || d <= 0 {
			return time.Time{}, fmt.Errorf("timeout %q: want a positive duration such as 90s or 2m", in.Timeout)
		}
		deadline = now.Add(d)
	case deadline.IsZero():
		return time.Time{}, errors.New("deadline (RFC 3339) or timeout (duration) is required")
	}
	if !deadline.After(now) {
		return time.Time{}, fmt.Errorf("deadline %s is not after the checkpoint's start %s", deadline.Format(time.RFC3339), now.Format(time.RFC3339))
	}
	if len(in.Tag) > MaxTagLen {
		return time.Time{}, fmt.Errorf("tag: %d bytes, at most %d", len(in.Tag), MaxTagLen)
	}
	if in.Keep < 0 {
		return time.Time{}, fmt.Errorf("keep %d: want 0 (no retention) or more", in.Keep)
	}
	if deadline.Sub(now) > MaxCheckpointTimeout {
		return time.Time{}, fmt.Errorf("deadline %s is more than %s away", deadline.Format(time.RFC3339), MaxCheckpointTimeout)
	}
	if _, err := in.leaseGrace(); err != nil {
		return time.Time{}, err
	}
	return deadline, nil
}

// leaseGrace is the input's lease grace, DefaultLeaseGrace when empty.
func (in CheckpointInput) leaseGrace() (time.Duration, error) {
	if in.LeaseGrace == "" {
		return DefaultLeaseGrace, nil
	}
	d, err := time.ParseDuration(in.LeaseGrace)
	if err != nil || d <= 0 || d > MaxLeaseGrace {
		return 0, fmt.Errorf("lease_grace %q: want a positive duration up to %s, such as 30s or 5m", in.LeaseGrace, MaxLeaseGrace)
	}
	return d, nil
}

// LeaseUntil is when the parks of a checkpoint with this deadline and
// lease grace end by themselves: deadline + settle + grace.
func LeaseUntil(deadline time.Time, grace time.Duration) time.Time {
	return deadline.Add(CheckpointSettle + grace)
}

// leaseUntil is the lease of this checkpoint's parks; zero (no lease) for
// a checkpoint that stays paused.
func (c *checkpointRun) leaseUntil() time.Time {
	if c.in.StayPaused {
		return time.Time{}
	}
	return LeaseUntil(c.deadline, c.grace())
}

// grace is the input's lease grace (validated).
func (c *checkpointRun) grace() time.Duration {
	grace, _ := c.in.leaseGrace()
	return grace
}

// participantLease is the lease of this checkpoint's prepared
// environment servers: until deadline + settle + grace, counted from now.
func (c *checkpointRun) participantLease(ctx workflow.Context) time.Duration {
	return LeaseUntil(c.deadline, c.grace()).Sub(workflow.Now(ctx))
}

// checkpointRun is the state of one Checkpoint execution.
type checkpointRun struct {
	in       CheckpointInput
	deadline time.Time
	dir      string
	phase    string
	logger   log.Logger
}

// Checkpoint takes a coordinated cut of one set: close admission at the
// environment servers, freeze the membership, park every member at a
// boundary, commit the servers' state, then the agent records, then the
// aggregate manifest (last), and resume — or stay paused. Any failure, or
// the deadline passing before the cut is frozen, aborts cleanly: everything
// is resumed and no manifest exists.
func Checkpoint(ctx workflow.Context, in CheckpointInput) (CheckpointResult, error) {
	start := workflow.Now(ctx)
	if in.Scheduled {
		id, err := ScheduledCheckpointID(workflow.GetInfo(ctx).WorkflowExecution.ID)
		if err != nil {
			return CheckpointResult{}, temporal.NewNonRetryableApplicationError("invalid checkpoint input: "+err.Error(), ErrInvalidCoordinatorInput, nil)
		}
		in.CheckpointID = id
	}
	deadline, err := in.validate(start)
	if err != nil {
		return CheckpointResult{}, temporal.NewNonRetryableApplicationError("invalid checkpoint input: "+err.Error(), ErrInvalidCoordinatorInput, nil)
	}
	c := &checkpointRun{
		in: in, deadline: deadline, dir: CheckpointDir(cleanRoot(in.Root), in.CheckpointID),
		logger: log.With(workflow.GetLogger(ctx), "checkpoint", in.CheckpointID, "set", in.Set),
	}
	res := CheckpointResult{CheckpointID: in.CheckpointID, Dir: c.dir}
	markCheckpoint(ctx, in.CheckpointID, c.logger)

	// The cut runs under the deadline: a timer cancels it at deadline+settle.
	cutCtx, cancelCut := workflow.WithCancel(ctx)
	timerCtx, cancelTimer := workflow.WithCancel(ctx)
	expired := false
	workflow.Go(ctx, func(gctx workflow.Context) {
		t := workflow.NewTimerWithOptions(timerCtx, deadline.Add(CheckpointSettle).Sub(workflow.Now(gctx)),
			workflow.TimerOptions{Summary: "checkpoint deadline"})
		if t.Get(gctx, nil) == nil {
			expired = true
			cancelCut()
		}
	})
	err = c.cut(cutCtx, &res)
	cancelTimer()
	res.CutMillis = workflow.Now(ctx).Sub(start).Milliseconds()
	if err != nil && expired {
		err = fmt.Errorf("deadline %s (+%s settle) passed during %s: %w", deadline.Format(time.RFC3339), CheckpointSettle, c.phase, err)
	}
	if err == nil {
		// The cut is frozen: the commit is no longer bound by the deadline.
		err = c.commit(ctx, &res)
	}
	if err != nil {
		return CheckpointResult{}, c.abort(ctx, err)
	}
	if in.StayPaused {
		c.setPhase(ctx, "paused", fmt.Sprintf("committed %d rollouts; staying paused", res.Parked))
	} else if err := c.resume(ctx); err != nil {
		// The checkpoint is committed and valid; only the resume failed.
		return CheckpointResult{}, fmt.Errorf("checkpoint %s is committed at %s, but resuming failed: %w", in.CheckpointID, c.dir, err)
	} else {
		res.Resumed = true
	}
	c.retain(ctx, &res)
	res.TotalMillis = workflow.Now(ctx).Sub(start).Milliseconds()
	c.setPhase(ctx, "done", fmt.Sprintf("%d members, %d parked, %d completed-unacknowledged, %d bytes", res.Members, res.Parked, res.CompletedUnacked, res.Bytes))
	return res, nil
}

func (c *checkpointRun) setPhase(ctx workflow.Context, phase, detail string) {
	c.phase = phase
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("**%s** — checkpoint %s of set %s: %s", phase, c.in.CheckpointID, c.in.Set, detail))
	c.logger.Info("checkpoint phase", "phase", phase, "detail", detail)
}

// cutTimeout is what is left of the cut's time budget.
func (c *checkpointRun) cutTimeout(ctx workflow.Context) time.Duration {
	left := c.deadline.Add(CheckpointSettle).Sub(workflow.Now(ctx))
	return max(left, time.Second)
}

// cut closes admission, freezes the membership and parks every member.
func (c *checkpointRun) cut(ctx workflow.Context, res *CheckpointResult) error {
	c.setPhase(ctx, "prepare", fmt.Sprintf("closing admission at %d environment servers", len(c.in.Participants)))
	var prep PrepareParticipantsResult
	err := runStep(ctx, step{"prepare participants", c.cutTimeout(ctx), PrepareParticipantsName}, PrepareParticipantsInput{
		CheckpointID: c.in.CheckpointID, Set: c.in.Set, Root: c.in.Root, Participants: c.in.Participants, Deadline: c.deadline,
		Lease: c.participantLease(ctx),
	}, &prep)
	if err != nil {
		return err
	}

	c.setPhase(ctx, "membership", fmt.Sprintf("%d live sessions at the environment servers; listing the set", prep.Sessions))
	var mem FreezeMembershipResult
	err = runStep(ctx, step{"freeze membership", c.cutTimeout(ctx), FreezeMembershipName}, FreezeMembershipInput{
		CheckpointID: c.in.CheckpointID, Set: c.in.Set, Root: c.in.Root,
	}, &mem)
	if err != nil {
		return err
	}
	res.Members = mem.Members

	c.setPhase(ctx, "park", fmt.Sprintf("parking %d members", mem.Members))
	var park ParkMembersResult
	err = runStep(ctx, step{fmt.Sprintf("park %d rollouts", mem.Members), c.cutTimeout(ctx), ParkMembersName}, ParkMembersInput{
		CheckpointID: c.in.CheckpointID, Set: c.in.Set, Root: c.in.Root, Deadline: c.deadline, LeaseUntil: c.leaseUntil(),
	}, &park)
	if err != nil {
		return err
	}
	res.Parked, res.CompletedUnacked, res.Closed = park.Parked, park.CompletedUnacked, park.Closed
	return nil
}

// commit writes the environment servers' artifacts, the agents artifact and
// the aggregate manifest, last.
func (c *checkpointRun) commit(ctx workflow.Context, res *CheckpointResult) error {
	c.setPhase(ctx, "commit", fmt.Sprintf("writing %d records and %d environment servers to %s", res.Parked, len(c.in.Participants), c.dir))
	var out CommitCheckpointResult
	s := step{"commit checkpoint", 30 * time.Minute, CommitCheckpointName}
	err := runStepWith(ctx, s, commitOptions(s), CommitCheckpointInput{
		CheckpointID: c.in.CheckpointID, Set: c.in.Set, Root: c.in.Root, Participants: c.in.Participants,
		Deadline: c.deadline, LeaseUntil: c.leaseUntil(), LeaseGrace: c.grace(),
	}, &out)
	if err != nil {
		return err
	}
	res.Bytes, res.ManifestDigest, res.Queued = out.Bytes, out.ManifestDigest, out.Queued
	return nil
}

// commitAttempts bounds the tries of a checkpoint's commit.
const commitAttempts = 5

// commitOptions are the commit step's options. The commit retried without
// limit for up to two hours, so a participant killed after it prepared its
// cut held the whole set parked that long. Now a participant nothing
// listens at fails the commit at once (ErrParticipantUnreachable, decided by
// the activity), and transient failures (5xx, timeouts) get commitAttempts
// tries; then the checkpoint aborts and releases everything. No manifest is
// written unless every participant's commit answered and its artifact
// validated here: even an artifact a dead server had finished exporting is
// not taken on trust, since a failed checkpoint costs one cut while a
// manifest naming an unconfirmed member could fail a restore.
func commitOptions(s step) workflow.ActivityOptions {
	opts := stepOptions(s.summary, s.timeout)
	retry := *coordinatorRetry
	retry.MaximumAttempts = commitAttempts
	retry.NonRetryableErrorTypes = append(slices.Clone(retry.NonRetryableErrorTypes), ErrParticipantUnreachable)
	opts.RetryPolicy = &retry
	return opts
}

// resume reopens the environment servers, then releases the rollouts.
func (c *checkpointRun) resume(ctx workflow.Context) error {
	c.setPhase(ctx, "resume", fmt.Sprintf("resuming %d environment servers, then the parked rollouts", len(c.in.Participants)))
	var rp ResumeParticipantsResult
	if err := runStep(ctx, step{"resume participants", 10 * time.Minute, ResumeParticipantsName}, ResumeParticipantsInput{
		CheckpointID: c.in.CheckpointID, Participants: c.in.Participants,
	}, &rp); err != nil {
		return err
	}
	var rr ResumeRolloutsResult
	return runStep(ctx, step{"resume rollouts", 30 * time.Minute, ResumeRolloutsName}, ResumeRolloutsInput{
		CheckpointID: c.in.CheckpointID, Root: c.in.Root, List: ListParked,
	}, &rr)
}

// abort resumes every participant and every member (resume is the abort),
// removes any aggregate manifest, and fails with cause. It runs on a
// disconnected context, so a cancelled checkpoint still cleans up.
func (c *checkpointRun) abort(ctx workflow.Context, cause error) error {
	failedPhase := c.phase
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	c.setPhase(dctx, "abort", fmt.Sprintf("%s failed: resuming everything", failedPhase))
	opts := stepOptions("abort checkpoint: resume everything", abortTryTimeout)
	opts.WaitForCancellation = false
	// Each try resumes everything it can reach; a participant that stays
	// unreachable must not hold the abort (and the pipeline) for long: after a
	// few tries the failure names it, and a dead server holds no admission.
	opts.ScheduleToCloseTimeout = 0
	opts.RetryPolicy = &temporal.RetryPolicy{
		InitialInterval:        time.Second,
		BackoffCoefficient:     2,
		MaximumInterval:        10 * time.Second,
		MaximumAttempts:        abortAttempts,
		NonRetryableErrorTypes: coordinatorRetry.NonRetryableErrorTypes,
	}
	var out AbortCheckpointResult
	aerr := workflow.ExecuteActivity(workflow.WithActivityOptions(dctx, opts), AbortCheckpointName, AbortCheckpointInput{
		CheckpointID: c.in.CheckpointID, Root: c.in.Root, Participants: c.in.Participants,
	}).Get(dctx, &out)
	msg := fmt.Sprintf("checkpoint %s of set %s aborted in phase %s: %v", c.in.CheckpointID, c.in.Set, failedPhase, cause)
	if aerr != nil {
		msg += fmt.Sprintf("; %s, participants or rollouts may still be parked (resume them with checkpoint id %s): %v", CleanupFailed, c.in.CheckpointID, aerr)
	} else {
		msg += fmt.Sprintf("; resumed %d environment servers and %d rollouts; no manifest was written", out.Participants, out.Rollouts)
	}
	if len(out.Unreachable) > 0 {
		msg += fmt.Sprintf("; unreachable environment servers (nothing listens there; they hold nothing, recover their rollouts with scoped recovery): %s",
			strings.Join(out.Unreachable, ", "))
	}
	c.logger.Error("checkpoint aborted", "phase", failedPhase, "error", cause, "cleanup_error", aerr)
	// The cause's text is in msg; it is not chained, because a cut cancelled
	// at its deadline would make the SDK report the whole checkpoint as
	// "canceled" instead of failing it with this message.
	return temporal.NewNonRetryableApplicationError(msg, ErrCheckpointAborted, nil)
}

// retain records the checkpoint's tag and applies the set's retention, when
// the input asks for either. A failure is reported in the result, not as
// the checkpoint's: the checkpoint is committed.
func (c *checkpointRun) retain(ctx workflow.Context, res *CheckpointResult) {
	res.Tag = c.in.Tag
	if c.in.Tag == "" && c.in.Keep == 0 {
		return
	}
	c.setPhase(ctx, "retain", fmt.Sprintf("tag %q, keeping the newest %d checkpoints of the set and the pinned ones", c.in.Tag, c.in.Keep))
	opts := stepOptions("retain checkpoints", 10*time.Minute)
	opts.RetryPolicy = &temporal.RetryPolicy{
		InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: 10 * time.Second,
		MaximumAttempts: 3, NonRetryableErrorTypes: coordinatorRetry.NonRetryableErrorTypes,
	}
	var out RetainCheckpointsResult
	err := runStepWith(ctx, step{"retain checkpoints", 10 * time.Minute, RetainCheckpointsName}, opts, RetainCheckpointsInput{
		CheckpointID: c.in.CheckpointID, Set: c.in.Set, Root: c.in.Root, Tag: c.in.Tag, Keep: c.in.Keep,
	}, &out)
	if err != nil {
		res.RetentionError = err.Error()
		c.logger.Warn("checkpoint retention failed", "error", err)
		return
	}
	res.Retention = &out
}
