package conformance

import (
	"context"
	"fmt"
	"net/http"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/participants/protocol"
)

// checkExportRestore: R13. A committed cut restores as a new attempt that
// answers exactly as the original did after the cut; a bad restore
// installs nothing.
func checkExportRestore(ctx context.Context, k *kit) (string, error) {
	id := k.rollout("r13")
	ckpt := k.checkpointID("k13")
	ops, err := k.began(ctx, id, 2)
	if err != nil {
		return "", err
	}
	digest, loc, err := k.commitTwice(ctx, id, ckpt)
	if err != nil {
		return "", err
	}
	after, err := k.operate(ctx, k.opReq(id, 0, 3, 2)) // progress after the cut
	if err != nil {
		return "", err
	}
	if err := k.badRestores(ctx, id, ckpt, loc); err != nil {
		return "", err
	}
	rid := k.checkpointID("k13-restore")
	res, a, err := k.restore(ctx, protocol.RestoreRequest{CheckpointID: ckpt, RestoreID: rid, Location: loc, Attempts: map[string]int{id: 1}})
	if err != nil || a.status != http.StatusOK {
		return "", fmt.Errorf("restore of %s as attempt 1: %s %v", ckpt, a, err)
	}
	if m, ok := member(res.Restored, id); !ok || m.Attempt != 1 || m.Revision != 2 || res.Phase != protocol.PhaseRestored {
		return "", fmt.Errorf("restore answered phase %s, restored %+v; want phase restored with %s at attempt 1, revision 2", res.Phase, res.Restored, id)
	}
	if err := k.wantPhase(ctx, protocol.PhaseRestored, protocol.AdmissionClosed); err != nil {
		return "", err
	}
	if err := k.refused(ctx, "an operate before the restore is resumed", protocol.RouteOperate, id, k.opReq(id, 1, 3, 2),
		http.StatusServiceUnavailable, protocol.CodeParked); err != nil {
		return "", err
	}
	if _, err := k.resume(ctx, ckpt, rid); err != nil {
		return "", err
	}
	if err := k.restoredAnswers(ctx, id, ops[0], after); err != nil {
		return "", err
	}
	return fmt.Sprintf("commit → manifest %s, repeated → the same answer, elsewhere → 409 checkpoint_conflict; restore from a missing location → 422 invalid_checkpoint and from attempt 0 → 409 stale_attempt, each installing nothing; restore as attempt 1 → revision 2, paused (parked) until resume; then the pre-cut request replays its stored answer and the post-cut request applies again with the same answer (revision 3, %q); attempt 0 → 409 stale_attempt",
		truncate(digest, 19), truncate(after.Outcome.Observation, 40)), nil
}

// commitTwice takes a cut of rollout id (at revision 2), commits it, checks
// that a repeated commit answers the same and another location conflicts,
// and resumes.
func (k *kit) commitTwice(ctx context.Context, id, ckpt string) (string, string, error) {
	loc := k.location("k13")
	prep, _, err := k.prepare(ctx, ckpt)
	if err != nil {
		return "", "", err
	}
	if m, ok := member(prep.Sessions, id); !ok || m.Revision != 2 || m.Mode != envs.ModeExportRestore {
		return "", "", fmt.Errorf("prepare lists %+v (found %v), want %s at revision 2, mode export_restore (is --env %s export_restore?)", m, ok, id, k.cfg.Env)
	}
	first, err := k.commit(ctx, ckpt, loc)
	if err != nil {
		return "", "", err
	}
	again, err := k.commit(ctx, ckpt, loc)
	if err != nil || again != first || first.ManifestDigest == "" {
		return "", "", fmt.Errorf("commit repeated answered %+v (%v), want the first answer %+v", again, err, first)
	}
	a, err := k.control(ctx, protocol.RouteControlCommit, "", protocol.CommitRequest{CheckpointID: ckpt, Location: loc + "-elsewhere"})
	if err != nil {
		return "", "", err
	}
	if err := want("commit to another location", a, http.StatusConflict, protocol.CodeCheckpointConflict); err != nil {
		return "", "", err
	}
	if _, err := k.resume(ctx, ckpt, ""); err != nil {
		return "", "", err
	}
	return first.ManifestDigest, loc, nil
}

// badRestores tries a restore from nowhere and one that does not raise the
// attempt: each must install nothing and leave the participant idle.
func (k *kit) badRestores(ctx context.Context, id, ckpt, loc string) error {
	for _, c := range []struct {
		what   string
		req    protocol.RestoreRequest
		status int
		code   string
	}{
		{"restore from a location holding no checkpoint", protocol.RestoreRequest{CheckpointID: ckpt, RestoreID: k.checkpointID("k13-bad1"),
			Location: loc + "-missing", Attempts: map[string]int{id: 1}}, http.StatusUnprocessableEntity, protocol.CodeInvalidCheckpoint},
		{"restore that does not raise the attempt", protocol.RestoreRequest{CheckpointID: ckpt, RestoreID: k.checkpointID("k13-bad2"),
			Location: loc, Attempts: map[string]int{id: 0}}, http.StatusConflict, protocol.CodeStaleAttempt},
	} {
		_, a, err := k.restore(ctx, c.req)
		if err != nil {
			return err
		}
		if err := want(c.what, a, c.status, c.code); err != nil {
			return err
		}
		if err := k.wantPhase(ctx, protocol.PhaseIdle, protocol.AdmissionOpen); err != nil {
			return fmt.Errorf("after a %s: %w", c.what, err)
		}
		if err := k.wantSession(ctx, id, 0, 3, false); err != nil {
			return fmt.Errorf("after a %s: %w", c.what, err)
		}
	}
	return nil
}

// restoredAnswers checks the restored session answers as the original.
func (k *kit) restoredAnswers(ctx context.Context, id string, preCut, postCut protocol.OperateResponse) error {
	if err := k.wantSession(ctx, id, 1, 2, false); err != nil {
		return err
	}
	r, err := k.operate(ctx, k.opReq(id, 1, 1, 0))
	if err != nil {
		return fmt.Errorf("the pre-cut request re-sent by attempt 1: %w", err)
	}
	if !r.Replayed || !sameOutcome(r, preCut) {
		return fmt.Errorf("the pre-cut request re-sent by attempt 1 answered %+v, want the stored %+v, replayed", r, preCut)
	}
	r, err = k.operate(ctx, k.opReq(id, 1, 3, 2))
	if err != nil {
		return fmt.Errorf("the post-cut request sent by attempt 1: %w", err)
	}
	if r.Replayed || !sameOutcome(r, postCut) {
		return fmt.Errorf("the post-cut request sent by attempt 1 answered %+v, want a new application equal to the original's %+v (export must be complete and deterministic)", r, postCut)
	}
	return k.refused(ctx, "an operate of attempt 0 after the restore", protocol.RouteOperate, id, k.opReq(id, 0, 4, 3),
		http.StatusConflict, protocol.CodeStaleAttempt)
}

// checkRestartOnly: R14.
func checkRestartOnly(ctx context.Context, k *kit) (string, error) {
	if k.cfg.RestartEnv == "" {
		return "", skipError{"no restart_only or stateless environment given (--restart-env)"}
	}
	mode, err := k.envMode(ctx)
	if err != nil {
		return "", err
	}
	id, name := k.rollout("r14"), "k14"
	start := protocol.StartRequest{Identity: protocol.Identity{RolloutID: id, RequestID: protocol.SeedRequestID(id)},
		Env: k.cfg.RestartEnv, Seed: 1, Task: k.cfg.RestartTask}
	if _, err := k.start(ctx, start); err != nil {
		return "", err
	}
	prep, _, loc, err := k.cut(ctx, name)
	if err != nil {
		return "", err
	}
	if m, ok := member(prep.Sessions, id); !ok || m.Mode != mode {
		return "", fmt.Errorf("the cut lists %+v (found %v), want %s with mode %s", m, ok, id, mode)
	}
	ckpt, rid := k.checkpointID(name), k.checkpointID(name+"-restore")
	res, a, err := k.restore(ctx, protocol.RestoreRequest{CheckpointID: ckpt, RestoreID: rid, Location: loc, Attempts: map[string]int{id: 1}})
	if err != nil || a.status != http.StatusOK {
		return "", fmt.Errorf("restore: %s %v", a, err)
	}
	if mode == envs.ModeStateless {
		return k.statelessRestored(ctx, res, start, ckpt, rid)
	}
	if m, ok := member(res.Restarted, id); !ok || m.Attempt != 1 {
		return "", fmt.Errorf("restore answered restarted %+v, restored %+v; want %s restarted at attempt 1", res.Restarted, res.Restored, id)
	}
	if _, ok := member(res.Restored, id); ok {
		return "", fmt.Errorf("a %s session was restored with state; it must start over", mode)
	}
	if err := k.wantNoSession(ctx, id); err != nil {
		return "", fmt.Errorf("after the restore: %w", err)
	}
	if _, err := k.resume(ctx, ckpt, rid); err != nil {
		return "", err
	}
	start.Attempt = 1
	if st, err := k.start(ctx, start); err != nil || st.Revision != 0 || st.Replayed {
		return "", fmt.Errorf("the start-over of attempt 1: %+v, %v", st, err)
	}
	if err := k.refusedOldStart(ctx, start); err != nil {
		return "", err
	}
	return fmt.Sprintf("%s (%s) is in the cut without state; restore lists it under restarted at attempt 1 and drops its session; attempt 1 starts over at revision 0; attempt 0 → 409 stale_attempt", k.cfg.RestartEnv, mode), nil
}

// statelessRestored: R14 for a stateless environment, whose session is cut
// with its (small) state because the coordinator continues such a rollout
// at its boundary: restore lists it under restored at the new attempt and
// the session is there, at the revision it was cut at.
func (k *kit) statelessRestored(ctx context.Context, res protocol.RestoreResponse, start protocol.StartRequest, ckpt, rid string) (string, error) {
	id := start.RolloutID
	if m, ok := member(res.Restored, id); !ok || m.Attempt != 1 {
		return "", fmt.Errorf("restore answered restored %+v, restarted %+v; want %s restored at attempt 1 (a stateless rollout continues)", res.Restored, res.Restarted, id)
	}
	if _, err := k.resume(ctx, ckpt, rid); err != nil {
		return "", err
	}
	info, ok, err := k.session(ctx, id)
	if err != nil || !ok || info.Attempt != 1 || info.Revision != 0 {
		return "", fmt.Errorf("the restored stateless session: %+v (found %v), %v; want attempt 1 at revision 0", info, ok, err)
	}
	start.Attempt = 1
	if err := k.refusedOldStart(ctx, start); err != nil {
		return "", err
	}
	return fmt.Sprintf("%s (stateless) is in the cut with its state; restore lists it under restored at attempt 1 and the session continues at revision 0; attempt 0 → 409 stale_attempt", k.cfg.RestartEnv), nil
}

// refusedOldStart checks that a start of the attempt before start's is
// refused stale_attempt after a restore.
func (k *kit) refusedOldStart(ctx context.Context, start protocol.StartRequest) error {
	start.Attempt--
	return k.refused(ctx, "a start of attempt 0 after the restore", protocol.RouteStart, "", start, http.StatusConflict, protocol.CodeStaleAttempt)
}

// envMode checks the modes /v1/envs declares for Env and RestartEnv and
// returns RestartEnv's.
func (k *kit) envMode(ctx context.Context) (envs.Mode, error) {
	a, err := k.do(ctx, protocol.RouteEnvs, "", k.dataAuth(), nil)
	if err != nil {
		return "", err
	}
	var specs []envs.Spec
	if err := decode("GET /v1/envs", a, &specs); err != nil {
		return "", err
	}
	modes := map[string]envs.Mode{}
	for _, s := range specs {
		modes[s.Name] = envs.EffectiveMode(s.Mode)
	}
	if m := modes[k.cfg.Env]; m != envs.ModeExportRestore {
		return "", fmt.Errorf("/v1/envs declares %s as %q, want export_restore", k.cfg.Env, m)
	}
	m, ok := modes[k.cfg.RestartEnv]
	if !ok || m == envs.ModeExportRestore {
		return "", fmt.Errorf("/v1/envs declares %s as %q (listed %v), want restart_only or stateless", k.cfg.RestartEnv, m, ok)
	}
	return m, nil
}
