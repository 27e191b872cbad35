package docblocks

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParse(t *testing.T) {
	page := "intro\n" +
		"```sh\nmake build\n```\n" +
		"<!-- not run: needs a GPU -->\n" +
		"```sh\nbin/worker &\n```\n" +
		"text\n" +
		"<!-- teardown: stops the stack -->\n" +
		"```sh\nkill $(cat .turnstile/pids)\n```\n" +
		"```json\n{\"a\": 1}\n```\n"
	blocks, err := Parse("p.md", []byte(page))
	require.NoError(t, err)
	want := []Block{
		{Page: "p.md", Line: 2, Lang: "sh", Text: "make build\n"},
		{Page: "p.md", Line: 6, Lang: "sh", Text: "bin/worker &\n", NotRun: "needs a GPU"},
		{Page: "p.md", Line: 11, Lang: "sh", Text: "kill $(cat .turnstile/pids)\n", Teardown: "stops the stack"},
		{Page: "p.md", Line: 14, Lang: "json", Text: "{\"a\": 1}\n"},
	}
	require.Len(t, blocks, len(want), "%d blocks, want %d: %+v", len(blocks), len(want), blocks)
	for i := range want {
		assert.Equal(t, want[i], blocks[i], "block %d: %+v, want %+v", i, blocks[i], want[i])
	}
	require.True(t, blocks[0].Runs(), "Runs: %v %v %v %v", blocks[0].Runs(), blocks[1].Runs(), blocks[2].Runs(), blocks[3].Runs())
	require.False(t, blocks[1].Runs(), "Runs: %v %v %v %v", blocks[0].Runs(), blocks[1].Runs(), blocks[2].Runs(), blocks[3].Runs())
	require.True(t, blocks[2].Runs(), "Runs: %v %v %v %v", blocks[0].Runs(), blocks[1].Runs(), blocks[2].Runs(), blocks[3].Runs())
	require.False(t, blocks[3].Runs(), "Runs: %v %v %v %v", blocks[0].Runs(), blocks[1].Runs(), blocks[2].Runs(), blocks[3].Runs())
}

func TestParseRefuses(t *testing.T) {
	tests := []struct{ name, page, says string }{
		{"no language", "```\nls\n```\n", "p.md:1: a fence without a language"},
		{"unknown language", "```bash\nls\n```\n", `p.md:1: language "bash"`},
		{"unclosed", "```sh\nls\n", "never closed"},
		{"marker without reason", "<!-- not run: -->\n```sh\nls\n```\n", "without a reason"},
		{"misspelt marker", "<!-- not-run: GPU -->\n```sh\nls\n```\n", `unknown marker "not-run"`},
		{"not a marker", "<!-- GPU only -->\n```sh\nls\n```\n", "must be <!-- not run: reason -->"},
		{"unknown marker", "<!-- skip: GPU -->\n```sh\nls\n```\n", `unknown marker "skip"`},
		{"marker on a file", "<!-- not run: a file -->\n```json\n{}\n```\n", `above a "json" block`},
		{"JSON in sh", "```sh\n{\"id\": \"q17\"}\n```\n", "starts with JSON"},
		{"YAML in sh", "```sh\n# settings\nenv:\n  dev: x\n```\n", "starts like YAML"},
		{"prompt in sh", "```sh\n$ make build\n```\n", "with a prompt"},
		{"empty sh", "```sh\n\n```\n", "an empty sh block"},
		{"indented fence", "- item\n  ```sh\n  ls\n  ```\n", "an indented fence"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("p.md", []byte(tt.page))
			require.ErrorContains(t, err, tt.says, "error %v, want one saying %q", err, tt.says)
		})
	}
}

// TestRepoPages: every page the docs test runs is well formed: fences name
// their language, markers give reasons, no sh block holds a file.
func TestRepoPages(t *testing.T) {
	pages, err := filepath.Glob(filepath.Join("..", "..", "docs", "*.md"))
	require.NoError(t, err)
	pages = append(pages, filepath.Join("..", "..", "README.md"))
	run := 0
	for _, p := range pages {
		data, err := os.ReadFile(p)
		require.NoError(t, err)
		blocks, err := Parse(filepath.Base(p), data)
		assert.NoError(t, err)
		for _, b := range blocks {
			if b.Runs() {
				run++
			}
		}
	}
	assert.NotEqual(t, 0, run, "no page has a block to run")
}
