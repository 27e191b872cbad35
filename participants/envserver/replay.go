package envserver

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"

	"go.uber.org/zap"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/participants/protocol"
)

// divergence is why a replay did not rebuild a session (RULES.md R27): the
// rollout starts over as a restart-only one would. It is no error of the
// restore, which installs the rollout's fence alone.
type divergence struct{ reason string }

func (d *divergence) Error() string { return "replay diverged: " + d.reason }

func diverge(format string, args ...any) error {
	return &divergence{reason: fmt.Sprintf(format, args...)}
}

// replayStep is one recorded mutation of a replay log.
type replayStep struct {
	requestID string
	revision  int64
	r         receipt
}

// replaySession rebuilds the live session of a replay environment from its
// record's receipts (the replay log): a fresh Start with the recorded seed
// and task, then every applied operation in revision order, each answer
// compared byte for byte with the recorded one. It returns sess holding
// the rebuilt session, or a *divergence (the fresh session closed) when
// the log is incomplete or any answer differs. Mutations re-applied count
// in Stats as reapplied, never as applied.
func (s *Server) replaySession(rec sessionRecord, sess *session) (*session, error) {
	start, ops, err := replayLog(rec)
	if err != nil {
		return nil, err
	}
	var sr protocol.StartRequest
	if err := json.Unmarshal(start.r.Request, &sr); err != nil {
		return nil, diverge("start request %q: %v", start.requestID, err)
	}
	env := s.envs[rec.Env]
	live, st, err := env.Start(sr.Seed, sr.Task)
	s.reapplied.Add(1)
	if err != nil {
		return nil, diverge("start %q: the environment refused it (%v), the recorded start succeeded", start.requestID, err)
	}
	fail := func(err error) (*session, error) {
		if cerr := live.Close(); cerr != nil {
			s.log.Warn("close diverged replay session", zap.String("rollout_id", rec.RolloutID), zap.Error(cerr))
		}
		return nil, err
	}
	out, err := json.Marshal(protocol.StartResponse{Revision: 0, Spec: s.specOf(rec.Env), Start: st})
	if err != nil {
		return fail(diverge("encode start %q: %v", start.requestID, err))
	}
	if !bytes.Equal(out, start.r.Response) {
		return fail(diverge("start %q answered %s, recorded %s", start.requestID, clip(out), clip(start.r.Response)))
	}
	for _, op := range ops {
		var or protocol.OperateRequest
		if err := json.Unmarshal(op.r.Request, &or); err != nil {
			return fail(diverge("operate request %q: %v", op.requestID, err))
		}
		outcome, err := live.Apply(or.Tool, or.Arguments)
		s.reapplied.Add(1)
		if err != nil {
			return fail(diverge("operate %q (revision %d): the environment refused it (%v), the recorded one applied", op.requestID, op.revision, err))
		}
		out, err := json.Marshal(protocol.OperateResponse{Revision: op.revision, Outcome: outcome})
		if err != nil {
			return fail(diverge("encode operate %q: %v", op.requestID, err))
		}
		if !bytes.Equal(out, op.r.Response) {
			return fail(diverge("operate %q (revision %d) answered %s, recorded %s", op.requestID, op.revision, clip(out), clip(op.r.Response)))
		}
	}
	sess.live = live
	return sess, nil
}

// replayLog orders a live record's receipts into its replay log: the start,
// then one operation per revision 1..Revision. A receipt without its
// request, or one whose request does not hash to its digest, or a gap in
// the revisions, is a divergence: the log cannot rebuild the session.
func replayLog(rec sessionRecord) (replayStep, []replayStep, error) {
	var start *replayStep
	var ops []replayStep
	ids := make([]string, 0, len(rec.Receipts))
	for id := range rec.Receipts {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		r := rec.Receipts[id]
		if len(r.Request) == 0 {
			return replayStep{}, nil, diverge("receipt %q holds no request (cut while the environment was not served in replay mode)", id)
		}
		if digestOf(r.Kind, r.Request) != r.Digest {
			return replayStep{}, nil, diverge("receipt %q: its request does not match its digest", id)
		}
		switch r.Kind {
		case kindStart:
			if start != nil {
				return replayStep{}, nil, diverge("two starts, %q and %q", start.requestID, id)
			}
			start = &replayStep{requestID: id, r: r}
		case kindOperate:
			var resp protocol.OperateResponse
			if err := json.Unmarshal(r.Response, &resp); err != nil {
				return replayStep{}, nil, diverge("receipt %q: %v", id, err)
			}
			ops = append(ops, replayStep{requestID: id, revision: resp.Revision, r: r})
		default:
			return replayStep{}, nil, diverge("receipt %q of a live session is a %s", id, r.Kind)
		}
	}
	if start == nil {
		return replayStep{}, nil, diverge("no start")
	}
	sort.Slice(ops, func(i, j int) bool { return ops[i].revision < ops[j].revision })
	for i, op := range ops {
		if op.revision != int64(i+1) {
			return replayStep{}, nil, diverge("operations at revisions %s, want 1..%d", revisions(ops), rec.Revision)
		}
	}
	if int64(len(ops)) != rec.Revision {
		return replayStep{}, nil, diverge("%d operations recorded for revision %d", len(ops), rec.Revision)
	}
	return *start, ops, nil
}

func revisions(ops []replayStep) string {
	var b bytes.Buffer
	for i, op := range ops {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprint(&b, op.revision)
	}
	return b.String()
}

// clip shortens an answer for a divergence message.
func clip(b []byte) string {
	const n = 160
	if len(b) <= n {
		return string(b)
	}
	return string(b[:n]) + "…"
}

// replayMode reports whether env is served in replay mode.
func (s *Server) replayMode(env string) bool { return s.modes[env] == envs.ModeReplay }

// divertDiverged moves the replay sessions whose replay diverged from the
// restored to the restarted list of a restore's answer, each with why: only
// their fence was installed, and they start over.
func divertDiverged(ans protocol.RestoreResponse, diverged map[string]string) protocol.RestoreResponse {
	if len(diverged) == 0 {
		return ans
	}
	kept := make([]protocol.SessionSummary, 0, len(ans.Restored))
	for _, sum := range ans.Restored {
		if why, ok := diverged[sum.RolloutID]; ok {
			sum.Diverged = why
			ans.Restarted = append(ans.Restarted, sum)
			continue
		}
		kept = append(kept, sum)
	}
	ans.Restored = kept
	sort.Slice(ans.Restarted, func(i, j int) bool { return ans.Restarted[i].RolloutID < ans.Restarted[j].RolloutID })
	return ans
}
