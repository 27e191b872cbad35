package sandbox

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"time"
)

// Shell is the interpreter every operation runs under.
const Shell = "/bin/sh"

// Fixed scripts of the operations. Paths and contents never appear in the
// script text: paths arrive as positional parameters ("$1", "$2") and
// contents on standard input, so no file name or content can be read as
// shell syntax. Writes go to a staging file first and are renamed into
// place, so a failed or killed command leaves the file as it was.
const (
	// scriptWrite: $1 staging file, $2 target; content on stdin.
	scriptWrite = `cat > "$1" && mv -f -- "$1" "$2"`
	// scriptAppend: $1 staging file, $2 existing target; addition on stdin.
	scriptAppend = `cp -- "$2" "$1" && cat >> "$1" && mv -f -- "$1" "$2"`
	// scriptRead: $1 file.
	scriptRead = `cat -- "$1"`
	// scriptList: $1 directory; one name a line, hidden names included.
	scriptList = `ls -1A -- "$1"`
	// scriptDelete: $1 file.
	scriptDelete = `rm -- "$1"`
	// scriptWC: $1 file; reading stdin keeps the name out of the output.
	scriptWC = `wc -l -w -c < "$1"`
)

// DefaultTimeout bounds one operation's command.
const DefaultTimeout = 10 * time.Second

// runScript runs script under Shell with args as positional parameters and
// stdin as standard input, and returns its standard output.
func runScript(timeout time.Duration, dir, script string, stdin []byte, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	// "sandbox" is $0; args become $1, $2, ...
	cmd := exec.CommandContext(ctx, Shell, append([]string{"-c", script, "sandbox"}, args...)...)
	cmd.Dir = dir
	// The whole environment: a fixed PATH and the C locale, so output (ls
	// order, wc word splitting) does not depend on the host's settings.
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LC_ALL=C"}
	cmd.Stdin = bytes.NewReader(stdin)
	cmd.WaitDelay = time.Second // do not hang on a child that keeps the pipes open
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("sandbox command timed out after %s: %w", timeout, ctx.Err())
		}
		return nil, fmt.Errorf("sandbox command failed: %w (stderr: %q)", err, strings.TrimSpace(stderr.String()))
	}
	return stdout.Bytes(), nil
}
