package workers

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"go.uber.org/zap"

	"github.com/turnstile-rl/turnstile/checkpoint"
	"github.com/turnstile-rl/turnstile/checkpoint/coordinator"
	"github.com/turnstile-rl/turnstile/failpoint"
	"github.com/turnstile-rl/turnstile/rollout"
	"github.com/turnstile-rl/turnstile/storage"
	"github.com/turnstile-rl/turnstile/transcript"
)

// openTimeout bounds opening the transcript store at start-up.
const openTimeout = 30 * time.Second

// Registry is the part of worker.Worker that registrations need; a test can
// record them without a server.
type Registry interface {
	RegisterWorkflowWithOptions(w any, options workflow.RegisterOptions)
	RegisterActivity(a any)
}

// New builds a worker on cfg.TaskQueue with every turnstile workflow and
// activity registered. It does not start it.
func New(c client.Client, cfg Config, logger *zap.Logger) (worker.Worker, error) {
	opener := &storage.Opener{}
	acts, err := NewActivitiesWith(cfg, opener)
	if err != nil {
		return nil, err
	}
	w := worker.New(c, cfg.TaskQueue, worker.Options{Interceptors: []interceptor.WorkerInterceptor{&applicationErrors{}}})
	coord := NewCoordinator(c, cfg, acts)
	coord.Storage = opener
	Register(w, acts, coord)
	logger.Info("worker built",
		zap.String("task_queue", cfg.TaskQueue),
		zap.String("transcript_store", acts.Store.Location()),
		zap.String("env_url", cfg.EnvURL),
		zap.String("model_base_url", cfg.ModelBaseURL),
		zap.Bool("model_api_key_set", cfg.ModelAPIKey != ""),
		zap.Bool("failpoints_armed", os.Getenv(failpoint.EnvVar) != ""),
	)
	return w, nil
}

// NewActivities builds the activities a worker hosts: the transcript store it
// opens (creating the directory), the default endpoints, and the failpoints
// armed by TURNSTILE_FAILPOINTS. A bad setting is an error here, before the
// worker polls anything.
func NewActivities(cfg Config) (*rollout.Activities, error) {
	return NewActivitiesWith(cfg, &storage.Opener{})
}

// NewActivitiesWith is NewActivities opening an object-store transcript
// store through opener (which keeps its connection).
func NewActivitiesWith(cfg Config, opener *storage.Opener) (*rollout.Activities, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), openTimeout)
	defer cancel()
	store, err := transcript.OpenLocation(ctx, opener, cfg.TranscriptDir)
	if err != nil {
		return nil, fmt.Errorf("open transcript store %s: %w", cfg.TranscriptDir, err)
	}
	fps, err := failpoint.FromEnv()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", failpoint.EnvVar, err)
	}
	return &rollout.Activities{
		Store:        store,
		EnvURL:       cfg.EnvURL,
		ModelBaseURL: cfg.ModelBaseURL,
		ModelAPIKey:  cfg.ModelAPIKey,
		// No client-wide timeout: a model call may legitimately take
		// minutes; the activity's context bounds each call.
		HTTPClient: &http.Client{},
		Failpoints: fps,
	}, nil
}

// NewCoordinator builds the activities of the Checkpoint and Restore
// workflows; they share the rollout activities' transcript store and
// failpoints.
func NewCoordinator(c client.Client, cfg Config, acts *rollout.Activities) *coordinator.Coordinator {
	return &coordinator.Coordinator{
		Client:       c,
		Store:        acts.Store,
		ControlToken: cfg.ControlToken,
		// No client-wide timeout: a prepare waits up to its absolute
		// deadline, which the activity's context bounds.
		HTTPClient: &http.Client{},
		TaskQueue:  cfg.TaskQueue,
		Failpoints: acts.Failpoints,
	}
}

// Register registers the workflows and activities on r.
func Register(r Registry, acts *rollout.Activities, coord *coordinator.Coordinator) {
	r.RegisterWorkflowWithOptions(rollout.Rollout, workflow.RegisterOptions{Name: rollout.WorkflowName})
	r.RegisterWorkflowWithOptions(checkpoint.Checkpoint, workflow.RegisterOptions{Name: checkpoint.CheckpointWorkflowName})
	r.RegisterWorkflowWithOptions(checkpoint.Restore, workflow.RegisterOptions{Name: checkpoint.RestoreWorkflowName})
	// The structs' methods become the activities, named after the methods
	// (rollout.StartEnvironmentName, CallModelName, …; the coordinator's
	// PrepareParticipants, ParkMembers, …).
	r.RegisterActivity(acts)
	r.RegisterActivity(coord)
}
