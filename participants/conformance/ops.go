package conformance

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"reflect"
	"time"

	"github.com/turnstile-rl/turnstile/participants/protocol"
)

// The kit's protocol calls: typed requests with the right token, answers
// decoded and checked.

// rollout is the id of the kit's rollout name; the clean-up retires its
// session at the end.
func (k *kit) rollout(name string) string {
	id := k.prefix + "-" + name
	k.used[id] = true
	return id
}

func (k *kit) checkpointID(name string) string { return k.prefix + "-" + name }

func (k *kit) location(name string) string { return filepath.Join(k.cfg.Dir, k.checkpointID(name)) }

func opID(rollout string, turn int) string { return protocol.OperateRequestID(rollout, turn, 0) }

func (k *kit) startReq(id string, attempt int) protocol.StartRequest {
	return protocol.StartRequest{Identity: protocol.Identity{RolloutID: id, Attempt: attempt, RequestID: protocol.SeedRequestID(id)},
		Env: k.cfg.Env, Seed: 1, Task: k.cfg.Task}
}

func (k *kit) opReq(id string, attempt, turn int, rev int64) protocol.OperateRequest {
	return protocol.OperateRequest{Identity: protocol.Identity{RolloutID: id, Attempt: attempt, RequestID: opID(id, turn)},
		ExpectedRevision: rev, Tool: k.cfg.Tool, Arguments: k.cfg.Args}
}

func verifyReq(id string, attempt int, rev int64) protocol.VerifyRequest {
	return protocol.VerifyRequest{Identity: protocol.Identity{RolloutID: id, Attempt: attempt, RequestID: protocol.VerifyRequestID(id)},
		ExpectedRevision: rev}
}

// start sends req and wants a 200.
func (k *kit) start(ctx context.Context, req protocol.StartRequest) (protocol.StartResponse, error) {
	var out protocol.StartResponse
	a, err := k.do(ctx, protocol.RouteStart, "", k.dataAuth(), req)
	if err != nil {
		return out, err
	}
	return out, decode(fmt.Sprintf("start of %s attempt %d", req.RolloutID, req.Attempt), a, &out)
}

// operate sends req and wants a 200.
func (k *kit) operate(ctx context.Context, req protocol.OperateRequest) (protocol.OperateResponse, error) {
	var out protocol.OperateResponse
	a, err := k.do(ctx, protocol.RouteOperate, req.RolloutID, k.dataAuth(), req)
	if err != nil {
		return out, err
	}
	return out, decode(fmt.Sprintf("operate %s (attempt %d, expected revision %d)", req.RequestID, req.Attempt, req.ExpectedRevision), a, &out)
}

// verify sends a verify and wants a 200.
func (k *kit) verify(ctx context.Context, id string, attempt int, rev int64) (protocol.VerifyResponse, error) {
	var out protocol.VerifyResponse
	a, err := k.do(ctx, protocol.RouteVerify, id, k.dataAuth(), verifyReq(id, attempt, rev))
	if err != nil {
		return out, err
	}
	return out, decode(fmt.Sprintf("verify of %s attempt %d", id, attempt), a, &out)
}

// began starts rollout id at attempt 0 and applies turns operations.
func (k *kit) began(ctx context.Context, id string, turns int) ([]protocol.OperateResponse, error) {
	if _, err := k.start(ctx, k.startReq(id, 0)); err != nil {
		return nil, err
	}
	var out []protocol.OperateResponse
	for turn := 1; turn <= turns; turn++ {
		r, err := k.operate(ctx, k.opReq(id, 0, turn, int64(turn-1)))
		if err != nil {
			return nil, err
		}
		if r.Revision != int64(turn) || r.Replayed {
			return nil, fmt.Errorf("operate %s answered revision %d replayed %v, want revision %d, not replayed", opID(id, turn), r.Revision, r.Replayed, turn)
		}
		out = append(out, r)
	}
	return out, nil
}

// refused sends a data-plane mutation and wants status/code.
func (k *kit) refused(ctx context.Context, what, route, id string, body any, status int, code string) error {
	a, err := k.do(ctx, route, id, k.dataAuth(), body)
	if err != nil {
		return err
	}
	return want(what, a, status, code)
}

func (k *kit) stats(ctx context.Context) (protocol.Stats, error) {
	var out protocol.Stats
	a, err := k.do(ctx, protocol.RouteStats, "", k.dataAuth(), nil)
	if err != nil {
		return out, err
	}
	return out, decode("GET /v1/stats", a, &out)
}

// session returns the session's info, or ok false for 404 unknown_session.
func (k *kit) session(ctx context.Context, id string) (protocol.SessionInfo, bool, error) {
	var out protocol.SessionInfo
	a, err := k.do(ctx, protocol.RouteSessions, id, k.dataAuth(), nil)
	if err != nil {
		return out, false, err
	}
	if a.status == 404 && a.code == protocol.CodeUnknownSession {
		return out, false, nil
	}
	return out, true, decode("GET /v1/sessions/"+id, a, &out)
}

// wantSession checks a session's attempt, revision and retirement.
func (k *kit) wantSession(ctx context.Context, id string, attempt int, rev int64, retired bool) error {
	info, ok, err := k.session(ctx, id)
	if err != nil {
		return err
	}
	if !ok || info.Attempt != attempt || info.Revision != rev || info.Retired != retired {
		return fmt.Errorf("session %s is %+v (found %v), want attempt %d, revision %d, retired %v", id, info, ok, attempt, rev, retired)
	}
	return nil
}

// wantNoSession checks that GET /v1/sessions/{id} is 404 unknown_session.
func (k *kit) wantNoSession(ctx context.Context, id string) error {
	info, ok, err := k.session(ctx, id)
	if err != nil {
		return err
	}
	if ok {
		return fmt.Errorf("session %s exists: %+v, want 404 unknown_session", id, info)
	}
	return nil
}

// sameStats checks that nothing was applied or replayed and no session
// appeared between before and now.
func (k *kit) sameStats(ctx context.Context, what string, before protocol.Stats) (protocol.Stats, error) {
	now, err := k.stats(ctx)
	if err != nil {
		return now, err
	}
	if now.Applied != before.Applied || now.Replayed != before.Replayed || now.Sessions != before.Sessions {
		return now, fmt.Errorf("%s changed the stats from %+v to %+v", what, before, now)
	}
	return now, nil
}

func (k *kit) controlStatus(ctx context.Context) (protocol.ControlStatus, error) {
	var out protocol.ControlStatus
	a, err := k.do(ctx, protocol.RouteControlStatus, "", k.controlAuth(), nil)
	if err != nil {
		return out, err
	}
	return out, decode("GET /v1/control/status", a, &out)
}

// wantPhase checks the control phase and admission.
func (k *kit) wantPhase(ctx context.Context, phase protocol.Phase, admission string) error {
	st, err := k.controlStatus(ctx)
	if err != nil {
		return err
	}
	if st.Phase != phase || st.Admission != admission {
		return fmt.Errorf("control status is phase %s, admission %s, want %s, %s", st.Phase, st.Admission, phase, admission)
	}
	return nil
}

// control sends a control request and returns the answer.
func (k *kit) control(ctx context.Context, route, id string, body any) (answer, error) {
	return k.do(ctx, route, id, k.controlAuth(), body)
}

func future() time.Time { return time.Now().Add(2 * time.Minute).UTC().Truncate(time.Millisecond) }

func (k *kit) prepare(ctx context.Context, ckpt string) (protocol.PrepareResponse, answer, error) {
	var out protocol.PrepareResponse
	a, err := k.control(ctx, protocol.RouteControlPrepare, "", protocol.PrepareRequest{CheckpointID: ckpt, Deadline: future()})
	if err != nil {
		return out, a, err
	}
	return out, a, decode("prepare "+ckpt, a, &out)
}

func (k *kit) commit(ctx context.Context, ckpt, loc string) (protocol.CommitResponse, error) {
	var out protocol.CommitResponse
	a, err := k.control(ctx, protocol.RouteControlCommit, "", protocol.CommitRequest{CheckpointID: ckpt, Location: loc})
	if err != nil {
		return out, err
	}
	return out, decode("commit "+ckpt, a, &out)
}

func (k *kit) resume(ctx context.Context, ckpt, restoreID string) (protocol.ResumeResponse, error) {
	var out protocol.ResumeResponse
	a, err := k.control(ctx, protocol.RouteControlResume, "", protocol.ResumeRequest{CheckpointID: ckpt, RestoreID: restoreID})
	if err != nil {
		return out, err
	}
	return out, decode("resume "+ckpt, a, &out)
}

// cut prepares, commits and resumes checkpoint name, returning the
// prepare's members, the commit's answer and its location.
func (k *kit) cut(ctx context.Context, name string) (protocol.PrepareResponse, protocol.CommitResponse, string, error) {
	ckpt, loc := k.checkpointID(name), k.location(name)
	prep, _, err := k.prepare(ctx, ckpt)
	if err != nil {
		return prep, protocol.CommitResponse{}, "", err
	}
	com, err := k.commit(ctx, ckpt, loc)
	if err != nil {
		return prep, com, "", err
	}
	if _, err := k.resume(ctx, ckpt, ""); err != nil {
		return prep, com, "", err
	}
	return prep, com, loc, nil
}

func (k *kit) restore(ctx context.Context, req protocol.RestoreRequest) (protocol.RestoreResponse, answer, error) {
	var out protocol.RestoreResponse
	a, err := k.control(ctx, protocol.RouteControlRestore, "", req)
	if err != nil || a.status != 200 {
		return out, a, err
	}
	return out, a, decode("restore "+req.RestoreID, a, &out)
}

func (k *kit) authorise(ctx context.Context, id string, attempt int) (protocol.AuthoriseResponse, answer, error) {
	var out protocol.AuthoriseResponse
	a, err := k.control(ctx, protocol.RouteControlAuthorise, id, protocol.AuthoriseRequest{Attempt: attempt})
	if err != nil || a.status != 200 {
		return out, a, err
	}
	return out, a, decode(fmt.Sprintf("authorise %s attempt %d", id, attempt), a, &out)
}

// member finds rollout id in a list of session summaries.
func member(list []protocol.SessionSummary, id string) (protocol.SessionSummary, bool) {
	for _, s := range list {
		if s.RolloutID == id {
			return s, true
		}
	}
	return protocol.SessionSummary{}, false
}

// sameOutcome compares two operate answers, replay flags aside.
func sameOutcome(a, b protocol.OperateResponse) bool {
	a.Replayed, b.Replayed = false, false
	return reflect.DeepEqual(a, b)
}

// reformat re-encodes JSON with other spacing (and sorted keys), so a
// replay check proves the participant compares canonical JSON.
func reformat(raw json.RawMessage) json.RawMessage {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return raw
	}
	b, err := json.MarshalIndent(v, " ", "   ")
	if err != nil {
		return raw
	}
	return b
}
