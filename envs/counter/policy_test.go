package counter_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/envs/counter"
	"github.com/turnstile-rl/turnstile/internal/testsupport/envtest"
)

func counterIncrement(msgs []envs.Message) envs.PolicyResponse {
	return envs.PolicyResponse{ToolCalls: []envs.ToolCall{{ID: envs.CallID(msgs, 0), Name: counter.ToolIncrement, Arguments: `{"amount":1}`}}}
}

var counterDoneResponse = envs.PolicyResponse{Content: counter.Done}

func TestCounterRespond(t *testing.T) {
	tests := []struct {
		name         string
		msgs         []envs.Message
		tools        []string
		imperfection float64
		want         *envs.PolicyResponse // nil: want the increment call for msgs
		wantErr      string
	}{
		{name: "first turn increments", msgs: envtest.CounterConversation(envtest.CounterTask(0, 3))},
		{name: "below target increments", msgs: envtest.CounterConversation(envtest.CounterTask(0, 3), "counter=1", "counter=2")},
		{name: "at target is done", msgs: envtest.CounterConversation(envtest.CounterTask(0, 3), "counter=1", "counter=2", "counter=3"), want: &counterDoneResponse},
		{name: "start at target is done", msgs: envtest.CounterConversation(envtest.CounterTask(4, 4)), want: &counterDoneResponse},
		{name: "past target is done", msgs: envtest.CounterConversation(envtest.CounterTask(5, 2)), want: &counterDoneResponse},
		{name: "only the first line counts", msgs: envtest.CounterConversation(envtest.CounterTask(0, 3), "counter=3\ncounter=0"), want: &counterDoneResponse},
		{name: "error observation retries", msgs: envtest.CounterConversation(envtest.CounterTask(0, 3), "counter=1", "error: environment parked")},
		{name: "error on the first call retries", msgs: envtest.CounterConversation(envtest.CounterTask(2, 3), "error: busy")},
		{name: "error after reaching target stays done", msgs: envtest.CounterConversation(envtest.CounterTask(0, 1), "counter=1", "error: x"), want: &counterDoneResponse},
		{name: "offered tools include increment", msgs: envtest.CounterConversation(envtest.CounterTask(0, 3)), tools: []string{"reset", "increment"}},
		{name: "always missing stops one short", msgs: envtest.CounterConversation(envtest.CounterTask(0, 3), "counter=1", "counter=2"), imperfection: 1, want: &counterDoneResponse},
		{name: "always missing still increments below", msgs: envtest.CounterConversation(envtest.CounterTask(0, 3), "counter=1"), imperfection: 1},
		{name: "miss with target 0 overshoots", msgs: envtest.CounterConversation(envtest.CounterTask(0, 0)), imperfection: 1},
		{name: "miss with target 0 stops at 1", msgs: envtest.CounterConversation(envtest.CounterTask(0, 0), "counter=1"), imperfection: 1, want: &counterDoneResponse},
		{name: "miss with start at target overshoots", msgs: envtest.CounterConversation(envtest.CounterTask(7, 7)), imperfection: 1},
		{name: "no messages", msgs: nil, wantErr: "no user message"},
		{name: "no TASK line", msgs: []envs.Message{{Role: "user", Content: "Increase the counter."}}, wantErr: "no TASK line"},
		{name: "TASK only in a later user message", msgs: []envs.Message{{Role: "user", Content: "hi"}, {Role: "user", Content: envtest.CounterTask(0, 1)}}, wantErr: "no TASK line"},
		{name: "malformed TASK", msgs: []envs.Message{{Role: "user", Content: "TASK {start:1}"}}, wantErr: "malformed TASK line"},
		{name: "TASK without target", msgs: []envs.Message{{Role: "user", Content: `TASK {"start":1}`}}, wantErr: "lacks start or target"},
		{name: "malformed counter line", msgs: envtest.CounterConversation(envtest.CounterTask(0, 3), "counter=two"), wantErr: "malformed counter line"},
		{name: "increment not offered", msgs: envtest.CounterConversation(envtest.CounterTask(0, 3)), tools: []string{"reset"}, wantErr: `tool "increment" is not among`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := envs.PolicyRequest{Messages: tt.msgs, Tools: tt.tools, Seed: 7, Imperfection: tt.imperfection}
			got, err := counter.Policy{}.Respond(req)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr, "Respond error = %v, want one containing %q", err, tt.wantErr)
				return
			}
			require.NoError(t, err, "Respond")
			want := counterIncrement(tt.msgs)
			if tt.want != nil {
				want = *tt.want
			}
			require.Equal(t, want, got, "Respond = %+v, want %+v", got, want)
			again, err := counter.Policy{}.Respond(req)
			require.NoError(t, err, "second Respond = %+v, %v; want the same answer %+v", again, err, got)
			require.Equal(t, got, again, "second Respond = %+v, %v; want the same answer %+v", again, err, got)
		})
	}
}

// runCounterEpisode plays the counter environment against the policy and
// returns the final counter value.
func runCounterEpisode(t *testing.T, start, target int, seed int64, imperfection float64) int {
	t.Helper()
	msgs := envtest.CounterConversation(envtest.CounterTask(start, target))
	value := start
	for turn := 0; turn < 100; turn++ {
		resp, err := counter.Policy{}.Respond(envs.PolicyRequest{Messages: msgs, Seed: seed, Imperfection: imperfection})
		require.NoError(t, err, "seed %d turn %d", seed, turn)
		if len(resp.ToolCalls) == 0 {
			return value
		}
		value++
		call := resp.ToolCalls[0]
		msgs = append(msgs,
			envs.Message{Role: "assistant", ToolCalls: resp.ToolCalls},
			envs.Message{Role: "tool", ToolCallID: call.ID, Content: fmt.Sprintf("counter=%d", value)},
		)
	}
	require.Failf(t, "no end", "seed %d: episode did not end in 100 turns", seed)
	return 0
}

func TestCounterImperfection(t *testing.T) {
	tests := []struct {
		name         string
		imperfection float64
		wantHits     bool
		wantMisses   bool
	}{
		{name: "perfect", imperfection: 0, wantHits: true},
		{name: "sometimes", imperfection: 0.3, wantHits: true, wantMisses: true},
		{name: "always", imperfection: 1, wantMisses: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hits, misses := 0, 0
			for seed := int64(0); seed < 200; seed++ {
				got := runCounterEpisode(t, 1, 4, seed, tt.imperfection)
				switch got {
				case 4:
					hits++
				case 3:
					misses++
				default:
					require.Failf(t, "counter out of range", "seed %d: counter ended at %d, want 4 or 3", seed, got)
				}
				// The decision is per episode: replaying the seed ends the same way.
				again := runCounterEpisode(t, 1, 4, seed, tt.imperfection)
				require.Equal(t, got, again, "seed %d: replay ended at %d, first run at %d", seed, again, got)
			}
			require.Equal(t, tt.wantHits, hits > 0, "hits=%d misses=%d, want hits>0 %v, misses>0 %v", hits, misses, tt.wantHits, tt.wantMisses)
			require.Equal(t, tt.wantMisses, misses > 0, "hits=%d misses=%d, want hits>0 %v, misses>0 %v", hits, misses, tt.wantHits, tt.wantMisses)
		})
	}
}
