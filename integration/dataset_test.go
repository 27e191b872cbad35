package integration_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/turnstile-rl/turnstile/internal/schemacheck"
	"github.com/turnstile-rl/turnstile/trainer"
)

// datasetRows: a counter row with token capture, one without (its own id
// from its line), and one with its own seed and turn limit.
const datasetRows = `{"id":"cap","env":"counter","task":{"target":3},"sampling":{"capture_tokens":true,"temperature":0.5}}
{"env":"counter","task":{"target":2}}
{"id":"seeded","env":"counter","task":{"target":4,"start":1},"seed":7,"max_turns":12}
`

// TestDatasetSubmitExport submits a dataset with repeats through the
// starter, waits for it, exports it, and checks each line against the
// published schema: ids, groups and repeats as derived, token fields on
// every assistant message of the rows that capture tokens. A second submit
// of the same dataset is refused, and the Web UI's search attributes find
// a group.
func TestDatasetSubmitExport(t *testing.T) {
	if testing.Short() {
		t.Skip("integration")
	}
	c := newStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	rows := filepath.Join(c.dir, "rows.jsonl")
	require.NoError(t, os.WriteFile(rows, []byte(datasetRows), 0o600))
	const repeats = 3
	out, err := c.starter(ctx, "submit", "--set", "ds1", "--tasks", rows, "--repeats", fmt.Sprint(repeats), "--wait", "--timeout", "3m")
	require.NoError(t, err, "starter submit:\n%s", out)
	require.Contains(t, out, "submitted 9 rollouts of set ds1 (3 rows × 3 repeats)")

	// Idempotent ids: submitting the same dataset again starts nothing.
	out, err = c.starter(ctx, "submit", "--set", "ds1", "--tasks", rows, "--repeats", fmt.Sprint(repeats))
	require.Error(t, err, "a second submit of the set was accepted:\n%s", out)
	require.Contains(t, out, "already exists")

	// The group and repeat are search attributes.
	out, err = c.temporalCLI(ctx, "workflow", "list", "--query", `RolloutSet="ds1" AND RolloutGroup="cap" AND RolloutRepeat=2`, "--output", "json")
	require.NoError(t, err, out)
	var listed []json.RawMessage
	require.NoError(t, json.Unmarshal([]byte(out), &listed), out)
	require.Len(t, listed, 1, out)

	export := filepath.Join(c.dir, "ds1.jsonl")
	out, err = c.starter(ctx, "export", "--set", "ds1", "--file", export, "--transcript-dir", c.store)
	require.NoError(t, err, "starter export:\n%s", out)
	require.Contains(t, out, "exported 9 rollouts of set ds1 (9 completed, 0 of them held for acknowledgement, 0 failed)")
	checkDatasetExport(t, export, repeats)
}

// TestDatasetExportHeld: a set that holds its results for acknowledgement
// exports them while held (held, with receipts); the export feeds
// `starter acknowledge`; an export right after the acknowledgement, while
// the released runs are closing, still exports every rollout once (held
// or, once its run closed, not); and once closed the same rollouts export
// again with the same receipts.
func TestDatasetExportHeld(t *testing.T) {
	if testing.Short() {
		t.Skip("integration")
	}
	c := newStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	rows := filepath.Join(c.dir, "rows.jsonl")
	require.NoError(t, os.WriteFile(rows, []byte(`{"id":"h","env":"counter","task":{"target":2}}`+"\n"), 0o600))
	out, err := c.starter(ctx, "submit", "--set", "ds2", "--tasks", rows, "--repeats", "2", "--require-ack", "--wait", "--timeout", "3m")
	require.NoError(t, err, "starter submit:\n%s", out)

	held := filepath.Join(c.dir, "held.jsonl")
	out, err = c.starter(ctx, "export", "--set", "ds2", "--file", held, "--transcript-dir", c.store)
	require.NoError(t, err, "starter export:\n%s", out)
	require.Contains(t, out, "exported 2 rollouts of set ds2 (2 completed, 2 of them held for acknowledgement, 0 failed)")
	before := exportedReceipts(t, held, isHeld)

	out, err = c.starter(ctx, "acknowledge", "--set", "ds2", "--receipts", held)
	require.NoError(t, err, "starter acknowledge:\n%s", out)
	require.Contains(t, out, "acknowledged 2 rollouts")

	// At once: a run released but not closed yet is awaited, not skipped.
	closing := filepath.Join(c.dir, "closing.jsonl")
	out, err = c.starter(ctx, "export", "--set", "ds2", "--file", closing, "--transcript-dir", c.store)
	require.NoError(t, err, "starter export:\n%s", out)
	require.Contains(t, out, "exported 2 rollouts of set ds2 (2 completed", "export right after the acknowledgement")
	require.Equal(t, before, exportedReceipts(t, closing, anyHeld))

	// Released, the rollouts close; the export then shows them closed.
	c.waitFor("acknowledged rollouts to close", nil, time.Minute, func() bool {
		resp, err := c.client.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Query: `RolloutSet="ds2" AND ExecutionStatus="Completed"`})
		return err == nil && resp.GetCount() == 2
	})
	closed := filepath.Join(c.dir, "closed.jsonl")
	out, err = c.starter(ctx, "export", "--set", "ds2", "--file", closed, "--transcript-dir", c.store)
	require.NoError(t, err, "starter export:\n%s", out)
	require.Equal(t, before, exportedReceipts(t, closed, notHeld))
}

// heldFlag is what exportedReceipts expects of each line's held flag.
type heldFlag int

const (
	isHeld heldFlag = iota
	notHeld
	anyHeld
)

// exportedReceipts reads the receipts of an export's lines, checking each
// line's held flag.
func exportedReceipts(t *testing.T, path string, held heldFlag) map[string]string {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	out := map[string]string{}
	for _, raw := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var l trainer.ExportLine
		require.NoError(t, json.Unmarshal([]byte(raw), &l))
		if held != anyHeld {
			require.Equal(t, held == isHeld, l.Held, l.RolloutID)
		}
		require.Equal(t, "completed", l.Status, l.RolloutID)
		require.NotNil(t, l.Receipt, l.RolloutID)
		require.NotEmpty(t, l.Messages, l.RolloutID)
		out[l.RolloutID] = l.Receipt.SHA256
	}
	require.Len(t, out, 2)
	return out
}

// checkDatasetExport validates every line of the export at path.
func checkDatasetExport(t *testing.T, path string, repeats int) {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join(bins.root, "docs", "trajectory.schema.json"))
	require.NoError(t, err)
	schema, err := schemacheck.Compile(doc)
	require.NoError(t, err)
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	var ids []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		require.Empty(t, schema.Validate(sc.Bytes()), "line does not match docs/trajectory.schema.json:\n%s", sc.Bytes())
		var l trainer.ExportLine
		require.NoError(t, json.Unmarshal(sc.Bytes(), &l))
		ids = append(ids, l.RolloutID)
		require.NotNil(t, l.Group, l.RolloutID)
		require.NotNil(t, l.Repeat, l.RolloutID)
		require.Equal(t, trainer.DatasetRolloutID("ds1", *l.Group, *l.Repeat), l.RolloutID)
		require.Equal(t, "completed", l.Status, l.RolloutID)
		require.Equal(t, 1.0, *l.Reward, "%s: the scripted counter policy reaches the target", l.RolloutID)
		require.Len(t, l.Attempts, 1, l.RolloutID)
		require.Equal(t, l.NumTurns, len(l.Turns), l.RolloutID)
		checkTokens(t, l)
		if l.RolloutID == "ds1-cap-r0" {
			t.Logf("export line of %s:\n%s", l.RolloutID, sc.Bytes())
		}
	}
	require.NoError(t, sc.Err())
	sort.Strings(ids)
	var want []string
	for _, g := range []string{"cap", "row2", "seeded"} {
		for r := range repeats {
			want = append(want, trainer.DatasetRolloutID("ds1", g, r))
		}
	}
	sort.Strings(want)
	require.Equal(t, want, ids)
}

// checkTokens: rollouts of the capture row carry token ids and log-probs
// on every assistant message; the others say their tokens are absent.
func checkTokens(t *testing.T, l trainer.ExportLine) {
	t.Helper()
	require.NotEmpty(t, l.Turns, l.RolloutID)
	for _, turn := range l.Turns {
		m := l.Messages[turn.Assistant]
		require.Equal(t, "assistant", m.Role)
		if *l.Group != "cap" {
			require.NotEqual(t, "present", m.Tokens, "%s: tokens without capture_tokens", l.RolloutID)
			continue
		}
		require.Equal(t, "present", m.Tokens, "%s turn %d", l.RolloutID, turn.Turn)
		require.NotEmpty(t, m.PromptTokenIDs, l.RolloutID)
		require.NotEmpty(t, m.GenerationTokenIDs, l.RolloutID)
		require.Len(t, m.GenerationLogProbs, len(m.GenerationTokenIDs), l.RolloutID)
		require.NotEmpty(t, m.FinishReason, l.RolloutID)
		require.False(t, *m.PrefixBreak && turn.Turn > 1, "%s turn %d: %s", l.RolloutID, turn.Turn, m.PrefixBreakReason)
		require.True(t, strings.Contains(string(m.Sampling), `"temperature":0.5`), "%s: sampling %s", l.RolloutID, m.Sampling)
	}
	if *l.Group == "cap" {
		require.Equal(t, "present", l.Tokens, l.RolloutID)
	}
}
