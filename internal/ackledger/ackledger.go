// Package ackledger is the client side of a set's acknowledgement ledger
// (workflow set.AckLedger): recording a batch of receipts, holding and
// ending the hold of its releases for a checkpoint, forgetting a rolled
// back world's receipts, and reading which results are acknowledged and
// not yet released. The client library (acknowledgements, the feed) and
// the checkpoint coordinator (park, restore) share it, so both start and
// read the ledger the same way.
package ackledger

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/turnstile-rl/turnstile/workflows/rollout"
	"github.com/turnstile-rl/turnstile/workflows/set"
)

// Updater is the part of client.Client that sends the ledger updates.
type Updater interface {
	NewWithStartWorkflowOperation(options client.StartWorkflowOptions, workflow any, args ...any) client.WithStartWorkflowOperation
	UpdateWithStartWorkflow(ctx context.Context, options client.UpdateWithStartWorkflowOptions) (client.WorkflowUpdateHandle, error)
	UpdateWorkflow(ctx context.Context, options client.UpdateWorkflowOptions) (client.WorkflowUpdateHandle, error)
}

// Querier is the part of client.Client that reads the ledger.
type Querier interface {
	QueryWorkflowWithOptions(ctx context.Context, request *client.QueryWorkflowWithOptionsRequest) (*client.QueryWorkflowWithOptionsResponse, error)
}

// startTries bounds the update-with-start of one call: a ledger that closed
// (idle) just as the update reached it is started again.
const startTries = 3

// FullError is a batch the ledger refused for want of room
// (set.ErrLedgerFull): sending it again once releases caught up is safe.
type FullError struct{ Msg string }

func (e *FullError) Error() string { return e.Msg }

// Record records receipts (checked by the caller against what their
// rollouts hold) in set's ledger, starting it on the control plane of
// rolloutQueue when it does not run, and returns once they are in its
// history.
func Record(ctx context.Context, c Updater, rolloutQueue, setName string, receipts []rollout.Receipt) (set.AckBatchResult, error) {
	var res set.AckBatchResult
	b := set.AckBatch{Set: setName, Receipts: receipts}
	err := withStart(ctx, c, rolloutQueue, setName, client.UpdateWorkflowOptions{
		UpdateName: set.UpdateRecordAcks, UpdateID: batchID(b), Args: []any{b},
	}, &res)
	var ae *temporal.ApplicationError
	if errors.As(err, &ae) && ae.Type() == set.ErrLedgerFull {
		return res, &FullError{Msg: ae.Message()}
	}
	if err != nil {
		return res, fmt.Errorf("record %d acknowledgements of set %s: %w", len(receipts), setName, err)
	}
	return res, nil
}

// batchID is the update id of a batch: its digest, so a batch sent again
// to the same ledger run is one update.
func batchID(b set.AckBatch) string {
	h := sha256.New()
	for _, rc := range b.Receipts {
		fmt.Fprintf(h, "%s\x00%d\x00%s\n", rc.RolloutID, rc.Attempt, rc.SHA256)
	}
	return "acks/" + hex.EncodeToString(h.Sum(nil))
}

// Hold stops the releases of set's ledger for checkpointID until it ends
// the hold (or until), starting the ledger when it does not run, and
// returns the sequence number of the checkpoint's cut: the receipts
// recorded up to it are acknowledged in the checkpoint.
func Hold(ctx context.Context, c Updater, rolloutQueue, setName, checkpointID string, until time.Time) (int64, error) {
	var res set.ReleaseHoldResult
	err := withStart(ctx, c, rolloutQueue, setName, client.UpdateWorkflowOptions{
		UpdateName: set.UpdateHoldReleases, UpdateID: uniqueID("hold/" + checkpointID),
		Args: []any{set.ReleaseHold{CheckpointID: checkpointID, Until: until.UTC()}},
	}, &res)
	if err != nil {
		return 0, fmt.Errorf("hold the releases of set %s for checkpoint %s: %w", setName, checkpointID, err)
	}
	return res.Seq, nil
}

// EndHold ends checkpointID's hold of set's ledger; a ledger that does not
// run holds nothing.
func EndHold(ctx context.Context, c Updater, setName, checkpointID string) error {
	err := update(ctx, c, setName, client.UpdateWorkflowOptions{
		UpdateName: set.UpdateEndHold, UpdateID: uniqueID("end-hold/" + checkpointID),
		Args: []any{set.EndHold{CheckpointID: checkpointID}},
	}, nil)
	if err != nil && !isNotFound(err) {
		return fmt.Errorf("end the hold of set %s's releases for checkpoint %s: %w", setName, checkpointID, err)
	}
	return nil
}

// Forget drops the receipts of ids recorded before before from set's
// ledger; a ledger that does not run holds none.
func Forget(ctx context.Context, c Updater, setName string, ids []string, before time.Time) (int, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	var res set.ForgetAcksResult
	f := set.ForgetAcks{RolloutIDs: ids, RecordedBefore: before.UTC()}
	err := update(ctx, c, setName, client.UpdateWorkflowOptions{
		UpdateName: set.UpdateForgetAcks, UpdateID: "forget/" + before.UTC().Format(time.RFC3339Nano) + "/" + fmt.Sprint(len(ids)),
		Args: []any{f},
	}, &res)
	if isNotFound(err) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("forget %d rollouts' acknowledgements in set %s's ledger: %w", len(ids), setName, err)
	}
	return res.Forgotten, nil
}

// Acked reads which of ids (all, when ids is empty) set's ledger holds
// acknowledged and not yet released, by rollout id. A ledger that does not
// run (never started, or closed once idle) holds none, and is not woken.
func Acked(ctx context.Context, c Querier, setName string, ids []string) (map[string]set.PendingAck, error) {
	out := map[string]set.PendingAck{}
	var pending []set.PendingAck
	if err := queryLedger(ctx, c, setName, set.QueryAcked, ids, &pending); err != nil {
		return nil, err
	}
	for _, p := range pending {
		out[p.Receipt.RolloutID] = p
	}
	return out, nil
}

// Settled reads which of ids set's ledger knows acknowledged: pending, or
// released lately by its current run (set.QuerySettled), by rollout id. A
// reader that saw a result held asks afterwards, so a result acknowledged
// and released meanwhile is not taken for unacknowledged. A ledger that
// does not run knows none, and is not woken.
func Settled(ctx context.Context, c Querier, setName string, ids []string) (map[string]rollout.Receipt, error) {
	out := map[string]rollout.Receipt{}
	if len(ids) == 0 {
		return out, nil
	}
	var receipts []rollout.Receipt
	if err := queryLedger(ctx, c, setName, set.QuerySettled, ids, &receipts); err != nil {
		return nil, err
	}
	for _, rc := range receipts {
		out[rc.RolloutID] = rc
	}
	return out, nil
}

// queryLedger asks set's ledger queryType about ids and decodes the answer
// into out. A ledger that does not run (never started, or closed once
// idle) leaves out as it is, and is not woken: it held nothing when it
// closed.
func queryLedger(ctx context.Context, c Querier, setName, queryType string, ids []string, out any) error {
	resp, err := c.QueryWorkflowWithOptions(ctx, &client.QueryWorkflowWithOptionsRequest{
		WorkflowID: set.AckLedgerWorkflowID(setName), QueryType: queryType, Args: []any{ids},
		QueryRejectCondition: enumspb.QUERY_REJECT_CONDITION_NOT_OPEN,
	})
	switch {
	case isNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("read the acknowledgement ledger of set %s: %w", setName, err)
	case resp.QueryRejected != nil || resp.QueryResult == nil:
		return nil
	}
	if err := resp.QueryResult.Get(out); err != nil {
		return fmt.Errorf("decode the acknowledgement ledger of set %s: %w", setName, err)
	}
	return nil
}

// withStart sends an update to set's ledger, starting it when it does not
// run, and decodes the answer into out.
func withStart(ctx context.Context, c Updater, rolloutQueue, setName string, u client.UpdateWorkflowOptions, out any) error {
	u.WaitForStage = client.WorkflowUpdateStageCompleted
	var err error
	for range startTries {
		op := c.NewWithStartWorkflowOperation(set.AckLedgerStartOptions(setName, rolloutQueue), set.AckLedgerWorkflowName, set.AckLedgerInput{Set: setName})
		var h client.WorkflowUpdateHandle
		h, err = c.UpdateWithStartWorkflow(ctx, client.UpdateWithStartWorkflowOptions{StartWorkflowOperation: op, UpdateOptions: u})
		if err == nil {
			err = h.Get(ctx, out)
		}
		if !closedMeanwhile(err) {
			return err
		}
	}
	return err
}

// update sends an update to the running ledger of set.
func update(ctx context.Context, c Updater, setName string, u client.UpdateWorkflowOptions, out any) error {
	u.WorkflowID, u.WaitForStage = set.AckLedgerWorkflowID(setName), client.WorkflowUpdateStageCompleted
	h, err := c.UpdateWorkflow(ctx, u)
	if err != nil {
		return err
	}
	return h.Get(ctx, out)
}

// uniqueID is an update id never used before: a hold ended and taken again
// (a retried checkpoint step) is a new update, not the first one's answer.
// The handlers are idempotent by checkpoint, so a repeat is harmless.
func uniqueID(prefix string) string { return prefix + "/" + fmt.Sprint(time.Now().UnixNano()) }

func isNotFound(err error) bool {
	var nf *serviceerror.NotFound
	return errors.As(err, &nf)
}

// closedMeanwhile says whether an update found the ledger closing (idle)
// as it arrived: a new run takes it.
func closedMeanwhile(err error) bool {
	return isNotFound(err) || (err != nil && strings.Contains(err.Error(), "workflow execution already completed"))
}
