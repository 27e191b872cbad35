// Package notes is the catalog entry of the notes environment, which no Go
// code hosts: the Python participant in clients/python/examples/participant serves
// it behind the participant protocol. The entry holds what the Go side needs
// to run rollouts on it: the task generator (it draws only the number of
// edits; the participant derives the notebook and the edits from the seed),
// the turn limit and the scripted policy (scripted-notes on the policy
// server).
package notes

import (
	"encoding/json"
	"math/rand/v2"

	"github.com/turnstile-rl/turnstile/envs"
)

// Name is the environment's name on the wire.
const Name = "notes"

// Host is where the environment runs.
const Host = "clients/python/examples/participant"

// Tools the environment declares (clients/python/examples/participant/notes.py).
const (
	ToolList   = "list_notes"
	ToolWrite  = "write_note"
	ToolAppend = "append_note"
	ToolDelete = "delete_note"
)

// Generated tasks ask for minSteps..maxSteps edits (the environment takes
// 1..6).
const (
	minSteps = 2
	maxSteps = 4
)

// Entry is the notes environment's line in the catalog (envs/catalog).
func Entry() envs.Entry {
	return envs.Entry{
		Name:         Name,
		Remote:       Host,
		GenerateTask: generateTask,
		// One list_notes, at most four edits, then "done": 6 at most; the
		// rest is room for refused calls and for other policies.
		MaxTurns: 12,
		Policy:   Policy{},
	}
}

func generateTask(r *rand.Rand) (json.RawMessage, error) {
	return json.Marshal(struct {
		Steps int `json:"steps"`
	}{Steps: minSteps + r.IntN(maxSteps-minSteps+1)})
}
