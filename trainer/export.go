package trainer

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/turnstile-rl/turnstile/internal/fanout"
	"github.com/turnstile-rl/turnstile/internal/visibility"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
	"github.com/turnstile-rl/turnstile/workflows/set"
)

// exportWindow is how many rollouts an export reads at once. Their lines
// are the only ones held in memory, so an export of 10,000 rollouts needs
// no more than one of 16.
const exportWindow = 16

// finishedQuery selects the runs whose rollout is finished: those that
// ended for good (a run that continued as new handed its rollout on),
// running ones holding a completed result for acknowledgement, so a
// pipeline can export what it will acknowledge, and running ones whose
// acknowledged result was released and that are closing (phase completed):
// an export right after an acknowledgement waits for them to close rather
// than leave them out.
var finishedQuery = fmt.Sprintf(`((ExecutionStatus != "Running" AND ExecutionStatus != "ContinuedAsNew") OR (ExecutionStatus = "Running" AND %s IN (%q, %q)))`,
	rollout.SARolloutPhase, rollout.PhaseAwaitingAck, rollout.PhaseCompleted)

// releasedCloseTimeout bounds the wait for a released run to close: the
// run closes as soon as its last workflow task runs.
const releasedCloseTimeout = time.Minute

// ExportStats counts what an export wrote and passed over.
type ExportStats struct {
	Completed int // lines of completed rollouts, held ones included
	Held      int // of which held for acknowledgement
	Failed    int // lines of rollouts that closed any other way
	// Skipped counts listed runs not exported: a later run of the same
	// rollout replaced them (a restored attempt; only the latest is
	// exported), or a held result listed is neither held nor released
	// any more. (A result acknowledged meanwhile is released, and its run
	// is awaited until it closes and exported.)
	Skipped int
	// Excluded counts finished rollouts left out by
	// ExportOptions.CompleteGroupsOnly (not in the counts above).
	Excluded int
}

// exportSource is what Export reads from Temporal.
type exportSource interface {
	visibility.Lister
	runGetter
	statusQuerier
	groupDescriber
}

// Export writes one JSON line (ExportLine) per finished rollout of set to
// w, reading trajectories from store, the worker's transcript directory.
// It streams: visibility is read page by page, and only a window of
// rollouts is held at a time. A set still running may be exported: only
// finished rollouts are written, each once: those whose latest run has
// closed, and those holding a completed result for acknowledgement (held
// true, with the receipt to acknowledge it by). Lines come in visibility's
// order, not by rollout id. Each line of a dataset's rollout says where its
// group stands (group_status), as the group's ledger says at the group's
// first line.
func (c *Client) Export(ctx context.Context, set string, store TranscriptReader, w io.Writer) (ExportStats, error) {
	return c.ExportWith(ctx, set, store, w, ExportOptions{})
}

// ExportWith is Export with options: with CompleteGroupsOnly, the export is
// a trainer's view (completed rollouts of complete groups only).
func (c *Client) ExportWith(ctx context.Context, set string, store TranscriptReader, w io.Writer, opts ExportOptions) (ExportStats, error) {
	if err := rollout.ValidateSet(set); err != nil {
		return ExportStats{}, err
	}
	return exportSet(ctx, c.tc, store, set, w, opts)
}

func exportSet(ctx context.Context, src exportSource, store TranscriptReader, set string, w io.Writer, opts ExportOptions) (ExportStats, error) {
	var stats ExportStats
	fence, err := visibility.ReadSetFence(ctx, src, set)
	if err != nil {
		return stats, fmt.Errorf("export set %q: %w", set, err)
	}
	job := exportJob{src: src, store: store, set: set, w: w, opts: opts, groups: newGroupCache(src, set), fence: fence, released: awaitClose}
	window := make([]*workflowpb.WorkflowExecutionInfo, 0, exportWindow)
	flush := func() error {
		err := exportWindowOf(ctx, job, window, &stats)
		window = window[:0]
		return err
	}
	err = visibility.ListSet(ctx, src, set, finishedQuery, func(info *workflowpb.WorkflowExecutionInfo) error {
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
	src    exportSource
	store  TranscriptReader
	set    string
	w      io.Writer
	opts   ExportOptions
	groups *groupCache
	// fence is the set's fence record, read once: a run of a world a
	// restore rolled back is not delivered.
	fence set.SetFence
	// released is what becomes of a listed run whose acknowledged result
	// was released: an export awaits its close and exports it; the feed,
	// which delivers what is still to acknowledge, leaves it out.
	released releasedRuns
}

// releasedRuns says what a reader does with a run whose acknowledged
// result was released while it was listed (it is closing).
type releasedRuns int

const (
	// leaveOut: the run holds no result to deliver any more (the feed).
	leaveOut releasedRuns = iota
	// awaitClose: the run's rollout is finished; wait for it to close and
	// read it as closed (export, results).
	awaitClose
)

// exportWindowOf builds the lines of a window of closed runs concurrently
// and writes them in listing order.
func exportWindowOf(ctx context.Context, job exportJob, infos []*workflowpb.WorkflowExecutionInfo, stats *ExportStats) error {
	lines, err := buildWindow(ctx, job, infos)
	if err != nil {
		return err
	}
	for _, l := range lines {
		if l.kind == "excluded" {
			stats.Excluded++
			continue
		}
		if l.data == nil {
			stats.Skipped++
			continue
		}
		if _, err := job.w.Write(l.data); err != nil {
			return fmt.Errorf("write export line: %w", err)
		}
		switch l.kind {
		case "held":
			stats.Held++
			stats.Completed++
		case "completed":
			stats.Completed++
		default:
			stats.Failed++
		}
	}
	return nil
}

// builtLine is one encoded export line (nil data: the run is not to be
// exported) and its kind: "held", "completed", the failed status, or
// "excluded" (left out by ExportOptions.CompleteGroupsOnly).
type builtLine struct {
	data []byte
	kind string
	// receipt is a held line's (nil otherwise).
	receipt *rollout.Receipt
	// groupRunning: the rollout's group is still running (some member has
	// no result yet).
	groupRunning bool
}

// buildWindow builds the lines of listed runs concurrently, in listing
// order. A dataset rollout's line says where its group stands when the job
// has a group cache.
func buildWindow(ctx context.Context, job exportJob, infos []*workflowpb.WorkflowExecutionInfo) ([]builtLine, error) {
	lines := make([]builtLine, len(infos))
	runs, err := listRunsOf(ctx, job.src, "", workflowIDsOf(infos))
	if err != nil {
		return nil, err
	}
	// Each line waits on a status query or a result: latency-bound, so a
	// feed page reads as many at once as updates are sent.
	err = fanout.Each(ctx, len(infos), updateConcurrency, func(ctx context.Context, i int) error {
		f, ok, err := finished(ctx, job.src, job.store, job.set, job.fence, infos[i], runs[infos[i].GetExecution().GetWorkflowId()], job.released)
		if err != nil || !ok {
			return err
		}
		if f.group != nil && job.groups != nil {
			if f.groupStatus, err = job.groups.status(ctx, *f.group); err != nil {
				return err
			}
		}
		line, err := buildLine(ctx, job.store, f)
		if err != nil {
			return err
		}
		lines[i].kind = line.Status
		lines[i].groupRunning = line.GroupStatus != nil && line.GroupStatus.Status == string(rollout.GroupRunning)
		switch {
		case job.opts.CompleteGroupsOnly && !trainable(line):
			lines[i].kind = "excluded"
			return nil
		case line.Held:
			lines[i].kind, lines[i].receipt = "held", line.Receipt
		}
		lines[i].data, err = encodeLine(line)
		return err
	})
	return lines, err
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

// finished reads what the export needs of the rollout of a listed run:
// its attempts (runs: every run of its workflow ID, the latest first; see
// listRunsOf), and its result or failure.
// ok is false when the run is not to be exported: a later run replaced it
// (the later run is exported once finished), it no longer holds a result,
// or a restore of the set fenced it (it started inside a restore's window,
// or it stopped FencedByRestore): in the restored world it does not exist.
func finished(ctx context.Context, src exportSource, store TranscriptReader, set string, fence set.SetFence, info *workflowpb.WorkflowExecutionInfo, runs []RolloutRecord, released releasedRuns) (f finishedRollout, ok bool, err error) {
	rec := recordFromInfo(info)
	if len(runs) > 0 && runs[0].RunID != rec.RunID && newer(runs[0], rec) {
		return f, false, nil
	}
	if _, fenced := fence.FencesResult(rec.Start); fenced {
		return f, false, nil
	}
	if ok, err := fetchFinished(ctx, src, store, &rec, released); err != nil || !ok || rec.Fenced {
		return f, false, err
	}
	f = finishedRollout{set: set, rec: rec, attempts: attemptsOf(runs)}
	sa := info.GetSearchAttributes()
	if g, ok := visibility.SAKeyword(sa, rollout.SARolloutGroup); ok {
		f.group = &g
		r, _ := visibility.SAInt(sa, rollout.SARolloutRepeat)
		repeat := int(r)
		f.repeat = &repeat
	}
	return f, true, nil
}

// fetchFinished fills rec's result or failure: from the closed run, or,
// when it holds a result for acknowledgement, from the transcript store
// (store, when not nil, and the run named its stored result: see
// heldFromStore) or else from the running run's status query. ok is false
// when a listed held result is no longer held (acknowledged since): the
// rollout is then not finished as listed.
func fetchFinished(ctx context.Context, src exportSource, store TranscriptReader, rec *RolloutRecord, released releasedRuns) (ok bool, err error) {
	if rec.Closed() {
		return true, fetchResult(ctx, src, rec)
	}
	if store != nil {
		res, ok, err := heldFromStore(ctx, store, *rec)
		if err != nil || ok {
			rec.Result = res
			return ok, err
		}
	}
	st, err := queryStatus(ctx, src, rec.WorkflowID)
	if err != nil {
		return closedMeanwhile(ctx, src, rec, err, released)
	}
	switch {
	case st.Phase == rollout.PhaseAwaitingAck && st.Result != nil:
		rec.Result = st.Result
		return true, nil
	case st.Phase == rollout.PhaseCompleted && released == awaitClose:
		return awaitReleased(ctx, src, rec)
	}
	return false, nil
}

// awaitReleased waits for a run whose acknowledged result was released
// (phase completed, not closed yet) to close, and reads it as the closed
// run it became: a result acknowledged a moment before an export is
// exported, not skipped.
func awaitReleased(ctx context.Context, src exportSource, rec *RolloutRecord) (ok bool, err error) {
	wctx, cancel := context.WithTimeout(ctx, releasedCloseTimeout)
	defer cancel()
	var res rollout.Result
	// The outcome is read below from the closed run; here only its close
	// is awaited (a failure closes it too).
	_ = src.GetWorkflow(wctx, rec.WorkflowID, rec.RunID).Get(wctx, &res)
	d, err := src.DescribeWorkflowExecution(ctx, rec.WorkflowID, rec.RunID)
	if err != nil {
		return false, fmt.Errorf("released rollout %s (run %s): %w", rec.RolloutID, rec.RunID, err)
	}
	info := d.GetWorkflowExecutionInfo()
	if info.GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		return false, fmt.Errorf("rollout %s (run %s) was released but has not closed after %s", rec.RolloutID, rec.RunID, releasedCloseTimeout)
	}
	rec.Status = info.GetStatus()
	if ts := info.GetCloseTime(); ts != nil {
		rec.Close = ts.AsTime()
	}
	return true, fetchResult(ctx, src, rec)
}

// closedMeanwhile handles a listed held run whose status query failed
// (queryErr). Visibility lags: the set's ledger releases acknowledged
// results after answering the acknowledgement, so a run listed as held may
// be closing or closed by the time it is queried, and a query that reaches
// a run while its last workflow task completes can go unanswered until the
// query's deadline. The run is described: closed, it is exported as any
// closed run (its result read from its history); still held, the query's
// error stands; released (phase completed), it is awaited until it closes
// when released says so; otherwise it holds no result any more (ok false).
func closedMeanwhile(ctx context.Context, src exportSource, rec *RolloutRecord, queryErr error, released releasedRuns) (ok bool, err error) {
	d, derr := src.DescribeWorkflowExecution(ctx, rec.WorkflowID, rec.RunID)
	if derr != nil {
		return false, queryErr
	}
	info := d.GetWorkflowExecutionInfo()
	if info.GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		switch phase, _ := visibility.SAKeyword(info.GetSearchAttributes(), rollout.SARolloutPhase); phase {
		case string(rollout.PhaseAwaitingAck):
			return false, queryErr
		case string(rollout.PhaseCompleted):
			if released == awaitClose {
				return awaitReleased(ctx, src, rec)
			}
		}
		return false, nil
	}
	rec.Status = info.GetStatus()
	if ts := info.GetCloseTime(); ts != nil {
		rec.Close = ts.AsTime()
	}
	return true, fetchResult(ctx, src, rec)
}

// runsChunk bounds the workflow ids of one visibility query.
const runsChunk = 100

// listRunsOf returns every run visibility holds of each of workflowIDs
// (within filter, when not empty), the latest first: one query per
// runsChunk ids, not one per rollout.
func listRunsOf(ctx context.Context, l visibility.Lister, filter string, workflowIDs []string) (map[string][]RolloutRecord, error) {
	out := map[string][]RolloutRecord{}
	for len(workflowIDs) > 0 {
		chunk := workflowIDs[:min(runsChunk, len(workflowIDs))]
		workflowIDs = workflowIDs[len(chunk):]
		quoted := make([]string, len(chunk))
		for i, id := range chunk {
			quoted[i] = strconv.Quote(id)
		}
		query := "WorkflowId IN (" + strings.Join(quoted, ", ") + ")"
		if filter != "" {
			query = filter + " AND " + query
		}
		var token []byte
		for {
			resp, err := l.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: query, NextPageToken: token})
			if err != nil {
				return nil, fmt.Errorf("list runs of %d rollouts: %w", len(chunk), err)
			}
			for _, info := range resp.GetExecutions() {
				rec := recordFromInfo(info)
				out[rec.WorkflowID] = append(out[rec.WorkflowID], rec)
			}
			if token = resp.GetNextPageToken(); len(token) == 0 {
				break
			}
		}
	}
	for _, runs := range out {
		sort.SliceStable(runs, func(i, j int) bool { return newer(runs[i], runs[j]) })
	}
	return out, nil
}

// workflowIDsOf are the distinct workflow ids of infos, in order.
func workflowIDsOf(infos []*workflowpb.WorkflowExecutionInfo) []string {
	seen := map[string]bool{}
	var ids []string
	for _, info := range infos {
		if id := info.GetExecution().GetWorkflowId(); !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	return ids
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
	return closedStatus(r.Status)
}
