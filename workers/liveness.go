package workers

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/turnstile-rl/turnstile/activities/coordinator"
)

// Environment variables bounding what a hung or cut-off environment server
// costs the checkpoint coordinator (coordinator.Liveness). Unset or blank:
// the default.
const (
	// EnvProbeEvery is how often a participant's health route is probed
	// while a control call to it runs (a Go duration, e.g. "10s").
	EnvProbeEvery = "TURNSTILE_PARTICIPANT_PROBE_EVERY"
	// EnvProbeTimeout is how long each probe waits for an answer.
	EnvProbeTimeout = "TURNSTILE_PARTICIPANT_PROBE_TIMEOUT"
	// EnvProbeMisses is how many probes in a row must go unanswered before
	// the participant is declared hung and the call given up.
	EnvProbeMisses = "TURNSTILE_PARTICIPANT_PROBE_MISSES"
	// EnvAbortResumeWindow is how long an abort keeps asking a participant
	// that answers nothing to resume.
	EnvAbortResumeWindow = "TURNSTILE_ABORT_RESUME_WINDOW"
)

// Liveness is the coordinator's bounds on a participant that stops
// answering.
type Liveness struct {
	Probe             coordinator.Liveness
	AbortResumeWindow time.Duration
}

// DefaultWorkerLiveness is what a worker runs with when nothing is set.
var DefaultWorkerLiveness = Liveness{Probe: coordinator.DefaultLiveness, AbortResumeWindow: coordinator.DefaultAbortResumeWindow}

// maxLivenessDuration bounds every liveness duration, so a typo (hours
// for seconds) is refused rather than obeyed.
const maxLivenessDuration = 24 * time.Hour

// livenessFromLookup reads Liveness through lookup; a bad value is an
// error naming its variable.
func livenessFromLookup(lookup func(string) (string, bool)) (Liveness, error) {
	l := DefaultWorkerLiveness
	for _, f := range []struct {
		env string
		dst *time.Duration
	}{
		{EnvProbeEvery, &l.Probe.Every},
		{EnvProbeTimeout, &l.Probe.Timeout},
		{EnvAbortResumeWindow, &l.AbortResumeWindow},
	} {
		v, ok := lookup(f.env)
		if !ok || strings.TrimSpace(v) == "" {
			continue
		}
		d, err := time.ParseDuration(strings.TrimSpace(v))
		if err != nil || d <= 0 || d > maxLivenessDuration {
			return Liveness{}, fmt.Errorf("%s=%q: want a duration above 0 and at most %s, like 10s", f.env, v, maxLivenessDuration)
		}
		*f.dst = d
	}
	if v, ok := lookup(EnvProbeMisses); ok && strings.TrimSpace(v) != "" {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 1 || n > 1000 {
			return Liveness{}, fmt.Errorf("%s=%q: want a whole number from 1 to 1000", EnvProbeMisses, v)
		}
		l.Probe.Misses = n
	}
	if l.Probe.Timeout > l.Probe.Every {
		return Liveness{}, fmt.Errorf("%s=%s is longer than %s=%s: a probe must end before the next one", EnvProbeTimeout, l.Probe.Timeout, EnvProbeEvery, l.Probe.Every)
	}
	return l, nil
}
