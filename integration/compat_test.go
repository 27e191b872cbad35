package integration_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/api/workflowservice/v1"
)

// The compatibility fixture (testdata/checkpoint-v1, see its README.md): a
// checkpoint directory committed as written by the code of an earlier
// commit, and the results of an uninterrupted run of the same rollouts.
const (
	fixtureDir          = "testdata/checkpoint-v1"
	fixtureCheckpointID = "cp-v1"
	fixtureSet          = "v1"
	// fixtureParticipant is the name of the one environment server of the
	// fixture; the harness's first environment server has the same name.
	fixtureParticipant = "env-0"
)

// fixtureReceipt is a receipt as the fixture records it.
type fixtureReceipt struct {
	RolloutID string `json:"rollout_id"`
	Attempt   int    `json:"attempt"`
	SHA256    string `json:"sha256"`
}

// fixtureOutcome is one line of the fixture's expected.jsonl: the outcome of
// rollout Index in the uninterrupted run and, when the checkpoint holds that
// rollout's completed result, the result's receipt.
type fixtureOutcome struct {
	Index       int             `json:"index"`
	Env         string          `json:"env"`
	Reward      float64         `json:"reward"`
	Turns       int             `json:"turns"`
	Head        string          `json:"head"`
	Calls       int64           `json:"calls"`
	Terminated  bool            `json:"terminated"`
	Truncated   bool            `json:"truncated"`
	HeldReceipt *fixtureReceipt `json:"held_receipt"`
}

// fixtureManifest is the part of the checkpoint's MANIFEST.json the test
// checks the fixture against (decoded leniently: the restore itself reads
// it strictly).
type fixtureManifest struct {
	CheckpointID string `json:"checkpoint_id"`
	Set          string `json:"set"`
	Participants []struct {
		URL  string `json:"url"`
		Name string `json:"name"`
	} `json:"participants"`
	Members          int `json:"members"`
	Parked           int `json:"parked"`
	CompletedUnacked int `json:"completed_unacked"`
	Closed           int `json:"closed"`
}

func readFixture(t *testing.T) (fixtureManifest, []fixtureOutcome) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(fixtureDir, fixtureCheckpointID, "MANIFEST.json"))
	require.NoError(t, err)
	var m fixtureManifest
	require.NoError(t, json.Unmarshal(data, &m))

	f, err := os.Open(filepath.Join(fixtureDir, "expected.jsonl"))
	require.NoError(t, err)
	defer f.Close()
	var want []fixtureOutcome
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var o fixtureOutcome
		require.NoError(t, json.Unmarshal(sc.Bytes(), &o), "expected.jsonl line %d", len(want)+1)
		require.Equal(t, len(want), o.Index, "expected.jsonl is in index order, one line per rollout")
		want = append(want, o)
	}
	require.NoError(t, sc.Err())
	return m, want
}

// TestCheckpointFixtureHasNoMachinePaths keeps the committed fixture free of
// the paths of the machine that produced it.
func TestCheckpointFixtureHasNoMachinePaths(t *testing.T) {
	err := filepath.WalkDir(fixtureDir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, p := range []string{"/tmp/", "/work/", "/root/", "/home/"} {
			require.False(t, bytes.Contains(data, []byte(p)), "%s contains a machine path (%s…)", path, p)
		}
		return nil
	})
	require.NoError(t, err)
}

// TestRestoreCheckpointFromV1 is the compatibility promise of the checkpoint
// format: a checkpoint written by an earlier version of turnstile (the
// fixture) restores on this code, on a fresh stack that never saw the set,
// and every rollout finishes with the trajectory, reward and turns of the
// uninterrupted run of the same seeds; a result the checkpoint holds is
// offered again with its receipt; each rollout completes exactly once.
func TestRestoreCheckpointFromV1(t *testing.T) {
	if testing.Short() {
		t.Skip("integration")
	}
	m, want := readFixture(t)
	held := 0
	for _, o := range want {
		if o.HeldReceipt != nil {
			held++
		}
	}
	require.Equal(t, fixtureCheckpointID, m.CheckpointID)
	require.Equal(t, fixtureSet, m.Set)
	require.Len(t, m.Participants, 1)
	require.Equal(t, fixtureParticipant, m.Participants[0].Name)
	require.Equal(t, len(want), m.Members, "every rollout of the set is in the checkpoint")
	require.Zero(t, m.Closed)
	require.Equal(t, held, m.CompletedUnacked, "expected.jsonl names the receipt of every result the checkpoint holds")
	require.Positive(t, held, "the fixture holds a completed, unacknowledged result")
	require.Positive(t, m.Parked, "the fixture holds rollouts parked mid-episode")

	// The restore writes its working files into the checkpoint directory:
	// it runs on a copy.
	c := newCluster(t)
	root := filepath.Join(c.dir, "checkpoints")
	require.NoError(t, os.CopyFS(filepath.Join(root, fixtureCheckpointID), os.DirFS(filepath.Join(fixtureDir, fixtureCheckpointID))))

	c.startTemporal()
	c.startEnvServer()
	c.startPolicyServer("--latency", "20ms", "--jitter", "5ms", "--imperfection", "0.2")
	c.startWorker()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	// The participant list maps the fixture's one environment server (its
	// URL in MANIFEST.json is the loopback address it had then) to this one.
	start := time.Now()
	out, err := c.starter(ctx, "restore", "--id", fixtureCheckpointID, "--root", root, "--participants", c.envURL, "--wait")
	require.NoError(t, err, "starter restore:\n%s", out)
	rs := parseStarterTable(t, out)
	t.Logf("restore of the v1 checkpoint: %d restored from their boundary, %d started over, %d offered again, in %s",
		rs["restored"], rs["started_over"], rs["offered_again"], time.Since(start).Round(time.Millisecond))
	require.Equal(t, m.Members, rs["restored"]+rs["started_over"]+rs["offered_again"], "every member of the checkpoint is restored")
	require.Equal(t, held, rs["offered_again"], "every held result is offered again")
	require.Positive(t, rs["restored"], "some rollouts continue from their v1 boundary")

	// Every rollout ends holding its result (they were submitted with
	// require_ack); one that fails instead fails the test now, by name.
	c.waitSetSettled(ctx, fixtureSet, len(want))
	got := c.acknowledgeAll(ctx, fixtureSet, len(want))
	require.Len(t, got, len(want))
	for _, w := range want {
		id := fmt.Sprintf("%s-%04d", fixtureSet, w.Index)
		res, ok := got[id]
		require.True(t, ok, "no result for %s", id)
		require.Equal(t, w.Env, res.Env, "%s: environment", id)
		require.Equal(t, w.Reward, res.Reward, "%s: reward of the uninterrupted run", id)
		require.Equal(t, w.Turns, res.Turns, "%s: turns of the uninterrupted run", id)
		require.Equal(t, w.Head, string(res.Head), "%s: transcript head (the whole conversation) of the uninterrupted run", id)
		require.Equal(t, w.Calls, res.Usage.Calls, "%s: model calls", id)
		require.Equal(t, w.Terminated, res.Terminated, "%s: terminated", id)
		require.Equal(t, w.Truncated, res.Truncated, "%s: truncated", id)
		checkLineage(t, res)
		require.NotNil(t, res.Receipt, "%s: receipt", id)
		if w.HeldReceipt != nil {
			receipt := fixtureReceipt{RolloutID: res.Receipt.RolloutID, Attempt: res.Receipt.Attempt, SHA256: res.Receipt.SHA256}
			require.Equal(t, *w.HeldReceipt, receipt, "%s: the held result is offered again with its receipt", id)
		} else {
			require.Positive(t, res.Attempt, "%s: continued as a new attempt", id)
		}
	}
	for id := range got {
		require.Equal(t, 1, c.completedRuns(ctx, id), "rollout %s: completed runs", id)
	}
}

// waitSetSettled waits until every one of the count rollouts of set holds
// its result for acknowledgement or has failed, and fails the test naming
// each rollout that failed.
func (c *cluster) waitSetSettled(ctx context.Context, set string, count int) {
	c.t.Helper()
	held := fmt.Sprintf(`RolloutSet=%q AND ExecutionStatus="Running" AND RolloutPhase="awaiting_ack"`, set)
	failed := fmt.Sprintf(`RolloutSet=%q AND ExecutionStatus!="Running" AND ExecutionStatus!="Completed" AND ExecutionStatus!="ContinuedAsNew"`, set)
	countOf := func(q string) int {
		resp, err := c.client.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Namespace: "default", Query: q})
		if err != nil {
			return -1
		}
		return int(resp.GetCount())
	}
	var nHeld, nFailed int
	c.waitFor(fmt.Sprintf("set %s: every rollout holding its result or failed", set), nil, 4*time.Minute, func() bool {
		nHeld, nFailed = countOf(held), countOf(failed)
		return nHeld >= 0 && nFailed >= 0 && nHeld+nFailed == count
	})
	if nFailed == 0 {
		return
	}
	resp, err := c.client.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Namespace: "default", Query: failed})
	require.NoError(c.t, err)
	var names []string
	for _, e := range resp.GetExecutions() {
		names = append(names, fmt.Sprintf("%s (%s)", e.GetExecution().GetWorkflowId(), e.GetStatus()))
	}
	require.Failf(c.t, "rollouts did not finish after the restore", "set %s: %d of %d: %s", set, nFailed, count, strings.Join(names, ", "))
}

// starter runs the starter binary against the cluster's Temporal.
func (c *cluster) starter(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(bins.dir, "starter"), args...)
	cmd.Env = append(os.Environ(), "TEMPORAL_ADDRESS="+c.hostPort, "TEMPORAL_NAMESPACE=default")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// parseStarterTable reads the integer rows of the starter's two-column tables
// ("restored  7").
func parseStarterTable(t *testing.T, out string) map[string]int {
	t.Helper()
	rows := map[string]int{}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		if n, err := strconv.Atoi(f[1]); err == nil {
			rows[f[0]] = n
		}
	}
	for _, k := range []string{"restored", "started_over", "offered_again"} {
		require.Contains(t, rows, k, "starter restore output:\n%s", out)
	}
	return rows
}
