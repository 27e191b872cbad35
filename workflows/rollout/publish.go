package rollout

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// What a run publishes, and when. Every search-attribute upsert is a history
// event and a write to the visibility store, and a rollout is short, so a
// run publishes what a reader can observe and nothing twice:
//
//   - its identity (RolloutId, RolloutSet, RolloutAttempt) only when its
//     start did not carry it (rollout.StartOptions does; a run started from
//     the Temporal CLI may not);
//   - a phase when the run waits in it: model, parked, awaiting_ack, and
//     the end (completed, failed). With local environment calls, seeding,
//     environment and verifying last only inside the workflow task that runs
//     them, and what a task upserts becomes visible only when it completes,
//     so they are published only when the run waits in them (the
//     environment answered "parked");
//   - its turn and progress time (RolloutTurn, RolloutProgressAt) with
//     those phase changes, and otherwise at most once every progress_every
//     of workflow time (Input.ProgressEvery, default DefaultProgressEvery):
//     a watchdog whose stall window is minutes does not need a write per
//     turn. A finished run stamps RolloutFinishedAt once instead.
//
// A short rollout therefore publishes twice: "model" after its seed, and
// its end.

// Bounds of Input.ProgressEvery.
const (
	DefaultProgressEvery = 30 * time.Second
	MinProgressEvery     = time.Second
	MaxProgressEvery     = time.Hour
)

var (
	progressAtKey = temporal.NewSearchAttributeKeyTime(SARolloutProgressAt)
	finishedAtKey = temporal.NewSearchAttributeKeyTime(SARolloutFinishedAt)
	receiptKey    = temporal.NewSearchAttributeKeyKeyword(SARolloutReceipt)
)

// published is what readers see of the run: its start's search attributes,
// then what it upserted.
type published struct {
	// identity: RolloutId, RolloutSet and RolloutAttempt name this run.
	identity   bool
	phase      Phase
	turn       int // -1: not published
	checkpoint string
	// receipt: RolloutReceipt was upserted with this digest.
	receipt  string
	finished bool
	// at is the workflow time of the last upsert (the run's start before
	// its first).
	at time.Time
}

// validateProgressEvery checks Input.ProgressEvery.
func (in *Input) validateProgressEvery() error {
	if p := in.ProgressEvery; p != 0 && (p < Duration(MinProgressEvery) || p > Duration(MaxProgressEvery)) {
		return fmt.Errorf("progress_every %s is outside %s..%s (or unset for %s)", time.Duration(p), MinProgressEvery, MaxProgressEvery, DefaultProgressEvery)
	}
	return nil
}

func (in *Input) progressEvery() time.Duration {
	if in.ProgressEvery == 0 {
		return DefaultProgressEvery
	}
	return time.Duration(in.ProgressEvery)
}

// setupPublished reads what the run's start published: a run started with
// StartOptions, or continued as new (it inherits the attributes of the run
// before), needs to send none of it again.
func (r *rollout) setupPublished(ctx workflow.Context) {
	sa := workflow.GetTypedSearchAttributes(ctx)
	id, hasID := sa.GetKeyword(rolloutIDKey)
	set, hasSet := sa.GetKeyword(rolloutSetKey)
	attempt, hasAttempt := sa.GetInt64(rolloutAttemptKey)
	r.pub.identity = hasID && id == r.in.RolloutID && hasSet && set == r.in.Set && hasAttempt && attempt == int64(r.in.Attempt)
	phase, _ := sa.GetKeyword(rolloutPhaseKey)
	r.pub.phase = Phase(phase)
	r.pub.turn = -1
	if turn, ok := sa.GetInt64(rolloutTurnKey); ok {
		r.pub.turn = int(turn)
	}
	r.pub.checkpoint, _ = sa.GetKeyword(checkpointIDKey)
	_, r.pub.finished = sa.GetTime(finishedAtKey)
	r.pub.at = workflow.GetInfo(ctx).WorkflowStartTime
}

// observable says whether a reader can see the run wait in phase p: the
// phases of local environment calls end inside the task that starts them.
func (r *rollout) observable(p Phase) bool {
	switch p {
	case PhaseSeeding, PhaseEnvironment, PhaseVerifying:
		return !r.localEnv()
	}
	return true
}

// advancePhase moves the rollout to phase p at a boundary: published when
// the run will wait in it and readers see another, else only its turn and
// progress time, when they have not been published for progress_every.
func (r *rollout) advancePhase(ctx workflow.Context, p Phase) {
	r.phase = p
	switch {
	case r.observable(p) && p != r.pub.phase:
		r.publish(ctx, true)
	case r.b.Turn != r.pub.turn && !workflow.Now(ctx).Before(r.pub.at.Add(r.in.progressEvery())):
		r.publish(ctx, false)
	default:
		r.details(ctx)
	}
}

// setPhase moves the rollout to phase p, which it waits in or ends with,
// and publishes it.
func (r *rollout) setPhase(ctx workflow.Context, p Phase) {
	r.phase = p
	r.publish(ctx, true)
}

// publishDeferred publishes the phase the rollout waits in now although it
// is one readers would not see otherwise (the environment answered
// "parked", and a timer runs).
func (r *rollout) publishDeferred(ctx workflow.Context) { r.publish(ctx, true) }

// publishPosition publishes the turn (and the phase, when readers could see
// it) before the run continues as new: the next run starts with these
// attributes.
func (r *rollout) publishPosition(ctx workflow.Context) { r.publish(ctx, r.observable(r.phase)) }

// publish upserts what readers do not see yet of the run's identity, turn,
// phase (withPhase) and held checkpoint, with the progress attributes; it
// upserts nothing when they see it all.
func (r *rollout) publish(ctx workflow.Context, withPhase bool) {
	var ups []temporal.SearchAttributeUpdate
	if !r.pub.identity {
		ups = append(ups, rolloutIDKey.ValueSet(r.in.RolloutID), rolloutSetKey.ValueSet(r.in.Set),
			rolloutAttemptKey.ValueSet(int64(r.in.Attempt)))
	}
	if r.b.Turn != r.pub.turn {
		ups = append(ups, rolloutTurnKey.ValueSet(int64(r.b.Turn)))
	}
	phase := r.pub.phase
	if withPhase && r.phase != phase {
		phase = r.phase
		ups = append(ups, rolloutPhaseKey.ValueSet(string(phase)))
	}
	// CheckpointId names the checkpoint a parked rollout is held for, and
	// goes when it moves on.
	checkpointID := ""
	if phase == PhaseParked && r.park != nil {
		checkpointID = r.park.CheckpointID
	}
	switch {
	case checkpointID == r.pub.checkpoint:
	case checkpointID == "":
		ups = append(ups, checkpointIDKey.ValueUnset())
	default:
		ups = append(ups, checkpointIDKey.ValueSet(checkpointID))
	}
	receipt := r.pub.receipt
	if phase == PhaseAwaitingAck && r.stored != "" && r.stored != receipt {
		receipt = r.stored
		ups = append(ups, receiptKey.ValueSet(receipt))
	}
	if len(ups) == 0 {
		r.details(ctx)
		return
	}
	progress := r.progressUpdates(ctx, phase)
	if err := workflow.UpsertTypedSearchAttributes(ctx, append(ups, progress...)...); err != nil {
		r.logger.Warn("search attribute upsert failed", "error", err)
		return
	}
	r.pub = published{identity: true, phase: phase, turn: r.b.Turn, checkpoint: checkpointID, receipt: receipt,
		finished: r.pub.finished || finishedPhase(phase) && len(progress) > 0, at: workflow.Now(ctx)}
	r.details(ctx)
}

// finishedPhase says whether p ends the rollout's work: it holds, completed
// or failed.
func finishedPhase(p Phase) bool {
	return p == PhaseAwaitingAck || p == PhaseCompleted || p == PhaseFailed
}

// progressUpdates are the progress attributes an upsert that leaves readers
// at phase p adds, for runs whose input asks for them: the time of this
// change while the rollout works, and the time it finished the first time
// it holds, completes or fails (a later phase, such as completed after an
// acknowledgement, keeps the first; a finished rollout needs no progress
// time, as it no longer works).
func (r *rollout) progressUpdates(ctx workflow.Context, p Phase) []temporal.SearchAttributeUpdate {
	if !r.in.ProgressAttributes {
		return nil
	}
	now := workflow.Now(ctx).UTC()
	switch {
	case !finishedPhase(p):
		return []temporal.SearchAttributeUpdate{progressAtKey.ValueSet(now)}
	case !r.pub.finished:
		return []temporal.SearchAttributeUpdate{finishedAtKey.ValueSet(now)}
	}
	return nil
}

// details shows where the rollout is in the Web UI (not in history).
func (r *rollout) details(ctx workflow.Context) {
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("**%s** — turn %d, attempt %d, revision %d", r.phase, r.b.Turn, r.in.Attempt, r.b.Revision))
}
