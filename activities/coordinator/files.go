package coordinator

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"sort"
	"strings"

	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
	"github.com/turnstile-rl/turnstile/workflows/rollout"

	"github.com/turnstile-rl/turnstile/internal/artifact"
	"github.com/turnstile-rl/turnstile/internal/location"
	"github.com/turnstile-rl/turnstile/internal/storage"
	"github.com/turnstile-rl/turnstile/participants/protocol"
)

// rolloutList is a staging or restore file naming rollouts (members.json,
// parked.json, started.json).
type rolloutList struct {
	CheckpointID string   `json:"checkpoint_id"`
	Set          string   `json:"set"`
	Rollouts     []string `json:"rollouts"` // sorted, unique
}

// participantReport is one participant's answer to prepare, with its
// identity, as staged for the commit.
type participantReport struct {
	Index    int                       `json:"index"`
	URL      string                    `json:"url"`
	Name     string                    `json:"name"`
	Envs     []protocol.EnvCapability  `json:"envs"`
	Sessions []protocol.SessionSummary `json:"sessions"`
}

// AggregateManifest is <checkpoint>/MANIFEST.json: it binds every artifact
// of the checkpoint by its manifest digest. It is written last.
type AggregateManifest struct {
	Schema       int                `json:"schema"`
	CheckpointID string             `json:"checkpoint_id"`
	Set          string             `json:"set"`
	Participants []ParticipantEntry `json:"participants"`
	Agents       AgentsEntry        `json:"agents"`
	Members      int                `json:"members"`
	Parked       int                `json:"parked"`
	// CompletedUnacked counts the records that carry a completed result not
	// yet acknowledged.
	CompletedUnacked int `json:"completed_unacked"`
	// Closed counts members that completed and closed before they parked.
	Closed int `json:"closed"`
	// Admission is the set's admission at the cut; its queued rollouts are
	// the agents artifact's queued section. Nil for a set without one (and
	// in checkpoints written before sets had one).
	Admission *AdmissionEntry `json:"admission,omitempty"`
	// Digest is the SHA-256 (hex) of the canonical encoding with Digest
	// empty and no Signature.
	Digest string `json:"digest"`
	// Signature is set when the coordinator has a checkpoint key: as in an
	// artifact's manifest (artifact.Sign), over the canonical encoding
	// with Digest set and no Signature.
	Signature string `json:"signature,omitempty"`
}

// ParticipantEntry is one environment server of a checkpoint.
type ParticipantEntry struct {
	Index int    `json:"index"`
	URL   string `json:"url"`
	Name  string `json:"name"`
	// Location is relative to the checkpoint directory: participants/<n>.
	Location       string                   `json:"location"`
	Envs           []protocol.EnvCapability `json:"envs"`
	ManifestDigest string                   `json:"manifest_digest"`
	Sessions       int                      `json:"sessions"`
	Bytes          int64                    `json:"bytes"`
}

// AgentsEntry is the agents artifact of a checkpoint.
type AgentsEntry struct {
	Location       string `json:"location"` // "agents"
	ManifestDigest string `json:"manifest_digest"`
	Records        int    `json:"records"`
	Transcripts    int    `json:"transcripts"`
	Bytes          int64  `json:"bytes"`
}

// encodeAggregate returns the canonical bytes of m with its digest set
// and, with a key, signed.
func encodeAggregate(m *AggregateManifest, key []byte) ([]byte, error) {
	m.Digest, m.Signature = "", ""
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode aggregate manifest: %w", err)
	}
	sum := sha256.Sum256(b)
	m.Digest = hex.EncodeToString(sum[:])
	unsigned, err := canonicalAggregate(m)
	if err != nil || len(key) == 0 {
		return unsigned, err
	}
	m.Signature = artifact.Sign(key, unsigned)
	return canonicalAggregate(m)
}

// canonicalAggregate is the one encoding MANIFEST.json may have.
func canonicalAggregate(m *AggregateManifest) ([]byte, error) {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode aggregate manifest: %w", err)
	}
	return append(b, '\n'), nil
}

// maxFileBytes bounds what the coordinator reads of one of its own files.
const maxFileBytes = 64 << 20

// file names one object of a checkpoint's store; it prints as its
// location, so errors say where it is.
type file struct {
	st   storage.Store
	name string
}

// at is the file name in st.
func at(st storage.Store, name string) file { return file{st: st, name: name} }

func (f file) String() string {
	if loc, err := location.Join(f.st.Location(), f.name); err == nil {
		return loc
	}
	return f.st.Location() + "/" + f.name
}

// ReadAggregateManifest reads and checks MANIFEST.json in the checkpoint
// store dir: strict decoding, canonical bytes, its own digest, schema,
// checkpoint id and the shape of every location. It does not open the
// artifacts it names. It checks no signature (ReadSignedAggregateManifest
// does).
func ReadAggregateManifest(ctx context.Context, dir storage.Store, checkpointID string) (AggregateManifest, error) {
	return ReadSignedAggregateManifest(ctx, dir, checkpointID, nil)
}

// ReadSignedAggregateManifest is ReadAggregateManifest that, given a key,
// also demands a signature that verifies with it.
func ReadSignedAggregateManifest(ctx context.Context, dir storage.Store, checkpointID string, key []byte) (AggregateManifest, error) {
	path := at(dir, checkpoint.AggregateManifestName)
	fi, err := dir.Stat(ctx, path.name)
	if errors.Is(err, storage.ErrNotExist) {
		return AggregateManifest{}, fmt.Errorf("%s has no %s: not a checkpoint (its commit tore or never ran)", dir.Location(), checkpoint.AggregateManifestName)
	}
	if err != nil {
		return AggregateManifest{}, fmt.Errorf("read %s: %w", path, err)
	}
	if !fi.Regular || fi.Size > maxFileBytes {
		return AggregateManifest{}, fmt.Errorf("%s is not a regular file of at most 64 MiB", path)
	}
	b, err := storage.ReadAll(ctx, dir, path.name, maxFileBytes)
	if err != nil {
		return AggregateManifest{}, fmt.Errorf("read %s: %w", path, err)
	}
	var m AggregateManifest
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return AggregateManifest{}, fmt.Errorf("%s: %w", path, err)
	}
	stated, signature := m.Digest, m.Signature
	unsigned, err := encodeAggregate(&m, nil)
	if err != nil {
		return AggregateManifest{}, err
	}
	m.Signature = signature
	canon, err := canonicalAggregate(&m)
	if err != nil {
		return AggregateManifest{}, err
	}
	switch {
	case m.Digest != stated:
		return AggregateManifest{}, fmt.Errorf("%s: digest %s does not match its content (%s)", path, stated, m.Digest)
	case !bytes.Equal(canon, b):
		return AggregateManifest{}, fmt.Errorf("%s is not in canonical form (edited or corrupt)", path)
	}
	if err := artifact.CheckSignature(signature, unsigned, key); err != nil {
		return AggregateManifest{}, fmt.Errorf("%s: %w", path, err)
	}
	switch {
	case m.Schema != checkpoint.AggregateSchemaVersion:
		return AggregateManifest{}, fmt.Errorf("%s: schema %d, this coordinator reads %d", path, m.Schema, checkpoint.AggregateSchemaVersion)
	case m.CheckpointID != checkpointID:
		return AggregateManifest{}, fmt.Errorf("%s is of checkpoint %q, not %q", path, m.CheckpointID, checkpointID)
	case rollout.ValidateSet(m.Set) != nil:
		return AggregateManifest{}, fmt.Errorf("%s: bad set name %q", path, m.Set)
	case m.Agents.Location != checkpoint.AgentsDir:
		return AggregateManifest{}, fmt.Errorf("%s: agents location %q, want %q", path, m.Agents.Location, checkpoint.AgentsDir)
	}
	for i, p := range m.Participants {
		if want := checkpoint.ParticipantsDir + "/" + fmt.Sprint(i); p.Index != i || p.Location != want {
			return AggregateManifest{}, fmt.Errorf("%s: participant %d has index %d and location %q, want %d and %q", path, i, p.Index, p.Location, i, want)
		}
	}
	return m, nil
}

// writeFileAtomic writes data atomically (and, locally, durably), so a
// crash leaves either the old file, or none, or the whole new one.
func writeFileAtomic(ctx context.Context, f file, data []byte) error {
	return storage.WriteBytes(ctx, f.st, f.name, data)
}

// writeJSONAtomic writes v as indented JSON, atomically, and returns the
// SHA-256 (hex) of the bytes written.
func writeJSONAtomic(ctx context.Context, f file, v any) (string, error) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return "", fmt.Errorf("encode %s: %w", path.Base(f.name), err)
	}
	b = append(b, '\n')
	if err := writeFileAtomic(ctx, f, b); err != nil {
		return "", fmt.Errorf("write %s: %w", f, err)
	}
	return sha256Hex(b), nil
}

// readJSONStrict reads f into v, refusing unknown fields and trailing
// data.
func readJSONStrict(ctx context.Context, f file, v any) ([]byte, error) {
	b, err := storage.ReadAll(ctx, f.st, f.name, maxFileBytes)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return nil, fmt.Errorf("%s: %w", f, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%s: trailing data", f)
	}
	return b, nil
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// readRolloutList reads a list file and checks it belongs to checkpointID.
func readRolloutList(ctx context.Context, path file, checkpointID string) (rolloutList, error) {
	var l rolloutList
	if _, err := readJSONStrict(ctx, path, &l); err != nil {
		return rolloutList{}, err
	}
	if l.CheckpointID != checkpointID {
		return rolloutList{}, fmt.Errorf("%s is of checkpoint %q, not %q", path, l.CheckpointID, checkpointID)
	}
	if !sort.StringsAreSorted(l.Rollouts) {
		return rolloutList{}, fmt.Errorf("%s: rollouts are not sorted", path)
	}
	return l, nil
}

// sortedUnique returns the sorted set of ids.
func sortedUnique(ids []string) []string {
	out := append([]string(nil), ids...)
	sort.Strings(out)
	n := 0
	for i, id := range out {
		if i == 0 || id != out[n-1] {
			out[n] = id
			n++
		}
	}
	return out[:n]
}

// writeRecords writes the park records, one JSON line each, sorted by
// rollout id, atomically; it returns the file's SHA-256.
func writeRecords(ctx context.Context, path file, recs map[string][]byte) (string, error) {
	ids := make([]string, 0, len(recs))
	for id := range recs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var buf bytes.Buffer
	for _, id := range ids {
		var compact bytes.Buffer
		if err := json.Compact(&compact, recs[id]); err != nil {
			return "", fmt.Errorf("record of %s: %w", id, err)
		}
		buf.Write(compact.Bytes())
		buf.WriteByte('\n')
	}
	if err := writeFileAtomic(ctx, path, buf.Bytes()); err != nil {
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	return sha256Hex(buf.Bytes()), nil
}

// readRecords reads a records.jsonl file into raw records keyed by rollout
// id.
func readRecords(ctx context.Context, path file) (map[string][]byte, error) {
	b, err := storage.ReadAll(ctx, path.st, path.name, 0)
	if err != nil {
		return nil, err
	}
	out := map[string][]byte{}
	for n, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		if line == "" {
			continue
		}
		rec, err := DecodeRecord([]byte(line))
		if err != nil {
			return nil, fmt.Errorf("%s line %d: %w", path, n+1, err)
		}
		if _, dup := out[rec.Input.RolloutID]; dup {
			return nil, fmt.Errorf("%s line %d: second record of rollout %q", path, n+1, rec.Input.RolloutID)
		}
		out[rec.Input.RolloutID] = []byte(line)
	}
	return out, nil
}
