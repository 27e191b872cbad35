// Package docblocks reads the fenced code blocks of the project's Markdown
// pages, so a test can run their shell examples against a live stack (the
// docs test in ./integration) and a wrong example fails the build.
//
// Every fence names its language. A ```sh block is commands a reader types,
// and is run, in page order, unless the line right above it says why not:
//
//	<!-- not run: needs a GPU host serving a model -->
//
// A ```sh block that stops what the page started is marked
//
//	<!-- teardown: stops the quickstart's stack -->
//
// and runs after every other page, since they use what it stops. Anything
// that is not commands (a file, a config, JSON a command prints) is
// ```text, ```json or the language it is written in, never ```sh.
package docblocks

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// Languages a fence may name.
var Languages = []string{"sh", "text", "json", "go", "python"}

// Block is one fenced block of a page.
type Block struct {
	Page string // the page's path, as given to Parse
	Line int    // 1-based line of the opening fence
	Lang string
	Text string // the lines between the fences, each ending in "\n"
	// NotRun is the reason of a "not run" marker; Teardown the description
	// of a "teardown" marker. At most one is set, only on sh blocks.
	NotRun   string
	Teardown string
}

// Runs reports whether the docs test runs b (in page order; a teardown
// block after every page).
func (b Block) Runs() bool { return b.Lang == "sh" && b.NotRun == "" }

// Where is "page:line".
func (b Block) Where() string { return fmt.Sprintf("%s:%d", b.Page, b.Line) }

var (
	fenceRE  = regexp.MustCompile("^```(.*)$")
	markerRE = regexp.MustCompile(`^<!--\s*([a-z -]+):\s*(.*?)\s*-->$`)
	// indentedFenceRE is a fence inside a list item or a quote, which the
	// test would not see: a line of only ``` (and a language) after spaces.
	indentedFenceRE = regexp.MustCompile("^\\s+```[A-Za-z]*\\s*$")
)

// Parse returns the fenced blocks of page (its path, for messages) and
// every problem of its fences and markers at once: a fence without a
// language or with one not in Languages, an unclosed fence, a marker
// without a reason, of an unknown kind, or above a block that is not sh,
// and an sh block that holds a file rather than commands.
func Parse(page string, data []byte) ([]Block, error) {
	lines := strings.Split(strings.ReplaceAll(string(data), "\r\n", "\n"), "\n")
	var (
		blocks []Block
		bad    []string
	)
	problem := func(line int, format string, args ...any) {
		bad = append(bad, fmt.Sprintf("%s:%d: %s", page, line, fmt.Sprintf(format, args...)))
	}
	for i := 0; i < len(lines); i++ {
		m := fenceRE.FindStringSubmatch(lines[i])
		if m == nil {
			if indentedFenceRE.MatchString(lines[i]) {
				problem(i+1, "an indented fence: fences start at the beginning of the line")
			}
			continue
		}
		b := Block{Page: page, Line: i + 1, Lang: strings.TrimSpace(m[1])}
		switch {
		case b.Lang == "":
			problem(b.Line, "a fence without a language (```sh for commands, ```text or ```json for files and output)")
		case !contains(Languages, b.Lang):
			problem(b.Line, "language %q: want one of %s", b.Lang, strings.Join(Languages, ", "))
		}
		var text strings.Builder
		closed := false
		for i++; i < len(lines); i++ {
			if lines[i] == "```" {
				closed = true
				break
			}
			text.WriteString(lines[i])
			text.WriteByte('\n')
		}
		if !closed {
			problem(b.Line, "the fence is never closed")
			break
		}
		b.Text = text.String()
		if b.Line >= 2 {
			if err := b.mark(lines[b.Line-2]); err != nil {
				problem(b.Line-1, "%v", err)
			}
		}
		if b.Lang == "sh" {
			if msg := fileProblem(b.Text); msg != "" {
				problem(b.Line, "%s", msg)
			}
		}
		blocks = append(blocks, b)
	}
	if len(bad) > 0 {
		return blocks, errors.New(strings.Join(bad, "\n"))
	}
	return blocks, nil
}

// mark reads the line above b's fence: a marker, or not a comment at all.
func (b *Block) mark(above string) error {
	above = strings.TrimSpace(above)
	if !strings.HasPrefix(above, "<!--") {
		return nil
	}
	m := markerRE.FindStringSubmatch(above)
	if m == nil {
		return fmt.Errorf("a comment right above a fence must be <!-- not run: reason --> or <!-- teardown: what it stops -->, not %s", above)
	}
	kind, reason := m[1], m[2]
	switch {
	case kind != "not run" && kind != "teardown":
		return fmt.Errorf("unknown marker %q: want \"not run\" or \"teardown\"", kind)
	case reason == "":
		return fmt.Errorf("<!-- %s: --> without a reason", kind)
	case b.Lang != "sh":
		return fmt.Errorf("a %q marker above a %q block: only sh blocks run", kind, b.Lang)
	case kind == "not run":
		b.NotRun = reason
	default:
		b.Teardown = reason
	}
	return nil
}

// fileProblem says why text looks like a file or output rather than
// commands, or returns "".
func fileProblem(text string) string {
	for _, l := range strings.Split(text, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		switch {
		case strings.HasPrefix(l, "{") || strings.HasPrefix(l, "["):
			return "an sh block that starts with JSON: a file or output is ```json or ```text"
		case strings.HasPrefix(l, "$ "):
			return "an sh block with a prompt (\"$ \"): give the commands alone, and their output in a ```text block"
		case regexp.MustCompile(`^[A-Za-z_.-]+:(\s|$)`).MatchString(l) && !strings.Contains(l, "="):
			return "an sh block that starts like YAML: a file is ```text"
		}
		return ""
	}
	return "an empty sh block"
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
