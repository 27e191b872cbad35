package counter_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/envs/counter"
)

func start(t *testing.T, task string) (envs.Session, envs.Start) {
	t.Helper()
	s, st, err := counter.New().Start(7, json.RawMessage(task))
	if err != nil {
		t.Fatalf("Start(%s): %v", task, err)
	}
	return s, st
}

func TestSpec(t *testing.T) {
	sp := counter.New().Spec()
	if sp.Name != "counter" || sp.Mode != envs.ModeExportRestore || sp.Style != envs.StyleTools {
		t.Fatalf("spec = %+v", sp)
	}
	if len(sp.Tools) != 1 || sp.Tools[0].Name != "increment" {
		t.Fatalf("tools = %+v", sp.Tools)
	}
	var schema map[string]any
	if err := json.Unmarshal(sp.Tools[0].Parameters, &schema); err != nil || schema["type"] != "object" {
		t.Fatalf("parameters are not a JSON schema object: %s (%v)", sp.Tools[0].Parameters, err)
	}
}

func TestStart(t *testing.T) {
	_, st := start(t, `{"target":5,"start":2}`)
	if st.Instructions != "You control a counter. Call the increment tool until the counter reaches the target, then answer done." {
		t.Errorf("instructions = %q", st.Instructions)
	}
	want := "Increase the counter from 2 to 5.\nTASK {\"start\":2,\"target\":5}"
	if st.Observation != want {
		t.Errorf("observation = %q, want %q", st.Observation, want)
	}
	_, st = start(t, `{"target":3}`)
	if !strings.HasSuffix(st.Observation, `TASK {"start":0,"target":3}`) {
		t.Errorf("default start: observation = %q", st.Observation)
	}
}

func TestBadTask(t *testing.T) {
	for _, task := range []string{
		``, `null`, `[]`, `{}`, `{"start":1}`,
		`{"target":-1}`, `{"target":1,"start":-2}`, `{"target":1,"padding":-1}`,
		`{"target":1,"padding":1048577}`, `{"target":"3"}`, `{"target":1.5}`,
		`{"target":1,"extra":true}`, `{"target":1} {}`,
	} {
		_, _, err := counter.New().Start(0, json.RawMessage(task))
		if code := envs.CodeOf(err); code != envs.CodeBadTask {
			t.Errorf("task %q: code %q (err %v), want %q", task, code, err, envs.CodeBadTask)
		}
	}
	if _, _, err := counter.New().Start(0, json.RawMessage(`{"target":1,"padding":1048576}`)); err != nil {
		t.Errorf("max padding refused: %v", err)
	}
}

func TestIncrementAndVerify(t *testing.T) {
	s, _ := start(t, `{"target":7,"start":1}`)
	v, err := s.Verify()
	if err != nil || v.Reward != 0 || string(v.Details) != `{"value":1,"target":7}` {
		t.Fatalf("verify before = %+v %s, %v", v, v.Details, err)
	}
	for i, amt := range []int{4, 2} {
		out, err := s.Apply("increment", json.RawMessage(`{"amount":`+itoa(amt)+`}`))
		if err != nil {
			t.Fatalf("op %d: %v", i, err)
		}
		want := []string{"counter=5", "counter=7"}[i]
		if out.Observation != want || out.Reward != 0 {
			t.Fatalf("op %d: outcome %+v, want %q", i, out, want)
		}
	}
	v, err = s.Verify()
	if err != nil || v.Reward != 1 || string(v.Details) != `{"value":7,"target":7}` {
		t.Fatalf("verify after = %+v %s, %v", v, v.Details, err)
	}
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
		if code := envs.CodeOf(err); code != tc.code {
			t.Errorf("%s(%s): code %q (%v), want %q", tc.tool, tc.args, code, err, tc.code)
		}
	}
	after, _ := s.Export()
	if string(before) != string(after) {
		t.Fatalf("refusals changed state: %s -> %s", before, after)
	}
}

func TestPadding(t *testing.T) {
	for _, pad := range []int{1, 36, 37, 100000, counter.MaxPadding} {
		a, _ := start(t, `{"target":3,"padding":`+itoa(pad)+`}`)
		b, _ := start(t, `{"target":3,"padding":`+itoa(pad)+`}`)
		oa, err := a.Apply("increment", json.RawMessage(`{"amount":1}`))
		if err != nil {
			t.Fatal(err)
		}
		ob, _ := b.Apply("increment", json.RawMessage(`{"amount":1}`))
		head, rest, ok := strings.Cut(oa.Observation, "\n")
		if !ok || head != "counter=1" || len(rest) != pad {
			t.Fatalf("padding %d: head %q, %d filler bytes", pad, head, len(rest))
		}
		if oa.Observation != ob.Observation {
			t.Fatalf("padding %d: filler is not deterministic", pad)
		}
	}
}

func TestExportRestoreRoundTrip(t *testing.T) {
	s, _ := start(t, `{"target":9,"start":2,"padding":5}`)
	for _, a := range []string{`{"amount":3}`, `{"amount":1}`} {
		if _, err := s.Apply("increment", json.RawMessage(a)); err != nil {
			t.Fatal(err)
		}
	}
	state, err := s.Export()
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"start":2,"target":9,"padding":5,"value":6,"ops":2}`; string(state) != want {
		t.Fatalf("export = %s, want %s", state, want)
	}
	r, err := counter.New().Restore(state)
	if err != nil {
		t.Fatalf("restore: %v", err)
	}
	again, _ := r.Export()
	if string(again) != string(state) {
		t.Fatalf("restored export %s != %s", again, state)
	}
	o1, _ := s.Apply("increment", json.RawMessage(`{"amount":3}`))
	o2, _ := r.Apply("increment", json.RawMessage(`{"amount":3}`))
	if o1 != o2 {
		t.Fatalf("restored session diverged: %+v vs %+v", o1, o2)
	}
	v1, _ := s.Verify()
	v2, _ := r.Verify()
	if v1.Reward != 1 || v2.Reward != 1 || string(v1.Details) != string(v2.Details) {
		t.Fatalf("verdicts differ: %+v %+v", v1, v2)
	}
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
		if code := envs.CodeOf(err); code != envs.CodeBadState {
			t.Errorf("state %q: code %q (%v), want %q", state, code, err, envs.CodeBadState)
		}
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
		if err != nil {
			t.Fatal(err)
		}
		_, err = s.Verify()
		return err
	}
	first := `{"target":0,"refuse_verify":"first"}`
	if err := verify(1, first); envs.CodeOf(err) != envs.CodeBadState {
		t.Fatalf("first verify of seed 1: %v, want a refusal", err)
	}
	if err := verify(1, first); err != nil {
		t.Fatalf("second verify of seed 1: %v", err)
	}
	if err := verify(2, first); envs.CodeOf(err) != envs.CodeBadState {
		t.Fatalf("first verify of seed 2: %v, want a refusal", err)
	}
	for range 2 {
		if err := verify(1, `{"target":0,"refuse_verify":"always"}`); envs.CodeOf(err) != envs.CodeBadState {
			t.Fatalf("always: %v, want a refusal", err)
		}
	}
	if _, _, err := env.Start(1, json.RawMessage(`{"target":0,"refuse_verify":"sometimes"}`)); envs.CodeOf(err) != envs.CodeBadTask {
		t.Fatalf("unknown mode: %v, want bad_task", err)
	}

	s, _, err := env.Start(3, json.RawMessage(`{"target":0,"refuse_verify":"always"}`))
	if err != nil {
		t.Fatal(err)
	}
	state, err := s.Export()
	if err != nil {
		t.Fatal(err)
	}
	restored, err := env.Restore(state)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := restored.Verify(); envs.CodeOf(err) != envs.CodeBadState {
		t.Fatalf("restored always: %v, want a refusal", err)
	}
	plain, _, err := env.Start(3, json.RawMessage(`{"target":2}`))
	if err != nil {
		t.Fatal(err)
	}
	if state, _ := plain.Export(); string(state) != `{"start":0,"target":2,"padding":0,"value":0,"ops":0}` {
		t.Errorf("plain state %s", state)
	}
}
