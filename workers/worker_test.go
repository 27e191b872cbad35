package workers_test

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/workflow"

	"github.com/turnstile-rl/turnstile/activities/bookkeeping"
	"github.com/turnstile-rl/turnstile/activities/coordinator"
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
	require.NoError(t, err)
	cfg.TranscriptDir = filepath.Join(t.TempDir(), "transcripts")
	return cfg
}

func TestRegister(t *testing.T) {
	t.Setenv(failpoint.EnvVar, "")
	acts, err := workers.NewActivities(testConfig(t))
	require.NoError(t, err)
	var r recordingRegistry
	coord := workers.NewCoordinator(nil, testConfig(t), acts)
	workers.Register(&r, acts, coord)
	want := []string{rollout.WorkflowName, rollout.GroupWorkflowName, checkpoint.CheckpointWorkflowName, checkpoint.RestoreWorkflowName,
		checkpoint.RecoverServerWorkflowName, checkpoint.WatchdogWorkflowName, set.SetFenceWorkflowName, set.AdmissionWorkflowName, set.AckLedgerWorkflowName}
	assert.Equal(t, strings.Join(want, ","), strings.Join(r.workflows, ","), "workflows registered: %v, want %v", r.workflows, want)
	require.Len(t, r.activities, 7, "activities registered: %v", r.activities)
	require.Same(t, acts.Model, r.activities[0], "activities registered: %v", r.activities)
	require.Same(t, acts.Environment, r.activities[1], "activities registered: %v", r.activities)
	require.Same(t, coord, r.activities[5], "activities registered: %v", r.activities)
	adm, ok := r.activities[3].(*bookkeeping.AdmissionActivities)
	require.True(t, ok, "admission activities registered: %#v", r.activities[3])
	require.True(t, adm.Client == coord.Client, "admission activities registered: %#v", r.activities[3])
	require.True(t, adm.Store == bookkeeping.BatchStore(acts.Store), "the admission does not keep its queue in the workers' transcript store")
	g, ok := r.activities[2].(*bookkeeping.GroupActivities)
	require.True(t, ok, "group activities registered: %#v", r.activities[2])
	require.True(t, g.Client == coord.Client, "group activities registered: %#v", r.activities[2])
	requireStarter(t, r.activities[6], coord)
	assert.Same(t, acts.Store, coord.Store, "the coordinator does not share the rollout activities' transcript store")
}

func TestNewActivities(t *testing.T) {
	t.Setenv(failpoint.EnvVar, "")
	cfg := testConfig(t)
	cfg.ModelAPIKey = "k"
	acts, err := workers.NewActivities(cfg)
	require.NoError(t, err)
	require.NotNil(t, acts.Store, "store not opened in %s", cfg.TranscriptDir)
	require.Equal(t, cfg.TranscriptDir, acts.Store.Location(), "store not opened in %s", cfg.TranscriptDir)
	_, err = os.Stat(cfg.TranscriptDir)
	assert.NoError(t, err, "transcript dir not created")
	require.Equal(t, cfg.EnvURL, acts.Environment.URL, "endpoints = %q %q %q", acts.Environment.URL, acts.Model.BaseURL, acts.Model.APIKey)
	require.Equal(t, cfg.ModelBaseURL, acts.Model.BaseURL, "endpoints = %q %q %q", acts.Environment.URL, acts.Model.BaseURL, acts.Model.APIKey)
	require.Equal(t, "k", acts.Model.APIKey, "endpoints = %q %q %q", acts.Environment.URL, acts.Model.BaseURL, acts.Model.APIKey)
	require.Same(t, acts.Store, acts.Model.Store, "the model and environment activities do not share the worker's store and HTTP client")
	require.Same(t, acts.Store, acts.Environment.Store, "the model and environment activities do not share the worker's store and HTTP client")
	require.Same(t, acts.HTTPClient, acts.Model.HTTPClient, "the model and environment activities do not share the worker's store and HTTP client")
	require.Same(t, acts.HTTPClient, acts.Environment.HTTPClient, "the model and environment activities do not share the worker's store and HTTP client")
	require.NotNil(t, acts.HTTPClient, "no HTTP client")
	tr, ok := acts.HTTPClient.Transport.(*http.Transport)
	require.True(t, ok, "transport %T keeps too few idle connections per host for hundreds of concurrent calls", acts.HTTPClient.Transport)
	require.GreaterOrEqual(t, tr.MaxIdleConnsPerHost, 256, "transport %T keeps too few idle connections per host for hundreds of concurrent calls", acts.HTTPClient.Transport)
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
				require.NoError(t, os.WriteFile(f, nil, 0o600))
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
			require.Error(t, err, "accepted")
			assert.ErrorContains(t, err, tt.want, "error %q does not mention %q", err, tt.want)
		})
	}
}

// requireStarter checks that a is StartRollouts, starting with the
// coordinator's client (the workers' own, so starts are eager) on the
// rollout task queue.
func requireStarter(t *testing.T, a any, coord *coordinator.Coordinator) {
	t.Helper()
	s, ok := a.(*bookkeeping.StartActivities)
	require.True(t, ok, "StartRollouts registered: %#v", a)
	require.True(t, s.Starter.Client == coord.Client, "StartRollouts starts with another client than the workers'")
	require.Equal(t, coord.TaskQueue, s.Starter.TaskQueue)
}

// The control worker hosts only the coordinators, StartRollouts and the
// set's own records (its fence record, its acknowledgement ledger and the
// ledger's release activity): no Rollout task can take its slots.
func TestRegisterControl(t *testing.T) {
	t.Setenv(failpoint.EnvVar, "")
	acts, err := workers.NewActivities(testConfig(t))
	require.NoError(t, err)
	var r recordingRegistry
	coord := workers.NewCoordinator(nil, testConfig(t), acts)
	workers.RegisterControl(&r, coord)
	want := []string{checkpoint.CheckpointWorkflowName, checkpoint.RestoreWorkflowName, checkpoint.RecoverServerWorkflowName, checkpoint.WatchdogWorkflowName,
		set.SetFenceWorkflowName, set.AdmissionWorkflowName, set.AckLedgerWorkflowName}
	assert.Equal(t, strings.Join(want, ","), strings.Join(r.workflows, ","), "workflows registered: %v, want %v", r.workflows, want)
	require.Len(t, r.activities, 4, "activities registered: %v, want the admission's, the ledger's release, the coordinator and StartRollouts", r.activities)
	require.IsType(t, &bookkeeping.AdmissionActivities{}, r.activities[0], "activities registered: %v", r.activities)
	l, ok := r.activities[1].(*bookkeeping.LedgerActivities)
	require.True(t, ok, "ledger activities registered: %#v", r.activities[1])
	require.True(t, l.Client == coord.Client, "ledger activities registered: %#v", r.activities[1])
	require.Same(t, coord, r.activities[2], "activities registered: %v", r.activities)
	requireStarter(t, r.activities[3], coord)
	assert.Equal(t, "q-control", checkpoint.ControlTaskQueue("q"), "control queue of q")
}
