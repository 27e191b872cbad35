package sandbox_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/envs/sandbox"
)

// testTask is the task most tests start from.
const testTask = `{"files":{"a.txt":"hello world\n","b.txt":"x"}}`

// op is one tool call.
type op struct {
	tool string
	args string
}

func write(path, content string) op {
	return op{sandbox.ToolWriteFile, mustJSON(map[string]string{"path": path, "content": content})}
}

func appendTo(path, content string) op {
	return op{sandbox.ToolAppendFile, mustJSON(map[string]string{"path": path, "content": content})}
}

func onPath(tool, path string) op { return op{tool, mustJSON(map[string]string{"path": path})} }

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// start begins a session on task and closes it when the test ends.
func start(t *testing.T, task string) (*sandbox.Session, envs.Start) {
	t.Helper()
	s, st, err := sandbox.New().Start(0, json.RawMessage(task))
	require.NoError(t, err, "Start(%s)", task)
	t.Cleanup(func() { _ = s.Close() })
	return s.(*sandbox.Session), st
}

// apply runs ops that must succeed.
func apply(t *testing.T, s envs.Session, ops ...op) {
	t.Helper()
	for _, o := range ops {
		_, err := s.Apply(o.tool, json.RawMessage(o.args))
		require.NoError(t, err, "Apply(%s, %s)", o.tool, o.args)
	}
}

// snapshot is the directory's regular files and their contents.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err, "read %s", dir)
	out := map[string]string{}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			out[e.Name()] = "<" + e.Type().String() + ">"
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		require.NoError(t, err, "read %s", e.Name())
		out[e.Name()] = string(b)
	}
	return out
}

func TestSpec(t *testing.T) {
	spec := sandbox.New().Spec()
	require.Equal(t, "sandbox", spec.Name, "Spec = %s/%s/%s, want sandbox/replay/tools", spec.Name, spec.Mode, spec.Style)
	require.Equal(t, envs.ModeReplay, spec.Mode, "Spec = %s/%s/%s, want sandbox/replay/tools", spec.Name, spec.Mode, spec.Style)
	require.Equal(t, envs.StyleTools, spec.Style, "Spec = %s/%s/%s, want sandbox/replay/tools", spec.Name, spec.Mode, spec.Style)
	var names []string
	for _, tool := range spec.Tools {
		names = append(names, tool.Name)
		var schema map[string]any
		err := json.Unmarshal(tool.Parameters, &schema)
		require.NoError(t, err, "tool %s: parameters %s are not a JSON Schema object (%v)", tool.Name, tool.Parameters, err)
		require.Equal(t, "object", schema["type"], "tool %s: parameters %s are not a JSON Schema object (%v)", tool.Name, tool.Parameters, err)
	}
	want := []string{"write_file", "append_file", "read_file", "list_files", "delete_file", "run_wc"}
	require.Equal(t, want, names, "tools = %v, want %v", names, want)
}

func TestStartObservationCarriesTask(t *testing.T) {
	s, st := start(t, testTask)
	require.NotEqual(t, "", st.Instructions, "Start gave no instructions")
	got, err := sandbox.TaskFromObservation(st.Observation)
	require.NoError(t, err, "TaskFromObservation(%q)", st.Observation)
	want := map[string]string{"a.txt": "hello world\n", "b.txt": "x"}
	require.Equal(t, want, got.Files, "task from observation = %v, want %v", got.Files, want)
	require.NotContains(t, st.Observation, s.Root(), "observation leaks the scratch directory %s", s.Root())
	fi, err := os.Stat(s.Dir())
	require.NoError(t, err, "scratch files directory %s: %v", s.Dir(), err)
	require.True(t, fi.IsDir(), "scratch files directory %s: %v", s.Dir(), err)
	files := snapshot(t, s.Dir())
	require.Empty(t, files, "fresh sandbox holds %v, want nothing", files)
}

func TestStartRefusesBadTasks(t *testing.T) {
	tests := []struct {
		name, task, want string
	}{
		{"empty", ``, "files is required"},
		{"null", `null`, "JSON object"},
		{"no files", `{}`, "files is required"},
		{"zero files", `{"files":{}}`, "0 files"},
		{"too many files", tooManyFiles(), "9 files"},
		{"unknown field", `{"files":{"a":"b"},"extra":1}`, "unknown field"},
		{"trailing data", `{"files":{"a":"b"}} {}`, "trailing data"},
		{"wrong type", `{"files":{"a":1}}`, "cannot unmarshal"},
		{"escape", `{"files":{"../a":"b"}}`, "escapes the sandbox"},
		{"absolute", `{"files":{"/etc/passwd":"b"}}`, "absolute"},
		{"subdirectory", `{"files":{"d/a":"b"}}`, "directory part"},
		{"hidden", `{"files":{".a":"b"}}`, "starts with"},
		{"content too large", `{"files":{"a":"` + strings.Repeat("x", sandbox.MaxContentBytes+1) + `"}}`, "more than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _, err := sandbox.New().Start(0, json.RawMessage(tt.task))
			if err == nil {
				_ = s.Close()
			}
			require.Error(t, err, "Start accepted %.60s", tt.task)
			require.Equal(t, envs.CodeBadTask, envs.CodeOf(err), "Start error = %v, want %s containing %q", err, envs.CodeBadTask, tt.want)
			require.ErrorContains(t, err, tt.want, "Start error = %v, want %s containing %q", err, envs.CodeBadTask, tt.want)
		})
	}
}

func tooManyFiles() string {
	files := map[string]string{}
	for i := range sandbox.MaxTaskFiles + 1 {
		files[fmt.Sprintf("f%d", i)] = "x"
	}
	return mustJSON(map[string]any{"files": files})
}

func TestApplyLegalOperations(t *testing.T) {
	tests := []struct {
		name      string
		setup     []op
		op        op
		wantObs   string
		wantFiles map[string]string
	}{
		{"write creates", nil, write("a.txt", "hi\n"), "wrote a.txt (3 bytes)", map[string]string{"a.txt": "hi\n"}},
		{"write overwrites", []op{write("a.txt", "old")}, write("a.txt", "new"), "wrote a.txt (3 bytes)", map[string]string{"a.txt": "new"}},
		{"write empty", nil, write("e", ""), "wrote e (0 bytes)", map[string]string{"e": ""}},
		{"append", []op{write("a.txt", "ab")}, appendTo("a.txt", "cd"), "appended 2 bytes to a.txt (now 4 bytes)", map[string]string{"a.txt": "abcd"}},
		{"read", []op{write("a.txt", "line 1\nline 2\n")}, onPath(sandbox.ToolReadFile, "a.txt"), "line 1\nline 2\n", map[string]string{"a.txt": "line 1\nline 2\n"}},
		{"list empty", nil, op{sandbox.ToolListFiles, `{}`}, "(no files)", map[string]string{}},
		{"list without arguments", []op{write("b", "1")}, op{sandbox.ToolListFiles, ``}, "b", map[string]string{"b": "1"}},
		{"list sorted", []op{write("b", "1"), write("a", "2"), write("C", "3")}, op{sandbox.ToolListFiles, `{}`}, "C\na\nb", map[string]string{"a": "2", "b": "1", "C": "3"}},
		{"delete", []op{write("a", "1"), write("b", "2")}, onPath(sandbox.ToolDeleteFile, "a"), "deleted a", map[string]string{"b": "2"}},
		{"wc", []op{write("a", "one two\nthree\n")}, onPath(sandbox.ToolRunWC, "a"), "a: lines=2 words=3 bytes=14", map[string]string{"a": "one two\nthree\n"}},
		// wc counts newlines, not lines: a real wc says 0 for text without one.
		{"wc counts newlines", []op{write("a", "no newline")}, onPath(sandbox.ToolRunWC, "a"), "a: lines=0 words=2 bytes=10", map[string]string{"a": "no newline"}},
		// Shell syntax in content is data: it reaches the file verbatim and runs nothing.
		{"content is not shell", nil, write("a", "$(touch pwned) `touch pwned2`; rm -rf . '\"\n"), "wrote a (43 bytes)", map[string]string{"a": "$(touch pwned) `touch pwned2`; rm -rf . '\"\n"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := start(t, testTask)
			apply(t, s, tt.setup...)
			out, err := s.Apply(tt.op.tool, json.RawMessage(tt.op.args))
			require.NoError(t, err, "Apply(%s, %s)", tt.op.tool, tt.op.args)
			require.Equal(t, tt.wantObs, out.Observation, "outcome = %+v, want observation %q", out, tt.wantObs)
			require.Equal(t, float64(0), out.Reward, "outcome = %+v, want observation %q", out, tt.wantObs)
			require.False(t, out.Terminated, "outcome = %+v, want observation %q", out, tt.wantObs)
			require.False(t, out.Truncated, "outcome = %+v, want observation %q", out, tt.wantObs)
			got := snapshot(t, s.Dir())
			require.Equal(t, tt.wantFiles, got, "files = %q, want %q", got, tt.wantFiles)
			require.Empty(t, snapshot(t, filepath.Join(s.Root(), "staging")), "staging left behind")
		})
	}
}

func TestApplyRefusesAndChangesNothing(t *testing.T) {
	setup := []op{write("a.txt", "keep\n")}
	tests := []struct {
		name     string
		op       op
		wantCode string
		want     string
	}{
		{"unknown tool", op{"rm_rf", `{}`}, envs.CodeUnknownTool, `no tool "rm_rf"`},
		{"missing path", op{sandbox.ToolReadFile, `{}`}, envs.CodeBadArguments, "path is required"},
		{"missing content", op{sandbox.ToolWriteFile, `{"path":"a.txt"}`}, envs.CodeBadArguments, "content is required"},
		{"unknown argument", op{sandbox.ToolReadFile, `{"path":"a.txt","mode":"x"}`}, envs.CodeBadArguments, "unknown field"},
		{"list takes no arguments", op{sandbox.ToolListFiles, `{"path":"a.txt"}`}, envs.CodeBadArguments, "unknown field"},
		{"path not a string", op{sandbox.ToolReadFile, `{"path":7}`}, envs.CodeBadArguments, "cannot unmarshal"},
		{"arguments not an object", op{sandbox.ToolReadFile, `["a.txt"]`}, envs.CodeBadArguments, "JSON object"},
		{"empty path", onPath(sandbox.ToolReadFile, ""), envs.CodeBadArguments, "path is empty"},
		{"parent escape", write("../escape.txt", "x"), envs.CodeBadArguments, "escapes the sandbox"},
		{"nested escape", write("a/../../escape.txt", "x"), envs.CodeBadArguments, "escapes the sandbox"},
		{"bare dotdot", onPath(sandbox.ToolDeleteFile, ".."), envs.CodeBadArguments, "escapes the sandbox"},
		{"backslash escape", write(`..\escape.txt`, "x"), envs.CodeBadArguments, "escapes the sandbox"},
		{"absolute", onPath(sandbox.ToolReadFile, "/etc/passwd"), envs.CodeBadArguments, "absolute"},
		{"not clean", onPath(sandbox.ToolReadFile, "./a.txt"), envs.CodeBadArguments, "not clean"},
		{"double slash", write("d//a", "x"), envs.CodeBadArguments, "not clean"},
		{"subdirectory", write("d/a", "x"), envs.CodeBadArguments, "directory part"},
		{"dot", onPath(sandbox.ToolDeleteFile, "."), envs.CodeBadArguments, "starts with"},
		{"option-like", write("-rf", "x"), envs.CodeBadArguments, "starts with"},
		{"shell characters", write("a;touch b", "x"), envs.CodeBadArguments, "contains"},
		{"too long", write(strings.Repeat("a", sandbox.MaxPathLen+1), "x"), envs.CodeBadArguments, "more than"},
		{"content too large", write("a.txt", strings.Repeat("x", sandbox.MaxContentBytes+1)), envs.CodeBadArguments, "more than"},
		{"read missing", onPath(sandbox.ToolReadFile, "nope"), envs.CodeIllegalAction, `no file "nope"`},
		{"append missing", appendTo("nope", "x"), envs.CodeIllegalAction, `no file "nope"`},
		{"delete missing", onPath(sandbox.ToolDeleteFile, "nope"), envs.CodeIllegalAction, `no file "nope"`},
		{"wc missing", onPath(sandbox.ToolRunWC, "nope"), envs.CodeIllegalAction, `no file "nope"`},
		{"append past limit", appendTo("a.txt", strings.Repeat("x", sandbox.MaxContentBytes)), envs.CodeIllegalAction, "more than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := start(t, testTask)
			apply(t, s, setup...)
			parent := snapshot(t, s.Root())
			before := snapshot(t, s.Dir())
			_, err := s.Apply(tt.op.tool, json.RawMessage(tt.op.args))
			require.Equal(t, tt.wantCode, envs.CodeOf(err), "Apply(%s, %.80s) error = %v, want %s containing %q", tt.op.tool, tt.op.args, err, tt.wantCode, tt.want)
			require.ErrorContains(t, err, tt.want, "Apply(%s, %.80s) error = %v, want %s containing %q", tt.op.tool, tt.op.args, err, tt.wantCode, tt.want)
			require.Equal(t, before, snapshot(t, s.Dir()), "refused operation changed files")
			after := snapshot(t, s.Root())
			require.Equal(t, parent, after, "refused operation changed the scratch root: %q -> %q", parent, after)
		})
	}
}

func TestFileLimit(t *testing.T) {
	s, _ := start(t, testTask)
	for i := range sandbox.MaxFiles {
		apply(t, s, write(fmt.Sprintf("f%02d", i), "x"))
	}
	_, err := s.Apply(sandbox.ToolWriteFile, json.RawMessage(write("one-more", "x").args))
	require.Equal(t, envs.CodeIllegalAction, envs.CodeOf(err), "write past %d files: error %v, want %s", sandbox.MaxFiles, err, envs.CodeIllegalAction)
	// Overwriting an existing file adds nothing, so it is still allowed.
	apply(t, s, write("f00", "y"))
	n := len(snapshot(t, s.Dir()))
	require.Equal(t, sandbox.MaxFiles, n, "sandbox holds %d files, want %d", n, sandbox.MaxFiles)
}

func TestSymlinksAreNotFollowed(t *testing.T) {
	outside := filepath.Join(t.TempDir(), "outside.txt")
	require.NoError(t, os.WriteFile(outside, []byte("secret"), 0o600))
	for _, o := range []op{
		onPath(sandbox.ToolReadFile, "link"),
		write("link", "overwritten"),
		appendTo("link", "more"),
		onPath(sandbox.ToolDeleteFile, "link"),
		onPath(sandbox.ToolRunWC, "link"),
	} {
		t.Run(o.tool, func(t *testing.T) {
			s, _ := start(t, testTask)
			require.NoError(t, os.Symlink(outside, filepath.Join(s.Dir(), "link")))
			out, err := s.Apply(o.tool, json.RawMessage(o.args))
			require.Equal(t, envs.CodeBadArguments, envs.CodeOf(err), "Apply(%s) on a symlink = %+v, %v; want %s naming the link", o.tool, out, err, envs.CodeBadArguments)
			require.ErrorContains(t, err, "symbolic link", "Apply(%s) on a symlink = %+v, %v; want %s naming the link", o.tool, out, err, envs.CodeBadArguments)
			b, err := os.ReadFile(outside)
			require.NoError(t, err, "link target = %q, %v; want it untouched", b, err)
			require.Equal(t, "secret", string(b), "link target = %q, %v; want it untouched", b, err)
			_, err = os.Lstat(filepath.Join(s.Dir(), "link"))
			require.NoError(t, err, "link removed")
		})
	}
}

func TestVerify(t *testing.T) {
	tests := []struct {
		name       string
		ops        []op
		wantReward float64
		want       sandbox.Differences
	}{
		{"exact", []op{write("a.txt", "hello world\n"), write("b.txt", "x")}, 1, sandbox.Differences{}},
		{"built by append", []op{write("b.txt", "x"), write("a.txt", "hello "), appendTo("a.txt", "world\n")}, 1, sandbox.Differences{}},
		{"nothing written", nil, 0, sandbox.Differences{Missing: []string{"a.txt", "b.txt"}}},
		{"one missing", []op{write("a.txt", "hello world\n")}, 0, sandbox.Differences{Missing: []string{"b.txt"}}},
		{"wrong content", []op{write("a.txt", "hello world"), write("b.txt", "x")}, 0, sandbox.Differences{WrongContent: []string{"a.txt"}}},
		{"extra file", []op{write("a.txt", "hello world\n"), write("b.txt", "x"), write("c.txt", "")}, 0, sandbox.Differences{Unexpected: []string{"c.txt"}}},
		{"deleted again", []op{write("a.txt", "hello world\n"), write("b.txt", "x"), onPath(sandbox.ToolDeleteFile, "b.txt")}, 0, sandbox.Differences{Missing: []string{"b.txt"}}},
		{"all wrong", []op{write("a.txt", ""), write("z", "")}, 0, sandbox.Differences{Missing: []string{"b.txt"}, Unexpected: []string{"z"}, WrongContent: []string{"a.txt"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := start(t, testTask)
			apply(t, s, tt.ops...)
			before := snapshot(t, s.Dir())
			v, err := s.Verify()
			require.NoError(t, err, "Verify")
			var got sandbox.Differences
			require.NoError(t, json.Unmarshal(v.Details, &got), "details %s", v.Details)
			want := tt.want
			want.Expected = []string{"a.txt", "b.txt"}
			for _, l := range []*[]string{&want.Missing, &want.Unexpected, &want.WrongContent} {
				if *l == nil {
					*l = []string{}
				}
			}
			require.Equal(t, tt.wantReward, v.Reward, "Verify = %v %s, want %v %+v", v.Reward, v.Details, tt.wantReward, want)
			require.Equal(t, want, got, "Verify = %v %s, want %v %+v", v.Reward, v.Details, tt.wantReward, want)
			after := snapshot(t, s.Dir())
			require.Equal(t, before, after, "Verify changed files: %q -> %q", before, after)
		})
	}
}

func TestVerifyCountsSymlinkAsUnexpected(t *testing.T) {
	s, _ := start(t, `{"files":{"a":"x"}}`)
	apply(t, s, write("a", "x"))
	require.NoError(t, os.Symlink(filepath.Join(s.Dir(), "a"), filepath.Join(s.Dir(), "b")))
	v, err := s.Verify()
	require.NoError(t, err, "Verify = %v %s, %v; want reward 0 with b unexpected", v.Reward, v.Details, err)
	require.Equal(t, float64(0), v.Reward, "Verify = %v %s, %v; want reward 0 with b unexpected", v.Reward, v.Details, err)
	require.Contains(t, string(v.Details), `"unexpected":["b"]`, "Verify = %v %s, %v; want reward 0 with b unexpected", v.Reward, v.Details, err)
}

func TestEqualTasksGiveEqualEpisodes(t *testing.T) {
	ops := []op{write("a.txt", "1\n"), appendTo("a.txt", "2 3\n"), onPath(sandbox.ToolRunWC, "a.txt"), op{sandbox.ToolListFiles, `{}`}, onPath(sandbox.ToolReadFile, "a.txt"), onPath(sandbox.ToolDeleteFile, "a.txt")}
	run := func() []string {
		s, st := start(t, testTask)
		log := []string{st.Instructions, st.Observation}
		for _, o := range ops {
			out, err := s.Apply(o.tool, json.RawMessage(o.args))
			require.NoError(t, err, "Apply(%s)", o.tool)
			log = append(log, out.Observation)
		}
		v, err := s.Verify()
		require.NoError(t, err)
		return append(log, string(v.Details))
	}
	a, b := run(), run()
	require.Equal(t, b, a, "equal tasks diverged:\n%q\n%q", a, b)
}

func TestCloseRemovesDirectory(t *testing.T) {
	s, _ := start(t, testTask)
	apply(t, s, write("a.txt", "x"))
	root := s.Root()
	require.NoError(t, s.Close(), "Close")
	_, err := os.Stat(root)
	require.True(t, os.IsNotExist(err), "after Close, stat %s = %v; want it gone", root, err)
	require.NoError(t, s.Close(), "second Close")
	_, err = s.Apply(sandbox.ToolListFiles, json.RawMessage(`{}`))
	require.ErrorContains(t, err, "closed", "Apply after Close, want a closed-session error")
	_, err = s.Verify()
	require.Error(t, err, "Verify after Close succeeded")
}

func TestExportAndRestoreRefuse(t *testing.T) {
	s, _ := start(t, testTask)
	apply(t, s, write("a.txt", "x"))
	state, err := s.Export()
	require.Equal(t, envs.CodeNotExportable, envs.CodeOf(err), "Export = %s, %v; want nil and %s", state, err, envs.CodeNotExportable)
	require.Nil(t, state, "Export = %s, %v; want nil and %s", state, err, envs.CodeNotExportable)
	for _, raw := range []string{``, `{}`, `{"files":{"a.txt":"x"}}`} {
		restored, err := sandbox.New().Restore(json.RawMessage(raw))
		require.Equal(t, envs.CodeNotExportable, envs.CodeOf(err), "Restore(%q) = %v, %v; want nil and %s", raw, restored, err, envs.CodeNotExportable)
		require.True(t, restored == nil, "Restore(%q) = %v, %v; want nil and %s", raw, restored, err, envs.CodeNotExportable)
	}
	require.Equal(t, envs.ModeReplay, envs.EffectiveMode(sandbox.New().Spec().Mode), "sandbox is not rebuilt by replay")
}

// TestReplayGivesTheSameAnswers is what ModeReplay promises: the same calls,
// in the same order, on a fresh session give the same start, the same
// answers (refusals included) and the same directory.
func TestReplayGivesTheSameAnswers(t *testing.T) {
	calls := []op{
		write("a.txt", "hello "), appendTo("a.txt", "world\n"), onPath(sandbox.ToolRunWC, "a.txt"),
		write("c.txt", "gone"), onPath(sandbox.ToolDeleteFile, "c.txt"), onPath(sandbox.ToolReadFile, "c.txt"),
		op{sandbox.ToolListFiles, `{}`}, onPath(sandbox.ToolReadFile, "a.txt"),
	}
	run := func() (envs.Start, []string, map[string]string) {
		s, st := start(t, testTask)
		var answers []string
		for _, c := range calls {
			out, err := s.Apply(c.tool, json.RawMessage(c.args))
			answers = append(answers, fmt.Sprintf("%+v %v", out, err))
		}
		return st, answers, snapshot(t, s.Dir())
	}
	st1, a1, d1 := run()
	st2, a2, d2 := run()
	require.Equal(t, st1, st2, "the start")
	require.Equal(t, a1, a2, "the answers, in order")
	require.Equal(t, d1, d2, "the directory")
}
