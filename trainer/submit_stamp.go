package trainer

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/converter"

	"github.com/turnstile-rl/turnstile/internal/visibility"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
	"github.com/turnstile-rl/turnstile/workflows/set"
)

// MemoSubmit is the memo field naming the submission that made a set (a
// SubmitStamp): on its admission and on every rollout it started.
const MemoSubmit = set.MemoSubmit

// SubmitStamp names a submission: its request id and a digest of the rest
// of the request, so a request id reused for another request is caught.
type SubmitStamp = set.SubmitStamp

// Stamp is r's stamp, or nil when r has no request id. The digest covers
// every field but the request id (the dataset rows included), as Go's JSON
// encoding of the request: equal requests give equal digests.
func (r SubmitRequest) Stamp() (*SubmitStamp, error) {
	if r.RequestID == "" {
		return nil, nil
	}
	data, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("digest of the submission: %w", err)
	}
	return &SubmitStamp{RequestID: r.RequestID, Digest: sha256Hex(data)}, nil
}

func sha256Hex(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// sameSubmission checks that the existing set was submitted by the same
// request: one of its runs carries the same stamp (a set is made by one
// submission, so one run tells).
func sameSubmission(ctx context.Context, l visibility.Lister, name string, want SubmitStamp) error {
	resp, err := l.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: rollout.SetQuery(name), PageSize: 1})
	if err != nil {
		return fmt.Errorf("look up set %q: %w", name, err)
	}
	var got SubmitStamp
	for _, info := range resp.GetExecutions()[:min(1, len(resp.GetExecutions()))] {
		if p, ok := info.GetMemo().GetFields()[MemoSubmit]; ok {
			_ = converter.GetDefaultDataConverter().FromPayload(p, &got)
		}
	}
	return sameStamp(name, got, want)
}

// hasProgressAttributes reports whether the namespace knows the progress
// attributes (rollout.SARolloutProgressAt, SARolloutFinishedAt): a count
// that filters on them fails when it does not. Rollouts upsert them only
// then, since an upsert of an unknown attribute fails their workflow task.
func hasProgressAttributes(ctx context.Context, c workflowCounter, set string) (bool, error) {
	epoch := visibility.VisibilityTime(time.Unix(0, 0))
	q := fmt.Sprintf("%s AND %s >= %s AND %s >= %s", rollout.SetQuery(set), rollout.SARolloutProgressAt, epoch, rollout.SARolloutFinishedAt, epoch)
	known, err := knowsAttributes(ctx, c, q)
	if err != nil {
		return false, fmt.Errorf("look up search attributes: %w", err)
	}
	return known, nil
}

// hasReceiptAttribute reports whether the namespace knows
// rollout.SARolloutReceipt: rollouts name their stored held result with it
// only then.
func hasReceiptAttribute(ctx context.Context, c workflowCounter, set string) (bool, error) {
	known, err := knowsAttributes(ctx, c, fmt.Sprintf("%s AND %s = %q", rollout.SetQuery(set), rollout.SARolloutReceipt, ""))
	if err != nil {
		return false, fmt.Errorf("look up search attributes: %w", err)
	}
	return known, nil
}

// knowsAttributes probes the namespace with a count filtering on the
// attributes of query: false when the server refuses it for an unknown
// search attribute, an error when it cannot answer at all.
func knowsAttributes(ctx context.Context, c workflowCounter, query string) (bool, error) {
	_, err := c.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Query: query})
	if err == nil {
		return true, nil
	}
	msg := strings.ToLower(err.Error())
	if strings.Contains(msg, "search attribute") || strings.Contains(msg, "invalid query") {
		return false, nil
	}
	return false, err
}

// ConflictError is a request that contradicts what Temporal holds: a set
// submitted before by another request, a request id reused with another
// body, a checkpoint id taken, a receipt that does not match. Nothing was
// changed. Field, when known, is the JSON path of the request field at
// fault in the gateway's terms ("request_id", "set", "receipts[2].sha256").
type ConflictError struct {
	Msg   string
	Field string
}

func (e *ConflictError) Error() string { return e.Msg }

// UnavailableError is a request that cannot run now for want of something
// outside it: no worker polls the task queue.
type UnavailableError struct{ Msg string }

func (e *UnavailableError) Error() string { return e.Msg }
