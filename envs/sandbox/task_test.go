package sandbox_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/envs/sandbox"
)

func TestGenerateTask(t *testing.T) {
	sizes := map[int]int{}
	distinct := map[string]bool{}
	for seed := int64(0); seed < 20; seed++ {
		for i := range 10 {
			raw := sandbox.GenerateTask(seed, i)
			again := sandbox.GenerateTask(seed, i)
			require.Equal(t, string(again), string(raw), "GenerateTask(%d, %d) not deterministic: %s vs %s", seed, i, raw, again)
			task, err := sandbox.ParseTask(raw)
			require.NoError(t, err, "GenerateTask(%d, %d) = %s is invalid", seed, i, raw)
			n := len(task.Files)
			require.GreaterOrEqual(t, n, 1, "GenerateTask(%d, %d) has %d files, want 1..3", seed, i, n)
			require.LessOrEqual(t, n, 3, "GenerateTask(%d, %d) has %d files, want 1..3", seed, i, n)
			sizes[n]++
			for name, content := range task.Files {
				require.NotEqual(t, "", content, "GenerateTask(%d, %d): %s has content %q, want short newline-terminated text", seed, i, name, content)
				require.True(t, strings.HasSuffix(content, "\n"), "GenerateTask(%d, %d): %s has content %q, want short newline-terminated text", seed, i, name, content)
				require.LessOrEqual(t, len(content), 200, "GenerateTask(%d, %d): %s has content %q, want short newline-terminated text", seed, i, name, content)
			}
			distinct[string(raw)] = true
		}
	}
	require.Len(t, sizes, 3, "file counts seen %v, want all of 1, 2, 3", sizes)
	require.GreaterOrEqual(t, len(distinct), 150, "only %d distinct tasks out of 200", len(distinct))
	require.Equal(t, string(sandbox.GenerateTask(4, 0)), string(sandbox.GenerateTask(4, -3)), "negative index is not clamped to 0")
}

// A generated task starts an episode whose TASK line gives back the task.
func TestGeneratedTaskRoundTrip(t *testing.T) {
	raw := sandbox.GenerateTask(3, 1)
	want, err := sandbox.ParseTask(raw)
	require.NoError(t, err)
	_, st := start(t, string(raw))
	got, err := sandbox.TaskFromObservation(st.Observation)
	require.NoError(t, err)
	gotJSON, _ := json.Marshal(got)
	require.Equal(t, string(raw), string(gotJSON), "TASK line gives %s, want %s", gotJSON, raw)
	require.Len(t, got.Files, len(want.Files), "TASK line gives %s, want %s", gotJSON, raw)
}

func TestTaskFromObservation(t *testing.T) {
	tests := []struct {
		name, text, wantErr string
		wantFiles           int
	}{
		{name: "after prose", text: "Make files.\nTASK {\"files\":{\"a\":\"b\"}}", wantFiles: 1},
		{name: "indented", text: "  TASK {\"files\":{\"a\":\"b\",\"c\":\"\"}}  \n", wantFiles: 2},
		{name: "no line", text: "Make files.", wantErr: "no TASK"},
		{name: "malformed", text: "TASK {files}", wantErr: "invalid character"},
		{name: "invalid task", text: `TASK {"files":{"../a":"b"}}`, wantErr: "escapes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			task, err := sandbox.TaskFromObservation(tt.text)
			if tt.wantErr != "" {
				require.Equal(t, envs.CodeBadTask, envs.CodeOf(err), "error = %v, want %s containing %q", err, envs.CodeBadTask, tt.wantErr)
				require.ErrorContains(t, err, tt.wantErr, "error = %v, want %s containing %q", err, envs.CodeBadTask, tt.wantErr)
				return
			}
			require.NoError(t, err, "TaskFromObservation = %v, %v; want %d files", task, err, tt.wantFiles)
			require.Len(t, task.Files, tt.wantFiles, "TaskFromObservation = %v, %v; want %d files", task, err, tt.wantFiles)
		})
	}
}
