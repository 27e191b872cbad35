package workplace_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/envs/workplace"
)

// runPlan starts the task and applies its plan; it returns the session.
func runPlan(t *testing.T, task json.RawMessage) (envs.Session, envs.Start) {
	t.Helper()
	sess, start, err := workplace.New().Start(0, task)
	require.NoError(t, err, "start %s", task)
	plan, err := workplace.Plan(task)
	require.NoError(t, err, "plan %s", task)
	for i, c := range plan {
		_, err = sess.Apply(c.Tool, c.Arguments)
		require.NoError(t, err, "task %s step %d %s %s", task, i, c.Tool, c.Arguments)
	}
	return sess, start
}

func verdict(t *testing.T, s envs.Session) (float64, workplace.VerifyDetails) {
	t.Helper()
	v, err := s.Verify()
	require.NoError(t, err, "verify")
	var d workplace.VerifyDetails
	require.NoError(t, json.Unmarshal(v.Details, &d), "details %s", v.Details)
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
			require.NoError(t, err, "start")
			r, _ := verdict(t, fresh)
			require.Equal(t, float64(0), r, "task %s is solved before any call", task)
			sess, _ := runPlan(t, task)
			r, d := verdict(t, sess)
			require.Equal(t, float64(1), r, "task %s: plan reward %v, differs %v", task, r, d.Differs)
			templates[d.Template] = true
			j, dup := seen[start.Observation]
			require.False(t, dup, "tasks %d and %d of seed %d have the same start observation", j, i, seed)
			seen[start.Observation] = i
			raw, ok := workplace.TaskFromObservation(start.Observation)
			require.True(t, ok, "TASK line of %q = %s, want %s", start.Observation, raw, task)
			require.Equal(t, string(task), string(raw), "TASK line of %q = %s, want %s", start.Observation, raw, task)
		}
		require.Len(t, templates, workplace.TemplateCount(), "seed %d used templates %v, want all %d", seed, templates, workplace.TemplateCount())
		require.GreaterOrEqual(t, len(templates), 5, "seed %d used templates %v, want all %d", seed, templates, workplace.TemplateCount())
	}
}

func TestStartIsDeterministic(t *testing.T) {
	for i := 0; i < 22; i++ {
		task := workplace.GenerateTask(9, i)
		a, sa, err := workplace.New().Start(1, task)
		require.NoError(t, err)
		b, sb, err := workplace.New().Start(2, task)
		require.NoError(t, err)
		ea, _ := a.Export()
		eb, _ := b.Export()
		require.Equal(t, string(eb), string(ea), "task %d: two starts differ", i)
		require.Equal(t, sb, sa, "task %d: two starts differ", i)
		other, _, _ := workplace.New().Start(1, workplace.GenerateTask(10, i))
		eo, _ := other.Export()
		require.NotEqual(t, string(ea), string(eo), "task %d: seeds 9 and 10 give the same world", i)
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
			require.Equal(t, envs.CodeBadTask, envs.CodeOf(err), "Start(%s) = %v, %v; want %s", task, s, err, envs.CodeBadTask)
			require.True(t, s == nil, "Start(%s) = %v, %v; want %s", task, s, err, envs.CodeBadTask)
			_, err = workplace.Plan(json.RawMessage(task))
			require.Equal(t, envs.CodeBadTask, envs.CodeOf(err), "Plan(%s) err = %v", task, err)
		})
	}
}

func TestStartObservationCarriesTaskLine(t *testing.T) {
	task := workplace.GenerateTask(3, 4)
	_, start, err := workplace.New().Start(0, task)
	require.NoError(t, err)
	lines := strings.Split(start.Observation, "\n")
	want := "TASK " + string(task)
	require.Equal(t, want, lines[len(lines)-1], "last line %q, want %q", lines[len(lines)-1], want)
	require.NotEqual(t, "", start.Instructions, "empty instructions or instruction: %+v", start)
	require.NotEqual(t, "", lines[0], "empty instructions or instruction: %+v", start)
	_, ok := workplace.TaskFromObservation("no task here")
	require.False(t, ok, "found a task line where there is none")
}
