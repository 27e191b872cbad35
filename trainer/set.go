package trainer

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	enumspb "go.temporal.io/api/enums/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	tclient "go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/turnstile-rl/turnstile/internal/fanout"
	"github.com/turnstile-rl/turnstile/internal/visibility"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// fetchConcurrency bounds concurrent result fetches.
const fetchConcurrency = 16

// List returns the latest run of every rollout of set as visibility shows
// it, sorted by rollout id, without results.
func (c *Client) List(ctx context.Context, set string) ([]RolloutRecord, error) {
	if err := rollout.ValidateSet(set); err != nil {
		return nil, err
	}
	return listLatest(ctx, c.tc, set)
}

// CountRuns counts every run of set that visibility holds: zero for a set
// that does not exist (or whose first start is not visible yet).
func (c *Client) CountRuns(ctx context.Context, set string) (int, error) {
	if err := rollout.ValidateSet(set); err != nil {
		return 0, err
	}
	resp, err := c.tc.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Query: rollout.SetQuery(set)})
	if err != nil {
		return 0, fmt.Errorf("count runs of set %q: %w", set, err)
	}
	return int(resp.GetCount()), nil
}

// Results returns the latest run of every rollout of set with its outcome:
// the result of a completed run, the failure of a closed one, and the
// result a running one holds for acknowledgement (with its receipt).
func (c *Client) Results(ctx context.Context, set string) ([]RolloutRecord, error) {
	recs, err := c.collect(ctx, set)
	if err != nil {
		return nil, err
	}
	if err := fillHeld(ctx, c.tc, recs); err != nil {
		return nil, err
	}
	return recs, nil
}

// collect lists set and fetches the result or failure of each closed run.
func (c *Client) collect(ctx context.Context, set string) ([]RolloutRecord, error) {
	recs, err := c.List(ctx, set)
	if err != nil {
		return nil, err
	}
	err = fanout.Each(ctx, len(recs), fetchConcurrency, func(ctx context.Context, i int) error {
		return fetchOutcome(ctx, c.tc, &recs[i])
	})
	if err != nil {
		return nil, err
	}
	return recs, nil
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

// StatusName is the short name of a workflow execution status ("Running").
func StatusName(s enumspb.WorkflowExecutionStatus) string {
	name := strings.TrimPrefix(s.String(), "WORKFLOW_EXECUTION_STATUS_")
	if name == "" {
		return "Unknown"
	}
	return name
}

// listLatest lists set and returns the latest run of each of its rollouts,
// sorted by rollout id.
func listLatest(ctx context.Context, l visibility.Lister, set string) ([]RolloutRecord, error) {
	var infos []*workflowpb.WorkflowExecutionInfo
	err := visibility.ListSet(ctx, l, set, "", func(info *workflowpb.WorkflowExecutionInfo) error {
		infos = append(infos, info)
		return nil
	})
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
	sa := info.GetSearchAttributes()
	rec.RolloutID, _ = visibility.SAKeyword(sa, rollout.SARolloutID)
	if rec.RolloutID == "" {
		rec.RolloutID = strings.TrimPrefix(rec.WorkflowID, rollout.WorkflowID(""))
	}
	if p, ok := info.GetMemo().GetFields()[rollout.MemoEnv]; ok {
		_ = converter.GetDefaultDataConverter().FromPayload(p, &rec.Env)
	}
	rec.Phase, _ = visibility.SAKeyword(sa, rollout.SARolloutPhase)
	rec.Attempt, _ = visibility.SAInt(sa, rollout.SARolloutAttempt)
	rec.Turn, _ = visibility.SAInt(sa, rollout.SARolloutTurn)
	rec.heldSHA, _ = visibility.SAKeyword(sa, rollout.SARolloutReceipt)
	return rec
}

// fetchOutcome fills rec.Result or rec.Err from a closed run (an open run
// is left alone: Get would block until it ends), and rec.Env when neither
// the result nor the memo named it.
func fetchOutcome(ctx context.Context, c tclient.Client, rec *RolloutRecord) error {
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

// startInput reads the rollout.Input a run was started with from the first
// event of its history. Runs started outside the starter (a restore, the
// Temporal CLI) carry no memo; their input still names the environment.
func startInput(ctx context.Context, c tclient.Client, workflowID, runID string) (rollout.Input, error) {
	var in rollout.Input
	err := visibility.DecodeStartInput(ctx, c, workflowID, runID, &in)
	return in, err
}

// fetchResult fills rec.Result or rec.Err from a closed run.
func fetchResult(ctx context.Context, c runGetter, rec *RolloutRecord) error {
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
		rec.Err = causeFirst(err).Error()
		var ae *temporal.ApplicationError
		rec.Fenced = errors.As(err, &ae) && ae.Type() == rollout.ErrFencedByRestore
		return nil
	}
	return fmt.Errorf("result of rollout %s (run %s): %w", rec.RolloutID, rec.RunID, err)
}

// statusQuerier is the query part of client.Client.
type statusQuerier interface {
	QueryWorkflow(ctx context.Context, workflowID string, runID string, queryType string, args ...any) (converter.EncodedValue, error)
}

// queryStatus asks the current run of workflowID for its Status.
func queryStatus(ctx context.Context, q statusQuerier, workflowID string) (rollout.Status, error) {
	var st rollout.Status
	v, err := q.QueryWorkflow(ctx, workflowID, "", rollout.QueryStatus)
	if err != nil {
		return st, fmt.Errorf("query status of %s: %w", workflowID, err)
	}
	if err := v.Get(&st); err != nil {
		return st, fmt.Errorf("decode status of %s: %w", workflowID, err)
	}
	return st, nil
}

// fillHeld sets the Result of every running rollout that holds one for
// acknowledgement (phase awaiting_ack), from its status query, so a
// listing of results shows it with its receipt.
func fillHeld(ctx context.Context, q statusQuerier, recs []RolloutRecord) error {
	return fanout.Each(ctx, len(recs), updateConcurrency, func(ctx context.Context, i int) error {
		r := &recs[i]
		if r.Status != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING || r.Phase != string(rollout.PhaseAwaitingAck) || r.Result != nil {
			return nil
		}
		st, err := queryStatus(ctx, q, r.WorkflowID)
		if err != nil {
			return err
		}
		if st.Phase == rollout.PhaseAwaitingAck {
			r.Result = st.Result
		}
		return nil
	})
}
