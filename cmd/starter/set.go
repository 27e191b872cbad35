package main

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/turnstile-rl/turnstile/fanout"
	"github.com/turnstile-rl/turnstile/rollout"
)

// maxSetName bounds a set name; rollout ids and workflow IDs grow from it.
const maxSetName = 100

// validateSet reports a set name that cannot be used. The allowed characters
// keep it safe inside a visibility query and a workflow ID.
func validateSet(set string) error {
	ok := set != "" && len(set) <= maxSetName
	for i, r := range set {
		alnum := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'
		if !alnum && (i == 0 || (r != '.' && r != '_' && r != '-')) {
			ok = false
		}
	}
	if !ok {
		return fmt.Errorf("set name %q: want 1-%d letters, digits, '.', '_' or '-', starting with a letter or digit", set, maxSetName)
	}
	return nil
}

// setQuery is the visibility query for every run of every rollout of set.
func setQuery(set string) string {
	return fmt.Sprintf("%s=%q", rollout.SARolloutSet, set)
}

// RolloutRecord is what visibility (and, for closed runs, the run's result)
// tells about the latest run of one rollout.
type RolloutRecord struct {
	RolloutID  string
	WorkflowID string
	RunID      string
	Status     enumspb.WorkflowExecutionStatus
	Phase      string
	Attempt    int64
	Turn       int64
	Start      time.Time
	Close      time.Time // zero while running
	// Env is the rollout's environment: from its result, its memo
	// (MemoEnv), or its start input.
	Env string
	// Result is set for a completed run once fetched; Err for a run that
	// closed any other way.
	Result *rollout.Result
	Err    string
}

// Closed reports whether the rollout has ended for good. A run that
// continued as new has not: its successor carries the rollout on.
func (r RolloutRecord) Closed() bool {
	switch r.Status {
	case enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING,
		enumspb.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW,
		enumspb.WORKFLOW_EXECUTION_STATUS_UNSPECIFIED:
		return false
	}
	return true
}

// statusName is the short name of a workflow execution status ("Running").
func statusName(s enumspb.WorkflowExecutionStatus) string {
	name := strings.TrimPrefix(s.String(), "WORKFLOW_EXECUTION_STATUS_")
	if name == "" {
		return "Unknown"
	}
	return name
}

// workflowLister is the visibility part of client.Client.
type workflowLister interface {
	ListWorkflow(ctx context.Context, req *workflowservice.ListWorkflowExecutionsRequest) (*workflowservice.ListWorkflowExecutionsResponse, error)
}

// listPageSize is the visibility page size; listSet pages through all.
const listPageSize = 1000

// listSet returns every run visibility holds for set, over all pages.
func listSet(ctx context.Context, c workflowLister, set string) ([]*workflowpb.WorkflowExecutionInfo, error) {
	var (
		out   []*workflowpb.WorkflowExecutionInfo
		token []byte
	)
	for {
		resp, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Query:         setQuery(set),
			PageSize:      listPageSize,
			NextPageToken: token,
		})
		if err != nil {
			return nil, fmt.Errorf("list rollouts of set %q: %w", set, err)
		}
		out = append(out, resp.GetExecutions()...)
		token = resp.GetNextPageToken()
		if len(token) == 0 {
			return out, nil
		}
	}
}

// listLatest lists set and returns the latest run of each of its rollouts,
// sorted by rollout id.
func listLatest(ctx context.Context, c workflowLister, set string) ([]RolloutRecord, error) {
	infos, err := listSet(ctx, c, set)
	if err != nil {
		return nil, err
	}
	return latestRuns(infos), nil
}

// latestRuns keeps, for every workflow ID, the run that started last (a
// restored attempt or a continue-as-new segment replaces its predecessor),
// and returns them as records sorted by rollout id.
func latestRuns(infos []*workflowpb.WorkflowExecutionInfo) []RolloutRecord {
	latest := map[string]RolloutRecord{}
	for _, info := range infos {
		rec := recordFromInfo(info)
		prev, ok := latest[rec.WorkflowID]
		if !ok || newer(rec, prev) {
			latest[rec.WorkflowID] = rec
		}
	}
	out := make([]RolloutRecord, 0, len(latest))
	for _, rec := range latest {
		out = append(out, rec)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].RolloutID != out[j].RolloutID {
			return out[i].RolloutID < out[j].RolloutID
		}
		return out[i].WorkflowID < out[j].WorkflowID
	})
	return out
}

// newer orders two runs of one workflow ID: later start wins; on a tie the
// open one (it must be the successor), then the run id, so the choice never
// depends on listing order.
func newer(a, b RolloutRecord) bool {
	if !a.Start.Equal(b.Start) {
		return a.Start.After(b.Start)
	}
	if a.Closed() != b.Closed() {
		return !a.Closed()
	}
	return a.RunID > b.RunID
}

// recordFromInfo reads a visibility entry. Missing search attributes leave
// zero values: a run that never upserted its phase shows as "".
func recordFromInfo(info *workflowpb.WorkflowExecutionInfo) RolloutRecord {
	rec := RolloutRecord{
		WorkflowID: info.GetExecution().GetWorkflowId(),
		RunID:      info.GetExecution().GetRunId(),
		Status:     info.GetStatus(),
	}
	if ts := info.GetStartTime(); ts != nil {
		rec.Start = ts.AsTime()
	}
	if ts := info.GetCloseTime(); ts != nil {
		rec.Close = ts.AsTime()
	}
	fields := info.GetSearchAttributes().GetIndexedFields()
	rec.RolloutID = keyword(fields, rollout.SARolloutID)
	if rec.RolloutID == "" {
		rec.RolloutID = strings.TrimPrefix(rec.WorkflowID, rollout.WorkflowID(""))
	}
	if p, ok := info.GetMemo().GetFields()[MemoEnv]; ok {
		_ = converter.GetDefaultDataConverter().FromPayload(p, &rec.Env)
	}
	rec.Phase = keyword(fields, rollout.SARolloutPhase)
	rec.Attempt = integer(fields, rollout.SARolloutAttempt)
	rec.Turn = integer(fields, rollout.SARolloutTurn)
	return rec
}

func keyword(fields map[string]*commonpb.Payload, name string) string {
	var s string
	if p, ok := fields[name]; ok {
		_ = converter.GetDefaultDataConverter().FromPayload(p, &s)
	}
	return s
}

func integer(fields map[string]*commonpb.Payload, name string) int64 {
	var n int64
	if p, ok := fields[name]; ok {
		_ = converter.GetDefaultDataConverter().FromPayload(p, &n)
	}
	return n
}

// collectSet lists the latest run of every rollout of set and, when
// withResults, fetches the result or failure of each closed one.
func collectSet(ctx context.Context, c client.Client, set string, withResults bool) ([]RolloutRecord, error) {
	recs, err := listLatest(ctx, c, set)
	if err != nil {
		return nil, err
	}
	if !withResults {
		return recs, nil
	}
	err = fanout.Each(ctx, len(recs), fetchConcurrency, func(ctx context.Context, i int) error {
		return fetchOutcome(ctx, c, &recs[i])
	})
	if err != nil {
		return nil, err
	}
	return recs, nil
}

// withSet is how the commands that report on a set (status, summary,
// results) begin: check the set name, connect, collect the set (with
// results when withResults), and hand the client and records to use. The
// client is closed when use returns.
func (g *globals) withSet(ctx context.Context, set string, withResults bool, use func(c client.Client, recs []RolloutRecord) error) error {
	if err := validateSet(set); err != nil {
		return err
	}
	c, _, err := g.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	recs, err := collectSet(ctx, c, set, withResults)
	if err != nil {
		return err
	}
	return use(c, recs)
}

// fetchConcurrency bounds concurrent result fetches.
const fetchConcurrency = 16

// fetchOutcome fills rec.Result or rec.Err from a closed run (an open run
// is left alone: Get would block until it ends), and rec.Env when neither
// the result nor the memo named it.
func fetchOutcome(ctx context.Context, c client.Client, rec *RolloutRecord) error {
	if err := fetchResult(ctx, c, rec); err != nil {
		return err
	}
	if rec.Result != nil && rec.Result.Env != "" {
		rec.Env = rec.Result.Env
	}
	if rec.Env != "" {
		return nil
	}
	in, err := startInput(ctx, c, rec.WorkflowID, rec.RunID)
	if err != nil {
		return fmt.Errorf("environment of rollout %s (run %s): %w", rec.RolloutID, rec.RunID, err)
	}
	rec.Env = in.Env.Name
	return nil
}

// startInput reads the RolloutInput a run was started with from the first
// event of its history. Runs started outside the starter (a restore, the
// Temporal CLI) carry no memo; their input still names the environment.
func startInput(ctx context.Context, c client.Client, workflowID, runID string) (rollout.Input, error) {
	var in rollout.Input
	iter := c.GetWorkflowHistory(ctx, workflowID, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	if !iter.HasNext() {
		return in, errors.New("empty history")
	}
	ev, err := iter.Next()
	if err != nil {
		return in, err
	}
	attrs := ev.GetWorkflowExecutionStartedEventAttributes()
	if attrs == nil || len(attrs.GetInput().GetPayloads()) == 0 {
		return in, fmt.Errorf("first event %s carries no start input", ev.GetEventType())
	}
	if err := converter.GetDefaultDataConverter().FromPayload(attrs.GetInput().GetPayloads()[0], &in); err != nil {
		return in, fmt.Errorf("decode start input: %w", err)
	}
	return in, nil
}

// fetchResult fills rec.Result or rec.Err from a closed run.
func fetchResult(ctx context.Context, c client.Client, rec *RolloutRecord) error {
	if !rec.Closed() {
		return nil
	}
	var res rollout.Result
	err := c.GetWorkflow(ctx, rec.WorkflowID, rec.RunID).Get(ctx, &res)
	if err == nil {
		rec.Result = &res
		return nil
	}
	var wee *temporal.WorkflowExecutionError
	if errors.As(err, &wee) {
		rec.Err = failureMessage(err)
		return nil
	}
	return fmt.Errorf("result of rollout %s (run %s): %w", rec.RolloutID, rec.RunID, err)
}

// failureMessage is the cause of a closed run's failure: "workflow execution
// error (type: Rollout, …)" adds nothing an operator needs.
func failureMessage(err error) string {
	if cause := errors.Unwrap(err); cause != nil {
		return cause.Error()
	}
	return err.Error()
}
