package workplace_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/envs/workplace"
)

// runPlan starts the task and applies its plan; it returns the session.
func runPlan(t *testing.T, task json.RawMessage) (envs.Session, envs.Start) {
	t.Helper()
	sess, start, err := workplace.New().Start(0, task)
	if err != nil {
		t.Fatalf("start %s: %v", task, err)
	}
	plan, err := workplace.Plan(task)
	if err != nil {
		t.Fatalf("plan %s: %v", task, err)
	}
	for i, c := range plan {
		if _, err := sess.Apply(c.Tool, c.Arguments); err != nil {
			t.Fatalf("task %s step %d %s %s: %v", task, i, c.Tool, c.Arguments, err)
		}
	}
	return sess, start
}

func verdict(t *testing.T, s envs.Session) (float64, workplace.VerifyDetails) {
	t.Helper()
	v, err := s.Verify()
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	var d workplace.VerifyDetails
	if err := json.Unmarshal(v.Details, &d); err != nil {
		t.Fatalf("details %s: %v", v.Details, err)
	}
	return v.Reward, d
}

// TestEveryGeneratedTaskIsSolvableByItsPlan covers more than 100 tasks of one
// seed: each is distinct, starts unsolved, and its plan reaches reward 1.
func TestEveryGeneratedTaskIsSolvableByItsPlan(t *testing.T) {
	for seed, n := range map[int64]int{1: 110, 42: 2 * workplace.TemplateCount()} {
		seen := map[string]int{}
		templates := map[string]bool{}
		for i := 0; i < n; i++ {
			task := workplace.GenerateTask(seed, i)
			fresh, start, err := workplace.New().Start(0, task)
			if err != nil {
				t.Fatalf("start: %v", err)
			}
			if r, _ := verdict(t, fresh); r != 0 {
				t.Fatalf("task %s is solved before any call", task)
			}
			sess, _ := runPlan(t, task)
			r, d := verdict(t, sess)
			if r != 1 {
				t.Fatalf("task %s: plan reward %v, differs %v", task, r, d.Differs)
			}
			templates[d.Template] = true
			if j, dup := seen[start.Observation]; dup {
				t.Fatalf("tasks %d and %d of seed %d have the same start observation", j, i, seed)
			}
			seen[start.Observation] = i
			raw, ok := workplace.TaskFromObservation(start.Observation)
			if !ok || string(raw) != string(task) {
				t.Fatalf("TASK line of %q = %s, want %s", start.Observation, raw, task)
			}
		}
		if len(templates) != workplace.TemplateCount() || len(templates) < 5 {
			t.Fatalf("seed %d used templates %v, want all %d", seed, templates, workplace.TemplateCount())
		}
	}
}

func TestStartIsDeterministic(t *testing.T) {
	for i := 0; i < 22; i++ {
		task := workplace.GenerateTask(9, i)
		a, sa, err := workplace.New().Start(1, task)
		if err != nil {
			t.Fatal(err)
		}
		b, sb, err := workplace.New().Start(2, task)
		if err != nil {
			t.Fatal(err)
		}
		ea, _ := a.Export()
		eb, _ := b.Export()
		if string(ea) != string(eb) || sa != sb {
			t.Fatalf("task %d: two starts differ", i)
		}
		other, _, _ := workplace.New().Start(1, workplace.GenerateTask(10, i))
		eo, _ := other.Export()
		if string(eo) == string(ea) {
			t.Fatalf("task %d: seeds 9 and 10 give the same world", i)
		}
	}
}

func TestStartRefusesBadTasks(t *testing.T) {
	cases := map[string]string{
		"not json":       `nope`,
		"not an object":  `[1]`,
		"unknown field":  `{"task_id":"workplace-1-0","seed":1,"index":0,"extra":1}`,
		"missing index":  `{"task_id":"workplace-1-0","seed":1}`,
		"wrong id":       `{"task_id":"workplace-1-1","seed":1,"index":0}`,
		"negative index": `{"task_id":"workplace-1--1","seed":1,"index":-1}`,
		"string seed":    `{"task_id":"workplace-1-0","seed":"1","index":0}`,
		"null seed":      `{"task_id":"workplace-1-0","seed":null,"index":0}`,
	}
	for name, task := range cases {
		t.Run(name, func(t *testing.T) {
			s, _, err := workplace.New().Start(0, json.RawMessage(task))
			if envs.CodeOf(err) != envs.CodeBadTask || s != nil {
				t.Fatalf("Start(%s) = %v, %v; want %s", task, s, err, envs.CodeBadTask)
			}
			if _, err := workplace.Plan(json.RawMessage(task)); envs.CodeOf(err) != envs.CodeBadTask {
				t.Fatalf("Plan(%s) err = %v", task, err)
			}
		})
	}
}

func TestStartObservationCarriesTaskLine(t *testing.T) {
	task := workplace.GenerateTask(3, 4)
	_, start, err := workplace.New().Start(0, task)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(start.Observation, "\n")
	if want := "TASK " + string(task); lines[len(lines)-1] != want {
		t.Fatalf("last line %q, want %q", lines[len(lines)-1], want)
	}
	if start.Instructions == "" || lines[0] == "" {
		t.Fatalf("empty instructions or instruction: %+v", start)
	}
	if _, ok := workplace.TaskFromObservation("no task here"); ok {
		t.Fatal("found a task line where there is none")
	}
}
