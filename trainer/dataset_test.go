package trainer

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

const goodDataset = `{"id":"q1","env":"counter","task":{"target":3}}

{"env":"counter","task":{"target": 4},"sampling":{"temperature":0.7,"capture_tokens":true},"max_turns":9}
{"id":"q3","env":"counter","task":{"target":2},"seed":40,"policy":{"model":"m","base_url":"http://m:8000/v1","version":"7"}}
`

func TestReadDataset(t *testing.T) {
	rows, err := ReadDataset(strings.NewReader(goodDataset))
	require.NoError(t, err)
	require.Len(t, rows, 3, "%d rows, want 3", len(rows))
	require.Equal(t, 1, rows[0].Line, "lines %d %d %d, want 1 3 4", rows[0].Line, rows[1].Line, rows[2].Line)
	require.Equal(t, 3, rows[1].Line, "lines %d %d %d, want 1 3 4", rows[0].Line, rows[1].Line, rows[2].Line)
	require.Equal(t, 4, rows[2].Line, "lines %d %d %d, want 1 3 4", rows[0].Line, rows[1].Line, rows[2].Line)
	got := RowID(rows[1], 1)
	assert.Equal(t, "row3", got, "id of a row without one = %q, want row3 (its line)", got)
	require.NotNil(t, rows[1].Sampling, "row 2 = %+v", rows[1])
	require.Equal(t, 0.7, *rows[1].Sampling.Temperature, "row 2 = %+v", rows[1])
	require.True(t, rows[1].Sampling.CaptureTokens, "row 2 = %+v", rows[1])
	require.Equal(t, 9, rows[1].MaxTurns, "row 2 = %+v", rows[1])
}

// TestReadDatasetReportsEveryBadRow: one pass names every bad line, parse
// errors and row checks together, in line order.
func TestReadDatasetReportsEveryBadRow(t *testing.T) {
	data := strings.Join([]string{
		`{"id":"a","env":"counter","task":{"target":3}}`,                        // 1 ok
		`{"id":"b","env":"chess","task":{}}`,                                    // 2 unknown env
		`{"id":"c","env":"counter","task":{"target":-1}}`,                       // 3 task refused
		`{"id":"a","env":"counter","task":{"target":3}}`,                        // 4 duplicate id
		`{"id":"d","env":"counter","task":{"target":3}`,                         // 5 bad JSON
		`{"id":"e","env":"counter","task":{"target":3},"sampling":{"top_p":2}}`, // 6 bad sampling
		`{"id":"bad/id","env":"counter","task":{"target":3}}`,                   // 7 bad id charset
		`{"id":"f","env":"counter"}`,                                            // 8 no task
		`{"id":"g","env":"counter","task":{"target":3},"sampeling":{}}`,         // 9 unknown field
		`{"env":"counter","task":{"target":3}}`,                                 // 10 ok, row10
		`{"id":"row10","env":"counter","task":{"target":3}}`,                    // 11 duplicates row10
		`{"id":"h","env":"counter","task":{"target":3},"max_turns":-2}`,         // 12 bad max_turns
	}, "\n")
	rows, err := ReadDataset(strings.NewReader(data))
	var de *DatasetError
	require.ErrorAs(t, err, &de, "err = %v, want a *DatasetError", err)
	want := map[int]string{
		2: `unknown environment "chess"`, 3: "refuses the task", 4: `also the id of line 1`,
		5: "bad JSON", 6: "top_p", 7: `id "bad/id"`, 8: "task is required",
		9: `unknown field "sampeling"`, 11: "also the id of line 10", 12: "max_turns -2",
	}
	var lines []int
	for _, r := range de.Rows {
		lines = append(lines, r.Line)
		assert.ErrorContains(t, r.Err, want[r.Line], "line %d: %v, want it to mention %q", r.Line, r.Err, want[r.Line])
	}
	assert.Equal(t, []int{2, 3, 4, 5, 6, 7, 8, 9, 11, 12}, lines, "bad lines %v, want 2-9, 11, 12\n%v", lines, err)
	require.ErrorContains(t, err, "10 bad rows", "message %q", err)
	require.ErrorContains(t, err, "line 12:", "message %q", err)
	assert.Len(t, rows, 10, "%d decodable rows returned, want 10", len(rows))
}

func TestReadDatasetEmpty(t *testing.T) {
	_, err := ReadDataset(strings.NewReader("\n  \n"))
	require.ErrorContains(t, err, "no rows", "err = %v", err)
}

func TestDatasetIDsAndSeeds(t *testing.T) {
	assert.Equal(t, "s1-q7-r3", DatasetRolloutID("s1", "q7", 3), "DatasetRolloutID")
	a := DatasetSeed("s1", "q7", 0)
	assert.Equal(t, DatasetSeed("s1", "q7", 0), a, "DatasetSeed is not deterministic")
	seen := map[int64]bool{}
	for _, k := range [][3]any{{"s1", "q7", 0}, {"s1", "q7", 1}, {"s1", "q8", 0}, {"s2", "q7", 0}, {"s1-q", "7", 0}} {
		s := DatasetSeed(k[0].(string), k[1].(string), k[2].(int))
		require.GreaterOrEqual(t, s, int64(0), "seed %d outside [0, 2^53)", s)
		require.Less(t, s, int64(1<<53), "seed %d outside [0, 2^53)", s)
		assert.False(t, seen[s], "seed of %v repeats another's", k)
		seen[s] = true
	}
}

func datasetRequest(t *testing.T) SubmitRequest {
	t.Helper()
	rows, err := ReadDataset(strings.NewReader(goodDataset))
	require.NoError(t, err)
	return SubmitRequest{Set: "s1", Rows: rows, Repeats: 2, ModelURL: "http://default:9/v1", MaxTurns: 5}
}

func TestBuildDatasetInputs(t *testing.T) {
	inputs, err := BuildInputs(datasetRequest(t))
	require.NoError(t, err)
	var ids []string
	for _, in := range inputs {
		ids = append(ids, in.RolloutID)
	}
	wantIDs := []string{"s1-q1-r0", "s1-q1-r1", "s1-row3-r0", "s1-row3-r1", "s1-q3-r0", "s1-q3-r1"}
	require.Equal(t, wantIDs, ids, "ids %v, want %v", ids, wantIDs)
	q1, row3, q3 := inputs[1], inputs[2], inputs[5]
	require.Equal(t, "q1", q1.Group, "q1 r1 = %+v", q1)
	require.Equal(t, 1, q1.Repeat, "q1 r1 = %+v", q1)
	require.Equal(t, DatasetSeed("s1", "q1", 1), q1.Seed, "q1 r1 = %+v", q1)
	require.Equal(t, "s1", q1.Set, "q1 r1 = %+v", q1)
	require.Equal(t, "scripted-counter", q1.Policy.Model, "q1 defaults: %+v", q1)
	require.Equal(t, "http://default:9/v1", q1.Policy.BaseURL, "q1 defaults: %+v", q1)
	require.Equal(t, 5, q1.Limits.MaxTurns, "q1 defaults: %+v", q1)
	require.Nil(t, q1.Sampling, "q1 defaults: %+v", q1)
	require.Equal(t, `{"target":4}`, string(row3.Task), "row3 overrides: task %s %+v", row3.Task, row3)
	require.Equal(t, 9, row3.Limits.MaxTurns, "row3 overrides: task %s %+v", row3.Task, row3)
	require.True(t, row3.Sampling.CaptureTokens, "row3 overrides: task %s %+v", row3.Task, row3)
	require.Equal(t, int64(41), q3.Seed, "q3 r1: seed %d policy %+v", q3.Seed, q3.Policy)
	require.Equal(t, "m", q3.Policy.Model, "q3 r1: seed %d policy %+v", q3.Seed, q3.Policy)
	require.Equal(t, "http://m:8000/v1", q3.Policy.BaseURL, "q3 r1: seed %d policy %+v", q3.Seed, q3.Policy)
	require.Equal(t, "7", q3.Policy.Version, "q3 r1: seed %d policy %+v", q3.Seed, q3.Policy)
	// The set's budgets apply to dataset rollouts too.
	req := datasetRequest(t)
	req.ModelCallRetries, req.Deadline = 3, 10*time.Minute
	budgeted, err := BuildInputs(req)
	require.NoError(t, err)
	l := budgeted[0].Limits
	require.Equal(t, 3, l.ModelCallRetries, "dataset rollout limits %+v, want the set's budgets", l)
	require.Equal(t, 10*time.Minute, time.Duration(l.Deadline), "dataset rollout limits %+v, want the set's budgets", l)
	require.Equal(t, 5, l.MaxTurns, "dataset rollout limits %+v, want the set's budgets", l)
	// Idempotence: the same request gives the same inputs, so a re-submit
	// starts the same workflow IDs and Temporal refuses the duplicates.
	again, err := BuildInputs(datasetRequest(t))
	require.NoError(t, err)
	assert.Equal(t, again, inputs, "equal requests gave different inputs")
}

func TestDatasetRequestRejects(t *testing.T) {
	tests := []struct {
		name  string
		spoil func(*SubmitRequest)
		want  string
	}{
		{"count too", func(r *SubmitRequest) { r.Count = 4 }, "--count and --tasks"},
		{"env too", func(r *SubmitRequest) { r.Envs = []string{"counter"} }, "--env and --tasks"},
		{"seed too", func(r *SubmitRequest) { r.Seed = 3 }, "--seed and --tasks"},
		{"no repeats", func(r *SubmitRequest) { r.Repeats = 0 }, "--repeats 0"},
		{"no rows", func(r *SubmitRequest) { r.Rows = []DatasetRow{} }, "no rows"},
		{"bad row in code", func(r *SubmitRequest) { r.Rows = append(r.Rows, DatasetRow{Env: "nope", Task: []byte(`{}`)}) }, "line 4: env"},
		{"bad set", func(r *SubmitRequest) { r.Set = "a b" }, "set"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := datasetRequest(t)
			tt.spoil(&r)
			_, err := BuildInputs(r)
			require.ErrorContains(t, err, tt.want, "err = %v, want it to mention %q", err, tt.want)
		})
	}
}

// A set's sampling reaches every rollout of a --count set, and every
// dataset row without sampling of its own; a row's own sampling wins.
func TestSetSampling(t *testing.T) {
	temp := 0.2
	set := &rollout.Sampling{Temperature: &temp}

	counted, err := BuildInputs(SubmitRequest{Set: "s1", Count: 3, Envs: []string{"counter"}, Sampling: set})
	require.NoError(t, err)
	for _, in := range counted {
		assert.Same(t, set, in.Sampling, "%s: sampling %+v, want the set's", in.RolloutID, in.Sampling)
	}

	req := datasetRequest(t)
	req.Sampling = set
	rows, err := BuildInputs(req)
	require.NoError(t, err)
	q1, row3 := rows[0], rows[2]
	assert.Same(t, set, q1.Sampling, "q1 (no sampling of its own): %+v, want the set's", q1.Sampling)
	require.True(t, row3.Sampling != set, "row3 keeps its own sampling, got %+v", row3.Sampling)
	require.NotNil(t, row3.Sampling, "row3 keeps its own sampling, got %+v", row3.Sampling)
	require.Equal(t, 0.7, *row3.Sampling.Temperature, "row3 keeps its own sampling, got %+v", row3.Sampling)
	require.True(t, row3.Sampling.CaptureTokens, "row3 keeps its own sampling, got %+v", row3.Sampling)

	bad := -1.0
	assert.Error(t, (SubmitRequest{Set: "s1", Count: 1, Envs: []string{"counter"}, Sampling: &rollout.Sampling{Temperature: &bad}}).Validate(), "a negative temperature was accepted")
}
