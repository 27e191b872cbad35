package conformance

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/participants/protocol"
)

// checkCapabilities: R17. The content a coordinator needs: component,
// schema version, a name, every feature it relies on, and the hosted
// environments as /v1/envs declares them.
func checkCapabilities(ctx context.Context, k *kit) (string, error) {
	caps, err := k.capabilities(ctx)
	if err != nil {
		return "", err
	}
	if err := protocol.CheckCapabilities(caps); err != nil {
		return "", fmt.Errorf("a coordinator refuses this participant: capabilities %v", err)
	}
	if caps.Phase != protocol.PhaseIdle || caps.CheckpointID != "" || caps.RestoreID != "" {
		return "", fmt.Errorf("capabilities report phase %q, checkpoint %q, restore %q; want idle and no session, as status says", caps.Phase, caps.CheckpointID, caps.RestoreID)
	}
	a, err := k.do(ctx, protocol.RouteEnvs, "", k.dataAuth(), nil)
	if err != nil {
		return "", err
	}
	var specs []envs.Spec
	if err := decode("GET /v1/envs", a, &specs); err != nil {
		return "", err
	}
	want := make([]protocol.EnvCapability, 0, len(specs))
	for _, sp := range specs {
		want = append(want, protocol.EnvCapability{Name: sp.Name, Mode: envs.EffectiveMode(sp.Mode), Style: sp.Style})
	}
	sort.Slice(want, func(i, j int) bool { return want[i].Name < want[j].Name })
	if !reflect.DeepEqual(caps.Envs, want) {
		return "", fmt.Errorf("capabilities list the environments %+v; /v1/envs declares %+v (name, effective mode, style, ordered by name)", caps.Envs, want)
	}
	return fmt.Sprintf("component %s, schema_version %d, name %q, features %v (all %d a coordinator needs), envs %v as /v1/envs declares them, phase idle",
		caps.Component, caps.SchemaVersion, caps.Name, caps.Features, len(protocol.RequiredFeatures()), caps.Envs), nil
}

// checkSessionIDs: R18. The live rollback under the checkpoint's own id
// (the default restore id) installs; the id is then retired as a restore;
// the same checkpoint restores again under a new restore id; resume names
// its session.
func checkSessionIDs(ctx context.Context, k *kit) (string, error) {
	id := k.rollout("r18")
	ckpt, again := k.checkpointID("k18"), k.checkpointID("k18-again")
	if _, err := k.began(ctx, id, 2); err != nil {
		return "", err
	}
	_, _, loc, err := k.cut(ctx, "k18")
	if err != nil {
		return "", err
	}
	if _, err := k.operate(ctx, k.opReq(id, 0, 3, 2)); err != nil { // progress after the cut
		return "", err
	}
	rollback := protocol.RestoreRequest{CheckpointID: ckpt, Location: loc, Attempts: map[string]int{id: 1}}
	res, a, err := k.restore(ctx, rollback)
	if err != nil {
		return "", err
	}
	if a.status != http.StatusOK {
		return "", fmt.Errorf("the live rollback: a restore of checkpoint %s under its own id (no restore_id) after that checkpoint was resumed answered %s, want 200: "+
			"the id of a checkpoint this participant took may open one restore session of it (R18); `starter restore --id k` sends exactly this", ckpt, a)
	}
	if m, ok := member(res.Restored, id); !ok || m.Attempt != 1 || m.Revision != 2 {
		return "", fmt.Errorf("the live rollback answered restored %+v, want %s at attempt 1, revision 2", res.Restored, id)
	}
	if _, err := k.resume(ctx, ckpt, ckpt); err != nil {
		return "", err
	}
	if err := k.wantSession(ctx, id, 1, 2, false); err != nil {
		return "", fmt.Errorf("after the live rollback: %w", err)
	}
	rollback.Attempts = map[string]int{id: 2}
	if _, a, err = k.restore(ctx, rollback); err != nil || want("a second restore under the checkpoint's id, resumed already", a, http.StatusConflict, protocol.CodeStaleCheckpoint) != nil {
		return "", fmt.Errorf("a second restore of %s under its own id answered %s (%v), want 409 stale_checkpoint: the id is retired as a restore", ckpt, a, err)
	}
	rollback.RestoreID = again
	if res, a, err = k.restore(ctx, rollback); err != nil || a.status != http.StatusOK {
		return "", fmt.Errorf("a restore of %s again under a new restore id answered %s (%v), want 200", ckpt, a, err)
	}
	if m, ok := member(res.Restored, id); !ok || m.Attempt != 2 {
		return "", fmt.Errorf("the restore under a new restore id answered restored %+v, want %s at attempt 2", res.Restored, id)
	}
	a, err = k.control(ctx, protocol.RouteControlResume, "", protocol.ResumeRequest{CheckpointID: k.checkpointID("k18-other"), RestoreID: again})
	if err != nil {
		return "", err
	}
	if err := want("a resume of the restore session naming another checkpoint", a, http.StatusConflict, protocol.CodeCheckpointConflict); err != nil {
		return "", err
	}
	if _, err := k.resume(ctx, ckpt, again); err != nil {
		return "", err
	}
	if _, a, err = k.restore(ctx, rollback); err != nil || want("a restore under a resumed restore id", a, http.StatusConflict, protocol.CodeStaleCheckpoint) != nil {
		return "", fmt.Errorf("a restore under the resumed restore id %s answered %s (%v), want 409 stale_checkpoint", again, a, err)
	}
	return "checkpoint taken and resumed, then restored on this live participant under its own id (no restore_id, the default rollback) → 200, attempt 1 at the cut's revision; that id again → 409 stale_checkpoint; the same checkpoint under a new restore id → 200, attempt 2; its resume naming another checkpoint → 409 checkpoint_conflict; the resumed restore id again → 409 stale_checkpoint", nil
}

// checkControlOrder: R19. invalid_phase for an operation of the session
// in the wrong phase; a prepare's replay ignores the deadline;
// location_conflict against checkpoint_conflict; the resume of an id never
// seen retires it.
func checkControlOrder(ctx context.Context, k *kit) (string, error) {
	id := k.rollout("r19")
	ckpt := k.checkpointID("k19")
	if _, err := k.began(ctx, id, 1); err != nil {
		return "", err
	}
	a, err := k.control(ctx, protocol.RouteControlCommit, "", protocol.CommitRequest{CheckpointID: ckpt, Location: k.location("k19")})
	if err != nil {
		return "", err
	}
	if err := want("a commit before its prepare", a, http.StatusConflict, protocol.CodeInvalidPhase); err != nil {
		return "", err
	}
	if err := k.wantPhase(ctx, protocol.PhaseIdle, protocol.AdmissionOpen); err != nil {
		return "", err
	}
	_, first, err := k.prepare(ctx, ckpt)
	if err != nil {
		return "", err
	}
	a, err = k.control(ctx, protocol.RouteControlPrepare, "", protocol.PrepareRequest{CheckpointID: ckpt, Deadline: future().Add(time.Hour)})
	if err != nil {
		return "", err
	}
	if err := want("a prepare repeated with another deadline", a, http.StatusOK, ""); err != nil || string(a.body) != string(first.body) {
		return "", fmt.Errorf("a prepare repeated with another deadline answered %s, want the recorded answer %s (the deadline is not compared)", a, first)
	}
	evidence, err := k.locationConflict(ctx, ckpt)
	if err != nil {
		return "", err
	}
	if _, err := k.resume(ctx, ckpt, ""); err != nil {
		return "", err
	}
	never := k.checkpointID("k19-never")
	if _, err := k.resume(ctx, never, ""); err != nil {
		return "", fmt.Errorf("the resume of an id never seen (an abort before the prepare arrived): %w", err)
	}
	a, err = k.control(ctx, protocol.RouteControlPrepare, "", protocol.PrepareRequest{CheckpointID: never, Deadline: future()})
	if err != nil {
		return "", err
	}
	if err := want("a prepare after its abort", a, http.StatusConflict, protocol.CodeStaleCheckpoint); err != nil {
		return "", err
	}
	return "a commit before its prepare → 409 invalid_phase, phase idle; prepare repeated with another deadline → the recorded answer; " + evidence +
		"; the resume of an id never seen → 200, then its prepare → 409 stale_checkpoint", nil
}

// locationConflict commits prepared checkpoint ckpt into a location
// holding a file of its own (409 location_conflict, nothing removed, still
// prepared), then elsewhere (200), then to the first location again (409
// checkpoint_conflict: other arguments).
func (k *kit) locationConflict(ctx context.Context, ckpt string) (string, error) {
	busy := k.location("k19-busy")
	if err := os.MkdirAll(busy, 0o755); err != nil {
		return "", fmt.Errorf("the kit's checkpoint directory: %w", err)
	}
	stray := filepath.Join(busy, "not-a-checkpoint.txt")
	if err := os.WriteFile(stray, []byte("the participant must not remove this\n"), 0o644); err != nil {
		return "", fmt.Errorf("the kit's checkpoint directory: %w", err)
	}
	a, err := k.control(ctx, protocol.RouteControlCommit, "", protocol.CommitRequest{CheckpointID: ckpt, Location: busy})
	if err != nil {
		return "", err
	}
	if err := want("a commit into a location holding a file of its own", a, http.StatusConflict, protocol.CodeLocationConflict); err != nil {
		return "", err
	}
	if _, err := os.Stat(stray); err != nil {
		return "", fmt.Errorf("a commit refused location_conflict removed %s: %v", stray, err)
	}
	if err := k.wantPhase(ctx, protocol.PhasePrepared, protocol.AdmissionClosed); err != nil {
		return "", fmt.Errorf("after location_conflict: %w", err)
	}
	if _, err := k.commit(ctx, ckpt, k.location("k19")); err != nil {
		return "", fmt.Errorf("a commit elsewhere after location_conflict: %w", err)
	}
	a, err = k.control(ctx, protocol.RouteControlCommit, "", protocol.CommitRequest{CheckpointID: ckpt, Location: busy})
	if err != nil {
		return "", err
	}
	if err := want("a commit to another location after the commit succeeded", a, http.StatusConflict, protocol.CodeCheckpointConflict); err != nil {
		return "", err
	}
	return "a commit into a location holding a file of its own → 409 location_conflict (the file kept, still prepared), then elsewhere → 200, then to the first location again → 409 checkpoint_conflict", nil
}

// checkRestoreAnswer: R20. Every rollout of the attempt map exactly once,
// as restored, restarted or fenced (dropped when the participant held a
// session); other sessions of the checkpoint untouched; the restore id
// replays with the same arguments and conflicts with others.
func checkRestoreAnswer(ctx context.Context, k *kit) (string, error) {
	live, verified, other := k.rollout("r20-live"), k.rollout("r20-verified"), k.rollout("r20-other")
	after, never := k.rollout("r20-after"), k.rollout("r20-never")
	for _, id := range []string{live, verified, other} {
		if _, err := k.began(ctx, id, 1); err != nil {
			return "", err
		}
	}
	if _, err := k.verify(ctx, verified, 0, 1); err != nil {
		return "", err
	}
	_, com, loc, err := k.cut(ctx, "k20")
	if err != nil {
		return "", err
	}
	if _, err := k.began(ctx, after, 1); err != nil { // started after the cut
		return "", err
	}
	ckpt, rid := k.checkpointID("k20"), k.checkpointID("k20-restore")
	req := protocol.RestoreRequest{CheckpointID: ckpt, RestoreID: rid, Location: loc, Attempts: map[string]int{live: 1, verified: 1, after: 1, never: 3}}
	res, a, err := k.restore(ctx, req)
	if err != nil || a.status != http.StatusOK {
		return "", fmt.Errorf("restore: %s %v", a, err)
	}
	want := protocol.RestoreResponse{Phase: protocol.PhaseRestored, CheckpointID: ckpt, RestoreID: rid, ManifestDigest: com.ManifestDigest,
		Restored: []protocol.SessionSummary{
			{RolloutID: live, Attempt: 1, Revision: 1, Env: k.cfg.Env, Mode: envs.ModeExportRestore},
			{RolloutID: verified, Attempt: 1, Revision: 1, Env: k.cfg.Env, Mode: envs.ModeExportRestore, Retired: true},
		},
		Restarted: []protocol.SessionSummary{},
		Fenced:    []protocol.FenceSummary{{RolloutID: after, Attempt: 1, Dropped: true}, {RolloutID: never, Attempt: 3}},
		Untouched: []string{other},
	}
	// Every other session of the cut (the kit's earlier rollouts) is
	// untouched too; none the map names may be.
	if !slices.Contains(res.Untouched, other) {
		return "", fmt.Errorf("restore answered untouched %v, want %s among them (in the checkpoint, not named)", res.Untouched, other)
	}
	for _, u := range res.Untouched {
		if _, named := req.Attempts[u]; named {
			return "", fmt.Errorf("restore answered %s untouched, but the attempt map names it", u)
		}
	}
	res.Untouched = want.Untouched
	sortAnswer(&res)
	sortAnswer(&want)
	if !reflect.DeepEqual(res, want) {
		return "", fmt.Errorf("restore answered %+v, want %+v", res, want)
	}
	if err := k.restoreIDReplay(ctx, req, a); err != nil {
		return "", err
	}
	if _, err := k.resume(ctx, ckpt, rid); err != nil {
		return "", err
	}
	if err := k.restoredWorld(ctx, live, other, after, never); err != nil {
		return "", err
	}
	return "restore of a cut holding a live, a verified and an unnamed session, naming also one started after the cut and one never seen → restored both at attempt 1, fenced the later one (dropped) and the unseen one at attempt 3, the unnamed one untouched, manifest digest the commit's; the same restore id repeated → the same answer, with another attempt map → 409 checkpoint_conflict, after its resume → 409 stale_checkpoint; the sessions are as answered", nil
}

// restoreIDReplay checks a restore id's replay and conflict while its
// session is active and its staleness after resume (the caller resumes).
func (k *kit) restoreIDReplay(ctx context.Context, req protocol.RestoreRequest, first answer) error {
	_, a, err := k.restore(ctx, req)
	if err != nil {
		return err
	}
	if a.status != http.StatusOK || string(a.body) != string(first.body) {
		return fmt.Errorf("the same restore repeated answered %s, want the recorded answer %s", a, first)
	}
	other := req
	other.Attempts = map[string]int{}
	for id, n := range req.Attempts {
		other.Attempts[id] = n + 1
	}
	if _, a, err = k.restore(ctx, other); err != nil {
		return err
	}
	return want("the same restore id with another attempt map", a, http.StatusConflict, protocol.CodeCheckpointConflict)
}

// restoredWorld checks the sessions after R20's restore was resumed, and
// that its restore id is then stale.
func (k *kit) restoredWorld(ctx context.Context, live, other, after, never string) error {
	if err := k.wantSession(ctx, live, 1, 1, false); err != nil {
		return err
	}
	if err := k.wantSession(ctx, other, 0, 1, false); err != nil {
		return fmt.Errorf("the untouched session: %w", err)
	}
	if err := k.wantNoSession(ctx, after); err != nil {
		return fmt.Errorf("the fenced session started after the cut must be dropped: %w", err)
	}
	for _, c := range []struct {
		what string
		id   string
	}{{"a start of attempt 0 of the rollout fenced after the cut", after}, {"a start of attempt 0 of the rollout never seen, fenced at 3", never}} {
		if err := k.refused(ctx, c.what, protocol.RouteStart, "", k.startReq(c.id, 0), http.StatusConflict, protocol.CodeStaleAttempt); err != nil {
			return err
		}
	}
	got, a, err := k.authorise(ctx, never, 3)
	if err != nil || a.status != http.StatusOK || got.Changed || got.Fence != 3 {
		return fmt.Errorf("authorise of the fenced attempt 3 answered %s %+v (%v), want 200, fence 3, changed:false", a, got, err)
	}
	return nil
}

// sortAnswer orders a restore answer's lists by rollout id, so two
// answers compare whatever order a participant lists them in.
func sortAnswer(r *protocol.RestoreResponse) {
	bySummary := func(a, b protocol.SessionSummary) int { return strings.Compare(a.RolloutID, b.RolloutID) }
	slices.SortFunc(r.Restored, bySummary)
	slices.SortFunc(r.Restarted, bySummary)
	slices.SortFunc(r.Fenced, func(a, b protocol.FenceSummary) int { return strings.Compare(a.RolloutID, b.RolloutID) })
	slices.Sort(r.Untouched)
	if r.Restarted == nil {
		r.Restarted = []protocol.SessionSummary{}
	}
}

// capabilities asks the participant for its capabilities and decodes them.
func (k *kit) capabilities(ctx context.Context) (protocol.Capabilities, error) {
	var caps protocol.Capabilities
	a, err := k.control(ctx, protocol.RouteControlCapabilities, "", nil)
	if err != nil {
		return caps, err
	}
	return caps, decode("capabilities", a, &caps)
}
