package soak

import (
	"context"
	"fmt"
	"sync"
	"time"

	enumspb "go.temporal.io/api/enums/v1"

	"github.com/turnstile-rl/turnstile/internal/retention"
	"github.com/turnstile-rl/turnstile/internal/storage"
	"github.com/turnstile-rl/turnstile/trainer"
)

// trainerEvery is how often the soak's trainer looks at its checkpoint
// schedule: what fired, what committed.
const trainerEvery = 15 * time.Second

// checkpointState is what the trainer knows of the schedule's fires.
type checkpointState struct {
	mu      sync.Mutex
	final   map[string]bool // fire (workflow ID) → ended (committed or failed)
	running bool            // a fire still runs
	tag     int             // the schedule's tag is step-<tag>
	gcDue   int             // commits since the last garbage collection
	pinned  bool            // the first step is pinned
	// unhandled are commits seen (by the trainer or by killable) that
	// the trainer has not reacted to yet: whoever looks first, the
	// trainer pins, tags and collects for each.
	unhandled []string
}

// tagName is the trainer step's tag.
func tagName(step int) string { return fmt.Sprintf("step-%d", step) }

// setUp is what the trainer does once when it submits the set: the set's
// checkpoint schedule (with retention and the first step's tag) and its
// watchdog (automatic recovery of its environment servers).
func (r *run) setUp(ctx context.Context) error {
	r.cps.final, r.cps.tag = map[string]bool{}, 1
	parts := r.st.envURLs()
	if _, err := r.ts.CreateSchedule(ctx, trainer.ScheduleRequest{Set: r.set, Root: r.root, Participants: parts,
		Every: r.cfg.CheckpointEvery, Timeout: r.cfg.CheckpointTimeout, Tag: tagName(1), Keep: r.cfg.Keep}); err != nil {
		return err
	}
	_, err := r.ts.StartWatchdog(ctx, r.set, trainer.AutoRecover{Participants: parts, Root: r.root,
		Every: r.cfg.WatchEvery, Timeout: r.cfg.WatchTimeout, Misses: r.cfg.WatchMisses, Bound: r.cfg.WatchBound})
	r.cfg.Logf("checkpoint schedule every %s keeping %d, watchdog on %v (bound %s)", r.cfg.CheckpointEvery, r.cfg.Keep, parts, r.cfg.WatchBound)
	return err
}

// trainerStep looks at the schedule: new fires, commits and failures. On
// the first commit the trainer pins its step; every TagEvery commits it
// moves the schedule's tag to the next step; every GCEvery commits it
// collects garbage. Its errors are logged: the trainer tries again.
func (r *run) trainerStep(ctx context.Context) error {
	if err := r.refreshCheckpoints(ctx); err != nil {
		r.cfg.Logf("%s trainer: %v", r.since(), err)
	}
	r.cps.mu.Lock()
	commits := r.cps.unhandled
	r.cps.unhandled = nil
	r.cps.mu.Unlock()
	for _, id := range commits {
		r.committed(ctx, id)
	}
	return nil
}

// refreshCheckpoints reads the schedule's fires and records those newly
// committed, for the trainer to react to.
func (r *run) refreshCheckpoints(ctx context.Context) error {
	sch, err := r.ts.DescribeSchedule(ctx, r.set)
	if err != nil {
		return err
	}
	r.cps.mu.Lock()
	defer r.cps.mu.Unlock()
	var commits []string
	running := false
	for _, id := range sch.Recent {
		if r.cps.final[id] {
			continue
		}
		d, err := r.st.tc.DescribeWorkflow(ctx, id, "")
		if err != nil {
			return fmt.Errorf("describe %s: %w", id, err)
		}
		switch st := d.RawResponse.GetWorkflowExecutionInfo().GetStatus(); st {
		case enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING:
			running = true
		case enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED:
			r.cps.final[id] = true
			commits = append(commits, id)
		default:
			r.cps.final[id] = true
			r.mu.Lock()
			r.report.Checkpoints.Failed = append(r.report.Checkpoints.Failed, id)
			r.mu.Unlock()
			r.cfg.Logf("%s checkpoint %s ended %s", r.since(), id, st)
		}
	}
	r.cps.running = running
	r.cps.unhandled = append(r.cps.unhandled, commits...)
	r.mu.Lock()
	r.report.Checkpoints.Fired, r.report.Checkpoints.Skipped = sch.Fired, sch.Skipped
	r.report.Checkpoints.Committed = append(r.report.Checkpoints.Committed, commits...)
	r.mu.Unlock()
	return nil
}

// committed is the trainer's reaction to one committed checkpoint.
func (r *run) committed(ctx context.Context, id string) {
	r.mu.Lock()
	n := len(r.report.Checkpoints.Committed)
	r.mu.Unlock()
	r.cfg.Logf("%s checkpoint %s committed (%d so far)", r.since(), id, n)
	r.cps.mu.Lock()
	pin := !r.cps.pinned
	r.cps.pinned = true
	r.cps.mu.Unlock()
	if pin {
		r.pin(ctx, tagName(1))
	}
	r.cps.mu.Lock()
	r.cps.gcDue++
	gc := r.cps.gcDue >= r.cfg.GCEvery
	if gc {
		r.cps.gcDue = 0
	}
	next := 0
	if n%r.cfg.TagEvery == 0 {
		r.cps.tag++
		next = r.cps.tag
	}
	r.cps.mu.Unlock()
	if next > 0 {
		if err := r.ts.SetScheduleTag(ctx, r.set, tagName(next)); err != nil {
			r.cfg.Logf("%s trainer: tag %s: %v", r.since(), tagName(next), err)
		} else {
			r.mu.Lock()
			r.report.Checkpoints.Tags++
			r.mu.Unlock()
		}
	}
	if gc {
		r.gc(ctx)
	}
}

// pin pins the checkpoints tagged tag, as a trainer keeps what it must
// be able to roll back to.
func (r *run) pin(ctx context.Context, tag string) {
	var o storage.Opener
	defer o.Close()
	root, err := o.Open(ctx, r.root)
	if err == nil {
		var ids []string
		if ids, err = retention.Pin(ctx, root, r.set, tag); err == nil {
			r.mu.Lock()
			r.report.Checkpoints.Pinned = append(r.report.Checkpoints.Pinned, ids...)
			r.mu.Unlock()
			r.cfg.Logf("%s trainer pinned %v", r.since(), ids)
			return
		}
	}
	r.problem("pin %s: %v", tag, err)
}

// gc runs one garbage collection: the set's retention, the mark and the
// sweep of the transcript store.
func (r *run) gc(ctx context.Context) {
	res, err := r.ts.GC(ctx, trainer.GCRequest{Roots: []string{r.root}, Set: r.set, Keep: r.cfg.Keep,
		Transcripts: r.st.store, Grace: r.cfg.GCGrace}, nil)
	g := GC{At: r.since(), CheckpointsDeleted: len(res.CheckpointsDeleted), CheckpointBytesKept: res.CheckpointBytesKept,
		CheckpointBytesFreed: res.CheckpointBytesFreed, BlobsKept: res.Sweep.KeptBlobs, BlobsFreed: res.Sweep.FreedBlobs,
		BlobBytesKept: res.Sweep.KeptBytes, BlobBytesFreed: res.Sweep.FreedBytes, BlobsMarked: res.Marked, BlobsYoung: res.Sweep.Young}
	if err != nil {
		// A mark that met a worker killed a moment ago stops before it
		// deletes anything; the next collection runs it again.
		g.Err = err.Error()
	}
	r.mu.Lock()
	r.report.Checkpoints.GCs = append(r.report.Checkpoints.GCs, g)
	r.mu.Unlock()
	r.cfg.Logf("%s trainer gc: checkpoints %d deleted (%s freed, %s kept), blobs %d freed (%s), %d kept (%s; %d referenced, %d within the grace) %s", r.since(),
		g.CheckpointsDeleted, mib(g.CheckpointBytesFreed), mib(g.CheckpointBytesKept), g.BlobsFreed, mib(g.BlobBytesFreed), g.BlobsKept, mib(g.BlobBytesKept), g.BlobsMarked, g.BlobsYoung, g.Err)
}

// killable reports whether an environment server may be killed now: a
// checkpoint has committed and none runs.
func (r *run) killable() bool {
	if err := r.refreshCheckpoints(context.Background()); err != nil {
		return false
	}
	r.cps.mu.Lock()
	defer r.cps.mu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	return !r.cps.running && len(r.report.Checkpoints.Committed) > 0
}

// declarations counts the watchdog's declarations of server.
func (r *run) declarations(ctx context.Context, server string) (int, error) {
	st, _, err := r.ts.WatchdogStatus(ctx, r.set)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, d := range st.State.Declarations {
		if d.Server == server {
			n++
		}
	}
	return n, nil
}

// recovered reports whether the watchdog's declaration of server after
// the first skip has been recovered; a failed recovery is a problem the
// watchdog tries again, so it is not done.
func (r *run) recovered(ctx context.Context, server string, skip int) (bool, error) {
	st, _, err := r.ts.WatchdogStatus(ctx, r.set)
	if err != nil {
		return false, err
	}
	for _, d := range st.State.Declarations {
		if d.Server != server {
			continue
		}
		if skip > 0 {
			skip--
			continue
		}
		if !d.RecoveredAt.IsZero() && d.Error == "" {
			return true, nil
		}
	}
	return false, nil
}

// tearDown is what the trainer does at the end: a last look at the
// schedule, its deletion (its checkpoints stay), the retained checkpoints,
// and the watchdog's declarations timed against the kills.
func (r *run) tearDown(ctx context.Context) {
	if err := r.trainerStep(ctx); err != nil {
		r.problem("trainer: %v", err)
	}
	if err := r.ts.DeleteSchedule(ctx, r.set); err != nil {
		r.problem("delete schedule: %v", err)
	}
	var o storage.Opener
	defer o.Close()
	root, err := o.Open(ctx, r.root)
	if err == nil {
		var cps []retention.Checkpoint
		if cps, err = retention.List(ctx, root, r.set); err == nil {
			for _, c := range cps {
				r.report.Checkpoints.Kept = append(r.report.Checkpoints.Kept, c.ID)
			}
		}
	}
	if err != nil {
		r.problem("list kept checkpoints: %v", err)
	}
	st, ok, err := r.ts.WatchdogStatus(ctx, r.set)
	if err != nil || !ok {
		r.problem("watchdog status: %v (found %t)", err, ok)
		return
	}
	matched := map[int]bool{}
	for _, d := range st.State.Declarations {
		det := Detection{Server: d.Server, Recovered: d.Recovered, Err: d.Error, Retried: d.Tries}
		if k := r.killBefore(d.Server, d.DeclaredAt, matched); k != nil {
			det.Detect = d.DeclaredAt.Sub(k.at)
			if !d.RecoveredAt.IsZero() {
				det.Recover = d.RecoveredAt.Sub(k.at)
			}
		}
		r.report.Detections = append(r.report.Detections, det)
	}
	if len(r.report.Detections) < len(r.report.EnvKills) {
		r.problem("%d environment server kills, %d declared dead by the watchdog", len(r.report.EnvKills), len(r.report.Detections))
	}
}

// killBefore is the last kill of server before t that no earlier
// declaration explained (it marks it in matched), nil when none: a second
// declaration of the same server (a partition declared dead, a recovery
// tried again) is not timed against an old kill.
func (r *run) killBefore(server string, t time.Time, matched map[int]bool) *EnvKill {
	kills := r.report.EnvKills
	for i := len(kills) - 1; i >= 0; i-- {
		if kills[i].Server != server || kills[i].at.After(t) {
			continue
		}
		if matched[i] {
			return nil
		}
		matched[i] = true
		return &kills[i]
	}
	return nil
}
