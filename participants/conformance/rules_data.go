package conformance

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/turnstile-rl/turnstile/participants/protocol"
)

// checkReplay: R3. A re-sent mutation gets the stored answer back, marked
// replayed, without a second application.
func checkReplay(ctx context.Context, k *kit) (string, error) {
	id := k.rollout("r3")
	if _, err := k.start(ctx, k.startReq(id, 0)); err != nil {
		return "", err
	}
	s0, err := k.stats(ctx)
	if err != nil {
		return "", err
	}
	first, err := k.operate(ctx, k.opReq(id, 0, 1, 0))
	if err != nil {
		return "", err
	}
	s1, err := k.stats(ctx)
	if err != nil {
		return "", err
	}
	if s1.Applied != s0.Applied+1 || first.Replayed || first.Revision != 1 {
		return "", fmt.Errorf("first operate: answer %+v, applied %d → %d; want revision 1, applied +1", first, s0.Applied, s1.Applied)
	}
	again := k.opReq(id, 0, 1, 0)
	again.Arguments = reformat(again.Arguments)
	for i := range 2 {
		r, err := k.operate(ctx, again)
		if err != nil {
			return "", fmt.Errorf("re-send %d of %s (same request id and body, reformatted arguments) was not answered from its receipt: %w", i+1, again.RequestID, err)
		}
		if !r.Replayed || !sameOutcome(r, first) {
			return "", fmt.Errorf("re-send %d of %s answered %+v, want the stored %+v with replayed:true", i+1, again.RequestID, r, first)
		}
	}
	st, err := k.start(ctx, k.startReq(id, 0))
	if err != nil {
		return "", err
	}
	if !st.Replayed || st.Revision != 0 {
		return "", fmt.Errorf("re-sent start answered revision %d replayed %v, want the stored answer, replayed", st.Revision, st.Replayed)
	}
	s2, err := k.stats(ctx)
	if err != nil {
		return "", err
	}
	if s2.Applied != s1.Applied || s2.Replayed != s1.Replayed+3 {
		return "", fmt.Errorf("replays changed applied %d → %d and replayed %d → %d; want applied unchanged, replayed +3", s1.Applied, s2.Applied, s1.Replayed, s2.Replayed)
	}
	if err := k.wantSession(ctx, id, 0, 1, false); err != nil {
		return "", err
	}
	dropped, err := k.receiptsDropped(ctx)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("operate applied once (applied +1, revision 1, observation %q); re-sent twice with reformatted arguments → the stored answer with replayed:true; start re-sent → replayed; applied unchanged, replayed +3, session at revision 1; %s",
		truncate(first.Outcome.Observation, 60), dropped), nil
}

// receiptsDropped verifies one session more than the participant keeps
// the receipts of (Config.RetiredSessions): the oldest one's requests are
// then refused session_retired, never applied again, and its info stays.
func (k *kit) receiptsDropped(ctx context.Context) (string, error) {
	n := k.cfg.RetiredSessions
	if n == 0 {
		return "receipts dropped after verify not driven (the participant's bound on verified sessions not given: --retired-sessions)", nil
	}
	ids := make([]string, n+1)
	for i := range ids {
		ids[i] = k.rollout(fmt.Sprintf("r3-drop-%d", i))
		if _, err := k.start(ctx, k.startReq(ids[i], 0)); err != nil {
			return "", err
		}
		var v protocol.VerifyResponse
		a, err := k.do(ctx, protocol.RouteVerify, ids[i], k.dataAuth(), verifyReq(ids[i], 0, 0))
		if err != nil {
			return "", err
		}
		if err := decode("verify of "+ids[i], a, &v); err != nil {
			return "", err
		}
	}
	before, err := k.stats(ctx)
	if err != nil {
		return "", err
	}
	oldest := ids[0]
	for _, c := range []struct {
		what, route, id string
		body            any
	}{
		{"the verify of the oldest verified session re-sent, its receipts dropped", protocol.RouteVerify, oldest, verifyReq(oldest, 0, 0)},
		{"the start of the oldest verified session re-sent, its receipts dropped", protocol.RouteStart, "", k.startReq(oldest, 0)},
	} {
		if err := k.refused(ctx, c.what, c.route, c.id, c.body, http.StatusConflict, protocol.CodeSessionRetired); err != nil {
			return "", err
		}
	}
	if _, err := k.sameStats(ctx, "requests of a session whose receipts were dropped", before); err != nil {
		return "", err
	}
	if err := k.wantSession(ctx, oldest, 0, 0, true); err != nil {
		return "", fmt.Errorf("after its receipts were dropped: %w", err)
	}
	return fmt.Sprintf("%d sessions verified, one more than the %d whose receipts are kept: the oldest's verify and start re-sent → 409 session_retired, nothing applied, its info still answered (retired)", n+1, n), nil
}

// checkConflict: R4. A request id reused with another body is refused.
func checkConflict(ctx context.Context, k *kit) (string, error) {
	id := k.rollout("r4")
	if _, err := k.began(ctx, id, 1); err != nil {
		return "", err
	}
	before, err := k.stats(ctx)
	if err != nil {
		return "", err
	}
	otherTool := k.opReq(id, 0, 1, 0)
	otherTool.Tool = "conformance-other-tool"
	otherRev := k.opReq(id, 0, 1, 0)
	otherRev.ExpectedRevision = 1
	seedAsOp := k.opReq(id, 0, 2, 1)
	seedAsOp.RequestID = protocol.SeedRequestID(id)
	secondStart := k.startReq(id, 0)
	secondStart.RequestID = id + "/seed-again"
	for _, c := range []struct {
		what, route, id string
		body            any
	}{
		{"the applied request id with another tool", protocol.RouteOperate, id, otherTool},
		{"the applied request id with another expected_revision", protocol.RouteOperate, id, otherRev},
		{"the start's request id for an operate", protocol.RouteOperate, id, seedAsOp},
		{"a second start of the same attempt under another request id", protocol.RouteStart, "", secondStart},
	} {
		if err := k.refused(ctx, c.what, c.route, c.id, c.body, http.StatusConflict, protocol.CodeRequestConflict); err != nil {
			return "", err
		}
	}
	if _, err := k.sameStats(ctx, "conflicting requests", before); err != nil {
		return "", err
	}
	if err := k.wantSession(ctx, id, 0, 1, false); err != nil {
		return "", err
	}
	return "4 reuses of a request id with another body (tool, expected_revision, start's id for an operate, a second start) → 409 request_id_conflict; nothing applied, session unchanged at revision 1", nil
}

// checkRevision: R5. expected_revision must be the session's revision; a
// refused request is not stored.
func checkRevision(ctx context.Context, k *kit) (string, error) {
	id := k.rollout("r5")
	if _, err := k.began(ctx, id, 1); err != nil {
		return "", err
	}
	before, err := k.stats(ctx)
	if err != nil {
		return "", err
	}
	if err := k.refused(ctx, "operate with expected_revision 6 at revision 1", protocol.RouteOperate, id, k.opReq(id, 0, 2, 6),
		http.StatusConflict, protocol.CodeRevisionMismatch); err != nil {
		return "", err
	}
	if err := k.refused(ctx, "verify with expected_revision 0 at revision 1", protocol.RouteVerify, id, verifyReq(id, 0, 0),
		http.StatusConflict, protocol.CodeRevisionMismatch); err != nil {
		return "", err
	}
	if _, err := k.sameStats(ctx, "revision mismatches", before); err != nil {
		return "", err
	}
	if err := k.wantSession(ctx, id, 0, 1, false); err != nil {
		return "", err
	}
	r, err := k.operate(ctx, k.opReq(id, 0, 2, 1))
	if err != nil {
		return "", fmt.Errorf("the refused request id, now with the right revision: %w", err)
	}
	if r.Replayed || r.Revision != 2 {
		return "", fmt.Errorf("the refused request id with the right revision answered %+v, want a new application at revision 2", r)
	}
	var v protocol.VerifyResponse
	a, err := k.do(ctx, protocol.RouteVerify, id, k.dataAuth(), verifyReq(id, 0, 2))
	if err != nil {
		return "", err
	}
	if err := decode("verify at revision 2", a, &v); err != nil {
		return "", err
	}
	if v.Revision != 2 {
		return "", fmt.Errorf("verify answered revision %d, want 2 (verify does not change the revision)", v.Revision)
	}
	return "operate and verify with a wrong expected_revision → 409 revision_mismatch, nothing applied; the same request id with the right revision then applies (revision 2); verify keeps revision 2", nil
}

// checkStale: R6. Below the fence everything is refused, replays too.
func checkStale(ctx context.Context, k *kit) (string, error) {
	id := k.rollout("r6")
	if _, err := k.began(ctx, id, 1); err != nil {
		return "", err
	}
	if _, a, err := k.authorise(ctx, id, 1); err != nil || a.status != http.StatusOK {
		return "", fmt.Errorf("set-up: authorise attempt 1 (R8): %v %s", err, a)
	}
	if _, err := k.start(ctx, k.startReq(id, 1)); err != nil {
		return "", fmt.Errorf("set-up: %w", err)
	}
	before, err := k.stats(ctx)
	if err != nil {
		return "", err
	}
	for _, c := range []struct {
		what, route, id string
		body            any
	}{
		{"a new operate of attempt 0", protocol.RouteOperate, id, k.opReq(id, 0, 2, 1)},
		{"the replay of attempt 0's applied operate", protocol.RouteOperate, id, k.opReq(id, 0, 1, 0)},
		{"a start of attempt 0", protocol.RouteStart, "", k.startReq(id, 0)},
		{"a verify of attempt 0", protocol.RouteVerify, id, verifyReq(id, 0, 1)},
	} {
		if err := k.refused(ctx, c.what, c.route, c.id, c.body, http.StatusConflict, protocol.CodeStaleAttempt); err != nil {
			return "", err
		}
	}
	if _, err := k.sameStats(ctx, "stale requests", before); err != nil {
		return "", err
	}
	if err := k.wantSession(ctx, id, 1, 0, false); err != nil {
		return "", err
	}
	return "with attempt 1 installed and started: operate, replay, start and verify of attempt 0 → 409 stale_attempt; nothing applied, session of attempt 1 at revision 0", nil
}

// checkNotInstalled: R7, the data-plane fence attack. A data-plane request
// above the installed attempt is refused and changes nothing; an unseen
// rollout is not even remembered.
func checkNotInstalled(ctx context.Context, k *kit) (string, error) {
	id, ghost := k.rollout("r7"), k.rollout("r7-ghost")
	if _, err := k.began(ctx, id, 1); err != nil {
		return "", err
	}
	before, err := k.stats(ctx)
	if err != nil {
		return "", err
	}
	hijack := k.startReq(id, 9)
	hijack.RequestID = "hijack/seed"
	for _, c := range []struct {
		what, route, id string
		body            any
	}{
		{"a start of attempt 9 for the live attempt-0 rollout (the attack)", protocol.RouteStart, "", hijack},
		{"a start-over of attempt 1 with the seed request id", protocol.RouteStart, "", k.startReq(id, 1)},
		{"an operate of attempt 1", protocol.RouteOperate, id, k.opReq(id, 1, 2, 1)},
		{"the replay of the applied operate from attempt 1", protocol.RouteOperate, id, k.opReq(id, 1, 1, 0)},
		{"a verify of attempt 2", protocol.RouteVerify, id, verifyReq(id, 2, 1)},
		{"a start of attempt 3 of an unseen rollout", protocol.RouteStart, "", k.startReq(ghost, 3)},
		{"an operate of attempt 1 of an unseen rollout", protocol.RouteOperate, ghost, k.opReq(ghost, 1, 1, 0)},
	} {
		if err := k.refused(ctx, c.what, c.route, c.id, c.body, http.StatusConflict, protocol.CodeAttemptNotInstalled); err != nil {
			return "", err
		}
	}
	if _, err := k.sameStats(ctx, "requests above the installed attempt", before); err != nil {
		return "", err
	}
	if err := k.wantSession(ctx, id, 0, 1, false); err != nil {
		return "", fmt.Errorf("after the attack: %w", err)
	}
	if err := k.wantNoSession(ctx, ghost); err != nil {
		return "", err
	}
	if r, err := k.operate(ctx, k.opReq(id, 0, 2, 1)); err != nil || r.Revision != 2 {
		return "", fmt.Errorf("the real attempt 0 after the attack: %+v, %v", r, err)
	}
	if _, err := k.start(ctx, k.startReq(ghost, 0)); err != nil {
		return "", fmt.Errorf("attempt 0 of the unseen rollout after refused higher attempts (was it remembered?): %w", err)
	}
	return "start of attempt 9 for a live attempt-0 rollout, start/operate/replay/verify from attempts 1-2, and starts/operates of attempts 1-3 of an unseen rollout → 409 attempt_not_installed; nothing applied, the live session stayed attempt 0 and its next operate applied; the unseen rollout was not remembered (attempt 0 still starts)", nil
}

// checkVerifyTerminal: R10. Verify retires the session; its own request
// replays.
func checkVerifyTerminal(ctx context.Context, k *kit) (string, error) {
	id := k.rollout("r10")
	if _, err := k.began(ctx, id, 1); err != nil {
		return "", err
	}
	var first protocol.VerifyResponse
	a, err := k.do(ctx, protocol.RouteVerify, id, k.dataAuth(), verifyReq(id, 0, 1))
	if err != nil {
		return "", err
	}
	if err := decode("verify", a, &first); err != nil {
		return "", err
	}
	otherVerify := verifyReq(id, 0, 1)
	otherVerify.RequestID = id + "/verify-again"
	otherStart := k.startReq(id, 0)
	otherStart.RequestID = id + "/seed-again"
	for _, c := range []struct {
		what, route, id string
		body            any
	}{
		{"an operate after verify", protocol.RouteOperate, id, k.opReq(id, 0, 2, 1)},
		{"a verify under another request id", protocol.RouteVerify, id, otherVerify},
		{"a start of the same attempt under another request id", protocol.RouteStart, "", otherStart},
	} {
		if err := k.refused(ctx, c.what, c.route, c.id, c.body, http.StatusConflict, protocol.CodeSessionRetired); err != nil {
			return "", err
		}
	}
	var again protocol.VerifyResponse
	a, err = k.do(ctx, protocol.RouteVerify, id, k.dataAuth(), verifyReq(id, 0, 1))
	if err != nil {
		return "", err
	}
	if err := decode("verify re-sent", a, &again); err != nil {
		return "", err
	}
	if !again.Replayed || again.Revision != first.Revision || again.Verdict.Reward != first.Verdict.Reward {
		return "", fmt.Errorf("verify re-sent answered %+v, want the stored verdict %+v with replayed:true", again, first)
	}
	if err := k.wantSession(ctx, id, 0, 1, true); err != nil {
		return "", err
	}
	return fmt.Sprintf("after verify (reward %v): operate, another verify and another start → 409 session_retired; the verify re-sent → the stored verdict, replayed; session retired at revision 1", first.Verdict.Reward), nil
}

// checkMalformed: R15. Bad bodies are refused 400 and change nothing.
func checkMalformed(ctx context.Context, k *kit) (string, error) {
	id := k.rollout("r15")
	if _, err := k.began(ctx, id, 1); err != nil {
		return "", err
	}
	before, err := k.stats(ctx)
	if err != nil {
		return "", err
	}
	op := func(fields string) []byte {
		return []byte(fmt.Sprintf(`{"rollout_id":%q,%s}`, id, fields))
	}
	tool, args := k.cfg.Tool, string(k.cfg.Args)
	rest := fmt.Sprintf(`"expected_revision":1,"tool":%q,"arguments":%s`, tool, args)
	cases := []struct {
		what, route string
		body        []byte
	}{
		{"an unknown field", protocol.RouteOperate, op(`"attempt":0,"request_id":"x",` + rest + `,"bogus":1`)},
		{"no attempt", protocol.RouteOperate, op(`"request_id":"x",` + rest)},
		{"a negative attempt", protocol.RouteOperate, op(`"attempt":-1,"request_id":"x",` + rest)},
		{"an attempt that is a string", protocol.RouteOperate, op(`"attempt":"0","request_id":"x",` + rest)},
		{"an attempt of 0.0", protocol.RouteOperate, op(`"attempt":0.0,"request_id":"x",` + rest)},
		{"an expected_revision of 1.0", protocol.RouteOperate, op(fmt.Sprintf(`"attempt":0,"request_id":"x","expected_revision":1.0,"tool":%q,"arguments":%s`, tool, args))},
		{"a seed of 1e0", protocol.RouteStart, []byte(fmt.Sprintf(`{"rollout_id":"%s-new","attempt":0,"request_id":"s","env":%q,"seed":1e0,"task":%s}`, id, k.cfg.Env, k.cfg.Task))},
		{"an empty request id", protocol.RouteOperate, op(`"attempt":0,"request_id":"",` + rest)},
		{"no expected_revision", protocol.RouteOperate, op(fmt.Sprintf(`"attempt":0,"request_id":"x","tool":%q,"arguments":%s`, tool, args))},
		{"trailing data", protocol.RouteOperate, append(op(`"attempt":0,"request_id":"x",`+rest), []byte(` {}`)...)},
		{"a body that is no JSON object", protocol.RouteOperate, []byte(`{"rollout_id":`)},
		{"an array", protocol.RouteOperate, []byte(`[]`)},
		{"another rollout than the path's", protocol.RouteOperate, []byte(fmt.Sprintf(`{"rollout_id":"%s-other","attempt":0,"request_id":"x",%s}`, id, rest))},
		{"a start without env", protocol.RouteStart, []byte(fmt.Sprintf(`{"rollout_id":"%s-new","attempt":0,"request_id":"s"}`, id))},
		{"a start without rollout_id", protocol.RouteStart, []byte(fmt.Sprintf(`{"attempt":0,"request_id":"s","env":%q}`, k.cfg.Env))},
		{"a verify without expected_revision", protocol.RouteVerify, op(`"attempt":0,"request_id":"v"`)},
	}
	for _, c := range cases {
		if err := k.refused(ctx, c.what, c.route, id, c.body, http.StatusBadRequest, protocol.CodeMalformed); err != nil {
			return "", err
		}
	}
	if _, err := k.sameStats(ctx, "malformed requests", before); err != nil {
		return "", err
	}
	if err := k.wantSession(ctx, id, 0, 1, false); err != nil {
		return "", err
	}
	if err := k.wantNoSession(ctx, id+"-new"); err != nil {
		return "", err
	}
	if err := k.oversize(ctx, id); err != nil {
		return "", err
	}
	return fmt.Sprintf("%d malformed bodies (unknown field, missing/negative/string/fractional attempt, fractional expected_revision and seed, empty request id, missing expected_revision, trailing data, not an object, path mismatch, start without env or rollout_id) → 400 malformed_request; bodies of 16 MiB + 1 byte to a mutation and to prepare → 400 malformed_request; nothing applied, session unchanged, phase idle", len(cases)), nil
}

// maxBody is the largest body a participant reads (R15).
const maxBody = 16 << 20

// oversize sends bodies one byte over the bound, to a mutation and to a
// control operation: each → 400 malformed_request, nothing changes.
func (k *kit) oversize(ctx context.Context, id string) error {
	before, err := k.stats(ctx)
	if err != nil {
		return err
	}
	// A JSON object the participant would take, padded with spaces inside
	// (JSON whitespace) to one byte over the bound.
	body := func(fields string) []byte {
		b := make([]byte, maxBody+1)
		copy(b, "{")
		for i := 1; i < len(b)-len(fields)-1; i++ {
			b[i] = ' '
		}
		copy(b[len(b)-len(fields)-1:], fields+"}")
		return b
	}
	op := body(fmt.Sprintf(`"rollout_id":%q,"attempt":0,"request_id":%q,"expected_revision":1,"tool":%q,"arguments":%s`,
		id, opID(id, 2), k.cfg.Tool, k.cfg.Args))
	a, err := k.postOversize(ctx, protocol.RouteOperate, id, k.dataAuth(), op)
	if err != nil {
		return err
	}
	if err := want("an operate of 16 MiB + 1 byte", a, http.StatusBadRequest, protocol.CodeMalformed); err != nil {
		return err
	}
	a, err = k.postOversize(ctx, protocol.RouteControlPrepare, "", k.controlAuth(), body(fmt.Sprintf(`"checkpoint_id":%q,"deadline":%q`,
		k.checkpointID("k15"), future().Format(time.RFC3339Nano))))
	if err != nil {
		return err
	}
	if err := want("a prepare of 16 MiB + 1 byte", a, http.StatusBadRequest, protocol.CodeMalformed); err != nil {
		return err
	}
	if err := k.wantPhase(ctx, protocol.PhaseIdle, protocol.AdmissionOpen); err != nil {
		return fmt.Errorf("after an over-size prepare: %w", err)
	}
	if _, err := k.sameStats(ctx, "over-size bodies", before); err != nil {
		return err
	}
	return k.wantSession(ctx, id, 0, 1, false)
}
