package rollout

import (
	"fmt"
	"strconv"
)

// This file is the contract of rollout groups (GRPO): the rollouts of one
// dataset row, compared with each other by a group-relative trainer. A group
// is complete when every one of its rollouts has a result; it fails as a
// whole, never shrinks. Its state lives in one small RolloutGroup ledger
// workflow per group, which every member reports to: a result ("done"), or a
// failure, for which the ledger grants a retry (an environment failure, while
// the group's retry budget lasts) or fails the group and cancels the rest.

// GroupWorkflowName is the workflow type of a group's ledger.
const GroupWorkflowName = "RolloutGroup"

// Message names of the RolloutGroup ledger.
const (
	// UpdateGroupReport is a member's report (GroupReport); it answers a
	// GroupVerdict.
	UpdateGroupReport = "report"
	// QueryGroupState returns the ledger's GroupState.
	QueryGroupState = "state"
)

// Activity names of the group machinery, as registered on the worker.
const (
	ReportToGroupName      = "ReportToGroup"
	CancelGroupMembersName = "CancelGroupMembers"
)

// SARolloutGroupStatus is a ledger's GroupStatus, upserted whenever it
// changes: `WorkflowType="RolloutGroup" AND RolloutGroupStatus="failed"`
// lists failed groups (add `WorkflowId STARTS_WITH "rollout-group/s1/"` for
// one set). The ledger also carries RolloutGroup (the row id), never
// RolloutSet, so listings of a set's rollouts never include it.
const SARolloutGroupStatus = "RolloutGroupStatus" // Keyword

// Group retry budget: the environment-level failures a group may retry,
// over all its members, before it fails.
const (
	DefaultGroupRetries = 2
	MaxGroupRetries     = 1000
)

// ErrGroupFailed is the error type of a rollout that failed because its
// group failed: its own environment failure found the group's retry budget
// spent, or another member had already failed the group. The message says
// which, with the group's reason; the cause is the rollout's own failure.
const ErrGroupFailed = "GroupFailed"

// GroupStatus is where a group stands.
type GroupStatus string

// Group statuses.
const (
	// GroupRunning: some member has no result yet (and the group has not
	// failed).
	GroupRunning GroupStatus = "running"
	// GroupComplete: every member has a result.
	GroupComplete GroupStatus = "complete"
	// GroupFailed: a member failed for good; the group's other rollouts
	// are cancelled, and a trainer must not use any of its results.
	GroupFailed GroupStatus = "failed"
)

// Kinds of GroupReport.
const (
	ReportDone     = "done"     // the member has a result
	ReportFailure  = "failure"  // the member's attempt failed
	ReportCanceled = "canceled" // the member was cancelled
	// ReportRestored: a restore started the member again as this attempt,
	// so a group that had completed is not complete until it finishes.
	ReportRestored = "restored"
)

// Member states in a GroupState.
const (
	MemberRunning  = "running"
	MemberDone     = "done"
	MemberFailed   = "failed"
	MemberCanceled = "canceled"
)

// groupWorkflowIDPrefix starts the workflow ID of every group ledger.
const groupWorkflowIDPrefix = "rollout-group/"

// GroupWorkflowID is the workflow ID of the ledger of group of set:
// "rollout-group/<set>/<group>". Set and group ids hold no '/', so the ID
// names one group.
func GroupWorkflowID(set, group string) string {
	return groupWorkflowIDPrefix + set + "/" + group
}

// GroupWorkflowIDPrefix is the prefix of the ledgers of set's groups, for a
// `WorkflowId STARTS_WITH` query.
func GroupWorkflowIDPrefix(set string) string { return groupWorkflowIDPrefix + set + "/" }

// GroupRolloutID is the rollout id of repeat of group (a dataset row id) of
// set: "<set>-<group>-r<repeat>". A ledger derives its members' ids with it,
// so it needs no list of them.
func GroupRolloutID(set, group string, repeat int) string {
	return set + "-" + group + "-r" + strconv.Itoa(repeat)
}

// GroupReport is what a member tells its group's ledger. The first report
// starts the ledger with its Size and Budget; later ones keep the ledger's.
type GroupReport struct {
	Set       string `json:"set"`
	Group     string `json:"group"`
	Size      int    `json:"size"`
	Budget    int    `json:"budget"`
	RolloutID string `json:"rollout_id"`
	Repeat    int    `json:"repeat"`
	Attempt   int    `json:"attempt"`
	Kind      string `json:"kind"`
	// Retryable: the failure is environment-level (sandbox crash,
	// environment refusal, an environment budget), so a fresh environment
	// may do better. Model-endpoint failures are not.
	Retryable bool   `json:"retryable,omitempty"`
	Reason    string `json:"reason,omitempty"`
}

// UpdateID is the report's update id: one per rollout, attempt and kind,
// so a retried report activity is one update.
func (r GroupReport) UpdateID() string {
	return r.RolloutID + "/a" + strconv.Itoa(r.Attempt) + "/" + r.Kind
}

// Validate checks a report against the ledger of set/group of size members.
func (r GroupReport) Validate(set, group string, size int) error {
	switch {
	case r.Set != set || r.Group != group:
		return fmt.Errorf("report of group %s/%s sent to the ledger of %s/%s", r.Set, r.Group, set, group)
	case r.Repeat < 0 || r.Repeat >= size:
		return fmt.Errorf("repeat %d is outside the group's 0..%d", r.Repeat, size-1)
	case r.RolloutID == "" || r.Attempt < 0:
		return fmt.Errorf("report names rollout %q attempt %d", r.RolloutID, r.Attempt)
	case r.Kind != ReportDone && r.Kind != ReportFailure && r.Kind != ReportCanceled && r.Kind != ReportRestored:
		return fmt.Errorf("unknown report kind %q", r.Kind)
	}
	return nil
}

// GroupGrant is a retry the ledger granted: attempt Attempt of RolloutID
// starts over from its seed with a fresh environment. It travels in the new
// attempt's Input.Retry and in its StartEnvironment input.
type GroupGrant struct {
	RolloutID string `json:"rollout_id"`
	Attempt   int    `json:"attempt"` // the new attempt
	Retry     int    `json:"retry"`   // the group's retries used, this one included
	Budget    int    `json:"budget"`
	Reason    string `json:"reason"` // the failure retried
}

// GroupVerdict answers a report: the group's status and, for a failure,
// whether a retry was granted.
type GroupVerdict struct {
	Status  GroupStatus `json:"status"`
	Reason  string      `json:"reason,omitempty"` // why the group failed
	Granted *GroupGrant `json:"granted,omitempty"`
}

// MemberState is one member as the ledger knows it.
type MemberState struct {
	Attempt int    `json:"attempt"`
	State   string `json:"state,omitempty"` // "" until it reports
}

// GroupState is a ledger's whole state: its query answer, its result once
// closed, and what a new run of it starts from.
type GroupState struct {
	Set     string        `json:"set"`
	Group   string        `json:"group"`
	Size    int           `json:"size"`
	Budget  int           `json:"budget"`
	Status  GroupStatus   `json:"status"`
	Reason  string        `json:"reason,omitempty"`
	Members []MemberState `json:"members"` // by repeat
	Grants  []GroupGrant  `json:"grants,omitempty"`
}

// GroupInput starts a ledger: its group, and the state of the run before it
// (a continue-as-new, or a closed ledger reopened by a late report).
type GroupInput struct {
	Set    string      `json:"set"`
	Group  string      `json:"group"`
	Size   int         `json:"size"`
	Budget int         `json:"budget"`
	Prior  *GroupState `json:"prior,omitempty"`
}

// CancelGroupMembersInput names the members a failed group cancels.
type CancelGroupMembersInput struct {
	Set     string `json:"set"`
	Group   string `json:"group"`
	Repeats []int  `json:"repeats"`
	Reason  string `json:"reason"`
}

// CancelGroupMembersResult counts what the cancellation found.
type CancelGroupMembersResult struct {
	Cancelled int `json:"cancelled"` // cancellation requested
	Closed    int `json:"closed"`    // already closed, or never started
}
