package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"

	enumspb "go.temporal.io/api/enums/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/turnstile-rl/turnstile/fanout"
	"github.com/turnstile-rl/turnstile/rollout"
)

// exportWindow is how many rollouts an export reads at once. Their lines
// are the only ones held in memory, so an export of 10,000 rollouts needs
// no more than one of 16.
const exportWindow = 16

// closedQuery selects the runs that ended for good: running ones are not
// finished, and a run that continued as new handed its rollout on.
const closedQuery = `ExecutionStatus != "Running" AND ExecutionStatus != "ContinuedAsNew"`

// ExportStats counts what an export wrote and passed over.
type ExportStats struct {
	Completed int // lines of completed rollouts
	Failed    int // lines of rollouts that closed any other way
	// Superseded counts closed runs a later run of the same rollout
	// replaced (a restored attempt): only the latest is exported.
	Superseded int
}

// exportSource is what Export reads from Temporal.
type exportSource interface {
	rollout.Lister
	runGetter
}

// Export writes one JSON line (ExportLine) per finished rollout of set to
// w, reading trajectories from store, the worker's transcript directory.
// It streams: visibility is read page by page, and only a window of
// rollouts is held at a time. A set still running may be exported: only
// rollouts whose latest run has closed are written, each once. Lines come
// in visibility's order (most recently closed first), not by rollout id.
func (c *Client) Export(ctx context.Context, set string, store TranscriptReader, w io.Writer) (ExportStats, error) {
	if err := rollout.ValidateSet(set); err != nil {
		return ExportStats{}, err
	}
	return exportSet(ctx, c.tc, store, set, w)
}

func exportSet(ctx context.Context, src exportSource, store TranscriptReader, set string, w io.Writer) (ExportStats, error) {
	var stats ExportStats
	window := make([]*workflowpb.WorkflowExecutionInfo, 0, exportWindow)
	flush := func() error {
		err := exportWindowOf(ctx, exportJob{src: src, store: store, set: set, w: w}, window, &stats)
		window = window[:0]
		return err
	}
	err := rollout.ListSet(ctx, src, set, closedQuery, func(info *workflowpb.WorkflowExecutionInfo) error {
		window = append(window, info)
		if len(window) < exportWindow {
			return nil
		}
		return flush()
	})
	if err != nil {
		return stats, fmt.Errorf("export set %q: %w", set, err)
	}
	if err := flush(); err != nil {
		return stats, fmt.Errorf("export set %q: %w", set, err)
	}
	return stats, nil
}

// exportJob is what every window of one export shares.
type exportJob struct {
	src   exportSource
	store TranscriptReader
	set   string
	w     io.Writer
}

// exportWindowOf builds the lines of a window of closed runs concurrently
// and writes them in listing order.
func exportWindowOf(ctx context.Context, job exportJob, infos []*workflowpb.WorkflowExecutionInfo, stats *ExportStats) error {
	lines := make([][]byte, len(infos))
	superseded := make([]bool, len(infos))
	err := fanout.Each(ctx, len(infos), exportWindow, func(ctx context.Context, i int) error {
		f, latest, err := finished(ctx, job.src, job.set, infos[i])
		if err != nil || !latest {
			superseded[i] = !latest
			return err
		}
		line, err := buildLine(ctx, job.store, f)
		if err != nil {
			return err
		}
		lines[i], err = encodeLine(line)
		return err
	})
	if err != nil {
		return err
	}
	for i, b := range lines {
		if superseded[i] {
			stats.Superseded++
			continue
		}
		if _, err := job.w.Write(b); err != nil {
			return fmt.Errorf("write export line: %w", err)
		}
		if infos[i].GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED {
			stats.Completed++
		} else {
			stats.Failed++
		}
	}
	return nil
}

// encodeLine is line as one line of JSON, HTML characters unescaped
// (tool arguments and code read as written).
func encodeLine(line ExportLine) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(line); err != nil {
		return nil, fmt.Errorf("encode export line of %s: %w", line.RolloutID, err)
	}
	return b.Bytes(), nil
}

// finished reads what the export needs of the rollout of a closed run:
// its attempts (every run of its workflow ID), and its result or failure.
// latest is false when a later run replaced this one, which is then not
// exported (the later run is, once it closes).
func finished(ctx context.Context, src exportSource, set string, info *workflowpb.WorkflowExecutionInfo) (finishedRollout, bool, error) {
	rec := recordFromInfo(info)
	runs, err := listRuns(ctx, src, rec.WorkflowID)
	if err != nil {
		return finishedRollout{}, false, err
	}
	if len(runs) > 0 && runs[0].RunID != rec.RunID && newer(runs[0], rec) {
		return finishedRollout{}, false, nil
	}
	if err := fetchResult(ctx, src, &rec); err != nil {
		return finishedRollout{}, false, err
	}
	f := finishedRollout{set: set, rec: rec, attempts: attemptsOf(runs)}
	sa := info.GetSearchAttributes()
	if g, ok := rollout.SAKeyword(sa, rollout.SARolloutGroup); ok {
		f.group = &g
		r, _ := rollout.SAInt(sa, rollout.SARolloutRepeat)
		repeat := int(r)
		f.repeat = &repeat
	}
	return f, true, nil
}

// listRuns returns every run of workflowID that visibility holds, the
// latest first.
func listRuns(ctx context.Context, l rollout.Lister, workflowID string) ([]RolloutRecord, error) {
	query := fmt.Sprintf("WorkflowId = %q", workflowID)
	var runs []RolloutRecord
	var token []byte
	for {
		resp, err := l.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: query, NextPageToken: token})
		if err != nil {
			return nil, fmt.Errorf("list runs of %s: %w", workflowID, err)
		}
		for _, info := range resp.GetExecutions() {
			runs = append(runs, recordFromInfo(info))
		}
		if token = resp.GetNextPageToken(); len(token) == 0 {
			break
		}
	}
	sort.SliceStable(runs, func(i, j int) bool { return newer(runs[i], runs[j]) })
	return runs, nil
}

// attemptsOf condenses runs (latest first) into one record per attempt,
// oldest attempt first.
func attemptsOf(runs []RolloutRecord) []AttemptRecord {
	out := []AttemptRecord{}
	for i := len(runs) - 1; i >= 0; i-- {
		r := runs[i]
		if n := len(out); n > 0 && out[n-1].Attempt == int(r.Attempt) {
			out[n-1].Status, out[n-1].Close = exportRunStatus(r), r.Close
			out[n-1].Runs++
			continue
		}
		out = append(out, AttemptRecord{Attempt: int(r.Attempt), Status: exportRunStatus(r), Runs: 1, Start: r.Start, Close: r.Close})
	}
	return out
}

// exportRunStatus names any run's status, open ones included.
func exportRunStatus(r RolloutRecord) string {
	switch r.Status {
	case enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING:
		return "running"
	case enumspb.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW:
		return "continued_as_new"
	}
	return exportStatus(r.Status)
}
