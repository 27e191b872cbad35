package conformance

import (
	"context"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/turnstile-rl/turnstile/internal/artifact"
	"github.com/turnstile-rl/turnstile/participants/cutfile"
	"github.com/turnstile-rl/turnstile/participants/protocol"
)

// checkArtifact: R26. The commit's output opened with the coordinator's
// own reader (package artifact, then cutfile): it validates, its manifest
// digest, records and bytes are the commit answer's, its sessions are the
// prepare's and each has a fence. Then restores of corrupt, torn and
// foreign checkpoints each install nothing.
func checkArtifact(ctx context.Context, k *kit) (string, error) {
	id, verified := k.rollout("r26"), k.rollout("r26-verified")
	if _, err := k.began(ctx, id, 2); err != nil {
		return "", err
	}
	if _, err := k.began(ctx, verified, 1); err != nil {
		return "", err
	}
	if _, err := k.verify(ctx, verified, 0, 1); err != nil {
		return "", err
	}
	prep, com, loc, err := k.cut(ctx, "k26")
	if err != nil {
		return "", err
	}
	ckpt := k.checkpointID("k26")
	cut, err := k.readArtifact(ctx, loc, ckpt, prep, com)
	if err != nil {
		return "", err
	}
	bad, err := k.badCheckpoints(ctx, loc, ckpt)
	if err != nil {
		return "", err
	}
	for _, b := range bad {
		if err := k.refusedRestore(ctx, id, b); err != nil {
			return "", err
		}
	}
	names := make([]string, len(bad))
	for i, b := range bad {
		names[i] = b.what
	}
	return fmt.Sprintf("commit output validates with the coordinator's reader (manifest %s = the commit's, %d records, %d bytes, %d sessions = the prepare's, each with its fence); restores of %d bad checkpoints (%s) → 422 invalid_checkpoint, nothing installed, phase idle, admission open",
		truncate(cut.Digest, 19), com.Records, com.Bytes, len(cut.Sessions), len(bad), strings.Join(names, ", ")), nil
}

// readArtifact opens the commit's output as the coordinator does and
// compares it with the commit and prepare answers.
func (k *kit) readArtifact(ctx context.Context, loc, ckpt string, prep protocol.PrepareResponse, com protocol.CommitResponse) (cutfile.Cut, error) {
	cp, err := artifact.Open(ctx, loc, ckpt)
	if err != nil {
		return cutfile.Cut{}, fmt.Errorf("the commit's output at %s is not a checkpoint artifact the coordinator can read (docs/protocol/ARTIFACT.md): %w", loc, err)
	}
	m := cp.Manifest()
	size, err := dirSize(loc)
	if err != nil {
		return cutfile.Cut{}, err
	}
	switch {
	case m.Digest != com.ManifestDigest:
		return cutfile.Cut{}, fmt.Errorf("commit answered manifest_digest %s, %s/manifest.json has %s", com.ManifestDigest, loc, m.Digest)
	case m.Records != com.Records:
		return cutfile.Cut{}, fmt.Errorf("commit answered %d records, the manifest says %d", com.Records, m.Records)
	case size != com.Bytes:
		return cutfile.Cut{}, fmt.Errorf("commit answered %d bytes, its files hold %d", com.Bytes, size)
	case com.Sessions != len(prep.Sessions):
		return cutfile.Cut{}, fmt.Errorf("commit answered %d sessions, prepare %d", com.Sessions, len(prep.Sessions))
	}
	cut, err := cutfile.Read(ctx, cp)
	if err != nil {
		return cutfile.Cut{}, fmt.Errorf("the commit's output at %s: the coordinator cannot read its sessions and fences (ARTIFACT.md, \"Sections of an environment server\"): %w", loc, err)
	}
	want := make([]cutfile.Session, 0, len(prep.Sessions))
	for _, s := range prep.Sessions {
		want = append(want, cutfile.Session{RolloutID: s.RolloutID, Attempt: s.Attempt, Retired: s.Retired})
	}
	sort.Slice(want, func(i, j int) bool { return want[i].RolloutID < want[j].RolloutID })
	if !slices.Equal(cut.Sessions, want) {
		return cutfile.Cut{}, fmt.Errorf("the artifact's sessions are %+v; prepare answered %+v", cut.Sessions, want)
	}
	for _, s := range cut.Sessions {
		if f, ok := cut.Fences[s.RolloutID]; !ok || f < s.Attempt {
			return cutfile.Cut{}, fmt.Errorf("the artifact's fence of %s is %d (found %v), below its session's attempt %d", s.RolloutID, f, ok, s.Attempt)
		}
	}
	return cut, nil
}

func dirSize(dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		n += fi.Size()
		return nil
	})
	return n, err
}

// badCheckpoint is a restore that must be refused invalid_checkpoint.
type badCheckpoint struct {
	what         string
	checkpointID string
	location     string
}

// badCheckpoints makes copies of the committed artifact at loc, each
// broken one way, and a foreign artifact.
func (k *kit) badCheckpoints(ctx context.Context, loc, ckpt string) ([]badCheckpoint, error) {
	cp, err := artifact.Open(ctx, loc, ckpt)
	if err != nil {
		return nil, err
	}
	var shard string
	for _, s := range cp.Manifest().Sections {
		if len(s.Shards) > 0 {
			shard = s.Shards[0].Name
			break
		}
	}
	if shard == "" {
		return nil, fmt.Errorf("the artifact at %s has no shard", loc)
	}
	edits := []struct {
		what, suffix string
		edit         func(dir string) error
	}{
		{"a byte of a shard changed", "corrupt-shard", func(dir string) error { return flipByte(filepath.Join(dir, shard)) }},
		{"a byte of the manifest changed", "corrupt-manifest", func(dir string) error { return flipByte(filepath.Join(dir, artifact.ManifestName)) }},
		{"no manifest (a torn commit)", "torn-manifest", func(dir string) error { return os.Remove(filepath.Join(dir, artifact.ManifestName)) }},
		{"a shard missing", "torn-shard", func(dir string) error { return os.Remove(filepath.Join(dir, shard)) }},
		{"a file the manifest does not list", "extra-file", func(dir string) error {
			return os.WriteFile(filepath.Join(dir, ".tmp-leftover"), []byte("x"), 0o644)
		}},
	}
	var out []badCheckpoint
	for _, e := range edits {
		dir := loc + "-" + e.suffix
		if err := os.CopyFS(dir, os.DirFS(loc)); err != nil {
			return nil, fmt.Errorf("copy the artifact: %w", err)
		}
		if err := e.edit(dir); err != nil {
			return nil, fmt.Errorf("break the copy %s: %w", dir, err)
		}
		out = append(out, badCheckpoint{what: e.what, checkpointID: ckpt, location: dir})
	}
	out = append(out, badCheckpoint{what: "another checkpoint's id", checkpointID: k.checkpointID("k26-other"), location: loc})
	foreign := loc + "-foreign"
	if _, err := artifact.Write(ctx, foreign, artifact.Meta{CheckpointID: ckpt, Labels: map[string]string{"component": "coordinator"}},
		[]artifact.Section{{Name: "agents", Records: []artifact.Record{{Key: "a", Data: []byte(`{}`)}}}, {Name: "transcripts", Records: []artifact.Record{}}},
		artifact.Options{}); err != nil {
		return nil, fmt.Errorf("write a foreign artifact: %w", err)
	}
	return append(out, badCheckpoint{what: "a valid artifact that is no environment server's", checkpointID: ckpt, location: foreign}), nil
}

func flipByte(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	b[len(b)/2] ^= 0x01
	return os.WriteFile(path, b, 0o644)
}

// refusedRestore restores b into rollout id's attempt 1 and wants 422
// invalid_checkpoint with nothing installed.
func (k *kit) refusedRestore(ctx context.Context, id string, b badCheckpoint) error {
	before, err := k.stats(ctx)
	if err != nil {
		return err
	}
	_, a, err := k.restore(ctx, protocol.RestoreRequest{CheckpointID: b.checkpointID, RestoreID: k.checkpointID("k26-bad"),
		Location: b.location, Attempts: map[string]int{id: 1}})
	if err != nil {
		return err
	}
	if err := want("a restore of a checkpoint with "+b.what, a, http.StatusUnprocessableEntity, protocol.CodeInvalidCheckpoint); err != nil {
		return err
	}
	if err := k.wantPhase(ctx, protocol.PhaseIdle, protocol.AdmissionOpen); err != nil {
		return fmt.Errorf("after a refused restore of a checkpoint with %s: %w", b.what, err)
	}
	if err := k.wantSession(ctx, id, 0, 2, false); err != nil {
		return fmt.Errorf("after a refused restore of a checkpoint with %s: %w", b.what, err)
	}
	_, err = k.sameStats(ctx, "a refused restore", before)
	return err
}
