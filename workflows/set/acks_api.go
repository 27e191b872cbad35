package set

import (
	"errors"
	"fmt"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// A set's acknowledgement ledger (workflow type AckLedger, ID
// AckLedgerWorkflowID) is where an acknowledgement becomes durable: a
// pipeline's batch of receipts is ONE update of it (UpdateRecordAcks),
// answered once the update is in its history, whatever the batch's size.
// The held rollouts are released afterwards, off the pipeline's path: the
// ledger hands its pending receipts to the ReleaseAcknowledged activity in
// batches, which sends each rollout its acknowledge update (the same
// update id as a direct acknowledgement, so a release sent twice applies
// once), and drops them once released.
//
// Until then a result is "acknowledged, not yet released": its rollout
// still holds it, so every reader of held results consults the ledger
// (QueryAcked) and treats it as acknowledged. The results feed does not
// deliver it again; a checkpoint that begins parking its members (it holds
// the releases first, UpdateHoldReleases) records those acknowledged before
// as acknowledged, not as held; a restore forgets the acknowledgements of
// the world it rolls back (UpdateForgetAcks) before it starts its runs.
//
// It runs on the control plane's task queue, beside the coordinator: its
// workflow tasks never queue behind rollout work. Its history stays small:
// it continues as new when Temporal suggests it, carrying the pending
// receipts (at most MaxPendingAcks), and it closes once idle for
// AckLedgerIdle with nothing pending; the next acknowledgement starts it
// again.
const (
	AckLedgerWorkflowName = "AckLedger"
	ackLedgerIDPrefix     = "acks/"
)

// AckLedgerWorkflowID is the workflow ID of set's acknowledgement ledger.
func AckLedgerWorkflowID(set string) string { return ackLedgerIDPrefix + set }

// Message names of the AckLedger workflow.
const (
	// UpdateRecordAcks records a batch of receipts (an AckBatch) and
	// answers an AckBatchResult once they are in the ledger's history.
	UpdateRecordAcks = "record-acks"
	// UpdateHoldReleases stops releases for a checkpoint (a ReleaseHold),
	// once no release is in flight, and answers the ledger's sequence
	// number at that moment (a ReleaseHoldResult): the receipts recorded
	// up to it are in the checkpoint as acknowledged.
	UpdateHoldReleases = "hold-releases"
	// UpdateEndHold ends the hold of the checkpoint named (an EndHold).
	UpdateEndHold = "end-hold"
	// UpdateForgetAcks drops, once no release is in flight, the pending
	// receipts of the rollouts named that were recorded before a time (a
	// ForgetAcks): a restore's, whose world they belong to no more.
	UpdateForgetAcks = "forget-acks"
	// QueryAcked takes rollout ids and answers the pending receipts of
	// those rollouts ([]PendingAck, in recording order); no ids: all.
	QueryAcked = "acked"
	// QuerySettled takes rollout ids and answers the receipts of those
	// rollouts the ledger holds acknowledged: pending, or released lately
	// (the last MaxRecentReleased of this run) — []rollout.Receipt. A
	// reader that saw a result held asks it afterwards: a result
	// acknowledged and released in between is then known acknowledged.
	QuerySettled = "settled"
)

// ReleaseAcknowledgedName is the activity that releases a batch of held
// results (package activities/bookkeeping).
const ReleaseAcknowledgedName = "ReleaseAcknowledged"

// Bounds of the ledger.
const (
	// MaxAckBatch bounds the receipts of one UpdateRecordAcks.
	MaxAckBatch = 10_000
	// MaxPendingAcks bounds the receipts waiting to be released: a batch
	// that would go beyond is refused (ErrLedgerFull), to be sent again
	// once releases caught up. It keeps a continue-as-new's input under
	// Temporal's payload limit.
	MaxPendingAcks = 10_000
	// DefaultReleaseBatch is how many receipts one ReleaseAcknowledged
	// activity releases.
	DefaultReleaseBatch = 256
	// MaxReleaseBatch bounds AckLedgerInput.ReleaseBatch.
	MaxReleaseBatch = 4096
	// AckLedgerIdle is how long a ledger with nothing pending and no hold
	// waits for news before it closes.
	AckLedgerIdle = 10 * time.Minute
	// MaxRecentReleased bounds the receipts released lately a ledger run
	// remembers for QuerySettled (in memory only: not carried over a
	// continue-as-new).
	MaxRecentReleased = 10_000
)

// ErrLedgerFull is the error type of a batch refused because the ledger
// holds MaxPendingAcks receipts not yet released: sending it again later
// is safe.
const ErrLedgerFull = "AckLedgerFull"

// AckLedgerInput starts a ledger, or continues one as new with what it
// carries.
type AckLedgerInput struct {
	Set string `json:"set"`
	// ReleaseBatch is how many receipts one release activity takes
	// (0: DefaultReleaseBatch).
	ReleaseBatch int `json:"release_batch,omitempty"`
	// Carried over a continue-as-new: the receipts not yet released, the
	// holds, and the sequence number of the last receipt recorded.
	Pending []PendingAck  `json:"pending,omitempty"`
	Holds   []ReleaseHold `json:"holds,omitempty"`
	Seq     int64         `json:"seq,omitempty"`
}

// PendingAck is a receipt recorded and not yet released.
type PendingAck struct {
	Receipt rollout.Receipt `json:"receipt"`
	// Seq numbers the receipts in the order the ledger recorded them; At
	// is when (the ledger's workflow time).
	Seq int64     `json:"seq"`
	At  time.Time `json:"at"`
}

// AckBatch is one UpdateRecordAcks: receipts of the ledger's set, each
// checked by the caller against what its rollout holds.
type AckBatch struct {
	Set      string            `json:"set"`
	Receipts []rollout.Receipt `json:"receipts"`
}

// AckBatchResult counts a batch: Recorded receipts new to the ledger (or
// replacing another receipt of the same rollout), Already ones it held
// pending; Pending is how many it holds now.
type AckBatchResult struct {
	Recorded int   `json:"recorded"`
	Already  int   `json:"already"`
	Pending  int   `json:"pending"`
	Seq      int64 `json:"seq"`
}

// ReleaseHold is one UpdateHoldReleases. A hold of the same checkpoint
// again keeps its first sequence number (a retried step reads the same
// cut) and the later Until.
type ReleaseHold struct {
	CheckpointID string `json:"checkpoint_id"`
	// Until ends the hold if no UpdateEndHold does first (a checkpoint
	// whose step died): its deadline plus a margin.
	Until time.Time `json:"until"`
	// Seq is set by the ledger: its sequence number when the hold began.
	Seq int64 `json:"seq,omitempty"`
}

// ReleaseHoldResult answers a hold.
type ReleaseHoldResult struct {
	Seq int64 `json:"seq"`
}

// EndHold ends a checkpoint's hold; one of a checkpoint that holds nothing
// changes nothing.
type EndHold struct {
	CheckpointID string `json:"checkpoint_id"`
}

// ForgetAcks is one UpdateForgetAcks.
type ForgetAcks struct {
	RolloutIDs []string `json:"rollout_ids"`
	// RecordedBefore: only receipts recorded before it are forgotten (a
	// restore's fence time): a retried restore keeps those recorded since.
	RecordedBefore time.Time `json:"recorded_before"`
}

// ForgetAcksResult counts the receipts forgotten.
type ForgetAcksResult struct {
	Forgotten int `json:"forgotten"`
}

// ReleaseInput is one ReleaseAcknowledged activity.
type ReleaseInput struct {
	Set      string            `json:"set"`
	Receipts []rollout.Receipt `json:"receipts"`
}

// ReleaseResult sorts a batch's receipts by rollout id: Released (the
// rollout accepted its acknowledgement, or its run had closed already),
// Obsolete (the rollout refused it: it holds no such result any more, a
// restore replaced it), Failed (not sent, or no answer: sent again later).
type ReleaseResult struct {
	Released []string `json:"released,omitempty"`
	Obsolete []string `json:"obsolete,omitempty"`
	Failed   []string `json:"failed,omitempty"`
}

// ReleaseUpdateID is the update id of releasing rc at its rollout: the same
// receipt gives the same id, whoever sends it, so a release sent twice (or
// after a direct acknowledgement) is a no-op.
func ReleaseUpdateID(rc rollout.Receipt) string { return "ack/" + rc.RolloutID + "/" + rc.SHA256 }

// AckLedgerStartOptions start set's ledger on the control plane's task
// queue of rolloutQueue (the rollouts' queue), or join the one running.
func AckLedgerStartOptions(set, rolloutQueue string) client.StartWorkflowOptions {
	return client.StartWorkflowOptions{
		ID:                       AckLedgerWorkflowID(set),
		TaskQueue:                checkpoint.ControlTaskQueue(rolloutQueue),
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		StaticSummary:            "acknowledgement ledger of set " + set,
	}
}

// Validate checks a batch for the ledger of set: its set, its size, and
// each receipt's shape (the caller compared it with what its rollout
// holds).
func (b AckBatch) Validate(set string) error {
	switch {
	case b.Set != set:
		return fmt.Errorf("a batch of set %q sent to the ledger of set %q", b.Set, set)
	case len(b.Receipts) == 0 || len(b.Receipts) > MaxAckBatch:
		return fmt.Errorf("%d receipts: want 1..%d", len(b.Receipts), MaxAckBatch)
	}
	var bad []string
	for i, rc := range b.Receipts {
		if err := CheckReceipt(rc); err != nil {
			bad = append(bad, fmt.Sprintf("receipts[%d]: %v", i, err))
		}
	}
	if len(bad) > 0 {
		return errors.New(strings.Join(bad, "; "))
	}
	return nil
}

// CheckReceipt checks a receipt's shape: a rollout id, an attempt, and a
// SHA-256 in lower-case hex.
func CheckReceipt(rc rollout.Receipt) error {
	switch {
	case rc.RolloutID == "":
		return errors.New("no rollout_id")
	case rc.Attempt < 0:
		return fmt.Errorf("rollout %s: attempt %d is negative", rc.RolloutID, rc.Attempt)
	case len(rc.SHA256) != 64 || strings.Trim(rc.SHA256, "0123456789abcdef") != "":
		return fmt.Errorf("rollout %s: sha256 %q is not 64 lower-case hex digits", rc.RolloutID, rc.SHA256)
	}
	return nil
}
