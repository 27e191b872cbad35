// Package sandbox is a replay environment: a scratch directory the agent
// fills through file tools, each run as a real subprocess. Like a provider
// sandbox, its state lives outside the process and cannot be exported, so a
// checkpoint cannot carry it. Its tools touch nothing outside the scratch
// directory and answer the same for the same calls in the same order, so a
// restore rebuilds the session by re-applying the rollout's recorded calls
// to a fresh directory (envs.ModeReplay); a server that does not replay it
// (or a replay that diverges) starts the rollout over with a fresh session.
package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/turnstile-rl/turnstile/envs"
)

// Names the environment declares.
const (
	// Name is the environment's name on the server.
	Name = "sandbox"

	ToolWriteFile  = "write_file"
	ToolAppendFile = "append_file"
	ToolReadFile   = "read_file"
	ToolListFiles  = "list_files"
	ToolDeleteFile = "delete_file"
	ToolRunWC      = "run_wc"
)

// Limits of a session.
const (
	MaxContentBytes = 64 << 10 // bytes one file may hold
	MaxFiles        = 32       // files the sandbox may hold
	MaxPathLen      = 64       // bytes of a file name
)

// Instructions is the system prompt of every episode.
const Instructions = "You work in a sandbox directory through file tools. Make the sandbox hold exactly the files the task names, with exactly the given contents and no other files, then answer done. File names are plain names in the sandbox's top level."

// Subdirectories of a session's scratch directory. Files the agent sees live
// in filesDir; staging holds the temporary copy a write is built in, so a
// half-done write never shows up among the agent's files.
const (
	filesDir    = "files"
	stagingDir  = "staging"
	stagingName = "pending"
)

// JSON Schemas of the tools' arguments.
const (
	pathSchema              = `"path":{"type":"string","description":"file name relative to the sandbox, e.g. notes.txt"}`
	pathParameters          = `{"type":"object","properties":{` + pathSchema + `},"required":["path"],"additionalProperties":false}`
	pathContentParameters   = `{"type":"object","properties":{` + pathSchema + `,"content":{"type":"string","description":"text to write"}},"required":["path","content"],"additionalProperties":false}`
	noParameters            = `{"type":"object","properties":{},"additionalProperties":false}`
	toolNamesForUnknownTool = ToolWriteFile + ", " + ToolAppendFile + ", " + ToolReadFile + ", " + ToolListFiles + ", " + ToolDeleteFile + ", " + ToolRunWC
)

// Env is the sandbox environment. It holds no per-session state, so one value
// serves any number of concurrent sessions.
type Env struct {
	timeout time.Duration
}

// New returns the sandbox environment with DefaultTimeout per operation.
func New() *Env { return &Env{timeout: DefaultTimeout} }

var _ envs.Environment = (*Env)(nil)

// Spec declares the sandbox: state rebuilt by replay, tool calls.
func (*Env) Spec() envs.Spec {
	return envs.Spec{
		Name:  Name,
		Mode:  envs.ModeReplay,
		Style: envs.StyleTools,
		Tools: []envs.Tool{
			{Name: ToolWriteFile, Description: "Create or overwrite a file with content.", Parameters: json.RawMessage(pathContentParameters)},
			{Name: ToolAppendFile, Description: "Append content to an existing file.", Parameters: json.RawMessage(pathContentParameters)},
			{Name: ToolReadFile, Description: "Show a file's content.", Parameters: json.RawMessage(pathParameters)},
			{Name: ToolListFiles, Description: "List the files in the sandbox, one name a line.", Parameters: json.RawMessage(noParameters)},
			{Name: ToolDeleteFile, Description: "Delete a file.", Parameters: json.RawMessage(pathParameters)},
			{Name: ToolRunWC, Description: "Count a file's lines, words and bytes with wc.", Parameters: json.RawMessage(pathParameters)},
		},
	}
}

// Start begins an episode in a fresh scratch directory. The seed is unused:
// the task alone decides the episode, and the directory's random name never
// reaches an observation, so equal tasks give equal episodes.
func (e *Env) Start(_ int64, task json.RawMessage) (envs.Session, envs.Start, error) {
	t, err := ParseTask(task)
	if err != nil {
		return nil, envs.Start{}, err
	}
	line, err := taskLine(t)
	if err != nil {
		return nil, envs.Start{}, err
	}
	root, err := os.MkdirTemp("", "turnstile-sandbox-")
	if err != nil {
		return nil, envs.Start{}, fmt.Errorf("create sandbox scratch directory: %w", err)
	}
	for _, d := range []string{filesDir, stagingDir} {
		if err := os.Mkdir(filepath.Join(root, d), 0o700); err != nil {
			_ = os.RemoveAll(root)
			return nil, envs.Start{}, fmt.Errorf("create sandbox %s directory: %w", d, err)
		}
	}
	var obs strings.Builder
	obs.WriteString("Make the sandbox hold exactly these files with exactly this content, and no others:\n")
	for _, name := range t.Names() {
		fmt.Fprintf(&obs, "- %s (%d bytes)\n", name, len(t.Files[name]))
	}
	obs.WriteString(line)
	s := &Session{timeout: e.timeout, root: root, task: t}
	return s, envs.Start{Instructions: Instructions, Observation: obs.String()}, nil
}

// Restore refuses: the sandbox's state is a directory outside the process, so
// there is never an exported state to rebuild from (a replay rebuilds it).
func (*Env) Restore(json.RawMessage) (envs.Session, error) {
	return nil, envs.Errorf(envs.CodeNotExportable, "sandbox cannot restore exported state: its session is rebuilt by replaying its calls, or started fresh")
}

// Session is one sandbox episode: a scratch directory and the task.
type Session struct {
	timeout time.Duration
	root    string
	task    Task
	closed  bool
}

var _ envs.Session = (*Session)(nil)

// Dir is the directory holding the agent's files (for tests and operators).
func (s *Session) Dir() string { return filepath.Join(s.root, filesDir) }

// Root is the session's scratch directory, which Close removes.
func (s *Session) Root() string { return s.root }

// pathArgs and pathContentArgs are the decoded tool arguments; pointers tell
// a missing field from an empty one.
type pathArgs struct {
	Path *string `json:"path"`
}

type pathContentArgs struct {
	Path    *string `json:"path"`
	Content *string `json:"content"`
}

// Apply runs one tool. Arguments, paths and preconditions are all checked
// before any command runs, so a refusal changes nothing.
func (s *Session) Apply(tool string, args json.RawMessage) (envs.Outcome, error) {
	if s.closed {
		return envs.Outcome{}, errors.New("sandbox session is closed")
	}
	var (
		obs string
		err error
	)
	switch tool {
	case ToolWriteFile:
		obs, err = s.write(args)
	case ToolAppendFile:
		obs, err = s.append(args)
	case ToolReadFile:
		obs, err = s.read(args)
	case ToolListFiles:
		obs, err = s.list(args)
	case ToolDeleteFile:
		obs, err = s.delete(args)
	case ToolRunWC:
		obs, err = s.wc(args)
	default:
		return envs.Outcome{}, envs.Errorf(envs.CodeUnknownTool, "sandbox has no tool %q (have %s)", tool, toolNamesForUnknownTool)
	}
	if err != nil {
		return envs.Outcome{}, err
	}
	return envs.Outcome{Observation: obs}, nil
}

func (s *Session) write(raw json.RawMessage) (string, error) {
	name, content, err := decodePathContent(ToolWriteFile, raw)
	if err != nil {
		return "", err
	}
	full, exists, _, err := s.lookup(name)
	if err != nil {
		return "", err
	}
	if !exists {
		n, err := s.count()
		if err != nil {
			return "", err
		}
		if n >= MaxFiles {
			return "", envs.Errorf(envs.CodeIllegalAction, "sandbox already holds %d files, the most it may; delete one before creating %q", n, name)
		}
	}
	if err := s.stage(scriptWrite, content, full); err != nil {
		return "", fmt.Errorf("write %q: %w", name, err)
	}
	return fmt.Sprintf("wrote %s (%d bytes)", name, len(content)), nil
}

func (s *Session) append(raw json.RawMessage) (string, error) {
	name, content, err := decodePathContent(ToolAppendFile, raw)
	if err != nil {
		return "", err
	}
	full, size, err := s.existing(name)
	if err != nil {
		return "", err
	}
	if total := size + int64(len(content)); total > MaxContentBytes {
		return "", envs.Errorf(envs.CodeIllegalAction, "appending %d bytes would grow %q to %d bytes, more than %d", len(content), name, total, MaxContentBytes)
	}
	if err := s.stage(scriptAppend, content, full); err != nil {
		return "", fmt.Errorf("append to %q: %w", name, err)
	}
	return fmt.Sprintf("appended %d bytes to %s (now %d bytes)", len(content), name, size+int64(len(content))), nil
}

func (s *Session) read(raw json.RawMessage) (string, error) {
	name, err := decodePath(ToolReadFile, raw)
	if err != nil {
		return "", err
	}
	full, _, err := s.existing(name)
	if err != nil {
		return "", err
	}
	out, err := runScript(s.timeout, s.Dir(), scriptRead, nil, full)
	if err != nil {
		return "", fmt.Errorf("read %q: %w", name, err)
	}
	return string(out), nil
}

func (s *Session) list(raw json.RawMessage) (string, error) {
	var in struct{}
	if err := decodeStrict(raw, &in); err != nil {
		return "", envs.Errorf(envs.CodeBadArguments, "%s arguments: %v", ToolListFiles, err)
	}
	out, err := runScript(s.timeout, s.Dir(), scriptList, nil, s.Dir())
	if err != nil {
		return "", fmt.Errorf("list files: %w", err)
	}
	names := strings.TrimSpace(string(out))
	if names == "" {
		return "(no files)", nil
	}
	return names, nil
}

func (s *Session) delete(raw json.RawMessage) (string, error) {
	name, err := decodePath(ToolDeleteFile, raw)
	if err != nil {
		return "", err
	}
	full, _, err := s.existing(name)
	if err != nil {
		return "", err
	}
	if _, err := runScript(s.timeout, s.Dir(), scriptDelete, nil, full); err != nil {
		return "", fmt.Errorf("delete %q: %w", name, err)
	}
	return "deleted " + name, nil
}

func (s *Session) wc(raw json.RawMessage) (string, error) {
	name, err := decodePath(ToolRunWC, raw)
	if err != nil {
		return "", err
	}
	full, _, err := s.existing(name)
	if err != nil {
		return "", err
	}
	out, err := runScript(s.timeout, s.Dir(), scriptWC, nil, full)
	if err != nil {
		return "", fmt.Errorf("wc %q: %w", name, err)
	}
	// wc -l -w -c prints lines, words and bytes in that order.
	fields := strings.Fields(string(out))
	if len(fields) != 3 {
		return "", fmt.Errorf("wc %q: unexpected output %q", name, out)
	}
	var counts [3]int64
	for i, f := range fields {
		if counts[i], err = strconv.ParseInt(f, 10, 64); err != nil {
			return "", fmt.Errorf("wc %q: unexpected output %q: %w", name, out, err)
		}
	}
	return fmt.Sprintf("%s: lines=%d words=%d bytes=%d", name, counts[0], counts[1], counts[2]), nil
}

// stage runs a staging script (write or append) with content on stdin and
// removes the staging file if the command fails, so nothing is left behind.
func (s *Session) stage(script, content, full string) error {
	staging := filepath.Join(s.root, stagingDir, stagingName)
	if _, err := runScript(s.timeout, s.Dir(), script, []byte(content), staging, full); err != nil {
		if rmErr := os.Remove(staging); rmErr != nil && !errors.Is(rmErr, fs.ErrNotExist) {
			return errors.Join(err, fmt.Errorf("remove staging file: %w", rmErr))
		}
		return err
	}
	return nil
}

// decodePath reads {"path": ...} and checks the path.
func decodePath(tool string, raw json.RawMessage) (string, error) {
	var in pathArgs
	if err := decodeStrict(raw, &in); err != nil {
		return "", envs.Errorf(envs.CodeBadArguments, "%s arguments: %v", tool, err)
	}
	if in.Path == nil {
		return "", envs.Errorf(envs.CodeBadArguments, "%s arguments: path is required", tool)
	}
	if problem := pathProblem(*in.Path); problem != "" {
		return "", envs.Errorf(envs.CodeBadArguments, "%s: %s", tool, problem)
	}
	return *in.Path, nil
}

// decodePathContent reads {"path": ..., "content": ...} and checks both.
func decodePathContent(tool string, raw json.RawMessage) (name, content string, err error) {
	var in pathContentArgs
	if err := decodeStrict(raw, &in); err != nil {
		return "", "", envs.Errorf(envs.CodeBadArguments, "%s arguments: %v", tool, err)
	}
	if in.Path == nil {
		return "", "", envs.Errorf(envs.CodeBadArguments, "%s arguments: path is required", tool)
	}
	if in.Content == nil {
		return "", "", envs.Errorf(envs.CodeBadArguments, "%s arguments: content is required", tool)
	}
	if problem := pathProblem(*in.Path); problem != "" {
		return "", "", envs.Errorf(envs.CodeBadArguments, "%s: %s", tool, problem)
	}
	if n := len(*in.Content); n > MaxContentBytes {
		return "", "", envs.Errorf(envs.CodeBadArguments, "%s: content is %d bytes, more than %d", tool, n, MaxContentBytes)
	}
	return *in.Path, *in.Content, nil
}

// pathProblem describes why p is not an acceptable file name, or returns "".
// A name is a plain file in the sandbox's top level: relative, clean, no
// "..", no directory part, letters, digits, '.', '_' and '-' only, not
// starting with '.' or '-' (no hidden files, nothing a command could read as
// an option).
func pathProblem(p string) string {
	switch {
	case p == "":
		return "path is empty"
	case len(p) > MaxPathLen:
		return fmt.Sprintf("path %.20q... is %d bytes, more than %d", p, len(p), MaxPathLen)
	case strings.HasPrefix(p, "/") || filepath.IsAbs(p):
		return fmt.Sprintf("path %q is absolute; give a name relative to the sandbox", p)
	case hasDotDot(p):
		return fmt.Sprintf("path %q escapes the sandbox with ..", p)
	case path.Clean(p) != p:
		return fmt.Sprintf("path %q is not clean (it means %q)", p, path.Clean(p))
	case strings.Contains(p, "/"):
		return fmt.Sprintf("path %q has a directory part; the sandbox holds files only at its top level", p)
	case p[0] == '.' || p[0] == '-':
		return fmt.Sprintf("path %q starts with %q; names must start with a letter, digit or '_'", p, p[0])
	}
	for _, c := range p {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Sprintf("path %q contains %q; names use letters, digits, '.', '_' and '-'", p, c)
		}
	}
	return ""
}

// hasDotDot reports whether any slash- or backslash-separated element of p is "..".
func hasDotDot(p string) bool {
	for _, el := range strings.FieldsFunc(p, func(r rune) bool { return r == '/' || r == '\\' }) {
		if el == ".." {
			return true
		}
	}
	return false
}

// lookup returns the full path of a checked name and whether a regular file
// is there. Anything else at that name (a symbolic link, a directory) is
// refused: the sandbox never follows links.
func (s *Session) lookup(name string) (full string, exists bool, size int64, err error) {
	full = filepath.Join(s.Dir(), name)
	fi, err := os.Lstat(full)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return full, false, 0, nil
	case err != nil:
		return "", false, 0, fmt.Errorf("inspect %q: %w", name, err)
	case fi.Mode()&fs.ModeSymlink != 0:
		return "", false, 0, envs.Errorf(envs.CodeBadArguments, "path %q is a symbolic link; the sandbox does not follow links", name)
	case !fi.Mode().IsRegular():
		return "", false, 0, envs.Errorf(envs.CodeBadArguments, "path %q is not a regular file", name)
	}
	return full, true, fi.Size(), nil
}

// existing is lookup for tools that need the file to be there.
func (s *Session) existing(name string) (full string, size int64, err error) {
	full, exists, size, err := s.lookup(name)
	if err != nil {
		return "", 0, err
	}
	if !exists {
		return "", 0, envs.Errorf(envs.CodeIllegalAction, "no file %q in the sandbox", name)
	}
	return full, size, nil
}

// count is the number of entries in the files directory.
func (s *Session) count() (int, error) {
	entries, err := os.ReadDir(s.Dir())
	if err != nil {
		return 0, fmt.Errorf("read sandbox directory: %w", err)
	}
	return len(entries), nil
}

// Differences is the Verify details: what stands between the directory and
// the task. All lists are sorted and never null.
type Differences struct {
	Expected     []string `json:"expected"`
	Missing      []string `json:"missing"`
	Unexpected   []string `json:"unexpected"`
	WrongContent []string `json:"wrong_content"`
}

// Verify scores 1 when the directory holds exactly the task's files with
// exactly their contents, else 0. It reads the directory without changing it.
func (s *Session) Verify() (envs.Verdict, error) {
	if s.closed {
		return envs.Verdict{}, errors.New("sandbox session is closed")
	}
	entries, err := os.ReadDir(s.Dir()) // sorted by name
	if err != nil {
		return envs.Verdict{}, fmt.Errorf("verify: read sandbox directory: %w", err)
	}
	d := Differences{Expected: s.task.Names(), Missing: []string{}, Unexpected: []string{}, WrongContent: []string{}}
	seen := make(map[string]bool, len(entries))
	for _, e := range entries {
		want, expected := s.task.Files[e.Name()]
		if !expected || !e.Type().IsRegular() {
			d.Unexpected = append(d.Unexpected, e.Name())
			continue
		}
		seen[e.Name()] = true
		got, err := os.ReadFile(filepath.Join(s.Dir(), e.Name()))
		if err != nil {
			return envs.Verdict{}, fmt.Errorf("verify: read %q: %w", e.Name(), err)
		}
		if string(got) != want {
			d.WrongContent = append(d.WrongContent, e.Name())
		}
	}
	for _, name := range d.Expected {
		if !seen[name] {
			d.Missing = append(d.Missing, name)
		}
	}
	details, err := json.Marshal(d)
	if err != nil {
		return envs.Verdict{}, fmt.Errorf("sandbox verdict details: %w", err)
	}
	reward := 0.0
	if len(d.Missing) == 0 && len(d.Unexpected) == 0 && len(d.WrongContent) == 0 {
		reward = 1
	}
	return envs.Verdict{Reward: reward, Details: details}, nil
}

// Export refuses: the state is a directory driven by subprocesses, which a
// checkpoint cannot carry. A restore replays the session's calls instead.
func (*Session) Export() (json.RawMessage, error) {
	return nil, envs.Errorf(envs.CodeNotExportable, "sandbox cannot export its scratch directory: its session is rebuilt by replaying its calls")
}

// Close removes the scratch directory. It is safe to call more than once.
func (s *Session) Close() error {
	if s.closed {
		return nil
	}
	s.closed = true
	if err := os.RemoveAll(s.root); err != nil {
		return fmt.Errorf("remove sandbox scratch directory: %w", err)
	}
	return nil
}
