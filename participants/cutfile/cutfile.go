// Package cutfile reads an environment server's checkpoint artifact the way
// the coordinator does: the sections every participant must write
// (docs/protocol/ARTIFACT.md, "Sections of an environment server"), checked
// record by record. The coordinator reads a participant's artifact with it
// when it plans a restore and when it checks what a restore installed; the
// conformance kit opens a participant's commit output with it, so a
// participant the kit passes writes what the coordinator reads.
//
// The artifact container (manifest, indexes, tar shards, digests) is
// package artifact's; the other sections and fields of a record are the
// participant's own.
package cutfile

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sort"

	"github.com/turnstile-rl/turnstile/internal/artifact"
	"github.com/turnstile-rl/turnstile/participants/protocol"
)

// Session is what the coordinator reads of one record of the sessions
// section: which attempt of a rollout the participant held at the cut, and
// whether it was verified.
type Session struct {
	RolloutID string
	Attempt   int
	Retired   bool
}

// Cut is a participant's checkpoint as the coordinator reads it.
type Cut struct {
	// Digest is the artifact's manifest digest.
	Digest string
	// Sessions are ordered by rollout id.
	Sessions []Session
	// Fences maps every rollout the participant had seen to its fence.
	Fences map[string]int
}

// Holds reports whether the cut has a session (live or verified) of
// rollout id.
func (c Cut) Holds(id string) bool {
	i := sort.Search(len(c.Sessions), func(i int) bool { return c.Sessions[i].RolloutID >= id })
	return i < len(c.Sessions) && c.Sessions[i].RolloutID == id
}

// Read reads the sessions and fences of a validated artifact and checks
// every record: a JSON object whose rollout_id is its key, with an integer
// attempt (or fence) ≥ 0 and, for a session, a boolean retired. Other
// fields and other sections are the participant's own and are not read.
func Read(ctx context.Context, cp *artifact.Checkpoint) (Cut, error) {
	cut := Cut{Digest: cp.Manifest().Digest, Fences: map[string]int{}}
	sessions, err := cp.Section(ctx, protocol.SectionSessions)
	if err != nil {
		return Cut{}, fmt.Errorf("section %s: %w", protocol.SectionSessions, err)
	}
	for _, r := range sessions {
		s, err := readSession(r)
		if err != nil {
			return Cut{}, fmt.Errorf("section %s: record %q: %w", protocol.SectionSessions, r.Key, err)
		}
		cut.Sessions = append(cut.Sessions, s)
	}
	fences, err := cp.Section(ctx, protocol.SectionFences)
	if err != nil {
		return Cut{}, fmt.Errorf("section %s: %w", protocol.SectionFences, err)
	}
	for _, r := range fences {
		fields, err := object(r.Data, "rollout_id", "fence")
		if err != nil {
			return Cut{}, fmt.Errorf("section %s: record %q: %w", protocol.SectionFences, r.Key, err)
		}
		f, err := ownRecord(r.Key, fields, "fence")
		if err != nil {
			return Cut{}, fmt.Errorf("section %s: record %q: %w", protocol.SectionFences, r.Key, err)
		}
		cut.Fences[r.Key] = f
	}
	return cut, nil
}

func readSession(r artifact.Record) (Session, error) {
	fields, err := object(r.Data, "rollout_id", "attempt", "retired")
	if err != nil {
		return Session{}, err
	}
	attempt, err := ownRecord(r.Key, fields, "attempt")
	if err != nil {
		return Session{}, err
	}
	var retired bool
	if err := json.Unmarshal(fields["retired"], &retired); err != nil {
		return Session{}, fmt.Errorf("retired is %s, not a boolean", fields["retired"])
	}
	return Session{RolloutID: r.Key, Attempt: attempt, Retired: retired}, nil
}

// object decodes data as one JSON object holding at least the fields
// required (names compared exactly).
func object(data []byte, required ...string) (map[string]json.RawMessage, error) {
	var fields map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&fields); err != nil || fields == nil {
		return nil, fmt.Errorf("not a JSON object: %.80q", data)
	}
	if dec.More() {
		return nil, fmt.Errorf("trailing data after the JSON object")
	}
	for _, f := range required {
		if raw, ok := fields[f]; !ok || string(raw) == "null" {
			return nil, fmt.Errorf("no field %s", f)
		}
	}
	return fields, nil
}

// ownRecord checks that the record names the rollout of its key and
// returns its integer field name, which must be ≥ 0.
func ownRecord(key string, fields map[string]json.RawMessage, name string) (int, error) {
	var id string
	if err := json.Unmarshal(fields["rollout_id"], &id); err != nil || id != key {
		return 0, fmt.Errorf("rollout_id %s is not its key", fields["rollout_id"])
	}
	var n int
	if err := json.Unmarshal(fields[name], &n); err != nil || n < 0 {
		return 0, fmt.Errorf("%s is %s, not an integer ≥ 0", name, fields[name])
	}
	return n, nil
}
