package model_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/activities/model"
	"github.com/turnstile-rl/turnstile/envs/counter"
	"github.com/turnstile-rl/turnstile/internal/policy"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// boundedActs are streamingActs in strict mode with chunks of k tokens.
func boundedActs(acts *model.Activities, baseURL string, k int) *model.Activities {
	b := streamingActs(acts, baseURL)
	b.PrefixTokens, b.PrefixBound = k, model.PrefixBoundStrict
	return b
}

// requireChunked checks the policy server's requests of one bounded
// answer of n tokens: a chat request then continuations, each starting
// where the one before ended and generating at most k tokens, and all of
// them finished.
func requireChunked(t *testing.T, st policy.Stats, n, k int) {
	t.Helper()
	want := (n + k - 1) / k
	require.Len(t, st.Requests, want, "%d tokens in chunks of %d", n, k)
	start := 0
	for i, r := range st.Requests {
		if i == 0 {
			require.Equal(t, "chat", r.Route)
		} else {
			require.Equal(t, "completions", r.Route, "request %d continues the durable prefix", i)
		}
		require.Equal(t, start, r.Start, "request %d starts at the durable prefix", i)
		require.LessOrEqual(t, r.Generated, k, "request %d generated at most one chunk", i)
		require.True(t, r.Finished, "request %d", i)
		start += r.Generated
	}
	require.Equal(t, n, start)
}

// A bounded call's answer is an unchunked call's, byte for byte (the
// conversation's head, the generation record with its token ids and
// log-probs, tool calls, finish reason and usage), whatever the chunk size:
// chunks that do not divide the answer, chunks that do (the last one ends
// exactly at the answer's end: no empty request follows) and one chunk of
// the whole answer. The policy server never generated more than a chunk
// per request, and the lineage shows no recovery.
func TestBoundedCallIsTheUnchunkedAnswer(t *testing.T) {
	base, head, tools := scriptedCounter(t, 3)
	in := continuingCall(head, tools)
	ref := scriptedServer(t, "v1")
	whole, _ := heartbeats(t, streamingActs(base, ref.URL+"/v1"), in, nil)
	n := whole.Generation.GenerationTokens
	require.Greater(t, n, padTokens)
	divisor := 0
	for k := 7; k < n/2; k++ {
		if n%k == 0 {
			divisor = k
			break
		}
	}
	require.NotZero(t, divisor, "the answer's %d tokens have a divisor to chunk by", n)
	for name, k := range map[string]int{"chunks of 8": 8, "chunks of 13": 13, "last chunk ends the answer": divisor, "one chunk, the whole answer": n, "one chunk, larger": n + 5} {
		t.Run(name, func(t *testing.T) {
			srv := scriptedServer(t, "v1")
			res, _ := heartbeats(t, boundedActs(base, srv.URL+"/v1", k), in, nil)
			require.Equal(t, whole.Head, res.Head)
			require.Equal(t, whole.Generation.Record, res.Generation.Record)
			require.Equal(t, whole.ToolCalls, res.ToolCalls)
			require.Equal(t, whole.FinishReason, res.FinishReason)
			require.Equal(t, whole.Usage, res.Usage)
			require.Empty(t, res.Generation.ResumedAt, "chunks are not resumptions")
			require.Zero(t, res.Generation.TokensRecovered)
			require.False(t, res.Generation.Regenerated)
			requireChunked(t, serverStats(t, srv), n, k)
		})
	}
}

// The call's own max_tokens is respected exactly in bounded mode: the
// answer stops at it with finish reason "length", as an unchunked call with
// the same limit does, and no request asks for more than is left: a limit
// within the first chunk is one chat request, a limit that a chunk
// boundary falls on takes no request after it.
func TestBoundedCallRespectsMaxTokens(t *testing.T) {
	base, head, tools := scriptedCounter(t, 3)
	const k = 8
	for name, limit := range map[string]int64{"within the first chunk": 5, "one chunk exactly": k, "between boundaries": 3*k + 5, "on a boundary": 4 * k} {
		t.Run(name, func(t *testing.T) {
			in := continuingCall(head, tools)
			in.Sampling.MaxTokens = &limit
			ref := scriptedServer(t, "v1")
			whole, _ := heartbeats(t, streamingActs(base, ref.URL+"/v1"), in, nil)
			require.Equal(t, int(limit), whole.Generation.GenerationTokens)

			srv := scriptedServer(t, "v1")
			res, _ := heartbeats(t, boundedActs(base, srv.URL+"/v1", k), in, nil)
			require.Equal(t, int(limit), res.Generation.GenerationTokens, "exactly the call's max_tokens")
			require.Equal(t, "length", res.FinishReason)
			require.Equal(t, whole.Generation.Record, res.Generation.Record, "the unchunked call's tokens and log-probs")
			requireChunked(t, serverStats(t, srv), int(limit), k)
		})
	}
}

// limitCutter forwards to next, but on the n-th request (from 1) it lowers
// max_tokens by cut: the endpoint stops early with finish reason "length",
// as vLLM does at the model's context length.
func limitCutter(t *testing.T, next http.Handler, n int, cut int) http.Handler {
	var seen atomic.Int64
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if int(seen.Add(1)) == n {
			var body map[string]any
			require.NoError(t, json.NewDecoder(r.Body).Decode(&body))
			body["max_tokens"] = body["max_tokens"].(float64) - float64(cut)
			b, err := json.Marshal(body)
			require.NoError(t, err)
			r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(b)), int64(len(b))
		}
		next.ServeHTTP(w, r)
	})
}

// A chunk that ends "length" before its own limit was cut by the endpoint
// (its context), not by the chunking: the answer ends there, "length",
// and no further request is made. A chunk that ends "stop" or
// "tool_calls" ends the answer too (TestBoundedCallIsTheUnchunkedAnswer).
func TestBoundedCallStopsAtTheEndpointsLimit(t *testing.T) {
	base, head, tools := scriptedCounter(t, 3)
	const k = 8
	scripted := policy.NewServer(policy.ServerConfig{Policies: policy.Registry{"scripted-counter": counter.Policy{}}, PolicyVersion: "v1", PadTokens: padTokens})
	srv := httptest.NewServer(limitCutter(t, scripted, 2, 3))
	t.Cleanup(srv.Close)
	res, _ := heartbeats(t, boundedActs(base, srv.URL+"/v1", k), continuingCall(head, tools), nil)
	require.Equal(t, "length", res.FinishReason)
	require.Equal(t, 2*k-3, res.Generation.GenerationTokens, "a chunk, then the shortened one")
	st := serverStats(t, srv)
	require.Len(t, st.Requests, 2, "no request after the endpoint's own limit")
}

// A bounded call cut by a crash (its stream broken right after a chunk was
// written, before its heartbeat) continues, on retry, from the newest
// durable prefix, still in chunks: the answer is the uninterrupted one, and
// by the policy server's count the cut request had generated at most one
// chunk beyond the prefix the retry found.
func TestBoundedCallCutByACrash(t *testing.T) {
	base, head, tools := scriptedCounter(t, 3)
	in := continuingCall(head, tools)
	const k = 8
	ref := scriptedServer(t, "v1")
	whole, _ := heartbeats(t, streamingActs(base, ref.URL+"/v1"), in, nil)

	srv := pacedServer(t)
	tried, err := cutAfterWrite(t, boundedActs(base, srv.URL+"/v1", k), in, 3)
	require.Error(t, err, "the cut call failed, to be retried")
	newest := tried[len(tried)-1]
	res, _ := heartbeats(t, boundedActs(base, srv.URL+"/v1", k), in, nil)
	require.Equal(t, whole.Generation.Record, res.Generation.Record)
	require.Equal(t, whole.Head, res.Head)
	require.Equal(t, []int{newest.Tokens}, res.Generation.ResumedAt)
	require.Equal(t, newest.Tokens, res.Generation.TokensRecovered)

	// The retry's first request starts at the newest durable prefix; every
	// request before it (the cut call's) ended at most one chunk beyond it.
	st := serverStats(t, srv)
	retry := -1
	for i, r := range st.Requests {
		if r.Start == newest.Tokens && r.Route == "completions" {
			retry = i
			break
		}
	}
	require.Positive(t, retry, "the retry continued the newest prefix")
	end := 0
	for _, r := range st.Requests[:retry] {
		end = max(end, r.Start+r.Generated)
	}
	require.LessOrEqual(t, end-newest.Tokens, k, "at most one chunk generated beyond the durable prefix")
	for _, r := range st.Requests {
		require.LessOrEqual(t, r.Generated, k)
	}
}

// A bounded setting is "strict" or "off" (blank: off); anything else is
// refused with the setting's name.
func TestParsePrefixBound(t *testing.T) {
	for in, want := range map[string]string{"": model.PrefixBoundOff, "off": model.PrefixBoundOff, "strict": model.PrefixBoundStrict} {
		got, err := model.ParsePrefixBound(in)
		require.NoError(t, err)
		require.Equal(t, want, got)
	}
	_, err := model.ParsePrefixBound("Strict ")
	require.Error(t, err)
	require.True(t, strings.Contains(err.Error(), model.EnvModelPrefixBound), err.Error())
}

var _ = rollout.ToolParserTurnstile
