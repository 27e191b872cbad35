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

// The failpoints, in one list so a crash matrix can range over them.
const (
	// WorkerEnvAppliedBeforeReport: in the worker, an environment mutation was
	// applied (the server answered) and its activity has not reported yet.
	WorkerEnvAppliedBeforeReport = "worker.env-applied-before-report"
	// WorkerModelAnsweredBeforeReport: the model answered, the activity has not
	// reported.
	WorkerModelAnsweredBeforeReport = "worker.model-answered-before-report"
	// EnvAfterApplyBeforeReply: in the environment server, a mutation was
	// applied and recorded and the reply not yet sent.
	EnvAfterApplyBeforeReply = "env.after-apply-before-reply"
	// CheckpointBetweenFiles: while committing checkpoint artifacts, between two
	// files.
	CheckpointBetweenFiles = "checkpoint.between-files"
	// RestoreAfterValidate: a restore validated its checkpoint and installed
	// nothing yet.
	RestoreAfterValidate = "restore.after-validate"
)

// All lists every failpoint.
var All = []string{
	WorkerEnvAppliedBeforeReport,
	WorkerModelAnsweredBeforeReport,
	EnvAfterApplyBeforeReply,
	CheckpointBetweenFiles,
	RestoreAfterValidate,
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
			return nil, fmt.Errorf("failpoint %q: unknown name (known: %s)", name, strings.Join(All, ", "))
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
	for _, n := range All {
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
