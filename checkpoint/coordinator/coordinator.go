package coordinator

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"

	"github.com/turnstile-rl/turnstile/checkpoint"
	"github.com/turnstile-rl/turnstile/rollout"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/turnstile-rl/turnstile/failpoint"
	"github.com/turnstile-rl/turnstile/protocol"
	"github.com/turnstile-rl/turnstile/storage"
	"github.com/turnstile-rl/turnstile/transcript"
)

// DefaultCoordinatorConcurrency bounds concurrent calls per activity when
// Coordinator.Concurrency is zero.
const DefaultCoordinatorConcurrency = 32

// Coordinator hosts the coordinator activities. Register a pointer to it on
// a worker (w.RegisterActivity(coord)); its methods are the activities,
// named by the *Name constants above.
type Coordinator struct {
	// Client calls Temporal: visibility, updates, starts, terminations.
	Client client.Client
	// Store is the transcript store whose blobs a checkpoint copies and a
	// restore puts back.
	Store *transcript.Store
	// ControlToken is the bearer token of the environment servers' control
	// plane.
	ControlToken string
	// HTTPClient calls the control plane; nil means the default client.
	HTTPClient *http.Client
	// TaskQueue restored rollouts run on when the restore names none.
	TaskQueue string
	// Failpoints lets crash tests kill the worker at named places.
	Failpoints *failpoint.Set
	// Concurrency bounds concurrent calls of one activity (0: default).
	Concurrency int
	// Storage opens checkpoint roots that are object-store URLs and keeps
	// their connections; with none, only local directories can be roots.
	Storage *storage.Opener
}

func (c *Coordinator) limit() int {
	if c.Concurrency > 0 {
		return c.Concurrency
	}
	return DefaultCoordinatorConcurrency
}

func (c *Coordinator) control(url string) *protocol.ControlClient {
	return protocol.NewControlClient(url, c.ControlToken, c.HTTPClient)
}

func (c *Coordinator) temporal() (client.Client, error) {
	if c.Client == nil {
		return nil, temporal.NewNonRetryableApplicationError("coordinator: no Temporal client configured", rollout.ErrBadInput, nil)
	}
	return c.Client, nil
}

// checkDir validates a checkpoint id and root and opens the checkpoint's
// store: a directory, or a prefix of an object store.
func (c *Coordinator) checkDir(ctx context.Context, root, checkpointID string) (storage.Store, error) {
	if err := checkpoint.ValidateName("checkpoint_id", checkpointID); err != nil {
		return nil, rollout.BadInput("%v", err)
	}
	if err := checkpoint.ValidateRoot(root); err != nil {
		return nil, rollout.BadInput("%v", err)
	}
	loc, err := storage.Join(root, checkpointID)
	if err != nil {
		return nil, rollout.BadInput("%v", err)
	}
	// A nil Storage opens local directories only.
	st, err := c.Storage.Open(ctx, loc)
	if err != nil {
		// An unknown scheme, a bad query parameter, no opener: no retry
		// helps.
		return nil, rollout.BadInput("checkpoint root %s: %v", root, err)
	}
	return st, nil
}

// checkParticipants is protocol.ValidateParticipants as a non-retryable
// bad-input error.
func checkParticipants(urls []string) error {
	if _, err := protocol.ValidateParticipants(urls); err != nil {
		return rollout.BadInput("%v", err)
	}
	return nil
}

// invalidCheckpoint is the non-retryable error of a checkpoint that does not
// validate.
func invalidCheckpoint(format string, args ...any) error {
	return temporal.NewNonRetryableApplicationError(fmt.Sprintf(format, args...), checkpoint.ErrCheckpointInvalid, nil)
}

// invalidOrUnavailable is invalidCheckpoint, unless err says the store did
// not answer: then it is a retryable error, since nothing is known about
// the checkpoint yet.
func invalidOrUnavailable(err error, format string, args ...any) error {
	if errors.Is(err, storage.ErrUnavailable) {
		return fmt.Errorf(format, args...)
	}
	return invalidCheckpoint(format, args...)
}

// progress heartbeats done/total while a fan-out runs; outside an activity
// (plain unit tests) it does nothing.
type progress struct {
	ctx   context.Context
	step  string
	total int
	done  atomic.Int64
}

func newProgress(ctx context.Context, step string, total int) *progress {
	p := &progress{ctx: ctx, step: step, total: total}
	p.beat()
	return p
}

func (p *progress) add() {
	p.done.Add(1)
	p.beat()
}

// beat records a heartbeat; the SDK throttles what it sends, so a beat per
// item is cheap.
func (p *progress) beat() {
	if activity.IsActivity(p.ctx) {
		activity.RecordHeartbeat(p.ctx, fmt.Sprintf("%s %d/%d", p.step, p.done.Load(), p.total))
	}
}

// remoteCode is the control-plane error code of err, or "".
func remoteCode(err error) string {
	var re *protocol.RemoteError
	if errors.As(err, &re) {
		return re.Code
	}
	return ""
}

// controlError classifies a control-plane failure: a 4xx answer other than
// a timeout will not change by retrying; transport errors and 5xx may.
func controlError(url, what string, err error) error {
	var re *protocol.RemoteError
	if errors.As(err, &re) && re.Status >= 400 && re.Status < 500 && re.Status != http.StatusRequestTimeout && re.Status != http.StatusTooManyRequests {
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf("participant %s: %s: %v", url, what, err), checkpoint.ErrParticipantRefused, nil)
	}
	return fmt.Errorf("participant %s: %s: %w", url, what, err)
}
