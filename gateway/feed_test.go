package gateway

import (
	"encoding/json"
	"net/http"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/internal/testsupport"
	"github.com/turnstile-rl/turnstile/trainer"
)

func feedURL(set string, q url.Values) string { return "/v1/sets/" + set + "/feed?" + q.Encode() }

func TestFeedDeliversAPage(t *testing.T) {
	var got trainer.FeedRequest
	f := &fakeBackend{runs: 3,
		health: func(trainer.HealthRequest) (trainer.Health, error) {
			return trainer.Health{State: trainer.HealthOK, Rollouts: 3, Running: 2, Held: 2}, nil
		},
		feed: func(r trainer.FeedRequest) (trainer.FeedPage, error) {
			got = r
			return trainer.FeedPage{Items: []json.RawMessage{json.RawMessage(`{"rollout_id":"s1-0001"}`)}, Next: trainer.FeedPosition{At: 42, RolloutID: "s1-0001", RunID: "r"}, More: 1}, nil
		}}
	s := newTestServer(t, f, func(c *Config) { c.FeedSettle = 3 * time.Second })
	res := decodeOK[FeedResponse](t, call(t, s, "GET", feedURL("s1", url.Values{"max": {"5"}}), ""), http.StatusOK)
	require.Len(t, res.Items, 1, "response %+v", res)
	require.False(t, res.Done, "response %+v", res)
	require.Equal(t, 2, res.Health.Held, "response %+v", res)
	require.NotEqual(t, "", res.Cursor, "response %+v", res)
	require.Equal(t, 5, got.Max, "feed request %+v", got)
	require.True(t, got.After.IsZero(), "feed request %+v", got)
	require.Equal(t, 3*time.Second, got.Settle, "feed request %+v", got)
	require.Equal(t, "s1", got.Set, "feed request %+v", got)
	require.False(t, got.CompleteGroups, "feed request %+v", got)
	call(t, s, "GET", feedURL("s1", url.Values{"complete_groups": {"true"}}), "")
	require.True(t, got.CompleteGroups, "complete_groups=true: %+v", got)
	// The cursor carries the position on, through any gateway.
	call(t, s, "GET", feedURL("s1", url.Values{"cursor": {res.Cursor}}), "")
	require.Equal(t, trainer.FeedPosition{At: 42, RolloutID: "s1-0001", RunID: "r"}, got.After, "after the cursor: %+v", got)
	require.Equal(t, defaultFeedMax, got.Max, "after the cursor: %+v", got)
}

func TestFeedRefuses(t *testing.T) {
	s := newTestServer(t, &fakeBackend{runs: 1})
	for name, q := range map[string]url.Values{
		"cursor":          {"cursor": {"garbage"}},
		"max":             {"max": {"0"}},
		"wait_ms":         {"wait_ms": {"600000"}},
		"complete_groups": {"complete_groups": {"yes"}},
	} {
		t.Run(name, func(t *testing.T) {
			expectError(t, call(t, s, "GET", feedURL("s1", q), ""), http.StatusBadRequest, CodeBadRequest, name)
		})
	}
	expectError(t, call(t, s, "GET", feedURL("s1", url.Values{"cursor": {cursorPrefix + "e30"}}), ""), http.StatusBadRequest, CodeBadRequest, "cursor")
	noStore := newTestServer(t, &fakeBackend{runs: 1}, func(c *Config) { c.Transcripts = nil })
	expectError(t, call(t, noStore, "GET", feedURL("s1", nil), ""), http.StatusServiceUnavailable, CodeUnavailable, "")
}

// TestFeedStalled: with nothing to deliver and the watchdog seeing no
// progress, the feed is a 409 naming the reason, with the health.
func TestFeedStalled(t *testing.T) {
	f := &fakeBackend{runs: 4, health: func(trainer.HealthRequest) (trainer.Health, error) {
		return trainer.Health{State: trainer.HealthStalled, Rollouts: 4, Running: 4, Reason: "no rollout made progress; model calls failing: connection refused"}, nil
	}}
	s := newTestServer(t, f)
	b := expectError(t, call(t, s, "GET", feedURL("s1", nil), ""), http.StatusConflict, CodeSetStalled, "")
	require.NotNil(t, b.Health, "body %+v", b)
	require.Equal(t, trainer.HealthStalled, b.Health.State, "body %+v", b)
	require.Equal(t, b.Health.Reason, b.Error.Message, "body %+v", b)
	// Results still to deliver come first: a stalled set's feed hands them over.
	f.feed = func(r trainer.FeedRequest) (trainer.FeedPage, error) {
		return trainer.FeedPage{Items: []json.RawMessage{json.RawMessage(`{}`)}, Next: trainer.FeedPosition{At: 1, RolloutID: "x"}}, nil
	}
	res := decodeOK[FeedResponse](t, call(t, s, "GET", feedURL("s1", nil), ""), http.StatusOK)
	require.Len(t, res.Items, 1, "response %+v", res)
	require.Equal(t, trainer.HealthStalled, res.Health.State, "response %+v", res)
}

func TestFeedDone(t *testing.T) {
	f := &fakeBackend{runs: 2, health: func(trainer.HealthRequest) (trainer.Health, error) {
		return trainer.Health{State: trainer.HealthOK, Rollouts: 2, Completed: 2}, nil
	}}
	clock := testsupport.NewClock(time.Unix(1000, 0))
	s := newTestServer(t, f, func(c *Config) { c.Now = clock.Now })
	res := decodeOK[FeedResponse](t, call(t, s, "GET", feedURL("s1", url.Values{"wait_ms": {"60000"}}), ""), http.StatusOK)
	require.True(t, res.Done, "response %+v", res)
	require.Empty(t, res.Items, "response %+v", res)
	// Not done while the admission has rollouts to start, or started some
	// that visibility does not show running yet.
	for _, h := range []trainer.Health{{Rollouts: 4, Completed: 2, Queued: 2}, {Rollouts: 2, Completed: 2, Admitting: 1}} {
		f.health = func(trainer.HealthRequest) (trainer.Health, error) { h.State = trainer.HealthOK; return h, nil }
		clock.Advance(FeedHealthEvery) // the health a page before served its time
		res = decodeOK[FeedResponse](t, call(t, s, "GET", feedURL("s1", nil), ""), http.StatusOK)
		require.False(t, res.Done, "health %+v: response %+v", h, res)
	}
}

// TestFeedHealthServesPages: pages read one after another within
// FeedHealthEvery share one health computation (a pass over the set in
// visibility); an acknowledgement through the gateway drops it, and so
// does the time.
func TestFeedHealthServesPages(t *testing.T) {
	var healths atomic.Int32
	f := &fakeBackend{runs: 2, health: func(trainer.HealthRequest) (trainer.Health, error) {
		healths.Add(1)
		return trainer.Health{State: trainer.HealthOK, Rollouts: 2, Running: 2, Held: 2}, nil
	}}
	f.feed = func(r trainer.FeedRequest) (trainer.FeedPage, error) {
		return trainer.FeedPage{Items: []json.RawMessage{json.RawMessage(`{}`)}, Next: trainer.FeedPosition{At: r.After.At + 1, RolloutID: "x"}}, nil
	}
	clock := testsupport.NewClock(time.Unix(1000, 0))
	s := newTestServer(t, f, func(c *Config) { c.Now = clock.Now })
	page := func() {
		t.Helper()
		res := decodeOK[FeedResponse](t, call(t, s, "GET", feedURL("s1", nil), ""), http.StatusOK)
		require.Equal(t, 2, res.Health.Held, "response %+v", res)
	}
	page()
	page()
	clock.Advance(FeedHealthEvery - time.Millisecond)
	page()
	require.Equal(t, int32(1), healths.Load(), "three pages within FeedHealthEvery")
	clock.Advance(time.Millisecond)
	page()
	require.Equal(t, int32(2), healths.Load(), "a page FeedHealthEvery later")
	decodeOK[AckResponse](t, call(t, s, "POST", "/v1/sets/s1/acks", `{"request_id":"a","receipts":[`+receiptJSON("s1-0000", 'a')+`]}`), http.StatusOK)
	page()
	require.Equal(t, int32(3), healths.Load(), "a page after an acknowledgement")
	require.Len(t, s.healths.sets, 1)
	s.healths.put("other", trainer.Health{}, clock.Now().Add(FeedHealthEvery))
	require.Len(t, s.healths.sets, 1, "an entry too old to use is dropped")
}

// TestFeedWaits: a long poll looks again until a result is ready, and
// passes over runs that were acknowledged meanwhile without waiting.
func TestFeedWaits(t *testing.T) {
	var polls atomic.Int32
	f := &fakeBackend{runs: 2, health: func(trainer.HealthRequest) (trainer.Health, error) {
		return trainer.Health{State: trainer.HealthOK, Rollouts: 2, Running: 2}, nil
	}}
	f.feed = func(r trainer.FeedRequest) (trainer.FeedPage, error) {
		switch polls.Add(1) {
		case 1, 2: // nothing yet
			return trainer.FeedPage{Next: r.After}, nil
		case 3: // a run acknowledged meanwhile: passed over
			return trainer.FeedPage{Next: trainer.FeedPosition{At: 5, RolloutID: "s1-0000"}, More: 1}, nil
		}
		assert.Equal(t, "s1-0000", r.After.RolloutID, "the next poll starts after %+v", r.After)
		return trainer.FeedPage{Items: []json.RawMessage{json.RawMessage(`{"rollout_id":"s1-0001"}`)}, Next: trainer.FeedPosition{At: 6, RolloutID: "s1-0001"}}, nil
	}
	s := newTestServer(t, f)
	res := decodeOK[FeedResponse](t, call(t, s, "GET", feedURL("s1", url.Values{"wait_ms": {"60000"}}), ""), http.StatusOK)
	require.Len(t, res.Items, 1, "response %+v after %d polls", res, polls.Load())
	require.Equal(t, int32(4), polls.Load(), "response %+v after %d polls", res, polls.Load())
}

// TestFeedWaitEnds: a poll that finds nothing answers an empty page when
// its wait is over; a set with neither rollouts nor an admission is a 404
// then, one whose admission exists (just submitted) an empty page.
func TestFeedWaitEnds(t *testing.T) {
	clock := testsupport.NewClock(time.Unix(1000, 0))
	f := &fakeBackend{runs: 1}
	f.health = func(trainer.HealthRequest) (trainer.Health, error) {
		clock.Advance(FeedHealthEvery) // each look costs time of the wait
		return trainer.Health{State: trainer.HealthOK, Rollouts: f.runs, Running: f.runs}, nil
	}
	f.feed = func(r trainer.FeedRequest) (trainer.FeedPage, error) {
		clock.Advance(time.Second)
		return trainer.FeedPage{Next: r.After}, nil
	}
	s := newTestServer(t, f, func(c *Config) { c.Now = clock.Now })
	res := decodeOK[FeedResponse](t, call(t, s, "GET", feedURL("s1", url.Values{"wait_ms": {"3000"}}), ""), http.StatusOK)
	require.Empty(t, res.Items, "response %+v", res)
	require.False(t, res.Done, "response %+v", res)
	f.runs = 0
	expectError(t, call(t, s, "GET", feedURL("s1", url.Values{"wait_ms": {"3000"}}), ""), http.StatusNotFound, CodeNotFound, "set")

	// Just submitted: the admission exists, no rollout shows yet. An empty
	// page, the cursor unchanged, not done.
	f.admission = true
	cursor := encodeCursor(trainer.FeedPosition{At: 5, RolloutID: "s1-0000"})
	res = decodeOK[FeedResponse](t, call(t, s, "GET", feedURL("s1", url.Values{"wait_ms": {"3000"}, "cursor": {cursor}}), ""), http.StatusOK)
	require.Empty(t, res.Items, "response %+v", res)
	require.False(t, res.Done, "response %+v", res)
	require.Equal(t, cursor, res.Cursor)
	res = decodeOK[FeedResponse](t, call(t, s, "GET", feedURL("s1", nil), ""), http.StatusOK)
	require.Empty(t, res.Items, "response %+v", res)
	require.Empty(t, res.Cursor)
	require.False(t, res.Done, "response %+v", res)
}

func TestCursorRoundTrip(t *testing.T) {
	for _, p := range []trainer.FeedPosition{{}, {At: 1, RolloutID: "a"}, {At: 1 << 50, RolloutID: "s-0001", RunID: "9f0c"}} {
		got, err := decodeCursor(encodeCursor(p))
		require.NoError(t, err, "%+v: got %+v, %v", p, got, err)
		require.Equal(t, p, got, "%+v: got %+v, %v", p, got, err)
	}
}
