package trainer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/turnstile-rl/turnstile/internal/location"
	"github.com/turnstile-rl/turnstile/internal/retention"
	"github.com/turnstile-rl/turnstile/internal/sleep"
	"github.com/turnstile-rl/turnstile/internal/storage"
	"github.com/turnstile-rl/turnstile/internal/transcript"
	"github.com/turnstile-rl/turnstile/internal/transcriptstore"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// GCRequest is one garbage collection: retention of a set's checkpoints,
// then a mark-and-sweep of the transcript store.
type GCRequest struct {
	// Roots are the checkpoint roots (directories or storage URLs). Every
	// committed checkpoint under them, of any set, holds its transcript
	// blobs.
	Roots []string
	// Set and Keep, when Keep > 0, apply Set's retention under each root
	// first: the Keep newest checkpoints and every pinned one stay.
	Set  string
	Keep int
	// Transcripts is the transcript store's location; empty: no sweep.
	Transcripts string
	// Grace is how old an unreferenced blob must be before the sweep
	// deletes it; below transcriptstore.MinGrace a writer running during
	// the sweep could lose a blob (see docs/operations.md).
	Grace time.Duration
	// QueryFor is how long the mark keeps asking one running rollout for
	// what it references before the collection stops, unswept; 0 means
	// DefaultGCQueryFor. A query is a workflow task: it waits while the
	// rollout's worker restarts or its task queue is busy.
	QueryFor time.Duration
}

// DefaultGCQueryFor is GCRequest.QueryFor's default: longer than a worker
// restart and a sticky queue's timeout together, on a busy queue.
const DefaultGCQueryFor = 2 * time.Minute

// GCResult says what a garbage collection kept and freed.
type GCResult struct {
	// Checkpoints kept and deleted by retention, and their bytes.
	CheckpointsKept      []string `json:"checkpoints_kept,omitempty"`
	CheckpointsDeleted   []string `json:"checkpoints_deleted,omitempty"`
	CheckpointBytesKept  int64    `json:"checkpoint_bytes_kept"`
	CheckpointBytesFreed int64    `json:"checkpoint_bytes_freed"`
	// Marked counts the distinct blobs the mark found referenced: by
	// MarkedCheckpoints committed checkpoints and LiveRollouts running
	// rollouts (held results included).
	Marked            int `json:"marked_blobs"`
	MarkedCheckpoints int `json:"marked_checkpoints"`
	LiveRollouts      int `json:"live_rollouts"`
	// Sweep is what the sweep of the transcript store kept and freed.
	Sweep  transcriptstore.SweepResult `json:"sweep"`
	Cutoff time.Time                   `json:"cutoff,omitzero"`
}

// GC runs r: retention first, then, with a transcript store, the mark
// (every blob of every committed checkpoint under the roots, and of every
// running rollout's boundary, pending call, unfinished prefix and held
// result) and the sweep of unreferenced blobs older than the grace
// period. Any error in the mark stops it before anything is swept. o opens
// object-store locations (nil: local directories only).
func (c *Client) GC(ctx context.Context, r GCRequest, o *storage.Opener) (GCResult, error) {
	if err := r.validate(); err != nil {
		return GCResult{}, err
	}
	markStart := time.Now()
	var res GCResult
	marked := map[transcript.Digest]bool{}
	mark := func(d transcript.Digest) { marked[d] = true }
	for _, where := range r.Roots {
		if err := c.gcRoot(ctx, r, o, where, mark, &res); err != nil {
			return res, err
		}
	}
	if r.Transcripts == "" {
		res.Marked = len(marked)
		return res, nil
	}
	store, err := transcriptstore.OpenLocation(ctx, o, r.Transcripts)
	if err != nil {
		return res, err
	}
	n, err := c.markLive(ctx, store, r.queryFor(), mark)
	if err != nil {
		return res, err
	}
	res.LiveRollouts, res.Marked = n, len(marked)
	res.Cutoff = transcriptstore.SweepCutoff(markStart, r.Grace)
	res.Sweep, err = store.Sweep(ctx, func(d transcript.Digest) bool { return marked[d] }, res.Cutoff)
	if err != nil {
		return res, fmt.Errorf("sweep %s: %w", r.Transcripts, err)
	}
	return res, nil
}

func (r GCRequest) validate() error {
	if len(r.Roots) == 0 && r.Transcripts == "" {
		return errors.New("gc: give --root (checkpoint roots) and/or --transcripts (the transcript store)")
	}
	if r.Keep < 0 {
		return fmt.Errorf("--keep %d: want 0 (no retention) or more", r.Keep)
	}
	if r.Keep > 0 {
		if err := rollout.ValidateSet(r.Set); err != nil {
			return fmt.Errorf("--keep needs the set: %w", err)
		}
	}
	if r.Grace < 0 {
		return fmt.Errorf("--grace %s: want zero or more", r.Grace)
	}
	if r.QueryFor < 0 {
		return fmt.Errorf("--query-for %s: want zero (the default) or more", r.QueryFor)
	}
	for _, root := range r.Roots {
		if !location.IsURL(root) && (root == "" || root[0] != '/') {
			return fmt.Errorf("--root %q: want an absolute directory or a storage URL", root)
		}
	}
	return nil
}

// gcRoot applies retention under one root and marks the blobs of every
// committed checkpoint left there.
func (c *Client) gcRoot(ctx context.Context, r GCRequest, o *storage.Opener, where string, mark func(transcript.Digest), res *GCResult) error {
	root, err := o.Open(ctx, where)
	if err != nil {
		return fmt.Errorf("checkpoint root %s: %w", where, err)
	}
	if r.Keep > 0 {
		ret, err := retention.Apply(ctx, root, r.Set, r.Keep)
		if err != nil {
			return err
		}
		for _, k := range ret.Kept {
			res.CheckpointsKept = append(res.CheckpointsKept, k.ID)
		}
		for _, d := range ret.Deleted {
			res.CheckpointsDeleted = append(res.CheckpointsDeleted, d.ID)
		}
		res.CheckpointBytesKept += ret.KeptBytes
		res.CheckpointBytesFreed += ret.FreedBytes
	}
	if r.Transcripts == "" {
		return nil
	}
	all, err := retention.List(ctx, root, "")
	if err != nil {
		return err
	}
	for _, cp := range all {
		if err := retention.MarkCheckpoint(ctx, root, cp.ID, mark); err != nil {
			return err
		}
		res.MarkedCheckpoints++
	}
	return nil
}

// runningRollouts is the visibility query of every running rollout.
var runningRollouts = fmt.Sprintf("WorkflowType = %q AND ExecutionStatus = 'Running'", rollout.WorkflowName)

// markLive marks every blob a running rollout references (its boundary,
// pending call, unfinished prefix and held result) and returns how many
// rollouts it asked.
func (c *Client) markLive(ctx context.Context, store *transcriptstore.Store, queryFor time.Duration, mark func(transcript.Digest)) (int, error) {
	n := 0
	var token []byte
	for {
		resp, err := c.tc.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: runningRollouts, NextPageToken: token, PageSize: 1000})
		if err != nil {
			return n, fmt.Errorf("list running rollouts: %w", err)
		}
		for _, e := range resp.GetExecutions() {
			ex := e.GetExecution()
			live, err := c.markRollout(ctx, store, ex.GetWorkflowId(), ex.GetRunId(), queryFor, mark)
			if err != nil {
				return n, err
			}
			if live {
				n++
			}
		}
		token = resp.GetNextPageToken()
		if len(token) == 0 {
			return n, nil
		}
	}
}

func (r GCRequest) queryFor() time.Duration {
	if r.QueryFor == 0 {
		return DefaultGCQueryFor
	}
	return r.QueryFor
}

// markRollout marks what one rollout run references; a run gone since the
// listing is no error (live false).
func (c *Client) markRollout(ctx context.Context, store *transcriptstore.Store, workflowID, runID string, queryFor time.Duration, mark func(transcript.Digest)) (bool, error) {
	st, live, err := c.queryRolloutStatus(ctx, workflowID, runID, queryFor)
	if err != nil || !live {
		return false, err
	}
	heads, singles, prefix := rollout.TranscriptRefs(st.Boundary, st.Result)
	for _, d := range singles {
		mark(d)
	}
	for _, h := range heads {
		list, err := store.Blobs(ctx, h)
		if err != nil {
			return false, fmt.Errorf("transcript of %s at %s: %w", workflowID, h, err)
		}
		for _, d := range list {
			mark(d)
		}
	}
	if prefix != "" {
		list, err := store.PrefixBlobs(ctx, prefix)
		if err != nil {
			return false, fmt.Errorf("model prefix of %s at %s: %w", workflowID, prefix, err)
		}
		for _, d := range list {
			mark(d)
		}
	}
	return true, nil
}

// queryRolloutStatus asks a rollout run for its status, again and again
// (1 s apart, doubling up to 10 s) for up to queryFor: a query that times
// out while the run's worker restarts is no reason to stop a collection.
// A run gone since the listing is live false. What still fails after
// queryFor stops the mark, which must not sweep what it could not read.
func (c *Client) queryRolloutStatus(ctx context.Context, workflowID, runID string, queryFor time.Duration) (rollout.Status, bool, error) {
	deadline := time.Now().Add(queryFor)
	wait, tries := time.Second, 0
	for {
		tries++
		v, err := c.tc.QueryWorkflow(ctx, workflowID, runID, rollout.QueryStatus)
		var nf *serviceerror.NotFound
		if errors.As(err, &nf) {
			return rollout.Status{}, false, nil
		}
		if err == nil {
			var st rollout.Status
			if err := v.Get(&st); err != nil {
				return rollout.Status{}, false, fmt.Errorf("decode the status of %s: %w", workflowID, err)
			}
			return st, true, nil
		}
		if ctx.Err() != nil || time.Now().Add(wait).After(deadline) {
			return rollout.Status{}, false, fmt.Errorf("query %s (run %s) for its transcript, %d tries in %s: %w", workflowID, runID, tries, queryFor, err)
		}
		if err := sleep.For(ctx, wait); err != nil {
			return rollout.Status{}, false, fmt.Errorf("query %s (run %s) for its transcript: %w", workflowID, runID, err)
		}
		wait = min(2*wait, 10*time.Second)
	}
}
