package coordinator

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/turnstile-rl/turnstile/internal/fanout"
	"github.com/turnstile-rl/turnstile/workflows/checkpoint"

	"go.temporal.io/sdk/temporal"
)

// How a participant is found dead. Why these and nothing else: a refused
// connection or an unreachable host means no process is listening at the
// address, so it holds no admission, no prepared cut and no session (scoped
// recovery moves its rollouts); asking it again later cannot release
// anything. A 5xx, a reset or a timeout means something is there (busy,
// restarting, or slow to answer), which may still hold admission closed, so
// those stay transient errors, retried within the step's time budget. A
// server restarting on the same address refuses connections for a moment,
// hence a few tries, spread over about a second, before it counts as dead.
const (
	deadTries   = 3
	deadBackoff = 250 * time.Millisecond
	// abortCallTimeout bounds one control call of an abort, so a hung
	// participant cannot hold the release of the rollouts.
	abortCallTimeout = 30 * time.Second
)

// unreachable reports whether err says nothing listens at the address.
func unreachable(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH) ||
		errors.Is(err, syscall.ENETUNREACH)
}

// callReachable calls fn, again while the participant refuses connections,
// up to deadTries times. dead is true when every try found nothing
// listening; err is fn's last error.
func callReachable(ctx context.Context, fn func(ctx context.Context) error) (dead bool, err error) {
	for try := 0; try < deadTries; try++ {
		if try > 0 {
			select {
			case <-ctx.Done():
				return false, ctx.Err()
			case <-time.After(deadBackoff << (try - 1)):
			}
		}
		if err = fn(ctx); err == nil || !unreachable(err) {
			return false, err
		}
	}
	return true, err
}

// participantUnreachable is the non-retryable error of a participant found
// dead where its answer is required (its commit).
func participantUnreachable(url, what string, err error) error {
	return temporal.NewNonRetryableApplicationError(fmt.Sprintf(
		"participant %s: %s: nothing listens there after %d tries (its process is gone): %v", url, what, deadTries, err),
		checkpoint.ErrParticipantUnreachable, nil)
}

// resumeEach resumes every participant once, independently, and returns
// the ones found dead and each one's error (nil: resumed, or dead).
func (c *Coordinator) resumeEach(ctx context.Context, checkpointID string, participants []string) ([]string, []error) {
	dead := make([]bool, len(participants))
	errs := make([]error, len(participants))
	prog := newProgress(ctx, "resume participants", len(participants))
	defer prog.stop()
	_ = fanout.Each(ctx, len(participants), c.limit(), func(ctx context.Context, i int) error {
		defer prog.add()
		url := participants[i]
		cc, err := c.control(url)
		if err != nil {
			errs[i] = err // refused: nothing sent, and no retry changes that
			return nil
		}
		d, err := callReachable(ctx, func(ctx context.Context) error {
			cctx, cancel := context.WithTimeout(ctx, abortCallTimeout)
			defer cancel()
			_, err := cc.Resume(cctx, checkpointID)
			return err
		})
		dead[i] = d
		if err != nil && !d {
			errs[i] = controlError(url, "resume", err)
		}
		return nil // the others go on
	})
	var gone []string
	for i, d := range dead {
		if d {
			gone = append(gone, participants[i])
		}
	}
	return gone, errs
}

// resumeLeft keeps asking the participants that answered no resume (not
// dead: hung, cut off, or failing) to resume, with growing pauses, until
// each has or window has passed since start. It returns the ones that never
// did, with their last errors joined. A partition or a hang shorter than
// the window heals without an operator; a longer one costs the window and
// is reported.
func (c *Coordinator) resumeLeft(ctx context.Context, checkpointID string, left []string, start time.Time) ([]string, error) {
	window := c.AbortResumeWindow
	if window <= 0 {
		window = DefaultAbortResumeWindow
	}
	var errs []error
	prog := newProgress(ctx, "resume participants that did not answer", len(left))
	defer prog.stop()
	for pause := time.Second; len(left) > 0; pause = min(2*pause, 30*time.Second) {
		if time.Since(start)+pause > window {
			break
		}
		select {
		case <-ctx.Done():
			return left, errors.Join(append(errs, ctx.Err())...)
		case <-time.After(pause):
		}
		_, errs = c.resumeEach(ctx, checkpointID, left)
		var still []string
		var stillErrs []error
		for i, err := range errs {
			if err != nil {
				still, stillErrs = append(still, left[i]), append(stillErrs, err)
			} else {
				prog.add()
			}
		}
		left, errs = still, stillErrs
	}
	return left, errors.Join(errs...)
}
