package integration_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/turnstile-rl/turnstile/internal/stack"
	"github.com/turnstile-rl/turnstile/workers"
	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// The network faults of the crash matrix: a Toxiproxy proxy stands between
// the workers and each environment server (one for the data path, one for
// the checkpoint's control calls) and the policy server, and the case puts
// its fault on those links at a state the test observes.
const (
	procNet = "netfault"
	// netHungPrepare: environment server A's control link hangs (no byte
	// passes, no connection closes) before a checkpoint starts, so its
	// prepare hangs. (The data link stays up: with it hung too and healed
	// after the abort, a rollout on A did not finish within the case's
	// five minutes; see docs/testing.md.)
	netHungPrepare = "env-hung-during-prepare"
	// netHungCommit: A's control link hangs once the checkpoint's prepare
	// is done (while it parks; the data path stays up so members can reach
	// their boundaries), so its commit hangs.
	netHungCommit = "env-hung-during-commit"
	// netSlowLinks: 200 ms ± 100 ms latency both ways and resets of a share
	// of the connections on every participant link and the policy link,
	// the whole run.
	netSlowLinks = "slow-links-with-resets"
	// netPartitionMidTurn: both environment servers' data links are cut
	// (the proxies disabled: connections reset, new ones refused) while the
	// set is mid-flight, until a turn's activity has failed on the cut and
	// is retrying; then they come back.
	netPartitionMidTurn = "env-partitioned-mid-turn"
	// netHungBothDuringPrepare: A's data and control links both hang
	// before a checkpoint starts: its prepare hangs and so do the turns of
	// its rollouts, until the checkpoint has ended.
	netHungBothDuringPrepare = "env-data-and-control-hung-during-prepare"
	// netWorkerCutOff: the first worker's link to Temporal hangs while the
	// set is mid-flight, until Temporal has timed out a task of the cut
	// worker and a model call's heartbeat timeout has passed; then it
	// comes back (crashmatrix_partition_test.go).
	netWorkerCutOff = "worker-cut-off-from-temporal"
)

// The network cases' settings: a hung participant is declared so after
// three unanswered 1 s probes, and an abort asks it to resume for 10 s; the
// checkpoint's cut gets 30 s and its leases a 5 s grace, so a server left
// prepared by a hung abort resumes by itself about 65 s after the start.
var (
	netLiveness = []string{
		workers.EnvProbeEvery + "=1s", workers.EnvProbeTimeout + "=1s", workers.EnvProbeMisses + "=3",
		workers.EnvAbortResumeWindow + "=10s",
	}
	netCheckpointTimeout = "30s"
	netLeaseGrace        = "5s"
	// netHangBound is what a hung prepare or commit may cost at most: the
	// probes (3 s), the abort's resume window (10 s) and the step's
	// retries, with room for a loaded machine; the commit step's own bound
	// is 30 minutes.
	netHangBound = 2 * time.Minute
)

// netCases are the network cases.
func netCases() []matrixCase {
	var cs []matrixCase
	for _, p := range []string{
		netHungPrepare, netHungCommit, netSlowLinks, netPartitionMidTurn, netHungBothDuringPrepare, netWorkerCutOff,
		netnsPartitionMidTurn, netnsPartitionDuringPrepare,
	} {
		cs = append(cs, matrixCase{proc: procNet, point: p, flow: flowNet})
	}
	return cs
}

// netLinks are a case's proxies, by the direct URL they stand in front
// of.
type netLinks struct {
	tp      *stack.Toxiproxy
	data    map[string]*stack.Proxy // environment servers' data path
	control map[string]*stack.Proxy // the checkpoint's calls
	policy  *stack.Proxy
	// temporal is the first worker's link to Temporal (nil: the case has
	// none; the workers dial Temporal directly).
	temporal *stack.Proxy
}

// all is every proxy of the case.
func (n *netLinks) all() []*stack.Proxy {
	out := []*stack.Proxy{n.policy}
	for _, m := range []map[string]*stack.Proxy{n.data, n.control} {
		for _, p := range m {
			out = append(out, p)
		}
	}
	return out
}

// startNet starts Toxiproxy and the proxies in front of the stack's
// servers; workers started afterwards and the set's inputs go through
// them.
func (s *matrixStack) startNet(ctx context.Context) {
	s.t.Helper()
	bin, err := stack.FindToxiproxy(bins.root)
	require.NoError(s.t, err)
	tp, err := s.c.launch.StartToxiproxy(ctx, bin, 30*time.Second)
	if tp != nil {
		s.c.track(tp.Proc)
	}
	require.NoError(s.t, err)
	n := &netLinks{tp: tp, data: map[string]*stack.Proxy{}, control: map[string]*stack.Proxy{}}
	for i, u := range s.participants() {
		n.data[u], err = tp.Front(fmt.Sprintf("env-%d-data", i), u)
		require.NoError(s.t, err)
		n.control[u], err = tp.Front(fmt.Sprintf("env-%d-control", i), u)
		require.NoError(s.t, err)
	}
	n.policy, err = tp.Front("policy", s.c.modelURL)
	require.NoError(s.t, err)
	s.net = n
}

// dataURL is the URL workers reach the environment server at u by.
func (s *matrixStack) dataURL(u string) string {
	if s.net == nil {
		return u
	}
	return s.net.data[u].URL
}

// controlURLs are the participants as the checkpoint reaches them.
func (s *matrixStack) controlURLs() []string {
	if s.net == nil {
		return s.participants()
	}
	var out []string
	for _, u := range s.participants() {
		out = append(out, s.net.control[u].URL)
	}
	return out
}

// netWorkerEnv points a worker at the proxies (a later entry wins).
func (s *matrixStack) netWorkerEnv() []string {
	if s.net == nil {
		return nil
	}
	return append([]string{
		workers.EnvEnvURL + "=" + s.dataURL(s.c.envURL), workers.EnvModelBaseURL + "=" + s.net.policy.URL,
	}, netLiveness...)
}

// netFlow runs a network case: the set runs on two workers through the
// proxies (or with server A in a network namespace) while the fault is on;
// nothing is restored.
func (s *matrixStack) netFlow(ctx context.Context, mc matrixCase) {
	if isNetnsCase(mc.point) {
		s.netnsFlow(ctx, mc)
		return
	}
	s.startNet(ctx)
	if mc.point == netSlowLinks {
		for _, p := range s.net.all() {
			require.NoError(s.t, p.SlowAndFlaky(200*time.Millisecond, 100*time.Millisecond, 500*time.Millisecond, 0.2))
		}
		s.note("200ms ± 100ms latency both ways and a reset 500ms into 20%% of the connections on %d links", len(s.net.all()))
	}
	var metrics []string
	if mc.point == netWorkerCutOff {
		// The first worker, whose link to Temporal is cut, starts alone
		// and takes the set's first workflow tasks (sticky, with eager
		// activities), so it holds work when its link is cut.
		metrics = append(metrics, s.startMetricsWorker(s.frontTemporal()...))
		s.submitAll(ctx)
		metrics = append(metrics, s.startMetricsWorker())
	} else {
		metrics = append(metrics, s.startMetricsWorker(), s.startMetricsWorker())
		s.submitAll(ctx)
	}
	s.waitMidFlight(ctx)
	a := s.c.envURL
	switch mc.point {
	case netHungPrepare:
		s.hungCheckpoint(ctx, mc.point, s.hangFn(s.net.control[a]), s.healAll)
	case netHungCommit:
		s.hungCheckpoint(ctx, mc.point, s.hangFn(s.net.control[a]), s.healAll)
	case netHungBothDuringPrepare:
		s.hungCheckpoint(ctx, mc.point, s.hangFn(s.net.control[a], s.net.data[a]), s.healAll)
	case netPartitionMidTurn:
		s.partitionMidTurn(metrics)
	case netWorkerCutOff:
		s.cutWorkerFromTemporal(ctx)
	}
}

// startMetricsWorker starts a worker serving its metrics (with extra
// environment entries) and returns its metrics URL.
func (s *matrixStack) startMetricsWorker(extra ...string) string {
	addr, err := stack.FreeAddr()
	require.NoError(s.t, err)
	s.startWorker(append([]string{workers.EnvMetricsListen + "=" + addr}, extra...)...)
	return "http://" + addr + "/metrics"
}

// hangFn returns a fault that hangs ps.
func (s *matrixStack) hangFn(ps ...*stack.Proxy) func() {
	return func() {
		for _, p := range ps {
			require.NoError(s.t, p.Hang())
		}
	}
}

// healAll heals every proxy of the case.
func (s *matrixStack) healAll() {
	for _, p := range s.net.all() {
		require.NoError(s.t, p.Heal())
	}
}

// hungCheckpoint puts fault on environment server A during a checkpoint's
// prepare (before it starts) or commit (once prepare is done), measures
// what the checkpoint costs, and heals once it has ended.
func (s *matrixStack) hungCheckpoint(ctx context.Context, point string, fault, heal func()) {
	var hungAt time.Time
	duringCommit := point == netHungCommit
	if !duringCommit {
		fault()
		hungAt = time.Now()
		s.note("A cut off before the checkpoint")
	}
	id := checkpoint.CheckpointWorkflowID("cp1")
	_, err := s.c.client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: rollout.TaskQueue}, checkpoint.CheckpointWorkflowName, checkpoint.CheckpointInput{
		CheckpointID: "cp1", Set: matrixSet, Root: s.root, Participants: s.controlURLs(),
		Timeout: netCheckpointTimeout, LeaseGrace: netLeaseGrace,
	})
	require.NoError(s.t, err)
	if duringCommit {
		// Prepare is done once the checkpoint runs a later step; the
		// control link hangs then, before the commit can start.
		s.waitPending(ctx, id, checkpoint.FreezeMembershipName, checkpoint.ParkMembersName)
		fault()
		hungAt = time.Now()
		s.note("A's control link hung after prepare, while the checkpoint parks")
	}
	var cp checkpoint.CheckpointResult
	err = s.c.client.GetWorkflow(ctx, id, "").Get(ctx, &cp)
	cost := time.Since(hungAt)
	if err != nil {
		s.note("checkpoint ended %s after A was cut off: aborted (%s)", cost.Round(100*time.Millisecond), firstLine(err.Error(), 110))
		s.t.Logf("checkpoint error: %v", err)
		require.ErrorContains(s.t, err, "aborted")
	} else {
		s.note("checkpoint ended %s after A was cut off: committed, %d parked", cost.Round(100*time.Millisecond), cp.Parked)
	}
	s.t.Logf("measured bound: %s cost the checkpoint %s (bound %s)", point, cost.Round(100*time.Millisecond), netHangBound)
	require.Less(s.t, cost, netHangBound, "%s must cost the checkpoint its bound, not more", point)
	heal()
	s.note("links healed")
}

// waitPending waits until workflow id runs an activity of one of names.
func (s *matrixStack) waitPending(ctx context.Context, id string, names ...string) {
	s.t.Helper()
	s.c.waitFor(fmt.Sprintf("%s running %v", id, names), nil, 2*time.Minute, func() bool {
		d, err := s.c.client.DescribeWorkflow(ctx, id, "")
		if err != nil {
			return false
		}
		for _, pa := range d.RawResponse.GetPendingActivities() {
			for _, n := range names {
				if pa.GetActivityType().GetName() == n {
					return true
				}
			}
		}
		return false
	})
}

// partitionMidTurn cuts both environment servers' data links until an
// environment call of a turn has failed on the cut (the workers' metrics,
// at metrics, count it; environment calls are local activities, which
// Temporal does not list as pending), then restores them.
func (s *matrixStack) partitionMidTurn(metrics []string) {
	var cut []*stack.Proxy
	for _, u := range s.participants() {
		cut = append(cut, s.net.data[u])
	}
	for _, p := range cut {
		require.NoError(s.t, p.Disable())
	}
	var seen string
	s.c.waitFor("an environment call failing on the partition", nil, 2*time.Minute, func() bool {
		seen = failedEnvCalls(metrics)
		return seen != ""
	})
	s.note("partitioned mid-turn (%s)", seen)
	for _, p := range cut {
		require.NoError(s.t, p.Enable())
	}
	s.note("partition healed")
}

// failedEnvCalls scrapes the workers' metrics and returns the failed
// environment activities they counted ("" while there are none).
func failedEnvCalls(urls []string) string {
	var failed []string
	for _, u := range urls {
		resp, err := http.Get(u)
		if err != nil {
			continue
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(body), "\n") {
			name, value, ok := strings.Cut(line, " ")
			if !ok || !strings.HasPrefix(name, "turnstile_activity_seconds_count{") || !strings.Contains(name, `outcome="failed"`) ||
				strings.Contains(name, `activity="`+rollout.CallModelName+`"`) || value == "0" {
				continue
			}
			failed = append(failed, name+" "+value)
		}
	}
	return strings.Join(failed, ", ")
}
