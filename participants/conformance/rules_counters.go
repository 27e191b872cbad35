package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strings"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/participants/protocol"
)

// counted is what a run of requests should have done to the counters,
// from the answers the participant gave.
type counted struct {
	applied, replayed, refused, parked int64
	sessions                           int
}

// checkCounters: R21. Each counter moves by what the answers say: applied
// and replayed by the mutations answered 200 (as the answers' replayed
// flag says), refused by every 4xx after authentication (reads and
// unknown routes too, 422 included), parked by every 503, sessions by the
// sessions started and verified; a 401 counts nowhere.
func checkCounters(ctx context.Context, k *kit) (string, error) {
	id, ckpt := k.rollout("r21"), k.checkpointID("k21")
	before, err := k.stats(ctx)
	if err != nil {
		return "", err
	}
	var want counted
	mutation := func(what, route, path string, body any) error {
		a, err := k.do(ctx, route, path, k.dataAuth(), body)
		if err != nil {
			return err
		}
		switch {
		case a.status == http.StatusOK:
			var r struct {
				Replayed bool `json:"replayed"`
			}
			if err := json.Unmarshal(a.body, &r); err != nil {
				return fmt.Errorf("%s: %w", what, err)
			}
			if r.Replayed {
				want.replayed++
			} else {
				want.applied++
			}
		case a.status == http.StatusServiceUnavailable:
			want.parked++
		case a.status >= 400 && a.status < 500 && a.status != http.StatusUnauthorized:
			want.refused++
		}
		return nil
	}
	bad := k.opReq(id, 0, 2, 1)
	bad.Tool = "conformance-no-such-tool"
	steps := []struct {
		what, route, path string
		body              any
	}{
		{"start", protocol.RouteStart, "", k.startReq(id, 0)},
		{"operate", protocol.RouteOperate, id, k.opReq(id, 0, 1, 0)},
		{"the operate re-sent", protocol.RouteOperate, id, k.opReq(id, 0, 1, 0)},
		{"an operate at a wrong revision", protocol.RouteOperate, id, k.opReq(id, 0, 2, 5)},
		{"a read of a session that does not exist", protocol.RouteSessions, k.rollout("r21-none"), nil},
		{"an unknown data route", "GET /v1/conformance-no-such-route", "", nil},
		{"an operate of a tool the environment does not have (422)", protocol.RouteOperate, id, bad},
	}
	for _, s := range steps {
		if err := mutation(s.what, s.route, s.path, s.body); err != nil {
			return "", err
		}
	}
	want.sessions++ // the start
	if _, err := k.do(ctx, protocol.RouteStats, "", "Bearer wrong-"+k.prefix, nil); err != nil {
		return "", err
	}
	if _, _, err := k.prepare(ctx, ckpt); err != nil {
		return "", err
	}
	if err := mutation("an operate while admission is closed", protocol.RouteOperate, id, k.opReq(id, 0, 2, 1)); err != nil {
		return "", err
	}
	if _, err := k.resume(ctx, ckpt, ""); err != nil {
		return "", err
	}
	if err := mutation("verify", protocol.RouteVerify, id, verifyReq(id, 0, 1)); err != nil {
		return "", err
	}
	want.sessions-- // verified
	after, err := k.stats(ctx)
	if err != nil {
		return "", err
	}
	got := counted{applied: after.Applied - before.Applied, replayed: after.Replayed - before.Replayed, refused: after.Refused - before.Refused,
		parked: after.Parked - before.Parked, sessions: after.Sessions - before.Sessions}
	if got != want {
		return "", fmt.Errorf("counters moved by applied %+d, replayed %+d, refused %+d, parked %+d, sessions %+d; the answers say applied %+d, replayed %+d, refused %+d, parked %+d, sessions %+d (does anything else use this participant?)",
			got.applied, got.replayed, got.refused, got.parked, got.sessions, want.applied, want.replayed, want.refused, want.parked, want.sessions)
	}
	return fmt.Sprintf("start, operate, its replay, a wrong revision, a read of no session, an unknown route, a 422, a request with a wrong token, a parked operate and a verify moved applied %+d, replayed %+d, refused %+d, parked %+d, sessions %+d, as the answers say",
		got.applied, got.replayed, got.refused, got.parked, got.sessions), nil
}

// checkUnseen: R22. A rollout never seen has fence 0, and reads or a no-op
// authorise leave nothing behind; retire and authorise of higher attempts
// install them.
func checkUnseen(ctx context.Context, k *kit) (string, error) {
	ghost, retired, authorised := k.rollout("r22-ghost"), k.rollout("r22-retired"), k.rollout("r22-authorised")
	got, a, err := k.authorise(ctx, ghost, 0)
	if err != nil {
		return "", err
	}
	if w := (protocol.AuthoriseResponse{RolloutID: ghost, Attempt: 0, Fence: 0}); a.status != http.StatusOK || got != w {
		return "", fmt.Errorf("authorise of attempt 0 of a rollout never seen answered %s %+v, want %+v", a, got, w)
	}
	if err := k.wantNoSession(ctx, ghost); err != nil {
		return "", err
	}
	if st, err := k.start(ctx, k.startReq(ghost, 0)); err != nil || st.Revision != 0 || st.Replayed {
		return "", fmt.Errorf("attempt 0 of the rollout after a no-op authorise and a read: %+v, %v", st, err)
	}
	var ret protocol.RetireResponse
	a, err = k.control(ctx, protocol.RouteControlRetire, "", protocol.RetireRequest{RolloutID: retired, Attempt: 2})
	if err != nil {
		return "", err
	}
	if err := decode("retire attempt 2 of a rollout never seen", a, &ret); err != nil {
		return "", err
	}
	if w := (protocol.RetireResponse{RolloutID: retired, Fence: 3}); ret != w {
		return "", fmt.Errorf("retire attempt 2 of a rollout never seen answered %+v, want %+v", ret, w)
	}
	if _, err := k.start(ctx, k.startReq(retired, 3)); err != nil {
		return "", fmt.Errorf("attempt 3 after retiring attempt 2 of a rollout never seen: %w", err)
	}
	if got, a, err = k.authorise(ctx, authorised, 2); err != nil {
		return "", err
	}
	if w := (protocol.AuthoriseResponse{RolloutID: authorised, Attempt: 2, Fence: 2, Changed: true}); a.status != http.StatusOK || got != w {
		return "", fmt.Errorf("authorise of attempt 2 of a rollout never seen answered %s %+v, want %+v", a, got, w)
	}
	if _, err := k.start(ctx, k.startReq(authorised, 2)); err != nil {
		return "", fmt.Errorf("attempt 2 after authorising it: %w", err)
	}
	return "a rollout never seen: authorise 0 → fence 0, changed:false, and nothing remembered (no session; attempt 0 then starts); retire of attempt 2 → fence 3 and attempt 3 starts; authorise of attempt 2 → fence 2, changed:true, dropped:false, and attempt 2 starts", nil
}

// checkRefusalsNotStored: R23. A 422 stores nothing: the same request id
// is asked again, and with another body it is a new request.
func checkRefusalsNotStored(ctx context.Context, k *kit) (string, error) {
	id := k.rollout("r23")
	if _, err := k.began(ctx, id, 1); err != nil {
		return "", err
	}
	before, err := k.stats(ctx)
	if err != nil {
		return "", err
	}
	bad := k.opReq(id, 0, 2, 1)
	bad.Tool = "conformance-no-such-tool"
	var code string
	for i := range 2 {
		a, err := k.do(ctx, protocol.RouteOperate, id, k.dataAuth(), bad)
		if err != nil {
			return "", err
		}
		if a.status != http.StatusUnprocessableEntity {
			return "", fmt.Errorf("an operate of a tool the environment does not have (try %d) answered %s, want 422 (the environment's refusal, not a stored answer)", i+1, a)
		}
		code = a.code
	}
	now, err := k.stats(ctx)
	if err != nil {
		return "", err
	}
	if now.Applied != before.Applied || now.Replayed != before.Replayed || now.Refused != before.Refused+2 {
		return "", fmt.Errorf("two refused operates moved applied %d → %d, replayed %d → %d, refused %d → %d; want applied and replayed unchanged, refused +2",
			before.Applied, now.Applied, before.Replayed, now.Replayed, before.Refused, now.Refused)
	}
	r, err := k.operate(ctx, k.opReq(id, 0, 2, 1))
	if err != nil {
		return "", fmt.Errorf("the refused request id with a tool the environment has (a new request, not request_id_conflict): %w", err)
	}
	if r.Replayed || r.Revision != 2 {
		return "", fmt.Errorf("the refused request id with a good body answered %+v, want a new application at revision 2", r)
	}
	return fmt.Sprintf("an operate refused by the environment (422 %s) sent twice → 422 twice, nothing applied or replayed, refused +2; the same request id with a good body → applied at revision 2", code), nil
}

// checkCanonicalJSON: R24. Formatting and key order do not matter; a
// number's text does: 5 and 5.0 are different values.
func checkCanonicalJSON(ctx context.Context, k *kit) (string, error) {
	id := k.rollout("r24")
	start := k.startReq(id, 0)
	if _, err := k.start(ctx, start); err != nil {
		return "", err
	}
	again := start
	again.Task = reformat(start.Task)
	if st, err := k.start(ctx, again); err != nil || !st.Replayed {
		return "", fmt.Errorf("the start re-sent with its task reformatted (%s) answered %+v, %v; want the stored answer, replayed", again.Task, st, err)
	}
	before, err := k.stats(ctx)
	if err != nil {
		return "", err
	}
	where, other, ok := renumber(start.Task)
	route, path, body := protocol.RouteStart, "", any(nil)
	if ok {
		changed := start
		changed.Task = other
		body = changed
	} else if where, other, ok = renumber(k.cfg.Args); ok {
		if _, err := k.operate(ctx, k.opReq(id, 0, 1, 0)); err != nil {
			return "", err
		}
		before, err = k.stats(ctx)
		if err != nil {
			return "", err
		}
		changed := k.opReq(id, 0, 1, 0)
		changed.Arguments = other
		route, path, body = protocol.RouteOperate, id, changed
	}
	if !ok {
		return "the start re-sent with its task reformatted → replayed; number equality not driven (neither --task nor --args holds a number)", nil
	}
	if err := k.refused(ctx, "the request re-sent with "+where, route, path, body, http.StatusConflict, protocol.CodeRequestConflict); err != nil {
		return "", err
	}
	if _, err := k.sameStats(ctx, "a request whose number was written otherwise", before); err != nil {
		return "", err
	}
	return fmt.Sprintf("the start re-sent with its task reformatted → replayed; the request re-sent with %s → 409 request_id_conflict (numbers compare as written), nothing applied", where), nil
}

// renumber writes the first number of raw otherwise (5 → 5.0, 2.5 →
// 2.50), so it is the same quantity written differently; ok is false when
// raw holds no number it can rewrite.
func renumber(raw json.RawMessage) (where string, out json.RawMessage, ok bool) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return "", nil, false
	}
	var done string
	v = rewriteFirst(v, &done)
	if done == "" {
		return "", nil, false
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "", nil, false
	}
	return done, b, true
}

// rewriteFirst walks v (objects in key order) and rewrites its first
// rewritable number, saying which in done.
func rewriteFirst(v any, done *string) any {
	if *done != "" {
		return v
	}
	switch x := v.(type) {
	case json.Number:
		s := string(x)
		if strings.ContainsAny(s, "eE") {
			return v
		}
		n := s + "0"
		if !strings.Contains(s, ".") {
			n = s + ".0"
		}
		*done = fmt.Sprintf("%s written %s", s, n)
		return json.Number(n)
	case map[string]any:
		keys := make([]string, 0, len(x))
		for key := range x {
			keys = append(keys, key)
		}
		slices.Sort(keys)
		for _, key := range keys {
			x[key] = rewriteFirst(x[key], done)
		}
	case []any:
		for i := range x {
			x[i] = rewriteFirst(x[i], done)
		}
	}
	return v
}

// checkStateless: R25. Verify needs a session, scores and retires it, and
// replays; a stateless session is cut with its state, so its verdict after
// a restore is the one it had before.
func checkStateless(ctx context.Context, k *kit) (string, error) {
	unseen := k.rollout("r25-unseen")
	if err := k.refused(ctx, "a verify of a rollout never started", protocol.RouteVerify, unseen, verifyReq(unseen, 0, 0),
		http.StatusNotFound, protocol.CodeUnknownSession); err != nil {
		return "", err
	}
	mode, err := k.restartMode(ctx)
	if err != nil {
		return "", err
	}
	if mode != envs.ModeStateless {
		return fmt.Sprintf("a verify of a rollout never started → 404 unknown_session; stateless verify not driven (--restart-env %q is %q, not stateless)", k.cfg.RestartEnv, mode), nil
	}
	one, two := k.rollout("r25-one"), k.rollout("r25-two")
	for _, id := range []string{one, two} {
		if _, err := k.start(ctx, protocol.StartRequest{Identity: protocol.Identity{RolloutID: id, RequestID: protocol.SeedRequestID(id)},
			Env: k.cfg.RestartEnv, Seed: 1, Task: k.cfg.RestartTask}); err != nil {
			return "", err
		}
	}
	first, err := k.verify(ctx, one, 0, 0)
	if err != nil {
		return "", err
	}
	if again, err := k.verify(ctx, one, 0, 0); err != nil || !again.Replayed || !reflect.DeepEqual(again.Verdict, first.Verdict) {
		return "", fmt.Errorf("the stateless verify re-sent answered %+v (%v), want the stored verdict %+v, replayed", again, err, first.Verdict)
	}
	_, _, loc, err := k.cut(ctx, "k25")
	if err != nil {
		return "", err
	}
	ckpt, rid := k.checkpointID("k25"), k.checkpointID("k25-restore")
	res, a, err := k.restore(ctx, protocol.RestoreRequest{CheckpointID: ckpt, RestoreID: rid, Location: loc, Attempts: map[string]int{two: 1}})
	if err != nil || a.status != http.StatusOK {
		return "", fmt.Errorf("restore: %s %v", a, err)
	}
	if m, ok := member(res.Restored, two); !ok || m.Attempt != 1 {
		return "", fmt.Errorf("restore answered restored %+v, restarted %+v; want the stateless %s restored at attempt 1", res.Restored, res.Restarted, two)
	}
	if _, err := k.resume(ctx, ckpt, rid); err != nil {
		return "", err
	}
	restored, err := k.verify(ctx, two, 1, 0)
	if err != nil {
		return "", err
	}
	if !reflect.DeepEqual(restored.Verdict, first.Verdict) {
		return "", fmt.Errorf("the restored stateless session's verdict %+v differs from a session of the same task's %+v", restored.Verdict, first.Verdict)
	}
	return fmt.Sprintf("a verify of a rollout never started → 404 unknown_session; a stateless session (%s) verified (reward %v) and re-sent → replayed; a second one cut, restored under restored at attempt 1, then verified → the same verdict", k.cfg.RestartEnv, first.Verdict.Reward), nil
}

// restartMode is RestartEnv's declared mode ("" without one).
func (k *kit) restartMode(ctx context.Context) (envs.Mode, error) {
	if k.cfg.RestartEnv == "" {
		return "", nil
	}
	return k.envMode(ctx)
}
