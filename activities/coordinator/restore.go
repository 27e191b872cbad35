package coordinator

import (
	"context"
	"path"

	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
	"github.com/turnstile-rl/turnstile/workflows/rollout"

	"go.temporal.io/sdk/client"

	"github.com/turnstile-rl/turnstile/internal/storage"
)

// A restore is named by its restore id, which defaults to the id of the
// checkpoint it restores. Each restore keeps its working files in
// <checkpoint>/restore/<restore_id>/ (attempts.json, started.json), so the
// same checkpoint can be restored more than once (the trainer rolling back
// to it again), each restore with its own attempt map, while a re-run of
// one restore reuses its own.

// restoreIDOf validates a restore id; empty means the checkpoint id.
func restoreIDOf(checkpointID, restoreID string) (string, error) {
	if restoreID == "" {
		return checkpointID, nil
	}
	if err := checkpoint.ValidateName("restore_id", restoreID); err != nil {
		return "", rollout.BadInput("%v", err)
	}
	return restoreID, nil
}

// restoreFiles validates a checkpoint id, root and restore id and returns
// the checkpoint directory, the restore id and the restore's directory.
func (c *Coordinator) restoreFiles(ctx context.Context, root, checkpointID, restoreID string) (dir storage.Store, rid string, rdir storage.Store, err error) {
	if dir, err = c.checkDir(ctx, root, checkpointID); err != nil {
		return nil, "", nil, err
	}
	if rid, err = restoreIDOf(checkpointID, restoreID); err != nil {
		return nil, "", nil, err
	}
	if rdir, err = dir.Sub(checkpoint.RestoreDir + "/" + rid); err != nil {
		return nil, "", nil, rollout.BadInput("%v", err)
	}
	return dir, rid, rdir, nil
}

// attemptsPath and startedPath are a restore's attempt map and started
// list; the files keep the names checkpoint.RestoreAttempts and checkpoint.ListStarted give them.
func attemptsPath(rdir storage.Store) file {
	return at(rdir, path.Base(checkpoint.RestoreAttempts))
}

func startedPath(rdir storage.Store) file {
	return at(rdir, path.Base(checkpoint.ListStarted))
}

// restoreSetUp names what a restore step needs before its work. The
// checkpoint and restore ids and the root are always checked; the rest only
// when asked for.
type restoreSetUp struct {
	root, checkpointID, restoreID string
	// participants are the environment servers the restore names.
	participants []string
	// checkParticipants checks the participant list on its own (loading the
	// checkpoint checks it too, against the manifest).
	checkParticipants bool
	// temporal asks for the Temporal client.
	temporal bool
	// checkpoint asks for the whole checkpoint, loaded and validated.
	checkpoint bool
	// attempts asks for the restore's attempt map; with checkpoint, the map
	// must have been planned for the checkpoint's manifest.
	attempts bool
}

// restoreStep is the set-up a restore step shares with the others.
type restoreStep struct {
	dir  storage.Store // the checkpoint's directory
	rid  string        // the restore id
	rdir storage.Store // the restore's working directory, restore/<restore_id>/
	tc   client.Client
	lc   *loadedCheckpoint
	af   attemptsFile
	// attemptsDigest is the SHA-256 of the attempt map's file.
	attemptsDigest string
}

// setUpRestore does the set-up every restore step shares, always in the
// same order (ids and files, participants, Temporal client, checkpoint,
// attempt map), so that a problem fails each step the same way.
func (c *Coordinator) setUpRestore(ctx context.Context, in restoreSetUp) (restoreStep, error) {
	var rs restoreStep
	var err error
	if rs.dir, rs.rid, rs.rdir, err = c.restoreFiles(ctx, in.root, in.checkpointID, in.restoreID); err != nil {
		return restoreStep{}, err
	}
	if in.checkParticipants {
		if err := c.checkParticipants(in.participants); err != nil {
			return restoreStep{}, err
		}
	}
	if in.temporal {
		if rs.tc, err = c.temporal(); err != nil {
			return restoreStep{}, err
		}
	}
	if in.checkpoint {
		if rs.lc, err = c.loadCheckpoint(ctx, in.root, in.checkpointID, in.participants); err != nil {
			return restoreStep{}, err
		}
	}
	if in.attempts {
		path := attemptsPath(rs.rdir)
		var b []byte
		if rs.af, b, err = readAttempts(ctx, path, in.checkpointID, rs.rid); err != nil {
			return restoreStep{}, invalidCheckpoint("read the attempt map: %v", err)
		}
		rs.attemptsDigest = sha256Hex(b)
		if rs.lc != nil {
			if err := rs.af.plannedFor(path, rs.lc.manifest.Digest); err != nil {
				return restoreStep{}, err
			}
		}
	}
	return rs, nil
}
