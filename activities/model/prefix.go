package model

import (
	"context"
	"errors"
	"fmt"
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
	// this old, and batches it otherwise. Flushes are spaced by at least
	// this much, so each one's heartbeat is sent before the stream is read
	// on: what the heartbeat names is durable for the retry.
	DefaultHeartbeatThrottle = 200 * time.Millisecond
)

// prefixWriter makes a streamed generation's prefix durable as it grows:
// every PrefixTokens tokens or PrefixInterval (whichever first, and never
// closer than the heartbeat throttle) it stores the tokens received since
// the last flush as one chunk chained to the previous one, then heartbeats
// the chain's last digest and token count. Between flushes it keeps the
// call alive with the same details, so a heartbeat never names less than
// what is durable.
type prefixWriter struct {
	a      *Activities
	store  *transcriptstore.Store
	in     rollout.CallModelInput
	callID string

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

func (a *Activities) newPrefixWriter(store *transcriptstore.Store, in rollout.CallModelInput, callID string) *prefixWriter {
	now := time.Now()
	return &prefixWriter{a: a, store: store, in: in, callID: callID, lastFlush: now, lastBeat: now}
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
	now := time.Now()
	due := len(w.pending.ids) >= w.a.prefixTokens() || now.Sub(w.lastFlush) >= w.a.prefixInterval()
	if !due || now.Sub(w.lastBeat) < w.a.heartbeatThrottle() {
		return nil
	}
	return w.flushLocked(ctx, true)
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
	w.last, w.durable, w.restarted = d, c.Start+len(c.TokenIDs), false
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
