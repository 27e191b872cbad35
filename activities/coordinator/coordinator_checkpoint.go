package coordinator

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"

	"github.com/turnstile-rl/turnstile/internal/fanout"
	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
	"github.com/turnstile-rl/turnstile/workflows/rollout"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/turnstile-rl/turnstile/internal/artifact"
	"github.com/turnstile-rl/turnstile/internal/failpoint"
	"github.com/turnstile-rl/turnstile/internal/storage"
	"github.com/turnstile-rl/turnstile/internal/transcript"
	"github.com/turnstile-rl/turnstile/participants/protocol"
)

// abortedMarker in the staging directory tells a late commit that the
// checkpoint was aborted: it must not write a manifest.
const abortedMarker = checkpoint.StagingDir + "/ABORTED"

// stagedParticipants is staging/participants.json.
type stagedParticipants struct {
	CheckpointID string              `json:"checkpoint_id"`
	Set          string              `json:"set"`
	Participants []participantReport `json:"participants"`
}

// PrepareParticipants checks every environment server's capabilities, then
// prepares it: admission closes, in-flight mutations drain by the deadline
// and the cut freezes. The reports (live sessions by rollout and attempt) go
// to the staging directory.
func (c *Coordinator) PrepareParticipants(ctx context.Context, in checkpoint.PrepareParticipantsInput) (checkpoint.PrepareParticipantsResult, error) {
	dir, err := c.checkDir(ctx, in.Root, in.CheckpointID)
	if err != nil {
		return checkpoint.PrepareParticipantsResult{}, err
	}
	if err := rollout.ValidateSet(in.Set); err != nil {
		return checkpoint.PrepareParticipantsResult{}, rollout.BadInput("%v", err)
	}
	if err := checkParticipants(in.Participants); err != nil {
		return checkpoint.PrepareParticipantsResult{}, err
	}
	if in.Deadline.IsZero() {
		return checkpoint.PrepareParticipantsResult{}, rollout.BadInput("prepare of checkpoint %s: no deadline", in.CheckpointID)
	}
	for _, name := range []string{checkpoint.AggregateManifestName, abortedMarker} {
		if _, err := dir.Stat(ctx, name); err == nil {
			return checkpoint.PrepareParticipantsResult{}, rollout.BadInput("checkpoint %s: %s already exists: a checkpoint id is used once; take a new one", in.CheckpointID, at(dir, name))
		} else if !errors.Is(err, storage.ErrNotExist) {
			return checkpoint.PrepareParticipantsResult{}, fmt.Errorf("checkpoint %s: %w", in.CheckpointID, err)
		}
	}
	reports := make([]participantReport, len(in.Participants))
	prog := newProgress(ctx, "prepare", len(in.Participants))
	defer prog.stop()
	err = fanout.Each(ctx, len(in.Participants), c.limit(), func(ctx context.Context, i int) error {
		url := in.Participants[i]
		cc := c.control(url)
		var caps protocol.Capabilities
		dead, err := callReachable(ctx, func(ctx context.Context) error {
			var err error
			caps, err = cc.Capabilities(ctx)
			return err
		})
		if dead {
			// Fail fast: waiting for the deadline only keeps the others'
			// admission closed for a checkpoint that cannot commit.
			return participantUnreachable(url, "capabilities", err)
		}
		if err != nil {
			return controlError(url, "capabilities", err)
		}
		if caps.Component != protocol.ComponentEnvironmentServer || caps.SchemaVersion != protocol.ControlSchemaVersion ||
			!slices.Contains(caps.Features, protocol.FeatureAbsoluteDeadline) {
			return temporal.NewNonRetryableApplicationError(fmt.Sprintf(
				"participant %s is %s schema %d with features %v; this coordinator needs %s schema %d with %s",
				url, caps.Component, caps.SchemaVersion, caps.Features, protocol.ComponentEnvironmentServer,
				protocol.ControlSchemaVersion, protocol.FeatureAbsoluteDeadline), checkpoint.ErrParticipantRefused, nil)
		}
		prep, err := cc.Prepare(ctx, protocol.PrepareRequest{CheckpointID: in.CheckpointID, Deadline: in.Deadline})
		if err != nil {
			return controlError(url, "prepare", err)
		}
		reports[i] = participantReport{Index: i, URL: url, Name: caps.Name, Envs: caps.Envs, Sessions: prep.Sessions}
		prog.add()
		return nil
	})
	if err != nil {
		return checkpoint.PrepareParticipantsResult{}, fmt.Errorf("prepare checkpoint %s: %w", in.CheckpointID, err)
	}
	sessions := 0
	for _, r := range reports {
		sessions += len(r.Sessions)
	}
	digest, err := writeJSONAtomic(ctx, at(dir, checkpoint.StagingParticipants), stagedParticipants{
		CheckpointID: in.CheckpointID, Set: in.Set, Participants: reports,
	})
	if err != nil {
		return checkpoint.PrepareParticipantsResult{}, err
	}
	c.Failpoints.Hit(failpoint.CoordinatorAfterPrepare)
	return checkpoint.PrepareParticipantsResult{Participants: len(reports), Sessions: sessions, Digest: digest}, nil
}

func readStagedParticipants(ctx context.Context, dir storage.Store, checkpointID string) (stagedParticipants, error) {
	var sp stagedParticipants
	if _, err := readJSONStrict(ctx, at(dir, checkpoint.StagingParticipants), &sp); err != nil {
		return stagedParticipants{}, fmt.Errorf("read staged participant reports: %w", err)
	}
	if sp.CheckpointID != checkpointID {
		return stagedParticipants{}, fmt.Errorf("staged participant reports are of checkpoint %q, not %q", sp.CheckpointID, checkpointID)
	}
	return sp, nil
}

// FreezeMembership lists every running rollout of the set through
// visibility and adds the rollouts the environment servers reported live
// sessions for, so a rollout started while the checkpoint began is a member
// too. The list goes to staging/members.json.
func (c *Coordinator) FreezeMembership(ctx context.Context, in checkpoint.FreezeMembershipInput) (checkpoint.FreezeMembershipResult, error) {
	dir, err := c.checkDir(ctx, in.Root, in.CheckpointID)
	if err != nil {
		return checkpoint.FreezeMembershipResult{}, err
	}
	if err := rollout.ValidateSet(in.Set); err != nil {
		return checkpoint.FreezeMembershipResult{}, rollout.BadInput("%v", err)
	}
	tc, err := c.temporal()
	if err != nil {
		return checkpoint.FreezeMembershipResult{}, err
	}
	sp, err := readStagedParticipants(ctx, dir, in.CheckpointID)
	if err != nil {
		return checkpoint.FreezeMembershipResult{}, err
	}
	visible := map[string]bool{}
	prog := newProgress(ctx, "list", 0)
	defer prog.stop()
	err = listSet(ctx, tc, in.Set, `ExecutionStatus = "Running"`, func(r visibleRun) {
		visible[r.RolloutID] = true
		prog.add()
	})
	if err != nil {
		return checkpoint.FreezeMembershipResult{}, err
	}
	// Sessions visibility did not list: a verified (retired) session holds
	// only receipts of a finished rollout; the others are described, which
	// reads the run itself rather than the lagging index.
	var extra []string
	for _, p := range sp.Participants {
		for _, s := range p.Sessions {
			if !s.Retired && !visible[s.RolloutID] {
				extra = append(extra, s.RolloutID)
			}
		}
	}
	extra = sortedUnique(extra)
	member := make([]bool, len(extra))
	prog = newProgress(ctx, "describe", len(extra))
	defer prog.stop()
	err = fanout.Each(ctx, len(extra), c.limit(), func(ctx context.Context, i int) error {
		ri, err := describeRollout(ctx, tc, extra[i])
		if err != nil {
			return err
		}
		// A missing workflow stays a member: the park names it.
		member[i] = !ri.Exists || ri.Set == "" || ri.Set == in.Set
		prog.add()
		return nil
	})
	if err != nil {
		return checkpoint.FreezeMembershipResult{}, err
	}
	res := checkpoint.FreezeMembershipResult{FromVisibility: len(visible)}
	ids := make([]string, 0, len(visible)+len(extra))
	for id := range visible {
		ids = append(ids, id)
	}
	for i, id := range extra {
		if member[i] {
			ids = append(ids, id)
			res.FromParticipants++
		} else {
			res.Foreign++
		}
	}
	ids = sortedUnique(ids)
	res.Members = len(ids)
	res.Digest, err = writeJSONAtomic(ctx, at(dir, checkpoint.ListMembers), rolloutList{CheckpointID: in.CheckpointID, Set: in.Set, Rollouts: ids})
	if err != nil {
		return checkpoint.FreezeMembershipResult{}, err
	}
	c.Failpoints.Hit(failpoint.CoordinatorAfterFreeze)
	return res, nil
}

// ParkMembers asks every member to park at its next boundary, by signal,
// and keeps its park record, read by query once it has parked. Every
// rollout is asked first, then the records are read, so the rollouts park
// concurrently however many there are. A member that already completed and
// closed is skipped: its result was delivered. A member with no workflow is
// an error naming it; one held for another checkpoint refuses. A retried
// activity asks again (a second park for the same checkpoint changes
// nothing) and reads the same records.
func (c *Coordinator) ParkMembers(ctx context.Context, in checkpoint.ParkMembersInput) (checkpoint.ParkMembersResult, error) {
	dir, err := c.checkDir(ctx, in.Root, in.CheckpointID)
	if err != nil {
		return checkpoint.ParkMembersResult{}, err
	}
	tc, err := c.temporal()
	if err != nil {
		return checkpoint.ParkMembersResult{}, err
	}
	members, err := readRolloutList(ctx, at(dir, checkpoint.ListMembers), in.CheckpointID)
	if err != nil {
		return checkpoint.ParkMembersResult{}, fmt.Errorf("read membership: %w", err)
	}
	p := &parking{c: c, tc: tc, in: in, ids: members.Rollouts, closed: make([]bool, len(members.Rollouts))}
	if err := p.ask(ctx); err != nil {
		return checkpoint.ParkMembersResult{}, fmt.Errorf("park members of checkpoint %s: %w", in.CheckpointID, err)
	}
	records, res, err := p.collect(ctx)
	if err != nil {
		return checkpoint.ParkMembersResult{}, fmt.Errorf("park members of checkpoint %s: %w", in.CheckpointID, err)
	}
	if res.RecordsDigest, err = writeRecords(ctx, at(dir, checkpoint.StagingRecords), records); err != nil {
		return checkpoint.ParkMembersResult{}, err
	}
	parked := make([]string, 0, len(records))
	for id := range records {
		parked = append(parked, id)
	}
	sort.Strings(parked)
	if _, err := writeJSONAtomic(ctx, at(dir, checkpoint.ListParked), rolloutList{CheckpointID: in.CheckpointID, Set: in.Set, Rollouts: parked}); err != nil {
		return checkpoint.ParkMembersResult{}, err
	}
	c.Failpoints.Hit(failpoint.CoordinatorAfterPark)
	return res, nil
}

// parking is one ParkMembers call: the members, and which of them turned
// out to have completed and closed before they could park.
type parking struct {
	c      *Coordinator
	tc     client.Client
	in     checkpoint.ParkMembersInput
	ids    []string
	closed []bool
	parkingState
}

// closedOrMissing explains a failed update to rollout id: closed (true, nil)
// when its workflow has completed; an error naming it when it has no
// workflow; otherwise the update's own error.
func (c *Coordinator) closedOrMissing(ctx context.Context, tc client.Client, id string, updateErr error) (bool, error) {
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	ri, err := describeRollout(ctx, tc, id)
	if err != nil {
		return false, fmt.Errorf("rollout %s: %v (and then: %w)", id, updateErr, err)
	}
	switch {
	case !ri.Exists:
		return false, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("rollout %s is a member but workflow %s does not exist", id, rollout.WorkflowID(id)), checkpoint.ErrMemberMissing, nil)
	case !ri.Running:
		return true, nil
	}
	var ae *temporal.ApplicationError
	if errors.As(updateErr, &ae) {
		// The rollout itself answered no: asking again will not change it.
		return false, temporal.NewNonRetryableApplicationError(fmt.Sprintf("rollout %s refused: %v", id, updateErr), checkpoint.ErrMemberRefused, nil)
	}
	return false, fmt.Errorf("rollout %s: %w", id, updateErr)
}

// CommitCheckpoint commits every environment server into
// participants/<n>/, then the agent records and the transcript blobs they
// reference into agents/, then, last, MANIFEST.json. A retried commit finds
// the same files, validates them and returns the same answer.
func (c *Coordinator) CommitCheckpoint(ctx context.Context, in checkpoint.CommitCheckpointInput) (checkpoint.CommitCheckpointResult, error) {
	st, err := c.readCommitStaging(ctx, in)
	if err != nil {
		return checkpoint.CommitCheckpointResult{}, err
	}
	// 1. The environment servers, each into its own directory.
	entries, err := c.commitParticipants(ctx, st.dir, in.CheckpointID, st.participants.Participants)
	if err != nil {
		return checkpoint.CommitCheckpointResult{}, fmt.Errorf("commit checkpoint %s: %w", in.CheckpointID, err)
	}
	// 2. The agent records and their transcripts.
	agents, err := c.writeAgents(ctx, st.dir, in.CheckpointID, in.Set, st.records)
	if err != nil {
		return checkpoint.CommitCheckpointResult{}, fmt.Errorf("commit checkpoint %s: %w", in.CheckpointID, err)
	}
	// 3. The aggregate manifest, last.
	m := AggregateManifest{
		Schema: checkpoint.AggregateSchemaVersion, CheckpointID: in.CheckpointID, Set: in.Set,
		Participants: entries, Agents: agents, Members: len(st.members.Rollouts), Parked: len(st.records),
		Closed: len(st.members.Rollouts) - len(st.records),
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
		CompletedUnacked: m.CompletedUnacked, Transcripts: agents.Transcripts,
	}, nil
}

// commitStaging is what the earlier steps of a checkpoint staged for its
// commit.
type commitStaging struct {
	dir          storage.Store
	participants stagedParticipants
	members      rolloutList
	records      map[string][]byte
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
	return commitStaging{dir: dir, participants: sp, members: members, records: records}, nil
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
			var err error
			resp, err = c.control(p.URL).Commit(ctx, protocol.CommitRequest{CheckpointID: checkpointID, Location: loc})
			return err
		})
		if dead {
			// Its prepared cut died with it: no retry can commit it, and a
			// manifest naming it must not be written.
			return participantUnreachable(p.URL, "commit", err)
		}
		if err != nil {
			return controlError(p.URL, "commit", err)
		}
		// What the coordinator cannot read, a restore cannot either.
		cp, err := openParticipant(ctx, dir, i, checkpointID)
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
	b, err := encodeAggregate(m)
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
func (c *Coordinator) writeAgents(ctx context.Context, dir storage.Store, checkpointID, set string, records map[string][]byte) (AgentsEntry, error) {
	sections, blobs, err := c.agentSections(ctx, records)
	if err != nil {
		return AgentsEntry{}, err
	}
	loc, err := dir.Sub(checkpoint.AgentsDir)
	if err != nil {
		return AgentsEntry{}, err
	}
	m, err := artifact.WriteTo(ctx, loc, artifact.Meta{
		CheckpointID: checkpointID,
		Labels:       map[string]string{"component": "coordinator", "set": set},
	}, sections, artifact.Options{BetweenFiles: func() { c.Failpoints.Hit(failpoint.CheckpointBetweenFiles) }})
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

// ResumeParticipants reopens admission at every environment server and
// retires the checkpoint id there. Resume is idempotent and is also the
// abort of a prepare, commit or restore.
func (c *Coordinator) ResumeParticipants(ctx context.Context, in checkpoint.ResumeParticipantsInput) (checkpoint.ResumeParticipantsResult, error) {
	if err := checkpoint.ValidateName("checkpoint_id", in.CheckpointID); err != nil {
		return checkpoint.ResumeParticipantsResult{}, rollout.BadInput("%v", err)
	}
	if err := checkParticipants(in.Participants); err != nil {
		return checkpoint.ResumeParticipantsResult{}, err
	}
	prog := newProgress(ctx, "resume participants", len(in.Participants))
	defer prog.stop()
	err := fanout.Each(ctx, len(in.Participants), c.limit(), func(ctx context.Context, i int) error {
		if _, err := c.control(in.Participants[i]).Resume(ctx, in.CheckpointID); err != nil {
			return controlError(in.Participants[i], "resume", err)
		}
		prog.add()
		return nil
	})
	if err != nil {
		return checkpoint.ResumeParticipantsResult{}, fmt.Errorf("resume participants of checkpoint %s: %w", in.CheckpointID, err)
	}
	c.Failpoints.Hit(failpoint.CoordinatorAfterResumeParticipants)
	return checkpoint.ResumeParticipantsResult{Resumed: len(in.Participants)}, nil
}

// ResumeRollouts signals every rollout of the list to resume. A rollout
// that is not held for the checkpoint ignores it, so a retry is harmless.
func (c *Coordinator) ResumeRollouts(ctx context.Context, in checkpoint.ResumeRolloutsInput) (checkpoint.ResumeRolloutsResult, error) {
	dir, err := c.checkDir(ctx, in.Root, in.CheckpointID)
	if err != nil {
		return checkpoint.ResumeRolloutsResult{}, err
	}
	if !slices.Contains([]string{checkpoint.ListParked, checkpoint.ListMembers, checkpoint.ListStarted}, in.List) {
		return checkpoint.ResumeRolloutsResult{}, rollout.BadInput("list %q: want one of %s, %s, %s", in.List, checkpoint.ListParked, checkpoint.ListMembers, checkpoint.ListStarted)
	}
	tc, err := c.temporal()
	if err != nil {
		return checkpoint.ResumeRolloutsResult{}, err
	}
	l, err := readRolloutList(ctx, at(dir, in.List), in.CheckpointID)
	if err != nil {
		return checkpoint.ResumeRolloutsResult{}, fmt.Errorf("read rollouts to resume: %w", err)
	}
	resumed, gone, err := c.releaseRollouts(ctx, tc, in.CheckpointID, l.Rollouts)
	if err != nil {
		return checkpoint.ResumeRolloutsResult{}, fmt.Errorf("resume rollouts of checkpoint %s: %w", in.CheckpointID, err)
	}
	return checkpoint.ResumeRolloutsResult{Resumed: resumed, Gone: gone}, nil
}

// AbortCheckpoint makes a failed checkpoint harmless: it marks the staging
// directory aborted (a late commit then writes no manifest), removes any
// aggregate manifest, resumes every participant (resume is the abort) and
// releases every member that may have parked. It tries every step even when
// one fails, and reports all failures. A participant nothing listens at is
// no failure: it is named in the result (it holds nothing, and failing the
// abort for it only left the set parked).
func (c *Coordinator) AbortCheckpoint(ctx context.Context, in checkpoint.AbortCheckpointInput) (checkpoint.AbortCheckpointResult, error) {
	dir, err := c.checkDir(ctx, in.Root, in.CheckpointID)
	if err != nil {
		return checkpoint.AbortCheckpointResult{}, err
	}
	if err := checkParticipants(in.Participants); err != nil {
		return checkpoint.AbortCheckpointResult{}, err
	}
	var res checkpoint.AbortCheckpointResult
	var errs []error
	if err := writeFileAtomic(ctx, at(dir, abortedMarker), []byte(in.CheckpointID+"\n")); err != nil {
		errs = append(errs, fmt.Errorf("mark aborted: %w", err))
	}
	removed, err := removeManifest(ctx, dir)
	res.ManifestRemoved = removed
	if err != nil {
		errs = append(errs, fmt.Errorf("remove manifest: %w", err))
	}
	// Participants first, so released rollouts find admission open; each
	// call is bounded and none of their failures keeps the rollouts parked.
	// A dead participant is reported, not an error: retrying the abort
	// cannot resume it, and it holds nothing.
	dead, err := c.resumeReachable(ctx, in.CheckpointID, in.Participants)
	res.Unreachable = dead
	if err != nil {
		errs = append(errs, fmt.Errorf("resume participants of checkpoint %s: %w", in.CheckpointID, err))
	} else {
		res.Participants = len(in.Participants) - len(dead)
	}
	n, err := c.releaseMembers(ctx, dir, in.CheckpointID)
	res.Rollouts = n
	if err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return res, fmt.Errorf("abort of checkpoint %s: %w", in.CheckpointID, errors.Join(errs...))
	}
	return res, nil
}

// releaseMembers releases every member of the checkpoint, not only those
// known parked: a park may have been accepted without its answer reaching
// the coordinator.
func (c *Coordinator) releaseMembers(ctx context.Context, dir storage.Store, checkpointID string) (int, error) {
	l, err := readRolloutList(ctx, at(dir, checkpoint.ListMembers), checkpointID)
	switch {
	case errors.Is(err, storage.ErrNotExist):
		return 0, nil // membership never frozen: no rollout was asked to park
	case err != nil:
		return 0, err
	}
	tc, err := c.temporal()
	if err != nil {
		return 0, err
	}
	n, _, err := c.releaseRollouts(ctx, tc, checkpointID, l.Rollouts)
	return n, err
}

// removeManifest removes the aggregate manifest, durably, and reports
// whether there was one.
func removeManifest(ctx context.Context, dir storage.Store) (bool, error) {
	if _, err := dir.Stat(ctx, checkpoint.AggregateManifestName); errors.Is(err, storage.ErrNotExist) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	if err := dir.Remove(ctx, checkpoint.AggregateManifestName); err != nil {
		return false, err
	}
	return true, storage.Sync(ctx, dir)
}

// openParticipant opens and validates participant i's artifact in the
// checkpoint store dir.
func openParticipant(ctx context.Context, dir storage.Store, i int, checkpointID string) (*artifact.Checkpoint, error) {
	sub, err := dir.Sub(checkpoint.ParticipantsDir + "/" + fmt.Sprint(i))
	if err != nil {
		return nil, err
	}
	return artifact.OpenStore(ctx, sub, checkpointID)
}
