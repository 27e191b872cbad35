package arithmetic_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/envs/arithmetic"
)

var _ envs.Environment = arithmetic.New()

func start(t *testing.T, task string) envs.Session {
	t.Helper()
	s, _, err := arithmetic.New().Start(1, json.RawMessage(task))
	if err != nil {
		t.Fatalf("Start(%s): %v", task, err)
	}
	return s
}

func export(t *testing.T, s envs.Session) json.RawMessage {
	t.Helper()
	b, err := s.Export()
	if err != nil {
		t.Fatalf("Export: %v", err)
	}
	return b
}

func TestSpec(t *testing.T) {
	sp := arithmetic.New().Spec()
	if sp.Name != "arithmetic" || sp.Mode != envs.ModeStateless || sp.Style != envs.StyleTools {
		t.Fatalf("spec = %+v", sp)
	}
	if len(sp.Tools) != 1 || sp.Tools[0].Name != arithmetic.AnswerTool || !json.Valid(sp.Tools[0].Parameters) {
		t.Fatalf("tools = %+v", sp.Tools)
	}
}

func TestStartStatesTheTask(t *testing.T) {
	_, st, err := arithmetic.New().Start(5, json.RawMessage(`{"a":12,"b":-7,"op":"*"}`))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(st.Observation, "\n")
	if got, want := lines[len(lines)-1], `TASK {"a":12,"b":-7,"op":"*"}`; got != want {
		t.Errorf("last line %q, want %q", got, want)
	}
	if !strings.Contains(st.Observation, "12 * -7") || st.Instructions == "" {
		t.Errorf("start = %+v", st)
	}
}

func TestStartRefusesBadTasks(t *testing.T) {
	for _, task := range []string{``, `null`, `{}`, `{"a":1,"b":2}`, `{"a":1,"op":"+"}`, `{"a":1,"b":2,"op":"/"}`,
		`{"a":1.5,"b":2,"op":"+"}`, `{"a":"1","b":2,"op":"+"}`, `{"a":1,"b":2,"op":"+","c":3}`,
		`{"a":1000000001,"b":2,"op":"*"}`, `{"a":1,"b":-1000000001,"op":"-"}`, `{"a":1,"b":2,"op":"+"} 1`} {
		if _, _, err := arithmetic.New().Start(1, json.RawMessage(task)); envs.CodeOf(err) != envs.CodeBadTask {
			t.Errorf("Start(%q) error = %v, want %s", task, err, envs.CodeBadTask)
		}
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
				if err != nil || !strings.HasPrefix(out.Observation, "Received answer") || out.Reward != 0 || out.Terminated {
					t.Fatalf("Apply(%s) = %+v, %v", a, out, err)
				}
			}
			before := export(t, s)
			v, err := s.Verify()
			if err != nil || v.Reward != tt.reward || !json.Valid(v.Details) {
				t.Fatalf("Verify = %+v, %v; want reward %v", v, err, tt.reward)
			}
			if !bytes.Equal(before, export(t, s)) {
				t.Error("Verify changed state")
			}
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
		if _, err := s.Apply(arithmetic.AnswerTool, json.RawMessage(`{"value":4}`)); err != nil {
			t.Fatal(err)
		}
		before := export(t, s)
		if _, err := s.Apply(tt.tool, json.RawMessage(tt.args)); envs.CodeOf(err) != tt.code {
			t.Errorf("Apply(%s, %s) error = %v, want %s", tt.tool, tt.args, err, tt.code)
		}
		if !bytes.Equal(before, export(t, s)) {
			t.Errorf("Apply(%s, %s) changed state", tt.tool, tt.args)
		}
	}
}

func TestExportRestore(t *testing.T) {
	s := start(t, `{"a":-3,"b":9,"op":"-"}`)
	fresh := export(t, s)
	if want := `{"version":1,"task":{"a":-3,"b":9,"op":"-"},"answer":null}`; string(fresh) != want {
		t.Errorf("export = %s, want %s", fresh, want)
	}
	if _, err := s.Apply(arithmetic.AnswerTool, json.RawMessage(`{"value":-12}`)); err != nil {
		t.Fatal(err)
	}
	saved := export(t, s)
	r, err := arithmetic.New().Restore(saved)
	if err != nil {
		t.Fatal(err)
	}
	if got := export(t, r); !bytes.Equal(got, saved) {
		t.Errorf("export∘restore∘export:\n%s\n%s", got, saved)
	}
	v, err := r.Verify()
	if err != nil || v.Reward != 1 {
		t.Errorf("restored verdict = %+v, %v", v, err)
	}
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
		if _, err := arithmetic.New().Restore(json.RawMessage(st)); envs.CodeOf(err) != envs.CodeBadState {
			t.Errorf("Restore(%q) error = %v, want %s", st, err, envs.CodeBadState)
		}
	}
}

func TestGenerateTask(t *testing.T) {
	ops := map[string]int{}
	for i := range 300 {
		raw := arithmetic.GenerateTask(3, i)
		if !bytes.Equal(raw, arithmetic.GenerateTask(3, i)) {
			t.Fatalf("task %d not deterministic", i)
		}
		if _, _, err := arithmetic.New().Start(0, raw); err != nil {
			t.Fatalf("generated task %s refused: %v", raw, err)
		}
		var task arithmetic.Task
		if err := json.Unmarshal(raw, &task); err != nil {
			t.Fatal(err)
		}
		ops[task.Op]++
	}
	if len(ops) != 3 {
		t.Errorf("ops used: %v", ops)
	}
	if bytes.Equal(arithmetic.GenerateTask(1, 0), arithmetic.GenerateTask(2, 0)) &&
		bytes.Equal(arithmetic.GenerateTask(1, 1), arithmetic.GenerateTask(2, 1)) {
		t.Error("task set does not depend on its seed")
	}
}
