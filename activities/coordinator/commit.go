package coordinator

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/turnstile-rl/turnstile/internal/fanout"
	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
	"github.com/turnstile-rl/turnstile/workflows/set"

	"go.temporal.io/sdk/temporal"

	"github.com/turnstile-rl/turnstile/internal/artifact"
	"github.com/turnstile-rl/turnstile/internal/failpoint"
	"github.com/turnstile-rl/turnstile/internal/storage"
	"github.com/turnstile-rl/turnstile/internal/transcript"
	"github.com/turnstile-rl/turnstile/participants/protocol"
)

// CommitCheckpoint commits every environment server into
// participants/<n>/, then the agent records and the transcript blobs they
// reference into agents/, then, last, MANIFEST.json. A retried commit finds
// the same files, validates them and returns the same answer.
func (c *Coordinator) CommitCheckpoint(ctx context.Context, in checkpoint.CommitCheckpointInput) (checkpoint.CommitCheckpointResult, error) {
	st, err := c.readCommitStaging(ctx, in)
	if err != nil {
		return checkpoint.CommitCheckpointResult{}, err
	}
	defer c.renewLeases(ctx, in, parkedIDs(st.records))()
	// 1. The environment servers, each into its own directory.
	entries, err := c.commitParticipants(ctx, st.dir, in.CheckpointID, st.participants.Participants)
	if err != nil {
		return checkpoint.CommitCheckpointResult{}, fmt.Errorf("commit checkpoint %s: %w", in.CheckpointID, err)
	}
	// 2. The agent records and their transcripts, and the rollouts the
	// set's admission had not started.
	queued, err := c.stagedQueue(ctx, st)
	if err != nil {
		return checkpoint.CommitCheckpointResult{}, fmt.Errorf("commit checkpoint %s: %w", in.CheckpointID, err)
	}
	agents, err := c.writeAgents(ctx, st.dir, in.CheckpointID, in.Set, st.records, queued)
	if err != nil {
		return checkpoint.CommitCheckpointResult{}, fmt.Errorf("commit checkpoint %s: %w", in.CheckpointID, err)
	}
	// 3. The aggregate manifest, last.
	m := AggregateManifest{
		Schema: checkpoint.AggregateSchemaVersion, CheckpointID: in.CheckpointID, Set: in.Set,
		Participants: entries, Agents: agents, Members: len(st.members.Rollouts), Parked: len(st.records),
		Closed: len(st.members.Rollouts) - len(st.records),
	}
	nQueued := 0
	if st.admission != nil {
		nQueued = len(queued.Records)
		m.Admission = admissionEntry(*st.admission, nQueued)
	}
	for _, raw := range st.records {
		if rec, err := DecodeRecord(raw); err == nil && rec.Result != nil {
			m.CompletedUnacked++
		}
	}
	size, err := c.writeManifest(ctx, st.dir, in.CheckpointID, &m)
	if err != nil {
		return checkpoint.CommitCheckpointResult{}, err
	}
	total := size + agents.Bytes
	for _, e := range entries {
		total += e.Bytes
	}
	c.Failpoints.Hit(failpoint.CoordinatorAfterCommit)
	return checkpoint.CommitCheckpointResult{
		Dir: st.dir.Location(), ManifestDigest: m.Digest, Bytes: total, Members: m.Members, Parked: m.Parked,
		CompletedUnacked: m.CompletedUnacked, Transcripts: agents.Transcripts, Queued: nQueued,
	}, nil
}

// stagedQueue is the queued section of a checkpoint whose set has an
// admission (nil otherwise): the queued inputs read back from the
// transcript store, so the checkpoint holds them whole.
func (c *Coordinator) stagedQueue(ctx context.Context, st commitStaging) (*artifact.Section, error) {
	if st.admission == nil {
		return nil, nil
	}
	sec, err := c.queuedSection(ctx, *st.admission)
	if err != nil {
		return nil, err
	}
	return &sec, nil
}

// commitStaging is what the earlier steps of a checkpoint staged for its
// commit.
type commitStaging struct {
	dir          storage.Store
	participants stagedParticipants
	members      rolloutList
	records      map[string][]byte
	// admission is the set's admission as the freeze held it; nil for a
	// set without one.
	admission *set.AdmissionSnapshot
}

// readCommitStaging checks a commit's input against what prepare staged and
// reads the membership and the park records.
func (c *Coordinator) readCommitStaging(ctx context.Context, in checkpoint.CommitCheckpointInput) (commitStaging, error) {
	dir, err := c.checkDir(ctx, in.Root, in.CheckpointID)
	if err != nil {
		return commitStaging{}, err
	}
	if err := rollout.ValidateSet(in.Set); err != nil {
		return commitStaging{}, rollout.BadInput("%v", err)
	}
	sp, err := readStagedParticipants(ctx, dir, in.CheckpointID)
	if err != nil {
		return commitStaging{}, err
	}
	if len(sp.Participants) != len(in.Participants) {
		return commitStaging{}, rollout.BadInput("commit names %d participants, prepare had %d", len(in.Participants), len(sp.Participants))
	}
	for i, p := range sp.Participants {
		if p.URL != in.Participants[i] {
			return commitStaging{}, rollout.BadInput("participant %d is %s, prepare had %s", i, in.Participants[i], p.URL)
		}
	}
	members, err := readRolloutList(ctx, at(dir, checkpoint.ListMembers), in.CheckpointID)
	if err != nil {
		return commitStaging{}, fmt.Errorf("read membership: %w", err)
	}
	records, err := readRecords(ctx, at(dir, checkpoint.StagingRecords))
	if err != nil {
		return commitStaging{}, fmt.Errorf("read park records: %w", err)
	}
	st := commitStaging{dir: dir, participants: sp, members: members, records: records}
	snap, found, err := readStagedAdmission(ctx, dir, in.CheckpointID)
	if err != nil {
		return commitStaging{}, fmt.Errorf("read the staged admission: %w", err)
	}
	if found {
		st.admission = &snap
	}
	return st, nil
}

// commitParticipants has every environment server commit its artifact into
// participants/<n>/ and checks that it validates here.
func (c *Coordinator) commitParticipants(ctx context.Context, dir storage.Store, checkpointID string, reports []participantReport) ([]ParticipantEntry, error) {
	entries := make([]ParticipantEntry, len(reports))
	prog := newProgress(ctx, "commit participants", len(reports))
	defer prog.stop()
	err := fanout.Each(ctx, len(reports), c.limit(), func(ctx context.Context, i int) error {
		p := reports[i]
		loc := checkpoint.ParticipantLocation(dir.Location(), i)
		var resp protocol.CommitResponse
		dead, err := callReachable(ctx, func(ctx context.Context) error {
			cc, err := c.control(p.URL)
			if err != nil {
				return err
			}
			return c.watched(ctx, p.URL, "commit", func(ctx context.Context) error {
				var err error
				resp, err = cc.Commit(ctx, protocol.CommitRequest{CheckpointID: checkpointID, Location: loc})
				return err
			})
		})
		if isHung(err) {
			// A commit that hangs holds the whole set parked: no retry (the
			// commit step's tries were 30 minutes each), the checkpoint
			// aborts at once.
			return hungFatal(err)
		}
		if dead {
			// Its prepared cut died with it: no retry can commit it, and a
			// manifest naming it must not be written.
			return participantUnreachable(p.URL, "commit", err)
		}
		if err != nil {
			return controlError(p.URL, "commit", err)
		}
		// What the coordinator cannot read, a restore cannot either.
		cp, err := openParticipant(ctx, dir, i, checkpointID, c.Checkpoints)
		if errors.Is(err, storage.ErrUnavailable) {
			return err
		}
		if err != nil {
			return temporal.NewNonRetryableApplicationError(fmt.Sprintf("participant %s committed to %s, which does not validate here: %v", p.URL, loc, err), checkpoint.ErrCheckpointInvalid, nil)
		}
		if d := cp.Manifest().Digest; d != resp.ManifestDigest {
			return temporal.NewNonRetryableApplicationError(fmt.Sprintf("participant %s reports manifest %s, %s holds %s", p.URL, resp.ManifestDigest, loc, d), checkpoint.ErrCheckpointInvalid, nil)
		}
		entries[i] = ParticipantEntry{Index: i, URL: p.URL, Name: p.Name, Location: checkpoint.ParticipantsDir + "/" + fmt.Sprint(i),
			Envs: p.Envs, ManifestDigest: resp.ManifestDigest, Sessions: resp.Sessions, Bytes: resp.Bytes}
		prog.add()
		return nil
	})
	return entries, err
}

// writeManifest writes MANIFEST.json, the last file of a checkpoint, and
// returns its size. A retried commit finds the same manifest and only makes
// its rename durable; a different one, or an aborted checkpoint, is refused.
func (c *Coordinator) writeManifest(ctx context.Context, dir storage.Store, checkpointID string, m *AggregateManifest) (int64, error) {
	b, err := encodeAggregate(m, c.Checkpoints.Key)
	if err != nil {
		return 0, err
	}
	path := at(dir, checkpoint.AggregateManifestName)
	existing, err := storage.ReadAll(ctx, dir, path.name, maxFileBytes)
	switch {
	case err == nil:
		return c.checkExistingManifest(ctx, dir, path, existing, b)
	case errors.Is(err, storage.ErrNotExist):
		if _, err := dir.Stat(ctx, abortedMarker); err == nil {
			return 0, temporal.NewNonRetryableApplicationError(
				fmt.Sprintf("checkpoint %s was aborted; its manifest is not written", checkpointID), checkpoint.ErrCheckpointInvalid, nil)
		} else if !errors.Is(err, storage.ErrNotExist) {
			return 0, fmt.Errorf("checkpoint %s: %w", checkpointID, err)
		}
		c.Failpoints.Hit(failpoint.CheckpointBetweenFiles)
		// Conditional: of two commits racing here, one manifest is stored
		// and the other compares against it.
		err := dir.Create(ctx, path.name, b)
		if errors.Is(err, storage.ErrExist) {
			return c.writeManifest(ctx, dir, checkpointID, m)
		}
		if err != nil {
			return 0, fmt.Errorf("write %s: %w", path, err)
		}
	default:
		return 0, fmt.Errorf("read %s: %w", path, err)
	}
	return int64(len(b)), nil
}

// checkExistingManifest handles a commit that finds a manifest: the same
// bytes are a retried commit (its write is made durable), other bytes are
// refused and nothing is overwritten.
func (c *Coordinator) checkExistingManifest(ctx context.Context, dir storage.Store, path file, existing, want []byte) (int64, error) {
	if !bytes.Equal(existing, want) {
		return 0, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("%s already holds a different manifest; nothing overwritten", path), checkpoint.ErrCheckpointInvalid, nil)
	}
	if err := storage.Sync(ctx, dir); err != nil {
		return 0, err
	}
	return int64(len(want)), nil
}

// writeAgents writes the agents artifact: every park record, and every
// transcript blob the records reference (conversations walked to their
// root, the tool schemas), keyed by digest.
func (c *Coordinator) writeAgents(ctx context.Context, dir storage.Store, checkpointID, set string, records map[string][]byte, queued *artifact.Section) (AgentsEntry, error) {
	sections, blobs, err := c.agentSections(ctx, records)
	if err != nil {
		return AgentsEntry{}, err
	}
	if queued != nil {
		sections = append(sections, *queued)
	}
	loc, err := dir.Sub(checkpoint.AgentsDir)
	if err != nil {
		return AgentsEntry{}, err
	}
	m, err := artifact.WriteTo(ctx, loc, artifact.Meta{
		CheckpointID: checkpointID,
		Labels:       map[string]string{"component": "coordinator", "set": set},
	}, sections, artifact.Options{BetweenFiles: func() { c.Failpoints.Hit(failpoint.CheckpointBetweenFiles) }, Key: c.Checkpoints.Key})
	if err != nil {
		return AgentsEntry{}, fmt.Errorf("write agents artifact: %w", err)
	}
	size, err := artifact.SizeIn(ctx, loc, m)
	if err != nil {
		return AgentsEntry{}, err
	}
	return AgentsEntry{Location: checkpoint.AgentsDir, ManifestDigest: m.Digest, Records: len(records), Transcripts: blobs, Bytes: size}, nil
}

// agentSections lays the records and their transcript blobs out as the two
// sections of the agents artifact.
func (c *Coordinator) agentSections(ctx context.Context, records map[string][]byte) ([]artifact.Section, int, error) {
	agents := artifact.Section{Name: checkpoint.SectionAgents, Records: make([]artifact.Record, 0, len(records))}
	want := map[transcript.Digest]bool{}
	ids := make([]string, 0, len(records))
	for id := range records {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	prog := newProgress(ctx, "collect transcripts", len(ids))
	defer prog.stop()
	for _, id := range ids {
		raw := records[id]
		agents.Records = append(agents.Records, artifact.Record{Key: id, Data: raw})
		rec, err := DecodeRecord(raw)
		if err != nil {
			return nil, 0, err
		}
		heads, singles := references(rec)
		if len(heads)+len(singles) > 0 && c.Store == nil {
			return nil, 0, temporal.NewNonRetryableApplicationError("coordinator: no transcript store configured", rollout.ErrBadInput, nil)
		}
		for _, h := range heads {
			list, err := c.Store.Blobs(ctx, h)
			if err != nil {
				return nil, 0, rollout.StoreError(fmt.Sprintf("transcript of %s at %s", id, h), err)
			}
			for _, d := range list {
				want[d] = true
			}
		}
		for _, d := range singles {
			want[d] = true
		}
		if err := c.addPrefixBlobs(ctx, id, rec, want); err != nil {
			return nil, 0, err
		}
		prog.add()
	}
	digests := make([]string, 0, len(want))
	for d := range want {
		digests = append(digests, string(d))
	}
	sort.Strings(digests)
	tr := artifact.Section{Name: checkpoint.SectionTranscripts, Records: make([]artifact.Record, 0, len(digests))}
	for _, d := range digests {
		data, err := c.Store.Get(ctx, transcript.Digest(d))
		if err != nil {
			return nil, 0, rollout.StoreError("transcript blob "+d, err)
		}
		tr.Records = append(tr.Records, artifact.Record{Key: d, Data: data})
	}
	return []artifact.Section{agents, tr}, len(digests), nil
}

// addPrefixBlobs adds the chunks of the durable prefix a record's boundary
// keeps (a model call its park deadline cut) to want: a restore continues
// that call from them.
func (c *Coordinator) addPrefixBlobs(ctx context.Context, id string, rec rollout.ParkRecord, want map[transcript.Digest]bool) error {
	p := rec.Boundary.Partial
	if p == nil {
		return nil
	}
	if c.Store == nil {
		return temporal.NewNonRetryableApplicationError("coordinator: no transcript store configured", rollout.ErrBadInput, nil)
	}
	list, err := c.Store.PrefixBlobs(ctx, p.Record)
	if err != nil {
		return rollout.StoreError(fmt.Sprintf("model prefix of %s at %s", id, p.Record), err)
	}
	for _, d := range list {
		want[d] = true
	}
	return nil
}

// openParticipant opens and validates participant i's artifact in the
// checkpoint store dir.
func openParticipant(ctx context.Context, dir storage.Store, i int, checkpointID string, set artifact.Settings) (*artifact.Checkpoint, error) {
	sub, err := dir.Sub(checkpoint.ParticipantsDir + "/" + fmt.Sprint(i))
	if err != nil {
		return nil, err
	}
	return artifact.OpenStoreWith(ctx, sub, checkpointID, set)
}
