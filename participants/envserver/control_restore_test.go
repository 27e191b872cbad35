package envserver_test

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/envs/counter"
	"github.com/turnstile-rl/turnstile/internal/artifact"
	"github.com/turnstile-rl/turnstile/internal/failpoint"
	"github.com/turnstile-rl/turnstile/internal/testsupport/artifactedit"
	"github.com/turnstile-rl/turnstile/internal/testsupport/envtest"
	"github.com/turnstile-rl/turnstile/participants/envserver"
	"github.com/turnstile-rl/turnstile/participants/protocol"
)

// armed returns a failpoint set whose point name counts its passes instead
// of killing the process.
func armed(t *testing.T, name string, hits *int) func(*envserver.ServerConfig) {
	t.Helper()
	fps, err := failpoint.Parse(name + "=kill@1")
	require.NoError(t, err)
	fps.SetKill(func() { *hits++ })
	return func(c *envserver.ServerConfig) { c.Failpoints = fps }
}

// source is a committed checkpoint and what the test needs to know of it.
type source struct {
	dir    string
	id     string
	commit protocol.CommitResponse
	// lastA is the stored response of rollout a's last mutation before the
	// cut.
	lastA protocol.OperateResponse
	// verdict of the verified rollout "done".
	verdict protocol.VerifyResponse
}

// committedCheckpoint runs rollouts on a server and commits checkpoint
// "ck": a (counter, two mutations, attempt 0), done (counter, verified) and r
// (restart-only, one mutation).
func committedCheckpoint(t *testing.T) source {
	t.Helper()
	ctx := context.Background()
	var hits int
	f := newCtlFixture(t, armed(t, failpoint.CheckpointBetweenFiles, &hits))
	src := source{dir: filepath.Join(t.TempDir(), "ckpt"), id: "ck"}
	f.startEnv(t, counter.Name, "a", 0)
	f.operate(t, inc("a", 0, "a/t0/c0", 0, 1))
	src.lastA = f.operate(t, inc("a", 0, "a/t1/c0", 1, 2))
	f.startEnv(t, counter.Name, "done", 0)
	f.operate(t, inc("done", 0, "done/t0/c0", 0, 1))
	v, err := f.c.Verify(ctx, protocol.VerifyRequest{Identity: envtest.ID("done", 0, protocol.VerifyRequestID("done")), ExpectedRevision: 1})
	require.NoError(t, err)
	src.verdict = v
	f.startEnv(t, "restart", "r", 0)
	f.operate(t, protocol.OperateRequest{Identity: envtest.ID("r", 0, "r/t0/c0"), Tool: counter.ToolIncrement, Arguments: json.RawMessage(`{"amount":1}`)})

	prep := f.prepare(t, src.id)
	want := []protocol.SessionSummary{
		{RolloutID: "a", Attempt: 0, Revision: 2, Env: counter.Name, Mode: "export_restore"},
		{RolloutID: "done", Attempt: 0, Revision: 1, Env: counter.Name, Mode: "export_restore", Retired: true},
		{RolloutID: "r", Attempt: 0, Revision: 1, Env: "restart", Mode: "restart_only"},
	}
	require.Equal(t, want, prep.Sessions, "prepared membership = %+v, want %+v", prep.Sessions, want)
	src.commit, err = f.cc.Commit(ctx, protocol.CommitRequest{CheckpointID: src.id, Location: src.dir})
	require.NoError(t, err, "commit")
	require.Equal(t, protocol.PhaseCommitted, src.commit.Phase, "commit = %+v", src.commit)
	require.Equal(t, 3, src.commit.Sessions, "commit = %+v", src.commit)
	require.NotEqual(t, "", src.commit.ManifestDigest, "commit = %+v", src.commit)
	require.Greater(t, src.commit.Bytes, int64(0), "commit = %+v", src.commit)
	require.Equal(t, 1, hits, "the %s failpoint was passed %d times before firing once; want the commit to pass it", failpoint.CheckpointBetweenFiles, hits)
	// A retried commit validates and answers the same.
	again, err := f.cc.Commit(ctx, protocol.CommitRequest{CheckpointID: src.id, Location: src.dir + "/"})
	require.NoError(t, err, "retried commit = %+v, %v; want %+v", again, err, src.commit)
	require.Equal(t, src.commit, again, "retried commit = %+v, %v; want %+v", again, err, src.commit)
	_, err = f.cc.Commit(ctx, protocol.CommitRequest{CheckpointID: src.id, Location: t.TempDir()})
	wantRemote(t, err, http.StatusConflict, protocol.CodeCheckpointConflict, src.dir)
	f.resume(t, src.id)
	return src
}

func TestCommitIsIdempotentAndFailsClosed(t *testing.T) {
	ctx := context.Background()
	f := newCtlFixture(t)
	f.startEnv(t, counter.Name, "a", 0)
	f.prepare(t, "c1")
	// A location holding something else is refused and the cut stays
	// prepared, so the commit can go elsewhere.
	busy := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(busy, "notes.txt"), []byte("mine"), 0o644))
	_, err := f.cc.Commit(ctx, protocol.CommitRequest{CheckpointID: "c1", Location: busy})
	wantRemote(t, err, http.StatusConflict, protocol.CodeLocationConflict, "notes.txt")
	st := f.status(t)
	require.Equal(t, protocol.PhasePrepared, st.Phase, "phase after a failed commit = %s", st.Phase)
	dir := t.TempDir()
	first, err := f.cc.Commit(ctx, protocol.CommitRequest{CheckpointID: "c1", Location: dir})
	require.NoError(t, err)
	again, err := f.cc.Commit(ctx, protocol.CommitRequest{CheckpointID: "c1", Location: dir})
	require.NoError(t, err, "retried commit = %+v, %v; want %+v", again, err, first)
	require.Equal(t, first, again, "retried commit = %+v, %v; want %+v", again, err, first)
	// The retry validates: damage since the commit is reported, not hidden.
	artifactedit.FlipByte(t, filepath.Join(dir, artifact.ShardName(protocol.SectionSessions, 0)), 512+10) // a byte of the first member's data
	_, err = f.cc.Commit(ctx, protocol.CommitRequest{CheckpointID: "c1", Location: dir})
	wantRemote(t, err, http.StatusUnprocessableEntity, protocol.CodeInvalidCheckpoint, "sha256")
}

func TestCommitRestoreCycle(t *testing.T) {
	ctx := context.Background()
	src := committedCheckpoint(t)
	var hits int
	b := newCtlFixture(t, armed(t, failpoint.RestoreAfterValidate, &hits))
	req := protocol.RestoreRequest{CheckpointID: src.id, Location: src.dir, Attempts: map[string]int{"a": 1, "r": 1}}
	res, err := b.cc.Restore(ctx, req)
	require.NoError(t, err, "restore")
	require.Equal(t, 1, hits, "the %s failpoint was not passed", failpoint.RestoreAfterValidate)
	want := protocol.RestoreResponse{
		Phase: protocol.PhaseRestored, CheckpointID: src.id, RestoreID: src.id, ManifestDigest: src.commit.ManifestDigest,
		Restored: []protocol.SessionSummary{
			{RolloutID: "a", Attempt: 1, Revision: 2, Env: counter.Name, Mode: "export_restore"},
			{RolloutID: "done", Attempt: 0, Revision: 1, Env: counter.Name, Mode: "export_restore", Retired: true},
		},
		Restarted: []protocol.SessionSummary{{RolloutID: "r", Attempt: 1, Revision: 1, Env: "restart", Mode: "restart_only"}},
	}
	require.Equal(t, want, res, "restore = %+v\nwant %+v", res, want)
	// Replayed with the same arguments, refused with others.
	again, err := b.cc.Restore(ctx, req)
	require.NoError(t, err, "retried restore = %+v, %v", again, err)
	require.Equal(t, res, again, "retried restore = %+v, %v", again, err)
	_, err = b.cc.Restore(ctx, protocol.RestoreRequest{CheckpointID: src.id, Location: src.dir, Attempts: map[string]int{"a": 2, "r": 1}})
	wantRemote(t, err, http.StatusConflict, protocol.CodeCheckpointConflict)

	// Paused until resume, even for the new attempt.
	paused := b.status(t)
	require.Equal(t, protocol.PhaseRestored, paused.Phase, "status after restore = %+v", paused)
	require.Equal(t, protocol.AdmissionClosed, paused.Admission, "status after restore = %+v", paused)
	require.Equal(t, 1, paused.Sessions, "status after restore = %+v", paused)
	_, err = b.c.Operate(ctx, inc("a", 1, "a/t2/c0", 2, 1))
	wantRemote(t, err, http.StatusServiceUnavailable, protocol.CodeParked)
	b.resume(t, src.id)

	// Attempt 0 is fenced out, for every rollout of the checkpoint.
	_, err = b.c.Operate(ctx, inc("a", 0, "a/t2/c0", 2, 1))
	wantRemote(t, err, http.StatusConflict, protocol.CodeStaleAttempt)
	_, err = b.c.Operate(ctx, protocol.OperateRequest{Identity: envtest.ID("r", 0, "r/t1/c0"), ExpectedRevision: 1, Tool: counter.ToolIncrement, Arguments: json.RawMessage(`{"amount":1}`)})
	wantRemote(t, err, http.StatusConflict, protocol.CodeStaleAttempt)
	// Attempt 1 re-sending a mutation applied before the cut gets the stored
	// response, not a second application.
	replayed := b.operate(t, inc("a", 1, "a/t1/c0", 1, 2))
	require.True(t, replayed.Replayed, "replay after restore = %+v, want %+v", replayed, src.lastA)
	require.Equal(t, src.lastA.Revision, replayed.Revision, "replay after restore = %+v, want %+v", replayed, src.lastA)
	require.Equal(t, src.lastA.Outcome, replayed.Outcome, "replay after restore = %+v, want %+v", replayed, src.lastA)
	// A changed re-send is a conflict, not an application.
	_, err = b.c.Operate(ctx, inc("a", 1, "a/t1/c0", 1, 3))
	wantRemote(t, err, http.StatusConflict, protocol.CodeRequestConflict)
	// A new mutation continues the restored state.
	next := b.operate(t, inc("a", 1, "a/t2/c0", 2, 1))
	require.False(t, next.Replayed, "new mutation after restore = %+v", next)
	require.Equal(t, int64(3), next.Revision, "new mutation after restore = %+v", next)
	// The restart-only rollout has no session: attempt 1 starts over.
	_, err = b.c.Operate(ctx, protocol.OperateRequest{Identity: envtest.ID("r", 1, "r/t1/c0"), ExpectedRevision: 1, Tool: counter.ToolIncrement, Arguments: json.RawMessage(`{"amount":1}`)})
	wantRemote(t, err, http.StatusNotFound, protocol.CodeUnknownSession)
	b.startEnv(t, "restart", "r", 1)
	info := b.info(t, "r")
	require.Equal(t, 1, info.Attempt, "restarted rollout = %+v", info)
	require.Equal(t, int64(0), info.Revision, "restarted rollout = %+v", info)
	// The verified rollout's verdict survives.
	v, err := b.c.Verify(ctx, protocol.VerifyRequest{Identity: envtest.ID("done", 0, protocol.VerifyRequestID("done")), ExpectedRevision: 1})
	require.NoError(t, err, "verdict after restore = %+v, %v", v, err)
	require.True(t, v.Replayed, "verdict after restore = %+v, %v", v, err)
	require.Equal(t, src.verdict.Verdict.Reward, v.Verdict.Reward, "verdict after restore = %+v, %v", v, err)
	require.Equal(t, string(src.verdict.Verdict.Details), string(v.Verdict.Details), "verdict after restore = %+v, %v", v, err)
	// Applied: only the new mutation and the start-over.
	st := b.stats(t)
	require.Equal(t, int64(2), st.Applied, "stats after restore = %+v", st)
}

// --- checkpoint surgery ---

// rewriteRecords writes a new, well-formed checkpoint whose records are
// edit's output (nil drops the section), so the check reached is the
// server's own.
func rewriteRecords(t *testing.T, from, id string, edit func(section string, recs []artifact.Record) []artifact.Record) string {
	t.Helper()
	ctx := context.Background()
	cp, err := artifact.Open(ctx, from, id)
	require.NoError(t, err)
	var secs []artifact.Section
	for _, name := range cp.Sections() {
		recs, err := cp.Section(ctx, name)
		require.NoError(t, err)
		if out := edit(name, recs); out != nil { // nil drops the section
			secs = append(secs, artifact.Section{Name: name, Records: out})
		}
	}
	to := filepath.Join(t.TempDir(), "ckpt")
	_, err = artifact.Write(ctx, to, artifact.Meta{CheckpointID: id, Labels: cp.Manifest().Labels}, secs, artifact.Options{})
	require.NoError(t, err)
	return to
}

// editJSON rewrites the record with key in section with fn over its JSON.
func editJSON(section, key string, fn func(map[string]any)) func(string, []artifact.Record) []artifact.Record {
	return func(name string, recs []artifact.Record) []artifact.Record {
		if name != section {
			return recs
		}
		for i, r := range recs {
			if r.Key == key {
				var v map[string]any
				if err := json.Unmarshal(r.Data, &v); err != nil {
					panic(err)
				}
				fn(v)
				recs[i].Data = must(json.Marshal(v))
			}
		}
		return recs
	}
}

// serverView is what a failed restore must leave exactly as it was.
type serverView struct {
	Status   protocol.ControlStatus
	Sessions map[string]protocol.SessionInfo
	Applied  int64
}

func viewOf(t *testing.T, f *ctlFixture, rollouts ...string) serverView {
	t.Helper()
	v := serverView{Status: f.status(t), Sessions: map[string]protocol.SessionInfo{}, Applied: f.stats(t).Applied}
	for _, r := range rollouts {
		info, err := f.c.Session(context.Background(), r)
		var re *protocol.RemoteError
		if errors.As(err, &re) && re.Code == protocol.CodeUnknownSession {
			continue
		}
		require.NoError(t, err)
		v.Sessions[r] = info
	}
	return v
}

// TestFailedRestoreInstallsNothing: every kind of bad checkpoint or request
// is refused with an error naming the problem, and the server is left
// exactly as before; the good checkpoint then restores on the same server.
func TestFailedRestoreInstallsNothing(t *testing.T) {
	src := committedCheckpoint(t)
	sessions0 := artifact.ShardName(protocol.SectionSessions, 0)
	good := map[string]int{"a": 1, "r": 1}
	cases := []struct {
		name     string
		dir      func(t *testing.T) string // the checkpoint to restore
		id       string                    // "" means src.id
		attempts map[string]int            // nil means good
		status   int
		code     string
		contains string
	}{
		{"corrupt shard", func(t *testing.T) string {
			d := artifactedit.CopyDir(t, src.dir)
			artifactedit.FlipByte(t, filepath.Join(d, sessions0), 512+10) // a byte of the first member's data
			return d
		}, "", nil, http.StatusUnprocessableEntity, protocol.CodeInvalidCheckpoint, "sha256"},
		{"truncated shard", func(t *testing.T) string {
			d := artifactedit.CopyDir(t, src.dir)
			require.NoError(t, os.Truncate(filepath.Join(d, sessions0), 512))
			return d
		}, "", nil, http.StatusUnprocessableEntity, protocol.CodeInvalidCheckpoint, sessions0},
		{"torn commit without manifest", func(t *testing.T) string {
			d := artifactedit.CopyDir(t, src.dir)
			require.NoError(t, os.Remove(filepath.Join(d, artifact.ManifestName)))
			return d
		}, "", nil, http.StatusUnprocessableEntity, protocol.CodeInvalidCheckpoint, "manifest"},
		{"extra file", func(t *testing.T) string {
			d := artifactedit.CopyDir(t, src.dir)
			require.NoError(t, os.WriteFile(filepath.Join(d, artifact.ShardName(protocol.SectionSessions, 1)), nil, 0o644))
			return d
		}, "", nil, http.StatusUnprocessableEntity, protocol.CodeInvalidCheckpoint, artifact.ShardName(protocol.SectionSessions, 1)},
		{"extra member", func(t *testing.T) string {
			d := artifactedit.CopyDir(t, src.dir)
			artifactedit.RewriteShard(t, d, sessions0, func(ms []artifactedit.Member) []artifactedit.Member {
				extra := *ms[0].Hdr
				extra.Name = artifact.MemberName("intruder")
				return append(ms, artifactedit.Member{Hdr: &extra, Data: ms[0].Data})
			})
			return d
		}, "", nil, http.StatusUnprocessableEntity, protocol.CodeInvalidCheckpoint, "extra member"},
		{"symlink member", func(t *testing.T) string {
			d := artifactedit.CopyDir(t, src.dir)
			artifactedit.RewriteShard(t, d, sessions0, func(ms []artifactedit.Member) []artifactedit.Member {
				ms[0].Hdr.Typeflag = tar.TypeSymlink
				ms[0].Hdr.Linkname = "/etc/passwd"
				ms[0].Hdr.Size = 0
				ms[0].Data = nil
				return ms
			})
			return d
		}, "", nil, http.StatusUnprocessableEntity, protocol.CodeInvalidCheckpoint, "symlink"},
		{"path-escape member", func(t *testing.T) string {
			d := artifactedit.CopyDir(t, src.dir)
			artifactedit.RewriteShard(t, d, sessions0, func(ms []artifactedit.Member) []artifactedit.Member {
				ms[0].Hdr.Name = "../" + ms[0].Hdr.Name
				return ms
			})
			return d
		}, "", nil, http.StatusUnprocessableEntity, protocol.CodeInvalidCheckpoint, "path escape"},
		{"symlinked shard file", func(t *testing.T) string {
			d := artifactedit.CopyDir(t, src.dir)
			elsewhere := filepath.Join(t.TempDir(), "shard.tar")
			require.NoError(t, os.Rename(filepath.Join(d, sessions0), elsewhere))
			require.NoError(t, os.Symlink(elsewhere, filepath.Join(d, sessions0)))
			return d
		}, "", nil, http.StatusUnprocessableEntity, protocol.CodeInvalidCheckpoint, "not a regular file"},
		{"wrong checkpoint id", func(*testing.T) string { return src.dir }, "other", nil,
			http.StatusUnprocessableEntity, protocol.CodeInvalidCheckpoint, "other"},
		{"unknown artifact schema", func(t *testing.T) string {
			d := artifactedit.CopyDir(t, src.dir)
			artifactedit.EditManifest(t, d, func(m *artifact.Manifest) { m.Schema = artifact.SchemaVersion + 1 })
			return d
		}, "", nil, http.StatusUnprocessableEntity, protocol.CodeInvalidCheckpoint, "schema"},
		{"unknown record schema", func(t *testing.T) string {
			return rewriteRecords(t, src.dir, src.id, editJSON(protocol.SectionServer, protocol.ServerRecordKey,
				func(v map[string]any) { v["schema"] = protocol.ControlSchemaVersion + 1 }))
		}, "", nil, http.StatusUnprocessableEntity, protocol.CodeInvalidCheckpoint, "unknown record schema 2"},
		{"unknown record field", func(t *testing.T) string {
			return rewriteRecords(t, src.dir, src.id, editJSON(protocol.SectionSessions, "a",
				func(v map[string]any) { v["surprise"] = true }))
		}, "", nil, http.StatusUnprocessableEntity, protocol.CodeInvalidCheckpoint, "surprise"},
		{"environment refuses the state", func(t *testing.T) string {
			return rewriteRecords(t, src.dir, src.id, editJSON(protocol.SectionSessions, "a",
				func(v map[string]any) { v["state"].(map[string]any)["start"] = -1 }))
		}, "", nil, http.StatusUnprocessableEntity, protocol.CodeInvalidCheckpoint, `rollout "a"`},
		{"record under another key", func(t *testing.T) string {
			return rewriteRecords(t, src.dir, src.id, editJSON(protocol.SectionSessions, "a",
				func(v map[string]any) { v["rollout_id"] = "done" }))
		}, "", nil, http.StatusUnprocessableEntity, protocol.CodeInvalidCheckpoint, "holds rollout"},
		{"receipt of no session", func(t *testing.T) string {
			return rewriteRecords(t, src.dir, src.id, func(name string, recs []artifact.Record) []artifact.Record {
				if name != protocol.SectionReceipts {
					return recs
				}
				var v map[string]any
				_ = json.Unmarshal(recs[0].Data, &v)
				v["rollout_id"] = "ghost"
				return append(recs, artifact.Record{Key: `["ghost","` + v["request_id"].(string) + `"]`, Data: must(json.Marshal(v))})
			})
		}, "", nil, http.StatusUnprocessableEntity, protocol.CodeInvalidCheckpoint, "belongs to no session"},
		{"missing section", func(t *testing.T) string {
			return rewriteRecords(t, src.dir, src.id, func(name string, recs []artifact.Record) []artifact.Record {
				if name == protocol.SectionFences {
					return nil
				}
				return recs
			})
		}, "", nil, http.StatusUnprocessableEntity, protocol.CodeInvalidCheckpoint, "want exactly"},
		{"identical rewrite (control case)", func(t *testing.T) string {
			return rewriteRecords(t, src.dir, src.id, func(name string, recs []artifact.Record) []artifact.Record { return recs })
		}, "", nil, 0, "", ""},
		{"new attempt not above the saved one", func(*testing.T) string { return src.dir }, "", map[string]int{"a": 0, "r": 1},
			http.StatusConflict, protocol.CodeStaleAttempt, `rollout "a"`},
		{"attempts name no rollout", func(*testing.T) string { return src.dir }, "", map[string]int{},
			http.StatusBadRequest, protocol.CodeMalformed, "names no rollout"},
		{"a fenced rollout's attempt not above the one seen", func(*testing.T) string { return src.dir }, "", map[string]int{"a": 1, "r": 1, "x": 0},
			http.StatusConflict, protocol.CodeStaleAttempt, `rollout "x"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			f := newCtlFixture(t)
			// The target already holds state: a diverged attempt 0 of "a"
			// and an unrelated rollout.
			f.startEnv(t, counter.Name, "a", 0)
			f.operate(t, inc("a", 0, "a/t0/c0", 0, 5))
			f.startEnv(t, counter.Name, "x", 0)
			before := viewOf(t, f, "a", "x", "done", "r")

			id, attempts := tc.id, tc.attempts
			if id == "" {
				id = src.id
			}
			if attempts == nil {
				attempts = good
			}
			_, err := f.cc.Restore(ctx, protocol.RestoreRequest{CheckpointID: id, Location: tc.dir(t), Attempts: attempts})
			if tc.code == "" {
				require.NoError(t, err, "identical rewrite")
				return
			}
			wantRemote(t, err, tc.status, tc.code, tc.contains)
			after := viewOf(t, f, "a", "x", "done", "r")
			require.Equal(t, before, after, "server changed by a failed restore:\nbefore %+v\nafter  %+v", before, after)
			// Nothing was fenced: attempt 0 still works.
			r := f.operate(t, inc("a", 0, "a/t1/c0", 1, 1))
			require.Equal(t, int64(2), r.Revision, "attempt 0 after a failed restore = %+v", r)
			// The failed restore recorded nothing: the good one goes through.
			res, err := f.cc.Restore(ctx, protocol.RestoreRequest{CheckpointID: src.id, Location: src.dir, Attempts: good})
			require.NoError(t, err, "restore after a failed one = %+v, %v", res, err)
			require.Len(t, res.Restored, 2, "restore after a failed one = %+v, %v", res, err)
			f.resume(t, src.id)
			_, err = f.c.Operate(ctx, inc("a", 0, "a/t2/c0", 2, 1))
			wantRemote(t, err, http.StatusConflict, protocol.CodeStaleAttempt)
			info := f.info(t, "a")
			require.Equal(t, 1, info.Attempt, "a after restore = %+v", info)
			require.Equal(t, int64(2), info.Revision, "a after restore = %+v", info)
		})
	}
}

// TestRestoreWaitsForQuiescence: a restore cannot install while a mutation
// runs; with a deadline it gives up, installs nothing and reopens admission.
func TestRestoreWaitsForQuiescence(t *testing.T) {
	ctx := context.Background()
	src := committedCheckpoint(t)
	f := newCtlFixture(t)
	f.startEnv(t, "block", "slow", 0)
	stuck := f.blockOp(t, "slow", 0, "slow/t0/c0", 0)
	past := time.Now().Add(-time.Second)
	_, err := f.cc.Restore(ctx, protocol.RestoreRequest{CheckpointID: src.id, Location: src.dir,
		Attempts: map[string]int{"a": 1, "r": 1}, Deadline: &past})
	wantRemote(t, err, http.StatusConflict, protocol.CodePrepareTimeout, "slow (attempt 0)")
	st := f.status(t)
	require.Equal(t, protocol.PhaseIdle, st.Phase, "status after the refused restore = %+v", st)
	require.Equal(t, protocol.AdmissionOpen, st.Admission, "status after the refused restore = %+v", st)
	require.Equal(t, 1, st.Sessions, "status after the refused restore = %+v", st)
	close(f.block.release)
	require.NoError(t, <-stuck)
	_, err = f.cc.Restore(ctx, protocol.RestoreRequest{CheckpointID: src.id, Location: src.dir, Attempts: map[string]int{"a": 1, "r": 1}})
	require.NoError(t, err, "restore once idle")
}

// liveCut takes checkpoint "k" on f (prepare, commit, resume) with:
// a (counter, two mutations, attempt 0), r (restart-only, one mutation)
// other (another set's counter, one mutation) and v (another set's,
// verified). It returns the
// checkpoint's location and a's last response before the cut.
func liveCut(t *testing.T, f *ctlFixture) (string, protocol.OperateResponse) {
	t.Helper()
	ctx := context.Background()
	f.startEnv(t, counter.Name, "a", 0)
	f.operate(t, inc("a", 0, "a/t0/c0", 0, 1))
	lastA := f.operate(t, inc("a", 0, "a/t1/c0", 1, 2))
	f.startEnv(t, "restart", "r", 0)
	f.operate(t, protocol.OperateRequest{Identity: envtest.ID("r", 0, "r/t0/c0"), Tool: counter.ToolIncrement, Arguments: json.RawMessage(`{"amount":1}`)})
	f.startEnv(t, counter.Name, "other", 0)
	f.operate(t, inc("other", 0, "other/t0/c0", 0, 1))
	f.startEnv(t, counter.Name, "v", 0)
	_, err := f.c.Verify(ctx, protocol.VerifyRequest{Identity: envtest.ID("v", 0, protocol.VerifyRequestID("v"))})
	require.NoError(t, err, "verify v")
	f.prepare(t, "k")
	dir := filepath.Join(t.TempDir(), "k")
	_, err = f.cc.Commit(ctx, protocol.CommitRequest{CheckpointID: "k", Location: dir})
	require.NoError(t, err, "commit")
	f.resume(t, "k")
	return dir, lastA
}

// TestRestoreOnTheLiveServerThatTookIt: the trainer rolls back to checkpoint
// k while the server that took k is still alive. Each restore of k runs
// under its own restore id, installs k's sessions as attempts above
// everything issued, fences the rollouts the coordinator names (one started
// after the cut), leaves another set's session alone, and stays paused
// until resumed; a re-run of a resumed restore installs nothing.
func TestRestoreOnTheLiveServerThatTookIt(t *testing.T) {
	ctx := context.Background()
	f := newCtlFixture(t)
	dir, lastA := liveCut(t, f)

	// Progress after the cut: a and other move on, r too, and "late"
	// starts.
	f.operate(t, inc("a", 0, "a/t2/c0", 2, 1))
	f.operate(t, protocol.OperateRequest{Identity: envtest.ID("r", 0, "r/t1/c0"), ExpectedRevision: 1, Tool: counter.ToolIncrement, Arguments: json.RawMessage(`{"amount":1}`)})
	f.operate(t, inc("other", 0, "other/t1/c0", 1, 1))
	f.startEnv(t, counter.Name, "late", 0)
	f.operate(t, inc("late", 0, "late/t0/c0", 0, 1))
	f.startEnv(t, counter.Name, "v", 1) // its set re-issued it

	// The checkpoint's own id is spent as a checkpoint: a prepare or
	// commit of it is stale.
	_, err := f.cc.Prepare(ctx, protocol.PrepareRequest{CheckpointID: "k", Deadline: future()})
	wantRemote(t, err, http.StatusConflict, protocol.CodeStaleCheckpoint)

	r1 := protocol.RestoreRequest{CheckpointID: "k", RestoreID: "r1", Location: dir, Attempts: map[string]int{"a": 1, "r": 1, "late": 1}}
	res, err := f.cc.Restore(ctx, r1)
	require.NoError(t, err, "restore r1")
	want := protocol.RestoreResponse{
		Phase: protocol.PhaseRestored, CheckpointID: "k", RestoreID: "r1", ManifestDigest: res.ManifestDigest,
		Restored:  []protocol.SessionSummary{{RolloutID: "a", Attempt: 1, Revision: 2, Env: counter.Name, Mode: "export_restore"}},
		Restarted: []protocol.SessionSummary{{RolloutID: "r", Attempt: 1, Revision: 1, Env: "restart", Mode: "restart_only"}},
		Fenced:    []protocol.FenceSummary{{RolloutID: "late", Attempt: 1, Dropped: true}},
		Untouched: []string{"other", "v"},
	}
	require.Equal(t, want, res, "restore r1 = %+v\nwant %+v", res, want)
	// Paused, and observable as restore r1 of k; other sessions wait.
	paused := f.status(t)
	require.Equal(t, protocol.PhaseRestored, paused.Phase, "status after restore r1 = %+v", paused)
	require.Equal(t, "k", paused.CheckpointID, "status after restore r1 = %+v", paused)
	require.Equal(t, "r1", paused.RestoreID, "status after restore r1 = %+v", paused)
	require.Equal(t, protocol.AdmissionClosed, paused.Admission, "status after restore r1 = %+v", paused)
	_, err = f.c.Operate(ctx, inc("a", 1, "a/t2/c0", 2, 1))
	wantRemote(t, err, http.StatusServiceUnavailable, protocol.CodeParked)
	// A retry replays; another restore or another id waits its turn.
	again, err := f.cc.Restore(ctx, r1)
	require.NoError(t, err, "retried restore r1 = %+v, %v", again, err)
	require.Equal(t, res, again, "retried restore r1 = %+v, %v", again, err)
	_, err = f.cc.Restore(ctx, protocol.RestoreRequest{CheckpointID: "k", RestoreID: "r2", Location: dir, Attempts: map[string]int{"a": 2}})
	wantRemote(t, err, http.StatusConflict, protocol.CodeCheckpointConflict, "r1")
	_, err = f.cc.ResumeRestore(ctx, "elsewhere", "r1")
	wantRemote(t, err, http.StatusConflict, protocol.CodeCheckpointConflict, "elsewhere")
	_, err = f.cc.ResumeRestore(ctx, "k", "r1")
	require.NoError(t, err, "resume r1")
	applied := f.stats(t).Applied

	// a is back at the cut as attempt 1; attempt 0 is refused.
	a := f.info(t, "a")
	require.Equal(t, 1, a.Attempt, "a after restore r1 = %+v", a)
	require.Equal(t, int64(2), a.Revision, "a after restore r1 = %+v", a)
	_, err = f.c.Operate(ctx, inc("a", 0, "a/t3/c0", 3, 1))
	wantRemote(t, err, http.StatusConflict, protocol.CodeStaleAttempt)
	replay := f.operate(t, inc("a", 1, "a/t1/c0", 1, 2))
	require.True(t, replay.Replayed, "a's last mutation before the cut = %+v, want the stored %+v", replay, lastA)
	require.Equal(t, lastA.Outcome, replay.Outcome, "a's last mutation before the cut = %+v, want the stored %+v", replay, lastA)
	// The mutation applied after the cut is not in this lineage: attempt 1
	// applies it anew.
	anew := f.operate(t, inc("a", 1, "a/t2/c0", 2, 1))
	require.False(t, anew.Replayed, "a's first mutation after the cut = %+v", anew)
	require.Equal(t, int64(3), anew.Revision, "a's first mutation after the cut = %+v", anew)
	// r starts over: no session, attempt 0 refused.
	_, err = f.c.Operate(ctx, protocol.OperateRequest{Identity: envtest.ID("r", 0, "r/t2/c0"), ExpectedRevision: 2, Tool: counter.ToolIncrement, Arguments: json.RawMessage(`{"amount":1}`)})
	wantRemote(t, err, http.StatusConflict, protocol.CodeStaleAttempt)
	_, err = f.c.Session(ctx, "r")
	wantRemote(t, err, http.StatusNotFound, protocol.CodeUnknownSession)
	// late, started after the cut, is fenced off and holds nothing.
	_, err = f.c.Operate(ctx, inc("late", 0, "late/t1/c0", 1, 1))
	wantRemote(t, err, http.StatusConflict, protocol.CodeStaleAttempt)
	_, err = f.c.Session(ctx, "late")
	wantRemote(t, err, http.StatusNotFound, protocol.CodeUnknownSession)
	// Another set's rollout was not named: it goes on where it was.
	other := f.info(t, "other")
	require.Equal(t, 0, other.Attempt, "other after restore r1 = %+v", other)
	require.Equal(t, int64(2), other.Revision, "other after restore r1 = %+v", other)
	f.operate(t, inc("other", 0, "other/t2/c0", 2, 1))
	applied += 2
	v := f.info(t, "v")
	require.Equal(t, 1, v.Attempt, "v after restore r1 = %+v, want its attempt 1 as it was", v)
	require.False(t, v.Retired, "v after restore r1 = %+v, want its attempt 1 as it was", v)

	// A re-run of r1 installs nothing: stale, and a keeps its progress.
	_, err = f.cc.Restore(ctx, r1)
	wantRemote(t, err, http.StatusConflict, protocol.CodeStaleCheckpoint, "r1")
	a = f.info(t, "a")
	require.Equal(t, 1, a.Attempt, "a after a re-run of r1 = %+v", a)
	require.Equal(t, int64(3), a.Revision, "a after a re-run of r1 = %+v", a)
	st := f.status(t)
	require.Equal(t, protocol.PhaseIdle, st.Phase, "status after a re-run of r1 = %+v", st)
	require.Equal(t, protocol.AdmissionOpen, st.Admission, "status after a re-run of r1 = %+v", st)

	// Restoring k again takes a new restore id and higher attempts.
	_, err = f.cc.Restore(ctx, protocol.RestoreRequest{CheckpointID: "k", RestoreID: "r2", Location: dir, Attempts: map[string]int{"a": 1, "r": 1, "late": 1}})
	wantRemote(t, err, http.StatusConflict, protocol.CodeStaleAttempt, `rollout "a"`)
	res2, err := f.cc.Restore(ctx, protocol.RestoreRequest{CheckpointID: "k", RestoreID: "r2", Location: dir, Attempts: map[string]int{"a": 2, "r": 2, "late": 2}})
	require.NoError(t, err, "restore r2")
	require.Len(t, res2.Restored, 1, "restore r2 = %+v", res2)
	require.Equal(t, 2, res2.Restored[0].Attempt, "restore r2 = %+v", res2)
	require.Equal(t, int64(2), res2.Restored[0].Revision, "restore r2 = %+v", res2)
	require.Equal(t, "r2", res2.RestoreID, "restore r2 = %+v", res2)
	require.Equal(t, []protocol.FenceSummary{{RolloutID: "late", Attempt: 2}}, res2.Fenced, "restore r2 = %+v", res2)
	_, err = f.cc.ResumeRestore(ctx, "k", "r2")
	require.NoError(t, err, "resume r2")
	_, err = f.c.Operate(ctx, inc("a", 1, "a/t3/c0", 3, 1))
	wantRemote(t, err, http.StatusConflict, protocol.CodeStaleAttempt)
	replay = f.operate(t, inc("a", 2, "a/t1/c0", 1, 2))
	require.True(t, replay.Replayed, "a's last mutation before the cut, as attempt 2 = %+v", replay)
	require.Equal(t, lastA.Outcome, replay.Outcome, "a's last mutation before the cut, as attempt 2 = %+v", replay)
	info := f.info(t, "a")
	require.Equal(t, 2, info.Attempt, "a after restore r2 = %+v", info)
	require.Equal(t, int64(2), info.Revision, "a after restore r2 = %+v", info)
	// Nothing was applied by the restores themselves.
	got := f.stats(t).Applied
	require.Equal(t, applied, got, "applied %d, want %d", got, applied)
	// Both restore ids are spent now.
	for _, rid := range []string{"r1", "r2"} {
		_, err = f.cc.Restore(ctx, protocol.RestoreRequest{CheckpointID: "k", RestoreID: rid, Location: dir, Attempts: map[string]int{"a": 3}})
		wantRemote(t, err, http.StatusConflict, protocol.CodeStaleCheckpoint)
	}
}

// TestRestoreUnderTheCheckpointIDOnce: without a restore id, the server that
// took k restores it once under k's own id; a re-run is stale, and so is a
// delayed prepare of k.
func TestRestoreUnderTheCheckpointIDOnce(t *testing.T) {
	ctx := context.Background()
	f := newCtlFixture(t)
	dir, _ := liveCut(t, f)
	f.operate(t, inc("a", 0, "a/t2/c0", 2, 1))

	req := protocol.RestoreRequest{CheckpointID: "k", Location: dir, Attempts: map[string]int{"a": 1, "r": 1}}
	res, err := f.cc.Restore(ctx, req)
	require.NoError(t, err, "restore")
	require.Equal(t, "k", res.RestoreID, "restore = %+v", res)
	require.Len(t, res.Restored, 1, "restore = %+v", res)
	require.Equal(t, int64(2), res.Restored[0].Revision, "restore = %+v", res)
	require.Equal(t, []string{"other", "v"}, res.Untouched, "restore = %+v", res)
	// The checkpoint's own operations stay refused during the restore.
	_, err = f.cc.Commit(ctx, protocol.CommitRequest{CheckpointID: "k", Location: dir})
	wantRemote(t, err, http.StatusConflict, protocol.CodeStaleCheckpoint)
	again, err := f.cc.Restore(ctx, req)
	require.NoError(t, err, "retried restore = %+v, %v", again, err)
	require.Equal(t, res, again, "retried restore = %+v, %v", again, err)
	f.resume(t, "k")
	st := f.status(t)
	require.Equal(t, protocol.PhaseIdle, st.Phase, "status after resume = %+v", st)
	require.Equal(t, protocol.AdmissionOpen, st.Admission, "status after resume = %+v", st)
	_, err = f.cc.Restore(ctx, req)
	wantRemote(t, err, http.StatusConflict, protocol.CodeStaleCheckpoint, "restore session")
	_, err = f.cc.Prepare(ctx, protocol.PrepareRequest{CheckpointID: "k", Deadline: future()})
	wantRemote(t, err, http.StatusConflict, protocol.CodeStaleCheckpoint)
	info := f.info(t, "a")
	require.Equal(t, 1, info.Attempt, "a after the restore = %+v", info)
	require.Equal(t, int64(2), info.Revision, "a after the restore = %+v", info)
}

// TestRestoreTakesOverStayPausedCheckpoint: a checkpoint taken with
// stay-paused leaves the server committed, admission closed. A restore
// takes that session over without reopening admission: a failed one gives
// the checkpoint session back as it was, a successful one retires the
// checkpoint's id (a late resume of it replays, a late prepare is stale)
// and the server ends open after the restore's resume. Under the
// checkpoint's own id and under a restore id of its own.
func TestRestoreTakesOverStayPausedCheckpoint(t *testing.T) {
	for _, restoreID := range []string{"", "r1"} {
		t.Run("restore_id="+restoreID, func(t *testing.T) {
			ctx := context.Background()
			f := newCtlFixture(t)
			f.startEnv(t, counter.Name, "a", 0)
			f.operate(t, inc("a", 0, "a/t0/c0", 0, 1))
			f.prepare(t, "k")
			dir := filepath.Join(t.TempDir(), "k")
			_, err := f.cc.Commit(ctx, protocol.CommitRequest{CheckpointID: "k", Location: dir})
			require.NoError(t, err, "commit")
			committed := func(what string) {
				t.Helper()
				st := f.status(t)
				require.Equal(t, protocol.PhaseCommitted, st.Phase, "status %s = %+v, want committed k, admission closed", what, st)
				require.Equal(t, "k", st.CheckpointID, "status %s = %+v, want committed k, admission closed", what, st)
				require.Equal(t, protocol.AdmissionClosed, st.Admission, "status %s = %+v, want committed k, admission closed", what, st)
			}
			committed("after a stay-paused commit")

			bad := protocol.RestoreRequest{CheckpointID: "k", RestoreID: restoreID, Location: filepath.Join(t.TempDir(), "missing"), Attempts: map[string]int{"a": 1}}
			_, err = f.cc.Restore(ctx, bad)
			require.Error(t, err, "restore of a missing location succeeded")
			committed("after a failed restore")
			_, err = f.c.Operate(ctx, inc("a", 0, "a/t1/c0", 1, 1))
			wantRemote(t, err, http.StatusServiceUnavailable, protocol.CodeParked)

			res, err := f.cc.Restore(ctx, protocol.RestoreRequest{CheckpointID: "k", RestoreID: restoreID, Location: dir, Attempts: map[string]int{"a": 1}})
			require.NoError(t, err, "restore onto the stay-paused server")
			rid := restoreID
			if rid == "" {
				rid = "k"
			}
			require.Equal(t, protocol.PhaseRestored, res.Phase, "restore = %+v", res)
			require.Equal(t, rid, res.RestoreID, "restore = %+v", res)
			require.Len(t, res.Restored, 1, "restore = %+v", res)
			_, err = f.cc.ResumeRestore(ctx, "k", rid)
			require.NoError(t, err, "resume restore %s", rid)
			st := f.status(t)
			require.Equal(t, protocol.PhaseIdle, st.Phase, "status after the restore's resume = %+v", st)
			require.Equal(t, protocol.AdmissionOpen, st.Admission, "status after the restore's resume = %+v", st)
			info := f.info(t, "a")
			require.Equal(t, 1, info.Attempt, "a after the restore = %+v", info)
			require.Equal(t, int64(1), info.Revision, "a after the restore = %+v", info)
			// The checkpoint session is over: a late resume of it replays and
			// changes nothing, a late prepare is stale.
			f.resume(t, "k")
			_, err = f.cc.Prepare(ctx, protocol.PrepareRequest{CheckpointID: "k", Deadline: future()})
			wantRemote(t, err, http.StatusConflict, protocol.CodeStaleCheckpoint)
		})
	}
}
