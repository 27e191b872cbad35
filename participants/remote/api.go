// Package remote is an environment that forwards to an environment already
// served over HTTP, so the Go environment server can put one behind the
// participant protocol (request-id replay, revision check, attempt fence,
// checkpoint control) without a line of Go per environment. Two kinds:
//
//   - nemo-gym: a NeMo Gym resources server. Start posts the task to
//     /seed_session and keeps the cookies it sets; a tool call posts its
//     arguments to /<tool name> with them; Verify posts the task plus
//     "response" (the function calls and outputs of the episode) to /verify
//     and takes its "reward".
//   - gymnasium: a reset/step server. Start posts {"seed", "options": task}
//     to /reset; the step tool posts {"action"} to /step, which answers
//     {"observation", "reward", "terminated", "truncated"}; Close posts to
//     /close.
//
// A remote is restart_only (after a restore its rollouts start over) unless
// it declares export/restore: GET /turnstile/checkpoint answers
// {"checkpoint_mode": "export_restore"}, POST /turnstile/export (with the
// session's cookies) answers {"state": ...} and POST /turnstile/restore
// {"state": ...} rebuilds a session and sets its cookies. The declaration is
// read once, when the environment is built.
//
// Side effects at the remote cannot be fenced by request id, since the
// remote knows nothing of them; the environment server applies each
// request id at most once, so a retried call is never forwarded twice. A
// call whose outcome is unknown (a 5xx, or the connection lost after the
// request was sent) poisons the session: every later call is refused
// remote_uncertain, so nothing is applied twice and the rollout fails
// rather than continuing on a state nobody knows. A call that never reached
// the remote (connection refused) is an error the caller may retry.
package remote

import (
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/turnstile-rl/turnstile/envs"
)

// Kinds of remote environment.
const (
	KindNeMoGym   = "nemo-gym"
	KindGymnasium = "gymnasium"
)

// Refusal codes of a remote environment (422, like every environment
// refusal).
const (
	// CodeRemoteRefused: the remote answered 4xx; nothing changed there.
	CodeRemoteRefused = "remote_refused"
	// CodeRemoteUncertain: an earlier call's outcome is unknown; the
	// session refuses everything from then on.
	CodeRemoteUncertain = "remote_uncertain"
)

// Routes of the export/restore declaration.
const (
	RouteCheckpoint = "/turnstile/checkpoint"
	RouteExport     = "/turnstile/export"
	RouteRestore    = "/turnstile/restore"
)

// DefaultTimeout bounds one call to the remote.
const DefaultTimeout = 60 * time.Second

// Config names one remote environment.
type Config struct {
	Name string // the environment's name on the wire
	URL  string // base URL of the remote server
	Kind string // KindNeMoGym or KindGymnasium
	// Tools are the tools of a NeMo Gym environment (its agent config
	// declares them, not the resources server); unused for gymnasium.
	Tools []envs.Tool
	// Instructions is the system prompt of every episode (optional).
	Instructions string
	Timeout      time.Duration
}

// ParseSpec parses the value of envserver's --remote flag:
//
//	name=NAME,url=URL,kind=nemo-gym|gymnasium[,tools=FILE][,timeout=DURATION]
//
// tools names a JSON file holding the tool list, in the shape of /v1/envs
// or of an OpenAI/Responses function tool ({"type":"function","name",...}).
func ParseSpec(spec string) (Config, error) {
	cfg := Config{Timeout: DefaultTimeout}
	var toolsFile string
	for _, part := range strings.Split(spec, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok || v == "" {
			return Config{}, fmt.Errorf("remote %q: %q is not key=value", spec, part)
		}
		switch k {
		case "name":
			cfg.Name = v
		case "url":
			cfg.URL = strings.TrimRight(v, "/")
		case "kind":
			cfg.Kind = v
		case "tools":
			toolsFile = v
		case "timeout":
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return Config{}, fmt.Errorf("remote %q: timeout %q is not a positive duration", spec, v)
			}
			cfg.Timeout = d
		default:
			return Config{}, fmt.Errorf("remote %q: unknown key %q (name, url, kind, tools, timeout)", spec, k)
		}
	}
	if toolsFile != "" {
		b, err := os.ReadFile(toolsFile)
		if err != nil {
			return Config{}, fmt.Errorf("remote %q: tools: %w", spec, err)
		}
		if cfg.Tools, err = ParseTools(b); err != nil {
			return Config{}, fmt.Errorf("remote %q: tools file %s: %w", spec, toolsFile, err)
		}
	}
	return cfg, cfg.Validate()
}

// Validate reports the first problem of cfg.
func (cfg Config) Validate() error {
	u, err := url.Parse(cfg.URL)
	switch {
	case cfg.Name == "":
		return fmt.Errorf("remote environment: no name")
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		return fmt.Errorf("remote %s: url %q is not an http(s) URL", cfg.Name, cfg.URL)
	case cfg.Kind != KindNeMoGym && cfg.Kind != KindGymnasium:
		return fmt.Errorf("remote %s: kind %q (want %s or %s)", cfg.Name, cfg.Kind, KindNeMoGym, KindGymnasium)
	case cfg.Kind == KindNeMoGym && len(cfg.Tools) == 0:
		return fmt.Errorf("remote %s: a %s environment needs its tools (tools=FILE)", cfg.Name, KindNeMoGym)
	case cfg.Timeout <= 0:
		return fmt.Errorf("remote %s: timeout %s is not positive", cfg.Name, cfg.Timeout)
	}
	for _, t := range cfg.Tools {
		if t.Name == "" || strings.ContainsAny(t.Name, "/?#%") {
			return fmt.Errorf("remote %s: tool name %q cannot be a route", cfg.Name, t.Name)
		}
	}
	return nil
}
