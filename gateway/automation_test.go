package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/internal/retention"
)

const watchdogBody = `{"request_id":"w1","participants":["http://127.0.0.1:8091"],"standby":["http://b.internal:8091"],"every":"1s","bound":"5s"}`

func decodeAs[T any](t *testing.T, rec *httptest.ResponseRecorder) T {
	t.Helper()
	var v T
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &v), "body %q", rec.Body.String())
	return v
}

// TestWatchdogRoutes: automatic recovery is turned on (a repeat joins it:
// existing), read with the trainer token and stopped (twice: no error).
func TestWatchdogRoutes(t *testing.T) {
	f := &fakeBackend{}
	s := newTestServer(t, f)
	rec := call(t, s, "GET", "/v1/sets/s1/watchdog", "")
	expectError(t, rec, http.StatusNotFound, CodeNotFound, "")

	rec = call(t, s, "POST", "/v1/sets/s1/watchdog", watchdogBody)
	require.Equal(t, http.StatusAccepted, rec.Code, rec.Body.String())
	st := decodeAs[StartedResponse](t, rec)
	assert.Equal(t, StartedResponse{ID: "s1", WorkflowID: "watchdog/s1", RunID: "run-1"}, st)
	a := f.auto.watchdogs["s1"]
	assert.Equal(t, "/ckpt", a.Root, "the root is the gateway's")
	assert.Equal(t, []string{"http://b.internal:8091"}, a.Standby)
	assert.Equal(t, "5s", a.Bound.String())

	rec = call(t, s, "POST", "/v1/sets/s1/watchdog", watchdogBody)
	require.Equal(t, http.StatusAccepted, rec.Code, rec.Body.String())
	assert.True(t, decodeAs[StartedResponse](t, rec).Existing, "a repeat joins the running watchdog")

	rec = callAs(t, s, testToken, "GET", "/v1/sets/s1/watchdog", "")
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	wd := decodeAs[WatchdogResponse](t, rec)
	assert.Equal(t, "watching", wd.Phase)
	assert.Equal(t, []string{"http://127.0.0.1:8091"}, wd.Watched)
	assert.NotNil(t, wd.Declarations)

	for range 2 {
		rec = call(t, s, "DELETE", "/v1/sets/s1/watchdog", `{"request_id":"d1"}`)
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		assert.Equal(t, StoppedResponse{Set: "s1", Stopped: true}, decodeAs[StoppedResponse](t, rec))
	}
	rec = call(t, s, "GET", "/v1/sets/s1/watchdog", "")
	assert.Equal(t, "stopped", decodeAs[WatchdogResponse](t, rec).Phase)
}

// TestWatchdogBadInput: each bad request is a 400 naming its field and
// starts nothing.
func TestWatchdogBadInput(t *testing.T) {
	for name, c := range map[string]struct{ body, field string }{
		"no request id":         {`{"participants":["http://127.0.0.1:8091"]}`, "request_id"},
		"no participants":       {`{"request_id":"r"}`, "participants"},
		"foreign participant":   {`{"request_id":"r","participants":["http://evil.example:80"]}`, "participants"},
		"foreign standby":       {`{"request_id":"r","participants":["http://127.0.0.1:8091"],"standby":["http://evil.example:80"]}`, "standby"},
		"bad every":             {`{"request_id":"r","participants":["http://127.0.0.1:8091"],"every":"soon"}`, "every"},
		"negative misses":       {`{"request_id":"r","participants":["http://127.0.0.1:8091"],"misses":-1}`, "misses"},
		"timeout beyond bound":  {`{"request_id":"r","participants":["http://127.0.0.1:8091"],"timeout":"10s","bound":"5s"}`, "timeout"},
		"a root is not asked":   {`{"request_id":"r","participants":["http://127.0.0.1:8091"],"root":"/elsewhere"}`, "root"},
		"misses of wrong type":  {`{"request_id":"r","participants":["http://127.0.0.1:8091"],"misses":"3"}`, "misses"},
		"participants not list": {`{"request_id":"r","participants":"http://127.0.0.1:8091"}`, "participants"},
	} {
		t.Run(name, func(t *testing.T) {
			f := &fakeBackend{}
			s := newTestServer(t, f)
			rec := call(t, s, "POST", "/v1/sets/s1/watchdog", c.body)
			expectError(t, rec, http.StatusBadRequest, CodeBadRequest, c.field)
			assert.Zero(t, f.count("StartWatchdog"), "a refused request starts nothing")
		})
	}
	f := &fakeBackend{}
	s := newTestServer(t, f, func(c *Config) { c.CheckpointRoot = "" })
	expectError(t, call(t, s, "POST", "/v1/sets/s1/watchdog", watchdogBody), http.StatusServiceUnavailable, CodeUnavailable, "")
	assert.Zero(t, f.count("StartWatchdog"))
}

const scheduleBody = `{"request_id":"c1","every":"10m","participants":["http://127.0.0.1:8091"],"tag":"step-1","keep":3}`

// TestScheduleRoutes: a set's checkpoint schedule is created (a repeat
// answers existing, other settings a conflict), tagged with the trainer
// token, paused and unpaused with a note, triggered and deleted (twice).
func TestScheduleRoutes(t *testing.T) {
	f := &fakeBackend{}
	s := newTestServer(t, f)
	rec := call(t, s, "POST", "/v1/sets/s1/schedule", scheduleBody)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	sch := decodeAs[ScheduleResponse](t, rec)
	assert.Equal(t, "10m0s", sch.Every)
	assert.Equal(t, "step-1", sch.Tag)
	assert.Equal(t, 3, sch.Keep)
	assert.False(t, sch.Existing)
	assert.Equal(t, "/ckpt", f.auto.requests["s1"].Root, "the root is the gateway's")

	rec = call(t, s, "POST", "/v1/sets/s1/schedule", scheduleBody)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	assert.True(t, decodeAs[ScheduleResponse](t, rec).Existing, "a repeat answers the schedule it made")
	rec = call(t, s, "POST", "/v1/sets/s1/schedule", `{"request_id":"c2","every":"5m","participants":["http://127.0.0.1:8091"],"tag":"step-1","keep":3}`)
	expectError(t, rec, http.StatusConflict, CodeConflict, "every")
	rec = call(t, s, "POST", "/v1/sets/s1/schedule", `{"request_id":"c3","every":"10m","participants":["http://127.0.0.1:8091"],"tag":"step-1","keep":4}`)
	expectError(t, rec, http.StatusConflict, CodeConflict, "keep")
	assert.Equal(t, "10m0s", f.auto.schedules["s1"].Every.String(), "a conflict changes nothing")
	assert.Equal(t, 3, f.auto.schedules["s1"].Keep, "a conflict changes nothing")

	rec = callAs(t, s, testToken, "POST", "/v1/sets/s1/schedule/tag", `{"request_id":"t1","tag":"step-2"}`)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	assert.Equal(t, "step-2", decodeAs[ScheduleResponse](t, rec).Tag)
	rec = call(t, s, "POST", "/v1/sets/s1/schedule", scheduleBody)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	sch = decodeAs[ScheduleResponse](t, rec)
	assert.True(t, sch.Existing, "a trainer restarted after it moved the tag on creates again safely")
	assert.Equal(t, "step-2", sch.Tag, "and the tag stays where it moved")

	rec = call(t, s, "POST", "/v1/sets/s1/schedule/pause", `{"request_id":"p1","note":"evaluating"}`)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	sch = decodeAs[ScheduleResponse](t, rec)
	assert.True(t, sch.Paused)
	assert.Equal(t, "evaluating", sch.Note)
	rec = call(t, s, "POST", "/v1/sets/s1/schedule/unpause", `{"request_id":"p2"}`)
	assert.False(t, decodeAs[ScheduleResponse](t, rec).Paused)

	rec = call(t, s, "POST", "/v1/sets/s1/schedule/trigger", `{"request_id":"g1"}`)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	sch = decodeAs[ScheduleResponse](t, rec)
	assert.Equal(t, 1, sch.Fired)
	assert.Equal(t, []ScheduledRun{{CheckpointID: "every-s1-2026-01-02T150405Z", WorkflowID: "checkpoint/every-s1-2026-01-02T15:04:05Z"}}, sch.Recent)

	rec = callAs(t, s, testToken, "GET", "/v1/sets/s1/schedule", "")
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	for range 2 {
		rec = call(t, s, "DELETE", "/v1/sets/s1/schedule", `{"request_id":"d2"}`)
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	}
	expectError(t, call(t, s, "GET", "/v1/sets/s1/schedule", ""), http.StatusNotFound, CodeNotFound, "")
	expectError(t, call(t, s, "POST", "/v1/sets/s1/schedule/tag", `{"request_id":"t2","tag":"x"}`), http.StatusNotFound, CodeNotFound, "")
	expectError(t, call(t, s, "POST", "/v1/sets/s1/schedule/pause", `{"request_id":"p3"}`), http.StatusNotFound, CodeNotFound, "")
}

// TestScheduleBadInput: each bad request is a 400 naming its field and
// changes nothing.
func TestScheduleBadInput(t *testing.T) {
	for name, c := range map[string]struct{ target, body, field string }{
		"no request id":       {"/v1/sets/s1/schedule", `{"every":"10m","participants":["http://127.0.0.1:8091"]}`, "request_id"},
		"no every":            {"/v1/sets/s1/schedule", `{"request_id":"r","participants":["http://127.0.0.1:8091"]}`, "every"},
		"every too short":     {"/v1/sets/s1/schedule", `{"request_id":"r","every":"1ms","participants":["http://127.0.0.1:8091"]}`, "every"},
		"negative keep":       {"/v1/sets/s1/schedule", `{"request_id":"r","every":"10m","keep":-1,"participants":["http://127.0.0.1:8091"]}`, "keep"},
		"bad tag":             {"/v1/sets/s1/schedule", `{"request_id":"r","every":"10m","tag":"a/b","participants":["http://127.0.0.1:8091"]}`, "tag"},
		"bad timeout":         {"/v1/sets/s1/schedule", `{"request_id":"r","every":"10m","timeout":"-1s","participants":["http://127.0.0.1:8091"]}`, "timeout"},
		"foreign participant": {"/v1/sets/s1/schedule", `{"request_id":"r","every":"10m","participants":["http://evil.example:80"]}`, "participants"},
		"a root is not asked": {"/v1/sets/s1/schedule", `{"request_id":"r","every":"10m","participants":["http://127.0.0.1:8091"],"root":"s3://x"}`, "root"},
		"bad set":             {"/v1/sets/a%20b/schedule", `{"request_id":"r","every":"10m","participants":["http://127.0.0.1:8091"]}`, "set"},
		"tag: bad tag":        {"/v1/sets/s1/schedule/tag", `{"request_id":"r","tag":"../x"}`, "tag"},
		"tag: no request id":  {"/v1/sets/s1/schedule/tag", `{"tag":"x"}`, "request_id"},
		"pause: long note":    {"/v1/sets/s1/schedule/pause", `{"request_id":"r","note":"` + longNote + `"}`, "note"},
		"trigger: unknown":    {"/v1/sets/s1/schedule/trigger", `{"request_id":"r","now":true}`, "now"},
		"timeout 0":           {"/v1/sets/s1/schedule", `{"request_id":"r","every":"10m","timeout":"0s","participants":["http://127.0.0.1:8091"]}`, "timeout"},
	} {
		t.Run(name, func(t *testing.T) {
			f := &fakeBackend{}
			s := newTestServer(t, f)
			rec := call(t, s, "POST", c.target, c.body)
			expectError(t, rec, http.StatusBadRequest, CodeBadRequest, c.field)
			for _, m := range mutations {
				assert.Zero(t, f.count(m), "%s called on a refused request", m)
			}
		})
	}
}

var longNote = string(func() []byte {
	b := make([]byte, maxNoteBytes+1)
	for i := range b {
		b[i] = 'n'
	}
	return b
}())

// TestAutomationNeedsOperator: the trainer token cannot turn automatic
// recovery on or off, nor create, pause, trigger or delete a schedule (so
// it cannot point the watchdog or a checkpoint at any server): 403, the
// body unread, nothing called. It reads both and tags the schedule.
func TestAutomationNeedsOperator(t *testing.T) {
	f := &fakeBackend{}
	s := newTestServer(t, f)
	evil := `{"request_id":"r","every":"10m","participants":["http://evil.example:80"],"standby":["http://evil.example:81"]}`
	for _, c := range []struct{ method, target string }{
		{"POST", "/v1/sets/s1/watchdog"}, {"DELETE", "/v1/sets/s1/watchdog"},
		{"POST", "/v1/sets/s1/schedule"}, {"DELETE", "/v1/sets/s1/schedule"},
		{"POST", "/v1/sets/s1/schedule/pause"}, {"POST", "/v1/sets/s1/schedule/unpause"}, {"POST", "/v1/sets/s1/schedule/trigger"},
	} {
		rec := callAs(t, s, testToken, c.method, c.target, evil)
		expectError(t, rec, http.StatusForbidden, CodeForbidden, "")
		assert.Contains(t, errorOf(t, rec).Error.Message, "operator")
	}
	for _, m := range mutations {
		assert.Zero(t, f.count(m), "%s called for a trainer token", m)
	}
	expectError(t, callAs(t, s, "", "GET", "/v1/sets/s1/schedule", ""), http.StatusUnauthorized, CodeUnauthorized, "")
}

// TestPin: the trainer token pins a tag; a bad tag is a 400 that pins
// nothing, a tag no checkpoint has a 404 naming tag, a gateway that cannot
// pin a 503.
func TestPin(t *testing.T) {
	var pinned []string
	pin := func(_ context.Context, set, tag string) ([]string, error) {
		if tag == "step-9" {
			return nil, fmt.Errorf("pin: %w", retention.ErrNothingToPin)
		}
		pinned = append(pinned, set+"/"+tag)
		return []string{"every-s1-2026-01-02T150405Z"}, nil
	}
	s := newTestServer(t, &fakeBackend{}, func(c *Config) { c.Pin = pin })
	rec := callAs(t, s, testToken, "POST", "/v1/sets/s1/pins", `{"request_id":"p1","tag":"step-3"}`)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	assert.Equal(t, PinResponse{Set: "s1", Tag: "step-3", Pinned: []string{"every-s1-2026-01-02T150405Z"}}, decodeAs[PinResponse](t, rec))
	assert.Equal(t, []string{"s1/step-3"}, pinned)

	expectError(t, call(t, s, "POST", "/v1/sets/s1/pins", `{"request_id":"p2","tag":"../x"}`), http.StatusBadRequest, CodeBadRequest, "tag")
	expectError(t, call(t, s, "POST", "/v1/sets/s1/pins", `{"request_id":"p2"}`), http.StatusBadRequest, CodeBadRequest, "tag")
	expectError(t, call(t, s, "POST", "/v1/sets/s1/pins", `{"tag":"step-3"}`), http.StatusBadRequest, CodeBadRequest, "request_id")
	assert.Len(t, pinned, 1, "a refused request pins nothing")
	expectError(t, call(t, s, "POST", "/v1/sets/s1/pins", `{"request_id":"p3","tag":"step-9"}`), http.StatusNotFound, CodeNotFound, "tag")

	none := newTestServer(t, &fakeBackend{})
	expectError(t, call(t, none, "POST", "/v1/sets/s1/pins", `{"request_id":"p1","tag":"step-3"}`), http.StatusServiceUnavailable, CodeUnavailable, "")
}
