package model

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.temporal.io/sdk/activity"

	"github.com/turnstile-rl/turnstile/internal/failpoint"
	"github.com/turnstile-rl/turnstile/internal/heartbeat"
	"github.com/turnstile-rl/turnstile/internal/transcript"
	"github.com/turnstile-rl/turnstile/internal/transcriptstore"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// Defaults of how often a streamed generation's prefix is made durable
// (Activities.PrefixTokens, PrefixInterval, HeartbeatThrottle). They are
// chosen, not yet measured against streaming's cost: a crash at ~50
// tokens/s loses at most 64 tokens or 2 seconds of generation, for one
// chunk write and one heartbeat per interval per generation in flight.
const (
	DefaultPrefixTokens   = 64
	DefaultPrefixInterval = 2 * time.Second
	// DefaultHeartbeatThrottle is the worker's MaxHeartbeatThrottleInterval:
	// the SDK sends a heartbeat at once when the previous one is at least
	// this old, and batches it otherwise. Flushes by time alone are spaced
	// by at least this much; a flush by token count is not, and a retry
	// finds its chunk through the call's prefix index when the batched
	// heartbeat never got out.
	DefaultHeartbeatThrottle = 200 * time.Millisecond
)

// prefixWriter makes a streamed generation's prefix durable as it grows:
// every PrefixTokens tokens (before reading on) or PrefixInterval (never
// closer than the heartbeat throttle) it stores the tokens received since
// the last flush as one chunk chained to the previous one, replaces the
// call's prefix index with the chain's last digest, then heartbeats that
// digest and the token count. Between flushes it keeps the
// call alive with the same details, so a heartbeat never names less than
// what is durable.
type prefixWriter struct {
	a      *Activities
	store  *transcriptstore.Store
	in     rollout.CallModelInput
	callID string
	// index names the prefix index (transcript.PrefixIndex) every flush
	// replaces: call is the identity of this call's attempts, key the
	// index's key derived from it.
	index prefixIndexRef

	mu sync.Mutex
	// The chain: its first chunk's fields, its last chunk and how many
	// tokens it holds; segment is the request generating now.
	prompt    []int64
	model     string
	discarded int
	last      transcript.Digest
	durable   int
	segment   int
	// restarted: the next flush starts a new chain (the call started over);
	// until then last names the discarded prefix.
	restarted bool
	// off: no prefix can be kept (the endpoint reports no prompt ids or no
	// token text); the call still streams, and a cut starts it over.
	off bool
	// The tokens received since the last flush, and the version of the
	// request that sampled them.
	pending tokenPiece
	version string
	// lastFlush and lastBeat are when the last flush and the last
	// heartbeat happened.
	lastFlush, lastBeat time.Time
}

func (a *Activities) newPrefixWriter(ctx context.Context, store *transcriptstore.Store, in rollout.CallModelInput, callID string) *prefixWriter {
	now := time.Now()
	return &prefixWriter{a: a, store: store, in: in, callID: callID, index: prefixIndexOf(ctx, in, callID), lastFlush: now, lastBeat: now}
}

// resume makes w continue the chain of p, whose last chunk ref names:
// the next request is a new segment of it.
func (w *prefixWriter) resume(p transcript.Prefix, ref rollout.ModelPrefix) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.prompt, w.model, w.discarded = p.PromptTokenIDs, p.Model, p.Discarded
	w.last, w.durable = ref.Record, ref.Tokens
	if n := len(p.Segments); n > 0 {
		w.segment = p.Segments[n-1].Segment + 1
	}
}

// restart makes w start a new chain after discarding a prefix of n tokens
// (and whatever that one had discarded): the call starts over. The old
// prefix stays what heartbeats name until the new chain's first flush.
func (w *prefixWriter) restart(p transcript.Prefix, old rollout.ModelPrefix) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.discarded = p.Discarded + len(p.TokenIDs)
	w.prompt, w.model, w.segment = nil, "", 0
	w.last, w.durable = old.Record, old.Tokens
	w.restarted = true
}

// started is the first chunk of a fresh generation: its prompt ids and
// model name. Without prompt ids no prefix can be continued.
func (w *prefixWriter) started(prompt []int64, model string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(prompt) == 0 {
		w.off = true
		return
	}
	w.prompt, w.model = prompt, model
}

// add takes the tokens of one chunk, sampled by version, and flushes when
// the interval is reached.
func (w *prefixWriter) add(ctx context.Context, p tokenPiece, version string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(p.ids) == 0 {
		return nil
	}
	if w.a.Received != nil {
		w.a.Received.Add(int64(len(p.ids)))
	}
	if !p.textKnown || len(p.lps) != len(p.ids) {
		// Without the tokens' own text and log-probs a prefix could not be
		// continued into the record an uninterrupted call writes: keep none.
		w.off = true
	}
	if w.off {
		return nil
	}
	w.pending.ids = append(w.pending.ids, p.ids...)
	w.pending.lps = append(w.pending.lps, p.lps...)
	w.pending.text += p.text
	w.version = version
	// PrefixTokens received: flush before the stream is read on, whatever
	// the heartbeat throttle (the index names the chunk even when its
	// heartbeat is batched), so the worker never reads on holding more
	// than PrefixTokens-1 tokens that are not durable. The time interval
	// alone flushes no closer than the throttle.
	now := time.Now()
	byTokens := len(w.pending.ids) >= w.a.prefixTokens()
	byTime := now.Sub(w.lastFlush) >= w.a.prefixInterval() && now.Sub(w.lastBeat) >= w.a.heartbeatThrottle()
	if !byTokens && !byTime {
		return nil
	}
	return w.flushLocked(ctx, true)
}

// undurable is how many tokens the writer holds that are not durable yet.
func (w *prefixWriter) undurable() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.pending.ids)
}

// flush makes everything received durable (a final flush before the call
// returns cut), without heartbeating when beat is false.
func (w *prefixWriter) flush(ctx context.Context, beat bool) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.off || len(w.pending.ids) == 0 {
		return nil
	}
	return w.flushLocked(ctx, beat)
}

func (w *prefixWriter) flushLocked(ctx context.Context, beat bool) error {
	c := transcript.PrefixChunk{
		Start: w.durable, Segment: w.segment, PolicyVersion: w.version,
		TokenIDs: w.pending.ids, LogProbs: w.pending.lps, Text: w.pending.text,
	}
	if w.restarted || w.last == "" {
		// The first chunk of a chain: it starts at token 0.
		c.Start, c.Segment = 0, 0
		c.Head, c.PromptTokenIDs, c.Model, c.Discarded = w.in.Head, w.prompt, w.model, w.discarded
	} else {
		c.Parent = w.last
	}
	d, err := w.store.PutPrefixChunk(ctx, c)
	if err != nil {
		return rollout.StoreError("store prefix of "+w.callID, err)
	}
	durable := c.Start + len(c.TokenIDs)
	x := transcript.PrefixIndex{Call: w.index.call, Head: w.in.Head, Record: d, Tokens: durable}
	if err := w.store.PutPrefixIndex(ctx, w.index.key, x); err != nil {
		return rollout.StoreError("store prefix index of "+w.callID, err)
	}
	w.last, w.durable, w.restarted = d, durable, false
	w.pending = tokenPiece{}
	w.lastFlush = time.Now()
	w.a.Failpoints.Hit(failpoint.WorkerModelPrefixWrittenBeforeHeartbeat)
	if beat {
		w.beatLocked(ctx)
		w.a.Failpoints.Hit(failpoint.WorkerModelPrefixHeartbeatBeforeNextChunk)
	}
	return nil
}

// keepalive heartbeats the durable prefix when no heartbeat went out for
// the activity's heartbeat interval.
func (w *prefixWriter) keepalive(ctx context.Context) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if time.Since(w.lastBeat) >= w.a.heartbeatEvery() {
		w.beatLocked(ctx)
	}
}

func (w *prefixWriter) beatLocked(ctx context.Context) {
	if ref := w.refLocked(); ref != nil {
		w.a.heartbeat(ctx, *ref)
	} else {
		w.a.heartbeat(ctx, w.callID)
	}
	w.lastBeat = time.Now()
}

// ref names the durable prefix; nil when there is none.
func (w *prefixWriter) ref() *rollout.ModelPrefix {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.refLocked()
}

func (w *prefixWriter) refLocked() *rollout.ModelPrefix {
	if w.last == "" {
		return nil
	}
	return &rollout.ModelPrefix{CallID: w.callID, Turn: w.in.Turn, Record: w.last, Tokens: w.durable}
}

// keepAlive runs keepalive on a ticker until stop is called.
func (w *prefixWriter) keepAlive(ctx context.Context) (stop func()) {
	return heartbeat.Run(ctx, w.a.heartbeatEvery()/2, w.keepalive)
}

// startingPrefix is the durable prefix this call continues: its heartbeat
// details (a retry of the activity) or, without those, the prefix its input
// names (cut by a checkpoint). nil when there is none.
func (a *Activities) startingPrefix(ctx context.Context, in rollout.CallModelInput, callID string) (*rollout.ModelPrefix, error) {
	var hb rollout.ModelPrefix
	if activity.HasHeartbeatDetails(ctx) && activity.GetHeartbeatDetails(ctx, &hb) == nil && hb.CallID == callID && hb.Record != "" {
		if hb.Turn != in.Turn {
			return nil, rollout.BadInput("%s: heartbeat names a prefix of turn %d", callID, hb.Turn)
		}
		return &hb, nil
	}
	if p := in.Prefix; p != nil {
		if p.Turn != in.Turn {
			return nil, rollout.BadInput("%s: input prefix is of turn %d", callID, p.Turn)
		}
		if err := p.Validate(); err != nil {
			return nil, rollout.BadInput("%s: input prefix: %v", callID, err)
		}
		return p, nil
	}
	return nil, nil
}

// loadPrefix reads a starting prefix and checks it is of this call's
// conversation and holds what its reference says.
func loadPrefix(ctx context.Context, store *transcriptstore.Store, in rollout.CallModelInput, ref rollout.ModelPrefix) (transcript.Prefix, error) {
	p, err := store.Prefix(ctx, ref.Record)
	if err != nil {
		return transcript.Prefix{}, rollout.StoreError("load prefix "+string(ref.Record), err)
	}
	switch {
	case p.Head != in.Head:
		return transcript.Prefix{}, fmt.Errorf("%w: prefix %s answers conversation %s, the call %s", errForeignPrefix, ref.Record, p.Head, in.Head)
	case len(p.TokenIDs) != ref.Tokens:
		return transcript.Prefix{}, fmt.Errorf("%w: prefix %s holds %d tokens, its reference says %d", errForeignPrefix, ref.Record, len(p.TokenIDs), ref.Tokens)
	}
	return p, nil
}

// errForeignPrefix: the prefix a call was given is not of its conversation.
var errForeignPrefix = errors.New("prefix does not belong to this call")

// prefixIndexRef names a call's prefix index: call is the identity of the
// activity whose attempts share it (workflow, run, activity id) and of the
// model call, key the index's key derived from it.
type prefixIndexRef struct {
	call, key string
}

// prefixIndexOf is the prefix index of this activity's call: its retries
// share it, another activity (a call resumed after a checkpoint, another
// run) never does.
func prefixIndexOf(ctx context.Context, in rollout.CallModelInput, callID string) prefixIndexRef {
	info := activity.GetInfo(ctx)
	parts, _ := json.Marshal([]string{info.WorkflowExecution.ID, info.WorkflowExecution.RunID, info.ActivityID, callID, string(in.Head)})
	call := string(parts)
	return prefixIndexRef{call: call, key: transcript.PrefixIndexKey(call)}
}

// newestPrefix is the prefix the call continues: base (its heartbeat's or
// its input's; nil for none), or the longer one the call's prefix index
// names when that verifiably extends base: the same call and conversation,
// more tokens, base's last chunk in its chain, and a chain that holds what
// the index says. An index that is missing, does not decode, names another
// call or does not extend base leaves base: the retry fails closed to what
// the heartbeat named.
func (w *prefixWriter) newestPrefix(ctx context.Context, base *rollout.ModelPrefix) *rollout.ModelPrefix {
	x, err := w.store.PrefixIndex(ctx, w.index.key)
	if errors.Is(err, transcript.ErrNotFound) {
		return base
	}
	if err == nil && base != nil && x.Tokens <= base.Tokens && x.Record == base.Record {
		return base // the heartbeat got out: nothing newer
	}
	if err == nil {
		err = w.extends(ctx, x, base)
	}
	if err != nil {
		activity.GetLogger(ctx).Warn("prefix index not used", "call", w.callID, "error", err)
		return base
	}
	return &rollout.ModelPrefix{CallID: w.callID, Turn: w.in.Turn, Record: x.Record, Tokens: x.Tokens}
}

// extends checks that index x names a prefix of this call that extends
// base.
func (w *prefixWriter) extends(ctx context.Context, x transcript.PrefixIndex, base *rollout.ModelPrefix) error {
	switch {
	case x.Call != w.index.call:
		return fmt.Errorf("%w: index %s names call %s", errForeignPrefix, w.index.key, x.Call)
	case x.Head != w.in.Head:
		return fmt.Errorf("%w: index %s names conversation %s, the call answers %s", errForeignPrefix, w.index.key, x.Head, w.in.Head)
	case base != nil && x.Tokens <= base.Tokens:
		return fmt.Errorf("%w: index %s names %d tokens, the heartbeat %d", errForeignPrefix, w.index.key, x.Tokens, base.Tokens)
	}
	chain, err := w.store.PrefixBlobs(ctx, x.Record)
	if err != nil {
		return fmt.Errorf("index %s: %w", w.index.key, err)
	}
	if base != nil && !slices.Contains(chain, base.Record) {
		return fmt.Errorf("%w: index %s names prefix %s, which does not extend %s", errForeignPrefix, w.index.key, x.Record, base.Record)
	}
	ref := rollout.ModelPrefix{CallID: w.callID, Turn: w.in.Turn, Record: x.Record, Tokens: x.Tokens}
	if _, err := loadPrefix(ctx, w.store, w.in, ref); err != nil {
		return fmt.Errorf("index %s: %w", w.index.key, err)
	}
	return nil
}

// dropIndex deletes the call's prefix index once no retry needs it (the
// call finished, or was cancelled and reported its prefix); a failure
// leaves a small object behind and is logged.
func (w *prefixWriter) dropIndex(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finalFlushTimeout)
	defer cancel()
	if err := w.store.RemovePrefixIndex(ctx, w.index.key); err != nil {
		activity.GetLogger(ctx).Warn("prefix index not removed", "call", w.callID, "error", err)
	}
}
