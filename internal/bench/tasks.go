package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"google.golang.org/protobuf/encoding/protojson"
)

// TaskWaits is where a throughput rollout's time goes, read from the
// histories of a sample of its runs (medians, milliseconds): how long
// workflow and activity tasks waited between being scheduled and picked up
// by a worker (queueing in the server or for a poller), and how long they
// ran once picked up. Local activities run inside a workflow task.
type TaskWaits struct {
	WorkflowScheduleToStart Pair `json:"workflow_task_schedule_to_start_ms"`
	WorkflowStartToClose    Pair `json:"workflow_task_start_to_close_ms"`
	ActivityScheduleToStart Pair `json:"activity_schedule_to_start_ms"`
	ActivityStartToClose    Pair `json:"activity_start_to_close_ms"`
	// Sampled counts the runs read per kind.
	Sampled int `json:"sampled"`
}

// taskSample bounds how many histories the bench reads per kind.
const taskSample = 64

// runTimes is one run of a throughput scenario as its client saw it: when
// the start was called and returned, and when its result came.
type runTimes struct {
	id, runID             string
	called, started, done time.Time
}

// taskDurations collects the four spans of one kind's sampled runs.
type taskDurations struct {
	wfWait, wfRun, actWait, actRun []float64
	// gaps sums the time between consecutive events by their types.
	gaps map[string]float64
	prev *historypb.HistoryEvent
	// Client-side spans per run: the start call, from the call to the
	// first event, the history, and from the last event to the result.
	startCall, toFirst, span, toResult []float64
}

// readTasks adds the task spans of one run's history to d.
func (s *stack) readTasks(ctx context.Context, r runTimes, d *taskDurations) error {
	iter := s.client.GetWorkflowHistory(ctx, r.id, r.runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	at := map[int64]time.Time{}
	d.prev = nil
	var first time.Time
	for iter.HasNext() {
		ev, err := iter.Next()
		if err != nil {
			return fmt.Errorf("history of %s: %w", r.id, err)
		}
		if first.IsZero() {
			first = ev.GetEventTime().AsTime()
		}
		d.add(ev, at)
	}
	if d.prev != nil {
		last := d.prev.GetEventTime().AsTime()
		d.startCall = append(d.startCall, ms(r.started.Sub(r.called)))
		d.toFirst = append(d.toFirst, ms(first.Sub(r.called)))
		d.span = append(d.span, ms(last.Sub(first)))
		d.toResult = append(d.toResult, ms(r.done.Sub(last)))
	}
	return nil
}

// add records ev's time by event id and, for a start or a close, the span
// since the event it refers to.
func (d *taskDurations) add(ev *historypb.HistoryEvent, at map[int64]time.Time) {
	t := ev.GetEventTime().AsTime()
	at[ev.GetEventId()] = t
	if d.prev != nil {
		if d.gaps == nil {
			d.gaps = map[string]float64{}
		}
		d.gaps[shortType(d.prev)+">"+shortType(ev)] += ms(t.Sub(d.prev.GetEventTime().AsTime()))
	}
	d.prev = ev
	since := func(ref int64, dst *[]float64) {
		if t0, ok := at[ref]; ok {
			*dst = append(*dst, ms(t.Sub(t0)))
		}
	}
	switch {
	case ev.GetWorkflowTaskStartedEventAttributes() != nil:
		since(ev.GetWorkflowTaskStartedEventAttributes().GetScheduledEventId(), &d.wfWait)
	case ev.GetWorkflowTaskCompletedEventAttributes() != nil:
		since(ev.GetWorkflowTaskCompletedEventAttributes().GetStartedEventId(), &d.wfRun)
	case ev.GetActivityTaskStartedEventAttributes() != nil:
		since(ev.GetActivityTaskStartedEventAttributes().GetScheduledEventId(), &d.actWait)
	case ev.GetActivityTaskCompletedEventAttributes() != nil:
		since(ev.GetActivityTaskCompletedEventAttributes().GetStartedEventId(), &d.actRun)
	}
}

// taskWaits reads the histories of up to taskSample runs of each kind.
func (s *stack) taskWaits(ctx context.Context, runs map[kind][]runTimes) (*TaskWaits, error) {
	out := &TaskWaits{}
	for k, ids := range runs {
		var d taskDurations
		ids = evenly(ids, taskSample)
		for _, r := range ids {
			if err := s.readTasks(ctx, r, &d); err != nil {
				return nil, err
			}
		}
		set(&out.WorkflowScheduleToStart, k, median(d.wfWait))
		set(&out.WorkflowStartToClose, k, median(d.wfRun))
		set(&out.ActivityScheduleToStart, k, median(d.actWait))
		set(&out.ActivityStartToClose, k, median(d.actRun))
		out.Sampled = len(ids)
		s.logf("gaps %-9s %s", k, topGaps(d.gaps, len(ids)))
		s.logf("runs %-9s ms (median/p95/sum per run): start call %s, call to first event %s, history %s, last event to result %s",
			k, spread(d.startCall, len(ids)), spread(d.toFirst, len(ids)), spread(d.span, len(ids)), spread(d.toResult, len(ids)))
		s.logf("tasks %-9s ms (median/p95/sum per run): workflow task waited %s, ran %s; activity waited %s, ran %s (%d runs)",
			k, spread(d.wfWait, len(ids)), spread(d.wfRun, len(ids)), spread(d.actWait, len(ids)), spread(d.actRun, len(ids)), len(ids))
	}
	return out, nil
}

// spread prints the median, p95 and the sum per run of xs over runs runs.
func spread(xs []float64, runs int) string {
	var sum float64
	for _, x := range xs {
		sum += x
	}
	return fmt.Sprintf("%.0f/%.0f/%.0f", median(xs), percentile(xs, 0.95), sum/float64(max(runs, 1)))
}

func shortType(ev *historypb.HistoryEvent) string {
	return strings.TrimPrefix(ev.GetEventType().String(), "EVENT_TYPE_")
}

// topGaps lists the six largest gap sums, per run.
func topGaps(g map[string]float64, runs int) string {
	keys := make([]string, 0, len(g))
	for k := range g {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return g[keys[i]] > g[keys[j]] })
	var b strings.Builder
	for i, k := range keys {
		if i == 6 {
			break
		}
		fmt.Fprintf(&b, "%s %.0f; ", k, g[k]/float64(max(runs, 1)))
	}
	return b.String()
}

// writeTurn writes the events of turn at (from its model call to the next)
// to OUT/history-turn-<kind>.json, one line per event with its size, so
// what a turn costs in history can be read event by event.
func writeTurn(dir string, k kind, m turnMarks, at int) error {
	if at < 1 || at >= len(m.events) {
		return nil
	}
	var b strings.Builder
	for _, ev := range m.all[m.events[at-1]:m.events[at]] {
		js, err := protojson.Marshal(ev)
		if err != nil {
			return fmt.Errorf("history turn %d: %w", at, err)
		}
		fmt.Fprintf(&b, "%d\t%s\n", eventSize(ev), js)
	}
	path := filepath.Join(dir, fmt.Sprintf("history-turn-%s.jsonl", k))
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("history turn %d: %w", at, err)
	}
	return nil
}

// evenly picks at most n of runs spread over the whole list (which is in
// the order the runs finished), so a sample of a large set is not just
// its fastest runs.
func evenly(runs []runTimes, n int) []runTimes {
	if len(runs) <= n {
		return runs
	}
	out := make([]runTimes, 0, n)
	for i := 0; i < n; i++ {
		out = append(out, runs[i*len(runs)/n])
	}
	return out
}
