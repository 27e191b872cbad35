package workplace_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/envs/workplace"
)

type workplaceEpisode struct {
	reward float64
	turns  int
	msgs   []envs.Message
}

// driveWorkplace runs one episode: policy → env.Apply → observation appended
// → policy …, until the policy answers without tool calls. When cut >= 0 the
// session is exported after that many turns and continued in a restored one.
func driveWorkplace(t *testing.T, task json.RawMessage, seed int64, imperfection float64, cut int) workplaceEpisode {
	t.Helper()
	env := workplace.New()
	sess, start, err := env.Start(seed, task)
	require.NoError(t, err)
	var tools []string
	for _, tool := range env.Spec().Tools {
		tools = append(tools, tool.Name)
	}
	msgs := []envs.Message{{Role: "system", Content: start.Instructions}, {Role: "user", Content: start.Observation}}
	var p workplace.Policy
	for turn := 0; ; turn++ {
		require.LessOrEqual(t, turn, 50, "episode does not end")
		if turn == cut {
			state, err := sess.Export()
			require.NoError(t, err)
			sess, err = env.Restore(state)
			require.NoError(t, err)
		}
		resp, err := p.Respond(envs.PolicyRequest{Messages: msgs, Tools: tools, Seed: seed, Imperfection: imperfection})
		require.NoError(t, err, "turn %d", turn)
		msgs = append(msgs, envs.Message{Role: "assistant", Content: resp.Content, ToolCalls: resp.ToolCalls})
		if len(resp.ToolCalls) == 0 {
			require.Equal(t, workplace.Done, resp.Content, "final answer")
			v, err := sess.Verify()
			require.NoError(t, err)
			return workplaceEpisode{reward: v.Reward, turns: turn + 1, msgs: msgs}
		}
		require.Len(t, resp.ToolCalls, 1, "turn %d: %d tool calls, want one per turn", turn, len(resp.ToolCalls))
		call := resp.ToolCalls[0]
		out, err := sess.Apply(call.Name, json.RawMessage(call.Arguments))
		content := out.Observation
		if err != nil {
			content = "error: " + err.Error()
		}
		msgs = append(msgs, envs.Message{Role: "tool", ToolCallID: call.ID, Content: content})
	}
}

func TestWorkplaceEpisodeReachesRewardOne(t *testing.T) {
	for i := 0; i < 2*workplace.TemplateCount(); i++ {
		task := workplace.GenerateTask(3, i)
		plan, err := workplace.Plan(task)
		require.NoError(t, err)
		ep := driveWorkplace(t, task, int64(100+i), 0, -1)
		require.Equal(t, float64(1), ep.reward, "task %s: reward %v", task, ep.reward)
		require.Equal(t, len(plan)+1, ep.turns, "task %s: %d turns, want %d plan steps and done", task, ep.turns, len(plan))
		for _, m := range ep.msgs {
			if m.Role == "tool" {
				require.False(t, strings.HasPrefix(m.Content, "error:"), "task %s: a planned call failed: %s", task, m.Content)
			}
		}
	}
}

// TestWorkplaceEpisodeSurvivesRestore: cutting the environment at any turn
// changes neither the conversation nor the reward.
func TestWorkplaceEpisodeSurvivesRestore(t *testing.T) {
	task := workplace.GenerateTask(3, 6) // several steps
	ref := driveWorkplace(t, task, 1, 0, -1)
	for cut := 0; cut < ref.turns; cut++ {
		got := driveWorkplace(t, task, 1, 0, cut)
		require.Equal(t, ref.reward, got.reward, "cut %d: episode differs from the uninterrupted one", cut)
		require.Equal(t, ref.msgs, got.msgs, "cut %d: episode differs from the uninterrupted one", cut)
	}
}

func TestWorkplaceImperfectionSpoilsTheEpisode(t *testing.T) {
	for i := 0; i < 2*workplace.TemplateCount(); i++ {
		task := workplace.GenerateTask(4, i)
		ep := driveWorkplace(t, task, int64(i), 1, -1)
		require.Equal(t, float64(0), ep.reward, "task %s with imperfection 1: reward %v", task, ep.reward)
	}
	rewards := map[float64]int{}
	for seed := int64(0); seed < 24; seed++ {
		rewards[driveWorkplace(t, workplace.GenerateTask(4, int(seed)), seed, 0.5, -1).reward]++
	}
	require.NotEqual(t, 0, rewards[0], "imperfection 0.5 gave rewards %v, want both 0 and 1", rewards)
	require.NotEqual(t, 0, rewards[1], "imperfection 0.5 gave rewards %v, want both 0 and 1", rewards)
}

func TestWorkplaceRespondIsPure(t *testing.T) {
	ep := driveWorkplace(t, workplace.GenerateTask(8, 2), 5, 0.5, -1)
	var p workplace.Policy
	for n := 2; n <= len(ep.msgs); n++ {
		req := envs.PolicyRequest{Messages: ep.msgs[:n], Seed: 5, Imperfection: 0.5}
		a, errA := p.Respond(req)
		b, errB := p.Respond(req)
		require.Equal(t, b, a, "prefix %d: %+v / %+v", n, a, b)
		require.Equal(t, errB == nil, errA == nil, "prefix %d: %+v / %+v", n, a, b)
	}
}

func TestWorkplaceRespondRefusesBadRequests(t *testing.T) {
	task := "Do it.\nTASK " + string(workplace.GenerateTask(1, 3))
	cases := []struct {
		name    string
		msgs    []envs.Message
		tools   []string
		wantErr string
	}{
		{"no user message", []envs.Message{{Role: "system", Content: "x"}}, nil, "no user message"},
		{"no task line", []envs.Message{{Role: "user", Content: "hello"}}, nil, "no TASK"},
		{"bad task", []envs.Message{{Role: "user", Content: `TASK {"task_id":"x","seed":1,"index":0}`}}, nil, envs.CodeBadTask},
		{"tool not offered", []envs.Message{{Role: "user", Content: task}}, []string{"email_read"}, "not among the offered tools"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := workplace.Policy{}.Respond(envs.PolicyRequest{Messages: tc.msgs, Tools: tc.tools})
			require.ErrorContains(t, err, tc.wantErr, "err = %v, want one naming %q", err, tc.wantErr)
		})
	}
}
