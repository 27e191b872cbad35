package rollout

import (
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// MaxGroupSize bounds a group: the repeats of one dataset row.
const MaxGroupSize = 4096

// cancelOptions are the options of a failed group's cancellation of its
// members: a few RequestCancel calls, retried until Temporal answers.
var cancelOptions = workflow.ActivityOptions{
	StartToCloseTimeout: time.Minute,
	RetryPolicy: &temporal.RetryPolicy{
		InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: 30 * time.Second,
		NonRetryableErrorTypes: []string{ErrBadInput},
	},
}

// GroupStatusKey is the typed key of SARolloutGroupStatus.
var GroupStatusKey = temporal.NewSearchAttributeKeyKeyword(SARolloutGroupStatus)

// Memo fields of a ledger, kept current with its status, so a listing or a
// describe reads where a group stands without a worker (see GroupState).
const (
	MemoGroupSize    = "size"
	MemoGroupBudget  = "retry_budget"
	MemoGroupRetries = "retries"
	MemoGroupReason  = "reason"
)

// GroupLedger is the ledger of one group (workflow type RolloutGroup, ID
// GroupWorkflowID). Members report to it through UpdateGroupReport, and it
// answers each with the group's verdict: a retry granted while the budget
// lasts, or the group failed. It is deterministic bookkeeping with a single
// side effect, the cancellation of a failed group's other members, and it
// closes as soon as the group is complete or failed, with its GroupState
// as result. A report that comes later (after a restore) reopens it as a
// new run that starts from that state (see ReportToGroup).
func GroupLedger(ctx workflow.Context, in GroupInput) (GroupState, error) {
	l, err := newLedger(in)
	if err != nil {
		return GroupState{}, temporal.NewNonRetryableApplicationError("invalid group input: "+err.Error(), ErrInvalidInput, nil)
	}
	if err := l.register(ctx); err != nil {
		return GroupState{}, err
	}
	for {
		if err := l.publish(ctx); err != nil {
			return GroupState{}, err
		}
		switch {
		case len(l.cancel) > 0:
			l.cancelMembers(ctx)
			continue
		case l.st.Status != GroupRunning:
			// A run reopened for a late report is settled from its start:
			// it waits for that report, which arrives with the start but
			// runs only once this loop yields.
			if err := workflow.Await(ctx, func() bool { return l.reports > 0 && workflow.AllHandlersFinished(ctx) }); err != nil {
				return GroupState{}, err
			}
			if len(l.cancel) == 0 && !l.changed() {
				return l.st, nil
			}
			continue
		case workflow.GetInfo(ctx).GetContinueAsNewSuggested():
			if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); err != nil {
				return GroupState{}, err
			}
			st := l.st
			return GroupState{}, workflow.NewContinueAsNewError(ctx, GroupWorkflowName,
				GroupInput{Set: st.Set, Group: st.Group, Size: st.Size, Budget: st.Budget, Prior: &st})
		}
		err := workflow.Await(ctx, func() bool {
			return l.changed() || len(l.cancel) > 0 || workflow.GetInfo(ctx).GetContinueAsNewSuggested()
		})
		if err != nil {
			return GroupState{}, err
		}
	}
}

// ledger is a ledger run's state.
type ledger struct {
	st        GroupState
	cancel    []int       // repeats to cancel, not yet requested
	published GroupStatus // the status last upserted
	retries   int         // the retries used last upserted
	reports   int         // reports handled by this run
}

func newLedger(in GroupInput) (*ledger, error) {
	switch {
	case ValidateSet(in.Set) != nil:
		return nil, ValidateSet(in.Set)
	case ValidateName("group", in.Group, MaxSetLen) != nil:
		return nil, ValidateName("group", in.Group, MaxSetLen)
	case in.Size < 1 || in.Size > MaxGroupSize:
		return nil, fmt.Errorf("group size %d is outside 1..%d", in.Size, MaxGroupSize)
	case in.Budget < 0 || in.Budget > MaxGroupRetries:
		return nil, fmt.Errorf("group retry budget %d is outside 0..%d", in.Budget, MaxGroupRetries)
	}
	if p := in.Prior; p != nil {
		if p.Set != in.Set || p.Group != in.Group || p.Size != in.Size || len(p.Members) != in.Size {
			return nil, errors.New("prior state is of another group or size")
		}
		return &ledger{st: *p}, nil
	}
	return &ledger{st: GroupState{
		Set: in.Set, Group: in.Group, Size: in.Size, Budget: in.Budget,
		Status: GroupRunning, Members: make([]MemberState, in.Size),
	}}, nil
}

func (l *ledger) register(ctx workflow.Context) error {
	if err := workflow.SetQueryHandler(ctx, QueryGroupState, func() (GroupState, error) { return l.st, nil }); err != nil {
		return err
	}
	return workflow.SetUpdateHandlerWithOptions(ctx, UpdateGroupReport,
		func(_ workflow.Context, r GroupReport) (GroupVerdict, error) { return l.report(r), nil },
		workflow.UpdateHandlerOptions{
			Validator:   func(r GroupReport) error { return r.Validate(l.st.Set, l.st.Group, l.st.Size) },
			Description: "a member's result or failure; answers the group's verdict and any retry granted",
		})
}

// report applies one report and answers the verdict. It is idempotent: a
// report seen before (the same attempt's grant, an older attempt's news)
// changes nothing and gets the same kind of answer.
func (l *ledger) report(r GroupReport) GroupVerdict {
	l.reports++
	for i := range l.st.Grants {
		if g := l.st.Grants[i]; g.RolloutID == r.RolloutID && g.Attempt == r.Attempt+1 && r.Kind == ReportFailure {
			return l.verdict(&g)
		}
	}
	m := &l.st.Members[r.Repeat]
	if r.Attempt < m.Attempt {
		return l.verdict(nil) // an attempt already replaced: old news
	}
	var granted *GroupGrant
	switch {
	case r.Kind == ReportDone:
		*m = MemberState{Attempt: r.Attempt, State: MemberDone}
	case r.Kind == ReportRestored:
		if l.st.Status != GroupFailed {
			*m = MemberState{Attempt: r.Attempt, State: MemberRunning}
		}
	case l.st.Status == GroupFailed:
		*m = MemberState{Attempt: r.Attempt, State: memberEnd(r.Kind)}
	case r.Kind == ReportFailure && r.Retryable && len(l.st.Grants) < l.st.Budget:
		g := GroupGrant{RolloutID: r.RolloutID, Attempt: r.Attempt + 1, Retry: len(l.st.Grants) + 1, Budget: l.st.Budget, Reason: r.Reason}
		l.st.Grants = append(l.st.Grants, g)
		*m = MemberState{Attempt: g.Attempt, State: MemberRunning}
		granted = &g
	default:
		*m = MemberState{Attempt: r.Attempt, State: memberEnd(r.Kind)}
		l.fail(r)
	}
	if l.st.Status != GroupFailed {
		l.st.Status = GroupComplete
		for _, m := range l.st.Members {
			if m.State != MemberDone {
				l.st.Status = GroupRunning
				break
			}
		}
	}
	return l.verdict(granted)
}

func memberEnd(kind string) string {
	if kind == ReportCanceled {
		return MemberCanceled
	}
	return MemberFailed
}

// fail fails the group for r and queues the cancellation of every member
// without a result, r's own rollout excepted.
func (l *ledger) fail(r GroupReport) {
	l.st.Status = GroupFailed
	switch {
	case r.Kind == ReportCanceled:
		l.st.Reason = fmt.Sprintf("%s (attempt %d) was cancelled", r.RolloutID, r.Attempt)
	case r.Retryable:
		l.st.Reason = fmt.Sprintf("group retry budget (%d) exhausted: %s (attempt %d) failed: %s", l.st.Budget, r.RolloutID, r.Attempt, r.Reason)
	default:
		l.st.Reason = fmt.Sprintf("%s (attempt %d) failed, not for an environment reason, so not retried: %s", r.RolloutID, r.Attempt, r.Reason)
	}
	for k, m := range l.st.Members {
		if k != r.Repeat && (m.State == "" || m.State == MemberRunning) {
			l.cancel = append(l.cancel, k)
		}
	}
}

func (l *ledger) verdict(g *GroupGrant) GroupVerdict {
	return GroupVerdict{Status: l.st.Status, Reason: l.st.Reason, Granted: g}
}

// changed says whether the status or the retries used changed since they
// were last published.
func (l *ledger) changed() bool {
	return l.st.Status != l.published || len(l.st.Grants) != l.retries
}

// publish upserts the status search attribute and the memo when they
// changed.
func (l *ledger) publish(ctx workflow.Context) error {
	if !l.changed() {
		return nil
	}
	if l.st.Status != l.published {
		err := workflow.UpsertTypedSearchAttributes(ctx,
			temporal.NewSearchAttributeKeyKeyword(SARolloutGroup).ValueSet(l.st.Group),
			GroupStatusKey.ValueSet(string(l.st.Status)))
		if err != nil {
			return fmt.Errorf("upsert group status: %w", err)
		}
	}
	err := workflow.UpsertMemo(ctx, map[string]any{
		MemoGroupSize: l.st.Size, MemoGroupBudget: l.st.Budget, MemoGroupRetries: len(l.st.Grants), MemoGroupReason: l.st.Reason,
	})
	if err != nil {
		return fmt.Errorf("upsert group memo: %w", err)
	}
	l.published, l.retries = l.st.Status, len(l.st.Grants)
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("**%s** — %d members, %d of %d retries used %s", l.st.Status, l.st.Size, len(l.st.Grants), l.st.Budget, l.st.Reason))
	return nil
}

// cancelMembers requests the cancellation of the queued members. A failure
// to cancel is logged, not fatal: the group is failed either way, and an
// export excludes the results of a failed group.
func (l *ledger) cancelMembers(ctx workflow.Context) {
	in := CancelGroupMembersInput{Set: l.st.Set, Group: l.st.Group, Repeats: l.cancel, Reason: l.st.Reason}
	l.cancel = nil
	actx := workflow.WithActivityOptions(ctx, cancelOptions)
	var res CancelGroupMembersResult
	if err := workflow.ExecuteActivity(actx, CancelGroupMembersName, in).Get(ctx, &res); err != nil {
		workflow.GetLogger(ctx).Warn("cancelling the failed group's members failed", "group", l.st.Group, "error", err)
	}
}
