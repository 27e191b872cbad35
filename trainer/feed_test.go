package trainer

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/turnstile-rl/turnstile/internal/testsupport/temporalfake"
	"github.com/turnstile-rl/turnstile/internal/transcriptstore"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// TestFeedPages: the feed hands out held results and failures in
// completion order, a page at a time; a cursor continues after the last
// run it chose (a result acknowledged since the listing is passed over);
// a run that finished within the settle time waits; an acknowledged
// (completed) run is never a candidate.
func TestFeedPages(t *testing.T) {
	store, err := transcriptstore.Open(t.TempDir())
	require.NoError(t, err)
	head := storedRollout(t, store)
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	running, failed := enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, enumspb.WORKFLOW_EXECUTION_STATUS_FAILED
	heldResult := func(id string) *rollout.Result {
		return &rollout.Result{RolloutID: id, Set: "s1", Env: "counter", Head: head, Receipt: &rollout.Receipt{RolloutID: id, SHA256: strings.Repeat("a", 64)}}
	}
	held := func(id string, at time.Duration) listedRun {
		return listedRun{id: id, runID: "run-" + id, status: running, phase: rollout.PhaseAwaitingAck, start: t0, finishedAt: t0.Add(at), result: heldResult(id)}
	}
	acked := held("s1-f", 4*time.Second)
	acked.queried = rollout.PhaseCompleted
	s1 := &setRuns{t: t, runs: []listedRun{
		held("s1-a", 3*time.Second),
		// Failed without RolloutFinishedAt: ordered by its close time (start + 1s).
		{id: "s1-b", runID: "run-b", status: failed, start: t0.Add(1500 * time.Millisecond)},
		held("s1-c", time.Second),
		held("s1-d", 5*time.Second),
		{id: "s1-e", runID: "run-e", status: enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED, start: t0, finishedAt: t0, result: heldResult("s1-e")},
		acked,
		// Still working: not finished.
		{id: "s1-g", runID: "run-g", status: running, phase: rollout.PhaseModel, start: t0},
	}}
	src := s1.client()
	req := FeedRequest{Set: "s1", Max: 2, Settle: time.Second, Now: t0.Add(5500 * time.Millisecond)}
	var pages [][]string
	var mores []int
	for i := range 4 {
		if i == 3 {
			req.Now = req.Now.Add(time.Second) // s1-d has settled
		}
		page, err := feedPage(context.Background(), src, store, req)
		require.NoError(t, err)
		var got []string
		for _, item := range page.Items {
			var l ExportLine
			require.NoError(t, json.Unmarshal(item, &l))
			got = append(got, l.RolloutID+"/"+l.Status)
		}
		pages, mores = append(pages, got), append(mores, page.More)
		req.After = page.Next
	}
	want := "[[s1-c/completed s1-b/failed] [s1-a/completed] [] [s1-d/completed]] more [3 1 1 0]"
	got := fmt.Sprintf("%v more %v", pages, mores)
	assert.Equal(t, want, got, "pages %s, want %s", got, want)
}

// TestFeedPassesOverLedgerAcks: a result the set's acknowledgement ledger
// holds acknowledged (its rollout not released yet, or released since it
// was read) is not delivered again, even from the start of the feed; a
// ledger receipt of another result of the same rollout (an older attempt)
// does not hide the result held now.
func TestFeedPassesOverLedgerAcks(t *testing.T) {
	store, err := transcriptstore.Open(t.TempDir())
	require.NoError(t, err)
	head := storedRollout(t, store)
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	rc := func(id string, digit string) rollout.Receipt {
		return rollout.Receipt{RolloutID: id, Attempt: 1, SHA256: strings.Repeat(digit, 64)}
	}
	held := func(id string, at time.Duration) listedRun {
		r := rc(id, "a")
		return listedRun{id: id, runID: "run-" + id, status: enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, phase: rollout.PhaseAwaitingAck,
			start: t0, finishedAt: t0.Add(at), result: &rollout.Result{RolloutID: id, Set: "s1", Env: "counter", Head: head, Receipt: &r}}
	}
	s1 := &setRuns{t: t, runs: []listedRun{held("s1-a", time.Second), held("s1-b", 2*time.Second), held("s1-c", 3*time.Second)},
		settled: []rollout.Receipt{rc("s1-b", "a"), rc("s1-c", "b")}}
	page, err := feedPage(context.Background(), s1.client(), store, FeedRequest{Set: "s1", Max: 10, Now: t0.Add(time.Minute)})
	require.NoError(t, err)
	var got []string
	for _, item := range page.Items {
		var l ExportLine
		require.NoError(t, json.Unmarshal(item, &l))
		got = append(got, l.RolloutID)
	}
	assert.Equal(t, []string{"s1-a", "s1-c"}, got, "s1-b is acknowledged in the ledger")
	assert.Equal(t, "s1-c", page.Next.RolloutID, "the cursor passes the acknowledged result")
}

// TestFeedReadsAfterTheCursor: a page after a cursor lists only the runs
// finished at or after the cursor's time, not the failures and held
// results behind it, however many.
func TestFeedReadsAfterTheCursor(t *testing.T) {
	store, err := transcriptstore.Open(t.TempDir())
	require.NoError(t, err)
	head := storedRollout(t, store)
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	held := func(id string, at time.Duration) listedRun {
		return listedRun{id: id, runID: "run-" + id, status: enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, phase: rollout.PhaseAwaitingAck, start: t0, finishedAt: t0.Add(at),
			result: &rollout.Result{RolloutID: id, Set: "s1", Env: "counter", Head: head, Receipt: &rollout.Receipt{RolloutID: id, SHA256: strings.Repeat("a", 64)}}}
	}
	s1 := &setRuns{t: t}
	for i := range 50 { // behind the cursor: failed (no RolloutFinishedAt) or held
		s1.runs = append(s1.runs, listedRun{id: fmt.Sprintf("s1-f%02d", i), runID: fmt.Sprintf("run-f%02d", i), status: enumspb.WORKFLOW_EXECUTION_STATUS_FAILED, start: t0})
		s1.runs = append(s1.runs, held(fmt.Sprintf("s1-h%02d", i), time.Duration(i)*time.Millisecond))
	}
	s1.runs = append(s1.runs, held("s1-x", time.Minute), held("s1-y", 2*time.Minute), held("s1-z", 3*time.Minute))
	src := s1.client()
	cursor := FeedPosition{At: t0.Add(time.Minute).UnixMilli(), RolloutID: "s1-x", RunID: "run-s1-x"}
	page, err := feedPage(context.Background(), src, store, FeedRequest{Set: "s1", After: cursor, Max: 1, Now: t0.Add(time.Hour)})
	require.NoError(t, err)
	require.Len(t, page.Items, 1)
	var l ExportLine
	require.NoError(t, json.Unmarshal(page.Items[0], &l))
	assert.Equal(t, "s1-y", l.RolloutID)
	assert.Equal(t, 1, page.More, "s1-z is after the page")
	assert.Len(t, s1.bounded, 3, "the listing served the runs from the cursor's time only (s1-x, s1-y, s1-z)")
}

// TestFeedCompleteGroups: with CompleteGroups a page ends before the first
// member of a running group (the cursor stays before it, so it comes once
// its group is complete); a failed group's held and failed members are
// delivered with their group's status; a rollout outside a group is not
// affected. Without it, every finished run is delivered at once.
func TestFeedCompleteGroups(t *testing.T) {
	store, err := transcriptstore.Open(t.TempDir())
	require.NoError(t, err)
	head := storedRollout(t, store)
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	held := func(id, group string, at time.Duration) listedRun {
		return listedRun{id: id, runID: "run-" + id, status: enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, phase: rollout.PhaseAwaitingAck, start: t0, finishedAt: t0.Add(at), group: group,
			result: &rollout.Result{RolloutID: id, Set: "s1", Env: "counter", Head: head, Receipt: &rollout.Receipt{RolloutID: id, SHA256: strings.Repeat("a", 64)}}}
	}
	s1 := &setRuns{t: t, runs: []listedRun{
		held("s1-a", "", time.Second),
		held("s1-f1", "gf", 2*time.Second),
		{id: "s1-f2", runID: "run-f2", status: enumspb.WORKFLOW_EXECUTION_STATUS_FAILED, start: t0.Add(2 * time.Second), finishedAt: t0.Add(3 * time.Second), group: "gf"},
		held("s1-r1", "gr", 4*time.Second),
		held("s1-b", "", 5*time.Second),
	}, ledgers: map[string]ExportGroup{
		"gf": {Status: string(rollout.GroupFailed), Size: 2, Reason: "retry budget spent"},
		"gr": {Status: string(rollout.GroupRunning), Size: 2},
	}}
	read := func(complete bool, after FeedPosition) ([]string, FeedPage) {
		page, err := feedPage(context.Background(), s1.client(), store, FeedRequest{Set: "s1", Max: 10, Now: t0.Add(time.Hour), After: after, CompleteGroups: complete})
		require.NoError(t, err)
		var got []string
		for _, item := range page.Items {
			var l ExportLine
			require.NoError(t, json.Unmarshal(item, &l))
			g := "-"
			if l.GroupStatus != nil {
				g = l.GroupStatus.Status
			}
			got = append(got, l.RolloutID+"/"+l.Status+"/"+g)
		}
		return got, page
	}
	got, page := read(true, FeedPosition{})
	assert.Equal(t, []string{"s1-a/completed/-", "s1-f1/completed/failed", "s1-f2/failed/failed"}, got)
	assert.Equal(t, "s1-f2", page.Next.RolloutID, "the cursor stays before the running group's member")
	assert.Equal(t, 2, page.More, "s1-r1 and s1-b wait")
	got, page = read(true, page.Next)
	assert.Empty(t, got, "still running")
	assert.Equal(t, "s1-f2", page.Next.RolloutID)
	s1.ledgers["gr"] = ExportGroup{Status: string(rollout.GroupComplete), Size: 2}
	got, _ = read(true, page.Next)
	assert.Equal(t, []string{"s1-r1/completed/complete", "s1-b/completed/-"}, got, "once complete, the group comes, then what waited behind it")
	s1.ledgers["gr"] = ExportGroup{Status: string(rollout.GroupRunning), Size: 2}
	got, _ = read(false, FeedPosition{})
	assert.Len(t, got, 5, "without complete_groups every finished run comes: %v", got)
}

// TestChooseFeedRunsKeepsTheEarliest: one pass over runs listed in any
// order keeps exactly the earliest Max after the cursor.
func TestChooseFeedRunsKeepsTheEarliest(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	var infos []*workflowpb.WorkflowExecutionInfo
	var ats []int64
	for i := range 300 {
		at := rng.Int63n(1_000_000)
		ats = append(ats, at)
		infos = append(infos, &workflowpb.WorkflowExecutionInfo{
			Execution: &commonpb.WorkflowExecution{WorkflowId: rollout.WorkflowID(fmt.Sprintf("s-%04d", i)), RunId: "r"},
			Status:    enumspb.WORKFLOW_EXECUTION_STATUS_FAILED,
			CloseTime: timestamppb.New(time.UnixMilli(at)),
		})
	}
	sort.Slice(ats, func(i, j int) bool { return ats[i] < ats[j] })
	after := FeedPosition{At: ats[9], RolloutID: "~"} // past the tenth
	lister := &temporalfake.Client{}
	for len(infos) > 0 {
		n := min(50, len(infos))
		lister.Pages, infos = append(lister.Pages, infos[:n]), infos[n:]
	}
	chosen, more, err := chooseFeedRuns(context.Background(), lister, FeedRequest{Set: "s", After: after, Max: 7})
	require.NoError(t, err)
	var got []int64
	for _, c := range chosen {
		got = append(got, c.pos.At)
	}
	require.Equal(t, fmt.Sprint(ats[10:17]), fmt.Sprint(got), "chose %v (more %d), want %v (more %d)", got, more, ats[10:17], 300-17)
	require.Equal(t, 300-17, more, "chose %v (more %d), want %v (more %d)", got, more, ats[10:17], 300-17)
}

func TestFeedPositionOrder(t *testing.T) {
	ps := []FeedPosition{{At: 2, RolloutID: "a"}, {At: 1, RolloutID: "b"}, {At: 1, RolloutID: "a", RunID: "y"}, {At: 1, RolloutID: "a", RunID: "x"}}
	sort.Slice(ps, func(i, j int) bool { return ps[i].Before(ps[j]) })
	assert.Equal(t, "[{1 a x} {1 a y} {1 b } {2 a }]", fmt.Sprint(ps), "order %v", ps)
	require.False(t, (FeedPosition{}).Before(FeedPosition{}), "the zero position is before every run and not before itself")
	require.True(t, (FeedPosition{}).Before(FeedPosition{At: 0, RolloutID: "a"}), "the zero position is before every run and not before itself")
}
