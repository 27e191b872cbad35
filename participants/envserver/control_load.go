package envserver

import (
	"context"
	"sort"
	"strings"

	"github.com/turnstile-rl/turnstile/internal/artifact"
	"github.com/turnstile-rl/turnstile/participants/protocol"
)

// savedCut is an environment server's checkpoint, read and checked.
type savedCut struct {
	byID   map[string]*sessionRecord // sessions with their receipts
	order  []string                  // rollout ids of the sessions, in checkpoint order
	fences map[string]int            // highest attempt of every rollout the server had seen
}

// cutReader reads the sections of one checkpoint, refusing it as
// invalid_checkpoint at the first record that does not check.
type cutReader struct {
	ctx context.Context
	cp  *artifact.Checkpoint
	id  string
}

func (r cutReader) section(name string) ([]artifact.Record, error) {
	recs, err := r.cp.Section(r.ctx, name)
	if err != nil {
		return nil, invalidCheckpoint(r.id, "read section %s: %v", name, err)
	}
	return recs, nil
}

// loadCheckpoint reads and checks every record of a validated checkpoint and
// maps it onto the new attempts. It changes nothing.
func (s *Server) loadCheckpoint(ctx context.Context, cp *artifact.Checkpoint, attempts map[string]int) (serverState, protocol.RestoreResponse, error) {
	r := cutReader{ctx: ctx, cp: cp, id: cp.Manifest().CheckpointID}
	cut, err := r.read()
	if err != nil {
		return serverState{}, protocol.RestoreResponse{}, err
	}
	ids := make([]string, 0, len(attempts))
	for rid := range attempts {
		ids = append(ids, rid)
	}
	sort.Strings(ids)
	if err := s.checkNewAttempts(r.id, cut, attempts, ids); err != nil {
		return serverState{}, protocol.RestoreResponse{}, err
	}
	st, ans := s.mapOntoAttempts(cut, attempts, ids)
	return st, ans, nil
}

// read reads the server record first (it says how to read the rest), then
// the sessions, their receipts and the fences.
func (r cutReader) read() (*savedCut, error) {
	want := []string{protocol.SectionFences, protocol.SectionReceipts, protocol.SectionServer, protocol.SectionSessions}
	if got := r.cp.Sections(); strings.Join(got, ",") != strings.Join(want, ",") {
		return nil, invalidCheckpoint(r.id, "sections %v, want exactly %v (not an environment server checkpoint of schema %d)", got, want, protocol.ControlSchemaVersion)
	}
	if err := r.checkServerRecord(); err != nil {
		return nil, err
	}
	cut, err := r.readSessions()
	if err != nil {
		return nil, err
	}
	if err := r.readReceipts(cut); err != nil {
		return nil, err
	}
	if cut.fences, err = r.readFences(); err != nil {
		return nil, err
	}
	return cut, nil
}

func (r cutReader) checkServerRecord() error {
	recs, err := r.section(protocol.SectionServer)
	if err != nil {
		return err
	}
	if len(recs) != 1 || recs[0].Key != protocol.ServerRecordKey {
		return invalidCheckpoint(r.id, "section %s must hold exactly the record %q", protocol.SectionServer, protocol.ServerRecordKey)
	}
	var srv checkpointServerRecord
	if err := decodeStrictJSON(recs[0].Data, &srv); err != nil {
		return invalidCheckpoint(r.id, "server record: %v", err)
	}
	if srv.Schema != protocol.ControlSchemaVersion || srv.Component != protocol.ComponentEnvironmentServer {
		return invalidCheckpoint(r.id, "unknown record schema %d of component %q (this server reads schema %d of %q)",
			srv.Schema, srv.Component, protocol.ControlSchemaVersion, protocol.ComponentEnvironmentServer)
	}
	return nil
}

// readSessions reads the sessions, keyed by rollout id.
func (r cutReader) readSessions() (*savedCut, error) {
	recs, err := r.section(protocol.SectionSessions)
	if err != nil {
		return nil, err
	}
	cut := &savedCut{byID: map[string]*sessionRecord{}}
	for _, rec := range recs {
		var cs checkpointSession
		if err := decodeStrictJSON(rec.Data, &cs); err != nil {
			return nil, invalidCheckpoint(r.id, "session %q: %v", rec.Key, err)
		}
		if cs.RolloutID != rec.Key {
			return nil, invalidCheckpoint(r.id, "session record %q holds rollout %q", rec.Key, cs.RolloutID)
		}
		cut.byID[cs.RolloutID] = &sessionRecord{RolloutID: cs.RolloutID, Env: cs.Env, Attempt: cs.Attempt, Revision: cs.Revision,
			Retired: cs.Retired, Receipts: map[string]receipt{}, State: cs.State, IdleSince: cs.IdleSince}
		cut.order = append(cut.order, cs.RolloutID)
	}
	return cut, nil
}

// readReceipts attaches the receipts to their sessions.
func (r cutReader) readReceipts(cut *savedCut) error {
	recs, err := r.section(protocol.SectionReceipts)
	if err != nil {
		return err
	}
	for _, rec := range recs {
		var cr checkpointReceipt
		if err := decodeStrictJSON(rec.Data, &cr); err != nil {
			return invalidCheckpoint(r.id, "receipt %s: %v", rec.Key, err)
		}
		key, err := receiptKey(cr.RolloutID, cr.RequestID)
		if err != nil || key != rec.Key {
			return invalidCheckpoint(r.id, "receipt record %s holds %q/%q", rec.Key, cr.RolloutID, cr.RequestID)
		}
		sess, ok := cut.byID[cr.RolloutID]
		if !ok {
			return invalidCheckpoint(r.id, "receipt %s belongs to no session", rec.Key)
		}
		sess.Receipts[cr.RequestID] = cr.receipt
	}
	return nil
}

// readFences reads the fences of every rollout the server had seen.
func (r cutReader) readFences() (map[string]int, error) {
	recs, err := r.section(protocol.SectionFences)
	if err != nil {
		return nil, err
	}
	fences := map[string]int{}
	for _, rec := range recs {
		var cf checkpointFence
		if err := decodeStrictJSON(rec.Data, &cf); err != nil {
			return nil, invalidCheckpoint(r.id, "fence %q: %v", rec.Key, err)
		}
		if cf.RolloutID != rec.Key || cf.Fence < 0 {
			return nil, invalidCheckpoint(r.id, "fence record %q holds %q=%d", rec.Key, cf.RolloutID, cf.Fence)
		}
		fences[cf.RolloutID] = cf.Fence
	}
	return fences, nil
}

// checkNewAttempts refuses a restore unless each new attempt is above
// everything the checkpoint and this server have seen of the rollout, so
// attempt N is refused from now on and no attempt runs twice.
func (s *Server) checkNewAttempts(checkpointID string, cut *savedCut, attempts map[string]int, ids []string) error {
	for _, rid := range ids {
		newA := attempts[rid]
		floor, seen := cut.fences[rid]
		if sess, ok := cut.byID[rid]; ok {
			floor, seen = max(floor, sess.Attempt), true
		}
		if cur, ok := s.currentFence(rid); ok {
			floor, seen = max(floor, cur), true
		}
		if seen && newA <= floor {
			return refuse(protocol.CodeStaleAttempt,
				"restore of checkpoint %q: new attempt %d of rollout %q is not above attempt %d already saved or seen", checkpointID, newA, rid, floor)
		}
	}
	return nil
}

// mapOntoAttempts builds the state a restore installs and the answer naming
// what it does with each rollout. Only the named rollouts' fences are
// installed: the checkpoint's other fences belong to rollouts this restore
// does not own.
func (s *Server) mapOntoAttempts(cut *savedCut, attempts map[string]int, ids []string) (serverState, protocol.RestoreResponse) {
	ans := protocol.RestoreResponse{Restored: []protocol.SessionSummary{}, Restarted: []protocol.SessionSummary{}}
	st := serverState{Sessions: make([]sessionRecord, 0, len(cut.order)), Fences: map[string]int{}}
	for _, rid := range ids {
		st.Fences[rid] = attempts[rid]
	}
	for _, rid := range cut.order {
		rec := *cut.byID[rid]
		newA, named := attempts[rid]
		switch {
		case named:
			rec.Attempt = newA
		case rec.Retired && !s.knows(rid):
			// A verdict the server lost with its process: installed as
			// saved, so a retried verify still gets it. A server that
			// knows the rollout keeps what it holds.
			if f, ok := cut.fences[rid]; ok {
				st.Fences[rid] = f
			}
		default:
			ans.Untouched = append(ans.Untouched, rid)
			continue
		}
		sum := protocol.SessionSummary{RolloutID: rid, Attempt: rec.Attempt, Revision: rec.Revision, Env: rec.Env, Mode: s.modeOf(rec.Env), Retired: rec.Retired}
		if !rec.Retired && len(rec.State) == 0 && !s.replayMode(rec.Env) {
			// Not exportable: only the fence is installed and the rollout
			// starts over as the new attempt. (A replay session is listed
			// restored here; restore moves it to restarted if its replay
			// diverges.)
			ans.Restarted = append(ans.Restarted, sum)
		} else {
			ans.Restored = append(ans.Restored, sum)
		}
		st.Sessions = append(st.Sessions, rec)
	}
	for _, rid := range ids {
		if _, ok := cut.byID[rid]; !ok {
			ans.Fenced = append(ans.Fenced, protocol.FenceSummary{RolloutID: rid, Attempt: attempts[rid]})
		}
	}
	return st, ans
}
