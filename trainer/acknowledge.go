package trainer

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	tclient "go.temporal.io/sdk/client"

	"github.com/turnstile-rl/turnstile/internal/ackledger"
	"github.com/turnstile-rl/turnstile/internal/failpoint"
	"github.com/turnstile-rl/turnstile/internal/fanout"
	"github.com/turnstile-rl/turnstile/internal/visibility"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
	"github.com/turnstile-rl/turnstile/workflows/set"
)

// maxReceiptLine bounds one line of a receipts file (a result line carries
// its lineage, so it may be long).
const maxReceiptLine = 16 << 20

// ParseReceipts reads JSON lines, each a rollout.Receipt or a result
// carrying one under "receipt" (as `starter results` and `starter export`
// print them). A line of a rollout that failed ({"rollout_id","error"}
// from `starter results`, a line with "failure" from `starter export`) has
// nothing to acknowledge and is returned in skipped.
// Any other line is bad, and the error lists every bad line.
func ParseReceipts(r io.Reader) (lines []ReceiptLine, skipped []string, err error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxReceiptLine)
	var bad []string
	n := 0
	for sc.Scan() {
		n++
		raw := bytes.TrimSpace(sc.Bytes())
		if len(raw) == 0 {
			continue
		}
		var v struct {
			RolloutID string           `json:"rollout_id"`
			Attempt   *int             `json:"attempt"`
			SHA256    string           `json:"sha256"`
			Receipt   *rollout.Receipt `json:"receipt"`
			Error     *string          `json:"error"`
			// Failure marks a failed rollout's `starter export` line.
			Failure *string `json:"failure"`
		}
		if err := json.Unmarshal(raw, &v); err != nil {
			bad = append(bad, fmt.Sprintf("line %d: not a JSON object: %v", n, err))
			continue
		}
		var rc rollout.Receipt
		switch {
		case v.Receipt != nil:
			rc = *v.Receipt
			if v.RolloutID != "" && v.RolloutID != rc.RolloutID {
				bad = append(bad, fmt.Sprintf("line %d: result of rollout %s carries the receipt of rollout %s", n, v.RolloutID, rc.RolloutID))
				continue
			}
		case v.SHA256 != "":
			if v.Attempt == nil {
				bad = append(bad, fmt.Sprintf("line %d: receipt of rollout %s has no attempt", n, v.RolloutID))
				continue
			}
			rc = rollout.Receipt{RolloutID: v.RolloutID, Attempt: *v.Attempt, SHA256: v.SHA256}
		case (v.Error != nil || v.Failure != nil) && v.RolloutID != "":
			skipped = append(skipped, fmt.Sprintf("line %d: rollout %s failed, nothing to acknowledge", n, v.RolloutID))
			continue
		default:
			bad = append(bad, fmt.Sprintf("line %d: neither a receipt nor a result with a receipt", n))
			continue
		}
		if msg := receiptProblem(rc); msg != "" {
			bad = append(bad, fmt.Sprintf("line %d: %s", n, msg))
			continue
		}
		lines = append(lines, ReceiptLine{Line: n, Receipt: rc})
	}
	if err := sc.Err(); err != nil {
		return nil, nil, fmt.Errorf("read receipts after line %d: %w", n, err)
	}
	if len(bad) > 0 {
		return nil, nil, fmt.Errorf("%d bad receipt lines, nothing acknowledged:\n  %s", len(bad), strings.Join(bad, "\n  "))
	}
	return lines, skipped, nil
}

// receiptProblem names what makes rc unusable, or returns "".
func receiptProblem(rc rollout.Receipt) string {
	switch {
	case rc.RolloutID == "":
		return "receipt without rollout_id"
	case rc.Attempt < 0:
		return fmt.Sprintf("receipt of rollout %s: attempt %d is negative", rc.RolloutID, rc.Attempt)
	case len(rc.SHA256) != 64 || strings.Trim(rc.SHA256, "0123456789abcdef") != "":
		return fmt.Sprintf("receipt of rollout %s: sha256 %q is not 64 lower-case hex digits", rc.RolloutID, rc.SHA256)
	}
	return ""
}

// awaiting reports a running rollout holding a result for acknowledgement.
func (s HeldState) awaiting() bool {
	return s.Running && s.Phase == rollout.PhaseAwaitingAck && s.Result != nil && s.Result.Receipt != nil
}

// PlanAcks validates the whole batch against the rollouts' states (keyed
// by rollout id) before anything is sent: every receipt must name a
// rollout of the set and equal the receipt of the result it holds (or
// completed with). A bad line fails the whole batch with a ConflictError
// listing every bad line by its line number.
func PlanAcks(set string, lines []ReceiptLine, states map[string]HeldState) (AckPlan, error) {
	return planAcks(set, lines, states, "")
}

// planAcks is PlanAcks naming the lines as elements of the JSON array
// field (AckRequest.Field), when set.
func planAcks(set string, lines []ReceiptLine, states map[string]HeldState, array string) (AckPlan, error) {
	var (
		plan  AckPlan
		bad   []string
		field string
		seen  = map[string]ReceiptLine{}
	)
	refuse := func(l ReceiptLine, sub, msg string) {
		bad = append(bad, lineRef(l, array)+": "+msg)
		if field == "" && array != "" {
			field = lineRef(l, array) + sub
		}
	}
	for _, l := range lines {
		rc := l.Receipt
		if prev, ok := seen[rc.RolloutID]; ok {
			if prev.Receipt != rc {
				refuse(l, "", fmt.Sprintf("rollout %s already has a different receipt %s", rc.RolloutID, lineWhere(prev, array)))
			}
			continue
		}
		seen[rc.RolloutID] = l
		st, ok := states[rc.RolloutID]
		if !ok {
			refuse(l, ".rollout_id", fmt.Sprintf("rollout %s is not a rollout of set %s", rc.RolloutID, set))
			continue
		}
		if sub, msg := heldProblem(st, rc); msg != "" {
			refuse(l, sub, fmt.Sprintf("rollout %s: %s", rc.RolloutID, msg))
			continue
		}
		if st.awaiting() {
			plan.Send = append(plan.Send, rc)
		} else {
			plan.Already = append(plan.Already, rc.RolloutID)
		}
	}
	if len(bad) > 0 {
		return AckPlan{}, &ConflictError{Field: field, Msg: fmt.Sprintf("%d of %d receipts do not match what set %s holds, nothing acknowledged:\n  %s", len(bad), len(lines), set, strings.Join(bad, "\n  "))}
	}
	sort.Slice(plan.Send, func(i, j int) bool { return plan.Send[i].RolloutID < plan.Send[j].RolloutID })
	sort.Strings(plan.Already)
	return plan, nil
}

// lineRef names l in a message: "line 3", or "receipts[2]" as an element
// of the JSON array field array.
func lineRef(l ReceiptLine, array string) string {
	if array != "" {
		return fmt.Sprintf("%s[%d]", array, l.Line-1)
	}
	return fmt.Sprintf("line %d", l.Line)
}

// lineWhere says where l is, after "a different receipt".
func lineWhere(l ReceiptLine, array string) string {
	if array != "" {
		return "in " + lineRef(l, array)
	}
	return "on " + lineRef(l, array)
}

// heldProblem compares a receipt with the result st holds: what is wrong
// ("" when nothing), and the receipt's field at fault (".attempt",
// ".sha256", ".rollout_id"; "" for the receipt as a whole).
func heldProblem(st HeldState, rc rollout.Receipt) (field, msg string) {
	switch {
	case st.Result == nil && st.Running:
		return "", fmt.Sprintf("holds no completed result yet (phase %s)", phaseName(st.Phase))
	case st.Result == nil:
		return "", "closed without a result: " + st.Err
	case st.Result.Receipt == nil:
		return "", "its result carries no receipt"
	}
	held := *st.Result.Receipt
	switch {
	case held.RolloutID != rc.RolloutID:
		return ".rollout_id", fmt.Sprintf("holds the result of rollout %s", held.RolloutID)
	case held.Attempt != rc.Attempt:
		return ".attempt", fmt.Sprintf("wrong attempt: the receipt says attempt %d, the held result is attempt %d", rc.Attempt, held.Attempt)
	case held.SHA256 != rc.SHA256:
		return ".sha256", fmt.Sprintf("digest mismatch: the receipt says sha256 %s, the held result has %s", rc.SHA256, held.SHA256)
	}
	return "", ""
}

func phaseName(p rollout.Phase) string {
	if p == "" {
		return "(none)"
	}
	return string(p)
}

// PlanAllCompleted acknowledges every rollout of states that holds a
// result for acknowledgement, with its current receipt.
func PlanAllCompleted(states map[string]HeldState) AckPlan {
	var plan AckPlan
	for _, st := range states {
		if st.awaiting() {
			plan.Send = append(plan.Send, *st.Result.Receipt)
		}
	}
	sort.Slice(plan.Send, func(i, j int) bool { return plan.Send[i].RolloutID < plan.Send[j].RolloutID })
	return plan
}

// AckUpdateID is the update id of releasing rc at its rollout: the same
// receipt gives the same id, so a release sent twice is a no-op.
func AckUpdateID(rc rollout.Receipt) string { return set.ReleaseUpdateID(rc) }

// sendAcks records every receipt of plan in its set's acknowledgement
// ledger, in batches of at most set.MaxAckBatch, each one update. Once it
// returns, the acknowledgement is durable; the ledger releases the held
// rollouts afterwards.
func sendAcks(ctx context.Context, upd ackledger.Updater, rolloutQueue string, plan AckPlan) (AckSummary, error) {
	sum := AckSummary{Already: len(plan.Already)}
	if len(plan.Send) == 0 {
		return sum, nil
	}
	if err := rollout.ValidateSet(plan.Set); err != nil {
		return sum, fmt.Errorf("acknowledgement plan: %w", err)
	}
	for rest := plan.Send; len(rest) > 0; {
		batch := rest[:min(len(rest), set.MaxAckBatch)]
		rest = rest[len(batch):]
		res, err := ackledger.Record(ctx, upd, rolloutQueue, plan.Set, batch)
		var full *ackledger.FullError
		if errors.As(err, &full) {
			return sum, &UnavailableError{Msg: full.Msg}
		}
		if err != nil {
			return sum, fmt.Errorf("%w (sending the same acknowledgement again is safe)", err)
		}
		sum.Acknowledged += res.Recorded
		sum.Already += res.Already
	}
	return sum, nil
}

// fetchStates lists the set and reads what each rollout holds (only those
// in want, or all when want is nil): a running one that named its held
// result by the receipt visibility shows (heldReceipt), another running
// one by its status query, a closed one by its result.
func fetchStates(ctx context.Context, c tclient.Client, set string, want map[string]bool) (map[string]HeldState, error) {
	latest, err := latestOf(ctx, c, set, want)
	if err != nil {
		return nil, err
	}
	var recs []RolloutRecord
	for _, r := range latest {
		if want == nil || want[r.RolloutID] {
			recs = append(recs, r)
		}
	}
	states := make([]HeldState, len(recs))
	err = fanout.Each(ctx, len(recs), updateConcurrency, func(ctx context.Context, i int) error {
		rec := &recs[i]
		st := HeldState{WorkflowID: rec.WorkflowID, Running: !rec.Closed(), Phase: rollout.Phase(rec.Phase)}
		if rc, ok := heldReceipt(*rec); ok {
			// The receipt is all a plan compares: no query of the run.
			st.Result = &rollout.Result{RolloutID: rc.RolloutID, Attempt: rc.Attempt, Receipt: &rc}
		} else if st.Running {
			s, err := queryStatus(ctx, c, rec.WorkflowID)
			if err != nil {
				return err
			}
			st.Phase, st.Result = s.Phase, s.Result
		} else {
			if err := fetchResult(ctx, c, rec); err != nil {
				return err
			}
			st.Result, st.Err = rec.Result, rec.Err
			if rec.Err == "" && rec.Result == nil {
				st.Err = StatusName(rec.Status)
			}
		}
		states[i] = st
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := make(map[string]HeldState, len(recs))
	for i, r := range recs {
		out[r.RolloutID] = states[i]
	}
	return out, nil
}

// latestOf is the latest run of every rollout of set (want nil), or of the
// rollouts in want only: those are looked up by workflow id, a query per
// runsChunk of them, so acknowledging a page does not list the whole set.
func latestOf(ctx context.Context, l visibility.Lister, set string, want map[string]bool) ([]RolloutRecord, error) {
	if want == nil {
		return listLatest(ctx, l, set)
	}
	ids := make([]string, 0, len(want))
	for id := range want {
		ids = append(ids, rollout.WorkflowID(id))
	}
	sort.Strings(ids)
	runs, err := listRunsOf(ctx, l, rollout.SetQuery(set), ids)
	if err != nil {
		return nil, err
	}
	var out []RolloutRecord
	for _, id := range ids {
		if rs := runs[id]; len(rs) > 0 {
			out = append(out, rs[0])
		}
	}
	return out, nil
}

// Acknowledge acknowledges results of r.Set: PlanAck, then SendAcks.
// Sending the same acknowledgement again is safe. Under r.RequestID, a
// request that succeeded before answers what it answered then, and the
// request id used before for other receipts is a ConflictError (see
// AckRecordWorkflowID).
func (c *Client) Acknowledge(ctx context.Context, r AckRequest) (AckSummary, error) {
	if r.RequestID == "" {
		return c.acknowledge(ctx, r)
	}
	return acknowledgeOnce(ctx, c.tc, c.taskQueue, r, c.acknowledge)
}

func (c *Client) acknowledge(ctx context.Context, r AckRequest) (AckSummary, error) {
	plan, err := c.PlanAck(ctx, r)
	if err != nil {
		return AckSummary{}, err
	}
	sum, err := c.SendAcks(ctx, plan)
	if err == nil && len(plan.Send) > 0 {
		c.Failpoints.Hit(failpoint.GatewayAckRecordedBeforeAnswer)
	}
	return sum, err
}

// PlanAck checks r against what the rollouts of r.Set hold now, before
// anything is sent: with r.AllCompleted it plans every result held for
// acknowledgement, else r.Receipts, failing the whole batch on any bad
// line.
func (c *Client) PlanAck(ctx context.Context, r AckRequest) (AckPlan, error) {
	if err := rollout.ValidateSet(r.Set); err != nil {
		return AckPlan{}, err
	}
	if r.AllCompleted && len(r.Receipts) > 0 {
		return AckPlan{}, errors.New("give receipts or AllCompleted, not both")
	}
	var want map[string]bool
	if !r.AllCompleted {
		want = map[string]bool{}
		for _, l := range r.Receipts {
			want[l.Receipt.RolloutID] = true
		}
	}
	states, err := fetchStates(ctx, c.tc, r.Set, want)
	if err != nil {
		return AckPlan{}, err
	}
	var plan AckPlan
	if r.AllCompleted {
		plan = PlanAllCompleted(states)
	} else if plan, err = planAcks(r.Set, r.Receipts, states, r.Field); err != nil {
		return AckPlan{}, err
	}
	plan.Set = r.Set
	return plan, nil
}

// SendAcks records every receipt of plan in the set's acknowledgement
// ledger (one update per set.MaxAckBatch receipts) and returns once they
// are durable there; the ledger releases the held rollouts afterwards.
// Sending the same plan again acknowledges nothing twice.
func (c *Client) SendAcks(ctx context.Context, plan AckPlan) (AckSummary, error) {
	return sendAcks(ctx, c.tc, c.taskQueue, plan)
}
