package coordinator

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
	"github.com/turnstile-rl/turnstile/workflows/rollout"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/turnstile-rl/turnstile/internal/artifact"
	"github.com/turnstile-rl/turnstile/internal/destination"
	"github.com/turnstile-rl/turnstile/internal/failpoint"
	"github.com/turnstile-rl/turnstile/internal/location"
	"github.com/turnstile-rl/turnstile/internal/storage"
	"github.com/turnstile-rl/turnstile/internal/transcriptstore"
	"github.com/turnstile-rl/turnstile/participants/protocol"
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
	Store *transcriptstore.Store
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
	// SignalConcurrency bounds concurrent park and resume signals and park
	// record queries of one activity (0: DefaultSignalConcurrency).
	SignalConcurrency int
	// Storage opens checkpoint roots that are object-store URLs and keeps
	// their connections; with none, only local directories can be roots.
	Storage *storage.Opener
	// Destinations decides which participants the control token may go to
	// (and which token each gets: a named server's own, else the global
	// one: its own, else ControlToken)
	// and which object-store endpoints a checkpoint root may name. Nil
	// admits no participant and no object store.
	Destinations *destination.Config
	// FenceSettle is how long FenceSet waits after writing a set's fence
	// (0: set.FenceSettle; tests shorten it).
	FenceSettle time.Duration
	// Liveness bounds a control call to a participant that stops
	// answering (zero: DefaultLiveness).
	Liveness Liveness
	// AbortResumeWindow is how long an abort keeps asking participants
	// that do not answer to resume (0: DefaultAbortResumeWindow).
	AbortResumeWindow time.Duration
	// Checkpoints bounds what a restore reads of a checkpoint before it
	// trusts it, and carries the key manifests are signed and checked with
	// (the zero value: default bounds, no key).
	Checkpoints artifact.Settings
}

// destinations is Destinations, or a configuration admitting nothing.
func (c *Coordinator) destinations() *destination.Config {
	if c.Destinations != nil {
		return c.Destinations
	}
	return &destination.Config{ControlToken: c.ControlToken}
}

func (c *Coordinator) limit() int {
	if c.Concurrency > 0 {
		return c.Concurrency
	}
	return DefaultCoordinatorConcurrency
}

// control is the control-plane client of the participant at url, with its
// control token; a participant the operator did not configure is refused
// before anything is sent.
func (c *Coordinator) control(url string) (*protocol.ControlClient, error) {
	t, err := c.destinations().Participant(url)
	if err != nil {
		return nil, rollout.DestinationRefused(err)
	}
	if t.Secret == "" {
		t.Secret = c.ControlToken
	}
	return protocol.NewControlClient(t.URL, t.Secret, c.HTTPClient), nil
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
	loc, err := location.Join(root, checkpointID)
	if err != nil {
		return nil, rollout.BadInput("%v", err)
	}
	if err := c.destinations().Store(root); err != nil {
		return nil, rollout.DestinationRefused(fmt.Errorf("checkpoint root: %w", err))
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

// checkParticipantURLs is protocol.ValidateParticipants as a non-retryable
// bad-input error.
func checkParticipantURLs(urls []string) error {
	if _, err := protocol.ValidateParticipants(urls); err != nil {
		return rollout.BadInput("%v", err)
	}
	return nil
}

// checkParticipants checks a participant list's form and that every
// participant is a configured destination of the control token, before
// anything is sent to any of them.
func (c *Coordinator) checkParticipants(urls []string) error {
	if err := checkParticipantURLs(urls); err != nil {
		return err
	}
	if err := c.destinations().CheckParticipants(urls); err != nil {
		return rollout.DestinationRefused(err)
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
// (plain unit tests) it does nothing. Besides a beat per finished item, it
// beats on a clock: at 10,000 rollouts every one of the fan-out's calls may
// wait longer than the heartbeat timeout (an update waits for its rollout's
// workflow task, queued behind the set's work), and a silent activity would
// be timed out and retried although its worker is alive and working.
type progress struct {
	ctx   context.Context
	step  string
	total int
	done  atomic.Int64
	quit  chan struct{}
}

func newProgress(ctx context.Context, step string, total int) *progress {
	p := &progress{ctx: ctx, step: step, total: total, quit: make(chan struct{})}
	p.beat()
	if every := keepaliveEvery(ctx); every > 0 {
		go p.keepalive(every)
	}
	return p
}

// keepaliveEvery is a third of the activity's heartbeat timeout (0 outside
// an activity or without one), so two beats may be lost before it expires.
func keepaliveEvery(ctx context.Context) time.Duration {
	if !activity.IsActivity(ctx) {
		return 0
	}
	return activity.GetInfo(ctx).HeartbeatTimeout / 3
}

func (p *progress) keepalive(every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-p.quit:
			return
		case <-p.ctx.Done():
			return
		case <-t.C:
			p.beat()
		}
	}
}

// stop ends the clock's beats; call it when the fan-out is over.
func (p *progress) stop() { close(p.quit) }

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
