package gateway

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"go.temporal.io/api/serviceerror"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/turnstile-rl/turnstile/trainer"
)

// Oversized fields are a 400 naming the field, answered before anything is
// sent to Temporal: never the 503 a trainer would repeat for ever.
func TestSubmitRefusesOversizedFields(t *testing.T) {
	huge := strings.Repeat("m", 10<<20)
	row := func(task string) string {
		return fmt.Sprintf(`{"request_id":"r","set":"s","rows":[{"env":"counter","task":%s}]}`, task)
	}
	for _, tc := range []struct{ name, body, field string }{
		{"10 MB policy", `{"request_id":"r","set":"s","envs":["counter"],"count":1,"policy":"` + huge + `"}`, "policy"},
		{"long model url", `{"request_id":"r","set":"s","envs":["counter"],"count":1,"model_url":"http://x/` + strings.Repeat("a", 4096) + `"}`, "model_url"},
		{"long env url", `{"request_id":"r","set":"s","envs":["counter"],"count":1,"env_url":"http://x/` + strings.Repeat("a", 4096) + `"}`, "env_url"},
		{"long env name", `{"request_id":"r","set":"s","envs":["` + strings.Repeat("e", 1<<20) + `"],"count":1}`, "envs"},
		{"long stop sequence", `{"request_id":"r","set":"s","envs":["counter"],"count":1,"sampling":{"stop":["` + strings.Repeat("s", 4096) + `"]}}`, "sampling.stop[0]"},
		{"huge task", row(`{"target":2,"pad":"` + strings.Repeat("t", 1<<20) + `"}`), "rows"},
		{"huge row policy", row(`{"target":2}`)[:len(row(`{"target":2}`))-3] + `,"policy":{"model":"` + huge + `"}}]}`, "rows"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeBackend{}
			s := newTestServer(t, f)
			b := expectError(t, call(t, s, "POST", "/v1/sets", tc.body), http.StatusBadRequest, CodeBadRequest, tc.field)
			if len(b.Error.Message) > 4096 {
				t.Errorf("the error message repeats the oversized value: %d bytes", len(b.Error.Message))
			}
			if f.count("Submit") != 0 {
				t.Error("an oversized submission reached the backend")
			}
		})
	}
}

func TestCheckpointRefusesOversizedParticipants(t *testing.T) {
	many := make([]string, trainer.MaxParticipants+1)
	for i := range many {
		many[i] = fmt.Sprintf(`"http://127.0.0.1:%d"`, 1000+i)
	}
	for name, parts := range map[string]string{
		"too many participants": "[" + strings.Join(many, ",") + "]",
		"long participant url":  `["http://x/` + strings.Repeat("p", 1<<20) + `"]`,
	} {
		t.Run(name, func(t *testing.T) {
			f := &fakeBackend{}
			s := newTestServer(t, f)
			body := `{"request_id":"r","checkpoint_id":"k1","set":"s1","timeout":"60s","participants":` + parts + `}`
			expectError(t, call(t, s, "POST", "/v1/checkpoints", body), http.StatusBadRequest, CodeBadRequest, "participants")
			if f.count("StartCheckpoint") != 0 {
				t.Error("an oversized checkpoint request reached the backend")
			}
		})
	}
}

// Temporal refusing a request as too large is the caller's problem to fix:
// a 400, not a 503 "safe to repeat". Temporal being busy still is a 503.
func TestTooLargeForTemporalIsABadRequest(t *testing.T) {
	for _, tc := range []struct {
		name   string
		err    error
		status int
	}{
		{"gRPC message over the maximum", fmt.Errorf("start rollout s-0000: %w",
			status.Error(codes.ResourceExhausted, "grpc: received message after decompression larger than max 4194304")), http.StatusBadRequest},
		{"payload over the blob size limit", fmt.Errorf("start rollout s-0000: %w", serviceerror.NewInvalidArgument("Blob data size exceeds limit.")), http.StatusBadRequest},
		{"rate limited", serviceerror.NewResourceExhausted(0, "namespace rate limit exceeded"), http.StatusServiceUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeBackend{submit: func(trainer.SubmitRequest) (trainer.SubmitResult, error) { return trainer.SubmitResult{}, tc.err }}
			s := newTestServer(t, f)
			rec := call(t, s, "POST", "/v1/sets", `{"request_id":"r","set":"s","envs":["counter"],"count":1}`)
			if rec.Code != tc.status {
				t.Fatalf("status %d, want %d: %s", rec.Code, tc.status, rec.Body.String())
			}
			if tc.status == http.StatusBadRequest && strings.Contains(rec.Body.String(), "safe") {
				t.Errorf("a too-large request is called safe to repeat: %s", rec.Body.String())
			}
		})
	}
}
