package coordinator_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	querypb "go.temporal.io/api/query/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/envs/counter"
	"github.com/turnstile-rl/turnstile/internal/storage"
	"github.com/turnstile-rl/turnstile/participants/envserver"
	"github.com/turnstile-rl/turnstile/participants/protocol"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// fakeRun is the current run of one rollout workflow in fakeTemporal.
type fakeRun struct {
	set     string
	attempt int64
	running bool
	runID   string
	// hidden: visibility has not indexed it yet; listedRunning: visibility
	// still lists it running although it closed.
	hidden, listedRunning bool
	// record is what the park update answers.
	record []byte
	input  json.RawMessage // the input it was started with (restores)
	// started is the run's start time (zero: unset); phase its
	// RolloutPhase (empty: unset).
	started time.Time
	phase   string
	// refuse: the update validator rejects every update with this message.
	refuse string
	// heldFor is the checkpoint a park signal holds it for (its
	// CheckpointId search attribute), until a resume signal.
	heldFor string
	// ignoreParks: how many park signals it ignores first, as a restored
	// run still held for its restore does.
	ignoreParks int
}

// fakeTemporal is the part of a Temporal client the coordinator uses, over
// an in-memory table of rollout runs. Other methods panic (nil embedded).
type fakeTemporal struct {
	client.Client
	mu         sync.Mutex
	runs       map[string]*fakeRun // by workflow ID
	updates    map[string]int      // "workflowID update updateID" → calls
	starts     []client.StartWorkflowOptions
	terminated []string
	lists      int
}

func newFakeTemporal() *fakeTemporal {
	return &fakeTemporal{runs: map[string]*fakeRun{}, updates: map[string]int{}}
}

func (f *fakeTemporal) add(id string, r *fakeRun) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.runID == "" {
		r.runID = fmt.Sprintf("run-%s-%d", id, r.attempt)
	}
	f.runs["rollout/"+id] = r
}

func payload(v any) *commonpb.Payload {
	p, err := converter.GetDefaultDataConverter().ToPayload(v)
	if err != nil {
		panic(err)
	}
	return p
}

func (f *fakeTemporal) info(wid string, r *fakeRun, listing bool) *workflowpb.WorkflowExecutionInfo {
	status := enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED
	if r.running || (listing && r.listedRunning) {
		status = enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
	}
	var started *timestamppb.Timestamp
	if !r.started.IsZero() {
		started = timestamppb.New(r.started)
	}
	sa := map[string]*commonpb.Payload{
		"RolloutSet": payload(r.set), "RolloutAttempt": payload(r.attempt), "RolloutPhase": payload(r.phase),
	}
	if r.heldFor != "" {
		sa["CheckpointId"] = payload(r.heldFor)
	}
	return &workflowpb.WorkflowExecutionInfo{
		Execution:        &commonpb.WorkflowExecution{WorkflowId: wid, RunId: r.runID},
		Status:           status,
		StartTime:        started,
		SearchAttributes: &commonpb.SearchAttributes{IndexedFields: sa},
	}
}

// ListWorkflow understands the two queries the coordinator sends, and
// answers two executions per page, so paging is exercised.
func (f *fakeTemporal) ListWorkflow(_ context.Context, req *workflowservice.ListWorkflowExecutionsRequest) (*workflowservice.ListWorkflowExecutionsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lists++
	var all []*workflowpb.WorkflowExecutionInfo
	ids := make([]string, 0, len(f.runs))
	for id := range f.runs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		r := f.runs[id]
		info := f.info(id, r, true)
		if r.hidden || !strings.Contains(req.Query, strconv.Quote(r.set)) {
			continue
		}
		if strings.Contains(req.Query, "Running") && info.Status != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
			continue
		}
		all = append(all, info)
	}
	start := 0
	if len(req.NextPageToken) > 0 {
		start, _ = strconv.Atoi(string(req.NextPageToken))
	}
	end := min(start+2, len(all))
	resp := &workflowservice.ListWorkflowExecutionsResponse{Executions: all[start:end]}
	if end < len(all) {
		resp.NextPageToken = []byte(strconv.Itoa(end))
	}
	return resp, nil
}

func (f *fakeTemporal) DescribeWorkflow(_ context.Context, wid, _ string) (*client.WorkflowExecutionDescription, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.runs[wid]
	if !ok {
		return nil, serviceerror.NewNotFound("workflow not found for ID: " + wid)
	}
	return &client.WorkflowExecutionDescription{
		RawResponse: &workflowservice.DescribeWorkflowExecutionResponse{WorkflowExecutionInfo: f.info(wid, r, false)},
	}, nil
}

type fakeHandle struct {
	wid, uid string
	value    []byte
}

func (h fakeHandle) WorkflowID() string { return h.wid }
func (h fakeHandle) RunID() string      { return "" }
func (h fakeHandle) UpdateID() string   { return h.uid }
func (h fakeHandle) Get(_ context.Context, ptr any) error {
	if ptr == nil || h.value == nil {
		return nil
	}
	return json.Unmarshal(h.value, ptr)
}

func (f *fakeTemporal) UpdateWorkflow(_ context.Context, o client.UpdateWorkflowOptions) (client.WorkflowUpdateHandle, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.updates[o.WorkflowID+" "+o.UpdateName+" "+o.UpdateID]++
	r, ok := f.runs[o.WorkflowID]
	if !ok {
		return nil, serviceerror.NewNotFound("workflow not found for ID: " + o.WorkflowID)
	}
	if !r.running {
		return nil, serviceerror.NewNotFound("workflow execution already completed")
	}
	if r.refuse != "" {
		return nil, temporal.NewApplicationError(r.refuse, "")
	}
	h := fakeHandle{wid: o.WorkflowID, uid: o.UpdateID}
	if o.UpdateName == "park" {
		h.value = r.record
	}
	return h, nil
}

// SignalWorkflow counts park and resume signals as UpdateWorkflow counts
// updates ("workflowID signal checkpointID"); a run that refuses ignores
// them, as a rollout held for another checkpoint does.
func (f *fakeTemporal) SignalWorkflow(_ context.Context, wid, _, name string, arg any) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	var ck string
	switch a := arg.(type) {
	case rollout.ParkRequest:
		ck = a.CheckpointID
	case rollout.ResumeRequest:
		ck = a.CheckpointID
	default:
		return fmt.Errorf("fake: unexpected signal %s with a %T", name, arg)
	}
	f.updates[wid+" "+name+" "+ck]++
	r, ok := f.runs[wid]
	if !ok {
		return serviceerror.NewNotFound("workflow not found for ID: " + wid)
	}
	if !r.running {
		return serviceerror.NewNotFound("workflow execution already completed")
	}
	switch {
	case r.refuse != "":
	case name == rollout.SignalPark && r.ignoreParks > 0:
		r.ignoreParks--
	case name == rollout.SignalPark:
		r.heldFor = ck
	case name == rollout.SignalResume && r.heldFor == ck:
		r.heldFor = ""
	}
	return nil
}

// QueryWorkflowWithOptions answers the park record query: the run's record,
// or the refusal of a run held for another checkpoint.
func (f *fakeTemporal) QueryWorkflowWithOptions(_ context.Context, req *client.QueryWorkflowWithOptionsRequest) (*client.QueryWorkflowWithOptionsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.runs[req.WorkflowID]
	switch {
	case req.QueryType != rollout.QueryParkRecord:
		return nil, fmt.Errorf("fake: unexpected query %s", req.QueryType)
	case !ok:
		return nil, serviceerror.NewNotFound("workflow not found for ID: " + req.WorkflowID)
	case !r.running:
		return &client.QueryWorkflowWithOptionsResponse{QueryRejected: &querypb.QueryRejected{Status: enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED}}, nil
	case r.refuse != "":
		return nil, serviceerror.NewQueryFailed(rollout.HeldForOther + ": " + r.refuse)
	case len(req.Args) == 1 && r.heldFor != req.Args[0]:
		return nil, serviceerror.NewQueryFailed(rollout.NotParkedYet)
	}
	return &client.QueryWorkflowWithOptionsResponse{QueryResult: encodedValue{r.record}}, nil
}

// encodedValue is a query result holding JSON.
type encodedValue struct{ data []byte }

func (v encodedValue) HasValue() bool { return v.data != nil }
func (v encodedValue) Get(ptr any) error {
	return json.Unmarshal(v.data, ptr)
}

func (f *fakeTemporal) ExecuteWorkflow(_ context.Context, o client.StartWorkflowOptions, wf any, args ...any) (client.WorkflowRun, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r, ok := f.runs[o.ID]; ok && r.running {
		return nil, serviceerror.NewWorkflowExecutionAlreadyStarted("already started", "", r.runID)
	}
	if wf != "Rollout" || len(args) != 1 {
		return nil, fmt.Errorf("fake: unexpected start of %v with %d args", wf, len(args))
	}
	head, ok := args[0].(rollout.Input)
	if !ok {
		return nil, fmt.Errorf("fake: start of Rollout with a %T, not a rollout.Input", args[0])
	}
	in, err := json.Marshal(head)
	if err != nil {
		return nil, err
	}
	f.starts = append(f.starts, o)
	f.runs[o.ID] = &fakeRun{set: head.Set, attempt: int64(head.Attempt), running: true, runID: fmt.Sprintf("%s-a%d", o.ID, head.Attempt), input: in}
	return nil, nil
}

func (f *fakeTemporal) TerminateWorkflow(_ context.Context, wid, runID, reason string, _ ...any) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.runs[wid]
	if !ok || r.runID != runID || !r.running {
		return serviceerror.NewNotFound("no such running run")
	}
	r.running = false
	f.terminated = append(f.terminated, wid+": "+reason)
	return nil
}

const (
	testToken     = "test-token"
	testDataToken = "test-data-token"
)

// envServer is a real environment server hosting the counter, with its
// control plane on.
type envServer struct {
	url string
	// kill stops the server: from then on nothing listens at url.
	kill func()
	c    *protocol.Client
	cc   *protocol.ControlClient
}

func newEnvServer(t *testing.T, name string) *envServer {
	t.Helper()
	return newEnvServerWith(t, name, nil)
}

// newEnvServerWith is newEnvServer with an opener for object-store
// checkpoint locations.
func newEnvServerWith(t *testing.T, name string, opener *storage.Opener) *envServer {
	t.Helper()
	srv, err := envserver.NewServer(envserver.ServerConfig{
		Envs: []envs.Environment{counter.New()}, Name: name, ControlToken: testToken, DataToken: testDataToken,
		Storage: opener,
	})
	require.NoError(t, err)
	hs := httptest.NewUnstartedServer(srv)
	hs.Config.ErrorLog = log.New(io.Discard, "", 0)
	hs.Start()
	t.Cleanup(hs.Close)
	return &envServer{url: hs.URL, kill: hs.Close, c: protocol.NewDataClient(hs.URL, testDataToken, hs.Client()), cc: protocol.NewControlClient(hs.URL, testToken, hs.Client())}
}

// start starts attempt of rollout; an attempt above 0 is installed through
// the control plane first, as a worker's start-over does.
func (e *envServer) start(t *testing.T, rollout string, attempt int) {
	t.Helper()
	if attempt > 0 {
		_, err := e.cc.Authorise(context.Background(), rollout, attempt)
		require.NoError(t, err, "authorise %s attempt %d", rollout, attempt)
	}
	_, err := e.c.Start(context.Background(), protocol.StartRequest{
		Identity: protocol.Identity{RolloutID: rollout, Attempt: attempt, RequestID: protocol.SeedRequestID(rollout)},
		Env:      counter.Name, Seed: 1, Task: json.RawMessage(`{"target":9}`),
	})
	require.NoError(t, err, "start %s", rollout)
}

func (e *envServer) inc(t *testing.T, rollout string, attempt, turn int, rev int64) {
	t.Helper()
	_, err := e.c.Operate(context.Background(), protocol.OperateRequest{
		Identity:         protocol.Identity{RolloutID: rollout, Attempt: attempt, RequestID: protocol.OperateRequestID(rollout, turn, 0)},
		ExpectedRevision: rev, Tool: counter.ToolIncrement, Arguments: json.RawMessage(`{"amount":1}`),
	})
	require.NoError(t, err, "operate %s", rollout)
}

func (e *envServer) verify(t *testing.T, rollout string, attempt int, rev int64) {
	t.Helper()
	_, err := e.c.Verify(context.Background(), protocol.VerifyRequest{
		Identity:         protocol.Identity{RolloutID: rollout, Attempt: attempt, RequestID: protocol.VerifyRequestID(rollout)},
		ExpectedRevision: rev,
	})
	require.NoError(t, err, "verify %s", rollout)
}

func (e *envServer) status(t *testing.T) protocol.ControlStatus {
	t.Helper()
	st, err := e.cc.Status(context.Background())
	require.NoError(t, err)
	return st
}

// fakeHistory is a history of one event: the run's start, with its input.
type fakeHistory struct {
	event *historypb.HistoryEvent
}

func (h *fakeHistory) HasNext() bool { return h.event != nil }
func (h *fakeHistory) Next() (*historypb.HistoryEvent, error) {
	ev := h.event
	h.event = nil
	return ev, nil
}

// GetWorkflowHistory answers the first event of a run: its start, with the
// input it was started with.
func (f *fakeTemporal) GetWorkflowHistory(_ context.Context, wid, _ string, _ bool, _ enumspb.HistoryEventFilterType) client.HistoryEventIterator {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.runs[wid]
	if !ok {
		return &fakeHistory{}
	}
	var in map[string]any // JSON, as a start input travels
	if r.input != nil {
		if err := json.Unmarshal(r.input, &in); err != nil {
			panic(err)
		}
	}
	return &fakeHistory{event: &historypb.HistoryEvent{
		EventType: enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED,
		Attributes: &historypb.HistoryEvent_WorkflowExecutionStartedEventAttributes{WorkflowExecutionStartedEventAttributes: &historypb.WorkflowExecutionStartedEventAttributes{
			Input: &commonpb.Payloads{Payloads: []*commonpb.Payload{payload(in)}},
		}},
	}}
}
