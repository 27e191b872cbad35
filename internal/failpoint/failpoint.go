// Package failpoint lets crash tests make a real process fail at a named place
// in production code. Failpoints are armed only through the environment
// variable TURNSTILE_FAILPOINTS, e.g.
//
//	TURNSTILE_FAILPOINTS=worker.env-applied-before-report=kill@3
//
// which SIGKILLs this process the 3rd time it passes there. Unarmed, a
// failpoint costs one map lookup.
package failpoint

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// The failpoints, in one list so a crash matrix can range over them. Each
// names the place it stands and says why a crash there is worth a test: what
// has happened that a restarted process must not lose or do twice.
const (
	// WorkerModelAnsweredBeforeTranscript: the model answered and its answer
	// is not in the transcript store yet. The retried activity must ask the
	// policy again and get the same answer (same messages, same seed), and
	// no half-written transcript may be visible.
	WorkerModelAnsweredBeforeTranscript = "worker.model-answered-before-transcript"
	// WorkerModelAnsweredBeforeReport: the model answered and its answer is
	// stored, the activity has not reported: the retry stores it again under
	// the same digest.
	WorkerModelAnsweredBeforeReport = "worker.model-answered-before-report"
	// WorkerModelPrefixWrittenBeforeHeartbeat: a streamed generation's
	// prefix chunk is stored and not heartbeated yet: the retry knows only
	// the previous durable prefix and continues from there, generating
	// this chunk's tokens again (one interval at most).
	WorkerModelPrefixWrittenBeforeHeartbeat = "worker.model-prefix-written-before-heartbeat"
	// WorkerModelPrefixHeartbeatBeforeNextChunk: the prefix is stored and
	// heartbeated, the stream not read on: the retry continues from
	// exactly this prefix.
	WorkerModelPrefixHeartbeatBeforeNextChunk = "worker.model-prefix-heartbeat-before-next-chunk"
	// WorkerEnvAppliedBeforeTranscript: the environment server applied a
	// mutation and answered, the observation is not stored yet: the retry
	// must get the stored reply back (a replay), not a second application.
	WorkerEnvAppliedBeforeTranscript = "worker.env-applied-before-transcript"
	// WorkerEnvAppliedBeforeReport: in the worker, an environment mutation was
	// applied (the server answered), its observation stored, and its activity
	// has not reported yet.
	WorkerEnvAppliedBeforeReport = "worker.env-applied-before-report"
	// EnvAfterApplyBeforeReply: in the environment server, a mutation was
	// applied and recorded and the reply not yet sent: the server's whole
	// state is lost, so its rollouts must go back to a checkpoint.
	EnvAfterApplyBeforeReply = "env.after-apply-before-reply"
	// CheckpointBetweenFiles: while committing checkpoint artifacts, between
	// two files (in the environment server and in the coordinator): a torn
	// artifact must never look valid.
	CheckpointBetweenFiles = "checkpoint.between-files"
	// EnvRestoreMidInstall: the environment server installed the first
	// session of a restore and not the rest: the retried restore on a fresh
	// server must install all of them, once.
	EnvRestoreMidInstall = "env.restore-mid-install"
	// RestoreAfterValidate: a restore validated its checkpoint and installed
	// nothing yet (in the coordinator and in the environment server).
	RestoreAfterValidate = "restore.after-validate"

	// The coordinator between the steps of a checkpoint: the step's work is
	// done and the activity has not reported, so Temporal retries the step
	// on another worker and the step must be idempotent.

	// CoordinatorAfterPrepare: admission is closed at every server.
	CoordinatorAfterPrepare = "coordinator.after-prepare"
	// CoordinatorAfterFreeze: the membership is frozen (staged).
	CoordinatorAfterFreeze = "coordinator.after-freeze"
	// CoordinatorAfterPark: every member is parked at a boundary.
	CoordinatorAfterPark = "coordinator.after-park"
	// CoordinatorAfterCommit: the servers' artifacts, the agent records and
	// the aggregate manifest are written.
	CoordinatorAfterCommit = "coordinator.after-commit"
	// CoordinatorAfterResumeParticipants: the servers reopened admission;
	// the parked rollouts are not released yet.
	CoordinatorAfterResumeParticipants = "coordinator.after-resume-participants"

	// The coordinator between the steps of a restore (restore.after-validate
	// above is the first).

	// RestoreAfterPlan: the attempt map is planned and staged.
	RestoreAfterPlan = "restore.after-plan"
	// RestoreAfterParticipants: every server installed the new attempts.
	RestoreAfterParticipants = "restore.after-participants"
	// RestoreAfterTerminate: the runs of the replaced attempts are ended.
	RestoreAfterTerminate = "restore.after-terminate"
	// RestoreAfterStart: the new attempts are started, held paused.
	RestoreAfterStart = "restore.after-start"
	// RestoreAfterResumeParticipants: the servers are resumed; the restored
	// rollouts are not released yet.
	RestoreAfterResumeParticipants = "restore.after-resume-participants"

	// SubmitBetweenBatches: in a submitting process (the starter, the
	// gateway), a batch of a set's submission is queued at its admission
	// and the next is not sent: a submission made again under the same
	// request id must queue exactly the rest, losing and doubling nothing.
	// It kills a client, not a worker, so it is in Clients, not All.
	SubmitBetweenBatches = "submit.between-batches"

	// Acknowledgements: recorded in the set's ledger, then released.

	// GatewayAckRecordedBeforeAnswer: in the process acknowledging (the
	// gateway, through the client library), a batch of receipts is in the
	// set's acknowledgement ledger and the request is neither recorded
	// under its request id nor answered: its repeat must acknowledge
	// nothing twice and deliver nothing again.
	GatewayAckRecordedBeforeAnswer = "gateway.ack-recorded-before-answer"
	// WorkerMidRelease: in the worker, a release batch has released some
	// held results and not the rest, and has not reported: the ledger must
	// send the batch again, and nothing may be released twice or lost.
	WorkerMidRelease = "worker.mid-release"
)

// Clients lists the failpoints that stand in client processes (the
// starter, the gateway) or in the acknowledgement path a trainer drives:
// an integration test of its own kills a process there
// (TestAdmissionSubmitterKilledMidSubmit, TestTrainerLoopAcksUnderCrashes),
// the crash matrix (which kills workers and servers mid-rollout) does not.
var Clients = []string{
	SubmitBetweenBatches,
	GatewayAckRecordedBeforeAnswer,
	WorkerMidRelease,
}

// All lists every failpoint.
var All = []string{
	WorkerModelAnsweredBeforeTranscript,
	WorkerModelAnsweredBeforeReport,
	WorkerModelPrefixWrittenBeforeHeartbeat,
	WorkerModelPrefixHeartbeatBeforeNextChunk,
	WorkerEnvAppliedBeforeTranscript,
	WorkerEnvAppliedBeforeReport,
	EnvAfterApplyBeforeReply,
	CheckpointBetweenFiles,
	EnvRestoreMidInstall,
	RestoreAfterValidate,
	CoordinatorAfterPrepare,
	CoordinatorAfterFreeze,
	CoordinatorAfterPark,
	CoordinatorAfterCommit,
	CoordinatorAfterResumeParticipants,
	RestoreAfterPlan,
	RestoreAfterParticipants,
	RestoreAfterTerminate,
	RestoreAfterStart,
	RestoreAfterResumeParticipants,
}

// EnvVar arms failpoints.
const EnvVar = "TURNSTILE_FAILPOINTS"

type action struct {
	kind string // "kill"
	at   int64  // fire on the at-th pass
	hits int64
}

// Set is a parsed TURNSTILE_FAILPOINTS value.
type Set struct {
	mu      sync.Mutex
	actions map[string]*action
	kill    func()
}

// Parse reads a spec "name=kill@N[,name=kill@N…]". An empty spec arms nothing.
func Parse(spec string) (*Set, error) {
	s := &Set{actions: map[string]*action{}, kill: killSelf}
	for _, part := range strings.Split(spec, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, act, ok := strings.Cut(part, "=")
		if !ok {
			return nil, fmt.Errorf("failpoint %q: want name=kill@N", part)
		}
		if !known(name) {
			return nil, fmt.Errorf("failpoint %q: unknown name (known: %s)", name, strings.Join(append(All[:len(All):len(All)], Clients...), ", "))
		}
		kind, nStr, _ := strings.Cut(act, "@")
		if kind != "kill" {
			return nil, fmt.Errorf("failpoint %q: unknown action %q (only kill)", name, kind)
		}
		n := int64(1)
		if nStr != "" {
			v, err := strconv.ParseInt(nStr, 10, 64)
			if err != nil || v < 1 {
				return nil, fmt.Errorf("failpoint %q: bad count %q", name, nStr)
			}
			n = v
		}
		s.actions[name] = &action{kind: kind, at: n}
	}
	return s, nil
}

// FromEnv parses TURNSTILE_FAILPOINTS.
func FromEnv() (*Set, error) { return Parse(os.Getenv(EnvVar)) }

func known(name string) bool {
	for _, n := range append(All[:len(All):len(All)], Clients...) {
		if n == name {
			return true
		}
	}
	return false
}

// Hit marks a pass through the failpoint name; an armed failpoint whose count
// is reached kills the process. A nil Set is unarmed.
func (s *Set) Hit(name string) {
	if s == nil || len(s.actions) == 0 {
		return
	}
	s.mu.Lock()
	a, ok := s.actions[name]
	if !ok {
		s.mu.Unlock()
		return
	}
	a.hits++
	fire := a.hits == a.at
	s.mu.Unlock()
	if fire {
		s.kill()
	}
}

// SetKill replaces the kill action (for unit tests of this package).
func (s *Set) SetKill(fn func()) { s.kill = fn }

func killSelf() {
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // never return: the signal is on its way
}
