package trainer

import (
	"bytes"
	"container/heap"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	workflowpb "go.temporal.io/api/workflow/v1"

	"github.com/turnstile-rl/turnstile/internal/ackledger"
	"github.com/turnstile-rl/turnstile/internal/visibility"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// The results feed hands a trainer the finished rollouts of a set in
// completion order, a page at a time: results held for acknowledgement
// (with their receipts) and rollouts that failed (with their failure). A
// held result stays in the feed until it is acknowledged, so a trainer that
// starts over from the beginning gets every unacknowledged result again; an
// acknowledged one is passed over: the set's acknowledgement ledger is read
// after the held results are (a result acknowledged, its rollout not yet
// released, still holds it), and its release closes the run, which never
// matches again.
//
// SQL visibility (the dev server, PostgreSQL, MySQL) cannot ORDER BY, so a
// page is chosen by one pass over the set's finished runs at or after the
// cursor's time (RolloutFinishedAt, or the close time), keeping the earliest
// Max after the cursor in a bounded heap: memory is O(Max), the pass
// O(runs finished after the cursor) — not O(set): failures and results
// behind the cursor are not read again — and only the chosen runs'
// trajectories are read.

// feedQuery selects the runs the feed delivers: running runs holding a
// result, and runs that ended any way but completing (an acknowledged
// result completes its run and leaves the feed).
var feedQuery = fmt.Sprintf(`((ExecutionStatus = "Running" AND %s = %q) OR ExecutionStatus = "Failed" OR ExecutionStatus = "Terminated" OR ExecutionStatus = "TimedOut" OR ExecutionStatus = "Canceled")`,
	rollout.SARolloutPhase, rollout.PhaseAwaitingAck)

// feedQueryAfter is feedQuery narrowed to the runs at or after p's time:
// a run's position is its RolloutFinishedAt, or its close time without
// one, so either at or after p's time keeps every run after p (the few at
// p's millisecond before it are dropped by the caller). A page then reads
// the runs after the cursor, not every failure and held result of the set.
func feedQueryAfter(p FeedPosition) string {
	if p.IsZero() {
		return feedQuery
	}
	at := visibility.VisibilityTime(time.UnixMilli(p.At))
	return fmt.Sprintf(`%s AND (%s >= %s OR CloseTime >= %[3]s)`, feedQuery, rollout.SARolloutFinishedAt, at)
}

// FeedPosition is where a finished run stands in completion order: the time
// it finished (RolloutFinishedAt; for runs without it, the close time, or
// the start time of a running one), then its rollout id and run id.
type FeedPosition struct {
	At        int64  `json:"at"` // Unix milliseconds
	RolloutID string `json:"rollout_id"`
	RunID     string `json:"run_id"`
}

// IsZero reports the position before every run.
func (p FeedPosition) IsZero() bool { return p == FeedPosition{} }

// Before orders positions.
func (p FeedPosition) Before(q FeedPosition) bool {
	if p.At != q.At {
		return p.At < q.At
	}
	if p.RolloutID != q.RolloutID {
		return p.RolloutID < q.RolloutID
	}
	return p.RunID < q.RunID
}

// FeedRequest asks for the next page of a set's feed.
type FeedRequest struct {
	Set string
	// After is the position of the last run of the previous page; zero
	// starts at the oldest run not yet acknowledged.
	After FeedPosition
	// Max bounds the page (1..MaxFeedPage).
	Max int
	// Settle delays a run until it finished at least this long before Now:
	// a visibility record written late could otherwise land behind a cursor
	// that already passed its position. Zero delivers at once.
	Settle time.Duration
	Now    time.Time
	// CompleteGroups delivers whole groups only: a page ends before the
	// first member of a group still running (it waits, and every run after
	// it, until its group is complete or failed). A member of a failed
	// group is delivered, its group_status saying "failed": held, its
	// receipt is acknowledged like any other (and not trained on), or its
	// rollout would hold it for ever. Rollouts outside a group are not
	// affected.
	CompleteGroups bool
}

// MaxFeedPage bounds one page of the feed.
const MaxFeedPage = 1000

// FeedPage is one page of the feed.
type FeedPage struct {
	// Items are export lines (ExportLine JSON), in completion order.
	Items []json.RawMessage
	// Next is the position to continue after: the last run this page
	// chose, delivered or passed over (acknowledged meanwhile, or replaced
	// by a later attempt); After when it chose none.
	Next FeedPosition
	// More counts finished runs after Next not in this page (some may be
	// settling still).
	More int
}

// Feed returns the next page of r.Set's feed, reading trajectories from
// store (the worker's transcript directory).
func (c *Client) Feed(ctx context.Context, store TranscriptReader, r FeedRequest) (FeedPage, error) {
	if err := rollout.ValidateSet(r.Set); err != nil {
		return FeedPage{}, err
	}
	if r.Max < 1 || r.Max > MaxFeedPage {
		return FeedPage{}, fmt.Errorf("feed page of %d: want 1..%d", r.Max, MaxFeedPage)
	}
	return feedPage(ctx, c.tc, store, r)
}

// feedSource is what a feed page reads: visibility, the rollouts, and the
// set's acknowledgement ledger.
type feedSource interface {
	exportSource
	ackledger.Querier
}

func feedPage(ctx context.Context, src feedSource, store TranscriptReader, r FeedRequest) (FeedPage, error) {
	chosen, more, err := chooseFeedRuns(ctx, src, r)
	if err != nil {
		return FeedPage{}, err
	}
	page := FeedPage{Next: r.After, More: more, Items: []json.RawMessage{}}
	if len(chosen) == 0 {
		return page, nil
	}
	infos := make([]*workflowpb.WorkflowExecutionInfo, len(chosen))
	for i, c := range chosen {
		infos[i] = c.info
	}
	fence, err := visibility.ReadSetFence(ctx, src, r.Set)
	if err != nil {
		return FeedPage{}, fmt.Errorf("feed of set %q: %w", r.Set, err)
	}
	lines, err := buildWindow(ctx, exportJob{src: src, store: store, set: r.Set, groups: newGroupCache(src, r.Set), fence: fence}, infos)
	if err != nil {
		return FeedPage{}, fmt.Errorf("feed of set %q: %w", r.Set, err)
	}
	if r.CompleteGroups {
		lines, chosen, page.More = untilRunningGroup(lines, chosen, page.More)
		if len(chosen) == 0 {
			return page, nil
		}
	}
	acked, err := ackedHeld(ctx, src, r.Set, lines)
	if err != nil {
		return FeedPage{}, fmt.Errorf("feed of set %q: %w", r.Set, err)
	}
	for _, l := range lines {
		if l.receipt != nil && acked[l.receipt.RolloutID] == *l.receipt {
			continue // acknowledged, its rollout not released yet: passed over
		}
		if l.data != nil {
			page.Items = append(page.Items, bytes.TrimRight(l.data, "\n"))
		}
	}
	page.Next = chosen[len(chosen)-1].pos
	return page, nil
}

// untilRunningGroup cuts a page before its first member of a running
// group; the runs cut off count in more.
func untilRunningGroup(lines []builtLine, chosen []feedRun, more int) ([]builtLine, []feedRun, int) {
	for i, l := range lines {
		if l.data != nil && l.groupRunning {
			return lines[:i], chosen[:i], more + len(chosen) - i
		}
	}
	return lines, chosen, more
}

// ackedHeld reads, after the rollouts were seen holding their results,
// which of those results the set's acknowledgement ledger knows
// acknowledged (pending release, or released since they were read).
func ackedHeld(ctx context.Context, q ackledger.Querier, set string, lines []builtLine) (map[string]rollout.Receipt, error) {
	var ids []string
	for _, l := range lines {
		if l.receipt != nil {
			ids = append(ids, l.receipt.RolloutID)
		}
	}
	return ackledger.Settled(ctx, q, set, ids)
}

// chooseFeedRuns pages through the set's finished runs once and returns
// the earliest r.Max after r.After that have settled, in order, and how
// many other runs after r.After it saw.
func chooseFeedRuns(ctx context.Context, src visibility.Lister, r FeedRequest) ([]feedRun, int, error) {
	h := &feedHeap{}
	seen := 0
	settled := r.Now.Add(-r.Settle).UnixMilli()
	err := visibility.ListSet(ctx, src, r.Set, feedQueryAfter(r.After), func(info *workflowpb.WorkflowExecutionInfo) error {
		pos := PositionOf(info)
		if !r.After.Before(pos) {
			return nil
		}
		seen++
		if r.Settle > 0 && pos.At > settled {
			return nil
		}
		if h.Len() < r.Max {
			heap.Push(h, feedRun{pos: pos, info: info})
		} else if pos.Before((*h)[0].pos) {
			(*h)[0] = feedRun{pos: pos, info: info}
			heap.Fix(h, 0)
		}
		return nil
	})
	if err != nil {
		return nil, 0, fmt.Errorf("feed of set %q: %w", r.Set, err)
	}
	out := make([]feedRun, h.Len())
	for i := len(out) - 1; i >= 0; i-- {
		out[i] = heap.Pop(h).(feedRun)
	}
	return out, seen - len(out), nil
}

// PositionOf is a listed run's position in completion order.
func PositionOf(info *workflowpb.WorkflowExecutionInfo) FeedPosition {
	sa := info.GetSearchAttributes()
	p := FeedPosition{RunID: info.GetExecution().GetRunId()}
	p.RolloutID, _ = visibility.SAKeyword(sa, rollout.SARolloutID)
	if p.RolloutID == "" {
		p.RolloutID = strings.TrimPrefix(info.GetExecution().GetWorkflowId(), rollout.WorkflowID(""))
	}
	at, ok := visibility.SATime(sa, rollout.SARolloutFinishedAt)
	switch {
	case ok:
		p.At = at.UnixMilli()
	case info.GetCloseTime() != nil:
		p.At = info.GetCloseTime().AsTime().UnixMilli()
	case info.GetStartTime() != nil:
		p.At = info.GetStartTime().AsTime().UnixMilli()
	}
	return p
}

// feedRun is a candidate of a page.
type feedRun struct {
	pos  FeedPosition
	info *workflowpb.WorkflowExecutionInfo
}

// feedHeap is a max-heap by position: its root is the latest of the runs
// kept, the one a earlier run replaces.
type feedHeap []feedRun

func (h feedHeap) Len() int           { return len(h) }
func (h feedHeap) Less(i, j int) bool { return h[j].pos.Before(h[i].pos) }
func (h feedHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *feedHeap) Push(x any)        { *h = append(*h, x.(feedRun)) }
func (h *feedHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
