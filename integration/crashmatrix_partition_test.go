package integration_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"

	"github.com/turnstile-rl/turnstile/internal/netns"
	"github.com/turnstile-rl/turnstile/internal/stack"
	"github.com/turnstile-rl/turnstile/workers"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// The true partitions of the crash matrix: environment server A runs in a
// network namespace of its own, joined to the rest by a veth pair whose
// link the case takes down (packets dropped, nothing refused or reset) and
// brings back. Both the data path and the checkpoint's control calls cross
// the pair. They need root and the ip command; elsewhere they skip.
const (
	// netnsPartitionMidTurn: A's link goes down while the set is
	// mid-flight and stays down until a turn's environment call has failed
	// on it (its 15 s start-to-close timeout) and is retrying.
	netnsPartitionMidTurn = "env-netns-partitioned-mid-turn"
	// netnsPartitionDuringPrepare: A's link goes down before a checkpoint
	// starts, so its prepare (and the turns of its rollouts) hang; it comes
	// back once the checkpoint has ended.
	netnsPartitionDuringPrepare = "env-netns-partitioned-during-prepare"
)

// netnsHold is the least a mid-turn partition lasts: past an environment
// call's timeout (15 s, which also ended a local call's retries before they
// were given the rollout's whole budget) and the probes' 3 s.
const netnsHold = rollout.DefaultEnvCallTimeout + 5*time.Second

// modelHeartbeatTimeout is the model call's heartbeat timeout
// (workflows/rollout): a cut-off worker's model call is timed out by
// Temporal after it.
const modelHeartbeatTimeout = 10 * time.Second

// isNetnsCase says whether point runs A in a network namespace.
func isNetnsCase(point string) bool {
	return point == netnsPartitionMidTurn || point == netnsPartitionDuringPrepare
}

// unsupported says why case mc cannot run on this machine, or is nil.
func (mc matrixCase) unsupported() error {
	if mc.flow == flowNet && isNetnsCase(mc.point) {
		return netns.Unsupported()
	}
	return nil
}

// netnsFlow runs a partition case: A moves into a namespace, two workers
// run the set, and the link is cut at the case's point.
func (s *matrixStack) netnsFlow(ctx context.Context, mc matrixCase) {
	s.moveIntoNetns(ctx)
	metrics := []string{s.startMetricsWorker(), s.startMetricsWorker()}
	s.submitAll(ctx)
	s.waitMidFlight(ctx)
	cut := func() { require.NoError(s.t, s.ns.Cut(ctx)) }
	heal := func() { require.NoError(s.t, s.ns.Heal(ctx)) }
	switch mc.point {
	case netnsPartitionMidTurn:
		s.netnsMidTurn(ctx, metrics, cut, heal)
	case netnsPartitionDuringPrepare:
		s.hungCheckpoint(ctx, mc.point, cut, heal)
		s.waitAMoves(ctx, time.Now())
	}
}

// moveIntoNetns replaces environment server A (nothing has run on it yet)
// by one in a new namespace, and lets the workers reach it there with the
// network cases' liveness settings. The namespace goes at the test's end,
// after A.
func (s *matrixStack) moveIntoNetns(ctx context.Context) {
	n, err := netns.New(ctx)
	require.NoError(s.t, err)
	s.ns = n
	launch := s.c.launch
	s.t.Cleanup(func() {
		for _, p := range launch.Live("envserver") {
			p.Kill()
		}
		assert.NoError(s.t, n.Close(), "remove network namespace %s", n.Name)
	})
	s.c.killProc("envserver")
	s.c.envURL = "http://" + n.NsAddr + ":0"
	bin, args := n.Wrap(filepath.Join(bins.dir, "envserver"), nil)
	s.c.startEnvProcess("envserver", bin, args)
	s.workerEnv = append(append(s.workerEnv, netLiveness...),
		workers.EnvAllowedParticipants+"="+stack.Loopback+",http://"+n.NsAddr+":*")
	s.note("A in network namespace %s at %s", n.Name, s.c.envURL)
}

// netnsMidTurn cuts A's link until an environment call of a turn has
// failed on the partition and netnsHold has passed, heals it, and waits
// until A's rollouts move.
func (s *matrixStack) netnsMidTurn(ctx context.Context, metrics []string, cut, heal func()) {
	cut()
	cutAt := time.Now()
	var seen string
	s.c.waitFor("an environment call failing on the partition", nil, 2*time.Minute, func() bool {
		if seen == "" {
			seen = failedEnvCalls(metrics)
		}
		return seen != "" && time.Since(cutAt) > netnsHold
	})
	s.note("A's link down mid-turn for %s, until %s", time.Since(cutAt).Round(100*time.Millisecond), firstLine(seen, 140))
	heal()
	s.waitAMoves(ctx, time.Now())
}

// waitAMoves waits until a rollout on A applies an operation after the heal
// (or A has none left to run), and logs how long that took.
func (s *matrixStack) waitAMoves(ctx context.Context, healedAt time.Time) {
	start, open := s.revisionsOnA(ctx)
	if open == 0 {
		s.note("link healed; no rollout on A left to run")
		return
	}
	s.c.waitFor("a rollout on A moving after the heal", nil, 3*time.Minute, func() bool {
		now, open := s.revisionsOnA(ctx)
		return now > start || open == 0
	})
	took := time.Since(healedAt)
	s.note("link healed; A's rollouts moved %s later", took.Round(100*time.Millisecond))
	s.t.Logf("measured bound: heal to A's rollouts moving again: %s", took.Round(100*time.Millisecond))
}

// revisionsOnA sums the revisions of the rollouts on A and counts those
// not finished.
func (s *matrixStack) revisionsOnA(ctx context.Context) (sum int64, open int) {
	for i := 0; i < matrixCount; i += 2 {
		info, err := s.c.dataClient(s.c.envURL).Session(ctx, fmt.Sprintf("%s-%04d", matrixSet, i))
		if err != nil {
			open++
			continue
		}
		sum += info.Revision
		if !info.Retired {
			open++
		}
	}
	return sum, open
}

// frontTemporal puts a proxy in front of Temporal and returns the entry
// that points a worker at it.
func (s *matrixStack) frontTemporal() []string {
	p, err := s.net.tp.Front("temporal", s.c.hostPort)
	require.NoError(s.t, err)
	s.net.temporal = p
	return []string{"TEMPORAL_ADDRESS=" + p.URL}
}

// cutWorkerFromTemporal hangs the first worker's link to Temporal (no byte
// passes, nothing is closed) until Temporal has timed out one more task
// (a workflow task on the cut worker's sticky queue, or an activity's
// heartbeat) and a model call's heartbeat timeout has passed; then heals it.
func (s *matrixStack) cutWorkerFromTemporal(ctx context.Context) {
	before := s.timeouts(ctx)
	require.NoError(s.t, s.net.temporal.Hang())
	cutAt := time.Now()
	var after map[string]int
	var firstAt time.Duration
	s.c.waitFor("Temporal timing out the cut-off worker's tasks", nil, 3*time.Minute, func() bool {
		after = s.timeouts(ctx)
		if firstAt == 0 && total(after) > total(before) {
			firstAt = time.Since(cutAt)
		}
		return firstAt > 0 && time.Since(cutAt) > modelHeartbeatTimeout
	})
	held := time.Since(cutAt)
	require.NoError(s.t, s.net.temporal.Heal())
	s.note("worker 1 cut off from Temporal for %s; its work moved after %s (timed out: %s)",
		held.Round(100*time.Millisecond), firstAt.Round(100*time.Millisecond), describeTimeouts(before, after))
	s.t.Logf("measured bound: a worker cut off from Temporal held its work %s", firstAt.Round(100*time.Millisecond))
}

// timeouts counts the set's task time-outs by event type.
func (s *matrixStack) timeouts(ctx context.Context) map[string]int {
	out := map[string]int{}
	for i := range matrixCount {
		it := s.c.client.GetWorkflowHistory(ctx, rollout.WorkflowID(fmt.Sprintf("%s-%04d", matrixSet, i)), "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		for it.HasNext() {
			ev, err := it.Next()
			if err != nil {
				break
			}
			switch t := ev.GetEventType(); t {
			case enumspb.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT, enumspb.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT:
				out[t.String()]++
			}
		}
	}
	return out
}

func total(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// describeTimeouts lists the time-outs counted since before.
func describeTimeouts(before, after map[string]int) string {
	var parts []string
	for t, n := range after {
		if d := n - before[t]; d > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", d, t))
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

// logUnfinished logs, for each rollout of the set not yet holding its
// result, its phase, pending activities and last history events: what a
// failed case's rollouts were waiting for.
func (s *matrixStack) logUnfinished() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range matrixCount {
		id := rollout.WorkflowID(fmt.Sprintf("%s-%04d", matrixSet, i))
		var st rollout.Status
		if v, err := s.c.client.QueryWorkflow(ctx, id, "", rollout.QueryStatus); err == nil && v.Get(&st) == nil && st.Phase == rollout.PhaseAwaitingAck {
			continue
		}
		var b strings.Builder
		fmt.Fprintf(&b, "%s unfinished: phase %q turn %d", id, st.Phase, st.Boundary.Turn)
		if d, err := s.c.client.DescribeWorkflow(ctx, id, ""); err == nil {
			for _, pa := range d.RawResponse.GetPendingActivities() {
				fmt.Fprintf(&b, "\n  pending %s attempt %d state %s last failure %q", pa.GetActivityType().GetName(), pa.GetAttempt(), pa.GetState(), pa.GetLastFailure().GetMessage())
			}
		}
		var events []string
		it := s.c.client.GetWorkflowHistory(ctx, id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		for it.HasNext() {
			ev, err := it.Next()
			if err != nil {
				break
			}
			events = append(events, fmt.Sprintf("%d %s %s %s", ev.GetEventId(), ev.GetEventTime().AsTime().Format("15:04:05.000"), ev.GetEventType(), firstLine(fmt.Sprint(ev.GetAttributes()), 300)))
		}
		if len(events) > 25 {
			events = events[len(events)-25:]
		}
		fmt.Fprintf(&b, "\n  last events:\n  %s", strings.Join(events, "\n  "))
		s.t.Log(b.String())
	}
}
