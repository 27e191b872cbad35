package coordinator

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/internal/storage"
	"github.com/turnstile-rl/turnstile/participants/protocol"
	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// replaysFile is restore/<restore_id>/replays-<n>.json: what participant n
// did with the replay sessions a restore named (RULES.md R27), written by
// RestoreParticipants before it reports, read by StartRestored, which
// continues a replay rollout from its boundary only when its session was
// rebuilt.
type replaysFile struct {
	CheckpointID string `json:"checkpoint_id"`
	RestoreID    string `json:"restore_id"`
	Participant  int    `json:"participant"`
	// Replayed are the rollouts whose session the participant rebuilt by
	// replay, at the new attempt.
	Replayed []string `json:"replayed"`
	// Diverged are the replay rollouts it did not rebuild, with why: they
	// start over.
	Diverged map[string]string `json:"diverged"`
}

// replaysPath is participant i's replays file of a restore.
func replaysPath(rdir storage.Store, i int) file {
	return at(rdir, strings.Replace(path.Base(checkpoint.RestoreReplays), "<n>", fmt.Sprint(i), 1))
}

// replaysOf is the replays file of a participant's restore answer.
func replaysOf(checkpointID, restoreID string, i int, resp protocol.RestoreResponse) replaysFile {
	rf := replaysFile{CheckpointID: checkpointID, RestoreID: restoreID, Participant: i, Replayed: []string{}, Diverged: map[string]string{}}
	for _, s := range resp.Restored {
		if s.Mode == envs.ModeReplay && !s.Retired {
			rf.Replayed = append(rf.Replayed, s.RolloutID)
		}
	}
	for _, s := range resp.Restarted {
		if s.Mode == envs.ModeReplay {
			rf.Diverged[s.RolloutID] = s.Diverged
		}
	}
	return rf
}

// replayOutcomes is what a restore's participants did with its replay
// sessions: rebuilt (true) or not (false), by rollout.
type replayOutcomes map[string]bool

// readReplays reads the replays files of the restore's n participants; a
// participant the restore did not install (a scoped recovery) has none.
func readReplays(ctx context.Context, rdir storage.Store, checkpointID, restoreID string, n int) (replayOutcomes, error) {
	out := replayOutcomes{}
	for i := range n {
		var rf replaysFile
		_, err := readJSONStrict(ctx, replaysPath(rdir, i), &rf)
		if errors.Is(err, storage.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read the replays of participant %d: %w", i, err)
		}
		if rf.CheckpointID != checkpointID || rf.RestoreID != restoreID || rf.Participant != i {
			return nil, invalidCheckpoint("%s is of restore %q of checkpoint %q, participant %d", replaysPath(rdir, i), rf.RestoreID, rf.CheckpointID, rf.Participant)
		}
		for _, id := range rf.Replayed {
			out[id] = true
		}
		for id := range rf.Diverged {
			if !out[id] {
				out[id] = false
			}
		}
	}
	return out, nil
}

// settleReplay decides a continuation of a replay environment: it continues
// from its boundary only when a participant rebuilt its session by replay;
// otherwise (diverged, or no participant rebuilt it) it starts over from
// its seed with no state, as a restart-only rollout does. It returns the
// input, its kind and whether it was a replay rollout at all.
func settleReplay(in rollout.Input, kind string, rec rollout.ParkRecord, replays replayOutcomes) (rollout.Input, string, bool) {
	if kind != checkpoint.RestoreContinue || envs.EffectiveMode(rec.Boundary.EnvMode) != envs.ModeReplay {
		return in, kind, false
	}
	if replays[in.RolloutID] {
		return in, kind, true
	}
	in.Resume = nil
	return in, checkpoint.RestoreStartOver, true
}
