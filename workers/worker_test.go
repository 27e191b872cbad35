package workers_test

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.temporal.io/sdk/workflow"

	"github.com/turnstile-rl/turnstile/activities/bookkeeping"
	"github.com/turnstile-rl/turnstile/internal/failpoint"
	"github.com/turnstile-rl/turnstile/workers"
	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
	"github.com/turnstile-rl/turnstile/workflows/set"
)

type recordingRegistry struct {
	workflows  []string
	activities []any
}

func (r *recordingRegistry) RegisterWorkflowWithOptions(_ any, o workflow.RegisterOptions) {
	r.workflows = append(r.workflows, o.Name)
}

func (r *recordingRegistry) RegisterActivity(a any) { r.activities = append(r.activities, a) }

func testConfig(t *testing.T) workers.Config {
	t.Helper()
	cfg, err := workers.ConfigFromLookup(func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	cfg.TranscriptDir = filepath.Join(t.TempDir(), "transcripts")
	return cfg
}

func TestRegister(t *testing.T) {
	t.Setenv(failpoint.EnvVar, "")
	acts, err := workers.NewActivities(testConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	var r recordingRegistry
	coord := workers.NewCoordinator(nil, testConfig(t), acts)
	workers.Register(&r, acts, coord)
	want := []string{rollout.WorkflowName, rollout.GroupWorkflowName, checkpoint.CheckpointWorkflowName, checkpoint.RestoreWorkflowName,
		checkpoint.RecoverServerWorkflowName, set.SetFenceWorkflowName}
	if strings.Join(r.workflows, ",") != strings.Join(want, ",") {
		t.Errorf("workflows registered: %v, want %v", r.workflows, want)
	}
	if len(r.activities) != 5 || r.activities[0] != any(acts.Model) || r.activities[1] != any(acts.Environment) || r.activities[4] != any(coord) {
		t.Errorf("activities registered: %v", r.activities)
	}
	if g, ok := r.activities[2].(*bookkeeping.GroupActivities); !ok || g.Client != coord.Client {
		t.Errorf("group activities registered: %#v", r.activities[2])
	}
	if f, ok := r.activities[3].(*bookkeeping.FenceActivities); !ok || f.Client != coord.Client {
		t.Errorf("fence activities registered: %#v", r.activities[3])
	}
	if coord.Store != acts.Store {
		t.Error("the coordinator does not share the rollout activities' transcript store")
	}
}

func TestNewActivities(t *testing.T) {
	t.Setenv(failpoint.EnvVar, "")
	cfg := testConfig(t)
	cfg.ModelAPIKey = "k"
	acts, err := workers.NewActivities(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if acts.Store == nil || acts.Store.Location() != cfg.TranscriptDir {
		t.Errorf("store not opened in %s", cfg.TranscriptDir)
	}
	if _, err := os.Stat(cfg.TranscriptDir); err != nil {
		t.Errorf("transcript dir not created: %v", err)
	}
	if acts.Environment.URL != cfg.EnvURL || acts.Model.BaseURL != cfg.ModelBaseURL || acts.Model.APIKey != "k" {
		t.Errorf("endpoints = %q %q %q", acts.Environment.URL, acts.Model.BaseURL, acts.Model.APIKey)
	}
	if acts.Model.Store != acts.Store || acts.Environment.Store != acts.Store || acts.Model.HTTPClient != acts.HTTPClient || acts.Environment.HTTPClient != acts.HTTPClient {
		t.Error("the model and environment activities do not share the worker's store and HTTP client")
	}
	if acts.HTTPClient == nil {
		t.Fatal("no HTTP client")
	}
	if tr, ok := acts.HTTPClient.Transport.(*http.Transport); !ok || tr.MaxIdleConnsPerHost < 256 {
		t.Errorf("transport %T keeps too few idle connections per host for hundreds of concurrent calls", acts.HTTPClient.Transport)
	}
}

func TestNewActivitiesRejects(t *testing.T) {
	tests := []struct {
		name       string
		failpoints string
		mutate     func(t *testing.T, c *workers.Config)
		want       string
	}{
		{
			name: "transcript dir under a file",
			mutate: func(t *testing.T, c *workers.Config) {
				f := filepath.Join(t.TempDir(), "file")
				if err := os.WriteFile(f, nil, 0o600); err != nil {
					t.Fatal(err)
				}
				c.TranscriptDir = filepath.Join(f, "sub")
			},
			want: "transcript store",
		},
		{
			name:       "bad failpoint spec",
			failpoints: "no.such.place=kill@1",
			want:       failpoint.EnvVar,
		},
		{
			name:   "invalid config",
			mutate: func(_ *testing.T, c *workers.Config) { c.TaskQueue = "" },
			want:   "task queue",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(failpoint.EnvVar, tt.failpoints)
			cfg := testConfig(t)
			if tt.mutate != nil {
				tt.mutate(t, &cfg)
			}
			_, err := workers.NewActivities(cfg)
			if err == nil {
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not mention %q", err, tt.want)
			}
		})
	}
}

// The control worker hosts only the coordinators: no Rollout task can take
// its slots.
func TestRegisterControl(t *testing.T) {
	t.Setenv(failpoint.EnvVar, "")
	acts, err := workers.NewActivities(testConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	var r recordingRegistry
	coord := workers.NewCoordinator(nil, testConfig(t), acts)
	workers.RegisterControl(&r, coord)
	want := []string{checkpoint.CheckpointWorkflowName, checkpoint.RestoreWorkflowName, checkpoint.RecoverServerWorkflowName, set.SetFenceWorkflowName}
	if strings.Join(r.workflows, ",") != strings.Join(want, ",") {
		t.Errorf("workflows registered: %v, want %v", r.workflows, want)
	}
	if len(r.activities) != 1 || r.activities[0] != any(coord) {
		t.Errorf("activities registered: %v, want the coordinator only", r.activities)
	}
	if got := checkpoint.ControlTaskQueue("q"); got != "q-control" {
		t.Errorf("control queue of q = %q", got)
	}
}
