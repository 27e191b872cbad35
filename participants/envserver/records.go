package envserver

import (
	"encoding/json"
	"time"

	"github.com/turnstile-rl/turnstile/participants/protocol"
)

// The records of an environment server's checkpoint. Their section names are
// part of the wire contract (protocol.Section*); their layout is the
// server's own.

// checkpointServerRecord is the one record of SectionServer.
type checkpointServerRecord struct {
	Schema    int                      `json:"schema"`
	Component string                   `json:"component"`
	Name      string                   `json:"name"`
	Envs      []protocol.EnvCapability `json:"envs"`
}

// checkpointSession is one record of SectionSessions: a session without its
// receipts, which go to SectionReceipts.
type checkpointSession struct {
	RolloutID string          `json:"rollout_id"`
	Env       string          `json:"env"`
	Attempt   int             `json:"attempt"`
	Revision  int64           `json:"revision"`
	Retired   bool            `json:"retired"`
	State     json.RawMessage `json:"state,omitempty"`
	// IdleSince is when a retired session was retired or last answered
	// from: a server that installs it keeps its retention clock instead of
	// starting it afresh. Absent in older checkpoints (the install time
	// is used then).
	IdleSince time.Time `json:"idle_since,omitzero"`
}

// checkpointReceipt is one record of SectionReceipts.
type checkpointReceipt struct {
	RolloutID string `json:"rollout_id"`
	RequestID string `json:"request_id"`
	receipt
}

// checkpointFence is one record of SectionFences.
type checkpointFence struct {
	RolloutID string `json:"rollout_id"`
	Fence     int    `json:"fence"`
}
