package trainer_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/trainer"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// Strings and sizes are bounded before anything is sent to Temporal, with
// an error naming the setting (the starter's flag) at fault.
func TestSubmitBounds(t *testing.T) {
	huge := strings.Repeat("m", 10<<20)
	base := func() trainer.SubmitRequest {
		return trainer.SubmitRequest{Set: "s1", Count: 1, Envs: []string{"counter"}}
	}
	for _, tc := range []struct {
		name string
		edit func(*trainer.SubmitRequest)
		want string
	}{
		{"policy", func(r *trainer.SubmitRequest) { r.Policy = huge }, "--policy"},
		{"model url", func(r *trainer.SubmitRequest) { r.ModelURL = "http://x/" + huge }, "--model-url"},
		{"env url", func(r *trainer.SubmitRequest) { r.EnvURL = "http://x/" + huge }, "--env-url"},
		{"env name", func(r *trainer.SubmitRequest) { r.Envs = []string{huge} }, "--env"},
		{"stop sequence", func(r *trainer.SubmitRequest) { r.Sampling = &rollout.Sampling{Stop: []string{huge}} }, "sampling.stop"},
		{"row task", func(r *trainer.SubmitRequest) {
			r.Count, r.Envs, r.Repeats = 0, nil, 1
			r.Rows = []trainer.DatasetRow{{Env: "counter", Task: json.RawMessage(`{"target":2,"pad":"` + strings.Repeat("t", 1<<20) + `"}`)}}
		}, "task"},
		{"row policy", func(r *trainer.SubmitRequest) {
			r.Count, r.Envs, r.Repeats = 0, nil, 1
			r.Rows = []trainer.DatasetRow{{Env: "counter", Task: json.RawMessage(`{"target":2}`), Policy: &rollout.PolicyRef{Model: huge}}}
		}, "policy.model"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := base()
			tc.edit(&r)
			err := r.Validate()
			require.ErrorContains(t, err, tc.want)
			require.Less(t, len(err.Error()), 4096, "the error repeats the oversized value")
			_, err = trainer.BuildInputs(r)
			require.Error(t, err)
		})
	}
}

func TestCheckpointBounds(t *testing.T) {
	long := []string{"http://x/" + strings.Repeat("p", 1<<20)}
	many := make([]string, trainer.MaxParticipants+1)
	for i := range many {
		many[i] = fmt.Sprintf("http://127.0.0.1:%d", 1000+i)
	}
	for name, parts := range map[string][]string{"long url": long, "too many": many} {
		t.Run(name, func(t *testing.T) {
			_, err := trainer.CheckpointRequest{Set: "s1", CheckpointID: "k1", Root: "/ckpt", Participants: parts, Timeout: time.Minute}.CheckpointInput("/")
			require.ErrorContains(t, err, "--participants")
			_, err = trainer.RestoreRequest{CheckpointID: "k1", Root: "/ckpt", Participants: parts}.RestoreInput("/", "q")
			require.ErrorContains(t, err, "--participants")
			err = trainer.ResumeRequest{Set: "s1", CheckpointID: "k1", Participants: parts}.Validate()
			require.ErrorContains(t, err, "--participants")
		})
	}
}
