// Package repocheck keeps build outputs out of the repository: no tracked
// file may be larger than MaxBytes, and only scripts may be executable.
// Its test runs in `make test` over the files git tracks.
package repocheck

import (
	"bufio"
	"bytes"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
)

// MaxBytes is the largest a tracked file may be: anything bigger is a build
// output, a data dump or a binary, which belongs in a release or a bucket.
const MaxBytes = 1 << 20

// executableDirs are the folders (and any folder named hooks) where a
// tracked file may have its executable bit: scripts a user or CI runs.
func executableDirs() []string { return []string{"scripts/", ".ci/"} }

// Entry is one tracked file as the index records it.
type Entry struct {
	Path       string
	Size       int64
	Executable bool
}

// Check returns one line per problem: an over-size file, or an executable
// outside scripts/, .ci/ and hooks folders.
func Check(entries []Entry) []string {
	var problems []string
	for _, e := range entries {
		if e.Size > MaxBytes {
			problems = append(problems, fmt.Sprintf("%s: %d bytes, over the %d-byte limit for a tracked file (a build output or data dump? remove it and ignore it in .gitignore)", e.Path, e.Size, MaxBytes))
		}
		if e.Executable && !executableAllowed(e.Path) {
			problems = append(problems, fmt.Sprintf("%s: executable outside %s and hooks/ (a binary? or run it with its interpreter and `git update-index --chmod=-x`)", e.Path, strings.Join(executableDirs(), ", ")))
		}
	}
	return problems
}

func executableAllowed(path string) bool {
	for _, dir := range executableDirs() {
		if strings.HasPrefix(path, dir) {
			return true
		}
	}
	return path == "hooks" || strings.HasPrefix(path, "hooks/") || strings.Contains(path, "/hooks/")
}

// Tracked lists the files in the git index of the repository at root, with
// the size and mode the index holds for each (so a staged change counts, and
// a fresh clone gives the same answer).
func Tracked(root string) ([]Entry, error) {
	ls := exec.Command("git", "ls-files", "-s", "-z")
	ls.Dir = root
	out, err := ls.Output()
	if err != nil {
		return nil, fmt.Errorf("git ls-files in %s: %w", root, err)
	}
	var entries []Entry
	var objects bytes.Buffer
	for rec := range bytes.SplitSeq(bytes.TrimRight(out, "\x00"), []byte{0}) {
		// "<mode> <object> <stage>\t<path>"
		meta, path, ok := bytes.Cut(rec, []byte{'\t'})
		fields := strings.Fields(string(meta))
		if !ok || len(fields) != 3 {
			return nil, fmt.Errorf("git ls-files: unexpected line %q", rec)
		}
		if fields[0] == "160000" { // a submodule: no blob here
			continue
		}
		entries = append(entries, Entry{Path: string(path), Executable: fields[0] == "100755"})
		objects.WriteString(fields[1] + "\n")
	}
	sizes, err := blobSizes(root, &objects, len(entries))
	if err != nil {
		return nil, err
	}
	for i := range entries {
		entries[i].Size = sizes[i]
	}
	return entries, nil
}

// blobSizes asks git for the size of each object named in objects, in order.
func blobSizes(root string, objects *bytes.Buffer, n int) ([]int64, error) {
	cat := exec.Command("git", "cat-file", "--batch-check=%(objectsize)")
	cat.Dir = root
	cat.Stdin = objects
	out, err := cat.Output()
	if err != nil {
		return nil, fmt.Errorf("git cat-file in %s: %w", root, err)
	}
	sizes := make([]int64, 0, n)
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		s, err := strconv.ParseInt(sc.Text(), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("git cat-file: size %q: %w", sc.Text(), err)
		}
		sizes = append(sizes, s)
	}
	if len(sizes) != n {
		return nil, fmt.Errorf("git cat-file: %d sizes for %d files", len(sizes), n)
	}
	return sizes, nil
}
