package integration_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/internal/docblocks"
)

// The documentation is executable: TestDocs runs every ```sh block of
// README.md and docs/*.md with bash, in page order, against the stack the
// quickstart's own blocks start, so a wrong example fails `make test`.
//
//   - A block marked <!-- not run: reason --> is skipped, and the test says
//     so with the reason (long runs such as make demo, or blocks that need a
//     GPU, a cloud account or S3).
//   - The blocks of one page run in one shell, as a reader would type them
//     into one terminal. docs/quickstart.md runs first: it starts the stack
//     and its shell's exported variables (the tokens) carry over to every
//     other page, each in a shell of its own. Blocks marked
//     <!-- teardown: … --> run after every page.
//   - The pages run in a copy of the repository root (symlinks, and ./bin
//     holding the binaries TestMain built plus bin/conformance) on free
//     ports: temporal-dev.yaml is rewritten with free ports, and the
//     variables the docs read with defaults (TURNSTILE_ENV_LISTEN,
//     TURNSTILE_GATEWAY_ADDR, ENV_B, …) are set to free addresses. The
//     Temporal CLI is the one TestMain found ($TURNSTILE_TEMPORAL_BIN, or
//     scripts/ensure-temporal.sh's rules), first on PATH.
//   - Every page runs in a process group of its own; at the end each group
//     is stopped by its id (SIGTERM, then SIGKILL), so nothing a block
//     started outlives the test.

// docsFirst is the page that starts the stack the others use.
const docsFirst = "docs/quickstart.md"

// docsBlockTimeout bounds one block; docsTimeout the whole run.
const (
	docsBlockTimeout = 90 * time.Second
	docsTimeout      = 5 * time.Minute
)

// docsAddrs are the variables the docs read addresses from, with a default
// each (TURNSTILE_ENV_URL and TURNSTILE_MODEL_BASE_URL follow the
// listeners).
var docsAddrs = []string{
	"TURNSTILE_ENV_LISTEN", "TURNSTILE_POLICY_LISTEN", "TURNSTILE_GATEWAY_ADDR",
	"PARTICIPANT", "KIT", "KIT_GO", "ENV_B", "ENV_B2",
}

func TestDocs(t *testing.T) {
	if testing.Short() {
		t.Skip("integration")
	}
	for _, tool := range []string{"bash", "curl", "openssl", "python3"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed: the docs' examples need it", tool)
		}
	}
	if out, err := exec.Command("python3", "-c", "import venv, ensurepip").CombinedOutput(); err != nil {
		t.Skipf("python3 cannot make a virtual environment (the docs install the Python client into one): %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), docsTimeout)
	defer cancel()
	sb := newDocSandbox(t)
	pages := docPages(t)

	var teardown []docblocks.Block
	env := sb.env
	stack := true // the first page's stack is up
	for _, p := range pages {
		var run []docblocks.Block
		for _, b := range p.blocks {
			switch {
			case b.Lang != "sh":
			case !b.Runs():
				t.Logf("skipped %s: %s", b.Where(), b.NotRun)
			case b.Teardown != "":
				teardown = append(teardown, b)
			default:
				run = append(run, b)
			}
		}
		if len(run) == 0 {
			continue
		}
		if !assert.True(t, stack, "not run: the %d blocks of %s, since %s did not start the stack they use", len(run), p.name, docsFirst) {
			continue
		}
		exported, ok := sb.runPage(ctx, p.name, run, env)
		if p.name == docsFirst {
			env, stack = docsMergeEnv(env, exported), ok
		}
	}
	if len(teardown) > 0 {
		sb.runPage(ctx, "teardown", teardown, env)
	}
	t.Logf("docs: %d blocks ran in %s, %d failed", sb.ran, time.Since(sb.start).Round(time.Second), sb.failed)
}

// docPage is one page and its blocks.
type docPage struct {
	name   string // relative to the repository root
	blocks []docblocks.Block
}

// docPages are README.md and docs/*.md, parsed, the quickstart first.
func docPages(t *testing.T) []docPage {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(bins.root, "docs", "*.md"))
	require.NoError(t, err)
	for i, n := range names {
		names[i] = filepath.ToSlash(strings.TrimPrefix(n, bins.root+string(filepath.Separator)))
	}
	names = append(names, "README.md")
	slices.SortFunc(names, func(a, b string) int {
		switch {
		case a == docsFirst:
			return -1
		case b == docsFirst:
			return 1
		}
		return strings.Compare(a, b)
	})
	require.Equal(t, docsFirst, names[0], "%s is missing", docsFirst)
	var pages []docPage
	for _, n := range names {
		data, err := os.ReadFile(filepath.Join(bins.root, n))
		require.NoError(t, err)
		blocks, err := docblocks.Parse(n, data)
		require.NoError(t, err, "the docs' fences")
		pages = append(pages, docPage{name: n, blocks: blocks})
	}
	return pages
}

// docSandbox is the copy of the repository root the pages run in.
type docSandbox struct {
	t      *testing.T
	root   string // the copy
	work   string // block files, page scripts, logs
	env    []string
	pgids  []int
	ran    int
	failed int
	start  time.Time
}

func newDocSandbox(t *testing.T) *docSandbox {
	t.Helper()
	base := t.TempDir()
	sb := &docSandbox{t: t, root: filepath.Join(base, "repo"), work: filepath.Join(base, "work"), start: time.Now()}
	tools := filepath.Join(base, "tools")
	for _, d := range []string{sb.root, sb.work, tools, filepath.Join(sb.root, "bin")} {
		require.NoError(t, os.MkdirAll(d, 0o755))
	}
	t.Cleanup(sb.stopAll)

	// bin/: the binaries TestMain built, and the conformance kit.
	build := exec.Command("go", "build", "-o", sb.work+string(os.PathSeparator), "./cmd/conformance")
	build.Dir = bins.root
	out, err := build.CombinedOutput()
	require.NoError(t, err, "go build ./cmd/conformance: %v\n%s", err, out)
	entries, err := os.ReadDir(bins.dir)
	require.NoError(t, err)
	for _, e := range entries {
		docsLink(t, filepath.Join(bins.dir, e.Name()), filepath.Join(sb.root, "bin", e.Name()))
	}
	docsLink(t, filepath.Join(sb.work, "conformance"), filepath.Join(sb.root, "bin", "conformance"))
	docsLink(t, bins.temporal, filepath.Join(sb.root, "bin", "temporal"))
	docsLink(t, bins.temporal, filepath.Join(tools, "temporal"))

	// Everything else of the repository root, but its outputs and settings.
	entries, err = os.ReadDir(bins.root)
	require.NoError(t, err)
	for _, e := range entries {
		switch e.Name() {
		case "bin", ".turnstile", ".git", "temporal-dev.yaml":
			continue
		}
		docsLink(t, filepath.Join(bins.root, e.Name()), filepath.Join(sb.root, e.Name()))
	}

	ports := docsFreePorts(t, 2+len(docsAddrs))
	sb.writeDevConfig(ports[0], ports[1])
	addr := func(p int) string { return fmt.Sprintf("127.0.0.1:%d", p) }
	vars := map[string]string{
		"TEMPORAL_ADDRESS":   addr(ports[0]),
		"TEMPORAL_NAMESPACE": "default",
		"PATH":               tools + string(os.PathListSeparator) + os.Getenv("PATH"),
		// Python run from the copy would write __pycache__ into the checkout.
		"PYTHONDONTWRITEBYTECODE": "1",
	}
	for i, name := range docsAddrs {
		vars[name] = addr(ports[2+i])
	}
	vars["TURNSTILE_ENV_URL"] = "http://" + vars["TURNSTILE_ENV_LISTEN"]
	vars["TURNSTILE_MODEL_BASE_URL"] = "http://" + vars["TURNSTILE_POLICY_LISTEN"] + "/v1"
	// The caller's own settings must not leak in (a TURNSTILE_TASK_QUEUE,
	// a TEMPORAL_ADDRESS of a developer's cluster).
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if _, ours := vars[name]; ours || strings.HasPrefix(name, "TURNSTILE_") || strings.HasPrefix(name, "TEMPORAL_") {
			continue
		}
		sb.env = append(sb.env, kv)
	}
	for name, v := range vars {
		sb.env = append(sb.env, name+"="+v)
	}
	t.Logf("docs sandbox %s: Temporal on %s, environment server on %s, gateway on %s",
		sb.root, vars["TEMPORAL_ADDRESS"], vars["TURNSTILE_ENV_LISTEN"], vars["TURNSTILE_GATEWAY_ADDR"])
	return sb
}

func docsLink(t *testing.T, target, name string) {
	t.Helper()
	require.NoError(t, os.Symlink(target, name))
}

// freePorts are n distinct free ports (all held open while choosing).
func docsFreePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports
}

// writeDevConfig writes the copy's temporal-dev.yaml: the repository's,
// with the frontend (and the CLI's address) and the Web UI on free ports.
func (sb *docSandbox) writeDevConfig(frontend, ui int) {
	data, err := os.ReadFile(filepath.Join(bins.root, "temporal-dev.yaml"))
	require.NoError(sb.t, err)
	s := string(data)
	for _, r := range []struct {
		re, with string
	}{
		{`(?m)^(\s+address: )"127\.0\.0\.1:\d+"`, fmt.Sprintf(`${1}"127.0.0.1:%d"`, frontend)},
		{`(?m)^(\s+port: )"\d+"`, fmt.Sprintf(`${1}"%d"`, frontend)},
		{`(?m)^(\s+ui-port: )"\d*"`, fmt.Sprintf(`${1}"%d"`, ui)},
	} {
		re := regexp.MustCompile(r.re)
		n := len(re.FindAllString(s, -1))
		require.Equal(sb.t, 1, n, "temporal-dev.yaml: %d lines match %s, want 1: update the docs test", n, r.re)
		s = re.ReplaceAllString(s, r.with)
	}
	require.NoError(sb.t, os.WriteFile(filepath.Join(sb.root, "temporal-dev.yaml"), []byte(s), 0o644))
}

// mergeEnv is base with the variables of exported (NAME=value entries)
// that are new or changed.
func docsMergeEnv(base, exported []string) []string {
	have := map[string]string{}
	for _, kv := range base {
		name, v, _ := strings.Cut(kv, "=")
		have[name] = v
	}
	out := append([]string(nil), base...)
	for _, kv := range exported {
		name, v, _ := strings.Cut(kv, "=")
		if old, ok := have[name]; (ok && old == v) || strings.HasPrefix(name, "DOCSTEST_") || name == "SHLVL" || name == "_" || name == "OLDPWD" {
			continue
		}
		out = append(out, kv) // a later entry wins
	}
	return out
}

// runPage runs blocks in one bash, in order, and reports each; it returns
// the shell's exported variables at its end, and whether every block ran.
func (sb *docSandbox) runPage(ctx context.Context, page string, blocks []docblocks.Block, env []string) ([]string, bool) {
	t := sb.t
	slug := strings.NewReplacer("/", "_", ".", "_").Replace(page)
	marks := filepath.Join(sb.work, slug+".marks")
	envOut := filepath.Join(sb.work, slug+".env")
	logPath := filepath.Join(sb.work, slug+".log")
	var script strings.Builder
	// At exit the shell writes its exported variables, NUL-separated (with
	// builtins: macOS's env has no -0).
	script.WriteString("set -eu\ncd \"$DOCSTEST_ROOT\"\n" +
		"trap 'for n in $(compgen -e); do printf \"%s=%s\\0\" \"$n\" \"${!n-}\"; done > \"$DOCSTEST_ENV_OUT\"' EXIT\n")
	for i, b := range blocks {
		file := filepath.Join(sb.work, fmt.Sprintf("%s-L%d.sh", slug, b.Line))
		require.NoError(t, os.WriteFile(file, []byte(b.Text), 0o644))
		fmt.Fprintf(&script, "echo %d >> \"$DOCSTEST_MARKS\"\nsource %s\n", i, strconv.Quote(file))
	}
	script.WriteString("echo done >> \"$DOCSTEST_MARKS\"\n")
	scriptPath := filepath.Join(sb.work, slug+".sh")
	require.NoError(t, os.WriteFile(scriptPath, []byte(script.String()), 0o644))
	logFile, err := os.Create(logPath)
	require.NoError(t, err)
	defer logFile.Close()

	cmd := exec.Command("bash", scriptPath)
	cmd.Dir = sb.root
	cmd.Env = append(append([]string(nil), env...), "DOCSTEST_ROOT="+sb.root, "DOCSTEST_MARKS="+marks, "DOCSTEST_ENV_OUT="+envOut)
	// Files, not pipes: a server a block leaves running keeps them open, and
	// Wait would wait for it.
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, cmd.Start())
	sb.pgids = append(sb.pgids, cmd.Process.Pid)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()

	// Watch the marks: each block's time, and its timeout.
	started := map[int]time.Time{}
	cur, timedOut := -1, false
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	var exitErr error
watch:
	for {
		select {
		case exitErr = <-done:
			break watch
		case <-tick.C:
		case <-ctx.Done():
			timedOut = true
		}
		for _, m := range docsMarks(marks) {
			if _, ok := started[m]; !ok && m >= 0 {
				started[m] = time.Now()
				cur = m
			}
		}
		if cur >= 0 && time.Since(started[cur]) > docsBlockTimeout {
			timedOut = true
		}
		if timedOut {
			docsStopGroup(cmd.Process.Pid)
			exitErr = <-done
			break
		}
	}
	for _, m := range docsMarks(marks) {
		if _, ok := started[m]; !ok && m >= 0 {
			started[m] = time.Now()
			cur = m
		}
	}
	finished := exitErr == nil && !timedOut && slices.Contains(docsMarks(marks), -1)
	for i, b := range blocks {
		at, ok := started[i]
		switch {
		case !ok:
			assert.Fail(t, "not reached "+b.Where(), "an earlier block of the page failed")
			continue
		case i == cur && !finished:
			sb.failed++
			why := fmt.Sprintf("failed (%v)", exitErr)
			if timedOut {
				why = fmt.Sprintf("timed out after %s", time.Since(at).Round(time.Second))
			}
			assert.Failf(t, b.Where()+" "+why, "%s\n---- its shell's output (last 60 lines of %s) ----\n%s",
				docsIndent(b.Text), logPath, docsTail(logPath, 60))
			continue
		}
		end := time.Now()
		if next, ok := started[i+1]; ok {
			end = next
		}
		sb.ran++
		t.Logf("ran %s in %s", b.Where(), end.Sub(at).Round(100*time.Millisecond))
	}
	if !finished {
		sb.dumpLogs()
	} else if testing.Verbose() {
		t.Logf("---- the output of %s ----\n%s", page, docsTail(logPath, 400))
	}
	data, err := os.ReadFile(envOut)
	if err != nil {
		return nil, finished
	}
	var out []string
	for _, kv := range bytes.Split(data, []byte{0}) {
		if len(kv) > 0 {
			out = append(out, string(kv))
		}
	}
	return out, finished
}

// readMarks are the block indexes a page script wrote (-1 for "done").
func docsMarks(path string) []int {
	data, _ := os.ReadFile(path)
	var out []int
	for _, f := range strings.Fields(string(data)) {
		if f == "done" {
			out = append(out, -1)
		} else if n, err := strconv.Atoi(f); err == nil {
			out = append(out, n)
		}
	}
	return out
}

// dumpLogs prints the tails of the logs the blocks' processes wrote.
func (sb *docSandbox) dumpLogs() {
	logs, _ := filepath.Glob(filepath.Join(sb.root, ".turnstile", "logs", "*.log"))
	for _, l := range logs {
		sb.t.Logf("---- %s (last 20 lines) ----\n%s", l, docsTail(l, 20))
	}
}

// stopAll stops every page's process group by its id: SIGTERM, then
// SIGKILL what is left after a grace period.
func (sb *docSandbox) stopAll() {
	for _, pgid := range sb.pgids {
		docsStopGroup(pgid)
	}
}

// stopGroup stops the process group pgid (a page's bash and everything its
// blocks started), by its id.
func docsStopGroup(pgid int) {
	if err := syscall.Kill(-pgid, syscall.SIGTERM); errors.Is(err, syscall.ESRCH) {
		return
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if err := syscall.Kill(-pgid, 0); errors.Is(err, syscall.ESRCH) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
}

func docsTail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func docsIndent(s string) string {
	return "    " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n    ")
}
