package arithmetic_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/envs/arithmetic"
)

func arithmeticTask(taskLine string) []envs.Message {
	return []envs.Message{
		{Role: "system", Content: "Compute."},
		{Role: "user", Content: "What is it?\nTASK " + taskLine},
	}
}

// arithmeticAfter appends an answer call and its tool message.
func arithmeticAfter(msgs []envs.Message, value, toolOutput string) []envs.Message {
	return append(msgs,
		envs.Message{Role: "assistant", ToolCalls: []envs.ToolCall{{ID: "call_a", Name: arithmetic.AnswerTool, Arguments: `{"value":` + value + `}`}}},
		envs.Message{Role: "tool", ToolCallID: "call_a", Content: toolOutput},
	)
}

func arithmeticCall(msgs []envs.Message, value string) envs.PolicyResponse {
	return envs.PolicyResponse{ToolCalls: []envs.ToolCall{{ID: envs.CallID(msgs, 0), Name: arithmetic.AnswerTool, Arguments: `{"value":` + value + `}`}}}
}

func TestArithmeticRespond(t *testing.T) {
	doneResp := envs.PolicyResponse{Content: arithmetic.Done}
	tests := []struct {
		name    string
		msgs    []envs.Message
		tools   []string
		want    string // value of the answer call; "" wants "done"
		wantErr bool
	}{
		{name: "sum", msgs: arithmeticTask(`{"a":2,"b":3,"op":"+"}`), want: "5"},
		{name: "difference", msgs: arithmeticTask(`{"a":2,"b":30,"op":"-"}`), want: "-28"},
		{name: "product", msgs: arithmeticTask(`{"a":-12,"b":-7,"op":"*"}`), want: "84"},
		{name: "product beyond int64", msgs: arithmeticTask(`{"a":9223372036854775807,"b":2,"op":"*"}`), want: "18446744073709551614"},
		{name: "answer tool offered", msgs: arithmeticTask(`{"a":1,"b":1,"op":"+"}`), tools: []string{"answer"}, want: "2"},
		{name: "done after confirmation", msgs: arithmeticAfter(arithmeticTask(`{"a":2,"b":3,"op":"+"}`), "5", "Received answer 5.")},
		{name: "answers again after a refusal", msgs: arithmeticAfter(arithmeticTask(`{"a":2,"b":3,"op":"+"}`), "5", "bad_arguments: x"), want: "5"},
		{name: "answer tool not offered", msgs: arithmeticTask(`{"a":1,"b":1,"op":"+"}`), tools: []string{"step"}, wantErr: true},
		{name: "no TASK line", msgs: []envs.Message{{Role: "user", Content: "What is 2+3?"}}, wantErr: true},
		{name: "no user message", msgs: []envs.Message{{Role: "system", Content: "TASK {}"}}, wantErr: true},
		{name: "malformed TASK", msgs: arithmeticTask(`{"a":2,`), wantErr: true},
		{name: "missing op", msgs: arithmeticTask(`{"a":2,"b":3}`), wantErr: true},
		{name: "unknown op", msgs: arithmeticTask(`{"a":2,"b":3,"op":"/"}`), wantErr: true},
		{name: "TASK only in a later message", msgs: append(arithmeticTask(`{"a":2,"b":3,"op":"+"}`)[:1],
			envs.Message{Role: "user", Content: "hello"}, envs.Message{Role: "user", Content: `TASK {"a":2,"b":3,"op":"+"}`}), wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := arithmetic.Policy{}.Respond(envs.PolicyRequest{Messages: tt.msgs, Tools: tt.tools, Seed: 3})
			if tt.wantErr {
				require.Error(t, err, "Respond = %+v, want an error", got)
				return
			}
			require.NoError(t, err)
			want := doneResp
			if tt.want != "" {
				want = arithmeticCall(tt.msgs, tt.want)
			}
			assert.Equal(t, want, got, "Respond = %+v, want %+v", got, want)
		})
	}
}

// playArithmetic runs one episode of the arithmetic environment against the
// policy and returns the verdict's reward and the number of model turns.
func playArithmetic(t *testing.T, task json.RawMessage, seed int64, imperfection float64) (float64, int) {
	t.Helper()
	s, st, err := arithmetic.New().Start(seed, task)
	require.NoError(t, err)
	msgs := []envs.Message{{Role: "system", Content: st.Instructions}, {Role: "user", Content: st.Observation}}
	for turn := 1; turn <= 10; turn++ {
		resp, err := arithmetic.Policy{}.Respond(envs.PolicyRequest{Messages: msgs, Tools: []string{arithmetic.AnswerTool}, Seed: seed, Imperfection: imperfection})
		require.NoError(t, err, "task %s", task)
		if len(resp.ToolCalls) == 0 {
			v, err := s.Verify()
			require.NoError(t, err)
			return v.Reward, turn
		}
		msgs = append(msgs, envs.Message{Role: "assistant", ToolCalls: resp.ToolCalls})
		for _, c := range resp.ToolCalls {
			out, err := s.Apply(c.Name, json.RawMessage(c.Arguments))
			require.NoError(t, err, "task %s: %s(%s)", task, c.Name, c.Arguments)
			msgs = append(msgs, envs.Message{Role: "tool", ToolCallID: c.ID, Content: out.Observation})
		}
	}
	require.Failf(t, "no answer", "task %s: no final answer in 10 turns", task)
	return 0, 0
}

func TestArithmeticPlaysTheEnvironment(t *testing.T) {
	tests := []struct {
		name         string
		imperfection float64
		minWins      int
		maxWins      int
	}{
		{"perfect", 0, 200, 200},
		{"sometimes", 0.3, 100, 180},
		{"always off by one", 1, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wins := 0
			for i := range 200 {
				task := arithmetic.GenerateTask(11, i)
				r, turns := playArithmetic(t, task, int64(i), tt.imperfection)
				require.Equal(t, 2, turns, "task %s: %d turns, want answer then done", task, turns)
				r2, _ := playArithmetic(t, task, int64(i), tt.imperfection)
				require.Equal(t, r, r2, "task %s: rewards %v then %v", task, r, r2)
				if r == 1 {
					wins++
				}
			}
			require.GreaterOrEqual(t, wins, tt.minWins, "%d of 200 right, want %d..%d", wins, tt.minWins, tt.maxWins)
			require.LessOrEqual(t, wins, tt.maxWins, "%d of 200 right, want %d..%d", wins, tt.minWins, tt.maxWins)
		})
	}
}
