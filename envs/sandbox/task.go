package sandbox

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sort"
	"strings"

	"github.com/turnstile-rl/turnstile/envs"
)

// TaskLinePrefix starts the line of the start observation that carries the
// task as JSON, so a scripted policy can read the goal without parsing prose.
const TaskLinePrefix = "TASK "

// Limits of a task.
const (
	MinTaskFiles = 1
	MaxTaskFiles = 8
)

// Task is the task JSON of an episode: the exact files, by name, the sandbox
// must hold at the end, with their exact contents.
type Task struct {
	Files map[string]string `json:"files"`
}

// Names returns the expected file names, sorted.
func (t Task) Names() []string {
	names := make([]string, 0, len(t.Files))
	for n := range t.Files {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// ParseTask reads a task strictly: "files" is required and nothing else is
// allowed; it names MinTaskFiles..MaxTaskFiles valid file names with contents
// of at most MaxContentBytes. Problems are refused with envs.CodeBadTask.
func ParseTask(raw json.RawMessage) (Task, error) {
	var in struct {
		Files map[string]string `json:"files"`
	}
	if err := decodeStrict(raw, &in); err != nil {
		return Task{}, envs.Errorf(envs.CodeBadTask, "sandbox task: %v", err)
	}
	if in.Files == nil {
		return Task{}, envs.Errorf(envs.CodeBadTask, "sandbox task: files is required")
	}
	if n := len(in.Files); n < MinTaskFiles || n > MaxTaskFiles {
		return Task{}, envs.Errorf(envs.CodeBadTask, "sandbox task: %d files, want %d..%d", n, MinTaskFiles, MaxTaskFiles)
	}
	t := Task{Files: in.Files}
	for _, name := range t.Names() {
		if problem := pathProblem(name); problem != "" {
			return Task{}, envs.Errorf(envs.CodeBadTask, "sandbox task: %s", problem)
		}
		if n := len(t.Files[name]); n > MaxContentBytes {
			return Task{}, envs.Errorf(envs.CodeBadTask, "sandbox task: content of %q is %d bytes, more than %d", name, n, MaxContentBytes)
		}
	}
	return t, nil
}

// TaskFromObservation returns the task on the TASK line of a start
// observation.
func TaskFromObservation(text string) (Task, error) {
	for line := range strings.Lines(text) {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), TaskLinePrefix)
		if !ok {
			continue
		}
		return ParseTask(json.RawMessage(rest))
	}
	return Task{}, envs.Errorf(envs.CodeBadTask, "no %s{...} line in the observation", TaskLinePrefix)
}

// taskLine is the canonical TASK line of t. encoding/json sorts map keys and
// escapes newlines, so the line is deterministic and a single line.
func taskLine(t Task) (string, error) {
	b, err := json.Marshal(Task{Files: t.Files})
	if err != nil {
		return "", fmt.Errorf("encode sandbox task: %w", err)
	}
	return TaskLinePrefix + string(b), nil
}

// Word lists generated tasks draw from: constant tables, so a task depends on
// (seed, index) only.
var (
	taskStems = [...]string{"notes", "todo", "report", "plan", "log", "summary", "draft", "ideas"}
	taskWords = [...]string{"alpha", "bravo", "delta", "river", "stone", "maple", "cloud", "ember", "harbor", "lantern", "meadow", "orbit"}
)

// GenerateTask returns the task JSON for (seed, index): one to three files
// with distinct names and short contents of one to three lines. A negative
// index is clamped to 0 so the result is always a valid task.
func GenerateTask(seed int64, index int) json.RawMessage {
	if index < 0 {
		index = 0
	}
	// The two PCG words keep each (seed, index) its own stream.
	r := rand.New(rand.NewPCG(uint64(seed), uint64(index)))
	n := MinTaskFiles + r.IntN(3)
	stems := r.Perm(len(taskStems))[:n]
	files := make(map[string]string, n)
	for _, s := range stems {
		var b strings.Builder
		for range 1 + r.IntN(3) {
			for w := range 2 + r.IntN(3) {
				if w > 0 {
					b.WriteByte(' ')
				}
				b.WriteString(taskWords[r.IntN(len(taskWords))])
			}
			b.WriteByte('\n')
		}
		files[taskStems[s]+".txt"] = b.String()
	}
	out, _ := json.Marshal(Task{Files: files}) // a map of strings cannot fail
	return out
}

// decodeStrict decodes one JSON object into v, refusing unknown fields, wrong
// types, null and trailing data. Empty input counts as {}: clients send no
// arguments at all for a tool without parameters.
func decodeStrict(raw json.RawMessage, v any) error {
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 {
		trimmed = []byte("{}")
	}
	if trimmed[0] != '{' {
		return fmt.Errorf("want a JSON object, got %.40q", trimmed)
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("trailing data after the JSON object")
	}
	return nil
}
