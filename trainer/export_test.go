package trainer

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	tclient "go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/turnstile-rl/turnstile/internal/schemacheck"
	"github.com/turnstile-rl/turnstile/internal/testsupport/temporalfake"
	"github.com/turnstile-rl/turnstile/internal/transcript"
	"github.com/turnstile-rl/turnstile/internal/transcriptstore"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
	"github.com/turnstile-rl/turnstile/workflows/set"
)

// trajectorySchema compiles the published schema of an export line.
func trajectorySchema(t *testing.T) *schemacheck.Schema {
	t.Helper()
	doc, err := os.ReadFile("../docs/trajectory.schema.json")
	require.NoError(t, err)
	s, err := schemacheck.Compile(doc)
	require.NoError(t, err)
	return s
}

// storedRollout writes a two-turn tool conversation: the first call with
// tokens, the second without a generation record.
func storedRollout(t *testing.T, store *transcriptstore.Store) transcript.Digest {
	t.Helper()
	ctx := context.Background()
	prompt := []int64{1, 2, 3}
	gen := transcript.Generation{
		Tokens: transcript.TokensPresent, PromptTokenIDs: prompt, GenerationTokenIDs: []int64{4, 5},
		GenerationLogProbs: []float64{-0.5, -0.25}, PromptDigest: transcript.TokenDigest(prompt),
		SequenceDigest: transcript.TokenDigest(prompt, []int64{4, 5}), FinishReason: "tool_calls",
		ReasoningContent: "count up", PolicyVersion: "v3", Sampling: json.RawMessage(`{"temperature":0.5}`),
		PrefixBreak: true, PrefixBreakReason: "parent call has no generation record",
	}
	g, err := store.PutGeneration(ctx, gen)
	require.NoError(t, err)
	head, err := store.AppendAll(ctx, "",
		transcript.Item{Role: "system", Content: "You count."},
		transcript.Item{Role: "user", Content: "Reach 1."},
		transcript.Item{Role: "assistant", ToolCalls: []transcript.ToolCall{{ID: "c1", Name: "increment", Arguments: `{"by":1}`}}, Generation: g},
		transcript.Item{Role: "tool", ToolCallID: "c1", Content: "counter=1"},
		transcript.Item{Role: "assistant", Content: "done <ok>"},
	)
	require.NoError(t, err)
	return head
}

func TestBuildLine(t *testing.T) {
	store, err := transcriptstore.Open(t.TempDir())
	require.NoError(t, err)
	head := storedRollout(t, store)
	details, err := store.Put(context.Background(), []byte(`{"value":1,"target":1}`))
	require.NoError(t, err)
	group, repeat := "q1", 2
	f := finishedRollout{
		set: "s1", group: &group, repeat: &repeat,
		groupStatus: &ExportGroup{Status: "complete", Size: 3, Retries: 1, RetryBudget: 2},
		rec: RolloutRecord{RolloutID: "s1-q1-r2", Status: enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED, Attempt: 1, Result: &rollout.Result{
			RolloutID: "s1-q1-r2", Set: "s1", Env: "counter", Attempt: 1, Reward: 1, Turns: 2, Head: head,
			Usage:       rollout.Usage{PromptTokens: 3, CompletionTokens: 2, TotalTokens: 5, Calls: 2},
			StepRewards: []float64{0}, VerifyDetailsRef: details,
		}},
		attempts: []AttemptRecord{{Attempt: 0, Status: "terminated", Runs: 1}, {Attempt: 1, Status: "completed", Runs: 2}},
	}
	line, err := buildLine(context.Background(), store, f)
	require.NoError(t, err)
	require.Equal(t, "s1", line.Set, "line header %+v", line)
	require.Equal(t, "q1", *line.Group, "line header %+v", line)
	require.Equal(t, 2, *line.Repeat, "line header %+v", line)
	require.Equal(t, "counter", line.Env, "line header %+v", line)
	require.Equal(t, "completed", line.Status, "line header %+v", line)
	require.Equal(t, float64(1), *line.Reward, "line header %+v", line)
	require.Equal(t, 1, line.Attempt, "line header %+v", line)
	require.Len(t, line.Messages, 5, "line %+v", line)
	require.Equal(t, "partial", line.Tokens, "line %+v", line)
	require.Equal(t, 1, line.PrefixBreaks, "line %+v", line)
	require.True(t, line.StepRewards.Available, "step rewards %+v", line.StepRewards)
	require.Equal(t, "[0]", fmt.Sprint(line.StepRewards.Values), "step rewards %+v", line.StepRewards)
	require.Equal(t, "", line.StepRewards.Reason, "step rewards %+v", line.StepRewards)
	require.True(t, line.VerifyDetails.Available, "verify details %+v", line.VerifyDetails)
	require.Equal(t, `{"value":1,"target":1}`, string(line.VerifyDetails.Details), "verify details %+v", line.VerifyDetails)
	first, last := line.Messages[2], line.Messages[4]
	require.Equal(t, "present", first.Tokens, "first assistant message %+v", first)
	require.Equal(t, "[1 2 3] [4 5] [-0.5 -0.25]", fmt.Sprint(first.PromptTokenIDs, first.GenerationTokenIDs, first.GenerationLogProbs), "first assistant message %+v", first)
	require.Equal(t, "tool_calls", first.FinishReason, "first assistant message %+v", first)
	require.Equal(t, "count up", first.ReasoningContent, "first assistant message %+v", first)
	require.Equal(t, "v3", first.PolicyVersion, "first assistant message %+v", first)
	require.True(t, *first.PrefixBreak, "first assistant message %+v", first)
	require.Equal(t, "increment", first.ToolCalls[0].Function.Name, "first assistant message %+v", first)
	require.Equal(t, "function", first.ToolCalls[0].Type, "first assistant message %+v", first)
	require.Equal(t, "absent", last.Tokens, "assistant without a record %+v", last)
	require.False(t, *last.PrefixBreak, "assistant without a record %+v", last)
	require.Nil(t, last.PromptTokenIDs, "assistant without a record %+v", last)
	assert.Equal(t, "[{1 2 [3]} {2 4 []}]", fmt.Sprint(line.Turns), "turns %v", line.Turns)
	b, err := encodeLine(line)
	require.NoError(t, err)
	errs := trajectorySchema(t).Validate(b)
	assert.Empty(t, errs, "line does not match the schema: %v\n%s", errs, b)
	assert.Contains(t, string(b), `"content":"done <ok>"`, "HTML escaped: %s", b)
	assert.Contains(t, string(b), `"group_status":{"status":"complete","size":3,"retries":1,"retry_budget":2}`, "group status: %s", b)
}

// TestBuildLineNotRecorded: a result from before step rewards and verify
// details were kept says so; a result that kept them with no operation has
// an empty list, available.
func TestBuildLineNotRecorded(t *testing.T) {
	store, err := transcriptstore.Open(t.TempDir())
	require.NoError(t, err)
	head := storedRollout(t, store)
	for _, tt := range []struct {
		steps     []float64
		available bool
		encoded   string
	}{
		{nil, false, `"step_rewards":{"available":false,"values":null,"reason":"not recorded: the rollout began before results kept them"}`},
		{[]float64{}, true, `"step_rewards":{"available":true,"values":[]}`},
	} {
		f := finishedRollout{set: "s1", attempts: []AttemptRecord{}, rec: RolloutRecord{RolloutID: "s1-0001", Status: enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED,
			Result: &rollout.Result{RolloutID: "s1-0001", Head: head, StepRewards: tt.steps}}}
		line, err := buildLine(context.Background(), store, f)
		require.NoError(t, err)
		b, err := encodeLine(line)
		require.NoError(t, err)
		require.Equal(t, tt.available, line.StepRewards.Available, "steps %v: %s", tt.steps, b)
		require.Contains(t, string(b), tt.encoded, "steps %v: %s", tt.steps, b)
		require.False(t, line.VerifyDetails.Available, "steps %v: %s", tt.steps, b)
		errs := trajectorySchema(t).Validate(b)
		assert.Empty(t, errs, "line does not match the schema: %v\n%s", errs, b)
	}
}

func TestBuildLineMissingTranscript(t *testing.T) {
	store, err := transcriptstore.Open(t.TempDir())
	require.NoError(t, err)
	f := finishedRollout{set: "s1", rec: RolloutRecord{RolloutID: "s1-0001", Status: enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED,
		Result: &rollout.Result{Head: transcript.DigestOf([]byte("elsewhere"))}}}
	_, err = buildLine(context.Background(), store, f)
	require.ErrorContains(t, err, "--transcript-dir", "err = %v, want one naming the rollout and --transcript-dir", err)
	require.ErrorContains(t, err, "s1-0001", "err = %v, want one naming the rollout and --transcript-dir", err)
}

// setRuns is what the exporter reads of set s1: its runs, and its groups'
// ledgers by group id (a group without one has none).
type setRuns struct {
	t       *testing.T
	runs    []listedRun
	ledgers map[string]ExportGroup
	// settled are the receipts the set's acknowledgement ledger knows
	// acknowledged (none: the ledger does not run).
	settled []rollout.Receipt
	// bounded are the runs served to queries bounded by a cursor.
	bounded map[string]bool
}

// client serves the runs to the exporter: visibility pages of two runs,
// each run's result or failure, the status of the running ones, and the
// ledgers.
func (f *setRuns) client() *temporalfake.Client {
	return &temporalfake.Client{List: f.list, PageSize: 2, Describe: f.describe, GetRun: f.run, Query: f.query, QueryWithOptions: f.ackLedger}
}

// ackLedger answers the set's acknowledgement ledger's settled query.
func (f *setRuns) ackLedger(req *tclient.QueryWorkflowWithOptionsRequest) (*tclient.QueryWorkflowWithOptionsResponse, error) {
	require.Equal(f.t, set.AckLedgerWorkflowID("s1"), req.WorkflowID)
	require.Equal(f.t, set.QuerySettled, req.QueryType)
	if f.settled == nil {
		return nil, serviceerror.NewNotFound("no ledger")
	}
	ids := req.Args[0].([]string)
	out := []rollout.Receipt{}
	for _, rc := range f.settled {
		if slices.Contains(ids, rc.RolloutID) {
			out = append(out, rc)
		}
	}
	return &tclient.QueryWorkflowWithOptionsResponse{QueryResult: temporalfake.Value{V: out}}, nil
}

// describe describes a group's ledger as its search attribute and memo
// show it.
func (f *setRuns) describe(workflowID, _ string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	for group, g := range f.ledgers {
		if rollout.GroupWorkflowID("s1", group) != workflowID {
			continue
		}
		memo := map[string]*commonpb.Payload{
			rollout.MemoGroupSize: temporalfake.Payload(g.Size), rollout.MemoGroupRetries: temporalfake.Payload(g.Retries),
			rollout.MemoGroupBudget: temporalfake.Payload(g.RetryBudget), rollout.MemoGroupReason: temporalfake.Payload(g.Reason),
		}
		return &workflowservice.DescribeWorkflowExecutionResponse{WorkflowExecutionInfo: &workflowpb.WorkflowExecutionInfo{
			SearchAttributes: &commonpb.SearchAttributes{IndexedFields: map[string]*commonpb.Payload{rollout.SARolloutGroupStatus: temporalfake.Payload(g.Status)}},
			Memo:             &commonpb.Memo{Fields: memo},
		}}, nil
	}
	return nil, serviceerror.NewNotFound("no ledger " + workflowID)
}

type listedRun struct {
	id, runID string
	phase     rollout.Phase
	attempt   int64
	status    enumspb.WorkflowExecutionStatus
	start     time.Time
	group     string
	repeat    int64
	result    *rollout.Result
	// finishedAt, when set, is the run's RolloutFinishedAt; queried, when
	// set, the phase its status query answers (a held result acknowledged
	// after the listing).
	finishedAt time.Time
	queried    rollout.Phase
	// named, when set, is the run's RolloutReceipt: the digest its held
	// result is stored under.
	named string
}

func (f *setRuns) info(r listedRun) *workflowpb.WorkflowExecutionInfo {
	fields := map[string]*commonpb.Payload{
		rollout.SARolloutID: temporalfake.Payload(r.id), rollout.SARolloutSet: temporalfake.Payload("s1"),
		rollout.SARolloutAttempt: temporalfake.Payload(r.attempt), rollout.SARolloutPhase: temporalfake.Payload(string(r.phase)),
	}
	if r.group != "" {
		fields[rollout.SARolloutGroup], fields[rollout.SARolloutRepeat] = temporalfake.Payload(r.group), temporalfake.Payload(r.repeat)
	}
	if !r.finishedAt.IsZero() {
		fields[rollout.SARolloutFinishedAt] = temporalfake.Payload(r.finishedAt)
	}
	if r.named != "" {
		fields[rollout.SARolloutReceipt] = temporalfake.Payload(r.named)
	}
	info := &workflowpb.WorkflowExecutionInfo{
		Execution:        &commonpb.WorkflowExecution{WorkflowId: rollout.WorkflowID(r.id), RunId: r.runID},
		Status:           r.status,
		StartTime:        timestamppb.New(r.start),
		SearchAttributes: &commonpb.SearchAttributes{IndexedFields: fields},
		Memo:             &commonpb.Memo{Fields: map[string]*commonpb.Payload{rollout.MemoEnv: temporalfake.Payload("counter")}},
	}
	if r.status != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		info.CloseTime = timestamppb.New(r.start.Add(time.Second))
	}
	return info
}

// list matches the set's finished runs, its feed, or runs by workflow ID.
func (f *setRuns) list(query string) ([]*workflowpb.WorkflowExecutionInfo, error) {
	var match []*workflowpb.WorkflowExecutionInfo
	for _, r := range f.runs {
		byID := strings.Contains(query, "WorkflowId IN (") && strings.Contains(query, fmt.Sprintf("%q", rollout.WorkflowID(r.id)))
		running := r.status == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
		finished := !running && r.status != enumspb.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW || running && r.phase == rollout.PhaseAwaitingAck
		failed := !running && r.status != enumspb.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW && r.status != enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED
		inFeed := running && r.phase == rollout.PhaseAwaitingAck || failed
		if !f.since(query, r) {
			continue
		}
		if byID || strings.Contains(query, finishedQuery) && finished || strings.Contains(query, feedQuery) && inFeed {
			match = append(match, f.info(r))
		}
	}
	return match, nil
}

// sinceBound is a feed query's bound on the cursor's time.
var sinceBound = regexp.MustCompile(rollout.SARolloutFinishedAt + ` >= "([^"]+)" OR CloseTime >= "([^"]+)"`)

// since applies a query's bound on the runs' finish or close time, and
// notes the runs it lets through a bounded query.
func (f *setRuns) since(query string, r listedRun) bool {
	m := sinceBound.FindStringSubmatch(query)
	if m == nil {
		return true
	}
	at, err := time.Parse(time.RFC3339Nano, m[1])
	require.NoError(f.t, err)
	info := f.info(r)
	keep := !r.finishedAt.IsZero() && !r.finishedAt.Before(at) || info.CloseTime != nil && !info.CloseTime.AsTime().Before(at)
	if keep {
		if f.bounded == nil {
			f.bounded = map[string]bool{}
		}
		f.bounded[r.id] = true
	}
	return keep
}

// run is a closed run: its result, or a failure when it has none.
func (f *setRuns) run(workflowID, runID string) tclient.WorkflowRun {
	for _, r := range f.runs {
		if rollout.WorkflowID(r.id) == workflowID && r.runID == runID {
			if r.result == nil {
				return temporalfake.Run{Err: &temporal.WorkflowExecutionError{}}
			}
			return temporalfake.Run{Value: r.result}
		}
	}
	require.Failf(f.t, "no such run", "GetWorkflow(%s, %s)", workflowID, runID)
	return nil
}

// query answers the status query of the latest run.
func (f *setRuns) query(workflowID, runID, queryType string, _ ...any) (converter.EncodedValue, error) {
	require.Equal(f.t, "", runID, "query %s of %s run %q", queryType, workflowID, runID)
	require.Equal(f.t, rollout.QueryStatus, queryType, "query %s of %s run %q", queryType, workflowID, runID)
	for _, r := range f.runs {
		if rollout.WorkflowID(r.id) == workflowID && r.status == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
			if r.queried != "" {
				return temporalfake.Value{V: rollout.Status{Phase: r.queried, Result: r.result}}, nil
			}
			return temporalfake.Value{V: rollout.Status{Phase: r.phase, Result: r.result}}, nil
		}
	}
	return nil, fmt.Errorf("no running run of %s", workflowID)
}

func TestExportSet(t *testing.T) {
	store, err := transcriptstore.Open(t.TempDir())
	require.NoError(t, err)
	head := storedRollout(t, store)
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	done := func(id string, attempt int) *rollout.Result {
		return &rollout.Result{RolloutID: id, Set: "s1", Env: "counter", Attempt: attempt, Reward: 1, Turns: 2, Head: head}
	}
	completed, failed := enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED, enumspb.WORKFLOW_EXECUTION_STATUS_FAILED
	held := done("s1-q3-r0", 0)
	held.Receipt = &rollout.Receipt{RolloutID: "s1-q3-r0", SHA256: strings.Repeat("a", 64)}
	s1 := &setRuns{t: t, ledgers: map[string]ExportGroup{
		"q1": {Status: "failed", Size: 2, Retries: 2, RetryBudget: 2, Reason: "group retry budget (2) exhausted"},
		"q2": {Status: "complete", Size: 2, Retries: 1, RetryBudget: 2},
	}, runs: []listedRun{
		{id: "s1-q1-r0", runID: "a", status: completed, start: t0, group: "q1", result: done("s1-q1-r0", 0)},
		{id: "s1-q1-r1", runID: "b", status: failed, start: t0, group: "q1", repeat: 1},
		// Attempt 0 was replaced by a restored attempt 1: one line, of attempt 1.
		{id: "s1-q2-r0", runID: "c0", status: enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED, start: t0, group: "q2"},
		{id: "s1-q2-r0", runID: "c1", attempt: 1, status: completed, start: t0.Add(time.Minute), group: "q2", result: done("s1-q2-r0", 1)},
		// Still running: not finished, not exported.
		{id: "s1-q2-r1", runID: "d", status: enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, phase: rollout.PhaseModel, start: t0, group: "q2", repeat: 1},
		// Holding its result for acknowledgement: finished, exported with its receipt.
		{id: "s1-q3-r0", runID: "e", status: enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, phase: rollout.PhaseAwaitingAck, start: t0, group: "q3", result: held},
	}}
	src := s1.client()
	var out bytes.Buffer
	stats, err := exportSet(context.Background(), src, store, "s1", &out, ExportOptions{})
	require.NoError(t, err)
	assert.Equal(t, ExportStats{Completed: 3, Held: 1, Failed: 1, Skipped: 1}, stats, "stats")
	schema := trajectorySchema(t)
	var got []string
	sc := bufio.NewScanner(&out)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		errs := schema.Validate(sc.Bytes())
		assert.Empty(t, errs, "line does not match the schema: %v\n%s", errs, sc.Bytes())
		var l ExportLine
		require.NoError(t, json.Unmarshal(sc.Bytes(), &l))
		got = append(got, fmt.Sprintf("%s %s g=%s r=%d a=%d attempts=%d held=%v receipt=%v group=%s", l.RolloutID, l.Status, *l.Group, *l.Repeat, l.Attempt, len(l.Attempts), l.Held, l.Receipt != nil, l.GroupStatus.Status))
		if l.Status == "failed" {
			assert.NotEmpty(t, l.Failure, "failed line %s", sc.Bytes())
			assert.Nil(t, l.Reward, "failed line %s", sc.Bytes())
			assert.Empty(t, l.Messages, "failed line %s", sc.Bytes())
		}
	}
	want := []string{
		"s1-q1-r0 completed g=q1 r=0 a=0 attempts=1 held=false receipt=false group=failed",
		"s1-q1-r1 failed g=q1 r=1 a=0 attempts=1 held=false receipt=false group=failed",
		"s1-q2-r0 completed g=q2 r=0 a=1 attempts=2 held=false receipt=false group=complete",
		"s1-q3-r0 completed g=q3 r=0 a=0 attempts=1 held=true receipt=true group=unknown",
	}
	assert.Equal(t, fmt.Sprint(want), fmt.Sprint(got), "lines\n%v\nwant\n%v", strings.Join(got, "\n"), strings.Join(want, "\n"))
	assert.Contains(t, src.ListQueries()[0], `RolloutSet = "s1" AND `+finishedQuery, "set query")
	// The set's fence record once, then each of the 3 groups' ledgers once.
	described := src.Described()
	require.Len(t, described, 4, "described %v, want the fence record, then each of the 3 groups once", described)
	require.Equal(t, set.SetFenceWorkflowID("s1"), described[0], "described %v, want the fence record, then each of the 3 groups once", described)

	// The trainer's view: the complete group's lines only; the failed
	// group is left out whole, and so are groups not known complete.
	out.Reset()
	stats, err = exportSet(context.Background(), src, store, "s1", &out, ExportOptions{CompleteGroupsOnly: true})
	require.NoError(t, err)
	require.Equal(t, ExportStats{Completed: 1, Excluded: 3, Skipped: 1}, stats, "trainer's view: stats %+v\n%s", stats, out.String())
	require.Equal(t, 1, strings.Count(out.String(), "\n"), "trainer's view: stats %+v\n%s", stats, out.String())
	require.Contains(t, out.String(), `"rollout_id":"s1-q2-r0"`, "trainer's view: stats %+v\n%s", stats, out.String())
}

// pageCountingWriter records how many visibility pages of the set had been
// read when the first line was written.
type pageCountingWriter struct {
	src          *temporalfake.Client
	pagesAtFirst int
	lines        int
}

func (w *pageCountingWriter) Write(p []byte) (int, error) {
	if w.lines == 0 {
		for _, q := range w.src.ListQueries() {
			if strings.HasPrefix(q, "RolloutSet") {
				w.pagesAtFirst++
			}
		}
	}
	w.lines += bytes.Count(p, []byte("\n"))
	return len(p), nil
}

// TestExportStreams: lines are written while the set is still being
// listed, a window at a time, so memory does not grow with the set.
func TestExportStreams(t *testing.T) {
	store, err := transcriptstore.Open(t.TempDir())
	require.NoError(t, err)
	head := storedRollout(t, store)
	s1 := &setRuns{t: t}
	const n = 5 * exportWindow
	for i := range n {
		id := fmt.Sprintf("s1-%04d", i)
		s1.runs = append(s1.runs, listedRun{id: id, runID: "r" + id, status: enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED,
			start: time.Unix(int64(i), 0), result: &rollout.Result{RolloutID: id, Set: "s1", Env: "counter", Head: head}})
	}
	src := s1.client()
	w := &pageCountingWriter{src: src}
	stats, err := exportSet(context.Background(), src, store, "s1", w, ExportOptions{})
	require.NoError(t, err)
	require.Equal(t, n, stats.Completed, "stats %+v, %d lines; want %d", stats, w.lines, n)
	require.Equal(t, n, w.lines, "stats %+v, %d lines; want %d", stats, w.lines, n)
	// Pages hold two runs: the first window is full after exportWindow/2.
	assert.Equal(t, exportWindow/2, w.pagesAtFirst, "first line written after %d of %d pages, want %d", w.pagesAtFirst, n/2, exportWindow/2)
}

// TestBuildLineRecoveredCall: a call continued from its durable prefix
// after the weights changed exports both versions and where they switch,
// where it resumed, and the line counts its tokens by how they were got.
func TestBuildLineRecoveredCall(t *testing.T) {
	store, err := transcriptstore.Open(t.TempDir())
	require.NoError(t, err)
	ctx := context.Background()
	prompt, out := []int64{1, 2, 3}, []int64{4, 5, 6, 7, 8}
	gen := transcript.Generation{
		Tokens: transcript.TokensPresent, PromptTokenIDs: prompt, GenerationTokenIDs: out,
		GenerationLogProbs: []float64{-1, -1, -1, -1, -1}, PromptDigest: transcript.TokenDigest(prompt),
		SequenceDigest: transcript.TokenDigest(prompt, out), FinishReason: "stop", PolicyVersion: "v1",
		PolicyVersionSpans: []transcript.VersionSpan{{Start: 0, PolicyVersion: "v1"}, {Start: 3, PolicyVersion: "v2"}},
	}
	require.NoError(t, gen.Validate())
	g, err := store.PutGeneration(ctx, gen)
	require.NoError(t, err)
	head, err := store.AppendAll(ctx, "",
		transcript.Item{Role: "user", Content: "Go."},
		transcript.Item{Role: "assistant", Content: "done <ok>", Generation: g},
	)
	require.NoError(t, err)
	lineage := []rollout.LineageEntry{{CallID: "s1-0001/a0/t1", Generation: g,
		GenerationRecovery: rollout.GenerationRecovery{ResumedAt: []int{3}, TokensRecovered: 3}}}
	f := finishedRollout{set: "s1", attempts: []AttemptRecord{}, rec: RolloutRecord{RolloutID: "s1-0001", Status: enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED,
		Result: &rollout.Result{RolloutID: "s1-0001", Head: head, Lineage: lineage}}}
	line, err := buildLine(ctx, store, f)
	require.NoError(t, err)
	m := line.Messages[1]
	require.Equal(t, gen.PolicyVersionSpans, m.PolicyVersionSpans)
	require.Equal(t, []int{3}, m.ResumedAt)
	require.False(t, m.Regenerated)
	require.Equal(t, &GenerationTokens{Generated: 2, Recovered: 3}, line.GenerationTokens)
	b, err := encodeLine(line)
	require.NoError(t, err)
	assert.Contains(t, string(b), `"policy_version_spans":[{"start":0,"policy_version":"v1"},{"start":3,"policy_version":"v2"}],"resumed_at":[3]`)
	assert.Empty(t, trajectorySchema(t).Validate(b), "line does not match the schema:\n%s", b)

	lineage[0].GenerationRecovery = rollout.GenerationRecovery{Regenerated: true, TokensRegenerated: 2}
	line, err = buildLine(ctx, store, f)
	require.NoError(t, err)
	require.True(t, line.Messages[1].Regenerated)
	require.Equal(t, &GenerationTokens{Generated: 5, Regenerated: 2, RegeneratedCalls: 1}, line.GenerationTokens)
	b, err = encodeLine(line)
	require.NoError(t, err)
	assert.Empty(t, trajectorySchema(t).Validate(b), "line does not match the schema:\n%s", b)
}
