package coordinator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/turnstile-rl/turnstile/internal/fanout"
	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
	"github.com/turnstile-rl/turnstile/workflows/rollout"

	"go.temporal.io/sdk/temporal"

	"github.com/turnstile-rl/turnstile/internal/failpoint"
	"github.com/turnstile-rl/turnstile/internal/storage"
	"github.com/turnstile-rl/turnstile/participants/protocol"
)

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
	if err := c.checkParticipants(in.Participants); err != nil {
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
		cc, err := c.control(url)
		if err != nil {
			return err
		}
		var caps protocol.Capabilities
		dead, err := callReachable(ctx, func(ctx context.Context) error {
			return c.watched(ctx, url, "capabilities", func(ctx context.Context) error {
				var err error
				caps, err = cc.Capabilities(ctx)
				return err
			})
		})
		if isHung(err) {
			return hungFatal(err)
		}
		if dead {
			// Fail fast: waiting for the deadline only keeps the others'
			// admission closed for a checkpoint that cannot commit.
			return participantUnreachable(url, "capabilities", err)
		}
		if err != nil {
			return controlError(url, "capabilities", err)
		}
		if err := protocol.CheckCapabilities(caps); err != nil {
			return temporal.NewNonRetryableApplicationError(fmt.Sprintf(
				"participant %s cannot take part in a checkpoint: its capabilities: %v (docs/protocol/RULES.md R17)", url, err),
				checkpoint.ErrParticipantRefused, nil)
		}
		req := protocol.PrepareRequest{CheckpointID: in.CheckpointID, Deadline: in.Deadline}
		if slices.Contains(caps.Features, protocol.FeaturePrepareLease) {
			// Only a participant that knows leases gets one: a strict
			// decoder of an older one refuses the unknown field.
			req.LeaseMillis = leaseMillis(in.Lease)
		}
		var prep protocol.PrepareResponse
		err = c.watched(ctx, url, "prepare", func(ctx context.Context) error {
			var err error
			prep, err = cc.Prepare(ctx, req)
			return err
		})
		if isHung(err) {
			return hungFatal(err)
		}
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

// leaseMillis is a prepare's lease_ms for lease: whole milliseconds, at
// least one, at most protocol.MaxLeaseMillis; 0 (the participant's
// default) for no lease given.
func leaseMillis(lease time.Duration) int64 {
	if lease <= 0 {
		return 0
	}
	return min(max(lease.Milliseconds(), 1), protocol.MaxLeaseMillis)
}
