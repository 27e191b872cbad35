package model

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// answerTooLarge is what reading an answer over the size limit fails with.
type answerTooLarge struct {
	limit int64
	// size is the announced size (Content-Length), or 0 when the body
	// only turned out larger while it was read.
	size int64
}

func (e *answerTooLarge) Error() string {
	if e.size > 0 {
		return fmt.Sprintf("answer of %d bytes, more than the %d this worker reads (%s)", e.size, e.limit, EnvMaxAnswerBytes)
	}
	return fmt.Sprintf("answer of more than the %d bytes this worker reads (%s)", e.limit, EnvMaxAnswerBytes)
}

// limitAnswer is the model client's middleware that bounds an answer's
// body: one announcing more than limit bytes is refused before any of it
// is read, and one that turns out larger fails its read at the limit.
func limitAnswer(limit int64) func(*http.Request, func(*http.Request) (*http.Response, error)) (*http.Response, error) {
	return func(req *http.Request, next func(*http.Request) (*http.Response, error)) (*http.Response, error) {
		resp, err := next(req)
		if err != nil || resp == nil {
			return resp, err
		}
		if resp.ContentLength > limit {
			_ = resp.Body.Close()
			return nil, &answerTooLarge{limit: limit, size: resp.ContentLength}
		}
		resp.Body = &limitedBody{rc: resp.Body, left: limit, limit: limit}
		return resp, nil
	}
}

// limitedBody reads at most limit bytes of rc and fails past them.
type limitedBody struct {
	rc          io.ReadCloser
	left, limit int64
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		// One byte more tells a body of exactly the limit from a larger one.
		var one [1]byte
		if n, _ := b.rc.Read(one[:]); n > 0 {
			return 0, &answerTooLarge{limit: b.limit}
		}
		return b.rc.Read(p)
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	return n, err
}

func (b *limitedBody) Close() error { return b.rc.Close() }

// overLimit is the non-retryable error of an answer over a limit.
func overLimit(callID, model, baseURL, what string) error {
	return temporal.NewNonRetryableApplicationError(
		fmt.Sprintf("%s: model %s at %s: %s; nothing of it was stored", callID, model, baseURL, what), rollout.ErrModelAnswerOverLimit, nil)
}

// asAnswerTooLarge reports whether err is a read over the size limit.
func asAnswerTooLarge(err error) (*answerTooLarge, bool) {
	var tl *answerTooLarge
	return tl, errors.As(err, &tl)
}

// checkToolCalls refuses an answer with more tool calls than the limit:
// each would become an environment activity of the turn.
func (a *Activities) checkToolCalls(n int, callID, model, baseURL string) error {
	if limit := a.maxToolCalls(); n > limit {
		return overLimit(callID, model, baseURL, fmt.Sprintf("%d tool calls in one answer, more than the %d a turn may have (%s)", n, limit, EnvMaxToolCalls))
	}
	return nil
}

// retryLimit is the longest retry delay a model server may ask for: the
// worker's MaxRetryAfter, and no more than the call's own start-to-close
// timeout.
func (a *Activities) retryLimit(ctx context.Context) time.Duration {
	limit := a.maxRetryAfter()
	if activity.IsActivity(ctx) {
		if t := activity.GetInfo(ctx).StartToCloseTimeout; t > 0 {
			limit = min(limit, t)
		}
	}
	return limit
}

// retryAfter reads the delay a server asks for: OpenAI's retry-after-ms, or
// Retry-After as seconds or an HTTP date, clamped to limit. Zero means
// none given (or a negative, zero or unreadable one); no value, however
// large, overflows.
func retryAfter(h http.Header, now time.Time, limit time.Duration) time.Duration {
	if v := strings.TrimSpace(h.Get("Retry-After-Ms")); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil {
			return clampDelay(ms, float64(time.Millisecond), limit)
		}
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseFloat(v, 64); err == nil {
		return clampDelay(secs, float64(time.Second), limit)
	}
	if t, err := http.ParseTime(v); err == nil {
		// Sub saturates instead of overflowing.
		if d := t.Sub(now); d > 0 {
			return min(d, limit)
		}
	}
	return 0
}

// clampDelay is n units as a duration in (0, limit], or 0 for a value
// that is not positive (or not a number); it compares before it converts,
// so a huge value cannot overflow.
func clampDelay(n, unit float64, limit time.Duration) time.Duration {
	if math.IsNaN(n) || n <= 0 {
		return 0
	}
	if n*unit >= float64(limit) {
		return limit
	}
	return max(time.Duration(n*unit), 1)
}
