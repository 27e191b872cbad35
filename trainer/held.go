package trainer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	enumspb "go.temporal.io/api/enums/v1"

	"github.com/turnstile-rl/turnstile/internal/transcript"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// A rollout started with rollout.Input.ResultInStore stores the result it
// holds for acknowledgement in the transcript store, under its receipt's
// digest, and names it (rollout.SARolloutReceipt) in the upsert of its
// phase awaiting_ack. Readers then take a held result from visibility and
// the store, never from a status query: a query is a workflow task on the
// rollout task queue, behind every turn of the set's running rollouts. A
// run that named no stored result (started before the flag existed) is
// queried, as before.

// heldReceipt is the receipt of the result rec holds for acknowledgement
// as visibility names it; ok is false when rec is not a held run that
// named its stored result.
func heldReceipt(rec RolloutRecord) (rc rollout.Receipt, ok bool) {
	if rec.Status != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING || rec.Phase != string(rollout.PhaseAwaitingAck) || rec.heldSHA == "" {
		return rollout.Receipt{}, false
	}
	return rollout.Receipt{RolloutID: rec.RolloutID, Attempt: int(rec.Attempt), SHA256: rec.heldSHA}, true
}

// heldFromStore reads the result rec holds from store, when rec named it
// (heldReceipt): the blob's content is checked against its digest by the
// store, and its rollout and attempt against rec's. ok is false when rec
// named none, or the store does not have it (the reader queries the run).
func heldFromStore(ctx context.Context, store TranscriptReader, rec RolloutRecord) (*rollout.Result, bool, error) {
	rc, ok := heldReceipt(rec)
	if !ok {
		return nil, false, nil
	}
	data, err := store.Get(ctx, transcript.Digest("sha256:"+rc.SHA256))
	switch {
	case errors.Is(err, transcript.ErrNotFound):
		return nil, false, nil
	case err != nil:
		return nil, false, fmt.Errorf("held result of rollout %s (run %s): %w", rec.RolloutID, rec.RunID, err)
	}
	var res rollout.Result
	if err := json.Unmarshal(data, &res); err != nil {
		return nil, false, fmt.Errorf("held result of rollout %s (run %s): decode sha256:%s: %w", rec.RolloutID, rec.RunID, rc.SHA256, err)
	}
	if res.RolloutID != rc.RolloutID || res.Attempt != rc.Attempt {
		return nil, false, fmt.Errorf("held result of rollout %s attempt %d (run %s): sha256:%s is the result of rollout %s attempt %d",
			rc.RolloutID, rc.Attempt, rec.RunID, rc.SHA256, res.RolloutID, res.Attempt)
	}
	res.Receipt = &rc
	return &res, true, nil
}
