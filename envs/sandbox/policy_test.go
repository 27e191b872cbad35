package sandbox_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/envs/sandbox"
)

// sandboxTaskText is a start observation with the given TASK JSON.
func sandboxTaskText(taskJSON string) string {
	return "Make the sandbox hold exactly these files.\nTASK " + taskJSON
}

// sandboxConversation builds system, user task and then, per observation, one
// assistant write_file call followed by the tool message showing obs.
func sandboxConversation(taskJSON string, observations ...string) []envs.Message {
	msgs := []envs.Message{
		{Role: "system", Content: sandbox.Instructions},
		{Role: "user", Content: sandboxTaskText(taskJSON)},
	}
	for i, obs := range observations {
		id := fmt.Sprintf("call_%d", i)
		msgs = append(msgs,
			envs.Message{Role: "assistant", ToolCalls: []envs.ToolCall{{ID: id, Name: sandbox.ToolWriteFile, Arguments: `{}`}}},
			envs.Message{Role: "tool", ToolCallID: id, Content: obs},
		)
	}
	return msgs
}

func TestSandboxRespond(t *testing.T) {
	const task = `{"files":{"b.txt":"bee\n","a.txt":"ay\n"}}`
	writeCall := func(msgs []envs.Message, path, content string) *envs.PolicyResponse {
		return &envs.PolicyResponse{ToolCalls: []envs.ToolCall{{
			ID:        envs.CallID(msgs, 0),
			Name:      sandbox.ToolWriteFile,
			Arguments: fmt.Sprintf(`{"path":%q,"content":%q}`, path, content),
		}}}
	}
	done := &envs.PolicyResponse{Content: sandbox.Done}
	first := sandboxConversation(task)
	second := sandboxConversation(task, "wrote a.txt (3 bytes)")
	afterError := sandboxConversation(task, "error: illegal_action")
	tests := []struct {
		name    string
		msgs    []envs.Message
		tools   []string
		want    *envs.PolicyResponse
		wantErr string
	}{
		{name: "first file in sorted order", msgs: first, want: writeCall(first, "a.txt", "ay\n")},
		{name: "second file", msgs: second, want: writeCall(second, "b.txt", "bee\n")},
		{name: "an error observation still advances", msgs: afterError, want: writeCall(afterError, "b.txt", "bee\n")},
		{name: "done after the last file", msgs: sandboxConversation(task, "wrote a.txt", "wrote b.txt"), want: done},
		{name: "offered tools include write_file", msgs: first, tools: []string{"list_files", "write_file"}, want: writeCall(first, "a.txt", "ay\n")},
		{name: "done needs no tool", msgs: sandboxConversation(task, "x", "y"), tools: []string{"list_files"}, want: done},
		{name: "write_file not offered", msgs: first, tools: []string{"list_files"}, wantErr: `tool "write_file" is not among`},
		{name: "no messages", wantErr: "no user message"},
		{name: "no TASK line", msgs: []envs.Message{{Role: "user", Content: "Write files."}}, wantErr: "no TASK"},
		{name: "malformed TASK", msgs: []envs.Message{{Role: "user", Content: "TASK {files}"}}, wantErr: "invalid character"},
		{name: "invalid TASK", msgs: []envs.Message{{Role: "user", Content: `TASK {"files":{"/etc/passwd":"x"}}`}}, wantErr: "absolute"},
		{name: "TASK only in a later user message", msgs: []envs.Message{{Role: "user", Content: "hi"}, {Role: "user", Content: sandboxTaskText(task)}}, wantErr: "no TASK"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := envs.PolicyRequest{Messages: tt.msgs, Tools: tt.tools, Seed: 3}
			got, err := sandbox.Policy{}.Respond(req)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr, "Respond error = %v, want one containing %q", err, tt.wantErr)
				return
			}
			require.NoError(t, err, "Respond")
			require.Equal(t, *tt.want, got, "Respond = %+v, want %+v", got, *tt.want)
			again, err := sandbox.Policy{}.Respond(req)
			require.NoError(t, err, "second Respond = %+v, %v; want the same answer %+v", again, err, got)
			require.Equal(t, got, again, "second Respond = %+v, %v; want the same answer %+v", again, err, got)
		})
	}
}

// sandboxEpisode plays the real sandbox environment against the policy on the
// generated task (seed, index) and returns the transcript and the verdict.
func sandboxEpisode(t *testing.T, seed int64, index int, imperfection float64) ([]envs.Message, float64, sandbox.Differences) {
	t.Helper()
	task := sandbox.GenerateTask(seed, index)
	s, st, err := sandbox.New().Start(seed, task)
	require.NoError(t, err, "Start(%s)", task)
	defer func() {
		assert.NoError(t, s.Close(), "Close")
	}()
	var tools []string
	for _, tool := range sandbox.New().Spec().Tools {
		tools = append(tools, tool.Name)
	}
	msgs := []envs.Message{{Role: "system", Content: st.Instructions}, {Role: "user", Content: st.Observation}}
	for turn := 0; turn < 10; turn++ {
		resp, err := sandbox.Policy{}.Respond(envs.PolicyRequest{Messages: msgs, Tools: tools, Seed: seed, Imperfection: imperfection})
		require.NoError(t, err, "seed %d turn %d", seed, turn)
		msgs = append(msgs, envs.Message{Role: "assistant", Content: resp.Content, ToolCalls: resp.ToolCalls})
		if len(resp.ToolCalls) == 0 {
			require.Equal(t, sandbox.Done, resp.Content, "seed %d: final answer %q, want %q", seed, resp.Content, sandbox.Done)
			v, err := s.Verify()
			require.NoError(t, err, "Verify")
			var d sandbox.Differences
			require.NoError(t, json.Unmarshal(v.Details, &d), "details %s", v.Details)
			return msgs, v.Reward, d
		}
		for _, call := range resp.ToolCalls {
			out, err := s.Apply(call.Name, json.RawMessage(call.Arguments))
			require.NoError(t, err, "seed %d turn %d: Apply(%s, %s)", seed, turn, call.Name, call.Arguments)
			msgs = append(msgs, envs.Message{Role: "tool", ToolCallID: call.ID, Content: out.Observation})
		}
	}
	require.Failf(t, "no end", "seed %d: episode did not end in 10 turns", seed)
	return nil, 0, sandbox.Differences{}
}

func TestSandboxEpisodeReachesReward(t *testing.T) {
	for seed := int64(0); seed < 6; seed++ {
		msgs, reward, d := sandboxEpisode(t, seed, int(seed), 0)
		require.Equal(t, float64(1), reward, "seed %d: reward %v, differences %+v; want 1", seed, reward, d)
		// One write per expected file, then done.
		calls := (len(msgs) - 3) / 2
		require.Equal(t, len(d.Expected), calls, "seed %d: %d tool calls for %d files", seed, calls, len(d.Expected))
		// A restarted attempt replays the same episode exactly.
		again, _, _ := sandboxEpisode(t, seed, int(seed), 0)
		require.Equal(t, msgs, again, "seed %d: replay differs:\n%+v\n%+v", seed, again, msgs)
	}
}

func TestSandboxImperfection(t *testing.T) {
	const task = `{"files":{"a.txt":"1\n","b.txt":"2\n","c.txt":"3\n"}}`
	want, err := sandbox.ParseTask(json.RawMessage(task))
	require.NoError(t, err)
	tests := []struct {
		name         string
		imperfection float64
		wantClean    bool
		wantSpoiled  bool
	}{
		{name: "perfect", imperfection: 0, wantClean: true},
		{name: "sometimes", imperfection: 0.3, wantClean: true, wantSpoiled: true},
		{name: "always", imperfection: 1, wantSpoiled: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clean, spoiled := 0, 0
			spoiledFiles := map[string]bool{}
			for seed := int64(0); seed < 200; seed++ {
				req := envs.PolicyRequest{Messages: sandboxConversation(task), Seed: seed, Imperfection: tt.imperfection}
				plan, err := sandbox.PolicyPlan(req)
				require.NoError(t, err)
				again, _ := sandbox.PolicyPlan(req)
				require.Equal(t, plan, again, "seed %d: plan not deterministic", seed)
				// The per-episode draw does not depend on how far the episode got.
				later := req
				later.Messages = sandboxConversation(task, "wrote a.txt", "wrote b.txt")
				laterPlan, _ := sandbox.PolicyPlan(later)
				require.Equal(t, plan, laterPlan, "seed %d: plan changed mid-episode", seed)
				wrong := 0
				for i, w := range plan {
					require.Equal(t, want.Names()[i], w.Path, "seed %d: write %d is %q, want %q", seed, i, w.Path, want.Names()[i])
					if w.Content != want.Files[w.Path] {
						wrong++
						spoiledFiles[w.Path] = true
					}
				}
				switch wrong {
				case 0:
					clean++
				case 1:
					spoiled++
				default:
					require.Failf(t, "too many spoiled", "seed %d: %d files spoiled, want at most 1", seed, wrong)
				}
			}
			require.Equal(t, tt.wantClean, clean > 0, "clean=%d spoiled=%d, want clean>0 %v, spoiled>0 %v", clean, spoiled, tt.wantClean, tt.wantSpoiled)
			require.Equal(t, tt.wantSpoiled, spoiled > 0, "clean=%d spoiled=%d, want clean>0 %v, spoiled>0 %v", clean, spoiled, tt.wantClean, tt.wantSpoiled)
			if tt.imperfection == 1 {
				require.Len(t, spoiledFiles, 3, "spoiled files: want each of the 3 chosen by some seed")
			}
		})
	}
}

func TestSandboxEpisodeWithMistakeScoresZero(t *testing.T) {
	for seed := int64(0); seed < 4; seed++ {
		_, reward, d := sandboxEpisode(t, seed, 0, 1)
		require.Equal(t, float64(0), reward, "seed %d: reward %v, differences %+v; want 0 with exactly one wrong file", seed, reward, d)
		require.Len(t, d.WrongContent, 1, "seed %d: reward %v, differences %+v; want 0 with exactly one wrong file", seed, reward, d)
		require.Empty(t, d.Missing, "seed %d: reward %v, differences %+v; want 0 with exactly one wrong file", seed, reward, d)
		require.Empty(t, d.Unexpected, "seed %d: reward %v, differences %+v; want 0 with exactly one wrong file", seed, reward, d)
	}
}
