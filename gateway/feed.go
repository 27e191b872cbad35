package gateway

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/turnstile-rl/turnstile/internal/sleep"
	"github.com/turnstile-rl/turnstile/trainer"
)

// Bounds of a feed request.
const (
	defaultFeedMax = 100
	maxWaitMS      = 60_000
)

// FeedHealthEvery is how long a set's health (a few visibility counts
// over the set and a small sample) serves feed pages before it is
// computed again: for a waiting feed, and for a trainer reading page after
// page.
const FeedHealthEvery = 2 * time.Second

// feed is GET /v1/sets/{set}/feed: a long poll for the next finished
// rollouts after the cursor. It answers as soon as any is ready, when the
// wait is over, when the set is done, or (with nothing to deliver) with a
// 409 set_stalled when the watchdog sees no progress.
func (s *Server) feed(w http.ResponseWriter, r *http.Request) error {
	q, err := s.feedQuery(r)
	if err != nil {
		return err
	}
	// The answer may come as late as the end of the wait.
	s.extendWrite(w, q.deadline.Sub(s.cfg.Now()))
	for {
		h, err := s.feedHealth(r, q.set)
		if err != nil {
			return err
		}
		resp, final, err := s.feedOnce(r, q, h)
		if err != nil || final {
			if err == nil {
				err = writeJSON(w, http.StatusOK, resp)
			}
			return err
		}
		if resp.Cursor != encodeCursor(q.after) {
			q.after, _ = decodeCursor(resp.Cursor)
			continue // passed over acknowledged or replaced runs: look on at once
		}
		if !s.sleep(r, q.deadline) {
			return writeJSON(w, http.StatusOK, resp)
		}
	}
}

// feedQuery is a checked feed request.
type feedQuery struct {
	set            string
	after          trainer.FeedPosition
	max            int
	completeGroups bool
	deadline       time.Time
}

func (s *Server) feedQuery(r *http.Request) (feedQuery, error) {
	set, err := pathSet(r)
	if err != nil {
		return feedQuery{}, err
	}
	after, err := decodeCursor(r.URL.Query().Get("cursor"))
	if err != nil {
		return feedQuery{}, err
	}
	max, err := queryInt(r, "max", defaultFeedMax, 1, trainer.MaxFeedPage)
	if err != nil {
		return feedQuery{}, err
	}
	wait, err := queryInt(r, "wait_ms", 0, 0, maxWaitMS)
	if err != nil {
		return feedQuery{}, err
	}
	completeGroups, err := queryBool(r, "complete_groups")
	if err != nil {
		return feedQuery{}, err
	}
	if s.cfg.Transcripts == nil {
		return feedQuery{}, unavailable("this gateway was started without --transcripts (the workers' transcript directory)")
	}
	return feedQuery{set: set, after: after, max: max, completeGroups: completeGroups, deadline: s.cfg.Now().Add(time.Duration(wait) * time.Millisecond)}, nil
}

// feedOnce reads one page. final says the answer is ready (items, done, or
// the wait is over with an error to give); otherwise resp is what to answer
// if the wait ends now.
func (s *Server) feedOnce(r *http.Request, q feedQuery, h Health) (FeedResponse, bool, error) {
	resp := FeedResponse{Items: []json.RawMessage{}, Cursor: encodeCursor(q.after), Health: h}
	waitOver := !s.cfg.Now().Before(q.deadline)
	if h.Rollouts == 0 {
		if !waitOver {
			return resp, false, nil
		}
		// A set whose admission exists is known: its rollouts start (and
		// show in visibility) a moment after the submission returns.
		return resp, true, s.knownSet(r, q.set)
	}
	page, err := s.backend.Feed(r.Context(), s.cfg.Transcripts, trainer.FeedRequest{
		Set: q.set, After: q.after, Max: q.max, Settle: s.cfg.FeedSettle, Now: s.cfg.Now(), CompleteGroups: q.completeGroups,
	})
	if err != nil {
		return resp, true, err
	}
	resp.Items, resp.Cursor = page.Items, encodeCursor(page.Next)
	resp.Done = h.Settled() && page.More == 0
	switch {
	case len(resp.Items) > 0 || resp.Done:
		return resp, true, nil
	case h.State == trainer.HealthStalled:
		return resp, true, &apiError{status: http.StatusConflict, code: CodeSetStalled, msg: h.Reason, health: &h}
	}
	return resp, waitOver, nil
}

// sleep waits one poll interval, or less until deadline; false when the
// deadline has passed or the caller went away.
func (s *Server) sleep(r *http.Request, deadline time.Time) bool {
	left := deadline.Sub(s.cfg.Now())
	if left <= 0 {
		return false
	}
	return sleep.For(r.Context(), min(left, s.cfg.PollInterval)) == nil
}

// health computes a set's health over the stall window.
func (s *Server) health(r *http.Request, set string) (Health, error) {
	return s.backend.Health(r.Context(), trainer.HealthRequest{Set: set, Window: s.cfg.StallWindow, Now: s.cfg.Now()})
}

// cursorPrefix versions the cursor format.
const cursorPrefix = "c1."

// encodeCursor is the opaque form of a feed position ("" for the start).
func encodeCursor(p trainer.FeedPosition) string {
	if p.IsZero() {
		return ""
	}
	b, _ := json.Marshal(p)
	return cursorPrefix + base64.RawURLEncoding.EncodeToString(b)
}

// decodeCursor reads a cursor this gateway (or any other) handed out.
func decodeCursor(c string) (trainer.FeedPosition, error) {
	var p trainer.FeedPosition
	if c == "" {
		return p, nil
	}
	bad := badRequest("cursor", "cursor is not one a gateway handed out; omit it to start at the oldest unacknowledged result")
	raw, ok := strings.CutPrefix(c, cursorPrefix)
	if !ok {
		return p, bad
	}
	b, err := base64.RawURLEncoding.DecodeString(raw)
	if err != nil || json.Unmarshal(b, &p) != nil || p.IsZero() {
		return p, bad
	}
	return p, nil
}
