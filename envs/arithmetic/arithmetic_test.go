package arithmetic_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/envs/arithmetic"
	"github.com/turnstile-rl/turnstile/internal/testsupport/envtest"
)

var _ envs.Environment = arithmetic.New()

func start(t *testing.T, task string) envs.Session {
	t.Helper()
	s, _, err := arithmetic.New().Start(1, json.RawMessage(task))
	require.NoError(t, err, "Start(%s)", task)
	return s
}

func TestSpec(t *testing.T) {
	sp := arithmetic.New().Spec()
	require.Equal(t, "arithmetic", sp.Name, "spec = %+v", sp)
	require.Equal(t, envs.ModeStateless, sp.Mode, "spec = %+v", sp)
	require.Equal(t, envs.StyleTools, sp.Style, "spec = %+v", sp)
	require.Len(t, sp.Tools, 1, "tools = %+v", sp.Tools)
	require.Equal(t, arithmetic.AnswerTool, sp.Tools[0].Name, "tools = %+v", sp.Tools)
	require.True(t, json.Valid(sp.Tools[0].Parameters), "tools = %+v", sp.Tools)
}

func TestStartStatesTheTask(t *testing.T) {
	_, st, err := arithmetic.New().Start(5, json.RawMessage(`{"a":12,"b":-7,"op":"*"}`))
	require.NoError(t, err)
	lines := strings.Split(st.Observation, "\n")
	got, want := lines[len(lines)-1], `TASK {"a":12,"b":-7,"op":"*"}`
	assert.Equal(t, want, got, "last line %q, want %q", got, want)
	require.Contains(t, st.Observation, "12 * -7", "start = %+v", st)
	require.NotEqual(t, "", st.Instructions, "start = %+v", st)
}

func TestStartRefusesBadTasks(t *testing.T) {
	for _, task := range []string{``, `null`, `{}`, `{"a":1,"b":2}`, `{"a":1,"op":"+"}`, `{"a":1,"b":2,"op":"/"}`,
		`{"a":1.5,"b":2,"op":"+"}`, `{"a":"1","b":2,"op":"+"}`, `{"a":1,"b":2,"op":"+","c":3}`,
		`{"a":1000000001,"b":2,"op":"*"}`, `{"a":1,"b":-1000000001,"op":"-"}`, `{"a":1,"b":2,"op":"+"} 1`} {
		_, _, err := arithmetic.New().Start(1, json.RawMessage(task))
		assert.Equal(t, envs.CodeBadTask, envs.CodeOf(err), "Start(%q) error = %v, want %s", task, err, envs.CodeBadTask)
	}
}

func TestVerify(t *testing.T) {
	tests := []struct {
		name    string
		task    string
		answers []string
		reward  float64
	}{
		{"sum right", `{"a":2,"b":3,"op":"+"}`, []string{`{"value":5}`}, 1},
		{"sum wrong", `{"a":2,"b":3,"op":"+"}`, []string{`{"value":6}`}, 0},
		{"difference negative", `{"a":2,"b":3,"op":"-"}`, []string{`{"value":-1}`}, 1},
		{"product", `{"a":-12,"b":7,"op":"*"}`, []string{`{"value":-84}`}, 1},
		{"largest product", `{"a":1000000000,"b":-1000000000,"op":"*"}`, []string{`{"value":-1000000000000000000}`}, 1},
		{"zero operands", `{"a":0,"b":0,"op":"*"}`, []string{`{"value":0}`}, 1},
		{"no answer", `{"a":0,"b":0,"op":"+"}`, nil, 0},
		{"last answer counts", `{"a":2,"b":3,"op":"+"}`, []string{`{"value":5}`, `{"value":4}`}, 0},
		{"corrected answer counts", `{"a":2,"b":3,"op":"+"}`, []string{`{"value":4}`, `{"value":5}`}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := start(t, tt.task)
			for _, a := range tt.answers {
				out, err := s.Apply(arithmetic.AnswerTool, json.RawMessage(a))
				require.NoError(t, err, "Apply(%s) = %+v, %v", a, out, err)
				require.True(t, strings.HasPrefix(out.Observation, "Received answer"), "Apply(%s) = %+v, %v", a, out, err)
				require.Equal(t, float64(0), out.Reward, "Apply(%s) = %+v, %v", a, out, err)
				require.False(t, out.Terminated, "Apply(%s) = %+v, %v", a, out, err)
			}
			before := envtest.Export(t, s)
			v, err := s.Verify()
			require.NoError(t, err, "Verify = %+v, %v; want reward %v", v, err, tt.reward)
			require.Equal(t, tt.reward, v.Reward, "Verify = %+v, %v; want reward %v", v, err, tt.reward)
			require.True(t, json.Valid(v.Details), "Verify = %+v, %v; want reward %v", v, err, tt.reward)
			assert.Equal(t, string(envtest.Export(t, s)), string(before), "Verify changed state")
		})
	}
}

func TestApplyRefusalsLeaveStateUnchanged(t *testing.T) {
	tests := []struct {
		tool, args, code string
	}{
		{"step", `{"value":5}`, envs.CodeUnknownTool},
		{arithmetic.AnswerTool, ``, envs.CodeBadArguments},
		{arithmetic.AnswerTool, `5`, envs.CodeBadArguments},
		{arithmetic.AnswerTool, `{}`, envs.CodeBadArguments},
		{arithmetic.AnswerTool, `{"value":null}`, envs.CodeBadArguments},
		{arithmetic.AnswerTool, `{"value":"5"}`, envs.CodeBadArguments},
		{arithmetic.AnswerTool, `{"value":5.5}`, envs.CodeBadArguments},
		{arithmetic.AnswerTool, `{"value":5.0}`, envs.CodeBadArguments},
		{arithmetic.AnswerTool, `{"value":1e2}`, envs.CodeBadArguments},
		{arithmetic.AnswerTool, `{"value":99999999999999999999}`, envs.CodeBadArguments},
		{arithmetic.AnswerTool, `{"value":5,"unit":"m"}`, envs.CodeBadArguments},
		{arithmetic.AnswerTool, `{"value":5}{}`, envs.CodeBadArguments},
	}
	for _, tt := range tests {
		s := start(t, `{"a":2,"b":3,"op":"+"}`)
		_, err := s.Apply(arithmetic.AnswerTool, json.RawMessage(`{"value":4}`))
		require.NoError(t, err)
		before := envtest.Export(t, s)
		_, err = s.Apply(tt.tool, json.RawMessage(tt.args))
		assert.Equal(t, tt.code, envs.CodeOf(err), "Apply(%s, %s) error = %v, want %s", tt.tool, tt.args, err, tt.code)
		assert.Equal(t, string(envtest.Export(t, s)), string(before), "Apply(%s, %s) changed state", tt.tool, tt.args)
	}
}

func TestExportRestore(t *testing.T) {
	s := start(t, `{"a":-3,"b":9,"op":"-"}`)
	fresh := envtest.Export(t, s)
	want := `{"version":1,"task":{"a":-3,"b":9,"op":"-"},"answer":null}`
	assert.Equal(t, want, string(fresh), "export = %s, want %s", fresh, want)
	_, err := s.Apply(arithmetic.AnswerTool, json.RawMessage(`{"value":-12}`))
	require.NoError(t, err)
	saved := envtest.Export(t, s)
	r, err := arithmetic.New().Restore(saved)
	require.NoError(t, err)
	got := envtest.Export(t, r)
	assert.Equal(t, string(saved), string(got), "export∘restore∘export:\n%s\n%s", got, saved)
	v, err := r.Verify()
	require.NoError(t, err, "restored verdict = %+v, %v", v, err)
	require.Equal(t, float64(1), v.Reward, "restored verdict = %+v, %v", v, err)
}

func TestRestoreRefusesBadStates(t *testing.T) {
	for _, st := range []string{``, `null`, `{}`, `[]`,
		`{"version":2,"task":{"a":1,"b":2,"op":"+"},"answer":null}`,
		`{"task":{"a":1,"b":2,"op":"+"},"answer":null}`,
		`{"version":1,"answer":null}`,
		`{"version":1,"task":{"a":1,"b":2,"op":"%"},"answer":null}`,
		`{"version":1,"task":{"a":1,"b":2},"answer":null}`,
		`{"version":1,"task":{"a":1,"b":2,"op":"+"},"answer":1.5}`,
		`{"version":1,"task":{"a":1,"b":2,"op":"+"},"answer":"3"}`,
		`{"version":1,"task":{"a":1,"b":2,"op":"+"},"answer":3,"extra":1}`,
		`{"version":1,"task":{"a":1,"b":2,"op":"+","c":0},"answer":3}`,
		`{"version":1,"task":{"a":1,"b":2,"op":"+"},"answer":3} {}`,
	} {
		_, err := arithmetic.New().Restore(json.RawMessage(st))
		assert.Equal(t, envs.CodeBadState, envs.CodeOf(err), "Restore(%q) error = %v, want %s", st, err, envs.CodeBadState)
	}
}

func TestGenerateTask(t *testing.T) {
	ops := map[string]int{}
	for i := range 300 {
		raw := arithmetic.GenerateTask(3, i)
		require.Equal(t, string(arithmetic.GenerateTask(3, i)), string(raw), "task %d not deterministic", i)
		_, _, err := arithmetic.New().Start(0, raw)
		require.NoError(t, err, "generated task %s refused", raw)
		var task arithmetic.Task
		require.NoError(t, json.Unmarshal(raw, &task))
		ops[task.Op]++
	}
	assert.Len(t, ops, 3, "ops used")
	assert.False(t, bytes.Equal(arithmetic.GenerateTask(1, 0), arithmetic.GenerateTask(2, 0)) &&
		bytes.Equal(arithmetic.GenerateTask(1, 1), arithmetic.GenerateTask(2, 1)), "task set does not depend on its seed")
}
