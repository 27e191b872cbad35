package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/internal/strictjson"
)

// ScriptModel is the model name of the generic scripted policy: it drives
// any environment, whatever its tools, by the tool calls its task carries
// (Script).
const ScriptModel = envs.ScriptModel

// ScriptPrefix starts the line of an episode's first user message (the
// environment's first observation) that holds the script: the environment
// shows its task's "script" as `SCRIPT <JSON>` (the Python participant
// library's script_line does).
const ScriptPrefix = "SCRIPT "

// DefaultScriptAnswer is the final answer of a script that names none.
const DefaultScriptAnswer = "done"

// Script is the generic scripted policy. Its script is a JSON list of
// turns, each a list of tool calls {"name", "arguments"} (arguments a JSON
// object), or {"turns": [...], "answer": "..."}: turn i answers with the
// calls of turns[i], and once the turns are spent with the answer (default
// "done"). It is a pure function of the conversation: the turn is the
// number of assistant messages so far, so a restored rollout continues
// where the checkpoint cut it.
type Script struct{}

var _ envs.Policy = Script{}

// scriptCall is one tool call of a script.
type scriptCall struct {
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
}

// script is a parsed script.
type script struct {
	Turns  [][]scriptCall `json:"turns"`
	Answer string         `json:"answer"`
}

// Respond answers the next turn of the script of req's first user message.
func (Script) Respond(req envs.PolicyRequest) (envs.PolicyResponse, error) {
	s, err := findScript(req.Messages)
	if err != nil {
		return envs.PolicyResponse{}, err
	}
	turn := 0
	for _, m := range req.Messages {
		if m.Role == "assistant" {
			turn++
		}
	}
	if turn >= len(s.Turns) {
		return envs.PolicyResponse{Content: s.Answer}, nil
	}
	calls := make([]envs.ToolCall, len(s.Turns[turn]))
	for i, c := range s.Turns[turn] {
		var args bytes.Buffer
		if err := json.Compact(&args, c.Arguments); err != nil {
			return envs.PolicyResponse{}, fmt.Errorf("model %s: script turn %d call %d: arguments: %w", ScriptModel, turn, i, err)
		}
		calls[i] = envs.ToolCall{ID: envs.CallID(req.Messages, i), Name: c.Name, Arguments: args.String()}
	}
	return envs.PolicyResponse{ToolCalls: calls}, nil
}

// findScript reads the script from the SCRIPT line of the first user
// message.
func findScript(msgs []envs.Message) (script, error) {
	for _, m := range msgs {
		if m.Role != "user" {
			continue
		}
		for line := range strings.Lines(m.Content) {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), ScriptPrefix); ok {
				return parseScript([]byte(rest))
			}
		}
		return script{}, fmt.Errorf("model %s: the first user message has no %q line (the environment shows its task's script there)", ScriptModel, strings.TrimSpace(ScriptPrefix))
	}
	return script{}, fmt.Errorf("model %s: no user message holding the %q line", ScriptModel, strings.TrimSpace(ScriptPrefix))
}

// parseScript reads a script, a list of turns or {"turns", "answer"}, and
// checks every call.
func parseScript(raw []byte) (script, error) {
	var s script
	raw = bytes.TrimSpace(raw)
	var err error
	if len(raw) > 0 && raw[0] == '[' {
		err = strictjson.Decode(raw, &s.Turns)
	} else {
		err = strictjson.Decode(raw, &s)
	}
	if err != nil {
		return script{}, fmt.Errorf("model %s: bad %s line: want a list of turns, each a list of {\"name\", \"arguments\"}, or {\"turns\", \"answer\"}: %w", ScriptModel, strings.TrimSpace(ScriptPrefix), err)
	}
	for i, turn := range s.Turns {
		for j, c := range turn {
			if err := c.check(); err != nil {
				return script{}, fmt.Errorf("model %s: script turn %d call %d: %w", ScriptModel, i, j, err)
			}
		}
	}
	if s.Answer == "" {
		s.Answer = DefaultScriptAnswer
	}
	return s, nil
}

// check refuses a call without a name or whose arguments are not a JSON
// object.
func (c scriptCall) check() error {
	if c.Name == "" {
		return errors.New("no tool name")
	}
	if a := bytes.TrimSpace(c.Arguments); len(a) == 0 || a[0] != '{' {
		return fmt.Errorf("tool %s: arguments must be a JSON object, got %s", c.Name, string(c.Arguments))
	}
	return nil
}
