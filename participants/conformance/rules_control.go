package conformance

import (
	"context"
	"fmt"
	"net/http"
	"reflect"
	"strings"

	"github.com/turnstile-rl/turnstile/participants/protocol"
)

// checkAuthorise: R8. The control plane installs a start-over's attempt.
func checkAuthorise(ctx context.Context, k *kit) (string, error) {
	id, fresh := k.rollout("r8"), k.rollout("r8-new")
	if _, err := k.began(ctx, id, 1); err != nil {
		return "", err
	}
	got, a, err := k.authorise(ctx, id, 2)
	if err != nil {
		return "", err
	}
	if w := (protocol.AuthoriseResponse{RolloutID: id, Attempt: 2, Fence: 2, Changed: true, Dropped: true}); a.status != http.StatusOK || got != w {
		return "", fmt.Errorf("authorise attempt 2 of a live attempt-0 rollout answered %s %+v, want %+v", a, got, w)
	}
	if err := k.wantNoSession(ctx, id); err != nil {
		return "", fmt.Errorf("after authorise: the old attempt's session must be dropped: %w", err)
	}
	if got, a, err = k.authorise(ctx, id, 2); err != nil || a.status != http.StatusOK || got.Changed || got.Fence != 2 {
		return "", fmt.Errorf("authorise attempt 2 again answered %s %+v (%v), want 200 with changed:false, fence 2", a, got, err)
	}
	if _, a, err = k.authorise(ctx, id, 1); err != nil || want("authorise attempt 1 below the fence", a, http.StatusConflict, protocol.CodeStaleAttempt) != nil {
		return "", fmt.Errorf("authorise attempt 1 below the fence answered %s (%v), want 409 stale_attempt", a, err)
	}
	st, err := k.start(ctx, k.startReq(id, 2))
	if err != nil {
		return "", err
	}
	if st.Replayed || st.Revision != 0 {
		return "", fmt.Errorf("start of the authorised attempt 2 answered revision %d replayed %v, want a fresh episode", st.Revision, st.Replayed)
	}
	if got, a, err = k.authorise(ctx, fresh, 0); err != nil || a.status != http.StatusOK || got.Changed || got.Fence != 0 {
		return "", fmt.Errorf("authorise attempt 0 of an unseen rollout answered %s %+v (%v), want 200, changed:false, fence 0", a, got, err)
	}
	return "authorise 2 of a live attempt-0 rollout → changed, dropped (session gone); again → changed:false; 1 → 409 stale_attempt; start of 2 → fresh episode at revision 0; authorise 0 of an unseen rollout → no-op", nil
}

// checkRetire: R9. Retire ends one attempt.
func checkRetire(ctx context.Context, k *kit) (string, error) {
	id := k.rollout("r9")
	if _, err := k.began(ctx, id, 1); err != nil {
		return "", err
	}
	var ret protocol.RetireResponse
	a, err := k.control(ctx, protocol.RouteControlRetire, "", protocol.RetireRequest{RolloutID: id, Attempt: 0})
	if err != nil {
		return "", err
	}
	if err := decode("retire attempt 0", a, &ret); err != nil {
		return "", err
	}
	if ret.Fence != 1 || !ret.Discarded || ret.Pending {
		return "", fmt.Errorf("retire attempt 0 answered %+v, want fence 1, discarded, not pending", ret)
	}
	if err := k.refused(ctx, "an operate of the retired attempt 0", protocol.RouteOperate, id, k.opReq(id, 0, 2, 1),
		http.StatusConflict, protocol.CodeStaleAttempt); err != nil {
		return "", err
	}
	if err := k.wantNoSession(ctx, id); err != nil {
		return "", err
	}
	if st, err := k.start(ctx, k.startReq(id, 1)); err != nil || st.Revision != 0 || st.Replayed {
		return "", fmt.Errorf("start of attempt 1 after retiring 0: %+v, %v", st, err)
	}
	a, err = k.control(ctx, protocol.RouteControlRetire, "", protocol.RetireRequest{RolloutID: id, Attempt: 0})
	if err != nil {
		return "", err
	}
	if err := decode("retire attempt 0 again", a, &ret); err != nil {
		return "", err
	}
	if ret.Fence != 1 || ret.Discarded {
		return "", fmt.Errorf("retire of the older attempt 0 again answered %+v, want fence 1, nothing discarded", ret)
	}
	if err := k.wantSession(ctx, id, 1, 0, false); err != nil {
		return "", err
	}
	return "retire attempt 0 → fence 1, discarded; its operate → 409 stale_attempt; session gone; attempt 1 starts fresh; retiring 0 again leaves attempt 1's session alone", nil
}

// checkPhaseFence: R11.
func checkPhaseFence(ctx context.Context, k *kit) (string, error) {
	id, other := k.rollout("r11"), k.rollout("r11-new")
	c1, c2 := k.checkpointID("k11a"), k.checkpointID("k11b")
	if _, err := k.began(ctx, id, 1); err != nil {
		return "", err
	}
	prep, first, err := k.prepare(ctx, c1)
	if err != nil {
		return "", err
	}
	if m, ok := member(prep.Sessions, id); !ok || m.Attempt != 0 || m.Revision != 1 || prep.Phase != protocol.PhasePrepared {
		return "", fmt.Errorf("prepare answered phase %s and member %+v (found %v), want prepared with %s at attempt 0, revision 1", prep.Phase, m, ok, id)
	}
	if err := k.wantPhase(ctx, protocol.PhasePrepared, protocol.AdmissionClosed); err != nil {
		return "", err
	}
	before, err := k.stats(ctx)
	if err != nil {
		return "", err
	}
	if err := k.refused(ctx, "an operate while admission is closed", protocol.RouteOperate, id, k.opReq(id, 0, 2, 1),
		http.StatusServiceUnavailable, protocol.CodeParked); err != nil {
		return "", err
	}
	if err := k.refused(ctx, "a start while admission is closed", protocol.RouteStart, "", k.startReq(other, 0),
		http.StatusServiceUnavailable, protocol.CodeParked); err != nil {
		return "", err
	}
	if _, err := k.sameStats(ctx, "parked requests", before); err != nil {
		return "", err
	}
	if err := k.wantSession(ctx, id, 0, 1, false); err != nil {
		return "", fmt.Errorf("a read while admission is closed: %w", err)
	}
	if err := k.phaseConflicts(ctx, c1, c2, first); err != nil {
		return "", err
	}
	res, err := k.resume(ctx, c1, "")
	if err != nil {
		return "", err
	}
	if err := k.wantPhase(ctx, protocol.PhaseIdle, protocol.AdmissionOpen); err != nil {
		return "", fmt.Errorf("after resume: %w", err)
	}
	if r, err := k.operate(ctx, k.opReq(id, 0, 2, 1)); err != nil || r.Revision != 2 {
		return "", fmt.Errorf("the parked operate re-sent after resume: %+v, %v", r, err)
	}
	evidence, err := k.retiredID(ctx, c1, res)
	if err != nil {
		return "", err
	}
	takeOver, err := k.restoreCommitted(ctx)
	if err != nil {
		return "", err
	}
	return evidence + "; " + takeOver, nil
}

// restoreCommitted restores a checkpoint left committed (taken with
// stay-paused, never resumed) under another restore id. A participant
// either takes the session over (admission closed throughout; on success
// the checkpoint id is retired as if resumed: its resume replays, its
// prepare is stale) or refuses it as another active session (409
// checkpoint_conflict) and changes nothing (the operator resumes first).
func (k *kit) restoreCommitted(ctx context.Context) (string, error) {
	id, ckpt, rid := k.rollout("r11-paused"), k.checkpointID("k11c"), k.checkpointID("k11c-restore")
	if _, err := k.began(ctx, id, 1); err != nil {
		return "", err
	}
	if _, _, err := k.prepare(ctx, ckpt); err != nil {
		return "", err
	}
	if _, err := k.commit(ctx, ckpt, k.location("k11c")); err != nil {
		return "", err
	}
	req := protocol.RestoreRequest{CheckpointID: ckpt, RestoreID: rid, Location: k.location("k11c"), Attempts: map[string]int{id: 1}}
	res, a, err := k.restore(ctx, req)
	if err != nil {
		return "", err
	}
	if a.status == http.StatusConflict && a.code == protocol.CodeCheckpointConflict {
		if err := k.wantPhase(ctx, protocol.PhaseCommitted, protocol.AdmissionClosed); err != nil {
			return "", fmt.Errorf("after the restore of a committed checkpoint was refused checkpoint_conflict: %w", err)
		}
		if err := k.wantSession(ctx, id, 0, 1, false); err != nil {
			return "", fmt.Errorf("after the restore of a committed checkpoint was refused: %w", err)
		}
		if _, err := k.resume(ctx, ckpt, ""); err != nil {
			return "", err
		}
		return "a restore of a checkpoint left committed (stay-paused), under another id → 409 checkpoint_conflict, nothing changed (this participant does not take the session over: the operator resumes first)", nil
	}
	if a.status != http.StatusOK {
		return "", fmt.Errorf("restore of a checkpoint left committed answered %s, want 200 (taken over) or, from a participant that does not take it over, 409 checkpoint_conflict (another session is active, R19)", a)
	}
	if m, ok := member(res.Restored, id); !ok || m.Attempt != 1 {
		return "", fmt.Errorf("restore of a checkpoint left committed answered restored %+v, want %s at attempt 1", res.Restored, id)
	}
	if err := k.wantPhase(ctx, protocol.PhaseRestored, protocol.AdmissionClosed); err != nil {
		return "", err
	}
	if _, err := k.resume(ctx, ckpt, rid); err != nil {
		return "", err
	}
	if _, err := k.resume(ctx, ckpt, ""); err != nil {
		return "", fmt.Errorf("a late resume of the checkpoint taken over must replay: %w", err)
	}
	a, err = k.control(ctx, protocol.RouteControlPrepare, "", protocol.PrepareRequest{CheckpointID: ckpt, Deadline: future()})
	if err != nil {
		return "", err
	}
	if err := want("a late prepare of the checkpoint taken over", a, http.StatusConflict, protocol.CodeStaleCheckpoint); err != nil {
		return "", err
	}
	if err := k.wantSession(ctx, id, 1, 1, false); err != nil {
		return "", err
	}
	return "a restore of a checkpoint left committed (stay-paused) takes its session over: restored at attempt 1, admission closed until the restore's resume; the checkpoint's late resume replays, its late prepare → 409 stale_checkpoint", nil
}

// phaseConflicts checks the replay and the refusals while c1 is prepared.
func (k *kit) phaseConflicts(ctx context.Context, c1, c2 string, first answer) error {
	again, err := k.control(ctx, protocol.RouteControlPrepare, "", protocol.PrepareRequest{CheckpointID: c1, Deadline: future()})
	if err != nil {
		return err
	}
	var p1, p2 protocol.PrepareResponse
	if decode("prepare replay", first, &p1) != nil || decode("prepare replay", again, &p2) != nil || !reflect.DeepEqual(p1, p2) {
		return fmt.Errorf("prepare %s repeated answered %s, want the recorded answer %s", c1, again, first)
	}
	for _, c := range []struct {
		what, route string
		body        any
		code        string
	}{
		{"prepare of another checkpoint while one is active", protocol.RouteControlPrepare,
			protocol.PrepareRequest{CheckpointID: c2, Deadline: future()}, protocol.CodeCheckpointConflict},
		{"commit of another checkpoint while one is active", protocol.RouteControlCommit,
			protocol.CommitRequest{CheckpointID: c2, Location: k.location("k11b")}, protocol.CodeCheckpointConflict},
		{"restore in phase prepared", protocol.RouteControlRestore,
			protocol.RestoreRequest{CheckpointID: c1, Location: k.location("k11a"), Attempts: map[string]int{k.rollout("r11"): 1}}, protocol.CodeInvalidPhase},
	} {
		a, err := k.control(ctx, c.route, "", c.body)
		if err != nil {
			return err
		}
		if err := want(c.what, a, http.StatusConflict, c.code); err != nil {
			return err
		}
	}
	return nil
}

// retiredID checks that a resumed id is retired: prepare and commit are
// stale, resume replays.
func (k *kit) retiredID(ctx context.Context, c1 string, res protocol.ResumeResponse) (string, error) {
	for _, c := range []struct {
		route string
		body  any
	}{
		{protocol.RouteControlPrepare, protocol.PrepareRequest{CheckpointID: c1, Deadline: future()}},
		{protocol.RouteControlCommit, protocol.CommitRequest{CheckpointID: c1, Location: k.location("k11a")}},
	} {
		a, err := k.control(ctx, c.route, "", c.body)
		if err != nil {
			return "", err
		}
		if err := want(c.route+" of a resumed checkpoint id", a, http.StatusConflict, protocol.CodeStaleCheckpoint); err != nil {
			return "", err
		}
	}
	again, err := k.resume(ctx, c1, "")
	if err != nil || again != res {
		return "", fmt.Errorf("resume repeated answered %+v (%v), want the recorded %+v", again, err, res)
	}
	if err := k.wantPhase(ctx, protocol.PhaseIdle, protocol.AdmissionOpen); err != nil {
		return "", err
	}
	return "prepare closes admission (operate and start → 503 parked, nothing applied; reads answered); prepare repeated → the recorded answer; another id → 409 checkpoint_conflict; restore while prepared → 409 invalid_phase; resume reopens (the parked operate then applies); the resumed id → 409 stale_checkpoint for prepare and commit, resume replays", nil
}

// checkDeadlines: R12. Prepare wants an absolute RFC 3339 deadline; a
// refused prepare records nothing.
func checkDeadlines(ctx context.Context, k *kit) (string, error) {
	c := k.checkpointID("k12")
	for _, body := range []string{
		fmt.Sprintf(`{"checkpoint_id":%q}`, c),
		fmt.Sprintf(`{"checkpoint_id":%q,"deadline":"0001-01-01T00:00:00Z"}`, c),
		fmt.Sprintf(`{"checkpoint_id":%q,"deadline":"30s"}`, c),
		fmt.Sprintf(`{"checkpoint_id":%q,"deadline":1700000000}`, c),
	} {
		a, err := k.control(ctx, protocol.RouteControlPrepare, "", []byte(body))
		if err != nil {
			return "", err
		}
		if err := want("prepare "+body, a, http.StatusBadRequest, protocol.CodeMalformed); err != nil {
			return "", err
		}
		if err := k.wantPhase(ctx, protocol.PhaseIdle, protocol.AdmissionOpen); err != nil {
			return "", fmt.Errorf("after a refused prepare: %w", err)
		}
	}
	if _, _, err := k.prepare(ctx, c); err != nil {
		return "", fmt.Errorf("a prepare of the same id with an absolute deadline after refused ones: %w", err)
	}
	st, err := k.controlStatus(ctx)
	if err != nil {
		return "", err
	}
	if _, err := k.resume(ctx, c, ""); err != nil {
		return "", err
	}
	if st.InFlight == nil {
		return "", fmt.Errorf("control status has no in_flight list (it names the stragglers of a prepare timeout)")
	}
	return "prepare without a deadline, with the zero time, a relative \"30s\" or a number → 400 malformed_request, phase idle, admission open, the id not spent (the same id then prepares); status lists in_flight. Not driven: a prepare that times out on a stuck mutation (needs an environment with a blocking tool; the Go server tests it in envserver)", nil
}

// checkEnvelope: R16. Unknown routes, and every error answer of the run.
func checkEnvelope(ctx context.Context, k *kit) (string, error) {
	for _, c := range []struct{ route, auth string }{
		{"GET /v1/conformance-no-such-route", k.dataAuth()},
		{"POST /v1/sessions/x/conformance-no-such-route", k.dataAuth()},
		{"GET /v1/control/conformance-no-such-route", k.controlAuth()},
	} {
		a, err := k.do(ctx, c.route, "", c.auth, nil)
		if err != nil {
			return "", err
		}
		if err := want(c.route, a, http.StatusNotFound, protocol.CodeNotFound); err != nil {
			return "", err
		}
	}
	problems := append(append([]string(nil), k.undocumented...), k.serverErrors...)
	if len(problems) > 0 {
		return "", fmt.Errorf("%d of %d error answers break the document: %s", len(problems), k.errorsSeen, strings.Join(problems, "; "))
	}
	return fmt.Sprintf("unknown data and control routes → 404 not_found; all %d error answers of the run were JSON envelopes whose code openapi.json lists for the operation at that status; no 5xx", k.errorsSeen), nil
}
