package workers

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"go.uber.org/zap"

	"github.com/turnstile-rl/turnstile/activities/bookkeeping"
	"github.com/turnstile-rl/turnstile/activities/coordinator"
	"github.com/turnstile-rl/turnstile/activities/environment"
	"github.com/turnstile-rl/turnstile/activities/model"
	"github.com/turnstile-rl/turnstile/internal/destination"
	"github.com/turnstile-rl/turnstile/internal/failpoint"
	"github.com/turnstile-rl/turnstile/internal/storage"
	"github.com/turnstile-rl/turnstile/internal/transcriptstore"
	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
	"github.com/turnstile-rl/turnstile/workflows/set"
)

// openTimeout bounds opening the transcript store at start-up.
const openTimeout = 30 * time.Second

// Registry is the part of worker.Worker that registrations need; a test can
// record them without a server.
type Registry interface {
	RegisterWorkflowWithOptions(w any, options workflow.RegisterOptions)
	RegisterActivity(a any)
}

// Worker is the pair of Temporal workers one worker process runs: the data
// plane on the rollout task queue (Rollout and its activities) and the
// control plane on checkpoint.ControlTaskQueue of it (Checkpoint, Restore
// and the coordinator activities). Each has its own pollers and task slots,
// so a checkpoint never waits for slots or polls behind rollout work.
type Worker struct {
	Data, Control worker.Worker
}

// Slots of the control worker: a few checkpoints and restores run at once,
// and each coordinator activity fans out over its whole set by itself.
const (
	ControlWorkflowSlots = 16
	ControlActivitySlots = 16
)

// New builds the data and control workers of cfg with every turnstile
// workflow and activity registered. It does not start them. With reg, the
// worker's own metrics (NewMetrics) are registered there.
func New(c client.Client, cfg Config, logger *zap.Logger, reg prometheus.Registerer) (*Worker, error) {
	opener := &storage.Opener{FileMode: cfg.FileMode}
	acts, err := NewActivitiesWith(cfg, opener)
	if err != nil {
		return nil, err
	}
	coord := NewCoordinator(c, cfg, acts)
	coord.Storage = opener
	// One cache of the sets' fence records per process: the seeds of a
	// set's rollouts share its reads.
	acts.Environment.Fences = &bookkeeping.SetFences{Client: c}
	interceptors := []interceptor.WorkerInterceptor{&applicationErrors{}}
	if reg != nil {
		interceptors = append(interceptors, &observer{m: NewMetrics(reg, acts.Store, c)})
		acts.Model.Received = registerTokensReceived(reg)
	}
	if cfg.Tuning.StickyCacheSize > 0 {
		// Process-wide in the SDK; this process's workers are all turnstile's.
		worker.SetStickyWorkflowCacheSize(cfg.Tuning.StickyCacheSize)
	}
	data := worker.New(c, cfg.TaskQueue, cfg.Tuning.options(worker.Options{Interceptors: interceptors}))
	Register(data, acts, coord)
	control := worker.New(c, checkpoint.ControlTaskQueue(cfg.TaskQueue), worker.Options{
		Interceptors:                           interceptors,
		MaxConcurrentWorkflowTaskExecutionSize: ControlWorkflowSlots,
		MaxConcurrentActivityExecutionSize:     ControlActivitySlots,
	})
	RegisterControl(control, coord)
	logger.Info("worker built",
		zap.String("task_queue", cfg.TaskQueue),
		zap.String("control_task_queue", checkpoint.ControlTaskQueue(cfg.TaskQueue)),
		zap.String("transcript_store", acts.Store.Location()),
		zap.String("env_url", cfg.EnvURL),
		zap.String("model_base_url", cfg.ModelBaseURL),
		zap.Strings("env_servers", acts.Destinations.EnvServerNames()),
		zap.Strings("model_endpoints", acts.Destinations.ModelEndpointNames()),
		zap.Stringers("allowed_env_urls", acts.Destinations.EnvURLs),
		zap.Stringers("allowed_model_urls", acts.Destinations.ModelURLs),
		zap.Stringers("allowed_participants", acts.Destinations.Participants),
		zap.Stringers("allowed_store_endpoints", acts.Destinations.StoreEndpoints),
		zap.Bool("model_api_key_set", cfg.ModelAPIKey != ""),
		zap.Bool("data_token_set", cfg.DataToken != ""),
		zap.Bool("control_token_set", cfg.ControlToken != ""),
		zap.Bool("tls_ca_set", cfg.TLS.CA != ""),
		zap.Bool("tls_client_cert_set", cfg.TLS.Cert != ""),
		zap.Bool("failpoints_armed", os.Getenv(failpoint.EnvVar) != ""),
		zap.Any("tuning", cfg.Tuning),
	)
	return &Worker{Data: data, Control: control}, nil
}

// Run starts the control worker, then runs the data worker until interrupt
// fires (or it fails), and stops both.
func (w *Worker) Run(interrupt <-chan any) error {
	if err := w.Control.Start(); err != nil {
		return fmt.Errorf("control worker: %w", err)
	}
	defer w.Control.Stop()
	return w.Data.Run(interrupt)
}

// Activities are the data plane's activities a worker hosts and what they
// share: one transcript store, one HTTP client (its TLS trust and client
// certificate) and the failpoints.
type Activities struct {
	Store       *transcriptstore.Store
	HTTPClient  *http.Client
	Failpoints  *failpoint.Set
	Model       *model.Activities
	Environment *environment.Activities
	// Destinations is where the worker's secrets may go; the coordinator
	// shares it.
	Destinations *destination.Config
}

// NewActivities builds the activities a worker hosts: the transcript store it
// opens (creating the directory), the default endpoints, and the failpoints
// armed by TURNSTILE_FAILPOINTS. A bad setting is an error here, before the
// worker polls anything.
func NewActivities(cfg Config) (*Activities, error) {
	return NewActivitiesWith(cfg, &storage.Opener{FileMode: cfg.FileMode})
}

// NewActivitiesWith is NewActivities opening an object-store transcript
// store through opener (which keeps its connection).
func NewActivitiesWith(cfg Config, opener *storage.Opener) (*Activities, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	dest, err := cfg.destinations()
	if err != nil {
		return nil, err
	}
	if opener.Allow == nil {
		opener.Allow = dest.Store
	}
	ctx, cancel := context.WithTimeout(context.Background(), openTimeout)
	defer cancel()
	store, err := transcriptstore.OpenLocation(ctx, opener, cfg.TranscriptDir)
	if err != nil {
		return nil, fmt.Errorf("open transcript store %s: %w", cfg.TranscriptDir, err)
	}
	fps, err := failpoint.FromEnv()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", failpoint.EnvVar, err)
	}
	tlsCfg, err := cfg.TLS.Config()
	if err != nil {
		return nil, err
	}
	// No client-wide timeout: a model call may legitimately take minutes;
	// the activity's context bounds each call.
	hc := httpClient(tlsCfg)
	return &Activities{
		Store: store, HTTPClient: hc, Failpoints: fps, Destinations: dest,
		Model: &model.Activities{
			Store: store, BaseURL: cfg.ModelBaseURL, APIKey: cfg.ModelAPIKey, HTTPClient: hc, Failpoints: fps, Destinations: dest,
			PrefixTokens: cfg.Prefix.Tokens, PrefixInterval: cfg.Prefix.Interval, PrefixBound: cfg.Prefix.Bound, HeartbeatThrottle: model.DefaultHeartbeatThrottle,
			MaxToolCalls: cfg.ModelLimits.MaxToolCalls, MaxAnswerBytes: cfg.ModelLimits.MaxAnswerBytes,
			MaxRetryAfter: cfg.ModelLimits.MaxRetryAfter,
		},
		Environment: &environment.Activities{
			Store: store, URL: cfg.EnvURL, HTTPClient: hc, DataToken: cfg.DataToken, ControlToken: cfg.ControlToken, Failpoints: fps,
			Destinations: dest,
		},
	}, nil
}

// MaxIdleConnsPerHost is how many idle connections a worker keeps to each
// environment server and model endpoint. Go's default is 2: with hundreds of
// rollouts calling one server at once, every call beyond two dialled a new
// connection and left it in TIME_WAIT.
const MaxIdleConnsPerHost = 512

// NewTransport is the HTTP transport of a worker's model, environment and
// control calls: Go's default transport with MaxIdleConnsPerHost kept.
func NewTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 4 * MaxIdleConnsPerHost
	t.MaxIdleConnsPerHost = MaxIdleConnsPerHost
	return t
}

// httpClient is the worker's client of environment servers, model
// endpoints and control planes: NewTransport's pool, trusting and
// presenting what tlsCfg says (nil: the system roots). It follows no
// redirect: a token goes to the destination that was admitted, never to
// one a server names in its answer (Go forwards Authorization to another
// port of the same host).
func httpClient(tlsCfg *tls.Config) *http.Client {
	t := NewTransport()
	if tlsCfg != nil {
		t.TLSClientConfig = tlsCfg
	}
	return &http.Client{Transport: t, CheckRedirect: noRedirects}
}

// noRedirects answers a redirect with the 3xx response itself, which the
// callers report as an error.
func noRedirects(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// NewCoordinator builds the activities of the Checkpoint and Restore
// workflows; they share the rollout activities' transcript store and
// failpoints.
func NewCoordinator(c client.Client, cfg Config, acts *Activities) *coordinator.Coordinator {
	return &coordinator.Coordinator{
		Client:       c,
		Store:        acts.Store,
		ControlToken: cfg.ControlToken,
		Destinations: acts.Destinations,
		Checkpoints:  cfg.Checkpoints,
		// The rollout activities' client: the same trust and client
		// certificate, and no client-wide timeout (a prepare waits up to
		// its absolute deadline, which the activity's context bounds).
		HTTPClient: acts.HTTPClient,
		TaskQueue:  cfg.TaskQueue,
		Failpoints: acts.Failpoints,
		// Zero values take the coordinator's defaults.
		Liveness:          cfg.Liveness.Probe,
		AbortResumeWindow: cfg.Liveness.AbortResumeWindow,
	}
}

// Register registers the workflows and activities of the data worker on r.
// The group activities share the coordinator's Temporal client. The
// coordinator workflows and activities, and StartRollouts, are registered
// here too, so a Checkpoint or Restore started on the rollout task queue (by
// an older client, or a Temporal CLI command naming that queue) still runs.
func Register(r Registry, acts *Activities, coord *coordinator.Coordinator) {
	r.RegisterWorkflowWithOptions(rollout.Rollout, workflow.RegisterOptions{Name: rollout.WorkflowName})
	r.RegisterWorkflowWithOptions(rollout.GroupLedger, workflow.RegisterOptions{Name: rollout.GroupWorkflowName})
	// The structs' methods become the activities, named after the methods
	// (rollout.CallModelName; StartEnvironmentName, OperateEnvironmentName, …;
	// ReportToGroup, CancelGroupMembers; the coordinator's
	// PrepareParticipants, ParkMembers, …).
	r.RegisterActivity(acts.Model)
	r.RegisterActivity(acts.Environment)
	r.RegisterActivity(&bookkeeping.GroupActivities{Client: coord.Client})
	RegisterControl(r, coord)
}

// RegisterControl registers the Checkpoint, Restore, RecoverServer and
// Watchdog workflows, the coordinator activities (PrepareParticipants, ParkMembers,
// …) and StartRollouts on r, and a set's own records: its fence record and
// its acknowledgement ledger, with the ledger's ReleaseAcknowledged
// activity. StartRollouts starts with the coordinator's client, the one
// this process's workers are built with, so its starts on the rollout task
// queue are eager.
func RegisterControl(r Registry, coord *coordinator.Coordinator) {
	r.RegisterWorkflowWithOptions(checkpoint.Checkpoint, workflow.RegisterOptions{Name: checkpoint.CheckpointWorkflowName})
	r.RegisterWorkflowWithOptions(checkpoint.Restore, workflow.RegisterOptions{Name: checkpoint.RestoreWorkflowName})
	r.RegisterWorkflowWithOptions(checkpoint.RecoverServer, workflow.RegisterOptions{Name: checkpoint.RecoverServerWorkflowName})
	// A set's watchdog (automatic recovery), with its ProbeParticipants
	// activity among the coordinator's.
	r.RegisterWorkflowWithOptions(checkpoint.Watchdog, workflow.RegisterOptions{Name: checkpoint.WatchdogWorkflowName})
	// A set's fence record, started by a restore's FenceSet step on the
	// control queue.
	r.RegisterWorkflowWithOptions(set.SetFenceWorkflow, workflow.RegisterOptions{Name: set.SetFenceWorkflowName})
	// A set's admission runs on the control queue: its starts and
	// notices never wait behind the rollouts' backlog. Its activities
	// (StoreAdmissionBatch, AdmitRollouts, ReconcileAdmission) and the
	// rollouts' NotifyAdmission local activity are registered on both
	// workers.
	r.RegisterWorkflowWithOptions(set.SetAdmission, workflow.RegisterOptions{Name: set.AdmissionWorkflowName})
	r.RegisterActivity(newAdmissionActivities(coord))
	// A set's acknowledgement ledger, started on the control queue by the
	// first acknowledgement (or a checkpoint's hold of its releases).
	r.RegisterWorkflowWithOptions(set.AckLedger, workflow.RegisterOptions{Name: set.AckLedgerWorkflowName})
	r.RegisterActivity(&bookkeeping.LedgerActivities{Client: coord.Client, Failpoints: coord.Failpoints})
	r.RegisterActivity(coord)
	r.RegisterActivity(&bookkeeping.StartActivities{Starter: &bookkeeping.EagerStarter{Client: coord.Client, TaskQueue: coord.TaskQueue}})
}

// newAdmissionActivities are the admission's activities over the
// coordinator's Temporal client and transcript store.
func newAdmissionActivities(coord *coordinator.Coordinator) *bookkeeping.AdmissionActivities {
	a := &bookkeeping.AdmissionActivities{Client: coord.Client}
	if coord.Store != nil {
		a.Store = coord.Store
	}
	return a
}
