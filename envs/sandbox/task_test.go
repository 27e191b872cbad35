package sandbox_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/envs/sandbox"
)

func TestGenerateTask(t *testing.T) {
	sizes := map[int]int{}
	distinct := map[string]bool{}
	for seed := int64(0); seed < 20; seed++ {
		for i := range 10 {
			raw := sandbox.GenerateTask(seed, i)
			if again := sandbox.GenerateTask(seed, i); !bytes.Equal(raw, again) {
				t.Fatalf("GenerateTask(%d, %d) not deterministic: %s vs %s", seed, i, raw, again)
			}
			task, err := sandbox.ParseTask(raw)
			if err != nil {
				t.Fatalf("GenerateTask(%d, %d) = %s is invalid: %v", seed, i, raw, err)
			}
			n := len(task.Files)
			if n < 1 || n > 3 {
				t.Fatalf("GenerateTask(%d, %d) has %d files, want 1..3", seed, i, n)
			}
			sizes[n]++
			for name, content := range task.Files {
				if content == "" || !strings.HasSuffix(content, "\n") || len(content) > 200 {
					t.Fatalf("GenerateTask(%d, %d): %s has content %q, want short newline-terminated text", seed, i, name, content)
				}
			}
			distinct[string(raw)] = true
		}
	}
	if len(sizes) != 3 {
		t.Fatalf("file counts seen %v, want all of 1, 2, 3", sizes)
	}
	if len(distinct) < 150 {
		t.Fatalf("only %d distinct tasks out of 200", len(distinct))
	}
	if !bytes.Equal(sandbox.GenerateTask(4, -3), sandbox.GenerateTask(4, 0)) {
		t.Fatal("negative index is not clamped to 0")
	}
}

// A generated task starts an episode whose TASK line gives back the task.
func TestGeneratedTaskRoundTrip(t *testing.T) {
	raw := sandbox.GenerateTask(3, 1)
	want, err := sandbox.ParseTask(raw)
	if err != nil {
		t.Fatal(err)
	}
	_, st := start(t, string(raw))
	got, err := sandbox.TaskFromObservation(st.Observation)
	if err != nil {
		t.Fatal(err)
	}
	gotJSON, _ := json.Marshal(got)
	if !bytes.Equal(gotJSON, raw) || len(got.Files) != len(want.Files) {
		t.Fatalf("TASK line gives %s, want %s", gotJSON, raw)
	}
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
				if envs.CodeOf(err) != envs.CodeBadTask || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want %s containing %q", err, envs.CodeBadTask, tt.wantErr)
				}
				return
			}
			if err != nil || len(task.Files) != tt.wantFiles {
				t.Fatalf("TaskFromObservation = %v, %v; want %d files", task, err, tt.wantFiles)
			}
		})
	}
}
