// Package conformance drives a running participant (an environment server
// in any language) through every numbered rule of docs/protocol/RULES.md
// and reports one Result per rule, with the evidence: the oracle a
// participant passes before it holds rollouts through checkpoint and
// restore. bin/conformance is its command line; Go tests call Run.
//
// The kit needs a fresh participant (control phase idle, admission open)
// hosting one export_restore environment it can drive (Config.Env, Task,
// Tool, Args), optionally a restart_only or stateless one (RestartEnv), and a
// directory the participant can write checkpoints into (Config.Dir). It uses
// rollout ids with a random prefix and its own checkpoint ids, and leaves
// admission open.
package conformance

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
)

// Verdicts of a rule.
const (
	Pass = "PASS"
	Fail = "FAIL"
	// Skip: the participant lacks what the rule needs (e.g. no
	// restart-only environment); it does not fail a run.
	Skip = "SKIP"
)

// Defaults fit the Go envserver's catalog.
const (
	DefaultEnv         = "counter"
	DefaultTask        = `{"target":5}`
	DefaultTool        = "increment"
	DefaultArgs        = `{"amount":1}`
	DefaultRestartEnv  = "arithmetic"
	DefaultRestartTask = `{"a":2,"b":3,"op":"+"}`
	DefaultReplayEnv   = "sandbox"
	DefaultReplayTask  = `{"files":{"a.txt":"abcd"}}`
	// DefaultReplayCalls write a.txt, then append to it three times: the
	// answer of each append names the file's new size, which only a
	// rebuilt state gets right.
	DefaultReplayCalls = `[{"tool":"write_file","arguments":{"path":"a.txt","content":"a"}},` +
		`{"tool":"append_file","arguments":{"path":"a.txt","content":"b"}},` +
		`{"tool":"append_file","arguments":{"path":"a.txt","content":"c"}},` +
		`{"tool":"append_file","arguments":{"path":"a.txt","content":"d"}}]`
)

// ParseCalls reads a JSON array of calls, such as DefaultReplayCalls.
func ParseCalls(raw string) ([]Call, error) {
	var calls []Call
	if err := json.Unmarshal([]byte(raw), &calls); err != nil {
		return nil, fmt.Errorf("replay calls %q: want a JSON array of {\"tool\",\"arguments\"}: %w", raw, err)
	}
	for i, c := range calls {
		if c.Tool == "" {
			return nil, fmt.Errorf("replay call %d names no tool", i+1)
		}
	}
	return calls, nil
}

// Config says which participant to drive and how.
type Config struct {
	// URL is the participant's base URL (http:// or https://).
	URL          string
	DataToken    string
	ControlToken string
	// HTTPClient carries TLS settings; nil means http.DefaultClient.
	HTTPClient *http.Client
	// Env is an export_restore environment; Task a task of it; Tool and
	// Args a call it accepts at least three times in a row from the
	// task's start, whose outcome depends only on the session state.
	Env  string
	Task json.RawMessage
	Tool string
	Args json.RawMessage
	// RestartEnv is a restart_only or stateless environment with task
	// RestartTask, for R14; empty skips R14.
	RestartEnv  string
	RestartTask json.RawMessage
	// ReplayEnv is a replay environment with task ReplayTask and the four
	// calls ReplayCalls (three before the cut, one after), for R27; empty,
	// or an environment the participant does not host, skips R27.
	ReplayEnv   string
	ReplayTask  json.RawMessage
	ReplayCalls []Call
	// Dir is an absolute directory the participant can create checkpoint
	// directories in.
	Dir string
	// Prefix starts every rollout id the kit uses; empty picks a random
	// one, so runs against a long-lived participant never collide.
	Prefix string
	// RetiredSessions is how many verified sessions the participant keeps
	// the receipts of (the Go server's --retired-sessions): the kit verifies
	// one more and checks that the oldest's requests are then refused
	// session_retired (R3). 0 leaves that part of R3 undriven.
	RetiredSessions int
	// NoControlURL, when set, is a second instance of the participant
	// started without a control token: every control route must answer it
	// 404 control_disabled (R2). Empty leaves that part of R2 undriven.
	NoControlURL string
	// EndToEnd, when set, runs last, after the kit cleaned up its sessions:
	// a small set of rollouts through the coordinator on the participant,
	// with a checkpoint, a kill and a restore (its result is the line E2E).
	EndToEnd EndToEnd
}

// EndToEnd drives a real set through the coordinator on the participant
// (cmd/conformance wires one that starts a Temporal dev server, a policy
// server and a worker) and returns the evidence of a pass.
type EndToEnd func(ctx context.Context, p Target) (evidence string, err error)

// Target is the participant under test, as the end-to-end stage needs it.
type Target struct {
	URL, DataToken, ControlToken string
	HTTPClient                   *http.Client
	// Env is the export_restore environment the kit drove; Prefix starts
	// the ids the stage may use; Dir is where it may put checkpoints.
	Env, Prefix, Dir string
}

// IDs of the lines of a run that are no numbered rule.
const (
	// CleanupID: the kit retired the live sessions of its rollouts, so a
	// later checkpoint of the participant does not count them as members.
	CleanupID = "END"
	// EndToEndID: Config.EndToEnd's verdict.
	EndToEndID = "E2E"
)

// Rule is one numbered rule of RULES.md.
type Rule struct {
	ID   string // "R1"
	Name string
}

// Result is the verdict on one rule.
type Result struct {
	Rule
	Verdict  string // Pass, Fail or Skip
	Evidence string
}

// Rules lists every numbered rule the kit checks, in order (a run also
// reports RuleCleanup and, with Config.EndToEnd, RuleEndToEnd).
func Rules() []Rule {
	checks := allChecks()
	out := make([]Rule, len(checks))
	for i, c := range checks {
		out[i] = c.Rule
	}
	return out
}

// Print writes one line per result, "PASS R3 request-id replay: evidence".
func Print(w io.Writer, results []Result) error {
	for _, r := range results {
		if _, err := fmt.Fprintf(w, "%s %s %s: %s\n", r.Verdict, r.ID, r.Name, r.Evidence); err != nil {
			return err
		}
	}
	return nil
}

// Failed reports whether any rule failed.
func Failed(results []Result) bool {
	for _, r := range results {
		if r.Verdict == Fail {
			return true
		}
	}
	return false
}
