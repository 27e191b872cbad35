package notes_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/envs/notes"
)

// task is a task statement as clients/python/examples/participant/notes.py writes it.
const task = "Your notebook holds 2 notes. Make these 2 edits, in order, then answer done:\n" +
	"1. Write the note \"todo\" with the text \"pay rent\".\n" +
	"2. Delete the note \"gifts\".\n" +
	`TASK {"edits":[{"arguments":{"body":"pay rent","title":"todo"},"tool":"write_note"},{"arguments":{"title":"gifts"},"tool":"delete_note"}]}`

func respond(t *testing.T, msgs []envs.Message, imperfection float64) envs.PolicyResponse {
	t.Helper()
	out, err := notes.Policy{}.Respond(envs.PolicyRequest{Messages: msgs, Seed: 3, Imperfection: imperfection,
		Tools: []string{notes.ToolList, notes.ToolWrite, notes.ToolAppend, notes.ToolDelete}})
	require.NoError(t, err)
	return out
}

// TestPolicyWalksTheEdits: list first, then each edit with its exact
// arguments, a refused call again, then done; a perfect policy makes every
// edit and an always-imperfect one forgets the last.
func TestPolicyWalksTheEdits(t *testing.T) {
	msgs := []envs.Message{{Role: "system", Content: "You keep a notebook."}, {Role: "user", Content: task}}
	var calls []string
	reply := func(content string) {
		r := respond(t, msgs, 0)
		require.Len(t, r.ToolCalls, 1, "after %v: want one tool call, got %+v", calls, r)
		c := r.ToolCalls[0]
		calls = append(calls, c.Name+" "+c.Arguments)
		msgs = append(msgs, envs.Message{Role: "assistant", ToolCalls: r.ToolCalls}, envs.Message{Role: "tool", ToolCallID: c.ID, Content: content})
	}
	reply("2 notes:\n- gifts: milk\n- todo: eggs")
	reply("error: revision_mismatch: try again")
	reply(`Wrote "todo".`)
	reply(`Deleted "gifts".`)
	want := []string{
		`list_notes {}`,
		`write_note {"body":"pay rent","title":"todo"}`,
		`write_note {"body":"pay rent","title":"todo"}`,
		`delete_note {"title":"gifts"}`,
	}
	require.Equal(t, strings.Join(want, "\n"), strings.Join(calls, "\n"), "calls:\n%s\nwant:\n%s", strings.Join(calls, "\n"), strings.Join(want, "\n"))
	last := respond(t, msgs, 0)
	require.Equal(t, notes.Done, last.Content, "after the last edit: %+v", last)
	require.Empty(t, last.ToolCalls, "after the last edit: %+v", last)
	r := respond(t, msgs[:8], 1)
	require.Equal(t, notes.Done, r.Content, "an imperfect episode forgets the last edit: %+v", r)
}

func TestPolicyRefusesWithoutATask(t *testing.T) {
	for name, msgs := range map[string][]envs.Message{
		"no user message": {{Role: "system", Content: "x"}},
		"no TASK line":    {{Role: "user", Content: "edit the notes"}},
		"no edits":        {{Role: "user", Content: `TASK {"edits":[]}`}},
		"bad JSON":        {{Role: "user", Content: `TASK {"edits":`}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := (notes.Policy{}).Respond(envs.PolicyRequest{Messages: msgs})
			require.Error(t, err, "want an error")
		})
	}
}
