package model_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/activities/model"
	"github.com/turnstile-rl/turnstile/envs/counter"
	"github.com/turnstile-rl/turnstile/internal/policy"
	"github.com/turnstile-rl/turnstile/internal/testsupport"
	"github.com/turnstile-rl/turnstile/internal/transcript"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// BenchmarkBoundedAnswer is what bounded generation costs one answer of
// about 2,000 tokens streamed at 50 tokens/s by the scripted policy server,
// with the default prefix interval (64 tokens) and a transcript store on
// disk: the same call unbounded (one request) and strict (a request per
// chunk, each chunk made durable before the next), in the same run.
// ns/op is the answer's wall time; requests/op the policy server's
// requests. Each answer takes about 40 s:
//
//	go test -run '^$' -bench BenchmarkBoundedAnswer -benchtime 2x ./activities/model
func BenchmarkBoundedAnswer(b *testing.B) {
	const pad = 2000
	for _, bound := range []string{model.PrefixBoundOff, model.PrefixBoundStrict} {
		b.Run(bound, func(b *testing.B) {
			srv := httptest.NewServer(policy.NewServer(policy.ServerConfig{
				Policies: policy.Registry{"scripted-counter": counter.Policy{}}, PolicyVersion: "v1", PadTokens: pad, TokensPerSecond: 50,
			}))
			b.Cleanup(srv.Close)
			store := testsupport.NewStore(b)
			env := counter.New()
			_, start, err := env.Start(0, json.RawMessage(`{"start":0,"target":3}`))
			require.NoError(b, err)
			head := testsupport.MustAppend(b, store, transcript.Item{Role: "system", Content: start.Instructions}, transcript.Item{Role: "user", Content: start.Observation})
			tools, err := store.PutJSON(b.Context(), env.Spec().Tools)
			require.NoError(b, err)
			acts := &model.Activities{Store: store, BaseURL: srv.URL + "/v1", PrefixBound: bound}
			in := continuingCall(head, tools)
			tokens := 0
			b.ResetTimer()
			for i := range b.N {
				in.Seed = int64(i + 1) // a new answer each time
				val, err := testsupport.NewActivityEnv(acts).ExecuteActivity(acts.CallModel, in)
				require.NoError(b, err)
				var res rollout.CallModelResult
				require.NoError(b, val.Get(&res))
				tokens = res.Generation.GenerationTokens
			}
			b.StopTimer()
			require.Greater(b, tokens, pad)
			res, err := http.Get(srv.URL + policy.StatsPath)
			require.NoError(b, err)
			defer res.Body.Close()
			var st policy.Stats
			require.NoError(b, json.NewDecoder(res.Body).Decode(&st))
			b.ReportMetric(float64(len(st.Requests))/float64(b.N), "requests/op")
			b.ReportMetric(float64(tokens), "tokens/answer")
			b.Logf("%s: %d answers of %d tokens, %d requests", bound, b.N, tokens, len(st.Requests))
		})
	}
}
