package counter_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/envs/counter"
)

func start(t *testing.T, task string) (envs.Session, envs.Start) {
	t.Helper()
	s, st, err := counter.New().Start(7, json.RawMessage(task))
	require.NoError(t, err, "Start(%s)", task)
	return s, st
}

func TestSpec(t *testing.T) {
	sp := counter.New().Spec()
	require.Equal(t, "counter", sp.Name, "spec = %+v", sp)
	require.Equal(t, envs.ModeExportRestore, sp.Mode, "spec = %+v", sp)
	require.Equal(t, envs.StyleTools, sp.Style, "spec = %+v", sp)
	require.Len(t, sp.Tools, 1, "tools = %+v", sp.Tools)
	require.Equal(t, "increment", sp.Tools[0].Name, "tools = %+v", sp.Tools)
	var schema map[string]any
	err := json.Unmarshal(sp.Tools[0].Parameters, &schema)
	require.NoError(t, err, "parameters are not a JSON schema object: %s (%v)", sp.Tools[0].Parameters, err)
	require.Equal(t, "object", schema["type"], "parameters are not a JSON schema object: %s (%v)", sp.Tools[0].Parameters, err)
}

func TestStart(t *testing.T) {
	_, st := start(t, `{"target":5,"start":2}`)
	assert.Equal(t, "You control a counter. Call the increment tool until the counter reaches the target, then answer done.", st.Instructions, "instructions")
	want := "Increase the counter from 2 to 5.\nTASK {\"start\":2,\"target\":5}"
	assert.Equal(t, want, st.Observation, "observation = %q, want %q", st.Observation, want)
	_, st = start(t, `{"target":3}`)
	assert.True(t, strings.HasSuffix(st.Observation, `TASK {"start":0,"target":3}`), "default start: observation = %q", st.Observation)
}

func TestBadTask(t *testing.T) {
	for _, task := range []string{
		``, `null`, `[]`, `{}`, `{"start":1}`,
		`{"target":-1}`, `{"target":1,"start":-2}`, `{"target":1,"padding":-1}`,
		`{"target":1,"padding":1048577}`, `{"target":"3"}`, `{"target":1.5}`,
		`{"target":1,"extra":true}`, `{"target":1} {}`,
	} {
		_, _, err := counter.New().Start(0, json.RawMessage(task))
		code := envs.CodeOf(err)
		assert.Equal(t, envs.CodeBadTask, code, "task %q: code %q (err %v), want %q", task, code, err, envs.CodeBadTask)
	}
	_, _, err := counter.New().Start(0, json.RawMessage(`{"target":1,"padding":1048576}`))
	assert.NoError(t, err, "max padding refused")
}

func TestIncrementAndVerify(t *testing.T) {
	s, _ := start(t, `{"target":7,"start":1}`)
	v, err := s.Verify()
	require.NoError(t, err, "verify before = %+v %s, %v", v, v.Details, err)
	require.Equal(t, float64(0), v.Reward, "verify before = %+v %s, %v", v, v.Details, err)
	require.Equal(t, `{"value":1,"target":7}`, string(v.Details), "verify before = %+v %s, %v", v, v.Details, err)
	for i, amt := range []int{4, 2} {
		out, err := s.Apply("increment", json.RawMessage(`{"amount":`+itoa(amt)+`}`))
		require.NoError(t, err, "op %d", i)
		want := []string{"counter=5", "counter=7"}[i]
		require.Equal(t, want, out.Observation, "op %d: outcome %+v, want %q", i, out, want)
		require.Equal(t, float64(0), out.Reward, "op %d: outcome %+v, want %q", i, out, want)
	}
	v, err = s.Verify()
	require.NoError(t, err, "verify after = %+v %s, %v", v, v.Details, err)
	require.Equal(t, float64(1), v.Reward, "verify after = %+v %s, %v", v, v.Details, err)
	require.Equal(t, `{"value":7,"target":7}`, string(v.Details), "verify after = %+v %s, %v", v, v.Details, err)
}

func TestApplyRefusalsChangeNothing(t *testing.T) {
	s, _ := start(t, `{"target":3}`)
	before, _ := s.Export()
	for _, tc := range []struct {
		tool, args, code string
	}{
		{"decrement", `{"amount":1}`, envs.CodeUnknownTool},
		{"increment", `{"amount":0}`, envs.CodeBadArguments},
		{"increment", `{"amount":11}`, envs.CodeBadArguments},
		{"increment", `{"amount":2.5}`, envs.CodeBadArguments},
		{"increment", `{"amount":"2"}`, envs.CodeBadArguments},
		{"increment", `{}`, envs.CodeBadArguments},
		{"increment", `{"amount":1,"x":1}`, envs.CodeBadArguments},
		{"increment", ``, envs.CodeBadArguments},
	} {
		_, err := s.Apply(tc.tool, json.RawMessage(tc.args))
		code := envs.CodeOf(err)
		assert.Equal(t, tc.code, code, "%s(%s): code %q (%v), want %q", tc.tool, tc.args, code, err, tc.code)
	}
	after, _ := s.Export()
	require.Equal(t, string(after), string(before), "refusals changed state: %s -> %s", before, after)
}

func TestPadding(t *testing.T) {
	for _, pad := range []int{1, 36, 37, 100000, counter.MaxPadding} {
		a, _ := start(t, `{"target":3,"padding":`+itoa(pad)+`}`)
		b, _ := start(t, `{"target":3,"padding":`+itoa(pad)+`}`)
		oa, err := a.Apply("increment", json.RawMessage(`{"amount":1}`))
		require.NoError(t, err)
		ob, _ := b.Apply("increment", json.RawMessage(`{"amount":1}`))
		head, rest, ok := strings.Cut(oa.Observation, "\n")
		require.True(t, ok, "padding %d: head %q, %d filler bytes", pad, head, len(rest))
		require.Equal(t, "counter=1", head, "padding %d: head %q, %d filler bytes", pad, head, len(rest))
		require.Len(t, rest, pad, "padding %d: head %q, %d filler bytes", pad, head, len(rest))
		require.Equal(t, ob.Observation, oa.Observation, "padding %d: filler is not deterministic", pad)
	}
}

func TestExportRestoreRoundTrip(t *testing.T) {
	s, _ := start(t, `{"target":9,"start":2,"padding":5}`)
	for _, a := range []string{`{"amount":3}`, `{"amount":1}`} {
		_, err := s.Apply("increment", json.RawMessage(a))
		require.NoError(t, err)
	}
	state, err := s.Export()
	require.NoError(t, err)
	want := `{"start":2,"target":9,"padding":5,"value":6,"ops":2}`
	require.Equal(t, want, string(state), "export = %s, want %s", state, want)
	r, err := counter.New().Restore(state)
	require.NoError(t, err, "restore")
	again, _ := r.Export()
	require.Equal(t, string(state), string(again), "restored export %s != %s", again, state)
	o1, _ := s.Apply("increment", json.RawMessage(`{"amount":3}`))
	o2, _ := r.Apply("increment", json.RawMessage(`{"amount":3}`))
	require.Equal(t, o2, o1, "restored session diverged: %+v vs %+v", o1, o2)
	v1, _ := s.Verify()
	v2, _ := r.Verify()
	require.Equal(t, float64(1), v1.Reward, "verdicts differ: %+v %+v", v1, v2)
	require.Equal(t, float64(1), v2.Reward, "verdicts differ: %+v %+v", v1, v2)
	require.Equal(t, string(v2.Details), string(v1.Details), "verdicts differ: %+v %+v", v1, v2)
}

func TestRestoreRefusesBadState(t *testing.T) {
	for _, state := range []string{
		``, `null`, `{}`,
		`{"start":0,"target":1,"padding":0,"value":0}`,
		`{"start":0,"target":1,"padding":0,"value":0,"ops":0,"extra":1}`,
		`{"start":-1,"target":1,"padding":0,"value":0,"ops":0}`,
		`{"start":0,"target":-1,"padding":0,"value":0,"ops":0}`,
		`{"start":0,"target":1,"padding":-1,"value":0,"ops":0}`,
		`{"start":0,"target":1,"padding":1048577,"value":0,"ops":0}`,
		`{"start":0,"target":1,"padding":0,"value":"0","ops":0}`,
		`{"start":0,"target":1,"padding":0,"value":1.5,"ops":0}`,
		`{"start":5,"target":1,"padding":0,"value":4,"ops":0}`,
		`{"start":0,"target":1,"padding":0,"value":3,"ops":0}`,
		`{"start":0,"target":1,"padding":0,"value":30,"ops":2}`,
		`{"start":0,"target":1,"padding":0,"value":1,"ops":2}`,
		`{"start":0,"target":1,"padding":0,"value":0,"ops":0}{}`,
	} {
		_, err := counter.New().Restore(json.RawMessage(state))
		code := envs.CodeOf(err)
		assert.Equal(t, envs.CodeBadState, code, "state %q: code %q (%v), want %q", state, code, err, envs.CodeBadState)
	}
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// TestRefuseVerify: a task may inject an environment failure. "first"
// refuses an episode's (task and seed's) first verify on this environment
// only, as a sandbox that fails a rollout's first attempt; "always" refuses
// every one; a restored session keeps its mode. Tasks without it export as
// before.
func TestRefuseVerify(t *testing.T) {
	env := counter.New()
	verify := func(seed int64, task string) error {
		t.Helper()
		s, _, err := env.Start(seed, json.RawMessage(task))
		require.NoError(t, err)
		_, err = s.Verify()
		return err
	}
	first := `{"target":0,"refuse_verify":"first"}`
	err := verify(1, first)
	require.Equal(t, envs.CodeBadState, envs.CodeOf(err), "first verify of seed 1: %v, want a refusal", err)
	require.NoError(t, verify(1, first), "second verify of seed 1")
	err = verify(2, first)
	require.Equal(t, envs.CodeBadState, envs.CodeOf(err), "first verify of seed 2: %v, want a refusal", err)
	for range 2 {
		err := verify(1, `{"target":0,"refuse_verify":"always"}`)
		require.Equal(t, envs.CodeBadState, envs.CodeOf(err), "always: %v, want a refusal", err)
	}
	_, _, err = env.Start(1, json.RawMessage(`{"target":0,"refuse_verify":"sometimes"}`))
	require.Equal(t, envs.CodeBadTask, envs.CodeOf(err), "unknown mode: %v, want bad_task", err)

	s, _, err := env.Start(3, json.RawMessage(`{"target":0,"refuse_verify":"always"}`))
	require.NoError(t, err)
	state, err := s.Export()
	require.NoError(t, err)
	restored, err := env.Restore(state)
	require.NoError(t, err)
	_, err = restored.Verify()
	require.Equal(t, envs.CodeBadState, envs.CodeOf(err), "restored always: %v, want a refusal", err)
	plain, _, err := env.Start(3, json.RawMessage(`{"target":2}`))
	require.NoError(t, err)
	state, _ = plain.Export()
	assert.Equal(t, `{"start":0,"target":2,"padding":0,"value":0,"ops":0}`, string(state), "plain state %s", state)
}
