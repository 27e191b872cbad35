package model_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"

	"github.com/turnstile-rl/turnstile/activities/model"
	"github.com/turnstile-rl/turnstile/envs/counter"
	"github.com/turnstile-rl/turnstile/internal/failpoint"
	"github.com/turnstile-rl/turnstile/internal/policy"
	"github.com/turnstile-rl/turnstile/internal/testsupport"
	"github.com/turnstile-rl/turnstile/internal/transcript"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// padTokens makes the scripted answers long enough to be cut.
const padTokens = 80

// scriptedServer serves the counter's scripted policy with long answers,
// reporting version.
func scriptedServer(t *testing.T, version string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(policy.NewServer(policy.ServerConfig{
		Policies: policy.Registry{"scripted-counter": counter.Policy{}}, PolicyVersion: version, PadTokens: padTokens,
	}))
	t.Cleanup(srv.Close)
	return srv
}

// streamingActs are model activities that make a prefix durable every 8
// tokens, at once.
func streamingActs(acts *model.Activities, baseURL string) *model.Activities {
	return &model.Activities{Store: acts.Store, BaseURL: baseURL, PrefixTokens: 8, PrefixInterval: time.Hour, HeartbeatThrottle: time.Nanosecond}
}

// heartbeats runs a call and returns its result and every prefix it
// heartbeated, in order.
func heartbeats(t *testing.T, acts *model.Activities, in rollout.CallModelInput, resumeFrom *rollout.ModelPrefix) (rollout.CallModelResult, []rollout.ModelPrefix) {
	t.Helper()
	env := testsupport.NewActivityEnv(acts)
	var mu sync.Mutex
	var beats []rollout.ModelPrefix
	acts.Heartbeat = func(ctx context.Context, details ...any) {
		if p, ok := details[0].(rollout.ModelPrefix); ok {
			mu.Lock()
			beats = append(beats, p)
			mu.Unlock()
		}
		activity.RecordHeartbeat(ctx, details...)
	}
	if resumeFrom != nil {
		env.SetHeartbeatDetails(*resumeFrom)
	}
	val, err := env.ExecuteActivity(acts.CallModel, in)
	require.NoError(t, err)
	var res rollout.CallModelResult
	require.NoError(t, val.Get(&res))
	mu.Lock()
	defer mu.Unlock()
	return res, beats
}

func serverStats(t *testing.T, srv *httptest.Server) policy.Stats {
	t.Helper()
	res, err := http.Get(srv.URL + policy.StatsPath)
	require.NoError(t, err)
	defer res.Body.Close()
	var st policy.Stats
	require.NoError(t, json.NewDecoder(res.Body).Decode(&st))
	return st
}

// continuingCall is the counter's first call, with the settings that let it
// continue.
func continuingCall(head, tools transcript.Digest) rollout.CallModelInput {
	in := counterCall(head, tools, 1, "")
	in.Policy.ToolParser = rollout.ToolParserTurnstile
	return in
}

// A streamed call makes its prefix durable as it goes: chunks chained in
// the transcript store, each heartbeated as it is written, the last one
// holding every generated token of the answer.
func TestStreamedCallMakesPrefixDurable(t *testing.T) {
	base, head, tools := scriptedCounter(t, 3)
	srv := scriptedServer(t, "v1")
	acts := streamingActs(base, srv.URL+"/v1")
	res, beats := heartbeats(t, acts, continuingCall(head, tools), nil)
	gen := lastGeneration(t, acts.Store, res.Head)
	n := len(gen.GenerationTokenIDs)
	require.Greater(t, n, padTokens)
	require.GreaterOrEqual(t, len(beats), n/8-1, "a heartbeat every 8 tokens")
	for i, b := range beats {
		require.Equal(t, res.CallID, b.CallID)
		require.Equal(t, 1, b.Turn)
		if i > 0 {
			require.Greater(t, b.Tokens, beats[i-1].Tokens, "the prefix only grows")
		}
		p, err := acts.Store.Prefix(t.Context(), b.Record)
		require.NoError(t, err)
		require.Equal(t, gen.GenerationTokenIDs[:b.Tokens], p.TokenIDs, "heartbeat %d names a durable prefix of the answer", i)
		require.Equal(t, gen.GenerationLogProbs[:b.Tokens], p.LogProbs)
		require.Equal(t, gen.PromptTokenIDs, p.PromptTokenIDs)
		require.Equal(t, head, p.Head)
	}
	require.Zero(t, res.Generation.TokensRecovered)
	require.False(t, res.Generation.Regenerated)
}

// A retried call continues from the prefix its heartbeat names, through the
// token-in route: the answer, its tokens and log-probs, the generation
// record (and so the conversation's head) are an uninterrupted call's; the
// endpoint generated only what followed the prefix; the lineage says where
// it resumed.
func TestRetriedCallContinuesFromHeartbeatPrefix(t *testing.T) {
	base, head, tools := scriptedCounter(t, 3)
	srv := scriptedServer(t, "v1")
	acts := streamingActs(base, srv.URL+"/v1")
	in := continuingCall(head, tools)
	whole, beats := heartbeats(t, acts, in, nil)
	cut := beats[len(beats)/2]

	again := streamingActs(base, srv.URL+"/v1")
	res, _ := heartbeats(t, again, in, &cut)
	require.Equal(t, whole.Head, res.Head, "the same answer and generation record")
	require.Equal(t, whole.Generation.Record, res.Generation.Record)
	require.Equal(t, whole.ToolCalls, res.ToolCalls)
	require.Equal(t, whole.FinishReason, res.FinishReason)
	require.Equal(t, whole.Usage, res.Usage, "usage counts the whole answer, prefix included")
	require.Equal(t, []int{cut.Tokens}, res.Generation.ResumedAt)
	require.Equal(t, cut.Tokens, res.Generation.TokensRecovered)
	require.False(t, res.Generation.Regenerated)

	st := serverStats(t, srv)
	require.Len(t, st.Requests, 2)
	cont := st.Requests[1]
	require.Equal(t, "completions", cont.Route)
	require.Equal(t, cut.Tokens, cont.Start)
	require.Equal(t, res.Generation.GenerationTokens-cut.Tokens, cont.Generated, "only the rest was generated again")
	require.Equal(t, st.Requests[0].Key, cont.Key)
}

// A call cut again during its continuation continues from the newer prefix
// (a second segment); every resume point is recorded.
func TestContinuationOfAContinuation(t *testing.T) {
	base, head, tools := scriptedCounter(t, 3)
	srv := scriptedServer(t, "v1")
	in := continuingCall(head, tools)
	whole, beats := heartbeats(t, streamingActs(base, srv.URL+"/v1"), in, nil)
	first := beats[1]
	_, contBeats := heartbeats(t, streamingActs(base, srv.URL+"/v1"), in, &first)
	var second rollout.ModelPrefix
	for _, b := range contBeats {
		if b.Tokens > first.Tokens+8 {
			second = b
			break
		}
	}
	require.NotEmpty(t, second.Record)
	res, _ := heartbeats(t, streamingActs(base, srv.URL+"/v1"), in, &second)
	require.Equal(t, whole.Generation.Record, res.Generation.Record)
	require.Equal(t, []int{first.Tokens, second.Tokens}, res.Generation.ResumedAt)
	require.Equal(t, second.Tokens, res.Generation.TokensRecovered)
}

// A policy that cannot continue starts over and says so: continue "never",
// or no tool parser to read the continuation back. The answer is still the
// uninterrupted one (the scripted policy is deterministic); the lineage
// counts the prefix's tokens as regenerated.
func TestCallThatCannotContinueStartsOver(t *testing.T) {
	for name, edit := range map[string]func(*rollout.CallModelInput){
		"continue never": func(in *rollout.CallModelInput) { in.Policy.Continue = rollout.ContinueNever },
		"no tool parser": func(in *rollout.CallModelInput) { in.Policy.ToolParser = "" },
	} {
		t.Run(name, func(t *testing.T) {
			base, head, tools := scriptedCounter(t, 3)
			srv := scriptedServer(t, "v1")
			in := continuingCall(head, tools)
			whole, beats := heartbeats(t, streamingActs(base, srv.URL+"/v1"), in, nil)
			cut := beats[2]
			edit(&in)
			res, _ := heartbeats(t, streamingActs(base, srv.URL+"/v1"), in, &cut)
			require.Equal(t, whole.Generation.Record, res.Generation.Record)
			require.True(t, res.Generation.Regenerated)
			require.Equal(t, cut.Tokens, res.Generation.TokensRegenerated)
			require.Empty(t, res.Generation.ResumedAt)
			st := serverStats(t, srv)
			require.Equal(t, "chat", st.Requests[1].Route, "the answer was generated again from the start")
			require.Zero(t, st.Requests[1].Start)
		})
	}
}

// An endpoint without a token-in route (here: completions answers 404) is
// found out by the first continuation: that call starts over, and later
// ones do not try the route again.
func TestEndpointWithoutTokenRouteIsProbedOnce(t *testing.T) {
	base, head, tools := scriptedCounter(t, 3)
	scripted := policy.NewServer(policy.ServerConfig{Policies: policy.Registry{"scripted-counter": counter.Policy{}}, PadTokens: padTokens})
	var mu sync.Mutex
	completions := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == policy.CompletionsPath {
			mu.Lock()
			completions++
			mu.Unlock()
			http.Error(w, `{"error":{"message":"no such route","type":"invalid_request_error","code":"not_found"}}`, http.StatusNotFound)
			return
		}
		scripted.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	in := continuingCall(head, tools)
	whole, beats := heartbeats(t, streamingActs(base, srv.URL+"/v1"), in, nil)
	acts := streamingActs(base, srv.URL+"/v1")
	for i := range 2 {
		res, _ := heartbeats(t, acts, in, &beats[i])
		require.Equal(t, whole.Generation.Record, res.Generation.Record)
		require.True(t, res.Generation.Regenerated, "call %d", i)
	}
	require.Equal(t, 1, completions, "the route was tried once")
}

// When the weights change between the prefix and its continuation, the
// generation record keeps both versions and where the second one begins;
// its policy version stays the one the call began with.
func TestWeightsChangedBetweenPrefixAndContinuation(t *testing.T) {
	base, head, tools := scriptedCounter(t, 3)
	old := scriptedServer(t, "step-7")
	in := continuingCall(head, tools)
	whole, beats := heartbeats(t, streamingActs(base, old.URL+"/v1"), in, nil)
	cut := beats[3]
	updated := scriptedServer(t, "step-8")
	res, _ := heartbeats(t, streamingActs(base, updated.URL+"/v1"), in, &cut)
	gen := lastGeneration(t, base.Store, res.Head)
	require.Equal(t, "step-7", gen.PolicyVersion)
	require.Equal(t, []transcript.VersionSpan{{Start: 0, PolicyVersion: "step-7"}, {Start: cut.Tokens, PolicyVersion: "step-8"}}, gen.PolicyVersionSpans)
	wholeGen := lastGeneration(t, base.Store, whole.Head)
	require.Equal(t, wholeGen.GenerationTokenIDs, gen.GenerationTokenIDs, "the scripted policy samples the same tokens")
	require.Empty(t, wholeGen.PolicyVersionSpans, "one version, no spans")
	require.Equal(t, []int{cut.Tokens}, res.Generation.ResumedAt)
}

// A prefix of another conversation (or one whose reference does not match
// what it holds) is never continued: the call starts over.
func TestForeignPrefixIsNotContinued(t *testing.T) {
	base, head, tools := scriptedCounter(t, 3)
	srv := scriptedServer(t, "v1")
	in := continuingCall(head, tools)
	whole, beats := heartbeats(t, streamingActs(base, srv.URL+"/v1"), in, nil)
	lie := beats[1]
	lie.Tokens++
	res, _ := heartbeats(t, streamingActs(base, srv.URL+"/v1"), in, &lie)
	require.Equal(t, whole.Generation.Record, res.Generation.Record)
	require.True(t, res.Generation.Regenerated)
}

// The crash matrix's two prefix failpoints stand between writing a chunk
// and heartbeating it, and after the heartbeat.
func TestPrefixFailpointsAreCrossed(t *testing.T) {
	base, head, tools := scriptedCounter(t, 3)
	srv := scriptedServer(t, "v1")
	fp, err := failpoint.Parse(fmt.Sprintf("%s=kill@2,%s=kill@3", failpoint.WorkerModelPrefixWrittenBeforeHeartbeat, failpoint.WorkerModelPrefixHeartbeatBeforeNextChunk))
	require.NoError(t, err)
	var order []string
	fp.SetKill(func() { order = append(order, "kill") })
	acts := streamingActs(base, srv.URL+"/v1")
	acts.Failpoints = fp
	_, beats := heartbeats(t, acts, continuingCall(head, tools), nil)
	require.Equal(t, []string{"kill", "kill"}, order)
	require.NotEmpty(t, beats)
}
