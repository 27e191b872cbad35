package catalog_test

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/envs/catalog"
	"github.com/turnstile-rl/turnstile/trainer"
)

// docRow is an example row of docs/environments.md's "Task formats".
type docRow struct {
	heading string // the ### heading's environment
	line    int
	raw     string
	ID      string          `json:"id"`
	Env     string          `json:"env"`
	Task    json.RawMessage `json:"task"`
	Seed    *int64          `json:"seed"`
}

// pythonHosted are environments only the Python participant serves, with
// the call of its own parser that checks a task (read from stdin).
var pythonHosted = map[string]string{
	"notes":     "import notes; notes.parse_task(task)",
	"stopwatch": "import stopwatch; stopwatch.StopwatchEnv().start(0, task)",
}

// taskSection reads the example rows of the "## Task formats" section: the
// ```json blocks under each "### `name`" heading.
func taskSection(t *testing.T) []docRow {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "docs", "environments.md"))
	require.NoError(t, err)
	lines := strings.Split(string(data), "\n")
	heading := regexp.MustCompile("^### `([a-z0-9_-]+)`$")
	var (
		rows    []docRow
		in      bool
		current string
	)
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		switch {
		case l == "## Task formats":
			in = true
		case in && strings.HasPrefix(l, "## "):
			in = false
		case in && heading.MatchString(l):
			current = heading.FindStringSubmatch(l)[1]
		case in && strings.HasPrefix(l, "```"):
			lang := strings.TrimPrefix(l, "```")
			start := i + 1
			for i++; i < len(lines) && lines[i] != "```"; i++ {
			}
			if !assert.Equal(t, "json", lang, "environments.md:%d: a block in Task formats; examples are json", start) {
				continue
			}
			for j, text := range lines[start:i] {
				if strings.TrimSpace(text) == "" {
					continue
				}
				r := docRow{heading: current, line: start + j + 1, raw: text}
				if _, inCatalog := catalog.Lookup(current); !inCatalog {
					// Not in the catalog, so in no dataset: the task alone.
					r.Env, r.Task = current, json.RawMessage(text)
					rows = append(rows, r)
					continue
				}
				dec := json.NewDecoder(strings.NewReader(text))
				dec.DisallowUnknownFields()
				if err := dec.Decode(&r); !assert.NoError(t, err, "environments.md:%d: not one dataset row", r.line) {
					continue
				}
				rows = append(rows, r)
			}
		}
	}
	require.NotEmpty(t, rows, `docs/environments.md has no "## Task formats" section with examples`)
	return rows
}

// TestDocumentedTasksParse: every environment of the catalog has an
// example row in docs/environments.md, under its own heading, and the
// environment's own parser accepts the example's task (the Go
// environment's Start; the Python participant's for the environments it
// serves), so the page cannot drift from the code.
func TestDocumentedTasksParse(t *testing.T) {
	rows := taskSection(t)
	documented := map[string]bool{}
	var python []docRow
	for _, r := range rows {
		assert.Equal(t, r.heading, r.Env, "environments.md:%d: a row of %q under the heading of %q", r.line, r.Env, r.heading)
		documented[r.Env] = true
		if _, ok := pythonHosted[r.Env]; ok {
			python = append(python, r)
			continue
		}
		e, ok := catalog.Lookup(r.Env)
		if !assert.True(t, ok, "environments.md:%d: no environment %q in the catalog", r.line, r.Env) ||
			!assert.True(t, e.Hosted(), "environments.md:%d: %q is hosted by %s: add its parser to pythonHosted", r.line, r.Env, e.Remote) {
			continue
		}
		seed := int64(1)
		if r.Seed != nil {
			seed = *r.Seed
		}
		session, _, err := e.New().Start(seed, r.Task)
		if !assert.NoError(t, err, "environments.md:%d: %s refuses the documented task %s", r.line, r.Env, r.Task) {
			continue
		}
		assert.NoError(t, session.Close())
	}
	// The rows of the catalog's environments are dataset rows as
	// starter submit --tasks reads them.
	var dataset []string
	for _, r := range rows {
		if _, ok := catalog.Lookup(r.Env); ok {
			dataset = append(dataset, r.raw)
		}
	}
	_, err := trainer.ReadDataset(strings.NewReader(strings.Join(dataset, "\n")))
	assert.NoError(t, err, "the examples are not a dataset")
	for _, name := range catalog.Names() {
		assert.True(t, documented[name], "environment %s has no task format in docs/environments.md (## Task formats, ### `%s`)", name, name)
	}
	for name := range pythonHosted {
		assert.True(t, documented[name], "environment %s has no task format in docs/environments.md", name)
	}
	checkPythonTasks(t, python)
}

// checkPythonTasks runs the participant's parser on each row's task.
func checkPythonTasks(t *testing.T, rows []docRow) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Logf("python3 is not installed: the tasks of %d Python-hosted examples were not parsed", len(rows))
		return
	}
	dir := filepath.Join("..", "..", "clients", "python", "examples", "participant")
	// The examples import the participant library; from a checkout it is
	// the client's source, installed or not.
	lib, err := filepath.Abs(filepath.Join("..", "..", "clients", "python"))
	require.NoError(t, err)
	for _, r := range rows {
		script := "import json, sys\ntask = json.load(sys.stdin)\n" + pythonHosted[r.Env] + "\n"
		cmd := exec.Command(py, "-c", script)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1", "PYTHONPATH="+lib)
		cmd.Stdin = bytes.NewReader(r.Task)
		out, err := cmd.CombinedOutput()
		assert.NoError(t, err, "environments.md:%d: %s refuses the documented task %s\n%s", r.line, r.Env, r.Task, out)
	}
}
