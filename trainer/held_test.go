package trainer

import (
	"encoding/json"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"

	"github.com/turnstile-rl/turnstile/internal/transcript"
	"github.com/turnstile-rl/turnstile/internal/transcriptstore"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// heldRuns are listed runs holding results: named ones stored theirs
// under the receipt's digest (as the StoreResult activity does) and say
// so in RolloutReceipt; unnamed ones (started before the flag) do not.
type heldRuns struct {
	t     *testing.T
	store *transcriptstore.Store
	head  transcript.Digest
	t0    time.Time
}

func newHeldRuns(t *testing.T) heldRuns {
	store, err := transcriptstore.Open(t.TempDir())
	require.NoError(t, err)
	return heldRuns{t: t, store: store, head: storedRollout(t, store), t0: time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)}
}

// run is a run of rollout id holding its result (attempt 1); named, it
// stored the result (when stored) and names it.
func (h heldRuns) run(id string, at time.Duration, named, stored bool) listedRun {
	res := rollout.Result{RolloutID: id, Set: "s1", Env: "counter", Attempt: 1, Reward: float64(at / time.Second), Head: h.head}
	rc, err := rollout.NewReceipt(res)
	require.NoError(h.t, err)
	r := listedRun{id: id, runID: "run-" + id, attempt: 1, status: enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, phase: rollout.PhaseAwaitingAck,
		start: h.t0, finishedAt: h.t0.Add(at)}
	if named {
		r.named = rc.SHA256
	}
	if stored {
		data, err := rollout.ResultJSON(res)
		require.NoError(h.t, err)
		_, err = h.store.Put(h.t.Context(), data)
		require.NoError(h.t, err)
	}
	res.Receipt = &rc
	r.result = &res
	return r
}

// TestFeedReadsHeldResultsFromTheStore: a held result its run named is
// delivered from visibility and the store, with no status query of the run
// (a workflow task on the rollout queue); a run that named none (started
// before runs named their results), or whose result the store does not
// have, is queried as before. Every line carries its receipt and result.
func TestFeedReadsHeldResultsFromTheStore(t *testing.T) {
	h := newHeldRuns(t)
	s1 := &setRuns{t: t, runs: []listedRun{
		h.run("s1-a", time.Second, true, true),
		h.run("s1-b", 2*time.Second, false, false), // an old run: no RolloutReceipt
		h.run("s1-c", 3*time.Second, true, true),
		h.run("s1-d", 4*time.Second, true, false), // named, not in this store
	}}
	src := s1.client()
	page, err := feedPage(t.Context(), src, h.store, FeedRequest{Set: "s1", Max: 10, Now: h.t0.Add(time.Minute)})
	require.NoError(t, err)
	require.Len(t, page.Items, 4)
	for i, item := range page.Items {
		var l ExportLine
		require.NoError(t, json.Unmarshal(item, &l))
		want := s1.runs[i].result
		assert.Equal(t, want.RolloutID, l.RolloutID)
		assert.True(t, l.Held, "%s held", l.RolloutID)
		require.NotNil(t, l.Receipt, l.RolloutID)
		assert.Equal(t, *want.Receipt, *l.Receipt, "%s: the receipt of the held result", l.RolloutID)
		require.NotNil(t, l.Reward, l.RolloutID)
		assert.Equal(t, want.Reward, *l.Reward, l.RolloutID)
	}
	assert.Equal(t, []string{rollout.WorkflowID("s1-b"), rollout.WorkflowID("s1-d")}, sortedCopy(src.Queried()),
		"only the run that named no stored result, and the one whose result is not in the store, are queried")
}

// TestFeedRefusesAStoredResultOfAnotherRollout: a digest naming another
// rollout's result is an error naming both, not a line.
func TestFeedRefusesAStoredResultOfAnotherRollout(t *testing.T) {
	h := newHeldRuns(t)
	other := h.run("s1-x", time.Second, true, true)
	r := h.run("s1-a", time.Second, true, true)
	r.named = other.named
	_, err := feedPage(t.Context(), (&setRuns{t: t, runs: []listedRun{r}}).client(), h.store, FeedRequest{Set: "s1", Max: 10, Now: h.t0.Add(time.Minute)})
	require.ErrorContains(t, err, "is the result of rollout s1-x attempt 1")
}

// TestPlanAckWithoutQueries: acknowledging results their runs named plans
// from visibility alone (the receipt is RolloutId, RolloutAttempt and
// RolloutReceipt); a wrong digest is refused as before; an old run is
// queried.
func TestPlanAckWithoutQueries(t *testing.T) {
	h := newHeldRuns(t)
	a, b := h.run("s1-a", time.Second, true, false), h.run("s1-b", 2*time.Second, false, false)
	s1 := &setRuns{t: t, runs: []listedRun{a, b}}
	src := s1.client()
	c := New(src, "q")
	plan, err := c.PlanAck(t.Context(), AckRequest{Set: "s1", Receipts: []ReceiptLine{{Line: 1, Receipt: *a.result.Receipt}, {Line: 2, Receipt: *b.result.Receipt}}})
	require.NoError(t, err)
	assert.Equal(t, []rollout.Receipt{*a.result.Receipt, *b.result.Receipt}, plan.Send)
	require.Len(t, src.Queried(), 1, "only the old run is queried")
	assert.Equal(t, rollout.WorkflowID("s1-b"), src.Queried()[0])

	wrong := *a.result.Receipt
	wrong.SHA256 = strings.Repeat("f", 64)
	_, err = c.PlanAck(t.Context(), AckRequest{Set: "s1", Receipts: []ReceiptLine{{Line: 1, Receipt: wrong}}})
	var conflict *ConflictError
	require.ErrorAs(t, err, &conflict)
	assert.Contains(t, err.Error(), "digest mismatch")
	require.Len(t, src.Queried(), 1, "no query for the named run")
}

func sortedCopy(s []string) []string {
	out := append([]string{}, s...)
	sort.Strings(out)
	return out
}
