package checkpoint

import (
	"errors"
	"fmt"
	"time"

	"github.com/turnstile-rl/turnstile/participants/protocol"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// The Watchdog: automatic detection of dead environment servers and scoped
// recovery without an operator. One Watchdog per set (ID watchdog/<set>)
// runs on the control task queue, probes each of the set's environment
// servers every Every, and declares one dead only after Misses probes in a
// row went unanswered and at least Bound passed since its last answer. It
// then starts RecoverServer for that server onto a replacement: the first
// standby the operator registered, else the same address once the server's
// supervisor brings it back.

// WatchdogWorkflowName is the workflow type of a set's watchdog.
const WatchdogWorkflowName = "Watchdog"

// ProbeParticipantsName is the watchdog's one activity: probe the servers'
// health routes and count the set's running rollouts.
const ProbeParticipantsName = "ProbeParticipants"

// HoldScheduleName is the watchdog's activity that pauses the set's
// checkpoint schedule from a declaration until its recovery succeeded, and
// releases it then: a scheduled cut of a restarted, still empty server
// would hold none of its rollouts' sessions and would conflict with the
// recovery's restore.
const HoldScheduleName = "HoldSchedule"

// HoldScheduleInput holds (Hold) or releases the set's schedule; Note says
// why, in the schedule's pause note (after WatchdogPauseNote).
type HoldScheduleInput struct {
	Set  string `json:"set"`
	Hold bool   `json:"hold"`
	Note string `json:"note"`
}

// HoldScheduleResult says whether the watchdog holds the schedule paused
// now. A schedule someone else paused is left alone (and not held), and a
// set without a schedule has nothing to hold.
type HoldScheduleResult struct {
	Held bool `json:"held"`
}

// WatchdogPauseNote starts the note of a pause the watchdog made: only
// such a pause is the watchdog's to release.
const WatchdogPauseNote = "turnstile watchdog: "

// SchedulePrefix starts the ID of every checkpoint schedule.
const SchedulePrefix = "checkpoints/"

// ScheduleID is the ID of set's checkpoint schedule: one per set.
func ScheduleID(set string) string { return SchedulePrefix + set }

// QueryWatchdogStatus answers a Watchdog run's WatchdogStatus.
const QueryWatchdogStatus = "status"

// MemoDeclarations is the watchdog's memo field holding its Declarations,
// oldest first: the set's health and the Web UI read them without a
// worker.
const MemoDeclarations = "declarations"

// Watchdog metrics, counted through the worker's SDK metrics handler
// (never while a history replays), labelled by set; Prometheus adds _total.
const (
	MetricServersDeclaredDead = "turnstile_watchdog_declared_dead"
	MetricRolloutsRecovered   = "turnstile_watchdog_rollouts_recovered"
	MetricRecoveriesFailed    = "turnstile_watchdog_recoveries_failed"
)

// SignalStopWatchdog ends a watchdog (what it started runs on).
const SignalStopWatchdog = "stop"

// WatchdogWorkflowID is the ID of set's watchdog: "watchdog/<set>".
func WatchdogWorkflowID(set string) string { return "watchdog/" + set }

// AutoRecoverWorkflowID is the ID of the generation-th automatic recovery
// of set from server: "recover/<set>/<digest>/auto-<generation>". It is
// derived from state the watchdog carries, so a watchdog that is re-run
// finds the recovery it started instead of starting a second.
func AutoRecoverWorkflowID(set, server string, generation int) string {
	return fmt.Sprintf("%s/auto-%d", RecoverServerWorkflowID(set, server), generation)
}

// AutoRecoverRequestID is the restore id of that recovery.
func AutoRecoverRequestID(server string, generation int) string {
	return fmt.Sprintf("auto-%s-%d", ServerDigest(server), generation)
}

// Default watchdog settings: a server is probed every 5 s (each probe
// given 5 s), and declared dead after 3 unanswered probes in a row and at
// least 30 s since its last answer. A slow server still answers its
// health route, which does no work; one missed beat never declares it.
const (
	DefaultWatchEvery   = 5 * time.Second
	DefaultWatchTimeout = 5 * time.Second
	DefaultWatchMisses  = 3
	DefaultWatchBound   = 30 * time.Second
	// DefaultIdleRounds: the watchdog ends after this many rounds in a
	// row in which the set, once seen running, has no running rollout.
	DefaultIdleRounds = 3
)

// WatchSettings tune detection; zero fields take the defaults above.
type WatchSettings struct {
	// Every is the probe interval (a duration such as "5s").
	Every string `json:"every,omitempty"`
	// Timeout bounds one probe.
	Timeout string `json:"timeout,omitempty"`
	// Misses is how many probes in a row must go unanswered.
	Misses int `json:"misses,omitempty"`
	// Bound is the least time since a server's last answer before it is
	// declared dead.
	Bound string `json:"bound,omitempty"`
}

// Detection is WatchSettings parsed, defaults filled in.
type Detection struct {
	Every, Timeout, Bound time.Duration
	Misses                int
}

// Parse checks s and fills in the defaults; the error names the bad field.
func (s WatchSettings) Parse() (Detection, error) {
	d := Detection{Every: DefaultWatchEvery, Timeout: DefaultWatchTimeout, Misses: DefaultWatchMisses, Bound: DefaultWatchBound}
	for _, f := range []struct {
		name, val string
		dst       *time.Duration
	}{{"every", s.Every, &d.Every}, {"timeout", s.Timeout, &d.Timeout}, {"bound", s.Bound, &d.Bound}} {
		if f.val == "" {
			continue
		}
		v, err := time.ParseDuration(f.val)
		if err != nil || v <= 0 {
			return Detection{}, fmt.Errorf("auto_recover.%s %q: want a positive duration such as 5s", f.name, f.val)
		}
		*f.dst = v
	}
	switch {
	case s.Misses < 0:
		return Detection{}, fmt.Errorf("auto_recover.misses %d: want 1 or more (0: %d)", s.Misses, DefaultWatchMisses)
	case s.Misses > 0:
		d.Misses = s.Misses
	}
	if d.Timeout > d.Bound {
		return Detection{}, fmt.Errorf("auto_recover.timeout %s is longer than auto_recover.bound %s", d.Timeout, d.Bound)
	}
	return d, nil
}

// MaxDetect is the longest a dead server goes undeclared: the bound, then
// the misses still to count, then one more interval and probe.
func (d Detection) MaxDetect() time.Duration {
	return max(d.Bound, time.Duration(d.Misses)*d.Every) + d.Every + d.Timeout
}

// Liveness is what the watchdog knows of one server: its probes missed in
// a row and the time of its last answer (or of when watching began).
type Liveness struct {
	Misses     int       `json:"misses"`
	LastAnswer time.Time `json:"last_answer"`
}

// Observe records one probe, answered or not, made at now, and reports
// whether the server is now dead: Misses probes in a row unanswered and at
// least Bound since its last answer. An answer, however late, resets both.
func (d Detection) Observe(l Liveness, answered bool, now time.Time) (Liveness, bool) {
	if answered {
		return Liveness{LastAnswer: now}, false
	}
	l.Misses++
	return l, l.Misses >= d.Misses && now.Sub(l.LastAnswer) >= d.Bound
}

// WatchdogInput starts a set's watchdog.
type WatchdogInput struct {
	Set string `json:"set"`
	// Participants are the environment servers the set's rollouts use.
	Participants []string `json:"participants"`
	// Standby are idle environment servers the operator registered, taken
	// in order as replacements. A standby replaces a server of the same
	// name (its --name): register one per name that may die. With none
	// left, the replacement is the dead server's own address once its
	// supervisor brings it back.
	Standby []string `json:"standby,omitempty"`
	// Root is the checkpoint root recoveries go back to (the newest
	// committed checkpoint of the set there).
	Root     string        `json:"root"`
	Settings WatchSettings `json:"settings"`
	// TaskQueue the recovered rollouts run on; empty means rollout.TaskQueue.
	TaskQueue string `json:"task_queue,omitempty"`
	// State carries the watchdog across continue-as-new; a new watchdog
	// leaves it empty.
	State *WatchdogState `json:"state,omitempty"`
}

// Validate checks a watchdog input; the error names the bad field.
func (in WatchdogInput) Validate() error {
	if err := rollout.ValidateSet(in.Set); err != nil {
		return err
	}
	if len(in.Participants) == 0 {
		return errors.New("participants: name the environment servers to watch")
	}
	for _, f := range []struct {
		what string
		list []string
	}{{"participants", in.Participants}, {"standby", in.Standby}} {
		what, list := f.what, f.list
		if len(list) == 0 {
			continue
		}
		clean, err := protocol.ValidateParticipants(list)
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		for i := range clean {
			if clean[i] != list[i] {
				return fmt.Errorf("%s %q: write a base URL without spaces or a trailing slash", what, list[i])
			}
		}
	}
	if _, err := in.Settings.Parse(); err != nil {
		return err
	}
	return ValidateRoot(in.Root)
}

// WatchedServer is one server slot the watchdog watches: the address it
// watches now (a replacement after a recovery), the address the set's
// rollouts first named, and how many recoveries it has been through.
type WatchedServer struct {
	URL        string   `json:"url"`
	Generation int      `json:"generation"`
	Liveness   Liveness `json:"liveness"`
	// Retry is this server's recovery that failed, to be run again (same
	// id: every step is idempotent) until it succeeds; nil when none is.
	Retry *RecoveryRetry `json:"retry,omitempty"`
}

// RecoveryRetry is a failed recovery waiting to run again. A failure such
// as a checkpoint that prepared the replacement meanwhile (the restore is
// refused checkpoint_conflict until that checkpoint ends) passes; and a
// replacement that answers is never declared dead again, so without a
// retry its rollouts would wait for an operator.
type RecoveryRetry struct {
	// Declaration is the index of the declaration the recovery serves.
	Declaration int    `json:"declaration"`
	Replacement string `json:"replacement"`
	Standby     bool   `json:"standby"`
	// Tries counts the runs that failed; NextAt is when to run it again.
	Tries  int       `json:"tries"`
	NextAt time.Time `json:"next_at"`
}

// RetryAfter is the wait before running a recovery again after its
// tries-th failure: the probe interval, doubled per failure, at most
// MaxRecoveryRetryWait.
func (d Detection) RetryAfter(tries int) time.Duration {
	wait := d.Every
	for i := 1; i < tries && wait < MaxRecoveryRetryWait; i++ {
		wait *= 2
	}
	return min(wait, MaxRecoveryRetryWait)
}

// MaxRecoveryRetryWait bounds the wait between runs of a failed recovery.
const MaxRecoveryRetryWait = time.Minute

// Declaration is one server the watchdog declared dead, and what came of it.
type Declaration struct {
	Server      string    `json:"server"`
	Replacement string    `json:"replacement"`
	DeclaredAt  time.Time `json:"declared_at"`
	// LastAnswer is when the server last answered a probe.
	LastAnswer  time.Time `json:"last_answer"`
	Misses      int       `json:"misses"`
	RecoveredAt time.Time `json:"recovered_at"`
	WorkflowID  string    `json:"workflow_id"`
	// Recovered counts the rollouts moved to the replacement.
	Recovered int `json:"recovered"`
	// Error is the last failure of the recovery while it has not
	// succeeded; Tries counts its runs that failed (it is run again).
	Error string `json:"error,omitempty"`
	Tries int    `json:"tries,omitempty"`
}

// WatchdogState is what a watchdog carries across continue-as-new.
type WatchdogState struct {
	Watched      []WatchedServer `json:"watched"`
	StandbyUsed  int             `json:"standby_used"`
	Declarations []Declaration   `json:"declarations,omitempty"`
	SeenRunning  bool            `json:"seen_running"`
	// ScheduleHeld: the watchdog paused the set's checkpoint schedule for
	// a recovery and has not released it yet.
	ScheduleHeld bool `json:"schedule_held,omitempty"`
	IdleRounds   int  `json:"idle_rounds"`
	Rounds       int  `json:"rounds"`
}

// WatchdogStatus answers QueryWatchdogStatus (and is the watchdog's result).
type WatchdogStatus struct {
	Set   string        `json:"set"`
	Phase string        `json:"phase"`
	State WatchdogState `json:"state"`
}

// ProbeParticipantsInput asks whether each server answers its health
// route within Timeout, and how many rollouts of Set run.
type ProbeParticipantsInput struct {
	Set     string   `json:"set"`
	Servers []string `json:"servers"`
	Timeout string   `json:"timeout"`
}

// ProbeParticipantsResult answers it: Answered[i] for Servers[i].
type ProbeParticipantsResult struct {
	Answered []bool `json:"answered"`
	Running  int    `json:"running"`
}
