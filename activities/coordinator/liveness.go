package coordinator

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
)

// Liveness bounds what a hung participant costs a control call: while the
// call runs, the participant's health route (GET /healthz, which does no
// work) is probed every Every, each probe given Timeout; Misses probes in a
// row that get no answer declare it hung, and the call is given up. A slow
// participant still answers its health route, so a long commit or restore
// of a large cut is never cut short; a hung process, a link that drops
// every packet (a partition) or a proxy that passes nothing answers none.
type Liveness struct {
	Every   time.Duration
	Timeout time.Duration
	Misses  int
}

// DefaultLiveness declares a participant hung after about 30 to 45 s
// without an answer to three probes in a row.
var DefaultLiveness = Liveness{Every: 10 * time.Second, Timeout: 5 * time.Second, Misses: 3}

// DefaultAbortResumeWindow is how long an abort keeps asking a participant
// that does not answer (hung or cut off, not dead) to resume.
const DefaultAbortResumeWindow = 10 * time.Minute

// Bound is the longest a hung participant holds a control call: the time
// to miss Misses probes in a row.
func (l Liveness) Bound() time.Duration {
	return time.Duration(l.Misses)*l.Every + l.Timeout
}

func (l Liveness) orDefault() Liveness {
	if l.Every <= 0 || l.Timeout <= 0 || l.Misses <= 0 {
		return DefaultLiveness
	}
	return l
}

// errHung is the cause of a call given up on a hung participant.
var errHung = errors.New("participant hung")

// hungError is a control call given up on a participant that stopped
// answering. It is retryable as it is (a resume is worth asking again
// within its step's budget); hungFatal makes it final.
type hungError struct {
	url, what string
	l         Liveness
}

func (e *hungError) Error() string {
	return fmt.Sprintf("participant %s: %s: no answer to %d health probes in a row, %s apart (hung or cut off; given up after about %s)",
		e.url, e.what, e.l.Misses, e.l.Every, e.l.Bound())
}

// watched runs fn, a control call to the participant at url, and gives it
// up (cancelling its context) with a *hungError when the participant stops
// answering its health route.
func (c *Coordinator) watched(ctx context.Context, url, what string, fn func(ctx context.Context) error) error {
	l := c.Liveness.orDefault()
	cctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	done := make(chan error, 1)
	go func() { done <- fn(cctx) }()
	tick := time.NewTicker(l.Every)
	defer tick.Stop()
	misses := 0
	for {
		select {
		case err := <-done:
			if errors.Is(context.Cause(cctx), errHung) {
				return &hungError{url: url, what: what, l: l}
			}
			return err
		case <-ctx.Done():
			cancel(ctx.Err())
			return <-done
		case <-tick.C:
			if c.answers(cctx, url, l.Timeout) {
				misses = 0
				continue
			}
			if misses++; misses >= l.Misses {
				cancel(errHung)
				<-done
				return &hungError{url: url, what: what, l: l}
			}
		}
	}
}

// answers reports whether the participant's health route answers (any
// status) within timeout, on a connection of its own.
func (c *Coordinator) answers(ctx context.Context, url string, timeout time.Duration) bool {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(url, "/")+"/healthz", nil)
	if err != nil {
		return false
	}
	req.Close = true // a fresh connection: a pooled one may be the stuck one
	hc := c.HTTPClient
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return true
}

// hungFatal turns a call given up on a hung participant into the
// non-retryable checkpoint.ErrParticipantHung, for the steps where waiting
// on the same silence again only holds the set parked longer (prepare,
// commit: the checkpoint aborts and releases everything instead); any
// other error is returned as it is.
func hungFatal(err error) error {
	var he *hungError
	if errors.As(err, &he) {
		return temporal.NewNonRetryableApplicationError(he.Error(), checkpoint.ErrParticipantHung, nil)
	}
	return err
}

// noAnswer reports whether err is a control call that got no answer at
// all (it timed out, or was given up as hung), as opposed to an error the
// participant answered with.
func noAnswer(err error) bool {
	var ne net.Error
	return isHung(err) || errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

// isHung reports whether err is a call given up on a hung participant.
func isHung(err error) bool {
	var he *hungError
	return errors.As(err, &he)
}
