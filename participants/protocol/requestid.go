package protocol

import "fmt"

// Request ids are derived from the logical position only (rollout, turn,
// tool-call index), never from the attempt or run: a replacement attempt
// re-sending a mutation must name the same request to get the stored answer.

// SeedRequestID is the request id of a rollout's start.
func SeedRequestID(rolloutID string) string { return rolloutID + "/seed" }

// OperateRequestID is the request id of tool call index in turn.
func OperateRequestID(rolloutID string, turn, index int) string {
	return fmt.Sprintf("%s/t%d/c%d", rolloutID, turn, index)
}

// VerifyRequestID is the request id of a rollout's verify.
func VerifyRequestID(rolloutID string) string { return rolloutID + "/verify" }
