package coordinator_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
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
	"go.temporal.io/sdk/temporal"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/envs/counter"
	"github.com/turnstile-rl/turnstile/internal/storage"
	"github.com/turnstile-rl/turnstile/internal/testsupport"
	"github.com/turnstile-rl/turnstile/internal/testsupport/temporalfake"
	"github.com/turnstile-rl/turnstile/participants/envserver"
	"github.com/turnstile-rl/turnstile/participants/protocol"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
	"github.com/turnstile-rl/turnstile/workflows/set"
)

// runRow is the current run of one rollout workflow in rolloutTable.
type runRow struct {
	set     string
	attempt int64
	running bool
	// terminated: the run was ended by TerminateWorkflow (closed, not
	// completed).
	terminated bool
	runID      string
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

// rolloutTable is the Temporal the coordinator talks to: a
// temporalfake.Client answering the calls the coordinator makes from an
// in-memory table of rollout runs.
type rolloutTable struct {
	*temporalfake.Client
	mu         sync.Mutex
	runs       map[string]*runRow // by workflow ID
	updates    map[string]int     // "workflowID update updateID" → calls
	starts     []client.StartWorkflowOptions
	terminated []string
	// acks is the set's acknowledgement ledger, once something started it.
	acks *ackLedgerRow
}

// ackLedgerRow is a set's acknowledgement ledger as the coordinator sees
// it: its pending receipts, its holds, and what it was sent.
type ackLedgerRow struct {
	pending map[string]set.PendingAck
	holds   map[string]int64 // checkpoint → the sequence number of its cut
	seq     int64
	calls   []string
	forgot  []set.ForgetAcks
}

// ack records receipt rc in the ledger, as an acknowledgement does.
func (f *rolloutTable) ack(rc rollout.Receipt, at time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.acks == nil {
		f.acks = &ackLedgerRow{pending: map[string]set.PendingAck{}, holds: map[string]int64{}}
	}
	f.acks.seq++
	f.acks.pending[rc.RolloutID] = set.PendingAck{Receipt: rc, Seq: f.acks.seq, At: at}
}

func newRolloutTable() *rolloutTable {
	f := &rolloutTable{runs: map[string]*runRow{}, updates: map[string]int{}}
	// Two executions a page, so paging is exercised.
	f.Client = &temporalfake.Client{
		List: f.list, PageSize: 2, Describe: f.describe, Update: f.update, Signal: f.signal,
		QueryWithOptions: f.query, Execute: f.start, Terminate: f.terminate, History: f.history,
		UpdateWithStart: f.updateWithStart,
	}
	return f
}

// updateWithStart answers a hold of the ledger's releases, starting the
// ledger if it does not run.
func (f *rolloutTable) updateWithStart(o client.UpdateWithStartWorkflowOptions) (client.WorkflowUpdateHandle, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	h, ok := o.UpdateOptions.Args[0].(set.ReleaseHold)
	if !ok || o.UpdateOptions.UpdateName != set.UpdateHoldReleases {
		return nil, fmt.Errorf("fake: unexpected update-with-start %s", o.UpdateOptions.UpdateName)
	}
	if f.acks == nil {
		f.acks = &ackLedgerRow{pending: map[string]set.PendingAck{}, holds: map[string]int64{}}
	}
	f.acks.calls = append(f.acks.calls, "hold "+h.CheckpointID)
	seq, held := f.acks.holds[h.CheckpointID]
	if !held {
		seq = f.acks.seq
		f.acks.holds[h.CheckpointID] = seq
	}
	return temporalfake.UpdateHandle{Value: set.ReleaseHoldResult{Seq: seq}}, nil
}

// ledgerUpdate answers the updates of the running ledger: a hold's end, a
// restore's forgetting.
func (f *rolloutTable) ledgerUpdate(o client.UpdateWorkflowOptions) (client.WorkflowUpdateHandle, error) {
	if f.acks == nil {
		return nil, serviceerror.NewNotFound("workflow not found for ID: " + o.WorkflowID)
	}
	switch a := o.Args[0].(type) {
	case set.EndHold:
		f.acks.calls = append(f.acks.calls, "end-hold "+a.CheckpointID)
		delete(f.acks.holds, a.CheckpointID)
		return temporalfake.UpdateHandle{}, nil
	case set.ForgetAcks:
		f.acks.forgot = append(f.acks.forgot, a)
		names := map[string]bool{}
		for _, id := range a.RolloutIDs {
			names[id] = true
		}
		n := 0
		for id, p := range f.acks.pending {
			if names[id] && p.At.Before(a.RecordedBefore) {
				delete(f.acks.pending, id)
				n++
			}
		}
		return temporalfake.UpdateHandle{Value: set.ForgetAcksResult{Forgotten: n}}, nil
	}
	return nil, fmt.Errorf("fake: unexpected ledger update %s", o.UpdateName)
}

// query answers the ledger's query of acknowledged receipts and the
// rollouts' park record query.
func (f *rolloutTable) query(req *client.QueryWorkflowWithOptionsRequest) (*client.QueryWorkflowWithOptionsResponse, error) {
	if req.QueryType != set.QueryAcked {
		return f.queryParkRecord(req)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.acks == nil {
		return nil, serviceerror.NewNotFound("workflow not found for ID: " + req.WorkflowID)
	}
	var out []set.PendingAck
	for _, id := range req.Args[0].([]string) {
		if p, ok := f.acks.pending[id]; ok {
			out = append(out, p)
		}
	}
	return &client.QueryWorkflowWithOptionsResponse{QueryResult: temporalfake.Value{V: out}}, nil
}

func (f *rolloutTable) add(id string, r *runRow) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.runID == "" {
		r.runID = fmt.Sprintf("run-%s-%d", id, r.attempt)
	}
	f.runs["rollout/"+id] = r
}

func (f *rolloutTable) info(wid string, r *runRow, listing bool) *workflowpb.WorkflowExecutionInfo {
	status := enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED
	switch {
	case r.running || (listing && r.listedRunning):
		status = enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
	case r.terminated:
		status = enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED
	}
	var started *timestamppb.Timestamp
	if !r.started.IsZero() {
		started = timestamppb.New(r.started)
	}
	sa := map[string]*commonpb.Payload{
		"RolloutSet": temporalfake.Payload(r.set), "RolloutAttempt": temporalfake.Payload(r.attempt), "RolloutPhase": temporalfake.Payload(r.phase),
	}
	if r.heldFor != "" {
		sa["CheckpointId"] = temporalfake.Payload(r.heldFor)
	}
	return &workflowpb.WorkflowExecutionInfo{
		Execution:        &commonpb.WorkflowExecution{WorkflowId: wid, RunId: r.runID},
		Status:           status,
		StartTime:        started,
		SearchAttributes: &commonpb.SearchAttributes{IndexedFields: sa},
	}
}

// list understands the two queries the coordinator sends: a set's runs,
// and its running ones.
func (f *rolloutTable) list(query string) ([]*workflowpb.WorkflowExecutionInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var all []*workflowpb.WorkflowExecutionInfo
	ids := make([]string, 0, len(f.runs))
	for id := range f.runs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		r := f.runs[id]
		info := f.info(id, r, true)
		if r.hidden || !strings.Contains(query, strconv.Quote(r.set)) {
			continue
		}
		if strings.Contains(query, "Running") && info.Status != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
			continue
		}
		all = append(all, info)
	}
	return all, nil
}

func (f *rolloutTable) describe(wid, _ string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.runs[wid]
	if !ok {
		return nil, serviceerror.NewNotFound("workflow not found for ID: " + wid)
	}
	return &workflowservice.DescribeWorkflowExecutionResponse{WorkflowExecutionInfo: f.info(wid, r, false)}, nil
}

// update answers a park update with the run's record.
func (f *rolloutTable) update(o client.UpdateWorkflowOptions) (client.WorkflowUpdateHandle, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if strings.HasPrefix(o.WorkflowID, "acks/") {
		return f.ledgerUpdate(o)
	}
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
	h := temporalfake.UpdateHandle{ID: o.WorkflowID, Update: o.UpdateID}
	if o.UpdateName == "park" && r.record != nil {
		h.Value = json.RawMessage(r.record)
	}
	return h, nil
}

// signal counts park and resume signals as update counts updates
// ("workflowID signal checkpointID"); a run that refuses ignores them, as a
// rollout held for another checkpoint does.
func (f *rolloutTable) signal(wid, _, name string, arg any) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	var ck string
	switch a := arg.(type) {
	case rollout.ParkRequest:
		ck = a.CheckpointID
	case rollout.ResumeRequest:
		ck = a.CheckpointID
	case set.ReleaseRequest: // a set's admission: none here unless a test adds its run
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

// queryParkRecord answers the park record query: the run's record, or the
// refusal of a run held for another checkpoint.
func (f *rolloutTable) queryParkRecord(req *client.QueryWorkflowWithOptionsRequest) (*client.QueryWorkflowWithOptionsResponse, error) {
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
	var v temporalfake.Value
	if r.record != nil {
		v.V = json.RawMessage(r.record)
	}
	return &client.QueryWorkflowWithOptionsResponse{QueryResult: v}, nil
}

// start starts a Rollout run, unless one is running.
func (f *rolloutTable) start(o client.StartWorkflowOptions, wf any, args ...any) (client.WorkflowRun, error) {
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
	f.runs[o.ID] = &runRow{set: head.Set, attempt: int64(head.Attempt), running: true, runID: fmt.Sprintf("%s-a%d", o.ID, head.Attempt), input: in}
	return nil, nil
}

func (f *rolloutTable) terminate(wid, runID, reason string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.runs[wid]
	if !ok || r.runID != runID || !r.running {
		return serviceerror.NewNotFound("no such running run")
	}
	r.running, r.terminated = false, true
	f.terminated = append(f.terminated, wid+": "+reason)
	return nil
}

// history is the first event of a run: its start, with the input it was
// started with.
func (f *rolloutTable) history(wid, _ string) client.HistoryEventIterator {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.runs[wid]
	if !ok {
		return &temporalfake.History{}
	}
	var in map[string]any // JSON, as a start input travels
	if r.input != nil {
		if err := json.Unmarshal(r.input, &in); err != nil {
			panic(err)
		}
	}
	return &temporalfake.History{Events: []*historypb.HistoryEvent{{
		EventType: enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED,
		Attributes: &historypb.HistoryEvent_WorkflowExecutionStartedEventAttributes{WorkflowExecutionStartedEventAttributes: &historypb.WorkflowExecutionStartedEventAttributes{
			Input: &commonpb.Payloads{Payloads: []*commonpb.Payload{temporalfake.Payload(in)}},
		}},
	}}}
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
	// hang makes it hang (hang.on) until hang.heal.
	hang *hangSwitch
	c    *protocol.Client
	cc   *protocol.ControlClient
	// opener opens the object-store locations it commits to (nil: none).
	opener *storage.Opener
}

func newEnvServer(t *testing.T, name string) *envServer {
	t.Helper()
	return newEnvServerWith(t, name, nil)
}

// newEnvServerWith is newEnvServer with an opener for object-store
// checkpoint locations.
func newEnvServerWith(t *testing.T, name string, opener *storage.Opener, edits ...func(*envserver.ServerConfig)) *envServer {
	t.Helper()
	return newEnvServerWrapped(t, name, opener, nil, edits...)
}

// newEnvServerWrapped is newEnvServerWith served through wrap (nil: as it
// is), so a test can make the participant behave as another implementation
// of the protocol would.
func newEnvServerWrapped(t *testing.T, name string, opener *storage.Opener, wrap func(http.Handler) http.Handler, edits ...func(*envserver.ServerConfig)) *envServer {
	t.Helper()
	cfg := envserver.ServerConfig{
		Envs: []envs.Environment{counter.New()}, Name: name, ControlToken: testToken, DataToken: testDataToken,
		Storage: opener,
	}
	for _, edit := range edits {
		edit(&cfg)
	}
	srv, err := envserver.NewServer(cfg)
	require.NoError(t, err)
	var h http.Handler = srv
	if wrap != nil {
		h = wrap(srv)
	}
	// The hang switch is outermost: a hung server answers nothing, whatever
	// the test wraps around it.
	hang := &hangSwitch{}
	hs := testsupport.QuietServer(hang.wrap(h))
	t.Cleanup(hs.Close)
	t.Cleanup(hang.heal) // first: a hung request must end for Close to return
	return &envServer{url: hs.URL, kill: hs.Close, hang: hang, c: protocol.NewDataClient(hs.URL, testDataToken, hs.Client()),
		cc: protocol.NewControlClient(hs.URL, testToken, hs.Client()), opener: opener}
}

// hangSwitch makes a server hang, not refuse: while on, every request
// (its health route too) waits, answering nothing, until heal or until
// its client gives up.
type hangSwitch struct {
	mu   sync.Mutex
	hung chan struct{} // nil: not hung; closed by heal
}

func (h *hangSwitch) on() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.hung == nil {
		h.hung = make(chan struct{})
	}
}

func (h *hangSwitch) heal() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.hung != nil {
		close(h.hung)
		h.hung = nil
	}
}

func (h *hangSwitch) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		hung := h.hung
		h.mu.Unlock()
		if hung != nil {
			select {
			case <-hung:
			case <-r.Context().Done():
				return
			}
		}
		next.ServeHTTP(w, r)
	})
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
