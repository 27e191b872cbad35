package conformance

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/participants/protocol"
)

// Call is one operation of a replay environment the kit drives (R27).
type Call struct {
	Tool      string          `json:"tool"`
	Arguments json.RawMessage `json:"arguments"`
}

// replayCalls is how many calls R27 needs: three before the cut, one after.
const replayCalls = 4

func (k *kit) replayOp(id string, attempt, i int) protocol.OperateRequest {
	c := k.cfg.ReplayCalls[i]
	return protocol.OperateRequest{Identity: protocol.Identity{RolloutID: id, Attempt: attempt, RequestID: opID(id, i+1)},
		ExpectedRevision: int64(i), Tool: c.Tool, Arguments: c.Arguments}
}

// checkReplayRestore: R27. A replay session is cut as its receipts; a
// restore rebuilds it by re-applying them, applies nothing, lists it
// restored at the cut's revision, and the rebuilt session answers as the
// original did.
func checkReplayRestore(ctx context.Context, k *kit) (string, error) {
	if k.cfg.ReplayEnv == "" {
		return "", skipError{"no replay environment given (--replay-env)"}
	}
	if err := k.wantReplayMode(ctx); err != nil {
		return "", err
	}
	id, name := k.rollout("r17"), "k17"
	start := protocol.StartRequest{Identity: protocol.Identity{RolloutID: id, RequestID: protocol.SeedRequestID(id)},
		Env: k.cfg.ReplayEnv, Seed: 1, Task: k.cfg.ReplayTask}
	if _, err := k.start(ctx, start); err != nil {
		return "", err
	}
	var before []protocol.OperateResponse
	for i := range replayCalls - 1 {
		r, err := k.operate(ctx, k.replayOp(id, 0, i))
		if err != nil {
			return "", fmt.Errorf("replay call %d before the cut: %w", i+1, err)
		}
		before = append(before, r)
	}
	prep, _, loc, err := k.cut(ctx, name)
	if err != nil {
		return "", err
	}
	if m, ok := member(prep.Sessions, id); !ok || m.Mode != envs.ModeReplay || m.Revision != replayCalls-1 {
		return "", fmt.Errorf("the cut lists %+v (found %v), want %s at revision %d with mode replay", m, ok, id, replayCalls-1)
	}
	after, err := k.operate(ctx, k.replayOp(id, 0, replayCalls-1))
	if err != nil {
		return "", fmt.Errorf("replay call %d after the cut: %w", replayCalls, err)
	}
	st0, err := k.stats(ctx)
	if err != nil {
		return "", err
	}
	ckpt, rid := k.checkpointID(name), k.checkpointID(name+"-restore")
	res, a, err := k.restore(ctx, protocol.RestoreRequest{CheckpointID: ckpt, RestoreID: rid, Location: loc, Attempts: map[string]int{id: 1}})
	if err != nil || a.status != http.StatusOK {
		return "", fmt.Errorf("restore: %s %v", a, err)
	}
	if m, ok := member(res.Restored, id); !ok || m.Attempt != 1 || m.Revision != replayCalls-1 || m.Mode != envs.ModeReplay {
		return "", fmt.Errorf("restore answered restored %+v, restarted %+v; want %s restored by replay at attempt 1, revision %d, mode replay", res.Restored, res.Restarted, id, replayCalls-1)
	}
	st1, err := k.stats(ctx)
	if err != nil {
		return "", err
	}
	if st1.Applied != st0.Applied {
		return "", fmt.Errorf("the restore counted %d mutations as applied; a replay applies nothing", st1.Applied-st0.Applied)
	}
	if _, err := k.resume(ctx, ckpt, rid); err != nil {
		return "", err
	}
	if err := k.replayedAnswers(ctx, id, before[len(before)-1], after); err != nil {
		return "", err
	}
	if err := k.refused(ctx, "an operate of attempt 0 after the restore", protocol.RouteOperate, id, k.replayOp(id, 0, replayCalls-1),
		http.StatusConflict, protocol.CodeStaleAttempt); err != nil {
		return "", err
	}
	return fmt.Sprintf("%s is cut with mode replay at revision %d; restore as attempt 1 lists it restored at revision %d, counting nothing applied (%d re-applied); the pre-cut call replays its stored answer and the post-cut call applies once, answering as the original did (%q); attempt 0 → 409 stale_attempt",
		k.cfg.ReplayEnv, replayCalls-1, replayCalls-1, st1.Reapplied-st0.Reapplied, truncate(after.Outcome.Observation, 40)), nil
}

// replayedAnswers checks that the rebuilt session answers as the original.
func (k *kit) replayedAnswers(ctx context.Context, id string, preCut, postCut protocol.OperateResponse) error {
	if err := k.wantSession(ctx, id, 1, replayCalls-1, false); err != nil {
		return err
	}
	r, err := k.operate(ctx, k.replayOp(id, 1, replayCalls-2))
	if err != nil {
		return fmt.Errorf("the last pre-cut call re-sent by attempt 1: %w", err)
	}
	if !r.Replayed || !sameOutcome(r, preCut) {
		return fmt.Errorf("the last pre-cut call re-sent by attempt 1 answered %+v, want the stored %+v, replayed", r, preCut)
	}
	r, err = k.operate(ctx, k.replayOp(id, 1, replayCalls-1))
	if err != nil {
		return fmt.Errorf("the post-cut call sent by attempt 1: %w", err)
	}
	if r.Replayed || !sameOutcome(r, postCut) {
		return fmt.Errorf("the post-cut call sent by attempt 1 answered %+v, want a new application equal to the original's %+v (the replay must rebuild the whole state)", r, postCut)
	}
	return nil
}

// wantReplayMode checks that /v1/envs declares ReplayEnv as replay; a
// participant that does not host it skips the rule.
func (k *kit) wantReplayMode(ctx context.Context) error {
	a, err := k.do(ctx, protocol.RouteEnvs, "", k.dataAuth(), nil)
	if err != nil {
		return err
	}
	var specs []envs.Spec
	if err := decode("GET /v1/envs", a, &specs); err != nil {
		return err
	}
	for _, s := range specs {
		if s.Name == k.cfg.ReplayEnv {
			if m := envs.EffectiveMode(s.Mode); m != envs.ModeReplay {
				return fmt.Errorf("/v1/envs declares %s as %q, want replay", s.Name, m)
			}
			return nil
		}
	}
	return skipError{fmt.Sprintf("the participant hosts no environment %q (--replay-env)", k.cfg.ReplayEnv)}
}
