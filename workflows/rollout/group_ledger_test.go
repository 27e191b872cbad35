package rollout_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/turnstile-rl/turnstile/internal/testsupport"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// ledgerRun drives one GroupLedger run in the test environment: it sends
// reports one after another (each a second apart) and records verdicts,
// rejections and the cancellations the ledger asks for.
type ledgerRun struct {
	env      *testsuite.TestWorkflowEnvironment
	mu       sync.Mutex
	verdicts []rollout.GroupVerdict
	rejected []error
	cancels  []rollout.CancelGroupMembersInput
}

func newLedgerRun(t *testing.T) *ledgerRun {
	t.Helper()
	l := &ledgerRun{env: testsupport.NewWorkflowEnv()}
	l.env.RegisterWorkflowWithOptions(rollout.GroupLedger, workflow.RegisterOptions{Name: rollout.GroupWorkflowName})
	l.env.RegisterActivityWithOptions(func(_ context.Context, in rollout.CancelGroupMembersInput) (rollout.CancelGroupMembersResult, error) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.cancels = append(l.cancels, in)
		return rollout.CancelGroupMembersResult{Cancelled: len(in.Repeats)}, nil
	}, activity.RegisterOptions{Name: rollout.CancelGroupMembersName})
	return l
}

// run starts the ledger with the first report's group and sends every
// report; it returns the ledger's final state.
func (l *ledgerRun) run(t *testing.T, budget int, reports ...rollout.GroupReport) rollout.GroupState {
	t.Helper()
	for i, r := range reports {
		l.env.RegisterDelayedCallback(func() {
			l.env.UpdateWorkflow(rollout.UpdateGroupReport, fmt.Sprintf("u%d", i), &testsuite.TestUpdateCallback{
				OnAccept: func() {},
				OnReject: func(err error) { l.rejected = append(l.rejected, err) },
				OnComplete: func(v any, err error) {
					require.NoError(t, err)
					l.verdicts = append(l.verdicts, v.(rollout.GroupVerdict))
				},
			}, r)
		}, time.Duration(i+1)*time.Second)
	}
	l.env.ExecuteWorkflow(rollout.GroupLedger, rollout.GroupInput{Set: "s", Group: "g", Size: 3, Budget: budget})
	require.True(t, l.env.IsWorkflowCompleted(), "the ledger is still open")
	require.NoError(t, l.env.GetWorkflowError())
	var st rollout.GroupState
	require.NoError(t, l.env.GetWorkflowResult(&st))
	return st
}

// TestGroupLedgerRetryGrantedThenBudgetExhausted: an environment failure is
// granted a retry while the budget lasts (the same report again gets the
// same grant); the next one fails the group, and the ledger cancels the
// members without a result — not the one that reported, not the done one.
func TestGroupLedgerRetryGrantedThenBudgetExhausted(t *testing.T) {
	l := newLedgerRun(t)
	st := l.run(t, 1,
		testsupport.GroupReport(0, 0, rollout.ReportFailure, true),
		testsupport.GroupReport(0, 0, rollout.ReportFailure, true), // the activity retried
		testsupport.GroupReport(2, 0, rollout.ReportDone, false),
		testsupport.GroupReport(0, 1, rollout.ReportFailure, true),
	)
	require.Len(t, l.verdicts, 4)
	grant := l.verdicts[0].Granted
	require.NotNil(t, grant, "the first environment failure is retried")
	require.Equal(t, rollout.GroupGrant{RolloutID: "s-g-r0", Attempt: 1, Retry: 1, Budget: 1, Reason: "failure of attempt 0"}, *grant)
	require.Equal(t, rollout.GroupRunning, l.verdicts[0].Status)
	require.Equal(t, grant, l.verdicts[1].Granted, "a repeated report gets the same grant, not a second one")
	require.Equal(t, rollout.GroupRunning, l.verdicts[2].Status)

	last := l.verdicts[3]
	require.Nil(t, last.Granted, "the budget is spent")
	require.Equal(t, rollout.GroupFailed, last.Status)
	require.Equal(t, "group retry budget (1) exhausted: s-g-r0 (attempt 1) failed: failure of attempt 1", last.Reason)

	require.Equal(t, rollout.GroupFailed, st.Status)
	require.Equal(t, last.Reason, st.Reason)
	require.Len(t, st.Grants, 1)
	require.Equal(t, []rollout.MemberState{{Attempt: 1, State: rollout.MemberFailed}, {}, {Attempt: 0, State: rollout.MemberDone}}, st.Members)
	require.Equal(t, []rollout.CancelGroupMembersInput{{Set: "s", Group: "g", Repeats: []int{1}, Reason: last.Reason}}, l.cancels)
}

// TestGroupLedgerNonEnvironmentFailureFailsAtOnce: a failure that is not
// the environment's (a model error) is never retried, whatever the budget:
// the group fails and every other member without a result is cancelled.
func TestGroupLedgerNonEnvironmentFailureFailsAtOnce(t *testing.T) {
	l := newLedgerRun(t)
	st := l.run(t, 5, testsupport.GroupReport(1, 0, rollout.ReportFailure, false))
	require.Len(t, l.verdicts, 1)
	require.Nil(t, l.verdicts[0].Granted)
	require.Equal(t, rollout.GroupFailed, st.Status)
	require.Contains(t, st.Reason, "s-g-r1 (attempt 0) failed, not for an environment reason, so not retried: failure of attempt 0")
	require.Empty(t, st.Grants)
	require.Len(t, l.cancels, 1)
	require.Equal(t, []int{0, 2}, l.cancels[0].Repeats)
}

// TestGroupLedgerCompletes: the ledger closes complete once every member
// has a result, cancelling nothing; a stale report changes nothing.
func TestGroupLedgerCompletes(t *testing.T) {
	l := newLedgerRun(t)
	st := l.run(t, 1,
		testsupport.GroupReport(0, 0, rollout.ReportFailure, true),
		testsupport.GroupReport(0, 1, rollout.ReportDone, false),
		testsupport.GroupReport(0, 0, rollout.ReportDone, false), // the replaced attempt's news
		testsupport.GroupReport(1, 0, rollout.ReportDone, false),
		testsupport.GroupReport(2, 0, rollout.ReportDone, false),
	)
	require.Equal(t, rollout.GroupComplete, st.Status)
	require.Empty(t, st.Reason)
	require.Equal(t, []rollout.MemberState{{Attempt: 1, State: rollout.MemberDone}, {State: rollout.MemberDone}, {State: rollout.MemberDone}}, st.Members)
	require.Equal(t, rollout.GroupComplete, l.verdicts[4].Status)
	require.Equal(t, rollout.GroupRunning, l.verdicts[3].Status)
	require.Empty(t, l.cancels)
}

// TestGroupLedgerCancelledMemberFailsGroup: a member cancelled by an
// operator fails its group, so the group never waits for it.
func TestGroupLedgerCancelledMemberFailsGroup(t *testing.T) {
	l := newLedgerRun(t)
	st := l.run(t, 1, testsupport.GroupReport(2, 0, rollout.ReportCanceled, false))
	require.Equal(t, rollout.GroupFailed, st.Status)
	require.Equal(t, "s-g-r2 (attempt 0) was cancelled", st.Reason)
	require.Equal(t, rollout.MemberCanceled, st.Members[2].State)
	require.Equal(t, []int{0, 1}, l.cancels[0].Repeats)
}

// TestGroupLedgerRejectsForeignReports: a report of another group, or of a
// repeat outside the group, is rejected before it reaches history.
func TestGroupLedgerRejectsForeignReports(t *testing.T) {
	l := newLedgerRun(t)
	foreign := testsupport.GroupReport(0, 0, rollout.ReportDone, false)
	foreign.Group = "other"
	outside := testsupport.GroupReport(3, 0, rollout.ReportDone, false)
	unknown := testsupport.GroupReport(0, 0, "finished", false)
	var done []rollout.GroupReport
	for k := range 3 {
		done = append(done, testsupport.GroupReport(k, 0, rollout.ReportDone, false))
	}
	st := l.run(t, 1, append([]rollout.GroupReport{foreign, outside, unknown}, done...)...)
	require.Len(t, l.rejected, 3)
	require.ErrorContains(t, l.rejected[0], "sent to the ledger of s/g")
	require.ErrorContains(t, l.rejected[1], "repeat 3 is outside")
	require.ErrorContains(t, l.rejected[2], `unknown report kind "finished"`)
	require.Equal(t, rollout.GroupComplete, st.Status)
}

// TestGroupLedgerReopensFromPriorState: a ledger started again with the
// state of its closed run (a report after the group completed) keeps the
// retries used and the members' results.
func TestGroupLedgerReopensFromPriorState(t *testing.T) {
	l := newLedgerRun(t)
	prior := rollout.GroupState{Set: "s", Group: "g", Size: 3, Budget: 1, Status: rollout.GroupComplete,
		Members: []rollout.MemberState{{Attempt: 1, State: rollout.MemberDone}, {State: rollout.MemberDone}, {State: rollout.MemberDone}},
		Grants:  []rollout.GroupGrant{{RolloutID: "s-g-r0", Attempt: 1, Retry: 1, Budget: 1}}}
	l.env.RegisterDelayedCallback(func() {
		l.env.UpdateWorkflowNoRejection(rollout.UpdateGroupReport, "late", t, testsupport.GroupReport(1, 2, rollout.ReportFailure, true))
	}, time.Second)
	l.env.ExecuteWorkflow(rollout.GroupLedger, rollout.GroupInput{Set: "s", Group: "g", Size: 3, Budget: 1, Prior: &prior})
	require.NoError(t, l.env.GetWorkflowError())
	var st rollout.GroupState
	require.NoError(t, l.env.GetWorkflowResult(&st))
	require.Equal(t, rollout.GroupFailed, st.Status, "the one retry was used before the ledger closed")
	require.Contains(t, st.Reason, "group retry budget (1) exhausted: s-g-r1 (attempt 2)")
}

// TestGroupLedgerRefusesBadInput: a ledger whose input cannot describe a
// group fails before anything.
func TestGroupLedgerRefusesBadInput(t *testing.T) {
	for name, in := range map[string]rollout.GroupInput{
		"no set":      {Group: "g", Size: 1},
		"bad group":   {Set: "s", Group: "a/b", Size: 1},
		"no members":  {Set: "s", Group: "g"},
		"budget":      {Set: "s", Group: "g", Size: 1, Budget: -1},
		"other prior": {Set: "s", Group: "g", Size: 1, Prior: &rollout.GroupState{Set: "s", Group: "h", Size: 1, Members: make([]rollout.MemberState, 1)}},
	} {
		t.Run(name, func(t *testing.T) {
			l := newLedgerRun(t)
			l.env.ExecuteWorkflow(rollout.GroupLedger, in)
			require.ErrorContains(t, l.env.GetWorkflowError(), "invalid group input")
		})
	}
}

// TestGroupLedgerRestoredMemberReopensGroup: a member a restore started
// again makes a complete group running until it reports its result again.
func TestGroupLedgerRestoredMemberReopensGroup(t *testing.T) {
	l := newLedgerRun(t)
	prior := rollout.GroupState{Set: "s", Group: "g", Size: 3, Budget: 1, Status: rollout.GroupComplete,
		Members: []rollout.MemberState{{State: rollout.MemberDone}, {State: rollout.MemberDone}, {State: rollout.MemberDone}}}
	var statuses []rollout.GroupStatus
	for i, r := range []rollout.GroupReport{testsupport.GroupReport(2, 1, rollout.ReportRestored, false), testsupport.GroupReport(2, 1, rollout.ReportDone, false)} {
		l.env.RegisterDelayedCallback(func() {
			l.env.UpdateWorkflow(rollout.UpdateGroupReport, fmt.Sprint(i), &testsuite.TestUpdateCallback{
				OnAccept: func() {}, OnReject: func(err error) { assert.NoError(t, err) },
				OnComplete: func(v any, _ error) { statuses = append(statuses, v.(rollout.GroupVerdict).Status) },
			}, r)
		}, time.Duration(i+1)*time.Second)
	}
	l.env.ExecuteWorkflow(rollout.GroupLedger, rollout.GroupInput{Set: "s", Group: "g", Size: 3, Budget: 1, Prior: &prior})
	require.NoError(t, l.env.GetWorkflowError())
	require.Equal(t, []rollout.GroupStatus{rollout.GroupRunning, rollout.GroupComplete}, statuses)
	var st rollout.GroupState
	require.NoError(t, l.env.GetWorkflowResult(&st))
	require.Equal(t, rollout.MemberState{Attempt: 1, State: rollout.MemberDone}, st.Members[2])
}
