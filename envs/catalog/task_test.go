package catalog_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/envs/catalog"
)

func TestTaskCounterDeterministicAndInRange(t *testing.T) {
	seen := map[int]bool{}
	for _, seed := range []int64{0, 1, 7, -3} {
		for i := 0; i < 200; i++ {
			a, err := catalog.Task("counter", seed, i)
			require.NoError(t, err, "Task(counter, %d, %d)", seed, i)
			b, err := catalog.Task("counter", seed, i)
			require.NoError(t, err)
			require.Equal(t, string(b), string(a), "seed %d index %d: not deterministic: %s vs %s", seed, i, a, b)
			var task struct {
				Target int `json:"target"`
			}
			require.NoError(t, json.Unmarshal(a, &task), "decode %s", a)
			require.GreaterOrEqual(t, task.Target, 2, "seed %d index %d: target %d outside 2..8", seed, i, task.Target)
			require.LessOrEqual(t, task.Target, 8, "seed %d index %d: target %d outside 2..8", seed, i, task.Target)
			seen[task.Target] = true
		}
	}
	// Every value of the range must be reachable, or the generator is biased.
	for v := 2; v <= 8; v++ {
		assert.True(t, seen[v], "target %d never generated", v)
	}
}

func TestTaskVariesWithSeedAndIndex(t *testing.T) {
	distinct := map[string]bool{}
	for i := 0; i < 32; i++ {
		b, err := catalog.Task("counter", 7, i)
		require.NoError(t, err)
		distinct[string(b)] = true
	}
	require.GreaterOrEqual(t, len(distinct), 2, "32 indexes gave %d distinct tasks", len(distinct))
	differ := false
	for i := 0; i < 32 && !differ; i++ {
		a, _ := catalog.Task("counter", 1, i)
		b, _ := catalog.Task("counter", 2, i)
		differ = string(a) != string(b)
	}
	require.True(t, differ, "seeds 1 and 2 gave identical tasks for 32 indexes")
}

func TestTaskErrors(t *testing.T) {
	tests := []struct {
		name  string
		env   string
		index int
		want  []string
	}{
		{"unknown env lists known", "chess", 0, []string{`"chess"`, "counter"}},
		{"empty env", "", 0, []string{`""`, "counter"}},
		{"negative index", "counter", -1, []string{"-1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := catalog.Task(tt.env, 1, tt.index)
			require.Error(t, err, "want error, got %s", b)
			for _, w := range tt.want {
				assert.ErrorContains(t, err, w, "error %q does not mention %s", err, w)
			}
		})
	}
}

func TestNames(t *testing.T) {
	got := strings.Join(catalog.Names(), ",")
	require.Equal(t, "arithmetic,blackjack,counter,notes,sandbox,workplace", got, "Names(), sorted")
	hosted := strings.Join(catalog.HostedNames(), ",")
	want := "arithmetic,blackjack,counter,sandbox,workplace"
	require.Equal(t, want, hosted, "HostedNames() = %s, want %s (notes runs in the Python participant)", hosted, want)
}

// TestTaskBytesPinned pins the exact task bytes of every environment at a
// few (seed, index) points: recorded histories, checkpoints and test fixtures
// hold these tasks, so a refactor that changes a generator's draws or its
// encoding must fail here rather than silently give sets new tasks.
func TestTaskBytesPinned(t *testing.T) {
	tests := []struct {
		env   string
		seed  int64
		index int
		want  string
	}{
		{"arithmetic", 7, 0, `{"a":752,"b":529,"op":"+"}`},
		{"arithmetic", 7, 3, `{"a":-49,"b":-91,"op":"*"}`},
		{"arithmetic", -3, 11, `{"a":-23,"b":7,"op":"*"}`},
		{"blackjack", 7, 0, `{"rounds":4}`},
		{"blackjack", 7, 3, `{"rounds":2}`},
		{"blackjack", -3, 11, `{"rounds":4}`},
		{"counter", 7, 0, `{"target":3}`},
		{"counter", 7, 3, `{"target":7}`},
		{"counter", -3, 11, `{"target":7}`},
		{"notes", 7, 0, `{"steps":2}`},
		{"notes", 7, 3, `{"steps":4}`},
		{"notes", -3, 11, `{"steps":4}`},
		{"sandbox", 7, 0, `{"files":{"notes.txt":"lantern alpha\nmaple bravo\norbit maple\n","summary.txt":"bravo orbit\n","todo.txt":"ember river\nriver orbit lantern\nmeadow cloud cloud ember\n"}}`},
		{"sandbox", 7, 3, `{"files":{"plan.txt":"cloud ember ember\nember cloud alpha\nharbor river\n","summary.txt":"bravo lantern lantern river\n"}}`},
		{"sandbox", -3, 11, `{"files":{"ideas.txt":"bravo harbor\norbit harbor\nbravo delta\n"}}`},
		{"workplace", 7, 0, `{"task_id":"workplace-4971928291090985182-299718","seed":4971928291090985182,"index":299718}`},
		{"workplace", 7, 3, `{"task_id":"workplace-5592146897251068097-854244","seed":5592146897251068097,"index":854244}`},
		{"workplace", -3, 11, `{"task_id":"workplace-4389940832081916771-13349","seed":4389940832081916771,"index":13349}`},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/%d/%d", tt.env, tt.seed, tt.index), func(t *testing.T) {
			got, err := catalog.Task(tt.env, tt.seed, tt.index)
			require.NoError(t, err)
			require.Equal(t, tt.want, string(got), "task bytes changed:\n got %s\nwant %s", got, tt.want)
		})
	}
}
